"""``dialect-mse-selector``: the MSE-based dialect selector of BlockDialect's Table 7.

Source: 001_eabebf91b09c2719.txt Sec. 4.3 ("Resource Overhead of Real-time MSE
Calculation", Table 7). Same ports as ``dialect-quantizer``; the dialect is the one with
the smallest truncated fixed-point squared error over all 16 dialects. Bit-exact with
:func:`mactile.golden.dialect_mse.quantize_fixed_mse` (widths and truncation there).
"""
from __future__ import annotations

import math

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring

from mactile.golden.dialect import FORMATBOOK, N_DIALECTS
from mactile.golden.dialect_mse import MseFixedPoint

from .common import (NamedSignals, Pipeline, PipelinedBlockUnit, RangeCheckQuantizer, RangeLogic,
                     block_quantizer_ports, check_clock_gating, truncation_waivers, align,
                     check_block_size, max_tree,
                     named, parse_registers, split_fp16, sum_tree, wire)
from .logic import quantize_ranges

__all__ = ["DialectMseSelector", "MSE_BOUNDARIES", "ROUND_BOUNDARIES"]

#: Stage boundaries in datapath order; the default registers all eight (the paper's
#: MSE latency, Table 7): exponent max, alignment to fixed point, per-dialect
#: quantization error, squares, the first and second half of the 16 adder trees, the
#: argmin tree, the output quantization.
MSE_BOUNDARIES = ("exp_max", "align", "error", "square", "sum_a", "sum_b", "argmin",
                  "quantize")


#: The registers of the round-based organisation (``dialects_per_cycle`` < 16), fixed:
#: exponent max, the held block (loaded once per block), then per round the errors, the
#: squares and the summed errors, the running argmin, the output quantization. Latency
#: ``rounds + 6`` (8 at two rounds, the paper's MSE latency).
ROUND_BOUNDARIES = ("exp_max", "hold", "error", "square", "sum", "argmin", "quantize")


def _argmin_pair(m: Module, errors: list[Value], ids: list[Value], name: str):
    """(smallest error, its id), ties to the earlier list position."""
    level = list(zip(errors, ids))
    depth = 0
    while len(level) > 1:
        nxt = []
        for k, ((ea, ia), (eb, ib)) in enumerate(zip(level[0::2], level[1::2])):
            left = wire(m, ea <= eb, f"{name}_l{depth}_{k}_left")
            nxt.append((wire(m, Mux(left, ea, eb), f"{name}_l{depth}_{k}_err"),
                        wire(m, Mux(left, ia, ib), f"{name}_l{depth}_{k}_id")))
        if len(level) % 2:
            nxt.append(level[-1])
        level, depth = nxt, depth + 1
    return level[0]


def _argmin(m: Module, errors: list[Value]) -> Value:
    """Index of the smallest value, ties to the lower index: a compare-select tree whose
    left operand always holds the lower indices and wins ties."""
    width = (len(errors) - 1).bit_length()
    return _argmin_pair(m, errors, [Const(i, width) for i in range(len(errors))], "argmin")[1]


class DialectMseSelector(PipelinedBlockUnit, NamedSignals, wiring.Component):
    """FP16 block -> (shared exponent field, dialect id by fixed-point MSE, codes).

    Parameters
    ----------
    block_size : {16, 32, 64}
    frac_bits : int
        F: fraction bits of the truncated scaled magnitude (default 6).
    err_frac_bits : int
        G: fraction bits kept of each squared error (default 6).
    registers : sequence of str or str
        Registered boundaries of :data:`MSE_BOUNDARIES` (default all: latency 8); only
        for the fully parallel organisation (``dialects_per_cycle`` 16).
    dialects_per_cycle : {1, 2, 4, 8, 16}
        Organisation. 16: every dialect's error in parallel, a new block every cycle.
        Fewer: the paper's "16 rounds (per dialect) of quantization" done
        ``dialects_per_cycle`` at a time over ``16 / dialects_per_cycle`` rounds on a
        held block, with a running argmin (ties to the lower dialect, as the golden
        model); a new block every ``rounds`` cycles, registers
        :data:`ROUND_BOUNDARIES`, latency ``rounds + 6``.
    clock_gating : bool
        Pipeline registers load only with valid data (enable registers, integrated
        clock-gate cells after synthesis), as the held block, the running argmin and the
        outputs of the round organisation already do. Default False. In the fully
        parallel organisation the outputs then hold the last valid block's result
        between ``out_valid`` pulses, as with rounds.

    Ports are those of :class:`~mactile.rtl.dialect.quantizer.DialectQuantizer`. With
    rounds, blocks must come at least ``rounds`` cycles apart (the bench keeps to that;
    the unit does not check it), and ``se``/``dialect``/``codes`` hold the last result
    between ``out_valid`` pulses.
    """

    #: Verilator builds this gate-level netlist's C++ at -O0: the default -Os compile takes
    #: minutes (measured: 9 min vs 33 s for the MSE selector) while a simulation lasts seconds.
    sim_cxx_opt = "-O0"

    def __init__(self, *, block_size: int = 32, frac_bits: int = 6, err_frac_bits: int = 6,
                 registers=MSE_BOUNDARIES, dialects_per_cycle: int = 16,
                 clock_gating: bool = False):
        owner = type(self).__name__
        self.clock_gating = check_clock_gating(owner, clock_gating)
        self.block_size = check_block_size(owner, block_size)
        try:
            self.spec = MseFixedPoint(frac_bits=frac_bits, err_frac_bits=err_frac_bits)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{owner}: {e}") from None
        if (not isinstance(dialects_per_cycle, int) or isinstance(dialects_per_cycle, bool)
                or dialects_per_cycle not in (1, 2, 4, 8, 16)):
            raise ValueError(f"{owner}: dialects_per_cycle must be one of 1, 2, 4, 8, 16 "
                             f"(a divisor of {N_DIALECTS}), got {dialects_per_cycle!r}")
        self.dialects_per_cycle = dialects_per_cycle
        self.rounds = N_DIALECTS // dialects_per_cycle
        if self.rounds > 1:
            self.registers = ROUND_BOUNDARIES
        else:
            self.registers = parse_registers(owner, registers, MSE_BOUNDARIES)
        super().__init__(block_quantizer_ports(block_size))

    @property
    def latency(self) -> int:
        """Cycles from a block on the inputs to its result on the outputs."""
        return len(self.registers) + self.rounds - 1

    @property
    def throughput(self) -> float:
        """Blocks accepted per cycle."""
        return 1.0 / self.rounds

    @property
    def lint_waivers(self):
        """Documented lint waivers of this design (read by ``mactile generate``)."""
        return truncation_waivers(
            8 - self.spec.frac_bits,
            f"the MSE selector truncates each scaled magnitude to 3.{self.spec.frac_bits} fixed "
            "point: FP16 mantissa bits below that never matter")

    @property
    def module_name(self) -> str:
        """Verilog module name (parameters in the name)."""
        s = self.spec
        dpc = f"_d{self.dialects_per_cycle}" if self.rounds > 1 else ""
        return (f"dialect_mse_b{self.block_size}_f{s.frac_bits}g{s.err_frac_bits}{dpc}"
                f"_l{self.latency}" + ("_cg" if self.clock_gating else ""))

    def _front_end(self, m, pipe):
        """Both organisations' first stages: the block's shared exponent (max tree), then
        every magnitude in fixed point 3.F, truncated (the paper's "convert into fixed-point
        ... truncate"). Returns (valid, fields after the ``exp_max`` boundary, magnitudes)."""
        fields = [split_fp16(self.x[i]) for i in range(self.block_size)]
        se = max_tree(m, [ef for _, ef, _ in fields], "se_max")
        v, s = pipe.boundary("exp_max", self.valid, se=se,
                             sign=[x[0] for x in fields], ef=[x[1] for x in fields],
                             sig=[x[2][-self.spec.mag_bits:] for x in fields])
        mag = [align(m, sig, ef, s["se"], self.spec.frac_bits, f"mag_fx_{j}")
               for j, (sig, ef) in enumerate(zip(s["sig"], s["ef"]))]
        return v, s, mag

    def elaborate(self, platform):
        if self.rounds > 1:
            return self._elaborate_rounds()
        m = Module()
        pipe = Pipeline(m, self.registers, gated=self.clock_gating)
        n, f, g = self.block_size, self.spec.frac_bits, self.spec.err_frac_bits

        v, s, mag = self._front_end(m, pipe)
        v, s = pipe.boundary("align", v, se=s["se"], sign=s["sign"], mag=mag)
        # Mag_trunc for the range checks: decision thresholds lie on the 0.25 grid.
        trunc = [mg[f - 2:] for mg in s["mag"]]

        # 16 rounds of quantization, in parallel: |mag - q_d(mag)| for every dialect.
        # A range check shared by several dialects is built once per element.
        logic = [RangeLogic(m, t, f"m{j}") for j, t in enumerate(trunc)]
        errs = []   # errs[d][j]
        for d in range(N_DIALECTS):
            row = []
            for j in range(n):
                terms = []
                for i, rng in enumerate(quantize_ranges(d)):
                    terms.append((i, logic[j].in_range(*rng)))
                # The quantized value (half units), bit by bit from the one-hot hits.
                q = Cat(*(Cat(*(h for i, h in terms if int(FORMATBOOK[d][i]) >> b & 1)).any()
                          for b in range(4)))
                diff = wire(m, s["mag"][j] - (q << (f - 1)), f"diff_d{d}_{j}")
                row.append(Mux(diff < 0, -diff, diff)[:self.spec.abs_err_bits])
            errs.append(row)
        v, s = pipe.boundary("error", v, se=s["se"], sign=s["sign"], trunc=trunc,
                             **{f"e{d}": errs[d] for d in range(N_DIALECTS)})

        sq = {f"q{d}": [((e * e) >> (2 * f - g))[:self.spec.sq_bits] for e in s[f"e{d}"]]
              for d in range(N_DIALECTS)}
        v, s = pipe.boundary("square", v, se=s["se"], sign=s["sign"], trunc=s["trunc"], **sq)

        levels = int(math.log2(n))
        half = (levels + 1) // 2
        part = {f"p{d}": sum_tree(m, s[f"q{d}"], f"sum_d{d}", levels=half)
                for d in range(N_DIALECTS)}
        v, s = pipe.boundary("sum_a", v, se=s["se"], sign=s["sign"], trunc=s["trunc"], **part)
        tot = [sum_tree(m, s[f"p{d}"], f"sum_d{d}_b")[0] for d in range(N_DIALECTS)]
        v, s = pipe.boundary("sum_b", v, se=s["se"], sign=s["sign"], trunc=s["trunc"], tot=tot)

        dialect = _argmin(m, s["tot"])
        v, s = pipe.boundary("argmin", v, se=s["se"], sign=s["sign"], trunc=s["trunc"],
                             dialect=dialect)

        rq = RangeCheckQuantizer(m, s["dialect"])
        codes = [Cat(rq.index(t, f"q{j}"), sg)
                 for j, (t, sg) in enumerate(zip(s["trunc"], s["sign"]))]
        v, s = pipe.boundary("quantize", v, se=s["se"], dialect=s["dialect"], codes=codes)

        m.d.comb += [self.out_valid.eq(v), self.se.eq(s["se"]),
                     self.dialect.eq(s["dialect"])]
        m.d.comb += [self.codes[i].eq(c) for i, c in enumerate(s["codes"])]
        self._named = named(m)
        return m

    # ------------------------------------------------------------------ rounds
    @staticmethod
    def _take(first, r_err, best_err):
        """Whether this round's best replaces the running best: on the first round, or
        when strictly smaller (ties keep the earlier, lower dialect, as the golden argmin)."""
        return first | (r_err < best_err)

    def _elaborate_rounds(self):
        """``dialects_per_cycle`` dialects per cycle over ``rounds`` rounds (class doc)."""
        m = Module()
        pipe = Pipeline(m, self.registers, gated=self.clock_gating)
        n, f, g = self.block_size, self.spec.frac_bits, self.spec.err_frac_bits
        D, R = self.dialects_per_cycle, self.rounds
        rbits = max(1, (R - 1).bit_length())

        v, s, mag = self._front_end(m, pipe)

        # The held block: loaded when a block arrives, read by every round.
        h_se = Signal.like(s["se"], name="hold_se", reset_less=True)
        h_sign = [Signal(1, name=f"hold_sign_{j}", reset_less=True) for j in range(n)]
        h_mag = [Signal.like(mg, name=f"hold_mag_{j}", reset_less=True)
                 for j, mg in enumerate(mag)]
        rnd = Signal(rbits, name="round")
        busy = Signal(name="busy")
        with m.If(v):
            m.d.sync += [h_se.eq(s["se"]), rnd.eq(0), busy.eq(1)]
            m.d.sync += [h.eq(x) for h, x in zip(h_sign, s["sign"])]
            m.d.sync += [h.eq(x) for h, x in zip(h_mag, mag)]
        with m.Elif(busy):
            m.d.sync += rnd.eq(rnd + 1)
            with m.If(rnd == R - 1):
                m.d.sync += busy.eq(0)
        trunc = [mg[f - 2:] for mg in h_mag]
        first, last = wire(m, rnd == 0, "round_first"), wire(m, rnd == R - 1, "round_last")

        # One round: dialects rnd * D + k, k < D. The range checks of all 16 dialects are
        # shared per element (cheap); the round selects which quantized value each lane
        # takes, and the error arithmetic is built D times instead of 16.
        logic = [RangeLogic(m, t, f"m{j}") for j, t in enumerate(trunc)]
        errs = []
        for k in range(D):
            row = []
            for j in range(n):
                qs = []
                for r in range(R):
                    d = r * D + k
                    hits = [(i, logic[j].in_range(*rng))
                            for i, rng in enumerate(quantize_ranges(d))]
                    qs.append(Cat(*(Cat(*(h for i, h in hits if int(FORMATBOOK[d][i]) >> b & 1)).any()
                                    for b in range(4))))
                q = wire(m, Array(qs)[rnd], f"q_k{k}_{j}")
                diff = wire(m, h_mag[j] - (q << (f - 1)), f"diff_k{k}_{j}")
                row.append(Mux(diff < 0, -diff, diff)[:self.spec.abs_err_bits])
            errs.append(row)
        v, s = pipe.boundary("error", busy, se=h_se, sign=h_sign, trunc=trunc, rnd=rnd,
                             first=first, last=last, **{f"e{k}": errs[k] for k in range(D)})
        sq = {f"q{k}": [((e * e) >> (2 * f - g))[:self.spec.sq_bits] for e in s[f"e{k}"]]
              for k in range(D)}
        v, s = pipe.boundary("square", v, se=s["se"], sign=s["sign"], trunc=s["trunc"],
                             rnd=s["rnd"], first=s["first"], last=s["last"], **sq)
        tot = [sum_tree(m, s[f"q{k}"], f"sum_k{k}")[0] for k in range(D)]
        v, s = pipe.boundary("sum", v, se=s["se"], sign=s["sign"], trunc=s["trunc"],
                             rnd=s["rnd"], first=s["first"], last=s["last"], tot=tot)

        # Running argmin over the rounds (dialect order; ties keep the earlier dialect).
        ids = [wire(m, (s["rnd"] * D + k)[:4], f"round_id_{k}") for k in range(D)]
        r_err, r_id = _argmin_pair(m, s["tot"], ids, "argmin")
        best_err = Signal.like(r_err, name="best_err", reset_less=True)
        best_id = Signal(4, name="best_id", reset_less=True)
        take = wire(m, self._take(s["first"], r_err, best_err), "take_round")
        new_err = wire(m, Mux(take, r_err, best_err), "new_err")
        new_id = wire(m, Mux(take, r_id, best_id), "new_id")
        with m.If(v):
            m.d.sync += [best_err.eq(new_err), best_id.eq(new_id)]
        done = wire(m, v & s["last"], "round_done")
        v, s = pipe.boundary("argmin", done, se=s["se"], sign=s["sign"], trunc=s["trunc"],
                             dialect=new_id)

        rq = RangeCheckQuantizer(m, s["dialect"])
        codes = [Cat(rq.index(t, f"q{j}"), sg)
                 for j, (t, sg) in enumerate(zip(s["trunc"], s["sign"]))]
        # Output registers load with a result and hold it between blocks.
        o_se = Signal.like(self.se, name="out_se")
        o_d = Signal.like(self.dialect, name="out_dialect")
        o_c = [Signal.like(self.codes[j], name=f"out_codes_{j}") for j in range(n)]
        o_v = Signal(name="out_v")
        m.d.sync += o_v.eq(v)
        with m.If(v):
            m.d.sync += [o_se.eq(s["se"]), o_d.eq(s["dialect"])]
            m.d.sync += [o.eq(c) for o, c in zip(o_c, codes)]
        m.d.comb += [self.out_valid.eq(o_v), self.se.eq(o_se), self.dialect.eq(o_d)]
        m.d.comb += [self.codes[i].eq(c) for i, c in enumerate(o_c)]
        self._named = named(m)
        return m
