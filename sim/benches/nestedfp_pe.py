"""Testbench of the NestedFP dual-mode PE and the plain FP16/FP8 MACs
(:class:`mactile.rtl.mac.nestedfp_pe.NestedFpPe`); golden
:class:`mactile.golden.nestedfp_pe.NestedFpPe`.

Suites
------
``random`` (default; the power analysis replays it)
    The named corner streams (:meth:`NestedFpPeBench.corner_streams`), then random
    ``terms``-long FP32 sums with bubbles until ``count`` vectors. ``dual``: half the sums
    in FP16 mode, half in FP8 mode, one in eight switching mode every cycle; half the
    weights are the two bytes :func:`~mactile.golden.nestedfp.nestedfp_split` makes of
    Gaussian FP16 weights (|w| <= 1.75, the paper's eligibility) with Gaussian FP16 or
    E4M3 activations, half uniform bytes and codes (Inf/NaN included).
``exhaustive``
    ``dual``: the reconstruction on every stored byte pair (65,536; FP16 mode times 1.0, so
    ``acc`` is the rebuilt weight as FP32) and the FP8 mode on every E4M3 x E4M3 pair
    (65,536; the lower byte random, since FP8 mode must ignore it); ``fp16``: every FP16
    weight and every FP16 activation times 1.0 (131,072); ``fp8``: every E4M3 pair. One
    product per sum (``clear`` each cycle), so ``acc`` is the product bit for bit. Then
    the corner streams.

A checked vector is one cycle of one lane; every cycle of every sum is checked.
"""
from __future__ import annotations

import numpy as np

from mactile.golden.elements import FP8_E4M3
from mactile.golden.nestedfp import nestedfp_split
from mactile.golden.nestedfp_pe import MODE_FP8, MODE_FP16, NestedFpPe

from ..bench import Bench, Stream, Vectors, pack_streams

__all__ = ["NestedFpPeBench"]

DEFAULT_RANDOM_VECTORS = 65536
TERMS = 64
BUBBLE_EVERY = 17
_ONE16 = int(np.float16(1.0).view(np.uint16))
_ONE8 = int(FP8_E4M3.encode([1.0])[0])


def _h(x) -> int:
    """FP16 code of a float."""
    return int(np.float16(x).view(np.uint16))


class NestedFpPeBench(Bench):
    """Vectors and golden expectations for a :class:`~mactile.rtl.mac.nestedfp_pe.NestedFpPe`."""

    suites = ("random", "exhaustive")
    fixed_suites = ("exhaustive",)

    def __init__(self, *, modes: str = "dual", product_register: bool = True):
        self.golden = NestedFpPe(modes=modes)
        self.modes = modes

    # ------------------------------------------------------------------ streams
    def _stream(self, name, *, a, w=None, upper=None, lower=None, mode=None, valid=None,
                clear=None) -> Stream:
        n = len(a)
        s = {"a": np.asarray(a, np.int64)}
        if self.modes == "dual":
            s["w_upper"] = np.asarray(upper, np.int64)
            s["w_lower"] = np.asarray(lower, np.int64)
            s["mode"] = np.broadcast_to(np.asarray(MODE_FP16 if mode is None else mode,
                                                   np.int64), (n,)).copy()
        else:
            s["w"] = np.asarray(w, np.int64)
        s["valid"] = np.ones(n, np.int64) if valid is None else np.asarray(valid, np.int64)
        if clear is None:
            clear = np.zeros(n, np.int64)
            clear[0] = 1
        s["clear"] = np.asarray(clear, np.int64)
        return Stream(name, s)

    def _fp16_stream(self, name, a16, w16, **kw) -> Stream:
        """A stream of FP16 x FP16 products; the dual PE gets ``w16`` as its two stored
        bytes (every word used here has bit 14 clear)."""
        a16, w16 = (np.asarray(x, np.uint16) for x in (a16, w16))
        if self.modes == "fp8":
            raise ValueError("no FP16 stream on the FP8 MAC")
        if self.modes == "fp16":
            return self._stream(name, a=a16, w=w16, **kw)
        upper, lower = nestedfp_split(w16)
        return self._stream(name, a=a16, upper=upper, lower=lower, mode=MODE_FP16, **kw)

    def _fp8_stream(self, name, a8, w8, rng=None, **kw) -> Stream:
        a8, w8 = (np.asarray(x, np.int64) for x in (a8, w8))
        if self.modes == "fp16":
            raise ValueError("no FP8 stream on the FP16 MAC")
        if self.modes == "fp8":
            return self._stream(name, a=a8, w=w8, **kw)
        rng = rng or np.random.default_rng(0)
        lower = rng.integers(0, 256, len(a8))
        return self._stream(name, a=a8, upper=w8, lower=lower, mode=MODE_FP8, **kw)

    def corner_streams(self) -> list[Stream]:
        """Named FP32 accumulation corners; each starts with ``clear``."""
        out = []
        if self.modes != "fp8":
            t = 2.0 ** -12  # t * t = 2**-24: half an ulp of 1.0 in FP32
            tiny = np.float16(2.0 ** -24)  # smallest FP16 subnormal
            out += [
                self._fp16_stream("ties to even: 1 + 2^-24 stays 1", [_ONE16, _h(t)],
                                  [_ONE16, _h(t)]),
                self._fp16_stream("ties to even: (1 + 2^-23) + 2^-24 rounds up",
                                  [_ONE16, _h(2.0 ** -12), _h(t)],
                                  [_ONE16, _h(2.0 ** -11), _h(t)]),
                self._fp16_stream("sticky: 2^15 plus 64 products just over 2^-10",
                                  [_h(32768.0)] + [_h(2.0 ** -5)] * 64,
                                  [_ONE16] + [_h(2.0 ** -5 * 1.0009765625)] * 64),
                self._fp16_stream("cancellation to +0", [_h(1.5), _h(-1.5)], [_h(1.25)] * 2),
                self._fp16_stream("negative zero: -0, + -0 keeps -0, + +0 gives +0",
                                  [_h(-0.0), _h(-0.0), _h(0.0)], [_h(1.0)] * 3),
                self._fp16_stream("FP16 subnormal x subnormal (2^-48)",
                                  [int(tiny.view(np.uint16))] * 3,
                                  [int(tiny.view(np.uint16)), 0x03FF, 0x0200]),
                self._fp16_stream("largest FP16 activation x largest weight",
                                  [_h(65504.0)] * TERMS, [_h(1.75)] * TERMS),
                self._fp16_stream("Inf activation, then finite terms", [0x7C00, _ONE16, _ONE16],
                                  [_ONE16] * 3),
                self._fp16_stream("Inf + -Inf is NaN", [0x7C00, 0xFC00, _ONE16], [_ONE16] * 3),
                self._fp16_stream("Inf x 0 is NaN", [0x7C00, _ONE16], [0, _ONE16]),
                self._fp16_stream("NaN activation is sticky", [0x7E01, _ONE16, _ONE16],
                                  [_ONE16] * 3),
                self._fp16_stream("bubbles hold the sum", [_h(1.5)] * 8, [_h(0.75)] * 8,
                                  valid=[1, 0] * 4),
                self._fp16_stream("clear without a product, then idle",
                                  [_h(3.0)] * 6, [_h(0.5)] * 6, valid=[1, 1, 0, 0, 1, 1],
                                  clear=[1, 0, 1, 0, 0, 0]),
            ]
        if self.modes != "fp16":
            nan8 = 0x7F
            big8 = int(FP8_E4M3.encode([448.0])[0])
            sub8 = 0x01  # 2**-9
            out += [
                self._fp8_stream("E4M3 448 x 448, 64 times", [big8] * TERMS, [big8] * TERMS),
                self._fp8_stream("E4M3 subnormal x subnormal (2^-18)", [sub8, sub8 | 0x80],
                                 [sub8, sub8]),
                self._fp8_stream("E4M3 NaN weight code is sticky", [_ONE8] * 3,
                                 [_ONE8, nan8, _ONE8]),
                self._fp8_stream("E4M3 NaN activation code (0xFF)", [0xFF, _ONE8], [_ONE8] * 2),
                self._fp8_stream("E4M3 cancellation", [_ONE8, _ONE8 | 0x80], [big8, big8]),
            ]
        if self.modes == "dual":
            rng = np.random.default_rng(7)
            w16 = (rng.standard_normal(32) * 0.4).astype(np.float16).view(np.uint16)
            up, lo = nestedfp_split(w16)
            a = np.where(np.arange(32) % 2, rng.integers(0, 0x78, 32),
                         (rng.standard_normal(32)).astype(np.float16).view(np.uint16))
            out.append(self._stream("mode switches every cycle", a=a, upper=up, lower=lo,
                                    mode=np.arange(32) % 2))
        return out

    # ------------------------------------------------------------------ random
    def _random_stream(self, rng, k) -> Stream:
        n = TERMS
        valid = (rng.integers(0, BUBBLE_EVERY, n) != 0).astype(np.int64)
        valid[0] = 1
        golden_like = k % 2 == 0
        fp8 = {"fp16": False, "fp8": True}.get(self.modes, bool(k % 4 >= 2))
        if golden_like:
            w16 = np.clip(rng.standard_normal(n) * 0.3, -1.75, 1.75).astype(np.float16)
            w16 = w16.view(np.uint16)
            if fp8:
                a8 = FP8_E4M3.encode(rng.standard_normal(n) * 8.0).astype(np.int64)
                w8 = nestedfp_split(w16)[0] if self.modes == "dual" else \
                    FP8_E4M3.encode(rng.standard_normal(n) * 8.0).astype(np.int64)
                s = self._fp8_stream("random sum (golden-like, FP8)", a8, w8, rng, valid=valid)
            else:
                a16 = (rng.standard_normal(n) * 2.0).astype(np.float16).view(np.uint16)
                s = self._fp16_stream("random sum (golden-like, FP16)", a16, w16, valid=valid)
        else:
            if self.modes == "dual":
                mode = (rng.integers(0, 2, n) if k % 8 == 1 else np.full(n, int(fp8)))
                a = rng.integers(0, 1 << 16, n)
                a = np.where(mode == MODE_FP8, a & 0xFF, a)
                s = self._stream("random sum (uniform codes)", a=a,
                                 upper=rng.integers(0, 256, n), lower=rng.integers(0, 256, n),
                                 mode=mode, valid=valid)
            else:
                top = 1 << self.golden.a_bits
                s = self._stream("random sum (uniform codes)", a=rng.integers(0, top, n),
                                 w=rng.integers(0, top, n), valid=valid)
        # bubbles carry garbage operands
        bub = valid == 0
        for p in ("a", "w", "w_upper", "w_lower"):
            if p in s.inputs:
                hi = 256 if p.startswith("w_") or self.modes == "fp8" else 1 << 16
                s.inputs[p][bub] = rng.integers(0, hi, int(bub.sum()))
        return s

    # ------------------------------------------------------------------ exhaustive
    def exhaustive_streams(self, rng) -> list[Stream]:
        streams = []
        every = np.arange(1 << 16)
        clear = np.ones(1 << 16, np.int64)
        if self.modes == "dual":
            streams.append(self._stream("reconstruction: every stored byte pair, x 1.0",
                                        a=np.full(1 << 16, _ONE16), upper=every >> 8,
                                        lower=every & 0xFF, mode=MODE_FP16, clear=clear))
        if self.modes == "fp16":
            streams.append(self._stream("every FP16 weight x 1.0", a=np.full(1 << 16, _ONE16),
                                        w=every, clear=clear))
            streams.append(self._stream("every FP16 activation x 1.0", a=every,
                                        w=np.full(1 << 16, _ONE16), clear=clear))
        if self.modes != "fp16":
            name = "FP8 mode: every E4M3 x E4M3 pair"
            if self.modes == "dual":
                streams.append(self._stream(name, a=every >> 8, upper=every & 0xFF,
                                            lower=rng.integers(0, 256, 1 << 16),
                                            mode=MODE_FP8, clear=clear))
            else:
                streams.append(self._stream(name, a=every >> 8, w=every & 0xFF, clear=clear))
        return streams

    # ------------------------------------------------------------------ suites
    def vectors(self, suite, *, lanes, count, rng) -> Vectors:
        self.check_suite(suite)
        if suite == "exhaustive":
            # split the sweeps across the lanes (each piece starts with clear anyway)
            streams = []
            for s in self.exhaustive_streams(rng):
                n = len(s)
                step = -(-n // lanes)
                for lo in range(0, n, step):
                    streams.append(Stream(s.name, {p: v[lo:lo + step] for p, v in s.inputs.items()}))
            streams += self.corner_streams()
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
        acc = np.zeros(mask.shape, np.int64)
        for s, (lane, start) in zip(streams, where):
            acc[start:start + len(s), lane] = self.golden.run(s.inputs)
        # padding cycles (valid = clear = 0) hold the sum: expected = the last value
        for lane in range(mask.shape[1]):
            col = acc[:, lane]
            idx = np.where(mask[:, lane], np.arange(len(col)), 0)
            np.maximum.accumulate(idx, out=idx)
            col[:] = col[idx]
        return Vectors(inputs, {"acc": acc}, mask, labels=labels, label_names=names,
                       notes={"corner_streams": len(self.corner_streams())})

    def describe(self, vectors, mismatch, got) -> str:
        c, l = mismatch.cycle, mismatch.lane
        ins = ", ".join(f"{p}=0x{int(v[c, l]):x}" for p, v in sorted(vectors.inputs.items()))
        lab = vectors.label(c, l)
        return (f"cycle {c} lane {l}{' [' + lab + ']' if lab else ''}: {ins} -> acc expected "
                f"0x{int(vectors.expected['acc'][c, l]):08x} got 0x{int(got['acc'][c, l]):08x}")
