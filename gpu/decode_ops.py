"""The work of a decoder layer between its linear layers, on the GPU (CuPy, FP16).

Five kernels (``kernels/decode_ops.cu``) that :mod:`mactile.torch`'s decoder calls through
its ``torch.ops.mactile`` ops, so that a decode step is a few launches per layer rather than
one per torch elementwise op:

* :func:`add_rmsnorm` -- the residual add and the RMSNorm that follows it, one launch;
* :func:`rope_kv` -- the optional per-head q/k RMSNorm (Qwen3), the rotary embedding of q
  and k at each token's position, and the writes of k and v into the static caches;
* :func:`silu_mul` -- SwiGLU's ``silu(gate) * up``;
* :func:`decode_attention` -- grouped-query attention of a few query rows per key/value
  head over the cache (decode: split over the keys, FP32 partial softmax per part, one
  combine launch; flash-decoding), for ``G * T <= ATT_ROWS_MAX`` rows per head.

Every function takes CuPy arrays and launches on CuPy's current stream (inside a CUDA-graph
capture too); the positions are read on the device, so a captured step replays at any
position. Elementwise roundings are torch's (each FP16 op computed in FP32 and rounded
once); the RMSNorm statistic and the attention sums are FP32 in another order than torch's.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .prebuilt import get_kernel
from .runtime import check_launch, load_source, require_cupy

__all__ = ["add_rmsnorm", "rope_kv", "silu_mul", "decode_attention", "ATT_ROWS_MAX", "HEAD_DIMS",
           "NORM_MAX_DIM", "attention_splits", "source", "prebuilt_jobs"]

#: Head dimensions the rotary and attention kernels are built for.
HEAD_DIMS = (64, 128)
#: Query rows per key/value head (G heads x T tokens) instantiated for the attention, the
#: smallest >= the request is launched.
ATT_ROW_TILES = (4, 8, 16)
ATT_ROWS_MAX = ATT_ROW_TILES[-1]
ATT_WARPS = 4
_NORM_THREADS, _NORM_VMAX = 256, 16
#: The widest row :func:`add_rmsnorm` takes (its registers hold the row).
NORM_MAX_DIM = 2 * _NORM_THREADS * _NORM_VMAX


@functools.lru_cache(maxsize=1)
def source() -> str:
    return load_source("decode_ops.cu", prelude="#include <cuda_fp16.h>\n")


def _names() -> list[str]:
    out = [f"mt::add_rmsnorm<{_NORM_THREADS}, {_NORM_VMAX}>", "mt::silu_mul"]
    for d in HEAD_DIMS:
        out += [f"mt::rope_kv<{d}>", f"mt::attn_combine<{d}>"]
        out += [f"mt::attn_split<{d}, {r}>" for r in ATT_ROW_TILES]
    return out


def prebuilt_jobs():
    """``[(source, [names])]`` for :func:`mactile.gpu.prebuilt.build`."""
    return [(source(), _names())]


#: The combine kernel's limit on the splits of one row (its shared weights; one per thread).
ATT_MAX_SPLITS = 64


def _attn_smem(d: int, rmax: int) -> int:
    """Queries, K staging per warp (reused by the warps' merge: it must hold their
    outputs), the probabilities per warp."""
    staging = max(ATT_WARPS * 32 * (d // 2 + 1), ATT_WARPS * rmax * d)
    return 4 * (rmax * d + staging + ATT_WARPS * rmax * 32)


def _fn(name: str, smem: int = 0):
    return get_kernel(source(), name, max_dynamic_smem=smem)


def _check_half(name: str, *arrays) -> None:
    for a in arrays:
        if a is not None and a.dtype != np.float16:
            raise TypeError(f"{name}: FP16 arrays only, got {a.dtype}")


def _row_stride(a) -> int:
    """Elements between rows of a 2-D array whose rows are contiguous."""
    if a.ndim != 2 or a.strides[1] != a.itemsize:
        raise ValueError("expected a 2-D array with contiguous rows")
    return a.strides[0] // a.itemsize


def add_rmsnorm(x, weight, eps: float, *, residual=None, out=None, h_out=None):
    """``h = x + residual`` (FP16, written to ``h_out`` when a residual is given) and
    ``out = weight * rmsnorm(h)`` for ``x [rows, D]`` contiguous, ``D`` even and at most
    :data:`NORM_MAX_DIM`. ``h_out`` may be ``x`` (in place). Returns ``out``."""
    from .launch import launch  # noqa: PLC0415

    cp = require_cupy()
    _check_half("add_rmsnorm", x, weight, residual)
    rows, D = x.shape
    if D % 2 or D > NORM_MAX_DIM:
        raise ValueError(f"add_rmsnorm: D = {D} must be even and at most {NORM_MAX_DIM}")
    out = cp.empty_like(x) if out is None else out
    if residual is not None and h_out is None:
        raise ValueError("add_rmsnorm: a residual needs h_out (the sum's destination)")
    launch(_fn(f"mt::add_rmsnorm<{_NORM_THREADS}, {_NORM_VMAX}>"), (rows,), (_NORM_THREADS,),
           (x, residual, weight, h_out if residual is not None else None, out, np.int32(D), np.float32(eps)))
    check_launch("add_rmsnorm")
    return out


def rope_kv(q, k, v, cos, sin, pos, k_cache, v_cache, *, T: int, q_out, q_norm=None, k_norm=None,
            eps: float = 1e-6):
    """Rotary embedding of ``q`` and ``k`` and the cache writes of ``k`` and ``v``.

    ``q [B*T, H*D]``, ``k``/``v [B*T, Hkv*D]`` (rows contiguous, any row stride: views into
    one fused projection); ``cos``/``sin`` FP32 ``[P, D]``; ``pos`` int64 ``[T]``; caches
    ``[Bc, Hkv, S, D]`` (``Bc >= B``); ``q_out [B, H, T, D]``; ``q_norm``/``k_norm`` the
    per-head RMSNorm weights ``[D]`` or None."""
    from .launch import launch  # noqa: PLC0415

    _check_half("rope_kv", q, k, v, q_out, k_cache, v_cache, q_norm, k_norm)
    Bc, Hkv, S, D = k_cache.shape
    if D not in HEAD_DIMS:
        raise ValueError(f"rope_kv: head dim {D} not built (one of {HEAD_DIMS})")
    tokens = q.shape[0]
    H = q.shape[1] // D
    heads = H + 2 * Hkv
    launch(_fn(f"mt::rope_kv<{D}>"), (tokens, math.ceil(heads / 8)), (256,),
           (q, k, v, np.int64(_row_stride(q)), np.int64(_row_stride(k)), np.int64(_row_stride(v)),
            cos, sin, pos, q_norm, k_norm, np.float32(eps), q_out, k_cache, v_cache,
            np.int32(T), np.int32(H), np.int32(Hkv), np.int32(S)))
    check_launch("rope_kv")
    return q_out


def silu_mul(g, u, *, out=None):
    """``silu(g) * u`` for ``g``, ``u [rows, n]`` (rows contiguous, any row stride)."""
    from .launch import launch  # noqa: PLC0415

    cp = require_cupy()
    _check_half("silu_mul", g, u)
    rows, n = g.shape
    out = cp.empty((rows, n), dtype=cp.float16) if out is None else out
    total = rows * n
    launch(_fn("mt::silu_mul"), (math.ceil(total / 256),), (256,),
           (g, u, np.int64(_row_stride(g)), np.int64(_row_stride(u)), out, np.int32(n), np.int64(total)))
    check_launch("silu_mul")
    return out


def attention_splits(batch: int, kv_heads: int, positions: int, sms: int) -> int:
    """Parts the keys of one (sequence, key/value head) are split into: about two CTAs per
    SM in all, at most one per 64 cache positions and :data:`ATT_MAX_SPLITS`."""
    want = math.ceil(2 * sms / max(1, batch * kv_heads))
    return max(1, min(want, math.ceil(positions / 64), ATT_MAX_SPLITS))


def decode_attention(q, k_cache, v_cache, pos, *, T: int, out=None, splits: int | None = None):
    """Causal attention of ``q [B, H, T, D]`` over the caches ``[Bc, Hkv, S, D]``.

    Query ``(b, head, t)`` sees keys ``0..pos[t]`` of sequence ``b``, head ``head // G``
    (``G = H / Hkv``), scaled by ``1/sqrt(D)``. Returns ``out [B, T, H, D]`` FP16.
    """
    from .launch import launch  # noqa: PLC0415
    from .runtime import sm_count  # noqa: PLC0415

    cp = require_cupy()
    _check_half("decode_attention", q, k_cache, v_cache)
    B, H, Tq, D = q.shape
    Bc, Hkv, S, Dk = k_cache.shape
    if Tq != T or Dk != D or Bc < B or H % Hkv:
        raise ValueError(f"decode_attention: q {q.shape} does not fit the cache {k_cache.shape}")
    G = H // Hkv
    R = G * T
    rmax = next((r for r in ATT_ROW_TILES if r >= R), None)
    if rmax is None or D not in HEAD_DIMS:
        raise ValueError(f"decode_attention: {R} query rows per head (at most {ATT_ROWS_MAX}), head dim {D}")
    sp = splits or attention_splits(B, Hkv, S, sm_count())
    if not 1 <= sp <= ATT_MAX_SPLITS:
        raise ValueError(f"decode_attention: splits must be 1..{ATT_MAX_SPLITS}, got {sp}")
    o_part = cp.empty((B * H * T * sp, D), dtype=cp.float32)
    ml = cp.empty((B * H * T * sp, 2), dtype=cp.float32)
    smem = _attn_smem(D, rmax)
    scale_log2 = np.float32(math.log2(math.e) / math.sqrt(D))
    launch(_fn(f"mt::attn_split<{D}, {rmax}>", smem), (sp, Hkv, B), (ATT_WARPS * 32,),
           (q, k_cache, v_cache, pos, np.int32(T), np.int32(G), np.int32(Hkv), np.int32(S), scale_log2,
            o_part, ml), shared_mem=smem)
    check_launch("attn_split")
    out = cp.empty((B, T, H, D), dtype=cp.float16) if out is None else out
    launch(_fn(f"mt::attn_combine<{D}>"), (B * H * T,), (D,),
           (o_part, ml, pos, np.int32(T), np.int32(H), np.int32(sp), out))
    check_launch("attn_combine")
    return out
