#!/usr/bin/env bash
# In-server A/B of two builds on the per-job paths: loops of 20,000 calls in
# one DO block each (the functions' own cost, no network noise; the claim
# loops commit every 1,000 pairs, because a queue's ring hands out at most
# 4,096 jobs to claims not yet committed: until 2026-12-05 they ran in one
# transaction, stopped with an error at the 4,096th claim of a ring queue,
# and were timed to it — a loop that errs now fails the run), each build
# installed in turn into a fresh durable cluster, ROUNDS rounds. Prints ms per 20,000 enqueues, claim+complete pairs, enqueues
# with a dedupe key, enqueues and claim+complete pairs of jobs in 100
# FIFO groups, appends to a stream, and next_batch (one event) +
# finish_batch pairs (a commit every 100: each pair updates the consumer's
# row twice, and one transaction's versions of it cannot be pruned), and
# claim+complete pairs of a queue that keeps its completed jobs (history
# on: each completion writes its history ring), and claim + fail pairs of
# 20,000 jobs (each retried: the failure path; the retries wait as rows
# behind the queue's older jobs, so every claim takes a job not yet failed),
# and enqueues and claim+complete pairs of jobs of three priorities (1, 0,
# -1 in turn: on three rings where a queue serves priorities on rings, ADR
# 0028, the maintenance having given them theirs; rows of the table before),
# and 1,000 claim+complete pairs, each its own transaction, of one FIFO
# group with 20,000 jobs waiting (a tenant's import under one key), and
# enqueues and claim+complete pairs of 20,000 jobs each in a group of its
# own (sparse groups: a conversation's message, a relay's key; each group
# has room when its job comes; a commit every 1,000 enqueues: each holds
# its group's lock to its commit, and 20,000 of them overflow the lock table),
# and claim+complete pairs of the 20,000 jobs with a dedupe key enqueued
# above (each key's row taken at the enqueue and let go at the completion),
# and claim+complete pairs of the 20,000 jobs failed above, due two hours
# later (pgq.debug_clock_offset): retries waiting as rows of pgq.job_rows,
# claimed in place before 3.0's "Rows claimed onto the rings".
# Reinstalls this tree at the end.
#
#   git worktree add /tmp/old <rev> && make -C /tmp/old
#   OLD=/tmp/old bash bench/ab_builds.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

OLD="${OLD:?set OLD to the built tree of the other revision}"
ROUNDS="${ROUNDS:-3}"
DIR="${PGQ_AB_DIR:-/tmp/pgq_ab_builds}"
PORT="${PGQ_AB_PORT:-55971}"
P=("$PG_BIN/psql" -X -q -At -h "$DIR" -p "$PORT" -U postgres -d t)

for round in $(seq "$ROUNDS"); do
  # The order alternates (A B, B A, ...), so that neither build always runs
  # second: issue 35's first run, always old then new, showed claim+complete
  # 1.14-1.23x slower in every round, which runs in the order A B B A did
  # not (bench/RESULTS.md, "Trace context").
  builds=("$OLD" "$PGQ_ROOT")
  if ((round % 2 == 0)); then builds=("$PGQ_ROOT" "$OLD"); fi
  for build in "${builds[@]}"; do
    install_build "$build"
    stop_cluster "$DIR"; rm -rf "$DIR"
    start_cluster "$DIR" "$PORT" "${BENCH_DURABLE_CONF[@]}"
    "$PG_BIN/createdb" -h "$DIR" -p "$PORT" -U postgres t
    "${P[@]}" -c "CREATE EXTENSION pgq_cpp" -c "SELECT pgq.create_queue('q')" \
      -c "SELECT pgq.create_queue('g')" -c "SELECT pgq.create_stream('s')" \
      -c "SELECT pgq.create_queue('h', keep_completed => '1 hour')" \
      -c "SELECT count(*) FROM pgq.enqueue_many('h', array_fill('{\"n\": 1}'::jsonb, ARRAY[20000]))" \
      -c "SELECT pgq.create_queue('f')" \
      -c "SELECT count(*) FROM pgq.enqueue_many('f', array_fill('{\"n\": 1}'::jsonb, ARRAY[20000]))" \
      -c "SELECT pgq.register_consumer('s', 'c')" \
      -c "SELECT pgq.create_queue('p')" -c "SELECT pgq.enqueue('p', '{}', priority => 1)" \
      -c "SELECT count(*) FROM pgq.maintain()" -c "SELECT pgq.enqueue('p', '{}', priority => -1)" \
      -c "SELECT count(*) FROM pgq.maintain()" -c "SELECT pgq.create_queue('d')" -c "SELECT pgq.create_queue('sg')" \
      -c "DO \$\$ BEGIN FOR i IN 1..20000 LOOP PERFORM pgq.enqueue('d', '{}', group_key => 'tenant'); END LOOP; END \$\$" \
      >/dev/null
    out=$("${P[@]}" 2>&1 <<'SQL'
\timing on
DO $$ BEGIN FOR i IN 1..20000 LOOP PERFORM pgq.enqueue('q', '{"n": 1}'); END LOOP; END $$;
DO $$ DECLARE j record; BEGIN FOR i IN 1..20000 LOOP
  SELECT id, attempt INTO j FROM pgq.claim('q', 1); PERFORM pgq.complete(j.id, j.attempt);
  IF i % 1000 = 0 THEN COMMIT; END IF;
END LOOP; END $$;
DO $$ BEGIN FOR i IN 1..20000 LOOP PERFORM pgq.enqueue('q', '{"n": 1}', dedupe_key => 'k' || i); END LOOP; END $$;
DO $$ BEGIN FOR i IN 1..20000 LOOP PERFORM pgq.enqueue('g', '{"n": 1}', group_key => 'c' || (i % 100)); END LOOP; END $$;
DO $$ DECLARE j record; BEGIN FOR i IN 1..20000 LOOP
  SELECT id, attempt INTO j FROM pgq.claim('g', 1); PERFORM pgq.complete(j.id, j.attempt);
  IF i % 1000 = 0 THEN COMMIT; END IF;
END LOOP; END $$;
DO $$ BEGIN FOR i IN 1..20000 LOOP PERFORM pgq.append('s', '{"n": 1}'); END LOOP; END $$;
DO $$ DECLARE b bigint; BEGIN FOR i IN 1..20000 LOOP
  SELECT batch_id INTO b FROM pgq.next_batch('s', 'c', 1); PERFORM pgq.finish_batch(b);
  IF i % 100 = 0 THEN COMMIT; END IF;
END LOOP; END $$;
DO $$ DECLARE j record; BEGIN FOR i IN 1..20000 LOOP
  SELECT id, attempt INTO j FROM pgq.claim('h', 1); PERFORM pgq.complete(j.id, j.attempt);
  IF i % 1000 = 0 THEN COMMIT; END IF;
END LOOP; END $$;
DO $$ DECLARE j record; BEGIN FOR i IN 1..20000 LOOP
  SELECT id, attempt INTO j FROM pgq.claim('f', 1);
  PERFORM pgq.fail(j.id, j.attempt, 'boom', retry_in => '1 hour');
  IF i % 1000 = 0 THEN COMMIT; END IF;
END LOOP; END $$;
DO $$ BEGIN FOR i IN 1..20000 LOOP PERFORM pgq.enqueue('p', '{"n": 1}', priority => i % 3 - 1); END LOOP; END $$;
DO $$ DECLARE j record; BEGIN FOR i IN 1..20000 LOOP
  SELECT id, attempt INTO j FROM pgq.claim('p', 1); PERFORM pgq.complete(j.id, j.attempt);
  IF i % 1000 = 0 THEN COMMIT; END IF;
END LOOP; END $$;
DO $$ DECLARE j record; BEGIN FOR i IN 1..1000 LOOP
  SELECT id, attempt INTO j FROM pgq.claim('d', 1); PERFORM pgq.complete(j.id, j.attempt);
  COMMIT;
END LOOP; END $$;
DO $$ BEGIN FOR i IN 1..20000 LOOP PERFORM pgq.enqueue('sg', '{"n": 1}', group_key => 'k' || i);
  IF i % 1000 = 0 THEN COMMIT; END IF;
END LOOP; END $$;
DO $$ DECLARE j record; BEGIN FOR i IN 1..20000 LOOP
  SELECT id, attempt INTO j FROM pgq.claim('sg', 1); PERFORM pgq.complete(j.id, j.attempt);
  IF i % 1000 = 0 THEN COMMIT; END IF;
END LOOP; END $$;
DO $$ DECLARE j record; BEGIN FOR i IN 1..20000 LOOP
  SELECT id, attempt INTO j FROM pgq.claim('q', 1); PERFORM pgq.complete(j.id, j.attempt);
  IF i % 1000 = 0 THEN COMMIT; END IF;
END LOOP; END $$;
DO $$ DECLARE j record; BEGIN PERFORM set_config('pgq.debug_clock_offset', '2h', false);
  FOR i IN 1..20000 LOOP
  SELECT id, attempt INTO j FROM pgq.claim('f', 1); PERFORM pgq.complete(j.id, j.attempt);
  IF i % 1000 = 0 THEN COMMIT; END IF;
END LOOP; END $$;
SQL
)
    # A loop that stopped on an error would be timed to the error.
    if grep -q ERROR <<<"$out"; then echo "$out" >&2; exit 1; fi
    times=$(grep -o 'Time: [0-9.]*' <<<"$out" | awk '{print $2}' | tr '\n' ' ')
    echo "round $round $build: enqueue, claim+complete, dedupe enqueue, grouped enqueue, grouped claim+complete, append, next_batch+finish_batch, history claim+complete, claim+fail, priorities enqueue, priorities claim+complete (ms per 20,000), deep group claim+complete (ms per 1,000), sparse groups enqueue, sparse groups claim+complete, dedupe claim+complete, retried claim+complete (ms per 20,000): $times"
  done
done
stop_cluster "$DIR"; rm -rf "$DIR"
install_build "$PGQ_ROOT"
