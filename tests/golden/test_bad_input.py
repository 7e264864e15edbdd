"""Bad input to the golden block formats: a clear error that names the problem."""
from __future__ import annotations

import numpy as np
import pytest

from mactile.golden import (BLOCK_FORMATS, DialectFP4, InputError, IntGroup, RaZeR, RaZeRAct,
                            get_format)

ALL = sorted(BLOCK_FORMATS)


def fmt_of(name):
    return get_format(name)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("bad, word", [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "-inf")])
def test_non_finite_names_value_and_index(name, bad, word):
    x = np.zeros((3, 128), np.float32)
    x[2, 37] = bad
    x[2, 40] = bad
    with pytest.raises(InputError, match=rf"{name}: input holds {word} at index \(2, 37\) "
                                         r"\(2 non-finite value\(s\) in all\)"):
        fmt_of(name).quantize(x)


@pytest.mark.parametrize("name", [n for n in ALL if not n.startswith("nestedfp")])
def test_last_axis_not_divisible(name):
    fmt = fmt_of(name)
    x = np.zeros((2, fmt.block_size + 1), np.float32)
    with pytest.raises(InputError, match=rf"last axis has {fmt.block_size + 1} elements, not a "
                                         rf"multiple of the block size {fmt.block_size}"):
        fmt.quantize(x)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("x, what", [
    (np.arange(64, dtype=np.int32), "expected a floating-point array, got dtype int32"),
    (np.arange(64, dtype=np.uint8), "got dtype uint8"),
    (np.zeros(64, dtype=bool), "got dtype bool"),
    (np.zeros(64, dtype=np.complex64), "complex input"),
    (np.array(1.0, dtype=np.float32), "at least a 1-d array"),
    (np.array([object()] * 64), "got dtype object"),
])
def test_wrong_kind_of_array(name, x, what):
    with pytest.raises(InputError, match=what):
        fmt_of(name).quantize(x)


def test_unknown_format_and_options():
    with pytest.raises(ValueError, match=r"unknown format 'fp3'; known formats: dialectfp4, "
                                         r"int-group, mxfp4"):
        get_format("fp3")
    with pytest.raises(ValueError, match="unknown selection 'best'; choose two-stage or mse"):
        get_format("dialectfp4", select="best")
    with pytest.raises(ValueError, match="nvfp4 has no special values"):
        get_format("nvfp4", special_values=(5, 8))
    with pytest.raises(ValueError, match="razer takes two special magnitudes A,B; got 1"):
        get_format("razer", special_values=(5,))
    with pytest.raises(ValueError, match="razer-act takes one special magnitude A; got 2"):
        get_format("razer-act", special_values=(5, 8))
    with pytest.raises(ValueError, match="mxfp4 has no dialect selection"):
        get_format("mxfp4", select="mse")
    with pytest.raises(ValueError, match="fixed element width"):
        get_format("razer", bits=6)
    with pytest.raises(ValueError, match="has no blocks"):
        get_format("nestedfp", block_size=16)
    with pytest.raises(ValueError, match=r"block size must be one of \(16, 32, 64\), got 8"):
        get_format("dialectfp4", block_size=8)
    with pytest.raises(ValueError, match="bits must lie in"):
        IntGroup(bits=9)
    with pytest.raises(ValueError, match="block size must be positive"):
        get_format("nvfp4", block_size=0)


@pytest.mark.parametrize("v, what", [
    (5.25, "off the 0.5 grid"), (2.0, "out of range"), (10.0, "out of range"),
    (-5.0, "out of range"), (0.0, "out of range"), (float("nan"), "out of range"),
])
def test_special_values_checked(v, what):
    with pytest.raises(ValueError, match=what):
        RaZeR(special_values=(5.0, v))
    with pytest.raises(ValueError, match=what):
        RaZeRAct(special_value=v)
    with pytest.raises(ValueError, match=what):
        get_format("razer", special_values=(v, 8.0))


def test_razer_needs_two_specials():
    with pytest.raises(ValueError, match="exactly two special magnitudes"):
        RaZeR(special_values=(5.0, 6.0, 7.0))


def test_range_errors_name_the_problem():
    """Every format refuses values beyond its range the same way: the value, its index,
    the limit and why, and how many values are out of range."""
    x = np.zeros((1, 32), np.float32)
    x[0, 5] = 7e4
    with pytest.raises(InputError, match=r"dialectfp4: value 70000.0 at index \(0, 5\) is out "
                                         r"of range \(dialectfp4 takes \|x\| <= 65504: it "
                                         r"quantizes from FP16; 1 value\(s\) in all\)"):
        DialectFP4().quantize(x)
    y = np.zeros((1, 128), np.float32)
    y[0, 0] = 3e6
    y[0, 9] = -3e6
    with pytest.raises(InputError, match=r"int-group: value 3000000.0 at index \(0, 0\) is out "
                                         r"of range \(int-group takes \|x\| < 2031119.9: the "
                                         r"group scale amax/31 must be a finite FP16 value; 2 "
                                         r"value\(s\) in all\)"):
        IntGroup().quantize(y)


@pytest.mark.parametrize("name, limit", [("dialectfp4", 65520.0), ("int-group", None),
                                         ("mxfp4", 2.0 ** 130), ("nvfp4", 2.0 ** 128 - 2.0 ** 103)])
def test_range_limit_is_exact(name, limit):
    """The largest value below the limit quantizes to finite values; the limit is refused."""
    fmt = get_format(name)
    limit = limit or fmt.input_range()[0]
    assert fmt.input_range()[0] == limit
    x = np.zeros((1, fmt.block_size))
    x[0, 1] = -np.nextafter(limit, 0)
    assert np.isfinite(fmt.roundtrip(x)).all()
    x[0, 1] = -limit
    with pytest.raises(InputError, match=rf"{name}: value -.* at index \(0, 1\) is out of range"):
        fmt.quantize(x)


def test_dequantize_refuses_other_formats_tensor():
    q = get_format("nvfp4").quantize(np.zeros(16, np.float32))
    with pytest.raises(ValueError, match="cannot dequantize a nvfp4"):
        get_format("razer-act").dequantize(q)


@pytest.mark.parametrize("name", ["nvfp4", "razer", "razer-act", "razer-g128"])
def test_float64_beyond_fp32_range(name):
    """Golden bug found here: the FP32 pipelines turned |x| > FP32 max into NaN output
    (NVFP4, RaZeR-act) or an unrelated E3M3 error (RaZeR)."""
    if name not in BLOCK_FORMATS:
        pytest.skip(f"{name} is not in this branch's registry")
    fmt = get_format(name)
    x = np.zeros((2, fmt.block_size))
    x[1, 3] = -1e200
    with pytest.raises(InputError, match=rf"{name}: value -1e\+200 at index \(1, 3\) is out "
                                         rf"of range \({name} takes \|x\| <= 3.4028235e\+38: it "
                                         r"computes in FP32; 1 value\(s\) in all\)"):
        fmt.quantize(x)
    x[1, 3] = 3.4028235e38  # FP32's largest: fine
    assert np.isfinite(fmt.roundtrip(x)).all()
