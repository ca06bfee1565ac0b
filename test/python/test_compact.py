"""Compaction of pgq.job_rows (ADR 0008): a rewrite keeps every live job as it
was, frees the space a held-open transaction pins, never loses or repeats a
job under concurrent workers, and leaves a REPEATABLE READ transaction that
began before it able to see (and complete) its own job.

Runs like test_concurrency.py (same DSN, same fresh-extension setUp). The
jobs here have priority 1 unless a test says otherwise: rows of
pgq.job_rows, which compaction rewrites, not entries of their queue's ring
(ADR 0028), which a TRUNCATE reclaims.
"""

import threading

import psycopg
from psycopg import errors
from psycopg.types.json import Jsonb

from test_concurrency import HANG, PgqTestCase

JOB_COLUMNS = "SELECT * FROM pgq.job_rows ORDER BY id"


class JobRowsTestCase(PgqTestCase):
    def enqueue(self, conn, queue, payload, **kwargs):
        kwargs.setdefault("priority", 1)
        return super().enqueue(conn, queue, payload, **kwargs)


class CompactTests(JobRowsTestCase):
    def jobs(self):
        return [tuple(r) for r in self.admin.execute(JOB_COLUMNS).fetchall()]

    def filenode(self):
        return self.scalar("SELECT pg_relation_filenode('pgq.job_rows')")

    def size(self):
        return self.scalar("SELECT pg_total_relation_size('pgq.job_rows')")

    def churn(self, jobs, batch=500):
        """Enqueues, claims and completes `jobs` jobs in batches, in a queue
        of their own ('churn'): the dead rows a busy queue leaves behind."""
        self.admin.execute(
            "SELECT pgq.create_queue('churn') WHERE NOT EXISTS"
            " (SELECT FROM pgq.queues WHERE name = 'churn')"
        )
        for _ in range(jobs // batch):
            self.admin.execute(
                "SELECT count(*) FROM pgq.enqueue_many('churn', array_fill('{\"k\":1}'::jsonb, ARRAY[%s]), priority => 1)",
                (batch,),
            )
            done = self.scalar(
                "SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM pgq.claim('churn', %s)",
                (batch,),
            )
            self.assertEqual(done, batch)

    def test_rewrite_keeps_every_live_job(self):
        """Pending, delayed, running, grouped (waiting), deduplicated and
        TOASTed jobs come back column for column in a new file; the running
        job completes with its attempt, the dedupe key still holds, claims
        still follow priority."""
        self.enqueue(self.admin, "q", {"kind": "pending"}, priority=5)
        self.enqueue(self.admin, "q", {"kind": "later"}, run_at="2999-01-01T00:00:00Z")
        self.enqueue(self.admin, "q", {"kind": "dedupe"}, dedupe_key="d1")
        self.enqueue(self.admin, "q", {"kind": "g1"}, group_key="g")
        self.enqueue(self.admin, "q", {"kind": "g2"}, group_key="g")
        big = {"kind": "toast", "blob": "x" * 300_000}
        self.enqueue(self.admin, "q", big)
        running = self.admin.execute("SELECT id, attempt FROM pgq.claim('q', 1)").fetchone()
        # Progress reported keeps the running job a row of pgq.job_rows
        # wherever its claim put it: once the maintenance has given priority
        # 5 a ring of its own, the claim takes the row onto it (ADR 0028,
        # "Rows claimed onto the rings"), and progress moves it back.
        self.assertTrue(self.scalar("SELECT pgq.progress(%s, %s, '{\"step\": 1}')", running))
        self.churn(2000)
        before, node = self.jobs(), self.filenode()
        self.assertEqual(len(before), 6)

        kept = self.scalar("SELECT pgq.compact_jobs()")

        self.assertEqual(kept, 6)
        self.assertNotEqual(self.filenode(), node, "the table was not rewritten")
        self.assertEqual(self.jobs(), before)
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.job_rows WHERE payload = %s", (Jsonb(big),)), 1)
        self.assertTrue(self.scalar("SELECT pgq.complete(%s, %s)", running))
        self.assertEqual(
            self.scalar("SELECT pgq.enqueue('q', '{}', dedupe_key => 'd1')"),
            self.scalar("SELECT id FROM pgq.job_rows WHERE dedupe_key = 'd1'"),
        )
        # amcheck agrees the rebuilt indexes match the rows.
        self.admin.execute("CREATE EXTENSION IF NOT EXISTS amcheck")
        self.admin.execute(
            "SELECT bt_index_check(indexrelid, true) FROM pg_index"
            " WHERE indrelid = 'pgq.job_rows'::regclass"
        )
        first = self.admin.execute("SELECT payload FROM pgq.claim('q', 1)").fetchone()[0]
        self.assertEqual(first["kind"], "dedupe")  # the priority-5 job was the one running

    def test_frees_the_space_a_held_transaction_pins(self):
        """VACUUM can free nothing while a transaction holds the xmin
        horizon; the rewrite frees it all, the holder still open."""
        holder = self.connect(autocommit=False)
        holder.execute("SELECT txid_current()")
        self.churn(4000)
        self.admin.execute("VACUUM pgq.job_rows")
        pinned = self.size()

        self.assertEqual(self.scalar("SELECT pgq.compact_jobs()"), 0)

        after = self.size()
        self.assertLess(after * 4, pinned, f"{pinned} -> {after} bytes")
        holder.rollback()

    def test_old_repeatable_read_snapshot_still_sees_its_job(self):
        """A worker's REPEATABLE READ transaction that took its snapshot
        before the rewrite completes the job it holds (rows come back frozen,
        not as new rows its snapshot could not see)."""
        job = self.enqueue(self.admin, "q", {"n": 1})
        other = self.enqueue(self.admin, "q", {"n": 2})
        claimed = self.admin.execute("SELECT id, attempt FROM pgq.claim('q', 1)").fetchone()
        self.assertEqual(claimed[0], job)
        worker = self.connect(autocommit=False)
        worker.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        worker.execute("SELECT 1")  # the snapshot is taken here

        self.assertEqual(self.scalar("SELECT pgq.compact_jobs()"), 2)

        self.assertTrue(self.scalar("SELECT pgq.complete(%s, %s)", claimed, conn=worker))
        self.assertEqual(
            self.scalar("SELECT count(*) FROM pgq.job_rows WHERE id = %s", (other,), conn=worker), 1
        )
        worker.commit()
        self.assertEqual(self.scalar("SELECT array_agg(id) FROM pgq.job_rows"), [other])

    def test_busy_table_returns_null_and_loses_nothing(self):
        """An open transaction that wrote to pgq.job_rows keeps the rewrite out:
        compact_jobs() gives up after its lock timeout with NULL, and the
        uncommitted job is there once both are done."""
        writer = self.connect(autocommit=False)
        job = self.enqueue(writer, "q", {"n": 1})
        self.assertIsNone(self.scalar("SELECT pgq.compact_jobs()"))
        writer.commit()
        self.assertEqual(self.scalar("SELECT pgq.compact_jobs()"), 1)
        self.assertEqual(self.scalar("SELECT id FROM pgq.claim('q', 1)"), job)

    def test_refused_from_a_repeatable_read_transaction(self):
        conn = self.connect(autocommit=False)
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with self.assertRaises(errors.InvalidTransactionState):
            conn.execute("SELECT pgq.compact_jobs()")
        conn.rollback()

    def sleeping(self, pid):
        """Whether backend pid is asleep in a claim's wait (not in a lock wait)."""
        row = self.activity(pid)
        return row is not None and row[0] == "active" and row[1] == "Extension"

    def test_a_sleeping_claim_holds_no_lock(self):
        """A claim asleep in its wait has let go of every lock its attempts
        took (issue 16): an exclusive lock on pgq.job_rows (compaction, ALTER
        EXTENSION) is granted at once, and the claim still wakes for the job
        enqueued meanwhile and takes it."""
        a = self.connect()
        pid = a.info.backend_pid
        task = self.spawn(lambda: a.execute(
            "SELECT id FROM pgq.claim('q', 1, wait => '30 s')").fetchall(), "claim")
        # The queue is new: its first attempt scans pgq.job_rows (no hint yet).
        self.wait_for("the claim to sleep", lambda: self.sleeping(pid) or not task.is_alive())
        self.assertTrue(task.is_alive(), f"claim ended: {task.error!r}")
        held = self.scalar("SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'relation'"
                           "   AND relation IN ('pgq.job_rows'::regclass, 'pgq.queues'::regclass)",
                           (pid,))
        self.assertEqual(held, 0, "a sleeping claim holds locks on pgq's tables")
        locker = self.connect(autocommit=False)
        locker.execute("SET lock_timeout = '2s'")
        locker.execute("LOCK TABLE pgq.job_rows IN ACCESS EXCLUSIVE MODE")
        locker.rollback()
        self.assertIsNotNone(self.scalar("SELECT pgq.compact_jobs()"),
                             "compaction found pgq.job_rows busy while the claim slept")
        job = self.enqueue(self.admin, "q", {"n": 1})
        self.assertEqual(task.value(), [(job,)])
        self.assertEqual(self.scalar("SELECT state FROM pgq.job_rows WHERE id = %s", (job,)), "r")

    def test_compaction_goes_through_claimers_that_always_wait(self):
        """Four workers that always claim with a wait on a quiet queue (the
        usual worker loop): compaction, which waits at most 20 ms for its
        lock, gets it (before issue 16 each sleeping claim held its lock for
        its whole wait, and no compaction ever went through)."""
        stop = threading.Event()

        def worker():
            conn = self.connect()
            while not stop.is_set():
                for job_id, attempt in conn.execute(
                        "SELECT id, attempt FROM pgq.claim('q', 1, wait => '2 s')").fetchall():
                    conn.execute("SELECT pgq.complete(%s, %s)", (job_id, attempt))

        workers = [self.spawn(worker, f"worker{i}") for i in range(4)]
        self.wait_for("the workers to sleep", lambda: self.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Extension'"
            "   AND query LIKE '%%pgq.claim%%'") == 4)
        kept = []
        for i in range(5):
            self.enqueue(self.admin, "q", {"n": i})
            kept.append(self.scalar("SELECT pgq.compact_jobs()"))
        stop.set()
        for w in workers:
            w.value()
        rewrites = sum(1 for k in kept if k is not None)
        self.assertGreaterEqual(rewrites, 3, f"compaction found pgq.job_rows busy: {kept}")
        self.wait_for("every job done", lambda: self.job_count() == 0)

    def test_only_the_owner_may_compact(self):
        """A role that does not own pgq.job_rows gets 42501, checked before the
        table lock is asked for (which needs no privilege of its own): with a
        writer holding the table, it is refused at once rather than queued
        behind the writer, blocking everyone, until its lock timeout."""
        self.admin.execute("DROP ROLE IF EXISTS pgq_compact_outsider")
        self.admin.execute("CREATE ROLE pgq_compact_outsider")
        try:
            self.admin.execute("GRANT USAGE ON SCHEMA pgq TO pgq_compact_outsider")
            self.admin.execute("GRANT SELECT ON ALL TABLES IN SCHEMA pgq TO pgq_compact_outsider")
            writer = self.connect(autocommit=False)
            self.enqueue(writer, "q", {"n": 1})
            conn = self.connect()
            conn.execute("SET ROLE pgq_compact_outsider")
            with self.assertRaises(errors.InsufficientPrivilege):
                conn.execute("SELECT pgq.compact_jobs()")
            conn.close()
            writer.rollback()
        finally:
            self.admin.execute("DROP OWNED BY pgq_compact_outsider")
            self.admin.execute("DROP ROLE pgq_compact_outsider")

    def test_maintain_compacts_past_the_threshold_only(self):
        """pgq.maintain() rewrites the table once it passes
        pgq.compact_min_size and is mostly dead space; -1 turns it off."""
        holder = self.connect(autocommit=False)
        holder.execute("SELECT txid_current()")
        self.churn(3000)
        # The rule reads the live-row counter: publish this session's counts
        # now rather than at its next (rate-limited) report.
        self.admin.execute("SELECT pg_stat_force_next_flush()")
        node = self.filenode()
        self.admin.execute("SET pgq.compact_min_size = -1")
        self.admin.execute("SELECT pgq.maintain()")
        self.assertEqual(self.filenode(), node)
        self.admin.execute("SET pgq.compact_min_size = '1GB'")
        self.admin.execute("SELECT pgq.maintain()")
        self.assertEqual(self.filenode(), node)
        self.admin.execute("SET pgq.compact_min_size = '256kB'")
        self.admin.execute("SELECT pgq.maintain()")
        self.assertNotEqual(self.filenode(), node)
        holder.rollback()

    def test_maintain_compacts_the_rings_key_tables(self):
        """pgq.dedupe_holds (a row per dedupe key taken) and pgq.group_holds
        (a row per grouped ring job) hold dead rows a held transaction pins,
        as pgq.job_rows does (ADR 0028): pgq.maintain() rewrites them too,
        the keys still taken and the groups still held."""
        holder = self.connect(autocommit=False)
        holder.execute("SELECT txid_current()")
        self.admin.execute("SELECT pgq.create_queue('keys')")
        for batch in range(4):
            self.admin.execute(
                "DO $$ BEGIN FOR i IN 1..500 LOOP PERFORM pgq.enqueue('keys', '{}',"
                f" dedupe_key => 'k{batch}-' || i, group_key => 'g{batch}-' || i); END LOOP; END $$"
            )
            done = self.scalar(
                "SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM pgq.claim('keys', 500)"
            )
            self.assertEqual(done, 500)
        # One of each left live: it must come through the rewrite.
        held = self.scalar("SELECT pgq.enqueue('keys', '{}', dedupe_key => 'live', group_key => 'live')")
        self.admin.execute("SELECT pg_stat_force_next_flush()")
        tables = ("pgq.dedupe_holds", "pgq.group_holds")
        nodes = [self.scalar("SELECT pg_relation_filenode(%s::regclass)", (t,)) for t in tables]
        sizes = [self.scalar("SELECT pg_total_relation_size(%s::regclass)", (t,)) for t in tables]
        self.admin.execute("SET pgq.compact_min_size = '64kB'")
        self.admin.execute("SELECT pgq.maintain()")
        for table, node, size in zip(tables, nodes, sizes):
            self.assertNotEqual(self.scalar("SELECT pg_relation_filenode(%s::regclass)", (table,)),
                                node, f"{table} was not rewritten")
            after = self.scalar("SELECT pg_total_relation_size(%s::regclass)", (table,))
            self.assertLess(after * 4, size, f"{table}: {size} -> {after} bytes")
        self.assertEqual(
            self.scalar("SELECT pgq.enqueue('keys', '{}', dedupe_key => 'live')"), held,
            "the live key is still held")
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.group_holds WHERE job_id = %s", (held,)), 1)
        holder.rollback()

    def test_concurrent_workers_lose_and_repeat_nothing(self):
        """4 workers claim and complete while 2 producers enqueue and a
        third session compacts over and over: every job is completed exactly
        once, none is left, and rewrites did happen in the middle of it."""
        per_producer, producers, workers = 1500, 2, 4
        done_producing = threading.Event()
        completed = []
        lock = threading.Lock()
        compactions = [0, 0]  # rewritten, busy

        def produce(k):
            conn = self.connect()
            ids = []
            for i in range(per_producer):
                ids.append(self.enqueue(conn, "q", {"p": k, "i": i}))
            return ids

        def work():
            conn = self.connect()
            idle_after_done = 0
            while idle_after_done < 3:
                rows = conn.execute("SELECT id, attempt FROM pgq.claim('q', 5)").fetchall()
                if not rows:
                    if done_producing.is_set():
                        idle_after_done += 1
                    continue
                idle_after_done = 0
                for job, attempt in rows:
                    ok = conn.execute("SELECT pgq.complete(%s, %s)", (job, attempt)).fetchone()[0]
                    if not ok:
                        raise AssertionError(f"complete({job}, {attempt}) refused")
                    with lock:
                        completed.append(job)

        def compact():
            conn = self.connect()
            while not done_producing.is_set() or compactions[0] < 3:
                kept = conn.execute("SELECT pgq.compact_jobs()").fetchone()[0]
                compactions[0 if kept is not None else 1] += 1

        prod = [self.spawn(lambda k=k: produce(k), f"producer{k}") for k in range(producers)]
        work_tasks = [self.spawn(work, f"worker{w}") for w in range(workers)]
        compactor = self.spawn(compact, "compactor")
        enqueued = []
        for p in prod:
            enqueued += p.value(timeout=120)
        done_producing.set()
        compactor.value(timeout=HANG * 4)
        for w in work_tasks:
            w.value(timeout=HANG * 4)

        self.assertGreaterEqual(compactions[0], 3)
        self.assertEqual(len(completed), len(set(completed)), "a job was completed twice")
        self.assertEqual(sorted(completed), sorted(enqueued))
        self.assertEqual(self.job_count(), 0)


class WorkerCompactsTests(JobRowsTestCase):
    def test_maintenance_worker_compacts_by_itself(self):
        """With the library preloaded, the maintenance worker rewrites a
        table that a held transaction bloated, within its check interval."""
        self.admin.execute("ALTER SYSTEM SET pgq.compact_min_size = '512kB'")
        self.admin.execute("SELECT pg_reload_conf()")
        try:
            holder = self.connect(autocommit=False)
            holder.execute("SELECT txid_current()")
            node = self.scalar("SELECT pg_relation_filenode('pgq.job_rows')")
            self.admin.execute(
                "SELECT count(*) FROM pgq.enqueue_many('q', array_fill('{\"k\":1}'::jsonb, ARRAY[5000]), priority => 1)"
            )
            self.admin.execute(
                "SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM pgq.claim('q', 5000)"
            )
            # The worker decides from the statistics: publish this
            # session's counts now rather than at its next idle flush.
            self.admin.execute("SELECT pg_stat_force_next_flush()")
            bloated = self.scalar("SELECT pg_total_relation_size('pgq.job_rows')")
            self.assertGreater(bloated, 1024 * 1024)
            # Watched without a lock on pgq.job_rows (pg_relation_filenode reads
            # the catalog cache): the rewrite waits at most 20 ms for its
            # lock, and a poll that held one could keep it out on a loaded
            # machine. The size is read once the table was rewritten. A
            # rewrite may have happened while the bloat was being made (the
            # table held earlier tests' rows and the threshold just fell):
            # that one left the bloat behind, so wait for the next.
            rewrites = []

            def rewritten_small():
                nonlocal node
                now = self.scalar("SELECT pg_relation_filenode('pgq.job_rows')")
                if now == node:
                    return False
                node = now
                size = self.scalar("SELECT pg_total_relation_size('pgq.job_rows')")
                rewrites.append(size)
                return size < 512 * 1024

            self.wait_for(
                "the maintenance worker to rewrite pgq.job_rows to below 512 kB",
                rewritten_small,
                timeout=HANG * 4,
            )
            self.assertLess(rewrites[-1], 512 * 1024, f"sizes after each rewrite: {rewrites}")
            holder.rollback()
        finally:
            self.admin.execute("ALTER SYSTEM RESET pgq.compact_min_size")
            self.admin.execute("SELECT pg_reload_conf()")
