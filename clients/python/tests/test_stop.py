"""Graceful stop: stop(), and SIGTERM/SIGINT under run_forever. Running jobs
finish; jobs claimed but not started are released without counting their
attempt; a claim sleeping in the server is cancelled."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO, Any

from pgq_cpp import Job, Queue, Worker
from support import DSN, HANG, PgqTestCase

Q = Queue("q")
PACKAGE_DIR = Path(__file__).resolve().parents[1]

# A worker process: one handler thread, two jobs per claim; each handler
# announces itself and runs until it reads a line.
WORKER_SCRIPT = """
import logging, sys
from pgq_cpp import Worker

def handler(job):
    print("started", job.id, flush=True)
    sys.stdin.readline()

logging.basicConfig(level=logging.INFO)
Worker(sys.argv[1], "q", handler, concurrency=1, batch=2).run_forever()
print("exited", flush=True)
"""


def _read_lines(stream: IO[str], into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


class StopTest(PgqTestCase):
    def test_stop_releases_jobs_in_line_and_lets_the_running_one_finish(self) -> None:
        ids = Q.enqueue_many(self.admin, [{"n": n} for n in range(3)])
        started, go = threading.Event(), threading.Event()
        runs: list[int] = []

        def handler(job: Job) -> None:
            runs.append(job.id)
            started.set()
            go.wait(HANG)

        worker = self.start_worker(handler, concurrency=1, batch=3)
        self.wait_for("the first job running", started.is_set)
        self.assertEqual([self.job_state(i) for i in ids], [("r", 1)] * 3)  # one runs, two in line
        worker.stop()
        self.wait_for(
            "the jobs in line released",
            lambda: self.is_pending(ids[1]) and self.is_pending(ids[2]),
        )
        self.assertEqual(self.job_state(ids[0]), ("r", 1))
        go.set()
        self.assertTrue(worker.join(HANG))
        self.assertEqual(runs, [ids[0]])
        self.assertIsNone(self.job_state(ids[0]))  # completed
        claimed = self.admin.execute("SELECT id, attempt FROM pgq.claim('q', 10)").fetchall()
        self.assertEqual(claimed, [(ids[1], 1), (ids[2], 1)])  # the attempt was not counted

    def test_stop_cancels_a_claim_sleeping_in_the_server(self) -> None:
        worker = self.start_worker(lambda job: None, wait=timedelta(minutes=1))
        self.wait_for(
            "the claim sleeping in the server",
            lambda: self.scalar(
                "SELECT count(*) = 1 FROM pg_stat_activity"
                " WHERE application_name = 'pgq_cpp.py claim q'"
                "   AND state = 'active' AND wait_event_type = 'Extension'"
            ) is True,
        )
        asked = time.monotonic()
        worker.stop()
        self.assertTrue(worker.join(HANG))
        self.assertLess(time.monotonic() - asked, 5.0)  # not the minute the claim would sleep
        # Its connections are closed; a backend leaves pg_stat_activity a
        # moment after its client hung up.
        self.wait_for(
            "the worker's sessions gone",
            lambda: self.scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'pgq_cpp.py %%'"
            )
            == 0,
        )

    def test_a_cancelled_claim_is_claimed_again(self) -> None:
        # 57014 from pg_cancel_backend (or a statement_timeout, or a lock wait
        # cancelled while ALTER EXTENSION waits) is not a stop: the worker
        # claims again, after a short backoff, and runs what comes next.
        ran = threading.Event()
        worker = self.start_worker(lambda job: ran.set(), wait=timedelta(minutes=1))
        sleeping = (
            "SELECT pid FROM pg_stat_activity"
            " WHERE application_name = 'pgq_cpp.py claim q'"
            "   AND state = 'active' AND wait_event_type = 'Extension'"
            "   AND query_start > %s"
        )
        epoch = datetime(2000, 1, 1, tzinfo=timezone.utc)
        pid = self.wait_for("the claim sleeping in the server", lambda: self.admin.execute(sleeping, (epoch,)).fetchone())
        cancelled_at = self.scalar("SELECT clock_timestamp()")
        self.assertTrue(self.scalar("SELECT pg_cancel_backend(%s)", (pid[0],)))
        self.wait_for("a new claim", lambda: self.admin.execute(sleeping, (cancelled_at,)).fetchone())
        self.assertFalse(worker.join(0))  # still running
        job_id = Q.enqueue(self.admin, {"after": "cancel"})
        self.assertTrue(ran.wait(HANG))
        self.wait_for("the job completed", lambda: self.job_state(job_id) is None)

    def test_a_claim_that_returns_after_stop_gives_its_jobs_back(self) -> None:
        # The race of a stop() whose cancel reaches the server just after the
        # claim took jobs, made certain: stop() is called as the claim returns.
        ids = Q.enqueue_many(self.admin, [{"n": 1}, {"n": 2}])
        runs: list[int] = []
        worker = Worker(DSN, "q", lambda job: runs.append(job.id), concurrency=2, batch=2)
        claim = worker._claims.execute  # white box: the claimer's one statement

        def claim_then_stop(*args: Any) -> Any:
            rows = claim(*args)
            if rows:
                worker.stop()
            return rows

        worker._claims.execute = claim_then_stop  # type: ignore[method-assign]
        worker.start()
        self.assertTrue(worker.join(HANG))
        self.assertEqual(runs, [])
        self.assertEqual([self.job_state(i) for i in ids], [("p", 0)] * 2)
        claimed = self.admin.execute("SELECT id, attempt FROM pgq.claim('q', 10)").fetchall()
        self.assertEqual(claimed, [(ids[0], 1), (ids[1], 1)])  # the attempt was not counted

    def test_signals_stop_run_forever_gracefully(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR))
        for sig in (signal.SIGTERM, signal.SIGINT):
            with self.subTest(signal=sig.name):
                ids = Q.enqueue_many(self.admin, [{"n": 1}, {"n": 2}])
                proc = subprocess.Popen(
                    [sys.executable, "-c", WORKER_SCRIPT, DSN],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True, env=env,
                )
                assert proc.stdin and proc.stdout and proc.stderr
                self.addCleanup(proc.stdin.close)
                self.addCleanup(proc.stderr.close)
                self.addCleanup(proc.stdout.close)
                self.addCleanup(proc.wait)
                self.addCleanup(proc.kill)  # if the test failed before it exited
                lines: queue.Queue[str] = queue.Queue()
                threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True).start()

                self.assertEqual(lines.get(timeout=HANG), f"started {ids[0]}\n")
                proc.send_signal(sig)
                self.wait_for("the job in line released", lambda: self.is_pending(ids[1]))
                self.assertEqual(self.job_state(ids[0]), ("r", 1))  # still running
                proc.stdin.write("\n")  # let the handler finish
                proc.stdin.close()
                status, log = proc.wait(HANG), proc.stderr.read()
                self.assertEqual(status, 0, log)
                self.assertIn(f"{sig.name}: stopping", log)
                self.assertEqual(lines.get(timeout=HANG), "exited\n")
                self.assertIsNone(self.job_state(ids[0]))  # completed
                claimed = self.admin.execute("SELECT id, attempt FROM pgq.claim('q', 10)")
                self.assertEqual(claimed.fetchall(), [(ids[1], 1)])
                self.admin.execute("SELECT pgq.complete(%s, 1)", (ids[1],))
