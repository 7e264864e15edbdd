"""Standard-cell libraries: the named PDKs, any liberty file, and the decompression cache.

A :class:`Library` is one readable, uncompressed liberty file plus what the flow needs to
know about it (its cell names, the cells it must not use, a content hash for the cache
key). :func:`resolve_library` turns the CLI's ``--pdk NAME`` or ``--liberty PATH`` into one.

Named libraries
---------------
``osu018`` (default)
    OSU 0.18 um from Debian's ``qflow-tech-osu018`` package, the only liberty a package
    registry installs.
``nangate45``
    NanGate FreePDK45 Open Cell Library, typical corner: the process of BlockDialect's
    Table 5. Found in the shared PDK folder (see :func:`pdk_dir`), gzipped.
``sky130``
    SkyWater sky130_fd_sc_hd, tt 25 C 1.80 V: the 130 nm process of BlockDialect's
    Tables 6-7. Its low-power-flow cells (``*lpflow*``: isolation, level shifters,
    keep-alive buffers), probe cells and spare-cell macro are never mapped to: ABC would
    otherwise pick isolation cells as cheap AND gates.

The gzipped files are decompressed once into the cache (Yosys in WebAssembly and
Debian's OpenSTA read no gzip), named by the content hash of the compressed file.
"""
from __future__ import annotations

import contextlib
import fnmatch
import functools
import gzip
import hashlib
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from mactile.golden.fileio import atomic_outputs

__all__ = ["Library", "LibraryError", "PDKS", "PdkSpec", "resolve_library", "pdk_dir",
           "DriveConstraint", "drive_constraint", "ClockGateCell", "clock_gate_cells",
           "FlopPins", "flop_pins",
           "cache_dir", "DEFAULT_PDK"]

#: The library used when neither ``--pdk`` nor ``--liberty`` is given.
DEFAULT_PDK = "osu018"


class LibraryError(ValueError):
    """A liberty file that cannot be found, read or used; the message names it."""


@dataclass(frozen=True)
class PdkSpec:
    """Where a named library lives and how to use it.

    Parameters
    ----------
    name : str
        ``--pdk`` name.
    description : str
        Library, corner and source, for reports.
    filename : str
        File name (in the shared PDK folder unless ``system_path`` is set).
    system_path : str
        Absolute path for libraries installed by a system package.
    dont_use : tuple of str
        Glob patterns of cells that synthesis must not map to.
    """

    name: str
    description: str
    filename: str
    system_path: str = ""
    dont_use: tuple[str, ...] = ()
    process_nm: int = 0
    #: LEF of the cells, for OpenROAD (which links netlists against LEF masters).
    lef: str = ""


PDKS: dict[str, PdkSpec] = {
    "osu018": PdkSpec(
        "osu018", "OSU 0.18 um standard cells (Debian qflow-tech-osu018)",
        "osu018_stdcells.lib", system_path="/usr/share/qflow/tech/osu018/osu018_stdcells.lib",
        process_nm=180, lef="/usr/share/qflow/tech/osu018/osu018_stdcells.lef"),
    "nangate45": PdkSpec(
        "nangate45", "NanGate FreePDK45 Open Cell Library, typical corner",
        "nangate45_typ.lib.gz", process_nm=45),
    "sky130": PdkSpec(
        "sky130", "SkyWater sky130_fd_sc_hd, tt 25 C 1.80 V",
        "sky130hd_tt.lib.gz",
        # lpflow: isolation/level-shift/keep-alive cells of power-gated flows (ABC takes the
        # isolation cells for plain ANDs); probe cells; the spare-cell macro.
        dont_use=("*lpflow*", "*probe*", "*macro_sparecell*"),
        process_nm=130),
}


def repo_root() -> Path:
    """The folder holding the ``synth/`` layer (the repository root in a checkout)."""
    return Path(__file__).resolve().parent.parent


def pdk_dir() -> Path | None:
    """The shared folder of liberty files, or ``None`` when there is none.

    ``$MACTILE_PDK_DIR`` if set (it must exist); otherwise ``shared/pdk`` beside the
    repository or beside one of its parent folders (``../shared/pdk`` for a clone,
    ``../../shared/pdk`` for a worktree under ``wt/``).
    """
    env = os.environ.get("MACTILE_PDK_DIR")
    if env:
        return Path(env)
    for parent in repo_root().parents:
        cand = parent / "shared" / "pdk"
        if cand.is_dir():
            return cand
    return None


def cache_dir() -> Path:
    """Where decompressed liberty files and synthesis results are kept.

    ``$MACTILE_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/mactile`` or ``~/.cache/mactile``.
    Never under ``/tmp``: Yosys in WebAssembly has a private ``/tmp``.
    """
    env = os.environ.get("MACTILE_CACHE_DIR")
    if env:
        return Path(env).resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).resolve() / "mactile"


_CELL_RE = re.compile(rb'^\s*cell\s*\(\s*"?([^")\s]+)"?\s*\)', re.M)
_LIB_RE = re.compile(rb'^\s*library\s*\(\s*"?([^")\s]+)"?\s*\)', re.M)


@dataclass(frozen=True)
class Library:
    """A usable liberty file.

    Parameters
    ----------
    name : str
        ``--pdk`` name, or the file's stem for ``--liberty``.
    path : Path
        Uncompressed liberty file (in the cache when the source was gzipped).
    source : Path
        The file the user named or the PDK table points at.
    sha256 : str
        Hash of the uncompressed contents (part of every cache key).
    cells : tuple of str
        Cell names in the file.
    dont_use : tuple of str
        Glob patterns passed to ``dfflibmap``/``abc`` as ``-dont_use``.
    """

    name: str
    path: Path
    source: Path
    sha256: str
    library_name: str
    cells: tuple[str, ...] = field(repr=False)
    dont_use: tuple[str, ...] = ()
    description: str = ""
    lef: str = ""

    def dont_use_args(self) -> str:
        """``-dont_use PATTERN ...`` for Yosys."""
        return " ".join(f"-dont_use {p}" for p in self.dont_use)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


#: Largest liberty file read, plain or once decompressed (the largest shipped, sky130 hd,
#: is 12.8 MB): a device, a runaway file or a gzip bomb is refused, not read to the end.
MAX_LIBERTY_BYTES = 256 << 20


def _decompressed(src: Path) -> Path:
    """The uncompressed copy of a gzipped liberty file, made once in the cache (refused,
    and nothing left in the cache, when it exceeds :data:`MAX_LIBERTY_BYTES`)."""
    key = _sha256(src)[:16]
    name = src.name[:-3] if src.name.endswith(".gz") else src.name + ".lib"
    out = cache_dir() / "liberty" / f"{key}-{name}"
    if out.exists():
        return out
    try:
        # Atomic (parallel jobs may race to decompress; the last rename wins, all equal).
        with atomic_outputs(out, make_parents=True) as (tmp,):
            with open(tmp, "wb") as dst, gzip.open(src, "rb") as fh:
                total = 0
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    total += len(chunk)
                    if total > MAX_LIBERTY_BYTES:
                        raise _TooLarge()
                    dst.write(chunk)
    except _TooLarge:
        with contextlib.suppress(OSError):  # the folder this made, unless shared
            out.parent.rmdir()
        raise LibraryError(f"liberty file {str(src)!r} decompresses to more than "
                           f"{MAX_LIBERTY_BYTES >> 20} MiB (limit MAX_LIBERTY_BYTES); not a "
                           f"cell library this flow reads") from None
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise LibraryError(f"cannot decompress liberty file {str(src)!r}: {e}") from None
    return out


class _TooLarge(Exception):
    pass


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def load_library(path: str | os.PathLike, *, name: str | None = None,
                 dont_use: tuple[str, ...] = (), description: str = "", lef: str = "") -> Library:
    """Check and load one liberty file (plain or gzipped).

    Raises
    ------
    LibraryError
        The file is missing, unreadable, not a liberty file, or holds no cells.
    """
    src = Path(path).expanduser()
    if not src.exists():
        raise LibraryError(f"liberty file {str(src)!r} does not exist")
    if src.is_dir():
        raise LibraryError(f"liberty path {str(src)!r} is a directory, not a liberty file")
    try:
        st = src.stat()
    except OSError as e:
        raise LibraryError(f"cannot read liberty file {str(src)!r}: {e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise LibraryError(f"liberty path {str(src)!r} is not a regular file (a device, FIFO "
                           f"or socket); give a .lib or .lib.gz file")
    if st.st_size > MAX_LIBERTY_BYTES:
        raise LibraryError(f"liberty file {str(src)!r} is {st.st_size >> 20} MiB, more than "
                           f"{MAX_LIBERTY_BYTES >> 20} MiB (limit MAX_LIBERTY_BYTES)")
    try:
        plain = _decompressed(src) if _is_gzip(src) else src
        data = plain.read_bytes()
    except PermissionError:
        raise LibraryError(f"cannot read liberty file {str(src)!r}: permission denied") from None
    except OSError as e:
        raise LibraryError(f"cannot read liberty file {str(src)!r}: {e}") from None
    m = _LIB_RE.search(data[:1 << 16])
    if not m:
        raise LibraryError(f"{str(src)!r} is not a liberty file (no 'library (...)' group "
                           "near its start)")
    cells = tuple(dict.fromkeys(c.decode() for c in _CELL_RE.findall(data)))
    if not cells:
        raise LibraryError(f"liberty file {str(src)!r} defines no cells")
    if not re.search(rb"\bff\s*\(", data):
        raise LibraryError(f"liberty file {str(src)!r} has no flip-flop cell (no 'ff' group): "
                           "the designs are clocked and need one")
    stem = src.name
    for suffix in (".gz", ".lib", ".liberty"):
        stem = stem.removesuffix(suffix)
    return Library(name=name or stem, path=plain.resolve(), source=src.resolve(),
                   sha256=hashlib.sha256(data).hexdigest(), library_name=m.group(1).decode(),
                   cells=cells, dont_use=tuple(dont_use), description=description,
                   lef=lef if lef and Path(lef).exists() else "")


@dataclass(frozen=True)
class DriveConstraint:
    """What ABC assumes drives and loads the logic it maps (``abc -constr``).

    With it, ABC's mapping script ends in ``buffer; upsize; dnsize``: high-fanout nets
    get buffer trees and gates are sized for the delay target. Without it every gate is
    the library's weakest and a net feeding hundreds of pins has a delay of tens of ns
    (measured: one INVX1 in ``nvfp4-tc`` on osu018 at 80.7 ns, worst slack -123.5 ns at
    10 ns; with the constraint -3.7 ns). OpenROAD's flow scripts configure ABC the same
    way (NanGate45: BUF_X1 driving, 3.9 fF load).

    Attributes
    ----------
    driving_cell : str
        The library's smallest buffer that is neither a clock buffer nor a delay cell.
    load : float
        Load on every output of the mapped logic, in the liberty's capacitance unit:
        four times the driving cell's input capacitance (a fanout of four).
    """

    driving_cell: str
    load: float

    def text(self) -> str:
        """The constraint file ABC reads."""
        return f"set_driving_cell {self.driving_cell}\nset_load {self.load:.6g}\n"


_CELL_HEAD = re.compile(r'\bcell\s*\(\s*"?([^")\s]+)"?\s*\)\s*\{')
_PIN_HEAD = re.compile(r'\bpin\s*\(\s*"?([^")\s]+)"?\s*\)\s*\{')


def _block(text: str, open_brace: int) -> str:
    """The text between the brace at ``open_brace`` and its partner."""
    depth = 0
    for m in re.finditer(r"[{}]", text[open_brace:]):
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            return text[open_brace + 1:open_brace + m.start()]
    return text[open_brace + 1:]


def _attr(text: str, name: str) -> str | None:
    m = re.search(rf"\b{name}\s*:\s*\"?([^;\"]*)\"?\s*;", text)
    return m.group(1).strip() if m else None


def drive_constraint(lib: Library) -> DriveConstraint | None:
    """The :class:`DriveConstraint` of a library, or None when it has no plain buffer.

    A buffer is a cell with one input and one output whose function is the input; cells
    marked ``dont_use`` (in the file or by the library's patterns), clock buffers
    (``clk`` in the name) and delay cells (``dly``/``delay``) are passed over.
    """
    return _drive_constraint(str(lib.path), lib.sha256, tuple(lib.dont_use))


@functools.lru_cache(maxsize=None)
def _drive_constraint(path: str, sha256: str, dont_use: tuple[str, ...]
                      ) -> DriveConstraint | None:
    text = Path(path).read_text(errors="replace")
    best = None
    for m in _CELL_HEAD.finditer(text):
        name = m.group(1)
        low = name.lower()
        if ("clk" in low or "dly" in low or "delay" in low
                or any(fnmatch.fnmatchcase(name, p) for p in dont_use)):
            continue
        body = _block(text, m.end() - 1)
        if _attr(body.split("pin", 1)[0], "dont_use") == "true":
            continue
        pins = [(p.group(1), _block(body, p.end() - 1)) for p in _PIN_HEAD.finditer(body)]
        ins = [(n, b) for n, b in pins if _attr(b, "direction") == "input"]
        outs = [(n, b) for n, b in pins if _attr(b, "direction") == "output"]
        if len(ins) != 1 or len(outs) != 1:
            continue
        func = (_attr(outs[0][1], "function") or "").replace("(", "").replace(")", "").strip()
        cap, area = _attr(ins[0][1], "capacitance"), _attr(body, "area")
        if func != ins[0][0] or cap is None or area is None:
            continue
        key = (float(area), name)
        if best is None or key < best[0]:
            best = (key, name, float(cap))
    if best is None:
        return None
    return DriveConstraint(driving_cell=best[1], load=4.0 * best[2])


@dataclass(frozen=True)
class ClockGateCell:
    """An integrated clock-gate cell of a library (``clock_gating_integrated_cell``).

    Attributes
    ----------
    name : str
    kind : str
        The liberty's ``clock_gating_integrated_cell`` value (``latch_posedge``,
        ``latch_posedge_precontrol``): a latch open while the clock is low holds the
        enable, ANDed with the clock.
    clock, enable, out : str
        Pins ``clock_gate_clock_pin``, ``clock_gate_enable_pin``, ``clock_gate_out_pin``.
    test : str or None
        ``clock_gate_test_pin`` (scan enable, ORed with the enable), if any.
    area : float
    """

    name: str
    kind: str
    clock: str
    enable: str
    out: str
    test: str | None
    area: float


def clock_gate_cells(lib: Library) -> dict[str, ClockGateCell]:
    """The library's integrated clock-gate cells by name (NanGate45: ``CLKGATE_X*``,
    ``CLKGATETST_X*``; sky130 hd: ``dlclkp``, ``sdlclkp``; osu018: none)."""
    return _clock_gate_cells(str(lib.path), lib.sha256)


@functools.lru_cache(maxsize=None)
def _clock_gate_cells(path: str, sha256: str) -> dict[str, ClockGateCell]:
    text = Path(path).read_text(errors="replace")
    out = {}
    for m in _CELL_HEAD.finditer(text):
        body = _block(text, m.end() - 1)
        kind = _attr(body, "clock_gating_integrated_cell")
        if not kind:
            continue
        roles = {}
        for p in _PIN_HEAD.finditer(body):
            pb = _block(body, p.end() - 1)
            for role in ("clock", "enable", "test", "out"):
                if _attr(pb, f"clock_gate_{role}_pin") == "true":
                    roles[role] = p.group(1)
        if not {"clock", "enable", "out"} <= set(roles):
            continue
        out[m.group(1)] = ClockGateCell(m.group(1), kind, roles["clock"], roles["enable"],
                                        roles["out"], roles.get("test"),
                                        float(_attr(body, "area") or 0.0))
    return out


@dataclass(frozen=True)
class FlopPins:
    """The pins of a plain D flip-flop cell (``ff`` group with ``next_state`` one pin).

    Attributes
    ----------
    clock, d : str
    q, qn : str or None
        The outputs that carry the state and its complement.
    """

    clock: str
    d: str
    q: str | None
    qn: str | None


def flop_pins(lib: Library) -> dict[str, FlopPins]:
    """Every plain positive-edge D flip-flop cell of the library (no set/reset, no scan),
    by name: what the clock-gate model of the equivalence check rewrites."""
    return _flop_pins(str(lib.path), lib.sha256)


_FF_HEAD = re.compile(r'\bff\s*\(\s*"?([^",\s]+)"?\s*,\s*"?([^")\s]+)"?\s*\)\s*\{')


@functools.lru_cache(maxsize=None)
def _flop_pins(path: str, sha256: str) -> dict[str, FlopPins]:
    text = Path(path).read_text(errors="replace")
    out = {}
    for m in _CELL_HEAD.finditer(text):
        body = _block(text, m.end() - 1)
        ff = _FF_HEAD.search(body)
        if not ff:
            continue
        group = _block(body, ff.end() - 1)
        clk = (_attr(group, "clocked_on") or "").strip("() ")
        nxt = (_attr(group, "next_state") or "").strip("() ")
        if (_attr(group, "clear") or _attr(group, "preset")
                or not re.fullmatch(r"\w+", clk) or not re.fullmatch(r"\w+", nxt)):
            continue
        q = qn = None
        for p in _PIN_HEAD.finditer(body):
            pb = _block(body, p.end() - 1)
            if _attr(pb, "direction") != "output":
                continue
            func = (_attr(pb, "function") or "").replace(" ", "").strip("()")
            if func == ff.group(1):
                q = p.group(1)
            elif func in (ff.group(2), f"!{ff.group(1)}"):
                qn = p.group(1)
        if q or qn:
            out[m.group(1)] = FlopPins(clk, nxt, q, qn)
    return out


def pdk_path(name: str) -> Path:
    """Where the named library's file should be (it may be absent)."""
    spec = PDKS[name]
    if spec.system_path:
        return Path(spec.system_path)
    env = os.environ.get("MACTILE_PDK_DIR")
    if env and os.path.exists(env) and not os.path.isdir(env):
        raise LibraryError(f"--pdk {name}: MACTILE_PDK_DIR={env!r} is not a folder; set it "
                           f"to the folder holding {spec.filename}")
    d = pdk_dir()
    if d is None:
        raise LibraryError(
            f"--pdk {name}: no shared PDK folder found; set MACTILE_PDK_DIR to the folder "
            f"holding {spec.filename} (or pass --liberty PATH)")
    return d / spec.filename


def resolve_library(pdk: str | None = None, liberty: str | os.PathLike | None = None) -> Library:
    """The library for ``--pdk`` or ``--liberty`` (default: :data:`DEFAULT_PDK`).

    Raises
    ------
    LibraryError
        Both given, an unknown PDK name, or a missing/unreadable file.
    """
    if pdk is not None and liberty is not None:
        raise LibraryError("give either --pdk or --liberty, not both")
    # An empty value is a mistake (an unset shell variable), not "the default library".
    if liberty is not None and not str(liberty).strip():
        raise LibraryError("--liberty path is empty")
    if pdk is not None and not pdk.strip():
        raise LibraryError(f"--pdk name is empty; known: {', '.join(PDKS)}")
    if liberty:
        return load_library(liberty)
    pdk = pdk or DEFAULT_PDK
    if pdk not in PDKS:
        raise LibraryError(f"unknown PDK {pdk!r}; known: {', '.join(PDKS)} "
                           "(or pass --liberty PATH)")
    spec = PDKS[pdk]
    path = pdk_path(pdk)
    if not path.exists():
        hint = ("install the Debian package qflow-tech-osu018" if spec.system_path else
                "set MACTILE_PDK_DIR to the folder that holds it")
        raise LibraryError(f"--pdk {pdk}: liberty file {str(path)!r} not found; {hint}")
    return load_library(path, name=pdk, dont_use=spec.dont_use, description=spec.description,
                        lef=spec.lef)
