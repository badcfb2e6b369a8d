#!/bin/bash
# test/reliability/test_numeric.sh — numerical faults. NaN is injected into the output of the trainer's
# matrix multiplies (LD_PRELOAD build/nan_sgemm.so, see nan_sgemm.c) from step 3 on:
#  - a permanent fault: steps 3..7 are skipped and logged, the run stops after 5 in a row with one
#    "error:" line and a non-zero exit; every checkpoint written during the faults holds exactly the
#    weights of step 2 (bit-identical to a clean run's step 2), so NaN never reached the weights;
#  - a transient fault (steps 3 and 4): both skipped, the run recovers, finishes with exit 0 and finite
#    weights that a fresh start accepts.
# Both series in fp32, then in bf16 with the products by the trainer's test reference
# (LLMC_BF16_TEST_REFERENCE=1, on any CPU): the shim reaches OpenBLAS's SGEMM, which oneDNN's bf16 products
# never call; the reference's are SGEMMs, so the NaN enters the bf16 path there (its bf16 activations,
# logits and weight copy around the skipped updates).
source "$(dirname "$0")/lib.sh"
SHIM=${NAN_SGEMM_SO:-build/nan_sgemm.so}
[ -f "$SHIM" ] || fail "$SHIM not built (make $SHIM)"
SHIM=$(cd "$(dirname "$SHIM")" && pwd)/$(basename "$SHIM")
SHIM="${LLMC_PRELOAD:+$LLMC_PRELOAD }$SHIM"   # a sanitized trainer needs its runtime preloaded first
make_data

series() {  # $1: the precision; its runs in $WORK/$1
local PREC=$1 W="$WORK/$1"
mkdir -p "$W"
ARGS="$(base_args) --precision $PREC"

# sgemm calls at start-up and per step, from 1- and 2-step runs
count_calls() { NAN_SGEMM_COUNT=1 LD_PRELOAD="$SHIM" $TRAINER $ARGS -x "$1" 2>&1 >/dev/null | sed -n 's/^nan_sgemm: \([0-9]*\) calls$/\1/p'; }
c1=$(count_calls 1)
c2=$(count_calls 2)
[ -n "$c1" ] && [ -n "$c2" ] || fail "the shim did not load (LD_PRELOAD of $SHIM)"
per_step=$((c2 - c1))
startup=$((c1 - per_step))
[ $per_step -gt 0 ] || fail "no sgemm calls per step"
first_of_step() { echo $((startup + ($1 - 1) * per_step + 1)); }

$TRAINER $ARGS -o "$W/ref" -n 1 -x 2 > "$W/ref.log" 2>&1 || { tail -5 "$W/ref.log"; fail "reference run failed"; }
REF2=$(md5sum < "$(model_of "$W/ref" 2)" | cut -c1-32)

# permanent fault from step 3
NAN_SGEMM_FROM=$(first_of_step 3) NAN_SGEMM_TO=1000000000 LD_PRELOAD="$SHIM" \
    $TRAINER $ARGS -o "$W/perm" -n 1 -x 20 > "$W/perm.out" 2> "$W/perm.err"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "permanent fault: exit status $rc, expected a clean failure"
last=$(grep -v '^$' "$W/perm.err" | tail -1)
case "$last" in "error: "*consecutive*) ;; *) fail "permanent fault: last stderr line: '$last'" ;; esac
[ "$(grep -c 'update skipped' "$W/perm.out")" -eq 5 ] || fail "permanent fault: expected 5 skipped steps in the log"
# (the 5th stops the run before its metrics line is written)
[ "$(grep -c '"skipped": true' "$W/perm/metrics.jsonl")" -ge 4 ] || fail "permanent fault: skipped steps missing from metrics.jsonl"
[ "$(latest_done "$W/perm")" -eq 6 ] || fail "permanent fault: latest checkpoint $(latest_done "$W/perm"), expected 6"
for s in 2 3 4 5 6; do
    [ "$(md5sum < "$(model_of "$W/perm" $s)" | cut -c1-32)" = "$REF2" ] ||
        fail "permanent fault: checkpoint $s does not hold the weights of the last good step 2"
done

# transient fault: steps 3 and 4
NAN_SGEMM_FROM=$(first_of_step 3) NAN_SGEMM_TO=$(first_of_step 5) LD_PRELOAD="$SHIM" \
    $TRAINER $ARGS -o "$W/trans" -n 1 -x 8 > "$W/trans.out" 2> "$W/trans.err" ||
    { tail -3 "$W/trans.err"; fail "transient fault: the run did not recover"; }
[ "$(grep -c 'update skipped' "$W/trans.out")" -eq 2 ] || fail "transient fault: expected 2 skipped steps"
for s in 3 4; do
    [ "$(md5sum < "$(model_of "$W/trans" $s)" | cut -c1-32)" = "$REF2" ] || fail "transient fault: step $s changed the weights"
done
[ "$(md5sum < "$(model_of "$W/trans" 8)" | cut -c1-32)" != "$REF2" ] || fail "transient fault: no training after the fault"
$TRAINER $ARGS -e "$(model_of "$W/trans" 8)" -x 1 > "$W/load.log" 2>&1 ||
    { tail -2 "$W/load.log"; fail "transient fault: final weights rejected on load"; }
note "ok ($PREC): $per_step sgemm calls per step; permanent NaN: 5 skipped steps, stopped, checkpoints 2-6" \
     "bit-identical to the clean step 2; transient NaN: 2 skipped, recovered"
}

series fp32
if LLMC_BF16_TEST_REFERENCE=1 $TRAINER $(base_args) --precision bf16 -x 1 > "$WORK/bf16_probe.log" 2>&1; then
    export LLMC_BF16_TEST_REFERENCE=1
    series bf16
else
    grep -q "this build has no oneDNN" "$WORK/bf16_probe.log" || { tail -3 "$WORK/bf16_probe.log"; fail "bf16 run failed"; }
    note "bf16: skipped (this build has no oneDNN)"
fi
