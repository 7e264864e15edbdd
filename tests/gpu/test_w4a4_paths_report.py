"""benchmarks/w4a4_paths.py's report on the committed H100 run (no GPU needed): one row per
shape and M, the default path's fraction, and the markdown committed beside it is current."""
from __future__ import annotations

import json
import re
from pathlib import Path

from fp4_gpu_util import load_benchmark_script

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "docs" / "results" / "gpu_w4a4_paths_h100.json"


def _module():
    return load_benchmark_script("w4a4_paths")


def test_report_rows_and_default_path():
    mod = _module()
    data = json.loads(RESULT.read_text())
    md = mod.report(data)
    rows = [ln for ln in md.splitlines() if re.match(r"\| \d+x\d+ \|", ln)]
    assert len(rows) == len({(r["K"], r["N"], r["M"]) for r in data["records"]})
    r = next(x for x in data["records"] if (x["K"], x["N"], x["M"], x["path"]) == (8192, 8192, 1, "quant+gemv"))
    assert r["default_kernel"] == "gemv"
    row = next(ln for ln in md.split("## M = 1", 1)[1].splitlines() if ln.startswith("| 8192x8192 |"))
    assert row.endswith(f"| quant+gemv | {100 * r['fraction_of_read_peak']:.0f}% |")


def test_committed_markdown_is_the_report():
    mod = _module()
    assert RESULT.with_suffix(".md").read_text() == mod.report(json.loads(RESULT.read_text())) + "\n"
