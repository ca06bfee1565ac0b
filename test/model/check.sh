#!/usr/bin/env bash
# Checks the Promela models of the queues' claim protocol with SPIN
# (queue_rings.pml; claimed_rows.pml, the rows a claim takes onto the
# rings): each model must hold (no assertion violated, no invalid end
# state, over every interleaving), and each bug planted in it must make the
# check fail, so the properties are known to catch what they claim to.
#
#   bash test/model/check.sh          the models and every planted bug
#
# Ends with "N passed, M failed"; exits non-zero when anything failed.
# Three full checks of queue_rings.pml ("Bounds" there): the rings (2
# jobs, a claim each, 3 segments, a carry, a crash) ~31 million states,
# 1.6 GB, ~35 s; the claims at the old scale (3 jobs, two claims each, one
# segment) ~38 million states, 2.5 GB, ~60 s; the engine as built
# (ROWS_WITH_ENTRY) ~3.6 million states, ~3 s, and with an idle lane taken
# back while producers run (TAKEBACK) ~8 million, ~6 s. claimed_rows.pml:
# 2 jobs ~1.5 million states, 1 s; 3 jobs with two claims each ~22
# million, 1.1 GB, ~40 s. On the 2-core test machine; a planted bug fails
# within seconds. About three minutes in all.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The checks run two at a time (PGQ_MODEL_JOBS), each in a directory of its
# own (SPIN writes pan.c where it runs): each is one process on one core,
# and the phase runs alone in make test. Their lines are printed in order.
jobs_max="${PGQ_MODEL_JOBS:-2}"
checks=0

verify() {  # model label expect(pass|fail) [-DMACRO...]
  local model=$1 label=$2 expect=$3 out
  shift 3
  spin -a "$@" "$model" >/dev/null
  # -DSAFETY: assertions and end states; -DCOLLAPSE: the state vectors
  # compressed losslessly (the search stays exhaustive and fits in memory);
  # -DMEMLIM: a search that outgrows 6 GB stops ("Search not completed").
  gcc -O2 -w -DSAFETY -DCOLLAPSE -DMEMLIM=6000 -o pan pan.c
  out=$(timeout 600 ./pan -m1000000 2>&1 || true)
  local errors
  errors=$(grep -oE 'errors: [0-9]+' <<<"$out" | grep -oE '[0-9]+' || echo "none")
  if grep -q "max search depth too small" <<<"$out"; then
    echo "not ok - $label: the search was cut at its depth limit (raise -m)"
  elif [[ $expect == pass ]] && grep -qE "Search not completed|out of memory" <<<"$out"; then
    echo "not ok - $label: the search did not complete (memory)"
  elif [[ $expect == pass && $errors == 0 ]]; then
    echo "ok - $label: holds ($(grep -oE '[0-9]+ states, stored' <<<"$out"))"
  elif [[ $expect == fail && $errors =~ ^[1-9] ]]; then
    echo "ok - $label: caught ($(grep -m1 -oE 'assertion violated .*|invalid end state.*' <<<"$out"))"
  else
    echo "not ok - $label: expected to $expect, SPIN said errors: $errors"
    tail -n 20 <<<"$out"
  fi
}

# verify, in the background, in its own directory; at most jobs_max at once.
# The model is queue_rings.pml, or $model while it is set (below).
check() {
  checks=$((checks + 1))
  local dir="$work/$checks" file="${model:-queue_rings.pml}"
  mkdir "$dir"
  cp "$here/$file" "$dir/"
  (cd "$dir" && verify "$file" "$@" >"$dir/result" 2>&1) &
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n || true; done
}

check "the protocol on rings (2 jobs, 3 segments, a carry)" pass
check "the claims at 3 jobs, two claims each (one segment)" pass -DJ=3 -DR1=2 -DR2=2 -DNSEG=1 -DMAXCARRY=0
check "as built: rows beside their entry, any finished segment truncated" pass -DROWS_WITH_ENTRY -DMAXCARRY=0
check "as built, an idle lane taken back while producers run" pass -DROWS_WITH_ENTRY -DMAXCARRY=0 -DTAKEBACK
check "planted: the cursor forgets an in-progress entry" fail -DBUG_SKIP_INPROGRESS
check "planted: a completion does not check its attempt" fail -DBUG_NO_FENCE
check "planted: an aborted claim keeps its entry" fail -DBUG_NO_GIVEBACK
check "planted: a segment truncated once the cursor passed it" fail -DBUG_TRUNCATE_EARLY
check "planted: a newer segment truncated before an older one" fail -DBUG_TRUNCATE_OUT_OF_ORDER
check "planted: a carry appends a running job's entry, not its receipt" fail -DBUG_CARRY_WITHOUT_RECEIPT
check "planted: a carry appends its rows after it read the job, unlocked" fail -DBUG_CARRY_UNLOCKED
check "planted (as built): receipts in the current segment" fail -DROWS_WITH_ENTRY -DMAXCARRY=0 -DBUG_ROWS_IN_CURRENT
check "planted (as built): a segment truncated once the cursor passed it" fail -DROWS_WITH_ENTRY -DMAXCARRY=0 -DBUG_TRUNCATE_EARLY
check "planted (as built): a lane built again passes entries ahead of its cursor" fail -DROWS_WITH_ENTRY -DMAXCARRY=0 -DTAKEBACK -DBUG_REBUILD_PASSES_AHEAD

# Rows claimed onto the rings (claimed_rows.pml, ADR 0028 "Rows claimed
# onto the rings"): 2 jobs waiting as rows, claims of 2 and 1, 3 segments.
model=claimed_rows.pml
check "rows claimed onto the ring (entries 'a')" pass
check "rows claimed onto the ring, 3 jobs, two claims each" pass -DJ=3 -DR1=2 -DR2=2
check "planted: the claim keeps the row beside its entry" fail -DBUG_KEEP_ROW
check "planted: a truncation counts no 'a'" fail -DBUG_TRUNCATE_IGNORES_A
check "planted: the rebuild enters no lease for an 'a'" fail -DBUG_REBUILD_SKIPS_A
check "planted: the cursor hands out an 'a'" fail -DBUG_CURSOR_TAKES_A
check "planted: a completion of a claimed row does not check its attempt" fail -DBUG_NO_FENCE
unset model

wait
for ((i = 1; i <= checks; i++)); do cat "$work/$i/result"; done >"$work/results"
cat "$work/results"
passed=$(grep -c '^ok ' "$work/results" || true)
failed=$((checks - passed))
echo "$passed passed, $failed failed"
((failed == 0))
