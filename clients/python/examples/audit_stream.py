"""An audit trail fed by the outbox: every transfer commits with its event.

`transfer` moves money between two accounts and publishes a `transfer_made`
event (`pgq.publish`) in ONE transaction: a transfer that fails (not enough
money) rolls back the balances and the event alike, so the audit trail never
shows a transfer that did not happen, and never misses one that did. The
topic is subscribed to the stream `audit` (`pgq.subscribe(topic, stream =>
'audit')`), so the publish appends the event to the stream in that same
transaction.

A StreamConsumer reads the stream in batches and records each event in the
table `audit_trail`, keyed by the stream's event id: a batch comes again if
the consumer dies between recording it and finishing it (at-least-once), and
the key makes the second time a no-op. --demo shows it: the audit store
"drops the connection" once, after recording its first batch.

    python3 examples/audit_stream.py --dsn "dbname=app" --setup      # once: tables, topic, stream
    python3 examples/audit_stream.py --dsn "dbname=app" --transfer ann bob 25.00
    python3 examples/audit_stream.py --dsn "dbname=app"              # the consumer, until Ctrl-C
    python3 examples/audit_stream.py --dsn "dbname=app" --demo       # all of it, then exit

--setup and --demo create the tables, the topic and the stream, which needs
the `admin` right on every queue and every stream (a superuser has them);
the extension must be installed (2.0).
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

try:
    from pgq_cpp import Stream, StreamBatch, StreamConsumer
except ImportError:  # run from a source checkout: clients/python is the parent
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from pgq_cpp import Stream, StreamBatch, StreamConsumer

log = logging.getLogger("audit_stream")

TOPIC = "transfer_made"
AUDIT = Stream("audit")
CONSUMER = "audit_trail"


class InsufficientFunds(Exception):
    pass


def set_up(conn: psycopg.Connection[Any]) -> None:
    with conn.transaction():
        conn.execute(
            "CREATE TABLE IF NOT EXISTS audit_accounts ("
            " owner text PRIMARY KEY, balance numeric(12, 2) NOT NULL CHECK (balance >= 0))"
        )
        conn.execute(
            "INSERT INTO audit_accounts VALUES ('ann', 100), ('bob', 50), ('eve', 0)"
            " ON CONFLICT DO NOTHING"
        )
        # One row per stream event: the event id is the idempotency key.
        conn.execute(
            "CREATE TABLE IF NOT EXISTS audit_trail ("
            " event_id bigint PRIMARY KEY, transfer_id bigint NOT NULL,"
            " from_owner text NOT NULL, to_owner text NOT NULL, amount numeric(12, 2) NOT NULL,"
            " appended_at timestamptz NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute("SELECT pgq.create_topic(%s, if_not_exists => true)", (TOPIC,))
        conn.execute("SELECT pgq.create_stream(%s, if_not_exists => true)", (AUDIT.name,))
        conn.execute("SELECT pgq.subscribe(%s, stream => %s)", (TOPIC, AUDIT.name))


def transfer(conn: psycopg.Connection[Any], from_owner: str, to_owner: str, amount: Decimal) -> int:
    """One transaction: both balances and the event. Returns the event's
    outbox id (pgq.publish); raises InsufficientFunds, having changed
    nothing."""
    try:
        with conn.transaction():
            conn.execute(
                "UPDATE audit_accounts SET balance = balance - %s WHERE owner = %s",
                (amount, from_owner),
            )
            conn.execute(
                "UPDATE audit_accounts SET balance = balance + %s WHERE owner = %s",
                (amount, to_owner),
            )
            event = {"from": from_owner, "to": to_owner, "amount": str(amount)}
            row = conn.execute("SELECT pgq.publish(%s, %s)", (TOPIC, Jsonb(event))).fetchone()
            assert row is not None
            return int(row[0])
    except psycopg.errors.CheckViolation as exc:  # the balance would go negative
        raise InsufficientFunds(f"{from_owner} cannot pay {amount}") from exc


def audit_recorder(dsn: str, fail_once: bool = False) -> Callable[[StreamBatch], None]:
    """The handler: records a batch in one transaction of its own. Recording
    an event twice does nothing (ON CONFLICT on the event id), which is what
    at-least-once delivery needs. fail_once: the first batch raises after
    its transaction committed, as when the consumer dies before finishing
    the batch: the batch comes again, and finds its events recorded."""
    failures = [fail_once]

    def record(batch: StreamBatch) -> None:
        with psycopg.connect(dsn) as conn, conn.transaction():
            for event in batch.events:
                # The envelope publish appends: {event_id, topic, payload}.
                change = event.payload["payload"]
                row = conn.execute(
                    "INSERT INTO audit_trail"
                    " (event_id, transfer_id, from_owner, to_owner, amount, appended_at)"
                    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (event_id) DO NOTHING"
                    " RETURNING event_id",
                    (
                        event.id,
                        event.payload["event_id"],
                        change["from"],
                        change["to"],
                        Decimal(change["amount"]),
                        event.appended_at,
                    ),
                ).fetchone()
                if row is None:
                    log.info("batch %d: event %d was recorded already", batch.id, event.id)
                else:
                    log.info(
                        "batch %d: event %d: %s paid %s %s (transfer %d)",
                        batch.id,
                        event.id,
                        change["from"],
                        change["to"],
                        change["amount"],
                        event.payload["event_id"],
                    )
        if failures[0]:
            failures[0] = False
            raise ConnectionError("the audit store dropped the connection before it answered")

    return record


def demo(dsn: str) -> None:
    """Three transfers, one of them declined; records them; exits."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS audit_trail, audit_accounts")
        conn.execute("SELECT pgq.drop_stream(%s, if_exists => true)", (AUDIT.name,))
        conn.execute("SELECT pgq.drop_topic(%s)", (TOPIC,))  # false when there is none
    with psycopg.connect(dsn) as conn:
        set_up(conn)

    recorded = threading.Semaphore(0)
    record = audit_recorder(dsn, fail_once=True)

    def handler(batch: StreamBatch) -> None:
        record(batch)
        for _ in batch.events:
            recorded.release()

    # Registered by start(): it reads every event committed from then on.
    consumer = StreamConsumer(dsn, AUDIT, CONSUMER, handler)
    consumer.start()
    made, declined = 0, 0
    try:
        with psycopg.connect(dsn) as conn:
            transfers = (("ann", "bob", "30"), ("bob", "eve", "10"), ("eve", "ann", "500"))
            for payer, payee, amount in transfers:
                try:
                    event_id = transfer(conn, payer, payee, Decimal(amount))
                    made += 1
                    log.info("%s paid %s %s (transfer %d)", payer, payee, amount, event_id)
                except InsufficientFunds as exc:
                    declined += 1
                    log.info("declined: %s; no balance changed, no event", exc)
        for _ in range(made):
            if not recorded.acquire(timeout=30):
                raise SystemExit("the transfers were not recorded within 30 s")
    finally:
        consumer.stop()
        consumer.join()
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM audit_trail").fetchone()
    recorded = row[0] if row else 0
    log.info("%d transfers made, %d declined; %d in the audit trail", made, declined, recorded)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", required=True, help="libpq connection string")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--setup", action="store_true", help="create the tables, topic and stream")
    action.add_argument(
        "--transfer", nargs=3, metavar=("FROM", "TO", "AMOUNT"), help="move money, with its event"
    )
    action.add_argument(
        "--demo", action="store_true", help="make a few transfers, record them, exit"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    if args.demo:
        demo(args.dsn)
    elif args.setup:
        with psycopg.connect(args.dsn) as conn:
            set_up(conn)
    elif args.transfer:
        payer, payee, amount = args.transfer
        with psycopg.connect(args.dsn) as conn:
            print(transfer(conn, payer, payee, Decimal(amount)))
    else:
        StreamConsumer(args.dsn, AUDIT, CONSUMER, audit_recorder(args.dsn)).run_forever()


if __name__ == "__main__":
    main()
