"""`mactile quantize` on bad input: a clear message, a non-zero exit, and no output file.

Most cases call ``mactile.cli.main.main`` in-process; one runs the installed entry point as a
subprocess, as a user would.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from mactile.cli.main import main


def run_cli(argv, capsys):
    """(exit status, stderr) of ``mactile`` with ``argv``; argparse errors exit too."""
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse usage errors
        rc = e.code
    return rc, capsys.readouterr().err


def leftovers(folder, keep=("x.npy",)):
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


@pytest.fixture
def good(tmp_path):
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    return tmp_path


def write(tmp_path, arr):
    np.save(tmp_path / "x.npy", arr)
    return str(tmp_path / "x.npy")


@pytest.mark.parametrize("bad, where", [(np.nan, "NaN at index (1, 7)"), (np.inf, "inf at index (1, 7)")])
@pytest.mark.parametrize("fmt", ["nvfp4", "razer", "dialectfp4", "int-group", "nestedfp"])
def test_non_finite(tmp_path, capsys, bad, where, fmt):
    x = np.zeros((2, 128), np.float32)
    x[1, 7] = bad
    rc, err = run_cli(["quantize", "--format", fmt, write(tmp_path, x), str(tmp_path / "y.npy"),
                       "--codes", str(tmp_path / "c.npz")], capsys)
    assert rc != 0
    assert "mactile: error:" in err and where in err and "x.npy" in err
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("argv_tail, message", [
    (["--format", "nvfp4"], "last axis has 20 elements, not a multiple of the block size 16"),
    (["--format", "mxfp4", "--block", "8"], "last axis has 20 elements, not a multiple of the "
                                            "block size 8"),
    (["--format", "fp5"], "unknown format 'fp5'"),
    (["--format", "razer", "--special-values", "5,7.3"], "off the 0.5 grid"),
    (["--format", "razer", "--special-values", "5,11"], "out of range"),
    (["--format", "razer", "--special-values", "5"], "two special magnitudes"),
    (["--format", "razer", "--special-values", "five,7"], "numbers separated by commas"),
    (["--format", "razer-act", "--special-values", "2"], "out of range"),
    (["--format", "nvfp4", "--special-values", "5"], "no special values"),
    (["--format", "dialectfp4", "--block", "20"], "block size must be one of"),
    (["--format", "int-group", "--bits", "12"], "bits must lie in [2, 8]"),
    (["--format", "nestedfp", "--block", "4"], "has no blocks"),
])
def test_bad_options_and_shapes(tmp_path, capsys, argv_tail, message):
    x = np.zeros((3, 20), np.float32)
    rc, err = run_cli(["quantize", *argv_tail, write(tmp_path, x), str(tmp_path / "y.npy")],
                      capsys)
    assert rc != 0 and message in err
    assert leftovers(tmp_path) == []


def test_bad_select_is_a_usage_error(good, capsys):
    rc, err = run_cli(["quantize", "--format", "dialectfp4", "--select", "best",
                       str(good / "x.npy"), str(good / "y.npy")], capsys)
    assert rc == 2 and "invalid choice: 'best'" in err
    assert leftovers(good) == []


@pytest.mark.parametrize("arr, message", [
    (np.arange(64, dtype=np.int16).reshape(4, 16), "expected a floating-point array, got dtype int16"),
    (np.zeros((4, 16), np.complex128), "complex input"),
    (np.zeros((4, 16), bool), "got dtype bool"),
    (np.float32(3.0), "at least a 1-d array"),
])
def test_wrong_dtype(tmp_path, capsys, arr, message):
    rc, err = run_cli(["quantize", "--format", "nvfp4", write(tmp_path, arr),
                       str(tmp_path / "y.npy")], capsys)
    assert rc != 0 and message in err
    assert leftovers(tmp_path) == []


def test_missing_file(tmp_path, capsys):
    rc, err = run_cli(["quantize", "--format", "nvfp4", str(tmp_path / "nope.npy"),
                       str(tmp_path / "y.npy")], capsys)
    assert rc != 0 and "does not exist" in err and "nope.npy" in err
    assert leftovers(tmp_path, keep=()) == []


@pytest.mark.parametrize("content, message", [
    (b"not a numpy file at all", "is not a NumPy .npy file"),
    (b"\x93NUMPY\x01\x00", "cannot read"),  # truncated header
])
def test_unreadable_file(tmp_path, capsys, content, message):
    (tmp_path / "x.npy").write_bytes(content)
    rc, err = run_cli(["quantize", "--format", "nvfp4", str(tmp_path / "x.npy"),
                       str(tmp_path / "y.npy")], capsys)
    assert rc != 0 and message in err and "x.npy" in err
    assert leftovers(tmp_path) == []


def test_truncated_data(tmp_path, capsys):
    np.save(tmp_path / "full.npy", np.zeros((64, 64), np.float32))
    data = (tmp_path / "full.npy").read_bytes()
    (tmp_path / "x.npy").write_bytes(data[: len(data) // 2])
    rc, err = run_cli(["quantize", "--format", "nvfp4", str(tmp_path / "x.npy"),
                       str(tmp_path / "y.npy")], capsys)
    assert rc != 0 and "is truncated or damaged: its header claims shape (64, 64)" in err
    assert leftovers(tmp_path, keep=("x.npy", "full.npy")) == []


def test_pickled_object_array_is_refused(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    rc, err = run_cli(["quantize", "--format", "nvfp4", str(tmp_path / "x.npy"),
                       str(tmp_path / "y.npy")], capsys)
    assert rc != 0 and "holds Python objects" in err
    assert leftovers(tmp_path) == []


def test_directory_as_input(tmp_path, capsys):
    (tmp_path / "d.npy").mkdir()
    rc, err = run_cli(["quantize", "--format", "nvfp4", str(tmp_path / "d.npy"),
                       str(tmp_path / "y.npy")], capsys)
    assert rc != 0 and "is a directory" in err
    assert leftovers(tmp_path, keep=("d.npy",)) == []


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root reads files whatever their permissions")
def test_permission_denied(good, capsys):
    (good / "x.npy").chmod(0)
    try:
        rc, err = run_cli(["quantize", "--format", "nvfp4", str(good / "x.npy"),
                           str(good / "y.npy")], capsys)
    finally:
        (good / "x.npy").chmod(0o644)
    assert rc != 0 and "permission denied" in err
    assert leftovers(good) == []


def test_missing_output_directory(good, capsys):
    rc, err = run_cli(["quantize", "--format", "nvfp4", str(good / "x.npy"),
                       str(good / "no" / "y.npy")], capsys)
    assert rc != 0 and "output directory" in err and "does not exist" in err
    assert leftovers(good) == []


def test_failed_run_keeps_an_existing_output(tmp_path, capsys):
    x = np.zeros((2, 16), np.float32)
    x[0, 0] = np.nan
    (tmp_path / "y.npy").write_bytes(b"old")
    rc, _ = run_cli(["quantize", "--format", "nvfp4", write(tmp_path, x),
                     str(tmp_path / "y.npy")], capsys)
    assert rc != 0 and (tmp_path / "y.npy").read_bytes() == b"old"
    assert leftovers(tmp_path, keep=("x.npy", "y.npy")) == []


def test_codes_output_in_missing_directory_writes_nothing(good, capsys):
    rc, err = run_cli(["quantize", "--format", "nvfp4", str(good / "x.npy"), str(good / "y.npy"),
                       "--codes", str(good / "no" / "c.npz")], capsys)
    assert rc != 0 and "output directory" in err
    assert leftovers(good) == []  # not even y.npy


def test_entry_point_subprocess(tmp_path):
    """The installed command, as a user runs it: message on stderr, status 2, no file."""
    x = np.zeros((2, 16), np.float32)
    x[1, 3] = np.inf
    exe = os.path.join(os.path.dirname(sys.executable), "mactile")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "mactile.cli.main"]
    p = subprocess.run(cmd + ["quantize", "--format", "razer", write(tmp_path, x),
                              str(tmp_path / "y.npy")], capture_output=True, text=True)
    assert p.returncode == 2
    assert "mactile: error:" in p.stderr and "inf at index (1, 3)" in p.stderr
    assert p.stdout == ""
    assert leftovers(tmp_path) == []
    ok = subprocess.run(cmd + ["quantize", "--format", "razer", write(tmp_path, np.ones((2, 16))),
                               str(tmp_path / "y.npy")], capture_output=True, text=True)
    assert ok.returncode == 0 and np.load(tmp_path / "y.npy").shape == (2, 16)
