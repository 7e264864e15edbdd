"""Per-token E4M3 activation quantization (NestedFP's FP8 mode).

Source: 004_a14d4b71d1ae7c1e.txt Sec. 2 ("per-token activation scaling based on absolute
maximum value") and Sec. 4.3 (the FP8 GEMM multiplies the upper weight plane, read as
E4M3 = 256 w, by E4M3 activations and needs the factor 2**-8 back).

Per row (token) of an activation matrix, arithmetic in FP32 with round-to-nearest-even::

    scale = amax / 448                       FP32 division (448 = E4M3 max)
    code  = E4M3( x / scale )                FP32 division, then RNE to E4M3, saturating

A row whose amax is 0 has scale 0 and stores ``E4M3(x)`` (that is, signed zeros). The GEMM
of such codes with NestedFP's upper plane is::

    y[m, n] = 2**-8 * scale[m] * sum_k E4M3(code[m, k]) * E4M3(upper[n, k])

(:func:`nestedfp8_matmul_reference`, in float64).
"""
from __future__ import annotations

import numpy as np

from .block import InputError
from .elements import FP8_E4M3

__all__ = ["per_token_e4m3", "nestedfp8_matmul_reference"]


def per_token_e4m3(x) -> tuple[np.ndarray, np.ndarray]:
    """Quantize a 2-d activation matrix to E4M3 with one FP32 scale per row.

    Parameters
    ----------
    x : (M, K) floating array (FP16 activations are exact in FP32)

    Returns
    -------
    codes : (M, K) uint8 E4M3 codes
    scales : (M,) float32

    Raises
    ------
    InputError
        For a non-2-d or non-floating input, or NaN/Inf (the first offending index named).
    """
    a = np.asarray(x)
    if a.dtype.kind != "f":
        raise InputError(f"per_token_e4m3: expected a floating-point array, got dtype {a.dtype}")
    if a.ndim != 2:
        raise InputError(f"per_token_e4m3: expected an (M, K) matrix, got shape {a.shape}")
    x32 = a.astype(np.float32)
    finite = np.isfinite(x32)
    if not finite.all():
        i = np.unravel_index(int(np.argmin(finite.reshape(-1))), x32.shape)
        raise InputError(f"per_token_e4m3: non-finite value {x32[i]} at index "
                         f"{tuple(int(j) for j in i)}")
    amax = np.max(np.abs(x32), axis=1) if x32.shape[1] else np.zeros(x32.shape[0], np.float32)
    scales = (amax / np.float32(FP8_E4M3.max_value)).astype(np.float32)
    safe = np.where(scales > 0, scales, np.float32(1))
    v = np.where(scales[:, None] > 0, x32 / safe[:, None], x32).astype(np.float32)
    codes = FP8_E4M3.encode(v, saturate=True).astype(np.uint8)
    return codes, scales


def nestedfp8_matmul_reference(codes, scales, upper) -> np.ndarray:
    """Float64 value of NestedFP's FP8-mode GEMM: ``2**-8 * s_m * sum_k x_mk * u_nk``.

    Parameters
    ----------
    codes : (M, K) uint8 E4M3 activation codes; scales : (M,) float32
    upper : (N, K) uint8 NestedFP upper bytes (E4M3 codes of 256 w)
    """
    xv = FP8_E4M3.values[np.asarray(codes)]
    wv = FP8_E4M3.values[np.asarray(upper)]
    acc = xv @ wv.T  # products are exact in float64; sums round far below FP32's error
    return np.ldexp(acc * np.asarray(scales, dtype=np.float64)[:, None], -8)
