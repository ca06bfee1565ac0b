#!/usr/bin/env bash
# The relay against clusters (issue 20's longer test: `make test-cluster`,
# not part of `make test`). run.sh's load and judge (produce.py, ledger.c,
# check.py: 2 producers, PGQ_CLUSTER_EVENTS events over 500 group keys, 10 %
# of the transactions rolled back, the relay at --concurrency 4 on a queue
# with a 3 s lease), against two faults run.sh cannot make:
#
#   rabbitmq  a three-node RabbitMQ cluster on this machine and a quorum
#             queue (3 members) bound to the topic exchange pgq. The relay
#             gets the three nodes' URLs and the consumer (ledger) their
#             three ports; both start on node 1. While the producers
#             commit, the node the relay is connected to is killed (-9),
#             left down for a while (the queue keeps its majority), and
#             restarted; PGQ_CLUSTER_NODE_KILLS times (default 2: the second
#             time the node the relay moved to).
#   postgres  a primary and a synchronous standby; the producers and the
#             relay connect with multi-host conninfo (target_session_attrs
#             = read-write), the consumer to a single RabbitMQ node. While
#             the producers commit, the primary is stopped with
#             `pg_ctl stop -m immediate` and the standby promoted.
#             produce.py settles its unanswered COMMITs on the new primary
#             (the `produced` table).
#
# What a node kill can cost (RabbitMQ 3.10.8, Debian 12): a channel opened
# while the quorum queue elects a new leader (the relay and the ledger
# reconnect within a second) may be nacked, and its consumer left without
# deliveries, until the killed node is back; a channel opened a second later
# works. The relay takes a nack as "not now": it reconnects with backoff and
# publishes again, spending no attempt (until 6cf6dd2 it failed the job, and
# a run spent up to six attempts on some).
#
# Each fault's window runs from the fault to the system being healthy again
# (run.sh's test: no job held by a claimer that is gone, jobs completed and
# delivered since) plus two leases. Then check.py asserts, per part: 0 lost,
# 0 phantoms, per-key first deliveries in sequence order, every duplicate
# inside a fault window, the queue empty and no dead job.
#
# Knobs: PGQ_RELAY_BIN (default build/pgq-relay), PGQ_CLUSTER_PARTS
# ("rabbitmq postgres"), PGQ_CLUSTER_EVENTS (10000 per part),
# PGQ_CLUSTER_PRODUCE_SECONDS (40: the least time the producers spread their
# commits over; the faults stretch it), PGQ_CLUSTER_NODE_KILLS (2),
# PGQ_CLUSTER_NODE_DOWN (seconds a killed node stays down, 8),
# PGQ_CLUSTER_PREFETCH (the ledger's prefetch on the quorum queue, 1: a
# delivery the node kill lost comes back before any later one, so the
# ledger's order is the queue's, as with run.sh's NATS consumer),
# PGQ_CLUSTER_TIMEOUT (the whole run's bound, 1200 s), KEEP=1 (keep the work
# directory; it is kept anyway when a check failed).
# Ports: RabbitMQ nodes 25800-25807, 25810-25817, 25820-25827 (the cluster
# shares node 1's epmd on 25801; the postgres part's single node reuses
# 25800-25807 after the cluster is stopped), PostgreSQL 55832 (the rabbitmq
# part), 55830 and 55831 (the primary and the standby).
# About 4 minutes on two CPUs.
# Last line: "cluster tests: N passed, M failed"; exit status 0 when none failed.
if [[ -z ${_PGQ_CLUSTER_BOUNDED:-} ]]; then
  _PGQ_CLUSTER_BOUNDED=1 exec timeout -k 20 "${PGQ_CLUSTER_TIMEOUT:-1200}" bash "$0" "$@"
fi
source "$(dirname "$0")/../../scripts/lib.sh"
source "$(dirname "$0")/common.sh"

RELAY="${PGQ_RELAY_BIN:-$PGQ_ROOT/build/pgq-relay}"
EVENTS="${PGQ_CLUSTER_EVENTS:-10000}"
PARTS="${PGQ_CLUSTER_PARTS:-rabbitmq postgres}"
PRODUCE_SECONDS="${PGQ_CLUSTER_PRODUCE_SECONDS:-40}"
NODE_KILLS="${PGQ_CLUSTER_NODE_KILLS:-2}"
NODE_DOWN="${PGQ_CLUSTER_NODE_DOWN:-8}"
PREFETCH="${PGQ_CLUSTER_PREFETCH:-1}"
RMQ_PORTS=(25800 25810 25820)
RMQ_SHARED_EPMD=25801   # node 1's: the nodes find each other through it
PG_PORT=55832           # the rabbitmq part's PostgreSQL
PRIMARY_PORT=55830
STANDBY_PORT=55831
LEASE_S=3
MARGIN_MS=$((2 * LEASE_S * 1000))
KEYS=500
PY=/usr/bin/python3
HERE="$PGQ_ROOT/test/relay"

secs_between_ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }

work="$(mktemp -d /tmp/pgq_cluster_test.XXXXXX)"
chmod 755 "$work"
relay_pid="" ledger_pid="" producer_pids=()
rmq_dirs=()   # every RabbitMQ node started, in start order
pg_dirs=()    # every PostgreSQL cluster started

# Everything by PID or by its directory; RabbitMQ nodes in reverse order
# (a cluster's node 1 owns the shared epmd: stopped last).
finish() {
  local rc=$? p i
  if ((rc != 0 && failed == 0)); then not_ok "the run stopped early (exit status $rc)"; fi
  for p in $relay_pid; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${producer_pids[@]}" $ledger_pid; do kill -TERM "$p" 2>/dev/null || true; done
  for ((i = ${#rmq_dirs[@]} - 1; i >= 0; i--)); do stop_rabbitmq "${rmq_dirs[i]}" >/dev/null 2>&1 || true; done
  for p in "${pg_dirs[@]}"; do stop_cluster "$p"; done
  if ((failed == 0)) && [[ ${KEEP:-0} != 1 ]]; then rm -rf "$work"; else echo "# left for a look: $work"; fi
  echo "# took $((SECONDS - started)) s"
  echo "cluster tests: $passed passed, $failed failed"
}
trap finish EXIT
trap 'not_ok "time-out or interrupt"; exit 1' TERM INT

# --- what the run needs
check_prerequisites

# --- a part's database, relay, producers
# The part's globals: phase_dir, dsn (its conninfo: producers, relay,
# checks), broker_url, ledger_log.

psql_dsn() { "$PG_BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 -d "$dsn" "$@"; }

# A number from the database, or nothing while it is away.
db_number() { psql_dsn -c "$1" 2>/dev/null || true; }

# The schema run.sh's producers and judge expect, in the database of $dsn.
create_schema() {
  psql_dsn >/dev/null <<SQL
CREATE EXTENSION pgq_cpp;
SELECT pgq.create_queue('to_broker', max_attempts => 100, lease => '$LEASE_S seconds');
SELECT pgq.create_topic('orders');
SELECT pgq.subscribe('orders', 'to_broker');
CREATE TABLE key_seq (key text PRIMARY KEY, seq integer NOT NULL);
INSERT INTO key_seq SELECT 'k' || lpad(i::text, 3, '0'), 0 FROM generate_series(0, $KEYS - 1) i;
CREATE TABLE produced (event_uuid uuid PRIMARY KEY, key text NOT NULL, seq integer NOT NULL,
                       producer integer NOT NULL, UNIQUE (key, seq));
SQL
}

# Each line as it comes, after the time (s since the epoch, to the µs): the
# relay's log has none, and what it did when is what a fault window shows.
stamp_lines() {
  local line
  while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done
}

relay_runs=0
start_relay() {
  relay_runs=$((relay_runs + 1))
  relay_log="$phase_dir/relay.$relay_runs.log"
  "$RELAY" --broker "$broker_url" --dsn "$dsn" --queue to_broker --concurrency 4 \
    --confirm-timeout '5 seconds' --stats-interval '10 seconds' --exchange pgq \
    > >(stamp_lines >"$relay_log") 2>&1 &
  relay_pid=$!
}

# stop_relay: SIGTERM; a check of its exit status (bounded).
stop_relay() {
  local deadline=$((SECONDS + 30)) rc=0
  kill -TERM "$relay_pid" 2>/dev/null || true
  while kill -0 "$relay_pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  if kill -0 "$relay_pid" 2>/dev/null; then
    echo "# relay $relay_pid still running 30 s after SIGTERM ($relay_log); kill -9"
    kill -KILL "$relay_pid" 2>/dev/null || true
  fi
  wait "$relay_pid" 2>/dev/null || rc=$?
  if ((rc == 0)); then ok "$part: the relay exits 0 on SIGTERM"; else
    not_ok "$part: the relay exits 0 on SIGTERM (exit status $rc; the end of $relay_log:)"
    tail -n 5 "$relay_log" | sed 's/^/#   /'
  fi
  relay_pid=""
}


start_producers() {
  local p per=$((EVENTS / 2))
  echo $(($(date +%s) + PRODUCE_SECONDS)) >"$phase_dir/deadline"
  produce_t0=$SECONDS
  producer_pids=()
  for p in 1 2; do
    "$PY" "$HERE/produce.py" --dsn "$dsn" --producer "$p" --events $((p == 1 ? per : EVENTS - per)) \
      --keys "$KEYS" --rollback 0.10 --deadline-file "$phase_dir/deadline" \
      --rolled-back "$phase_dir/rolled_back.$p" >"$phase_dir/producer.$p.log" 2>&1 &
    producer_pids+=($!)
  done
}



# The producers' end, the drain, the relay's SIGTERM, the consumer's, and
# check.py's verdicts.
finish_part() {
  local p rc bad=0 deadline=$((SECONDS + PRODUCE_SECONDS + 180)) drain_t0
  for p in "${producer_pids[@]}"; do
    while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.3; done
    kill -TERM "$p" 2>/dev/null || true
    rc=0; wait "$p" || rc=$?
    ((rc == 0)) || bad=$((bad + 1))
  done
  producer_pids=()
  sed 's/^/# /' "$phase_dir"/producer.*.log
  if ((bad == 0)); then ok "$part: the producers committed their $EVENTS events ($((SECONDS - produce_t0)) s)"; else
    not_ok "$part: $bad producers failed (see $phase_dir/producer.*.log)"; fi

  drain_t0=$SECONDS
  if "$PY" "$HERE/check.py" wait --dsn "$dsn" --ledger "$phase_dir/ledger" --seconds 240; then
    ok "$part: everything delivered and the queue empty $((SECONDS - drain_t0)) s after the producers ended"
  else
    not_ok "$part: everything delivered and the queue empty within 240 s"
  fi
  grep -h "claimed" "$relay_log" 2>/dev/null | tail -n 1 | sed 's/^/# the relay: /' || true
  stop_relay
  kill -TERM "$ledger_pid" 2>/dev/null || true
  wait "$ledger_pid" || true
  ledger_pid=""
  sed 's/^/# /' "$ledger_log"

  # (tally reads from a process substitution: in a pipeline it would count in a subshell)
  tally < <("$PY" "$HERE/check.py" judge --dsn "$dsn" --ledger "$phase_dir/ledger" --windows "$phase_dir/windows" \
    --rolled-back "$phase_dir"/rolled_back.* --broker rabbitmq --routing orders --events "$EVENTS" 2>&1 |
    sed "s/^\(not \)\{0,1\}ok - /&$part: /")
}

# --- health and windows (run.sh's)


# fault_done NAME KIND START_MS WHAT: waits for health, records the window
# [START_MS, healthy + two leases] and sleeps to its end, so that windows do
# not overlap and each duplicate has one fault to answer for.
fault_done() {
  local name="$1" kind="$2" start="$3" what="$4" end
  if healthy_within 120; then
    ok "$part: $what; healthy again $(secs_since_ms "$start") s after the fault"
  else
    not_ok "$part: $what; not healthy again within 120 s (see $phase_dir)"
  fi
  end=$(($(now_ms) + MARGIN_MS))
  echo "$name $kind $start $end" >>"$phase_dir/windows"
  sleep "$(awk -v a="$end" -v b="$(now_ms)" 'BEGIN { d = (a - b) / 1000; printf "%.3f", (d > 0 ? d : 0) }')"
}

# count_in FILE TEXT: lines of FILE with TEXT.
count_in() {
  local n
  n="$(grep -cF "$2" "$1" 2>/dev/null)" || true
  echo "${n:-0}"
}

# wait_more FILE TEXT N SECONDS: until FILE has more than N lines with TEXT;
# prints the time then (ms since the epoch), nothing on time-out.
wait_more() {
  local deadline=$((SECONDS + $4))
  while ((SECONDS < deadline)); do
    if (($(count_in "$1" "$2") > $3)); then now_ms; return 0; fi
    sleep 0.1
  done
}

# "S.S" seconds from START_MS to T_MS, or "?" without T_MS.
secs_or_unknown() { if [[ -n $2 ]]; then secs_between_ms "$1" "$2"; else echo '?'; fi; }

# ================================================================ rabbitmq

# The node (1-3) of the last "connected to RabbitMQ 127.0.0.1:PORT" in FILE.
node_in_log() {
  local port i
  port="$(grep -o 'connected to RabbitMQ 127.0.0.1:[0-9]*' "$1" 2>/dev/null | tail -n 1 | sed 's/.*://')"
  for i in 0 1 2; do [[ $port == "${RMQ_PORTS[i]}" ]] && echo $((i + 1)); done
  return 0
}

# The quorum queue's members online (as node 1-3 numbers) and its leader,
# asked of node N: "leader 2, online 1 2 3".
queue_members() {
  local out
  out="$(rmq_cli "${cluster_dirs[$1 - 1]}" rabbitmqctl -q list_queues --no-table-headers name leader online 2>/dev/null |
    awk '$1 == "relay_ledger"')" || true
  echo "leader $(grep -o 'pgqtest[0-9]*' <<<"${out%%[*}" | tail -n 1 | sed 's/pgqtest//' | _port_to_node)," \
    "online $(grep -o 'pgqtest[0-9]*' <<<"${out#*[}" | sed 's/pgqtest//' | _port_to_node | sort | tr '\n' ' ')"
}
_port_to_node() {
  local port i
  while read -r port; do
    for i in 0 1 2; do [[ $port == "${RMQ_PORTS[i]}" ]] && echo $((i + 1)); done
  done
}

form_cluster() {
  local cookie i t0=$SECONDS node1="pgqtest${RMQ_PORTS[0]}@localhost"
  cookie="$(head -c 30 /dev/urandom | base64 | tr -dc A-Za-z0-9)"
  cluster_dirs=()
  for i in 0 1 2; do
    cluster_dirs+=("$work/rabbitmq/node$((i + 1))")
    rmq_dirs+=("${cluster_dirs[i]}")
    if ! RMQ_EPMD_PORT=$RMQ_SHARED_EPMD RMQ_COOKIE=$cookie start_rabbitmq "${cluster_dirs[i]}" "${RMQ_PORTS[i]}"; then
      not_ok "RabbitMQ node $((i + 1)) starts on ${RMQ_PORTS[i]}"
      return 1
    fi
  done
  for i in 1 2; do
    if ! { rmq_cli "${cluster_dirs[i]}" rabbitmqctl -q stop_app &&
      rmq_cli "${cluster_dirs[i]}" rabbitmqctl -q join_cluster "$node1" &&
      rmq_cli "${cluster_dirs[i]}" rabbitmqctl -q start_app; } >>"$phase_dir/cluster.log" 2>&1; then
      not_ok "RabbitMQ node $((i + 1)) joins $node1 (see $phase_dir/cluster.log)"
      return 1
    fi
  done
  if rmq_cli "${cluster_dirs[0]}" rabbitmqctl -q await_online_nodes 3 --timeout 60 >>"$phase_dir/cluster.log" 2>&1; then
    ok "rabbitmq: three nodes clustered on ${RMQ_PORTS[*]} ($((SECONDS - t0)) s)"
  else
    not_ok "rabbitmq: three nodes clustered (see $phase_dir/cluster.log)"
    return 1
  fi
}

# node_kill K: kill -9 of the node the relay is connected to; down for
# NODE_DOWN seconds while the producers commit; restarted; the window ends
# once the queue has its three members online again and the system is
# healthy.
node_kill() {
  local k="$1" n="" ledger_n="" members="" start="" t_relay="" t_ledger="" t_up="" t_back=""
  local relay_c ledger_c relay_to ledger_to after="" what deadline
  n="$(node_in_log "$relay_log")" ledger_n="$(node_in_log "$ledger_log")"
  if [[ -z $n ]]; then not_ok "$part: the relay says which node it is connected to ($relay_log)"; return; fi
  members="$(queue_members $((n % 3 + 1)))"
  relay_c="$(count_in "$relay_log" "connected to RabbitMQ")"
  ledger_c="$(count_in "$ledger_log" "connected to RabbitMQ")"
  start="$(now_ms)"
  if ! kill9_rabbitmq "${cluster_dirs[n - 1]}"; then not_ok "$part: kill -9 of node $n"; return; fi
  # Down for NODE_DOWN seconds; meanwhile, when the relay and the ledger
  # connect to another node.
  while (($(now_ms) < start + NODE_DOWN * 1000)); do
    if [[ -z $t_relay ]] && (($(count_in "$relay_log" "connected to RabbitMQ") > relay_c)); then t_relay="$(now_ms)"; fi
    if [[ -z $t_ledger ]] && (($(count_in "$ledger_log" "connected to RabbitMQ") > ledger_c)); then t_ledger="$(now_ms)"; fi
    sleep 0.1
  done
  t_up="$(now_ms)"
  if ! restart_rabbitmq "${cluster_dirs[n - 1]}" >>"$phase_dir/cluster.log" 2>&1; then
    not_ok "$part: node $n restarts (see $phase_dir/cluster.log)"
    return
  fi
  t_back="$(now_ms)"
  # Back in the cluster: the queue's member on it online again.
  deadline=$((SECONDS + 60))
  until [[ $after == *"online 1 2 3 "* ]] || ((SECONDS >= deadline)); do
    sleep 1
    after="$(queue_members "$n")"
  done
  [[ $after == *"online 1 2 3 "* ]] || not_ok "$part: node $n's member of the quorum queue online again within 60 s ($after)"
  relay_to="$(node_in_log "$relay_log")" ledger_to="$(node_in_log "$ledger_log")"
  what="kill -9 of node $n (the relay's; the ledger's: node ${ledger_n:-?}; queue before: $members)"
  what+=": relay on node ${relay_to:-?} $(secs_or_unknown "$start" "$t_relay") s later"
  if [[ $ledger_n == "$n" ]]; then what+=", ledger on node ${ledger_to:-?} $(secs_or_unknown "$start" "$t_ledger") s later"; fi
  what+="; node down $(secs_between_ms "$start" "$t_up") s, its boot $(secs_between_ms "$t_up" "$t_back") s"
  what+=", queue after: $after"
  fault_done "node-kill-$k" broker "$start" "$what"
}

run_rabbitmq() {
  part=rabbitmq
  phase_dir="$work/rabbitmq"
  mkdir -p "$phase_dir"
  chmod 755 "$phase_dir"
  : >"$phase_dir/windows"
  local t0=$SECONDS pg="$work/rabbitmq/pg" k url="" p
  form_cluster || return 0
  if "$work/ledger" amqp-setup "$(IFS=,; echo "${RMQ_PORTS[*]}")" pgq relay_ledger quorum; then
    ok "rabbitmq: quorum queue relay_ledger bound to the topic exchange pgq: $(queue_members 1)"
  else
    not_ok "rabbitmq: quorum queue relay_ledger and exchange pgq"; return
  fi

  pg_dirs+=("$pg")
  start_cluster "$pg" "$PG_PORT" "fsync = off" "lc_messages = 'C'" "log_min_messages = warning"
  "$PG_BIN/psql" -h "$pg" -p "$PG_PORT" -U postgres -X -q -c "CREATE DATABASE relay_cluster"
  dsn="host=$pg port=$PG_PORT user=postgres dbname=relay_cluster"
  create_schema

  for p in "${RMQ_PORTS[@]}"; do url+="${url:+,}amqp://guest:guest@127.0.0.1:$p/"; done
  broker_url="$url"
  ledger_log="$phase_dir/ledger.log"
  "$work/ledger" amqp "$(IFS=,; echo "${RMQ_PORTS[*]}")" relay_ledger "$phase_dir/ledger" "$PREFETCH" 2>"$ledger_log" &
  ledger_pid=$!
  echo "# rabbitmq: producing $EVENTS events; --broker $broker_url"
  start_relay
  start_producers
  sleep 5
  for ((k = 1; k <= NODE_KILLS; k++)); do
    keep_producing $((NODE_DOWN + 40))
    node_kill "$k"
  done
  echo "# rabbitmq: faults done $((SECONDS - produce_t0)) s after the producers started"
  finish_part
  echo "# rabbitmq: queue at the end: $(queue_members 1)"
  for ((k = 2; k >= 0; k--)); do stop_rabbitmq "${cluster_dirs[k]}" >/dev/null 2>&1 || true; done
  stop_cluster "$pg"
  echo "# rabbitmq: took $((SECONDS - t0)) s"
}

# ================================================================ postgres

# A primary and its synchronous standby (011_failover.pl's set-up, by hand):
# the standby from pg_basebackup, streaming with application_name standby;
# synchronous_standby_names set on the primary after the backup, so the
# promoted standby waits for no standby of its own.
start_primary_and_standby() {
  local t0=$SECONDS
  pg_dirs+=("$primary" "$standby")
  start_cluster "$primary" "$PRIMARY_PORT" "fsync = off" "lc_messages = 'C'" "log_min_messages = warning" \
    "cluster_name = 'primary'"
  mkdir -p "$standby"
  chown "$PGQ_OS_USER" "$standby"
  if ! as_pg "$PG_BIN/pg_basebackup" -h "$primary" -p "$PRIMARY_PORT" -U postgres -D "$standby/data" \
    -X stream -c fast --no-sync >>"$phase_dir/standby.log" 2>&1; then
    not_ok "postgres: pg_basebackup of the primary (see $phase_dir/standby.log)"
    return 1
  fi
  {
    echo "port = $STANDBY_PORT"
    echo "unix_socket_directories = '$standby'"
    echo "cluster_name = 'standby'"
    echo "primary_conninfo = 'host=$primary port=$PRIMARY_PORT user=postgres application_name=standby'"
  } | as_pg tee -a "$standby/data/postgresql.conf" >/dev/null
  as_pg touch "$standby/data/standby.signal"
  as_pg "$PG_BIN/pg_ctl" -D "$standby/data" -l "$standby/server.log" -w start >/dev/null
  "$PG_BIN/psql" -h "$primary" -p "$PRIMARY_PORT" -U postgres -X -q -c "ALTER SYSTEM SET synchronous_standby_names = 'standby'" \
    -c "SELECT pg_reload_conf()" >/dev/null
  local deadline=$((SECONDS + 60)) state=""
  until [[ $state == sync ]] || ((SECONDS >= deadline)); do
    sleep 0.3
    state="$("$PG_BIN/psql" -h "$primary" -p "$PRIMARY_PORT" -U postgres -X -A -t \
      -c "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'" 2>/dev/null || true)"
  done
  if [[ $state == sync ]]; then
    ok "postgres: primary on $PRIMARY_PORT, synchronous standby on $STANDBY_PORT ($((SECONDS - t0)) s)"
  else
    not_ok "postgres: the standby streams synchronously (sync_state '$state'; see $standby/server.log)"
    return 1
  fi
}

failover() {
  local start t_stopped t_promoted t_relay="" db_c what deadline
  db_c="$(count_in "$relay_log" "connected to the database again")"
  start="$(now_ms)"
  if ! as_pg "$PG_BIN/pg_ctl" -D "$primary/data" -m immediate -w stop >/dev/null; then
    not_ok "postgres: immediate stop of the primary"; return
  fi
  t_stopped="$(now_ms)"
  if ! as_pg "$PG_BIN/pg_ctl" -D "$standby/data" -w promote >/dev/null; then
    not_ok "postgres: promotion of the standby"; return
  fi
  t_promoted="$(now_ms)"
  failover_ms="$start" failover_down_ms="$t_stopped"
  deadline=$((SECONDS + 60))
  until [[ -n $t_relay ]] || ((SECONDS >= deadline)); do
    if (($(count_in "$relay_log" "connected to the database again") > db_c)); then t_relay="$(now_ms)"; fi
    sleep 0.1
  done
  what="immediate stop of the primary ($(secs_between_ms "$start" "$t_stopped") s) and promotion of the standby"
  what+=" ($(secs_between_ms "$t_stopped" "$t_promoted") s): the relay on the new primary"
  what+=" $(secs_or_unknown "$start" "$t_relay") s after the stop"
  fault_done failover postgres "$start" "$what"
}

# When the producers and the consumer saw the new primary at work: the first
# transaction begun once the old primary was down (produced.at is its start:
# it could only commit on the new primary) and the first delivery of such an
# event, in seconds after the stop command.
failover_figures() {
  "$PY" - "$dsn" "$phase_dir/ledger" "$failover_ms" "$failover_down_ms" "$HERE" <<'PY'
import sys

import psycopg

dsn, ledger, stop_ms, down_ms, here = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
sys.path.insert(0, here)
from check import read_ledger  # noqa: E402

with psycopg.connect(dsn) as conn:
    new = dict(conn.execute(
        "SELECT event_uuid::text, (extract(epoch FROM at) * 1000)::bigint FROM produced"
        " WHERE at > to_timestamp(%s / 1000.0)", (down_ms,)).fetchall())
    before = conn.execute("SELECT count(*) FROM produced WHERE at <= to_timestamp(%s / 1000.0)",
                          (down_ms,)).fetchone()[0]
delivered = [d["ms"] for d in read_ledger(ledger) if d["uuid"] in new]


def secs(ms):
    return f"{(ms - stop_ms) / 1000:.1f} s" if ms is not None else "never"


print(f"# failover: {before} events committed by transactions begun before the old primary was down, "
      f"{len(new)} on the new primary; its first transaction began {secs(min(new.values(), default=None))} "
      f"after the stop command, its first event delivered {secs(min(delivered, default=None))} after it")
PY
}

run_postgres() {
  part=postgres
  phase_dir="$work/postgres"
  primary="$work/postgres/primary" standby="$work/postgres/standby"
  mkdir -p "$phase_dir"
  chmod 755 "$phase_dir"
  : >"$phase_dir/windows"
  local t0=$SECONDS rmq="$work/postgres/rabbitmq"
  failover_ms="" failover_down_ms=""
  start_primary_and_standby || return 0
  "$PG_BIN/psql" -h "$primary" -p "$PRIMARY_PORT" -U postgres -X -q -c "CREATE DATABASE relay_failover"
  dsn="host=$primary,$standby port=$PRIMARY_PORT,$STANDBY_PORT user=postgres dbname=relay_failover"
  dsn+=" target_session_attrs=read-write connect_timeout=2"
  create_schema
  psql_dsn -c "ALTER TABLE produced ADD COLUMN at timestamptz NOT NULL DEFAULT now()"

  rmq_dirs+=("$rmq")
  if ! start_rabbitmq "$rmq" "${RMQ_PORTS[0]}"; then not_ok "postgres: RabbitMQ starts on ${RMQ_PORTS[0]}"; return; fi
  if ! "$work/ledger" amqp-setup "${RMQ_PORTS[0]}" pgq relay_ledger; then not_ok "postgres: exchange and queue"; return; fi
  broker_url="amqp://guest:guest@127.0.0.1:${RMQ_PORTS[0]}/"
  ledger_log="$phase_dir/ledger.log"
  "$work/ledger" amqp "${RMQ_PORTS[0]}" relay_ledger "$phase_dir/ledger" 2>"$ledger_log" &
  ledger_pid=$!
  echo "# postgres: producing $EVENTS events; --dsn '$dsn'"
  start_relay
  start_producers
  # Mid-run: half the producers' time gone, as long again to come.
  sleep $((PRODUCE_SECONDS / 2))
  keep_producing $((PRODUCE_SECONDS / 2 + 10))
  failover
  echo "# postgres: the fault done $((SECONDS - produce_t0)) s after the producers started"
  finish_part
  if [[ -n $failover_ms ]]; then failover_figures || true; fi
  stop_rabbitmq "$rmq" >/dev/null 2>&1 || true
  stop_cluster "$standby"
  echo "# postgres: took $((SECONDS - t0)) s"
}

for part in $PARTS; do
  case $part in
    rabbitmq) run_rabbitmq ;;
    postgres) run_postgres ;;
    *) not_ok "unknown part '$part' in PGQ_CLUSTER_PARTS" ;;
  esac
done
((failed == 0))
