#!/usr/bin/env bash
# Scenarios of pgq-worker against a real server (cli/test_worker.py).
#
#   PGQ_TEST_DSN='host=/tmp/pgq_cli port=55483 user=postgres dbname=cli' \
#       cli/run_tests.sh build/pgq-worker [-k pattern ...]
#
# PGQ_TEST_DSN: a libpq conninfo of a database where the tests may drop and
# create the extension pgq_cpp, as a superuser (they also create and drop the
# roles pgq_cli_consumer and pgq_cli_nobody). The server should have
# pgq_cpp in shared_preload_libraries (claims are then woken by commits).
# Extra arguments go to unittest (-k NAME runs the matching tests).
# Ends with "N passed, M failed"; exits non-zero when anything failed.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: PGQ_TEST_DSN=CONNINFO $0 PATH_TO_PGQ_WORKER [unittest args...]" >&2
  exit 2
fi
bin="$1"
shift
if [[ -z "${PGQ_TEST_DSN:-}" ]]; then
  echo "PGQ_TEST_DSN is not set (a libpq conninfo, superuser, a database the tests may wreck)" >&2
  exit 2
fi
if [[ ! -x "$bin" ]]; then
  echo "$bin is not an executable (build it: cmake -S . -B build && cmake --build build)" >&2
  exit 2
fi

# Debian's python3 has python3-psycopg; a python3 earlier on PATH (pyenv) may not.
export PGQ_WORKER_BIN="$(realpath "$bin")" PYTHONDONTWRITEBYTECODE=1
exec timeout "${PGQ_CLI_TEST_TIMEOUT:-300}" /usr/bin/python3 "$(dirname "$0")/test_worker.py" "$@"
