"""Many designs through the flow in parallel, and the report files.

:func:`run_designs` synthesizes registry designs on one library at one clock with a pool
of worker processes (each run is cached, see :mod:`.flow`). :func:`write_report` writes
``area_power.json`` (a list of records), ``area_power.csv``, ``area_power.md`` and PNG
plots grouped like the papers' tables.
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from mactile.golden.fileio import atomic_outputs, atomic_write

from .flow import FlowOptions, SynthResult, synthesize
from .libraries import Library, cache_dir
from .rtl import Rtl
from .tools import StaTool, ToolError, find_sta

__all__ = ["run_designs", "write_report", "report_files", "NoDesignMeetsTiming",
           "CSV_FIELDS", "format_markdown"]

#: Columns of area_power.csv (power in mW, area in um^2 as the liberty files give it).
CSV_FIELDS = ["design", "group", "pdk", "clock_ns", "area_um2", "cell_count", "slack_ns",
              "meets_timing", "power_internal_mw", "power_switching_mw", "power_leakage_mw",
              "power_total_mw", "activity_method", "equivalence"]


class NoDesignMeetsTiming(ValueError):
    """Every design fails timing at the requested clock."""


@dataclass(frozen=True)
class _Job:
    design: str
    rtl: Rtl
    lib: Library
    opts: FlowOptions
    sta: StaTool
    use_cache: bool


def _design_rtl(name: str) -> Rtl:
    # In a worker process: the registry design with its default parameters, as Verilog.
    from mactile.rtl.registry import get_design

    from .rtl import component_rtl

    d = get_design(name)
    return component_rtl(d.build(), d.name, params=d.params)


def _run_job(job: _Job) -> SynthResult:
    # In a worker process: the flow on RTL made in the first phase. Only the vcd activity
    # method simulates the Amaranth component itself, so only it builds the design again.
    from mactile.rtl.registry import get_design

    d = get_design(job.design)
    rtl = job.rtl
    component = d.build() if job.opts.activity.method == "vcd" else None
    try:
        return synthesize(rtl, job.lib, job.opts, component=component, group=d.group,
                          reference=d.reference, use_cache=job.use_cache, sta=job.sta)
    except ToolError as e:
        if "timed out" not in str(e):
            raise
        # A design too large for the time limit is a result of the report (no figures,
        # like an unproven netlist), not a reason to lose every other design's numbers.
        return SynthResult(design=d.name, pdk=job.lib.name, clock_ns=float(job.opts.clock_ns),
                           area_um2=None, cell_count=None, slack_ns=None, meets_timing=None,
                           power_mw=None, activity_method="-", equivalence=f"failed: {e}",
                           params=dict(d.params), group=d.group, reference=d.reference,
                           rtl_sha256=rtl.sha256, liberty=str(job.lib.source),
                           liberty_sha256=job.lib.sha256)


def _timings_file() -> Path:
    return cache_dir() / "timings.json"


def _load_timings() -> dict:
    try:
        return json.loads(_timings_file().read_text())
    except (OSError, ValueError):
        return {}


def _save_timings(results: list[SynthResult]) -> None:
    """Remember each design's measured run time (not cache hits) for the next schedule."""
    fresh = {f"{r.design}@{r.pdk}": r.runtime_s["total"] for r in results
             if not r.cached and r.runtime_s.get("total")}
    if not fresh:
        return
    data = {**_load_timings(), **fresh}
    atomic_write(_timings_file(), json.dumps(data, indent=1, sort_keys=True), make_parents=True)


def schedule(rtls: dict[str, Rtl], pdk: str) -> list[str]:
    """Designs longest first, so that the largest do not start last and run alone.

    A design's expected time is its last measured run on this library where the cache
    remembers one. A design never run there is estimated from the size of its Verilog at
    the highest seconds per byte measured on the library, so it is rather placed too
    early than too late; with nothing measured the order is by Verilog size alone.
    """
    seen = _load_timings()
    known = {n: seen[f"{n}@{pdk}"] for n in rtls if f"{n}@{pdk}" in seen}
    unknown = sorted((n for n in rtls if n not in known), key=lambda n: -len(rtls[n].verilog))
    if not known:
        return unknown
    # Seconds per byte of Verilog, from the designs measured here, to place the others.
    rate = max(known[n] / max(1, len(rtls[n].verilog)) for n in known)
    est = {**known, **{n: rate * len(rtls[n].verilog) for n in unknown}}
    return sorted(rtls, key=lambda n: -est[n])


def run_designs(names: Iterable[str], lib: Library, opts: FlowOptions, *, jobs: int = 2,
                use_cache: bool = True, progress: Callable[[str], None] | None = None
                ) -> list[SynthResult]:
    """Run the flow for registry designs ``names``; results in the order of ``names``.

    Two phases in one pool of worker processes: every design's RTL is written, then the
    flow runs on them longest first (:func:`schedule`).

    Raises
    ------
    ValueError
        An unknown design name.
    ToolError
        A tool failed on some design (the message names it and its log).
    """
    from mactile.rtl.registry import get_design

    names = list(dict.fromkeys(names))
    for n in names:
        get_design(n)  # unknown names fail here, before any work
    sta = find_sta()
    results: dict[str, SynthResult] = {}
    say = progress or (lambda s: None)
    t0 = time.perf_counter()
    try:
        if jobs <= 1 or len(names) <= 1:
            rtls = {n: _design_rtl(n) for n in names}
            for n in schedule(rtls, lib.name):
                results[n] = r = _run_job(_Job(n, rtls[n], lib, opts, sta, use_cache))
                say(_progress_line(r, t0))
        else:
            # No more workers than designs (on Linux the pool starts all of them at once).
            with ProcessPoolExecutor(max_workers=min(jobs, len(names)),
                                     initializer=_worker_init, initargs=(os.getpid(),)) as pool:
                futures = []
                try:
                    rtls = dict(zip(names, pool.map(_as_job, [_design_rtl] * len(names),
                                                    names)))
                    futures = [pool.submit(_as_job, _run_job,
                                           _Job(n, rtls[n], lib, opts, sta, use_cache))
                               for n in schedule(rtls, lib.name)]
                    for fut in as_completed(futures):
                        r = fut.result()
                        results[r.design] = r
                        say(_progress_line(r, t0))
                except BaseException:
                    for f in futures:
                        f.cancel()
                    _stop_workers(pool)
                    raise
    finally:
        _save_timings(list(results.values()))
    return [results[n] for n in names]


#: In a worker process: a job is running / the parent told the worker to stop / the pid
#: of the report that started it (0: not a report worker).
_worker_state = {"in_job": False, "stopping": False, "parent": 0}
_PR_SET_PDEATHSIG = 1


def _orphaned() -> bool:
    parent = _worker_state["parent"]
    return bool(parent) and os.getppid() != parent


def _worker_init(parent_pid: int = 0) -> None:
    """In each worker: SIGTERM stops the job as Ctrl-C does (its run folder removed, its
    tool subprocesses killed), and every job the pool had already queued returns at once.
    On Linux the kernel sends SIGTERM when the report dies (SIGKILL included), so no worker
    outlives it (they went on synthesizing); an orphaned worker exits after its cleanup."""
    import sys

    _worker_state["parent"] = parent_pid
    signal.signal(signal.SIGTERM, _on_worker_sigterm)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM),
                                                    0, 0, 0)
    if _orphaned():  # the report died before prctl took effect
        os._exit(1)


def _on_worker_sigterm(signum, frame):
    _worker_state["stopping"] = True
    if _worker_state["in_job"]:  # outside a job the pool's own loop must not be broken
        raise KeyboardInterrupt
    if _orphaned():
        os._exit(1)


def _as_job(fn, arg):
    """Run ``fn(arg)`` in a worker, unless the worker was told to stop."""
    if _worker_state["stopping"]:
        raise KeyboardInterrupt
    _worker_state["in_job"] = True
    try:
        return fn(arg)
    finally:
        _worker_state["in_job"] = False
        if _orphaned():  # the job has cleaned up; nobody waits for its result
            os._exit(1)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Tell running workers to stop (SIGTERM): Ctrl-C in a terminal reaches them through
    the process group, but a SIGTERM sent to this process alone would leave them running
    until their design is done, and the pool's shutdown would wait for them."""
    procs = getattr(pool, "_processes", None) or {}
    for proc in list(procs.values()):
        with contextlib.suppress(OSError, AttributeError, ValueError):
            if proc.is_alive():
                proc.terminate()


def _progress_line(r: SynthResult, t0: float) -> str:
    state = "cached" if r.cached else f"{r.runtime_s.get('total', 0):.1f} s"
    if not r.ok:
        return f"  {r.design:<24} {r.failure.upper()} ({state})"
    flag = "" if r.meets_timing else "  ** fails timing **"
    return (f"  {r.design:<24} {r.area_um2:>11.1f} um2 {r.power_mw['total']:>9.4f} mW "
            f"slack {_fmt(r.slack_ns, 3):>8} ns ({state}; {time.perf_counter() - t0:.0f} s){flag}")


def _fmt(x, digits=4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if not math.isfinite(x):
            return str(x)
        return f"{x:.{digits}f}"
    return str(x)


def check_timing(results: list[SynthResult]) -> None:
    """:class:`NoDesignMeetsTiming` when no equivalent design meets timing."""
    done = [r for r in results if r.ok and r.slack_ns is not None]
    if done and not any(r.meets_timing for r in done):
        best = max(done, key=lambda r: r.slack_ns)
        clock = best.clock_ns
        need = clock - best.slack_ns
        raise NoDesignMeetsTiming(
            f"no design meets timing at a {clock:g} ns clock (best: {best.design}, slack "
            f"{best.slack_ns:.3f} ns, needs at least {need:.3f} ns on {best.pdk}); choose a "
            f"longer --clock-ns")


def _csv_row(r: SynthResult) -> dict:
    p = r.power_mw or {}
    return {"design": r.design, "group": r.group, "pdk": r.pdk, "clock_ns": r.clock_ns,
            "area_um2": r.area_um2, "cell_count": r.cell_count, "slack_ns": r.slack_ns,
            "meets_timing": r.meets_timing, "power_internal_mw": p.get("internal"),
            "power_switching_mw": p.get("switching"), "power_leakage_mw": p.get("leakage"),
            "power_total_mw": p.get("total"), "activity_method": r.activity_method,
            "equivalence": "proven" if r.ok else "failed"}


def format_csv(results: list[SynthResult]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for r in results:
        w.writerow({k: ("" if v is None else v) for k, v in _csv_row(r).items()})
    return buf.getvalue()


def _groups(results: list[SynthResult]) -> dict[str, list[SynthResult]]:
    groups: dict[str, list[SynthResult]] = {}
    for r in results:
        groups.setdefault(r.group or "other", []).append(r)
    return groups


def format_markdown(results: list[SynthResult], *, title: str = "Area and power") -> str:
    """The report as Markdown tables, one per design group."""
    lines = [f"# {title}", ""]
    pdks = sorted({r.pdk for r in results})
    clocks = sorted({r.clock_ns for r in results})
    lines.append(f"Library: {', '.join(pdks)}; clock {', '.join(f'{c:g}' for c in clocks)} ns. "
                 "Area from Yosys `stat -liberty` (um^2), power from OpenSTA `report_power` "
                 "(mW), slack = worst setup slack at the clock. Every netlist is proven "
                 "equivalent to its RTL before it gets a number.")
    # One line per activity method, naming its designs: a design's clause is findable
    # (one joined paragraph of every method ran to thousands of characters).
    by_method: dict[str, list[str]] = {}
    for r in results:
        by_method.setdefault(r.activity_method or "not measured", []).append(r.design)
    lines += ["", "Activity (how each design's switching activity for power was obtained):", ""]
    lines += [f"- {', '.join(dict.fromkeys(ds))}: {m}" for m, ds in sorted(by_method.items())]
    for group, rs in _groups(results).items():
        lines += ["", f"## {group}", "",
                  "| design | area (um^2) | cells | slack (ns) | timing | internal (mW) | "
                  "switching (mW) | leakage (mW) | total (mW) |",
                  "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
        for r in rs:
            if not r.ok:
                lines.append(f"| {r.design} | {r.failure}: no figures | | | | | | | |")
                continue
            p = r.power_mw
            timing = "met" if r.meets_timing else "**VIOLATED**"
            lines.append(f"| {r.design} | {r.area_um2:.1f} | {r.cell_count} | "
                         f"{_fmt(r.slack_ns, 3)} | {timing} | {p['internal']:.4g} | "
                         f"{p['switching']:.4g} | {p['leakage']:.3g} | {p['total']:.4g} |")
    return "\n".join(lines) + "\n"


def plot_groups(results: list[SynthResult], path: Path) -> None:
    """One PNG: area and total power per design, one row of two panels per group."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = {g: [r for r in rs if r.ok] for g, rs in _groups(results).items()}
    groups = {g: rs for g, rs in groups.items() if rs}
    n = max(1, len(groups))
    fig, axes = plt.subplots(n, 2, figsize=(11, 2.2 + 1.9 * n), squeeze=False)
    for row, (group, rs) in enumerate(groups.items()):
        names = [r.design for r in rs]
        colors = ["tab:blue" if r.meets_timing else "tab:red" for r in rs]
        for col, (vals, label) in enumerate((([r.area_um2 for r in rs], "area (um$^2$)"),
                                             ([r.power_mw["total"] for r in rs], "power (mW)"))):
            ax = axes[row][col]
            ax.barh(names, vals, color=colors)
            # A group whose values span more than two decades (decoders beside tensor
            # cores) on a log axis, so that every bar shows.
            log = min(vals) > 0 and max(vals) / min(vals) > 100
            if log:
                ax.set_xscale("log")
            for y, v in enumerate(vals):
                ax.annotate(f"{v:,.0f}" if v >= 1000 else f"{v:.3g}", (v, y), xytext=(3, 0),
                            textcoords="offset points", va="center", fontsize=7)
            ax.margins(x=0.3 if log else 0.2)
            ax.invert_yaxis()
            ax.set_xlabel(label + (" (log scale)" if log else ""))
            ax.set_title(group if col == 0 else f"{group}: power", fontsize=9)
            ax.tick_params(labelsize=8)
    r0 = results[0]
    fig.suptitle(f"{r0.pdk}, clock {r0.clock_ns:g} ns (red: fails timing)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report_files(out_dir: Path) -> dict[str, Path]:
    names = {"json": "area_power.json", "csv": "area_power.csv", "md": "area_power.md",
             "png": "area_power.png"}
    return {k: out_dir / v for k, v in names.items()}


def write_report(results: list[SynthResult], out_dir: Path, *, plots: bool = True) -> dict[str, Path]:
    """Write the JSON/CSV/Markdown (and PNG) report into ``out_dir``, all or nothing."""
    files = report_files(Path(out_dir))
    if not plots:
        files.pop("png")
    keys = list(files)
    with atomic_outputs(*files.values(), make_parents=True) as tmps:
        tmp = dict(zip(keys, tmps))
        tmp["json"].write_text(json.dumps([r.record() for r in results], indent=1) + "\n")
        tmp["csv"].write_text(format_csv(results))
        tmp["md"].write_text(format_markdown(results))
        if plots:
            plot_groups(results, tmp["png"])
    return files


def default_jobs() -> int:
    """Worker processes: the CPUs this process may use (the 2-core CI machine: 2)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)
