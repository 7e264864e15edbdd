"""Property-based tests of the golden block formats (Hypothesis; issue 20).

For random shapes, dtypes (float16/32/64) and values drawn from every region a float can
be in (signed zeros, subnormals, the largest finite values, exact FP4 ties at any scale,
ordinary data), each format either refuses the input with a ValueError naming itself (and
only where the input is beyond the limit the format states) or returns codes and scales
whose dequantization, read back from the stored arrays alone, equals the output; the
output keeps every sign; re-quantizing the output gives it back where the format promises
that (MXFP4's power-of-two scales, lossless NestedFP16); no NumPy warning escapes. The
error metrics are checked against exact rational arithmetic at any magnitude.

Example counts are moderate (CI: 2 cores); ``HYPOTHESIS_PROFILE=thorough`` runs more.
"""
from __future__ import annotations

import io
import math
import os
import warnings
from fractions import Fraction

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is in the [dev] extra")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from mactile.golden import (FP4_E2M1, BlockFormat, InputError, NestedFP, QuantError,  # noqa: E402
                            Quantized, get_format)

settings.register_profile("ci", max_examples=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large])
settings.register_profile("thorough", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

#: The formats under test: every registered one with its defaults, and the named options
#: that change the arithmetic (the peers' conventions, other scale rules, selections).
SPECS = {
    "nvfp4": {}, "mxfp4": {}, "razer": {}, "razer-act": {}, "razer-g128": {},
    "dialectfp4": {}, "int-group": {}, "nestedfp": {}, "nestedfp8": {},
    "nvfp4/torchao": dict(name="nvfp4", convention="torchao"),
    "mxfp4/torchao-rceil": dict(name="mxfp4", convention="torchao"),
    "mxfp4/microxcaling": dict(name="mxfp4", convention="microxcaling"),
    "mxfp4/ceil": dict(name="mxfp4", mx_scale_rule="ceil"),
    "mxfp4/even": dict(name="mxfp4", mx_scale_rule="even"),
    "razer/2.5,9.5": dict(name="razer", special_values=(2.5, 9.5)),
    "dialectfp4/mse": dict(name="dialectfp4", select="mse", block_size=16),
    "int-group/8": dict(name="int-group", bits=8, block_size=32),
}


def make(key: str) -> BlockFormat:
    kw = dict(SPECS[key])
    name = kw.pop("name", key)
    return get_format(name, **kw)


#: FP4 values and the midpoints between neighbours (exact ties for the element rounding).
_FP4 = sorted(set(float(v) for v in FP4_E2M1.finite_magnitudes))
_TIES = [(a + b) / 2 for a, b in zip(_FP4, _FP4[1:])]


def elements(dtype: np.dtype):
    """Element values for ``dtype``: any finite float (Hypothesis favours the edges:
    signed zeros, subnormals, the extremes), FP4 values and ties at a random power of two,
    and values near one."""
    width = np.dtype(dtype).itemsize * 8
    fmax = float(np.finfo(dtype).max)
    any_float = st.floats(allow_nan=False, allow_infinity=False, width=width)
    e_lo, e_hi = np.finfo(dtype).minexp - np.finfo(dtype).nmant, np.finfo(dtype).maxexp - 4
    tie = st.builds(lambda v, e, s: s * math.ldexp(v, e), st.sampled_from(_FP4 + _TIES),
                    st.integers(e_lo, e_hi), st.sampled_from([1.0, -1.0]))
    normal = st.floats(-8.0, 8.0, width=width)
    return st.one_of(any_float, tie.filter(lambda v: abs(v) <= fmax), normal)


@st.composite
def inputs(draw, block_size: int):
    dtype = np.dtype(draw(st.sampled_from([np.float16, np.float32, np.float64])))
    rows = draw(st.integers(1, 3))
    blocks = draw(st.integers(1, max(1, min(3, 256 // block_size))))
    shape = (rows, blocks * block_size) if draw(st.booleans()) else (blocks * block_size,)
    # One magnitude region for the whole array, sometimes: blocks of only tiny or only
    # huge values are where scales clamp and metrics underflow.
    scale = draw(st.sampled_from([None, None, 1e-40, 1e-300, 1e30, 1e300]))
    x = draw(hnp.arrays(dtype, shape, elements=elements(dtype)))
    if scale is not None:
        with np.errstate(over="ignore", under="ignore"):
            x = (x.astype(np.float64) * scale).astype(dtype)
        x[~np.isfinite(x)] = 0
    return x


def refusal_is_legitimate(fmt: BlockFormat, x: np.ndarray, err: InputError) -> bool:
    """A refusal must name the format and be due to a limit the format states."""
    if not str(err).startswith(f"{fmt.name}:"):
        return False
    amax = float(np.max(np.abs(x.astype(np.float64))))
    lim = fmt.input_range()
    if lim is not None and amax >= lim[0]:
        return "is out of range" in str(err)
    if isinstance(fmt, NestedFP):  # the paper's eligibility rule, beyond FP16 included
        return "eligibility threshold" in str(err)
    return False


def stored_round_trip(q: Quantized) -> Quantized:
    """The Quantized rebuilt from its stored arrays only (through a .npz file)."""
    buf = io.BytesIO()
    q.save_npz(buf)
    buf.seek(0)
    with np.load(buf) as f:
        arrays = {k: f[k] for k in f.files}
    assert str(arrays["format"]) == q.format.describe()
    return Quantized(format=q.format, shape=tuple(int(n) for n in arrays["shape"]),
                     codes=arrays["codes"], scales=arrays.get("scales"),
                     meta=arrays.get("meta"),
                     tensor_scale=None if "tensor_scale" not in arrays
                     else np.float32(arrays["tensor_scale"]))


#: Formats whose dequantized output quantizes back to itself: power-of-two block scales
#: chosen from floor(log2 amax) (the output's block max stays in its input's binade, or
#: the scale clamps at the bottom either way), and NestedFP16, which is lossless.
FIXED_POINT = {"mxfp4", "mxfp4/microxcaling", "nestedfp"}


@pytest.mark.parametrize("key", sorted(SPECS))
def test_quantize_refuses_or_round_trips(key):
    fmt = make(key)

    @given(x=inputs(fmt.block_size))
    def check(x):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # any NumPy warning fails the example
            try:
                q = fmt.quantize(x)
            except InputError as e:
                assert refusal_is_legitimate(fmt, x, e), f"refused without cause: {e}"
                return
            lim = fmt.input_range()
            if lim is not None:
                assert float(np.max(np.abs(x.astype(np.float64)))) < lim[0]
            y = q.dequantize()
            assert y.dtype == np.float64 and y.shape == x.shape
            assert np.isfinite(y).all()
            # The stored bits alone give the output back, bit for bit (-0 included).
            y2 = stored_round_trip(q).dequantize()
            assert np.array_equal(y.view(np.int64), y2.view(np.int64))
            # No sign flips: a quantized value is zero or has its input's sign.
            xs = x.astype(np.float64)
            assert not np.any((y > 0) & (xs < 0)) and not np.any((y < 0) & (xs > 0))
            if key in FIXED_POINT:
                again = fmt.quantize(y.astype(x.dtype) if key == "nestedfp" else y)
                assert np.array_equal(again.dequantize(), y)
            e = q.error(x)  # the metrics never warn and never claim exactness falsely
            assert e.exact == bool(np.array_equal(xs, y))
            assert (e.mse == 0.0) == e.exact
    check()


def exact_mse_log10(x: np.ndarray, y: np.ndarray) -> float:
    """log10 of the mean squared difference, in exact rational arithmetic."""
    total = sum((Fraction(float(a)) - Fraction(float(b))) ** 2 for a, b in zip(x, y))
    if total == 0:
        return -math.inf
    total /= len(x)
    return math.log10(total.numerator) - math.log10(total.denominator)


pairs = st.integers(1, 24).flatmap(lambda n: st.tuples(
    hnp.arrays(np.float64, n, elements=st.floats(allow_nan=False, allow_infinity=False)),
    hnp.arrays(np.float64, n, elements=st.floats(allow_nan=False, allow_infinity=False))))


@given(pairs)
# Found by the thorough profile: x - y overflowed float64 (opposite signs near the largest
# float), and a four-digit mantissa read back at the edge of the tolerance.
@example((np.array([7.93650889e+297]), np.array([-1.79769313e+308])))
@example((np.zeros(21), np.r_[4.66540688e+246, np.zeros(20)]))
@example((np.full(4, 5e-324), np.zeros(4)))
def test_error_metrics_are_exact_at_any_magnitude(xy):
    """MSE and SQNR of any two finite arrays, from 5e-324 to 1.8e308 (squares of which
    under- or overflow float64), agree with exact rational arithmetic to 1e-9."""
    x, y = xy
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e = QuantError.between(x, y)
    want = exact_mse_log10(x, y)
    assert e.exact == (want == -math.inf)
    if e.exact:
        assert e.mse == 0.0 and e.mse_text == "0" and e.sqnr_db == math.inf
        return
    assert e.mse > 0.0 and math.isclose(e.mse_log10, want, rel_tol=0, abs_tol=1e-9)
    mant, _, exp = e.mse_text.partition("e")
    # four significant digits: a relative error up to 5e-4, 2.2e-4 in log10
    assert math.isclose(math.log10(float(mant)) + int(exp), want, abs_tol=2.5e-4)
    signal = exact_mse_log10(x, np.zeros_like(x))
    if signal > -math.inf:
        assert math.isclose(e.sqnr_db, 10 * (signal - want), abs_tol=1e-8)


def test_metrics_refuse_empty_arrays():
    with pytest.raises(ValueError, match=r"no elements to compare \(shape \(0, 16\)\)"):
        QuantError.between(np.zeros((0, 16)), np.zeros((0, 16)))


@pytest.mark.parametrize("key", sorted(SPECS))
def test_empty_arrays_quantize_without_warnings(key):
    fmt = make(key)
    for shape in [(0, fmt.block_size), (4, 0), (0,)]:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            q = fmt.quantize(np.zeros(shape, np.float32))
            assert q.dequantize().shape == shape
            with pytest.raises(ValueError, match="no elements"):
                q.error(np.zeros(shape, np.float32))
