"""The OCP MX family's generic quantizer (golden/mx.py) and the classifier record.

Every MX storage entry is tested here without a line per format: its element codes equal
ml_dtypes' casts of the scaled block (bit for bit), its values equal an independent
transcription of microxcaling's ``_quantize_mx`` (``round="even"``), and the named corners
(zero block, saturation, ties, the smallest scale, the NaN scale) hold."""
import ml_dtypes
import numpy as np
import pytest

from mactile.golden import (BLOCK_FORMATS, E8M0, FP8_E4M3, FP8_E5M2, FP16, CodeClass, IntFormat)
from mactile.golden.storage import MX_FAMILY, STORAGES, ScaleKind, ScaleWord

#: ml_dtypes' type of each MX element format (by element-format name).
ML = {"fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2,
      "fp6_e2m3": ml_dtypes.float6_e2m3fn, "fp6_e3m2": ml_dtypes.float6_e3m2fn}


def _blocks(rng, n=400):
    """Blocks of 32 spanning magnitudes, with zeros, ties and saturating maxima."""
    x = rng.standard_normal((n, 32)) * np.exp2(rng.integers(-30, 30, (n, 1)))
    x[::7, 3] = 0.0
    x[::11] = 0.0  # whole zero blocks
    x[5::13, 0] = -0.0
    return x


def test_family_is_registered():
    assert set(MX_FAMILY) <= set(BLOCK_FORMATS)
    for n in MX_FAMILY:
        s = STORAGES[n]
        assert (s.block_size, s.word.scale_format, s.word.kind, s.has_tensor_scale) == (
            32, E8M0, ScaleKind.POW2, False)


@pytest.mark.parametrize("name", MX_FAMILY)
def test_elements_match_ml_dtypes(name, rng):
    fmt = BLOCK_FORMATS[name]()
    st = fmt.storage
    x = _blocks(rng)
    q = fmt.quantize(x)
    e = q.scales.reshape(-1).astype(np.int64) - E8M0.bias
    scaled = np.ldexp(x, -e[:, None])
    el = st.element
    if isinstance(el, IntFormat):
        ref = np.clip(np.rint(scaled * 2.0 ** -st.element_log2), -el.max_int, el.max_int)
        ref = ref.astype(np.int8).view(np.uint8)
    else:
        m = float(el.max_value)
        ref = np.clip(scaled, -m, m).astype(ML[el.name]).view(np.uint8)
    np.testing.assert_array_equal(q.codes.reshape(ref.shape), ref)


def _microxcaling(x, ebits, mbits, emax, max_norm):
    """microxcaling mx/mx_ops.py _quantize_mx (shared_exp_method="max", axes=-1, block 32,
    scale_bits=8, round="even"; flush_fp32_subnorms off), transcribed in NumPy."""
    amax = np.abs(x).max(axis=-1, keepdims=True)
    shared = np.floor(np.log2(amax + (amax == 0)))  # _shared_exponents: log2(0) guarded
    shared = np.where(amax == 0, -127.0, shared - emax)
    shared = np.clip(shared, -127, 127)
    a = x / 2.0 ** shared
    # _quantize_elemwise_core(a, bits=mbits, exp_bits=ebits, max_norm, round="even",
    # saturate_normals=True, allow_denorm=True)
    if ebits == 0:  # integers: scale by 2**(mbits - 2)
        s = 2.0 ** (mbits - 2)
        out = np.rint(a * s) / s
    else:
        min_exp = -(2 ** (ebits - 1)) + 2
        pe = np.floor(np.log2(np.abs(a) + (a == 0)))
        pe = np.maximum(pe, min_exp)
        s = 2.0 ** (mbits - 2) / 2.0 ** pe
        out = np.rint(a * s) / s
    out = np.clip(out, -max_norm, max_norm)
    return out * 2.0 ** shared


#: microxcaling's formats.py _get_format_params: (ebits, mbits incl. sign and hidden bit, emax,
#: max_norm) by MX name.
MICROXCALING = {"mxfp8-e4m3": (4, 5, 8, 448.0), "mxfp8-e5m2": (5, 4, 15, 57344.0),
                "mxfp6-e3m2": (3, 4, 4, 28.0), "mxfp6-e2m3": (2, 5, 2, 7.5),
                "mxint8": (0, 8, 0, 127 / 64)}


@pytest.mark.parametrize("name", MX_FAMILY)
def test_values_match_microxcaling_rules(name, rng):
    fmt = BLOCK_FORMATS[name]()
    x = _blocks(rng)
    got = fmt.dequantize(fmt.quantize(x))
    ref = _microxcaling(x, *MICROXCALING[name])
    np.testing.assert_array_equal(got, ref)  # -0 and +0 compare equal: values, not codes


@pytest.mark.parametrize("name", MX_FAMILY)
def test_named_corners(name):
    fmt = BLOCK_FORMATS[name]()
    st = fmt.storage
    top = float(st.element_values()[np.isfinite(st.element_values())].max())
    # zero block: scale code 0 (2**-127), zero codes; the largest element value round-trips
    q = fmt.quantize(np.zeros((1, 32)))
    assert int(q.scales.flat[0]) == 0 and not q.dequantize().any()
    x = np.zeros((1, 32))
    x[0, 0] = top
    q = fmt.quantize(x)
    assert int(q.scales.flat[0]) == E8M0.bias and q.dequantize()[0, 0] == top
    # saturation: just below the next binade clamps to the largest element value
    x[0, 0] = 2.0 ** (st.element_emax + 1) * (1 - 2.0 ** -20)
    assert fmt.quantize(x).dequantize()[0, 0] == top
    # the smallest scale clamps at 2**-127; the NaN scale dequantizes to NaN
    x[0, 0] = 2.0 ** -200
    assert int(fmt.quantize(x).scales.flat[0]) == 0
    q = fmt.quantize(np.ones((1, 32)))
    q.scales[...] = 0xFF
    assert np.isnan(q.dequantize()).all()
    with pytest.raises(Exception, match="2\\*\\*127"):
        fmt.quantize(np.full((1, 32), 2.0 ** (E8M0.bias + 1 + st.element_emax)))


def test_classifier_record():
    """Every code of every catalog format is in exactly one class; Inf/NaN where IEEE/FN say."""
    from mactile.golden import ELEMENT_FORMATS
    for f in ELEMENT_FORMATS.values():
        if f.bits > 16:
            continue
        c = f.classes
        allc = sorted(x for _, codes in c.items() for x in codes)
        assert allc == list(range(f.code_count)), f.name
    assert FP8_E5M2.classes.inf == (0x7C, 0xFC) and len(FP8_E5M2.classes.nan) == 6
    assert FP8_E4M3.classes.inf == () and FP8_E4M3.classes.nan == (0x7F, 0xFF)
    assert E8M0.classes.zero == () and E8M0.classes.of(0) is CodeClass.NORMAL
    assert FP16.classes.of(0x0001) is CodeClass.SUBNORMAL and FP16.classes.of(0x7C00) is CodeClass.INF
    assert BLOCK_FORMATS["mxint8"]().storage.element.classes.present() == (CodeClass.ZERO, CodeClass.NORMAL)


def test_scale_max_is_finite_and_inf_codes_are_named():
    """A scale field that holds Inf codes: scale_max is the largest finite value (not +Inf),
    the Inf codes are a class of the word; the tensor-core operand refuses them by name."""
    from mactile.golden.tensorcore import OperandSpec
    import dataclasses
    w = ScaleWord(bits=8, scale_format=FP8_E5M2, scale_bits=8)
    assert w.scale_max == 57344.0 and w.inf_codes == (0x7C, 0xFC)
    st = dataclasses.replace(STORAGES["nvfp4"], name="nvfp4-e5m2", word=w)
    with pytest.raises(ValueError, match="no Inf block scale.*fp8_e5m2 scale codes \\[124, 252\\]"):
        OperandSpec.from_storage(st)
    with pytest.raises(ValueError, match="takes FP4 E2M1 elements"):
        OperandSpec.from_storage(STORAGES[MX_FAMILY[0]])


def test_a_decoder_mapping_inf_to_finite_fails_the_class_check():
    """The check every corner suite makes with the record: each class decodes to its class.
    A scale decode that reads E5M2's Inf as 2**16 (the finite binade's pattern, as a decode
    without the record does) fails it."""
    f = FP8_E5M2
    def classes_ok(decode):
        for cls, codes in f.classes.items():
            v = decode(np.array(codes, dtype=np.int64))
            want = {CodeClass.INF: np.isinf, CodeClass.NAN: np.isnan,
                    CodeClass.ZERO: lambda a: a == 0}.get(cls, lambda a: np.isfinite(a) & (a != 0))
            if len(codes) and not want(v).all():
                return False
        return True
    assert classes_ok(f.decode)

    def inf_as_finite(codes):  # the exponent field read as a binade, Inf's mantissa 0 as 1.0
        s, e, m = f.fields(codes)
        v = np.ldexp(1.0 + m / 4.0, e - f.bias)
        v = np.where(e == 0, np.ldexp(m / 4.0, 1 - f.bias), v)
        v = np.where((e == 31) & (m != 0), np.nan, v)
        return np.where(s == 1, -v, v)
    assert np.array_equal(inf_as_finite(np.array([0x7C])), [2.0 ** 16])
    assert not classes_ok(inf_as_finite)
