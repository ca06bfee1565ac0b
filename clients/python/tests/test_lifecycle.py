"""The 1.2 job lifecycle in the worker: a handler's result, progress,
snooze, outcome unknown, and the cancel of a claimed job."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

from psycopg.conninfo import make_conninfo

from pgq_cpp import Job, OutcomeUnknown, Queue, Snooze
from support import DSN, HANG, PgqTestCase

Q = Queue("q")


class LifecycleTest(PgqTestCase):
    def test_the_handlers_return_value_is_the_jobs_result(self) -> None:
        self.admin.execute("SELECT pgq.create_queue('kept', keep_completed => '1 hour')")
        returns: dict[str, Any] = {
            "object": {"message_id": "m-1", "parts": [1, 2]},
            "string": "sent",
            "none": None,
            # Completed all the same, without a result: the work was done.
            "not json": {1, 2},
            "too large": {"blob": "x" * 300},
        }
        ids = {name: Queue("kept").enqueue(self.admin, {"returns": name}) for name in returns}
        # The worker's sessions accept no result over 200 bytes.
        small = make_conninfo(DSN, options="-c pgq.max_payload_bytes=200")
        with self.assertLogs("pgq_cpp", "WARNING") as logs:
            self.start_worker(
                lambda job: returns[job.payload["returns"]], queue="kept", conninfo=small
            )
            done = {name: self.wait_job(i, "done") for name, i in ids.items()}
        self.assertEqual(
            {name: row["result"] for name, row in done.items()},
            {"object": {"message_id": "m-1", "parts": [1, 2]}, "string": "sent", "none": None,
             "not json": None, "too large": None},
        )
        self.assertEqual({row["attempt"] for row in done.values()}, {1})
        self.assertEqual(len([m for m in logs.output if "not JSON" in m]), 1, logs.output)
        self.assertEqual(len([m for m in logs.output if "result refused" in m]), 1, logs.output)

    def test_progress_is_visible_while_the_handler_runs(self) -> None:
        job_id = Q.enqueue(self.admin, {})
        reported, go = threading.Event(), threading.Event()
        answers: list[bool] = []

        def handler(job: Job) -> None:
            answers.append(job.progress({"sent": 1, "of": 2}))
            answers.append(job.progress({"sent": 2, "of": 2}))  # replaces the first
            reported.set()
            go.wait(HANG)
            answers.append(job.progress({"sent": 3}))  # the claim is gone by now

        self.start_worker(handler)
        self.wait_for("the progress reported", reported.is_set)
        row = self.job_row(job_id)
        assert row is not None
        self.assertEqual((row["state"], row["progress"]), ("running", {"sent": 2, "of": 2}))
        # The claim is lost meanwhile (here someone fails the job for it):
        # progress is fenced by the attempt, as complete is.
        taken_over = "SELECT pgq.fail(%s, 1, 'taken over', retry_in => '1 hour')"
        self.assertEqual(self.scalar(taken_over, (job_id,)), "retry")
        with self.assertLogs("pgq_cpp", "WARNING") as logs:  # its complete, refused
            go.set()
            self.wait_for("the last progress", lambda: len(answers) == 3)
            # The refusal is logged after the handler returned: waited for
            # inside the block, or the block could end before it.
            self.wait_for("the refused completion logged", lambda: len(logs.records) > 0)
        self.assertEqual(answers, [True, True, False])

    def test_snooze_runs_the_job_again_later_without_spending_an_attempt(self) -> None:
        delay = timedelta(seconds=3)
        ids = Q.enqueue_many(self.admin, [{"snooze": "job.snooze"}, {"snooze": "raise"}])
        lock = threading.Lock()
        runs: dict[int, list[tuple[int, float]]] = {i: [] for i in ids}

        def handler(job: Job) -> None:
            with lock:
                runs[job.id].append((job.attempt, time.monotonic()))
                first = len(runs[job.id]) == 1
            if first:
                if job.payload["snooze"] == "job.snooze":
                    job.snooze(delay)
                raise Snooze(delay)

        self.start_worker(handler, concurrency=2)
        for job_id in ids:
            row = self.wait_job(job_id, "scheduled")
            self.assertGreater(row["run_at"], self.scalar("SELECT now()"))
            self.assertIsNone(row["last_error"])  # not a failure
        self.wait_for("both jobs done", lambda: self.live_jobs() == 0)
        for job_id in ids:
            with self.subTest(job=job_id):
                (first, snoozed_at), (second, ran_at) = runs[job_id]
                self.assertEqual((first, second), (1, 1))  # the same attempt again
                self.assertGreaterEqual(ran_at - snoozed_at, delay.total_seconds())
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.dead_jobs"), 0)

    def test_a_snooze_the_server_refuses_fails_the_attempt(self) -> None:
        refused = Q.enqueue(self.admin, {"years": 200}, max_attempts=1)
        fine = Q.enqueue(self.admin, {"years": 0})

        def handler(job: Job) -> None:
            if job.payload["years"]:
                job.snooze(timedelta(days=365 * job.payload["years"]))

        with self.assertLogs("pgq_cpp", "WARNING"):
            worker = self.start_worker(handler, concurrency=1)
            dead = self.wait_job(refused, "dead")
            self.wait_for("the next job done", lambda: self.job_state(fine) is None)
        self.assertIn("delay must be at most 100 years", dead["last_error"])
        worker.stop()
        self.assertTrue(worker.join(HANG))  # not stopped by an error

    def test_outcome_unknown_leaves_the_job_to_its_lease(self) -> None:
        # Were the job failed, it would be back in 10 ms; released, back at
        # once with the same attempt; still heartbeated, never back.
        self.admin.execute("SELECT pgq.alter_queue('q', backoff_base => '10 milliseconds')")
        job_id = Q.enqueue(self.admin, {})
        second_running, go = threading.Event(), threading.Event()
        attempts: list[int] = []

        def handler(job: Job) -> None:
            attempts.append(job.attempt)
            if job.attempt == 1:
                raise OutcomeUnknown("mail API timed out")
            second_running.set()
            go.wait(HANG)

        leases: list[datetime] = []  # lease_until of attempt 1, as sampled

        def claimed_again() -> dict[str, Any] | None:
            row = self.job_row(job_id)
            assert row is not None
            if row["attempt"] == 1:
                if row["state"] == "running":
                    leases.append(row["lease_until"])
                return None
            return row if row["state"] == "running" else None

        with self.assertLogs("pgq_cpp", "WARNING") as logs:
            self.start_worker(handler, lease=timedelta(seconds=2), concurrency=2)
            again = self.wait_for("the job claimed again", claimed_again)
            assert again is not None
            self.wait_for("the second attempt running", second_running.is_set)
        self.assertTrue(leases, "never saw the first attempt")
        self.assertGreaterEqual(again["claimed_at"], max(leases))  # not before its lease ended
        self.assertEqual(again["attempt"], 2)  # not released: that keeps the attempt
        self.assertEqual(again["last_error"], "lease expired")  # not failed by the worker
        unknown = [m for m in logs.output if "outcome unknown" in m]
        self.assertEqual(len(unknown), 1, logs.output)
        self.assertIn(f"job {job_id} attempt 1", unknown[0])
        self.assertFalse([m for m in logs.output if "failed (" in m], logs.output)
        go.set()
        self.wait_for("the job done", lambda: self.job_state(job_id) is None)
        self.assertEqual(attempts, [1, 2])

    def test_cancel_reaches_the_running_handler_within_a_heartbeat(self) -> None:
        lease = timedelta(seconds=3)  # a beat every second
        job_id = Q.enqueue(self.admin, {})
        started = threading.Event()
        told: list[tuple[bool, float]] = []

        def handler(job: Job) -> None:
            if job.id != job_id:
                return
            started.set()
            told.append((job.cancelled.wait(HANG), time.monotonic()))
            # What a handler interrupted mid-work may well do; the worker
            # must not try to fail the job for it.
            raise RuntimeError("interrupted")

        with self.assertLogs("pgq_cpp", "INFO") as logs:
            self.start_worker(handler, lease=lease, concurrency=1)
            self.wait_for("the job running", started.is_set)
            other = self.connect(autocommit=True)
            asked = time.monotonic()
            cancelled = other.execute("SELECT pgq.cancel(%s)", (job_id,)).fetchone()
            self.assertEqual(cancelled, (True,))
            self.wait_for("the handler's end logged", lambda: any(
                "which is not recorded" in m for m in logs.output))
            # The slot is free again: the next job runs.
            after = Q.enqueue(other, {})
            self.wait_for("the next job done", lambda: self.job_state(after) is None)
        [(fired, at)] = told
        self.assertTrue(fired)
        self.assertLess(at - asked, lease.total_seconds() / 3 + 1.0)  # one beat, two statements
        self.assertEqual(
            self.scalar("SELECT reason FROM pgq.dead_jobs WHERE id = %s", (job_id,)), "cancelled"
        )
        self.assertEqual(self.wait_job(job_id, "cancelled")["attempt"], 1)
        self.assertFalse(
            [m for m in logs.output if "failed (" in m or "lease" in m], logs.output
        )

    def test_a_job_cancelled_in_line_never_starts(self) -> None:
        running, waiting = Q.enqueue_many(self.admin, [{"n": 1}, {"n": 2}])
        started, go = threading.Event(), threading.Event()
        runs: list[int] = []

        def handler(job: Job) -> None:
            runs.append(job.id)
            started.set()
            go.wait(HANG)

        with self.assertLogs("pgq_cpp", "INFO") as logs:
            # One thread, two jobs per claim: the second waits in line.
            self.start_worker(handler, concurrency=1, batch=2, lease=timedelta(seconds=3))
            self.wait_for("the first job running", started.is_set)
            self.assertEqual(self.job_state(waiting), ("r", 1))
            self.assertTrue(self.scalar("SELECT pgq.cancel(%s)", (waiting,)))
            self.wait_for("the cancel seen by the heartbeat", lambda: any(
                f"job {waiting} attempt 1: cancelled" in m for m in logs.output))
            go.set()
            self.wait_for("the first job done", lambda: self.job_state(running) is None)
            self.wait_for("the second job passed over", lambda: any(
                "before its handler started" in m for m in logs.output))
        self.assertEqual(runs, [running])
