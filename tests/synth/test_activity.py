"""Toggle rates and duty cycles from a stimulus (no tools needed beyond Amaranth)."""
import numpy as np
import pytest

from mactile.synth.activity import (ActivityOptions, harness_stimulus, measure_port_activity,
                                    uniform_stimulus)
from mactile.synth.rtl import Port, Rtl


def _rtl():
    ports = (Port("a", "input", 3), Port("clk", "input", 1), Port("rst", "input", 1),
             Port("en", "input", 1), Port("y", "output", 4))
    return Rtl(design="t", top="t", verilog="", ports=ports, clock="clk", reset="rst")


def test_exact_toggle_counts():
    stim = {"a": [0, 7, 7, 0, 5], "en": [1, 1, 1, 1, 1]}
    pa = measure_port_activity(_rtl(), stim, source="test")
    got = {n: (a, d) for n, a, d in pa.bits}
    # bit0: 0,1,1,0,1 -> 3 transitions in 4 steps, high 3 of 5
    assert got["a[0]"] == pytest.approx((3 / 4, 3 / 5))
    # bit1: 0,1,1,0,0 -> 2 transitions, high 2 of 5
    assert got["a[1]"] == pytest.approx((2 / 4, 2 / 5))
    assert got["a[2]"] == pytest.approx((3 / 4, 3 / 5))
    assert got["en"] == (0.0, 1.0)
    assert got["rst"] == (0.0, 0.0)          # reset held low
    assert "clk" not in got                  # the clock's activity comes from create_clock
    tcl = pa.tcl()
    assert "set_power_activity -input_ports [get_ports {a[0]}] -activity 0.750000 -duty 0.600000" in tcl


def test_uniform_stimulus_rates():
    rtl = _rtl()
    pa = measure_port_activity(rtl, uniform_stimulus(rtl, 4000, 1), source="u")
    for name, act, duty in pa.bits:
        if name.startswith("a") or name == "en":
            assert abs(act - 0.5) < 0.05 and abs(duty - 0.5) < 0.05, name


def test_bad_stimulus():
    with pytest.raises(ValueError, match=r"no values for input\(s\) \['en'\]"):
        measure_port_activity(_rtl(), {"a": [1, 2]}, source="x")
    with pytest.raises(ValueError, match="share one length"):
        measure_port_activity(_rtl(), {"a": [1, 2], "en": [1]}, source="x")
    with pytest.raises(ValueError, match="activity method must be one of"):
        ActivityOptions(method="saif")
    with pytest.raises(ValueError, match="global activity must be in"):
        ActivityOptions(global_activity=3.0)


def test_harness_stimulus_of_a_registered_mac():
    pytest.importorskip("amaranth")
    from mactile.rtl.registry import DESIGNS
    from mactile.synth.rtl import design_rtl

    if "mac-int4" not in DESIGNS:
        pytest.skip("mac-int4 not registered")
    rtl = design_rtl("mac-int4")
    stim, source = harness_stimulus(rtl, 500, 7)
    assert "golden-derived" in source
    assert set(p.name for p in rtl.data_inputs) <= set(stim)
    pa = measure_port_activity(rtl, stim, source=source)
    acts = {n: a for n, a, _ in pa.bits}
    assert 0.05 < np.mean([acts[f"a[{i}]"] for i in range(4)]) < 0.9


def test_write_vcd_for_per_net_activity(tmp_path):
    """The dump a newer OpenSTA's read_vcd would read (scope bench/top, every port)."""
    pytest.importorskip("amaranth")
    import re
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from designs import RegisteredMac
    from mactile.synth.activity import write_vcd
    from mactile.synth.rtl import component_rtl

    comp = RegisteredMac(width=4)
    rtl = component_rtl(comp, "t-mac4")
    write_vcd(rtl, comp, uniform_stimulus(rtl, 40, 3), tmp_path / "s.vcd", clock_ns=10.0)
    text = (tmp_path / "s.vcd").read_text()
    assert re.findall(r"\$scope module (\S+)", text)[:2] == ["bench", "top"]
    names = set(re.findall(r"\$var \S+ \d+ \S+ (\S+)", text))
    assert {"clk", "a", "b", "en", "acc"} <= names


@pytest.mark.parametrize("design", ["mac-int8", "mac-dialectfp4", "mac-dialectfp4-decode",
                                    "dialect-quantizer", "dialect-dequantizer"])
def test_workload_stimulus_is_real_layer_data_and_named(design):
    """Under a workload the benches drive a layer's operands (the synthetic one here, so
    the test needs no optional package): the source names it, every input is covered,
    and the quantizer takes one held block per ``reuse`` cycles."""
    pytest.importorskip("amaranth")
    from mactile.synth.rtl import design_rtl

    rtl = design_rtl(design)
    stim, source = harness_stimulus(rtl, 600, 7, workload="synthetic", reuse=50)
    assert source.startswith("workload synthetic layer")
    assert set(p.name for p in rtl.data_inputs) <= set(stim)
    assert {len(v) for v in stim.values()} == {600}
    if design == "dialect-quantizer":
        assert sum(stim["valid"]) == 12 and "one input block per 50 cycles" in source
        assert stim["x__0"][0] == stim["x__0"][49] != stim["x__0"][50]
    pa = measure_port_activity(rtl, stim, source=source)
    bench, _ = harness_stimulus(rtl, 600, 7)
    pb = measure_port_activity(rtl, bench, source="bench")
    if design.startswith("dialect-q"):
        assert pa.mean() < pb.mean() / 5  # held inputs toggle far less than the suite


def test_workload_options_are_checked():
    with pytest.raises(ValueError, match="workload must be one of"):
        ActivityOptions(workload="llama")
    with pytest.raises(ValueError, match="reuse must be"):
        ActivityOptions(workload="minilm", reuse=-1)
    assert "workload" not in ActivityOptions().key()
    assert ActivityOptions(workload="minilm").key()["workload"] == "minilm"


def test_minilm_workload_or_its_named_fallback():
    from mactile.sim.workloads import dot_operands, load_workload

    wl = load_workload("minilm")
    assert wl.activations.shape[1] == wl.weights.shape[1] == 1536
    assert "MiniLM" in wl.name or "not installed" in wl.name
    a, w = dot_operands(wl, 64, 30)
    assert a.shape == w.shape == (30, 64)
    # Consecutive sums walk K for one (row, token): chunk 1 follows chunk 0.
    np.testing.assert_array_equal(a[1], wl.activations[0, 64:128])
    np.testing.assert_array_equal(w[24], wl.weights[0, :64])  # next token, same row
