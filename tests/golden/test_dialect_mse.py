"""The fixed-point MSE selector's golden model (golden/dialect_mse.py)."""
from fractions import Fraction

import numpy as np
import pytest

from mactile.golden.dialect import (FORMATBOOK, SE_BIAS, preprocess, quantize_index,
                                    select_mse)
from mactile.golden.dialect_mse import (MseFixedPoint, dialect_errors, fixed_magnitude,
                                        quantize_fixed_mse, select_fixed_mse)


def _blocks(rng, n=400, b=32):
    x = rng.standard_normal((n, b)) * rng.choice([1e-6, 1e-2, 1.0, 300.0], (n, 1))
    x[0] = 0.0
    x[1] = 6e-8                           # FP16 subnormals only
    x[2, 5] = -7.9                        # max rounds to 7.75 after scaling
    return x.astype(np.float16)


def test_frac_bits_2_is_mag_trunc(rng):
    x = _blocks(rng)
    se, mt, sg = preprocess(x)
    se2, mf, sg2 = fixed_magnitude(x, 2)
    np.testing.assert_array_equal(se, se2)
    np.testing.assert_array_equal(mt, mf)
    np.testing.assert_array_equal(sg, sg2)


@pytest.mark.parametrize("frac_bits", [2, 5, 8])
def test_fixed_magnitude_is_truncated_exact_magnitude(rng, frac_bits):
    x = _blocks(rng)
    se, mf, _ = fixed_magnitude(x, frac_bits)
    scaled = np.ldexp(np.abs(x.astype(np.float64)), -(np.maximum(se, 1) - SE_BIAS)[:, None])
    np.testing.assert_array_equal(mf, np.floor(np.ldexp(scaled, frac_bits)).astype(np.int64))
    assert mf.max() < 1 << (3 + frac_bits)


@pytest.mark.parametrize("frac_bits", [2, 4, 6, 8])
def test_index_from_fixed_point_equals_index_from_mag_trunc(rng, frac_bits):
    """Thresholds lie on the 0.25 grid, so truncation below it never moves an index."""
    x = _blocks(rng)
    _, mt, _ = preprocess(x)
    _, mf, _ = fixed_magnitude(x, frac_bits)
    for d in range(16):
        dd = np.full(len(x), d)
        np.testing.assert_array_equal(quantize_index(mf, dd, unit=1 << frac_bits),
                                      quantize_index(mt, dd))


def test_errors_match_a_rational_reference(rng):
    """Per-element truncation floor(e**2 * 2**G), computed with Fractions."""
    spec = MseFixedPoint(frac_bits=5, err_frac_bits=3)
    x = _blocks(rng, n=12, b=16)
    _, mf, _ = fixed_magnitude(x, spec.frac_bits)
    got = dialect_errors(mf, spec)
    for blk in range(len(x)):
        for d in range(16):
            total = 0
            for m in mf[blk]:
                v = Fraction(int(m), 1 << spec.frac_bits)
                cands = [Fraction(int(q), 2) for q in FORMATBOOK[d]]
                # nearest, ties to the larger value; clamped by construction
                best = max(cands, key=lambda c: (-abs(v - c), c))
                total += int((v - best) ** 2 * (1 << spec.err_frac_bits))  # floor (>= 0)
            assert got[blk, d] == total, (blk, d)


def test_untruncated_squares_agree_with_float(rng):
    spec = MseFixedPoint(frac_bits=6, err_frac_bits=12)
    x = _blocks(rng)
    _, mf, _ = fixed_magnitude(x, 6)
    err = dialect_errors(mf, spec)
    v = mf / 64.0
    for d in range(16):
        q = FORMATBOOK[d][quantize_index(mf, np.full(len(x), d), unit=64)] / 2.0
        np.testing.assert_array_equal(err[:, d] / 4096.0, ((v - q) ** 2).sum(axis=1))


def test_exact_when_every_element_is_in_the_max_binade(rng):
    """frac_bits=8 keeps every bit of elements sharing the maximum's exponent; with exact
    squares the choice equals the golden floating-point select_mse (ties: lower id)."""
    n, b = 3000, 32
    sig = rng.integers(0, 1024, (n, b))
    ef = np.full((n, b), 15)
    bits = (rng.integers(0, 2, (n, b)) << 15) | (ef << 10) | sig
    x = bits.astype(np.uint16).view(np.float16)
    se, dialect, codes, _ = quantize_fixed_mse(x, MseFixedPoint(frac_bits=8, err_frac_bits=16))
    scaled = np.abs(x.astype(np.float64)) / 2.0 ** (15 - SE_BIAS)
    np.testing.assert_array_equal(dialect, select_mse(scaled))
    np.testing.assert_array_equal(codes & 7, quantize_index(scaled, dialect, unit=1))


def test_argmin_ties_go_to_the_lower_id():
    errs = np.array([[5, 3, 3, 9] + [9] * 12, [0] * 16, [7] * 15 + [1]])
    np.testing.assert_array_equal(select_fixed_mse(errs), [1, 0, 15])


def test_widths_hold_at_the_extremes():
    """Clamp error just under 4.0 (magnitude 7.98 under a largest value of 4.0) and a
    block where every element sits there: the declared widths must hold."""
    spec = MseFixedPoint(frac_bits=8, err_frac_bits=16)
    mf = np.full((1, 64), (8 << 8) - 1)
    err = dialect_errors(mf, spec)
    abs_err = (8 << 8) - 1 - (8 << 7)
    assert abs_err < 1 << spec.abs_err_bits
    assert err.max() == 64 * abs_err ** 2 and err.max() < 1 << spec.sum_bits(64)


def test_codes_carry_signs_and_indices(rng):
    x = _blocks(rng)
    se, dialect, codes, errors = quantize_fixed_mse(x)
    _, mt, sg = preprocess(x)
    np.testing.assert_array_equal(codes >> 3, sg)
    np.testing.assert_array_equal(codes & 7, quantize_index(mt, dialect))
    np.testing.assert_array_equal(dialect, errors.argmin(axis=1))


@pytest.mark.parametrize("kw, exc, msg", [
    ({"frac_bits": 1}, ValueError, "frac_bits must be in 2..8, got 1"),
    ({"frac_bits": 9}, ValueError, "frac_bits must be in 2..8, got 9"),
    ({"frac_bits": 4, "err_frac_bits": 9}, ValueError, "err_frac_bits must be in 0..2*frac_bits = 8, got 9"),
    ({"err_frac_bits": -1}, ValueError, "err_frac_bits must be in 0..2*frac_bits"),
    ({"frac_bits": 4.0}, TypeError, "frac_bits must be an int"),
    ({"err_frac_bits": True}, TypeError, "err_frac_bits must be an int"),
])
def test_bad_widths_are_named(kw, exc, msg):
    with pytest.raises(exc, match=msg.replace("*", r"\*")):
        MseFixedPoint(**kw)


def test_bad_blocks_are_named():
    with pytest.raises(TypeError, match="2-d float16 array"):
        fixed_magnitude(np.zeros((2, 32)), 4)
    with pytest.raises(TypeError, match="2-d float16 array"):
        fixed_magnitude(np.zeros(32, np.float16), 4)
