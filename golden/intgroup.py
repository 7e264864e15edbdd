"""Symmetric group-wise integer quantization (FlexQ's INT6/INT8) and the bit-plane identity.

Source: 003_c7ba18c8b0833de1.txt Sec. 4.1-4.3, Eq. 1-6.

Per group of ``block_size`` elements along the last axis (arithmetic in FP32, RNE)::

    scale = FP16( amax / (2**(n-1) - 1) )       FP32 division, then rounded to FP16
    q     = clamp( rint(x / scale), -2**(n-1), 2**(n-1) - 1 )

A group whose scale rounds to zero stores zeros. An integer GEMM of such codes equals a
weighted sum of 1-bit GEMMs of their two's-complement bit planes (Eq. 5-6), which is what
binary tensor cores compute: see :func:`bitplane_matmul`.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from . import validate
from .block import BlockFormat, row_max
from .elements import int_format

__all__ = ["IntGroup", "bitplanes", "plane_weights", "bitplane_matmul"]


@dataclass(frozen=True, kw_only=True)
class IntGroup(BlockFormat):
    """Symmetric INTn per group with an FP16 scale (FlexQ: n = 6 or 8, group 128).

    ``codes`` are n-bit two's-complement patterns (``uint8``), ``scales`` FP16 bit patterns
    (``uint16``).
    """

    block_size: int = 128
    bits: int = 6

    name: ClassVar[str] = "int-group"
    reference: ClassVar[str] = "FlexQ (003) Sec. 4.1"
    scale_dtype: ClassVar[np.dtype] = np.dtype(np.uint16)

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "bits", validate.integer(self.name, "bits", self.bits, lo=2, hi=8))

    @property
    def element(self):
        return int_format(self.bits)

    def input_range(self):
        lim = _scale_overflow(self.element.max_int)
        return (lim, f"{self.name} takes |x| < {lim:.8g}: the group scale "
                     f"amax/{self.element.max_int} must be a finite FP16 value")

    @property
    def bits_per_element(self) -> float:
        return self.bits + 16 / self.block_size

    def _quantize_blocks(self, xb, ctx):
        fmt = self.element
        x32 = np.asarray(xb, dtype=np.float32)
        amax = row_max(np.abs(x32))
        # Finite: input_range refused every amax whose FP16 scale would be Inf.
        s16 = (amax / np.float32(fmt.max_int)).astype(np.float16)
        s32 = s16.astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            r = x32 / s32[:, None]
        np.rint(r, out=r)
        zero = ~(s32 > 0)
        if zero.any():
            np.copyto(r, np.float32(0), where=zero[:, None])  # scale 0: the group holds zeros
        np.clip(r, fmt.min_int, fmt.max_int, out=r)
        # bits <= 8: int8 holds every value; its byte is the two's-complement pattern.
        codes = r.astype(np.int8).view(np.uint8) & np.uint8((1 << self.bits) - 1)
        return codes, s16.view(np.uint16), None

    def _dequantize_blocks(self, codes, scales, meta, ctx):
        out = np.empty(codes.shape, dtype=np.float64)
        self._dequantize_into(codes, scales, meta, ctx, out)
        return out

    def _dequantize_into(self, codes, scales, meta, ctx, out):
        table = self.element.values.astype(np.float64)  # signed value of every code
        np.take(table, codes, out=out, mode="clip")  # "raise" would buffer
        out *= scales.view(np.float16).astype(np.float64)[:, None]

    def integers(self, q) -> np.ndarray:
        """Signed integer values of a :class:`~mactile.golden.block.Quantized`'s codes."""
        return self.element.decode(q.codes)


@functools.lru_cache(maxsize=None)
def _scale_overflow(max_int: int) -> float:
    """The smallest magnitude whose group scale ``FP16(FP32(amax) / max_int)`` is Inf:
    a bisection over FP32 bit patterns (the division rounds), then the float64 value
    from which input rounds to that FP32 value."""
    def inf(bits: int) -> bool:
        a = np.array([bits], dtype=np.uint32).view(np.float32)
        with np.errstate(over="ignore"):
            return not np.isfinite((a / np.float32(max_int)).astype(np.float16))[0]

    lo = int(np.array([65504.0], np.float32).view(np.uint32)[0])  # finite scale
    hi = int(np.array([np.finfo(np.float32).max], np.float32).view(np.uint32)[0])
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if inf(mid) else (mid, hi)
    # In float64: the smallest value that rounds (RNE) to that FP32 amax or above.
    below, at = (float(np.array([b], dtype=np.uint32).view(np.float32)[0]) for b in (lo, hi))
    mid = (below + at) / 2  # exact in float64
    return mid if hi % 2 == 0 else float(np.nextafter(mid, np.inf))


def plane_weights(bits: int) -> np.ndarray:
    """Weight of each two's-complement bit plane: ``2**s``, the top one ``-2**(bits-1)``."""
    w = np.array([1 << s for s in range(bits)], dtype=np.int64)
    w[-1] = -w[-1]
    return w


def bitplanes(q, bits: int) -> np.ndarray:
    """Bit planes of signed integers: shape ``(bits,) + q.shape``, values 0/1 (uint8).

    Plane ``s`` is bit ``s`` of the ``bits``-wide two's-complement pattern, so
    ``sum_s plane_weights(bits)[s] * planes[s] == q``.
    """
    q = np.asarray(q).astype(np.int64)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if q.size and (q.min() < lo or q.max() > hi):
        raise ValueError(f"values outside the {bits}-bit range [{lo}, {hi}]")
    pattern = q & ((1 << bits) - 1)
    return np.stack([(pattern >> s) & 1 for s in range(bits)]).astype(np.uint8)


def bitplane_matmul(a, b, bits_a: int, bits_b: int) -> np.ndarray:
    """``a @ b.T`` for signed integer matrices, computed as binary tensor cores do.

    FlexQ Eq. 5-6: ``sum_{s,t} w_s * w_t * popcount(A_s AND B_t)`` over bit planes, where
    ``w`` are :func:`plane_weights` (the most significant plane counts negative).

    Parameters
    ----------
    a : (M, K) integers in the ``bits_a`` range
    b : (N, K) integers in the ``bits_b`` range

    Returns
    -------
    (M, N) int64, equal to ``a.astype(int64) @ b.astype(int64).T``.
    """
    pa, pb = bitplanes(a, bits_a), bitplanes(b, bits_b)
    wa, wb = plane_weights(bits_a), plane_weights(bits_b)
    out = np.zeros((pa.shape[1], pb.shape[1]), dtype=np.int64)
    for s in range(bits_a):
        for t in range(bits_b):
            # AND of 0/1 planes summed over K is the popcount of the AND of packed words.
            pop = pa[s].astype(np.int64) @ pb[t].astype(np.int64).T
            out += wa[s] * wb[t] * pop
    return out
