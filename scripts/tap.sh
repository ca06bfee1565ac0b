#!/usr/bin/env bash
# Runs the TAP tests (test/t/*.pl, PostgreSQL::Test::Cluster: background
# workers, crash restarts, DROP DATABASE, standby and promotion) with prove,
# as the postgres OS user (PostgreSQL refuses to run as root), on a copy of
# the tree it owns, with the environment PGXS's prove_installcheck sets.
# Tests the installed extension; it never builds or installs. Usage:
#   scripts/tap.sh                      every test/t/*.pl
#   scripts/tap.sh test/t/002_crash.pl  some of them
# Each test starts its own clusters on free ports that Cluster.pm picks
# (never 5432) and stops them when it ends. Node logs are kept in
# $PGQ_TAP_DIR/tmp_check/log; on failure their tails are printed.
# Two test files run at a time (PGQ_TAP_JOBS, default 2; 1 runs them one
# after the other): they wait on restarts, checkpoints and standbys more
# than they compute (333 s one at a time, 212 s two at a time, on 2 cores),
# and Cluster.pm reserves the ports it picks (015_streams' fixed ones are
# outside its range).
# (The Makefile has no TAP_TESTS: `make installcheck` in scripts/regress.sh
# would then run these too.)
source "$(dirname "$0")/lib.sh"

work="$(realpath -ms -- "${PGQ_TAP_DIR:-/tmp/pgq_cpp_tap}")"  # absolute: as_pg runs from /
pgxs_dir="$(dirname "$(dirname "$(dirname "$("$PG_CONFIG" --pgxs)")")")"  # .../lib/pgxs
perl_dir="$pgxs_dir/src/test/perl"
pg_regress="$pgxs_dir/src/test/regress/pg_regress"

# Stops, by the pid in its postmaster.pid, every cluster a run left behind
# (a test killed by the timeout below does not run Cluster.pm's END block).
stop_leftovers() {
  [[ -d "$work/tmp_check" ]] || return 0
  local pidfile
  while IFS= read -r pidfile; do
    as_pg "$PG_BIN/pg_ctl" -D "$(dirname "$pidfile")" -m immediate -w stop >/dev/null 2>&1 || true
  done < <(find "$work/tmp_check" -name postmaster.pid 2>/dev/null)
}

for f in "$perl_dir/PostgreSQL/Test/Cluster.pm" "$pg_regress"; do
  if [[ ! -e "$f" ]]; then echo "missing $f (apt-get install postgresql-server-dev-$PG_VERSION)" >&2; exit 1; fi
done
if ! perl -MIPC::Run -e 1 2>/dev/null; then
  echo "missing IPC::Run (apt-get install libipc-run-perl)" >&2; exit 1
fi

# One run at a time: a second run waits for the first instead of deleting
# its clusters. The lock is held by this shell only (fd 9 is closed for
# prove below, so a postmaster left behind cannot keep it).
lock="$work.lock"
[[ -e "$lock" ]] || : >"$lock"
exec 9<"$lock"
if ! flock -w 900 9; then echo "another scripts/tap.sh run still holds $lock" >&2; exit 1; fi

stop_leftovers
rm -rf "$work"
mkdir -p "$work"
tar -C "$PGQ_ROOT" --exclude=./build --exclude=./.git --exclude=./tmp_check -cf - . | tar -C "$work" -xf -
chown -R "$PGQ_OS_USER" "$work"
trap stop_leftovers EXIT
cd "$work"

tests=("$@")
if ((${#tests[@]} == 0)); then tests=(test/t/*.pl); fi

say "prove ${tests[*]}"
status=0
start=$SECONDS
# What prove_installcheck sets: PATH with the server's binaries first,
# TESTDIR for tmp_check (logs, data directories), PG_REGRESS (Cluster.pm
# calls it for --config-auth), the test modules on PERL5LIB.
# (as_pg runs it from /: env -C runs prove in the copy, where the test paths are.)
as_pg env -C "$work" PATH="$PG_BIN:$PATH" TESTDIR="$work" PG_REGRESS="$pg_regress" \
  PERL5LIB="$perl_dir${PERL5LIB:+:$PERL5LIB}" \
  timeout --kill-after=10 "${PGQ_TAP_TIMEOUT:-600}" prove -j "${PGQ_TAP_JOBS:-2}" -v --merge "${tests[@]}" 2>&1 9<&- || status=$?
say "TAP tests took $((SECONDS - start)) s (prove exit status $status)"

# On failure, the end of every server log, without the statements that
# log_statement = 'all' adds (the test's own output above says what it ran).
if ((status != 0)); then
  shopt -s nullglob
  for log in tmp_check/log/*.log; do
    echo "---- $work/$log (last 200 lines, statements left out)"
    awk '/^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] / { skip = ($0 ~ / LOG:  statement: /) } !skip' "$log" |
      tail -n 200 | sed 's/^/  | /'
  done
fi
exit $status
