"""Testbench of the INT group dot-product units (:class:`mactile.rtl.mac.intgroup_dot.
IntGroupDot`); golden :class:`mactile.golden.intgroup_dot.GroupDotUnit`.

Suites
------
``random`` (default; the power analysis replays it)
    The named corner streams, then random groups (``group_size // lanes`` beats, ``clear``
    on the first, one scale pair per group) until ``count`` vectors: half are golden
    ``int-group`` codes and FP16 scales of Gaussian data with outliers
    (:class:`~mactile.golden.intgroup.IntGroup`, the activations and weights quantized
    separately), half uniform codes with random finite FP16 scales (subnormal, zero and
    negative ones included); one cycle in 17 is a bubble carrying garbage.
``exhaustive``
    Every code pair on every lane: ``2**(2 bits)`` cycles in which lane ``i`` carries pair
    ``(k + i * stride) mod 2**(2 bits)``, one beat per sum (``clear`` each cycle), so
    ``acc`` is the sum of the lanes' products; where ``lanes * 2**(2 bits) <= 2**17``
    (INT6), also every pair on each lane alone (the other lanes zero), so ``acc`` is that one
    product. Scales 1.0 there. Then the corner streams.

A checked vector is one cycle (a beat of ``lanes`` MACs) of one harness lane.
"""
from __future__ import annotations

import numpy as np

from mactile.golden.intgroup import IntGroup
from mactile.golden.intgroup_dot import GroupDotUnit

from ..bench import Bench, Stream, Vectors, pack_streams

__all__ = ["GroupDotBench"]

DEFAULT_RANDOM_VECTORS = 65536
BUBBLE_EVERY = 17
_ONE = 0x3C00  # FP16 1.0
_MAX16 = 0x7BFF  # 65504
_TINY16 = 0x0001  # 2**-24


class GroupDotBench(Bench):
    """Vectors and golden expectations for an :class:`~mactile.rtl.mac.intgroup_dot.IntGroupDot`."""

    suites = ("random", "exhaustive")
    fixed_suites = ("exhaustive",)

    def __init__(self, *, bits: int = 6, lanes: int = 16, group_size: int = 128,
                 structure: str = "bitplane"):
        self.golden = GroupDotUnit(bits=bits, lanes=lanes, group_size=group_size,
                                   structure=structure)

    # ------------------------------------------------------------------ streams
    def _stream(self, name, a, w, sa, sw, valid=None, clear=None) -> Stream:
        """``a``, ``w``: (cycles, lanes) signed integers; the rest per cycle."""
        g = self.golden
        a, w = np.asarray(a, np.int64), np.asarray(w, np.int64)
        n = len(a)
        mask = (1 << g.bits) - 1
        s = {f"a__{i}": a[:, i] & mask for i in range(g.lanes)}
        s.update({f"w__{i}": w[:, i] & mask for i in range(g.lanes)})
        s["sa"] = np.broadcast_to(np.asarray(sa, np.int64), (n,)).copy()
        s["sw"] = np.broadcast_to(np.asarray(sw, np.int64), (n,)).copy()
        s["valid"] = np.ones(n, np.int64) if valid is None else np.asarray(valid, np.int64)
        if clear is None:
            clear = np.zeros(n, np.int64)
            clear[::g.beats] = 1  # a group every `beats` cycles
        s["clear"] = np.asarray(clear, np.int64)
        st = Stream(name, s)
        st.signed = (a, w)  # the signed operands, for the golden model
        return st

    def _groups(self, name, a, w, *, sa=_ONE, sw=_ONE, **kw):
        """``groups`` full groups of constant operands ``a``, ``w`` (scalars)."""
        g = self.golden
        full = np.full((g.beats, g.lanes), 0, np.int64)
        return self._stream(name, full + a, full + w, sa, sw, **kw)

    def corner_streams(self) -> list[Stream]:
        g = self.golden
        lo, hi = g.min_int, g.max_int
        B = g.beats
        grp = lambda a, w: (np.full((B, g.lanes), a), np.full((B, g.lanes), w))  # noqa: E731
        amax, wmax = grp(lo, lo)
        amin, wmin = grp(lo, hi)
        two = lambda x, y: np.concatenate([x, y])  # noqa: E731
        out = [
            self._groups("max positive sum (all min_int x min_int)", lo, lo),
            self._groups("max negative sum (min_int x max_int)", lo, hi),
            self._groups("all zero", 0, 0),
            self._groups("max sum x largest scales (65504 x 65504)", lo, lo, sa=_MAX16,
                         sw=_MAX16),
            self._groups("smallest sum x smallest subnormal scales", 0, 0, sa=_TINY16,
                         sw=_TINY16),
            self._stream("one product x smallest subnormal scales",
                         np.eye(1, g.lanes, dtype=np.int64).repeat(B, 0),
                         np.eye(1, g.lanes, dtype=np.int64).repeat(B, 0), _TINY16, _TINY16),
            self._groups("zero scale", hi, hi, sa=0, sw=_ONE),
            self._groups("negative-zero and negative scales", hi, lo, sa=0x8000 | _ONE,
                         sw=0xBC00),
            self._stream("back-to-back groups (max, min, max, min)",
                         two(two(amax, amin), two(amax, amin)),
                         two(two(wmax, wmin), two(wmax, wmin)), _ONE, _ONE),
            self._stream("clear mid-group", np.full((B + 3, g.lanes), hi),
                         np.full((B + 3, g.lanes), hi), _ONE, _ONE,
                         clear=[1] + [0] * 2 + [1] + [0] * (B - 1)),
            self._stream("bubbles hold the sum and the scales",
                         np.full((2 * B, g.lanes), lo), np.full((2 * B, g.lanes), hi),
                         np.tile([_ONE, 0x7777], B), np.tile([0x4000, 0x1234], B),
                         valid=[1, 0] * B, clear=[1] + [0] * (2 * B - 1)),
            self._stream("alternating signs per lane",
                         np.tile(np.where(np.arange(g.lanes) % 2, lo, hi), (B, 1)),
                         np.tile(np.where(np.arange(g.lanes) % 3, hi, lo), (B, 1)), 0x3555,
                         0x2AAA),
        ]
        # RNE ties and sticky in the scale stage: an odd sum times scales whose product
        # needs more than 24 bits
        out.append(self._stream("scale rounding: odd sums x long scale significands",
                                np.tile(np.arange(B * g.lanes).reshape(B, g.lanes) % (hi + 1), 1),
                                np.full((B, g.lanes), hi), 0x3FFF, 0x3BFF))
        return out

    # ------------------------------------------------------------------ random
    def _random_scale(self, rng, n):
        e = rng.integers(0, 31, n)
        s = (rng.integers(0, 2, n) << 15) | (e << 10) | rng.integers(0, 1024, n)
        s[rng.random(n) < 0.03] = 0
        return s

    def _random_stream(self, rng, k, groups: int = 4) -> Stream:
        g = self.golden
        B, L = g.beats, g.lanes
        n = groups * B
        if k % 2 == 0:
            fmt = IntGroup(bits=g.bits, block_size=g.group_size)
            xs = []
            for _ in range(2):
                x = rng.standard_normal((groups, g.group_size)) * rng.lognormal(0, 2, (groups, 1))
                x[rng.random(x.shape) < 0.01] *= 20  # outliers
                q = fmt.quantize(x)
                xs.append((fmt.integers(q).reshape(n, L), q.scales.reshape(groups)))
            (a, sa), (w, sw) = xs
            sa, sw = np.repeat(sa.astype(np.int64), B), np.repeat(sw.astype(np.int64), B)
            name = "random groups (golden int-group codes and scales)"
        else:
            a = rng.integers(g.min_int, g.max_int + 1, (n, L))
            w = rng.integers(g.min_int, g.max_int + 1, (n, L))
            sa = np.repeat(self._random_scale(rng, groups), B)
            sw = np.repeat(self._random_scale(rng, groups), B)
            name = "random groups (uniform codes, random finite scales)"
        valid = (rng.integers(0, BUBBLE_EVERY, n) != 0).astype(np.int64)
        clear = np.zeros(n, np.int64)
        clear[::B] = 1
        valid[clear == 1] = 1
        bub = valid == 0
        nb = int(bub.sum())
        a, w = a.copy(), w.copy()
        a[bub] = rng.integers(g.min_int, g.max_int + 1, (nb, L))
        w[bub] = rng.integers(g.min_int, g.max_int + 1, (nb, L))
        sa, sw = sa.copy(), sw.copy()
        sa[bub], sw[bub] = self._random_scale(rng, nb), self._random_scale(rng, nb)
        return self._stream(name, a, w, sa, sw, valid=valid, clear=clear)

    # ------------------------------------------------------------------ exhaustive
    def exhaustive_streams(self) -> list[Stream]:
        g = self.golden
        n = 1 << (2 * g.bits)
        k = np.arange(n)
        stride = n // g.lanes + 1
        idx = (k[:, None] + stride * np.arange(g.lanes)[None, :]) % n
        decode = lambda c: np.where(c >= 1 << (g.bits - 1), c - (1 << g.bits), c)  # noqa: E731
        a, w = decode(idx >> g.bits), decode(idx & ((1 << g.bits) - 1))
        ones = np.ones(n, np.int64)
        out = [self._stream("every code pair on every lane at once", a, w, _ONE, _ONE,
                            clear=ones)]
        if g.lanes * n <= 1 << 17:
            for lane in range(g.lanes):
                aa = np.zeros((n, g.lanes), np.int64)
                ww = np.zeros((n, g.lanes), np.int64)
                aa[:, lane] = decode(k >> g.bits)
                ww[:, lane] = decode(k & ((1 << g.bits) - 1))
                out.append(self._stream(f"every code pair on lane {lane} alone", aa, ww,
                                        _ONE, _ONE, clear=ones))
        return out

    # ------------------------------------------------------------------ suites
    def vectors(self, suite, *, lanes, count, rng) -> Vectors:
        self.check_suite(suite)
        if suite == "exhaustive":
            streams = self.exhaustive_streams() + self.corner_streams()
        else:
            streams = self.corner_streams()
            target = count or DEFAULT_RANDOM_VECTORS
            have = sum(len(s) for s in streams)
            k = 0
            while have < target:
                streams.append(self._random_stream(rng, k))
                have += len(streams[-1])
                k += 1
        inputs, mask, labels, names, where = pack_streams(streams, lanes)
        exp = {p: np.zeros(mask.shape, np.int64) for p in ("acc", "y")}
        for s, (lane, start) in zip(streams, where):
            a, w = s.signed
            r = self.golden.run({"a": a, "w": w, **{p: s.inputs[p] for p in
                                                    ("sa", "sw", "valid", "clear")}})
            for p in exp:
                exp[p][start:start + len(s), lane] = r[p]
        return Vectors(inputs, exp, mask, labels=labels, label_names=names,
                       notes={"corner_streams": len(self.corner_streams())})

    def describe(self, vectors, mismatch, got) -> str:
        c, l = mismatch.cycle, mismatch.lane
        g = self.golden
        dec = lambda v: v - (1 << g.bits) if v >= 1 << (g.bits - 1) else v  # noqa: E731
        a = [dec(int(vectors.inputs[f"a__{i}"][c, l])) for i in range(g.lanes)]
        w = [dec(int(vectors.inputs[f"w__{i}"][c, l])) for i in range(g.lanes)]
        lab = vectors.label(c, l)
        outs = ", ".join(f"{p}: expected {int(vectors.expected[p][c, l])} got {int(got[p][c, l])}"
                         for p in vectors.expected)
        return (f"cycle {c} lane {l}{' [' + lab + ']' if lab else ''}: a={a} w={w} "
                f"valid={int(vectors.inputs['valid'][c, l])} clear={int(vectors.inputs['clear'][c, l])} "
                f"sa=0x{int(vectors.inputs['sa'][c, l]):04x} sw=0x{int(vectors.inputs['sw'][c, l]):04x}"
                f" -> {outs}")
