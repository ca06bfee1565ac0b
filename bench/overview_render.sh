#!/usr/bin/env bash
# How long the dashboard takes to render its overview with QUEUES queues of
# DEPTH pending jobs each (issue 19: "within 200 ms with 100 queues and 1 M
# pending jobs"), and what pgq.queue_stats would have cost instead, in one
# throwaway durable cluster.
#
#   bash bench/overview_render.sh
#   QUEUES=20 DEPTH=1000 REQUESTS=10 bash bench/overview_render.sh     quick look
#
# Builds and installs pgq_cpp first (NO_INSTALL=1: measures the one installed) and
# the dashboard of this tree. Timed, REQUESTS times each after one warm-up:
#   GET /              the whole overview page, as a browser asks for it
#   GET /api/overview  a live refresh (served from the sampler's last sample
#                      when it is recent, as here: what a page's polling costs)
#   queue_overview     SELECT * FROM pgq.queue_overview() in psql
#   queue_stats        SELECT * FROM pgq.queue_stats in psql (what the
#                      overview read before; for comparison)
# twice: right after the jobs are enqueued (no statistics: deep counts show
# as "1,000+") and after ANALYZE (estimates). Output: a markdown table on
# stdout and in $OUT_MD (default bench/results-overview-latest.md).
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

QUEUES="${QUEUES:-100}"
DEPTH="${DEPTH:-10000}"
REQUESTS="${REQUESTS:-20}"
OUT_MD="${OUT_MD:-$PGQ_ROOT/bench/results-overview-latest.md}"
for v in QUEUES DEPTH REQUESTS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a positive integer" >&2; exit 2; }
done

bench_install
ensure_node_modules "$PGQ_ROOT/dashboard"

PGDIR=/tmp/pgq_bench_overview
PORT=55443
HTTP=127.0.0.1:55444
DB=bench
PSQL=("$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PGDIR" -p "$PORT" -U postgres -d "$DB")
sql() { "${PSQL[@]}" -c "$1"; }
DASH_PID=
cleanup() {
  if [[ -n $DASH_PID ]]; then kill "$DASH_PID" 2>/dev/null; wait "$DASH_PID" 2>/dev/null; fi
  stop_cluster "$PGDIR"
}
trap cleanup EXIT
stop_cluster "$PGDIR"
rm -rf "$PGDIR"
say "starting the benchmark cluster in $PGDIR (port $PORT)"
# autovacuum off: the first measurement is "no statistics yet" on purpose.
start_cluster "$PGDIR" "$PORT" "${BENCH_DURABLE_CONF[@]}" "autovacuum = off"
"$PG_BIN/createdb" -h "$PGDIR" -p "$PORT" -U postgres "$DB"
sql "CREATE EXTENSION pgq_cpp"
say "enqueueing $QUEUES queues x $DEPTH pending jobs"
sql "SELECT count(pgq.create_queue('q' || lpad(i::text, 3, '0'))) FROM generate_series(1, $QUEUES) i" >/dev/null
for ((i = 1; i <= QUEUES; i++)); do
  printf -v name 'q%03d' "$i"
  sql "SELECT count(*) FROM pgq.enqueue_many('$name', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, $DEPTH) g))" >/dev/null
done
sql "CHECKPOINT"
total=$(sql "SELECT count(*) FROM pgq.jobs")
GIT_AT_START="git $(git -C "$PGQ_ROOT" rev-parse --short HEAD)$(git -C "$PGQ_ROOT" diff --quiet HEAD -- src sql dashboard || echo ' (working tree modified)')"

# The dashboard, as a deployment runs it (no login: loopback).
node "$PGQ_ROOT/dashboard/bin/pgq-cpp-dashboard.js" \
  --database "postgres://postgres@${PGDIR//\//%2F}:$PORT/$DB" --listen "$HTTP" \
  --insecure-no-auth >"$PGDIR/dashboard.log" 2>&1 &
DASH_PID=$!

# Median, p95 and max of REQUESTS timed calls of each kind, in ms.
measure() {
  node - "http://$HTTP" "$REQUESTS" <<'EOF'
const [base, n] = [process.argv[2], Number(process.argv[3])];
const deadline = Date.now() + 15000;
async function ready() {
  for (;;) {
    try { if ((await fetch(base + '/')).status === 200) return; } catch {}
    if (Date.now() > deadline) throw new Error('the dashboard did not answer within 15 s');
    await new Promise((r) => setTimeout(r, 200));
  }
}
async function time(path) {
  const ms = [];
  await (await fetch(base + path)).text(); // warm-up
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    const res = await fetch(base + path);
    const body = await res.text();
    if (res.status !== 200 || !body.includes('q001')) throw new Error(`${path}: ${res.status}`);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  ms.sort((a, b) => a - b);
  const at = (q) => ms[Math.min(ms.length - 1, Math.floor(q * ms.length))];
  return `${at(0.5).toFixed(1)} | ${at(0.95).toFixed(1)} | ${ms[ms.length - 1].toFixed(1)}`;
}
ready().then(async () => {
  console.log(`GET / | ${await time('/')}`);
  console.log(`GET /api/overview | ${await time('/api/overview')}`);
}).catch((e) => { console.error(e.message); process.exit(1); });
EOF
}

# The same for a statement in psql (\timing), in ms.
measure_sql() {
  local label="$1" query="$2"
  "${PSQL[@]}" -c "$query" >/dev/null # warm-up
  local times
  times=$(for ((r = 0; r < REQUESTS; r++)); do echo "$query;"; done |
    "$PG_BIN/psql" -X -v ON_ERROR_STOP=1 -h "$PGDIR" -p "$PORT" -U postgres -d "$DB" -o /dev/null -c '\timing on' -f - |
    sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | sort -n)
  awk -v label="$label" '{ t[NR] = $1 } END {
    p50 = t[int(NR * 0.5) + 1]; p95 = t[int(NR * 0.95) + 1]; if (p95 == "") p95 = t[NR];
    printf "%s | %.1f | %.1f | %.1f\n", label, p50, p95, t[NR] }' <<<"$times"
}

run_all() {
  measure
  measure_sql "pgq.queue_overview()" "SELECT * FROM pgq.queue_overview()"
  measure_sql "pgq.queue_stats" "SELECT * FROM pgq.queue_stats"
}

say "timing without statistics"
no_stats=$(run_all)
sample_before=$(sql "SELECT ready FROM pgq.queue_overview() ORDER BY queue LIMIT 1")
sql "ANALYZE pgq.job_rows"
say "timing after ANALYZE"
with_stats=$(run_all)
sample_after=$(sql "SELECT ready FROM pgq.queue_overview() ORDER BY queue LIMIT 1")

{
  echo "## Overview render: $QUEUES queues x $DEPTH pending jobs ($total jobs)"
  echo
  echo "$REQUESTS timed requests each after one warm-up; $GIT_AT_START; $(date -u +%Y-%m-%d)."
  echo "Command: \`QUEUES=$QUEUES DEPTH=$DEPTH REQUESTS=$REQUESTS bash bench/overview_render.sh\`"
  echo
  echo "| statistics | what | p50 ms | p95 ms | max ms |"
  echo "|---|---|---:|---:|---:|"
  sed 's/^/| none (q001 ready shows '"$sample_before"') | /; s/$/ |/' <<<"$no_stats"
  sed 's/^/| after ANALYZE (q001 ready shows '"$sample_after"') | /; s/$/ |/' <<<"$with_stats"
} | tee "$OUT_MD"
