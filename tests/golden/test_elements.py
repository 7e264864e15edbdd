"""Element formats: exhaustive code tables and encode checks, bit for bit.

Oracles: ``ml_dtypes`` casts (FP4 E2M1, FP6 E2M3/E3M2, FP8 E4M3, E8M0, int4/uint4), NumPy's
IEEE float16 cast (FP16), and the naive exact nearest-value search of
``reference_impl.nearest_code`` (E3M3, other roundings, float64 inputs that ``ml_dtypes``
would round to FP32 first). The fast table encode path and the general field-by-field path
are compared on every input set.

``ml_dtypes`` before 0.7 converts float64 through float32 (double rounding) and rounds E8M0
of float32 subnormals up; 0.7 (what the [dev] extra installs) fixes both, and is fed float64
and those subnormals too (older versions: float32 only, subnormals against the exact search).
"""
from __future__ import annotations

import numpy as np
import pytest

from mactile.golden import (E3M3, E8M0, FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3, FP16, INT4,
                            INT5, INT6, INT8, UINT4, UINT8, FloatFormat, IntFormat, Rounding,
                            int_format)
from mactile.golden.elements import Specials

import reference_impl as ref  # tests/golden is on sys.path (pytest rootdir-less module)

ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes (the [dev] extra) is the oracle")

#: Each <= 8-bit float format with its ml_dtypes twin (E3M3 has none).
ML_TWINS = {
    "fp4_e2m1": (FP4_E2M1, ml_dtypes.float4_e2m1fn),
    "fp6_e2m3": (FP6_E2M3, ml_dtypes.float6_e2m3fn),
    "fp6_e3m2": (FP6_E3M2, ml_dtypes.float6_e3m2fn),
    "fp8_e4m3": (FP8_E4M3, ml_dtypes.float8_e4m3fn),
    "e8m0": (E8M0, ml_dtypes.float8_e8m0fnu),
}
SMALL_FLOATS = [FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3, E3M3, E8M0]
#: ml_dtypes 0.7 fixed both bugs docs/formats.md lists (float64 double rounding, E8M0 of
#: FP32 subnormals); older versions are checked around them.
ML_FIXED = tuple(int(p) for p in ml_dtypes.__version__.split(".")[:2]) >= (0, 7)


def ml_codes(x: np.ndarray, ml_type) -> np.ndarray:
    """Codes of an ml_dtypes cast from float32 (float64 too from 0.7: no double rounding)
    (the low bits of each byte)."""
    assert x.dtype == np.float32 or (x.dtype == np.float64 and ML_FIXED)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(ml_type).view(np.uint8)


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise float equality: NaN where NaN, and the sign of zero counts."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return bool(np.array_equal(np.isnan(a), np.isnan(b))
                and np.array_equal(np.nan_to_num(a), np.nan_to_num(b))
                and np.array_equal(np.signbit(a), np.signbit(b)))


def probe_values(fmt: FloatFormat, rng, *, dtype=np.float32) -> np.ndarray:
    """Every code value, every midpoint, the next floats either side of both, random values
    over the whole range (and beyond), -0 and overflow; NaN-free, signed where ``fmt`` is."""
    v = fmt.values[np.isfinite(fmt.values)].astype(np.float64)
    mags = np.unique(np.abs(v))
    mids = (mags[:-1] + mags[1:]) / 2.0
    top = mags[-1]
    # Where the next (absent) code would be: the saturation/overflow threshold region.
    ulp_top = top - mags[-2]
    beyond = np.array([top + ulp_top / 2, top + ulp_top, 2 * top, 1e4 * top])
    lo = np.log2(max(mags[mags > 0].min(), np.finfo(dtype).tiny)) - 3
    hi = np.log2(top) + 2
    with np.errstate(over="ignore"):  # E8M0's range exceeds float32's: those become Inf
        base = np.concatenate([mags, mids, beyond]).astype(dtype)
        rand = np.exp2(rng.uniform(lo, hi, 20000)).astype(dtype)
    near = np.concatenate([np.nextafter(base, dtype(0)), np.nextafter(base, dtype(np.inf))])
    allv = np.concatenate([base, near, rand, np.array([0.0, np.finfo(dtype).tiny], dtype)])
    allv = allv[np.isfinite(allv) & (allv >= 0)]
    if fmt.signed:
        allv = np.concatenate([allv, -allv, np.array([-0.0], dtype)])
    return allv


# --------------------------------------------------------------------------- decode
@pytest.mark.parametrize("name", sorted(ML_TWINS))
def test_decode_table_matches_ml_dtypes(name):
    fmt, ml_type = ML_TWINS[name]
    codes = np.arange(fmt.code_count, dtype=np.uint8)
    theirs = codes.view(ml_type).astype(np.float64)
    assert same_values(fmt.decode(codes), theirs)
    assert same_values(fmt.values, theirs)


def test_fp16_decode_all_65536_codes():
    codes = np.arange(1 << 16, dtype=np.uint16)
    assert same_values(FP16.decode(codes), codes.view(np.float16).astype(np.float64))


def test_e3m3_table_from_definition():
    # bias 3, subnormals, no Inf/NaN, max 30 (issue 2): 2**(e-3) * (1 + m/8), e=0: m/8 * 2**-2
    want = [(m / 8) * 2.0 ** -2 if e == 0 else (1 + m / 8) * 2.0 ** (e - 3)
            for e in range(8) for m in range(8)]
    assert np.array_equal(E3M3.values, want)
    assert E3M3.max_value == 30.0 and E3M3.min_value == 2.0 ** -5 and E3M3.bits == 6


def test_catalog_constants():
    assert (FP4_E2M1.max_value, FP6_E2M3.max_value, FP6_E3M2.max_value) == (6.0, 7.5, 28.0)
    assert FP8_E4M3.max_value == 448.0 and list(FP8_E4M3.nan_codes) == [0x7F, 0xFF]
    assert E8M0.max_value == 2.0 ** 127 and E8M0.min_value == 2.0 ** -127
    assert list(E8M0.nan_codes) == [0xFF]
    assert FP16.max_value == 65504.0 and FP16.min_value == 2.0 ** -24
    assert list(FP4_E2M1.finite_magnitudes) == [0, 0.5, 1, 1.5, 2, 3, 4, 6]


# --------------------------------------------------------------------------- encode
@pytest.mark.parametrize("name", ["fp4_e2m1", "fp6_e2m3", "fp6_e3m2"])
def test_encode_matches_ml_dtypes_no_specials(name, rng):
    """Formats without NaN/Inf saturate, as ml_dtypes does; table and field paths agree."""
    fmt, ml_type = ML_TWINS[name]
    x = probe_values(fmt, rng)
    want = ml_codes(x, ml_type)
    assert np.array_equal(fmt.encode(x), want)
    assert np.array_equal(fmt.encode(x, saturate=False), want)
    x64 = x.astype(np.float64)
    assert np.array_equal(fmt._encode_rne_table(x64), want)
    assert np.array_equal(
        fmt._encode_general(x64, rounding=Rounding.NEAREST_EVEN, saturate=True), want)


def test_e4m3_encode_matches_ml_dtypes(rng):
    """Non-saturating: NaN above 464 (the midpoint to the absent 480), as ml_dtypes; 464
    itself ties to 448 (even). Saturating: ml_dtypes of the clamped input."""
    x = probe_values(FP8_E4M3, rng)
    want = ml_codes(x, ml_dtypes.float8_e4m3fn)
    assert np.array_equal(FP8_E4M3.encode(x, saturate=False), want)
    clamped = np.clip(x, -448, 448)
    want_sat = ml_codes(clamped, ml_dtypes.float8_e4m3fn)
    assert np.array_equal(FP8_E4M3.encode(x), want_sat)
    x64 = x.astype(np.float64)
    assert np.array_equal(FP8_E4M3._encode_rne_table(x64), want_sat)
    assert np.array_equal(
        FP8_E4M3._encode_general(x64, rounding=Rounding.NEAREST_EVEN, saturate=True), want_sat)
    edge = np.array([464.0, np.nextafter(np.float32(464), np.float32(0)),
                     np.nextafter(np.float32(464), np.float32(1e9)), -464.0, -465.0], np.float32)
    assert list(FP8_E4M3.encode(edge, saturate=False)) == [0x7E, 0x7E, 0x7F, 0xFE, 0xFF]
    assert list(FP8_E4M3.encode(edge)) == [0x7E, 0x7E, 0x7E, 0xFE, 0xFE]


def test_e4m3_nan_and_inf_input():
    x = np.array([np.nan, -np.nan, np.inf, -np.inf], np.float32)
    assert np.array_equal(FP8_E4M3.encode(x, saturate=False),
                          ml_codes(x, ml_dtypes.float8_e4m3fn))
    # Saturating (the papers' quantizers): Inf clamps to +-448, NaN stays NaN.
    assert list(FP8_E4M3.encode(x)) == [0x7F, 0xFF, 0x7E, 0xFE]


#: ml_dtypes 0.5-0.6 round every float32 *subnormal* in (2**-127, 2**-126) up to 2**-126
#: (the bit trick treats the subnormal mantissa as a normal one), although 1.1 * 2**-127 is
#: nearer 2**-127. With those versions that range is checked against the exact search.
E8M0_ML_QUIRK = (2.0 ** -127, 2.0 ** -126)


def test_e8m0_encode_matches_ml_dtypes(rng):
    """Positive values (including those below 2**-127, which round to the smallest code:
    E8M0 has no zero); zero, negatives and NaN give the NaN code 0xFF."""
    x = probe_values(E8M0, rng)
    x = np.concatenate([x, np.float32([2.0 ** -128, 2.0 ** -130, 1e-45, 1.4e-45, 2.9e-39])])
    quirk = (x > E8M0_ML_QUIRK[0]) & (x < E8M0_ML_QUIRK[1]) & (not ML_FIXED)
    assert np.array_equal(E8M0.encode(x[quirk]), [ref.nearest_code(v, E8M0) for v in x[quirk]])
    x = x[~quirk]
    want = ml_codes(x, ml_dtypes.float8_e8m0fnu)
    assert np.array_equal(E8M0.encode(x, saturate=False), want)
    assert np.array_equal(E8M0.encode(x), ml_codes(np.minimum(x, np.float32(2.0 ** 127)),
                                                    ml_dtypes.float8_e8m0fnu))
    bad = np.array([0.0, -0.0, -1.0, -2.0 ** -130, np.nan], np.float32)
    assert list(E8M0.encode(bad)) == [0xFF] * 5
    assert np.array_equal(E8M0.encode(bad), ml_codes(bad, ml_dtypes.float8_e8m0fnu))


def test_ml_dtypes_bugs_by_version():
    """The two ml_dtypes bugs docs/formats.md lists, on their reproducers: present before
    0.7 (seen in 0.4.1, 0.5.4, 0.6.0; E8M0 exists from 0.5), fixed in 0.7.0. mactile gives
    the nearest value either way."""
    x64 = np.float64([1.0625 + 2.0 ** -30])  # nearer 1.125 than 1.0
    sub = np.float32([1.1 * 2.0 ** -127])  # nearer 2**-127 than 2**-126
    e4m3 = x64.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)[0]
    e8m0 = sub.astype(ml_dtypes.float8_e8m0fnu).astype(np.float64)[0]
    assert (e4m3, e8m0) == ((1.125, 2.0 ** -127) if ML_FIXED else (1.0, 2.0 ** -126))
    assert FP8_E4M3.quantize(x64)[0] == 1.125 and E8M0.quantize(sub)[0] == 2.0 ** -127


@pytest.mark.skipif(not ML_FIXED, reason="ml_dtypes < 0.7 rounds float64 through float32")
@pytest.mark.parametrize("name", sorted(ML_TWINS))
def test_float64_encode_matches_ml_dtypes(name, rng):
    """float64 input (every code, midpoint and the float64 values either side of both,
    random values, FP32 subnormals and below) against ml_dtypes >= 0.7's direct cast."""
    fmt, ml_type = ML_TWINS[name]
    x = probe_values(fmt, rng, dtype=np.float64)
    x = np.concatenate([x, np.ldexp(rng.uniform(1, 2, 2000), rng.integers(-160, -120, 2000))])
    if not fmt.signed:
        x = x[x > 0]
    want = ml_codes(x, ml_type)
    if fmt.specials is Specials.NONE:
        assert np.array_equal(fmt.encode(x), want)
    else:  # ml_dtypes does not saturate: compare there, and clamped input saturating
        assert np.array_equal(fmt.encode(x, saturate=False), want)
        clamped = np.clip(x, -fmt.max_value, fmt.max_value) if fmt.signed else \
            np.minimum(x, fmt.max_value)
        assert np.array_equal(fmt.encode(x), ml_codes(clamped, ml_type))


def test_e8m0_ties_go_up_as_ml_dtypes():
    """Between 2**e and 2**(e+1) the midpoint is 1.5 * 2**e; it rounds up whatever the
    parity of the exponent field (ml_dtypes does the same)."""
    x = np.float32([1.5, 3.0, 6.0, 0.75, 1.5 * 2.0 ** -127, 1.5 * 2.0 ** 126])
    assert np.array_equal(E8M0.encode(x), ml_codes(x, ml_dtypes.float8_e8m0fnu))
    assert list(E8M0.encode(x)) == [128, 129, 130, 127, 1, 254]


@pytest.mark.parametrize("fmt", SMALL_FLOATS, ids=lambda f: f.name)
@pytest.mark.parametrize("rounding", list(Rounding), ids=lambda r: r.value)
def test_encode_matches_naive_nearest(fmt, rounding, rng):
    """float64 inputs against the naive exact search, for every rounding (saturating)."""
    x = probe_values(fmt, rng, dtype=np.float64)[::7]
    x = np.concatenate([x, rng.standard_normal(500) * fmt.max_value])
    if not fmt.signed:
        x = x[x > 0]
    want = np.array([ref.nearest_code(v, fmt, rounding) for v in x])
    got = fmt.encode(x, rounding=rounding)
    assert np.array_equal(got, want)
    assert np.array_equal(fmt._encode_general(x, rounding=rounding, saturate=True), want)


@pytest.mark.parametrize("fmt", [f for f in SMALL_FLOATS if f.signed and f.subnormals],
                         ids=lambda f: f.name)
def test_table_path_equals_field_path_exhaustive_pairs(fmt):
    """On a dense grid (every code, midpoint and 64 points between neighbours) in float64."""
    mags = fmt.finite_magnitudes
    t = np.linspace(0.0, 1.0, 65)[:-1]
    grid = (mags[:-1, None] + (mags[1:] - mags[:-1])[:, None] * t).ravel()
    x = np.concatenate([grid, [mags[-1], mags[-1] * 1.01, mags[-1] * 1e3]])
    x = np.concatenate([x, -x])
    fast = fmt._encode_rne_table(x)
    slow = fmt._encode_general(x, rounding=Rounding.NEAREST_EVEN, saturate=True)
    assert np.array_equal(fast, slow)


def test_subnormal_round_up_and_negative_zero():
    # FP4: 0.25 ties to 0 (even), just above goes to 0.5; FP8: the largest subnormal
    # rounds up into the smallest normal.
    x = np.float32([0.25, np.nextafter(np.float32(0.25), np.float32(1)), -0.0, -0.25])
    assert list(FP4_E2M1.encode(x)) == [0x0, 0x1, 0x8, 0x8]
    sub_max, min_norm = FP8_E4M3.values[7], FP8_E4M3.values[8]
    mid = np.float32((sub_max + min_norm) / 2)
    assert list(FP8_E4M3.encode([mid, -mid])) == [0x08, 0x88]  # 0b0000111 odd -> up
    x16 = np.float64([2.0 ** -25, 3 * 2.0 ** -26, 3 * 2.0 ** -25, -0.0])
    assert list(FP16.encode(x16)) == [0, 1, 2, 0x8000]  # 2**-25 ties to 0; 1.5 ulp -> 2


# --------------------------------------------------------------------------- FP16
def test_fp16_encode_matches_numpy(rng):
    codes = np.arange(1 << 16, dtype=np.uint16)
    vals = codes.view(np.float16).astype(np.float64)
    fin = np.sort(np.unique(vals[np.isfinite(vals)]))
    mids = (fin[:-1] + fin[1:]) / 2
    x = np.concatenate([
        fin, mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf),
        [65504.0, 65519.99, 65520.0, 65536.0, 1e6, 2.0 ** -25, 2.0 ** -26, 1e-30, -0.0],
        rng.standard_normal(20000) * np.exp2(rng.uniform(-30, 17, 20000)),
    ])
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)  # IEEE RNE, overflow to Inf
    assert np.array_equal(FP16.encode(x, saturate=False), want)
    sat = np.clip(x, -65504, 65504).astype(np.float16).view(np.uint16)
    assert np.array_equal(FP16.encode(x), sat)
    # Every code round-trips (NaN codes map to the canonical NaN of their sign).
    fin_codes = codes[np.isfinite(vals)]
    assert np.array_equal(FP16.encode(FP16.decode(fin_codes)), fin_codes)
    inf = np.array([np.inf, -np.inf])
    assert list(FP16.encode(inf)) == [0x7C00, 0xFC00]  # Inf input stays Inf
    assert all(np.isnan(FP16.decode(FP16.encode([np.nan]))))


# --------------------------------------------------------------------------- integers
@pytest.mark.parametrize("fmt", [INT4, INT5, INT6, INT8, UINT4, UINT8], ids=lambda f: f.name)
def test_int_round_trip_every_code(fmt):
    codes = np.arange(fmt.code_count, dtype=np.int64)
    vals = fmt.decode(codes)
    assert vals.min() == fmt.min_int and vals.max() == fmt.max_int
    assert len(np.unique(vals)) == fmt.code_count
    assert np.array_equal(fmt.encode(vals.astype(np.float64)), codes.astype(fmt.dtype))
    assert np.array_equal(fmt.from_int(vals), codes.astype(fmt.dtype))


@pytest.mark.parametrize("fmt,ml_name", [(INT4, "int4"), (UINT4, "uint4")], ids=["int4", "uint4"])
def test_int4_matches_ml_dtypes(fmt, ml_name):
    ml_type = getattr(ml_dtypes, ml_name)
    codes = np.arange(16, dtype=np.uint8)
    assert np.array_equal(fmt.decode(codes), codes.view(ml_type).astype(np.int64))
    vals = fmt.decode(codes)
    assert np.array_equal(fmt.from_int(vals), vals.astype(ml_type).view(np.uint8) & 0xF)


def test_int_ties_to_even_and_clamp():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 6.5, 7.49, 7.5, 100.0, -8.5, -100.0])
    want = [0, 2, 2, 0, -2, -2, 6, 7, 7, 7, -8, -8]
    assert list(INT4.decode(INT4.encode(x))) == want
    assert list(INT4.decode(INT4.encode(x, rounding=Rounding.NEAREST_AWAY))) == \
        [1, 2, 3, -1, -2, -3, 7, 7, 7, 7, -8, -8]
    assert list(INT4.decode(INT4.encode(x, rounding=Rounding.TOWARD_ZERO))) == \
        [0, 1, 2, 0, -1, -2, 6, 7, 7, 7, -8, -8]
    with pytest.raises(OverflowError, match="outside"):
        INT4.encode([8.0], saturate=False)
    with pytest.raises(ValueError, match="NaN"):
        INT4.encode([np.nan])
    assert list(UINT4.decode(UINT4.encode([-3.0, 15.5, 16.0]))) == [0, 15, 15]
    assert int_format(6) is INT6 and int_format(7).max_int == 63


def test_int_random_matches_python_round(rng):
    x = rng.standard_normal(20000) * 40
    x = np.concatenate([x, np.round(x) + 0.5])  # many exact ties
    for fmt in (INT6, INT8):
        want = [min(max(round(v), fmt.min_int), fmt.max_int) for v in x]  # Python: RNE
        assert list(fmt.decode(fmt.encode(x))) == want


def test_format_validation_messages():
    with pytest.raises(ValueError, match="exp_bits must be >= 1"):
        FloatFormat(name="bad", exp_bits=0, man_bits=2, bias=1)
    with pytest.raises(ValueError, match="IEEE specials need"):
        FloatFormat(name="bad", exp_bits=3, man_bits=0, bias=1, specials=Specials.IEEE)
    with pytest.raises(ValueError, match="bits must lie"):
        IntFormat(name="bad", bits=0)
    with pytest.raises(TypeError, match="real numeric"):
        FP4_E2M1.encode(np.array([1 + 2j]))
    with pytest.raises(ValueError, match="codes must lie"):
        FP4_E2M1.decode([16])
    with pytest.raises(ValueError, match="no NaN code"):
        FP4_E2M1.encode([np.nan])


@pytest.mark.parametrize("fmt", [f for f in SMALL_FLOATS if f.subnormals], ids=lambda f: f.name)
def test_float32_fast_paths_equal_field_path(fmt, rng):
    """float32 input takes the comparison (<= 15 midpoints) or the bit-pattern table path;
    both must equal the general field-by-field path on every probe value (and on the
    float32 neighbours of every table grid point near the format's range)."""
    x = probe_values(fmt, rng)
    if fmt._rne_lut32 is not None:
        shift = fmt._rne_lut32[0]
        lo = np.log2(fmt.min_value) - 2
        grid = (np.exp2(np.arange(lo, np.log2(fmt.max_value) + 2, 2.0 ** -6))).astype(np.float32)
        g = (grid.view(np.uint32) >> shift) << shift
        x = np.concatenate([x, g.view(np.float32), (g + 1).view(np.float32),
                            (g - 1).view(np.float32)])
    if not fmt.signed:
        x = np.abs(x)
    want = fmt._encode_general(x.astype(np.float64), rounding=Rounding.NEAREST_EVEN,
                               saturate=True)
    assert np.array_equal(fmt._encode_rne_table(x), want)
    assert np.array_equal(fmt.encode(x), want)
    with np.errstate(over="ignore"):  # beyond FP16: Inf, which saturates
        x16 = x.astype(np.float16)
    assert np.array_equal(fmt.encode(x16), fmt.encode(x16.astype(np.float64)))


# --------------------------------------------------------------------------- midpoints
def _exact_in(v: np.ndarray, dtype) -> np.ndarray:
    """Where ``v`` (float64) is exact in ``dtype`` and has a finite next value above."""
    with np.errstate(over="ignore"):
        d = v.astype(dtype)
        return (d.astype(np.float64) == v) & np.isfinite(np.nextafter(d, dtype(np.inf)))


def _either_side(v: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``v`` in ``dtype`` (kept where :func:`_exact_in`) and the next ``dtype`` values below
    and above it."""
    v = v[_exact_in(v, dtype)].astype(dtype)
    return v, np.nextafter(v, dtype(0)), np.nextafter(v, dtype(np.inf))


def _expected_side(rounding: Rounding, tie_up: np.ndarray):
    """Index offset (0: lower neighbour, 1: upper) of the result just below, at and just
    above a midpoint, by the definition of each rounding (not by the encoder)."""
    if rounding is Rounding.TOWARD_ZERO:
        return 0, np.zeros_like(tie_up), 0
    at = tie_up if rounding is Rounding.NEAREST_EVEN else np.ones_like(tie_up)
    return 0, at, 1


@pytest.mark.parametrize("fmt", [f for f in SMALL_FLOATS + [FP16]], ids=lambda f: f.name)
@pytest.mark.parametrize("rounding", list(Rounding), ids=lambda r: r.value)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16], ids=lambda d: d.__name__)
def test_every_midpoint_and_its_neighbours(fmt, rounding, dtype):
    """Each midpoint between neighbouring magnitudes, and the next value of the input dtype
    below and above it, both signs, by every rounding. ``floor(k + 0.5)`` in float64 once
    rounded the float64 value just below the first midpoint up (FP4 ``nextafter(0.25, 0)``
    gave 0.5)."""
    mags = fmt.finite_magnitudes
    mids = (mags[:-1] + mags[1:]) / 2.0
    idx = np.arange(len(mids))
    # Ties to even go to the even code; E8M0 (no mantissa bits) ties up, as ml_dtypes does.
    tie_up = ((idx + 1) % 2 == 0) if fmt.man_bits else np.ones(len(mids), bool)
    keep = _exact_in(mids, dtype)
    if not keep.any():
        pytest.skip(f"no {fmt.name} midpoint is exact in {np.dtype(dtype).name}")
    below_off, at_off, above_off = _expected_side(rounding, tie_up)
    at, below, above = _either_side(mids, dtype)
    lo, hi, i = mags[:-1][keep], mags[1:][keep], idx[keep]
    inside_b, inside_a = below > lo, above < hi  # strictly between the neighbours
    x = np.concatenate([below[inside_b], at, above[inside_a]])
    want = np.concatenate([i[inside_b] + below_off, i + at_off[keep], i[inside_a] + above_off])
    # The magnitude codes are 0..max_code in magnitude order (E8M0's code 0 is 2**-127).
    want = want.astype(np.int64)
    if fmt.signed:
        x = np.concatenate([x, -x])
        want = np.concatenate([want, want | fmt.sign_mask])
    got = fmt.encode(x, rounding=rounding).astype(np.int64)
    bad = got != want
    assert not bad.any(), (f"{fmt.name} {rounding.value} {np.dtype(dtype).name}: "
                           f"x={x[bad][:4]!r} got {got[bad][:4]} want {want[bad][:4]}")
    general = fmt._encode_general(x.astype(np.float64), rounding=rounding, saturate=True)
    assert np.array_equal(general.astype(np.int64), want)


@pytest.mark.parametrize("fmt", [INT4, INT5, INT6, INT8, UINT4, UINT8], ids=lambda f: f.name)
@pytest.mark.parametrize("rounding", list(Rounding), ids=lambda r: r.value)
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=lambda d: d.__name__)
def test_every_integer_midpoint_and_its_neighbours(fmt, rounding, dtype):
    """``k + 0.5`` for every in-range integer ``k``, and the next value of the input dtype
    below and above it, both signs (sign-magnitude rounding, then the clamp)."""
    k = np.arange(0, max(abs(fmt.min_int), fmt.max_int) + 1)
    at, below, above = _either_side(k + 0.5, dtype)
    tie_up = k % 2 == 1  # k + 0.5 ties to the even one of k, k + 1
    below_off, at_off, above_off = _expected_side(rounding, tie_up)
    x = np.concatenate([below, at, above]).astype(np.float64)
    mag = np.concatenate([k + below_off, k + at_off, k + above_off])
    x, mag = np.concatenate([x, -x]), np.concatenate([mag, -mag])
    want = np.clip(mag, fmt.min_int, fmt.max_int)
    got = fmt.decode(fmt.encode(x.astype(dtype), rounding=rounding))
    bad = got != want
    assert not bad.any(), f"{fmt.name} {rounding.value}: x={x[bad][:4]!r} got {got[bad][:4]}"
