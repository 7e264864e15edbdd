"""Packers from golden :class:`~mactile.golden.Quantized` weights to the kernels' layouts,
and back (for tests).

Two layouts, both padded to whole tiles (padding elements are real zeros with a zero
block scale, so they contribute nothing; RaZeR-G128's frag padding blocks get scale 1,
:func:`nonzero_kernel_scales`):

``frag`` (tensor-core kernel; Marlin-style offline shuffle)
    ``codes``: uint32 ``[RT][K_pad/64][4][32][4]``: row tile (64 rows), group of four
    16-wide k-steps, m16 tile, lane, k-step in the group. One word holds the eight FP4
    codes lane ``(g = lane/4, t = lane%4)`` needs for one ``mma.m16n8k16`` A fragment:
    nibbles 0-3 are row ``g`` at k ``2t, 2t+1, 2t+8, 2t+9`` and nibbles 4-7 the same k of
    row ``g+8``, so one ``prmt`` per row decodes with that row's lookup table and a
    16-byte shared-memory load serves four k-steps. Formats decoded by bit placement
    (``KernelFormat.bp``: nvfp4) permute the word's 32 bits instead
    (:func:`mactile.gpu.formats.bp_bit_positions`): bit ``i`` of the code in nibble slot
    ``n`` sits at bit ``pos[n, i]``, so that rotations and masks yield the f16x2 A registers.
    ``scales`` (block 16): ``[RT][K_pad/64][4][8][4][2]``: row tile, group of four block
    columns, m16 tile, g, block column in the group, row g / g+8 -- the eight scales a
    lane needs for one group of four k-steps are adjacent (one 8-byte load).
    ``scales`` (block 128): ``[RT][K_pad/128][4][8][2]``.

``rowmajor`` (CUDA-core kernels, W4A16 and ReSET's W4A4)
    ``codes``: uint8 ``[N_pad][K_pad/2]``, low nibble = element ``2i`` (ReSET's NVFP4
    packing); ``scales``: ``[N_pad/8][K_pad/B][8]``: the scales of eight consecutive rows
    for one block column adjacent (a thread owning eight rows of a block loads them at once).

Both layouts keep the golden scale codes bit for bit (RaZeR metadata bits included), with
two exceptions in ``frag``, each exact for the dequantized weight: MXFP4's E8M0 exponents
become the kernels' scale bytes (:func:`pow2_kernel_scales`), and RaZeR-G128's blocks of
scale 0 get the zero code and scale 1 (:func:`nonzero_kernel_scales`).
All functions take an ``xp`` namespace (NumPy or CuPy) so packing can run on the GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mactile.golden import E8M0, FP16, Quantized
from mactile.golden.storage import ZERO_CODE

from .formats import (BP_FRAG_SLOTS, BP_LOG2, BP_SCALE_LOG2, FORMAT_IDS, POW2_WINDOW, EngineScale,
                      KernelFormat, bp_bit_positions, bp_decode_word, kernel_format,
                      kernel_scale_words)

__all__ = ["PackedW4A16", "pack_w4a16", "unpack_frag", "unpack_rowmajor", "ROW_TILE",
           "FRAG_K_ALIGN", "FRAG_ROW_PAD", "ROWMAJOR_K_ALIGN", "pow2_kernel_scales",
           "nonzero_kernel_scales", "ACT_K_ALIGN", "quantized_from_arrays", "PackedActivation",
           "pack_activation", "unpack_activation", "prmt", "emulate_frag_values",
           "emulate_rowmajor_values", "LAYOUTS"]

#: Rows per tile in both layouts.
ROW_TILE = 64
#: Row padding of the frag layout: the GEMM engine's largest CTA tile (four 64-row
#: consumer warpgroups).
FRAG_ROW_PAD = 256
#: K padding of the frag layout (a group of four 16-wide k-steps).
FRAG_K_ALIGN = 64
#: K padding of the rowmajor layout (a 16-byte chunk of codes).
ROWMAJOR_K_ALIGN = 32
LAYOUTS = ("frag", "rowmajor")


def _ceil_to(a: int, b: int) -> int:
    return -(-a // b) * b


@dataclass
class PackedW4A16:
    """A weight matrix ``W[N, K]`` in kernel layouts (arrays on the host or the GPU).

    ``y = x @ W.T`` for ``x[M, K]``; ``tensor_scale`` is the golden FP32 second-level scale.
    """

    fmt: KernelFormat
    N: int
    K: int
    tensor_scale: float
    layouts: dict = field(default_factory=dict)  # name -> {"codes":..., "scales":..., "K_pad":...}

    @property
    def N_pad(self) -> int:
        return _ceil_to(self.N, ROW_TILE)

    def layout(self, name: str) -> dict:
        try:
            return self.layouts[name]
        except KeyError:
            raise ValueError(f"this packed weight has no {name!r} layout (it has "
                             f"{sorted(self.layouts)}); pack with layouts=({name!r}, ...)") from None

    def nbytes(self, name: str) -> int:
        lay = self.layout(name)
        return int(lay["codes"].nbytes + lay["scales"].nbytes)

    def to(self, xp) -> "PackedW4A16":
        """Copy of this object with every array converted by ``xp.asarray``."""
        lays = {k: {kk: (xp.asarray(v) if hasattr(v, "shape") else v) for kk, v in lay.items()}
                for k, lay in self.layouts.items()}
        return PackedW4A16(self.fmt, self.N, self.K, self.tensor_scale, lays)


def _check_weight(q: Quantized) -> KernelFormat:
    if not isinstance(q, Quantized):
        raise TypeError(f"expected a golden Quantized weight, got {type(q).__name__}")
    kf = kernel_format(q.format)
    if len(q.shape) != 2:
        raise ValueError(f"weights must be 2-D [N, K]; got shape {q.shape}")
    if q.tensor_scale is None and kf.tensor_scale:
        raise ValueError("the Quantized weight has no tensor scale")
    _refuse_special_scales(kf, q.scales)
    return kf


def _refuse_special_scales(kf: KernelFormat, scales) -> None:
    """The kernels place scale bits as numbers: a NaN or Inf scale code (a class of the
    scale field, :attr:`~mactile.golden.storage.ScaleWord.classes`) is refused by name."""
    word = kf.golden.storage.word
    cls = word.classes
    bad = np.asarray(cls.nan + cls.inf, dtype=np.int64)
    if bad.size and scales is not None:
        payload = np.asarray(scales).astype(np.int64) & word.scale_mask
        hit = np.isin(payload, bad)
        if hit.any():
            code = int(payload[hit].flat[0])
            raise ValueError(f"{kf.name} weight has a {cls.of(code).value} block scale (code "
                             f"{code:#x}): the GPU kernels decode finite scales only")


def _codes_scales(q: Quantized, xp):
    N, K = q.shape
    codes = xp.asarray(q.codes).reshape(N, K)
    scales = xp.asarray(q.scales).reshape(N, K // q.format.block_size)
    return codes, scales


def _padded(kf: KernelFormat, codes, scales, N_pad, K_pad, xp):
    N, K = codes.shape
    pad_code = ZERO_CODE if kf.has_special else 0
    C = xp.full((N_pad, K_pad), pad_code, dtype=xp.uint8)
    C[:N, :K] = codes
    S = xp.zeros((N_pad, K_pad // kf.block), dtype=kf.scale_dtype)
    S[:N, : scales.shape[1]] = scales
    return C, S


def _frag_blocks_per_group(kf: KernelFormat) -> int:
    """Block columns whose scales one frag scale group holds: the blocks of 64 k (one
    group of four k-steps), or one block when a block spans more."""
    return max(1, 64 // kf.block)


def pow2_kernel_scales(codes, scales, block: int, xp=np):
    """E8M0 block scales -> the kernels' scale bytes ``b = e - D`` and the output power of two.

    The kernels multiply the bit-placement value ``v * 2**BP_LOG2`` by the FP16 value
    ``2**(b - FP16.bias)``; that product is exact for ``b`` in :data:`formats.POW2_WINDOW`
    (``[6, 30]``). One offset ``D`` per matrix moves every block that holds a non-zero code into
    the window; the kernel's result is multiplied by ``2**(D - E8M0.bias - BP_LOG2 + FP16.bias)``
    (``D = 98`` gives 1 and is preferred). Returns ``(bytes, log2 of that factor)``. Blocks of zero codes get ``b = POW2_WINDOW[0]``
    (their scale multiplies zeros).

    Raises
    ------
    ValueError
        When the non-zero blocks' scale exponents span more than the window (25 binades):
        such a matrix has no exact FP16 decode.
    """
    lo, hi = POW2_WINDOW
    e = xp.asarray(scales).astype(xp.int32)
    nz = (xp.asarray(codes).reshape(codes.shape[0], -1, block) & 7).any(axis=-1)
    if not bool(nz.any()):
        return xp.full(e.shape, lo, dtype=xp.uint8), 0
    emax, emin = int(e[nz].max()), int(e[nz].min())
    d_lo, d_hi = emax - hi, emin - lo
    if d_lo > d_hi:
        raise ValueError(
            f"mxfp4 weight: the non-zero blocks' E8M0 scales span 2^{emin - E8M0.bias} .. "
            f"2^{emax - E8M0.bias} ({emax - emin + 1} binades); the GPU kernels decode exactly "
            f"only {hi - lo + 1} consecutive binades per matrix (FP16 operands)")
    ideal = E8M0.bias + BP_LOG2 - FP16.bias  # 98: the kernel result needs no extra factor
    D = min(max(ideal, d_lo), d_hi)
    b = xp.where(nz, e - D, lo).astype(xp.uint8)
    return b, D - ideal


def nonzero_kernel_scales(kf: KernelFormat, codes, scales, xp=np):
    """RaZeR-G128 blocks of scale 0 -> the zero code in every element and scale 1.0.

    The GEMM engine keeps its accumulators in units of the current block scale and moves
    to the next block by the ratio of the two scales (``engine_scale_step`` in
    ``kernels/engine.cu``), so no block scale may be 0. A block of scale 0 contributes nothing in the golden model whatever
    its codes; so does a block of zero codes with scale 1 (the metadata bits are kept).
    Padding blocks (scale 0) are among them. Returns ``(codes, scales)``, new arrays.
    """
    payload = scales & scales.dtype.type(kf.scale_mask)
    zero = payload == 0
    one = scales.dtype.type(int(kf.scale_format.encode(np.array([1.0]))[0]))  # the spec's code of 1.0
    S = xp.where(zero, (scales & scales.dtype.type(~kf.scale_mask & 0xFFFF)) | one, scales).astype(scales.dtype)
    C = xp.where(xp.repeat(zero, kf.block, axis=1), xp.uint8(ZERO_CODE if kf.has_special else 0), codes)
    return C.astype(xp.uint8), S


def pack_w4a16(q: Quantized, *, layouts=None, xp=np) -> PackedW4A16:
    """Pack a golden ``nvfp4``/``razer``/``razer-g128`` weight ``[N, K]``.

    Parameters
    ----------
    q : Quantized
        Weight quantized along K (the last axis), shape ``(N, K)``.
    layouts : iterable of {"frag", "rowmajor"}, optional
        Layouts to build: ``frag`` feeds the tensor-core kernels (the GEMM engine),
        ``rowmajor`` the CUDA-core kernels (not for mxfp4). Default: every layout the
        format's kernels read. ``linear`` dispatches among the kernels whose layout exists.
    xp : module
        ``numpy`` or ``cupy``: where the arrays are built.
    """
    kf = _check_weight(q)
    supported = LAYOUTS if kf.fmt_id >= 0 else ("frag",)  # the CUDA-core kernels: nvfp4/razer/razer-g128
    layouts = supported if layouts is None else tuple(layouts)
    for name in layouts:
        if name not in LAYOUTS:
            raise ValueError(f"unknown layout {name!r}; choose from {LAYOUTS}")
        if name not in supported:
            raise ValueError(f"format {kf.name} has no {name!r} kernel layout (the CUDA-core kernels "
                             f"take {', '.join(FORMAT_IDS)}); pack with layouts={supported}")
    N, K = q.shape
    codes, scales = _codes_scales(q, xp)
    out = PackedW4A16(kf, N, K, float(q.tensor_scale) if q.tensor_scale is not None else 1.0, {})
    N_pad = _ceil_to(N, ROW_TILE)
    if "frag" in layouts:
        K_pad = _ceil_to(K, max(FRAG_K_ALIGN, kf.block))
        C, S = _padded(kf, codes, scales, _ceil_to(N, FRAG_ROW_PAD), K_pad, xp)
        out_log2 = 0
        if kf.scale_kind is EngineScale.POW2_F16:  # kernel bytes inside the FP16 window
            S, out_log2 = pow2_kernel_scales(C, S, kf.block, xp)
        if kf.scale_kind is EngineScale.FP32:  # RESCALE: the engine divides by block scales
            C, S = nonzero_kernel_scales(kf, C, S, xp)
        RT, G = C.shape[0] // ROW_TILE, K_pad // 64
        # row = rt*64 + mt*16 + h*8 + g ; k = (grp*4 + ks)*16 + kh*8 + 2t + j
        c = C.reshape(RT, 4, 2, 8, G, 4, 2, 4, 2).transpose(0, 4, 1, 3, 7, 5, 2, 6, 8)
        c = c.reshape(RT, G, 4, 32, 4, 8).astype(xp.uint32)
        if kf.bp:  # bit-permuted words of the bit-placement decode
            pos = bp_bit_positions()
            words = xp.zeros(c.shape[:-1], dtype=xp.uint32)
            for n in range(8):
                for i in range(4):
                    words |= ((c[..., n] >> i) & 1) << int(pos[n, i])
        else:
            shifts = (4 * xp.arange(8, dtype=xp.uint32)).reshape(1, 1, 1, 1, 1, 8)
            words = (c << shifts).sum(axis=-1, dtype=xp.uint32)  # disjoint nibbles: sum == OR
        KB = K_pad // kf.block
        nb = _frag_blocks_per_group(kf)  # rt, q, mt, g, j, h with kb = nb q + j
        s = S.reshape(RT, 4, 2, 8, KB // nb, nb).transpose(0, 4, 1, 3, 5, 2)
        out.layouts["frag"] = {"codes": xp.ascontiguousarray(words.astype(xp.uint32)),
                               "scales": xp.ascontiguousarray(s), "K_pad": K_pad, "out_log2": out_log2}
    if "rowmajor" in layouts:
        K_pad = _ceil_to(K, max(ROWMAJOR_K_ALIGN, kf.block))
        C, S = _padded(kf, codes, scales, N_pad, K_pad, xp)
        b = (C[:, 0::2] | (C[:, 1::2] << 4)).astype(xp.uint8)
        KB = K_pad // kf.block
        s = S.reshape(N_pad // 8, 8, KB).transpose(0, 2, 1)
        out.layouts["rowmajor"] = {"codes": xp.ascontiguousarray(b),
                                   "scales": xp.ascontiguousarray(s), "K_pad": K_pad}
    return out


def unpack_frag(p: PackedW4A16):
    """Inverse of the frag packing: ``(codes[N, K], scales[N, K/B])`` as NumPy arrays (the
    kernels' codes and scales: MXFP4's kernel scale bytes, RaZeR-G128's scale-0 blocks as
    zero codes with scale 1)."""
    lay = p.layout("frag")
    words = np.asarray(_host(lay["codes"]), dtype=np.uint32)
    RT, G = words.shape[0], words.shape[1]
    nib = _frag_nibbles(p.fmt, words)
    c = nib.reshape(RT, G, 4, 8, 4, 4, 2, 2, 2)  # rt, grp, mt, g, t, ks, h, kh, j
    c = c.transpose(0, 2, 6, 3, 1, 5, 7, 4, 8).reshape(RT * 64, G * 64)
    s = _frag_scales_rkmgh(p)  # rt, kb, mt, g, h
    s = s.transpose(0, 2, 4, 3, 1).reshape(RT * 64, -1)
    return c[: p.N, : p.K], s[: p.N, : p.K // p.fmt.block]


def _frag_nibbles(kf: KernelFormat, words) -> np.ndarray:
    """Codes of frag words, ``[..., 8]`` in nibble-slot order (both word layouts)."""
    words = np.asarray(words, dtype=np.uint32)
    if kf.bp:
        pos = bp_bit_positions()
        nib = np.zeros(words.shape + (8,), dtype=np.uint8)
        for n in range(8):
            for i in range(4):
                nib[..., n] |= (((words >> np.uint32(pos[n, i])) & np.uint32(1)) << np.uint32(i)).astype(np.uint8)
        return nib
    return ((words[..., None] >> (4 * np.arange(8, dtype=np.uint32))) & 0xF).astype(np.uint8)


def _frag_scales_rkmgh(p: PackedW4A16) -> np.ndarray:
    """The frag layout's scales as ``[RT][KB][4 mt][8 g][2 h]`` (host copy)."""
    s = np.asarray(_host(p.layout("frag")["scales"]))  # rt, q, mt, g, j, h
    s = s.transpose(0, 1, 4, 2, 3, 5)
    return s.reshape(s.shape[0], -1, 4, 8, 2)


def unpack_rowmajor(p: PackedW4A16):
    """Inverse of the rowmajor packing: ``(codes[N, K], scales[N, K/B])``."""
    lay = p.layout("rowmajor")
    b = np.asarray(_host(lay["codes"]))
    c = np.empty((b.shape[0], b.shape[1] * 2), dtype=np.uint8)
    c[:, 0::2] = b & 0xF
    c[:, 1::2] = b >> 4
    s = np.asarray(_host(lay["scales"])).transpose(0, 2, 1).reshape(b.shape[0], -1)
    return c[: p.N, : p.K], s[: p.N, : p.K // p.fmt.block]


def quantized_from_arrays(fmt, codes, scales, tensor_scale) -> Quantized:
    """A golden :class:`Quantized` ``[N, K]`` from codes ``[N, K]`` and scales ``[N, K/B]``."""
    N, K = codes.shape
    B = fmt.block_size
    return Quantized(format=fmt, shape=(N, K), codes=np.asarray(codes, np.uint8).reshape(N, K // B, B),
                     scales=np.asarray(scales).astype(fmt.scale_dtype).reshape(N, K // B),
                     tensor_scale=None if tensor_scale is None else np.float32(tensor_scale))


def _host(a):
    return a.get() if hasattr(a, "get") else a


# --------------------------------------------------------------------------- activations
#: K padding of the activation buffers of the W4A4 GEMV (one 512-wide unit).
ACT_K_ALIGN = 512


@dataclass
class PackedActivation:
    """NVFP4 activations ``[M, K]`` as ReSET's GEMV reads them: codes ``[M, KA/2]`` (low
    nibble = element 2i), linear E4M3 scales ``[M, KA/16]``, zero padded to
    ``KA = ceil(K / 512) * 512`` columns, and the FP32 tensor scale as a 1-element array
    (it stays on the GPU when the GPU computed it).

    For the tensor-core path (:func:`mactile.gpu.w4a4.linear_w4a4`, ``kernel="engine"``) the
    GPU quantizer also fills ``dequant``, FP16 ``[M, K]``: each element's FP4 value times its
    block scale, without the tensor scale (exact in FP16), and ``col_scale``, FP32 ``[M]``:
    the tensor scale once per token (the engine's per-token output factor)."""

    M: int
    K: int
    codes: object
    scales: object
    tensor_scale: object
    dequant: object = None
    col_scale: object = None

    @property
    def KA(self) -> int:
        return _ceil_to(self.K, ACT_K_ALIGN)


def pack_activation(q: Quantized, *, xp=np) -> PackedActivation:
    """Pack a golden NVFP4 activation tensor ``[M, K]`` (the GEMV's input format)."""
    from mactile.golden import require_default_convention
    require_default_convention(q.format, "the W4A4 GPU kernels")
    try:
        ok = kernel_format(q.format).w4a4
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"W4A4 activations must be nvfp4 with block 16, got {q.format.describe()}")
    if len(q.shape) != 2:
        raise ValueError(f"activations must be 2-D [M, K]; got shape {q.shape}")
    M, K = q.shape
    KA = _ceil_to(K, ACT_K_ALIGN)
    c = xp.zeros((M, KA), dtype=xp.uint8)
    c[:, :K] = xp.asarray(q.codes).reshape(M, K)
    codes = (c[:, 0::2] | (c[:, 1::2] << 4)).astype(xp.uint8)
    sc = xp.zeros((M, KA // 16), dtype=xp.uint8)
    sc[:, : K // 16] = xp.asarray(q.scales).reshape(M, K // 16)
    return PackedActivation(M, K, xp.ascontiguousarray(codes), sc,
                            xp.asarray(np.asarray([q.tensor_scale], np.float32)))


def unpack_activation(a: PackedActivation) -> Quantized:
    """Golden :class:`Quantized` of packed NVFP4 activations (for bit-exact comparisons)."""
    from mactile.golden import NVFP4

    b = np.asarray(_host(a.codes))
    c = np.empty((a.M, b.shape[1] * 2), dtype=np.uint8)
    c[:, 0::2] = b & 0xF
    c[:, 1::2] = b >> 4
    ts = np.asarray(_host(a.tensor_scale), dtype=np.float32).reshape(-1)[0]
    s = np.asarray(_host(a.scales))[:, : a.K // 16]
    return quantized_from_arrays(NVFP4(), c[:, : a.K], s, ts)


# --------------------------------------------------------------------------- emulation
def prmt(a, b, sel):
    """NumPy model of PTX ``prmt.b32`` (default mode): bytes ``{b, a}`` numbered 0..7,
    selector nibbles from ``sel[15:0]``; nibble bit 3 replicates the chosen byte's sign."""
    a = np.asarray(a, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    sel = np.asarray(sel, dtype=np.uint64)
    src = (b << np.uint64(32)) | a
    out = np.zeros(np.broadcast(a, b, sel).shape, dtype=np.uint64)
    for i in range(4):
        s = (sel >> np.uint64(4 * i)) & np.uint64(0xF)
        byte = (src >> (np.uint64(8) * (s & np.uint64(7)))) & np.uint64(0xFF)
        rep = np.where((s & np.uint64(8)) != 0,
                       np.where((byte & np.uint64(0x80)) != 0, np.uint64(0xFF), np.uint64(0)), byte)
        out |= rep << np.uint64(8 * i)
    return out.astype(np.uint32)


def _lut_bytes(kf: KernelFormat, codes16, meta):
    """The kernel's ``lut4``: LUT bytes of four codes (``codes16`` = 16-bit selector),
    with the block's special value folded into byte 0 of the positive table."""
    p0, p1, n0, n1 = (np.uint32(w) for w in kf.lut)
    p0 = np.broadcast_to(p0, np.shape(codes16)).astype(np.uint32)
    if kf.has_special:
        # kernel: p0 = prmt(P0, SPECIALS, 0x3210 with nibble 0 := 4 + meta)
        sel = (np.uint32(0x3214) + np.asarray(meta, np.uint32)).astype(np.uint32)
        p0 = prmt(p0, np.uint32(kf.specials_word), sel)
    return prmt(p0, p1, codes16) | prmt(n0, n1, np.asarray(codes16, np.uint32) ^ np.uint32(0x8888))


def _bytes_to_values(bytes4):
    v = np.stack([((bytes4 >> np.uint32(8 * i)) & np.uint32(0xFF)).astype(np.int64) for i in range(4)], -1)
    return (v - 64) / 4.0


def _scale_values(kf: KernelFormat, scale_codes):
    """FP32 value of stored scale codes by the kernels' bit placement (payload << F32_SHIFT)
    times 2^(FP32 bias - scale bias); the metadata bits masked off
    (:func:`~mactile.gpu.formats.kernel_scale_words`)."""
    return kernel_scale_words(kf, scale_codes)[0]


def emulate_frag_values(p: PackedW4A16) -> np.ndarray:
    """Dequantized ``W[N, K]`` (float64) computed from the frag layout exactly as the
    tensor-core kernel's decode does (prmt lookups, per-row special folding, scale bit
    placement), without the tensor scale. Tests compare it with the golden model."""
    kf = p.fmt
    lay = p.layout("frag")
    words = np.asarray(_host(lay["codes"]), np.uint32)  # rt, grp, mt, lane, ks
    RT, G = words.shape[:2]
    s = _frag_scales_rkmgh(p)  # rt, kb, mt, g, h
    # per word: the block column of its k-step and the metadata of rows g and g+8
    ks_abs = (np.arange(G)[:, None] * 4 + np.arange(4)[None, :])  # grp, ks
    kb = (ks_abs * 16) // kf.block  # grp, ks
    g = np.arange(32) // 4
    sc = s[:, kb]  # rt, grp, ks, mt, g, h
    sc = sc[:, :, :, :, g, :]  # rt, grp, ks, mt, lane, h
    sc = sc.transpose(0, 1, 3, 4, 2, 5)  # rt, grp, mt, lane, ks, h
    if kf.bp:
        vals = _emulate_bp(kf, words, sc, int(lay.get("out_log2", 0)))
        vals = vals.reshape(RT, G, 4, 8, 4, 4, 2, 2, 2).transpose(0, 2, 6, 3, 1, 5, 7, 4, 8)
        return vals.reshape(RT * 64, G * 64)[: p.N, : p.K]
    meta = (sc.astype(np.uint32) >> np.uint32(kf.meta_shift)) & np.uint32(3) if kf.has_special else np.zeros(sc.shape, np.uint32)
    lo = _lut_bytes(kf, words & np.uint32(0xFFFF), meta[..., 0])
    hi = _lut_bytes(kf, words >> np.uint32(16), meta[..., 1])
    v = np.concatenate([_bytes_to_values(lo), _bytes_to_values(hi)], -1)  # ..., 8 nibbles
    sv = _scale_values(kf, sc)  # rt, grp, mt, lane, ks, h
    vals = v * np.repeat(sv, 4, axis=-1)  # nibbles 0-3 row g (h=0), 4-7 row g+8
    vals = vals.reshape(RT, G, 4, 8, 4, 4, 2, 2, 2).transpose(0, 2, 6, 3, 1, 5, 7, 4, 8)
    return vals.reshape(RT * 64, G * 64)[: p.N, : p.K]


def _emulate_bp(kf: KernelFormat, words, sc, out_log2: int = 0) -> np.ndarray:
    """Bit-placement decode of frag words ``[...]`` with scale codes ``sc [..., 2]`` (rows g,
    g+8): f16x2 registers by rotation and masks, times the FP16 scale ``s * 2^7`` rounded to
    FP16 (the kernel's HMUL2), then the kernel's output power of two. ``[..., 8]`` values in
    nibble-slot order."""
    regs = bp_decode_word(words)  # [..., 4] f16x2
    halves = np.stack([regs & np.uint32(0xFFFF), regs >> np.uint32(16)], -1).astype(np.uint16)
    h = halves.view(np.float16).astype(np.float32)  # [..., 4 reg, 2 half]
    if kf.scale_kind is EngineScale.POW2_F16:  # kernel scale byte b -> FP16 bits b << man_bits
        s = (np.asarray(sc, np.uint16) << np.uint16(FP16.man_bits)).view(np.float16)
        out_pow = 2.0 ** out_log2
    else:
        s = (_scale_values(kf, sc) * 2.0 ** BP_SCALE_LOG2).astype(np.float16)  # [..., 2 rows], exact
        out_pow = 2.0 ** kf.tc_out_log2
    row_of_reg = np.array([0, 1, 0, 1])  # a0, a2 row g; a1, a3 row g+8
    prod = (h * s[..., row_of_reg][..., None].astype(np.float32)).astype(np.float16)  # HMUL2
    vals = prod.astype(np.float64) * out_pow
    slot = np.array([r * 2 + hh for r, hh in BP_FRAG_SLOTS])
    return vals.reshape(vals.shape[:-2] + (8,))[..., slot]


def emulate_rowmajor_values(p: PackedW4A16) -> np.ndarray:
    """Dequantized ``W[N, K]`` from the rowmajor layout as the CUDA-core kernels decode it
    (four codes per ``prmt`` selector, scale bit placement), without the tensor scale."""
    kf = p.fmt
    lay = p.layout("rowmajor")
    b = np.asarray(_host(lay["codes"]), np.uint8)
    Np, Kh = b.shape
    words = b.reshape(Np, Kh // 4, 4).astype(np.uint32)
    words = words[..., 0] | words[..., 1] << 8 | words[..., 2] << 16 | words[..., 3] << 24  # 8 codes
    s = np.asarray(_host(lay["scales"])).transpose(0, 2, 1).reshape(Np, -1)  # row, kb
    kb = (np.arange(Kh // 4) * 8) // kf.block
    sc = s[:, kb]
    meta = (sc.astype(np.uint32) >> np.uint32(kf.meta_shift)) & np.uint32(3) if kf.has_special else np.zeros(sc.shape, np.uint32)
    v = np.concatenate([_bytes_to_values(_lut_bytes(kf, words & np.uint32(0xFFFF), meta)),
                        _bytes_to_values(_lut_bytes(kf, words >> np.uint32(16), meta))], -1)
    vals = v * _scale_values(kf, sc)[..., None]
    return vals.reshape(Np, Kh * 2)[: p.N, : p.K]
