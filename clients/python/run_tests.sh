#!/usr/bin/env bash
# Runs the Python client's tests against a real server.
#
#   PGQ_TEST_DSN="host=/tmp/pg port=5432 user=postgres dbname=scratch" bash clients/python/run_tests.sh [-k name]
#
# PGQ_TEST_DSN is a libpq conninfo of a database the tests may wreck, as a
# superuser: each test drops and creates the extension pgq_cpp there (the
# server must preload it: shared_preload_libraries = 'pgq_cpp'), ends the
# other client sessions of that database, and creates and drops roles named
# pgq_py_*. Extra arguments go to unittest. Exits non-zero on failure.
set -euo pipefail

if [[ -z ${PGQ_TEST_DSN:-} ]]; then
  echo "run_tests.sh: set PGQ_TEST_DSN to the conninfo of a scratch database (superuser)" >&2
  exit 2
fi
cd "$(dirname "$0")"
# Debian's python3 has python3-psycopg; a python3 earlier on PATH (pyenv) may not.
PYTHONPATH="$PWD" PYTHONDONTWRITEBYTECODE=1 \
  timeout "${PGQ_TEST_TIMEOUT:-300}" /usr/bin/python3 -m unittest discover -s tests -v "$@"
