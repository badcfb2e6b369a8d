#!/bin/sh
# test/test_bf16_reference.sh [runs] — the bf16 tests once more with every bf16 product computed by the
# trainer's test reference (LLMC_BF16_TEST_REFERENCE=1, llmc/cpu_dnnl.h: an SGEMM on the bf16 operands widened,
# fp32 accumulation): test_bf16 and test_train_step's bf16 runs (make test); with `runs`
# (test/test_bf16_reference_runs.sh, make check), test_resume and test_hybrid_train, whose trainer runs
# (--precision auto) are then bf16: resume bit for bit, hybrid mode's phases, rollbacks and fused update with
# the bf16 copy. On a CPU without bf16 this is the only run of the bf16 path around the products (the
# roundings, the fused passes, the kept bf16 activations, bf16 training runs and their resume); where there is
# bf16 it holds the reference to the same tolerances as oneDNN. First, that the override is on: the trainer's
# start-up table names the reference. In `make test-asan` the same with every binary sanitized (the Criterion
# binaries without leak checks, as there).
set -eu
cd "$(dirname "$0")/.."
b=${BUILD:-build}
trainer=${LLMC_TRAINER:-./train_gpt2}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
LLMC_BF16_TEST_REFERENCE=1 OMP_NUM_THREADS=2 "$trainer" -e d2 -b 2 -t 32 -x 1 -v 0 -s 0 --precision bf16 > "$tmp/log" 2>&1 \
    || { cat "$tmp/log"; echo "FAIL: $trainer --precision bf16 under LLMC_BF16_TEST_REFERENCE=1"; exit 1; }
grep -Eq '^\| precision +\| bf16 \(asked; oneDNN on the test reference' "$tmp/log" \
    || { cat "$tmp/log"; echo "FAIL: the start-up table does not name the test reference"; exit 1; }
export LLMC_BF16_TEST_REFERENCE=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
if [ "${1:-}" = runs ]; then
    "$b/test_resume"
    "$b/test_hybrid_train"
else
    "$b/test_bf16"
    "$b/test_train_step"
fi
