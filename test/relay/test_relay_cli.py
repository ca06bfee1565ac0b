"""pgq-relay's contract, case by case, against a real server and real brokers
(test/relay/run.sh starts them): what a message looks like on RabbitMQ and on
NATS, what happens to a job the broker refuses or that cannot be a message,
bad options, a missing exchange, rights, the metrics endpoint and SIGTERM.
The crash and fault run is check.py's.

Environment (set by run.sh): PGQ_TEST_DSN (superuser; the tests drop and
create the extension), PGQ_RELAY_BIN, PGQ_LEDGER_BIN, PGQ_AMQP_PORT,
PGQ_NATS_PORT, PGQ_RELAY_METRICS_PORT, PGQ_RELAY_TEST_DIR (scratch files).
"""

import json
import os
import signal
import socket
import subprocess
import threading
import time
import unittest
import urllib.request

import psycopg

DSN = os.environ["PGQ_TEST_DSN"]
RELAY = os.environ["PGQ_RELAY_BIN"]
LEDGER = os.environ["PGQ_LEDGER_BIN"]
AMQP_PORT = int(os.environ["PGQ_AMQP_PORT"])
NATS_PORT = int(os.environ["PGQ_NATS_PORT"])
METRICS_PORT = int(os.environ["PGQ_RELAY_METRICS_PORT"])
SCRATCH = os.environ["PGQ_RELAY_TEST_DIR"]
# The server's data directory, its binaries and OS user, for the crash case
# (run.sh sets them; without them that case is skipped).
PG_DATA = os.environ.get("PGQ_RELAY_PG_DATA")
PG_BIN = os.environ.get("PG_BIN")
PG_USER = os.environ.get("PGQ_OS_USER", "postgres")
AMQP = f"amqp://guest:guest@127.0.0.1:{AMQP_PORT}/"
NATS = f"nats://127.0.0.1:{NATS_PORT}"


def sql(query, *params):
    with psycopg.connect(DSN, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else None


def relay(*args, env=None, timeout=30):
    """Runs the relay to its end; (exit status, stderr)."""
    full_env = dict(os.environ, **(env or {}))
    full_env.pop("PGQ_RELAY_BROKER", None)
    done = subprocess.run([RELAY, "--dsn", DSN, "--stats-interval", "0", *args],
                          capture_output=True, text=True, timeout=timeout, env=full_env)
    return done.returncode, done.stderr


def start_relay(*args, env=None):
    return subprocess.Popen([RELAY, "--dsn", DSN, "--stats-interval", "0", *args],
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})))


def stop(process, timeout=20):
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=timeout)
    return process.returncode, err


def wait_for(predicate, what, seconds=20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Ledger:
    """A consumer (ledger.c) writing one line per delivery to a file."""

    def __init__(self, name, argv):
        self.path = os.path.join(SCRATCH, name + ".ledger")
        if os.path.exists(self.path):
            os.unlink(self.path)
        self.process = subprocess.Popen([LEDGER, *argv, self.path], stderr=subprocess.DEVNULL)

    def lines(self):
        if not os.path.exists(self.path):
            return []
        with open(self.path) as f:
            fields = [line.rstrip("\n").split("\t") for line in f]
        return [dict(time=f[0], message_id=f[1], group_key=f[2], attempt=f[3], job_id=f[4],
                     topic=f[5], redelivered=f[6], sequence=f[7], routing_key=f[8],
                     event_id=f[9], stream=f[10], stream_event_id=f[11], appended_at=f[12],
                     traceparent=f[13], tracestate=f[14], body=json.loads(f[15]))
                for f in fields]

    def wait_for(self, n):
        return wait_for(lambda: len(self.lines()) >= n and self.lines(), f"{n} deliveries")

    def close(self):
        self.process.terminate()
        self.process.wait(timeout=10)


# scripts/lib.sh: its as_user is the one place that switches user (and runs
# the tool from /), test/python/test_scripts.py checks it.
LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "lib.sh")


def pg_ctl(*args):
    """pg_ctl on the test server, as its OS user."""
    command = [os.path.join(PG_BIN, "pg_ctl"), "-D", PG_DATA, "-w", *args]
    subprocess.run(["bash", "-c", 'source "$0"; as_user "$@"', LIB, PG_USER, *command],
                   check=True, timeout=60, stdout=subprocess.DEVNULL, cwd="/")


def job(job_id):
    rows = sql("SELECT state, attempt, last_error FROM pgq.job(%s)", job_id)
    return rows[0] if rows else None


# Names unique to this run: JetStream remembers message ids (pgq-QUEUE-JOBID)
# for its duplicate window, and job ids start again with the extension.
RUN = format(int(time.time() * 1000) % 0xFFFFFF, "x")

# A W3C trace context, as a producer passes it to pgq.enqueue/publish/append.
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACESTATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"


def trace_headers(line):
    """The traceparent and tracestate headers of a delivery (None: absent)."""
    return tuple(None if line[name] == "-" else line[name] for name in ("traceparent", "tracestate"))


class RelayTest(unittest.TestCase):
    counter = 0

    @classmethod
    def setUpClass(cls):
        sql("DROP EXTENSION IF EXISTS pgq_cpp CASCADE")
        sql("CREATE EXTENSION pgq_cpp")

    def setUp(self):
        # A queue and topic of its own per test: nothing left over between tests.
        RelayTest.counter += 1
        self.n = RelayTest.counter
        self.queue = f"to_broker_{RUN}_{self.n}"
        self.topic = f"t{RUN}_{self.n}"
        sql("SELECT pgq.create_queue(%s, lease => '5 seconds')", self.queue)
        sql("SELECT pgq.create_topic(%s)", self.topic)
        sql("SELECT pgq.subscribe(%s, %s)", self.topic, self.queue)

    def amqp_ledger(self, kind=None, consume=True):
        """A durable queue bound to an exchange of this test's, and its
        consumer (started by the caller when consume is False)."""
        exchange, queue = f"x{RUN}_{self.n}", f"q{RUN}_{self.n}"
        subprocess.run([LEDGER, "amqp-setup", str(AMQP_PORT), exchange, queue] +
                       ([kind] if kind else []), check=True, timeout=30)

        def start():
            ledger = Ledger(queue, ["amqp", str(AMQP_PORT), queue])
            self.addCleanup(ledger.close)
            return ledger
        return exchange, start() if consume else start

    def nats_ledger(self):
        stream, consumer = f"S{RUN}_{self.n}", f"c{RUN}_{self.n}"
        subject = f"{self.topic}.>"
        subprocess.run([LEDGER, "nats-setup", str(NATS_PORT), stream, subject, consumer],
                       check=True, timeout=30)
        ledger = Ledger(stream, ["nats", str(NATS_PORT), stream, consumer, subject])
        self.addCleanup(ledger.close)
        return ledger

    def publish(self, payload, group_key=None, topic=None):
        return sql("SELECT pgq.publish(%s, %s::jsonb, NULL, %s)", topic or self.topic,
                   json.dumps(payload), group_key)[0][0]

    def jobs_left(self):
        return sql("SELECT count(*) FROM pgq.list_jobs(%s)", self.queue)[0][0]

    # ------------------------------------------------------------ messages

    def test_amqp_message_is_the_events_payload_with_its_headers(self):
        exchange, ledger = self.amqp_ledger()
        for i in range(3):
            self.publish({"order": i}, group_key="customer-1")
        status, err = relay("--broker", AMQP, "--queue", self.queue, "--exchange", exchange,
                            "--max-jobs", "3")
        self.assertEqual(status, 0, err)
        lines = ledger.wait_for(3)
        self.assertEqual([line["body"] for line in lines], [{"order": i} for i in range(3)])
        for line in lines:
            self.assertEqual(line["routing_key"], self.topic)
            self.assertEqual(line["group_key"], "customer-1")
            self.assertEqual(line["attempt"], "1")
            self.assertEqual(line["topic"], self.topic)
            self.assertEqual(line["message_id"], f"pgq-{self.queue}-{line['job_id']}")
        self.assertEqual(self.jobs_left(), 0)

    def test_nats_subject_and_message_id(self):
        ledger = self.nats_ledger()
        self.publish({"a": 1}, topic=self.topic)
        status, err = relay("--broker", NATS, "--queue", self.queue, "--subject-prefix",
                            f"{self.topic}.", "--max-jobs", "1")
        self.assertEqual(status, 0, err)
        [line] = ledger.wait_for(1)
        self.assertEqual(line["routing_key"], f"{self.topic}.{self.topic}")
        self.assertEqual(line["body"], {"a": 1})
        self.assertEqual(line["message_id"], f"pgq-{self.queue}-{line['job_id']}")
        self.assertEqual(line["group_key"], "-")  # published without one: no header (ledger: -)

    def test_a_plain_job_goes_whole_under_its_queues_name(self):
        exchange, ledger = self.amqp_ledger()
        job_id = sql("SELECT pgq.enqueue(%s, '{\"plain\": true}')", self.queue)[0][0]
        status, err = relay("--broker", AMQP, "--queue", self.queue, "--exchange", exchange,
                            "--max-jobs", "1")
        self.assertEqual(status, 0, err)
        [line] = ledger.wait_for(1)
        self.assertEqual(line["body"], {"plain": True})
        self.assertEqual(line["routing_key"], self.queue)
        self.assertEqual(line["job_id"], str(job_id))

    def test_routing_key_from_a_payload_field(self):
        exchange, ledger = self.amqp_ledger()
        self.publish({"kind": "invoice.paid", "n": 1})
        missing = sql("SELECT pgq.enqueue(%s, '{\"n\": 2}')", self.queue)[0][0]
        status, err = relay("--broker", AMQP, "--queue", self.queue, "--exchange", exchange,
                            "--routing-key-field", "kind", "--max-jobs", "2")
        self.assertEqual(status, 0, err)
        [line] = ledger.wait_for(1)
        self.assertEqual(line["routing_key"], "invoice.paid")
        state, attempt, last_error = job(missing)
        self.assertIn("no field \"kind\"", last_error)
        self.assertEqual(attempt, 1)
        self.assertNotEqual(state, "done")

    # ------------------------------------------------------------ trace context

    def enqueue_traced_and_untraced(self):
        """An event published with a traceparent and tracestate, a plain job
        enqueued with a traceparent alone, an untraced event; the headers
        each message must have, by its body's "trace"."""
        sql("SELECT pgq.publish(%s, %s::jsonb, traceparent => %s, tracestate => %s)", self.topic,
            json.dumps({"trace": "both"}), TRACEPARENT, TRACESTATE)
        sql("SELECT pgq.enqueue(%s, %s::jsonb, traceparent => %s)", self.queue,
            json.dumps({"trace": "parent"}), TRACEPARENT)
        self.publish({"trace": "none"})
        return {"both": (TRACEPARENT, TRACESTATE), "parent": (TRACEPARENT, None), "none": (None, None)}

    def test_trace_context_headers_on_amqp(self):
        exchange, ledger = self.amqp_ledger()
        want = self.enqueue_traced_and_untraced()
        status, err = relay("--broker", AMQP, "--queue", self.queue, "--exchange", exchange,
                            "--max-jobs", "3")
        self.assertEqual(status, 0, err)
        lines = ledger.wait_for(3)
        self.assertEqual({line["body"]["trace"]: trace_headers(line) for line in lines}, want)
        for line in lines:  # beside the pgq-* headers, which stay
            self.assertEqual(line["message_id"], f"pgq-{self.queue}-{line['job_id']}")

    def test_trace_context_headers_on_nats(self):
        ledger = self.nats_ledger()
        want = self.enqueue_traced_and_untraced()
        status, err = relay("--broker", NATS, "--queue", self.queue, "--subject-prefix",
                            f"{self.topic}.", "--max-jobs", "3")
        self.assertEqual(status, 0, err)
        lines = ledger.wait_for(3)
        self.assertEqual({line["body"]["trace"]: trace_headers(line) for line in lines}, want)

    # ------------------------------------------------------------ refusals

    def test_an_unroutable_message_fails_its_job(self):
        # The default exchange routes by queue name; no queue has this one.
        self.publish({"x": 1}, topic=self.topic)
        [(job_id,)] = sql("SELECT id FROM pgq.list_jobs(%s)", self.queue)
        status, err = relay("--broker", AMQP, "--queue", self.queue, "--exchange", "",
                            "--max-jobs", "1")
        self.assertEqual(status, 0, err)
        state, attempt, last_error = job(job_id)
        self.assertIn("returned by the broker: 312 NO_ROUTE", last_error)
        self.assertNotEqual(state, "done")
        self.assertIn("failing it", err)

    def test_a_nack_is_not_now_no_attempt_is_spent(self):
        # A queue that holds one message and nacks the publishes beyond it
        # (reject-publish) stands for a broker that cannot take a message
        # yet (make test-cluster: a quorum queue between leaders). The relay
        # publishes again over a new connection, with backoff; the jobs keep
        # their first attempt, and all get through once a consumer drains it.
        exchange, start_consumer = self.amqp_ledger("holds-one", consume=False)
        for i in range(3):
            self.publish({"held": i})
        process = start_relay("--broker", AMQP, "--queue", self.queue, "--exchange", exchange)
        self.addCleanup(lambda: process.poll() is None and stop(process))
        wait_for(lambda: sql("SELECT count(*) FROM pgq.list_jobs(%s)", self.queue)[0][0] == 2,
                 "the first message to be taken")
        time.sleep(2)  # nacks and reconnects meanwhile
        rows = sql("SELECT state, attempt FROM pgq.list_jobs(%s)", self.queue)
        self.assertEqual(rows, [("running", 1)] * 2, "nacked jobs stay the relay's, attempt 1")
        ledger = start_consumer()
        lines = ledger.wait_for(3)
        wait_for(lambda: self.jobs_left() == 0, "the queue to empty")
        status, err = stop(process)
        self.assertEqual(status, 0, err)
        self.assertEqual(sorted(line["body"]["held"] for line in lines), [0, 1, 2])
        self.assertEqual({line["attempt"] for line in lines}, {"1"})
        self.assertIn("nacked a message; reconnecting", err)

    def test_a_subject_nats_refuses_fails_its_job(self):
        self.nats_ledger()
        self.publish({"x": 1}, topic=self.topic)
        [(job_id,)] = sql("SELECT id FROM pgq.list_jobs(%s)", self.queue)
        status, err = relay("--broker", NATS, "--queue", self.queue, "--subject-prefix",
                            "bad..", "--max-jobs", "1")
        self.assertEqual(status, 0, err)
        self.assertIn("which NATS refuses", job(job_id)[2])

    def test_a_missing_exchange_claims_nothing_and_says_why(self):
        self.publish({"x": 1})
        process = start_relay("--broker", AMQP, "--queue", self.queue, "--exchange",
                              "no_such_exchange")
        time.sleep(1.5)  # time for several connection attempts; nothing may be claimed
        self.assertEqual(sql("SELECT state FROM pgq.list_jobs(%s)", self.queue), [("ready",)])
        status, err = stop(process)
        self.assertEqual(status, 0, err)
        self.assertIn("NOT_FOUND - no exchange 'no_such_exchange'", err)
        self.assertEqual(err.count("no exchange"), 1, "the same error is logged once")

    def test_a_cancelled_claim_is_claimed_again(self):
        # pg_cancel_backend on the relay's claim (or a statement_timeout, or a
        # lock wait cancelled while ALTER EXTENSION waits): 57014 is a reason
        # to claim again after a short pause, not to exit.
        exchange, ledger = self.amqp_ledger()
        process = start_relay("--broker", AMQP, "--queue", self.queue, "--exchange", exchange,
                              "--wait", "60 seconds")
        claiming = ("SELECT pid FROM pg_stat_activity WHERE application_name = 'pgq-relay'"
                    "   AND state = 'active' AND query LIKE '%%pgq.claim_traced(%%'"
                    "   AND wait_event_type = 'Extension' AND query_start > %s")
        [(pid,)] = wait_for(lambda: sql(claiming, "-infinity"), "the claim waiting")
        [(at,)] = sql("SELECT clock_timestamp()")
        sql("SELECT pg_cancel_backend(%s)", pid)
        wait_for(lambda: sql(claiming, at), "a claim again")
        self.assertIsNone(process.poll())
        self.publish({"after": "cancel"})
        ledger.wait_for(1)
        wait_for(lambda: self.jobs_left() == 0, "the job completed")
        status, err = stop(process)
        self.assertEqual(status, 0, err)
        self.assertIn("pgq.claim was cancelled", err)

    def test_async_commit_a_crash_republishes_and_never_loses(self):
        # --async-commit: claims and completions commit without waiting for
        # their WAL flush. A PostgreSQL crash right after may lose the last
        # completions (and claims): those jobs come back and are published
        # again, same message id (a duplicate), and nothing is lost. The WAL
        # writer held back (wal_writer_delay 10 s) so that the last
        # completions are still in memory when the server is stopped
        # immediately.
        if not (PG_DATA and PG_BIN):
            self.skipTest("PGQ_RELAY_PG_DATA and PG_BIN are not set")
        sql("ALTER SYSTEM SET wal_writer_delay = '10s'")
        sql("SELECT pg_reload_conf()")

        def reset():
            sql("ALTER SYSTEM RESET wal_writer_delay")
            sql("SELECT pg_reload_conf()")
        self.addCleanup(reset)
        exchange, ledger = self.amqp_ledger()
        events = [self.publish({"n": i}) for i in range(50)]
        # A lease longer than the run (no extension commits meanwhile) and
        # short enough to come back soon after the crash.
        args = ("--broker", AMQP, "--queue", self.queue, "--exchange", exchange,
                "--lease", "8 seconds", "--concurrency", "4", "--async-commit")
        process = start_relay(*args)
        ledger.wait_for(50)
        wait_for(lambda: self.jobs_left() == 0, "the completions")
        status, err = stop(process)
        self.assertEqual(status, 0, err)
        self.assertIn("--async-commit: synchronous_commit = off for claims and completions", err)
        crashed = time.time() * 1000  # the ledger's times: ms since the epoch
        pg_ctl("-m", "immediate", "stop")
        pg_ctl("-l", os.path.join(os.path.dirname(PG_DATA), "server.log"), "start")
        # What the crash lost: jobs claimed or completed only in memory.
        came_back = {r[0] for r in sql("SELECT id FROM pgq.list_jobs(%s)", self.queue)}
        with open(os.path.join(SCRATCH, "async_commit_came_back"), "w") as f:
            f.write(f"{len(came_back)} of 50 jobs came back after the crash\n")
        process = start_relay(*args)
        wait_for(lambda: self.jobs_left() == 0, "the jobs that came back", seconds=60)
        status, err = stop(process)
        self.assertEqual(status, 0, err)
        lines = ledger.wait_for(50 + len(came_back))
        # Nothing lost: every event delivered.
        self.assertEqual(sorted({int(line["event_id"]) for line in lines}), sorted(events))
        by_job = {}
        for line in lines:
            by_job.setdefault(int(line["job_id"]), []).append(line)
        # The duplicates are the jobs the crash gave back, each once more,
        # under the same message id, the second time after the restart.
        duplicated = {job_id for job_id, seen in by_job.items() if len(seen) > 1}
        self.assertEqual(duplicated, came_back)
        for job_id in duplicated:
            first, again = by_job[job_id]
            self.assertEqual(first["message_id"], again["message_id"])
            self.assertLess(float(first["time"]), crashed)
            self.assertGreater(float(again["time"]), crashed)
        self.assertEqual(sql("SELECT count(*) FROM pgq.dead_jobs WHERE queue = %s", self.queue), [(0,)])

    def test_declare_creates_a_durable_topic_exchange_or_uses_a_fitting_one(self):
        # --declare on RabbitMQ: a durable topic exchange, no arguments,
        # created when missing; used as it is when it exists as that; an
        # exchange of another type is RabbitMQ's 406, logged, nothing claimed.
        exchange, queue = f"xd{RUN}_{self.n}", f"qd{RUN}_{self.n}"
        args = ("--broker", AMQP, "--queue", self.queue, "--declare")
        process = start_relay(*args, "--exchange", exchange)
        wait_for(lambda: "connected to" in process.stderr.readline(), "the connection")
        status, err = stop(process)
        self.assertEqual(status, 0, err)
        # The ledger declares a durable topic exchange of that name: RabbitMQ
        # accepts it only if the relay's is the same (inequivalent: 406).
        subprocess.run([LEDGER, "amqp-setup", str(AMQP_PORT), exchange, queue], check=True,
                       timeout=30)
        ledger = Ledger(queue, ["amqp", str(AMQP_PORT), queue])
        self.addCleanup(ledger.close)
        self.publish({"declared": 1})
        status, err = relay(*args, "--exchange", exchange, "--max-jobs", "1")
        self.assertEqual(status, 0, err)
        [line] = ledger.wait_for(1)
        self.assertEqual(line["body"], {"declared": 1})
        # Another type under the name: refused, said, and nothing claimed.
        fanout = f"xf{RUN}_{self.n}"
        subprocess.run([LEDGER, "amqp-exchange", str(AMQP_PORT), fanout, "fanout"], check=True,
                       timeout=30)
        self.publish({"not": "sent"})
        process = start_relay(*args, "--exchange", fanout)
        refusal = wait_for(lambda: (lambda l: "declaring the exchange" in l and l)(
            process.stderr.readline()), "the refusal")
        self.assertIn("PRECONDITION_FAILED - inequivalent arg 'type'", refusal)
        self.assertEqual(sql("SELECT state FROM pgq.list_jobs(%s)", self.queue), [("ready",)])
        status, err = stop(process)
        self.assertEqual(status, 0, err)

    def test_declare_creates_a_jetstream_stream_or_uses_a_fitting_one(self):
        # --declare on NATS: a stream taking PREFIX> (named after the prefix
        # by default), file storage; the same declared again is fine; a
        # stream of that name on other subjects is an error, nothing claimed.
        prefix = f"{self.topic}."
        args = ("--broker", NATS, "--queue", self.queue, "--subject-prefix", prefix, "--declare")
        self.publish({"n": 1})
        status, err = relay(*args, "--max-jobs", "1")
        self.assertEqual(status, 0, err)
        # The stream the relay made (name: the prefix without its dot) holds
        # the message; the ledger's setup (file storage, PREFIX>) is the
        # same configuration, which JetStream accepts again.
        stream, consumer = self.topic, f"cd{RUN}_{self.n}"
        subprocess.run([LEDGER, "nats-setup", str(NATS_PORT), stream, f"{prefix}>", consumer],
                       check=True, timeout=30)
        ledger = Ledger(stream, ["nats", str(NATS_PORT), stream, consumer, f"{prefix}>"])
        self.addCleanup(ledger.close)
        self.publish({"n": 2})
        status, err = relay(*args, "--max-jobs", "1")
        self.assertEqual(status, 0, err)
        self.assertEqual([line["body"] for line in ledger.wait_for(2)], [{"n": 1}, {"n": 2}])
        # A stream of the given name that takes other subjects.
        other = f"O{RUN}_{self.n}"
        subprocess.run([LEDGER, "nats-setup", str(NATS_PORT), other, f"o{RUN}_{self.n}.>",
                        f"co{RUN}_{self.n}"], check=True, timeout=30)
        self.publish({"not": "sent"})
        process = start_relay(*args, "--nats-stream", other)
        refusal = wait_for(lambda: (lambda l: "JetStream stream" in l and l)(
            process.stderr.readline()), "the refusal")
        self.assertIn(f'the JetStream stream "{other}" exists with the subjects '
                      f'[o{RUN}_{self.n}.>], not {prefix}>', refusal)
        self.assertEqual(sql("SELECT state FROM pgq.list_jobs(%s)", self.queue), [("ready",)])
        status, err = stop(process)
        self.assertEqual(status, 0, err)

    # ------------------------------------------------------------ bad input

    def test_usage_errors(self):
        cases = [
            ((), "--broker is required"),
            (("--broker", "http://x"), "--broker must be an amqp:// or nats:// URL"),
            (("--broker", AMQP, "--concurrency", "0"), "--concurrency must be a number"),
            (("--broker", AMQP, "--lease", "soon"), "--lease: invalid input syntax"),
            (("--broker", AMQP, "--confirm-timeout", "0"), "--confirm-timeout must be more than 0"),
            (("--broker", AMQP, "--shutdown-timeout", "-1 s"), "must not be negative"),
            (("--broker", AMQP, "--metrics-listen", "nohost"), "--metrics-listen must be"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                status, err = relay(*args)
                self.assertEqual(status, 2, err)
                self.assertIn(message, err)
        status, err = relay("--broker", AMQP, env={"PGQ_RELAY_DEBUG_PARK": "sometime"})
        self.assertEqual(status, 2, err)

    def test_the_broker_from_the_environment(self):
        exchange, ledger = self.amqp_ledger()
        self.publish({"env": 1})
        done = subprocess.run([RELAY, "--dsn", DSN, "--queue", self.queue, "--exchange", exchange,
                               "--max-jobs", "1", "--stats-interval", "0"],
                              capture_output=True, text=True, timeout=30,
                              env=dict(os.environ, PGQ_RELAY_BROKER=AMQP))
        self.assertEqual(done.returncode, 0, done.stderr)
        ledger.wait_for(1)

    def test_no_consume_right_is_an_error_with_its_sqlstate(self):
        sql("DROP ROLE IF EXISTS pgq_relay_nobody")
        sql("CREATE ROLE pgq_relay_nobody LOGIN")
        self.addCleanup(sql, "DROP ROLE IF EXISTS pgq_relay_nobody")
        self.publish({"x": 1})
        done = subprocess.run([RELAY, "--dsn", DSN + " user=pgq_relay_nobody", "--broker", AMQP,
                               "--queue", self.queue, "--exchange", "", "--stats-interval", "0"],
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn("42501", done.stderr)
        self.assertEqual(self.jobs_left(), 1)

    # ------------------------------------------------------------ running

    def test_metrics_endpoint_and_sigterm(self):
        exchange, ledger = self.amqp_ledger()
        for i in range(5):
            self.publish({"i": i})
        process = start_relay("--broker", AMQP, "--queue", self.queue, "--exchange", exchange,
                              "--metrics-listen", f"127.0.0.1:{METRICS_PORT}")
        ledger.wait_for(5)
        wait_for(lambda: self.jobs_left() == 0, "the queue to empty")

        def completed():
            with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics",
                                        timeout=5) as response:
                text = response.read().decode()
            return f'pgq_relay_completed_total{{queue="{self.queue}"}} 5' in text and text
        text = wait_for(completed, "the completed counter at 5")
        self.assertIn(f'pgq_relay_broker_up{{queue="{self.queue}"}} 1', text)
        self.assertIn("# TYPE pgq_relay_commit_to_confirm_seconds histogram", text)
        status, err = stop(process)
        self.assertEqual(status, 0, err)
        self.assertIn("SIGTERM: claiming no more jobs", err)

    def test_idle_and_slow_metrics_clients_never_stall_the_relay(self):
        # Issue 30 R2: 2.0 accepted every waiting connection inside its one
        # event loop and gave each up to 500 ms; 16 idle sockets stalled the
        # relay 8 s and a steady trickle of them stalled it for ever. Here 32
        # idle sockets, a client sending its request a byte at a time, and a
        # new idle connection every 50 ms, all the time the relay works: every
        # job is relayed, a scrape answered and SIGTERM obeyed before any of
        # them is closed.
        exchange, ledger = self.amqp_ledger()
        process = start_relay("--broker", AMQP, "--queue", self.queue, "--exchange", exchange,
                              "--metrics-listen", f"127.0.0.1:{METRICS_PORT}")
        self.addCleanup(lambda: process.poll() is None and process.kill())
        url = f"http://127.0.0.1:{METRICS_PORT}/metrics"

        def up():
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    return response.status == 200
            except OSError:
                return False
        wait_for(up, "the endpoint")
        sockets, stop_trickle = [], threading.Event()

        def idle():
            s = socket.create_connection(("127.0.0.1", METRICS_PORT), timeout=5)
            sockets.append(s)
            return s

        def trickle():
            slow = idle()
            request = b"GET /metrics HTTP/1.0\r\nX-Pad: " + b"x" * 4000
            sent = 0
            while not stop_trickle.wait(0.05):
                try:
                    idle()
                    slow.send(request[sent:sent + 1])
                    sent = (sent + 1) % len(request)
                except OSError:
                    slow = idle()  # closed by the relay: a new one
        attacker = threading.Thread(target=trickle)
        try:
            for _ in range(32):
                idle()
            attacker.start()
            n = 200
            for i in range(n):
                self.publish({"i": i})
            ledger.wait_for(n)
            wait_for(lambda: self.jobs_left() == 0, "the queue to empty", seconds=60)
            self.assertFalse(stop_trickle.is_set())

            def scraped():
                with urllib.request.urlopen(url, timeout=10) as response:
                    text = response.read().decode()
                return f'pgq_relay_completed_total{{queue="{self.queue}"}} {n}' in text
            wait_for(scraped, "a scrape with every job completed")
            self.assertIsNone(process.poll())
            # A signal is not held up either: SIGTERM ends it, attack going on.
            status, err = stop(process)
            self.assertEqual(status, 0, err)
            self.assertFalse(stop_trickle.is_set())
        finally:
            stop_trickle.set()
            if attacker.is_alive():
                attacker.join()
            for s in sockets:
                s.close()

    def test_a_crash_after_the_confirm_sends_it_again_with_the_same_id(self):
        # Parked after its first confirm (before the completion), then
        # SIGKILLed: the job stays leased until its lease (5 s) ends, then
        # the next relay publishes it again, under the same message id.
        exchange, ledger = self.amqp_ledger()
        self.publish({"late": 1})
        process = start_relay("--broker", AMQP, "--queue", self.queue, "--exchange", exchange,
                              env={"PGQ_RELAY_DEBUG_PARK": "after-confirm:1"})
        wait_for(lambda: ledger.lines(), "the delivery")
        wait_for(lambda: "parked after-confirm" in process.stderr.readline(), "the park")
        process.kill()
        process.wait()
        process.stderr.close()
        [(state,)] = sql("SELECT state FROM pgq.list_jobs(%s)", self.queue)
        self.assertEqual(state, "running", "confirmed but not completed: still leased")
        status, err = relay("--broker", AMQP, "--queue", self.queue, "--exchange", exchange,
                            "--max-jobs", "1", timeout=60)
        self.assertEqual(status, 0, err)
        lines = ledger.wait_for(2)
        self.assertEqual(lines[0]["message_id"], lines[1]["message_id"])
        self.assertEqual([line["attempt"] for line in lines], ["1", "2"])
        self.assertEqual(self.jobs_left(), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
