"""Clock gating in the flow (mactile.synth.clockgate): the library's ICG cell inserted by
Yosys' clockgate pass, the proof through the ICG model, a broken gate caught, the gated
clock simulated, and osu018 (no ICG cell) refused."""
import re

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mactile.synth import FlowOptions, synthesize
from mactile.synth.rtl import component_rtl
from mactile.synth.tools import ToolError

pytestmark = pytest.mark.synth


class HeldRegister(wiring.Component):
    """An 8-bit register that loads ``d`` only with ``valid`` (reset-less, as the
    designs' gated registers are), and a free-running one beside it."""

    valid: In(1)
    d: In(8)
    q: Out(8)
    r: Out(8)

    def elaborate(self, platform):
        m = Module()
        held = Signal(8, reset_less=True)
        with m.If(self.valid):
            m.d.sync += held.eq(self.d)
        m.d.sync += self.r.eq(self.d ^ held)
        m.d.comb += self.q.eq(held)
        return m


def _run(lib, gated=True, **kw):
    comp = HeldRegister()
    rtl = component_rtl(comp, "t-held", params={"clock_gating": gated})
    return synthesize(rtl, lib, FlowOptions(clock_ns=2.0), component=comp, **kw)


def test_gated_register_on_nangate45(tools, nangate45):
    r = _run(nangate45)
    assert r.ok, r.equivalence
    assert r.cells_by_type.get("CLKGATE_X1") == 1
    assert "1 clock-gate cell(s) modelled as the enables they implement" in r.equivalence
    assert r.power_mw["total"] > 0
    plain = _run(nangate45, gated=False)    # the same RTL without the option: muxes, no ICG
    assert plain.ok and "CLKGATE_X1" not in plain.cells_by_type


def test_gated_clock_in_the_gate_level_simulation(tools, nangate45):
    """valid one cycle in four: the gated clock's pins run at 2 x 1/4 transitions per
    cycle, the held flip-flops change only then, the free-running ones do not care."""
    import os
    from pathlib import Path

    import numpy as np

    from mactile.synth.gatesim import simulate_netlist
    from mactile.synth.libraries import clock_gate_cells

    r = _run(nangate45)
    work = Path(r.workdir)
    rng = np.random.default_rng(1)
    n = 400
    stim = {"valid": (np.arange(n) % 4 == 0).astype(int).tolist(),
            "d": rng.integers(0, 256, n).tolist()}
    top = component_rtl(HeldRegister(), "t-held").top
    t = simulate_netlist(work, "netlist.v", os.path.relpath(nangate45.path, work), top, stim,
                         clock="clk", reset="rst", clock_gates=clock_gate_cells(nangate45))
    assert len(t.gated_pins) == 1 + 8          # the ICG's output and 8 flip-flop clocks
    assert all(t.pins[p] == pytest.approx(2 * 100 / n) for p in t.gated_pins)
    # The held flip-flops' outputs change at most once per valid cycle.
    outs = [p for p in t.pins for ck in t.gated_pins if not ck.endswith("/GCK")
            and p.startswith(ck.rsplit("/", 1)[0] + "/") and p.rsplit("/", 1)[1] in ("Q", "QN")]
    assert outs and all(0 < t.pins[q] <= 100 / (n - 1) for q in outs)


def test_a_gate_that_always_enables_is_caught(tools, nangate45):
    """The ICG's enable tied high: the held register would load every cycle."""
    def always(text):
        new, n = re.subn(r"(CLKGATE_X1 \S+ \([^;]*?\.E\()[^()]*\)", r"\g<1>1'h1)", text,
                         count=1, flags=re.S)
        assert n == 1
        return new

    r = _run(nangate45, netlist_filter=always)
    assert not r.ok and r.equivalence.startswith("failed")


def test_gated_register_on_sky130(tools, sky130):
    r = _run(sky130)
    assert r.ok and r.cells_by_type.get("sky130_fd_sc_hd__dlclkp_1") == 1


def test_osu018_has_no_clock_gate(tools, osu018):
    with pytest.raises(ToolError, match="no integrated clock-gate cell"):
        _run(osu018)
