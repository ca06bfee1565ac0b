#!/usr/bin/env bash
# pgq_cpp wake-ups and background workers, in one throwaway cluster:
#
#   1. wake-up latency (bench/wakeup.py): from an enqueue's COMMIT returning to
#      the consumer having the job, for pgq.claim(wait => ...), LISTEN/NOTIFY
#      then claim, and polling claim every 100 ms;
#   2. the cost of the maintenance worker on claim throughput: pgbench
#      claim+complete n=1 (bench/sql/pgq_claim1.sql) with the worker on and off.
#
#   bash bench/wakeup.sh
#   WAKEUP_JOBS=100 DURATION=3 RUNS=1 bash bench/wakeup.sh     quick development run
#
# Environment:
#   WAKEUP_JOBS  measured jobs per consumer in part 1 (default 1000)
#   DURATION     seconds per pgbench run in part 2 (default 10)
#   RUNS         runs per (clients, worker on/off); the median is reported (default 5)
#   CLIENTS      pgbench client counts in part 2 (default "1 4")
#   JOBS         jobs pre-filled before every pgbench run (default 150000; a
#                claim+complete n=1 run takes ~2,000-3,500 jobs/s on 2 cores)
#   PARTS        which parts to run (default "1 2"; PARTS=2 re-measures the worker's cost)
#   OUT_DIR      where the report and raw figures go (default /tmp/pgq_wakeup_out)
#
# It measures the extension as installed (it does not build or install it)
# and needs it preloaded, which start_cluster does. Durable commits, the
# settings of bench/run.sh. The report is printed and written to
# $OUT_DIR/wakeup-latest.md; every latency sample and every pgbench run are in
# $OUT_DIR/wakeup-samples.csv and $OUT_DIR/maintenance-runs.csv.

source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

WAKEUP_JOBS="${WAKEUP_JOBS:-1000}"
PARTS="${PARTS:-1 2}"
run_part() { [[ " $PARTS " == *" $1 "* ]]; }
DURATION="${DURATION:-10}"
RUNS="${RUNS:-5}"
CLIENTS="${CLIENTS:-1 4}"
JOBS="${JOBS:-150000}"
OUT_DIR="${OUT_DIR:-/tmp/pgq_wakeup_out}"

BENCH_HOME="$PGQ_ROOT/bench"
SCRIPTS="$BENCH_HOME/sql"
PGDIR=/tmp/pgq_wakeup
PGPORT_WAKEUP=55445
DB=bench
PYTHON=/usr/bin/python3   # Debian's, with python3-psycopg (not a pyenv shim's)
OUT_MD="$OUT_DIR/wakeup-latest.md"
SAMPLES_CSV="$OUT_DIR/wakeup-samples.csv"
RUNS_CSV="$OUT_DIR/maintenance-runs.csv"

# The settings of bench/run.sh: durable commits; checkpoints and autovacuum
# kept out of the measured seconds (we CHECKPOINT and VACUUM between runs).
# The maintenance worker runs every second, as by default.
CLUSTER_CONF=(
  "${BENCH_DURABLE_CONF[@]}"
  "autovacuum = off"
  "pgq.maintenance_interval = '1s'"
)

for knob in WAKEUP_JOBS DURATION RUNS JOBS; do
  [[ "${!knob}" =~ ^[1-9][0-9]*$ ]] || { echo "$knob must be a positive integer" >&2; exit 2; }
done

ensure_packages
SO_FILE="$("$PG_CONFIG" --pkglibdir)/pgq_cpp.so"
[[ -f "$SO_FILE" ]] || { echo "pgq_cpp is not installed ($SO_FILE): build and install it first" >&2; exit 1; }

PSQL=("$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PGDIR" -p "$PGPORT_WAKEUP" -U postgres -d "$DB")
sql() { "${PSQL[@]}" -c "$1"; }
DSN="host=$PGDIR port=$PGPORT_WAKEUP dbname=$DB user=postgres"

cleanup() { stop_cluster "$PGDIR"; }
trap cleanup EXIT

# A cluster left behind by an interrupted run: stop it, start afresh.
stop_cluster "$PGDIR"
rm -rf "$PGDIR"
mkdir -p "$OUT_DIR"
so_id() { echo "installed pgq_cpp.so $(date -u -r "$SO_FILE" '+%Y-%m-%d %H:%M:%S UTC'), md5 $(md5sum "$SO_FILE" | cut -c1-12)"; }
SO_AT_START=$(so_id)
GIT_AT_START="git $(git -C "$PGQ_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$PGQ_ROOT" diff --quiet HEAD -- src sql 2>/dev/null || echo ' (working tree modified)')"
say "starting the cluster in $PGDIR (port $PGPORT_WAKEUP)"
start_cluster "$PGDIR" "$PGPORT_WAKEUP" "${CLUSTER_CONF[@]}"
"$PG_BIN/createdb" -h "$PGDIR" -p "$PGPORT_WAKEUP" -U postgres "$DB"
sql "CREATE EXTENSION pgq_cpp"
sql "SELECT pgq.create_queue('bench')" >/dev/null

# Other PostgreSQL servers on the machine (tests being run, say) compete for
# the same cores; name them in the report.
other_servers() { ps -eo args= | awk '$1 ~ /bin\/postgres$/ && $0 !~ "'"$PGDIR"'/data" {for (i = 2; i <= NF; i++) if ($i == "-D") print $(i + 1)}' | sort -u | paste -sd' ' -; }
load1() { cut -d' ' -f1 /proc/loadavg; }

# --- the maintenance worker, on and off -----------------------------------------

# Maintenance workers running in the benchmark database.
workers() { sql "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgq maintenance' AND datname = '$DB'"; }

# worker on|off: lists the benchmark database in pgq.databases ('' = every
# database) or only a database that does not exist, and waits until the
# launcher has started or stopped the worker. The launcher itself keeps running.
worker() {
  local want tries=0
  if [[ $1 == on ]]; then
    sql "ALTER SYSTEM SET pgq.databases = ''"; want=1
  else
    sql "ALTER SYSTEM SET pgq.databases = 'no_such_database'"; want=0
  fi
  sql "SELECT pg_reload_conf()" >/dev/null
  until [[ $(workers) == "$want" ]]; do
    ((++tries > 300)) && { echo "the maintenance worker did not turn $1 within 30 s" >&2; exit 1; }
    sleep 0.1
  done
}

# --- part 1: wake-up latency ------------------------------------------------------

OTHERS_BEFORE=$(other_servers)
LOAD_BEFORE=$(uptime)
WAKEUP_TABLE="(part 1 not run)"; ELAPSED1=0; WORKERS_AFTER1="-"
if run_part 1; then
worker on
say "part 1: wake-up latency, $WAKEUP_JOBS jobs per consumer (load: ${LOAD_BEFORE##*load average: })"
START1=$(date +%s)
WAKEUP_TABLE=$("$PYTHON" "$BENCH_HOME/wakeup.py" --dsn "$DSN" --jobs "$WAKEUP_JOBS" --csv "$SAMPLES_CSV")
ELAPSED1=$(( $(date +%s) - START1 ))
LOAD_MID=$(uptime)
WORKERS_AFTER1=$(workers)
fi
LOAD_MID=$(uptime)

# --- part 2: claim throughput, maintenance worker on and off ----------------------

# Empties every pgq table but pgq.queues (as bench/run.sh does).
PGQ_TABLES=$(sql "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ')
                    FROM pg_tables WHERE schemaname = 'pgq' AND tablename NOT IN ('queues', 'segment_rings')")

prefill() {  # count, in batches of 100,000 with enqueue_many
  local left=$1 batch
  while ((left > 0)); do
    batch=$((left < 100000 ? left : 100000))
    sql "SELECT count(*) FROM pgq.enqueue_many('bench', array_fill('{\"k\":1}'::jsonb, ARRAY[$batch]))" >/dev/null
    left=$((left - batch))
  done
}

# one_run CLIENTS on|off REP: appends one line to $RUNS_CSV
one_run() {
  local clients="$1" state="$2" rep="$3" threads out rc=0 tps xacts jobs pending before after
  threads=$((clients < 2 ? clients : 2))
  worker "$state"
  sql "TRUNCATE $PGQ_TABLES"
  prefill "$JOBS"
  sql "VACUUM ANALYZE pgq.job_rows"
  sql "CHECKPOINT"
  before=$(workers)
  out=$("$PG_BIN/pgbench" -n -M prepared -r -c "$clients" -j "$threads" -T "$DURATION" \
          -h "$PGDIR" -p "$PGPORT_WAKEUP" -U postgres -f "$SCRIPTS/pgq_claim1.sql" "$DB" 2>&1) || rc=$?
  after=$(workers)
  tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out" | head -1)
  xacts=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out" | head -1)
  if ((rc != 0)) || [[ -z "$tps" ]]; then
    grep -m3 -E 'error|abort' <<<"$out" >&2 || true
    tps=${tps:-0}; xacts=${xacts:-0}
  fi
  jobs=$(sql "SELECT $JOBS - count(*) FROM pgq.jobs")
  pending=$(sql "SELECT count(*) FROM pgq.jobs WHERE state = 'p'")
  echo "$clients,$state,$rep,$tps,$xacts,$jobs,$pending,$before,$after,$rc,$(load1)" >>"$RUNS_CSV"
  printf '  c=%-2s worker %-3s run %s: %8.1f tps  %6s jobs  %6s left  workers %s/%s  load %s\n' \
    "$clients" "$state" "$rep" "$tps" "$jobs" "$pending" "$before" "$after" "$(load1)" >&2
  ((pending > 0)) || say "WARNING: the queue ran dry (JOBS=$JOBS): raise JOBS"
}

echo "clients,worker,run,tps,xacts,jobs,pending_after,workers_before,workers_after,rc,load1" >"$RUNS_CSV"
say "part 2: pgbench claim+complete n=1, maintenance worker on/off, clients: $CLIENTS, $RUNS x $DURATION s, $JOBS jobs pre-filled"
START2=$(date +%s)
run_part 2 || CLIENTS=""
for clients in $CLIENTS; do
  for rep in $(seq 1 "$RUNS"); do
    # on, off, then off, on: alternating which goes first cancels a steady drift.
    if ((rep % 2)); then order=(on off); else order=(off on); fi
    for state in "${order[@]}"; do one_run "$clients" "$state" "$rep"; done
  done
done
ELAPSED2=$(( $(date +%s) - START2 ))
LOAD_AFTER=$(uptime)
OTHERS_AFTER=$(other_servers)
SO_AT_END=$(so_id)

# --- the report -------------------------------------------------------------------

maintenance_table() {
  run_part 2 || { echo "(part 2 not run)"; return; }
  "$PYTHON" - "$RUNS_CSV" <<'EOF'
import csv, statistics, sys
from collections import defaultdict

runs = defaultdict(list)   # (clients, worker) -> [tps]
paired = defaultdict(dict)  # (clients, rep) -> {worker: tps}
bad = []
for r in csv.DictReader(open(sys.argv[1])):
    c, w, tps = int(r["clients"]), r["worker"], float(r["tps"])
    runs[(c, w)].append(tps)
    paired[(c, int(r["run"]))][w] = tps
    want = "1" if w == "on" else "0"
    if r["rc"] != "0" or r["pending_after"] == "0" or r["workers_before"] != want or r["workers_after"] != want:
        bad.append(r)

def spread(v):
    """Max-min range as a percentage of the median, halved (as bench/report.py)."""
    m = statistics.median(v)
    return f"±{(max(v) - min(v)) / m * 50:.0f}%" if m and len(v) > 1 else "-"

print("| clients | worker on TPS | worker off TPS | on/off | paired on/off | noise on / off |")
print("|---:|---:|---:|---:|---:|---:|")
for c in sorted({c for c, _ in runs}):
    on, off = runs[(c, "on")], runs[(c, "off")]
    pairs = [p["on"] / p["off"] for (pc, _), p in sorted(paired.items()) if pc == c and p.get("off")]
    print(f"| {c} | {statistics.median(on):,.0f} | {statistics.median(off):,.0f} | "
          f"**{statistics.median(on) / statistics.median(off):.3f}x** | "
          f"{statistics.median(pairs):.3f}x | {spread(on)} / {spread(off)} |")
loads = sorted(float(r["load1"]) for r in csv.DictReader(open(sys.argv[1])))
print(f"\nLoad average (1 min) at the end of each run: min {loads[0]:.2f}, "
      f"median {statistics.median(loads):.2f}, max {loads[-1]:.2f}.")
if bad:
    print("\n**Warning**: runs that failed, ran dry, or had the worker in the wrong state:")
    for r in bad:
        print(f"- c={r['clients']} worker {r['worker']} run {r['run']}: rc {r['rc']}, "
              f"{r['pending_after']} jobs left, workers {r['workers_before']}/{r['workers_after']}")
EOF
}

{
  echo "# pgq_cpp wake-ups and maintenance worker: latest run"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); wall time: part 1 ${ELAPSED1} s, part 2 ${ELAPSED2} s"
  echo "- command: \`PARTS=\"$PARTS\" WAKEUP_JOBS=$WAKEUP_JOBS DURATION=$DURATION RUNS=$RUNS CLIENTS=\"$CLIENTS\" JOBS=$JOBS bash bench/wakeup.sh\`"
  echo "- machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, $(uname -sr)"
  echo "- PostgreSQL: $(sql "SELECT version()")"
  echo "- pgq_cpp measured: $GIT_AT_START, $SO_AT_START (loaded when the cluster started)"
  [[ "$SO_AT_END" != "$SO_AT_START" ]] && echo "- note: the extension was reinstalled during the run (now: $SO_AT_END); the running server kept the build it started with"
  echo "- cluster settings: $(IFS=';'; echo "${CLUSTER_CONF[*]}" | sed 's/;/, /g')"
  echo "- load before part 1: \`${LOAD_BEFORE## }\`"
  echo "- load after part 1: \`${LOAD_MID## }\`"
  echo "- load after part 2: \`${LOAD_AFTER## }\`"
  echo "- other PostgreSQL servers running: at start: ${OTHERS_BEFORE:-none}; at end: ${OTHERS_AFTER:-none}"
  echo
  echo "## Wake-up latency (ms)"
  echo
  echo "Maintenance worker on (interval 1 s) throughout; $WORKERS_AFTER1 worker(s) in the database at the end."
  echo "$WAKEUP_TABLE"
  echo
  echo "## Claim throughput with the maintenance worker on and off"
  echo
  echo "\`pgbench -n -M prepared -r -c N -j min(N,2) -T $DURATION -f bench/sql/pgq_claim1.sql\` (claim 1 + complete),"
  echo "$JOBS jobs pre-filled and \`VACUUM ANALYZE\` + \`CHECKPOINT\` before every run; $RUNS runs each,"
  echo "on/off alternating (on first in odd rounds, off first in even ones). On: \`pgq.databases = ''\`,"
  echo "one 'pgq maintenance' worker with \`pgq.maintenance_interval = 1s\` (its passes find no expired"
  echo "lease); off: \`pgq.databases = 'no_such_database'\`, no worker (the launcher still runs)."
  echo "TPS = jobs/s (medians); paired = median of the per-round on/off ratios."
  echo
  maintenance_table
} >"$OUT_MD"

cat "$OUT_MD"
say "written to $OUT_MD (samples: $SAMPLES_CSV, pgbench runs: $RUNS_CSV)"
