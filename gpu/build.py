"""The CUDA-core and ReSET kernel families: one combined source (generated golden constants
+ the ``.cu`` templates) and their name templates. Kernels come from
:func:`mactile.gpu.prebuilt.get_kernel` like every other family: a cubin prebuilt with the
local ``nvcc`` when ``MACTILE_CUBIN_DIR`` holds one for this exact source, else NVRTC.
"""
from __future__ import annotations

import functools
import hashlib

from .formats import fp4_decode_header, prelude, reset_header
from .prebuilt import get_kernel
from .runtime import load_source

__all__ = ["FAMILIES", "full_source", "source_key", "kernel", "default_instances", "prebuilt_jobs"]

#: family -> (C++ name template, kernel source file); template args by keyword.
FAMILIES = {
    "w4a16_cc": "mt::w4a16_cc<{F}, {MT}, {S}>",
    "w4a4_gemv": "mt::w4a4_gemv<{MT}, {S}>",
    "w4a4_gemv_rows": "mt::w4a4_gemv_rows<{MT}, {NW}>",
    "nvfp4_quantize_act": "nvfp4_quantize_act",  # extern "C", global namespace
    "nvfp4_quantize_act_solo": "nvfp4_quantize_act_solo",  # extern "C", global namespace
    "reset_temperature_step": "mt::reset_temperature_step<{CL}, {R}>",
}
_ARGS = {"w4a16_cc": ("F", "MT", "S"), "w4a4_gemv": ("MT", "S"), "w4a4_gemv_rows": ("MT", "NW"),
         "nvfp4_quantize_act": (), "nvfp4_quantize_act_solo": (), "reset_temperature_step": ("CL", "R")}
_FILES = ("w4a16_cc.cu", "w4a4.cu", "reset_temperature.cu")


@functools.lru_cache(maxsize=1)
def full_source() -> str:
    return load_source(*_FILES, prelude=prelude() + reset_header() + fp4_decode_header())


def source_key() -> str:
    return hashlib.sha256(full_source().encode()).hexdigest()[:16]


def _expr(family: str, targs: dict) -> str:
    if family not in FAMILIES:
        raise ValueError(f"unknown kernel family {family!r}")
    want = _ARGS[family]
    if set(targs) != set(want):
        raise ValueError(f"{family} takes template arguments {want}, got {sorted(targs)}")
    return FAMILIES[family].format(**targs)


_KERNELS: dict = {}
_SMEM_SET: dict = {}


def kernel(family: str, *, smem: int = 0, **targs):
    """The CuPy kernel function of one instantiation (cached); ``smem`` raises its dynamic
    shared-memory limit once (not per launch: launches may be inside a graph capture)."""
    k = _kernel(family, **targs)
    if smem > 48 * 1024 and _SMEM_SET.get(id(k), 0) < smem:
        k.max_dynamic_shared_size_bytes = int(smem)
        _SMEM_SET[id(k)] = int(smem)
    return k


def _kernel(family: str, **targs):
    expr = _expr(family, targs)
    k = _KERNELS.get(expr)
    if k is None:
        k = _KERNELS[expr] = get_kernel(full_source(), expr)
    return k


def default_instances() -> list[tuple[str, dict]]:
    """Every instantiation the Python wrappers and the benchmark use."""
    from .w4a16 import CC_STAGES
    from .w4a4 import ROWS_MT, ROWS_NW, w4a4_stages
    from .temperature import CLUSTERS, R_CHOICES

    out = []
    for F in (0, 1, 2):
        for MT in (1, 2, 4, 8):
            out.append(("w4a16_cc", {"F": F, "MT": MT, "S": CC_STAGES}))
    for MT in (1, 2, 4, 8):
        out.append(("w4a4_gemv", {"MT": MT, "S": w4a4_stages(MT)}))
    out.append(("w4a4_gemv", {"MT": 1, "S": 5}))  # the staged M = 1 trials (benchmarks/gemv_trial.py)
    for MT in ROWS_MT:
        for NW in ROWS_NW:
            out.append(("w4a4_gemv_rows", {"MT": MT, "NW": NW}))
    out.append(("nvfp4_quantize_act", {}))
    out.append(("nvfp4_quantize_act_solo", {}))
    for CL in CLUSTERS:
        for R in R_CHOICES:
            out.append(("reset_temperature_step", {"CL": CL, "R": R}))
    return out


def prebuilt_jobs():
    """``[(source, [names])]`` of every default instance, for :func:`mactile.gpu.prebuilt.build`."""
    return [(full_source(), sorted({_expr(f, a) for f, a in default_instances()}))]
