"""Bad input to every command and to the public Python API (issue 20).

Each CLI case runs ``mactile`` in-process on a scratch folder holding good and bad inputs
and asserts: the exit status, a ``mactile: error:`` (or argparse usage) message that names
the problem (the path or the value), no traceback, and no file created, changed or removed
anywhere in the folder. The permission cases run the installed command in a subprocess as
a user whom file permissions bind: as root (CI), root without the capabilities that
override them (``setpriv --bounding-set -dac_override,...``); they skip, with the reason,
where that is impossible.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from mactile.cli.main import main

# ----------------------------------------------------------------------------- scratch
def _huge_header(path):
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(
            fh, {"descr": "<f4", "fortran_order": False, "shape": (10 ** 12, 16)})
        fh.write(b"\0" * 64)


@pytest.fixture
def d(tmp_path, monkeypatch):
    """The scratch folder (also the working folder) with every input the cases use."""
    rng = np.random.default_rng(7)
    np.save(tmp_path / "in.npy", rng.standard_normal((4, 64)).astype(np.float32))
    np.save(tmp_path / "in64.npy", rng.standard_normal((4, 64)))
    big = np.zeros((2, 64))
    big[1, 5] = 1e300
    np.save(tmp_path / "huge.npy", big)
    wide = np.zeros((2, 128), np.float32)
    wide[0, 3] = 7e4
    wide[1, 9] = 3e6
    np.save(tmp_path / "wide.npy", wide)
    nan = np.zeros((2, 64), np.float32)
    nan[1, 7] = np.nan
    np.save(tmp_path / "nan.npy", nan)
    np.save(tmp_path / "empty.npy", np.zeros((0, 64), np.float32))
    np.save(tmp_path / "empty2.npy", np.zeros((4, 0), np.float32))
    np.save(tmp_path / "int.npy", np.arange(64, dtype=np.int16).reshape(4, 16))
    np.save(tmp_path / "complex.npy", np.zeros((4, 16), np.complex64))
    np.save(tmp_path / "scalar.npy", np.float32(1.0))
    np.save(tmp_path / "odd.npy", np.zeros((3, 20), np.float32))
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "arch.npz", a=np.zeros(16))
    full = np.zeros((64, 64), np.float32)
    np.save(tmp_path / "full.npy", full)
    data = (tmp_path / "full.npy").read_bytes()
    (tmp_path / "trunc.npy").write_bytes(data[: len(data) // 2])
    _huge_header(tmp_path / "hdr.npy")
    (tmp_path / "text.txt").write_text("1 2 3\n4 5 6\n")
    (tmp_path / "bad.yaml").write_text("lanes: [1, 2\n")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "unknown.yaml").write_text("nope: 3\n")
    (tmp_path / "list.json").write_text("[1, 2]\n")
    (tmp_path / "badtable.json").write_text('{"engine": [{"format": "nvfp4"}]}\n')
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir.npy").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "todir").symlink_to("dir")
    (tmp_path / "alias.npy").symlink_to("in.npy")
    (tmp_path / "ro.npy").write_bytes(b"keep")
    (tmp_path / "ro.npy").chmod(0o444)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def snapshot(folder):
    """Every entry under ``folder`` with its type, size, mode and modification time."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for n in dirs + files:
            p = os.path.join(root, n)
            st = os.lstat(p)
            out[os.path.relpath(p, folder)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def run(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse usage errors
        rc = e.code
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


# ----------------------------------------------------------------------------- the table
Q = ["quantize", "--format"]
# (id, argv with {d} for the scratch folder, exit status, regex the message must match)
CASES = [
    # the command line itself
    ("no-command", [], 2, r"required: COMMAND"),
    ("unknown-command", ["frobnicate"], 2, r"invalid choice: 'frobnicate'"),
    ("list-bad-choice", ["list", "widgets"], 2, r"invalid choice: 'widgets'"),
    ("unrecognized-flag", Q + ["nvfp4", "{d}/in.npy", "{d}/o.npy", "--bogus"], 2,
     r"unrecognized arguments: --bogus"),
    # quantize: outputs (rows 1-3, 16)
    ("q-out-directory", Q + ["nvfp4", "{d}/in.npy", "{d}/dir"], 2,
     r"output '{d}/dir' is a directory, not a regular file"),
    ("q-out-device", Q + ["nvfp4", "{d}/in.npy", "/dev/full"], 2,
     r"output '/dev/full' is a character device"),
    ("q-out-fifo", Q + ["nvfp4", "{d}/in.npy", "{d}/fifo"], 2, r"'{d}/fifo' is a FIFO"),
    ("q-out-symlink-to-dir", Q + ["nvfp4", "{d}/in.npy", "{d}/todir"], 2,
     r"output '{d}/dir' \(through the symlink '{d}/todir'\) is a directory"),
    ("q-out-is-input", Q + ["nvfp4", "{d}/in.npy", "{d}/in.npy"], 2,
     r"output '{d}/in.npy' is the input '{d}/in.npy'"),
    ("q-out-links-to-input", Q + ["nvfp4", "{d}/in.npy", "{d}/alias.npy"], 2,
     r"output '{d}/alias.npy' is the input"),
    ("q-codes-is-output", Q + ["nvfp4", "--codes", "{d}/o.npy", "{d}/in.npy", "{d}/o.npy"], 2,
     r"--codes file '{d}/o.npy' is the same file as output"),
    ("q-codes-is-input", Q + ["nvfp4", "--codes", "{d}/in.npy", "{d}/in.npy", "{d}/o.npy"], 2,
     r"--codes file '{d}/in.npy' is the input"),
    ("q-out-under-a-file", Q + ["nvfp4", "{d}/in.npy", "{d}/in64.npy/o.npy"], 2,
     r"'{d}/in64.npy/o.npy': a parent of it is a file"),
    ("q-out-missing-folder", Q + ["nvfp4", "{d}/in.npy", "{d}/no/o.npy"], 2,
     r"output directory '{d}/no' does not exist"),
    ("q-out-read-only", Q + ["nvfp4", "{d}/in.npy", "{d}/ro.npy"], 2,
     r"output '{d}/ro.npy' exists and is read-only \(mode 0444\)"),
    ("q-out-empty-path", Q + ["nvfp4", "{d}/in.npy", ""], 2, r"output path is empty"),
    ("q-codes-missing-folder", Q + ["nvfp4", "--codes", "{d}/no/c.npz", "{d}/in.npy",
                                    "{d}/o.npy"], 2, r"output directory '{d}/no' does not"),
    # quantize: values (rows 4, 6)
    ("q-mxfp4-beyond-range", Q + ["mxfp4", "{d}/huge.npy", "{d}/o.npy"], 2,
     r"mxfp4: value 1e\+300 at index \(1, 5\) is out of range \(mxfp4 takes \|x\| < 2\*\*130"),
    ("q-nvfp4-beyond-fp32", Q + ["nvfp4", "{d}/huge.npy", "{d}/o.npy"], 2,
     r"nvfp4: value 1e\+300 at index \(1, 5\) is out of range \(nvfp4 takes \|x\| <= "
     r"3.4028235e\+38: it computes in FP32"),
    ("q-razer-beyond-fp32", Q + ["razer", "{d}/huge.npy", "{d}/o.npy"], 2,
     r"razer: value 1e\+300 .* out of range"),
    ("q-dialect-beyond-fp16", Q + ["dialectfp4", "{d}/wide.npy", "{d}/o.npy"], 2,
     r"dialectfp4: value 70000.0 at index \(0, 3\) is out of range \(dialectfp4 takes "
     r"\|x\| <= 65504"),
    ("q-intgroup-scale-overflow", Q + ["int-group", "{d}/wide.npy", "{d}/o.npy"], 2,
     r"int-group: value 3000000.0 at index \(1, 9\) is out of range \(int-group takes \|x\| <"),
    ("q-nestedfp-threshold", Q + ["nestedfp", "{d}/huge.npy", "{d}/o.npy"], 2,
     r"exceeds the eligibility threshold 1.75"),
    ("q-empty-rows", Q + ["nvfp4", "{d}/empty.npy", "{d}/o.npy"], 2,
     r"empty.npy: the array holds no elements \(shape \(0, 64\)\)"),
    ("q-empty-cols", Q + ["nvfp4", "{d}/empty2.npy", "{d}/o.npy"], 2,
     r"holds no elements \(shape \(4, 0\)\)"),
    ("q-nan", Q + ["razer-act", "{d}/nan.npy", "{d}/o.npy"], 2, r"NaN at index \(1, 7\)"),
    ("q-integer-dtype", Q + ["nvfp4", "{d}/int.npy", "{d}/o.npy"], 2,
     r"expected a floating-point array, got dtype int16"),
    ("q-complex", Q + ["nvfp4", "{d}/complex.npy", "{d}/o.npy"], 2, r"complex input"),
    ("q-scalar", Q + ["nvfp4", "{d}/scalar.npy", "{d}/o.npy"], 2, r"at least a 1-d array"),
    ("q-last-axis", Q + ["nvfp4", "{d}/odd.npy", "{d}/o.npy"], 2,
     r"last axis has 20 elements, not a multiple of the block size 16"),
    # quantize: input files (rows 7, 13)
    ("q-text-input", Q + ["nvfp4", "{d}/text.txt", "{d}/o.npy"], 2,
     r"'{d}/text.txt' is not a NumPy .npy file .*it looks like text"),
    ("q-npz-input", Q + ["nvfp4", "{d}/arch.npz", "{d}/o.npy"], 2,
     r"'{d}/arch.npz' is a .npz archive \(several arrays\), not a .npy array"),
    ("q-huge-header", Q + ["nvfp4", "{d}/hdr.npy", "{d}/o.npy"], 2,
     r"'{d}/hdr.npy' is truncated or damaged: its header claims shape \(1000000000000, 16\)"),
    ("q-truncated", Q + ["nvfp4", "{d}/trunc.npy", "{d}/o.npy"], 2,
     r"'{d}/trunc.npy' is truncated or damaged"),
    ("q-pickle", Q + ["nvfp4", "{d}/obj.npy", "{d}/o.npy"], 2, r"holds Python objects"),
    ("q-input-dir", Q + ["nvfp4", "{d}/dir.npy", "{d}/o.npy"], 2,
     r"input '{d}/dir.npy' is a directory"),
    ("q-input-missing", Q + ["nvfp4", "{d}/nope.npy", "{d}/o.npy"], 2,
     r"input file '{d}/nope.npy' does not exist"),
    ("q-input-fifo", Q + ["nvfp4", "{d}/fifo", "{d}/o.npy"], 2,
     r"input '{d}/fifo' is not a regular file"),
    # quantize: options
    ("q-unknown-format", Q + ["fp5", "{d}/in.npy", "{d}/o.npy"], 2, r"unknown format 'fp5'"),
    ("q-block-zero", Q + ["nvfp4", "--block", "0", "{d}/in.npy", "{d}/o.npy"], 2,
     r"block size must be positive, got 0"),
    ("q-block-not-int", Q + ["nvfp4", "--block", "1.5", "{d}/in.npy", "{d}/o.npy"], 2,
     r"argument --block: invalid int value: '1.5'"),
    ("q-bits-range", Q + ["int-group", "--bits", "12", "{d}/in.npy", "{d}/o.npy"], 2,
     r"int-group: bits must lie in \[2, 8\], got 12"),
    ("q-specials-words", Q + ["razer", "--special-values", "five,7", "{d}/in.npy", "{d}/o.npy"],
     2, r"--special-values must be numbers separated by commas, got 'five,7'"),
    ("q-specials-range", Q + ["razer", "--special-values", "5,11", "{d}/in.npy", "{d}/o.npy"],
     2, r"special value 11.0 is out of range"),
    ("q-select-wrong-format", Q + ["nvfp4", "--select", "mse", "{d}/in.npy", "{d}/o.npy"], 2,
     r"nvfp4 has no dialect selection"),
    # formats (row 9)
    ("study-negative-seed", ["formats", "study", "-o", "{d}/s", "--rows", "8", "--cols", "64",
                             "--seed", "-1", "--no-real", "--no-plot"], 2,
     r"argument --seed: expected a non-negative integer, got -1"),
    ("study-zero-rows", ["formats", "study", "-o", "{d}/s", "--rows", "0"], 2,
     r"argument --rows: expected a positive integer, got 0"),
    ("study-cols", ["formats", "study", "-o", "{d}/s", "--cols", "65", "--no-plot"], 2,
     r"--cols must be a positive multiple of 64, got 65"),
    ("study-rows-word", ["formats", "study", "--rows", "many"], 2,
     r"argument --rows: expected a positive integer, got 'many'"),
    ("study-out-file", ["formats", "study", "-o", "{d}/in.npy", "--rows", "8", "--cols", "64",
                        "--no-real", "--no-plot"], 2,
     r"output folder '{d}/in.npy' exists and is a regular file, not a folder"),
    ("study-out-under-file", ["formats", "study", "-o", "{d}/in.npy/s", "--rows", "8",
                              "--cols", "64", "--no-real", "--no-plot"], 2,
     r"a parent of it is a file"),
    ("study-out-device", ["formats", "study", "-o", "/dev/null", "--rows", "8", "--cols", "64",
                          "--no-real", "--no-plot"], 2, r"'/dev/null' exists and is a character"),
    ("table-unknown", ["formats", "table", "fp5"], 2, r"unknown element format 'fp5'"),
    ("table-too-wide", ["formats", "table", "fp16"], 2, r"fp16 has 16 bits; tables are printed"),
    # bench gpu (row 13); the paths are checked before the GPU
    ("bench-m-word", ["bench", "gpu", "--m", "abc"], 2,
     r"argument --m: expected a positive integer, got 'abc'"),
    ("bench-m-zero", ["bench", "gpu", "--m", "1,0"], 2,
     r"argument --m: expected a positive integer, got 0"),
    ("bench-m-empty-item", ["bench", "gpu", "--m", "1,,2"], 2,
     r"expected comma-separated positive integers, got '1,,2'"),
    ("bench-shapes-negative", ["bench", "gpu", "--shapes", "-1"], 2,
     r"argument --shapes: expected a non-negative integer, got -1"),
    ("bench-formats-empty", ["bench", "gpu", "--formats", ""], 2,
     r"argument --formats: expected comma-separated names, got ''"),
    ("bench-out-file", ["bench", "gpu", "-o", "{d}/in.npy"], 2,
     r"output folder '{d}/in.npy' exists and is a regular file"),
    ("bench-name-slash", ["bench", "gpu", "-o", "{d}/b", "--name", "a/b"], 2,
     r"--name must be a file name stem without '/', got 'a/b'"),
    ("bench-tuning-out-dir", ["bench", "gpu", "-o", "{d}/b", "--tuning-out", "{d}/dir"], 2,
     r"--tuning-out file '{d}/dir' is a directory"),
    ("bench-tuning-out-not-json", ["bench", "gpu", "-o", "{d}/b", "--tuning-out", "{d}/text.txt"], 2,
     r"--tuning-out file '{d}/text.txt' is not a readable JSON tuning table"),
    ("bench-formats-unknown", ["bench", "gpu", "-o", "{d}/b", "--formats", "nvfp5"], 2,
     r"unknown formats \['nvfp5'\]"),
    # bench tune: every check before the GPU
    ("tune-m-zero", ["bench", "tune", "--m", "8,0"], 2, r"argument --m: expected a positive integer, got 0"),
    ("tune-margin-big", ["bench", "tune", "--margin", "0.9"], 2,
     r"argument --margin: expected a fraction in \(0, 0.4\], got '0.9'"),
    ("tune-format-not-engine", ["bench", "tune", "-o", "{d}/b", "--formats", "flexq-w6a6"], 2,
     r"no engine tuning for \['flexq-w6a6'\]"),
    ("tune-table-not-object", ["bench", "tune", "-o", "{d}/b", "--tuning-out", "{d}/list.json"], 2,
     r"--tuning-out file '{d}/list.json' holds JSON but not a tuning table"),
    ("tune-table-bad-entries", ["bench", "tune", "-o", "{d}/b", "--tuning-out", "{d}/badtable.json"], 2,
     r"--tuning-out file '{d}/badtable.json': its 'engine' entries are not a list"),
    ("tune-shapes-range", ["bench", "tune", "-o", "{d}/b", "--shapes", "9"], 2,
     r"--shapes indices must be in 0..8, got \[9\]"),
    # generate (rows 8, 13, 14)
    ("gen-lanes-zero", ["generate", "nvfp4-decoder", "--lanes", "0", "-o", "{d}/g"], 2,
     r"nvfp4-decoder: lanes must be >= 1, got 0"),
    ("gen-specials-int", ["generate", "nvfp4-decoder", "--specials", "99", "-o", "{d}/g"], 2,
     r"nvfp4-decoder: nvfp4 has no special values: specials must be null or empty, got 99"),
    ("gen-specials-range", ["generate", "razer-weight-decoder", "--specials", "5,11", "-o",
                            "{d}/g"], 2, r"special value 11.0 is out of range"),
    ("gen-lanes-float", ["generate", "nvfp4-decoder", "--lanes", "1.5", "-o", "{d}/g"], 2,
     r"parameter lanes must be an integer like its default 16, got 1.5"),
    ("gen-format-list", ["generate", "mac-int4", "--a-format", "[]", "-o", "{d}/g"], 2,
     r"parameter a_format must be a string like its default 'int4', got \[\]"),
    ("gen-unknown-param", ["generate", "mac-int4", "--lanes", "3", "-o", "{d}/g"], 2,
     r"mac-int4: unknown parameter --lanes; parameters: --a-format"),
    ("gen-unknown-design", ["generate", "mac-int3", "-o", "{d}/g"], 2,
     r"unknown design 'mac-int3'"),
    ("gen-no-out", ["generate", "mac-int4"], 2, r"generate needs an output folder: -o DIR"),
    ("gen-out-file", ["generate", "mac-int4", "-o", "{d}/in.npy"], 2,
     r"output folder '{d}/in.npy' exists and is a regular file, not a folder"),
    ("gen-out-under-file", ["generate", "mac-int4", "-o", "{d}/in.npy/g"], 2,
     r"a parent of it is a file"),
    ("gen-config-missing", ["generate", "mac-int4", "--config", "{d}/nope.yaml", "-o", "{d}/g"],
     2, r"config file '{d}/nope.yaml' does not exist"),
    ("gen-config-bad-yaml", ["generate", "mac-int4", "--config", "{d}/bad.yaml", "-o", "{d}/g"],
     2, r"cannot parse '{d}/bad.yaml' as YAML"),
    ("gen-config-not-mapping", ["generate", "mac-int4", "--config", "{d}/list.yaml", "-o",
                                "{d}/g"], 2, r"must hold a mapping of parameter names"),
    ("gen-config-unknown", ["generate", "mac-int4", "--config", "{d}/unknown.yaml", "-o",
                            "{d}/g"], 2, r"unknown parameter\(s\) \['nope'\]"),
    ("gen-flag-no-value", ["generate", "mac-int4", "-o", "{d}/g", "--terms"], 2,
     r"--terms needs a value"),
    ("gen-terms-zero", ["generate", "mac-int4", "--terms", "0", "-o", "{d}/g"], 2,
     r"terms must be a positive integer, got 0"),
    # sim: everything checked before a simulator starts
    ("sim-unknown-design", ["sim", "mac-int3"], 2, r"unknown design 'mac-int3'"),
    ("sim-json-dir", ["sim", "mac-int4", "--json", "{d}/dir"], 2,
     r"--json file '{d}/dir' is a directory"),
    ("sim-json-missing-folder", ["sim", "mac-int4", "--json", "{d}/no/r.json"], 2,
     r"output directory '{d}/no' does not exist"),
    ("sim-out-file", ["sim", "mac-int4", "--out", "{d}/in.npy"], 2,
     r"--out folder '{d}/in.npy' exists and is a regular file"),
    ("sim-instances-zero", ["sim", "mac-int4", "--instances", "0"], 2,
     r"argument --instances: expected a positive integer, got 0"),
    ("sim-seed-negative", ["sim", "mac-int4", "--seed", "-3"], 2,
     r"argument --seed: expected a non-negative integer, got -3"),
    ("sim-vectors-word", ["sim", "mac-int4", "--vectors", "lots"], 2,
     r"argument --vectors: expected a positive integer, got 'lots'"),
    ("sim-lanes-is-a-design-parameter", ["sim", "mac-int4", "--lanes", "3"], 2,
     r"mac-int4: unknown parameter --lanes"),
    ("sim-decoder-lanes-zero", ["sim", "nvfp4-decoder", "--lanes", "0"], 2,
     r"lanes must be >= 1, got 0"),
    # synth
    ("synth-unknown-design", ["synth", "mac-int3"], 2, r"unknown design 'mac-int3'"),
    ("synth-clock-zero", ["synth", "mac-int4", "--clock-ns", "0"], 2,
     r"argument --clock-ns: expected a clock period in ns in \(0, 1e\+06\], got '0'"),
    ("synth-clock-nan", ["synth", "mac-int4", "--clock-ns", "nan"], 2,
     r"expected a clock period in ns in \(0, 1e\+06\], got 'nan'"),
    ("synth-timeout-negative", ["synth", "mac-int4", "--timeout", "-5"], 2,
     r"argument --timeout: expected a number of seconds in \(0, 604800\], got '-5'"),
    ("synth-liberty-text", ["synth", "mac-int4", "--liberty", "{d}/text.txt"], 2,
     r"is not a liberty file"),
    ("synth-liberty-missing", ["synth", "mac-int4", "--liberty", "{d}/nope.lib"], 2,
     r"does not exist"),
    ("synth-out-file", ["synth", "mac-int4", "-o", "{d}/in.npy"], 2,
     r"output folder '{d}/in.npy' exists and is a regular file"),
    ("synth-param-no-equals", ["synth", "mac-int4", "--param", "terms"], 2,
     r"--param needs KEY=VALUE, got 'terms'"),
    ("synth-param-unknown", ["synth", "mac-int4", "--param", "nope=3"], 2,
     r"mac-int4: unknown parameter\(s\) \['nope'\]"),
    ("synth-param-kind", ["synth", "mac-int4", "--param", "terms=abc"], 2,
     r"parameter terms must be an integer like its default 64, got 'abc'"),
    # report (row 1: checked before minutes of work)
    ("report-out-file", ["report", "-o", "{d}/in.npy", "--designs", "mac-int4"], 2,
     r"output folder '{d}/in.npy' exists and is a regular file"),
    ("report-out-device", ["report", "-o", "/dev/null"], 2, r"'/dev/null' exists and is a"),
    ("report-unknown-design", ["report", "-o", "{d}/r", "--designs", "mac-int4", "nope"], 2,
     r"unknown design\(s\) nope"),
    ("report-jobs-zero", ["report", "-o", "{d}/r", "--jobs", "0"], 2,
     r"argument --jobs/-j: expected a positive integer, got 0"),
    ("report-paper-clock", ["report", "-o", "{d}/r", "--paper", "--clock-ns", "5"], 2,
     r"--paper runs each table on its own library and clock"),
]


@pytest.mark.parametrize("argv, status, pattern", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_cli_bad_input(d, capsys, argv, status, pattern):
    argv = [a.replace("{d}", str(d)) for a in argv]
    before = snapshot(d)
    rc, out, err = run(argv, capsys)
    assert rc == status, err
    assert re.search(pattern.replace("{d}", re.escape(str(d))), err), err
    assert "Traceback" not in err + out
    assert err.startswith(("mactile: error: ", "usage: mactile")), err
    assert snapshot(d) == before, "a file was created, changed or removed"


def test_case_count():
    """The issue asks for at least 80 cases over every command."""
    assert len(CASES) >= 80
    commands = {c[1][0] for c in CASES if c[1]}
    assert {"quantize", "formats", "bench", "generate", "sim", "synth", "report",
            "list"} <= commands


# ----------------------------------------------------------------------------- --debug
def test_debug_shows_the_traceback(d, capsys, monkeypatch):
    argv = ["quantize", "--format", "nvfp4", str(d / "in.npy"), str(d / "dir")]
    with pytest.raises(OSError, match="is a directory"):
        main(["--debug"] + argv)
    monkeypatch.setenv("MACTILE_DEBUG", "1")
    with pytest.raises(OSError):
        main(argv)
    monkeypatch.setenv("MACTILE_DEBUG", "0")
    assert main(argv) == 2


def test_underflowing_input_is_reported_as_all_zero(d, capsys):
    """Row 5: values near 1e-200 quantize to zeros; the summary says so (no 'MSE 0')."""
    np.save(d / "tiny.npy", np.full((2, 64), 1e-200))
    rc, out, err = run(["quantize", "--format", "nvfp4", str(d / "tiny.npy"), str(d / "o.npy")],
                       capsys)
    assert rc == 0 and err == ""
    assert "MSE 1e-400, SQNR 0.00 dB (every output is zero" in out


def test_new_output_honours_the_umask(d, capsys):
    """Row 2: outputs were 0600 whatever the umask."""
    old = os.umask(0o002)
    try:
        rc, _, _ = run(["quantize", "--format", "nvfp4", str(d / "in.npy"), str(d / "o.npy")],
                       capsys)
    finally:
        os.umask(old)
    assert rc == 0 and (os.stat(d / "o.npy").st_mode & 0o777) == 0o664


def test_symlinked_output_is_written_through(d, capsys):
    """Row 3: a symlink output is written through, never replaced by a regular file."""
    (d / "target.npy").write_bytes(b"old")
    (d / "link.npy").symlink_to("target.npy")
    rc, _, err = run(["quantize", "--format", "nvfp4", str(d / "in.npy"), str(d / "link.npy")],
                     capsys)
    assert rc == 0, err
    assert (d / "link.npy").is_symlink() and np.load(d / "target.npy").shape == (4, 64)


# ----------------------------------------------------------------------------- Python API
from mactile.golden import (FP4_E2M1, INT4, MXFP4, NVFP4, DialectFP4, FloatFormat,  # noqa: E402
                            InputError, IntFormat, IntGroup, NestedFP, RaZeR, RaZeRAct,
                            ReductionLayout, StepAwareTemperature, get_format)
from mactile.golden.fileio import OutputError, atomic_write  # noqa: E402

API_CASES = [
    ("nvfp4-block-float", lambda: NVFP4(block_size=16.5), TypeError,
     r"nvfp4: block size must be an integer, got 16.5 \(float\)"),
    ("nvfp4-block-bool", lambda: NVFP4(block_size=True), TypeError, r"got True \(bool\)"),
    ("intgroup-bits-float", lambda: IntGroup(bits=6.5), TypeError,
     r"int-group: bits must be an integer, got 6.5"),
    ("get-format-bits-float", lambda: get_format("int-group", bits=6.7), TypeError,
     r"bits must be an integer, got 6.7"),
    ("get-format-block-str", lambda: get_format("nvfp4", block_size="16"), TypeError,
     r"block size must be an integer, got '16'"),
    ("int4-decode-range", lambda: INT4.decode([99]), ValueError,
     r"int4: codes must lie in \[0, 16\)"),
    ("fp4-decode-range", lambda: FP4_E2M1.decode([16]), ValueError,
     r"fp4_e2m1: codes must lie in \[0, 16\)"),
    ("int4-decode-negative", lambda: INT4.decode([-1]), ValueError, r"codes must lie in"),
    ("razer-specials-str", lambda: RaZeR(special_values=(5, "7")), TypeError,
     r"razer: special_values must be numbers, got '7'"),
    ("razer-specials-scalar", lambda: RaZeR(special_values=5), TypeError,
     r"special_values must be two numbers"),
    ("razer-act-none", lambda: RaZeRAct(special_value=None), TypeError,
     r"special_value must be numbers, got None"),
    ("dialect-select", lambda: DialectFP4(select="best"), ValueError,
     r"dialectfp4: select must be one of 'two-stage', 'mse', got 'best'"),
    ("nestedfp-threshold-str", lambda: NestedFP(threshold="1.5"), TypeError,
     r"nestedfp: threshold must be a real number, got '1.5'"),
    ("floatformat-exp-zero", lambda: FloatFormat(name="x", exp_bits=0, man_bits=1, bias=1),
     ValueError, r"x: exp_bits must be >= 1, got 0"),
    ("intformat-bits-bool", lambda: IntFormat(name="y", bits=True), TypeError,
     r"y: bits must be an integer, got True"),
    ("mxfp4-range", lambda: MXFP4().quantize(np.full((1, 32), 1e300)), InputError,
     r"mxfp4: value 1e\+300 at index \(0, 0\) is out of range"),
    ("empty-metrics", lambda: NVFP4().quantize(np.zeros((0, 16))).error(np.zeros((0, 16))),
     ValueError, r"no elements to compare"),
    ("unknown-format", lambda: get_format("nope"), ValueError, r"unknown format 'nope'"),
    ("temperature-window", lambda: StepAwareTemperature(window=0), ValueError,
     r"StepAwareTemperature: window must be >= 1, got 0"),
    ("layout-threads", lambda: ReductionLayout(threads=2.5), TypeError,
     r"ReductionLayout: threads must be an integer"),
    ("writer-directory", lambda: atomic_write(os.getcwd(), "x"), OutputError,
     r"is a directory, not a regular file"),
]


@pytest.mark.parametrize("make, exc, pattern", [c[1:] for c in API_CASES],
                         ids=[c[0] for c in API_CASES])
def test_api_bad_input(d, make, exc, pattern):
    before = snapshot(d)
    with pytest.raises(exc, match=pattern):
        make()
    assert snapshot(d) == before


def test_design_parameters_checked_at_resolve():
    from mactile.rtl.registry import get_design

    with pytest.raises(TypeError, match=r"nvfp4-decoder: parameter lanes must be an integer"):
        get_design("nvfp4-decoder").resolve(lanes=1.5)
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['lane'\]"):
        get_design("nvfp4-decoder").resolve(lane=3)


# ----------------------------------------------------------------------------- permissions
def _unprivileged_prefix() -> list[str] | None | str:
    """A command prefix under which file permissions bind: none when not root, setpriv
    dropping the DAC-override capabilities as root; a reason string where impossible."""
    if os.geteuid() != 0:
        return []
    exe = shutil.which("setpriv")
    if exe is None:
        return "running as root and setpriv (util-linux) is not installed"
    prefix = [exe, "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    probe = subprocess.run(prefix + [sys.executable, "-c", "print(1)"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        return f"cannot drop root's DAC capabilities here: {probe.stderr.strip()[:200]}"
    return prefix


@pytest.fixture
def unprivileged():
    prefix = _unprivileged_prefix()
    if isinstance(prefix, str):
        pytest.skip(prefix)
    return prefix


@pytest.fixture
def ro(d):
    folder = d / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    yield folder
    folder.chmod(0o755)


PERMISSION_CASES = [
    ("quantize-into-read-only", ["quantize", "--format", "nvfp4", "{d}/in.npy", "{d}/ro/o.npy"],
     r"cannot write in '{d}/ro': permission denied"),
    ("report-into-read-only", ["report", "-o", "{d}/ro/rep", "--designs", "mac-int4",
                               "mac-fp4"], r"cannot write in '{d}/ro': permission denied"),
    ("generate-into-read-only", ["generate", "mac-int4", "-o", "{d}/ro/g"],
     r"cannot write in '{d}/ro': permission denied"),
    ("study-into-read-only", ["formats", "study", "-o", "{d}/ro/s", "--rows", "8", "--cols",
                              "64", "--no-real", "--no-plot"],
     r"cannot write in '{d}/ro': permission denied"),
    ("sim-json-into-read-only", ["sim", "mac-int4", "--json", "{d}/ro/r.json"],
     r"cannot write in '{d}/ro': permission denied"),
    ("synth-into-read-only", ["synth", "mac-int4", "-o", "{d}/ro/s"],
     r"cannot write in '{d}/ro': permission denied"),
    ("quantize-unreadable-input", ["quantize", "--format", "nvfp4", "{d}/secret.npy",
                                   "{d}/o.npy"], r"cannot read '{d}/secret.npy': permission denied"),
]


@pytest.mark.parametrize("argv, pattern", [c[1:] for c in PERMISSION_CASES],
                         ids=[c[0] for c in PERMISSION_CASES])
def test_permission_denied(d, ro, unprivileged, argv, pattern):
    np.save(d / "secret.npy", np.zeros((2, 16), np.float32))
    (d / "secret.npy").chmod(0)
    before = snapshot(d)
    env = {**os.environ, "MACTILE_CACHE_DIR": str(d / "cache")}
    p = subprocess.run(unprivileged + [sys.executable, "-m", "mactile.cli.main"]
                       + [a.replace("{d}", str(d)) for a in argv],
                       capture_output=True, text=True, cwd=d, env=env)
    assert p.returncode == 2, p.stderr
    assert re.search(pattern.replace("{d}", re.escape(str(d))), p.stderr), p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    after = snapshot(d)
    after.pop("cache", None)
    assert after == before


# ----------------------------------------------------------------------------- flag names
def _subparser(name):
    import argparse

    from mactile.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@pytest.mark.parametrize("command", ["generate", "sim", "synth"])
def test_no_design_parameter_shares_a_flag_name(command):
    """Row 14: `sim --lanes` meant simulated copies while the decoders' design parameter
    `--lanes` (a flag of generate and sim alike) meant the lane count. One meaning per
    flag: no command option may be named like a design parameter."""
    from mactile.rtl.registry import DESIGNS

    options = {s for a in _subparser(command)._actions for s in a.option_strings}
    clashes = sorted(f"{d.name}: --{p.replace('_', '-')}" for d in DESIGNS.values()
                     for p in d.params if f"--{p.replace('_', '-')}" in options)
    assert clashes == []


def test_sim_show_params_reads_lanes_as_the_design_parameter(capsys):
    rc, out, _ = run(["sim", "nvfp4-decoder", "--lanes", "3", "--show-params"], capsys)
    assert rc == 0 and "lanes: 3" in out
