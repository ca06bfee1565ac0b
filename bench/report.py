#!/usr/bin/env python3
"""Turns bench/results-latest-runs.csv (one line per pgbench run) into the
markdown tables of bench/results-latest.md: medians, ratios, targets.

Rows are grouped by (workload, synchronous_commit, clients); a CSV written
before the sync column existed reads as synchronous_commit = on."""

import csv
import statistics
import sys
from collections import defaultdict

# workload -> (label, minimum pgq/baseline ratio or None, what to say when None)
WORKLOADS = {
    "enqueue": ("enqueue, 1 per xact", 0.95, None),
    "enqueue_many": ("enqueue_many, 100 per xact (baseline: unnest of an array)", 0.90, None),
    "enqueue_series": ("enqueue_many, 100 per xact (baseline: generate_series)", 0.90, None),
    "claim1": ("claim+complete n=1", 0.95, None),
    "claim10": ("claim+complete n=10", None, "no target"),
    "claim100": ("claim+complete n=100", 2.00, None),
    "halving10": ("halving: complete+claim in 1 xact, n=10", None,
                  "no target: shows the commit saving"),
    "halving100": ("halving: complete+claim in 1 xact, n=100", None,
                   "no target: shows the commit saving"),
}


def fmt(x, digits=0):
    return f"{x:,.{digits}f}"


def spread(values):
    """Max-min range as a percentage of the median."""
    med = statistics.median(values)
    if med == 0 or len(values) < 2:
        return "-"
    return f"±{(max(values) - min(values)) / med * 50:.0f}%"


def jobs_s(r):
    xacts = int(r["xacts"])
    return float(r["tps"]) * (int(r["jobs"]) / xacts) if xacts else 0.0


def main(path):
    runs = defaultdict(list)  # (workload, sync, clients, system) -> [row]
    order = []                # (workload, sync, clients), as first seen
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            row.setdefault("sync", "on")
            if not row["sync"]:
                row["sync"] = "on"
            line = (row["workload"], row["sync"], int(row["clients"]))
            if line not in order:
                order.append(line)
            runs[line + (row["system"],)].append(row)

    def med(key, field):
        rows = runs.get(key, [])
        if not rows:
            return None
        vals = [jobs_s(r) for r in rows] if field == "jobs_s" else [float(r[field]) for r in rows]
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
               "runs' TPS, as % of the median. sync = synchronous_commit of the pgbench "
               "sessions.\n")
    out.append("| workload | sync | clients | baseline TPS | pgq TPS | baseline jobs/s | pgq jobs/s "
               "| pgq/baseline | target | met? | paired | noise base / pgq |")
    out.append("|---|:---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|---:|")
    verdicts = defaultdict(list)  # workload -> [(sync, clients, ratio, ok or None)]
    medians = {}                  # (workload, sync, clients, system) -> median jobs/s
    for workload, sync, clients in order:
        if workload not in WORKLOADS:
            continue
        label, target, _ = WORKLOADS[workload]
        b, p = (workload, sync, clients, "baseline"), (workload, sync, clients, "pgq")
        if b not in runs or p not in runs:
            continue
        (b_tps, b_all), (p_tps, p_all) = med(b, "tps"), med(p, "tps")
        (b_jobs, _), (p_jobs, _) = med(b, "jobs_s"), med(p, "jobs_s")
        medians[b], medians[p] = b_jobs, p_jobs
        ratio = p_jobs / b_jobs if b_jobs else 0.0
        b_by_run = {r["run"]: jobs_s(r) for r in runs[b]}
        pairs = [jobs_s(r) / b_by_run[r["run"]] for r in runs[p] if b_by_run.get(r["run"])]
        paired = f"{statistics.median(pairs):.2f}x" if pairs else "-"
        ok = None if target is None else ratio >= target
        verdicts[workload].append((sync, clients, ratio, ok))
        tcell = f">= {target:.2f}x" if target is not None else "none"
        mcell = "-" if ok is None else ("yes" if ok else "NO")
        out.append(f"| {label} | {sync} | {clients} | {fmt(b_tps)} | {fmt(p_tps)} | {fmt(b_jobs)} | "
                   f"{fmt(p_jobs)} | **{ratio:.2f}x** | {tcell} | {mcell} | {paired} | "
                   f"{spread(b_all)} / {spread(p_all)} |")

    out.append("\n### Targets\n")
    for workload, (label, target, note) in WORKLOADS.items():
        v = verdicts.get(workload)
        if not v:
            continue
        every = ", ".join(f"{s}/c={c}: {r:.2f}x" for s, c, r, _ in v)
        if target is None:
            out.append(f"- {label} ({note}): {every}.")
            continue
        missed = [(s, c, r) for s, c, r, ok in v if not ok]
        if not missed:
            out.append(f"- {label} (>= {target:.2f}x): **met** at every sync/client count ({every}).")
        else:
            short = ", ".join(f"{s}/c={c} ({r:.2f}x, {(target - r) * 100:.1f} points short)"
                              for s, c, r in missed)
            out.append(f"- {label} (>= {target:.2f}x): **missed** at {short}; all: {every}.")
    out.append("\n(sync/c=N: synchronous_commit and client count of the line.)")

    saving = []
    for workload, sync, clients in order:
        if not workload.startswith("halving"):
            continue
        n = workload[len("halving"):]
        cells = []
        for system in ("baseline", "pgq"):
            h = medians.get((workload, sync, clients, system))
            c = medians.get((f"claim{n}", sync, clients, system))
            if h is None or c is None:
                cells = None
                break
            cells.append(f"{fmt(c)} | {fmt(h)} | {h / c:.2f}x" if c else f"{fmt(c)} | {fmt(h)} | -")
        if cells:
            saving.append(f"| {n} | {sync} | {clients} | {cells[0]} | {cells[1]} |")
    if saving:
        out.append("\n### The commit saving: halvingN against claimN\n")
        out.append("Median jobs/s of the same system, batch size, sync and clients: claimN "
                   "commits twice per batch (claim, then complete), halvingN once (complete "
                   "the previous batch and claim the next in one transaction), but as pgbench "
                   "sends it that transaction takes four round trips (BEGIN, complete, claim, "
                   "COMMIT) where claimN takes two, which weighs most with "
                   "synchronous_commit = off.\n")
        out.append("| n | sync | clients | baseline claimN | baseline halvingN | saving "
                   "| pgq claimN | pgq halvingN | saving |")
        out.append("|---:|:---:|---:|---:|---:|---:|---:|---:|---:|")
        out.extend(saving)

    if any(w == "ceiling" for w, _, _ in order):
        out.append("\n## PostgreSQL's ceiling on the same cluster\n")
        out.append("| sync | clients | `SELECT 1` TPS | single-row UPDATE TPS | noise SELECT 1 / UPDATE |")
        out.append("|:---:|---:|---:|---:|---:|")
    for workload, sync, clients in order:
        if workload != "ceiling":
            continue
        s = med((workload, sync, clients, "select1"), "tps")
        u = med((workload, sync, clients, "update"), "tps")
        if s and u:
            out.append(f"| {sync} | {clients} | {fmt(s[0])} | {fmt(u[0])} | "
                       f"{spread(s[1])} / {spread(u[1])} |")

    out.append("\n## Mean latency per statement (ms, median over runs, from `pgbench -r`)\n")
    out.append("claim workloads: claim statement + complete statement. halving workloads: "
               "BEGIN + complete of the previous batch + claim + COMMIT.\n")
    out.append("| workload | sync | clients | baseline | pgq |")
    out.append("|---|:---:|---:|---:|---:|")
    for workload, sync, clients in order:
        if workload in WORKLOADS:
            out.append(f"| {WORKLOADS[workload][0]} | {sync} | {clients} | "
                       f"{latencies((workload, sync, clients, 'baseline'))} | "
                       f"{latencies((workload, sync, clients, 'pgq'))} |")

    loads = sorted(float(r["load1"]) for rs in runs.values() for r in rs if r.get("load1"))
    if loads:
        out.append(f"\nLoad average (1 min) at the end of each run: min {loads[0]:.2f}, "
                   f"median {statistics.median(loads):.2f}, max {loads[-1]:.2f} "
                   f"(the benchmark itself keeps it near the client count; {len(loads)} runs).")

    if failed:
        out.append("\n**Warning**: these runs ended with a pgbench error (their figures are "
                   "unreliable):\n")
        for r in failed:
            out.append(f"- {r['workload']} sync={r['sync']} c={r['clients']} {r['system']} "
                       f"run {r['run']}: rc {r['rc']}")
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1])
