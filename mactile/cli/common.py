"""Helpers shared by the subcommands: the user-facing error, array loading, and the output
checks and atomic writers of :mod:`mactile.golden.fileio` (re-exported here)."""
from __future__ import annotations

import math
import os
import stat
from pathlib import Path

import numpy as np

from mactile.golden.fileio import (OutputError, atomic_open, atomic_outputs, atomic_write,
                                   check_output_dir, check_output_file, check_outputs,
                                   describe_os_error, make_output_dir)

__all__ = ["CliError", "FailedRun", "load_array", "OutputError", "atomic_open", "atomic_outputs",
           "atomic_write", "check_output_dir", "check_output_file", "check_outputs",
           "describe_os_error", "make_output_dir"]


class CliError(Exception):
    """A user-facing error: printed as ``mactile: error: ...``, exit status 2."""


class FailedRun(CliError):
    """The command ran but its result is a failure (a mismatch, an unproven netlist):
    printed like :class:`CliError`, exit status 1."""


_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**30 else f"{n / 2**20:.3g} MiB"


def load_array(path: str | os.PathLike) -> np.ndarray:
    """Read a ``.npy`` file, with an error that names the file and the problem.

    The header is read first, so a file that is not a ``.npy`` array (text, a ``.npz``
    archive, a pickle) or whose header claims more data than the file holds is refused
    before any memory is allocated for it.
    """
    if not str(path):  # Path("") is "." (a folder): say what was given
        raise CliError("input path is empty")
    p = Path(path)
    shown = str(p)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise CliError(f"input file {shown!r} does not exist") from None
    except OSError as e:
        raise CliError(f"cannot read {shown!r}: {describe_os_error(OSError(e.errno, e.strerror))}"
                       ) from None
    if stat.S_ISDIR(st.st_mode):
        raise CliError(f"input {shown!r} is a directory, not a .npy file")
    if not stat.S_ISREG(st.st_mode):
        raise CliError(f"input {shown!r} is not a regular file (a device, FIFO or socket); "
                       f"give a .npy file")
    try:
        with open(p, "rb") as fh:
            head = fh.read(len(_NPY_MAGIC))
            if head.startswith(_ZIP_MAGIC):
                raise CliError(f"{shown!r} is a .npz archive (several arrays), not a .npy "
                               f"array; save the one to quantize with "
                               f"np.save('x.npy', np.load({shown!r})['NAME'])")
            if head != _NPY_MAGIC:
                looks_text = head and all(32 <= b < 127 or b in b"\t\r\n" for b in head)
                raise CliError(f"{shown!r} is not a NumPy .npy file (it does not start with "
                               f"the .npy magic bytes" + ("; it looks like text: convert it "
                               "with np.save('x.npy', np.loadtxt(...))" if looks_text else "")
                               + ")")
            fh.seek(0)
            try:
                version = np.lib.format.read_magic(fh)
                read = (np.lib.format.read_array_header_1_0 if version[0] == 1
                        else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read(fh)
            except (ValueError, OSError, EOFError, SyntaxError) as e:
                raise CliError(f"cannot read {shown!r} as a NumPy .npy array: its header is "
                               f"damaged ({e})") from None
            if dtype.hasobject:
                raise CliError(f"{shown!r} holds Python objects (dtype {dtype}, stored as a "
                               f"pickle); mactile reads numeric arrays only")
            need = math.prod(int(n) for n in shape) * dtype.itemsize
            have = st.st_size - fh.tell()
            if need > have:
                raise CliError(f"{shown!r} is truncated or damaged: its header claims shape "
                               f"{tuple(shape)} of {dtype} ({need} bytes of data) but the "
                               f"file holds {have}")
            fh.seek(0)
            try:
                return np.load(fh, allow_pickle=False)
            except MemoryError:
                raise CliError(f"not enough memory to load {shown!r} (shape {tuple(shape)}, "
                               f"{dtype}, {_gib(need)})") from None
    except PermissionError:
        raise CliError(f"cannot read {shown!r}: permission denied") from None
    except (ValueError, OSError, EOFError) as e:
        raise CliError(f"cannot read {shown!r} as a NumPy .npy array: {e}") from None


# ---------------------------------------------------------------- argparse value types
# argparse names a type in its message ("invalid <lambda> value"): each type below raises
# ArgumentTypeError with a sentence instead, so the usage error says what was expected.
def int_at_least(minimum: int, what: str):
    """An argparse type: an integer >= ``minimum`` (``what`` names it in the error)."""
    def parse(text: str) -> int:
        import argparse

        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {what}, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"expected a {what}, got {v}")
        return v
    return parse


def int_list(minimum: int, what: str):
    """An argparse type: comma-separated integers, each >= ``minimum``."""
    one = int_at_least(minimum, what)

    def parse(text: str) -> list[int]:
        import argparse

        parts = [t.strip() for t in text.split(",")]
        if not text.strip() or any(not t for t in parts):
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}s, got {text!r}")
        return [one(t) for t in parts]
    return parse


def positive_float(what: str, *, upper: float | None = None):
    """An argparse type: a finite float > 0 (and <= ``upper`` where given)."""
    def parse(text: str) -> float:
        import argparse

        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not (math.isfinite(v) and v > 0 and (upper is None or v <= upper)):
            bound = f" in (0, {upper:g}]" if upper is not None else " > 0"
            raise argparse.ArgumentTypeError(f"expected {what}{bound}, got {text!r}")
        return v
    return parse


#: Upper bounds of the tools' options: a clock period of 1 ms and a limit of 7 days on a
#: tool run (past them a value is a typo, and 1e308 s overflows the subprocess timer).
MAX_CLOCK_NS = 1e6
MAX_TIMEOUT_S = 7 * 24 * 3600.0


def int_in(minimum: int, maximum: int, what: str):
    """An argparse type: an integer in ``[minimum, maximum]`` (the limit in the message)."""
    low = int_at_least(minimum, what)

    def parse(text: str) -> int:
        import argparse

        v = low(text)
        if v > maximum:
            raise argparse.ArgumentTypeError(f"expected a {what} of at most {maximum}, got {v}")
        return v
    return parse


positive_int = int_at_least(1, "positive integer")
seed_int = int_at_least(0, "non-negative integer")
