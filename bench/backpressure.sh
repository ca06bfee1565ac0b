#!/usr/bin/env bash
# Issue 34's backpressure cost (ADR 0029 "Backpressure, as built"): the same
# calls into a queue with a max_pending (high enough never to refuse: every
# call reserves and commits its room) and into one without, side by side in
# one throwaway durable cluster (as bench/run.sh):
#   enqueue       pgq.enqueue, one job a transaction
#   enqueue_many  pgq.enqueue_many of 100 jobs
#   claim1        pgq.claim(n = 1) + pgq.complete
#   claim100      pgq.claim(n = 100) + pgq.complete_many
# each against a deep backlog (BACKLOG jobs enqueued first in both queues,
# so a completion's count and a producer's reservation meet a big count)
# with 1 and 4 clients. Every run does both queues in turn (in the other
# order every other run), so drift hits both alike; the report gives the median jobs/s of each and limited/open.
#
#   bash bench/backpressure.sh
#   RUNS=1 CLIENTS=1 bash bench/backpressure.sh     quick look
#
# Output: the table on stdout and in $OUT_MD (default
# bench/results-backpressure-latest.md).
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

RUNS="${RUNS:-3}"
CLIENTS="${CLIENTS:-1 4}"
SYNC="${SYNC:-on}"
BACKLOG="${BACKLOG:-100000}"
SECONDS_PER="${SECONDS_PER:-8}"
OUT_MD="${OUT_MD:-$PGQ_ROOT/bench/results-backpressure-latest.md}"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "RUNS must be a positive integer" >&2; exit 2; }
[[ $SYNC == on || $SYNC == off ]] || { echo "SYNC must be on or off" >&2; exit 2; }

bench_install

PGDIR=/tmp/pgq_bench_backpressure
PORT=55447
DB=bench
SCRIPTS=/tmp/pgq_bench_backpressure_sql
PSQL=("$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PGDIR" -p "$PORT" -U postgres -d "$DB")
sql() { "${PSQL[@]}" -c "$1"; }
trap 'stop_cluster "$PGDIR"' EXIT
stop_cluster "$PGDIR"
rm -rf "$PGDIR" "$SCRIPTS"
mkdir -p "$SCRIPTS"
say "starting the benchmark cluster in $PGDIR (port $PORT)"
start_cluster "$PGDIR" "$PORT" "${BENCH_DURABLE_CONF[@]}" "autovacuum = off"
"$PG_BIN/createdb" -h "$PGDIR" -p "$PORT" -U postgres "$DB"
sql "CREATE EXTENSION pgq_cpp"
GIT_AT_START="git $(git -C "$PGQ_ROOT" rev-parse --short HEAD)$(git -C "$PGQ_ROOT" diff --quiet HEAD -- src sql || echo ' (working tree modified)')"

VARIANTS="${VARIANTS:-enqueue enqueue_many claim1 claim100}"
declare -A FILE=([enqueue]=pgq_enqueue.sql [enqueue_many]=pgq_enqueue_many.sql
                 [claim1]=pgq_claim1.sql [claim100]=pgq_claimN.sql)
declare -A JOBS_PER=([enqueue]=1 [enqueue_many]=100 [claim1]=1 [claim100]=100)
for queue in open limited; do
  for v in $VARIANTS; do
    sed "s/'bench'/'$queue'/" "$PGQ_ROOT/bench/sql/${FILE[$v]}" >"$SCRIPTS/$queue-$v.sql"
  done
done

sql "SELECT pgq.create_queue('open')" >/dev/null
sql "SELECT pgq.create_queue('limited', max_pending => 2000000000)" >/dev/null
for queue in open limited; do
  sql "DO \$\$ BEGIN
         FOR s IN 1 .. $BACKLOG / 10000 LOOP
           PERFORM count(*) FROM pgq.enqueue_many('$queue', array_fill('{\"k\":1}'::jsonb, ARRAY[10000]));
           COMMIT;
         END LOOP;
       END \$\$"
done
sql "CHECKPOINT"
say "the limited queue's count: $(sql "SELECT format('kept %s, found %s', kept, found) FROM pgq.check_pending('limited')")"

declare -A TPS=()
for clients in $CLIENTS; do
  for run in $(seq "$RUNS"); do
    for v in $VARIANTS; do
      # Each run in the other order: whatever the first of a pair leaves
      # (WAL to flush, a checkpoint) falls on both alike.
      order="open limited"
      ((run % 2 == 0)) && order="limited open"
      for queue in $order; do
        threads=$((clients < 2 ? clients : 2))
        out=$(PGOPTIONS="-c synchronous_commit=$SYNC" "$PG_BIN/pgbench" -n -M prepared -D n=100 \
                -c "$clients" -j "$threads" -T "$SECONDS_PER" -h "$PGDIR" -p "$PORT" -U postgres \
                -f "$SCRIPTS/$queue-$v.sql" "$DB" 2>&1) || { echo "$out" | tail -5 >&2; exit 1; }
        tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out" | head -1)
        jobs=$(awk -v t="$tps" -v n="${JOBS_PER[$v]}" 'BEGIN { printf "%.1f", t * n }')
        TPS[$clients/$v/$queue]+="$jobs "
        printf '  c=%s %-12s run %s %-7s %9.1f jobs/s\n' "$clients" "$v" "$run" "$queue" "$jobs" >&2
      done
    done
  done
done
say "the limited queue's count at the end: $(sql "SELECT format('kept %s, found %s', kept, found) FROM pgq.check_pending('limited')")"

median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
{
  echo "# Issue 34: calls into a queue with max_pending against the same queue without it"
  echo
  echo "$GIT_AT_START; $(date -u '+%Y-%m-%d %H:%M UTC'); RUNS=$RUNS SYNC=$SYNC BACKLOG=$BACKLOG per queue,"
  echo "${SECONDS_PER} s a run; durable cluster, medians of jobs/s."
  echo
  echo "| call | clients | open | limited | limited/open |"
  echo "|---|---|---|---|---|"
  for v in $VARIANTS; do
    for clients in $CLIENTS; do
      o=$(median "${TPS[$clients/$v/open]}")
      l=$(median "${TPS[$clients/$v/limited]}")
      awk -v v="$v" -v c="$clients" -v o="$o" -v l="$l" \
        'BEGIN { printf "| %s | %s | %.0f | %.0f | %.2fx |\n", v, c, o, l, o ? l / o : 0 }'
    done
  done
} | tee "$OUT_MD"
