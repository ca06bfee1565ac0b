"""Per-queue and per-stream rights and the catalog audit (issue 7; SPEC §7 and
§10; docs/security.md).

Rights: produce, consume and admin, granted per queue with pgq.grant (queue
NULL: every queue, present and future), checked inside the functions, whose
statements then run as the owner of pgq's tables. The roles here have no
privilege on any pgq table: whatever they can do, they can do through the
functions and their grants only.

Audit: who may execute what (the PUBLIC list is docs/security.md's), no
SECURITY DEFINER function, every function pinned to pg_catalog (C functions
pin it per statement: test_search_path.py), nothing in the schema readable
by PUBLIC except the two filtered, security-barrier views.

Streams (issue 21) have rights of their own, produce, consume and admin,
granted per stream with pgq.grant_stream (stream NULL: every stream, a
superuser's grant); their events live in segment tables nobody but the owner
of pgq's tables may read.

Roles are cluster-wide: each test creates the ones it needs and drops them.
"""
import psycopg
from psycopg import errors, sql

from test_concurrency import DSN, PgqTestCase

PRODUCER, CONSUMER, ADMIN, NOBODY = "pgq_t_producer", "pgq_t_consumer", "pgq_t_admin", "pgq_t_nobody"
WORKERS, WORKER1, LONER, GLOBAL = "pgq_t_workers", "pgq_t_worker1", "pgq_t_loner", "pgq_t_global"
ROLES = [PRODUCER, CONSUMER, ADMIN, NOBODY, WORKER1, LONER, WORKERS, GLOBAL]
# A role whose name must be quoted, and one named like that name quoted.
OWNER_QUOTED, SPOOF = "PgqT_Owner", '"PgqT_Owner"'
SPOOF_ROLES = [OWNER_QUOTED, SPOOF]

# docs/security.md, "Who may call what": every role may execute these; each
# checks a queue right itself (or, compact_jobs, ownership of pgq.jobs).
PUBLIC_FUNCTIONS = {
    "clock", "has_queue_privilege", "unflushed_completions",
    "create_queue", "alter_queue", "drop_queue", "pause", "resume",
    "enqueue", "enqueue_many", "claim", "complete", "complete_many", "fail", "extend",
    "release", "cancel", "retry_dead", "maintain", "compact_jobs",
    "schedule", "unschedule", "subscribe", "unsubscribe", "publish", "grant", "revoke",
    "create_topic", "drop_topic", "grant_topic", "revoke_topic",
    "snooze", "progress", "job", "list_jobs", "purge_dead", "queue_overview",
    # Streams (2.0): each checks a stream right itself.
    "create_stream", "alter_stream", "drop_stream", "append", "append_many",
    "register_consumer", "unregister_consumer", "next_batch", "finish_batch",
    "grant_stream", "revoke_stream", "stream_consumer_stats",
    # 2.0.1 (issue 30 R1): the relay's single-active guard; consume right.
    "acquire_consumer", "release_consumer",
    # 3.0 (issue 31): read surfaces, each checking a queue right itself.
    "cancel_job", "retry_dead_job", "queue_settings", "queue_workers", "list_schedule_runs",
    "purge_dead_job", "job_dependencies", "find_jobs",
    # 3.0: a stream's ring, checking a stream right itself.
    "stream_segments",
    # 3.0 (issue 33): behind pgq.running_jobs, the caller's queues only.
    "ring_running_jobs",
    # 3.0 (issue 33): behind pgq.queue_stats, a queue's rings if the caller
    # holds a right on it.
    "queue_ring_ids",
    # 3.1 (issue 34): a fair queue's weights: set by its admin, read with
    # any right.
    "set_group_weight", "group_weights", "fair_keys",
    # 3.1 (issue 34): backpressure; wait_for_room with the produce or admin
    # right, check_pending with admin.
    "wait_for_room", "check_pending",
    # 3.1 (issue 35): claim and next_batch with each job's or event's
    # trace context; their rights.
    "claim_traced", "next_batch_traced",
}
# Not about queues: nobody's until GRANT EXECUTE.
COORDINATION_FUNCTIONS = {
    "add_member": "SELECT pgq.add_member('t', 'ann')",
    "set_member_active": "SELECT pgq.set_member_active('t', 'ann', false)",
    "remove_member": "SELECT pgq.remove_member('t', 'ann')",
    "next_turn": "SELECT pgq.next_turn('t')",
    "assign": "SELECT pgq.assign('t', 'conversation-1')",
    "set_switch": "SELECT pgq.set_switch('s', true)",
    "switch": "SELECT pgq.switch('s')",
    "advance": "SELECT pgq.advance('l', 1)",
    "once": "SELECT pgq.once('k')",
    # 3.0: their readers, EXECUTE-granted the same way.
    "list_teams": "SELECT * FROM pgq.list_teams()",
    "list_switches": "SELECT * FROM pgq.list_switches()",
    "list_ladders": "SELECT * FROM pgq.list_ladders()",
}
# Every queue's numbers, never a payload: pg_monitor's (docs/security.md).
MONITORING_FUNCTIONS = {"metrics", "queue_metrics", "queue_counters", "worker_slots"}
# What a role without any grant gets from each public function: 42501. Only
# clock() and has_queue_privilege() answer anyone (no queue data), and
# queue_overview() answers as pgq.queue_stats does: the caller's queues only.
REFUSED_CALLS = {
    "unflushed_completions": "SELECT pgq.unflushed_completions(%(q_id)s)",
    "create_queue": "SELECT pgq.create_queue('new')",
    "alter_queue": "SELECT pgq.alter_queue('q', max_attempts => 3)",
    "drop_queue": "SELECT pgq.drop_queue('q', force => true)",
    "pause": "SELECT pgq.pause('q')",
    "resume": "SELECT pgq.resume('q')",
    "enqueue": "SELECT pgq.enqueue('q', '{}')",
    "enqueue_many": "SELECT pgq.enqueue_many('q', ARRAY['{}']::jsonb[])",
    "claim": "SELECT * FROM pgq.claim('q')",
    "complete": "SELECT pgq.complete(%(job)s, 1)",
    "complete_many": "SELECT pgq.complete_many(ARRAY[%(job)s]::bigint[], ARRAY[1])",
    "fail": "SELECT pgq.fail(%(job)s, 1)",
    "extend": "SELECT pgq.extend(%(job)s, 1, '1 minute')",
    "release": "SELECT pgq.release(%(job)s, 1)",
    "cancel": "SELECT pgq.cancel(%(job)s)",
    "retry_dead": "SELECT pgq.retry_dead('q')",
    "maintain": "SELECT * FROM pgq.maintain()",
    "compact_jobs": "SELECT pgq.compact_jobs()",
    "schedule": "SELECT pgq.schedule('s', 'q', '@daily')",
    "unschedule": "SELECT pgq.unschedule('s')",
    "subscribe": "SELECT pgq.subscribe('topic', 'q')",
    "unsubscribe": "SELECT pgq.unsubscribe('topic', 'q')",
    "publish": "SELECT pgq.publish('topic', '{}')",
    "grant": "SELECT pgq.grant('pgq_t_nobody', 'q', 'consume')",
    "revoke": "SELECT pgq.revoke('pgq_t_nobody', 'q', 'consume')",
    "create_topic": "SELECT pgq.create_topic('mine')",
    "drop_topic": "SELECT pgq.drop_topic('topic')",
    "grant_topic": "SELECT pgq.grant_topic('pgq_t_nobody', 'topic', 'publish')",
    "revoke_topic": "SELECT pgq.revoke_topic('pgq_t_nobody', 'topic', 'publish')",
    "snooze": "SELECT pgq.snooze(%(job)s, 1, '1 minute')",
    "progress": "SELECT pgq.progress(%(job)s, 1, '{}')",
    "job": "SELECT * FROM pgq.job(%(job)s)",
    "list_jobs": "SELECT * FROM pgq.list_jobs('q')",
    "purge_dead": "SELECT pgq.purge_dead('q')",
    # Stream 'st' exists, with consumer 'reader' and its open batch %(batch)s.
    "create_stream": "SELECT pgq.create_stream('new_stream')",
    "alter_stream": "SELECT pgq.alter_stream('st', '1 hour')",
    "drop_stream": "SELECT pgq.drop_stream('st')",
    "append": "SELECT pgq.append('st', '{}')",
    "append_many": "SELECT * FROM pgq.append_many('st', ARRAY['{}']::jsonb[])",
    "register_consumer": "SELECT pgq.register_consumer('st', 'intruder')",
    "unregister_consumer": "SELECT pgq.unregister_consumer('st', 'reader')",
    "next_batch": "SELECT * FROM pgq.next_batch('st', 'reader')",
    "next_batch_traced": "SELECT * FROM pgq.next_batch_traced('st', 'reader')",
    "claim_traced": "SELECT * FROM pgq.claim_traced('q')",
    "finish_batch": "SELECT pgq.finish_batch(%(batch)s)",
    "grant_stream": "SELECT pgq.grant_stream('pgq_t_nobody', 'st', 'consume')",
    "revoke_stream": "SELECT pgq.revoke_stream('pgq_t_nobody', 'st', 'consume')",
    "acquire_consumer": "SELECT pgq.acquire_consumer('st', 'reader')",
    "release_consumer": "SELECT pgq.release_consumer('st', 'reader')",
    # 3.0: named, a queue the caller has no right on is refused; unnamed,
    # they show nothing (checked below).
    "cancel_job": "SELECT pgq.cancel_job(%(job)s)",
    "retry_dead_job": "SELECT pgq.retry_dead_job(%(job)s)",
    "purge_dead_job": "SELECT pgq.purge_dead_job(%(job)s)",
    "queue_settings": "SELECT * FROM pgq.queue_settings('q')",
    "set_group_weight": "SELECT pgq.set_group_weight('q', 'tenant', 3)",
    "group_weights": "SELECT * FROM pgq.group_weights('q')",
    "fair_keys": "SELECT * FROM pgq.fair_keys('q')",
    "wait_for_room": "SELECT pgq.wait_for_room('q', '0')",
    "check_pending": "SELECT * FROM pgq.check_pending('q')",
    "queue_workers": "SELECT * FROM pgq.queue_workers('q')",
    "list_schedule_runs": "SELECT * FROM pgq.list_schedule_runs('q')",
    # As pgq.job: no right on any queue is refused.
    "job_dependencies": "SELECT * FROM pgq.job_dependencies(%(job)s)",
    "find_jobs": "SELECT * FROM pgq.find_jobs('k')",
    # Named, a stream without a right is refused; unnamed, nothing is shown.
    "stream_segments": "SELECT * FROM pgq.stream_segments('st')",
}
# stream_consumer_stats() answers as pgq.stream_stats does: the caller's
# streams only.
ANSWER_ANYONE = {"clock", "has_queue_privilege", "queue_overview", "stream_consumer_stats",
                 "ring_running_jobs", "queue_ring_ids"}


class PrivilegeTestCase(PgqTestCase):
    def setUp(self):
        super().setUp()  # a fresh extension and queue 'q'
        self.drop_roles(self.admin)
        for role in ROLES:
            self.admin.execute(f"CREATE ROLE {role}")
        self.admin.execute(f"GRANT {WORKERS} TO {WORKER1}")
        self.admin.execute(f"CREATE ROLE pgq_t_noinherit NOINHERIT IN ROLE {WORKERS}")
        self.admin.execute("SELECT pgq.create_queue('q2')")

    def tearDown(self):
        super().tearDown()
        with psycopg.connect(DSN, autocommit=True) as conn:
            self.drop_roles(conn)

    @staticmethod
    def drop_roles(conn):
        conn.execute("DROP FUNCTION IF EXISTS public.leak(text)")
        for role in ["pgq_t_noinherit", "pgq_t_gone", "pgq_t_o'brien"] + SPOOF_ROLES + ROLES:
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))

    def grant(self, role, queue, privilege):
        self.admin.execute("SELECT pgq.grant(%s, %s, %s)", (role, queue, privilege))

    def as_role(self, role):
        conn = self.connect()
        conn.execute(f"SET ROLE {role}")
        return conn

    def refused(self, conn, sql, params=None):
        """Runs sql, which must fail with insufficient_privilege (42501)."""
        with self.assertRaises(errors.InsufficientPrivilege, msg=sql):
            conn.execute(sql, params)

    def job_state(self, job):
        return self.admin.execute(
            "SELECT state, attempt FROM pgq.jobs WHERE id = %s", (job,)).fetchone()


class CatalogAuditTest(PrivilegeTestCase):
    def functions(self):
        return self.admin.execute(
            "SELECT p.proname, p.prosecdef, l.lanname, p.proconfig,"
            "       p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a"
            "                                   WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')"
            "  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang"
            " WHERE p.pronamespace = 'pgq'::regnamespace").fetchall()

    def test_public_may_execute_the_documented_list_only(self):
        public = {name for name, _, _, _, pub in self.functions() if pub}
        private = {name for name, _, _, _, pub in self.functions() if not pub}
        self.assertEqual(public, PUBLIC_FUNCTIONS)
        self.assertEqual(private, set(COORDINATION_FUNCTIONS) | MONITORING_FUNCTIONS)
        monitor = {name for (name,) in self.admin.execute(
            "SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'pgq'::regnamespace"
            "   AND has_function_privilege('pg_monitor', p.oid, 'EXECUTE')")}
        self.assertEqual(monitor - PUBLIC_FUNCTIONS, MONITORING_FUNCTIONS)

    def test_no_function_is_security_definer_and_every_one_is_pinned_to_pg_catalog(self):
        for name, secdef, language, config, _ in self.functions():
            self.assertFalse(secdef, f"pgq.{name} is SECURITY DEFINER")
            # C functions run every statement with pg_catalog as the whole
            # search path (src/pg/spi.cpp; test_search_path.py shows it); any
            # other function must carry its own.
            if language != "c":
                self.assertIn("search_path=pg_catalog, pg_temp", config or [], name)

    def test_every_public_function_refuses_a_role_without_a_grant(self):
        # Every public function is either listed here with a call, or
        # answers anyone: a new function cannot slip past this test.
        self.assertEqual(set(REFUSED_CALLS) | ANSWER_ANYONE, PUBLIC_FUNCTIONS)
        q_id = self.admin.execute("SELECT queue_id FROM pgq.queues WHERE name = 'q'").fetchone()[0]
        job = self.admin.execute("SELECT pgq.enqueue('q', '{\"secret\": 1}')").fetchone()[0]
        self.admin.execute("SELECT * FROM pgq.claim('q')")
        self.admin.execute("SELECT pgq.create_topic('topic')")
        self.admin.execute("SELECT pgq.subscribe('topic', 'q'), pgq.schedule('s', 'q', '@daily')")
        # A stream with a consumer and an open batch, so that each stream
        # call gets past its argument and existence checks to the right's.
        self.admin.execute("SELECT pgq.create_stream('st')")
        self.admin.execute("SELECT pgq.register_consumer('st', 'reader')")
        self.admin.execute("SELECT pgq.append('st', '{\"secret\": 2}')")
        batch = self.admin.execute("SELECT batch_id FROM pgq.next_batch('st', 'reader')").fetchone()[0]
        stream_state = ("SELECT s.rotation, (SELECT count(*) FROM pgq.stream_events e"
                        "                     WHERE e.stream_id = s.stream_id),"
                        "       array_agg(c.name ORDER BY c.name), bool_and(c.batch_open),"
                        "       sum(c.finished_batches),"
                        "       (SELECT count(*) FROM pgq.stream_grants g"
                        "         WHERE g.stream_id = s.stream_id)"
                        "  FROM pgq.streams s JOIN pgq.stream_consumers c USING (stream_id)"
                        " WHERE s.name = 'st' GROUP BY s.stream_id, s.rotation")
        before = self.admin.execute(stream_state).fetchone()
        nobody = self.as_role(NOBODY)
        for name, sql in REFUSED_CALLS.items():
            with self.subTest(function=name):
                self.refused(nobody, sql, {"q_id": q_id, "job": job, "batch": batch})
        self.assertEqual(self.job_state(job), ("r", 1), "a refused call changed the job")
        self.assertEqual(self.admin.execute(stream_state).fetchone(), before,
                         "a refused call changed the stream")
        self.assertEqual(self.admin.execute(
            "SELECT count(*) FROM pgq.streams WHERE name = 'new_stream'").fetchone()[0], 0)
        self.assertEqual(self.admin.execute(
            "SELECT count(*) FROM pgq.queues WHERE name = 'q' AND NOT paused").fetchone()[0], 1)
        # The four that answer anyone say "no", or show nothing.
        self.assertFalse(nobody.execute(
            "SELECT pgq.has_queue_privilege('q', 'produce, consume, admin')").fetchone()[0])
        nobody.execute("SELECT pgq.clock()")
        self.assertEqual(nobody.execute("SELECT count(*) FROM pgq.queue_overview()").fetchone()[0], 0)
        # The job claimed above runs on q's ring: not shown to a role with no right on q.
        self.assertEqual(
            self.admin.execute("SELECT count(*) FROM pgq.ring_running_jobs()").fetchone()[0], 1)
        self.assertEqual(
            nobody.execute("SELECT count(*) FROM pgq.ring_running_jobs()").fetchone()[0], 0)
        # Nor are q's rings named to it.
        self.assertEqual(self.admin.execute(
            "SELECT count(*) FROM pgq.queue_ring_ids(%s)", (q_id,)).fetchone()[0], 1)
        self.assertEqual(nobody.execute(
            "SELECT count(*) FROM pgq.queue_ring_ids(%s)", (q_id,)).fetchone()[0], 0)
        # The 3.0 readers, unnamed, show nothing of queues without a right;
        # the superuser sees the running claim and the queue.
        for reader in ("queue_settings", "queue_workers", "list_schedule_runs"):
            with self.subTest(reader=reader):
                self.assertEqual(nobody.execute(
                    f"SELECT count(*) FROM pgq.{reader}()").fetchone()[0], 0)
        self.assertEqual(self.admin.execute(
            "SELECT queue_name, running FROM pgq.queue_workers()").fetchall(), [("q", 1)])
        # The superuser sees 'st' in the stream stats; nobody does not.
        self.assertEqual(self.admin.execute(
            "SELECT stream, consumer, batch_open FROM pgq.stream_consumer_stats()").fetchall(),
            [("st", "reader", True)])
        self.assertEqual(nobody.execute(
            "SELECT count(*) FROM pgq.stream_consumer_stats()").fetchone()[0], 0)
        self.assertEqual(nobody.execute("SELECT count(*) FROM pgq.stream_stats").fetchone()[0], 0)

    def test_coordination_takes_execute_and_no_table_right(self):
        nobody = self.as_role(NOBODY)
        for name, sql in COORDINATION_FUNCTIONS.items():
            with self.subTest(function=name):
                self.refused(nobody, sql)
        self.admin.execute(f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgq TO {NOBODY}")
        self.assertEqual(nobody.execute("SELECT pgq.add_member('t', 'ann')").fetchone()[0], 1)
        self.assertEqual(nobody.execute("SELECT pgq.next_turn('t')").fetchone()[0], "ann")
        self.assertTrue(nobody.execute("SELECT pgq.once('k')").fetchone()[0])
        # EXECUTE on a queue function still needs the queue right.
        self.refused(nobody, "SELECT pgq.enqueue('q', '{}')")

    def test_nothing_in_the_schema_is_readable_by_public_but_the_filtered_views(self):
        # pgq.workers (no queue data) is pg_monitor's; not PUBLIC's.
        self.assertTrue(self.admin.execute(
            "SELECT has_table_privilege('pg_monitor', 'pgq.workers', 'SELECT')").fetchone()[0])
        # A stream, so that its segment tables are audited too.
        self.admin.execute("SELECT pgq.create_stream('st')")
        st = self.admin.execute("SELECT stream_id FROM pgq.streams WHERE name = 'st'").fetchone()[0]
        rows = self.admin.execute(
            "SELECT c.relname, c.relkind, c.reloptions,"
            "       EXISTS (SELECT 1 FROM aclexplode(c.relacl) a WHERE a.grantee = 0),"
            "       has_table_privilege(%s, c.oid, 'SELECT, INSERT, UPDATE, DELETE')"
            "  FROM pg_class c WHERE c.relnamespace = 'pgq'::regnamespace"
            "   AND c.relkind IN ('r', 'v', 'S', 'm', 'p')", (NOBODY,)).fetchall()
        self.assertIn("grants", {r[0] for r in rows})
        self.assertLessEqual({f"stream_events_{st}", f"stream_events_{st}_0", "stream_consumers"},
                             {r[0] for r in rows})
        for name, kind, options, public, nobody_may in rows:
            if name in ("queue_stats", "schedules", "running_jobs"):
                self.assertEqual(kind, "v")
                self.assertIn("security_barrier=true", options or [], name)
                self.assertTrue(public and nobody_may, name)
            elif name == "stream_stats":
                # No filter of its own: every row comes from
                # stream_consumer_stats(), which filters by the caller's
                # rights (a leaky WHERE sees only those rows: StreamRightsTest).
                self.assertEqual(kind, "v")
                self.assertTrue(public and nobody_may, name)
                definition = " ".join(self.admin.execute(
                    "SELECT pg_get_viewdef('pgq.stream_stats'::regclass)").fetchone()[0].split())
                self.assertRegex(definition, r"FROM pgq\.stream_consumer_stats\(\) "
                                             r"stream_consumer_stats\(.*\);?$")
            else:
                self.assertFalse(public or nobody_may, f"pgq.{name} is readable by PUBLIC")
        nobody = self.as_role(NOBODY)
        for table in ("jobs", "dead_jobs", "events", "recurring", "grants", "queues",
                      "streams", "stream_grants", "stream_consumers", "stream_events",
                      f"stream_events_{st}", f"stream_events_{st}_0", "rings", "ring_segments",
                      "rings_dropped"):
            with self.subTest(table=table):
                self.refused(nobody, f"SELECT * FROM pgq.{table}")


class RightsTest(PrivilegeTestCase):
    def test_producer_consumer_and_admin_are_separate(self):
        self.grant(PRODUCER, "q", "produce")
        self.grant(CONSUMER, "q", "consume")
        self.grant(ADMIN, "q", "admin")
        producer, consumer, admin = (self.as_role(r) for r in (PRODUCER, CONSUMER, ADMIN))

        job = producer.execute("SELECT pgq.enqueue('q', '{\"to\": \"ann\"}')").fetchone()[0]
        self.refused(producer, "SELECT pgq.enqueue('q2', '{}')")
        self.refused(producer, "SELECT * FROM pgq.claim('q')")  # a producer cannot claim
        self.refused(producer, "SELECT pgq.pause('q')")

        self.refused(consumer, "SELECT pgq.enqueue('q', '{}')")
        self.refused(consumer, "SELECT * FROM pgq.claim('q2')")
        got = consumer.execute("SELECT id, attempt, payload FROM pgq.claim('q')").fetchone()
        self.assertEqual(got, (job, 1, {"to": "ann"}))
        self.assertIsNotNone(consumer.execute("SELECT pgq.extend(%s, 1, '1 minute')", (job,)).fetchone()[0])
        self.assertTrue(consumer.execute("SELECT pgq.complete(%s, 1)", (job,)).fetchone()[0])

        for sql in ("SELECT pgq.enqueue('q', '{}')", "SELECT * FROM pgq.claim('q')",
                    "SELECT pgq.pause('q2')", "SELECT pgq.create_queue('mine')"):
            self.refused(admin, sql)
        admin.execute("SELECT pgq.pause('q'), pgq.resume('q'), pgq.alter_queue('q', max_attempts => 9)")
        admin.execute("SELECT pgq.retry_dead('q')")
        # A schedule sends jobs: it takes produce as well as admin.
        self.refused(admin, "SELECT pgq.schedule('nightly', 'q', '@daily')")
        self.grant(ADMIN, "q", "produce")
        admin.execute("SELECT pgq.schedule('nightly', 'q', '@daily')")
        self.assertEqual(admin.execute("SELECT name, queue FROM pgq.schedules").fetchall(),
                         [("nightly", "q")])
        # Subscribing takes admin on the queue and the subscribe right on the
        # topic, which its owner grants.
        self.admin.execute("SELECT pgq.create_topic('signup')")
        self.refused(admin, "SELECT pgq.subscribe('signup', 'q')")
        self.admin.execute("SELECT pgq.grant_topic(%s, 'signup', 'subscribe')", (ADMIN,))
        admin.execute("SELECT pgq.subscribe('signup', 'q')")
        # A producer may take back a pending job it can produce into.
        other = producer.execute("SELECT pgq.enqueue('q', '{}')").fetchone()[0]
        self.assertTrue(producer.execute("SELECT pgq.cancel(%s)", (other,)).fetchone()[0])
        # Publishing takes the publish right on the topic, and nothing on the
        # subscribed queues: a new subscriber never makes it fail.
        self.refused(producer, "SELECT pgq.publish('signup', '{}')")
        self.admin.execute("SELECT pgq.grant_topic(%s, 'signup', 'publish')", (PRODUCER,))
        producer.execute("SELECT pgq.publish('signup', '{}')")
        self.admin.execute("SELECT pgq.subscribe('signup', 'q2')")
        producer.execute("SELECT pgq.publish('signup', '{}')")
        self.assertEqual(self.admin.execute(
            "SELECT q.name, count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)"
            " WHERE j.payload->>'topic' = 'signup' GROUP BY q.name ORDER BY 1").fetchall(),
            [("q", 2), ("q2", 1)])

    def test_a_consumer_cannot_touch_a_job_of_a_queue_it_was_not_granted(self):
        # Nor learn that it exists (issue 15, L4): a running job of another
        # queue, with its right attempt, is answered exactly as an id that
        # was never used (false, 0, 'lost', NULL), and stays as it was.
        self.grant(CONSUMER, "q", "consume")
        job = self.admin.execute("SELECT pgq.enqueue('q2', '{}')").fetchone()[0]
        self.admin.execute("SELECT * FROM pgq.claim('q2')")
        never = job + 1000
        consumer = self.as_role(CONSUMER)
        for sql in ("SELECT pgq.complete(%(job)s, 1)",
                    "SELECT pgq.complete_many(ARRAY[%(job)s]::bigint[], ARRAY[1])",
                    "SELECT pgq.fail(%(job)s, 1, 'no')", "SELECT pgq.extend(%(job)s, 1, '1 hour')",
                    "SELECT pgq.release(%(job)s, 1)"):
            with self.subTest(sql=sql):
                other = consumer.execute(sql, {"job": job}).fetchone()
                self.assertEqual(other, consumer.execute(sql, {"job": never}).fetchone())
                self.assertIn(other[0], (False, 0, "lost", None))
                self.assertEqual(self.job_state(job), ("r", 1))
        # A wrong attempt tells nothing either way: false, as for a lost lease.
        self.assertFalse(consumer.execute("SELECT pgq.complete(%s, 7)", (job,)).fetchone()[0])

    def test_no_oracle_for_jobs_schedules_and_dead_jobs_of_other_queues(self):
        # Issue 15, L4: cancel, retry_dead(id) and unschedule answer a job,
        # dead job or schedule of a queue the caller has no right on as one
        # that does not exist, and leave it alone.
        self.grant(PRODUCER, "q", "produce")
        self.grant(ADMIN, "q", "admin")
        pending = self.admin.execute("SELECT pgq.enqueue('q2', '{}')").fetchone()[0]
        doomed = self.admin.execute("SELECT pgq.enqueue('q2', '{}')").fetchone()[0]
        self.admin.execute("SELECT pgq.cancel(%s)", (doomed,))
        self.admin.execute("SELECT pgq.schedule('s2', 'q2', '@daily')")
        producer, admin = self.as_role(PRODUCER), self.as_role(ADMIN)
        never = doomed + 1000
        self.assertEqual(producer.execute("SELECT pgq.cancel(%s), pgq.cancel(%s)",
                                          (pending, never)).fetchone(), (False, False))
        self.assertEqual(admin.execute("SELECT pgq.cancel(%s)", (pending,)).fetchone(), (False,))
        self.assertEqual(admin.execute("SELECT pgq.retry_dead(%s), pgq.retry_dead(%s)",
                                       (doomed, never)).fetchone(), (False, False))
        self.assertEqual(admin.execute("SELECT pgq.unschedule('s2'), pgq.unschedule('none')")
                         .fetchone(), (False, False))
        # 3.0: the outcome words say not_found for both, and purge_dead_job
        # leaves the other queue's dead job where it is.
        self.assertEqual(admin.execute(
            "SELECT pgq.purge_dead_job(%s), pgq.purge_dead_job(%s), pgq.retry_dead_job(%s)",
            (doomed, never, doomed)).fetchone(), ("not_found", "not_found", "not_found"))
        self.assertEqual(producer.execute("SELECT pgq.cancel_job(%s), pgq.cancel_job(%s)",
                                          (pending, never)).fetchone(),
                         ("not_found", "not_found"))
        self.assertEqual(self.job_state(pending), ("p", 0))
        self.assertEqual(self.admin.execute(
            "SELECT count(*) FROM pgq.dead_jobs WHERE id = %s", (doomed,)).fetchone()[0], 1)
        self.assertEqual(self.admin.execute(
            "SELECT queue FROM pgq.schedules WHERE name = 's2'").fetchone(), ("q2",))

    def test_an_admin_of_one_queue_cannot_take_over_another_queues_schedule(self):
        # Issue 15, M2: schedule() with the name of another queue's schedule
        # moved it to the caller's queue.
        self.admin.execute(
            "SELECT pgq.schedule('nightly_b', 'q2', '0 3 * * *', '{\"job\": \"B\"}')")
        self.grant(ADMIN, "q", "admin")
        self.grant(ADMIN, "q", "produce")
        admin = self.as_role(ADMIN)
        self.refused(admin, "SELECT pgq.schedule('nightly_b', 'q', '0 0 1 1 *')")
        self.assertEqual(self.admin.execute(
            "SELECT queue, spec, payload FROM pgq.schedules WHERE name = 'nightly_b'").fetchone(),
            ("q2", "0 3 * * *", {"job": "B"}))
        # With the admin right on both queues, it may move it.
        self.grant(ADMIN, "q2", "admin")
        admin.execute("SELECT pgq.schedule('nightly_b', 'q', '0 0 1 1 *')")
        self.assertEqual(self.admin.execute(
            "SELECT queue, spec FROM pgq.schedules WHERE name = 'nightly_b'").fetchone(),
            ("q", "0 0 1 1 *"))

    def test_topics_across_teams(self):
        # Issue 15, M4: team A (queue q) and team B (queue q2, topic tb).
        # A's admin cannot route B's events into q, B's publisher never
        # fails because of someone else's subscription, A cannot publish on
        # B's topic, and B's topic owner may cut a subscriber off.
        self.grant(GLOBAL, None, "admin")
        b_owner = self.as_role(GLOBAL)
        b_owner.execute("SELECT pgq.create_topic('tb')")
        b_owner.execute("SELECT pgq.subscribe('tb', 'q2')")
        b_owner.execute("SELECT pgq.grant_topic(%s, 'tb', 'publish')", (PRODUCER,))
        self.grant(ADMIN, "q", "admin")
        a_admin, b_producer = self.as_role(ADMIN), self.as_role(PRODUCER)
        self.refused(a_admin, "SELECT pgq.subscribe('tb', 'q')")
        self.refused(a_admin, "SELECT pgq.publish('tb', '{}')")
        self.refused(a_admin, "SELECT pgq.grant_topic(%s, 'tb', 'subscribe')", (ADMIN,))
        self.refused(a_admin, "SELECT pgq.create_topic('ta')")  # admin of one queue only
        self.assertFalse(a_admin.execute("SELECT pgq.drop_topic('tb')").fetchone()[0])
        b_producer.execute("SELECT pgq.publish('tb', '{\"n\": 1}')")
        # B lets A subscribe: B's publisher, who holds no right on q, still
        # publishes, and the event reaches both queues.
        b_owner.execute("SELECT pgq.grant_topic(%s, 'tb', 'subscribe')", (ADMIN,))
        a_admin.execute("SELECT pgq.subscribe('tb', 'q')")
        b_producer.execute("SELECT pgq.publish('tb', '{\"n\": 2}')")
        counts = ("SELECT q.name, count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)"
                  " WHERE j.payload->>'topic' = 'tb' GROUP BY q.name ORDER BY 1")
        self.assertEqual(self.admin.execute(counts).fetchall(), [("q", 1), ("q2", 2)])
        # B's owner takes the subscription back; revoking the right stops
        # A from subscribing again.
        self.assertTrue(b_owner.execute("SELECT pgq.unsubscribe('tb', 'q')").fetchone()[0])
        self.assertTrue(b_owner.execute(
            "SELECT pgq.revoke_topic(%s, 'tb', 'subscribe')", (ADMIN,)).fetchone()[0])
        self.refused(a_admin, "SELECT pgq.subscribe('tb', 'q')")
        b_producer.execute("SELECT pgq.publish('tb', '{\"n\": 3}')")
        self.assertEqual(self.admin.execute(counts).fetchall(), [("q", 1), ("q2", 3)])
        # Dropping the topic drops its subscriptions; its events stay.
        self.assertTrue(b_owner.execute("SELECT pgq.drop_topic('tb')").fetchone()[0])
        with self.assertRaises(errors.UndefinedObject):
            b_producer.execute("SELECT pgq.publish('tb', '{}')")
        self.assertEqual(self.admin.execute(
            "SELECT count(*) FROM pgq.subscriptions WHERE topic = 'tb'").fetchone()[0], 0)
        self.assertEqual(self.admin.execute(
            "SELECT count(*) FROM pgq.events WHERE topic = 'tb'").fetchone()[0], 3)

    def test_a_producer_cannot_raise_the_payload_limit(self):
        # A limit a producer could raise in its own session would be none.
        self.grant(PRODUCER, "q", "produce")
        producer = self.as_role(PRODUCER)
        self.refused(producer, "SET pgq.max_payload_bytes = 1000000000")
        with self.assertRaises(errors.ProgramLimitExceeded):
            producer.execute("SELECT pgq.enqueue('q', jsonb_build_object('x', repeat('a', 2000000)))")

    def test_the_hint_of_a_refusal_quotes_the_role_name(self):
        # Issue 15, L3: pasting the hint grants to the role that was refused.
        self.admin.execute('CREATE ROLE "pgq_t_o\'brien"')
        conn = self.connect()
        conn.execute('SET ROLE "pgq_t_o\'brien"')
        with self.assertRaises(errors.InsufficientPrivilege) as refused:
            conn.execute("SELECT pgq.enqueue('q', '{}')")
        hint = refused.exception.diag.message_hint
        self.assertIn("SELECT pgq.grant('pgq_t_o''brien', 'q', 'produce');", hint)
        self.admin.execute(hint[hint.index("SELECT"):])
        conn.execute("SELECT pgq.enqueue('q', '{}')")

    def test_nobody_without_a_grant_sees_a_queue_or_its_payloads(self):
        self.grant(CONSUMER, "q", "consume")
        self.admin.execute("SELECT pgq.enqueue('q2', '{\"card\": \"4111\"}')")
        self.admin.execute("SELECT pgq.schedule('s2', 'q2', '@daily', '{\"card\": \"4111\"}')")
        consumer, nobody = self.as_role(CONSUMER), self.as_role(NOBODY)
        self.assertEqual(consumer.execute("SELECT queue FROM pgq.queue_stats").fetchall(), [("q",)])
        self.assertEqual(consumer.execute("SELECT count(*) FROM pgq.schedules").fetchone()[0], 0)
        self.assertEqual(nobody.execute("SELECT count(*) FROM pgq.queue_stats").fetchone()[0], 0)
        # A leaky function in the reader's WHERE clause runs after the view's
        # filter (security_barrier): it never sees q2's row.
        self.admin.execute(
            "CREATE FUNCTION public.leak(t text) RETURNS boolean LANGUAGE plpgsql COST 0.0001 AS"
            " $$ BEGIN RAISE NOTICE 'leak: %', t; RETURN true; END $$")
        seen = []
        nobody.add_notice_handler(lambda d: seen.append(d.message_primary))
        nobody.execute("SELECT * FROM pgq.schedules WHERE public.leak(payload::text)")
        nobody.execute("SELECT * FROM pgq.queue_stats WHERE public.leak(queue)")
        self.assertEqual(seen, [])

    def test_a_grant_for_every_queue_covers_queues_made_later(self):
        self.grant(GLOBAL, None, "consume")
        self.grant(GLOBAL, None, "admin")
        self.admin.execute("SELECT pgq.create_queue('later')")
        self.admin.execute("SELECT pgq.enqueue('later', '{}')")
        worker = self.as_role(GLOBAL)
        self.assertEqual(len(worker.execute("SELECT * FROM pgq.claim('later')").fetchall()), 1)
        # admin on every queue lets it create queues, which it then owns.
        worker.execute("SELECT pgq.create_queue('its_own')")
        self.assertEqual(self.admin.execute(
            "SELECT owner FROM pgq.queues WHERE name = 'its_own'").fetchone()[0], GLOBAL)
        worker.execute("SELECT pgq.enqueue('its_own', '{}')")  # an owner holds every right
        self.assertTrue(self.admin.execute(
            "SELECT pgq.revoke(%s, NULL, 'consume')", (GLOBAL,)).fetchone()[0])
        self.refused(worker, "SELECT * FROM pgq.claim('later')")
        self.assertEqual(len(worker.execute("SELECT * FROM pgq.claim('its_own')").fetchall()), 1)

    def test_a_grant_to_a_group_counts_for_its_inheriting_members(self):
        self.grant(WORKERS, "q", "consume")
        self.admin.execute("SELECT pgq.enqueue('q', '{}')")
        member = self.as_role(WORKER1)
        self.assertTrue(member.execute(
            "SELECT pgq.has_queue_privilege('q', 'consume')").fetchone()[0])
        noinherit = self.as_role("pgq_t_noinherit")
        self.refused(noinherit, "SELECT * FROM pgq.claim('q')")
        self.assertEqual(len(member.execute("SELECT * FROM pgq.claim('q')").fetchall()), 1)
        self.refused(self.as_role(LONER), "SELECT * FROM pgq.claim('q')")

    def test_leaving_a_group_takes_its_rights_from_the_next_transaction(self):
        # The queues a role may use are kept per session (for complete,
        # fail, extend, release, cancel); a membership revoked must count
        # like a pgq.revoke, from the next transaction.
        self.grant(WORKERS, "q", "consume")
        self.grant(WORKER1, "q2", "consume")  # still a consumer somewhere
        member = self.as_role(WORKER1)
        first = self.admin.execute("SELECT pgq.enqueue('q', '{}')").fetchone()[0]
        second = self.admin.execute("SELECT pgq.enqueue('q', '{}')").fetchone()[0]
        self.admin.execute("SELECT * FROM pgq.claim('q', 2)")
        self.assertTrue(member.execute("SELECT pgq.complete(%s, 1)", (first,)).fetchone()[0])
        self.admin.execute(f"REVOKE {WORKERS} FROM {WORKER1}")
        self.assertFalse(member.execute("SELECT pgq.complete(%s, 1)", (second,)).fetchone()[0])
        self.assertEqual(self.job_state(second), ("r", 1))
        self.admin.execute(f"GRANT {WORKERS} TO {WORKER1}")
        self.assertTrue(member.execute("SELECT pgq.complete(%s, 1)", (second,)).fetchone()[0])

    def test_who_may_grant(self):
        self.grant(GLOBAL, None, "admin")
        owner = self.as_role(GLOBAL)
        owner.execute("SELECT pgq.create_queue('owned')")
        # The owner grants on its queue; twice is a no-op.
        self.assertEqual(owner.execute(
            "SELECT pgq.grant(%s, 'owned', 'consume'), pgq.grant(%s, 'owned', 'consume')",
            (CONSUMER, CONSUMER)).fetchone(), (True, False))
        self.assertTrue(self.as_role(CONSUMER).execute(
            "SELECT pgq.has_queue_privilege('owned', 'consume')").fetchone()[0])
        # An admin of a queue may not change who holds rights on it, nor may
        # anyone but a superuser grant on every queue.
        self.grant(ADMIN, "q", "admin")
        admin = self.as_role(ADMIN)
        self.refused(admin, "SELECT pgq.grant(%s, 'q', 'consume')", (ADMIN,))
        self.refused(admin, "SELECT pgq.revoke(%s, 'q', 'admin')", (ADMIN,))
        self.refused(owner, "SELECT pgq.grant(%s, NULL, 'consume')", (CONSUMER,))
        self.refused(owner, "SELECT pgq.grant(%s, 'q', 'consume')", (CONSUMER,))
        # Bad input.
        cases = [
            ("SELECT pgq.grant('pgq_t_no_such_role', 'q', 'consume')", errors.UndefinedObject),
            ("SELECT pgq.grant(%s, 'no_such_queue', 'consume')" % repr(CONSUMER), errors.UndefinedObject),
            ("SELECT pgq.grant(%s, 'q', 'read')" % repr(CONSUMER), errors.InvalidParameterValue),
            ("SELECT pgq.grant(%s, 'q', NULL)" % repr(CONSUMER), errors.NullValueNotAllowed),
            ("SELECT pgq.grant(NULL, 'q', 'consume')", errors.NullValueNotAllowed),
            ("SELECT pgq.has_queue_privilege('q', 'consume, read')", errors.InvalidParameterValue),
            ("SELECT pgq.has_queue_privilege('no_such_queue', 'consume')", errors.UndefinedObject),
        ]
        for sql, error in cases:
            with self.subTest(sql=sql), self.assertRaises(error):
                self.admin.execute(sql)
        self.assertEqual(self.admin.execute(
            "SELECT pgq.revoke(%s, 'owned', 'consume'), pgq.revoke(%s, 'owned', 'consume')",
            (CONSUMER, CONSUMER)).fetchone(), (True, False))
        self.assertEqual(self.admin.execute(
            "SELECT pgq.has_queue_privilege(%s, 'owned', 'consume'),"
            "       pgq.has_queue_privilege(%s, 'owned', 'produce, consume, admin')",
            (CONSUMER, GLOBAL)).fetchone(), (False, True))

    def test_a_revoke_counts_from_the_next_transaction_of_every_session(self):
        self.grant(CONSUMER, "q", "consume")
        self.admin.execute("SELECT pgq.enqueue_many('q', ARRAY['{}', '{}']::jsonb[])")
        consumer = self.as_role(CONSUMER)
        self.assertEqual(len(consumer.execute("SELECT * FROM pgq.claim('q')").fetchall()), 1)
        self.admin.execute("SELECT pgq.revoke(%s, 'q', 'consume')", (CONSUMER,))
        self.refused(consumer, "SELECT * FROM pgq.claim('q')")
        self.grant(CONSUMER, "q", "consume")
        self.assertEqual(len(consumer.execute("SELECT * FROM pgq.claim('q')").fetchall()), 1)

    def test_grants_of_a_dropped_role_are_removed_by_maintenance(self):
        # No maintenance worker in this database meanwhile: its first pass
        # (it starts again with each test's CREATE EXTENSION) cleans the
        # grants too, and could do so before the first count.
        self.admin.execute("ALTER SYSTEM SET pgq.databases = 'postgres'")
        self.admin.execute("SELECT pg_reload_conf()")
        try:
            self.wait_for("the maintenance worker to leave", lambda: self.admin.execute(
                "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'pgq maintenance'"
                "   AND datname = current_database()").fetchone()[0])
            self.admin.execute("CREATE ROLE pgq_t_gone")
            self.grant("pgq_t_gone", "q", "consume")
            self.admin.execute("SELECT pgq.create_topic('gone')")
            self.admin.execute("SELECT pgq.grant_topic('pgq_t_gone', 'gone', 'publish')")
            self.admin.execute("DROP ROLE pgq_t_gone")
            counts = ("SELECT (SELECT count(*) FROM pgq.grants),"
                      "       (SELECT count(*) FROM pgq.topic_grants)")
            self.assertEqual(self.admin.execute(counts).fetchone(), (1, 1))
            fresh = self.connect()  # its first pass also cleans the grants
            fresh.execute("SELECT * FROM pgq.maintain()")
            self.assertEqual(self.admin.execute(counts).fetchone(), (0, 0))
        finally:
            self.admin.execute("ALTER SYSTEM RESET pgq.databases")
            self.admin.execute("SELECT pg_reload_conf()")

    def test_the_creator_owns_the_queue_not_the_owner_of_the_tables(self):
        self.grant(GLOBAL, None, "admin")
        self.as_role(GLOBAL).execute("SELECT pgq.create_queue('by_global')")
        self.assertEqual(self.admin.execute(
            "SELECT owner FROM pgq.queues WHERE name = 'by_global'").fetchone()[0], GLOBAL)
        self.assertEqual(self.admin.execute(
            "SELECT owner FROM pgq.queues WHERE name = 'q'").fetchone()[0], "postgres")


class StreamRightsTest(PrivilegeTestCase):
    """Streams (issue 21, SPEC §10): produce, consume and admin per stream."""

    def setUp(self):
        super().setUp()
        self.admin.execute("SELECT pgq.create_stream('sa'), pgq.create_stream('sb')")
        for role in SPOOF_ROLES + ["pgq_t_o'brien"]:
            self.admin.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
        self.extra_roles = []

    def tearDown(self):
        super().tearDown()
        with psycopg.connect(DSN, autocommit=True) as conn:
            for role in self.extra_roles:
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))

    def grant_stream(self, role, stream, privilege):
        self.assertTrue(self.admin.execute(
            "SELECT pgq.grant_stream(%s, %s, %s)", (role, stream, privilege)).fetchone()[0])

    def stream_id(self, name):
        return self.admin.execute(
            "SELECT stream_id FROM pgq.streams WHERE name = %s", (name,)).fetchone()[0]

    def open_batch(self, stream, consumer, payload='{"n": 1}'):
        """A batch of one event opened by the superuser for a new consumer."""
        self.admin.execute("SELECT pgq.register_consumer(%s, %s)", (stream, consumer))
        self.admin.execute("SELECT pgq.append(%s, %s)", (stream, payload))
        return self.admin.execute(
            "SELECT batch_id FROM pgq.next_batch(%s, %s)", (stream, consumer)).fetchone()[0]

    def consumer_state(self, stream, consumer):
        return self.admin.execute(
            "SELECT c.batch_open, c.finished_batches FROM pgq.stream_consumers c"
            "  JOIN pgq.streams s USING (stream_id) WHERE s.name = %s AND c.name = %s",
            (stream, consumer)).fetchone()

    def test_producer_consumer_and_admin_of_a_stream_are_separate(self):
        self.grant_stream(PRODUCER, "sa", "produce")
        self.grant_stream(CONSUMER, "sa", "consume")
        self.grant_stream(ADMIN, "sa", "admin")
        producer, consumer, admin = (self.as_role(r) for r in (PRODUCER, CONSUMER, ADMIN))
        self.assertTrue(consumer.execute("SELECT pgq.register_consumer('sa', 'c')").fetchone()[0])

        # A producer appends; it cannot read, register, finish or administer.
        first = producer.execute("SELECT pgq.append('sa', '{\"to\": \"ann\"}')").fetchone()[0]
        many = [r[0] for r in producer.execute(
            "SELECT * FROM pgq.append_many('sa', ARRAY['{\"n\": 1}', '{\"n\": 2}']::jsonb[])")]
        self.assertEqual(len(many), 2)
        for call in ("SELECT pgq.append('sb', '{}')",
                     "SELECT * FROM pgq.append_many('sb', ARRAY['{}']::jsonb[])",
                     "SELECT * FROM pgq.next_batch('sa', 'c')",
                     "SELECT pgq.register_consumer('sa', 'p')",
                     "SELECT pgq.unregister_consumer('sa', 'c')",
                     "SELECT pgq.alter_stream('sa', '1 hour')", "SELECT pgq.drop_stream('sa')",
                     "SELECT pgq.create_stream('mine')",
                     "SELECT pgq.grant_stream('pgq_t_producer', 'sa', 'consume')"):
            with self.subTest(role="producer", call=call):
                self.refused(producer, call)

        # A consumer reads and finishes; it cannot append, drop or alter.
        rows = consumer.execute(
            "SELECT batch_id, event_id, payload FROM pgq.next_batch('sa', 'c')").fetchall()
        self.assertEqual([r[1] for r in rows], [first] + many)
        self.assertEqual(rows[0][2], {"to": "ann"})
        for call in ("SELECT pgq.append('sa', '{}')",
                     "SELECT * FROM pgq.append_many('sa', ARRAY['{}']::jsonb[])",
                     "SELECT pgq.drop_stream('sa')", "SELECT pgq.drop_stream('sa', if_exists => true)",
                     "SELECT pgq.alter_stream('sa', '1 hour')",
                     "SELECT pgq.register_consumer('sb', 'c')",
                     "SELECT * FROM pgq.next_batch('sb', 'c')",
                     "SELECT pgq.create_stream('mine')",
                     "SELECT pgq.grant_stream('pgq_t_consumer', 'sa', 'produce')",
                     "SELECT pgq.revoke_stream('pgq_t_producer', 'sa', 'produce')"):
            with self.subTest(role="consumer", call=call):
                self.refused(consumer, call)
        # Finishing a batch takes consume: not produce, not admin.
        self.refused(producer, "SELECT pgq.finish_batch(%s)", (rows[0][0],))
        self.refused(admin, "SELECT pgq.finish_batch(%s)", (rows[0][0],))
        self.assertEqual(consumer.execute("SELECT pgq.finish_batch(%s)", (rows[0][0],)).fetchone()[0], 3)

        # An admin alters, unregisters any consumer and drops; it cannot
        # append, read, register, nor touch another stream.
        admin.execute("SELECT pgq.alter_stream('sa', '1 hour')")
        for call in ("SELECT pgq.append('sa', '{}')",
                     "SELECT * FROM pgq.append_many('sa', ARRAY['{}']::jsonb[])",
                     "SELECT * FROM pgq.next_batch('sa', 'c')",
                     "SELECT pgq.register_consumer('sa', 'a')",
                     "SELECT pgq.alter_stream('sb', '1 hour')", "SELECT pgq.drop_stream('sb')",
                     "SELECT pgq.unregister_consumer('sb', 'c')",
                     "SELECT pgq.create_stream('mine')",
                     "SELECT pgq.grant_stream('pgq_t_admin', 'sa', 'produce')"):
            with self.subTest(role="admin", call=call):
                self.refused(admin, call)
        self.assertEqual(self.admin.execute(
            "SELECT rotation FROM pgq.streams WHERE name = 'sa'").fetchone()[0].total_seconds(), 3600)
        # Appending takes produce, which the owner (here a superuser) grants.
        self.grant_stream(ADMIN, "sa", "produce")
        admin.execute("SELECT pgq.append('sa', '{}')")
        self.refused(admin, "SELECT * FROM pgq.next_batch('sa', 'c')")
        self.assertTrue(admin.execute("SELECT pgq.unregister_consumer('sa', 'c')").fetchone()[0])
        with self.assertRaises(errors.UndefinedObject):
            consumer.execute("SELECT * FROM pgq.next_batch('sa', 'c')")
        # A consumer may unregister (its own or another) consumer too.
        self.assertTrue(consumer.execute("SELECT pgq.register_consumer('sa', 'c')").fetchone()[0])
        self.assertTrue(consumer.execute("SELECT pgq.unregister_consumer('sa', 'c')").fetchone()[0])
        self.assertTrue(admin.execute("SELECT pgq.drop_stream('sa')").fetchone()[0])
        self.assertEqual(self.admin.execute(
            "SELECT count(*) FROM pgq.stream_grants WHERE stream_id NOT IN"
            " (SELECT stream_id FROM pgq.streams)").fetchone()[0], 0, "grants outlived the stream")

    def test_a_consume_grant_on_one_stream_does_not_reach_another_streams_batch(self):
        self.grant_stream(CONSUMER, "sa", "consume")
        batch_b = self.open_batch("sb", "r", '{"card": "4111"}')
        consumer = self.as_role(CONSUMER)
        with self.assertRaises(errors.InvalidParameterValue) as refused:
            consumer.execute("SELECT pgq.finish_batch(%s)", (batch_b,))
        diag = refused.exception.diag
        # Answered as a batch that does not exist: a role that may not use
        # stream B learns neither its name nor that the batch is there.
        self.assertEqual(diag.message_primary, f"batch {batch_b} does not exist")
        for text in (diag.message_primary, diag.message_detail, diag.message_hint):
            self.assertNotIn("sb", text or "")
        self.assertEqual(self.consumer_state("sb", "r"), (True, 0), "the batch was finished")
        # Nor can it read B's events in any way.
        for call in ("SELECT * FROM pgq.next_batch('sb', 'r')",
                     "SELECT pgq.register_consumer('sb', 'spy')",
                     "SELECT * FROM pgq.next_batch('sb', 'spy')",
                     f"SELECT * FROM pgq.stream_events_{self.stream_id('sb')}",
                     "SELECT * FROM pgq.stream_events"):
            with self.subTest(call=call):
                self.refused(consumer, call)
        self.assertEqual(consumer.execute("SELECT count(*) FROM pgq.stream_stats WHERE stream = 'sb'")
                         .fetchone()[0], 0)
        # An id no consumer has is answered as before: it does not exist.
        for never in (batch_b + (1000 << 32), -batch_b, 0):
            with self.subTest(batch=never), self.assertRaises(errors.InvalidParameterValue):
                consumer.execute("SELECT pgq.finish_batch(%s)", (never,))
        # Its own stream's batch it finishes.
        consumer.execute("SELECT pgq.register_consumer('sa', 'mine')")
        self.admin.execute("SELECT pgq.append('sa', '{}')")
        mine = consumer.execute("SELECT batch_id FROM pgq.next_batch('sa', 'mine')").fetchone()[0]
        self.assertEqual(consumer.execute("SELECT pgq.finish_batch(%s)", (mine,)).fetchone()[0], 1)

    def test_consumers_are_not_bound_to_roles_the_consume_right_covers_them_all(self):
        # Finding (as the contract says, SPEC §10): finish_batch takes the
        # consume right on the batch's stream, nothing more, and consumers
        # belong to no role. A role with consume on a stream may read the
        # open batch of another role's consumer of that stream with
        # next_batch under its name, finish (skip) it given or guessing its
        # id (consumer_id * 2^32 + batch number), and unregister that
        # consumer (which, registered again, starts after the events
        # appended meanwhile).
        self.grant_stream(CONSUMER, "sa", "consume")
        self.grant_stream(WORKER1, "sa", "consume")
        worker, consumer = self.as_role(WORKER1), self.as_role(CONSUMER)
        worker.execute("SELECT pgq.register_consumer('sa', 'workers')")
        self.admin.execute("SELECT pgq.append('sa', '{\"n\": 1}')")
        theirs = worker.execute("SELECT batch_id FROM pgq.next_batch('sa', 'workers')").fetchone()[0]
        self.assertEqual(consumer.execute(
            "SELECT batch_id, payload FROM pgq.next_batch('sa', 'workers')").fetchall(),
            [(theirs, {"n": 1})])
        self.assertEqual(consumer.execute("SELECT pgq.finish_batch(%s)", (theirs,)).fetchone()[0], 1)
        self.assertEqual(self.consumer_state("sa", "workers"), (False, 1))
        with self.assertRaises(errors.ObjectNotInPrerequisiteState):
            worker.execute("SELECT pgq.finish_batch(%s)", (theirs,))
        self.assertTrue(consumer.execute(
            "SELECT pgq.unregister_consumer('sa', 'workers')").fetchone()[0])
        self.admin.execute("SELECT pgq.append('sa', '{\"n\": 2}')")  # never seen by 'workers'
        worker.execute("SELECT pgq.register_consumer('sa', 'workers')")
        self.admin.execute("SELECT pgq.append('sa', '{\"n\": 3}')")
        self.assertEqual([r[0] for r in worker.execute(
            "SELECT payload FROM pgq.next_batch('sa', 'workers')")], [{"n": 3}])

    def test_only_the_owner_or_a_superuser_grants_on_a_stream(self):
        self.grant_stream(GLOBAL, None, "admin")
        owner = self.as_role(GLOBAL)
        owner.execute("SELECT pgq.create_stream('owned')")
        # The owner grants on its stream; twice is a no-op.
        self.assertEqual(owner.execute(
            "SELECT pgq.grant_stream(%s, 'owned', 'consume'), pgq.grant_stream(%s, 'owned', 'consume')",
            (CONSUMER, CONSUMER)).fetchone(), (True, False))
        self.assertTrue(self.as_role(CONSUMER).execute(
            "SELECT pgq.register_consumer('owned', 'c')").fetchone()[0])
        # An admin of a stream may not change who holds rights on it; an
        # admin of every stream may not either, on a stream it does not own,
        # nor may anyone but a superuser grant on every stream.
        self.grant_stream(ADMIN, "sa", "admin")
        admin = self.as_role(ADMIN)
        self.refused(admin, "SELECT pgq.grant_stream(%s, 'sa', 'consume')", (ADMIN,))
        self.refused(admin, "SELECT pgq.revoke_stream(%s, 'sa', 'admin')", (ADMIN,))
        self.refused(owner, "SELECT pgq.grant_stream(%s, 'sa', 'consume')", (GLOBAL,))
        self.refused(owner, "SELECT pgq.grant_stream(%s, NULL, 'consume')", (CONSUMER,))
        self.refused(owner, "SELECT pgq.revoke_stream(%s, NULL, 'admin')", (GLOBAL,))
        # A stream right is no queue right, and a queue owner no stream owner.
        self.refused(owner, "SELECT pgq.grant(%s, 'q', 'consume')", (CONSUMER,))
        self.refused(owner, "SELECT pgq.append('sa', '{}')")
        # Bad input.
        cases = [
            ("SELECT pgq.grant_stream('pgq_t_no_such_role', 'sa', 'consume')", errors.UndefinedObject),
            ("SELECT pgq.grant_stream(%s, 'no_such_stream', 'consume')" % repr(CONSUMER),
             errors.UndefinedObject),
            ("SELECT pgq.grant_stream(%s, 'sa', 'read')" % repr(CONSUMER), errors.InvalidParameterValue),
            ("SELECT pgq.grant_stream(%s, 'sa', 'produce, consume')" % repr(CONSUMER),
             errors.InvalidParameterValue),
            ("SELECT pgq.grant_stream(%s, 'sa', NULL)" % repr(CONSUMER), errors.NullValueNotAllowed),
            ("SELECT pgq.grant_stream(NULL, 'sa', 'consume')", errors.NullValueNotAllowed),
            ("SELECT pgq.grant_stream(%s, 'Bad Name', 'consume')" % repr(CONSUMER),
             errors.InvalidParameterValue),
            ("SELECT pgq.revoke_stream(%s, 'no_such_stream', 'consume')" % repr(CONSUMER),
             errors.UndefinedObject),
        ]
        for call, error in cases:
            with self.subTest(call=call), self.assertRaises(error):
                self.admin.execute(call)
        self.assertEqual(owner.execute(
            "SELECT pgq.revoke_stream(%s, 'owned', 'consume'), pgq.revoke_stream(%s, 'owned', 'consume')",
            (CONSUMER, CONSUMER)).fetchone(), (True, False))
        self.refused(self.as_role(CONSUMER), "SELECT * FROM pgq.next_batch('owned', 'c')")

    def test_an_owner_whose_name_needs_quoting_grants_on_its_stream(self):
        # The owner check must compare roles, not a quoted name with a bare one.
        self.grant_stream(OWNER_QUOTED, None, "admin")
        self.grant_stream("pgq_t_o'brien", None, "admin")
        for role, stream in ((OWNER_QUOTED, "quoted_s"), ("pgq_t_o'brien", "obrien_s")):
            with self.subTest(role=role):
                conn = self.connect()
                conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
                conn.execute("SELECT pgq.create_stream(%s)", (stream,))
                self.assertEqual(self.admin.execute(
                    "SELECT owner::oid = (SELECT oid FROM pg_roles WHERE rolname = %s)"
                    "  FROM pgq.streams WHERE name = %s", (role, stream)).fetchone()[0], True)
                conn.execute("SELECT pgq.append(%s, '{}')", (stream,))  # the owner's rights
                try:
                    granted = conn.execute(
                        "SELECT pgq.grant_stream(%s, %s, 'consume')", (CONSUMER, stream)).fetchone()[0]
                except errors.InsufficientPrivilege as refused:
                    self.fail(f"the owner {role} may not grant on its own stream: {refused}")
                self.assertTrue(granted)

    def test_a_role_named_like_the_quoted_owner_is_not_the_owner(self):
        # A role literally named '"PgqT_Owner"' (with the double quotes) is
        # not PgqT_Owner: it may not grant itself rights on PgqT_Owner's stream.
        self.grant_stream(OWNER_QUOTED, None, "admin")
        owner = self.connect()
        owner.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(OWNER_QUOTED)))
        owner.execute("SELECT pgq.create_stream('quoted_s')")
        owner.execute("SELECT pgq.append('quoted_s', '{\"secret\": 1}')")
        spoof = self.connect()
        spoof.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(SPOOF)))
        self.refused(spoof, "SELECT pgq.grant_stream(%s, 'quoted_s', 'consume')", (SPOOF,))
        self.refused(spoof, "SELECT pgq.register_consumer('quoted_s', 'spy')")
        self.assertEqual(self.admin.execute(
            "SELECT count(*) FROM pgq.stream_grants WHERE role::oid ="
            " (SELECT oid FROM pg_roles WHERE rolname = %s)", (SPOOF,)).fetchone()[0], 0)

    def test_a_dropped_owners_stream_does_not_pass_to_a_role_named_after_its_oid(self):
        # A stream's owner is kept as a role (an OID). Once that role is
        # dropped, the OID reads as digits: a role created with those digits
        # for a name is not the owner.
        self.admin.execute("CREATE ROLE pgq_t_gone")
        self.grant_stream("pgq_t_gone", None, "admin")
        gone = self.connect()
        gone.execute("SET ROLE pgq_t_gone")
        gone.execute("SELECT pgq.create_stream('orphan')")
        gone.close()
        oid = self.admin.execute("SELECT oid FROM pg_roles WHERE rolname = 'pgq_t_gone'").fetchone()[0]
        self.admin.execute("SELECT pgq.revoke_stream('pgq_t_gone', NULL, 'admin')")
        self.admin.execute("DROP ROLE pgq_t_gone")
        impostor = str(oid)
        self.extra_roles.append(impostor)
        self.admin.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(impostor)))
        conn = self.connect()
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(impostor)))
        self.refused(conn, "SELECT pgq.grant_stream(%s, 'orphan', 'consume')", (impostor,))
        self.refused(conn, "SELECT pgq.append('orphan', '{}')")

    def test_stream_grants_of_a_dropped_role_are_removed_by_maintenance(self):
        # As queue and topic grants are (RightsTest.test_grants_of_a_dropped_
        # role_are_removed_by_maintenance): deleted before the OID could ever
        # name another role. No maintenance worker here meanwhile, as there.
        self.admin.execute("ALTER SYSTEM SET pgq.databases = 'postgres'")
        self.admin.execute("SELECT pg_reload_conf()")
        try:
            self.wait_for("the maintenance worker to leave", lambda: self.admin.execute(
                "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'pgq maintenance'"
                "   AND datname = current_database()").fetchone()[0])
            self.admin.execute("CREATE ROLE pgq_t_gone")
            self.grant_stream("pgq_t_gone", "sa", "consume")
            self.grant_stream("pgq_t_gone", None, "produce")
            self.admin.execute("DROP ROLE pgq_t_gone")
            count = "SELECT count(*) FROM pgq.stream_grants"
            self.assertEqual(self.admin.execute(count).fetchone()[0], 2)
            self.connect().execute("SELECT * FROM pgq.maintain()")
            self.assertEqual(self.admin.execute(count).fetchone()[0], 0)
        finally:
            self.admin.execute("ALTER SYSTEM RESET pgq.databases")
            self.admin.execute("SELECT pg_reload_conf()")

    def test_a_grant_on_every_stream_is_a_superusers_and_covers_streams_made_later(self):
        self.grant_stream(GLOBAL, None, "consume")
        self.grant_stream(GLOBAL, None, "admin")
        self.admin.execute("SELECT pgq.create_stream('later')")
        self.admin.execute("SELECT pgq.register_consumer('later', 'g')")
        self.admin.execute("SELECT pgq.append('later', '{}')")
        worker = self.as_role(GLOBAL)
        batch = worker.execute("SELECT batch_id FROM pgq.next_batch('later', 'g')").fetchall()
        self.assertEqual(len(batch), 1)
        self.assertEqual(worker.execute("SELECT pgq.finish_batch(%s)", (batch[0][0],)).fetchone()[0], 1)
        # admin on every stream lets it create streams, which it then owns
        # (every right on them), and alter or drop anyone's.
        worker.execute("SELECT pgq.create_stream('its_own')")
        worker.execute("SELECT pgq.append('its_own', '{}')")
        self.refused(worker, "SELECT pgq.append('later', '{}')")  # no produce on 'later'
        worker.execute("SELECT pgq.alter_stream('sb', '1 hour')")
        self.assertTrue(worker.execute("SELECT pgq.drop_stream('sb')").fetchone()[0])
        # It cannot hand those rights on: only a superuser grants on every stream.
        self.refused(worker, "SELECT pgq.grant_stream(%s, NULL, 'consume')", (CONSUMER,))
        self.refused(worker, "SELECT pgq.grant_stream(%s, NULL, 'produce')", (GLOBAL,))
        self.assertTrue(self.admin.execute(
            "SELECT pgq.revoke_stream(%s, NULL, 'consume')", (GLOBAL,)).fetchone()[0])
        self.refused(worker, "SELECT * FROM pgq.next_batch('later', 'g')")
        worker.execute("SELECT pgq.register_consumer('its_own', 'mine')")
        self.assertTrue(self.admin.execute(
            "SELECT pgq.revoke_stream(%s, NULL, 'admin')", (GLOBAL,)).fetchone()[0])
        self.refused(worker, "SELECT pgq.create_stream('another')")
        self.refused(worker, "SELECT pgq.alter_stream('sa', '1 hour')")
        worker.execute("SELECT pgq.alter_stream('its_own', '1 hour')")  # still its owner

    def test_a_stream_grant_to_a_group_counts_for_its_inheriting_members(self):
        self.grant_stream(WORKERS, "sa", "consume")
        self.admin.execute("SELECT pgq.register_consumer('sa', 'w')")
        self.admin.execute("SELECT pgq.append('sa', '{}')")
        self.refused(self.as_role("pgq_t_noinherit"), "SELECT * FROM pgq.next_batch('sa', 'w')")
        self.refused(self.as_role(LONER), "SELECT * FROM pgq.next_batch('sa', 'w')")
        member = self.as_role(WORKER1)
        batch = member.execute("SELECT batch_id FROM pgq.next_batch('sa', 'w')").fetchone()[0]
        # Leaving the group takes the right from the next transaction.
        self.admin.execute(f"REVOKE {WORKERS} FROM {WORKER1}")
        self.refused(member, "SELECT pgq.finish_batch(%s)", (batch,))
        self.refused(member, "SELECT * FROM pgq.next_batch('sa', 'w')")
        self.admin.execute(f"GRANT {WORKERS} TO {WORKER1}")
        self.assertEqual(member.execute("SELECT pgq.finish_batch(%s)", (batch,)).fetchone()[0], 1)

    def test_a_stream_revoke_counts_from_the_next_transaction_of_every_session(self):
        self.grant_stream(CONSUMER, "sa", "consume")
        self.grant_stream(PRODUCER, "sa", "produce")
        consumer, producer = self.as_role(CONSUMER), self.as_role(PRODUCER)
        consumer.execute("SELECT pgq.register_consumer('sa', 'c')")
        producer.execute("SELECT pgq.append('sa', '{}')")
        batch = consumer.execute("SELECT batch_id FROM pgq.next_batch('sa', 'c')").fetchone()[0]
        self.assertTrue(self.admin.execute(
            "SELECT pgq.revoke_stream(%s, 'sa', 'consume'), pgq.revoke_stream(%s, 'sa', 'produce')",
            (CONSUMER, PRODUCER)).fetchone()[0])
        self.refused(consumer, "SELECT * FROM pgq.next_batch('sa', 'c')")
        self.refused(consumer, "SELECT pgq.finish_batch(%s)", (batch,))
        self.refused(producer, "SELECT pgq.append('sa', '{}')")
        # A session in a transaction since before the revoke: refused from
        # its next transaction at the latest.
        self.grant_stream(PRODUCER, "sa", "produce")
        tx = self.connect(autocommit=False)
        tx.execute(f"SET ROLE {PRODUCER}")
        tx.execute("SELECT pgq.append('sa', '{}')")
        self.admin.execute("SELECT pgq.revoke_stream(%s, 'sa', 'produce')", (PRODUCER,))
        tx.commit()
        self.refused(tx, "SELECT pgq.append('sa', '{}')")
        tx.rollback()
        self.grant_stream(CONSUMER, "sa", "consume")
        self.assertEqual(consumer.execute("SELECT pgq.finish_batch(%s)", (batch,)).fetchone()[0], 1)

    def test_the_creator_owns_the_stream_not_the_owner_of_the_tables(self):
        self.grant_stream(GLOBAL, None, "admin")
        creator = self.as_role(GLOBAL)
        creator.execute("SELECT pgq.create_stream('by_global')")
        self.assertEqual(self.admin.execute(
            "SELECT owner::text FROM pgq.streams WHERE name = 'by_global'").fetchone()[0], GLOBAL)
        self.assertEqual(self.admin.execute(
            "SELECT owner::text FROM pgq.streams WHERE name = 'sa'").fetchone()[0], "postgres")
        # Its segment tables are pgq's, like every other table of the schema:
        # the creator cannot read, alter or put a trigger on them.
        sid = self.stream_id("by_global")
        tables = self.admin.execute(
            "SELECT c.relname, c.relowner = n.nspowner, c.relacl IS NULL FROM pg_class c"
            "  JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'pgq' AND c.relkind IN ('r', 'p')"
            "   AND c.relname ~ ('^stream_events_' || %s || '(_[0-9]+)?$')"
            " ORDER BY 1", (str(sid),)).fetchall()
        self.assertEqual(tables, [(f"stream_events_{sid}", True, True)] +
                         [(f"stream_events_{sid}_{k}", True, True) for k in range(3)])
        for call in (f"SELECT * FROM pgq.stream_events_{sid}_0",
                     f"INSERT INTO pgq.stream_events_{sid}_0 VALUES ({sid}, 0, '1', 1, now(), '{{}}')",
                     f"TRUNCATE pgq.stream_events_{sid}_1",
                     f"ALTER TABLE pgq.stream_events_{sid}_0 ENABLE ROW LEVEL SECURITY",
                     "UPDATE pgq.streams SET owner = 'pgq_t_global' WHERE name = 'sa'"):
            with self.subTest(call=call):
                self.refused(creator, call)
        # An owner holds every right on its stream, without a grant.
        self.assertTrue(self.admin.execute(
            "SELECT pgq.revoke_stream(%s, NULL, 'admin')", (GLOBAL,)).fetchone()[0])
        creator.execute("SELECT pgq.register_consumer('by_global', 'c')")
        creator.execute("SELECT pgq.append('by_global', '{}')")
        batch = creator.execute("SELECT batch_id FROM pgq.next_batch('by_global', 'c')").fetchone()[0]
        self.assertEqual(creator.execute("SELECT pgq.finish_batch(%s)", (batch,)).fetchone()[0], 1)
        self.assertTrue(creator.execute("SELECT pgq.drop_stream('by_global')").fetchone()[0])

    def test_stream_stats_show_only_streams_the_role_holds_a_right_on(self):
        self.open_batch("sa", "ra", '{"card": "1"}')
        self.open_batch("sb", "rb", '{"card": "2"}')
        self.grant_stream(PRODUCER, "sa", "produce")
        self.grant_stream(ADMIN, "sb", "admin")
        producer, admin, nobody = self.as_role(PRODUCER), self.as_role(ADMIN), self.as_role(NOBODY)
        for conn, seen in ((producer, [("sa", "ra")]), (admin, [("sb", "rb")]), (nobody, [])):
            for source in ("pgq.stream_stats", "pgq.stream_consumer_stats()"):
                with self.subTest(source=source, seen=seen):
                    self.assertEqual(conn.execute(
                        f"SELECT stream, consumer FROM {source} ORDER BY 1").fetchall(), seen)
        self.assertEqual(self.admin.execute(
            "SELECT stream, consumer FROM pgq.stream_stats ORDER BY 1").fetchall(),
            [("sa", "ra"), ("sb", "rb")])
        # A leaky function in the reader's WHERE clause only sees the rows
        # the function returned.
        self.admin.execute(
            "CREATE FUNCTION public.leak(t text) RETURNS boolean LANGUAGE plpgsql COST 0.0001 AS"
            " $$ BEGIN RAISE NOTICE 'leak: %', t; RETURN true; END $$")
        seen = []
        producer.add_notice_handler(lambda d: seen.append(d.message_primary))
        producer.execute("SELECT * FROM pgq.stream_stats WHERE public.leak(stream || '/' || consumer)")
        self.assertEqual(seen, ["leak: sa/ra"])

    def test_no_role_reads_the_stream_tables_directly(self):
        # Not even one holding every right on a stream: events are read
        # through next_batch only.
        self.open_batch("sa", "r", '{"card": "4111"}')
        for privilege in ("produce", "consume", "admin"):
            self.grant_stream(CONSUMER, "sa", privilege)
        sid = self.stream_id("sa")
        for role in (CONSUMER, NOBODY):
            conn = self.as_role(role)
            for table in ("stream_events", f"stream_events_{sid}", f"stream_events_{sid}_0",
                          f"stream_events_{sid}_1", f"stream_events_{sid}_2",
                          "stream_consumers", "streams", "stream_grants", "rings", "ring_segments"):
                with self.subTest(role=role, table=table):
                    self.refused(conn, f"SELECT * FROM pgq.{table}")
            with self.subTest(role=role, what="sequences"):
                self.refused(conn, "SELECT nextval('pgq.stream_event_id_seq')")
                self.refused(conn, "SELECT setval('pgq.stream_consumer_id_seq', 1)")
            with self.subTest(role=role, what="writes"):
                self.refused(conn, "UPDATE pgq.stream_consumers SET batch_open = false")
                self.refused(conn, "INSERT INTO pgq.stream_grants VALUES (%s, 0, 'admin')", (role,))

    def test_stream_and_consumer_names_are_validated(self):
        # Names never reach SQL text (tables are named by id), and a name
        # that is not one is refused before anything runs: 22023.
        bad = ["x;drop table pgq.streams", "sa'; DROP TABLE pgq.streams; --", 'sa"', "sa)",
               "Upper", "a b", "", "a" * 64, "_x", "-x", ".x", "ñandú", "sa\n",
               "sa/1", "sa:1", "sa*", "s%a"]
        calls = [
            "SELECT pgq.create_stream(%(n)s)", "SELECT pgq.alter_stream(%(n)s, '1 hour')",
            "SELECT pgq.drop_stream(%(n)s, if_exists => true)", "SELECT pgq.append(%(n)s, '{}')",
            "SELECT * FROM pgq.append_many(%(n)s, ARRAY['{}']::jsonb[])",
            "SELECT pgq.register_consumer(%(n)s, 'c')", "SELECT pgq.register_consumer('sa', %(n)s)",
            "SELECT pgq.unregister_consumer(%(n)s, 'c')", "SELECT pgq.unregister_consumer('sa', %(n)s)",
            "SELECT * FROM pgq.next_batch(%(n)s, 'c')", "SELECT * FROM pgq.next_batch('sa', %(n)s)",
            "SELECT pgq.grant_stream('pgq_t_consumer', %(n)s, 'consume')",
            "SELECT pgq.revoke_stream('pgq_t_consumer', %(n)s, 'consume')",
        ]
        self.grant_stream(GLOBAL, None, "admin")
        self.grant_stream(GLOBAL, None, "consume")
        self.grant_stream(GLOBAL, None, "produce")
        for conn in (self.admin, self.as_role(GLOBAL)):
            for name in bad:
                for call in calls:
                    with self.subTest(name=name, call=call), \
                            self.assertRaises(errors.InvalidParameterValue):
                        conn.execute(call, {"n": name})
        self.assertEqual(self.admin.execute(
            "SELECT array_agg(name ORDER BY name) FROM pgq.streams").fetchone()[0], ["sa", "sb"])
        # The longest and the oddest valid names work (a dot is a character
        # like any other: 'pgq.sa' is not stream sa of a schema pgq).
        for name in ("a" * 63, "0.a-b_c", "pgq.sa"):
            self.admin.execute("SELECT pgq.create_stream(%s)", (name,))
            self.admin.execute("SELECT pgq.register_consumer(%s, %s)", (name, name))
            self.admin.execute("SELECT pgq.append(%s, '{}')", (name,))
            self.assertEqual(len(self.admin.execute(
                "SELECT * FROM pgq.next_batch(%s, %s)", (name, name)).fetchall()), 1)
