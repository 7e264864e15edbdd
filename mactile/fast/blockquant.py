"""A fast NumPy quantizer for NVFP4 and MXFP4, byte-identical to the golden one.

:func:`quantize` returns the same :class:`~mactile.golden.block.Quantized` (codes, scale
codes, tensor scale, bit for bit) as ``fmt.quantize(x)`` for every convention of
:class:`~mactile.golden.fp4blocks.NVFP4` and :class:`~mactile.golden.fp4blocks.MXFP4`
and float32 input; any other format or dtype, and any input the golden quantizer refuses
(NaN/Inf, out of range, a last axis the block size does not divide), goes to the golden
quantizer itself, which computes it or raises its own error.

What it does differently (the arithmetic is the golden one, operation for operation):

* block maxima from the float32 bits (``bits & 0x7FFFFFFF`` orders non-negative floats
  as integers), reduced over neighbouring pairs instead of one column at a time;
* the block scales from the golden spec objects (``scale_format.encode``,
  ``MXFP4._scale_exponents``, ``storage.word.pack``) on the per-block arrays;
* FP4 element codes from one 4096-entry table indexed by the float32 sign, exponent, top
  two mantissa bits and a sticky bit (every FP4 midpoint lies on that grid), built by
  ``FP4_E2M1.encode`` itself for each tie rule, instead of seven comparisons;
* chunks of rows sized to stay in cache, on ``MACTILE_THREADS`` threads like the golden
  quantizer (NumPy releases the GIL).
"""
from __future__ import annotations

import functools

import numpy as np

from mactile.golden.block import CHUNK_ELEMENTS, Quantized, _threads
from mactile.golden.conventions import ElementScaling, ElementTies, NegativeZero, ScaleArgument
from mactile.golden.elements import E8M0, FP4_E2M1, Rounding
from mactile.golden.fp4blocks import MXFP4, NVFP4

__all__ = ["supports", "quantize", "fp4_codes", "fp4_table"]

_F32 = np.float32
_U32 = np.uint32
_ABS = _U32(0x7FFFFFFF)
_NEG_ZERO = _U32(0x80000000)
#: Where an FP4 midpoint can lie: float32 bits below this many are below FP4's precision.
_SHIFT = 23 - (FP4_E2M1.man_bits + 1)

_TIES = {ElementTies.EVEN: Rounding.NEAREST_EVEN, ElementTies.AWAY: Rounding.NEAREST_AWAY}


@functools.lru_cache(maxsize=None)
def fp4_table(ties: ElementTies) -> np.ndarray:
    """FP4 E2M1 code of every float32 class ``((bits >> SHIFT) << 1) | sticky``.

    ``SHIFT = 23 - (man_bits + 1)``: a float32 value's code depends only on its sign,
    exponent and top ``man_bits + 1`` mantissa bits (its grid point) and on whether any lower
    bit is set, since every FP4 midpoint lies on that grid (checked). Each entry is
    ``FP4_E2M1.encode`` (saturating, the convention's tie rule) of the class's smallest
    member; NaN classes (never looked up) hold 0.
    """
    mids = FP4_E2M1._rne_table[1].astype(_F32)
    if (mids.view(_U32) & _U32((1 << _SHIFT) - 1)).any():
        raise AssertionError("an FP4 midpoint is off the float32 grid the table assumes")
    grid = np.arange(1 << (32 - _SHIFT), dtype=np.uint64) << np.uint64(_SHIFT)
    lut = np.zeros(2 * grid.size, dtype=FP4_E2M1.dtype)
    for sticky in (0, 1):
        x = (grid | np.uint64(sticky)).astype(_U32).view(_F32)
        ok = ~np.isnan(x)
        lut[sticky::2][ok] = FP4_E2M1.encode(x[ok].astype(np.float64), rounding=_TIES[ties],
                                             saturate=True)
    lut.setflags(write=False)
    return lut


def fp4_codes(scaled: np.ndarray, x_bits: np.ndarray | None, ties: ElementTies,
              negative_zero: NegativeZero) -> np.ndarray:
    """FP4 codes of float32 ``scaled`` values (NaN-free; Inf saturates), as the golden
    ``_encode_fp4``: the tie rule, then the negative-zero rule (``x_bits``: the unscaled
    input's float32 bits, for ``POSITIVE``)."""
    bits = scaled.view(_U32)
    key = bits >> _U32(_SHIFT - 1)
    key &= _U32(0xFFFFFFFE)
    key |= (bits & _U32((1 << _SHIFT) - 1)) != 0
    codes = fp4_table(ties).take(key)
    if negative_zero is NegativeZero.POSITIVE:
        np.copyto(codes, 0, where=x_bits == _NEG_ZERO)
    elif negative_zero is NegativeZero.POSITIVE_AFTER_SCALING:
        np.copyto(codes, 0, where=(bits & _ABS) == 0)
    return codes


def row_max(m: np.ndarray, n: int, b: int) -> np.ndarray:
    """Largest entry of each of the ``n`` rows of ``b`` entries in the flat array ``m``:
    neighbours pairwise while the width is even (contiguous pairs reduce several times
    faster than columns of short rows), then the rest column by column."""
    while b > 1 and b % 2 == 0:
        pairs = m.reshape(-1, 2)
        m = np.maximum(pairs[:, 0], pairs[:, 1])
        b //= 2
    m = m.reshape(n, b)
    out = m[:, 0].copy()
    for j in range(1, b):
        np.maximum(out, m[:, j], out=out)
    return out


def _block_amax_bits(bits: np.ndarray) -> np.ndarray:
    """Largest ``bits & 0x7FFFFFFF`` of each row (the bits of the row's largest magnitude)."""
    return row_max((bits & _ABS).reshape(-1), bits.shape[0], bits.shape[1])


def supports(fmt, x=None) -> bool:
    """Whether :func:`quantize` computes ``fmt`` itself (else it calls the golden one):
    NVFP4 and MXFP4 of any convention and block size, for float32 input."""
    if type(fmt) not in (NVFP4, MXFP4):
        return False
    return x is None or np.asarray(x).dtype == np.float32


def _finite_and_in_range(flat: np.ndarray, limit: float | None) -> bool:
    """No NaN/Inf and every ``|x| < limit`` (chunked max/min, no temporaries of the size
    of the input)."""
    step = CHUNK_ELEMENTS
    v = flat.reshape(-1)
    for lo in range(0, v.size, step):
        part = v[lo:lo + step]
        hi, lo_ = part.max(), part.min()
        if not (np.isfinite(hi) and np.isfinite(lo_)):
            return False
        if limit is not None and max(float(hi), -float(lo_)) >= limit:
            return False
    return True


def quantize(fmt, x) -> Quantized:
    """``fmt.quantize(x)``, byte for byte, faster for NVFP4/MXFP4 and float32 input.

    Parameters
    ----------
    fmt : BlockFormat
        Any golden block format spec; formats other than NVFP4/MXFP4 (and non-float32
        input) are quantized by ``fmt.quantize``.
    x : array_like
        Input, blocks along the last axis.

    Returns
    -------
    Quantized
        Equal in every array to ``fmt.quantize(x)``.

    Raises
    ------
    InputError
        Exactly as ``fmt.quantize`` (the golden quantizer raises it: input it refuses is
        handed to it unchanged).
    """
    a = np.asarray(x)
    bs = fmt.block_size
    if not supports(fmt, a) or a.ndim == 0 or a.shape[-1] % bs or a.size == 0:
        return fmt.quantize(x)
    rng = fmt.input_range()
    if not _finite_and_in_range(a, None if rng is None else rng[0]):
        return fmt.quantize(x)  # the golden quantizer names the offending value
    flat = np.ascontiguousarray(a).reshape(-1, bs)
    n = flat.shape[0]
    conv = fmt.convention
    codes = np.empty((n, bs), dtype=fmt.code_dtype)
    scales = np.empty(n, dtype=fmt.scale_dtype)
    if isinstance(fmt, NVFP4):
        ctx = fmt._tensor_params(flat)  # the golden tensor scale (one pass)
        d32 = ctx["tensor_scale"]
        t = _F32(1.0) if d32 is None else d32
        work = functools.partial(_nvfp4_chunk, fmt, conv, t, flat, codes, scales)
    else:
        d32 = None
        work = functools.partial(_mxfp4_chunk, fmt, conv, flat, codes, scales)
    step = max(1, CHUNK_ELEMENTS // bs)
    bounds = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
    threads = _threads()
    if threads == 1 or len(bounds) == 1:
        for lo, hi in bounds:
            work(lo, hi)
    else:
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            for f in [pool.submit(work, lo, hi) for lo, hi in bounds]:
                f.result()
    lead = a.shape[:-1] + (a.shape[-1] // bs,)
    return Quantized(format=fmt, shape=tuple(a.shape), codes=codes.reshape(lead + (bs,)),
                     scales=scales.reshape(lead), tensor_scale=d32)


def _nvfp4_chunk(fmt, conv, t, flat, codes, scales, lo, hi):
    """One chunk of NVFP4 blocks: the golden ``_scale_pipeline`` and ``_encode_fp4``."""
    x32 = flat[lo:hi]
    bits = x32.view(_U32)
    amax = _block_amax_bits(bits).view(_F32)
    target = _F32(FP4_E2M1.max_value)
    if conv.scale_argument is ScaleArgument.PRODUCT:
        arg = amax / (t * target)
    else:
        arg = (amax / target) / t
    if conv.block_scale_floor:
        arg = np.maximum(arg, _F32(conv.block_scale_floor))
    s_code = fmt.scale_format.encode(arg)
    s_val = fmt.scale_format.values[s_code].astype(_F32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if conv.element_scaling is ElementScaling.DIVIDE:
            denom = t * s_val
            scaled = x32 / denom[:, None]
        else:
            denom = s_val
            scaled = x32 * ((_F32(1.0) / t) / s_val)[:, None]
            np.copyto(scaled, x32, where=(bits & _ABS) == 0)
    zero = ~(denom > 0)
    if zero.any():  # scale 0: zeros with their inputs' signs (golden's _TwoLevelFP4)
        scaled[zero] = np.copysign(_F32(0.0), x32[zero])
    codes[lo:hi] = fp4_codes(scaled, bits, conv.element_ties, conv.negative_zero)
    scales[lo:hi] = s_code


def _mxfp4_chunk(fmt, conv, flat, codes, scales, lo, hi):
    """One chunk of MXFP4 blocks: the golden ``MXFP4._quantize_blocks``."""
    x32 = flat[lo:hi]
    bits = x32.view(_U32)
    amax = _block_amax_bits(bits).view(_F32)
    e = np.clip(fmt._scale_exponents(amax), -E8M0.bias, E8M0.bias)
    scaled = x32 * np.exp2(-e).astype(_F32)[:, None]
    codes[lo:hi] = fp4_codes(scaled, bits, conv.element_ties, conv.negative_zero)
    scales[lo:hi] = fmt.storage.word.pack(e + E8M0.bias)
