"""A hostile new user's round of the commands: empty paths, odd YAML, absurd sizes and the
sign of zero through ``mactile quantize``.

Each refusal runs ``mactile`` in-process in a scratch folder and asserts the exit status, a
one-line message naming the problem, no traceback, and nothing created, changed or removed
in the folder (the caches included). No case runs a tool: each is refused before one.

Misbehaviours these cases found (each failed on the code before): an empty ``--liberty``
or ``--pdk`` synthesized on the default library (exit 0); an empty ``-o`` of ``synth``, an
empty ``--json`` or ``--out`` of ``sim`` and ``inspect`` were ignored (the run went ahead
and wrote nothing where asked); an empty ``--config``, checkpoint or input path read the
current folder; ``--config`` read a key given twice as its last value, a binary file as
"'utf-8' codec can't decode", with no path, a recursive alias and a billion-laughs file
without the sweep spec's limits, and printed PyYAML's several-line messages; a sweep spec
with a key given twice kept the last; ``sim --vectors 10^14`` allocated until MemoryError
and ``--depth 10^8`` ran Verilator into a 32-bit overflow (exit 1); ``sweep -j``,
``report -j`` and a spec's ``workers:`` took any number of processes.
"""
from __future__ import annotations

import os
import re
import time

import numpy as np
import pytest

from hostile_util import run, snapshot


def _laughs(levels=9, width=10):
    lines = ["x0: &x0 [1]"]
    for i in range(1, levels + 1):
        lines.append(f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


FILES = {
    "dup.yaml": "terms: 16\nterms: 32\n",
    "dup-nested.yaml": "params:\n  terms: 16\n  product_register: true\n  terms: 8\n",
    "rec.yaml": "terms: &a [*a]\n",
    "laughs.yaml": _laughs(),
    "aliases.yaml": "a: &a 1\nb: [" + ", ".join(["*a"] * 1001) + "]\n",
    "deep.yaml": "terms: " + "[" * 80 + "]" * 80 + "\n",
    "evil.yaml": "terms: !!python/object/apply:os.system ['true']\n",
    "bad-syntax.yaml": "terms: [16\n",
    "list.yaml": "- 1\n- 2\n",
    "tab.yaml": "terms:\t16\n\tproduct_register: true\n",
    "merge-ok.yaml": "base: &b {terms: 16}\nparams:\n  <<: *b\n  terms: 8\n",
    "dupspec.yaml": "designs: [{design: mac-int4}]\nclocks_ns: [10]\nclocks_ns: [5]\n",
    "dupspec-entry.yaml": "designs:\n  - design: mac-int4\n    params: {terms: 8}\n"
                          "    params: {terms: 16}\n",
    "workers.yaml": "workers: 100000\ndesigns: [{design: mac-int4}]\n",
    "ok.yaml": "designs: [{design: mac-int4}]\n",
}


@pytest.fixture
def d(tmp_path, monkeypatch):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "big.yaml").write_text("# " + "x" * (1 << 20) + "\nterms: 16\n")
    rng = np.random.default_rng(3)
    np.save(tmp_path / "x.npy", rng.standard_normal((4, 128)).astype(np.float32))
    (tmp_path / "binary.yaml").write_bytes((tmp_path / "x.npy").read_bytes())
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "cache").mkdir()
    (tmp_path / "sb").mkdir()
    monkeypatch.setenv("MACTILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MACTILE_SIM_BUILD", str(tmp_path / "sb"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


G = ["generate", "mac-int4", "-o", "{d}/g"]
CASES = [
    # ---------------------------------------------------------------- empty paths
    ("synth-liberty-empty", ["synth", "mac-int4", "--liberty", ""], 2,
     r"--liberty path is empty"),
    ("synth-pdk-empty", ["synth", "mac-int4", "--pdk", ""], 2,
     r"--pdk name is empty; known: osu018, nangate45, sky130"),
    ("report-liberty-empty", ["report", "-o", "{d}/r", "--liberty", ""], 2,
     r"--liberty path is empty"),
    ("report-pdk-empty", ["report", "-o", "{d}/r", "--pdk", ""], 2, r"--pdk name is empty"),
    ("synth-output-empty", ["synth", "mac-int4", "-o", ""], 2, r"output folder path is empty"),
    ("sim-json-empty", ["sim", "mac-int4", "--json", ""], 2, r"--json file path is empty"),
    ("sim-out-empty", ["sim", "mac-int4", "--out", ""], 2, r"--out folder path is empty"),
    ("generate-config-empty", G + ["--config", ""], 2, r"config file path is empty"),
    ("synth-config-empty", ["synth", "mac-int4", "--config", ""], 2,
     r"config file path is empty"),
    ("sim-config-empty", ["sim", "mac-int4", "--config", ""], 2, r"config file path is empty"),
    ("inspect-empty", ["inspect", ""], 2, r"checkpoint path is empty"),
    ("inspect-json-empty", ["inspect", "{d}/x.npy", "--json", ""], 2,
     r"--json file path is empty"),
    ("convert-empty", ["convert", "", "{d}/c", "--to", "nvfp4"], 2, r"checkpoint path is empty"),
    ("quantize-input-empty", ["quantize", "--format", "nvfp4", "", "{d}/y.npy"], 2,
     r"input path is empty"),
    ("quantize-output-empty", ["quantize", "--format", "nvfp4", "{d}/x.npy", ""], 2,
     r"output path is empty"),
    ("quantize-codes-empty", ["quantize", "--format", "nvfp4", "{d}/x.npy", "{d}/y.npy",
                              "--codes", ""], 2, r"--codes file path is empty"),
    ("generate-output-empty", ["generate", "mac-int4", "-o", ""], 2,
     r"generate needs an output folder: -o DIR"),
    ("study-output-empty", ["formats", "study", "-o", ""], 2, r"output folder path is empty"),
    ("report-output-empty", ["report", "-o", ""], 2, r"output folder path is empty"),
    ("sweep-output-empty", ["sweep", "{d}/ok.yaml", "-o", ""], 2,
     r"give an output folder: -o DIR"),
    ("sweep-spec-empty", ["sweep", "", "--dry-run"], 2, r"give a sweep spec"),
    # ---------------------------------------------------------------- --config as input
    ("config-dev-zero", G + ["--config", "/dev/zero"], 2,
     r"config file '/dev/zero' is not a file"),
    ("config-fifo", G + ["--config", "{d}/fifo.yaml"], 2, r"config file '{d}/fifo.yaml' is not "
     r"a file"),
    ("config-folder", G + ["--config", "{d}"], 2, r"config file '{d}' is not a file"),
    ("config-missing", G + ["--config", "{d}/nope.yaml"], 2,
     r"config file '{d}/nope.yaml' does not exist"),
    ("config-binary", G + ["--config", "{d}/binary.yaml"], 2,
     r"config file '{d}/binary.yaml' is not a text \(YAML\) file"),
    ("config-too-large", G + ["--config", "{d}/big.yaml"], 2,
     r"config file '{d}/big.yaml' is \d+ bytes; a spec may have at most 1048576"),
    ("config-duplicate-key", G + ["--config", "{d}/dup.yaml"], 2,
     r"{d}/dup.yaml: line 2: key 'terms' is given twice \(first on line 1\)"),
    ("config-duplicate-nested", ["synth", "mac-int4", "--config", "{d}/dup-nested.yaml",
                                 "--show-params"], 2,
     r"dup-nested.yaml: line 4: key 'terms' is given twice \(first on line 2\)"),
    ("config-recursive-alias", G + ["--config", "{d}/rec.yaml"], 2,
     r"rec.yaml: a YAML alias refers to itself"),
    ("config-billion-laughs", G + ["--config", "{d}/laughs.yaml"], 2,
     r"laughs.yaml: the spec expands to more than 100000 values"),
    ("config-too-many-aliases", G + ["--config", "{d}/aliases.yaml"], 2,
     r"more than 1000 YAML aliases"),
    ("config-too-deep", G + ["--config", "{d}/deep.yaml"], 2, r"nested deeper than 64 levels"),
    ("config-python-tag", G + ["--config", "{d}/evil.yaml"], 2,
     r"^mactile: error: cannot parse '{d}/evil.yaml' as YAML: could not determine a "
     r"constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system' \(line 1, "
     r"column 8\)\n$"),
    ("config-syntax", G + ["--config", "{d}/bad-syntax.yaml"], 2,
     r"^mactile: error: cannot parse '{d}/bad-syntax.yaml' as YAML: .* \(line \d+, column "
     r"\d+\)\n$"),
    ("config-tab", G + ["--config", "{d}/tab.yaml"], 2,
     r"cannot parse '{d}/tab.yaml' as YAML: found character '\\t' that cannot start any "
     r"token \(line 1, column 7\)\n$"),
    ("config-list", G + ["--config", "{d}/list.yaml"], 2,
     r"must hold a mapping of parameter names to values"),
    ("sim-config-duplicate", ["sim", "mac-int4", "--config", "{d}/dup.yaml"], 2,
     r"key 'terms' is given twice"),
    # ---------------------------------------------------------------- spec keys
    ("spec-duplicate-key", ["sweep", "{d}/dupspec.yaml", "--dry-run"], 2,
     r"dupspec.yaml: line 3: key 'clocks_ns' is given twice \(first on line 2\)"),
    ("spec-duplicate-entry-key", ["sweep", "{d}/dupspec-entry.yaml", "--dry-run"], 2,
     r"dupspec-entry.yaml: line 4: key 'params' is given twice \(first on line 3\)"),
    ("spec-workers-absurd", ["sweep", "{d}/workers.yaml", "--dry-run"], 2,
     r"workers: must be an integer in \[1, 1024\], got 100000"),
    # ---------------------------------------------------------------- absurd sizes
    ("sim-vectors-absurd", ["sim", "mac-int4", "--vectors", "99999999999999"], 2,
     r"argument --vectors: expected a positive integer of at most 16777216, got 99999999999999"),
    ("sim-depth-absurd", ["sim", "mac-int4", "--depth", "100000000"], 2,
     r"argument --depth: expected a positive integer of at most 65536, got 100000000"),
    ("sim-depth-zero", ["sim", "mac-int4", "--depth", "0"], 2,
     r"argument --depth: expected a positive integer, got 0"),
    ("sweep-workers-absurd", ["sweep", "{d}/ok.yaml", "-o", "{d}/o", "-j", "100000"], 2,
     r"argument --workers/-j: expected a positive integer of at most 1024, got 100000"),
    ("report-jobs-absurd", ["report", "-o", "{d}/r", "-j", "100000"], 2,
     r"argument --jobs/-j: expected a positive integer of at most 1024, got 100000"),
    ("quantize-block-absurd", ["quantize", "--format", "nvfp4", "{d}/x.npy", "{d}/y.npy",
                               "--block", str(10 ** 20)], 2,
     r"not a multiple of the block size 100000000000000000000"),
    # ---------------------------------------------------------------- kinds of values
    ("generate-terms-float", G + ["--terms", "1.5"], 2,
     r"parameter terms must be an integer like its default 64, got 1.5"),
    ("generate-terms-bool", G + ["--terms", "true"], 2,
     r"parameter terms must be an integer like its default 64, got True"),
    ("generate-flag-not-bool", G + ["--product-register", "1"], 2,
     r"parameter product_register must be true or false like its default False, got 1"),
    ("generate-flag-word", G + ["--product-register", "maybe"], 2,
     r"product_register must be true or false like its default False, got 'maybe'"),
    ("generate-unknown-param", G + ["--lanes", "4"], 2, r"mac-int4: unknown parameter --lanes"),
    ("synth-param-no-value", ["synth", "mac-int4", "--param", "terms"], 2,
     r"--param needs KEY=VALUE, got 'terms'"),
    ("synth-param-no-key", ["synth", "mac-int4", "--param", "=3"], 2,
     r"--param needs KEY=VALUE, got '=3'"),
    ("synth-activity-nan", ["synth", "mac-int4", "--global-activity", "nan"], 2,
     r"global activity must be in \[0, 2\] transitions per cycle, got nan"),
    ("synth-duty-negative", ["synth", "mac-int4", "--global-duty", "-1"], 2,
     r"global duty must be in \[0, 1\], got -1.0"),
    ("synth-reuse-negative", ["synth", "mac-int4", "--reuse", "-1"], 2,
     r"reuse must be a non-negative integer"),
    ("synth-clock-nan", ["synth", "mac-int4", "--clock-ns", "nan"], 2,
     r"expected a clock period in ns in \(0, 1e\+06\], got 'nan'"),
    ("synth-timeout-inf", ["synth", "mac-int4", "--timeout", "inf"], 2,
     r"expected a number of seconds in \(0, 604800\], got 'inf'"),
    ("quantize-floor-nan", ["quantize", "--format", "nvfp4", "{d}/x.npy", "{d}/y.npy",
                            "--block-scale-floor", "nan"], 2,
     r"block_scale_floor must be an E4M3 value in \[0, 448\]"),
    ("quantize-special-nan", ["quantize", "--format", "razer", "{d}/x.npy", "{d}/y.npy",
                              "--special-values", "nan,8"], 2, r"special value nan is out of range"),
    ("quantize-special-commas", ["quantize", "--format", "razer", "{d}/x.npy", "{d}/y.npy",
                                 "--special-values", ",,"], 2,
     r"--special-values must be numbers separated by commas, got ',,'"),
    ("quantize-negative-zero-case", ["quantize", "--format", "nvfp4", "{d}/x.npy", "{d}/y.npy",
                                     "--negative-zero", "Keep"], 2,
     r"argument --negative-zero: invalid choice: 'Keep'"),
    ("quantize-bits-elsewhere", ["quantize", "--format", "mxfp4", "{d}/x.npy", "{d}/y.npy",
                                 "--bits", "4"], 2, r"mxfp4 has a fixed element width"),
]


@pytest.mark.parametrize("argv, status, pattern", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_refused_before_any_work(d, capsys, argv, status, pattern):
    argv = [a.replace("{d}", str(d)) for a in argv]
    before = snapshot(d)
    t0 = time.monotonic()
    rc, out, err = run(argv, capsys)
    assert time.monotonic() - t0 < 20
    assert rc == status, err
    assert re.search(pattern.replace("{d}", re.escape(str(d))), err, re.M), err
    assert "Traceback" not in err + out
    assert err.startswith(("mactile: error: ", "usage: mactile")), err
    if err.startswith("mactile: error: "):
        assert err.count("\n") == 1, f"one line, got {err!r}"
    assert snapshot(d) == before, "a file was created, changed or removed (the caches too)"


@pytest.mark.parametrize("value, pattern", [
    ("/dev/null", r"--pdk nangate45: MACTILE_PDK_DIR='/dev/null' is not a folder"),
    ("{d}/x.npy", r"--pdk nangate45: MACTILE_PDK_DIR='{d}/x.npy' is not a folder"),
    ("{d}/nope", r"--pdk nangate45: liberty file '{d}/nope/nangate45_typ.lib.gz' not found; set "
                 r"MACTILE_PDK_DIR to the folder that holds it"),
], ids=["device", "file", "missing"])
@pytest.mark.parametrize("command", ["synth", "report"])
def test_a_pdk_folder_that_is_not_one(d, capsys, monkeypatch, value, pattern, command):
    """Before: a device or a file as MACTILE_PDK_DIR was reported as a missing liberty
    file inside it ('/dev/null/nangate45_typ.lib.gz')."""
    monkeypatch.setenv("MACTILE_PDK_DIR", value.replace("{d}", str(d)))
    argv = (["synth", "mac-int4", "--pdk", "nangate45"] if command == "synth"
            else ["report", "-o", str(d / "r"), "--pdk", "nangate45"])
    before = snapshot(d)
    rc, out, err = run(argv, capsys)
    assert rc == 2, err
    assert re.search(pattern.replace("{d}", re.escape(str(d))), err), err
    assert "Traceback" not in err and snapshot(d) == before


def test_a_merge_key_may_be_overridden(d, capsys):
    """YAML's `<<` merge is not a duplicate: the explicit key wins, as YAML says."""
    rc, out, err = run(["generate", "mac-int4", "--config", str(d / "merge-ok.yaml"),
                        "--show-params"], capsys)
    assert rc == 0 and "terms: 8" in out, err


@pytest.mark.parametrize("option, want", [("keep", True), ("positive", False),
                                          ("positive-after-scaling", False)])
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_quantize_writes_the_sign_of_zero_each_option_says(d, capsys, fmt, option, want):
    """An all -0 tensor through `mactile quantize`: every output -0.0 under keep (NVFP4 gave
    +0.0: its blocks have scale 0), +0.0 under the other options; the codes file agrees."""
    x = np.full((2, 64), -0.0, np.float32)
    np.save(d / "neg0.npy", x)
    rc, out, err = run(["quantize", "--format", fmt, "--negative-zero", option,
                        str(d / "neg0.npy"), str(d / "y.npy"), "--codes", str(d / "c.npz")],
                       capsys)
    assert rc == 0, err
    y = np.load(d / "y.npy")
    assert (y == 0).all() and np.signbit(y).all() == want and np.signbit(y).any() == want
    codes = np.load(d / "c.npz")["codes"]
    assert (codes == (8 if want else 0)).all()


def test_case_count():
    assert len(CASES) >= 60
