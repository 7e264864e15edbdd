"""Entry point of the ``mactile`` command, and its one error boundary.

Each subcommand lives in its own module with a ``register(subparsers)`` function that adds
its parser and sets ``func``. Modules import heavy dependencies (Amaranth, cocotb, CuPy,
matplotlib) inside their functions, so ``mactile --help`` works with the core install.

Errors: whatever layer raises, the user sees ``mactile: error: ...`` naming the path or
value, never a traceback. Exit status 2 for bad input, options or paths (and argparse's
usage errors), 1 for a run whose result is a failure (:class:`~.common.FailedRun`, a tool
that failed), 130 on Ctrl-C and 143 on SIGTERM (both clean up what they started).
``mactile sweep`` adds 3: it finished and wrote its report, but some jobs have no figures.
``mactile --debug`` or ``MACTILE_DEBUG=1`` shows the traceback instead.
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from mactile import __version__
from mactile.cli.common import CliError, FailedRun

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
    "mactile.cli.sweep_cmd",
    "mactile.cli.checkpoint_cmd",
]

#: Exit statuses.
EXIT_FAILED_RUN, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 1, 2, 130, 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so that every cleanup that runs on
    Ctrl-C (temporary folders, worker processes, tool subprocesses) runs on it too."""


def _on_sigterm(signum, frame):
    raise Terminated()


def install_sigterm_handler():
    """Turn SIGTERM into :class:`Terminated` in this process; return the previous handler
    (``None`` where it cannot be set: only the main thread may)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _on_sigterm)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mactile",
        description="Design, verify and measure low-precision number formats: golden "
                    "models, RTL, simulation, synthesis and GPU kernels.",
        epilog="Errors print one line, mactile: error: ...; exit status 2 for bad input, 1 "
               "for a failed run. --debug (or MACTILE_DEBUG=1) shows the traceback.")
    parser.add_argument("--version", action="version", version=f"mactile {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an error (also MACTILE_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def _debug_env() -> bool:
    return os.environ.get("MACTILE_DEBUG", "").strip().lower() not in ("", "0", "no", "false")


def error_message(e: BaseException) -> tuple[str, int]:
    """``(message, exit status)`` of an exception escaping a command."""
    from mactile.golden.fileio import describe_os_error

    if isinstance(e, FailedRun):
        return str(e), EXIT_FAILED_RUN
    if isinstance(e, CliError):
        return str(e), EXIT_USAGE
    if isinstance(e, OSError):
        return describe_os_error(e), EXIT_USAGE
    if isinstance(e, MemoryError):
        return ("not enough memory for this input" + (f" ({e})" if str(e) else "")
                + "; try a smaller array"), EXIT_USAGE
    if isinstance(e, RecursionError):  # a RuntimeError, but never a tool's failure
        return f"internal error: {e} (rerun with --debug for the traceback)", EXIT_FAILED_RUN
    if isinstance(e, (ValueError, TypeError, OverflowError, KeyError, IndexError)):
        text = str(e) if not isinstance(e, KeyError) else f"unknown key {e}"
        return text or type(e).__name__, EXIT_USAGE
    if isinstance(e, RuntimeError):  # tools that failed (ToolError), simulator errors
        return str(e) or type(e).__name__, EXIT_FAILED_RUN
    return (f"internal error: {type(e).__name__}: {e} (rerun with --debug for the "
            f"traceback)"), EXIT_FAILED_RUN


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Commands that take a design's parameters as flags (generate, sim) read the rest.
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "design_param_flags", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    debug = args.debug or _debug_env()
    previous = install_sigterm_handler()
    try:
        return int(args.func(args) or 0)
    except Terminated:
        print("mactile: terminated (SIGTERM)", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print("mactile: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001 - the one boundary: every error becomes a message
        if debug:
            raise
        msg, status = error_message(e)
        print(f"mactile: error: {msg}", file=sys.stderr)
        return status
    finally:
        if previous is not None:  # main() may run inside another program (the tests)
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
