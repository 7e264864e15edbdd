"""``torch.library`` custom ops (namespace ``mactile``) for every GPU path of mactile.gpu.

========================================  =====================================================
op                                        GPU path (CUDA implementation)
========================================  =====================================================
``mactile::w4a16(x, codes, scales, ...)``  FP4 weights (nvfp4, mxfp4, razer, razer-g128), FP16
                                          activations: :func:`mactile.gpu.linear` (the GEMM
                                          engine, or the CUDA-core GEMV where the tuning
                                          table measured it faster)
``mactile::w4a4(x, codes, scales, ...)``   ReSET's W4A4: activations quantized to NVFP4 on the
                                          GPU, :func:`mactile.gpu.linear_w4a4`
``mactile::nestedfp(x, upper, lower, ...)``  NestedFP in FP16 or FP8 mode (the engine on the
                                          two byte planes; exception layers: cuBLAS FP16)
``mactile::flexq(x, planes, scales, ...)`` FlexQ W6A6 / W6A8 on binary tensor cores
``mactile::reset_temperature_step(...)``   ReSET's step-aware temperature sampler (state
                                          tensors updated in place)
========================================  =====================================================

Each op has three implementations:

* **fake** (``register_fake``): output shapes and dtypes only, so ``torch.compile(fullgraph=
  True)`` traces a model through the op without a graph break;
* **CPU**: the golden model. Weights are decoded from the packed tensors back to the golden
  ``Quantized`` (bit for bit) and dequantized by the golden format, once per layer (cached
  while the packed tensors are unchanged, see :func:`clear_cpu_cache`); activations
  quantized by the golden quantizer where the path quantizes them; then ``torch.matmul`` in
  float32, cast to ``x.dtype``. The sampler runs the golden :class:`StepAwareTemperature`
  with the kernel's summation layout;
* **CUDA**: the kernels of :mod:`mactile.gpu` on CuPy views of the tensors, on torch's
  current stream, with CuPy allocating through torch's caching allocator, the output
  allocated by torch and passed as ``out``; no host synchronisation
  (:mod:`mactile.torch._bridge`). Inputs are cast to contiguous FP16 first (the kernels'
  activation type); the output is cast back to ``x.dtype``.

``x`` is 2-D ``[M, K]`` in every linear op (:class:`~mactile.torch.QuantLinear` flattens the
leading dimensions). Nothing here has an autograd formula: the ops are for inference.
"""
from __future__ import annotations

import weakref

import numpy as np
import torch

from ._bridge import cached, on_torch_stream, view
from ._formats import format_from_spec

__all__ = ["w4a16", "w4a4", "nestedfp", "flexq", "reset_temperature_step", "clear_cpu_cache",
           "OPS", "FP4_ARGS", "fp4_weight", "nestedfp_weight", "flexq_weight"]

# --------------------------------------------------------------------------- CPU weight cache
_CPU_CACHE: dict = {}


def _version(t: torch.Tensor) -> int:
    try:
        return t._version
    except RuntimeError:  # an inference tensor has no version counter; it is never modified
        return 0


def _cached_weight(tensors, build):
    """The dequantized weight of ``tensors`` (packed buffers), rebuilt when one of them is
    replaced or modified in place; an entry dies with its tensors."""
    key = tuple(id(t) for t in tensors)
    ver = tuple(_version(t) for t in tensors)
    hit = _CPU_CACHE.get(key)
    if hit is not None and hit[0] == ver:
        return hit[1]
    w = build()
    if hit is None:
        for t in tensors:
            weakref.finalize(t, _CPU_CACHE.pop, key, None)
    _CPU_CACHE[key] = (ver, w)
    return w


def clear_cpu_cache() -> None:
    """Drop every cached dequantized CPU weight (they are rebuilt on the next call)."""
    _CPU_CACHE.clear()


def _np(t: torch.Tensor, dtype=None) -> np.ndarray:
    a = t.detach().cpu().numpy()
    return a.view(dtype) if dtype is not None else a


# --------------------------------------------------------------------------- FP4 weights
def _kernel_format(fmt):
    """The kernel description of ``fmt``'s storage (the packing is the same for every
    quantization convention: codes and scales as stored)."""
    import dataclasses  # noqa: PLC0415

    from mactile.golden import DEFAULT_CONVENTION  # noqa: PLC0415
    from mactile.gpu.formats import kernel_format  # noqa: PLC0415

    if hasattr(fmt, "convention") and not fmt.is_default_convention():
        fmt = dataclasses.replace(fmt, convention=DEFAULT_CONVENTION)
    return kernel_format(fmt)


def _packed_host(codes, scales, rm_codes, rm_scales, fmt, n, k, tensor_scale, out_log2):
    from mactile.gpu.packing import PackedW4A16  # noqa: PLC0415

    kf = _kernel_format(fmt)
    lays = {"frag": {"codes": _np(codes, np.uint32), "scales": _np(scales, kf.scale_dtype),
                     "K_pad": int(codes.shape[1]) * 64, "out_log2": int(out_log2)}}
    if rm_codes.numel():
        lays["rowmajor"] = {"codes": _np(rm_codes, np.uint8), "scales": _np(rm_scales, kf.scale_dtype),
                            "K_pad": int(rm_codes.shape[1]) * 2}
    return PackedW4A16(kf, int(n), int(k), float(tensor_scale), lays)


def fp4_quantized(codes, scales, rm_codes, rm_scales, spec, n, k, tensor_scale, has_tensor_scale, out_log2):
    """The golden ``Quantized`` weight stored in the packed tensors (bit for bit).

    From the ``rowmajor`` layout when packed (it keeps the golden codes and scales), else
    from ``frag``, undoing its two exact changes: E8M0 scales stored as the kernels' scale
    bytes ``b = e - D`` (:func:`mactile.gpu.packing.pow2_kernel_scales`; ``e = b + D``
    wherever a block has a non-zero code, 1.0 elsewhere, whose values are zeros either way)
    and RaZeR-G128's scale-0 blocks stored as zero codes with scale 1 (the same zeros).
    """
    from mactile.golden import E8M0, FP16  # noqa: PLC0415
    from mactile.gpu.formats import BP_LOG2  # noqa: PLC0415
    from mactile.gpu.packing import quantized_from_arrays, unpack_frag, unpack_rowmajor  # noqa: PLC0415

    fmt = format_from_spec(spec)
    p = _packed_host(codes, scales, rm_codes, rm_scales, fmt, n, k, tensor_scale, out_log2)
    if "rowmajor" in p.layouts:
        c, s = unpack_rowmajor(p)
    else:
        c, s = unpack_frag(p)
        if p.fmt.scale_format is E8M0:
            D = int(out_log2) + E8M0.bias + BP_LOG2 - FP16.bias
            nz = (c.reshape(c.shape[0], -1, p.fmt.block) & 7).any(axis=-1)
            s = np.where(nz, s.astype(np.int32) + D, E8M0.bias).astype(np.uint8)
    return quantized_from_arrays(fmt, c, s, np.float32(tensor_scale) if has_tensor_scale else None)


def fp4_weight(codes, scales, rm_codes, rm_scales, spec, n, k, tensor_scale, has_tensor_scale, out_log2):
    """The golden dequantized weight ``[n, k]`` as a float32 tensor (cached)."""
    def build():
        q = fp4_quantized(codes, scales, rm_codes, rm_scales, spec, n, k, tensor_scale,
                          has_tensor_scale, out_log2)
        return torch.from_numpy(q.dequantize().astype(np.float32))
    return _cached_weight((codes, scales, rm_codes, rm_scales), build)


def _gpu_fp4(codes, scales, rm_codes, rm_scales, spec, n, k, tensor_scale, out_log2, cp):
    """A :class:`~mactile.gpu.packing.PackedW4A16` over the tensors' GPU memory (made once
    per layer)."""
    from mactile.gpu.packing import PackedW4A16  # noqa: PLC0415
    from mactile.gpu.formats import kernel_format  # noqa: PLC0415

    def build():
        kf = kernel_format(format_from_spec(spec))  # refuses conventions the kernels lack
        sd = np.dtype(kf.scale_dtype).name
        lays = {"frag": {"codes": view(cp, codes, "uint32"), "scales": view(cp, scales, sd),
                         "K_pad": int(codes.shape[1]) * 64, "out_log2": int(out_log2)}}
        if rm_codes.numel():
            lays["rowmajor"] = {"codes": view(cp, rm_codes), "scales": view(cp, rm_scales, sd),
                                "K_pad": int(rm_codes.shape[1]) * 2}
        return PackedW4A16(kf, int(n), int(k), float(tensor_scale), lays)
    return cached(codes, (codes, scales, rm_codes, rm_scales), build)


def _fp16_input(x: torch.Tensor) -> torch.Tensor:
    x = x.to(torch.float16).contiguous()
    if x.data_ptr() % 16:  # the kernels read 16-byte vectors
        x = x.clone()
    return x


#: The FP4 ops' arguments.
FP4_ARGS = """x [M, K]; codes/scales: the frag layout; rm_codes/rm_scales: the rowmajor
layout (empty when not packed); spec: the golden format (JSON, :func:`spec_json`); n, k:
the logical weight shape; tensor_scale: the FP32 second-level scale (has_tensor_scale:
whether the golden weight has one); out_log2: the frag layout's output power of two."""


@torch.library.custom_op("mactile::w4a16", mutates_args=())
def w4a16(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, rm_codes: torch.Tensor,
          rm_scales: torch.Tensor, spec: str, n: int, k: int, tensor_scale: float,
          has_tensor_scale: bool, out_log2: int) -> torch.Tensor:
    """``y = x @ W.T`` for FP4 weights and FP16 activations.

    CPU: ``float32(x rounded to FP16) @ W.T`` with ``W`` the golden dequantized weight in
    float32, cast to ``x.dtype``. Arguments: see :data:`FP4_ARGS`."""
    w = fp4_weight(codes, scales, rm_codes, rm_scales, spec, n, k, tensor_scale, has_tensor_scale, out_log2)
    return torch.matmul(x.to(torch.float16).float(), w.t()).to(x.dtype)



def _fp4_cuda(run, x, codes, scales, rm_codes, rm_scales, spec, n, k, tensor_scale, out_log2):
    """An FP4-weight op on the GPU: ``run(x, packed, out=y)`` on torch's stream, FP16 out."""
    x16 = _fp16_input(x)
    y = torch.empty((x16.shape[0], n), dtype=torch.float16, device=x.device)
    with on_torch_stream(x.device) as cp:
        pw = _gpu_fp4(codes, scales, rm_codes, rm_scales, spec, n, k, tensor_scale, out_log2, cp)
        run(view(cp, x16), pw, out=view(cp, y))
    return y.to(x.dtype)


def _fp4_fake(op: str, x, n: int, k: int):
    """The fake of an FP4-weight op: ``x [M, K]`` -> ``[M, N]``."""
    torch._check(x.dim() == 2, lambda: f"mactile::{op} takes x [M, K]")
    torch._check(x.shape[1] == k, lambda: f"mactile::{op}: x has {x.shape[1]} columns, the weight K = {k}")
    return x.new_empty((x.shape[0], n))


@w4a16.register_kernel("cuda")
def _w4a16_cuda(x, codes, scales, rm_codes, rm_scales, spec, n, k, tensor_scale, has_tensor_scale, out_log2):
    from mactile.gpu.linear import linear  # noqa: PLC0415

    return _fp4_cuda(linear, x, codes, scales, rm_codes, rm_scales, spec, n, k, tensor_scale, out_log2)


@w4a16.register_fake
def _w4a16_fake(x, codes, scales, rm_codes, rm_scales, spec, n, k, tensor_scale, has_tensor_scale, out_log2):
    return _fp4_fake("w4a16", x, n, k)


def _nvfp4_activations(x: torch.Tensor) -> torch.Tensor:
    """Golden NVFP4 activations (the GPU quantizer's: FP16 input, one tensor scale over
    all of ``x``), dequantized, float32."""
    from mactile.golden import NVFP4  # noqa: PLC0415

    a = _np(x.to(torch.float16))
    return torch.from_numpy(NVFP4().quantize(a).dequantize().astype(np.float32))


@torch.library.custom_op("mactile::w4a4", mutates_args=())
def w4a4(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, rm_codes: torch.Tensor,
         rm_scales: torch.Tensor, spec: str, n: int, k: int, tensor_scale: float,
         has_tensor_scale: bool, out_log2: int) -> torch.Tensor:
    """ReSET's W4A4: ``x`` (rounded to FP16) quantized to NVFP4 (one tensor scale over all
    of ``x``), times NVFP4 weights. CPU: golden quantizer and dequantization, float32
    matmul. Arguments: see :data:`FP4_ARGS`."""
    w = fp4_weight(codes, scales, rm_codes, rm_scales, spec, n, k, tensor_scale, has_tensor_scale, out_log2)
    return torch.matmul(_nvfp4_activations(x), w.t()).to(x.dtype)



@w4a4.register_kernel("cuda")
def _w4a4_cuda(x, codes, scales, rm_codes, rm_scales, spec, n, k, tensor_scale, has_tensor_scale, out_log2):
    from mactile.gpu.w4a4 import linear_w4a4  # noqa: PLC0415

    return _fp4_cuda(linear_w4a4, x, codes, scales, rm_codes, rm_scales, spec, n, k, tensor_scale, out_log2)


@w4a4.register_fake
def _w4a4_fake(x, codes, scales, rm_codes, rm_scales, spec, n, k, tensor_scale, has_tensor_scale, out_log2):
    return _fp4_fake("w4a4", x, n, k)


# --------------------------------------------------------------------------- NestedFP
NESTEDFP_MODES = ("fp16", "fp8")


def _check_nestedfp_mode(mode: str) -> None:
    if mode not in NESTEDFP_MODES:
        raise ValueError(f"mactile::nestedfp: mode must be one of {NESTEDFP_MODES}, got {mode!r}")


def _planes_logical(upper, lower, n, k):
    from mactile.gpu.nestedfp.kernels import unpermute_k  # noqa: PLC0415

    u = unpermute_k(_np(upper))[:n, :k]
    lo = unpermute_k(_np(lower))[:n, :k]
    return u, lo


def nestedfp_weight(upper, lower, weight, n, k, mode):
    """The weight a NestedFP layer multiplies in ``mode``, float32 ``[n, k]`` (cached):
    FP16 mode the FP16 weights merged from the planes (golden ``nestedfp_merge``), FP8 mode
    the upper plane read as E4M3 (``256 w`` rounded; the factor ``2**-8`` is applied to the
    output). An exception layer (``weight`` non-empty) is its FP16 weights in both modes."""
    from mactile.golden import FP8_E4M3, nestedfp_merge  # noqa: PLC0415

    def build():
        if weight.numel():
            return weight.detach().cpu().view(torch.float16).float()
        u, lo = _planes_logical(upper, lower, n, k)
        if mode == "fp16":
            w = nestedfp_merge(u, lo).view(np.float16).astype(np.float32)
        else:
            w = FP8_E4M3.values[u].astype(np.float32)
        return torch.from_numpy(np.ascontiguousarray(w))
    return _cached_weight((upper, lower, weight, _MODE_KEYS[mode]), build)


#: One key tensor per mode, so that both modes' weights of a layer are cached.
_MODE_KEYS = {m: torch.empty(0) for m in NESTEDFP_MODES}


def _e4m3_activations(x: torch.Tensor):
    """Golden per-token E4M3 activations: (E4M3 values float32 [M, K], scales float32 [M])."""
    from mactile.golden import FP8_E4M3  # noqa: PLC0415
    from mactile.golden.fp8token import per_token_e4m3  # noqa: PLC0415

    codes, sc = per_token_e4m3(_np(x.to(torch.float16)))
    return torch.from_numpy(FP8_E4M3.values[codes].astype(np.float32)), torch.from_numpy(sc.astype(np.float32))


@torch.library.custom_op("mactile::nestedfp", mutates_args=())
def nestedfp(x: torch.Tensor, upper: torch.Tensor, lower: torch.Tensor, weight: torch.Tensor,
             n: int, k: int, mode: str) -> torch.Tensor:
    """NestedFP ``y = x @ W.T`` in ``mode`` ``"fp16"`` or ``"fp8"``.

    ``upper``/``lower``: the kernels' padded, K-permuted byte planes (empty for an
    exception layer); ``weight``: the FP16 weights of an exception layer as int16 bits
    (else empty).
    CPU: FP16 mode ``x @ W16.T`` in float32; FP8 mode the golden per-token E4M3 activations
    (values ``A``, scales ``s``) and ``y = (A @ E4M3(upper).T) * (s * 2**-8)`` in float32
    (:func:`mactile.golden.fp8token.nestedfp8_matmul_reference`'s definition).
    """
    _check_nestedfp_mode(mode)
    w = nestedfp_weight(upper, lower, weight, n, k, mode)
    if mode == "fp16" or weight.numel():
        return torch.matmul(x.to(torch.float16).float(), w.t()).to(x.dtype)
    a, s = _e4m3_activations(x)
    acc = torch.matmul(a, w.t())
    return (acc * (s * np.float32(2.0 ** -8))[:, None]).to(x.dtype)


@nestedfp.register_kernel("cuda")
def _nestedfp_cuda(x, upper, lower, weight, n, k, mode):
    _check_nestedfp_mode(mode)
    x16 = _fp16_input(x)
    if weight.numel():  # exception layer: FP16 in both modes (NestedFP Sec. 5.1)
        return torch.matmul(x16, weight.view(torch.float16).t()).to(x.dtype)
    from mactile.gpu.engine import gemm_fp8, gemm_planes, use_pdl  # noqa: PLC0415
    from mactile.gpu.nestedfp.kernels import quantize_e4m3  # noqa: PLC0415
    from mactile.gpu.tuning import engine_choice, load_table  # noqa: PLC0415

    m = int(x16.shape[0])
    kp = int(upper.shape[1])
    y = torch.empty((m, n), dtype=torch.float16, device=x.device)
    with on_torch_stream(x.device) as cp:
        cfg, _ = engine_choice(load_table(), "nestedfp16" if mode == "fp16" else "nestedfp8", k, n, m)
        up, yv = view(cp, upper), view(cp, y)
        if mode == "fp16":
            gemm_planes(view(cp, x16), up, view(cp, lower), n, cfg=cfg, out=yv, pdl=use_pdl(m))
        else:
            xq = torch.empty((m, kp), dtype=torch.uint8, device=x.device)
            xs = torch.empty((m,), dtype=torch.float32, device=x.device)
            flag = torch.empty((1,), dtype=torch.int32, device=x.device)  # never read: no sync
            quantize_e4m3(view(cp, x16), kp, check_finite=False, into=(view(cp, xq), view(cp, xs)),
                          flag=view(cp, flag), pdl=use_pdl(m))
            gemm_fp8(view(cp, xq), view(cp, xs), up, n, cfg=cfg, out=yv, pdl=use_pdl(m))
    return y.to(x.dtype)


@nestedfp.register_fake
def _nestedfp_fake(x, upper, lower, weight, n, k, mode):
    torch._check(x.dim() == 2, lambda: "mactile::nestedfp takes x [M, K]")
    torch._check(x.shape[1] == k, lambda: f"mactile::nestedfp: x has {x.shape[1]} columns, the weight K = {k}")
    return x.new_empty((x.shape[0], n))


# --------------------------------------------------------------------------- FlexQ
FLEXQ_ACT_BITS = (6, 8)


def _flexq_packed(planes, scales, n, k, cp=None):
    from mactile.gpu.flexq.layout import WEIGHT_TILE, PackedPlanes  # noqa: PLC0415

    if cp is None:
        return PackedPlanes(_np(planes, np.uint32), _np(scales, np.uint16), int(n), int(k), 6, WEIGHT_TILE)
    return PackedPlanes(view(cp, planes, "uint32"), view(cp, scales, "uint16"), int(n), int(k), 6, WEIGHT_TILE)


def flexq_weight(planes, scales, n, k):
    """The golden dequantized INT6 weight ``[n, k]`` (integer times its group's FP16 scale)."""
    from mactile.gpu.flexq.layout import unpack_planes  # noqa: PLC0415

    def build():
        q, s = unpack_planes(_flexq_packed(planes, scales, n, k))
        sv = np.repeat(s.view(np.float16).astype(np.float64), 128, axis=1)
        return torch.from_numpy((q * sv).astype(np.float32))
    return _cached_weight((planes, scales), build)


def _intgroup_activations(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Golden INT``bits`` activations per group of 128 (FP16 input), dequantized, float32."""
    from mactile.golden import IntGroup  # noqa: PLC0415

    a = _np(x.to(torch.float16))
    return torch.from_numpy(IntGroup(bits=bits).quantize(a).dequantize().astype(np.float32))


@torch.library.custom_op("mactile::flexq", mutates_args=())
def flexq(x: torch.Tensor, planes: torch.Tensor, scales: torch.Tensor, n: int, k: int,
          act_bits: int) -> torch.Tensor:
    """FlexQ ``y = x @ W.T``: INT6 weights (bit planes, FP16 group scales), activations
    quantized per group of 128 to INT``act_bits`` (6 or 8). CPU: golden IntGroup
    activations and weights, dequantized, float32 matmul."""
    if act_bits not in FLEXQ_ACT_BITS:
        raise ValueError(f"mactile::flexq: act_bits must be one of {FLEXQ_ACT_BITS}, got {act_bits}")
    w = flexq_weight(planes, scales, n, k)
    return torch.matmul(_intgroup_activations(x, act_bits), w.t()).to(x.dtype)


@flexq.register_kernel("cuda")
def _flexq_cuda(x, planes, scales, n, k, act_bits):
    from mactile.gpu.flexq.kernels import FlexQLinear  # noqa: PLC0415

    x16 = _fp16_input(x)
    y = torch.empty((x16.shape[0], n), dtype=torch.float16, device=x.device)
    with on_torch_stream(x.device) as cp:
        lin = cached(planes, (planes, scales), lambda: FlexQLinear(_flexq_packed(planes, scales, n, k, cp)))
        lin(view(cp, x16), act_bits=act_bits, y=view(cp, y))
    return y.to(x.dtype)


@flexq.register_fake
def _flexq_fake(x, planes, scales, n, k, act_bits):
    torch._check(x.dim() == 2, lambda: "mactile::flexq takes x [M, K]")
    torch._check(x.shape[1] == k, lambda: f"mactile::flexq: x has {x.shape[1]} columns, the weight K = {k}")
    return x.new_empty((x.shape[0], n))


# --------------------------------------------------------------------------- ReSET sampler
_STATE = ("count", "sum_all", "t0", "step_sum", "step_n", "prev_end", "ring")


@torch.library.custom_op("mactile::reset_temperature_step",
                         mutates_args=("count", "sum_all", "t0", "step_sum", "step_n", "prev_end", "ring"))
def reset_temperature_step(logits: torch.Tensor, step_end_mask: torch.Tensor, seq_ids: torch.Tensor,
                           count: torch.Tensor, sum_all: torch.Tensor, t0: torch.Tensor,
                           step_sum: torch.Tensor, step_n: torch.Tensor, prev_end: torch.Tensor,
                           ring: torch.Tensor, tau0: float, t_low: float, t_high: float,
                           seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                               torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decoding step of ReSET's step-aware temperature sampler for ``logits [B, V]``.

    State per sequence slot (updated in place): ``count``, ``t0``, ``step_n`` int64 [B];
    ``sum_all``, ``step_sum`` float64 [B]; ``prev_end`` int32 [B]; ``ring`` float64 [B, window].
    ``step_end_mask`` uint8 [V]; ``seq_ids`` int64 [B] (the generator's sequence ids).
    Returns ``(tokens int32, temperature float32, entropy float32, h_step, h_bar, tau
    float64)``, each [B]. CPU: the golden :class:`~mactile.golden.StepAwareTemperature` with
    the kernel's summation layout (so CPU and GPU draw the same tokens).
    """
    from mactile.golden import StepAwareTemperature  # noqa: PLC0415
    from mactile.gpu.temperature import KERNEL_LAYOUT  # noqa: PLC0415 (NumPy only)

    B, window = int(logits.shape[0]), int(ring.shape[1])
    g = StepAwareTemperature(tau0=tau0, t_low=t_low, t_high=t_high, window=window, seed=seed,
                             layout=KERNEL_LAYOUT)
    ids = _np(seq_ids).astype(np.int64)
    st = {name: _np(t).copy() for name, t in zip(_STATE, (count, sum_all, t0, step_sum, step_n, prev_end, ring))}
    z = _np(logits if logits.dtype in (torch.float16, torch.float32) else logits.float())
    end = _np(step_end_mask).astype(bool)
    parts = []
    # one slot at a time: the state belongs to the slot (as in the kernel), not to the sequence
    # id, which two slots may share (the id only seeds the random draws)
    for b in range(B):
        sid = int(ids[b])
        g.state = {sid: {"count": int(st["count"][b]), "sum_all": float(st["sum_all"][b]),
                         "t0": int(st["t0"][b]), "step_sum": float(st["step_sum"][b]),
                         "step_n": int(st["step_n"][b]), "prev_end": bool(st["prev_end"][b]),
                         "ring": st["ring"][b].astype(np.float64).copy()}}
        parts.append(g.step(z[b:b + 1], end, seq_ids=ids[b:b + 1]))
        s = g.state[sid]
        for name in _STATE[:-1]:
            st[name][b] = s[name]
        st["ring"][b] = s["ring"]
    for name, t in zip(_STATE, (count, sum_all, t0, step_sum, step_n, prev_end, ring)):
        t.copy_(torch.from_numpy(st[name]))
    r = type(parts[0])(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                         ("tokens", "temperature", "entropy", "h_step", "h_bar", "tau")))
    return tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in
                 (r.tokens, r.temperature, r.entropy, r.h_step, r.h_bar, r.tau))


@reset_temperature_step.register_kernel("cuda")
def _reset_temperature_cuda(logits, step_end_mask, seq_ids, count, sum_all, t0, step_sum, step_n,
                            prev_end, ring, tau0, t_low, t_high, seed):
    from mactile.gpu.temperature import StepAwareTemperatureGPU  # noqa: PLC0415

    B, window = int(logits.shape[0]), int(ring.shape[1])
    dev = logits.device
    outs = (torch.empty(B, dtype=torch.int32, device=dev), torch.empty(B, dtype=torch.float32, device=dev),
            torch.empty(B, dtype=torch.float32, device=dev), torch.empty(B, dtype=torch.float64, device=dev),
            torch.empty(B, dtype=torch.float64, device=dev), torch.empty(B, dtype=torch.float64, device=dev))
    z = logits if logits.dtype in (torch.float16, torch.float32) else logits.float()
    z = z.contiguous()
    with on_torch_stream(dev) as cp:
        state = (count, sum_all, t0, step_sum, step_n, prev_end, ring, seq_ids)

        def build():
            s = StepAwareTemperatureGPU(batch=B, tau0=tau0, t_low=t_low, t_high=t_high,
                                        window=window, seed=seed)
            for name, t in zip(_STATE + ("seq_ids",), state):
                setattr(s, name, view(cp, t))  # the kernel reads and writes torch's tensors
            return s
        s = cached(count, state, build)
        s.tau0, s.t_low, s.t_high, s.seed = tau0, t_low, t_high, seed
        s.out = dict(zip(("tokens", "temperature", "entropy", "h_step", "h_bar", "tau"),
                         (view(cp, o) for o in outs)))
        s.step(view(cp, z), view(cp, step_end_mask.to(torch.uint8).contiguous()))
    return outs


@reset_temperature_step.register_fake
def _reset_temperature_fake(logits, step_end_mask, seq_ids, count, sum_all, t0, step_sum, step_n,
                            prev_end, ring, tau0, t_low, t_high, seed):
    B = logits.shape[0]
    return (logits.new_empty(B, dtype=torch.int32), logits.new_empty(B, dtype=torch.float32),
            logits.new_empty(B, dtype=torch.float32), logits.new_empty(B, dtype=torch.float64),
            logits.new_empty(B, dtype=torch.float64), logits.new_empty(B, dtype=torch.float64))


#: Every op of this module (``torch.ops.mactile.<name>``).
OPS = ("w4a16", "w4a4", "nestedfp", "flexq", "reset_temperature_step")
