"""pgq-relay --stream's contract, case by case, against a real server and real
brokers (test/relay/run.sh starts them and runs these after
test_relay_cli.py's cases): what a stream's event looks like on RabbitMQ and
on NATS (message id pgqs-STREAM-EVENTID, headers pgq-stream,
pgq-stream-event-id, pgq-appended-at, and the outbox's pgq-topic,
pgq-event-id, pgq-group-key for events pgq.publish appended), a batch
finished only after its confirms and published again after a crash, one
relay per stream and consumer (a second stands by and takes over, also
after the first lost its database session; a role with no right on the
stream cannot hold the guard; a 2.0 catalog falls back to the old advisory
lock with a warning), a returned message or one
that cannot be made stopping the relay with the batch unfinished, a nack
or a subject no JetStream stream takes as "not now" (published again with
backoff, the batch open), a database outage, SIGTERM, bad options, an
unknown stream and rights. The fault run (kills of the relay and the
broker, a PostgreSQL restart) is run.sh's stream phase.

Environment: as test_relay_cli.py (set by run.sh).
"""

import datetime
import os
import re
import signal
import subprocess
import time
import unittest

import psycopg
from psycopg.types.json import Jsonb

from test_relay_cli import (AMQP, AMQP_PORT, DSN, LEDGER, NATS, NATS_PORT, RELAY, RUN, SCRATCH,
                            TRACEPARENT, TRACESTATE, Ledger, relay, sql, trace_headers, wait_for)

CONSUMER = "pgq-relay"  # the relay's default --consumer
# The advisory lock key of the finish gate (see FinishGate; run.sh's stream
# phase uses the same).
GATE_KEY = 1885827443


def start_logged(name, *args):
    """A relay in the background, its stderr in a file (read while it runs);
    (process, path of the file)."""
    path = os.path.join(SCRATCH, name + ".log")
    with open(path, "w") as log:
        process = subprocess.Popen([RELAY, "--dsn", DSN, "--stats-interval", "0", *args],
                                   stdout=subprocess.DEVNULL, stderr=log)
    return process, path


def log_text(path):
    with open(path) as f:
        return f.read()


def wait_for_log(process, path, text, seconds=20):
    def seen():
        if text in log_text(path):
            return True
        if process.poll() is not None:
            raise AssertionError(f"relay exited {process.returncode} before logging {text!r}: "
                                 f"{log_text(path)}")
        return False
    wait_for(seen, f"{text!r} in {path}", seconds)


def end(process, sig=signal.SIGTERM, timeout=20):
    """Signals the process and waits for it; its exit status."""
    if process.poll() is None:
        process.send_signal(sig)
    return process.wait(timeout=timeout)


def relay_backends():
    """PIDs of the sessions pgq-relay opened in this database."""
    return [r[0] for r in sql("SELECT pid FROM pg_stat_activity WHERE application_name = 'pgq-relay'"
                              " AND datname = current_database()")]


def parse_utc(text):
    """An ISO 8601 UTC timestamp as pgq-appended-at carries it."""
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z", text), text
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


class FinishGate:
    """Parks pgq.finish_batch: a trigger on pgq.stream_consumers makes the
    update that closes a batch wait for the advisory lock GATE_KEY, held
    here. pgq-relay --stream has no PGQ_RELAY_DEBUG_PARK; this is the same
    point as its after-confirm: every message confirmed, the batch not
    finished."""

    def __init__(self):
        sql("""CREATE OR REPLACE FUNCTION public.relay_test_finish_gate() RETURNS trigger
               LANGUAGE plpgsql AS $$
               BEGIN PERFORM pg_catalog.pg_advisory_xact_lock_shared(%s); RETURN NEW; END $$"""
            % GATE_KEY)
        sql("DROP TRIGGER IF EXISTS relay_test_finish_gate ON pgq.stream_consumers")
        sql("""CREATE TRIGGER relay_test_finish_gate BEFORE UPDATE ON pgq.stream_consumers
               FOR EACH ROW WHEN (OLD.batch_open AND NOT NEW.batch_open)
               EXECUTE FUNCTION public.relay_test_finish_gate()""")
        self.holder = psycopg.connect(DSN, autocommit=True)
        self.holder.execute("SELECT pg_advisory_lock(%s)", (GATE_KEY,))

    def waiters(self):
        """The sessions waiting at the gate."""
        return [r[0] for r in sql(
            "SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objid::bigint = %s"
            " AND a.application_name = 'pgq-relay'", GATE_KEY & 0xFFFFFFFF)]

    def open(self):
        if self.holder is not None:
            self.holder.close()
            self.holder = None
        sql("DROP TRIGGER IF EXISTS relay_test_finish_gate ON pgq.stream_consumers")


class StreamRelayTest(unittest.TestCase):
    counter = 0

    @classmethod
    def setUpClass(cls):
        sql("DROP EXTENSION IF EXISTS pgq_cpp CASCADE")
        sql("CREATE EXTENSION pgq_cpp")

    def setUp(self):
        # A stream and topic of its own per test; the relay's consumer
        # registered first: it reads what commits after its registration.
        StreamRelayTest.counter += 1
        self.n = StreamRelayTest.counter
        self.stream = f"s{RUN}_{self.n}"
        self.topic = f"st{RUN}_{self.n}"
        sql("SELECT pgq.create_stream(%s)", self.stream)
        sql("SELECT pgq.register_consumer(%s, %s)", self.stream, CONSUMER)
        sql("SELECT pgq.create_topic(%s)", self.topic)
        sql("SELECT pgq.subscribe(%s, stream => %s)", self.topic, self.stream)

    # ------------------------------------------------------------ helpers

    def amqp_ledger(self, kind=None, consume=True):
        exchange, queue = f"sx{RUN}_{self.n}", f"sq{RUN}_{self.n}"
        subprocess.run([LEDGER, "amqp-setup", str(AMQP_PORT), exchange, queue] +
                       ([kind] if kind else []), check=True, timeout=30)

        def start():
            ledger = Ledger(queue, ["amqp", str(AMQP_PORT), queue])
            self.addCleanup(ledger.close)
            return ledger
        return exchange, queue, (start() if consume else start)

    def nats_ledger(self):
        stream, consumer = f"SS{RUN}_{self.n}", f"sc{RUN}_{self.n}"
        subject = f"{self.topic}.>"
        subprocess.run([LEDGER, "nats-setup", str(NATS_PORT), stream, subject, consumer],
                       check=True, timeout=30)
        ledger = Ledger(stream, ["nats", str(NATS_PORT), stream, consumer, subject])
        self.addCleanup(ledger.close)
        return ledger

    def append(self, payload):
        return sql("SELECT pgq.append(%s, %s)", self.stream, Jsonb(payload))[0][0]

    def publish(self, payload, group_key=None):
        return sql("SELECT pgq.publish(%s, %s::jsonb, NULL, %s)", self.topic,
                   Jsonb(payload), group_key)[0][0]

    def stats(self, consumer=CONSUMER):
        """(pending events, batch open, finished events) of the consumer."""
        rows = sql("SELECT pending_events, batch_open, finished_events FROM pgq.stream_stats"
                   " WHERE stream = %s AND consumer = %s", self.stream, consumer)
        return rows[0] if rows else None

    def relay_args(self, exchange=None, *more):
        return ("--broker", AMQP, "--stream", self.stream, "--exchange", exchange, *more)

    def started(self, name, *args):
        process, path = start_logged(f"{self.stream}-{name}", *args)
        self.addCleanup(lambda: process.poll() is None and end(process, signal.SIGKILL))
        return process, path

    def assert_stream_message(self, line, event_id, body):
        self.assertEqual(line["message_id"], f"pgqs-{self.stream}-{event_id}")
        self.assertEqual(line["stream"], self.stream)
        self.assertEqual(line["stream_event_id"], str(event_id))
        self.assertEqual(line["body"], body)
        # No queue's headers on a stream's message.
        self.assertEqual((line["job_id"], line["attempt"]), ("-", "-"))
        parse_utc(line["appended_at"])

    # ------------------------------------------------------------ messages

    def test_stream_amqp_message_ids_headers_and_bodies(self):
        exchange, _, ledger = self.amqp_ledger()
        # A second consumer, to read what the stream holds (appended_at).
        sql("SELECT pgq.register_consumer(%s, 'peek')", self.stream)
        plain = self.append({"plain": 1})
        many = [r[0] for r in sql("SELECT pgq.append_many(%s, %s::jsonb[])", self.stream,
                                  ['{"plain": 2}', '[1, 2]'])]
        keyed = self.publish({"order": 7}, group_key="customer-1")
        unkeyed = self.publish({"order": 8})
        status, err = relay(*self.relay_args(exchange, "--max-jobs", "5"))
        self.assertEqual(status, 0, err)
        lines = ledger.wait_for(5)
        self.assertEqual(len(lines), 5)
        events = {r[0]: r for r in sql(
            "SELECT event_id, payload, appended_at FROM pgq.next_batch(%s, 'peek')", self.stream)}
        self.assertEqual(len(events), 5)
        # In the stream's order (one transaction each: append order).
        self.assertEqual([int(line["stream_event_id"]) for line in lines], sorted(events))
        by_id = {int(line["stream_event_id"]): line for line in lines}
        for event_id in (plain, *many):
            line = by_id[event_id]
            # Appended, not published: the whole payload, under the stream's name.
            self.assert_stream_message(line, event_id, events[event_id][1])
            self.assertEqual(line["routing_key"], self.stream)
            self.assertEqual((line["topic"], line["event_id"], line["group_key"]), ("-", "-", "-"))
        for event_id, key, payload in ((keyed, "customer-1", {"order": 7}), (unkeyed, "-", {"order": 8})):
            stream_event_id = next(i for i, e in events.items()
                                   if isinstance(e[1], dict) and e[1].get("event_id") == event_id)
            line = by_id[stream_event_id]
            # pgq.publish's envelope unwrapped: the event's payload, its topic,
            # event id and group key as headers.
            self.assert_stream_message(line, stream_event_id, payload)
            self.assertEqual(events[stream_event_id][1]["payload"], payload)
            self.assertEqual(line["routing_key"], self.topic)
            self.assertEqual(line["topic"], self.topic)
            self.assertEqual(line["event_id"], str(event_id))
            self.assertEqual(line["group_key"], key)
        for event_id, (_, _, appended_at) in events.items():
            self.assertEqual(parse_utc(by_id[event_id]["appended_at"]), appended_at)
        self.assertEqual(self.stats(), (0, False, 5))

    def test_stream_nats_subject_message_id_and_headers(self):
        ledger = self.nats_ledger()
        plain = self.append({"a": 1})
        published = self.publish({"b": 2}, group_key="k")
        status, err = relay("--broker", NATS, "--stream", self.stream, "--subject-prefix",
                            f"{self.topic}.", "--max-jobs", "2")
        self.assertEqual(status, 0, err)
        first, second = ledger.wait_for(2)
        self.assert_stream_message(first, plain, {"a": 1})
        self.assertEqual(first["routing_key"], f"{self.topic}.{self.stream}")
        self.assertEqual((first["topic"], first["event_id"], first["group_key"]), ("-", "-", "-"))
        self.assert_stream_message(second, int(second["stream_event_id"]), {"b": 2})
        self.assertGreater(int(second["stream_event_id"]), plain)
        self.assertEqual(second["routing_key"], f"{self.topic}.{self.topic}")
        self.assertEqual((second["topic"], second["event_id"], second["group_key"]),
                         (self.topic, str(published), "k"))
        self.assertEqual(self.stats(), (0, False, 2))

    # ------------------------------------------------------------ trace context

    def append_traced_and_untraced(self):
        """An event appended with a traceparent and tracestate, one published
        (through the topic) with a traceparent alone, an untraced one; the
        headers each message must have, by its body's "trace"."""
        sql("SELECT pgq.append(%s, %s, traceparent => %s, tracestate => %s)", self.stream,
            Jsonb({"trace": "both"}), TRACEPARENT, TRACESTATE)
        sql("SELECT pgq.publish(%s, %s, traceparent => %s)", self.topic, Jsonb({"trace": "parent"}),
            TRACEPARENT)
        self.append({"trace": "none"})
        return {"both": (TRACEPARENT, TRACESTATE), "parent": (TRACEPARENT, None), "none": (None, None)}

    def test_stream_trace_context_headers_on_amqp(self):
        exchange, _, ledger = self.amqp_ledger()
        want = self.append_traced_and_untraced()
        status, err = relay(*self.relay_args(exchange, "--max-jobs", "3"))
        self.assertEqual(status, 0, err)
        lines = ledger.wait_for(3)
        self.assertEqual({line["body"]["trace"]: trace_headers(line) for line in lines}, want)
        for line in lines:  # beside the pgq-* headers, which stay
            self.assert_stream_message(line, int(line["stream_event_id"]), line["body"])

    def test_stream_trace_context_headers_on_nats(self):
        ledger = self.nats_ledger()
        want = self.append_traced_and_untraced()
        status, err = relay("--broker", NATS, "--stream", self.stream, "--subject-prefix",
                            f"{self.topic}.", "--max-jobs", "3")
        self.assertEqual(status, 0, err)
        lines = ledger.wait_for(3)
        self.assertEqual({line["body"]["trace"]: trace_headers(line) for line in lines}, want)
        self.assertEqual(self.stats(), (0, False, 3))

    # ------------------------------------------------------------ the batch

    def test_stream_batch_finished_after_confirms_and_sent_again_after_a_crash(self):
        # The relay parked in pgq.finish_batch (every message confirmed, the
        # batch not finished), then SIGKILLed: the batch stays open and the
        # next relay publishes it again, same events, same message ids.
        exchange, _, ledger = self.amqp_ledger()
        ids = [self.append({"crash": i}) for i in range(3)]
        gate = FinishGate()
        self.addCleanup(gate.open)
        process, path = self.started("parked", *self.relay_args(exchange))
        first = ledger.wait_for(3)
        waiting = wait_for(gate.waiters, "the relay's pgq.finish_batch at the gate")
        self.assertEqual(self.stats(), (3, True, 0), "confirmed, not finished: the batch is open")
        end(process, signal.SIGKILL)
        # Its session would finish the batch once the gate opens (nothing
        # tells it the client is gone while it waits): a crash ends it too.
        for pid in waiting:
            sql("SELECT pg_terminate_backend(%s)", pid)
        wait_for(lambda: not relay_backends(), "the killed relay's sessions to end")
        gate.open()
        self.assertEqual(self.stats(), (3, True, 0), "still open after the crash")
        status, err = relay(*self.relay_args(exchange, "--max-jobs", "3"), timeout=60)
        self.assertEqual(status, 0, err)
        lines = ledger.wait_for(6)
        self.assertEqual(len(lines), 6)
        self.assertEqual([line["message_id"] for line in first[:3]],
                         [f"pgqs-{self.stream}-{i}" for i in ids])
        self.assertEqual([line["message_id"] for line in lines[3:]],
                         [line["message_id"] for line in first[:3]], "the same batch again")
        self.assertEqual([line["body"] for line in lines[3:]], [{"crash": i} for i in range(3)])
        self.assertEqual(self.stats(), (0, False, 3))

    def test_stream_second_relay_stands_by_and_takes_over(self):
        exchange, _, ledger = self.amqp_ledger()
        first, first_log = self.started("first", *self.relay_args(exchange))
        wait_for_log(first, first_log, "pgq-relay: relaying stream")
        second, second_log = self.started("second", *self.relay_args(exchange))
        wait_for_log(second, second_log, "standing by")
        ids = [self.append({"before": i}) for i in range(3)]
        ledger.wait_for(3)
        wait_for(lambda: self.stats() == (0, False, 3), "the first relay's batch to finish")
        time.sleep(1)  # the second relay, were it publishing, would show now
        self.assertNotIn("pgq-relay: relaying stream", log_text(second_log))
        self.assertEqual(len(ledger.lines()), 3)
        end(first, signal.SIGKILL)
        wait_for_log(second, second_log, "took over stream", seconds=30)
        ids += [self.append({"after": i}) for i in range(3)]
        lines = ledger.wait_for(6)
        wait_for(lambda: self.stats() == (0, False, 6), "the second relay's batch to finish")
        self.assertEqual(end(second), 0, log_text(second_log))
        self.assertEqual([line["message_id"] for line in lines],
                         [f"pgqs-{self.stream}-{i}" for i in ids], "each event once, in order")

    def test_stream_a_role_with_no_right_cannot_hold_the_relay_off(self):
        # Issue 30 R1: 2.0's relay took pg_try_advisory_lock on
        # hashtextextended('pgq-relay STREAM CONSUMER', 0); any role took
        # that key first and the relay stood by for ever. The guard is now
        # pgq.acquire_consumer, which needs the consume right.
        sql("DROP ROLE IF EXISTS pgq_stream_relay_intruder")
        sql("CREATE ROLE pgq_stream_relay_intruder LOGIN")
        self.addCleanup(sql, "DROP ROLE IF EXISTS pgq_stream_relay_intruder")
        intruder = psycopg.connect(DSN + " user=pgq_stream_relay_intruder", autocommit=True)
        self.addCleanup(intruder.close)
        self.assertTrue(intruder.execute(
            "SELECT pg_try_advisory_lock(hashtextextended('pgq-relay ' || %s || ' ' || %s, 0))",
            (self.stream, CONSUMER)).fetchone()[0])
        with self.assertRaises(psycopg.errors.InsufficientPrivilege):
            intruder.execute("SELECT pgq.acquire_consumer(%s, %s)", (self.stream, CONSUMER))
        exchange, _, ledger = self.amqp_ledger()
        first, first_log = self.started("first", *self.relay_args(exchange))
        wait_for_log(first, first_log, "pgq-relay: relaying stream")
        self.assertNotIn("standing by", log_text(first_log))
        ids = [self.append({"i": i}) for i in range(3)]
        lines = ledger.wait_for(3)
        self.assertEqual([line["message_id"] for line in lines],
                         [f"pgqs-{self.stream}-{i}" for i in ids])
        wait_for(lambda: self.stats() == (0, False, 3), "the batch to finish")
        # The guard is the relay's: a second relay stands by, and takes over
        # at once when the first exits cleanly (it releases the guard).
        second, second_log = self.started("second", *self.relay_args(exchange))
        wait_for_log(second, second_log, "standing by")
        self.assertEqual(end(first), 0, log_text(first_log))
        wait_for_log(second, second_log, "took over stream", seconds=30)
        self.append({"i": 3})
        ledger.wait_for(4)
        self.assertEqual(end(second), 0, log_text(second_log))

    def test_stream_relay_on_a_database_updated_from_2_0_takes_the_guard(self):
        # The 3.0 library refuses a 2.0 catalog (ADR 0024: 55000, hint
        # ALTER EXTENSION pgq_cpp UPDATE), so the relay's fallback for a 2.0
        # server (2.0's advisory lock, with a warning) cannot be reached
        # with this library; once updated, the relay takes the guard of
        # pgq.acquire_consumer and does not warn.
        db = f"relay20_{RUN}_{self.n}"
        sql(f"CREATE DATABASE {db}")
        self.addCleanup(sql, f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        dsn = DSN + f" dbname={db}"

        def run(query, *params):
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(query, params)
        run("CREATE EXTENSION pgq_cpp VERSION '2.0'")
        with self.assertRaises(psycopg.Error) as refused:
            run("SELECT pgq.create_stream(%s)", self.stream)
        self.assertEqual(refused.exception.sqlstate, "55000")
        run("ALTER EXTENSION pgq_cpp UPDATE")
        run("SELECT pgq.create_stream(%s)", self.stream)
        run("SELECT pgq.register_consumer(%s, %s)", self.stream, CONSUMER)
        exchange, _, ledger = self.amqp_ledger()
        run("SELECT pgq.append(%s, %s)", self.stream, Jsonb({"catalog": "updated"}))
        done = subprocess.run([RELAY, "--dsn", dsn, "--stats-interval", "0",
                               *self.relay_args(exchange, "--max-jobs", "1")],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertNotIn("older than 2.0.1", done.stderr)
        lines = ledger.wait_for(1)
        self.assertEqual(lines[0]["body"], {"catalog": "updated"})

    def test_stream_returned_message_stops_the_relay_batch_unfinished(self):
        # A mandatory publish to an exchange with no binding for the key
        # comes back (312 NO_ROUTE): a stream has no dead-letter, the relay
        # stops, the batch stays open until the topology is fixed.
        exchange, queue, start_ledger = self.amqp_ledger("unbound", consume=False)
        ids = [self.append({"lost": i}) for i in range(2)]
        status, err = relay(*self.relay_args(exchange), timeout=60)
        self.assertEqual(status, 1, err)
        self.assertIn("312 NO_ROUTE", err)
        self.assertIn("the batch stays unfinished", err)
        self.assertEqual(self.stats(), (2, True, 0))
        subprocess.run([LEDGER, "amqp-bind", str(AMQP_PORT), exchange, queue, self.stream],
                       check=True, timeout=30)
        ledger = start_ledger()
        status, err = relay(*self.relay_args(exchange, "--max-jobs", "2"), timeout=60)
        self.assertEqual(status, 0, err)
        lines = ledger.wait_for(2)
        self.assertEqual([line["message_id"] for line in lines],
                         [f"pgqs-{self.stream}-{i}" for i in ids])
        self.assertEqual(self.stats(), (0, False, 2))

    def test_stream_event_that_cannot_be_a_message_stops_the_relay(self):
        exchange, _, ledger = self.amqp_ledger()
        ids = [self.append({"kind": "a.b"}), self.append({"no_kind": 1})]
        status, err = relay(*self.relay_args(exchange, "--routing-key-field", "kind"), timeout=60)
        self.assertEqual(status, 1, err)
        self.assertIn(f"event {ids[1]} of stream {self.stream} cannot be sent", err)
        self.assertIn("no field \"kind\"", err)
        self.assertEqual(self.stats(), (2, True, 0), "the batch stays unfinished")
        self.assertEqual(ledger.lines(), [], "nothing of the batch published")
        status, err = relay(*self.relay_args(exchange, "--max-jobs", "2"), timeout=60)
        self.assertEqual(status, 0, err)
        lines = ledger.wait_for(2)
        self.assertEqual([line["routing_key"] for line in lines], [self.stream, self.stream])
        self.assertEqual(self.stats(), (0, False, 2))

    def test_stream_a_nack_is_not_now_published_again_with_backoff(self):
        # As the queue relay's test_a_nack_is_not_now_no_attempt_is_spent: a
        # queue that holds one message and nacks the publishes beyond it. The
        # batch stays open, the relay reconnects with backoff (the queue
        # relay: 0.1 s doubling to 2 s, about 5 reconnects in 5 s) and
        # publishes again; all get through once a consumer drains the queue.
        exchange, _, start_consumer = self.amqp_ledger("holds-one", consume=False)
        ids = [self.append({"held": i}) for i in range(3)]
        process, path = self.started("nacked", *self.relay_args(exchange))
        wait_for_log(process, path, "nacked a message; reconnecting")
        first_nack = time.monotonic()
        time.sleep(2)
        self.assertEqual(self.stats(), (3, True, 0), "nothing finished while the broker says not now")
        nacked_for = time.monotonic() - first_nack
        reconnects = log_text(path).count("nacked a message; reconnecting")
        ledger = start_consumer()
        lines = ledger.wait_for(3)
        wait_for(lambda: self.stats() == (0, False, 3), "the batch to finish")
        self.assertEqual(end(process), 0, log_text(path)[-2000:])
        self.assertEqual(sorted({line["message_id"] for line in lines}),
                         sorted(f"pgqs-{self.stream}-{i}" for i in ids))
        self.assertLessEqual(reconnects, 15, f"{reconnects} reconnects in {nacked_for:.1f} s of nacks: "
                                             "no backoff between them")

    def test_stream_no_stream_answering_is_not_now_published_again_with_backoff(self):
        # JetStream: a subject no stream takes yet ("no responders") is not
        # now, as for the queue relay (which publishes again with backoff:
        # about 8 times in 5 s). Once a stream takes the subject, it is
        # delivered and the batch finished.
        event_id = self.append({"early": 1})
        process, path = self.started("no-stream", "--broker", NATS, "--stream", self.stream,
                                     "--subject-prefix", f"{self.topic}.")
        wait_for_log(process, path, "connected to NATS")
        time.sleep(2)
        self.assertEqual(self.stats(), (1, True, 0), "not published: the batch stays open")
        ledger = self.nats_ledger()
        [line] = ledger.wait_for(1)
        self.assertEqual(line["message_id"], f"pgqs-{self.stream}-{event_id}")
        wait_for(lambda: self.stats() == (0, False, 1), "the batch to finish")
        self.assertEqual(end(process), 0, log_text(path)[-2000:])
        counters = re.search(r"(\d+) published \((\d+) again\)", log_text(path))
        self.assertIsNotNone(counters, log_text(path)[-2000:])
        self.assertLessEqual(int(counters.group(2)), 20,
                             f"published again {counters.group(2)} times while no stream took the "
                             "subject (about 2 s): no backoff")

    # ------------------------------------------------------------ running

    def test_stream_relays_live_through_a_database_outage(self):
        # The database away for a while (its sessions ended, no new one
        # taken for 2 s, as in a restart): the relay reconnects once it is
        # back, and so does its standby, which goes on standing by (or takes
        # over); nothing is lost.
        exchange, _, ledger = self.amqp_ledger()
        active, active_log = self.started("active", *self.relay_args(exchange))
        wait_for_log(active, active_log, "pgq-relay: relaying stream")
        standby, standby_log = self.started("standby", *self.relay_args(exchange))
        wait_for_log(standby, standby_log, "standing by")
        [(db,)] = sql("SELECT current_database()")

        def elsewhere(query, *params):  # from another database of the server
            with psycopg.connect(DSN + " dbname=postgres", autocommit=True) as conn:
                cur = conn.execute(query, params or None)
                return cur.fetchall() if cur.description else None
        allow = f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS %s'
        self.addCleanup(elsewhere, allow % "true")
        elsewhere(allow % "false")
        [(ended,)] = elsewhere("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                               " WHERE application_name = 'pgq-relay' AND datname = %s", db)
        self.assertEqual(ended, 2)
        time.sleep(2)
        elsewhere(allow % "true")
        time.sleep(1)
        self.assertIsNone(active.poll(), log_text(active_log))
        self.assertIsNone(standby.poll(), f"the standby exited {standby.returncode}: "
                                          f"{log_text(standby_log)}")
        ids = [self.append({"after": i}) for i in range(2)]
        lines = ledger.wait_for(2)
        wait_for(lambda: self.stats() == (0, False, 2), "the batch to finish")
        self.assertEqual(end(standby), 0, log_text(standby_log))
        self.assertEqual(end(active), 0, log_text(active_log))
        self.assertEqual([line["message_id"] for line in lines], [f"pgqs-{self.stream}-{i}" for i in ids])

    def test_stream_a_cancelled_next_batch_is_asked_again(self):
        # pg_cancel_backend on the relay's next_batch (or a statement_timeout):
        # 57014 rolled it back, nothing was opened; the relay asks again,
        # on the same session (it keeps the stream's lock), instead of exiting.
        exchange, _, ledger = self.amqp_ledger()
        active, active_log = self.started("active", *self.relay_args(exchange, "--wait", "60 seconds"))
        waiting = ("SELECT pid FROM pg_stat_activity WHERE application_name = 'pgq-relay'"
                   "   AND datname = current_database() AND state = 'active'"
                   "   AND query LIKE '%%pgq.next_batch_traced(%%' AND query_start > %s")
        [(pid,)] = wait_for(lambda: sql(waiting, "-infinity"), "next_batch waiting")
        [(at,)] = sql("SELECT clock_timestamp()")
        sql("SELECT pg_cancel_backend(%s)", pid)
        [(again,)] = wait_for(lambda: sql(waiting, at), "next_batch again")
        self.assertEqual(again, pid)
        self.assertIsNone(active.poll(), log_text(active_log))
        event = self.append({"after": "cancel"})
        [line] = ledger.wait_for(1)
        self.assertEqual(line["message_id"], f"pgqs-{self.stream}-{event}")
        wait_for(lambda: self.stats() == (0, False, 1), "the batch to finish")
        self.assertEqual(end(active), 0, log_text(active_log))
        self.assertIn("pgq.next_batch was cancelled", log_text(active_log))

    def test_stream_one_relay_publishes_after_a_lost_session(self):
        # The relay's session ends while it finishes a batch (terminated at
        # the finish gate): with the session goes its lock on the stream, and
        # the standby takes over. From then on one relay publishes: the one
        # that lost its session stands by (or stops) - each event appended
        # afterwards reaches the broker once.
        exchange, _, ledger = self.amqp_ledger()
        gate = FinishGate()
        self.addCleanup(gate.open)
        first_ids = [self.append({"first": i}) for i in range(2)]
        first, first_log = self.started("first", *self.relay_args(exchange))
        [waiting] = wait_for(gate.waiters, "the relay's pgq.finish_batch at the gate")
        second, second_log = self.started("second", *self.relay_args(exchange))
        wait_for_log(second, second_log, "standing by")
        sql("SELECT pg_terminate_backend(%s)", waiting)
        wait_for_log(second, second_log, "took over stream")
        gate.open()
        wait_for(lambda: self.stats() == (0, False, 2), "the first batch to finish")
        ledger.wait_for(2)
        later = []
        for i in range(5):  # several batches
            later.append(self.append({"later": i}))
            time.sleep(0.2)
        wait_for(lambda: self.stats() == (0, False, 7), "the later batches to finish")
        time.sleep(1)
        ids = [line["message_id"] for line in ledger.lines()]
        self.assertEqual(sorted(set(ids)), sorted(f"pgqs-{self.stream}-{i}" for i in first_ids + later))
        twice = sorted({i for i in ids if ids.count(i) > 1 and int(i.rsplit("-", 1)[1]) in later})
        self.assertFalse(twice, f"{len(twice)} of the {len(later)} events appended after the takeover "
                                f"published more than once ({', '.join(twice)}): two relays publish. "
                                f"The first relay's log: {log_text(first_log)!r}; "
                                f"the second's: {log_text(second_log)!r}")
        for process, path in ((first, first_log), (second, second_log)):
            if process.poll() is None:
                self.assertEqual(end(process), 0, log_text(path))

    def test_stream_sigterm_exits_0(self):
        exchange, _, ledger = self.amqp_ledger()
        active, active_log = self.started("active", *self.relay_args(exchange))
        wait_for_log(active, active_log, "pgq-relay: relaying stream")
        standby, standby_log = self.started("standby", *self.relay_args(exchange))
        wait_for_log(standby, standby_log, "standing by")
        self.append({"x": 1})
        ledger.wait_for(1)
        wait_for(lambda: self.stats() == (0, False, 1), "the batch to finish")
        started = time.monotonic()
        self.assertEqual(end(standby), 0, log_text(standby_log))
        self.assertEqual(end(active), 0, log_text(active_log))
        # Waiting in pgq.next_batch (--wait 30 s) is cancelled, not waited out.
        self.assertLess(time.monotonic() - started, 10)
        self.assertIn("SIGTERM: finishing the batch in flight", log_text(active_log))
        self.assertEqual(len(ledger.lines()), 1)

    # ------------------------------------------------------------ bad input

    def test_stream_usage_errors(self):
        cases = [
            (("--queue", "to_broker"), "--queue and --stream exclude each other"),
            (("--lease", "1 minute"), "--lease is for a queue"),
            (("--metrics-listen", "127.0.0.1:1"), "--metrics-listen is not available with --stream"),
            (("--consumer", ""), "--consumer must not be empty"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                status, err = relay("--broker", AMQP, "--stream", self.stream, *args)
                self.assertEqual(status, 2, err)
                self.assertIn(message, err)
        status, err = relay("--broker", AMQP, "--stream", "")
        self.assertEqual(status, 2, err)
        self.assertIn("--stream must not be empty", err)

    def test_stream_unknown_is_an_error_with_its_sqlstate(self):
        status, err = relay("--broker", AMQP, "--stream", f"no_such_{self.stream}", "--exchange", "")
        self.assertEqual(status, 1, err)
        self.assertIn("42704", err)
        self.assertIn(f'stream "no_such_{self.stream}" does not exist', err)

    def test_stream_no_consume_right_is_an_error_with_its_sqlstate(self):
        sql("DROP ROLE IF EXISTS pgq_stream_relay_nobody")
        sql("CREATE ROLE pgq_stream_relay_nobody LOGIN")
        self.addCleanup(sql, "DROP ROLE IF EXISTS pgq_stream_relay_nobody")
        self.addCleanup(sql, "SELECT pgq.revoke_stream('pgq_stream_relay_nobody', %s, 'produce')",
                        self.stream)
        # A right on the stream, not the one it needs.
        sql("SELECT pgq.grant_stream('pgq_stream_relay_nobody', %s, 'produce')", self.stream)
        self.append({"x": 1})
        done = subprocess.run([RELAY, "--dsn", DSN + " user=pgq_stream_relay_nobody", "--broker", AMQP,
                               "--stream", self.stream, "--exchange", "", "--stats-interval", "0"],
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn("42501", done.stderr)
        self.assertEqual(self.stats(), (1, False, 0))
        # consume is all it needs.
        exchange, _, ledger = self.amqp_ledger()
        sql("SELECT pgq.grant_stream('pgq_stream_relay_nobody', %s, 'consume')", self.stream)
        self.addCleanup(sql, "SELECT pgq.revoke_stream('pgq_stream_relay_nobody', %s, 'consume')",
                        self.stream)
        done = subprocess.run([RELAY, "--dsn", DSN + " user=pgq_stream_relay_nobody", "--broker", AMQP,
                               "--stream", self.stream, "--exchange", exchange, "--max-jobs", "1",
                               "--stats-interval", "0"],
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(done.returncode, 0, done.stderr)
        ledger.wait_for(1)
        self.assertEqual(self.stats(), (0, False, 1))


if __name__ == "__main__":
    unittest.main(verbosity=2)
