#!/usr/bin/env bash
# Smoke test of scripts/brokers.sh: a RabbitMQ node (AMQP 25700, so 25700-25707)
# and a NATS server (25710, monitoring 25711) in a temporary directory, each
# answering with a confirmed persistent message; kill -9 and restart of both
# keep that message; SIGSTOP/SIGCONT hang and revive them; at the end no
# process of theirs and no listener on their ports remains. Bounded by
# SMOKE_TIMEOUT seconds (default 170; it takes about 25). KEEP=1 keeps the
# directory. Last line: "brokers smoke: N passed, M failed".
if [[ -z ${_PGQ_SMOKE_BOUNDED:-} ]]; then
  _PGQ_SMOKE_BOUNDED=1 exec timeout -k 15 "${SMOKE_TIMEOUT:-170}" bash "$0" "$@"
fi
source "$(dirname "$0")/../../scripts/lib.sh"

AMQP_PORT="${SMOKE_AMQP_PORT:-25700}"
NATS_PORT="${SMOKE_NATS_PORT:-25710}"
passed=0
failed=0
started=$SECONDS

ok() { echo "ok - $1"; passed=$((passed + 1)); }
not_ok() { echo "not ok - $1"; failed=$((failed + 1)); }
check() {  # check NAME CMD...: CMD's success is the check's
  local name="$1"; shift
  if "$@"; then ok "$name"; else not_ok "$name"; fi
}
require() {  # require NAME CMD...: a check that the rest depends on
  local before=$failed
  check "$@"
  if ((failed > before)); then echo "# cannot go on without: $1"; exit 1; fi
}
check_eq() {  # check_eq NAME EXPECTED CMD...: CMD prints EXPECTED
  local name="$1" want="$2" got; shift 2
  got="$("$@" 2>&1)" || true
  if [[ $got == "$want" ]]; then ok "$name"; else not_ok "$name (want '$want', got '$got')"; fi
}
secs() { echo "$((SECONDS - $1)) s"; }

ensure_broker_packages
id -u "$PGQ_BROKER_USER" >/dev/null 2>&1 || { echo "no OS user $PGQ_BROKER_USER (scripts/lib.sh's ensure_packages creates it)" >&2; exit 1; }
work="$(mktemp -d /tmp/pgq_brokers_smoke.XXXXXX)"
chmod 755 "$work"
rmq="$work/rmq" nats="$work/nats"

finish() {
  stop_rabbitmq "$rmq" >/dev/null 2>&1 || true
  stop_nats "$nats" >/dev/null 2>&1 || true
  if ((failed == 0)) && [[ ${KEEP:-0} != 1 ]]; then rm -rf "$work"; else echo "left for a look: $work"; fi
  echo "brokers smoke: $passed passed, $failed failed"
}
trap finish EXIT
trap 'not_ok "time-out or interrupt"; exit 1' TERM INT

probe="$work/probe"
require "probe builds (librabbitmq-dev, libnats-dev)" cc -O1 -o "$probe" "$PGQ_ROOT/test/brokers/probe.c" -lrabbitmq -lnats

# Only loopback listeners on PORTs (IPv4 127.0.0.1 or IPv6 ::1).
only_loopback() {
  local port addrs
  for port in "$@"; do
    addrs="$(ss -Htln "sport = :$port" | awk '{ print $4 }')"
    [[ -n $addrs ]] || { echo "nothing listens on $port" >&2; return 1; }
    if grep -vqE '^(127\.0\.0\.1|\[::1\]):' <<<"$addrs"; then echo "$port: $addrs" >&2; return 1; fi
  done
}
no_listener() {
  local port
  for port in "$@"; do _brk_port_free "$port" || { ss -Htlnp "sport = :$port" >&2; return 1; }; done
}
none_alive() {
  local p
  for p in "$@"; do _brk_alive "$p" && { ps -o pid=,user=,args= -p "$p" >&2; return 1; }; done
  return 0
}
state_is() { [[ $(ps -o stat= -p "$1") == "$2"* ]]; }

# --- RabbitMQ
t=$SECONDS
require "RabbitMQ starts" start_rabbitmq "$rmq" "$AMQP_PORT"
echo "# RabbitMQ up in $(secs "$t")"
check "RabbitMQ listens on loopback only (AMQP, epmd, distribution)" \
  only_loopback "$AMQP_PORT" $((AMQP_PORT + 1)) $((AMQP_PORT + 2))
check "RabbitMQ runs as $PGQ_BROKER_USER" test "$(ps -o user= -p "$(rmq_pid "$rmq")")" == "$PGQ_BROKER_USER"
check "publish to a durable queue, confirmed" "$probe" amqp-publish "$AMQP_PORT" smoke_q "hello"
check_eq "get it back" "hello" "$probe" amqp-get "$AMQP_PORT" smoke_q
check "persistent message for the crash, confirmed" "$probe" amqp-publish "$AMQP_PORT" smoke_q "survivor"
check_eq "rabbitmqctl sees the durable queue with 1 message" "smoke_q	true	1" \
  rmq_cli "$rmq" rabbitmqctl -q list_queues --no-table-headers name durable messages

# --- NATS JetStream
t=$SECONDS
require "NATS starts" start_nats "$nats" "$NATS_PORT"
echo "# NATS up in $(secs "$t")"
check "NATS listens on loopback only" only_loopback "$NATS_PORT" $((NATS_PORT + 1))
jsz="$(brk_http_get $((NATS_PORT + 1)) /jsz || true)"
check "/jsz: JetStream enabled with its store in the directory" grep -q "\"store_dir\": \"$nats/jetstream\"" <<<"$jsz"
check_eq "JetStream publish, acknowledged" "seq=1 duplicate=0" "$probe" nats-publish "$NATS_PORT" SMOKE smoke.a "hello" id-1
check_eq "same message id again: a duplicate" "seq=1 duplicate=1" "$probe" nats-publish "$NATS_PORT" SMOKE smoke.a "hello" id-1
check_eq "stream holds 1 message" "1" "$probe" nats-count "$NATS_PORT" SMOKE

# --- kill -9 and restart
beam="$(rmq_pid "$rmq")"
beam_tree="$(_brk_tree_pids "$beam")"
check "kill -9 RabbitMQ" kill9_rabbitmq "$rmq"
check "its processes are gone" none_alive $beam_tree
check "its AMQP port is closed" no_listener "$AMQP_PORT"
t=$SECONDS
require "RabbitMQ restarts" restart_rabbitmq "$rmq"
echo "# RabbitMQ restarted in $(secs "$t")"
check "restart is a new process" test "$(rmq_pid "$rmq")" != "$beam"
# The node may answer before its durable queues are recovered (seen once:
# basic.get refused just after await_startup): a refused get is asked
# again, for 15 s at most; an empty queue or a wrong message is not.
get_recovered() {
  local out i
  for i in $(seq 30); do
    out="$("$probe" amqp-get "$AMQP_PORT" smoke_q 2>&1)"
    [[ $out == *"basic.get failed"* ]] || break
    sleep 0.5
  done
  echo "$out"
}
check_eq "the persistent message survived" "survivor" get_recovered

nats_before="$(nats_pid "$nats")"
check "kill -9 NATS" kill9_nats "$nats"
check "NATS is gone" none_alive "$nats_before"
require "NATS restarts" restart_nats "$nats"
check_eq "the JetStream message survived" "1" "$probe" nats-count "$NATS_PORT" SMOKE

# --- SIGSTOP / SIGCONT
check "pause RabbitMQ" pause_rabbitmq "$rmq"
check "its beam.smp is stopped" state_is "$(rmq_pid "$rmq")" T
check "a paused RabbitMQ does not confirm" eval "! timeout 4 '$probe' amqp-publish $AMQP_PORT smoke_q paused >/dev/null 2>&1"
check "resume RabbitMQ" resume_rabbitmq "$rmq"
check "confirms again after SIGCONT" "$probe" amqp-publish "$AMQP_PORT" smoke_q "after"
check_eq "and delivers" "after" "$probe" amqp-get "$AMQP_PORT" smoke_q

check "pause NATS" pause_nats "$nats"
check "a paused NATS does not answer /healthz" eval "! BRK_HTTP_TIMEOUT=3 brk_http_get $((NATS_PORT + 1)) /healthz >/dev/null 2>&1"
check "resume NATS" resume_nats "$nats"
check_eq "answers again after SIGCONT" "seq=2 duplicate=0" "$probe" nats-publish "$NATS_PORT" SMOKE smoke.a "after" id-2

# --- stop: nothing of theirs left
pids="$(_brk_tree_pids "$(rmq_pid "$rmq")") $(_brk_pid "$rmq/epmd.pid") $(nats_pid "$nats")"
t=$SECONDS
check "stop RabbitMQ" stop_rabbitmq "$rmq"
echo "# RabbitMQ stopped in $(secs "$t")"
check "stop NATS" stop_nats "$nats"
sleep 0.5
check "no process of theirs remains" none_alive $pids
# (the epmd port among them: an epmd a CLI call might have started on it)
check "no listener remains on their ports" no_listener $(seq "$AMQP_PORT" $((AMQP_PORT + 7))) "$NATS_PORT" $((NATS_PORT + 1))
echo "# took $(secs "$started")"
((failed == 0))
