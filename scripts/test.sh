#!/usr/bin/env bash
# `make test`: installs what is missing, builds, runs every test, and ends
# with one summary line: "N passed, N failed".
source "$(dirname "$0")/lib.sh"

# Warnings are errors in CI.
if [[ "${CI:-}" == "true" ]]; then export WERROR=1; fi

# PGQ_PROFILE=long (make test PROFILE=long): the load tests at ten times
# their default size, and the time limits that go with them.
case "${PGQ_PROFILE:-}" in
  "") ;;
  long)
    export PGQ_STRESS_JOBS="${PGQ_STRESS_JOBS:-600000}" PGQ_CHAOS_JOBS="${PGQ_CHAOS_JOBS:-100000}"
    export PGQ_PYTEST_TIMEOUT="${PGQ_PYTEST_TIMEOUT:-1200}" PGQ_TAP_TIMEOUT="${PGQ_TAP_TIMEOUT:-1800}" ;;
  *) echo "unknown PROFILE '$PGQ_PROFILE' (use PROFILE=long, or none)" >&2; exit 2 ;;
esac

ensure_packages
build_and_install

passed=0
failed=0
suite_status=0
log_dir="$(mktemp -d /tmp/pgq_cpp_test.XXXXXX)"

record() {  # record NAME PASSED FAILED
  say "$1: $2 passed, $3 failed"
  passed=$((passed + $2))
  failed=$((failed + $3))
}

# 0. Formatting: the C++ sources are clang-formatted (.clang-format).
say "format (clang-format)"
mapfile -t sources < <(cd "$PGQ_ROOT" && find src test/unit cli -name '*.cpp' -o -name '*.h' | sort)
if (cd "$PGQ_ROOT" && clang-format --dry-run --Werror "${sources[@]}") >"$log_dir/format.log" 2>&1; then
  record "format" 1 0
else
  head -n 40 "$log_dir/format.log"
  echo "run: clang-format -i \$(find src test/unit cli -name '*.cpp' -o -name '*.h')"
  record "format" 0 1
fi

# 1. The pure C++ core: GoogleTest through CMake and CTest.
say "unit tests (GoogleTest, CTest)"
if make -C "$PGQ_ROOT" -s unit ${WERROR:+WERROR=$WERROR} >"$log_dir/unit.log" 2>&1; then :; else suite_status=1; fi
tail -n 3 "$log_dir/unit.log"
if line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$log_dir/unit.log"); then
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
  bad=$(sed -E 's/.*, ([0-9]+) tests failed.*/\1/' <<<"$line")
  record "unit" $((total - bad)) "$bad"
else
  cat "$log_dir/unit.log"; record "unit (did not run)" 0 1
fi

# The model of the queues' claim protocol (test/model/queue_rings.pml),
# checked by SPIN over every interleaving, with its planted bugs.
say "model of the claim protocol (SPIN)"
if bash "$PGQ_ROOT/test/model/check.sh" >"$log_dir/model.log" 2>&1; then :; else suite_status=1; fi
if line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log_dir/model.log"); then
  grep -E '^not ok' "$log_dir/model.log" || true
  record "model (SPIN)" "$(sed -E 's/ passed.*//' <<<"$line")" "$(sed -E 's/.*, ([0-9]+) failed/\1/' <<<"$line")"
else
  tail -n 40 "$log_dir/model.log"; record "model (did not run)" 0 1
fi

# 2. pg_regress and isolation specs on temporary instances, as postgres.
say "regression and isolation tests (pg_regress, pg_isolation_regress)"
if bash "$PGQ_ROOT/scripts/regress.sh" >"$log_dir/regress.log" 2>&1; then :; else suite_status=1; fi
grep -E '^(test |     |ok |not ok )| tests (passed|failed)|of [0-9]+ tests' "$log_dir/regress.log" || true
# pg_regress prints one line per test: "test NAME ... ok" or "... FAILED".
ok=$(grep -cE '^(test |     |ok |not ok ).*\.\.\. *ok' "$log_dir/regress.log" || true)
bad=$(grep -cE '^(test |     |ok |not ok ).*\.\.\. *FAILED' "$log_dir/regress.log" || true)
if ((ok + bad == 0)); then
  cat "$log_dir/regress.log"; bad=1
fi
if ((bad > 0)); then sed -n '/^---- /,$p' "$log_dir/regress.log" | head -c 20000 || true; fi
record "pg_regress + isolation" "$ok" "$bad"

# unittest ends with "Ran N tests" and "OK" or "FAILED (failures=F, errors=E)";
# a skipped test counts as failed here: make test provides everything they need.
count_unittest() {  # count_unittest NAME LOG
  local ran verdict bad=0 n kind
  if ! ran=$(grep -oE '^Ran [0-9]+ tests?' "$2" | grep -oE '[0-9]+'); then
    tail -n 60 "$2"; record "$1 (did not run)" 0 1; return
  fi
  verdict=$(grep -E '^(OK|FAILED)' "$2" | tail -n 1 || true)
  for kind in failures errors skipped 'unexpected successes'; do
    n=$(grep -oE "$kind=[0-9]+" <<<"$verdict" | grep -oE '[0-9]+' || echo 0)
    bad=$((bad + n))
  done
  if [[ -z "$verdict" ]] && ((bad == 0)); then bad=1; fi
  if ((bad > 0)); then sed -n '/^======/,$p' "$2" | head -c 20000 || true; fi
  record "$1" $((ran > bad ? ran - bad : 0)) "$bad"
}

# 3. Multi-connection tests (unittest + psycopg 3) on a throwaway cluster.
say "multi-connection tests (python unittest, psycopg)"
if bash "$PGQ_ROOT/test/python/run.sh" >"$log_dir/python.log" 2>&1; then :; else suite_status=1; fi
grep -E ' \.\.\. (ok|FAIL|ERROR|skipped|expected failure|unexpected success)' "$log_dir/python.log" || true
count_unittest "python (multi-connection)" "$log_dir/python.log"

# 4. TAP tests (PostgreSQL::Test::Cluster): background workers, crash
# restarts, DROP DATABASE, standby and promotion; as postgres, by tap.sh.
say "TAP tests (prove: workers, crash, standby)"
if bash "$PGQ_ROOT/scripts/tap.sh" >"$log_dir/tap.log" 2>&1; then :; else suite_status=1; fi
grep -E '^(ok|not ok) [0-9]+|^test/t/.*\.pl \.+ *$|^Files=|^Result:|TAP tests took' "$log_dir/tap.log" || true
# Counted per assertion: prove -v echoes every "ok N" and "not ok N" line of
# every test file. A file that died or broke its plan without a failed
# assertion shows "Failed: 0" in prove's summary and counts as one failure;
# no "Result:" line means prove did not run or did not finish: one failure.
ok=$(grep -cE '^ok [0-9]+' "$log_dir/tap.log" || true)
bad=$(grep -cE '^not ok [0-9]+' "$log_dir/tap.log" || true)
broken=$(grep -cE '^test/t/[^ ]+\.pl +\(Wstat: .* Failed: 0\)' "$log_dir/tap.log" || true)
bad=$((bad + broken))
if ! grep -qE '^Result: (PASS|FAIL)' "$log_dir/tap.log"; then
  tail -n 100 "$log_dir/tap.log"; bad=$((bad + 1))
elif grep -qE '^Result: FAIL' "$log_dir/tap.log" && ((bad == 0)); then
  bad=1
fi
if ((bad > 0)); then
  # (|| true: head closing the pipe early must not end the script.)
  grep -E -A12 '^not ok [0-9]+' "$log_dir/tap.log" | head -c 20000 || true
  sed -n '/^Test Summary Report/,$p' "$log_dir/tap.log" | head -c 30000 || true
  echo
fi
record "tap (workers, crash, standby)" "$ok" "$bad"

# 5. The clients (Python, Node, the pgq-worker command) against a throwaway
# cluster of their own; each runner prints its own summary.
say "clients (Python, Node, pgq-worker) and the dashboard"
clients_dir=/tmp/pgq_cpp_clients
clients_port=55466
stop_cluster "$clients_dir"
rm -rf "$clients_dir"
trap 'stop_cluster "$clients_dir"' EXIT
start_cluster "$clients_dir" "$clients_port" "fsync = off" "lc_messages = 'C'" "log_min_messages = warning"
as_pg "$PG_BIN/createdb" -h "$clients_dir" -p "$clients_port" -U postgres clients
clients_dsn="host=$clients_dir port=$clients_port user=postgres dbname=clients"


if PGQ_TEST_DSN="$clients_dsn" bash "$PGQ_ROOT/clients/python/run_tests.sh" >"$log_dir/client_python.log" 2>&1; then :; else suite_status=1; fi
count_unittest "python client" "$log_dir/client_python.log"

# node --test: "# pass N", "# fail M" (and cancelled ones, counted as failed).
count_node_test() {  # name log
  local ok bad
  if ok=$(grep -oE '^# pass [0-9]+' "$2" | grep -oE '[0-9]+'); then
    bad=$(( $(grep -oE '^# fail [0-9]+' "$2" | grep -oE '[0-9]+' || echo 0) \
          + $(grep -oE '^# cancelled [0-9]+' "$2" | grep -oE '[0-9]+' || echo 0) ))
    if ((bad > 0)); then grep -E -B2 -A20 '^not ok' "$2" | head -c 20000 || true; fi
    record "$1" "$ok" "$bad"
  else
    tail -n 60 "$2"; record "$1 (did not run)" 0 1
  fi
}

if PGQ_TEST_DSN="$clients_dsn" bash "$PGQ_ROOT/clients/node/run_tests.sh" >"$log_dir/client_node.log" 2>&1; then :; else suite_status=1; fi
count_node_test "node client" "$log_dir/client_node.log"

# The operator's dashboard (dashboard/, issue 19): its handlers against the
# same server.
if PGQ_TEST_DSN="$clients_dsn" bash "$PGQ_ROOT/dashboard/run_tests.sh" >"$log_dir/dashboard.log" 2>&1; then :; else suite_status=1; fi
count_node_test "dashboard" "$log_dir/dashboard.log"

# pgq-worker (built by `make unit` above): "N passed, M failed".
if PGQ_TEST_DSN="$clients_dsn" bash "$PGQ_ROOT/cli/run_tests.sh" "$PGQ_ROOT/build/pgq-worker" >"$log_dir/cli.log" 2>&1; then :; else suite_status=1; fi
if line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log_dir/cli.log" | tail -n 1); then
  bad=$(sed -E 's/.* ([0-9]+) failed/\1/' <<<"$line")
  if ((bad > 0)); then tail -n 80 "$log_dir/cli.log"; fi
  record "pgq-worker" "$(sed -E 's/ passed.*//' <<<"$line")" "$bad"
else
  tail -n 60 "$log_dir/cli.log"; record "pgq-worker (did not run)" 0 1
fi
stop_cluster "$clients_dir"

# 6. pgq-relay (issue 20) against real brokers: its contract case by case,
# then the fault run (kill -9 of the relay and the broker, a paused broker,
# a PostgreSQL restart), on RabbitMQ and on NATS JetStream; test/relay/run.sh
# starts its own cluster and brokers and ends with "relay tests: N passed,
# M failed". The brokers' harness first (test/brokers/smoke.sh).
say "pgq-relay against RabbitMQ and NATS (brokers smoke, contract, faults)"
if bash "$PGQ_ROOT/test/brokers/smoke.sh" >"$log_dir/brokers.log" 2>&1; then :; else suite_status=1; fi
count_summary() {  # name log prefix: "<prefix>: N passed, M failed" in log
  local line bad
  if line=$(grep -E "^$3: [0-9]+ passed, [0-9]+ failed$" "$2" | tail -n 1); then
    bad=$(sed -E 's/.* ([0-9]+) failed/\1/' <<<"$line")
    if ((bad > 0)); then grep -E -A12 '^not ok' "$2" | head -c 20000 || true; fi
    record "$1" "$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")" "$bad"
  else
    tail -n 60 "$2"; record "$1 (did not run)" 0 1
  fi
}
count_summary "brokers (smoke)" "$log_dir/brokers.log" "brokers smoke"
if bash "$PGQ_ROOT/test/relay/run.sh" >"$log_dir/relay.log" 2>&1; then :; else suite_status=1; fi
count_summary "pgq-relay" "$log_dir/relay.log" "relay tests"

echo
echo "logs: $log_dir"
# A suite that failed without a countable test failure still fails the run.
if ((suite_status != 0 && failed == 0)); then failed=1; fi
echo "${passed} passed, ${failed} failed"
((failed == 0))
