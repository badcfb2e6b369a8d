#!/bin/bash
# test/reliability/test_signal.sh — SIGTERM and SIGINT: the trainer finishes its step, writes a
# complete checkpoint, exits 0 and says how to resume. Run A gets SIGTERM at step a, its resume B gets
# SIGINT at step b > a. (That the printed line resumes bit-exactly: test_resume_hint.sh.)
source "$(dirname "$0")/lib.sh"
make_data
ARGS=$(base_args)

# waits until $1's metrics.jsonl has more than $2 lines (steps), then sends signal $3 to pid $4
signal_after_steps() {
    local dir=$1 steps=$2 sig=$3 pid=$4
    for _ in $(seq 1 3000); do
        [ "$(cat "$dir/metrics.jsonl" 2>/dev/null | wc -l)" -gt "$steps" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.02
    done
    kill -"$sig" "$pid" 2>/dev/null || fail "run ended before SIG$sig (too fast, or stuck?)"
}

stopped_run() {   # stopped_run SIG LABEL EXTRA_ARGS...: runs, signals after 3 more steps, checks exit
    local sig=$1 label=$2
    shift 2
    $TRAINER $ARGS -o "$WORK/run" -n 0 -x 100000 "$@" > "$WORK/$label.log" 2>&1 &
    local pid=$!
    BG_PIDS=$pid
    local before
    before=$(cat "$WORK/run/metrics.jsonl" 2>/dev/null | wc -l)
    signal_after_steps "$WORK/run" $((before + 3)) "$sig" $pid
    wait $pid
    local rc=$?
    BG_PIDS=""
    [ $rc -eq 0 ] || { tail -5 "$WORK/$label.log"; fail "SIG$sig: exit status $rc, expected 0"; }
    grep -q -- "-y 1" "$WORK/$label.log" || fail "SIG$sig: no message saying how to resume (-y 1)"
}

stopped_run TERM A
a=$(latest_done "$WORK/run")
[ "$a" -ge 1 ] || fail "SIGTERM: no complete checkpoint written"
[ -f "$(model_of "$WORK/run" "$a")" ] && [ -f "$(state_of "$WORK/run" "$a")" ] || fail "SIGTERM: checkpoint $a incomplete"

stopped_run INT B -y 1
b=$(latest_done "$WORK/run")
[ "$b" -gt "$a" ] || fail "SIGINT: no checkpoint after step $a (latest $b): did the resume start?"

note "ok: SIGTERM at step $a and SIGINT at step $b exited 0 with a complete checkpoint and a resume hint"
