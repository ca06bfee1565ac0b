#!/usr/bin/env bash
# A first prototype for the queues on segment rings (issue 33): how many
# bytes of WAL one job costs from enqueue to completion in each storage
# shape, before any of it is built. Plain SQL tables stand in for the
# shapes; what a shape would keep in shared memory (claim cursors, the live
# leases) costs no WAL, so the statements that stand in for a claim and a
# completion only read to find their rows. Side by side in one throwaway
# durable cluster:
#
#   pgq_cpp     pgq.enqueue_many 100, pgq.claim 100, pgq.complete_many 100
#   baseline    the hand-written table of bench/baseline.sql: insert 100,
#               UPDATE .. SKIP LOCKED 100, DELETE 100
#   ring ...    entries appended (never updated), a claim appends a receipt
#               per job, a completion a closure per job (or deletes the
#               receipt), with or without an index on each
#
#   bash bench/rings_wal.sh
#   JOBS=2000 CHECKPOINT=0 NO_INSTALL=1 bash bench/rings_wal.sh
#
# Each shape: JOBS jobs (10,000), 100 per transaction in each step, in one
# session; WAL from pg_current_wal_lsn before and after each step, divided
# by JOBS. CHECKPOINT=1 (default) checkpoints before each shape, so the
# first change of every page after it writes a full-page image, as a busy
# server's would once per checkpoint; CHECKPOINT=0 measures the records
# alone (the shapes' tables are then warm from the previous shape's run).
source "$(dirname "$0")/../scripts/lib.sh"

JOBS="${JOBS:-10000}" CHECKPOINT="${CHECKPOINT:-1}"
dir="${BENCH_DIR:-/tmp/bench_rings_wal}" port="${BENCH_PORT:-55930}"

bench_install
stop_cluster "$dir"
rm -rf "$dir"
trap 'stop_cluster "$dir"' EXIT
start_cluster "$dir" "$port" "${BENCH_DURABLE_CONF[@]}" "autovacuum = off"
psql_() { as_pg "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres "$@"; }

psql_ >/dev/null <<'SQL'
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('bench');
SQL

# The tables of every shape, made anew before each.
reset_tables() {
  psql_ >/dev/null 2>&1 <<'SQL'
DROP TABLE IF EXISTS bench_jobs, r_entries, r_receipts, r_closures;
DROP SEQUENCE IF EXISTS r_ids;
CREATE TABLE bench_jobs (id bigserial PRIMARY KEY, queue text NOT NULL, status text NOT NULL DEFAULT 'pending',
  priority integer NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
  attempts integer NOT NULL DEFAULT 0, lease_until timestamptz, payload jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON bench_jobs (queue, priority DESC, run_at, id) WHERE status = 'pending';
CREATE SEQUENCE r_ids;
-- A job as enqueued: the columns pgq.jobs gives a new job.
CREATE TABLE r_entries (id bigint NOT NULL, queue_id int NOT NULL, priority smallint NOT NULL,
  max_attempts smallint NOT NULL, run_at timestamptz NOT NULL, enqueued_at timestamptz NOT NULL,
  payload jsonb NOT NULL);
-- A claim: which attempt, until when.
CREATE TABLE r_receipts (id bigint NOT NULL, attempt int NOT NULL, lease_until timestamptz NOT NULL,
  claimed_at timestamptz NOT NULL);
-- An outcome: done, failed, cancelled, with its time.
CREATE TABLE r_closures (id bigint NOT NULL, attempt int NOT NULL, outcome "char" NOT NULL,
  at timestamptz NOT NULL);
SQL
}

lsn() { psql_ -c "SELECT pg_current_wal_lsn()"; }
per_job() { psql_ -c "SELECT round(pg_wal_lsn_diff('$2', '$1') / $JOBS.0)"; }
repeat() { local i; for ((i = 0; i < JOBS / 100; i++)); do echo "$1"; done | psql_ >/dev/null; }

results=()
measure() {  # name setup enqueue claim complete
  reset_tables
  [[ -n $2 ]] && psql_ -c "$2" >/dev/null
  [[ $CHECKPOINT == 1 ]] && psql_ -c "CHECKPOINT" >/dev/null
  local a b c d
  a=$(lsn); repeat "$3"
  b=$(lsn); repeat "$4"
  c=$(lsn); repeat "$5"
  d=$(lsn)
  local line
  line=$(printf '| %s | %s | %s | %s | **%s** |' "$1" "$(per_job "$a" "$b")" "$(per_job "$b" "$c")" \
    "$(per_job "$c" "$d")" "$(per_job "$a" "$d")")
  echo "$line"
  results+=("$line")
}

say "WAL per job, $JOBS jobs, 100 per transaction, checkpoint before each shape: $CHECKPOINT"
measure "pgq_cpp (pgq.jobs)" "" \
  "SELECT count(*) FROM pgq.enqueue_many('bench', array_fill('{\"k\":1}'::jsonb, ARRAY[100]));" \
  "SELECT count(*) FROM pgq.claim('bench', 100);" \
  "SELECT pgq.complete_many(array_agg(id), array_agg(attempt)) FROM (SELECT id, attempt FROM pgq.jobs WHERE state = 'r' ORDER BY id LIMIT 100) j;"
measure "hand-written SKIP LOCKED table" "" \
  "INSERT INTO bench_jobs (queue, payload) SELECT 'bench', '{\"k\":1}' FROM generate_series(1, 100);" \
  "UPDATE bench_jobs SET status = 'running', attempts = attempts + 1, lease_until = now() + interval '1 minute' WHERE id = ANY (ARRAY(SELECT id FROM bench_jobs WHERE queue = 'bench' AND status = 'pending' ORDER BY priority DESC, run_at, id LIMIT 100 FOR UPDATE SKIP LOCKED));" \
  "DELETE FROM bench_jobs WHERE id = ANY (ARRAY(SELECT id FROM bench_jobs WHERE status = 'running' ORDER BY id LIMIT 100));"

enqueue="INSERT INTO r_entries SELECT nextval('r_ids'), 1, 0, 25, now(), now(), '{\"k\":1}' FROM generate_series(1, 100);"
claim="INSERT INTO r_receipts SELECT id, 1, now() + interval '1 minute', now() FROM r_entries WHERE id > coalesce((SELECT max(id) FROM r_receipts), 0) ORDER BY id LIMIT 100;"
close="INSERT INTO r_closures SELECT id, attempt, 'd', now() FROM r_receipts WHERE id > coalesce((SELECT max(id) FROM r_closures), 0) ORDER BY id LIMIT 100;"
delete="DELETE FROM r_receipts WHERE id = ANY (ARRAY(SELECT id FROM r_receipts ORDER BY id LIMIT 100));"
measure "ring: no index" "" "$enqueue" "$claim" "$close"
measure "ring: no index, completion deletes the receipt" "" "$enqueue" "$claim" "$delete"
measure "ring: B-tree on receipts (id)" "CREATE INDEX ON r_receipts (id);" "$enqueue" "$claim" "$close"
measure "ring: BRIN on entries (id), 8 pages a range" "CREATE INDEX ON r_entries USING brin (id) WITH (pages_per_range = 8);" \
  "$enqueue" "$claim" "$close"
measure "ring: B-tree on entries (id) and receipts (id)" "CREATE INDEX ON r_entries (id); CREATE INDEX ON r_receipts (id);" \
  "$enqueue" "$claim" "$close"
measure "ring: B-tree on entries, receipts and closures (id)" \
  "CREATE INDEX ON r_entries (id); CREATE INDEX ON r_receipts (id); CREATE INDEX ON r_closures (id);" \
  "$enqueue" "$claim" "$close"

echo
echo "| shape | enqueue | claim | complete | total B/job |"
echo "|---|---:|---:|---:|---:|"
printf '%s\n' "${results[@]}"
