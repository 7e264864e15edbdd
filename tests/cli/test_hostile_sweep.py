"""Hostile input to ``mactile sweep`` and its results database.

Each case runs ``mactile`` in-process on a scratch folder and asserts the exit status, a
one-line message naming the problem, no traceback, and (for refusals) nothing created,
changed or removed in the folder. None runs a synthesis tool: jobs that must run use a
builder that passes the checks before the work and fails in the job (``builtins:dict``
returns no Amaranth component), so each case takes well under a second or two.

Classes (docs/reliability.md, "Sweeps and their results database"): exit status, checks
before any work, bounded spec expansion, spec numbers, a report that cannot fail after the
work, the results database as an input.
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from contextlib import closing

import pytest

from hostile_util import run, snapshot


def _osu018_or_skip():
    from mactile.synth.libraries import LibraryError, resolve_library

    try:
        resolve_library("osu018")
    except LibraryError as e:
        pytest.skip(str(e))


def _laughs(levels: int = 9, width: int = 10) -> str:
    """A "billion laughs" grid: each level a list of ``width`` aliases of the one before."""
    lines = ['x0: &x0 ["lol"]']
    for i in range(1, levels + 1):
        lines.append(f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * width) + "]")
    return "\n".join(lines) + f"\ndesigns: [{{design: mac-int4, grid: {{terms: *x{levels}}}}}]\n"


SPECS = {
    "lanes0.yaml": "designs: [{design: nvfp4-decoder, params: {lanes: 0}}]\n",
    "terms0.yaml": "designs: [{design: mac-int4, grid: {terms: [16, 0]}}]\n",
    "lanes-huge.yaml": "designs: [{design: nvfp4-decoder, params: {lanes: 100000000}}]\n",
    "nomod.yaml": "designs: [{builder: 'no_such_module_xyz:build', name: mine}]\n",
    "noattr.yaml": "designs: [{builder: 'json:no_such_builder', name: mine}]\n",
    "nolib.yaml": "libraries: [nangate45]\ndesigns: [{design: mac-int4}]\n",
    "laughs.yaml": _laughs(),
    "aliases.yaml": "a: &a 1\ndesigns: [{design: mac-int4, grid: {terms: ["
                    + ", ".join(["*a"] * 1001) + "]}}]\n",
    "recursive.yaml": "a: &a [*a]\ndesigns: [{design: mac-int4}]\n",
    "deep.yaml": "designs: [{design: mac-int4, params: {terms: " + "[" * 80 + "]" * 80 + "}}]\n",
    "product.yaml": "designs: [{builder: 'builtins:dict', name: d, grid: {"
                    + ", ".join(f"p{k}: [" + ", ".join(map(str, range(100))) + "]"
                                for k in range(3)) + "}}]\n",
    "random-huge.yaml": "search: {method: random, budget: 3, seed: 1}\n"
                        "designs: [{builder: 'builtins:dict', name: d, grid: {"
                        + ", ".join(f"p{k}: [" + ", ".join(map(str, range(1000))) + "]"
                                    for k in range(4)) + "}}]\n",
    "beyond-random.yaml": "search: {method: random, budget: 3}\n"
                          "designs: [{builder: 'builtins:dict', name: d, grid: {"
                          + ", ".join(f"p{k}: [" + ", ".join(map(str, range(1000))) + "]"
                                      for k in range(6)) + "}}]\n",
    "budget.yaml": "search: {method: random, budget: 1000000}\ndesigns: [{design: mac-int4}]\n",
    "exp-clock.yaml": "clocks_ns: [1e1, 2.5e0]\ndesigns: [{design: mac-int4}]\n",
    "exp-timeout.yaml": "measure: {timeout_s: 1.5e2}\ndesigns: [{design: mac-int4}]\n",
    "inf-ops.yaml": "designs: [{design: mac-int4, ops_per_cycle: .inf}]\n",
    "nan-ops.yaml": "designs: [{design: mac-int4, ops_per_cycle: .nan}]\n",
    "both.yaml": "designs: [{design: mac-int4, builder: 'builtins:dict'}]\n",
    "clock-huge.yaml": "clocks_ns: [1e12]\ndesigns: [{design: mac-int4}]\n",
    "timeout-huge.yaml": "measure: {timeout_s: 1e308}\ndesigns: [{design: mac-int4}]\n",
    "cycles-huge.yaml": "measure: {cycles: 100000000000}\ndesigns: [{design: mac-int4}]\n",
    "failing.yaml": "name: failing\ndesigns: [{builder: 'builtins:dict', name: d, "
                    "family: fam}]\n",
}


@pytest.fixture
def d(tmp_path, monkeypatch):
    for name, text in SPECS.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "big.yaml").write_text("# " + "x" * (1 << 20) + "\ndesigns: []\n")
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "empty-pdk").mkdir()
    monkeypatch.setenv("MACTILE_PDK_DIR", str(tmp_path / "empty-pdk"))
    monkeypatch.setenv("MACTILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


S = ["sweep"]
# (id, argv, exit status, pattern); every case must also finish within BOUND_S
REFUSED = [
    # checks before any work: what would make every job fail
    ("param-builder-refuses", S + ["{d}/lanes0.yaml", "-o", "{d}/o"], 2,
     r"nvfp4-decoder lanes=0: the builder refuses these parameters: lanes must be >= 1"),
    ("grid-value-builder-refuses", S + ["{d}/terms0.yaml", "-o", "{d}/o"], 2,
     r"mac-int4 terms=0: the builder refuses these parameters: terms must be a positive"),
    ("param-absurd-size", S + ["{d}/lanes-huge.yaml", "-o", "{d}/o"], 2,
     r"parameter lanes must be at most 1024 .*got 100000000"),
    ("builder-module-missing", S + ["{d}/nomod.yaml", "-o", "{d}/o"], 2,
     r"cannot import the builder 'no_such_module_xyz:build'"),
    ("builder-attr-missing", S + ["{d}/noattr.yaml", "-o", "{d}/o"], 2,
     r"module 'json' has no 'no_such_builder'"),
    ("library-missing", S + ["{d}/nolib.yaml", "-o", "{d}/o"], 2,
     r"libraries: library 'nangate45' cannot be used here"),
    # bounded expansion
    ("billion-laughs", S + ["{d}/laughs.yaml", "--dry-run"], 2,
     r"expands to more than 100000 values once its aliases are copied"),
    ("too-many-aliases", S + ["{d}/aliases.yaml", "--dry-run"], 2,
     r"more than 1000 YAML aliases"),
    ("recursive-alias", S + ["{d}/recursive.yaml", "--dry-run"], 2,
     r"a YAML alias refers to itself"),
    ("nested-too-deep", S + ["{d}/deep.yaml", "--dry-run"], 2, r"nested deeper than 64 levels"),
    ("grid-product-too-large", S + ["{d}/product.yaml", "--dry-run"], 2,
     r"the grid expands to 1000000 jobs, more than 100000 \(limit MAX_JOBS\)"),
    ("random-space-too-large", S + ["{d}/beyond-random.yaml", "--dry-run"], 2,
     r"spans 1000000000000000000 configurations"),
    ("random-budget-beyond-limit", S + ["{d}/budget.yaml", "--dry-run"], 2,
     r"search.budget: .* at most 100000"),
    ("random-flag-beyond-limit", S + ["{d}/terms0.yaml", "--dry-run", "--random", "200000"], 2,
     r"search.budget: .* at most 100000"),
    ("spec-too-large", S + ["{d}/big.yaml", "--dry-run"], 2, r"a spec may have at most 1048576"),
    ("spec-fifo", S + ["{d}/fifo.yaml", "--dry-run"], 2, r"is not a file"),
    # spec numbers
    ("ops-per-cycle-inf", S + ["{d}/inf-ops.yaml", "--dry-run"], 2,
     r"ops_per_cycle: must be a positive finite number, got inf"),
    ("ops-per-cycle-nan", S + ["{d}/nan-ops.yaml", "--dry-run"], 2,
     r"ops_per_cycle: must be a positive finite number, got nan"),
    ("design-and-builder", S + ["{d}/both.yaml", "--dry-run"], 2,
     r"has both `design:` .* and `builder:`"),
    ("clock-absurd", S + ["{d}/clock-huge.yaml", "--dry-run"], 2,
     r"clock periods must be at most 1e\+06 ns \(1 ms\), got 1000000000000.0"),
    ("timeout-absurd", S + ["{d}/timeout-huge.yaml", "--dry-run"], 2,
     r"measure.timeout_s: must be a number in \(0, 604800\], got 1e\+308"),
    ("cycles-absurd", S + ["{d}/cycles-huge.yaml", "--dry-run"], 2,
     r"measure.cycles: must be an integer in \[2, 10000000\]"),
]
BOUND_S = 20.0


@pytest.mark.parametrize("argv, status, pattern", [c[1:] for c in REFUSED],
                         ids=[c[0] for c in REFUSED])
def test_sweep_refuses_before_any_work(d, capsys, argv, status, pattern):
    argv = [a.replace("{d}", str(d)) for a in argv]
    before = snapshot(d)
    t0 = time.monotonic()
    rc, out, err = run(argv, capsys)
    assert time.monotonic() - t0 < BOUND_S
    assert rc == status, err
    assert re.search(pattern, err), err
    assert "Traceback" not in err + out and err.startswith("mactile: error: "), err
    assert snapshot(d) == before, "a file was created, changed or removed"


def test_yaml_12_floats_are_numbers(d, capsys):
    """YAML 1.1 reads `1e1` as a string; the spec reads it as 10.0."""
    rc, out, err = run(S + [str(d / "exp-clock.yaml"), "--dry-run"], capsys)
    assert rc == 0, err
    assert "mac-int4 - osu018 10ns" in out and "mac-int4 - osu018 2.5ns" in out
    from mactile.synth.sweep import load_spec

    assert load_spec(d / "exp-timeout.yaml").jobs[0].measure.timeout_s == 150.0


def test_random_draw_never_builds_the_product(d, capsys):
    """10^12 configurations: --random 3 draws 3 at once (the product is never built)."""
    t0 = time.monotonic()
    rc, out, err = run(S + [str(d / "random-huge.yaml"), "--dry-run", "--random", "3"], capsys)
    assert time.monotonic() - t0 < 10
    assert rc == 0, err
    assert "3 jobs (random draw of 3 of 1000000000000)" in out


def test_random_draw_matches_the_expanded_grid():
    """The draw by index picks exactly the jobs the built product would (resumes agree)."""
    from mactile.synth.sweep import parse_spec

    raw = {"designs": [{"design": "mac-int4", "grid": {"terms": [8, 16, 32],
                                                       "product_register": [False, True]}},
                       {"design": "mac-fp4", "clocks_ns": [7]}],
           "libraries": ["osu018", "nangate45"], "clocks_ns": [10, 5]}
    grid = parse_spec(raw).jobs
    assert len(grid) == 3 * 2 * 2 * 2 + 2
    terms = [j.params["terms"] for j in grid[:24]]
    assert terms == sorted(terms)      # itertools.product order: first key slowest
    assert [j.clock_ns for j in grid[:2]] == [10.0, 5.0] and grid[0].pdk == grid[1].pdk
    for seed in range(5):
        drawn = parse_spec({**raw, "search": {"method": "random", "budget": 6, "seed": seed}})
        import random

        want = sorted(random.Random(seed).sample(range(len(grid)), 6))
        assert [j.job_id for j in drawn.jobs] == [grid[i].job_id for i in want]


# ------------------------------------------------------------------------ exit status
def test_finished_with_failed_jobs_exits_3(d, capsys):
    """Before: "1 failed" and exit status 0. Now 3: finished, report written, jobs failed."""
    _osu018_or_skip_with(d)
    rc, out, err = run(S + [str(d / "failing.yaml"), "-o", str(d / "o"), "-j", "1", "-q",
                            "--no-plots"], capsys)
    assert rc == 3, err
    assert "1 of the sweep's 1 jobs have no figures" in err and "exit status 3" in err
    assert "Traceback" not in err
    assert sorted(p.name for p in (d / "o").iterdir()) == ["sweep.csv", "sweep.md",
                                                           "sweep.sqlite"]
    # A rerun runs nothing and says the same.
    rc, out, err = run(S + [str(d / "failing.yaml"), "-o", str(d / "o"), "-q", "--no-plots"],
                       capsys)
    assert rc == 3 and "1 already recorded, 0 run now" in out


def _osu018_or_skip_with(d):
    os.environ.pop("MACTILE_PDK_DIR", None)  # monkeypatch restores it
    _osu018_or_skip()


# ------------------------------------------------------------------------ the report
def _record(i, family="fam", design=None):
    from mactile.synth.sweep.jobs import record_fields

    r = {k: None for k in record_fields()}
    r.update(job_id=f"j{i}", family=family, design=design or f"design-{i}", pdk="osu018",
             clock_ns=10.0, params={}, overrides={}, ops_per_cycle=1.0, op="MAC", status="ok",
             area_um2=100.0 + i, cell_count=10, slack_ns=1.0, meets_timing=True,
             fmax_mhz=100.0 + i, power_total_mw=1.0, energy_per_op_pj=10.0 - i / 100,
             equivalence="proven", error="")
    return r


def test_report_of_more_designs_than_the_palette(tmp_path):
    """Before: KeyError after every job was recorded (the palette has 40 colours)."""
    pytest.importorskip("matplotlib")
    from mactile.synth.sweep.report import write_sweep_report

    files = write_sweep_report([_record(i) for i in range(41)], tmp_path, name="t")
    assert files["png:fam"].stat().st_size > 0


def test_report_of_families_with_the_same_slug(tmp_path):
    """Before: 'a b' and 'a-b' both wrote pareto-a-b.png and the report failed."""
    pytest.importorskip("matplotlib")
    from mactile.synth.sweep.report import write_sweep_report

    long = "f" * 400
    files = write_sweep_report([_record(0, "a b"), _record(1, "a-b"), _record(2, "A-B"),
                                _record(3, long)], tmp_path, name="t")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "pareto-a-b.png" in names and "pareto-a-b-2.png" in names
    assert "pareto-A-B-3.png" in names
    assert all(len(n) < 120 for n in names) and len(names) == 6
    assert files["png:" + long].exists()


def test_report_path_in_the_way_is_refused_before_the_work(d, capsys):
    """Before: every job ran, then the report failed (and every later --report too)."""
    (d / "o").mkdir()
    (d / "o" / "sweep.md").mkdir()
    before = snapshot(d)
    rc, _, err = run(S + [str(d / "failing.yaml"), "-o", str(d / "o")], capsys)
    assert rc == 2 and "sweep.md' is a directory" in err, err
    assert snapshot(d) == before


# ------------------------------------------------------------------------ the database
def _db(path, rows=()):
    from mactile.synth.sweep import ResultStore

    with ResultStore(path) as s:
        s.begin_sweep("t", "", len(rows))
        for r in rows:
            s.add({"job_id": r["job_id"]}, r)


DB_CASES = [
    ("db-symlink-to-dev-null", "devnull", r"results database '/dev/null' \(through the "
     r"symlink '{d}/o/sweep.sqlite'\) is a character device"),
    ("db-not-a-database", "garbage", r"results database '{d}/o/sweep.sqlite': opening it "
     r"failed \(sqlite: file is not a database\); it is damaged or not a sweep results "
     r"database: move it aside"),
    ("db-is-a-directory", "dir", r"results database '{d}/o/sweep.sqlite' is a directory"),
    ("db-wrong-schema", "schema", r"opening it failed \(sqlite: no such column: status\)"),
    ("db-locked", "locked", r"opening it failed \(sqlite: database is locked\); another "
     r"process holds it"),
    ("db-read-only", "readonly", r"'{d}/o/sweep.sqlite' .*read-only"),
]


def _prepare_db(d, kind):
    o = d / "o"
    o.mkdir()
    db = o / "sweep.sqlite"
    if kind == "devnull":
        db.symlink_to("/dev/null")
    elif kind == "garbage":
        db.write_bytes(b"not a database at all, just some bytes" * 40)
    elif kind == "dir":
        db.mkdir()
    elif kind == "schema":
        with closing(sqlite3.connect(db)) as c:
            c.execute("CREATE TABLE results (seq INTEGER, job_id TEXT, job TEXT, record TEXT)")
            c.commit()
    elif kind in ("locked", "readonly"):
        _db(db, [_record(0)])
        if kind == "readonly":
            db.chmod(0o444)


@pytest.mark.parametrize("how", ["run", "report"])
@pytest.mark.parametrize("kind, pattern", [c[1:] for c in DB_CASES], ids=[c[0] for c in DB_CASES])
def test_bad_results_database(d, capsys, monkeypatch, kind, pattern, how):
    """Before: `internal error: OperationalError` (exit 1, no path), /dev/null-journal."""
    from mactile.synth.sweep import store

    monkeypatch.setattr(store, "LOCK_TIMEOUT_S", 0.1)
    _prepare_db(d, kind)
    holder = None
    if kind == "locked":
        holder = sqlite3.connect(d / "o" / "sweep.sqlite")
        holder.execute("PRAGMA journal_mode=DELETE")
        holder.execute("BEGIN EXCLUSIVE")
    argv = (S + [str(d / "failing.yaml"), "-o", str(d / "o")] if how == "run"
            else S + ["--report", str(d / "o")])
    before = snapshot(d)
    try:
        rc, out, err = run(argv, capsys)
    finally:
        if holder is not None:
            holder.rollback()
            holder.close()
    assert rc == 2, err
    assert re.search(pattern.replace("{d}", re.escape(str(d))), err), err
    assert "Traceback" not in err and "internal error" not in err
    assert not os.path.exists("/dev/null-journal") and not os.path.exists("/dev/null-wal")
    assert snapshot(d) == before


def test_damaged_rows_are_named_and_the_report_survives(d, capsys):
    """Before: a JSON parser's message, no file or row named, no report."""
    db = d / "o" / "sweep.sqlite"
    (d / "o").mkdir()
    _db(db, [_record(0), _record(1), _record(2)])
    with closing(sqlite3.connect(db)) as c:
        c.execute("UPDATE results SET record = '{\"job_id\": \"j1\", trunc' WHERE job_id = 'j1'")
        c.execute("UPDATE results SET record = ? WHERE job_id = 'j2'",
                  (json.dumps({"job_id": "j2", "family": "fam"}),))
        c.commit()
    rc, out, err = run(S + ["--report", str(d / "o"), "--no-plots"], capsys)
    assert rc == 0, err
    assert re.search(rf"warning: '{re.escape(str(db))}' row 2 \(job j1\) is damaged \(Expecting",
                     err), err
    assert "row 3 (job j2) is damaged (no design, pdk, clock_ns, status); left out" in err
    assert "1 configurations: 1 ok" in (d / "o" / "sweep.md").read_text()


def test_a_full_disk_while_recording_is_a_failed_run(tmp_path):
    """SQLite's "database or disk is full" (max_page_count stands in for the disk)."""
    from mactile.synth.sweep import ResultStore
    from mactile.synth.sweep.store import StoreFailed

    with ResultStore(tmp_path / "s.sqlite") as s:
        s.add({"job_id": "a"}, _record(0))
        pages = s.conn.execute("PRAGMA page_count").fetchone()[0]
        s.conn.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StoreFailed, match=r"recording job b failed \(sqlite: database or "
                           r"disk is full\); the disk is full: free space, then run again to "
                           r"resume; the jobs committed before are kept"):
            s.add({"job_id": "b"}, {**_record(1), "error": "x" * 100_000})
        assert set(s.latest()) == {"a"}


def test_store_errors_map_to_exit_statuses():
    from mactile.cli.main import error_message
    from mactile.synth.sweep.store import StoreError, StoreFailed

    assert error_message(StoreError("x"))[1] == 2
    assert error_message(StoreFailed("x"))[1] == 1


def test_case_count():
    assert len(REFUSED) >= 20 and len(DB_CASES) >= 6
