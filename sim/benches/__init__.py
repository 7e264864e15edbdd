"""Testbenches (:class:`mactile.sim.Bench` subclasses) of the registered designs, and the
design-to-bench mapping (here, where the benches live: the registry in :mod:`mactile.rtl`
names no simulation code).

Adding a design's bench: write the :class:`~mactile.sim.Bench` subclass in a module here
and add ``"design-name": "module:Class"`` to :data:`BENCHES`.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

__all__ = ["BENCHES", "bench_path", "load_bench"]

_MAC = "mactile.sim.benches.mac:MacBench"
_DIALECT = "mactile.sim.benches.dialect"
_FP4TC = "mactile.sim.benches.fp4tc"

#: Registry design name -> ``"module:callable"`` building its bench from its parameters.
BENCHES: dict[str, str] = {
    **{name: _MAC for name in ("mac-int4", "mac-int5", "mac-int8", "mac-fp4", "mac-fp6-e2m3",
                               "mac-fp6-e3m2", "mac-dialectfp4", "mac-dialectfp4-int4",
                               "mac-dialectfp4-decode", "mac-dialectfp4-int4-decode")},
    "dialect-quantizer": f"{_DIALECT}:QuantizerBench",
    "dialect-dequantizer": f"{_DIALECT}:DequantizerBench",
    "dialect-mse-selector": f"{_DIALECT}:MseSelectorBench",
    "dialect-mse-selector-parallel": f"{_DIALECT}:MseSelectorBench",
    "dialect-quantizer-cg": f"{_DIALECT}:QuantizerBench",
    "dialect-dequantizer-cg": f"{_DIALECT}:DequantizerBench",
    "dialect-mse-selector-cg": f"{_DIALECT}:MseSelectorBench",
    "dialect-chain": f"{_DIALECT}:ChainBench",
    "nvfp4-decoder": f"{_FP4TC}:DecoderBench",
    "mxfp4-decoder": f"{_FP4TC}:DecoderBench",
    "razer-weight-decoder": f"{_FP4TC}:DecoderBench",
    "razer-act-decoder": f"{_FP4TC}:DecoderBench",
    "fp32-adder": f"{_FP4TC}:Fp32AddBench",
    "nvfp4-tc": f"{_FP4TC}:TensorCoreBench",
    "mxfp4-tc": f"{_FP4TC}:TensorCoreBench",
    "razer-tc": f"{_FP4TC}:TensorCoreBench",
    "nvfp4-tc-os": f"{_FP4TC}:OuterCoreBench",
    "mxfp4-tc-os": f"{_FP4TC}:OuterCoreBench",
    "razer-tc-os": f"{_FP4TC}:OuterCoreBench",
    **{name: "mactile.sim.benches.nestedfp_pe:NestedFpPeBench"
       for name in ("nestedfp-pe", "fp16-mac", "fp8-mac")},
    **{name: "mactile.sim.benches.intgroup_dot:GroupDotBench"
       for name in ("flexq-int6-dot", "int6-mult-dot", "int8-mult-dot")},
    **{f"{b}-os-4x4{d}": f"{_FP4TC}:OuterCoreBench" for b in ("nvfp4-tc", "razer-tc") for d in ("", "-row")},
}


def bench_path(design) -> str:
    """``"module:callable"`` of a design's bench: its own ``bench`` field (designs defined
    outside the package), else :data:`BENCHES`; ``""`` where it has none."""
    return getattr(design, "bench", "") or BENCHES.get(design.name, "")


def load_bench(design) -> Callable[..., Any]:
    """The bench class of a design (a :class:`mactile.rtl.registry.Design`)."""
    path = bench_path(design)
    if not path:
        raise ValueError(f"{design.name}: no testbench (mactile.sim.benches.BENCHES has none)")
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)
