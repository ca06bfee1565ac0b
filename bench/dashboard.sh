#!/usr/bin/env bash
# What an open dashboard costs the queue (issue 19: "the dashboard's polling
# costs the queue < 2 % throughput"): A/B in one throwaway durable cluster.
#
#   bash bench/dashboard.sh
#   DURATION=5 RUNS=1 CLIENTS=1 bash bench/dashboard.sh      quick look
#
# Measures the pgq_cpp already installed (build and install it first) and
# the dashboard of this tree (dashboard/, `npm ci` done: puppeteer-core is a
# devDependency).
#
# The workload: QUEUES queues (default 20). QUEUES-1 of them hold a standing
# backlog that does not move during the run, as in a real database with
# other work waiting: BACKLOG ready jobs each (default 2,000), a tenth as
# many scheduled an hour ahead, 3 running (leased for an hour), 5 dead; two
# have a rate limit. The last one, 'bench', is the hot queue: pgbench clients
# claim one job and complete it per transaction (bench/sql/pgq_claim1.sql,
# the claim1 workload of bench/run.sh), at CLIENTS (default "1 4").
# The hot queue is topped up to PREFILL ready jobs (default 150,000) before
# every round instead of fed by a steady enqueue: a second pgbench stream
# would compete for the same two cores at a rate that would have to follow
# the claim rate, which is what differs between the arms; a fixed backlog
# topped up before each round starts A and B from the same state. A round
# that empties it fails the run (raise PREFILL). The backlog also makes the
# dashboard's work realistic, not trivial: its statements read every queue.
#
# The arms, for RUNS rounds (default 5), each concurrency in turn within a
# round (A then B), DURATION seconds of pgbench each (default 20):
#   A  no dashboard
#   B  the dashboard server (node dashboard/bin/pgq-cpp-dashboard.js
#      --insecure-no-auth --listen 127.0.0.1:55931 --sample-interval
#      SAMPLE_INTERVAL, default 5) AND a headless Chromium (puppeteer-core,
#      /usr/bin/chromium or PGQ_CHROMIUM) with the overview page open, so the
#      page's live refresh polls the server as it does on a desk.
# Both are started before each B round and stopped after it; the start-up
# (the page's first load, the browser's launch) is outside the measured
# window, which begins once the page has had its first live refresh (waited
# for, bounded). The dashboard connects as pgq_dashboard, the role its
# README tells a deployment to create, with every optional grant (admin on
# every queue, pg_monitor, the rate-limit columns): the most the sampler
# reads per sample, through pgq's rights checks as a non-superuser.
# pgbench runs as the superuser, as in the other benches.
#
# The dashboard's load is counted on the server's side: the role has
# log_min_duration_statement = 0 (ALTER ROLE: its sessions only), and every
# statement it runs is a line in the server log with its duration; the
# lines written during each measured window are counted (A's too: zero).
# Also measured per window: CPU time of the dashboard's node process, of the
# browser (Chromium and its puppeteer driver), and of the dashboard's
# backends, all on the same 2-core machine as the server and pgbench.
#
# The report gives per concurrency the median jobs/s of A and B, B/A, the
# spread across rounds, and each round's pair B/A with their geometric mean
# and its 95 % interval: the target is "met" only when the whole interval
# lies above 0.98 ("not resolved" when the rounds' noise is wider than 2 %:
# add rounds).
#
# Environment: DURATION, RUNS, CLIENTS, QUEUES, BACKLOG, PREFILL,
# SAMPLE_INTERVAL as above; SYNC (synchronous_commit of the pgbench
# sessions, default on); OUT_MD (default
# bench/results-issue19-dashboard.md). Cluster /tmp/pgq_bench_dash, port
# 55930; dashboard 127.0.0.1:55931. The report is printed and written to
# OUT_MD.
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

DURATION="${DURATION:-20}"
RUNS="${RUNS:-5}"
CLIENTS="${CLIENTS:-1 4}"
QUEUES="${QUEUES:-20}"
BACKLOG="${BACKLOG:-2000}"
PREFILL="${PREFILL:-150000}"
SAMPLE_INTERVAL="${SAMPLE_INTERVAL:-5}"
SYNC="${SYNC:-on}"
OUT_MD="${OUT_MD:-$PGQ_ROOT/bench/results-issue19-dashboard.md}"
CHROMIUM="${PGQ_CHROMIUM:-/usr/bin/chromium}"
for knob in DURATION RUNS QUEUES BACKLOG PREFILL SAMPLE_INTERVAL; do
  [[ "${!knob}" =~ ^[1-9][0-9]*$ ]] || { echo "$knob must be a positive integer" >&2; exit 2; }
done
((QUEUES >= 2)) || { echo "QUEUES must be at least 2 (the hot queue and one other)" >&2; exit 2; }
for c in $CLIENTS; do [[ $c =~ ^[1-9][0-9]*$ ]] || { echo "CLIENTS: positive integers" >&2; exit 2; }; done
[[ $SYNC == on || $SYNC == off ]] || { echo "SYNC must be on or off" >&2; exit 2; }

PGDIR=/tmp/pgq_bench_dash
PORT=55930
DASH_PORT=55931
DASH_URL="http://127.0.0.1:$DASH_PORT"
DB=bench
WORK="$PGDIR/work"
LOG="$PGDIR/server.log"
SO_FILE="$("$PG_CONFIG" --pkglibdir)/pgq_cpp.so"
DASH_DIR="$PGQ_ROOT/dashboard"
PSQL=("$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PGDIR" -p "$PORT" -U postgres -d "$DB")
sql() { "${PSQL[@]}" -c "$1"; }

[[ -f $SO_FILE ]] || { echo "pgq_cpp is not installed ($SO_FILE): build and install it first" >&2; exit 1; }
command -v node >/dev/null || { echo "no node: install Node.js 20 or later" >&2; exit 1; }
[[ -x $CHROMIUM ]] || { echo "no chromium at $CHROMIUM (apt-get install chromium, or set PGQ_CHROMIUM)" >&2; exit 1; }
[[ -d $DASH_DIR/node_modules/puppeteer-core && -d $DASH_DIR/node_modules/fastify ]] ||
  { echo "dashboard/node_modules incomplete: (cd dashboard && npm ci)" >&2; exit 1; }
if curl -s -o /dev/null --max-time 2 "$DASH_URL/"; then
  echo "something already listens on 127.0.0.1:$DASH_PORT: stop it first" >&2; exit 1
fi

# --- the dashboard and the browser (arm B) ----------------------------------

DASH_PID=""
DRIVER_PID=""
CHROME_PID=""

# The browser: opens the overview, prints "chromium PID", one "refresh MS
# STATUS" line per live refresh the page makes, "error ..." for anything
# that goes wrong in the page, and "ready" after the page has loaded and
# made its first live refresh. SIGTERM closes the browser.
write_driver() {
  cat >"$WORK/browser.js" <<'EOF'
'use strict';
const puppeteer = require('puppeteer-core');
const [url, chromium] = process.argv.slice(2);
const out = (line) => process.stdout.write(`${line}\n`);
let browser = null;
let stopping = false;
const within = (ms, what, promise) =>
  Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms))]);

async function main() {
  // Chromium refuses to start its sandbox as root (as dashboard/test/browser.test.js).
  const args = process.getuid && process.getuid() === 0 ? ['--no-sandbox'] : [];
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: [...args, '--disable-gpu', '--no-first-run', '--no-default-browser-check'],
    timeout: 30_000,
    protocolTimeout: 30_000,
    defaultViewport: { width: 1400, height: 900 },
  });
  out(`chromium ${browser.process().pid}`);
  const page = await browser.newPage();
  let refreshed;
  const firstRefresh = new Promise((resolve) => (refreshed = resolve));
  page.on('response', (res) => {
    if (new URL(res.url()).pathname === '/api/overview') {
      out(`refresh ${Date.now()} ${res.status()}`);
      refreshed();
    } else if (res.status() >= 400) out(`error ${Date.now()} response ${res.status()} ${res.url()}`);
  });
  page.on('pageerror', (err) => out(`error ${Date.now()} page: ${err.message}`));
  page.on('requestfailed', (req) => stopping || out(`error ${Date.now()} request failed: ${req.url()}`));
  const res = await page.goto(url, { waitUntil: 'load', timeout: 30_000 });
  if (res.status() !== 200) throw new Error(`GET ${url}: ${res.status()}`);
  await page.waitForSelector('#queues tbody tr', { timeout: 30_000 });
  const rows = await page.$$eval('#queues tbody tr', (trs) => trs.length);
  await within(60_000, 'the first live refresh', firstRefresh);
  out(`ready ${rows} queues on the page`);
}

async function stop(code) {
  stopping = true;
  if (browser) {
    const pid = browser.process()?.pid;
    await within(10_000, 'closing the browser', browser.close()).catch(() => {
      if (pid) try { process.kill(pid, 'SIGKILL'); } catch {}
    });
  }
  process.exit(code);
}
process.once('SIGTERM', () => stop(0));
process.once('SIGINT', () => stop(0));
main().catch((err) => {
  out(`failed ${err.message}`);
  stop(1);
});
EOF
}

alive() { [[ -n $1 ]] && kill -0 "$1" 2>/dev/null; }

# wait_for SECONDS WHAT COMMAND...: polls COMMAND every 0.2 s, fails after SECONDS.
wait_for() {
  local seconds="$1" what="$2"; shift 2
  local deadline=$(($(date +%s) + seconds))
  until "$@"; do
    if (($(date +%s) >= deadline)); then echo "timed out after ${seconds} s waiting for $what" >&2; return 1; fi
    sleep 0.2
  done
}

dashboard_answers() {
  alive "$DASH_PID" || { echo "the dashboard exited: $(tail -3 "$WORK/dashboard.log")" >&2; exit 1; }
  [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$DASH_URL/api/overview") == 200 ]]
}

browser_ready() {
  grep -q '^failed' "$BROWSER_LOG" && { echo "the browser failed: $(grep '^failed' "$BROWSER_LOG")" >&2; exit 1; }
  alive "$DRIVER_PID" || { echo "the browser driver exited: $(tail -3 "$BROWSER_LOG")" >&2; exit 1; }
  grep -q '^ready' "$BROWSER_LOG"
}

# start_dashboard TAG: the server, then the browser on its overview; returns
# once the page has made its first live refresh.
start_dashboard() {
  BROWSER_LOG="$WORK/browser-$1.log"
  PGHOST="$PGDIR" PGPORT="$PORT" PGUSER=pgq_dashboard PGDATABASE="$DB" PGQ_DASHBOARD_LOG_LEVEL=warn \
    node "$DASH_DIR/bin/pgq-cpp-dashboard.js" --insecure-no-auth --listen "127.0.0.1:$DASH_PORT" \
      --sample-interval "$SAMPLE_INTERVAL" >>"$WORK/dashboard.log" 2>&1 &
  DASH_PID=$!
  wait_for 30 "the dashboard to answer on $DASH_URL" dashboard_answers
  NODE_PATH="$DASH_DIR/node_modules" node "$WORK/browser.js" "$DASH_URL/" "$CHROMIUM" >"$BROWSER_LOG" 2>&1 &
  DRIVER_PID=$!
  wait_for 90 "the browser's first live refresh" browser_ready
  CHROME_PID=$(sed -n 's/^chromium \([0-9]*\)$/\1/p' "$BROWSER_LOG")
}

# stop_pid PID SECONDS: SIGTERM, waits that long, then SIGKILL.
stop_pid() {
  local pid="$1" seconds="$2" i
  alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < seconds * 5; i++)); do alive "$pid" || break; sleep 0.2; done
  alive "$pid" && kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
}

stop_dashboard() {
  stop_pid "$DRIVER_PID" 15
  # The driver closes Chromium; if it could not, Chromium goes by its PID.
  alive "$CHROME_PID" && { kill -KILL "$CHROME_PID" 2>/dev/null || true; }
  stop_pid "$DASH_PID" 15
  DRIVER_PID="" CHROME_PID="" DASH_PID=""
}

cleanup() {
  stop_dashboard
  stop_cluster "$PGDIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- measuring a window -------------------------------------------------------

CLK_TCK=$(getconf CLK_TCK)
# CPU ticks (user + system) of the processes named, and of their descendants.
tree_ticks() {
  local pids
  pids=$(ps -eo pid=,ppid= | awk -v roots=" $* " '
    { parent[$1] = $2 }
    END { for (p in parent) { q = p; while (q > 1) { if (index(roots, " " q " ")) { print p; break } q = parent[q] } } }')
  pid_ticks $pids
}
pid_ticks() {
  local total=0 pid stat fields
  for pid in "$@"; do
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    read -ra fields <<<"${stat##*) }"
    total=$((total + fields[11] + fields[12]))
  done
  echo "$total"
}
dashboard_backends() { sql "SELECT string_agg(pid::text, ' ') FROM pg_stat_activity WHERE application_name = 'pgq-cpp-dashboard'"; }

# The dashboard role's log records between two byte offsets of the server
# log: "duration: X ms  statement: ..." (simple protocol) or "execute ..."
# (extended); continuation lines start with a tab.
log_slice() { tail -c +"$(($1 + 1))" "$LOG" | head -c "$(($2 - $1))"; }
dashboard_records() {  # reads a log slice; prints "ms<TAB>statement" per statement
  awk '
    function flush() { if (rec != "") { gsub(/[ \t]+/, " ", rec); sub(/^ /, "", rec); print ms "\t" rec } rec = "" }
    /^[^\t]/ { flush() }
    /^[^\t]/ && / pgq-cpp-dashboard LOG:  duration: [0-9.]+ ms  (statement|execute [^:]*): / {
      ms = $0; sub(/.* duration: /, "", ms); sub(/ ms .*/, "", ms)
      rec = $0; sub(/.* ms  (statement|execute [^:]*): /, "", rec); rec = rec " "; next
    }
    /^\t/ && rec != "" { rec = rec " " $0 }
    END { flush() }'
}

# --- the cluster and the queues ------------------------------------------------

stop_cluster "$PGDIR"
rm -rf "$PGDIR"
SO_AT_START="pgq_cpp.so $(date -u -r "$SO_FILE" '+%Y-%m-%d %H:%M:%S UTC'), md5 $(md5sum "$SO_FILE" | cut -c1-12)"
GIT_AT_START="git $(git -C "$PGQ_ROOT" rev-parse --short HEAD)"
DASH_TREE() { git -C "$PGQ_ROOT" diff --quiet HEAD -- dashboard/lib dashboard/bin dashboard/public && echo "as committed" ||
  echo "modified in the working tree, $(git -C "$PGQ_ROOT" diff HEAD -- dashboard/lib dashboard/bin dashboard/public | md5sum | cut -c1-12)"; }
DASH_AT_START=$(DASH_TREE)
CLUSTER_CONF=("${BENCH_DURABLE_CONF[@]}" "autovacuum = off" "log_line_prefix = '%m [%p] %a '")
say "starting the benchmark cluster in $PGDIR (port $PORT)"
start_cluster "$PGDIR" "$PORT" "${CLUSTER_CONF[@]}"
mkdir -p "$WORK"
write_driver
"$PG_BIN/createdb" -h "$PGDIR" -p "$PORT" -U postgres "$DB"
sql "CREATE EXTENSION pgq_cpp"
EXT_VERSION=$(sql "SELECT extversion FROM pg_extension WHERE extname = 'pgq_cpp'")

# The dashboard's role, as dashboard/README.md tells a deployment to create
# it, with every optional grant; its statements go to the server log.
sql "CREATE ROLE pgq_dashboard LOGIN"
sql "SELECT pgq.grant('pgq_dashboard', NULL, 'admin')" >/dev/null
sql "GRANT pg_monitor TO pgq_dashboard"
sql "GRANT SELECT (name, rate_limit) ON pgq.queues TO pgq_dashboard"
sql "ALTER ROLE pgq_dashboard SET log_min_duration_statement = 0"

say "filling $((QUEUES - 1)) queues with a standing backlog, and the hot queue 'bench'"
"${PSQL[@]}" -v backlog="$BACKLOG" -v queues="$QUEUES" <<'EOF' >/dev/null
SELECT pgq.create_queue(format('q%s', lpad(i::text, 2, '0')),
                        rate_limit => CASE WHEN i <= 2 THEN 100 END)
  FROM generate_series(1, :queues - 1) i;
SELECT pgq.create_queue('bench');
SET bench.backlog = :backlog;
DO $$
DECLARE
  q text;
  j record;
  backlog int := current_setting('bench.backlog')::int;
BEGIN
  FOR q IN SELECT name FROM pgq.queues WHERE name <> 'bench' ORDER BY name LOOP
    -- 5 dead: one attempt each, failed
    PERFORM pgq.enqueue(q, '{"k":"dead"}', max_attempts => 1) FROM generate_series(1, 5);
    FOR j IN SELECT * FROM pgq.claim(q, 5) LOOP
      PERFORM pgq.fail(j.id, j.attempt, 'bench: failed on purpose');
    END LOOP;
    PERFORM count(*) FROM pgq.enqueue_many(q, array_fill('{"k":1}'::jsonb, ARRAY[backlog]));
    PERFORM count(*) FROM pgq.enqueue_many(q, array_fill('{"k":1}'::jsonb, ARRAY[backlog / 10]),
                                          run_at => now() + interval '1 hour');
    -- 3 running, leased for longer than the run
    PERFORM pgq.claim(q, 3, lease => '1 hour');
  END LOOP;
END $$;
EOF
sql "VACUUM ANALYZE"

# --- the rounds -----------------------------------------------------------------

hot_ready() { sql "SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) WHERE q.name = 'bench' AND j.state = 'p'"; }

# Both arms start from the same state: PREFILL ready jobs in the hot queue,
# vacuumed, checkpointed.
prepare_round() {
  local need batch
  need=$((PREFILL - $(hot_ready)))
  while ((need > 0)); do
    batch=$((need < 100000 ? need : 100000))
    sql "SELECT count(*) FROM pgq.enqueue_many('bench', array_fill('{\"k\":1}'::jsonb, ARRAY[$batch]))" >/dev/null
    need=$((need - batch))
  done
  sql "VACUUM ANALYZE"
  sql "CHECKPOINT"
}

# CPU ticks of each dashboard backend, "pid:ticks ..."
backend_ticks() {
  local pid out=""
  for pid in $(dashboard_backends); do out+="$pid:$(pid_ticks "$pid") "; done
  echo "$out"
}
# ticks the backends used between two backend_ticks snapshots (a backend
# that started in between counts from zero)
backend_delta() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    n = split(a, x, " "); for (i = 1; i <= n; i++) { split(x[i], kv, ":"); before[kv[1]] = kv[2] }
    n = split(b, y, " "); for (i = 1; i <= n; i++) { split(y[i], kv, ":"); d += kv[2] - before[kv[1]] }
    print d + 0 }'
}

ROUNDS_TSV="$WORK/rounds.tsv"
STMTS_TSV="$WORK/statements-B.tsv"
printf 'run\tclients\tarm\ttps\twindow_s\tdash_statements\tdash_server_ms\tpage_refreshes\tdash_node_cpu_s\tbrowser_cpu_s\tdash_backend_cpu_s\tleft\tload1\n' >"$ROUNDS_TSV"
: >"$STMTS_TSV"

# one_round RUN CLIENTS ARM
one_round() {
  local run="$1" clients="$2" arm="$3"
  local threads=$((clients < 2 ? clients : 2)) out tps left log0 log1 t0 t1
  local dash0=0 dash1=0 br0=0 br1=0 be0="" be1="" refreshes=0 stmts slice
  prepare_round
  [[ $arm == B ]] && start_dashboard "r$run-c$clients"
  if [[ $arm == B ]]; then dash0=$(pid_ticks "$DASH_PID"); br0=$(tree_ticks "$DRIVER_PID"); be0=$(backend_ticks); fi
  log0=$(stat -c %s "$LOG"); t0=$(date +%s%3N)
  out=$(PGOPTIONS="-c synchronous_commit=$SYNC" "$PG_BIN/pgbench" -n -M prepared -c "$clients" -j "$threads" \
          -T "$DURATION" -h "$PGDIR" -p "$PORT" -U postgres -f "$PGQ_ROOT/bench/sql/pgq_claim1.sql" "$DB" 2>&1) ||
    { echo "$out" | tail -5 >&2; exit 1; }
  t1=$(date +%s%3N); log1=$(stat -c %s "$LOG")
  if [[ $arm == B ]]; then dash1=$(pid_ticks "$DASH_PID"); br1=$(tree_ticks "$DRIVER_PID"); be1=$(backend_ticks); fi
  tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out" | head -1)
  left=$(hot_ready)
  ((left > 0)) || { echo "the hot queue ran dry at c=$clients: raise PREFILL" >&2; exit 1; }

  slice=$(log_slice "$log0" "$log1" | dashboard_records)
  stmts=$(grep -c . <<<"$slice" || true)
  if [[ $arm == B ]]; then
    echo "$slice" | sed "s/^/$clients\t/" >>"$STMTS_TSV"
    refreshes=$(awk -v t0="$t0" -v t1="$t1" '$1 == "refresh" && $2 >= t0 && $2 <= t1' "$BROWSER_LOG" | wc -l)
    # A dashboard that fails (a statement the installed pgq_cpp lacks, say)
    # measures nothing: stop rather than report it.
    if grep -q '^error' "$BROWSER_LOG" || awk '$1 == "refresh" && $3 != 200' "$BROWSER_LOG" | grep -q . ||
       grep -qi 'sampling failed' "$WORK/dashboard.log"; then
      echo "the dashboard or its page reported errors (a reinstall of pgq_cpp mid-run? rerun):" >&2
      grep -h -m5 -e '^error' -e ' [45][0-9][0-9]$' "$BROWSER_LOG" >&2 || true
      grep -m5 -i 'failed' "$WORK/dashboard.log" >&2 || true
      exit 1
    fi
    # A window two sample intervals long holds at least one sample.
    ((stmts > 0 || DURATION < 2 * SAMPLE_INTERVAL)) ||
      { echo "no statement of the dashboard in the server log during a B round" >&2; exit 1; }
    stop_dashboard
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$run" "$clients" "$arm" "$tps" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", (b - a) / 1000}')" "$stmts" \
    "$(awk -F'\t' '{s += $1} END {printf "%.1f", s}' <<<"$slice")" "$refreshes" \
    "$(awk -v t="$((dash1 - dash0))" -v h="$CLK_TCK" 'BEGIN {printf "%.2f", t / h}')" \
    "$(awk -v t="$((br1 - br0))" -v h="$CLK_TCK" 'BEGIN {printf "%.2f", t / h}')" \
    "$(awk -v t="$(backend_delta "$be0" "$be1")" -v h="$CLK_TCK" 'BEGIN {printf "%.2f", t / h}')" \
    "$left" "$(cut -d' ' -f1 /proc/loadavg)" >>"$ROUNDS_TSV"
  printf '  run %s c=%-2s %s %9.1f tps  dashboard: %3s statements, %2s page refreshes  (%s left)\n' \
    "$run" "$clients" "$arm" "$tps" "$stmts" "$refreshes" "$left" >&2
}

# Other PostgreSQL servers on the machine compete for the same cores: name them.
other_servers() { ps -eo args= | awk '$1 ~ /bin\/postgres$/ && $0 !~ "'"$PGDIR"'/data" {for (i = 2; i <= NF; i++) if ($i == "-D") print $(i + 1)}' | sort -u | paste -sd' ' -; }
OTHERS_BEFORE=$(other_servers)
LOAD_BEFORE=$(uptime)
START_TS=$(date +%s)
say "DURATION=$DURATION s, RUNS=$RUNS, clients: $CLIENTS; A = no dashboard, B = dashboard + browser"
for run in $(seq "$RUNS"); do
  for clients in $CLIENTS; do
    one_round "$run" "$clients" A
    one_round "$run" "$clients" B
  done
done
ELAPSED=$(($(date +%s) - START_TS))
LOAD_AFTER=$(uptime)
OTHERS_AFTER=$(other_servers)
DASH_AT_END=$(DASH_TREE)
SO_AT_END="pgq_cpp.so $(date -u -r "$SO_FILE" '+%Y-%m-%d %H:%M:%S UTC'), md5 $(md5sum "$SO_FILE" | cut -c1-12)"
TABLE_SIZE=$(sql "SELECT pg_size_pretty(pg_total_relation_size('pgq.job_rows'))")

# --- the report -------------------------------------------------------------------

COMMAND="$(for v in DURATION RUNS CLIENTS QUEUES BACKLOG PREFILL SAMPLE_INTERVAL SYNC; do
  [[ -n ${!v+x} ]] && printf '%s="%s" ' "$v" "${!v}"; done)"
{
  echo "# Issue 19: what an open dashboard costs the queue (A/B)"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); wall time of the rounds: ${ELAPSED} s"
  echo "- command: \`${COMMAND}bash bench/dashboard.sh\`"
  echo "- machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(uname -sr); load before: \`${LOAD_BEFORE##*load average: }\`, after: \`${LOAD_AFTER##*load average: }\`"
  echo "- other PostgreSQL servers running: at start: ${OTHERS_BEFORE:-none}; at end: ${OTHERS_AFTER:-none}"
  echo "- PostgreSQL: $(sql "SELECT version()" | cut -d, -f1); pgq_cpp $EXT_VERSION: $SO_AT_START; $GIT_AT_START"
  [[ $SO_AT_END != "$SO_AT_START" ]] && echo "- note: pgq_cpp was reinstalled during the run (now $SO_AT_END); the server kept the build it started with"
  echo "- dashboard (dashboard/lib, bin, public): at start $DASH_AT_START; at end $DASH_AT_END (each B round starts it afresh)"
  echo "- cluster: $(IFS=';'; echo "${CLUSTER_CONF[*]}" | sed 's/;/, /g'); pgbench sessions: synchronous_commit=$SYNC, as the superuser"
  echo "- queues: $((QUEUES - 1)) with $BACKLOG ready, $((BACKLOG / 10)) scheduled, 3 running, 5 dead each (2 rate-limited); the hot queue \`bench\` topped up to $PREFILL ready jobs before every round; pgq.job_rows at the end: $TABLE_SIZE"
  echo "- workload: \`pgbench -n -M prepared -c C -j min(C,2) -T $DURATION -f bench/sql/pgq_claim1.sql\` (claim 1 then complete, on \`bench\`); rounds A then B per concurrency, $RUNS rounds"
  echo "- B: \`node dashboard/bin/pgq-cpp-dashboard.js --insecure-no-auth --listen 127.0.0.1:$DASH_PORT --sample-interval $SAMPLE_INTERVAL\` as role \`pgq_dashboard\` (not a superuser: admin on every queue, pg_monitor, SELECT (name, rate_limit) ON pgq.queues) and headless Chromium ($("$CHROMIUM" --version 2>/dev/null | head -1)) with the overview open; both started before and stopped after each B round, the window starting after the page's first live refresh"
  echo
  python3 - "$ROUNDS_TSV" "$STMTS_TSV" "$SAMPLE_INTERVAL" <<'PY'
import csv, statistics, sys, re
rounds = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
interval = float(sys.argv[3])
clients = sorted({int(r['clients']) for r in rounds})
def f(r, k): return float(r[k])
def fmt(x): return f'{x:,.0f}'

print('## Throughput (jobs/s = pgbench tps, one claim + complete per transaction)')
print()
# Paired: each round's B over the A just before it. Their geometric mean
# with a 95 % t-interval says what the rounds can resolve: the target
# (cost < 2 %, B/A > 0.98) is met when the whole interval is above 0.98,
# missed when it is below, and not resolved by the run otherwise.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
        18: 2.101, 19: 2.093, 20: 2.086, 24: 2.064, 29: 2.045}
def paired_ci(pairs):
    import math
    logs = [math.log(p) for p in pairs]
    m = statistics.mean(logs)
    if len(logs) < 2: return math.exp(m), None, None
    t = T975.get(len(logs) - 1) or T975[max(k for k in T975 if k <= len(logs) - 1)]
    h = t * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(m), math.exp(m - h), math.exp(m + h)
print('| clients | A median | B median | B/A (medians) | B/A per round: median, min-max | paired geometric mean (95 % CI) | target < 2 % | A min-max (spread) | B min-max (spread) |')
print('|---:|---:|---:|---:|---|---|---|---|---|')
for c in clients:
    a = [f(r, 'tps') for r in rounds if int(r['clients']) == c and r['arm'] == 'A']
    b = [f(r, 'tps') for r in rounds if int(r['clients']) == c and r['arm'] == 'B']
    ma, mb = statistics.median(a), statistics.median(b)
    pairs = [y / x for x, y in zip(a, b)]
    spread = lambda v: f'{fmt(min(v))}-{fmt(max(v))} ({(max(v) - min(v)) / statistics.median(v) * 100:.1f} %)'
    g, lo, hi = paired_ci(pairs)
    verdict = 'one round: no interval' if lo is None else 'met' if lo > 0.98 else 'missed' if hi < 0.98 else 'not resolved'
    ci = f'{g:.3f}x' + ('' if lo is None else f' ({lo:.3f}-{hi:.3f})')
    print(f'| {c} | {fmt(ma)} | {fmt(mb)} | {mb / ma:.3f}x | {statistics.median(pairs):.3f}x, '
          f'{min(pairs):.3f}-{max(pairs):.3f} | {ci} | {verdict} | {spread(a)} | {spread(b)} |')
print()
print('Every round (jobs/s; load: the 1-minute load average when the round ended):')
print()
print('| run | clients | A | B | B/A | load after A / B |')
print('|---:|---:|---:|---:|---:|---|')
for run in sorted({int(r['run']) for r in rounds}):
    for c in clients:
        a = next(r for r in rounds if int(r['run']) == run and int(r['clients']) == c and r['arm'] == 'A')
        b = next(r for r in rounds if int(r['run']) == run and int(r['clients']) == c and r['arm'] == 'B')
        print(f"| {run} | {c} | {fmt(f(a, 'tps'))} | {fmt(f(b, 'tps'))} | {f(b, 'tps') / f(a, 'tps'):.3f}x | {a['load1']} / {b['load1']} |")
print()

print("## The dashboard's load during the B windows")
print()
print('From the server log (the dashboard role logs every statement with its duration), the page\'s')
print('requests (puppeteer), and /proc (CPU time of the processes, in % of one core over the window).')
print()
print('| clients | statements/s | statements per sample | server time (ms/s) | page refreshes/min | dashboard node CPU | browser CPU | dashboard backends CPU | dashboard statements in A windows |')
print('|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
for c in clients:
    b = [r for r in rounds if int(r['clients']) == c and r['arm'] == 'B']
    a = [r for r in rounds if int(r['clients']) == c and r['arm'] == 'A']
    w = sum(f(r, 'window_s') for r in b)
    n = sum(f(r, 'dash_statements') for r in b)
    pct = lambda k: f'{sum(f(r, k) for r in b) / w * 100:.2f} %'
    print(f'| {c} | {n / w:.2f} | {n / (w / interval):.1f} | {sum(f(r, "dash_server_ms") for r in b) / w:.2f} | '
          f'{sum(f(r, "page_refreshes") for r in b) / w * 60:.1f} | {pct("dash_node_cpu_s")} | {pct("browser_cpu_s")} | '
          f'{pct("dash_backend_cpu_s")} | {sum(int(r["dash_statements"]) for r in a)} |')
print()

# Statement kinds: the text, shortened to its start and its FROM.
kinds = {}
for line in open(sys.argv[2]):
    parts = line.rstrip('\n').split('\t', 2)
    if len(parts) < 3: continue
    c, ms, text = int(parts[0]), float(parts[1]), parts[2].strip()
    if len(text) > 70:
        # what it reads: the first schema-qualified FROM, else the last FROM
        m = re.search(r'\bFROM\s+(?:pgq|pg_catalog)\.\S+', text) or ([None] + list(re.finditer(r'\bFROM\s+\S+', text)))[-1]
        text = text[:32].rstrip() + ' ... ' + (m.group(0) if m else '')
    k = kinds.setdefault(text.replace('|', '/'), {})
    k.setdefault(c, []).append(ms)
if kinds:
    total = {c: sum(sum(v.get(c, [])) for v in kinds.values()) for c in clients}
    print('What the dashboard ran (all B windows; mean / max duration in ms, share of its server time):')
    print()
    print('| statement | ' + ' | '.join(f'c={c}: count, mean / max ms, share' for c in clients) + ' |')
    print('|---|' + '---|' * len(clients))
    for text, per in sorted(kinds.items(), key=lambda kv: -sum(sum(v) for v in kv[1].values())):
        cells = []
        for c in clients:
            v = per.get(c, [])
            cells.append(f'{len(v)}, {statistics.mean(v):.2f} / {max(v):.2f}, {sum(v) / total[c] * 100:.0f} %' if v else '-')
        print(f'| `{text}` | ' + ' | '.join(cells) + ' |')
    print()
PY
} >"$OUT_MD"
cat "$OUT_MD"
say "written to $OUT_MD"
