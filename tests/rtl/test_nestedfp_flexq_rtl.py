"""The NestedFP PE and the FlexQ group dot-product units as generated: ports and widths
from the golden models, latency, the registry rows, Verilog that lints clean."""
import pytest

pytest.importorskip("amaranth")
pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

from mactile.rtl.registry import DESIGNS  # noqa: E402
from mactile.sim.benches import bench_path  # noqa: E402
from mactile.sim.hdl import component_ports, generate, lint, verilator_bin_dir  # noqa: E402

NEW = ["nestedfp-pe", "fp16-mac", "fp8-mac", "flexq-int6-dot", "int6-mult-dot", "int8-mult-dot"]
needs_verilator = pytest.mark.skipif(verilator_bin_dir() is None, reason="verilator not installed")


def _ports(c):
    return {p.name: (p.direction, p.width) for p in component_ports(c)}


def test_registered_with_benches():
    for name in NEW:
        assert name in DESIGNS and bench_path(DESIGNS[name])


def test_pe_ports_and_latency():
    pe = DESIGNS["nestedfp-pe"].build()
    ports = _ports(pe)
    assert {k: v[1] for k, v in ports.items()} == {
        "a": 16, "w_upper": 8, "w_lower": 8, "mode": 1, "valid": 1, "clear": 1, "acc": 32}
    assert pe.latency == 2 and pe.module_name == "nestedfp_pe_dual_fp32_l2"
    assert DESIGNS["nestedfp-pe"].build(product_register=False).latency == 1
    assert _ports(DESIGNS["fp8-mac"].build())["a"][1] == 8
    assert _ports(DESIGNS["fp16-mac"].build())["w"][1] == 16


@pytest.mark.parametrize("name,bits,acc", [("flexq-int6-dot", 6, 19), ("int8-mult-dot", 8, 23)])
def test_group_dot_ports_from_the_golden_unit(name, bits, acc):
    u = DESIGNS[name].build()
    ports = _ports(u)
    assert ports["a__0"][1] == bits and "a__15" in ports and "a__16" not in ports
    assert ports["acc"][1] == acc == u.golden.acc_bits and ports["y"][1] == 32
    assert u.latency == 1


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="modes"):
        DESIGNS["nestedfp-pe"].build(modes="int8")
    with pytest.raises(ValueError, match="multiple of lanes"):
        DESIGNS["flexq-int6-dot"].build(lanes=24)


@needs_verilator
@pytest.mark.parametrize("name", NEW)
def test_generated_verilog_lints_clean_with_documented_waivers(name, tmp_path):
    gen = generate(DESIGNS[name].build())
    v, w = gen.write(tmp_path)
    res = lint(v, waivers=w)
    assert res.ok, "\n".join(res.messages)
    assert not lint(v).ok  # the waivers do work
