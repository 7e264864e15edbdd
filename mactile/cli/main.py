"""Entry point of the ``mactile`` command.

Each subcommand lives in its own module with a ``register(subparsers)`` function that adds
its parser and sets ``func``. Modules import heavy dependencies (Amaranth, cocotb, CuPy,
matplotlib) inside their functions, so ``mactile --help`` works with the core install.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from mactile import __version__
from mactile.cli.common import CliError

#: Subcommand modules, in the order ``--help`` lists them.
COMMANDS = [
    "mactile.cli.list_cmd",
    "mactile.cli.quantize",
    "mactile.cli.formats",
    "mactile.cli.bench",
    "mactile.cli.generate",
    "mactile.cli.sim",
    "mactile.cli.synth_cmd",
    "mactile.cli.report_cmd",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mactile",
        description="Design, verify and measure low-precision number formats: golden "
                    "models, RTL, simulation, synthesis and GPU kernels.")
    parser.add_argument("--version", action="version", version=f"mactile {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Commands that take a design's parameters as flags (generate, sim) read the rest.
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "design_param_flags", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    try:
        return int(args.func(args) or 0)
    except CliError as e:
        print(f"mactile: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mactile: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
