#!/usr/bin/env bash
# Runs the dashboard's tests (node:test, its handlers through fastify's
# inject() against a real PostgreSQL server with pgq_cpp), and its browser
# tests (test/browser.test.js: puppeteer-core driving Debian's chromium
# headless, /usr/bin/chromium or PGQ_CHROMIUM; scripts/lib.sh ensure_packages
# installs it). Their screenshots go to dashboard/test-artifacts/.
#
#   dashboard/run_tests.sh                 # starts a throwaway cluster of its own
#   PGQ_TEST_DSN="host=/tmp/pgq port=55482 user=postgres dbname=postgres" dashboard/run_tests.sh
#   PGQ_TEST_URL=postgres://postgres:secret@localhost:5432/postgres dashboard/run_tests.sh
#
# Without PGQ_TEST_DSN or PGQ_TEST_URL it starts a cluster with pgq_cpp
# preloaded (scripts/lib.sh start_cluster, as root: run as the postgres OS
# user) in PGQ_DASH_TEST_DIR (default /tmp/pgq_dash_test) on
# PGQ_DASH_TEST_PORT (default 55651), and stops it at the end. pgq_cpp must
# be installed already (make install, or scripts/test.sh). Given a server,
# it must be a superuser connection: the tests create and drop databases
# pgq_dash_* and roles pgq_dash_*, and log in as those roles with a password
# (trust or password authentication).
#
# Extra arguments go to node (e.g. --test-name-pattern=csrf). Installs the
# locked dependencies (package-lock.json) first when node_modules is missing
# or older than the lock file (scripts/lib.sh ensure_node_modules), and
# clients/node's the same way (the browser tests run its Worker); offline
# afterwards.
set -euo pipefail
cd "$(dirname "$0")"
source ../scripts/lib.sh

ensure_node_modules "$PGQ_ROOT/dashboard"
# The browser tests run clients/node's Worker, on that package's own locked dependencies.
ensure_node_modules "$PGQ_ROOT/clients/node"

if [[ -z ${PGQ_TEST_DSN:-} && -z ${PGQ_TEST_URL:-} ]]; then
  dir="${PGQ_DASH_TEST_DIR:-/tmp/pgq_dash_test}"
  port="${PGQ_DASH_TEST_PORT:-55651}"
  stop_cluster "$dir"
  rm -rf "$dir"
  trap 'stop_cluster "$dir"; rm -rf "$dir"' EXIT
  start_cluster "$dir" "$port"
  export PGQ_TEST_DSN="host=$dir port=$port user=postgres dbname=postgres"
fi

# TAP when the output is not a terminal, whatever the Node version's default:
# its closing "# pass N" / "# fail N" lines are what scripts read.
reporter=()
[[ -t 1 ]] || reporter=(--test-reporter=tap)
node --test "${reporter[@]}" "$@" test/*.test.js
