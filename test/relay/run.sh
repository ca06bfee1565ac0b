#!/usr/bin/env bash
# The relay's fault-injection test (issue 20, ADR 0019): pgq-relay loses
# nothing, publishes nothing that rolled back and keeps each key's order
# while it, its broker and PostgreSQL are killed, paused and restarted.
#
# First the relay's contract case by case (test_relay_cli.py, against both
# brokers; PGQ_RELAY_CONTRACT=0 leaves it out). Then, for each broker
# (RabbitMQ, then NATS JetStream), the faults: 2 producers
# (produce.py) commit PGQ_RELAY_EVENTS events over 500 group keys, each with
# its key's sequence number, and roll back 10 % of their transactions on
# purpose; the relay (concurrency 4) forwards the queue to_broker to the
# broker; a consumer (ledger.c) writes every delivery to a ledger before
# acking it. Meanwhile, one after the other, each fault's window recorded:
#   - a SIGTERM restart of the relay (not a fault: no duplicate may come of it)
#   - kill -9 of the relay parked after a publish, before its confirm
#     (PGQ_RELAY_DEBUG_PARK=after-publish:N), then a new relay
#   - kill -9 of the relay parked after a confirm, before the complete
#   - an immediate restart of PostgreSQL (while the producers commit)
#   - kill -9 of the broker, then its restart
#   - SIGSTOP of the broker for 10 s
# A window ends when the system is healthy again (no job held by a dead
# claimer, jobs completed and delivered again) plus two leases. Then, once
# everything is delivered and the relay stopped with SIGTERM, check.py
# asserts: 0 lost, 0 phantoms, per-key first deliveries in sequence order,
# every duplicate inside a fault window (NATS: none in the relay-kill
# windows, JetStream drops a republished message id), the queue empty and no
# dead job.
#
# pgq-relay --stream (issue 21) the same way, smaller: its contract cases
# (test_stream_relay.py) after the queue's, and before each broker's queue
# faults a stream phase: the producers' events go from pgq.publish into the
# stream orders_s (pgq.subscribe(topic, stream => ...)), read by one relay
# (--stream orders_s, batches of 20) as the consumer pgq-relay, while
#   - a SIGTERM restart of the relay (no window)
#   - an immediate restart of PostgreSQL
#   - kill -9 of the relay, a standby relay (started beside it, waiting on
#     the stream's lock) taking over
#   - kill -9 of the relay parked in pgq.finish_batch, every message of its
#     batch confirmed (a test trigger holds the batch's closing update at an
#     advisory lock), then a new relay
#   - kill -9 of the broker, then its restart
# and check.py --stream judges it as the queue run: 0 lost, 0 phantoms,
# per-key order, duplicates only in windows (NATS: none in the relay-kill
# windows), at the end no event unfinished and no batch open.
#
# Knobs: PGQ_RELAY_BIN (default build/pgq-relay), PGQ_RELAY_EVENTS (20000),
# PGQ_RELAY_BROKERS ("rabbitmq nats"), PGQ_RELAY_PRODUCE_SECONDS (the least
# time the producers spread their commits over, 30; the faults stretch it to
# about 70 s), PGQ_RELAY_TIMEOUT (the whole run's bound, 600 s),
# PGQ_RELAY_VERBOSE=1 (the relay's --verbose), KEEP=1 (keep the work
# directory; it is kept anyway when a check failed), PGQ_RELAY_STREAM_EVENTS
# (the stream phase's events per broker, 5000; 0 leaves the phase out),
# PGQ_RELAY_CONTRACT_ONLY="WORD..." (only the contract cases whose name holds
# one of the words; with PGQ_RELAY_BROKERS=" " no fault run: a quick look).
# Ports: RabbitMQ 25720-25727, NATS 25730-25731, the contract tests' metrics
# endpoint 25745, PostgreSQL 55750 (PGQ_RELAY_AMQP_PORT, PGQ_RELAY_NATS_PORT,
# PGQ_RELAY_METRICS_PORT, PGQ_RELAY_PG_PORT move them). The TLS contract
# cases (test_relay_tls.py, issue 31; left out when PGQ_RELAY_CONTRACT_ONLY
# names no "tls" case) on certificates make_certs.sh makes: a RabbitMQ node
# 25760-25767 with amqps:// on 25768, NATS over TLS 25770-25771 (client
# certificate required) and 25772-25773 (not required)
# (PGQ_RELAY_TLS_AMQP_PORT, PGQ_RELAY_TLS_NATS_PORT move them). About 5
# minutes on two CPUs.
# Last line: "relay tests: N passed, M failed"; exit status 0 when none failed.
if [[ -z ${_PGQ_RELAY_BOUNDED:-} ]]; then
  _PGQ_RELAY_BOUNDED=1 exec timeout -k 20 "${PGQ_RELAY_TIMEOUT:-600}" bash "$0" "$@"
fi
source "$(dirname "$0")/../../scripts/lib.sh"
source "$(dirname "$0")/common.sh"

RELAY="${PGQ_RELAY_BIN:-$PGQ_ROOT/build/pgq-relay}"
EVENTS="${PGQ_RELAY_EVENTS:-20000}"
BROKERS="${PGQ_RELAY_BROKERS:-rabbitmq nats}"
PRODUCE_SECONDS="${PGQ_RELAY_PRODUCE_SECONDS:-30}"
STREAM_EVENTS="${PGQ_RELAY_STREAM_EVENTS:-5000}"
AMQP_PORT="${PGQ_RELAY_AMQP_PORT:-25720}"
NATS_PORT="${PGQ_RELAY_NATS_PORT:-25730}"
METRICS_PORT="${PGQ_RELAY_METRICS_PORT:-25745}"   # the contract tests' relay's --metrics-listen
PG_PORT="${PGQ_RELAY_PG_PORT:-55750}"
TLS_AMQP_PORT="${PGQ_RELAY_TLS_AMQP_PORT:-25760}"  # its amqps:// listener: +8
TLS_NATS_PORT="${PGQ_RELAY_TLS_NATS_PORT:-25770}"  # +2: the one without client certificates
LEASE_S=3          # the queue's lease: a killed relay's jobs come back this fast
MARGIN_MS=$((2 * LEASE_S * 1000))   # a window ends this long after healthy again
PARK_NTH=25        # the message the debug hook parks the relay at
KEYS=500
PY=/usr/bin/python3   # Debian's, with python3-psycopg
HERE="$PGQ_ROOT/test/relay"


work="$(mktemp -d /tmp/pgq_relay_test.XXXXXX)"
chmod 755 "$work"
pg="$work/pg"
relay_pid="" ledger_pid="" producer_pids=() broker="" phase_dir=""
spare_pid="" gate_pid=""   # the stream phase's: the other relay of a takeover, the gate's session
# What a phase relays (the stream phase: --stream), how fault_done tells
# that the system is healthy again, and how long after that a window ends.
relay_target=(--queue to_broker --concurrency 4)
health_check=healthy_within
margin_ms=$MARGIN_MS
phase_label=""   # what the fault checks' lines start with

finish() {
  local rc=$? p
  # set -e ended the run somewhere no check was expecting it.
  if ((rc != 0 && failed == 0)); then not_ok "the run stopped early (exit status $rc)"; fi
  for p in $relay_pid $spare_pid; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${producer_pids[@]}" $ledger_pid $gate_pid; do kill -TERM "$p" 2>/dev/null || true; done
  stop_rabbitmq "$work/brokers/rabbitmq" >/dev/null 2>&1 || true
  stop_nats "$work/brokers/nats" >/dev/null 2>&1 || true
  stop_rabbitmq "$work/brokers/rabbitmq_tls" >/dev/null 2>&1 || true
  stop_nats "$work/brokers/nats_tls" >/dev/null 2>&1 || true
  stop_nats "$work/brokers/nats_tls_optional" >/dev/null 2>&1 || true
  stop_cluster "$pg"
  if ((failed == 0)) && [[ ${KEEP:-0} != 1 ]]; then rm -rf "$work"; else echo "# left for a look: $work"; fi
  echo "# took $((SECONDS - started)) s"
  echo "relay tests: $passed passed, $failed failed"
}
trap finish EXIT
trap 'not_ok "time-out or interrupt"; exit 1' TERM INT

# --- what the run needs
check_prerequisites
# fsync off: a kill -9 or an immediate restart is a crash of processes, not
# of the machine; what the server wrote stays in the page cache.
start_cluster "$pg" "$PG_PORT" "fsync = off" "lc_messages = 'C'" "log_min_messages = warning"

psql_db() { "$PG_BIN/psql" -h "$pg" -p "$PG_PORT" -U postgres -X -q -A -t -v ON_ERROR_STOP=1 "$@"; }

# --- the relay
# start_relay TAG [NAME=VALUE...]: a relay in the background with that
# environment; its output in $phase_dir/relay.N-TAG.log, its PID in relay_pid.
# --confirm-timeout 5 s, shorter than the broker's 10 s pause: the pause
# also drives the relay's reconnect and republish.
relay_runs=0
start_relay() {
  local tag="$1"; shift
  local extra=()
  [[ ${PGQ_RELAY_VERBOSE:-0} == 1 ]] && extra+=(--verbose)
  relay_runs=$((relay_runs + 1))
  relay_log="$phase_dir/relay.$relay_runs-$tag.log"
  env "$@" "$RELAY" --broker "$broker_url" --dsn "$dsn" "${relay_target[@]}" \
    --confirm-timeout '5 seconds' --stats-interval '10 seconds' "${broker_args[@]}" "${extra[@]}" \
    >"$relay_log" 2>&1 &
  relay_pid=$!
}

# stop_relay: SIGTERM, then its exit status (bounded); counts a status
# other than 0 in term_bad.
term_ok=0 term_bad=0
stop_relay() {
  local deadline=$((SECONDS + 30)) rc=0
  kill -TERM "$relay_pid" 2>/dev/null || true
  while kill -0 "$relay_pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  if kill -0 "$relay_pid" 2>/dev/null; then
    echo "# relay $relay_pid still running 30 s after SIGTERM ($relay_log); kill -9"
    kill -KILL "$relay_pid" 2>/dev/null || true
  fi
  wait "$relay_pid" 2>/dev/null || rc=$?
  if ((rc == 0)); then term_ok=$((term_ok + 1)); else
    term_bad=$((term_bad + 1))
    echo "# relay exited $rc after SIGTERM; the end of $relay_log:"
    tail -n 5 "$relay_log" | sed 's/^/#   /'
  fi
  relay_pid=""
}

kill9_relay() {
  kill -KILL "$relay_pid" 2>/dev/null || true
  wait "$relay_pid" 2>/dev/null || true
  relay_pid=""
}


# --- health and windows

# A number from the database, or nothing while it is away.
db_number() { psql_db -d "$db" -c "$1" 2>/dev/null || true; }



# fault_done NAME KIND START_MS WHAT: waits for health, records the window
# [START_MS, healthy + two leases] and sleeps to its end, so that windows do
# not overlap and each duplicate has one fault to answer for.
fault_done() {
  local name="$1" kind="$2" start="$3" what="$4" t0 end
  t0="$(now_ms)"
  if "$health_check" 90; then
    end=$(($(now_ms) + margin_ms))
    ok "$phase_label: $what; healthy again $(secs_since_ms "$t0") s later"
  else
    end=$(($(now_ms) + margin_ms))
    not_ok "$phase_label: $what; not healthy again within 90 s (see $phase_dir)"
  fi
  echo "$name $kind $start $end" >>"$phase_dir/windows"
  sleep "$(awk -v a="$end" -v b="$(now_ms)" 'BEGIN { d = (a - b) / 1000; printf "%.3f", (d > 0 ? d : 0) }')"
}

# wait_for_line FILE TEXT SECONDS
wait_for_line() {
  local deadline=$((SECONDS + $3))
  until grep -qF "$2" "$1" 2>/dev/null; do
    ((SECONDS < deadline)) || return 1
    relay_alive || return 1
    sleep 0.1
  done
}

# --- the faults


graceful_restart() {
  local before=$term_bad
  stop_relay
  start_relay normal
  if ((term_bad == before)); then ok "$phase_label: relay restarted after SIGTERM (exit 0), no window"; else
    not_ok "$phase_label: relay restarted after SIGTERM (exit 0)"; fi
  sleep 2
}

relay_kill() {  # relay_kill after-publish|after-confirm
  local point="$1" start what held
  # The window opens before the running relay's SIGTERM: a job it gave back
  # is the parked relay's to publish again.
  start="$(now_ms)"
  stop_relay
  start_relay "park-$point" PGQ_RELAY_DEBUG_PARK="$point:$PARK_NTH"
  if wait_for_line "$relay_log" "pgq-relay: parked $point" 60; then
    # What the crash leaves leased (the parked relay is the only one): what
    # the next relay publishes again.
    held="$(db_number "SELECT running FROM pgq.queue_stats WHERE queue = 'to_broker'")"
    what="kill -9 of the relay parked $point (message $PARK_NTH; it held ${held:-?} jobs, --concurrency 4)"
  else
    what="kill -9 of the relay: never parked $point (no 'pgq-relay: parked $point' in $relay_log within 60 s)"
    not_ok "$phase_label: the relay parks $point:$PARK_NTH"
  fi
  kill9_relay
  start_relay normal
  fault_done "relay-kill-$point" relay-kill "$start" "$what"
}

broker_kill() {
  local start
  start="$(now_ms)"
  if ! "kill9_$broker" "$broker_dir"; then not_ok "$phase_label: kill -9 of the broker"; fi
  sleep 2   # down long enough for the relay to find it gone
  if ! "restart_$broker" "$broker_dir"; then not_ok "$phase_label: the broker restarts"; return; fi
  fault_done broker-kill broker "$start" "kill -9 of the broker and restart"
}

broker_pause() {
  local start
  start="$(now_ms)"
  "pause_$broker" "$broker_dir"
  sleep 10
  "resume_$broker" "$broker_dir"
  fault_done broker-pause broker "$start" "SIGSTOP of the broker for 10 s"
}

pg_restart() {
  local start
  start="$(now_ms)"
  if ! as_pg "$PG_BIN/pg_ctl" -D "$pg/data" -l "$pg/server.log" -m immediate -w restart >/dev/null; then
    not_ok "$phase_label: PostgreSQL restarts (immediate)"; return
  fi
  fault_done pg-restart postgres "$start" "immediate restart of PostgreSQL"
}

# --- the brokers

# start_broker rabbitmq|nats: unless it runs already; a failure is a check's.
start_broker() {
  local dir="$work/brokers/$1" t0=$SECONDS
  mkdir -p "$work/brokers"
  case $1 in
    rabbitmq)
      _brk_alive "$(rmq_pid "$dir" 2>/dev/null)" && return 0
      start_rabbitmq "$dir" "$AMQP_PORT" || { not_ok "RabbitMQ starts on $AMQP_PORT"; return 1; }
      ;;
    nats)
      _brk_alive "$(nats_pid "$dir" 2>/dev/null)" && return 0
      start_nats "$dir" "$NATS_PORT" || { not_ok "NATS starts on $NATS_PORT"; return 1; }
      ;;
    tls)  # the TLS cases' three, on make_certs.sh's certificates in $work/certs
      if ! bash "$HERE/make_certs.sh" "$work/certs" >"$work/certs.log" 2>&1; then
        not_ok "make_certs.sh makes the TLS tests' certificates (see $work/certs.log)"; return 1
      fi
      start_rabbitmq_tls "$work/brokers/rabbitmq_tls" "$TLS_AMQP_PORT" $((TLS_AMQP_PORT + 8)) "$work/certs" required ||
        { not_ok "RabbitMQ starts with amqps:// on $((TLS_AMQP_PORT + 8))"; return 1; }
      start_nats_tls "$work/brokers/nats_tls" "$TLS_NATS_PORT" "$work/certs" required ||
        { not_ok "NATS starts with TLS on $TLS_NATS_PORT"; return 1; }
      start_nats_tls "$work/brokers/nats_tls_optional" $((TLS_NATS_PORT + 2)) "$work/certs" optional ||
        { not_ok "NATS starts with TLS on $((TLS_NATS_PORT + 2))"; return 1; }
      ;;
  esac
  echo "# $1 up in $((SECONDS - t0)) s"
}

# --- the relay's contract, case by case (test_relay_cli.py: unittest, told
# here as TAP lines), against both brokers
run_contract() {
  local contract_db=relay_contract
  start_broker rabbitmq || return 0
  start_broker nats || return 0
  # The TLS brokers, unless no TLS case is to run.
  local tls_env=()
  if [[ -f $HERE/test_relay_tls.py && ( -z ${PGQ_RELAY_CONTRACT_ONLY:-} || ${PGQ_RELAY_CONTRACT_ONLY,,} == *tls* ) ]] &&
    start_broker tls; then
    tls_env=(PGQ_RELAY_TLS_CERTS="$work/certs" PGQ_AMQPS_PORT=$((TLS_AMQP_PORT + 8))
      PGQ_AMQPS_PLAIN_PORT="$TLS_AMQP_PORT" PGQ_NATS_TLS_PORT="$TLS_NATS_PORT"
      PGQ_NATS_TLS_OPTIONAL_PORT=$((TLS_NATS_PORT + 2)))
  fi
  mkdir -p "$work/contract"
  psql_db -d postgres -c "CREATE DATABASE $contract_db"
  tally < <(cd "$HERE" && PGQ_TEST_DSN="host=$pg port=$PG_PORT user=postgres dbname=$contract_db" \
    PGQ_RELAY_BIN="$RELAY" PGQ_LEDGER_BIN="$work/ledger" PGQ_AMQP_PORT="$AMQP_PORT" \
    PGQ_NATS_PORT="$NATS_PORT" PGQ_RELAY_METRICS_PORT="$METRICS_PORT" PGQ_RELAY_TEST_DIR="$work/contract" \
    PGQ_RELAY_PG_DATA="$pg/data" PG_BIN="$PG_BIN" PGQ_OS_USER="$PGQ_OS_USER" \
    env "${tls_env[@]}" "$PY" - 2>&1 <<'PY'
import os
import sys
import unittest


class Tap(unittest.TestResult):
    """One "ok - " / "not ok - " line per test, its tracebacks as # lines."""

    def __init__(self):
        super().__init__()
        self.errors_of = {}
        self.skips = set()

    def _bad(self, test, err):
        self.errors_of.setdefault(test.id(), []).append(self._exc_info_to_string(err, test))
        if not isinstance(test, unittest.TestCase):  # setUpClass and the like: no stopTest
            self._say(test)

    addFailure = addError = _bad

    def addSubTest(self, test, subtest, err):
        if err is not None:
            self._bad(test, err)

    def addSkip(self, test, reason):
        self.skips.add(test.id())
        print(f"ok - contract: {test.id().split('.')[-1]} # skip {reason}", flush=True)

    def stopTest(self, test):
        if test.id() not in self.skips:
            self._say(test)

    def _say(self, test):
        name = test.id().split(".")[-1]
        errors = self.errors_of.get(test.id())
        print(("not ok - " if errors else "ok - ") + f"contract: {name}")
        for text in errors or []:
            for line in text.rstrip().splitlines():
                print("#   " + line)
        sys.stdout.flush()


sys.path.insert(0, ".")
names = ["test_relay_cli"] + [name for name in ("test_stream_relay", "test_relay_tls")
                              if os.path.exists(name + ".py")]
loader = unittest.TestLoader()
if os.environ.get("PGQ_RELAY_CONTRACT_ONLY"):
    loader.testNamePatterns = ["*" + w + "*" for w in os.environ["PGQ_RELAY_CONTRACT_ONLY"].split()]
loader.loadTestsFromNames(names).run(Tap())
PY
  )
}

# --- one broker, its faults
run_phase() {
  broker="$1"
  phase_dir="$work/$broker"
  broker_dir="$work/brokers/$broker"
  db="relay_$broker"
  dsn="host=$pg port=$PG_PORT user=postgres dbname=$db"
  relay_target=(--queue to_broker --concurrency 4) health_check=healthy_within margin_ms=$MARGIN_MS
  phase_label="$broker"
  mkdir -p "$phase_dir"
  chmod 755 "$phase_dir"
  : >"$phase_dir/windows"
  term_ok=0 term_bad=0 relay_runs=0
  local t0=$SECONDS routing

  psql_db -d postgres -c "CREATE DATABASE $db"
  psql_db -d "$db" >/dev/null <<SQL
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('to_broker', max_attempts => 100, lease => '$LEASE_S seconds');
SELECT pgq.create_topic('orders');
SELECT pgq.subscribe('orders', 'to_broker');
CREATE TABLE key_seq (key text PRIMARY KEY, seq integer NOT NULL);
INSERT INTO key_seq SELECT 'k' || lpad(i::text, 3, '0'), 0 FROM generate_series(0, $KEYS - 1) i;
CREATE TABLE produced (event_uuid uuid PRIMARY KEY, key text NOT NULL, seq integer NOT NULL,
                       producer integer NOT NULL, UNIQUE (key, seq));
SQL

  case $broker in
    rabbitmq)
      start_broker rabbitmq || return 0
      if ! "$work/ledger" amqp-setup "$AMQP_PORT" pgq relay_ledger; then not_ok "$broker: exchange and queue"; return; fi
      broker_url="amqp://guest:guest@127.0.0.1:$AMQP_PORT/"
      broker_args=(--exchange pgq)
      routing=orders
      "$work/ledger" amqp "$AMQP_PORT" relay_ledger "$phase_dir/ledger" 2>"$phase_dir/ledger.log" &
      ;;
    nats)
      start_broker nats || return 0
      if ! "$work/ledger" nats-setup "$NATS_PORT" PGQ 'pgq.>' ledger; then not_ok "$broker: stream and consumer"; return; fi
      broker_url="nats://127.0.0.1:$NATS_PORT"
      broker_args=(--subject-prefix pgq.)
      routing=pgq.orders
      "$work/ledger" nats "$NATS_PORT" PGQ ledger 'pgq.>' "$phase_dir/ledger" 2>"$phase_dir/ledger.log" &
      ;;
  esac
  ledger_pid=$!
  echo "# $broker: producing $EVENTS events"

  start_relay normal
  local p per=$((EVENTS / 2)) produce_t0=$SECONDS
  echo $(($(date +%s) + PRODUCE_SECONDS)) >"$phase_dir/deadline"
  producer_pids=()
  for p in 1 2; do
    "$PY" "$HERE/produce.py" --dsn "$dsn" --producer "$p" --events $((p == 1 ? per : EVENTS - per)) \
      --keys "$KEYS" --rollback 0.10 --deadline-file "$phase_dir/deadline" \
      --rolled-back "$phase_dir/rolled_back.$p" >"$phase_dir/producer.$p.log" 2>&1 &
    producer_pids+=($!)
  done

  # Each fault with the seconds it may take: the producers go on at least
  # that long, so that it meets commits in flight.
  sleep 3
  keep_producing 10; graceful_restart
  keep_producing 20; relay_kill after-publish
  keep_producing 20; relay_kill after-confirm
  keep_producing 20; pg_restart
  keep_producing 30; broker_kill
  keep_producing 25; broker_pause
  echo "# $broker: faults done $((SECONDS - produce_t0)) s after the producers started"

  local rc bad=0 deadline=$((SECONDS + PRODUCE_SECONDS + 120))
  for p in "${producer_pids[@]}"; do
    while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.3; done
    kill -TERM "$p" 2>/dev/null || true
    rc=0; wait "$p" || rc=$?
    ((rc == 0)) || bad=$((bad + 1))
  done
  producer_pids=()
  sed 's/^/# /' "$phase_dir"/producer.*.log
  if ((bad == 0)); then ok "$broker: the producers committed their $EVENTS events ($((SECONDS - produce_t0)) s)"; else
    not_ok "$broker: $bad producers failed (see $phase_dir/producer.*.log)"; fi

  local drain_t0=$SECONDS
  if "$PY" "$HERE/check.py" wait --dsn "$dsn" --ledger "$phase_dir/ledger" --seconds 120; then
    ok "$broker: everything delivered and the queue empty $((SECONDS - drain_t0)) s after the producers ended"
  else
    not_ok "$broker: everything delivered and the queue empty within 120 s"
  fi
  stop_relay
  if ((term_bad == 0)); then ok "$broker: the relay exits 0 on SIGTERM ($term_ok times)"; else
    not_ok "$broker: the relay exits 0 on SIGTERM ($term_bad of $((term_ok + term_bad)) times it did not)"; fi
  kill -TERM "$ledger_pid" 2>/dev/null || true
  wait "$ledger_pid" || true
  ledger_pid=""

  # (tally reads from a process substitution: in a pipeline it would count in a subshell)
  tally < <("$PY" "$HERE/check.py" judge --dsn "$dsn" --ledger "$phase_dir/ledger" --windows "$phase_dir/windows" \
    --rolled-back "$phase_dir"/rolled_back.* --broker "$broker" --routing "$routing" --events "$EVENTS" 2>&1 |
    sed "s/^\(not \)\{0,1\}ok - /&$broker: /")
  grep -h "claimed" "$relay_log" 2>/dev/null | tail -n 1 | sed 's/^/# the last relay: /' || true

  "stop_$broker" "$broker_dir" >/dev/null 2>&1 || true
  echo "# $broker: faults and checks took $((SECONDS - t0)) s"
}

# --- one broker, a stream's faults (pgq-relay --stream)

STREAM=orders_s
STREAM_KEYS=200
STREAM_PRODUCE_SECONDS=15
STREAM_MARGIN_MS=2000   # no lease: what a fault republishes comes when the relay is back
GATE_KEY=1885827443     # the finish gate's advisory lock (test_stream_relay.py's too)

# stream_healthy_within SECONDS (fault_done's health_check in the stream
# phase): the relay runs and since this call batches were finished and
# deliveries came (or, the producers done, nothing is left unfinished).
stream_stat() { db_number "SELECT $1 FROM pgq.stream_stats WHERE stream = '$STREAM' AND consumer = 'pgq-relay'"; }
stream_healthy_within() {
  local deadline=$((SECONDS + $1)) lines0 done0="" done_now left
  lines0="$(ledger_lines)"
  while ((SECONDS < deadline)); do
    relay_alive || { echo "# the relay died ($relay_log)"; return 1; }
    [[ -n $done0 ]] || done0="$(stream_stat finished_events)"
    done_now="$(stream_stat finished_events)"
    left="$(stream_stat "pending_events + batch_open::int")"
    if [[ -n $done0 && -n $done_now ]] &&
      { ((done_now > done0 && $(ledger_lines) > lines0)) || { [[ $left == 0 ]] && ! producing; }; }; then
      return 0
    fi
    sleep 0.3
  done
  return 1
}

# kill -9 of the relay with a standby beside it: the standby takes over.
stream_takeover() {
  local active_pid=$relay_pid start t0 what
  start_relay standby
  spare_pid=$active_pid   # the one to clean up should the run end here
  if ! wait_for_line "$relay_log" "standing by" 30; then
    not_ok "$broker stream: a second relay stands by ($relay_log)"
  fi
  start="$(now_ms)"
  kill -KILL "$active_pid" 2>/dev/null || true
  wait "$active_pid" 2>/dev/null || true
  spare_pid=""
  t0="$(now_ms)"
  if wait_for_line "$relay_log" "took over stream" 60; then
    what="kill -9 of the relay; the standby took over $(secs_since_ms "$t0") s later"
  else
    what="kill -9 of the relay; the standby did not take over within 60 s"
    not_ok "$broker stream: the standby relay takes over ($relay_log)"
  fi
  fault_done relay-kill-standby relay-kill "$start" "$what"
}

# kill -9 of the relay parked in pgq.finish_batch: the gate (a trigger on
# pgq.stream_consumers) holds the update that finishes a batch while a
# session holds the advisory lock GATE_KEY; the relay is killed with every
# message of its batch confirmed, its session (which nothing tells of the
# crash while it waits) ended too, the gate opened, a new relay started.
stream_parked_kill() {
  local start waiter="" held="" what deadline=$((SECONDS + 60))
  start="$(now_ms)"
  : >"$phase_dir/gate"
  (echo "SELECT pg_advisory_lock($GATE_KEY);"; while [[ -e $phase_dir/gate ]]; do sleep 0.1; done) |
    psql_db -d "$db" >/dev/null &
  gate_pid=$!
  while [[ -z $waiter ]] && ((SECONDS < deadline)) && relay_alive; do
    waiter="$(db_number "SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                          WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objid::bigint = $GATE_KEY
                            AND a.application_name = 'pgq-relay'")"
    [[ -n $waiter ]] || sleep 0.1
  done
  if [[ -n $waiter ]]; then
    held="$(stream_stat batch_open)/$(stream_stat pending_events)"
    what="kill -9 of the relay parked in pgq.finish_batch (batch open/events unfinished: $held)"
  else
    what="kill -9 of the relay: never parked in pgq.finish_batch within 60 s"
    not_ok "$broker stream: the relay parks in pgq.finish_batch"
  fi
  kill9_relay
  [[ -z $waiter ]] || db_number "SELECT pg_terminate_backend($waiter)" >/dev/null
  rm -f "$phase_dir/gate"
  wait "$gate_pid" 2>/dev/null || true
  gate_pid=""
  start_relay normal
  fault_done relay-kill-parked relay-kill "$start" "$what"
}

run_stream_phase() {
  broker="$1"
  phase_dir="$work/stream-$broker"
  broker_dir="$work/brokers/$broker"
  db="relay_stream_$broker"
  dsn="host=$pg port=$PG_PORT user=postgres dbname=$db"
  relay_target=(--stream "$STREAM" --concurrency 20)
  health_check=stream_healthy_within margin_ms=$STREAM_MARGIN_MS
  phase_label="$broker stream"
  mkdir -p "$phase_dir"
  chmod 755 "$phase_dir"
  : >"$phase_dir/windows"
  term_ok=0 term_bad=0 relay_runs=0
  local t0=$SECONDS routing

  psql_db -d postgres -c "CREATE DATABASE $db"
  psql_db -d "$db" >/dev/null <<SQL
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_stream('$STREAM');
SELECT pgq.register_consumer('$STREAM', 'pgq-relay');
SELECT pgq.create_topic('orders');
SELECT pgq.subscribe('orders', stream => '$STREAM');
CREATE TABLE key_seq (key text PRIMARY KEY, seq integer NOT NULL);
INSERT INTO key_seq SELECT 'k' || lpad(i::text, 3, '0'), 0 FROM generate_series(0, $STREAM_KEYS - 1) i;
CREATE TABLE produced (event_uuid uuid PRIMARY KEY, key text NOT NULL, seq integer NOT NULL,
                       producer integer NOT NULL, UNIQUE (key, seq));
CREATE FUNCTION finish_gate() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN PERFORM pg_advisory_xact_lock_shared($GATE_KEY); RETURN NEW; END \$\$;
CREATE TRIGGER finish_gate BEFORE UPDATE ON pgq.stream_consumers FOR EACH ROW
  WHEN (OLD.batch_open AND NOT NEW.batch_open) EXECUTE FUNCTION finish_gate();
SQL

  case $broker in
    rabbitmq)
      start_broker rabbitmq || return 0
      if ! "$work/ledger" amqp-setup "$AMQP_PORT" pgqs stream_ledger; then not_ok "$broker stream: exchange and queue"; return; fi
      broker_url="amqp://guest:guest@127.0.0.1:$AMQP_PORT/"
      broker_args=(--exchange pgqs)
      routing=orders
      "$work/ledger" amqp "$AMQP_PORT" stream_ledger "$phase_dir/ledger" 2>"$phase_dir/ledger.log" &
      ;;
    nats)
      start_broker nats || return 0
      if ! "$work/ledger" nats-setup "$NATS_PORT" PGQS 'pgqs.>' ledger; then not_ok "$broker stream: stream and consumer"; return; fi
      broker_url="nats://127.0.0.1:$NATS_PORT"
      broker_args=(--subject-prefix pgqs.)
      routing=pgqs.orders
      "$work/ledger" nats "$NATS_PORT" PGQS ledger 'pgqs.>' "$phase_dir/ledger" 2>"$phase_dir/ledger.log" &
      ;;
  esac
  ledger_pid=$!
  echo "# $broker stream: producing $STREAM_EVENTS events"

  start_relay normal
  local p per=$((STREAM_EVENTS / 2)) produce_t0=$SECONDS
  echo $(($(date +%s) + STREAM_PRODUCE_SECONDS)) >"$phase_dir/deadline"
  producer_pids=()
  for p in 1 2; do
    "$PY" "$HERE/produce.py" --dsn "$dsn" --producer "$p" --events $((p == 1 ? per : STREAM_EVENTS - per)) \
      --keys "$STREAM_KEYS" --rollback 0.10 --deadline-file "$phase_dir/deadline" \
      --rolled-back "$phase_dir/rolled_back.$p" >"$phase_dir/producer.$p.log" 2>&1 &
    producer_pids+=($!)
  done

  sleep 2
  keep_producing 6; graceful_restart
  keep_producing 8; pg_restart
  keep_producing 8; stream_takeover
  keep_producing 8; stream_parked_kill
  keep_producing 15; broker_kill
  echo "# $broker stream: faults done $((SECONDS - produce_t0)) s after the producers started"

  local rc bad=0 deadline=$((SECONDS + STREAM_PRODUCE_SECONDS + 120))
  for p in "${producer_pids[@]}"; do
    while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.3; done
    kill -TERM "$p" 2>/dev/null || true
    rc=0; wait "$p" || rc=$?
    ((rc == 0)) || bad=$((bad + 1))
  done
  producer_pids=()
  sed 's/^/# /' "$phase_dir"/producer.*.log
  if ((bad == 0)); then ok "$broker stream: the producers committed their $STREAM_EVENTS events ($((SECONDS - produce_t0)) s)"; else
    not_ok "$broker stream: $bad producers failed (see $phase_dir/producer.*.log)"; fi

  local drain_t0=$SECONDS
  if "$PY" "$HERE/check.py" wait --dsn "$dsn" --ledger "$phase_dir/ledger" --stream "$STREAM" --seconds 120; then
    ok "$broker stream: everything delivered and finished $((SECONDS - drain_t0)) s after the producers ended"
  else
    not_ok "$broker stream: everything delivered and finished within 120 s"
  fi
  stop_relay
  if ((term_bad == 0)); then ok "$broker stream: the relay exits 0 on SIGTERM ($term_ok times)"; else
    not_ok "$broker stream: the relay exits 0 on SIGTERM ($term_bad of $((term_ok + term_bad)) times it did not)"; fi
  kill -TERM "$ledger_pid" 2>/dev/null || true
  wait "$ledger_pid" || true
  ledger_pid=""

  tally < <("$PY" "$HERE/check.py" judge --dsn "$dsn" --ledger "$phase_dir/ledger" --windows "$phase_dir/windows" \
    --rolled-back "$phase_dir"/rolled_back.* --broker "$broker" --routing "$routing" --events "$STREAM_EVENTS" \
    --stream "$STREAM" 2>&1 | sed "s/^\(not \)\{0,1\}ok - /&$broker stream: /")
  grep -h "batches" "$relay_log" 2>/dev/null | tail -n 1 | sed 's/^/# the last relay: /' || true
  echo "# $broker stream: faults and checks took $((SECONDS - t0)) s"
}

if [[ ${PGQ_RELAY_CONTRACT:-1} == 1 && -f $HERE/test_relay_cli.py ]]; then
  t=$SECONDS
  run_contract
  echo "# contract: $((SECONDS - t)) s"
fi
for b in $BROKERS; do
  case $b in
    rabbitmq | nats)
      if ((STREAM_EVENTS > 0)); then run_stream_phase "$b"; fi
      run_phase "$b"
      ;;
    *) not_ok "unknown broker '$b' in PGQ_RELAY_BROKERS" ;;
  esac
done
((failed == 0))
