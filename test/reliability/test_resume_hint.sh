#!/bin/bash
# test/reliability/test_resume_hint.sh — what a user sees when stopping a run:
# 1. SIGTERM prints at once that the run stops after this step; the resume line printed at the end is
#    shell-quoted, so pasting it works with a multi-shard glob (-i '.../train_*.bin') and an argument
#    with a space and a quote: the line, run through sh -c, resumes and ends bit-exactly where an
#    uninterrupted run ends.
# 2. A second signal stops at once (exit 128+signal) and the last complete checkpoint still resumes.
source "$(dirname "$0")/lib.sh"
make_data
TOK="$WORK/no such 'tokenizer'.bin"   # never read (-s 0): here to be quoted
ARGS="-i $WORK/data/train_*.bin -e d1 -b 2 -t 32 -v 0 -s 0 -l 1e-3 -k constant --seed 7"
STEPS=40

# 1. SIGTERM after 3 steps, then the printed line through sh -c
$TRAINER $ARGS --tokenizer "$TOK" -o "$WORK/run" -n $STEPS -x $STEPS > "$WORK/a.log" 2>&1 &
pid=$!
BG_PIDS=$pid
for _ in $(seq 1 3000); do
    [ "$(cat "$WORK/run/metrics.jsonl" 2>/dev/null | wc -l)" -gt 3 ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.02
done
kill -TERM $pid 2>/dev/null || fail "run ended before SIGTERM"
wait $pid || { tail -5 "$WORK/a.log"; fail "SIGTERM: exit status $?, expected 0"; }
BG_PIDS=""
grep -q "^signal: stopping after this step" "$WORK/a.log" || fail "no immediate note that the run stops after this step"
line=$(grep -A1 "Resume with the same flags plus -y 1:" "$WORK/a.log" | tail -1)
case "$line" in *"-y 1") ;; *) fail "no resume line: '$line'" ;; esac
case "$line" in *"'$WORK/data/train_*.bin'"*) ;; *) fail "the glob is not quoted: $line" ;; esac
set +f   # as in a user's shell: unquoted globs would expand now
sh -c "$line" > "$WORK/b.log" 2>&1 || { tail -3 "$WORK/b.log"; fail "the printed resume line failed: $line"; }
set -f
grep -q "resumed from step" "$WORK/b.log" || fail "the printed line did not resume"
$TRAINER $ARGS -o "$WORK/ref" -n $STEPS -x $STEPS > "$WORK/ref.log" 2>&1 || fail "reference run failed"
[ "$(ckpt_hash "$WORK/run" $STEPS)" = "$(ckpt_hash "$WORK/ref" $STEPS)" ] ||
    fail "step $STEPS after SIGTERM and the pasted resume line differs from the uninterrupted run"

# 2. two SIGINTs back to back: the second one ends the run at once
BIG="-i $WORK/data/train_*.bin -e d2 -b 8 -t 256 -v 0 -s 0 -l 1e-3 -k constant --seed 7"
# The second signal goes only once the first has been handled (pending signals of one kind merge). If the
# step in progress and its checkpoint still end before it arrives, the run stops normally (exit 0, resume
# line printed): a lost race of this test, not a failure, so try again (at most 5 times).
for attempt in 1 2 3 4 5; do
    rm -rf "$WORK/two"
    $TRAINER $BIG -o "$WORK/two" -n 1 -x 100000 > "$WORK/c.log" 2>&1 &
    pid=$!
    BG_PIDS=$pid
    for _ in $(seq 1 3000); do
        [ -n "$(latest_done "$WORK/two" 2>/dev/null)" ] && [ "$(latest_done "$WORK/two")" -ge 2 ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.02
    done
    kill -INT $pid
    for _ in $(seq 1 500); do grep -q "^signal: stopping" "$WORK/c.log" && break; sleep 0.01; done
    kill -INT $pid 2>/dev/null
    wait $pid
    rc=$?
    BG_PIDS=""
    [ $rc -eq 0 ] && grep -q "^stopped by signal" "$WORK/c.log" && continue
    break
done
[ $rc -eq 130 ] || { tail -3 "$WORK/c.log"; fail "second SIGINT: exit status $rc, expected 130 (stopped at once)"; }
last=$(latest_done "$WORK/two")
$TRAINER $BIG -o "$WORK/two" -n 1 -x $((last + 1)) -y 1 --allow-changed 1 > "$WORK/d.log" 2>&1 ||
    { tail -3 "$WORK/d.log"; fail "resume from checkpoint $last after the second SIGINT failed"; }
note "ok: SIGTERM noted at once, the printed resume line works through sh -c (bit-exact); a second SIGINT exits 130 and checkpoint $last resumes"
