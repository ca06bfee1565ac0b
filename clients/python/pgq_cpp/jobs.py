"""Looking at jobs: one by id, or a queue's page by page (``pgq.job``,
``pgq.list_jobs``)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from psycopg.rows import class_row

from .queue import Target, execute


@dataclass
class JobInfo:
    """One row of ``pgq.job_info``: a job wherever it is in its life.

    ``state`` is ``'scheduled'``, ``'ready'``, ``'waiting'`` (behind its
    group's head, or for its parents: ``open_parents`` counts those not yet
    done), ``'running'``, ``'done'`` (kept only by queues with
    ``keep_completed``), ``'dead'`` or ``'cancelled'``. A role with only the
    ``admin`` right reads ``payload``, ``progress`` and ``result`` as None.
    """

    id: int
    queue: str
    state: str
    attempt: int
    max_attempts: int
    priority: int
    group_key: str | None
    dedupe_key: str | None
    run_at: datetime | None
    enqueued_at: datetime | None
    claimed_at: datetime | None
    lease_until: datetime | None
    finished_at: datetime | None
    progress: Any  # decoded JSON, as the handler last sent it
    result: Any  # decoded JSON, as the handler returned it
    last_error: str | None
    open_parents: int | None  # parents not yet done; None unless waiting for them
    payload: Any
    # 'exhausted', 'expired', 'cancelled' or 'dependency_failed' for a dead
    # (or cancelled) job, else None (pgq_cpp 3.0)
    dead_reason: str | None
    # Its W3C trace context (pgq_cpp 3.1): the trace id (32 hex digits) and
    # the stored traceparent[;tracestate]; None when untraced. A role with
    # only admin reads trace_context as None, as the payload.
    trace_id: str | None
    trace_context: str | None


# The columns by name, not *: a column a later release adds to job_info
# must not break this client's dataclass.
_COLUMNS = ", ".join(f.name for f in fields(JobInfo))
_JOB = f"SELECT {_COLUMNS} FROM pgq.job(%s::bigint)"
_LIST_JOBS = f"SELECT {_COLUMNS} FROM pgq.list_jobs(%s, %s::text, %s::integer, %s::bigint)"


def job(conn: Target, id: int) -> JobInfo | None:
    """The job ``id`` (``pgq.job``), or None when there is none: it never
    existed, or it finished and its history is gone (a completed job is
    kept only by a queue with ``keep_completed``). Needs a right on its
    queue. Runs on ``conn`` (a connection, or a cursor of one) and never
    commits."""
    rows = execute(conn, _JOB, (id,), class_row(JobInfo))
    return rows[0] if rows else None


def list_jobs(
    conn: Target,
    queue: str,
    *,
    state: str | None = None,
    max: int = 100,
    before_id: int | None = None,
) -> list[JobInfo]:
    """Up to ``max`` jobs of ``queue``, newest first (``pgq.list_jobs``);
    only those in ``state`` if given. The next page: ``before_id=`` the last
    id of this one; an empty list ends it. Needs a right on the queue."""
    return execute(conn, _LIST_JOBS, (queue, state, max, before_id), class_row(JobInfo))
