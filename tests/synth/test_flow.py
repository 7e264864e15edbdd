"""The flow on the tests' own tiny designs: numbers, equivalence gate, cache, timing flags.

One or two tiny designs per library keep this under a minute (CI budget).
"""
import re

import pytest

from designs import CombAdder, PipelinedMul, RegisteredMac, ShiftedRegister
from mactile.synth import ActivityOptions, FlowOptions, synthesize
from mactile.synth.flow import parse_sta
from mactile.synth.rtl import component_rtl

pytestmark = pytest.mark.synth


def _run(comp, name, lib, **kw):
    opts = kw.pop("opts", None) or FlowOptions(clock_ns=kw.pop("clock_ns", 10.0))
    return synthesize(component_rtl(comp, name), lib, opts, component=comp, **kw)


def test_registered_mac_osu018(tools, osu018):
    r = _run(RegisteredMac(width=4), "t-mac4", osu018)
    assert r.equivalence == "proven (rtl: 16 register bits paired by name)"
    assert r.area_um2 > 0 and r.cell_count > 20
    assert r.cells_by_type.get("DFFPOSX1") == 16          # the 16-bit accumulator
    assert 0 < r.sequential_area_um2 < r.area_um2
    assert r.meets_timing and 0 < r.slack_ns < 10
    p = r.power_mw
    assert all(p[k] > 0 for k in ("internal", "switching", "leakage"))
    assert p["total"] == pytest.approx(p["internal"] + p["switching"] + p["leakage"], rel=1e-4)
    assert r.activity_method.startswith("sim (") and "uniform-random" in r.activity_method
    netlist = (r.workdir and open(f"{r.workdir}/netlist.v").read())
    assert re.search(r"^\s*DFFPOSX1 ", netlist, re.M)
    # OpenSTA's propagation of the input ports' rates, on the same (cached) netlist.
    ports = _run(RegisteredMac(width=4), "t-mac4", osu018,
                 opts=FlowOptions(activity=ActivityOptions(method="ports")))
    assert ports.activity_method.startswith("ports (") and "synth" not in ports.runtime_s
    assert ports.area_um2 == r.area_um2 and ports.power_mw["leakage"] == p["leakage"]
    assert ports.power_mw["total"] != p["total"]


def test_cache_second_run_is_cached_and_identical(tools, osu018):
    first = _run(PipelinedMul(width=4), "t-mul4", osu018)
    again = _run(PipelinedMul(width=4), "t-mul4", osu018)
    assert again.cached
    assert (again.area_um2, again.slack_ns, again.power_mw) == \
        (first.area_um2, first.slack_ns, first.power_mw)
    other_clock = _run(PipelinedMul(width=4), "t-mul4", osu018, clock_ns=5.0)
    assert not other_clock.cached
    # The same RTL under another name (a registry alias with the same parameters) hits the
    # cache and is labelled with the name it was asked for (the paper view matches on it).
    alias = _run(PipelinedMul(width=4), "t-mul4-alias", osu018)
    assert alias.cached and alias.design == "t-mul4-alias" and alias.area_um2 == first.area_um2


def test_changed_check_reruns_only_the_check(tools, osu018, monkeypatch):
    # The netlist is cached by what synthesis reads; a changed equivalence check (here a
    # budget, part of its key) runs again on that netlist without synthesizing again.
    from mactile.synth import flow

    first = _run(PipelinedMul(width=4), "t-mul4", osu018)
    synth_logs = []
    real = flow.run_yosys

    def spy(script, work, log, **kw):
        synth_logs.append(log)
        return real(script, work, log, **kw)

    monkeypatch.setattr(flow, "run_yosys", spy)    # the synthesis call; the check has its own
    again = _run(PipelinedMul(width=4), "t-mul4", osu018,
                 opts=FlowOptions(equiv_rtl_budget_s=31.0))
    assert not again.cached and again.ok
    assert synth_logs == [] and "synth" not in again.runtime_s and "equiv" in again.runtime_s
    assert (again.area_um2, again.cell_count) == (first.area_um2, first.cell_count)


def test_constant_and_copied_output_bits_reach_timing(tools, osu018):
    r = _run(ShiftedRegister(width=4), "t-shift4", osu018)
    assert r.ok and r.slack_ns is not None and r.power_mw["total"] > 0
    netlist = open(f"{r.workdir}/netlist.v").read()
    assert not re.search(r"assign\s*\{", netlist)


def test_broken_netlist_gets_no_numbers(tools, osu018):
    # Fault injection: one NAND2 becomes a NOR2. The equivalence check must catch it.
    def break_one(text):
        new, n = re.subn(r"^(\s*)NAND2X1 ", r"\1NOR2X1 ", text, count=1, flags=re.M)
        assert n == 1
        return new

    r = _run(RegisteredMac(width=4), "t-mac4", osu018, netlist_filter=break_one)
    assert r.equivalence.startswith("failed: rtl: differs: ") and "acc[" in r.equivalence
    assert (r.area_um2, r.cell_count, r.slack_ns, r.power_mw) == (None, None, None, None)
    assert not r.ok


def test_coarse_level_proves_and_catches_a_fault(tools, osu018):
    # Without the RTL-level attempt (as for netlists over equiv_rtl_max_cells) the proof
    # runs against the RTL after Yosys' coarse-grain passes; a one-gate fault is caught there.
    coarse_only = FlowOptions(equiv_rtl_max_cells=0)
    _run(RegisteredMac(width=4), "t-mac4", osu018)                 # the netlist, cached
    good = _run(RegisteredMac(width=4), "t-mac4", osu018, opts=coarse_only)
    assert good.equivalence == "proven (coarse: 16 register bits paired by name)"
    assert "equiv" in good.runtime_s and "synth" not in good.runtime_s  # the cached netlist

    def break_one(text):
        return re.sub(r"^(\s*)NAND2X1 ", r"\1NOR2X1 ", text, count=1, flags=re.M)

    bad = _run(RegisteredMac(width=4), "t-mac4", osu018, opts=coarse_only,
               netlist_filter=break_one)
    assert bad.equivalence.startswith("failed: coarse: differs: ") and "acc[" in bad.equivalence
    assert bad.area_um2 is None


def test_timing_flag_and_global_activity(tools, osu018):
    fast = _run(RegisteredMac(width=4), "t-mac4", osu018, clock_ns=0.5)
    assert fast.ok and fast.slack_ns < 0 and fast.meets_timing is False
    glob = _run(RegisteredMac(width=4), "t-mac4", osu018, opts=FlowOptions(
        clock_ns=0.5, activity=ActivityOptions(method="global", global_activity=0.3)))
    assert glob.activity_method.startswith("global (vectorless: every net 0.3 toggles/cycle")
    assert "synth" not in glob.runtime_s and glob.area_um2 == fast.area_um2  # netlist reused
    assert glob.power_mw["switching"] != fast.power_mw["switching"]


def test_combinational_design_uses_a_virtual_clock(tools, osu018):
    r = _run(CombAdder(width=4), "t-add4", osu018, clock_ns=2.0)
    assert r.ok and r.sequential_area_um2 == 0
    assert r.slack_ns is not None and r.slack_ns < 2.0       # input->output path constrained


def test_nangate45(tools, nangate45):
    r = _run(RegisteredMac(width=4), "t-mac4", nangate45, clock_ns=2.0)
    assert r.ok and r.meets_timing
    assert any(c.startswith("DFF") for c in r.cells_by_type)


def test_sky130_uses_no_isolation_cells(tools, sky130):
    r = _run(PipelinedMul(width=4), "t-mul4", sky130)
    assert r.ok
    assert r.cells_by_type and all(c.startswith("sky130_fd_sc_hd__") for c in r.cells_by_type)
    assert not [c for c in r.cells_by_type if "lpflow" in c or "probe" in c]


def test_parse_sta_errors():
    from mactile.synth.tools import ToolError

    with pytest.raises(ToolError, match="did not finish: boom"):
        parse_sta("MACTILE_ERROR boom\n")
    with pytest.raises(ToolError, match="no worst slack"):
        parse_sta("MACTILE_DONE\n")
