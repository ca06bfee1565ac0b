"""enqueue(after=...) and enqueue_many(after=...): a job waits ('waiting',
open_parents) until its parents are done, runs after them, and goes to
dead-letter with reason dependency_failed when one dies; the server's
refusals reach the caller with their SQLSTATE."""

from __future__ import annotations

import threading
import time
from typing import Any

from psycopg import errors
from psycopg.pq import TransactionStatus

from pgq_cpp import Job, Queue, job
from support import HANG, PgqTestCase

Q, OTHER = Queue("q"), Queue("other")


class DependenciesTest(PgqTestCase):
    def setUp(self) -> None:
        super().setUp()
        # Done parents stay visible in pgq.job (state 'done').
        self.admin.execute("SELECT pgq.alter_queue('q', keep_completed => '1 hour')")
        self.admin.execute("SELECT pgq.create_queue('other')")

    def parents_left(self, job_id: int) -> tuple[str, int | None]:
        info = job(self.admin, job_id)
        assert info is not None
        return info.state, info.open_parents

    def test_a_child_waits_for_its_parent_and_runs_after_it(self) -> None:
        conn = self.connect()
        with conn.transaction():  # parent and child in one transaction
            parent = Q.enqueue(conn, {"step": "render"})
            child = OTHER.enqueue(conn, {"step": "send"}, after=[parent])
        self.assertEqual(self.parents_left(child), ("waiting", 1))
        self.assertEqual(self.parents_left(parent), ("ready", None))

        parent_running, go = threading.Event(), threading.Event()
        lock = threading.Lock()
        events: list[tuple[str, int, str]] = []
        looker = self.connect(autocommit=True)  # only the child's handler uses it

        def handler(job: Job) -> None:
            if job.id == parent:
                parent_running.set()
                go.wait(HANG)
                seen = "running"
            else:
                row = looker.execute("SELECT state FROM pgq.job(%s)", (parent,)).fetchone()
                seen = row[0] if row else "gone"
            with lock:
                events.append((job.queue, job.id, seen))

        # Room for both at once: only the dependency keeps the child back.
        self.start_worker(handler, queue=["q", "other"], concurrency=4, batch=4)
        self.assertTrue(parent_running.wait(HANG))
        time.sleep(0.2)  # a claim that could take the child has had its chance
        self.assertEqual(self.parents_left(child), ("waiting", 1))
        go.set()
        self.wait_for("the child done", lambda: len(events) == 2 and self.live_jobs() == 0)
        # The child's handler ran once its parent was done.
        self.assertEqual(events, [("q", parent, "running"), ("other", child, "done")])
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.dead_jobs"), 0)

    def test_enqueue_many_children_wait_for_every_parent(self) -> None:
        parents = Q.enqueue_many(self.admin, [{"p": 1}, {"p": 2}])
        children = OTHER.enqueue_many(self.admin, [{"c": 1}, {"c": 2}], after=parents)
        ready = Q.enqueue(self.admin, {"no": "parents"}, after=[])  # empty: none
        self.assertEqual(self.parents_left(ready), ("ready", None))
        self.assertEqual([self.parents_left(c) for c in children], [("waiting", 2)] * 2)

        def claim(queues: list[str]) -> list[tuple[Any, ...]]:
            return self.admin.execute(
                "SELECT id, attempt FROM pgq.claim(%s::text[], 10)", (queues,)
            ).fetchall()

        self.assertEqual(claim(["q", "other"]), [(parents[0], 1), (parents[1], 1), (ready, 1)])
        self.assertTrue(self.scalar("SELECT pgq.complete(%s, 1)", (parents[0],)))
        self.assertEqual([self.parents_left(c) for c in children], [("waiting", 1)] * 2)
        self.assertEqual(claim(["other"]), [])
        self.assertTrue(self.scalar("SELECT pgq.complete(%s, 1)", (parents[1],)))
        self.assertEqual([self.parents_left(c) for c in children], [("ready", None)] * 2)
        self.assertEqual(claim(["other"]), [(children[0], 1), (children[1], 1)])

    def test_a_dead_parent_takes_its_dependents_to_dead_letter(self) -> None:
        parent = Q.enqueue(self.admin, {"step": "render"}, max_attempts=1)
        child = OTHER.enqueue(self.admin, {"step": "send"}, after=[parent])
        grandchild = OTHER.enqueue(self.admin, {"step": "archive"}, after=[child])
        ran: list[int] = []

        def handler(job: Job) -> None:
            ran.append(job.id)
            raise RuntimeError("template missing")

        with self.assertLogs("pgq_cpp", "WARNING") as logs:
            self.start_worker(handler, queue=["q", "other"])
            self.wait_for(
                "all three in dead-letter",
                lambda: self.scalar("SELECT count(*) FROM pgq.dead_jobs") == 3,
            )
            # The failure is logged after pgq.fail committed: waited for
            # inside the block, or the block could end before it; on the
            # output, which the handler fills after the records (a wait on
            # the records saw one whose text was not there yet).
            self.wait_for("the failure logged", lambda: len(logs.output) > 0)
        self.assertIn(f"job {parent} attempt 1/1 failed (dead)", logs.output[0])
        dead = self.admin.execute(
            "SELECT id, reason, last_error FROM pgq.dead_jobs ORDER BY id"
        ).fetchall()
        self.assertEqual(
            dead,
            [(parent, "exhausted", "RuntimeError: template missing"),
             (child, "dependency_failed", f"parent job {parent} did not complete"),
             (grandchild, "dependency_failed", f"parent job {child} did not complete")],
        )
        self.assertEqual(ran, [parent])  # the dependents never ran
        info = job(self.admin, child)
        assert info is not None
        self.assertEqual((info.state, info.open_parents), ("dead", None))

    def test_a_cancelled_parent_takes_its_child_to_dead_letter(self) -> None:
        parent = Q.enqueue(self.admin, {})
        child = OTHER.enqueue(self.admin, {}, after=[parent])
        self.assertTrue(self.scalar("SELECT pgq.cancel(%s)", (parent,)))
        row = self.wait_job(child, "dead")
        self.assertEqual(row["last_error"], f"parent job {parent} did not complete")
        reason = "SELECT reason FROM pgq.dead_jobs WHERE id = %s"
        self.assertEqual(self.scalar(reason, (child,)), "dependency_failed")

    def test_refusals_carry_their_sqlstate(self) -> None:
        parent = Q.enqueue(self.admin, {})
        dead = Q.enqueue(self.admin, {})
        self.assertTrue(self.scalar("SELECT pgq.cancel(%s)", (dead,)))
        conn = self.connect()
        for call, error, sqlstate in (
            (lambda: OTHER.enqueue(conn, {}, after=[parent + 1000]),
             errors.ForeignKeyViolation, "23503"),
            (lambda: OTHER.enqueue_many(conn, [{}], after=[parent, parent + 1000]),
             errors.ForeignKeyViolation, "23503"),
            (lambda: OTHER.enqueue(conn, {}, after=[dead]),
             errors.ObjectNotInPrerequisiteState, "55000"),
            (lambda: OTHER.enqueue(conn, {}, after=[parent, None]),  # type: ignore[list-item]
             errors.NullValueNotAllowed, "22004"),
            (lambda: OTHER.enqueue(conn, {}, dedupe_key="k", on_duplicate="replace",
                                   after=[parent]),
             errors.FeatureNotSupported, "0A000"),
        ):
            with self.subTest(sqlstate=sqlstate):
                with self.assertRaises(error) as raised:
                    call()
                self.assertEqual(raised.exception.sqlstate, sqlstate)
                self.assertEqual(conn.info.transaction_status, TransactionStatus.INERROR)
                conn.rollback()
        # A parent on a queue the producer has no right on is as unknown.
        producer = self.connect(self.create_role("pgq_py_producer"))
        self.admin.execute("SELECT pgq.grant('pgq_py_producer', 'other', 'produce')")
        with self.assertRaises(errors.ForeignKeyViolation):
            OTHER.enqueue(producer, {}, after=[parent])
        producer.rollback()
        self.assertEqual(self.live_jobs(), 1)  # only the parent
        # Mistakes the client catches itself.
        for after in (parent, str(parent)):
            with self.subTest(after=after), self.assertRaises(TypeError):
                OTHER.enqueue(conn, {}, after=after)  # type: ignore[arg-type]
