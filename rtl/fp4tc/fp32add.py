"""Combinational IEEE 754 binary32 adder, round to nearest even (the FP32 accumulator).

Golden: :func:`mactile.golden.tensorcore.fp32_add`. Classic single-path structure
(berkeley-hardfloat / CVFPU style stages): unpack -> order by magnitude -> align with
guard, round and sticky bits -> add or subtract -> normalise (never below the subnormal
exponent) -> round -> pack. Gradual underflow, overflow to +-Inf, canonical quiet NaN
``0x7FC00000``; an exact zero sum is +0 unless both operands are -0.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .lint import LINT_WAIVERS, STAGE_SIGNALS

from mactile.golden.tensorcore import FP32_QNAN
from mactile.golden.elements import FP32

__all__ = ["FP32Adder", "leading_zeros", "build_fp32_adder"]

_MAN, _EXP = FP32.man_bits, FP32.exp_bits
_SIG = _MAN + 1      # significand with the hidden bit
_GRS = 3             # guard, round, sticky
_W = _SIG + _GRS     # aligned working width (27)
_EMAX = (1 << _EXP) - 1


def leading_zeros(m: Module, x, *, name: str) -> Signal:
    """Number of leading zeros of ``x`` (``len(x)`` when zero), as a priority mux chain."""
    n = len(x)
    lz = Signal(range(n + 1), name=name)
    out = Const(n, lz.shape())
    for i in range(n):  # lowest bit first, so the highest set bit wins
        out = Mux(x[i], n - 1 - i, out)
    m.d.comb += lz.eq(out)
    return lz


class FP32Adder(wiring.Component):
    """``s = a + b`` in binary32 with one RNE rounding.

    Ports
    -----
    a, b : In(32)
        Operand bit patterns.
    s : Out(32)
        Sum bit pattern.
    """

    def __init__(self):
        super().__init__({"a": In(32), "b": In(32), "s": Out(32)})

    #: Documented Verilator -Wall waivers (:mod:`.lint`).
    lint_waivers = LINT_WAIVERS
    waveform_signals = STAGE_SIGNALS

    @property
    def latency(self) -> int:
        """Combinational."""
        return 0

    @property
    def module_name(self) -> str:
        return "fp32_add_rne"

    @staticmethod
    def round_up(lsb, guard, rest):
        """Round to nearest, ties to even (a subclass may change it: the tests' mutant)."""
        return guard & (rest | lsb)

    def elaborate(self, platform):
        m = Module()
        a, b = self.a, self.b

        # Order by magnitude: |x| >= |y|, so x - y never goes negative.
        swap = Signal()
        m.d.comb += swap.eq(b[:31] > a[:31])
        x, y = Signal(32, name="x"), Signal(32, name="y")
        m.d.comb += [x.eq(Mux(swap, b, a)), y.eq(Mux(swap, a, b))]
        sx, ex, fx = x[31], x[_MAN:31], x[:_MAN]
        sy, ey, fy = y[31], y[_MAN:31], y[:_MAN]

        x_nan = (ex == _EMAX) & fx.any()
        y_nan = (ey == _EMAX) & fy.any()
        x_inf = (ex == _EMAX) & ~fx.any()
        y_inf = (ey == _EMAX) & ~fy.any()

        ex_eff = Signal(_EXP, name="ex_eff")  # max(E, 1): subnormals share binade 1
        ey_eff = Signal(_EXP, name="ey_eff")
        mx = Signal(_SIG, name="mx")
        my = Signal(_SIG, name="my")
        m.d.comb += [
            ex_eff.eq(Mux(ex.any(), ex, 1)), ey_eff.eq(Mux(ey.any(), ey, 1)),
            mx.eq(Cat(fx, ex.any())), my.eq(Cat(fy, ey.any())),
        ]

        # Align y: shift right by d (capped at _W, beyond which only the sticky survives).
        d = Signal(_EXP, name="d")
        m.d.comb += d.eq(ex_eff - ey_eff)
        dc = Signal(range(_W + 1), name="d_capped")
        m.d.comb += dc.eq(Mux(d > _W, _W, d))
        wide = Signal(2 * _W, name="y_wide")
        m.d.comb += wide.eq(Cat(Const(0, _W), Const(0, _GRS), my) >> dc)
        y_al = Signal(_W, name="y_aligned")
        m.d.comb += y_al.eq(wide[_W:] | wide[:_W].any())  # sticky into the LSB

        sub = Signal()
        m.d.comb += sub.eq(sx ^ sy)
        x_al = Cat(Const(0, _GRS), mx)
        raw = Signal(_W + 1, name="raw")
        m.d.comb += raw.eq(Mux(sub, x_al - y_al, x_al + y_al))

        # Normalise to 1.xxx (bit _W-1), keeping the exponent >= 1 (subnormal results).
        lz = leading_zeros(m, raw[:_W], name="lz")
        room = Signal(_EXP, name="room")
        m.d.comb += room.eq(ex_eff - 1)
        sl = Signal(range(_W + 1), name="shl")
        m.d.comb += sl.eq(Mux(lz > room, room, lz))
        norm = Signal(_W, name="norm")
        e_n = Signal(_EXP + 1, name="e_norm")
        with m.If(raw[_W]):  # carry out: shift right once, keep the sticky
            m.d.comb += [norm.eq(Cat(raw[0] | raw[1], raw[2:_W + 1])), e_n.eq(ex_eff + 1)]
        with m.Else():
            m.d.comb += [norm.eq((raw[:_W] << sl)[:_W]), e_n.eq(ex_eff - sl)]

        # Round to nearest, ties to even, on guard | (round | sticky) and the LSB.
        lsb, guard, rest = norm[_GRS], norm[_GRS - 1], norm[:_GRS - 1].any()
        up = self.round_up(lsb, guard, rest)
        rounded = Signal(_SIG + 1, name="rounded")
        m.d.comb += rounded.eq(norm[_GRS:] + up)
        mant = Signal(_MAN, name="mant")
        e_f = Signal(_EXP + 1, name="e_final")
        with m.If(rounded[_SIG]):  # 1.111..1 rounded up to 10.000..0
            m.d.comb += [mant.eq(0), e_f.eq(e_n + 1)]
        with m.Else():
            # hidden bit clear: subnormal (exponent field 0), e_n is 1 there
            m.d.comb += [mant.eq(rounded[:_MAN]), e_f.eq(Mux(rounded[_MAN], e_n, 0))]

        zero = ~raw.any()
        finite = Signal(32, name="finite")
        with m.If(zero):
            # exact zero: -0 only for (-0) + (-0); x - x is +0 under RNE
            m.d.comb += finite.eq(Cat(Const(0, 31), sx & sy))
        with m.Elif(e_f >= _EMAX):
            m.d.comb += finite.eq(Cat(Const(0, _MAN), Const(_EMAX, _EXP), sx))
        with m.Else():
            m.d.comb += finite.eq(Cat(mant, e_f[:_EXP], sx))

        with m.If(x_nan | y_nan | (x_inf & y_inf & sub)):
            m.d.comb += self.s.eq(FP32_QNAN)
        with m.Elif(x_inf):  # |x| >= |y|, so an infinite operand is x
            m.d.comb += self.s.eq(x)
        with m.Else():
            m.d.comb += self.s.eq(finite)
        return m


def build_fp32_adder(**params) -> FP32Adder:
    """Registry builder (no parameters)."""
    if params:
        raise ValueError(f"fp32-adder takes no parameters, got {sorted(params)}")
    return FP32Adder()
