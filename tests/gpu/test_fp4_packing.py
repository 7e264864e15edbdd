"""Host-side packers (no GPU needed): exact round trips, and the kernels' decode (prmt
lookups, special-value folding, scale bit placement) emulated in NumPy against the
golden dequantization, for every engine format (from the registry) and odd shapes; formats
and scales the kernels cannot decode exactly are refused by trait."""
import dataclasses

import numpy as np
import pytest

from mactile.golden import BLOCK_FORMATS, FP4_E2M1, FP8_E5M2, NVFP4, RaZeR, RaZeRAct, RaZeRG128, MXFP4, FP16
from mactile.golden.storage import STORAGES, BlockStorage, ScaleWord
from mactile.gpu.formats import (F16_MAGIC, F16_OFFSET, F32_MAGIC, F32_OFFSET, FP4_ENGINE_FORMATS,
                                 EngineScale, engine_scale_kind, golden_proto, kernel_format,
                                 fp4_encode_header, lut_byte, traits_header)
from mactile.gpu.packing import (emulate_frag_values, emulate_rowmajor_values, pack_activation,
                                 pack_w4a16, prmt, quantized_from_arrays, unpack_activation,
                                 unpack_frag, unpack_rowmajor)

#: Every FP4 engine format's default (from the engine registry, so a new one is tested
#: without editing this list), plus the special-value formats at other special values.
FORMATS = [golden_proto(n) for n in FP4_ENGINE_FORMATS] + [
    RaZeR(special_values=(4.5, 9.5)), RaZeRG128(special_values=(2.5, 7.0))]
IDS = list(FP4_ENGINE_FORMATS) + ["razer-4.5-9.5", "g128-2.5-7"]


def _weights(fmt, N, K, rng):
    x = rng.standard_normal((N, K)).astype(np.float32) * rng.uniform(0.1, 3, (N, 1)).astype(np.float32)
    x[:, ::37] *= 9  # loud columns: every special candidate gets used somewhere
    return fmt.quantize(x)


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
@pytest.mark.parametrize("shape", [(64, 128), (70, 256), (130, 384), (1, 640)])
def test_roundtrip_and_emulated_decode(fmt, shape, rng):
    N, K = shape
    if K % fmt.block_size:
        pytest.skip("K not a multiple of the block")
    q = _weights(fmt, N, K, rng)
    p = pack_w4a16(q)  # every layout the format's kernels read
    kf = p.fmt
    unpackers = {"frag": unpack_frag, "rowmajor": unpack_rowmajor}
    emulators = {"frag": emulate_frag_values, "rowmajor": emulate_rowmajor_values}
    for name in p.layouts:
        c, s = unpackers[name](p)
        np.testing.assert_array_equal(c, q.codes.reshape(N, K))
        if not (name == "frag" and kf.scale_kind is EngineScale.POW2_F16):  # rebased bytes
            np.testing.assert_array_equal(s, q.scales.reshape(N, -1))
        v = emulators[name](p)  # without the tensor scale; multiplying it back is exact
        ts = 1.0 if q.tensor_scale is None else float(q.tensor_scale)
        np.testing.assert_array_equal(v * ts, q.dequantize())
    if kf.has_special:  # the special code must actually occur
        assert (q.codes == 0).any()


def test_every_engine_format_is_tested():
    """The list above comes from the engine registry: each FP4 engine format, mxfp4 too."""
    assert {f.name for f in FORMATS} == set(FP4_ENGINE_FORMATS) and "mxfp4" in FP4_ENGINE_FORMATS


def _nvfp4_with_scale(scale_format):
    """An nvfp4 variant whose block scale byte holds ``scale_format`` (no golden class of
    its own: NVFP4's quantizer with another storage entry)."""
    st = dataclasses.replace(STORAGES["nvfp4"], name=f"nvfp4-{scale_format.name}",
                             word=ScaleWord(bits=8, scale_format=scale_format,
                                            scale_bits=scale_format.bits))
    cls = type("NVFP4Variant", (NVFP4,), {"name": st.name, "storage": st})
    return cls()


def test_unsupported_scale_is_refused_by_trait(monkeypatch):
    """An nvfp4 variant with an E5M2 block scale: the bit-placement decode takes an E4M3 byte
    or a power of two only, so the kernels refuse it by naming the scale format -- even if
    the name were registered for the engine (the identity test this replaces sent it down
    the E8M0 path, whose emulation disagreed with golden on most values)."""
    fmt = _nvfp4_with_scale(FP8_E5M2)
    with pytest.raises(ValueError, match="no exact decode of nvfp4-fp8_e5m2's fp8_e5m2 block scale"):
        engine_scale_kind(fmt.storage)
    monkeypatch.setattr("mactile.gpu.formats.FP4_ENGINE_FORMATS",
                        FP4_ENGINE_FORMATS + (fmt.name,))
    with pytest.raises(ValueError, match="fp8_e5m2 block scale"):
        kernel_format(fmt)


def test_engine_scale_kind_from_traits():
    """The scale path follows from the storage's traits (no format name is read)."""
    got = {n: engine_scale_kind(STORAGES[n]) for n in FP4_ENGINE_FORMATS}
    assert got == {"nvfp4": EngineScale.E4M3, "mxfp4": EngineScale.POW2_F16,
                   "razer": EngineScale.BITS_F16, "razer-g128": EngineScale.FP32}
    # the same traits under another name give the same path
    renamed = dataclasses.replace(STORAGES["nvfp4"], name="my-fp4")
    assert engine_scale_kind(renamed) is EngineScale.E4M3


@pytest.mark.parametrize("name", sorted(n for n, c in BLOCK_FORMATS.items()
                                        if c.storage is not None and c.storage.element != FP4_E2M1))
def test_non_fp4_elements_refused(name, rng):
    """The OCP MX family's FP8/FP6/INT8 elements: the engine runs FP4 elements only, and says so."""
    q = BLOCK_FORMATS[name]().quantize(rng.standard_normal((4, 64)).astype(np.float32))
    with pytest.raises(ValueError, match=f"FP4 E2M1 elements only: {name} has"):
        pack_w4a16(q)


def test_nan_scale_refused_by_class(rng):
    """A NaN block-scale code (E8M0 0xFF, a class of the scale field) is refused when packing."""
    q = MXFP4().quantize(rng.standard_normal((4, 64)).astype(np.float32))
    scales = q.scales.copy()
    scales.flat[1] = 0xFF
    bad = quantized_from_arrays(q.format, q.codes.reshape(4, 64), scales.reshape(4, 2), None)
    with pytest.raises(ValueError, match="nan block scale \\(code 0xff\\)"):
        pack_w4a16(bad)


def test_padding_is_inert(rng):
    q = _weights(RaZeR(), 65, 48, rng)  # pads N to 256 (frag; 64 rowmajor), K to 64
    p = pack_w4a16(q)
    lay = p.layout("frag")
    assert lay["codes"].shape[0] == 256 // 64 and lay["K_pad"] == 64
    full = emulate_frag_values(pack_w4a16(quantized_from_arrays(
        q.format, np.pad(q.codes.reshape(65, 48), ((0, 63), (0, 16)), constant_values=8),
        np.pad(q.scales, ((0, 63), (0, 1))), q.tensor_scale)))
    assert (full[65:] == 0).all() and (full[:, 48:] == 0).all()


def test_razer_g128_scale_zero_blocks_become_zero_codes_with_scale_one(rng):
    """The engine divides by razer-g128's block scales (RESCALE): the frag packing leaves
    none of them 0. Blocks of scale 0 (whole rows, first, last, scattered, padding) get the
    zero code and scale 1, metadata bits kept; the emulated decode still equals golden."""
    from mactile.golden.storage import ZERO_CODE
    fmt = RaZeRG128()
    N, K = 70, 1024
    nb = K // fmt.block_size
    codes = rng.integers(0, 16, (N, K), dtype=np.uint8)
    sc = rng.integers(1, 0x4000, (N, nb)).astype(np.uint16)
    sc[rng.random((N, nb)) < 0.2] = 0
    sc[3] = 0
    sc[:, 0] = 0
    sc[:, -1] = 0
    sc |= (rng.integers(0, 4, (N, nb)) << 14).astype(np.uint16)
    q = quantized_from_arrays(fmt, codes, sc, 1.0)
    p = pack_w4a16(q, layouts=("frag", "rowmajor"))
    kf = kernel_format(fmt)
    assert (p.layout("frag")["scales"] & kf.scale_mask != 0).all()
    np.testing.assert_array_equal(emulate_frag_values(p), q.dequantize())
    np.testing.assert_array_equal(emulate_rowmajor_values(p), q.dequantize())
    c, s = unpack_frag(p)
    zero = (sc & kf.scale_mask) == 0
    np.testing.assert_array_equal(s, np.where(zero, (sc & 0xC000) | 0x3C00, sc))
    np.testing.assert_array_equal(c, np.where(np.repeat(zero, fmt.block_size, axis=1), ZERO_CODE, codes))
    c, s = unpack_rowmajor(p)  # the CUDA-core layout keeps the golden codes
    np.testing.assert_array_equal(s, sc)


def test_prmt_model_matches_ptx_semantics():
    # byte selection, and bit 3 of a selector nibble replicating the chosen byte's sign
    a, b = np.uint32(0x83828180), np.uint32(0x07060504)
    assert prmt(a, b, 0x3210) == 0x83828180
    assert prmt(a, b, 0x7654) == 0x07060504
    assert prmt(a, b, 0x0123) == 0x80818283
    assert prmt(a, b, 0x8888) == 0xFFFFFFFF  # byte 0 = 0x80: sign set
    assert prmt(a, b, 0xCCCC) == 0x00000000  # byte 4 = 0x04: sign clear


def test_lut_words_follow_golden_tables():
    for fmt in FORMATS:
        kf = kernel_format(fmt)
        bytes_ = [(w >> (8 * i)) & 0xFF for w in kf.lut for i in range(4)]
        from mactile.golden import FP4_E2M1
        for code in range(16):
            v = 0.0 if (kf.has_special and code in (0, 8)) else FP4_E2M1.values[code]
            assert bytes_[code] == lut_byte(v) and bytes_[code] < 128
        if kf.has_special:
            sp = [(kf.specials_word >> (8 * i)) & 0xFF for i in range(4)]
            assert sp == [lut_byte(v) for v in kf.special_values_by_meta()]


def test_magic_constants():
    assert float(FP16.values[F16_MAGIC]) == 256.0 and F16_OFFSET == 272.0
    assert np.uint32(F32_MAGIC).view(np.float32) == 128.0 and F32_OFFSET == 192.0
    h = traits_header()
    assert "template <> struct Fmt<2>" in h and "SCALE_MASK = 16383u" in h
    assert "(a >= 0x1.8000000000000p-1f)" in fp4_encode_header()  # 0.75 ties up to code 2


def test_errors(rng):
    with pytest.raises(ValueError, match="no GPU kernel"):
        pack_w4a16(RaZeRAct().quantize(rng.standard_normal((4, 64)).astype(np.float32)))
    with pytest.raises(ValueError, match="no 'rowmajor' kernel layout"):
        pack_w4a16(MXFP4().quantize(rng.standard_normal((4, 64)).astype(np.float32)), layouts=("rowmajor",))
    with pytest.raises(ValueError, match="2-D"):
        pack_w4a16(NVFP4().quantize(rng.standard_normal((2, 4, 32)).astype(np.float32)))
    with pytest.raises(ValueError, match="unknown layout"):
        pack_w4a16(NVFP4().quantize(rng.standard_normal((4, 32)).astype(np.float32)), layouts=("x",))
    with pytest.raises(TypeError, match="Quantized"):
        pack_w4a16(np.zeros((4, 32)))
    with pytest.raises(ValueError, match="block size 16"):
        kernel_format(NVFP4(block_size=32))
    p = pack_w4a16(NVFP4().quantize(rng.standard_normal((4, 32)).astype(np.float32)), layouts=("frag",))
    with pytest.raises(ValueError, match="no 'rowmajor' layout"):
        p.layout("rowmajor")


def test_activation_pack_roundtrip(rng):
    x = rng.standard_normal((5, 272)).astype(np.float16)
    q = NVFP4().quantize(x)
    a = pack_activation(q)
    assert a.codes.shape == (5, 256) and a.scales.shape == (5, 32)
    u = unpack_activation(a)
    np.testing.assert_array_equal(u.codes, q.codes)
    np.testing.assert_array_equal(u.scales, q.scales)
    with pytest.raises(ValueError, match="nvfp4"):
        pack_activation(RaZeR().quantize(x.astype(np.float32)))


def test_bit_placement_layout():
    """nvfp4's tensor-core decode: the frag word is a bit permutation of the eight codes;
    every code in every slot decodes (rotations + masks, the kernel's op sequence) to
    v * 2^-14 exactly, the other half of its register stays 0; the layout costs 11 integer
    instructions per word (the minimum of the exhaustive search in docs/gpu.md)."""
    from mactile.golden import FP4_E2M1
    from mactile.gpu.formats import (BP_FRAG_SLOTS, BP_LOG2, BP_ROTATIONS, bp_bit_positions,
                                     bp_decode_word)
    pos = bp_bit_positions()
    assert sorted(pos.ravel().tolist()) == list(range(32))
    for n, (reg, half) in enumerate(BP_FRAG_SLOTS):
        codes = np.arange(16, dtype=np.uint32)
        w = np.zeros(16, np.uint32)
        for i in range(4):
            w |= ((codes >> i) & 1) << np.uint32(pos[n, i])
        regs = bp_decode_word(w)[:, reg]
        h = ((regs >> np.uint32(16 * half)) & 0xFFFF).astype(np.uint16).view(np.float16)
        assert np.array_equal(h.astype(np.float64), FP4_E2M1.values * 2.0 ** BP_LOG2)
        assert not ((regs >> np.uint32(16 * (1 - half))) & 0xFFFF).any()
    rots = {r for m, s in BP_ROTATIONS for r in (m, s) if r}
    cost = len(rots) + sum(1 if m == s else 2 for m, s in BP_ROTATIONS)
    assert cost == 11


def test_bit_placement_mismatch_is_visible(rng):
    """The emulated decode of a word with two swapped bit positions differs from golden."""
    from mactile.gpu.formats import bp_decode_word
    q = NVFP4().quantize(rng.standard_normal((64, 64)).astype(np.float32))
    p = pack_w4a16(q, layouts=("frag",))
    ref = q.dequantize().astype(np.float64) / np.float64(q.tensor_scale)
    np.testing.assert_array_equal(emulate_frag_values(p), ref)
    p.layouts["frag"]["codes"] = p.layouts["frag"]["codes"] ^ np.uint32(1 << 9)  # flip a mantissa bit
    assert not np.array_equal(emulate_frag_values(p), ref)
    assert bp_decode_word(np.uint32(0)).shape == (4,)


def test_tile_aligned_ctas():
    """Stripes of C = tile_aligned_ctas(RT, KU, slots) CTAs end inside a row tile only at
    their own end (at most one reduction per CTA), and C never exceeds the slots."""
    from mactile.gpu.w4a4 import tile_aligned_ctas
    for RT, KU, slots in [(128, 16, 132), (128, 16, 264), (64, 28, 264), (448, 8, 264), (96, 8, 396),
                          (160, 10, 132), (80, 50, 264), (3, 3, 6), (4, 3, 12), (1, 1, 132)]:
        C = tile_aligned_ctas(RT, KU, slots)
        U = RT * KU
        assert 1 <= C <= max(slots, 1) and C <= U
        for c in range(C):
            b, e = c * U // C, (c + 1) * U // C
            # the stripe's tiles: whole tiles, or one part of a single tile
            assert (b % KU == 0 and e % KU == 0) or (b // KU == (e - 1) // KU)


def test_non_default_convention_refused(rng):
    """The GPU kernels decode the default (ocp) storage only: other conventions are refused
    by name, never silently packed."""
    from mactile.golden import convention_for
    x = rng.standard_normal((4, 64)).astype(np.float32)
    for fmt in (NVFP4(convention=convention_for("nvfp4", "torchao")),
                MXFP4(convention=convention_for("mxfp4", "microxcaling"))):
        with pytest.raises(ValueError, match="default \\(ocp\\) convention"):
            pack_w4a16(fmt.quantize(x), layouts=("frag",))
