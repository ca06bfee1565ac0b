#!/usr/bin/python3
"""A producer of the relay fault test (test/relay/run.sh).

Commits --events events on topic `orders`, each in a transaction of its own
that also writes the ground truth: the event's row in `produced` and its
key's next sequence number, taken with

    UPDATE key_seq SET seq = seq + 1 WHERE key = %s RETURNING seq

The row lock orders one key's numbers as its commits are ordered (and
pgq.publish's group lock orders the key's jobs the same way), and a rollback
gives its number back: a key's committed events are numbered 1..n with no
gap. About --rollback of the transactions roll back on purpose (their uuids
go to --rolled-back: they must never be delivered).

The producer spreads its events evenly up to a deadline, the time (seconds
since the epoch) in --deadline-file, read again before every transaction:
the driver pushes it back while its faults take longer, so every fault meets
commits in flight. It lives through a PostgreSQL restart: a
transaction cut short before its COMMIT was sent did not commit; one whose
COMMIT got no answer may have, so the uuid is looked up in `produced` after
reconnecting. Last line on stdout: its figures.

A quarter of the events carry a W3C traceparent and tracestate, another
quarter a traceparent alone, the rest none, all made from the event's uuid
(trace_context): check.py judges every message's traceparent and tracestate
headers against the same.
"""
import argparse
import json
import random
import sys
import time
import uuid

import psycopg

RECONNECT_FOR = 90  # seconds a producer keeps trying before it gives up
# What a server going away raises (InterfaceError: a connection psycopg
# already knows is broken).
LOST = (psycopg.OperationalError, psycopg.InterfaceError)


def trace_context(event_uuid):
    """(traceparent, tracestate) of the event with this uuid, None where it
    has none. A uuid4 has a 4 among its first 16 hex digits: neither id is
    all zeros."""
    u = uuid.UUID(event_uuid)
    if u.int % 2:
        return None, None
    traceparent = f"00-{u.hex}-{u.hex[:16]}-01"
    return traceparent, (f"pgqtest={u.hex[:8]}" if u.int % 4 == 0 else None)


def connect(dsn, stats):
    deadline = time.monotonic() + RECONNECT_FOR
    delay = 0.05
    while True:
        try:
            return psycopg.connect(dsn, connect_timeout=5)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            stats["reconnect_waits"] += 1
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def committed(dsn, event_uuid, stats):
    """Whether the transaction that wrote event_uuid committed (asked again
    after a COMMIT that got no answer)."""
    while True:
        conn = connect(dsn, stats)
        try:
            row = conn.execute("SELECT 1 FROM produced WHERE event_uuid = %s", (event_uuid,)).fetchone()
            conn.rollback()
            return conn, row is not None
        except LOST:
            conn.close()


def read_deadline(path, previous):
    try:
        with open(path) as f:
            return float(f.read())
    except (OSError, ValueError):
        return previous  # being replaced right now: the last one read


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--producer", type=int, required=True)
    ap.add_argument("--events", type=int, required=True, help="events to commit")
    ap.add_argument("--keys", type=int, default=500)
    ap.add_argument("--rollback", type=float, default=0.10)
    ap.add_argument("--deadline-file", required=True, help="holds when the last commit is due (epoch seconds)")
    ap.add_argument("--topic", default="orders")
    ap.add_argument("--rolled-back", required=True, help="file for the uuids rolled back")
    args = ap.parse_args()

    rng = random.Random()
    stats = {"committed": 0, "rolled_back": 0, "lost_before_commit": 0, "unanswered_commits": 0,
             "unanswered_committed": 0, "reconnect_waits": 0}
    rolled = open(args.rolled_back, "a")
    conn = connect(args.dsn, stats)
    start = time.monotonic()
    deadline = time.time()
    while stats["committed"] < args.events:
        deadline = read_deadline(args.deadline_file, deadline)
        pause = (deadline - time.time()) / (args.events - stats["committed"])
        if pause > 0:
            time.sleep(pause)
        key = f"k{rng.randrange(args.keys):03d}"
        event_uuid = str(uuid.uuid4())
        roll_back = rng.random() < args.rollback
        try:
            seq = conn.execute("UPDATE key_seq SET seq = seq + 1 WHERE key = %s RETURNING seq", (key,)).fetchone()[0]
            conn.execute("INSERT INTO produced (event_uuid, key, seq, producer) VALUES (%s, %s, %s, %s)",
                         (event_uuid, key, seq, args.producer))
            payload = {"uuid": event_uuid, "key": key, "seq": seq, "producer": args.producer}
            traceparent, tracestate = trace_context(event_uuid)
            conn.execute("SELECT pgq.publish(%s, %s::jsonb, NULL, %s, traceparent => %s, tracestate => %s)",
                         (args.topic, json.dumps(payload), key, traceparent, tracestate))
        except LOST:
            # The server went away before COMMIT: nothing of it committed.
            stats["lost_before_commit"] += 1
            conn.close()
            conn = connect(args.dsn, stats)
            continue
        if roll_back:
            try:
                conn.rollback()
            except LOST:
                conn.close()
                conn = connect(args.dsn, stats)
            stats["rolled_back"] += 1
            rolled.write(event_uuid + "\n")
            rolled.flush()
            continue
        try:
            conn.commit()
            stats["committed"] += 1
        except LOST:
            # No answer to COMMIT: it may have committed; the table knows.
            stats["unanswered_commits"] += 1
            conn.close()
            conn, done = committed(args.dsn, event_uuid, stats)
            if done:
                stats["committed"] += 1
                stats["unanswered_committed"] += 1
    conn.close()
    elapsed = time.monotonic() - start
    print(f"producer {args.producer}: " + ", ".join(f"{k} {v}" for k, v in stats.items()) + f", {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
