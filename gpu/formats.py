"""Kernel-side descriptions of the FP4 weight formats, derived from the golden specs.

Every constant a kernel needs (the FP4 lookup table, the special values, how a block
scale code becomes a number) is computed here from :mod:`mactile.golden` objects and
handed to the CUDA templates, either as kernel arguments (the lookup-table words, which
depend on a format *instance*'s special values) or as a generated traits header (what
depends only on the format class). No table is typed by hand in a ``.cu`` file.

The decode scheme shared by all kernels
----------------------------------------
An FP4 code ``c`` (4 bits, sign-magnitude) becomes the *LUT byte* ``b = 4 v + 64`` where
``v`` is the value the format gives that code (FP4 E2M1 value, or the block's special
value for RaZeR's code 0). ``b`` lies in ``[26, 102]`` for every value RaZeR allows
(``|v| <= 9.5``), so its most significant bit is 0. Eight codes in a 32-bit word give
eight bytes with two ``prmt`` per four codes::

    bytes = prmt(P0, P1, codes) | prmt(N0, N1, codes ^ 0x8888)

``P0:P1`` hold the bytes of codes 0..7 and ``N0:N1`` those of codes 8..15. In the first
``prmt`` a negative code (selector nibble bit 3 set) *sign-replicates* a byte whose MSB
is 0 and so yields 0x00; the second ``prmt`` does the same for positive codes; the OR
merges them. For RaZeR, byte 0 of ``P0`` (code 0) is replaced per block by the byte of
the special value chosen by the block's two metadata bits (one more ``prmt`` from the
word :attr:`KernelFormat.specials_word`): the special value is folded into the lookup.

A byte becomes a number by placing it into a constant exponent (exact, no conversion
instruction): FP16 ``0x5C00 | b`` is ``256 + b/4 = 272 + v``; FP32 ``0x43000000 | b<<16``
is ``128 + b = 192 + 4v``. One FMA then removes the offset and applies the block scale.

The bit-placement ("bp") decode of ``nvfp4`` (no special value)
-----------------------------------------------------------------
The three magnitude bits of an E2M1 code moved into FP16 bits ``[11:9]`` (exponent LSBs and
the mantissa MSB) and its sign into bit 15 give an FP16 word whose value is exactly
``v * 2**-14`` for normals *and* subnormals (exponent field 0 is an FP16 subnormal:
``0.5 m * 2**-14``), because both formats have subnormals and ``15 - 1 = 14`` is the bias
difference. No table, no offset: a register of eight codes becomes four f16x2 words with
rotations and masks only. The offline shuffle puts the eight codes' bits where one
``rotl(w, r) & mask`` (or, for two of the words, a magnitude rotation and a sign rotation
merged by one LOP3) lands them; :data:`BP_ROTATIONS` is the cheapest such layout (11
instructions per 8 codes, found by exhaustive search over all rotation pairs; no layout
needs fewer, since no four rotations of the FP16 pattern tile 32 bits). The kernel writes a
rotation whose masked bits do not wrap around as a left shift (``(w << r) & mask``, the same
bits), which ptxas may issue on the FMA pipe (IMAD.SHL) instead of the integer pipe: 4 of the
5 shifts of these rotations qualify (in the 8-token kernel ptxas made 27 of its 32 per k-loop
trip IMAD.SHL). The FP16 scale
``s * 2**BP_SCALE_LOG2`` multiplies it (one HMUL2 per two codes, exact), and the kernel's
output scale carries the remaining power of two.
"""
from __future__ import annotations

import enum
import math
import types
from dataclasses import dataclass

import numpy as np

from mactile.golden import (FP4_E2M1, FP8_E4M3, MXFP4, NVFP4, FP16, FP32,
                            NestedFP, NestedFP8, RaZeR, RaZeRG128, require_default_convention)
from mactile.golden.block import BlockFormat
from mactile.golden.storage import BlockStorage, ScaleKind

__all__ = ["BP_ROTATIONS", "BP_MAG_LSB", "BP_LOG2", "BP_SCALE_LOG2", "BP_FRAG_SLOTS", "bp_masks",
           "bp_bit_positions", "bp_decode_word", "KernelFormat", "kernel_format", "kernel_scale_words", "lut_byte", "traits_header", "fp4_encode_header", "fp4_decode_header",
           "prelude", "reset_header", "FORMAT_IDS", "FP4_ENGINE_FORMATS", "ENGINE_FORMATS",
           "engine_traits_header", "engine_format_id", "golden_proto", "POW2_WINDOW",
           "F16_MAGIC", "F16_OFFSET", "F32_MAGIC", "F32_OFFSET", "LUT_OFFSET", "LUT_SCALE",
           "EngineScale", "EngineFormat", "ENGINE", "engine_format", "engine_scale_kind",
           "NESTEDFP_FORMATS", "nestedfp_format"]

#: b = LUT_SCALE * v + LUT_OFFSET.
LUT_SCALE, LUT_OFFSET = 4, 64
#: FP16 word ``F16_MAGIC | b`` has the value ``256 + b/4``; subtract ``F16_OFFSET`` for v.
F16_MAGIC = 0x5C00
F16_OFFSET = 256 + LUT_OFFSET / LUT_SCALE  # 272.0
#: FP32 word ``F32_MAGIC | (b << 16)`` has the value ``128 + b``; minus F32_OFFSET is 4v.
F32_MAGIC = 0x43000000
F32_OFFSET = 128.0 + LUT_OFFSET  # 192.0

#: Template ids of the formats of the mma.sync/CUDA-core kernels (``Fmt<ID>`` in
#: kernels/fp4_common.cuh).
FORMAT_IDS = {"nvfp4": 0, "razer": 1, "razer-g128": 2}


@dataclass(frozen=True)
class EngineFormat:
    """One weight format of the GEMM engine (kernels/engine.cu): its template id and the
    golden class it runs. Ids are explicit and append-only (a new format takes the next
    id; no existing id moves, so no cubin of another format changes)."""

    name: str
    #: Template id (``EngineFmt<FMT_...>``).
    fmt_id: int
    #: The golden block-format class.
    golden: type

    @property
    def storage(self) -> BlockStorage | None:
        """The golden block storage (FP4 block formats), or None (NestedFP's byte planes)."""
        return self.golden.storage

    @property
    def planes(self) -> int:
        """NestedFP byte planes the engine reads per weight (FP16 mode: upper and lower, 2;
        FP8 mode: the upper, 1), from the golden ``bits_per_element``; 0 for FP4 formats."""
        if self.storage is not None:
            return 0
        return int(self.golden().bits_per_element) // 8

    @property
    def mode(self) -> str | None:
        """NestedFP mode of a plane format (``"fp16"``/``"fp8"``, the ``NestedFPLinear``
        argument: the width it reads), None for FP4 block formats."""
        return None if self.storage is not None else f"fp{8 * self.planes}"

    @property
    def fp8(self) -> bool:
        """Whether the engine multiplies E4M3 on the FP8 wgmma (NestedFP's FP8 mode)."""
        return self.planes == 1


#: Every weight format of the engine by name (explicit ids, append-only).
ENGINE: dict[str, EngineFormat] = {e.name: e for e in (
    EngineFormat("nvfp4", 0, NVFP4),
    EngineFormat("mxfp4", 1, MXFP4),
    EngineFormat("razer", 2, RaZeR),
    EngineFormat("razer-g128", 3, RaZeRG128),
    EngineFormat("nestedfp16", 4, NestedFP),
    EngineFormat("nestedfp8", 5, NestedFP8),
)}
if sorted(e.fmt_id for e in ENGINE.values()) != list(range(len(ENGINE))):
    raise AssertionError("engine format ids must be 0..n-1, each once")
#: FP4 weight formats of the GEMM engine (kernels/engine.cu), in id order.
FP4_ENGINE_FORMATS = tuple(n for n, e in sorted(ENGINE.items(), key=lambda i: i[1].fmt_id)
                           if e.storage is not None)
#: NestedFP's plane formats of the engine, in id order.
NESTEDFP_FORMATS = tuple(n for n, e in sorted(ENGINE.items(), key=lambda i: i[1].fmt_id)
                         if e.storage is None)
#: Every weight format of the engine, in template-id order (the ids are generated into
#: ``EngineFmt<FMT_...>``; no kernel types a number).
ENGINE_FORMATS = tuple(sorted(ENGINE, key=lambda n: ENGINE[n].fmt_id))


def nestedfp_format(mode: str) -> EngineFormat:
    """The engine's NestedFP plane format of a ``NestedFPLinear`` mode (``"fp16"``/``"fp8"``)."""
    for n in NESTEDFP_FORMATS:
        if ENGINE[n].mode == mode:
            return ENGINE[n]
    raise ValueError(f"no NestedFP engine format for mode {mode!r}; choose from "
                     f"{[ENGINE[n].mode for n in NESTEDFP_FORMATS]}")


def engine_format(name: str) -> EngineFormat:
    """The engine's record of a weight format name."""
    try:
        return ENGINE[name]
    except KeyError:
        raise ValueError(f"no engine format {name!r}; choose from {ENGINE_FORMATS}") from None


def lut_byte(v: float) -> int:
    """LUT byte of a value: ``4 v + 64``, checked to fit 7 bits exactly."""
    b = LUT_SCALE * v + LUT_OFFSET
    if b != int(b) or not 0 <= b < 128:
        raise ValueError(f"value {v} has no 7-bit LUT byte (4 v + 64 = {b})")
    return int(b)


def _check_magic_constants() -> None:
    # The FP16/FP32 "magic" placements are exact only with these exponents: derive and check.
    assert float(FP16.values[F16_MAGIC]) == 256.0
    assert float(FP16.values[F16_MAGIC | 1]) - 256.0 == 1.0 / LUT_SCALE  # ulp = 1/4
    assert np.frombuffer(np.uint32(F32_MAGIC).tobytes(), np.float32)[0] == 128.0
    assert np.frombuffer(np.uint32(F32_MAGIC | (1 << 16)).tobytes(), np.float32)[0] == 129.0


_check_magic_constants()

#: FP16 bit of the code's least significant magnitude bit (the E2M1 mantissa bit goes to
#: the FP16 mantissa MSB, the two exponent bits to the FP16 exponent LSBs).
BP_MAG_LSB = FP16.man_bits - FP4_E2M1.man_bits  # 9
#: log2 of the bp decode's value factor: the half is v * 2**BP_LOG2.
BP_LOG2 = FP4_E2M1.bias - FP16.bias  # -14
#: FP16 scale factor exponent of the bp path: E4M3 scale * 2**7 is the largest power of two
#: keeping every ``v * s * 2**(BP_LOG2 + k)`` exact and finite in FP16 (checked below).
BP_SCALE_LOG2 = 7
#: (magnitude rotation, sign rotation) of the frag word for A-fragment registers 0..3:
#: register j = ((rotl(w, m) & MAG) | (rotl(w, s) & SIGN)), a single ``rotl & (MAG|SIGN)``
#: when m == s. Exhaustive search: 11 instructions per word is the minimum (docs/gpu.md).
BP_ROTATIONS = ((0, 0), (13, 13), (3, 15), (6, 14))
#: (A-fragment register, half) of the frag word's eight codes in nibble order (nibbles 0-3:
#: row g at k 2t, 2t+1, 2t+8, 2t+9; 4-7: row g+8): m16n8k16 A registers are
#: a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..).
BP_FRAG_SLOTS = ((0, 0), (0, 1), (2, 0), (2, 1), (1, 0), (1, 1), (3, 0), (3, 1))


def bp_bit_positions() -> np.ndarray:
    """``pos[n, i]``: bit of the bp frag word that holds bit ``i`` (0..3; 3 = sign) of the
    code in nibble slot ``n`` (0..7). A permutation of 0..31 (checked)."""
    sign_bit = FP16.bits - 1
    pos = np.zeros((8, 4), dtype=np.int64)
    for n, (reg, half) in enumerate(BP_FRAG_SLOTS):
        m, sg = BP_ROTATIONS[reg]
        for i in range(3):
            pos[n, i] = (BP_MAG_LSB + 16 * half + i - m) % 32
        pos[n, 3] = (sign_bit + 16 * half - sg) % 32
    if sorted(pos.ravel().tolist()) != list(range(32)):
        raise AssertionError("BP_ROTATIONS do not give a bit permutation")
    return pos


def _rotl(w, r: int):
    w = np.asarray(w, dtype=np.uint64) & np.uint64(0xFFFFFFFF)
    if r == 0:
        return w.astype(np.uint32)
    return (((w << np.uint64(r)) | (w >> np.uint64(32 - r))) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def bp_masks() -> tuple[int, int]:
    """(magnitude mask, sign mask) of an f16x2 word in the bp decode."""
    mag = sum(1 << (BP_MAG_LSB + i + 16 * h) for i in range(3) for h in range(2))
    sign = sum(1 << (FP16.bits - 1 + 16 * h) for h in range(2))
    return mag, sign


def bp_decode_word(words) -> np.ndarray:
    """NumPy model of the kernel's bp decode: uint32 words -> ``uint32 [..., 4]`` f16x2
    words of A-fragment registers 0..3 (rotations and masks exactly as the kernel)."""
    mag, sign = bp_masks()
    out = []
    for m, sg in BP_ROTATIONS:
        out.append((_rotl(words, m) & np.uint32(mag)) | (_rotl(words, sg) & np.uint32(sign)))
    return np.stack(out, -1).astype(np.uint32)


def _check_bp() -> None:
    # every E2M1 code in every slot decodes to v * 2^BP_LOG2, and the scaled product is exact
    pos = bp_bit_positions()
    for n, (reg, half) in enumerate(BP_FRAG_SLOTS):
        for c in range(16):
            w = sum(((c >> i) & 1) << int(pos[n, i]) for i in range(4))
            h = int(bp_decode_word(np.uint32(w))[reg]) >> (16 * half) & 0xFFFF
            other = int(bp_decode_word(np.uint32(w))[reg]) >> (16 * (1 - half)) & 0xFFFF
            val = float(np.uint16(h).view(np.float16))
            assert val == float(FP4_E2M1.values[c]) * 2.0 ** BP_LOG2 and other == 0, (n, c)
    hv = FP4_E2M1.values.astype(np.float64) * 2.0 ** BP_LOG2
    h16 = hv.astype(np.float16)
    for sc in FP8_E4M3.values[np.isfinite(FP8_E4M3.values)]:
        s16 = np.float16(float(sc) * 2.0 ** BP_SCALE_LOG2)
        assert float(s16) == float(sc) * 2.0 ** BP_SCALE_LOG2
        prod = (h16.astype(np.float32) * np.float32(s16)).astype(np.float16)  # one rounding
        assert np.array_equal(prod.astype(np.float64), hv * float(sc) * 2.0 ** BP_SCALE_LOG2)


_check_bp()


class EngineScale(enum.Enum):
    """How the kernels turn a block's scale code into the factor of its FP4 values: the
    one scale kind that the packer, the NumPy emulation and the generated kernel traits
    (``EngineFmt<F>::SCALE_KIND``, the values are the C++ names) all read. Derived from
    the storage's traits by :func:`engine_scale_kind`; member order is the C++ enum's."""

    #: Bit-placement decode, E4M3 scale byte converted by the hardware
    #: (``cvt.rn.f16x2.e4m3x2``), times ``2**BP_SCALE_LOG2``.
    E4M3 = "SCALE_E4M3"
    #: LUT decode, the scale field's bits placed into FP16 times a power of two.
    BITS_F16 = "SCALE_BITS_F16"
    #: Bit-placement decode, a power-of-two (E8M0) scale rebased into FP16's exponent
    #: window per matrix (:func:`mactile.gpu.packing.pow2_kernel_scales`).
    POW2_F16 = "SCALE_POW2_F16"
    #: LUT decode, the (16-bit) scale applied in FP32: accumulators kept in units of the
    #: block's scale (``RESCALE``).
    FP32 = "SCALE_FP32"
    #: No block scale (NestedFP's planes).
    NONE = "SCALE_NONE"


def _f16_bits_exact(word) -> bool:
    """Whether placing every finite scale-field code into FP16 bits and multiplying by
    ``2**(15 - bias - prescale)`` (the SCALE_BITS_F16 decode, one HMUL2) gives the golden
    scale times ``2**-prescale`` exactly (NaN/Inf codes are refused when packing)."""
    f = word.scale_format
    if f.man_bits > FP16.man_bits or f.exp_bits > FP16.exp_bits or not f.subnormals:
        return False
    codes = np.arange(word.magnitude_mask + 1)
    vals = f.values[codes]
    ok = np.isfinite(vals)
    pre = max(0, math.ceil(math.log2(F16_OFFSET * word.scale_max / float(FP16.max_value))))
    bits = (codes[ok] << (FP16.man_bits - f.man_bits)).astype(np.uint16)
    if ((bits >> FP16.man_bits) & 0x1F).max(initial=0) == 0x1F:  # would place an FP16 Inf/NaN
        return False
    mul = np.float16(2.0 ** (FP16.bias - f.bias - pre))
    if float(mul) != 2.0 ** (FP16.bias - f.bias - pre):
        return False
    with np.errstate(over="ignore", under="ignore"):
        got = (bits.view(np.float16).astype(np.float32) * np.float32(mul)).astype(np.float16)
    return bool(np.array_equal(got.astype(np.float64), vals[ok] * 2.0 ** -pre))


def _f32_bits_exact(word) -> bool:
    """Whether the FP32 placement of :func:`kernel_scale_words` is exact for every finite
    scale-field code (the SCALE_FP32 decode)."""
    f = word.scale_format
    if f.man_bits > FP32.man_bits or f.exp_bits > FP32.exp_bits or not f.subnormals:
        return False
    codes = np.arange(word.magnitude_mask + 1, dtype=np.uint32)
    vals = f.values[codes]
    ok = np.isfinite(vals)
    bits = (codes[ok] << np.uint32(FP32.man_bits - f.man_bits)).astype(np.uint32)
    got = bits.view(np.float32).astype(np.float64) * 2.0 ** (FP32.bias - f.bias)
    return bool(np.array_equal(got, vals[ok]))


def engine_scale_kind(storage: BlockStorage) -> EngineScale:
    """The kernels' scale path of a block storage, from its traits alone.

    * element format: FP4 E2M1 (the LUT bytes and the bit-placement decode are built from
      its table), else refused;
    * no special value and a byte scale word: the bit-placement decode, which takes a
      power-of-two scale (:attr:`~mactile.golden.storage.ScaleKind.POW2`) or an E4M3 byte
      (the encoding the hardware converts); any other scale is refused;
    * otherwise the LUT decode: a byte scale placed into FP16 bits, a 16-bit scale applied
      in FP32, each only where the placement is exact for every finite scale code (checked
      over all of them).

    Raises
    ------
    ValueError
        Naming the storage and its element or scale format, for anything the kernels
        cannot decode exactly (never a wrong answer).
    """
    word, f, el = storage.word, storage.word.scale_format, storage.element
    if el.encoding != FP4_E2M1.encoding:
        raise ValueError(f"the GPU kernels run FP4 E2M1 elements only: {storage.name} has "
                         f"{el.name} elements")
    if not word.specials and word.bits == 8:  # bit-placement decode (bp)
        if word.kind is ScaleKind.POW2:
            return EngineScale.POW2_F16
        if f.encoding == FP8_E4M3.encoding and word.scale_bits == f.bits:
            return EngineScale.E4M3
        raise ValueError(f"the GPU kernels have no exact decode of {storage.name}'s {f.name} "
                         f"block scale (the bit-placement decode takes an E4M3 byte or a "
                         f"power-of-two E8M0 scale)")
    if word.bits == 16 and _f32_bits_exact(word):
        return EngineScale.FP32
    if word.bits == 8 and _f16_bits_exact(word):
        return EngineScale.BITS_F16
    raise ValueError(f"the GPU kernels have no exact decode of {storage.name}'s {f.name} "
                     f"block scale ({word.bits}-bit word, {word.scale_bits}-bit field)")


@dataclass(frozen=True)
class KernelFormat:
    """What the kernels need to know about one golden weight format instance."""

    name: str
    fmt_id: int
    block: int
    scale_dtype: np.dtype
    #: Bits of the stored scale code that hold the scale itself (the rest is metadata).
    scale_mask: int
    #: Right shift of the scale code that yields the 2-bit metadata index
    #: ``sign * 2 + select`` (RaZeR); 0 for NVFP4.
    meta_shift: int
    #: The scale's element format (golden spec), its mantissa bits and bias (scale decoding
    #: by bit placement).
    scale_format: object
    scale_man_bits: int
    scale_bias: int
    #: Whether code 0 is the special value.
    has_special: bool
    #: LUT words: bytes of codes 0-3, 4-7, 8-11, 12-15 (code 0 of RaZeR: real zero's byte
    #: as a placeholder; the kernel replaces it per block).
    lut: tuple[int, int, int, int]
    #: Special-value LUT bytes in metadata-index order (+a, +b, -a, -b); 0 for NVFP4.
    specials_word: int
    #: Largest scale value (for the FP16 pre-scale that keeps 272*s finite).
    scale_max: float
    #: The golden format this describes.
    golden: BlockFormat
    #: Whether the format has an FP32 second-level (tensor) scale.
    tensor_scale: bool = True
    #: How the kernels decode the block scale (:func:`engine_scale_kind`).
    scale_kind: EngineScale = EngineScale.E4M3

    @property
    def w4a4(self) -> bool:
        """Whether ReSET's W4A4 kernels read this storage: blocks of 16 with an E4M3 scale
        byte converted by the hardware, no special value, an FP32 tensor scale."""
        return (self.scale_kind is EngineScale.E4M3 and self.block == 16
                and not self.has_special and self.tensor_scale)

    @property
    def lut_args(self) -> tuple[int, int, int, int, int]:
        """The five uint32 kernel arguments (LUT words + specials word)."""
        return (*self.lut, self.specials_word)

    def special_values_by_meta(self) -> tuple[float, ...]:
        if not self.has_special:
            return ()
        a, b = self.golden.special_values
        return (a, b, -a, -b)

    @property
    def bp(self) -> bool:
        """Whether the tensor-core kernel decodes this format by bit placement (formats
        without a special value: nvfp4)."""
        return not self.has_special and self.scale_dtype.itemsize == 1

    @property
    def tc_out_log2(self) -> int:
        """log2 of the power of two the tensor-core kernel's FP32 result is multiplied by
        (besides the tensor scale) to undo its decode's scaling."""
        if self.bp:
            return -(BP_LOG2 + BP_SCALE_LOG2)
        return self.f16_prescale_log2 if self.block == 16 else 0

    @property
    def f16_prescale_log2(self) -> int:
        """k such that block scales are multiplied by 2**-k in FP16 so that
        ``F16_OFFSET * s * 2**-k`` and every ``v * s * 2**-k`` are finite FP16 normals."""
        k = max(0, math.ceil(math.log2(F16_OFFSET * self.scale_max / float(FP16.max_value))))
        return k


def _fp4_value(code: int) -> float:
    return float(FP4_E2M1.values[code])


def kernel_format(fmt: BlockFormat) -> KernelFormat:
    """Kernel description of a golden ``nvfp4``, ``razer`` or ``razer-g128`` format.

    Raises
    ------
    ValueError
        For any other format, a block size the kernels were not built for, or a
        quantization convention other than the default (the kernels decode the default's
        storage only: e.g. a torchao-style nvfp4 without a tensor scale).
    """
    if isinstance(fmt, BlockFormat):
        require_default_convention(fmt, "the GPU kernels")
    storage = getattr(fmt, "storage", None)
    if storage is None:
        raise ValueError(f"no GPU kernel for format {fmt.describe()}; supported: "
                         f"{', '.join(FP4_ENGINE_FORMATS)}")
    kind = engine_scale_kind(storage)  # refuses by trait: elements, scale format
    if fmt.name not in FP4_ENGINE_FORMATS:  # decodable, but no kernel built for it (no id)
        raise ValueError(f"no GPU kernel for format {fmt.describe()}; supported: "
                         f"{', '.join(FP4_ENGINE_FORMATS)}")
    if fmt.block_size != storage.block_size:
        raise ValueError(f"{fmt.name} kernels need block size {storage.block_size}, "
                         f"got {fmt.block_size}")
    word = storage.word
    # The kernels read the scale's magnitude bits (a block scale is never negative) and
    # the metadata index sign * 2 + select from the bits above them.
    sfmt, mask, meta_shift, has_special = (word.scale_format, word.magnitude_mask,
                                           word.meta_shift, bool(word.specials))
    vals = [_fp4_value(c) for c in range(16)]
    if has_special:
        vals[storage.special_code] = 0.0  # placeholder, replaced per block
        vals[storage.zero_code] = 0.0
    b = [lut_byte(v) for v in vals]
    words = tuple(int(b[4 * i] | b[4 * i + 1] << 8 | b[4 * i + 2] << 16 | b[4 * i + 3] << 24)
                  for i in range(4))
    specials = 0
    if has_special:
        a, bb = fmt.special_values
        sb = [lut_byte(v) for v in (a, bb, -a, -bb)]
        specials = sb[0] | sb[1] << 8 | sb[2] << 16 | sb[3] << 24
    return KernelFormat(name=fmt.name, fmt_id=FORMAT_IDS.get(fmt.name, -1), block=fmt.block_size,
                        scale_dtype=np.dtype(word.dtype), scale_mask=mask,
                        meta_shift=meta_shift, scale_format=sfmt, scale_man_bits=sfmt.man_bits,
                        scale_bias=sfmt.bias, has_special=has_special, lut=words,
                        specials_word=specials, scale_max=word.scale_max, golden=fmt,
                        tensor_scale=storage.has_tensor_scale, scale_kind=kind)


def kernel_scale_words(kf: KernelFormat, words) -> tuple[np.ndarray, np.ndarray]:
    """NumPy model of how the kernels read scale words (the traits' FP32 placement path):
    ``(scale value, metadata index)``; the value is ``bits(payload << F32_SHIFT) * F32_MUL``
    with ``payload = word & SCALE_MASK``, the index ``word >> META_SHIFT`` (0 without
    metadata). Exact for every finite scale code with a non-zero exponent field or a
    format with subnormals (E8M0's code 0 places as 0.0 here; the E8M0 engine path
    rebases its exponents instead, :func:`mactile.gpu.packing.pow2_kernel_scales`)."""
    w = np.asarray(words).astype(np.uint32)
    payload = w & np.uint32(kf.scale_mask)
    bits = (payload << np.uint32(FP32.man_bits - kf.scale_man_bits)).astype(np.uint32)
    with np.errstate(over="ignore", invalid="ignore"):
        val = bits.view(np.float32).astype(np.float64) * 2.0 ** (FP32.bias - kf.scale_bias)
    meta = (w >> np.uint32(kf.meta_shift)) if kf.has_special else np.zeros_like(w)
    return val, meta.astype(np.int64)


def traits_header() -> str:
    """C++ ``Fmt<ID>`` traits for every kernel format, generated from the golden specs."""
    out = ["// Generated by mactile.gpu.formats.traits_header() from the golden specs.",
           "namespace mt {", "template <int F> struct Fmt;"]
    out += [f"constexpr int FID_{n.upper().replace('-', '_')} = {i};" for n, i in FORMAT_IDS.items()]
    for name, fid in FORMAT_IDS.items():
        kf = kernel_format(golden_proto(name))
        pre = kf.f16_prescale_log2
        f16_mul = 2.0 ** (FP16.bias - kf.scale_bias - pre)
        f32_mul = 2.0 ** (FP32.bias - kf.scale_bias)
        h = lambda v: int(np.float16(v).view(np.uint16))
        f16x2_mul = h(f16_mul) | h(f16_mul) << 16
        f16x2_pre = h(2.0 ** -pre) | h(2.0 ** -pre) << 16
        out.append(
            f"template <> struct Fmt<{fid}> {{  // {name}\n"
            f"  static constexpr int BLOCK = {kf.block};\n"
            f"  static constexpr int SCALE_BYTES = {kf.scale_dtype.itemsize};\n"
            f"  static constexpr bool SPECIAL = {'true' if kf.has_special else 'false'};\n"
            f"  static constexpr bool BP = {'true' if kf.bp else 'false'};  // bit-placement decode (TC)\n"
            f"  static constexpr unsigned SCALE_MASK = {kf.scale_mask}u;\n"
            f"  static constexpr int META_SHIFT = {kf.meta_shift};\n"
            f"  // scale code payload -> FP16 bits: payload << F16_SHIFT, times F16_MUL\n"
            f"  static constexpr int F16_SHIFT = {FP16.man_bits - kf.scale_man_bits};\n"
            f"  static constexpr float F16_MUL = {f16_mul.hex()}f;  // 2^(15-bias-prescale)\n"
            f"  static constexpr int F16_PRESCALE_LOG2 = {pre};\n"
            f"  static constexpr unsigned F16X2_MUL = {f16x2_mul:#010x}u;       // (F16_MUL, F16_MUL)\n"
            f"  static constexpr unsigned F16X2_PRESCALE = {f16x2_pre:#010x}u;  // (2^-prescale, 2^-prescale)\n"
            f"  // scale code payload -> FP32 bits: payload << F32_SHIFT, times F32_MUL\n"
            f"  static constexpr int F32_SHIFT = {FP32.man_bits - kf.scale_man_bits};\n"
            f"  static constexpr float F32_MUL = {f32_mul.hex()}f;  // 2^(127-bias)\n"
            f"}};")
    mag, sign = bp_masks()
    h = lambda v: int(np.float16(v).view(np.uint16))
    bps = h(2.0 ** BP_SCALE_LOG2)
    out.append("// bit-placement decode (formats.BP_ROTATIONS): register j of a frag word is\n"
               "// (rotl(w, BP_ROT_M<j>) & BP_MAG_MASK) | (rotl(w, BP_ROT_S<j>) & BP_SIGN_MASK)\n"
               f"constexpr unsigned BP_MAG_MASK = {mag:#010x}u, BP_SIGN_MASK = {sign:#010x}u;\n"
               + "".join(f"constexpr int BP_ROT_M{j} = {m}, BP_ROT_S{j} = {sg};\n"
                         for j, (m, sg) in enumerate(BP_ROTATIONS))
               + f"constexpr unsigned BP_SCALE_F16X2 = {bps | bps << 16:#010x}u;  // (2^{BP_SCALE_LOG2}, 2^{BP_SCALE_LOG2})")
    out.append(f"constexpr unsigned F16_MAGIC = {F16_MAGIC:#x}u;\n"
               f"constexpr float F16_OFFSET = {F16_OFFSET!r}f;\n"
               f"constexpr unsigned F32_MAGIC = {F32_MAGIC:#x}u;\n"
               f"constexpr float F32_OFFSET = {F32_OFFSET!r}f;\n"
               f"constexpr float LUT_INV_SCALE = {1.0 / LUT_SCALE!r}f;")
    out.append("}  // namespace mt")
    return "\n".join(out) + "\n"


def fp4_encode_header() -> str:
    """``fp4_mag_code(a)``: FP4 E2M1 magnitude code of ``a >= 0`` with the golden rounding
    (ties to the even code, saturating), as one comparison per midpoint of the golden
    table; and ``NVFP4_TS_DENOM``, NVFP4's tensor-scale denominator (448 * 6)."""
    mags, mids, tie_up = FP4_E2M1._rne_table
    if not np.array_equal(mags, np.arange(len(mags))):
        raise AssertionError("FP4 magnitude codes are expected to be 0..7 in order")
    terms = [f"(a {'>=' if up else '>'} {float(m).hex()}f)" for m, up in zip(mids, tie_up)]
    denom = float(np.float32(NVFP4.scale_format.max_value * 6.0))
    return ("namespace mt {\n"
            "// Generated from FP4_E2M1._rne_table (midpoints; '>=' where the tie goes up to the even code).\n"
            "__device__ __forceinline__ unsigned fp4_mag_code(float a) {\n"
            f"    return (unsigned)" + " + (unsigned)".join(terms) + ";\n}\n"
            f"constexpr float NVFP4_TS_DENOM = {denom.hex()}f;  // {denom}\n"
            "}  // namespace mt\n")


def fp4_decode_header() -> str:
    """``FP4_TWICE_LO/HI``: twice each FP4 E2M1 magnitude (codes 0..7) as a ``prmt`` byte
    table, for kernels that write dequantized NVFP4 values (ReSET's activation quantizer)."""
    twice = 2.0 * FP4_E2M1.decode(np.arange(8, dtype=np.uint8))
    if not np.array_equal(twice, np.round(twice)) or twice.max() > 255:
        raise AssertionError("FP4 magnitudes x 2 are expected to be bytes")
    lo, hi = (sum(int(twice[4 * w + i]) << (8 * i) for i in range(4)) for w in (0, 1))
    return ("namespace mt {\n"
            "// Generated from FP4_E2M1: twice the magnitude of code c (0..7) = __byte_perm(LO, HI, c) & 0xFF.\n"
            f"constexpr unsigned FP4_TWICE_LO = {lo:#010x}u, FP4_TWICE_HI = {hi:#010x}u;\n"
            "}  // namespace mt\n")


def prelude() -> str:
    """Everything generated from the golden specs that the kernels include."""
    return "#include <cuda_fp16.h>\n" + traits_header() + fp4_encode_header()


def reset_header() -> str:
    """Constants and polynomials of golden/reset_temperature.py for the GPU kernel."""
    from mactile.golden import reset_temperature as rt

    def horner(name, coeffs, var):
        body = [f"    float p = {float(coeffs[0]).hex()}f;"]
        body += [f"    p = __fadd_rn(__fmul_rn(p, {var}), {float(c).hex()}f);" for c in coeffs[1:]]
        return (f"__device__ __forceinline__ float {name}(float {var}) {{\n" + "\n".join(body) +
                "\n    return p;\n}\n")

    return ("namespace mt {\n// Generated from mactile.golden.reset_temperature.\n"
            f"constexpr float RS_LOG2E = {float(rt.LOG2E).hex()}f;\n"
            f"constexpr float RS_LN2 = {float(rt.LN2).hex()}f;\n"
            f"constexpr float RS_EXP_T_MIN = {float(rt.EXP_T_MIN).hex()}f;\n"
            + horner("rs_exp_poly", rt.EXP_COEFFS, "f") + horner("rs_log_poly", rt.LOG_COEFFS, "q2")
            + "}  // namespace mt\n")


# --------------------------------------------------------------------------- the engine
def golden_proto(name: str) -> BlockFormat:
    """The default golden format object of an FP4 engine format name."""
    if name not in FP4_ENGINE_FORMATS:
        raise ValueError(f"unknown FP4 format {name!r}; choose from {FP4_ENGINE_FORMATS}")
    return ENGINE[name].golden()


def engine_format_id(name: str) -> int:
    """Template id of an engine format (``EngineFmt<id>``)."""
    return engine_format(name).fmt_id


#: The power-of-two (E8M0) scale path: the kernel scale byte ``b`` becomes the FP16 value
#: ``2**(b - FP16.bias)`` by bit placement (``b << FP16.man_bits``) and multiplies the
#: bit-placement value ``v * 2**BP_LOG2``. The product ``v * 2**(b - bias + BP_LOG2)`` is exact
#: and finite for every E2M1 value when ``b`` lies in this window (the smallest magnitude
#: 0.5 must stay >= FP16's smallest subnormal; ``b`` must be a finite FP16 exponent).
def _pow2_window() -> tuple[int, int]:
    # smallest b: 0.5 * 2**(b - 15 - 14) >= 2**-24  <=>  b >= 6; largest: 30 (exponent field 31 is inf/NaN)
    lo = next(b for b in range(1, 31) if 0.5 * 2.0 ** (b - FP16.bias + BP_LOG2) >= 2.0 ** (1 - FP16.bias - FP16.man_bits))
    hi = 2 ** FP16.exp_bits - 2
    return lo, hi


POW2_WINDOW = _pow2_window()


def _check_pow2_window() -> None:
    lo, hi = POW2_WINDOW
    vals = FP4_E2M1.values[np.isfinite(FP4_E2M1.values)].astype(np.float64)
    for b in (lo, hi):
        s16 = np.float16(2.0 ** (b - FP16.bias))
        assert int(s16.view(np.uint16)) == b << FP16.man_bits
        hv = (vals * 2.0 ** BP_LOG2).astype(np.float16)
        prod = (hv.astype(np.float32) * np.float32(s16)).astype(np.float16)
        assert np.array_equal(prod.astype(np.float64), vals * 2.0 ** (b - FP16.bias + BP_LOG2)), b


_check_pow2_window()

_SCALE_KINDS = tuple(k.value for k in EngineScale)


def _engine_fp4_traits(name: str) -> dict:
    kf = kernel_format(golden_proto(name))
    # the one scale kind (engine_scale_kind): an FP16 scale (razer-g128) times up to 5-bit
    # values is exact only in FP32, so it is not applied to the FP16 operand: the
    # accumulators are kept in units of the block's scale (RESCALE, docs/gpu.md "The
    # format policy")
    kind = kf.scale_kind
    pre = kf.f16_prescale_log2
    h = lambda v: int(np.float16(v).view(np.uint16))  # noqa: E731
    f16_mul = 2.0 ** (FP16.bias - kf.scale_bias - pre) if kind is EngineScale.BITS_F16 else 0.0
    return {"A_SRC": "A_FRAG", "FP8": False, "BK": max(64, kf.block), "BLOCK": kf.block,
            "SCALE_BYTES": kf.scale_dtype.itemsize, "SCALE_KIND": kind.value, "BP": kf.bp,
            "SPECIAL": kf.has_special, "PROMOTE": False, "RESCALE": kind is EngineScale.FP32,
            "SCALE_MASK": kf.scale_mask, "META_SHIFT": kf.meta_shift,
            "F16_SHIFT": FP16.man_bits - kf.scale_man_bits,
            "F16X2_MUL": h(f16_mul) | h(f16_mul) << 16,
            "F32_SHIFT": FP32.man_bits - kf.scale_man_bits,
            "F32_MUL": 2.0 ** (FP32.bias - kf.scale_bias),
            "POW2_SHIFT": FP16.man_bits}


def _engine_nfp_traits(fp8: bool) -> dict:
    return {"A_SRC": "A_SMEM" if fp8 else "A_PLANES", "FP8": fp8, "BK": 128 if fp8 else 64,
            "BLOCK": 128 if fp8 else 64, "SCALE_BYTES": 0, "SCALE_KIND": "SCALE_NONE", "BP": False,
            "SPECIAL": False, "PROMOTE": fp8, "RESCALE": False, "SCALE_MASK": 0, "META_SHIFT": 0, "F16_SHIFT": 0,
            "F16X2_MUL": 0, "F32_SHIFT": 0, "F32_MUL": 1.0, "POW2_SHIFT": 0}


def engine_traits(name: str):
    """The compile-time description of engine format ``name`` (``EngineFmt<id>``), a
    read-only mapping made once per format (every launch reads it several times; building it
    derives the lookup tables from the golden spec, about 0.1 ms)."""
    t = _TRAITS.get(name)
    if t is None:
        ef = engine_format(name)
        t = _TRAITS[name] = types.MappingProxyType(
            _engine_fp4_traits(name) if ef.storage is not None else _engine_nfp_traits(ef.fp8))
    return t


_TRAITS: dict = {}


def engine_traits_header() -> str:
    """C++ ``EngineFmt<FMT_...>`` traits of every engine format, generated from the golden
    specs (FP4 formats through :func:`kernel_format`; NestedFP's fixed byte planes)."""
    cid = lambda n: "FMT_" + n.upper().replace("-", "_")  # noqa: E731
    out = ["// Generated by mactile.gpu.formats.engine_traits_header() from the golden specs.",
           "namespace mt {",
           "enum ASrc : int { A_FRAG = 0, A_PLANES = 1, A_SMEM = 2 };",
           "enum ScaleKind : int { " + ", ".join(f"{k} = {i}" for i, k in enumerate(_SCALE_KINDS)) + " };"]
    out += [f"constexpr int {cid(n)} = {engine_format_id(n)};" for n in ENGINE_FORMATS]
    out.append("template <int F> struct EngineFmt;")
    b = lambda v: "true" if v else "false"  # noqa: E731
    for n in ENGINE_FORMATS:
        tr = engine_traits(n)
        out.append(
            f"template <> struct EngineFmt<{cid(n)}> {{  // {n}\n"
            f"  static constexpr int A_SRC = {tr['A_SRC']};\n"
            f"  static constexpr bool FP8 = {b(tr['FP8'])};       // e4m3 wgmma (else f16)\n"
            f"  static constexpr int BK = {tr['BK']};          // k per pipeline stage\n"
            f"  static constexpr int BLOCK = {tr['BLOCK']};       // k per block scale\n"
            f"  static constexpr int SCALE_BYTES = {tr['SCALE_BYTES']};\n"
            f"  static constexpr int SCALE_KIND = {tr['SCALE_KIND']};\n"
            f"  static constexpr bool BP = {b(tr['BP'])};        // bit-placement decode (else prmt lookup)\n"
            f"  static constexpr bool SPECIAL = {b(tr['SPECIAL'])};   // code 0 is the block's special value\n"
            f"  static constexpr bool PROMOTE = {b(tr['PROMOTE'])};   // per-stage FP32 partial accumulator\n"
            f"  static constexpr bool RESCALE = {b(tr['RESCALE'])};   // accumulators in units of the block scale\n"
            f"  static constexpr unsigned SCALE_MASK = {tr['SCALE_MASK']:#x}u;\n"
            f"  static constexpr int META_SHIFT = {tr['META_SHIFT']};\n"
            f"  static constexpr int F16_SHIFT = {tr['F16_SHIFT']};\n"
            f"  static constexpr unsigned F16X2_MUL = {tr['F16X2_MUL']:#010x}u;\n"
            f"  static constexpr int F32_SHIFT = {tr['F32_SHIFT']};\n"
            f"  static constexpr float F32_MUL = {float(tr['F32_MUL']).hex()}f;\n"
            f"  static constexpr int POW2_SHIFT = {tr['POW2_SHIFT']};\n"
            f"}};")
    out.append("}  // namespace mt")
    return "\n".join(out) + "\n"
