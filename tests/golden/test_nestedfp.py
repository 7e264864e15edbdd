"""NestedFP split/merge over all 65,536 FP16 bit patterns, and the eligibility rule.

Facts established exhaustively here (FIGURES.md states the first two):

* split refuses exactly the words with bit 14 set (|w| >= 2, Inf, NaN);
* merge(split(a)) == a for exactly the words with |w| < 1.9375 (every one of them, both
  signs, zeros and subnormals included), and for none of the 128 words in [1.9375, 2);
* the upper byte is a valid (non-NaN) E4M3 code for every |w| < 1.875, and there it is the
  saturating round-to-nearest-even E4M3 code of 256 * w (the golden E4M3 encoder, itself
  checked against ml_dtypes); it is the NaN code for |w| in [1.875, 1.9375), and above that
  the rounding increment carries into the sign bit.
"""
from __future__ import annotations

import numpy as np
import pytest

import reference_impl as ref  # tests/golden is on sys.path (pytest rootdir-less module)
from mactile.golden import (FP8_E4M3, InputError, NestedFP, NestedFP8, get_format,
                            nestedfp_eligible, nestedfp_merge, nestedfp_split)
from mactile.golden.nestedfp import AUTHORS_THRESHOLD, PAPER_THRESHOLD

WORDS = np.arange(1 << 16, dtype=np.uint16)
VALUES = WORDS.view(np.float16).astype(np.float64)
SPLITTABLE = (WORDS & 0x4000) == 0


def test_split_refuses_exactly_bit14_words():
    assert np.array_equal(SPLITTABLE, ~(np.abs(VALUES) >= 2) & ~np.isnan(VALUES))
    for w in WORDS[~SPLITTABLE][::997]:
        with pytest.raises(ValueError, match="exponent MSB"):
            nestedfp_split(np.array([w], np.uint16))


def test_split_matches_reference_on_every_word():
    upper, lower = nestedfp_split(WORDS[SPLITTABLE])
    want = np.array([ref.nestedfp_split_word(int(a)) for a in WORDS[SPLITTABLE]], np.uint8)
    assert np.array_equal(upper, want[:, 0]) and np.array_equal(lower, want[:, 1])
    # float16 input is the same as its bit patterns
    u16, l16 = nestedfp_split(WORDS[SPLITTABLE].view(np.float16))
    assert np.array_equal(u16, upper) and np.array_equal(l16, lower)


def test_merge_matches_reference_on_every_byte_pair():
    u, lo = np.meshgrid(np.arange(256, dtype=np.uint8), np.arange(256, dtype=np.uint8))
    got = nestedfp_merge(u.ravel(), lo.ravel())
    want = [ref.nestedfp_merge_word(int(a), int(b)) for a, b in zip(u.ravel(), lo.ravel())]
    assert np.array_equal(got, np.array(want, np.uint16))


def test_reconstruction_set_is_exactly_below_1_9375():
    a = WORDS[SPLITTABLE]
    mag = np.abs(VALUES[SPLITTABLE])
    back = nestedfp_merge(*nestedfp_split(a))
    exact = back == a
    assert np.array_equal(exact, mag < 1.9375)
    assert int((~exact).sum()) == 128  # [1.9375, 2) in both signs: 2 * 64 words
    assert mag[exact].max() == 1.9365234375


def test_upper_byte_is_e4m3_of_256w_below_1_875():
    a = WORDS[SPLITTABLE]
    mag = np.abs(VALUES[SPLITTABLE])
    upper, _ = nestedfp_split(a)
    is_nan = np.isin(upper, FP8_E4M3.nan_codes)
    assert np.array_equal(is_nan, (mag >= 1.875) & (mag < 1.9375))
    # From 1.9375 on the rounding increment carries out of the 7-bit field into the sign
    # bit (an 8-bit incrementer): the byte is garbage there, and merge fails (see above).
    assert ((upper[mag >= 1.9375] & 0x7F) == 0).all()
    ok = mag < 1.875
    want = FP8_E4M3.encode(256.0 * VALUES[SPLITTABLE][ok])
    assert np.array_equal(upper[ok], want)
    # The one exception to plain RNE: exponent 15 / mantissa 0b110 never rounds up (it
    # would make the NaN code); RNE with saturation gives the same codes.
    w = np.float16([1.75 + 2.0 ** -10 * 65, 1.8740234375])  # dropped bits > half
    assert list(nestedfp_split(w)[0]) == [0x7E, 0x7E]


def test_nestedfp8_reads_upper_byte_times_2_pow_minus_8():
    w = VALUES[SPLITTABLE & (np.abs(VALUES) <= PAPER_THRESHOLD)].astype(np.float16)
    q = NestedFP8().quantize(w)
    assert np.array_equal(q.dequantize(), FP8_E4M3.values[q.codes.reshape(-1)] * 2.0 ** -8)
    assert np.array_equal(q.dequantize(), FP8_E4M3.quantize(256.0 * w.astype(np.float64)) / 256)


@pytest.mark.parametrize("threshold", [PAPER_THRESHOLD, AUTHORS_THRESHOLD, 1.9365])
def test_nestedfp_format_is_lossless_on_every_eligible_word(threshold):
    mag = np.abs(VALUES)
    w = VALUES[SPLITTABLE & (mag <= threshold)].astype(np.float16)
    fmt = NestedFP(threshold=threshold)
    q = fmt.quantize(w)
    back = q.dequantize()
    assert back.dtype == np.float64
    assert np.array_equal(back.astype(np.float16).view(np.uint16), w.view(np.uint16))  # -0 too
    assert q.scales is None and q.codes.dtype == np.uint8 and q.meta.dtype == np.uint8
    # float32 input is rounded to FP16 first (RNE)
    x32 = np.float32([0.1, -1.3, 1e-6, 1.75])
    assert np.array_equal(fmt.roundtrip(x32), x32.astype(np.float16).astype(np.float64))


def test_eligibility_rule():
    assert nestedfp_eligible(np.float16([1.75, -1.75, 0.0]))
    assert not nestedfp_eligible(np.float16([1.7509765625]))  # next FP16 after 1.75
    assert nestedfp_eligible(np.float16([1.8]), threshold=AUTHORS_THRESHOLD)
    assert not nestedfp_eligible(np.float16([1.8203125]), threshold=AUTHORS_THRESHOLD)
    # The rule reads the FP16-rounded values: 1.7502 rounds to 1.75.
    assert nestedfp_eligible(np.float32([1.7502]))
    mag = np.abs(VALUES[np.isfinite(VALUES)])
    elig = np.array([nestedfp_eligible(np.float16([v])) for v in mag[::61]])
    assert np.array_equal(elig, mag[::61] <= PAPER_THRESHOLD)


def test_ineligible_tensor_is_refused_with_its_index():
    x = np.zeros((3, 4), np.float32)
    x[2, 1] = -1.76
    with pytest.raises(InputError, match=r"\|w\| = 1\.7599.* exceeds the eligibility threshold 1.75"):
        NestedFP().quantize(x)
    with pytest.raises(InputError, match="exceeds the eligibility threshold"):
        get_format("nestedfp8").quantize(np.float32([1e5]))  # beyond FP16 too


@pytest.mark.parametrize("bad", [0.0, -1.0, 1.9375, 2.0])
def test_threshold_validation(bad):
    with pytest.raises(ValueError, match=r"threshold must lie in \(0, 1.9375\)"):
        NestedFP(threshold=bad)
