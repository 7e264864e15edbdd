"""Helpers shared by the subcommands: errors, atomic file output, array loading."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import numpy as np


class CliError(Exception):
    """A user-facing error: printed as ``mactile: error: ...``, exit status 2."""


def load_array(path: str | os.PathLike) -> np.ndarray:
    """Read a ``.npy`` file, with an error that names the file and the problem."""
    p = Path(path)
    if not p.exists():
        raise CliError(f"input file {str(p)!r} does not exist")
    if p.is_dir():
        raise CliError(f"input {str(p)!r} is a directory, not a .npy file")
    try:
        return np.load(p, allow_pickle=False)
    except PermissionError as e:
        raise CliError(f"cannot read {str(p)!r}: permission denied") from e
    except (ValueError, OSError, EOFError) as e:
        raise CliError(f"cannot read {str(p)!r} as a NumPy .npy array: {e}") from e


@contextlib.contextmanager
def atomic_outputs(*paths):
    """Yield temporary paths for ``paths``; move them into place only if the block
    succeeds, so a failure leaves no half-written output behind."""
    temps = []
    try:
        for p in paths:
            p = Path(p)
            if p.parent and not p.parent.exists():
                raise CliError(f"output directory {str(p.parent)!r} does not exist")
            fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=p.suffix, dir=p.parent or ".")
            os.close(fd)
            temps.append(Path(tmp))
        yield temps
        for tmp, p in zip(temps, paths):
            os.replace(tmp, p)
        temps = []
    finally:
        for tmp in temps:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
