"""Float64 references and the stated error bound for the FP4 GEMM/GEMV kernels.

The kernels compute ``y = sum_k x_k w_k`` with every product exact (FP16 x FP4 x scale
fits FP32, and the NVFP4 x NVFP4 block products are exact integers), so their only
error is FP32 accumulation, the final scaling and the output rounding. The bound:

    |y - y_ref| <= (K/8 + 64) * 2**-23 * sum_k |x_k w_k|       FP32 accumulation
                   + 2**-23 * |y_ref|                           scaling by the tensor scale(s)
                   + 2**-11 * |y_ref| + 2**-25                  FP16 output (FP16 outputs only)

``K/8 + 64`` exceeds the longest accumulation chain of any of the kernels (the
tensor-core kernel adds K/32 mma results per warp; a CUDA-core lane adds K/32 products
per row; then the 32-lane, two-warp and cross-CTA reductions; the GEMM engine adds K/16
wgmma results, and for razer-g128 about three more roundings per 128 of K, where its
accumulators move from one block scale's units to the next), and ``2**-23`` instead of
``2**-24`` allows for the tensor cores' truncating internal accumulation. A single wrong
weight or activation typically moves ``y`` by ``|x_k w_k| ~ sum|x w| / K``, well above
the bound for the K used in the tests (e.g. 2.4e-4 vs 7e-5 of ``sum|x w|`` at K = 4096).
"""
from __future__ import annotations

import numpy as np

from mactile.golden.elements import FP16, FP32

__all__ = ["reference", "error_bound", "check_close", "ACC_BOUND_TERMS"]


def ACC_BOUND_TERMS(K: int) -> float:
    return K / 8 + 64


def reference(x, w_deq) -> tuple[np.ndarray, np.ndarray]:
    """``(y_ref, sum|x w|)`` in float64 for ``x[M, K]`` and dequantized ``w[N, K]``."""
    x64 = np.asarray(x, dtype=np.float64)
    w64 = np.asarray(w_deq, dtype=np.float64)
    return x64 @ w64.T, np.abs(x64) @ np.abs(w64).T


def error_bound(y_ref, abs_sum, K: int, *, fp16_out: bool) -> np.ndarray:
    u32 = 2.0 ** -FP32.man_bits  # FP32 ulp of 1
    b = ACC_BOUND_TERMS(K) * u32 * abs_sum + u32 * np.abs(y_ref)
    if fp16_out:  # half an FP16 ulp relative, half its smallest subnormal absolute
        b = b + 2.0 ** -(FP16.man_bits + 1) * np.abs(y_ref) + FP16.min_value / 2
    return b


def check_close(y, y_ref, abs_sum, K: int, *, what: str = "kernel") -> dict:
    """Raise ``AssertionError`` naming the worst element if ``y`` (host array) breaks the
    bound, holds NaN/Inf or was not written; return error statistics otherwise."""
    y = np.asarray(y)
    fp16 = y.dtype == np.float16
    y64 = y.astype(np.float64)
    if not np.isfinite(y64).all():
        bad = np.argwhere(~np.isfinite(y64))[0]
        raise AssertionError(f"{what}: non-finite output at {tuple(bad)} (unwritten or overflow)")
    bound = error_bound(y_ref, abs_sum, K, fp16_out=fp16)
    err = np.abs(y64 - y_ref)
    ratio = err / np.maximum(bound, 1e-300)
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    if ratio[worst] > 1.0:
        raise AssertionError(f"{what}: |y - y_ref| = {err[worst]:.3e} exceeds the FP32-accumulation "
                             f"bound {bound[worst]:.3e} at {tuple(int(i) for i in worst)} "
                             f"(y = {y64[worst]!r}, ref = {y_ref[worst]!r})")
    rel = np.linalg.norm(y64 - y_ref) / max(np.linalg.norm(y_ref), 1e-300)
    return {"max_ratio_to_bound": float(ratio[worst]), "rel_l2": float(rel)}
