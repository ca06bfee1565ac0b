"""queue_stats.done_recent while maintenance moves the completions counted
in shared memory to pgq.finished: no reader sees them in neither place, and
a flush that rolls back loses none (they leave shared memory when the
flushing transaction commits)."""
from test_concurrency import PgqTestCase


class DoneRecentTest(PgqTestCase):
    def done(self, conn):
        return conn.execute("SELECT done_recent FROM pgq.queue_stats WHERE queue = 'q'").fetchone()[0]

    def setUp(self):
        super().setUp()
        # No maintenance worker in this database while the test flushes by
        # hand (it would flush the counts first).
        self.admin.execute("ALTER SYSTEM SET pgq.databases = 'postgres'")
        self.admin.execute("SELECT pg_reload_conf()")
        self.wait_for("the maintenance worker to leave", lambda: self.admin.execute(
            "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'pgq maintenance'"
            "   AND datname = current_database()").fetchone()[0])

    def tearDown(self):
        self.admin.execute("ALTER SYSTEM RESET pgq.databases")
        self.admin.execute("SELECT pg_reload_conf()")
        super().tearDown()

    def test_a_flush_in_progress_or_rolled_back_keeps_every_completion(self):
        self.admin.execute("SELECT pgq.enqueue_many('q', array_fill('{}'::jsonb, ARRAY[3]))")
        # One at a time: pgq.complete counts in shared memory.
        self.admin.execute("SELECT pgq.complete(id, attempt) FROM pgq.claim('q', 3)")
        self.assertEqual(self.admin.execute("SELECT pgq.unflushed_completions(queue_id)"
                                            "  FROM pgq.queues WHERE name = 'q'").fetchone()[0], 3)
        flusher = self.connect(autocommit=False)
        flusher.execute("SELECT * FROM pgq.maintain()")  # writes pgq.finished, not committed
        self.assertEqual(self.done(self.admin), 3, "a reader saw the counts nowhere")
        flusher.rollback()
        self.assertEqual(self.done(self.admin), 3, "a rolled-back flush lost the counts")
        flusher.execute("SELECT * FROM pgq.maintain()")
        flusher.commit()
        self.assertEqual(self.done(self.admin), 3, "a committed flush counted twice")
        self.assertEqual(self.admin.execute("SELECT pgq.unflushed_completions(queue_id)"
                                            "  FROM pgq.queues WHERE name = 'q'").fetchone()[0], 0)

    def unflushed(self):
        return self.admin.execute("SELECT pgq.unflushed_completions(queue_id)"
                                  "  FROM pgq.queues WHERE name = 'q'").fetchone()[0]

    def finished_rows(self):
        return self.admin.execute("SELECT COALESCE(sum(jobs), 0) FROM pgq.finished").fetchone()[0]

    def complete_singly(self, n):
        self.admin.execute("SELECT pgq.enqueue_many('q', array_fill('{}'::jsonb, ARRAY[%s]))", (n,))
        self.admin.execute("SELECT pgq.complete(id, attempt) FROM pgq.claim('q', %s)", (n,))

    def test_two_flushers_never_write_the_same_completions(self):
        self.complete_singly(4)
        first = self.connect(autocommit=False)
        first.execute("SELECT * FROM pgq.maintain()")  # writes 4, not committed yet
        # A second flusher meanwhile (the worker, or someone's pgq.maintain())
        # leaves the queue to the first.
        self.admin.execute("SELECT * FROM pgq.maintain()")
        self.assertEqual(self.finished_rows(), 0)
        self.assertEqual(self.done(self.admin), 4)
        # Completions counted while the first flush is open are flushed by a
        # later pass of the same transaction, not written again with the first ones.
        self.complete_singly(2)
        self.admin.execute("SELECT * FROM pgq.maintain()")
        self.assertEqual(self.done(self.admin), 6)
        first.execute("SELECT * FROM pgq.maintain()")
        first.commit()
        self.assertEqual((self.done(self.admin), self.finished_rows(), self.unflushed()), (6, 6, 0))
        # Released: another flusher takes the next ones.
        self.complete_singly(1)
        self.admin.execute("SELECT * FROM pgq.maintain()")
        self.assertEqual((self.done(self.admin), self.finished_rows(), self.unflushed()), (7, 7, 0))

    def test_a_flusher_that_dies_releases_its_queues(self):
        self.complete_singly(3)
        first = self.connect(autocommit=False)
        first.execute("SELECT * FROM pgq.maintain()")
        pid = first.info.backend_pid
        self.admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        self.wait_for("the flusher to exit", lambda: self.scalar(
            "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = %s", (pid,)))
        self.assertEqual((self.done(self.admin), self.unflushed()), (3, 3))
        self.admin.execute("SELECT * FROM pgq.maintain()")
        self.assertEqual((self.done(self.admin), self.finished_rows(), self.unflushed()), (3, 3, 0))

    def test_completions_reach_pgq_finished_as_one_row_per_queue_and_pass(self):
        # A public benchmark harness found one pgq.finished row per
        # complete_many call (issue 16): 108,123 rows for 128,127 jobs.
        # complete and complete_many both count in shared memory; a pass
        # writes one row for the queue, however many completed.
        self.admin.execute("SELECT pgq.enqueue_many('q', array_fill('{}'::jsonb, ARRAY[400]))")
        worker = self.connect()
        for _ in range(200):
            worker.execute("SELECT pgq.complete_many(array_agg(id), array_agg(attempt))"
                           "  FROM pgq.claim('q', 1)")
            worker.execute("SELECT pgq.complete(id, attempt) FROM pgq.claim('q', 1)")
        self.assertEqual(self.admin.execute(
            "SELECT count(*) FROM pgq.finished").fetchone()[0], 0, "a completion wrote a row")
        self.assertEqual(self.done(self.admin), 400)
        self.admin.execute("SELECT * FROM pgq.maintain()")
        self.assertEqual(self.admin.execute(
            "SELECT count(*), sum(jobs) FROM pgq.finished").fetchone(), (1, 400))
        self.assertEqual(self.done(self.admin), 400)

    def test_a_reader_agrees_with_its_snapshot_of_pgq_finished(self):
        """done_recent is exact whenever a flush commits (issue 16): the
        count in shared memory follows the reader's snapshot, so a snapshot
        taken before the flush committed (which does not see its rows) still
        counts those completions, and one taken after counts them once."""
        self.complete_singly(5)
        reader = self.connect(autocommit=False)
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        self.assertEqual(self.done(reader), 5)  # its snapshot is taken here
        self.admin.execute("SELECT * FROM pgq.maintain()")  # the flush commits
        self.assertEqual(self.finished_rows(), 5)
        self.assertEqual(self.done(reader), 5, "a snapshot from before the flush lost its count")
        reader.commit()
        self.assertEqual(self.done(reader), 5, "a snapshot from after the flush counted it twice")
        # A second flush: the first is now behind every new snapshot.
        self.complete_singly(2)
        self.admin.execute("SELECT * FROM pgq.maintain()")
        self.assertEqual((self.done(self.admin), self.finished_rows(), self.unflushed()), (7, 7, 0))
