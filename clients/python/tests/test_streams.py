"""Streams: appending in the caller's transaction, and StreamConsumer:
batches end to end, a failing handler, several consumers, a late commit,
stop(), wake-up latency, lost connections, errors and rights."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import errors

from pgq_cpp import Stream, StreamBatch, StreamConsumer
from support import DSN, HANG, PgqTestCase

S = Stream("s")
PACKAGE_DIR = Path(__file__).resolve().parents[1]

# A consumer process under run_forever: each batch's handler announces its
# events and holds on until it reads a line.
CONSUMER_SCRIPT = """
import logging, sys
from pgq_cpp import StreamConsumer

def handler(batch):
    print("handling", *[event.id for event in batch.events], flush=True)
    sys.stdin.readline()

logging.basicConfig(level=logging.INFO)
StreamConsumer(sys.argv[1], "s", "c", handler).run_forever()
print("exited", flush=True)
"""


def _read_lines(stream: IO[str], into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


class Batches:
    """What a handler saw: every batch it was handed, in order, as
    (batch id, [(event id, payload)]), thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seen: list[tuple[int, list[tuple[int, Any]]]] = []
        self.batches: list[StreamBatch] = []

    def __call__(self, batch: StreamBatch) -> None:
        with self._lock:
            self.batches.append(batch)
            self.seen.append((batch.id, [(e.id, e.payload) for e in batch.events]))

    def event_ids(self) -> list[int]:
        with self._lock:
            return [event_id for _, events in self.seen for event_id, _ in events]


class StreamTest(PgqTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.admin.execute("SELECT pgq.create_stream('s')")

    def stats(self, consumer: str = "c") -> dict[str, Any]:
        row = self.admin.execute(
            "SELECT pending_events, batch_open, finished_events FROM pgq.stream_stats"
            " WHERE stream = 's' AND consumer = %s",
            (consumer,),
        ).fetchone()
        assert row is not None, f"consumer {consumer} is not registered"
        return {"pending": row[0], "open": row[1], "finished": row[2]}

    def wait_finished(self, count: int, consumer: str = "c") -> None:
        self.wait_for(
            f"{count} events finished by {consumer}",
            lambda: self.stats(consumer) == {"pending": 0, "open": False, "finished": count},
        )

    def next_batch_sleeping(self, consumer: str = "c", seconds: float = 0) -> bool:
        """Whether the consumer's next_batch sleeps in the server (for
        ``seconds`` already), waiting for an append."""
        return bool(
            self.admin.execute(
                "SELECT 1 FROM pg_stat_activity"
                " WHERE application_name = %s AND state = 'active'"
                "   AND wait_event_type = 'Extension' AND query LIKE '%%pgq.next_batch%%'"
                "   AND now() - query_start >= %s * interval '1 second'",
                (f"pgq_cpp.py stream s {consumer}", seconds),
            ).fetchone()
        )

    # -- appending --------------------------------------------------------

    def test_append_belongs_to_the_callers_transaction(self) -> None:
        self.admin.execute("SELECT pgq.register_consumer('s', 'c')")
        producer = self.connect()  # psycopg's default: a transaction per block of work
        with producer.transaction():
            kept = S.append(producer, {"n": 1})
            more = S.append_many(producer, [{"n": 2}, [3], "four", None])
        with self.assertRaises(ZeroDivisionError):
            with producer.transaction():
                S.append(producer, {"n": "rolled back"})
                S.append_many(producer, [{"n": "rolled back too"}])
                raise ZeroDivisionError
        with producer.cursor() as cur:  # a cursor: runs on its connection
            last = S.append(cur, {"n": 5})
        producer.commit()
        self.assertEqual(more, list(range(kept + 1, kept + 5)))  # ids in input order
        self.assertEqual(S.append_many(producer, []), [])
        producer.commit()
        rows = self.admin.execute(
            "SELECT event_id, payload FROM pgq.next_batch('s', 'c')"
        ).fetchall()
        self.assertEqual(
            rows,
            [(kept, {"n": 1}), (more[0], {"n": 2}), (more[1], [3]), (more[2], "four"),
             (more[3], None), (last, {"n": 5})],
        )

    def test_append_errors_are_the_servers(self) -> None:
        for call, error, sqlstate in (
            (lambda: Stream("nope").append(self.admin, {}), errors.UndefinedObject, "42704"),
            (lambda: Stream("nope").append_many(self.admin, [{}]), errors.UndefinedObject, "42704"),
        ):
            with self.subTest(sqlstate=sqlstate):
                with self.assertRaises(error) as raised:
                    call()
                self.assertEqual(raised.exception.sqlstate, sqlstate)
        producer = self.create_role("pgq_py_stream_stranger")
        with self.assertRaises(errors.InsufficientPrivilege):
            S.append(self.connect(producer, autocommit=True), {})
        self.admin.execute("SELECT pgq.grant_stream('pgq_py_stream_stranger', 's', 'produce')")
        self.assertGreater(S.append(self.connect(producer, autocommit=True), {}), 0)

    # -- consuming --------------------------------------------------------

    def test_events_reach_the_handler_in_batches_and_are_finished(self) -> None:
        handler = Batches()
        consumer = self.start_consumer(handler, stream=S, max_events=2)
        self.assertEqual((consumer.stream, consumer.consumer), ("s", "c"))
        before = datetime.now().astimezone()
        ids = S.append_many(self.admin, [{"n": n} for n in range(5)])
        self.wait_finished(5)
        self.assertEqual(handler.event_ids(), ids)
        self.assertTrue(all(1 <= len(events) <= 2 for _, events in handler.seen), handler.seen)
        batch_ids = [batch_id for batch_id, _ in handler.seen]
        self.assertEqual(batch_ids, sorted(set(batch_ids)))  # each batch once
        first = handler.batches[0]
        self.assertEqual((first.stream, first.consumer), ("s", "c"))
        event = first.events[0]
        self.assertEqual((event.id, event.payload), (ids[0], {"n": 0}))
        self.assertIsInstance(event.appended_at, datetime)
        self.assertLess(abs(event.appended_at - before), timedelta(minutes=1))
        with self.assertRaises(errors.ObjectNotInPrerequisiteState):  # finished already
            self.admin.execute("SELECT pgq.finish_batch(%s)", (batch_ids[-1],))

    def test_a_failing_handler_gets_the_same_batch_again_and_it_is_finished_once(self) -> None:
        calls: list[tuple[int, list[int]]] = []

        def fails_once(batch: StreamBatch) -> None:
            calls.append((batch.id, [e.id for e in batch.events]))
            if len(calls) == 1:
                raise ConnectionError("the archive is down")

        ids = []
        with self.assertLogs("pgq_cpp", "WARNING") as logs:
            self.start_consumer(fails_once)
            ids = S.append_many(self.admin, [{"n": 1}, {"n": 2}, {"n": 3}])
            self.wait_finished(3)
        self.assertEqual(len(calls), 2, calls)
        self.assertEqual(calls[0], calls[1])  # the same batch id, the same events
        self.assertEqual(calls[0][1], ids)
        self.assertEqual(len(logs.output), 1, logs.output)
        self.assertIn("the handler raised ConnectionError", logs.output[0])
        self.assertIn("the archive is down", logs.output[0])  # with its traceback
        with self.assertRaises(errors.ObjectNotInPrerequisiteState):
            self.admin.execute("SELECT pgq.finish_batch(%s)", (calls[0][0],))
        # And it goes on with the next batch.
        later = S.append(self.admin, {"n": 4})
        self.wait_finished(4)
        self.assertEqual(calls[-1][1], [later])

    def test_a_handler_that_keeps_failing_is_retried_with_a_growing_backoff(self) -> None:
        times: list[float] = []
        handled = threading.Event()

        def fails_three_times(batch: StreamBatch) -> None:
            times.append(time.monotonic())
            if len(times) <= 3:
                raise RuntimeError(f"failure {len(times)}")
            handled.set()

        with self.assertLogs("pgq_cpp", "WARNING"):
            self.start_consumer(fails_three_times)
            S.append(self.admin, {})
            self.assertTrue(handled.wait(HANG))
        self.wait_finished(1)
        gaps = [b - a for a, b in zip(times, times[1:])]
        # 0.1 s, 0.2 s, 0.4 s (each plus a next_batch).
        for gap, backoff in zip(gaps, (0.1, 0.2, 0.4)):
            self.assertGreaterEqual(gap, backoff * 0.9, gaps)

    def test_two_consumers_each_get_every_event(self) -> None:
        first, second = Batches(), Batches()
        self.start_consumer(first, consumer="c1")
        self.start_consumer(second, consumer="c2", max_events=1)
        ids = []
        for n in range(4):
            with self.admin.transaction():
                ids += S.append_many(self.admin, [{"n": n, "i": i} for i in range(3)])
        self.wait_finished(12, "c1")
        self.wait_finished(12, "c2")
        self.assertEqual(first.event_ids(), ids)
        self.assertEqual(second.event_ids(), ids)
        self.assertEqual(len(second.seen), 12)  # one event per batch

    def test_a_transaction_that_commits_late_is_delivered(self) -> None:
        handler = Batches()
        self.start_consumer(handler)
        late = self.connect()
        with late.transaction():
            early_id = S.append(late, {"n": "appended first, committed last"})
            # Meanwhile another transaction appends, commits and is read.
            other = S.append(self.admin, {"n": "appended second, committed first"})
            self.wait_for("the second event handled", lambda: other in handler.event_ids())
            self.wait_finished(1)
            self.assertEqual(handler.event_ids(), [other])
        self.wait_finished(2)
        self.assertEqual(handler.event_ids(), [other, early_id])
        self.assertEqual(len(handler.seen), 2)  # in a later batch
        self.assertGreater(early_id, 0)
        self.assertLess(early_id, other)

    def test_a_waiting_consumer_gets_an_event_within_milliseconds(self) -> None:
        received = threading.Event()
        received_at: list[float] = []

        def handler(batch: StreamBatch) -> None:
            received_at.append(time.monotonic())
            received.set()

        self.start_consumer(handler, wait=timedelta(minutes=1))
        producer = self.connect()
        for asleep in (1.0, 0, 0):
            # One next_batch asleep in the server (a second already, the
            # first time): the consumer does not poll.
            self.wait_for("next_batch asleep", lambda s=asleep: self.next_batch_sleeping(seconds=s))
            received.clear()
            with producer.transaction():
                S.append(producer, {})
            committed = time.monotonic()
            self.assertTrue(received.wait(HANG))
            # A functional bound (the commit wakes the wait, it does not run
            # out its minute), not a benchmark: typically a few milliseconds.
            self.assertLess(received_at[-1] - committed, 2.0)

    def test_a_cancelled_next_batch_is_asked_again(self) -> None:
        # 57014 (pg_cancel_backend, a statement_timeout) on the reader's
        # next_batch: it rolled back and took nothing; the consumer asks
        # again after a short backoff instead of stopping.
        handler = Batches()
        consumer = self.start_consumer(handler, wait=timedelta(minutes=1))
        sleeping = (
            "SELECT pid FROM pg_stat_activity"
            " WHERE application_name = 'pgq_cpp.py stream s c' AND state = 'active'"
            "   AND wait_event_type = 'Extension' AND query LIKE '%%pgq.next_batch%%'"
            "   AND query_start > %s"
        )
        epoch = datetime(2000, 1, 1, tzinfo=timezone.utc)
        pid = self.wait_for("next_batch asleep", lambda: self.admin.execute(sleeping, (epoch,)).fetchone())
        cancelled_at = self.scalar("SELECT clock_timestamp()")
        self.assertTrue(self.scalar("SELECT pg_cancel_backend(%s)", (pid[0],)))
        self.wait_for("a new next_batch", lambda: self.admin.execute(sleeping, (cancelled_at,)).fetchone())
        self.assertFalse(consumer.join(0))  # still running
        ids = S.append_many(self.admin, [{"n": 1}])
        self.wait_finished(1)
        self.assertEqual(handler.event_ids(), ids)

    def test_register_false_needs_a_registered_consumer(self) -> None:
        with self.assertRaises(errors.UndefinedObject) as raised:
            consumer = self.start_consumer(lambda batch: None, register=False)
            consumer.join(HANG)
        self.assertEqual(raised.exception.sqlstate, "42704")
        self.assertIn("register", raised.exception.diag.message_hint or "")
        # Registered beforehand, it keeps the position it has.
        self.admin.execute("SELECT pgq.register_consumer('s', 'pre')")
        before = S.append(self.admin, {"n": "before the consumer started"})
        handler = Batches()
        self.start_consumer(handler, consumer="pre", register=False)
        self.wait_finished(1, "pre")
        self.assertEqual(handler.event_ids(), [before])

    def test_registering_again_keeps_the_position(self) -> None:
        handler = Batches()
        consumer = self.start_consumer(handler)
        first = S.append(self.admin, {})
        self.wait_finished(1)
        consumer.stop()
        self.assertTrue(consumer.join(HANG))
        missed = S.append(self.admin, {"n": "while nobody reads"})
        self.start_consumer(handler)  # register=True again
        self.wait_finished(2)
        self.assertEqual(handler.event_ids(), [first, missed])

    def test_an_unknown_stream_raises_undefined_object(self) -> None:
        # Registering (the default) raises from start().
        consumer = StreamConsumer(DSN, "nope", "c", lambda batch: None)
        with self.assertRaises(errors.UndefinedObject) as raised:
            consumer.start()
        self.assertEqual(raised.exception.sqlstate, "42704")
        # Without registering: next_batch's error stops it, raised by join().
        with self.assertRaises(errors.UndefinedObject) as raised:
            self.start_consumer(lambda batch: None, stream="nope", register=False).join(HANG)
        self.assertEqual(raised.exception.sqlstate, "42704")

    def test_a_dropped_stream_stops_the_consumer_and_surfaces(self) -> None:
        consumer = self.start_consumer(lambda batch: None, wait=timedelta(seconds=1))
        self.wait_for("next_batch asleep", self.next_batch_sleeping)
        self.admin.execute("SELECT pgq.drop_stream('s')")
        with self.assertRaises(errors.UndefinedObject):
            consumer.join(HANG)

    def test_consume_grant_is_enough_and_needed(self) -> None:
        reader = self.create_role("pgq_py_stream_reader")
        with self.assertRaises(errors.InsufficientPrivilege) as raised:
            StreamConsumer(reader, S, "c", lambda batch: None).start()
        self.assertEqual(raised.exception.sqlstate, "42501")
        self.admin.execute("SELECT pgq.grant_stream('pgq_py_stream_reader', 's', 'consume')")
        handler = Batches()
        self.start_consumer(handler, conninfo=reader)
        ids = S.append_many(self.admin, [{}, {}])
        self.wait_finished(2)
        self.assertEqual(handler.event_ids(), ids)

    def test_settings_that_cannot_work_are_refused(self) -> None:
        for setting, value in (
            ("max_events", 0),
            ("wait", timedelta(0)),  # it would poll: next_batch, nothing, next_batch again
            ("wait", timedelta(seconds=-1)),
        ):
            with self.subTest(**{setting: value}):
                with self.assertRaises(ValueError):
                    StreamConsumer(DSN, "s", "c", lambda batch: None, **{setting: value})
        with self.assertRaises(TypeError):
            StreamConsumer(DSN, 7, "c", lambda batch: None)  # type: ignore[arg-type]

    def test_the_consumer_reconnects_after_losing_its_connection(self) -> None:
        handler = Batches()
        with self.assertLogs("pgq_cpp", "WARNING") as logs:
            self.start_consumer(handler, wait=timedelta(minutes=1))
            first = S.append(self.admin, {})
            self.wait_finished(1)
            self.wait_for("next_batch asleep", self.next_batch_sleeping)
            self.admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'pgq_cpp.py stream s c'"
            )
            self.wait_for("next_batch asleep again, on a new connection", self.next_batch_sleeping)
            second = S.append(self.admin, {})
            self.wait_finished(2)
        self.assertEqual(handler.event_ids(), [first, second])
        failed = "next_batch of consumer 'c' of stream 's' failed"
        self.assertTrue(any(failed in m for m in logs.output), logs.output)

    # -- stopping ---------------------------------------------------------

    def test_stop_lets_the_running_handler_finish_its_batch(self) -> None:
        started, go = threading.Event(), threading.Event()
        handled: list[int] = []

        def handler(batch: StreamBatch) -> None:
            started.set()
            go.wait(HANG)
            handled.extend(e.id for e in batch.events)

        consumer = self.start_consumer(handler)
        ids = S.append_many(self.admin, [{}, {}])
        self.assertTrue(started.wait(HANG))
        consumer.stop()
        self.assertFalse(consumer.join(0.3))  # still handling
        self.assertTrue(self.stats()["open"])
        go.set()
        self.assertTrue(consumer.join(HANG))
        self.assertEqual(handled, ids)
        self.assertEqual(self.stats(), {"pending": 0, "open": False, "finished": 2})
        # Nothing is read after stop(): a later event waits for the next reader.
        S.append(self.admin, {})
        self.assertEqual(self.stats()["pending"], 1)

    def test_stop_cancels_a_next_batch_sleeping_in_the_server(self) -> None:
        consumer = self.start_consumer(lambda batch: None, wait=timedelta(minutes=1))
        self.wait_for("next_batch asleep", self.next_batch_sleeping)
        asked = time.monotonic()
        consumer.stop()
        self.assertTrue(consumer.join(HANG))
        self.assertLess(time.monotonic() - asked, 5.0)  # not the minute it would sleep
        self.wait_for(
            "the consumer's session gone",
            lambda: self.scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'pgq_cpp.py %%'"
            )
            == 0,
        )

    def test_stop_while_a_failed_batch_waits_for_its_retry(self) -> None:
        failed = threading.Event()

        def handler(batch: StreamBatch) -> None:
            failed.set()
            raise RuntimeError("down")

        with self.assertLogs("pgq_cpp", "WARNING"):
            consumer = self.start_consumer(handler)
            S.append(self.admin, {})
            self.assertTrue(failed.wait(HANG))
            consumer.stop()
            self.assertTrue(consumer.join(HANG))
        self.assertEqual(self.stats(), {"pending": 1, "open": True, "finished": 0})

    def test_a_batch_read_as_stop_is_called_is_left_for_the_next_reader(self) -> None:
        # The race of a stop() whose cancel reaches the server just after
        # next_batch took a batch, made certain: stop() as it returns.
        self.admin.execute("SELECT pgq.register_consumer('s', 'c')")
        ids = S.append_many(self.admin, [{}, {}])
        handler = Batches()
        consumer = StreamConsumer(DSN, "s", "c", handler, register=False)
        execute = consumer._session.execute  # white box: the reader's statements

        def read_then_stop(*args: Any) -> Any:
            rows = execute(*args)
            if rows:
                consumer.stop()
            return rows

        consumer._session.execute = read_then_stop  # type: ignore[method-assign]
        consumer.start()
        self.assertTrue(consumer.join(HANG))
        self.assertEqual(handler.seen, [])
        again = Batches()
        self.start_consumer(again)
        self.wait_finished(2)
        self.assertEqual(again.event_ids(), ids)

    def test_signals_stop_run_forever_gracefully(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR))
        for sig in (signal.SIGTERM, signal.SIGINT):
            with self.subTest(signal=sig.name):
                proc = subprocess.Popen(
                    [sys.executable, "-c", CONSUMER_SCRIPT, DSN],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True, env=env,
                )
                assert proc.stdin and proc.stdout and proc.stderr
                self.addCleanup(proc.stdin.close)
                self.addCleanup(proc.stderr.close)
                self.addCleanup(proc.stdout.close)
                self.addCleanup(proc.wait)
                self.addCleanup(proc.kill)  # if the test failed before it exited
                lines: queue.Queue[str] = queue.Queue()
                threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True).start()

                self.wait_for("the consumer registered", lambda: self.next_batch_sleeping())
                event = S.append(self.admin, {})
                self.assertEqual(lines.get(timeout=HANG), f"handling {event}\n")
                proc.send_signal(sig)
                self.assertEqual(self.stats()["open"], True)  # still handling
                proc.stdin.write("\n")  # let the handler finish
                proc.stdin.close()
                status, log = proc.wait(HANG), proc.stderr.read()
                self.assertEqual(status, 0, log)
                self.assertIn(f"{sig.name}: stopping the consumer 'c' of stream 's'", log)
                self.assertEqual(lines.get(timeout=HANG), "exited\n")
                self.assertEqual(self.stats()["open"], False)  # finished
                self.assertEqual(self.stats()["pending"], 0)
