#!/bin/bash
# test/reliability/test_numeric.sh — numerical faults. NaN is injected into the output of the trainer's
# matrix multiplies (LD_PRELOAD build/nan_sgemm.so, see nan_sgemm.c) from step 3 on:
#  - a permanent fault: steps 3..7 are skipped and logged, the run stops after 5 in a row with one
#    "error:" line and a non-zero exit; every checkpoint written during the faults holds exactly the
#    weights of step 2 (bit-identical to a clean run's step 2), so NaN never reached the weights;
#  - a transient fault (steps 3 and 4): both skipped, the run recovers, finishes with exit 0 and finite
#    weights that a fresh start accepts.
# In fp32 (--precision fp32): the shim reaches OpenBLAS, and bf16's products run in oneDNN. What it tests, the
# check of each step's loss and gradient norm before the update, is the same code in both precisions.
source "$(dirname "$0")/lib.sh"
SHIM=${NAN_SGEMM_SO:-build/nan_sgemm.so}
[ -f "$SHIM" ] || fail "$SHIM not built (make $SHIM)"
SHIM=$(cd "$(dirname "$SHIM")" && pwd)/$(basename "$SHIM")
SHIM="${LLMC_PRELOAD:+$LLMC_PRELOAD }$SHIM"   # a sanitized trainer needs its runtime preloaded first
make_data
ARGS="$(base_args) --precision fp32"

# sgemm calls at start-up and per step, from 1- and 2-step runs
count_calls() { NAN_SGEMM_COUNT=1 LD_PRELOAD="$SHIM" $TRAINER $ARGS -x "$1" 2>&1 >/dev/null | sed -n 's/^nan_sgemm: \([0-9]*\) calls$/\1/p'; }
c1=$(count_calls 1)
c2=$(count_calls 2)
[ -n "$c1" ] && [ -n "$c2" ] || fail "the shim did not load (LD_PRELOAD of $SHIM)"
per_step=$((c2 - c1))
startup=$((c1 - per_step))
[ $per_step -gt 0 ] || fail "no sgemm calls per step"
first_of_step() { echo $((startup + ($1 - 1) * per_step + 1)); }

$TRAINER $ARGS -o "$WORK/ref" -n 1 -x 2 > "$WORK/ref.log" 2>&1 || { tail -5 "$WORK/ref.log"; fail "reference run failed"; }
REF2=$(md5sum < "$(model_of "$WORK/ref" 2)" | cut -c1-32)

# permanent fault from step 3
NAN_SGEMM_FROM=$(first_of_step 3) NAN_SGEMM_TO=1000000000 LD_PRELOAD="$SHIM" \
    $TRAINER $ARGS -o "$WORK/perm" -n 1 -x 20 > "$WORK/perm.out" 2> "$WORK/perm.err"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "permanent fault: exit status $rc, expected a clean failure"
last=$(grep -v '^$' "$WORK/perm.err" | tail -1)
case "$last" in "error: "*consecutive*) ;; *) fail "permanent fault: last stderr line: '$last'" ;; esac
[ "$(grep -c 'update skipped' "$WORK/perm.out")" -eq 5 ] || fail "permanent fault: expected 5 skipped steps in the log"
# (the 5th stops the run before its metrics line is written)
[ "$(grep -c '"skipped": true' "$WORK/perm/metrics.jsonl")" -ge 4 ] || fail "permanent fault: skipped steps missing from metrics.jsonl"
[ "$(latest_done "$WORK/perm")" -eq 6 ] || fail "permanent fault: latest checkpoint $(latest_done "$WORK/perm"), expected 6"
for s in 2 3 4 5 6; do
    [ "$(md5sum < "$(model_of "$WORK/perm" $s)" | cut -c1-32)" = "$REF2" ] ||
        fail "permanent fault: checkpoint $s does not hold the weights of the last good step 2"
done

# transient fault: steps 3 and 4
NAN_SGEMM_FROM=$(first_of_step 3) NAN_SGEMM_TO=$(first_of_step 5) LD_PRELOAD="$SHIM" \
    $TRAINER $ARGS -o "$WORK/trans" -n 1 -x 8 > "$WORK/trans.out" 2> "$WORK/trans.err" ||
    { tail -3 "$WORK/trans.err"; fail "transient fault: the run did not recover"; }
[ "$(grep -c 'update skipped' "$WORK/trans.out")" -eq 2 ] || fail "transient fault: expected 2 skipped steps"
for s in 3 4; do
    [ "$(md5sum < "$(model_of "$WORK/trans" $s)" | cut -c1-32)" = "$REF2" ] || fail "transient fault: step $s changed the weights"
done
[ "$(md5sum < "$(model_of "$WORK/trans" 8)" | cut -c1-32)" != "$REF2" ] || fail "transient fault: no training after the fault"
$TRAINER $ARGS -e "$(model_of "$WORK/trans" 8)" -x 1 > "$WORK/load.log" 2>&1 ||
    { tail -2 "$WORK/load.log"; fail "transient fault: final weights rejected on load"; }
note "ok: $per_step sgemm calls per step; permanent NaN: 5 skipped steps, stopped, checkpoints 2-6 bit-identical" \
     "to the clean step 2; transient NaN: 2 skipped, recovered"
