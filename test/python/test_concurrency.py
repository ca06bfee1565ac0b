"""Multi-connection tests of pgq_cpp against a real server.

Run with Debian's psycopg 3 and the standard library only:

    PGQ_TEST_DSN="host=/tmp/pgq_cpp_pytest port=55460 user=postgres dbname=pgq_pytest" \
        /usr/bin/python3 -m unittest discover -s test/python -v

`make test` (scripts/test.sh) starts a throwaway cluster and sets the DSN.
The DSN must name a database the tests may wreck: every test drops and
recreates the extension there and terminates the other sessions in it.

Races are provoked with real concurrency (threads, each with its own
connection, released together by a barrier) and checked through invariants;
blocking is observed in pg_stat_activity / pg_locks, never assumed after a
sleep.
"""

import os
import subprocess
import threading
import time
import unittest

import psycopg
from psycopg import errors
from psycopg.types.json import Jsonb

DSN = os.environ.get("PGQ_TEST_DSN", "")

# Upper bound on any single wait for a thread or an observed state; far above
# what a healthy run needs, so a timeout means a hang, not a slow machine.
HANG = 15.0


class Task(threading.Thread):
    """Runs fn() in a thread; keeps its result or exception and end time."""

    def __init__(self, fn, name=None):
        super().__init__(daemon=True, name=name)
        self.fn = fn
        self.result = None
        self.error = None
        self.finished_at = None

    def run(self):
        try:
            self.result = self.fn()
        except BaseException as exc:  # reported by outcome()
            self.error = exc
        finally:
            self.finished_at = time.monotonic()

    def finish(self, timeout=HANG):
        """Joins; fails if still running. Returns the task (for .result/.error)."""
        self.join(timeout)
        if self.is_alive():
            raise AssertionError(f"task {self.name} still running after {timeout} s")
        return self

    def value(self, timeout=HANG):
        """Joins and returns the result, re-raising the task's exception."""
        self.finish(timeout)
        if self.error is not None:
            raise self.error
        return self.result


class PgqTestCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not DSN:
            raise unittest.SkipTest("PGQ_TEST_DSN is not set")

    def setUp(self):
        self._conns = []
        self._tasks = []
        # Loops a test runs in its tasks (workers, samplers, maintenance)
        # end once this is set: by the test when it is done with them, or by
        # tearDown when it failed half-way.
        self.stop = threading.Event()
        self.admin = psycopg.connect(DSN, autocommit=True)
        self.admin.execute("SET lock_timeout = '10s'")
        # A fresh state: no session left over from an earlier test, a new
        # extension, an empty queue 'q'.
        self.admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            "   AND backend_type = 'client backend'"
        )
        self.admin.execute("DROP EXTENSION IF EXISTS pgq_cpp")
        self.admin.execute("DROP TABLE IF EXISTS users")
        self.admin.execute("CREATE EXTENSION pgq_cpp")
        self.admin.execute("SELECT pgq.create_queue('q')")

    def tearDown(self):
        self.stop.set()
        for t in self._tasks:
            t.join(1)  # a loop's longest wait is a claim's fraction of a second
        # A task still running is blocked in the server: end its session so
        # the thread gets an error and nothing waits on its locks.
        if any(t.is_alive() for t in self._tasks):
            pids = [c.info.backend_pid for c in self._conns if not c.closed]
            try:
                self.admin.execute(
                    "SELECT pg_terminate_backend(p) FROM unnest(%s::int[]) p", (pids,)
                )
            except psycopg.Error:
                pass
            for t in self._tasks:
                t.join(5)
        for conn in self._conns:
            conn.close()
        self.admin.close()

    # helpers -------------------------------------------------------------

    def connect(self, autocommit=True):
        conn = psycopg.connect(DSN, autocommit=autocommit)
        self._conns.append(conn)
        return conn

    def spawn(self, fn, name=None):
        task = Task(fn, name)
        self._tasks.append(task)
        task.start()
        return task

    def scalar(self, sql, params=None, conn=None):
        return (conn or self.admin).execute(sql, params).fetchone()[0]

    def wait_for(self, what, predicate, timeout=HANG):
        """Polls predicate() until it returns a true value; returns that value."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                self.fail(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.01)

    def activity(self, pid):
        """(state, wait_event_type, wait_event, query) of a backend, or None."""
        return self.admin.execute(
            "SELECT state, wait_event_type, wait_event, query FROM pg_stat_activity WHERE pid = %s",
            (pid,),
        ).fetchone()

    def wait_until_running(self, pid, fragment, task):
        """Waits until backend pid is executing a statement containing fragment."""

        def running():
            if not task.is_alive():
                self.fail(f"task {task.name} ended before it was seen running: {task.error!r}")
            row = self.activity(pid)
            return row is not None and row[0] == "active" and fragment in row[3]

        self.wait_for(f"pid {pid} to run {fragment}", running)

    def wait_until_asleep(self, pid, task):
        """Waits until backend pid sleeps in a channel wait (pg/channel_wait.h:
        its latch, wait event Extension) in the statement task runs."""

        def asleep():
            if not task.is_alive():
                self.fail(f"task {task.name} ended instead of sleeping: {task.error!r}")
            row = self.activity(pid)
            return row is not None and row[0] == "active" and row[1:3] == ("Extension", "Extension")

        self.wait_for(f"pid {pid} to sleep on its channel", asleep)

    def wait_until_lock_waiting(self, pid, task):
        """Waits until backend pid waits for a heavyweight lock; returns that lock."""

        def waiting():
            if not task.is_alive():
                self.fail(f"task {task.name} ended instead of waiting: {task.error!r}")
            row = self.activity(pid)
            if row is None or row[0] != "active" or row[1] != "Lock":
                return None
            return self.admin.execute(
                "SELECT locktype, mode FROM pg_locks WHERE pid = %s AND NOT granted", (pid,)
            ).fetchone()

        return self.wait_for(f"pid {pid} to wait on a lock", waiting)

    def enqueue(self, conn, queue, payload, **kwargs):
        args = "".join(f", {k} => %({k})s" for k in kwargs)
        return self.scalar(
            f"SELECT pgq.enqueue(%(queue)s, %(payload)s{args})",
            dict(queue=queue, payload=Jsonb(payload), **kwargs),
            conn=conn,
        )

    def job_count(self, where="true", params=None):
        return self.scalar(f"SELECT count(*) FROM pgq.jobs WHERE {where}", params)


class ClaimTest(PgqTestCase):
    def test_no_double_claim_under_concurrency(self):
        total, workers, batch = 3000, 8, 7
        enqueued = [
            row[0]
            for row in self.admin.execute(
                "SELECT pgq.enqueue_many('q', array_agg(jsonb_build_object('n', g)))"
                "  FROM generate_series(1, %s) g",
                (total,),
            )
        ]
        self.assertEqual(len(set(enqueued)), total)

        conns = [self.connect() for _ in range(workers)]
        barrier = threading.Barrier(workers)

        def work(conn):
            claimed, attempts, mismatches = [], [], []
            barrier.wait(HANG)
            while True:
                rows = conn.execute(
                    "SELECT id, attempt FROM pgq.claim('q', %s)", (batch,)
                ).fetchall()
                if not rows:
                    return claimed, attempts, mismatches
                ids = [r[0] for r in rows]
                atts = [r[1] for r in rows]
                if len(rows) > batch:
                    mismatches.append(("batch larger than n", len(rows)))
                done = self.scalar(
                    "SELECT pgq.complete_many(%s::bigint[], %s::integer[])", (ids, atts), conn=conn
                )
                if done != len(ids):
                    mismatches.append(("complete_many", ids, atts, done))
                claimed += ids
                attempts += atts

        tasks = [self.spawn(lambda c=c: work(c), f"worker{i}") for i, c in enumerate(conns)]
        results = [t.value(60) for t in tasks]

        all_ids = [i for claimed, _, _ in results for i in claimed]
        all_attempts = [a for _, attempts, _ in results for a in attempts]
        self.assertEqual(len(set(all_ids)), len(all_ids), "a job was claimed twice")
        self.assertEqual(len(all_ids), total, "claims across all workers")
        for _, _, mismatches in results:
            self.assertEqual(mismatches, [])
        self.assertEqual(set(all_ids), set(enqueued))
        self.assertEqual(set(all_attempts), {1})
        # The run was concurrent, not one worker draining the queue alone.
        self.assertGreaterEqual(sum(1 for claimed, _, _ in results if claimed), 2)

        self.assertEqual(self.job_count(), 0)
        # Every completion counted once: in shared memory, then written to
        # pgq.finished by the maintenance worker's next pass (one row per
        # queue and pass). Waiting for the sum to reach the total; an
        # overcount never does.
        self.wait_for("every completion in pgq.finished", lambda: self.scalar(
            "SELECT coalesce(sum(jobs), 0) FROM pgq.finished") == total)
        self.assertEqual(self.scalar("SELECT done_recent FROM pgq.queue_stats"), total)

    def test_claimers_do_not_wait_on_each_other(self):
        """Jobs of a queue's ring (ADR 0028): a claim takes its entries
        under the lane's claim lock, held for the claim only."""
        self.claimers_do_not_wait_on_each_other(priority=0)

    def test_claimers_do_not_wait_on_each_other_in_job_rows(self):
        """Rows of pgq.job_rows (a priority other than 0): a claim locks
        them, and another claim skips them."""
        self.claimers_do_not_wait_on_each_other(priority=1)

    def claimers_do_not_wait_on_each_other(self, priority):
        for n in range(3):
            self.enqueue(self.admin, "q", {"n": n}, priority=priority)
        a = self.connect(autocommit=False)
        b = self.connect()

        (a_id,) = a.execute("SELECT id FROM pgq.claim('q', 1)").fetchone()  # transaction stays open
        if priority != 0:
            # Premise: A's claim holds a row lock that a plain locking read waits for.
            with self.assertRaises(errors.LockNotAvailable):
                b.execute("SELECT id FROM pgq.job_rows WHERE id = %s FOR UPDATE NOWAIT", (a_id,))

        # B claims while A's transaction stays open, and A ends it only
        # after B returned: a claim that waited for A (its row lock, its
        # transaction, a lock of the queue) could not return, and is seen
        # in pg_stat_activity waiting on a lock (any other wait for A shows
        # as B's claim not returned within HANG).
        b_pid = b.info.backend_pid
        claim = self.spawn(
            lambda: b.execute("SELECT id, attempt FROM pgq.claim('q', 1)").fetchall(), "claim")

        def returned_or_lock_waiting():
            if not claim.is_alive():
                return "returned"
            row = self.activity(b_pid)
            if row is None or row[1] != "Lock":
                return None
            lock = self.admin.execute(
                "SELECT locktype, mode FROM pg_locks WHERE pid = %s AND NOT granted", (b_pid,)
            ).fetchone()
            return f"waiting on a lock: {lock}"

        outcome = self.wait_for("B's claim to return or to wait on a lock", returned_or_lock_waiting)
        self.assertEqual(outcome, "returned", "claim waited for the other claimer")
        self.assertEqual(self.activity(a.info.backend_pid)[0], "idle in transaction")
        rows = claim.value()
        self.assertEqual(len(rows), 1)
        b_id = rows[0][0]
        self.assertNotEqual(b_id, a_id)

        a.commit()
        states = dict(self.admin.execute("SELECT id, state FROM pgq.jobs").fetchall())
        self.assertEqual(states[a_id], "r")
        self.assertEqual(states[b_id], "r")
        self.assertEqual(sorted(states.values()), ["p", "r", "r"])

    def test_wait_wakes_on_commit(self):
        a = self.connect()
        b = self.connect(autocommit=False)
        # A looks again only every minute (pgq.wait_recheck), longer than
        # HANG: a sleep that ends within HANG was ended by a wake-up.
        a.execute("SET pgq.wait_recheck = '60s'")

        # A waits on an empty queue, for a minute; B enqueues and commits
        # once A is seen asleep on its channel (after a look that found
        # nothing), with its job still uncommitted: A must be there still.
        claim = "SELECT id FROM pgq.claim('q', 1, wait => '60 s')"
        task = self.spawn(lambda: a.execute(claim).fetchall(), "claim")
        self.wait_until_asleep(a.info.backend_pid, task)
        job_id = self.enqueue(b, "q", {"w": 1})
        self.wait_until_asleep(a.info.backend_pid, task)
        self.assertTrue(task.is_alive(), "claim returned before the job was committed")
        before_commit = time.monotonic()
        b.commit()
        # A returns B's job, after the commit and long before its minute of
        # wait or of recheck is over (task.value waits HANG, a quarter of
        # it): the commit's wake-up ended its sleep, not the wait's end nor
        # a recheck. (How soon after the commit is a figure of bench/, not a
        # test's: a loaded machine may take any time.)
        rows = task.value()
        self.assertEqual(rows, [(job_id,)])
        self.assertGreaterEqual(task.finished_at, before_commit)

        # An uncommitted job is not claimable: A's whole 1 s wait comes back empty.
        job2 = self.enqueue(b, "q", {"w": 2})  # B's transaction stays open
        start = time.monotonic()
        rows = a.execute("SELECT id FROM pgq.claim('q', 1, wait => '1 s')").fetchall()
        elapsed = time.monotonic() - start
        self.assertEqual(rows, [])
        self.assertGreaterEqual(elapsed, 0.9, "claim did not wait")
        b.commit()
        self.assertEqual(a.execute("SELECT id FROM pgq.claim('q', 1)").fetchall(), [(job2,)])

    def test_stream_wait_wakes_on_commit(self):
        # next_batch waits on its stream's channel as a claim on its queue's
        # (pg/channel_wait.h): B's append ends A's wait at B's commit; an
        # append of another stream does not.
        self.admin.execute("SELECT pgq.create_stream('s')")
        self.admin.execute("SELECT pgq.create_stream('other')")
        self.admin.execute("SELECT pgq.register_consumer('s', 'r')")
        a = self.connect()
        b = self.connect(autocommit=False)
        # A looks again only every minute, longer than HANG (as above).
        a.execute("SET pgq.wait_recheck = '60s'")
        read = "SELECT event_id FROM pgq.next_batch('s', 'r', 10, wait => '60 s')"
        task = self.spawn(lambda: a.execute(read).fetchall(), "next_batch")
        self.wait_until_asleep(a.info.backend_pid, task)
        self.scalar("SELECT pgq.append('other', '{}')", conn=b)
        b.commit()
        self.wait_until_asleep(a.info.backend_pid, task)
        event = self.scalar("SELECT pgq.append('s', '{\"w\": 1}')", conn=b)
        self.wait_until_asleep(a.info.backend_pid, task)
        self.assertTrue(task.is_alive(), "next_batch returned before its stream's event was committed")
        before_commit = time.monotonic()
        b.commit()
        # One call, one result: A returns the event of its stream, committed
        # after the other stream's, so the other's commit did not end its
        # wait (it would have returned nothing); and it returns after this
        # commit, long before its minute of wait or of recheck is over
        # (task.value waits HANG): the commit's wake-up ended the sleep.
        self.assertEqual(task.value(), [(event,)])
        self.assertGreaterEqual(task.finished_at, before_commit)

    def test_a_warm_backend_follows_the_extension_dropped_and_created_again(self):
        # A's backend caches the queue, the stream and the relation ids of
        # pgq's tables (pg/invalidation.h). B drops the extension and
        # creates it again: new tables, new ids. A pause and a grant sent
        # for the new tables must still reach A.
        a = self.connect()
        self.admin.execute("SELECT pgq.create_stream('s')")
        self.enqueue(a, "q", {"warm": 1})
        self.scalar("SELECT pgq.append('s', '{}')", conn=a)
        self.assertEqual(a.execute("SELECT count(*) FROM pgq.claim('q')").fetchone(), (1,))
        self.admin.execute("DROP EXTENSION pgq_cpp")
        self.admin.execute("CREATE EXTENSION pgq_cpp")
        self.admin.execute("SELECT pgq.create_queue('q')")
        self.admin.execute("SELECT pgq.create_stream('s')")
        self.admin.execute("SELECT pgq.register_consumer('s', 'r')")
        # A looks once at the new catalog (its caches reload and its ids are
        # resolved again); the changes below come after.
        job = self.enqueue(a, "q", {"new": 1})
        event = self.scalar("SELECT pgq.append('s', '{}')", conn=a)
        self.assertEqual(
            self.admin.execute("SELECT event_id FROM pgq.next_batch('s', 'r')").fetchall(),
            [(event,)])
        self.assertTrue(self.scalar("SELECT pgq.pause('q')"))
        self.assertEqual(a.execute("SELECT count(*) FROM pgq.claim('q')").fetchone(), (0,))
        self.assertFalse(self.scalar("SELECT pgq.resume('q')"))
        self.assertEqual(a.execute("SELECT id FROM pgq.claim('q')").fetchall(), [(job,)])
        self.admin.execute("DROP ROLE IF EXISTS pgq_warm_role")
        self.admin.execute("CREATE ROLE pgq_warm_role")
        try:
            a.execute("SET ROLE pgq_warm_role")
            with self.assertRaises(errors.InsufficientPrivilege):
                self.enqueue(a, "q", {"denied": 1})
            self.admin.execute("SELECT pgq.grant('pgq_warm_role', 'q', 'produce')")
            self.enqueue(a, "q", {"granted": 1})
            self.admin.execute("SELECT pgq.revoke('pgq_warm_role', 'q', 'produce')")
            with self.assertRaises(errors.InsufficientPrivilege):
                self.enqueue(a, "q", {"revoked": 1})
        finally:
            a.execute("RESET ROLE")
            self.admin.execute("DROP OWNED BY pgq_warm_role")
            self.admin.execute("DROP ROLE pgq_warm_role")

    def test_a_warm_backend_keeps_its_queues_across_unrelated_invalidations(self):
        # Each cache is emptied by what it is built from only (ADR 0027):
        # an ANALYZE of pgq.job_rows (a relcache invalidation of it, as every
        # autovacuum sends) leaves A's queue cache and rights alone, so A's
        # next enqueue reads pgq.queues no more; alter_queue does empty it.
        a = self.connect(autocommit=False)
        scans = ("SELECT sum(pg_stat_get_xact_numscans(r)) FROM (SELECT 'pgq.queues'::regclass::oid"
                 " UNION ALL SELECT indexrelid FROM pg_index"
                 " WHERE indrelid = 'pgq.queues'::regclass) AS t(r)")
        self.enqueue(a, "q", {"warm": 1})
        warm = self.scalar(scans, conn=a)
        self.admin.execute("ANALYZE pgq.job_rows")
        self.enqueue(a, "q", {"after": "analyze"})
        self.assertEqual(self.scalar(scans, conn=a), warm, "an ANALYZE of pgq.job_rows emptied the cache")
        self.admin.execute("SELECT pgq.alter_queue('q', max_attempts => 7)")
        job = self.enqueue(a, "q", {"after": "alter"})
        self.assertGreater(self.scalar(scans, conn=a), warm, "alter_queue left the cache as it was")
        self.assertEqual(self.scalar("SELECT max_attempts FROM pgq.jobs WHERE id = %s", (job,), conn=a), 7)
        a.rollback()

    def test_wait_takes_a_job_when_it_becomes_due(self):
        """A job enqueued to run 0.4 s later, and a retry with a 0.4 s
        backoff, reach a claim already waiting when they become due: the
        claim hint's alarm says when. The claim waits a minute and looks
        again only every minute (pgq.wait_recheck), longer than HANG: a
        claim that returns the job within HANG was woken by the alarm."""
        a = self.connect()
        b = self.connect()
        a.execute("SET pgq.wait_recheck = '60s'")
        for how in ("run_at", "retry"):
            with self.subTest(how=how):
                if how == "run_at":
                    job_id = self.scalar(
                        "SELECT pgq.enqueue('q', '{}', run_at => clock_timestamp() + interval '0.4 s')",
                        conn=b)
                else:
                    job_id = self.enqueue(b, "q", {"retry": True})
                    attempt = self.scalar(
                        "SELECT attempt FROM pgq.claim('q', 1) WHERE id = %s", (job_id,), conn=b)
                    b.execute("SELECT pgq.fail(%s, %s, 'later', retry_in => '0.4 s')",
                              (job_id, attempt))
                due = time.monotonic() + 0.4
                task = self.spawn(
                    lambda: a.execute("SELECT id FROM pgq.claim('q', 1, wait => '60 s')").fetchall(),
                    f"claim ({how})")
                rows = task.value()
                self.assertEqual([r[0] for r in rows], [job_id])
                self.assertGreaterEqual(task.finished_at, due - 0.05, "claimed before it was due")
                b.execute("SELECT pgq.complete(id, attempt) FROM pgq.jobs WHERE id = %s",
                          (job_id,))

    def test_wait_memory_stays_flat(self):
        # A claim waiting on an empty queue polls it many times a second;
        # none of those polls may keep memory until the statement ends.
        a = self.connect()
        pid = a.info.backend_pid
        wait = self.spawn(
            lambda: a.execute("SELECT count(*) FROM pgq.claim('q', 1, wait => '4 s')").fetchone(),
            "wait",
        )
        self.wait_until_running(pid, "pgq.claim", wait)

        def anon_kb():
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("RssAnon:"):
                        return int(line.split()[1])
            raise AssertionError("no RssAnon line")

        time.sleep(0.5)  # let the first polls warm up caches and plans
        before = anon_kb()
        time.sleep(2.5)  # ~250 polls; leaking one 8 kB block each would be ~2 MB
        grown = anon_kb() - before
        self.assertEqual(wait.value(), (0,))
        self.assertLess(grown, 512, f"waiting backend's anonymous memory grew by {grown} kB")

    def test_wait_is_cancellable(self):
        a = self.connect()
        b = self.connect()
        a_pid = a.info.backend_pid
        # A waits a minute and looks again only every minute
        # (pgq.wait_recheck), longer than HANG: a claim that ends within
        # HANG of a cancel seen asleep was ended by the cancel.
        a.execute("SET pgq.wait_recheck = '60s'")
        claim = "SELECT * FROM pgq.claim('q', 1, wait => '60 s')"

        task = self.spawn(lambda: a.execute(claim).fetchall(), "claim")
        self.wait_until_asleep(a_pid, task)
        self.assertTrue(self.scalar("SELECT pg_cancel_backend(%s)", (a_pid,), conn=b))
        task.finish()
        self.assertIsInstance(task.error, errors.QueryCanceled, f"got {task.error!r}")
        self.assertEqual(task.error.sqlstate, "57014")

        a.rollback()
        self.assertEqual(a.execute("SELECT 1").fetchone()[0], 1)

        # statement_timeout ends a wait the same way.
        a.execute("SET statement_timeout = '300ms'")
        task = self.spawn(lambda: a.execute(claim).fetchall(), "claim with a statement_timeout")
        task.finish()
        self.assertIsInstance(task.error, errors.QueryCanceled, f"got {task.error!r}")
        a.execute("RESET statement_timeout")
        self.assertEqual(a.execute("SELECT 1").fetchone()[0], 1)

    def test_a_waiting_claim_of_a_client_that_died_ends_with_its_session(self):
        """kill -9 of a client whose claim waits: its backend ends at once
        instead of sleeping on, claiming the next job for nobody and holding
        it a whole lease."""
        script = (
            "import psycopg, sys\n"
            "conn = psycopg.connect(sys.argv[1], autocommit=True, application_name='doomed')\n"
            "conn.execute(\"SELECT * FROM pgq.claim('q', 1, wait => '60 s')\")\n"
        )
        client = subprocess.Popen(["/usr/bin/python3", "-c", script, DSN])
        try:
            pid = self.wait_for("the doomed claim to wait", lambda: self.scalar(
                "SELECT (SELECT pid FROM pg_stat_activity WHERE application_name = 'doomed'"
                "           AND state = 'active' AND query LIKE '%%pgq.claim%%')"))
        finally:
            client.kill()
            client.wait()
        self.wait_for("the dead client's backend to end", lambda: self.scalar(
            "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = %s", (pid,)), timeout=HANG)
        job = self.scalar("SELECT pgq.enqueue('q', '{}')")
        self.assertEqual(self.scalar("SELECT state FROM pgq.jobs WHERE id = %s", (job,)), "p")


class EnqueueTest(PgqTestCase):
    def test_notify_on_enqueue(self):
        self.admin.execute("SELECT pgq.create_queue('nq', notify => true)")
        self.admin.execute("SELECT pgq.create_queue('nq_rolled_back', notify => true)")
        self.admin.execute("SELECT pgq.create_queue('nq_many', notify => true)")
        stop = "__stop__"

        listener = self.connect()
        listener.execute("LISTEN pgq")

        def listen():
            received = []
            gen = listener.notifies()
            for n in gen:
                if n.payload == stop:
                    gen.close()
                    break
                received.append((n.channel, n.payload, n.pid))
            return received

        task = self.spawn(listen, "listener")
        sender = self.connect(autocommit=False)
        sender_pid = sender.info.backend_pid
        try:
            self.enqueue(sender, "q", {"quiet": True})  # queue without notify
            sender.commit()
            self.enqueue(sender, "nq_rolled_back", {"undone": True})
            sender.rollback()
            self.enqueue(sender, "nq", {"loud": True})
            sender.commit()
            sender.execute("SELECT pgq.enqueue_many('nq_many', ARRAY['1', '2']::jsonb[])")
            sender.commit()
        finally:
            # Notifications arrive in commit order: once the listener has this
            # one it has everything committed before it.
            self.admin.execute("SELECT pg_notify('pgq', %s)", (stop,))
        received = task.value(5)
        self.assertEqual(
            received, [("pgq", "nq", sender_pid), ("pgq", "nq_many", sender_pid)]
        )
        # The jobs themselves: the rolled-back one is not there.
        queues = [r[0] for r in self.admin.execute(
            "SELECT q.name FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) ORDER BY j.id")]
        self.assertEqual(queues, ["q", "nq", "nq_many", "nq_many"])

    def test_drop_queue_waits_for_inflight_enqueue(self):
        # 1. drop_queue waits for an uncommitted enqueue, then drops its job too.
        self.admin.execute("SELECT pgq.create_queue('d')")
        qid = self.scalar("SELECT queue_id FROM pgq.queues WHERE name = 'd'")
        a = self.connect(autocommit=False)
        b = self.connect()
        job = self.enqueue(a, "d", {"inflight": True})  # A's transaction stays open

        drop = self.spawn(lambda: b.execute("SELECT pgq.drop_queue('d', force => true)"), "drop")
        self.wait_until_lock_waiting(b.info.backend_pid, drop)
        self.assertTrue(drop.is_alive())
        a.commit()
        drop.value()
        self.assertEqual(self.job_count("queue_id = %s", (qid,)), 0, "orphan job of dropped queue")
        self.assertEqual(self.job_count("id = %s", (job,)), 0)
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.queues WHERE name = 'd'"), 0)

        # 2. An enqueue that starts while a drop is uncommitted waits for it,
        #    then finds the queue gone, with or without a dedupe key (a
        #    dedupe enqueue must not mistake the vanished queue for a busy key).
        for extra in ({}, {"dedupe_key": "k"}):
            with self.subTest(**extra):
                self.admin.execute("SELECT pgq.create_queue('d2')")
                qid2 = self.scalar("SELECT queue_id FROM pgq.queues WHERE name = 'd2'")
                a = self.connect()
                b = self.connect(autocommit=False)
                b.execute("SELECT pgq.drop_queue('d2', force => true)")  # stays open

                enq = self.spawn(lambda: self.enqueue(a, "d2", {"late": True}, **extra), "enq")
                self.wait_until_lock_waiting(a.info.backend_pid, enq)
                b.commit()
                enq.finish()
                self.assertIsInstance(
                    enq.error, errors.UndefinedObject, f"got {enq.error!r}, result {enq.result!r}"
                )
                self.assertEqual(
                    self.job_count("queue_id = %s", (qid2,)), 0, "orphan job of dropped queue"
                )
                self.assertEqual(
                    self.scalar("SELECT count(*) FROM pgq.queues WHERE name = 'd2'"), 0
                )

    def test_other_sessions_changes_reach_a_warm_backend(self):
        # A's backend caches queue ids and defaults after its first enqueue.
        # B drops the queue and creates it again (a new id), then alters it:
        # A's next enqueues must land in the live queue with the new default.
        a = self.connect()
        self.enqueue(a, "q", {"warm": 1})
        self.admin.execute("SELECT pgq.drop_queue('q', force => true)")
        self.admin.execute("SELECT pgq.create_queue('q', max_attempts => 3)")
        live = self.scalar("SELECT queue_id FROM pgq.queues WHERE name = 'q'")
        job = self.enqueue(a, "q", {"after": "recreate"})
        self.assertEqual(
            a.execute("SELECT queue_id, max_attempts FROM pgq.jobs WHERE id = %s", (job,)).fetchone(),
            (live, 3),
        )
        self.admin.execute("SELECT pgq.alter_queue('q', max_attempts => 9)")
        job = self.enqueue(a, "q", {"after": "alter"})
        self.assertEqual(self.scalar("SELECT max_attempts FROM pgq.jobs WHERE id = %s", (job,)), 9)
        self.admin.execute("SELECT pgq.drop_queue('q', force => true)")
        with self.assertRaises(errors.UndefinedObject):
            self.enqueue(a, "q", {"after": "drop"})
        self.assertEqual(self.job_count(), 0, "a job outlived its queue")

    def test_pause_from_another_session_stops_a_warm_claimer(self):
        # A's backend has the queue cached (paused = false) from its first
        # claim; B's pause and resume must reach A's very next claims.
        a = self.connect()
        self.assertEqual(a.execute("SELECT count(*) FROM pgq.claim('q')").fetchone(), (0,))
        job = self.enqueue(self.admin, "q", {"paused": "soon"})
        self.assertTrue(self.scalar("SELECT pgq.pause('q')"))
        self.assertEqual(a.execute("SELECT count(*) FROM pgq.claim('q')").fetchone(), (0,))
        self.assertFalse(self.scalar("SELECT pgq.resume('q')"))
        self.assertEqual(a.execute("SELECT id FROM pgq.claim('q')").fetchone(), (job,))

    def test_enqueue_is_transactional(self):
        self.admin.execute("CREATE TABLE users (id serial PRIMARY KEY, email text NOT NULL UNIQUE)")
        conn = self.connect(autocommit=False)
        observer = self.connect()

        def user_exists(email):
            sql = "SELECT count(*) FROM users WHERE email = %s"
            return self.scalar(sql, (email,), conn=observer) == 1

        def job_exists(job_id):
            sql = "SELECT count(*) FROM pgq.jobs WHERE id = %s"
            return self.scalar(sql, (job_id,), conn=observer) == 1

        # A lone enqueue rolled back leaves nothing.
        job = self.enqueue(conn, "q", {"alone": True})
        self.assertFalse(job_exists(job))
        conn.rollback()
        self.assertFalse(job_exists(job))
        self.assertEqual(self.job_count(), 0)

        # Business row and job commit together...
        user = self.scalar(
            "INSERT INTO users (email) VALUES ('ann@example.com') RETURNING id", conn=conn
        )
        job = self.enqueue(conn, "q", {"welcome": user})
        self.assertFalse(user_exists("ann@example.com"))
        self.assertFalse(job_exists(job))
        conn.commit()
        self.assertTrue(user_exists("ann@example.com"))
        self.assertTrue(job_exists(job))
        self.assertEqual(
            self.scalar("SELECT payload FROM pgq.jobs WHERE id = %s", (job,)), {"welcome": user}
        )

        # ...and roll back together, also when the transaction fails after the enqueue.
        self.scalar("INSERT INTO users (email) VALUES ('bob@example.com') RETURNING id", conn=conn)
        job = self.enqueue(conn, "q", {"welcome": "bob"})
        conn.rollback()
        self.assertFalse(user_exists("bob@example.com"))
        self.assertFalse(job_exists(job))

        job = self.enqueue(conn, "q", {"welcome": "ann again"})
        with self.assertRaises(errors.UniqueViolation):
            conn.execute("INSERT INTO users (email) VALUES ('ann@example.com')")
        conn.rollback()
        self.assertFalse(job_exists(job))
        self.assertEqual(self.job_count(), 1)

    def test_dedupe_concurrent(self):
        threads = 8
        conns = [self.connect() for _ in range(threads)]
        for round_ in range(5):
            key = f"key-{round_}"
            barrier = threading.Barrier(threads)

            def enqueue(conn, i):
                barrier.wait(HANG)
                return self.enqueue(conn, "q", {"thread": i}, dedupe_key=key)

            tasks = [
                self.spawn(lambda c=c, i=i: enqueue(c, i), f"enqueue{i}")
                for i, c in enumerate(conns)
            ]
            ids = [t.value() for t in tasks]
            self.assertEqual(len(set(ids)), 1, f"round {round_}: ids {ids}")
            rows = self.admin.execute(
                "SELECT id FROM pgq.jobs WHERE dedupe_key = %s", (key,)
            ).fetchall()
            self.assertEqual(rows, [(ids[0],)], f"round {round_}")
        self.assertEqual(self.job_count(), 5)


if __name__ == "__main__":
    unittest.main()
