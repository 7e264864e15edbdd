"""``dialect-mse-selector``: the MSE-based dialect selector of BlockDialect's Table 7.

Source: 001_eabebf91b09c2719.txt Sec. 4.3 ("Resource Overhead of Real-time MSE
Calculation", Table 7). Same ports as ``dialect-quantizer``; the dialect is the one with
the smallest truncated fixed-point squared error over all 16 dialects. Bit-exact with
:func:`mactile.golden.dialect_mse.quantize_fixed_mse` (widths and truncation there).
"""
from __future__ import annotations

import math

from amaranth.hdl import Cat, Const, Module, Mux, Value
from amaranth.lib import wiring

from mactile.golden.dialect import FORMATBOOK, N_DIALECTS
from mactile.golden.dialect_mse import MseFixedPoint

from .common import (NamedSignals, Pipeline, PipelinedBlockUnit, RangeCheckQuantizer, RangeLogic,
                     block_quantizer_ports, truncation_waivers, align, check_block_size, max_tree,
                     named, parse_registers, split_fp16, sum_tree, wire)
from .logic import quantize_ranges

__all__ = ["DialectMseSelector", "MSE_BOUNDARIES"]

#: Stage boundaries in datapath order; the default registers all eight (the paper's
#: MSE latency, Table 7): exponent max, alignment to fixed point, per-dialect
#: quantization error, squares, the first and second half of the 16 adder trees, the
#: argmin tree, the output quantization.
MSE_BOUNDARIES = ("exp_max", "align", "error", "square", "sum_a", "sum_b", "argmin",
                  "quantize")


def _argmin(m: Module, errors: list[Value]) -> Value:
    """Index of the smallest value, ties to the lower index: a compare-select tree whose
    left operand always holds the lower indices and wins ties."""
    width = (len(errors) - 1).bit_length()
    level = [(e, Const(i, width)) for i, e in enumerate(errors)]
    depth = 0
    while len(level) > 1:
        nxt = []
        for k, ((ea, ia), (eb, ib)) in enumerate(zip(level[0::2], level[1::2])):
            left = wire(m, ea <= eb, f"argmin_l{depth}_{k}_left")
            nxt.append((wire(m, Mux(left, ea, eb), f"argmin_l{depth}_{k}_err"),
                        wire(m, Mux(left, ia, ib), f"argmin_l{depth}_{k}_id")))
        if len(level) % 2:
            nxt.append(level[-1])
        level, depth = nxt, depth + 1
    return level[0][1]


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
        Registered boundaries of :data:`MSE_BOUNDARIES` (default all: latency 8).

    Ports are those of :class:`~mactile.rtl.dialect.quantizer.DialectQuantizer`.
    """

    #: Verilator builds this gate-level netlist's C++ at -O0: the default -Os compile takes
    #: minutes (measured: 9 min vs 33 s for the MSE selector) while a simulation lasts seconds.
    sim_cxx_opt = "-O0"

    def __init__(self, *, block_size: int = 32, frac_bits: int = 6, err_frac_bits: int = 6,
                 registers=MSE_BOUNDARIES):
        owner = type(self).__name__
        self.block_size = check_block_size(owner, block_size)
        try:
            self.spec = MseFixedPoint(frac_bits=frac_bits, err_frac_bits=err_frac_bits)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{owner}: {e}") from None
        self.registers = parse_registers(owner, registers, MSE_BOUNDARIES)
        super().__init__(block_quantizer_ports(block_size))

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
        return (f"dialect_mse_b{self.block_size}_f{s.frac_bits}g{s.err_frac_bits}"
                f"_l{self.latency}")

    def elaborate(self, platform):
        m = Module()
        pipe = Pipeline(m, self.registers)
        n, f, g = self.block_size, self.spec.frac_bits, self.spec.err_frac_bits

        fields = [split_fp16(self.x[i]) for i in range(n)]
        se = max_tree(m, [ef for _, ef, _ in fields], "se_max")
        v, s = pipe.boundary("exp_max", self.valid, se=se,
                             sign=[x[0] for x in fields], ef=[x[1] for x in fields],
                             sig=[x[2][-self.spec.mag_bits:] for x in fields])

        # Fixed point 3.F, truncated (the paper's "convert into fixed-point ... truncate").
        mag = [align(m, sig, ef, s["se"], f, f"mag_fx_{j}")
               for j, (sig, ef) in enumerate(zip(s["sig"], s["ef"]))]
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
