#!/usr/bin/env bash
# Runs the multi-connection tests (test/python, unittest + psycopg 3) against
# a throwaway cluster in /tmp/pgq_cpp_pytest on port 55460, which is stopped
# at the end whatever happens. Used by scripts/test.sh; runs standalone too
# once the extension is installed. Extra arguments go to unittest discover
# (for example -k wait).
source "$(dirname "$0")/../../scripts/lib.sh"

dir="${PGQ_PYTEST_DIR:-/tmp/pgq_cpp_pytest}"
port="${PGQ_PYTEST_PORT:-55460}"
db=pgq_pytest

# A previous run that was killed may have left its cluster behind.
stop_cluster "$dir"
rm -rf "$dir"
trap 'stop_cluster "$dir"' EXIT

start_cluster "$dir" "$port" "fsync = off" "lc_messages = 'C'" "log_min_messages = warning" \
  "max_prepared_transactions = 4"
as_pg "$PG_BIN/createdb" -h "$dir" -p "$port" -U postgres "$db"

cd "$PGQ_ROOT"
# Debian's python3 has python3-psycopg; a python3 earlier on PATH (pyenv) may not.
# The timeout is a bound against a hang, not a speed check: the suite takes
# 4-5 minutes on a 2-core machine, and a run that took 5.0 (CI, a slow
# moment) was cut off at the 300 s this bound used to be.
PGQ_TEST_DSN="host=$dir port=$port user=postgres dbname=$db" PYTHONDONTWRITEBYTECODE=1 \
  timeout "${PGQ_PYTEST_TIMEOUT:-900}" /usr/bin/python3 -m unittest discover -s test/python -v "$@"
