#!/usr/bin/env python3
"""Markdown tables of bench/streams.sh from its raw results file.

Usage: streams_report.py RAW READ_EVENTS DRAIN_BACKLOG DRAIN_PRODUCE
       DRAIN_BASE_CONSUMERS LAT_RATE LAT_SECONDS SIZE_RATE SIZE_ROTATION
       SIZE_WARMUP SIZE_STEADY HOLD_SECONDS SIZE_RECOVER WAL_EVENTS
       SKY_DRAIN_TICK_MS SKY_DRAIN_MAX_LAG LAT_SKY_POLL_MS

RAW has one whitespace-separated line per measurement, its first word the kind:
  tput WORKLOAD N SYNC CLIENTS SYSTEM RUN TPS XACTS EVENTS_S RC [LEFT]
  drain SYSTEM RUN SECONDS EVENTS EVENTS_S PRODUCERS_SECONDS
  lat VARIANT RUN P50_MS P99_MS MAX_MS EVENTS
  size SYSTEM T PHASE BYTES APPENDED
  wal SYSTEM PHASE EVENTS BYTES
  walidle BYTES SECONDS
  elapsed WORKLOAD SECONDS
"""

import statistics
import sys
from collections import defaultdict

NAMES = {"baseline": "baseline", "skytools": "Skytools PgQ", "stream": "pgq_cpp streams",
         "queue": "pgq_cpp queue", "skytools-fast": "Skytools PgQ, fast ticker"}
SYSTEM_ORDER = ["baseline", "skytools", "stream", "queue"]
WORKLOAD_LABEL = {
    "append1": "append, 1 per xact",
    "append100": "append, 100 per xact",
    "read100": "read, batches of 100",
    "read1000": "read, batches of 1,000",
}


def fmt(x, digits=0):
    return "-" if x is None else f"{x:,.{digits}f}"


def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"**{a / b:.2f}x**"


def med(values):
    return statistics.median(values) if values else None


def noise(values):
    m = med(values)
    if not m or len(values) < 2:
        return "-"
    return f"±{(max(values) - min(values)) / m * 50:.0f}%"


def main(argv):
    (raw, read_events, backlog, produce, base_consumers, lat_rate, lat_seconds, size_rate,
     rotation, warmup, steady, hold, recover, wal_events, tick_ms, max_lag, sky_poll) = argv
    warmup, steady, hold = int(warmup), int(steady), int(hold)
    rows = [line.split() for line in open(raw) if line.strip()]
    out = []

    # --- throughput ---------------------------------------------------------
    tput = defaultdict(list)
    order = []
    systems_seen = set()
    failed = []
    for r in rows:
        if r[0] != "tput":
            continue
        workload, sync, clients, system = r[1], r[3], int(r[4]), r[5]
        key = (workload, sync, clients)
        if key not in order:
            order.append(key)
        systems_seen.add(system)
        tput[key + (system,)].append(float(r[9]))
        if r[10] != "0":
            failed.append(" ".join(r))
    systems = [s for s in SYSTEM_ORDER if s in systems_seen]
    if order:
        out.append("## Throughput (events/s, medians)\n")
        out.append(
            "append: events/s = TPS x events per transaction (-T run); read: events consumed / "
            f"pgbench's time for a backlog of {int(read_events):,} events, one consumer. Ratios are "
            "of the medians. Noise = half the min-max range of the runs, as % of the median.\n")
        # The ratios whose two systems were measured.
        pairs = [(a, b) for a, b in (("stream", "baseline"), ("stream", "skytools"), ("skytools", "baseline"))
                 if a in systems and b in systems]
        short = {"stream": "streams", "skytools": "Skytools", "baseline": "baseline"}
        head = "| workload | sync | clients | " + " | ".join(NAMES[s] for s in systems)
        head += "".join(f" | {short[a]} / {short[b]}" for a, b in pairs)
        head += " | noise " + " / ".join(NAMES[s].split()[0] for s in systems) + " |"
        out.append(head)
        out.append("|---|:---:|---:|" + "---:|" * (len(systems) + len(pairs) + 1))
        for key in order:
            vals = {s: tput.get(key + (s,), []) for s in systems}
            m = {s: med(v) for s, v in vals.items()}
            out.append(
                f"| {WORKLOAD_LABEL.get(key[0], key[0])} | {key[1]} | {key[2]} | "
                + " | ".join(fmt(m[s]) for s in systems)
                + "".join(f" | {ratio(m.get(a), m.get(b))}" for a, b in pairs)
                + " | " + " / ".join(noise(vals[s]) for s in systems) + " |")
        out.append("")
        lefts = [r for r in rows if r[0] == "tput" and len(r) > 11 and r[11] != "0"]
        if lefts:
            out.append("Read runs that left events for the psql check to consume (events/s counts only "
                       "what the pgbench run consumed): " + "; ".join(
                           f"{r[1]} {r[5]} sync={r[3]} run {r[6]}: {int(r[11]):,}" for r in lefts) + "\n")
        if failed:
            out.append("**Failed pgbench runs** (rc != 0): " + "; ".join(failed) + "\n")

    # --- drain --------------------------------------------------------------
    drain = defaultdict(list)
    for r in rows:
        if r[0] == "drain":
            drain[r[1]].append((float(r[3]), int(r[4]), float(r[5]), float(r[6]) if r[6] else None,
                                float(r[7]) if len(r) > 7 else None))
    if drain:
        out.append("## Deep churning drain\n")
        out.append(
            f"{int(backlog):,} events filled, then 2 unthrottled producers append {int(produce):,} more "
            "(one per transaction) while the consumer runs; synchronous_commit = off, autovacuum on. "
            "Drain time: from the producers' and consumer's start until every one of the "
            f"{int(backlog) + int(produce):,} events has been consumed. streams: 1 consumer, batches of "
            f"up to 1,000 (next_batch wait 1 s); Skytools: 1 consumer, pgq.ticker() every {tick_ms} ms, "
            f"ticker_max_count 1,000, ticker_max_lag {max_lag}; baseline: {base_consumers} consumers "
            "claiming and deleting one job at a time (bench/drain.sh's baseline). Medians. When the consumer "
            "is faster than the producers the drain time is theirs; the column after them says when the "
            "consumer had consumed as many events as the backlog held.\n")
        out.append(f"| system | runs | drain time s | events/s drained | vs baseline | vs Skytools | producers done at s | {int(backlog):,} consumed at s | every run (s) |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        rate = {s: med([x[2] for x in v]) for s, v in drain.items()}
        for s in SYSTEM_ORDER:
            if s not in drain:
                continue
            v = drain[s]
            out.append(
                f"| {NAMES[s]} | {len(v)} | {med([x[0] for x in v]):.1f} | {fmt(rate[s])} | "
                f"{ratio(rate[s], rate.get('baseline'))} | {ratio(rate[s], rate.get('skytools'))} | "
                f"{fmt(med([x[3] for x in v if x[3] is not None]), 1)} | "
                f"{fmt(med([x[4] for x in v if x[4] is not None]), 1)} | "
                + ", ".join(f"{x[0]:.1f}" for x in v) + " |")
        out.append("")

    # --- latency ------------------------------------------------------------
    lat = defaultdict(list)
    for r in rows:
        if r[0] == "lat":
            lat[r[1]].append(tuple(float(x) for x in r[3:7]))
    if lat:
        out.append("## Latency: append to consumer\n")
        out.append(
            f"A paced producer, {lat_rate} events/s for {lat_seconds} s, one event per transaction "
            "(synchronous_commit on); latency = the consumer's clock when its statement returns the "
            "event minus clock_timestamp() at append (in the payload). Medians over the runs of each "
            "run's p50 and p99; max over all runs.\n")
        cfg = {
            "stream": "next_batch(..., wait => '1 s') in a loop",
            "skytools": f"pgqd's defaults: pgq.ticker() every 1 s, ticker_max_count 500, ticker_max_lag 3 s; "
                        f"consumer asks every {sky_poll} ms",
            "skytools-fast": "pgq.ticker() every 10 ms, ticker_max_lag 10 ms; consumer asks every 10 ms",
        }
        out.append("| system | p50 ms | p99 ms | max ms | events per run | setup |")
        out.append("|---|---:|---:|---:|---:|---|")
        for s in ("stream", "skytools", "skytools-fast"):
            if s in lat:
                v = lat[s]
                out.append(f"| {NAMES[s]} | {med([x[0] for x in v]):.1f} | {med([x[1] for x in v]):.1f} | "
                           f"{max(x[2] for x in v):.1f} | {int(med([x[3] for x in v])):,} | {cfg[s]} |")
        out.append("")

    # --- size ---------------------------------------------------------------
    size = defaultdict(list)
    for r in rows:
        if r[0] == "size":
            size[r[1]].append((int(r[2]), r[3], int(r[4]), int(r[5])))
    if size:
        out.append("## Size of the event tables\n")
        out.append(
            f"All systems at once: a producer at {size_rate} events/s each, a consumer keeping up, "
            f"rotation every {rotation} s (streams: create_stream's rotation, maintenance every 1 s; "
            "Skytools: queue_rotation_period, maint_rotate_tables_step1/2 every 1 s, ticker every 1 s; "
            "the baseline deletes, autovacuum on). Steady window: "
            f"t = {warmup}-{steady} s; then an xmin held for {hold} s (REPEATABLE READ + txid_current() "
            "in each database); then its release. Growth = the least-squares slope of "
            "pg_total_relation_size over the event tables against events appended, x 1,000 (the "
            "hold's from the last steady sample on).\n")
        out.append("| system | steady: size min-max kB | steady growth B per 1,000 events | held xmin: growth B per 1,000 events | size at the end of the hold kB | after the release kB (t) |")
        out.append("|---|---:|---:|---:|---:|---:|")
        for s in SYSTEM_ORDER:
            if s not in size:
                continue
            v = sorted(size[s])
            win = [x for x in v if warmup <= x[0] and x[1] == "steady"]
            held = [x for x in v if x[1] == "hold"]
            rec = [x for x in v if x[1] == "recover"]
            steady_last = [x for x in v if x[1] == "steady"]

            def growth(points):
                """Least-squares slope of size over events appended, x 1,000: the
                rotation's sawtooth averages out instead of depending on where
                the first and last samples fall."""
                if len(points) < 2:
                    return None
                xs = [x[3] for x in points]
                ys = [x[2] for x in points]
                mx, my = statistics.fmean(xs), statistics.fmean(ys)
                sxx = sum((x - mx) ** 2 for x in xs)
                if sxx == 0:
                    return None
                return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx * 1000

            g1 = growth(win)
            g2 = growth(steady_last[-1:] + held) if steady_last and held else None
            out.append(
                f"| {NAMES[s]} | "
                + (f"{min(x[2] for x in win) / 1024:,.0f}-{max(x[2] for x in win) / 1024:,.0f}" if win else "-")
                + f" | {fmt(g1)} | {fmt(g2)} | "
                + (f"{held[-1][2] / 1024:,.0f}" if held else "-") + " | "
                + (f"{rec[-1][2] / 1024:,.0f} ({rec[-1][0]} s)" if rec else "-") + " |")
        out.append("")
        out.append("<details><summary>every sample (t s, phase, kB)</summary>\n")
        out.append("| t s | phase | " + " | ".join(NAMES[s] for s in SYSTEM_ORDER if s in size) + " |")
        out.append("|---:|---|" + "---:|" * len([s for s in SYSTEM_ORDER if s in size]))
        by_t = defaultdict(dict)
        phase_at = {}
        for s, v in size.items():
            for t, ph, b, _ in v:
                by_t[t][s] = b
                phase_at[t] = ph
        for t in sorted(by_t):
            out.append(f"| {t} | {phase_at[t]} | " + " | ".join(
                fmt(by_t[t][s] / 1024) if s in by_t[t] else "-" for s in SYSTEM_ORDER if s in size) + " |")
        out.append("\n</details>\n")

    # --- wal ----------------------------------------------------------------
    wal = defaultdict(dict)
    idle = None
    for r in rows:
        if r[0] == "wal":
            wal[r[1]][r[2]] = (int(r[3]), int(r[4]))
        elif r[0] == "walidle":
            idle = int(r[1]) / int(r[2])
    if wal:
        out.append("## WAL per event\n")
        out.append(
            f"pg_current_wal_lsn() before and after, one client, synchronous_commit on: {int(wal_events):,} "
            f"events one per transaction, {int(wal_events):,} 100 per transaction, then all "
            f"{2 * int(wal_events):,} consumed in batches of 100 (streams: next_batch + finish_batch; "
            "Skytools: ticks of 100 events, made by the append scripts, then next_batch + "
            "get_batch_events + finish_batch; baseline: claim 100 + delete; pgq_cpp queue: claim 100 + "
            "complete_many). A CHECKPOINT before each system's three phases."
            + (f" An idle cluster wrote {idle:,.0f} B/s (pgq_cpp's maintenance worker) beside." if idle is not None else "")
            + "\n")
        out.append("| system | append 1/xact B/event | append 100/xact B/event | consume B/event | append 1/xact + consume B/event | vs baseline (1/xact + consume) |")
        out.append("|---|---:|---:|---:|---:|---:|")
        per = {}
        for s in SYSTEM_ORDER:
            if s not in wal:
                continue
            w = wal[s]
            a1 = w["append1"][1] / w["append1"][0]
            a100 = w["append100"][1] / w["append100"][0]
            c = w["consume"][1] / w["consume"][0] if w["consume"][0] else None
            per[s] = (a1, a100, c, a1 + c if c is not None else None)
        for s, (a1, a100, c, cyc) in per.items():
            out.append(f"| {NAMES[s]} | {a1:,.0f} | {a100:,.0f} | {fmt(c)} | {fmt(cyc)} | "
                       f"{ratio(cyc, per.get('baseline', (None,) * 4)[3])} |")
        out.append("")

    el = [(r[1], int(r[2])) for r in rows if r[0] == "elapsed"]
    if el:
        out.append("Wall time per workload: " + ", ".join(f"{w} {s} s" for w, s in el) + ".\n")
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
