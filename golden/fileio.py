"""The one way mactile writes files: checked first, then atomic, nothing half-written.

Every layer that writes (golden's ``.npz`` archives, the simulation and synthesis caches,
the report and study files, every CLI command) uses this module, so it lives at the bottom
of the stack and needs the standard library only.

Rules (issue 20):

* **Checked before the work.** :func:`check_output_file` and :func:`check_output_dir`
  refuse, with an :class:`OutputError` naming the path, an output that is a directory (for
  a file), a device, a FIFO or a socket, the same file as an input or as another output of
  the same command, a folder that does not exist or cannot be written (probed by creating
  a file there, so read-only mounts and root-squashed folders are caught too), and an
  existing file without write permission. Commands call them before any long work.
* **Atomic.** Each file is written to a temporary file in the target's folder, flushed,
  ``fsync``-ed, given its permissions and renamed into place (:func:`atomic_outputs`,
  :func:`atomic_write`, :func:`atomic_open`); a failure leaves the old file (or none)
  and no temporary file.
* **Permissions.** A new file gets ``0666 & ~umask`` (not ``mkstemp``'s 0600); a replaced
  file keeps its mode.
* **Symlinks are written through**: the link stays, its target is replaced atomically.
  A link to a directory or device is refused like the thing it points to.
* **Folders in a cache** are published with :func:`publish_dir` (one ``rename``; a
  concurrent writer of the same entry is not an error) and their temporary folders
  (:func:`temp_dir`, named with the owner's pid) are removed by
  :func:`remove_stale_temps` once their process is gone.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator

__all__ = [
    "OutputError", "check_output_file", "check_output_dir", "check_outputs",
    "atomic_outputs", "atomic_write", "atomic_open", "make_output_dir",
    "temp_dir", "publish_dir", "remove_stale_temps", "describe_os_error", "umask",
]

PathLike = "str | os.PathLike[str]"


class OutputError(OSError):
    """An output path that cannot, or must not, be written (the message names it).

    A subclass of :class:`OSError` so that callers handling file errors handle it too;
    its ``str()`` is the message alone.
    """

    def __str__(self) -> str:  # OSError's would prefix "[Errno ...]" for two arguments
        return self.args[0] if self.args else ""


_umask_lock = threading.Lock()


def umask() -> int:
    """The process's umask (read from ``/proc`` where possible, since setting it to read
    it back is not thread-safe)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _umask_lock:
        old = os.umask(0o022)
        os.umask(old)
    return old


def describe_os_error(e: OSError) -> str:
    """``OSError`` as one sentence naming its path(s), without ``[Errno n]``."""
    if isinstance(e, OutputError):
        return str(e)
    what = (e.strerror or str(e) or type(e).__name__).rstrip(".")
    what = what[:1].lower() + what[1:]
    if e.filename is not None and e.filename2 is not None:
        return f"cannot move {os.fsdecode(e.filename)!r} to {os.fsdecode(e.filename2)!r}: {what}"
    if e.filename is not None:
        return f"{os.fsdecode(e.filename)!r}: {what}"
    return what


def _kind(mode: int) -> str | None:
    """What a non-regular, non-directory file is (``None`` for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _stat(p: Path) -> os.stat_result | None:
    try:
        return os.stat(p)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise OutputError(f"output {str(p)!r}: a parent of it is a file, not a folder") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OutputError(f"output {str(p)!r} is a symlink loop") from None
        raise OutputError(f"output {str(p)!r}: cannot access it: "
                          f"{describe_os_error(OSError(e.errno, e.strerror))}") from None


def _probe_folder(folder: Path, shown: str) -> None:
    """Create and remove a file in ``folder``: the only test of writability that sees
    read-only mounts, ACLs and root-squashed network folders the way the write will."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".mactile-probe-")
    except OSError as e:
        raise OutputError(f"cannot write in {shown!r}: "
                          f"{describe_os_error(OSError(e.errno, e.strerror))}") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): compare where they would be
        return os.path.realpath(a) == os.path.realpath(b)


def check_output_file(path, *, inputs: Iterable = (), what: str = "output") -> Path:
    """Check that ``path`` may be written as a file; return the path to write.

    Parameters
    ----------
    path : path-like
        The output as the user gave it.
    inputs : paths
        Files the command reads: the output must not be one of them.
    what : str
        How messages name the output (``"output"``, ``"--codes file"``).

    Returns
    -------
    Path
        ``path`` itself, or for a symlink the file it points to (written through).

    Raises
    ------
    OutputError
        The output is a directory, device, FIFO or socket (or a symlink to one), one of
        ``inputs``, an existing read-only file, or its folder is missing or not writable.
    """
    shown = os.fspath(path)
    if not shown:
        raise OutputError(f"{what} path is empty")
    p = Path(shown)
    target = Path(os.path.realpath(p)) if p.is_symlink() else p
    st = _stat(target)
    via = f" (through the symlink {shown!r})" if target != p else ""
    if st is not None:
        kind = _kind(st.st_mode)
        if kind:
            raise OutputError(f"{what} {str(target)!r}{via} is {kind}, not a regular file; "
                              f"give a file path")
    for src in inputs:
        if src is not None and _same_file(Path(os.fspath(src)), target):
            raise OutputError(f"{what} {shown!r} is the input {os.fspath(src)!r}; write the "
                              f"result to another file")
    folder = target.parent
    fst = _stat(folder)
    if fst is None:
        raise OutputError(f"output directory {str(folder)!r} does not exist (for {what} "
                          f"{shown!r})")
    if not stat.S_ISDIR(fst.st_mode):
        raise OutputError(f"{what} {shown!r}: {str(folder)!r} is not a folder")
    if st is not None and (not os.access(target, os.W_OK)
                           or not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)):
        raise OutputError(f"{what} {str(target)!r}{via} exists and is read-only (mode "
                          f"{stat.S_IMODE(st.st_mode):04o}); remove it or choose another path")
    _probe_folder(folder, str(folder))
    return target


def check_outputs(paths: Iterable, *, inputs: Iterable = (),
                  what: str | Iterable[str] = "output") -> list[Path]:
    """:func:`check_output_file` for each of ``paths`` (``None`` entries skipped), and no
    two of them the same file. ``what`` names them all, or each (a list beside ``paths``)."""
    paths = list(paths)
    names = [what] * len(paths) if isinstance(what, str) else list(what)
    if len(names) != len(paths):
        raise ValueError(f"check_outputs: {len(paths)} paths but {len(names)} names")
    inputs = [i for i in inputs if i is not None]
    seen: list[tuple[str, Path]] = []
    targets = []
    for p, name in zip(paths, names):
        if p is None:
            continue
        t = check_output_file(p, inputs=inputs, what=name)
        for other_name, other in seen:
            if _same_file(other, t):
                raise OutputError(f"{name} {os.fspath(p)!r} is the same file as {other_name} "
                                  f"{str(other)!r}; give each its own path")
        seen.append((f"{name}", t))
        targets.append(t)
    return targets


def check_output_dir(path, *, what: str = "output folder") -> Path:
    """Check that ``path`` is, or can be created as, a writable folder (nothing is made).

    Raises
    ------
    OutputError
        ``path`` exists and is not a folder (a symlink to one is fine), or the nearest
        existing folder above it is not writable, or a parent is a file.
    """
    shown = os.fspath(path)
    if not shown:
        raise OutputError(f"{what} path is empty")
    p = Path(shown)
    st = _stat(p)
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{what} {shown!r} exists and is "
                              f"{_kind(st.st_mode) or 'a regular file'}, not a folder")
        _probe_folder(p, shown)
        return p
    if p.is_symlink():
        raise OutputError(f"{what} {shown!r} is a symlink to {os.readlink(p)!r}, which does "
                          f"not exist")
    # The folder will be made: its nearest existing ancestor must be a writable folder.
    anc = Path(os.path.abspath(p)).parent
    while True:
        ast = _stat(anc)
        if ast is not None:
            break
        anc = anc.parent
    if not stat.S_ISDIR(ast.st_mode):
        raise OutputError(f"{what} {shown!r}: {str(anc)!r} is "
                          f"{_kind(ast.st_mode) or 'a regular file'}, not a folder")
    _probe_folder(anc, str(anc))
    return p


def make_output_dir(path, *, what: str = "output folder") -> Path:
    """:func:`check_output_dir`, then create the folder (and its parents)."""
    p = check_output_dir(path, what=what)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create {what} {os.fspath(path)!r}: "
                          f"{describe_os_error(OSError(e.errno, e.strerror))}") from None
    return p


def _temp_prefix(name: str) -> str:
    return f".{name}.tmp{os.getpid()}-"


def _finish(tmp: Path, target: Path, mode: int) -> None:
    """fsync ``tmp``'s contents and give it ``mode``."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, mode)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_outputs(*paths, inputs: Iterable = (), make_parents: bool = False,
                   what: str | Iterable[str] = "output") -> Iterator[list[Path]]:
    """Temporary paths for ``paths``; all moved into place only if the block succeeds.

    The outputs are checked first (:func:`check_outputs`). Write each temporary file by
    name (``np.save``, ``savefig``: every temporary keeps its target's suffix). On a clean
    exit each is fsync-ed, given its permissions and renamed over its target; on an
    exception (``KeyboardInterrupt`` too) every temporary file is removed and no target
    is touched.

    Parameters
    ----------
    make_parents : bool
        Create missing parent folders (checked writable first); default: refuse them.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> with atomic_outputs(os.path.join(d, "a.npy")) as (tmp,):
    ...     np.save(tmp, np.zeros(3))
    >>> sorted(os.listdir(d))
    ['a.npy']
    """
    if make_parents:
        for p in paths:
            if p is not None:
                make_output_dir(Path(os.fspath(p)).parent)
    targets = check_outputs(paths, inputs=inputs, what=what)
    temps: list[Path] = []
    try:
        for t in targets:
            remove_stale_temps(t.parent, name=t.name)
            fd, name = tempfile.mkstemp(prefix=_temp_prefix(t.name), suffix=t.suffix,
                                        dir=t.parent)
            os.close(fd)
            temps.append(Path(name))
        yield temps
        default = 0o666 & ~umask()
        for tmp, t in zip(temps, targets):
            try:
                mode = stat.S_IMODE(os.stat(t).st_mode)
            except FileNotFoundError:
                mode = default
            _finish(tmp, t, mode)
        for tmp, t in zip(temps, targets):
            os.replace(tmp, t)
        for folder in {t.parent for t in targets}:
            _fsync_dir(folder)
        temps = []
    finally:
        for tmp in temps:
            with contextlib.suppress(OSError):
                tmp.unlink()


def atomic_write(path, data: bytes | str, *, inputs: Iterable = (), make_parents: bool = False,
                 what: str = "output") -> Path:
    """Write ``data`` (``str`` as UTF-8) to ``path`` atomically; return the path."""
    with atomic_outputs(path, inputs=inputs, make_parents=make_parents, what=what) as (tmp,):
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
    return Path(os.fspath(path))


@contextlib.contextmanager
def atomic_open(path, mode: str = "w", *, inputs: Iterable = (), make_parents: bool = False,
                what: str = "output", **open_kwargs):
    """``open(path, mode)`` on a temporary file that replaces ``path`` on a clean exit.

    ``mode`` is ``"w"`` or ``"wb"`` (text mode defaults to UTF-8).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', got {mode!r}")
    if mode == "w":
        open_kwargs.setdefault("encoding", "utf-8")
    with atomic_outputs(path, inputs=inputs, make_parents=make_parents, what=what) as (tmp,):
        with open(tmp, mode, **open_kwargs) as fh:
            yield fh


# ---------------------------------------------------------------- folders in a cache
def temp_dir(parent, name: str) -> Path:
    """A new private folder in ``parent`` for building ``parent/name``; its name carries
    this process's id so :func:`remove_stale_temps` can tell when it is abandoned."""
    Path(parent).mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=parent, prefix=_temp_prefix(name)))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


#: A temporary entry whose process still runs is left alone unless it is older than this
#: (the pid may have been reused; no flow runs this long: every tool has a timeout).
STALE_AFTER_S = 24 * 3600.0


def remove_stale_temps(parent, *, name: str | None = None, min_age_s: float = 5.0) -> int:
    """Remove temporary files and folders in ``parent`` left by processes that are gone
    (killed, or a crash); return how many. ``name`` limits it to one target's temporaries.

    Entries younger than ``min_age_s`` are kept (their process may not be visible yet in
    another PID namespace); those of live processes are kept for :data:`STALE_AFTER_S`.
    """
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return 0
    now, removed = time.time(), 0
    for ent in entries:
        n = ent.name
        if not n.startswith("."):
            continue
        head, sep, tail = n.rpartition(".tmp")
        if not sep or (name is not None and head != f".{name}"):
            continue
        pid_text = tail.split("-", 1)[0]
        if not pid_text.isdigit():
            continue
        try:
            age = now - ent.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        pid = int(pid_text)
        if age < min_age_s or pid == os.getpid():
            continue
        if _pid_alive(pid) and age < STALE_AFTER_S:
            continue
        try:
            if ent.is_dir(follow_symlinks=False):
                shutil.rmtree(ent.path)
            else:
                os.unlink(ent.path)
            removed += 1
        except OSError:
            pass
    return removed


def publish_dir(tmp, final, *, replace: bool = False) -> bool:
    """Move the finished folder ``tmp`` to ``final`` in one ``rename``.

    If ``final`` exists (another process published the same entry meanwhile), it is kept
    and ``tmp`` removed unless ``replace``, in which case the old one is moved aside and
    removed. Never fails because of a concurrent writer of the same entry.

    Returns
    -------
    bool
        True if ``tmp`` became ``final``; False if an existing ``final`` was kept.
    """
    tmp, final = Path(tmp), Path(final)
    for _ in range(100):
        try:
            os.rename(tmp, final)  # atomic; refuses a non-empty existing folder
            _fsync_dir(final.parent)
            return True
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        if not replace:
            shutil.rmtree(tmp, ignore_errors=True)
            return False
        aside = Path(tempfile.mkdtemp(dir=final.parent, prefix=_temp_prefix(final.name)))
        try:
            os.rename(final, aside / final.name)
        except FileNotFoundError:
            pass  # someone moved it first: try again
        shutil.rmtree(aside, ignore_errors=True)
    raise OutputError(f"cannot publish {str(final)!r}: other processes keep replacing it")
