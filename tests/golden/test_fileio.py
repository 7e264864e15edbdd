"""The one output writer (mactile.golden.fileio): checks first, atomic, umask, symlinks."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

from mactile.golden import fileio
from mactile.golden.fileio import (OutputError, atomic_open, atomic_outputs, atomic_write,
                                   check_output_dir, check_output_file, check_outputs,
                                   publish_dir, remove_stale_temps, temp_dir)


def names(folder):
    return sorted(os.listdir(folder))


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_new_file_honours_umask(tmp_path, umask_027):
    atomic_write(tmp_path / "a.txt", "x")
    assert stat.S_IMODE(os.stat(tmp_path / "a.txt").st_mode) == 0o640
    assert fileio.umask() == 0o027


def test_replaced_file_keeps_its_mode(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("old")
    p.chmod(0o604)
    atomic_write(p, "new")
    assert p.read_text() == "new" and stat.S_IMODE(os.stat(p).st_mode) == 0o604


def test_failure_leaves_old_file_and_no_temporary(tmp_path):
    p = tmp_path / "a.npy"
    p.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_outputs(p) as (tmp,):
            np.save(tmp, np.zeros(3))
            raise RuntimeError("boom")
    assert p.read_bytes() == b"old" and names(tmp_path) == ["a.npy"]


def test_all_or_nothing_for_several_outputs(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with atomic_outputs(tmp_path / "a", tmp_path / "b") as (ta, tb):
            ta.write_text("a")
            raise KeyboardInterrupt
    assert names(tmp_path) == []
    with atomic_outputs(tmp_path / "a", tmp_path / "b") as (ta, tb):
        ta.write_text("a")
        tb.write_text("b")
    assert names(tmp_path) == ["a", "b"]


def test_temporaries_keep_the_suffix(tmp_path):
    with atomic_outputs(tmp_path / "plot.png", tmp_path / "x.npy") as (tp, tx):
        assert tp.suffix == ".png" and tx.suffix == ".npy" and tp.parent == tmp_path
        tp.write_bytes(b"png")
        np.save(tx, np.ones(2))  # np.save would append .npy to a name without it
    assert names(tmp_path) == ["plot.png", "x.npy"]


@pytest.mark.parametrize("make, what", [
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: os.mkfifo(p), r"is a FIFO \(named pipe\)"),
])
def test_refuses_non_regular_outputs(tmp_path, make, what):
    p = tmp_path / "out"
    make(p)
    with pytest.raises(OutputError, match=rf"output '{p}' {what}, not a regular file"):
        atomic_write(p, "x")
    assert names(tmp_path) == ["out"]


def test_refuses_a_device():
    with pytest.raises(OutputError, match="'/dev/null' is a character device"):
        check_output_file("/dev/null")


def test_symlink_is_written_through(tmp_path):
    (tmp_path / "real.txt").write_text("old")
    (tmp_path / "link.txt").symlink_to("real.txt")
    atomic_write(tmp_path / "link.txt", "new")
    assert (tmp_path / "link.txt").is_symlink()
    assert (tmp_path / "real.txt").read_text() == "new"


def test_symlink_to_a_directory_or_device_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "l1").symlink_to("d")
    (tmp_path / "l2").symlink_to("/dev/null")
    with pytest.raises(OutputError, match=r"through the symlink .*l1'\) is a directory"):
        check_output_file(tmp_path / "l1")
    with pytest.raises(OutputError, match="character device"):
        check_output_file(tmp_path / "l2")
    assert (tmp_path / "l2").is_symlink()


def test_symlink_loop(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(OutputError):
        check_output_file(tmp_path / "a")


def test_same_as_input_or_another_output(tmp_path):
    (tmp_path / "in.npy").write_bytes(b"x")
    (tmp_path / "alias.npy").symlink_to("in.npy")
    with pytest.raises(OutputError, match="is the input"):
        check_output_file(tmp_path / "in.npy", inputs=[tmp_path / "in.npy"])
    with pytest.raises(OutputError, match="is the input"):
        check_output_file(tmp_path / "alias.npy", inputs=[str(tmp_path / "in.npy")])
    with pytest.raises(OutputError, match=r"--codes file '.*o.npy' is the same file as output"):
        check_outputs([tmp_path / "o.npy", tmp_path / "." / "o.npy"],
                      what=["output", "--codes file"])


def test_read_only_existing_file_is_refused(tmp_path):
    p = tmp_path / "ro.txt"
    p.write_text("keep")
    p.chmod(0o444)
    with pytest.raises(OutputError, match=r"exists and is read-only \(mode 0444\)"):
        atomic_write(p, "x")
    assert p.read_text() == "keep"


def test_missing_folder_and_file_as_folder(tmp_path):
    with pytest.raises(OutputError, match="output directory .* does not exist"):
        check_output_file(tmp_path / "no" / "x.npy")
    (tmp_path / "f").write_text("")
    with pytest.raises(OutputError, match="a parent of it is a file"):
        check_output_file(tmp_path / "f" / "x.npy")
    with pytest.raises(OutputError, match="is a regular file, not a folder|not a folder"):
        check_output_dir(tmp_path / "f")
    with pytest.raises(OutputError, match="is a regular file, not a folder|not a folder"):
        check_output_dir(tmp_path / "f" / "sub")
    assert check_output_dir(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    assert names(tmp_path) == ["f"]  # nothing created by a check


def test_empty_path():
    with pytest.raises(OutputError, match="path is empty"):
        check_output_file("")


def test_make_parents(tmp_path):
    atomic_write(tmp_path / "a" / "b" / "c.txt", "x", make_parents=True)
    assert (tmp_path / "a" / "b" / "c.txt").read_text() == "x"


def test_atomic_open(tmp_path):
    with atomic_open(tmp_path / "t.txt") as fh:
        fh.write("héllo")
    assert (tmp_path / "t.txt").read_text(encoding="utf-8") == "héllo"
    with pytest.raises(ValueError, match="mode 'w' or 'wb'"):
        with atomic_open(tmp_path / "t.txt", "a"):
            pass


def test_output_error_is_an_os_error_with_a_plain_message():
    e = OutputError("output 'x' is a directory")
    assert isinstance(e, OSError) and str(e) == "output 'x' is a directory"
    assert fileio.describe_os_error(PermissionError(13, "Permission denied", "ro/x")) == \
        "'ro/x': permission denied"


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path):
    dead = _dead_pid()
    stale_dir = tmp_path / f".run.tmp{dead}-abc"
    stale_dir.mkdir()
    (stale_dir / "f").write_text("x")
    stale_file = tmp_path / f".out.npy.tmp{dead}-xyz.npy"
    stale_file.write_text("x")
    live = tmp_path / f".run.tmp{os.getpid()}-def"
    live.mkdir()
    keep = tmp_path / ".hidden"
    keep.mkdir()
    old = time.time() - 60
    for p in (stale_dir, stale_file, live, keep):
        os.utime(p, (old, old))
    assert remove_stale_temps(tmp_path, name="other") == 0
    assert remove_stale_temps(tmp_path) == 2
    assert names(tmp_path) == sorted([live.name, keep.name])


def test_publish_dir(tmp_path):
    final = tmp_path / "entry"
    a = temp_dir(tmp_path, "entry")
    (a / "r").write_text("a")
    assert publish_dir(a, final) and (final / "r").read_text() == "a"
    b = temp_dir(tmp_path, "entry")
    (b / "r").write_text("b")
    assert not publish_dir(b, final)  # the first one is kept
    assert (final / "r").read_text() == "a" and not b.exists()
    c = temp_dir(tmp_path, "entry")
    (c / "r").write_text("c")
    assert publish_dir(c, final, replace=True) and (final / "r").read_text() == "c"
    assert names(tmp_path) == ["entry"]
