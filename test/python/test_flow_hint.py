"""Claims never miss a ready job.

claim may skip index entries it knows are taken (a hint kept in shared
memory). These tests put a ready job *before* wherever such a hint could
point — an uncommitted enqueue that commits after later ids were claimed, a
higher priority, an earlier run_at, a released or retried job, a rolled-back
claim, an expired lease, a job that becomes due — and check that the very
next claim returns it. Each is a deterministic interleaving across a few
connections (explicit BEGIN/COMMIT, no sleeps); the last is a randomized
multi-connection run checked by invariants.

Runs like test_concurrency.py (same DSN, same fresh-extension setUp).
"""

import os
import random
import sys
import threading
import time

from test_concurrency import HANG, PgqTestCase


class NoMissedJobsTests(PgqTestCase):
    def claim(self, conn=None, n=1, **kwargs):
        args = "".join(f", {k} => %({k})s" for k in kwargs)
        return (conn or self.admin).execute(
            f"SELECT id, attempt FROM pgq.claim('q', %(n)s{args})", dict(n=n, **kwargs)
        ).fetchall()

    def complete(self, rows, conn=None):
        for job, attempt in rows:
            self.assertTrue(
                self.scalar("SELECT pgq.complete(%s, %s)", (job, attempt), conn=conn or self.admin)
            )

    def enqueue_n(self, count, **kwargs):
        return [self.enqueue(self.admin, "q", {"n": i}, **kwargs) for i in range(count)]

    def claim_and_complete(self, count, conn=None):
        rows = self.claim(conn, n=count)
        self.assertEqual(len(rows), count)
        self.complete(rows, conn)
        return [job for job, _ in rows]

    def test_an_enqueue_that_commits_late_is_claimed(self):
        """x gets a lower id than y but commits after y was claimed and
        completed: the next claim still finds x."""
        a = self.connect(autocommit=False)
        b = self.connect()
        c = self.connect()
        x = self.enqueue(a, "q", {"x": 1})  # A's transaction stays open
        y = self.enqueue(b, "q", {"y": 1})
        self.assertLess(x, y)
        rows = self.claim(c)
        self.assertEqual(rows, [(y, 1)])
        self.complete(rows, c)
        self.assertEqual(self.claim(c), [])
        a.commit()
        self.assertEqual(self.claim(c), [(x, 1)])

    def test_a_higher_priority_job_is_claimed_next(self):
        """After some claims moved past the first jobs, a new job of higher
        priority sorts before all of them and is claimed next."""
        self.enqueue_n(5)
        self.claim_and_complete(3)
        urgent = self.enqueue(self.admin, "q", {"urgent": 1}, priority=9)
        self.assertEqual(self.claim(), [(urgent, 1)])

    def test_an_earlier_run_at_is_claimed_next(self):
        """A new job whose run_at is an hour ago sorts before the jobs
        already claimed and the ones still pending: it is claimed next."""
        self.enqueue_n(5)
        self.claim_and_complete(3)
        early = self.enqueue(
            self.admin, "q", {"early": 1},
            run_at=self.scalar("SELECT now() - interval '1 hour'"),
        )
        self.assertEqual(self.claim(), [(early, 1)])

    def test_a_released_job_is_claimed_next(self):
        """release puts a job back in its old place in line, ahead of the
        jobs after it: the next claim returns it (same attempt number)."""
        jobs = self.enqueue_n(5)
        rows = self.claim(n=2)
        self.assertEqual([j for j, _ in rows], jobs[:2])
        self.assertTrue(self.scalar("SELECT pgq.release(%s, 1)", (jobs[0],)))
        self.assertEqual(self.claim(), [(jobs[0], 1)])

    def test_a_job_failed_with_retry_in_zero_is_claimed_next(self):
        """A priority-5 job failed with retry_in => '0' is ready again at
        once and, ahead of the pending priority-0 jobs, claimed next."""
        self.enqueue_n(5)
        top = self.enqueue(self.admin, "q", {"top": 1}, priority=5)
        self.assertEqual(self.claim(), [(top, 1)])
        self.claim_and_complete(2)
        self.assertEqual(
            self.scalar("SELECT pgq.fail(%s, 1, 'x', retry_in => '0')", (top,)), "retry"
        )
        self.assertEqual(self.claim(), [(top, 2)])

    def test_a_rolled_back_claim_is_claimable_again(self):
        """A claims job 1 and rolls back after B claimed job 2 meanwhile:
        job 1 is claimable right after the rollback, by anyone."""
        jobs = self.enqueue_n(5)
        a = self.connect(autocommit=False)
        b = self.connect()
        self.assertEqual(self.claim(a), [(jobs[0], 1)])
        self.assertEqual(self.claim(b), [(jobs[1], 1)])
        a.rollback()
        self.assertEqual(self.claim(b), [(jobs[0], 1)])
        # And a rollback with nothing claimed by anyone else meanwhile.
        self.assertEqual(self.claim(a), [(jobs[2], 1)])
        a.rollback()
        self.assertEqual(self.claim(a), [(jobs[2], 1)])
        a.commit()

    def test_one_transaction_over_more_queues_than_its_ledger_holds(self):
        """The transaction ledger keeps 64 queues apart and acts on the
        whole database past them (pg/ledger.h). 70 queues, in one
        transaction each time: jobs of higher priority than where every
        queue's hint stands are claimed next after the commit, and jobs
        locked by a rolled-back claim are claimed next after the rollback,
        in the 70th queue as in the first. (Every job has a dedupe key of its
        own: rows of pgq.job_rows, whose claims the hints guide; a queue's
        rings need none. A priority other than 0 no longer keeps a job a
        row once the maintenance gives the priority a ring.)"""
        queues = [f"many{i}" for i in range(70)]
        for q in queues:
            self.admin.execute("SELECT pgq.create_queue(%s)", (q,))
            self.enqueue(self.admin, q, {"first": 1}, priority=1, dedupe_key=f"{q}:first")
            # The hint moves past the job it claims.
            self.admin.execute("SELECT pgq.complete(id, attempt) FROM pgq.claim(%s, 1)", (q,))

        tx = self.connect(autocommit=False)
        urgent = {q: self.enqueue(tx, q, {"urgent": 1}, priority=9, dedupe_key=f"{q}:urgent")
                  for q in queues}
        tx.commit()
        for q in queues:
            self.assertEqual(self.admin.execute("SELECT id FROM pgq.claim(%s, 1)", (q,)).fetchall(),
                             [(urgent[q],)], f"{q}: a job enqueued before the hint was not claimed next")
            self.enqueue(self.admin, q, {"second": 1}, priority=1, dedupe_key=f"{q}:second")
            self.enqueue(self.admin, q, {"third": 1}, priority=1, dedupe_key=f"{q}:third")

        # Each queue has one running and two pending jobs now; tx claims the
        # first pending, then the next one (its hint passes the first, which
        # tx itself holds), and rolls back.
        pending = {q: [r[0] for r in self.admin.execute(
            "SELECT id FROM pgq.jobs j JOIN pgq.queues USING (queue_id)"
            " WHERE name = %s AND state = 'p' ORDER BY id", (q,)).fetchall()] for q in queues}
        for q in queues:
            tx.execute("SELECT pgq.claim(%s, 1)", (q,))
            tx.execute("SELECT pgq.claim(%s, 1)", (q,))
        tx.rollback()
        for q in queues:
            self.assertEqual(self.admin.execute("SELECT id FROM pgq.claim(%s, 1)", (q,)).fetchall(),
                             [(pending[q][0],)], f"{q}: a job locked by a rolled-back claim was skipped")

    def test_an_expired_lease_is_claimed_next(self):
        """A job whose 1 s lease expired is made pending by maintain() and,
        keeping its place in line, is the next claim's."""
        jobs = self.enqueue_n(5)
        self.assertEqual(self.claim(lease="1 s"), [(jobs[0], 1)])
        self.claim_and_complete(2)
        later = self.connect()
        later.execute("SET pgq.debug_clock_offset = 120")
        requeued = later.execute("SELECT expired_requeued FROM pgq.maintain()").fetchone()[0]
        self.assertEqual(requeued, 1)
        self.assertEqual(self.claim(later), [(jobs[0], 2)])

    def test_a_job_that_becomes_due_is_claimed_next(self):
        """A priority-5 job scheduled a minute ahead is not claimed while
        priority-0 jobs go by; once the clock passes its run_at it is
        claimed before the remaining priority-0 jobs."""
        self.enqueue_n(10)
        due_later = self.enqueue(
            self.admin, "q", {"later": 1}, priority=5,
            run_at=self.scalar("SELECT pgq.clock() + interval '60 s'"),
        )
        claimed = self.claim_and_complete(5)
        self.assertNotIn(due_later, claimed)
        later = self.connect()
        later.execute("SET pgq.debug_clock_offset = 120")
        self.assertEqual(self.claim(later), [(due_later, 1)])

    def test_randomized_producers_and_consumers_miss_nothing(self):
        """3 producers enqueue 3,000 jobs (priority 0 or 5, run_at in the
        past) in transactions of 1-20 jobs, each producer interleaving two
        connections at random so that some transactions stay open while
        others commit (lower ids committing after higher ones); 3 consumers
        claim 1-5 at a time and complete concurrently. Afterwards each drain
        claim of 1000 returns all that is pending (up to 1000), every job is
        completed exactly once and pgq.jobs is empty."""
        seed = int(os.environ.get("PGQ_TEST_SEED", time.time_ns() % 1_000_000_007))
        try:
            self._randomized_run(seed)
        except BaseException:
            print(f"\n{self.id()}: failed with PGQ_TEST_SEED={seed}", file=sys.stderr)
            raise

    def _randomized_run(self, seed):
        producers, consumers, per_producer = 3, 3, 1000
        note = f"seed {seed}"
        pconns = [[self.connect(autocommit=False) for _ in range(2)] for _ in range(producers)]
        cconns = [self.connect() for _ in range(consumers)]
        barrier = threading.Barrier(producers + consumers)
        producing_done = threading.Event()

        def produce(p):
            rng = random.Random(f"{seed}/producer{p}")
            conns = pconns[p]
            open_tx = [None, None]  # per connection: [jobs still to enqueue, ids]
            planned, committed = 0, []
            barrier.wait(HANG)
            while planned < per_producer or any(open_tx):
                k = rng.randrange(2)
                if open_tx[k] is None:
                    if planned >= per_producer:
                        continue
                    size = min(rng.randint(1, 20), per_producer - planned)
                    planned += size
                    open_tx[k] = [size, []]
                tx = open_tx[k]
                tx[1].append(self.scalar(
                    "SELECT pgq.enqueue('q', '{}', run_at => now() - make_interval(secs => %s),"
                    " priority => %s)",
                    (rng.randint(0, 3600), rng.choice((0, 5))), conn=conns[k],
                ))
                tx[0] -= 1
                if tx[0] == 0:
                    conns[k].commit()
                    committed += tx[1]
                    open_tx[k] = None
            return committed

        def consume(c):
            rng = random.Random(f"{seed}/consumer{c}")
            conn = cconns[c]
            claimed, bad = [], []
            barrier.wait(HANG)
            while not producing_done.is_set():
                n = rng.randint(1, 5)
                rows = conn.execute("SELECT id, attempt FROM pgq.claim('q', %s)", (n,)).fetchall()
                if len(rows) > n:
                    bad.append(("claim returned more than n", n, rows))
                if rows:
                    done = self.scalar(
                        "SELECT pgq.complete_many(%s::bigint[], %s::integer[])",
                        ([r[0] for r in rows], [r[1] for r in rows]), conn=conn,
                    )
                    if done != len(rows):
                        bad.append(("complete_many", rows, done))
                    claimed += [r[0] for r in rows]
            return claimed, bad

        ptasks = [self.spawn(lambda p=p: produce(p), f"producer{p}") for p in range(producers)]
        ctasks = [self.spawn(lambda c=c: consume(c), f"consumer{c}") for c in range(consumers)]
        enqueued = []
        try:
            for t in ptasks:
                enqueued += t.value(120)
        finally:
            producing_done.set()
        claimed = []
        for t in ctasks:
            ids, bad = t.value(60)
            self.assertEqual(bad, [], note)
            claimed += ids
        during = len(claimed)

        self.assertEqual(self.job_count("state = 'r'"), 0, note)
        while True:
            pending = self.job_count("state = 'p'")
            rows = self.claim(n=1000)
            self.assertEqual(len(rows), min(1000, pending), f"drain claim missed jobs, {note}")
            if not rows:
                break
            self.assertEqual(
                self.scalar("SELECT pgq.complete_many(%s::bigint[], %s::integer[])",
                            ([r[0] for r in rows], [r[1] for r in rows])),
                len(rows), note,
            )
            claimed += [r[0] for r in rows]

        self.assertEqual(len(enqueued), producers * per_producer, note)
        self.assertEqual(len(set(claimed)), len(claimed), f"a job was claimed twice, {note}")
        self.assertEqual(set(claimed), set(enqueued), note)
        self.assertEqual(self.job_count(), 0, note)
        self.assertGreater(during, 0, f"the consumers claimed nothing while producers ran, {note}")
