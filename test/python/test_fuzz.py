"""Fuzz every public pgq function with boundary and malformed arguments.

At least 10,000 calls (seeded, so a failure replays), each argument drawn
from a pool for its type: NULLs, empty and huge strings, 63/64-character
names, every n and lease edge, NaN and infinities, deep and \\u0000-carrying
JSON, bad intervals, cron specs and time zones, wrong-typed regprocedures,
1- and 2-dimensional arrays, ids of real and missing jobs. Every call must
end in a result or an error whose SQLSTATE is one we document (docs/reference.md, SPEC
section 7); never an internal error (XX000), never a lost connection (a
crashed backend), and the session stays usable after each call.

Streams (2.0) are fuzzed with the rest, on real streams (fs, fs2) with
registered consumers and open batches, and once more on their own: as a
superuser and as a role holding some rights only, now and then in a
REPEATABLE READ transaction, with hostile stream and consumer names,
max_events and wait edges, oversized payloads, arrays with NULLs and forged
batch ids. After that the streams still work, end to end, and maintenance
still runs.

Runs like test_concurrency.py (same DSN, same fresh-extension setUp).
"""

import os
import random

import psycopg
from psycopg import sql

from test_concurrency import PgqTestCase

CALLS = int(os.environ.get("PGQ_FUZZ_CALLS", "10000"))
STREAM_CALLS = int(os.environ.get("PGQ_FUZZ_STREAM_CALLS", "4000"))
SEED = int(os.environ.get("PGQ_FUZZ_SEED", "20261202"))

# SQLSTATEs a caller may see. Ours (docs/reference.md, sql/bad_input.sql)
# and PostgreSQL's own for arguments it rejects before or while casting them.
DOCUMENTED = {
    "22023",  # invalid_parameter_value
    "22004",  # null_value_not_allowed
    "42704",  # undefined_object: unknown queue, team, schedule
    "42710",  # duplicate_object: queue exists
    "54000",  # program_limit_exceeded: payload, compaction size
    "55006",  # object_in_use: drop_queue with jobs
    "55000",  # object_not_in_prerequisite_state
    "2202E",  # array_subscript_error: multi-dimensional arrays
    "22P02",  # invalid_text_representation (casts of the literals)
    "22P05",  # untranslatable_character: \\u0000 in jsonb
    "22007",  # invalid_datetime_format
    "22008",  # datetime_field_overflow
    "22003",  # numeric_value_out_of_range
    "22015",  # interval_field_overflow
    "42883",  # undefined_function: a regprocedure that does not exist
    "54001",  # statement_too_complex: JSON nested too deep
    "57014",  # query_canceled by the statement_timeout below
    "40001",  # serialization_failure: dedupe retries
    "25000",  # invalid_transaction_state
    "P0002",  # no_data_found: a team with no active member (docs/coordination.md)
    "42P17",  # invalid_object_definition: a handler of the wrong shape
    "42501",  # insufficient_privilege
    "22001",  # string_data_right_truncation: a result or progress over the payload limit
    "0A000",  # feature_not_supported: on_duplicate 'replace' with a group_key
    "23503",  # foreign_key_violation: after names a job that does not exist
    "53400",  # configuration_limit_exceeded: a queue at its max_pending (3.1)
}

NAMES = [None, "", "q", "fz", "missing", "Upper", "a b", "x;drop table pgq.jobs",
         "a" * 63, "a" * 64, "ñandú", "_x", "q" * 10000, "\x01"]
TEXTS = [None, "", "x", "signup-1", "a" * 512, "a" * 513, "b" * 100000, "ñ", "'\"\\", "\x7f"]
DEEP = "[" * 2000 + "]" * 2000
JSONS = [None, "{}", "[]", "null", '"s"', "1", '{"a": 1}', DEEP, '{"a": "\\u0000"}',
         '{"k": "' + "v" * 200000 + '"}', "not json"]
INTS = [None, 0, 1, -1, 2, 10000, 10001, 2**31 - 1, -(2**31)]
BIGINTS = [None, 0, 1, -1, 2**63 - 1, -(2**63), "JOB", "JOB+1"]
INTERVALS = [None, "0", "-1 second", "1 millisecond", "1 second", "10 minutes", "1 day",
             "2 days", "178000000 years", "200000 years", "101 years", "1 mon", "nonsense", "P1D"]
WAITS = [None, "0", "-1 second", "10 milliseconds", "nonsense"]
TIMESTAMPS = [None, "infinity", "-infinity", "epoch", "2999-01-01", "4713-01-01 BC",
              "now", "not a time"]
BOOLS = [None, True, False]
REALS = [None, 0.0, -1.0, 0.0001, 1e30, "NaN", "Infinity", "-Infinity"]
BIGINT_ARRAYS = [None, "{}", "{NULL}", "{1,2}", "{{1}}", "{JOB}", "{JOB,JOB}", "{JOB,999999999}",
                 "{" + ",".join(["1"] * 10001) + "}", "{-1}"]
QUEUE_ARRAYS = [None, "{}", "{NULL}", "{fz}", "{fz,fz}", "{fz,missing}", "{{fz}}", '{"a b"}',
                "{" + ",".join(f"q{i}" for i in range(33)) + "}", "{fz,q}", '{""}']
INT_ARRAYS = [None, "{}", "{NULL}", "{1,2}", "{{1}}", "{1}"]
JSON_ARRAYS = [None, "{}", "{NULL}", '{"{}"}', '{{"{}"}}', '{"{}","[]"}']
REGPROCS = [None, "now()", "pg_sleep(double precision)", "no_such_function(int)",
            "pg_temp.fuzz_handler(pgq.claimed_job)"]
CRONS = [None, "", "* * * * *", "0 3 * * *", "61 * * * *", "@every 1 second", "1," * 500 + "1 * * * *",
         "@every 200000 years",
         "@every 0 seconds", "@every nonsense", "@hourly", "@yearly", "* * *", "0 0 31 2 *"]
ROLES = [None, "postgres", "pgq_fuzz_no_such_role", "", "public", "x" * 63, "x" * 64,
         "Robert'); DROP TABLE pgq.jobs; --"]
PRIVILEGES = [None, "produce", "consume", "admin", "CONSUME", "produce, consume", "read",
              "", ",", "produce,", "all"]
# Streams (2.0). fs, fs2 and fs3 exist (stream_fixture); BATCH is the open
# batch of fs's consumer c, OTHER_BATCH fs2's, FOREIGN_BATCH fs3's (a stream
# the fuzzing role holds no right on), BATCH_ID_ONLY a batch id whose
# consumer exists but whose number was never given.
STREAM_NAMES = [None, "", "fs", "fs2", "missing", "Upper", "a b", "x;drop table pgq.streams",
                "fs'); DROP TABLE pgq.streams; --", "a" * 63, "a" * 64, "ñandú", "_x", "q" * 10000,
                "\x01", "fs.", "pgq.fs", "fs\n"]
CONSUMERS = [None, "", "c", "c2", "missing", "Upper", "a" * 63, "a" * 64, "x'--", "c c",
             "ñ", "\x7f"]
BATCH_IDS = [None, 0, 1, -1, 2**32, 2**32 + 1, 2**63 - 1, -(2**63), (2**31 - 1) << 32,
             "BATCH", "BATCH+1", "BATCH-1", "OTHER_BATCH", "FOREIGN_BATCH", "BATCH_ID_ONLY"]
MAX_EVENTS = [None, 0, 1, -1, 2, 1000, 100000, 100001, 2**31 - 1, -(2**31)]
ROTATIONS = [None, "0", "-1 second", "-2 hours", "999 milliseconds", "1 second", "1 hour",
             "2 hours", "1 day", "1 mon", "1 mon -30 days", "100 years", "100 years 1 day",
             "101 years", "178000000 years", "nonsense"]
BIG = '{"k": "' + "v" * 200000 + '"}'
PAYLOAD_ARRAYS = [None, "{}", "{NULL}", '{"{}",NULL}', '{NULL,"{}"}', '{"{}"}', '{{"{}"}}',
                  '{"{}","[]","1","null"}', "{" + ",".join(['"{}"'] * 1000) + "}",
                  '{"{}",' + '"' + BIG.replace('"', '\\"') + '"}',
                  '{"{\\"a\\": \\"\\\\u0000\\"}"}', '{"not json"}']
STREAM_WAITS = [None, "0", "-1 second", "1 millisecond", "10 milliseconds", "1 day",
                "178000000 years", "1 mon", "nonsense"]
ZONES = [None, "UTC", "Europe/Madrid", "America/Sao_Paulo", "Mars/Olympus", "", "+25:00",
         "garbage5", "+01:00", "europe/madrid"]

STATES = [None, "ready", "done", "dead", "cancelled", "waiting", "finished", "", "READY"]
REASONS = [None, "exhausted", "cancelled", "expired", "dependency_failed", "", "EXPIRED", "lost"]
ON_DUPLICATES = [None, "ignore", "replace", "merge", "", "IGNORE"]

# Pools by argument name first (where the name says more than the type).
BY_NAME = {
    "queue": NAMES, "team": NAMES, "member": NAMES, "topic": NAMES, "name": NAMES,
    "spec": CRONS, "timezone": ZONES, "wait": WAITS, "privilege": PRIVILEGES,
    "state": STATES, "on_duplicate": ON_DUPLICATES, "queues": QUEUE_ARRAYS,
    "stream": STREAM_NAMES, "consumer": CONSUMERS, "batch_id": BATCH_IDS,
    "max_events": MAX_EVENTS, "rotation": ROTATIONS, "payloads": PAYLOAD_ARRAYS,
    # 3.0 read surfaces (list_jobs' reason, list_schedule_runs, the
    # coordination readers).
    "reason": REASONS, "schedule": NAMES, "switch": NAMES, "ladder": NAMES,
}
# The stream functions, all of them (test_stream_functions_survive_bad_input
# checks the list against the catalog).
STREAM_FUNCTIONS = {
    "create_stream", "alter_stream", "drop_stream", "append", "append_many",
    "register_consumer", "unregister_consumer", "next_batch", "finish_batch",
    "grant_stream", "revoke_stream", "stream_consumer_stats",
    "acquire_consumer", "release_consumer", "stream_segments",
}
STREAM_ROLE = "pgq_fuzz_streams"
# Valid arguments: the stream fuzz draws each argument from here half of the
# time, so that calls get past the argument checks to the rights, the
# batches and the rows.
GOOD = {
    "stream": ["fs", "fs2", "fs3"], "consumer": ["c", "c2"], "max_events": [1, 2, 1000],
    "wait": ["0", "10 milliseconds"], "batch_id": ["BATCH", "OTHER_BATCH", "FOREIGN_BATCH"],
    "rotation": ["1 hour", "1 second"], "payload": ['{"n": 1}'], "payloads": ['{"{}","[]"}'],
    "role": [STREAM_ROLE, "postgres"], "privilege": ["produce", "consume", "admin"],
    "if_exists": [True, False], "if_not_exists": [True, False],
    # 3.1 (issue 35): a trace context, or none.
    "traceparent": [None, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"],
    "tracestate": [None, "congo=t61rcWkgMzE"],
}


def stream_fixture(admin):
    """(Re)creates streams fs and fs2, their consumers and open batches (the
    fuzz may have dropped, altered or unregistered any of them) and the
    fuzzing role's grants; returns the batch-id placeholders."""
    for stream in ("fs", "fs2", "fs3"):
        admin.execute("SELECT pgq.create_stream(%s, if_not_exists => true)", (stream,))
        admin.execute("SELECT pgq.append_many(%s, ARRAY['{\"n\": 1}', '{\"n\": 2}']::jsonb[])",
                      (stream,))
        admin.execute("SELECT pgq.register_consumer(%s, 'c')", (stream,))
    admin.execute("SELECT pgq.register_consumer('fs', 'c2')")
    if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (STREAM_ROLE,)).fetchone():
        # Exactly these rights, whatever the fuzz granted or revoked.
        for stream in (None, "fs", "fs2", "fs3"):
            for privilege in ("produce", "consume", "admin"):
                admin.execute("SELECT pgq.revoke_stream(%s, %s, %s)", (STREAM_ROLE, stream, privilege))
        admin.execute("SELECT pgq.grant_stream(%s, 'fs', 'produce'),"
                      "       pgq.grant_stream(%s, 'fs', 'consume'),"
                      "       pgq.grant_stream(%s, 'fs2', 'consume')", (STREAM_ROLE,) * 3)
    batches = {}
    for key, stream in (("OTHER_BATCH", "fs2"), ("FOREIGN_BATCH", "fs3"), ("BATCH", "fs")):
        row = admin.execute("SELECT batch_id FROM pgq.next_batch(%s, 'c', 10)", (stream,)).fetchone()
        batches[key] = row[0] if row else 1
    c2 = admin.execute("SELECT c.consumer_id FROM pgq.stream_consumers c JOIN pgq.streams s"
                       " USING (stream_id) WHERE s.name = 'fs' AND c.name = 'c2'").fetchone()[0]
    batch = batches.pop("BATCH")
    return {"OTHER_BATCH": str(batches["OTHER_BATCH"]), "FOREIGN_BATCH": str(batches["FOREIGN_BATCH"]),
            "BATCH_ID_ONLY": str((c2 << 32) + 77),
            "BATCH+1": str(batch + 1), "BATCH-1": str(batch - 1), "BATCH": str(batch)}


def placeholders(value, job, batches):
    """The pool value with its JOB and BATCH placeholders filled in."""
    if not isinstance(value, str):
        return value
    value = value.replace("JOB+1", str(job + 1)).replace("JOB", str(job))
    for key, real in batches.items():  # OTHER_BATCH before BATCH (dict order)
        value = value.replace(key, real)
    return value


def fuzz_functions(admin):
    """(name, argument names, argument types) of every pgq function."""
    functions = admin.execute(
        "SELECT p.proname, array_agg(a.name ORDER BY a.ord), array_agg(a.type ORDER BY a.ord)"
        "  FROM pg_proc p,"
        "       unnest(p.proargnames,"
        "              coalesce(p.proallargtypes, p.proargtypes::oid[])::regtype[]::text[],"
        "              coalesce(p.proargmodes, array_fill('i'::\"char\", ARRAY[p.pronargs])))"
        "       WITH ORDINALITY AS a(name, type, mode, ord)"
        " WHERE p.pronamespace = 'pgq'::regnamespace AND p.pronargs > 0"
        "   AND a.mode IN ('i', 'b', 'v')"  # input arguments (OUT ones too are named)
        " GROUP BY p.oid, p.proname"
        " UNION ALL SELECT p.proname, '{}', '{}' FROM pg_proc p"
        " WHERE p.pronamespace = 'pgq'::regnamespace AND p.pronargs = 0"
        "   AND p.proname <> 'maintain'"
    ).fetchall()
    # maintain has only OUT arguments: called as is.
    functions.append(("maintain", [], []))
    return functions
BY_TYPE = {
    "text": TEXTS, "jsonb": JSONS, "integer": INTS, "bigint": BIGINTS, "interval": INTERVALS,
    "timestamp with time zone": TIMESTAMPS, "boolean": BOOLS, "real": REALS,
    "bigint[]": BIGINT_ARRAYS, "integer[]": INT_ARRAYS, "jsonb[]": JSON_ARRAYS,
    "text[]": QUEUE_ARRAYS,
    "regprocedure": REGPROCS, "name": ROLES,
}


class FuzzTest(PgqTestCase):
    def test_every_function_survives_bad_input(self):
        """Every queue is on a ring (ADR 0028): the id-taking functions hit
        ring jobs, pending and running, and jobs of pgq.job_rows."""
        self.fuzz_functions(calls=CALLS)

    def fuzz_functions(self, calls):
        rng = random.Random(SEED)
        admin = self.admin
        admin.execute("SELECT pgq.create_queue('fz')")
        functions = fuzz_functions(admin)
        names = sorted({f[0] for f in functions})
        self.assertGreaterEqual(len(names), 30, names)

        conn = self.connect()
        conn.execute("SET statement_timeout = '300ms'")
        conn.execute("SET lock_timeout = '300ms'")
        conn.execute(
            "CREATE FUNCTION pg_temp.fuzz_handler(job pgq.claimed_job) RETURNS void"
            " LANGUAGE sql AS 'SELECT NULL'"
        )
        seen = {}
        for i in range(calls):
            if i % 200 == 0:
                # Real jobs for the id-taking functions to hit (the fuzz may
                # have dropped or paused the queue).
                admin.execute("SELECT pgq.create_queue('fz', if_not_exists => true)")
                admin.execute("SELECT pgq.resume('fz')")
                admin.execute("SELECT pgq.enqueue('fz', '{}') FROM generate_series(1, 3)")
                admin.execute("SELECT pgq.claim('fz', 1)")
                # And a dead one, the newest job, for retry_dead_job and
                # purge_dead_job (3.0) to find.
                admin.execute("SELECT pgq.cancel(pgq.enqueue('fz', '{}'))")
                batches = stream_fixture(admin)
            fname, argnames, argtypes = functions[rng.randrange(len(functions))]
            job = admin.execute(
                "SELECT coalesce(max(id), 1) FROM (SELECT id FROM pgq.jobs"
                " UNION ALL SELECT id FROM pgq.dead_jobs UNION ALL SELECT id FROM pgq.ring_jobs) j"
            ).fetchone()[0]
            values = []
            for argname, argtype in zip(argnames, argtypes):
                pool = BY_NAME.get(argname) or BY_TYPE[argtype]
                value = placeholders(pool[rng.randrange(len(pool))], job, batches)
                values.append((argname, argtype, value))
            call = sql.SQL("SELECT pgq.{}({})").format(
                sql.Identifier(fname),
                sql.SQL(", ").join(
                    sql.SQL("{} => {}::{}").format(
                        sql.Identifier(n), sql.Literal(v), sql.SQL(t))
                    for n, t, v in values
                ),
            )
            state = "ok"
            try:
                conn.execute(call)
            except psycopg.errors.QueryCanceled:
                state = "57014"
            except psycopg.Error as exc:
                if conn.broken or exc.sqlstate is None:
                    self.fail(f"call {i} lost the connection (a crash?): "
                              f"{call.as_string(conn)[:300]}: {exc}")
                state = exc.sqlstate
                if state not in DOCUMENTED:
                    self.fail(
                        f"call {i}: undocumented SQLSTATE {state} ({exc}) from "
                        f"{call.as_string(conn)[:300]}"
                    )
            seen[state] = seen.get(state, 0) + 1
            # The session is still usable.
            self.assertEqual(conn.execute("SELECT 1").fetchone()[0], 1)
        self.assertNotIn("XX000", seen)
        # Whatever the calls stored, no stored row blinds monitoring or stops
        # maintenance (issue 15, M3: one infinite run_at failed them all).
        for check in ("SELECT count(*) FROM pgq.queue_stats", "SELECT pgq.metrics()",
                      "SELECT count(*) FROM pgq.queue_metrics()", "SELECT * FROM pgq.maintain()",
                      "SELECT count(*) FROM pgq.schedules", "SELECT count(*) FROM pgq.running_jobs"):
            with self.subTest(check=check):
                admin.execute(check)
        self.assertGreater(
            self.scalar("SELECT count(*) FROM pgq.queues WHERE ring_id IS NOT NULL"), 0
        )
        print(f"\n  fuzz: {calls} calls over {len(names)} functions,"
              f" outcomes {sorted(seen.items())}")

    def test_stream_functions_survive_bad_input(self):
        # The stream functions alone, many more times each than above, as a
        # superuser and as a role with some rights (produce and consume on
        # fs, consume on fs2, nothing on fs3: every other call is refused,
        # after its arguments were checked or not), some calls in a
        # REPEATABLE READ transaction (next_batch's wait is refused there).
        # Each argument is a valid one half of the time (GOOD).
        rng = random.Random(SEED + 21)
        admin = self.admin
        functions = [f for f in fuzz_functions(admin) if f[0] in STREAM_FUNCTIONS]
        self.assertEqual({f[0] for f in functions}, STREAM_FUNCTIONS,
                         "a stream function is missing from STREAM_FUNCTIONS or the catalog")
        admin.execute(f"DROP ROLE IF EXISTS {STREAM_ROLE}")
        admin.execute(f"CREATE ROLE {STREAM_ROLE}")
        try:
            self.fuzz_streams(rng, functions)
        finally:
            admin.execute(f"DROP ROLE {STREAM_ROLE}")

    def fuzz_streams(self, rng, functions):
        admin = self.admin
        sessions = []
        for role in (None, STREAM_ROLE):
            conn = self.connect()
            conn.execute("SET statement_timeout = '300ms'")
            conn.execute("SET lock_timeout = '300ms'")
            # 100 kB: the 200 kB payloads are over it (54000), cheaply.
            conn.execute("SET pgq.max_payload_bytes = '100kB'")
            if role:
                conn.execute(f"SET ROLE {role}")
            sessions.append(conn)
        waits = dict(BY_NAME, wait=STREAM_WAITS)
        seen = {}
        for i in range(STREAM_CALLS):
            if i % 100 == 0:
                batches = stream_fixture(admin)
            fname, argnames, argtypes = functions[rng.randrange(len(functions))]
            values = []
            for argname, argtype in zip(argnames, argtypes):
                pool = waits.get(argname) or BY_TYPE[argtype]
                if argname in GOOD and rng.random() < 0.5:
                    pool = GOOD[argname]
                values.append((argname, argtype,
                               placeholders(pool[rng.randrange(len(pool))], 1, batches)))
            # Counted, not fetched: a 2000-deep payload read back is more than
            # Python's json module can load.
            call = sql.SQL("SELECT count(*) FROM pgq.{}({})").format(
                sql.Identifier(fname),
                sql.SQL(", ").join(
                    sql.SQL("{} => {}::{}").format(sql.Identifier(n), sql.Literal(v), sql.SQL(t))
                    for n, t, v in values))
            conn = sessions[rng.randrange(2)]
            in_transaction = rng.random() < 0.15
            state = "ok"
            try:
                if in_transaction:
                    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                conn.execute(call).fetchone()
                if in_transaction:
                    conn.execute("COMMIT")
            except psycopg.Error as exc:
                text = call.as_string(conn)[:300]
                if conn.broken or exc.sqlstate is None:
                    self.fail(f"stream call {i} lost the connection (a crash?): {text}: {exc}")
                state = exc.sqlstate
                if state not in DOCUMENTED:
                    self.fail(f"stream call {i}: undocumented SQLSTATE {state} ({exc}) from {text}")
                if in_transaction:
                    conn.execute("ROLLBACK")
            key = (fname, state)
            seen[key] = seen.get(key, 0) + 1
            # The session is still usable, and out of any transaction.
            self.assertEqual(conn.execute("SELECT 1").fetchone()[0], 1)
            self.assertEqual(conn.info.transaction_status, psycopg.pq.TransactionStatus.IDLE)
        self.assertNotIn("XX000", {state for _, state in seen})
        # The fuzz reached past the argument checks: every function
        # succeeded at least once, and was refused to the role at least once;
        # finish_batch met finished batches, next_batch a REPEATABLE READ wait.
        self.assertEqual({f for f, state in seen if state == "ok"}, STREAM_FUNCTIONS,
                         sorted(seen.items()))
        self.assertLessEqual(STREAM_FUNCTIONS - {"stream_consumer_stats"},
                             {f for f, state in seen if state == "42501"}, sorted(seen.items()))
        self.assertLessEqual({("finish_batch", "55000"), ("next_batch", "0A000"),
                              ("append", "54000"), ("append_many", "54000"),
                              ("append_many", "2202E"), ("create_stream", "42710")},
                             set(seen), sorted(seen.items()))

        # The streams still work, end to end, for both sessions.
        stream_fixture(admin)
        su, role = sessions
        for conn in sessions:
            conn.execute("RESET statement_timeout")
        su.execute("SELECT pgq.register_consumer('fs', 'after')")
        ids = [r[0] for r in role.execute(
            "SELECT * FROM pgq.append_many('fs', ARRAY['{\"after\": 1}', '{\"after\": 2}']::jsonb[])")]
        ids.append(role.execute("SELECT pgq.append('fs', '{\"after\": 3}')").fetchone()[0])
        rows = role.execute("SELECT batch_id, event_id, payload FROM pgq.next_batch('fs', 'after')").fetchall()
        self.assertEqual([(r[1], r[2]) for r in rows],
                         list(zip(ids, [{"after": 1}, {"after": 2}, {"after": 3}])))
        self.assertEqual(role.execute("SELECT pgq.finish_batch(%s)", (rows[0][0],)).fetchone()[0], 3)
        self.assertEqual(role.execute("SELECT * FROM pgq.next_batch('fs', 'after')").fetchall(), [])
        # The fuzzed consumers read on: every batch they are given finishes.
        for stream, consumer in (("fs", "c"), ("fs", "c2"), ("fs2", "c"), ("fs3", "c")):
            for _ in range(100):
                rows = su.execute("SELECT batch_id FROM pgq.next_batch(%s, %s, 100000)",
                                  (stream, consumer)).fetchall()
                if not rows:
                    break
                self.assertEqual(su.execute("SELECT pgq.finish_batch(%s)", (rows[0][0],)).fetchone()[0],
                                 len(rows))
            else:
                self.fail(f"consumer {consumer} of {stream} never caught up")
        # A stream made now works too, and a waiting reader is woken.
        su.execute("SELECT pgq.create_stream('fresh')")
        su.execute("SELECT pgq.register_consumer('fresh', 'r')")
        su.execute("SELECT pgq.append('fresh', '{}')")
        rows = su.execute("SELECT batch_id FROM pgq.next_batch('fresh', 'r', wait => '1 second')").fetchall()
        self.assertEqual(su.execute("SELECT pgq.finish_batch(%s)", (rows[0][0],)).fetchone()[0], 1)
        for check in ("SELECT * FROM pgq.maintain()", "SELECT count(*) FROM pgq.stream_stats",
                      "SELECT pgq.metrics()", "SELECT count(*) FROM pgq.queue_stats"):
            with self.subTest(check=check):
                admin.execute(check)
        self.assertEqual(role.execute("SELECT count(*) FROM pgq.stream_stats WHERE stream = 'fresh'")
                         .fetchone()[0], 0)
        states = {}
        for (_, state), n in seen.items():
            states[state] = states.get(state, 0) + n
        print(f"\n  stream fuzz: {STREAM_CALLS} calls over {len(functions)} functions,"
              f" outcomes {sorted(states.items())}")
