"""Golden tensor-core datapath: FP32 rounding against NumPy's IEEE float32, decoders against
the golden quantizers' dequantization, GEMV against exact rational arithmetic."""
from fractions import Fraction

import numpy as np
import pytest

from mactile.golden import E3M3, FP4_E2M1, FP8_E4M3, NVFP4, RaZeR, RaZeRAct
from mactile.golden.fp4blocks import razer_offset_value
from mactile.golden.tensorcore import (
    FP32_QNAN, NVFP4_E3M3_OPERAND, NVFP4_OPERAND, RAZER_ACT, RAZER_WEIGHT, FixedAccumulator,
    FP32Accumulator, OperandSpec, TensorCoreSpec, accumulator, epilogue, fp32_add, fp32_add_bits, fp32_parts, interesting_fp32,
    fp32_round, offsets_for, operand_for, outer_product_spec, tensor_core_spec)


def _f32(bits):
    return np.array(bits, dtype=np.uint32).view(np.float32)


def _bits(f):
    return int(np.array(f, dtype=np.float32).view(np.uint32))


def test_fp32_add_matches_ieee_float32(rng):
    a = interesting_fp32(rng, 40000)
    b = interesting_fp32(rng, 40000)
    # exponent-close pairs exercise cancellation and ties
    b[::3] = (a[::3] & 0xFF800000) ^ (rng.integers(0, 2, len(b[::3]), dtype=np.uint32) << 31) \
        | rng.integers(0, 1 << 23, len(b[::3]), dtype=np.uint32)
    with np.errstate(all="ignore"):
        ref = (_f32(a) + _f32(b)).view(np.uint32)
    for x, y, r in zip(a.tolist(), b.tolist(), ref.tolist()):
        cls, s, m, e = fp32_parts(y)
        got = fp32_add(x, s, m, e, nan=cls == "nan") if cls != "inf" else None
        if cls == "inf":
            continue  # the datapath never adds an infinite product
        if np.isnan(_f32(r)):
            assert got == FP32_QNAN, (hex(x), hex(y))
        elif m == 0 and s == 1:
            # P == 0 is +0 by definition: compare with x + (+0)
            assert got == int((_f32(x) + np.float32(0)).view(np.uint32)), (hex(x), hex(y))
        else:
            assert got == r, (hex(x), hex(y), hex(got), hex(r))


def test_fp32_add_bits_matches_ieee_float32(rng):
    a = interesting_fp32(rng, 30000)
    b = interesting_fp32(rng, 30000)
    with np.errstate(all="ignore"):
        ref = (_f32(a) + _f32(b)).view(np.uint32)
    for x, y, r in zip(a.tolist(), b.tolist(), ref.tolist()):
        want = FP32_QNAN if np.isnan(_f32(r)) else r
        assert fp32_add_bits(x, y) == want, (hex(x), hex(y))


def test_fp32_add_named_cases():
    one = _bits(1.0)
    # ties: 1 + 2**-24 is halfway between 1 and 1+2**-23 -> even (1.0)
    assert fp32_add(one, 0, 1, -24) == one
    # 1+2**-23 + 2**-24 halfway -> rounds up to even 1+2**-22
    assert fp32_add(_bits(1 + 2**-23), 0, 1, -24) == _bits(1 + 2**-22)
    # just above the tie rounds up
    assert fp32_add(one, 0, 3, -25) == _bits(1 + 2**-23)
    # subnormal sums stay exact; smallest subnormal + itself
    assert fp32_add(1, 0, 1, -149) == 2
    # subnormal + normal crossing into the normal range
    assert fp32_add(0x007FFFFF, 0, 1, -149) == 0x00800000
    # exact cancellation gives +0; -0 + 0 gives +0; overflow gives Inf
    assert fp32_add(_bits(-3.0), 0, 3, 0) == 0
    assert fp32_add(0x80000000, 1, 0, 0) == 0
    assert fp32_add(0x7F7FFFFF, 0, 1, 103) == 0x7F800000  # max + half ulp: tie to even = Inf
    assert fp32_add(0x7F7FFFFE, 0, 1, 103) == 0x7F7FFFFE  # tie to even stays finite
    # NaN in or out
    assert fp32_add(FP32_QNAN | 1, 0, 1, 0) == FP32_QNAN
    assert fp32_add(one, 0, 1, 0, nan=True) == FP32_QNAN


def test_fp32_round_matches_float32_cast(rng):
    for _ in range(20000):
        mag = int(rng.integers(1, 1 << 50))
        exp = int(rng.integers(-200, 100))
        v = np.ldexp(float(mag), exp)  # exact in float64
        with np.errstate(over="ignore"):
            assert fp32_round(0, mag, exp) == _bits(np.float32(v)), (mag, exp)
    assert fp32_round(1, 0, 0) == 0x80000000
    assert fp32_round(1, 1, -151) == 0x80000000  # underflows to -0
    assert fp32_round(0, 3, -151) == 1           # 0.75 ulp rounds up to the smallest subnormal


@pytest.mark.parametrize("operand", [NVFP4_OPERAND, RAZER_WEIGHT, RAZER_ACT, NVFP4_E3M3_OPERAND],
                         ids=lambda o: o.name)
def test_decode_exhaustive(operand):
    """Every code x every scale byte x every offset-register value, against an independent
    reading of the conventions (razer_offset_value, the format tables)."""
    regs = [()] if not operand.specials else (
        [(o,) for o in range(16)] if operand.specials == 1
        else [(o0, o1) for o0 in range(16) for o1 in range(16)])
    codes = np.arange(16)
    for offs in regs:
        for byte in range(256):
            got = operand.decode_elements(codes, byte, offs)
            want = FP4_E2M1.values[codes] * 2
            if operand.specials:
                reg = offs[(byte >> 6) & 1] if operand.specials == 2 else offs[0]
                v = razer_offset_value(reg) * 2
                want = np.where(codes == 0, -v if byte >> 7 else v, want)
            assert np.array_equal(got, want), (offs, byte)
    # scale values: the byte's low bits as the scale format, positive unless signed
    b = np.arange(256)
    fmt = operand.scale_format
    code = b & ((1 << operand.scale_field_bits) - 1)
    want = fmt.values[code] if operand.scale_signed else np.abs(fmt.values[code])
    assert np.array_equal(operand.scale_values(b), want, equal_nan=True)


@pytest.mark.parametrize("fmt", [NVFP4(), RaZeR(), RaZeR(special_values=(3.5, 9.5)),
                                 RaZeRAct(), RaZeRAct(special_value=2.5)], ids=str)
def test_decode_matches_golden_dequantize(fmt, rng):
    x = (rng.standard_normal((32, 64)) * np.exp(rng.standard_normal((32, 1)) * 4)).astype(np.float32)
    q = fmt.quantize(x)
    op = operand_for(fmt)
    elems = op.decode_elements(q.codes, q.scales, offsets_for(fmt)) / 2.0
    scaled = elems * op.scale_values(q.scales)[..., None] * float(q.tensor_scale)
    assert np.array_equal(scaled.reshape(x.shape), q.dequantize())


@pytest.mark.parametrize("pair", ["nvfp4", "razer"])
def test_gemv_fixed_is_exact_and_fp32_close(pair, rng):
    W = (rng.standard_normal((64, 256)) * 0.05).astype(np.float32)
    x = rng.standard_normal(256).astype(np.float32)
    wf, af = (NVFP4(), NVFP4()) if pair == "nvfp4" else (RaZeR(), RaZeRAct())
    qw, qx = wf.quantize(W), af.quantize(x)
    Wd, xd = qw.dequantize(), qx.dequantize()
    d = Fraction(float(qw.tensor_scale)) * Fraction(float(qx.tensor_scale))
    exact = [sum(Fraction(float(a)) * Fraction(float(b)) for a, b in zip(Wd[n], xd)) / d
             for n in range(64)]
    fixed = TensorCoreSpec(weight=operand_for(wf), act=operand_for(af), acc=accumulator("fixed"))
    st = fixed.gemv(qw, qx)
    w = fixed.acc.width
    for n in range(64):
        v = int(st["acc"][n])
        v = v - (1 << w) if v >> (w - 1) else v
        assert Fraction(v, 1 << fixed.acc.frac_bits) == exact[n]
    fp = TensorCoreSpec(weight=operand_for(wf), act=operand_for(af))
    got = fp.acc_values(fp.gemv(qw, qx))
    # 16 RNE additions: |error| <= 16 * 2**-24 * sum of |partial sums| (loose, per row)
    absum = np.abs(Wd / float(qw.tensor_scale)) @ np.abs(xd / float(qx.tensor_scale))
    assert np.all(np.abs(got - np.array([float(e) for e in exact])) <= 16 * 2**-24 * absum)
    y = epilogue(fp.gemv(qw, qx)["acc"], qw.tensor_scale, qx.tensor_scale)
    assert np.allclose(y, Wd @ xd, rtol=1e-5, atol=1e-6 * np.abs(Wd @ xd).max())


def test_nan_scale_and_signed_scale():
    spec = TensorCoreSpec(rows=2)
    st = spec.initial(2)
    codes = np.full(16, 0b0010)  # 1.0
    st = spec.step(st, codes, 0x38, np.stack([codes, codes]), np.array([0x38, 0xB8]), clear=True)
    assert spec.acc_values(st).tolist() == [16.0, -16.0]  # E4M3 0x38 = 1.0, 0xB8 = -1.0
    st = spec.step(st, codes, 0x7F, np.stack([codes, codes]), np.array([0x38, 0x38]))
    assert [int(b) for b in st["acc"]] == [FP32_QNAN] * 2
    fx = TensorCoreSpec(rows=1, acc=accumulator("fixed"))
    s2 = fx.step(fx.initial(1), codes, 0x38, codes[None], np.array([0x38]), clear=True)
    s2 = fx.step(s2, codes, 0xFF, codes[None], np.array([0x38]))
    assert s2["nan"].tolist() == [True] and fx.acc_values(s2).tolist()[0] != fx.acc_values(s2).tolist()[0]
    s2 = fx.step(s2, codes, 0x38, codes[None], np.array([0x38]), clear=True)
    assert s2["nan"].tolist() == [False] and fx.acc_values(s2).tolist() == [16.0]


def test_spec_validation():
    with pytest.raises(ValueError, match="must divide block_size"):
        TensorCoreSpec(cols=5)
    with pytest.raises(ValueError, match="exact in FP32"):
        TensorCoreSpec(block_size=256, cols=16, weight=RAZER_WEIGHT, act=RAZER_ACT)
    with pytest.raises(ValueError, match="frac_bits >= 20"):
        TensorCoreSpec(acc=FixedAccumulator(int_bits=40, frac_bits=16))
    with pytest.raises(ValueError, match="scale_field_bits"):
        OperandSpec(name="x", scale_format=E3M3, scale_field_bits=5)
    with pytest.raises(ValueError, match="needs 2 offset"):
        RAZER_WEIGHT.decode_elements(np.zeros(16, int), 0, (1,))
    assert TensorCoreSpec(weight=RAZER_WEIGHT, act=RAZER_ACT).product_bits == 21
    assert TensorCoreSpec().product_bits == 19
    assert accumulator("fixed").width == 62
    assert RAZER_WEIGHT.scale_format is E3M3 and RAZER_ACT.scale_format is FP8_E4M3


# ------------------------------------------------------------------ output-stationary
@pytest.mark.parametrize("params", [
    {},
    {"weight": "razer", "weight_scale": "e3m3", "act": "razer-act"},
    {"acc": "fixed", "k_per_cycle": 4},
    {"block_size": 32, "weight_scale": "e8m0", "act_scale": "e8m0"},
], ids=["nvfp4", "razer", "nvfp4-fixed-k4", "mxfp4"])
def test_outer_product_is_one_row_core_per_unit(params, rng):
    """Unit (i, j) of the output-stationary array accumulates exactly what a one-row
    TensorCoreSpec does on activation block i and weight block j (random codes, every
    scale byte, NaN scales, clears)."""
    spec = outer_product_spec(rows=3, cols=4, **params)
    assert (spec.rows, spec.cols, spec.k_per_cycle) == (3, 4, params.get("k_per_cycle", 1))
    one = tensor_core_spec(rows=1, cols=spec.block_size,
                           **{k: v for k, v in params.items() if k != "k_per_cycle"})
    wo = (3, 9) if spec.weight.specials == 2 else ()
    ao = (5,) if spec.act.specials else ()
    st = spec.initial()
    ref = [[one.initial(1) for _ in range(4)] for _ in range(3)]
    bs = spec.block_size
    for step in range(12):
        ac, ab = rng.integers(0, 16, (3, bs)), rng.integers(0, 256, 3)
        wc, wb = rng.integers(0, 16, (4, bs)), rng.integers(0, 256, 4)
        clear = step == 0 or rng.random() < 0.2
        st = spec.step(st, ac, ab, wc, wb, clear=clear, w_offsets=wo, a_offsets=ao)
        for i in range(3):
            for j in range(4):
                ref[i][j] = one.step(ref[i][j], ac[i], ab[i], wc[j:j + 1], wb[j:j + 1],
                                     clear=clear, w_offsets=wo, a_offsets=ao)
                assert int(st["acc"][i, j]) == int(ref[i][j]["acc"][0])
                assert bool(st["nan"][i, j]) == bool(ref[i][j]["nan"][0])
    assert spec.acc_values(st).shape == (3, 4)


def test_outer_product_gemm_is_gemv_per_row(rng):
    spec = outer_product_spec(rows=2, cols=2, weight="razer", weight_scale="e3m3",
                              act="razer-act")
    W = (rng.standard_normal((8, 64)) * 0.05).astype(np.float32)
    X = rng.standard_normal((3, 64)).astype(np.float32)
    qw = RaZeR().quantize(W)
    qxs = [RaZeRAct().quantize(x) for x in X]
    got = spec.gemm(qw, qxs)
    assert got["acc"].shape == (3, 8)
    for m, qx in enumerate(qxs):
        assert [int(v) for v in got["acc"][m]] == [int(v) for v in spec.row_core.gemv(qw, qx)["acc"]]


def test_outer_product_validation():
    with pytest.raises(ValueError, match="k_per_cycle \\(3\\) must divide block_size"):
        outer_product_spec(k_per_cycle=3)
    with pytest.raises(ValueError, match="unknown drain"):
        outer_product_spec(drain="shared")
    with pytest.raises(ValueError, match="cols \\(8\\) must not exceed the beats per block \\(4\\)"):
        outer_product_spec(cols=8, k_per_cycle=4, drain="row")
    assert outer_product_spec(cols=4, k_per_cycle=4, drain="row").cols == 4
    with pytest.raises(ValueError, match="rows must be"):
        outer_product_spec(rows=0)
    with pytest.raises(ValueError, match="expected activation codes"):
        outer_product_spec(rows=2, cols=1).products(np.zeros((3, 16), int), [0, 0, 0],
                                                    np.zeros((1, 16), int), [0])
    s = outer_product_spec()
    assert (s.rows, s.cols, s.k_per_cycle, s.beats) == (16, 16, 1, 16)
    assert s.describe().startswith("tc-os(rows=16, cols=16, k_per_cycle=1")
