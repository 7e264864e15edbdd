"""Block storage: where each FP4 block format keeps its scale, metadata and special codes.

One frozen :class:`BlockStorage` per block format is the single place that knows the bit
layout of the per-block *scale word* (the byte or half-word stored beside every block of
FP4 codes). The golden quantizers pack and unpack through it, the tensor-core operand
model (:mod:`.tensorcore`) and the RTL decoders read their bit positions from it, and the
GPU traits and packers (:mod:`mactile.gpu.formats`) derive their masks and shifts from
it. :meth:`ScaleWord.pack` and :meth:`ScaleWord.unpack` are the only code that shifts
metadata bits.

A scale word, from bit 0 up::

    [ scale field (scale_bits) | select bit (if 2 specials) | ... | sign bit (if specials) ]

* the *scale field* holds a code of ``scale_format`` (for a signed scale format whose
  sign bit is outside the field, the scale is positive: RaZeR-act's E4M3 without sign,
  RaZeR-G128's FP16 without sign and exponent MSB);
* the *select bit* chooses one of two special magnitudes (RaZeR weights);
* the *sign bit* (the word's top bit) is the special value's sign.

Formats without special values (NVFP4, MXFP4) use the whole word for the scale code.

Examples
--------
>>> from mactile.golden.storage import storage_of
>>> s = storage_of("razer")
>>> s.word.scale_mask, s.word.select_bit, s.word.sign_bit
(63, 6, 7)
>>> hex(s.word.pack(0x2A, select=1, negative=1))
'0xea'
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .elements import (E3M3, E8M0, FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3, FP8_E5M2, FP16, INT8,
                       CodeClasses, FloatFormat, IntFormat, code_dtype)

__all__ = ["ScaleWord", "BlockStorage", "STORAGES", "storage_of", "pack_scale", "unpack_scale",
           "SPECIAL_CODE", "ZERO_CODE", "ScaleKind", "MX_FAMILY"]

#: FP4 code that a format with special values remaps to the block's special value (+0).
SPECIAL_CODE = 0b0000
#: FP4 code that holds a real zero in such blocks (-0).
ZERO_CODE = FP4_E2M1.sign_mask | SPECIAL_CODE


class ScaleKind(enum.Enum):
    """What a block scale's field holds, from the scale format's traits alone
    (:attr:`ScaleWord.kind`); consumers choose their decode by it, never by a format name.

    ``POW2``
        An exponent-only code (no mantissa bits, no sign: OCP E8M0): the scale is
        ``2**(field - bias)``; a decoder places the field into an exponent.
    ``FLOAT``
        A floating-point code with mantissa bits (E4M3, E3M3, E5M2, FP16 fields): a
        decoder places exponent and mantissa, or converts the code in hardware.
    """

    POW2 = "pow2"
    FLOAT = "float"


@dataclass(frozen=True, kw_only=True)
class ScaleWord:
    """Bit layout of one per-block scale word.

    Parameters
    ----------
    bits : int
        Width of the stored word (8 or 16).
    scale_format : FloatFormat
        Format of the block-scale code.
    scale_bits : int
        Low bits of the word holding the scale code.
    specials : int
        Special magnitudes the metadata chooses among: 0, 1 (a sign bit) or 2 (a select
        bit and a sign bit).
    """

    bits: int
    scale_format: FloatFormat
    scale_bits: int
    specials: int = 0

    def __post_init__(self):
        if self.specials not in (0, 1, 2):
            raise ValueError(f"specials must be 0, 1 or 2, got {self.specials}")
        if self.scale_bits > self.scale_format.bits:
            raise ValueError(f"scale field of {self.scale_bits} bits is wider than "
                             f"{self.scale_format.name}")
        if self.scale_bits + self.meta_bits > self.bits:
            raise ValueError(f"scale field ({self.scale_bits}) and metadata ({self.meta_bits}) "
                             f"bits exceed the {self.bits}-bit word")

    # ---------------------------------------------------------------- geometry
    @property
    def dtype(self) -> np.dtype:
        return code_dtype(self.bits)

    @property
    def select_bits(self) -> int:
        """Metadata bits choosing the special magnitude (1 for two of them)."""
        return 1 if self.specials == 2 else 0

    @property
    def meta_bits(self) -> int:
        """Metadata bits in all: the select bit and the sign bit."""
        return self.select_bits + (1 if self.specials else 0)

    @property
    def select_bit(self) -> int | None:
        """Bit choosing the special magnitude (right above the scale field), or None."""
        return self.scale_bits if self.select_bits else None

    @property
    def sign_bit(self) -> int | None:
        """Bit holding the special value's sign (the word's top bit), or None."""
        return self.bits - 1 if self.specials else None

    @property
    def meta_shift(self) -> int:
        """Right shift of the word that yields the metadata index ``sign * 2 + select``
        (0 without metadata): the lowest metadata bit."""
        if not self.specials:
            return 0
        return self.select_bit if self.select_bits else self.sign_bit

    @property
    def scale_mask(self) -> int:
        """Mask of the scale field."""
        return (1 << self.scale_bits) - 1

    @property
    def scale_signed(self) -> bool:
        """Whether the scale field carries the scale's own sign bit (NVFP4's E4M3 byte)."""
        return self.scale_format.signed and self.scale_bits == self.scale_format.bits

    @property
    def magnitude_mask(self) -> int:
        """Mask of the bits holding the scale's magnitude (the field without a sign bit):
        what kernels that treat every block scale as positive read."""
        f = self.scale_format
        return self.scale_mask & ((1 << (f.exp_bits + f.man_bits)) - 1)

    @property
    def scale_max(self) -> float:
        """Largest finite scale value the magnitude bits can hold (an Inf code, E5M2's or
        FP16's, is not a value: it is a class, :attr:`classes`)."""
        v = self.scale_format.values[: self.magnitude_mask + 1]
        return float(v[np.isfinite(v)].max())

    @property
    def nan_codes(self) -> tuple[int, ...]:
        """Scale-field codes that are NaN."""
        return tuple(int(c) for c in self.scale_format.nan_codes if c <= self.scale_mask)

    @property
    def inf_codes(self) -> tuple[int, ...]:
        """Scale-field codes that are +-Inf (E5M2, a whole FP16)."""
        return self.classes.inf

    @property
    def classes(self) -> CodeClasses:
        """The scale field's codes by class (the scale format's record, restricted to the
        field): what decoders and corner suites iterate."""
        return self.scale_format.classes.restrict(self.scale_mask)

    @property
    def kind(self) -> ScaleKind:
        """How the field's code becomes a value (:class:`ScaleKind`), from the traits."""
        f = self.scale_format
        return ScaleKind.POW2 if f.man_bits == 0 and not f.signed else ScaleKind.FLOAT

    # ---------------------------------------------------------------- codec
    def pack(self, scale_code, *, select=0, negative=0):
        """Scale word(s) from the scale code, the select bit and the special's sign."""
        dt = self.dtype
        code = np.asarray(scale_code).astype(np.int64)
        if code.size and (code.min() < 0 or code.max() > self.scale_mask):
            raise ValueError(f"scale codes must fit the {self.scale_bits}-bit scale field")
        word = code
        if self.specials:
            word = word | (np.asarray(negative).astype(np.int64) & 1) << self.sign_bit
        if self.select_bits:
            word = word | (np.asarray(select).astype(np.int64) & 1) << self.select_bit
        out = np.asarray(word).astype(dt)
        return out if out.ndim else dt.type(out)

    def unpack(self, words):
        """``(scale_code, select, negative)`` integer arrays of scale word(s)."""
        w = np.asarray(words).astype(np.int64)
        code = w & self.scale_mask
        select = (w >> self.select_bit) & 1 if self.select_bits else np.zeros_like(w)
        negative = (w >> self.sign_bit) & 1 if self.specials else np.zeros_like(w)
        return code, select, negative

    def meta_index(self, words):
        """Metadata index ``sign * 2 + select`` per word (0 without metadata), the order
        of the candidates ``+a, +b, -a, -b`` in GPU lookup words."""
        _, sel, neg = self.unpack(words)
        return neg * 2 + sel

    def scale_values(self, words) -> np.ndarray:
        """Block-scale values (float64, NaN for NaN codes) of scale word(s)."""
        return self.scale_format.values[self.unpack(words)[0]]

    def random(self, rng: np.random.Generator, shape, *, exp_fields: tuple[int, int] | None
               = None) -> np.ndarray:
        """Random valid scale words: exponent fields drawn in ``exp_fields`` (inclusive;
        default every field the scale field can hold that is not NaN), then mantissas,
        then metadata, each uniform, in that order (one ``rng.integers`` call each)."""
        f = self.scale_format
        top = (self.magnitude_mask >> f.man_bits)
        lo, hi = exp_fields if exp_fields is not None else (0, top - (1 if self.nan_codes else 0))
        if not 0 <= lo <= hi <= top:
            raise ValueError(f"exponent fields must lie in [0, {top}], got {(lo, hi)}")
        code = rng.integers(lo, hi + 1, shape).astype(np.int64) << f.man_bits
        if f.man_bits:
            code |= rng.integers(0, 1 << f.man_bits, shape)
        if self.meta_bits:
            meta = rng.integers(0, 1 << self.meta_bits, shape)
            return self.pack(code, select=meta & self.select_bits, negative=meta >> self.select_bits)
        return self.pack(code)


@dataclass(frozen=True, kw_only=True)
class BlockStorage:
    """How one FP4 block format stores a block: the element format, the block size, the
    scale word and the special/zero codes, and whether a tensor scale rides along.

    Parameters
    ----------
    name : str
        The block format's name (``"nvfp4"``).
    element : FloatFormat or IntFormat
        Element format (FP4 E2M1, or the OCP MX family's FP8, FP6 and INT8 elements).
    block_size : int
        Default elements per block.
    word : ScaleWord
        Layout of the per-block scale word.
    special_code, zero_code : int | None
        FP4 code that stands for the block's special value, and the one that holds a
        real zero (None where the format has no special value).
    tensor_scale : str
        The second-level FP32 scale rule (``""``: none, MXFP4's scales are pure powers of
        two): ``"amax / (6 * scale_max)"`` for NVFP4 and RaZeR.
    """

    name: str
    element: FloatFormat | IntFormat
    block_size: int
    word: ScaleWord
    special_code: int | None = None
    zero_code: int | None = None
    tensor_scale: str = "amax / (6 * scale_max)"

    @property
    def specials(self) -> int:
        return self.word.specials

    @property
    def has_tensor_scale(self) -> bool:
        return bool(self.tensor_scale)

    #: The format family the quantizer class comes from (``"mx"``: the generic OCP MX
    #: quantizer, :class:`~.mx.MXFormat`; ``""``: a class of its own).
    family: str = ""
    #: Power of two an integer element's code is scaled by (OCP MXINT8: 2**-6); 0 for floats.
    element_log2: int = 0
    #: One line for ``mactile list`` and the docs.
    reference: str = ""

    @property
    def element_emax(self) -> int:
        """Exponent of the element format's largest binade (OCP MX v1.0 Sec. 6.3's
        ``emax_elem``: FP4 2, FP6 E2M3 2, E3M2 4, FP8 E4M3 8, E5M2 15, INT8 0)."""
        e = self.element
        if isinstance(e, IntFormat):
            return (e.bits - 2) + self.element_log2  # 127 * 2**-6 lies in [1, 2)
        return e.max_exp_field - e.bias

    def element_values(self) -> "np.ndarray":
        """Value of every element code (float64; integer codes times ``2**element_log2``)."""
        return self.element.values.astype(np.float64) * 2.0 ** self.element_log2

    def pack_scale(self, scale_code, *, select=0, negative=0):
        return self.word.pack(scale_code, select=select, negative=negative)

    def unpack_scale(self, words):
        return self.word.unpack(words)


def _storage(name, block, fmt, scale_bits, specials=0, bits=None, tensor="amax / (6 * scale_max)",
             element=FP4_E2M1, **kw):
    word = ScaleWord(bits=bits or 8, scale_format=fmt, scale_bits=scale_bits, specials=specials)
    sp = (SPECIAL_CODE, ZERO_CODE) if specials else (None, None)
    return BlockStorage(name=name, element=element, block_size=block, word=word,
                        special_code=sp[0], zero_code=sp[1], tensor_scale=tensor, **kw)


def _mx(name, element, **kw):
    """An OCP MX v1.0 format: blocks of 32, the byte an E8M0 exponent, no tensor scale."""
    return _storage(name, 32, E8M0, E8M0.bits, tensor="", element=element, family="mx",
                    reference="OCP Microscaling Formats (MX) v1.0, Sec. 5-6", **kw)


#: Every FP4 block format's storage, by format name.
STORAGES: dict[str, BlockStorage] = {s.name: s for s in (
    # NVFP4: the whole byte is the E4M3 scale code (its sign bit included).
    _storage("nvfp4", 16, FP8_E4M3, FP8_E4M3.bits),
    # OCP MX v1.0: the byte is the E8M0 exponent; no tensor scale.
    _storage("mxfp4", 32, E8M0, E8M0.bits, tensor=""),
    # RaZeR weights: E3M3 in bits 5..0, select in bit 6, sign in bit 7 (RaZeR Sec. 4.2).
    _storage("razer", 16, E3M3, E3M3.bits, specials=2),
    # RaZeR activations: E4M3 without its sign (bits 6..0), the special's sign in bit 7.
    _storage("razer-act", 16, FP8_E4M3, FP8_E4M3.bits - 1, specials=1),
    # RaZeR-G128: FP16 with the sign and exponent MSB replaced by metadata (Sec. 4.3).
    _storage("razer-g128", 128, FP16, FP16.bits - 2, specials=2, bits=FP16.bits,
             tensor="amax / (6 * scale_max) (G128TensorScale)"),
    # The rest of the OCP MX v1.0 family (Table 1): one entry each, quantized by mx.MXFormat.
    _mx("mxfp8-e4m3", FP8_E4M3),
    _mx("mxfp8-e5m2", FP8_E5M2),
    _mx("mxfp6-e3m2", FP6_E3M2),
    _mx("mxfp6-e2m3", FP6_E2M3),
    _mx("mxint8", INT8, element_log2=-6),
)}

#: The OCP MX formats quantized by the generic :class:`~.mx.MXFormat` (mxfp4 has its own
#: class: its conventions).
MX_FAMILY: tuple[str, ...] = tuple(n for n, s in STORAGES.items() if s.family == "mx")


def storage_of(fmt) -> BlockStorage:
    """The storage of a block format (object with a ``name``, or a name)."""
    name = fmt if isinstance(fmt, str) else getattr(fmt, "name", None)
    try:
        return STORAGES[name]
    except (KeyError, TypeError):
        raise ValueError(f"no block storage for format {fmt!r}; known: "
                         f"{', '.join(STORAGES)}") from None


def pack_scale(fmt, scale_code, *, select=0, negative=0):
    """Scale words of format ``fmt`` (see :meth:`ScaleWord.pack`)."""
    return storage_of(fmt).word.pack(scale_code, select=select, negative=negative)


def unpack_scale(fmt, words) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(scale_code, select, negative)`` of format ``fmt``'s scale words."""
    return storage_of(fmt).word.unpack(words)


def candidate_fields(cand_index) -> tuple[np.ndarray, np.ndarray]:
    """(select, negative) of a candidate index in the quantizers' tie-break order
    ``+a, -a, +b, -b``."""
    c = np.asarray(cand_index).astype(np.int64)
    return c >> 1, c & 1


def special_by_fields(values: Sequence[float], select, negative) -> np.ndarray:
    """Signed special value per block from the magnitudes and the metadata fields."""
    mags = np.asarray(values, dtype=np.float64)[np.asarray(select)]
    return np.where(np.asarray(negative) == 1, -mags, mags)
