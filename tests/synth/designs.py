"""Small Amaranth designs of the synthesis tests' own: the flow is tested on them
independently of the project's RTL."""
from amaranth import Module, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class RegisteredMac(wiring.Component):
    """acc <= acc + a * b when en (signed), synchronous reset."""

    def __init__(self, *, width: int = 4):
        self.width = width
        super().__init__({"a": In(signed(width)), "b": In(signed(width)), "en": In(1),
                          "acc": Out(signed(4 * width))})

    def elaborate(self, platform):
        m = Module()
        with m.If(self.en):
            m.d.sync += self.acc.eq(self.acc + self.a * self.b)
        return m


class PipelinedMul(wiring.Component):
    """Two-stage pipelined unsigned multiplier (registered operands, registered product)."""

    def __init__(self, *, width: int = 4):
        self.width = width
        super().__init__({"a": In(width), "b": In(width), "p": Out(2 * width)})

    def elaborate(self, platform):
        m = Module()
        from amaranth import Signal
        ra = Signal(self.width)
        rb = Signal(self.width)
        m.d.sync += [ra.eq(self.a), rb.eq(self.b), self.p.eq(ra * rb)]
        return m


class CombAdder(wiring.Component):
    """Purely combinational adder (no clock: timed against a virtual clock)."""

    def __init__(self, *, width: int = 4):
        super().__init__({"a": In(width), "b": In(width), "s": Out(width + 1)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.s.eq(self.a + self.b)
        return m


class ShiftedRegister(wiring.Component):
    """A register read shifted and sign-extended: output bits that are constants or copies
    of others (the netlist writer must not join them into one `assign {...} = {...}`, which
    OpenSTA's Verilog reader rejects)."""

    def __init__(self, *, width: int = 4):
        super().__init__({"x": In(width), "y": Out(width + 4)})

    def elaborate(self, platform):
        from amaranth import C, Cat, Signal
        m = Module()
        rx = Signal(len(self.x))
        m.d.sync += rx.eq(self.x)
        m.d.comb += self.y.eq(Cat(C(0, 3), rx, rx[-1]))
        return m
