#!/usr/bin/env bash
# Instructions per call of two builds on the per-call paths, counted by
# valgrind (callgrind) in one single-user backend (preloaded, no workers):
# deterministic, so it still compares builds when other work shares the
# machine and bench/ab_builds.sh's wall-clock rounds spread by 2x. Prints,
# per build, the instructions per call of N enqueues, claim+complete
# pairs (of a queue without history, and of one keeping its completed jobs),
# appends to a stream, and next_batch (one event) + finish_batch
# pairs, each above an idle run of the same backend. Reinstalls this tree
# at the end. Installs valgrind when it is missing.
#
#   mkdir /tmp/old && git archive <rev> | tar -x -C /tmp/old && make -C /tmp/old
#   OLD=/tmp/old bash bench/ab_instructions.sh          (N=2000: about a minute)
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../scripts/lib.sh"

# valgrind is the bench's own need, not the build's: installed here.
if ! command -v valgrind >/dev/null; then
  [[ $(id -u) -eq 0 ]] || { echo "ab_instructions.sh needs valgrind (apt-get install valgrind)" >&2; exit 1; }
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
fi

OLD="${OLD:?set OLD to the built tree of the other revision}"
N="${N:-2000}"
DIR="${PGQ_AB_DIR:-/tmp/pgq_ab_instructions}"

# Runs SQL $1 in a single-user backend of database t, the command $2
# (postgres, or valgrind ... postgres); prints the instructions counted.
single() {
  local preload=(-c shared_preload_libraries=pgq_cpp)
  local line="${1//$'\n'/ }"  # single-user mode ends a command at a newline
  as_pg bash -c 'printf "%s\n" "$1" | $2 --single -D "$3/data" "${@:5}" t >/dev/null 2>"$3/vg.err" &&
                 grep -h Collected "$3/vg.err" | awk "{gsub(/,/, \"\", \$4); print \$4}"' \
    _ "$line" "$2" "$DIR" x "${preload[@]}"
}

counted() {  # sql: instructions per call above an idle run
  local total
  total=$(single "$1" "valgrind --tool=callgrind --callgrind-out-file=/dev/null $PG_BIN/postgres")
  echo $(( (total - idle) / N ))
}

for build in "$OLD" "$PGQ_ROOT"; do
  install_build "$build"
  rm -rf "$DIR"; mkdir -p "$DIR"; chown postgres "$DIR"
  as_pg "$PG_BIN/initdb" -D "$DIR/data" -U postgres --auth=trust --no-sync >/dev/null
  as_pg bash -c "printf 'CREATE DATABASE t;\n' | '$PG_BIN/postgres' --single -D '$DIR/data' postgres >/dev/null 2>&1"
  single "CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('q');
SELECT pgq.create_queue('h', keep_completed => '1 hour');
SELECT count(*) FROM pgq.enqueue_many('h', array_fill('{}'::jsonb, ARRAY[$N]));
SELECT pgq.create_stream('s');
SELECT pgq.register_consumer('s', 'c');
DO \$\$ BEGIN FOR i IN 1..$N LOOP PERFORM pgq.append('s', '{}'); END LOOP; END \$\$;" "$PG_BIN/postgres" >/dev/null
  idle=$(single "SELECT 1;" "valgrind --tool=callgrind --callgrind-out-file=/dev/null $PG_BIN/postgres")
  enqueue=$(counted "DO \$\$ BEGIN FOR i IN 1..$N LOOP PERFORM pgq.enqueue('q', '{}'); END LOOP; END \$\$;")
  claim=$(counted "DO \$\$ DECLARE j record; BEGIN FOR i IN 1..$N LOOP
  SELECT id, attempt INTO j FROM pgq.claim('q', 1); PERFORM pgq.complete(j.id, j.attempt);
END LOOP; END \$\$;")
  history=$(counted "DO \$\$ DECLARE j record; BEGIN FOR i IN 1..$N LOOP
  SELECT id, attempt INTO j FROM pgq.claim('h', 1); PERFORM pgq.complete(j.id, j.attempt);
END LOOP; END \$\$;")
  append=$(counted "DO \$\$ BEGIN FOR i IN 1..$N LOOP PERFORM pgq.append('s', '{}'); END LOOP; END \$\$;")
  read=$(counted "DO \$\$ DECLARE b bigint; BEGIN FOR i IN 1..$N LOOP
  SELECT batch_id INTO b FROM pgq.next_batch('s', 'c', 1); PERFORM pgq.finish_batch(b);
  IF i % 100 = 0 THEN COMMIT; END IF;
END LOOP; END \$\$;")
  echo "$build: instructions per call (N=$N): enqueue $enqueue, claim+complete $claim, history claim+complete $history, append $append, next_batch+finish_batch $read"
done
rm -rf "$DIR"
install_build "$PGQ_ROOT"
