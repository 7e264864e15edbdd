"""``mactile sweep --cluster`` against servers that are not what they claim: one that
accepts and never answers, one that answers garbage, a scheduler with no workers, one whose
only worker goes away mid-sweep, schemes mactile does not support. Every case ends within a
bound, names the problem, and leaves nothing behind (no output folder, no empty
``sweep.sqlite``). Only loopback addresses.

Before: the silent server and the worker-less scheduler hung forever, the garbage server gave
"not enough memory ... EiB", inproc:// and ucx:// gave Python internals, and a refused
connection left an empty sweep.sqlite.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from mactile.cli.main import main

pytest.importorskip("distributed")

SPEC = "name: c\ndesigns: [{builder: 'builtins:dict', name: d}]\n"


def run(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


class Server:
    """A TCP server on 127.0.0.1 that accepts connections and either never answers or
    sends ``reply`` once; stopped (and its sockets closed) on exit."""

    def __init__(self, reply: bytes | None = None):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.reply, self.conns, self.stop = reply, [], threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self):
        while not self.stop.is_set():  # bounded by stop: the test ends it
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(c)
            if self.reply is not None:
                try:
                    c.sendall(self.reply)
                except OSError:
                    pass

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(5)
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.fixture
def d(tmp_path, monkeypatch):
    from mactile.synth.sweep import executor

    monkeypatch.setattr(executor, "CONNECT_TIMEOUT_S", 1.0, raising=False)
    monkeypatch.setattr(executor, "WORKER_WAIT_S", 1.0, raising=False)
    monkeypatch.setattr(executor, "NO_WORKER_GRACE_S", 1.0, raising=False)
    (tmp_path / "s.yaml").write_text(SPEC)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _leaves_nothing(d):
    assert sorted(p.name for p in d.iterdir()) == ["s.yaml"]


@pytest.mark.parametrize("address, pattern", [
    ("inproc://127.0.0.1/1/2", r"scheme inproc:// is not supported \(it reaches only a "
                               r"scheduler inside this process\)"),
    ("ucx://127.0.0.1:8786", r"scheme ucx:// is not supported \(it needs UCX-Py"),
    ("http://127.0.0.1:8786", r"scheme http:// is not supported"),
    ("tcp://127.0.0.1", r"expected tcp://HOST:PORT with a port in 1-65535"),
    ("tcp://127.0.0.1:99999", r"expected tcp://HOST:PORT with a port in 1-65535"),
])
def test_unsupported_address_refused_by_name(d, capsys, address, pattern):
    import re

    rc, _, err = run(["sweep", str(d / "s.yaml"), "-o", str(d / "o"), "--cluster", address],
                     capsys)
    assert rc == 2 and re.search(pattern, err), err
    assert "Traceback" not in err
    _leaves_nothing(d)


def test_spec_cluster_with_an_unsupported_scheme(d, capsys):
    (d / "s.yaml").write_text(SPEC + "cluster: ucx://127.0.0.1:8786\n")
    rc, _, err = run(["sweep", str(d / "s.yaml"), "--dry-run"], capsys)
    assert rc == 2 and "cluster: scheme ucx:// is not supported" in err, err


def test_nothing_listening(d, capsys):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens on it now
    t0 = time.monotonic()
    rc, _, err = run(["sweep", str(d / "s.yaml"), "-o", str(d / "o"), "--cluster",
                      f"tcp://127.0.0.1:{port}"], capsys)
    assert time.monotonic() - t0 < 30
    assert rc == 1 and "cannot reach the Dask scheduler" in err, err
    _leaves_nothing(d)       # before: an empty o/sweep.sqlite


def _sweep_in_a_subprocess(d, port):
    """The command in its own process (a connection left hanging in a thread must not
    reach the other tests' Dask loops), with a 1 s handshake limit."""
    code = ("import sys; from mactile.synth.sweep import executor as e; "
            "e.CONNECT_TIMEOUT_S = 1.0; from mactile.cli.main import main; "
            f"sys.exit(main(['sweep', 's.yaml', '-o', 'o', '--cluster', "
            f"'tcp://127.0.0.1:{port}']))")
    return subprocess.run([sys.executable, "-c", code], cwd=d, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("reply, pattern", [
    (None, r"accepted the connection but did not answer within 1 s; is it a Dask scheduler"),
    (b"\xff" * 64, r"(did not answer as a Dask scheduler does|cannot reach|did not answer)"),
], ids=["silent", "garbage"])
def test_a_server_that_is_not_a_scheduler(d, reply, pattern):
    """Exits within its bound (no thread holds the process), one line, nothing left."""
    import re

    with Server(reply) as srv:
        t0 = time.monotonic()
        p = _sweep_in_a_subprocess(d, srv.port)
        assert time.monotonic() - t0 < 40
    assert p.returncode == 1 and re.search(pattern, p.stderr), p.stderr
    assert "EiB" not in p.stderr and "Traceback" not in p.stderr
    assert p.stderr.startswith("mactile: error: ")
    _leaves_nothing(d)


def test_a_scheduler_without_workers(d, capsys):
    import distributed

    with distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp://",
                                  host="127.0.0.1", dashboard_address=None) as c:
        t0 = time.monotonic()
        rc, _, err = run(["sweep", str(d / "s.yaml"), "-o", str(d / "o"), "--cluster",
                          c.scheduler_address], capsys)
        assert time.monotonic() - t0 < 30
    assert rc == 1 and "has no workers (waited 1 s" in err, err
    _leaves_nothing(d)


def _slow_job(job):
    time.sleep(3)
    return {}


def test_the_only_worker_goes_away(d):
    """Its worker closed mid-sweep: ExecutorLost after the grace period, not a hang."""
    import distributed

    from mactile.synth.sweep import parse_spec, run_sweep
    from mactile.synth.sweep.executor import ExecutorLost

    spec = parse_spec({"designs": [{"builder": "builtins:dict", "name": "d"}]})
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as c:
        def kill():
            time.sleep(0.5)
            c.scale(0)
        threading.Thread(target=kill, daemon=True).start()
        t0 = time.monotonic()
        with pytest.raises(ExecutorLost, match=r"has had no worker for 1 s; the jobs finished "
                                               r"so far are recorded"):
            run_sweep(spec, d / "o", cluster=c.scheduler_address, progress=False,
                      job_fn=_slow_job)
        assert time.monotonic() - t0 < 30
    assert os.path.exists(d / "o" / "sweep.sqlite")  # the sweep had started: kept
