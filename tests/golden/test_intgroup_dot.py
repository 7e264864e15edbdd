"""The group dot-product units' golden model: bit planes equal multipliers equal
bitplane_matmul, minimal accumulator, the scale stage one FP32 rounding, and a group's
result that of the dequantized int-group data."""
import numpy as np
import pytest

from mactile.golden.intgroup import IntGroup, bitplane_matmul
from mactile.golden.intgroup_dot import GroupDotUnit


@pytest.mark.parametrize("bits", [6, 8])
def test_bitplanes_equal_multipliers_on_every_pair(bits):
    n = 1 << bits
    lo = -(n // 2)
    a, w = (x.reshape(-1, 1) + lo for x in np.indices((n, n)))
    bp = GroupDotUnit(bits=bits, lanes=1, structure="bitplane")
    mu = GroupDotUnit(bits=bits, lanes=1, structure="multiplier")
    assert np.array_equal(bp.beat_dot(a, w), (a * w).ravel())
    assert np.array_equal(mu.beat_dot(a, w), (a * w).ravel())


def test_beats_equal_bitplane_matmul():
    rng = np.random.default_rng(3)
    a, w = rng.integers(-32, 32, (2, 50, 16))
    u = GroupDotUnit()
    assert np.array_equal(u.beat_dot(a, w), np.diag(bitplane_matmul(a, w, 6, 6)))
    counts = u.plane_counts(a, w)
    assert counts.shape == (6, 6, 50) and counts.max() <= 16


@pytest.mark.parametrize("bits,width", [(6, 19), (8, 23)])
def test_accumulator_is_the_narrowest_for_a_group(bits, width):
    u = GroupDotUnit(bits=bits)
    assert u.acc_bits == width
    lo, hi = u.product_range
    assert u.group_size * hi > (1 << (width - 2)) - 1  # one bit fewer would not hold it


def test_scale_rounds_once_to_nearest_even():
    rng = np.random.default_rng(4)
    u = GroupDotUnit()
    for _ in range(3000):
        acc = int(rng.integers(-(1 << 17), 1 << 17))
        sa, sw = (int(x) for x in rng.integers(0, 0x7C00, 2))
        exact = acc * float(np.uint16(sa).view(np.float16)) * float(np.uint16(sw).view(np.float16))
        # float64 holds acc * sig_a * sig_w (<= 41 bits) exactly: one rounding to FP32
        assert u.scale(acc, sa, sw) == int(np.float32(exact).view(np.uint32)) or exact == 0
    with pytest.raises(ValueError, match="Inf/NaN"):
        u.scale(1, 0x7C00, 0x3C00)


def test_group_result_is_the_dequantized_dot_rounded_once():
    rng = np.random.default_rng(5)
    fmt = IntGroup(bits=6, block_size=128)
    x, w = rng.standard_normal((2, 20, 128)) * 3
    qx, qw = fmt.quantize(x), fmt.quantize(w)
    ix, iw = fmt.integers(qx), fmt.integers(qw)
    u = GroupDotUnit()
    dx, dw = fmt.dequantize(qx), fmt.dequantize(qw)
    for g in range(20):
        acc = int((ix[g] * iw[g]).sum())
        y = u.scale(acc, int(qx.scales.reshape(-1)[g]), int(qw.scales.reshape(-1)[g]))
        # every term shares s_x * s_w, so the float64 dot is exact
        assert y == int(np.float32(np.dot(dx[g], dw[g])).view(np.uint32))


def test_run_holds_scales_over_bubbles():
    u = GroupDotUnit(lanes=2, group_size=4)
    r = u.run({"a": [[1, 2], [3, 4], [9, 9]], "w": [[1, 1], [1, 1], [9, 9]],
               "sa": [0x3C00, 0x7777, 0x4000], "sw": [0x3C00, 0x4000, 0x3C00],
               "valid": [1, 1, 0], "clear": [1, 0, 0]})
    assert list(r["acc"]) == [3, 10, 10]
    assert list(np.array(r["y"], np.uint32).view(np.float32)) == [3.0, 10 * 2 * float(
        np.uint16(0x7777).view(np.float16)), 10 * 2 * float(np.uint16(0x7777).view(np.float16))]


def test_bad_parameters_refused():
    with pytest.raises(ValueError, match="multiple"):
        GroupDotUnit(lanes=3)
    with pytest.raises(ValueError, match="structure"):
        GroupDotUnit(structure="booth")
