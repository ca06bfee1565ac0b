"""Enqueueing, in the caller's transaction; a queue that is full (its
``max_pending``, server 3.1) refuses with ``QueueFull``."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar, Union

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import RowFactory, tuple_row
from psycopg.types.json import Jsonb

from . import tracing

# Where a statement runs: a connection, or a cursor of one (then on that
# cursor's connection, leaving the cursor's own results alone).
Target = Union["psycopg.Connection[Any]", "psycopg.Cursor[Any]"]

R = TypeVar("R")

# run_at None is the functions' own default, now() (the transaction's start).
_RUN_AT = "COALESCE(%s::timestamptz, pg_catalog.now())"
_ENQUEUE = f"SELECT pgq.enqueue(%s, %s, {_RUN_AT}, %s, %s, %s, %s"
# The 1.2 arguments are named only when used, so that a producer on this
# client keeps working against a server not yet updated to 1.2.
_DEDUPE_FOR = ", dedupe_for => %s::interval"
_ON_DUPLICATE = ", on_duplicate => %s::text"
_AFTER = ", after => %s::bigint[]"
_GROUP_KEYS = ", group_keys => %s::text[]"
_DEDUPE_KEYS = ", dedupe_keys => %s::text[]"
# The trace context (3.1, ADR 0030), named only when there is one: an
# untraced call is the SQL of before.
_TRACEPARENT = ", traceparent => %s::text"
_TRACESTATE = ", tracestate => %s::text"
_ENQUEUE_MANY = f"SELECT e.id FROM pgq.enqueue_many(%s, %s, {_RUN_AT}, %s"
_ENQUEUE_MANY_END = ") WITH ORDINALITY AS e(id, n) ORDER BY e.n"
_WAIT_FOR_ROOM = "SELECT pgq.wait_for_room(%s, %s::interval)"

# A producer refused by a queue's max_pending: SQLSTATE 53400
# (configuration_limit_exceeded) with this message. The server raises 53400
# for other limits too (its shared memory's), which stay psycopg errors.
_FULL_SQLSTATE = "53400"
_FULL_MESSAGE = re.compile(r'queue ".*" is full')
# enqueue(wait_for_room=...): a retry refused although the wait found room
# (a batch larger than the room below the low-water mark, or another
# producer first) waits this long before the next wait, doubling to the cap.
_FIRST_PAUSE = 0.05
_MAX_PAUSE = 1.0


def _keys(keys: str | Iterable[str | None]) -> list[str | None]:
    """Keys of enqueue_many's jobs: a string is one for every job."""
    return [keys] if isinstance(keys, str) else list(keys)


def _parents(after: Iterable[int]) -> list[int]:
    """``after`` as a list for ``%s::bigint[]``; a lone id or a string
    (which would pass as a list of characters) is refused here."""
    if isinstance(after, (int, str, bytes)):
        raise TypeError(f"after takes a list of job ids, not {type(after).__name__}")
    return list(after)


def traced(
    sql: str, params: list[Any], traceparent: str | None, tracestate: str | None
) -> tuple[str, list[Any]]:
    """``sql`` and ``params`` with the trace context's named arguments
    added, those that are not None."""
    if traceparent is not None:
        sql += _TRACEPARENT
        params = [*params, traceparent]
    if tracestate is not None:
        sql += _TRACESTATE
        params = [*params, tracestate]
    return sql, params


def _connection(target: Target) -> psycopg.Connection[Any]:
    return target if isinstance(target, psycopg.Connection) else target.connection


def execute(target: Target, sql: str, params: Any, rows: RowFactory[R]) -> list[R]:
    """Runs one statement on ``target`` with our own cursor and row factory,
    whatever row factory the caller uses; never commits."""
    with _connection(target).cursor(row_factory=rows) as cur:
        cur.execute(sql, params)
        return cur.fetchall()


class QueueFull(Exception):
    """A producer's call refused because the queue is full (server 3.1):
    it would take the queue past its ``max_pending`` (scheduled, waiting,
    ready and running jobs, plus those of producers in flight). The whole
    call was refused: nothing of it was kept.

    ``str(exc)`` is the server's message (``queue "emails" is full``);
    ``queue`` the queue's name; ``detail`` and ``hint`` the server's (how
    many jobs it holds, how many the call adds); ``sqlstate`` is
    ``'53400'``; ``__cause__`` the psycopg error
    (``psycopg.errors.ConfigurationLimitExceeded``). As after any failed
    statement, the transaction the call ran in is aborted.
    """

    sqlstate = _FULL_SQLSTATE

    def __init__(
        self, queue: str, message: str, detail: str | None = None, hint: str | None = None
    ) -> None:
        super().__init__(message)
        self.queue = queue
        self.detail = detail
        self.hint = hint


def _queue_full(exc: psycopg.Error, queue: str) -> QueueFull | None:
    """``exc`` as a QueueFull, if it is the server's refusal of a full queue."""
    if exc.sqlstate != _FULL_SQLSTATE:
        return None
    message = exc.diag.message_primary or str(exc)
    if not _FULL_MESSAGE.match(message):
        return None
    return QueueFull(queue, message, exc.diag.message_detail, exc.diag.message_hint)


class Queue:
    """A queue to send jobs to, by name. Holds no connection.

    ``enqueue`` and ``enqueue_many`` run one ``SELECT`` on the connection you
    pass and never commit or roll back: in a transaction (psycopg's default,
    or ``with conn.transaction():``) the jobs exist if and only if that
    transaction commits. On an autocommit connection each call commits by
    itself.

    Server errors are psycopg errors with the server's SQLSTATE, for example
    ``psycopg.errors.UndefinedObject`` (42704) for an unknown queue and
    ``psycopg.errors.InsufficientPrivilege`` (42501) without the ``produce``
    right; as with any failed statement, the transaction is then aborted.
    A queue with ``max_pending`` that the call would take past it refuses
    the whole call with ``QueueFull`` (server 3.1); ``wait_for_room=``
    waits for room and tries again, only where the client owns the
    transaction (see ``enqueue``).
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    def wait_for_room(self, conn: Target, timeout_seconds: float = 0.0) -> bool:
        """Whether the queue has room (``pgq.wait_for_room``, server 3.1):
        True at once when it has no ``max_pending`` or holds fewer
        unfinished jobs than its low-water mark (nine tenths of
        ``max_pending``, rounded up); otherwise the server sleeps until
        completions take it below that mark, or ``timeout_seconds`` have
        passed, and answers whether it is below the mark now. Runs on
        ``conn`` (a connection or a cursor) and never commits; it holds that
        connection while it waits. Needs the ``produce`` or ``admin`` right
        (42501); an unknown queue is 42704."""
        params = (self.name, timedelta(seconds=timeout_seconds))
        return bool(execute(conn, _WAIT_FOR_ROOM, params, tuple_row)[0][0])

    def _refusing(self, run: Callable[[], R]) -> R:
        """``run()``, with the refusal of a full queue raised as QueueFull."""
        try:
            return run()
        except psycopg.Error as exc:
            full = _queue_full(exc, self.name)
            if full is None:
                raise
            raise full from exc

    def _produce(self, conn: Target, run: Callable[[], R], wait_for_room: float | None) -> R:
        """``run()`` (one producing statement), and with ``wait_for_room``
        seconds, while the queue refuses it as full, waits for room and runs
        it again, until that time has passed. Only when the client owns the
        transaction the statement runs in: on an autocommit connection, or
        on one that was in no transaction (the transaction its statement
        begins holds nothing of the caller's, and is rolled back before the
        wait). In the caller's transaction the refusal has aborted it:
        QueueFull at once."""
        if wait_for_room is None:
            return self._refusing(run)
        if wait_for_room < 0:
            raise ValueError("wait_for_room must not be negative")
        connection = _connection(conn)
        owned = connection.info.transaction_status == TransactionStatus.IDLE
        deadline = time.monotonic() + wait_for_room
        pause = 0.0
        while True:
            try:
                return self._refusing(run)
            except QueueFull:
                if not owned or time.monotonic() >= deadline:
                    raise
                self._end_own_transaction(connection)
                if pause:
                    time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                    pause = min(pause * 2, _MAX_PAUSE)
                else:
                    pause = _FIRST_PAUSE
                room = self.wait_for_room(conn, max(0.0, deadline - time.monotonic()))
                self._end_own_transaction(connection)
                if not room:
                    return self._refusing(run)  # one last try: room below the mark, maybe

    @staticmethod
    def _end_own_transaction(connection: psycopg.Connection[Any]) -> None:
        """Rolls back the transaction a statement of ours began on a
        connection that was in none (not autocommit); nothing of the
        caller's is in it."""
        if not connection.autocommit:
            connection.rollback()

    def enqueue(
        self,
        conn: Target,
        payload: Any,
        *,
        run_at: datetime | None = None,
        priority: int = 0,
        dedupe_key: str | None = None,
        max_attempts: int | None = None,
        group_key: str | None = None,
        dedupe_for: timedelta | None = None,
        on_duplicate: str = "ignore",
        after: Iterable[int] | None = None,
        wait_for_room: float | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> int:
        """Adds one job and returns its id (``pgq.enqueue``).

        payload: anything ``json.dumps`` takes; handlers get it decoded.
        run_at: not before this time (use an aware datetime); default now.
        priority: higher runs first.
        dedupe_key: while a pending or running job of this queue has the
            key, nothing is added (see ``on_duplicate``).
        max_attempts: overrides the queue's.
        group_key: jobs sharing it run one at a time, in enqueue order.
        dedupe_for: the key also stays taken this long after its job
            finished (done or dead): at most one job per key and period.
        on_duplicate: when the key is taken, ``'ignore'`` returns the
            holder's id; ``'replace'`` gives a holder that has not started
            this payload, ``run_at`` and priority and returns its id, and
            queues a new job behind a holder that is running.
        after: ids of jobs (of any queue) this one waits for: it stays
            ``'waiting'`` until every one of them is done, and goes to
            dead-letter (reason ``'dependency_failed'``) if one of them
            dies or is cancelled. Enqueue the parents first, in this
            transaction or before; an empty list means no dependencies.
        wait_for_room: seconds. A full queue (its ``max_pending``) raises
            ``QueueFull``; with this, the call waits for room instead
            (``wait_for_room()``) and tries again, until these seconds have
            passed, then raises ``QueueFull``. Only where the call owns its
            transaction: an autocommit connection, or one in no transaction
            (a refused try's transaction is rolled back; the job of the try
            that works is left in an open transaction, as usual, for you to
            commit). In your own transaction (``with conn.transaction():``,
            or after other statements) a refusal aborts it, so QueueFull
            is raised at once, without waiting.
        traceparent, tracestate: the job's W3C trace context (server 3.1),
            kept across its retries and handed to its worker; a malformed
            one is refused by the server
            (``psycopg.errors.InvalidParameterValue``, 22023). Without
            them, and with opentelemetry installed and a current span that
            records or is valid, the call runs in a PRODUCER span ``send
            <queue>`` whose context the job takes (``pgq_cpp.tracing``).
        """
        sql = _ENQUEUE
        params: list[Any] = [
            self.name, Jsonb(payload), run_at, priority, dedupe_key, max_attempts, group_key,
        ]
        if dedupe_for is not None:
            sql += _DEDUPE_FOR
            params.append(dedupe_for)
        if on_duplicate != "ignore":
            sql += _ON_DUPLICATE
            params.append(on_duplicate)
        if after is not None:
            sql += _AFTER
            params.append(_parents(after))

        def send(traceparent: str | None, tracestate: str | None) -> int:
            statement, values = traced(sql, params, traceparent, tracestate)
            statement += ")"
            return self._produce(
                conn, lambda: int(execute(conn, statement, values, tuple_row)[0][0]), wait_for_room
            )

        return tracing.produce("enqueue", self.name, traceparent, tracestate, send)

    def enqueue_many(
        self,
        conn: Target,
        payloads: Iterable[Any],
        *,
        run_at: datetime | None = None,
        priority: int = 0,
        after: Iterable[int] | None = None,
        group_keys: str | Iterable[str | None] | None = None,
        dedupe_keys: str | Iterable[str | None] | None = None,
        wait_for_room: float | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> list[int]:
        """Adds one job per payload in one statement (``pgq.enqueue_many``);
        returns their ids in the payloads' order. ``after``: as for
        ``enqueue``; every job waits for the same parents. ``group_keys``,
        ``dedupe_keys`` (pgq_cpp 3.1): one key (a string) for every job, or
        one per job (``None``: that job has none); a taken dedupe key gives
        its holder's id in that job's place, as ``enqueue`` does. A full
        queue refuses all of them (``QueueFull``, nothing kept);
        ``wait_for_room``: as for ``enqueue``. ``traceparent``,
        ``tracestate``: as for ``enqueue``, one context for every job."""
        sql = _ENQUEUE_MANY
        jobs = [Jsonb(p) for p in payloads]
        params: list[Any] = [self.name, jobs, run_at, priority]
        if after is not None:
            sql += _AFTER
            params.append(_parents(after))
        if group_keys is not None:
            sql += _GROUP_KEYS
            params.append(_keys(group_keys))
        if dedupe_keys is not None:
            sql += _DEDUPE_KEYS
            params.append(_keys(dedupe_keys))

        def send(traceparent: str | None, tracestate: str | None) -> list[int]:
            statement, values = traced(sql, params, traceparent, tracestate)
            statement += _ENQUEUE_MANY_END
            return self._produce(
                conn,
                lambda: [int(r[0]) for r in execute(conn, statement, values, tuple_row)],
                wait_for_room,
            )

        return tracing.produce(
            "enqueue_many", self.name, traceparent, tracestate, send, count=len(jobs)
        )
