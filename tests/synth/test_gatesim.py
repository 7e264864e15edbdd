"""Gate-level toggle counting (mactile.synth.gatesim) and power at simulated rates
(mactile.synth.pinpower).

The simulator is checked net for net against Icarus Verilog running the same netlist with
the cell models Yosys writes from the liberty file, on each library; a simulator with one
wrong table entry fails that comparison. The per-pin power is checked against OpenSTA's
own reports at uniform activities.
"""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from designs import CombAdder, RegisteredMac
from icarus_ref import icarus_pin_toggles
from mactile.synth import ActivityOptions, FlowOptions, synthesize
from mactile.synth import gatesim
from mactile.synth.activity import uniform_stimulus
from mactile.synth.gatesim import GateSim, cell_tables
from mactile.synth.pinpower import parse_pin_energies, power_at_rates
from mactile.synth.rtl import component_rtl
from mactile.synth.tools import ToolError, find_sta, render_script, run_yosys

CYCLES = 300


def _netlist(comp, name, lib, tmp_path, clock_ns=10.0):
    """Synthesize (cached) and copy the netlist and liberty into a scratch folder."""
    rtl = component_rtl(comp, name)
    r = synthesize(rtl, lib, FlowOptions(clock_ns=clock_ns), component=comp)
    assert r.ok
    work = tmp_path / name
    work.mkdir()
    shutil.copy(Path(r.workdir) / "netlist.v", work / "netlist.v")
    shutil.copy(lib.path, work / "cells.lib")
    return rtl, r, work


def _gate_json(work, rtl):
    run_yosys(render_script("gatesim_prep.ys", liberty="cells.lib", netlist="netlist.v",
                            top=rtl.top, json="g.json"), work, "g.log")
    return json.loads((work / "g.json").read_text())


def _our_counts(doc, rtl, stim):
    res = GateSim(doc, rtl.top, clock=rtl.clock, reset=rtl.reset).run(stim)
    return {p: round(v * (res.cycles - 1)) for p, v in res.pins.items()}, res


@pytest.mark.synth
@pytest.mark.parametrize("libname", ["osu018", "nangate45", "sky130"])
def test_toggles_equal_icarus_on_every_net(tools, libname, request, tmp_path):
    if shutil.which("iverilog") is None:
        pytest.skip("Icarus Verilog not installed (Debian package iverilog)")
    lib = request.getfixturevalue(libname)
    rtl, _, work = _netlist(RegisteredMac(width=4), f"t-mac4-{libname}", lib, tmp_path)
    stim = uniform_stimulus(rtl, CYCLES, seed=5)
    ours, res = _our_counts(_gate_json(work, rtl), rtl, stim)
    ref = icarus_pin_toggles(work, "netlist.v", "cells.lib", rtl, stim)
    # Every pin Icarus sees (all but pins on constants) agrees exactly.
    assert len(ref) > 100 and set(ref) <= set(ours)
    assert {p: ours[p] for p in ref} == ref
    assert sum(1 for p in ref if ref[p] > 0) > 50
    assert res.clock_pins and {p.rsplit("/", 1)[1] for p in res.clock_pins} <= {"CLK", "CK"}


@pytest.mark.synth
def test_combinational_netlist_equals_icarus(tools, osu018, tmp_path):
    if shutil.which("iverilog") is None:
        pytest.skip("Icarus Verilog not installed (Debian package iverilog)")
    rtl, _, work = _netlist(CombAdder(width=4), "t-add4", osu018, tmp_path, clock_ns=2.0)
    stim = uniform_stimulus(rtl, CYCLES, seed=6)
    ours, _ = _our_counts(_gate_json(work, rtl), rtl, stim)
    ref = icarus_pin_toggles(work, "netlist.v", "cells.lib", rtl, stim)
    assert ref and {p: ours[p] for p in ref} == ref


@pytest.mark.synth
def test_one_wrong_table_entry_is_caught(tools, osu018, tmp_path, monkeypatch):
    # The comparison has teeth: flip one row of the NAND2 table and nets differ.
    if shutil.which("iverilog") is None:
        pytest.skip("Icarus Verilog not installed (Debian package iverilog)")
    rtl, _, work = _netlist(RegisteredMac(width=4), "t-mac4-bad", osu018, tmp_path)
    real = gatesim.cell_tables

    def broken(name, module):
        t = real(name, module)
        if name == "NAND2X1":
            support, table = t.outputs["Y"]
            bad = table.copy()
            bad[1] ^= 1
            t.outputs["Y"] = (support, bad)
        return t

    monkeypatch.setattr(gatesim, "cell_tables", broken)
    stim = uniform_stimulus(rtl, CYCLES, seed=5)
    ours, _ = _our_counts(_gate_json(work, rtl), rtl, stim)
    ref = icarus_pin_toggles(work, "netlist.v", "cells.lib", rtl, stim)
    assert sum(ours[p] != ref[p] for p in ref) > 10


@pytest.mark.synth
def test_cell_tables_from_the_liberty(tools, osu018, tmp_path):
    rtl, _, work = _netlist(RegisteredMac(width=4), "t-mac4-tables", osu018, tmp_path)
    doc = _gate_json(work, rtl)["modules"]
    nand = cell_tables("NAND2X1", doc["NAND2X1"])
    assert nand.inputs == ("A", "B") and nand.n_state == 0
    support, table = nand.outputs["Y"]
    assert support == (0, 1) and table.tolist() == [1, 1, 1, 0]   # rows: A + 2B
    ff = cell_tables("DFFPOSX1", doc["DFFPOSX1"])
    assert ff.clock == "CLK" and ff.edge == "posedge" and ff.n_state == 1
    q_support, q_table = ff.outputs["Q"]
    assert q_support == (1,) and q_table.tolist() == [0, 1]      # Q is the state, not D
    (d_support, d_table), = ff.next_state
    assert d_support == (0,) and d_table.tolist() == [0, 1]      # next state is D


def test_bad_stimulus_is_refused():
    doc = {"modules": {"top": {"ports": {"a": {"direction": "input", "bits": [2]},
                                         "y": {"direction": "output", "bits": [2]}},
                               "cells": {}, "netnames": {}}}}
    sim = GateSim(doc, "top", clock=None, reset=None)
    with pytest.raises(ValueError, match=r"no stimulus for input\(s\) \['a'\]"):
        sim.run({})
    with pytest.raises(ValueError, match="share one length >= 2"):
        sim.run({"a": [1]})


# ---- power at simulated rates --------------------------------------------------------------
_DEBUG = """\
power: internal u1/A (NAND2X1)
power:  cap = 0.0000
power:        when act/ns duty  energy    power
power: switching NAND2X1/Y activity = 1.00e+08 volt = 1.80 2.000e-06
power: internal u1/Y (NAND2X1)
power:  cap = 0.0631
power:        when act/ns duty  energy    power
power:  A -> Y B  0.10 0.50  2.70e-14  3.00e-06 no pg_pin
power:  B -> Y A  0.10 0.50  2.22e-14  1.00e-06 no pg_pin
power: leakage cell NAND2X1 3.937e-11
power: internal f1/CLK (DFFPOSX1)
power:        when act/ns duty  energy    power
power:  CLK -> CLK       0.20 1.00  1.11e-13  5.00e-06 no pg_pin
MACTILE_SECTION power
Total                {i} 2.000000e-06 3.937000e-11 0
MACTILE_DONE
"""


def test_pin_lines_sum_and_rescale():
    out = _DEBUG.format(i="9.000000e-06")
    e = parse_pin_energies(out, activity=1.0, clock_pins={"f1/CLK"})
    assert e.pins == {"u1/A": (0.0, 0.0), "u1/Y": (4e-6, 2e-6)}   # arcs summed, switching on Y
    assert e.clock == (5e-6, 0.0)
    p = power_at_rates(e, {"u1/A": 0.3, "u1/Y": 0.25})
    assert p["internal"] == pytest.approx((5e-6 + 0.25 * 4e-6) * 1e3)
    assert p["switching"] == pytest.approx(0.25 * 2e-6 * 1e3)
    assert p["total"] == pytest.approx(p["internal"] + p["switching"] + 3.937e-11 * 1e3)
    with pytest.raises(ToolError, match=r"1 pin\(s\) with power have no simulated"):
        power_at_rates(e, {"u1/A": 0.3})


def test_pin_lines_that_do_not_add_up_are_refused():
    with pytest.raises(ToolError, match="internal power sums to 9.000000e-06 W but OpenSTA "
                                        "reports 4.500000e-06 W"):
        parse_pin_energies(_DEBUG.format(i="4.500000e-06"), activity=1.0,
                           clock_pins={"f1/CLK"})
    with pytest.raises(ToolError, match="no debug power lines"):
        parse_pin_energies("MACTILE_SECTION power\nTotal 1 2 3 6\n", activity=1.0)


@pytest.mark.synth
@pytest.mark.parametrize("libname", ["osu018", "sky130"])
def test_uniform_rates_reproduce_opensta_global_activity(tools, libname, request):
    # Every pin at rate 0.3 through the per-pin energies == OpenSTA's own -global 0.3.
    lib = request.getfixturevalue(libname)
    comp = RegisteredMac(width=4)
    rtl = component_rtl(comp, f"t-mac4-{libname}")
    glob = synthesize(rtl, lib, FlowOptions(activity=ActivityOptions(
        method="global", global_activity=0.3)), component=comp)
    sim = synthesize(rtl, lib, FlowOptions(), component=comp)
    run = Path(sim.workdir)
    tcl = (run / "sta_run.tcl").read_text()
    assert "set mactile(activity) {pin_energies}" in tcl
    (run / "sta_check.tcl").write_text(tcl)
    out = find_sta().run(run / "sta_check.tcl", run / "sta_check.log")
    clock_pins = {ln.split()[2] for ln in out.splitlines()
                  if ln.startswith("power: internal ") and ln.split()[2].endswith(("/CLK", "/CK"))}
    e = parse_pin_energies(out, activity=1.0, clock_pins=clock_pins)
    p = power_at_rates(e, {pin: 0.3 for pin in e.pins})
    for k in ("internal", "switching", "leakage", "total"):
        assert p[k] == pytest.approx(glob.power_mw[k], rel=2e-3), k
    assert np.isclose(sim.power_mw["leakage"], glob.power_mw["leakage"])
