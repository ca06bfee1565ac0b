#!/usr/bin/env bash
# Streams (issue 21): pgq_cpp's streams against Skytools PgQ 3.5 (Debian's
# postgresql-15-pgq3) and against the plain-SQL baseline queue
# (bench/baseline.sql), side by side in ONE throwaway durable cluster.
#
#   bash bench/streams.sh
#   SYSTEMS="baseline skytools" DURATION=2 RUNS=1 HOLD_SECONDS=10 NO_INSTALL=1 \
#     OUT_MD=/tmp/streams-smoke.md bash bench/streams.sh        smoke test
#
# Databases of the cluster (port 55900, data in /tmp/bench_streams): `bench`
# has pgq_cpp (CREATE EXTENSION pgq_cpp: its streams, and its queue for the
# wal comparison) and the baseline's table bench_jobs; `skytools` has
# Skytools PgQ (CREATE EXTENSION pgq). Both extensions live in a schema named
# pgq, so they cannot share a database. pgq_cpp's background workers run in
# `bench` only (pgq.databases). Every system uses a queue/stream named
# 'bench', a consumer named 'c' and the payload '{"k":1}' (jsonb for pgq_cpp
# and the baseline, text for PgQ, whose ev_data is text).
#
# Workloads (pgbench scripts in bench/sql/; "events/s" is what is reported):
#   append1    one event per transaction, CLIENTS clients, -T DURATION.
#              baseline: base_enqueue.sql (INSERT ... VALUES); skytools:
#              skytools_append1.sql (pgq.insert_event); stream:
#              stream_append1.sql (pgq.append). events/s = TPS.
#   append100  100 events per transaction. baseline: base_enqueue_many.sql
#              (INSERT of an unnest of 100); skytools: skytools_append100.sql
#              (ONE statement calling pgq.insert_event 100 times over
#              generate_series: PgQ has no batch insert); stream:
#              stream_append100.sql (pgq.append_many of 100). events/s = 100 x TPS.
#              No consumer is registered and no ticker runs during appends.
#   read100, read1000  one consumer (1 client) reads a backlog of READ_EVENTS
#              events in batches of N and finishes each; pgbench -t
#              READ_EVENTS/N. The backlog is made with one transaction per N
#              events for both stream systems (bench_stream_prefill,
#              bench_sky_prefill); for PgQ each such transaction is followed
#              by a tick (ticker_max_count set to 1 while filling), so every
#              batch next_batch hands out holds exactly N events.
#              stream: stream_read.sql (next_batch(max_events => N), then
#              finish_batch); skytools: skytools_read.sql (next_batch,
#              get_batch_events, finish_batch); baseline: claim N + delete
#              (base_claim100.sql, stream_base_claim1000.sql). Events are
#              counted in the server, not shipped. VACUUM ANALYZE after the
#              fill, for all. events/s = (READ_EVENTS - events left after the
#              run) / pgbench's time (transactions / TPS); what is left is
#              then consumed by psql (a check that every event was there).
#   (append and read: RUNS rounds of baseline, skytools, stream in turn, per
#   synchronous_commit setting in SYNC and client count; autovacuum off,
#   VACUUM ANALYZE and CHECKPOINT before every run; queue/stream dropped and
#   created afresh for every run.)
#   drain      deep churning drain, synchronous_commit = off, autovacuum on:
#              DRAIN_BACKLOG events are filled (as for read, 1,000 per
#              transaction, PgQ ticked after each; the baseline: one INSERT),
#              ANALYZEd, then at t = 0 start at once: 2 unthrottled producers
#              appending DRAIN_PRODUCE events in all (one per transaction,
#              the append1 scripts, pgbench -t) and the consumer(s).
#              stream: 1 consumer, stream_read.sql with max_events 1000 and
#              wait 1 s; skytools: 1 consumer, skytools_read.sql (10 ms
#              sleep when there is no batch) and a ticker calling pgq.ticker()
#              every SKY_DRAIN_TICK_MS ms with ticker_max_count = 1000 (so a
#              batch holds ~1,000 events) and ticker_max_lag =
#              SKY_DRAIN_MAX_LAG (the last, partial tick after the producers
#              stop waits at most that long); baseline: as bench/drain.sh's
#              baseline, DRAIN_BASE_CONSUMERS (4) consumers claiming and
#              deleting one job at a time (drain_base.sql, batch 1).
#              Drain time = from t = 0 until every event appended (backlog +
#              DRAIN_PRODUCE) has been consumed: the producers are done
#              and (baseline) bench_jobs is empty, (skytools) no event is
#              outside the snapshot of consumer c's last finished tick
#              (bench_sky_unfinished()), (stream) pgq.stream_stats'
#              finished_events for c reached the total. Polled every 0.25 s.
#              events/s drained = (backlog + produced) / drain time. Also
#              reported: when the producers were done, and when the consumer
#              had consumed as many events as the backlog held (consumed =
#              appended since the fill began - not consumed yet; stream:
#              finished_events): with a fast consumer the drain time is the
#              producers' time, and this second figure shows the consumer.
#   latency    a paced producer (pgbench -R LAT_RATE, one event per
#              transaction, LAT_RATE x LAT_SECONDS events) with the payload
#              {"t": clock_timestamp() at append}; a consumer
#              (bench/stream_latency.py) takes now - t when its statement
#              returns the event: p50/p99/max. stream: next_batch(..., wait
#              => '1 s') in a loop; skytools: PgQ's defaults (ticker every
#              1 s as pgqd's ticker_period, ticker_max_count 500,
#              ticker_max_lag 3 s), the consumer asking every LAT_SKY_POLL_MS
#              (100) ms; skytools-fast: ticker every 10 ms with
#              ticker_max_lag 10 ms, consumer asking every 10 ms.
#              synchronous_commit on.
#   size       the three systems at once (one round): a paced producer
#              (SIZE_RATE events/s each, one per transaction) and a consumer
#              keeping up (stream: stream_read.sql, wait 1 s; skytools:
#              skytools_read.sql, 100 ms sleep when idle, ticker every 1 s;
#              baseline: stream_base_poll.sql, claim up to 100 + delete, 100
#              ms sleep when idle), rotation every SIZE_ROTATION s (stream:
#              create_stream(rotation => ...), pgq.maintenance_interval 1 s;
#              skytools: queue_rotation_period, and
#              pgq.maint_rotate_tables_step1/step2 called every 1 s),
#              autovacuum on. SIZE_STEADY s steady (the first SIZE_WARMUP s
#              not counted), then HOLD_SECONDS with a held xmin (in each
#              database a session BEGIN ISOLATION LEVEL REPEATABLE READ;
#              SELECT txid_current(); held), then SIZE_RECOVER s after its
#              release. Sampled every SIZE_SAMPLE s: pg_total_relation_size
#              summed over the event tables (stream: every pgq.stream_events%
#              table; skytools: pgq.event_%; baseline: bench_jobs) and the
#              events appended (from each system's id sequence). Growth per
#              1,000 events = the least-squares slope of size against events
#              appended, x 1,000 (the rotation's sawtooth averages out), over
#              the steady window and over the hold (from the last steady
#              sample on).
#   wal        WAL bytes per event (pg_current_wal_lsn before and after, one
#              client, synchronous_commit on, autovacuum off, a CHECKPOINT
#              before each system's three phases): WAL_EVENTS events one per
#              transaction; WAL_EVENTS 100 per transaction; then consuming
#              all of them in batches of 100. stream: the append and read
#              scripts above; skytools: skytools_wal_append1/100.sql, which
#              also make a tick every 100 events (the ticker's WAL counts to
#              the appends), then skytools_read.sql; baseline:
#              base_enqueue.sql, base_enqueue_many.sql, base_claim100.sql;
#              queue (pgq_cpp's job queue, always measured): pgq_enqueue.sql,
#              pgq_enqueue_many.sql, pgq_claimN.sql with n = 100 (claim +
#              complete_many). The WAL written by an idle cluster (pgq_cpp's
#              maintenance worker) over 5 s is reported beside.
#
# Environment:
#   DURATION   seconds per append run (default 5)
#   RUNS       rounds of append/read/drain/latency (default 3); medians reported
#   CLIENTS    client counts of the append workloads (default "1 4")
#   SYNC       synchronous_commit settings of the append and read workloads
#              (default "on off")
#   SYSTEMS    subset of: baseline skytools stream (default: all three). The
#              stream parts need pgq_cpp 2.0's streams installed; without
#              them, run SYSTEMS="baseline skytools".
#   WORKLOADS  subset of: append1 append100 read100 read1000 drain latency
#              size wal (default: all)
#   READ_EVENTS (200000), DRAIN_BACKLOG (200000), DRAIN_PRODUCE (100000),
#   DRAIN_BASE_CONSUMERS (4), DRAIN_MAX (600 s), SKY_DRAIN_TICK_MS (10),
#   SKY_DRAIN_MAX_LAG ('100 ms'), LAT_RATE (200), LAT_SECONDS (20),
#   LAT_SKY_POLL_MS (100), SIZE_RATE (200), SIZE_ROTATION (10 s), SIZE_STEADY
#   (90 s), SIZE_WARMUP (30 s), HOLD_SECONDS (300), SIZE_RECOVER (40 s),
#   SIZE_SAMPLE (2 s), WAL_EVENTS (10000)
#   NO_INSTALL 1: do not build and install the tree; measure the pgq_cpp
#              already installed
#   OUT_MD     the report (default bench/results-issue21-streams.md); every run
#              goes to OUT_RAW (default: OUT_MD with -runs.txt for .md)
#
# Wall time of the full default run on this 2-core machine when it is quiet:
# about 34 minutes. append1 + append100: 2 workloads x 2 sync x 2 client
# counts x 3 runs x 3 systems = 72 runs x ~6.5 s (5 s + reset, VACUUM,
# CHECKPOINT) = ~8 min; read100 + read1000: 2 x 2 sync x 3 runs x 3 systems
# = 36 runs x ~10 s (fill of 200,000 events, VACUUM ANALYZE, the read) = ~6
# min; drain: 3 runs x (baseline ~115 s at bench/drain.sh's ~2,700 jobs/s,
# each stream system ~15 s, producer-bound) = ~7.5 min; latency: 3 runs x 3
# variants x ~25 s = ~4 min; size: 90 + 300 + 40 s = ~7 min; wal: ~1 min.
# The baseline's drain and every fsync-bound run stretch with the machine's
# load: the smoke runs, with other sessions' clusters busy beside (load
# 5-11), took ~2x these times per run (the baseline drained ~1,000-1,400
# events/s). The report's last line gives the wall time of each workload.
#
# Smoke runs (2026-12-04, this script as it is):
#   SYSTEMS="baseline skytools" WORKLOADS="append1 append100 read100 read1000 latency wal" \
#     DURATION=2 RUNS=1 HOLD_SECONDS=10 READ_EVENTS=50000 LAT_SECONDS=10 NO_INSTALL=1   4 min
#   SYSTEMS="baseline skytools" WORKLOADS="drain size" DURATION=2 RUNS=1 HOLD_SECONDS=10 \
#     DRAIN_BACKLOG=50000 DRAIN_PRODUCE=20000 SIZE_STEADY=40 SIZE_WARMUP=20 SIZE_RECOVER=30 NO_INSTALL=1   2.5 min

source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

DURATION="${DURATION:-5}"
RUNS="${RUNS:-3}"
CLIENTS="${CLIENTS:-1 4}"
SYNC="${SYNC:-on off}"
SYSTEMS="${SYSTEMS:-baseline skytools stream}"
WORKLOADS="${WORKLOADS:-append1 append100 read100 read1000 drain latency size wal}"
READ_EVENTS="${READ_EVENTS:-200000}"
DRAIN_BACKLOG="${DRAIN_BACKLOG:-200000}"
DRAIN_PRODUCE="${DRAIN_PRODUCE:-100000}"
DRAIN_BASE_CONSUMERS="${DRAIN_BASE_CONSUMERS:-4}"
DRAIN_MAX="${DRAIN_MAX:-600}"
SKY_DRAIN_TICK_MS="${SKY_DRAIN_TICK_MS:-10}"
SKY_DRAIN_MAX_LAG="${SKY_DRAIN_MAX_LAG:-100 ms}"
LAT_RATE="${LAT_RATE:-200}"
LAT_SECONDS="${LAT_SECONDS:-20}"
LAT_SKY_POLL_MS="${LAT_SKY_POLL_MS:-100}"
SIZE_RATE="${SIZE_RATE:-200}"
SIZE_ROTATION="${SIZE_ROTATION:-10}"
SIZE_STEADY="${SIZE_STEADY:-90}"
SIZE_WARMUP="${SIZE_WARMUP:-30}"
HOLD_SECONDS="${HOLD_SECONDS:-300}"
SIZE_RECOVER="${SIZE_RECOVER:-40}"
SIZE_SAMPLE="${SIZE_SAMPLE:-2}"
WAL_EVENTS="${WAL_EVENTS:-10000}"
NO_INSTALL="${NO_INSTALL:-0}"

BENCH_HOME="$PGQ_ROOT/bench"
SCRIPTS="$BENCH_HOME/sql"
PGDIR=/tmp/bench_streams
PORT=55900
OUT_MD="${OUT_MD:-$BENCH_HOME/results-issue21-streams.md}"
OUT_RAW="${OUT_RAW:-${OUT_MD%.md}-runs.txt}"
SKYTOOLS_PACKAGE="postgresql-${PG_VERSION}-pgq3"
PY=/usr/bin/python3   # Debian's, with python3-psycopg (not a pyenv shim's)

# --- arguments ----------------------------------------------------------------

for v in DURATION RUNS READ_EVENTS DRAIN_BACKLOG DRAIN_PRODUCE DRAIN_BASE_CONSUMERS DRAIN_MAX \
         SKY_DRAIN_TICK_MS LAT_RATE LAT_SECONDS LAT_SKY_POLL_MS SIZE_RATE SIZE_ROTATION SIZE_STEADY \
         HOLD_SECONDS SIZE_RECOVER SIZE_SAMPLE WAL_EVENTS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a positive integer" >&2; exit 2; }
done
{ [[ $SIZE_WARMUP =~ ^[0-9]+$ ]] && ((SIZE_WARMUP < SIZE_STEADY)); } || { echo "SIZE_WARMUP must be below SIZE_STEADY" >&2; exit 2; }
[[ $SKY_DRAIN_MAX_LAG =~ ^[0-9.]+\ ?[a-z]*$ ]] || { echo "SKY_DRAIN_MAX_LAG must be an interval like '100 ms'" >&2; exit 2; }
((READ_EVENTS % 1000 == 0)) || { echo "READ_EVENTS must be a multiple of 1000" >&2; exit 2; }
((DRAIN_PRODUCE % 2 == 0)) || { echo "DRAIN_PRODUCE must be even (2 producers)" >&2; exit 2; }
((WAL_EVENTS % 100 == 0)) || { echo "WAL_EVENTS must be a multiple of 100" >&2; exit 2; }
for s in $SYNC; do [[ $s == on || $s == off ]] || { echo "SYNC: on or off (got '$s')" >&2; exit 2; }; done
for c in $CLIENTS; do [[ $c =~ ^[1-9][0-9]*$ ]] || { echo "CLIENTS: positive integers (got '$c')" >&2; exit 2; }; done
for s in $SYSTEMS; do [[ $s =~ ^(baseline|skytools|stream)$ ]] || { echo "unknown system '$s'" >&2; exit 2; }; done
for w in $WORKLOADS; do
  [[ $w =~ ^(append1|append100|read100|read1000|drain|latency|size|wal)$ ]] || { echo "unknown workload '$w'" >&2; exit 2; }
done
has() { [[ " $SYSTEMS " == *" $1 "* ]]; }

# --- install ------------------------------------------------------------------

# Skytools PgQ from Debian, as scripts/lib.sh installs the project's packages.
ensure_skytools() {
  dpkg-query -W -f='${Status}' "$SKYTOOLS_PACKAGE" 2>/dev/null | grep -q "install ok installed" && return 0
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing package: $SKYTOOLS_PACKAGE (run as root, or install it first)" >&2
    exit 1
  fi
  say "installing $SKYTOOLS_PACKAGE"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "$SKYTOOLS_PACKAGE" >/dev/null
}

bench_install
ensure_skytools

# --- the cluster --------------------------------------------------------------

PSQL=("$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PGDIR" -p "$PORT" -U postgres)
bsql() { "${PSQL[@]}" -d bench -c "$1"; }
ssql() { "${PSQL[@]}" -d skytools -c "$1"; }
dbof() { if [[ $1 == skytools ]]; then echo skytools; else echo bench; fi; }
xsql() { "${PSQL[@]}" -d "$(dbof "$1")" -c "$2"; }

BG_PIDS=()
cleanup() {
  local p
  for p in "${BG_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  stop_cluster "$PGDIR"
  if [[ -n ${WORK:-} ]]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT
WORK=$(mktemp -d /tmp/bench_streams_work.XXXXXX)

CLUSTER_CONF=(
  "${BENCH_DURABLE_CONF[@]}"
  "autovacuum = off"
  "pgq.databases = 'bench'"
  "pgq.maintenance_interval = '1s'"
)

stop_cluster "$PGDIR"
rm -rf "$PGDIR"
SO_FILE="$("$PG_CONFIG" --pkglibdir)/pgq_cpp.so"
SO_AT_START="installed pgq_cpp.so $(date -u -r "$SO_FILE" '+%Y-%m-%d %H:%M:%S UTC'), md5 $(md5sum "$SO_FILE" | cut -c1-12)"
GIT_AT_START="git $(git -C "$PGQ_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$PGQ_ROOT" diff --quiet HEAD -- src sql 2>/dev/null || echo ' (working tree modified)')"
[[ $NO_INSTALL == 1 ]] && GIT_AT_START="$GIT_AT_START (NO_INSTALL=1: the installed build, which may not be this tree)"
say "starting the cluster in $PGDIR (port $PORT): databases bench (pgq_cpp, baseline) and skytools (PgQ)"
start_cluster "$PGDIR" "$PORT" "${CLUSTER_CONF[@]}"
"$PG_BIN/createdb" -h "$PGDIR" -p "$PORT" -U postgres bench
"$PG_BIN/createdb" -h "$PGDIR" -p "$PORT" -U postgres skytools
bsql "CREATE EXTENSION pgq_cpp"
bsql "SELECT pgq.create_queue('bench')" >/dev/null
"${PSQL[@]}" -d bench -f "$BENCH_HOME/baseline.sql"
ssql "CREATE EXTENSION pgq"
"${PSQL[@]}" -d skytools -f "$BENCH_HOME/streams_skytools.sql"
PGQ_CPP_VERSION=$(bsql "SELECT extversion FROM pg_extension WHERE extname = 'pgq_cpp'")
SKYTOOLS_VERSION=$(ssql "SELECT pgq.version()")

# The streams API this script calls: all of it, or no stream system.
STREAM_FUNCS=(
  "pgq.create_stream(text,interval,boolean)" "pgq.drop_stream(text,boolean)"
  "pgq.append(text,jsonb)" "pgq.append_many(text,jsonb[])"
  "pgq.register_consumer(text,text)" "pgq.next_batch(text,text,integer,interval)"
  "pgq.finish_batch(bigint)" "pgq.stream_consumer_stats()"
)
missing_funcs=()
for f in "${STREAM_FUNCS[@]}"; do
  [[ $(bsql "SELECT to_regprocedure('$f') IS NOT NULL") == t ]] || missing_funcs+=("$f")
done
if has stream; then
  if ((${#missing_funcs[@]} > 0)); then
    echo "pgq_cpp $PGQ_CPP_VERSION installed here has no streams (missing: ${missing_funcs[*]})." >&2
    echo "Install a build with them (run without NO_INSTALL=1), or measure the others: SYSTEMS=\"baseline skytools\"." >&2
    exit 2
  fi
  "${PSQL[@]}" -d bench -f "$BENCH_HOME/streams_stream.sql"
fi

# Each SYNC setting reaches the sessions through PGOPTIONS: check it does.
for s in $SYNC off; do
  got=$(PGOPTIONS="-c synchronous_commit=$s" bsql "SHOW synchronous_commit")
  [[ $got == "$s" ]] || { echo "PGOPTIONS did not set synchronous_commit=$s (got '$got')" >&2; exit 1; }
done

set_autovacuum() {  # on|off, for the whole cluster
  bsql "ALTER SYSTEM SET autovacuum = $1" && bsql "SELECT pg_reload_conf()" >/dev/null
}

# --- systems: reset, fill, count ------------------------------------------------

# reset SYSTEM [consumer] [rotation seconds]: an empty queue/stream 'bench'
# (dropped and created afresh), with consumer 'c' registered if asked.
# PgQ's queue gets the default ticker settings (max_count 500, max_lag 3 s).
reset_system() {
  local system="$1" consumer="${2:-}" rotation="${3:-}"
  case $system in
    baseline)
      bsql "TRUNCATE bench_jobs"
      ;;
    skytools)
      ssql "SELECT pgq.drop_queue('bench', true) FROM pgq.queue WHERE queue_name = 'bench'" >/dev/null
      ssql "SELECT pgq.create_queue('bench')" >/dev/null
      [[ -n $rotation ]] && ssql "SELECT pgq.set_queue_config('bench', 'rotation_period', '$rotation seconds')" >/dev/null
      [[ -n $consumer ]] && ssql "SELECT pgq.register_consumer('bench', 'c')" >/dev/null
      ;;
    stream)
      bsql "SELECT pgq.drop_stream('bench', if_exists => true)" >/dev/null
      if [[ -n $rotation ]]; then
        bsql "SELECT pgq.create_stream('bench', rotation => '$rotation seconds')" >/dev/null
      else
        bsql "SELECT pgq.create_stream('bench')" >/dev/null
      fi
      [[ -n $consumer ]] && bsql "SELECT pgq.register_consumer('bench', 'c')" >/dev/null
      ;;
  esac
  return 0
}

sky_config() {  # max_count max_lag
  ssql "SELECT pgq.set_queue_config('bench', 'ticker_max_count', '$1'),
               pgq.set_queue_config('bench', 'ticker_max_lag', '$2')" >/dev/null
}

# fill SYSTEM EVENTS PER_TX: a backlog for consumer 'c' (registered before).
fill() {
  local system="$1" events="$2" per="$3"
  case $system in
    baseline)
      bsql "INSERT INTO bench_jobs (queue, payload) SELECT 'bench', '{\"k\":1}'::jsonb FROM generate_series(1, $events)"
      ;;
    skytools)
      sky_config 1 '3 seconds'
      ssql "CALL bench_sky_prefill($events, $per)"
      sky_config 500 '3 seconds'
      ;;
    stream)
      bsql "CALL bench_stream_prefill($events, $per)"
      ;;
  esac
}

# Events not consumed yet by 'c' (not consuming them).
unfinished() {
  case $1 in
    baseline) bsql "SELECT count(*) FROM bench_jobs" ;;
    skytools) ssql "SELECT bench_sky_unfinished()" ;;
  esac
}

# Stream: events consumer c has finished so far.
stream_finished() {
  bsql "SELECT coalesce(sum(finished_events), 0) FROM pgq.stream_stats WHERE stream = 'bench' AND consumer = 'c'"
}

# Consumes (stream, skytools) or counts (baseline) what consumer c has left:
# prints how many events that was.
consume_rest() {
  local system="$1" total=0 got batch
  case $system in
    baseline) unfinished baseline; return ;;
    skytools)
      while :; do
        batch=$(ssql "SELECT coalesce(pgq.next_batch('bench', 'c'), 0)")
        ((batch > 0)) || break
        got=$(ssql "SELECT count(*) FROM pgq.get_batch_events($batch)")
        ssql "SELECT pgq.finish_batch($batch)" >/dev/null
        total=$((total + got))
      done
      # Events after the last tick have no batch yet.
      total=$((total + $(unfinished skytools)))
      ;;
    stream)
      while :; do
        IFS='|' read -r got batch < <(bsql "SELECT count(*), coalesce(max(batch_id), 0) FROM pgq.next_batch('bench', 'c', 10000)")
        ((got > 0)) || break
        bsql "SELECT pgq.finish_batch($batch)" >/dev/null
        total=$((total + got))
      done
      ;;
  esac
  echo "$total"
}

# Appended so far (for deltas): each system's id sequence.
appended() {
  case $1 in
    baseline) bsql "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM bench_jobs_id_seq" ;;
    skytools) ssql "SELECT coalesce((SELECT pgq.seq_getval(queue_event_seq) FROM pgq.queue WHERE queue_name = 'bench'), 0)" ;;
    stream)   bsql "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM pgq.stream_event_id_seq" ;;
  esac
}

# Bytes of the event tables, indexes and TOAST included.
event_bytes() {
  case $1 in
    baseline) bsql "SELECT pg_total_relation_size('bench_jobs')" ;;
    skytools) ssql "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
                      JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = 'pgq' AND c.relkind = 'r' AND c.relname LIKE 'event\\_%'
                       AND c.relname <> 'event_template'" ;;
    stream)   bsql "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
                      JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = 'pgq' AND c.relkind = 'r' AND c.relname LIKE 'stream\\_events%'" ;;
  esac
}

vacuum_db() { xsql "$1" "VACUUM ANALYZE" && xsql "$1" "CHECKPOINT"; }

# --- pgbench --------------------------------------------------------------------

# run_pgbench SYSTEM SCRIPT SYNC CLIENTS pgbench-args...: sets PB_RC, PB_TPS, PB_XACTS
run_pgbench() {
  local system="$1" script="$2" sync="$3" clients="$4"; shift 4
  local threads=$((clients < 2 ? clients : 2)) out
  PB_RC=0
  out=$(PGOPTIONS="-c synchronous_commit=$sync" \
        "$PG_BIN/pgbench" -n -M prepared -c "$clients" -j "$threads" \
          -h "$PGDIR" -p "$PORT" -U postgres -f "$SCRIPTS/$script" "$@" "$(dbof "$system")" 2>&1) || PB_RC=$?
  PB_TPS=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out" | head -1)
  PB_XACTS=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out" | head -1)
  if ((PB_RC != 0)) || [[ -z "$PB_TPS" ]]; then
    echo "pgbench $script ($system) failed (rc $PB_RC):" >&2
    grep -m5 -iE 'error|abort|fatal' <<<"$out" >&2 || tail -5 <<<"$out" >&2
    PB_TPS=${PB_TPS:-0}; PB_XACTS=${PB_XACTS:-0}
    ((PB_RC != 0)) || PB_RC=1
  fi
}

# bg_pgbench OUT SYSTEM SYNC pgbench-args...: pgbench in the background;
# its PID in BG_PID (and BG_PIDS, for the cleanup).
bg_pgbench() {
  local out="$1" system="$2" sync="$3"; shift 3
  PGOPTIONS="-c synchronous_commit=$sync" "$PG_BIN/pgbench" -n -M prepared \
    -h "$PGDIR" -p "$PORT" -U postgres "$@" "$(dbof "$system")" >"$out" 2>&1 &
  BG_PID=$!
  BG_PIDS+=("$BG_PID")
}

# forget PID: a background process of ours that has been reaped, so the
# cleanup never signals its PID (which the system may have given to another).
forget() {
  local keep=() p
  for p in "${BG_PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  BG_PIDS=("${keep[@]}")
}

# stop_bg PID: SIGTERM (a -T run ends early), then reap it.
stop_bg() { kill -TERM "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; forget "$1"; }

record() { echo "$*" >>"$OUT_RAW"; }
fnum() { awk -v x="$1" 'BEGIN { printf "%.0f", x }'; }

# --- workloads --------------------------------------------------------------------

declare -A APPEND1=([baseline]=base_enqueue.sql [skytools]=skytools_append1.sql [stream]=stream_append1.sql)
declare -A APPEND100=([baseline]=base_enqueue_many.sql [skytools]=skytools_append100.sql [stream]=stream_append100.sql)

append_run() {  # workload system sync clients rep
  local workload="$1" system="$2" sync="$3" clients="$4" rep="$5" n script rate
  if [[ $workload == append1 ]]; then n=1; script=${APPEND1[$system]}; else n=100; script=${APPEND100[$system]}; fi
  reset_system "$system"
  vacuum_db "$system"
  run_pgbench "$system" "$script" "$sync" "$clients" -T "$DURATION"
  rate=$(fnum "$(awk -v t="$PB_TPS" -v n="$n" 'BEGIN { print t * n }')")
  record tput "$workload" "$n" "$sync" "$clients" "$system" "$rep" "$PB_TPS" "$PB_XACTS" "$rate" "$PB_RC"
  printf '  %-9s sync=%-3s c=%-2s %-8s run %s: %9s events/s (%s tps)\n' "$workload" "$sync" "$clients" "$system" "$rep" "$rate" "$PB_TPS" >&2
}

read_run() {  # n system sync rep
  local n="$1" system="$2" sync="$3" rep="$4" script left secs rate extra=()
  reset_system "$system" consumer
  fill "$system" "$READ_EVENTS" "$n"
  vacuum_db "$system"
  case $system in
    baseline) if ((n == 100)); then script=base_claim100.sql; else script=stream_base_claim1000.sql; fi ;;
    skytools) script=skytools_read.sql; extra=(-D idle_ms=0) ;;
    stream)   script=stream_read.sql; extra=(-D batch="$n" -D wait_s=0) ;;
  esac
  run_pgbench "$system" "$script" "$sync" 1 -t $((READ_EVENTS / n)) "${extra[@]}"
  left=$(consume_rest "$system")
  secs=$(awk -v x="$PB_XACTS" -v t="$PB_TPS" 'BEGIN { printf "%.3f", (t > 0 ? x / t : 0) }')
  rate=$(awk -v e=$((READ_EVENTS - left)) -v s="$secs" 'BEGIN { printf "%.0f", (s > 0 ? e / s : 0) }')
  record tput "read$n" "$n" "$sync" 1 "$system" "$rep" "$PB_TPS" "$PB_XACTS" "$rate" "$PB_RC" "$left"
  printf '  read%-5s sync=%-3s c=1  %-8s run %s: %9s events/s (%s batches in %s s; %s left after the run)\n' \
    "$n" "$sync" "$system" "$rep" "$rate" "$PB_XACTS" "$secs" "$left" >&2
  if [[ $system == baseline && $left -gt 0 ]]; then bsql "TRUNCATE bench_jobs"; fi
}

drain_run() {  # system rep
  local system="$1" rep="$2" total=$((DRAIN_BACKLOG + DRAIN_PRODUCE)) t0 now el prod_secs="" done_=0 cons_pid prod_pid tick_pid=""
  local cons_out="$WORK/drain-cons-$system-$rep" prod_out="$WORK/drain-prod-$system-$rep" next_log=5 left
  reset_system "$system" consumer
  local a0 backlog_secs="" consumed
  a0=$(appended "$system")
  fill "$system" "$DRAIN_BACKLOG" 1000
  [[ $system == skytools ]] && sky_config 1000 "$SKY_DRAIN_MAX_LAG"
  xsql "$system" "ANALYZE"
  xsql "$system" "CHECKPOINT"
  local base_finished=0
  [[ $system == stream ]] && base_finished=$(stream_finished)
  case $system in
    baseline) bg_pgbench "$cons_out" baseline off -c "$DRAIN_BASE_CONSUMERS" -j 2 -T $((DRAIN_MAX + 30)) -D batch=1 -f "$SCRIPTS/drain_base.sql" ;;
    skytools) bg_pgbench "$WORK/drain-tick-$rep" skytools off -c 1 -T $((DRAIN_MAX + 30)) -D period_ms="$SKY_DRAIN_TICK_MS" -f "$SCRIPTS/skytools_ticker.sql"
              tick_pid=$BG_PID
              bg_pgbench "$cons_out" skytools off -c 1 -T $((DRAIN_MAX + 30)) -D idle_ms=10 -f "$SCRIPTS/skytools_read.sql" ;;
    stream)   bg_pgbench "$cons_out" stream off -c 1 -T $((DRAIN_MAX + 30)) -D batch=1000 -D wait_s=1 -f "$SCRIPTS/stream_read.sql" ;;
  esac
  cons_pid=$BG_PID
  t0=$(date +%s.%N)
  bg_pgbench "$prod_out" "$system" off -c 2 -j 2 -t $((DRAIN_PRODUCE / 2)) -f "$SCRIPTS/${APPEND1[$system]}"
  prod_pid=$BG_PID
  while :; do
    sleep 0.25
    now=$(date +%s.%N)
    el=$(awk -v a="$now" -v b="$t0" 'BEGIN { printf "%.2f", a - b }')
    if [[ -z $prod_secs ]] && ! kill -0 "$prod_pid" 2>/dev/null; then
      local rc=0
      wait "$prod_pid" || rc=$?
      forget "$prod_pid"
      ((rc == 0)) || { echo "the producers of $system failed:" >&2; tail -5 "$prod_out" >&2; exit 1; }
      prod_secs=$el
    fi
    if ! kill -0 "$cons_pid" 2>/dev/null; then
      echo "the consumer of $system stopped:" >&2; tail -5 "$cons_out" >&2; exit 1
    fi
    # Consumed so far: (stream) finished_events; (others) appended since the
    # fill began minus not consumed yet (appended read first: a commit in
    # between is counted as not consumed).
    case $system in
      stream) consumed=$(( $(stream_finished) - base_finished )); left=$((total - consumed)) ;;
      *)      consumed=$(appended "$system"); left=$(unfinished "$system"); consumed=$((consumed - a0 - left)) ;;
    esac
    if [[ -z $backlog_secs ]] && ((consumed >= DRAIN_BACKLOG)); then backlog_secs=$el; fi
    if [[ -n $prod_secs ]] && ((left <= 0)); then done_=1; break; fi
    if awk -v e="$el" -v m="$DRAIN_MAX" 'BEGIN { exit !(e >= m) }'; then break; fi
    if awk -v e="$el" -v n="$next_log" 'BEGIN { exit !(e >= n) }'; then
      printf '    %-8s t=%5.1f s  consumed %7s, not consumed yet: %7s%s\n' "$system" "$el" "$consumed" "$left" "${prod_secs:+ (producers done at $prod_secs s)}" >&2
      next_log=$((next_log + 5))
    fi
  done
  stop_bg "$cons_pid"
  [[ -n $tick_pid ]] && stop_bg "$tick_pid"
  if grep -qiE "error|abort" "$cons_out"; then
    echo "the consumer of $system reported errors:" >&2; grep -iE "error|abort" "$cons_out" | head -5 >&2; exit 1
  fi
  ((done_ == 1)) || { echo "drain of $system did not finish within DRAIN_MAX=$DRAIN_MAX s" >&2; exit 1; }
  local rate
  rate=$(awk -v n="$total" -v s="$el" 'BEGIN { printf "%.0f", n / s }')
  record drain "$system" "$rep" "$el" "$total" "$rate" "$prod_secs" "${backlog_secs:-$el}"
  say "drain $system run $rep: $total events in $el s ($rate events/s; producers done at $prod_secs s; $DRAIN_BACKLOG consumed by ${backlog_secs:-$el} s)"
}

latency_run() {  # variant (stream skytools skytools-fast) rep
  local variant="$1" rep="$2" system n=$((LAT_RATE * LAT_SECONDS)) tick_pid="" cons_pid poll=0 res rc=0
  system=${variant%-fast}
  reset_system "$system" consumer
  case $variant in
    skytools)      sky_config 500 '3 seconds'; poll=$LAT_SKY_POLL_MS
                   bg_pgbench "$WORK/lat-tick" skytools on -c 1 -T $((LAT_SECONDS + 60)) -D period_ms=1000 -f "$SCRIPTS/skytools_ticker.sql"
                   tick_pid=$BG_PID ;;
    skytools-fast) sky_config 500 '10 ms'; poll=10
                   bg_pgbench "$WORK/lat-tick" skytools on -c 1 -T $((LAT_SECONDS + 60)) -D period_ms=10 -f "$SCRIPTS/skytools_ticker.sql"
                   tick_pid=$BG_PID ;;
  esac
  rm -f "$WORK/lat-ready"
  "$PY" "$BENCH_HOME/stream_latency.py" --system "$system" --expect "$n" --timeout $((LAT_SECONDS + 30)) \
    --poll-ms "$poll" --ready-file "$WORK/lat-ready" \
    --dsn "host=$PGDIR port=$PORT user=postgres dbname=$(dbof "$system")" >"$WORK/lat-out" 2>"$WORK/lat-err" &
  cons_pid=$!
  BG_PIDS+=("$cons_pid")
  for _ in $(seq 1 100); do [[ -e $WORK/lat-ready ]] && break; sleep 0.1; done
  sleep 1
  run_pgbench "$system" "${system}_latency_append.sql" on 1 -R "$LAT_RATE" -t "$n"
  ((PB_RC == 0)) || exit 1
  wait "$cons_pid" || rc=$?
  forget "$cons_pid"
  [[ -n $tick_pid ]] && stop_bg "$tick_pid"
  res=$(cat "$WORK/lat-out")
  ((rc == 0)) || { echo "the latency consumer of $variant saw fewer than $n events: $res $(cat "$WORK/lat-err")" >&2; exit 1; }
  # shellcheck disable=SC2086  # four numbers
  record lat "$variant" "$rep" $res
  read -r p50 p99 mx cnt <<<"$res"
  printf '  latency %-13s run %s: p50 %8s ms  p99 %8s ms  max %8s ms  (%s events)\n' "$variant" "$rep" "$p50" "$p99" "$mx" "$cnt" >&2
}

size_run() {
  local total=$((SIZE_STEADY + HOLD_SECONDS + SIZE_RECOVER)) system t0 el next=0 phase hold_started=0 pids=() hold_pids=()
  local s pid
  for system in $SYSTEMS; do
    reset_system "$system" consumer "$SIZE_ROTATION"
  done
  for system in $SYSTEMS; do
    case $system in
      baseline) bg_pgbench "$WORK/size-cons-$system" baseline on -c 1 -T "$total" -D idle_ms=100 -f "$SCRIPTS/stream_base_poll.sql" ;;
      skytools) bg_pgbench "$WORK/size-cons-$system" skytools on -c 1 -T "$total" -D idle_ms=100 -f "$SCRIPTS/skytools_read.sql"; pids+=("$BG_PID")
                bg_pgbench "$WORK/size-tick" skytools on -c 1 -T "$total" -D period_ms=1000 -f "$SCRIPTS/skytools_ticker.sql"; pids+=("$BG_PID")
                bg_pgbench "$WORK/size-maint" skytools on -c 1 -T "$total" -D period_ms=1000 -f "$SCRIPTS/skytools_maint.sql" ;;
      stream)   bg_pgbench "$WORK/size-cons-$system" stream on -c 1 -T "$total" -D batch=1000 -D wait_s=1 -f "$SCRIPTS/stream_read.sql" ;;
    esac
    pids+=("$BG_PID")
    bg_pgbench "$WORK/size-prod-$system" "$system" on -c 1 -R "$SIZE_RATE" -T "$total" -f "$SCRIPTS/${APPEND1[$system]}"
    pids+=("$BG_PID")
  done
  t0=$(date +%s)
  say "size: ${SIZE_STEADY} s steady, then ${HOLD_SECONDS} s with a held xmin, then ${SIZE_RECOVER} s after (sampled every ${SIZE_SAMPLE} s)"
  while :; do
    el=$(( $(date +%s) - t0 ))
    # The sample at t = SIZE_STEADY is the steady state's last, taken
    # before the hold starts; the one at SIZE_STEADY + HOLD_SECONDS the hold's.
    if ((el >= next)); then
      if ((hold_started == 0)); then phase=steady; elif ((el <= SIZE_STEADY + HOLD_SECONDS)); then phase=hold; else phase=recover; fi
      for system in $SYSTEMS; do
        record size "$system" "$el" "$phase" "$(event_bytes "$system")" "$(appended "$system")"
      done
      printf '    t=%4s s %-8s %s\n' "$el" "$phase" "$(awk -v t="$el" '$1 == "size" && $3 == t { printf "%s %.0f kB  ", $2, $5 / 1024 }' "$OUT_RAW")" >&2
      next=$((next + SIZE_SAMPLE))
    fi
    if ((hold_started == 0 && el >= SIZE_STEADY)); then
      hold_started=1
      for db in $( (for s in $SYSTEMS; do dbof "$s"; done) | sort -u); do
        "${PSQL[@]}" -d "$db" -c "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT txid_current(); SELECT pg_sleep($HOLD_SECONDS); COMMIT;" \
          >"$WORK/hold-$db" 2>&1 &
        hold_pids+=($!)
        BG_PIDS+=($!)
      done
      say "size: xmin held in $( (for s in $SYSTEMS; do dbof "$s"; done) | sort -u | paste -sd' ' -) at t=$el s"
    fi
    ((el >= total)) && break
    sleep 0.5
  done
  for pid in "${pids[@]}"; do stop_bg "$pid"; done
  for pid in "${hold_pids[@]}"; do wait "$pid" 2>/dev/null || true; forget "$pid"; done
  for system in $SYSTEMS; do
    if grep -qiE "error|abort" "$WORK/size-cons-$system" "$WORK/size-prod-$system"; then
      echo "size: $system reported errors:" >&2; grep -hiE "error|abort" "$WORK/size-cons-$system" "$WORK/size-prod-$system" | head -5 >&2; exit 1
    fi
  done
}

lsn() { bsql "SELECT pg_current_wal_lsn()"; }
wal_diff() { bsql "SELECT pg_wal_lsn_diff('$2', '$1')"; }

wal_run() {
  local system a b c d n=$WAL_EVENTS x
  a=$(lsn); sleep 5; b=$(lsn)
  record walidle "$(wal_diff "$a" "$b")" 5
  for system in $SYSTEMS queue; do
    case $system in
      queue)    bsql "SELECT count(*) FROM pgq.jobs" | grep -qx 0 || { echo "pgq.jobs is not empty" >&2; exit 1; } ;;
      skytools) reset_system skytools consumer; sky_config 100 '1 hour' ;;
      *)        reset_system "$system" consumer ;;
    esac
    x=$system; [[ $x == queue ]] && x=baseline   # its database
    vacuum_db "$x"
    a=$(lsn)
    case $system in
      baseline) run_pgbench baseline base_enqueue.sql on 1 -t "$n" ;;
      skytools) run_pgbench skytools skytools_wal_append1.sql on 1 -t "$n" -D i=0 ;;
      stream)   run_pgbench stream stream_append1.sql on 1 -t "$n" ;;
      queue)    run_pgbench baseline pgq_enqueue.sql on 1 -t "$n" ;;
    esac
    ((PB_RC == 0)) || exit 1
    b=$(lsn)
    case $system in
      baseline) run_pgbench baseline base_enqueue_many.sql on 1 -t $((n / 100)) ;;
      skytools) run_pgbench skytools skytools_wal_append100.sql on 1 -t $((n / 100)) ;;
      stream)   run_pgbench stream stream_append100.sql on 1 -t $((n / 100)) ;;
      queue)    run_pgbench baseline pgq_enqueue_many.sql on 1 -t $((n / 100)) ;;
    esac
    ((PB_RC == 0)) || exit 1
    c=$(lsn)
    case $system in
      baseline) run_pgbench baseline base_claim100.sql on 1 -t $((2 * n / 100)) ;;
      skytools) run_pgbench skytools skytools_read.sql on 1 -t $((2 * n / 100)) -D idle_ms=0 ;;
      stream)   run_pgbench stream stream_read.sql on 1 -t $((2 * n / 100)) -D batch=100 -D wait_s=0 ;;
      queue)    run_pgbench baseline pgq_claimN.sql on 1 -t $((2 * n / 100)) -D n=100 ;;
    esac
    ((PB_RC == 0)) || exit 1
    local left
    case $system in
      queue) left=$(bsql "SELECT count(*) FROM pgq.jobs") ;;
      *)     left=$(consume_rest "$system") ;;
    esac
    d=$(lsn)
    record wal "$system" append1 "$n" "$(wal_diff "$a" "$b")"
    record wal "$system" append100 "$n" "$(wal_diff "$b" "$c")"
    record wal "$system" consume $((2 * n - left)) "$(wal_diff "$c" "$d")"
    printf '  wal %-8s: append1 %s B/event, append100 %s B/event, consume %s B/event (%s left for the psql loop)\n' "$system" \
      "$(awk -v b="$(wal_diff "$a" "$b")" -v n="$n" 'BEGIN { printf "%.0f", b / n }')" \
      "$(awk -v b="$(wal_diff "$b" "$c")" -v n="$n" 'BEGIN { printf "%.0f", b / n }')" \
      "$(awk -v b="$(wal_diff "$c" "$d")" -v n=$((2 * n)) 'BEGIN { printf "%.0f", b / n }')" "$left" >&2
    if [[ $system == queue && $left -gt 0 ]]; then echo "the queue kept $left jobs" >&2; exit 1; fi
  done
}

# --- the plan ---------------------------------------------------------------------

other_servers() { ps -eo args= | awk '$1 ~ /bin\/postgres$/ && $0 !~ "'"$PGDIR"'/data" {for (i = 2; i <= NF; i++) if ($i == "-D") print $(i + 1)}' | sort -u | paste -sd' ' -; }
: >"$OUT_RAW"
OTHERS_BEFORE=$(other_servers)
LOAD_BEFORE=$(uptime)
START_TS=$(date +%s)
START_UTC=$(date -u '+%Y-%m-%d %H:%M UTC')
say "systems: $SYSTEMS; workloads: $WORKLOADS; DURATION=$DURATION RUNS=$RUNS CLIENTS=\"$CLIENTS\" SYNC=\"$SYNC\""
for workload in $WORKLOADS; do
  wstart=$(date +%s)
  case $workload in
    append1|append100)
      set_autovacuum off
      for sync in $SYNC; do
        for clients in $CLIENTS; do
          say "$workload, synchronous_commit=$sync, $clients client(s)"
          for rep in $(seq 1 "$RUNS"); do
            for system in $SYSTEMS; do append_run "$workload" "$system" "$sync" "$clients" "$rep"; done
          done
        done
      done ;;
    read100|read1000)
      set_autovacuum off
      for sync in $SYNC; do
        say "$workload, synchronous_commit=$sync: $READ_EVENTS events, one consumer"
        for rep in $(seq 1 "$RUNS"); do
          for system in $SYSTEMS; do read_run "${workload#read}" "$system" "$sync" "$rep"; done
        done
      done ;;
    drain)
      set_autovacuum on
      for rep in $(seq 1 "$RUNS"); do
        for system in $SYSTEMS; do
          say "drain: $system, run $rep ($DRAIN_BACKLOG filled + $DRAIN_PRODUCE from 2 producers)"
          drain_run "$system" "$rep"
        done
      done ;;
    latency)
      set_autovacuum on
      variants=()
      has stream && variants+=(stream)
      has skytools && variants+=(skytools skytools-fast)
      if ((${#variants[@]} > 0)); then
        say "latency: $LAT_RATE events/s for $LAT_SECONDS s"
        for rep in $(seq 1 "$RUNS"); do
          for v in "${variants[@]}"; do latency_run "$v" "$rep"; done
        done
      fi ;;
    size)
      set_autovacuum on
      size_run ;;
    wal)
      set_autovacuum off
      say "wal: $WAL_EVENTS events per phase"
      wal_run ;;
  esac
  record elapsed "$workload" $(( $(date +%s) - wstart ))
done
ELAPSED=$(( $(date +%s) - START_TS ))
LOAD_AFTER=$(uptime)
OTHERS_AFTER=$(other_servers)

# --- the report -------------------------------------------------------------------

PG_SERVER_VERSION=$(bsql "SELECT version()")
CMD="DURATION=$DURATION RUNS=$RUNS CLIENTS=\"$CLIENTS\" SYNC=\"$SYNC\" SYSTEMS=\"$SYSTEMS\" WORKLOADS=\"$WORKLOADS\""
for v in READ_EVENTS DRAIN_BACKLOG DRAIN_PRODUCE DRAIN_BASE_CONSUMERS DRAIN_MAX SKY_DRAIN_TICK_MS LAT_RATE LAT_SECONDS \
         LAT_SKY_POLL_MS SIZE_RATE SIZE_ROTATION SIZE_STEADY SIZE_WARMUP HOLD_SECONDS SIZE_RECOVER SIZE_SAMPLE WAL_EVENTS; do
  case $v in  # only what differs from the defaults
    READ_EVENTS|DRAIN_BACKLOG) d=200000 ;; DRAIN_PRODUCE) d=100000 ;; DRAIN_BASE_CONSUMERS) d=4 ;; DRAIN_MAX) d=600 ;; SIZE_SAMPLE) d=2 ;;
    SKY_DRAIN_TICK_MS) d=10 ;; LAT_RATE|SIZE_RATE) d=200 ;; LAT_SECONDS) d=20 ;; LAT_SKY_POLL_MS) d=100 ;;
    SIZE_ROTATION) d=10 ;; SIZE_STEADY) d=90 ;; SIZE_WARMUP) d=30 ;; HOLD_SECONDS) d=300 ;; SIZE_RECOVER) d=40 ;; WAL_EVENTS) d=10000 ;;
  esac
  [[ ${!v} != "$d" ]] && CMD="$CMD $v=${!v}"
done
[[ $SKY_DRAIN_MAX_LAG != "100 ms" ]] && CMD="$CMD SKY_DRAIN_MAX_LAG=\"$SKY_DRAIN_MAX_LAG\""
[[ $NO_INSTALL == 1 ]] && CMD="$CMD NO_INSTALL=1"
CMD="$CMD bash bench/streams.sh"
{
  echo "# Streams: pgq_cpp streams vs Skytools PgQ vs the plain-SQL baseline (bench/streams.sh)"
  echo
  echo "- date: $START_UTC; wall time of the runs: ${ELAPSED} s"
  echo "- command: \`$CMD\`"
  echo "- machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, $(uname -sr)"
  echo "- PostgreSQL: $PG_SERVER_VERSION"
  echo "- pgq_cpp $PGQ_CPP_VERSION: $GIT_AT_START, $SO_AT_START (database bench)"
  echo "- Skytools PgQ $SKYTOOLS_VERSION: Debian $SKYTOOLS_PACKAGE $(dpkg-query -W -f='${Version}' "$SKYTOOLS_PACKAGE") (database skytools)"
  echo "- cluster settings: $(IFS=';'; echo "${CLUSTER_CONF[*]}" | sed 's/;/, /g'); autovacuum on for drain, latency and size; synchronous_commit per run through PGOPTIONS"
  echo "- load before: \`${LOAD_BEFORE## }\`; after: \`${LOAD_AFTER## }\`"
  echo "- other PostgreSQL servers running: at start: ${OTHERS_BEFORE:-none}; at end: ${OTHERS_AFTER:-none}"
  echo
  python3 "$BENCH_HOME/streams_report.py" "$OUT_RAW" "$READ_EVENTS" "$DRAIN_BACKLOG" "$DRAIN_PRODUCE" \
    "$DRAIN_BASE_CONSUMERS" "$LAT_RATE" "$LAT_SECONDS" "$SIZE_RATE" "$SIZE_ROTATION" "$SIZE_WARMUP" \
    "$SIZE_STEADY" "$HOLD_SECONDS" "$SIZE_RECOVER" "$WAL_EVENTS" "$SKY_DRAIN_TICK_MS" "$SKY_DRAIN_MAX_LAG" "$LAT_SKY_POLL_MS"
} >"$OUT_MD"

cat "$OUT_MD"
say "written to $OUT_MD (every run: $OUT_RAW)"
