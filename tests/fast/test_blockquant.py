"""mactile.fast.quantize against the golden NVFP4/MXFP4 quantizers: every float32 class
of the FP4 table, every block-scale code with its ties and neighbours, every convention,
random tensors; compared with array_equal (atol 0), and the golden errors unchanged."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from mactile import fast
from mactile.fast.blockquant import _SHIFT, fp4_codes
from mactile.golden import MXFP4, NVFP4, RaZeR
from mactile.golden.block import InputError
from mactile.golden.conventions import (Convention, Dequantization, ElementScaling, ElementTies,
                                        MXScaleRule, NegativeZero, ScaleArgument)
from mactile.golden.elements import E8M0, FP4_E2M1, FP8_E4M3
from mactile.golden.fp4blocks import _encode_fp4

F32 = np.float32


def _nvfp4_conventions():
    opts = itertools.product((True, False), (0.0, 2.0 ** -6), ScaleArgument, ElementScaling,
                             Dequantization, ElementTies, NegativeZero)
    return [Convention(tensor_scale=t, block_scale_floor=f, scale_argument=a, element_scaling=e,
                       dequantize=d, element_ties=ti, negative_zero=nz)
            for t, f, a, e, d, ti, nz in opts]


def _mxfp4_conventions():
    return [Convention(mx_scale_rule=r, element_ties=t, negative_zero=nz)
            for r, t, nz in itertools.product(MXScaleRule, ElementTies, NegativeZero)]


NV_CONVS = _nvfp4_conventions()
MX_CONVS = _mxfp4_conventions()


def assert_same(fmt, x):
    g = fmt.quantize(x)
    f = fast.quantize(fmt, x)
    assert f.format == g.format and f.shape == g.shape
    np.testing.assert_array_equal(f.codes, g.codes)
    assert f.codes.dtype == g.codes.dtype
    np.testing.assert_array_equal(f.scales, g.scales)
    assert f.scales.dtype == g.scales.dtype
    if g.tensor_scale is None:
        assert f.tensor_scale is None
    else:
        assert f.tensor_scale.dtype == g.tensor_scale.dtype
        assert f.tensor_scale.tobytes() == g.tensor_scale.tobytes()
    return g


# ------------------------------------------------------------ the element table
def _class_members() -> np.ndarray:
    """Every float32 class of the FP4 table (sign, exponent, top mantissa bits, sticky):
    the grid point itself and, for the sticky class, its smallest, largest and a middle
    member; NaN left out (never scaled into)."""
    grid = np.arange(1 << (32 - _SHIFT), dtype=np.uint64) << np.uint64(_SHIFT)
    top = np.uint64((1 << _SHIFT) - 1)
    bits = np.concatenate([grid, grid + 1, grid + top, grid + (top >> np.uint64(1))])
    x = bits.astype(np.uint32).view(F32)
    return x[~np.isnan(x)]


def test_every_float32_class_encodes_as_the_golden_encoder():
    x = _class_members()
    assert x.size > 8000 and np.isinf(x).sum() == 2 and (x == 0).sum() == 2
    for ties, nz in itertools.product(ElementTies, NegativeZero):
        conv = Convention(element_ties=ties, negative_zero=nz)
        want = _encode_fp4(x.copy(), x, conv)
        got = fp4_codes(x.copy(), x.view(np.uint32), ties, nz)
        np.testing.assert_array_equal(got, want, err_msg=f"{ties} {nz}")


def test_every_fp4_value_tie_and_neighbour():
    mags = FP4_E2M1.finite_magnitudes.astype(F32)
    mids = ((mags[:-1].astype(np.float64) + mags[1:]) / 2).astype(F32)
    pts = np.concatenate([mags, mids, [F32(7.0), F32(1e30), np.finfo(F32).max,
                                       np.finfo(F32).tiny, F32(1e-45)]])
    with np.errstate(over="ignore"):  # FP32 max's next value up is Inf: saturates too
        near = np.concatenate([pts, np.nextafter(pts, F32(np.inf)), np.nextafter(pts, F32(0))])
    x = np.concatenate([near, -near]).astype(F32)
    for ties in ElementTies:
        want = _encode_fp4(x.copy(), x, Convention(element_ties=ties))
        got = fp4_codes(x.copy(), x.view(np.uint32), ties, NegativeZero.KEEP)
        np.testing.assert_array_equal(got, want)
    # the ties themselves: even rounds 0.25 down, 0.75 up; away rounds both up
    even = fp4_codes(mids.copy(), mids.view(np.uint32), ElementTies.EVEN, NegativeZero.KEEP)
    away = fp4_codes(mids.copy(), mids.view(np.uint32), ElementTies.AWAY, NegativeZero.KEEP)
    assert even.tolist() == [0, 2, 2, 4, 4, 6, 6] and away.tolist() == [1, 2, 3, 4, 5, 6, 7]


# ------------------------------------------------------------ block scales, conventions
def _nvfp4_corner_tensor(bs: int = 16) -> np.ndarray:
    """One block per positive E4M3 code value ``s`` (and per E4M3 midpoint and its float32
    neighbours): the block maximum ``6 * s * f``, the rest ``s`` times every FP4 magnitude,
    midpoint and neighbour, both signs; plus all-zero, -0, tiny and huge blocks."""
    s_vals = FP8_E4M3.finite_magnitudes[1:]
    s_mids = (s_vals[:-1] + s_vals[1:]) / 2
    anchors = np.concatenate([s_vals, s_mids, np.nextafter(s_mids.astype(F32), F32(0)),
                              np.nextafter(s_mids.astype(F32), F32(np.inf))]).astype(np.float64)
    mags = FP4_E2M1.finite_magnitudes
    mids = (mags[:-1] + mags[1:]) / 2
    rest = np.concatenate([mags, mids])  # 15 values
    rows = []
    for a in anchors:
        row = np.empty(bs)
        row[0] = 6.0 * a
        row[1:] = np.resize(rest * a * np.where(np.arange(rest.size) % 2, -1.0, 1.0), bs - 1)
        rows.append(row)
    rows = np.asarray(rows, dtype=F32)
    near = np.nextafter(rows, F32(np.inf)) * F32(1.0)
    special = np.zeros((5, bs), dtype=F32)
    special[1, :] = -0.0
    special[2, :3] = [1e-45, -1e-45, 2e-38]
    special[3, :2] = [np.finfo(F32).max, -1.0]
    special[4, ::2] = -0.0
    return np.concatenate([rows, near, special])


@pytest.mark.parametrize("conv", NV_CONVS, ids=lambda c: c.label("nvfp4"))
def test_nvfp4_every_convention_on_the_scale_corners(conv):
    x = _nvfp4_corner_tensor()
    fmt = NVFP4(convention=conv)
    assert_same(fmt, x)  # one tensor: the tensor scale maps the largest block to 448 * 6
    assert_same(fmt, x[:-2])  # without the FP32-range block: E4M3 subnormal block scales
    for k in range(0, x.shape[0] - 5, 97):  # tensors of one block: each its own tensor scale
        assert_same(fmt, x[k:k + 1])


def _mx_corner_tensor(bs: int = 32) -> np.ndarray:
    """Blocks whose maximum is each power of two of float32's range, its FP4 rounding
    boundaries (1.75 * 2**e, the even rule's tie) and their neighbours; elements at every
    FP4 magnitude, midpoint and neighbour of that scale."""
    e = np.arange(-149, 128)
    base = np.ldexp(1.0, e)
    heads = np.concatenate([base, 1.5 * base, 1.75 * base, 1.875 * base])
    heads = heads[(heads < np.finfo(F32).max) & (heads > 0)].astype(F32)
    heads = np.concatenate([heads, np.nextafter(heads, F32(0)), np.nextafter(heads, F32(np.inf))])
    mags = FP4_E2M1.finite_magnitudes
    rest = np.concatenate([mags, (mags[:-1] + mags[1:]) / 2]) / 6.0
    rows = np.empty((heads.size, bs), dtype=F32)
    rows[:, 0] = heads
    frac = np.resize(np.concatenate([rest, -rest]), bs - 1)
    with np.errstate(under="ignore"):
        rows[:, 1:] = (heads[:, None].astype(np.float64) * frac[None, :]).astype(F32)
    zeros = np.zeros((2, bs), dtype=F32)
    zeros[1] = -0.0
    return np.concatenate([rows, zeros])


@pytest.mark.parametrize("conv", MX_CONVS, ids=lambda c: c.label("mxfp4"))
def test_mxfp4_every_convention_on_the_scale_corners(conv):
    fmt = MXFP4(convention=conv)
    x = _mx_corner_tensor()
    lim = fmt.input_range()[0]
    assert_same(fmt, x[np.abs(x.astype(np.float64)).max(axis=1) < lim])


@pytest.mark.parametrize("fmt", [NVFP4(), MXFP4(), NVFP4(block_size=32), MXFP4(block_size=16),
                                 NVFP4(convention=Convention(tensor_scale=False)),
                                 MXFP4(convention=Convention(element_ties=ElementTies.AWAY,
                                                             negative_zero=NegativeZero.POSITIVE_AFTER_SCALING))],
                         ids=lambda f: f.describe())
def test_random_tensors(fmt, rng):
    bs = fmt.block_size
    for scale in (1e-30, 1e-3, 1.0, 3e3, 1e30):
        x = (rng.standard_normal((257, 4 * bs)) * scale).astype(F32)
        x[::7, :bs] = 0.0  # all-zero blocks
        x[3, 5] = -0.0
        assert_same(fmt, x)
    # bf16 values (what convert re-encodes): many exact FP4 ties
    b = (rng.standard_normal((64, 8 * bs)).astype(F32).view(np.uint32) & np.uint32(0xFFFF0000))
    assert_same(fmt, b.view(F32))
    # small integers: exact ties at every scale
    assert_same(fmt, rng.integers(-12, 13, (50, 4 * bs)).astype(F32))
    # shapes: 1-d, 3-d, non-contiguous
    assert_same(fmt, rng.standard_normal(bs).astype(F32))
    assert_same(fmt, rng.standard_normal((3, 5, 2 * bs)).astype(F32))
    assert_same(fmt, rng.standard_normal((4 * bs, 6)).astype(F32).T.copy()[:, :2 * bs])


def test_other_formats_and_dtypes_are_the_golden_quantizer(rng):
    x = rng.standard_normal((8, 64))
    for fmt, a in ((NVFP4(), x), (MXFP4(), x.astype(np.float16)), (RaZeR(), x.astype(F32))):
        assert not fast.supports(fmt, a) or fmt == RaZeR()
        assert_same(fmt, a)


@pytest.mark.parametrize("fmt", [NVFP4(), MXFP4()], ids=lambda f: f.name)
@pytest.mark.parametrize("bad", ["nan", "inf", "shape", "int", "float64-range"])
def test_refused_input_raises_the_golden_error(fmt, bad):
    x = np.ones((4, 64), dtype=F32)
    if bad == "nan":
        x[2, 3] = np.nan
    elif bad == "inf":
        x[1, 7] = -np.inf
    elif bad == "shape":
        x = x[:, :40]
    elif bad == "int":
        x = x.astype(np.int32)
    else:  # beyond FP32 (every finite float32 is in range of both): handed to the golden one
        x = x.astype(np.float64)
        x[0, 0] = 2.0 ** 131
    with pytest.raises(InputError) as golden:
        fmt.quantize(x)
    with pytest.raises(InputError) as ours:
        fast.quantize(fmt, x)
    assert str(ours.value) == str(golden.value)


def test_threads_give_the_same_bytes(rng, monkeypatch):
    x = rng.standard_normal((300, 1024)).astype(F32)
    monkeypatch.setenv("MACTILE_THREADS", "1")
    one = fast.quantize(NVFP4(), x)
    monkeypatch.setenv("MACTILE_THREADS", "3")
    three = fast.quantize(NVFP4(), x)
    np.testing.assert_array_equal(one.codes, three.codes)
    np.testing.assert_array_equal(one.scales, three.scales)
    assert_same(NVFP4(), x)


def test_the_corner_tensors_reach_the_corners():
    """The corner inputs do what they are for: every E4M3 scale code appears, zero-scale
    blocks, saturated and tie elements; every E8M0 code a float32 block can need (up to
    ``floor(log2(FP32 max)) - 2``)."""
    q = NVFP4().quantize(_nvfp4_corner_tensor()[:-2])
    assert len(np.unique(q.scales)) > 120 and (q.scales == 0).any()
    assert ((q.codes & 7) == 7).any() and ((q.codes & 7) == 0).any()
    m = MXFP4().quantize(_mx_corner_tensor())
    top = int(np.frexp(np.finfo(F32).max)[1]) - 1 - 2 + E8M0.bias
    assert np.unique(m.scales).tolist() == list(range(top + 1))
