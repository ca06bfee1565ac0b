"""The welcome email: the signup and its email job commit together.

`sign_up` inserts the user, enqueues the welcome email and charges the first
month in ONE transaction: a declined card rolls back the user and the email
alike, so nobody is welcomed to an account that does not exist. A worker
then sends each email through a (simulated) mail API, records it in
`welcome_emails_sent`, and returns the API's message id: the job's result.

When the mail API times out, nobody knows whether the email went out. The
handler raises OutcomeUnknown: the job is neither failed nor retried at once
but left to its lease, and the retry sends with the same idempotency key,
so the user gets one email either way. --demo makes the API's first call
time out (after sending) to show it.

    python3 examples/welcome_email.py --dsn "dbname=app" --setup     # once: tables, queue
    python3 examples/welcome_email.py --dsn "dbname=app" --sign-up ann@example.com
    python3 examples/welcome_email.py --dsn "dbname=app"             # the worker, until Ctrl-C
    python3 examples/welcome_email.py --dsn "dbname=app" --demo      # all of it, then exit

--setup and --demo create the tables and the queue, which needs the `admin`
right on every queue (a superuser has it); the extension must be installed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import psycopg

try:
    from pgq_cpp import Job, OutcomeUnknown, Queue, Worker, list_jobs
except ImportError:  # run from a source checkout: clients/python is the parent
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from pgq_cpp import Job, OutcomeUnknown, Queue, Worker, list_jobs

log = logging.getLogger("welcome_email")

WELCOME_EMAIL = Queue("welcome_email")


class PaymentDeclined(Exception):
    pass


class MailApi:
    """Stands in for a mail provider's HTTP API. Like the real ones it takes
    an idempotency key: a request with a key it has seen sends nothing and
    answers with the first message's id (a real provider keeps the keys for
    a day or so; this one, in memory, for the process).

    time_out_first: its first request times out after the email went out,
    as when the provider's answer is lost on the way back."""

    def __init__(self, time_out_first: bool = False) -> None:
        self._lock = threading.Lock()
        self._sent: dict[str, str] = {}  # idempotency key -> message id
        self._time_out_next = time_out_first

    def send(self, to: str, text: str, idempotency_key: str) -> str:
        with self._lock:
            message_id = self._sent.get(idempotency_key)
            if message_id is None:
                message_id = f"msg-{len(self._sent) + 1}"
                self._sent[idempotency_key] = message_id
                log.info("To: %s -- %s (%s)", to, text, message_id)
            else:
                log.info("%s: sent before as %s, not again (same idempotency key)", to, message_id)
            if self._time_out_next:
                self._time_out_next = False
                raise TimeoutError("the mail API did not answer within 10 s")
            return message_id


def set_up(conn: psycopg.Connection[Any]) -> None:
    with conn.transaction():
        conn.execute(
            "CREATE TABLE IF NOT EXISTS users ("
            " id bigserial PRIMARY KEY, email text UNIQUE NOT NULL)"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS welcome_emails_sent ("
            " user_id bigint PRIMARY KEY REFERENCES users,"
            " sent_at timestamptz NOT NULL DEFAULT now())"
        )
        # Completed jobs are kept a day with their results (pgq.job, pgq.list_jobs).
        conn.execute(
            "SELECT pgq.create_queue('welcome_email', max_attempts => 8,"
            " keep_completed => '1 day', if_not_exists => true)"
        )


def charge_first_month(card: str) -> None:
    if card == "declined":
        raise PaymentDeclined(card)


def sign_up(conn: psycopg.Connection[Any], email: str, card: str) -> int:
    """One transaction: the user, the welcome email job, the first charge."""
    with conn.transaction():
        row = conn.execute(
            "INSERT INTO users (email) VALUES (%s) RETURNING id", (email,)
        ).fetchone()
        assert row is not None
        user_id: int = row[0]
        WELCOME_EMAIL.enqueue(conn, {"user_id": user_id, "email": email})
        charge_first_month(card)  # raises: the user and the job are both rolled back
    return user_id


Result = Optional[dict[str, str]]  # the job's result: the message id


def email_sender(dsn: str, mail: MailApi) -> Callable[[Job], Result]:
    """The handler. At-least-once delivery: it may run twice for one job (a
    crash after sending, before completing), so it skips users already
    welcomed, and sends with an idempotency key. A real one would share a
    pool of connections."""

    def send_welcome_email(job: Job) -> Result:
        user_id, email = job.payload["user_id"], job.payload["email"]
        with psycopg.connect(dsn) as conn:
            sent = "SELECT FROM welcome_emails_sent WHERE user_id = %s"
            if conn.execute(sent, (user_id,)).fetchone():
                log.info("user %d was already welcomed", user_id)
                return None
            log.info("job %d attempt %d: welcoming %s", job.id, job.attempt, email)
            try:
                message_id = mail.send(email, "Welcome aboard!", f"welcome-{user_id}")
            except TimeoutError as exc:
                # Sent or not? Nobody knows yet. Failing would retry after
                # the backoff, maybe while the provider is still at it;
                # OutcomeUnknown leaves the job until its lease has run out,
                # and the retry's idempotency key makes it one email anyway.
                raise OutcomeUnknown(str(exc)) from exc
            conn.execute("INSERT INTO welcome_emails_sent (user_id) VALUES (%s)", (user_id,))
        return {"message_id": message_id}  # the job's result

    return send_welcome_email


def demo(dsn: str) -> None:
    """Signs up three people, one with a declined card; sends the two emails; exits."""
    with psycopg.connect(dsn) as conn:
        set_up(conn)
        run = uuid.uuid4().hex[:8]  # fresh addresses on every run
        signed_up = []
        for name, card in (("ann", "ok"), ("bob", "declined"), ("eve", "ok")):
            email = f"{name}+{run}@example.com"
            try:
                signed_up.append(sign_up(conn, email, card))
                log.info("signed up %s", email)
            except PaymentDeclined:
                log.info("%s: card declined, no account and no email", email)

    sent = threading.Semaphore(0)
    send = email_sender(dsn, MailApi(time_out_first=True))

    def handler(job: Job) -> Result:
        result = send(job)
        sent.release()
        return result

    # A lease of seconds, not the default minutes, so that the email whose
    # outcome was unknown is sent again within the demo.
    worker = Worker(dsn, WELCOME_EMAIL, handler, concurrency=2, lease=timedelta(seconds=2))
    worker.start()
    try:
        for _ in signed_up:
            if not sent.acquire(timeout=30):
                raise SystemExit("the emails were not sent within 30 s")
    finally:
        worker.stop()
        worker.join()
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM welcome_emails_sent WHERE user_id = ANY(%s)", (signed_up,)
        ).fetchone()
        for job in list_jobs(conn, WELCOME_EMAIL.name, state="done", max=len(signed_up)):
            log.info("job %d done on attempt %d: %s", job.id, job.attempt, job.result)
    log.info("%d signed up, %d welcomed", len(signed_up), row[0] if row else 0)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", required=True, help="libpq connection string")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--setup", action="store_true", help="create the tables and the queue")
    action.add_argument("--sign-up", metavar="EMAIL", help="sign a user up (card accepted)")
    action.add_argument(
        "--demo", action="store_true", help="sign up a few users, send their emails, exit"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    if args.demo:
        demo(args.dsn)
    elif args.setup:
        with psycopg.connect(args.dsn) as conn:
            set_up(conn)
    elif args.sign_up:
        with psycopg.connect(args.dsn) as conn:
            print(sign_up(conn, args.sign_up, "ok"))
    else:
        send = email_sender(args.dsn, MailApi())
        Worker(args.dsn, WELCOME_EMAIL, send, concurrency=4).run_forever()


if __name__ == "__main__":
    main()
