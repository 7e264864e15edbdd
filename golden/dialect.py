"""BlockDialect's DialectFP4: a 16-dialect formatbook with per-block dialect selection.

Source: 001_eabebf91b09c2719.txt Sec. 3.1-3.3, Figures 4-6, App. I; the formatbook and the
open choices are in ../shared/papers/FIGURES.md and docs/formats.md.

Storage per block: a 5-bit shared-exponent field, a 4-bit dialect id, and per element a
4-bit code (bit 3 sign, bits 2..0 index into the dialect; index 7 is the largest value).

Shared exponent (named convention ``se_field``): the stored 5 bits are the largest FP16
exponent field in the block, ``E``; the scale is ``2**(max(E, 1) - 15 - 2)``, i.e.
``floor(log2 blockmax) - 2`` for a normal block maximum, computed from the FP16 exponent
as the paper's hardware does. Scaled magnitudes then lie in ``[4, 8)`` for a normal
block maximum (lower for blocks of subnormals and for all-zero blocks).

Every stage of the hardware procedure is a function here, so RTL tests can compare
intermediate values: :func:`fp16_fields` -> :func:`preprocess` (``Mag_trunc``) ->
:func:`stage1_pair` -> :func:`stage2_counts` / :func:`select_two_stage` ->
:func:`quantize_index`.
"""
from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from . import validate
from .block import BlockFormat, row_max, row_sum
from .elements import FP16

__all__ = [
    "FORMATBOOK", "DialectFP4", "DialectSelect", "CountTie",
    "fp16_fields", "preprocess", "stage1_pair", "stage2_counts", "select_two_stage",
    "select_mse", "quantize_index", "beneficial_ranges", "pair_max_half_units",
    "SE_BIAS",
]

#: The formatbook, in half units (value = 0.5 * q): row = dialect id, column = index 0..7.
FORMATBOOK = np.array([
    [0, 1, 2, 3, 4, 6, 11, 15],
    [0, 1, 2, 3, 4, 6, 9, 15],
    [0, 1, 2, 3, 4, 6, 11, 14],
    [0, 1, 2, 3, 4, 6, 9, 14],
    [0, 1, 2, 3, 4, 6, 10, 13],
    [0, 1, 2, 3, 4, 6, 8, 13],
    [0, 1, 2, 3, 4, 6, 10, 12],
    [0, 1, 2, 3, 4, 6, 8, 12],   # plain FP4 E2M1
    [0, 1, 2, 3, 4, 6, 9, 11],
    [0, 1, 2, 3, 4, 6, 7, 11],
    [0, 1, 2, 3, 4, 6, 9, 10],
    [0, 1, 2, 3, 4, 6, 7, 10],
    [0, 1, 2, 3, 4, 6, 8, 9],
    [0, 1, 2, 3, 4, 6, 7, 9],
    [0, 1, 2, 3, 4, 6, 7, 8],
    [0, 1, 2, 3, 4, 5, 6, 8],    # index 5 is 2.5, not 3: the one exception
], dtype=np.int64)
FORMATBOOK.setflags(write=False)

#: Stored shared-exponent field minus this is the unbiased scale exponent (15 + 2).
SE_BIAS = 17
N_DIALECTS = FORMATBOOK.shape[0]
_FIRST_DIFF = int(np.flatnonzero((FORMATBOOK != FORMATBOOK[0]).any(axis=0))[0])
#: Scaled magnitudes below this quantize to the same value in every dialect: the midpoint
#: between the last shared value and the smallest next one (2.0 and d15's 2.5: 2.25).
SHARED_BELOW = float(FORMATBOOK[0, _FIRST_DIFF - 1] + FORMATBOOK[:, _FIRST_DIFF].min()) / 4


class DialectSelect(enum.Enum):
    """How a block's dialect is chosen."""

    #: The paper's hardware procedure on 5-bit truncated magnitudes (activations).
    TWO_STAGE = "two-stage"
    #: Exact squared error over all 16 dialects on untruncated magnitudes (weights, offline).
    MSE = "mse"


class CountTie(enum.Enum):
    """Which dialect of a pair wins when both count equally many elements in stage 2."""

    EVEN = "even"  # default: the dialect with the larger second value
    ODD = "odd"


# ----------------------------------------------------------------------- the formatbook
def pair_max_half_units() -> np.ndarray:
    """Largest value of each dialect pair k = (2k, 2k+1), in half units (15 .. 8)."""
    return FORMATBOOK[0::2, 7].copy()


@functools.lru_cache(maxsize=None)
def beneficial_ranges() -> np.ndarray:
    """Half-open stage-2 ranges ``[lo, hi)`` of every dialect, in quarter units of
    ``Mag_trunc`` (shape ``(16, 2)``).

    A dialect's range is the set of magnitudes whose nearest value, among the union of its
    pair's two value sets, is the one value only this dialect has; the ends are the
    midpoints to that value's neighbours in the union. Gives d4 ``[18, 23)`` = [4.5, 5.75)
    and d5 ``[14, 18)`` = [3.5, 4.5), as the paper's Figure 5c.
    """
    out = np.zeros((N_DIALECTS, 2), dtype=np.int64)
    for d in range(N_DIALECTS):
        mate = d ^ 1
        mine, theirs = set(FORMATBOOK[d].tolist()), set(FORMATBOOK[mate].tolist())
        (unique,) = mine - theirs
        union = sorted(mine | theirs)
        i = union.index(unique)
        lo_n, hi_n = union[i - 1], union[i + 1]
        # midpoints in half units are (a + b) / 2; in quarter units they are a + b.
        out[d] = (lo_n + unique, unique + hi_n)
    out.setflags(write=False)
    return out


# ----------------------------------------------------------------------- stages
def fp16_fields(x16: np.ndarray):
    """(sign, exponent field, 11-bit significand, effective exponent) of FP16 values."""
    bits = np.asarray(x16, dtype=np.float16).view(np.uint16).astype(np.int64)
    sign = bits >> (FP16.bits - 1)
    ef = (bits & FP16.exp_mask) >> FP16.man_bits
    man = bits & FP16.man_mask
    sig = np.where(ef > 0, man | (1 << FP16.man_bits), man)
    return sign, ef, sig, np.maximum(ef, 1)


def preprocess(x16_blocks: np.ndarray):
    """Preprocessing stage (Figure 5a) of FP16 blocks ``(n, B)``.

    Returns
    -------
    se_field : (n,) int64
        Largest FP16 exponent field of each block (the stored 5 bits).
    mag_trunc : (n, B) int64
        ``floor(4 * |x| / 2**SE)``: 3 integer + 2 fraction bits, 0..31.
    sign : (n, B) int64
    """
    sign, ef, sig, e_eff = fp16_fields(x16_blocks)
    se_field = ef.max(axis=1)
    shift = np.maximum(se_field, 1)[:, None] - e_eff + 6
    mag_trunc = np.right_shift(sig, np.minimum(shift, 31))
    return se_field, mag_trunc, sign


def stage1_pair(mag_trunc_max) -> np.ndarray:
    """Stage 1 (Figure 5b): the dialect pair from the block maximum's ``Mag_trunc``.

    The maximum is rounded at the second fraction bit (half up) to a 0.5 step; the pair
    whose largest value equals it is chosen. Named conventions: 7.75 rounds to 8.0, which
    no pair has, and goes to pair 0 (largest 7.5); a maximum below 4.0 (blocks of FP16
    subnormals only) goes to pair 7 (largest 4.0).
    """
    r = (np.asarray(mag_trunc_max, dtype=np.int64) + 1) >> 1  # half units, 0..16
    return np.clip(15 - r, 0, 7)


def stage2_counts(mag_trunc: np.ndarray, pair: np.ndarray):
    """Stage 2 counts (Figure 5c): elements of each block inside the beneficial range of
    the pair's even and odd dialect. Returns ``(count_even, count_odd)``."""
    rng = beneficial_ranges()
    lo_e, hi_e = rng[2 * pair, 0][:, None], rng[2 * pair, 1][:, None]
    lo_o, hi_o = rng[2 * pair + 1, 0][:, None], rng[2 * pair + 1, 1][:, None]
    ce = ((mag_trunc >= lo_e) & (mag_trunc < hi_e)).sum(axis=1)
    co = ((mag_trunc >= lo_o) & (mag_trunc < hi_o)).sum(axis=1)
    return ce, co


def select_two_stage(mag_trunc: np.ndarray, count_tie: CountTie = CountTie.EVEN) -> np.ndarray:
    """Dialect id per block by the two-stage procedure."""
    pair = stage1_pair(mag_trunc.max(axis=1))
    ce, co = stage2_counts(mag_trunc, pair)
    odd = co >= ce if count_tie is CountTie.ODD else co > ce
    return 2 * pair + odd.astype(np.int64)


def quantize_index(mag_q: np.ndarray, dialect: np.ndarray, *, unit: int = 4) -> np.ndarray:
    """Index (0..7) of the nearest dialect value, ties to the larger magnitude, clamped to
    the dialect's largest value (Sec. 3.3's range-check logic).

    ``mag_q`` are magnitudes in units of ``1/unit`` (``unit=4``: ``Mag_trunc``); they may be
    float (the MSE path passes exact scaled magnitudes with ``unit=1``).
    """
    table = FORMATBOOK[np.asarray(dialect)]  # (n, 8) half units
    # Midpoint between consecutive values, in the magnitude's own units.
    mids = (table[:, :-1] + table[:, 1:]) * (unit / 4.0)
    idx = np.zeros(mag_q.shape, dtype=np.int64)
    for i in range(7):
        idx += mag_q >= mids[:, i:i + 1]
    return idx


def select_mse(scaled_mag: np.ndarray) -> np.ndarray:
    """Dialect per block by exact squared error over all 16 dialects (ties: lower id).

    ``scaled_mag`` are exact magnitudes ``|x| / 2**SE``, shape ``(n, B)``.

    Magnitudes below :data:`SHARED_BELOW` round to the same value in every dialect, so
    their (common) error is left out: what remains is a sum of multiples of ``2**-18``
    below ``2**12``, exact in float64 whatever the summation order. Summing every term
    instead lets tiny elements round the float64 sums and break exact ties wrongly.
    """
    n = scaled_mag.shape[0]
    differs = scaled_mag >= SHARED_BELOW
    best = np.full(n, np.inf)
    best_d = np.zeros(n, dtype=np.int64)
    for d in range(N_DIALECTS):
        dd = np.full(n, d)
        idx = quantize_index(scaled_mag, dd, unit=1)
        err = np.sum(np.where(differs, scaled_mag - 0.5 * FORMATBOOK[d][idx], 0.0) ** 2, axis=1)
        better = err < best
        best = np.where(better, err, best)
        best_d = np.where(better, d, best_d)
    return best_d


# ----------------------------------------------------------------------- the format
@dataclass(frozen=True, kw_only=True)
class DialectFP4(BlockFormat):
    """DialectFP4 blocks: 4-bit codes, a 4-bit dialect id and a 5-bit shared exponent.

    Parameters
    ----------
    block_size : {16, 32, 64}
    select : DialectSelect
        ``two-stage`` (default; the paper's online hardware procedure) or ``mse``.
    count_tie : CountTie
        Stage-2 tie in the counts (default: the even dialect).

    Notes
    -----
    Input is rounded to FP16 first (RNE); magnitudes beyond FP16's range are an error.
    ``codes`` hold ``sign << 3 | index`` (the sign is the FP16 sign bit, so -0 and small
    negatives keep it), ``scales`` the 5-bit shared-exponent field and ``meta`` the
    dialect id.
    """

    block_size: int = 32
    select: DialectSelect = DialectSelect.TWO_STAGE
    count_tie: CountTie = CountTie.EVEN

    name: ClassVar[str] = "dialectfp4"
    reference: ClassVar[str] = "BlockDialect (001) Sec. 3.1-3.3, Fig. 4-6, App. I"
    allowed_block_sizes: ClassVar[tuple[int, ...]] = (16, 32, 64)

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "select",
                           validate.choice(self.name, "select", self.select, DialectSelect))
        object.__setattr__(self, "count_tie",
                           validate.choice(self.name, "count_tie", self.count_tie, CountTie))

    def input_range(self):
        # 65520: FP16's largest (65504) plus half an ulp, the smallest value rounding to Inf.
        return (65520.0, f"{self.name} takes |x| <= 65504: it quantizes from FP16")

    @property
    def bits_per_element(self) -> float:
        return 4 + 9 / self.block_size  # App. I: 5-bit exponent + 4-bit dialect id

    def _allocate_meta(self, n_blocks):
        return np.empty(n_blocks, dtype=np.uint8)

    def _quantize_blocks(self, xb, ctx):
        """The stage functions above, fused for speed (bit-identical; tested against them
        and against an independent reference): Mag_trunc in FP32 from the FP16 values,
        stage 2 and the element index from tables over (pair or dialect, Mag_trunc), and
        MSE selection as exact integer errors in units of 2**-9."""
        with np.errstate(over="ignore"):
            x16 = np.asarray(xb).astype(np.float16)
        h = x16.view(np.uint16)
        ebits = h & np.uint16(FP16.exp_mask)
        emax = row_max(ebits)  # below all ones: input_range refused what rounds to Inf
        se_field = (emax >> np.uint16(FP16.man_bits)).astype(np.uint8)
        # |x| / 2**SE with SE = max(E, 1) - 17: exact in FP32 (a power-of-two factor).
        unscale = np.exp2(SE_BIAS - np.maximum(se_field, 1).astype(np.int64)).astype(np.float32)
        mag = np.abs(x16.astype(np.float32))
        mag *= unscale[:, None]
        mag_trunc = np.floor(mag * np.float32(4)).astype(np.uint8)  # 0..31
        if self.select is DialectSelect.TWO_STAGE:
            pair = stage1_pair(row_max(mag_trunc)).astype(np.uint16)
            key = (pair[:, None] << np.uint16(5)) | mag_trunc
            balance = row_sum(_stage2_table()[key])  # count_even - count_odd
            odd = balance <= 0 if self.count_tie is CountTie.ODD else balance < 0
            dialect = (2 * pair + odd).astype(np.uint8)
        else:
            dialect = _select_mse_units(mag)
        key = (dialect.astype(np.uint16)[:, None] << np.uint16(5)) | mag_trunc
        codes = _index_table()[key]
        codes |= (h >> np.uint16(12)).astype(np.uint8) & np.uint8(8)  # the FP16 sign bit
        return codes, se_field, dialect

    def _dequantize_blocks(self, codes, scales, meta, ctx):
        out = np.empty(codes.shape, dtype=np.float64)
        self._dequantize_into(codes, scales, meta, ctx, out)
        return out

    def _dequantize_into(self, codes, scales, meta, ctx, out):
        key = (meta.astype(np.uint16)[:, None] << np.uint16(4)) | codes
        np.take(_signed_values(), key, out=out, mode="clip")  # "raise" would buffer
        out *= np.exp2(np.maximum(scales.astype(np.int64), 1) - SE_BIAS)[:, None]


@functools.lru_cache(maxsize=None)
def _stage2_table() -> np.ndarray:
    """+1 / -1 / 0 for (pair << 5 | Mag_trunc) inside the pair's even / odd / neither range."""
    rng = beneficial_ranges()
    m = np.arange(32)
    t = np.zeros((8, 32), dtype=np.int8)
    for p in range(8):
        t[p] += ((m >= rng[2 * p, 0]) & (m < rng[2 * p, 1])).astype(np.int8)
        t[p] -= ((m >= rng[2 * p + 1, 0]) & (m < rng[2 * p + 1, 1])).astype(np.int8)
    return t.reshape(-1)


@functools.lru_cache(maxsize=None)
def _index_table() -> np.ndarray:
    """Element index for (dialect << 5 | Mag_trunc). The midpoints are multiples of 0.25, so
    the index of an untruncated magnitude s equals that of floor(4 s): one table serves both
    selections."""
    m = np.arange(32)
    return np.stack([quantize_index(m[None, :], np.array([d]))[0] for d in range(N_DIALECTS)]
                    ).astype(np.uint8).reshape(-1)


@functools.lru_cache(maxsize=None)
def _signed_values() -> np.ndarray:
    """Value in half units times 0.5 of (dialect << 4 | code), signed (-0 for code 8)."""
    half = FORMATBOOK.astype(np.float64) * 0.5
    return np.concatenate([half, -half], axis=1).reshape(-1)


#: Scaled magnitudes at or above SHARED_BELOW are multiples of 2**-9 below 8.
_UNITS = 512


@functools.lru_cache(maxsize=None)
def _error_table() -> np.ndarray:
    """(u, dialect) -> exact squared error in units of 2**-18 of the magnitude u / 512,
    for u in [0, 4096); 0 below SHARED_BELOW (those errors are common to all dialects)."""
    u = np.arange(8 * _UNITS)
    s = u / _UNITS
    idx = np.stack([quantize_index(s[None, :], np.array([d]), unit=1)[0]
                    for d in range(N_DIALECTS)], axis=1)
    val = FORMATBOOK[np.arange(N_DIALECTS)[None, :], idx] * (_UNITS // 2)
    err = (u[:, None] - val) ** 2
    err[s < SHARED_BELOW] = 0
    return err.astype(np.int32)


def _select_mse_units(scaled32: np.ndarray) -> np.ndarray:
    """:func:`select_mse` on FP32 scaled magnitudes, in exact integers (the same choice)."""
    u = scaled32 * np.float32(_UNITS)  # exact: an integer where it matters
    u[scaled32 < np.float32(SHARED_BELOW)] = 0
    u = u.astype(np.int16)
    table = _error_table()
    acc = table[u[:, 0]].copy()
    for j in range(1, u.shape[1]):
        acc += table[u[:, j]]
    return np.argmin(acc, axis=1).astype(np.uint8)  # the first (lowest id) of equal minima
