"""Hostile numerics of the golden API: the sign of zero under every format and option,
option kinds, and array kinds that cannot be quantized as given.

The sign of zero follows each format's element encoding (docs/formats.md, "negative
zero"): a format whose elements have a -0 code keeps a -0.0 input as -0.0 under
``negative_zero=keep`` (the default), in every block, including a block whose scale is 0;
``positive`` and ``positive-after-scaling`` give +0.0; two's-complement integers (int-group,
mxint8) have one zero, +0; RaZeR's zero is its 0b1000 code (0b0000 is the special value),
-0.0 for both signs. Before: an NVFP4 block of scale 0 gave +0.0 under ``keep`` (all -0,
or -0 beside values too small for its block scale), where MXFP4 and every other float
format kept -0.
"""
from __future__ import annotations

import numpy as np
import pytest

from mactile.golden import InputError, get_format

#: (id, get_format arguments, sign of a -0.0 input's output: True = -0.0)
KEEPS = [
    ("nvfp4", dict(name="nvfp4"), True),
    ("nvfp4-keep", dict(name="nvfp4", negative_zero="keep"), True),
    ("nvfp4-positive", dict(name="nvfp4", negative_zero="positive"), False),
    ("nvfp4-positive-after-scaling", dict(name="nvfp4", negative_zero="positive-after-scaling"),
     False),
    ("nvfp4-no-tensor-scale", dict(name="nvfp4", tensor_scale=False), True),
    ("nvfp4-reciprocal", dict(name="nvfp4", element_scaling="reciprocal"), True),
    ("nvfp4-sequential", dict(name="nvfp4", scale_argument="sequential"), True),
    ("nvfp4-fp32-dequantize", dict(name="nvfp4", dequantize="fp32"), True),
    ("nvfp4-away", dict(name="nvfp4", element_ties="away"), True),
    ("nvfp4-torchao", dict(name="nvfp4", convention="torchao"), True),
    ("nvfp4-torchao-positive", dict(name="nvfp4", convention="torchao",
                                    negative_zero="positive"), False),
    ("mxfp4", dict(name="mxfp4"), True),
    ("mxfp4-positive", dict(name="mxfp4", negative_zero="positive"), False),
    ("mxfp4-positive-after-scaling", dict(name="mxfp4", negative_zero="positive-after-scaling"),
     False),
    ("mxfp4-torchao", dict(name="mxfp4", convention="torchao"), True),
    ("mxfp4-microxcaling", dict(name="mxfp4", convention="microxcaling"), False),
    ("mxfp4-ceil", dict(name="mxfp4", mx_scale_rule="ceil"), True),
    ("dialectfp4", dict(name="dialectfp4"), True),
    ("dialectfp4-mse", dict(name="dialectfp4", select="mse"), True),
    ("nestedfp", dict(name="nestedfp"), True),
    ("nestedfp8", dict(name="nestedfp8"), True),
    ("mxfp8-e4m3", dict(name="mxfp8-e4m3"), True),
    ("mxfp8-e5m2", dict(name="mxfp8-e5m2"), True),
    ("mxfp6-e3m2", dict(name="mxfp6-e3m2"), True),
    ("mxfp6-e2m3", dict(name="mxfp6-e2m3"), True),
    ("int-group", dict(name="int-group"), False),
    ("int-group-8", dict(name="int-group", bits=8, block_size=32), False),
    ("mxint8", dict(name="mxint8"), False),
    ("razer", dict(name="razer"), True),
    ("razer-act", dict(name="razer-act"), True),
    ("razer-g128", dict(name="razer-g128"), True),
]
RAZER = {"razer", "razer-act", "razer-g128"}


def _fmt(kw):
    kw = dict(kw)
    return get_format(kw.pop("name"), **kw)


def _pattern(kind: str, bs: int) -> np.ndarray:
    """A (1, n) float32 row with -0.0 entries laid out as ``kind`` says (n a multiple of
    128 and of the block size); values at most 1.5 (NestedFP's eligibility is 1.75)."""
    n = max(128, bs)
    x = np.linspace(0.25, 1.5, n, dtype=np.float32)
    if kind == "all":  # every value -0
        x[:] = -0.0
    elif kind == "block":  # the first block all -0, the others non-zero
        x[:bs] = -0.0
    elif kind == "mixed":  # -0 among non-zero values in one block
        x[1:max(bs, 16):2] = -0.0
    elif kind == "scale-zero":  # -0 beside values far too small for any block scale
        x[:bs] = np.float32(1e-38)
        x[:bs:2] = -0.0
        x[bs:] = 1e3
    return x[None, :]


@pytest.mark.parametrize("kind", ["all", "block", "mixed", "scale-zero"])
@pytest.mark.parametrize("kw, negative", [c[1:] for c in KEEPS], ids=[c[0] for c in KEEPS])
def test_sign_of_zero_follows_the_format(kw, negative, kind):
    f = _fmt(kw)
    x = _pattern(kind, f.block_size)
    if kind == "scale-zero" and kw["name"] in ("nestedfp", "nestedfp8"):
        x = np.where(np.abs(x) > 1.5, np.float32(1.0), x)
    q = f.quantize(x)
    y = q.dequantize()
    neg0 = (x == 0) & np.signbit(x)
    assert neg0.any()
    assert (y[neg0] == 0).all()
    signs = np.signbit(y[neg0])
    assert signs.all() if negative else not signs.any(), (
        f"{f.describe()}: {int(signs.sum())} of {int(neg0.sum())} -0.0 inputs kept their sign")
    # The same bits come back through the format's own stored codes (the sign is the code's).
    assert np.array_equal(np.signbit(f.quantize(x).dequantize()), np.signbit(y))


@pytest.mark.parametrize("kw", [c[1] for c in KEEPS if c[1]["name"] not in RAZER],
                         ids=[c[0] for c in KEEPS if c[1]["name"] not in RAZER])
def test_positive_zero_stays_positive(kw):
    f = _fmt(kw)
    x = _pattern("block", f.block_size)
    x = np.abs(x)
    y = f.quantize(x).dequantize()
    assert not np.signbit(y[x == 0]).any()


@pytest.mark.parametrize("opt, want", [("keep", True), ("positive", True),
                                       ("positive-after-scaling", False)])
@pytest.mark.parametrize("name", ["nvfp4", "mxfp4"])
def test_negatives_below_a_zero_scale_are_signed_like_any_underflow(name, opt, want):
    """A negative element of a block whose scale rounds to 0 is an underflow: -0 under
    keep and positive (only -0.0 inputs are made +0 there), +0 after scaling."""
    f = get_format(name, negative_zero=opt)
    bs = f.block_size
    x = np.full((1, 4 * bs), 1e3, np.float32)
    x[0, :bs] = -1e-38
    if name == "mxfp4":  # a per-block scale: FP32 underflow of x / 2**98 needs a 2**100
        x[0, :bs] = -1e-45
        x[0, 0] = 2.0 ** 100
    y = f.quantize(x).dequantize()[0, 1:bs]
    assert (y == 0).all() and np.signbit(y).all() == want


# ------------------------------------------------------------------------ option kinds
BAD_OPTIONS = [
    ("tensor-scale-str", "nvfp4", dict(tensor_scale="off"), ValueError,
     r"tensor_scale must be True or False, got 'off'"),
    ("tensor-scale-int", "nvfp4", dict(tensor_scale=1), ValueError,
     r"tensor_scale must be True or False, got 1"),
    ("tensor-scale-none", "nvfp4", dict(tensor_scale=None), ValueError,
     r"tensor_scale must be True or False, got None"),
    ("block-size-bool", "nvfp4", dict(block_size=True), TypeError,
     r"block size must be an integer, got True \(bool\)"),
    ("block-size-float", "mxfp4", dict(block_size=32.0), TypeError,
     r"block size must be an integer, got 32.0"),
    ("block-size-str", "int-group", dict(block_size="128"), TypeError,
     r"block size must be an integer, got '128' \(str\)"),
    ("block-size-zero", "nvfp4", dict(block_size=0), ValueError, r"must be positive, got 0"),
    ("block-size-negative", "razer", dict(block_size=-16), ValueError,
     r"must be positive, got -16"),
    ("negative-zero-case", "nvfp4", dict(negative_zero="Keep"), ValueError,
     r"unknown negative_zero 'Keep'; choose keep, positive, positive-after-scaling"),
    ("negative-zero-set", "mxfp4", dict(negative_zero={"keep"}), ValueError,
     r"unknown negative_zero \{'keep'\}"),
    ("negative-zero-bool", "mxfp4", dict(negative_zero=False), ValueError,
     r"unknown negative_zero False"),
    ("element-ties-bool", "nvfp4", dict(element_ties=True), ValueError,
     r"unknown element_ties True; choose even, away"),
    ("convention-list", "nvfp4", dict(convention=["ocp"]), TypeError,
     r"convention must be a preset name \(ocp, torchao, microxcaling\), got \['ocp'\] \(list\)"),
    ("convention-set", "mxfp4", dict(convention={"ocp"}), TypeError,
     r"convention must be a preset name .*\(set\)"),
    ("convention-case", "nvfp4", dict(convention="OCP"), ValueError,
     r"unknown convention 'OCP'; choose ocp, torchao, microxcaling"),
    ("floor-nan", "nvfp4", dict(block_scale_floor=float("nan")), ValueError,
     r"block_scale_floor must be an E4M3 value in \[0, 448\]"),
    ("floor-inf", "nvfp4", dict(block_scale_floor=float("inf")), ValueError,
     r"block_scale_floor must be an E4M3 value"),
    ("floor-bool", "nvfp4", dict(block_scale_floor=True), ValueError,
     r"block_scale_floor must be a number, got True"),
    ("unknown-option-nvfp4", "nvfp4", dict(rounding="even"), ValueError,
     r"nvfp4: unknown option\(s\) rounding; get_format takes block_size"),
    ("unknown-option-nestedfp", "nestedfp", dict(threshold=2.0), ValueError,
     r"nestedfp: unknown option\(s\) threshold; get_format takes block_size"),
    ("unknown-option-razer-act", "razer-act", dict(special_value=4.0), ValueError,
     r"razer-act: unknown option\(s\) special_value; get_format takes block_size, "
     r"special_values"),
    ("convention-option-elsewhere", "dialectfp4", dict(element_ties="away"), ValueError,
     r"dialectfp4 has no convention options"),
    ("bits-bool", "int-group", dict(bits=True), TypeError,
     r"bits must be an integer, got True \(bool\)"),
    ("bits-float", "int-group", dict(bits=6.0), TypeError, r"bits must be an integer, got 6.0"),
    ("bits-str", "int-group", dict(bits="6"), TypeError, r"bits must be an integer, got '6'"),
    ("bits-too-few", "int-group", dict(bits=1), ValueError, r"bits must lie in \[2, 8\], got 1"),
    ("bits-too-many", "int-group", dict(bits=64), ValueError,
     r"bits must lie in \[2, 8\], got 64"),
    ("bits-elsewhere", "nvfp4", dict(bits=4), ValueError,
     r"nvfp4 has a fixed element width"),
    ("special-values-str", "razer", dict(special_values="5,8"), TypeError,
     r"special_values must be a sequence of numbers, got '5,8'"),
    ("special-values-str-item", "razer", dict(special_values=(5, "8")), TypeError,
     r"special_values must be numbers, got '8' \(str\)"),
    ("special-values-bool-item", "razer", dict(special_values=(True, 8)), TypeError,
     r"special_values must be numbers, got True \(bool\)"),
    ("special-values-set", "razer", dict(special_values={5.0, 8.0}), TypeError,
     r"special_values must be an ordered pair"),
    ("special-values-nan", "razer", dict(special_values=(float("nan"), 8)), ValueError,
     r"special value nan is out of range: magnitudes must lie in \[2.5, 9.5\]"),
    ("special-values-inf", "razer-g128", dict(special_values=(5, float("inf"))), ValueError,
     r"special value inf is out of range"),
    ("special-values-negative", "razer", dict(special_values=(-5, 8)), ValueError,
     r"special value -5.0 is out of range"),
    ("special-values-one", "razer", dict(special_values=(5,)), ValueError,
     r"razer takes two special magnitudes A,B; got 1"),
    ("special-values-three", "razer-g128", dict(special_values=(5, 8, 9)), ValueError,
     r"razer-g128 takes two special magnitudes A,B; got 3"),
    ("special-value-two-for-act", "razer-act", dict(special_values=(5, 8)), ValueError,
     r"razer-act takes one special magnitude A; got 2"),
    ("special-values-elsewhere", "mxfp4", dict(special_values=(5, 8)), ValueError,
     r"mxfp4 has no special values"),
    ("select-case", "dialectfp4", dict(select="MSE"), ValueError,
     r"unknown selection 'MSE'; choose two-stage or mse"),
    ("select-int", "dialectfp4", dict(select=1), ValueError, r"unknown selection 1"),
    ("select-elsewhere", "nvfp4", dict(select="mse"), ValueError,
     r"nvfp4 has no dialect selection"),
    ("block-for-nestedfp", "nestedfp", dict(block_size=16), ValueError,
     r"nestedfp has no blocks"),
]


@pytest.mark.parametrize("name, kw, exc, pattern", [c[1:] for c in BAD_OPTIONS],
                         ids=[c[0] for c in BAD_OPTIONS])
def test_option_kinds_are_refused_by_name(name, kw, exc, pattern):
    with pytest.raises(exc, match=pattern):
        get_format(name, **kw)


@pytest.mark.parametrize("name", [None, "NVFP4", " nvfp4", b"nvfp4", 4])
def test_unknown_format_names(name):
    with pytest.raises(ValueError, match=r"unknown format .*; known formats: dialectfp4"):
        get_format(name)


def test_numpy_scalars_are_accepted_for_options():
    """NumPy scalars are Python numbers to the API (np.True_ for a bool option too)."""
    f = get_format("nvfp4", tensor_scale=np.False_, block_size=np.int64(16))
    assert f.saturation_limit() == 2688.0 and f.block_size == 16
    assert type(f.convention.tensor_scale) is bool


# ------------------------------------------------------------------------ array kinds
BAD_ARRAYS = [
    ("strings", lambda n: np.array([["1.0"] * n]), r"expected a floating-point array, got "
     r"dtype <U3"),
    ("bools", lambda n: np.ones((1, n), bool), r"expected a floating-point array, got dtype bool"),
    ("objects", lambda n: np.array([[1.0] * n], object), r"got dtype object"),
    ("int64", lambda n: np.full((1, n), 2 ** 62, np.int64), r"got dtype int64; convert integers"),
    ("uint8", lambda n: np.ones((1, n), np.uint8), r"got dtype uint8"),
    ("complex", lambda n: np.ones((1, n), complex), r"complex input \(dtype complex128\) is "
     r"not supported"),
    ("datetime", lambda n: np.zeros((1, n), "datetime64[D]"), r"got dtype datetime64\[D\]"),
    ("structured", lambda n: np.zeros((1, n), dtype=[("a", "f4")]), r"got dtype \[\('a'"),
    ("none", lambda n: None, r"got dtype object"),
    ("scalar", lambda n: np.float32(1.0), r"expected at least a 1-d array, got a scalar"),
    ("ragged", lambda n: np.ones((1, n - 1), np.float32), r"not a multiple of the block size"),
    ("nan", lambda n: np.r_[np.ones(n - 1), np.nan][None], r"input holds NaN at index "
     r"\(0, \d+\) \(1 non-finite value\(s\) in all\)"),
    ("inf", lambda n: np.r_[-np.inf, np.ones(n - 1)][None], r"input holds -inf at index \(0, 0\)"),
    ("masked", lambda n: np.ma.masked_array(np.ones((1, n)), mask=np.r_[True, [False] * (n - 1)]),
     r"a masked array with 1 masked value\(s\); the mask would be ignored"),
]
ARRAY_FORMATS = ["nvfp4", "mxfp4", "razer", "razer-g128", "dialectfp4", "int-group", "nestedfp",
                 "mxint8"]


@pytest.mark.parametrize("name", ARRAY_FORMATS)
@pytest.mark.parametrize("make, pattern", [c[1:] for c in BAD_ARRAYS], ids=[c[0] for c in BAD_ARRAYS])
def test_array_kinds_are_refused_before_any_cast(name, make, pattern):
    f = get_format(name)
    n = max(128, f.block_size)
    if "block size" in pattern and f.block_size == 1:
        pytest.skip("a block of one divides every length")
    with pytest.raises(InputError, match=rf"^{name}: (.*)?" + pattern):
        f.quantize(make(n))


def test_a_masked_array_without_masked_values_is_its_data():
    x = np.ma.masked_array(np.linspace(-1, 1, 32)[None], mask=False)
    assert np.array_equal(get_format("mxfp4").roundtrip(x), get_format("mxfp4").roundtrip(x.data))
