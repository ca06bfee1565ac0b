#!/usr/bin/python3
"""Wake-up latency of three ways to wait for a job: pgq.claim(wait => ...),
LISTEN/NOTIFY then claim, and polling claim every 100 ms.

    /usr/bin/python3 bench/wakeup.py --dsn "host=/tmp/pgq_wakeup port=55445 dbname=bench"

Started by bench/wakeup.sh, which brings up the cluster. What is measured is
the time from an enqueue's COMMIT returning in the producer's connection to
the consumer having the job in hand (its claim returned the row):

  wait    the consumer sits in pgq.claim('wakeup_wait', 1, wait => '10 s')
          and is woken by the enqueue's commit (its latch);
  listen  a queue created with notify => true; the consumer LISTENs on
          channel pgq, waits for the notification on its socket (select),
          then claims with pgq.claim('wakeup_listen', 1), no wait;
  poll    the consumer loops pgq.claim('wakeup_poll', 1) and sleeps 100 ms
          whenever it comes back empty.

Every consumer runs in a process of its own, with its own connection, so the
producer's and the consumers' Python code never wait on each other's GIL. Both
sides read time.clock_gettime(CLOCK_MONOTONIC), which is one clock for the
whole machine (time.perf_counter is not guaranteed to be shared by processes).

One round, for one consumer: the producer tells it to start waiting; once it
says it is about to block (and, for `wait`, once pg_stat_activity shows its
backend asleep on the pgq latch), the producer sleeps a random delay
(uniform between --delay-min and --delay-max, default 20-120 ms: more than one
100 ms poll period, so the job lands at a random phase of the poll loop), then
enqueues one job and commits, and reads the clock when COMMIT returns. The
consumer reads the clock when its claim returns the job, completes the job
with pgq.complete(id, attempt), and reports back; only then does the next
round begin. A latency can be slightly negative: the commit callback wakes
the consumer before the COMMIT's reply reaches the producer.

Rounds are interleaved: round i runs one job through each of the three
consumers, in an order shuffled every round, so drift on the machine (other
work, checkpoints) hits all three alike. A few unmeasured warm-up rounds come
first (--warmup).

Prints a markdown table (median, p90, p99, max, min in ms) and the load
average seen during the rounds on stdout; with --csv, every measured round
goes to that file.
"""

import argparse
import csv
import math
import multiprocessing as mp
import random
import select
import statistics
import sys
import time

import psycopg

CONSUMERS = ("wait", "listen", "poll")
QUEUE = {kind: f"wakeup_{kind}" for kind in CONSUMERS}
LABEL = {
    "wait": "pgq.claim(wait => '10 s')",
    "listen": "LISTEN pgq + pgq.claim",
    "poll": "poll pgq.claim every 100 ms",
}
WAIT = "10 s"  # the wait consumer's claim; also every consumer's time-out
TIMEOUT_S = 10.0
POLL_S = 0.100


def now():
    """Seconds on the machine-wide monotonic clock (same in every process)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


# --- consumers (one process each) ---------------------------------------------


def consumer(kind, dsn, pipe):
    """Serves rounds for one kind of consumer until the producer sends None.

    Messages: sends ("pid", backend_pid) once; then per round receives "go",
    sends "ready" just before it blocks, and sends ("got", t, id, completed)
    once the job is claimed and completed."""
    queue = QUEUE[kind]
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor()
        if kind == "listen":
            cur.execute("LISTEN pgq")
            notifies = conn.notifies()  # a generator; resumed once per round
        pipe.send(("pid", conn.info.backend_pid))
        while pipe.recv() == "go":
            pipe.send("ready")
            if kind == "wait":
                # Sleeps on the backend's latch until an enqueue into the queue commits.
                cur.execute("SELECT id, attempt FROM pgq.claim(%s, 1, wait => %s::interval)",
                            (queue, WAIT))
                row = cur.fetchone()
                got = now()
            elif kind == "listen":
                # Block on the socket, not in libpq, so a lost notification
                # ends in a time-out rather than a hang.
                readable, _, _ = select.select([conn.fileno()], [], [], TIMEOUT_S)
                if not readable:
                    raise RuntimeError("listen: no notification within %.0f s" % TIMEOUT_S)
                note = next(notifies)
                if note.payload != queue:
                    raise RuntimeError(f"listen: notification for {note.payload!r}, not {queue!r}")
                cur.execute("SELECT id, attempt FROM pgq.claim(%s, 1)", (queue,))
                row = cur.fetchone()
                got = now()
            else:  # poll
                deadline = now() + TIMEOUT_S
                while True:
                    cur.execute("SELECT id, attempt FROM pgq.claim(%s, 1)", (queue,))
                    row = cur.fetchone()
                    got = now()
                    if row is not None or got > deadline:
                        break
                    time.sleep(POLL_S)
            if row is None:
                raise RuntimeError(f"{kind}: no job within {TIMEOUT_S:.0f} s")
            # The job is done before the next round starts.
            cur.execute("SELECT pgq.complete(%s, %s)", row)
            completed = cur.fetchone()[0]
            pipe.send(("got", got, row[0], completed))


# --- producer -----------------------------------------------------------------


class Producer:
    def __init__(self, dsn):
        # Enqueues in an explicit transaction: the clock is read when COMMIT returns.
        self.conn = psycopg.connect(dsn, autocommit=False)
        # Watches pg_stat_activity, outside the producer's transactions.
        self.monitor = psycopg.connect(dsn, autocommit=True)

    def enqueue(self, queue):
        """Enqueues one job, commits; returns (job id, clock when COMMIT returned)."""
        with self.conn.cursor() as cur:
            cur.execute("SELECT pgq.enqueue(%s, '{\"k\": 1}'::jsonb)", (queue,))
            job_id = cur.fetchone()[0]
        self.conn.commit()
        return job_id, now()

    def wait_asleep(self, pid):
        """Waits until backend `pid` sleeps in a waiting claim (on its latch)."""
        deadline = now() + TIMEOUT_S
        while now() < deadline:
            row = self.monitor.execute(
                "SELECT state = 'active' AND wait_event_type = 'Extension'"
                "  FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
            if row and row[0]:
                return
            time.sleep(0.001)
        raise RuntimeError(f"wait: backend {pid} did not go to sleep in pgq.claim")


def setup(dsn):
    """(Re)creates the three queues, empty; only `listen`'s notifies."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for kind in CONSUMERS:
            queue = QUEUE[kind]
            conn.execute("SELECT pgq.drop_queue(%s, force => true)"
                         "  FROM pgq.queues WHERE name = %s", (queue, queue))
            conn.execute("SELECT pgq.create_queue(%s, notify => %s)", (queue, kind == "listen"))


def percentile(sorted_values, p):
    """Nearest-rank percentile: the smallest value with at least p% at or below it."""
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", required=True, help="libpq connection string")
    ap.add_argument("--jobs", type=int, default=1000, help="measured jobs per consumer (1000)")
    ap.add_argument("--warmup", type=int, default=10, help="unmeasured rounds first (10)")
    ap.add_argument("--delay-min", type=float, default=20, help="ms, before each enqueue (20)")
    ap.add_argument("--delay-max", type=float, default=120, help="ms, before each enqueue (120)")
    ap.add_argument("--csv", help="write every measured round to this file")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    args = ap.parse_args()
    if args.jobs < 1 or args.warmup < 0 or not 0 <= args.delay_min <= args.delay_max:
        ap.error("need --jobs >= 1, --warmup >= 0 and 0 <= --delay-min <= --delay-max")
    rng = random.Random(args.seed)

    setup(args.dsn)
    producer = Producer(args.dsn)
    procs, pipes, pids = {}, {}, {}
    for kind in CONSUMERS:
        ours, theirs = mp.Pipe()
        procs[kind] = mp.Process(target=consumer, args=(kind, args.dsn, theirs), daemon=True)
        procs[kind].start()
        pipes[kind] = ours
    for kind in CONSUMERS:
        tag, pids[kind] = recv(pipes[kind], procs[kind])
        assert tag == "pid"

    def round_trip(kind):
        """One job through one consumer; returns (delay s, latency s)."""
        pipe = pipes[kind]
        pipe.send("go")
        if recv(pipe, procs[kind]) != "ready":
            raise RuntimeError(f"{kind}: unexpected message")
        if kind == "wait":
            producer.wait_asleep(pids[kind])
        delay = rng.uniform(args.delay_min, args.delay_max) / 1000
        time.sleep(delay)
        job_id, committed = producer.enqueue(QUEUE[kind])
        tag, got, got_id, completed = recv(pipe, procs[kind])
        if got_id != job_id or not completed:
            raise RuntimeError(f"{kind}: claimed job {got_id} (completed: {completed}),"
                               f" expected {job_id}")
        return delay, got - committed

    samples = {kind: [] for kind in CONSUMERS}
    rows = []
    loads = [load1()]  # at the start and every 100 measured rounds
    started = time.time()
    for i in range(-args.warmup, args.jobs):
        order = list(CONSUMERS)
        rng.shuffle(order)
        for kind in order:
            delay, latency = round_trip(kind)
            if i >= 0:
                samples[kind].append(latency * 1000)
                rows.append((i, kind, f"{delay * 1000:.3f}", f"{latency * 1000:.3f}"))
        if i >= 0 and ((i + 1) % 100 == 0 or i + 1 == args.jobs):
            loads.append(load1())
            print(f"  {i + 1}/{args.jobs} rounds, {time.time() - started:.0f} s,"
                  f" load {loads[-1]:.2f}", file=sys.stderr)
    for kind in CONSUMERS:
        pipes[kind].send(None)
        procs[kind].join(5)

    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["round", "consumer", "delay_ms", "latency_ms"])
            w.writerows(rows)

    print(f"{args.jobs} jobs per consumer, rounds interleaved (one job through each consumer"
          f" per round, order shuffled every round), after {args.warmup} warm-up rounds;"
          f" random delay before each enqueue {args.delay_min:g}-{args.delay_max:g} ms."
          f" Latency = consumer's claim returned the job - producer's COMMIT returned, in ms.")
    print()
    print("| consumer | jobs | median | p90 | p99 | max | min |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind in CONSUMERS:
        v = sorted(samples[kind])
        print(f"| {LABEL[kind]} | {len(v)} | {statistics.median(v):.2f} | {percentile(v, 90):.2f}"
              f" | {percentile(v, 99):.2f} | {v[-1]:.2f} | {v[0]:.2f} |")
    print()
    print(f"Load average (1 min) at the start and every 100 rounds: min {min(loads):.2f},"
          f" median {statistics.median(loads):.2f}, max {max(loads):.2f}"
          f" ({len(loads)} readings); wall time {time.time() - started:.0f} s.")


def load1():
    """The 1-minute load average."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def recv(pipe, proc):
    """A message from a consumer; fails instead of hanging if it died."""
    while not pipe.poll(1.0):
        if not proc.is_alive():
            raise RuntimeError(f"consumer process exited with code {proc.exitcode}")
    return pipe.recv()


if __name__ == "__main__":
    main()
