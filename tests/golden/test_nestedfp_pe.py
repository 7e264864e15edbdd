"""The NestedFP PE's golden model: products exact in FP32, the reconstruction that of the
storage format, FP32 RNE accumulation equal to IEEE float32 sums."""
import numpy as np
import pytest

from mactile.golden.elements import FP8_E4M3
from mactile.golden.nestedfp import NestedFP8, nestedfp_split
from mactile.golden.nestedfp_pe import (MODE_FP8, MODE_FP16, NestedFpPe, e4m3_values,
                                        fp16_values, product_bits)
from mactile.golden.tensorcore import FP32_QNAN


def test_every_e4m3_pair_is_an_exact_fp32_product():
    v = e4m3_values()
    a, w = np.meshgrid(v, v, indexing="ij")
    bits = product_bits(a.ravel(), w.ravel())
    ok = ~np.isnan(a.ravel() * w.ravel())
    assert np.array_equal(bits[ok].view(np.float32).astype(np.float64), (a * w).ravel()[ok])
    assert (bits[~ok] == FP32_QNAN).all() and (~ok).sum() == 2 * 2 * 256 - 4


def test_random_fp16_products_are_exact_including_subnormals():
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 1 << 16, (2, 200_000))
    codes[:, :1000] &= 0x83FF  # subnormals and zeros
    a, w = fp16_values()[codes[0]], fp16_values()[codes[1]]
    bits = product_bits(a, w)  # raises if any finite product were rounded
    with np.errstate(invalid="ignore"):
        p = a * w
    fin = np.isfinite(p)
    assert np.array_equal(bits[fin].view(np.float32).astype(np.float64), p[fin])
    assert (bits[np.isnan(p)] == FP32_QNAN).all()


def test_dual_weight_is_the_storage_reconstruction_and_fp8_the_upper_byte():
    w16 = np.arange(1 << 16, dtype=np.uint16)
    w16 = w16[(w16 & 0x4000) == 0][::7]
    w16 = w16[np.abs(w16.view(np.float16).astype(np.float32)) <= 1.75]  # eligible words
    up, lo = nestedfp_split(w16)
    pe = NestedFpPe("dual")
    n = len(w16)
    ports = {"a": np.full(n, 0x3C00), "w_upper": up, "w_lower": lo, "mode": np.full(n, MODE_FP16)}
    assert np.array_equal(pe.products(ports).view(np.float32),
                          w16.view(np.float16).astype(np.float32))
    one8 = int(FP8_E4M3.encode([1.0])[0])
    ports.update(a=np.full(n, one8), mode=np.full(n, MODE_FP8))
    # FP8 mode: the raw E4M3 value, 2**8 times NestedFP8's (its one global scale)
    fp8 = NestedFP8().dequantize(NestedFP8().quantize(w16.view(np.float16).astype(np.float64)))
    assert np.array_equal(pe.products(ports).view(np.float32).astype(np.float64),
                          np.ldexp(np.asarray(fp8).reshape(-1), 8))


def test_accumulation_equals_ieee_float32_sums():
    rng = np.random.default_rng(2)
    pe = NestedFpPe("fp16")
    n = 4000
    a = (rng.standard_normal(n) * 4).astype(np.float16).view(np.uint16)
    w = (rng.standard_normal(n)).astype(np.float16).view(np.uint16)
    valid = rng.random(n) < 0.9
    clear = rng.random(n) < 0.02
    acc = pe.run({"a": a, "w": w, "valid": valid, "clear": clear})
    p = (a.view(np.float16).astype(np.float32) * w.view(np.float16).astype(np.float32))
    ref, x = [], np.float32(0)
    for i in range(n):  # numpy float32 addition is IEEE RNE with subnormals
        if clear[i]:
            x = p[i] if valid[i] else np.float32(0)
        elif valid[i]:
            x = np.float32(x + p[i])
        ref.append(x)
    assert np.array_equal(acc.view(np.float32), np.array(ref, np.float32))


def test_clear_loads_negative_zero_and_specials():
    pe = NestedFpPe("fp16")
    acc = pe.run({"a": [0x8000, 0x8000, 0x0000, 0x7C00, 0xFC00], "w": [0x3C00] * 5,
                  "valid": [1] * 5, "clear": [1, 0, 0, 1, 0]})
    assert list(acc) == [0x80000000, 0x80000000, 0, 0x7F800000, FP32_QNAN]


def test_bad_modes_refused():
    with pytest.raises(ValueError, match="modes"):
        NestedFpPe("fp4")
