#!/usr/bin/env bash
# What one Prometheus scrape costs (issue 31, "Monitoring that costs
# O(queues), not O(jobs)"): pgq.metrics() on a database with QUEUES queues of
# JOBS pending jobs each and STREAMS streams of CONSUMERS consumers each, side
# by side in one throwaway cluster with the plain-SQL baseline an exporter
# would otherwise run (a count of pgq.jobs by queue and state) and the exact
# view pgq.queue_stats (for psql, not for polling).
#
#   bash bench/metrics.sh
#   QUEUES=10 JOBS=1000 STREAMS=5 DURATION=3 NO_INSTALL=1 bash bench/metrics.sh   smoke test
#   KEEP=1 RUNS=0 bash bench/metrics.sh     fill, then leave the cluster running
#
# Each query runs alone in one pgbench client (-M prepared) for DURATION
# seconds, RUNS rounds in turn; the latency is pgbench's mean. A scrape is one
# backend's work, CPU-bound once the tables are cached, so its latency is its
# CPU time: "% of a core at a 5 s scrape" = latency / 5000 ms. The targets:
# pgq.metrics() under 50 ms at 100 queues x 10,000 pending jobs and 100
# streams x 10 consumers, and under 1 % of one core scraped every 5 s.
source "$(dirname "$0")/../scripts/lib.sh"

QUEUES="${QUEUES:-100}" JOBS="${JOBS:-10000}" STREAMS="${STREAMS:-100}" CONSUMERS="${CONSUMERS:-10}"
EVENTS="${EVENTS:-2000}" DURATION="${DURATION:-10}" RUNS="${RUNS:-3}"
dir="${BENCH_DIR:-/tmp/bench_metrics}" port="${BENCH_PORT:-55920}"
out="${OUT_MD:-$PGQ_ROOT/bench/results-issue31-metrics.md}"

bench_install
stop_cluster "$dir"
rm -rf "$dir"
# KEEP=1: the cluster is left running for a look (psql -h $dir -p $port bench).
if [[ ${KEEP:-0} != 1 ]]; then trap 'stop_cluster "$dir"' EXIT; fi
start_cluster "$dir" "$port" "${BENCH_DURABLE_CONF[@]}" "autovacuum = off" \
  "pgq.databases = 'none_here'"
psql_() { as_pg "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres "$@"; }
psql_ -d postgres -c "CREATE DATABASE bench"

say "filling: $QUEUES queues x $JOBS pending jobs, $STREAMS streams x $CONSUMERS consumers, $EVENTS events each"
psql_ -d bench <<SQL
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('q' || i) FROM generate_series(1, $QUEUES) i;
SELECT count(*) FROM generate_series(1, $QUEUES) i,
       LATERAL pgq.enqueue_many('q' || i,
         (SELECT array_agg(jsonb_build_object('n', n)) FROM generate_series(1, $JOBS) n));
SELECT pgq.create_stream('s' || i) FROM generate_series(1, $STREAMS) i;
SELECT count(*) FROM generate_series(1, $STREAMS) i,
       LATERAL pgq.append_many('s' || i,
         (SELECT array_agg(jsonb_build_object('n', n)) FROM generate_series(1, $EVENTS) n));
SELECT pgq.register_consumer('s' || i, 'c' || k)
  FROM generate_series(1, $STREAMS) i, generate_series(1, $CONSUMERS) k;
SQL
# Events appended after the registrations: every consumer is EVENTS behind.
psql_ -d bench -c "SELECT count(*) FROM generate_series(1, $STREAMS) i,
  LATERAL pgq.append_many('s' || i, (SELECT array_agg(jsonb_build_object('n', n)) FROM generate_series(1, $EVENTS) n))"
psql_ -d bench -c "VACUUM ANALYZE" -c "CHECKPOINT"
jobs=$(psql_ -d bench -At -c "SELECT count(*) FROM pgq.jobs")

work="$(mktemp -d /tmp/bench_metrics_sql.XXXXXX)"
chmod 755 "$work"
echo 'SELECT pgq.metrics();' >"$work/metrics.sql"
echo 'SELECT count(*) FROM pgq.queue_metrics();' >"$work/queue_metrics.sql"
echo 'SELECT sum(ready + scheduled + running + dead) FROM pgq.queue_stats;' >"$work/queue_stats.sql"
echo 'SELECT q.name, j.state, count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) GROUP BY 1, 2;' \
  >"$work/baseline.sql"

declare -A lat
for run in $(seq 1 "$RUNS"); do
  for q in baseline metrics queue_metrics queue_stats; do
    ms=$(as_pg "$PG_BIN/pgbench" -n -M prepared -c 1 -T "$DURATION" -h "$dir" -p "$port" -U postgres \
           -f - bench <"$work/$q.sql" 2>&1 | sed -nE 's/^latency average = ([0-9.]+) ms$/\1/p')
    lat[$q]="${lat[$q]:-} $ms"
    say "run $run $q: $ms ms"
  done
done
rm -rf "$work"
if ((RUNS == 0)); then say "filled; psql -h $dir -p $port -U postgres bench"; exit 0; fi

median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
{
  echo "# What one scrape costs (bench/metrics.sh, issue 31)"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); git $(git -C "$PGQ_ROOT" rev-parse --short HEAD)"
  echo "- command: \`QUEUES=$QUEUES JOBS=$JOBS STREAMS=$STREAMS CONSUMERS=$CONSUMERS EVENTS=$EVENTS DURATION=$DURATION RUNS=$RUNS bash bench/metrics.sh\`"
  echo "- data: $jobs jobs in pgq.jobs, $STREAMS streams x $CONSUMERS consumers, each consumer $EVENTS events behind"
  echo "- load: \`$(uptime)\`"
  echo
  echo "| query | median latency (ms) | runs (ms) | / baseline | % of a core, scraped every 5 s |"
  echo "|---|---:|---|---:|---:|"
  base=$(median "${lat[baseline]}")
  for q in baseline metrics queue_metrics queue_stats; do
    m=$(median "${lat[$q]}")
    awk -v q="$q" -v m="$m" -v b="$base" -v runs="${lat[$q]# }" \
      'BEGIN { printf "| %s | %s | %s | %.2fx | %.2f %% |\n", q, m, runs, m / b, m / 5000 * 100 }'
  done
} >"$out"
cat "$out"
