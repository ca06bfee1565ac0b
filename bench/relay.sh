#!/usr/bin/env bash
# pgq-relay's speed (issue 20): is the relay the bottleneck? In one run, on
# one throwaway durable cluster with a RabbitMQ node and a NATS server:
#
#   bash bench/relay.sh
#   EVENTS=5000 RUNS=1 CONCURRENCY="4" BROKERS=rabbitmq bash bench/relay.sh   quick look
#   MODES="sync async" CONCURRENCY="1 16 64" bash bench/relay.sh   with --async-commit
#
# Measures the pgq_cpp installed and build/pgq-relay (`make unit` builds it).
#
# For each concurrency C (CONCURRENCY, default "1 4 16") and round (RUNS,
# default 3):
#   baseline  the same work without a broker: EVENTS events published (over
#             KEYS group keys, so groups never limit C), then one pgbench
#             client drains to_broker as the relay does, a claim of C jobs
#             and their complete_many, each its own transaction
#             (bench/sql/relay_baseline.sql); events/s from the first claim
#             to the queue empty.
#   relay     the same EVENTS published again, then `pgq-relay --concurrency
#             C --max-jobs EVENTS` forwards them to the broker (RabbitMQ:
#             persistent messages into a durable queue with confirms; NATS:
#             a file-stored JetStream stream): events/s from its start to its
#             exit, every job completed only after its confirm. Ratio
#             relay/baseline: the target is >= 0.80.
#   broker    the broker alone (bench/broker_ceiling.c): EVENTS messages
#             like the relay's, at most C unconfirmed, no database: the
#             other physical ceiling. On two cores the broker and PostgreSQL
#             share the CPU, so the relay's rate is below both.
#   latency   a paced producer (pgbench -R RATE, one publish per
#             transaction, LATENCY_SECONDS long) while the relay runs:
#             commit to confirm p50 and p99, from the relay's own histogram
#             of every confirm (its last stats line).
# With "async" in MODES (default "sync"), the relay runs again with
# --async-commit (its claims and completions with synchronous_commit off)
# and the baseline once more with synchronous_commit off too; ratios are
# given to both baselines (the target is on the durable one, issue 31).
# The brokers' queues are purged between rounds (RabbitMQ) or left to grow
# (NATS, a few MB).
#
# Environment: EVENTS (20000), KEYS (2000), RUNS, CONCURRENCY, BROKERS, MODES
# ("rabbitmq nats"), RATE (200 events/s), LATENCY_SECONDS (15), OUT_MD
# (bench/results-issue20-relay.md). Ports: PostgreSQL 55960, RabbitMQ
# 55961-55968, NATS 55970-55971.
source "$(dirname "$0")/../scripts/lib.sh"

EVENTS="${EVENTS:-20000}"
KEYS="${KEYS:-2000}"
RUNS="${RUNS:-3}"
CONCURRENCY="${CONCURRENCY:-1 4 16}"
BROKERS="${BROKERS:-rabbitmq nats}"
MODES="${MODES:-sync}"
RATE="${RATE:-200}"
LATENCY_SECONDS="${LATENCY_SECONDS:-15}"
OUT_MD="${OUT_MD:-$PGQ_ROOT/bench/results-issue20-relay.md}"
RELAY="${PGQ_RELAY_BIN:-$PGQ_ROOT/build/pgq-relay}"
PORT=55960
AMQP_PORT=55961
NATS_PORT=55970
WORK="$(mktemp -d /tmp/pgq_bench_relay.XXXXXX)"
chmod 755 "$WORK"
PGDIR="$WORK/pg"

cleanup() {
  stop_rabbitmq "$WORK/rmq" || true
  stop_nats "$WORK/nats" || true
  stop_cluster "$PGDIR"
}
trap cleanup EXIT

bench_install
[[ -x $RELAY ]] || { echo "$RELAY is missing: run 'make unit' first" >&2; exit 1; }
LEDGER="$WORK/ledger"
cc -O2 -o "$LEDGER" "$PGQ_ROOT/test/relay/ledger.c" -lrabbitmq -lnats
CEILING="$WORK/broker_ceiling"
cc -O2 -o "$CEILING" "$PGQ_ROOT/bench/broker_ceiling.c" -lrabbitmq -lnats

say "starting PostgreSQL ($PGDIR, port $PORT), RabbitMQ ($AMQP_PORT) and NATS ($NATS_PORT)"
start_cluster "$PGDIR" "$PORT" "${BENCH_DURABLE_CONF[@]}" "autovacuum = on"
start_rabbitmq "$WORK/rmq" "$AMQP_PORT"
start_nats "$WORK/nats" "$NATS_PORT"
"$LEDGER" amqp-setup "$AMQP_PORT" pgq bench
"$LEDGER" nats-setup "$NATS_PORT" BENCH 'orders.>' bench

DSN="host=$PGDIR port=$PORT user=postgres dbname=postgres"
PSQL=("$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PGDIR" -p "$PORT" -U postgres)
"${PSQL[@]}" -c "CREATE EXTENSION pgq_cpp" -c "SELECT pgq.create_queue('to_broker', lease => '1 minute')" \
  -c "SELECT pgq.create_topic('orders.created')" -c "SELECT pgq.subscribe('orders.created', 'to_broker')" >/dev/null

now_ns() { date +%s%N; }
HZ=$(getconf CLK_TCK)
# The machine's busy and total CPU ticks (/proc/stat: idle and iowait are not busy).
machine_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }
proc_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
broker_pid() { if [[ $1 == rabbitmq ]]; then rmq_pid "$WORK/rmq"; else nats_pid "$WORK/nats"; fi; }

# EVENTS events in one transaction, over KEYS group keys.
publish_backlog() {
  "${PSQL[@]}" -c "SELECT count(pgq.publish('orders.created', jsonb_build_object('order', g, 'total', 99.5),
                     NULL, 'customer-' || (g % $KEYS))) FROM generate_series(1, $EVENTS) AS g" >/dev/null
  "${PSQL[@]}" -c "VACUUM ANALYZE pgq.job_rows" >/dev/null
}

queue_left() { "${PSQL[@]}" -c "SELECT count(*) FROM pgq.jobs j JOIN pgq.queues q USING (queue_id) WHERE q.name = 'to_broker'"; }

mode_args() { [[ $1 == async ]] && echo "--async-commit"; true; }

relay_args() {  # broker
  case $1 in
    rabbitmq) echo "--broker amqp://guest:guest@127.0.0.1:$AMQP_PORT/ --exchange pgq" ;;
    nats) echo "--broker nats://127.0.0.1:$NATS_PORT" ;;
  esac
}

results="$WORK/results.tsv"   # kind broker c run value(s)
: >"$results"

for run in $(seq 1 "$RUNS"); do
  for c in $CONCURRENCY; do
    for mode in $MODES; do
      say "round $run, concurrency $c: baseline (claim $c + complete_many, no broker, $mode commits)"
      publish_backlog
      transactions=$(( (EVENTS + c - 1) / c ))
      options=""
      [[ $mode == async ]] && options="-c synchronous_commit=off"
      start=$(now_ns)
      # The script on stdin: the postgres user may not read the clone (as_user in scripts/lib.sh).
      PGOPTIONS="$options" as_pg "$PG_BIN/pgbench" -n -M extended -h "$PGDIR" -p "$PORT" -U postgres -c 1 \
        -t "$transactions" -D n="$c" -f - postgres <"$PGQ_ROOT/bench/sql/relay_baseline.sql" \
        >"$WORK/baseline.log" 2>&1 || { tail -n 20 "$WORK/baseline.log" >&2; exit 1; }
      end=$(now_ns)
      left=$(queue_left)
      rate=$(awk -v n=$((EVENTS - left)) -v ns=$((end - start)) 'BEGIN { printf "%.0f", n / (ns / 1e9) }')
      echo "baseline $mode $c $run $rate" >>"$results"
      echo "  baseline ($mode): $rate events/s ($left left)"
      "${PSQL[@]}" -c "DELETE FROM pgq.job_rows" >/dev/null
    done

    for broker in $BROKERS; do
      case $broker in
        rabbitmq) ceiling=$("$CEILING" amqp "$AMQP_PORT" pgq orders.ceiling "$EVENTS" "$c") ;;
        nats) ceiling=$("$CEILING" nats "$NATS_PORT" orders.ceiling "$EVENTS" "$c") ;;
      esac
      rate=$(sed -E 's/.*: ([0-9]+)\/s.*/\1/' <<<"$ceiling")
      echo "broker $broker $c $run $rate" >>"$results"
      echo "  $broker alone: $rate messages/s"
      for mode in $MODES; do
        publish_backlog
        # Where the CPU went: the machine's busy time, the broker's and the
        # relay's (bash's `times` after it: its children's user and system).
        broker_pid=$(broker_pid "$broker")
        read -r busy0 all0 < <(machine_ticks)
        broker0=$(proc_ticks "$broker_pid")
        start=$(now_ns)
        # shellcheck disable=SC2046
        relay_times=$(
          "$RELAY" $(relay_args "$broker") $(mode_args "$mode") --dsn "$DSN" --concurrency "$c" \
            --max-jobs "$EVENTS" --stats-interval 0 2>"$WORK/relay.log"
          times  # not in a pipeline: a forked `times` would see no children
        )
        relay_cpu=$(tail -n 1 <<<"$relay_times" | sed -E 's/([0-9]+)m([0-9.]+)s/\1 \2/g' |
          awk '{ print $1 * 60 + $2 + $3 * 60 + $4 }')
        end=$(now_ns)
        read -r busy1 all1 < <(machine_ticks)
        broker1=$(proc_ticks "$broker_pid")
        left=$(queue_left)
        rate=$(awk -v n=$((EVENTS - left)) -v ns=$((end - start)) 'BEGIN { printf "%.0f", n / (ns / 1e9) }')
        echo "relay $broker:$mode $c $run $rate" >>"$results"
        # CPU per event in microseconds: the relay, the broker, the rest
        # (PostgreSQL, mostly), and the machine's busy share of its 2 CPUs.
        awk -v n="$EVENTS" -v relay="$relay_cpu" -v hz="$HZ" -v busy=$((busy1 - busy0)) \
          -v all=$((all1 - all0)) -v broker=$((broker1 - broker0)) -v b="$broker:$mode" -v c="$c" -v run="$run" '
          BEGIN {
            r = relay * 1e6 / n; k = broker / hz * 1e6 / n; t = busy / hz * 1e6 / n
            printf "cpu %s %s %s %.0f %.0f %.0f %.0f\n", b, c, run, r, k, t - r - k, 100 * busy / all
          }' >>"$results"
        echo "  relay to $broker ($mode): $rate events/s ($left left); $(tail -n 1 "$results" | awk '{ printf "CPU per event: relay %s us, broker %s us, the rest %s us; machine busy %s %%", $5, $6, $7, $8 }')"
        ((left == 0)) || { echo "the relay left $left jobs" >&2; tail "$WORK/relay.log" >&2; exit 1; }

        # Latency: a paced producer while the relay waits in its claim.
        "$RELAY" $(relay_args "$broker") $(mode_args "$mode") --dsn "$DSN" --concurrency "$c" \
          --stats-interval '1 day' \
          2>"$WORK/relay_latency.log" &
        relay_pid=$!
        sleep 1
        as_pg "$PG_BIN/pgbench" -n -h "$PGDIR" -p "$PORT" -U postgres -c 1 -R "$RATE" \
          -T "$LATENCY_SECONDS" -D keys="$KEYS" -f - postgres <"$PGQ_ROOT/bench/sql/relay_publish.sql" \
          >"$WORK/producer.log" 2>&1 || { tail -n 20 "$WORK/producer.log" >&2; exit 1; }
        sleep 2
        kill -TERM "$relay_pid"
        wait "$relay_pid" || true
        line=$(grep -o 'commit to confirm p50 [0-9.]* ms, p99 [0-9.]* ms ([0-9]* confirms)' "$WORK/relay_latency.log" | tail -n 1)
        p50=$(sed -E 's/.*p50 ([0-9.]+) ms.*/\1/' <<<"$line")
        p99=$(sed -E 's/.*p99 ([0-9.]+) ms.*/\1/' <<<"$line")
        confirms=$(sed -E 's/.*\(([0-9]+) confirms\).*/\1/' <<<"$line")
        echo "latency $broker:$mode $c $run $p50 $p99 $confirms" >>"$results"
        echo "  latency ($broker, $mode, $RATE events/s): p50 $p50 ms, p99 $p99 ms over $confirms confirms"
      done
    done
    rmq_cli "$WORK/rmq" rabbitmqctl -q purge_queue bench >/dev/null 2>&1 || true
  done
done

say "report: $OUT_MD"
python3 - "$results" "$OUT_MD" "$EVENTS" "$KEYS" "$RUNS" "$RATE" "$LATENCY_SECONDS" <<'PY'
import statistics, sys
path, out, events, keys, runs, rate, seconds = sys.argv[1:]
rows = [line.split() for line in open(path)]
def med(values):
    return statistics.median(values) if values else float("nan")
cs = sorted({int(r[2]) for r in rows})
brokers = [b for b in ("rabbitmq", "nats") if any(r[1] == b for r in rows)]
lines = [f"# pgq-relay throughput and latency (bench/relay.sh)", "",
         f"{events} events per round over {keys} group keys, {runs} round(s), medians; "
         f"latency with a paced producer at {rate} events/s for {seconds} s.", "",
         "| concurrency | baseline: claim+complete, no broker (events/s; sync, async commits) | broker | relay commits | the broker alone (msg/s) | relay (events/s) | relay / baseline (sync; async) | commit→confirm p50 | p99 | CPU µs/event: relay, broker, rest | machine busy |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
modes = [m for m in ("sync", "async") if any(r[0] == "baseline" and r[1] == m for r in rows)]
for c in cs:
    base = {m: med([float(r[4]) for r in rows if r[0] == "baseline" and r[1] == m and int(r[2]) == c])
            for m in modes}
    bases = ", ".join(f"{base[m]:.0f}" for m in modes)
    for b in brokers:
        alone = med([float(r[4]) for r in rows if r[0] == "broker" and r[1] == b and int(r[2]) == c])
        for m in modes:
            key = f"{b}:{m}"
            relay = med([float(r[4]) for r in rows if r[0] == "relay" and r[1] == key and int(r[2]) == c])
            lat = [r for r in rows if r[0] == "latency" and r[1] == key and int(r[2]) == c]
            p50 = med([float(r[4]) for r in lat if r[4]])
            p99 = med([float(r[5]) for r in lat if r[5]])
            cpu = [r for r in rows if r[0] == "cpu" and r[1] == key and int(r[2]) == c]
            mine, theirs, rest, busy = (med([float(r[i]) for r in cpu]) for i in (4, 5, 6, 7))
            ratios = "; ".join(f"{relay / base[x]:.2f}x" for x in modes)
            lines.append(f"| {c} | {bases} | {b} | {m} | {alone:.0f} | {relay:.0f} | {ratios} | {p50:.1f} ms | {p99:.1f} ms | {mine:.0f}, {theirs:.0f}, {rest:.0f} | {busy:.0f} % |")
lines += ["", "Every round:", "", "```"] + [" ".join(r) for r in rows] + ["```", ""]
open(out, "w").write("\n".join(lines))
print("\n".join(lines))
PY
