#!/usr/bin/python3
"""Held-xmin, active-readers and deep-churning-drain benchmark: pgq_cpp against
the plain-SQL baseline (bench/baseline.sql), pgq_cpp twice: the queue 'bench'
(pgq) and the queue 'bench_ring' (pgqr), dropped and created again before each
run. Both keep their jobs on rings since release 3.0 (ADR 0028; before it, pgq
was a table queue and pgqr one made with a development setting): SYSTEMS,
default "baseline pgq pgqr". Driven by bench/bloat.sh, which
starts the throwaway cluster; this file runs the workloads, and
bench/bloat_report.py writes the report and the charts.

    bloat.py run DSN OUTDIR     runs the PARTS, writes OUTDIR/results.json

Parts (PARTS, default "held readers drain"):
  held     steady state for PRE s, then a session holding a txid open for HOLD
           s, then released, POST s more;
  readers  steady state for PRE s, then READERS overlapping REPEATABLE READ
           sessions scanning the queue table for READ s (each transaction open
           READ_XACT s, staggered, a full scan every READ_EVERY s), POST s more;
  drain    DRAIN_JOBS pushed by 2 unthrottled producers while 4 consumers drain.

Every client is its own OS process (multiprocessing), one connection each,
autocommit, so one job is one transaction per statement, as in the pgbench
scripts of bench/sql/.
"""
import bisect
import json
import multiprocessing as mp
import os
import sys
import time
from array import array

import psycopg

SYSTEMS = tuple(os.environ.get("SYSTEMS", "baseline pgq pgqr").split())
RING_QUEUE = "bench_ring"

BASE_ENQ = "INSERT INTO bench_jobs (queue, payload) VALUES ('bench', '{\"k\":1}') RETURNING id"
BASE_CLAIM = """UPDATE bench_jobs
   SET status = 'running', attempts = attempts + 1, lease_until = now() + interval '2 min'
 WHERE id IN (SELECT id FROM bench_jobs
               WHERE queue = 'bench' AND status = 'pending' AND run_at <= now()
               ORDER BY priority DESC, run_at, id
               LIMIT 1
               FOR UPDATE SKIP LOCKED)
RETURNING id, attempts"""
BASE_DONE = "DELETE FROM bench_jobs WHERE id = %s"
# PGQ_ENQ_ARGS: more arguments of pgq.enqueue, e.g. ", dedupe_key =>
# gen_random_uuid()::text" (a job with a key of its own: its key's row in
# pgq.dedupe_holds, ADR 0028).
PGQ_ENQ_ARGS = os.environ.get("PGQ_ENQ_ARGS", "")
PGQ_ENQ = "SELECT pgq.enqueue('bench', '{\"k\":1}'" + PGQ_ENQ_ARGS + ")"
PGQ_CLAIM = "SELECT id, attempt FROM pgq.claim('bench', 1)"
PGQ_DONE = "SELECT pgq.complete(%s, %s)"
PGQR_ENQ = f"SELECT pgq.enqueue('{RING_QUEUE}', '{{\"k\":1}}'" + PGQ_ENQ_ARGS + ")"
PGQR_CLAIM = f"SELECT id, attempt FROM pgq.claim('{RING_QUEUE}', 1)"
ENQ = {"baseline": BASE_ENQ, "pgq": PGQ_ENQ, "pgqr": PGQR_ENQ}
CLAIM_DONE = {"baseline": (BASE_CLAIM, BASE_DONE), "pgq": (PGQ_CLAIM, PGQ_DONE),
              "pgqr": (PGQR_CLAIM, PGQ_DONE)}

# The active readers' full scan of the queue table.
READ_SQL = {
    "baseline": "SELECT count(*), max(payload::text) FROM bench_jobs",
    "pgq": "SELECT count(*), max(payload::text) FROM pgq.jobs",
    # The rows of the rings (pgq.job_log's partitions: the ring queue's).
    "pgqr": "SELECT count(*), max(payload::text) FROM pgq.job_log",
}

# Sizes: pg_total_relation_size (heap, TOAST, indexes). pgq: every table of the
# schema but pgq.queues (the tables reset() empties), the rings' segments
# included, with its job storage (pgq.job_rows and the segments) and
# pgq.finished also on their own, so a change of storage layout is still
# counted. pgqr: the same tables plus the ring's segments (the
# partitions pgq.job_log_<ring>_<n>), the segments on their own as its "jobs"
# (pgq.jobs is in its "other": a ring queue's plain jobs never go there here).
# The last two columns: dead tuples (pg_stat_user_tables.n_dead_tup) of the job
# storage (bench_jobs; pgq.jobs; the ring's segments) and, for pgqr, of
# pgq.jobs.
PGQ_TABLES_SIZE = ("(SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint "
                   "   FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace "
                   "  WHERE s.nspname = 'pgq' AND c.relkind = 'r' AND c.relname <> 'queues' "
                   "    AND c.relname NOT LIKE 'job\\_log%')")
RING_SEGMENTS = ("SELECT c.oid, c.relname FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace "
                 " WHERE s.nspname = 'pgq' AND c.relkind = 'r' AND c.relname LIKE 'job\\_log\\_%'")
SIZE_SQL = {
    "baseline": "SELECT pg_total_relation_size('bench_jobs'), pg_total_relation_size('bench_jobs'), "
                "0::bigint, (SELECT count(*) FROM bench_jobs), "
                "(SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'bench_jobs'::regclass), 0::bigint",
    # Since release 3.0 the queue 'bench' keeps its plain jobs on a ring too:
    # its job storage is pgq.job_rows and the rings' segments (until
    # 2026-12-06 the segments were left out of pgq's size).
    "pgq": f"SELECT {PGQ_TABLES_SIZE} + (SELECT coalesce(sum(pg_total_relation_size(oid)), 0)::bigint FROM ({RING_SEGMENTS}) r), "
           "coalesce(pg_total_relation_size(to_regclass('pgq.job_rows')), 0) "
           f"  + (SELECT coalesce(sum(pg_total_relation_size(oid)), 0)::bigint FROM ({RING_SEGMENTS}) r), "
           "coalesce(pg_total_relation_size(to_regclass('pgq.finished')), 0), "
           "(SELECT count(*) FROM pgq.jobs), "
           "(SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'pgq.job_rows'::regclass) "
           f"  + (SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables WHERE relid IN (SELECT oid FROM ({RING_SEGMENTS}) r)) "
           "  + (SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables "
           "      WHERE relid IN ('pgq.dedupe_holds'::regclass, 'pgq.group_holds'::regclass)), "
           "0::bigint",
    "pgqr": f"SELECT {PGQ_TABLES_SIZE} + (SELECT coalesce(sum(pg_total_relation_size(oid)), 0)::bigint FROM ({RING_SEGMENTS}) r), "
            f"(SELECT coalesce(sum(pg_total_relation_size(oid)), 0)::bigint FROM ({RING_SEGMENTS}) r), "
            "coalesce(pg_total_relation_size(to_regclass('pgq.finished')), 0), "
            "(SELECT count(*) FROM pgq.jobs) "
            "  + (SELECT coalesce(count(*) FILTER (WHERE kind = 'e') - count(*) FILTER (WHERE kind = 'c'), 0) "
            "       FROM pgq.job_log l JOIN pgq.queues q ON q.ring_id = l.ring WHERE q.name = 'bench_ring'), "
            f"(SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables WHERE relid IN (SELECT oid FROM ({RING_SEGMENTS}) r)), "
            "(SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'pgq.job_rows'::regclass)",
}
# pgqr, per sample: each segment's size and dead tuples (how the ring turns).
SEGMENTS_SQL = (f"SELECT r.relname, pg_total_relation_size(r.oid), coalesce(t.n_dead_tup, 0), "
                f"coalesce(t.n_tup_ins, 0) FROM ({RING_SEGMENTS}) r "
                f"LEFT JOIN pg_stat_user_tables t ON t.relid = r.oid ORDER BY r.relname")


def env_int(name, default):
    return int(os.environ.get(name, default))


def connect(dsn, sync_commit):
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f"SET synchronous_commit = {sync_commit}")
    conn.execute("SET application_name = 'pgq_bloat'")
    return conn


# --- clients ------------------------------------------------------------------

def producer(dsn, system, sync_commit, t0, stop_at, rate, count, out, fin=None):
    """Enqueue one job per transaction: paced at `rate` jobs/s until stop_at, or
    unthrottled until `count` jobs. Returns the enqueue timestamps."""
    conn = connect(dsn, sync_commit)
    sql = ENQ[system]
    ts = array("d")
    i = 0
    while True:
        if rate:
            due = t0 + i / rate
            if due >= stop_at:
                break
            d = due - time.time()
            if d > 0:
                time.sleep(d)
        elif i >= count:
            break
        conn.execute(sql).fetchone()
        ts.append(time.time() - t0)
        i += 1
    conn.close()
    if fin is not None:
        fin.set()
    out.put(("p", ts.tobytes(), None, None))


def consumer(dsn, system, sync_commit, t0, stop_at, done_evt, idle_sleep, out, counter=None, target=0):
    """Claim one job, complete it, as fast as possible. Records every claim
    statement: end time, latency, whether it got a job. Stops at stop_at, or
    (drain) when the producers are done and a claim comes back empty."""
    conn = connect(dsn, sync_commit)
    claim, done = CLAIM_DONE[system]
    t_end, lat, got, t_done = array("d"), array("d"), array("b"), array("d")
    fails = 0
    while True:
        a = time.time()
        if stop_at and a - t0 >= stop_at:
            break
        if counter is not None and counter.value >= target:
            break
        row = conn.execute(claim).fetchone()
        b = time.time()
        t_end.append(b - t0)
        lat.append(b - a)
        got.append(1 if row else 0)
        if row:
            if system != "baseline":
                ok = conn.execute(done, (row[0], row[1])).fetchone()[0]
                if not ok:
                    fails += 1
            else:
                conn.execute(done, (row[0],))
            t_done.append(time.time() - t0)
            if counter is not None:
                with counter.get_lock():
                    counter.value += 1
        else:
            time.sleep(idle_sleep)
    conn.close()
    out.put(("c", t_end.tobytes(), lat.tobytes(), (got.tobytes(), t_done.tobytes(), fails)))


def reader(dsn, system, idx, n_readers, t0, start, stop, xact_s, every_s, out):
    """An active reader, from t0+start to t0+stop: REPEATABLE READ transactions
    of xact_s seconds back to back, a full scan of the queue table at the start
    of each and every every_s within it. Reader idx's first transaction lasts
    (idx + 1) / n_readers of xact_s, so the readers' commits are staggered and
    at every moment each of them holds a snapshot (and a lock on the table)."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("SET application_name = 'pgq_bloat_reader'")
    sql = READ_SQL[system]
    scan_t, scan_ms, xacts = array("d"), array("d"), []
    d = t0 + start - time.time()
    if d > 0:
        time.sleep(d)
    end = start + xact_s * (idx + 1) / n_readers
    while time.time() - t0 < stop:
        end = min(end, stop)
        began = time.time() - t0
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        while True:
            a = time.time()
            conn.execute(sql).fetchone()
            b = time.time()
            scan_t.append(b - t0)
            scan_ms.append((b - a) * 1000)
            if b >= t0 + end:
                break
            time.sleep(max(0.0, min(a + every_s, t0 + end) - time.time()))
            if time.time() >= t0 + end:
                break
        conn.execute("COMMIT")
        xacts.append((began, time.time() - t0))
        end += xact_s
    conn.close()
    out.put(("r", scan_t.tobytes(), scan_ms.tobytes(), xacts))


def collect(out, n):
    prods, cons, readers = [], [], []
    for _ in range(n):
        kind, a, b, c = out.get()
        if kind == "p":
            prods.append(array("d", a))
        elif kind == "r":
            readers.append({"t": array("d", a), "ms": array("d", b), "xacts": c})
        else:
            lat = array("d", b)
            got = array("b", c[0])
            cons.append({"t": array("d", a), "lat": lat, "got": got,
                         "done": array("d", c[1]), "fails": c[2]})
    return prods, cons, readers


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def sizes(admin, system):
    r = admin.execute(SIZE_SQL[system]).fetchone()
    s = {"table_bytes": r[0], "jobs_bytes": r[1], "finished_bytes": r[2],
         "other_bytes": r[0] - r[1] - r[2], "rows": r[3], "dead": r[4] or 0}
    if system == "pgqr":
        s["dead_jobs_table"] = r[5] or 0
        s["segments"] = [list(x) for x in admin.execute(SEGMENTS_SQL).fetchall()]
    return s


def drop_ring_queue(admin):
    admin.execute("SELECT pgq.drop_queue(name, true) FROM pgq.queues WHERE name = %s", (RING_QUEUE,))


def reset(admin, system=None):
    """Empties the tables (not the rings': the ring queue's lane in shared
    memory knows what its segments hold). The ring queue is dropped, and for
    pgqr created again."""
    drop_ring_queue(admin)
    tabs = admin.execute(
        "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') FROM pg_tables "
        "WHERE schemaname = 'pgq' AND tablename NOT IN ('queues', 'segment_rings', 'rings', 'ring_segments') "
        "  AND tablename NOT LIKE 'job\\_log%'").fetchone()[0]
    admin.execute(f"TRUNCATE bench_jobs, {tabs}")
    if system == "pgqr":
        admin.execute("SELECT pgq.create_queue(%s)", (RING_QUEUE,))
        if admin.execute("SELECT ring_id FROM pgq.queues WHERE name = %s", (RING_QUEUE,)).fetchone()[0] is None:
            sys.exit("bench_ring has no ring (the library not preloaded?)")
    admin.execute("VACUUM ANALYZE")
    admin.execute("CHECKPOINT")


# --- held xmin and active readers ---------------------------------------------

def window(prods, cons, readers, lo, hi):
    """What happened in [lo, hi): jobs/s enqueued and completed, claim latency
    of the claims that got a job, empty claims, reader scans."""
    lats, n_claims, n_empty, n_done = [], 0, 0, 0
    for c in cons:
        i, j = bisect.bisect_left(c["t"], lo), bisect.bisect_left(c["t"], hi)
        for k in range(i, j):
            n_claims += 1
            if c["got"][k]:
                lats.append(c["lat"][k])
            else:
                n_empty += 1
        n_done += bisect.bisect_left(c["done"], hi) - bisect.bisect_left(c["done"], lo)
    n_enq = sum(bisect.bisect_left(p, hi) - bisect.bisect_left(p, lo) for p in prods)
    scans = [ms for r in readers for t, ms in zip(r["t"], r["ms"]) if lo <= t < hi]
    return {"from": lo, "to": hi, "enq_s": n_enq / (hi - lo), "done_s": n_done / (hi - lo),
            "done": n_done, "p50_ms": (pct(lats, 50) or 0) * 1000,
            "p99_ms": (pct(lats, 99) or 0) * 1000, "claims": n_claims, "empty": n_empty,
            "scans": len(scans), "scan_p50_ms": pct(scans, 50) or 0,
            "scan_max_ms": max(scans) if scans else 0}


def overlap(readers, lo, hi, n):
    """Share of [lo, hi) with at least one reader transaction open, and with all n."""
    ev = []
    for r in readers:
        for b, e in r["xacts"]:
            ev += [(max(b, lo), 1), (min(e, hi), -1)]
    ev.sort()
    open_, last, any_s, all_s = 0, lo, 0.0, 0.0
    for t, d in ev:
        if open_ >= 1:
            any_s += t - last
        if open_ >= n:
            all_s += t - last
        open_, last = open_ + d, t
    span = hi - lo
    return (any_s / span if span else 0), (all_s / span if span else 0)


def phased(dsn, system, kind):
    """Steady state for PRE s, the middle phase (held: a txid held open for HOLD s;
    readers: the active readers for READ s), then POST s: throughput, claim
    latency and sizes per INTERVAL, and per phase."""
    pre, post, step = env_int("PRE", 60), env_int("POST", 60), env_int("INTERVAL", 30)
    mid = env_int("HOLD", 300) if kind == "held" else env_int("READ", env_int("HOLD", 300))
    mid_name = "hold" if kind == "held" else "readers"
    rate = env_int("RATE", 150)
    n_readers, xact_s = env_int("READERS", 4), env_int("READ_XACT", 10)
    every_s = float(os.environ.get("READ_EVERY", 1))
    total = pre + mid + post
    admin = psycopg.connect(dsn, autocommit=True)
    reset(admin, system)
    out = mp.Queue()
    t0 = time.time() + 1.0
    never = mp.Event()
    procs = [mp.Process(target=producer, args=(dsn, system, "on", t0, t0 + total, rate, 0, out))]
    procs += [mp.Process(target=consumer, args=(dsn, system, "on", t0, total, never, 0.002, out))
              for _ in range(2)]
    if kind == "readers":
        procs += [mp.Process(target=reader, args=(dsn, system, i, n_readers, t0, pre, pre + mid,
                                                  xact_s, every_s, out))
                  for i in range(n_readers)]
    for p in procs:
        p.start()
    samples = []   # (t, sizes)
    holder = None
    boundaries = list(range(0, total + 1, step))
    for bt in boundaries:
        d = t0 + bt - time.time()
        if d > 0:
            time.sleep(d)
        if kind == "held" and bt == pre:
            holder = psycopg.connect(dsn)   # not autocommit: BEGIN implicit
            holder.execute("SELECT txid_current()")  # takes an xid: holds VACUUM's horizon
        if bt == pre + mid and holder is not None:
            holder.commit()
            holder.close()
            holder = None
        samples.append((bt, sizes(admin, system)))
    prods, cons, readers = collect(out, len(procs))
    for p in procs:
        p.join()
    rows = []
    for i in range(len(boundaries) - 1):
        lo, hi = boundaries[i], boundaries[i + 1]
        row = window(prods, cons, readers, lo, hi)
        row["phase"] = "before" if hi <= pre else (mid_name if hi <= pre + mid else "after")
        row["size_start"], row["size_end"] = samples[i][1], samples[i + 1][1]
        rows.append(row)
    size_at = dict(samples)
    phases = {}
    for name, lo, hi in (("before", 0, pre), (mid_name, pre, pre + mid), ("after", pre + mid, total)):
        ph = window(prods, cons, readers, lo, hi)
        ph["size_start"], ph["size_end"] = size_at.get(lo), size_at.get(hi)
        phases[name] = ph
    res = {"kind": kind, "mid": mid_name, "pre": pre, "hold": mid, "post": post, "rate": rate,
           "interval": step, "enqueued": sum(len(p) for p in prods),
           "completed": sum(len(c["done"]) for c in cons),
           "fails": sum(c["fails"] for c in cons), "size0": samples[0][1],
           "size_final": sizes(admin, system), "rows": rows, "phases": phases}
    if kind == "readers":
        any_open, all_open = overlap(readers, pre, pre + mid, n_readers)
        lens = [e - b for r in readers for b, e in r["xacts"]]
        scans = [ms for r in readers for ms in r["ms"]]
        res["readers"] = {"n": n_readers, "xact_s": xact_s, "every_s": every_s,
                          "xacts": len(lens), "xact_mean_s": sum(lens) / len(lens) if lens else 0,
                          "xact_max_s": max(lens) if lens else 0, "scans": len(scans),
                          "scan_p50_ms": pct(scans, 50) or 0, "scan_p99_ms": pct(scans, 99) or 0,
                          "share_any_open": any_open, "share_all_open": all_open,
                          "sql": READ_SQL[system]}
    admin.close()
    return res


# --- deep churning drain ------------------------------------------------------

def drain(dsn, system):
    total = env_int("DRAIN_JOBS", 200000)
    n_prod, n_cons = 2, 4
    admin = psycopg.connect(dsn, autocommit=True)
    reset(admin, system)
    out = mp.Queue()
    done_evt = mp.Event()
    t0 = time.time() + 1.0
    per = [total // n_prod + (1 if i < total % n_prod else 0) for i in range(n_prod)]
    fins = [mp.Event() for _ in range(n_prod)]
    prods_p = [mp.Process(target=producer, args=(dsn, system, "off", t0, None, 0, per[i], out, fins[i]))
               for i in range(n_prod)]
    counter = mp.Value("q", 0)
    cons_p = [mp.Process(target=consumer, args=(dsn, system, "off", t0, env_int("DRAIN_MAX", 600),
                                                done_evt, 0.001, out, counter, total))
              for _ in range(n_cons)]
    for p in prods_p + cons_p:
        p.start()
    size_peak = sizes(admin, system)
    for f in fins:
        while not f.wait(1):
            s = sizes(admin, system)
            if s["table_bytes"] > size_peak["table_bytes"]:
                size_peak = s
    done_evt.set()
    prods, cons, _ = collect(out, n_prod + n_cons)
    for p in prods_p + cons_p:
        p.join()
    enq_all = sorted(t for p in prods for t in p)
    done_all = sorted(t for c in cons for t in c["done"])
    start = 0.0
    end = done_all[-1] if done_all else 0.0
    prod_end = enq_all[-1] if enq_all else 0.0
    # backlog peak from timestamps
    peak = 0
    for k in range(0, len(enq_all), 500):
        t = enq_all[k]
        peak = max(peak, k + 1 - bisect.bisect_right(done_all, t))
    quarters = []
    for q in range(4):
        lo, hi = end * q / 4, end * (q + 1) / 4
        n = bisect.bisect_left(done_all, hi) - bisect.bisect_left(done_all, lo)
        lats = [l for c in cons for t, l, g in zip(c["t"], c["lat"], c["got"]) if g and lo <= t < hi]
        e = bisect.bisect_left(enq_all, hi) - bisect.bisect_left(enq_all, lo)
        backlog = bisect.bisect_right(enq_all, hi) - bisect.bisect_right(done_all, hi)
        quarters.append({"from": lo, "to": hi, "done_s": n / (hi - lo) if hi > lo else 0,
                         "enq_s": e / (hi - lo) if hi > lo else 0,
                         "p50_ms": (pct(lats, 50) or 0) * 1000, "p99_ms": (pct(lats, 99) or 0) * 1000,
                         "backlog_end": backlog})
    res = {"jobs": total, "enqueued": len(enq_all), "completed": len(done_all),
           "fails": sum(c["fails"] for c in cons),
           "time_s": end - start, "jobs_s": len(done_all) / (end - start) if end > start else 0,
           "producers_end_s": prod_end, "enq_s": len(enq_all) / prod_end if prod_end else 0,
           "backlog_peak": peak, "size_peak": size_peak, "size_end": sizes(admin, system),
           "quarters": quarters}
    admin.close()
    return res


def main():
    if sys.argv[1] != "run":
        sys.exit("usage: bloat.py run DSN OUTDIR   (the report: bloat_report.py)")
    dsn, outdir = sys.argv[2], sys.argv[3]
    parts = os.environ.get("PARTS", "held readers drain").split()
    path = os.path.join(outdir, "results.json")
    r = json.load(open(path)) if os.path.exists(path) else {}
    r.setdefault("meta", {})
    for part in parts:
        if part not in ("held", "readers", "drain"):
            sys.exit(f"unknown part {part!r} (held, readers, drain)")
        r[part] = {}
        for system in SYSTEMS:
            t = time.time()
            print(f"==> {part} {system} ...", file=sys.stderr, flush=True)
            r[part][system] = drain(dsn, system) if part == "drain" else phased(dsn, system, part)
            print(f"    done in {time.time() - t:.0f} s", file=sys.stderr, flush=True)
            json.dump(r, open(path, "w"), indent=1)


if __name__ == "__main__":
    mp.set_start_method("fork")
    main()
