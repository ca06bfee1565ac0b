"""A thin Python client for pgq_cpp, the job queue inside PostgreSQL.

    from pgq_cpp import Job, Queue, Stream, StreamBatch, StreamConsumer, Worker, job, list_jobs
    from pgq_cpp import QueueFull

    emails = Queue("emails")
    with conn.transaction():                 # the caller's own transaction
        conn.execute("INSERT INTO users ...")
        emails.enqueue(conn, {"to": "ann@example.com"})

    def send(job: Job) -> dict:
        ...                                  # raise Snooze / OutcomeUnknown if need be
        return {"message_id": "..."}         # kept as the job's result
    Worker("dbname=app", "emails", send, concurrency=4).run_forever()

    render = Queue("render").enqueue(conn, {"invoice": 7})
    Queue("send").enqueue(conn, {"invoice": 7}, after=[render])  # waits for render
    Worker("dbname=app", ["render", "send"], handle)  # several queues: see job.queue

    try:                                     # a queue with max_pending (server 3.1)
        emails.enqueue(autocommit_conn, {"to": "bob@example.com"}, wait_for_room=5.0)
    except QueueFull as full:                # still full after 5 s: nothing was added
        ...                                  # full.queue, str(full), full.detail
    emails.wait_for_room(conn, 1.0)          # True: below nine tenths of max_pending

    job(conn, 42)                            # a JobInfo, or None
    list_jobs(conn, "emails", state="dead")  # newest first, paged with before_id

    audit = Stream("audit")                  # streams (server 2.0): every consumer gets every event
    with conn.transaction():
        conn.execute("UPDATE accounts ...")
        audit.append(conn, {"account": 7, "op": "debit"})

    def record(batch: StreamBatch) -> None:  # idempotent per event id: a batch can come again
        for event in batch.events:
            ...                              # event.id, event.payload, event.appended_at
    StreamConsumer("dbname=app", audit, "archiver", record).run_forever()

    Queue("emails").enqueue(conn, {...}, traceparent=request_traceparent)  # W3C trace context
    job.traceparent, job.links               # in the handler; pgq_cpp.tracing parses and formats

With the ``opentelemetry`` package importable, producers take the current
span's context and the worker runs each job in a span: see
``pgq_cpp.tracing``.

Server errors are psycopg errors carrying the server's SQLSTATE
(``psycopg.errors.InsufficientPrivilege`` 42501,
``psycopg.errors.UndefinedObject`` 42704, ...), except a full queue's
refusal (53400), raised as ``QueueFull`` with the psycopg error as its
``__cause__``. Logs go to the ``pgq_cpp`` logger.
"""

import logging

from . import tracing
from .consumer import StreamBatch, StreamConsumer, StreamEvent, StreamHandler
from .jobs import JobInfo, job, list_jobs
from .queue import Queue, QueueFull
from .stream import Stream
from .worker import Handler, Job, OutcomeUnknown, Snooze, Worker

__all__ = [
    "Handler",
    "Job",
    "JobInfo",
    "OutcomeUnknown",
    "Queue",
    "QueueFull",
    "Snooze",
    "Stream",
    "StreamBatch",
    "StreamConsumer",
    "StreamEvent",
    "StreamHandler",
    "Worker",
    "job",
    "list_jobs",
    "tracing",
]
__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
