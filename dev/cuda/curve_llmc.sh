#!/usr/bin/env bash
# dev/cuda/curve_llmc.sh — a long loss curve of our train_gpt2cu next to llm.c's, from the same weights:
#   dev/cuda/curve_llmc.sh OUT_DIR OURS_BINARY LLMC_BINARY
# llm.c is not part of this repository: build its train_gpt2cu from its own source on the same machine.
# Both programs start from one random-init d12 file (written by scripts/train_gpt2.py, the PyTorch reference,
# in llm.c's model format, which both load with -e) and train on the same shards with the same flags (LR
# schedule, AdamW, clipping and the val batches are the same in both; the order of the train batches is each
# program's own shuffle). What separates two runs of one program is measured too: ours with two --seed values
# (another data order and another stochastic rounding), llm.c twice (it has no seed flag). Then
#   /usr/bin/python3 scripts/plot_curve_llmc.py OUT_DIR
# draws the curves and writes the table. Environment (defaults in brackets):
#   STEPS [300]  B [16]  T [1024]  LR [6e-4]  WARMUP [30]  VAL_EVERY [25]  VAL_BATCHES [5]  SEEDS [1 2]
#   LLMC_RUNS [2]  DATA [data/default]  TMO [600 s per run]
set -u
[ $# -eq 3 ] || { echo "usage: $0 OUT_DIR OURS_BINARY LLMC_BINARY" >&2; exit 2; }
cd "$(dirname "$0")/../.." || exit 1
OUT=$1 OURS=$2 LLMC=$3
mkdir -p "$OUT" || exit 1
STEPS=${STEPS:-300} B=${B:-16} T=${T:-1024} LR=${LR:-6e-4} WARMUP=${WARMUP:-30} VAL_EVERY=${VAL_EVERY:-25}
VAL_BATCHES=${VAL_BATCHES:-5} SEEDS=${SEEDS:-1 2} LLMC_RUNS=${LLMC_RUNS:-2} DATA=${DATA:-data/default}
TMO=${TMO:-600}
PY=/usr/bin/python3
command -v "$PY" >/dev/null || PY=python3
INIT="$OUT/d12_init.bin"
if [ ! -s "$INIT" ]; then
    "$PY" scripts/train_gpt2.py --write-init "$INIT" --depth 12 --seed 42 || { echo "could not write $INIT" >&2; exit 1; }
fi
FLAGS=(-e "$INIT" -b "$B" -t "$T" -d $((B * T)) -x "$STEPS" -l "$LR" -u "$WARMUP" -q 0.1 -c 0.1 -k cosine
       -v "$VAL_EVERY" -m "$VAL_BATCHES" -s 0 -r 1 -z 0 -i "$DATA/train_*.bin" -j "$DATA/val_*.bin")
{
    echo "curve_llmc: $(date -u), GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
    echo "flags: ${FLAGS[*]}"
    echo "ours: $OURS (--seed $SEEDS); llm.c: $LLMC ($LLMC_RUNS runs)"
} | tee "$OUT/README.txt"
FAILED=0
for seed in $SEEDS; do
    dir="$OUT/ours_seed$seed"
    rm -rf "$dir"
    echo "--- ours, seed $seed"
    timeout "$TMO" "$OURS" "${FLAGS[@]}" --seed "$seed" -o "$dir" > "$OUT/ours_seed$seed.log" 2>&1 ||
        { FAILED=1; tail -n 5 "$OUT/ours_seed$seed.log"; }
done
for run in $(seq 1 "$LLMC_RUNS"); do
    dir="$OUT/llmc_run$run"
    rm -rf "$dir" && mkdir -p "$dir"
    echo "--- llm.c, run $run"
    timeout "$TMO" "$LLMC" "${FLAGS[@]}" -o "$dir" > "$OUT/llmc_run$run.log" 2>&1 ||
        { FAILED=1; tail -n 5 "$OUT/llmc_run$run.log"; }
done
rm -f "$INIT"  # 0.5 GB; the seed and the script make it again
exit $FAILED
