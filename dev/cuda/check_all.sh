#!/usr/bin/env bash
# dev/cuda/check_all.sh — every GPU check in one run, for a machine with an NVIDIA GPU (none was available
# where the CUDA code was written). Run from anywhere:
#   dev/cuda/check_all.sh [LOG_DIR] [GPU_COMPUTE_CAPABILITY]
# LOG_DIR (default docs/results/gpu) receives check_all_<UTC time>.log, the whole output; the compute
# capability (e.g. 90 for H100/H200, 80 for A100) defaults to what nvidia-smi reports for GPU 0.
# Every check runs whatever the others did (no check stops the script); the script ends with one line per
# check: pass, FAIL (and why) or skipped (and why), and exits 1 if any check failed.
# Two rounds, each building everything afresh: USE_CUDNN=0 (our attention kernels) first, then the default
# build (cuDNN attention where the Makefile finds cuDNN). Each round runs:
#   kernels      every dev/cuda/<kernel> against its CPU reference (attention: also the tensor-core kernels
#                against the CUDA-core ones, and in the cuDNN round cuDNN against both)
#   pytorch      test_gpt2cu against the PyTorch reference's debug state (a d2 model, B=4, T=64)
#   recompute    -r 0, 1 and 2 log the same losses bit for bit (20 steps)
#   resume       20 steps, then the same run resumed from its step-10 checkpoint logs the same steps 11..20
#                bit for bit, baseline and hybrid
#   resume gpa, resume linefit   the method table's other rows (--hybrid gpa, --hybrid linefit with a jump
#                every 6 steps): resumed as above; GPA's model file (its kept average) the same at step 20
#   ema          --ema: resumed as above (val_loss_ema too) with the same model file (the average) at step 20,
#                and over 6 steps with a checkpoint each, every model file is the bias-corrected EMA of the
#                trained weights the state files carry (llmc/average.h), computed in numpy
#   ema lookahead   the same with the look-ahead (--hybrid lookahead), whose fused kernel folds the EMA in
#   cpu-vs-gpu   the largest |loss difference| to the CPU trainer over 20 steps, same flags (< 0.1), and the
#                largest relative difference of the gradient norm and the first micro batch's (< 0.1)
# The cuDNN round also runs the host-only graph check and says whether cuDNN found an engine (if not, the
# trainer falls back to our kernels and says so on stderr: that is a FAIL of the "cudnn engine" check).
# Needs: nvcc and the CUDA libraries, make and a C compiler, OpenBLAS (the CPU trainer), and python3 with
# torch and numpy for the reference (the pytorch check is skipped without them). Each round builds in one
# `make -k -j` (CHECK_JOBS, default nproc); every GPU run has a timeout (CHECK_TIMEOUT, default 300 s) so a
# hung kernel fails its own check only. CHECK_ALL_FORCE=1 runs the GPU checks even where nvidia-smi lists
# no GPU (to exercise the script: they then fail). CHECK_CPU_METRICS=FILE takes the CPU trainer's metrics.jsonl
# for cpu-vs-gpu from FILE (a run with FLAGS below on a machine with OpenBLAS) instead of running it here.
# CHECK_ROUNDS="ours" or "cudnn" runs one round only (the whole script may take several minutes: a GPU
# session with a per-command limit can run the rounds apart).
set -u
cd "$(dirname "$0")/../.." || exit 1
LOG_DIR=${1:-docs/results/gpu}
ARCH=${2:-}
# python: the first of $PYTHON, /usr/bin/python3, python3 that has torch and numpy (else plain python3)
PY=python3
for cand in "${PYTHON:-}" /usr/bin/python3 python3; do
    if [ -n "$cand" ] && "$cand" -c "import torch, numpy" > /dev/null 2>&1; then PY=$cand; break; fi
done
if [ -z "$ARCH" ] && command -v nvidia-smi >/dev/null 2>&1; then
    ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ')
fi
mkdir -p "$LOG_DIR" build/gpu_check || exit 1
LOG="$LOG_DIR/check_all_$(date -u +%Y%m%dT%H%M%SZ).log"
exec > >(tee "$LOG") 2>&1
W=build/gpu_check
JOBS=${CHECK_JOBS:-$(nproc 2>/dev/null || echo 4)}
TMO=${CHECK_TIMEOUT:-300}  # seconds for any one GPU run: a hung kernel fails its check, not the whole script
KERNELS=(layernorm matmul attention classifier adamw hybrid_apply hybrid_methods)
MK=(make --no-print-directory)
[ -n "$ARCH" ] && MK+=("GPU_COMPUTE_CAPABILITY=$ARCH")
# two micro batches per step (-d 2048): gradient accumulation, the first micro batch's gradient norm and the
# noise gate it feeds all run in every check
FLAGS=(-e d4 -b 8 -t 128 -d 2048 -x 20 -n 10 -v 10 -m 4 -s 0 -l 1e-3 -u 5 -q 0.1)
HYBRID=(--hybrid 1 --lookahead 0.5 --hybrid-warmup 4 --predict-steps 2 --full-steps 2)  # the look-ahead is opt-in
SUMMARY=()

echo "check_all: $(date -u), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (modified)')"
echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null || echo 'none found by nvidia-smi')"
echo "nvcc: $( (${NVCC:-nvcc} --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null) | tail -n 1)"
echo "arch: ${ARCH:-Makefile default}; log: $LOG"

result() {  # NAME STATUS [WHY]
    local line
    line=$(printf '%-34s %s' "$1" "$2${3:+ ($3)}")
    SUMMARY+=("$line")
    echo ">>> $line"
}
# check NAME CMD...: runs CMD, pass on exit 0 (124: it ran past the timeout)
check() {
    local name=$1 rc
    shift
    echo
    echo "=== $name: $*"
    "$@"
    rc=$?
    if [ $rc -eq 0 ]; then result "$name" pass
    elif [ $rc -eq 124 ]; then result "$name" FAIL "timed out after ${TMO} s"
    else result "$name" FAIL "exit $rc"; fi
    return $rc
}
# the metrics of steps after $2, timing fields dropped: what must agree bit for bit
losses_after() {
    awk -v from="$2" '{ if (match($0, /"step": *[0-9]+/)) { s = substr($0, RSTART, RLENGTH); gsub(/[^0-9]/, "", s);
        if (s + 0 > from) print } }' "$1" | sed -E 's/"(ms|train_time_s|tok_per_s|mfu)": *[^,}]*,? *//g'
}
same_losses() {  # DIR_A DIR_B FROM_STEP
    local a b
    a=$(losses_after "$1/metrics.jsonl" "$3") && b=$(losses_after "$2/metrics.jsonl" "$3") || return 1
    [ -n "$a" ] || { echo "no metrics after step $3 in $1"; return 1; }
    if [ "$a" = "$b" ]; then echo "identical: $(echo "$a" | wc -l) lines"; return 0; fi
    diff <(echo "$a") <(echo "$b") | head -n 10
    return 1
}
run_recompute() {
    local r
    for r in 0 1 2; do
        rm -rf "$W/r$r"
        timeout "$TMO" ./train_gpt2cu "${FLAGS[@]}" -r $r -o "$W/r$r" > "$W/r$r.out" 2>&1 || { tail -n 5 "$W/r$r.out"; return 1; }
    done
    same_losses "$W/r0" "$W/r1" 0 && same_losses "$W/r0" "$W/r2" 0
}
run_resume() {  # extra flags...
    local out=$W/resume
    rm -rf "$out" "$out.r"
    timeout "$TMO" ./train_gpt2cu "${FLAGS[@]}" "$@" -o "$out" > "$out.out" 2>&1 || { tail -n 5 "$out.out"; return 1; }
    mkdir -p "$out.r"
    cp "$out"/*_00000010* "$out.r"/ || return 1
    timeout "$TMO" ./train_gpt2cu "${FLAGS[@]}" "$@" -o "$out.r" -y 1 > "$out.r.out" 2>&1 || { tail -n 5 "$out.r.out"; return 1; }
    same_losses "$out" "$out.r" 10
}
run_ema() {  # [extra flags, for the closed form: a method whose update folds the EMA in]
    run_resume --ema 0.9 "$@" || return 1
    grep -q '"val_loss_ema"' "$W/resume/metrics.jsonl" || { echo "no val_loss_ema in $W/resume/metrics.jsonl"; return 1; }
    cmp "$W/resume/model_00000020.bin" "$W/resume.r/model_00000020.bin" || return 1
    local out=$W/ema_ref
    rm -rf "$out"
    timeout "$TMO" ./train_gpt2cu "${FLAGS[@]}" -x 6 -n 1 -v 0 --ema 0.7 "$@" -o "$out" > "$out.out" 2>&1 || { tail -n 5 "$out.out"; return 1; }
    "$PY" - "$out" 6 0.7 <<'PYEOF'
import sys
import numpy as np
d, steps, beta = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def trained(s):  # the trained weights after the state file's loader blob (slot 109)
    raw = open(f"{d}/state_{s:08d}_00000.bin", "rb").read()
    h = np.frombuffer(raw[:1024], dtype=np.int32)
    P, blob = int(h[40:42].view(np.uint64)[0]), int(h[42:44].view(np.uint64)[0])
    assert h[109] == 1, "slot 109 does not announce the trained weights"
    off = 1024 + 8 * P + blob
    assert len(raw) == off + 4 * P + int(h[108]), "the record does not follow the trained weights"
    return np.frombuffer(raw[off:off + 4 * P], dtype=np.float32).astype(np.float64)
p, ok = [], True
for s in range(1, steps + 1):
    p.append(trained(s))
    kept = np.fromfile(f"{d}/model_{s:08d}.bin", dtype=np.float32, offset=1024).astype(np.float64)
    ref = sum(beta ** (s - r) * p[r - 1] for r in range(1, s + 1)) * (1 - beta) / (1 - beta ** s)
    big = np.max(np.abs(np.stack(p)), axis=0) + 1e-30
    worst = float(np.max(np.abs(kept - ref) / big)) / np.finfo(np.float32).eps
    apart = float(np.max(np.abs(kept - p[-1])))
    print(f"step {s}: the model file is {worst:.2f} eps of its weights' scale from the closed form; "
          f"{apart:.3g} from the trained weights")
    ok &= worst < 4 and (s == 1 and apart == 0 or s > 1 and apart > 1e-5)
raise SystemExit(0 if ok else 1)
PYEOF
}
run_gpa() {
    run_resume --hybrid gpa --gpa-mu-x 0.9 || return 1
    grep -q '"val_loss_gpa"' "$W/resume/metrics.jsonl" || { echo "no val_loss_gpa in $W/resume/metrics.jsonl"; return 1; }
    cmp "$W/resume/model_00000020.bin" "$W/resume.r/model_00000020.bin"
}
run_linefit() {
    run_resume --hybrid linefit --linefit-states 3 --linefit-spacing 2 || return 1
    grep -q '"phase": "predict"' "$W/resume.r/metrics.jsonl" || { echo "no jump after the resume"; return 1; }
}
run_hybrid_alone() {  # --hybrid with nothing on (the defaults) trains as the baseline, bit for bit
    local d
    for d in base alone; do
        rm -rf "$W/$d"
        local extra=()
        [ $d = alone ] && extra=(--hybrid 1)
        timeout "$TMO" ./train_gpt2cu "${FLAGS[@]}" "${extra[@]}" -o "$W/$d" > "$W/$d.out" 2>&1 || { tail -n 5 "$W/$d.out"; return 1; }
    done
    grep -q "hybrid: nothing is on" "$W/alone.out" || { echo "no start-up line in $W/alone.out"; return 1; }
    # a hybrid run logs three fields of its own: only where they say nothing happened are they dropped, so a
    # step with a look-ahead, a Predict run or a rollback keeps them and differs from the baseline's line
    rm -rf "$W/alone.cmp" && mkdir -p "$W/alone.cmp" &&
        sed -E 's/, "method": "drift", "beta": null, "predict_run_step": null, "rollback": 0//' "$W/alone/metrics.jsonl" > "$W/alone.cmp/metrics.jsonl"
    same_losses "$W/base" "$W/alone.cmp" 0
}
run_beta2_default() {  # --beta2 -1 (the default) picks 0.99 at 2,048 tokens per step and 0.95 at 16,384, as on the CPU
    local d b2 extra
    for d in small large; do
        extra=()
        [ $d = large ] && extra=(-d 16384 -x 3)
        b2=$([ $d = large ] && echo 0.95 || echo 0.99)
        rm -rf "$W/b2_$d" "$W/b2_${d}_given"
        timeout "$TMO" ./train_gpt2cu "${FLAGS[@]}" "${extra[@]}" -o "$W/b2_$d" > "$W/b2_$d.out" 2>&1 || { tail -n 5 "$W/b2_$d.out"; return 1; }
        timeout "$TMO" ./train_gpt2cu "${FLAGS[@]}" "${extra[@]}" --beta2 $b2 -o "$W/b2_${d}_given" > "$W/b2_${d}_given.out" 2>&1 ||
            { tail -n 5 "$W/b2_${d}_given.out"; return 1; }
        grep -Eq "^\| beta2 \(-1\) +\| $b2: " "$W/b2_$d.out" || { echo "the start-up table of $W/b2_$d.out does not say $b2"; return 1; }
        same_losses "$W/b2_$d" "$W/b2_${d}_given" 0 || return 1
    done
}
run_cpu_vs_gpu() {
    rm -rf "$W/gpu_cmp"
    timeout "$TMO" ./train_gpt2cu "${FLAGS[@]}" -o "$W/gpu_cmp" > "$W/gpu_cmp.out" 2>&1 || { tail -n 5 "$W/gpu_cmp.out"; return 1; }
    "$PY" - "$W/cpu_cmp/metrics.jsonl" "$W/gpu_cmp/metrics.jsonl" <<'PYEOF'
import json, sys
def field(p, k):
    return {r["step"]: r[k] for r in map(json.loads, open(p)) if r.get(k) is not None}
ok = True
a, b = field(sys.argv[1], "loss"), field(sys.argv[2], "loss")
common = sorted(set(a) & set(b))
if not common:
    raise SystemExit("no common steps")
d = max(abs(a[s] - b[s]) for s in common)
print(f"max |loss(cpu) - loss(gpu)| over {len(common)} steps: {d:.4g} (bf16 vs fp32: expect order 1e-2, limit 0.1)")
ok &= d < 0.1
# the whole gradient's norm and the first micro batch's alone (the noise scale's two terms): a micro batch
# mixed up or a norm taken at the wrong time is off by tens of percent, rounding by about one
for k in ("grad_norm", "grad_norm_micro1"):
    a, b = field(sys.argv[1], k), field(sys.argv[2], k)
    common = sorted(set(a) & set(b))
    if len(common) < 10:
        print(f"{k}: logged on {len(common)} common steps (expected 20)")
        ok = False
        continue
    r = max(abs(a[s] - b[s]) / abs(a[s]) for s in common)
    print(f"max relative |{k}(cpu) - {k}(gpu)| over {len(common)} steps: {r:.4g} (limit 0.1); step 1: "
          f"{a[common[0]]:.6g} vs {b[common[0]]:.6g}")
    ok &= r < 0.1
raise SystemExit(0 if ok else 1)
PYEOF
}

# ---- prerequisites, once
HAVE_GPU=1
if ! nvidia-smi -L > /dev/null 2>&1; then HAVE_GPU=0; fi
echo
echo "=== the CPU trainer (for cpu-vs-gpu)"
CPU_OK=0
if [ -n "${CHECK_CPU_METRICS:-}" ]; then
    # a GPU machine without OpenBLAS: the CPU run was made elsewhere with the same FLAGS
    echo "using $CHECK_CPU_METRICS (CHECK_CPU_METRICS) instead of running the CPU trainer here"
    rm -rf "$W/cpu_cmp" && mkdir -p "$W/cpu_cmp" && cp "$CHECK_CPU_METRICS" "$W/cpu_cmp/metrics.jsonl" && CPU_OK=1
elif "${MK[@]}" train_gpt2 && rm -rf "$W/cpu_cmp" &&
   ./train_gpt2 "${FLAGS[@]}" -o "$W/cpu_cmp" > "$W/cpu_cmp.out" 2>&1; then
    CPU_OK=1
else
    tail -n 5 "$W/cpu_cmp.out" 2>/dev/null
    echo "not available: the CPU trainer did not build or run"
fi
echo
echo "=== the PyTorch reference state (for pytorch)"
REF_OK=0
REF_WHY="no python3 with torch and numpy (tried \$PYTHON, /usr/bin/python3, python3)"
if "$PY" -c "import torch, numpy" > /dev/null 2>&1; then
    REF_WHY="scripts/train_gpt2.py failed"
    if "$PY" scripts/train_gpt2.py --write-init "$W/ref_model.bin" --depth 2 &&
       "$PY" scripts/train_gpt2.py --write-debug-state "$W/ref_state.bin" -e "$W/ref_model.bin" -b 4 -t 64; then
        REF_OK=1
    fi
fi
[ $REF_OK = 1 ] || echo "not available: $REF_WHY"

round() {  # TAG USE_CUDNN
    local tag=$1 cudnn=$2 k
    local mk=("${MK[@]}" "USE_CUDNN=$cudnn")
    echo
    echo "############ round $tag (USE_CUDNN=$cudnn)"
    if [ "$cudnn" = 1 ] && ! "${mk[@]}" -n -B train_gpt2cu 2>/dev/null | grep -q -- -DENABLE_CUDNN; then
        for k in "graph check" "build" "${KERNELS[@]}" "cudnn engine" "pytorch" "recompute" "resume baseline" \
                 "resume hybrid" "ema" "ema lookahead" "resume gpa" "resume linefit" "cpu-vs-gpu"; do
            result "[$tag] $k" skipped "the Makefile finds no cuDNN (cudnn.h and libcudnn.so)"
        done
        return
    fi
    if [ "$cudnn" = 1 ]; then check "[$tag] graph check" "${mk[@]}" cudnn-graph-check; fi
    # everything of the round in one parallel make; -k: a failing file does not stop the others
    local bins=(train_gpt2cu test_gpt2cu) bin
    for k in "${KERNELS[@]}"; do bins+=("dev/cuda/$k"); done
    echo
    echo "=== [$tag] build: ${mk[*]} -k -j$JOBS -B ${bins[*]}"
    rm -f "${bins[@]}"
    "${mk[@]}" -k -j"$JOBS" -B "${bins[@]}"
    for bin in "${bins[@]}"; do
        if [ -x "$bin" ]; then result "[$tag] build $bin" pass; else result "[$tag] build $bin" FAIL "see the log"; fi
    done
    local why=""
    [ -x train_gpt2cu ] || why="train_gpt2cu did not build"
    [ -z "$why" ] && [ $HAVE_GPU = 0 ] && [ -z "${CHECK_ALL_FORCE:-}" ] && why="no GPU (nvidia-smi -L lists none)"
    for k in "${KERNELS[@]}"; do
        if [ ! -x "dev/cuda/$k" ]; then result "[$tag] $k" skipped "its build failed"; continue; fi
        if [ $HAVE_GPU = 0 ] && [ -z "${CHECK_ALL_FORCE:-}" ]; then result "[$tag] $k" skipped "no GPU"; continue; fi
        check "[$tag] $k" timeout "$TMO" "./dev/cuda/$k"
    done
    if [ -n "$why" ]; then
        for k in "cudnn engine" "pytorch" "recompute" "resume baseline" "resume hybrid" "ema" "ema lookahead" "resume gpa" \
                 "resume linefit" "cpu-vs-gpu"; do
            if [ "$cudnn" = 0 ] && [ "$k" = "cudnn engine" ]; then continue; fi
            result "[$tag] $k" skipped "$why"
        done
        return
    fi
    if [ "$cudnn" = 1 ]; then
        echo
        echo "=== [$tag] cudnn engine: a 1-step run, looking for the fallback line"
        rm -rf "$W/engine"
        timeout "$TMO" ./train_gpt2cu "${FLAGS[@]}" -x 1 -o "$W/engine" > "$W/engine.out" 2>&1
        if grep -q "cuDNN attention unavailable" "$W/engine.out"; then
            result "[$tag] cudnn engine" FAIL "$(grep -m 1 "cuDNN attention unavailable" "$W/engine.out" | cut -c 1-160)"
        elif grep -q "non-deterministic" "$W/engine.out"; then
            result "[$tag] cudnn engine" FAIL "$(grep -m 1 "non-deterministic" "$W/engine.out" | cut -c 1-160)"
        elif grep -q "cuDNN (fused flash attention)" "$W/engine.out" && grep -q . "$W/engine/metrics.jsonl" 2>/dev/null; then
            result "[$tag] cudnn engine" pass
        else
            tail -n 5 "$W/engine.out"
            result "[$tag] cudnn engine" FAIL "the 1-step run failed or did not report cuDNN attention, see the log"
        fi
    fi
    if [ ! -x test_gpt2cu ]; then
        result "[$tag] pytorch" skipped "test_gpt2cu did not build"
    elif [ $REF_OK = 1 ]; then
        check "[$tag] pytorch" timeout "$TMO" ./test_gpt2cu "$W/ref_model.bin" "$W/ref_state.bin"
    else
        result "[$tag] pytorch" skipped "$REF_WHY"
    fi
    check "[$tag] recompute" run_recompute
    check "[$tag] resume baseline" run_resume --hybrid 0
    check "[$tag] resume hybrid" run_resume "${HYBRID[@]}"
    check "[$tag] ema" run_ema
    check "[$tag] ema lookahead" run_ema --hybrid lookahead --hybrid-warmup 1
    check "[$tag] resume gpa" run_gpa
    check "[$tag] resume linefit" run_linefit
    check "[$tag] hybrid alone is the baseline" run_hybrid_alone
    check "[$tag] beta2 default" run_beta2_default
    if [ $CPU_OK = 1 ]; then
        check "[$tag] cpu-vs-gpu" run_cpu_vs_gpu
    else
        result "[$tag] cpu-vs-gpu" skipped "the CPU trainer did not build or run"
    fi
}

for r in ${CHECK_ROUNDS:-ours cudnn}; do
    case $r in
        ours) round ours 0 ;;
        cudnn) round cudnn 1 ;;
        *) result "round $r" FAIL "unknown round (CHECK_ROUNDS takes ours and/or cudnn)" ;;
    esac
    echo "(round $r done after $SECONDS s)"
done

echo
echo "############ summary ($(date -u))"
FAILED=0
for line in "${SUMMARY[@]}"; do
    echo "$line"
    case "$line" in *" FAIL"*) FAILED=1 ;; esac
done
echo "log: $LOG"
exit $FAILED
