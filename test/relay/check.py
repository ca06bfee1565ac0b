#!/usr/bin/python3
"""The relay fault test's judge (test/relay/run.sh): compares what the
producers committed (the `produced` table) with what the consumer received
(the ledger written by ledger.c) and the fault windows the driver recorded.

    check.py wait  --dsn D --ledger F --queue Q --seconds S
        waits until every committed event is in the ledger and the queue has
        nothing pending or running; exit 0 when so, 1 after S seconds
    check.py judge --dsn D --ledger F --windows F --rolled-back F... --queue Q
                   --broker rabbitmq|nats --routing R
        prints one TAP line per assertion ("ok - ..." / "not ok - ...") and
        "# ..." lines with the figures

With --stream S [--consumer C] (pgq-relay --stream: the events went from
pgq.publish into stream S, read by consumer C, default pgq-relay) instead
of --queue: the message id is pgqs-<stream>-<stream event id> with the
pgq-stream, pgq-stream-event-id, pgq-appended-at and pgq-event-id headers,
and the end state is the consumer's: nothing pending, no batch open.

Every message of an event produce.py traced carries its traceparent (and
tracestate, where it had one) as headers, and no other message either.

A duplicate is a delivery of a message id (or an event uuid) seen before in
the ledger; each must be received inside a fault window. Order is judged on
first deliveries, in ledger order: per key, sequence numbers 1, 2, 3, ...
"""
import argparse
import bisect
import json
import re
import sys
import time
from collections import Counter, defaultdict

import psycopg

from produce import trace_context

FIELDS = ("ms", "msgid", "group", "attempt", "job", "topic", "redelivered", "stream_seq", "routing", "event",
          "stream", "stream_event", "appended_at", "traceparent", "tracestate", "body")


def read_ledger(path):
    """The ledger's deliveries as dicts, in order (a last line still being
    written, without its newline, is left for the next read)."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.endswith("\n"):
                break
            parts = line.rstrip("\n").split("\t", len(FIELDS) - 1)
            d = dict(zip(FIELDS, parts))
            d["ms"] = int(parts[0])
            try:
                body = json.loads(d.get("body", ""))
                d["uuid"] = body.get("uuid") if isinstance(body, dict) else None
                d["key"] = body.get("key") if isinstance(body, dict) else None
                d["seq"] = body.get("seq") if isinstance(body, dict) else None
            except ValueError:
                d["uuid"] = d["key"] = d["seq"] = None
            out.append(d)
    return out


def pending(conn, queue):
    row = conn.execute(
        "SELECT ready + scheduled + running + coalesce(awaiting_parents, 0), dead FROM pgq.queue_stats WHERE queue = %s",
        (queue,)).fetchone()
    return row if row else (None, None)


def stream_pending(conn, stream, consumer):
    """(events not finished, whether a batch is open) of the stream's consumer."""
    row = conn.execute("SELECT pending_events, batch_open FROM pgq.stream_stats WHERE stream = %s AND consumer = %s",
                       (stream, consumer)).fetchone()
    return row if row else (None, None)


def left_over(conn, args):
    """What is still to relay: jobs pending or running, or (--stream) events
    not finished (1 at least while a batch is open)."""
    if args.stream:
        events, batch_open = stream_pending(conn, args.stream, args.consumer)
        return None if events is None else max(events, 1 if batch_open else 0)
    return pending(conn, args.queue)[0]


def wait(args):
    """Until everything is delivered; gives up early once nothing has moved
    for STILL seconds with nothing left in the queue (what is missing then
    will not come)."""
    STILL = 20
    deadline = time.monotonic() + args.seconds
    missing = left = None
    last_change, last_state = time.monotonic(), None
    while True:
        try:
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                produced = {r[0] for r in conn.execute("SELECT event_uuid::text FROM produced")}
                left = left_over(conn, args)
            ledger = read_ledger(args.ledger)
            missing = len(produced - {d["uuid"] for d in ledger})
            if missing == 0 and left == 0:
                return 0
            if (len(ledger), left) != last_state:
                last_change, last_state = time.monotonic(), (len(ledger), left)
        except psycopg.OperationalError:
            pass
        still = left == 0 and time.monotonic() - last_change > STILL
        if time.monotonic() > deadline or still:
            print(f"# after {args.seconds if not still else STILL:.0f} s{' without a change' if still else ''}: "
                  f"{missing} committed events not in the ledger, {left} "
                  + ("stream events not finished" if args.stream else "jobs pending or running"))
            return 1
        time.sleep(0.5)


class Tap:
    def __init__(self):
        self.failed = 0

    def check(self, good, text):
        print(("ok - " if good else "not ok - ") + text)
        if not good:
            self.failed += 1


def read_windows(path):
    """(name, kind, start_ms, end_ms) per fault, sorted by start."""
    out = []
    with open(path) as f:
        for line in f:
            name, kind, start, end = line.split()
            out.append((name, kind, int(start), int(end)))
    return sorted(out, key=lambda w: w[2])


def window_of(windows, ms):
    for w in windows:
        if w[2] <= ms <= w[3]:
            return w
    return None


def judge(args):
    tap = Tap()
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        produced = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT event_uuid::text, key, seq FROM produced")}
        gaps = conn.execute("""
            SELECT count(*) FROM (SELECT key, count(*) AS n, max(seq) AS top, min(seq) AS bottom
                                  FROM produced GROUP BY key) k
             WHERE n <> top OR bottom <> 1""").fetchone()[0]
        keys = conn.execute("SELECT count(DISTINCT key) FROM produced").fetchone()[0]
        if args.stream:
            unfinished, batch_open = stream_pending(conn, args.stream, args.consumer)
        else:
            left, dead_in_stats = pending(conn, args.queue)
            dead_jobs = conn.execute("SELECT count(*) FROM pgq.dead_jobs WHERE queue = %s", (args.queue,)).fetchone()[0]
    rolled_back = set()
    for path in args.rolled_back:
        with open(path) as f:
            rolled_back |= {line.strip() for line in f if line.strip()}
    ledger = read_ledger(args.ledger)
    windows = read_windows(args.windows)

    print(f"# committed {len(produced)} events over {keys} keys; rolled back {len(rolled_back)}; "
          f"ledger: {len(ledger)} deliveries")
    tap.check(gaps == 0 and len(produced) == args.events,
              f"ground truth: {len(produced)} committed (want {args.events}), per-key sequences 1..n "
              f"without gaps ({gaps} keys with a gap)")

    # The message: id pgq-<queue>-<job id> (or pgqs-<stream>-<event id>),
    # headers agreeing with the body.
    if args.stream:
        id_re = re.compile(rf"^pgqs-{re.escape(args.stream)}-(\d+)$")
        what = (f"pgqs-{args.stream}-<stream event id>, pgq-stream, pgq-stream-event-id, pgq-appended-at, "
                f"pgq-event-id (no pgq-job-id, pgq-attempt)")
    else:
        id_re = re.compile(rf"^pgq-{re.escape(args.queue)}-(\d+)$")
        what = f"pgq-{args.queue}-<job id>, pgq-job-id"
    appended_re = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$")
    bad = []
    for d in ledger:
        m = id_re.match(d["msgid"])
        why = None
        if d["uuid"] is None:
            why = "body is not the event's payload"
        elif not m:
            why = "message id"
        elif not args.stream and d["job"] != m.group(1):
            why = "pgq-job-id header"
        elif args.stream and d["stream_event"] != m.group(1):
            why = "pgq-stream-event-id header"
        elif args.stream and d["stream"] != args.stream:
            why = "pgq-stream header"
        elif args.stream and not appended_re.match(d["appended_at"]):
            why = "pgq-appended-at header"
        elif args.stream and not d["event"].isdigit():
            why = "pgq-event-id header"
        elif args.stream and (d["job"], d["attempt"]) != ("-", "-"):
            why = "a queue's header (pgq-job-id, pgq-attempt) on a stream's message"
        elif d["group"] != d["key"]:
            why = "pgq-group-key header"
        elif d["topic"] != "orders":
            why = "pgq-topic header"
        elif d["routing"] != args.routing:
            why = "routing key / subject"
        if why:
            bad.append((why, d))
    tap.check(not bad, f"every message has id {what}, pgq-group-key and pgq-topic "
                       f"headers matching its body, routing '{args.routing}' ({len(bad)} wrong)")
    for why, d in bad[:5]:
        print(f"#   wrong {why}: {d}")

    # The trace context: as produce.py made it from the event's uuid, the
    # headers there only when it had one.
    traced = untraced = 0
    wrong_trace = []
    for d in ledger:
        if d["uuid"] not in produced:
            continue  # a phantom: counted below
        want = tuple(value or "-" for value in trace_context(d["uuid"]))
        if want[0] == "-":
            untraced += 1
        else:
            traced += 1
        if (d["traceparent"], d["tracestate"]) != want:
            wrong_trace.append((want, d))
    tap.check(not wrong_trace and traced and untraced,
              f"trace context: {traced} messages of traced events with their traceparent (and tracestate where "
              f"they had one) headers, {untraced} of untraced events with neither ({len(wrong_trace)} wrong)")
    for want, d in wrong_trace[:5]:
        print(f"#   wrong trace headers {d['traceparent']!r} {d['tracestate']!r}, want {want}: {d['msgid']}")

    # One message id per event and one event per message id.
    ids_of = defaultdict(set)
    uuids_of = defaultdict(set)
    for d in ledger:
        ids_of[d["uuid"]].add(d["msgid"])
        uuids_of[d["msgid"]].add(d["uuid"])
    split = [u for u, ids in ids_of.items() if len(ids) > 1]
    merged = [i for i, us in uuids_of.items() if len(us) > 1]
    tap.check(not split and not merged,
              f"one message id per event ({len(split)} events under several ids, {len(merged)} ids for several events)")

    delivered = set(ids_of)
    lost = set(produced) - delivered
    phantoms = delivered - set(produced)
    tap.check(not lost, f"0 lost: {len(set(produced) & delivered)} of {len(produced)} committed events delivered "
                        f"({len(lost)} missing)")
    for u in sorted(lost)[:5]:
        print(f"#   missing: {u} {produced[u]}")
    tap.check(not phantoms, f"0 phantoms: {len(phantoms)} delivered events not committed "
                            f"({len(phantoms & rolled_back)} of them rolled back)")
    for u in sorted(x for x in phantoms if x)[:5]:
        print(f"#   phantom: {u}")

    # Per-key order of first deliveries.
    seen = set()
    last = {}
    disorder = []
    duplicates = []
    first_ms = []
    for d in ledger:
        if d["uuid"] in seen or d["msgid"] in seen:
            duplicates.append(d)
            continue
        seen.add(d["uuid"])
        seen.add(d["msgid"])
        first_ms.append(d["ms"])
        if d["uuid"] not in produced:
            continue
        key, seq = produced[d["uuid"]]
        if seq != last.get(key, 0) + 1:
            disorder.append((key, last.get(key, 0), seq, d["ms"]))
        last[key] = seq
    tap.check(not disorder, f"per-key order: first deliveries of each of {len(last)} keys come 1, 2, 3, ... "
                            f"({len(disorder)} out of order)")
    for key, prev, seq, ms in disorder[:5]:
        print(f"#   key {key}: seq {seq} first delivered after seq {prev} (at {ms})")

    # Duplicates: each inside a fault window.
    by_window = Counter()
    outside = []
    for d in duplicates:
        w = window_of(windows, d["ms"])
        if w:
            by_window[w[0]] += 1
        else:
            outside.append(d)
    redelivered = sum(1 for d in duplicates if d["redelivered"] == "1")
    print(f"# duplicates: {len(duplicates)} ({redelivered} flagged redelivered by the broker); by fault window: "
          + (", ".join(f"{name} {by_window[name]}" for name, *_ in windows) or "no windows"))
    all_ms = sorted(d["ms"] for d in ledger)
    for name, kind, start, end in windows:
        firsts = sum(1 for ms in first_ms if start <= ms <= end)
        # The consumer's view of the outage: the longest time without a
        # delivery, counted from the fault (with the first delivery after
        # the window when none came inside it).
        lo, hi = bisect.bisect_left(all_ms, start), bisect.bisect_right(all_ms, end)
        times = [start] + all_ms[lo:hi + 1]
        gap = max((b - a for a, b in zip(times, times[1:])), default=end - start)
        print(f"# window {name}: {(end - start) / 1000:.1f} s, {firsts} first deliveries, "
              f"{by_window[name]} duplicates, longest wait for a delivery {gap / 1000:.1f} s")
    tap.check(not outside, f"every duplicate inside a fault window ({len(outside)} outside)")
    for d in outside[:5]:
        near = min(windows, key=lambda w: min(abs(d['ms'] - w[2]), abs(d['ms'] - w[3])), default=None)
        where = (f"nearest window {near[0]} [{near[2]}, {near[3]}]" if near else "no windows")
        print(f"#   outside: {d['msgid']} attempt {d['attempt']} redelivered {d['redelivered']} at {d['ms']}; {where}")

    if args.broker == "nats":
        relay_kills = [w for w in windows if w[1] == "relay-kill"]
        in_kills = sum(by_window[w[0]] for w in relay_kills)
        tap.check(in_kills == 0 and relay_kills,
                  f"NATS: 0 duplicates in the {len(relay_kills)} relay-kill windows (JetStream drops a republished "
                  f"Nats-Msg-Id): {in_kills}")
        # The broker's own duplicates: one id stored under two stream sequences.
        stored = defaultdict(set)
        for d in ledger:
            stored[d["msgid"]].add(d["stream_seq"])
        twice = sum(1 for s in stored.values() if len(s) > 1)
        print(f"# NATS: {twice} message ids stored twice in the stream; "
              f"{len(duplicates)} duplicate deliveries in all")

    if args.stream:
        tap.check(unfinished == 0 and batch_open is False,
                  f"stream {args.stream}: consumer {args.consumer} finished everything at the end "
                  f"({unfinished} events not finished, batch open: {batch_open})")
    else:
        tap.check(left == 0, f"queue {args.queue} empty at the end ({left} jobs pending or running)")
        tap.check(dead_jobs == 0 and (dead_in_stats or 0) == 0, f"no dead jobs ({dead_jobs})")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("wait", "judge"))
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--ledger", required=True)
    ap.add_argument("--queue", default="to_broker")
    ap.add_argument("--stream", help="judge pgq-relay --stream's forwarding of this stream instead of a queue's")
    ap.add_argument("--consumer", default="pgq-relay", help="with --stream: the relay's consumer")
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--windows")
    ap.add_argument("--rolled-back", nargs="*", default=[])
    ap.add_argument("--broker", choices=("rabbitmq", "nats"))
    ap.add_argument("--routing", default="orders")
    ap.add_argument("--events", type=int, default=0)
    args = ap.parse_args()
    return wait(args) if args.mode == "wait" else judge(args)


if __name__ == "__main__":
    sys.exit(main())
