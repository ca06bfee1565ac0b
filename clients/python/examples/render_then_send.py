"""Render, then send: a two-step workflow with job dependencies.

Ordering an invoice enqueues two jobs in the order's own transaction: one
on queue `render` (make the document) and one on queue `send` (email it)
with `after=[render job]`. The send job waits (state 'waiting',
`open_parents` 1) until the render job is done, and only then can be
claimed, so the email never goes out without its document. If the render
dies (attempts spent), the send job goes to dead-letter with reason
`dependency_failed`: nobody gets an invoice email without the invoice.

One Worker serves both queues (`Worker(dsn, [RENDER, SEND], handle)`): one
claim, one pool of threads; `job.queue` says which step a job is.

    python3 examples/render_then_send.py --dsn "dbname=app" --setup     # once: tables, queues
    python3 examples/render_then_send.py --dsn "dbname=app" --order ann@example.com
    python3 examples/render_then_send.py --dsn "dbname=app"             # the worker, until Ctrl-C
    python3 examples/render_then_send.py --dsn "dbname=app" --demo      # all of it, then exit

--demo orders three invoices, one in a currency without a template (its
render fails every attempt), runs the worker until every send job is done
or dead, and shows each send ran only once its render was done.

--setup and --demo create the tables and the queues, which needs the
`admin` right on every queue (a superuser has it); the extension must be
installed (1.2).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

try:
    from pgq_cpp import Job, Queue, Worker, job
except ImportError:  # run from a source checkout: clients/python is the parent
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from pgq_cpp import Job, Queue, Worker, job

log = logging.getLogger("render_then_send")

RENDER = Queue("render")
SEND = Queue("send")

TEMPLATES = {"EUR": "Invoice {id}: EUR {amount:.2f}, due in 30 days."}


def set_up(conn: psycopg.Connection[Any]) -> None:
    with conn.transaction():
        conn.execute(
            "CREATE TABLE IF NOT EXISTS invoices ("
            " id bigserial PRIMARY KEY, email text NOT NULL,"
            " amount_cents integer NOT NULL, currency text NOT NULL)"
        )
        # clock_timestamp(): when the row was written, not when its
        # transaction began.
        conn.execute(
            "CREATE TABLE IF NOT EXISTS invoice_documents ("
            " invoice_id bigint PRIMARY KEY REFERENCES invoices, body text NOT NULL,"
            " rendered_at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS invoice_emails_sent ("
            " invoice_id bigint PRIMARY KEY REFERENCES invoices,"
            " sent_at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        # Rendering is local work: a failure is retried soon, three times.
        # Finished jobs are kept a day with their results (pgq.job).
        conn.execute(
            "SELECT pgq.create_queue('render', max_attempts => 3,"
            " backoff_base => '200 milliseconds', keep_completed => '1 day',"
            " if_not_exists => true)"
        )
        conn.execute(
            "SELECT pgq.create_queue('send', max_attempts => 8,"
            " keep_completed => '1 day', if_not_exists => true)"
        )


def order_invoice(
    conn: psycopg.Connection[Any], email: str, amount_cents: int, currency: str
) -> tuple[int, int, int]:
    """One transaction: the invoice, its render job and its send job, which
    waits for the render. (invoice id, render job id, send job id)."""
    with conn.transaction():
        row = conn.execute(
            "INSERT INTO invoices (email, amount_cents, currency) VALUES (%s, %s, %s)"
            " RETURNING id",
            (email, amount_cents, currency),
        ).fetchone()
        assert row is not None
        invoice_id: int = row[0]
        render = RENDER.enqueue(conn, {"invoice_id": invoice_id})
        send = SEND.enqueue(conn, {"invoice_id": invoice_id, "render_job": render}, after=[render])
    return invoice_id, render, send


def handlers(dsn: str) -> Callable[[Job], Any]:
    """The handler of both queues, by ``job.queue``. Each step is idempotent
    (at-least-once delivery): a document is written once, an email sent
    once. A real one would share a pool of connections."""

    def render(job: Job, conn: psycopg.Connection[Any]) -> dict[str, int]:
        invoice_id = job.payload["invoice_id"]
        row = conn.execute(
            "SELECT amount_cents, currency FROM invoices WHERE id = %s", (invoice_id,)
        ).fetchone()
        assert row is not None
        amount_cents, currency = row
        template = TEMPLATES.get(currency)
        if template is None:
            raise LookupError(f"no invoice template for {currency}")  # fails the attempt
        time.sleep(0.3)  # making a PDF takes a while; the send job waits meanwhile
        body = template.format(id=invoice_id, amount=amount_cents / 100)
        conn.execute(
            "INSERT INTO invoice_documents (invoice_id, body) VALUES (%s, %s)"
            " ON CONFLICT (invoice_id) DO NOTHING",
            (invoice_id, body),
        )
        log.info("job %d: rendered invoice %d", job.id, invoice_id)
        return {"bytes": len(body)}  # the render job's result

    def send(job: Job, conn: psycopg.Connection[Any]) -> dict[str, str] | None:
        invoice_id, render_job = job.payload["invoice_id"], job.payload["render_job"]
        # Only for the show: the dependency guarantees it is 'done'.
        parent = job_state(conn, render_job)
        log.info("job %d: sending invoice %d; its render job %d is %s",
                 job.id, invoice_id, render_job, parent)
        if conn.execute(
            "SELECT FROM invoice_emails_sent WHERE invoice_id = %s", (invoice_id,)
        ).fetchone():
            log.info("invoice %d was already sent", invoice_id)
            return None
        row = conn.execute(
            "SELECT i.email, d.body FROM invoices i JOIN invoice_documents d"
            "  ON d.invoice_id = i.id WHERE i.id = %s",
            (invoice_id,),
        ).fetchone()
        if row is None:  # cannot happen: the send job ran after its render
            raise RuntimeError(f"invoice {invoice_id} has no document")
        email, body = row
        log.info("To: %s -- %s", email, body)  # a real one calls the mail API here
        conn.execute("INSERT INTO invoice_emails_sent (invoice_id) VALUES (%s)", (invoice_id,))
        return {"message_id": f"msg-invoice-{invoice_id}"}

    steps = {RENDER.name: render, SEND.name: send}

    def handle(job: Job) -> Any:
        with psycopg.connect(dsn) as conn:  # commits when the step returns
            return steps[job.queue](job, conn)

    return handle


def job_state(conn: psycopg.Connection[Any], job_id: int) -> str:
    info = job(conn, job_id)
    return "gone" if info is None else info.state


def demo(dsn: str) -> None:
    """Orders three invoices (one that cannot be rendered), runs one worker
    over both queues until every send job has ended, and shows the order."""
    run = uuid.uuid4().hex[:8]  # fresh addresses on every run
    orders = []
    with psycopg.connect(dsn) as conn:
        set_up(conn)
        for name, amount_cents, currency in (("ann", 1200, "EUR"), ("bob", 900, "XYZ"),
                                             ("eve", 4500, "EUR")):
            invoice_id, render, send = order_invoice(
                conn, f"{name}+{run}@example.com", amount_cents, currency
            )
            orders.append((invoice_id, render, send))
            info = job(conn, send)
            assert info is not None
            log.info("invoice %d ordered: render job %d %s, send job %d %s for %d parent(s)",
                     invoice_id, render, job_state(conn, render), send, info.state,
                     info.open_parents)

    # One worker, both queues, threads to spare: only the dependencies keep
    # a send job from running next to its render.
    worker = Worker(dsn, [RENDER, SEND], handlers(dsn), concurrency=4)
    worker.start()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            deadline = time.monotonic() + 30
            while any(job_state(conn, send) not in ("done", "dead") for _, _, send in orders):
                if time.monotonic() > deadline:
                    raise SystemExit("the send jobs did not end within 30 s")
                time.sleep(0.05)
    finally:
        worker.stop()
        worker.join()

    sent = not_sent = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        for invoice_id, render, send in orders:
            rendered = job(conn, render)
            sent_job = job(conn, send)
            assert rendered is not None and sent_job is not None
            times = conn.execute(
                "SELECT d.rendered_at, s.sent_at FROM invoices i"
                "  LEFT JOIN invoice_documents d ON d.invoice_id = i.id"
                "  LEFT JOIN invoice_emails_sent s ON s.invoice_id = i.id WHERE i.id = %s",
                (invoice_id,),
            ).fetchone()
            assert times is not None
            rendered_at, sent_at = times
            if sent_job.state == "done":
                # The render job's completion, then the email (written by
                # the send handler).
                assert rendered.finished_at is not None
                in_order = rendered_at < rendered.finished_at < sent_at
                if in_order:
                    sent += 1
                log.info("invoice %d: rendered %s, then sent %s %.3f s after its render job"
                         " was done: %s", invoice_id, rendered.result, sent_job.result,
                         (sent_at - rendered.finished_at).total_seconds(),
                         "in order" if in_order else "OUT OF ORDER")
            else:
                not_sent += 1
                log.info("invoice %d: render %s after %d attempts (%s); send %s: %s",
                         invoice_id, rendered.state, rendered.attempt, rendered.last_error,
                         sent_job.state, sent_job.last_error)
    log.info("%d invoices ordered, %d sent after their render, %d not sent",
             len(orders), sent, not_sent)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", required=True, help="libpq connection string")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--setup", action="store_true", help="create the tables and the queues")
    action.add_argument("--order", metavar="EMAIL", help="order an invoice of EUR 10 for EMAIL")
    action.add_argument(
        "--demo", action="store_true", help="order three invoices, render and send them, exit"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    if args.demo:
        demo(args.dsn)
    elif args.setup:
        with psycopg.connect(args.dsn) as conn:
            set_up(conn)
    elif args.order:
        with psycopg.connect(args.dsn) as conn:
            print(order_invoice(conn, args.order, 1000, "EUR"))
    else:
        Worker(args.dsn, [RENDER, SEND], handlers(args.dsn), concurrency=4).run_forever()


if __name__ == "__main__":
    main()
