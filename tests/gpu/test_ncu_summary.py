"""benchmarks/ncu_summary.py (no GPU needed): Nsight Compute CSV of both kinds (raw metrics,
sections with scaled units) -> one record per case's second launch; the markdown committed
beside the H100 result is the summary of its JSON."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from fp4_gpu_util import load_benchmark_script

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "docs" / "results" / "gpu_ncu_causes_h100.json"
HDR = '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'


def _csv(kernels):
    """ncu's --csv --page details layout, after the profiled program's own output."""
    lines = ["profiled a case", HDR.rstrip("\n")]
    for i, (name, metrics) in enumerate(kernels):
        for metric, unit, value in metrics:
            lines.append(f'"{i}","{name}(int, float)","S","{metric}","{unit}","{value}"')
    return "\n".join(lines) + "\n"


def test_second_launch_kept_and_units_scaled():
    mod = load_benchmark_script("ncu_summary")
    raw = [("gpu__time_duration.sum", "ns", "20,000"), ("dram__bytes_read.sum", "byte", "1,000,000"),
           ("smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", "", "1.5"),
           ("smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", "", "2.5")]
    sect = [("Duration", "us", "30.5"), ("DRAM Throughput", "%", "55"), ("SM Frequency", "Ghz", "1.75")]
    text = _csv([("void mt::engine_gemm<0, 8>", [("gpu__time_duration.sum", "ns", "99,000")]),  # warm-up
                 ("void mt::engine_gemm<0, 8>", raw),
                 ("nfp::nestedfp_quant_e4m3", sect), ("void mt::engine_gemm<5, 8>", sect),  # warm-up
                 ("nfp::nestedfp_quant_e4m3", sect), ("void mt::engine_gemm<5, 8>", sect)])
    recs = mod.summarise(mod.parse(text), ["nvfp4:1:64:64", "nestedfp8:1:64:64"])
    assert [(r["case"], r["kernel"]) for r in recs] == [
        ("nvfp4:1:64:64", "mt::engine_gemm<0, 8>"), ("nestedfp8:1:64:64", "nfp::nestedfp_quant_e4m3"),
        ("nestedfp8:1:64:64", "mt::engine_gemm<5, 8>")]
    assert recs[0]["time_us"] == 20.0 and recs[0]["dram_read_mb"] == 1.0
    assert list(recs[0]["stalls_per_issue"]) == ["barrier", "wait"]  # largest first
    assert recs[2]["time_us"] == 30.5 and recs[2]["dram_pct"] == 55.0 and recs[2]["sm_clock_ghz"] == 1.75
    with pytest.raises(SystemExit, match="3 kernels profiled, the cases launch 2"):
        mod.summarise(mod.parse(text)[:3], ["nvfp4:1:64:64"])
    with pytest.raises(SystemExit, match="no CSV table"):
        mod.parse("profiled a case\n")


def test_committed_markdown_is_the_summary():
    mod = load_benchmark_script("ncu_summary")
    data = json.loads(RESULT.read_text())
    assert RESULT.with_suffix(".md").read_text() == mod.markdown(data["meta"], data["records"])
    # every NestedFP case sits beside a cuBLAS case of the same shape and M in the same run
    cases = {r["case"] for r in data["records"]}
    for c in cases:
        fmt, rest = c.split(":", 1)
        if not fmt.startswith("cublas") and fmt not in ("nvfp4", "razer", "mxfp4", "razer-g128"):
            assert any(o.split(":", 1)[1] == rest for o in cases if o.startswith("cublas")), c
