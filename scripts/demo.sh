#!/usr/bin/env bash
# `make demo`: installs what is missing, builds and installs pgq_cpp, starts a
# throwaway cluster and runs demo/scenario.py: welcome emails through a pgq
# queue (a crashing worker, a poisoned job), then a sales CRM (demo/crm.py)
# and a satellite-pass backend with a schedule, an outbox and in-database
# handlers (demo/satellites.py).
#
#   bash scripts/demo.sh          run the demo (what `make demo` does)
#   bash scripts/demo.sh stop     stop the demo cluster and delete /tmp/pgq_demo
#
# Exits non-zero if the scenario sees something that must not happen (a lost
# or duplicated job, a lost CRM race, a recomputation missed or doubled): it
# doubles as an end-to-end smoke test.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DEMO_DIR=/tmp/pgq_demo
DEMO_PORT=55450
DEMO_DB=shop
# Debian's interpreter, which python3-psycopg belongs to (a pyenv or venv
# python3 earlier in PATH would not see it).
PYTHON=/usr/bin/python3

demo_psql() {
  local db="$1"; shift
  as_pg "$PG_BIN/psql" -h "$DEMO_DIR" -p "$DEMO_PORT" -U postgres -d "$db" -qX -v ON_ERROR_STOP=1 "$@"
}

stop_demo() {
  stop_cluster "$DEMO_DIR"
  rm -rf "$DEMO_DIR"
}

case "${1:-run}" in
  run) ;;
  stop)
    stop_demo
    say "demo cluster stopped, $DEMO_DIR deleted"
    exit 0
    ;;
  -h|--help|help)
    sed -n '2,10s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
    exit 0
    ;;
  *)
    echo "usage: bash scripts/demo.sh [run|stop]" >&2
    exit 2
    ;;
esac

ensure_packages
build_and_install

say "starting a throwaway cluster in $DEMO_DIR (port $DEMO_PORT)"
stage=cluster
on_exit() {
  local rc=$?
  if ((rc == 0)); then return; fi
  if [[ $stage == cluster && -f $DEMO_DIR/server.log ]]; then
    echo "the demo cluster did not start; end of $DEMO_DIR/server.log:" >&2
    tail -n 20 "$DEMO_DIR/server.log" >&2
  elif [[ $stage == scenario ]]; then
    echo >&2
    echo "demo FAILED (exit $rc). The cluster is left running for inspection:" >&2
    echo "  psql -h $DEMO_DIR -p $DEMO_PORT -U postgres $DEMO_DB" >&2
    echo "  bash scripts/demo.sh stop" >&2
  fi
}
trap on_exit EXIT

stop_demo
start_cluster "$DEMO_DIR" "$DEMO_PORT" \
  "fsync = off" "log_min_messages = warning" "lc_messages = 'C'"
demo_psql postgres -c "CREATE DATABASE $DEMO_DB"
demo_psql "$DEMO_DB" -c "CREATE EXTENSION pgq_cpp"

stage=scenario
say "running demo/scenario.py"
"$PYTHON" "$PGQ_ROOT/demo/scenario.py" \
  --dsn "host=$DEMO_DIR port=$DEMO_PORT user=postgres dbname=$DEMO_DB" \
  --server-log "$DEMO_DIR/server.log"
stage=finished
