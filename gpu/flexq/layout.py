"""FlexQ's bit-level packed layout and plane-pair schedule (NumPy; no GPU needed).

Source: 003_c7ba18c8b0833de1.txt Sec. 4.2-4.3 (Eq. 4-6, "Bit-level Data Packing").

Packed planes
-------------
A matrix of signed ``bits``-wide integers ``q`` (rows x K, K a multiple of the group
size 128) is stored as 32-bit words, one 128-element group of one tile of ``R`` rows
(``R`` = 16 for weights, the A operand of ``mma.m16n8k256``; ``R`` = 8 for activations, its
B operand) at a time. Each lane of a warp needs ``W = bits*R/8`` words per group; they
are stored lane-interleaved in vectors of ``V`` words (``V`` = 4, one 16-byte load, where
``W`` is a multiple of 4, else 2)::

    planes[tile, group, w // V, lane, w % V]   uint32, shape (ceil(rows/R), K/128, W/V, 32, V)
    lane = 4*g + c                    g = row % 8 inside the 8-row half h, c = 32-bit chunk
    w    = plane*(R/8) + h            plane s of the two's-complement pattern (0 = LSB)
    bit j of the word = plane s of q[tile*R + 8*h + g, group*128 + 32*c + j]

so the warp's v-th vector load for one (tile, group) reads one contiguous run of
``32*V`` words (INT6 weights: three 512-byte runs) and every sector it touches is used
whole. (Lane-major words, ``[tile, group, lane, w]``, put the lanes 48 bytes apart and
left every 32-byte sector of a load instruction half used.) For ``mma.m16n8k256`` the
A fragment {a0, a1, a2, a3} is {row g, row g+8} of plane s (K half 0) and of plane s'
(K half 1); the B fragment {b0, b1} is token g of plane t and plane t'. Pairing two planes
in the two K halves of one 256-wide MMA sums two plane-pair popcounts, which is right when
both pairs carry the same weight ``w_s * w_t`` (see :func:`plane_schedule`).

Scales are FP16 bit patterns ``scales[group, row]`` (rows padded with zeros), rows padded
to a multiple of ``R`` with zero codes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mactile.golden.block import InputError
from mactile.golden.intgroup import IntGroup, bitplanes, plane_weights

__all__ = [
    "GROUP", "WEIGHT_TILE", "ACT_TILE", "PackedPlanes", "pack_planes", "unpack_planes",
    "vector_words", "plane_word", "planes_shape", "interleave_lanes", "lane_major",
    "pack_quantized", "PlaneStep", "plane_schedule", "evaluate_schedule",
    "emulate_gemm_int",
]

#: FlexQ's group size along K (Sec. 4.1); also the K of one binary MMA half.
GROUP = 128
#: Rows per packed tile: weights feed the 16-row A operand, activations the 8-column B.
WEIGHT_TILE = 16
ACT_TILE = 8
_CHUNK = 32  # bits per word


def vector_words(words: int) -> int:
    """Words per lane in one vector load of the lane-interleaved layout: 4 (16 bytes) where
    ``words`` (per lane and group) is a multiple of 4, else 2 (8 bytes)."""
    if words % 2:
        raise ValueError(f"flexq: {words} plane words per lane are not a whole number of pairs")
    return 4 if words % 4 == 0 else 2


def plane_word(lane, w, words: int):
    """Offset of lane ``lane``'s word ``w`` inside one (tile, group) block of ``32 * words``
    words: ``((w // V) * 32 + lane) * V + w % V`` (``plane_word`` in flexq.cu)."""
    v = vector_words(words)
    return ((np.asarray(w) // v) * 32 + np.asarray(lane)) * v + np.asarray(w) % v


def planes_shape(tiles: int, groups: int, words: int) -> tuple[int, int, int, int, int]:
    """Shape of the packed planes: ``(tiles, groups, words // V, 32, V)``."""
    v = vector_words(words)
    return (tiles, groups, words // v, 32, v)


def interleave_lanes(lane_major: np.ndarray) -> np.ndarray:
    """``[tile, group, lane, w]`` words -> the kernels' ``[tile, group, w // V, lane, w % V]``."""
    t, g, lanes, w = lane_major.shape
    v = vector_words(w)
    return np.ascontiguousarray(lane_major.reshape(t, g, lanes, w // v, v).transpose(0, 1, 3, 2, 4))


def lane_major(planes: np.ndarray) -> np.ndarray:
    """Inverse of :func:`interleave_lanes`: ``[tile, group, lane, w]`` (w = plane*(R/8) + h)."""
    t, g, nv, lanes, v = planes.shape
    return planes.transpose(0, 1, 3, 2, 4).reshape(t, g, lanes, nv * v)


@dataclass(frozen=True)
class PackedPlanes:
    """Bit planes of a group-quantized integer matrix in the kernels' layout.

    ``planes``: uint32 ``(tiles, groups, W/V, 32, V)`` (lane-interleaved, see the module
    docstring; :func:`lane_major` gives ``[tile, group, lane, w]``); ``scales``: uint16
    FP16 patterns ``(groups, tiles*R)``; ``rows``, ``k``: the logical shape; ``bits``;
    ``tile``: R.
    """

    planes: np.ndarray
    scales: np.ndarray
    rows: int
    k: int
    bits: int
    tile: int

    @property
    def groups(self) -> int:
        return self.k // GROUP

    @property
    def words(self) -> int:
        return self.bits * self.tile // 8


def _check_tile(tile: int) -> None:
    if tile not in (WEIGHT_TILE, ACT_TILE):
        raise ValueError(f"tile must be {WEIGHT_TILE} (weights) or {ACT_TILE} (activations), "
                         f"got {tile}")


def pack_planes(q, scales, *, bits: int, tile: int) -> PackedPlanes:
    """Pack signed integers ``q`` (rows, K) and FP16 scale patterns (rows, K/128).

    Raises
    ------
    InputError
        If K is not a multiple of 128, shapes disagree, or a value is outside ``bits``.
    """
    _check_tile(tile)
    q = np.asarray(q)
    if q.ndim != 2:
        raise InputError(f"flexq: expected a 2-d integer matrix, got shape {q.shape}")
    rows, k = q.shape
    if k == 0 or k % GROUP:
        raise InputError(f"flexq: K = {k} is not a positive multiple of the group size {GROUP}")
    g = k // GROUP
    s = np.asarray(scales)
    if s.shape != (rows, g) or s.dtype != np.uint16:
        raise InputError(f"flexq: scales must be uint16 FP16 patterns of shape {(rows, g)}, "
                         f"got {s.dtype} {s.shape}")
    try:
        pl = bitplanes(q, bits)  # (bits, rows, K), 0/1: the golden bit-plane identity
    except ValueError as e:
        raise InputError(f"flexq: {e}") from None
    tiles = -(-rows // tile)
    pad = tiles * tile - rows
    pl = np.pad(pl, ((0, 0), (0, pad), (0, 0)))
    halves = tile // 8
    # (bits, tile, h, g, group, chunk, 32 bits) -> words, LSB first
    pl = pl.reshape(bits, tiles, halves, 8, g, GROUP // _CHUNK, _CHUNK)
    words = np.packbits(pl, axis=-1, bitorder="little").view("<u4")[..., 0]
    # -> (tile, group, g, chunk, plane, h)
    words = words.transpose(1, 4, 3, 5, 0, 2).reshape(tiles, g, 32, bits * halves)
    sp = np.zeros((g, tiles * tile), dtype=np.uint16)
    sp[:, :rows] = s.T
    return PackedPlanes(interleave_lanes(words.astype(np.uint32)), sp, rows, k, bits, tile)


def unpack_planes(p: PackedPlanes) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`pack_planes`: ``(q int64 (rows, K), scales uint16 (rows, K/128))``."""
    tiles, g = p.planes.shape[:2]
    halves = p.tile // 8
    w = np.asarray(lane_major(p.planes), dtype="<u4").reshape(tiles, g, 8, GROUP // _CHUNK,
                                                             p.bits, halves)
    w = w.transpose(4, 0, 5, 2, 1, 3)  # (plane, tile, h, g, group, chunk)
    bits = np.unpackbits(np.ascontiguousarray(w).view(np.uint8).reshape(w.shape + (4,)),
                         axis=-1, bitorder="little")
    bits = bits.reshape(p.bits, tiles * p.tile, p.k)[:, : p.rows].astype(np.int64)
    q = np.tensordot(plane_weights(p.bits), bits, axes=1)
    return q, np.ascontiguousarray(p.scales[:, : p.rows].T)


def pack_quantized(qt, *, tile: int = WEIGHT_TILE) -> PackedPlanes:
    """Pack a golden ``int-group`` :class:`~mactile.golden.block.Quantized` 2-d tensor.

    This is FlexQ's offline weight packing (``tile=16``); with ``tile=8`` it gives the
    layout the online activation kernel writes (its reference).
    """
    fmt = qt.format
    if not isinstance(fmt, IntGroup):
        raise InputError(f"flexq: expected an int-group tensor, got {fmt.describe()}")
    if fmt.block_size != GROUP:
        raise InputError(f"flexq: group size must be {GROUP}, got {fmt.block_size}")
    if len(qt.shape) != 2:
        raise InputError(f"flexq: expected a 2-d tensor, got shape {qt.shape}")
    q = fmt.integers(qt).reshape(qt.shape)
    return pack_planes(q, qt.scales, bits=fmt.bits, tile=tile)


# ------------------------------------------------------------------ plane-pair schedule
@dataclass(frozen=True)
class PlaneStep:
    """One Horner step: ``acc = 2**(k_prev - k) * acc + sum(pos) - sum(neg)``.

    ``pos``/``neg`` list the (weight plane s, activation plane t) pairs whose weight
    ``w_s * w_t`` is ``+2**k`` / ``-2**k``; they are issued as 256-wide MMAs two pairs at
    a time (one per K half) and a 128-wide MMA for an odd one out.
    """

    k: int
    pos: tuple[tuple[int, int], ...]
    neg: tuple[tuple[int, int], ...]


def plane_schedule(bits_w: int, bits_a: int) -> tuple[PlaneStep, ...]:
    """Steps from the largest plane weight down to 1, derived from the golden plane weights.

    Every pair (s, t) of weight plane s and activation plane t appears exactly once with
    weight ``plane_weights(bits_w)[s] * plane_weights(bits_a)[t]`` (Eq. 5 with the
    negative most significant plane).
    """
    ww, wa = plane_weights(bits_w), plane_weights(bits_a)
    steps = []
    kmax = bits_w + bits_a - 2
    for k in range(kmax, -1, -1):
        pos, neg = [], []
        for s in range(bits_w):
            t = k - s
            if 0 <= t < bits_a:
                w = int(ww[s] * wa[t])
                assert abs(w) == 1 << k
                (pos if w > 0 else neg).append((s, t))
        steps.append(PlaneStep(k, tuple(pos), tuple(neg)))
    return tuple(steps)


def evaluate_schedule(steps, popcount) -> np.ndarray:
    """Run the Horner schedule on ``popcount(s, t)`` arrays exactly as the kernel does."""
    acc = None
    for st in steps:
        pos = sum((popcount(s, t) for s, t in st.pos), np.int64(0))
        neg = sum((popcount(s, t) for s, t in st.neg), np.int64(0))
        acc = (pos - neg) if acc is None else 2 * acc + pos - neg
    return acc


def emulate_gemm_int(wp: PackedPlanes, xp: PackedPlanes) -> np.ndarray:
    """Per-group integer GEMM read from the packed words the way the kernel's lanes do.

    For each (weight tile, activation tile, group) it gathers every lane's fragment words
    at the indices the kernel uses (A: rows g and g+8 per plane, B: token g per plane),
    forms the MMA's popcounts for each plane pair and combines them with
    :func:`plane_schedule`. Returns int64 ``(M, N, groups)``; a checker of the layout
    and the schedule, not of the hardware.
    """
    if wp.tile != WEIGHT_TILE or xp.tile != ACT_TILE or wp.k != xp.k:
        raise ValueError("emulate_gemm_int needs weight (tile 16) and activation (tile 8) "
                         "planes of equal K")
    steps = plane_schedule(wp.bits, xp.bits)
    g = wp.groups
    lanes = np.arange(32)
    gid, tig = lanes // 4, lanes % 4
    # A fragment words per plane: [tile, group, lane, plane, h]; B: [tile, group, lane, plane]
    # gather each lane's words at the offsets the kernels compute (plane_word)
    def per_lane(p):
        blocks = p.planes.reshape(p.planes.shape[0], g, 32 * p.words)
        return blocks[:, :, plane_word(lanes[:, None], np.arange(p.words)[None, :], p.words)]
    a = per_lane(wp).reshape(wp.planes.shape[0], g, 32, wp.bits, 2)
    b = per_lane(xp).reshape(xp.planes.shape[0], g, 32, xp.bits)

    def popc(v):
        return np.unpackbits(np.ascontiguousarray(v.astype("<u4")).view(np.uint8)
                             .reshape(v.shape + (4,)), axis=-1).sum(-1).astype(np.int64)

    out = np.zeros((xp.planes.shape[0] * 8, wp.planes.shape[0] * 16, g), dtype=np.int64)
    for wt in range(a.shape[0]):
        for xt in range(b.shape[0]):
            # D[row r (0..15), col n (0..7)] = sum over lanes with chunk c of popc(A & B),
            # A word of (row r % 8 in half r // 8, chunk c), B word of (token n, chunk c).
            def pc(s, t, wt=wt, xt=xt):
                res = np.zeros((g, 16, 8), dtype=np.int64)
                for c in range(4):
                    la = gid * 4 + c
                    aw = a[wt][:, la[::4], s, :]  # (g, 8 rows, 2 halves)
                    bw = b[xt][:, la[::4], t]     # (g, 8 tokens)
                    for h in range(2):
                        res[:, 8 * h:8 * h + 8, :] += popc(aw[:, :, h][:, :, None] & bw[:, None, :])
                return res
            d = evaluate_schedule(steps, pc)  # (g, 16, 8)
            out[xt * 8:xt * 8 + 8, wt * 16:wt * 16 + 16, :] = d.transpose(2, 1, 0)
    return out[: xp.rows, : wp.rows]
