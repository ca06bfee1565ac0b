# What test/relay/run.sh and test/relay/cluster.sh share: the verdict
# counters, the clock, the checks that the run has what it needs, and the
# health test of a fault's end. Sourced after scripts/lib.sh; the caller
# sets RELAY, PY, HERE and work, and defines db_number (a number from the
# database, or nothing while it is away), relay_pid, phase_dir and
# producer_pids.

passed=0
failed=0
started=$SECONDS
ok() { echo "ok - $1"; passed=$((passed + 1)); }
not_ok() { echo "not ok - $1"; failed=$((failed + 1)); }
# Echoes check.py's lines and counts its verdicts.
tally() {
  local line
  while IFS= read -r line; do
    echo "$line"
    case $line in
      "ok - "*) passed=$((passed + 1)) ;;
      "not ok - "*) failed=$((failed + 1)) ;;
    esac
  done
}
now_ms() { date +%s%3N; }
secs_since_ms() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }
relay_alive() { [[ -n $relay_pid ]] && kill -0 "$relay_pid" 2>/dev/null; }
ledger_lines() { wc -l <"$phase_dir/ledger" 2>/dev/null || echo 0; }
producing() {
  local p
  for p in "${producer_pids[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done
  return 1
}
# keep_producing SECONDS: the producers' last commit no sooner than that from now.
keep_producing() {
  local want=$(($(date +%s) + $1))
  if ((want > $(cat "$phase_dir/deadline"))); then
    echo "$want" >"$phase_dir/deadline.new"
    mv "$phase_dir/deadline.new" "$phase_dir/deadline"
  fi
}
# healthy_within SECONDS: the relay runs, no job of the queue is held by a
# claimer that is gone, and since this call jobs were completed and
# deliveries came (or, the producers done, nothing is left to relay).
healthy_within() {
  local deadline=$((SECONDS + $1)) lines0 done0="" gone left done_now
  lines0="$(ledger_lines)"
  while ((SECONDS < deadline)); do
    relay_alive || { echo "# the relay died ($relay_log)"; return 1; }
    [[ -n $done0 ]] || done0="$(db_number "SELECT done_recent FROM pgq.queue_stats WHERE queue = 'to_broker'")"
    gone="$(db_number "SELECT count(*) FROM pgq.running_jobs WHERE queue = 'to_broker' AND NOT claimer_connected")"
    left="$(db_number "SELECT ready + scheduled + running FROM pgq.queue_stats WHERE queue = 'to_broker'")"
    done_now="$(db_number "SELECT done_recent FROM pgq.queue_stats WHERE queue = 'to_broker'")"
    if [[ $gone == 0 && -n $done0 && -n $done_now ]] &&
      { ((done_now > done0 && $(ledger_lines) > lines0)) || { [[ $left == 0 ]] && ! producing; }; }; then
      return 0
    fi
    sleep 0.3
  done
  return 1
}

# The packages, the relay, the extension, psycopg, and the consumer (built
# into $work/ledger).
check_prerequisites() {
  ensure_broker_packages
  if [[ ! -x $RELAY ]]; then
    not_ok "no relay at $RELAY (cmake -S . -B build && cmake --build build --target pgq-relay)"
    exit 1
  fi
  if [[ ! -f $("$PG_BIN/pg_config" --sharedir)/extension/pgq_cpp.control ]]; then
    not_ok "pgq_cpp is installed in $PG_BIN/.. (make install)"
    exit 1
  fi
  if ! "$PY" -c 'import psycopg' 2>/dev/null; then
    not_ok "$PY cannot import psycopg (apt-get install python3-psycopg)"
    exit 1
  fi
  if cc -O2 -Wall -o "$work/ledger" "$HERE/ledger.c" -lrabbitmq -lnats; then
    ok "ledger.c builds (librabbitmq-dev, libnats-dev)"
  else
    not_ok "ledger.c builds"
    exit 1
  fi
}
