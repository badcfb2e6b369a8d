#!/bin/bash
# test/reliability/test_kill.sh — kill -9 the trainer at random moments, mostly while it writes a
# checkpoint, KILLS times (default 30), resuming each time with -y 1. After every kill the newest complete
# checkpoint (DONE marker) must be bit-identical to the same step of an uninterrupted reference run, so
# every resume continued bit-exactly; a run that reaches the last step must match the reference's end.
# A second series (HYBRID_KILLS, default 10) does the same in hybrid mode, where a checkpoint also has
# hybrid_%08d.bin (its bytes hold wall-clock timings, so there the model and state files are compared).
# At the end, metrics.jsonl must list every step once: logs are cut back to the checkpoint on resume.
source "$(dirname "$0")/lib.sh"
KILLS=${KILLS:-30}
HYBRID_KILLS=${HYBRID_KILLS:-10}
STEPS=12
make_data

# every complete checkpoint left in $1 must equal the reference at its step
check_dir() {
    local f s
    for f in $(ls "$1" 2>/dev/null | grep -E '^DONE_[0-9]{8}$'); do
        s=$((10#${f#DONE_}))
        [ "$(ckpt_hash "$1" $s 2>/dev/null)" = "${REF[$s]}" ] || fail "$2: complete checkpoint $s differs from the reference"
    done
}

kill_series() {   # kill_series LABEL KILLS EXTRA_FLAGS...
    local label=$1 KILLS=$2
    shift 2
    local ARGS="$(base_args) $*"
    rm -rf "$WORK/ref" "$WORK/run"
    # reference: uninterrupted, a checkpoint after every step
    $TRAINER $ARGS -o "$WORK/ref" -n 1 -x $STEPS > "$WORK/ref.log" 2>&1 || { cat "$WORK/ref.log"; fail "reference run failed"; }
    declare -a -g REF
    for s in $(seq 1 $STEPS); do REF[$s]=$(ckpt_hash "$WORK/ref" $s) || fail "reference checkpoint $s missing"; done
    rm -rf "$WORK/ref"

    local run="$WORK/run"
    local kills=0 completions=0 during_write=0 resumes=0 i=0 start pid rc before
    start=$(date +%s)
    while [ $kills -lt $KILLS ]; do
        i=$((i + 1))
        before=$(latest_done "$run")
        stdbuf -oL $TRAINER $ARGS -o "$run" -n 1 -nk 2 -x $STEPS -y 1 > "$WORK/run.log" 2>&1 &   # -oL: the log shows how far it got
        pid=$!
        BG_PIDS=$pid
        if [ $((i % 3)) -eq 0 ]; then
            sleep "0.$(printf '%03d' $((RANDOM % 800)))"   # anywhere: start-up, a step, a checkpoint, exit
        else
            # wait for a checkpoint file in flight, then let it run for up to 20 ms more
            for _ in $(seq 1 2000); do
                ls "$run" 2>/dev/null | grep -q '\.tmp$' && break
                kill -0 $pid 2>/dev/null || break
                sleep 0.002
            done
            ls "$run" 2>/dev/null | grep -q '\.tmp$' && during_write=$((during_write + 1))
            sleep "0.0$(printf '%02d' $((RANDOM % 20)))"
        fi
        kill -9 $pid 2>/dev/null
        wait $pid 2>/dev/null
        rc=$?
        BG_PIDS=""
        # a run that got as far as printing its config must have resumed from the newest complete checkpoint
        if [ "$before" -ge 1 ] && grep -q "resumed from step\|starting from -e" "$WORK/run.log"; then
            grep -q -E "resumed from step +\| +$before " "$WORK/run.log" || fail "run $i did not resume from step $before"
            resumes=$((resumes + 1))
        fi
        if [ $rc -eq 137 ]; then
            kills=$((kills + 1))
            check_dir "$run" "after kill $kills"
        elif [ $rc -eq 0 ]; then
            [ "$(latest_done "$run")" -eq $STEPS ] || fail "a run exited 0 before step $STEPS"
            check_dir "$run" "completed run"
            completions=$((completions + 1))
            rm -rf "$run"   # start over, so that the kills keep landing in early checkpoints too
        else
            cat "$WORK/run.log"
            fail "resumed run $i exited with status $rc"
        fi
    done
    # finish the interrupted run: it must reach the reference's last step
    $TRAINER $ARGS -o "$run" -n 1 -nk 2 -x $STEPS -y 1 > "$WORK/run.log" 2>&1 || { cat "$WORK/run.log"; fail "final resume failed"; }
    [ "$(ckpt_hash "$run" $STEPS)" = "${REF[$STEPS]}" ] || fail "final checkpoint differs from the reference"
    # the logs were cut back to the checkpoint at every resume: each step exactly once, in order
    [ "$(grep -o '^{"step": [0-9]*' "$run/metrics.jsonl" | cut -d' ' -f2 | tr '\n' ' ')" = "$(seq -s ' ' 1 $STEPS) " ] ||
        fail "metrics.jsonl does not hold steps 1..$STEPS once each: $(grep -o '^{"step": [0-9]*' "$run/metrics.jsonl" | cut -d' ' -f2 | tr '\n' ' ')"
    note "ok ($label): $kills kills ($during_write while a checkpoint file was being written), $completions runs completed" \
         "between kills, $resumes resumes seen starting at the newest complete checkpoint, all bit-exact ($(( $(date +%s) - start )) s)"
}

kill_series plain $KILLS
kill_series hybrid $HYBRID_KILLS --hybrid 1 --hybrid-warmup 2 --full-steps 1 --predict-steps 2
