"""RaZeR-G128 golden model: bit layout of the FP16 scale word, tensor-scale conventions,
candidate selection, and agreement with an independent per-block reference."""
import numpy as np
import pytest

from mactile.golden import FP4_E2M1, FP16, G128TensorScale, InputError, RaZeRG128, get_format
from mactile.golden.razer_g128 import G128_SCALE_MAX, G128_SCALE_MAX_CODE, G128_SCALE_MASK


def reference_quantize(x, fmt: RaZeRG128):
    """Independent, loop-per-block reading of the format's docstring (float64 where the
    result is exact, FP32 where the docstring says FP32)."""
    f32 = np.float32
    x = np.asarray(x, dtype=np.float32).reshape(-1, 128)
    d32 = fmt._tensor_params(x)["tensor_scale"]
    a, b = fmt.special_values
    codes = np.zeros(x.shape, dtype=np.uint8)
    scales = np.zeros(len(x), dtype=np.uint16)
    fp4 = FP4_E2M1.values
    for i, blk in enumerate(x):
        amax = f32(np.max(np.abs(blk)))
        best = None
        for k, v in enumerate((a, -a, b, -b)):
            arg = f32(amax / f32(d32 * f32(max(6.0, abs(v)))))
            sc = int(FP16.encode(arg))
            sv = f32(FP16.values[sc])
            den = f32(d32 * sv)
            scaled = (blk / den).astype(np.float32) if den > 0 else np.zeros(128, np.float32)
            c = FP4_E2M1.encode(scaled)
            q = fp4[c]
            use_v = np.abs(scaled.astype(np.float64) - v) < np.abs(scaled.astype(np.float64) - q)
            c = np.where(c == 0, 8, c)
            c = np.where(use_v, 0, c)
            val = np.where(use_v, v, q) * (float(sv) * float(d32))
            err = float(np.sum((blk.astype(np.float64) - val) ** 2))
            if best is None or err < best[0]:
                best = (err, c, sc | ((k >> 1) << 14) | ((k & 1) << 15))
        codes[i], scales[i] = best[1], best[2]
    return codes, scales, d32


def test_scale_max_constant():
    assert G128_SCALE_MAX_CODE == 0x3FFF == G128_SCALE_MASK
    assert G128_SCALE_MAX == 2.0 - 2.0 ** -10
    assert FP16.values[G128_SCALE_MAX_CODE + 1] == 2.0  # the next code has bit 14 set


@pytest.mark.parametrize("mode", list(G128TensorScale))
def test_matches_reference(rng, mode):
    x = (rng.standard_normal((6, 384)) * rng.uniform(0.05, 1.5, size=(6, 1))).astype(np.float32)
    x[0, :128] *= 20  # one loud block
    if mode is G128TensorScale.UNIT:
        x = np.clip(x, -11.0, 11.0)
    fmt = RaZeRG128(tensor_scale=mode)
    q = fmt.quantize(x)
    codes, scales, d32 = reference_quantize(x, fmt)
    np.testing.assert_array_equal(q.codes.reshape(-1, 128), codes)
    np.testing.assert_array_equal(q.scales.reshape(-1), scales)
    assert q.tensor_scale == d32
    # every block scale is below 2 once the two flag bits are cleared
    s = FP16.values[q.scales & G128_SCALE_MASK]
    assert (s < 2.0).all() and (s >= 0).all()


def test_tensor_scale_conventions(rng):
    x = (rng.standard_normal((2, 256)) * 3).astype(np.float32)
    q = RaZeRG128().quantize(x)
    amax = np.float32(np.abs(x).max())
    assert q.tensor_scale == np.float32(amax / np.float32(6 * G128_SCALE_MAX))
    # the block holding the tensor maximum maps it to max(6,|v|) with the largest legal scale
    i = np.unravel_index(np.argmax(np.abs(x)), x.shape)
    s = int(q.scales[i[0], i[1] // 128])
    mag = (5.0, 8.0)[(s >> 14) & 1]
    sv = FP16.values[s & G128_SCALE_MASK]
    assert sv <= G128_SCALE_MAX
    assert abs(sv * max(6.0, mag) / (6 * G128_SCALE_MAX) - 1) <= 2.0 ** -11
    qp = RaZeRG128(tensor_scale="pow2").quantize(x)
    m, e = np.frexp(float(qp.tensor_scale))
    assert m == 0.5  # a power of two
    assert float(qp.tensor_scale) >= float(amax) / (6 * G128_SCALE_MAX) > float(qp.tensor_scale) / 2
    qu = RaZeRG128(tensor_scale="unit").quantize(x / 4)
    assert qu.tensor_scale == 1.0


def test_unit_rejects_loud_input():
    x = np.zeros(128, np.float32)
    x[3] = 12.5
    with pytest.raises(InputError, match=r"tensor_scale='unit'.*11\.99"):
        RaZeRG128(tensor_scale="unit").quantize(x)


def test_metadata_bits_and_codes(rng):
    # A block whose loudest values sit at -5 x (scale) picks the special -5: sign bit set,
    # select bit clear; code 0 marks it, real zeros are code 8.
    blk = rng.uniform(-3.8, 3.8, 128).astype(np.float32)
    blk[[5, 9, 40]] = -5.0
    blk[100] = 6.0 * 0.999
    blk[[7, 8]] = 0.0
    q = RaZeRG128(tensor_scale="unit").quantize(blk)
    s = int(q.scales[0])
    assert (s >> 15) & 1 == 1 and (s >> 14) & 1 == 0
    assert (q.codes[0, [5, 9, 40]] == 0).all()
    assert (q.codes[0, [7, 8]] == 8).all()
    v = q.dequantize()
    assert (v[[7, 8]] == 0).all()
    assert np.all(v[[5, 9, 40]] < 0)


def test_all_zero_and_registry():
    q = RaZeRG128().quantize(np.zeros((2, 128), np.float32))
    assert (q.dequantize() == 0).all() and q.tensor_scale == 1.0
    f = get_format("razer-g128", special_values=(5, 7))
    assert f.special_values == (5.0, 7.0) and f.block_size == 128
    with pytest.raises(ValueError, match="block size"):
        RaZeRG128(block_size=64)
    with pytest.raises(ValueError, match="tensor_scale"):
        RaZeRG128(tensor_scale="max")
    with pytest.raises(ValueError, match="two special"):
        get_format("razer-g128", special_values=(5,))


def test_flipped_metadata_bit_is_detected(rng):
    """Deliberately broken decode (select bit ignored) disagrees with the golden model."""
    x = (rng.standard_normal((8, 128))).astype(np.float32)
    x[:, 0] = 7.9  # make +8 attractive in every block
    fmt = RaZeRG128()
    q = fmt.quantize(x)
    assert ((q.scales >> 14) & 1).any()
    good = q.dequantize()
    s_code, _ = fmt._unpack_scale(q.scales)
    bad = FP4_E2M1.values[q.codes] * (FP16.values[s_code] * float(q.tensor_scale))[:, None]
    bad = np.where(q.codes == 0, 5.0 * (FP16.values[s_code] * float(q.tensor_scale))[:, None], bad)
    assert not np.array_equal(good.reshape(bad.shape), bad)
