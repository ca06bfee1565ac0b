#!/usr/bin/env bash
# Issue 33, step 1: the prototype of plain jobs on an append-only ring
# (bench/proto/rings.cpp) against the hand-written SKIP LOCKED table of
# bench/baseline.sql and against pgq_cpp's queue as it is, side by side in one
# throwaway durable cluster: the first four rows of the issue's table. Since
# step 2a, a fourth system: pgq's own functions on the queue 'benchr',
# dropped and created again before each run (since release 3.0 every queue,
# pgq's 'bench' too, is on a ring: ADR 0028).
#
#   bash bench/rings_proto.sh
#   DURATION=3 RUNS=1 WORKLOADS="claim100" bash bench/rings_proto.sh
#
# It builds the tree with RINGS_PROTO=1 in a copy (the prototype is never in
# a release build) and installs that into $PG_CONFIG's PostgreSQL.
#
# WAL per job (JOBS jobs, CHECKPOINT before each shape, as bench/rings_wal.sh):
#   batch   enqueue 100 per transaction, claim 100, complete 100
#           (baseline: INSERT of 100, UPDATE .. SKIP LOCKED 100, DELETE 100;
#           pgq and ring: enqueue_many, claim, complete_many)
#   single  the same one job at a time, each statement its own transaction
# Throughput (pgbench -M prepared, DURATION s, RUNS rounds of baseline, pgq,
# ring in turn, the median; jobs per second = transactions x n):
#   claim100 claim10 claim1 (claim n then complete them), enqueue (1 per
#   transaction), enqueue_many (100 per transaction); CLIENTS for claim1.
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

DURATION="${DURATION:-5}" RUNS="${RUNS:-3}" JOBS="${JOBS:-10000}" SINGLE_JOBS="${SINGLE_JOBS:-2000}"
CLIENTS="${CLIENTS:-1 4 8}" SYNC="${SYNC:-on}"
WORKLOADS="${WORKLOADS:-wal claim100 claim10 claim1 enqueue enqueue_many}"
OUT_MD="${OUT_MD:-$PGQ_ROOT/bench/results-rings-proto.md}"
dir="${BENCH_DIR:-/tmp/bench_rings_proto}" port="${BENCH_PORT:-55935}"
SCRIPTS="$PGQ_ROOT/bench/sql"

ensure_packages
build="$(mktemp -d /tmp/pgq_rings_build.XXXXXX)"
trap 'stop_cluster "$dir"; rm -rf "$build"' EXIT
say "building the tree with RINGS_PROTO=1 in $build"
git -C "$PGQ_ROOT" ls-files -z | (cd "$PGQ_ROOT" && xargs -0 cp --parents -t "$build")
(cd "$PGQ_ROOT" && cp --parents -t "$build" bench/proto/rings.cpp)
make -s -C "$build" -j2 RINGS_PROTO=1 PG_CONFIG="$PG_CONFIG" >/dev/null
rm -f "$("$PG_CONFIG" --pkglibdir)/pgq_cpp.so"
make -s -C "$build" install RINGS_PROTO=1 PG_CONFIG="$PG_CONFIG" >/dev/null

stop_cluster "$dir"; rm -rf "$dir"
start_cluster "$dir" "$port" "${BENCH_DURABLE_CONF[@]}" "autovacuum = off"
PSQL=("$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres)
sql() { "${PSQL[@]}" -c "$1"; }
sql "CREATE EXTENSION pgq_cpp" && sql "SELECT pgq.create_queue('bench')" >/dev/null
SYSTEMS="baseline pgq ring"
# The engine (ADR 0028 step 2a): pgq's scripts on queue benchr, a ring queue.
engine_dir="$build/engine_sql"
mkdir -p "$engine_dir"
SYSTEMS="baseline pgq ring pgqr"
for f in pgq_claim1 pgq_claimN pgq_enqueue pgq_enqueue_many; do
  sed "s/'bench'/'benchr'/" "$SCRIPTS/$f.sql" >"$engine_dir/${f/pgq_/pgqr_}.sql"
done
new_ring_queue() {
  sql "SELECT pgq.drop_queue('benchr', force => true) FROM pgq.queues WHERE name = 'benchr'" >/dev/null
  sql "SELECT pgq.create_queue('benchr')" >/dev/null
}
"${PSQL[@]}" -f "$PGQ_ROOT/bench/baseline.sql" >/dev/null
"${PSQL[@]}" -f "$SCRIPTS/rings_proto.sql" >/dev/null
# The ids a claim handed out, kept for the completion (WAL shapes): unlogged.
sql "CREATE UNLOGGED TABLE wal_ids (id bigint, attempt int)"

reset() {
  sql "TRUNCATE wal_ids, bench_jobs, pgq.job_rows, pgq_ring.entries, pgq_ring.receipts, pgq_ring.closures" >/dev/null
  sql "SELECT pgq_ring.reset()" >/dev/null
  [[ $SYSTEMS == *pgqr* ]] && new_ring_queue
  return 0
}
lsn() { sql "SELECT pg_current_wal_lsn()"; }
per_job() { sql "SELECT round(pg_wal_lsn_diff('$2', '$1') / $3.0)"; }
repeat() { local i; for ((i = 0; i < $2; i++)); do echo "$1"; done | "${PSQL[@]}" >/dev/null; }

declare -A WAL=()
wal_shape() {  # system mode enqueue claim complete count
  reset; sql "CHECKPOINT" >/dev/null
  local a b c d reps=$6
  a=$(lsn); repeat "$3" "$reps"; b=$(lsn); repeat "$4" "$reps"; c=$(lsn); repeat "$5" "$reps"; d=$(lsn)
  local jobs=$reps
  [[ $2 == batch ]] && jobs=$((reps * 100))
  WAL[$1/$2]="$(per_job "$a" "$b" $jobs) | $(per_job "$b" "$c" $jobs) | $(per_job "$c" "$d" $jobs) | $(per_job "$a" "$d" $jobs)"
  say "  WAL $1 $2: ${WAL[$1/$2]}"
}
if [[ " $WORKLOADS " == *" wal "* ]]; then
  say "WAL per job"
  b=$((JOBS / 100))
  wal_shape baseline batch \
    "INSERT INTO bench_jobs (queue, payload) SELECT 'bench', p FROM unnest(array_fill('{\"k\":1}'::jsonb, ARRAY[100])) p;" \
    "UPDATE bench_jobs SET status = 'running', attempts = attempts + 1, lease_until = now() + interval '2 min' WHERE id IN (SELECT id FROM bench_jobs WHERE queue = 'bench' AND status = 'pending' AND run_at <= now() ORDER BY priority DESC, run_at, id LIMIT 100 FOR UPDATE SKIP LOCKED);" \
    "DELETE FROM bench_jobs WHERE status = 'running' AND id IN (SELECT id FROM bench_jobs WHERE status = 'running' ORDER BY id LIMIT 100);" $b
  wal_shape pgq batch \
    "SELECT count(*) FROM pgq.enqueue_many('bench', array_fill('{\"k\":1}'::jsonb, ARRAY[100]));" \
    "INSERT INTO wal_ids SELECT id, attempt FROM pgq.claim('bench', 100);" \
    "WITH d AS (DELETE FROM wal_ids WHERE id IN (SELECT id FROM wal_ids ORDER BY id LIMIT 100) RETURNING id, attempt) SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM d;" $b
  wal_shape ring batch \
    "SELECT count(*) FROM pgq_ring.enqueue_many('bench', array_fill('{\"k\":1}'::jsonb, ARRAY[100]));" \
    "INSERT INTO wal_ids SELECT id, attempt FROM pgq_ring.claim('bench', 100);" \
    "WITH d AS (DELETE FROM wal_ids WHERE id IN (SELECT id FROM wal_ids ORDER BY id LIMIT 100) RETURNING id, attempt) SELECT pgq_ring.complete_many(array_agg(id), array_agg(attempt)) FROM d;" $b
  if [[ $SYSTEMS == *pgqr* ]]; then
    wal_shape pgqr batch \
      "SELECT count(*) FROM pgq.enqueue_many('benchr', array_fill('{\"k\":1}'::jsonb, ARRAY[100]));" \
      "INSERT INTO wal_ids SELECT id, attempt FROM pgq.claim('benchr', 100);" \
      "WITH d AS (DELETE FROM wal_ids WHERE id IN (SELECT id FROM wal_ids ORDER BY id LIMIT 100) RETURNING id, attempt) SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM d;" $b
  fi
  wal_shape baseline single \
    "INSERT INTO bench_jobs (queue, payload) VALUES ('bench', '{\"k\":1}');" \
    "UPDATE bench_jobs SET status = 'running', attempts = attempts + 1, lease_until = now() + interval '2 min' WHERE id IN (SELECT id FROM bench_jobs WHERE queue = 'bench' AND status = 'pending' AND run_at <= now() ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED);" \
    "DELETE FROM bench_jobs WHERE id = (SELECT min(id) FROM bench_jobs WHERE status = 'running');" "$SINGLE_JOBS"
  # one claim and one completion a transaction: the ids go through a temp
  # table (unlogged: no WAL) between the statements.
  wal_shape pgq single \
    "SELECT pgq.enqueue('bench', '{\"k\":1}');" \
    "INSERT INTO wal_ids SELECT id, attempt FROM pgq.claim('bench', 1);" \
    "WITH d AS (DELETE FROM wal_ids WHERE id = (SELECT min(id) FROM wal_ids) RETURNING id, attempt) SELECT pgq.complete(id, attempt) FROM d;" "$SINGLE_JOBS"
  if [[ $SYSTEMS == *pgqr* ]]; then
    wal_shape pgqr single \
      "SELECT pgq.enqueue('benchr', '{\"k\":1}');" \
      "INSERT INTO wal_ids SELECT id, attempt FROM pgq.claim('benchr', 1);" \
      "WITH d AS (DELETE FROM wal_ids WHERE id = (SELECT min(id) FROM wal_ids) RETURNING id, attempt) SELECT pgq.complete(id, attempt) FROM d;" "$SINGLE_JOBS"
  fi
  wal_shape ring single \
    "SELECT pgq_ring.enqueue('bench', '{\"k\":1}');" \
    "INSERT INTO wal_ids SELECT id, attempt FROM pgq_ring.claim('bench', 1);" \
    "WITH d AS (DELETE FROM wal_ids WHERE id = (SELECT min(id) FROM wal_ids) RETURNING id, attempt) SELECT pgq_ring.complete(id, attempt) FROM d;" "$SINGLE_JOBS"
fi

prefill() {  # system count
  local left=$2 batch
  while ((left > 0)); do
    batch=$((left < 100000 ? left : 100000))
    case $1 in
      baseline) sql "INSERT INTO bench_jobs (queue, payload) SELECT 'bench', '{\"k\":1}'::jsonb FROM generate_series(1, $batch)" ;;
      pgq) sql "SELECT count(*) FROM pgq.enqueue_many('bench', array_fill('{\"k\":1}'::jsonb, ARRAY[$batch]))" >/dev/null ;;
      ring) sql "SELECT count(*) FROM pgq_ring.enqueue_many('bench', array_fill('{\"k\":1}'::jsonb, ARRAY[$batch]))" >/dev/null ;;
      pgqr) sql "SELECT count(*) FROM pgq.enqueue_many('benchr', array_fill('{\"k\":1}'::jsonb, ARRAY[$batch]))" >/dev/null ;;
    esac
    left=$((left - batch))
  done
}
pending() {
  case $1 in
    baseline) sql "SELECT count(*) FROM bench_jobs WHERE status = 'pending'" ;;
    pgq) sql "SELECT count(*) FROM pgq.jobs WHERE state = 'p'" ;;
    ring) sql "SELECT (SELECT count(*) FROM pgq_ring.entries) - (SELECT count(*) FROM pgq_ring.receipts)" ;;
    pgqr) sql "SELECT count(*) FILTER (WHERE kind = 'e') - count(*) FILTER (WHERE kind = 'r') FROM pgq.job_log" ;;
  esac
}
script_of() {  # workload system
  local p=${2/baseline/base}
  case $1 in
    claim1) echo "${p}_claim1.sql" ;;
    claim*) if [[ $2 == baseline ]]; then echo "base_${1}.sql"; else echo "${p}_claimN.sql"; fi ;;
    enqueue) echo "${p}_enqueue.sql" ;;
    enqueue_many) echo "${p}_enqueue_many.sql" ;;
  esac
}
script_dir() { if [[ $1 == pgqr ]]; then echo "$engine_dir"; else echo "$SCRIPTS"; fi; }
declare -A RATES=()
one_run() {  # workload system clients
  local n=1 prefill_n=0 out tps tries=0
  [[ $1 == claim* ]] && n=${1#claim}
  [[ $1 == enqueue_many ]] && n=100
  [[ $1 == claim* ]] && prefill_n=$(( DURATION * (n == 100 ? 200000 : n == 10 ? 60000 : 15000) ))
  while :; do
    reset
    ((prefill_n > 0)) && prefill "$2" "$prefill_n"
    sql "VACUUM ANALYZE bench_jobs" ; sql "VACUUM ANALYZE pgq.job_rows"; sql "CHECKPOINT" >/dev/null
    out=$(PGOPTIONS="-c synchronous_commit=$SYNC" "$PG_BIN/pgbench" -n -M prepared -c "$3" -j $(( $3 < 2 ? $3 : 2 )) \
            -T "$DURATION" -h "$dir" -p "$port" -U postgres -D "n=$n" -f "$(script_dir "$2")/$(script_of "$1" "$2")" postgres 2>&1) || true
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out" | head -1)
    if [[ $1 == claim* ]] && (( $(pending "$2") == 0 )) && ((tries < 3)); then
      tries=$((tries + 1)); prefill_n=$((prefill_n * 2)); say "  $1 $2 c=$3 ran dry: again with $prefill_n"; continue
    fi
    [[ -n $tps ]] || { grep -m3 -iE 'error|abort' <<<"$out" >&2; tps=0; }
    break
  done
  local rate; rate=$(awk -v t="$tps" -v n="$n" 'BEGIN {printf "%.0f", t * n}')
  RATES[$1/$3/$2]+="$rate "
  say "  $1 c=$3 $2: $rate jobs/s"
}
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

ROWS=()
for w in $WORKLOADS; do
  [[ $w == wal ]] && continue
  clients="1"; [[ $w == claim1 ]] && clients="$CLIENTS"
  for c in $clients; do
    say "$w, $c client(s)"
    for ((r = 1; r <= RUNS; r++)); do for s in $SYSTEMS; do one_run "$w" "$s" "$c"; done; done
    mb=$(median "${RATES[$w/$c/baseline]}") mp=$(median "${RATES[$w/$c/pgq]}") mr=$(median "${RATES[$w/$c/ring]}")
    me=$(median "${RATES[$w/$c/pgqr]:-0}")
    ROWS+=("| $w | $c | $mb | $mp | $mr | $me | $(awk -v a="$mp" -v b="$mb" 'BEGIN {printf "%.2fx", a / b}') | $(awk -v a="$mr" -v b="$mb" 'BEGIN {printf "%.2fx", a / b}') | $(awk -v a="$me" -v b="$mb" 'BEGIN {printf "%.2fx", a / b}') |")
  done
done

{
  echo "# Issue 33 prototype: jobs on an append-only ring"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); git $(git -C "$PGQ_ROOT" rev-parse --short HEAD)$(git -C "$PGQ_ROOT" diff --quiet HEAD -- src bench/proto || echo ' (modified)')"
  echo "- command: \`DURATION=$DURATION RUNS=$RUNS JOBS=$JOBS SINGLE_JOBS=$SINGLE_JOBS CLIENTS=\"$CLIENTS\" SYNC=$SYNC WORKLOADS=\"$WORKLOADS\" bash bench/rings_proto.sh\`"
  echo "- load: $(uptime)"
  if [[ -n ${WAL[baseline/batch]:-} ]]; then
    echo
    echo "WAL per job (bytes; CHECKPOINT before each shape):"
    echo
    echo "| shape | enqueue | claim | complete | total |"
    echo "|---|---:|---:|---:|---:|"
    for m in batch single; do for s in $SYSTEMS; do echo "| $s, $m | ${WAL[$s/$m]} |"; done; done
  fi
  if ((${#ROWS[@]})); then
    echo
    echo "Jobs per second (median of $RUNS; synchronous_commit=$SYNC; ratios to the baseline):"
    echo
    echo "| workload | clients | baseline | pgq (queue bench) | ring prototype | pgq (queue benchr, made again each run) | pgq / baseline | ring / baseline | benchr / baseline |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${ROWS[@]}"
  fi
} | tee "$OUT_MD"
