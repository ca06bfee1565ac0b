"""Enqueueing, in the caller's transaction."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar, Union

import psycopg
from psycopg.rows import RowFactory, tuple_row
from psycopg.types.json import Jsonb

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
_ENQUEUE_MANY = f"SELECT e.id FROM pgq.enqueue_many(%s, %s, {_RUN_AT}, %s"
_ENQUEUE_MANY_END = ") WITH ORDINALITY AS e(id, n) ORDER BY e.n"


def _keys(keys: str | Iterable[str | None]) -> list[str | None]:
    """Keys of enqueue_many's jobs: a string is one for every job."""
    return [keys] if isinstance(keys, str) else list(keys)


def _parents(after: Iterable[int]) -> list[int]:
    """``after`` as a list for ``%s::bigint[]``; a lone id or a string
    (which would pass as a list of characters) is refused here."""
    if isinstance(after, (int, str, bytes)):
        raise TypeError(f"after takes a list of job ids, not {type(after).__name__}")
    return list(after)


def execute(target: Target, sql: str, params: Any, rows: RowFactory[R]) -> list[R]:
    """Runs one statement on ``target`` with our own cursor and row factory,
    whatever row factory the caller uses; never commits."""
    conn = target if isinstance(target, psycopg.Connection) else target.connection
    with conn.cursor(row_factory=rows) as cur:
        cur.execute(sql, params)
        return cur.fetchall()


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
        dedupe_for: timedelta | None = None,
        on_duplicate: str = "ignore",
        after: Iterable[int] | None = None,
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
        return int(execute(conn, sql + ")", params, tuple_row)[0][0])

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
    ) -> list[int]:
        """Adds one job per payload in one statement (``pgq.enqueue_many``);
        returns their ids in the payloads' order. ``after``: as for
        ``enqueue``; every job waits for the same parents. ``group_keys``,
        ``dedupe_keys`` (pgq_cpp 3.1): one key (a string) for every job, or
        one per job (``None``: that job has none); a taken dedupe key gives
        its holder's id in that job's place, as ``enqueue`` does."""
        sql = _ENQUEUE_MANY
        params: list[Any] = [self.name, [Jsonb(p) for p in payloads], run_at, priority]
        if after is not None:
            sql += _AFTER
            params.append(_parents(after))
        if group_keys is not None:
            sql += _GROUP_KEYS
            params.append(_keys(group_keys))
        if dedupe_keys is not None:
            sql += _DEDUPE_KEYS
            params.append(_keys(dedupe_keys))
        return [int(r[0]) for r in execute(conn, sql + _ENQUEUE_MANY_END, params, tuple_row)]
