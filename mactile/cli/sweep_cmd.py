"""``mactile sweep``: design-space exploration over parameters, libraries and clocks.

Exit status: 0 every job of the spec has figures; 3 the sweep finished (every job
recorded, the report written) but some jobs failed, timed out or were not proven; 2 it
could not start (a bad spec, a parameter its builder refuses, a library that cannot be
read, an unusable output folder or database: nothing run); 1 it started but could not
finish (the executor was lost, the database or the report could not be written: what
finished is recorded, a rerun resumes); 130/143 Ctrl-C/SIGTERM.
"""
from __future__ import annotations

import sys
from pathlib import Path

from mactile.cli.common import (CliError, FailedRun, check_output_dir, check_outputs,
                                int_in, positive_int, seed_int)

#: The sweep finished, every job is recorded and the report written, but at least one of
#: the spec's jobs has no figures (failed, timeout or unproven).
EXIT_SOME_FAILED = 3


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="design-space sweep: parameters x libraries x clocks, Pareto report",
        description="Run every configuration a sweep spec (YAML) names through synthesis, "
                    "equivalence, timing and power, on a local process pool or a Dask "
                    "cluster. Each finished job is committed to DIR/sweep.sqlite at once: a "
                    "stopped sweep resumes where it stopped, and a finished one reruns "
                    "instantly. At the end (and with --report DIR) DIR gets sweep.csv, "
                    "sweep.md and Pareto plots per design family (pareto-FAMILY.png). "
                    "docs/sweep.md describes the spec.",
        epilog="Exit status: 0 every job has figures; 3 finished, but some jobs failed (the "
               "report says which); 2 could not start (bad spec or paths: nothing run); 1 "
               "started but could not finish (a rerun resumes).")
    p.add_argument("spec", metavar="SPEC.yaml", nargs="?",
                   help="the sweep spec (examples in examples/sweeps/)")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="output folder: results database and report")
    p.add_argument("--report", metavar="DIR",
                   help="only write the report of the sweep recorded in DIR")
    p.add_argument("--cluster", metavar="tcp://HOST:PORT",
                   help="run the jobs on this Dask scheduler (default: the spec's cluster:, "
                        "else a local process pool); needs pip install 'mactile[sweep]'")
    p.add_argument("--workers", "-j", type=int_in(1, 1024, "positive integer"), default=None,
                   metavar="N",
                   help="local pool size (default: the spec's workers:, else the CPUs)")
    p.add_argument("--random", type=positive_int, default=None, metavar="N",
                   help="run a random draw of N of the spec's configurations instead of its "
                        "search: (the same N and --seed draw the same ones)")
    p.add_argument("--seed", type=seed_int, default=0, metavar="S",
                   help="seed of --random (default 0)")
    p.add_argument("--retry-failed", action="store_true",
                   help="run again the jobs recorded as failed or timed out")
    p.add_argument("--dry-run", action="store_true",
                   help="list the jobs the spec expands to and which are recorded; run none")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.set_defaults(func=run)


def _load(path: str, args):
    from mactile.synth.sweep import SpecError, load_spec

    search = ({"method": "random", "budget": args.random, "seed": args.seed}
              if args.random else None)
    try:
        return load_spec(path, search=search)
    except SpecError as e:
        raise CliError(str(e)) from None


def _write_report(out: Path, name: str, plots: bool) -> dict:
    from mactile.synth.sweep import DB_NAME, ResultStore
    from mactile.synth.sweep.report import write_sweep_report

    try:
        store = ResultStore(out / DB_NAME, create=False)
    except FileNotFoundError as e:
        raise CliError(str(e)) from None
    with store:
        records = list(store.latest().values())
        for note in store.damaged:
            print(f"mactile: warning: {note}", file=sys.stderr)
        if not name:
            last = store.last_spec()
            name = last[0] if last else out.name
    if not records:
        raise CliError(f"the sweep in {str(out)!r} has no finished jobs yet")
    return write_sweep_report(records, out, name=name, plots=plots), records


def run(args) -> int:
    if args.report:
        if args.spec or args.output:
            raise CliError("--report DIR writes the report of a recorded sweep; give no "
                           "SPEC or -o with it")
        out = Path(args.report)
        if not out.is_dir():
            raise CliError(f"--report: {args.report!r} is not a folder with a sweep")
        files, records = _write_report(out, "", not args.no_plots)
        _print_files(files, records)
        return 0
    if not args.spec:
        raise CliError("give a sweep spec (SPEC.yaml) and -o DIR, or --report DIR")
    spec = _load(args.spec, args)
    if args.cluster:
        from mactile.synth.sweep.executor import check_cluster_address

        check_cluster_address(args.cluster)  # ValueError: exit 2, before anything
    if args.dry_run:
        return _dry_run(spec, args.output)
    if not args.output:
        raise CliError("give an output folder: -o DIR")
    out = check_output_dir(args.output)
    _check_before_work(spec, out, args)
    from mactile.synth.sweep import run_sweep
    from mactile.synth.sweep.executor import ExecutorLost

    try:
        summary = run_sweep(spec, out, cluster=args.cluster, workers=args.workers,
                            retry_failed=args.retry_failed, progress=not args.quiet)
    except ExecutorLost as e:
        raise FailedRun(str(e)) from None
    try:
        files, records = _write_report(out, spec.name, not args.no_plots)
    except (OSError, ValueError, RuntimeError, KeyError, TypeError) as e:
        from mactile.cli.main import error_message

        raise FailedRun(f"the sweep's jobs are recorded in {str(out)!r}, but its report could "
                        f"not be written: {error_message(e)[0]}; fix that and run `mactile "
                        f"sweep --report {out}`") from None
    print(f"sweep {spec.name}: {summary.total} jobs ({summary.skipped} already recorded, "
          f"{summary.ran} run now, {summary.failed} of them without figures) in "
          f"{summary.elapsed_s:.1f} s on {summary.executor}")
    _print_files(files, records)
    mine = {j.job_id for j in spec.jobs}
    bad = sum(1 for r in records if r["job_id"] in mine and r["status"] != "ok")
    if bad:
        print(f"mactile: {bad} of the sweep's {len(mine)} jobs have no figures (failed, "
              f"timeout or unproven: see {files['md']}); exit status {EXIT_SOME_FAILED}",
              file=sys.stderr)
        return EXIT_SOME_FAILED
    return 0


def _check_before_work(spec, out: Path, args) -> None:
    """Refuse, before the first job, what would make every job fail or the report fail
    after the work: parameters the builders refuse, builders that do not import, libraries
    that cannot be read (local runs), an unusable database or report path, plots without
    matplotlib."""
    from mactile.synth.sweep import SpecError
    from mactile.synth.sweep.spec import preflight

    if out.is_dir():  # else created by the run: nothing in it can be in the way
        _check_paths(spec, out, args)
    cluster = args.cluster or spec.cluster
    try:
        preflight(spec, libraries=not cluster)
    except SpecError as e:
        raise CliError(str(e)) from None
    if not args.no_plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CliError("the sweep's Pareto plots need matplotlib: pip install "
                           "'mactile[plot]', or give --no-plots") from None


def _check_paths(spec, out: Path, args) -> None:
    from mactile.synth.sweep import DB_NAME, ResultStore
    from mactile.synth.sweep.report import report_files

    families = list(dict.fromkeys(j.family for j in spec.jobs))
    files = report_files(out, families)
    if args.no_plots:
        files = {k: v for k, v in files.items() if not k.startswith("png:")}
    db = out / DB_NAME
    check_outputs(list(files.values()) + [db],
                  what=["report file"] * len(files) + ["results database"])
    if db.exists():  # an earlier sweep's: readable, and a sweep results database
        with ResultStore(db, create=False) as store:
            store.latest()


def _print_files(files: dict, records: list[dict]) -> None:
    counts = {}
    for r in records:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print("  records: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    for p in files.values():
        print(f"  wrote {p}")


def _dry_run(spec, output) -> int:
    from mactile.synth.sweep import DB_NAME, ResultStore

    done = set()
    if output and (Path(output) / DB_NAME).is_file():
        with ResultStore(Path(output) / DB_NAME, create=False) as store:
            done = store.done()
    how = (f"random draw of {len(spec.jobs)} of {spec.total_points}"
           if spec.search["method"] == "random" else "grid")
    print(f"sweep {spec.name}: {len(spec.jobs)} jobs ({how}), "
          f"{sum(j.job_id in done for j in spec.jobs)} recorded")
    for j in spec.jobs:
        mark = "recorded" if j.job_id in done else "to run"
        print(f"  {j.job_id}  {mark:<8}  {j.label()}")
    sys.stdout.flush()
    return 0
