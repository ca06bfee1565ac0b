#!/usr/bin/env bash
# Runs the Node client's tests (node:test) against a real PostgreSQL server with
# pgq_cpp installed (or preloaded), as a superuser: the tests create and drop
# databases pgq_node_* and roles pgq_node_*, and log in as those roles with a
# password (trust or password authentication).
#
#   PGQ_TEST_DSN="host=/tmp/pgq port=55482 user=postgres dbname=postgres" clients/node/run_tests.sh
#   PGQ_TEST_URL=postgres://postgres:secret@localhost:5432/postgres clients/node/run_tests.sh
#
# Extra arguments go to node (e.g. --test-name-pattern=stop). Installs the
# locked dependencies (package-lock.json) first when node_modules is missing
# or older than the lock file; offline afterwards.
set -euo pipefail
cd "$(dirname "$0")"

if [[ -z ${PGQ_TEST_DSN:-} && -z ${PGQ_TEST_URL:-} ]]; then
  echo "run_tests.sh: set PGQ_TEST_DSN (a libpq conninfo) or PGQ_TEST_URL (a postgres:// URL)" >&2
  exit 2
fi
source ../../scripts/lib.sh
ensure_node_modules "$PGQ_ROOT/clients/node"
# TAP when the output is not a terminal, whatever the Node version's default:
# its closing "# pass N" / "# fail N" lines are what scripts read.
reporter=()
[[ -t 1 ]] || reporter=(--test-reporter=tap)
exec node --test "${reporter[@]}" "$@" test/*.test.js
