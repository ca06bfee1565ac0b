"""Clean stress (issue 7): 2 producers enqueue 60,000 jobs over 3 queues
while 8 worker connections claim and complete them; every job is completed
exactly once and none is left.

Each worker records what it completes in a ledger table whose primary key is
the job id, in the same transaction as the completion, so a job delivered
and completed twice would be a duplicate-key error, not a silently merged
set entry. PGQ_STRESS_JOBS sets the size (the longer profile:
`make test PROFILE=long`, 600,000 jobs).

Runs like test_concurrency.py (same DSN, same fresh-extension setUp).
"""

import os
import threading

from test_concurrency import HANG, PgqTestCase

JOBS = int(os.environ.get("PGQ_STRESS_JOBS", "60000"))
QUEUES = ["mail", "sms", "push"]
PRODUCERS = 2
WORKERS = 8
BATCH = 100  # jobs per enqueue_many


class StressTest(PgqTestCase):
    def test_every_job_completed_exactly_once(self):
        self.assertEqual(JOBS % (PRODUCERS * BATCH), 0)
        for q in QUEUES:
            self.admin.execute("SELECT pgq.create_queue(%s)", (q,))
        self.admin.execute("CREATE TABLE ledger (job bigint PRIMARY KEY, queue text NOT NULL)")
        produced_all = threading.Event()

        def produce(k):
            conn = self.connect()
            ids = 0
            for b in range(JOBS // PRODUCERS // BATCH):
                q = QUEUES[(k + b) % len(QUEUES)]
                ids += conn.execute(
                    "SELECT count(*) FROM pgq.enqueue_many(%s,"
                    " array_fill(jsonb_build_object('p', %s::int, 'b', %s::int), ARRAY[%s]))",
                    (q, k, b, BATCH),
                ).fetchone()[0]
            return ids

        def work(w):
            conn = self.connect(autocommit=False)
            done = 0
            idle = 0
            turn = w
            # Stops after three empty rounds over every queue once the
            # producers are done.
            while idle < 3 * len(QUEUES):
                turn += 1
                q = QUEUES[turn % len(QUEUES)]
                rows = conn.execute(
                    "SELECT id, attempt FROM pgq.claim(%s, 10)", (q,)
                ).fetchall()
                conn.commit()
                if not rows:
                    if produced_all.is_set():
                        idle += 1
                    continue
                idle = 0
                ids = [r[0] for r in rows]
                conn.execute(
                    "INSERT INTO ledger (job, queue) SELECT unnest(%s::bigint[]), %s", (ids, q)
                )
                completed = conn.execute(
                    "SELECT pgq.complete_many(%s::bigint[], %s::int[])",
                    (ids, [r[1] for r in rows]),
                ).fetchone()[0]
                if completed != len(rows):
                    raise AssertionError(f"complete_many completed {completed} of {len(rows)}")
                conn.commit()
                done += len(rows)
            return done

        producers = [self.spawn(lambda k=k: produce(k), f"producer{k}") for k in range(PRODUCERS)]
        workers = [self.spawn(lambda w=w: work(w), f"worker{w}") for w in range(WORKERS)]
        produced = sum(p.value(timeout=HANG * 40) for p in producers)
        produced_all.set()
        completed = sum(w.value(timeout=HANG * 40) for w in workers)

        self.assertEqual(produced, JOBS)
        self.assertEqual(completed, JOBS)
        self.assertEqual(self.scalar("SELECT count(*) FROM ledger"), JOBS)
        self.assertEqual(self.job_count(), 0, "jobs left in pgq.jobs")
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.dead_jobs"), 0)
        # Every job id the sequence handed out is in the ledger.
        self.assertEqual(
            self.scalar("SELECT count(*) FROM generate_series(1, %s) g LEFT JOIN ledger l"
                        " ON l.job = g WHERE l.job IS NULL", (JOBS,)),
            0,
        )
        self.assertEqual(
            self.scalar("SELECT sum(done_recent) FROM pgq.queue_stats"), JOBS
        )
