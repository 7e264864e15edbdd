"""Clock gating in the flow: the library's integrated clock-gate cell, and its model for
the equivalence proof.

A design built with ``clock_gating=True`` holds its long-lived registers under an enable
(``with m.If(valid)``). Synthesis (``scripts/synth.ys``) then runs Yosys' ``clockgate``
pass before the flip-flops are mapped: every group of enable flip-flops sharing a clock
and an enable loses its enable multiplexer and is clocked by one integrated clock-gate
cell (ICG: a latch that is open while the clock is low holds the enable, ANDed with the
clock), chosen by :func:`pick_clock_gate`.

The equivalence proof (:mod:`mactile.synth.equivalence`) cuts every flip-flop into its
value and its next state and ignores clocks, so it cannot see a gated clock. The netlist
it proves is therefore the synthesized netlist with each ICG *modelled* by
:func:`model_clock_gates`: every flip-flop clocked by an ICG's output is clocked by the
ICG's clock and its D pin reads ``enable ? D : Q`` (``enable`` the ICG's enable, ORed with
its test pin where it has one). That is what the cell does at a rising clock edge in a
zero-delay view (the flip-flop sees an edge exactly when the latched enable is 1), so the
proof covers everything but the cell itself: that the library's ICG gates glitch-free
and that the enable meets the ICG's setup check (OpenSTA's timing report covers the
latter as a clock-gating check).
"""
from __future__ import annotations

import re

from .libraries import ClockGateCell, FlopPins, Library, clock_gate_cells, flop_pins
from .tools import ToolError

__all__ = ["pick_clock_gate", "clockgate_command", "model_clock_gates"]


def pick_clock_gate(lib: Library) -> ClockGateCell:
    """The ICG the flow uses on ``lib``: the smallest without a test pin, else the
    smallest with one (its test pin tied low).

    Raises
    ------
    ToolError
        The library has no integrated clock-gate cell (osu018): the flow does not build
        one from a latch and an AND gate, since neither its gate-level simulation nor
        its timing would then be the library's own.
    """
    cells = clock_gate_cells(lib)
    if not cells:
        raise ToolError(f"{lib.name}: the library has no integrated clock-gate cell "
                        "(clock_gating=true needs one: nangate45 and sky130 have them)")
    return min(cells.values(), key=lambda c: (c.test is not None, c.area, c.name))


def clockgate_command(lib: Library) -> str:
    """The Yosys ``clockgate`` command for ``lib`` (positive-edge flip-flops only; the
    designs have no other)."""
    c = pick_clock_gate(lib)
    cmd = f"clockgate -pos {c.name} {c.enable}:{c.clock}:{c.out}"
    return cmd + (f" -tie_lo {c.test}" if c.test else "")


_INST = re.compile(r"^\s*(\\?[\w$]+)\s+(\\?\S+)\s*\((.*?)\);\s*$", re.M | re.S)
_PIN = re.compile(r"\.(\w+)\(([^()]*)\)")


def _pins(body: str) -> dict[str, str]:
    return {p: n.strip() for p, n in _PIN.findall(body)}


def model_clock_gates(netlist: str, icgs: dict[str, ClockGateCell],
                      flops: dict[str, FlopPins]) -> tuple[str, int]:
    """The netlist with every ICG replaced by the enable it implements (module doc).

    Parameters
    ----------
    netlist : str
        Flat Verilog netlist as ``scripts/synth.ys`` writes it.
    icgs, flops : dict
        The library's clock-gate and plain flip-flop cells.

    Returns
    -------
    (str, int)
        The modelled netlist and the number of ICG instances modelled.

    Raises
    ------
    ToolError
        A gated clock drives something other than a plain flip-flop's clock pin, or an
        ICG's clock pin is itself gated.
    """
    gates = {}   # gated clock net -> (clock net, enable expression)
    spans = []   # text spans of the ICG instances (removed)
    for m in _INST.finditer(netlist):
        cell = icgs.get(m.group(1))
        if cell is None:
            continue
        pins = _pins(m.group(3))
        en = pins.get(cell.enable, "1'h0")
        if cell.test and pins.get(cell.test, "1'h0") not in ("1'h0", "1'b0", ""):
            en = f"({en} | {pins[cell.test]})"
        gates[pins[cell.out]] = (pins[cell.clock], en)
        spans.append(m.span())
    if not gates:
        return netlist, 0
    for gck, (clk, _en) in gates.items():
        if clk in gates:
            raise ToolError(f"clock-gate model: the clock of gated net {gck} is gated itself")
    out, pos, extra, k = [], 0, [], 0
    for m in _INST.finditer(netlist):
        if m.span() in spans:
            out.append(netlist[pos:m.start()])
            pos = m.end()
            continue
        pins = _pins(m.group(3))
        on_gate = [p for p, n in pins.items() if n in gates]
        if not on_gate:
            continue
        ff = flops.get(m.group(1))
        if ff is None or on_gate != [ff.clock]:
            raise ToolError(f"clock-gate model: gated clock {pins[on_gate[0]]} reaches "
                            f"{m.group(1)} {m.group(2)} pin {on_gate[0]}, not a plain "
                            "flip-flop's clock pin")
        clk, en = gates[pins[ff.clock]]
        body = m.group(3)
        q = pins.get(ff.q) if ff.q else None
        if not q:  # only the complement is read: give Q a net of its own
            q = f"_mactile_cg_q{k}_"
            extra.append(f"  wire {q};\n")
            if ff.q is None:
                q = f"~{pins[ff.qn]}"
            else:
                body = re.sub(rf"\.{ff.q}\(\s*\)", "", body)
                body = body.rstrip() + f",\n    .{ff.q}({q})"
        d, data = f"_mactile_cg_d{k}_", pins.get(ff.d) or "1'h0"
        extra.append(f"  wire {d};\n  assign {d} = {en} ? {data} : {q};\n")
        body = re.sub(rf"\.{ff.clock}\([^()]*\)", f".{ff.clock}({clk})", body)
        body = re.sub(rf"\.{ff.d}\([^()]*\)", f".{ff.d}({d})", body)
        out.append(netlist[pos:m.start(3)] + body + netlist[m.end(3):m.end()])
        pos = m.end()
        k += 1
    out.append(netlist[pos:])
    text = "".join(out)
    end = text.rfind("endmodule")
    text = text[:end] + "".join(extra) + text[end:]
    return text, len(gates)
