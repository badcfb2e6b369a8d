#!/usr/bin/env bash
# dev/cuda/curve_llmc.sh — a long loss curve of our train_gpt2cu next to llm.c's, from the same weights:
#   dev/cuda/curve_llmc.sh OUT_DIR OURS_BINARY LLMC_BINARY
# llm.c is not part of this repository: build its train_gpt2cu from its own source on the same machine.
# Both programs start from the same random-init weights (d12 unless DEPTH says otherwise) (scripts/train_gpt2.py, the PyTorch reference,
# writes them; they are rounded to bf16 and written as llm.c model files, fp32 for ours and bf16 for llm.c's
# bf16 build, each loaded with -e) and train on the same shards with the same flags (LR
# schedule, AdamW (ours given llm.c's --beta2 0.95), clipping and the val batches are the same in both; ours reads llm.c's layout, --rows
# contiguous, a micro batch as B*T consecutive tokens; the order of the train batches is each program's own shuffle). What separates two runs of one program is measured too: ours with two --seed values
# (another data order and another stochastic rounding), llm.c twice (it has no seed flag). Then
#   /usr/bin/python3 scripts/plot_curve_llmc.py OUT_DIR
# draws the curves and writes the table. Environment (defaults in brackets):
#   DEPTH [12]  STEPS [300]  B [16]  T [1024]  LR [6e-4]  WARMUP [30]  VAL_EVERY [25]  VAL_BATCHES [5]  SEEDS [1 2]
#   LLMC_RUNS [2]  DATA [data/default]  TMO [600 s per run]
#   LLMC_FP32 [0]: 1 where LLMC_BINARY is llm.c built with PRECISION=FP32 (it loads fp32 model files: it gets the
#   same bf16-rounded weights as ours, written fp32), to see whether llm.c's bf16 gradients are the curves' gap
set -u
[ $# -eq 3 ] || { echo "usage: $0 OUT_DIR OURS_BINARY LLMC_BINARY" >&2; exit 2; }
cd "$(dirname "$0")/../.." || exit 1
OUT=$1 OURS=$2 LLMC=$3
mkdir -p "$OUT" || exit 1
DEPTH=${DEPTH:-12} STEPS=${STEPS:-300} B=${B:-16} T=${T:-1024} LR=${LR:-6e-4} WARMUP=${WARMUP:-30} VAL_EVERY=${VAL_EVERY:-25}
VAL_BATCHES=${VAL_BATCHES:-5} SEEDS=${SEEDS:-1 2} LLMC_RUNS=${LLMC_RUNS:-2} DATA=${DATA:-data/default}
TMO=${TMO:-600} LLMC_FP32=${LLMC_FP32:-0}
# python: the first of $PYTHON, /usr/bin/python3, python3 that has torch and numpy (as check_all.sh)
PY=python3
for cand in "${PYTHON:-}" /usr/bin/python3 python3; do
    if [ -n "$cand" ] && "$cand" -c "import torch, numpy" > /dev/null 2>&1; then PY=$cand; break; fi
done
# the init: llm.c's bf16 trainer loads only bf16 model files (version 5) and ours fp32 ones (version 3), so
# the reference's fp32 init is rounded to bf16 (to nearest even) and written both ways: the same weights
INIT="$OUT/d${DEPTH}_init.bin" INIT_BF16="$OUT/d${DEPTH}_init_bf16.bin"
if [ ! -s "$INIT" ] || [ ! -s "$INIT_BF16" ]; then
    "$PY" scripts/train_gpt2.py --write-init "$INIT" --depth "$DEPTH" --seed 42 &&
    "$PY" - "$INIT" "$INIT_BF16" <<'PYEOF' || { echo "could not write $INIT and $INIT_BF16" >&2; exit 1; }
import sys, numpy as np
src, dst16 = sys.argv[1], sys.argv[2]
header = np.fromfile(src, dtype=np.int32, count=256)
assert header[0] == 20240326 and header[1] == 3, "not an llm.c fp32 model file"
w = np.fromfile(src, dtype=np.float32, offset=1024)
u = w.view(np.uint32).astype(np.uint64)
b16 = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
w32 = (b16.astype(np.uint32) << 16).view(np.float32)
with open(src + ".tmp", "wb") as f:
    header.tofile(f); w32.tofile(f)
h5 = header.copy(); h5[1] = 5
with open(dst16 + ".tmp", "wb") as f:
    h5.tofile(f); b16.tofile(f)
import os
os.replace(src + ".tmp", src); os.replace(dst16 + ".tmp", dst16)
print(f"{src}: {w.size} parameters rounded to bf16; {dst16}: the same as bf16 (llm.c version 5)")
PYEOF
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
    timeout "$TMO" "$OURS" "${FLAGS[@]}" --rows contiguous --beta2 0.95 --seed "$seed" -o "$dir" > "$OUT/ours_seed$seed.log" 2>&1 ||
        { FAILED=1; tail -n 5 "$OUT/ours_seed$seed.log"; }
done
for run in $(seq 1 "$LLMC_RUNS"); do
    dir="$OUT/llmc_run$run"
    rm -rf "$dir" && mkdir -p "$dir"
    echo "--- llm.c, run $run"
    timeout "$TMO" "$LLMC" "${FLAGS[@]}" -e "$([ "$LLMC_FP32" = 1 ] && echo "$INIT" || echo "$INIT_BF16")" -o "$dir" > "$OUT/llmc_run$run.log" 2>&1 ||
        { FAILED=1; tail -n 5 "$OUT/llmc_run$run.log"; }
done
rm -f "$INIT" "$INIT_BF16"  # 0.75 GB at d12; the seed and the script make them again
exit $FAILED
