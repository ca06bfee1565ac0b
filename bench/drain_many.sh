#!/usr/bin/env bash
# Deep churning drain, pgq_cpp only, one consumer shape against another
# (issue 31): the same consumers completing with `complete`, with
# `complete_many` of one, with the claim wrapped in a CTE that aggregates
# ids, attempts and payloads for `complete_many` (the shape of the relay,
# the clients and batch workers), and with claims of 100 completed by one
# `complete_many`, side by side in one cluster and one run.
#
#   bash bench/drain_many.sh
#   DRAIN_JOBS=20000 ROUNDS=1 bash bench/drain_many.sh      quick development run
#
# Per mode and round: the tables are truncated (the jobs table analyzed
# while empty first, as a queue that sat idle before a burst), PRODUCERS
# unthrottled producers push DRAIN_JOBS jobs one per transaction while
# CONSUMERS consumers claim and complete (two autocommit statements per
# claim, bench/sql/drain_pgq*.sql), synchronous_commit = off, pgbench -M
# prepared, autovacuum on with its defaults. Every SAMPLE seconds a monitor
# counts the jobs left; the run ends when the producers are done and the
# table is empty. Reported: drain time, jobs/s, the peak backlog, each
# mode's jobs/s against `complete`'s of the same round (compare ratios
# within one run: the machine may be shared), and the consumers' own rate
# once the producers are done (the backlog left then, over the time it took
# to empty: what the consumers cost on a deep churned table, not bound by
# the producers; shown when at least 1,000 jobs were left).
#
# Environment:
#   DRAIN_JOBS  jobs pushed per run (default 100000)
#   PRODUCERS, CONSUMERS  client counts (default 2 and 4)
#   MODES       which consumers, in this order each round (default
#               "complete many1 cte many100"):
#                 complete  claim 1, pgq.complete(id, attempt)
#                 many1     claim 1, pgq.complete_many(ARRAY[id], ARRAY[attempt])
#                 cte       claim 1 in a CTE aggregating ids, attempts, payloads,
#                           then complete_many of the aggregates
#                 many100   claim 100, one complete_many (producer-bound: the
#                           consumers keep up, the backlog stays small)
#   ROUNDS      rounds of all modes (default 2)
#   SAMPLE      seconds per monitor interval (default 2)
#   CONSUMER_DELAY  seconds the producers run before the consumers start
#               (default 0): a deeper backlog on a machine where the
#               consumers keep up with the producers
#   DRAIN_MAX   seconds after which a run gives up (default 600)
#   DRAIN_DIR, DRAIN_PORT  the throwaway cluster (default /tmp/pgq_drain_many, 55446)
#   NO_INSTALL  1: measure the pgq_cpp already installed
#   OUT_MD      report (default bench/drain-many-latest.md)

source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

DRAIN_JOBS="${DRAIN_JOBS:-100000}"
PRODUCERS="${PRODUCERS:-2}"
CONSUMERS="${CONSUMERS:-4}"
MODES="${MODES:-complete many1 cte many100}"
ROUNDS="${ROUNDS:-2}"
SAMPLE="${SAMPLE:-2}"
DRAIN_MAX="${DRAIN_MAX:-600}"
CONSUMER_DELAY="${CONSUMER_DELAY:-0}"
[[ $CONSUMER_DELAY =~ ^[0-9]+$ ]] || { echo "CONSUMER_DELAY must be a whole number of seconds" >&2; exit 2; }
NO_INSTALL="${NO_INSTALL:-0}"
for v in DRAIN_JOBS PRODUCERS CONSUMERS ROUNDS SAMPLE DRAIN_MAX; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a positive integer" >&2; exit 2; }
done
((DRAIN_JOBS % PRODUCERS == 0)) || { echo "DRAIN_JOBS must be a multiple of PRODUCERS" >&2; exit 2; }
declare -A SCRIPT=([complete]=drain_pgq.sql [many1]=drain_pgq_many1.sql [cte]=drain_pgq_cte.sql
                   [many100]=drain_pgq_batch.sql)
declare -A BATCH=([complete]=1 [many1]=1 [cte]=1 [many100]=100)
for mode in $MODES; do
  [[ -n ${SCRIPT[$mode]:-} ]] || { echo "unknown mode $mode (complete many1 cte many100)" >&2; exit 2; }
done

BENCH_HOME="$PGQ_ROOT/bench"
PGDIR="${DRAIN_DIR:-/tmp/pgq_drain_many}"
PORT="${DRAIN_PORT:-55446}"
DB=bench
OUT_MD="${OUT_MD:-$BENCH_HOME/drain-many-latest.md}"
WORK=$(mktemp -d)

bench_install

PSQL=("$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PGDIR" -p "$PORT" -U postgres -d "$DB")
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
say "starting the drain cluster in $PGDIR (port $PORT)"
start_cluster "$PGDIR" "$PORT" "${BENCH_DURABLE_CONF[@]}" "autovacuum = on"
"$PG_BIN/createdb" -h "$PGDIR" -p "$PORT" -U postgres "$DB"
sql "CREATE EXTENSION pgq_cpp"
sql "SELECT pgq.create_queue('bench')" >/dev/null
PGQ_TABLES=$(sql "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ')
                    FROM pg_tables WHERE schemaname = 'pgq' AND tablename NOT IN ('queues', 'segment_rings')")

seq_now() { sql "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM pgq.job_id_seq"; }

# pgbench_bg OUTFILE pgbench-args...: its exit status lands in OUTFILE.rc.
pgbench_bg() {
  local out="$1"; shift
  (
    rc=0
    PGOPTIONS="-c synchronous_commit=off" "$PG_BIN/pgbench" -n -M prepared \
      -h "$PGDIR" -p "$PORT" -U postgres "$@" "$DB" >"$out" 2>&1 || rc=$?
    echo "$rc" >"$out.rc"
  ) 2>/dev/null &
  PIDS+=($!)
  LAST_PID=$!
}

# one_run MODE ROUND: appends "mode round seconds jobs peak_backlog
# left_when_produced tail_seconds" to $WORK/totals.
one_run() {
  local mode="$1" round="$2" seq0 t0 elapsed left produced peak=0 next t_prod="" left_prod=0
  sql "TRUNCATE $PGQ_TABLES"
  sql "VACUUM ANALYZE pgq.job_rows"
  sql "CHECKPOINT"
  seq0=$(seq_now)
  local cons_out="$WORK/cons-$mode-$round" prod_out="$WORK/prod-$mode-$round"
  t0=$(date +%s.%N)
  pgbench_bg "$prod_out" -c "$PRODUCERS" -j 2 -t $((DRAIN_JOBS / PRODUCERS)) \
    -f "$BENCH_HOME/sql/pgq_enqueue.sql"
  local prod_pid=$LAST_PID
  sleep "$CONSUMER_DELAY"
  pgbench_bg "$cons_out" -c "$CONSUMERS" -j 2 -T "$DRAIN_MAX" -D batch="${BATCH[$mode]}" \
    -f "$BENCH_HOME/sql/${SCRIPT[$mode]}"
  local cons_pid=$LAST_PID
  next=$SAMPLE
  while :; do
    sleep 0.2
    elapsed=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')
    local prod_done=0
    if [[ -e "$prod_out.rc" ]]; then
      [[ $(cat "$prod_out.rc") == 0 ]] || { echo "producers failed:" >&2; tail -5 "$prod_out" >&2; exit 1; }
      prod_done=1
    fi
    # Sampled every SAMPLE seconds, and every 0.2 s once the producers are done.
    if ((prod_done == 0)) && awk -v e="$elapsed" -v n="$next" 'BEGIN { exit !(e < n) }'; then continue; fi
    left=$(sql "SELECT count(*) FROM pgq.jobs")
    ((left > peak)) && peak=$left
    if ((prod_done == 1)) && [[ -z $t_prod ]]; then t_prod=$elapsed; left_prod=$left; fi
    if ((prod_done == 0)); then
      printf '  %-8s round %s  t=%5s s  left %7s\n' "$mode" "$round" "$elapsed" "$left" >&2
      next=$((next + SAMPLE))
    fi
    produced=$(( $(seq_now) - seq0 ))
    if ((prod_done == 1 && left == 0)); then break; fi
    if awk -v e="$elapsed" -v m="$DRAIN_MAX" 'BEGIN { exit !(e >= m) }'; then
      echo "$mode round $round gave up after $DRAIN_MAX s ($left left)" >&2; exit 1
    fi
  done
  pkill -TERM -P "$cons_pid" pgbench 2>/dev/null || true
  wait "$cons_pid" "$prod_pid" 2>/dev/null || true
  if grep -qiE "error|abort" "$cons_out"; then
    echo "consumers of $mode reported errors:" >&2; grep -iE "error|abort" "$cons_out" | head -5 >&2; exit 1
  fi
  echo "$mode $round $elapsed $produced $peak $left_prod $(awk -v e="$elapsed" -v p="$t_prod" 'BEGIN { printf "%.1f", e - p }')" >>"$WORK/totals"
  say "$mode round $round: $produced jobs in $elapsed s (peak backlog $peak)"
}

START=$(date -u '+%Y-%m-%d %H:%M UTC')
LOAD_BEFORE=$(uptime | sed 's/.*load average: //')
for round in $(seq 1 "$ROUNDS"); do
  for mode in $MODES; do
    say "drain_many: $mode, round $round ($DRAIN_JOBS jobs, $PRODUCERS producers, $CONSUMERS consumers)"
    one_run "$mode" "$round"
  done
done
LOAD_AFTER=$(uptime | sed 's/.*load average: //')

# --- report -------------------------------------------------------------------
{
  echo "# pgq_cpp deep churning drain by completion shape ($START)"
  echo
  echo "Command: \`DRAIN_JOBS=$DRAIN_JOBS PRODUCERS=$PRODUCERS CONSUMERS=$CONSUMERS CONSUMER_DELAY=$CONSUMER_DELAY MODES=\"$MODES\" ROUNDS=$ROUNDS bash bench/drain_many.sh\`"
  echo "(measured: $GIT_AT_START; synchronous_commit = off, pgbench -M prepared, autovacuum on;"
  echo "load average before: $LOAD_BEFORE, after: $LOAD_AFTER)."
  echo
  echo "| mode | round | drain time s | jobs/s | vs complete (same round) | peak backlog | left when produced | consumers alone, jobs/s | vs complete |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  awk 'function tail(l, s) { return (l >= 1000 && s > 0) ? l / s : 0 }
       { rate[$1, $2] = $4 / $3; alone[$1, $2] = tail($6, $7); line[NR] = $0 }
       END {
         for (i = 1; i <= NR; i++) {
           split(line[i], f, " ")
           base = rate["complete", f[2]]; abase = alone["complete", f[2]]; a = alone[f[1], f[2]]
           printf "| %s | %s | %.1f | %.0f | %s | %d | %d | %s | %s |\n", f[1], f[2], f[3], f[4] / f[3],
                  (base > 0 ? sprintf("%.2fx", (f[4] / f[3]) / base) : "-"), f[5], f[6],
                  (a > 0 ? sprintf("%.0f", a) : "-"), (a > 0 && abase > 0 ? sprintf("%.2fx", a / abase) : "-")
         }
       }' "$WORK/totals"
  echo
  awk '{ t[$1] += $3; j[$1] += $4; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
       END {
         for (i = 1; i <= n; i++) {
           m = order[i]
           printf "%s over all rounds: %.0f jobs/s", m, j[m] / t[m]
           if (t["complete"] > 0) printf " (%.2fx complete)", (j[m] / t[m]) / (j["complete"] / t["complete"])
           printf "\n\n"
         }
       }' "$WORK/totals"
} | tee "$OUT_MD"
