"""Ring queues under load (issue 33, ADR 0028): producers, workers, a
canceller and a maintenance loop that turns the rings every few tens of
milliseconds and truncates their segments, all at once on three queues.

Producers enqueue one at a time and in batches, some in transactions that
roll back; workers claim batches of 1, 7 or 50 under a short lease, roll
some claims back, fail some jobs (their retry runs from pgq.job_rows) and
complete the rest one by one; the canceller cancels jobs it picks at
random. Every outcome is written to a ledger table in the transaction that
made it, whose primary key is the job id: a job completed twice, or
completed and cancelled, is a duplicate-key error, not a merged set entry.
At the end every job a producer committed is completed or cancelled
exactly once, none is left on a ring or in pgq.job_rows, and the rings turned
and were truncated many times (their segments other than the current one
are empty once a last pass has run).

Runs like test_concurrency.py (same DSN, same fresh-extension setUp).
PGQ_RING_STRESS_JOBS sets the size.
"""

import os
import random
import threading
import time

import psycopg

from test_concurrency import HANG, PgqTestCase

JOBS = int(os.environ.get("PGQ_RING_STRESS_JOBS", "12000"))
QUEUES = ["r1", "r2", "r3"]
PRODUCERS = 2
WORKERS = 4
BATCH = 50


class RingStressTest(PgqTestCase):
    def test_every_job_once_while_the_rings_turn(self):
        for q in QUEUES:
            # A short lease: a worker that is slow (or rolls back) lets the
            # maintenance expire it; the retry's backoff is nil.
            self.admin.execute(
                "SELECT pgq.create_queue(%s, lease => '2 seconds', max_attempts => 1000,"
                " backoff_base => '0', backoff_max => '0')",
                (q,),
            )
        self.assertEqual(
            self.scalar(
                "SELECT count(*) FROM pgq.queues WHERE ring_id IS NOT NULL AND name = ANY (%s)",
                (QUEUES,),
            ),
            len(QUEUES),
        )
        self.admin.execute("CREATE TABLE produced (job bigint PRIMARY KEY)")
        self.admin.execute("CREATE TABLE outcome (job bigint PRIMARY KEY, how text NOT NULL)")
        produced_all = threading.Event()
        workers_done = threading.Event()

        def produce(k):
            conn = self.connect(autocommit=False)
            rng = random.Random(k)
            made = 0
            while made < JOBS // PRODUCERS:
                q = rng.choice(QUEUES)
                n = 1 if rng.random() < 0.3 else rng.randint(2, BATCH)
                n = min(n, JOBS // PRODUCERS - made)
                ids = [
                    r[0]
                    for r in conn.execute(
                        "SELECT pgq.enqueue_many(%s, array_fill(jsonb_build_object('k', %s::int),"
                        " ARRAY[%s]))",
                        (q, k, n),
                    ).fetchall()
                ]
                conn.execute("INSERT INTO produced SELECT unnest(%s::bigint[])", (ids,))
                if rng.random() < 0.1:
                    conn.rollback()  # never happened
                    continue
                conn.commit()
                made += n
            return made

        def work(w):
            conn = self.connect(autocommit=False)
            rng = random.Random(100 + w)
            idle = 0
            done = 0
            while idle < 20:
                q = rng.choice(QUEUES)
                rows = conn.execute(
                    "SELECT id, attempt FROM pgq.claim(%s, %s)", (q, rng.choice([1, 7, 50]))
                ).fetchall()
                if not rows:
                    conn.commit()
                    if produced_all.is_set():
                        idle += 1
                        time.sleep(0.02)
                    continue
                idle = 0
                if rng.random() < 0.05:
                    conn.rollback()  # the claim never happened: given back
                    continue
                conn.commit()
                for job, attempt in rows:
                    if rng.random() < 0.03:
                        conn.execute("SELECT pgq.fail(%s, %s, 'stress')", (job, attempt))
                        conn.commit()
                        continue
                    ok = conn.execute("SELECT pgq.complete(%s, %s)", (job, attempt)).fetchone()[0]
                    if ok:
                        conn.execute("INSERT INTO outcome VALUES (%s, 'completed')", (job,))
                        done += 1
                    conn.commit()
            return done

        def cancel():
            conn = self.connect(autocommit=False)
            rng = random.Random(7)
            cancelled = 0
            while not workers_done.is_set():
                job = conn.execute(
                    "SELECT job FROM produced ORDER BY job DESC LIMIT 1 OFFSET %s",
                    (rng.randint(0, 200),),
                ).fetchone()
                conn.commit()
                if job is None:
                    time.sleep(0.01)
                    continue
                try:
                    if conn.execute("SELECT pgq.cancel(%s)", job).fetchone()[0]:
                        conn.execute("INSERT INTO outcome VALUES (%s, 'cancelled')", job)
                        cancelled += 1
                    conn.commit()
                except psycopg.errors.ConfigurationLimitExceeded:
                    conn.rollback()  # too many tombstones ahead of the cursor
                time.sleep(0.005)
            return cancelled

        def maintain():
            conn = self.connect()
            conn.execute("SET pgq.ring_turn = '30ms'")
            passes = 0
            while not self.stop.is_set():
                conn.execute("SELECT pgq.maintain()")
                passes += 1
                time.sleep(0.01)
            return passes

        maintainer = self.spawn(maintain, "maintain")
        producers = [self.spawn(lambda k=k: produce(k), f"producer{k}") for k in range(PRODUCERS)]
        workers = [self.spawn(lambda w=w: work(w), f"worker{w}") for w in range(WORKERS)]
        canceller = self.spawn(cancel, "canceller")
        produced = sum(p.value(timeout=HANG * 20) for p in producers)
        produced_all.set()
        completed = sum(w.value(timeout=HANG * 20) for w in workers)
        workers_done.set()
        cancelled = canceller.value(timeout=HANG)
        self.stop.set()
        self.assertGreater(maintainer.value(timeout=HANG), 0)

        self.assertEqual(produced, JOBS)
        self.assertEqual(self.scalar("SELECT count(*) FROM produced"), JOBS)
        # Every committed job completed or cancelled exactly once (the
        # primary key), nothing else.
        if completed + cancelled != JOBS:
            self.print_unfinished()
        self.assertEqual(completed + cancelled, JOBS, (completed, cancelled))
        self.assertEqual(
            self.scalar(
                "SELECT count(*) FROM produced p FULL JOIN outcome o USING (job)"
                " WHERE p.job IS NULL OR o.job IS NULL"
            ),
            0,
        )
        self.assertGreater(cancelled, 0)
        self.assertEqual(
            self.scalar("SELECT count(*) FROM pgq.dead_jobs WHERE reason = 'cancelled'"), cancelled
        )
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.ring_jobs"), 0, "left on a ring")
        self.assertEqual(self.job_count(), 0, "left in pgq.jobs (its rows or the rings)")
        # The rings turned many times and what they no longer need went.
        self.admin.execute("SET pgq.ring_turn = '10ms'")
        for _ in range(3):
            time.sleep(0.02)
            self.admin.execute("SELECT pgq.maintain()")
        # At least a lap of every ring (four segments): the cursor went round
        # into segments truncated and written again.
        turns = self.scalar(
            "SELECT min(r.generation) FROM pgq.rings r JOIN pgq.queues q USING (ring_id)"
            " WHERE q.name = ANY (%s)",
            (QUEUES,),
        )
        self.assertGreaterEqual(turns, 4)
        self.assertEqual(
            self.scalar(
                "SELECT count(*) FROM pgq.ring_segments s JOIN pgq.rings r USING (ring_id)"
                " JOIN pgq.queues q USING (ring_id) WHERE s.segment <> r.current AND NOT s.empty"
            ),
            0,
            "sealed segments left",
        )


class RingNotifyTest(PgqTestCase):
    def test_notify_on_enqueue_to_a_ring(self):
        """A ring queue created with notify tells LISTEN pgq clients of its
        new jobs at commit, one at a time and in a batch, as a queue of
        pgq.job_rows does; a rolled-back enqueue tells nobody."""
        self.admin.execute("SELECT pgq.create_queue('rn', notify => true)")
        self.admin.execute("SELECT pgq.create_queue('rquiet')")
        listener = self.connect()
        received = []
        listener.add_notify_handler(lambda n: received.append((n.channel, n.payload, n.pid)))
        listener.execute("LISTEN pgq")
        sender = self.connect(autocommit=False)
        sender.execute("SELECT pgq.enqueue('rn', '{}')")
        sender.rollback()
        sender.execute("SELECT pgq.enqueue('rquiet', '{}')")
        sender.commit()
        sender.execute("SELECT pgq.enqueue('rn', '{}')")
        sender.commit()
        sender.execute("SELECT pgq.enqueue_many('rn', ARRAY['{}', '{}']::jsonb[])")
        sender.commit()
        # Delivered to the listener's client with its next result.
        self.wait_for("two notifications",
                      lambda: listener.execute("SELECT 1") and len(received) >= 2)
        pid = sender.info.backend_pid
        self.assertEqual(received, [("pgq", "rn", pid), ("pgq", "rn", pid)])
        self.assertEqual(
            self.scalar("SELECT count(*) FROM pgq.ring_jobs r JOIN pgq.queues q"
                        " ON q.ring_id = r.ring WHERE q.name = 'rn'"), 3)

    def test_wait_wakes_on_commit_of_a_ring_enqueue(self):
        """A claim waiting on an empty ring queue is woken by the commit of a
        ring enqueue (the ring's entries are announced as the table's jobs
        are), not by its recheck (a minute, longer than the test waits)."""
        self.admin.execute("SELECT pgq.create_queue('rw')")
        a = self.connect()
        b = self.connect(autocommit=False)
        a.execute("SET pgq.wait_recheck = '60s'")
        claim = "SELECT id FROM pgq.claim('rw', 1, wait => '60 s')"
        task = self.spawn(lambda: a.execute(claim).fetchall(), "claim")
        self.wait_until_asleep(a.info.backend_pid, task)
        job_id = self.enqueue(b, "rw", {"w": 1})
        self.wait_until_asleep(a.info.backend_pid, task)
        self.assertTrue(task.is_alive(), "claim returned before the job was committed")
        before_commit = time.monotonic()
        b.commit()
        self.assertEqual(task.value(), [(job_id,)])
        self.assertGreaterEqual(task.finished_at, before_commit)
        self.assertEqual(
            self.scalar("SELECT count(*) FROM pgq.job_rows"), 0, "the job was on the ring, not a row"
        )


class RingGivenTest(PgqTestCase):
    def test_the_maintenance_gives_a_ring_without_waiting(self):
        """A queue without a ring (a 2.x queue after the update) gets one at a
        maintenance pass. A new ring is attached to pgq.job_log under SHARE
        UPDATE EXCLUSIVE: an open reader of the rings does not hold the pass
        up (before, the ring was made as a partition, which took ACCESS
        EXCLUSIVE and had to wait for the reader); an open create_queue,
        which holds that lock too, makes the pass leave the ring to a later
        pass instead of waiting for it (without the check, the pass below
        waits until its statement_timeout)."""
        self.admin.execute("SELECT pgq.create_queue('old')")
        # The reader and the creator first: the maintenance worker's own
        # passes cannot give the ring back between the UPDATE and the pass
        # below.
        reader = self.connect(autocommit=False)
        reader.execute("SELECT count(*) FROM pgq.ring_jobs")  # ACCESS SHARE on pgq.job_log
        creator = self.connect(autocommit=False)
        creator.execute("SELECT pgq.create_queue('new')")  # SHARE UPDATE EXCLUSIVE till commit
        self.admin.execute("UPDATE pgq.queues SET ring_id = NULL WHERE name = 'old'")
        ring_of_old = "SELECT ring_id FROM pgq.queues WHERE name = 'old'"
        maintainer = self.connect()
        maintainer.execute("SET statement_timeout = '20s'")  # a pass that waited would fail
        maintainer.execute("SELECT pgq.maintain()")
        self.assertIsNone(self.scalar(ring_of_old), "a ring was made while a creation held the root")
        creator.commit()
        maintainer.execute("SELECT pgq.maintain()")
        reader.execute("SELECT 1")  # still open, the pass did not wait for it
        self.assertIsNotNone(self.scalar(ring_of_old), "the next pass gave the queue its ring")

    def print_unfinished(self):
        """Where each unfinished job is, for whoever reads the failure: its
        ring rows that the truncations left, its row, its dead-letter row,
        what pgq.jobs says."""
        where = {
            "ring rows": "SELECT tableoid::regclass, ctid, kind, attempt, lease_until, at, outcome,"
            " claimed_by, entry FROM pgq.job_log WHERE id = %s ORDER BY tableoid, ctid",
            "pgq.job_rows": "SELECT * FROM pgq.job_rows WHERE id = %s",
            "pgq.dead_jobs": "SELECT * FROM pgq.dead_jobs WHERE id = %s",
            "pgq.jobs": "SELECT * FROM pgq.jobs WHERE id = %s",
        }
        unfinished = self.admin.execute(
            "SELECT p.job FROM produced p LEFT JOIN outcome o USING (job) WHERE o.job IS NULL"
        ).fetchall()
        for (job,) in unfinished:
            print(f"unfinished job {job}:")
            for name, sql in where.items():
                for row in self.admin.execute(sql, (job,)).fetchall():
                    print(f"  {name}: {row}")
