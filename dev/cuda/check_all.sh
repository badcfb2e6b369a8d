#!/bin/sh
# dev/cuda/check_all.sh — every GPU check in one go, for a machine with an NVIDIA GPU (none was available
# where this code was written). Exits non-zero at the first failure. Run from the repository root:
#   dev/cuda/check_all.sh [GPU_COMPUTE_CAPABILITY]      e.g. 90 for H100/H200, 80 for A100
# 1. the kernels against their CPU references (dev/cuda/*.cu)
# 2. test_gpt2cu against the PyTorch reference debug state (a d2 model, B=4, T=64): built with our
#    attention kernels (USE_CUDNN=0), then as the default build (cuDNN attention where the Makefile finds it)
# 3. the trainer: 20 steps, then the same run resumed from its step-10 checkpoint must log the same
#    losses bit for bit (metrics.jsonl steps 11..20), baseline and hybrid
# 4. the trainer against the CPU trainer, same flags: the largest |loss difference| over 20 steps
set -eu
cd "$(dirname "$0")/../.."
ARCH=${1:-}
MK="make --no-print-directory"
[ -n "$ARCH" ] && MK="$MK GPU_COMPUTE_CAPABILITY=$ARCH"
PY=/usr/bin/python3
mkdir -p build
echo "== 1. kernels"
for k in layernorm matmul attention classifier adamw hybrid_apply; do
    $MK dev/cuda/$k
    ./dev/cuda/$k
done
echo "== 2. test_gpt2cu vs PyTorch"
$MK train_gpt2cu test_gpt2cu train_gpt2
$PY scripts/train_gpt2.py --write-init build/gpu_test_model.bin --depth 2
$PY scripts/train_gpt2.py --write-debug-state build/gpu_test_state.bin -e build/gpu_test_model.bin -b 4 -t 64
$MK -B test_gpt2cu USE_CUDNN=0
./test_gpt2cu build/gpu_test_model.bin build/gpu_test_state.bin
$MK -B test_gpt2cu
./test_gpt2cu build/gpu_test_model.bin build/gpu_test_state.bin
echo "== 3. bit-exact resume"
FLAGS="-e d4 -b 8 -t 128 -x 20 -n 10 -v 10 -m 4 -s 0 -l 1e-3 -u 5 -q 0.1"
for mode in "--hybrid 0" "--hybrid 1 --hybrid-warmup 4 --confidence-threshold 0"; do
    out=build/gpu_resume
    rm -rf $out $out.r
    ./train_gpt2cu $FLAGS $mode -o $out > /dev/null
    mkdir -p $out.r
    cp $out/*_00000010* $out/DONE_00000010 $out.r/
    [ -f $out/hybrid_00000010.bin ] && cp $out/hybrid_00000010.bin $out.r/
    ./train_gpt2cu $FLAGS $mode -o $out.r -y 1 > /dev/null
    tail -n 10 $out/metrics.jsonl | sed 's/"ms": [^,]*, "train_time_s": [^,]*, //' > $out/a.txt
    tail -n 10 $out.r/metrics.jsonl | sed 's/"ms": [^,]*, "train_time_s": [^,]*, //' > $out/b.txt
    if cmp -s $out/a.txt $out/b.txt; then echo "resume ($mode): bit-exact"; else
        echo "FAIL: resume ($mode) differs:"; diff $out/a.txt $out/b.txt | head; exit 1; fi
done
echo "== 4. GPU vs CPU trainer (bf16 vs fp32: expect differences of order 1e-2)"
./train_gpt2 $FLAGS -o build/cpu_cmp > /dev/null
./train_gpt2cu $FLAGS -o build/gpu_cmp > /dev/null
$PY - <<'PYEOF'
import json
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if r.get("loss") is not None}
a, b = losses("build/cpu_cmp/metrics.jsonl"), losses("build/gpu_cmp/metrics.jsonl")
d = max(abs(a[s] - b[s]) for s in a)
print(f"max |loss(cpu) - loss(gpu)| over {len(a)} steps: {d:.4g}")
raise SystemExit(0 if d < 0.1 else 1)
PYEOF
echo "all GPU checks passed"
