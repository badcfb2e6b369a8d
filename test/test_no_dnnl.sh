#!/bin/bash
# test/test_no_dnnl.sh — oneDNN (libdnnl-dev) is optional: the trainer built without it (the Makefile's
# $(BUILD)/nodnnl/train_gpt2, as DNNL=0 builds ./train_gpt2) links no oneDNN, trains fp32 to the same
# numbers, bit for bit, as ./train_gpt2 (fp32 never calls oneDNN), says in its start-up table why auto is
# fp32, and refuses --precision bf16 with one line naming what is missing.
set -eu
cd "$(dirname "$0")/.."
nd=${BUILD:-build}/nodnnl/train_gpt2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
if ldd "$nd" | grep -q dnnl; then fail "$nd links oneDNN"; fi
run="-e d2 -b 2 -t 32 -x 3 -v 2 -m 2 -s 0 -n 3 --seed 7"
OMP_NUM_THREADS=2 ./train_gpt2 $run --precision fp32 -o "$tmp/with" > "$tmp/with.log" 2>&1 || { cat "$tmp/with.log"; fail "./train_gpt2"; }
OMP_NUM_THREADS=2 "$nd" $run -o "$tmp/without" > "$tmp/without.log" 2>&1 || { cat "$tmp/without.log"; fail "$nd"; }
# every number but the timings
strip() { sed -E 's/"(ms|train_time_s|tok_s|mfu_pct|wall_s)": [0-9.e+-]+,? ?//g' "$1"; }
strip "$tmp/with/metrics.jsonl" > "$tmp/a"
strip "$tmp/without/metrics.jsonl" > "$tmp/b"
[ "$(grep -c '"loss"' "$tmp/a")" = 3 ] || fail "expected 3 steps in $tmp/with/metrics.jsonl"
cmp -s "$tmp/a" "$tmp/b" || { diff "$tmp/a" "$tmp/b" | head -5; fail "fp32 differs between the builds with and without oneDNN"; }
cmp -s "$tmp/with/model_00000003.bin" "$tmp/without/model_00000003.bin" || fail "the step-3 weights differ between the builds"
cmp -s -i 1024 "$tmp/with/state_00000003_00000.bin" "$tmp/without/state_00000003_00000.bin" \
    || fail "the step-3 optimizer state (past its header) differs between the builds"
grep -Eq '^\| precision +\| fp32 \(auto: (built without oneDNN|the CPU has no native bf16)\)' "$tmp/without.log" \
    || fail "the start-up table does not say why auto is fp32"
set +e
err=$("$nd" $run --precision bf16 -o "$tmp/bf16" 2>&1 >/dev/null); rc=$?
set -e
[ "$rc" = 1 ] && [ "$err" = "error: flag --precision bf16: this build has no oneDNN (install libdnnl-dev and rebuild)" ] \
    || fail "--precision bf16: exit $rc, '$err'"
echo "PASS: built without oneDNN: no libdnnl linked, fp32 the same bit for bit, auto says why, bf16 refused in one line"
