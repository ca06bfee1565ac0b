#!/usr/bin/env bash
# Deep churning drain with C clients (pgbench): pgq_cpp against the
# hand-written plain-SQL queue (bench/baseline.sql) in one throwaway cluster,
# pgq_cpp twice: the queue 'bench' (pgq) and the queue 'bench_ring' (pgqr,
# dropped and created again before each of its runs; bench/sql/*pgqr*.sql).
# Both keep their jobs on rings since release 3.0 (ADR 0028); before it, pgq
# was a table queue and pgqr one made with a development setting.
#
#   bash bench/drain.sh
#   DRAIN_JOBS=20000 ROUNDS=1 bash bench/drain.sh      quick development run
#
# The workload of issue 6: DRAIN_JOBS jobs pushed by PRODUCERS unthrottled
# producers (one enqueue per transaction) while CONSUMERS consumers claim and
# complete one job at a time (two autocommit statements; bench/sql/drain_*.sql),
# synchronous_commit = off, autovacuum on with its defaults, from empty
# tables. Every SAMPLE seconds a monitor session counts the jobs produced
# (from the id sequence) and left (count(*) of the table); the run ends when
# the producers are done and the table is empty (or after DRAIN_MAX seconds).
# The ring queue's left is count(*) of pgq.job_rows (jobs moved there) plus its
# ring's entries minus its closures (each entry gets at most one closure, and
# a segment is truncated only once all its entries are closed): exact, one
# sequential read of the ring without the grouping of pgq.ring_jobs, but of
# every row the ring holds, done or not (600,000 rows at the end of a run of
# 200,000 jobs within a turn: 0.1-0.6 s a sample on this machine, once a
# second at the end of a run; the report gives the monitor's times). The
# completions of pgq.queue_counters() would cost nothing, but count a ring
# queue's completions twice as built (reported beside). Once per pgqr run
# (the first sample with more than 1,000 left) the monitor also counts
# pgq.ring_jobs (plus pgq.job_rows) and reports both counts with their times and
# the counters; at the end of each pgqr run it checks that the count is 0.
# Reported per system: drain time and jobs/s, the completion rate and the
# consumers' mean transaction latency per interval, and the slowest interval
# after the peak against the peak (the "falls to 40 % of its clean rate" of
# the issue).
# bench/bloat.sh has the same workload with Python clients.
#
# Environment:
#   DRAIN_JOBS  jobs pushed per run (default 200000)
#   PRODUCERS, CONSUMERS  client counts (default 2 and 4)
#   BATCH       jobs a consumer claims at once (default 1: claim then
#               complete; above 1: claim BATCH then complete_many,
#               bench/sql/drain_pgq_batch.sql; the hand-written queue claims
#               with LIMIT BATCH either way). With 100 the run is
#               producer-bound: it measures enqueue while claims run.
#   COMPLETE    one (default) or many: with BATCH=1, pgq and pgqr complete
#               with complete_many(ARRAY[id], ARRAY[attempt]) instead of
#               complete (bench/sql/drain_pgq_many1.sql, drain_pgqr_many1.sql;
#               issue 33's "with complete_many" at n = 1); the baseline and
#               pgmq are unchanged
#   ROUNDS      baseline-then-pgq-then-pgqr rounds (default 2)
#   DRAIN_SYSTEMS  the systems measured, in order (default "baseline pgq pgqr",
#               and pgmq when PGMQ_SQL is given)
#   RING_TURN   pgq.ring_turn in the cluster's configuration (default: not
#               set, the server's 1 min)
#   DRAIN_DIR, DRAIN_PORT  the throwaway cluster (default /tmp/pgq_drain, 55443)
#   SAMPLE      seconds per interval (default 5)
#   DRAIN_MAX   seconds after which a run gives up (default 900)
#   STATS       seeded (default): before each run the table is filled with
#               DRAIN_JOBS jobs, analyzed and truncated, so the planner has
#               column statistics of a backlog (the hand-written queue at its
#               best); empty: analyzed while empty, as a queue that sat idle
#               before a burst (its claim then runs at a few jobs/s until
#               autoanalyze; see bench/RESULTS.md)
#   PGMQ_SQL    a copy of pgmq's pgmq-extension/sql/pgmq.sql (pgmq 1.x is plain
#               SQL; not shipped here): adds pgmq as a third system, loaded
#               into the same database as a schema (pgmq.send one message per
#               transaction; pgmq.read BATCH with a visibility timeout, then
#               pgmq.delete; bench/sql/*pgmq*.sql)
#   NO_INSTALL  1: measure the pgq_cpp already installed
#   OUT_MD      report (default bench/drain-latest.md)
#
# Truncating pgq.job_rows behind pgq_cpp's back is safe for its claim hint: it
# only removes jobs, and a hint may point before jobs that are gone.
#
# Wall time with the defaults: about 3 x ROUNDS x (drain time + 10 s), some
# 9-15 minutes on this 2-core machine.

source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

DRAIN_JOBS="${DRAIN_JOBS:-200000}"
PRODUCERS="${PRODUCERS:-2}"
CONSUMERS="${CONSUMERS:-4}"
BATCH="${BATCH:-1}"
ROUNDS="${ROUNDS:-2}"
SAMPLE="${SAMPLE:-5}"
DRAIN_MAX="${DRAIN_MAX:-900}"
NO_INSTALL="${NO_INSTALL:-0}"
STATS="${STATS:-seeded}"
COMPLETE="${COMPLETE:-one}"
[[ $COMPLETE == one || $COMPLETE == many ]] || { echo "COMPLETE must be one or many" >&2; exit 2; }
[[ $STATS == seeded || $STATS == empty ]] || { echo "STATS must be seeded or empty" >&2; exit 2; }
for v in DRAIN_JOBS PRODUCERS CONSUMERS BATCH ROUNDS SAMPLE DRAIN_MAX; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a positive integer" >&2; exit 2; }
done
((DRAIN_JOBS % PRODUCERS == 0)) || { echo "DRAIN_JOBS must be a multiple of PRODUCERS" >&2; exit 2; }

BENCH_HOME="$PGQ_ROOT/bench"
PGDIR="${DRAIN_DIR:-/tmp/pgq_drain}"
PGPORT_DRAIN="${DRAIN_PORT:-55443}"
RING_TURN="${RING_TURN:-}"
DB=bench
OUT_MD="${OUT_MD:-$BENCH_HOME/drain-latest.md}"
WORK=$(mktemp -d)

bench_install

PSQL=("$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PGDIR" -p "$PGPORT_DRAIN" -U postgres -d "$DB")
sql() { "${PSQL[@]}" -c "$1"; }
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do pkill -P "$p" pgbench 2>/dev/null || true; done
  stop_cluster "$PGDIR"
  rm -rf "$WORK"
}
trap cleanup EXIT

stop_cluster "$PGDIR"
rm -rf "$PGDIR"
GIT_AT_START="git $(git -C "$PGQ_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$PGQ_ROOT" diff --quiet HEAD -- src sql 2>/dev/null || echo ' (working tree modified)')"
say "starting the drain cluster in $PGDIR (port $PGPORT_DRAIN)"
RING_CONF=()
[[ -n $RING_TURN ]] && RING_CONF=("pgq.ring_turn = '$RING_TURN'")
start_cluster "$PGDIR" "$PGPORT_DRAIN" "${BENCH_DURABLE_CONF[@]}" "autovacuum = on" "${RING_CONF[@]}"
"$PG_BIN/createdb" -h "$PGDIR" -p "$PGPORT_DRAIN" -U postgres "$DB"
sql "CREATE EXTENSION pgq_cpp"
sql "SELECT pgq.create_queue('bench')" >/dev/null
"${PSQL[@]}" -f "$BENCH_HOME/baseline.sql"
SYSTEMS="baseline pgq pgqr"
if [[ -n ${PGMQ_SQL:-} ]]; then
  "${PSQL[@]}" -f "$PGMQ_SQL" >/dev/null
  sql "SELECT pgmq.create('bench')" >/dev/null
  SYSTEMS="baseline pgq pgqr pgmq"
fi
SYSTEMS="${DRAIN_SYSTEMS:-$SYSTEMS}"

# Every table of schema pgq but the queues and the rings' (the ring queue's
# segments are partitions of pgq.job_log, and its lane in shared memory
# knows what they hold: it is dropped and created again instead).
PGQ_TABLES=$(sql "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ')
                    FROM pg_tables WHERE schemaname = 'pgq'
                     AND tablename NOT IN ('queues', 'segment_rings', 'rings', 'ring_segments')
                     AND tablename NOT LIKE 'job\_log%'")
# The ring queue: dropped and created again before each of its runs.
new_ring_queue() {
  sql "SELECT pgq.drop_queue(name, true) FROM pgq.queues WHERE name = 'bench_ring'" >/dev/null
  sql "SELECT pgq.create_queue('bench_ring')" >/dev/null
  RING_ID=$(sql "SELECT ring_id FROM pgq.queues WHERE name = 'bench_ring'")
  [[ $RING_ID =~ ^[0-9]+$ ]] || { echo "bench_ring has no ring (the library not preloaded?)" >&2; exit 1; }
}
new_ring_queue

declare -A TABLE=([baseline]=bench_jobs [pgq]=pgq.job_rows [pgqr]=pgq.job_rows [pgmq]=pgmq.q_bench)
declare -A SEQ=([baseline]=bench_jobs_id_seq [pgq]=pgq.job_id_seq [pgqr]=pgq.job_id_seq [pgmq]=pgmq.q_bench_msg_id_seq)
declare -A CONSUME=([baseline]=drain_base.sql [pgq]=drain_pgq.sql [pgqr]=drain_pgqr.sql [pgmq]=drain_pgmq.sql)
if ((BATCH > 1)); then
  CONSUME=([baseline]=drain_base.sql [pgq]=drain_pgq_batch.sql [pgqr]=drain_pgqr_batch.sql [pgmq]=drain_pgmq.sql)
elif [[ $COMPLETE == many ]]; then
  CONSUME=([baseline]=drain_base.sql [pgq]=drain_pgq_many1.sql [pgqr]=drain_pgqr_many1.sql [pgmq]=drain_pgmq.sql)
fi
declare -A PRODUCE=([baseline]=base_enqueue.sql [pgq]=pgq_enqueue.sql [pgqr]=pgqr_enqueue.sql [pgmq]=pgmq_enqueue.sql)

RING_COUNTERS="(SELECT coalesce(sum(claims), 0) || ' ' || coalesce(sum(completions), 0) FROM pgq.queue_counters() WHERE queue = 'bench_ring')"
# ring_left: pgq.job_rows plus the ring's entries minus its closures (reads the ring).
ring_left() {
  sql "SELECT (SELECT count(*) FROM pgq.job_rows)
            + (SELECT count(*) FILTER (WHERE kind = 'e') - count(*) FILTER (WHERE kind = 'c')
                 FROM pgq.job_log_$RING_ID)"
}
# left_now SYSTEM: the jobs not finished yet.
left_now() {
  if [[ $1 == pgqr ]]; then
    ring_left
  else
    sql "SELECT count(*) FROM ${TABLE[$1]}"
  fi
}
# ms_now: milliseconds since the epoch.
ms_now() { date +%s%3N; }

seq_now() { sql "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM ${SEQ[$1]}"; }

# pgbench_bg OUTFILE OPTIONS pgbench-args...: starts pgbench with
# synchronous_commit off and the server OPTIONS; its exit status lands in
# OUTFILE.rc when it ends.
pgbench_bg() {
  local out="$1" opts="$2"; shift 2
  (
    rc=0
    PGOPTIONS="-c synchronous_commit=off $opts" "$PG_BIN/pgbench" -n -M prepared \
      -h "$PGDIR" -p "$PGPORT_DRAIN" -U postgres "$@" "$DB" >"$out" 2>&1 || rc=$?
    echo "$rc" >"$out.rc"
  ) 2>/dev/null &  # no "Terminated" line when the consumers are stopped
  PIDS+=($!)
  LAST_PID=$!
}

# one_run SYSTEM ROUND: appends "system round t produced left rate lat" lines
# to $WORK/intervals and "system round seconds jobs" to $WORK/totals.
one_run() {
  local system="$1" round="$2" seq0 t0 elapsed produced left prev_done=0 done_ rate lat
  sql "TRUNCATE bench_jobs, $PGQ_TABLES"
  if [[ $system == pgqr ]]; then new_ring_queue; fi
  if [[ $system == pgmq ]]; then sql "TRUNCATE pgmq.q_bench, pgmq.a_bench"; fi
  if [[ $STATS == seeded && $system == pgmq ]]; then
    sql "SELECT count(*) FROM pgmq.send_batch('bench', array_fill('{\"k\":1}'::jsonb, ARRAY[$DRAIN_JOBS]))" >/dev/null
    sql "ANALYZE pgmq.q_bench"
    sql "TRUNCATE pgmq.q_bench"
  elif [[ $system == pgmq ]]; then
    sql "VACUUM ANALYZE pgmq.q_bench"
  elif [[ $STATS == seeded ]]; then
    # TRUNCATE keeps the column statistics ANALYZE took of the backlog (the
    # ring queue: those of pgq.job_rows, which its claim looks at first).
    if [[ $system == pgq || $system == pgqr ]]; then
      sql "SELECT count(*) FROM pgq.enqueue_many('bench', array_fill('{\"k\":1}'::jsonb, ARRAY[$DRAIN_JOBS]))" >/dev/null
    else
      sql "INSERT INTO bench_jobs (queue, payload) SELECT 'bench', '{\"k\":1}'::jsonb FROM generate_series(1, $DRAIN_JOBS)"
    fi
    sql "ANALYZE ${TABLE[$system]}"
    sql "TRUNCATE bench_jobs, $PGQ_TABLES"
  else
    sql "VACUUM ANALYZE bench_jobs" && sql "VACUUM ANALYZE pgq.job_rows"
  fi
  sql "CHECKPOINT"
  seq0=$(seq_now "$system")
  C0=$(sql "SELECT $RING_COUNTERS")
  local cons_out="$WORK/cons-$system-$round" prod_out="$WORK/prod-$system-$round"
  pgbench_bg "$cons_out" "" -c "$CONSUMERS" -j 2 -T "$DRAIN_MAX" -P "$SAMPLE" -D batch="$BATCH" -f "$BENCH_HOME/sql/${CONSUME[$system]}"
  local cons_pid=$LAST_PID
  pgbench_bg "$prod_out" "" -c "$PRODUCERS" -j 2 -t $((DRAIN_JOBS / PRODUCERS)) -f "$BENCH_HOME/sql/${PRODUCE[$system]}"
  local prod_pid=$LAST_PID
  t0=$(date +%s.%N)
  local next=$SAMPLE prod_done=0 last=0 peak_left=0 prod_t=- prod_left=-
  # The monitor counts at each interval's end, and once the producers are
  # done every second: it is itself a reader of the table, so it stays light.
  while :; do
    elapsed=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')
    if ((prod_done == 0)) && [[ -e "$prod_out.rc" ]]; then
      [[ $(cat "$prod_out.rc") == 0 ]] || { echo "producers failed:" >&2; tail -5 "$prod_out" >&2; exit 1; }
      prod_done=1
    fi
    if awk -v e="$elapsed" -v n="$next" 'BEGIN { exit !(e >= n) }' \
       || { ((prod_done == 1)) && awk -v e="$elapsed" -v l="$last" 'BEGIN { exit !(e >= l + 1) }'; }; then
      last=$elapsed
      # Left first, then produced: a job counted as produced but not seen in
      # the count was enqueued in between, so "done" may be over by a few.
      local m0; m0=$(ms_now)
      left=$(left_now "$system")
      echo "$system $round $(( $(ms_now) - m0 ))" >>"$WORK/monitor"
      if [[ $system == pgqr ]] && ((left > 1000)) && [[ ! -e $WORK/viewcheck-$round ]]; then
        local v0 vleft v1 rleft v2 cnt
        v0=$(ms_now)
        vleft=$(sql "SELECT (SELECT count(*) FROM pgq.job_rows) + (SELECT count(*) FROM pgq.ring_jobs)")
        v1=$(ms_now)
        rleft=$(ring_left)
        v2=$(ms_now)
        cnt=$(sql "SELECT $RING_COUNTERS")
        echo "$round $elapsed $left $vleft $rleft $((v1 - v0)) $((v2 - v1)) $(( ${cnt% *} - ${C0% *} )) $(( ${cnt#* } - ${C0#* } )) $(( $(seq_now "$system") - seq0 ))" >"$WORK/viewcheck-$round"
      fi
      produced=$(( $(seq_now "$system") - seq0 ))
      done_=$((produced - left))
      ((left > peak_left)) && peak_left=$left
      if ((prod_done == 1)) && [[ $prod_t == - ]]; then prod_t=$elapsed; prod_left=$left; fi
      if ((prod_done == 1 && left == 0)) || awk -v e="$elapsed" -v m="$DRAIN_MAX" 'BEGIN { exit !(e >= m) }'; then
        rate=$(awk -v d="$((done_ - prev_done))" -v e="$elapsed" -v n="$next" -v s="$SAMPLE" \
               'BEGIN { span = e - (n - s); printf "%.0f", (span > 0 ? d / span : 0) }')
        echo "$system $round $elapsed $produced $left $rate -" >>"$WORK/intervals"
        echo "$system $round $elapsed $done_" >>"$WORK/totals"
        [[ $prod_t == - ]] && { prod_t=$elapsed; prod_left=$left; }
        echo "$system $round $elapsed $peak_left $prod_t $prod_left" >>"$WORK/backlog"
        break
      fi
      if awk -v e="$elapsed" -v n="$next" 'BEGIN { exit !(e >= n) }'; then
        lat=$(grep -E "^progress: $next\.0 s" "$cons_out" | sed -n 's/.* lat \([0-9.]*\) ms.*/\1/p' | tail -1)
        echo "$system $round $next $produced $left $(( (done_ - prev_done) / SAMPLE )) ${lat:--}" >>"$WORK/intervals"
        printf '  %-8s round %s  t=%4s s  produced %7s  left %7s  %6s jobs/s  lat %s ms\n' \
          "$system" "$round" "$next" "$produced" "$left" "$(( (done_ - prev_done) / SAMPLE ))" "${lat:--}" >&2
        prev_done=$done_
        next=$((next + SAMPLE))
      fi
    fi
    sleep 0.1
  done
  # Background jobs ignore SIGINT; SIGTERM ends the -T run early.
  pkill -TERM -P "$cons_pid" pgbench 2>/dev/null || true
  wait "$cons_pid" "$prod_pid" 2>/dev/null || true
  if grep -qiE "error|abort" "$cons_out"; then
    echo "consumers of $system reported errors:" >&2; grep -iE "error|abort" "$cons_out" | head -5 >&2; exit 1
  fi
  if [[ $system == pgqr ]]; then
    local rl cnt; rl=$(ring_left)
    cnt=$(sql "SELECT $RING_COUNTERS")
    echo "$round $rl $(( ${cnt% *} - ${C0% *} )) $(( ${cnt#* } - ${C0#* } )) $done_" >>"$WORK/ringend"
    ((rl == 0)) || echo "pgqr round $round: the ring's entries minus closures plus pgq.job_rows is $rl at the end, not 0" >&2
  fi
  say "$system round $round: $done_ jobs in $elapsed s"
}

START=$(date -u '+%Y-%m-%d %H:%M UTC')
LOAD_BEFORE=$(uptime | sed 's/^ *//')
for round in $(seq 1 "$ROUNDS"); do
  for system in $SYSTEMS; do
    say "drain: $system, round $round ($DRAIN_JOBS jobs, $PRODUCERS producers, $CONSUMERS consumers)"
    one_run "$system" "$round"
  done
done

# --- report -------------------------------------------------------------------
{
  echo "# pgq_cpp deep churning drain, pgbench clients ($START)"
  echo
  echo "Command: \`STATS=$STATS DRAIN_JOBS=$DRAIN_JOBS PRODUCERS=$PRODUCERS CONSUMERS=$CONSUMERS BATCH=$BATCH$([[ $COMPLETE == many ]] && echo " COMPLETE=many") ROUNDS=$ROUNDS SAMPLE=$SAMPLE${DRAIN_SYSTEMS:+ DRAIN_SYSTEMS=\"$DRAIN_SYSTEMS\"}${RING_TURN:+ RING_TURN=$RING_TURN} bash bench/drain.sh\`"
  echo "(measured: $GIT_AT_START; synchronous_commit = off, autovacuum on with defaults,"
  echo "claim and complete as two autocommit statements per job)."
  if [[ -n ${PGMQ_SQL:-} ]]; then
    echo "pgmq: \`$(basename "$PGMQ_SQL")\` (sha256 $(sha256sum "$PGMQ_SQL" | cut -c1-12)), loaded as a schema."
  fi
  if [[ " $SYSTEMS " == *" pgqr "* ]]; then
    echo "pgqr: the ring queue 'bench_ring' (dropped and created again before each run; pgq.ring_turn $(sql "SHOW pgq.ring_turn"))."
  fi
  echo "Load before: \`$LOAD_BEFORE\`; after: \`$(uptime | sed 's/^ *//')\`."
  echo
  echo "| system | round | drain time s | jobs/s | peak interval jobs/s (at s) | slowest interval after the peak (at s) | slowest/peak | consumer latency at peak -> max ms |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  while read -r system round secs jobs; do
    # Whole intervals only (the last, partial one has no latency column).
    awk -v s="$system" -v r="$round" -v secs="$secs" -v jobs="$jobs" '
      $1 == s && $2 == r && $7 != "-" { n++; rate[n] = $6; at[n] = $3; lat[n] = $7 }
      END {
        p = 1
        for (i = 2; i <= n; i++) if (rate[i] > rate[p]) p = i
        slow = p; maxlat = p
        for (i = p + 1; i <= n; i++) { if (rate[i] < rate[slow]) slow = i
                                       if (lat[i] + 0 > lat[maxlat] + 0) maxlat = i }
        printf "| %s | %s | %.1f | %.0f | %d (%s) | %d (%s) | %.2f | %s -> %s |\n",
               s, r, secs, jobs / secs, rate[p], at[p], rate[slow], at[slow],
               (rate[p] > 0 ? rate[slow] / rate[p] : 0), lat[p], lat[maxlat]
      }' "$WORK/intervals"
  done <"$WORK/totals"
  echo
  awk '{ t[$1] += $3; j[$1] += $4 } END {
         if (t["baseline"] > 0 && t["pgq"] > 0)
           printf "pgq/baseline, jobs/s over all rounds: %.2fx (%.0f vs %.0f jobs/s)\n",
                  (j["pgq"] / t["pgq"]) / (j["baseline"] / t["baseline"]), j["pgq"] / t["pgq"], j["baseline"] / t["baseline"]
         if (t["pgmq"] > 0 && t["pgq"] > 0)
           printf "\npgq/pgmq, jobs/s over all rounds: %.2fx (%.0f vs %.0f jobs/s)\n",
                  (j["pgq"] / t["pgq"]) / (j["pgmq"] / t["pgmq"]), j["pgq"] / t["pgq"], j["pgmq"] / t["pgmq"]
         if (t["baseline"] > 0 && t["pgqr"] > 0)
           printf "\npgqr/baseline, jobs/s over all rounds: %.2fx (%.0f vs %.0f jobs/s)\n",
                  (j["pgqr"] / t["pgqr"]) / (j["baseline"] / t["baseline"]), j["pgqr"] / t["pgqr"], j["baseline"] / t["baseline"]
         if (t["pgq"] > 0 && t["pgqr"] > 0)
           printf "\npgqr/pgq, jobs/s over all rounds: %.2fx (%.0f vs %.0f jobs/s)\n",
                  (j["pgqr"] / t["pgqr"]) / (j["pgq"] / t["pgq"]), j["pgqr"] / t["pgqr"], j["pgq"] / t["pgq"]
         if (t["pgmq"] > 0 && t["pgqr"] > 0)
           printf "\npgqr/pgmq, jobs/s over all rounds: %.2fx (%.0f vs %.0f jobs/s)\n",
                  (j["pgqr"] / t["pgqr"]) / (j["pgmq"] / t["pgmq"]), j["pgqr"] / t["pgqr"], j["pgmq"] / t["pgmq"] }' "$WORK/totals"
  echo
  echo "The backlog: its peak at the monitor's samples, and the consumers alone once the producers were done (the jobs left at the first sample after, over the time to empty; shown from 1,000 left):"
  echo
  echo "| system | round | peak left | producers done by s | left then | consumers alone jobs/s |"
  echo "|---|---:|---:|---:|---:|---:|"
  awk '{ own = "-"; if ($6 >= 1000 && $3 > $5) own = sprintf("%.0f", $6 / ($3 - $5))
         printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $4, $5, $6, own }' "$WORK/backlog"
  if [[ -s $WORK/monitor ]]; then
    echo
    echo "The monitor's count of the jobs left, per system (ms a sample, psql's round trip included):"
    echo
    echo "| system | samples | mean ms | max ms |"
    echo "|---|---:|---:|---:|"
    awk '{ n[$1]++; s[$1] += $3; if ($3 > m[$1]) m[$1] = $3 }
         END { for (k in n) printf "| %s | %d | %.0f | %d |\n", k, n[k], s[k] / n[k], m[k] }' "$WORK/monitor" | sort
  fi
  if compgen -G "$WORK/viewcheck-*" >/dev/null; then
    echo
    echo "pgqr, once per round: the monitor's count (entries - closures, plus pgq.job_rows) against pgq.ring_jobs (plus pgq.job_rows) and the ring's entries - closures again, one after the other (the backlog moves meanwhile), with their times (ms, psql's round trip included), and pgq.queue_counters()' claims and completions of the run so far beside the ids drawn:"
    echo
    echo "| round | t s | left (monitor) | by pgq.ring_jobs | by entries - closures | pgq.ring_jobs ms | entries - closures ms | counted claims | counted completions | ids drawn |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    cat "$WORK"/viewcheck-* | awk '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 }'
  fi
  if [[ -s $WORK/ringend ]]; then
    echo
    echo "pgqr at the end of each round: the ring's entries minus closures plus pgq.job_rows (0: every job is closed), and pgq.queue_counters()' claims and completions of the run against the jobs done:"
    echo
    echo "| round | entries - closures + pgq.job_rows | counted claims | counted completions | jobs done |"
    echo "|---:|---:|---:|---:|---:|"
    awk '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }' "$WORK/ringend"
  fi
  echo
  echo "Per interval (completions counted by the monitor; latency from pgbench -P, which also counts empty claims):"
  echo
  echo "| system | round | t s | produced | left | jobs/s | consumer latency ms |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  awk '{ printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7 }' "$WORK/intervals"
} | tee "$OUT_MD"
