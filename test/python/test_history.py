"""History that stays bounded (issue 17): completed jobs kept for their
queue's keep_completed leave in bulk, by the rings of segments turning
(ADR 0015), never by row deletes.

100,000 jobs flow through a queue that keeps completed jobs for one minute,
2,500 every 5 seconds of pgq's clock (pgq.debug_clock_offset, so the test
needs no sleeping): enqueued, claimed and completed 500 at a time, then a
maintenance pass. The rows kept must stay within the jobs of the last
keep + one period (80 s here: 16 rounds), the table's size with them,
and not one row of history may be deleted one by one.
"""
from test_concurrency import PgqTestCase

ROUNDS = 40
PER_ROUND = 2500
STEP_SECONDS = 5
BATCH = 500
HISTORY = ("pgq.job_history_0", "pgq.job_history_1", "pgq.job_history_2", "pgq.job_history_3")


class HistoryTest(PgqTestCase):
    def history_size(self):
        return self.admin.execute(
            "SELECT sum(pg_total_relation_size(c))::bigint FROM unnest(%s::regclass[]) c",
            (list(HISTORY),)).fetchone()[0]

    def test_history_stays_bounded_while_100k_jobs_flow(self):
        a = self.admin
        a.execute("SELECT pgq.create_queue('flow', keep_completed => '1 minute')")
        a.execute("SET stats_fetch_consistency = none")
        kept, sizes = [], []
        for r in range(ROUNDS):
            a.execute(f"SET pgq.debug_clock_offset = '{r * STEP_SECONDS}s'")
            a.execute("SELECT pgq.enqueue_many('flow', array_agg(jsonb_build_object('n', g)))"
                      "  FROM generate_series(1, %s) g", (PER_ROUND,))
            for _ in range(PER_ROUND // BATCH):
                done = a.execute(
                    "WITH c AS (SELECT id, attempt FROM pgq.claim('flow', %s))"
                    " SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM c",
                    (BATCH,)).fetchone()[0]
                self.assertEqual(done, BATCH)
            a.execute("SELECT * FROM pgq.maintain()")
            kept.append(a.execute("SELECT count(*) FROM pgq.job_history").fetchone()[0])
            sizes.append(self.history_size())
        total = ROUNDS * PER_ROUND
        print(f"\n  history rows kept after each round: {kept}")
        print(f"  history bytes after each round: {sizes}")
        # The ring holds at most the last keep + period (80 s: 16 rounds of
        # 5 s) plus the round in hand; without turning it would hold all.
        bound = (80 // STEP_SECONDS + 2) * PER_ROUND
        self.assertLessEqual(max(kept), bound, kept)
        self.assertLess(kept[-1], total / 2)
        # Space comes back with the rows: the last rounds take no more room
        # than the rounds in which the ring first filled (TRUNCATE, not a
        # table that only grows until VACUUM).
        self.assertLessEqual(max(sizes[-10:]), max(sizes[:20]) * 1.25, sizes)
        # Every job of the last minute is still there, with its state.
        shown, before = 0, None
        while True:
            page = a.execute("SELECT count(*), min(id) FROM pgq.list_jobs('flow', 'done', 10000, %s)",
                             (before,)).fetchone()
            if page[0] == 0:
                break
            shown, before = shown + page[0], page[1]
        recent = a.execute(
            "SELECT count(*) FROM pgq.job_history WHERE finished_at > pgq.clock() - interval '1 minute'"
        ).fetchone()[0]
        print(f"  shown {shown}, finished within the minute {recent}")
        self.assertEqual(shown, recent)
        self.assertGreaterEqual(shown, 60 // STEP_SECONDS * PER_ROUND)
        # Not one history row was deleted one by one.
        a.execute("SELECT pg_stat_force_next_flush()")
        a.execute("SELECT 1")
        deleted = a.execute(
            "SELECT coalesce(sum(n_tup_del), 0) FROM pg_stat_user_tables"
            " WHERE relid = ANY (%s::regclass[])", (list(HISTORY),)).fetchone()[0]
        self.assertEqual(deleted, 0)
        per_1000 = sizes[-1] * 1000 // max(kept[-1], 1)
        print(f"  bytes per 1,000 kept jobs (table + indexes): {per_1000}")
