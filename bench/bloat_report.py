#!/usr/bin/python3
"""The report and the charts of bench/bloat.py's results (OUTDIR/results.json).

    bloat_report.py report OUTDIR    prints the markdown report
    bloat_report.py chart OUTDIR     writes OUTDIR/held-xmin.{dat,gp} (and
                                     readers.{dat,gp}); bloat.sh runs gnuplot
                                     on them, giving OUTDIR/held-xmin.png (and
                                     OUTDIR/readers.png)
"""
import json
import os
import sys

# Targets (issue 6), judged on pgq; the baseline's figure is printed beside.
END_OF_HOLD_MIN = 0.80   # throughput in the hold's last interval / steady state
GROWTH_MAX_KB = 70.0     # kB of table+index growth per 1,000 jobs completed
DRAIN_MIN = 10.0         # drain jobs/s, pgq / baseline


def kb(b):
    return f"{b / 1024:,.0f}"


def ratio(a, b):
    return f"{a / b:.2f}x" if b else "n/a"


def verdict(ok):
    return "**met**" if ok else "**missed**"


def phase(h, name):
    """Per-phase figures; results written before bloat.py kept them get them
    rebuilt from the interval rows (latency then: the worst interval's)."""
    if "phases" in h and name in h["phases"]:
        return h["phases"][name]
    rows = [x for x in h["rows"] if x["phase"] == name]
    if not rows:
        return None
    secs = sum(x["to"] - x["from"] for x in rows)
    done = sum(x["done_s"] * (x["to"] - x["from"]) for x in rows)
    enq = sum(x["enq_s"] * (x["to"] - x["from"]) for x in rows)
    return {"from": rows[0]["from"], "to": rows[-1]["to"], "done_s": done / secs,
            "enq_s": enq / secs, "done": done, "p50_ms": max(x["p50_ms"] for x in rows),
            "p99_ms": max(x["p99_ms"] for x in rows), "claims": sum(x["claims"] for x in rows),
            "empty": sum(x["empty"] for x in rows), "size_start": rows[0]["size_start"],
            "size_end": rows[-1]["size_end"]}


def growth(ph):
    """kB of growth per 1,000 jobs completed in the phase."""
    if not ph or not ph.get("done") or not ph.get("size_end") or not ph.get("size_start"):
        return None
    return (ph["size_end"]["table_bytes"] - ph["size_start"]["table_bytes"]) / 1024 / (ph["done"] / 1000)


def end_of_mid(h):
    """done/s in the middle phase's last interval, over the steady phase's done/s."""
    mid = h.get("mid", "hold")
    last = [x for x in h["rows"] if x["phase"] == mid]
    clean = phase(h, "before")
    if not last or not clean or not clean["done_s"]:
        return None, None, None
    return last[-1]["done_s"], clean["done_s"], last[-1]["done_s"] / clean["done_s"]


def g(x):
    return "n/a" if x is None else f"{x:.1f}"


def dead(sz):
    return "-" if sz is None or "dead" not in sz else f"{sz['dead']:,}"


def intervals(L, hb, hp, what, hr=None):
    """The per-interval table of a phased run (held or readers); hr: the ring
    queue's run (pgqr), its columns after the others."""
    readers = "readers" in hb
    ring_head = ring_rule = ""
    if hr:
        ring_head = (" ring done/s | ring/base | ring claim p50/p99 ms | ring size kB (segments+other) | "
                     "ring/base size | ring rows left | dead tuples, each in its own run: bench_jobs / pgq.jobs / the ring's segments |")
        ring_rule = "---:|---:|---:|---:|---:|---:|---:|"
    L.append(f"| interval (s) | phase | base done/s | pgq done/s | ratio | base claim p50/p99 ms | "
             f"pgq claim p50/p99 ms | p99 ratio | base size kB | pgq size kB (jobs+finished+other) | "
             f"size ratio | base/pgq rows left |" + (" reader scans base/pgq, p50 ms |" if readers else "")
             + ring_head)
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if readers else "")
             + ring_rule)
    for i, (a, b) in enumerate(zip(hb["rows"], hp["rows"])):
        be = b["size_end"]
        extra = ""
        if readers:
            extra = (f" {a.get('scans', 0)} / {b.get('scans', 0)}, "
                     f"{a.get('scan_p50_ms', 0):.1f} / {b.get('scan_p50_ms', 0):.1f} |")
        if hr and i < len(hr["rows"]):
            c = hr["rows"][i]
            ce = c["size_end"]
            extra += (f" {c['done_s']:.0f} | {ratio(c['done_s'], a['done_s'])} | "
                      f"{c['p50_ms']:.2f} / {c['p99_ms']:.2f} | {kb(ce['table_bytes'])} "
                      f"({kb(ce['jobs_bytes'])}+{kb(ce['table_bytes'] - ce['jobs_bytes'])}) | "
                      f"{ratio(ce['table_bytes'], a['size_end']['table_bytes'])} | {ce['rows']} | "
                      f"{dead(a['size_end'])} / {dead(be)} / {dead(ce)} |")
        L.append(f"| {a['from']}-{a['to']} | {a['phase']} | {a['done_s']:.0f} | {b['done_s']:.0f} | "
                 f"{ratio(b['done_s'], a['done_s'])} | {a['p50_ms']:.2f} / {a['p99_ms']:.2f} | "
                 f"{b['p50_ms']:.2f} / {b['p99_ms']:.2f} | {ratio(b['p99_ms'], a['p99_ms'])} | "
                 f"{kb(a['size_end']['table_bytes'])} | {kb(be['table_bytes'])} "
                 f"({kb(be['jobs_bytes'])}+{kb(be['finished_bytes'])}+{kb(be.get('other_bytes', 0))}) | "
                 f"{ratio(be['table_bytes'], a['size_end']['table_bytes'])} | "
                 f"{a['size_end']['rows']} / {be['rows']} |" + extra)
    L.append("")
    mid = hb.get("mid", "hold")
    L.append(f"| system | enqueued | completed | lost completes | size at start kB | end of steady kB | "
             f"end of {what} kB | at the end kB | growth per 1,000 jobs, steady (kB) | "
             f"growth per 1,000 jobs, {what} (kB) | growth per 1,000 jobs, after (kB) | empty claims |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, h in (("baseline", hb), ("pgq", hp)) + ((("pgq ring queue", hr),) if hr else ()):
        st, md, af = phase(h, "before"), phase(h, mid), phase(h, "after")
        s_pre = st["size_end"]["table_bytes"] if st else 0
        s_mid = md["size_end"]["table_bytes"] if md else 0
        L.append(f"| {name} | {h['enqueued']} | {h['completed']} | {h['fails']} | "
                 f"{kb(h['size0']['table_bytes'])} | {kb(s_pre)} | {kb(s_mid)} | "
                 f"{kb(h['size_final']['table_bytes'])} | {g(growth(st))} | {g(growth(md))} | "
                 f"{g(growth(af))} | {sum(x['empty'] for x in h['rows'])} |")
    L.append("")
    L.append("Growth per 1,000 jobs = (size at the end of the phase - size at its start) / jobs "
             "completed in it x 1,000. The steady phase starts from emptied tables (TRUNCATE), so "
             "its figure includes filling the working set and the dead rows left before "
             "autovacuum's first pass.")
    L.append("")
    if hr:
        ring_detail(L, hr)


def ring_detail(L, hr):
    """The ring queue's segments at each sample: size and dead tuples, and the
    dead tuples of pgq.jobs."""
    rows = hr["rows"]
    if not rows or "segments" not in rows[0]["size_end"]:
        return
    names = [x[0] for x in rows[0]["size_end"]["segments"]]
    L.append("The ring queue's segments at the end of each interval: size kB / dead tuples "
             "(pg_stat_user_tables.n_dead_tup) / rows inserted into it so far (n_tup_ins: a TRUNCATE "
             "does not reset it; entries, receipts and closures, three rows a job); and pgq.jobs' dead tuples.")
    L.append("")
    L.append("| interval (s) | phase | " + " | ".join(names) + " | segments kB | dead on segments | dead on pgq.jobs |")
    L.append("|---|---|" + "---:|" * (len(names) + 3))
    for x in rows:
        se = x["size_end"]
        segs = {n: (b, d, ins) for n, b, d, ins in se.get("segments", [])}
        cells = [f"{kb(segs[n][0])} / {segs[n][1]:,} / {segs[n][2]:,}" if n in segs else "-" for n in names]
        L.append(f"| {x['from']}-{x['to']} | {x['phase']} | " + " | ".join(cells)
                 + f" | {kb(se['jobs_bytes'])} | {se.get('dead', 0):,} | {se.get('dead_jobs_table', 0):,} |")
    L.append("")


def steady(L, r):
    L.append("## 1. Steady state (synchronous_commit = on)")
    L.append("")
    L.append("The first phase of the held-xmin and active-readers runs: producer and consumers at "
             "once, nothing else. Claim latency over every claim of the phase that got a job.")
    L.append("")
    L.append("| run | system | seconds | enqueued/s | completed jobs/s | claim p50 ms | claim p99 ms | "
             "empty claims | growth per 1,000 jobs (kB) |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for part in ("held", "readers"):
        for system in ("baseline", "pgq", "pgqr"):
            h = r.get(part, {}).get(system)
            ph = phase(h, "before") if h else None
            if not ph:
                continue
            L.append(f"| {part} | {system} | {ph['to'] - ph['from']} | {ph['enq_s']:.0f} | "
                     f"{ph['done_s']:.0f} | {ph['p50_ms']:.2f} | {ph['p99_ms']:.2f} | {ph['empty']} | "
                     f"{g(growth(ph))} |")
    L.append("")


def workload_text(h):
    return (f"1 producer paced at {h['rate']} jobs/s (1 enqueue per transaction), 2 consumers "
            f"claiming + completing 1 job at a time (2 ms sleep after an empty claim), "
            f"synchronous_commit = on. Latency = the claim statement's round trip as seen by the "
            f"consumer, claims that returned a job. Size = pg_total_relation_size at the end of the "
            f"interval (baseline: bench_jobs; pgq and the ring queue, where measured: every table "
            f"of schema pgq but pgq.queues, the rings' segments (the partitions "
            f"pgq.job_log_<ring>_<n>) included; pgq's \"jobs\" are pgq.job_rows and the segments).")


def drain_section(L, db, dp, dr=None):
    L.append("## 4. Deep churning drain (synchronous_commit = off)")
    L.append("")
    L.append(f"2 unthrottled producers (1 enqueue per transaction) push {db['jobs']:,} jobs while 4 "
             f"consumers claim + complete 1 at a time (1 ms sleep after an empty claim); the drain "
             f"ends when the last job is completed.")
    L.append("")
    L.append("| | baseline | pgq | pgq/baseline |" + (" pgq ring queue | ring/baseline |" if dr else ""))
    L.append("|---|---:|---:|---:|" + ("---:|---:|" if dr else ""))

    def row(label, a, b, fmt="{:,.0f}", rat=True, c=None):
        ring = ""
        if dr:
            ring = f" {fmt.format(c)} | {ratio(c, a) if rat else ''} |"
        L.append(f"| {label} | {fmt.format(a)} | {fmt.format(b)} | {ratio(b, a) if rat else ''} |" + ring)
    dc = dr or dp
    row("drain total time (s)", db["time_s"], dp["time_s"], "{:,.1f}", c=dc["time_s"])
    row("drain jobs/s (completed / total time)", db["jobs_s"], dp["jobs_s"], c=dc["jobs_s"])
    row("producers finished at (s)", db["producers_end_s"], dp["producers_end_s"], "{:,.1f}", c=dc["producers_end_s"])
    row("producer enqueue rate (jobs/s)", db["enq_s"], dp["enq_s"], c=dc["enq_s"])
    row("peak backlog (jobs)", db["backlog_peak"], dp["backlog_peak"], c=dc["backlog_peak"])
    row("consumers jobs/s, first 25% of the run", db["quarters"][0]["done_s"], dp["quarters"][0]["done_s"],
        c=dc["quarters"][0]["done_s"])
    row("consumers jobs/s, last 25% of the run", db["quarters"][3]["done_s"], dp["quarters"][3]["done_s"],
        c=dc["quarters"][3]["done_s"])
    row("last 25% / first 25%", db["quarters"][3]["done_s"] / max(db["quarters"][0]["done_s"], 1e-9),
        dp["quarters"][3]["done_s"] / max(dp["quarters"][0]["done_s"], 1e-9), "{:.2f}", False,
        c=dc["quarters"][3]["done_s"] / max(dc["quarters"][0]["done_s"], 1e-9))
    row("peak size while producing (kB)", db["size_peak"]["table_bytes"] / 1024, dp["size_peak"]["table_bytes"] / 1024,
        c=dc["size_peak"]["table_bytes"] / 1024)
    row("size at the end (kB)", db["size_end"]["table_bytes"] / 1024, dp["size_end"]["table_bytes"] / 1024,
        c=dc["size_end"]["table_bytes"] / 1024)
    row("completed / lost completes", db["completed"], dp["completed"], "{:,}", False, c=dc["completed"])
    L.append("")
    L.append("Per quarter of each system's own run time:")
    L.append("")
    L.append("| quarter | base time (s) | base enq/s | base done/s | base claim p50/p99 ms | base backlog at end | pgq time (s) | pgq enq/s | pgq done/s | pgq claim p50/p99 ms | pgq backlog at end | done/s ratio |")
    L.append("|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for i, (a, b) in enumerate(zip(db["quarters"], dp["quarters"])):
        L.append(f"| Q{i + 1} | {a['from']:.1f}-{a['to']:.1f} | {a['enq_s']:,.0f} | {a['done_s']:,.0f} | "
                 f"{a['p50_ms']:.2f} / {a['p99_ms']:.2f} | {a['backlog_end']:,} | "
                 f"{b['from']:.1f}-{b['to']:.1f} | {b['enq_s']:,.0f} | {b['done_s']:,.0f} | "
                 f"{b['p50_ms']:.2f} / {b['p99_ms']:.2f} | {b['backlog_end']:,} | "
                 f"{ratio(b['done_s'], a['done_s'])} |")
    L.append("")
    L.append(f"Lost completes (pgq.complete returned false): baseline n/a, pgq {dp['fails']}."
             + (f" Ring queue: {dr['fails']}." if dr else ""))
    L.append("")
    if dr:
        L.append("The ring queue per quarter of its own run time: " + "; ".join(
            f"Q{i + 1} {q['from']:.1f}-{q['to']:.1f} s: enq {q['enq_s']:,.0f}/s, done {q['done_s']:,.0f}/s, "
            f"claim p50/p99 {q['p50_ms']:.2f} / {q['p99_ms']:.2f} ms, backlog at end {q['backlog_end']:,}"
            for i, q in enumerate(dr["quarters"])) + ".")
        L.append("")


def targets(L, r):
    L.append("## Targets (issue 6)")
    L.append("")
    if "held" in r:
        hb, hp = r["held"]["baseline"], r["held"]["pgq"]
        eb, cb, qb = end_of_mid(hb)
        ep, cp, qp = end_of_mid(hp)
        if qp is not None:
            L.append(f"- held xmin, throughput in the last {hp['interval']} s of the hold >= "
                     f"{END_OF_HOLD_MIN:.0%} of the steady state's: {verdict(qp >= END_OF_HOLD_MIN)} "
                     f"(pgq {ep:.0f} of {cp:.0f} jobs/s = {qp:.0%}; baseline {eb:.0f} of {cb:.0f} "
                     f"jobs/s = {qb:.0%}). The producer is paced at {hp['rate']} jobs/s, so this "
                     f"says whether the consumers still keep up.")
    for part, name, label in (("held", "before", "steady state before the hold"),
                              ("held", "hold", "during the hold"),
                              ("held", "after", "steady state after the hold"),
                              ("readers", "readers", "during the active readers")):
        if part not in r:
            continue
        h = r[part]
        gp, gb = growth(phase(h["pgq"], name)), growth(phase(h["baseline"], name))
        if gp is None:
            continue
        L.append(f"- growth <= {GROWTH_MAX_KB:.0f} kB per 1,000 jobs, {label}: "
                 f"{verdict(gp <= GROWTH_MAX_KB)} (pgq {gp:.1f} kB; baseline {g(gb)} kB)")
    if "readers" in r:
        eb, cb, qb = end_of_mid(r["readers"]["baseline"])
        ep, cp, qp = end_of_mid(r["readers"]["pgq"])
        if qp is not None:
            L.append(f"- active readers, throughput in the last interval of the readers / steady "
                     f"state (no target; the held-xmin bar is {END_OF_HOLD_MIN:.0%}): pgq {ep:.0f} "
                     f"of {cp:.0f} jobs/s = {qp:.0%}; baseline {eb:.0f} of {cb:.0f} jobs/s = {qb:.0%}")
    if "held" in r and "pgqr" in r["held"]:
        hb, hr = r["held"]["baseline"], r["held"]["pgqr"]
        er, cr, qr = end_of_mid(hr)
        if qr is not None:
            L.append(f"- held xmin, the ring queue (issue 33: size and rates flat; no dead tuples on job "
                     f"storage, reclaimed only by TRUNCATE): throughput in the last {hr['interval']} s of "
                     f"the hold {er:.0f} of {cr:.0f} jobs/s = {qr:.0%} of the steady state's (producer "
                     f"paced at {hr['rate']} jobs/s)")
        sizes_hold = [x["size_end"]["table_bytes"] for x in hr["rows"] if x["phase"] == "hold"]
        seg_hold = [x["size_end"]["jobs_bytes"] for x in hr["rows"] if x["phase"] == "hold"]
        st = phase(hr, "before")
        if sizes_hold and st:
            L.append(f"  - size (segments + the other tables of pgq) at the end of the steady state "
                     f"{kb(st['size_end']['table_bytes'])} kB; during the hold {kb(min(sizes_hold))}-"
                     f"{kb(max(sizes_hold))} kB (segments {kb(min(seg_hold))}-{kb(max(seg_hold))} kB), at "
                     f"its end {kb(sizes_hold[-1])} kB: growth {g(growth(phase(hr, 'hold')))} kB per "
                     f"1,000 jobs (baseline {g(growth(phase(hb, 'hold')))} kB)")
        deads = [x["size_end"].get("dead", 0) for x in hr["rows"]]
        dead_jobs = [x["size_end"].get("dead_jobs_table", 0) for x in hr["rows"]]
        L.append(f"  - dead tuples on the ring's segments, max over the samples: {max(deads or [0]):,} "
                 f"({verdict(max(deads or [0]) == 0)}); on pgq.jobs: {max(dead_jobs or [0]):,}")
    if "drain" in r:
        db, dp = r["drain"]["baseline"], r["drain"]["pgq"]
        if "pgqr" in r["drain"]:
            dq = r["drain"]["pgqr"]
            q = dq["jobs_s"] / db["jobs_s"] if db["jobs_s"] else 0
            L.append(f"- deep churning drain, the ring queue / baseline jobs/s: {q:.2f}x (ring queue "
                     f"{dq['jobs_s']:,.0f}, baseline {db['jobs_s']:,.0f} jobs/s; issue 33's target "
                     f"is 10x with pgbench clients, bench/drain.sh)")
        q = dp["jobs_s"] / db["jobs_s"] if db["jobs_s"] else 0
        L.append(f"- deep churning drain, pgq/baseline jobs/s >= {DRAIN_MIN:.0f}x: "
                 f"{verdict(q >= DRAIN_MIN)} ({q:.2f}x: pgq {dp['jobs_s']:,.0f}, baseline "
                 f"{db['jobs_s']:,.0f} jobs/s)")
    L.append("")


def report(outdir):
    r = json.load(open(os.path.join(outdir, "results.json")))
    L = []
    if "held" in r or "readers" in r:
        steady(L, r)
    if "held" in r:
        hb, hp = r["held"]["baseline"], r["held"]["pgq"]
        L.append("## 2. Held xmin (synchronous_commit = on)")
        L.append("")
        L.append(workload_text(hb) + f" {hb['pre']} s steady, then `BEGIN; SELECT txid_current();` "
                 f"idle for {hb['hold']} s, commit, {hb['post']} s more. Chart: held-xmin.png.")
        L.append("")
        intervals(L, hb, hp, "hold", r["held"].get("pgqr"))
    if "readers" in r:
        rb, rp = r["readers"]["baseline"], r["readers"]["pgq"]
        rd = rb["readers"]
        L.append("## 3. Active readers (synchronous_commit = on)")
        L.append("")
        L.append(workload_text(rb) + f" {rb['pre']} s steady, then for {rb['hold']} s {rd['n']} "
                 f"REPEATABLE READ sessions, each keeping a transaction open ~{rd['xact_s']} s and "
                 f"opening the next at once, staggered by {rd['xact_s'] / rd['n']:.1f} s, scanning the "
                 f"queue table at the start of each transaction and every {rd['every_s']:g} s "
                 f"(baseline: `{rd['sql']}`; pgq: `{rp['readers']['sql']}`); then {rb['post']} s "
                 f"more. Chart: readers.png.")
        L.append("")
        intervals(L, rb, rp, "readers", r["readers"].get("pgqr"))
        L.append("| readers | transactions | mean / max length (s) | share of the phase with >= 1 / all "
                 "open | scans | scan p50 / p99 ms |")
        L.append("|---|---:|---:|---:|---:|---:|")
        for name, h in (("baseline", rb), ("pgq", rp)) + (
                (("pgq ring queue", r["readers"]["pgqr"]),) if "pgqr" in r["readers"] else ()):
            x = h["readers"]
            L.append(f"| {name} | {x['xacts']} | {x['xact_mean_s']:.1f} / {x['xact_max_s']:.1f} | "
                     f"{x['share_any_open']:.1%} / {x['share_all_open']:.1%} | {x['scans']} | "
                     f"{x['scan_p50_ms']:.1f} / {x['scan_p99_ms']:.1f} |")
        L.append("")
    if "drain" in r:
        drain_section(L, r["drain"]["baseline"], r["drain"]["pgq"], r["drain"].get("pgqr"))
    targets(L, r)
    print("\n".join(L))


GNUPLOT = """\
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {{
  set terminal pngcairo size 1100,560 noenhanced font ",11"
}} else {{
  set terminal png size 1100,560 noenhanced
}}
set output "{png}"
set title "{title}"
set xlabel "seconds since the start of the run"
set ylabel "completed jobs/s (per {interval} s interval)"
set key outside below horizontal
set grid ytics
set xrange [0:{total}]
set yrange [0:*]
set offsets 0, 0, graph 0.15, 0
set object 1 rect from {lo},graph 0 to {hi},graph 1 behind fc rgb "#dddddd" fs solid 1.0 noborder
set label 1 "{band}" at {mid},graph 0.95 center
set arrow 1 from {lo},graph 0 to {lo},graph 1 nohead dt 2 lc rgb "#777777"
set arrow 2 from {hi},graph 0 to {hi},graph 1 nohead dt 2 lc rgb "#777777"
set y2label "claim latency p99, ms (thin dashed)"
set y2range [0:*]
set y2tics
set ytics nomirror
plot "{dat}" using 1:2 with steps lw 2.5 lc rgb "#d95f02" title "baseline (SKIP LOCKED table) jobs/s", \\
     "{dat}" using 1:3 with steps lw 2.5 lc rgb "#1b9e77" title "pgq_cpp jobs/s", \\
     {rate} with lines dt 3 lc rgb "#555555" title "producer pace ({rate} jobs/s)", \\
     "{dat}" using 1:4 axes x1y2 with steps dt 2 lw 1 lc rgb "#d95f02" title "baseline claim p99", \\
     "{dat}" using 1:5 axes x1y2 with steps dt 2 lw 1 lc rgb "#1b9e77" title "pgq_cpp claim p99"{ring}
"""
GNUPLOT_RING = (', \\\n'
                '     "{dat}" using 1:6 with steps lw 2.5 lc rgb "#7570b3" title "pgq_cpp ring queue jobs/s", \\\n'
                '     "{dat}" using 1:7 axes x1y2 with steps dt 2 lw 1 lc rgb "#7570b3" title "ring queue claim p99"')



def chart(outdir):
    r = json.load(open(os.path.join(outdir, "results.json")))
    made = []
    for part, stem, band in (("held", "held-xmin", "transaction holding a txid (xmin) open"),
                             ("readers", "readers", "overlapping REPEATABLE READ readers")):
        if part not in r:
            continue
        hb, hp = r[part]["baseline"], r[part]["pgq"]
        hr = r[part].get("pgqr")
        dat = os.path.join(outdir, f"{stem}.dat")

        def ring_cols(i):
            if not hr:
                return ""
            c = hr["rows"][min(i, len(hr["rows"]) - 1)]
            return f" {c['done_s']:.1f} {c['p99_ms']:.2f}"
        with open(dat, "w") as f:
            f.write("# from_s baseline_done_s pgq_done_s baseline_claim_p99_ms pgq_claim_p99_ms"
                    + (" ring_done_s ring_claim_p99_ms" if hr else "") + "\n")
            for i, (a, b) in enumerate(zip(hb["rows"], hp["rows"])):
                f.write(f"{a['from']} {a['done_s']:.1f} {b['done_s']:.1f} "
                        f"{a['p99_ms']:.2f} {b['p99_ms']:.2f}{ring_cols(i)}\n")
            a, b = hb["rows"][-1], hp["rows"][-1]   # closes the last step
            f.write(f"{a['to']} {a['done_s']:.1f} {b['done_s']:.1f} "
                    f"{a['p99_ms']:.2f} {b['p99_ms']:.2f}{ring_cols(len(hb['rows']) - 1)}\n")
        lo, hi = hb["pre"], hb["pre"] + hb["hold"]
        title = ("Held xmin: throughput per interval, pgq_cpp and the SKIP LOCKED baseline"
                 if part == "held" else
                 "Active readers: throughput per interval, pgq_cpp and the SKIP LOCKED baseline")
        gp = os.path.join(outdir, f"{stem}.gp")
        with open(gp, "w") as f:
            f.write(GNUPLOT.format(png=os.path.join(outdir, f"{stem}.png"), title=title,
                                   interval=hb["interval"], total=hb["rows"][-1]["to"], lo=lo,
                                   hi=hi, mid=(lo + hi) / 2, band=f"{band}, {hi - lo} s",
                                   dat=dat, rate=hb["rate"],
                                   ring=GNUPLOT_RING.format(dat=dat) if hr else ""))
        made.append(gp)
    print("\n".join(made))


if __name__ == "__main__":
    {"report": report, "chart": chart}[sys.argv[1]](sys.argv[2])
