"""FP4 E2M1 block formats: NVFP4, MXFP4, RaZeR (weights) and RaZeR-act (activations).

Arithmetic convention (named, shared by every two-level format here): the tensor scale,
the block-scale argument and the scaled elements are computed in IEEE FP32 with
round-to-nearest-even, one operation at a time in the order written below, as a CUDA
kernel without fast-math computes them. Input is first rounded to FP32. Dequantized
values are exact products (computed in float64, where they are exact).

NVFP4 (RaZeR paper Eq. 1-3; 000_49819f78d38da0d0.txt Sec. 3)::

    D32   = amax / (448 * 6)                         tensor scale, FP32
    D8_i  = E4M3( amax_i / (D32 * 6) )               block scale, saturating RNE
    q     = FP4( x / (D32 * D8_i) )                  element, saturating RNE

RaZeR (Sec. 4.1-4.2; the project's `razer` convention, see docs/formats.md): the FP4 code
0b0000 (+0) stands for the block's special value, real zeros are stored as 0b1000 (-0).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .block import BlockFormat, tensor_amax
from .elements import E3M3, E8M0, FP4_E2M1, FP8_E4M3, FloatFormat

__all__ = [
    "NVFP4", "MXFP4", "RaZeR", "RaZeRAct",
    "SPECIAL_CODE", "ZERO_CODE", "razer_offset_code", "razer_offset_value",
    "SPECIAL_MIN", "SPECIAL_MAX",
]

_F32 = np.float32
#: FP4 code that RaZeR remaps to the block's special value (+0).
SPECIAL_CODE = 0b0000
#: FP4 code that holds a real zero in RaZeR blocks (-0).
ZERO_CODE = 0b1000
#: Special magnitudes are 6 + a 4-bit sign-magnitude offset in [-3.5, 3.5] (steps of 0.5).
SPECIAL_MIN, SPECIAL_MAX = 2.5, 9.5


def razer_offset_code(magnitude: float) -> int:
    """The 4-bit offset-register code of a special magnitude (RaZeR Fig. 4).

    The register is sign-magnitude fixed point: 1 sign, 2 integer and 1 fraction bit;
    the decoder adds it to 6.0. ``razer_offset_code(5.0) == 0b1010`` (offset -1.0).
    """
    _check_special(magnitude)
    off = magnitude - 6.0
    return (int(off < 0) << 3) | int(round(abs(off) * 2))


def razer_offset_value(code: int) -> float:
    """Inverse of :func:`razer_offset_code`: the magnitude 6 + offset."""
    if not 0 <= code < 16:
        raise ValueError(f"offset code must be 4 bits, got {code}")
    mag = (code & 0b111) / 2.0
    return 6.0 - mag if code & 0b1000 else 6.0 + mag


def _check_special(v: float) -> None:
    if not (SPECIAL_MIN <= v <= SPECIAL_MAX):
        raise ValueError(f"special value {v} is out of range: magnitudes must lie in "
                         f"[{SPECIAL_MIN}, {SPECIAL_MAX}] (6 + a 4-bit offset in [-3.5, 3.5])")
    if v * 2 != round(v * 2):
        raise ValueError(f"special value {v} is off the 0.5 grid (must be a multiple of 0.5)")


def lowest_error(x, vals, errs) -> np.ndarray:
    """Per block, the candidate with the lowest *exact* squared error, ties to the first.

    Parameters
    ----------
    x : (n, B) float64
        The input.
    vals : sequence of (n, B) float64
        Each candidate's dequantized values.
    errs : (n, k) float64
        Each candidate's ``sum((x - vals[c])**2)`` as rounded float64 sums: within
        ``(B + 2) * 2**-53`` of the exact sums, relatively (plus underflow).

    Returns
    -------
    (n,) uint8 candidate index.

    Notes
    -----
    Where two candidates' rounded errors lie within twice that bound and their values
    differ, exact integer arithmetic decides: rounding must not break an exact tie, or the
    choice would depend on the summation order.
    """
    n, k = errs.shape
    rows = np.arange(n)
    best = np.argmin(errs, axis=1)  # the first of equal minima
    e_best = errs[rows, best]
    slack = (errs + e_best[:, None]) * ((x.shape[1] + 4) * 2.0 ** -52) + 2.0 ** -1000
    near = np.abs(errs - e_best[:, None]) <= slack
    near[rows, best] = False
    r = np.flatnonzero(near.any(axis=1))
    if r.size == 0:
        return best.astype(np.uint8)
    vb = np.stack(vals)[best[r], r]
    for c in range(k):  # identical values have identical errors: nothing to decide
        near[r, c] &= (vals[c][r] != vb).any(axis=1)
    r = np.flatnonzero(near.any(axis=1))
    if r.size == 0:
        return best.astype(np.uint8)
    ints = _exact_ints(np.stack([x[r]] + [v[r] for v in vals]))
    xi, vi = ints[0], ints[1:]
    sq = [((xi - vi[c]) ** 2).sum(axis=1) for c in range(k)]  # exact, in a common unit
    for j, row in enumerate(r):
        pool = [int(best[row])] + [c for c in range(k) if near[row, c]]
        best[row] = min(pool, key=lambda c: (sq[c][j], c))
    return best.astype(np.uint8)


def _exact_ints(a: np.ndarray) -> np.ndarray:
    """Finite float64 values as exact Python integers in one common unit (object array)."""
    mant, exp = np.frexp(a)
    m = (mant * 2.0 ** 53).astype(np.int64)  # exact: |mant| < 1 has 53 significant bits
    e = exp.astype(np.int64) - 53
    nz = m != 0
    e0 = int(e[nz].min()) if nz.any() else 0
    return m.astype(object) << np.where(nz, e - e0, 0).astype(object)  # Python ints


def _fp32(x) -> np.ndarray:
    return np.asarray(x, dtype=_F32)


def _tensor_scale(flat: np.ndarray, denominator: float) -> np.float32:
    """``amax / denominator`` in FP32; 1.0 for an all-zero tensor (every code is then a
    zero, so the value is immaterial but finite)."""
    d = _F32(tensor_amax(flat) / _F32(denominator))
    return d if d > 0 else _F32(1.0)


@dataclass(frozen=True, kw_only=True)
class _TwoLevelFP4(BlockFormat):
    """NVFP4-style pipeline with optional special-value candidates (shared machinery)."""

    block_size: int = 16

    #: Largest block-scale value times 6 (the tensor-scale denominator).
    scale_format: ClassVar[FloatFormat] = FP8_E4M3

    def _candidates(self) -> tuple[float, ...]:
        """Signed special values to try per block, in tie-break order (empty: none)."""
        return ()

    def _tensor_params(self, flat):
        return {"tensor_scale": _tensor_scale(flat, self.scale_format.max_value * 6.0)}

    def _scale_pipeline(self, x32, amax, d32, target):
        """Block scale for mapping ``amax`` to ``target``; returns (code, value, scaled)."""
        arg = amax / (d32 * _F32(target))
        s_code = self.scale_format.encode(arg)
        s_val = _fp32(self.scale_format.values[s_code])
        denom = d32 * s_val  # FP32 product
        with np.errstate(divide="ignore", invalid="ignore"):
            scaled = x32 / denom[:, None]
        scaled = np.where(denom[:, None] > 0, scaled, _F32(0.0))
        return s_code, s_val, scaled

    def _quantize_blocks(self, xb, ctx):
        d32 = ctx["tensor_scale"]
        x32 = _fp32(xb)
        amax = np.max(np.abs(x32), axis=1)
        cands = self._candidates()
        if not cands:
            s_code, _, scaled = self._scale_pipeline(x32, amax, d32, 6.0)
            return FP4_E2M1.encode(scaled), s_code, None

        x64 = np.asarray(xb, dtype=np.float64)
        all_codes, all_scode, all_vals, errs = [], [], [], []
        for v in cands:
            s_code, s_val, scaled = self._scale_pipeline(x32, amax, d32, max(6.0, abs(v)))
            c = FP4_E2M1.encode(scaled)
            q = FP4_E2M1.values[c]
            s64 = scaled.astype(np.float64)
            # A tie between v and an FP4 value goes to the FP4 value (strict <).
            use_v = np.abs(s64 - v) < np.abs(s64 - q)
            c = np.where(c == SPECIAL_CODE, np.uint8(ZERO_CODE), c)  # real zeros as -0
            c = np.where(use_v, np.uint8(SPECIAL_CODE), c)
            val = np.where(use_v, v, q) * (s_val.astype(np.float64) * float(d32))[:, None]
            all_codes.append(c)
            all_scode.append(s_code)
            all_vals.append(val)
            errs.append(np.sum((x64 - val) ** 2, axis=1))
        best_k = lowest_error(x64, all_vals, np.stack(errs, axis=1))
        rows = np.arange(len(best_k))
        best_codes = np.stack(all_codes)[best_k, rows]
        best_scode = np.stack(all_scode)[best_k, rows]
        return best_codes.astype(np.uint8), self._pack_scale(best_scode, best_k), None

    def _pack_scale(self, s_code, cand_index):
        raise NotImplementedError

    def _unpack_scale(self, scales):
        """(scale code, signed special value per block or None)."""
        return scales, None

    def _dequantize_blocks(self, codes, scales, meta, ctx):
        s_code, special = self._unpack_scale(scales)
        s = self.scale_format.values[s_code] * float(ctx["tensor_scale"])
        q = FP4_E2M1.values[codes]
        if special is not None:
            q = np.where(codes == SPECIAL_CODE, special[:, None], q)
        return q * s[:, None]

    @property
    def bits_per_element(self) -> float:
        return 4 + 8 / self.block_size  # the FP32 tensor scale is amortised away


@dataclass(frozen=True, kw_only=True)
class NVFP4(_TwoLevelFP4):
    """NVFP4: 16-element blocks of FP4 E2M1, E4M3 block scales, an FP32 tensor scale.

    Examples
    --------
    >>> import numpy as np
    >>> from mactile.golden import NVFP4
    >>> q = NVFP4().quantize(np.linspace(-3, 3, 32, dtype=np.float32))
    >>> q.codes.shape, q.scales.shape, q.format.bits_per_element
    ((2, 16), (2,), 4.5)
    """

    name: ClassVar[str] = "nvfp4"
    reference: ClassVar[str] = "RaZeR (000) Sec. 3, Eq. 1-3; NVIDIA NVFP4"

    def _pack_scale(self, s_code, cand_index):  # pragma: no cover - no candidates
        return s_code


@dataclass(frozen=True, kw_only=True)
class RaZeRAct(_TwoLevelFP4):
    """RaZeR for activations: NVFP4 plus one metadata bit choosing +a or -a.

    The bit is the E4M3 block scale's redundant sign bit (bit 7 = 1: the special value is
    -a). Per block the candidate with the lower squared error wins, ties to +a. The block
    scale maps the block maximum to ``max(6, a)``.
    """

    special_value: float = 5.0

    name: ClassVar[str] = "razer-act"
    reference: ClassVar[str] = "RaZeR (000) Sec. 4.1-4.2"

    def __post_init__(self):
        super().__post_init__()
        _check_special(self.special_value)

    def _candidates(self):
        return (self.special_value, -self.special_value)

    def _pack_scale(self, s_code, cand_index):
        return (s_code | (cand_index.astype(np.uint8) << 7)).astype(np.uint8)

    def _unpack_scale(self, scales):
        sign = (scales >> 7) & 1
        return scales & 0x7F, np.where(sign == 1, -self.special_value, self.special_value)


@dataclass(frozen=True, kw_only=True)
class RaZeR(_TwoLevelFP4):
    """RaZeR for weights: 16-element FP4 blocks, one byte per block for scale + metadata.

    Scale byte: bits 5..0 the E3M3 block scale, bit 6 which special magnitude
    (0: ``special_values[0]``, 1: ``special_values[1]``), bit 7 its sign (1: negative).
    Tensor scale ``D32 = amax / (30 * 6)``. Candidates per block, in tie-break order:
    ``+a, -a, +b, -b``; for each the block scale maps the block max to ``max(6, |v|)``,
    elements round to the nearest of FP4 and ``v`` (ties to FP4), and the lowest squared
    error in the input's units wins.
    """

    special_values: tuple[float, float] = (5.0, 8.0)

    name: ClassVar[str] = "razer"
    reference: ClassVar[str] = "RaZeR (000) Sec. 4.1-4.2, 4.4, App. B.2"
    scale_format: ClassVar[FloatFormat] = E3M3

    def __post_init__(self):
        super().__post_init__()
        if len(self.special_values) != 2:
            raise ValueError(f"razer needs exactly two special magnitudes, got "
                             f"{self.special_values!r}")
        for v in self.special_values:
            _check_special(v)

    def _candidates(self):
        a, b = self.special_values
        return (a, -a, b, -b)

    def _pack_scale(self, s_code, cand_index):
        sel = cand_index.astype(np.uint8) >> 1
        sign = cand_index.astype(np.uint8) & 1
        return (s_code | (sel << 6) | (sign << 7)).astype(np.uint8)

    def _unpack_scale(self, scales):
        sel = (scales >> 6) & 1
        sign = (scales >> 7) & 1
        mag = np.where(sel == 1, self.special_values[1], self.special_values[0])
        return scales & 0x3F, np.where(sign == 1, -mag, mag)


@dataclass(frozen=True, kw_only=True)
class MXFP4(BlockFormat):
    """OCP MX v1.0 MXFP4: 32-element FP4 E2M1 blocks with an E8M0 power-of-two scale.

    Scale ``2**(floor(log2 amax_i) - 2)`` (2 = the largest FP4 exponent), elements
    rounded to nearest even and saturated at +-6. An all-zero block gets scale code 0
    (``2**-127``). Scale exponents clamp to E8M0's range [-127, 127].
    """

    block_size: int = 32

    name: ClassVar[str] = "mxfp4"
    reference: ClassVar[str] = "OCP Microscaling Formats (MX) v1.0, Sec. 5-6"

    def _quantize_blocks(self, xb, ctx):
        x = np.asarray(xb, dtype=np.float64)
        amax = np.max(np.abs(x), axis=1)
        _, p = np.frexp(amax)
        e = np.where(amax > 0, p.astype(np.int64) - 1 - 2, -127)
        e = np.clip(e, -127, 127)
        codes = FP4_E2M1.encode(np.ldexp(x, -e[:, None]))
        return codes, (e + E8M0.bias).astype(np.uint8), None

    def _dequantize_blocks(self, codes, scales, meta, ctx):
        return np.ldexp(FP4_E2M1.values[codes], scales.astype(np.int64)[:, None] - E8M0.bias)

    @property
    def bits_per_element(self) -> float:
        return 4 + 8 / self.block_size
