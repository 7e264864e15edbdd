"""The default report on the default library: every registered design (slow: about 8 min on
2 cores with an empty cache)."""
import json

import pytest

from mactile.cli.main import main
from mactile.rtl.registry import DESIGNS

pytestmark = [pytest.mark.synth, pytest.mark.slow]


def test_full_report_default_library(tools, osu018, tmp_path, capsys):
    default = [n for n, d in DESIGNS.items() if d.in_default_report]
    if not default:
        pytest.skip("no designs registered")
    out = tmp_path / "report"
    assert main(["report", "-o", str(out)]) == 0
    recs = json.loads((out / "area_power.json").read_text())
    assert [r["design"] for r in recs] == default
    assert all(r["equivalence"].startswith("proven") for r in recs)
    assert all(r["area_um2"] > 0 and r["power_mw"]["total"] > 0 for r in recs)
    capsys.readouterr()
    assert main(["report", "-o", str(out)]) == 0   # nothing changed: all from the cache
    assert capsys.readouterr().out.count("(cached;") == len(default)
