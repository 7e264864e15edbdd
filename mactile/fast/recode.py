"""Re-encode a checkpoint layer without forming its float weight: the fast path of
``mactile convert`` where source and target blocks coincide.

``mactile convert`` dequantizes a layer as its library does (``dequantize_layer``, then
the model dtype), quantizes that weight again with the golden quantizer and reports the
re-encoding error. When the source is NVFP4 or MXFP4 and the target is NVFP4 or MXFP4 with
the same block size (and no partial last block), every step is a function of very little:

* an element's dequantized value depends only on its block's scale word ``s`` and its
  FP4 code ``c``;
* a target block's scale depends only on the block's largest magnitude, which is the value
  of its largest code magnitude ``m`` (FP4 magnitudes grow with ``c & 7``, and the
  dequantization keeps that order: checked per layer), and on the tensor scale, which
  depends only on the largest of those;
* a target element's code depends only on its value, its block's scale and the tensor
  scale.

So each block has a key ``(s, m)`` (at most 256 x 8), and one block per key that occurs
holds every element value such blocks can hold. :func:`recode_layer` builds that small
layer, runs the golden pipeline on it (``dequantize_layer``, ``model_values``, the
target's golden ``quantize``, its golden dequantization), and applies the result to every
block through two tables, on the code bytes as stored (two codes each, no unpacking):
output bytes ``table[key, byte]`` and scales ``scale[key]``; the error sums weight each
``(key, byte)`` by how often it occurs. The codes and scales are the golden
ones by construction (the tests compare them with ``array_equal`` over every scale code
and code, and on random layers); anything outside these conditions (another format,
another block size, a partial block, a non-monotonic or non-finite dequantization, input
the golden quantizer refuses) returns None and convert takes the general path.
"""
from __future__ import annotations

import concurrent.futures
import math
import threading

import numpy as np

from mactile.golden.block import InputError, Quantized, _threads
from mactile.golden.checkpoints import (LayerWeight, NibbleOrder, PackedLayer, dequantize_layer,
                                        model_values)
from mactile.golden.elements import FP4_E2M1
from mactile.golden.fp4blocks import MXFP4, NVFP4

from .blockquant import row_max

__all__ = ["recode_layer", "applies"]

#: FP4 codes per element and the mask of the magnitude bits (from the element spec).
_N_CODES = FP4_E2M1.code_count
_MAG_MASK = FP4_E2M1.sign_mask - 1
_N_MAGS = FP4_E2M1.sign_mask
_NIBBLE = FP4_E2M1.bits
#: Code bytes per chunk of the per-block passes.
_CHUNK_BYTES = 1 << 18


def applies(p: PackedLayer, fmt) -> bool:
    """Whether :func:`recode_layer` can re-encode ``p`` in ``fmt`` (before any check on
    the values): NVFP4/MXFP4 to NVFP4/MXFP4 (any conventions), blocks of the same size
    holding all 16 FP4 codes, no partial last block, byte codes and 8-bit scale words."""
    bs = fmt.block_size
    return (type(p.format) in (NVFP4, MXFP4) and type(fmt) in (NVFP4, MXFP4)
            and p.format.block_size == bs and bs >= _N_CODES and bs % 2 == 0
            and p.shape[-1] == p.n_blocks * bs and p.packed.dtype == np.uint8
            and p.scales.dtype == np.uint8 and p.packed.size * 2 == math.prod(p.shape))


def _nibbles(order: NibbleOrder) -> tuple[np.ndarray, np.ndarray]:
    """The first and second element code of every byte value in ``order``."""
    b = np.arange(256, dtype=np.uint8)
    lo, hi = b & np.uint8(0x0F), b >> np.uint8(_NIBBLE)
    return (hi, lo) if order is NibbleOrder.HIGH_FIRST else (lo, hi)


def _block_max_mag(packed: np.ndarray) -> np.ndarray:
    """Largest code magnitude (``code & 7``) of each row of code bytes: both nibbles'
    magnitude bits at once, then :func:`~mactile.fast.blockquant.row_max`."""
    n, b = packed.shape
    both = packed & np.uint8(_MAG_MASK | (_MAG_MASK << _NIBBLE))
    return row_max(np.maximum(both & np.uint8(0x0F), both >> np.uint8(_NIBBLE)).reshape(-1), n, b)


def _run(bounds, work, threads):
    threads = _threads() if threads is None else threads
    if threads == 1 or len(bounds) == 1:
        return [work(lo, hi) for lo, hi in bounds]
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda b: work(*b), bounds))


def recode_layer(p: PackedLayer, fmt, out_order: NibbleOrder, *, threads: int | None = None):
    """Re-encode layer ``p`` in ``fmt`` as ``mactile convert``'s golden path does, or None
    where this path does not apply (see the module docstring).

    Parameters
    ----------
    p : PackedLayer
        The layer as read (:func:`~mactile.golden.checkpoints.read_packed_layer`).
    fmt : BlockFormat
        The target format.
    out_order : NibbleOrder
        The output layout's nibble order.
    threads : int, optional
        Threads for the per-block passes (default ``MACTILE_THREADS``, as the golden
        quantizer).

    Returns
    -------
    (packed, scales, tensor_scale, mse, sqnr_db) or None
        ``packed`` (``p.packed``'s shape, ``out_order``) and ``scales`` are the codes and
        scale words of ``fmt.quantize(x)`` for ``x = model_values(dequantize_layer(
        p.unpacked(), transpose=False), model dtype)``, bit for bit, ``tensor_scale`` its
        tensor scale; ``mse`` and ``sqnr_db`` are ``requant_error(x, q)``'s, the same
        squared differences weighted by exact counts and summed with ``math.fsum`` (the
        golden path sums chunk by chunk: the two agree to float64 rounding).
    """
    if not applies(p, fmt):
        return None
    bs = fmt.block_size
    nbytes = bs // 2
    packed = p.packed.reshape(-1, nbytes)
    scales = p.scales.reshape(-1)
    nblk = packed.shape[0]
    step = max(1, _CHUNK_BYTES // nbytes)
    bounds = [(lo, min(nblk, lo + step)) for lo in range(0, nblk, step)]
    # 1. each block's key (scale word, largest code magnitude)
    key = np.empty(nblk, dtype=np.uint16)

    def keys(lo, hi):
        key[lo:hi] = (scales[lo:hi].astype(np.uint16) << np.uint16(3)) | _block_max_mag(packed[lo:hi])

    _run(bounds, keys, threads)
    present = np.flatnonzero(np.bincount(key, minlength=256 * _N_MAGS))
    n_keys = present.size
    s_of, m_of = (present >> 3).astype(np.uint8), (present & (_N_MAGS - 1)).astype(np.uint8)
    # 2. one block per key holding every code of magnitude <= m (the rest repeat +m)
    c = np.arange(_N_CODES, dtype=np.uint8)
    valid = (c & np.uint8(_MAG_MASK))[None, :] <= m_of[:, None]
    syn = np.repeat(m_of[:, None], bs, axis=1)
    syn[:, :_N_CODES] = np.where(valid, c[None, :], m_of[:, None])
    sq = Quantized(format=p.format, shape=(n_keys, bs), codes=syn.reshape(n_keys, 1, bs),
                   scales=s_of.reshape(n_keys, 1), tensor_scale=p.tensor_scale)
    sw = LayerWeight(base=p.base, layout=p.layout, quantized=sq, shape=(n_keys, bs),
                     stored_global=p.stored_global)
    with np.errstate(all="ignore"):
        x = model_values(dequantize_layer(sw, transpose=False), p.layout.model_dtype)
    if not np.isfinite(x).all():
        return None  # the golden path refuses it with its own message
    ax = np.abs(x)
    at_m = ax[:, :_N_CODES][(c[None, :] & np.uint8(_MAG_MASK)) == m_of[:, None]].reshape(n_keys, 2)
    if not (at_m == ax.max(axis=1, keepdims=True)).all():
        return None  # a block's largest magnitude is not at its largest code magnitude
    try:
        qs = fmt.quantize(x)  # the golden quantizer on every value the layer holds
    except InputError:
        return None
    y = qs.dequantize()[:, :_N_CODES]
    x64 = x[:, :_N_CODES].astype(np.float64)
    code_lut = np.where(valid, qs.codes.reshape(n_keys, bs)[:, :_N_CODES], 0).astype(np.uint8)
    err = np.where(valid, (y - x64) ** 2, 0.0)
    sig = np.where(valid, x64 ** 2, 0.0)
    # 3. tables by (key, source byte): the output byte and the error of its two codes
    first, second = _nibbles(p.layout.nibble_order)
    o1, o2 = code_lut[:, first], code_lut[:, second]
    if out_order is NibbleOrder.HIGH_FIRST:
        o1, o2 = o2, o1
    byte_lut = (o1 | (o2 << np.uint8(_NIBBLE))).astype(np.uint8).reshape(-1)
    err_b = (err[:, first] + err[:, second]).reshape(-1)
    sig_b = (sig[:, first] + sig[:, second]).reshape(-1)
    scale_lut = qs.scales.reshape(n_keys)
    idt = np.uint16 if n_keys * 256 <= 1 << 16 else np.uint32
    dense = np.zeros(256 * _N_MAGS, dtype=idt)
    dense[present] = np.arange(n_keys, dtype=idt) << idt(8)
    # 4. every block through the tables
    out = np.empty_like(packed)
    new_scales = np.empty(nblk, dtype=scale_lut.dtype)

    scale_by_key = np.zeros(256 * _N_MAGS, dtype=scale_lut.dtype)
    scale_by_key[present] = scale_lut

    counts = np.zeros(n_keys * 256, dtype=np.int64)
    lock = threading.Lock()
    # chunks of at least 4 code bytes per count bin: each chunk's counts are summed once
    step = max(step, 4 * counts.size // nbytes)
    bounds = [(lo, min(nblk, lo + step)) for lo in range(0, nblk, step)]

    def apply(lo, hi):
        kb = key[lo:hi]
        idx = dense.take(kb)[:, None] | packed[lo:hi]
        byte_lut.take(idx, out=out[lo:hi])
        scale_by_key.take(kb, out=new_scales[lo:hi])
        c = np.bincount(idx.reshape(-1), minlength=n_keys * 256)
        with lock:
            np.add(counts, c, out=counts)

    _run(bounds, apply, threads)
    seen = np.flatnonzero(counts)
    noise = math.fsum((counts[seen] * err_b[seen]).tolist())
    signal = math.fsum((counts[seen] * sig_b[seen]).tolist())
    mse = noise / (nblk * bs)
    sqnr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
    return (out.reshape(p.packed.shape), new_scales.reshape(p.scales.shape), qs.tensor_scale,
            mse, sqnr)
