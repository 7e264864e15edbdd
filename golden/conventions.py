"""Quantization conventions of the FP4 block formats, named, and the peers' presets.

Quantizers that implement "the same" NVFP4 or MXFP4 differ in a handful of choices that
the format specifications leave open or that implementations made differently. Each is an
option of :class:`Convention`; a ``Convention`` is a field of :class:`~.fp4blocks.NVFP4` and
:class:`~.fp4blocks.MXFP4`. The default, ``ocp``, is the papers' and the OCP MX
specification's reading and what mactile's RTL and GPU kernels implement. Presets name the
settings of other implementations (docs/formats.md lists every difference and the peer's
source location; ``tests/golden/test_interop.py`` checks them bit for bit against vectors
the peers made):

``ocp``
    the default for every format;
``torchao``
    ``torchao.prototype.mx_formats`` (0.18): NVFP4 as its inference configs run it
    (``NVFP4Tensor.to_nvfp4`` with a per-tensor scale; ``tensor_scale=False`` is
    ``to_nvfp4`` without one), MXFP4 with its RCEIL scale rule (``mx_scale_rule`` selects
    ``to_mx``'s other ``ScaleCalculationMode`` values);
``microxcaling``
    ``microsoft/microxcaling``'s ``quantize_mx_op`` (MXFP4 only).

Examples
--------
>>> from mactile.golden import MXFP4, convention_for
>>> c = convention_for("mxfp4", "microxcaling")
>>> c.element_ties.value, c.negative_zero.value
('away', 'positive-after-scaling')
>>> MXFP4(convention=c).describe()
"mxfp4(block_size=32, convention='microxcaling')"
>>> MXFP4(convention=c).is_default_convention()
False
"""
from __future__ import annotations

import dataclasses
import enum
import numbers
from dataclasses import dataclass

import numpy as np

from .elements import FP8_E4M3

__all__ = [
    "Convention", "MXScaleRule", "ElementTies", "NegativeZero", "ScaleArgument",
    "ElementScaling", "Dequantization", "DEFAULT_CONVENTION", "PRESETS", "OPTIONS",
    "convention_for", "require_default_convention",
]


class MXScaleRule(enum.Enum):
    """How an MX block's E8M0 scale exponent ``e`` follows from the block max ``amax``
    (``emax = 2``, FP4's largest exponent; every rule clamps ``e`` below at -127, and a
    block that would need ``e > 127`` is refused: :meth:`~.fp4blocks.MXFP4.input_range`).

    ``FLOOR``
        OCP MX v1.0 Sec. 6.3: ``e = floor(log2 amax) - emax``; the largest elements may
        saturate at 6.
    ``RCEIL``
        NVIDIA's rule (cuBLAS block quantization; PTX ``cvt.rp.satfinite.ue8m0x2.f32``):
        ``e = ceil(log2(amax / 6))`` with ``amax / 6`` computed in FP32 from the FP32 block
        max, so nothing saturates.
    ``CEIL``
        ``e = ceil(log2 amax) - emax`` (torchao's ``CEIL``).
    ``EVEN``
        torchao's ``EVEN``: ``amax`` is first rounded to FP4's precision (one mantissa
        bit, ties away from zero), then ``FLOOR``: a block max in ``[1.75, 2) * 2**k``
        moves up a binade instead of saturating.
    """

    FLOOR = "floor"
    RCEIL = "rceil"
    CEIL = "ceil"
    EVEN = "even"


class ElementTies(enum.Enum):
    """Where an element exactly halfway between two FP4 values goes: ``EVEN`` (IEEE
    roundTiesToEven, OCP MX Sec. 5.3.1) or ``AWAY`` from zero (microxcaling's
    ``round="nearest"``)."""

    EVEN = "even"
    AWAY = "away"


class NegativeZero(enum.Enum):
    """The sign of a zero element.

    ``KEEP``
        a ``-0.0`` input is stored as ``-0`` (code ``0b1000``, dequantizes to -0.0);
    ``POSITIVE``
        a ``-0.0`` input is stored as ``+0``;
    ``POSITIVE_AFTER_SCALING``
        every element whose *scaled* value (``x / scale``, in FP32 for float32 input) is a
        zero is stored as ``+0``: a ``-0.0`` input, and a negative element so small that
        scaling underflows it (microxcaling: ``torch.sign`` of that zero is +0; block
        ``[2**100, -1e-45, 0, ...]`` gives ``+0`` for ``-1e-45``).

    Under every value a negative element whose scaled value is non-zero but rounds to FP4
    zero keeps its sign (``-0``), but in an NVFP4 block whose scale is zero (stored as +0
    codes).
    """

    KEEP = "keep"
    POSITIVE = "positive"
    POSITIVE_AFTER_SCALING = "positive-after-scaling"


class ScaleArgument(enum.Enum):
    """The FP32 argument of NVFP4's E4M3 block scale, one rounding per operation:
    ``PRODUCT`` ``amax_i / (T * 6)`` (RaZeR Eq. 2) or ``SEQUENTIAL`` ``(amax_i / 6) / T``
    (torchao). Without a tensor scale both are ``amax_i / 6``."""

    PRODUCT = "product"
    SEQUENTIAL = "sequential"


class ElementScaling(enum.Enum):
    """How NVFP4 scales an element before rounding it to FP4, in FP32: ``DIVIDE``
    ``x / (T * s)`` (RaZeR Eq. 3) or ``RECIPROCAL`` ``x * ((1 / T) / s)`` (torchao, to
    match its Triton kernel). They differ where the quotient is an exact FP4 tie and the
    reciprocal is inexact (``s`` not a power of two), and where ``(1 / T) / s`` overflows
    FP32 (``0 < T < 2**-128``): ``RECIPROCAL`` then saturates every non-zero element at
    +-6, as torchao does, and keeps each zero's sign (torchao's ``0 * inf`` gives NaN
    there, a peer bug: docs/formats.md)."""

    DIVIDE = "divide"
    RECIPROCAL = "reciprocal"


class Dequantization(enum.Enum):
    """How a dequantized NVFP4 value is formed: ``EXACT`` ``q * s * T`` (float64, where it
    is exact) or ``FP32`` ``fl32(fl32(T * s) * q)`` (torchao's ``NVFP4Tensor.dequantize``:
    the combined scale rounded to FP32, then the product rounded again)."""

    EXACT = "exact"
    FP32 = "fp32"


@dataclass(frozen=True, kw_only=True)
class Convention:
    """The open choices of an FP4 block quantizer (defaults: the ``ocp`` convention).

    Parameters
    ----------
    tensor_scale : bool
        NVFP4: compute the FP32 tensor scale ``T = amax / (448 * 6)`` (default); without
        it ``T = 1`` and none is stored.
    block_scale_floor : float
        NVFP4: the smallest block scale, an E4M3 value; 0 (default) keeps E4M3 subnormal
        and zero scales, torchao floors at ``2**-6`` (E4M3's smallest normal).
    scale_argument : ScaleArgument
        NVFP4: the block-scale argument's order of operations.
    element_scaling : ElementScaling
        NVFP4: divide by ``T * s`` or multiply by ``(1 / T) / s``.
    dequantize : Dequantization
        NVFP4: exact dequantized values or torchao's FP32 ones.
    mx_scale_rule : MXScaleRule
        MXFP4: the E8M0 scale rule.
    element_ties : ElementTies
        Both: FP4 rounding of exact ties.
    negative_zero : NegativeZero
        Both: which zero elements are stored as +0 (a -0.0 input; with
        ``positive-after-scaling`` also negatives that underflow when scaled).
    """

    tensor_scale: bool = True
    block_scale_floor: float = 0.0
    scale_argument: ScaleArgument = ScaleArgument.PRODUCT
    element_scaling: ElementScaling = ElementScaling.DIVIDE
    dequantize: Dequantization = Dequantization.EXACT
    mx_scale_rule: MXScaleRule = MXScaleRule.FLOOR
    element_ties: ElementTies = ElementTies.EVEN
    negative_zero: NegativeZero = NegativeZero.KEEP

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            kind = _KINDS[f.name]
            if kind is bool:
                if isinstance(v, np.bool_):  # a NumPy scalar, stored as a Python bool
                    v = bool(v)
                    object.__setattr__(self, f.name, v)
                if not isinstance(v, bool):
                    raise ValueError(f"convention option {f.name} must be True or False, got {v!r}")
            elif kind is float:
                # A real number only: True and '0.015625' are not a scale (float() would
                # take both).
                if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
                    raise ValueError(f"convention option {f.name} must be a number, got {v!r}")
                object.__setattr__(self, f.name, float(v))
            elif not isinstance(v, kind):
                try:
                    object.__setattr__(self, f.name, kind(v))
                except ValueError:
                    raise ValueError(f"unknown {f.name} {v!r}; choose "
                                     f"{', '.join(m.value for m in kind)}") from None
        floor = self.block_scale_floor
        if not (0.0 <= floor <= FP8_E4M3.max_value) or floor not in FP8_E4M3.values:
            raise ValueError(f"block_scale_floor must be an E4M3 value in [0, 448] (torchao "
                             f"uses 2**-6 = 0.015625), got {floor!r}")

    def differences(self, other: "Convention | None" = None) -> dict[str, object]:
        """Options that differ from ``other`` (default: the ``ocp`` convention), by name,
        with this convention's values (enums as their strings)."""
        other = DEFAULT_CONVENTION if other is None else other
        return {f.name: _show(getattr(self, f.name)) for f in dataclasses.fields(self)
                if getattr(self, f.name) != getattr(other, f.name)}

    @property
    def is_default(self) -> bool:
        """True for the ``ocp`` convention (the one mactile's RTL and GPU paths implement)."""
        return self == DEFAULT_CONVENTION

    def label(self, fmt_name: str | None = None) -> str:
        """The preset's name if this is one (for ``fmt_name``, or any format), else the
        nearest preset plus the options that differ: ``"torchao+tensor_scale=False"``."""
        best = None
        for name, by_fmt in PRESETS.items():
            for f, conv in by_fmt.items():
                if fmt_name is not None and f != fmt_name:
                    continue
                diff = self.differences(conv)
                if best is None or len(diff) < len(best[1]):
                    best = (name, diff)
        name, diff = best
        return name + "".join(f"+{k}={v}" for k, v in diff.items())


def _show(v):
    return v.value if isinstance(v, enum.Enum) else v


_KINDS = {"tensor_scale": bool, "block_scale_floor": float, "scale_argument": ScaleArgument,
          "element_scaling": ElementScaling, "dequantize": Dequantization,
          "mx_scale_rule": MXScaleRule, "element_ties": ElementTies,
          "negative_zero": NegativeZero}

#: The ``ocp`` convention: every option at its default.
DEFAULT_CONVENTION = Convention()

#: Options each format takes (a non-default value of another option is refused).
OPTIONS: dict[str, tuple[str, ...]] = {
    "nvfp4": ("tensor_scale", "block_scale_floor", "scale_argument", "element_scaling",
              "dequantize", "element_ties", "negative_zero"),
    "mxfp4": ("mx_scale_rule", "element_ties", "negative_zero"),
}

#: Preset name -> format name -> convention. A preset that lacks a format has no
#: quantizer for it.
PRESETS: dict[str, dict[str, Convention]] = {
    "ocp": {"nvfp4": DEFAULT_CONVENTION, "mxfp4": DEFAULT_CONVENTION},
    "torchao": {
        "nvfp4": Convention(block_scale_floor=2.0 ** -6, scale_argument=ScaleArgument.SEQUENTIAL,
                            element_scaling=ElementScaling.RECIPROCAL,
                            dequantize=Dequantization.FP32),
        "mxfp4": Convention(mx_scale_rule=MXScaleRule.RCEIL),
    },
    "microxcaling": {
        "mxfp4": Convention(element_ties=ElementTies.AWAY,
                            negative_zero=NegativeZero.POSITIVE_AFTER_SCALING),
    },
}


def check_options(fmt_name: str, conv: Convention) -> None:
    """Refuse a non-default value of an option ``fmt_name`` does not take."""
    allowed = OPTIONS.get(fmt_name, ())
    for k, v in conv.differences().items():
        if k not in allowed:
            raise ValueError(_not_applicable(fmt_name, f"{k}={v}"))


def _not_applicable(fmt_name: str, option: str) -> str:
    name = option.split("=")[0]
    takers = [f for f, opts in OPTIONS.items() if name in opts]
    verb = "takes" if len(takers) == 1 else "take"
    return (f"{fmt_name}: convention option {option} does not apply (only "
            f"{' and '.join(takers)} {verb} it)")


def convention_for(fmt_name: str, preset: str | None = None, **options) -> Convention:
    """The convention of ``preset`` (default ``ocp``) for format ``fmt_name``, with
    ``options`` overriding single options (strings or enum members).

    Raises
    ------
    ValueError
        For an unknown preset or option, a preset without a quantizer of this format, a
        value out of range, or an option the format does not take.
    """
    preset = "ocp" if preset is None else preset
    if not isinstance(preset, str):  # a list or dict is not a name (and not hashable)
        raise TypeError(f"convention must be a preset name ({', '.join(PRESETS)}), got "
                        f"{preset!r} ({type(preset).__name__})")
    if preset not in PRESETS:
        raise ValueError(f"unknown convention {preset!r}; choose {', '.join(PRESETS)}")
    unknown = set(options) - set(_KINDS)
    if unknown:  # before "has no convention options": `threshold=2` is no convention option
        raise ValueError(f"{fmt_name}: unknown option(s) {', '.join(sorted(unknown))}; "
                         f"get_format takes block_size, special_values, select, bits, "
                         f"convention and the convention options {', '.join(_KINDS)}")
    if fmt_name not in OPTIONS:
        if options or preset != "ocp":
            raise ValueError(f"{fmt_name} has no convention options (only "
                             f"{' and '.join(OPTIONS)} do)")
        return DEFAULT_CONVENTION
    if fmt_name not in PRESETS[preset]:
        raise ValueError(f"the {preset} convention has no {fmt_name} quantizer ({preset} "
                         f"implements {', '.join(PRESETS[preset])} only)")
    for k in options:
        if k not in OPTIONS[fmt_name]:
            raise ValueError(_not_applicable(fmt_name, k))
    conv = dataclasses.replace(PRESETS[preset][fmt_name], **options)
    check_options(fmt_name, conv)
    return conv


def require_default_convention(fmt, consumer: str) -> None:
    """Refuse a format spec whose convention is not the default, for a ``consumer`` (an
    RTL design, a GPU packer or kernel) that implements the default only.

    Raises
    ------
    ValueError
        Naming the consumer, the format and every option that differs.
    """
    if fmt.is_default_convention():
        return
    diff = ", ".join(f"{k}={v}" for k, v in fmt.convention.differences().items())
    raise ValueError(f"{consumer} implements {fmt.name} with the default (ocp) convention "
                     f"only; this {fmt.name} uses convention {fmt.convention.label(fmt.name)!r} "
                     f"({diff}). Quantize with the default convention for it.")
