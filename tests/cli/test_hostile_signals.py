"""Processes and signals of a sweep's local pool: workers die with the sweep (SIGKILL
included), and a SIGTERM sent to one worker fails its job, not the sweep.

The jobs use a builder that sleeps in pool workers only (it returns at once in the sweep's
own checks before the work), so nothing here runs a synthesis tool. Before: a SIGKILLed
sweep left its workers running for good (they hold the terminal's pipe open), and SIGTERM
to one worker stopped the whole sweep as "interrupted" (exit 130).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="PR_SET_PDEATHSIG is Linux's")

SLOW = '''import multiprocessing, os, time
def build(seconds=60):
    if multiprocessing.current_process().name != "MainProcess":
        open(f"started-{os.getpid()}", "w").close()
        time.sleep(seconds)
    return object()
'''


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _osu018_or_skip():
    from mactile.synth.libraries import LibraryError, resolve_library

    try:
        resolve_library("osu018")
    except LibraryError as e:
        pytest.skip(str(e))


@pytest.fixture
def d(tmp_path):
    _osu018_or_skip()
    (tmp_path / "slowmod.py").write_text(SLOW)
    return tmp_path


def _start(d, spec: str, *extra):
    (d / "s.yaml").write_text(spec)
    env = {**os.environ, "PYTHONPATH": str(d), "MACTILE_CACHE_DIR": str(d / "cache")}
    return subprocess.Popen([sys.executable, "-m", "mactile.cli.main", "sweep", "s.yaml", "-o",
                             "o", "--no-plots", *extra], cwd=d, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _worker_pids(d, n=1, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [int(p.name.split("-")[1]) for p in d.glob("started-*")]
        if len(pids) >= n:
            return pids
        time.sleep(0.1)
    raise AssertionError("no worker started its job")


def test_workers_die_with_a_killed_sweep(d):
    proc = _start(d, "designs: [{builder: 'slowmod:build', name: slow}]\n", "-j", "1")
    try:
        (pid,) = _worker_pids(d)
        os.kill(proc.pid, signal.SIGKILL)          # the sweep only, as a crash would
        proc.wait(10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        assert not _alive(pid), "the pool worker outlived its sweep"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()


def test_sigterm_to_a_worker_fails_its_job_only(d):
    spec = ("designs: [{builder: 'slowmod:build', name: slow, grid: {seconds: [60, 0]}}]\n")
    proc = _start(d, spec, "-j", "1")
    try:
        pids = _worker_pids(d)
        os.kill(pids[0], signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 3, err            # finished, some jobs failed
    assert "interrupted" not in err and "Traceback" not in err
    assert "the worker process got SIGTERM during the job" in (d / "o" / "sweep.md").read_text()
    assert "2 jobs (0 already recorded, 2 run now, 2 of them without figures)" in out
