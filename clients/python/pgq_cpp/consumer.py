"""StreamConsumer: reads a stream batch by batch and hands each batch to a handler.

How it runs (one thread, one connection):

- ``start()`` registers the consumer (``pgq.register_consumer``) unless
  ``register=False``: from that commit on, it reads every event whose
  transaction commits. Registering again is harmless (the position is kept).
- The **reader** thread loops ``pgq.next_batch_traced(stream, consumer,
  max_events, wait)`` (``pgq.next_batch`` with each event's trace context;
  against a catalog before 3.1, which has none, ``pgq.next_batch``). With
  opentelemetry importable each batch is handled in a CONSUMER span
  ``process <stream>`` (``pgq_cpp.tracing``). The server holds that statement until an append to
  the stream commits or ``wait`` ends, so an idle consumer is one sleeping
  backend and a commit reaches the handler within milliseconds: there is no
  polling here. A batch with events goes to ``handler(batch)`` in the same
  thread; when the handler returns, ``pgq.finish_batch(batch.id)`` moves the
  consumer past it.
- A handler that raises an ``Exception`` does not finish the batch: after a
  backoff (0.1 s doubling to 10 s, reset by a handler that returns)
  ``next_batch`` returns the same batch again (same id, same events) and the
  handler gets it again, until it returns. Delivery is at-least-once: a
  crash between the handler's end and ``finish_batch`` also brings the batch
  back, so the handler must be idempotent per event id. Any other
  ``BaseException`` (``SystemExit``, ``KeyboardInterrupt``) stops the
  consumer, the batch unfinished, and is raised by ``join()``.
- ``stop()`` (or SIGTERM/SIGINT under ``run_forever``) ends the loop after
  the current batch: a running handler finishes and its batch is finished;
  a ``next_batch`` waiting in the server is cancelled (it rolls back and
  takes nothing; the connection then runs nothing else); a batch that
  ``next_batch`` returned just before the cancel reached it is not handed to
  the handler but left open, and comes again to the next reader.
- A lost connection is opened again on next use: ``next_batch`` is retried
  with backoff (0.1 s doubling to 10 s) until it works or the consumer
  stops, as the Worker's claim is; ``finish_batch`` likewise, until it works
  or ``stop()`` is called (the batch then comes again). A ``finish_batch``
  retried after its first try did commit finds the batch finished (55000),
  which is logged, not raised.
- Any other server error (``UndefinedObject`` for an unknown stream or
  consumer, ``InsufficientPrivilege`` without the ``consume`` right, ...)
  stops the consumer gracefully and is raised by ``join()``/``run()`` (by
  ``start()`` when registering fails).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Union

import psycopg
from psycopg.rows import tuple_row

from . import tracing
from ._session import FIRST_RETRY, JOIN_STEP, MAX_RETRY, Session, run_until_signalled
from .stream import Stream

_log = logging.getLogger(__name__)

_REGISTER = "SELECT pgq.register_consumer(%s, %s)"
# In the function's order: grouped by transaction, each one's in append
# order. next_batch_traced (3.1): next_batch's columns, then each event's
# trace context.
_NEXT_BATCH_TRACED = (
    "SELECT b.batch_id, b.event_id, b.payload, b.appended_at, b.traceparent, b.tracestate"
    "  FROM pgq.next_batch_traced(%s, %s, %s, %s::interval)"
    "       WITH ORDINALITY AS b(batch_id, event_id, payload, appended_at, traceparent,"
    "                            tracestate, n)"
    " ORDER BY b.n"
)
# A catalog before 3.1 has no next_batch_traced: events without contexts.
_NEXT_BATCH = (
    "SELECT b.batch_id, b.event_id, b.payload, b.appended_at, NULL::text, NULL::text"
    "  FROM pgq.next_batch(%s, %s, %s, %s::interval)"
    "       WITH ORDINALITY AS b(batch_id, event_id, payload, appended_at, n)"
    " ORDER BY b.n"
)
_FINISH_BATCH = "SELECT pgq.finish_batch(%s)"


@dataclass
class StreamEvent:
    """One event of a batch, as ``pgq.next_batch`` returned it."""

    id: int  # the event id, from pgq.append: the key that makes a handler idempotent
    payload: Any  # the decoded JSON
    appended_at: datetime
    # The W3C trace context it was appended (published) with; None when
    # untraced, or from a server before 3.1.
    traceparent: str | None = None
    tracestate: str | None = None


@dataclass
class StreamBatch:
    """What the handler gets: one batch of a consumer, its events in commit
    order (grouped by transaction, each one's in append order).

    ``id`` is the batch id ``pgq.finish_batch`` takes. A batch the handler
    did not get through (it raised, or the process died before
    ``finish_batch``) comes again with the same id and the same events.
    """

    id: int
    stream: str
    consumer: str
    events: list[StreamEvent] = field(default_factory=list)


StreamHandler = Callable[[StreamBatch], object]

# A stream for the consumer: its name or a Stream.
StreamRef = Union[str, Stream]


class StreamConsumer:
    """Runs ``handler(batch)`` on the batches of ``consumer`` on ``stream``, one at a time.

    conninfo: a libpq connection string; the role needs the ``consume``
        right on the stream (``pgq.grant_stream(role, stream, 'consume')``).
    stream: a stream's name or a ``Stream``.
    consumer: the consumer's name: its position in the stream. Consumers of
        different names each get every event; two processes under one name
        share its position (and would get the same open batch).
    handler: called in the consumer's thread with a ``StreamBatch``;
        returning finishes the batch (the return value is ignored); raising
        an ``Exception`` leaves it open: it comes again after a backoff.
        Delivery is at-least-once: handlers must be idempotent per event id.
    max_events: at most this many events per batch (1 to 100000; the open
        batch comes again as it was).
    wait: how long one ``next_batch`` sleeps in the server when there is
        nothing to read (positive: the next one follows at once). Keep it
        below the role's ``statement_timeout``.
    register: register the consumer at ``start()`` (a consumer registered
        already keeps its position). False: it must be registered already,
        or ``join()`` raises ``UndefinedObject``.

    One connection, ``application_name`` ``pgq_cpp.py stream <stream>
    <consumer>``. ``start()``/``stop()``/``join()``, or ``run()``, or
    ``run_forever()``. A StreamConsumer runs once.
    """

    def __init__(
        self,
        conninfo: str,
        stream: StreamRef,
        consumer: str,
        handler: StreamHandler,
        *,
        max_events: int = 1000,
        wait: timedelta = timedelta(seconds=5),
        register: bool = True,
    ) -> None:
        name = stream.name if isinstance(stream, Stream) else stream
        if not isinstance(name, str):
            raise TypeError(f"a stream is a name or a Stream, not {type(stream).__name__}")
        if not isinstance(consumer, str):
            raise TypeError(f"a consumer is a name, not {type(consumer).__name__}")
        if max_events < 1:
            raise ValueError("max_events must be at least 1")
        if wait <= timedelta(0):
            # A next_batch that never waits would return at once, again and
            # again: the consumer would poll the server in a busy loop.
            raise ValueError("wait must be positive")
        self.stream = name
        self.consumer = consumer
        self._handler = handler
        self._max_events = max_events
        self._wait = wait
        self._register = register
        self._what = f"consumer {consumer!r} of stream {name!r}"  # for the log
        self._session = Session(conninfo, f"pgq_cpp.py stream {name} {consumer}")
        self._next_batch_sql = _NEXT_BATCH_TRACED
        self._reader = threading.Thread(target=self._main, name=f"pgq-stream-{name}-{consumer}")
        # Guards _fetching. Reentrant: stop() may run in a signal handler on
        # a thread that holds it.
        self._state = threading.RLock()
        self._stopping = threading.Event()
        self._fetching = False
        self._error: BaseException | None = None

    # -- control ----------------------------------------------------------

    def start(self) -> None:
        """Registers the consumer (unless ``register=False``), then starts
        reading in a background thread. A server error while registering
        (unknown stream, no ``consume`` right) is raised here."""
        if self._register:
            try:
                added = self._session.execute(_REGISTER, (self.stream, self.consumer), tuple_row)
            except BaseException:
                self._session.close()
                raise
            _log.info("%s: %s", self._what, "registered" if added[0][0] else "registered already")
        _log.info("%s starting", self._what)
        self._reader.start()

    def stop(self) -> None:
        """Asks the consumer to stop; returns at once. Safe from any thread
        and from a signal handler. A running handler finishes and its batch
        is finished; nothing is read after it."""
        self._stopping.set()
        self._interrupt_fetch()

    def join(self, timeout: float | None = None) -> bool:
        """Waits for the consumer to end; False if ``timeout`` seconds passed
        first. Raises the error that stopped the consumer, if one did."""
        end = None if timeout is None else time.monotonic() + timeout
        while self._reader.is_alive():
            # A stop() between the reader's last look and its next_batch
            # reaching the server cancelled nothing: cancel again.
            self._interrupt_fetch()
            step = JOIN_STEP if end is None else min(JOIN_STEP, end - time.monotonic())
            if step <= 0:
                return False
            self._reader.join(step)
        if self._error is not None:
            raise self._error
        return True

    def run(self) -> None:
        """start() and join(): returns once stopped."""
        self.start()
        self.join()

    def run_forever(self) -> None:
        """run() until SIGTERM or SIGINT, which stop the consumer gracefully.
        Call it from the main thread (Python delivers signals there)."""
        run_until_signalled(self.run, self.stop, f"the {self._what}", _log)

    # -- reader thread ----------------------------------------------------

    def _main(self) -> None:
        try:
            self._read_until_stopped()
        except BaseException as exc:  # a server error other than a lost connection
            self._abort(exc)
        finally:
            self._session.close()
            _log.info("%s stopped", self._what)

    def _read_until_stopped(self) -> None:
        reconnect = FIRST_RETRY  # after a failed next_batch
        again = FIRST_RETRY  # after a failed handler
        while not self._stopping.is_set():
            try:
                batch = self._next_batch()
            except psycopg.OperationalError as exc:
                if self._stopping.is_set():
                    return  # our cancel: the next_batch rolled back, took nothing
                _log.warning(
                    "next_batch of %s failed (%s); retrying in %.1f s", self._what, exc, reconnect
                )
                self._stopping.wait(reconnect)
                reconnect = min(reconnect * 2, MAX_RETRY)
                continue
            reconnect = FIRST_RETRY
            if batch is None:
                continue  # nothing within wait
            if self._stopping.is_set():
                # Returned after stop() (its cancel came too late): left
                # open, it comes again to the next reader.
                _log.info("batch %d: read after stop(); left for the next reader", batch.id)
                return
            if self._process(batch):
                again = FIRST_RETRY
            else:
                self._stopping.wait(again)
                again = min(again * 2, MAX_RETRY)

    def _next_batch(self) -> StreamBatch | None:
        with self._state:
            if self._stopping.is_set():
                return None
            self._fetching = True
        try:
            params = (self.stream, self.consumer, self._max_events, self._wait)
            try:
                rows = self._session.execute(self._next_batch_sql, params, tuple_row)
            except psycopg.errors.UndefinedFunction:
                if self._next_batch_sql is not _NEXT_BATCH_TRACED:
                    raise
                # A catalog before 3.1 (the call failed at once, took nothing).
                _log.warning(
                    "%s: the server has no pgq.next_batch_traced (pgq_cpp before 3.1); reading"
                    " with pgq.next_batch, without trace contexts",
                    self._what,
                )
                self._next_batch_sql = _NEXT_BATCH
                rows = self._session.execute(self._next_batch_sql, params, tuple_row)
        finally:
            with self._state:
                self._fetching = False
        if not rows:
            return None
        events = [StreamEvent(*row[1:]) for row in rows]
        return StreamBatch(rows[0][0], self.stream, self.consumer, events)

    def _interrupt_fetch(self) -> None:
        with self._state:
            fetching = self._fetching and self._stopping.is_set()
        if fetching:
            self._session.cancel()

    def _process(self, batch: StreamBatch) -> bool:
        """Handles the batch and, if the handler returned, finishes it, in a
        CONSUMER span ``process <stream>`` when opentelemetry imports: child
        of the event's context for a batch of one, else a new trace linked
        to each traced event's (at most 128). Whether the handler returned."""
        events = batch.events
        parent = (events[0].traceparent, events[0].tracestate) if len(events) == 1 else None
        links = [e.traceparent for e in events if e.traceparent] if parent is None else []
        attributes = {
            "messaging.batch.message_count": len(events),
            "messaging.consumer.group.name": self.consumer,
            "pgq.batch_id": batch.id,
        }
        with tracing.process(self.stream, parent, links, attributes) as span:
            try:
                error = self._handle(batch)
                if error is None:
                    self._finish(batch)
            except BaseException as exc:  # a handler's BaseException, a server error
                span.finish("failed", exc)
                raise
            span.finish("failed" if error else "finished", error)
        return error is None

    def _handle(self, batch: StreamBatch) -> Exception | None:
        """Runs the handler; what it raised, None when it returned."""
        try:
            self._handler(batch)
        except Exception as exc:
            _log.warning(
                "batch %d (%d event(s)) of %s: the handler raised %s; the batch is not finished"
                " and comes again",
                batch.id,
                len(batch.events),
                self._what,
                type(exc).__name__,
                exc_info=exc,
            )
            return exc
        return None

    def _finish(self, batch: StreamBatch) -> None:
        """``pgq.finish_batch``, retried after a lost connection until it
        works or the consumer stops. Raises other server errors."""
        delay = FIRST_RETRY
        tries = 0
        while True:
            tries += 1
            try:
                self._session.execute(_FINISH_BATCH, (batch.id,), tuple_row)
                return
            except psycopg.errors.ObjectNotInPrerequisiteState as exc:  # 55000
                if tries > 1:
                    _log.info("batch %d: finished by the try before the connection went", batch.id)
                else:
                    _log.warning("batch %d: %s (another reader as %s?)", batch.id, exc, self._what)
                return
            except psycopg.OperationalError as exc:
                if self._stopping.is_set():
                    _log.warning(
                        "batch %d: finish_batch failed (%s); stopping: the batch comes again",
                        batch.id,
                        exc,
                    )
                    return
                _log.warning(
                    "batch %d: finish_batch failed (%s); retrying in %.1f s", batch.id, exc, delay
                )
                self._stopping.wait(delay)
                delay = min(delay * 2, MAX_RETRY)

    # -- errors -----------------------------------------------------------

    def _abort(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        _log.error("%s stops: %s", self._what, exc)
        self.stop()
