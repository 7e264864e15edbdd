"""Per-token E4M3 activation quantization (NestedFP FP8 mode) golden model."""
import ml_dtypes
import numpy as np
import pytest

from mactile.golden.block import InputError
from mactile.golden.elements import FP8_E4M3
from mactile.golden.fp8token import nestedfp8_matmul_reference, per_token_e4m3
from mactile.golden.nestedfp import nestedfp_split


def test_matches_ml_dtypes_cast(rng):
    x = (rng.standard_normal((7, 300)) * rng.uniform(1e-3, 50, (7, 1))).astype(np.float16)
    codes, scales = per_token_e4m3(x)
    x32 = x.astype(np.float32)
    s = (np.abs(x32).max(1) / np.float32(448)).astype(np.float32)
    assert np.array_equal(scales, s)
    ref = (x32 / s[:, None]).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert np.array_equal(codes, ref)
    assert (np.abs(FP8_E4M3.values[codes]).max(1) == 448).all()  # amax maps to 448


def test_zero_row_and_errors():
    x = np.zeros((2, 16), np.float16)
    x[1, 3] = -np.float16(0.0)
    codes, scales = per_token_e4m3(x)
    assert (scales == 0).all() and set(np.unique(codes)) <= {0x00, 0x80}
    with pytest.raises(InputError, match="non-finite value"):
        per_token_e4m3(np.array([[1.0, np.inf]], np.float16))
    with pytest.raises(InputError, match="expected an \\(M, K\\) matrix"):
        per_token_e4m3(np.zeros(4, np.float16))
    with pytest.raises(InputError, match="floating-point"):
        per_token_e4m3(np.zeros((2, 2), np.int32))


def test_reference_gemm(rng):
    x = rng.standard_normal((3, 64)).astype(np.float16)
    w = (rng.standard_normal((5, 64)) * 0.05).astype(np.float16)
    codes, scales = per_token_e4m3(x)
    upper, _ = nestedfp_split(w)
    y = nestedfp8_matmul_reference(codes, scales, upper)
    xd = FP8_E4M3.values[codes] * scales[:, None].astype(np.float64)
    wd = FP8_E4M3.values[upper] / 256.0
    assert np.allclose(y, xd @ wd.T, rtol=1e-12, atol=0)
