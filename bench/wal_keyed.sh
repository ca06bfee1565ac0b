#!/usr/bin/env bash
# WAL per job with a dedupe key, A/B of two builds (issue 33, ADR 0028
# "Dedupe keys on the rings"): each build installed in turn into a fresh
# durable cluster, ROUNDS rounds; JOBS jobs, each with a key of its own,
# (1) enqueued one per transaction, then claimed one and completed one per
# transaction; (2) enqueued 100 per transaction, then claimed 100 and
# completed with complete_many per transaction. A CHECKPOINT before each
# measured loop; WAL measured as the insert position's move
# (pg_current_wal_insert_lsn), divided by JOBS: bytes per job for the
# enqueue and for the claim+complete, and their sum.
# MODE=retried (ADR 0028 "Rows claimed onto the rings"): the jobs have no
# key; each is enqueued, claimed and failed with retry_in 1 hour (the
# first figure of each pair: a retry waiting as a row of pgq.job_rows),
# then, two hours later (pgq.debug_clock_offset), the retries are claimed
# and completed as above (the second).
# Reinstalls this tree at the end.
#
#   git worktree add /tmp/old <rev> && make -C /tmp/old
#   OLD=/tmp/old bash bench/wal_keyed.sh
#   MODE=retried OLD=/tmp/old bash bench/wal_keyed.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

OLD="${OLD:?set OLD to the built tree of the other revision}"
ROUNDS="${ROUNDS:-2}"
JOBS="${JOBS:-10000}"
MODE="${MODE:-keyed}"
case "$MODE" in
  keyed) KEY=", dedupe_key => 'k' || i" FAIL="" LATER="" ;;
  # The job just enqueued, claimed and failed: a retry due in an hour,
  # claimed two hours later.
  retried) KEY="" FAIL="; PERFORM pgq.fail(j.id, j.attempt, 'boom', retry_in => '1 hour')
      FROM pgq.claim(q, 1) j" LATER="PERFORM set_config('pgq.debug_clock_offset', '2h', false);" ;;
  *) echo "MODE is keyed or retried" >&2; exit 2 ;;
esac
DIR="${PGQ_WAL_DIR:-/tmp/pgq_wal_keyed}"
PORT="${PGQ_WAL_PORT:-55973}"
P=("$PG_BIN/psql" -X -q -At -h "$DIR" -p "$PORT" -U postgres -d t)

# The WAL bytes per job that `sql` (a DO block) writes, after a checkpoint.
wal_per_job() {
  "${P[@]}" -c "CHECKPOINT" >/dev/null
  local before after
  before=$("${P[@]}" -c "SELECT pg_current_wal_insert_lsn()")
  "${P[@]}" -c "$1" >/dev/null
  after=$("${P[@]}" -c "SELECT pg_current_wal_insert_lsn()")
  "${P[@]}" -c "SELECT round(pg_wal_lsn_diff('$after', '$before') / $JOBS)"
}

for round in $(seq "$ROUNDS"); do
  for build in "$OLD" "$PGQ_ROOT"; do
    install_build "$build"
    stop_cluster "$DIR"; rm -rf "$DIR"
    start_cluster "$DIR" "$PORT" "${BENCH_DURABLE_CONF[@]}"
    "$PG_BIN/createdb" -h "$DIR" -p "$PORT" -U postgres t
    "${P[@]}" -c "CREATE EXTENSION pgq_cpp" -c "SELECT pgq.create_queue('one')" \
      -c "SELECT pgq.create_queue('batch')" >/dev/null
    e1=$(wal_per_job "DO \$\$ DECLARE q text := 'one'; BEGIN FOR i IN 1..$JOBS LOOP
      PERFORM pgq.enqueue(q, '{\"n\": 1}'$KEY)$FAIL; COMMIT; END LOOP; END \$\$")
    c1=$(wal_per_job "DO \$\$ DECLARE j record; BEGIN $LATER FOR i IN 1..$JOBS LOOP
      SELECT id, attempt INTO j FROM pgq.claim('one', 1); PERFORM pgq.complete(j.id, j.attempt);
      COMMIT; END LOOP; END \$\$")
    e100=$(wal_per_job "DO \$\$ DECLARE q text := 'batch'; BEGIN FOR i IN 1..$JOBS LOOP
      PERFORM pgq.enqueue(q, '{\"n\": 1}'$KEY)$FAIL;
      IF i % 100 = 0 THEN COMMIT; END IF; END LOOP; END \$\$")
    c100=$(wal_per_job "DO \$\$ BEGIN $LATER FOR i IN 1..$JOBS / 100 LOOP
      PERFORM pgq.complete_many(array_agg(id), array_agg(attempt)) FROM pgq.claim('batch', 100);
      COMMIT; END LOOP; END \$\$")
    left=$("${P[@]}" -c "SELECT count(*) FROM pgq.jobs")
    echo "round $round $build ($MODE): bytes/job one at a time enqueue $e1 + claim+complete $c1 = $((e1 + c1)); batches of 100 enqueue $e100 + claim+complete_many $c100 = $((e100 + c100)); jobs left $left"
  done
done
stop_cluster "$DIR"; rm -rf "$DIR"
install_build "$PGQ_ROOT"
