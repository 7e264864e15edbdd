#!/usr/bin/env python3
"""Throughput and peak memory of the golden block formats (issue 2's performance targets).

For each format: quantize and dequantize a ROWS x COLS float32 matrix (default 4096 x 4096,
seeded Gaussian; NestedFP gets the same scaled into its eligible range) and report
M elements/s for quantize, dequantize and both (best of ``--repeat`` runs, wall clock), and
the peak extra memory of each phase in copies of the input, measured with ``tracemalloc``
(NumPy reports its buffers to it) in a fresh subprocess per format, so that one format's
caches and the timing runs do not hide another's peak. The outputs count: a dequantized
float64 matrix alone is 2 copies of a float32 input.

Prints a table and writes ``docs/results/golden_throughput.json`` (date, CPU, NumPy and
Python versions, thread count, every figure). ``MACTILE_THREADS`` sets the worker threads
(default: min(4, CPU count)); the machine may be shared, so run it twice, once with
``MACTILE_THREADS=1``.

Usage::

    python benchmarks/golden_throughput.py [--rows 4096 --cols 4096] [--repeat 3]
        [--formats nvfp4,razer] [--out docs/results/golden_throughput.json] [--no-memory]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: (label, registry name, options, target M elements/s for quantize + dequantize)
CASES = [
    ("nvfp4", "nvfp4", {}, 20.0),
    ("mxfp4", "mxfp4", {}, 20.0),
    ("razer-act", "razer-act", {}, 20.0),
    ("razer", "razer", {}, 5.0),
    ("dialectfp4 two-stage", "dialectfp4", {"select": "two-stage"}, 5.0),
    ("dialectfp4 mse", "dialectfp4", {"select": "mse"}, 1.0),
    ("int-group int6", "int-group", {}, None),
    ("nestedfp", "nestedfp", {}, 50.0),
    ("nestedfp8", "nestedfp8", {}, None),
    # The bare byte-plane functions on the FP16 words of the same matrix (no FP16
    # rounding of float32 input, no float64 output): what a weight loader runs.
    ("nestedfp split+merge fp16", "nestedfp-words", {}, 50.0),
]
MAX_EXTRA_COPIES = 4.0


def make_input(name: str, rows: int, cols: int) -> np.ndarray:
    rng = np.random.default_rng(2026)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    if name.startswith("nestedfp"):
        x *= np.float32(0.25)  # LLM-like weights, inside the eligibility threshold
        np.clip(x, -1.75, 1.75, out=x)
    if name == "nestedfp-words":
        return x.astype(np.float16)
    return x


class _WordSplit:
    """``nestedfp_split`` / ``nestedfp_merge`` on FP16 words, shaped like a format."""

    def __init__(self):
        from mactile.golden import nestedfp_merge, nestedfp_split
        self.split, self.merge = nestedfp_split, nestedfp_merge

    def quantize(self, x):
        return self.split(x.astype(np.float16) if x.dtype != np.float16 else x)

    def dequantize(self, q):
        return self.merge(*q)


def build(name: str, opts: dict):
    if name == "nestedfp-words":
        return _WordSplit()
    from mactile.golden import get_format
    return get_format(name, **opts)


def time_case(name, opts, rows, cols, repeat):
    fmt = build(name, opts)
    x = make_input(name, rows, cols)
    tq, td, cq, cd = [], [], [], []
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        q = fmt.quantize(x)
        c1, t1 = time.process_time(), time.perf_counter()
        y = fmt.dequantize(q)
        c2, t2 = time.process_time(), time.perf_counter()
        tq.append(t1 - t0)
        td.append(t2 - t1)
        cq.append(c1 - c0)
        cd.append(c2 - c1)
        del q, y
    return min(tq), min(td), min(cq), min(cd)


def memory_case(name, opts, rows, cols):
    """Runs in a subprocess: peak extra bytes (tracemalloc) of quantize, of dequantize, and
    of both in a row with the quantized tensor kept (what ``roundtrip`` needs)."""
    import tracemalloc

    fmt = build(name, opts)
    x = make_input(name, rows, cols)
    fmt.dequantize(fmt.quantize(x[:16, :]))  # warm caches (tables) outside the measurement
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    q = fmt.quantize(x)
    peak_q = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.reset_peak()
    base_d = tracemalloc.get_traced_memory()[0]
    y = fmt.dequantize(q)
    peak_d = tracemalloc.get_traced_memory()[1] - base_d
    tracemalloc.stop()
    del y
    return {"quantize_peak_bytes": peak_q, "dequantize_peak_bytes": peak_d,
            "both_peak_bytes": max(peak_q, base_d - base + peak_d), "input_bytes": x.nbytes}


def _loadavg():
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--formats", help="comma-separated labels or registry names (default: all)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "golden_throughput.json"))
    ap.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.memory_child:
        name, opts = json.loads(args.memory_child)
        print(json.dumps(memory_case(name, opts, args.rows, args.cols)))
        return 0

    cases = CASES
    if args.formats:
        want = set(args.formats.split(","))
        cases = [c for c in CASES if c[0] in want or c[1] in want]
        if not cases:
            ap.error(f"no format matches {args.formats!r}")
    from mactile.golden.block import _threads

    n = args.rows * args.cols
    results = []
    load_before = _loadavg()
    header = (f"{'format':<22} {'quantize':>9} {'dequant':>9} {'both':>9} {'target':>7} "
              f"{'peak q':>7} {'peak dq':>7} {'peak':>6}")
    print(f"golden throughput, {args.rows}x{args.cols} float32, M elements/s wall clock "
          f"(best of {args.repeat}); peak extra memory in copies of the input (quantize, "
          f"dequantize, both in a row); threads={_threads()}, load average {load_before}")
    print(header)
    print("-" * len(header))
    for label, name, opts, target in cases:
        tq, td, cq, cd = time_case(name, opts, args.rows, args.cols, args.repeat)
        row = {"format": label, "name": name, "options": opts,
               "quantize_melem_s": n / tq / 1e6, "dequantize_melem_s": n / td / 1e6,
               "both_melem_s": n / (tq + td) / 1e6, "target_both_melem_s": target,
               "quantize_s": tq, "dequantize_s": td,
               "quantize_cpu_s": cq, "dequantize_cpu_s": cd}
        if not args.no_memory:
            out = subprocess.run(
                [sys.executable, __file__, "--rows", str(args.rows), "--cols", str(args.cols),
                 "--memory-child", json.dumps([name, opts])],
                capture_output=True, text=True, check=True, env=os.environ.copy())
            mem = json.loads(out.stdout.strip().splitlines()[-1])
            row.update(mem)
            for phase in ("quantize", "dequantize", "both"):
                row[f"{phase}_peak_copies"] = mem[f"{phase}_peak_bytes"] / mem["input_bytes"]
        results.append(row)
        tgt = f"{target:.0f}" if target else "-"
        pk = [f"{row[f'{p}_peak_copies']:.2f}" if f"{p}_peak_copies" in row else "-"
              for p in ("quantize", "dequantize", "both")]
        print(f"{label:<22} {row['quantize_melem_s']:>9.1f} {row['dequantize_melem_s']:>9.1f} "
              f"{row['both_melem_s']:>9.1f} {tgt:>7} {pk[0]:>7} {pk[1]:>7} {pk[2]:>6}",
              flush=True)

    record = {
        "benchmark": "benchmarks/golden_throughput.py",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_name(), "cpu_count": os.cpu_count(), "threads": _threads(),
        "numpy": np.__version__, "python": platform.python_version(),
        "load_average_before": load_before, "load_average_after": _loadavg(),
        "machine_note": "shared machine: other jobs may have run at the same time; "
                        "M elements/s are wall clock, *_cpu_s the process CPU time",
        "shape": [args.rows, args.cols], "dtype": "float32", "repeat": args.repeat,
        "max_extra_copies_target": MAX_EXTRA_COPIES,
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
