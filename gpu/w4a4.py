"""ReSET's W4A4 NVFP4 small-M path: on-the-fly activation quantization and the GEMM.

:func:`quantize_activation` turns FP16 ``x[M, K]`` into NVFP4 bit for bit as
``mactile.golden.NVFP4().quantize(x)`` does (same FP32 op order; tensor scale over the
whole ``x``) in one launch of eight CTAs (one cluster; plain CTAs for small ``x``);
:func:`gemv_w4a4` multiplies NVFP4 activations with NVFP4 weights (rowmajor layout) for
M = 1..8 on the CUDA cores (ReSET's GEMV; at M = 1 the row-streaming form
:func:`gemv_w4a4_rows`); :func:`linear_w4a4` does both, with programmatic dependent launch where the driver
allows it: the GEMV starts while the quantizer runs and streams its first weight stages
before it waits for the activations. ``linear_w4a4`` can instead run the product on the
tensor-core GEMM engine (``kernel="engine"``, the default where :func:`w4a4_kernel` says
it measured faster): the quantizer then also writes the activations' exact FP16 values
(FP4 value times block scale) and the engine multiplies them with the frag-packed weights,
the activations' tensor scale applied per token in its epilogue. Both kernels form the
same exact block products and accumulate in FP32; they differ in the order of the FP32
additions only.
"""
from __future__ import annotations

import numpy as np

from . import launch as _launch
from . import pdl as _pdl
from .build import kernel
from .packing import ACT_K_ALIGN, PackedActivation, PackedW4A16
from .runtime import ceil_div, check_launch, require_cupy, sm_count
from .w4a16 import Workspace, _out, _on_device, cc_units, check_activation, default_ctas

__all__ = ["quantize_activation", "gemv_w4a4", "gemv_w4a4_rows", "rows_launch", "ROWS_MT", "ROWS_NW",
           "ROWS_EARLY_TRIGGER_MIN_K", "gemm_w4a4_engine", "linear_w4a4", "w4a4_kernel", "W4A4_KERNELS",
           "w4a4_stages", "w4a4_ctas_per_sm", "W4A4_MAX_M", "w4a4_smem", "tile_aligned_ctas",
           "QA_SOLO_MAX_ELEMENTS"]

W4A4_MAX_M = 8


def w4a4_stages(MT: int) -> int:
    """Pipeline stages: 3 for M = 1 (three CTAs per SM fit), else 4."""
    return 3 if MT == 1 else 4


def w4a4_ctas_per_sm(MT: int) -> int:
    """CTAs per SM (the kernel's ``__launch_bounds__``)."""
    return 3 if MT == 1 else 2 if MT == 2 else 1
_KC = 512


def w4a4_smem(MT: int, S: int | None = None) -> int:
    """Dynamic shared memory of ``w4a4_gemv`` (mirrors ``W4a4Cfg`` in w4a4.cu)."""
    S = w4a4_stages(MT) if S is None else S
    stage = (64 * _KC // 2) + 8 * (_KC // 16) * 8 + MT * (_KC // 2) + (-(-MT * (_KC // 16) // 128)) * 128
    return S * stage + MT * 68 * 4 + 16


#: Up to this many elements (M * K) the quantizer runs as eight plain CTAs that each take
#: the tensor amax over all of x (``nvfp4_quantize_act_solo``; at most 64 KB read eight
#: times from L2) instead of one 8-CTA cluster that shares it through distributed shared
#: memory: the cluster's launch and barriers cost more than the reads there (H100,
#: 2026-11-27, docs/gpu.md "ReSET W4A4").
QA_SOLO_MAX_ELEMENTS = 32768


def quantize_activation(x, *, out: PackedActivation | None = None, sync: bool = False,
                        pdl: bool = False, dequant: bool = False) -> PackedActivation:
    """NVFP4-quantize FP16 activations ``x[M, K]`` on the GPU (bit-exact with the golden model).

    ``K`` must be a multiple of 16 (the NVFP4 block). ``out`` reuses buffers of a previous
    call with the same shape (required inside CUDA graphs). ``pdl``: launch with
    programmatic dependent launch (the kernel reads ``x`` only after the previous kernel on
    the stream has completed, and lets the next one start at once). ``dequant``: also write
    ``out.dequant`` (the exact FP16 values without the tensor scale) and ``out.col_scale``
    (the tensor scale per token), the tensor-core path's operands.
    """
    cp = require_cupy()
    if not isinstance(x, cp.ndarray) or x.ndim != 2:
        raise TypeError("x must be a 2-D CuPy float16 array [M, K]")
    M, K = int(x.shape[0]), int(x.shape[1])
    if K % 16:
        raise ValueError(f"x has K = {K} columns, not a multiple of the NVFP4 block size 16")
    check_activation(x, K)
    KA = ceil_div(K, ACT_K_ALIGN) * ACT_K_ALIGN
    if out is None:
        out = PackedActivation(M, K, cp.empty((M, KA // 2), dtype=cp.uint8),
                               cp.empty((M, KA // 16), dtype=cp.uint8), cp.empty(1, dtype=cp.float32))
        if dequant:
            out.dequant, out.col_scale = cp.empty((M, K), dtype=cp.float16), cp.empty(M, dtype=cp.float32)
    elif (out.M, out.K) != (M, K):
        raise ValueError(f"out was made for [{out.M}, {out.K}], x is [{M}, {K}]")
    elif dequant and (out.dequant is None or out.col_scale is None):
        raise ValueError("out has no dequant/col_scale buffers: make it with quantize_activation(..., "
                         "dequant=True) first")
    name = "nvfp4_quantize_act_solo" if M * K <= QA_SOLO_MAX_ELEMENTS else "nvfp4_quantize_act"
    args = (x, np.int32(M), np.int32(K), np.int32(KA), out.codes, out.scales, out.tensor_scale,
            out.dequant if dequant else None, out.col_scale if dequant else None)
    _launch.launch(kernel(name), (8,), (512,), args, pdl=pdl)  # the null pointers need the driver's launch
    check_launch(name, sync=sync)
    return out


_SMEM_PER_SM = 228 * 1024


def tile_aligned_ctas(RT: int, KU: int, slots: int) -> int:
    """CTA count (<= ``slots``) whose stripes do not cut row tiles in the middle of a stripe:
    with RT >= slots every CTA takes ceil(RT / slots) whole row tiles (whole when the count
    divides RT; no cross-CTA reduction), else each tile is split into s = slots // RT equal
    K ranges (C = RT * s), so that every CTA lies inside one tile and reduces once, after its
    last unit."""
    if RT >= slots:
        per = -(-RT // slots)
        return -(-RT // per)
    return RT * max(1, min(KU, slots // RT))


def gemv_w4a4(a: PackedActivation, pw: PackedW4A16, *, out=None, out_dtype=np.float16,
              n_ctas: int | None = None, stages: int | None = None, sync: bool = False,
              pdl: bool = False):
    """NVFP4 x NVFP4 GEMV for M <= 8 (exact block products, FP32 accumulation).

    At M = 1 without ``n_ctas`` or ``stages`` this is :func:`gemv_w4a4_rows` (weights
    streamed into registers, whole rows per CTA: with the quantizer 0.69-0.96x the time of
    the staged kernel on eight of nine layers, 1.03x on 4096x28672, H100; docs/gpu.md
    "ReSET W4A4"). Otherwise ReSET's staged
    kernel (``w4a4_gemv``: cp.async stages of 64-row x 512-k units, stripes of units per
    CTA, partial tiles reduced across CTAs): ``n_ctas`` CTAs (stripes), ``stages`` pipeline
    depth, defaults RaZeR's limited-SM rule and :func:`w4a4_stages`.
    ``pdl``: programmatic dependent launch (the first weights are requested before the
    kernel waits for the previous kernel, e.g. :func:`quantize_activation`)."""
    if not pw.fmt.w4a4:
        raise ValueError(f"the W4A4 GEMV takes nvfp4 weights, got {pw.fmt.name}")
    if a.K != pw.K:
        raise ValueError(f"activations have K = {a.K}, weights K = {pw.K}")
    if not 1 <= a.M <= W4A4_MAX_M:
        raise ValueError(f"the W4A4 GEMV handles M = 1..{W4A4_MAX_M} (ReSET's small-M regime), got M = {a.M}")
    if a.M == 1 and n_ctas is None and stages is None:
        return gemv_w4a4_rows(a, pw, out=out, out_dtype=out_dtype, sync=sync, pdl=pdl)
    lay = _on_device(pw, "rowmajor")
    M = a.M
    MT = 1 if M == 1 else 2 if M == 2 else 4 if M <= 4 else 8
    y, f32 = _out(out, M, pw.N, out_dtype)
    RT, KU, U = cc_units(pw)
    C = n_ctas if n_ctas is not None else default_ctas(U, w4a4_ctas_per_sm(MT), min_units=6)
    S = w4a4_stages(MT) if stages is None else int(stages)
    C = int(max(1, min(C, U)))
    if S < 2:
        raise ValueError(f"stages must be >= 2, got {S}")
    ws, cnt = Workspace.get(2 * C * MT * 64, RT)
    smem = w4a4_smem(MT, S)
    k = kernel("w4a4_gemv", MT=MT, S=S, smem=smem)
    l0, l1, l2, l3, _ = pw.fmt.lut_args
    args = (lay["codes"], lay["scales"], a.codes, a.scales, a.tensor_scale, y, ws, cnt,
            np.int32(M), np.int32(pw.N), np.int32(lay["K_pad"]), np.int32(a.KA), np.int32(RT),
            np.int32(C), np.float32(pw.tensor_scale), np.int32(f32),
            np.uint32(l0), np.uint32(l1), np.uint32(l2), np.uint32(l3))
    if pdl:
        _launch.launch(k, (C,), (256,), args, shared_mem=smem, pdl=True)
    else:
        k((C,), (256,), args, shared_mem=smem)
    check_launch("w4a4_gemv", sync=sync)
    return y


#: Token counts and warps per CTA of ``w4a4_gemv_rows`` (prebuilt; 16 warps per SM either way).
ROWS_MT = (1,)
ROWS_NW = (16, 8)
_RS_SMEM_MAX = 96 * 1024
#: From this K (padded) on, ``w4a4_gemv_rows`` lets the next kernel launch right after it has
#: requested its first activations (``griddepcontrol.launch_dependents``): in a chain of quantizer and
#: GEMV the next quantizer's launch then overlaps this GEMV. Same process, H100, 2026-11-27
#: (docs/gpu.md): 2-5% less time on the four layers with K >= 8192, 0-2% more on those with
#: K = 5120, 14-15% more on 4096x4096 and 4096x6144.
ROWS_EARLY_TRIGGER_MIN_K = 8192


def rows_launch(n_rg: int, sms: int, nw: int = 16) -> int:
    """CTAs of ``w4a4_gemv_rows``: one wave (``16 // nw`` CTAs per SM), each owning whole
    row groups of 8 rows (at most one fewer than another CTA), none empty."""
    return max(1, min(n_rg, sms * (16 // nw)))


def gemv_w4a4_rows(a: PackedActivation, pw: PackedW4A16, *, out=None, out_dtype=np.float16,
                   n_ctas: int | None = None, nw: int = 16, sync: bool = False, pdl: bool = False):
    """NVFP4 x NVFP4 GEMV at M = 1 with the weights streamed into registers (rowmajor layout).

    The same exact block products and FP32 accumulation as :func:`gemv_w4a4`, another order
    of the FP32 additions. Each CTA owns whole row groups of 8 rows over all of K (no
    partial sums between CTAs); its ``nw`` warps take (row group, 1024-k chunk) items in
    turn and keep the next item's 16-byte loads in flight while they compute one.
    ``n_ctas``: default :func:`rows_launch`. ``pdl``: the first item's weights are
    requested before the kernel waits for the previous kernel; from K =
    :data:`ROWS_EARLY_TRIGGER_MIN_K` on it also lets the next kernel launch early."""
    if not pw.fmt.w4a4:
        raise ValueError(f"the W4A4 GEMV takes nvfp4 weights, got {pw.fmt.name}")
    if a.K != pw.K:
        raise ValueError(f"activations have K = {a.K}, weights K = {pw.K}")
    if a.M not in ROWS_MT:
        raise ValueError(f"w4a4_gemv_rows handles M in {ROWS_MT}, got M = {a.M}")
    if nw not in ROWS_NW:
        raise ValueError(f"nw must be one of {ROWS_NW}, got {nw}")
    lay = _on_device(pw, "rowmajor")
    M, MT = a.M, a.M
    y, f32 = _out(out, M, pw.N, out_dtype)
    n_rg = int(lay["codes"].shape[0]) // 8
    C = rows_launch(n_rg, sm_count(), nw) if n_ctas is None else int(n_ctas)
    C = max(1, min(C, n_rg))
    # each warp's partial sums of the CTA's row groups live in shared memory: enough CTAs
    # that they fit
    C = max(C, ceil_div(n_rg * nw * MT * 8 * 4, _RS_SMEM_MAX))
    rg_max = ceil_div(n_rg, C)
    smem = nw * MT * rg_max * 8 * 4
    k = kernel("w4a4_gemv_rows", MT=MT, NW=nw, smem=smem)
    l0, l1, l2, l3, _ = pw.fmt.lut_args
    args = (lay["codes"], lay["scales"], a.codes, a.scales, a.tensor_scale, y, np.int32(M), np.int32(pw.N),
            np.int32(lay["K_pad"]), np.int32(a.KA), np.int32(n_rg), np.int32(rg_max),
            np.float32(pw.tensor_scale), np.int32(f32), np.int32(lay["K_pad"] >= ROWS_EARLY_TRIGGER_MIN_K),
            np.uint32(l0), np.uint32(l1), np.uint32(l2), np.uint32(l3))
    if pdl:
        _launch.launch(k, (C,), (32 * nw,), args, shared_mem=smem, pdl=True)
    else:
        k((C,), (32 * nw,), args, shared_mem=smem)
    check_launch("w4a4_gemv_rows", sync=sync)
    return y


#: The kernels :func:`linear_w4a4` can run the product on.
W4A4_KERNELS = ("gemv", "engine")


def w4a4_kernel(M: int, pw: PackedW4A16) -> str:
    """The kernel :func:`linear_w4a4` takes by default: the one of the packed layouts
    present, else measured (H100, 2026-11-27, quantizer included, PDL; docs/gpu.md "ReSET
    W4A4", docs/results/gpu_w4a4_paths_h100.md): at M = 1 the GEMV (the row-streaming
    kernel, :func:`gemv_w4a4_rows`: it requests its first weights while the quantizer runs;
    faster than the engine on all nine layers, 8192x5120 14.5 against 16.5 us), at
    M = 2..8 and above the engine (8192x8192 M = 8: 24.0 against 41.4 us for the staged
    GEMV, whose FP32 work grows with M)."""
    has_gemv, has_tc = "rowmajor" in pw.layouts, "frag" in pw.layouts
    if not (has_gemv or has_tc):
        raise ValueError("the packed weight has neither the rowmajor nor the frag layout")
    if not has_tc:
        return "gemv"
    if not has_gemv or M != 1:
        return "engine"
    return "gemv"


def gemm_w4a4_engine(a: PackedActivation, pw: PackedW4A16, *, out=None, out_dtype=np.float16, cfg=None,
                     pdl: bool = False, sync: bool = False):
    """NVFP4 x NVFP4 on the tensor-core GEMM engine: ``a.dequant`` (the exact FP16 values
    of the quantized activations) times the frag-packed weights, FP32 accumulation, times
    the weight's tensor scale and, per token, ``a.col_scale`` (the activations' tensor
    scale). ``a`` comes from :func:`quantize_activation` with ``dequant=True``."""
    from .engine import gemm_fp4  # noqa: PLC0415

    if not pw.fmt.w4a4:
        raise ValueError(f"the W4A4 path takes nvfp4 weights, got {pw.fmt.name}")
    if a.K != pw.K:
        raise ValueError(f"activations have K = {a.K}, weights K = {pw.K}")
    if a.dequant is None or a.col_scale is None:
        raise ValueError("the engine path needs the dequantized activations: quantize_activation(..., dequant=True)")
    y = gemm_fp4(a.dequant, pw, cfg=cfg, out=out, out_dtype=out_dtype, pdl=pdl, col_scale=a.col_scale)
    check_launch("engine (w4a4)", sync=sync)
    return y


def linear_w4a4(x, pw: PackedW4A16, *, act: PackedActivation | None = None, pdl: bool | None = None,
                kernel: str | None = None, **kw):
    """Quantize ``x`` to NVFP4 and multiply with the NVFP4 weight ``pw`` (two launches).

    ``kernel``: ``"gemv"`` (ReSET's CUDA-core GEMV, M <= 8, rowmajor layout) or
    ``"engine"`` (the tensor-core GEMM engine, frag layout); default :func:`w4a4_kernel`.
    ``pdl``: both launches with programmatic dependent launch, so that the second overlaps
    the quantizer (None: wherever the driver library loads). ``act`` reuses the activation
    buffers (made with ``dequant=True`` for the engine). The other keywords go to
    :func:`gemv_w4a4` or :func:`gemm_w4a4_engine`."""
    if not pw.fmt.w4a4:  # before any launch: nothing written for a wrong weight
        raise ValueError(f"the W4A4 path takes nvfp4 weights, got {pw.fmt.name}")
    use = _pdl.available() if pdl is None else bool(pdl)
    M = int(x.shape[0]) if getattr(x, "ndim", 0) == 2 else 0
    kern = w4a4_kernel(M, pw) if kernel is None else kernel
    if kern not in W4A4_KERNELS:
        raise ValueError(f"unknown W4A4 kernel {kern!r}; choose from {W4A4_KERNELS}")
    if kern == "engine":
        a = quantize_activation(x, out=act, pdl=use, dequant=True)
        return gemm_w4a4_engine(a, pw, pdl=use, **kw)
    a = quantize_activation(x, out=act, pdl=use)
    return gemv_w4a4(a, pw, pdl=use, **kw)
