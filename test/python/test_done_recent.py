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
        # One at a time: pgq.complete counts in shared memory (complete_many
        # writes its pgq.finished row itself).
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
