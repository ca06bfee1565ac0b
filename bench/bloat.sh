#!/usr/bin/env bash
# pgq_cpp bloat benchmark: what a long transaction (held xmin), overlapping
# REPEATABLE READ readers and a deep churning drain do to pgq_cpp and to the
# hand-written plain-SQL queue (bench/baseline.sql), side by side in one
# throwaway cluster; pgq_cpp twice, the queue 'bench' (pgq) and the queue
# 'bench_ring' (pgqr, ADR 0028: both on rings since release 3.0;
# its size is its segments', pg_total_relation_size of the partitions
# pgq.job_log_<ring>_<n>, with their dead tuples, pg_stat_user_tables). The steady state before the hold and before the readers
# is reported on its own (jobs/s, claim p50/p99).
#
#   bash bench/bloat.sh
#   HOLD=30 PRE=30 POST=30 INTERVAL=10 DRAIN_JOBS=5000 bash bench/bloat.sh      quick development run
#
# Environment:
#   HOLD        seconds the held transaction stays open (default 300; a multiple of INTERVAL)
#   READ        seconds the active readers run (default: HOLD; a multiple of INTERVAL)
#   PRE, POST   steady-state seconds before / after the hold and the readers (default 60 / 60)
#   INTERVAL    reporting interval, seconds (default 30)
#   RATE        producer pace in the held-xmin and readers workloads, jobs/s (default
#               150: both systems must keep up before the hold, or the run measures a
#               growing backlog instead)
#   READERS     overlapping reader sessions (default 4)
#   READ_XACT   seconds each reader transaction stays open (default 10)
#   READ_EVERY  seconds between a reader's full scans within a transaction (default 1)
#   DRAIN_JOBS  jobs pushed in the deep churning drain (default 200000)
#   DRAIN_MAX   seconds after which the drain consumers give up (default 600)
#   PARTS       subset of: held readers drain (default all three)
#   SYSTEMS     the systems measured, in order (default "baseline pgq pgqr";
#               the report needs baseline and pgq)
#   PGQ_ENQ_ARGS more arguments of pgq's enqueue (default none), e.g.
#               ", dedupe_key => gen_random_uuid()::text": every job with a key
#               of its own (the key's rows in pgq.dedupe_holds count among
#               the job storage's dead tuples, as pgq.group_holds' do)
#   RING_TURN   pgq.ring_turn in the cluster's configuration (default 10s: the
#               maintenance turns a ring once its segment took entries that
#               long, and truncates a segment whose jobs are all finished)
#   BLOAT_DIR, BLOAT_PORT  the throwaway cluster (default /tmp/pgq_bloat, 55442)
#   OUT_DIR     report, raw results, charts and server log (default /tmp/pgq_bloat_out;
#               emptied at the start)
#   CHART_TO    where the held-xmin chart is copied (default bench/held-xmin.png;
#               empty: not copied)
#
# Wall time of the full default run: held 3 x 420 s, readers 3 x 420 s, drain
# 3 x ~2 minutes (200,000 jobs at ~1,700-1,900 jobs/s), plus a reset per run:
# about 50 minutes.
#
# It does not build or install anything: it measures the pgq_cpp installed in
# $(pg_config --pkglibdir). Clients are bench/bloat.py (Debian's python3 with
# python3-psycopg), one OS process per connection. Each workload runs the
# baseline first, then pgq, in the same cluster; before each: TRUNCATE,
# VACUUM ANALYZE, CHECKPOINT. The report (bench/bloat_report.py) goes to
# stdout and to $OUT_DIR/bloat-latest.md, the charts (gnuplot) to
# $OUT_DIR/held-xmin.png and readers.png.

source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

export HOLD="${HOLD:-300}" PRE="${PRE:-60}" POST="${POST:-60}" INTERVAL="${INTERVAL:-30}"
export READ="${READ:-$HOLD}" READERS="${READERS:-4}" READ_XACT="${READ_XACT:-10}" READ_EVERY="${READ_EVERY:-1}"
export RATE="${RATE:-150}" DRAIN_JOBS="${DRAIN_JOBS:-200000}" DRAIN_MAX="${DRAIN_MAX:-600}" PARTS="${PARTS:-held readers drain}"
export SYSTEMS="${SYSTEMS:-baseline pgq pgqr}"
RING_TURN="${RING_TURN:-10s}"
for v in HOLD READ PRE POST INTERVAL RATE READERS READ_XACT DRAIN_JOBS DRAIN_MAX; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a positive integer" >&2; exit 2; }
done
[[ "$READ_EVERY" =~ ^[0-9]*\.?[0-9]+$ ]] && [[ ! "$READ_EVERY" =~ ^0*\.?0*$ ]] \
  || { echo "READ_EVERY must be a positive number of seconds" >&2; exit 2; }
((PRE % INTERVAL == 0 && HOLD % INTERVAL == 0 && READ % INTERVAL == 0 && POST % INTERVAL == 0)) \
  || { echo "PRE, HOLD, READ and POST must be multiples of INTERVAL" >&2; exit 2; }
for p in $PARTS; do
  [[ $p == held || $p == readers || $p == drain ]] || { echo "PARTS: unknown part '$p' (held readers drain)" >&2; exit 2; }
done

BENCH_HOME="$PGQ_ROOT/bench"
PGDIR="${BLOAT_DIR:-/tmp/pgq_bloat}"
PORT="${BLOAT_PORT:-55442}"
DB=bench
OUTDIR="${OUT_DIR:-/tmp/pgq_bloat_out}"
OUT_MD="$OUTDIR/bloat-latest.md"
CHART_TO="${CHART_TO-$BENCH_HOME/held-xmin.png}"
PY=/usr/bin/python3
CMDLINE="HOLD=$HOLD READ=$READ PRE=$PRE POST=$POST INTERVAL=$INTERVAL RATE=$RATE READERS=$READERS READ_XACT=$READ_XACT READ_EVERY=$READ_EVERY DRAIN_JOBS=$DRAIN_JOBS DRAIN_MAX=$DRAIN_MAX PARTS=\"$PARTS\" SYSTEMS=\"$SYSTEMS\" RING_TURN=$RING_TURN PGQ_ENQ_ARGS=\"${PGQ_ENQ_ARGS:-}\" bash bench/bloat.sh"

# Packages only this benchmark needs, on top of scripts/lib.sh's: gnuplot
# draws the charts.
BENCH_PACKAGES=(gnuplot-nox)
PGQ_PACKAGES+=("${BENCH_PACKAGES[@]}")

# Durable, like bench/run.sh, but autovacuum on with its defaults: a real
# server vacuums. synchronous_commit is set per session by the clients (on for
# the held-xmin and readers workloads, off for the drain).
CLUSTER_CONF=(
  "${BENCH_DURABLE_CONF[@]}"
  "autovacuum = on"
  "log_autovacuum_min_duration = 0"
  "pgq.ring_turn = '$RING_TURN'"
)

ensure_packages
PSQL=("$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PGDIR" -p "$PORT" -U postgres -d "$DB")
sql() { "${PSQL[@]}" -c "$1"; }

cleanup() { stop_cluster "$PGDIR"; }
trap cleanup EXIT
stop_cluster "$PGDIR"
rm -rf "$PGDIR" "${OUTDIR:?}"
mkdir -p "$OUTDIR"

SO_FILE="$("$PG_CONFIG" --pkglibdir)/pgq_cpp.so"
SO_ID="installed pgq_cpp.so $(date -u -r "$SO_FILE" '+%Y-%m-%d %H:%M:%S UTC'), md5 $(md5sum "$SO_FILE" | cut -c1-12)"
GIT_ID="git $(git -C "$PGQ_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$PGQ_ROOT" diff --quiet HEAD -- src sql 2>/dev/null || echo ' (working tree modified)')"

say "starting the bloat cluster in $PGDIR (port $PORT)"
start_cluster "$PGDIR" "$PORT" "${CLUSTER_CONF[@]}"
"$PG_BIN/createdb" -h "$PGDIR" -p "$PORT" -U postgres "$DB"
sql "CREATE EXTENSION pgq_cpp"
sql "SELECT pgq.create_queue('bench')" >/dev/null
"${PSQL[@]}" -f "$BENCH_HOME/baseline.sql"

LOAD_BEFORE=$(uptime)
START_TS=$(date +%s)
say "$CMDLINE"
"$PY" "$BENCH_HOME/bloat.py" run "host=$PGDIR port=$PORT user=postgres dbname=$DB" "$OUTDIR"
ELAPSED=$(( $(date +%s) - START_TS ))
LOAD_AFTER=$(uptime)
AV_LINES=$(grep -c 'automatic vacuum' "$PGDIR/server.log" || true)
cp "$PGDIR/server.log" "$OUTDIR/server.log"

# Charts: bloat_report.py writes the data and the gnuplot scripts.
CHARTS=()
for gp in $("$PY" "$BENCH_HOME/bloat_report.py" chart "$OUTDIR"); do
  gnuplot "$gp"
  CHARTS+=("${gp%.gp}.png")
done
if [[ -n "$CHART_TO" && -f "$OUTDIR/held-xmin.png" ]]; then
  cp "$OUTDIR/held-xmin.png" "$CHART_TO"
fi

{
  echo "# pgq_cpp bloat benchmark: steady state, held xmin, active readers, deep churning drain"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); wall time of the workloads: ${ELAPSED} s"
  echo "- command: \`$CMDLINE\`"
  echo "- machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, $(uname -sr)"
  echo "- PostgreSQL: $(sql "SELECT version()")"
  echo "- pgq_cpp measured: $GIT_ID, $SO_ID"
  echo "- cluster ($PGDIR, port $PORT): $(IFS=';'; echo "${CLUSTER_CONF[*]}" | sed 's/;/, /g'); autovacuum otherwise default; pgq_cpp preloaded (its maintenance worker runs)"
  echo "- autovacuum runs logged during the whole run: $AV_LINES (server log copied to $OUTDIR/server.log)"
  echo "- load before: \`${LOAD_BEFORE## }\`; after: \`${LOAD_AFTER## }\`"
  echo "- charts: ${CHARTS[*]:-none}$([[ -n "$CHART_TO" && -f "$OUTDIR/held-xmin.png" ]] && echo "; held-xmin.png copied to $CHART_TO")"
  echo
  "$PY" "$BENCH_HOME/bloat_report.py" report "$OUTDIR"
} >"$OUT_MD"
cat "$OUT_MD"
say "written to $OUT_MD"
