"""Bit-exact datapath models of the multiply-accumulate units of BlockDialect Table 5.

Source: 001_eabebf91b09c2719.txt Sec. 3.3 and 4.3 (Table 5): each unit adds ``terms``
(64) products of a dot product iteratively. The RTL in :mod:`mactile.rtl.mac` has the same
stages, so tests can compare any intermediate value:

``unpack`` (code -> operand fields) -> ``multiply`` (exact product, a signed integer in
units of ``2**product_lsb_exp``) -> ``accumulate`` (two's-complement register of
``acc_bits``, cleared on request) -> ``block_end`` (DialectFP4 only: the exponent of the
block's scale).

Three kinds of operands:

* ``int``: two's-complement integers (INT4, INT5, INT8); the product is ``a * w``.
* ``float``: sign/exponent/mantissa formats without Inf/NaN (FP4 E2M1, FP6 E2M3/E3M2). The
  significand (hidden bit included) products are shifted by the two exponents into one
  fixed-point grid whose LSB is the product of the two smallest subnormals, so every
  product and every sum is exact.
* ``dialect``: DialectFP4 codes ``sign << 3 | index`` with a per-term dialect id; the index
  becomes the 4-bit unsigned ``q`` of the formatbook (value ``0.5 * q``), two ``q`` are
  multiplied as unsigned integers and the sign is the XOR of the signs. The accumulator
  counts in units of ``0.25 * 2**(SE_a + SE_w)``.

DialectFP4 block-end convention ``acc-exp`` (named here, the paper leaves it open): the
unit outputs the exact integer sum ``acc`` and the exponent
``exp = (max(E_a, 1) - 17) + (max(E_w, 1) - 17) - 2`` from the two stored 5-bit shared
exponent fields (:data:`mactile.golden.dialect.SE_BIAS` = 17); the block's partial sum is
``acc * 2**exp`` exactly. The ``- 2`` is the paper's right shift by 2 bits for the two
0.5 factors, and ``SE_a + SE_w`` the shared exponent sum of Sec. 3.3. No rounding happens
inside the unit; the paper's conversion of this partial sum to FP16 belongs to the next
stage (cross-block accumulation), not to the Table 5 MAC.

Two operand forms for DialectFP4 (option ``dialect_input``): ``dequantized`` (the paper's
MAC, Sec. 3.3 and Fig. 6: "dequantized to 5-bit (previous 1-bit sign, 4-bit unsigned
integer) before multiplication", the formatbook lookup being the dequantizer's job, once per
block and shared by the MACs; the operand is ``sign << 4 | q``, and the block exponent sum
is the block-end stage's) and ``codes`` (the MAC looks up ``q`` from the code and the
dialect id itself and keeps the block-end exponent register; a variant).

Two accumulator sizings (option ``acc_sizing``): ``exact`` (the narrowest two's-complement
width that holds ``terms`` worst-case products) and ``headroom`` (product width plus
``ceil(log2(terms))`` guard bits, the textbook sizing). For every Table 5 row they agree.

Two multipliers for DialectFP4 (Sec. 4.3): ``uint4`` ("Ours": a 4b x 4b unsigned
multiplier and an XOR) and ``int4`` ("Ours-INT4": a stock signed INT4 multiplier on the
upper three magnitude bits plus shift-and-add logic for the residual fifth bit; see
:meth:`MacDatapath.int4_split_product`). Both give the same products.
"""
from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .dialect import FORMATBOOK, N_DIALECTS, SE_BIAS
from .elements import ELEMENT_FORMATS, FloatFormat, IntFormat, Specials

__all__ = [
    "MacKind", "DialectMultiplier", "MacDatapath", "Operand", "signed_width",
    "DIALECT_CODE_BITS", "DIALECT_ID_BITS", "SE_FIELD_BITS", "DEQUANT_BITS",
    "DIALECT_INPUTS", "ACC_SIZINGS",
]

#: DialectFP4 element code: 1 sign bit + 3 index bits.
DIALECT_CODE_BITS = 4
#: Dialect id of a block (16 dialects).
DIALECT_ID_BITS = int(N_DIALECTS - 1).bit_length()
#: Stored shared-exponent field (the FP16 exponent field of the block maximum).
SE_FIELD_BITS = 5
#: Operand format name that selects DialectFP4 operands.
DIALECT = "dialectfp4"
#: A dequantized DialectFP4 operand: 1 sign bit + the 4-bit unsigned q (Sec. 3.3).
DEQUANT_BITS = 5
#: ``dialect_input`` choices: the dequantizer's sign + q, or codes + dialect id.
DIALECT_INPUTS = ("dequantized", "codes")
#: ``acc_sizing`` choices (see the module docstring).
ACC_SIZINGS = ("exact", "headroom")


class MacKind(enum.Enum):
    """What the operands are."""

    INT = "int"
    FLOAT = "float"
    DIALECT = "dialect"


class DialectMultiplier(enum.Enum):
    """How a DialectFP4 MAC multiplies two ``(sign, q)`` operands (BlockDialect Sec. 4.3)."""

    #: "Ours": 4b x 4b unsigned multiplier, XOR for the sign.
    UINT4 = "uint4"
    #: "Ours-INT4": a signed INT4 multiplier plus shift logic for the residual bit.
    INT4 = "int4"


class Operand(NamedTuple):
    """Unpacked operand fields (int64 arrays; unused fields are zero).

    ``int``: ``value``. ``float``: ``sign``, ``sig`` (significand with the hidden bit),
    ``shift`` (``max(E, 1) - 1``). ``dialect``: ``sign``, ``q`` (formatbook entry, half
    units).
    """

    sign: np.ndarray
    value: np.ndarray
    sig: np.ndarray
    shift: np.ndarray
    q: np.ndarray


def signed_width(lo: int, hi: int) -> int:
    """Fewest two's-complement bits that hold every integer in ``[lo, hi]``.

    >>> signed_width(-3584, 4096)
    14
    """
    lo, hi = int(lo), int(hi)
    if lo > hi:
        raise ValueError(f"empty range [{lo}, {hi}]")
    w = 1
    while not (-(1 << (w - 1)) <= lo and hi <= (1 << (w - 1)) - 1):
        w += 1
    return w


def _element(name: str, side: str):
    try:
        fmt = ELEMENT_FORMATS[name]
    except KeyError:
        known = ", ".join(sorted([DIALECT, *ELEMENT_FORMATS]))
        raise ValueError(f"{side}_format: unknown format {name!r}; known: {known}") from None
    if isinstance(fmt, IntFormat):
        if not fmt.signed:
            raise ValueError(f"{side}_format: {name} is unsigned; the MAC takes signed integers")
        if fmt.bits > 16:
            raise ValueError(f"{side}_format: {name} is wider than 16 bits")
        return MacKind.INT, fmt
    assert isinstance(fmt, FloatFormat)
    if fmt.specials is not Specials.NONE:
        raise ValueError(f"{side}_format: {name} has NaN/Inf codes, which a fixed-point "
                         "accumulator cannot represent")
    if not (fmt.signed and fmt.subnormals):
        raise ValueError(f"{side}_format: {name} must be signed with subnormals")
    return MacKind.FLOAT, fmt


@dataclass(frozen=True, kw_only=True)
class MacDatapath:
    """The datapath of one multiply-accumulate unit, as a bit-exact model.

    Parameters
    ----------
    a_format, w_format : str
        Element format names from :data:`mactile.golden.ELEMENT_FORMATS` (signed integers,
        or floats without Inf/NaN), or ``"dialectfp4"`` for both. Both operands must be of
        one kind.
    terms : int
        Products one sum may hold (the paper's 64); sets the accumulator width.
    multiplier : DialectMultiplier or str
        DialectFP4 only: ``uint4`` (default, "Ours") or ``int4`` ("Ours-INT4").
    dialect_input : {"codes", "dequantized"}
        DialectFP4 only: what an operand is. ``dequantized`` (the paper's MAC):
        ``sign << 4 | q`` from the dequantizer, no dialect ids and no block-end exponent
        in the unit. ``codes`` (default here for the golden API; a variant in the
        registry): ``sign << 3 | index`` with a per-term dialect id and exponent fields.
    acc_sizing : {"exact", "headroom"}
        How ``acc_bits`` follows from ``terms`` (module docstring).

    Examples
    --------
    >>> from mactile.golden.mac import MacDatapath
    >>> dp = MacDatapath(a_format="int4", w_format="int4")
    >>> dp.product_range, dp.acc_bits
    ((-56, 64), 14)
    >>> MacDatapath(a_format="fp4_e2m1", w_format="fp4_e2m1").product_lsb_exp
    -2
    """

    a_format: str
    w_format: str
    terms: int = 64
    multiplier: DialectMultiplier = DialectMultiplier.UINT4
    dialect_input: str = "codes"
    acc_sizing: str = "exact"

    def __post_init__(self):
        if self.dialect_input not in DIALECT_INPUTS:
            raise ValueError(f"dialect_input must be one of {list(DIALECT_INPUTS)}, "
                             f"got {self.dialect_input!r}")
        if self.acc_sizing not in ACC_SIZINGS:
            raise ValueError(f"acc_sizing must be one of {list(ACC_SIZINGS)}, "
                             f"got {self.acc_sizing!r}")
        if not isinstance(self.terms, int) or isinstance(self.terms, bool) or self.terms < 1:
            raise ValueError(f"terms must be a positive integer, got {self.terms!r}")
        try:
            object.__setattr__(self, "multiplier", DialectMultiplier(self.multiplier))
        except ValueError:
            raise ValueError(f"multiplier must be one of "
                             f"{[m.value for m in DialectMultiplier]}, got {self.multiplier!r}") from None
        dial = (self.a_format == DIALECT, self.w_format == DIALECT)
        if any(dial):
            if not all(dial):
                raise ValueError("a_format and w_format must both be 'dialectfp4' or neither")
            return
        ka, _ = _element(self.a_format, "a")
        kw, _ = _element(self.w_format, "w")
        if ka is not kw:
            raise ValueError(f"a_format {self.a_format} and w_format {self.w_format} must be "
                             "of one kind (both integer or both floating point)")
        if self.multiplier is not DialectMultiplier.UINT4:
            raise ValueError("multiplier applies to DialectFP4 operands only")
        if self.dialect_input != "codes":
            raise ValueError("dialect_input applies to DialectFP4 operands only")

    # ------------------------------------------------------------------ geometry
    @property
    def kind(self) -> MacKind:
        if self.a_format == DIALECT:
            return MacKind.DIALECT
        return _element(self.a_format, "a")[0]

    @property
    def decodes(self) -> bool:
        """DialectFP4 with ``codes`` operands: the unit looks ``q`` up itself and has the
        dialect-id and exponent-field inputs and the ``exp`` output."""
        return self.kind is MacKind.DIALECT and self.dialect_input == "codes"

    @property
    def a_spec(self) -> IntFormat | FloatFormat | None:
        """Golden element format of ``a`` (``None`` for DialectFP4)."""
        return None if self.kind is MacKind.DIALECT else ELEMENT_FORMATS[self.a_format]

    @property
    def w_spec(self) -> IntFormat | FloatFormat | None:
        return None if self.kind is MacKind.DIALECT else ELEMENT_FORMATS[self.w_format]

    def code_bits(self, side: str) -> int:
        """Width of an operand code (``side`` is ``"a"`` or ``"w"``)."""
        spec = self._spec(side)
        if spec is None:
            return DIALECT_CODE_BITS if self.decodes else DEQUANT_BITS
        return spec.bits

    def _spec(self, side):
        if side not in ("a", "w"):
            raise ValueError(f"side must be 'a' or 'w', got {side!r}")
        return self.a_spec if side == "a" else self.w_spec

    @property
    def product_lsb_exp(self) -> int:
        """Power of two of one product/accumulator LSB (for DialectFP4: relative to the
        block scale ``2**(SE_a + SE_w)``)."""
        if self.kind is MacKind.INT:
            return 0
        if self.kind is MacKind.DIALECT:
            return -2  # two half units
        return sum(f.emin - f.man_bits for f in (self.a_spec, self.w_spec))

    @functools.cached_property
    def product_table(self) -> np.ndarray:
        """Every product: ``[a_code, w_code]`` (int/float) or
        ``[a_dialect, w_dialect, a_code, w_code]`` (DialectFP4), read-only int64."""
        if self.decodes:
            d = np.arange(N_DIALECTS)[:, None, None, None]
            e = np.arange(N_DIALECTS)[None, :, None, None]
            a = np.arange(1 << DIALECT_CODE_BITS)[None, None, :, None]
            w = np.arange(1 << DIALECT_CODE_BITS)[None, None, None, :]
            t = self.product(a, w, a_dialect=d, w_dialect=e)
        else:
            a = np.arange(1 << self.code_bits("a"))[:, None]
            w = np.arange(1 << self.code_bits("w"))[None, :]
            t = self.product(a, w)
        t = np.ascontiguousarray(t)
        t.setflags(write=False)
        return t

    @functools.cached_property
    def product_range(self) -> tuple[int, int]:
        """Smallest and largest product over every operand pair (and dialect pair)."""
        t = self.product_table
        return int(t.min()), int(t.max())

    @property
    def product_bits(self) -> int:
        """Signed width that holds every product."""
        return signed_width(*self.product_range)

    @property
    def acc_range(self) -> tuple[int, int]:
        """Extremes of a sum of ``terms`` worst-case products."""
        lo, hi = self.product_range
        return self.terms * min(lo, 0), self.terms * max(hi, 0)

    @property
    def acc_bits(self) -> int:
        """Accumulator width: ``terms`` worst-case products cannot overflow it."""
        if self.acc_sizing == "headroom":
            return self.product_bits + (self.terms - 1).bit_length()
        return signed_width(*self.acc_range)

    @property
    def exp_range(self) -> tuple[int, int]:
        """DialectFP4: range of the block-end exponent."""
        lo = 2 * (1 - SE_BIAS) + self.product_lsb_exp
        hi = 2 * ((1 << SE_FIELD_BITS) - 1 - SE_BIAS) + self.product_lsb_exp
        return lo, hi

    @property
    def exp_bits(self) -> int:
        return signed_width(*self.exp_range)

    def describe(self) -> str:
        extra = (f", multiplier={self.multiplier.value}, input={self.dialect_input}"
                 if self.kind is MacKind.DIALECT else "")
        return f"mac({self.a_format} x {self.w_format}, terms={self.terms}{extra})"

    # ------------------------------------------------------------------ stages
    def unpack(self, codes, side: str, dialect=None) -> Operand:
        """Stage 1: operand codes -> fields (see :class:`Operand`)."""
        spec = self._spec(side)
        c = self._check_codes(codes, side)
        z = np.zeros_like(c)
        if self.kind is MacKind.DIALECT and not self.decodes:
            return Operand(sign=c >> 4, value=z, sig=z, shift=z, q=c & 15)
        if self.kind is MacKind.DIALECT:
            if dialect is None:
                raise ValueError(f"{side}: DialectFP4 operands need their dialect id")
            d = np.asarray(dialect).astype(np.int64)
            if d.size and (d.min() < 0 or d.max() >= N_DIALECTS):
                raise ValueError(f"{side}_dialect must lie in [0, {N_DIALECTS})")
            idx = c & 7
            q = FORMATBOOK[d, idx]
            return Operand(sign=c >> 3, value=z, sig=z, shift=z, q=np.asarray(q, dtype=np.int64))
        if self.kind is MacKind.INT:
            return Operand(sign=z, value=spec.decode(c), sig=z, shift=z, q=z)
        sign, e, m = spec.fields(c)
        sig = np.where(e > 0, m | (1 << spec.man_bits), m)
        return Operand(sign=sign, value=z, sig=sig, shift=np.maximum(e, 1) - 1, q=z)

    def _check_codes(self, codes, side):
        c = np.asarray(codes)
        if c.dtype.kind not in "iu":
            raise TypeError(f"{side}: codes must be integers, got dtype {c.dtype}")
        c = c.astype(np.int64)
        n = 1 << self.code_bits(side)
        if c.size and (c.min() < 0 or c.max() >= n):
            raise ValueError(f"{side}: codes must lie in [0, {n})")
        return c

    def multiply(self, a: Operand, w: Operand) -> np.ndarray:
        """Stage 2: the exact product in units of ``2**product_lsb_exp`` (int64)."""
        if self.kind is MacKind.INT:
            return a.value * w.value
        if self.kind is MacKind.FLOAT:
            mag = (a.sig * w.sig) << (a.shift + w.shift)
            return np.where(a.sign ^ w.sign, -mag, mag)
        if self.multiplier is DialectMultiplier.INT4:
            return self.int4_split_product(a, w)["product"]
        mag = a.q * w.q
        return np.where(a.sign ^ w.sign, -mag, mag)

    @staticmethod
    def int4_split_product(a: Operand, w: Operand) -> dict[str, np.ndarray]:
        """The "Ours-INT4" product, stage by stage.

        ``q = 2h + l`` with ``h = q >> 1`` (0..7) and the residual bit ``l = q & 1``. The
        signed operand is ``2x + r`` with ``x = ±h`` (fits INT4) and ``r = ±l``, so the
        product is ``4 x_a x_w + 2 (x_a r_w + r_a x_w) + r_a r_w``: the INT4 multiplier
        computes ``x_a x_w``; the residual bits only gate, negate, shift and add. Returns
        ``x_a, x_w, int4`` (the INT4 product), ``residual`` (``x_a r_w + r_a x_w``), ``lsb``
        (``r_a r_w``) and ``product``.
        """
        def split(op):
            x = np.where(op.sign == 1, -(op.q >> 1), op.q >> 1)
            r = np.where(op.sign == 1, -(op.q & 1), op.q & 1)
            return x, r
        xa, ra = split(a)
        xw, rw = split(w)
        int4 = xa * xw
        residual = xa * rw + ra * xw
        lsb = ra * rw
        return {"x_a": xa, "x_w": xw, "int4": int4, "residual": residual, "lsb": lsb,
                "product": 4 * int4 + 2 * residual + lsb}

    def product(self, a_codes, w_codes, *, a_dialect=None, w_dialect=None) -> np.ndarray:
        """``multiply(unpack(a), unpack(w))`` with broadcasting."""
        return self.multiply(self.unpack(a_codes, "a", a_dialect),
                             self.unpack(w_codes, "w", w_dialect))

    def accumulate(self, products, *, valid=None, clear=None) -> np.ndarray:
        """Stage 3: the accumulator after every cycle (axis 0 is time, from reset).

        Each cycle ``acc <= (clear ? 0 : acc) + (valid ? product : 0)`` in ``acc_bits``
        two's-complement bits (wrapping, as the register does; a stream that keeps to
        :meth:`check_stream` never wraps).
        """
        p = np.asarray(products, dtype=np.int64)
        v = np.ones(p.shape, bool) if valid is None else np.asarray(valid).astype(bool)
        c = np.zeros(p.shape, bool) if clear is None else np.asarray(clear).astype(bool)
        contrib = np.where(v, p, 0)
        cs = np.cumsum(contrib, axis=0)
        # Sum since the last clear: subtract the running sum just before that clear.
        t = np.arange(p.shape[0]).reshape((-1,) + (1,) * (p.ndim - 1))
        last = np.maximum.accumulate(np.where(c, t, -1), axis=0)
        before = np.where(last >= 0, np.take_along_axis(cs - contrib, np.maximum(last, 0), 0), 0)
        return self.wrap(cs - before)

    def wrap(self, acc) -> np.ndarray:
        """Reduce to ``acc_bits`` two's complement (what the register holds)."""
        n = self.acc_bits
        a = np.asarray(acc, dtype=np.int64) & ((1 << n) - 1)
        return np.where(a >= (1 << (n - 1)), a - (1 << n), a)

    def check_stream(self, *, valid, clear) -> None:
        """Raise ``ValueError`` where a sum would hold more than ``terms`` products (the
        contract under which the accumulator cannot overflow). Axis 0 is time."""
        v = np.asarray(valid).astype(np.int64)
        c = np.asarray(clear).astype(bool)
        cs = np.cumsum(v, axis=0)
        t = np.arange(v.shape[0]).reshape((-1,) + (1,) * (v.ndim - 1))
        last = np.maximum.accumulate(np.where(c, t, -1), axis=0)
        before = np.where(last >= 0, np.take_along_axis(cs - v, np.maximum(last, 0), 0), 0)
        count = cs - before
        if count.size and count.max() > self.terms:
            at = np.unravel_index(int(np.argmax(count > self.terms)), count.shape)
            raise ValueError(f"{self.describe()}: a sum holds more than {self.terms} products "
                             f"(at index {tuple(int(i) for i in at)})")

    def block_end(self, a_se, w_se) -> np.ndarray:
        """Stage 4 (DialectFP4): the exponent of the partial sum, convention ``acc-exp``:
        ``(max(E_a,1) - 17) + (max(E_w,1) - 17) - 2``; the sum is ``acc * 2**exp``."""
        if self.kind is not MacKind.DIALECT:
            raise ValueError("block_end applies to DialectFP4 MACs only")
        ea, ew = (np.asarray(x).astype(np.int64) for x in (a_se, w_se))
        for name, e in (("a_se", ea), ("w_se", ew)):
            if e.size and (e.min() < 0 or e.max() >= (1 << SE_FIELD_BITS)):
                raise ValueError(f"{name} must lie in [0, {1 << SE_FIELD_BITS})")
        return (np.maximum(ea, 1) - SE_BIAS) + (np.maximum(ew, 1) - SE_BIAS) + self.product_lsb_exp

    def value(self, acc, exp=None) -> np.ndarray:
        """The real value of an accumulator (float64; exact while it fits 53 bits)."""
        e = self.product_lsb_exp if exp is None else np.asarray(exp)
        return np.ldexp(np.asarray(acc, dtype=np.float64), e)

    # ------------------------------------------------------------------ whole sums
    def dot(self, a_codes, w_codes, *, a_dialect=None, w_dialect=None, a_se=None, w_se=None):
        """Dot products along the last axis (at most ``terms`` long).

        Returns ``acc`` (int64), or ``(acc, exp)`` for DialectFP4 when ``a_se``/``w_se``
        are given (one per sum).
        """
        p = self.product(a_codes, w_codes,
                         a_dialect=None if a_dialect is None else np.asarray(a_dialect)[..., None],
                         w_dialect=None if w_dialect is None else np.asarray(w_dialect)[..., None])
        if p.shape[-1] > self.terms:
            raise ValueError(f"{self.describe()}: {p.shape[-1]} terms exceed terms={self.terms}")
        acc = p.sum(axis=-1)
        if self.kind is MacKind.DIALECT and a_se is not None:
            return acc, self.block_end(a_se, w_se)
        return acc

    # ------------------------------------------------------------------ printing
    def decode_operand(self, code: int, side: str, dialect: int | None = None) -> str:
        """One operand in words, for mismatch reports: ``0xe (int4 -2)``."""
        code = int(code)
        if self.kind is MacKind.DIALECT and not self.decodes:
            return f"0x{code:x} ({'-' if code >> 4 else '+'}{code & 15}/2)"
        if self.kind is MacKind.DIALECT:
            q = int(FORMATBOOK[int(dialect), code & 7])
            s = "-" if code >> 3 else "+"
            return f"0x{code:x} (d{int(dialect)} idx {code & 7} = {s}{q}/2)"
        spec = self._spec(side)
        v = spec.decode(np.array([code]))[0]
        v = int(v) if isinstance(spec, IntFormat) else float(v)
        return f"0x{code:x} ({spec.name} {v:g})"
