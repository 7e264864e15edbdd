"""The synthesis cache under concurrent runs, SIGTERM and SIGKILL (issue 20, rows 10-12).

Each test starts real ``mactile synth`` processes on a private cache folder.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

DESIGN = ["mac-int8", "--clock-ns", "5"]


def mactile(args, cache, cwd, **kw):
    env = {**os.environ, "MACTILE_CACHE_DIR": str(cache)}
    return subprocess.Popen([sys.executable, "-m", "mactile.cli.main", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def temporaries(cache):
    """Hidden (temporary) entries left in the cache's folders."""
    return sorted(str(p.relative_to(cache)) for sub in ("runs", "netlists")
                  if (cache / sub).exists() for p in (cache / sub).iterdir()
                  if p.name.startswith("."))


def wait_for_temporary(cache, proc, limit_s=120):
    t0 = time.time()
    while time.time() - t0 < limit_s:
        if temporaries(cache):
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before it made its folder: {proc.communicate()}")
        time.sleep(0.05)
    pytest.fail("no run folder appeared")


def comparable(record):
    """A record without what legitimately differs between runs (their durations)."""
    return {k: v for k, v in record.items() if k != "runtime_s"}


@pytest.mark.parametrize("rounds", [2])
def test_concurrent_runs_on_one_cache(tools, osu018, tmp_path, rounds):
    """Four `synth --no-cache` at once, on an empty cache and then on a filled one: every
    run succeeds (no 'Directory not empty'), all records agree, no temporary is left."""
    cache = tmp_path / "cache"
    records = []
    for _ in range(rounds):
        procs = [mactile(["synth", *DESIGN, "--json", "--no-cache"], cache, tmp_path)
                 for _ in range(4)]
        for p in procs:
            out, err = p.communicate(timeout=600)
            assert p.returncode == 0, err
            assert "Traceback" not in err
            records.append(comparable(json.loads(out)))
    assert all(r == records[0] for r in records), "runs of one design disagree"
    assert temporaries(cache) == []
    assert len(list((cache / "runs").iterdir())) == 1
    assert not (tmp_path / ".history_sta").exists()  # row 12: nothing in the user's folder


def test_sigterm_removes_the_run_folder(tools, osu018, tmp_path):
    cache = tmp_path / "cache"
    p = mactile(["synth", *DESIGN], cache, tmp_path)
    wait_for_temporary(cache, p)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143
    assert err.strip() == "mactile: terminated (SIGTERM)"
    assert temporaries(cache) == [] and not list((cache / "runs").iterdir())


def test_sigkill_leftover_is_removed_by_the_next_run(tools, osu018, tmp_path):
    cache = tmp_path / "cache"
    p = mactile(["synth", *DESIGN], cache, tmp_path, start_new_session=True)
    wait_for_temporary(cache, p)
    os.killpg(p.pid, signal.SIGKILL)  # the run and its tools, as the OOM killer might
    p.communicate(timeout=60)
    left = temporaries(cache)
    assert left, "SIGKILL cannot clean up: the folder stays until the next run"
    old = time.time() - 60
    for name in left:
        os.utime(cache / name, (old, old))
    q = mactile(["synth", *DESIGN, "--json"], cache, tmp_path)
    out, err = q.communicate(timeout=600)
    assert q.returncode == 0, err
    assert temporaries(cache) == []
