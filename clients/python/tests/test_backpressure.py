"""Backpressure (server 3.1): a queue's max_pending refuses producers whole
(QueueFull, 53400); Queue.wait_for_room sleeps until completions take the
queue below its low-water mark; enqueue(wait_for_room=...) waits and tries
again, but only where the client owns the transaction."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, Generic, TypeVar

import psycopg
from psycopg import errors
from psycopg.pq import TransactionStatus

from pgq_cpp import Queue, QueueFull
from support import HANG, PgqTestCase

BOUNDED = Queue("bounded")  # max_pending 3
PLAIN = Queue("q")  # no max_pending
# Long enough that a call still waiting when a test wants it done is a hang.
LONG = 3 * HANG

T = TypeVar("T")


class Background(Generic[T]):
    """``fn()`` in a thread: its value or its exception, and whether
    ``mark`` was already set when it returned (the order of its return and
    the moment the test set the mark)."""

    def __init__(self, fn: Callable[[], T], mark: threading.Event) -> None:
        self._fn, self._mark = fn, mark
        self.value: T | None = None
        self.error: BaseException | None = None
        self.mark_was_set: bool | None = None
        # A daemon: one still waiting in the server when a test fails ends
        # when its session is cancelled and closed (BackpressureTest.session).
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.value = self._fn()
        except BaseException as exc:
            self.error = exc
        finally:
            self.mark_was_set = self._mark.is_set()

    def result(self, timeout: float = HANG) -> T | None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"still running after {timeout} s")
        if self.error is not None:
            raise self.error
        return self.value


class BackpressureTest(PgqTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.admin.execute("SELECT pgq.create_queue('bounded', max_pending => 3)")

    # -- helpers ----------------------------------------------------------

    def unfinished(self, queue: str = "bounded") -> int:
        """The queue's jobs not finished (scheduled, waiting, ready, running),
        as another session sees them."""
        return int(
            self.scalar(
                "SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)"
                " WHERE q.name = %s",
                (queue,),
            )
        )

    def fill(self, queue: Queue = BOUNDED, n: int = 3) -> list[int]:
        ids = queue.enqueue_many(self.admin, [{"n": i} for i in range(n)])
        self.assertEqual(self.unfinished(queue.name), n)
        return ids

    def session(self, name: str, **kwargs: Any) -> psycopg.Connection[Any]:
        """A connection named ``name`` in pg_stat_activity; a statement it
        still runs at the end of the test is cancelled before it closes."""
        conn = self.connect(application_name=name, **kwargs)
        self.addCleanup(conn.cancel)
        return conn

    def sleeping_in_wait_for_room(self, name: str) -> bool:
        """Whether the session ``name`` runs pgq.wait_for_room and the server
        has it waiting (on its latch), not working."""
        return bool(
            self.scalar(
                "SELECT count(*) = 1 FROM pg_stat_activity"
                " WHERE application_name = %s AND state = 'active'"
                "   AND query LIKE '%%wait_for_room%%' AND wait_event IS NOT NULL",
                (name,),
            )
        )

    def complete(self, conn: psycopg.Connection[Any], n: int, queue: str = "bounded") -> None:
        """Claims and completes ``n`` jobs of ``queue`` on ``conn``, in its
        transaction (not committed here)."""
        done = conn.execute(
            "SELECT pgq.complete(c.id, c.attempt) FROM pgq.claim(%s, %s) c", (queue, n)
        ).fetchall()
        self.assertEqual(done, [(True,)] * n)

    # -- refusals ---------------------------------------------------------

    def test_a_full_queue_refuses_the_whole_call(self) -> None:
        conn = self.connect(autocommit=True)
        self.assertEqual(
            self.scalar("SELECT max_pending FROM pgq.queue_settings('bounded')"), 3
        )
        BOUNDED.enqueue_many(conn, [{"n": 1}, {"n": 2}])
        # Two more do not fit in the one place left: neither is added.
        with self.assertRaises(QueueFull) as many:
            BOUNDED.enqueue_many(conn, [{"n": 3}, {"n": 4}])
        self.assertEqual(many.exception.queue, "bounded")
        self.assertEqual(
            many.exception.detail,
            "It holds 2 unfinished jobs of its max_pending 3; this call adds 2.",
        )
        self.assertEqual(self.unfinished(), 2)

        BOUNDED.enqueue(conn, {"n": 3})
        with self.assertRaises(QueueFull) as one:
            BOUNDED.enqueue(conn, {"n": 4})
        full = one.exception
        self.assertEqual(full.queue, "bounded")
        self.assertEqual(full.sqlstate, "53400")
        self.assertEqual(str(full), 'queue "bounded" is full')
        self.assertEqual(
            full.detail, "It holds 3 unfinished jobs of its max_pending 3; this call adds 1."
        )
        self.assertIn("pgq.wait_for_room", full.hint or "")
        self.assertIsInstance(full.__cause__, errors.ConfigurationLimitExceeded)
        assert isinstance(full.__cause__, psycopg.Error)
        self.assertEqual(full.__cause__.sqlstate, "53400")
        self.assertEqual(self.unfinished(), 3)
        self.assertEqual(
            [r[0] for r in self.admin.execute("SELECT payload->>'n' FROM pgq.jobs ORDER BY id")],
            ["1", "2", "3"],
        )
        # Other queues are not limited by it.
        PLAIN.enqueue_many(conn, [{}] * 5)
        self.assertEqual(self.unfinished("q"), 5)

    def test_a_refusal_aborts_the_callers_transaction(self) -> None:
        self.fill()
        conn = self.connect()
        plain = PLAIN.enqueue(conn, {"caller's": "work"})
        with self.assertRaises(QueueFull):
            BOUNDED.enqueue(conn, {})
        self.assertEqual(conn.info.transaction_status, TransactionStatus.INERROR)
        conn.rollback()
        self.assertIsNone(self.job_row(plain))
        self.assertEqual(self.unfinished(), 3)

    def test_scheduled_waiting_and_running_jobs_count(self) -> None:
        conn = self.connect(autocommit=True)
        running = BOUNDED.enqueue(conn, {"state": "running"})
        self.assertEqual(self.scalar("SELECT id FROM pgq.claim('bounded', 1)"), running)
        later = datetime.now(timezone.utc) + timedelta(hours=1)
        scheduled = BOUNDED.enqueue(conn, {"state": "scheduled"}, run_at=later)
        waiting = BOUNDED.enqueue(conn, {"state": "waiting"}, after=[scheduled])
        self.assertEqual(
            [self.job_row(i)["state"] for i in (running, scheduled, waiting)],  # type: ignore
            ["running", "scheduled", "waiting"],
        )
        with self.assertRaises(QueueFull):
            BOUNDED.enqueue(conn, {})
        self.assertFalse(BOUNDED.wait_for_room(conn))
        # A finished job no longer counts.
        self.assertTrue(self.scalar("SELECT pgq.complete(%s, 1)", (running,)))
        BOUNDED.enqueue(conn, {"state": "ready"})
        self.assertEqual(self.unfinished(), 3)

    def test_alter_queue_sets_and_removes_max_pending(self) -> None:
        conn = self.connect(autocommit=True)
        self.admin.execute("SELECT pgq.alter_queue('q', max_pending => 2)")
        PLAIN.enqueue_many(conn, [{}, {}])
        with self.assertRaises(QueueFull) as full:
            PLAIN.enqueue(conn, {})
        self.assertEqual(full.exception.queue, "q")
        self.admin.execute("SELECT pgq.alter_queue('q', max_pending => 0)")
        self.assertIsNone(self.scalar("SELECT max_pending FROM pgq.queue_settings('q')"))
        PLAIN.enqueue_many(conn, [{}] * 3)
        self.assertEqual(self.unfinished("q"), 5)
        started = time.monotonic()
        self.assertTrue(PLAIN.wait_for_room(conn, LONG))  # no max_pending: at once
        self.assertLess(time.monotonic() - started, HANG)

    # -- wait_for_room ----------------------------------------------------

    def test_wait_for_room_answers_false_after_its_timeout_while_full(self) -> None:
        self.fill()
        conn = self.connect(autocommit=True)
        self.assertFalse(BOUNDED.wait_for_room(conn))  # no wait: at once
        started = time.monotonic()
        self.assertFalse(BOUNDED.wait_for_room(conn, 0.3))
        self.assertGreaterEqual(time.monotonic() - started, 0.25)
        self.assertEqual(self.unfinished(), 3)

    def test_the_low_water_mark_is_nine_tenths(self) -> None:
        self.admin.execute("SELECT pgq.create_queue('ten', max_pending => 10)")
        ten = Queue("ten")
        self.fill(ten, 10)
        conn = self.connect(autocommit=True)
        self.assertFalse(ten.wait_for_room(conn))
        self.complete(self.admin, 1, "ten")  # 9: room for one, but not below 9
        self.assertFalse(ten.wait_for_room(conn))
        ten.enqueue(conn, {})
        with self.assertRaises(QueueFull):
            ten.enqueue(conn, {})
        self.complete(self.admin, 2, "ten")  # 8
        self.assertTrue(ten.wait_for_room(conn))
        self.assertEqual(self.unfinished("ten"), 8)

    def test_a_waiter_wakes_when_a_completion_commits(self) -> None:
        self.fill()
        waiter = self.session("pgq_py_waiter", autocommit=True)
        committing = threading.Event()
        wait = Background(lambda: BOUNDED.wait_for_room(waiter, LONG), committing)
        self.wait_for(
            "the waiter asleep in the server",
            lambda: self.sleeping_in_wait_for_room("pgq_py_waiter"),
        )
        worker = self.connect()  # a transaction until commit
        self.complete(worker, 1)  # 2 of 3 once committed: below the mark (3)
        self.assertTrue(wait.thread.is_alive(), "woken by a completion not committed")
        committing.set()
        worker.commit()
        self.assertIs(wait.result(), True)
        self.assertTrue(wait.mark_was_set, "returned before the completion committed")
        self.assertEqual(self.unfinished(), 2)

    def test_wait_for_room_needs_a_right_on_a_known_queue(self) -> None:
        self.fill()
        stranger = self.connect(self.create_role("pgq_py_bp_stranger"), autocommit=True)
        with self.assertRaises(errors.InsufficientPrivilege):
            BOUNDED.wait_for_room(stranger)
        self.admin.execute("SELECT pgq.grant('pgq_py_bp_stranger', 'bounded', 'produce')")
        self.assertFalse(BOUNDED.wait_for_room(stranger))
        with self.assertRaises(errors.UndefinedObject):
            Queue("nope").wait_for_room(stranger)

    # -- enqueue(wait_for_room=...) ---------------------------------------

    def test_enqueue_waits_for_room_on_an_autocommit_connection(self) -> None:
        self.fill()
        producer = self.session("pgq_py_producer", autocommit=True)
        committing = threading.Event()
        call = Background(
            lambda: BOUNDED.enqueue(producer, {"n": "late"}, wait_for_room=LONG), committing
        )
        self.wait_for(
            "the producer refused, then waiting for room",
            lambda: self.sleeping_in_wait_for_room("pgq_py_producer"),
        )
        worker = self.connect()
        self.complete(worker, 1)
        committing.set()
        worker.commit()
        job = call.result()
        self.assertTrue(call.mark_was_set, "enqueued before the completion committed")
        assert job is not None
        self.assertEqual(self.job_row(job)["payload"], {"n": "late"})  # type: ignore[index]
        self.assertEqual(self.unfinished(), 3)

    def test_enqueue_many_waits_in_a_transaction_it_began(self) -> None:
        self.fill()
        # Not autocommit and in no transaction: the client's statement begins
        # one, rolled back after the refusal; the jobs of the try that works
        # wait in the open transaction for the caller's commit.
        producer = self.session("pgq_py_producer")
        committing = threading.Event()
        call = Background(
            lambda: BOUNDED.enqueue_many(producer, [{"n": "a"}], wait_for_room=LONG), committing
        )
        self.wait_for(
            "the producer refused, then waiting for room",
            lambda: self.sleeping_in_wait_for_room("pgq_py_producer"),
        )
        worker = self.connect()
        self.complete(worker, 1)
        committing.set()
        worker.commit()
        ids = call.result()
        self.assertTrue(call.mark_was_set)
        assert ids is not None
        self.assertEqual(len(ids), 1)
        self.assertEqual(producer.info.transaction_status, TransactionStatus.INTRANS)
        self.assertIsNone(self.job_row(ids[0]), "committed by the client")
        self.assertEqual(self.unfinished(), 2)
        producer.commit()
        self.assertEqual(self.unfinished(), 3)

    def test_enqueue_raises_queue_full_when_the_wait_ends_without_room(self) -> None:
        self.fill()
        conn = self.connect(autocommit=True)
        with self.assertRaises(QueueFull) as at_once:
            BOUNDED.enqueue(conn, {}, wait_for_room=0)
        self.assertEqual(at_once.exception.queue, "bounded")
        started = time.monotonic()
        with self.assertRaises(QueueFull) as waited:
            BOUNDED.enqueue_many(conn, [{}, {}], wait_for_room=0.3)
        self.assertGreaterEqual(time.monotonic() - started, 0.25)
        self.assertEqual(waited.exception.queue, "bounded")
        self.assertIsInstance(waited.exception.__cause__, errors.ConfigurationLimitExceeded)
        self.assertEqual(self.unfinished(), 3)
        with self.assertRaises(ValueError):
            BOUNDED.enqueue(conn, {}, wait_for_room=-1)

    def test_no_retry_in_the_callers_transaction(self) -> None:
        self.fill()
        # Not autocommit, with the caller's work already in the transaction.
        conn = self.connect()
        plain = PLAIN.enqueue(conn, {"caller's": "work"})
        started = time.monotonic()
        with self.assertRaises(QueueFull):
            BOUNDED.enqueue(conn, {}, wait_for_room=HANG)
        self.assertLess(time.monotonic() - started, HANG / 2, "it waited")
        # Aborted, not rolled back behind the caller's back.
        self.assertEqual(conn.info.transaction_status, TransactionStatus.INERROR)
        conn.rollback()
        self.assertIsNone(self.job_row(plain))

        # Autocommit, in the caller's `with conn.transaction()`.
        auto = self.connect(autocommit=True)
        started = time.monotonic()
        with self.assertRaises(QueueFull), auto.transaction():
            PLAIN.enqueue(auto, {"caller's": "work"})
            BOUNDED.enqueue_many(auto, [{}], wait_for_room=HANG)
        self.assertLess(time.monotonic() - started, HANG / 2, "it waited")
        self.assertEqual(self.unfinished("q"), 0)
        self.assertEqual(self.unfinished(), 3)
