"""W3C trace context (ADR 0030): the text format of pgq_cpp.tracing against
the server's rules; traceparent=/tracestate= end to end (enqueue, append,
the claim and the stream's batches give them back, the server's 22023 for
a bad one, an untraced call's SQL unchanged, a server without the traced
functions); and the OpenTelemetry spans, against a stand-in for
opentelemetry-api (tests/otel_standin.py), which cannot be installed here.
"""

from __future__ import annotations

import threading
import unittest
from typing import Any

import psycopg
from psycopg import errors

import otel_standin
from pgq_cpp import Job, Queue, Stream, StreamBatch, job, tracing
from pgq_cpp.tracing import (
    Traceparent,
    format_traceparent,
    format_tracestate,
    parse_traceparent,
    parse_tracestate,
)
from support import HANG, PgqTestCase

Q = Queue("q")
S = Stream("s")
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TP = f"00-{TRACE_ID}-b7ad6b7169203331-01"
TP2 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"

# Traceparents the client must read exactly as the server does.
TRACEPARENTS = [
    TP,
    TP2,
    f"00-{TRACE_ID}-b7ad6b7169203331-ff",
    f"01-{TRACE_ID}-b7ad6b7169203331-01",  # a later version, 55 bytes
    f"cc-{TRACE_ID}-b7ad6b7169203331-01-what-comes-later",
    f"01-{TRACE_ID}-b7ad6b7169203331-01x",  # later version: byte 56 must be '-'
    f"00-{TRACE_ID}-b7ad6b7169203331-01-",  # version 00 is 55 bytes
    f"00-{TRACE_ID}-b7ad6b7169203331-0",  # 54 bytes
    f"ff-{TRACE_ID}-b7ad6b7169203331-01",
    f"0g-{TRACE_ID}-b7ad6b7169203331-01",
    f"00-{TRACE_ID.upper()}-b7ad6b7169203331-01",
    f"00-{TRACE_ID}-B7AD6B7169203331-01",
    f"00-{TRACE_ID}-b7ad6b7169203331-0A",
    f"00-{'0' * 32}-b7ad6b7169203331-01",
    f"00-{TRACE_ID}-{'0' * 16}-01",
    f"00_{TRACE_ID}-b7ad6b7169203331-01",
    f"00-{TRACE_ID}_b7ad6b7169203331-01",
    f"00-{TRACE_ID}-b7ad6b7169203331_01",
    f" 00-{TRACE_ID}-b7ad6b716920333-01",
    "",
]

# Tracestates (with TP) the client must judge as the server does.
TRACESTATES = [
    "a=b",
    "a=b, c=d",
    "a=b,,c=d",
    " , ",
    "a=b c",
    "a= b",
    "a=b ",  # a member's surrounding spaces are not its own
    "tenant@system=v",
    "1tenant@sys=v",
    "k*/_-9=v",
    "k=" + "x" * 256,
    "k" * 256 + "=v",
    "k" * 257 + "=v",
    "k=" + "x" * 257,
    ",".join(f"k{i}=v" for i in range(32)),
    ",".join(f"k{i}=v" for i in range(33)),
    ",".join(f"k{i}=" + "v" * 61 for i in range(7)),  # 7 x 64 + 6 commas: 454 bytes
    ",".join(f"k{i}=" + "v" * 61 for i in range(8)),  # 8 x 64 + 7 commas: 519 bytes
    "a=b,a=c",
    "A=b",
    "1a=b",
    "a@1=b",
    "a@" + "s" * 15 + "=b",
    "a=",
    "=b",
    "a",
    "a=b=c",
    "a=b\tc",
    "a=b\u00e9",
]


def ids(context: otel_standin.SpanContext | None) -> tuple[str, str] | None:
    """A span context's trace and span ids, as hex."""
    return None if context is None else (context.trace_hex, context.span_hex)


def accepts(check: Any, value: str) -> bool:
    try:
        check(value)
    except ValueError:
        return False
    return True


class TextFormatTest(PgqTestCase):
    """pgq_cpp.tracing's rules are the server's."""

    def server_stores(self, traceparent: str, tracestate: str | None = None) -> str | None:
        """What the server stores of the context (pgq.job's trace_context),
        or None when it refuses it (22023)."""
        try:
            job_id = Q.enqueue(self.admin, {}, traceparent=traceparent, tracestate=tracestate)
        except errors.InvalidParameterValue:
            return None
        return str(self.scalar("SELECT trace_context FROM pgq.job(%s)", (job_id,)))

    def test_traceparent_rules_are_the_servers(self) -> None:
        for text in TRACEPARENTS:
            with self.subTest(traceparent=text):
                stored = self.server_stores(text)
                self.assertEqual(accepts(parse_traceparent, text), stored is not None)
                if stored is not None:
                    # Read as version 00, the form the server stores.
                    self.assertEqual(str(parse_traceparent(text)), stored)
        self.assertEqual(sum(accepts(parse_traceparent, t) for t in TRACEPARENTS), 5)

    def test_tracestate_rules_are_the_servers(self) -> None:
        for text in TRACESTATES:
            with self.subTest(tracestate=text):
                self.assertEqual(
                    accepts(parse_tracestate, text), self.server_stores(TP, text) is not None
                )
        self.assertEqual(parse_tracestate("a=b , ,c=d e"), [("a", "b"), ("c", "d e")])
        self.assertEqual(parse_tracestate(""), [])

    def test_parse_and_format(self) -> None:
        parsed = parse_traceparent(TP)
        self.assertEqual(parsed, Traceparent(TRACE_ID, "b7ad6b7169203331", 1))
        self.assertTrue(parsed.sampled)
        self.assertFalse(parse_traceparent(TP2).sampled)
        self.assertEqual(format_traceparent(int(TRACE_ID, 16), 0xB7AD6B7169203331, 1), TP)
        self.assertEqual(format_traceparent(TRACE_ID, "b7ad6b7169203331"), TP)
        self.assertEqual(str(parse_traceparent("01" + TP[2:] + "-x")), TP)
        for bad in ((0, 1), (1, 0), (1 << 128, 1), (1, 1 << 64)):
            with self.subTest(ids=bad), self.assertRaises(ValueError):
                format_traceparent(*bad)
        with self.assertRaises(ValueError):
            format_traceparent(TRACE_ID.upper(), "b7ad6b7169203331")
        with self.assertRaises(ValueError):
            format_traceparent(TRACE_ID, "b7ad6b7169203331", 256)
        with self.assertRaises(TypeError):
            parse_traceparent(None)  # type: ignore[arg-type]

    def test_format_tracestate_cuts_as_w3c_says(self) -> None:
        self.assertEqual(format_tracestate([("a", "1"), ("b", "2")]), "a=1,b=2")
        # Over 512 bytes: the members over 128 bytes go first...
        long = ("long", "x" * 200)
        members = [("a", "y" * 150), long] + [(f"k{i}", "v" * 40) for i in range(7)]
        cut = format_tracestate(members)
        self.assertEqual(parse_tracestate(cut), [(f"k{i}", "v" * 40) for i in range(7)])
        # ...then members from the end.
        many = [(f"k{i}", "v" * 61) for i in range(10)]  # 10 x 64 + 9 commas: 7 fit
        self.assertEqual(parse_tracestate(format_tracestate(many)), many[:7])
        forty = [(f"k{i}", "v") for i in range(40)]
        self.assertEqual(parse_tracestate(format_tracestate(forty)), forty[:32])
        for bad in ([("A", "b")], [("a", "b,c")], [("a", "1"), ("a", "2")]):
            with self.subTest(members=bad), self.assertRaises(ValueError):
                format_tracestate(bad)


class Recorded:
    """The statements a connection's cursors ran (a cursor_factory)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.statements: list[str] = []
        seen = self.statements

        class Recording(psycopg.Cursor):  # type: ignore[type-arg]
            def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
                seen.append(str(query))
                return super().execute(query, params, **kwargs)

        conn.cursor_factory = Recording

    def last(self) -> str:
        return self.statements[-1]


class ArgumentsTest(PgqTestCase):
    """traceparent=/tracestate= end to end, opentelemetry or not."""

    def setUp(self) -> None:
        super().setUp()
        # Whatever is installed: these tests are about the arguments alone.
        saved = otel_standin.block()
        tracing._forget_opentelemetry()
        self.addCleanup(tracing._forget_opentelemetry)
        self.addCleanup(otel_standin.uninstall, saved)
        self.admin.execute("SELECT pgq.create_stream('s')")

    def collect_jobs(self, count: int, **kwargs: Any) -> list[Job]:
        seen: list[Job] = []
        lock = threading.Lock()

        def handler(job: Job) -> None:
            with lock:
                seen.append(job)

        worker = self.start_worker(handler, **kwargs)
        self.wait_for(f"{count} jobs handled", lambda: len(seen) >= count)
        worker.stop()
        self.assertTrue(worker.join(HANG))
        return sorted(seen, key=lambda j: j.id)

    def test_a_traced_enqueue_comes_back_from_the_claim(self) -> None:
        traced = Q.enqueue(self.admin, {"n": 1}, traceparent=TP, tracestate="vendor=v1")
        plain = Q.enqueue(self.admin, {"n": 2})
        many = Q.enqueue_many(self.admin, [{"n": 3}, {"n": 4}], traceparent=TP2)
        jobs = self.collect_jobs(4)
        self.assertEqual([j.id for j in jobs], [traced, plain, *many])
        self.assertEqual(
            [(j.traceparent, j.tracestate, j.links) for j in jobs],
            [(TP, "vendor=v1", []), (None, None, []), (TP2, None, []), (TP2, None, [])],
        )

    def test_job_info_shows_the_trace_id(self) -> None:
        self.admin.execute("SELECT pgq.create_queue('kept', keep_completed => '1 hour')")
        traced = Queue("kept").enqueue(self.admin, {}, traceparent=TP, tracestate="a=b")
        plain = Queue("kept").enqueue(self.admin, {})
        info = job(self.admin, traced)
        assert info is not None
        self.assertEqual((info.trace_id, info.trace_context), (TRACE_ID, f"{TP};a=b"))
        untraced = job(self.admin, plain)
        assert untraced is not None
        self.assertEqual((untraced.trace_id, untraced.trace_context), (None, None))

    def test_a_childs_links_are_its_traced_parents(self) -> None:
        parent = Q.enqueue(self.admin, {"step": 1}, traceparent=TP)
        untraced_parent = Q.enqueue(self.admin, {"step": 1})
        child = Q.enqueue(self.admin, {"step": 2}, after=[parent, untraced_parent], traceparent=TP2)
        jobs = self.collect_jobs(3)
        self.assertEqual([j.id for j in jobs], [parent, untraced_parent, child])
        self.assertEqual((jobs[2].traceparent, jobs[2].links), (TP2, [TP]))

    def test_a_retry_keeps_the_context(self) -> None:
        self.admin.execute("SELECT pgq.alter_queue('q', backoff_base => '10 milliseconds')")
        job_id = Q.enqueue(self.admin, {}, traceparent=TP, tracestate="a=b")
        attempts: list[tuple[int, str | None, str | None]] = []

        def handler(job: Job) -> None:
            attempts.append((job.attempt, job.traceparent, job.tracestate))
            if job.attempt == 1:
                raise RuntimeError("the first attempt fails")

        self.start_worker(handler)
        self.wait_for("the second attempt", lambda: len(attempts) == 2)
        self.assertEqual(attempts, [(1, TP, "a=b"), (2, TP, "a=b")])
        self.wait_for("done", lambda: self.job_state(job_id) is None)

    def test_a_bad_context_is_the_servers_22023(self) -> None:
        conn = self.connect(autocommit=True)
        cases = [
            lambda: Q.enqueue(conn, {}, traceparent=TP.upper()),
            lambda: Q.enqueue(conn, {}, traceparent=TP[:-1]),
            lambda: Q.enqueue(conn, {}, tracestate="a=b"),  # a tracestate alone
            lambda: Q.enqueue(conn, {}, traceparent=TP, tracestate="a=b,a=c"),
            lambda: Q.enqueue_many(conn, [{}, {}], traceparent="00-" + "0" * 52),
            lambda: S.append(conn, {}, traceparent="bad"),
            lambda: S.append_many(conn, [{}], traceparent=TP, tracestate="A=b"),
        ]
        for n, call in enumerate(cases):
            with self.subTest(case=n), self.assertRaises(errors.InvalidParameterValue) as raised:
                call()
            self.assertEqual(raised.exception.sqlstate, "22023")
        self.assertEqual(self.live_jobs(), 0)
        with self.assertRaises(TypeError):
            Q.enqueue(conn, {}, traceparent=b"00-...")  # type: ignore[arg-type]

    def test_an_untraced_call_sends_the_sql_of_before(self) -> None:
        conn = self.connect(autocommit=True)
        recorded = Recorded(conn)
        Q.enqueue(conn, {})
        Q.enqueue_many(conn, [{}])
        S.append(conn, {})
        S.append_many(conn, [{}])
        self.assertEqual(len(recorded.statements), 4)
        for sql in recorded.statements:
            self.assertNotIn("trace", sql)
        Q.enqueue(conn, {}, traceparent=TP)
        self.assertIn("traceparent => %s::text)", recorded.last())
        self.assertNotIn("tracestate", recorded.last())
        Q.enqueue_many(conn, [{}], traceparent=TP, tracestate="a=b")
        self.assertIn(
            "traceparent => %s::text, tracestate => %s::text) WITH ORDINALITY", recorded.last()
        )
        S.append(conn, {}, traceparent=TP, tracestate="a=b")
        self.assertIn("traceparent => %s::text, tracestate => %s::text)", recorded.last())

    def test_stream_events_carry_their_context(self) -> None:
        self.admin.execute("SELECT pgq.register_consumer('s', 'c')")
        traced = S.append(self.admin, {"n": 1}, traceparent=TP, tracestate="a=b")
        plain = S.append(self.admin, {"n": 2})
        many = S.append_many(self.admin, [{"n": 3}, {"n": 4}], traceparent=TP2)
        # A topic's publish gives the stream event the publisher's context.
        self.admin.execute("SELECT pgq.create_topic('t')")
        self.admin.execute("SELECT pgq.subscribe('t', stream => 's')")
        self.admin.execute("SELECT pgq.publish('t', '{}', traceparent => %s)", (TP,))
        seen: list[tuple[int, str | None, str | None]] = []
        lock = threading.Lock()

        def handler(batch: StreamBatch) -> None:
            with lock:
                seen.extend((e.id, e.traceparent, e.tracestate) for e in batch.events)

        self.start_consumer(handler, register=False)
        self.wait_for("5 events", lambda: len(seen) == 5)
        self.assertEqual(
            seen[:4],
            [(traced, TP, "a=b"), (plain, None, None), (many[0], TP2, None), (many[1], TP2, None)],
        )
        self.assertEqual(seen[4][1:], (TP, None))

    def test_a_server_without_the_traced_functions(self) -> None:
        # A catalog before 3.1 has neither: the worker claims with
        # pgq.claim and the consumer reads with pgq.next_batch.
        for function in (
            "pgq.claim_traced(text, integer, interval, interval)",
            "pgq.claim_traced(text[], integer, interval, interval)",
            "pgq.next_batch_traced(text, text, integer, interval)",
        ):
            self.admin.execute(f"ALTER EXTENSION pgq_cpp DROP FUNCTION {function}")
            self.admin.execute(f"DROP FUNCTION {function}")
        self.admin.execute("SELECT pgq.register_consumer('s', 'c')")
        job_id = Q.enqueue(self.admin, {}, traceparent=TP)
        S.append(self.admin, {}, traceparent=TP)
        events: list[Any] = []
        with self.assertLogs("pgq_cpp", "WARNING") as logs:
            jobs = self.collect_jobs(1)
            self.start_consumer(lambda batch: events.extend(batch.events), register=False)
            self.wait_for("the event", lambda: events)
        self.assertEqual([(j.id, j.traceparent, j.links) for j in jobs], [(job_id, None, [])])
        self.assertEqual((events[0].traceparent, events[0].tracestate), (None, None))
        for function in ("pgq.claim_traced", "pgq.next_batch_traced"):
            self.assertTrue(any(f"no {function}" in line for line in logs.output), logs.output)


class SpansTest(PgqTestCase):
    """With opentelemetry importable (the stand-in): producer spans and
    their context, the worker's and the stream consumer's spans."""

    def setUp(self) -> None:
        super().setUp()
        self.recorder, saved = otel_standin.install()
        tracing._forget_opentelemetry()
        self.addCleanup(tracing._forget_opentelemetry)
        self.addCleanup(otel_standin.uninstall, saved)
        self.tracer = otel_standin.Tracer(self.recorder, "app", None)
        self.admin.execute("SELECT pgq.create_stream('s')")

    def stored(self, job_id: int) -> str:
        return str(self.scalar("SELECT trace_context FROM pgq.job(%s)", (job_id,)))

    def spans_of(self, name: str, count: int) -> list[otel_standin.RecordedSpan] | None:
        """The ended spans of that name once there are ``count``."""
        spans = self.recorder.spans(name)
        self.assertLessEqual(len(spans), count, spans)
        return spans if len(spans) == count else None

    def span(self, name: str) -> otel_standin.RecordedSpan:
        spans = self.wait_for(f"span {name!r} ended", lambda: self.recorder.spans(name))
        self.assertEqual(len(spans), 1, spans)
        return spans[0]

    def test_producer_span_gives_the_job_its_context(self) -> None:
        self.admin.execute("SELECT pgq.register_consumer('s', 'c')")
        with self.tracer.start_as_current_span("request") as request:
            job_id = Q.enqueue(self.admin, {})
            many_ids = Q.enqueue_many(self.admin, [{}, {}])
            event = S.append(self.admin, {})
        send = self.recorder.spans("send q")
        self.assertEqual(len(send), 2)
        one, many = send
        for span in send:
            self.assertEqual(span.kind, otel_standin.SpanKind.PRODUCER)
            self.assertEqual(ids(span.parent), ids(request.context))
            self.assertEqual(span.attributes["messaging.system"], "pgq")
            self.assertEqual(span.attributes["messaging.destination.name"], "q")
            self.assertEqual(span.attributes["messaging.operation.type"], "send")
        # The job's context is its producer span's: its worker's span is that one's child.
        self.assertEqual(self.stored(job_id), one.traceparent)
        self.assertEqual(one.attributes["messaging.message.id"], str(job_id))
        self.assertEqual([self.stored(i) for i in many_ids], [many.traceparent] * 2)
        self.assertEqual(many.attributes["messaging.batch.message_count"], 2)
        trace_id = self.scalar("SELECT trace_id FROM pgq.job(%s)", (job_id,))
        self.assertEqual(trace_id, request.context.trace_hex)
        stream_span = self.span("send s")
        self.assertEqual(stream_span.attributes["messaging.message.id"], str(event))
        self.assertEqual(
            self.scalar("SELECT event_id, traceparent FROM pgq.next_batch_traced('s', 'c')"), event
        )
        self.assertEqual(
            self.scalar("SELECT traceparent FROM pgq.next_batch_traced('s', 'c')"),
            stream_span.traceparent,
        )

    def test_a_valid_remote_context_without_recording_is_propagated(self) -> None:
        # As with opentelemetry-api and no SDK: the request's extracted
        # context is current, not recording; the job must still join it.
        remote = otel_standin.remote_span(TP, "vendor=v")
        with otel_standin.current(remote):
            job_id = Q.enqueue(self.admin, {})
        send = self.span("send q")
        self.assertEqual(ids(send.parent), (TRACE_ID, "b7ad6b7169203331"))
        self.assertEqual(self.stored(job_id), f"{send.traceparent};vendor=v")

    def test_no_current_span_no_span_and_the_sql_of_before(self) -> None:
        conn = self.connect(autocommit=True)
        recorded = Recorded(conn)
        job_id = Q.enqueue(conn, {})
        S.append(conn, {})
        self.assertEqual(self.recorder.spans(ended=False), [])
        self.assertFalse(any("trace" in sql for sql in recorded.statements))
        self.assertIsNone(self.scalar("SELECT trace_context FROM pgq.job(%s)", (job_id,)))

    def test_a_context_given_is_stored_as_it_is(self) -> None:
        with self.tracer.start_as_current_span("request"):
            job_id = Q.enqueue(self.admin, {}, traceparent=TP)
        self.assertEqual(self.stored(job_id), TP)
        self.assertEqual([s.name for s in self.recorder.spans()], ["request"])

    def test_a_long_tracestate_is_cut_to_the_servers_limit(self) -> None:
        state = ",".join(f"k{i}=" + "v" * 61 for i in range(10))  # 649 bytes: 7 fit
        with otel_standin.current(otel_standin.remote_span(TP, state)):
            job_id = Q.enqueue(self.admin, {})
        stored = self.stored(job_id)
        self.assertEqual(stored.split(";")[1], ",".join(f"k{i}=" + "v" * 61 for i in range(7)))

    def test_a_refused_call_records_the_error_on_its_span(self) -> None:
        with self.tracer.start_as_current_span("request"):
            with self.assertRaises(errors.UndefinedObject):
                Queue("nowhere").enqueue(self.admin, {})
        span = self.span("send nowhere")
        self.assertEqual(span.status.status_code, otel_standin.StatusCode.ERROR)
        self.assertIsInstance(span.exceptions[0], errors.UndefinedObject)

    def test_the_worker_runs_each_job_in_a_consumer_span(self) -> None:
        self.admin.execute("SELECT pgq.create_queue('next')")
        self.admin.execute("SELECT pgq.alter_queue('q', backoff_base => '10 milliseconds')")
        handler_conn = self.connect(autocommit=True)
        with self.tracer.start_as_current_span("request") as request:
            job_id = Q.enqueue(self.admin, {})
        producer = self.span("send q")
        untraced = Q.enqueue(self.admin, {"untraced": True}, priority=-1)
        follow_up: list[int] = []

        def handler(job: Job) -> None:
            if job.payload.get("untraced"):
                return
            if job.attempt == 1:
                raise ValueError("first attempt fails")
            follow_up.append(Queue("next").enqueue(handler_conn, {}))  # in the job's trace

        self.start_worker(handler, concurrency=1)
        spans = self.wait_for("three process spans", lambda: self.spans_of("process q", 3))
        (root,) = [s for s in spans if s.attributes["messaging.message.id"] == str(untraced)]
        traced = [s for s in spans if s is not root]
        failed, done = sorted(traced, key=lambda s: s.attributes["pgq.attempt"])
        for span, attempt in ((failed, 1), (done, 2)):
            self.assertEqual(span.kind, otel_standin.SpanKind.CONSUMER)
            # The parent is the stored context: the producer span's.
            self.assertEqual(ids(span.parent), ids(producer.context))
            self.assertEqual(span.context.trace_id, request.context.trace_id)
            self.assertEqual(span.attributes["pgq.attempt"], attempt)
            self.assertEqual(span.attributes["messaging.message.id"], str(job_id))
            self.assertEqual(span.attributes["messaging.system"], "pgq")
            self.assertEqual(span.attributes["messaging.destination.name"], "q")
            self.assertEqual(span.attributes["messaging.operation.type"], "process")
        self.assertEqual(failed.attributes["pgq.outcome"], "failed")
        self.assertEqual(failed.status.status_code, otel_standin.StatusCode.ERROR)
        self.assertIsInstance(failed.exceptions[0], ValueError)
        self.assertEqual(done.attributes["pgq.outcome"], "completed")
        self.assertEqual(done.status.status_code, otel_standin.StatusCode.UNSET)
        self.assertEqual(done.exceptions, [])
        # An untraced job: a span of its own trace, no parent.
        self.assertEqual(root.attributes["messaging.message.id"], str(untraced))
        self.assertIsNone(root.parent)
        # What the handler enqueued: a producer span under the process span.
        send_next = self.span("send next")
        self.assertEqual(ids(send_next.parent), ids(done.context))
        self.assertEqual(self.stored(follow_up[0]), send_next.traceparent)

    def test_a_child_jobs_span_links_to_its_parents(self) -> None:
        parent = Q.enqueue(self.admin, {}, traceparent=TP)
        child = Q.enqueue(self.admin, {}, after=[parent], traceparent=TP2)
        self.start_worker(lambda job: None)
        spans = self.wait_for("two process spans", lambda: self.spans_of("process q", 2))
        by_id = {s.attributes["messaging.message.id"]: s for s in spans}
        parent_span, child_span = by_id[str(parent)], by_id[str(child)]
        self.assertEqual(parent_span.links, [])
        self.assertEqual(child_span.parent.trace_hex, TP2.split("-")[1])
        self.assertEqual(
            [(link.context.trace_hex, link.context.span_hex) for link in child_span.links],
            [(TRACE_ID, "b7ad6b7169203331")],
        )

    def test_the_stream_consumer_processes_each_batch_in_a_span(self) -> None:
        self.admin.execute("SELECT pgq.register_consumer('s', 'c')")
        single = S.append(self.admin, {"n": 1}, traceparent=TP, tracestate="a=b")
        batches: list[StreamBatch] = []
        go = threading.Event()

        def handler(batch: StreamBatch) -> None:
            batches.append(batch)
            if len(batches) == 1:
                go.wait(HANG)  # the next two events come in one batch

        self.start_consumer(handler, register=False)
        self.wait_for("the first batch", lambda: batches)
        with self.admin.transaction():
            S.append(self.admin, {"n": 2}, traceparent=TP2)
            S.append(self.admin, {"n": 3})
        go.set()
        spans = self.wait_for("two process spans", lambda: self.spans_of("process s", 2))
        one, two = spans
        self.assertEqual([e.id for e in batches[0].events], [single])
        self.assertEqual(
            (ids(one.parent), one.parent.trace_state), ((TRACE_ID, "b7ad6b7169203331"), "a=b")
        )
        self.assertEqual(one.attributes["messaging.batch.message_count"], 1)
        self.assertEqual(one.attributes["pgq.outcome"], "finished")
        self.assertEqual(one.attributes["messaging.consumer.group.name"], "c")
        self.assertIsNone(two.parent)
        self.assertEqual(two.attributes["messaging.batch.message_count"], 2)
        self.assertEqual([link.context.trace_hex for link in two.links], [TP2.split("-")[1]])

    def test_a_failing_batch_handler_records_the_error(self) -> None:
        calls: list[int] = []

        def handler(batch: StreamBatch) -> None:
            calls.append(batch.id)
            if len(calls) == 1:
                raise KeyError("first time")

        self.start_consumer(handler)  # registers: the event below is its
        S.append(self.admin, {}, traceparent=TP)
        spans = self.wait_for("two process spans", lambda: self.spans_of("process s", 2))
        self.assertEqual([s.attributes["pgq.outcome"] for s in spans], ["failed", "finished"])
        self.assertEqual(spans[0].status.status_code, otel_standin.StatusCode.ERROR)
        self.assertIsInstance(spans[0].exceptions[0], KeyError)


class WithoutOpenTelemetryTest(unittest.TestCase):
    def test_nothing_is_looked_up_twice_and_nothing_happens(self) -> None:
        saved = otel_standin.block()
        tracing._forget_opentelemetry()
        self.addCleanup(tracing._forget_opentelemetry)
        self.addCleanup(otel_standin.uninstall, saved)
        self.assertIsNone(tracing._opentelemetry())
        sent: list[tuple[str | None, str | None]] = []
        def send(traceparent: str | None, tracestate: str | None) -> int:
            sent.append((traceparent, tracestate))
            return 7

        result = tracing.produce("enqueue", "q", None, None, send)
        self.assertEqual((result, sent), (7, [(None, None)]))
        with tracing.process("q", (TP, None), [TP2], {}) as span:
            span.finish("failed", ValueError("x"))  # no-op


if __name__ == "__main__":
    unittest.main()
