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


# ------------------------------------------------------------------------ mactile report
TINY_LIB = ('library (tiny) {\n  cell (INV) { area : 1; pin (A) { direction : input; }\n'
            '    pin (Y) { direction : output; function : "!A"; } }\n'
            '  cell (DFF) { area : 4; ff (IQ, IQN) { next_state : "D"; clocked_on : "CK"; }\n'
            '    pin (D) { direction : input; } pin (CK) { direction : input; clock : true; }\n'
            '    pin (Q) { direction : output; function : "IQ"; } }\n}\n')
# Loaded by every Python process started with PYTHONPATH=d: a report worker's job sleeps
# instead of synthesizing (the report's own process is untouched).
SLOW_REPORT = '''import multiprocessing, os, time
import mactile.synth.report as report

def _slow(job):
    open(f"started-{os.getpid()}", "w").close()
    time.sleep(60)

report._run_job = _slow
'''


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_report_workers_die_with_a_killed_report(tmp_path, how):
    """Before: `mactile report -j 2` killed with SIGKILL left its workers synthesizing (no
    parent-death signal); `-j 100000` started 100000 of them for a few designs."""
    from mactile.synth.tools import find_sta

    try:
        find_sta()
    except Exception as e:  # noqa: BLE001 - no timing tool: the report stops before the pool
        pytest.skip(str(e))
    d = tmp_path
    (d / "tiny.lib").write_text(TINY_LIB)
    (d / "sitecustomize.py").write_text(SLOW_REPORT)
    env = {**os.environ, "PYTHONPATH": str(d), "MACTILE_CACHE_DIR": str(d / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "mactile.cli.main", "report", "-o", "r",
                             "--designs", "mac-int4", "mac-fp4", "--liberty", "tiny.lib",
                             "-j", "1000", "--no-plots", "--activity", "global"], cwd=d, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        pids = _worker_pids(d, n=2)
        # -j 1000 for 2 designs: 2 workers, not 1000.
        kids = [p for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == proc.pid]
        assert len(kids) <= 3, kids   # 2 workers (+ the pool's resource tracker)
        os.kill(proc.pid, getattr(signal, how))
        proc.wait(30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids), "a report worker outlived its report"
        assert not (d / "r").exists()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().split(")")[-1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1
