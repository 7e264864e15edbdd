"""``dialect-quantizer``: BlockDialect's on-the-fly DialectFP4 activation quantizer.

Source: 001_eabebf91b09c2719.txt Sec. 3.2-3.3, Figure 5, Table 6. Bit-exact with the golden
two-stage procedure (:func:`mactile.golden.dialect.preprocess`, ``stage1_pair``,
``stage2_counts``, ``select_two_stage``, ``quantize_index``). Pipeline split and the
logic derivation: docs/rtl-dialect.md.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module
from amaranth.lib import wiring

from mactile.golden.dialect import CountTie

from .common import (NamedSignals, Pipeline, PipelinedBlockUnit, RangeCheckQuantizer, Stage2Logic,
                     block_quantizer_ports, check_clock_gating, truncation_waivers, align,
                     check_block_size, max_tree,
                     named, parse_registers, popcount, split_fp16, stage1_pair)

__all__ = ["DialectQuantizer", "QUANTIZER_BOUNDARIES"]

#: Stage boundaries in datapath order; the default registers all five (the paper's
#: 5 cycles, Table 6): after the exponent-max tree, after alignment to ``Mag_trunc``,
#: after stage 1 (max tree + pair), after stage 2 (range logic + count trees + compare),
#: after quantization (the output register).
QUANTIZER_BOUNDARIES = ("exp_max", "align", "pair", "count", "quantize")


class DialectQuantizer(PipelinedBlockUnit, NamedSignals, wiring.Component):
    """FP16 block -> (5-bit shared exponent field, 4-bit dialect id, 4-bit codes).

    Parameters
    ----------
    block_size : {16, 32, 64}
    count_tie : {"even", "odd"}
        Stage-2 count tie (golden :class:`~mactile.golden.dialect.CountTie`, default even).
    registers : sequence of str or str
        Which stage boundaries of :data:`QUANTIZER_BOUNDARIES` get a pipeline register
        (default all: latency 5). Comma-separated in a string; ``"none"``: combinational.
    clock_gating : bool
        Each registered boundary's data loads only with a valid block (enable registers,
        one integrated clock-gate cell per boundary after synthesis; docs/rtl-dialect.md).
        Default False: every register loads every cycle. With it, ``se``/``dialect``/
        ``codes`` hold the last valid block's result between ``out_valid`` pulses (zero
        after reset) instead of carrying a bubble's result.

    Ports
    -----
    valid : In(1); x : In(16) x block_size
        A block of FP16 bit patterns (Verilog ``x__0`` .. ``x__{B-1}``).
    out_valid : Out(1); se : Out(5); dialect : Out(4); codes : Out(4) x block_size
        ``latency`` cycles later: the largest FP16 exponent field, the dialect id and
        ``sign << 3 | index`` per element. One block per cycle, no back-pressure. Inf/NaN
        inputs are outside the golden model's domain and give unspecified outputs.
    """

    #: Verilator builds this gate-level netlist's C++ at -O0: the default -Os compile takes
    #: minutes (measured: 9 min vs 33 s for the MSE selector) while a simulation lasts seconds.
    sim_cxx_opt = "-O0"

    def __init__(self, *, block_size: int = 32, count_tie: str | CountTie = "even",
                 registers=QUANTIZER_BOUNDARIES, clock_gating: bool = False):
        owner = type(self).__name__
        self.clock_gating = check_clock_gating(owner, clock_gating)
        self.block_size = check_block_size(owner, block_size)
        try:
            self.count_tie = CountTie(count_tie)
        except ValueError:
            raise ValueError(f"{owner}: count_tie must be one of "
                             f"{[c.value for c in CountTie]}, got {count_tie!r}") from None
        self.registers = parse_registers(owner, registers, QUANTIZER_BOUNDARIES)
        super().__init__(block_quantizer_ports(block_size))

    @property
    def lint_waivers(self):
        """Documented lint waivers of this design (read by ``mactile generate``)."""
        return truncation_waivers(
            6, "the quantizer truncates each element to Mag_trunc (3.2 fixed point, Figure 5a): "
               "the FP16 mantissa bits below the top four never matter")

    @property
    def module_name(self) -> str:
        """Verilog module name (parameters in the name, as berkeley-hardfloat does)."""
        return (f"dialect_quantizer_b{self.block_size}_{self.count_tie.value}_l{self.latency}"
                + ("_cg" if self.clock_gating else ""))

    def elaborate(self, platform):
        m = Module()
        pipe = Pipeline(m, self.registers, gated=self.clock_gating)
        n = self.block_size

        # Preprocessing (Figure 5a), part 1: the shared exponent = largest exponent field.
        fields = [split_fp16(self.x[i]) for i in range(n)]
        se = max_tree(m, [ef for _, ef, _ in fields], "se_max")
        v, s = pipe.boundary("exp_max", self.valid, se=se,
                             sign=[f[0] for f in fields], ef=[f[1] for f in fields],
                             sig=[f[2][-5:] for f in fields])

        # Part 2: align every significand to the shared exponent, truncate to Mag_trunc.
        mag = [align(m, sig, ef, s["se"], 2, f"mag_trunc_{j}")
               for j, (sig, ef) in enumerate(zip(s["sig"], s["ef"]))]
        v, s = pipe.boundary("align", v, se=s["se"], sign=s["sign"], mag=mag)

        # Stage 1 (Figure 5b): block max of Mag_trunc (a max tree), rounded -> pair.
        pair = stage1_pair(m, max_tree(m, s["mag"], "mag_max"))
        v, s = pipe.boundary("pair", v, se=s["se"], sign=s["sign"], mag=s["mag"], pair=pair)

        # Stage 2 (Figure 5c): beneficial-range logic per element, two count trees.
        st2 = Stage2Logic(m, s["pair"])
        flags = [st2.flags(mg, f"e{j}") for j, mg in enumerate(s["mag"])]
        c_even = popcount(m, [f[0] for f in flags], "count_even")
        c_odd = popcount(m, [f[1] for f in flags], "count_odd")
        odd = c_odd >= c_even if self.count_tie is CountTie.ODD else c_odd > c_even
        dialect = Cat(odd, s["pair"])
        v, s = pipe.boundary("count", v, se=s["se"], sign=s["sign"], mag=s["mag"],
                             dialect=dialect)

        # Quantization (Sec. 3.3): range-check logic, then sign | index.
        rq = RangeCheckQuantizer(m, s["dialect"])
        codes = [Cat(rq.index(mg, f"q{j}"), sg) for j, (mg, sg) in enumerate(zip(s["mag"], s["sign"]))]
        v, s = pipe.boundary("quantize", v, se=s["se"], dialect=s["dialect"], codes=codes)

        m.d.comb += [self.out_valid.eq(v), self.se.eq(s["se"]),
                     self.dialect.eq(s["dialect"])]
        m.d.comb += [self.codes[i].eq(c) for i, c in enumerate(s["codes"])]
        self._named = named(m)
        return m

