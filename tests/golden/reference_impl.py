"""Naive, independent reference implementations of the golden block formats.

Written from the text of issue 2 and ../shared/papers/FIGURES.md, not from the golden code:
one block at a time in plain Python, with exact rational arithmetic (``fractions.Fraction``)
wherever the issue defines a real-valued quantity (nearest value, squared error), and NumPy
float32/float16 *scalars* only where a convention names FP32 or FP16 arithmetic. Element
tables are rebuilt from their definitions here. Slow on purpose: the tests compare these with
the vectorised golden models, atol=0, on a few thousand blocks.

Conventions the issue leaves open follow the golden models' documented choices (each is
named where it is used): FP32 one operation at a time for the two-level scale pipeline, an
all-zero tensor's tensor scale 1.0, a zero-scale NVFP4 block stored as zeros with its inputs'
signs (a -0 input gives the -0 code, as with any other scale), the DialectFP4
shared-exponent field ``E`` with scale ``2**(max(E, 1) - 17)``, pair 7 for blocks whose
maximum is below 4.0.
"""
from __future__ import annotations

import bisect
import math
from fractions import Fraction as Fr

import numpy as np

from mactile.golden.elements import FloatFormat, Rounding

f32 = np.float32
f16 = np.float16


class RefError(ValueError):
    """The reference refuses the input (golden must refuse it too)."""


# --------------------------------------------------------------------------- element tables
def minifloat_magnitudes(exp_bits: int, man_bits: int, bias: int) -> list[float]:
    """Magnitude of every (sign-less) code of a mini-float with subnormals: code
    ``e << man_bits | m`` is ``2**(1-bias) * m/2**man_bits`` for ``e == 0`` and
    ``2**(e-bias) * (1 + m/2**man_bits)`` otherwise."""
    out = []
    for e in range(1 << exp_bits):
        for m in range(1 << man_bits):
            if e == 0:
                out.append(math.ldexp(m / (1 << man_bits), 1 - bias))
            else:
                out.append(math.ldexp(1 + m / (1 << man_bits), e - bias))
    return out


#: FP4 E2M1 (OCP MX): magnitudes of codes 0..7.
FP4 = minifloat_magnitudes(2, 1, 1)
#: FP8 E4M3 (OCP, fn): code 0x7F is NaN, so magnitudes of codes 0..0x7E (max 448).
E4M3 = minifloat_magnitudes(4, 3, 7)[:0x7F]
#: Unsigned E3M3 (bias 3, subnormals, max 30): codes 0..63.
E3M3 = minifloat_magnitudes(3, 3, 3)

#: DialectFP4 formatbook transcribed from FIGURES.md (half units, index 0..7).
FORMATBOOK = [
    [0, 1, 2, 3, 4, 6, 11, 15], [0, 1, 2, 3, 4, 6, 9, 15],
    [0, 1, 2, 3, 4, 6, 11, 14], [0, 1, 2, 3, 4, 6, 9, 14],
    [0, 1, 2, 3, 4, 6, 10, 13], [0, 1, 2, 3, 4, 6, 8, 13],
    [0, 1, 2, 3, 4, 6, 10, 12], [0, 1, 2, 3, 4, 6, 8, 12],
    [0, 1, 2, 3, 4, 6, 9, 11], [0, 1, 2, 3, 4, 6, 7, 11],
    [0, 1, 2, 3, 4, 6, 9, 10], [0, 1, 2, 3, 4, 6, 7, 10],
    [0, 1, 2, 3, 4, 6, 8, 9], [0, 1, 2, 3, 4, 6, 7, 9],
    [0, 1, 2, 3, 4, 6, 7, 8], [0, 1, 2, 3, 4, 5, 6, 8],
]


_FR_CACHE: dict = {}


def _fractions(table) -> tuple:
    key = tuple(table)
    if key not in _FR_CACHE:
        _FR_CACHE[key] = tuple(Fr(v) for v in table)
    return _FR_CACHE[key]


def nearest_index(mag, table, *, ties: str = "even") -> int:
    """Index of the value of the ascending ``table`` nearest to ``mag >= 0`` (exactly), by a
    linear scan; beyond the table's end the last index (saturation).

    ``ties``: ``"even"`` (the even index, i.e. the even code) or ``"up"`` (larger value).
    """
    if isinstance(mag, int) and all(isinstance(t, int) for t in table):
        m = mag  # exact integers as they are
    else:
        m = mag if isinstance(mag, Fr) else Fr(float(mag))
        table = _fractions(table)
    best, best_d = 0, abs(m - table[0])
    for i in range(1, len(table)):
        d = abs(m - table[i])
        if d < best_d or (d == best_d and (ties == "up" or i % 2 == 0)):
            best, best_d = i, d
    return best


# --------------------------------------------------------------------------- element encode
_MAG_CACHE: dict = {}


def _mag_codes(fmt: FloatFormat):
    if fmt not in _MAG_CACHE:
        n_mag = 1 << (fmt.exp_bits + fmt.man_bits)
        pairs = sorted((Fr(float(fmt.values[c])), c) for c in range(n_mag)
                       if np.isfinite(fmt.values[c]))
        _MAG_CACHE[fmt] = ([p[0] for p in pairs], [p[1] for p in pairs])
    return _MAG_CACHE[fmt]


def nearest_code(x: float, fmt: FloatFormat, rounding: Rounding = Rounding.NEAREST_EVEN) -> int:
    """Saturating encode of one finite value by an exact search over the code table.

    Ties to even go to the code with an even mantissa field; a format without mantissa bits
    (E8M0) has no even neighbour, and its ties go up (as ``ml_dtypes`` rounds). A format
    without zero (E8M0) maps every positive value below its smallest to the smallest.
    """
    vals, codes = _mag_codes(fmt)
    neg = bool(np.signbit(x))
    m = Fr(abs(float(x)))
    i = bisect.bisect_left(vals, m)
    if i < len(vals) and vals[i] == m:
        k = i
    elif i == 0:
        k = 0
    elif i == len(vals):
        k = len(vals) - 1
    else:
        lo, hi = i - 1, i
        if rounding is Rounding.TOWARD_ZERO:
            k = lo
        else:
            dl, dh = m - vals[lo], vals[hi] - m
            if dl != dh:
                k = lo if dl < dh else hi
            elif rounding is Rounding.NEAREST_AWAY or fmt.man_bits == 0:
                k = hi
            else:
                k = lo if codes[lo] % 2 == 0 else hi
    code = codes[k]
    if neg and fmt.signed:
        code |= fmt.sign_mask
    return code


# --------------------------------------------------------------------------- NVFP4 / RaZeR
def _two_level(x, *, scale_table, scale_max, candidates, special_zero):
    """Shared NVFP4-style reference. Returns (codes, scale_idx, cand_idx, d32, values)."""
    x = np.asarray(x)
    x32 = x.astype(np.float32)
    blocks32 = x32.reshape(-1, 16)
    blocks = x.reshape(-1, 16)
    amax_t = f32(0)
    for v in x32.ravel():
        amax_t = max(amax_t, abs(v))
    d32 = f32(amax_t) / f32(scale_max * 6)  # D32 = amax / (max * 6), FP32
    if not d32 > 0:
        d32 = f32(1.0)  # all-zero tensor: immaterial but finite (golden convention)
    out_codes, out_scale, out_k, out_vals = [], [], [], []
    for b32, borig in zip(blocks32, blocks):
        amax = f32(0)
        for v in b32:
            amax = max(amax, abs(v))
        best = None
        for k, v in enumerate(candidates or [None]):
            target = 6.0 if v is None else max(6.0, abs(v))
            arg = amax / (d32 * f32(target))  # two FP32 operations
            s_idx = nearest_index(arg, scale_table)  # RNE, saturating
            s = f32(scale_table[s_idx])
            denom = d32 * s
            codes, vals = [], []
            for xj in b32:
                sc = xj / denom if denom > 0 else np.copysign(f32(0.0), xj)  # signed zero
                i = nearest_index(abs(sc), FP4)
                neg = bool(np.signbit(sc))
                code, val = (8 if neg else 0) | i, (-1 if neg else 1) * Fr(FP4[i])
                if v is not None:
                    if abs(Fr(float(sc)) - Fr(v)) < abs(Fr(float(sc)) - val):
                        code, val = 0b0000, Fr(v)  # the redundant +0 code
                    elif i == 0:
                        code = special_zero  # real zeros stored as -0
                codes.append(code)
                vals.append(val * Fr(float(s)) * Fr(float(d32)))
            err = sum((Fr(float(xo)) - val) ** 2 for xo, val in zip(borig, vals))
            if best is None or err < best[0]:  # ties keep the earlier candidate
                best = (err, codes, s_idx, k, vals)
        out_codes.append(best[1])
        out_scale.append(best[2])
        out_k.append(best[3])
        out_vals.append([float(v) for v in best[4]])
    return (np.array(out_codes, dtype=np.uint8), np.array(out_scale, dtype=np.uint8),
            np.array(out_k, dtype=np.uint8), d32, np.array(out_vals))


def nvfp4(x):
    """(codes, scale codes, tensor scale, dequantized) of NVFP4 (RaZeR Eq. 1-3)."""
    c, s, _, d32, v = _two_level(x, scale_table=E4M3, scale_max=448.0, candidates=(),
                                 special_zero=0)
    return c, s, d32, v


def razer_act(x, a: float = 5.0):
    """RaZeR activations: E4M3 scale byte, bit 7 = sign of the special value (+a, -a)."""
    c, s, k, d32, v = _two_level(x, scale_table=E4M3, scale_max=448.0, candidates=(a, -a),
                                 special_zero=0b1000)
    return c, (s | (k << 7)).astype(np.uint8), d32, v


def razer(x, a: float = 5.0, b: float = 8.0):
    """RaZeR weights: byte = E3M3 code | which << 6 | sign << 7, candidates +a, -a, +b, -b."""
    c, s, k, d32, v = _two_level(x, scale_table=E3M3, scale_max=30.0,
                                 candidates=(a, -a, b, -b), special_zero=0b1000)
    return c, (s | ((k >> 1) << 6) | ((k & 1) << 7)).astype(np.uint8), d32, v


# --------------------------------------------------------------------------- MXFP4
def mxfp4(x, block: int = 32):
    """OCP MX: scale 2**(floor(log2 amax) - 2) clamped to E8M0 (code 0 for a zero block),
    elements FP4 RNE saturating of x / scale (exact)."""
    codes, scales, vals = [], [], []
    for blk in np.asarray(x, dtype=np.float64).reshape(-1, block):
        amax = max(abs(float(v)) for v in blk)
        e = -127 if amax == 0 else min(max(math.frexp(amax)[1] - 1 - 2, -127), 127)
        scales.append(e + 127)
        row_c, row_v = [], []
        for v in blk:
            i = nearest_index(abs(Fr(float(v)) / Fr(2) ** e), FP4)
            neg = bool(np.signbit(v))
            row_c.append((8 if neg else 0) | i)
            row_v.append((-1 if neg else 1) * math.ldexp(FP4[i], e))
        codes.append(row_c)
        vals.append(row_v)
    return np.array(codes, np.uint8), np.array(scales, np.uint8), np.array(vals)


# --------------------------------------------------------------------------- DialectFP4
def dialect_beneficial_range(d: int) -> tuple[Fr, Fr]:
    """[lo, hi) in value units: the magnitudes whose nearest value in the union of the
    pair's value sets is the value only dialect ``d`` has (FIGURES.md)."""
    mine = {Fr(q, 2) for q in FORMATBOOK[d]}
    theirs = {Fr(q, 2) for q in FORMATBOOK[d ^ 1]}
    (u,) = mine - theirs
    union = sorted(mine | theirs)
    i = union.index(u)
    return (union[i - 1] + u) / 2, (u + union[i + 1]) / 2


def _dialect_nearest(mag: Fr, d: int) -> int:
    return nearest_index(mag, [Fr(q, 2) for q in FORMATBOOK[d]], ties="up")


def dialect_block(x, *, select: str = "two-stage", count_tie: str = "even"):
    """One block: returns (codes, se_field, dialect, values, mag_trunc)."""
    with np.errstate(over="ignore"):
        x16 = [f16(v) for v in np.asarray(x)]
    if any(not np.isfinite(v) for v in x16):
        raise RefError("beyond the FP16 range")
    bits = [int(np.array(v).view(np.uint16)) for v in x16]
    efield = max((b >> 10) & 31 for b in bits)
    se = max(efield, 1) - 15 - 2  # floor(log2 max) - 2 for a normal block maximum
    unit = Fr(2) ** se
    mags = [abs(Fr(float(v))) / unit for v in x16]  # exact scaled magnitudes
    trunc = [math.floor(m * 4) for m in mags]  # Mag_trunc, quarter units
    if select == "two-stage":
        r = (max(trunc) + 1) // 2  # rounded at the 2nd fraction bit, half units, half up
        pairs = [k for k in range(8) if FORMATBOOK[2 * k][7] == r]
        pair = pairs[0] if pairs else (0 if r > 15 else 7)  # 7.75 -> pair 0; < 4.0 -> pair 7
        counts = []
        for d in (2 * pair, 2 * pair + 1):
            lo, hi = dialect_beneficial_range(d)
            counts.append(sum(1 for t in trunc if lo <= Fr(t, 4) < hi))
        if count_tie == "even":
            dialect = 2 * pair + (1 if counts[1] > counts[0] else 0)
        else:
            dialect = 2 * pair + (1 if counts[1] >= counts[0] else 0)
        idx = [_dialect_nearest(Fr(t, 4), dialect) for t in trunc]
    else:
        # Exact squared error in integers: every scaled FP16 magnitude is a multiple of
        # 2**-38 (FP16's LSB 2**-24 over a scale of at most 2**14).
        ints = [m * 2 ** 38 for m in mags]
        assert all(v.denominator == 1 for v in ints)
        ints = [int(v) for v in ints]
        best = None
        for d in range(16):
            vals_d = [q << 37 for q in FORMATBOOK[d]]  # half units -> units of 2**-38
            idx_d = [nearest_index(v, vals_d, ties="up") for v in ints]
            err = sum((v - vals_d[i]) ** 2 for v, i in zip(ints, idx_d))
            if best is None or err < best[0]:
                best = (err, d, idx_d)
        _, dialect, idx = best
    codes = [((b >> 15) << 3) | i for b, i in zip(bits, idx)]
    vals = [(-1 if b >> 15 else 1) * float(Fr(FORMATBOOK[dialect][i], 2) * unit)
            for b, i in zip(bits, idx)]
    return codes, efield, dialect, vals, trunc


def dialectfp4(x, block: int = 32, **kw):
    res = [dialect_block(b, **kw) for b in np.asarray(x).reshape(-1, block)]
    return (np.array([r[0] for r in res], np.uint8), np.array([r[1] for r in res], np.uint8),
            np.array([r[2] for r in res], np.uint8), np.array([r[3] for r in res]))


# --------------------------------------------------------------------------- int-group
def int_group(x, *, bits: int = 6, block: int = 128):
    """FlexQ symmetric INTn: scale = FP16(FP32(amax / (2**(n-1)-1))), q = RNE(x / scale) in
    FP32, clamped. Returns (codes, scale bit patterns, values)."""
    qmax, qmin = (1 << (bits - 1)) - 1, -(1 << (bits - 1))
    codes, scales, vals = [], [], []
    for blk in np.asarray(x).reshape(-1, block):
        b32 = [f32(v) for v in blk]
        amax = max(abs(v) for v in b32)
        with np.errstate(over="ignore"):
            s = f16(amax / f32(qmax))
        if not np.isfinite(s):
            raise RefError("scale overflows FP16")
        row = []
        for v in b32:
            q = 0 if s == 0 else min(max(round(float(v / f32(s))), qmin), qmax)  # round: RNE
            row.append(q)
        codes.append([q & ((1 << bits) - 1) for q in row])
        scales.append(int(np.array(s).view(np.uint16)))
        vals.append([q * float(s) for q in row])
    return np.array(codes, np.uint8), np.array(scales, np.uint16), np.array(vals)


# --------------------------------------------------------------------------- NestedFP
def nestedfp_split_word(a: int) -> tuple[int, int]:
    """FIGURES.md: lower = a & 0xFF; upper = sign | exp bits 13..10 | mantissa 9..7, rounded
    half to even on the 7 dropped bits, never rounding exponent 15 / mantissa 0b110 up."""
    if a & 0x4000:
        raise RefError("exponent MSB set")
    lower = a & 0xFF
    sign = (a >> 15) & 1
    exp4 = (a >> 10) & 0xF
    top3 = (a >> 7) & 0x7
    dropped = a & 0x7F
    body = (exp4 << 3) | top3
    up = dropped > 0x40 or (dropped == 0x40 and body & 1)
    if exp4 == 15 and top3 == 0b110:
        up = False
    return (((sign << 7) | body) + int(up)) & 0xFF, lower  # an 8-bit incrementer


def nestedfp_merge_word(upper: int, lower: int) -> int:
    sub = (upper & 1) ^ (lower >> 7)
    field = ((upper - sub) >> 1) & 0x3F
    return (((upper & 0x80) | field) << 8) | lower
