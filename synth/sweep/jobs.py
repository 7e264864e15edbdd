"""One sweep job on a worker: build the design, run today's flow, return a record.

:func:`run_job` takes and returns plain data (a job dict, a record dict), so that it runs
unchanged in a local worker process and on a Dask worker on another machine: the record
travels back through the executor (the Dask scheduler), never through a shared file
system. Each worker uses its own synthesis cache (:func:`mactile.synth.libraries.cache_dir`),
keyed as every ``mactile synth`` run is (:mod:`mactile.synth.flow`).

A job never raises for a failure of its design: a builder that refuses its parameters,
a tool that fails or runs out of time, a netlist not proven equivalent, all come back as
a record with ``status`` ``failed``, ``timeout`` or ``unproven`` and the reason in
``error``. Only Ctrl-C (and SIGTERM in a worker) stops it.
"""
from __future__ import annotations

import importlib
import os
import platform
import time
import traceback

__all__ = ["run_job", "record_fields", "STATUSES", "METRIC_FIELDS"]

#: ``ok``: figures (proven, or unchecked with ``equivalence: false``); ``unproven``: the
#: netlist was not proven equivalent (no figures); ``timeout``: a tool ran past the
#: job's limit; ``failed``: anything else (the message says what).
STATUSES = ("ok", "unproven", "timeout", "failed")

#: The measured fields of a record: what two executors must agree on.
METRIC_FIELDS = ("status", "area_um2", "cell_count", "sequential_area_um2", "slack_ns",
                 "meets_timing", "fmax_mhz", "power_total_mw", "power_internal_mw",
                 "power_switching_mw", "power_leakage_mw", "energy_per_op_pj", "equivalence",
                 "rtl_sha256", "liberty_sha256", "error")


def record_fields() -> list[str]:
    """Every key of a record, in table order."""
    return ["job_id", "family", "design", "pdk", "clock_ns", "params", "overrides",
            "ops_per_cycle", "op", *METRIC_FIELDS, "activity_method", "cached", "runtime_s",
            "cpu_s", "worker", "started", "finished"]


def _build(job: dict):
    """(Rtl, component, group, reference) of the job's design."""
    from mactile.synth.rtl import component_rtl

    params = job["params"]
    if job.get("builder"):
        module, _, attr = job["builder"].partition(":")
        component = getattr(importlib.import_module(module), attr)(**params)
        return component_rtl(component, job["design"], params=params), component, "", ""
    from mactile.rtl.registry import get_design

    d = get_design(job["design"])
    component = d.load_builder()(**params)
    return component_rtl(component, d.name, params=params), component, d.group, d.reference


def _base(job: dict) -> dict:
    rec = {k: None for k in record_fields()}
    rec.update({k: job[k] for k in ("job_id", "family", "design", "pdk", "clock_ns", "params",
                                    "overrides", "ops_per_cycle", "op")})
    rec.update(cached=False, runtime_s=None, error="",
               worker=f"{platform.node()}:{os.getpid()}")
    return rec


def run_job(job: dict) -> dict:
    """Run one job (a :meth:`~.spec.Job.to_dict`); return its record (never raises for a
    failure of the design or the tools)."""
    from mactile.synth.activity import ActivityOptions
    from mactile.synth.flow import NOT_CHECKED, FlowOptions, synthesize
    from mactile.synth.libraries import resolve_library
    from mactile.synth.tools import ToolError

    rec = _base(job)
    rec["started"] = time.time()
    t0, c0 = time.perf_counter(), _cpu_s()
    m = job["measure"]
    try:
        lib = resolve_library(job["pdk"])
        act = ActivityOptions(method=m["workload"], cycles=m["cycles"], seed=m["seed"],
                              global_activity=m["global_activity"])
        opts = FlowOptions(clock_ns=job["clock_ns"], activity=act, timeout_s=m["timeout_s"],
                           prove=m["equivalence"])
        rtl, component, group, reference = _build(job)
        r = synthesize(rtl, lib, opts, component=component, group=group, reference=reference)
    except KeyboardInterrupt:
        raise
    except ToolError as e:
        rec["status"] = "timeout" if "timed out" in str(e) else "failed"
        rec["error"] = str(e)
    except Exception as e:  # noqa: BLE001 - a job's failure is a record, not a crash
        rec["status"] = "failed"
        rec["error"] = f"{type(e).__name__}: {e}"
        tb = traceback.extract_tb(e.__traceback__)
        if tb:
            rec["error"] += f" (at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno})"
    else:
        rec.update(rtl_sha256=r.rtl_sha256, liberty_sha256=r.liberty_sha256,
                   equivalence=r.equivalence, activity_method=r.activity_method,
                   cached=r.cached)
        if r.area_um2 is None:
            rec["status"] = "timeout" if r.failure == "timed out" else "unproven"
            rec["error"] = r.equivalence
        else:
            rec["status"] = "ok"
            if r.equivalence == NOT_CHECKED:
                rec["equivalence"] = "not checked"
            p = r.power_mw or {}
            rec.update(area_um2=r.area_um2, cell_count=r.cell_count,
                       sequential_area_um2=r.sequential_area_um2, slack_ns=r.slack_ns,
                       meets_timing=r.meets_timing,
                       power_total_mw=p.get("total"), power_internal_mw=p.get("internal"),
                       power_switching_mw=p.get("switching"),
                       power_leakage_mw=p.get("leakage"))
            # fmax: the clock at which the worst path would have zero slack (a combinational
            # design's inputs and outputs are constrained to the clock as well).
            if r.slack_ns is not None and r.clock_ns - r.slack_ns > 0:
                rec["fmax_mhz"] = 1e3 / (r.clock_ns - r.slack_ns)
            # mW x ns = pJ per cycle, shared by the operations of one cycle.
            if rec["power_total_mw"] is not None:
                rec["energy_per_op_pj"] = (rec["power_total_mw"] * r.clock_ns
                                           / job["ops_per_cycle"])
    rec["runtime_s"] = time.perf_counter() - t0
    rec["cpu_s"] = _cpu_s() - c0
    rec["finished"] = time.time()
    return rec


def _cpu_s() -> float:
    """CPU seconds of this process and its finished tool subprocesses (the job's CPU time
    where one worker process runs one job at a time; on a loaded machine it stays what a
    free core would need, while the wall time grows)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def trivial_job(job: dict) -> dict:
    """A job that does nothing (the benchmark's measure of the executor's own cost)."""
    rec = _base(job)
    rec.update(status="ok", runtime_s=0.0, started=time.time(), finished=time.time())
    return rec
