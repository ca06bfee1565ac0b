#!/usr/bin/env python3
"""The consumer of bench/streams.sh's latency workload.

Reads consumer 'c' of stream or queue 'bench' until it has seen --expect
events (or --timeout seconds have passed) and prints one line:

    <p50 ms> <p99 ms> <max ms> <events seen>

Each event's payload carries {"t": <epoch seconds>}, the server's
clock_timestamp() when the producer appended it (bench/sql/*_latency_append.sql,
same machine, same clock). Its latency is this process's clock right after
the statement that returned the event, minus t: append, commit, and the wait
until the consumer gets it.

  stream    pgq_cpp: SELECT ... FROM pgq.next_batch('bench', 'c', 1000,
            wait => '1 s'), then pgq.finish_batch: the call blocks until
            events are there, so no polling.
  skytools  Skytools PgQ: pgq.next_batch('bench', 'c'); none (no new tick):
            sleep --poll-ms, and ask again; else pgq.get_batch_events, then
            pgq.finish_batch. A batch exists only once the ticker has made a
            tick after the events.

Autocommit, one statement per round trip, as bench/sql's consumers.
"""

import argparse
import json
import statistics
import sys
import time

import psycopg


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--system", choices=("stream", "skytools"), required=True)
    p.add_argument("--dsn", required=True)
    p.add_argument("--expect", type=int, required=True)
    p.add_argument("--timeout", type=float, required=True)
    p.add_argument("--poll-ms", type=float, default=100.0)
    p.add_argument("--ready-file", help="touched once connected and ready")
    a = p.parse_args()

    conn = psycopg.connect(a.dsn, autocommit=True)
    if a.ready_file:
        open(a.ready_file, "w").close()
    lat = []
    deadline = time.time() + a.timeout
    while len(lat) < a.expect and time.time() < deadline:
        if a.system == "stream":
            rows = conn.execute(
                "SELECT batch_id, payload->>'t' FROM pgq.next_batch('bench', 'c', 1000, interval '1 s')"
            ).fetchall()
            now = time.time()
            if not rows:
                continue
            lat.extend(now - float(t) for _, t in rows)
            conn.execute("SELECT pgq.finish_batch(%s::bigint)", (rows[0][0],))
        else:
            batch = conn.execute("SELECT pgq.next_batch('bench', 'c')").fetchone()[0]
            if batch is None:
                time.sleep(a.poll_ms / 1000.0)
                continue
            rows = conn.execute(
                "SELECT ev_data FROM pgq.get_batch_events(%s::bigint)", (batch,)
            ).fetchall()
            now = time.time()
            lat.extend(now - float(json.loads(d)["t"]) for (d,) in rows)
            conn.execute("SELECT pgq.finish_batch(%s::bigint)", (batch,))
    conn.close()
    if len(lat) < 2:
        print(f"only {len(lat)} events seen", file=sys.stderr)
        print("0 0 0 %d" % len(lat))
        return 1
    q = statistics.quantiles(lat, n=100, method="inclusive")
    print("%.2f %.2f %.2f %d" % (q[49] * 1000, q[98] * 1000, max(lat) * 1000, len(lat)))
    return 0 if len(lat) >= a.expect else 1


if __name__ == "__main__":
    sys.exit(main())
