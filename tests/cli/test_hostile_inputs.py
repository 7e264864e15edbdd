"""Hostile tool inputs and absurd sizes: liberty files that are devices, FIFOs, runaway files
or gzip bombs, and design or option sizes no tool can build, each refused at once with the
limit in the message, nothing written, nothing left in the cache.

On the code before these checks every case hung (``/dev/zero`` read until the OOM killer, a
FIFO blocked forever, ``--lanes 10^8`` ran the generator for minutes) or, for the bomb, left
its decompressed copy in the cache.
"""
from __future__ import annotations

import gzip
import os
import re
import time

import pytest

from hostile_util import run, snapshot

LIB_HEAD = b"library (bomb) {\n  cell (INV) { ff (IQ) { } }\n"


@pytest.fixture
def d(tmp_path, monkeypatch):
    from mactile.synth import libraries

    # Small limits so the runaway inputs stay small here (the real limit is 256 MiB).
    monkeypatch.setattr(libraries, "MAX_LIBERTY_BYTES", 1 << 20)
    with gzip.open(tmp_path / "bomb.lib.gz", "wb") as fh:
        fh.write(LIB_HEAD)
        for _ in range(3):
            fh.write(b" " * (1 << 20))
        fh.write(b"}\n")
    (tmp_path / "big.lib").write_bytes(LIB_HEAD + b" " * (2 << 20) + b"}\n")
    os.mkfifo(tmp_path / "fifo.lib")
    (tmp_path / "cache").mkdir()
    monkeypatch.setenv("MACTILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


CASES = [
    ("liberty-dev-zero", ["synth", "mac-int4", "--liberty", "/dev/zero", "-o", "{d}/s"], 2,
     r"liberty path '/dev/zero' is not a regular file \(a device, FIFO or socket\)"),
    ("liberty-fifo", ["synth", "mac-int4", "--liberty", "{d}/fifo.lib", "-o", "{d}/s"], 2,
     r"liberty path '{d}/fifo.lib' is not a regular file"),
    ("liberty-gzip-bomb", ["synth", "mac-int4", "--liberty", "{d}/bomb.lib.gz", "-o", "{d}/s"],
     2, r"'{d}/bomb.lib.gz' decompresses to more than 1 MiB \(limit MAX_LIBERTY_BYTES\)"),
    ("liberty-too-large", ["synth", "mac-int4", "--liberty", "{d}/big.lib", "-o", "{d}/s"], 2,
     r"liberty file '{d}/big.lib' is 2 MiB, more than 1 MiB"),
    ("report-liberty-dev-zero", ["report", "-o", "{d}/r", "--designs", "mac-int4", "--liberty",
                                 "/dev/zero"], 2, r"'/dev/zero' is not a regular file"),
    ("synth-clock-absurd", ["synth", "mac-int4", "--clock-ns", "1e12"], 2,
     r"expected a clock period in ns in \(0, 1e\+06\], got '1e12'"),
    ("synth-timeout-absurd", ["synth", "mac-int4", "--timeout", "1e308"], 2,
     r"expected a number of seconds in \(0, 604800\], got '1e308'"),
    ("report-clock-absurd", ["report", "-o", "{d}/r", "--clock-ns", "1e12"], 2,
     r"expected a clock period in ns in \(0, 1e\+06\]"),
    ("generate-lanes-absurd", ["generate", "nvfp4-decoder", "--lanes", "100000000", "-o",
                               "{d}/g"], 2,
     r"nvfp4-decoder: parameter lanes must be at most 1024 .*got 100000000"),
    ("generate-rows-absurd", ["generate", "nvfp4-tc", "--rows", "100000", "-o", "{d}/g"], 2,
     r"nvfp4-tc: parameter rows must be at most 64 .*got 100000"),
    ("generate-terms-absurd", ["generate", "mac-int4", "--terms", str(10 ** 30), "-o",
                               "{d}/g"], 2, r"parameter terms must be at most 16777216"),
    ("sim-lanes-absurd", ["sim", "nvfp4-decoder", "--lanes", "100000000"], 2,
     r"parameter lanes must be at most 1024"),
    ("sim-instances-absurd", ["sim", "mac-int4", "--instances", "100000"], 2,
     r"argument --instances: expected a positive integer of at most 1024, got 100000"),
    ("synth-param-absurd", ["synth", "nvfp4-tc", "--param", "cols=100000"], 2,
     r"parameter cols must be at most 64"),
    ("study-rows-absurd", ["formats", "study", "-o", "{d}/st", "--rows", "100000"], 2,
     r"argument --rows: expected a positive integer of at most 65536, got 100000"),
    ("study-size-absurd", ["formats", "study", "-o", "{d}/st", "--rows", "60000", "--cols",
                           "4096", "--no-real", "--no-plot"], 2,
     r"--rows x --cols must be at most 16777216 elements"),
]


@pytest.mark.parametrize("argv, status, pattern", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_refused_at_once(d, capsys, argv, status, pattern):
    argv = [a.replace("{d}", str(d)) for a in argv]
    before = snapshot(d)
    t0 = time.monotonic()
    rc, out, err = run(argv, capsys)
    assert time.monotonic() - t0 < 20
    assert rc == status, err
    assert re.search(pattern.replace("{d}", re.escape(str(d))), err), err
    assert "Traceback" not in err + out
    assert err.startswith(("mactile: error: ", "usage: mactile")), err
    assert snapshot(d) == before, "a file was created, changed or removed (the cache too)"


def test_a_bomb_leaves_nothing_in_the_cache_on_every_try(d, capsys):
    for _ in range(3):
        rc, _, err = run(["synth", "mac-int4", "--liberty", str(d / "bomb.lib.gz")], capsys)
        assert rc == 2 and "decompresses to more than" in err
    assert [p for p in (d / "cache").rglob("*") if p.is_file()] == []


def test_the_shipped_libraries_are_within_the_limit():
    from mactile.synth.libraries import MAX_LIBERTY_BYTES, LibraryError, resolve_library

    for pdk in ("osu018", "nangate45", "sky130"):
        try:
            lib = resolve_library(pdk)
        except LibraryError:
            continue
        assert lib.path.stat().st_size < MAX_LIBERTY_BYTES / 8


def test_synth_takes_design_parameters_as_flags(capsys):
    """Before: `mactile synth mac-int4 --terms 32` was refused (unrecognized arguments)."""
    rc, out, err = run(["synth", "mac-int4", "--terms", "0"], capsys)
    assert rc == 2 and "terms must be a positive integer, got 0" in err, err
    rc, out, err = run(["synth", "mac-int4", "--lanes", "3"], capsys)
    assert rc == 2 and "mac-int4: unknown parameter --lanes" in err, err


def test_report_paper_without_its_libraries_measures_nothing_and_says_so(d, capsys,
                                                                          monkeypatch):
    """Before: exit 0 with every row "not run" when the PDKs were missing."""
    (d / "no-pdk").mkdir()
    monkeypatch.setenv("MACTILE_PDK_DIR", str(d / "no-pdk"))
    before = snapshot(d)
    rc, out, err = run(["report", "-o", str(d / "r"), "--paper"], capsys)
    assert rc == 2, err
    assert ("--paper measured nothing: no library of the papers' tables is available "
            "(nangate45, sky130 not found); set MACTILE_PDK_DIR") in err
    assert "skipping the nangate45 tables" in err and "Traceback" not in err
    assert snapshot(d) == before


def test_report_activity_notes_name_their_designs():
    """Before: one 'Activity: ...' paragraph of every method joined, no design named."""
    from types import SimpleNamespace

    from mactile.synth.report import format_markdown

    def res(design, method):
        return SimpleNamespace(design=design, pdk="osu018", clock_ns=10.0, group="g", ok=True,
                               activity_method=method, failure="", meets_timing=True,
                               area_um2=1.0, cell_count=1, slack_ns=1.0,
                               power_mw={"internal": 1.0, "switching": 1.0, "leakage": 1.0,
                                         "total": 3.0})

    md = format_markdown([res("a", "sim: 2000 cycles"), res("b", "ports: rates"),
                          res("c", "sim: 2000 cycles")])
    assert "- a, c: sim: 2000 cycles" in md and "- b: ports: rates" in md


def test_synth_takes_config_and_show_params_like_generate(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text("terms: 16\n")
    rc, out, err = run(["synth", "mac-int4", "--config", str(tmp_path / "c.yaml"), "--show-params"],
                       capsys)
    assert rc == 0 and "terms: 16" in out, err
    rc, out, err = run(["synth", "mac-int4", "--config", str(tmp_path / "c.yaml"), "--terms", "8",
                        "--show-params"], capsys)
    assert rc == 0 and "terms: 8" in out, err
