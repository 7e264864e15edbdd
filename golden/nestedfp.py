"""NestedFP: one FP16 copy of the weights as two byte planes, serving FP16 or FP8.

Source: 004_a14d4b71d1ae7c1e.txt Sec. 4.2, Figure 4; bit-level rules in FIGURES.md.

Split of an FP16 word ``a`` (bit 14, the exponent MSB, must be 0)::

    lower = a & 0xFF
    upper = sign | exponent bits 13..10 | mantissa bits 9..7, the mantissa rounded half to
            even on the 7 dropped bits, except that exponent 15 with top mantissa 0b110 is
            never rounded up (0b111 there is the E4M3 NaN code)

Read as E4M3, ``upper`` is ``256 * w`` rounded (FP8 mode multiplies by ``2**-8``).
Reconstruction (Figure 4b) undoes the rounding with the checksum
``sub = (upper & 1) ^ (lower >> 7)``::

    field = ((upper - sub) >> 1) & 0x3F
    a     = (((upper & 0x80) | field) << 8) | lower

Eligibility (Sec. 4.2, "Handling Exception Layers"): a layer is split only if every
``|w| <= threshold`` (default 1.75, the paper's text; the authors' serving code uses
1.8192). Reconstruction is exact for every FP16 ``|w| < 1.9375`` and the upper byte is a
valid (non-NaN) E4M3 code for ``|w| < 1.875``; both are checked exhaustively in tests.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from . import block as _block
from . import validate
from .block import BlockFormat, InputError
from .elements import FP8_E4M3

__all__ = [
    "nestedfp_split", "nestedfp_merge", "nestedfp_eligible", "NestedFP", "NestedFP8",
    "PAPER_THRESHOLD", "AUTHORS_THRESHOLD",
]

def _amax(flat: np.ndarray) -> float:
    """Largest magnitude in the input's own precision (chunked: no full-size temporary)."""
    step = max(1, _block.CHUNK_ELEMENTS // max(1, flat.shape[-1]))
    m = 0.0
    for lo in range(0, flat.shape[0], step):
        part = flat[lo:lo + step]
        if part.size:
            m = max(m, float(part.max()), -float(part.min()))
    return m


#: |w| limit of the paper's text (Sec. 4.2).
PAPER_THRESHOLD = 1.75
#: |w| limit of the authors' public serving code.
AUTHORS_THRESHOLD = 1.8192


def _fp16_bits(w) -> np.ndarray:
    a = np.asarray(w)
    if a.dtype == np.uint16:
        return a
    if a.dtype != np.float16:
        raise TypeError(f"expected float16 values or uint16 bit patterns, got {a.dtype}")
    return a.view(np.uint16)


def nestedfp_split(w) -> tuple[np.ndarray, np.ndarray]:
    """Split FP16 weights (float16 or their uint16 patterns) into (upper, lower) bytes.

    Raises
    ------
    ValueError
        If any word has the FP16 exponent MSB (bit 14) set, i.e. ``|w| >= 2`` or Inf/NaN.
    """
    a = _fp16_bits(w)
    if (a & np.uint16(0x4000)).any():
        raise ValueError("nestedfp: |w| >= 2 (FP16 exponent MSB set); keep this layer in FP16")
    upper = np.empty(a.shape, dtype=np.uint8)
    src, dst = a.reshape(-1), upper.reshape(-1)
    step = _block.CHUNK_ELEMENTS  # chunks bound the temporaries and stay in cache
    for lo in range(0, src.size, step):
        dst[lo:lo + step] = _upper_byte(src[lo:lo + step])
    return upper, a.astype(np.uint8)


def _upper_byte(a: np.ndarray) -> np.ndarray:
    body = (a >> np.uint16(7)) & np.uint16(0x7F)  # exponent bits 13..10, mantissa 9..7
    # Half to even on the 7 dropped bits: add 63 plus the kept LSB, carry into the body.
    rounded = ((a & np.uint16(0x3FFF)) + np.uint16(0x3F) + (body & np.uint16(1))) >> np.uint16(7)
    # Exponent 15 with mantissa 0b110 never rounds up (0x7F is the E4M3 NaN code).
    rounded = np.where(body == 0x7E, body, rounded)
    # An 8-bit add of the sign: a carry out of 0x7F runs into the sign bit, as in hardware.
    return (rounded + ((a >> np.uint16(8)) & np.uint16(0x80))).astype(np.uint8)


def nestedfp_merge(upper, lower) -> np.ndarray:
    """Reconstruct FP16 bit patterns (uint16) from the two byte planes."""
    u = np.asarray(upper).astype(np.uint8, copy=False)
    lo = np.asarray(lower).astype(np.uint8, copy=False)
    u, lo = np.broadcast_arrays(u, lo)
    word = np.empty(u.shape, dtype=np.uint16)
    us, ls, dst = u.reshape(-1), lo.reshape(-1), word.reshape(-1)
    step = _block.CHUNK_ELEMENTS
    for i in range(0, dst.size, step):
        uc, lc = us[i:i + step], ls[i:i + step]
        sub = (uc & np.uint8(1)) ^ (lc >> np.uint8(7))
        field = ((uc - sub) >> np.uint8(1)) & np.uint8(0x3F)  # uc - sub wraps like hardware
        w16 = ((uc & np.uint8(0x80)) | field).astype(np.uint16) << np.uint16(8)
        w16 |= lc
        dst[i:i + step] = w16
    return word


def nestedfp_eligible(w, threshold: float = PAPER_THRESHOLD) -> bool:
    """Whether a layer's FP16 weights may be stored as NestedFP (every ``|w| <= threshold``)."""
    a = np.asarray(w, dtype=np.float16)
    return bool(np.all(np.abs(a.astype(np.float32)) <= threshold))


@dataclass(frozen=True, kw_only=True)
class NestedFP(BlockFormat):
    """NestedFP16: lossless FP16 through the two byte planes.

    ``codes`` hold the upper bytes and ``meta`` the lower bytes (both per element); there
    is no scale. The input is rounded to FP16 (RNE) first; a tensor that is not eligible
    (some ``|w| > threshold``) is refused, since the paper keeps such layers in FP16.
    """

    block_size: int = 1
    threshold: float = PAPER_THRESHOLD

    name: ClassVar[str] = "nestedfp"
    reference: ClassVar[str] = "NestedFP (004) Sec. 4.2, Fig. 4"
    scale_dtype: ClassVar[None] = None

    def __post_init__(self):
        super().__post_init__()
        # (0, 1.9375): the |w| range where reconstruction is exact.
        object.__setattr__(self, "threshold", validate.real(
            self.name, "threshold", self.threshold, lo=0, hi=1.9375, lo_open=True,
            hi_open=True))

    @property
    def bits_per_element(self) -> float:
        return 16.0

    def _allocate_meta(self, n_blocks):
        return np.empty((n_blocks, self.block_size), dtype=np.uint8)

    def _tensor_params(self, flat):
        # FP16 rounding is monotone, so the largest rounded magnitude is the rounded largest.
        with np.errstate(over="ignore"):
            if not np.float16(_amax(flat)) > self.threshold:
                return {}
            big = np.abs(flat.astype(np.float16).astype(np.float32)) > self.threshold
        if big.any():
            i = np.unravel_index(int(np.argmax(big)), flat.shape)
            raise InputError(
                f"{self.name}: |w| = {abs(float(flat[i]))} exceeds the eligibility threshold "
                f"{self.threshold}; NestedFP keeps such a layer in FP16 (Sec. 4.2)")
        return {}

    def _quantize_blocks(self, xb, ctx):
        upper, lower = nestedfp_split(np.asarray(xb).astype(np.float16))
        return upper, None, lower

    def _dequantize_blocks(self, codes, scales, meta, ctx):
        return nestedfp_merge(codes, meta).view(np.float16).astype(np.float64)

    def _dequantize_into(self, codes, scales, meta, ctx, out):
        np.copyto(out, nestedfp_merge(codes, meta).view(np.float16))


#: The FP8 view's value of every upper byte: E4M3 times 2**-8 (exact).
_E4M3_TIMES_2_POW_M8 = np.ldexp(FP8_E4M3.values, -8)


@dataclass(frozen=True, kw_only=True)
class NestedFP8(NestedFP):
    """NestedFP's FP8 view: the upper byte read as E4M3, times ``2**-8``."""

    name: ClassVar[str] = "nestedfp8"
    reference: ClassVar[str] = "NestedFP (004) Sec. 4.2-4.3"

    @property
    def bits_per_element(self) -> float:
        return 8.0  # what an FP8-mode GEMM reads

    def _dequantize_blocks(self, codes, scales, meta, ctx):
        return np.ldexp(FP8_E4M3.values[codes], -8)

    def _dequantize_into(self, codes, scales, meta, ctx, out):
        np.take(_E4M3_TIMES_2_POW_M8, codes, out=out, mode="clip")  # "raise" would buffer
