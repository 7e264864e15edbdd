"""The results of a sweep: an append-only SQLite table, one row per finished job.

Rows are only ever inserted, each in its own transaction as its job finishes, so a
killed sweep loses at most the jobs that were running, never a finished one, and never
leaves half a row (SQLite's write-ahead log: ``sweep.sqlite-wal`` and ``-shm`` exist
while a sweep runs, and are folded into the file when it ends). A job's latest row is its result; a job rerun (its
failure retried) adds a row rather than replacing one.
"""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

__all__ = ["ResultStore", "DB_NAME"]

DB_NAME = "sweep.sqlite"

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
        if not create and not self.path.is_file():
            raise FileNotFoundError(f"no sweep results in {str(self.path.parent)!r} "
                                    f"({self.path.name} not found)")
        try:
            self.conn = sqlite3.connect(self.path, timeout=30)
            # Write-ahead log, synced at checkpoints: a commit survives the process being
            # killed (only a crash of the machine itself may lose the last rows, never
            # corrupt the file), at 0.2 ms a row instead of 14 ms with a sync per commit
            # (measured on the shared machine). WAL needs a local file system (not NFS),
            # which the one process that writes the table has.
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError as e:
            raise ValueError(f"{str(self.path)!r} is not a sweep results database ({e})"
                             ) from None

    def close(self) -> None:
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def begin_sweep(self, name: str, spec_text: str, jobs: int) -> None:
        with self.conn:
            self.conn.execute("INSERT INTO sweeps (name, started, spec, jobs) VALUES (?,?,?,?)",
                              (name, time.time(), spec_text, jobs))

    def add(self, job: dict, record: dict) -> None:
        """Append one finished job (committed before this returns)."""
        with self.conn:
            self.conn.execute(
                "INSERT INTO results (job_id, status, written, job, record) VALUES (?,?,?,?,?)",
                (job["job_id"], record["status"], time.time(),
                 json.dumps(job, sort_keys=True), json.dumps(record, sort_keys=True)))

    def latest(self) -> dict[str, dict]:
        """``{job_id: record}`` of every job's latest row, in the order first written."""
        rows = self.conn.execute(
            "SELECT job_id, record FROM results WHERE seq IN "
            "(SELECT MAX(seq) FROM results GROUP BY job_id) ORDER BY seq").fetchall()
        return {jid: json.loads(rec) for jid, rec in rows}

    def done(self, *, retry_failed: bool = False) -> set[str]:
        """Ids of the jobs that need not run again (all recorded ones; with
        ``retry_failed``, those whose latest record is ``ok`` or ``unproven``)."""
        latest = self.latest()
        if not retry_failed:
            return set(latest)
        return {j for j, r in latest.items() if r["status"] in ("ok", "unproven")}

    def count(self) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM results").fetchone()[0]

    def last_spec(self) -> tuple[str, str] | None:
        row = self.conn.execute("SELECT name, spec FROM sweeps ORDER BY seq DESC LIMIT 1"
                                ).fetchone()
        return tuple(row) if row else None
