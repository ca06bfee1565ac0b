#!/usr/bin/env bash
# What a trace context costs (issue 35, ADR 0030), on one build: loops of
# 20,000 calls in one DO block each (the functions' own cost, no network),
# the variants interleaved in every round on one durable cluster (the
# machine's drift hits them alike), ROUNDS rounds:
#   enqueue without a context / with traceparent and tracestate arguments /
#   with the setting pgq.trace_context (set once per loop, transaction-local);
#   enqueue_many of 100 payloads, 200 calls, without / with a context;
#   append without / with;
#   claim + complete pairs of untraced jobs by pgq.claim, of traced jobs by
#   pgq.claim_traced (a commit every 1,000 pairs: a ring hands out at most
#   4,096 jobs to claims not yet committed).
# Then the WAL each costs: pg_current_wal_lsn() before and after 20,000
# enqueues (and 20,000 appends) of each kind, in bytes a job.
# What it costs when absent is the A/B of two builds (bench/ab_builds.sh):
# this script cannot run on a build without the arguments.
#
#   ROUNDS=5 bash bench/trace.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

ROUNDS="${ROUNDS:-3}"
DIR="${PGQ_TRACE_BENCH_DIR:-/tmp/pgq_trace_bench}"
PORT="${PGQ_TRACE_BENCH_PORT:-55972}"
P=("$PG_BIN/psql" -X -q -At -h "$DIR" -p "$PORT" -U postgres -d t -v ON_ERROR_STOP=1)
TP="'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'"
TS="'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7'"

stop_cluster "$DIR"; rm -rf "$DIR"
start_cluster "$DIR" "$PORT" "${BENCH_DURABLE_CONF[@]}"
trap 'stop_cluster "$DIR"; rm -rf "$DIR"' EXIT
"$PG_BIN/createdb" -h "$DIR" -p "$PORT" -U postgres t
"${P[@]}" -c "CREATE EXTENSION pgq_cpp" -c "SELECT pgq.create_queue('plain')" \
  -c "SELECT pgq.create_queue('traced')" -c "SELECT pgq.create_stream('s')" >/dev/null

# ms of each statement of $1, in order (psql's \timing).
timed() {
  local out
  out=$("${P[@]}" 2>&1 <<<"\\timing on
$1")
  if grep -q ERROR <<<"$out"; then echo "$out" >&2; exit 1; fi
  grep -o 'Time: [0-9.]*' <<<"$out" | awk '{print $2}' | tr '\n' ' '
}

for round in $(seq "$ROUNDS"); do
  times=$(timed "
DO \$\$ BEGIN FOR i IN 1..20000 LOOP PERFORM pgq.enqueue('plain', '{\"n\": 1}'); END LOOP; END \$\$;
DO \$\$ BEGIN FOR i IN 1..20000 LOOP
  PERFORM pgq.enqueue('traced', '{\"n\": 1}', traceparent => $TP, tracestate => $TS); END LOOP; END \$\$;
DO \$\$ BEGIN PERFORM set_config('pgq.trace_context', $TP || ';' || $TS, true);
  FOR i IN 1..20000 LOOP PERFORM pgq.enqueue('traced', '{\"n\": 1}'); END LOOP; END \$\$;
DO \$\$ BEGIN FOR i IN 1..200 LOOP
  PERFORM pgq.enqueue_many('plain', array_fill('{\"n\": 1}'::jsonb, ARRAY[100])); END LOOP; END \$\$;
DO \$\$ BEGIN FOR i IN 1..200 LOOP
  PERFORM pgq.enqueue_many('traced', array_fill('{\"n\": 1}'::jsonb, ARRAY[100]),
                           traceparent => $TP, tracestate => $TS); END LOOP; END \$\$;
DO \$\$ BEGIN FOR i IN 1..20000 LOOP PERFORM pgq.append('s', '{\"n\": 1}'); END LOOP; END \$\$;
DO \$\$ BEGIN FOR i IN 1..20000 LOOP
  PERFORM pgq.append('s', '{\"n\": 1}', traceparent => $TP, tracestate => $TS); END LOOP; END \$\$;
DO \$\$ DECLARE j record; BEGIN FOR i IN 1..20000 LOOP
  SELECT id, attempt INTO j FROM pgq.claim('plain', 1); PERFORM pgq.complete(j.id, j.attempt);
  IF i % 1000 = 0 THEN COMMIT; END IF;
END LOOP; END \$\$;
DO \$\$ DECLARE j record; BEGIN FOR i IN 1..20000 LOOP
  SELECT id, attempt INTO j FROM pgq.claim_traced('traced', 1); PERFORM pgq.complete(j.id, j.attempt);
  IF i % 1000 = 0 THEN COMMIT; END IF;
END LOOP; END \$\$;
")
  echo "round $round: enqueue none, enqueue argument, enqueue setting (ms per 20,000), enqueue_many none, enqueue_many argument (ms per 200 x 100), append none, append argument, claim+complete, claim_traced+complete (ms per 20,000): $times"
  # What is left (the second enqueue loop's and the batches') drained, so
  # every round starts from the same backlog.
  "${P[@]}" >/dev/null <<'SQL'
DO $$ DECLARE n int; BEGIN LOOP
  SELECT count(*) INTO n FROM pgq.claim(ARRAY['plain', 'traced'], 1000) c, LATERAL pgq.complete(c.id, c.attempt);
  COMMIT;
  EXIT WHEN n = 0;
END LOOP; END $$;
SQL
done

# WAL bytes a job (and an event) of each kind.
wal() {  # label, statement run 20,000 times
  local before after
  "${P[@]}" -c "CHECKPOINT" >/dev/null
  before=$("${P[@]}" -c "SELECT pg_current_wal_lsn()")
  "${P[@]}" -c "DO \$\$ BEGIN FOR i IN 1..20000 LOOP PERFORM $2; END LOOP; END \$\$" >/dev/null
  after=$("${P[@]}" -c "SELECT pg_current_wal_lsn()")
  echo "$1: $("${P[@]}" -c "SELECT round(pg_wal_lsn_diff('$after', '$before') / 20000.0, 1)") WAL bytes each"
}
wal "enqueue without a context" "pgq.enqueue('plain', '{\"n\": 1}')"
wal "enqueue with traceparent" "pgq.enqueue('traced', '{\"n\": 1}', traceparent => $TP)"
wal "enqueue with traceparent and tracestate" "pgq.enqueue('traced', '{\"n\": 1}', traceparent => $TP, tracestate => $TS)"
wal "append without a context" "pgq.append('s', '{\"n\": 1}')"
wal "append with traceparent" "pgq.append('s', '{\"n\": 1}', traceparent => $TP)"
