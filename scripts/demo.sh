#!/usr/bin/env bash
# `make demo`: installs what is missing, builds and installs pgq_cpp, starts a
# throwaway cluster and runs demo/scenario.py: welcome emails through a pgq
# queue (a crashing worker, a poisoned job), then a sales CRM (demo/crm.py),
# a satellite-pass backend with a schedule, an outbox and in-database
# handlers (demo/satellites.py) and one queue shared by tenants, fair turns
# and max_pending (demo/tenants.py). The web dashboard (dashboard/) watches the
# demo database while the scenario runs, at http://127.0.0.1:55460/ without a
# login (it listens on loopback only); at the end headless chromium saves
# screenshots of its overview and of a dead job's page in demo/out/.
#
#   bash scripts/demo.sh             run the demo (what `make demo` does)
#   bash scripts/demo.sh dashboard   the dashboard again, in the foreground, on
#                                    the demo cluster left running (Ctrl-C stops it)
#   bash scripts/demo.sh stop        stop the demo cluster and delete /tmp/pgq_demo
#
# Exits non-zero if the scenario sees something that must not happen (a lost
# or duplicated job, a lost CRM race, a recomputation missed or doubled, a
# tenant's jobs not served in turn), or if the dashboard does not start or its
# pages log an error: it doubles as an end-to-end smoke test.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DEMO_DIR=/tmp/pgq_demo
DEMO_PORT=55450
DEMO_DB=shop
# Debian's interpreter, which python3-psycopg belongs to (a pyenv or venv
# python3 earlier in PATH would not see it).
PYTHON=/usr/bin/python3
# The dashboard: no login, so loopback only. node-postgres takes a socket
# directory as the URL's host, percent-encoded.
DASHBOARD_LISTEN=127.0.0.1:55460
DASHBOARD_URL="http://$DASHBOARD_LISTEN/"
DASHBOARD_DB="postgres://postgres@${DEMO_DIR//\//%2F}:$DEMO_PORT/$DEMO_DB"
DASHBOARD=(node "$PGQ_ROOT/dashboard/bin/pgq-cpp-dashboard.js" --database "$DASHBOARD_DB"
  --listen "$DASHBOARD_LISTEN" --insecure-no-auth --sample-interval 2)
DASHBOARD_PID="$DEMO_DIR/dashboard.pid"
DASHBOARD_LOG="$DEMO_DIR/dashboard.log"
SHOTS_DIR="$PGQ_ROOT/demo/out"

demo_psql() {
  local db="$1"; shift
  as_pg "$PG_BIN/psql" -h "$DEMO_DIR" -p "$DEMO_PORT" -U postgres -d "$db" -qX -v ON_ERROR_STOP=1 "$@"
}

# Starts the dashboard in the background (PID in $DASHBOARD_PID, output in
# $DASHBOARD_LOG) and waits until it says it listens (the port is its own,
# not another program's) and its overview answers 200: the page reads the
# database, so this also proves the connection.
start_dashboard() {
  "${DASHBOARD[@]}" >"$DASHBOARD_LOG" 2>&1 &
  echo $! >"$DASHBOARD_PID"
  local pid=$! deadline=$((SECONDS + 15)) status
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "the dashboard exited at start; $DASHBOARD_LOG:" >&2
      sed 's/^/  /' "$DASHBOARD_LOG" >&2
      return 1
    fi
    status=$(node -e '
      fetch(process.argv[1], { signal: AbortSignal.timeout(2000) })
        .then((res) => console.log(res.status), () => console.log("none"));' "$DASHBOARD_URL")
    [[ $status == 200 ]] && grep -q '^pgq-cpp-dashboard: listening on' "$DASHBOARD_LOG" && return 0
    if [[ $status == 5?? ]] || ((SECONDS >= deadline)); then
      echo "the dashboard did not answer 200 at $DASHBOARD_URL (last answer: $status); $DASHBOARD_LOG:" >&2
      sed 's/^/  /' "$DASHBOARD_LOG" >&2
      return 1
    fi
    sleep 0.2
  done
}

# Stops the dashboard the demo started (by its PID, if that process is still
# the dashboard); SIGKILL after 5 s.
stop_dashboard() {
  [[ -f $DASHBOARD_PID ]] || return 0
  local pid
  pid=$(<"$DASHBOARD_PID")
  rm -f "$DASHBOARD_PID"
  [[ $pid =~ ^[0-9]+$ ]] && grep -qa pgq-cpp-dashboard "/proc/$pid/cmdline" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in {1..50}; do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

stop_demo() {
  stop_dashboard
  stop_cluster "$DEMO_DIR"
  rm -rf "$DEMO_DIR"
}

case "${1:-run}" in
  run) ;;
  dashboard)
    if [[ ! -S $DEMO_DIR/.s.PGSQL.$DEMO_PORT ]]; then
      echo "no demo cluster running in $DEMO_DIR: run the demo first (make demo)" >&2
      exit 1
    fi
    ensure_node_modules "$PGQ_ROOT/dashboard"
    say "dashboard: $DASHBOARD_URL (Ctrl-C stops it; on a remote server:" \
      "ssh -L ${DASHBOARD_LISTEN#*:}:$DASHBOARD_LISTEN you@server)"
    exec "${DASHBOARD[@]}"
    ;;
  stop)
    stop_demo
    say "demo cluster stopped, $DEMO_DIR deleted"
    exit 0
    ;;
  -h|--help|help)
    sed -n '2,20s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
    exit 0
    ;;
  *)
    echo "usage: bash scripts/demo.sh [run|dashboard|stop]" >&2
    exit 2
    ;;
esac

ensure_packages
build_and_install

say "starting a throwaway cluster in $DEMO_DIR (port $DEMO_PORT)"
stage=cluster
on_exit() {
  local rc=$?
  stop_dashboard
  if ((rc == 0)); then return; fi
  if [[ $stage == cluster && -f $DEMO_DIR/server.log ]]; then
    echo "the demo cluster did not start; end of $DEMO_DIR/server.log:" >&2
    tail -n 20 "$DEMO_DIR/server.log" >&2
  elif [[ $stage == dashboard || $stage == scenario || $stage == screenshots ]]; then
    echo >&2
    case $stage in
      dashboard) echo "demo FAILED (exit $rc): the dashboard did not start (above)." >&2 ;;
      screenshots)
        echo "demo FAILED (exit $rc): the dashboard's screenshots failed (above)." >&2
        if [[ -s $DASHBOARD_LOG ]]; then
          echo "end of $DASHBOARD_LOG:" >&2
          tail -n 20 "$DASHBOARD_LOG" | sed 's/^/  /' >&2
        fi
        ;;
      *) echo "demo FAILED (exit $rc)." >&2 ;;
    esac
    echo "The cluster is left running for inspection:" >&2
    echo "  psql -h $DEMO_DIR -p $DEMO_PORT -U postgres $DEMO_DB" >&2
    if [[ $stage != dashboard ]]; then echo "  bash scripts/demo.sh dashboard   (then $DASHBOARD_URL)" >&2; fi
    echo "  bash scripts/demo.sh stop" >&2
  fi
}
trap on_exit EXIT

stop_demo
start_cluster "$DEMO_DIR" "$DEMO_PORT" \
  "fsync = off" "log_min_messages = warning" "lc_messages = 'C'"
demo_psql postgres -c "CREATE DATABASE $DEMO_DB"
demo_psql "$DEMO_DB" -c "CREATE EXTENSION pgq_cpp"

stage=dashboard
ensure_node_modules "$PGQ_ROOT/dashboard"
start_dashboard
say "dashboard: $DASHBOARD_URL (watch the scenario live; on a remote server:" \
  "ssh -L ${DASHBOARD_LISTEN#*:}:$DASHBOARD_LISTEN you@server)"

stage=scenario
say "running demo/scenario.py"
"$PYTHON" "$PGQ_ROOT/demo/scenario.py" \
  --dsn "host=$DEMO_DIR port=$DEMO_PORT user=postgres dbname=$DEMO_DB" \
  --server-log "$DEMO_DIR/server.log"

stage=screenshots
say "screenshots of the dashboard (headless chromium)"
node "$PGQ_ROOT/dashboard/scripts/screenshot.js" --url "$DASHBOARD_URL" --out "$SHOTS_DIR" --queue welcome_email
stage=finished
stop_dashboard
echo "the dashboard again, on the demo cluster left running: bash scripts/demo.sh dashboard" \
  "(then $DASHBOARD_URL; Ctrl-C stops it)"
