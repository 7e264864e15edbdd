"""The golden MAC datapath model (mactile.golden.mac) against the element formats'
value tables and the DialectFP4 block format: every product exact, sums exact."""
import numpy as np
import pytest

from mactile.golden import FORMATBOOK, INT4, INT5, INT8, DialectFP4
from mactile.golden.dialect import SE_BIAS, DialectSelect
from mactile.golden.mac import DialectMultiplier, MacDatapath, MacKind, signed_width

FLOATS = ["fp4_e2m1", "fp6_e2m3", "fp6_e3m2"]
INTS = ["int4", "int5", "int8"]


def dp(fmt, **kw):
    return MacDatapath(a_format=fmt, w_format=fmt, **kw)


@pytest.mark.parametrize("fmt", FLOATS + INTS)
def test_every_product_equals_the_product_of_decoded_values(fmt):
    d = dp(fmt)
    ref = np.outer(d.a_spec.values, d.w_spec.values)  # exact in float64
    assert np.array_equal(d.value(d.product_table), ref)


@pytest.mark.parametrize("mult", ["uint4", "int4"])
def test_dialect_products_are_signed_formatbook_products_in_quarter_units(mult):
    d = dp("dialectfp4", multiplier=mult)
    t = d.product_table  # [d_a, d_w, a, w]
    q = FORMATBOOK[:, np.arange(16) & 7] * np.where(np.arange(16) >= 8, -1, 1)  # (16 d, 16 codes)
    ref = q[:, None, :, None] * q[None, :, None, :]
    assert np.array_equal(t, ref)
    assert d.product_range == (-225, 225)


def test_int4_split_stages_fit_an_int4_multiplier():
    d = dp("dialectfp4", multiplier="int4")
    codes = np.arange(16)
    a = d.unpack(codes[:, None, None], "a", np.arange(16)[None, :, None])
    w = d.unpack(codes[None, None, :], "w", np.zeros((1, 1, 1), int))
    st = d.int4_split_product(a, w)
    assert INT4.min_int <= st["x_a"].min() and st["x_a"].max() <= INT4.max_int
    assert set(np.unique(st["lsb"])) <= {-1, 0, 1}
    assert np.array_equal(st["product"], 4 * st["int4"] + 2 * st["residual"] + st["lsb"])
    uint = dp("dialectfp4").multiply(a, w)
    assert np.array_equal(st["product"], uint)


@pytest.mark.parametrize("fmt,acc_bits", [("int4", 14), ("int5", 16), ("int8", 22),
                                          ("fp4_e2m1", 15), ("fp6_e2m3", 19),
                                          ("fp6_e3m2", 25), ("dialectfp4", 15)])
def test_accumulator_is_the_narrowest_that_holds_terms_worst_case_products(fmt, acc_bits):
    d = dp(fmt)
    lo, hi = d.acc_range
    assert d.acc_bits == acc_bits
    assert -(1 << (acc_bits - 1)) <= lo and hi <= (1 << (acc_bits - 1)) - 1
    assert not (-(1 << (acc_bits - 2)) <= lo and hi <= (1 << (acc_bits - 2)) - 1)
    # 64 copies of the extreme products land exactly on the range ends, no wrap.
    for ext in (lo, hi):
        p = np.full(d.terms, ext // d.terms)
        assert d.accumulate(p)[-1] == ext
    assert dp(fmt, terms=16).acc_bits < acc_bits


def test_signed_width():
    assert signed_width(-8, 7) == 4
    assert signed_width(-8, 8) == 5
    assert signed_width(0, 0) == 1
    with pytest.raises(ValueError, match="empty range"):
        signed_width(3, 2)


def test_accumulate_matches_a_register_loop(rng):
    d = dp("int8")
    T, L = 300, 5
    p = rng.integers(-16000, 16000, size=(T, L))
    valid = rng.random((T, L)) < 0.8
    clear = rng.random((T, L)) < 0.05
    got = d.accumulate(p, valid=valid, clear=clear)
    acc = np.zeros(L, np.int64)
    for t in range(T):
        acc = np.where(clear[t], 0, acc) + np.where(valid[t], p[t], 0)
        assert np.array_equal(got[t], d.wrap(acc))


def test_accumulate_wraps_like_the_register_and_check_stream_flags_it():
    d = dp("int4", terms=4)  # acc range [-224, 256] -> 10 bits
    assert d.acc_bits == 10
    assert d.accumulate(np.full(9, 64))[-1] == d.wrap(576) == 576 - 1024
    with pytest.raises(ValueError, match="more than 4 products"):
        d.check_stream(valid=np.ones(5), clear=np.zeros(5))
    d.check_stream(valid=np.ones(5), clear=np.array([1, 0, 0, 0, 1]))


@pytest.mark.parametrize("fmt", FLOATS + INTS)
def test_dot_products_of_golden_quantized_data_are_exact(fmt, rng):
    d = dp(fmt)
    x = rng.standard_normal((2, 50, 64))
    spec = d.a_spec
    a = spec.encode(x[0] * spec.max_value / np.abs(x[0]).max())
    w = spec.encode(x[1] * spec.max_value / np.abs(x[1]).max())
    acc = d.dot(a, w)
    ref = (spec.decode(a).astype(np.float64) * spec.decode(w)).sum(axis=1)
    assert np.array_equal(d.value(acc), ref)


def test_dialect_block_end_reproduces_dequantized_dot_products(rng):
    """acc * 2**exp (convention acc-exp) equals the dot product of the golden
    DialectFP4 dequantized blocks, exactly, including subnormal-only blocks."""
    d = dp("dialectfp4")
    x = rng.standard_normal((2, 40, 64)) * np.exp2(rng.integers(-20, 10, size=(2, 40, 1)))
    qa = DialectFP4(block_size=64).quantize(x[0])
    qw = DialectFP4(block_size=64, select=DialectSelect.MSE).quantize(x[1])
    assert qa.codes.shape == (40, 1, 64)  # (rows, blocks, block size)
    acc, exp = d.dot(qa.codes[:, 0], qw.codes[:, 0], a_dialect=qa.meta[:, 0],
                     w_dialect=qw.meta[:, 0], a_se=qa.scales[:, 0], w_se=qw.scales[:, 0])
    ref = (qa.dequantize() * qw.dequantize()).sum(axis=1)
    assert np.array_equal(d.value(acc, exp), ref)
    assert (qa.scales == 0).any() and (qw.scales == 0).any()  # FP16-subnormal blocks
    assert d.block_end(0, 0) == 2 * (1 - SE_BIAS) - 2 == d.exp_range[0]
    assert d.block_end(31, 31) == 2 * (31 - SE_BIAS) - 2 == d.exp_range[1]
    assert d.exp_bits == 7


def test_decode_operand_text():
    assert dp("int4").decode_operand(0xE, "a") == "0xe (int4 -2)"
    assert dp("fp4_e2m1").decode_operand(0x9, "w") == "0x9 (fp4_e2m1 -0.5)"
    assert dp("dialectfp4").decode_operand(0xD, "a", 15) == "0xd (d15 idx 5 = -5/2)"


@pytest.mark.parametrize("kw,msg", [
    (dict(a_format="int4", w_format="fp4_e2m1"), "must be of one kind"),
    (dict(a_format="int4", w_format="dialectfp4"), "both be 'dialectfp4' or neither"),
    (dict(a_format="fp8_e4m3", w_format="fp8_e4m3"), "NaN/Inf codes"),
    (dict(a_format="uint4", w_format="uint4"), "unsigned"),
    (dict(a_format="int3", w_format="int3"), "unknown format 'int3'"),
    (dict(a_format="int4", w_format="int4", terms=0), "terms must be a positive integer"),
    (dict(a_format="int4", w_format="int4", multiplier="int4"), "DialectFP4 operands only"),
    (dict(a_format="dialectfp4", w_format="dialectfp4", multiplier="int8"), "multiplier must be"),
])
def test_bad_parameters_are_named(kw, msg):
    with pytest.raises(ValueError, match=msg):
        MacDatapath(**kw)


def test_bad_operands_are_named():
    d = dp("dialectfp4")
    with pytest.raises(ValueError, match="need their dialect id"):
        d.unpack(np.array([1]), "a")
    with pytest.raises(ValueError, match=r"a_dialect must lie in \[0, 16\)"):
        d.unpack(np.array([1]), "a", np.array([16]))
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 16\)"):
        dp("int4").product(np.array([16]), np.array([0]))
    with pytest.raises(ValueError, match="a_se must lie"):
        d.block_end(32, 0)
    with pytest.raises(ValueError, match="DialectFP4 MACs only"):
        dp("int4").block_end(1, 1)


def test_kinds_and_specs():
    assert dp("int5").kind is MacKind.INT and dp("int5").a_spec is INT5
    assert dp("int8").code_bits("w") == INT8.bits
    assert dp("dialectfp4").kind is MacKind.DIALECT and dp("dialectfp4").a_spec is None
    assert dp("dialectfp4", multiplier="int4").multiplier is DialectMultiplier.INT4
