"""The results of a sweep: an append-only SQLite table, one row per finished job.

Rows are only ever inserted, each in its own transaction as its job finishes, so a
killed sweep loses at most the jobs that were running, never a finished one, and never
leaves half a row (SQLite's write-ahead log: ``sweep.sqlite-wal`` and ``-shm`` exist
while a sweep runs, and are folded into the file when it ends). A job's latest row is its result; a job rerun (its
failure retried) adds a row rather than replacing one.
"""
from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from pathlib import Path

__all__ = ["ResultStore", "DB_NAME", "StoreError", "StoreFailed", "REQUIRED_FIELDS"]

DB_NAME = "sweep.sqlite"
#: How long to wait for another process's lock on the database (seconds).
LOCK_TIMEOUT_S = 30.0
#: Keys every stored record must have for the report to use it.
REQUIRED_FIELDS = ("job_id", "family", "design", "pdk", "clock_ns", "status")


class StoreError(ValueError):
    """The database cannot be used as given (bad input: exit status 2)."""


class StoreFailed(RuntimeError):
    """Writing the database failed during a run (exit status 1); what was committed
    before is kept."""


def _remedy(e: sqlite3.Error) -> str:
    text = str(e).lower()
    if "locked" in text or "busy" in text:
        return ("another process holds it (a sweep still running in this folder?); wait for "
                "it to finish, or give another -o folder")
    if "readonly" in text or "read-only" in text:
        return "it (or its folder) is read-only: make it writable or give another -o folder"
    if "full" in text:
        return "the disk is full: free space, then run again to resume"
    if "malformed" in text or "not a database" in text or "corrupt" in text:
        return ("it is damaged or not a sweep results database: move it aside (its jobs "
                "then run again) or give another -o folder")
    if "unable to open" in text:
        return "its folder is missing or not writable"
    return "check the file and its folder, or give another -o folder"


def _wrap(e: sqlite3.Error, path: Path, during: str, *, failed_run: bool) -> Exception:
    cls = StoreFailed if failed_run else StoreError
    kept = "; the jobs committed before are kept" if failed_run else ""
    return cls(f"results database {str(path)!r}: {during} failed (sqlite: {e}); "
               f"{_remedy(e)}{kept}")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    status TEXT NOT NULL,
    written REAL NOT NULL,
    job TEXT NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_job ON results (job_id);
CREATE TABLE IF NOT EXISTS sweeps (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    started REAL NOT NULL,
    spec TEXT NOT NULL,
    jobs INTEGER NOT NULL
);
"""


class ResultStore:
    """The results database of one output folder (``DIR/sweep.sqlite``).

    Parameters
    ----------
    path : Path
        The database file (created with its tables when absent).
    create : bool
        False: refuse a missing file (``mactile sweep --report`` on a folder with no sweep).
    """

    def __init__(self, path: str | Path, *, create: bool = True):
        self.path = Path(path)
        self.damaged: list[str] = []
        if not create and not self.path.exists():
            raise FileNotFoundError(f"no sweep results in {str(self.path.parent)!r} "
                                    f"({self.path.name} not found)")
        # The database path gets the output checks (it is written): a directory, device,
        # FIFO or socket, or a symlink to one, is refused before SQLite opens it (a link to
        # /dev/null would make SQLite create /dev/null-journal). A symlink to a regular
        # file is followed, so the journal lands beside the real file.
        from mactile.golden.fileio import OutputError, check_output_file

        try:
            target = check_output_file(self.path, what="results database")
        except OutputError as e:
            raise StoreError(str(e)) from None
        existed = target.exists() and target.stat().st_size > 0
        try:
            self.conn = sqlite3.connect(target, timeout=LOCK_TIMEOUT_S)
            if existed:  # checked before anything is written to it
                self.conn.execute("SELECT job_id, status, job, record FROM results LIMIT 0")
            # Write-ahead log, synced at checkpoints: a commit survives the process being
            # killed (only a crash of the machine itself may lose the last rows, never
            # corrupt the file), at 0.2 ms a row instead of 14 ms with a sync per commit
            # (measured on the shared machine). WAL needs a local file system (not NFS),
            # which the one process that writes the table has.
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.executescript(_SCHEMA)
        except sqlite3.Error as e:
            with contextlib.suppress(Exception):
                self.conn.close()
            raise _wrap(e, self.path, "opening it", failed_run=False) from None

    def close(self) -> None:
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def begin_sweep(self, name: str, spec_text: str, jobs: int) -> None:
        try:
            with self.conn:
                self.conn.execute("INSERT INTO sweeps (name, started, spec, jobs) "
                                  "VALUES (?,?,?,?)", (name, time.time(), spec_text, jobs))
        except sqlite3.Error as e:
            raise _wrap(e, self.path, "recording the sweep", failed_run=False) from None

    def add(self, job: dict, record: dict) -> None:
        """Append one finished job (committed before this returns)."""
        try:
            with self.conn:
                self.conn.execute(
                    "INSERT INTO results (job_id, status, written, job, record) "
                    "VALUES (?,?,?,?,?)",
                    (job["job_id"], record["status"], time.time(),
                     json.dumps(job, sort_keys=True), json.dumps(record, sort_keys=True)))
        except sqlite3.Error as e:
            raise _wrap(e, self.path, f"recording job {job['job_id']}", failed_run=True
                        ) from None

    def latest(self) -> dict[str, dict]:
        """``{job_id: record}`` of every job's latest row, in the order first written.

        A row whose record cannot be read (not JSON, not a mapping, missing one of
        :data:`REQUIRED_FIELDS`) is left out and described in :attr:`damaged` (file, row
        and job named): the rest of the report survives it."""
        try:
            rows = self.conn.execute(
                "SELECT seq, job_id, record FROM results WHERE seq IN "
                "(SELECT MAX(seq) FROM results GROUP BY job_id) ORDER BY seq").fetchall()
        except sqlite3.Error as e:
            raise _wrap(e, self.path, "reading the results", failed_run=False) from None
        out, self.damaged = {}, []
        from .jobs import record_fields

        for seq, jid, rec in rows:
            try:
                r = json.loads(rec)
                if not isinstance(r, dict):
                    raise ValueError(f"a {type(r).__name__}, not a record")
                missing = [k for k in REQUIRED_FIELDS if k not in r]
                if missing:
                    raise ValueError(f"no {', '.join(missing)}")
            except (ValueError, TypeError) as e:
                self.damaged.append(f"{str(self.path)!r} row {seq} (job {jid}) is damaged "
                                    f"({e}); left out")
                continue
            out[jid] = {**{k: None for k in record_fields()}, **r}
        return out

    def done(self, *, retry_failed: bool = False) -> set[str]:
        """Ids of the jobs that need not run again (all recorded ones; with
        ``retry_failed``, those whose latest record is ``ok`` or ``unproven``)."""
        latest = self.latest()
        if not retry_failed:
            return set(latest)
        return {j for j, r in latest.items() if r["status"] in ("ok", "unproven")}

    def count(self) -> int:
        try:
            return self.conn.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        except sqlite3.Error as e:
            raise _wrap(e, self.path, "counting the results", failed_run=False) from None

    def last_spec(self) -> tuple[str, str] | None:
        try:
            row = self.conn.execute("SELECT name, spec FROM sweeps ORDER BY seq DESC LIMIT 1"
                                    ).fetchone()
        except sqlite3.Error as e:
            raise _wrap(e, self.path, "reading the sweeps", failed_run=False) from None
        return tuple(row) if row else None
