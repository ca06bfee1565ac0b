#!/usr/bin/env python3
"""Turns bench/results-latest-runs.csv (one line per pgbench run) into the
markdown tables of bench/results-latest.md: medians, ratios, targets."""

import csv
import statistics
import sys
from collections import defaultdict

# workload -> (label, what a job is, minimum pgq/baseline ratio)
WORKLOADS = {
    "enqueue": ("enqueue, 1 per xact", 0.95),
    "enqueue_many": ("enqueue_many, 100 per xact", 0.90),
    "claim1": ("claim+complete n=1", 0.95),
    "claim10": ("claim+complete n=10", 1.00),
    "claim100": ("claim+complete n=100", 1.00),
}


def fmt(x, digits=0):
    return f"{x:,.{digits}f}"


def spread(values):
    """Max-min range as a percentage of the median."""
    med = statistics.median(values)
    if med == 0 or len(values) < 2:
        return "-"
    return f"±{(max(values) - min(values)) / med * 50:.0f}%"


def main(path):
    runs = defaultdict(list)  # (workload, clients, system) -> [row]
    order = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["workload"], int(row["clients"]), row["system"])
            if (row["workload"], int(row["clients"])) not in order:
                order.append((row["workload"], int(row["clients"])))
            runs[key].append(row)

    def jobs_s(r):
        xacts = int(r["xacts"])
        return float(r["tps"]) * (int(r["jobs"]) / xacts) if xacts else 0.0

    def med(key, field):
        rows = runs.get(key, [])
        if not rows:
            return None
        if field == "jobs_s":
            vals = [jobs_s(r) for r in rows]
        else:
            vals = [float(r[field]) for r in rows]
        return statistics.median(vals), vals

    def latencies(key):
        rows = runs.get(key, [])
        cols = [r["stmt_latency_ms"].split("/") for r in rows if r["stmt_latency_ms"]]
        if not cols:
            return "-"
        width = min(len(c) for c in cols)
        return " + ".join(f"{statistics.median(float(c[i]) for c in cols):.3f}" for i in range(width))

    failed = [r for rs in runs.values() for r in rs if r["rc"] != "0"]

    out = []
    out.append("## pgq vs the plain-SQL baseline\n")
    out.append("Medians over the runs; jobs/s = TPS x jobs per transaction (counted in the "
               "tables after each run). pgq/baseline = median pgq jobs/s / median baseline "
               "jobs/s: the figure the targets are judged on. Paired = the median of the "
               "per-round ratios (each round runs baseline then pgq back to back), a cross-check "
               "less sensitive to drift between rounds. Noise = half the min-max range of the "
               "runs' TPS, as % of the median.\n")
    out.append("| workload | clients | baseline TPS | pgq TPS | baseline jobs/s | pgq jobs/s "
               "| pgq/baseline | target | met? | paired | noise base / pgq |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|:---:|---:|---:|")
    verdicts = defaultdict(list)
    for workload, clients in order:
        if workload not in WORKLOADS:
            continue
        label, target = WORKLOADS[workload]
        b, p = (workload, clients, "baseline"), (workload, clients, "pgq")
        if b not in runs or p not in runs:
            continue
        (b_tps, b_all), (p_tps, p_all) = med(b, "tps"), med(p, "tps")
        (b_jobs, _), (p_jobs, _) = med(b, "jobs_s"), med(p, "jobs_s")
        ratio = p_jobs / b_jobs if b_jobs else 0.0
        b_by_run = {r["run"]: jobs_s(r) for r in runs[b]}
        pairs = [jobs_s(r) / b_by_run[r["run"]] for r in runs[p]
                 if b_by_run.get(r["run"])]
        paired = f"{statistics.median(pairs):.2f}x" if pairs else "-"
        ok = ratio >= target
        verdicts[workload].append((clients, ratio, ok))
        out.append(f"| {label} | {clients} | {fmt(b_tps)} | {fmt(p_tps)} | {fmt(b_jobs)} | "
                   f"{fmt(p_jobs)} | **{ratio:.2f}x** | >= {target:.2f}x | "
                   f"{'yes' if ok else 'NO'} | {paired} | {spread(b_all)} / {spread(p_all)} |")

    out.append("\n### Targets\n")
    for workload, (label, target) in WORKLOADS.items():
        v = verdicts.get(workload)
        if not v:
            continue
        missed = [(c, r) for c, r, ok in v if not ok]
        if not missed:
            out.append(f"- {label} (>= {target:.2f}x): **met** at every client count "
                       f"({', '.join(f'c={c}: {r:.2f}x' for c, r, _ in v)}).")
        else:
            out.append(f"- {label} (>= {target:.2f}x): **missed** at "
                       f"{', '.join(f'c={c} ({r:.2f}x, {(target - r) * 100:.0f} points short)' for c, r in missed)}"
                       f"; all: {', '.join(f'c={c}: {r:.2f}x' for c, r, _ in v)}.")

    if any(w == "ceiling" for w, _ in order):
        out.append("\n## PostgreSQL's ceiling on the same cluster\n")
        out.append("| clients | `SELECT 1` TPS | single-row UPDATE TPS | noise SELECT 1 / UPDATE |")
        out.append("|---:|---:|---:|---:|")
    for workload, clients in order:
        if workload != "ceiling":
            continue
        s, u = med((workload, clients, "select1"), "tps"), med((workload, clients, "update"), "tps")
        if s and u:
            out.append(f"| {clients} | {fmt(s[0])} | {fmt(u[0])} | {spread(s[1])} / {spread(u[1])} |")

    out.append("\n## Mean latency per statement (ms, median over runs, from `pgbench -r`)\n")
    out.append("For claim workloads: claim statement + complete statement.\n")
    out.append("| workload | clients | baseline | pgq |")
    out.append("|---|---:|---:|---:|")
    for workload, clients in order:
        if workload.startswith("claim") or workload.startswith("enqueue"):
            out.append(f"| {WORKLOADS[workload][0]} | {clients} | "
                       f"{latencies((workload, clients, 'baseline'))} | "
                       f"{latencies((workload, clients, 'pgq'))} |")

    loads = sorted(float(r["load1"]) for rs in runs.values() for r in rs if r.get("load1"))
    if loads:
        out.append(f"\nLoad average (1 min) at the end of each run: min {loads[0]:.2f}, "
                   f"median {statistics.median(loads):.2f}, max {loads[-1]:.2f} "
                   f"(the benchmark itself keeps it near the client count; {len(loads)} runs).")

    if failed:
        out.append("\n**Warning**: these runs ended with a pgbench error (their figures are "
                   "unreliable):\n")
        for r in failed:
            out.append(f"- {r['workload']} c={r['clients']} {r['system']} run {r['run']}: rc {r['rc']}")
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1])
