"""Testbenches of the DialectFP4 activation path (:mod:`mactile.rtl.dialect`).

``QuantizerBench`` (``dialect-quantizer``) and ``MseSelectorBench``
(``dialect-mse-selector``), suites:

``random`` (default)
    The named corner blocks of :func:`~.dialect_blocks.corner_blocks` (and, for the MSE
    selector, :func:`~.dialect_blocks.mse_corner_blocks`), then random blocks of every
    kind in :data:`~.dialect_blocks.RANDOM_KINDS` until ``count`` blocks; one cycle in 17 of
    the random streams is a bubble (``valid = 0``) carrying a random block, whose outputs
    are checked too (``out_valid = 0``, the other fields are the golden model's).
``corners``
    Only the named corner blocks.

A checked vector is one block (one cycle of one lane): ``out_valid``, ``se``, ``dialect``
and every ``codes__j`` are compared with the golden model exactly.

``DequantizerBench`` (``dialect-dequantizer``), suites ``exhaustive`` (default: every code
in every position under every dialect, valid and bubble cycles) and ``random``.

``ChainBench`` (``dialect-chain``): quantizer -> dequantizer -> ``mac-dialectfp4-decode`` against
the golden quantizer and the golden MAC datapath, every cycle modelled.
"""
from __future__ import annotations

import numpy as np

from mactile.golden.elements import FP16
from mactile.golden.dialect import (FORMATBOOK, N_DIALECTS, CountTie, preprocess,
                                    quantize_index, select_two_stage, stage1_pair,
                                    stage2_counts)
from mactile.golden.dialect_mse import MseFixedPoint, quantize_fixed_mse

from ..bench import Bench, Mismatch, Stream, Vectors, pack_streams
from .dialect_blocks import corner_blocks, mse_corner_blocks, random_blocks

__all__ = ["QuantizerBench", "MseSelectorBench", "DequantizerBench", "ChainBench",
           "golden_two_stage"]

DEFAULT_RANDOM_BLOCKS = 4096
BUBBLE_EVERY = 17


def golden_two_stage(x16: np.ndarray, count_tie: CountTie = CountTie.EVEN):
    """(se, dialect, codes) of FP16 blocks ``(n, B)`` by the golden two-stage procedure."""
    se, mt, sign = preprocess(x16)
    dialect = select_two_stage(mt, count_tie)
    return se, dialect, (sign << 3) | quantize_index(mt, dialect)


def _x_ports(b: int) -> list[str]:
    return [f"x__{j}" for j in range(b)]


def _code_ports(b: int) -> list[str]:
    return [f"codes__{j}" for j in range(b)]


def _hold_outputs(expected: dict, valid: np.ndarray) -> None:
    """Expected outputs of a unit whose output registers load only with a valid block:
    each cycle's fields are those of the last valid input cycle, zero before the first
    (``out_valid`` stays the input's). ``valid``: ``(cycles, lanes)`` bool, in the
    cycles of ``expected`` (the bench aligns the latency)."""
    t = np.arange(valid.shape[0])[:, None]
    last = np.maximum.accumulate(np.where(valid, t, -1), axis=0)
    for p, e in expected.items():
        if p == "out_valid":
            continue
        held = np.take_along_axis(e, np.maximum(last, 0), axis=0)
        expected[p] = np.where(last >= 0, held, 0)


class _BlockBench(Bench):
    """Shared stimulus for the two FP16-block -> (se, dialect, codes) units."""

    suites = ("random", "corners")
    fixed_suites = ("corners",)
    #: Whether the outputs hold the last valid block's result between ``out_valid``
    #: pulses (clock gating, or the MSE selector's rounds) instead of a bubble's result.
    holds = False

    def __init__(self, *, block_size: int = 32):
        self.block_size = block_size

    # Subclasses: golden (se, dialect, codes) of FP16 blocks, and extra corner blocks.
    def golden(self, x16: np.ndarray):
        raise NotImplementedError

    def extra_corners(self, rng) -> dict[str, np.ndarray]:
        return {}

    def _stream(self, name: str, blocks: np.ndarray, valid=None) -> Stream:
        bits = np.ascontiguousarray(blocks, dtype=np.float16).view(np.uint16).astype(np.int64)
        n = len(bits)
        ins = {p: bits[:, j] for j, p in enumerate(_x_ports(self.block_size))}
        ins["valid"] = np.ones(n, np.int64) if valid is None else np.asarray(valid, np.int64)
        return Stream(name, ins)

    def streams(self, suite: str, count: int | None, rng) -> list[Stream]:
        b = self.block_size
        named = {**corner_blocks(b, rng), **self.extra_corners(rng)}
        out = [self._stream(name, blocks) for name, blocks in named.items()]
        if suite == "random":
            n = DEFAULT_RANDOM_BLOCKS if count is None else count
            n = max(0, n - sum(len(s) for s in out))
            if n:
                for kind, blocks in random_blocks(n, b, rng).items():
                    valid = (np.arange(len(blocks)) % BUBBLE_EVERY) != BUBBLE_EVERY - 1
                    out.append(self._stream(f"random {kind}", blocks, valid))
        return out

    def vectors(self, suite: str, *, lanes: int, count: int | None,
                rng: np.random.Generator) -> Vectors:
        self.check_suite(suite)
        streams = self.streams(suite, count, rng)
        inputs, mask, labels, names, _ = pack_streams(streams, lanes)
        b = self.block_size
        x = np.stack([inputs[p] for p in _x_ports(b)], axis=-1)          # (cycles, lanes, B)
        flat = x.reshape(-1, b).astype(np.uint16).view(np.float16)
        se, dialect, codes = self.golden(flat)
        shape = mask.shape
        expected = {"out_valid": inputs["valid"].copy(), "se": se.reshape(shape),
                    "dialect": dialect.reshape(shape)}
        codes = codes.reshape(*shape, b)
        for j, p in enumerate(_code_ports(b)):
            expected[p] = codes[..., j]
        hit = np.bincount(dialect.reshape(shape)[mask & (inputs["valid"] == 1)],
                          minlength=N_DIALECTS)
        if self.holds:
            _hold_outputs(expected, inputs["valid"] == 1)
        return Vectors(inputs, expected, mask, labels=labels, label_names=names,
                       notes={"dialects_hit": hit.tolist(), "streams": names})

    def workload_vectors(self, workload, cycles: int, rng, reuse=None) -> dict[str, np.ndarray]:
        """Stimulus of a real layer: its activation blocks (FP16, consecutive
        ``block_size`` slices of each token's row), one entering every ``reuse`` cycles
        (default: the layer's output width, as one block serves every weight row) with
        ``valid`` on that cycle and the inputs held in between. ``{port: (cycles,)}``."""
        b = self.block_size
        r = workload.default_reuse if reuse in (None, 0) else int(reuse)
        r = max(r, getattr(self, "rounds", 1))
        blocks = workload.activations.reshape(-1, b).astype(np.float16)
        n = -(-cycles // r)
        blocks = blocks[np.arange(n) % len(blocks)]
        bits = blocks.view(np.uint16).astype(np.int64)
        idx = np.arange(cycles) // r
        out = {p: bits[idx, j] for j, p in enumerate(_x_ports(b))}
        out["valid"] = (np.arange(cycles) % r == 0).astype(np.int64)
        return out

    def describe(self, vectors: Vectors, mismatch: Mismatch, got) -> str:
        c, l = mismatch.cycle, mismatch.lane
        b = self.block_size
        bits = np.array([[vectors.inputs[p][c, l] for p in _x_ports(b)]], np.int64)
        x = bits.astype(np.uint16).view(np.float16)
        se, mt, _ = preprocess(x)
        pair = stage1_pair(mt.max(axis=1))
        ce, co = stage2_counts(mt, pair)
        diff = [p for p in vectors.expected if int(vectors.expected[p][c, l]) != int(got[p][c, l])]
        shown = ", ".join(f"{p}: expected {int(vectors.expected[p][c, l])} got "
                          f"{int(got[p][c, l])}" for p in diff[:6])
        lab = vectors.label(c, l)
        return (f"cycle {c} lane {l}{' [' + lab + ']' if lab else ''}: x={x[0].tolist()} "
                f"(se field {int(se[0])}, Mag_trunc {mt[0].tolist()}, pair {int(pair[0])}, "
                f"counts even/odd {int(ce[0])}/{int(co[0])}) -> {shown}"
                + (f" (+{len(diff) - 6} more fields)" if len(diff) > 6 else ""))


class QuantizerBench(_BlockBench):
    """Vectors of :class:`mactile.rtl.dialect.quantizer.DialectQuantizer`; takes its
    parameters (``registers`` only changes the latency, read from the component)."""

    def __init__(self, *, block_size: int = 32, count_tie: str = "even", registers=None,
                 clock_gating: bool = False):
        super().__init__(block_size=block_size)
        self.count_tie = CountTie(count_tie)
        self.holds = clock_gating

    def golden(self, x16):
        return golden_two_stage(x16, self.count_tie)


class MseSelectorBench(_BlockBench):
    """Vectors of :class:`mactile.rtl.dialect.mse.DialectMseSelector` against
    :func:`mactile.golden.dialect_mse.quantize_fixed_mse`."""

    def __init__(self, *, block_size: int = 32, frac_bits: int = 6, err_frac_bits: int = 6,
                 registers=None, dialects_per_cycle: int = 16, clock_gating: bool = False):
        super().__init__(block_size=block_size)
        self.spec = MseFixedPoint(frac_bits=frac_bits, err_frac_bits=err_frac_bits)
        self.rounds = N_DIALECTS // dialects_per_cycle
        self.holds = clock_gating or self.rounds > 1

    def streams(self, suite, count, rng):
        """With rounds, every block is followed by ``rounds - 1`` bubbles carrying random
        blocks (the unit takes a block every ``rounds`` cycles)."""
        out = super().streams(suite, count, rng)
        if self.rounds == 1:
            return out
        spaced = []
        for st in out:
            n = len(st.inputs["valid"])
            idx = np.repeat(np.arange(n), self.rounds)
            first = np.tile(np.arange(self.rounds) == 0, n)
            ins = {}
            for p, v in st.inputs.items():
                v = np.asarray(v)[idx]
                if p == "valid":
                    v = np.where(first, v, 0)
                else:
                    v = np.where(first, v, rng.integers(0, 0x7C00, len(v)))
                ins[p] = v
            spaced.append(Stream(st.name, ins))
        return spaced

    def golden(self, x16):
        se, dialect, codes, _ = quantize_fixed_mse(x16, self.spec)
        return se, dialect, codes

    def extra_corners(self, rng):
        return mse_corner_blocks(self.block_size, rng)


class DequantizerBench(Bench):
    """Vectors of :class:`mactile.rtl.dialect.dequantizer.DialectDequantizer`."""

    suites = ("exhaustive", "random")
    fixed_suites = ("exhaustive",)

    def __init__(self, *, block_size: int = 32, registered: bool = True,
                 clock_gating: bool = False):
        self.block_size = block_size
        self.holds = clock_gating

    def workload_vectors(self, workload, cycles: int, rng, reuse=None) -> dict[str, np.ndarray]:
        """Stimulus of a real layer: its weight blocks quantized by the golden DialectFP4
        MSE selection (as pre-quantized weights are), one block per cycle (the dequantizer
        feeds the MACs a new weight block every cycle). ``{port: (cycles,)}``."""
        from mactile.golden.dialect import DialectFP4, DialectSelect

        b = self.block_size
        blocks = workload.weights.reshape(-1, b)[:cycles]
        blocks = blocks[np.arange(cycles) % len(blocks)]
        q = DialectFP4(block_size=b, select=DialectSelect.MSE).quantize(blocks)
        codes = q.codes.reshape(cycles, b)
        out = {f"codes__{j}": codes[:, j].astype(np.int64) for j in range(b)}
        out["dialect"] = q.meta.reshape(cycles).astype(np.int64)
        out["valid"] = np.ones(cycles, np.int64)
        return out

    @staticmethod
    def golden(codes: np.ndarray, dialect: np.ndarray) -> np.ndarray:
        """``sign << 4 | q`` per element (codes ``(n, B)``, dialect ``(n,)``)."""
        codes = np.asarray(codes, np.int64)
        q = FORMATBOOK[np.asarray(dialect, np.int64)[:, None], codes & 7]
        return ((codes >> 3) << 4) | q

    def vectors(self, suite: str, *, lanes: int, count: int | None,
                rng: np.random.Generator) -> Vectors:
        self.check_suite(suite)
        b = self.block_size
        n_codes = 1 << 4
        if suite == "exhaustive":
            # Block k of dialect d holds code (j + k) mod 16 at position j: over k = 0..15
            # every code visits every position; then the same blocks as bubbles.
            d, k = np.indices((N_DIALECTS, n_codes)).reshape(2, -1)
            codes = (np.arange(b)[None, :] + k[:, None]) % n_codes
            valid = np.ones(len(d), np.int64)
            d = np.r_[d, d]
            codes = np.r_[codes, codes]
            valid = np.r_[valid, np.zeros_like(valid)]
        else:
            n = count or 4096
            d = rng.integers(0, N_DIALECTS, n)
            codes = rng.integers(0, n_codes, (n, b))
            valid = (rng.random(n) > 0.1).astype(np.int64)
        per = -(-len(d) // lanes)
        streams = []
        for lo in range(0, len(d), per):
            sl = slice(lo, lo + per)
            ins = {"valid": valid[sl], "dialect": d[sl]}
            ins.update({f"codes__{j}": codes[sl, j] for j in range(b)})
            streams.append(Stream(suite, ins))
        inputs, mask, labels, names, _ = pack_streams(streams, lanes)
        cod = np.stack([inputs[f"codes__{j}"] for j in range(b)], axis=-1)
        vals = self.golden(cod.reshape(-1, b), inputs["dialect"].reshape(-1))
        vals = vals.reshape(*mask.shape, b)
        expected = {"out_valid": inputs["valid"].copy()}
        expected.update({f"values__{j}": vals[..., j] for j in range(b)})
        if self.holds:  # clock gating: the output registers load only with a valid block
            _hold_outputs(expected, inputs["valid"] == 1)
        return Vectors(inputs, expected, mask, labels=labels, label_names=names)


class ChainBench(Bench):
    """Vectors of :class:`mactile.rtl.dialect.chain.DialectChain`: the golden two-stage
    quantizer, then the golden MAC datapath (:class:`mactile.golden.mac.MacDatapath`)
    on its codes and the weight block's.

    Suite ``random`` (default): ``count`` blocks (default 512), each followed by
    ``block_size - 1`` bubble cycles carrying random garbage: activations from the corner
    and random blocks of :mod:`.dialect_blocks`; weights quantized by the golden
    ``dialectfp4`` MSE selection from Gaussian data (two thirds) or uniformly random codes,
    dialect ids and exponent fields (one third). Every cycle is checked: ``out_valid`` is 1
    exactly ``latency`` cycles after a block, when ``acc``/``exp`` hold its dot product;
    on the other cycles ``acc``/``exp`` are the MAC's running values (partial sums of the
    next block, or held), modelled cycle by cycle.
    """

    suites = ("random",)

    def __init__(self, *, block_size: int = 32, registers=None, mac: dict | None = None):
        from mactile.golden.mac import MacDatapath
        from mactile.rtl.registry import get_design

        self.block_size = block_size
        mac = dict(get_design("mac-dialectfp4-decode").params) if mac is None else mac
        self.dp = MacDatapath(a_format=mac["a_format"], w_format=mac["w_format"],
                              terms=mac["terms"], multiplier=mac["multiplier"])
        self._registers = registers

    def _latencies(self):
        """(quantizer latency, chain latency), from the same components the DUT uses."""
        from mactile.rtl.dialect.common import parse_registers
        from mactile.rtl.dialect.quantizer import QUANTIZER_BOUNDARIES
        regs = QUANTIZER_BOUNDARIES if self._registers is None else self._registers
        lq = len(parse_registers("ChainBench", regs, QUANTIZER_BOUNDARIES))
        return lq, lq + 2 + self.block_size

    def _weights(self, n: int, rng):
        from mactile.golden.dialect import DialectFP4, DialectSelect
        b = self.block_size
        k = (2 * n) // 3
        q = DialectFP4(block_size=b, select=DialectSelect.MSE).quantize(
            rng.standard_normal((k, b)) * np.exp2(rng.uniform(-8, 8, (k, 1))))
        codes = np.r_[q.codes.reshape(k, b), rng.integers(0, 16, (n - k, b))]
        dialect = np.r_[q.meta.reshape(k), rng.integers(0, N_DIALECTS, n - k)]
        se = np.r_[q.scales.reshape(k), rng.integers(0, 32, n - k)]
        return codes.astype(np.int64), dialect.astype(np.int64), se.astype(np.int64)

    def vectors(self, suite: str, *, lanes: int, count: int | None,
                rng: np.random.Generator) -> Vectors:
        self.check_suite(suite)
        b = self.block_size
        n = count or 512
        blocks = np.concatenate([*corner_blocks(b, rng).values(),
                                 *random_blocks(n, b, rng).values()])[:n]
        n = len(blocks)
        w, wd, wse = self._weights(n, rng)
        xb = blocks.view(np.uint16).astype(np.int64)
        per = -(-n // lanes)
        streams = []
        for lo in range(0, n, per):
            m = len(xb[lo:lo + per])
            t = m * b
            first = np.arange(t) % b == 0
            garbage = rng.integers(0, FP16.exp_mask, (t, b))
            x = garbage.copy()
            x[first] = xb[lo:lo + m]
            ins = {"valid": first.astype(np.int64)}
            ins.update({f"x__{j}": x[:, j] for j in range(b)})
            wg = rng.integers(0, 16, (t, b))
            wg[first] = w[lo:lo + m]
            ins.update({f"w__{j}": wg[:, j] for j in range(b)})
            for port, v, hi in (("w_dialect", wd, N_DIALECTS), ("w_se", wse, 32)):
                g = rng.integers(0, hi, t)
                g[first] = v[lo:lo + m]
                ins[port] = g
            streams.append(Stream("blocks", ins))
        inputs, mask, labels, names, _ = pack_streams(streams, lanes)
        expected = self._expected(inputs)
        mask = np.ones_like(mask)            # every cycle is modelled, padding included
        return Vectors(inputs, expected, mask, count=n, labels=labels, label_names=names,
                       notes={"blocks": n})

    def _expected(self, inputs):
        """Cycle-by-cycle model of the chain's outputs (see the class docstring)."""
        b = self.block_size
        lq, lat = self._latencies()
        cycles, lanes = inputs["valid"].shape
        horizon = cycles + lat
        prod = np.zeros((horizon, lanes), np.int64)
        valid = np.zeros((horizon, lanes), bool)
        clear = np.zeros((horizon, lanes), bool)
        exp_in = np.zeros((horizon, lanes), np.int64)
        x = np.stack([inputs[f"x__{j}"] for j in range(b)], -1)
        w = np.stack([inputs[f"w__{j}"] for j in range(b)], -1)
        start = lq + 2                       # the MAC cycle of a block's first term
        for c, lane in zip(*np.nonzero(inputs["valid"] == 1)):
            x16 = x[c, lane][None].astype(np.uint16).view(np.float16)
            se, dialect, codes = golden_two_stage(x16)
            p = self.dp.product(codes[0], w[c, lane], a_dialect=dialect[0],
                                w_dialect=inputs["w_dialect"][c, lane])
            t0 = c + start
            prod[t0:t0 + b, lane] = p
            valid[t0:t0 + b, lane] = True
            clear[t0, lane] = True
            exp_in[t0:t0 + b, lane] = self.dp.block_end(se[0], inputs["w_se"][c, lane])
        acc_after = self.dp.accumulate(prod, valid=valid, clear=clear)   # after each cycle
        # exp register: loads on valid terms, holds otherwise, 0 after reset.
        idx = np.maximum.accumulate(np.where(valid, np.arange(horizon)[:, None], -1), axis=0)
        exp_after = np.where(idx >= 0, np.take_along_axis(exp_in, np.maximum(idx, 0), 0), 0)
        # The output seen `lat` cycles after input cycle k is the register after cycle k+lat-1.
        k = np.arange(cycles) + lat - 1
        return {"out_valid": inputs["valid"].copy(), "acc": acc_after[k],
                "exp": exp_after[k]}
