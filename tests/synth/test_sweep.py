"""``mactile sweep``: spec checks, the two executors agreeing, resume after a kill, failures
as records, the report.

The runs use mac-int4 on osu018 (about 5 s a job): the whole file takes about 1-2 min on
2 cores.
"""
import json
import os
from contextlib import closing
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mactile.synth.sweep import DB_NAME, ResultStore, SpecError, parse_spec, run_sweep
from mactile.synth.sweep.jobs import METRIC_FIELDS
from mactile.synth.sweep.report import pareto_front, write_sweep_report

REPO = Path(__file__).resolve().parents[2]

#: Two real jobs (one MAC at two clocks) and one whose builder refuses its parameters.
SMALL = {
    "name": "small",
    "libraries": ["osu018"],
    "clocks_ns": [10, 3],
    "designs": [
        {"design": "mac-int4", "family": "mac"},
        {"design": "mac-int4", "family": "mac", "params": {"terms": 0}, "clocks_ns": [10]},
    ],
}


# ------------------------------------------------------------------------ the spec
def test_grid_expands_every_axis_and_ids_are_stable():
    spec = parse_spec({"designs": [{"design": "mac-int4", "grid": {
        "product_register": [False, True], "terms": [16, 64]}}],
        "libraries": ["osu018", "nangate45"], "clocks_ns": [10, 5, 2]})
    assert len(spec.jobs) == 2 * 2 * 2 * 3
    again = parse_spec({"designs": [{"design": "mac-int4", "grid": {
        "terms": [16, 64], "product_register": [False, True]}}],
        "libraries": ["osu018", "nangate45"], "clocks_ns": [10, 5, 2]})
    assert {j.job_id for j in spec.jobs} == {j.job_id for j in again.jobs}
    j = spec.jobs[0]
    assert j.params["a_format"] == "int4" and j.ops_per_cycle == 1.0 and j.op == "MAC"


def test_random_search_draws_the_budget_reproducibly():
    raw = {"designs": [{"design": "mac-int4", "grid": {"terms": [8, 16, 32, 64]}}],
           "clocks_ns": [10, 5, 3], "search": {"method": "random", "budget": 5, "seed": 3}}
    a, b = parse_spec(raw), parse_spec(raw)
    assert a.total_points == 12 and len(a.jobs) == 5
    assert [j.job_id for j in a.jobs] == [j.job_id for j in b.jobs]
    other = parse_spec({**raw, "search": {"method": "random", "budget": 5, "seed": 4}})
    assert [j.job_id for j in other.jobs] != [j.job_id for j in a.jobs]


def test_ops_per_cycle_of_a_tensor_core_and_a_quantizer():
    spec = parse_spec({"designs": [
        {"design": "nvfp4-tc", "params": {"rows": 4, "cols": 8, "block_size": 16}},
        {"design": "dialect-quantizer"}]})
    tc, q = spec.jobs
    assert (tc.ops_per_cycle, tc.op) == (32.0, "MAC")
    assert (q.ops_per_cycle, q.op) == (32.0, "element")


@pytest.mark.parametrize("raw, pattern", [
    ([1, 2], r"a sweep spec must be a YAML mapping"),
    ({"designs": []}, r"designs: must be a non-empty list"),
    ({"designs": [{"design": "nope"}]}, r"designs\[0\].design: unknown design 'nope'"),
    ({"designs": [{"design": "mac-int4", "params": {"nope": 1}}]},
     r"designs\[0\]: mac-int4: unknown parameter\(s\) \['nope'\]"),
    ({"designs": [{"design": "mac-int4", "grid": {"terms": "8,16"}}]},
     r"designs\[0\].grid.terms: must be a non-empty list of values"),
    ({"designs": [{"design": "mac-int4", "grid": {"terms": [8, 8]}}]}, r"repeated values"),
    ({"designs": [{"design": "mac-int4", "grid": {"terms": ["x"]}}]},
     r"parameter terms must be an integer"),
    ({"designs": [{"design": "mac-int4"}], "libraries": ["tsmc7"]},
     r"libraries: unknown library 'tsmc7'; known: osu018"),
    ({"designs": [{"design": "mac-int4"}], "clocks_ns": [10, -1]},
     r"clocks_ns: clock periods must be positive ns, got -1"),
    ({"designs": [{"design": "mac-int4"}], "search": {"method": "random"}},
     r"search.budget: random search needs a budget"),
    ({"designs": [{"design": "mac-int4"}], "search": "optuna"},
     r"search.method: must be one of grid, random, got 'optuna'"),
    ({"designs": [{"design": "mac-int4"}], "measure": {"workload": "vcd2"}},
     r"measure.workload: must be one of sim, ports, global, auto"),
    ({"designs": [{"design": "mac-int4"}], "measure": {"equivalence": "yes"}},
     r"measure.equivalence: must be true or false"),
    ({"designs": [{"design": "mac-int4"}], "cluster": "localhost"},
     r"cluster: must be a scheduler address like tcp://HOST:8786"),
    ({"designs": [{"design": "mac-int4"}, {"design": "mac-int4"}]},
     r"the same configuration twice \(mac-int4 - osu018 10ns\)"),
    ({"designs": [{"design": "mac-int4"}], "clock_ns": [5]}, r"unknown key\(s\) \['clock_ns'\]"),
])
def test_bad_specs_say_what_is_wrong(raw, pattern):
    with pytest.raises(SpecError, match=pattern):
        parse_spec(raw, source="s.yaml")


def _cli(argv, capsys):
    from mactile.cli.main import main

    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("argv, pattern", [
    (["sweep", "{d}/missing.yaml", "-o", "{d}/o"], r"sweep spec '{d}/missing.yaml' does not exist"),
    (["sweep", "{d}/bad.yaml", "-o", "{d}/o"], r"cannot parse '{d}/bad.yaml' as YAML"),
    (["sweep", "{d}/ok.yaml"], r"give an output folder: -o DIR"),
    (["sweep"], r"give a sweep spec \(SPEC.yaml\) and -o DIR, or --report DIR"),
    (["sweep", "--report", "{d}"], r"no sweep results in '{d}' \(sweep.sqlite not found\)"),
    (["sweep", "--report", "{d}/ok.yaml"], r"is not a folder with a sweep"),
    (["sweep", "{d}/ok.yaml", "-o", "{d}/ok.yaml"], r"exists and is a regular file"),
    (["sweep", "{d}/ok.yaml", "-o", "{d}/o", "-j", "0"], r"expected a positive integer"),
])
def test_cli_bad_input(tmp_path, capsys, argv, pattern):
    (tmp_path / "bad.yaml").write_text("designs: [\n")
    (tmp_path / "ok.yaml").write_text("designs: [{design: mac-int4}]\n")
    argv = [a.replace("{d}", str(tmp_path)) for a in argv]
    try:
        rc, out, err = _cli(argv, capsys)
    except SystemExit as e:  # argparse's usage errors
        rc, (out, err) = e.code, capsys.readouterr()
    assert rc == 2, err
    assert __import__("re").search(pattern.replace("{d}", str(tmp_path)), err), err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml", "ok.yaml"]


def test_dry_run_lists_the_jobs(tmp_path, capsys):
    rc, out, _ = _cli(["sweep", str(REPO / "examples/sweeps/tiny.yaml"), "--dry-run"], capsys)
    assert rc == 0 and "tiny: 12 jobs (grid), 0 recorded" in out
    assert "mac-fp4 product_register=True osu018 3ns" in out


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "examples/sweeps").glob("*.yaml")))
def test_example_specs_parse(name):
    from mactile.synth.sweep import load_spec

    assert load_spec(REPO / "examples/sweeps" / name).jobs


# ------------------------------------------------------------------------ the report
def test_pareto_front():
    pts = [(1, 5), (2, 3), (3, 4), (4, 1), (2, 3.5), (5, 1)]
    assert pareto_front(pts) == [0, 1, 3]
    assert pareto_front([(1, 100), (2, 300), (3, 200), (4, 400)], maximize_y=True) == [0, 1, 3]
    assert pareto_front([]) == []


def _record(jid, area, energy, fmax, *, design="mac-int4", pdk="osu018", meets=True,
            status="ok"):
    from mactile.synth.sweep.jobs import record_fields

    r = {k: None for k in record_fields()}
    r.update(job_id=jid, family="mac", design=design, pdk=pdk, clock_ns=10.0, params={},
             overrides={"terms": int(area)}, ops_per_cycle=1.0, op="MAC", status=status,
             area_um2=area, cell_count=10, slack_ns=1.0, meets_timing=meets, fmax_mhz=fmax,
             power_total_mw=energy / 10, energy_per_op_pj=energy, equivalence="proven",
             error="" if status == "ok" else "ValueError: terms must be >= 1")
    return r


def test_report_marks_fronts_and_failures(tmp_path):
    recs = [_record("a", 100, 5, 300), _record("b", 200, 3, 250), _record("c", 300, 4, 400),
            _record("d", 50, 1, 500, meets=False), _record("e", 0, 0, 0, status="failed")]
    files = write_sweep_report(recs, tmp_path, name="t")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pareto-mac.png", "sweep.csv",
                                                          "sweep.md"]
    md = files["md"].read_text()
    assert "5 configurations: 4 ok, 0 unproven, 0 timeout, 1 failed" in md
    rows = {ln.split("|")[2].strip(): ln for ln in md.splitlines() if ln.startswith("| mac-int4")}
    assert rows["terms=100"].rstrip().endswith("| AE |")      # not fastest: not on FA
    assert rows["terms=200"].rstrip().endswith("| AE |")
    assert rows["terms=300"].rstrip().endswith("|  |")
    assert rows["terms=50"].rstrip().endswith("| FA |")       # fails timing: not on AE
    assert "| failed | ValueError: terms must be >= 1 |" in md
    assert files["csv"].read_text().count("\n") == 6


# ------------------------------------------------------------------------ real runs
def _metrics(db: Path) -> dict:
    with ResultStore(db, create=False) as s:
        return {j: {k: r[k] for k in METRIC_FIELDS} for j, r in s.latest().items()}


def _pdk_or_skip():
    from mactile.synth.libraries import LibraryError, resolve_library

    try:
        resolve_library("osu018")
    except LibraryError as e:
        pytest.skip(str(e))


@pytest.mark.synth
def test_local_pool_and_dask_cluster_give_identical_records(tools, tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    _pdk_or_skip()
    spec = parse_spec(SMALL)
    # Separate caches: each executor synthesizes for itself.
    monkeypatch.setenv("MACTILE_CACHE_DIR", str(tmp_path / "cache-local"))
    local = run_sweep(spec, tmp_path / "local", workers=2, progress=False)
    assert (local.total, local.ran, local.failed) == (3, 3, 1)

    monkeypatch.setenv("MACTILE_CACHE_DIR", str(tmp_path / "cache-dask"))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        dask = run_sweep(spec, tmp_path / "dask", cluster=cluster.scheduler_address,
                         progress=False)
    assert dask.ran == 3 and "Dask cluster" in dask.executor
    a, b = _metrics(tmp_path / "local" / DB_NAME), _metrics(tmp_path / "dask" / DB_NAME)
    assert a == b
    ok = [r for r in a.values() if r["status"] == "ok"]
    assert len(ok) == 2 and all(r["area_um2"] > 0 and r["energy_per_op_pj"] > 0 for r in ok)
    assert {r["meets_timing"] for r in ok} == {True, False}    # 3 ns is below mac-int4's
    failed = [r for r in a.values() if r["status"] == "failed"]
    assert len(failed) == 1 and "terms" in failed[0]["error"]
    # Not from a cache: both executors ran the flow.
    with ResultStore(tmp_path / "dask" / DB_NAME, create=False) as s:
        assert not any(r["cached"] for r in s.latest().values())

    # A second run of the same spec runs nothing.
    again = run_sweep(spec, tmp_path / "local", workers=2, progress=False)
    assert (again.skipped, again.ran) == (3, 0)


@pytest.mark.synth
def test_killed_sweep_resumes_where_it_stopped(tools, tmp_path):
    _pdk_or_skip()
    cache = tmp_path / "cache"  # empty: no job finishes before the kill from a cache
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(json.dumps({
        "name": "resume", "clocks_ns": [10, 6, 4],
        "designs": [{"design": "mac-int4", "family": "mac"}]}))
    out = tmp_path / "out"
    db = out / DB_NAME
    argv = [sys.executable, "-m", "mactile.cli.main", "sweep", str(spec_file), "-o", str(out),
            "-j", "1"]
    env = {**os.environ, "MACTILE_CACHE_DIR": str(cache)}
    proc = subprocess.Popen(argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if db.exists():
                with closing(sqlite3.connect(db)) as c:
                    try:
                        if c.execute("SELECT COUNT(*) FROM results").fetchone()[0] >= 1:
                            break
                    except sqlite3.OperationalError:  # created, its table not yet
                        pass
            time.sleep(0.2)
        assert proc.poll() is None, "the sweep ended before it could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its pool, as a crash would
        proc.wait()
    with closing(sqlite3.connect(db)) as c:
        first = [r[0] for r in c.execute("SELECT job_id FROM results ORDER BY seq")]
    assert 1 <= len(first) < 3
    assert not (out / "sweep.md").exists()           # no report of a killed run

    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{len(first)} already recorded, {3 - len(first)} to run" in done.stderr
    with closing(sqlite3.connect(db)) as c:
        rows = [r[0] for r in c.execute("SELECT job_id FROM results ORDER BY seq")]
    assert rows[:len(first)] == first and len(rows) == len(set(rows)) == 3
    assert sorted(p.name for p in out.iterdir()) == ["pareto-mac.png", "sweep.csv", "sweep.md",
                                                     "sweep.sqlite"]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.synth
def test_interrupted_sweep_exits_cleanly(tools, tmp_path):
    """SIGINT (Ctrl-C) while jobs run: exit 130, the finished jobs kept, no temporary
    file left in the output folder, no half entry in the cache."""
    _pdk_or_skip()
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(json.dumps({"clocks_ns": [10, 7],
                                     "designs": [{"design": "mac-int8"}]}))
    out = tmp_path / "out"
    cache = tmp_path / "cache"  # its run folders appear once the jobs run
    env = {**os.environ, "MACTILE_CACHE_DIR": str(cache)}
    # SIGINT back to its default in the child: a test run started in the background of a
    # non-interactive shell (`make test &`) inherits it ignored, and Python then keeps
    # ignoring it, as a backgrounded program should: the sweep would run to its end.
    proc = subprocess.Popen([sys.executable, "-m", "mactile.cli.main", "sweep", str(spec_file),
                             "-o", str(out), "-j", "2"], env=env, start_new_session=True,
                            preexec_fn=_default_sigint,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = cache / "runs"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (runs.exists() and any(runs.iterdir())):
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)           # what Ctrl-C in a terminal does
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "mactile: interrupted" in err and "Traceback" not in err
    leftovers = [p.name for p in out.iterdir() if p.name != DB_NAME]
    assert leftovers == []
    # The cache has no published half entry. A job stopped twice (the stop landing inside
    # a __del__, then again) may leave its private run folder, named after its dead
    # process: the flow's next run removes it, as for a killed process.
    assert not [p for p in runs.iterdir() if not p.name.startswith(".")
                and not (p / "result.json").exists() and not p.name.endswith(".failed")]
    from mactile.golden.fileio import remove_stale_temps

    remove_stale_temps(runs, min_age_s=0)
    assert not [p for p in runs.iterdir() if p.name.startswith(".")]


@pytest.mark.synth
def test_equivalence_off_gives_figures_marked_not_checked(tools):
    from mactile.synth.sweep.jobs import run_job

    _pdk_or_skip()
    spec = parse_spec({"designs": [{"design": "mac-int4"}],
                       "measure": {"equivalence": False, "workload": "global"}})
    r = run_job(spec.jobs[0].to_dict())
    assert r["status"] == "ok" and r["equivalence"] == "not checked", r
    assert r["area_um2"] > 0 and r["power_total_mw"] > 0 and r["fmax_mhz"] > 0
    assert r["energy_per_op_pj"] == pytest.approx(r["power_total_mw"] * 10.0)


@pytest.mark.synth
def test_a_job_past_its_time_limit_is_a_timeout_record(tools, tmp_path, monkeypatch):
    from mactile.synth.sweep.jobs import run_job

    _pdk_or_skip()
    monkeypatch.setenv("MACTILE_CACHE_DIR", str(tmp_path / "cache"))  # nothing cached
    spec = parse_spec({"designs": [{"design": "mac-int8"}], "measure": {"timeout_s": 0.05}})
    r = run_job(spec.jobs[0].to_dict())
    assert r["status"] == "timeout" and "timed out after" in r["error"], r
    assert r["area_um2"] is None and r["energy_per_op_pj"] is None


def test_random_flag_overrides_the_search(capsys):
    rc, out, _ = _cli(["sweep", str(REPO / "examples/sweeps/tensor-cores.yaml"), "--dry-run",
                       "--random", "5", "--seed", "2"], capsys)
    assert rc == 0 and "5 jobs (random draw of 5 of 108)" in out
    assert out.count("  to run  ") == 5
