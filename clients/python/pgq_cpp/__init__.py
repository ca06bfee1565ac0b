"""A thin Python client for pgq_cpp, the job queue inside PostgreSQL.

    from pgq_cpp import Job, Queue, Worker, job, list_jobs

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

    job(conn, 42)                            # a JobInfo, or None
    list_jobs(conn, "emails", state="dead")  # newest first, paged with before_id

Server errors are psycopg errors carrying the server's SQLSTATE
(``psycopg.errors.InsufficientPrivilege`` 42501,
``psycopg.errors.UndefinedObject`` 42704, ...). Logs go to the ``pgq_cpp``
logger.
"""

import logging

from .jobs import JobInfo, job, list_jobs
from .queue import Queue
from .worker import Handler, Job, OutcomeUnknown, Snooze, Worker

__all__ = [
    "Handler",
    "Job",
    "JobInfo",
    "OutcomeUnknown",
    "Queue",
    "Snooze",
    "Worker",
    "job",
    "list_jobs",
]
__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
