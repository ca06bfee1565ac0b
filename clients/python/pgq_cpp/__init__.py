"""A thin Python client for pgq_cpp, the job queue inside PostgreSQL.

    from pgq_cpp import Queue, Worker, Job

    emails = Queue("emails")
    with conn.transaction():                 # the caller's own transaction
        conn.execute("INSERT INTO users ...")
        emails.enqueue(conn, {"to": "ann@example.com"})

    def send(job: Job) -> None: ...
    Worker("dbname=app", "emails", send, concurrency=4).run_forever()

Server errors are psycopg errors carrying the server's SQLSTATE
(``psycopg.errors.InsufficientPrivilege`` 42501,
``psycopg.errors.UndefinedObject`` 42704, ...). Logs go to the ``pgq_cpp``
logger.
"""

import logging

from .queue import Queue
from .worker import Handler, Job, Worker

__all__ = ["Handler", "Job", "Queue", "Worker"]
__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
