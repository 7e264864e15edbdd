"""``mactile report``: area, timing and power of every design, and the paper view."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from mactile.cli.common import (MAX_CLOCK_NS, CliError, FailedRun, check_output_dir,
                                int_in, positive_float)
from mactile.cli.synth_cmd import add_flow_args, flow_setup


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="area/power report of all designs (JSON, CSV, Markdown, PNG)",
        description="Synthesize designs in parallel on one library at one clock (cached: an "
                    "unchanged design is not synthesized again) and write area_power.json, "
                    ".csv, .md and .png into the output folder. With --paper, run the "
                    "papers' tables on their libraries and clocks instead and write the "
                    "paper view (paper.md, paper.json) beside one report per library.")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output folder")
    p.add_argument("--clock-ns", type=positive_float("a clock period in ns", upper=MAX_CLOCK_NS),
                   default=None,
                   metavar="T",
                   help="clock period in ns (default 10)")
    p.add_argument("--designs", nargs="+", metavar="NAME",
                   help="designs (default: every registered design but the hours-long "
                        "16 x 16 output-stationary tensor cores, about 8 min on 2 cores "
                        "with an empty cache, seconds when cached; 'all': every one)")
    p.add_argument("--jobs", "-j", type=int_in(1, 1024, "positive integer"), default=None,
                   metavar="N",
                   help="parallel synthesis jobs (default: the CPUs available)")
    p.add_argument("--paper", action="store_true",
                   help="the papers' tables side by side with ours (their libraries/clocks)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plot")
    add_flow_args(p)
    p.set_defaults(func=run)


def _say(msg: str) -> None:
    print(msg, flush=True)


def run(args) -> int:
    from mactile.rtl.registry import DESIGNS
    from mactile.synth.flow import DEFAULT_CLOCK_NS
    from mactile.synth.report import default_jobs

    out = check_output_dir(args.output)  # before the work, which takes minutes
    if args.jobs is not None and args.jobs < 1:
        raise CliError(f"--jobs must be at least 1, got {args.jobs}")
    jobs = args.jobs or default_jobs()
    if not DESIGNS:
        raise CliError("no designs are registered (rtl/registry.py DESIGNS is empty)")
    if args.designs == ["all"]:
        args.designs = list(DESIGNS)
    if args.designs:
        unknown = [d for d in args.designs if d not in DESIGNS]
        if unknown:
            raise CliError(f"unknown design(s) {', '.join(unknown)}; known designs: "
                           f"{', '.join(sorted(DESIGNS))}")
    if args.paper:
        if args.pdk or args.liberty or args.clock_ns is not None:
            raise CliError("--paper runs each table on its own library and clock; "
                           "drop --pdk/--liberty/--clock-ns")
        return _run_paper(args, out, jobs)
    clock = args.clock_ns if args.clock_ns is not None else DEFAULT_CLOCK_NS
    lib, opts = flow_setup(args, clock)
    names = args.designs or [n for n, d in DESIGNS.items() if d.in_default_report]
    results = _run_set(names, lib, opts, jobs, args)
    from mactile.synth.report import NoDesignMeetsTiming, check_timing, write_report

    files = write_report(results, out, plots=not args.no_plots and _have_matplotlib())
    _summary(results, files)
    try:
        check_timing(results)
    except NoDesignMeetsTiming as e:
        # The figures at this clock are measured and written (the tables flag the failing
        # timing: the tensor cores' one-cycle FP32 accumulate loop misses 10 ns on osu018
        # by design); the clock to ask for next is the useful news.
        print(f"mactile: warning: {e}", file=sys.stderr)
    return _status(results)


def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("mactile: note: matplotlib not installed; no PNG plot (pip install "
              "'mactile[plot]')", file=sys.stderr)
        return False
    return True


def _run_set(names, lib, opts, jobs, args):
    from mactile.synth.report import run_designs
    from mactile.synth.tools import ToolError, ToolMissing

    _say(f"synthesizing {len(names)} design(s) on {lib.name} at {opts.clock_ns:g} ns "
         f"with {jobs} job(s)")
    t0 = time.perf_counter()
    try:
        results = run_designs(names, lib, opts, jobs=jobs, use_cache=not args.no_cache,
                              progress=_say)
    except (ToolMissing, ValueError) as e:
        raise CliError(str(e)) from None
    except ToolError as e:  # the tool ran and failed: a failed run, its log named
        raise FailedRun(str(e)) from None
    _say(f"done in {time.perf_counter() - t0:.1f} s")
    return results


def _summary(results, files) -> None:
    for f in files.values():
        _say(f"wrote {f}")
    slow = [r.design for r in results if r.ok and not r.meets_timing]
    if slow:
        print(f"mactile: warning: {len(slow)} design(s) fail timing: {', '.join(slow)}",
              file=sys.stderr)


def _status(results) -> int:
    bad = [r.design for r in results if not r.ok]
    if bad:
        print(f"mactile: error: no figures for {', '.join(bad)}: netlist not proven "
              f"equivalent to its RTL, or a tool ran past --timeout (the records' "
              f"'equivalence' field says which)", file=sys.stderr)
        return 1
    return 0


def _run_paper(args, out: Path, jobs: int) -> int:
    from mactile.rtl.registry import DESIGNS
    from mactile.synth.libraries import LibraryError, resolve_library
    from mactile.synth.paper import (compare, cross_format, load_comparisons, load_tables,
                                     paper_configs, write_paper_view)
    from mactile.synth.report import write_report

    tables, specs = load_tables(), load_comparisons()
    known = set(args.designs or DESIGNS)
    configs = paper_configs(tables, known, specs)
    if not configs:
        raise CliError("none of the papers' table designs is registered yet")
    results, skipped = [], {}
    for cfg in configs:
        try:
            resolve_library(cfg.pdk)
        except LibraryError as e:
            skipped[cfg.pdk] = "library not found"
            print(f"mactile: note: skipping the {cfg.pdk} tables: {e}", file=sys.stderr)
            continue
        args.pdk, args.liberty = cfg.pdk, None
        args.workload = cfg.workload  # the table's stimulus (paper_tables.yaml)
        lib, opts = flow_setup(args, cfg.clock_ns)
        rs = _run_set(list(cfg.designs), lib, opts, jobs, args)
        for r in rs:
            r.workload = cfg.workload
        wl = "" if cfg.workload == "bench" else f"-{cfg.workload}"
        # "paper-" keeps these subsets apart from a full report of the same library and
        # clock written into the same folder (docs/results/synth holds both)
        sub = out / f"paper-{cfg.pdk}-{cfg.clock_ns:g}ns{wl}"
        files = write_report(rs, sub, plots=not args.no_plots and _have_matplotlib())
        _summary(rs, files)
        results += rs
    if not results:  # every table's library is missing: nothing to compare
        raise CliError(f"--paper measured nothing: no library of the papers' tables is "
                       f"available ({', '.join(sorted(skipped))} not found); set "
                       f"MACTILE_PDK_DIR to the folder holding them (README: where the "
                       f"liberty files come from); nothing written")
    if skipped:
        print(f"mactile: note: not measured: the tables on {', '.join(sorted(skipped))} "
              f"(library not found); their rows say 'not run'", file=sys.stderr)
    comparisons = compare(tables, results, skipped_pdks=skipped)
    files = write_paper_view(comparisons, out, cross_format(specs, results))
    for f in files.values():
        _say(f"wrote {f}")
    return _status(results)
