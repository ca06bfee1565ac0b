#!/usr/bin/env bash
# Issue 34's go/no-go (ADR 0029): claim+complete of a queue with
# fairness => 'group' against the same queue without it, side by side in
# one throwaway durable cluster (as bench/run.sh). Both queues hold the
# same grouped jobs (group_concurrency 10,000, so that every job is ready
# on the ring); two shapes of keys:
#   3        three keys of 10,000 jobs each (one tenant's import beside two)
#   10000    10,000 keys of 3 jobs each (every key active)
# and two claim sizes: n = 1 (claim, complete) and n = 100 (claim,
# complete_many), each a fixed number of pgbench transactions (the same
# jobs for every variant; a run never drains a queue).
#
#   bash bench/fairness.sh
#   RUNS=1 CLIENTS=1 bash bench/fairness.sh       quick look
#   CAP=2 SHAPES=400 bash bench/fairness.sh       capped tenants: each key's
#     backlog waits in pgq.job_rows and is let in a job at each completion
#     (group_concurrency 2), so the ready jobs are mostly due rows of the
#     table, which a fair queue hands out in their keys' turns (keys x CAP
#     jobs are ready at once: 400 x 2 leaves four clients' claims of 100
#     enough)
#
# Both queues are filled once per shape and number of clients (a grouped
# enqueue costs as much as its group is deep: filling three keys takes
# minutes); every run then does the variants in turn (unfair, then fair,
# for n = 1 then n = 100), so drift hits both alike; the report gives the
# median jobs/s of each and fair/unfair.
# Output: the table on stdout and in $OUT_MD (default
# bench/results-fairness-latest.md).
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

RUNS="${RUNS:-3}"
CLIENTS="${CLIENTS:-1 4}"
SYNC="${SYNC:-on}"
SHAPES="${SHAPES:-3 10000}"
CAP="${CAP:-10000}" # group_concurrency of both queues
JOBS=30000          # per queue and shape, enough for every run
CLAIMS1=3000        # claim n = 1 transactions per run (all clients together)
CLAIMS100=60        # claim n = 100 transactions per run
OUT_MD="${OUT_MD:-$PGQ_ROOT/bench/results-fairness-latest.md}"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "RUNS must be a positive integer" >&2; exit 2; }
((RUNS * (CLAIMS1 + CLAIMS100 * 100) < JOBS)) || { echo "RUNS too high for $JOBS jobs" >&2; exit 2; }
[[ $SYNC == on || $SYNC == off ]] || { echo "SYNC must be on or off" >&2; exit 2; }
[[ "$CAP" =~ ^[1-9][0-9]*$ ]] || { echo "CAP must be a positive integer" >&2; exit 2; }

bench_install

PGDIR=/tmp/pgq_bench_fairness
PORT=55446
DB=bench
SCRIPTS=/tmp/pgq_bench_fairness_sql
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

for queue in unfair fair; do
  sed "s/'bench'/'$queue'/" "$PGQ_ROOT/bench/sql/pgq_claim1.sql" >"$SCRIPTS/$queue-1.sql"
  sed "s/'bench'/'$queue'/" "$PGQ_ROOT/bench/sql/pgq_claimN.sql" >"$SCRIPTS/$queue-100.sql"
done

# Both queues made again (their rings emptied) and filled with JOBS jobs
# of `keys` keys, the keys interleaved as tenants' jobs come.
prefill() {
  local keys=$1
  sql "SELECT pgq.drop_queue(name, force => true) FROM pgq.queues" >/dev/null
  sql "SELECT pgq.create_queue('unfair', group_concurrency => $CAP)" >/dev/null
  sql "SELECT pgq.create_queue('fair', group_concurrency => $CAP, fairness => 'group')" >/dev/null
  for queue in unfair fair; do
    # In transactions of 3,000: a grouped enqueue holds its group's lock
    # to its commit (one lock-table entry per group).
    sql "DO \$\$ BEGIN
           FOR s IN 0 .. $JOBS / 3000 - 1 LOOP
             PERFORM count(*) FROM pgq.enqueue_many('$queue',
               array_fill('{\"k\":1}'::jsonb, ARRAY[3000]),
               group_keys => (SELECT array_agg('tenant-' || ((s * 3000 + g) % $keys)) FROM generate_series(0, 2999) g));
             COMMIT;
           END LOOP;
         END \$\$"
  done
  sql "CHECKPOINT"
}

left_of() { sql "SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) WHERE q.name = '$1' AND j.state = 'p'"; }

declare -A TPS=()
for keys in $SHAPES; do
  for clients in $CLIENTS; do
    say "keys $keys, $clients client(s): filling both queues"
    prefill "$keys"
    for run in $(seq "$RUNS"); do
      for n in 1 100; do
        for queue in unfair fair; do
          count=$((n == 1 ? CLAIMS1 / clients : CLAIMS100 / clients))
          threads=$((clients < 2 ? clients : 2))
          out=$(PGOPTIONS="-c synchronous_commit=$SYNC" "$PG_BIN/pgbench" -n -M prepared -D n=$n \
                  -c "$clients" -j "$threads" -t "$count" -h "$PGDIR" -p "$PORT" -U postgres \
                  -f "$SCRIPTS/$queue-$n.sql" "$DB" 2>&1) || { echo "$out" | tail -5 >&2; exit 1; }
          tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out" | head -1)
          left=$(left_of "$queue")
          ((left > 0)) || { echo "$queue ran dry: lower the claims" >&2; exit 1; }
          jobs=$(awk -v t="$tps" -v n="$n" 'BEGIN { printf "%.1f", t * n }')
          TPS[$keys/$clients/$n/$queue]+="$jobs "
          printf '  keys=%-5s c=%s n=%-3s run %s %-6s %9.1f jobs/s  (%s left)\n' \
            "$keys" "$clients" "$n" "$run" "$queue" "$jobs" "$left" >&2
        done
      done
    done
  done
done

median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
{
  echo "# Issue 34: claim+complete with fairness => 'group' against the same queue without it"
  echo
  echo "$GIT_AT_START; $(date -u '+%Y-%m-%d %H:%M UTC'); RUNS=$RUNS SYNC=$SYNC JOBS=$JOBS per queue;"
  echo "group_concurrency $CAP;"
  echo "durable cluster, medians of jobs/s (n = 1: claim, complete; n = 100: claim, complete_many)."
  echo
  echo "| keys | clients | n | unfair | fair | fair/unfair |"
  echo "|---|---|---|---|---|---|"
  for keys in $SHAPES; do
    for clients in $CLIENTS; do
      for n in 1 100; do
        u=$(median "${TPS[$keys/$clients/$n/unfair]}")
        f=$(median "${TPS[$keys/$clients/$n/fair]}")
        awk -v k="$keys" -v c="$clients" -v n="$n" -v u="$u" -v f="$f" \
          'BEGIN { printf "| %s | %s | %s | %.0f | %.0f | %.2fx |\n", k, c, n, u, f, u ? f / u : 0 }'
      done
    done
  done
} | tee "$OUT_MD"
