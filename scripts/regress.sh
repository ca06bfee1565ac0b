#!/usr/bin/env bash
# Runs pg_regress and isolation tests as the postgres OS user on a copy of the
# tree it owns (PostgreSQL refuses to run as root). Usage:
#   scripts/regress.sh [REGRESS="a b"] [ISOLATION="c d"]
source "$(dirname "$0")/lib.sh"
work="$(realpath -ms -- "${PGQ_REGRESS_DIR:-/tmp/pgq_cpp_regress}")"  # absolute: as_pg runs from /
rm -rf "$work"
mkdir -p "$work"
tar -C "$PGQ_ROOT" --exclude=./build --exclude=./.git -cf - . | tar -C "$work" -xf -
chown -R "$PGQ_OS_USER" "$work"
cd "$work"
status=0
# as_pg runs make from /: -C says where (the copy, which the postgres user owns).
as_pg make -C "$work" --no-print-directory -s installcheck "$@" || status=$?
for f in regression.diffs output_iso/regression.diffs; do
  if [[ -s "$f" ]]; then echo "---- $work/$f"; head -c 20000 "$f"; fi
done
exit $status
