"""Per-submodule area of a MAC from a synthesis that keeps the hierarchy (Table 5 split)."""
import pytest


def test_mac_parts_add_up_to_the_hierarchical_total(tools, nangate45):
    from mactile.synth.breakdown import area_breakdown

    b = area_breakdown("mac-int4", nangate45, 2.0)
    assert set(b["parts"]) == {"multiplier", "accumulator"}
    assert all(a > 0 for a in b["parts"].values())
    # The top holds only wiring: the parts are the whole unit.
    assert b["top_only"] == pytest.approx(0.0, abs=1.0)
    assert sum(b["parts"].values()) == pytest.approx(b["total"], abs=1.0)
    # A signed 4x4 multiplier is smaller than a 14-bit accumulator with its register.
    assert b["parts"]["multiplier"] < b["parts"]["accumulator"]


def test_keep_hierarchy_changes_nothing_the_bench_sees():
    """The same ports and latency either way (the simulation suites run the default)."""
    pytest.importorskip("amaranth")
    from mactile.rtl.registry import DESIGNS
    from mactile.sim.hdl import component_ports

    for name in ("mac-dialectfp4", "mac-int8"):
        flat = DESIGNS[name].build()
        hier = DESIGNS[name].build(keep_hierarchy=True)
        assert [(p.name, p.width) for p in component_ports(flat)] == \
            [(p.name, p.width) for p in component_ports(hier)]
        assert flat.latency == hier.latency


def test_tensor_core_parts_are_the_direct_submodules(tools, nangate45):
    """The output-stationary core needs no keep_hierarchy flag (its decoders and MAC units
    are submodules); a unit's own FP32 adder is inside the unit's figure, not a part."""
    from mactile.synth.breakdown import area_breakdown

    b = area_breakdown("nvfp4-tc-os", nangate45, 2.0, rows=1, cols=1)
    assert set(b["parts"]) == {"a_dec0", "w_dec0", "u0_0"}
    assert b["parts"]["u0_0"] > 1000  # the FP32 adder alone is ~1,700 um^2 here
    assert b["top_only"] > 0  # scale decoders, the edge's registers, control
    assert sum(b["parts"].values()) + b["top_only"] == pytest.approx(b["total"])
