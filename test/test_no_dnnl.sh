#!/bin/bash
# test/test_no_dnnl.sh — oneDNN (libdnnl-dev) is optional: the trainer built without it (the Makefile's
# $(BUILD)/nodnnl/train_gpt2, as DNNL=0 builds ./train_gpt2) links no oneDNN, trains fp32 to the same
# numbers and checkpoints, bit for bit, as ./train_gpt2 (fp32 never calls oneDNN; scripts/same_bits.py
# compares them), says in its start-up table why auto is fp32, and refuses --precision bf16 with one line
# naming what is missing.
set -eu
cd "$(dirname "$0")/.."
nd=${BUILD:-build}/nodnnl/train_gpt2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
if ldd "$nd" | grep -q dnnl; then fail "$nd links oneDNN"; fi
# fp32 runs (one and two micro batches) compared by every number and checkpoint byte
/usr/bin/python3 scripts/same_bits.py --trainers ./train_gpt2 "$nd" --only fp32 > "$tmp/same.log" 2>&1 \
    || { cat "$tmp/same.log"; fail "fp32 differs between the builds with and without oneDNN"; }
grep -q "fp32, 2 micro batches: same" "$tmp/same.log" || { cat "$tmp/same.log"; fail "same_bits compared no fp32 runs"; }
run="-e d2 -b 2 -t 32 -x 1 -v 0 -s 0"
OMP_NUM_THREADS=2 "$nd" $run -o "$tmp/without" > "$tmp/without.log" 2>&1 || { cat "$tmp/without.log"; fail "$nd"; }
grep -Eq '^\| precision +\| fp32 \(auto: (built without oneDNN|the CPU has no native bf16)\)' "$tmp/without.log" \
    || fail "the start-up table does not say why auto is fp32"
set +e
err=$("$nd" $run --precision bf16 -o "$tmp/bf16" 2>&1 >/dev/null); rc=$?
set -e
[ "$rc" = 1 ] && [ "$err" = "error: flag --precision bf16: this build has no oneDNN (install libdnnl-dev and rebuild)" ] \
    || fail "--precision bf16: exit $rc, '$err'"
echo "PASS: built without oneDNN: no libdnnl linked, fp32 the same bit for bit, auto says why, bf16 refused in one line"
