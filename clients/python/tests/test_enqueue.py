"""Queue.enqueue and enqueue_many run in the caller's transaction and never
commit it; server errors reach the caller as psycopg errors."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from psycopg import errors
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from pgq_cpp import Queue
from support import PgqTestCase

EMAILS = Queue("q")


class EnqueueTest(PgqTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.admin.execute("DROP TABLE IF EXISTS signups")
        self.admin.execute("CREATE TABLE signups (email text PRIMARY KEY)")

    def jobs(self) -> list[tuple[Any, ...]]:
        """Every live job, as another session sees it."""
        return self.admin.execute("SELECT id, payload FROM pgq.jobs ORDER BY id").fetchall()

    def test_rolled_back_transaction_leaves_no_job(self) -> None:
        conn = self.connect()  # psycopg's default: a transaction until commit/rollback
        conn.execute("INSERT INTO signups VALUES ('ann@example.com')")
        EMAILS.enqueue(conn, {"to": "ann@example.com"})
        EMAILS.enqueue_many(conn, [{"n": 1}, {"n": 2}])
        self.assertEqual(conn.info.transaction_status, TransactionStatus.INTRANS)
        self.assertEqual(self.jobs(), [], "visible before the commit")
        conn.rollback()
        self.assertEqual(self.jobs(), [])
        self.assertEqual(self.scalar("SELECT count(*) FROM signups"), 0)
        self.assertEqual(self.admin.execute("SELECT * FROM pgq.claim('q', 10)").fetchall(), [])

    def test_committed_transaction_makes_the_jobs(self) -> None:
        conn = self.connect()
        with conn.transaction():
            conn.execute("INSERT INTO signups VALUES ('ann@example.com')")
            first = EMAILS.enqueue(conn, {"to": "ann@example.com"})
            # Through a cursor with the caller's own row factory and result.
            with conn.cursor(row_factory=dict_row) as cur:
                cur.execute("SELECT 1 AS one")
                second = EMAILS.enqueue(cur, {"to": "bob@example.com"})
                self.assertEqual(cur.fetchone(), {"one": 1})
            self.assertEqual(self.jobs(), [], "visible before the commit")
        self.assertEqual(
            self.jobs(), [(first, {"to": "ann@example.com"}), (second, {"to": "bob@example.com"})]
        )
        self.assertEqual(self.scalar("SELECT count(*) FROM signups"), 1)

    def test_arguments_reach_the_server(self) -> None:
        conn = self.connect(autocommit=True)
        later = datetime.now(timezone.utc) + timedelta(hours=1)
        scheduled = EMAILS.enqueue(conn, {"n": "later"}, run_at=later)
        low = EMAILS.enqueue(conn, {"n": "low"})
        high = EMAILS.enqueue(conn, {"n": "high"}, priority=5, max_attempts=2, group_key="g")
        keyed = EMAILS.enqueue(conn, {"n": "keyed"}, dedupe_key="k")
        self.assertEqual(EMAILS.enqueue(conn, {"n": "again"}, dedupe_key="k"), keyed)
        stored = self.admin.execute(
            "SELECT id, priority, max_attempts, group_key, dedupe_key FROM pgq.jobs ORDER BY id"
        ).fetchall()
        self.assertEqual(
            stored,
            [(scheduled, 0, 5, None, None), (low, 0, 5, None, None), (high, 5, 2, "g", None),
             (keyed, 0, 5, None, "k")],
        )
        run_at = self.scalar("SELECT run_at FROM pgq.jobs WHERE id = %s", (scheduled,))
        self.assertEqual(run_at, later)
        claimed = self.admin.execute("SELECT id FROM pgq.claim('q', 10)").fetchall()
        self.assertEqual(claimed, [(high,), (low,), (keyed,)])  # priority first; not the later one

    def test_dedupe_for_keeps_the_key_taken_after_the_job_finished(self) -> None:
        conn = self.connect(autocommit=True)
        daily = EMAILS.enqueue(conn, {"n": 1}, dedupe_key="daily", dedupe_for=timedelta(hours=1))
        plain = EMAILS.enqueue(conn, {"n": 1}, dedupe_key="plain")
        finished = self.admin.execute(
            "SELECT c.id, pgq.complete(c.id, c.attempt) FROM pgq.claim('q', 10) c ORDER BY c.id"
        ).fetchall()
        self.assertEqual(finished, [(daily, True), (plain, True)])
        self.assertEqual(self.jobs(), [])
        # Within the hour: the finished holder's id, and nothing added.
        self.assertEqual(EMAILS.enqueue(conn, {"n": 2}, dedupe_key="daily"), daily)
        self.assertEqual(self.jobs(), [])
        # Without dedupe_for the key was free again once its job was done.
        again = EMAILS.enqueue(conn, {"n": 2}, dedupe_key="plain")
        self.assertNotEqual(again, plain)
        self.assertEqual(self.jobs(), [(again, {"n": 2})])

    def test_on_duplicate_replace_updates_a_holder_that_has_not_started(self) -> None:
        conn = self.connect(autocommit=True)
        now = datetime.now(timezone.utc)
        holder = EMAILS.enqueue(conn, {"v": 1}, dedupe_key="k", run_at=now + timedelta(hours=1))
        replaced = EMAILS.enqueue(
            conn, {"v": 2}, dedupe_key="k", run_at=now + timedelta(minutes=5), priority=3,
            on_duplicate="replace",
        )
        self.assertEqual(replaced, holder)
        ignored = EMAILS.enqueue(conn, {"v": 3}, dedupe_key="k", priority=9)  # 'ignore'
        self.assertEqual(ignored, holder)
        stored = "SELECT id, payload, run_at, priority FROM pgq.jobs ORDER BY id"
        self.assertEqual(
            self.admin.execute(stored).fetchall(),
            [(holder, {"v": 2}, now + timedelta(minutes=5), 3)],
        )

    def test_on_duplicate_replace_queues_behind_a_running_holder(self) -> None:
        conn = self.connect(autocommit=True)
        holder = EMAILS.enqueue(conn, {"v": 1}, dedupe_key="k")
        self.assertEqual(self.scalar("SELECT id FROM pgq.claim('q', 1)"), holder)
        behind = EMAILS.enqueue(conn, {"v": 2}, dedupe_key="k", on_duplicate="replace")
        self.assertNotEqual(behind, holder)
        # The holder runs on with its payload; the new job waits behind it.
        states = self.admin.execute(
            "SELECT id, state, payload FROM pgq.list_jobs('q') ORDER BY id").fetchall()
        self.assertEqual(states, [(holder, "running", {"v": 1}), (behind, "waiting", {"v": 2})])

    def test_enqueue_many_returns_ids_in_input_order(self) -> None:
        conn = self.connect(autocommit=True)
        later = datetime.now(timezone.utc) + timedelta(hours=1)
        payloads = [{"i": i} for i in (5, 3, 9, 1)]
        ids = EMAILS.enqueue_many(conn, payloads, run_at=later, priority=7)
        stored = {
            row[0]: row[1:]
            for row in self.admin.execute("SELECT id, payload, run_at, priority FROM pgq.jobs")
        }
        self.assertEqual([stored[i] for i in ids], [(p, later, 7) for p in payloads])
        self.assertEqual(EMAILS.enqueue_many(conn, []), [])

    def test_enqueue_many_takes_group_and_dedupe_keys(self) -> None:
        conn = self.connect(autocommit=True)
        held = EMAILS.enqueue(conn, {"row": 0}, dedupe_key="row-0")
        ids = EMAILS.enqueue_many(
            conn,
            [{"row": 1}, {"row": 2}, {"row": 1}, {"row": 0}],
            group_keys="tenant-a",
            dedupe_keys=["row-1", "row-2", "row-1", "row-0"],
        )
        # A key taken by an earlier payload, or by a job before the call:
        # its holder's id in that place.
        self.assertEqual(ids[2], ids[0])
        self.assertEqual(ids[3], held)
        self.assertEqual(
            self.admin.execute(
                "SELECT id, group_key, dedupe_key FROM pgq.jobs WHERE id = ANY (%s) ORDER BY id",
                (ids[:2],),
            ).fetchall(),
            [(ids[0], "tenant-a", "row-1"), (ids[1], "tenant-a", "row-2")],
        )
        # One key per payload, None for none; a count that fits neither is 22023.
        one_each = EMAILS.enqueue_many(conn, [{}, {}], group_keys=["tenant-b", None])
        self.assertEqual(
            self.admin.execute(
                "SELECT group_key FROM pgq.jobs WHERE id = ANY (%s) ORDER BY id", (one_each,)
            ).fetchall(),
            [("tenant-b",), (None,)],
        )
        with self.assertRaises(errors.InvalidParameterValue):
            EMAILS.enqueue_many(conn, [{}, {}, {}], dedupe_keys=["a", "b"])

    def test_server_errors_are_psycopg_errors_with_their_sqlstate(self) -> None:
        conn = self.connect()
        with self.assertRaises(errors.UndefinedObject) as unknown:
            Queue("nope").enqueue(conn, {})
        self.assertEqual(unknown.exception.sqlstate, "42704")
        self.assertEqual(conn.info.transaction_status, TransactionStatus.INERROR)

        stranger = self.connect(self.create_role("pgq_py_stranger"))
        with self.assertRaises(errors.InsufficientPrivilege) as refused:
            EMAILS.enqueue(stranger, {})
        self.assertEqual(refused.exception.sqlstate, "42501")
        stranger.rollback()
        self.admin.execute("SELECT pgq.grant('pgq_py_stranger', 'q', 'produce')")
        with stranger.transaction():
            job = EMAILS.enqueue(stranger, {"from": "stranger"})
        self.assertEqual(self.jobs(), [(job, {"from": "stranger"})])
