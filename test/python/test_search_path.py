"""Nothing of pgq_cpp resolves a name through the caller's search_path
(issue 7, catalog audit): a schema planted first on a session's search_path,
holding a malicious now(), = and < operators for the types our statements
compare, unnest() and count(), is never called by any pgq function, although
the session's own unqualified SQL does pick them up.

Every call logs into a table the planted objects write to; the log must stay
empty. Streams (2.0) too: every stream function is driven (checked), with
min() and the xid8, smallint and bigint operators their statements use
planted as well, through rotation and truncation of a ring.

Runs like test_concurrency.py (same DSN, same fresh-extension setUp).
"""

import re

import psycopg

from test_concurrency import DSN, PgqTestCase

PLANT = r"""
DROP SCHEMA IF EXISTS evil CASCADE;
CREATE SCHEMA evil;
CREATE TABLE evil.calls (what text);
GRANT ALL ON SCHEMA evil TO PUBLIC;
GRANT ALL ON evil.calls TO PUBLIC;
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql VOLATILE AS
  $$ INSERT INTO evil.calls VALUES ('now()'); SELECT pg_catalog.now() $$;
CREATE FUNCTION evil.count(anyelement) RETURNS bigint LANGUAGE sql VOLATILE AS
  $$ INSERT INTO evil.calls VALUES ('count()'); SELECT 1::bigint $$;
CREATE FUNCTION evil.unnest(anyarray) RETURNS SETOF anyelement LANGUAGE sql VOLATILE AS
  $$ INSERT INTO evil.calls VALUES ('unnest()'); SELECT * FROM pg_catalog.unnest($1) $$;
-- pgq's own names: tables (views that log every read) and functions.
CREATE FUNCTION evil.log(what text) RETURNS boolean LANGUAGE sql VOLATILE AS
  $$ INSERT INTO evil.calls VALUES (what); SELECT true $$;
CREATE VIEW evil.jobs AS SELECT * FROM pgq.jobs WHERE evil.log('jobs');
CREATE VIEW evil.queues AS SELECT * FROM pgq.queues WHERE evil.log('queues');
CREATE VIEW evil.grants AS SELECT * FROM pgq.grants WHERE evil.log('grants');
CREATE FUNCTION evil.clock() RETURNS timestamptz LANGUAGE sql VOLATILE AS
  $$ INSERT INTO evil.calls VALUES ('clock()'); SELECT pg_catalog.now() $$;
CREATE FUNCTION evil.has_queue_privilege(text, text) RETURNS boolean LANGUAGE sql VOLATILE AS
  $$ INSERT INTO evil.calls VALUES ('has_queue_privilege()'); SELECT true $$;
CREATE FUNCTION evil.unflushed_completions(integer) RETURNS bigint LANGUAGE sql VOLATILE AS
  $$ INSERT INTO evil.calls VALUES ('unflushed_completions()'); SELECT 0::bigint $$;
-- Streams: their tables, and functions their statements call.
CREATE VIEW evil.streams AS SELECT * FROM pgq.streams WHERE evil.log('streams');
CREATE VIEW evil.stream_consumers AS SELECT * FROM pgq.stream_consumers WHERE evil.log('stream_consumers');
CREATE VIEW evil.stream_grants AS SELECT * FROM pgq.stream_grants WHERE evil.log('stream_grants');
CREATE VIEW evil.rings AS SELECT * FROM pgq.rings WHERE evil.log('rings');
CREATE VIEW evil.ring_segments AS SELECT * FROM pgq.ring_segments WHERE evil.log('ring_segments');
CREATE VIEW evil.stream_events AS SELECT * FROM pgq.stream_events WHERE evil.log('stream_events');
CREATE FUNCTION evil.min(timestamptz) RETURNS timestamptz LANGUAGE sql VOLATILE AS
  $$ INSERT INTO evil.calls VALUES ('min()'); SELECT $1 $$;
CREATE FUNCTION evil.max(xid8) RETURNS xid8 LANGUAGE sql VOLATILE AS
  $$ INSERT INTO evil.calls VALUES ('max()'); SELECT $1 $$;
CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql VOLATILE AS
  $$ INSERT INTO evil.calls VALUES ('clock_timestamp()'); SELECT pg_catalog.clock_timestamp() $$;
CREATE FUNCTION evil.pg_current_snapshot() RETURNS pg_snapshot LANGUAGE sql VOLATILE AS
  $$ INSERT INTO evil.calls VALUES ('pg_current_snapshot()'); SELECT pg_catalog.pg_current_snapshot() $$;
CREATE FUNCTION evil.stream_consumer_stats() RETURNS SETOF text LANGUAGE sql VOLATILE AS
  $$ INSERT INTO evil.calls VALUES ('stream_consumer_stats()'); SELECT 'x' $$;
GRANT SELECT ON ALL TABLES IN SCHEMA evil TO PUBLIC;
"""
APP = "pgq_t_search_path_app"

# (type, operator, pg_catalog function that does the real work)
OPERATORS = [
    ("bigint", "=", "int8eq"), ("integer", "=", "int4eq"), ("text", "=", "texteq"),
    ("timestamptz", "<", "timestamptz_lt"), ("timestamptz", "<=", "timestamptz_le"),
    ("integer", "<", "int4lt"), ("integer", ">=", "int4ge"), ("bigint", "<", "int8lt"),
    # Streams: (txid, id) positions, segments.
    ("xid8", "=", "xid8eq"), ("xid8", "<", "xid8lt"), ("xid8", ">", "xid8gt"),
    ("xid8", "<=", "xid8le"), ("xid8", ">=", "xid8ge"), ("bigint", ">", "int8gt"),
    ("bigint", "<=", "int8le"), ("smallint", "=", "int2eq"), ("smallint", "<>", "int2ne"),
]
# Every one of these is called by drive() (checked).
STREAM_FUNCTIONS = {
    "create_stream", "alter_stream", "drop_stream", "append", "append_many",
    "register_consumer", "unregister_consumer", "next_batch", "finish_batch",
    "grant_stream", "revoke_stream", "stream_consumer_stats",
    "acquire_consumer", "release_consumer", "stream_segments",
}


class SearchPathTest(PgqTestCase):
    def plant(self):
        self.admin.execute(PLANT)
        for i, (typ, op, real) in enumerate(OPERATORS):
            self.admin.execute(
                f"CREATE FUNCTION evil.op{i}(a {typ}, b {typ}) RETURNS boolean LANGUAGE sql"
                f" VOLATILE AS $$ INSERT INTO evil.calls VALUES ('{typ} {op}');"
                f" SELECT pg_catalog.{real}(a, b) $$"
            )
            self.admin.execute(
                f"CREATE OPERATOR evil.{op} (leftarg = {typ}, rightarg = {typ},"
                f" function = evil.op{i})"
            )

    def calls(self):
        return [r[0] for r in self.admin.execute("SELECT what FROM evil.calls").fetchall()]

    def tearDown(self):
        super().tearDown()
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS evil CASCADE")
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (APP,)).fetchone():
                conn.execute(f"DROP OWNED BY {APP}")
                conn.execute(f"DROP ROLE {APP}")

    def victim(self, superuser):
        victim = self.connect()
        if not superuser:
            # Another role, with its grants and nothing else.
            self.admin.execute(f"DROP ROLE IF EXISTS {APP}")
            self.admin.execute(f"CREATE ROLE {APP}")
            for privilege in ("produce", "consume", "admin"):
                self.admin.execute("SELECT pgq.grant(%s, NULL, %s)", (APP, privilege))
                self.admin.execute("SELECT pgq.grant_stream(%s, NULL, %s)", (APP, privilege))
            self.admin.execute(f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgq TO {APP}")
            victim.execute(f"SET ROLE {APP}")
        victim.execute("SET search_path = evil, pg_catalog, public")
        # The planted objects work: the session's own SQL calls them.
        victim.execute("SELECT now(), 1::bigint = 1::bigint, clock()")
        self.assertEqual(sorted(self.calls()), ["bigint =", "clock()", "now()"])
        self.admin.execute("TRUNCATE evil.calls")
        return victim

    def test_planted_objects_are_never_called(self):
        self.plant()
        self.drive(self.victim(superuser=True), superuser=True)
        self.assertEqual(self.calls(), [], "a pgq function called a planted object")

    def test_planted_objects_are_never_called_for_another_role(self):
        self.plant()
        self.drive(self.victim(superuser=False), superuser=False)
        self.assertEqual(self.calls(), [], "a pgq function called a planted object")

    def drive(self, victim, superuser):
        called = set()

        def run(q, *a):
            called.update(re.findall(r"pgq\.(\w+)\(", q))
            return victim.execute(q, a).fetchall()

        run("SELECT pgq.create_queue('mail', max_attempts => 2, rate_limit => 100)")
        run("SELECT pgq.create_queue('g')")
        ids = [run("SELECT pgq.enqueue('mail', '{}', priority => %s)", p)[0][0] for p in (1, 2)]
        run("SELECT pgq.enqueue('mail', '{}', dedupe_key => 'd')")
        run("SELECT pgq.enqueue('mail', '{}', dedupe_key => 'd')")
        run("SELECT pgq.enqueue('g', '{}', group_key => 'k')")
        run("SELECT pgq.enqueue('g', '{}', group_key => 'k')")
        run("SELECT pgq.enqueue_many('mail', ARRAY['{}', '{}']::jsonb[])")
        claimed = run("SELECT id, attempt FROM pgq.claim('mail', 3)")
        self.assertEqual(len(claimed), 3)
        (a, aa), (b, ba), (c, ca) = claimed
        run("SELECT pgq.complete(%s, %s)", a, aa)
        run("SELECT pgq.extend(%s, %s, '5 minutes')", b, ba)
        run("SELECT pgq.release(%s, %s)", b, ba)
        run("SELECT pgq.fail(%s, %s, 'x', '0')", c, ca)
        more = run("SELECT id, attempt FROM pgq.claim('mail', 10, wait => '10 ms')")
        run("SELECT pgq.complete_many(%s::bigint[], %s::int[])",
            [m[0] for m in more], [m[1] for m in more])
        g = run("SELECT id, attempt FROM pgq.claim('g', 1)")[0]
        run("SELECT pgq.complete(%s, %s)", *g)
        later = run("SELECT pgq.enqueue('mail', '{}', run_at => pg_catalog.now() + '1 hour'::interval)")[0][0]
        run("SELECT pgq.cancel(%s)", later)
        run("SELECT pgq.retry_dead('mail', 10)")
        # 3.0's read surfaces: the job, why it is dead, the outcome of
        # cancel and retry, the queue's settings, workers and schedule runs.
        run("SELECT * FROM pgq.list_jobs('mail', 'cancelled', reason => 'cancelled')")
        run("SELECT pgq.retry_dead_job(%s), pgq.cancel_job(%s)", later, later)
        run("SELECT pgq.cancel_job(%s), pgq.retry_dead_job(%s)", later, later)
        run("SELECT pgq.cancel_job(%s), pgq.purge_dead_job(%s), pgq.purge_dead_job(%s)",
            later, later, later)
        run("SELECT * FROM pgq.queue_settings() a, pgq.queue_settings('mail') b")
        run("SELECT * FROM pgq.queue_workers() a, pgq.queue_workers('mail') b")
        parent = run("SELECT pgq.enqueue('mail', '{}', dedupe_key => 'sp-key')")[0][0]
        child = run("SELECT pgq.enqueue('mail', '{}', after => ARRAY[%s]::bigint[], group_key => 'sp-key')",
                    parent)[0][0]
        run("SELECT * FROM pgq.job_dependencies(%s) a, pgq.job_dependencies(%s) b", parent, child)
        run("SELECT * FROM pgq.find_jobs('sp-key')")
        run("SELECT pgq.cancel(%s)", parent)
        run("SELECT * FROM pgq.job_dependencies(%s)", parent)
        run("SELECT * FROM pgq.maintain()")
        if superuser:
            run("SELECT pgq.compact_jobs()")
        run("SELECT * FROM pgq.queue_stats")
        run("SELECT * FROM pgq.schedules")
        run("SELECT pgq.pause('mail'), pgq.resume('mail')")
        run("SELECT pgq.add_member('t', 'ann'), pgq.add_member('t', 'bob')")
        run("SELECT pgq.next_turn('t'), pgq.assign('t', 's1'), pgq.assign('t', 's1')")
        run("SELECT pgq.set_member_active('t', 'bob', false), pgq.remove_member('t', 'ann')")
        run("SELECT pgq.set_switch('s', true), pgq.switch('s')")
        run("SELECT pgq.advance('l', 1), pgq.advance('l', 3), pgq.once('o'), pgq.once('o')")
        run("SELECT pgq.schedule('sch', 'mail', '@every 1 second')")
        run("SELECT * FROM pgq.list_schedule_runs('mail', 'sch')")
        run("SELECT * FROM pgq.list_teams() a, pgq.list_switches() b, pgq.list_ladders('l') c")
        run("SELECT pgq.create_topic('topic')")
        run("SELECT pgq.subscribe('topic', 'mail')")
        run("SELECT pgq.publish('topic', '{}', dedupe_key => 'e1')")
        run("SELECT pgq.publish('topic', '{}', dedupe_key => 'e1')")
        run("SELECT pgq.unsubscribe('topic', 'mail'), pgq.unschedule('sch')")
        run("SELECT pgq.alter_queue('mail', lease => '1 minute', rate_limit => 0)")
        run("SELECT pgq.drop_queue('g', force => true)")
        self.assertTrue(ids)
        self.drive_streams(run)
        self.assertLessEqual(STREAM_FUNCTIONS, called, "a stream function was not driven")

    def drive_streams(self, run):
        # As the stream's creator (so its owner: it may grant), through a
        # whole ring: batches (a new window, the open batch again, the rest
        # of a window), a wait, stats, a rotation, a truncation, a drop.
        run("SELECT pgq.create_stream('events', rotation => '1 hour')")
        run("SELECT pgq.create_stream('events', if_not_exists => true)")
        run("SELECT pgq.register_consumer('events', 'r1'), pgq.register_consumer('events', 'r2')")
        run("SELECT pgq.register_consumer('events', 'r1')")
        # The relay's single-active guard (2.0.1): taken, taken again, released.
        self.assertEqual(run("SELECT pgq.acquire_consumer('events', 'r1')"), [(True,)])
        self.assertEqual(run("SELECT pgq.acquire_consumer('events', 'r1')"), [(True,)])
        self.assertEqual(run("SELECT pgq.release_consumer('events', 'r1')"), [(True,)])
        self.assertEqual(run("SELECT pgq.release_consumer('events', 'r1')"), [(False,)])
        first = run("SELECT pgq.append('events', '{\"n\": 1}')")[0][0]
        more = [r[0] for r in run("SELECT * FROM pgq.append_many('events', ARRAY['{}', '[]']::jsonb[])")]
        batch = run("SELECT batch_id, event_id FROM pgq.next_batch('events', 'r1', 2)")
        self.assertEqual([r[1] for r in batch], [first, more[0]])
        self.assertEqual(run("SELECT batch_id, event_id FROM pgq.next_batch('events', 'r1', 2)"), batch)
        run("SELECT * FROM pgq.stream_stats")
        run("SELECT * FROM pgq.stream_consumer_stats()")
        run("SELECT * FROM pgq.stream_segments() a, pgq.stream_segments('events') b")
        self.assertEqual(run("SELECT pgq.finish_batch(%s)", batch[0][0]), [(2,)])
        rest = run("SELECT batch_id, event_id FROM pgq.next_batch('events', 'r1', 10)")
        self.assertEqual([r[1] for r in rest], [more[1]])
        run("SELECT pgq.finish_batch(%s)", rest[0][0])
        self.assertEqual(run("SELECT * FROM pgq.next_batch('events', 'r1', 10, wait => '20 ms')"), [])
        r2 = run("SELECT batch_id FROM pgq.next_batch('events', 'r2', 100000)")
        run("SELECT pgq.finish_batch(%s)", r2[0][0])
        run("SELECT pgq.grant_stream('pg_monitor', 'events', 'consume')")
        run("SELECT pgq.revoke_stream('pg_monitor', 'events', 'consume')")
        # A ring turned and its sealed segment (every event finished)
        # truncated, by the victim's maintain(): no maintenance worker in this
        # database meanwhile.
        self.admin.execute("ALTER SYSTEM SET pgq.databases = 'postgres'")
        self.admin.execute("SELECT pg_reload_conf()")
        try:
            self.wait_for("the maintenance worker to leave", lambda: self.admin.execute(
                "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'pgq maintenance'"
                "   AND datname = current_database()").fetchone()[0])
            self.turn_and_truncate(run)
        finally:
            self.admin.execute("ALTER SYSTEM RESET pgq.databases")
            self.admin.execute("SELECT pg_reload_conf()")
        run("SELECT pgq.unregister_consumer('events', 'r2')")
        run("SELECT pgq.drop_stream('events'), pgq.drop_stream('events', if_exists => true)")

    def turn_and_truncate(self, run):
        run("SELECT pgq.alter_stream('events', '1 second')")
        victim_clock = run("SELECT pg_catalog.clock_timestamp()")[0][0]
        self.wait_for("the rotation to be due", lambda: self.admin.execute(
            "SELECT pg_catalog.clock_timestamp() - %s > '1.2 seconds'::interval",
            (victim_clock,)).fetchone()[0])
        rings = "SELECT generation FROM pgq.rings r JOIN pgq.streams s ON s.stream_id = r.ring_id" \
                " WHERE s.name = 'events'"
        generation = self.admin.execute(rings).fetchone()[0]
        truncated = "SELECT count(*) FROM pgq.ring_segments g JOIN pgq.streams s" \
                    " ON s.stream_id = g.ring_id WHERE s.name = 'events' AND g.truncated_at IS NOT NULL"
        self.assertEqual(self.admin.execute(truncated).fetchone()[0], 0)
        run("SELECT * FROM pgq.maintain()")
        self.assertEqual(self.admin.execute(rings).fetchone()[0], generation + 1)
        run("SELECT * FROM pgq.maintain()")
        self.assertEqual(self.admin.execute(truncated).fetchone()[0], 1)
