"""Block-scaled formats: the shared machinery and the :class:`Quantized` result.

A block format quantizes along the last axis in blocks of ``block_size`` elements. Its
result, :class:`Quantized`, holds the bits exactly as hardware and kernels store them:

``codes``
    element codes, shape ``(..., n_blocks, block_size)``;
``scales``
    one block-scale code per block, shape ``(..., n_blocks)``, including any metadata
    bits that the format keeps inside the scale byte (RaZeR);
``meta``
    other per-block or per-element metadata (the DialectFP4 dialect id, NestedFP's lower
    byte), or ``None``;
``tensor_scale``
    the second-level FP32 scale (NVFP4, RaZeR), or ``None``.

Work is done in chunks of blocks, so peak memory stays a small multiple of the input
whatever its size, and chunks run on a small thread pool (NumPy releases the GIL).
"""
from __future__ import annotations

import abc
import concurrent.futures
import dataclasses
import enum
import math
import numbers
import os
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .conventions import Convention

__all__ = ["BlockFormat", "Quantized", "QuantError", "InputError", "check_input", "row_max",
           "row_sum", "check_range"]

#: Elements handled per chunk: large enough to amortise NumPy's per-call overhead, small
#: enough that a chunk and its temporaries stay in a core's L2 cache (2**16 float32 is
#: 256 KiB; measured fastest among 2**14..2**20 on the 2-core CI machine, see
#: docs/performance.md).
CHUNK_ELEMENTS = 1 << 16


class InputError(ValueError):
    """The input array cannot be quantized (the message names the problem)."""


def _threads() -> int:
    env = os.environ.get("MACTILE_THREADS")
    if env:
        return max(1, int(env))
    return max(1, min(4, os.cpu_count() or 1))


def check_input(x, block_size: int, *, name: str) -> np.ndarray:
    """Validate an array for block quantization and return it as a floating array.

    Raises
    ------
    InputError
        For a non-floating dtype (integer, complex, bool, object), a 0-d array, NaN or
        Inf (the first offending index is named), a last axis that the block size does
        not divide, or a masked array with masked values (the mask would be lost).
    """
    if isinstance(x, np.ma.MaskedArray) and np.ma.getmaskarray(x).any():
        # np.asarray drops the mask: the masked entries' stored values would be quantized.
        raise InputError(f"{name}: a masked array with {int(np.ma.getmaskarray(x).sum())} "
                         f"masked value(s); the mask would be ignored: fill them "
                         f"(x.filled(0.0)) or pass x.data if intended")
    a = np.asarray(x)
    if a.dtype.kind == "c":
        raise InputError(f"{name}: complex input (dtype {a.dtype}) is not supported; "
                         "quantize the real and imaginary parts separately")
    if a.dtype.kind != "f":
        raise InputError(f"{name}: expected a floating-point array, got dtype {a.dtype}; "
                         "convert integers explicitly (x.astype(np.float32)) if intended")
    if a.ndim == 0:
        raise InputError(f"{name}: expected at least a 1-d array, got a scalar")
    if a.shape[-1] % block_size:
        raise InputError(
            f"{name}: last axis has {a.shape[-1]} elements, not a multiple of the "
            f"block size {block_size}")
    if a.dtype.itemsize > 8 and a.size:  # float128/longdouble: checked before any narrowing
        big = np.abs(a) > np.finfo(np.float64).max
        if big.any():
            idx = np.unravel_index(int(np.argmax(big.reshape(-1))), a.shape)
            raise InputError(f"{name}: value {a[idx]} at index {tuple(int(i) for i in idx)} "
                             f"is beyond float64's range ({np.finfo(np.float64).max:.6g}; "
                             f"{int(big.sum())} value(s) in all): the formats compute in "
                             f"float64 at most")
    finite = np.isfinite(a)
    if not finite.all():
        idx = np.unravel_index(int(np.argmin(finite.reshape(-1))), a.shape)
        bad = a[idx]
        raise InputError(f"{name}: input holds {'NaN' if np.isnan(bad) else bad} at index "
                         f"{tuple(int(i) for i in idx)} ({int((~finite).sum())} non-finite "
                         "value(s) in all)")
    return a


_LOG10_2 = math.log10(2.0)


def _scaled_sum_sq(a: np.ndarray) -> tuple[float, int]:
    """``sum(a**2)`` as ``(m, e)`` with the sum ``m * 4**e``: the elements are scaled by
    a power of two (exactly) so that the squares neither underflow nor overflow."""
    if a.size == 0:
        return 0.0, 0
    amax = float(np.max(np.abs(a)))
    if amax == 0.0:
        return 0.0, 0
    e = math.frexp(amax)[1]  # amax * 2**-e in [0.5, 1)
    scaled = np.ldexp(a, -e)  # elements below 2**-1074 of the largest vanish: negligible
    return float(np.dot(scaled, scaled)), e


@dataclass(frozen=True)
class QuantError:
    """Quantization error of one tensor, exact in what it claims.

    Squares of tiny values (below about 1e-154) underflow float64 and those of huge ones
    overflow it, which once turned an all-zero output into "MSE 0, SQNR inf dB". Here the
    error and the signal are each summed after scaling by a power of two, so the ratio and
    the logarithms are right at every magnitude; ``exact`` compares the values themselves.

    Attributes
    ----------
    count : int
        Elements compared.
    exact : bool
        Every output equals its input.
    all_zero : bool
        Every output is zero while some input is not (the input lies below the format's
        smallest step, or the format flushed it).
    """

    count: int
    exact: bool
    all_zero: bool
    _noise: tuple[float, int]
    _signal: tuple[float, int]

    @classmethod
    def between(cls, x, y) -> "QuantError":
        """The error of ``y`` (dequantized) against ``x`` (original)."""
        x64 = np.asarray(x, dtype=np.float64)
        y64 = np.asarray(y, dtype=np.float64)
        if x64.shape != y64.shape:
            raise ValueError(f"cannot compare shapes {x64.shape} and {y64.shape}")
        if x64.size == 0:
            raise ValueError(f"no elements to compare (shape {x64.shape})")
        x1, y1 = x64.reshape(-1), y64.reshape(-1)
        exact = bool(np.array_equal(x1, y1))
        all_zero = not exact and not np.any(y1)
        if exact:
            noise = (0.0, 0)
        elif max(float(np.max(np.abs(x1))), float(np.max(np.abs(y1)))) < 2.0 ** 1022:
            noise = _scaled_sum_sq(x1 - y1)
        else:  # x - y may overflow: subtract the halves (exact at these magnitudes)
            m, e = _scaled_sum_sq(x1 * 0.5 - y1 * 0.5)
            noise = (m, e + 1)
        return cls(count=x1.size, exact=exact, all_zero=all_zero, _noise=noise,
                   _signal=_scaled_sum_sq(x1))

    @property
    def mse_log10(self) -> float:
        """log10 of the mean squared error (``-inf`` when exact), at any magnitude."""
        m, e = self._noise
        if m == 0.0:
            return -math.inf
        return math.log10(m / self.count) + 2 * e * _LOG10_2

    @property
    def mse(self) -> float:
        """Mean squared error as a float64: 0.0 only when exact. An error too small for
        float64 (below 5e-324) is given as 5e-324, one too large as ``inf``; see
        :attr:`mse_text` and :attr:`mse_log10` for its value then."""
        m, e = self._noise
        if m == 0.0:
            return 0.0
        try:
            v = math.ldexp(m / self.count, 2 * e)
        except OverflowError:
            return math.inf
        return v if v > 0.0 else math.ulp(0.0)

    @property
    def mse_text(self) -> str:
        """The MSE to four significant digits, whatever its magnitude (``"0"`` if exact)."""
        if self.exact:
            return "0"
        lg = self.mse_log10
        p = math.floor(lg)
        mant = 10.0 ** (lg - p)
        if mant >= 9.9995:  # rounds up to the next power
            mant, p = 1.0, p + 1
        return f"{mant:.4g}e{p:+03d}"

    @property
    def sqnr_db(self) -> float:
        """Signal-to-quantization-noise ratio in dB (``inf`` when exact)."""
        if self.exact:
            return math.inf
        (nm, ne), (sm, se) = self._noise, self._signal
        if nm == 0.0:  # differences too small to square even after scaling (never seen)
            return math.inf
        return 10.0 * (math.log10(sm / nm) + 2 * (se - ne) * _LOG10_2)

    def summary(self) -> str:
        """``"MSE 1.234e-05, SQNR 21.50 dB"``, and a note where every output is zero."""
        text = f"MSE {self.mse_text}, SQNR {self.sqnr_db:.2f} dB"
        if self.all_zero:
            text += " (every output is zero: the input lies below the format's smallest step)"
        return text


@dataclass(frozen=True, eq=False)
class Quantized:
    """Quantized tensor: codes, scales and metadata exactly as stored.

    Use :meth:`dequantize` for the float64 values and :meth:`mse`/:meth:`sqnr_db` for
    the error against the original.
    """

    format: "BlockFormat"
    shape: tuple[int, ...]
    codes: np.ndarray
    scales: np.ndarray | None = None
    meta: np.ndarray | None = None
    tensor_scale: np.float32 | None = None

    def dequantize(self) -> np.ndarray:
        """Dequantized values, float64, in the original shape."""
        return self.format.dequantize(self)

    def error(self, x) -> "QuantError":
        """The error against the original ``x``, computed without underflow or overflow
        (see :class:`QuantError`).

        Raises
        ------
        ValueError
            ``x`` has another shape than this tensor, or no elements.
        """
        return QuantError.between(x, self.dequantize())

    def mse(self, x) -> float:
        """Mean squared error against the original ``x`` (:attr:`QuantError.mse`)."""
        return self.error(x).mse

    def sqnr_db(self, x) -> float:
        """Signal-to-quantization-noise ratio in dB (``inf`` when exact;
        :attr:`QuantError.sqnr_db`)."""
        return self.error(x).sqnr_db

    @property
    def n_blocks(self) -> int:
        return int(np.prod(self.codes.shape[:-1]))

    def arrays(self) -> dict[str, np.ndarray]:
        """The stored arrays by name (for ``.npz`` files and packers)."""
        out = {"codes": self.codes}
        if self.scales is not None:
            out["scales"] = self.scales
        if self.meta is not None:
            out["meta"] = self.meta
        if self.tensor_scale is not None:
            out["tensor_scale"] = np.asarray(self.tensor_scale, dtype=np.float32)
        return out

    def save_npz(self, path) -> None:
        """Write codes, scales, metadata and the format's description to ``path``."""
        np.savez(path, shape=np.asarray(self.shape, dtype=np.int64),
                 format=np.asarray(self.format.describe()), **self.arrays())


@dataclass(frozen=True, kw_only=True)
class BlockFormat(abc.ABC):
    """Base of every block format spec (frozen; options are its fields).

    Subclasses implement :meth:`_quantize_blocks` and :meth:`_dequantize_blocks` on a 2-d
    ``(n, block_size)`` chunk; tensor-wide parameters (a second-level scale) come from
    :meth:`_tensor_params`, computed once over the whole input.
    """

    block_size: int

    #: Registry name (``"nvfp4"``).
    name: ClassVar[str] = ""
    #: Paper and section the default conventions come from.
    reference: ClassVar[str] = ""
    #: Where the block's scale word keeps scale, metadata and special codes
    #: (:class:`~.storage.BlockStorage`; None for formats outside the FP4 family).
    storage: ClassVar[Any] = None
    #: Block sizes the format allows.
    allowed_block_sizes: ClassVar[tuple[int, ...] | None] = None

    def __post_init__(self):
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, numbers.Integral):
            raise TypeError(f"{self.name}: block size must be an integer, got "
                            f"{self.block_size!r} ({type(self.block_size).__name__})")
        object.__setattr__(self, "block_size", int(self.block_size))
        if self.allowed_block_sizes is not None and self.block_size not in self.allowed_block_sizes:
            raise ValueError(f"{self.name}: block size must be one of "
                             f"{self.allowed_block_sizes}, got {self.block_size}")
        if self.block_size < 1:
            raise ValueError(f"{self.name}: block size must be positive, got {self.block_size}")

    # ----------------------------------------------------------------- interface
    @property
    @abc.abstractmethod
    def bits_per_element(self) -> float:
        """Effective storage bits per element, scales and metadata included."""

    def describe(self) -> str:
        """One line naming the format and every option."""
        def show(v):
            if isinstance(v, Convention):
                return repr(v.label(self.name))
            return repr(v.value) if isinstance(v, enum.Enum) else repr(v)

        opts = ", ".join(f"{f.name}={show(getattr(self, f.name))}" for f in dataclasses.fields(self))
        return f"{self.name}({opts})"

    def input_range(self) -> tuple[float, str] | None:
        """``(limit, why)``: magnitudes ``>= limit`` are refused by :meth:`quantize` with
        an :class:`InputError` that quotes ``why``; ``None`` where every finite value is
        accepted. Every format that computes in a narrower type (FP32, FP16) or whose
        scale has a largest value states its limit here, so all refuse the same way."""
        return None

    def is_default_convention(self) -> bool:
        """True unless the format's :class:`~.conventions.Convention` (NVFP4, MXFP4) has a
        non-default option. RTL generators and GPU packers implement the default only and
        refuse the rest (:func:`~.conventions.require_default_convention`)."""
        conv = getattr(self, "convention", None)
        return conv is None or conv.is_default

    def quantize(self, x) -> Quantized:
        """Quantize ``x`` (floating point, blocks along the last axis).

        Raises
        ------
        InputError
            A non-floating or 0-d array, NaN/Inf, a last axis that the block size does not
            divide (:func:`check_input`), or a value beyond :meth:`input_range`.
        """
        a = check_input(x, self.block_size, name=self.name)
        check_range(a, self.input_range(), name=self.name)
        flat = a.reshape(-1, self.block_size)
        ctx = self._tensor_params(flat)
        n = flat.shape[0]
        codes = np.empty((n, self.block_size), dtype=self.code_dtype)
        scales = np.empty(n, dtype=self.scale_dtype) if self.scale_dtype is not None else None
        meta = self._allocate_meta(n)

        def work(lo, hi):
            c, s, m = self._quantize_blocks(flat[lo:hi], ctx)
            codes[lo:hi] = c
            if scales is not None:
                scales[lo:hi] = s
            if meta is not None:
                meta[lo:hi] = m

        self._run_chunks(n, work)
        lead = a.shape[:-1] + (a.shape[-1] // self.block_size,)
        return Quantized(
            format=self, shape=tuple(a.shape),
            codes=codes.reshape(lead + (self.block_size,)),
            scales=None if scales is None else scales.reshape(lead),
            meta=None if meta is None else meta.reshape(lead + meta.shape[1:]),
            tensor_scale=ctx.get("tensor_scale"),
        )

    def dequantize(self, q: Quantized) -> np.ndarray:
        """Float64 values of a :class:`Quantized` of this format."""
        if q.format != self:
            raise ValueError(f"{self.name}: cannot dequantize a {q.format.describe()} tensor")
        n = q.n_blocks
        codes = q.codes.reshape(n, self.block_size)
        scales = None if q.scales is None else q.scales.reshape(n)
        meta = None if q.meta is None else q.meta.reshape((n,) + q.meta.shape[len(q.codes.shape) - 1:])
        ctx = {"tensor_scale": q.tensor_scale}
        out = np.empty((n, self.block_size), dtype=np.float64)

        def work(lo, hi):
            self._dequantize_into(
                codes[lo:hi], None if scales is None else scales[lo:hi],
                None if meta is None else meta[lo:hi], ctx, out[lo:hi])

        self._run_chunks(n, work)
        return out.reshape(q.shape)

    def roundtrip(self, x) -> np.ndarray:
        """``quantize(x).dequantize()``."""
        return self.quantize(x).dequantize()

    # ----------------------------------------------------------------- storage
    #: dtype of an element code.
    code_dtype: ClassVar[np.dtype] = np.dtype(np.uint8)
    #: dtype of a block-scale code (``None``: the format has no per-block scale).
    scale_dtype: ClassVar[np.dtype | None] = np.dtype(np.uint8)

    def _allocate_meta(self, n_blocks: int) -> np.ndarray | None:
        return None

    # ----------------------------------------------------------------- hooks
    def _tensor_params(self, flat: np.ndarray) -> dict[str, Any]:
        return {}

    @abc.abstractmethod
    def _quantize_blocks(self, xb: np.ndarray, ctx: dict) -> tuple:
        """Quantize a ``(n, block_size)`` chunk; return ``(codes, scales, meta)``."""

    @abc.abstractmethod
    def _dequantize_blocks(self, codes, scales, meta, ctx) -> np.ndarray:
        """Dequantize a chunk to float64 ``(n, block_size)``."""

    def _dequantize_into(self, codes, scales, meta, ctx, out: np.ndarray) -> None:
        """Dequantize a chunk into ``out`` (formats override this to skip a copy)."""
        out[...] = self._dequantize_blocks(codes, scales, meta, ctx)

    # ----------------------------------------------------------------- helpers
    def _run_chunks(self, n_blocks: int, work) -> None:
        step = max(1, CHUNK_ELEMENTS // self.block_size)
        bounds = [(lo, min(lo + step, n_blocks)) for lo in range(0, n_blocks, step)]
        threads = _threads()
        if threads == 1 or len(bounds) == 1:
            for lo, hi in bounds:
                work(lo, hi)
            return
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            for f in [pool.submit(work, lo, hi) for lo, hi in bounds]:
                f.result()


def check_range(a: np.ndarray, limit: tuple[float, str] | None, *, name: str) -> None:
    """:class:`InputError` if some ``|a| >= limit[0]``, naming the first such value, its
    index, the limit and why (``limit[1]``); nothing when ``limit`` is None."""
    if limit is None or a.size == 0:
        return
    bound, why = limit
    if float(np.finfo(a.dtype).max) < bound:
        return  # the dtype cannot hold such a value
    flat = a.reshape(-1)
    step = CHUNK_ELEMENTS
    big = 0.0
    for lo in range(0, flat.size, step):  # max and -min: no |x| temporary
        part = flat[lo:lo + step]
        big = max(big, float(part.max()), -float(part.min()))
    if big < bound:
        return
    mask = np.abs(a.astype(np.float64)) >= bound
    idx = np.unravel_index(int(np.argmax(mask)), a.shape)
    raise InputError(f"{name}: value {a[idx]} at index {tuple(int(i) for i in idx)} is out of "
                     f"range ({why}; {int(mask.sum())} value(s) in all)")


def row_max(a: np.ndarray) -> np.ndarray:
    """``a.max(axis=1)`` of a 2-d array, one column at a time: NumPy reduces short
    contiguous rows one by one, which costs several times more for blocks of 16."""
    m = a[:, 0].copy()
    for j in range(1, a.shape[1]):
        np.maximum(m, a[:, j], out=m)
    return m


def row_sum(a: np.ndarray) -> np.ndarray:
    """``a.sum(axis=1)`` of a 2-d array, one column at a time (left to right, so float
    sums round in that order; exact where every partial sum is representable)."""
    s = a[:, 0].copy()
    for j in range(1, a.shape[1]):
        np.add(s, a[:, j], out=s)
    return s


def tensor_amax(flat: np.ndarray) -> np.float32:
    """Largest magnitude of a tensor as FP32 (chunked to bound memory)."""
    step = CHUNK_ELEMENTS // max(1, flat.shape[-1])
    m = 0.0
    for lo in range(0, flat.shape[0], max(1, step)):
        part = flat[lo:lo + step]
        if part.size:
            m = max(m, float(np.max(np.abs(part))))
    with np.errstate(over="ignore"):  # beyond FP32: Inf, which the caller reports
        return np.float32(m)
