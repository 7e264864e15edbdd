#!/usr/bin/env python3
"""Checked vectors per second of every MAC design under each simulator, and the wall time
of the MAC test suite. Prints a markdown table and records JSON + markdown.

Usage::

    python benchmarks/sim_throughput.py [-o docs/results] [--sims verilator,icarus]
        [--designs mac-int4,...] [--vectors N] [--repeat R] [--suite-time]

"Checked vectors/s" is what ``mactile sim`` reports: vectors divided by the time of the
stimulus generation with the golden model, packing, the simulation loop and the
comparison; build time and the simulator's start-up are reported apart. Every run builds
into a fresh build folder, so the first build also compiles Verilator's runtime objects.
Timings on a shared machine are noisy: the load average is recorded with them.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MACS = ["mac-int4", "mac-int5", "mac-int8", "mac-fp4", "mac-fp6-e2m3", "mac-fp6-e3m2",
        "mac-dialectfp4", "mac-dialectfp4-int4"]
DEFAULT_VECTORS = {"verilator": 262144, "icarus": 65536}
SUITE = ["tests/golden/test_mac.py", "tests/rtl/test_mac_rtl.py", "tests/sim"]


def environment() -> dict:
    import numpy

    from mactile.sim import simulator_status

    def ver(mod):
        try:
            from importlib.metadata import version
            return version(mod)
        except Exception:
            return None

    cpu = ""
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                   if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": platform.node(), "cpu": cpu, "cores": os.cpu_count(),
        "loadavg_start": os.getloadavg(), "python": platform.python_version(),
        "numpy": numpy.__version__, "amaranth": ver("amaranth"), "cocotb": ver("cocotb"),
        "verilator": simulator_status("verilator")[1], "icarus": simulator_status("icarus")[1],
        "note": "shared machine: other jobs ran at the same time; see loadavg",
    }


def bench_design(design, sim, vectors, repeat, root) -> dict:
    from mactile.sim import run

    t0 = time.perf_counter()
    first = run(design, suite="exhaustive", sim=sim, build_root=root)
    assert first.ok, first.summary()
    row = {"design": design, "sim": sim, "lanes": first.lanes, "depth": first.depth,
           "build_s": first.timings["build"], "first_run_s": time.perf_counter() - t0}
    for suite, n in (("exhaustive", None), ("random", vectors)):
        rates, loops, vecs, procs = [], [], None, []
        for k in range(repeat):
            r = run(design, suite=suite, vectors=n, seed=k, sim=sim, build_root=root)
            assert r.ok, r.summary()
            rates.append(r.vectors_per_s)
            loops.append(r.vectors / r.timings["loop"])
            procs.append(r.timings["process"])
            vecs = r.vectors
        row[suite] = {"vectors": vecs, "vectors_per_s": statistics.median(rates),
                      "all_vectors_per_s": rates,
                      "loop_only_vectors_per_s": statistics.median(loops),
                      "process_s": statistics.median(procs)}
    return row


def suite_time(root: Path) -> dict:
    env = dict(os.environ, MACTILE_SIM_BUILD=str(root))
    out = {}
    for label in ("cold", "warm"):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-q", "-p",
                            "no:cacheprovider", *SUITE], env=env, capture_output=True, text=True)
        out[label] = {"wall_s": time.perf_counter() - t0, "returncode": p.returncode,
                      "summary": (p.stdout.strip().splitlines() or [""])[-1],
                      "loadavg_after": os.getloadavg()}
    return out


def table(rows) -> str:
    lines = ["| design | simulator | lanes x depth | exhaustive vectors | exhaustive vectors/s "
             "| random vectors | random vectors/s | sim-loop vectors/s | build s |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        e, x = r["exhaustive"], r["random"]
        lines.append(f"| {r['design']} | {r['sim']} | {r['lanes']} x {r['depth']} "
                     f"| {e['vectors']:,} | {e['vectors_per_s']:,.0f} | {x['vectors']:,} "
                     f"| {x['vectors_per_s']:,.0f} | {x['loop_only_vectors_per_s']:,.0f} "
                     f"| {r['build_s']:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", default="docs/results", help="folder for the JSON/markdown")
    ap.add_argument("--sims", default="verilator,icarus")
    ap.add_argument("--designs", default=",".join(MACS))
    ap.add_argument("--vectors", type=int, help="random vectors per run (per-simulator default)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--suite-time", action="store_true",
                    help="also time the MAC test suite (cold, then warm build folder)")
    ap.add_argument("--name", default="sim_throughput")
    args = ap.parse_args(argv)

    from mactile.sim import simulator_status

    env = environment()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mactile-bench-") as tmp:
        for sim in args.sims.split(","):
            ok, why = simulator_status(sim)
            if not ok:
                print(f"skip {sim}: {why}")
                continue
            root = Path(tmp) / sim
            for d in args.designs.split(","):
                row = bench_design(d, sim, args.vectors or DEFAULT_VECTORS[sim], args.repeat, root)
                rows.append(row)
                print(f"{d:22s} {sim:9s} exhaustive {row['exhaustive']['vectors_per_s']:>10,.0f}/s  "
                      f"random {row['random']['vectors_per_s']:>10,.0f}/s  "
                      f"build {row['build_s']:.1f} s", flush=True)
        suite = suite_time(Path(tmp) / "suite") if args.suite_time else None
    env["loadavg_end"] = os.getloadavg()
    md = table(rows)
    print()
    print(md)
    if suite:
        for k, v in suite.items():
            print(f"MAC suite ({k} build folder): {v['wall_s']:.0f} s wall, {v['summary']}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(
        {"environment": env, "rows": rows, "suite": suite}, indent=1, default=str) + "\n")
    head = (f"Measured {env['date']} on {env['cpu']} ({env['cores']} cores, shared; load "
            f"{env['loadavg_start'][0]:.1f} -> {env['loadavg_end'][0]:.1f}); Verilator "
            f"{env['verilator']}, Icarus {env['icarus']}, cocotb {env['cocotb']}, "
            f"Python {env['python']}.\n\n")
    tail = ""
    if suite:
        tail = "\n\n" + "\n".join(f"MAC suite, {k} build folder: {v['wall_s']:.0f} s wall "
                                  f"({v['summary']})" for k, v in suite.items())
    (out / f"{args.name}.md").write_text(head + md + tail + "\n")
    print(f"wrote {out / (args.name + '.json')} and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
