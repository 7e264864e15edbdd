"""Testbenches of the RaZeR/NVFP4 element decoders and tensor cores (:mod:`mactile.rtl.fp4tc`).

Decoders (:class:`DecoderBench`)
--------------------------------
``exhaustive`` (fixed size)
    Every FP4 code x every offset-register value (every pair for RaZeR weights) x every
    scale byte (all 256: every metadata value, with every scale field under it). Each
    register setting is one stream: a programming cycle, then one cycle per byte (the
    decoder's lanes carry all 16 codes at once).

Tensor cores (:class:`TensorCoreBench`)
---------------------------------------
Every cycle is checked once the stream's first block has landed: ``acc`` of every row
(the golden state after the inputs up to that cycle, bubbles included) and ``acc_valid``.
Each stream programs the offset registers (RaZeR), then starts with ``clear``.

``random`` (default)
    Blocks from the golden quantizers (``nvfp4``; ``razer``/``razer-act`` with random
    special values, the offset registers programmed to match) on Gaussian data with
    per-block magnitudes over ~2**+-12, and blocks of uniform random codes and scale bytes
    (every metadata value, NaN and negative scales, random registers); clears about one
    block in 8, bubbles with garbage inputs about one cycle in 17.
``corners`` (fixed size)
    Every special value and sign: every offset-register value in every register, blocks of
    every code under every (select, sign); scale extremes: every pair of {0, smallest
    subnormal, largest subnormal, smallest normal, 1, largest} of both scale formats with
    all-max and all-min elements, negative scales (NVFP4), NaN scales (sticky until a
    clear, and a clear under a NaN); exact cancellation to zero; with E8M0 scales, products
    of random blocks rounded into FP32's subnormal range and across its overflow threshold.
``ties``
    Accumulator rounding ties: after a large first product, each block is built from the
    golden state so that ``acc + P`` lies exactly halfway between two FP32 numbers (odd
    multiples of half an ulp, both signs), mixed with near-ties (one quantum off).
``long``
    One long accumulation per stream (``count`` cycles), golden-quantized blocks of widely
    varying scale, no clear after the first block.
``full`` (fixed size)
    ``corners``, ``ties`` (FP32 only), ``long`` and ``random`` at their default sizes in one
    run (one simulator start for all; the per-part rounding counts are in the notes).
``gemv`` (fixed size)
    End to end: a random 64 x 256 weight matrix and a 256-element activation vector
    quantized by the golden quantizers, ``rows`` output rows per tile, every block of
    every tile; the last accumulator of each row must equal ``TensorCoreSpec.gemv``.

Output-stationary cores (:class:`OuterCoreBench`)
-------------------------------------------------
The same suites lifted to a ``rows`` x ``cols`` array of units (see the class), ``gemm``
in place of ``gemv``; every ``acc[i][j]`` checked every cycle against
:class:`~mactile.golden.tensorcore.OuterProductSpec`.
"""
from __future__ import annotations

import numpy as np

from mactile.golden.conventions import require_default_convention
from mactile.golden.elements import FP4_E2M1, FP32
from mactile.golden.fp4blocks import razer_offset_code, razer_offset_value
from mactile.golden.storage import SPECIAL_CODE, ZERO_CODE
from mactile.golden.tensorcore import (ELEM_FRAC, OFFSET_BITS, OPERANDS, FixedAccumulator, FP32Accumulator,
                                       OperandSpec, default_specials, fp32_parts, fp32_rounding,
                                       golden_format, interesting_fp32, outer_product_spec,
                                       tensor_core_spec)

from ..bench import Bench, Stream, Vectors, pack_streams

__all__ = ["DecoderBench", "TensorCoreBench", "OuterCoreBench", "Fp32AddBench", "GEMV_SHAPE",
           "gemv_operands"]

#: Shape (N, K) of the end-to-end GEMV.
GEMV_SHAPE = (64, 256)
BUBBLE_EVERY = 17
CLEAR_EVERY = 8
_N_OFFSETS = 1 << OFFSET_BITS


def _default_specials(op: OperandSpec) -> tuple[float, ...]:
    return default_specials(op)


def _layout(streams, expected_per_stream, lanes, idle=None):
    """pack_streams plus the expected arrays placed where the streams went."""
    inputs, mask, labels, names, where = pack_streams(streams, lanes, idle=idle)
    cycles = mask.shape[0]
    ports = sorted({p for e in expected_per_stream for p in e})
    expected = {p: np.zeros((cycles, lanes), np.int64) for p in ports}
    for (lane, start), e in zip(where, expected_per_stream):
        for p, v in e.items():
            expected[p][start:start + len(v), lane] = v
    return inputs, expected, mask, labels, names


def gemv_operands(w_format, a_format, rng):
    """The end-to-end GEMV's quantized operands: a random ``GEMV_SHAPE`` weight matrix and
    activation vector (Gaussian, block magnitudes spread over 2**+-6 resp. 2**+-8, 1%
    weight outliers, so that FP32 accumulation really rounds: with uniform magnitudes 16
    blocks add exactly), quantized by the golden quantizers. Returns ``(qw, qx)``."""
    for f in (w_format, a_format):  # the RTL implements the default convention only
        require_default_convention(f, "the tensor-core GEMV bench")
    N, K = GEMV_SHAPE
    bs = w_format.block_size
    nb = K // bs
    W = rng.standard_normal((N, K)) * np.exp2(rng.uniform(-6, 6, (N, nb, 1))).repeat(
        bs, axis=2).reshape(N, K) * 0.02
    W[rng.random(W.shape) < 0.01] *= 10
    x = rng.standard_normal(K) * np.exp2(rng.uniform(-8, 8, nb)).repeat(bs)
    return w_format.quantize(W.astype(np.float32)), a_format.quantize(x.astype(np.float32))


# =============================================================================== decoders
class DecoderBench(Bench):
    """Check of a :class:`~mactile.rtl.fp4tc.decoders.DecoderUnit`.

    ``exhaustive``: every code on every lane under every scale byte and every setting of
    the offset registers (each lane holds one code while the byte sweeps). ``random``:
    uniform random codes and scale bytes every cycle under one random register setting;
    the power analysis replays it (the sweep leaves the codes still).
    """

    suites = ("exhaustive", "random")
    fixed_suites = ("exhaustive",)
    activity_suite = "random"

    def __init__(self, *, operand="razer", lanes: int = 16, specials=None):
        self.op = OPERANDS[operand] if isinstance(operand, str) else operand
        self.lanes = lanes

    def _settings(self):
        n = self.op.specials
        if n == 0:
            return [()]
        grids = np.indices((_N_OFFSETS,) * n).reshape(n, -1).T
        return [tuple(int(x) for x in g) for g in grids]

    def vectors(self, suite, *, lanes, count, rng) -> Vectors:
        self.check_suite(suite)
        if suite == "random":
            return self._random(lanes, count or 2000, rng)
        L = self.lanes
        per_byte = -(-FP4_E2M1.code_count // L)  # cycles to show every code in L lanes
        byte = np.repeat(np.arange(256), per_byte)
        sub = np.tile(np.arange(per_byte), 256)
        codes = (sub[:, None] * L + np.arange(L)[None, :]) % FP4_E2M1.code_count
        streams, expected = [], []
        for offs in self._settings():
            stream, exp = self._stream(offs, codes, byte, f"offsets {offs}")
            streams.append(stream)
            expected.append(exp)
        inputs, exp, mask, labels, names = _layout(streams, expected, lanes)
        return Vectors(inputs, exp, mask, labels=labels, label_names=names,
                       notes={"register_settings": len(streams), "codes": 16, "bytes": 256})

    def _stream(self, offs, codes, byte, label):
        """One stream: the registers written in its first cycle, then ``codes``
        (cycles x lanes) under scale bytes ``byte``; with its expected values."""
        n, L = len(codes) + 1, self.lanes
        ins = {"meta": np.concatenate([[0], byte]).astype(np.int64)}
        if self.op.specials:
            ins["cfg_we"] = np.zeros(n, np.int64)
            ins["cfg_we"][0] = 1
            for k, o in enumerate(offs):
                ins[f"cfg_offsets__{k}"] = np.full(n, o, np.int64)
        for i in range(L):
            ins[f"codes__{i}"] = np.concatenate([[0], codes[:, i]]).astype(np.int64)
        vals = self.op.decode_elements(codes, byte, offs)
        exp = {f"values__{i}": np.concatenate([[0], vals[:, i]]) for i in range(L)}
        check = np.ones(n, bool)
        check[0] = False  # the registers change at this cycle's edge
        return Stream(label, ins, check), exp

    def _random(self, lanes, count, rng) -> Vectors:
        settings = self._settings()
        offs = settings[int(rng.integers(len(settings)))]
        codes = rng.integers(0, FP4_E2M1.code_count, (count, self.lanes))
        byte = rng.integers(0, 256, count)
        stream, exp = self._stream(offs, codes, byte, f"offsets {offs}")
        inputs, exp, mask, labels, names = _layout([stream], [exp], lanes)
        return Vectors(inputs, exp, mask, labels=labels, label_names=names,
                       notes={"register_settings": 1})


# =============================================================================== tensor core
class _Block:
    """One block step: codes, scale bytes, clear, and the register values in force."""

    __slots__ = ("ac", "ab", "wc", "wb", "clear", "wo", "ao")

    def __init__(self, ac, ab, wc, wb, clear, wo, ao):
        self.ac, self.ab, self.wc, self.wb = ac, int(ab), wc, wb
        self.clear, self.wo, self.ao = bool(clear), tuple(wo), tuple(ao)


class TensorCoreBench(Bench):
    """Vectors and golden expectations for a :class:`~mactile.rtl.fp4tc.tensorcore.TensorCore`.

    Takes the design's parameters; the pipeline changes only the latency (read by the
    harness from the component).
    """

    suites = ("random", "corners", "ties", "long", "gemv", "full")
    #: One core per simulation: the array is wide on its own (harness default lanes).
    default_lanes = 1
    fixed_suites = ("corners", "gemv", "full")
    default_counts = {"random": 2000, "ties": 600, "long": 3000}

    def __init__(self, *, w_specials=None, a_specials=None, **params):
        self.params = params
        self.spec = s = tensor_core_spec(**params)
        wsp = _default_specials(s.weight) if w_specials is None else tuple(w_specials)
        asp = _default_specials(s.act) if a_specials is None else tuple(a_specials)
        self.reset_wo = tuple(razer_offset_code(v) for v in wsp)
        self.reset_ao = tuple(razer_offset_code(v) for v in asp)

    # ------------------------------------------------------------------ golden formats
    def _w_format(self, specials=None):
        """The golden quantizer of the weight operand (None where there is none), with
        the special magnitudes ``specials`` (default: the format's)."""
        return golden_format(self.spec.weight, block_size=self.spec.block_size,
                             specials=specials)

    def _a_format(self, special=None):
        return golden_format(self.spec.act, block_size=self.spec.block_size,
                             specials=None if special is None else (special,))

    # ------------------------------------------------------------------ streams
    def _stream(self, name, blocks: list[_Block | None], *, program=True, rng=None):
        """Cycles of ``blocks`` (``None``: a bubble with garbage), golden expectations.

        The stream programs the offset registers of its first block first (RaZeR) and
        re-programs them in a bubble cycle wherever the next block's values change.
        """
        s = self.spec
        R, C, beats = s.rows, s.cols, s.beats
        rng = rng or np.random.default_rng(0)
        has_w, has_a = s.weight.specials > 0, s.act.specials > 0
        cycles, first = self._schedule(blocks)
        n = len(cycles)
        ins = {"valid": np.zeros(n, np.int64), "clear": np.zeros(n, np.int64),
               "act_scale": rng.integers(0, 256, n)}
        ac = rng.integers(0, 16, (n, C))
        wc = rng.integers(0, 16, (n, R, C))
        wb = rng.integers(0, 256, (n, R))
        ins["clear"] = rng.integers(0, 2, n)  # garbage in bubbles; ignored without valid
        if has_w or has_a:
            ins["cfg_we"] = np.zeros(n, np.int64)
        if has_w:
            wo_in = np.tile(np.asarray(first.wo), (n, 1))
        if has_a:
            ao_in = np.tile(np.asarray(first.ao), (n, 1))
        state = s.initial(R)
        started = False
        acc_exp = np.zeros((n, R), dtype=object)
        nan_exp = np.zeros((n, R), np.int64)
        valid_exp = np.zeros(n, np.int64)
        check = np.zeros(n, bool)
        for t, (kind, pay) in enumerate(cycles):
            if kind == "cfg":
                ins["valid"][t] = 0
                ins["cfg_we"][t] = 1
                if has_w:
                    wo_in[t:] = pay[0]
                if has_a:
                    ao_in[t:] = pay[1]
            elif kind == "beat":
                b, beat = pay
                sl = slice(beat * C, (beat + 1) * C)
                ins["valid"][t] = 1
                ins["clear"][t] = int(b.clear)
                ins["act_scale"][t] = b.ab
                ac[t] = b.ac[sl]
                wc[t] = b.wc[:, sl]
                wb[t] = b.wb
                if beat == beats - 1:
                    p = s.products(b.ac, b.ab, b.wc, b.wb, w_offsets=b.wo, a_offsets=b.ao)
                    if isinstance(s.acc, FP32Accumulator):
                        for r in range(R):
                            kind = "special" if p.nan[r] else fp32_rounding(
                                0 if b.clear else int(state["acc"][r]), int(p.neg[r]),
                                int(p.mag[r]), int(p.exp[r]))
                            self.roundings[kind] = self.roundings.get(kind, 0) + 1
                    state = s.accumulate(state, p, clear=b.clear)
                    valid_exp[t] = 1
                    started = started or b.clear
            check[t] = started
            acc_exp[t] = self._acc_ints(state)
            nan_exp[t] = state["nan"].astype(np.int64)
        for j in range(C):
            ins[f"act_codes__{j}"] = ac[:, j]
        for r in range(R):
            ins[f"w_scales__{r}"] = wb[:, r]
            for j in range(C):
                ins[f"w_codes__{r}__{j}"] = wc[:, r, j]
        if has_w:
            for k in range(s.weight.specials):
                ins[f"cfg_w_offsets__{k}"] = wo_in[:, k]
        if has_a:
            for k in range(s.act.specials):
                ins[f"cfg_a_offsets__{k}"] = ao_in[:, k]
        exp = {"acc_valid": valid_exp}
        for r in range(R):
            exp[f"acc__{r}"] = acc_exp[:, r].astype(np.int64)
            if isinstance(s.acc, FixedAccumulator):
                exp[f"acc_nan__{r}"] = nan_exp[:, r]
        return Stream(name, ins, check), exp, state

    def _schedule(self, blocks):
        """Cycles of ``blocks``: ``[(kind, payload)]`` with kind ``"cfg"`` (program the
        offset registers: before the first block and wherever the values change),
        ``"bubble"`` or ``"beat"`` (``(block, beat)``); and the first block."""
        s = self.spec
        specials = s.weight.specials > 0 or s.act.specials > 0
        cycles = []
        cur = None
        first = next(b for b in blocks if b is not None)
        if specials:
            cycles.append(("cfg", (first.wo, first.ao)))
            cur = (first.wo, first.ao)
        for b in blocks:
            if b is None:
                cycles.append(("bubble", None))
                continue
            if specials and (b.wo, b.ao) != cur:
                cycles.append(("cfg", (b.wo, b.ao)))
                cur = (b.wo, b.ao)
            for beat in range(s.beats):
                cycles.append(("beat", (b, beat)))
        return cycles, first

    def _acc_ints(self, state):
        """Accumulator port values as the harness reads them (fixed: signed)."""
        out = []
        for v in state["acc"]:
            v = int(v)
            if isinstance(self.spec.acc, FixedAccumulator):
                w = self.spec.acc.width
                v = v - (1 << w) if v >> (w - 1) else v
            out.append(v)
        return out

    def _pack(self, made, lanes, notes=None) -> Vectors:
        streams = [m[0] for m in made]
        exps = [m[1] for m in made]
        inputs, exp, mask, labels, names = _layout(streams, exps, lanes)
        notes = dict(notes or {})
        if self.roundings:
            notes["fp32_roundings"] = dict(self.roundings)  # per row-step: exact/tie/inexact
        return Vectors(inputs, exp, mask, labels=labels, label_names=names, notes=notes)

    # ------------------------------------------------------------------ block makers
    def _random_specials(self, rng):
        """Random register values and the matching golden special magnitudes."""
        wo = tuple(int(x) for x in rng.integers(0, _N_OFFSETS, self.spec.weight.specials))
        ao = tuple(int(x) for x in rng.integers(0, _N_OFFSETS, self.spec.act.specials))
        return wo, ao

    def _quantized_blocks(self, n, rng, *, wo, ao, spread=4.0):
        """``n`` blocks of golden-quantized Gaussian data (codes/bytes as stored)."""
        s = self.spec
        R, bs = s.rows, s.block_size
        wf = self._w_format(tuple(razer_offset_value(o) for o in wo) if wo else None)
        af = self._a_format(razer_offset_value(ao[0]) if ao else None)
        x = rng.standard_normal((n, bs)) * np.exp2(rng.uniform(-spread, spread, (n, 1)))
        w = rng.standard_normal((n * R, bs)) * np.exp2(rng.uniform(-spread, spread, (n * R, 1)))
        x[rng.random(x.shape) < 0.02] *= 8  # outliers: blocks with saturating elements
        if af is not None:
            qa = af.quantize(x.astype(np.float32))
            ac, ab = qa.codes.reshape(n, bs), qa.scales.reshape(n)
        else:
            ac, ab = rng.integers(0, 16, (n, bs)), rng.integers(0, 256, n)
        if wf is not None:
            qw = wf.quantize(w.astype(np.float32))
            wc, wb = qw.codes.reshape(n, R, bs), qw.scales.reshape(n, R)
        else:
            wc, wb = rng.integers(0, 16, (n, R, bs)), rng.integers(0, 256, (n, R))
        return [(ac[i], ab[i], wc[i], wb[i]) for i in range(n)]

    def _uniform_blocks(self, n, rng):
        s = self.spec
        R, bs = s.rows, s.block_size
        return [(rng.integers(0, 16, bs), int(rng.integers(0, 256)),
                 rng.integers(0, 16, (R, bs)), rng.integers(0, 256, R)) for _ in range(n)]

    def _with_bubbles(self, blocks, rng, every=BUBBLE_EVERY):
        out = []
        for b in blocks:
            if rng.random() < 1 / every:
                out.append(None)
            out.append(b)
        return out

    # ------------------------------------------------------------------ suites
    def vectors(self, suite, *, lanes, count, rng) -> Vectors:
        self.check_suite(suite)
        self.roundings = {}
        if suite != "full":
            if count is None:
                count = self.default_counts.get(suite)
            made, notes = getattr(self, f"_suite_{suite}")(lanes=lanes, count=count, rng=rng)
            return self._pack(made, lanes, notes)
        made, notes = [], {"parts": {}}
        parts = ["corners", "long", "random"]
        if isinstance(self.spec.acc, FP32Accumulator):
            parts.insert(1, "ties")
        total = {}
        for sub in parts:
            self.roundings = {}
            m, _ = getattr(self, f"_suite_{sub}")(lanes=lanes, count=self.default_counts.get(sub),
                                                 rng=rng)
            made += m
            notes["parts"][sub] = {"streams": len(m), "fp32_roundings": dict(self.roundings)}
            for k, v in self.roundings.items():
                total[k] = total.get(k, 0) + v
        self.roundings = total
        return self._pack(made, lanes, notes)

    def _suite_random(self, *, lanes, count, rng):
        made, cycles, k = [], 0, 0
        per = 40  # blocks per stream
        while cycles < count:
            wo, ao = self._random_specials(rng) if k % 3 else (self.reset_wo, self.reset_ao)
            raw = self._quantized_blocks(per, rng, wo=wo, ao=ao) if k % 2 == 0 \
                else self._uniform_blocks(per, rng)
            clear = rng.random(per) < 1 / CLEAR_EVERY
            clear[0] = True
            blocks = [_Block(*b, c, wo, ao) for b, c in zip(raw, clear)]
            name = "golden-quantized blocks" if k % 2 == 0 else "uniform codes and bytes"
            made.append(self._stream(name, self._with_bubbles(blocks, rng), rng=rng))
            cycles += len(made[-1][0])
            k += 1
        return made, {}

    def _suite_long(self, *, lanes, count, rng):
        per_lane = max(1, count // max(lanes, 1) // self.spec.beats)
        made = []
        for _ in range(lanes):
            wo, ao = self._random_specials(rng)
            raw = self._quantized_blocks(per_lane, rng, wo=wo, ao=ao, spread=8.0)
            blocks = [_Block(*b, i == 0, wo, ao) for i, b in enumerate(raw)]
            made.append(self._stream(f"long accumulation ({per_lane} blocks)", blocks, rng=rng))
        return made, {}

    def _suite_gemv(self, *, lanes, count, rng):
        s = self.spec
        wf, af = self._w_format(), self._a_format()
        if wf is None or af is None:
            raise ValueError(f"gemv suite needs golden quantizers for both operands; "
                             f"{s.weight.name}/{s.act.name} has none")
        N, K = GEMV_SHAPE
        if N % s.rows:
            raise ValueError(f"gemv suite: {N} rows are not a multiple of rows={s.rows}")
        if lanes != 1:
            raise ValueError("gemv suite runs the tiles one after another on one lane: lanes=1")
        qw, qx = gemv_operands(wf, af, rng)
        wo, ao = self.reset_wo, self.reset_ao
        if (wo, ao) != (tuple(razer_offset_code(v) for v in _default_specials(s.weight)),
                        tuple(razer_offset_code(v) for v in _default_specials(s.act))):
            raise ValueError("gemv suite uses the golden quantizers' default special values: "
                             "build the design with the default w_specials/a_specials")
        final = s.gemv(qw, qx)
        made = []
        nkb = K // s.block_size
        for tile in range(N // s.rows):
            rows = slice(tile * s.rows, (tile + 1) * s.rows)
            blocks = [_Block(qx.codes[kb], qx.scales[kb], qw.codes[rows, kb], qw.scales[rows, kb],
                             kb == 0, wo, ao) for kb in range(nkb)]
            st, exp, state = self._stream(f"gemv rows {rows.start}-{rows.stop - 1}", blocks,
                                          rng=rng)
            if [int(v) for v in state["acc"]] != [int(v) for v in final["acc"][rows]]:
                raise AssertionError("golden step-by-step run disagrees with TensorCoreSpec.gemv")
            made.append((st, exp))
        return made, ({
            "gemv_shape": GEMV_SHAPE, "final_acc": [int(v) for v in final["acc"]],
            "w_tensor_scale": None if qw.tensor_scale is None else float(qw.tensor_scale),
            "a_tensor_scale": None if qx.tensor_scale is None else float(qx.tensor_scale)})

    # ---- corners
    def _scale_extremes(self, op: OperandSpec):
        """Scale-field codes: 0, smallest/largest subnormal, smallest normal, 1.0, largest."""
        f = op.scale_format
        codes = {0, 1, (1 << f.man_bits) - 1, 1 << f.man_bits, int(f.encode(1.0)),
                 int(f.max_code)}
        return sorted(codes)

    def _suite_corners(self, *, lanes, count, rng):
        s = self.spec
        R, bs = s.rows, s.block_size
        made = []
        max_code = int(FP4_E2M1.max_code)          # 0b0111 = 6.0
        min_code = 1                               # 0.5
        wsp, asp = s.weight.specials, s.act.specials

        def meta(op, sel, sign):
            b = 0
            if op.specials:
                b |= sign << op.sign_bit
                if op.select_bits:
                    b |= sel << op.select_bit
            return b

        one_w = int(s.weight.scale_format.encode(1.0))
        one_a = int(s.act.scale_format.encode(1.0))
        # (1) every offset value in every register, every code under every (sel, sign)
        if wsp or asp:
            for v in range(_N_OFFSETS):
                wo = tuple((v + 5 * k) % _N_OFFSETS for k in range(wsp))
                ao = tuple(v for _ in range(asp))
                blocks = []
                for sel in range(2 if wsp == 2 else 1):
                    for sign in range(2):
                        for asign in range(2):
                            ac = np.arange(bs) % 16
                            wc = (np.arange(bs)[None, :] + np.arange(R)[:, None]) % 16
                            ab = one_a | meta(s.act, 0, asign)
                            wb = np.full(R, one_w | meta(s.weight, sel, sign))
                            blocks.append(_Block(ac, ab, wc, wb, True, wo, ao))
                            # special x special only: special codes everywhere
                            blocks.append(_Block(np.full(bs, SPECIAL_CODE), ab,
                                                 np.full((R, bs), SPECIAL_CODE), wb, False, wo, ao))
                made.append(self._stream(f"special values, registers {wo}/{ao}", blocks, rng=rng))
        # (2) scale extremes: every pair, with all-max and all-min elements
        blocks = []
        wo, ao = self.reset_wo, self.reset_ao
        for sa in self._scale_extremes(s.act):
            for sw in self._scale_extremes(s.weight):
                for code in (max_code, min_code, max_code | 8):
                    ac = np.full(bs, code)
                    wc = np.full((R, bs), max_code)
                    blocks.append(_Block(ac, sa, wc, np.full(R, sw), True, wo, ao))
                    blocks.append(_Block(ac, sa, wc, np.full(R, sw), False, wo, ao))
        made.append(self._stream("scale extremes (every pair, max/min elements)", blocks, rng=rng))
        # (3) signed and NaN scales (formats that have them), sticky NaN, clear under NaN
        blocks = []
        ac = np.full(bs, max_code)
        wc = np.full((R, bs), max_code)
        for op, side in ((s.act, "a"), (s.weight, "w")):
            f = op.scale_format
            special_bytes = []
            if op.scale_signed:
                special_bytes.append(int(f.encode(-1.0)))
                special_bytes.append(int(f.max_code) | f.sign_mask)
            for nc in f.nan_codes:
                c = int(nc) & ((1 << op.scale_field_bits) - 1)
                special_bytes.append(c)
            for b in special_bytes:
                ab = b if side == "a" else one_a
                wb = np.full(R, b if side == "w" else one_w)
                wb_mixed = wb.copy()
                wb_mixed[::2] = one_w  # half the rows unaffected when the weight is odd
                blocks += [
                    _Block(ac, one_a, wc, np.full(R, one_w), True, wo, ao),
                    _Block(ac, ab, wc, wb_mixed if side == "w" else wb, False, wo, ao),
                    _Block(ac, one_a, wc, np.full(R, one_w), False, wo, ao),  # NaN stays
                    _Block(ac, ab, wc, wb, True, wo, ao),                     # clear under it
                    _Block(ac, one_a, wc, np.full(R, one_w), True, wo, ao),   # clear recovers
                ]
        # exact cancellation: +P then -P gives +0
        neg = np.full(bs, max_code | 8)
        blocks += [_Block(ac, one_a, wc, np.full(R, one_w), True, wo, ao),
                   _Block(neg, one_a, wc, np.full(R, one_w), False, wo, ao),
                   _Block(np.zeros(bs, int) | 8, one_a, wc, np.full(R, one_w), False, wo, ao)]
        made.append(self._stream("signed/NaN scales, cancellation", blocks, rng=rng))
        if s.rounds_products:
            made.append(self._stream("product rounding (E8M0)", self._rounding_blocks(rng),
                                     rng=rng))
        return made, {}

    def _rounding_blocks(self, rng):
        """Blocks whose products land in FP32's subnormal range, around its smallest normal
        and across its overflow threshold (E8M0 scales: :attr:`rounds_products`), with
        random codes so that rounding has bits to drop; each block starts from a clear."""
        s = self.spec
        R, bs = s.rows, s.block_size
        fa, fw = s.act.scale_format, s.weight.scale_format
        k = fa.bias + fa.man_bits + fw.bias + fw.man_bits + 2 * ELEM_FRAC
        wo, ao = self.reset_wo, self.reset_ao
        blocks = []
        tops = list(range(-152, -117)) + list(range(123, 131))  # exponent of P's top bit
        for top in tops:
            for _ in range(2):
                total = top + k - (s.product_bits - 1)  # e_a + e_w for a full-width dot
                ea = min(max(total // 2, 0), int(fa.max_code) >> fa.man_bits)
                ew = min(max(total - ea, 0), int(fw.max_code) >> fw.man_bits)
                ac = rng.integers(0, 16, bs)
                wc = rng.integers(0, 16, (R, bs))
                blocks.append(_Block(ac, ea << fa.man_bits, wc, np.full(R, ew << fw.man_bits),
                                     True, wo, ao))
        return blocks

    # ---- ties
    def _tie_block(self, state, rng, *, near=False):
        """A block whose product makes ``acc + P`` an exact FP32 tie in every row: ``P``
        is an odd multiple of half an ulp of the row's accumulator (random sign). With
        ``near``, an odd multiple of a quarter ulp instead (0.25/0.75 ulp: no tie). None
        where no shared activation scale reaches every row."""
        s = self.spec
        R, bs = s.rows, s.block_size
        fa, fw = s.act.scale_format, s.weight.scale_format
        # Elements: m lanes of 0.5 x 0.5 (one quarter unit each), the rest real zeros
        # (0b1000 where 0b0000 is the special code).
        zero = ZERO_CODE if (s.act.specials or s.weight.specials) else 0
        half = int(FP4_E2M1.encode(0.5))
        # Power-of-two scales (mantissa 0): P = m * 2**(Ea + Ew - Ba - Bw - 2*ELEM_FRAC).
        need = []
        for r in range(R):
            cls, _, mag, e = fp32_parts(int(state["acc"][r]))
            if cls != "num" or mag == 0:
                return None
            top = e + mag.bit_length() - 1          # binade of the accumulator
            target = top - 24 - int(near)           # half (quarter) an ulp
            need.append(target + fa.bias + fw.bias + 2 * ELEM_FRAC)  # = Ea + Ew
        ea_top = int(fa.max_code) >> fa.man_bits
        ew_top = int(fw.max_code) >> fw.man_bits
        lo, hi = max(1, max(need) - ew_top), min(ea_top, min(need) - 1)
        if lo > hi:
            return None
        ea = int(rng.integers(lo, hi + 1))
        m = int(rng.integers(0, (bs + 1) // 2)) * 2 + 1  # odd, <= block_size
        ac = np.full(bs, zero)
        ac[:m] = half
        wc = np.full((R, bs), zero)
        wb = np.zeros(R, np.int64)
        for r in range(R):
            wc[r, :m] = half | (int(rng.integers(0, 2)) << (FP4_E2M1.bits - 1))
            wb[r] = (need[r] - ea) << fw.man_bits
        return (ac, ea << fa.man_bits, wc, wb)

    def _suite_ties(self, *, lanes, count, rng):
        s = self.spec
        if not isinstance(s.acc, FP32Accumulator):
            raise ValueError("the ties suite is for the fp32 accumulator")
        made, cycles = [], 0
        wo, ao = self.reset_wo, self.reset_ao
        fa, fw = s.act.scale_format, s.weight.scale_format
        while cycles < count:
            blocks = []
            # a large first product with many significant bits
            big_a = int(fa.max_code) - 8  # one binade below the top, full mantissa
            big_w = int(fw.max_code) - (1 << fw.man_bits)
            if s.rounds_products:  # E8M0: the top binades overflow FP32; 2**10 and 2**6
                big_a, big_w = int(fa.encode(2.0 ** 10)), int(fw.encode(2.0 ** 6))
            for _ in range(3):
                ac = rng.integers(1, 8, s.block_size)
                wc = rng.integers(1, 8, (s.rows, s.block_size))
                blocks.append(_Block(ac, big_a, wc, np.full(s.rows, big_w), not blocks, wo, ao))
            state = s.initial(s.rows)
            for b in blocks:
                state = s.step(state, b.ac, b.ab, b.wc, b.wb, clear=b.clear, w_offsets=wo,
                               a_offsets=ao)
            for i in range(40):
                t = self._tie_block(state, rng, near=(i % 4 == 3))
                if t is None:
                    break
                b = _Block(*t, False, wo, ao)
                blocks.append(b)
                state = s.step(state, b.ac, b.ab, b.wc, b.wb, w_offsets=wo, a_offsets=ao)
            made.append(self._stream("rounding ties", blocks, rng=rng))
            cycles += len(made[-1][0])
        return made, {}


# =============================================================================== output-stationary
class _OSBlock:
    """One block step of the output-stationary core: ``rows`` activation blocks
    (``ac`` (rows, block_size), ``ab`` (rows,)), ``cols`` weight blocks, clear, registers."""

    __slots__ = ("ac", "ab", "wc", "wb", "clear", "wo", "ao")

    def __init__(self, ac, ab, wc, wb, clear, wo, ao):
        self.ac, self.ab = np.asarray(ac), np.asarray(ab, np.int64)
        self.wc, self.wb = np.asarray(wc), np.asarray(wb, np.int64)
        self.clear, self.wo, self.ao = bool(clear), tuple(wo), tuple(ao)


class OuterCoreBench(TensorCoreBench):
    """Vectors and golden expectations for an output-stationary
    :class:`~mactile.rtl.fp4tc.outer.OuterCore` (golden:
    :class:`~mactile.golden.tensorcore.OuterProductSpec`).

    The suites are :class:`TensorCoreBench`'s, made by the same block makers for one
    activation row against the ``cols`` weight blocks, then lifted to the array: step ``t``
    of a stream keeps its weight blocks, clear and registers, activation row 0 gets block
    ``t``'s activation (so row 0 replays the row-core suite exactly: its NaN-scale,
    sticky-NaN and cancellation sequences) and row ``i`` that of block ``t + i`` of the
    same stream (other scale and code mixes in every unit). ``ties`` gives every row block
    ``t``'s activation, so that every unit's ``acc + P`` is a tie. With ``drain="row"``
    column ``j`` is compared ``cols - 1 - j`` cycles ahead of the core's latency (it lands
    that much earlier). ``gemm`` (fixed size)
    replaces ``gemv``: the 64 x 256 weights against ``2 * rows`` activation vectors, every
    (rows x cols) output tile in turn; the last accumulators must equal
    :meth:`OuterProductSpec.gemm`.
    """

    suites = ("random", "corners", "ties", "long", "gemm", "full")
    fixed_suites = ("corners", "gemm", "full")
    #: Cycles; a block takes block_size/k_per_cycle of them here (16 by default, one in the
    #: 16 x 16 row core), so twice the row core's counts.
    default_counts = {"random": 4000, "ties": 1200, "long": 6000}

    def __init__(self, *, w_specials=None, a_specials=None, **params):
        self.os = outer_product_spec(**params)
        # drain="row": column j lands cols-1-j cycles before the core's latency (the last)
        self.lead = [self.os.cols - 1 - j if params.get("drain") == "row" else 0
                     for j in range(self.os.cols)]
        row = {k: v for k, v in params.items() if k not in ("rows", "cols", "k_per_cycle",
                                                             "drain")}
        super().__init__(w_specials=w_specials, a_specials=a_specials, rows=self.os.cols,
                         cols=self.os.k_per_cycle, **row)
        self._shift = 1

    def _lift(self, blocks):
        """Row-core blocks (``None``: bubble) -> array steps (see the class docstring)."""
        real = [b for b in blocks if b is not None]
        n, R = len(real), self.os.rows
        out, t = [], 0
        for b in blocks:
            if b is None:
                out.append(None)
                continue
            acts = [real[(t + i * self._shift) % n] for i in range(R)]
            out.append(_OSBlock(np.stack([a.ac for a in acts]), [a.ab for a in acts],
                                b.wc, b.wb, b.clear, b.wo, b.ao))
            t += 1
        return out

    def _stream(self, name, blocks, *, program=True, rng=None):
        if any(isinstance(b, _Block) for b in blocks):
            blocks = self._lift(blocks)
        s = self.os
        R, C, K, beats = s.rows, s.cols, s.k_per_cycle, s.beats
        rng = rng or np.random.default_rng(0)
        has_w, has_a = s.weight.specials > 0, s.act.specials > 0
        cycles, first = self._schedule(blocks)
        n = len(cycles)
        ins = {"valid": np.zeros(n, np.int64), "clear": rng.integers(0, 2, n)}
        ac = rng.integers(0, 16, (n, R, K))  # garbage in bubbles, ignored without valid
        ab = rng.integers(0, 256, (n, R))
        wc = rng.integers(0, 16, (n, C, K))
        wb = rng.integers(0, 256, (n, C))
        if has_w or has_a:
            ins["cfg_we"] = np.zeros(n, np.int64)
        wo_in = np.tile(np.asarray(first.wo, np.int64), (n, 1)) if has_w else None
        ao_in = np.tile(np.asarray(first.ao, np.int64), (n, 1)) if has_a else None
        state = s.initial()
        started = False
        acc_exp = np.zeros((n, R, C), np.int64)
        nan_exp = np.zeros((n, R, C), np.int64)
        valid_exp = np.zeros(n, np.int64)
        check = np.zeros(n, bool)
        fixed = isinstance(s.acc, FixedAccumulator)
        for t, (kind, pay) in enumerate(cycles):
            if kind == "cfg":
                ins["cfg_we"][t] = 1
                if has_w:
                    wo_in[t:] = pay[0]
                if has_a:
                    ao_in[t:] = pay[1]
            elif kind == "beat":
                b, beat = pay
                sl = slice(beat * K, (beat + 1) * K)
                ins["valid"][t], ins["clear"][t] = 1, int(b.clear)
                ac[t], ab[t], wc[t], wb[t] = b.ac[:, sl], b.ab, b.wc[:, sl], b.wb
                if beat == beats - 1:
                    ps = s.products(b.ac, b.ab, b.wc, b.wb, w_offsets=b.wo, a_offsets=b.ao)
                    if not fixed:
                        for i, p in enumerate(ps):
                            for j in range(C):
                                kind_ = "special" if p.nan[j] else fp32_rounding(
                                    0 if b.clear else int(state["acc"][i, j]), int(p.neg[j]),
                                    int(p.mag[j]), int(p.exp[j]))
                                self.roundings[kind_] = self.roundings.get(kind_, 0) + 1
                    state = s.accumulate(state, ps, clear=b.clear)
                    valid_exp[t] = 1
                    started = started or b.clear
            check[t] = started
            for i in range(R):
                acc_exp[t, i] = self._acc_ints({"acc": state["acc"][i]})
            nan_exp[t] = state["nan"].astype(np.int64)
        for j, lead in enumerate(self.lead):  # an early column shows later inputs' state
            if lead:
                for a in (acc_exp, nan_exp):
                    a[:, :, j] = np.concatenate([a[lead:, :, j],
                                                 np.repeat(a[-1:, :, j], lead, axis=0)])
        for i in range(R):
            ins[f"act_scales__{i}"] = ab[:, i]
            for q in range(K):
                ins[f"act_codes__{i}__{q}"] = ac[:, i, q]
        for j in range(C):
            ins[f"w_scales__{j}"] = wb[:, j]
            for q in range(K):
                ins[f"w_codes__{j}__{q}"] = wc[:, j, q]
        for q in range(s.weight.specials):
            ins[f"cfg_w_offsets__{q}"] = wo_in[:, q]
        for q in range(s.act.specials):
            ins[f"cfg_a_offsets__{q}"] = ao_in[:, q]
        exp = {"acc_valid": valid_exp}
        for i in range(R):
            for j in range(C):
                exp[f"acc__{i}__{j}"] = acc_exp[:, i, j]
                if fixed:
                    exp[f"acc_nan__{i}__{j}"] = nan_exp[:, i, j]
        return Stream(name, ins, check), exp, state

    def _suite_ties(self, **kw):
        self._shift = 0  # every row the same activation: each unit's sum is a tie
        try:
            return super()._suite_ties(**kw)
        finally:
            self._shift = 1

    def _suite_gemv(self, **kw):
        raise ValueError("the output-stationary core's end-to-end suite is gemm")

    def _suite_gemm(self, *, lanes, count, rng):
        s = self.os
        wf, af = self._w_format(), self._a_format()
        if wf is None or af is None:
            raise ValueError(f"gemm suite needs golden quantizers for both operands; "
                             f"{s.weight.name}/{s.act.name} has none")
        N, K = GEMV_SHAPE
        M = 2 * s.rows
        if N % s.cols:
            raise ValueError(f"gemm suite: {N} weight rows are not a multiple of cols={s.cols}")
        if lanes != 1:
            raise ValueError("gemm suite runs the tiles one after another on one lane: lanes=1")
        if (self.reset_wo, self.reset_ao) != (
                tuple(razer_offset_code(v) for v in _default_specials(s.weight)),
                tuple(razer_offset_code(v) for v in _default_specials(s.act))):
            raise ValueError("gemm suite uses the golden quantizers' default special values: "
                             "build the design with the default w_specials/a_specials")
        qw, qx0 = gemv_operands(wf, af, rng)
        qxs = [qx0] + [gemv_operands(wf, af, rng)[1] for _ in range(M - 1)]
        final = s.gemm(qw, qxs)
        wo, ao = self.reset_wo, self.reset_ao
        made = []
        for m0 in range(0, M, s.rows):
            for n0 in range(0, N, s.cols):
                xs, ws = qxs[m0:m0 + s.rows], slice(n0, n0 + s.cols)
                blocks = [_OSBlock(np.stack([q.codes[kb] for q in xs]),
                                   [q.scales[kb] for q in xs], qw.codes[ws, kb],
                                   qw.scales[ws, kb], kb == 0, wo, ao)
                          for kb in range(K // s.block_size)]
                st, exp, state = self._stream(f"gemm rows {m0}-{m0 + s.rows - 1}, "
                                              f"cols {n0}-{ws.stop - 1}", blocks, rng=rng)
                want = final["acc"][m0:m0 + s.rows, ws]
                if [[int(v) for v in r] for r in state["acc"]] != \
                        [[int(v) for v in r] for r in want]:
                    raise AssertionError("golden step-by-step run disagrees with "
                                         "OuterProductSpec.gemm")
                made.append((st, exp))
        return made, {"gemm_shape": (M, N, K),
                      "final_acc": [[int(v) for v in r] for r in final["acc"]]}


# =============================================================================== FP32 adder
class Fp32AddBench(Bench):
    """Vectors for :class:`~mactile.rtl.fp4tc.fp32add.FP32Adder` against
    :func:`mactile.golden.tensorcore.fp32_add_bits`.

    ``random``: a third independent interesting operands
    (:func:`mactile.golden.tensorcore.interesting_fp32`), a third pairs in the same binade with random signs (cancellation), a third exact ties
    and near ties (``b`` an odd multiple of half / a quarter of ``a``'s ulp, both signs,
    across the normal and subnormal range).
    """

    suites = ("random",)
    default_count = 1 << 16

    def __init__(self, **params):
        if params:
            raise ValueError(f"fp32-adder takes no parameters, got {sorted(params)}")

    def vectors(self, suite, *, lanes, count, rng) -> Vectors:
        from mactile.golden.tensorcore import fp32_add_bits, fp32_round

        self.check_suite(suite)
        n = count or self.default_count
        cycles = -(-n // lanes)
        total = cycles * lanes
        a = interesting_fp32(rng, total).astype(np.int64)
        b = interesting_fp32(rng, total).astype(np.int64)
        third = total // 3
        # same binade, random sign and mantissa: cancellation and carries
        sl = slice(third, 2 * third)
        b[sl] = (a[sl] & FP32.exp_mask) | rng.integers(0, 1 << FP32.man_bits, third) \
            | (rng.integers(0, 2, third) << (FP32.bits - 1))
        # ties and near ties relative to a's ulp
        for i in range(2 * third, total):
            ai = int(a[i]) & (FP32.exp_mask | FP32.man_mask)
            e = max((ai >> FP32.man_bits), 1) - (FP32.bias + FP32.man_bits)  # a's ulp exponent
            m = int(rng.integers(0, 64)) * 2 + 1
            near = int(rng.integers(0, 2))
            shift = int(rng.integers(0, 30)) if rng.random() < 0.3 else 0
            b[i] = fp32_round(int(rng.integers(0, 2)), m, e - 1 - near + shift) if ai < FP32.exp_mask \
                else b[i]
        s = np.array([fp32_add_bits(int(x), int(y)) for x, y in zip(a, b)], np.int64)
        sh = (cycles, lanes)
        return Vectors({"a": a.reshape(sh), "b": b.reshape(sh)}, {"s": s.reshape(sh)},
                       notes={"vectors": total})
