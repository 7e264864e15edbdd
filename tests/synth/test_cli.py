"""`mactile synth` and `mactile report`: outputs and the messages for bad input."""
import csv
import json

import pytest

from mactile.cli.main import main
from mactile.rtl.registry import DESIGNS, Design


@pytest.fixture
def tiny_designs(monkeypatch):
    """Two tiny designs of the tests' own in the registry (builders in designs.py)."""
    monkeypatch.setitem(DESIGNS, "t-mac4", Design("t-mac4", "test MAC", "designs:RegisteredMac",
                                                  {"width": 4}, group="test MACs"))
    monkeypatch.setitem(DESIGNS, "t-add4", Design("t-add4", "test adder", "designs:CombAdder",
                                                  {"width": 4}, group="test other"))


def test_unknown_design(capsys):
    assert main(["synth", "no-such-design"]) == 2
    assert "unknown design 'no-such-design'; known designs:" in capsys.readouterr().err


def test_unreadable_liberty(capsys, tmp_path, tiny_designs):
    bad = tmp_path / "bad.lib"
    bad.write_text("not a liberty\n")
    assert main(["synth", "t-mac4", "--liberty", str(bad)]) == 2
    assert "is not a liberty file" in capsys.readouterr().err
    assert main(["synth", "t-mac4", "--liberty", str(tmp_path / "none.lib")]) == 2
    assert "does not exist" in capsys.readouterr().err
    for argv, message in ((["--clock-ns", "-1"], "expected a clock period in ns in (0, 1e+06], got '-1'"),
                          (["--timeout", "0"], "expected a number of seconds in (0, 604800], got '0'")):
        with pytest.raises(SystemExit) as e:  # a usage error, before any work
            main(["synth", "t-mac4", *argv])
        assert e.value.code == 2 and message in capsys.readouterr().err


def test_report_unknown_design(capsys, tmp_path, tiny_designs):
    assert main(["report", "--designs", "t-mac4", "nope", "-o", str(tmp_path / "r")]) == 2
    assert "unknown design(s) nope" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.synth
def test_report_files(tools, osu018, tmp_path, tiny_designs, capsys):
    out = tmp_path / "rep"
    assert main(["report", "--designs", "t-mac4", "t-add4", "--jobs", "2", "-o", str(out)]) == 0
    recs = json.loads((out / "area_power.json").read_text())
    assert [r["design"] for r in recs] == ["t-mac4", "t-add4"]
    for r in recs:
        assert {"design", "pdk", "clock_ns", "area_um2", "cell_count", "slack_ns", "power_mw",
                "activity_method"} <= set(r)
        assert set(r["power_mw"]) == {"internal", "switching", "leakage", "total"}
        assert r["pdk"] == "osu018" and r["clock_ns"] == 10.0
    rows = list(csv.DictReader((out / "area_power.csv").open()))
    assert float(rows[0]["area_um2"]) == recs[0]["area_um2"]
    md = (out / "area_power.md").read_text()
    assert "## test MACs" in md and "| t-mac4 |" in md
    assert (out / "area_power.png").read_bytes()[:4] == b"\x89PNG"
    # Second run: everything cached.
    capsys.readouterr()
    assert main(["report", "--designs", "t-mac4", "t-add4", "-o", str(out)]) == 0
    assert capsys.readouterr().out.count("(cached;") == 2


@pytest.mark.synth
def test_report_clock_no_design_can_meet(tools, osu018, tmp_path, tiny_designs, capsys):
    out = tmp_path / "rep"
    # the measured figures are written, flagged; the clock to ask for is named
    assert main(["report", "--designs", "t-mac4", "--clock-ns", "0.05", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: no design meets timing at a 0.05 ns clock" in err and "needs at least" in err
    rec = json.loads((out / "area_power.json").read_text())
    assert [r["meets_timing"] for r in rec] == [False]


@pytest.mark.synth
def test_report_records_a_timeout_and_carries_on(tools, osu018, tmp_path, tiny_designs, capsys):
    """A design past --timeout is a record without figures, not an aborted report."""
    out = tmp_path / "r"
    assert main(["report", "--designs", "t-mac4", "t-add4", "--timeout", "0.05", "--no-cache",
                 "--no-plots", "-o", str(out)]) == 1
    recs = json.loads((out / "area_power.json").read_text())
    assert [r["design"] for r in recs] == ["t-mac4", "t-add4"]
    assert all("timed out after" in r["equivalence"] and r["area_um2"] is None for r in recs)
    assert "TIMED OUT" in capsys.readouterr().out
