"""``dialect-dequantizer``: DialectFP4 codes + dialect id -> 5-bit sign-magnitude integers.

Source: 001_eabebf91b09c2719.txt Sec. 3.3, Figure 6, Table 6 (1 cycle). The 3-bit index
reads a table of representable values; "most values are shared across dialects", so the
table is built per block from the dialect id once: entries that every dialect shares are
constants, the others (index 5 of dialect 15, indices 6 and 7) small muxes of the id.
Every element then picks one of the block's eight 4-bit entries.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mactile.golden.dialect import FORMATBOOK, N_DIALECTS

from .common import CODE_BITS, ID_BITS, check_block_size, check_clock_gating

__all__ = ["DialectDequantizer", "VALUE_BITS", "shared_table"]

#: Magnitude bits of a dequantized element (half units, 0..15).
MAG_BITS = int(FORMATBOOK.max()).bit_length()
#: Sign + magnitude.
VALUE_BITS = 1 + MAG_BITS


def shared_table() -> list[int | None]:
    """Per index, the half-unit value every dialect shares there, or ``None``."""
    return [int(col[0]) if (col == col[0]).all() else None for col in FORMATBOOK.T]


class DialectDequantizer(wiring.Component):
    """Codes of one block and its dialect id -> ``sign << 4 | q`` per element (value
    ``(-1)**sign * q / 2`` times the block scale), registered: latency 1.

    Parameters
    ----------
    block_size : {16, 32, 64}
    registered : bool
        Register the outputs (default; the paper's 1 cycle). ``False``: combinational.
    clock_gating : bool
        The output registers load only with a valid block (enable registers, an
        integrated clock-gate cell after synthesis) and hold the last valid block's
        values between ``out_valid`` pulses (zero at start; reset-less, as the gated
        registers must be). Default False. Only with ``registered``.

    Ports
    -----
    valid : In(1); dialect : In(4); codes : In(4) x block_size
    out_valid : Out(1); values : Out(5) x block_size
        Sign-magnitude: bit 4 the code's sign bit (so ``-0`` stays ``0b10000``), bits 3..0
        the unsigned half-unit magnitude the 4-bit multiplier takes.
    """

    def __init__(self, *, block_size: int = 32, registered: bool = True,
                 clock_gating: bool = False):
        owner = type(self).__name__
        self.clock_gating = check_clock_gating(owner, clock_gating)
        self.block_size = check_block_size(owner, block_size)
        if not isinstance(registered, bool):
            raise TypeError(f"{owner}: registered must be a bool, got {registered!r}")
        self.registered = registered
        if clock_gating and not registered:
            raise ValueError(f"{owner}: clock_gating needs registered outputs")
        super().__init__({
            "valid": In(1),
            "dialect": In(ID_BITS),
            "codes": In(CODE_BITS).array(block_size),
            "out_valid": Out(1),
            "values": Out(VALUE_BITS).array(block_size),
        })

    @property
    def latency(self) -> int:
        """Cycles from the codes to their values."""
        return int(self.registered)

    @property
    def throughput(self) -> float:
        """Blocks accepted per cycle."""
        return 1.0

    @property
    def module_name(self) -> str:
        """Verilog module name (parameters in the name)."""
        return (f"dialect_dequantizer_b{self.block_size}_l{self.latency}"
                + ("_cg" if self.clock_gating else ""))

    def elaborate(self, platform):
        m = Module()
        # The block's eight table entries: shared constants, or a lookup on the dialect id.
        entries = []
        for i, shared in enumerate(shared_table()):
            if shared is not None:
                entries.append(Const(shared, MAG_BITS))
            else:
                e = Signal(MAG_BITS, name=f"table_{i}")
                col = Array(Const(int(FORMATBOOK[d, i]), MAG_BITS) for d in range(N_DIALECTS))
                m.d.comb += e.eq(col[self.dialect])
                entries.append(e)
        table = Array(entries)
        domain = m.d.sync if self.registered else m.d.comb
        loads = []
        for j, (code, out) in enumerate(zip(self.codes, self.values)):
            idx, sign = code[:CODE_BITS - 1], code[CODE_BITS - 1]
            q = Signal(MAG_BITS, name=f"q_{j}")
            m.d.comb += q.eq(table[idx])
            loads.append(out.eq(Cat(q, sign)))
        if self.clock_gating:
            # Reset-less registers behind the ports: Yosys' clockgate pass gates enable
            # flip-flops only, not those with a synchronous reset (the ports have one).
            held = [Signal(VALUE_BITS, name=f"held_{j}", reset_less=True)
                    for j in range(self.block_size)]
            with m.If(self.valid):
                m.d.sync += [h.eq(a.rhs) for h, a in zip(held, loads)]
            m.d.comb += [out.eq(h) for out, h in zip(self.values, held)]
        else:
            domain += loads
        domain += self.out_valid.eq(self.valid)
        return m

