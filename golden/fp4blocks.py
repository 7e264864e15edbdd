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

import dataclasses

import functools
import numbers
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .block import BlockFormat, InputError, row_max, row_sum, tensor_amax
from .conventions import (DEFAULT_CONVENTION, Convention, Dequantization, ElementScaling,
                          ElementTies, MXScaleRule, NegativeZero, ScaleArgument, check_options)
from .elements import E8M0, FP4_E2M1, FP8_E4M3, FloatFormat, Rounding
from .storage import (SPECIAL_CODE, STORAGES, ZERO_CODE, BlockStorage, candidate_fields,
                      special_by_fields)

__all__ = [
    "NVFP4", "MXFP4", "RaZeR", "RaZeRAct",
    "SPECIAL_CODE", "ZERO_CODE", "razer_offset_code", "razer_offset_value",
    "SPECIAL_MIN", "SPECIAL_MAX",
]

_F32 = np.float32
#: FP4 E2M1 value of every code (float64), the dequantizer's table.
_FP4_VALUES = FP4_E2M1.values
# SPECIAL_CODE (+0, the block's special value) and ZERO_CODE (-0, a real zero) come from
# the one storage spec (.storage); the quantizer below relies on SPECIAL_CODE == 0.
#: Smallest magnitude that rounds to Inf in FP32 (RNE): FP32's largest plus half an ulp.
_FP32_OVERFLOW = 2.0 ** 128 - 2.0 ** 103
#: MXFP4 refuses a block whose largest magnitude needs a scale exponent above E8M0's
#: largest (127), per scale rule: the smallest such amax, and how messages write it.
#: floor: floor(log2 amax) - 2 > 127; ceil: ceil(log2 amax) - 2 > 127, i.e. amax > 2**129;
#: even: amax in [1.75, 2) * 2**129 rounds up a binade first.
_MXFP4_OVERFLOW = {
    MXScaleRule.FLOOR: (2.0 ** 130, f"< 2**130 = {2.0 ** 130:.8g}"),
    MXScaleRule.CEIL: (float(np.nextafter(2.0 ** 129, np.inf)), f"<= 2**129 = {2.0 ** 129:.8g}"),
    MXScaleRule.EVEN: (1.75 * 2.0 ** 129, f"< 1.75 * 2**129 = {1.75 * 2.0 ** 129:.8g}"),
}
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


def special_pair(owner: str, values) -> tuple[float, float]:
    """Two special magnitudes as floats, each checked (RaZeR, RaZeR-G128)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{owner}: special_values must be two numbers, got {values!r}")
    if isinstance(values, (set, frozenset, dict)):  # unordered: A and B could swap
        raise TypeError(f"{owner}: special_values must be an ordered pair (a list or tuple: "
                        f"the first is A, the second B), got a {type(values).__name__} "
                        f"{values!r}")
    values = tuple(values)
    if len(values) != 2:
        raise ValueError(f"{owner} needs exactly two special magnitudes, got {values!r}")
    return tuple(special_magnitude(owner, "special_values", v) for v in values)


def special_magnitude(owner: str, name: str, v) -> float:
    """A special magnitude as a float: a real number in range, on the 0.5 grid."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{owner}: {name} must be numbers, got {v!r} ({type(v).__name__})")
    _check_special(float(v))
    return float(v)


def _check_special(v: float) -> None:
    if not (SPECIAL_MIN <= v <= SPECIAL_MAX):
        raise ValueError(f"special value {v} is out of range: magnitudes must lie in "
                         f"[{SPECIAL_MIN}, {SPECIAL_MAX}] (6 + a 4-bit offset in [-3.5, 3.5])")
    if v * 2 != round(v * 2):
        raise ValueError(f"special value {v} is off the 0.5 grid (must be a multiple of 0.5)")


def _lowest_error(errs, slack, values, x_rows, same=None) -> np.ndarray:
    """Per block, the candidate with the lowest *exact* squared error, ties to the first.

    Parameters
    ----------
    errs : k arrays (n,) float64
        Each candidate's squared error per block (up to a per-block offset common to all
        candidates), as rounded float64 sums.
    slack : k arrays (n,) float64
        A bound on each one's rounding error.
    values : callable ``(c, rows) -> (len(rows), B) float64``
        Candidate ``c``'s dequantized values in those blocks (exact products).
    x_rows : callable ``rows -> (len(rows), B) float64``
        The input in those blocks.
    same : k arrays (n,) int, optional
        Candidates with equal entries in a block are known to have identical values there
        (and bitwise equal ``errs``), so they need no check.

    Returns
    -------
    (n,) uint8 candidate index.

    Notes
    -----
    Where another candidate's rounded error lies within the two bounds of the smallest and
    its values differ, exact integer arithmetic decides: rounding must not break an exact
    tie, or the choice would depend on the summation order. Identical values have
    identical errors, computed identically, so the first of them is already the smallest.
    """
    k, n = len(errs), len(errs[0])
    best = np.zeros(n, dtype=np.uint8)
    e_best, s_best = errs[0].copy(), slack[0].copy()
    g_best = None if same is None else same[0].copy()
    for c in range(1, k):  # the first of equal minima
        better = errs[c] < e_best
        np.copyto(best, c, where=better)
        np.copyto(e_best, errs[c], where=better)
        np.copyto(s_best, slack[c], where=better)
        if same is not None:
            np.copyto(g_best, same[c], where=better)
    cols, any_near = [], np.zeros(n, dtype=bool)
    for c in range(k):
        nc = np.abs(errs[c] - e_best) <= slack[c] + s_best
        nc &= best != c
        if same is not None:
            nc &= same[c] != g_best
        cols.append(nc)
        any_near |= nc
    r = np.flatnonzero(any_near)
    if r.size == 0:
        return best
    near = np.zeros((n, k), dtype=bool)
    for c in range(k):
        near[r, c] = cols[c][r]
    vals = [values(c, r) for c in range(k)]
    vb = np.stack(vals)[best[r], np.arange(r.size)]
    same_r = np.stack([(vals[c] == vb).all(axis=1) for c in range(k)], axis=1)
    # Identical values tie exactly: the first of them. Other near ones need exact sums.
    for c in range(k):
        first = near[r, c] & same_r[:, c] & (c < best[r])
        best[r[first]] = c
    keep = (near[r] & ~same_r).any(axis=1)
    r, near_r = r[keep], near[r[keep]] & ~same_r[keep]
    if r.size == 0:
        return best
    ints = _exact_ints(np.stack([x_rows(r)] + [v[keep] for v in vals]))
    xi, vi = ints[0], ints[1:]
    sq = [((xi - vi[c]) ** 2).sum(axis=1) for c in range(k)]  # exact, in a common unit
    for j, row in enumerate(r):
        pool = [int(best[row])] + [c for c in range(k) if near_r[j, c]]
        best[row] = min(pool, key=lambda c: (sq[c][j], c))
    return best


def _exact_ints(a: np.ndarray) -> np.ndarray:
    """Finite float64 values as exact Python integers in one common unit (object array)."""
    mant, exp = np.frexp(a)
    m = (mant * 2.0 ** 53).astype(np.int64)  # exact: |mant| < 1 has 53 significant bits
    e = exp.astype(np.int64) - 53
    nz = m != 0
    e0 = int(e[nz].min()) if nz.any() else 0
    return m.astype(object) << np.where(nz, e - e0, 0).astype(object)  # Python ints


def _row_amax(x: np.ndarray) -> np.ndarray:
    """Largest magnitude of each row."""
    return row_max(np.abs(x))


@functools.lru_cache(maxsize=None)
def _special_window(v: float) -> tuple[float, float] | None:
    """Open interval of scaled values whose nearest value in FP4 ∪ {v} is ``v`` (ties go
    to FP4): between the midpoints to v's FP4 neighbours; None where v is an FP4 value.

    Equivalent to the definition ``|s - v| < |s - FP4(s)|`` (FP4 saturating at +-6); the
    ends are multiples of 0.25, exact in FP32.
    """
    grid = sorted({float(m) for m in FP4_E2M1.finite_magnitudes} |
                  {-float(m) for m in FP4_E2M1.finite_magnitudes})
    if v in grid:
        return None
    below, above = [g for g in grid if g < v], [g for g in grid if g > v]
    lo = (below[-1] + v) / 2 if below else -np.inf
    hi = (v + above[0]) / 2 if above else np.inf
    return float(lo), float(hi)


#: Relative rounding bound of a float64 sum of squared differences of ``n`` terms is below
#: ``(n + 2) * 2**-53``; twice that, plus an absolute term for underflow.
def _sum_slack(magnitude: np.ndarray, n_terms: int) -> np.ndarray:
    return magnitude * ((n_terms + 4) * 2.0 ** -52) + 2.0 ** -1000


def _fp32(x) -> np.ndarray:
    return np.asarray(x, dtype=_F32)


def _encode_fp4(scaled: np.ndarray, x: np.ndarray, conv: Convention) -> np.ndarray:
    """FP4 codes of the scaled elements (saturating at +-6) under ``conv``'s tie rule and
    negative-zero handling; ``x`` is the unscaled input (its -0.0 entries)."""
    if conv.element_ties is ElementTies.EVEN:
        codes = FP4_E2M1._encode_rne_table(scaled)
    else:
        codes = FP4_E2M1.encode(scaled, rounding=Rounding.NEAREST_AWAY)
    if conv.negative_zero is NegativeZero.POSITIVE:
        codes[(x == 0) & np.signbit(x)] = 0
    elif conv.negative_zero is NegativeZero.POSITIVE_AFTER_SCALING:
        codes[scaled == 0] = 0  # -0.0 input, and negatives that underflowed when scaled
    return codes


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

    def saturation_limit(self) -> float | None:
        """The largest magnitude held without saturation: with ``tensor_scale=False``
        (``T = 1``) the largest block scale times FP4's 6 (2688 for E4M3 scales), beyond
        which :meth:`quantize` saturates to it, as torchao's ``NVFP4Tensor.to_nvfp4``
        without a per-tensor scale does (the peers' vectors are reproduced bit for bit);
        ``None`` with a tensor scale, which maps every block into range. ``mactile
        quantize`` refuses inputs beyond it."""
        if self._conv.tensor_scale:
            return None
        return float(self.scale_format.max_value) * 6.0

    def input_range(self):
        return (_FP32_OVERFLOW, f"{self.name} takes |x| <= {float(np.finfo(_F32).max):.8g}: "
                                f"it computes in FP32")

    @property
    def _conv(self) -> Convention:
        """The quantization convention (NVFP4 has it as a field; RaZeR keeps the default)."""
        return getattr(self, "convention", DEFAULT_CONVENTION)

    def _tensor_params(self, flat):
        if not self._conv.tensor_scale:
            return {"tensor_scale": None}
        return {"tensor_scale": _tensor_scale(flat, self.scale_format.max_value * 6.0)}

    def _scale_pipeline(self, x32, amax, d32, target):
        """Block scale for mapping ``amax`` to ``target``; returns (code, value, scaled).
        ``d32`` None: no tensor scale (``T = 1``)."""
        conv = self._conv
        t = _F32(1.0) if d32 is None else d32
        if conv.scale_argument is ScaleArgument.PRODUCT:
            arg = amax / (t * _F32(target))
        else:
            arg = (amax / _F32(target)) / t
        if conv.block_scale_floor:
            arg = np.maximum(arg, _F32(conv.block_scale_floor))
        s_code = self.scale_format.encode(arg)
        s_val = _fp32(self.scale_format.values[s_code])
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if conv.element_scaling is ElementScaling.DIVIDE:
                denom = t * s_val  # FP32 product
                scaled = x32 / denom[:, None]
            else:
                denom = s_val
                scaled = x32 * ((_F32(1.0) / t) / s_val)[:, None]
                # A reciprocal that overflows FP32 (0 < T < 2**-128) saturates the non-zero
                # elements, as the peer does, and would make 0 * inf = NaN of the zeros
                # (torchao stores code 0b1011, a peer bug): zeros keep their signed zero.
                np.copyto(scaled, x32, where=x32 == 0)
        zero = ~(denom > 0)
        if zero.any():
            # Scale 0: the block holds zeros, each with its input's sign (an all -0 block
            # keeps -0 under negative_zero=keep, as every element of a non-zero scale does;
            # the negative_zero options then apply as they do to any zero).
            np.copyto(scaled, np.copysign(_F32(0.0), x32), where=zero[:, None])
        return s_code, s_val, scaled

    def _quantize_blocks(self, xb, ctx):
        d32 = ctx["tensor_scale"]
        with np.errstate(over="ignore"):
            x32 = _fp32(xb)
        amax = _row_amax(x32)  # finite: input_range refused what rounds to FP32 Inf
        cands = self._candidates()
        if not cands:
            s_code, _, scaled = self._scale_pipeline(x32, amax, d32, 6.0)
            return _encode_fp4(scaled, x32, self._conv), s_code, None
        return self._choose_candidate(xb, x32, amax, d32, cands)

    def _choose_candidate(self, xb, x32, amax, d32, cands):
        """Every special-value candidate per block; the lowest exact squared error wins.

        Candidates sharing a scale target (``+v`` and ``-v``) share the scaled block and its
        FP4 codes, so their errors differ only at the few elements where one of them uses
        its special value: those are found once per magnitude (``|scaled|`` inside the
        special value's window) and summed sparsely. Candidates of different targets also
        compare their full FP4 errors at each scale. :func:`_lowest_error` settles
        near-ties exactly.
        """
        n, bs = x32.shape
        k_all = len(cands)
        d64 = float(d32)
        groups: dict[float, list[int]] = {}
        for k, v in enumerate(cands):
            groups.setdefault(max(6.0, abs(v)), []).append(k)
        group_of = [0] * k_all
        errs, slack, same = [None] * k_all, [None] * k_all, [None] * k_all
        uses: list[np.ndarray | None] = [None] * k_all  # flat indices using the special value
        per_group = []  # (scale code, zero-remapped FP4 codes, S = scale * D32 in float64)
        xflat = np.asarray(xb).reshape(-1)
        x64 = None
        zeros = np.zeros(n)
        for g, (target, ks) in enumerate(groups.items()):
            s_code, s_val, scaled = self._scale_pipeline(x32, amax, d32, target)
            c = FP4_E2M1._encode_rne_table(scaled)
            big_s = s_val.astype(np.float64) * d64
            base, base_slack = zeros, zeros
            if len(groups) > 1:  # full FP4 error at this scale, input units
                if x64 is None:
                    x64 = np.asarray(xb, dtype=np.float64)
                d = np.take(_FP4_VALUES, c)
                d *= big_s[:, None]
                np.subtract(x64, d, out=d)
                np.square(d, out=d)
                base = row_sum(d)
                base_slack = _sum_slack(base, bs)
            by_mag: dict[float, list[int]] = {}
            for k in ks:
                group_of[k] = g
                errs[k], slack[k] = base, base_slack
                same[k] = np.full(n, g)
                by_mag.setdefault(abs(cands[k]), []).append(k)
            mag = None
            for v_mag, mks in by_mag.items():
                window = _special_window(v_mag)
                if window is None:
                    continue
                if mag is None:
                    mag = np.abs(scaled)
                lo, hi = window  # of +v_mag; -v_mag's is its mirror image
                hit = mag > _F32(lo)
                if np.isfinite(hi):
                    hit &= mag < _F32(hi)
                flat_all = np.flatnonzero(hit)
                neg_all = scaled.reshape(-1)[flat_all] < 0
                for k in mks:
                    flat = flat_all[neg_all == (cands[k] < 0)]
                    uses[k] = flat
                    if not flat.size:
                        continue
                    rows = flat // bs  # error change where the special value replaces FP4
                    xs = xflat[flat].astype(np.float64)
                    sr = big_s[rows]
                    e_v = (xs - cands[k] * sr) ** 2
                    e_q = (xs - _FP4_VALUES[c.reshape(-1)[flat]] * sr) ** 2
                    errs[k] = base + np.bincount(rows, weights=e_v - e_q, minlength=n)
                    slack[k] = base_slack + _sum_slack(
                        np.bincount(rows, weights=e_v + e_q, minlength=n), bs)
                    same[k][rows] = -1 - k
            c |= (c == SPECIAL_CODE).view(np.uint8) * np.uint8(ZERO_CODE)  # real zeros as -0
            per_group.append((s_code, c, big_s))

        def values(k, rows):
            _, c, big_s = per_group[group_of[k]]
            q = _FP4_VALUES[c[rows]]
            if uses[k] is not None and uses[k].size:
                m = np.zeros(n * bs, dtype=bool)
                m[uses[k]] = True
                q[m.reshape(n, bs)[rows]] = cands[k]
            return q * big_s[rows][:, None]

        best = _lowest_error(errs, slack, values,
                             lambda rows: np.asarray(xb[rows], dtype=np.float64), same)
        # Masked copies of uint8 are slow in NumPy: blend with bit operations.
        s_code, codes, _ = per_group[0]
        if len(per_group) > 1:
            bg = np.asarray(group_of)[best]
            for g in range(1, len(per_group)):
                sel = bg == g
                if sel.any():
                    s_code = np.where(sel, per_group[g][0], s_code)
                    codes ^= (codes ^ per_group[g][1]) & (sel.view(np.uint8) * np.uint8(0xFF))[:, None]
        flat_codes = codes.reshape(-1)
        for k in range(k_all):
            if uses[k] is not None and uses[k].size:
                chosen = uses[k][best[uses[k] // bs] == k]
                flat_codes[chosen] = SPECIAL_CODE
        return codes, self._pack_scale(s_code, best), None

    @property
    def special_magnitudes(self) -> tuple[float, ...]:
        """The special magnitudes the metadata select bit chooses among (empty: none)."""
        return ()

    def with_special_magnitudes(self, magnitudes):
        """This format with other special magnitudes (as many as it has)."""
        if tuple(magnitudes):
            raise ValueError(f"{self.name} has no special values")
        return self

    def _pack_scale(self, s_code, cand_index):
        """Scale words from the scale codes and the chosen candidates (:attr:`storage`)."""
        select, negative = candidate_fields(cand_index)
        return self.storage.word.pack(s_code, select=select, negative=negative)

    def _unpack_scale(self, scales):
        """(scale code, signed special value per block or None)."""
        if not self.storage.specials:
            return scales, None
        code, select, negative = self.storage.word.unpack(scales)
        return code, special_by_fields(self.special_magnitudes, select, negative)

    def _dequantize_blocks(self, codes, scales, meta, ctx):
        out = np.empty(codes.shape, dtype=np.float64)
        self._dequantize_into(codes, scales, meta, ctx, out)
        return out

    def _dequantize_into(self, codes, scales, meta, ctx, out):
        s_code, special = self._unpack_scale(scales)
        t = ctx["tensor_scale"]
        s = self.scale_format.values[s_code] * (1.0 if t is None else float(t))
        if self._conv.dequantize is Dequantization.FP32:  # fl32(fl32(T * s) * q)
            s32 = self.scale_format.values[s_code].astype(_F32) * _F32(1.0 if t is None else t)
            out[...] = _FP4_VALUES.astype(_F32)[codes] * s32[:, None]
            return
        if special is None:
            np.take(_FP4_VALUES, codes, out=out, mode="clip")  # "raise" would buffer
        else:
            # One 16-entry table per candidate value: code 0 reads that value.
            cands = sorted(set(self._candidates()))
            tables = np.tile(_FP4_VALUES, (len(cands), 1))
            tables[:, SPECIAL_CODE] = cands
            which = np.searchsorted(cands, special).astype(np.uint16)
            key = (which[:, None] << np.uint16(4)) | codes
            np.take(tables.reshape(-1), key, out=out, mode="clip")
        out *= s[:, None]

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

    #: Quantization convention (:mod:`.conventions`; default ``ocp``, RaZeR Eq. 1-3).
    convention: Convention = DEFAULT_CONVENTION

    name: ClassVar[str] = "nvfp4"
    reference: ClassVar[str] = "RaZeR (000) Sec. 3, Eq. 1-3; NVIDIA NVFP4"
    storage: ClassVar[BlockStorage] = STORAGES["nvfp4"]

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.convention, Convention):
            raise ValueError(f"nvfp4: convention must be a Convention, got {self.convention!r}")
        check_options(self.name, self.convention)



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
    storage: ClassVar[BlockStorage] = STORAGES["razer-act"]

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "special_value",
                           special_magnitude(self.name, "special_value", self.special_value))

    def _candidates(self):
        return (self.special_value, -self.special_value)

    @property
    def special_magnitudes(self):
        return (self.special_value,)

    def with_special_magnitudes(self, magnitudes):
        (v,) = magnitudes
        return dataclasses.replace(self, special_value=v)


@dataclass(frozen=True, kw_only=True)
class RaZeR(_TwoLevelFP4):
    """RaZeR for weights: 16-element FP4 blocks, one byte per block for scale + metadata.

    Scale byte (:data:`~.storage.STORAGES` ``["razer"]``): bits 5..0 the E3M3 block scale,
    bit 6 which special magnitude (0: ``special_values[0]``, 1: ``special_values[1]``),
    bit 7 its sign (1: negative).
    Tensor scale ``D32 = amax / (30 * 6)``. Candidates per block, in tie-break order:
    ``+a, -a, +b, -b``; for each the block scale maps the block max to ``max(6, |v|)``,
    elements round to the nearest of FP4 and ``v`` (ties to FP4), and the lowest squared
    error in the input's units wins.
    """

    special_values: tuple[float, float] = (5.0, 8.0)

    name: ClassVar[str] = "razer"
    reference: ClassVar[str] = "RaZeR (000) Sec. 4.1-4.2, 4.4, App. B.2"
    storage: ClassVar[BlockStorage] = STORAGES["razer"]
    scale_format: ClassVar[FloatFormat] = STORAGES["razer"].word.scale_format

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "special_values", special_pair(self.name, self.special_values))

    def _candidates(self):
        a, b = self.special_values
        return (a, -a, b, -b)

    @property
    def special_magnitudes(self):
        return self.special_values

    def with_special_magnitudes(self, magnitudes):
        return dataclasses.replace(self, special_values=tuple(magnitudes))


@dataclass(frozen=True, kw_only=True)
class MXFP4(BlockFormat):
    """OCP MX v1.0 MXFP4: 32-element FP4 E2M1 blocks with an E8M0 power-of-two scale.

    Scale ``2**(floor(log2 amax_i) - 2)`` (2 = the largest FP4 exponent), elements
    rounded to nearest even and saturated at +-6. An all-zero block gets scale code 0
    (``2**-127``). Scale exponents below -127 clamp to it; a block that would need one
    above 127 (``amax >= 2**130`` under the default rule) is refused (:meth:`input_range`).
    The ``convention`` names other scale rules, tie rules and -0 handling
    (:mod:`.conventions`).
    """

    block_size: int = 32
    #: Quantization convention (:mod:`.conventions`; default ``ocp``).
    convention: Convention = DEFAULT_CONVENTION

    name: ClassVar[str] = "mxfp4"
    reference: ClassVar[str] = "OCP Microscaling Formats (MX) v1.0, Sec. 5-6"
    storage: ClassVar[BlockStorage] = STORAGES["mxfp4"]

    def input_range(self):
        rule = self.convention.mx_scale_rule
        if rule is MXScaleRule.RCEIL:  # amax / 6 <= FP32 max / 6 < 2**127: FP32 is the limit
            return (_FP32_OVERFLOW, f"mxfp4 with the rceil scale rule takes |x| <= "
                                    f"{float(np.finfo(_F32).max):.8g}: it computes the scale "
                                    f"in FP32")
        limit, text = _MXFP4_OVERFLOW[rule]
        return (limit, f"mxfp4 takes |x| {text} (scale rule {rule.value}): a larger block "
                       "would need a scale above E8M0's largest, 2**127")

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.convention, Convention):
            raise ValueError(f"mxfp4: convention must be a Convention, got {self.convention!r}")
        check_options(self.name, self.convention)

    def _scale_exponents(self, amax: np.ndarray) -> np.ndarray:
        """Unclamped E8M0 exponents of the block maxima under the convention's scale rule
        (:class:`~.conventions.MXScaleRule`); -127 for an all-zero block."""
        rule = self.convention.mx_scale_rule
        emax = FP4_E2M1.max_exp_field - FP4_E2M1.bias  # 2
        if rule is MXScaleRule.RCEIL:  # ceil(log2(amax / 6)), amax / 6 in FP32
            with np.errstate(over="ignore"):
                a32 = amax.astype(_F32)
            if not np.isfinite(a32).all():
                raise InputError(f"{self.name}: a block maximum exceeds the FP32 range that "
                                 "the rceil scale rule computes in")
            descale = (a32 / _F32(FP4_E2M1.max_value)).astype(np.float64)
            m, p = np.frexp(descale)
            e = p.astype(np.int64) - 1 + (m != 0.5)
            return np.where(descale > 0, e, -E8M0.bias)
        m, p = np.frexp(amax)  # amax = m * 2**p, m in [0.5, 1)
        e = p.astype(np.int64) - 1  # floor(log2 amax)
        if rule is MXScaleRule.CEIL:
            e += m != 0.5
        elif rule is MXScaleRule.EVEN:  # amax rounded to FP4's mantissa width, ties away
            e += m >= 1.0 - 2.0 ** -(FP4_E2M1.man_bits + 2)
        return np.where(amax > 0, e - emax, -E8M0.bias)

    def _quantize_blocks(self, xb, ctx):
        x = np.asarray(xb)
        amax = row_max(np.abs(x))
        e = np.clip(self._scale_exponents(amax), -E8M0.bias, E8M0.bias)
        if x.dtype.itemsize <= 4:
            # x * 2**-e in FP32 is exact but where it falls below FP32's normal range, and
            # such values (< 2**-126) round to a signed FP4 zero either way.
            scaled = x.astype(np.float32, copy=False) * np.exp2(-e).astype(np.float32)[:, None]
        else:
            scaled = np.ldexp(x.astype(np.float64, copy=False), -e[:, None])
        codes = _encode_fp4(scaled, x, self.convention)
        return codes, self.storage.word.pack(e + E8M0.bias), None

    def _dequantize_blocks(self, codes, scales, meta, ctx):
        out = np.empty(codes.shape, dtype=np.float64)
        self._dequantize_into(codes, scales, meta, ctx, out)
        return out

    def _dequantize_into(self, codes, scales, meta, ctx, out):
        np.take(_FP4_VALUES, codes, out=out, mode="clip")  # "raise" would buffer
        # exact powers of two; the NaN scale code (0xFF) makes the whole block NaN (OCP MX)
        out *= self.storage.word.scale_values(scales)[:, None]

    @property
    def bits_per_element(self) -> float:
        return 4 + 8 / self.block_size
