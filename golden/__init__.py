"""Bit-exact golden models of every number format and datapath in mactile.

Needs NumPy only: no RTL, simulator or GPU library is imported here. RTL generators,
testbenches and GPU packers derive their constants from the spec objects below and
check themselves against these models.

Element formats (:mod:`.elements`): ``FP4_E2M1``, ``FP6_E2M3``, ``FP6_E3M2``,
``FP8_E4M3``, ``FP8_E5M2``, ``E3M3``, ``E8M0``, ``FP16``, ``INT4`` ... ``UINT8``; each with
its classifier record (``.classes``: zero, subnormal, normal, inf, nan codes).
Block formats (:mod:`.registry`): ``nvfp4``, ``mxfp4``, ``razer``, ``razer-act``,
``razer-g128``, ``dialectfp4``, ``int-group``, ``nestedfp``, ``nestedfp8``, and the OCP MX
family from its storage entries (:mod:`.mx`: ``mxfp8-e4m3``, ``mxfp8-e5m2``, ``mxfp6-e2m3``,
``mxfp6-e3m2``, ``mxint8``).
Quantization conventions of ``nvfp4``/``mxfp4`` and the torchao/microxcaling presets:
:mod:`.conventions`.
"""
from .block import BlockFormat, InputError, QuantError, Quantized
from .conventions import (DEFAULT_CONVENTION, PRESETS, Convention, Dequantization, ElementScaling,
                          ElementTies, MXScaleRule, NegativeZero, ScaleArgument, convention_for,
                          require_default_convention)
from .dialect import FORMATBOOK, CountTie, DialectFP4, DialectSelect
from .elements import *  # noqa: F401,F403
from .elements import __all__ as _elements_all
from .fp4blocks import MXFP4, NVFP4, RaZeR, RaZeRAct
from .intgroup import IntGroup, bitplane_matmul, bitplanes, plane_weights
from .nestedfp import NestedFP, NestedFP8, nestedfp_eligible, nestedfp_merge, nestedfp_split
from .razer_g128 import G128TensorScale, RaZeRG128
from .reset_temperature import ReductionLayout, StepAwareTemperature
from .registry import BLOCK_FORMATS, get_format

__all__ = list(_elements_all) + [
    "BlockFormat", "InputError", "Quantized", "QuantError",
    "NVFP4", "MXFP4", "RaZeR", "RaZeRAct", "RaZeRG128", "G128TensorScale",
    "DialectFP4", "DialectSelect", "CountTie", "FORMATBOOK",
    "IntGroup", "bitplanes", "plane_weights", "bitplane_matmul",
    "NestedFP", "NestedFP8", "nestedfp_split", "nestedfp_merge", "nestedfp_eligible",
    "BLOCK_FORMATS", "get_format",
    "Convention", "DEFAULT_CONVENTION", "PRESETS", "convention_for", "require_default_convention",
    "MXScaleRule", "ElementTies", "NegativeZero", "ScaleArgument", "ElementScaling",
    "Dequantization",
    "StepAwareTemperature", "ReductionLayout",
]
