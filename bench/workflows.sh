#!/usr/bin/env bash
# Issue 18's costs, side by side in one throwaway cluster (durable, as
# bench/run.sh): one claim then one complete per pgbench transaction (the
# claim1 workload) on
#   baseline  the hand-written SKIP LOCKED queue (bench/baseline.sql)
#   single    a pgq queue without caps or dependencies
#   capped    a pgq queue with max_running high enough never to bind
#   multi4    pgq.claim(ARRAY[4 queues]) with the jobs spread over the four
#   parents   a pgq queue whose every job has one job waiting for it (in
#             another queue): each completion makes a child ready
#
#   bash bench/workflows.sh
#   DURATION=3 RUNS=1 CLIENTS=1 bash bench/workflows.sh     quick look
#
# Every (clients, run) does the variants in turn (A/B/C/D/E, then again), so
# drift hits all alike; the report gives the median jobs/s and each pgq
# variant's ratio to `single` and to the baseline. Output: the table on
# stdout and in $OUT_MD (default bench/results-workflows-latest.md).
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

DURATION="${DURATION:-5}"
RUNS="${RUNS:-3}"
CLIENTS="${CLIENTS:-1 4 8}"
SYNC="${SYNC:-on}"
PREFILL="${PREFILL:-40000}"
VARIANTS="${VARIANTS:-baseline single capped multi4 parents}"
OUT_MD="${OUT_MD:-$PGQ_ROOT/bench/results-workflows-latest.md}"
[[ "$DURATION" =~ ^[1-9][0-9]*$ && "$RUNS" =~ ^[1-9][0-9]*$ && "$PREFILL" =~ ^[1-9][0-9]*$ ]] ||
  { echo "DURATION, RUNS and PREFILL must be positive integers" >&2; exit 2; }
[[ $SYNC == on || $SYNC == off ]] || { echo "SYNC must be on or off" >&2; exit 2; }

bench_install

PGDIR=/tmp/pgq_bench_workflows
PORT=55442
DB=bench
SCRIPTS=/tmp/pgq_bench_workflows_sql
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
"${PSQL[@]}" -f "$PGQ_ROOT/bench/baseline.sql"
create_queues() {
  sql "SELECT pgq.create_queue('single')" >/dev/null
  sql "SELECT pgq.create_queue('capped', max_running => 10000)" >/dev/null
  sql "SELECT pgq.create_queue(q) FROM unnest(ARRAY['m1', 'm2', 'm3', 'm4']) q" >/dev/null
  sql "SELECT pgq.create_queue('parents')" >/dev/null
  sql "SELECT pgq.create_queue('children')" >/dev/null
}
create_queues
# Queues on rings (every queue since release 3.0, ADR 0028): their rings are not truncated under their lanes; the
# queues are dropped and made again before each variant instead.
RINGS=$(sql "SELECT count(*) > 0 FROM pgq.queues WHERE ring_id IS NOT NULL")
GIT_AT_START="git $(git -C "$PGQ_ROOT" rev-parse --short HEAD)$(git -C "$PGQ_ROOT" diff --quiet HEAD -- src sql || echo ' (working tree modified)')"

cp "$PGQ_ROOT/bench/sql/base_claim1.sql" "$SCRIPTS/baseline.sql"
for queue in single capped parents; do
  sed "s/'bench'/'$queue'/" "$PGQ_ROOT/bench/sql/pgq_claim1.sql" >"$SCRIPTS/$queue.sql"
done
sed "s/'bench'/ARRAY['m1', 'm2', 'm3', 'm4']/" "$PGQ_ROOT/bench/sql/pgq_claim1.sql" >"$SCRIPTS/multi4.sql"
grep -q "ARRAY\['m1'" "$SCRIPTS/multi4.sql" || { echo "could not make the multi4 script" >&2; exit 1; }

PGQ_TABLES=$(sql "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ')
                    FROM pg_tables WHERE schemaname = 'pgq'
                     AND tablename NOT IN ('queues', 'grants', 'segment_rings', 'rings', 'ring_segments')
                     AND tablename NOT LIKE 'job\\_log%'")

# The jobs a variant claims from, PREFILL of them.
prefill() {
  if [[ $RINGS == t ]]; then
    sql "SELECT pgq.drop_queue(name, force => true) FROM pgq.queues" >/dev/null
    create_queues
  fi
  sql "TRUNCATE bench_jobs, $PGQ_TABLES"
  case "$1" in
    baseline)
      sql "INSERT INTO bench_jobs (queue, payload) SELECT 'bench', '{\"k\":1}'::jsonb FROM generate_series(1, $PREFILL)" ;;
    single|capped|parents)
      sql "SELECT count(*) FROM pgq.enqueue_many('$1', array_fill('{\"k\":1}'::jsonb, ARRAY[$PREFILL]))" >/dev/null ;;
    multi4)
      sql "SELECT count(*) FROM unnest(ARRAY['m1', 'm2', 'm3', 'm4']) q,
             pgq.enqueue_many(q, array_fill('{\"k\":1}'::jsonb, ARRAY[$PREFILL / 4]))" >/dev/null ;;
  esac
  if [[ $1 == parents ]]; then
    # One child per parent, each waiting for it (parents' ids are contiguous).
    sql "SELECT count(pgq.enqueue('children', '{\"k\":1}', after => ARRAY[id]))
           FROM pgq.list_jobs('parents', 'ready', 10000) WHERE false" >/dev/null
    # In transactions of 1,000: a child of a ring job holds a lock of its
    # parent until it commits (ADR 0028), one lock-table entry each.
    sql "DO \$\$ DECLARE lo bigint; hi bigint; BEGIN
           SELECT min(id), max(id) INTO lo, hi FROM pgq.jobs WHERE state = 'p';
           FOR s IN 0 .. (hi - lo) / 1000 LOOP
             PERFORM pgq.enqueue('children', '{\"k\":1}', after => ARRAY[g])
                FROM generate_series(lo + s * 1000, least(hi, lo + s * 1000 + 999)) g;
             COMMIT;
           END LOOP;
         END \$\$"
    local waiting
    waiting=$(sql "SELECT count(*) FROM pgq.jobs WHERE state = 'b'")
    [[ $waiting == "$PREFILL" ]] || { echo "parents: $waiting children waiting, not $PREFILL" >&2; exit 1; }
  fi
  sql "VACUUM ANALYZE bench_jobs"
  sql "VACUUM ANALYZE pgq.job_rows"
  sql "CHECKPOINT"
}

left_of() {
  case "$1" in
    baseline) sql "SELECT count(*) FROM bench_jobs WHERE status = 'pending'" ;;
    *) sql "SELECT count(*) FROM pgq.jobs WHERE state = 'p' AND queue_id IN
              (SELECT queue_id FROM pgq.queues WHERE name <> 'children')" ;;
  esac
}

declare -A TPS=()
for clients in $CLIENTS; do
  for run in $(seq "$RUNS"); do
    for variant in $VARIANTS; do
      prefill "$variant"
      threads=$((clients < 2 ? clients : 2))
      out=$(PGOPTIONS="-c synchronous_commit=$SYNC" "$PG_BIN/pgbench" -n -M prepared \
              -c "$clients" -j "$threads" -T "$DURATION" -h "$PGDIR" -p "$PORT" -U postgres \
              -f "$SCRIPTS/$variant.sql" "$DB" 2>&1) || { echo "$out" | tail -5 >&2; exit 1; }
      tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out" | head -1)
      left=$(left_of "$variant")
      ((left > 0)) || { echo "$variant c=$clients ran dry: raise PREFILL" >&2; exit 1; }
      if [[ $variant == parents ]]; then
        ready=$(sql "SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id)
                      WHERE q.name = 'children' AND j.state = 'p'")
        done_parents=$((PREFILL - left - $(sql "SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) WHERE q.name = 'parents' AND j.state = 'r'")))
        [[ $ready == "$done_parents" ]] ||
          { echo "parents: $done_parents completed but $ready children ready" >&2; exit 1; }
      fi
      TPS[$variant/$clients]+="$tps "
      printf '  c=%-2s run %s %-9s %9.1f jobs/s  (%s left)\n' "$clients" "$run" "$variant" "$tps" "$left" >&2
    done
  done
done

median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
{
  echo "# Issue 18: caps, claims across queues, dependencies (claim1: claim 1, then complete)"
  echo
  echo "$GIT_AT_START; $(date -u '+%Y-%m-%d %H:%M UTC'); DURATION=$DURATION RUNS=$RUNS SYNC=$SYNC PREFILL=$PREFILL;"
  echo "durable cluster, medians of jobs/s (pgbench tps, one job per transaction pair)."
  echo
  echo "| clients | baseline | single | capped | multi4 | parents | capped/single | multi4/single | parents/single | capped/baseline | single/baseline |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  for clients in $CLIENTS; do
    declare -A M=()
    # A variant left out of VARIANTS shows as 0 (its ratios as 0.00x).
    for variant in baseline single capped multi4 parents; do M[$variant]=0; done
    for variant in $VARIANTS; do M[$variant]=$(median "${TPS[$variant/$clients]}"); done
    awk -v c="$clients" -v b="${M[baseline]}" -v s="${M[single]}" -v k="${M[capped]}" \
        -v m="${M[multi4]}" -v p="${M[parents]}" 'BEGIN {
      printf "| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.2fx | %.2fx | %.2fx | %.2fx | %.2fx |\n",
             c, b, s, k, m, p, s ? k / s : 0, s ? m / s : 0, s ? p / s : 0, b ? k / b : 0,
             b ? s / b : 0 }'
  done
} | tee "$OUT_MD"
