"""Summarise Nsight Compute runs of `benchmarks/engine_profile.py` into JSON and a markdown
table (development aid: the measured causes of docs/gpu.md's missed targets).

Each input is the ``--csv --page details`` output of one ``ncu`` run over CASES (the same
list as given to engine_profile.py, which launches each case twice: a warm-up, then the
launch this summary keeps). A run may hold sections (``--section SpeedOfLight ...``) or raw
metrics (``--metrics ...``); the summary takes whichever of its fields a run has.

    ncu --clock-control none --metrics ... --csv --page details \\
        --kernel-name "regex:engine_gemm|nestedfp_quant|nvjet" \\
        python benchmarks/engine_profile.py CASE ... > run.csv
    python benchmarks/ncu_summary.py --run run.csv CASE ... [--run run2.csv CASE ...] \\
        --device "NVIDIA H100 80GB HBM3, driver 580.159.04" -o docs/results/gpu_ncu_causes_h100
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path

def _kernels_per_run(case: str) -> int:
    """Kernels one launch of ``case`` runs (FP8 mode: the per-token quantizer, then the engine)."""
    return 2 if case.startswith("nestedfp8:") else 1


#: (field, metric names tried in order, scale) -- raw metric first, then the section's name
FIELDS = [
    ("time_us", ("gpu__time_duration.sum", "Duration"), 1e-3),
    ("dram_pct", ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "DRAM Throughput"), 1.0),
    ("dram_read_mb", ("dram__bytes_read.sum",), 1e-6),
    ("l2_mb", ("lts__t_bytes.sum",), 1e-6),
    ("l2_hit_pct", ("lts__t_sector_hit_rate.pct", "L2 Hit Rate"), 1.0),
    ("l2_pct", ("L2 Cache Throughput",), 1.0),
    ("sm_pct", ("Compute (SM) Throughput",), 1.0),
    ("tensor_pct", ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",), 1.0),
    ("alu_pct", ("sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active",), 1.0),
    ("issue_pct", ("smsp__issue_active.avg.pct_of_peak_sustained_active", "Issue Slots Busy"), 1.0),
    ("eligible", ("smsp__warps_eligible.avg.per_cycle_active", "Eligible Warps Per Scheduler"), 1.0),
    ("active_warps", ("smsp__warps_active.avg.per_cycle_active", "Active Warps Per Scheduler"), 1.0),
    ("sm_clock_ghz", ("sm__cycles_elapsed.avg.per_second", "SM Frequency"), 1e-9),
]
STALL = "smsp__average_warps_issue_stalled_"


def _num(v: str) -> float:
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return math.nan


def parse(text: str) -> list[dict]:
    """Kernels of one ``--csv --page details`` run in launch order: name and metric values."""
    if '"ID"' not in text:
        raise SystemExit("ncu_summary: no CSV table in the input (was ncu run with --csv --page details?)")
    rows = list(csv.reader(io.StringIO(text[text.index('"ID"'):])))
    hdr, out, idx = rows[0], [], {}
    for r in rows[1:]:
        d = dict(zip(hdr, r))
        if d.get("ID") is None:
            continue
        if d["ID"] not in idx:
            idx[d["ID"]] = len(out)
            out.append({"kernel": d["Kernel Name"].split("(")[0].removeprefix("void "), "metrics": {}})
        m = out[idx[d["ID"]]]["metrics"]
        unit = d.get("Metric Unit", "")
        v = _num(d["Metric Value"])
        # sections print some values in scaled units; bring them to the raw metrics' units
        scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "hz": 1.0, "Khz": 1e3, "Mhz": 1e6, "Ghz": 1e9,
                 "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}.get(unit, 1.0)
        m[d["Metric Name"]] = v * scale
    return out


def summarise(kernels: list[dict], cases: list[str]) -> list[dict]:
    """One record per (case, kernel of its second launch)."""
    need = sum(2 * _kernels_per_run(c) for c in cases)
    if len(kernels) != need:
        raise SystemExit(f"ncu_summary: {len(kernels)} kernels profiled, the cases launch {need}")
    recs, i = [], 0
    for case in cases:
        n = _kernels_per_run(case)
        for k in kernels[i + n: i + 2 * n]:  # the second launch (after the warm-up)
            m = k["metrics"]
            rec = {"case": case, "kernel": k["kernel"]}
            for field, names, scale in FIELDS:
                v = next((m[x] for x in names if x in m), None)
                if v is not None and not math.isnan(v):
                    rec[field] = round(v * scale, 4)
            if "sm__cycles_active.avg" in m and "gpc__cycles_elapsed.max" in m:
                rec["sm_active_pct"] = round(100 * m["sm__cycles_active.avg"] / m["gpc__cycles_elapsed.max"], 2)
            stalls = {x[len(STALL):].split("_per_issue")[0]: round(v, 3) for x, v in m.items() if x.startswith(STALL)}
            if stalls:
                rec["stalls_per_issue"] = dict(sorted(stalls.items(), key=lambda kv: -kv[1]))
            recs.append(rec)
        i += 2 * n
    return recs


def markdown(meta: dict, recs: list[dict]) -> str:
    cols = [("time_us", "time (us)", "{:.1f}"), ("dram_pct", "DRAM %", "{:.0f}"), ("dram_read_mb", "DRAM read MB", "{:.1f}"),
            ("l2_mb", "L2 MB", "{:.0f}"), ("l2_hit_pct", "L2 hit %", "{:.0f}"), ("tensor_pct", "tensor %", "{:.0f}"),
            ("sm_pct", "SM %", "{:.0f}"), ("alu_pct", "ALU %", "{:.0f}"), ("issue_pct", "issue %", "{:.0f}"),
            ("eligible", "eligible / active warps", None), ("sm_active_pct", "SMs active %", "{:.0f}"),
            ("sm_clock_ghz", "SM GHz", "{:.2f}")]
    lines = [f"# Nsight Compute: the engine beside cuBLAS ({meta['device']}, {meta['date'][:10]})", "",
             "Each case launched twice by `benchmarks/engine_profile.py` (the second launch kept), under",
             f"`ncu {meta['ncu_flags']}`; launches serialised and caches flushed between",
             "replays, so times are a single kernel's, not the benchmark's graph replay. Case:",
             "`format:M:K:N` (`cublas16`: `torch.matmul` FP16, `cublas8`: `torch._scaled_mm` E4M3).",
             "Rows with stall reasons come from runs of raw metrics; the others from runs of Nsight's",
             "sections (SpeedOfLight, MemoryWorkloadAnalysis, WarpStateStats, SchedulerStats,",
             "ComputeWorkloadAnalysis), which give the SM throughput instead of the tensor and ALU pipes'.",
             f"Runs: {meta['runs']}.", "",
             "| case | kernel | " + " | ".join(c[1] for c in cols) + " | top stalls (cycles per issue) |",
             "|---|---|" + "---:|" * len(cols) + "---|"]
    for r in recs:
        cells = []
        for key, _, fmt in cols:
            if key == "eligible":
                cells.append(f"{r['eligible']:.2f} / {r['active_warps']:.2f}" if "eligible" in r else "")
            else:
                cells.append(fmt.format(r[key]) if key in r else "")
        st = ", ".join(f"{k} {v:.1f}" for k, v in list(r.get("stalls_per_issue", {}).items())[:3])
        name = r["kernel"].replace("mt::engine_gemm", "engine_gemm").replace("|", "/")
        lines.append(f"| {r['case']} | `{name}` | " + " | ".join(cells) + f" | {st} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="append", nargs="+", required=True, metavar=("CSV", "CASE"),
                    help="one ncu CSV and the cases it profiled, in order (repeatable)")
    ap.add_argument("-o", "--out", required=True, help="output path without suffix (.json and .md written)")
    ap.add_argument("--device", required=True)
    ap.add_argument("--date", default=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    ap.add_argument("--ncu-flags", default="--clock-control none")
    args = ap.parse_args(argv)
    groups = [(r[0], r[1:]) for r in args.run]
    recs, runs = [], []
    for path, cases in groups:
        if not cases:
            raise SystemExit(f"ncu_summary: --run {path} names no cases")
        got = summarise(parse(Path(path).read_text()), cases)
        runs.append(f"{len(cases)} cases, " + ("raw metrics" if any("stalls_per_issue" in r for r in got) else "sections"))
        recs += got
    meta = {"device": args.device, "date": args.date, "ncu_flags": args.ncu_flags,
            "tool": "Nsight Compute (ncu) on benchmarks/engine_profile.py", "runs": "; ".join(runs)}
    from mactile.golden.fileio import atomic_write
    out = Path(args.out)
    atomic_write(out.with_suffix(".json"), json.dumps({"meta": meta, "records": recs}, indent=1) + "\n")
    atomic_write(out.with_suffix(".md"), markdown(meta, recs))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')} ({len(recs)} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
