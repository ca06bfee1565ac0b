"""Worker: concurrency, exactly-once processing, failures and dead-letter,
heartbeats, wake-ups, lost connections and leases, rights."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

from psycopg import errors

from pgq_cpp import Job, Queue, Worker
from support import DSN, HANG, PgqTestCase

Q = Queue("q")


class WorkerTest(PgqTestCase):
    def claim_sleeping(self, seconds: float = 0) -> Any:
        """The worker's claim, while it sleeps in the server waiting for a
        job, once that one statement has been running ``seconds``."""
        return self.admin.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE application_name = 'pgq_cpp.py claim q' AND state = 'active'"
            "   AND wait_event_type = 'Extension' AND query LIKE '%%pgq.claim%%'"
            "   AND now() - query_start >= %s * interval '1 second'",
            (seconds,),
        ).fetchone()

    def done_recent(self) -> int:
        return int(self.scalar("SELECT done_recent FROM pgq.queue_stats WHERE queue = 'q'"))

    def wait_done_recent(self, count: int) -> None:
        """Waits for queue_stats.done_recent to be ``count``. Never read once
        and asserted: the server adds a completion to it just after the
        commit that deleted the job (so the row can be gone a moment before
        it is counted), and a maintenance flush can make it read off by the
        flushed count for a moment."""
        self.wait_for(f"done_recent = {count}", lambda: self.done_recent() == count)

    def test_each_job_runs_exactly_once_with_concurrency(self) -> None:
        jobs, concurrency = 40, 4
        ids = Q.enqueue_many(self.admin, [{"i": i} for i in range(jobs)])
        lock = threading.Lock()
        runs: list[tuple[int, int]] = []
        # The first `concurrency` handlers only return once all of them are
        # running at the same time.
        together = threading.Barrier(concurrency, timeout=HANG)

        def handler(job: Job) -> None:
            with lock:
                runs.append((job.id, job.attempt))
                first = len(runs) <= concurrency
            if first:
                together.wait()

        self.start_worker(handler, concurrency=concurrency, batch=3)
        self.wait_for(
            "every job done and counted",
            lambda: self.live_jobs() == 0 and self.done_recent() == jobs,
        )
        self.assertEqual(sorted(runs), [(i, 1) for i in ids])
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.dead_jobs"), 0)

    def test_failing_handler_is_retried_then_dead_lettered(self) -> None:
        self.admin.execute("SELECT pgq.alter_queue('q', backoff_base => '10 milliseconds')")
        job_id = Q.enqueue(self.admin, {"to": "ann@example.com"}, max_attempts=3)
        attempts: list[int] = []

        def handler(job: Job) -> None:
            attempts.append(job.attempt)
            raise RuntimeError(f"smtp down (attempt {job.attempt})")

        def outcomes() -> list[str]:
            return [m.split("failed (")[1].split(")")[0] for m in logs.output if "failed (" in m]

        with self.assertLogs("pgq_cpp", "WARNING") as logs:
            self.start_worker(handler)
            dead = self.wait_for(
                "the job in dead-letter",
                lambda: self.admin.execute(
                    "SELECT attempts, reason, last_error FROM pgq.dead_jobs WHERE id = %s",
                    (job_id,),
                ).fetchone(),
            )
            # The worker logs the outcome once pgq.fail has returned it: a
            # moment after its commit made the dead job visible here.
            self.wait_for("the third failure logged", lambda: len(outcomes()) == 3)
        self.assertEqual(dead, (3, "exhausted", "RuntimeError: smtp down (attempt 3)"))
        self.assertEqual(attempts, [1, 2, 3])
        self.assertIsNone(self.job_state(job_id))
        self.assertEqual(outcomes(), ["retry", "retry", "dead"])

    def test_a_handler_that_calls_sys_exit_fails_its_attempt(self) -> None:
        """SystemExit is not an Exception: the attempt is still failed at
        once (not left leased until its lease ends) and retried."""
        self.admin.execute("SELECT pgq.alter_queue('q', backoff_base => '10 milliseconds')")
        job_id = Q.enqueue(self.admin, {})
        attempts: list[int] = []

        def handler(job: Job) -> None:
            attempts.append(job.attempt)
            if job.attempt == 1:
                raise SystemExit(3)

        with self.assertLogs("pgq_cpp", "WARNING"):
            self.start_worker(handler, lease=timedelta(minutes=5))
            self.wait_for("the job done on its second attempt", lambda: self.live_jobs() == 0)
        self.assertEqual(attempts, [1, 2])
        self.assertIsNone(self.job_state(job_id))

    def test_heartbeat_keeps_a_long_job_from_being_redelivered(self) -> None:
        # Beats every lease / 3: the lease lapses only if a beat comes two
        # thirds of a lease (1.3 s) late.
        lease = timedelta(seconds=2)
        job_id = Q.enqueue(self.admin, {})
        started = threading.Event()
        first_runs: list[int] = []
        moved: list[timedelta] = []

        def outlives_its_lease(job: Job) -> None:
            first_runs.append(job.attempt)
            claimed_until = job.lease_until
            started.set()
            # The work: it runs until the heartbeat has moved the lease on by
            # one and a half leases, so well past the lease it was claimed
            # with (which maintenance would have expired without the beats).
            deadline = time.monotonic() + HANG
            while job.lease_until - claimed_until < lease * 1.5 and time.monotonic() < deadline:
                time.sleep(0.01)
            moved.append(job.lease_until - claimed_until)

        second_runs: list[int] = []
        first = self.start_worker(outlives_its_lease, lease=lease, concurrency=1)
        self.wait_for("the long job started", started.is_set)
        # A second worker claims from the same queue while the job runs; the
        # maintenance worker expires leases every second.
        second = self.start_worker(lambda job: second_runs.append(job.attempt), lease=lease)
        # What is left of the lease, sampled while the job runs, never runs out.
        left: list[timedelta] = []

        def sample_until_done() -> bool:
            row = self.admin.execute(
                "SELECT lease_until - pgq.clock() FROM pgq.jobs WHERE id = %s", (job_id,)
            ).fetchone()
            if row is not None:
                left.append(row[0])
            return row is None

        self.wait_for("the long job done", sample_until_done)
        for worker in (first, second):
            worker.stop()
            self.assertTrue(worker.join(HANG))
        self.assertEqual(first_runs, [1])
        self.assertEqual(second_runs, [])
        self.wait_done_recent(1)
        self.assertGreaterEqual(moved[0], lease * 1.5)
        self.assertTrue(left, "never saw the job running")
        self.assertGreater(min(left), timedelta(0))

    def test_waiting_claim_wakes_when_a_job_is_committed(self) -> None:
        handled = threading.Event()
        handled_at: list[float] = []

        def handler(job: Job) -> None:
            handled_at.append(time.monotonic())
            handled.set()

        self.start_worker(handler, wait=timedelta(minutes=1))
        producer = self.connect()
        for asleep in (1.0, 0, 0):
            # One claim statement, asleep in the server for a second already
            # the first time: the worker does not poll.
            self.wait_for("the claim asleep", lambda s=asleep: self.claim_sleeping(s))
            handled.clear()
            with producer.transaction():
                Q.enqueue(producer, {})
            committed = time.monotonic()
            self.assertTrue(handled.wait(HANG))
            # That claim returned with the job, not at the end of its minute.
            # (How soon a commit wakes it, milliseconds, is the server's to
            # test: test/python/test_concurrency.py, test_wait_wakes_on_commit.
            # A bound that tight here would fail on a loaded machine.)
            self.assertLess(handled_at[-1] - committed, 5.0)

    def test_worker_reconnects_after_losing_its_connections(self) -> None:
        runs: list[int] = []
        with self.assertLogs("pgq_cpp", "WARNING") as logs:
            self.start_worker(lambda job: runs.append(job.id))
            first = Q.enqueue(self.admin, {})
            self.wait_for("the first job done", lambda: self.job_state(first) is None)
            # Both connections are open now: the claim's and the control one
            # that completed the first job.
            pids = [
                row[0]
                for row in self.admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'pgq_cpp.py %%'"
                )
            ]
            self.assertEqual(len(pids), 2)
            self.admin.execute("SELECT pg_terminate_backend(p) FROM unnest(%s::int[]) p", (pids,))
            self.wait_for(
                "both backends gone",
                lambda: not self.scalar(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)
                ),
            )
            second = Q.enqueue(self.admin, {})
            self.wait_for("the second job done", lambda: self.job_state(second) is None)
        self.assertEqual(runs, [first, second])
        self.assertTrue(any("claim failed" in m for m in logs.output), logs.output)
        self.assertTrue(any("complete failed" in m for m in logs.output), logs.output)

    def test_lost_lease_is_logged_not_raised(self) -> None:
        taken, go = threading.Event(), threading.Event()
        runs: list[int] = []

        def handler(job: Job) -> None:
            runs.append(job.id)
            if len(runs) == 1:
                taken.set()
                go.wait(HANG)

        worker = self.start_worker(handler)
        lost = Q.enqueue(self.admin, {})
        self.wait_for("the job running", taken.is_set)
        # Meanwhile the claim is lost, as to an expiry and a newer claim: here
        # someone fails the job for it.
        taken_over = "SELECT pgq.fail(%s, 1, 'taken over', retry_in => '1 hour')"
        self.assertEqual(self.scalar(taken_over, (lost,)), "retry")
        with self.assertLogs("pgq_cpp", "WARNING") as logs:
            go.set()
            self.wait_for(
                "the complete refused", lambda: any("lease lost" in m for m in logs.output)
            )
        self.assertEqual(self.job_state(lost), ("p", 1))  # still waiting for its retry
        after = Q.enqueue(self.admin, {})
        self.wait_for("the next job done", lambda: self.job_state(after) is None)
        self.assertEqual(runs, [lost, after])
        worker.stop()
        self.assertTrue(worker.join(HANG))  # and no error

    def test_consume_grant_is_enough(self) -> None:
        consumer = self.create_role("pgq_py_consumer")
        self.admin.execute("SELECT pgq.grant('pgq_py_consumer', 'q', 'consume')")
        job_id = Q.enqueue(self.admin, {"n": 1})
        extended: list[bool] = []

        def handler(job: Job) -> None:
            # Runs until the heartbeat, as the consumer, has moved the lease.
            claimed_until, deadline = job.lease_until, time.monotonic() + HANG
            while job.lease_until == claimed_until and time.monotonic() < deadline:
                time.sleep(0.01)
            extended.append(job.lease_until > claimed_until)

        self.start_worker(handler, conninfo=consumer, lease=timedelta(seconds=2))
        self.wait_done_recent(1)
        self.assertIsNone(self.job_state(job_id))
        self.assertEqual(extended, [True])

    def test_settings_that_cannot_work_are_refused(self) -> None:
        for setting, value in (
            ("concurrency", 0),
            ("batch", 0),
            ("lease", timedelta(0)),
            ("wait", timedelta(0)),  # it would poll: claim, nothing, claim again
            ("wait", timedelta(seconds=-1)),
        ):
            with self.subTest(**{setting: value}):
                with self.assertRaises(ValueError):
                    Worker(DSN, "q", lambda job: None, **{setting: value})

    def test_server_errors_stop_the_worker_and_surface(self) -> None:
        stranger = self.create_role("pgq_py_stranger")
        for conninfo, queue, error, sqlstate in (
            (stranger, "q", errors.InsufficientPrivilege, "42501"),
            (stranger, "nope", errors.UndefinedObject, "42704"),
        ):
            with self.subTest(queue=queue):
                worker = self.start_worker(lambda job: None, conninfo=conninfo, queue=queue)
                with self.assertRaises(error) as raised:
                    worker.join(HANG)
                self.assertEqual(raised.exception.sqlstate, sqlstate)
