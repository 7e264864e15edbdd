"""Building blocks shared by the DialectFP4 quantizer, MSE selector and dequantizer.

Every constant comes from the golden model (:mod:`mactile.golden.dialect`): the
formatbook, the beneficial ranges and the FP16 field layout.
"""
from __future__ import annotations

import re

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib.wiring import In, Out

from mactile.golden.dialect import FORMATBOOK, N_DIALECTS, pair_max_half_units

from .logic import Cube, quantize_ranges, range_cubes, stage2_logic

__all__ = ["Pipeline", "parse_registers", "check_clock_gating", "check_block_size", "wire",
           "named", "eq_const",
           "max_tree", "sum_tree", "popcount", "sop", "RangeLogic", "split_fp16", "align",
           "stage1_pair", "Stage2Logic", "RangeCheckQuantizer", "NamedSignals", "BACKEND_WAIVERS",
           "BLOCK_SIZES", "SE_BITS", "ID_BITS", "CODE_BITS", "FP16_BITS", "block_quantizer_ports",
           "truncation_waivers", "PipelinedBlockUnit"]

BLOCK_SIZES = (16, 32, 64)
SE_BITS = 5                                   # the FP16 exponent field
ID_BITS = (N_DIALECTS - 1).bit_length()       # 4
CODE_BITS = 1 + (FORMATBOOK.shape[1] - 1).bit_length()  # sign + 3-bit index
_FP16_MAN = 10
FP16_BITS = 16
_FP16_EXP_MASK = (1 << SE_BITS) - 1


def check_block_size(owner: str, block_size) -> int:
    if not isinstance(block_size, int) or isinstance(block_size, bool):
        raise TypeError(f"{owner}: block_size must be an int, got {block_size!r}")
    if block_size not in BLOCK_SIZES:
        raise ValueError(f"{owner}: block_size must be one of {BLOCK_SIZES}, got {block_size}")
    return block_size


def check_clock_gating(owner: str, clock_gating) -> bool:
    """Validate the ``clock_gating`` option (a bool) of a design."""
    if not isinstance(clock_gating, bool):
        raise TypeError(f"{owner}: clock_gating must be a bool, got {clock_gating!r}")
    return clock_gating


def parse_registers(owner: str, registers, boundaries: tuple[str, ...]) -> tuple[str, ...]:
    """Validate a pipeline split: the boundaries (names from ``boundaries``) that get a
    register. Accepts a sequence of names or a comma-separated string (CLI/YAML);
    ``"none"`` or an empty string is fully combinational."""
    if isinstance(registers, str):
        names = [] if registers.strip() in ("", "none") else \
            [r.strip() for r in registers.split(",")]
    else:
        try:
            names = list(registers)
        except TypeError:
            raise TypeError(f"{owner}: registers must be a sequence of stage names, "
                            f"got {registers!r}") from None
    unknown = [n for n in names if n not in boundaries]
    if unknown:
        raise ValueError(f"{owner}: unknown pipeline boundary {unknown[0]!r}; "
                         f"known: {', '.join(boundaries)}")
    if len(set(names)) != len(names):
        raise ValueError(f"{owner}: pipeline boundary listed twice in {names}")
    return tuple(b for b in boundaries if b in names)   # datapath order


class Pipeline:
    """Named stage boundaries that are either registers or plain wires.

    ``boundary(name, valid, **values)`` passes ``valid`` (reset to 0) and every value
    (a ``Value`` or a list of them; datapath registers have no reset) through the
    boundary. With ``name`` in ``registered`` they go through flip-flops in ``sync``,
    otherwise through ``comb`` wires, so the latency is ``len(registered)``.

    With ``gated`` (the designs' ``clock_gating`` option) a registered boundary's data
    loads only when its incoming ``valid`` is 1 and holds otherwise: enable registers,
    which synthesis turns into one integrated clock-gate cell per boundary
    (docs/synthesis.md, "Clock gating"). The valid bits themselves load every cycle.
    """

    def __init__(self, m: Module, registered: tuple[str, ...], *, gated: bool = False):
        self.m, self.registered, self.gated = m, registered, gated

    def boundary(self, name: str, valid: Value, **values):
        reg = name in self.registered
        domain = self.m.d.sync if reg else self.m.d.comb
        loads = []

        def one(v, sig_name, reset_less=True, *, data=True):
            v = Value.cast(v)
            s = Signal(v.shape(), name=sig_name, reset_less=reset_less)
            if data and reg and self.gated:
                loads.append(s.eq(v))
            else:
                domain.__iadd__(s.eq(v))
            _record(self.m, sig_name)
            return s

        out_valid = one(valid, f"{name}_valid", reset_less=not reg, data=False)
        out = {}
        for key, v in values.items():
            if isinstance(v, (list, tuple)):
                out[key] = [one(x, f"{name}_{key}_{i}") for i, x in enumerate(v)]
            else:
                out[key] = one(v, f"{name}_{key}")
        if loads:
            with self.m.If(valid):
                self.m.d.sync += loads
        return out_valid, out


# ------------------------------------------------------------------ wires and trees
# Amaranth expressions are trees: a node used twice is emitted twice, so every shared
# node (tree levels, a compare used in a select) goes through a named wire.
def wire(m: Module, value, name: str) -> Signal:
    """A comb ``Signal`` driven by ``value`` (its name is recorded, see :func:`named`)."""
    value = Value.cast(value)
    s = Signal(value.shape(), name=name)
    m.d.comb += s.eq(value)
    _record(m, name)
    return s


def _record(m: Module, name: str) -> None:
    m.__dict__.setdefault("_mactile_named", []).append(name)


def named(m: Module) -> tuple[str, ...]:
    """Names of the stage and node signals built through :func:`wire` and
    :class:`Pipeline` in ``m``: Yosys's Verilog backend may leave such an alias unread
    (its readers use the expression), so they are the component's ``waveform_signals``
    (lint waivers, docs/sim.md)."""
    return tuple(m.__dict__.get("_mactile_named", ()))


def eq_const(x: Value, v: int) -> Value:
    """``x == v`` with the constant at the width of ``x`` (no width-mismatch lint)."""
    return x == Const(v, len(x))


def max_tree(m: Module, values: list[Value], name: str) -> Value:
    """Maximum of unsigned values by a balanced tree of compare-and-select nodes."""
    level, depth = list(values), 0
    while len(level) > 1:
        nxt = [wire(m, Mux(a >= b, a, b), f"{name}_l{depth}_{i}")
               for i, (a, b) in enumerate(zip(level[0::2], level[1::2]))]
        if len(level) % 2:
            nxt.append(level[-1])
        level, depth = nxt, depth + 1
    return level[0]


def sum_tree(m: Module, values: list[Value], name: str, *,
             levels: int | None = None) -> list[Value]:
    """Sum by a balanced adder tree (each node one bit wider than its inputs).

    With ``levels`` given, stops after that many levels and returns the partial sums,
    so a pipeline register can go in the middle of the tree; otherwise returns a
    one-element list.
    """
    level = [Value.cast(v) for v in values]
    done = 0
    while len(level) > 1 and (levels is None or done < levels):
        nxt = [wire(m, a + b, f"{name}_l{done}_{i}")
               for i, (a, b) in enumerate(zip(level[0::2], level[1::2]))]
        if len(level) % 2:
            nxt.append(level[-1])
        level, done = nxt, done + 1
    return level


def popcount(m: Module, bits: list[Value], name: str) -> Value:
    """Number of set bits: the reduction tree of Sec. 3.2 (a balanced adder tree)."""
    return sum_tree(m, bits, name)[0]


def sop(bits: Value, cubes: tuple[Cube, ...]) -> Value:
    """Sum of products over ``bits`` (a derived range check as gates): an OR-reduction
    of AND-reductions of literals (flat reductions keep Amaranth's expressions shallow)."""
    if not cubes:
        return Const(0, 1)
    terms = []
    for c in cubes:
        lits = [bits[i] if c.value >> i & 1 else ~bits[i]
                for i in range(len(bits)) if c.mask >> i & 1]
        terms.append(Cat(*lits).all() if lits else Const(1, 1))
    return Cat(*terms).any()


class RangeLogic:
    """Range checks on one ``Mag_trunc`` signal as derived sum-of-products logic, each
    product term and each range built once and shared by every check that uses it
    (Sec. 3.3: "eliminating redundant logical operations")."""

    def __init__(self, m: Module, bits: Value, name: str):
        self.m, self.bits, self.name = m, bits, name
        self._cubes: dict[Cube, Value] = {}
        self._ranges: dict[tuple[int, int], Value] = {}

    def cube(self, c: Cube) -> Value:
        if c not in self._cubes:
            self._cubes[c] = wire(self.m, sop(self.bits, (c,)),
                                  f"{self.name}_p{c.mask:02x}_{c.value:02x}")
        return self._cubes[c]

    def in_range(self, lo: int, hi: int) -> Value:
        """``lo <= bits < hi`` (quarter units)."""
        key = (int(lo), int(hi))
        if key not in self._ranges:
            cubes = range_cubes(*key, nbits=len(self.bits))
            v = Cat(*(self.cube(c) for c in cubes)).any() if cubes else Const(0, 1)
            self._ranges[key] = wire(self.m, v, f"{self.name}_r{key[0]}_{key[1]}")
        return self._ranges[key]


# ------------------------------------------------------------------ preprocessing
def split_fp16(x: Value):
    """(sign, exponent field, significand with its implicit bit) of an FP16 pattern."""
    man = x[:_FP16_MAN]
    ef = x[_FP16_MAN:_FP16_MAN + SE_BITS]
    sign = x[_FP16_MAN + SE_BITS]
    sig = Cat(man, ef.any())
    return sign, ef, sig


def align(m: Module, sig: Value, ef: Value, se: Value, frac_bits: int, name: str) -> Value:
    """``floor(|x| * 2**frac_bits / 2**SE)``: the top ``3 + frac_bits`` significand bits
    shifted right by ``max(SE,1) - max(ef,1)`` (Figure 5a; ``frac_bits = 2`` gives
    ``Mag_trunc``). Truncating before the shift equals truncating after it."""
    width = 3 + frac_bits
    top = sig[len(sig) - width:]
    e_se = Mux(se.any(), se, 1)
    e_el = Mux(ef.any(), ef, 1)
    d = wire(m, (e_se - e_el)[:SE_BITS], f"{name}_shift")  # >= 0: se is the largest field
    return wire(m, Mux(d >= width, 0, top >> d[:max(1, (width - 1).bit_length())]), name)


def stage1_pair(m: Module, mag_max: Value) -> Value:
    """Stage 1 (Figure 5b): round the block maximum's ``Mag_trunc`` half up at the second
    fraction bit, pick the pair whose largest value (from the formatbook) equals it;
    beyond the largest pair maximum (7.75 -> 8.0) pair 0, below the smallest pair 7."""
    r = wire(m, (mag_max + 1)[1:], "max_rounded")   # half units, 0..16
    pmax = [int(v) for v in pair_max_half_units()]
    hi_pair = max(range(len(pmax)), key=lambda k: pmax[k])
    lo_pair = min(range(len(pmax)), key=lambda k: pmax[k])
    width = (len(pmax) - 1).bit_length()
    out = Const(lo_pair, width)
    for k in sorted(range(len(pmax)), key=lambda k: pmax[k]):
        out = Mux(eq_const(r, pmax[k]), k, out)
    return wire(m, Mux(r > max(pmax), hi_pair, out), "pair")


class RangeCheckQuantizer:
    """Sec. 3.3's range-check quantization: each index of each dialect is a derived
    ``Mag_trunc`` range check; ranges common to several dialects are built once and
    gated by a per-block decode of the dialect id (built once, shared over the block)."""

    def __init__(self, m: Module, dialect: Value):
        self.m = m
        ranges = [quantize_ranges(d) for d in range(N_DIALECTS)]
        # For each index: {range: dialects using it}.
        self._by_index = []
        for i in range(FORMATBOOK.shape[1]):
            groups: dict[tuple[int, int], list[int]] = {}
            for d in range(N_DIALECTS):
                groups.setdefault(ranges[d][i], []).append(d)
            self._by_index.append(groups)
        # Block-level gates, one per (index, range) used by a strict subset of dialects.
        self._gate = {}
        for i, groups in enumerate(self._by_index):
            for rng, ds in groups.items():
                if len(ds) < N_DIALECTS and i > 0:
                    g = Cat(*(eq_const(dialect, d) for d in ds)).any()
                    self._gate[(i, rng)] = wire(m, g, f"gate_i{i}_{rng[0]}_{rng[1]}")

    def index(self, mag: Value, name: str) -> Value:
        """3-bit index of the nearest value of the block's dialect for one ``Mag_trunc``."""
        logic = RangeLogic(self.m, mag, name)
        hit = [None]   # index 0 sets no bit of the binary index: no check needed
        for i, groups in enumerate(self._by_index):
            if i == 0:
                continue
            parts = []
            for rng, ds in groups.items():
                chk = logic.in_range(*rng)
                parts.append(chk if len(ds) == N_DIALECTS else chk & self._gate[(i, rng)])
            hit.append(wire(self.m, Cat(*parts).any(), f"{name}_hit{i}"))
        # One-hot -> binary index: bit b is the OR of the hits of indices with bit b set.
        bits = [Cat(*(h for i, h in enumerate(hit) if i >> b & 1)).any()
                for b in range((len(hit) - 1).bit_length())]
        return wire(self.m, Cat(*bits), f"{name}_idx")


class Stage2Logic:
    """Figure 5c for every pair: per element, whether its ``Mag_trunc`` lies in the
    beneficial range of the selected pair's even / odd dialect. The pair decode is built
    once per block."""

    def __init__(self, m: Module, pair: Value):
        self.m = m
        self.logic = stage2_logic()
        self.sel = [wire(m, eq_const(pair, k), f"pair_is_{k}") for k in range(N_DIALECTS // 2)]

    def flags(self, mag: Value, name: str) -> tuple[Value, Value]:
        rl = RangeLogic(self.m, mag, name)
        ins = [rl.in_range(lo, hi) for (lo, hi, _) in self.logic]
        sel = Cat(*self.sel)
        even = (sel & Cat(*ins[0::2])).any()
        odd = (sel & Cat(*ins[1::2])).any()
        return wire(self.m, even, f"{name}_in_even"), wire(self.m, odd, f"{name}_in_odd")


#: Lint idioms of Yosys's Verilog backend met by these units' constant comparisons (the
#: generic ones are in mactile.rtl.verilog.AMARANTH_WAIVERS); both are correct Verilog.
BACKEND_WAIVERS = (
    ("WIDTHEXPAND", "*Operator * expects * bits on the RHS, but RHS's CONST *",
     "Yosys's Verilog backend writes constants without leading zero bits (x == 4'hf for a "
     "5-bit x); Verilog zero-extends them in context"),
    ("WIDTHTRUNC", "*Logical operator LOGNOT expects 1 bit on the LHS*",
     "Yosys's Verilog backend writes x == 0 as !x on a vector"),
    ("WIDTHEXPAND", "*Operator SUB expects * bits on the LHS, but LHS's VARREF *",
     "Amaranth widens a difference of unsigned values by a sign bit; the backend leaves the "
     "operands narrow and Verilog extends them in context"),
)


def truncation_waivers(unused_low_bits: int, reason: str) -> tuple:
    """:data:`BACKEND_WAIVERS` plus, where a unit never reads the low ``unused_low_bits``
    of its FP16 inputs ``x``, an ``UNUSEDSIGNAL`` waiver for them with ``reason``."""
    if unused_low_bits <= 0:
        return BACKEND_WAIVERS
    return BACKEND_WAIVERS + (("UNUSEDSIGNAL",
                               f"*Bits of signal are not used: 'x__*'[{unused_low_bits - 1}:0]*",
                               reason),)


def block_quantizer_ports(block_size: int) -> dict:
    """Ports of a block quantizer (two-stage or MSE): a block of FP16 words in, the shared
    exponent, the dialect id and one code per element out, each with a valid bit."""
    return {
        "valid": In(1),
        "x": In(FP16_BITS).array(block_size),
        "out_valid": Out(1),
        "se": Out(SE_BITS),
        "dialect": Out(ID_BITS),
        "codes": Out(CODE_BITS).array(block_size),
    }


class PipelinedBlockUnit:
    """Mixin for the block quantizers: one register per named boundary in
    ``self.registers``, a new block accepted every cycle."""

    @property
    def latency(self) -> int:
        """Cycles from a block on the inputs to its result on the outputs."""
        return len(self.registers)

    @property
    def throughput(self) -> float:
        """Blocks accepted per cycle (fully pipelined: one, after the fill)."""
        return 1.0


class NamedSignals:
    """Mixin: ``waveform_signals`` are the names recorded while elaborating (see
    :func:`named`); elaborates once on first use."""

    @property
    def waveform_signals(self) -> tuple[str, ...]:
        """Name patterns (element and level numbers as ``*``) of the named signals."""
        if getattr(self, "_named", None) is None:
            from amaranth.hdl import Fragment
            Fragment.get(self, None)
        return tuple(sorted({re.sub(r"\d+", "*", n) for n in self._named}))
