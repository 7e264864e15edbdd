#!/usr/bin/env python3
"""How `mactile sweep` scales: jobs per hour with 1 and 2 workers, the executor's own cost
per job, and what a 1,000-configuration sweep costs on N machines (derived from them).

Usage::

    python benchmarks/sweep_scaling.py [-o docs/results] [--trivial 300] [--real 8]

Three measurements, each on the local process pool and on a Dask ``LocalCluster`` (worker
processes, one thread each):

1. **Overhead per job**: ``--trivial`` jobs that do nothing (:func:`~mactile.synth.sweep.
   jobs.trivial_job`) through the whole path of a sweep (submit, run, result back through
   the executor, the SQLite commit, the progress accounting), with 1 and 2 workers:
   wall time / jobs.
   The best of ``--repeat`` runs is kept (all are recorded).
2. **Jobs per hour** on real jobs: ``--real`` MAC configurations on osu018 (the flow with
   its equivalence proof and simulated power), each run with an empty synthesis cache,
   with 1 and 2 workers.
3. **The 1,000-configuration estimate**: T(N machines, c workers each) = 1000 x t_job /
   (N x c) + 1000 x t_overhead (the scheduler hands out jobs one at a time), for the MAC
   jobs measured here and for a 16x16 tensor core (its flow time on osu018 recorded in
   docs/results/synth/osu018-10ns/area_power.json, plus the build time measured here
   on MAC jobs). It assumes every machine runs as fast as one core here and that each
   worker has its own core; the shared machine's load is recorded with the numbers.

Results: ``sweep_scaling.json`` and ``sweep_scaling.md`` in the output folder.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

REAL_DESIGNS = ["mac-int4", "mac-fp4", "mac-int8", "mac-dialectfp4"]


def environment() -> dict:
    from importlib.metadata import version

    cpu = ""
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                   if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "host": platform.node(), "cpu": cpu, "cores": os.cpu_count(),
            "usable_cores": len(os.sched_getaffinity(0)), "loadavg_start": os.getloadavg(),
            "python": platform.python_version(), "dask": version("dask"),
            "distributed": version("distributed"),
            "note": "shared machine (2 cores, other engineers' jobs ran at the same time): "
                    "see loadavg"}


def trivial_spec(n: int, tag: str):
    from mactile.synth.sweep.spec import Job, Measure, Spec

    m = Measure()
    jobs = tuple(Job(design="trivial", family="trivial", params={"i": i, "tag": tag},
                     pdk="osu018", clock_ns=10.0, measure=m) for i in range(n))
    return Spec(name=f"trivial-{tag}", jobs=jobs, search={"method": "grid"})


def real_spec(n: int):
    from mactile.synth.sweep import parse_spec

    designs = []
    for d in REAL_DESIGNS:
        designs.append({"design": d, "family": "mac", "grid": {"product_register": [False, True]}})
    spec = parse_spec({"name": "scaling", "libraries": ["osu018"], "clocks_ns": [10],
                       "designs": designs})
    return spec.__class__(**{**spec.__dict__, "jobs": spec.jobs[:n]})


class _Cluster:
    """A Dask LocalCluster of ``n`` worker processes (one thread each), or none."""

    def __init__(self, n: int | None):
        self.n, self.cluster = n, None

    def __enter__(self):
        if self.n:
            from distributed import LocalCluster

            self.cluster = LocalCluster(n_workers=self.n, threads_per_worker=1, processes=True,
                                        dashboard_address=None)
            return self.cluster.scheduler_address
        return None

    def __exit__(self, *exc):
        if self.cluster is not None:
            self.cluster.close()


def run_once(spec, executor: str, workers: int, job_fn, cache: Path | None) -> dict:
    from mactile.synth.sweep import DB_NAME, ResultStore, run_sweep

    if cache is not None:
        os.environ["MACTILE_CACHE_DIR"] = str(cache)
    with tempfile.TemporaryDirectory(dir=REPO / "out") as d:
        with _Cluster(workers if executor == "dask" else None) as address:
            if address:  # the workers' first task imports mactile: not a per-job cost
                from mactile.synth.sweep.jobs import trivial_job

                run_sweep(trivial_spec(4 * workers, "warm-up"), Path(d) / "warm-up",
                          cluster=address, progress=False, job_fn=trivial_job)
            t0 = time.perf_counter()
            s = run_sweep(spec, d, cluster=address, workers=workers, progress=False,
                          job_fn=job_fn)
            wall = time.perf_counter() - t0
        with ResultStore(Path(d) / DB_NAME, create=False) as store:
            recs = list(store.latest().values())
    assert s.ran == len(spec.jobs), (s, len(spec.jobs))
    bad = [r for r in recs if r["status"] != "ok"]
    if bad:
        raise RuntimeError(f"{len(bad)} jobs failed: {bad[0]['error']}")
    job_times = [r["runtime_s"] for r in recs]
    cpu_times = [r.get("cpu_s") or 0.0 for r in recs]
    return {"executor": executor, "workers": workers, "jobs": len(spec.jobs), "wall_s": wall,
            "per_job_wall_s": wall / len(spec.jobs),
            "jobs_per_hour": 3600 * len(spec.jobs) / wall,
            "mean_job_runtime_s": statistics.fmean(job_times),
            "mean_job_cpu_s": statistics.fmean(cpu_times),
            "loadavg_after": os.getloadavg()}


def estimate(t_job: float, overhead: float, machines: int, workers_per_machine: int,
             n_configs: int = 1000) -> float:
    """Hours for ``n_configs`` jobs: compute spread over every worker, plus the
    scheduler's per-job cost paid in sequence."""
    return (n_configs * t_job / (machines * workers_per_machine) + n_configs * overhead) / 3600


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", default="docs/results")
    ap.add_argument("--trivial", type=int, default=300, help="trivial jobs per run")
    ap.add_argument("--real", type=int, default=8, help="real MAC jobs per run (<= 8)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of the trivial jobs (best kept)")
    ap.add_argument("--executors", default="local,dask")
    args = ap.parse_args()
    from mactile.synth.sweep.jobs import run_job, trivial_job

    (REPO / "out").mkdir(exist_ok=True)
    env = environment()
    executors = args.executors.split(",")
    trivial, real = [], []
    for ex in executors:
        for w in (1, 2):
            # Best of --repeat: the machine is shared, the least disturbed run is the cost.
            runs = [run_once(trivial_spec(args.trivial, f"{ex}{w}-{i}"), ex, w, trivial_job,
                             None) for i in range(args.repeat)]
            r = min(runs, key=lambda x: x["wall_s"])
            r["all_per_job_wall_s"] = [x["per_job_wall_s"] for x in runs]
            trivial.append(r)
            print(f"trivial {ex:<5} {w} worker(s): {r['per_job_wall_s'] * 1e3:7.2f} ms/job "
                  f"({r['jobs']} jobs in {r['wall_s']:.2f} s)", flush=True)
    base_cache = Path(tempfile.mkdtemp(prefix="sweep-bench-cache-", dir=REPO / "out"))
    for ex in executors:
        for w in (1, 2):
            cache = base_cache / f"{ex}-{w}"  # empty: every job synthesizes
            r = run_once(real_spec(args.real), ex, w, run_job, cache)
            real.append(r)
            print(f"real    {ex:<5} {w} worker(s): {r['jobs_per_hour']:7.0f} jobs/h "
                  f"({r['jobs']} jobs in {r['wall_s']:.1f} s, mean job "
                  f"{r['mean_job_runtime_s']:.1f} s)",
                  flush=True)

    # The estimate: per-job overhead of the Dask path with one worker (everything a job
    # costs besides its work, in sequence: the conservative figure), job time of one MAC
    # job run alone (1 worker), and a 16x16 tensor core's flow time from the report.
    overhead = next(r["per_job_wall_s"] for r in trivial
                    if r["executor"] == executors[-1] and r["workers"] == 1)
    # A job's CPU time (its process and tools): what a dedicated core needs, which the
    # wall time on this shared, loaded machine overstates.
    t_mac = next(r["mean_job_cpu_s"] for r in real if r["workers"] == 1)
    tc = json.loads((REPO / "docs/results/synth/osu018-10ns/area_power.json").read_text())
    t_tc = next(r["runtime_s"]["total"] for r in tc if r["design"] == "nvfp4-tc")
    machines = [1, 2, 4, 8, 16, 32, 64]
    rows = []
    for name, t in (("MAC unit (CPU time per job, measured here)", t_mac),
                    ("16x16 NVFP4 tensor core (report's flow time)", t_tc)):
        for cores in (2, 16):
            rows.append({"job": name, "t_job_s": t, "workers_per_machine": cores,
                         "hours": {n: estimate(t, overhead, n, cores) for n in machines}})
    res = {"environment": env, "trivial": trivial, "real": real,
           "estimate": {"configs": 1000, "overhead_s": overhead, "rows": rows,
                        "machines": machines,
                        "model": "hours = (1000 t_job / (N machines x c workers) + 1000 "
                                 "t_overhead) / 3600; t_job = a job's CPU time here, every "
                                 "worker on a core of its own as fast as one here"}}
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    from mactile.golden.fileio import atomic_write

    atomic_write(out / "sweep_scaling.json", json.dumps(res, indent=1) + "\n")
    md = markdown(res)
    atomic_write(out / "sweep_scaling.md", md)
    print(md)
    return 0


def markdown(res: dict) -> str:
    env = res["environment"]
    lines = ["# Sweep scaling (benchmarks/sweep_scaling.py)", "",
             f"Measured {env['date']} on {env['host']} ({env['cpu']}, {env['usable_cores']} "
             f"usable cores; load average at start {env['loadavg_start'][0]:.2f}; "
             f"dask/distributed {env['distributed']}). {env['note']}.", "",
             "## Executor overhead per job (trivial jobs, best of the runs)", "",
             "| executor | workers | jobs | wall (s) | per job (ms) |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for r in res["trivial"]:
        lines.append(f"| {r['executor']} | {r['workers']} | {r['jobs']} | {r['wall_s']:.2f} | "
                     f"{r['per_job_wall_s'] * 1e3:.2f} |")
    lines += ["", "## Real jobs: MAC units on osu018 (empty cache, proof and simulated power)",
              "", "| executor | workers | jobs | wall (s) | mean job wall (s) | mean job CPU (s) "
              "| jobs/hour | speed-up |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in res["real"]:
        one = next(x for x in res["real"] if x["executor"] == r["executor"] and x["workers"] == 1)
        lines.append(f"| {r['executor']} | {r['workers']} | {r['jobs']} | {r['wall_s']:.1f} | "
                     f"{r['mean_job_runtime_s']:.1f} | {r.get('mean_job_cpu_s', 0):.1f} | "
                     f"{r['jobs_per_hour']:.0f} | "
                     f"{r['jobs_per_hour'] / one['jobs_per_hour']:.2f} |")
    e = res["estimate"]
    lines += ["", f"## A 1,000-configuration sweep on N machines (derived)", "",
              f"Model: {e['model']}; t_overhead = {e['overhead_s'] * 1e3:.1f} ms (the trivial "
              f"jobs' wall time per job through Dask with one worker, above).", "",
              "| job | t_job (s) | workers/machine | " + " | ".join(f"N={n}" for n in e["machines"])
              + " |", "| --- | ---: | ---: | " + " | ".join("---:" for _ in e["machines"]) + " |"]
    for row in e["rows"]:
        lines.append(f"| {row['job']} | {row['t_job_s']:.1f} | {row['workers_per_machine']} | "
                     + " | ".join(_h(row["hours"][n] if isinstance(next(iter(row["hours"])), int)
                                     else row["hours"][str(n)]) for n in e["machines"]) + " |")
    return "\n".join(lines) + "\n"


def _h(hours: float) -> str:
    return f"{hours * 60:.1f} min" if hours < 1 else f"{hours:.1f} h"


if __name__ == "__main__":
    sys.exit(main())
