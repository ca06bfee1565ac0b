"""Per-queue rights and the catalog audit (issue 7; SPEC §7; docs/security.md).

Rights: produce, consume and admin, granted per queue with pgq.grant (queue
NULL: every queue, present and future), checked inside the functions, whose
statements then run as the owner of pgq's tables. The roles here have no
privilege on any pgq table: whatever they can do, they can do through the
functions and their grants only.

Audit: who may execute what (the PUBLIC list is docs/security.md's), no
SECURITY DEFINER function, every function pinned to pg_catalog (C functions
pin it per statement: test_search_path.py), nothing in the schema readable
by PUBLIC except the two filtered, security-barrier views.

Roles are cluster-wide: each test creates the ones it needs and drops them.
"""
import psycopg
from psycopg import errors, sql

from test_concurrency import DSN, PgqTestCase

PRODUCER, CONSUMER, ADMIN, NOBODY = "pgq_t_producer", "pgq_t_consumer", "pgq_t_admin", "pgq_t_nobody"
WORKERS, WORKER1, LONER, GLOBAL = "pgq_t_workers", "pgq_t_worker1", "pgq_t_loner", "pgq_t_global"
ROLES = [PRODUCER, CONSUMER, ADMIN, NOBODY, WORKER1, LONER, WORKERS, GLOBAL]

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
}
ANSWER_ANYONE = {"clock", "has_queue_privilege", "queue_overview"}


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
        for role in ["pgq_t_noinherit", "pgq_t_gone", "pgq_t_o'brien"] + ROLES:
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
        nobody = self.as_role(NOBODY)
        for name, sql in REFUSED_CALLS.items():
            with self.subTest(function=name):
                self.refused(nobody, sql, {"q_id": q_id, "job": job})
        self.assertEqual(self.job_state(job), ("r", 1), "a refused call changed the job")
        self.assertEqual(self.admin.execute(
            "SELECT count(*) FROM pgq.queues WHERE name = 'q' AND NOT paused").fetchone()[0], 1)
        # The three that answer anyone say "no", or show nothing.
        self.assertFalse(nobody.execute(
            "SELECT pgq.has_queue_privilege('q', 'produce, consume, admin')").fetchone()[0])
        nobody.execute("SELECT pgq.clock()")
        self.assertEqual(nobody.execute("SELECT count(*) FROM pgq.queue_overview()").fetchone()[0], 0)

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
        rows = self.admin.execute(
            "SELECT c.relname, c.relkind, c.reloptions,"
            "       EXISTS (SELECT 1 FROM aclexplode(c.relacl) a WHERE a.grantee = 0),"
            "       has_table_privilege(%s, c.oid, 'SELECT, INSERT, UPDATE, DELETE')"
            "  FROM pg_class c WHERE c.relnamespace = 'pgq'::regnamespace"
            "   AND c.relkind IN ('r', 'v', 'S', 'm', 'p')", (NOBODY,)).fetchall()
        self.assertIn("grants", {r[0] for r in rows})
        for name, kind, options, public, nobody_may in rows:
            if name in ("queue_stats", "schedules", "running_jobs"):
                self.assertEqual(kind, "v")
                self.assertIn("security_barrier=true", options or [], name)
                self.assertTrue(public and nobody_may, name)
            else:
                self.assertFalse(public or nobody_may, f"pgq.{name} is readable by PUBLIC")
        nobody = self.as_role(NOBODY)
        for table in ("jobs", "dead_jobs", "events", "recurring", "grants", "queues"):
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
