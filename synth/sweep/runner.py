"""Run a sweep: skip the jobs already recorded, run the rest, record each as it finishes.

:func:`run_sweep` is what ``mactile sweep SPEC -o DIR`` calls: the results database of
``DIR`` (:mod:`.store`) tells which jobs are done, the executor (:mod:`.executor`) runs the
others, each finished job's record is committed at once, and a progress line shows
done/running/failed, elapsed time and an estimate of the rest.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

from .executor import make_executor
from .jobs import run_job
from .spec import Spec
from .store import DB_NAME, ResultStore

__all__ = ["run_sweep", "SweepSummary", "Progress"]


@dataclass
class SweepSummary:
    """What one ``run_sweep`` call did."""

    total: int          # jobs in the spec
    skipped: int        # already recorded before this run
    ran: int            # recorded by this run
    failed: int         # of those, not ``ok``
    elapsed_s: float
    executor: str
    db: Path


def _hms(s: float) -> str:
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


class Progress:
    """Progress of a sweep on a stream: one rewritten line on a terminal, one line per
    finished job elsewhere (a log, CI).

    The estimate of what remains is the mean time per finished job of this run times the
    jobs left, divided by the jobs that run at once (the executor's slots).
    """

    def __init__(self, todo: int, skipped: int, slots: int, *, stream: TextIO | None = None,
                 enabled: bool = True):
        self.todo, self.skipped, self.slots = todo, skipped, max(1, slots)
        self.done = self.failed = 0
        self.t0 = time.perf_counter()
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and getattr(self.stream, "isatty", lambda: False)()

    def line(self) -> str:
        el = time.perf_counter() - self.t0
        running = min(self.slots, self.todo - self.done)
        eta = "-"
        if self.done:
            left = self.todo - self.done
            eta = _hms(el / self.done * left) if left else "0s"
        return (f"sweep: {self.done}/{self.todo} done ({self.skipped} recorded before), "
                f"{running} running, {self.failed} failed; elapsed {_hms(el)}, "
                f"remaining ~{eta}")

    def update(self, record: dict | None = None, label: str = "") -> None:
        if record is not None:
            self.done += 1
            self.failed += record["status"] != "ok"
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r\033[K" + self.line())
        else:
            if record is not None:
                self.stream.write(f"  {record['status']:<8} {label}  "
                                  f"{_figures(record)}\n")
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _figures(r: dict) -> str:
    if r["status"] != "ok":
        return (r.get("error") or "")[:160]
    fmax = f", fmax {r['fmax_mhz']:.0f} MHz" if r.get("fmax_mhz") else ""
    e = (f", {r['energy_per_op_pj']:.4g} pJ/{r['op']}" if r.get("energy_per_op_pj")
         is not None else "")
    return f"{r['area_um2']:.0f} um2{e}{fmax}" + ("" if r.get("meets_timing") else
                                                 " (fails timing)")


def _failure_record(job: dict, exc: BaseException) -> dict:
    from .jobs import _base

    rec = _base(job)
    rec.update(status="failed", error=f"{type(exc).__name__}: {exc}", worker=None,
               finished=time.time())
    return rec


class _Nothing:
    slots = 1

    def run(self, fn, items):
        return iter(())


def run_sweep(spec: Spec, out_dir: str | Path, *, cluster=None, workers: int | None = None,
              retry_failed: bool = False, progress: bool = True, stream: TextIO | None = None,
              job_fn: Callable[[dict], dict] = run_job, executor=None) -> SweepSummary:
    """Run the jobs of ``spec`` not yet recorded in ``out_dir``'s database.

    Parameters
    ----------
    cluster : str or distributed.Client, optional
        Dask scheduler; default the spec's ``cluster:``, else a local pool.
    workers : int, optional
        Local pool size (default: the spec's ``workers:``, else the usable CPUs).
    retry_failed : bool
        Run again the jobs whose latest record is ``failed`` or ``timeout``.
    job_fn : callable
        What runs a job (the benchmark's trivial job; default :func:`.jobs.run_job`).

    Raises
    ------
    KeyboardInterrupt
        Ctrl-C: queued jobs are cancelled, running local jobs stopped; what finished is
        recorded.
    """
    from mactile.golden.fileio import make_output_dir

    t0 = time.perf_counter()
    db = Path(out_dir) / DB_NAME
    done: set[str] = set()
    if db.exists() or db.is_symlink():
        with ResultStore(db, create=False) as store:
            done = store.done(retry_failed=retry_failed)
    todo = [j.to_dict() for j in spec.jobs if j.job_id not in done]
    skipped = len(spec.jobs) - len(todo)
    # The executor first: a scheduler that cannot be reached leaves nothing behind (no
    # output folder, no empty database). Nothing to run (a rerun): no pool started, no
    # scheduler contacted.
    ex = (executor or make_executor(cluster or spec.cluster, workers or spec.workers)
          if todo else _Nothing())
    try:
        where = ex.describe() if todo else "nothing to run"
        out = make_output_dir(out_dir)
        with ResultStore(out / DB_NAME) as store:
            store.begin_sweep(spec.name, spec.text, len(spec.jobs))
            if progress and todo:
                (stream or sys.stderr).write(
                    f"sweep {spec.name}: {len(spec.jobs)} jobs, {skipped} already recorded, "
                    f"{len(todo)} to run on {where}\n")
            bar = Progress(len(todo), skipped, ex.slots if todo else 1, stream=stream,
                           enabled=progress and bool(todo))
            labels = {j.job_id: j.label() for j in spec.jobs}
            failed = 0
            try:
                for job, outcome in ex.run(job_fn, todo):
                    rec = (outcome if isinstance(outcome, dict)
                           else _failure_record(job, outcome))
                    store.add(job, rec)
                    failed += rec["status"] != "ok"
                    bar.update(rec, labels.get(job["job_id"], job["design"]))
            finally:
                bar.close()
    finally:
        if executor is None and hasattr(ex, "close"):
            ex.close()
    return SweepSummary(total=len(spec.jobs), skipped=skipped, ran=bar.done, failed=failed,
                        elapsed_s=time.perf_counter() - t0, executor=where, db=out / DB_NAME)
