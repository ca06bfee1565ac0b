#!/usr/bin/env bash
# Throughput of in-database handlers: how fast the 'pgq handler' workers
# drain a queue whose handler does nothing, i.e. what a handler job costs in
# pgq itself (claim; handler + complete; the session reset of ADR 0012).
# Measures the pgq_cpp already installed (build and install it first, or
# install another build to compare, as bench/RESULTS.md does).
#
#   bash bench/handlers.sh
#   JOBS=20000 RUNS=5 WORKERS="1 2" bash bench/handlers.sh
#
# Each run enqueues JOBS jobs in one transaction and times, in the database,
# from that commit until the last job is done (pgq.jobs empty for the queue);
# the median of RUNS runs is reported per number of handler workers.
source "$(dirname "$0")/../scripts/lib.sh"

JOBS="${JOBS:-10000}"
RUNS="${RUNS:-3}"
WORKERS="${WORKERS:-1 2}"
for knob in JOBS RUNS; do
  [[ "${!knob}" =~ ^[1-9][0-9]*$ ]] || { echo "$knob must be a positive integer" >&2; exit 2; }
done

ensure_packages
SO_FILE="$("$PG_CONFIG" --pkglibdir)/pgq_cpp.so"
[[ -f "$SO_FILE" ]] || { echo "pgq_cpp is not installed ($SO_FILE): build and install it first" >&2; exit 1; }

PGDIR=/tmp/pgq_bench_handlers
PORT=55447
PSQL=("$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PGDIR" -p "$PORT" -U postgres -d postgres)
sql() { "${PSQL[@]}" -c "$1"; }
trap 'stop_cluster "$PGDIR"' EXIT

echo "pgq_cpp.so md5 $(md5sum "$SO_FILE" | cut -c1-12); $JOBS jobs, $RUNS runs"
for workers in $WORKERS; do
  stop_cluster "$PGDIR"
  rm -rf "$PGDIR"
  start_cluster "$PGDIR" "$PORT" "${BENCH_DURABLE_CONF[@]}" "autovacuum = off" \
    "pgq.handler_workers = $workers" "pgq.maintenance_interval = '1s'"
  sql "CREATE EXTENSION pgq_cpp"
  sql "CREATE FUNCTION public.noop(job pgq.claimed_job) RETURNS void LANGUAGE sql AS 'SELECT'"
  sql "SELECT pgq.create_queue('h', handler => 'public.noop(pgq.claimed_job)')"
  rates=()
  for run in $(seq 1 "$RUNS"); do
    start=$(sql "SELECT extract(epoch FROM clock_timestamp()) FROM (SELECT pgq.enqueue_many('h', array_agg('{}'::jsonb)) FROM generate_series(1, $JOBS)) s LIMIT 1")
    while [[ $(sql "SELECT count(*) FROM pgq.jobs") != 0 ]]; do sleep 0.05; done
    end=$(sql "SELECT extract(epoch FROM clock_timestamp())")
    rates+=("$(python3 -c "print(round($JOBS / ($end - $start)))")")
    sql "CHECKPOINT"
  done
  median=$(printf '%s\n' "${rates[@]}" | sort -n | sed -n "$(( (RUNS + 1) / 2 ))p")
  echo "handler workers $workers: jobs/s per run ${rates[*]}; median $median"
done
