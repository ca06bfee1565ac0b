#!/usr/bin/env bash
# pgq_cpp benchmark: pgq against a hand-written plain-SQL queue (bench/baseline.sql)
# and against PostgreSQL's own ceiling, side by side in one throwaway cluster.
#
#   bash bench/run.sh            (or: make bench)
#   DURATION=3 RUNS=1 bash bench/run.sh      quick development run
#
# Environment:
#   DURATION   seconds per pgbench run (default 10)
#   RUNS       runs per (workload, clients, system); the median is reported (default 3)
#   CLIENTS    client counts (default "1 4 8")
#   WORKLOADS  subset of: ceiling enqueue enqueue_many claim1 claim10 claim100 (default: all)
#
# Every (workload, clients) does RUNS rounds of baseline then pgq (A/B/A/B...),
# so drift on the machine hits both alike. Durable commits throughout
# (fsync = on, synchronous_commit = on). The markdown table is printed and
# written to bench/results-latest.md; every single run goes to
# bench/results-latest-runs.csv.

source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

DURATION="${DURATION:-10}"
RUNS="${RUNS:-3}"
CLIENTS="${CLIENTS:-1 4 8}"
WORKLOADS="${WORKLOADS:-ceiling enqueue enqueue_many claim1 claim10 claim100}"

BENCH_HOME="$PGQ_ROOT/bench"
SCRIPTS="$BENCH_HOME/sql"
PGDIR=/tmp/pgq_bench
PGPORT_BENCH=55440
DB=bench
OUT_MD="$BENCH_HOME/results-latest.md"
OUT_CSV="$BENCH_HOME/results-latest-runs.csv"

# Benchmark settings on top of initdb's defaults. Durability stays on; the
# rest keeps checkpoints and autovacuum out of the measured 10 seconds (we
# CHECKPOINT and VACUUM ourselves between runs, the same for both systems).
CLUSTER_CONF=(
  "${BENCH_DURABLE_CONF[@]}"
  "autovacuum = off"
)

[[ "$DURATION" =~ ^[1-9][0-9]*$ ]] || { echo "DURATION must be a positive integer" >&2; exit 2; }
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "RUNS must be a positive integer" >&2; exit 2; }

ensure_packages
# Measure the tree as it is: build and install it (a no-op when up to date).
build_and_install

PSQL=("$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PGDIR" -p "$PGPORT_BENCH" -U postgres -d "$DB")
sql() { "${PSQL[@]}" -c "$1"; }

cleanup() { stop_cluster "$PGDIR"; }
trap cleanup EXIT

# A cluster left behind by an interrupted run: stop it, start afresh.
stop_cluster "$PGDIR"
rm -rf "$PGDIR"
# What the server loads at start is what is measured, even if someone
# reinstalls the extension during the run.
SO_FILE="$("$PG_CONFIG" --pkglibdir)/pgq_cpp.so"
so_id() { echo "installed pgq_cpp.so $(date -u -r "$SO_FILE" '+%Y-%m-%d %H:%M:%S UTC'), md5 $(md5sum "$SO_FILE" | cut -c1-12)"; }
SO_AT_START=$(so_id)
GIT_AT_START="git $(git -C "$PGQ_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$PGQ_ROOT" diff --quiet HEAD -- src sql 2>/dev/null || echo ' (working tree modified)')"
say "starting the benchmark cluster in $PGDIR (port $PGPORT_BENCH)"
start_cluster "$PGDIR" "$PGPORT_BENCH" "${CLUSTER_CONF[@]}"
"$PG_BIN/createdb" -h "$PGDIR" -p "$PGPORT_BENCH" -U postgres "$DB"
sql "CREATE EXTENSION pgq_cpp"
sql "SELECT pgq.create_queue('bench')" >/dev/null
"${PSQL[@]}" -f "$BENCH_HOME/baseline.sql"

# pgq.complete_many is what a worker claiming n > 1 should call. If the
# installed build cannot run it, fall back to one pgq.complete per job inside
# one statement, and say so in the results.
CLAIMN_PGQ=pgq_claimN.sql
COMPLETE_MANY_NOTE=""
sql "SELECT pgq.enqueue('bench', '{}')" >/dev/null
if ! probe_err=$(sql "SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM pgq.claim('bench', 1)" 2>&1 >/dev/null); then
  CLAIMN_PGQ=pgq_claimN_fallback.sql
  COMPLETE_MANY_NOTE="pgq.complete_many failed in this build ($(echo "$probe_err" | head -1)); the pgq claim n=10/100 rows complete each job with pgq.complete inside one statement instead (bench/sql/pgq_claimN_fallback.sql)."
  say "WARNING: $COMPLETE_MANY_NOTE"
fi

# --- one run ----------------------------------------------------------------

# Jobs per second each claim workload has reached so far, to size the pre-fill
# so the queue never runs dry (DURATION x rate x 1.3): per (n, clients) once
# seen, else the best seen for n at any client count, else a generous guess.
# A run that ran dry anyway is redone with twice the pre-fill.
declare -A RATE_MAX=([1]=5000 [10]=25000 [100]=70000)
declare -A RATE_SEEN=()
declare -A PAIR_PREFILL=()

# Empties both queues: bench_jobs, and every pgq table but pgq.queues (the
# extension's schema is still moving, so its tables are not named here).
PGQ_TABLES=""
reset_queues() {
  if [[ -z "$PGQ_TABLES" ]]; then
    PGQ_TABLES=$(sql "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ')
                        FROM pg_tables WHERE schemaname = 'pgq' AND tablename <> 'queues'")
  fi
  sql "TRUNCATE bench_jobs, $PGQ_TABLES"
}

prefill() {  # system count
  local system="$1" count="$2" batch left
  left=$count
  while ((left > 0)); do
    batch=$((left < 100000 ? left : 100000))
    if [[ $system == pgq ]]; then
      sql "SELECT count(*) FROM pgq.enqueue_many('bench', array_fill('{\"k\":1}'::jsonb, ARRAY[$batch]))" >/dev/null
    else
      sql "INSERT INTO bench_jobs (queue, payload) SELECT 'bench', '{\"k\":1}'::jsonb FROM generate_series(1, $batch)"
    fi
    left=$((left - batch))
  done
}

# pgbench SCRIPT CLIENTS [pgbench args...]; sets PB_RC, PB_TPS, PB_XACTS, PB_LAT
run_pgbench() {
  local script="$1" clients="$2"; shift 2
  local threads=$((clients < 2 ? clients : 2)) out
  PB_RC=0
  out=$("$PG_BIN/pgbench" -n -M prepared -r -c "$clients" -j "$threads" -T "$DURATION" \
          -h "$PGDIR" -p "$PGPORT_BENCH" -U postgres -f "$SCRIPTS/$script" "$@" "$DB" 2>&1) || PB_RC=$?
  PB_TPS=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out" | head -1)
  PB_XACTS=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out" | head -1)
  # per-statement mean latency (ms), in script order, joined by '/'
  PB_LAT=$(awk '/^statement latencies/ {on=1; next} on && $1 ~ /^[0-9.]+$/ {printf "%s%s", sep, $1; sep="/"}' <<<"$out")
  if ((PB_RC != 0)) || [[ -z "$PB_TPS" ]]; then
    grep -m3 -E 'error|abort' <<<"$out" >&2 || true
    PB_TPS=${PB_TPS:-0}; PB_XACTS=${PB_XACTS:-0}
  fi
}

record() {  # workload n clients system rep tps xacts jobs prefill lat rc
  echo "$*,$(cut -d' ' -f1 /proc/loadavg)" | tr ' ' ',' >>"$OUT_CSV"
  printf '  %-13s c=%-2s %-9s run %s: %10.1f tps  %8s jobs  lat %s ms\n' "$1" "$3" "$4" "$5" "$6" "$8" "${10}" >&2
}

# one_run WORKLOAD SYSTEM CLIENTS REP
one_run() {
  local workload="$1" system="$2" clients="$3" rep="$4"
  local script n=1 jobs=0 prefill_n=0 tries=0 pending
  case "$workload/$system" in
    ceiling/select1)     script=ceiling_select1.sql ;;
    ceiling/update)      script=ceiling_update.sql ;;
    enqueue/baseline)    script=base_enqueue.sql ;;
    enqueue/pgq)         script=pgq_enqueue.sql ;;
    enqueue_many/*)      script=${system/baseline/base}_enqueue_many.sql; n=100 ;;
    claim1/baseline)     script=base_claim1.sql ;;
    claim1/pgq)          script=pgq_claim1.sql ;;
    claim*/baseline)     n=${workload#claim}; script=base_claim$n.sql ;;
    claim*/pgq)          script=$CLAIMN_PGQ; n=${workload#claim} ;;
    *) echo "unknown workload $workload/$system" >&2; exit 2 ;;
  esac

  while :; do
    case "$workload" in
      ceiling)
        sql "VACUUM ceiling"
        ;;
      enqueue*)
        reset_queues
        sql "VACUUM ANALYZE bench_jobs" ; sql "VACUUM ANALYZE pgq.jobs"
        ;;
      claim*)
        reset_queues
        if ((prefill_n == 0)); then
          # Baseline and pgq of one round start from the same queue size.
          if [[ -z "${PAIR_PREFILL[$n/$clients/$rep]:-}" ]]; then
            local est=${RATE_SEEN[$n/$clients]:-${RATE_MAX[$n]}}
            PAIR_PREFILL[$n/$clients/$rep]=$(( (est * DURATION * 13 / 10 / 1000 + 1) * 1000 ))
          fi
          prefill_n=${PAIR_PREFILL[$n/$clients/$rep]}
        fi
        prefill "$system" "$prefill_n"
        if [[ $system == pgq ]]; then sql "VACUUM ANALYZE pgq.jobs"; else sql "VACUUM ANALYZE bench_jobs"; fi
        ;;
    esac
    sql "CHECKPOINT"

    run_pgbench "$script" "$clients" -D "n=$n"

    case "$workload/$system" in
      ceiling/*)       jobs=$PB_XACTS ;;
      enqueue*/pgq)    jobs=$(sql "SELECT count(*) FROM pgq.jobs") ;;
      enqueue*/*)      jobs=$(sql "SELECT count(*) FROM bench_jobs") ;;
      claim*/pgq)      jobs=$(sql "SELECT $prefill_n - count(*) FROM pgq.jobs")
                       pending=$(sql "SELECT count(*) FROM pgq.jobs WHERE state = 'p'") ;;
      claim*/*)        jobs=$(sql "SELECT $prefill_n - count(*) FROM bench_jobs")
                       pending=$(sql "SELECT count(*) FROM bench_jobs WHERE status = 'pending'") ;;
    esac
    if [[ $workload == claim* ]]; then
      local rate=$((jobs / DURATION))
      ((rate > RATE_MAX[$n])) && RATE_MAX[$n]=$rate
      ((rate > ${RATE_SEEN[$n/$clients]:-0})) && RATE_SEEN[$n/$clients]=$rate
      if ((PB_RC != 0 || pending == 0)) && ((tries < 3)); then
        tries=$((tries + 1))
        say "  $workload $system c=$clients ran dry or failed (prefill $prefill_n, rc $PB_RC): redoing with twice the prefill"
        prefill_n=$((prefill_n * 2))
        PAIR_PREFILL[$n/$clients/$rep]=$prefill_n
        continue
      fi
    fi
    break
  done
  record "$workload" "$n" "$clients" "$system" "$rep" "$PB_TPS" "$PB_XACTS" "$jobs" "$prefill_n" "$PB_LAT" "$PB_RC"
}

# --- the plan ---------------------------------------------------------------

echo "workload,n,clients,system,run,tps,xacts,jobs,prefill,stmt_latency_ms,rc,load1" >"$OUT_CSV"
# Other PostgreSQL servers on the machine (tests being run, say) compete for
# the same 2 cores; name them in the report.
other_servers() { ps -eo args= | awk '$1 ~ /bin\/postgres$/ && $0 !~ "'"$PGDIR"'/data" {for (i = 2; i <= NF; i++) if ($i == "-D") print $(i + 1)}' | sort -u | paste -sd' ' -; }
OTHERS_BEFORE=$(other_servers)
LOAD_BEFORE=$(uptime)
START_TS=$(date +%s)
say "DURATION=$DURATION s, RUNS=$RUNS, clients: $CLIENTS, workloads: $WORKLOADS"
for workload in $WORKLOADS; do
  if [[ $workload == ceiling ]]; then systems=(select1 update); else systems=(baseline pgq); fi
  for clients in $CLIENTS; do
    say "$workload, $clients client(s)"
    for rep in $(seq 1 "$RUNS"); do
      for system in "${systems[@]}"; do
        one_run "$workload" "$system" "$clients" "$rep"
      done
    done
  done
done
ELAPSED=$(( $(date +%s) - START_TS ))
LOAD_AFTER=$(uptime)
OTHERS_AFTER=$(other_servers)

# --- the report -------------------------------------------------------------

PG_SERVER_VERSION=$(sql "SELECT version()")
SO_AT_END=$(so_id)
{
  echo "# pgq_cpp benchmark: latest run"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); wall time of the runs: ${ELAPSED} s"
  echo "- command: \`DURATION=$DURATION RUNS=$RUNS bash bench/run.sh\` (clients: $CLIENTS)"
  echo "- machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, $(uname -sr)"
  echo "- PostgreSQL: $PG_SERVER_VERSION"
  echo "- pgq_cpp measured: $GIT_AT_START, $SO_AT_START (loaded when the cluster started)"
  [[ "$SO_AT_END" != "$SO_AT_START" ]] && echo "- note: the extension was reinstalled during the run (now: $SO_AT_END); the running server kept the build it started with"
  echo "- cluster settings: $(IFS=';'; echo "${CLUSTER_CONF[*]}" | sed 's/;/, /g')"
  echo "- load before: \`${LOAD_BEFORE## }\`"
  echo "- load after: \`${LOAD_AFTER## }\`"
  echo "- other PostgreSQL servers running: at start: ${OTHERS_BEFORE:-none}; at end: ${OTHERS_AFTER:-none}"
  [[ -n "$COMPLETE_MANY_NOTE" ]] && echo "- **note**: $COMPLETE_MANY_NOTE"
  echo
  python3 "$BENCH_HOME/report.py" "$OUT_CSV"
} >"$OUT_MD"

cat "$OUT_MD"
say "written to $OUT_MD (every run: $OUT_CSV)"
