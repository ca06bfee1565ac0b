#!/usr/bin/python3
"""Held-xmin and deep-churning-drain benchmark: pgq_cpp against the plain-SQL
baseline (bench/baseline.sql). Driven by bench/bloat.sh, which starts the
throwaway cluster; this file runs the workloads and writes the report.

    bloat.py run  DSN OUTDIR     runs everything, writes OUTDIR/results.json
    bloat.py report OUTDIR       prints the markdown report from results.json

Every client is its own OS process (multiprocessing), one connection each,
autocommit, so one job is one transaction per statement, as in the pgbench
scripts of bench/sql/.
"""
import json
import multiprocessing as mp
import os
import sys
import time
from array import array

import psycopg

SYSTEMS = ("baseline", "pgq")

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
PGQ_ENQ = "SELECT pgq.enqueue('bench', '{\"k\":1}')"
PGQ_CLAIM = "SELECT id, attempt FROM pgq.claim('bench', 1)"
PGQ_DONE = "SELECT pgq.complete(%s, %s)"

SIZE_SQL = {
    "baseline": "SELECT pg_total_relation_size('bench_jobs'), 0::bigint, "
                "(SELECT count(*) FROM bench_jobs)",
    "pgq": "SELECT pg_total_relation_size('pgq.jobs'), pg_total_relation_size('pgq.finished'), "
           "(SELECT count(*) FROM pgq.jobs)",
}


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
    sql = PGQ_ENQ if system == "pgq" else BASE_ENQ
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
    claim, done = (PGQ_CLAIM, PGQ_DONE) if system == "pgq" else (BASE_CLAIM, BASE_DONE)
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
            if system == "pgq":
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


def collect(out, n):
    prods, cons = [], []
    for _ in range(n):
        kind, a, b, c = out.get()
        if kind == "p":
            prods.append(array("d", a))
        else:
            lat = array("d", b)
            got = array("b", c[0])
            cons.append({"t": array("d", a), "lat": lat, "got": got,
                         "done": array("d", c[1]), "fails": c[2]})
    return prods, cons


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def sizes(admin, system):
    r = admin.execute(SIZE_SQL[system]).fetchone()
    return {"table_bytes": r[0] + r[1], "jobs_bytes": r[0], "finished_bytes": r[1], "rows": r[2]}


def reset(admin):
    tabs = admin.execute(
        "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') FROM pg_tables "
        "WHERE schemaname = 'pgq' AND tablename <> 'queues'").fetchone()[0]
    admin.execute(f"TRUNCATE bench_jobs, {tabs}")
    admin.execute("VACUUM ANALYZE")
    admin.execute("CHECKPOINT")


# --- held xmin ----------------------------------------------------------------

def held(dsn, system):
    pre, hold, post = env_int("PRE", 60), env_int("HOLD", 300), env_int("POST", 60)
    rate, step = env_int("RATE", 500), env_int("INTERVAL", 30)
    total = pre + hold + post
    admin = psycopg.connect(dsn, autocommit=True)
    reset(admin)
    out = mp.Queue()
    t0 = time.time() + 1.0
    never = mp.Event()
    procs = [mp.Process(target=producer, args=(dsn, system, "on", t0, t0 + total, rate, 0, out))]
    procs += [mp.Process(target=consumer, args=(dsn, system, "on", t0, total, never, 0.002, out))
              for _ in range(2)]
    for p in procs:
        p.start()
    samples = []   # (t, sizes)
    holder = None
    boundaries = list(range(0, total + 1, step))
    for bt in boundaries:
        d = t0 + bt - time.time()
        if d > 0:
            time.sleep(d)
        if bt == pre:
            holder = psycopg.connect(dsn)   # not autocommit: BEGIN implicit
            holder.execute("SELECT txid_current()")  # takes an xid: holds VACUUM's horizon
        if bt == pre + hold and holder is not None:
            holder.commit()
            holder.close()
            holder = None
        samples.append((bt, sizes(admin, system)))
    prods, cons = collect(out, len(procs))
    for p in procs:
        p.join()
    enq = sum(len(p) for p in prods)
    rows = []
    for i in range(len(boundaries) - 1):
        lo, hi = boundaries[i], boundaries[i + 1]
        lats, n_claims, n_empty, n_done = [], 0, 0, 0
        for c in cons:
            for t, l, g in zip(c["t"], c["lat"], c["got"]):
                if lo <= t < hi:
                    n_claims += 1
                    if g:
                        lats.append(l)
                    else:
                        n_empty += 1
            n_done += sum(1 for t in c["done"] if lo <= t < hi)
        n_enq = sum(sum(1 for t in p if lo <= t < hi) for p in prods)
        phase = "before" if hi <= pre else ("hold" if hi <= pre + hold else "after")
        rows.append({"from": lo, "to": hi, "phase": phase, "enq_s": n_enq / (hi - lo),
                     "done_s": n_done / (hi - lo),
                     "p50_ms": (pct(lats, 50) or 0) * 1000, "p99_ms": (pct(lats, 99) or 0) * 1000,
                     "claims": n_claims, "empty": n_empty,
                     "size_end": samples[i + 1][1], "size_start": samples[i][1]})
    res = {"pre": pre, "hold": hold, "post": post, "rate": rate, "interval": step,
           "enqueued": enq, "completed": sum(len(c["done"]) for c in cons),
           "fails": sum(c["fails"] for c in cons), "size0": samples[0][1],
           "size_final": sizes(admin, system), "rows": rows}
    admin.close()
    return res


# --- deep churning drain ------------------------------------------------------

def drain(dsn, system):
    total = env_int("DRAIN_JOBS", 200000)
    n_prod, n_cons = 2, 4
    admin = psycopg.connect(dsn, autocommit=True)
    reset(admin)
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
    prods, cons = collect(out, n_prod + n_cons)
    for p in prods_p + cons_p:
        p.join()
    enq_all = sorted(t for p in prods for t in p)
    done_all = sorted(t for c in cons for t in c["done"])
    start = 0.0
    end = done_all[-1] if done_all else 0.0
    prod_end = enq_all[-1] if enq_all else 0.0
    # backlog peak from timestamps
    peak = 0
    import bisect
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


# --- report -------------------------------------------------------------------

def kb(b):
    return f"{b / 1024:,.0f}"


def ratio(a, b):
    return f"{a / b:.2f}x" if b else "n/a"


def report(outdir):
    r = json.load(open(os.path.join(outdir, "results.json")))
    L = []
    if "held" in r:
        hb, hp = r["held"]["baseline"], r["held"]["pgq"]
        L.append("## 1. Held xmin (synchronous_commit = on)")
        L.append("")
        L.append(f"1 producer paced at {hb['rate']} jobs/s (1 enqueue per transaction), 2 consumers "
                 f"claiming + completing 1 job at a time (2 ms sleep after an empty claim). "
                 f"{hb['pre']} s steady, then `BEGIN; SELECT txid_current();` idle for {hb['hold']} s, "
                 f"commit, {hb['post']} s more. Latency = the claim statement's round trip as seen by "
                 f"the consumer, claims that returned a job. Size = pg_total_relation_size at the end "
                 f"of the interval (baseline: bench_jobs; pgq: pgq.jobs + pgq.finished).")
        L.append("")
        L.append("| interval (s) | phase | base done/s | pgq done/s | ratio | base claim p50/p99 ms | pgq claim p50/p99 ms | p99 ratio | base size kB | pgq size kB (jobs+finished) | size ratio | base/pgq rows left |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for a, b in zip(hb["rows"], hp["rows"]):
            L.append(f"| {a['from']}-{a['to']} | {a['phase']} | {a['done_s']:.0f} | {b['done_s']:.0f} | "
                     f"{ratio(b['done_s'], a['done_s'])} | {a['p50_ms']:.2f} / {a['p99_ms']:.2f} | "
                     f"{b['p50_ms']:.2f} / {b['p99_ms']:.2f} | {ratio(b['p99_ms'], a['p99_ms'])} | "
                     f"{kb(a['size_end']['table_bytes'])} | {kb(b['size_end']['table_bytes'])} "
                     f"({kb(b['size_end']['jobs_bytes'])}+{kb(b['size_end']['finished_bytes'])}) | "
                     f"{ratio(b['size_end']['table_bytes'], a['size_end']['table_bytes'])} | "
                     f"{a['size_end']['rows']} / {b['size_end']['rows']} |")
        L.append("")
        L.append("| system | enqueued | completed | lost completes | size at start kB | size end of hold kB | size at the end kB | growth per 1,000 jobs during hold (kB) | empty claims |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, h in (("baseline", hb), ("pgq", hp)):
            pre_end = [x for x in h["rows"] if x["to"] == h["pre"]]
            hold_end = [x for x in h["rows"] if x["to"] == h["pre"] + h["hold"]]
            s_pre = pre_end[0]["size_end"]["table_bytes"] if pre_end else h["size0"]["table_bytes"]
            s_hold = hold_end[0]["size_end"]["table_bytes"] if hold_end else 0
            jobs_hold = sum(x["done_s"] * (x["to"] - x["from"]) for x in h["rows"] if x["phase"] == "hold")
            growth = (s_hold - s_pre) / 1024 / (jobs_hold / 1000) if jobs_hold else 0
            L.append(f"| {name} | {h['enqueued']} | {h['completed']} | {h['fails']} | "
                     f"{kb(h['size0']['table_bytes'])} | {kb(s_hold)} | {kb(h['size_final']['table_bytes'])} | "
                     f"{growth:.1f} | {sum(x['empty'] for x in h['rows'])} |")
        L.append("")
    if "drain" in r:
        db, dp = r["drain"]["baseline"], r["drain"]["pgq"]
        L.append("## 2. Deep churning drain (synchronous_commit = off)")
        L.append("")
        L.append(f"2 unthrottled producers (1 enqueue per transaction) push {db['jobs']:,} jobs while 4 "
                 f"consumers claim + complete 1 at a time (1 ms sleep after an empty claim); the drain "
                 f"ends when the last job is completed.")
        L.append("")
        L.append("| | baseline | pgq | pgq/baseline |")
        L.append("|---|---:|---:|---:|")
        def row(label, a, b, fmt="{:,.0f}", rat=True):
            L.append(f"| {label} | {fmt.format(a)} | {fmt.format(b)} | {ratio(b, a) if rat else ''} |")
        row("drain total time (s)", db["time_s"], dp["time_s"], "{:,.1f}")
        row("drain jobs/s (completed / total time)", db["jobs_s"], dp["jobs_s"])
        row("producers finished at (s)", db["producers_end_s"], dp["producers_end_s"], "{:,.1f}")
        row("producer enqueue rate (jobs/s)", db["enq_s"], dp["enq_s"])
        row("peak backlog (jobs)", db["backlog_peak"], dp["backlog_peak"])
        row("consumers jobs/s, first 25% of the run", db["quarters"][0]["done_s"], dp["quarters"][0]["done_s"])
        row("consumers jobs/s, last 25% of the run", db["quarters"][3]["done_s"], dp["quarters"][3]["done_s"])
        row("last 25% / first 25%", db["quarters"][3]["done_s"] / max(db["quarters"][0]["done_s"], 1e-9),
            dp["quarters"][3]["done_s"] / max(dp["quarters"][0]["done_s"], 1e-9), "{:.2f}", False)
        row("peak size while producing (kB)", db["size_peak"]["table_bytes"] / 1024, dp["size_peak"]["table_bytes"] / 1024)
        row("size at the end (kB)", db["size_end"]["table_bytes"] / 1024, dp["size_end"]["table_bytes"] / 1024)
        row("completed / lost completes", db["completed"], dp["completed"], "{:,}", False)
        L.append("")
        L.append("Per quarter of each system's own run time:")
        L.append("")
        L.append("| quarter | base time (s) | base enq/s | base done/s | base claim p50/p99 ms | base backlog at end | pgq time (s) | pgq enq/s | pgq done/s | pgq claim p50/p99 ms | pgq backlog at end | done/s ratio |")
        L.append("|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
        for i, (a, b) in enumerate(zip(db["quarters"], dp["quarters"])):
            L.append(f"| Q{i + 1} | {a['from']:.0f}-{a['to']:.0f} | {a['enq_s']:,.0f} | {a['done_s']:,.0f} | "
                     f"{a['p50_ms']:.2f} / {a['p99_ms']:.2f} | {a['backlog_end']:,} | "
                     f"{b['from']:.0f}-{b['to']:.0f} | {b['enq_s']:,.0f} | {b['done_s']:,.0f} | "
                     f"{b['p50_ms']:.2f} / {b['p99_ms']:.2f} | {b['backlog_end']:,} | "
                     f"{ratio(b['done_s'], a['done_s'])} |")
        L.append("")
        L.append(f"Lost completes (pgq.complete returned false): baseline n/a, pgq {dp['fails']}.")
        L.append("")
    print("\n".join(L))


def main():
    if sys.argv[1] == "report":
        report(sys.argv[2])
        return
    dsn, outdir = sys.argv[2], sys.argv[3]
    parts = os.environ.get("PARTS", "held drain").split()
    path = os.path.join(outdir, "results.json")
    r = json.load(open(path)) if os.path.exists(path) else {}
    r.setdefault("meta", {})
    for part in parts:
        r[part] = {}
        for system in SYSTEMS:
            t = time.time()
            print(f"==> {part} {system} ...", file=sys.stderr, flush=True)
            r[part][system] = (held if part == "held" else drain)(dsn, system)
            print(f"    done in {time.time() - t:.0f} s", file=sys.stderr, flush=True)
            json.dump(r, open(path, "w"), indent=1)


if __name__ == "__main__":
    mp.set_start_method("fork")
    main()
