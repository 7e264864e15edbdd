"""W4A16 kernels: ``y[M, N] = x[M, K] @ W[N, K].T`` with FP16 ``x``, FP4 ``W``.

* :func:`gemm_tc` -- tensor-core GEMM, any M: the GEMM engine (:mod:`mactile.gpu.engine`,
  TMA + mbarrier pipeline + wgmma; frag layout);
* :func:`gemv_cc` -- CUDA-core GEMV/small GEMM (M = 1..8, FP32 FFMA; rowmajor layout).

Both accumulate in FP32 and multiply by the weight's FP32 tensor scale at the end; the
output is FP16 (default) or FP32. The CUDA-core kernel splits its work into ``n_ctas``
stripes of equal length (Marlin/RaZeR partitioning, App. E: fewer CTAs than SMs for small
matrices means fewer partial tiles to reduce).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .build import kernel
from .packing import ROW_TILE, PackedW4A16
from .runtime import ceil_div, check_launch, require_cupy, sm_count

__all__ = ["gemm_tc", "gemv_cc", "CC_STAGES", "cc_smem", "cc_units", "Workspace", "CC_MAX_M",
           "check_activation", "cc_ctas_per_sm", "default_ctas"]

CC_STAGES = 4
CC_MAX_M = 8
_RM_KC = 512


def _round(a: int, b: int) -> int:
    return -(-a // b) * b


def cc_ctas_per_sm(MT: int) -> int:
    """CTAs per SM of ``w4a16_cc`` and ``w4a4_gemv`` (their ``__launch_bounds__``)."""
    return 2 if MT <= 2 else 1


def default_ctas(units: int, ctas_per_sm: int, *, min_units: int) -> int:
    """CTAs for a stripe-partitioned launch: up to ``ctas_per_sm`` per SM, but at least
    ``min_units`` work units per CTA and never fewer than one CTA per SM -- RaZeR App. E's
    limited-SM rule for small matrices (the measured sweep in docs/gpu.md: 132 CTAs beat
    264 on 4096x4096 and 4096x6144 by 6-13%)."""
    sms = sm_count()
    return int(max(1, min(ctas_per_sm * sms, max(sms, units // min_units), units)))


def cc_smem(block: int, scale_bytes: int, MT: int, S: int) -> int:
    """Dynamic shared memory of ``w4a16_cc`` (mirrors ``CcCfg`` in w4a16_cc.cu)."""
    scales = 8 * (_RM_KC // block) * 8 * scale_bytes
    stage = (64 * _RM_KC // 2) + scales + MT * _RM_KC * 2
    return S * stage + MT * 68 * 4 + 16


def cc_units(pw: PackedW4A16) -> tuple[int, int, int]:
    K_pad = pw.layout("rowmajor")["K_pad"]
    RT = pw.N_pad // ROW_TILE
    KU = ceil_div(K_pad, _RM_KC)
    return RT, KU, RT * KU


class Workspace:
    """Per-device scratch for the cross-CTA reduction: FP32 partial tiles and the tile
    counters (kept at zero between launches by the kernels). Grows on demand; allocate
    before a CUDA-graph capture by running each shape once."""

    _by_dev: dict = {}

    @classmethod
    def get(cls, n_floats: int, n_counters: int):
        cp = require_cupy()
        dev = cp.cuda.Device().id
        ws, cnt = cls._by_dev.get(dev, (None, None))
        if ws is None or ws.size < n_floats:
            ws = cp.empty(max(n_floats, 1 << 16), dtype=cp.float32)
        if cnt is None or cnt.size < n_counters:
            cnt = cp.zeros(max(n_counters, 1 << 12), dtype=cp.int32)
        cls._by_dev[dev] = (ws, cnt)
        return ws, cnt


def check_activation(x, K: int, *, max_m: int | None = None, name: str = "x"):
    """Validate an activation matrix: CuPy, float16, 2-D ``[M, K]``, C-contiguous, 16-byte
    aligned. Returns M."""
    cp = require_cupy()
    if not isinstance(x, cp.ndarray):
        raise TypeError(f"{name} must be a CuPy array on the GPU, got {type(x).__name__}")
    if x.dtype != cp.float16:
        raise TypeError(f"{name} must be float16, got {x.dtype}")
    if x.ndim != 2 or x.shape[1] != K:
        raise ValueError(f"{name} must have shape [M, {K}], got {tuple(x.shape)}")
    M = int(x.shape[0])
    if M < 1:
        raise ValueError(f"{name} has no rows (M = 0)")
    if max_m is not None and M > max_m:
        raise ValueError(f"{name} has M = {M} rows; this kernel handles M <= {max_m}")
    if not x.flags.c_contiguous or x.data.ptr % 16:
        raise ValueError(f"{name} must be C-contiguous and 16-byte aligned (use cupy.ascontiguousarray)")
    return M


def _out(out, M, N, out_dtype):
    cp = require_cupy()
    dt = np.dtype(out_dtype)
    if dt not in (np.dtype(np.float16), np.dtype(np.float32)):
        raise ValueError(f"out_dtype must be float16 or float32, got {dt}")
    if out is None:
        return cp.empty((M, N), dtype=dt), dt == np.float32
    if not isinstance(out, cp.ndarray) or out.shape != (M, N) or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous CuPy array of shape {(M, N)}")
    if out.dtype not in (cp.float16, cp.float32):
        raise ValueError(f"out must be float16 or float32, got {out.dtype}")
    return out, out.dtype == cp.float32


def _lut_args(pw):
    return tuple(np.uint32(w) for w in pw.fmt.lut_args)


def _on_device(pw: PackedW4A16, name: str):
    cp = require_cupy()
    lay = pw.layout(name)
    if not isinstance(lay["codes"], cp.ndarray):
        raise TypeError("the packed weight lives on the host; move it with packed.to(cupy)")
    return lay


def gemm_tc(x, pw: PackedW4A16, *, out=None, out_dtype=np.float16, n_ctas: int | None = None,
            cfg=None, sync: bool = False, pdl: bool | None = None):
    """Tensor-core W4A16 GEMM on the GEMM engine, any M.

    Parameters
    ----------
    cfg : mactile.gpu.engine.EngineConfig, optional
        Tile configuration (default: :func:`mactile.gpu.engine.config_for`).
    n_ctas : int, optional
        Persistent CTAs (overrides ``cfg.n_ctas``; for the exactness tests of every partition).
    pdl : bool, optional
        Launch with programmatic dependent launch: the kernel's CTAs may be scheduled
        while the previous kernel in the stream finishes. Default
        :func:`mactile.gpu.engine.use_pdl` (on for M <= 128, where it was measured faster).
    """
    from .engine import config_for, gemm_fp4, use_pdl  # noqa: PLC0415

    _on_device(pw, "frag")
    M = check_activation(x, pw.K)
    y, _ = _out(out, M, pw.N, out_dtype)
    c = cfg or config_for(pw.fmt.name, M, pw.nbytes("frag"), N=pw.N)
    if n_ctas is not None:
        c = replace(c, n_ctas=int(n_ctas))
    gemm_fp4(x, pw, cfg=c, out=y, pdl=use_pdl(M) if pdl is None else pdl)
    check_launch("engine_gemm", sync=sync)
    return y


def gemv_cc(x, pw: PackedW4A16, *, out=None, out_dtype=np.float16, n_ctas: int | None = None,
            stages: int | None = None, sync: bool = False):
    """CUDA-core W4A16 GEMV / small GEMM for M <= 8 (FP32 FFMA accumulation); ``stages``:
    cp.async pipeline depth (default ``CC_STAGES``)."""
    lay = _on_device(pw, "rowmajor")
    M = check_activation(x, pw.K, max_m=CC_MAX_M)
    MT = 1 if M == 1 else 2 if M == 2 else 4 if M <= 4 else 8
    y, f32 = _out(out, M, pw.N, out_dtype)
    kf = pw.fmt
    RT, KU, U = cc_units(pw)
    C = n_ctas if n_ctas is not None else default_ctas(U, cc_ctas_per_sm(MT), min_units=6)
    C = int(max(1, min(C, U)))
    ws, cnt = Workspace.get(2 * C * MT * 64, RT)
    S = CC_STAGES if stages is None else int(stages)
    smem = cc_smem(kf.block, kf.scale_dtype.itemsize, MT, S)
    k = kernel("w4a16_cc", F=kf.fmt_id, MT=MT, S=S, smem=smem)
    k((C,), (256,), (lay["codes"], lay["scales"], x, y, ws, cnt, np.int32(M), np.int32(pw.N),
                     np.int32(pw.K), np.int32(lay["K_pad"]), np.int32(RT), np.int32(C),
                     np.float32(pw.tensor_scale), np.int32(f32), *_lut_args(pw)), shared_mem=smem)
    check_launch("w4a16_cc", sync=sync)
    return y
