"""What the tests share: the server, a fresh extension per test, waiting for
observable state with a deadline, and workers that are always stopped.

PGQ_TEST_DSN names a database the tests may wreck, as a superuser: every
test drops and creates the extension there and ends the other client
sessions of that database.
"""

from __future__ import annotations

import os
import time
import unittest
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from pgq_cpp import StreamConsumer, Worker

DSN = os.environ.get("PGQ_TEST_DSN", "")
if not DSN:
    raise RuntimeError("PGQ_TEST_DSN is not set: see clients/python/run_tests.sh")

# Upper bound on any wait for a state or a thread: far above what a healthy
# run needs, so reaching it means a hang, not a slow machine.
HANG = 20.0

T = TypeVar("T")


class PgqTestCase(unittest.TestCase):
    def setUp(self) -> None:
        self.admin = psycopg.connect(DSN, autocommit=True)
        self.addCleanup(self.admin.close)
        self.admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            "   AND backend_type = 'client backend'"
        )
        self.admin.execute("DROP EXTENSION IF EXISTS pgq_cpp")
        self.admin.execute("CREATE EXTENSION pgq_cpp")
        self.admin.execute("SELECT pgq.create_queue('q')")

    def connect(self, conninfo: str = DSN, **kwargs: Any) -> psycopg.Connection[Any]:
        conn = psycopg.connect(conninfo, **kwargs)
        self.addCleanup(conn.close)
        return conn

    def start_worker(self, handler: Callable[..., object], **kwargs: Any) -> Worker:
        """A started Worker on queue 'q' (as DSN's role unless conninfo=...),
        stopped and joined at the end of the test whatever happens."""
        worker = Worker(kwargs.pop("conninfo", DSN), kwargs.pop("queue", "q"), handler, **kwargs)
        worker.start()
        self.addCleanup(self._end_worker, worker)
        return worker

    def start_consumer(self, handler: Callable[..., object], **kwargs: Any) -> StreamConsumer:
        """A started StreamConsumer 'c' of stream 's' (as DSN's role unless
        conninfo=...), stopped and joined at the end of the test whatever
        happens."""
        consumer = StreamConsumer(
            kwargs.pop("conninfo", DSN),
            kwargs.pop("stream", "s"),
            kwargs.pop("consumer", "c"),
            handler,
            **kwargs,
        )
        consumer.start()
        self.addCleanup(self._end_worker, consumer)
        return consumer

    def _end_worker(self, worker: Worker | StreamConsumer) -> None:
        worker.stop()
        try:
            ended = worker.join(HANG)
        except psycopg.Error:
            ended = True  # the test asserted on the error itself
        self.assertTrue(ended, "worker still running at the end of the test")

    def scalar(self, sql: str, params: Any = None) -> Any:
        row = self.admin.execute(sql, params).fetchone()
        assert row is not None
        return row[0]

    def wait_for(self, what: str, predicate: Callable[[], T], timeout: float = HANG) -> T:
        """Polls predicate() until it returns a true value, and returns it."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                self.fail(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.01)

    def job_state(self, job_id: int) -> tuple[str, int] | None:
        """(state, attempt) of a live job, state 'p' pending or 'r' running;
        None once it has left pgq.jobs (completed or dead)."""
        row = self.admin.execute(
            "SELECT state::text, attempt FROM pgq.jobs WHERE id = %s", (job_id,)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def job_row(self, job_id: int) -> dict[str, Any] | None:
        """The job as pgq.job reports it (straight SQL, not the client's
        job()), or None when it reports no row."""
        with self.admin.cursor(row_factory=dict_row) as cur:
            return cur.execute("SELECT * FROM pgq.job(%s)", (job_id,)).fetchone()

    def wait_job(self, job_id: int, state: str) -> dict[str, Any]:
        """Waits for pgq.job to report ``state`` for the job; that row."""

        def reached() -> dict[str, Any] | None:
            row = self.job_row(job_id)
            return row if row is not None and row["state"] == state else None

        row = self.wait_for(f"job {job_id} {state}", reached)
        assert row is not None  # wait_for returns a true value
        return row

    def is_pending(self, job_id: int) -> bool:
        state = self.job_state(job_id)
        return state is not None and state[0] == "p"

    def live_jobs(self) -> int:
        """Jobs in pgq.jobs: pending or running."""
        return int(self.scalar("SELECT count(*) FROM pgq.jobs"))

    def create_role(self, name: str) -> str:
        """A login role for the test (dropped at the end); its conninfo."""
        self.admin.execute(f"DROP ROLE IF EXISTS {name}")
        self.admin.execute(f"CREATE ROLE {name} LOGIN PASSWORD 'pgq-test'")
        self.addCleanup(self.admin.execute, f"DROP ROLE IF EXISTS {name}")
        return make_conninfo(DSN, user=name, password="pgq-test")
