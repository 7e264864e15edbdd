"""Bit-exact golden model of the NVFP4, MXFP4 and RaZeR tensor-core datapath (RaZeR Sec. 4.4, Fig. 4).

The RTL in :mod:`mactile.rtl.fp4tc` implements exactly this model; tests compare every
accumulator bit for bit.

One **block step** (one array cycle when ``cols == block_size``) takes one activation
block (``block_size`` FP4 codes and one scale byte, laid out as the format's
:class:`~mactile.golden.storage.BlockStorage` says) and ``rows`` weight blocks (one per
output row, each with its scale byte) and, for every row ``r``::

    a_j   = dec_a(code_a[j], byte_a)          exact, fixed point with 1 fraction bit
    w_rj  = dec_w(code_w[r, j], byte_w[r])    (FP4 value, or the block's special value)
    dot_r = sum_j a_j * w_rj                  exact integer in units of 2**-2
    S_r   = scale(byte_a) * scale(byte_w[r])  exact: the metadata bits are removed first
    P_r   = dot_r * S_r                       exact (no rounding anywhere up to here)
    acc_r = ACC(acc_r + P_r)                  the ONLY rounding of the datapath

``ACC`` is the named accumulation format:

``fp32`` (default, the NVFP4 baseline's FP32 accumulation)
    IEEE 754 binary32 addition of the accumulator and the exact ``P_r`` with one rounding
    to nearest, ties to even. Gradual underflow (subnormal results, no flush to zero),
    overflow to +-Inf, NaN canonical (``0x7FC00000``) and sticky until the accumulator is
    cleared; an exactly-zero sum of operands of opposite sign is +0, ``P_r == 0`` counts
    as +0. For NVFP4/RaZeR every ``P_r`` is exactly representable in FP32 (the products
    need at most 21 significant bits and exponents in [-20, 26]), so this is plain IEEE
    addition of two FP32 numbers.

    **Product rounding** (named choice, for E8M0 scales): MXFP4 products have at most 13
    significant bits (checked: at most 24 for any spec) but exponents in [-256, 266],
    beyond FP32's range. Such a spec (:attr:`TensorCoreSpec.rounds_products`) first rounds
    ``P_r`` to binary32 (RNE, gradual underflow with a signed zero, overflow to +-Inf) and
    then adds: ``acc_r = RNE32(acc_r + RNE32(P_r))``, the FP32 dot-product-then-accumulate
    of MX hardware (OCP MX v1.0 Sec. 6 leaves the internal precision to the
    implementation). Where ``P_r`` is in range the inner rounding is exact, so the
    result equals the single-rounding definition.
``fixed``
    A two's-complement fixed-point accumulator (``1 + int_bits + frac_bits`` bits) to
    which ``P_r`` is added exactly; it wraps modulo ``2**width`` (``int_bits`` leaves
    ``guard_bits`` of headroom over one block product: at least ``2**guard_bits`` block
    steps cannot overflow). ``frac_bits`` must hold every product exactly (checked).

``clear`` with a block starts that row's accumulation afresh: ``acc = ACC(0 + P)``.
A NaN block-scale code (E4M3 ``S.1111.111``, E8M0 ``0xFF``) makes ``P_r`` NaN: the FP32 accumulator
becomes NaN; the fixed accumulator adds 0 and sets the row's sticky ``nan`` flag.

**Outside the core** (named choice): the two per-tensor FP32 scales ``D32`` of NVFP4/RaZeR.
:func:`epilogue` applies them after the last block: ``y = RNE32(RNE32(D32_w * D32_a) *
acc)``. Element values, block-scale codes and metadata bytes go in exactly as the golden
quantizers store them in :class:`~mactile.golden.block.Quantized`.

Special-value registers: a RaZeR operand's decoder holds one 4-bit offset register per
special magnitude (sign-magnitude, 1 sign, 2 integer, 1 fraction bit), magnitude
``6 + offset`` (Fig. 4); :func:`offsets_for` gives the register codes of a golden format.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Sequence

import numpy as np

from . import validate
from .block import BlockFormat, Quantized
from .conventions import require_default_convention
from .elements import E3M3, E8M0, FP4_E2M1, FP8_E4M3, FP32, FloatFormat
from .fp4blocks import razer_offset_code, razer_offset_value
from .storage import SPECIAL_CODE, STORAGES, BlockStorage, ScaleWord

__all__ = [
    "OperandSpec", "NVFP4_OPERAND", "NVFP4_E3M3_OPERAND", "RAZER_WEIGHT", "RAZER_ACT",
    "MXFP4_OPERAND", "golden_format", "default_specials",
    "OPERANDS", "ELEMENT_DECODERS", "SCALE_FORMATS", "make_operand", "FP32Accumulator", "FixedAccumulator", "Accumulator", "accumulator",
    "TensorCoreSpec", "tensor_core_spec", "OuterProductSpec", "outer_product_spec", "OS_DRAINS",
    "BlockProducts", "offsets_for", "operand_for",
    "ELEM_FRAC", "OFFSET_BITS", "fp32_round", "fp32_add", "fp32_add_bits", "fp32_parts", "fp32_rounding", "epilogue", "FP32_QNAN",
    "interesting_fp32",
]

#: Canonical FP32 quiet NaN the accumulator holds after a NaN product.
FP32_QNAN = 0x7FC00000
_F32_MAN = FP32.man_bits
_F32_BIAS = FP32.bias
_F32_EMIN_LSB = 1 - _F32_BIAS - _F32_MAN  # -149: exponent of the smallest subnormal
_F32_EXP_TOP = (1 << FP32.exp_bits) - 1  # all-ones exponent field: Inf/NaN
_F32_INF = _F32_EXP_TOP << _F32_MAN

#: Fraction bits of a decoded element: FP4's finest step is 2**(emin - man_bits) = 0.5.
ELEM_FRAC = FP4_E2M1.man_bits - FP4_E2M1.emin
#: Offset-register layout (Fig. 4): sign-magnitude, 3 magnitude bits with 1 fraction bit.
OFFSET_BITS = 4


# --------------------------------------------------------------------------- FP32
def fp32_round(sign: int, mag: int, exp: int) -> int:
    """Bits of ``(-1)**sign * mag * 2**exp`` rounded to binary32, nearest-even.

    ``mag`` is a non-negative integer of any width. Results below the normal range are
    subnormal (gradual underflow), results that round beyond the largest finite value are
    +-Inf; a magnitude that rounds to zero gives a zero of the given sign.
    """
    if mag < 0:
        raise ValueError("mag must be non-negative")
    s = (sign & 1) << 31
    if mag == 0:
        return s
    n = mag.bit_length()
    q = max(exp + n - (_F32_MAN + 1), _F32_EMIN_LSB)  # exponent of the result's LSB
    if q > exp:
        sh = q - exp
        r = mag >> sh
        rem = mag & ((1 << sh) - 1)
        half = 1 << (sh - 1)
        if rem > half or (rem == half and (r & 1)):
            r += 1
    else:
        r = mag << (exp - q)
    if r >> (_F32_MAN + 1):  # rounding carried into a new binade (r == 2**24)
        r >>= 1
        q += 1
    if r < (1 << _F32_MAN):  # subnormal or zero: q is the minimum exponent
        return s | r
    e_field = q - _F32_EMIN_LSB + 1
    if e_field >= _F32_EXP_TOP:
        return s | _F32_INF
    return s | (e_field << _F32_MAN) | (r - (1 << _F32_MAN))


def interesting_fp32(rng, n: int) -> np.ndarray:
    """``n`` random FP32 bit patterns (uint32) weighted towards zeros, subnormals, the
    smallest normals, 1.0's binade, the largest finite values, Inf and NaN: the stimulus of
    the FP32 accumulator's golden tests and of its RTL bench."""
    kind = rng.integers(0, 6, n)
    sign = rng.integers(0, 2, n, dtype=np.uint64) << np.uint64(31)
    man = rng.integers(0, 1 << _F32_MAN, n, dtype=np.uint64)
    exp = np.select(
        [kind == 0, kind == 1, kind == 2, kind == 3, kind == 4],
        [np.zeros(n, np.uint64), rng.integers(1, 4, n).astype(np.uint64),
         rng.integers(_F32_EXP_TOP - 5, _F32_EXP_TOP + 1, n).astype(np.uint64),
         np.full(n, _F32_BIAS, np.uint64),
         rng.integers(100, 140, n).astype(np.uint64)],
        rng.integers(0, 256, n).astype(np.uint64))
    man = np.where(rng.random(n) < 0.1, np.uint64(0), man)
    return (sign | (exp << np.uint64(_F32_MAN)) | man).astype(np.uint32)


def fp32_parts(bits: int) -> tuple[str, int, int, int]:
    """Split FP32 bits into (class, sign, mag, exp) with value ``(-1)**sign*mag*2**exp``;
    class is ``"num"``, ``"inf"`` or ``"nan"``."""
    sign = (bits >> 31) & 1
    e = (bits >> _F32_MAN) & _F32_EXP_TOP
    f = bits & ((1 << _F32_MAN) - 1)
    if e == _F32_EXP_TOP:
        return ("nan" if f else "inf"), sign, 0, 0
    if e == 0:
        return "num", sign, f, _F32_EMIN_LSB
    return "num", sign, f | (1 << _F32_MAN), e - 1 + _F32_EMIN_LSB


def fp32_add(acc: int, sign: int, mag: int, exp: int, *, nan: bool = False) -> int:
    """IEEE binary32 ``acc + p`` with one RNE rounding, ``p = (-1)**sign * mag * 2**exp``
    exact (``mag == 0`` is +0 whatever ``sign``; ``nan`` makes ``p`` NaN).

    NaN results are the canonical quiet NaN; Inf + -Inf is NaN.
    """
    cls, sa, ma, ea = fp32_parts(acc)
    if nan or cls == "nan":
        return FP32_QNAN
    if cls == "inf":
        return acc  # p is finite
    if mag == 0:
        sign = 0
    if ma == 0 and mag == 0:
        return ((sa & sign) & 1) << 31  # (-0) + (-0) = -0, else +0
    e0 = min(ea, exp)
    total = (-ma if sa else ma) * (1 << (ea - e0)) + (-mag if sign else mag) * (1 << (exp - e0))
    if total == 0:
        return 0  # exact cancellation: +0 under round-to-nearest
    return fp32_round(int(total < 0), abs(total), e0)


def fp32_add_bits(a: int, b: int) -> int:
    """IEEE binary32 ``a + b`` on bit patterns, RNE, canonical NaN (the FP32 adder unit)."""
    cb, sb, mb, eb = fp32_parts(b)
    if cb == "inf":
        ca, sa, _, _ = fp32_parts(a)
        if ca == "nan" or (ca == "inf" and sa != sb):
            return FP32_QNAN
        return b
    if cb == "nan":
        return FP32_QNAN
    if mb == 0 and sb:  # -0: fp32_add treats a zero p as +0, so add it with sign rules here
        ca, sa, ma, _ = fp32_parts(a)
        if ca == "num" and ma == 0:
            return a if sa else 0  # (-0) + (-0) = -0, (+0) + (-0) = +0
        return FP32_QNAN if ca == "nan" else a
    return fp32_add(a, sb, mb, eb)


def fp32_rounding(acc: int, sign: int, mag: int, exp: int) -> str:
    """How :func:`fp32_add` rounds ``acc + p``: ``"exact"``, ``"tie"`` (the exact sum is
    halfway between two neighbouring results), ``"inexact"`` (any other rounding) or
    ``"special"`` (a NaN or infinite operand or result). Tests use it to show that their
    vectors really hit ties."""
    cls, sa, ma, ea = fp32_parts(acc)
    if cls != "num":
        return "special"
    e0 = min(ea, exp)
    total = (-ma if sa else ma) * (1 << (ea - e0)) + (-mag if sign else mag) * (1 << (exp - e0))
    if total == 0:
        return "exact"
    s, t = int(total < 0), abs(total)
    rc, _, rm, re = fp32_parts(fp32_round(s, t, e0))
    if rc != "num":
        return "special"
    if (rm << (re - e0) if re >= e0 else rm) == (t if re >= e0 else t << (e0 - re)):
        return "exact"
    # A tie is a rounding boundary: just above and just below it round differently.
    above = fp32_round(s, 4 * t + 1, e0 - 2)
    below = fp32_round(s, 4 * t - 1, e0 - 2)
    return "tie" if above != below else "inexact"


# --------------------------------------------------------------------------- operands
@dataclass(frozen=True, kw_only=True)
class OperandSpec:
    """How one operand's block arrives: FP4 E2M1 codes plus one 8-bit scale byte.

    Parameters
    ----------
    name : str
        Short name (``"nvfp4"``, ``"razer"``, ``"razer-act"``).
    scale_format : FloatFormat
        Block-scale format (E4M3 or E3M3).
    scale_field_bits : int
        Low bits of the byte that hold the scale code: the format's full width (its sign
        bit is the scale's sign, NVFP4) or, for a signed format, one less (the code's
        sign bit is metadata and the scale is positive, RaZeR-act).
    specials : int
        Special magnitudes the decoder can emit (offset registers): 0 (plain FP4),
        1 (RaZeR-act: the byte's bit 7 is the special value's sign) or 2 (RaZeR weights:
        bit ``scale_field_bits`` selects the register, bit 7 is the sign).
    special_code : int
        The FP4 code that stands for the special value (the project's ``razer``
        convention: 0b0000; FIGURES.md's alternative: 0b1000).
    """

    name: str
    scale_format: FloatFormat
    scale_field_bits: int
    specials: int = 0
    special_code: int = SPECIAL_CODE

    BYTE_BITS: ClassVar[int] = 8

    def __post_init__(self):
        f = self.scale_format
        allowed = {f.bits} | ({f.bits - 1} if f.signed else set())
        if self.scale_field_bits not in allowed:
            raise ValueError(f"{self.name}: scale_field_bits must be {sorted(allowed)} for "
                             f"{f.name}, got {self.scale_field_bits}")
        if self.specials not in (0, 1, 2):
            raise ValueError(f"{self.name}: specials must be 0, 1 or 2, got {self.specials}")
        used = self.scale_field_bits + (self.specials == 2) + (1 if self.specials else 0)
        if used > self.BYTE_BITS:
            raise ValueError(f"{self.name}: scale field and metadata need {used} bits, "
                             f"more than the {self.BYTE_BITS}-bit scale byte")
        if not 0 <= self.special_code < FP4_E2M1.code_count:
            raise ValueError(f"{self.name}: special_code must be an FP4 code, got "
                             f"{self.special_code}")

    # geometry: every bit position comes from the storage spec's ScaleWord ----------
    @property
    def word(self) -> ScaleWord:
        """The scale byte's layout (:class:`~mactile.golden.storage.ScaleWord`)."""
        return ScaleWord(bits=self.BYTE_BITS, scale_format=self.scale_format,
                         scale_bits=self.scale_field_bits, specials=self.specials)

    @classmethod
    def from_storage(cls, storage: BlockStorage) -> "OperandSpec":
        """The operand that consumes a block format's codes and scale words as stored."""
        w = storage.word
        if w.bits != cls.BYTE_BITS:
            raise ValueError(f"{storage.name}: the tensor core takes {cls.BYTE_BITS}-bit scale "
                             f"words, the format stores {w.bits}-bit ones")
        if w.classes.inf:  # the classifier record: Inf is refused by name, never decoded as 2**k
            raise ValueError(f"{storage.name}: the tensor core has no Inf block scale, and "
                             f"{w.scale_format.name} scale codes {list(w.classes.inf)} are Inf")
        if storage.element.encoding != FP4_E2M1.encoding:
            raise ValueError(f"{storage.name}: the tensor core takes FP4 E2M1 elements, the "
                             f"format stores {storage.element.name}")
        return cls(name=storage.name, scale_format=w.scale_format, scale_field_bits=w.scale_bits,
                   specials=w.specials, special_code=(SPECIAL_CODE if storage.special_code is None
                                                      else storage.special_code))

    @property
    def select_bits(self) -> int:
        """Metadata bits choosing the offset register (1 for two registers)."""
        return self.word.select_bits

    @property
    def select_bit(self) -> int:
        """Bit of the scale byte that selects the register (where ``select_bits``)."""
        return self.scale_field_bits if self.word.select_bit is None else self.word.select_bit

    @property
    def sign_bit(self) -> int:
        """Bit of the scale byte holding the special value's sign (where ``specials``)."""
        return self.BYTE_BITS - 1 if self.word.sign_bit is None else self.word.sign_bit

    @property
    def scale_signed(self) -> bool:
        """Whether the scale field carries the scale's own sign."""
        return self.word.scale_signed

    @property
    def scale_frac(self) -> int:
        """Fraction bits of the finest scale step (``man_bits - emin``)."""
        return self.scale_format.man_bits - self.scale_format.emin

    @property
    def scale_sig_bits(self) -> int:
        return self.scale_format.man_bits + 1

    @property
    def max_element(self) -> int:
        """Largest decoded element magnitude in units of ``2**-ELEM_FRAC``."""
        top = FP4_E2M1.max_value
        if self.specials:  # 6 + the largest offset (+3.5)
            top = max(razer_offset_value(c) for c in range(1 << OFFSET_BITS))
        return int(top * (1 << ELEM_FRAC))

    # decoding ----------------------------------------------------------------
    def check_offsets(self, offsets: Sequence[int]) -> tuple[int, ...]:
        offs = tuple(int(o) for o in offsets)
        if len(offs) != self.specials:
            raise ValueError(f"{self.name}: needs {self.specials} offset register value(s), "
                             f"got {len(offs)}")
        for o in offs:
            if not 0 <= o < (1 << OFFSET_BITS):
                raise ValueError(f"{self.name}: offset register codes are {OFFSET_BITS}-bit, "
                                 f"got {o}")
        return offs

    def decode_elements(self, codes, scale_bytes, offsets: Sequence[int] = ()) -> np.ndarray:
        """Decoded element values as int64 in units of ``2**-ELEM_FRAC`` (half units).

        ``codes`` has the block along its last axis, ``scale_bytes`` one byte per block.
        """
        offs = self.check_offsets(offsets)
        c = np.asarray(codes).astype(np.int64)
        b = np.asarray(scale_bytes).astype(np.int64)[..., None]
        val = np.rint(FP4_E2M1.values[c] * (1 << ELEM_FRAC)).astype(np.int64)
        if self.specials:
            mags = np.array([int(razer_offset_value(o) * (1 << ELEM_FRAC)) for o in offs])
            _, sel, neg = self.word.unpack(b)
            sv = np.where(neg == 1, -mags[sel], mags[sel])
            val = np.where(c == self.special_code, sv, val)
        return val

    def scale_terms(self, scale_bytes):
        """Exact block scales: ``(neg, sig, exp, nan)`` int arrays with
        ``scale = (-1)**neg * sig * 2**exp`` (metadata bits removed first)."""
        f = self.scale_format
        code = self.word.unpack(scale_bytes)[0]
        sign, e, m = f.fields(code)
        neg = sign if self.scale_signed else np.zeros_like(code)
        nan = np.isnan(f.values[code])
        if f.subnormals:
            sig = np.where(e == 0, m, m | (1 << f.man_bits))
            exp = np.maximum(e, 1) - f.bias - f.man_bits
        else:
            sig = m | (1 << f.man_bits)
            exp = e - f.bias - f.man_bits
        return neg, sig, exp, nan

    def scale_values(self, scale_bytes) -> np.ndarray:
        """Block-scale values (float64) the datapath uses for these bytes."""
        neg, sig, exp, nan = self.scale_terms(scale_bytes)
        v = np.ldexp(sig.astype(np.float64), exp) * np.where(neg == 1, -1.0, 1.0)
        return np.where(nan, np.nan, v)


#: The operands of the golden block formats, from their storage specs (8-bit scale words).
NVFP4_OPERAND = OperandSpec.from_storage(STORAGES["nvfp4"])
MXFP4_OPERAND = OperandSpec.from_storage(STORAGES["mxfp4"])
RAZER_WEIGHT = OperandSpec.from_storage(STORAGES["razer"])
RAZER_ACT = OperandSpec.from_storage(STORAGES["razer-act"])
#: An experiment without a golden quantizer: NVFP4 elements under E3M3 block scales.
NVFP4_E3M3_OPERAND = OperandSpec(name="nvfp4-e3m3", scale_format=E3M3, scale_field_bits=6)
#: Operand presets by name.
OPERANDS = {o.name: o for o in (NVFP4_OPERAND, NVFP4_E3M3_OPERAND, RAZER_WEIGHT, RAZER_ACT,
                                MXFP4_OPERAND)}
#: Element decoders by name: how many special magnitudes (offset registers) each has.
ELEMENT_DECODERS = {"fp4": 0, "razer-act": 1, "razer": 2}
#: Block-scale formats by name.
SCALE_FORMATS = {"e4m3": FP8_E4M3, "e3m3": E3M3, "e8m0": E8M0}


def make_operand(elements: str, scale: str) -> OperandSpec:
    """The operand of an element decoder (``fp4``, ``razer``, ``razer-act``) and a scale
    format (``e4m3``, ``e3m3``); the presets where one matches, else a new spec whose
    metadata bits sit above the scale field (sign in bit 7).

    >>> make_operand("razer", "e3m3") is RAZER_WEIGHT
    True
    """
    if elements not in ELEMENT_DECODERS:
        raise ValueError(f"unknown element decoder {elements!r}; choose "
                         f"{', '.join(ELEMENT_DECODERS)}")
    if scale not in SCALE_FORMATS:
        raise ValueError(f"unknown scale format {scale!r}; choose {', '.join(SCALE_FORMATS)}")
    fmt, specials = SCALE_FORMATS[scale], ELEMENT_DECODERS[elements]
    field_bits = fmt.bits if not specials or not fmt.signed else fmt.bits - 1
    for o in OPERANDS.values():
        if (o.scale_format, o.specials, o.scale_field_bits) == (fmt, specials, field_bits):
            return o
    name = elements if elements != "fp4" else "nvfp4"
    return OperandSpec(name=f"{name}-{scale}", scale_format=fmt, scale_field_bits=field_bits,
                       specials=specials)


def operand_for(fmt: BlockFormat) -> OperandSpec:
    """The operand spec that consumes a golden format's codes and scale bytes as stored
    (from the format's :attr:`~mactile.golden.block.BlockFormat.storage`).

    The tensor core (and the RTL built from it) implements the default quantization
    convention only; a format with another one is refused."""
    require_default_convention(fmt, "the NVFP4/RaZeR tensor core")
    storage = getattr(fmt, "storage", None)
    op = OPERANDS.get(storage.name) if storage is not None else None
    if op is None or storage.word.bits != OperandSpec.BYTE_BITS:
        raise ValueError(f"no tensor-core operand for format {fmt.describe()}")
    return op


def offsets_for(fmt: BlockFormat) -> tuple[int, ...]:
    """Offset-register codes that make the decoder emit ``fmt``'s special magnitudes."""
    return tuple(razer_offset_code(v) for v in getattr(fmt, "special_magnitudes", ()))


def golden_format(op: OperandSpec, *, block_size: int | None = None, specials=None):
    """The golden quantizer whose storage ``op`` consumes (None for an operand without
    one, e.g. ``nvfp4-e3m3``), with its default special magnitudes or ``specials``."""
    from .registry import BLOCK_FORMATS

    cls = BLOCK_FORMATS.get(op.name)
    if cls is None or getattr(cls, "storage", None) is None or OPERANDS.get(op.name) != op:
        return None
    fmt = cls() if block_size is None else cls(block_size=block_size)
    return fmt if specials is None else fmt.with_special_magnitudes(specials)


def default_specials(op: OperandSpec) -> tuple[float, ...]:
    """The golden quantizers' default special magnitudes for ``op``'s offset registers."""
    fmt = golden_format(op)
    return tuple(float(v) for v in getattr(fmt, "special_magnitudes", ()))


# --------------------------------------------------------------------------- accumulators
@dataclass(frozen=True)
class FP32Accumulator:
    """IEEE binary32 accumulator, one RNE rounding per block step (module docstring)."""

    name: ClassVar[str] = "fp32"
    width: ClassVar[int] = 32

    def describe(self) -> str:
        return "fp32"


@dataclass(frozen=True, kw_only=True)
class FixedAccumulator:
    """Two's-complement fixed-point accumulator: ``1 + int_bits + frac_bits`` bits, exact
    adds, wrap-around modulo ``2**width``, plus a sticky NaN flag per row."""

    int_bits: int
    frac_bits: int

    name: ClassVar[str] = "fixed"

    def __post_init__(self):
        object.__setattr__(self, "int_bits", validate.integer(
            "fixed accumulator", "int_bits", self.int_bits, lo=1))
        object.__setattr__(self, "frac_bits", validate.integer(
            "fixed accumulator", "frac_bits", self.frac_bits, lo=0))

    @property
    def width(self) -> int:
        return 1 + self.int_bits + self.frac_bits

    def describe(self) -> str:
        return f"fixed(int_bits={self.int_bits}, frac_bits={self.frac_bits})"


Accumulator = FP32Accumulator | FixedAccumulator


def accumulator(name: str, *, int_bits: int | None = None, frac_bits: int | None = None,
                guard_bits: int = 14, weight: OperandSpec | None = None,
                act: OperandSpec | None = None, block_size: int = 16) -> Accumulator:
    """Build an accumulator spec by name (``"fp32"`` or ``"fixed"``).

    For ``fixed`` the widths default to the smallest exact format for NVFP4 *and* RaZeR
    operands (so both cores get the same accumulator) plus ``guard_bits`` of headroom.
    The defaults give 1 + 41 + 20 = 62 bits (**chosen**: 2**14 block steps, K = 262144
    elements, cannot overflow; 62 bits is also the widest port the simulation harness
    compares).
    """
    if name == "fp32":
        if int_bits is not None or frac_bits is not None:
            raise ValueError("fp32 accumulator takes no int_bits/frac_bits")
        return FP32Accumulator()
    if name != "fixed":
        raise ValueError(f"unknown accumulator {name!r}; choose fp32 or fixed")
    pairs = [(NVFP4_OPERAND, NVFP4_OPERAND), (RAZER_WEIGHT, RAZER_ACT)]
    if weight is not None and act is not None:
        pairs.append((weight, act))
    need_frac = max(2 * ELEM_FRAC + w.scale_frac + a.scale_frac for w, a in pairs)
    need_int = max(_product_int_bits(w, a, block_size) for w, a in pairs)
    return FixedAccumulator(int_bits=need_int + guard_bits if int_bits is None else int_bits,
                            frac_bits=need_frac if frac_bits is None else frac_bits)


def _product_int_bits(w: OperandSpec, a: OperandSpec, block_size: int) -> int:
    """Integer bits of the largest |P| (bit length of its integer part)."""
    top = block_size * w.max_element * a.max_element / (1 << 2 * ELEM_FRAC)
    top *= w.scale_format.max_value * a.scale_format.max_value
    return int(math.floor(top)).bit_length()


# --------------------------------------------------------------------------- datapath
@dataclass(frozen=True)
class BlockProducts:
    """Exact per-row block products ``P = (-1)**neg * mag * 2**exp`` (NaN where ``nan``),
    and the exact dot products (units of ``2**-2*ELEM_FRAC``) they came from."""

    neg: np.ndarray
    mag: np.ndarray
    exp: np.ndarray
    nan: np.ndarray
    dot: np.ndarray

    def values(self) -> np.ndarray:
        """float64 values (exact: at most 24 significant bits for the presets)."""
        v = np.ldexp(self.mag.astype(np.float64), self.exp)
        return np.where(self.nan, np.nan, np.where(self.neg == 1, -v, v))


@dataclass(frozen=True, kw_only=True)
class TensorCoreSpec:
    """What a tensor core computes (features; the RTL adds how: pipeline, ports).

    Parameters
    ----------
    rows : int
        Output rows (weight blocks per step), the array height.
    cols : int
        Elements per row per cycle, the array width; must divide ``block_size`` (a block
        then takes ``block_size // cols`` cycles). The golden model works per block.
    block_size : int
        Elements per block (16 for NVFP4 and RaZeR).
    weight, act : OperandSpec
        Operand formats.
    acc : FP32Accumulator | FixedAccumulator
        Accumulation format.
    """

    rows: int = 16
    cols: int = 16
    block_size: int = 16
    weight: OperandSpec = NVFP4_OPERAND
    act: OperandSpec = NVFP4_OPERAND
    acc: Accumulator = field(default_factory=FP32Accumulator)

    def __post_init__(self):
        for n in ("rows", "cols", "block_size"):
            v = getattr(self, n)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{n} must be a positive integer, got {v!r}")
        if self.block_size % self.cols:
            raise ValueError(f"cols ({self.cols}) must divide block_size ({self.block_size}): "
                             "a block is streamed over block_size/cols cycles")
        if isinstance(self.acc, FP32Accumulator):
            bits, lo, hi = self.product_bits, self.product_min_exp, self.product_max_exp
            if bits > _F32_MAN + 1:
                raise ValueError(
                    f"fp32 accumulation needs every block product exact in FP32, but products "
                    f"have up to {bits} significant bits (FP32: 24) and exponents in [{lo}, "
                    f"{hi}]; use a smaller block_size or the fixed accumulator")
        elif isinstance(self.acc, FixedAccumulator):
            if self.acc.frac_bits < self.product_frac:
                raise ValueError(f"fixed accumulator needs frac_bits >= {self.product_frac} "
                                 f"to hold every product exactly, got {self.acc.frac_bits}")
            if self.acc.int_bits < self.product_int_bits:
                raise ValueError(f"fixed accumulator needs int_bits >= {self.product_int_bits} "
                                 f"to hold one block product, got {self.acc.int_bits}")
        else:
            raise TypeError(f"acc must be an FP32Accumulator or FixedAccumulator, "
                            f"got {self.acc!r}")

    # widths, derived from the specs --------------------------------------------
    @property
    def beats(self) -> int:
        """Cycles per block."""
        return self.block_size // self.cols

    @property
    def dot_max(self) -> int:
        """Largest |dot| in units of ``2**-2*ELEM_FRAC``."""
        return self.block_size * self.weight.max_element * self.act.max_element

    @property
    def product_bits(self) -> int:
        """Significant bits of the largest product magnitude ``|dot| * sig_a * sig_w``."""
        smax = lambda o: (1 << o.scale_sig_bits) - 1  # noqa: E731
        return (self.dot_max * smax(self.weight) * smax(self.act)).bit_length()

    @property
    def product_frac(self) -> int:
        """Fraction bits of the finest product step."""
        return 2 * ELEM_FRAC + self.weight.scale_frac + self.act.scale_frac

    @property
    def product_min_exp(self) -> int:
        """Exponent of the finest product step."""
        return -self.product_frac

    @property
    def product_max_exp(self) -> int:
        """Exponent of the top bit of the largest product (value < 2**(this+1))."""
        return _product_int_bits(self.weight, self.act, self.block_size) - 1

    @property
    def product_int_bits(self) -> int:
        return _product_int_bits(self.weight, self.act, self.block_size)

    @property
    def rounds_products(self) -> bool:
        """Whether a block product can leave FP32's range (E8M0 scales: 2**-254 ..
        2**254), so that the FP32 accumulator first rounds it to binary32 (module
        docstring, "product rounding"). False for NVFP4/RaZeR: every product is exact."""
        return isinstance(self.acc, FP32Accumulator) and (
            self.product_min_exp < _F32_EMIN_LSB or self.product_max_exp > _F32_BIAS)

    def describe(self) -> str:
        return (f"tc(rows={self.rows}, cols={self.cols}, block_size={self.block_size}, "
                f"weight={self.weight.name}, act={self.act.name}, acc={self.acc.describe()})")

    # per block ---------------------------------------------------------------
    def products(self, act_codes, act_byte, w_codes, w_bytes, *, w_offsets=(), a_offsets=()):
        """Exact block products of one step.

        ``act_codes`` (block_size,), ``act_byte`` scalar, ``w_codes`` (R, block_size),
        ``w_bytes`` (R,) for any number of rows R.
        """
        ac = np.asarray(act_codes)
        wc = np.asarray(w_codes)
        if ac.shape != (self.block_size,) or wc.ndim != 2 or wc.shape[1] != self.block_size:
            raise ValueError(f"expected act codes ({self.block_size},) and weight codes "
                             f"(R, {self.block_size}), got {ac.shape} and {wc.shape}")
        a = self.act.decode_elements(ac, act_byte, a_offsets)
        w = self.weight.decode_elements(wc, np.asarray(w_bytes), w_offsets)
        dot = (w * a[None, :]).sum(axis=1)
        na, sa, ea, nana = self.act.scale_terms(act_byte)
        nw, sw, ew, nanw = self.weight.scale_terms(w_bytes)
        neg = ((dot < 0).astype(np.int64) ^ na ^ nw)
        mag = np.abs(dot) * sa * sw
        neg = np.where(mag == 0, 0, neg)
        exp = ea + ew - 2 * ELEM_FRAC + np.zeros_like(dot)
        nan = np.broadcast_to(nana | nanw, dot.shape).copy()
        return BlockProducts(neg=neg, mag=mag, exp=exp, nan=nan, dot=dot)

    def initial(self, rows: int) -> dict[str, np.ndarray]:
        """Accumulator state after reset: +0 everywhere (``acc`` bit patterns, ``nan``)."""
        return {"acc": np.zeros(rows, dtype=object), "nan": np.zeros(rows, dtype=bool)}

    def accumulate(self, state, p: BlockProducts, *, clear: bool = False):
        """New accumulator state after adding one step's products (``clear``: from 0)."""
        acc = state["acc"].copy()
        nan = state["nan"].copy()
        for r in range(len(acc)):
            cur = 0 if clear else int(acc[r])
            pn, pm, pe, pnan = int(p.neg[r]), int(p.mag[r]), int(p.exp[r]), bool(p.nan[r])
            if isinstance(self.acc, FP32Accumulator) and self.rounds_products and not pnan:
                acc[r] = fp32_add_bits(cur, fp32_round(pn, pm, pe))  # product rounding first
            elif isinstance(self.acc, FP32Accumulator):
                acc[r] = fp32_add(cur, pn, pm, pe, nan=pnan)
            else:
                f = self.acc
                width = f.width
                nan[r] = pnan or (False if clear else bool(nan[r]))
                add = 0 if pnan else (pm << (pe + f.frac_bits))
                if pn:
                    add = -add
                acc[r] = (cur + add) & ((1 << width) - 1)
        return {"acc": acc, "nan": nan}

    def step(self, state, act_codes, act_byte, w_codes, w_bytes, *, clear=False,
             w_offsets=(), a_offsets=()):
        """One block step: products then accumulate."""
        p = self.products(act_codes, act_byte, w_codes, w_bytes,
                          w_offsets=w_offsets, a_offsets=a_offsets)
        return self.accumulate(state, p, clear=clear)

    def acc_values(self, state) -> np.ndarray:
        """Accumulator values as float64 (FP32 exactly; fixed rounded to float64)."""
        out = np.empty(len(state["acc"]), dtype=np.float64)
        for r, bits in enumerate(state["acc"]):
            bits = int(bits)
            if isinstance(self.acc, FP32Accumulator):
                out[r] = np.array(bits, dtype=np.uint32).view(np.float32)
            else:
                w = self.acc.width
                v = bits - (1 << w) if bits >> (w - 1) else bits
                out[r] = np.nan if state["nan"][r] else math.ldexp(v, -self.acc.frac_bits)
        return out

    # whole products --------------------------------------------------------------
    def gemv(self, qw: Quantized, qx: Quantized, *, w_offsets=None, a_offsets=None):
        """Accumulators of ``W @ x`` for quantized ``W`` (N, K) and ``x`` (K,): each row
        accumulates its K/block_size block products in order, starting from a clear.

        Offsets default to the golden formats' special values (:func:`offsets_for`).
        Returns the final state (``acc`` bit patterns per row, ``nan``).
        """
        self._check_operands(qw, qx)
        wo = offsets_for(qw.format) if w_offsets is None else tuple(w_offsets)
        ao = offsets_for(qx.format) if a_offsets is None else tuple(a_offsets)
        n = qw.codes.shape[0]
        state = self.initial(n)
        for kb in range(qx.codes.shape[0]):
            state = self.step(state, qx.codes[kb], qx.scales[kb], qw.codes[:, kb],
                              qw.scales[:, kb], clear=kb == 0, w_offsets=wo, a_offsets=ao)
        return state

    def _check_operands(self, qw: Quantized, qx: Quantized) -> None:
        if operand_for(qw.format) != self.weight or operand_for(qx.format) != self.act:
            raise ValueError(f"{self.describe()} consumes weight {self.weight.name} and "
                             f"activation {self.act.name}; got {qw.format.describe()} and "
                             f"{qx.format.describe()}")
        for q, what in ((qw, "weights"), (qx, "activations")):
            if q.format.block_size != self.block_size:
                raise ValueError(f"{what} use block size {q.format.block_size}, "
                                 f"the core {self.block_size}")
        if len(qw.shape) != 2 or len(qx.shape) != 1 or qw.shape[1] != qx.shape[0]:
            raise ValueError(f"gemv needs W (N, K) and x (K,), got {qw.shape} and {qx.shape}")


def tensor_core_spec(*, rows: int = 16, cols: int = 16, block_size: int = 16,
                     weight: str = "fp4", weight_scale: str = "e4m3", act: str = "fp4",
                     act_scale: str = "e4m3", acc: str = "fp32", acc_int_bits: int | None = None,
                     acc_frac_bits: int | None = None, acc_guard_bits: int = 14,
                     **implementation) -> TensorCoreSpec:
    """The spec of a tensor core from its design parameters (the names ``mactile generate``
    and the YAML configs use); the implementation-only ones (``pipeline``, the offset
    registers' reset values ``w_specials``/``a_specials``) do not change what it computes."""
    unknown = set(implementation) - {"pipeline", "w_specials", "a_specials"}
    if unknown:
        raise ValueError(f"unknown tensor-core parameter(s) {sorted(unknown)}")
    w_op = make_operand(weight, weight_scale)
    a_op = make_operand(act, act_scale)
    if acc == "fp32":
        if acc_int_bits is not None or acc_frac_bits is not None:
            raise ValueError("acc_int_bits/acc_frac_bits apply to acc='fixed' only")
        acc_spec: Accumulator = FP32Accumulator()
    else:
        acc_spec = accumulator(acc, int_bits=acc_int_bits, frac_bits=acc_frac_bits,
                               guard_bits=acc_guard_bits, weight=w_op, act=a_op,
                               block_size=block_size)
    return TensorCoreSpec(rows=rows, cols=cols, block_size=block_size, weight=w_op, act=a_op,
                          acc=acc_spec)


#: Drains of an output-stationary array (:class:`OuterProductSpec`), an implementation
#: choice that does not change what it computes: ``"unit"`` (default, the paper's SIMD
#: reading: every MAC unit has its own scale product, FP32 pack and accumulator adder) or
#: ``"row"`` (cheaper: the units keep block dots only; one back end per activation row
#: drains the row's ``cols`` units one per cycle while the next block streams in, into
#: ``cols`` accumulator registers; needs ``cols <= block_size / k_per_cycle``).
OS_DRAINS = ("unit", "row")


@dataclass(frozen=True, kw_only=True)
class OuterProductSpec:
    """What an **output-stationary** tensor core computes: a ``rows`` x ``cols`` array of MAC
    units, unit ``(i, j)`` owning accumulator ``acc[i, j]`` (RaZeR Sec. 4.4's "16x16 MAC
    units organized in a SIMD way", the organisation Table 9's area supports; see
    docs/rtl-razer.md).

    Per block step the array takes ``rows`` activation blocks and ``cols`` weight blocks;
    unit ``(i, j)`` does exactly one row of :class:`TensorCoreSpec`'s arithmetic on
    activation block ``i`` and weight block ``j`` (exact block dot, exact scale product,
    the one accumulation rounding). No arithmetic is defined here: activation row ``i`` is
    ``row_core`` (a :class:`TensorCoreSpec` with one output row per weight column) fed
    with activation block ``i``.

    Schedule (what the RTL streams): every MAC unit multiplies ``k_per_cycle`` element
    pairs per cycle (default 1: one multiply, "a MAC unit"), so a block takes
    ``block_size // k_per_cycle`` beats; beat ``t`` carries elements ``t*k .. t*k+k-1`` of
    each of the ``rows`` activation blocks and ``cols`` weight blocks; the scale bytes and
    ``clear`` are held for every beat of a block (the last beat's are used).

    Parameters
    ----------
    rows : int
        Activation blocks per step (array height).
    row_core : TensorCoreSpec
        One activation row of the array: ``row_core.rows`` is the array width ``cols``,
        ``row_core.cols`` is ``k_per_cycle``; formats, block size and accumulator are its.
    """

    rows: int = 16
    row_core: TensorCoreSpec = field(default_factory=lambda: TensorCoreSpec(cols=1))

    def __post_init__(self):
        validate.integer("outer-product core", "rows", self.rows, lo=1)
        if not isinstance(self.row_core, TensorCoreSpec):
            raise TypeError(f"row_core must be a TensorCoreSpec, got {self.row_core!r}")

    # the array's shape and formats, read from the row core ------------------------
    @property
    def cols(self) -> int:
        """Weight blocks per step (array width)."""
        return self.row_core.rows

    @property
    def k_per_cycle(self) -> int:
        """Element pairs each MAC unit multiplies per cycle."""
        return self.row_core.cols

    @property
    def beats(self) -> int:
        """Cycles per block."""
        return self.row_core.beats

    block_size = property(lambda self: self.row_core.block_size)
    weight = property(lambda self: self.row_core.weight)
    act = property(lambda self: self.row_core.act)
    acc = property(lambda self: self.row_core.acc)

    def describe(self) -> str:
        c = self.row_core
        return (f"tc-os(rows={self.rows}, cols={self.cols}, k_per_cycle={self.k_per_cycle}, "
                f"block_size={c.block_size}, weight={c.weight.name}, act={c.act.name}, "
                f"acc={c.acc.describe()})")

    # per block step ----------------------------------------------------------------
    def products(self, act_codes, act_bytes, w_codes, w_bytes, *, w_offsets=(), a_offsets=()):
        """Exact block products of one step: one :class:`BlockProducts` (over the ``cols``
        weight blocks) per activation row. ``act_codes`` (rows, block_size), ``act_bytes``
        (rows,), ``w_codes`` (cols, block_size), ``w_bytes`` (cols,)."""
        ac = np.asarray(act_codes)
        ab = np.asarray(act_bytes).reshape(-1)
        if ac.shape != (self.rows, self.block_size) or ab.shape != (self.rows,):
            raise ValueError(f"expected activation codes ({self.rows}, {self.block_size}) and "
                             f"bytes ({self.rows},), got {ac.shape} and {ab.shape}")
        return [self.row_core.products(ac[i], int(ab[i]), w_codes, w_bytes,
                                       w_offsets=w_offsets, a_offsets=a_offsets)
                for i in range(self.rows)]

    def initial(self) -> dict[str, np.ndarray]:
        """State after reset: ``acc`` (rows, cols) bit patterns, ``nan`` (rows, cols)."""
        return {"acc": np.zeros((self.rows, self.cols), dtype=object),
                "nan": np.zeros((self.rows, self.cols), dtype=bool)}

    def accumulate(self, state, products, *, clear: bool = False):
        """New state after adding one step's products (``clear``: every unit from 0)."""
        rows = [self.row_core.accumulate({"acc": state["acc"][i], "nan": state["nan"][i]},
                                         products[i], clear=clear) for i in range(self.rows)]
        return {"acc": np.stack([r["acc"] for r in rows]),
                "nan": np.stack([r["nan"] for r in rows])}

    def step(self, state, act_codes, act_bytes, w_codes, w_bytes, *, clear=False,
             w_offsets=(), a_offsets=()):
        """One block step: products then accumulate."""
        p = self.products(act_codes, act_bytes, w_codes, w_bytes, w_offsets=w_offsets,
                          a_offsets=a_offsets)
        return self.accumulate(state, p, clear=clear)

    def acc_values(self, state) -> np.ndarray:
        """Accumulator values (rows, cols) as float64 (see :meth:`TensorCoreSpec.acc_values`)."""
        return np.stack([self.row_core.acc_values({"acc": state["acc"][i],
                                                   "nan": state["nan"][i]})
                         for i in range(self.rows)])

    def gemm(self, qw: Quantized, qxs: Sequence[Quantized], *, w_offsets=None,
             a_offsets=None):
        """Accumulators of ``X @ W.T`` for quantized ``W`` (N, K) and activation vectors
        ``qxs`` (each (K,)): row ``m`` is :meth:`TensorCoreSpec.gemv` of ``W`` and
        ``qxs[m]`` (an output-stationary array only reorders which unit does which row's
        work). Returns ``acc`` (M, N) bit patterns and ``nan``."""
        rows = [self.row_core.gemv(qw, qx, w_offsets=w_offsets, a_offsets=a_offsets)
                for qx in qxs]
        return {"acc": np.stack([r["acc"] for r in rows]),
                "nan": np.stack([r["nan"] for r in rows])}


def outer_product_spec(*, rows: int = 16, cols: int = 16, k_per_cycle: int = 1,
                       drain: str = "unit", **params) -> OuterProductSpec:
    """The spec of an output-stationary core from its design parameters (those of
    :func:`tensor_core_spec` except that ``cols`` is the number of weight blocks and
    ``k_per_cycle`` the elements per unit per cycle; ``drain`` is an implementation
    choice from :data:`OS_DRAINS`)."""
    if drain not in OS_DRAINS:
        raise ValueError(f"unknown drain {drain!r}; choose from {', '.join(OS_DRAINS)}")
    validate.integer("outer-product core", "cols", cols, lo=1)
    validate.integer("outer-product core", "k_per_cycle", k_per_cycle, lo=1)
    bs = params.get("block_size", 16)
    if isinstance(bs, int) and bs > 0 and bs % k_per_cycle:
        raise ValueError(f"k_per_cycle ({k_per_cycle}) must divide block_size ({bs}): a "
                         "block is streamed over block_size/k_per_cycle beats")
    spec = OuterProductSpec(rows=rows, row_core=tensor_core_spec(rows=cols, cols=k_per_cycle,
                                                                 **params))
    if drain == "row" and cols > spec.beats:
        raise ValueError(f"drain='row' drains one unit per cycle: cols ({cols}) must not "
                         f"exceed the beats per block ({spec.beats})")
    return spec


def epilogue(acc_bits, w_tensor_scale, a_tensor_scale) -> np.ndarray:
    """Apply the two FP32 tensor scales outside the core (named choice):
    ``y = RNE32(RNE32(D32_w * D32_a) * acc)`` for FP32 accumulator bit patterns (a format
    without a tensor scale, MXFP4, passes None: 1)."""
    acc = np.asarray([int(b) for b in np.ravel(acc_bits)], dtype=np.uint32).view(np.float32)
    one = lambda t: np.float32(1.0 if t is None else t)  # noqa: E731 - MXFP4: no tensor scale
    d = one(w_tensor_scale) * one(a_tensor_scale)
    with np.errstate(over="ignore", invalid="ignore"):
        return (acc * d).astype(np.float32)
