"""Multi-connection tests of flow control: FIFO groups and queue rate limits.

Runs like test_concurrency.py (same DSN, same fresh-extension setUp, whose
base class and helpers it reuses). FIFO groups (pgq.enqueue's group_key):
jobs sharing a key run one at a time in enqueue order while other groups
and ungrouped jobs run in parallel. Rate limits (create_queue/alter_queue
rate_limit): a token bucket of capacity max(1, r) refilled at r tokens a
second, shared by every connection.

Invariants are checked by the database itself where it can (a unique key
that two concurrently running jobs of one group would violate), never by a
sleep.
"""

import random
import threading
import time

from psycopg import errors
from psycopg.types.json import Jsonb

from test_concurrency import HANG, PgqTestCase


class FlowTestCase(PgqTestCase):
    def claim(self, conn=None, queue="q", n=1, **kwargs):
        """Claims and returns [(id, attempt), ...] in the order claim gave them."""
        args = "".join(f", {k} => %({k})s" for k in kwargs)
        return (conn or self.admin).execute(
            f"SELECT id, attempt FROM pgq.claim(%(queue)s, %(n)s{args})",
            dict(queue=queue, n=n, **kwargs),
        ).fetchall()

    def complete(self, job_id, attempt, conn=None):
        return self.scalar("SELECT pgq.complete(%s, %s)", (job_id, attempt), conn=conn)

    def assert_sqlstate(self, sqlstate, sql, params=None, conn=None):
        with self.assertRaises(errors.Error, msg=sql) as cm:
            (conn or self.admin).execute(sql, params)
        self.assertEqual(cm.exception.sqlstate, sqlstate, f"{sql} {params}: {cm.exception}")


class GroupTests(FlowTestCase):
    def test_claim_returns_only_the_head_of_each_group(self):
        """Only the oldest job of a group is claimable; a higher priority
        later in the group does not jump ahead; ungrouped jobs and other
        groups' heads come in the same claim; jobs waiting behind a head
        count as ready in queue_stats."""
        def e(tag, **kwargs):
            return self.enqueue(self.admin, "q", {"job": tag}, **kwargs)

        g1_1 = e("g1#1", group_key="g1")
        g2_1 = e("g2#1", group_key="g2")
        e("g1#2", group_key="g1", priority=9)
        free = e("free")
        e("g2#2", group_key="g2")
        e("g1#3", group_key="g1")

        self.assertEqual(self.claim(n=10), [(g1_1, 1), (g2_1, 1), (free, 1)])
        # The heads are running: nothing else of g1 or g2 is claimable.
        self.assertEqual(self.claim(n=10), [])
        self.assertEqual(
            self.admin.execute(
                "SELECT ready, scheduled, running FROM pgq.queue_stats WHERE queue = 'q'"
            ).fetchone(),
            (3, 0, 3),
        )

    def test_group_key_bounds(self):
        """group_key is 1..512 bytes (counted in bytes, not characters);
        '' or longer is 22023 and inserts nothing; NULL means no group."""
        for key in ("", "x" * 513, "\u00e9" * 257):  # the last: 257 chars, 514 bytes
            with self.subTest(key_bytes=len(key.encode())):
                self.assert_sqlstate(
                    "22023", "SELECT pgq.enqueue('q', '{}', group_key => %s)", (key,)
                )
        self.assertEqual(self.job_count(), 0)
        a = self.enqueue(self.admin, "q", {}, group_key="x" * 512)
        b = self.enqueue(self.admin, "q", {}, group_key="\u00e9" * 256)  # 512 bytes
        # NULL is no group: both ungrouped jobs run at once.
        c = self.enqueue(self.admin, "q", {}, group_key=None)
        d = self.enqueue(self.admin, "q", {}, group_key=None)
        self.assertEqual(sorted(i for i, _ in self.claim(n=10)), [a, b, c, d])

    def test_complete_unblocks_the_next_job_when_it_commits(self):
        """The next job of a group becomes claimable with the commit of its
        head's complete, not before; claims never wait meanwhile."""
        g = [self.enqueue(self.admin, "q", {"seq": s}, group_key="g") for s in (1, 2, 3)]
        a = self.connect(autocommit=False)
        b = self.connect()
        b.execute("SET statement_timeout = '5s'")  # a claim that waits fails, not hangs

        self.assertEqual(self.claim(a, n=5), [(g[0], 1)])
        a.commit()
        self.assertEqual(self.claim(b, n=5), [])
        self.assertTrue(self.complete(g[0], 1, conn=a))  # A's transaction stays open
        self.assertEqual(self.claim(b, n=5), [], "next job claimable before the complete committed")
        a.commit()
        self.assertEqual(self.claim(b, n=5), [(g[1], 1)])
        self.assertEqual(self.claim(b, n=5), [])
        self.assertTrue(self.complete(g[1], 1, conn=b))
        self.assertEqual(self.claim(b, n=5), [(g[2], 1)])
        a.rollback()

    def test_a_retrying_head_keeps_its_group_blocked(self):
        """A head failed with retry goes back to pending with a backoff and
        still blocks its group, also once it is due again: it is claimed
        again before the next job, which runs only after it completes."""
        g1 = self.enqueue(self.admin, "q", {"seq": 1}, group_key="g")
        g2 = self.enqueue(self.admin, "q", {"seq": 2}, group_key="g")
        h1 = self.enqueue(self.admin, "q", {"seq": 1}, group_key="h")

        self.assertEqual(self.claim(n=10), [(g1, 1), (h1, 1)])
        self.assertEqual(
            self.scalar("SELECT pgq.fail(%s, 1, 'x', retry_in => '1 hour')", (g1,)), "retry"
        )
        self.assertEqual(self.claim(n=10), [], "a job behind a retrying head was claimed")
        self.assertTrue(self.complete(h1, 1))
        self.assertEqual(self.claim(n=10), [])

        later = self.connect()
        later.execute("SET pgq.debug_clock_offset = 7200")  # the retry is due
        self.assertEqual(self.claim(later, n=10), [(g1, 2)])
        self.assertEqual(self.claim(later, n=10), [])
        self.assertTrue(self.complete(g1, 2, conn=later))
        self.assertEqual(self.claim(later, n=10), [(g2, 1)])

    def test_a_head_scheduled_for_later_blocks_its_group(self):
        """A pending head that is not due yet holds back the jobs enqueued
        after it in its group, even those that are due."""
        k1 = self.enqueue(self.admin, "q", {"seq": 1}, group_key="k",
                          run_at=self.scalar("SELECT pgq.clock() + interval '1 hour'"))
        k2 = self.enqueue(self.admin, "q", {"seq": 2}, group_key="k")
        self.assertEqual(self.claim(n=10), [])
        later = self.connect()
        later.execute("SET pgq.debug_clock_offset = 7200")
        self.assertEqual(self.claim(later, n=10), [(k1, 1)])
        self.assertTrue(self.complete(k1, 1, conn=later))
        self.assertEqual(self.claim(later, n=10), [(k2, 1)])

    def test_a_dead_head_unblocks_the_next_job(self):
        """A head that goes to dead-letter, by exhausting its attempts or by
        being cancelled while pending, lets the next job of its group run."""
        g1 = self.enqueue(self.admin, "q", {"seq": 1}, group_key="g", max_attempts=1)
        g2 = self.enqueue(self.admin, "q", {"seq": 2}, group_key="g")
        self.assertEqual(self.claim(n=10), [(g1, 1)])
        self.assertEqual(self.scalar("SELECT pgq.fail(%s, 1, 'boom')", (g1,)), "dead")
        self.assertEqual(self.claim(n=10), [(g2, 1)])

        k1 = self.enqueue(self.admin, "q", {"seq": 1}, group_key="k")
        k2 = self.enqueue(self.admin, "q", {"seq": 2}, group_key="k")
        self.assertTrue(self.scalar("SELECT pgq.cancel(%s)", (k1,)))
        self.assertEqual(self.claim(n=10), [(k2, 1)])
        self.assertEqual(
            self.admin.execute("SELECT id, reason FROM pgq.dead_jobs ORDER BY id").fetchall(),
            [(g1, "exhausted"), (k1, "cancelled")],
        )

    def test_cancel_of_a_job_behind_the_head(self):
        """A job waiting behind its head can be cancelled; it never runs and
        the job after it follows the head."""
        g = [self.enqueue(self.admin, "q", {"seq": s}, group_key="g") for s in (1, 2, 3)]
        self.assertEqual(self.claim(n=10), [(g[0], 1)])
        self.assertTrue(self.scalar("SELECT pgq.cancel(%s)", (g[1],)))
        self.assertEqual(self.claim(n=10), [])
        self.assertTrue(self.complete(g[0], 1))
        self.assertEqual(self.claim(n=10), [(g[2], 1)])
        self.assertTrue(self.complete(g[2], 1))
        self.assertEqual(self.claim(n=10), [])
        self.assertEqual(self.job_count(), 0)
        self.assertEqual(
            self.admin.execute("SELECT id, reason FROM pgq.dead_jobs").fetchall(),
            [(g[1], "cancelled")],
        )

    def test_groups_run_one_at_a_time_in_order_under_concurrency(self):
        """8 workers claim 1-3 jobs at a time while 2 producers enqueue 20
        groups x 30 jobs. The database proves the invariants: a worker
        inserts its job's group into flow_running (primary key) before doing
        the work and deletes it before completing, so two jobs of one group
        running at once is a unique violation; flow_done, written in the
        complete's transaction, gives the completion order of each group."""
        groups, per_group, workers, producers = 20, 30, 8, 2
        total = groups * per_group
        self.admin.execute("DROP TABLE IF EXISTS flow_running, flow_ledger, flow_done")
        self.admin.execute("CREATE TABLE flow_running (g text PRIMARY KEY)")
        self.admin.execute(
            "CREATE TABLE flow_ledger (n bigserial PRIMARY KEY, g text, seq int, job bigint,"
            " worker int)"
        )
        self.admin.execute(
            "CREATE TABLE flow_done (n bigserial PRIMARY KEY, g text, seq int, job bigint UNIQUE)"
        )
        barrier = threading.Barrier(workers + producers)
        finished = threading.Event()
        lock = threading.Lock()
        completed = [0]
        deadline = time.monotonic() + 60

        def produce(conn, p):
            # Each group has one producer, so its enqueue order is seq order;
            # the producer interleaves its groups.
            mine = [f"g{g:02d}" for g in range(groups) if g % producers == p]
            ids = {}
            barrier.wait(HANG)
            for seq in range(per_group):
                for g in mine:
                    ids[(g, seq)] = self.enqueue(conn, "q", {"g": g, "seq": seq}, group_key=g)
            return ids

        def work(conn, w):
            rng = random.Random(w)
            problems, claims = [], 0
            barrier.wait(HANG)
            while not finished.is_set() and time.monotonic() < deadline:
                rows = conn.execute(
                    "SELECT id, attempt, payload->>'g', (payload->>'seq')::int"
                    "  FROM pgq.claim('q', %s)", (rng.randint(1, 3),)
                ).fetchall()
                if not rows:
                    continue
                claims += 1
                if len({r[2] for r in rows}) != len(rows):
                    problems.append(("one claim returned two jobs of a group", rows))
                for job, attempt, g, seq in rows:
                    try:
                        conn.execute("INSERT INTO flow_running (g) VALUES (%s)", (g,))
                    except errors.UniqueViolation:
                        problems.append(("two jobs of a group ran at once", g, seq, job))
                    conn.execute(
                        "INSERT INTO flow_ledger (g, seq, job, worker) VALUES (%s, %s, %s, %s)",
                        (g, seq, job, w),
                    )
                    conn.execute("DELETE FROM flow_running WHERE g = %s", (g,))
                    with conn.transaction():
                        if not self.complete(job, attempt, conn=conn):
                            problems.append(("complete returned false", g, seq, job, attempt))
                        conn.execute(
                            "INSERT INTO flow_done (g, seq, job) VALUES (%s, %s, %s)", (g, seq, job)
                        )
                    with lock:
                        completed[0] += 1
                        if completed[0] >= total:
                            finished.set()
            return problems, claims

        pconns = [self.connect() for _ in range(producers)]
        wconns = [self.connect() for _ in range(workers)]
        ptasks = [self.spawn(lambda c=c, p=p: produce(c, p), f"producer{p}")
                  for p, c in enumerate(pconns)]
        wtasks = [self.spawn(lambda c=c, w=w: work(c, w), f"worker{w}")
                  for w, c in enumerate(wconns)]
        enqueued = {}
        for t in ptasks:
            enqueued.update(t.value(120))
        results = [t.value(90) for t in wtasks]

        for problems, _ in results:
            self.assertEqual(problems, [])
        self.assertTrue(finished.is_set(), f"only {completed[0]} of {total} jobs completed")
        busy = sum(1 for _, claims in results if claims)
        self.assertGreaterEqual(busy, 2, "one worker did it all")
        self.assertEqual(len(enqueued), total)

        done = self.admin.execute("SELECT g, seq, job FROM flow_done ORDER BY n").fetchall()
        self.assertEqual(len(done), total, "a job was completed twice or never")
        self.assertEqual({(g, seq): job for g, seq, job in done}, enqueued)
        by_group = {}
        for g, seq, _ in done:
            by_group.setdefault(g, []).append(seq)
        for g, seqs in by_group.items():
            self.assertEqual(seqs, list(range(per_group)), f"group {g} completed out of order")
        ledger = self.admin.execute("SELECT g, seq FROM flow_ledger ORDER BY n").fetchall()
        self.assertEqual(len(ledger), total, "a job ran twice")
        for g in by_group:
            self.assertEqual([s for gg, s in ledger if gg == g], list(range(per_group)),
                             f"group {g} ran out of order")
        self.assertEqual(self.job_count(), 0)
        self.assertEqual(self.scalar("SELECT count(*) FROM flow_running"), 0)


class RateLimitTests(FlowTestCase):
    def test_rate_limit_holds_across_connections(self):
        """8 connections claiming as fast as they can from a queue limited to
        50 claims/s get about 50 a second in total: never more than the
        bucket allows, and not starved either."""
        rate, seconds, threads = 50, 10.0, 8
        self.admin.execute("SELECT pgq.create_queue('rl', rate_limit => %s)", (rate,))
        self.admin.execute(
            "SELECT pgq.enqueue_many('rl', array_fill('{}'::jsonb, ARRAY[5000]))"
        )
        conns = [self.connect() for _ in range(threads)]
        barrier = threading.Barrier(threads)

        def work(conn):
            claimed, too_big, first, last = 0, [], None, None
            barrier.wait(HANG)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                # The span is measured on the wall clock, the one the
                # server's token bucket runs on (GetCurrentTimestamp).
                started = time.time()
                rows = conn.execute("SELECT id, attempt FROM pgq.claim('rl', 5)").fetchall()
                last = time.time()
                first = first if first is not None else started
                if len(rows) > 5:
                    too_big.append(len(rows))
                if rows:
                    conn.execute(
                        "SELECT pgq.complete_many(%s::bigint[], %s::integer[])",
                        ([r[0] for r in rows], [r[1] for r in rows]),
                    )
                    claimed += len(rows)
            return claimed, too_big, first, last

        results = [t.value(seconds + 30) for t in
                   [self.spawn(lambda c=c: work(c), f"claimer{i}") for i, c in enumerate(conns)]]
        total = sum(r[0] for r in results)
        for r in results:
            self.assertEqual(r[1], [], "a claim returned more than n")
        # The bound: claims <= rate x time + burst. Every token the
        # server handed out accrued between the first claim's start and the
        # last claim's end as this client saw them (the server's calls happen
        # inside that span), and the bucket starts full with one burst
        # (= rate). Lower bound: 80% of rate x 10 s.
        span = max(r[3] for r in results) - min(r[2] for r in results)
        upper = rate * span + rate
        self.assertLessEqual(total, upper, f"{total} claims in {span:.2f} s at rate {rate}")
        self.assertGreaterEqual(total, 0.8 * rate * seconds, f"starved: {total} in {span:.2f} s")
        self.assertEqual(self.job_count(), 5000 - total)

    def test_claim_gets_at_most_the_tokens_available(self):
        """A claim gets no more jobs than the bucket has tokens: with
        rate_limit 0.02 (one token every 50 s, a bucket of one) a claim of 10
        gets 1 and an immediate second claim none although 9 are ready, however
        slow the machine; rate_limit => 0 removes the limit. With rate_limit 2
        the full bucket holds 2."""
        self.admin.execute("SELECT pgq.create_queue('rl', rate_limit => 0.02)")
        self.admin.execute("SELECT pgq.enqueue_many('rl', array_fill('{}'::jsonb, ARRAY[10]))")
        self.assertEqual(len(self.claim(queue="rl", n=10)), 1)
        self.assertEqual(self.claim(queue="rl", n=10), [])
        self.assertEqual(self.scalar("SELECT ready FROM pgq.queue_stats WHERE queue = 'rl'"), 9)
        self.admin.execute("SELECT pgq.alter_queue('rl', rate_limit => 0)")
        self.assertEqual(len(self.claim(queue="rl", n=10)), 9)
        self.admin.execute("SELECT pgq.create_queue('rl2', rate_limit => 2)")
        self.admin.execute("SELECT pgq.enqueue_many('rl2', array_fill('{}'::jsonb, ARRAY[10]))")
        self.assertEqual(len(self.claim(queue="rl2", n=10)), 2)

    def test_alter_queue_sets_a_limit(self):
        """alter_queue(rate_limit => r) limits an unlimited queue: at 0.5 a
        second the bucket holds one token, so two immediate claims of 10 get
        at most one job between them (whether the new bucket starts full is
        not asserted here)."""
        self.admin.execute("SELECT pgq.enqueue_many('q', array_fill('{}'::jsonb, ARRAY[10]))")
        self.assertEqual(len(self.claim(n=3)), 3)
        self.admin.execute("SELECT pgq.alter_queue('q', rate_limit => 0.5)")
        got = len(self.claim(n=10)) + len(self.claim(n=10))
        self.assertLessEqual(got, 1, "claims of a queue limited to 0.5/s")

    def test_waiting_claim_gets_a_job_when_a_token_is_due(self):
        """A claim with wait on a queue whose bucket is empty (jobs ready,
        no token) returns a job once a token is due (after ~2 s at rate 0.5),
        not an empty set at the end of its wait."""
        self.admin.execute("SELECT pgq.create_queue('rl', rate_limit => 0.5)")
        self.admin.execute("SELECT pgq.enqueue_many('rl', array_fill('{}'::jsonb, ARRAY[3]))")
        conn = self.connect()
        conn.execute("SET statement_timeout = '10s'")
        self.assertEqual(len(self.claim(conn, queue="rl", n=1)), 1)
        self.assertEqual(self.claim(conn, queue="rl", n=1), [], "premise: the bucket is empty")
        self.assertEqual(len(self.claim(conn, queue="rl", n=1, wait="6 s")), 1)

    def test_bad_rate_limits(self):
        """create_queue takes a rate_limit > 0 and finite; alter_queue also
        takes 0 (no limit). Anything else is 22023 and changes nothing."""
        for value in ("0", "-1", "NaN", "Infinity", "-Infinity"):
            with self.subTest(create=value):
                self.assert_sqlstate(
                    "22023", "SELECT pgq.create_queue('bad', rate_limit => %s::real)", (value,)
                )
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.queues WHERE name = 'bad'"), 0)

        self.admin.execute("SELECT pgq.create_queue('rl', rate_limit => 1)")
        for value in ("-1", "NaN", "Infinity", "-Infinity"):
            with self.subTest(alter=value):
                self.assert_sqlstate(
                    "22023", "SELECT pgq.alter_queue('rl', rate_limit => %s::real)", (value,)
                )
        # The limit of 1 is still in force.
        self.admin.execute("SELECT pgq.enqueue_many('rl', array_fill('{}'::jsonb, ARRAY[3]))")
        self.assertEqual(len(self.claim(queue="rl", n=3)), 1)
        # NULL: unlimited at create, unchanged at alter.
        self.admin.execute("SELECT pgq.create_queue('free', rate_limit => NULL)")
        self.admin.execute("SELECT pgq.enqueue_many('free', array_fill('{}'::jsonb, ARRAY[3]))")
        self.assertEqual(len(self.claim(queue="free", n=3)), 3)
        # At most one token came back since (rate 1, bucket of 1); without
        # the limit both remaining jobs would come.
        self.admin.execute("SELECT pgq.alter_queue('rl', max_attempts => 3, rate_limit => NULL)")
        got = len(self.claim(queue="rl", n=3))
        self.assertLessEqual(got, 1, "alter with NULL lifted the limit")
