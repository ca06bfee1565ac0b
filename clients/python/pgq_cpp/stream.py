"""Appending to a stream, in the caller's transaction."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from . import tracing
from .queue import Target, execute, traced

_APPEND = "SELECT pgq.append(%s, %s"
_APPEND_MANY = "SELECT e.id FROM pgq.append_many(%s, %s::jsonb[]"
_APPEND_MANY_END = ") WITH ORDINALITY AS e(id, n) ORDER BY e.n"


class Stream:
    """A stream to append events to, by name. Holds no connection.

    ``append`` and ``append_many`` run one ``SELECT`` on the connection you
    pass and never commit or roll back: in a transaction (psycopg's default,
    or ``with conn.transaction():``) the events exist if and only if that
    transaction commits, and consumers see them from its commit on (the
    outbox: append in the transaction of the business write). On an
    autocommit connection each call commits by itself.

    Server errors are psycopg errors with the server's SQLSTATE, for example
    ``psycopg.errors.UndefinedObject`` (42704) for an unknown stream and
    ``psycopg.errors.InsufficientPrivilege`` (42501) without the ``produce``
    right; as with any failed statement, the transaction is then aborted.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Stream({self.name!r})"

    def append(
        self,
        conn: Target,
        payload: Any,
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> int:
        """Appends one event and returns its id (``pgq.append``).

        payload: anything ``json.dumps`` takes; consumers get it decoded.
        traceparent, tracestate: the event's W3C trace context (server
            3.1), handed to its consumers; a malformed one is refused by the
            server (``psycopg.errors.InvalidParameterValue``, 22023).
            Without them, and with opentelemetry installed and a current
            span that records or is valid, the call runs in a PRODUCER span
            ``send <stream>`` whose context the event takes.
        """
        params: list[Any] = [self.name, Jsonb(payload)]

        def send(traceparent: str | None, tracestate: str | None) -> int:
            sql, values = traced(_APPEND, params, traceparent, tracestate)
            return int(execute(conn, sql + ")", values, tuple_row)[0][0])

        return tracing.produce("append", self.name, traceparent, tracestate, send)

    def append_many(
        self,
        conn: Target,
        payloads: Iterable[Any],
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> list[int]:
        """Appends one event per payload in one statement
        (``pgq.append_many``), in order; returns their ids in the payloads'
        order. ``traceparent``, ``tracestate``: as for ``append``, one
        context for every event."""
        events = [Jsonb(p) for p in payloads]
        params: list[Any] = [self.name, events]

        def send(traceparent: str | None, tracestate: str | None) -> list[int]:
            sql, values = traced(_APPEND_MANY, params, traceparent, tracestate)
            return [int(r[0]) for r in execute(conn, sql + _APPEND_MANY_END, values, tuple_row)]

        return tracing.produce(
            "append_many", self.name, traceparent, tracestate, send, count=len(events)
        )
