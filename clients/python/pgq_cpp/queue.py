"""Enqueueing, in the caller's transaction."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Union

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

# Where enqueue runs its statement: a connection, or a cursor of one (then
# on that cursor's connection, leaving the cursor's own results alone).
Target = Union["psycopg.Connection[Any]", "psycopg.Cursor[Any]"]

# run_at None is the functions' own default, now() (the transaction's start).
_RUN_AT = "COALESCE(%s::timestamptz, pg_catalog.now())"
_ENQUEUE = f"SELECT pgq.enqueue(%s, %s, {_RUN_AT}, %s, %s, %s, %s)"
_ENQUEUE_MANY = (
    f"SELECT e.id FROM pgq.enqueue_many(%s, %s, {_RUN_AT}, %s)"
    " WITH ORDINALITY AS e(id, n) ORDER BY e.n"
)


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
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

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
    ) -> int:
        """Adds one job and returns its id (``pgq.enqueue``).

        payload: anything ``json.dumps`` takes; handlers get it decoded.
        run_at: not before this time (use an aware datetime); default now.
        priority: higher runs first.
        dedupe_key: while a pending or running job of this queue has the
            key, that job's id is returned and nothing is added.
        max_attempts: overrides the queue's.
        group_key: jobs sharing it run one at a time, in enqueue order.
        """
        row = self._run(
            conn,
            _ENQUEUE,
            (self.name, Jsonb(payload), run_at, priority, dedupe_key, max_attempts, group_key),
        )
        return int(row[0][0])

    def enqueue_many(
        self,
        conn: Target,
        payloads: Iterable[Any],
        *,
        run_at: datetime | None = None,
        priority: int = 0,
    ) -> list[int]:
        """Adds one job per payload in one statement (``pgq.enqueue_many``);
        returns their ids in the payloads' order."""
        rows = self._run(
            conn, _ENQUEUE_MANY, (self.name, [Jsonb(p) for p in payloads], run_at, priority)
        )
        return [int(r[0]) for r in rows]

    @staticmethod
    def _run(target: Target, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        # Our own cursor with tuple rows, whatever row factory the caller uses.
        conn = target if isinstance(target, psycopg.Connection) else target.connection
        with conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(sql, params)
            return cur.fetchall()
