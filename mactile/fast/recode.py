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
block through two tables: codes ``table[key, c]``, scales ``scale[key]``; the error sums
weight each ``(key, c)`` by how often it occurs. The codes and scales are the golden
ones by construction (the tests compare them with ``array_equal`` over every scale code
and code, and on random layers); anything outside these conditions (another format,
another block size, a partial block, a non-monotonic or non-finite dequantization, input
the golden quantizer refuses) returns None and convert takes the general path.
"""
from __future__ import annotations

import concurrent.futures
import math

import numpy as np

from mactile.golden.block import InputError, Quantized, _threads
from mactile.golden.checkpoints import LayerWeight, dequantize_layer, model_values
from mactile.golden.elements import FP4_E2M1
from mactile.golden.fp4blocks import MXFP4, NVFP4

__all__ = ["recode_layer", "applies"]

#: FP4 codes per element and the mask of the magnitude bits (from the element spec).
_N_CODES = FP4_E2M1.code_count
_MAG_MASK = np.uint8(FP4_E2M1.sign_mask - 1)
_N_MAGS = FP4_E2M1.sign_mask
#: Rows per chunk of the per-element passes (2**16 elements of a 4096-wide layer).
_CHUNK_ELEMENTS = 1 << 16


def applies(w: LayerWeight, fmt) -> bool:
    """Whether :func:`recode_layer` can re-encode ``w`` in ``fmt`` (before any check on
    the values): NVFP4/MXFP4 to NVFP4/MXFP4 (any conventions), blocks of the same size
    holding all 16 FP4 codes, no partial last block, 8-bit scale words."""
    q = w.quantized
    return (type(q.format) in (NVFP4, MXFP4) and type(fmt) in (NVFP4, MXFP4)
            and q.format.block_size == fmt.block_size and fmt.block_size >= _N_CODES
            and tuple(w.shape) == tuple(q.shape) and q.scales is not None
            and q.scales.dtype == np.uint8 and q.codes.dtype == np.uint8)


def _block_max_mag(codes: np.ndarray) -> np.ndarray:
    """Largest ``code & 7`` of each row of uint8 codes (neighbours pairwise)."""
    n, b = codes.shape
    m = (codes & _MAG_MASK).reshape(-1)
    while b > 1 and b % 2 == 0:
        pairs = m.reshape(-1, 2)
        m = np.maximum(pairs[:, 0], pairs[:, 1])
        b //= 2
    m = m.reshape(n, b)
    out = m[:, 0].copy()
    for j in range(1, b):
        np.maximum(out, m[:, j], out=out)
    return out


def _chunks(n_rows: int, row_elems: int):
    step = max(1, _CHUNK_ELEMENTS // max(1, row_elems))
    return [(lo, min(n_rows, lo + step)) for lo in range(0, n_rows, step)]


def _run(bounds, work):
    threads = _threads()
    if threads == 1 or len(bounds) == 1:
        return [work(lo, hi) for lo, hi in bounds]
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda b: work(*b), bounds))


def recode_layer(w: LayerWeight, fmt):
    """``(Quantized, mse, sqnr_db)`` of re-encoding layer ``w`` in ``fmt``, equal to
    ``fmt.quantize(x)`` and ``requant_error(x, q)`` for ``x = model_values(
    dequantize_layer(w, transpose=False), w.layout.model_dtype)``; None where the fast
    path does not apply (see the module docstring).

    The codes, scales and tensor scale are the golden ones bit for bit. The error sums are
    the same squared differences, weighted by exact counts and summed with ``math.fsum``
    (the golden path sums chunk by chunk; the two agree to float64 rounding).
    """
    if not applies(w, fmt):
        return None
    q = w.quantized
    bs = fmt.block_size
    codes = q.codes.reshape(-1, bs)
    scales = q.scales.reshape(-1)
    nblk = codes.shape[0]
    if nblk == 0:
        return None
    # 1. each block's key (scale word, largest code magnitude)
    bounds = _chunks(nblk, bs)
    key = np.empty(nblk, dtype=np.uint16)

    def keys(lo, hi):
        m = _block_max_mag(codes[lo:hi])
        key[lo:hi] = (scales[lo:hi].astype(np.uint16) << np.uint16(3)) | m

    _run(bounds, keys)
    present = np.flatnonzero(np.bincount(key, minlength=256 * _N_MAGS))
    n_keys = present.size
    dense = np.zeros(256 * _N_MAGS, dtype=np.uint16)
    dense[present] = np.arange(n_keys, dtype=np.uint16)
    s_of, m_of = (present >> 3).astype(np.uint8), (present & (_N_MAGS - 1)).astype(np.uint8)
    # 2. one block per key holding every code of magnitude <= m (the rest repeat +m)
    c = np.arange(_N_CODES, dtype=np.uint8)
    syn = np.repeat(m_of[:, None], bs, axis=1)
    syn[:, :_N_CODES] = np.where((c & _MAG_MASK)[None, :] <= m_of[:, None], c[None, :],
                                 m_of[:, None])
    sq = Quantized(format=q.format, shape=(n_keys, bs), codes=syn.reshape(n_keys, 1, bs),
                   scales=s_of.reshape(n_keys, 1), tensor_scale=q.tensor_scale)
    sw = LayerWeight(base=w.base, layout=w.layout, quantized=sq, shape=(n_keys, bs),
                     stored_global=w.stored_global)
    with np.errstate(all="ignore"):
        x = model_values(dequantize_layer(sw, transpose=False), w.layout.model_dtype)
    if not np.isfinite(x).all():
        return None  # the golden path refuses it with its own message
    ax = np.abs(x)
    at_m = ax[:, :_N_CODES][(c[None, :] & _MAG_MASK) == m_of[:, None]].reshape(n_keys, 2)
    if not (at_m == ax.max(axis=1, keepdims=True)).all():
        return None  # the block maximum is not at the largest code magnitude
    try:
        qs = fmt.quantize(x)  # the golden quantizer on every value the layer holds
    except InputError:
        return None
    y = qs.dequantize()
    # 3. tables by (dense key, source code); codes above a key's m never occur
    valid = (c[None, :] & _MAG_MASK) <= m_of[:, None]
    code_lut = np.where(valid, qs.codes.reshape(n_keys, bs)[:, :_N_CODES], 0).astype(np.uint8)
    code_lut = code_lut.reshape(-1)
    scale_lut = qs.scales.reshape(n_keys)
    x64 = x[:, :_N_CODES].astype(np.float64)
    err = np.where(valid, (y[:, :_N_CODES] - x64) ** 2, 0.0).reshape(-1)
    sig = np.where(valid, x64 ** 2, 0.0).reshape(-1)
    # 4. every block through the tables
    new_codes = np.empty((nblk, bs), dtype=np.uint8)
    new_scales = np.empty(nblk, dtype=scale_lut.dtype)
    shift = np.uint16(FP4_E2M1.bits)

    def apply(lo, hi):
        dk = dense[key[lo:hi]]
        idx = (dk << shift)[:, None] | codes[lo:hi]
        code_lut.take(idx, out=new_codes[lo:hi])
        new_scales[lo:hi] = scale_lut[dk]
        return np.bincount(idx.reshape(-1), minlength=n_keys * _N_CODES)

    counts = sum(_run(bounds, apply))
    noise = math.fsum((counts * err).tolist())
    signal = math.fsum((counts * sig).tolist())
    size = nblk * bs
    mse = noise / size
    sqnr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
    lead = tuple(q.shape[:-1]) + (q.shape[-1] // bs,)
    out = Quantized(format=fmt, shape=tuple(q.shape), codes=new_codes.reshape(lead + (bs,)),
                    scales=new_scales.reshape(lead), tensor_scale=qs.tensor_scale)
    return out, mse, sqnr
