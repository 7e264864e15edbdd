"""Element number formats: one frozen spec object per format.

Every constant that RTL generators and GPU packers need (bit widths, bias, largest
value, the full code table) derives from these objects. Encoding and decoding are
vectorised with NumPy and bit-exact:

* :class:`FloatFormat` covers every mini-float of the papers (FP4 E2M1, FP6 E2M3/E3M2,
  FP8 E4M3, E3M3, E8M0), FP16 and FP32 (its field widths; no code table), with the
  NaN/Inf policy named by :class:`Specials`.
* :class:`IntFormat` covers two's-complement and unsigned integers.

Codes are unsigned bit patterns (``uint8`` up to 8 bits, ``uint16`` up to 16 bits), exactly
as hardware stores them; a negative integer is its two's-complement pattern.
"""
from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field

import numpy as np

from . import validate

__all__ = [
    "FP4_E2M1", "FP6_E2M3", "FP6_E3M2", "FP8_E4M3", "FP8_E5M2", "E3M3", "E8M0", "FP16", "FP32",
    "INT4", "INT5", "INT6", "INT8", "UINT4", "UINT8", "ELEMENT_FORMATS", "int_format",
    "Rounding",
    "Specials",
    "FloatFormat",
    "IntFormat",
    "round_significand",
    "code_dtype",
    "CodeClass",
    "CodeClasses",
]


class Rounding(enum.Enum):
    """Rounding of a real value to a representable one (IEEE 754-2019 Sec. 4.3 names).

    ``NEAREST_EVEN`` is roundTiesToEven (the default everywhere, OCP MX v1.0 Sec. 5.3.1),
    ``NEAREST_AWAY`` roundTiesToAway, ``TOWARD_ZERO`` truncation of the magnitude
    (BlockDialect's ``Mag_trunc``).
    """

    NEAREST_EVEN = "nearest-even"
    NEAREST_AWAY = "nearest-away"
    TOWARD_ZERO = "toward-zero"


class Specials(enum.Enum):
    """Which codes are not finite numbers.

    ``NONE``: every code is a number (FP4, FP6, E3M3).
    ``IEEE``: the all-ones exponent holds +-Inf (mantissa 0) and NaN (FP16).
    ``FN``: finite, and the code with all exponent and mantissa bits set is NaN
    (OCP FP8 E4M3, OCP E8M0).
    """

    NONE = "none"
    IEEE = "ieee"
    FN = "fn"


def code_dtype(bits: int) -> np.dtype:
    """The unsigned dtype that holds a ``bits``-wide code."""
    if bits <= 8:
        return np.dtype(np.uint8)
    if bits <= 16:
        return np.dtype(np.uint16)
    if bits <= 32:
        return np.dtype(np.uint32)
    raise ValueError(f"codes wider than 32 bits are not supported (got {bits})")


def round_significand(k: np.ndarray, rounding: Rounding) -> np.ndarray:
    """Round non-negative real significands ``k`` to integers.

    ``k`` are exact (power-of-two scaled) float64 values, so the result is exact. No mode
    adds a half: ``floor(k + 0.5)`` rounds ``k + 0.5`` first, and ``k = 0.5 - 2**-54``
    gives ``1.0`` (FP4 ``nextafter(0.25, 0)`` became 0.5). The fraction ``k - floor(k)``
    is exact.
    """
    if rounding is Rounding.NEAREST_EVEN:
        return np.rint(k)  # IEEE: ties to even
    if rounding is Rounding.NEAREST_AWAY:
        f = np.floor(k)
        with np.errstate(invalid="ignore"):  # Inf - Inf: NaN >= 0.5 is False, Inf stays
            return f + (k - f >= 0.5)
    if rounding is Rounding.TOWARD_ZERO:
        return np.floor(k)
    raise ValueError(f"unknown rounding {rounding!r}")


def _as_float64(x) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"expected a real numeric array, got dtype {a.dtype}")
    return a.astype(np.float64, copy=False)


class CodeClass(enum.Enum):
    """The class of one code (IEEE 754-2019 Sec. 5.7.2's ``class`` operation, folded by sign)."""

    ZERO = "zero"
    SUBNORMAL = "subnormal"
    NORMAL = "normal"
    INF = "inf"
    NAN = "nan"


@dataclass(frozen=True)
class CodeClasses:
    """Every code of one format, by class: the classifier record that the tensor-core
    operand model, the RTL decoders' tests and the benches' corner suites read, so that a
    format's Inf and NaN codes reach every layer by name (hardfloat's ``isNaN/isInf/isZero``).

    Each field is the sorted tuple of the codes of that class (both signs).

    Examples
    --------
    >>> from mactile.golden import FP8_E5M2
    >>> c = FP8_E5M2.classes
    >>> c.inf, c.of(0x7C), len(c.nan)
    ((124, 252), <CodeClass.INF: 'inf'>, 6)
    """

    format_name: str
    zero: tuple[int, ...]
    subnormal: tuple[int, ...]
    normal: tuple[int, ...]
    inf: tuple[int, ...]
    nan: tuple[int, ...]

    def codes(self, cls: CodeClass) -> tuple[int, ...]:
        """The codes of class ``cls``."""
        return getattr(self, CodeClass(cls).value)

    def items(self):
        """``(CodeClass, codes)`` for every class, empty ones included, in enum order."""
        return [(c, self.codes(c)) for c in CodeClass]

    def present(self) -> tuple[CodeClass, ...]:
        """The classes that have at least one code."""
        return tuple(c for c, codes in self.items() if codes)

    def of(self, code: int) -> CodeClass:
        """The class of one code."""
        for c, codes in self.items():
            if int(code) in codes:
                return c
        raise ValueError(f"{self.format_name}: code {code!r} is not a code of the format")

    def restrict(self, mask: int) -> "CodeClasses":
        """The record of the codes ``<= mask`` only (a scale field narrower than its format)."""
        return CodeClasses(self.format_name, *(tuple(c for c in self.codes(k) if c <= mask)
                                               for k in CodeClass))


@dataclass(frozen=True, kw_only=True)
class FloatFormat:
    """A binary floating-point element format.

    Parameters
    ----------
    name : str
        Canonical name (``"fp4_e2m1"``).
    exp_bits, man_bits : int
        Exponent and stored-mantissa widths.
    bias : int
        Exponent bias: a normal code with exponent field ``E`` and mantissa ``M`` is
        ``2**(E - bias) * (1 + M / 2**man_bits)``.
    signed : bool
        Whether a sign bit leads the code (E8M0 has none).
    subnormals : bool
        With subnormals, exponent field 0 encodes ``2**(1 - bias) * M / 2**man_bits``
        (and zero). Without them (E8M0) field 0 is an ordinary binade and there is no zero.
    specials : Specials
        NaN/Inf policy.
    description : str
        One line for ``mactile list`` and the docs.

    Examples
    --------
    >>> from mactile.golden import FP4_E2M1
    >>> FP4_E2M1.max_value, FP4_E2M1.bits
    (6.0, 4)
    >>> FP4_E2M1.decode(FP4_E2M1.encode([0.7, -2.6, 100.0]))
    array([ 0.5, -3. ,  6. ])
    """

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    signed: bool = True
    subnormals: bool = True
    specials: Specials = Specials.NONE
    description: str = field(default="", compare=False)

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise TypeError(f"FloatFormat: name must be a string, got {self.name!r}")
        set_ = functools.partial(object.__setattr__, self)
        set_("exp_bits", validate.integer(self.name, "exp_bits", self.exp_bits, lo=1))
        set_("man_bits", validate.integer(self.name, "man_bits", self.man_bits, lo=0))
        set_("bias", validate.integer(self.name, "bias", self.bias))
        set_("signed", validate.boolean(self.name, "signed", self.signed))
        set_("subnormals", validate.boolean(self.name, "subnormals", self.subnormals))
        set_("specials", validate.choice(self.name, "specials", self.specials, Specials))
        if self.bits > 32:
            raise ValueError(f"{self.name}: formats wider than 32 bits are not supported")
        if self.specials is Specials.IEEE and self.man_bits == 0:
            raise ValueError(f"{self.name}: IEEE specials need at least one mantissa bit")

    # ----------------------------------------------------------------- geometry
    @property
    def bits(self) -> int:
        """Total code width."""
        return int(self.signed) + self.exp_bits + self.man_bits

    @property
    def code_count(self) -> int:
        return 1 << self.bits

    @property
    def dtype(self) -> np.dtype:
        """Storage dtype of a code."""
        return code_dtype(self.bits)

    @property
    def sign_mask(self) -> int:
        return (1 << (self.bits - 1)) if self.signed else 0

    @property
    def man_mask(self) -> int:
        """Mask of the mantissa field."""
        return (1 << self.man_bits) - 1

    @property
    def exp_mask(self) -> int:
        """Mask of the exponent field, in place (FP16: 0x7C00)."""
        return ((1 << self.exp_bits) - 1) << self.man_bits

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest binade that holds a full significand."""
        return (1 if self.subnormals else 0) - self.bias

    @property
    def max_exp_field(self) -> int:
        """Largest exponent field that holds finite numbers."""
        top = (1 << self.exp_bits) - 1
        return top - 1 if self.specials is Specials.IEEE else top

    @functools.cached_property
    def max_code(self) -> int:
        """Code (sign clear) of the largest finite value."""
        man_top = (1 << self.man_bits) - 1
        exp_top = self.max_exp_field
        if self.specials is Specials.FN:
            if self.man_bits == 0:
                exp_top -= 1  # all-ones exponent is NaN
            else:
                man_top -= 1  # all-ones exponent+mantissa is NaN
        return (exp_top << self.man_bits) | man_top

    @property
    def max_value(self) -> float:
        """Largest finite value."""
        return self._value(self.max_code)

    @property
    def min_value(self) -> float:
        """Smallest positive value (the smallest subnormal where there are subnormals)."""
        return self._value(1 if self.subnormals else 0)

    def _value(self, code: int) -> float:
        """Value of one finite code from its fields (no table: works for FP32 too)."""
        e = (code >> self.man_bits) & ((1 << self.exp_bits) - 1)
        m = code & ((1 << self.man_bits) - 1)
        if e == 0 and self.subnormals:
            return float(np.ldexp(m / float(1 << self.man_bits), 1 - self.bias))
        return float(np.ldexp(1.0 + m / float(1 << self.man_bits), e - self.bias))

    @property
    def min_normal(self) -> float:
        return float(2.0 ** self.emin)

    @property
    def nan_codes(self) -> np.ndarray:
        return np.flatnonzero(np.isnan(self.values)).astype(self.dtype)

    @property
    def inf_codes(self) -> np.ndarray:
        """Codes that are +-Inf (none but in IEEE formats)."""
        return np.flatnonzero(np.isinf(self.values)).astype(self.dtype)

    @property
    def encoding(self) -> tuple:
        """The traits that fix every code's value (the name and description left out):
        two formats with equal encodings decode every code alike."""
        return (self.signed, self.exp_bits, self.man_bits, self.bias, self.subnormals,
                self.specials)

    @functools.cached_property
    def classes(self) -> "CodeClasses":
        """Every code by class (:class:`CodeClasses`), from the value table and the fields:
        exponent field 0 with a non-zero mantissa is subnormal where the format has
        subnormals (E8M0's field 0 is an ordinary binade: normal)."""
        v = self.values
        _, e, m = self.fields(np.arange(self.code_count))
        zero = v == 0
        sub = (~zero & (e == 0) & (m != 0)) if self.subnormals else np.zeros(v.shape, bool)
        nan, inf = np.isnan(v), np.isinf(v)
        normal = ~(zero | sub | nan | inf)
        pick = lambda mask: tuple(int(c) for c in np.flatnonzero(mask))  # noqa: E731
        return CodeClasses(self.name, pick(zero), pick(sub), pick(normal), pick(inf), pick(nan))

    # ----------------------------------------------------------------- tables
    @functools.cached_property
    def values(self) -> np.ndarray:
        """Value of every code, indexed by code (float64; NaN and +-Inf where defined).

        The table is read-only and is the single source of truth for decoding. Formats
        wider than 16 bits (FP32, kept in the catalog for its field widths) have none.
        """
        if self.bits > 16:
            raise ValueError(f"{self.name}: no code table for a {self.bits}-bit format")
        codes = np.arange(self.code_count, dtype=np.int64)
        mag = codes & ((1 << (self.exp_bits + self.man_bits)) - 1)
        e = mag >> self.man_bits
        m = mag & ((1 << self.man_bits) - 1)
        frac = m / float(1 << self.man_bits)
        if self.subnormals:
            val = np.where(
                e == 0,
                np.ldexp(frac, 1 - self.bias),
                np.ldexp(1.0 + frac, e - self.bias),
            )
        else:
            val = np.ldexp(1.0 + frac, e - self.bias)
        top = (1 << self.exp_bits) - 1
        if self.specials is Specials.IEEE:
            val = np.where((e == top) & (m == 0), np.inf, val)
            val = np.where((e == top) & (m != 0), np.nan, val)
        elif self.specials is Specials.FN:
            val = np.where((e == top) & (m == (1 << self.man_bits) - 1), np.nan, val)
        if self.signed:
            val = np.where(codes & self.sign_mask, -val, val)
        val.setflags(write=False)
        return val

    @functools.cached_property
    def finite_magnitudes(self) -> np.ndarray:
        """Sorted distinct non-negative finite values (``[0, 0.5, 1, ..., 6]`` for FP4)."""
        v = self.values[np.isfinite(self.values)]
        out = np.unique(np.abs(v))
        out.setflags(write=False)
        return out

    # ----------------------------------------------------------------- codec
    def decode(self, codes) -> np.ndarray:
        """Decode codes (any integer array) to float64 values."""
        c = np.asarray(codes)
        if c.dtype.kind not in "iu":
            raise TypeError(f"{self.name}: codes must be integers, got dtype {c.dtype}")
        if c.size and (c.min() < 0 or c.max() >= self.code_count):
            raise ValueError(f"{self.name}: codes must lie in [0, {self.code_count})")
        return self.values[c]

    def encode(
        self,
        x,
        *,
        rounding: Rounding = Rounding.NEAREST_EVEN,
        saturate: bool = True,
    ) -> np.ndarray:
        """Encode real values to codes.

        Parameters
        ----------
        x : array_like
            Real values (float or integer dtype).
        rounding : Rounding
            How a value between two representable ones is rounded (default ties to even,
            i.e. to the code whose mantissa LSB is 0).
        saturate : bool
            Overflow clamps to the largest finite magnitude (the papers' quantizers).
            Without it overflow gives Inf (IEEE formats) or NaN (FN formats), as
            ``ml_dtypes`` casts do; formats without specials always saturate.

        Returns
        -------
        numpy.ndarray
            Codes in :attr:`dtype`. NaN input gives a NaN code where the format has one.

        Notes
        -----
        Negative input to an unsigned format and zero input to a format without zero
        (E8M0) give the NaN code, as OCP E8M0 and ``ml_dtypes`` do; positive input below
        such a format's smallest value rounds to that value (its nearest).
        """
        a = np.asarray(x)
        if a.dtype.kind not in "fiu":
            raise TypeError(f"expected a real numeric array, got dtype {a.dtype}")
        if (self.bits <= 8 and self.subnormals
                and rounding is Rounding.NEAREST_EVEN
                and (saturate or self.specials is Specials.NONE)
                and not (a.dtype.kind == "f" and np.isnan(a).any())
                and (self.signed or not (a < 0).any())):
            return self._encode_rne_table(a)
        return self._encode_general(a.astype(np.float64, copy=False), rounding=rounding,
                                    saturate=saturate)

    def _encode_general(self, a: np.ndarray, *, rounding: Rounding, saturate: bool) -> np.ndarray:
        """Field-by-field encode (any rounding, width and specials policy)."""
        nan_in = np.isnan(a)
        sign = np.signbit(a)
        mag = np.abs(a)
        m_bits = self.man_bits

        # floor(log2 |x|) exactly: frexp gives |x| = f * 2**p with f in [0.5, 1).
        with np.errstate(invalid="ignore"):
            _, p = np.frexp(np.where(np.isfinite(mag), mag, 1.0))
        e = np.maximum(p.astype(np.int64) - 1, self.emin)
        # Significand in units of the binade's ulp: exact, since the scale is 2**n.
        k = np.ldexp(np.where(np.isfinite(mag), mag, 0.0), -(e - m_bits))
        k = round_significand(k, rounding)
        carry = k >= (1 << (m_bits + 1))  # rounding spilled into the next binade
        e = np.where(carry, e + 1, e)
        k = np.where(carry, k / 2, k).astype(np.int64)
        if not self.subnormals:
            # No zero and no subnormals: below the smallest value the nearest is that value.
            k = np.maximum(k, 1 << m_bits)

        normal = k >= (1 << m_bits)
        exp_field = np.where(normal, e + self.bias, 0 if self.subnormals else e + self.bias)
        man_field = np.where(normal, k - (1 << m_bits), k)
        mag_code = (exp_field << m_bits) | man_field

        over = (mag_code > self.max_code) | np.isinf(mag)
        nan_code = (1 << (self.exp_bits + m_bits)) - 1  # all ones (FN and IEEE NaN)
        if saturate or self.specials is Specials.NONE:
            mag_code = np.where(over, self.max_code, mag_code)
        elif self.specials is Specials.IEEE:
            inf_code = ((1 << self.exp_bits) - 1) << m_bits
            mag_code = np.where(over, inf_code, mag_code)
        else:
            mag_code = np.where(over, nan_code, mag_code)
        if self.specials is Specials.IEEE:  # Inf input stays Inf even when saturating
            inf_code = ((1 << self.exp_bits) - 1) << m_bits
            mag_code = np.where(np.isinf(mag), inf_code, mag_code)

        invalid = nan_in.copy()
        if not self.subnormals:
            invalid |= (mag == 0)  # no zero in the format
        if not self.signed:
            invalid |= sign & (mag != 0)
        if invalid.any():
            if self.specials is Specials.NONE:
                raise ValueError(f"{self.name} has no NaN code for NaN, zero or negative input")
            mag_code = np.where(invalid, nan_code, mag_code)
        code = mag_code
        if self.signed:
            code = np.where(sign, code | self.sign_mask, code)
        return code.astype(self.dtype)

    @functools.cached_property
    def _rne_table(self):
        """Magnitude-ordered codes, the midpoints between neighbours, and which way a tie
        at each midpoint goes (to the even code). The codes are ``0..max_code`` in order
        (checked): the encoders rely on it, and GPU code generators read this table."""
        mags = np.arange(self.max_code + 1)
        vals = self.values[mags]
        if not np.all(np.diff(vals) > 0):
            raise AssertionError(f"{self.name}: codes are not monotonic in magnitude")
        mids = (vals[:-1] + vals[1:]) / 2.0  # exact in float64 for <= 8-bit formats
        tie_up = (mags[1:] & 1) == 0
        return mags.astype(self.dtype), mids, tie_up

    @functools.cached_property
    def _rne_mids32(self):
        """The midpoints in float32, or None if one of them is not exact there."""
        mids = self._rne_table[1]
        mids32 = mids.astype(np.float32)
        return mids32 if np.array_equal(mids32, mids) else None

    #: Up to this many midpoints, counting comparisons beats a binary search.
    _COMPARE_MAX = 15

    @functools.cached_property
    def _rne_lut32(self):
        """Table for float32 input: the code as a function of the sign, exponent and top
        ``man_bits + 1`` mantissa bits of the input, and of whether any lower bit is set.

        Valid because every midpoint lies on that grid: the code is constant on each
        grid point and on each open interval between grid points. Built with the general
        encoder (so it inherits its exactness); ``None`` if some midpoint is off the grid.
        """
        shift = FP32.man_bits - (self.man_bits + 1)
        mids32 = self._rne_mids32
        if shift < 1 or mids32 is None or (mids32.view(np.uint32) & ((1 << shift) - 1)).any():
            return None
        grid = np.arange(1 << (32 - shift), dtype=np.uint64) << np.uint64(shift)
        lut = np.zeros(2 * len(grid), dtype=self.dtype)
        for sticky in (0, 1):
            with np.errstate(invalid="ignore"):
                x = (grid | np.uint64(sticky)).astype(np.uint32).view(np.float32).astype(np.float64)
            ok = ~np.isnan(x)  # NaN input never reaches the table
            if not self.signed:
                x = np.abs(x)  # negative input never reaches it either (-0 does: code 0)
            lut[sticky::2][ok] = self._encode_general(x[ok], rounding=Rounding.NEAREST_EVEN,
                                                      saturate=True)
        lut.setflags(write=False)
        return shift, lut

    def _encode_rne_table(self, a: np.ndarray) -> np.ndarray:
        """Ties-to-even, saturating encode of NaN-free input (Inf saturates; an unsigned
        format gets no negative input, but -0). Bit-identical to the general path (tested
        exhaustively and against ml_dtypes).

        The magnitude code is the number of midpoints below the magnitude, a midpoint
        itself counting when its tie goes up: counted with comparisons for few midpoints,
        read from :attr:`_rne_lut32` for float32 input, else found by binary search.
        float16/float32 input stays in float32 where every midpoint is exact there (no
        float64 copy).
        """
        _, mids, tie_up = self._rne_table
        mids32 = self._rne_mids32
        if a.dtype.kind == "f" and a.itemsize <= 4 and mids32 is not None:
            mids = mids32
            a = a.astype(np.float32, copy=False)
        else:
            a = a.astype(np.float64, copy=False)
        if mids.dtype == np.float32 and len(mids) > self._COMPARE_MAX and self._rne_lut32 is not None:
            shift, lut = self._rne_lut32
            bits = a.view(np.uint32)
            key = (bits >> np.uint32(shift - 1)) & np.uint32(0xFFFFFFFE)  # grid point << 1
            key |= (bits & np.uint32((1 << shift) - 1)) != 0  # | any lower bit set
            return lut[key]
        mag = np.abs(a)
        if len(mids) <= self._COMPARE_MAX:
            code = np.zeros(mag.shape, dtype=np.uint8)
            hit = np.empty(mag.shape, dtype=bool)
            for m, up in zip(mids.tolist(), tie_up.tolist()):
                (np.greater_equal if up else np.greater)(mag, mids.dtype.type(m), out=hit)
                code += hit
        else:
            idx = np.searchsorted(mids, mag, side="left")
            at = np.minimum(idx, len(mids) - 1)
            idx += (mids[at] == mag) & tie_up[at]
            code = idx.astype(self.dtype)
        if self.signed:
            neg = np.signbit(a)
            if neg.any():
                code |= neg.view(np.uint8) << np.uint8(self.bits - 1)
        return code.astype(self.dtype, copy=False)

    def quantize(self, x, **kwargs) -> np.ndarray:
        """``decode(encode(x))``: the nearest representable values, as float64."""
        return self.values[self.encode(x, **kwargs)]

    def fields(self, codes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Split codes into (sign, exponent field, mantissa field) integer arrays."""
        c = np.asarray(codes).astype(np.int64)
        sign = (c >> (self.bits - 1)) & 1 if self.signed else np.zeros_like(c)
        exp = (c >> self.man_bits) & ((1 << self.exp_bits) - 1)
        man = c & ((1 << self.man_bits) - 1)
        return sign, exp, man

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, kw_only=True)
class IntFormat:
    """A two's-complement (``signed``) or unsigned integer element format.

    Codes are the bit patterns (``-1`` in INT4 is code ``0xF``).

    Examples
    --------
    >>> from mactile.golden import INT4
    >>> INT4.encode([-9.0, -2.5, 7.4]), INT4.min_int, INT4.max_int
    (array([ 8, 14,  7], dtype=uint8), -8, 7)
    """

    name: str
    bits: int
    signed: bool = True
    description: str = field(default="", compare=False)

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise TypeError(f"IntFormat: name must be a string, got {self.name!r}")
        object.__setattr__(self, "bits", validate.integer(self.name, "bits", self.bits, lo=1,
                                                          hi=32))
        object.__setattr__(self, "signed", validate.boolean(self.name, "signed", self.signed))

    @property
    def min_int(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def max_int(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    @property
    def max_value(self) -> float:
        return float(self.max_int)

    @property
    def code_count(self) -> int:
        return 1 << self.bits

    @property
    def dtype(self) -> np.dtype:
        return code_dtype(self.bits)

    @functools.cached_property
    def values(self) -> np.ndarray:
        """Integer value of every code (int64), indexed by code."""
        if self.bits > 16:
            raise ValueError(f"{self.name}: no code table for more than 16 bits")
        v = self.decode(np.arange(self.code_count, dtype=np.int64))
        v.setflags(write=False)
        return v

    @property
    def encoding(self) -> tuple:
        """The traits that fix every code's value (see :attr:`FloatFormat.encoding`)."""
        return ("int", self.bits, self.signed)

    @functools.cached_property
    def classes(self) -> "CodeClasses":
        """Every code by class: code 0 is the zero, every other code a normal number."""
        return CodeClasses(self.name, (0,), (), tuple(range(1, self.code_count)), (), ())

    def decode(self, codes) -> np.ndarray:
        """Bit patterns (integers in ``[0, 2**bits)``) to integer values (int64).

        Raises
        ------
        ValueError
            For a code outside ``[0, 2**bits)``, as :meth:`FloatFormat.decode` does (a
            wider pattern was once silently masked: ``INT4.decode([99])`` gave 3).
        """
        c = np.asarray(codes)
        if c.dtype.kind not in "iu":
            raise TypeError(f"{self.name}: codes must be integers, got dtype {c.dtype}")
        if c.size and (c.min() < 0 or c.max() >= self.code_count):
            raise ValueError(f"{self.name}: codes must lie in [0, {self.code_count})")
        c = c.astype(np.int64)
        if self.signed:
            c = np.where(c >= (1 << (self.bits - 1)), c - (1 << self.bits), c)
        return c

    def from_int(self, ints) -> np.ndarray:
        """Integer values (already in range) to bit patterns."""
        i = np.asarray(ints).astype(np.int64)
        if i.size and (i.min() < self.min_int or i.max() > self.max_int):
            raise ValueError(f"{self.name}: values outside [{self.min_int}, {self.max_int}]")
        return (i & ((1 << self.bits) - 1)).astype(self.dtype)

    def encode(self, x, *, rounding: Rounding = Rounding.NEAREST_EVEN, saturate: bool = True):
        """Round real values to integers and clamp to the range; returns bit patterns."""
        a = _as_float64(x)
        if np.isnan(a).any():
            raise ValueError(f"{self.name}: cannot encode NaN")
        r = np.sign(a) * round_significand(np.abs(a), rounding)
        lo, hi = self.min_int, self.max_int
        if not saturate and ((r < lo) | (r > hi)).any():
            raise OverflowError(f"{self.name}: values outside [{lo}, {hi}]")
        return self.from_int(np.clip(r, lo, hi))

    def quantize(self, x, **kwargs) -> np.ndarray:
        return self.decode(self.encode(x, **kwargs)).astype(np.float64)

    def __str__(self) -> str:
        return self.name


# --------------------------------------------------------------------------- catalog
FP4_E2M1 = FloatFormat(
    name="fp4_e2m1", exp_bits=2, man_bits=1, bias=1,
    description="OCP MX FP4 E2M1: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}, no Inf/NaN",
)
FP6_E2M3 = FloatFormat(
    name="fp6_e2m3", exp_bits=2, man_bits=3, bias=1,
    description="OCP MX FP6 E2M3: max 7.5, no Inf/NaN",
)
FP6_E3M2 = FloatFormat(
    name="fp6_e3m2", exp_bits=3, man_bits=2, bias=3,
    description="OCP MX FP6 E3M2: max 28, no Inf/NaN",
)
FP8_E4M3 = FloatFormat(
    name="fp8_e4m3", exp_bits=4, man_bits=3, bias=7, specials=Specials.FN,
    description="OCP FP8 E4M3 (fn): max 448, S.1111.111 is NaN, no Inf",
)
FP8_E5M2 = FloatFormat(
    name="fp8_e5m2", exp_bits=5, man_bits=2, bias=15, specials=Specials.IEEE,
    description="OCP FP8 E5M2: max 57344, IEEE Inf (S.11111.00) and NaN",
)
E3M3 = FloatFormat(
    name="e3m3", exp_bits=3, man_bits=3, bias=3, signed=False,
    description="unsigned E3M3 (RaZeR weight block scale): bias 3, subnormals, max 30",
)
E8M0 = FloatFormat(
    name="e8m0", exp_bits=8, man_bits=0, bias=127, signed=False, subnormals=False,
    specials=Specials.FN,
    description="OCP MX E8M0 scale: 2**(E-127), 0xFF is NaN, no zero",
)
FP16 = FloatFormat(
    name="fp16", exp_bits=5, man_bits=10, bias=15, specials=Specials.IEEE,
    description="IEEE 754 binary16",
)
FP32 = FloatFormat(
    name="fp32", exp_bits=8, man_bits=23, bias=127, specials=Specials.IEEE,
    description="IEEE 754 binary32 (field widths only: no code table; accumulators, scales)",
)
INT4 = IntFormat(name="int4", bits=4, description="two's-complement 4-bit integer")
INT5 = IntFormat(name="int5", bits=5, description="two's-complement 5-bit integer")
INT6 = IntFormat(name="int6", bits=6, description="two's-complement 6-bit integer")
INT8 = IntFormat(name="int8", bits=8, description="two's-complement 8-bit integer")
UINT4 = IntFormat(name="uint4", bits=4, signed=False, description="unsigned 4-bit integer")
UINT8 = IntFormat(name="uint8", bits=8, signed=False, description="unsigned 8-bit integer")

#: Every element format by name.
ELEMENT_FORMATS: dict[str, FloatFormat | IntFormat] = {
    f.name: f
    for f in (FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3, FP8_E5M2, E3M3, E8M0, FP16, FP32,
              INT4, INT5, INT6, INT8, UINT4, UINT8)
}


def int_format(bits: int, *, signed: bool = True) -> IntFormat:
    """The integer format of a given width (from the catalog where it is there)."""
    name = f"{'' if signed else 'u'}int{bits}"
    fmt = ELEMENT_FORMATS.get(name)
    if isinstance(fmt, IntFormat):
        return fmt
    return IntFormat(name=name, bits=bits, signed=signed,
                     description=f"{'two' + chr(39) + 's-complement' if signed else 'unsigned'} {bits}-bit integer")
