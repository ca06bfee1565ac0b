"""What an operator watches: pgq.running_jobs, pgq.queue_metrics(),
pgq.metrics() (Prometheus text), pgq.workers, and the postgres_exporter
queries shipped in docs/postgres_exporter.yaml.

The counters live in shared memory (the test cluster preloads the library)
and count at commit: each test reads them after the fact, on queues of its
own (every test installs the extension afresh, which resets them)."""
import contextlib
import os
import re

import psycopg
import yaml
from psycopg import errors

from test_concurrency import DSN, PgqTestCase

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")

COUNTERS = ("claims", "completions", "failures", "lease_expiries", "dead_lettered")

# One line of the Prometheus text format 0.0.4 as pgq.metrics() writes it.
SAMPLE = re.compile(
    r'^(?P<name>[a-z_]+)(\{(?P<labels>[a-z_]+="(?:[^"\\\n]|\\.)*"(,[a-z_]+="(?:[^"\\\n]|\\.)*")*)\})?'
    r' (?P<value>\S+)$')
LABEL = re.compile(r'([a-z_]+)="((?:[^"\\\n]|\\.)*)"')


def parse_metrics(text):
    """{(name, ((label, value), ...)): float}, checking the format on the way:
    every family announced by HELP then TYPE, its samples right after it."""
    samples = {}
    families = []
    current = None
    lines = text.split("\n")
    assert lines[-1] == "", "the text ends with a newline"
    for line in lines[:-1]:
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert name not in families, f"family {name} announced twice"
            families.append(name)
            current = None
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name == families[-1], f"TYPE {name} does not follow its HELP"
            assert kind in ("gauge", "counter"), line
            current = name
        else:
            m = SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            assert m["name"] == current, f"sample {m['name']} outside its family {current}"
            key = (m["name"], tuple(LABEL.findall(m["labels"] or "")))
            assert key not in samples, f"sample {key} twice"
            samples[key] = float(m["value"])
    return samples


class ObserveTest(PgqTestCase):
    @contextlib.contextmanager
    def session_of_new_role(self, role, options=""):
        """A connection acting as `role`, created for the block and dropped
        after it (its session first)."""
        self.admin.execute(f"DROP ROLE IF EXISTS {role}")
        self.admin.execute(f"CREATE ROLE {role} LOGIN {options}")
        conn = self.connect()
        try:
            conn.execute(f"SET ROLE {role}")
            yield conn
        finally:
            conn.close()
            self.admin.execute(f"DROP ROLE {role}")

    def metrics_row(self, queue, conn=None):
        row = (conn or self.admin).execute(
            "SELECT * FROM pgq.queue_metrics() WHERE queue = %s", (queue,)
        ).fetchone()
        names = [c.name for c in (conn or self.admin).execute(
            "SELECT * FROM pgq.queue_metrics() LIMIT 0").description]
        return dict(zip(names, row))

    def counters(self, queue):
        row = self.metrics_row(queue)
        return {c: row[c] for c in COUNTERS}

    # running_jobs -----------------------------------------------------------

    def test_running_jobs_names_the_claimer_while_its_session_lives(self):
        self.admin.execute("SELECT pgq.enqueue('q', '{}')")
        worker = psycopg.connect(DSN, autocommit=True, application_name="mailer-7")
        self._conns.append(worker)
        job, attempt = worker.execute("SELECT id, attempt FROM pgq.claim('q', 1, '1 hour')").fetchone()
        row = self.admin.execute(
            "SELECT id, queue, attempt, claimer_pid, claimer_role, claimer_application,"
            "       claimer_connected, expired, lease_left > '59 minutes', running_for >= '0'"
            "  FROM pgq.running_jobs").fetchall()
        self.assertEqual(row, [(job, "q", attempt, worker.info.backend_pid, "postgres", "mailer-7",
                                True, False, True, True)])
        # The claimer's session ends: the lease still holds the job, and the
        # view says nobody is there to finish it.
        pid = worker.info.backend_pid
        worker.close()
        self.wait_for("the claimer's session to end", lambda: self.scalar(
            "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = %s", (pid,)))
        self.assertEqual(self.admin.execute(
            "SELECT claimer_pid, claimer_connected, claimer_application FROM pgq.running_jobs"
        ).fetchall(), [(pid, False, None)])

    def test_running_jobs_shows_expired_leases_and_only_running_jobs(self):
        self.admin.execute("SELECT pgq.enqueue_many('q', array_fill('{}'::jsonb, ARRAY[3]))")
        self.admin.execute("SELECT pgq.claim('q', 1, '1 minute')")
        self.admin.execute("SELECT pgq.claim('q', 1, '1 hour')")
        # Two minutes on, in this session's clock only: the maintenance
        # worker, on the real one, leaves the first lease alone meanwhile.
        self.admin.execute("SET pgq.debug_clock_offset = '2min'")
        self.assertEqual(self.admin.execute(
            "SELECT expired, lease_left < '0' FROM pgq.running_jobs ORDER BY id").fetchall(),
            [(True, True), (False, False)])
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.jobs WHERE state = 'p'"), 1)

    def test_running_jobs_shows_only_queues_the_reader_holds_a_right_on(self):
        self.admin.execute("SELECT pgq.create_queue('other')")
        self.admin.execute("SELECT pgq.enqueue('q', '{}'), pgq.enqueue('other', '{}')")
        self.admin.execute("SELECT pgq.claim('q', 1), pgq.claim('other', 1)")
        with self.session_of_new_role("observe_app") as app:
            self.admin.execute("SELECT pgq.grant('observe_app', 'q', 'consume')")
            self.assertEqual(app.execute("SELECT queue FROM pgq.running_jobs").fetchall(), [("q",)])

    # counters ---------------------------------------------------------------

    def test_counters_count_what_committed(self):
        self.admin.execute("SELECT pgq.create_queue('c', max_attempts => 2, lease => '1 hour')")
        self.assertEqual(self.counters("c"), dict.fromkeys(COUNTERS, 0))
        self.admin.execute("SELECT pgq.enqueue_many('c', array_fill('{}'::jsonb, ARRAY[4]))")
        # A claim rolled back claimed nothing.
        with self.admin.transaction(force_rollback=True):
            self.admin.execute("SELECT pgq.claim('c', 4)")
        self.assertEqual(self.counters("c")["claims"], 0)
        jobs = self.admin.execute("SELECT id, attempt FROM pgq.claim('c', 4)").fetchall()
        # Two completed one by one, one through complete_many.
        for job, attempt in jobs[:2]:
            self.admin.execute("SELECT pgq.complete(%s, %s)", (job, attempt))
        self.admin.execute("SELECT pgq.complete_many(%s, %s)", ([jobs[2][0]], [jobs[2][1]]))
        # One fails, is retried, fails again: dead (max_attempts 2).
        job, attempt = jobs[3]
        self.assertEqual(self.scalar("SELECT pgq.fail(%s, %s, 'boom', '0')", (job, attempt)), "retry")
        again = self.admin.execute("SELECT id, attempt FROM pgq.claim('c', 1)").fetchone()
        self.assertEqual(again[0], job)
        self.assertEqual(self.scalar("SELECT pgq.fail(%s, %s, 'boom')", again), "dead")
        # A stale completion changes nothing, so counts nothing.
        self.assertFalse(self.scalar("SELECT pgq.complete(%s, %s)", (job, attempt)))
        # One pending job cancelled: dead-lettered.
        pending = self.scalar("SELECT pgq.enqueue('c', '{}')")
        self.assertTrue(self.scalar("SELECT pgq.cancel(%s)", (pending,)))
        self.assertEqual(self.counters("c"), {
            "claims": 5, "completions": 3, "failures": 2, "lease_expiries": 0, "dead_lettered": 2})

    def test_a_prepared_transaction_is_counted(self):
        self.admin.execute("SELECT pgq.enqueue('q', '{}')")
        conn = self.connect(autocommit=False)
        conn.execute("SELECT pgq.complete(id, attempt) FROM pgq.claim('q', 1)")
        conn.execute("PREPARE TRANSACTION 'pgq_observe'")
        conn.commit()
        self.admin.execute("COMMIT PREPARED 'pgq_observe'")
        c = self.counters("q")
        self.assertEqual((c["claims"], c["completions"]), (1, 1))
        self.assertEqual(self.scalar("SELECT done_recent FROM pgq.queue_stats WHERE queue = 'q'"), 1)

    def test_lease_expiries_count_the_requeued_and_the_dead(self):
        # The leases run out on this session's clock only (moved on with
        # pgq.debug_clock_offset): the maintenance worker, on the real one,
        # never races this session's pgq.maintain() for them.
        self.admin.execute("SELECT pgq.create_queue('e', max_attempts => 2)")
        self.admin.execute("SELECT pgq.enqueue_many('e', array_fill('{}'::jsonb, ARRAY[2]))")
        self.assertEqual(len(self.admin.execute("SELECT pgq.claim('e', 2, '1 minute')").fetchall()), 2)
        self.admin.execute("SET pgq.debug_clock_offset = '2min'")
        self.admin.execute("SELECT * FROM pgq.maintain()")  # both back, attempt 1 of 2
        self.assertEqual(len(self.admin.execute("SELECT pgq.claim('e', 2, '1 minute')").fetchall()), 2)
        self.admin.execute("SET pgq.debug_clock_offset = '4min'")
        self.admin.execute("SELECT * FROM pgq.maintain()")  # both dead
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.dead_jobs WHERE queue = 'e'"), 2)
        c = self.counters("e")
        self.assertEqual((c["claims"], c["lease_expiries"], c["dead_lettered"]), (4, 4, 2))

    def test_complete_many_counts_each_queue_apart(self):
        self.admin.execute("SELECT pgq.create_queue('a'), pgq.create_queue('b')")
        self.admin.execute("SELECT pgq.enqueue_many('a', array_fill('{}'::jsonb, ARRAY[3])),"
                           "       pgq.enqueue_many('b', array_fill('{}'::jsonb, ARRAY[1]))")
        self.admin.execute(
            "SELECT pgq.complete_many(array_agg(id), array_agg(attempt))"
            "  FROM (SELECT * FROM pgq.claim('a', 3) UNION ALL SELECT * FROM pgq.claim('b', 1)) c")
        self.assertEqual((self.counters("a")["completions"], self.counters("b")["completions"]), (3, 1))

    # Prometheus text -----------------------------------------------------------

    def test_metrics_text_is_well_formed_and_agrees_with_queue_metrics(self):
        self.admin.execute("SELECT pgq.create_queue('mail')")
        self.admin.execute("SELECT pgq.enqueue_many('mail', array_fill('{}'::jsonb, ARRAY[4]))")
        self.admin.execute("SELECT pgq.enqueue('mail', '{}', run_at => now() + interval '1 hour')")
        self.admin.execute("SELECT pgq.complete(id, attempt) FROM pgq.claim('mail', 1)")
        self.admin.execute("SELECT pgq.claim('mail', 1)")
        self.admin.execute("SELECT pgq.pause('q')")
        with self.admin.transaction():
            text = self.scalar("SELECT pgq.metrics()")
            rows = self.admin.execute("SELECT * FROM pgq.queue_metrics()").fetchall()
        samples = parse_metrics(text)
        db = self.scalar("SELECT current_database()")
        self.assertEqual([r[0] for r in rows], ["mail", "q"])
        for row in rows:
            queue = row[0]
            labels = (("database", db), ("queue", queue))
            for i, state in enumerate(("ready", "scheduled", "running", "expired", "dead")):
                self.assertEqual(samples[("pgq_jobs", labels + (("state", state),))], row[1 + i])
            self.assertAlmostEqual(samples[("pgq_oldest_ready_age_seconds", labels)], row[6], delta=1)
            self.assertEqual(samples[("pgq_queue_paused", labels)], 1 if row[7] else 0)
            for i, name in enumerate(COUNTERS):
                self.assertEqual(samples[(f"pgq_{name}_total", labels)], row[8 + i])
        mail = self.metrics_row("mail")
        self.assertEqual((mail["ready"], mail["scheduled"], mail["running"], mail["claims"],
                          mail["completions"]), (2, 1, 1, 2, 1))
        self.assertEqual(samples[("pgq_queue_paused", (("database", db), ("queue", "q")))], 1)
        # The workers of this database: the maintenance worker of the test cluster.
        self.assertEqual(samples[("pgq_workers", (("database", db), ("kind", "maintenance")))], 1)

    def test_worker_last_pass_is_recent(self):
        self.wait_for("a completed maintenance pass", lambda: "pgq_maintenance_last_pass" in
                      self.scalar("SELECT pgq.metrics()"), timeout=30)
        samples = parse_metrics(self.scalar("SELECT pgq.metrics()"))
        db = self.scalar("SELECT current_database()")
        last = samples[("pgq_maintenance_last_pass_timestamp_seconds", (("database", db),))]
        now = self.scalar("SELECT extract(epoch FROM now())::float8")
        self.assertLess(abs(now - last), 120)
        row = self.admin.execute(
            "SELECT kind, last_pass_at IS NOT NULL FROM pgq.workers WHERE database = %s", (db,)
        ).fetchall()
        self.assertIn(("maintenance", True), row)
        self.assertEqual(self.scalar("SELECT count(*) FROM pgq.workers WHERE kind = 'launcher'"), 1)

    # who may watch ---------------------------------------------------------------

    def test_metrics_are_for_pg_monitor_not_public(self):
        with self.session_of_new_role("observe_watch") as watcher:
            for sql in ("SELECT pgq.metrics()", "SELECT * FROM pgq.queue_metrics()",
                        "SELECT * FROM pgq.workers", "SELECT * FROM pgq.worker_slots()"):
                with self.assertRaises(errors.InsufficientPrivilege, msg=sql):
                    watcher.execute(sql)
            self.admin.execute("GRANT pg_monitor TO observe_watch")
            self.assertIn('queue="q"', watcher.execute("SELECT pgq.metrics()").fetchone()[0])
            self.assertEqual(watcher.execute("SELECT queue FROM pgq.queue_metrics()").fetchall(), [("q",)])
            self.assertGreaterEqual(watcher.execute("SELECT count(*) FROM pgq.workers").fetchone()[0], 1)
            # Watching is not consuming: no payload, no claim.
            with self.assertRaises(errors.InsufficientPrivilege):
                watcher.execute("SELECT * FROM pgq.claim('q', 1)")

    # postgres_exporter --------------------------------------------------------------

    def test_postgres_exporter_queries_run_and_return_their_columns(self):
        """docs/postgres_exporter.yaml: each query runs as a pg_monitor member
        and returns exactly the columns its metrics list names."""
        with open(os.path.join(ROOT, "docs", "postgres_exporter.yaml")) as f:
            spec = f.read()
        queries = {
            name: (entry["query"], [(column, fields["usage"]) for metric in entry["metrics"]
                                    for column, fields in metric.items()])
            for name, entry in yaml.safe_load(spec).items()
        }
        self.assertGreaterEqual(len(queries), 1)
        self.admin.execute("SELECT pgq.enqueue('q', '{}')")
        with self.session_of_new_role("observe_exporter", "IN ROLE pg_monitor") as exporter:
            for name, (query, columns) in queries.items():
                cur = exporter.execute(query)
                self.assertEqual([c.name for c in cur.description], [c for c, _ in columns], name)
                rows = cur.fetchall()
                self.assertGreaterEqual(len(rows), 1, name)
                for row in rows:
                    for value, (column, usage) in zip(row, columns):
                        if usage in ("GAUGE", "COUNTER"):
                            self.assertIsInstance(value, (int, float), f"{name}.{column}")
