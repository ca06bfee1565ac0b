#!/usr/bin/env bash
# pgq_cpp benchmark: pgq against a hand-written plain-SQL queue (bench/baseline.sql)
# and against PostgreSQL's own ceiling, side by side in one throwaway cluster.
#
#   bash bench/run.sh            (or: make bench)
#   DURATION=3 RUNS=1 SYNC=on bash bench/run.sh      quick development run
#
# Environment:
#   DURATION   seconds per pgbench run (default 5)
#   RUNS       runs per (workload, sync, clients, system); the median is reported (default 3)
#   CLIENTS    client counts (default "1 4 8")
#   SYNC       synchronous_commit settings, each workload is run under each
#              (default "on off"; set per pgbench run with PGOPTIONS)
#   WORKLOADS  subset of: ceiling enqueue enqueue_many enqueue_series claim1 claim10 claim100
#              halving10 halving100 (default: all)
#   BENCH_ROLE run every pgbench session as this ordinary role (created here;
#              SET ROLE through PGOPTIONS): pgq through its grants (produce,
#              consume, admin on every queue), the baseline through rights on
#              its tables. Default: the superuser, which skips the rights check.
#   KEEP_COMPLETED an interval: the bench queue keeps its completed jobs that
#              long (create_queue's keep_completed: history on, issue 17);
#              default: nothing kept, as every release before 1.2
#   NO_INSTALL 1: do not build and install the tree, measure the pgq_cpp
#              already installed (for smoke tests of this script)
#   OUT_MD, OUT_CSV  where the report and the per-run CSV go (default
#              bench/results-latest.md and bench/results-latest-runs.csv)
#
# Workloads: enqueue (1 per transaction), enqueue_many (100 per transaction;
# the baseline inserts an unnest of an array of 100), enqueue_series (the
# same pgq.enqueue_many against a multi-row INSERT ... SELECT FROM
# generate_series(1, 100), the cheapest batch the baseline can do),
# claimN (claim N, then complete them: two autocommit statements), halvingN
# (the commit-halving pattern: one transaction completes the previous batch of
# N and claims the next; bench/sql/*_halving*.sql), ceiling (SELECT 1 and a
# single-row UPDATE: PostgreSQL's own limit).
#
# Wall time of the full default run (DURATION=5 RUNS=3), about 35 minutes on
# this 2-core machine: 8 workloads x 2 sync x 3 client counts x 3 runs x 2
# systems = 288 pgbench runs x 5 s = 24 min, plus around each run the TRUNCATE,
# VACUUM, CHECKPOINT and counts (~1 s for enqueue and ceiling runs, ~1.5 s for
# claim and halving runs: 108 + 270 s) and the claim/halving pre-fill (1.3 x
# rate x DURATION jobs at ~135,000 jobs/s, ~50 x DURATION s over the run):
# 288 x 5 + 378 + 260 = ~2,080 s. Every second of DURATION adds ~5.7 minutes
# (DURATION=8: ~52 minutes). The CSV's elapsed_s column shows where the time went.
#
# Every (workload, sync, clients) does RUNS rounds of baseline then pgq
# (A/B/A/B...), so drift on the machine hits both alike. Durable cluster
# (fsync = on); synchronous_commit as SYNC says. The markdown table is printed
# and written to $OUT_MD; every single run goes to $OUT_CSV.

source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

DURATION="${DURATION:-5}"
RUNS="${RUNS:-3}"
CLIENTS="${CLIENTS:-1 4 8}"
SYNC="${SYNC:-on off}"
WORKLOADS="${WORKLOADS:-ceiling enqueue enqueue_many claim1 claim10 claim100 halving10 halving100}"
NO_INSTALL="${NO_INSTALL:-0}"
BENCH_ROLE="${BENCH_ROLE:-}"
KEEP_COMPLETED="${KEEP_COMPLETED:-}"

BENCH_HOME="$PGQ_ROOT/bench"
SCRIPTS="$BENCH_HOME/sql"
PGDIR=/tmp/pgq_bench
PGPORT_BENCH=55440
DB=bench
OUT_MD="${OUT_MD:-$BENCH_HOME/results-latest.md}"
OUT_CSV="${OUT_CSV:-$BENCH_HOME/results-latest-runs.csv}"

# Benchmark settings on top of initdb's defaults. Durability stays on
# (synchronous_commit = on is the cluster default; SYNC=off runs override it
# per pgbench session); the rest keeps checkpoints and autovacuum out of the
# measured seconds (we CHECKPOINT and VACUUM ourselves between runs, the same
# for both systems).
CLUSTER_CONF=(
  "${BENCH_DURABLE_CONF[@]}"
  "autovacuum = off"
)

[[ "$DURATION" =~ ^[1-9][0-9]*$ ]] || { echo "DURATION must be a positive integer" >&2; exit 2; }
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "RUNS must be a positive integer" >&2; exit 2; }
for s in $SYNC; do
  [[ $s == on || $s == off ]] || { echo "SYNC: each setting must be on or off (got '$s')" >&2; exit 2; }
done
for w in $WORKLOADS; do
  [[ $w =~ ^(ceiling|enqueue|enqueue_many|enqueue_series|claim(1|10|100)|halving(10|100))$ ]] \
    || { echo "unknown workload '$w'" >&2; exit 2; }
done

bench_install

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
[[ $NO_INSTALL == 1 ]] && GIT_AT_START="$GIT_AT_START (NO_INSTALL=1: the installed build, which may not be this tree)"
say "starting the benchmark cluster in $PGDIR (port $PGPORT_BENCH)"
start_cluster "$PGDIR" "$PGPORT_BENCH" "${CLUSTER_CONF[@]}"
"$PG_BIN/createdb" -h "$PGDIR" -p "$PGPORT_BENCH" -U postgres "$DB"
sql "CREATE EXTENSION pgq_cpp"
if [[ -n $KEEP_COMPLETED ]]; then
  [[ $KEEP_COMPLETED =~ ^[0-9a-z\ ]+$ ]] || { echo "KEEP_COMPLETED must be an interval like '1 minute'" >&2; exit 2; }
  sql "SELECT pgq.create_queue('bench', keep_completed => '$KEEP_COMPLETED')" >/dev/null
else
  sql "SELECT pgq.create_queue('bench')" >/dev/null
fi
"${PSQL[@]}" -f "$BENCH_HOME/baseline.sql"
ROLE_OPTION=""
if [[ -n $BENCH_ROLE ]]; then
  [[ $BENCH_ROLE =~ ^[a-z_][a-z0-9_]*$ ]] || { echo "BENCH_ROLE must be a plain lower-case name" >&2; exit 2; }
  sql "CREATE ROLE $BENCH_ROLE"
  sql "SELECT pgq.grant('$BENCH_ROLE', NULL, p) FROM unnest(ARRAY['produce', 'consume', 'admin']) p" >/dev/null
  sql "GRANT ALL ON ALL TABLES IN SCHEMA public TO $BENCH_ROLE"
  sql "GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO $BENCH_ROLE"
  ROLE_OPTION=" -c role=$BENCH_ROLE"
  got=$(PGOPTIONS="$ROLE_OPTION" "${PSQL[@]}" -c "SELECT current_user")
  [[ $got == "$BENCH_ROLE" ]] || { echo "PGOPTIONS did not set role=$BENCH_ROLE (got '$got')" >&2; exit 1; }
fi

# Each SYNC setting reaches the sessions through PGOPTIONS: check it does.
for s in $SYNC; do
  got=$(PGOPTIONS="-c synchronous_commit=$s" "${PSQL[@]}" -c "SHOW synchronous_commit")
  [[ $got == "$s" ]] || { echo "PGOPTIONS did not set synchronous_commit=$s (got '$got')" >&2; exit 1; }
done

# pgq.complete_many is what a worker claiming n > 1 should call. If the
# installed build cannot run it, fall back to one pgq.complete per job inside
# one statement, and say so in the results.
CLAIMN_PGQ=pgq_claimN.sql
HALVING_PGQ=pgq_halving.sql
COMPLETE_MANY_NOTE=""
sql "SELECT pgq.enqueue('bench', '{}')" >/dev/null
if ! probe_err=$(sql "SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM pgq.claim('bench', 1)" 2>&1 >/dev/null); then
  CLAIMN_PGQ=pgq_claimN_fallback.sql
  HALVING_PGQ=pgq_halving_fallback.sql
  COMPLETE_MANY_NOTE="pgq.complete_many failed in this build ($(echo "$probe_err" | head -1)); the pgq claim n=10/100 and halving rows complete each job with pgq.complete inside one statement instead (bench/sql/*_fallback.sql)."
  say "WARNING: $COMPLETE_MANY_NOTE"
fi

# --- one run ----------------------------------------------------------------

# Jobs per second each claim/halving workload has reached so far, to size the
# pre-fill so the queue never runs dry (DURATION x rate x 1.3): per (workload,
# sync, clients) once seen, else the best seen for (workload, sync) at any
# client count, else a generous guess by batch size (twice as much with
# synchronous_commit off). A run that ran dry anyway is redone with twice the
# pre-fill.
declare -A RATE_GUESS=([1]=5000 [10]=25000 [100]=70000)
declare -A RATE_MAX=()
declare -A RATE_SEEN=()
declare -A PAIR_PREFILL=()

# Empties both queues: bench_jobs, and every pgq table but pgq.queues,
# pgq.grants and pgq.segment_rings (which the extension's script fills: the
# rings' positions). The extension's schema is still moving, so its tables
# are not named here.
PGQ_TABLES=""
reset_queues() {
  if [[ -z "$PGQ_TABLES" ]]; then
    PGQ_TABLES=$(sql "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ')
                        FROM pg_tables WHERE schemaname = 'pgq' AND tablename NOT IN ('queues', 'grants', 'segment_rings')")
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

# pgbench SCRIPT SYNC CLIENTS [pgbench args...]; sets PB_RC, PB_TPS, PB_XACTS, PB_LAT
run_pgbench() {
  local script="$1" sync="$2" clients="$3"; shift 3
  local threads=$((clients < 2 ? clients : 2)) out
  PB_RC=0
  out=$(PGOPTIONS="-c synchronous_commit=$sync$ROLE_OPTION" \
        "$PG_BIN/pgbench" -n -M prepared -r -c "$clients" -j "$threads" -T "$DURATION" \
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

record() {  # workload n sync clients system rep tps xacts jobs prefill lat rc
  echo "$*,$(cut -d' ' -f1 /proc/loadavg),$(( $(date +%s) - START_TS ))" | tr ' ' ',' >>"$OUT_CSV"
  printf '  %-13s %-8s c=%-2s %-9s run %s: %10.1f tps  %8s jobs  lat %s ms\n' \
    "$1" "sync=$3" "$4" "$5" "$6" "$7" "$9" "${11}" >&2
}

# one_run WORKLOAD SYNC SYSTEM CLIENTS REP
one_run() {
  local workload="$1" sync="$2" system="$3" clients="$4" rep="$5"
  local script n=1 jobs=0 prefill_n=0 tries=0 pending extra=()
  case "$workload/$system" in
    ceiling/select1)     script=ceiling_select1.sql ;;
    ceiling/update)      script=ceiling_update.sql ;;
    enqueue/baseline)    script=base_enqueue.sql ;;
    enqueue/pgq)         script=pgq_enqueue.sql ;;
    enqueue_many/*)      script=${system/baseline/base}_enqueue_many.sql; n=100 ;;
    enqueue_series/baseline) script=base_enqueue_series.sql; n=100 ;;
    enqueue_series/pgq)  script=pgq_enqueue_many.sql; n=100 ;;
    claim1/baseline)     script=base_claim1.sql ;;
    claim1/pgq)          script=pgq_claim1.sql ;;
    claim*/baseline)     n=${workload#claim}; script=base_claim$n.sql ;;
    claim*/pgq)          script=$CLAIMN_PGQ; n=${workload#claim} ;;
    halving*/baseline)   n=${workload#halving}; script=base_halving$n.sql ;;
    halving*/pgq)        n=${workload#halving}; script=$HALVING_PGQ ;;
    *) echo "unknown workload $workload/$system" >&2; exit 2 ;;
  esac
  # The halving scripts complete the batch claimed by the client's previous
  # transaction: nothing in the first one.
  [[ $workload == halving* ]] && extra=(-D "ids={}" -D "attempts={}")
  local key="$workload/$sync"

  while :; do
    case "$workload" in
      ceiling)
        sql "VACUUM ceiling"
        ;;
      enqueue*)
        reset_queues
        sql "VACUUM ANALYZE bench_jobs" ; sql "VACUUM ANALYZE pgq.job_rows"
        ;;
      claim*|halving*)
        reset_queues
        if ((prefill_n == 0)); then
          # Baseline and pgq of one round start from the same queue size.
          if [[ -z "${PAIR_PREFILL[$key/$clients/$rep]:-}" ]]; then
            local guess=${RATE_GUESS[$n]}
            [[ $sync == off ]] && guess=$((guess * 2))
            local est=${RATE_SEEN[$key/$clients]:-${RATE_MAX[$key]:-$guess}}
            PAIR_PREFILL[$key/$clients/$rep]=$(( (est * DURATION * 13 / 10 / 1000 + 1) * 1000 ))
          fi
          prefill_n=${PAIR_PREFILL[$key/$clients/$rep]}
        fi
        prefill "$system" "$prefill_n"
        if [[ $system == pgq ]]; then sql "VACUUM ANALYZE pgq.job_rows"; else sql "VACUUM ANALYZE bench_jobs"; fi
        ;;
    esac
    sql "CHECKPOINT"

    run_pgbench "$script" "$sync" "$clients" -D "n=$n" "${extra[@]}"

    case "$workload/$system" in
      ceiling/*)       jobs=$PB_XACTS ;;
      enqueue*/pgq)    jobs=$(sql "SELECT count(*) FROM pgq.jobs") ;;
      enqueue*/*)      jobs=$(sql "SELECT count(*) FROM bench_jobs") ;;
      */pgq)           jobs=$(sql "SELECT $prefill_n - count(*) FROM pgq.jobs")
                       pending=$(sql "SELECT count(*) FROM pgq.jobs WHERE state = 'p'") ;;
      */*)             jobs=$(sql "SELECT $prefill_n - count(*) FROM bench_jobs")
                       pending=$(sql "SELECT count(*) FROM bench_jobs WHERE status = 'pending'") ;;
    esac
    if [[ $workload == claim* || $workload == halving* ]]; then
      local rate=$((jobs / DURATION))
      ((rate > ${RATE_MAX[$key]:-0})) && RATE_MAX[$key]=$rate
      ((rate > ${RATE_SEEN[$key/$clients]:-0})) && RATE_SEEN[$key/$clients]=$rate
      if ((PB_RC != 0 || pending == 0)) && ((tries < 3)); then
        tries=$((tries + 1))
        say "  $workload sync=$sync $system c=$clients ran dry or failed (prefill $prefill_n, rc $PB_RC): redoing with twice the prefill"
        prefill_n=$((prefill_n * 2))
        PAIR_PREFILL[$key/$clients/$rep]=$prefill_n
        continue
      fi
    fi
    break
  done
  record "$workload" "$n" "$sync" "$clients" "$system" "$rep" "$PB_TPS" "$PB_XACTS" "$jobs" "$prefill_n" "$PB_LAT" "$PB_RC"
}

# --- the plan ---------------------------------------------------------------

echo "workload,n,sync,clients,system,run,tps,xacts,jobs,prefill,stmt_latency_ms,rc,load1,elapsed_s" >"$OUT_CSV"
# Other PostgreSQL servers on the machine (tests being run, say) compete for
# the same 2 cores; name them in the report.
other_servers() { ps -eo args= | awk '$1 ~ /bin\/postgres$/ && $0 !~ "'"$PGDIR"'/data" {for (i = 2; i <= NF; i++) if ($i == "-D") print $(i + 1)}' | sort -u | paste -sd' ' -; }
OTHERS_BEFORE=$(other_servers)
LOAD_BEFORE=$(uptime)
START_TS=$(date +%s)
say "DURATION=$DURATION s, RUNS=$RUNS, clients: $CLIENTS, synchronous_commit: $SYNC, workloads: $WORKLOADS"
for workload in $WORKLOADS; do
  if [[ $workload == ceiling ]]; then systems=(select1 update); else systems=(baseline pgq); fi
  for sync in $SYNC; do
    for clients in $CLIENTS; do
      say "$workload, synchronous_commit=$sync, $clients client(s)"
      for rep in $(seq 1 "$RUNS"); do
        for system in "${systems[@]}"; do
          one_run "$workload" "$sync" "$system" "$clients" "$rep"
        done
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
  echo "- command: \`DURATION=$DURATION RUNS=$RUNS CLIENTS=\"$CLIENTS\" SYNC=\"$SYNC\" WORKLOADS=\"$WORKLOADS\"$([[ -n $BENCH_ROLE ]] && echo " BENCH_ROLE=$BENCH_ROLE")$([[ $NO_INSTALL == 1 ]] && echo ' NO_INSTALL=1') bash bench/run.sh\`"
  echo "- machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, $(uname -sr)"
  echo "- PostgreSQL: $PG_SERVER_VERSION"
  echo "- pgq_cpp measured: $GIT_AT_START, $SO_AT_START (loaded when the cluster started)"
  [[ -n $KEEP_COMPLETED ]] && echo "- the bench queue keeps completed jobs for $KEEP_COMPLETED (keep_completed: history on)"
  [[ "$SO_AT_END" != "$SO_AT_START" ]] && echo "- note: the extension was reinstalled during the run (now: $SO_AT_END); the running server kept the build it started with"
  echo "- cluster settings: $(IFS=';'; echo "${CLUSTER_CONF[*]}" | sed 's/;/, /g'); per pgbench run: PGOPTIONS='-c synchronous_commit=<sync>'"
  echo "- load before: \`${LOAD_BEFORE## }\`"
  echo "- load after: \`${LOAD_AFTER## }\`"
  echo "- other PostgreSQL servers running: at start: ${OTHERS_BEFORE:-none}; at end: ${OTHERS_AFTER:-none}"
  [[ -n "$COMPLETE_MANY_NOTE" ]] && echo "- **note**: $COMPLETE_MANY_NOTE"
  echo
  python3 "$BENCH_HOME/report.py" "$OUT_CSV"
} >"$OUT_MD"

cat "$OUT_MD"
say "written to $OUT_MD (every run: $OUT_CSV)"
