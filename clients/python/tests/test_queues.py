"""Worker over several queues: one claim (pgq.claim(queues text[], ...))
across them, each Job telling its queue; rights on every queue; the list
checked before any connection."""

from __future__ import annotations

import threading
from datetime import timedelta

from psycopg import errors

from pgq_cpp import Job, Queue, Worker
from support import DSN, HANG, PgqTestCase

Q, OTHER = Queue("q"), Queue("other")


class SeveralQueuesTest(PgqTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.admin.execute("SELECT pgq.create_queue('other')")

    def application_names(self) -> list[str]:
        return [
            row[0]
            for row in self.admin.execute(
                "SELECT application_name FROM pg_stat_activity"
                " WHERE application_name LIKE 'pgq_cpp.py %%' ORDER BY 1"
            )
        ]

    def test_one_worker_runs_the_jobs_of_both_queues(self) -> None:
        # In line before the worker starts, by priority across the queues.
        first = Q.enqueue_many(self.admin, [{"n": 1}, {"n": 2}], priority=1)
        urgent = OTHER.enqueue(self.admin, {"n": 3}, priority=9)
        last = OTHER.enqueue(self.admin, {"n": 4})
        lock = threading.Lock()
        runs: list[tuple[int, str, object]] = []

        def handler(job: Job) -> dict[str, str]:
            with lock:
                runs.append((job.id, job.queue, job.payload))
            return {"from": job.queue}

        # One thread, and a batch that takes all four in one claim: they run
        # in the order that claim returned them.
        worker = self.start_worker(
            handler, queue=["q", OTHER], concurrency=1, batch=10, wait=timedelta(seconds=2)
        )
        self.assertIsNone(worker.queue)
        self.assertEqual(worker.queues, ("q", "other"))
        self.wait_for("the four jobs done", lambda: self.live_jobs() == 0 and len(runs) == 4)
        self.assertEqual(
            runs,
            [(urgent, "other", {"n": 3}), (first[0], "q", {"n": 1}), (first[1], "q", {"n": 2}),
             (last, "other", {"n": 4})],
        )
        # A job committed later, to either queue, wakes the same claim.
        self.wait_for(
            "both connections open, under short names",
            lambda: self.application_names()
            == ["pgq_cpp.py claim q,other", "pgq_cpp.py control q,other"],
        )
        woken = [Q.enqueue(self.admin, {"n": 5}), OTHER.enqueue(self.admin, {"n": 6})]
        self.wait_for("the later jobs done", lambda: len(runs) == 6)
        self.assertEqual(sorted((r[0], r[1]) for r in runs[4:]), [(woken[0], "q"), (woken[1], "other")])
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.dead_jobs"), 0)
        worker.stop()
        self.assertTrue(worker.join(HANG))

    def test_a_list_of_one_is_that_queue(self) -> None:
        worker = Worker(DSN, [Q], lambda job: None)
        self.assertEqual((worker.queue, worker.queues), ("q", ("q",)))
        self.assertEqual(Worker(DSN, Q, lambda job: None).queues, ("q",))
        ran = threading.Event()
        self.start_worker(lambda job: ran.set(), queue=("q",))
        Q.enqueue(self.admin, {})
        self.assertTrue(ran.wait(HANG))
        self.assertIn("pgq_cpp.py claim q", self.application_names())

    def test_many_queues_keep_short_connection_and_thread_names(self) -> None:
        names = [f"queue_number_{i}" for i in range(5)]
        for name in names:
            self.admin.execute("SELECT pgq.create_queue(%s)", (name,))
        ran: list[str] = []

        def handler(job: Job) -> None:
            ran.append(threading.current_thread().name)

        self.start_worker(handler, queue=names)
        Queue(names[4]).enqueue(self.admin, {})
        self.wait_for("the job done", lambda: ran and self.live_jobs() == 0)
        self.assertTrue(ran[0].startswith("pgq-queue_number_0+4 more"), ran)
        self.wait_for(
            "both connections open, under short names",
            lambda: self.application_names()
            == ["pgq_cpp.py claim queue_number_0+4 more",
                "pgq_cpp.py control queue_number_0+4 more"],
        )

    def test_a_queue_without_the_consume_right_stops_the_worker(self) -> None:
        consumer = self.create_role("pgq_py_consumer")
        self.admin.execute("SELECT pgq.grant('pgq_py_consumer', 'q', 'consume')")
        job_id = Q.enqueue(self.admin, {})
        OTHER.enqueue(self.admin, {})
        ran: list[int] = []
        for queues, error, sqlstate in (
            (["q", "other"], errors.InsufficientPrivilege, "42501"),  # no right on 'other'
            (["q", "nope"], errors.UndefinedObject, "42704"),
        ):
            with self.subTest(queues=queues):
                with self.assertLogs("pgq_cpp", "ERROR") as logs:
                    worker = self.start_worker(ran.append, conninfo=consumer, queue=queues)
                    with self.assertRaises(error) as raised:
                        worker.join(HANG)
                self.assertEqual(raised.exception.sqlstate, sqlstate)
                self.assertIn(f"worker of queues 'q', '{queues[1]}' stops", logs.output[0])
        # The claim was refused as a whole: nothing taken, not even from 'q'.
        self.assertEqual(ran, [])
        self.assertEqual(self.job_state(job_id), ("p", 0))
        # With the right on both, the same role runs both.
        self.admin.execute("SELECT pgq.grant('pgq_py_consumer', 'other', 'consume')")
        self.start_worker(ran.append, conninfo=consumer, queue=["q", "other"])
        self.wait_for("both jobs done", lambda: self.live_jobs() == 0)

    def test_a_bad_list_is_refused_before_connecting(self) -> None:
        nowhere = "host=/nonexistent port=1 connect_timeout=1"
        for queues, error in (
            ([], ValueError),
            ((), ValueError),
            (["q", "q"], ValueError),
            (["q", Queue("other"), Queue("q")], ValueError),
            ([1], TypeError),
            (7, TypeError),
        ):
            with self.subTest(queues=queues):
                with self.assertRaises(error):
                    Worker(nowhere, queues, lambda job: None)  # type: ignore[arg-type]
