"""The golden API under hostile arguments: every option combination declares its true input
range, inputs are checked before any narrowing cast, and option kinds are validated exactly as documented.

Each case failed on the code before these checks (silent saturation above 2688, float128 beyond float64 quantized to zeros, True and '0.015625' taken as a
block-scale floor, a set taken as the ordered pair of special values).
"""
import numpy as np
import pytest

from mactile.golden import InputError, RaZeR, get_format
from mactile.golden.conventions import Convention


def test_nvfp4_without_tensor_scale_declares_its_range(tmp_path, capsys):
    """The API saturates beyond 2688 as torchao does (peer vectors bit for bit) and says
    where; `mactile quantize --tensor-scale off` refuses beyond it (it saturated silently,
    exit 0)."""
    from mactile.cli.main import main

    f = get_format("nvfp4", tensor_scale=False)
    assert f.saturation_limit() == 2688.0 and get_format("nvfp4").saturation_limit() is None
    assert f.quantize(np.full((1, 16), -2688.0)).dequantize()[0, 0] == -2688.0
    x = np.zeros((1, 16), np.float32)
    x[0, 3] = 2689.0
    np.save(tmp_path / "x.npy", x)
    rc = main(["quantize", "--format", "nvfp4", "--tensor-scale", "off", str(tmp_path / "x.npy"),
               str(tmp_path / "y.npy")])
    err = capsys.readouterr().err
    assert rc == 2 and "takes |x| <= 2688 (the largest block scale x FP4's 6); 1 value(s)" in err
    assert not (tmp_path / "y.npy").exists()
    # With the tensor scale the range is FP32's, as documented.
    assert get_format("nvfp4").quantize(np.full((1, 16), 1e6)).dequantize()[0, 0] == \
        pytest.approx(1e6, rel=1e-6)


@pytest.mark.skipif(np.finfo(np.longdouble).max <= np.finfo(np.float64).max,
                    reason="longdouble is float64 here")
def test_float128_beyond_float64_is_refused_before_the_cast():
    x = np.zeros((1, 128), np.longdouble)
    x[0, 5] = np.longdouble(np.finfo(np.float64).max) * 16
    for fmt in ("mxfp4", "nvfp4", "int-group"):
        with pytest.raises(InputError, match=r"at index \(0, 5\) is beyond float64's range"):
            get_format(fmt).quantize(x)


@pytest.mark.parametrize("value", [True, np.True_, "0.015625", b"1", None])
def test_block_scale_floor_must_be_a_number(value):
    with pytest.raises(ValueError, match=r"block_scale_floor must be a number, got"):
        Convention(block_scale_floor=value)


def test_block_scale_floor_numbers_still_accepted():
    assert Convention(block_scale_floor=2 ** -6).block_scale_floor == 0.015625
    assert Convention(block_scale_floor=np.float32(0.015625)).block_scale_floor == 0.015625


@pytest.mark.parametrize("value", [{5.0, 8.0}, frozenset({5.0, 8.0}), {5.0: 1, 8.0: 2}])
def test_special_values_must_be_ordered(value):
    with pytest.raises(TypeError, match=r"special_values must be an ordered pair"):
        RaZeR(special_values=value)


def test_unknown_convention_name_is_refused():
    with pytest.raises(ValueError, match=r"unknown convention 'nope'; choose ocp"):
        get_format("nvfp4", convention="nope")
