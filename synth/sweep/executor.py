"""Where a sweep's jobs run: a local process pool (default) or a Dask cluster.

Both executors take a function and plain-data items and yield ``(item, outcome)`` as jobs
finish, ``outcome`` being the function's return value or the exception that escaped it.
They differ only in where the function runs:

:class:`LocalPool`
    ``concurrent.futures.ProcessPoolExecutor`` on this machine (a laptop, CI).
:class:`DaskExecutor`
    ``dask.distributed`` at a scheduler address (``tcp://HOST:8786``): workers on other
    machines, started by hand (``dask worker tcp://HOST:8786``), by dask-jobqueue on Slurm
    or by the Dask Kubernetes operator. Results come back through the scheduler; nothing
    is assumed about a shared file system. Each worker needs mactile with its ``synth``
    extra, Yosys/OpenSTA and the liberty files the spec names.

Stopping (Ctrl-C, SIGTERM, an error in the consumer) cancels every queued job; the local
pool also stops its running jobs (their run folders removed, their tools killed). A Dask
worker cannot be interrupted mid-task: it finishes its current job and discards it.
Local workers die with the sweep (Linux: ``PR_SET_PDEATHSIG``), and a SIGTERM sent to one
of them fails its running job only (:class:`JobTerminated`, a record like any failure).
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Iterable, Iterator

__all__ = ["LocalPool", "DaskExecutor", "make_executor", "ExecutorLost", "default_workers",
           "SCHEMES", "check_cluster_address"]

#: Address schemes of a Dask scheduler this sweep connects to. ``inproc://`` reaches only
#: a scheduler in this very process and ``ucx://`` needs UCX-Py: both refused by name.
SCHEMES = ("tcp", "tls")
#: Seconds to wait for the scheduler's handshake (a server that accepts the connection and
#: never answers is given up after this) and for its first worker.
CONNECT_TIMEOUT_S = 30.0
WORKER_WAIT_S = 60.0
#: Seconds a running sweep tolerates a cluster with no worker before it gives up (the
#: jobs finished so far are recorded; a rerun resumes).
NO_WORKER_GRACE_S = 60.0


class ExecutorLost(RuntimeError):
    """The executor itself failed (a worker process died, the scheduler went away): not
    a job's failure, so nothing is recorded for the jobs still in flight."""


def default_workers() -> int:
    """The CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def check_cluster_address(address: str) -> str:
    """``address`` if it names a scheduler this sweep can reach (``tcp://HOST:PORT`` or
    ``tls://``), else ValueError naming the scheme."""
    if not isinstance(address, str) or "://" not in address:
        raise ValueError(f"--cluster: expected a scheduler address like tcp://HOST:8786, got "
                         f"{address!r}")
    scheme, _, rest = address.partition("://")
    if scheme.lower() not in SCHEMES:
        why = {"inproc": "it reaches only a scheduler inside this process",
               "ucx": "it needs UCX-Py, which mactile does not install"}.get(scheme.lower(),
                                                                           "unknown scheme")
        raise ValueError(f"--cluster: scheme {scheme}:// is not supported ({why}); give "
                         f"tcp://HOST:PORT or tls://HOST:PORT")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--cluster: expected {scheme}://HOST:PORT with a port in 1-65535, "
                         f"got {address!r}")
    return address


class LocalPool:
    """Worker processes on this machine.

    Parameters
    ----------
    workers : int
        Processes (default: the usable CPUs).
    """

    def __init__(self, workers: int | None = None):
        self.workers = workers or default_workers()

    @property
    def slots(self) -> int:
        return self.workers

    def describe(self) -> str:
        return f"local pool of {self.workers} process{'es' if self.workers != 1 else ''}"

    def run(self, fn: Callable, items: Iterable[dict]) -> Iterator[tuple[dict, object]]:
        items = list(items)
        if not items:
            return
        pool = ProcessPoolExecutor(max_workers=min(self.workers, len(items)),
                                   initializer=_pool_worker_init, initargs=(os.getpid(),))
        futures = {}
        try:
            futures = {pool.submit(_sweep_job, fn, it): it for it in items}
            for fut in as_completed(futures):
                try:
                    out = fut.result()
                except BrokenProcessPool as e:
                    raise ExecutorLost(f"a worker process died ({e or 'killed'}); the jobs "
                                       f"finished so far are recorded: run again to resume"
                                       ) from None
                except JobTerminated as e:  # a signal to the worker, not to this sweep
                    out = e
                except Exception as e:  # noqa: BLE001 - reported to the caller as a result
                    out = e
                yield futures[fut], out
        finally:
            for f in futures:
                f.cancel()
            _stop_pool(pool)
            pool.shutdown(wait=True, cancel_futures=True)


class JobTerminated(KeyboardInterrupt):
    """A pool worker got SIGTERM during a job (from outside the sweep: the sweep stops its
    own workers with :data:`STOP_SIGNAL`): the job is a failed record and the sweep goes
    on. A KeyboardInterrupt, so that the flow's Ctrl-C cleanup (tools killed, run folder
    removed) runs."""

    def __init__(self, msg: str = "the worker process got SIGTERM during the job"):
        super().__init__(msg)


#: What the sweep sends its workers to stop them (Ctrl-C, SIGTERM to the sweep, an error),
#: and what a worker gets when the sweep dies (Linux: prctl PR_SET_PDEATHSIG).
STOP_SIGNAL = signal.SIGUSR1
_PR_SET_PDEATHSIG = 1
_parent = {"pid": 0, "signal": signal.SIGTERM}


def _orphaned() -> bool:
    return bool(_parent["pid"]) and os.getppid() != _parent["pid"]


def _sweep_job(fn, arg):
    """Run one job in a worker (:func:`mactile.synth.report._as_job`); a worker whose sweep
    died exits once the job has cleaned up, instead of waiting for work forever."""
    from mactile.synth.report import _as_job

    try:
        return _as_job(fn, arg)
    finally:
        if _orphaned():
            os._exit(1)


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, AttributeError, ValueError):
            if proc.is_alive():
                os.kill(proc.pid, STOP_SIGNAL)


def _on_stop(signum, frame):
    """STOP_SIGNAL: stop as Ctrl-C does, and every queued job returns at once; a worker
    whose sweep died exits (now if idle, after its job's cleanup otherwise)."""
    from mactile.synth.report import _worker_state

    _parent["signal"] = signum
    _worker_state["stopping"] = True
    if _worker_state["in_job"]:
        raise KeyboardInterrupt
    if _orphaned():
        os._exit(1)


def _on_term(signum, frame):
    """SIGTERM from outside the sweep: the running job fails (cleaned up as on Ctrl-C);
    the worker goes on with the next job."""
    from mactile.synth.report import _worker_state

    _parent["signal"] = signum
    if _worker_state["in_job"]:
        raise JobTerminated()


def _pool_worker_init(parent_pid: int = 0) -> None:
    """In each pool worker: :data:`STOP_SIGNAL` stops the job as Ctrl-C does (see
    :func:`mactile.synth.report._worker_init`), SIGTERM fails the running job only
    (:class:`JobTerminated`), and Ctrl-C itself is left to the parent, which sends
    STOP_SIGNAL: a worker interrupted twice (Ctrl-C reaches the whole process group) could
    be stopped again while it removes its run folder. On Linux the kernel sends STOP_SIGNAL
    when the sweep dies (SIGKILL included), so no worker outlives it."""
    import sys

    _parent["pid"] = parent_pid
    signal.signal(STOP_SIGNAL, _on_stop)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(STOP_SIGNAL), 0, 0, 0)
    if _orphaned():  # the sweep died before prctl took effect
        os._exit(1)
    # The stop (KeyboardInterrupt from a handler) may land inside a __del__ (Amaranth's
    # unused-elaboratable check), where Python prints it and goes on: send the signal
    # again a moment later (from a timer thread: a signal sent here would be handled
    # inside this hook), to stop the job at a later step instead.
    import threading

    default_hook = sys.unraisablehook

    def hook(unraisable):
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            t = threading.Timer(0.05, os.kill, (os.getpid(), _parent["signal"]))
            t.daemon = True
            t.start()
            return
        default_hook(unraisable)

    sys.unraisablehook = hook


class DaskExecutor:
    """Jobs on a ``dask.distributed`` cluster.

    Parameters
    ----------
    address : str or distributed.Client
        Scheduler address (``tcp://HOST:8786``) or a connected client (the tests pass a
        ``LocalCluster``'s).
    timeout_s : float
        How long to wait for the scheduler.
    """

    def __init__(self, address, *, timeout_s: float | None = None):
        try:
            from distributed import Client
        except ImportError:
            raise ValueError("--cluster needs dask.distributed: pip install 'mactile[sweep]'"
                             ) from None
        timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
        if isinstance(address, Client):
            self.client, self._own = address, False
        else:  # the command checks the scheme (check_cluster_address); the API takes any
            self.client, self._own = _connect(Client, address, timeout_s), True
        self.address = self.client.scheduler.address
        try:
            self.client.wait_for_workers(1, timeout=WORKER_WAIT_S)
        except (TimeoutError, OSError) as e:
            self.close()
            raise ExecutorLost(f"the Dask scheduler at {self.address} has no workers (waited "
                               f"{WORKER_WAIT_S:g} s; {type(e).__name__}); start some with "
                               f"`dask worker {self.address}` and run again") from None

    @property
    def slots(self) -> int:
        return max(1, sum(self.client.nthreads().values()))

    def describe(self) -> str:
        n = self.client.nthreads()
        return (f"Dask cluster at {self.address} ({len(n)} worker{'s' if len(n) != 1 else ''}, "
                f"{sum(n.values())} thread{'s' if sum(n.values()) != 1 else ''})")

    def run(self, fn: Callable, items: Iterable[dict]) -> Iterator[tuple[dict, object]]:
        from distributed import as_completed as dask_completed
        from distributed.client import FutureCancelledError

        items = list(items)
        if not items:
            return
        futures = {}
        try:
            for it in items:
                # pure=False: a job is run even if an identical key ran before (its result
                # may have changed with the code); the id keeps the dashboard readable.
                fut = self.client.submit(fn, it, pure=False,
                                         key=f"mactile-sweep-{it['job_id']}-{os.urandom(4).hex()}")
                futures[fut] = it
            # with_results: the client gathers results in its event loop as tasks finish
            # (one blocking round trip per job cost 2x more here); an exception of a job
            # (KilledWorker, ...) comes back as the result, a lost task as CancelledError.
            for fut, out in self._completed(dask_completed(futures, with_results=True,
                                                           raise_errors=False)):
                if fut.status == "error" and isinstance(out, tuple):
                    out = out[1]  # (type, exception, traceback)
                if isinstance(out, (FutureCancelledError, asyncio.CancelledError, OSError)):
                    raise ExecutorLost(f"the Dask cluster lost the job ({type(out).__name__}: "
                                       f"{out}); run again to resume")
                yield futures[fut], out
        finally:
            if futures:
                try:
                    self.client.cancel(list(futures))
                except Exception:  # noqa: BLE001 - the cluster may be gone already
                    pass

    def _completed(self, ac):
        """``(future, result)`` as they finish; ExecutorLost once the cluster has had no
        worker for :data:`NO_WORKER_GRACE_S` (Dask itself would wait for one forever)."""
        import time

        since = None
        while not ac.is_empty():
            batch = ac.next_batch(block=False)
            if batch:
                since = None
                yield from batch
                continue
            try:
                workers = len(self.client.nthreads())
            except Exception:  # noqa: BLE001 - the scheduler itself is gone
                workers = 0
            if workers:
                since = None
            elif since is None:
                since = time.monotonic()
            elif time.monotonic() - since > NO_WORKER_GRACE_S:
                raise ExecutorLost(f"the Dask cluster at {self.address} has had no worker for "
                                   f"{NO_WORKER_GRACE_S:g} s; the jobs finished so far are "
                                   f"recorded: start workers and run again to resume")
            time.sleep(0.1)

    def close(self) -> None:
        if self._own:
            with contextlib.suppress(Exception):  # the scheduler may be gone
                self.client.close(timeout=5)


def _connect(client_cls, address: str, timeout_s: float):
    """A connected ``Client``, or ExecutorLost within ``timeout_s`` (plus a few seconds):
    the connection runs in a daemon thread, so a server that accepts and never answers,
    or answers garbage, cannot hold the sweep."""
    import threading

    box: dict = {}

    def connect():
        try:
            box["client"] = client_cls(address, timeout=timeout_s)
        except BaseException as e:  # noqa: BLE001 - reported below
            box["error"] = e

    t = threading.Thread(target=connect, name="mactile-dask-connect", daemon=True)
    t.start()
    t.join(timeout_s + 5)
    if t.is_alive():
        raise ExecutorLost(f"the Dask scheduler at {address} accepted the connection but did "
                           f"not answer within {timeout_s:g} s; is it a Dask scheduler?")
    e = box.get("error")
    if e is None:
        return box["client"]
    if isinstance(e, (OSError, TimeoutError)):
        raise ExecutorLost(f"cannot reach the Dask scheduler at {address}: {e}")
    raise ExecutorLost(f"{address} did not answer as a Dask scheduler does "
                       f"({type(e).__name__}: {str(e)[:200]}); check the address")


def make_executor(cluster=None, workers: int | None = None):
    """A :class:`DaskExecutor` for ``cluster`` (an address or client), else a
    :class:`LocalPool` of ``workers`` processes."""
    if cluster:
        return DaskExecutor(cluster)
    return LocalPool(workers)
