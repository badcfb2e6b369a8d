#!/usr/bin/env bash
# dev/cuda/break_once.sh — each GPU kernel check against a build with one deliberate fault: a check that
# passes a broken kernel checks nothing. Two steps, so the build can run where nvcc links but no GPU is:
#   dev/cuda/break_once.sh build [ARCH]   # copies of the committed tree (git archive HEAD), one fault each,
#                                          # built into build/broken/ (ARCH: compute capability, default 90)
#   dev/cuda/break_once.sh run            # on a GPU: every binary of build/broken/; the good_* ones must
#                                          # pass and every other one must fail; exit 1 otherwise
# Faults (each a one-line edit that a correct check must notice):
#   ln_lastwarp     LayerNorm backward: the block's sums leave out the last warp's dweight
#   ln_onegroup     LayerNorm backward: one column group only (C = 1600 needs two)
#   ln_lastchunk    column sums (reduce.cuh): the chunk sum leaves out the last chunk (seen by layernorm)
#   mm_lastchunk    the same fault, seen by the matmul check's bias gradient
#   mm_dgelu_twice  GELU's backward applied a second time after the DGELU epilogue
#   gpa_x_kept      GPA's kernel: the average x is computed but never stored (seen by hybrid_methods)
#   lf_tau_dropped  Linefit's kernel: the time-weighted sum adds w instead of tau * w (hybrid_methods)
#   lf_jump_slope   Linefit's jump: the fitted line's slope term left out (hybrid_methods)
set -u
cd "$(dirname "$0")/../.." || exit 1
OUTD=build/broken
case "${1:-}" in
build)
    ARCH=${2:-90}
    W=$(mktemp -d)
    mkdir -p "$OUTD"
    fail=0
    mk() {  # name check sed-or-python edit (run in the copy)
        local name=$1 k=$2 edit=$3
        mkdir -p "$W/$name" && git archive HEAD | tar -x -C "$W/$name" || return 1
        (cd "$W/$name" && eval "$edit") || { echo "$name: the edit did not apply"; return 1; }
        if (cd "$W/$name" && make --no-print-directory "dev/cuda/$k" GPU_COMPUTE_CAPABILITY="$ARCH" > build.log 2>&1); then
            cp "$W/$name/dev/cuda/$k" "$OUTD/$name" && echo "built $OUTD/$name"
        else
            tail -n 5 "$W/$name/build.log"; echo "$name: build failed"; return 1
        fi
    }
    mk good_layernorm layernorm true || fail=1
    mk good_matmul matmul true || fail=1
    mk good_hybrid_methods hybrid_methods true || fail=1
    mk ln_lastwarp layernorm "sed -i 's/for (int w = 0; w < LN_BWD_WARPS; w++) { a += sum_dw/for (int w = 0; w < LN_BWD_WARPS - 1; w++) { a += sum_dw/' llmc/layernorm.cuh && grep -q 'LN_BWD_WARPS - 1' llmc/layernorm.cuh" || fail=1
    mk ln_onegroup layernorm "sed -i 's/dim3 grid(chunks, ceil_div(C, 32 \* PACK \* LN_BWD_PACKS));/dim3 grid(chunks, 1);/' llmc/layernorm.cuh && grep -q 'grid(chunks, 1)' llmc/layernorm.cuh" || fail=1
    LASTCHUNK="sed -i 's/for (int k = threadIdx.y; k < chunks; k += 32)/for (int k = threadIdx.y; k < chunks - 1; k += 32)/' llmc/reduce.cuh && grep -q 'chunks - 1' llmc/reduce.cuh"
    mk ln_lastchunk layernorm "$LASTCHUNK" || fail=1
    mk mm_lastchunk matmul "$LASTCHUNK" || fail=1
    mk mm_dgelu_twice matmul "sed -i 's/^    matmul_lt(dweight, CUDA_R_32F, inp, dout, NULL, NULL, C, OC, N, false, true, 1.0f, stream);/    if (pre_gelu) { gelu_backward(dinp, pre_gelu, dinp, (size_t)N * C, stream); }\n&/' llmc/matmul.cuh && grep -q 'if (pre_gelu) { gelu_backward' llmc/matmul.cuh" || fail=1
    mk gpa_x_kept hybrid_methods "sed -i 's/^    x\\[i\\] = xi;/    (void)xi;/' hybrid/gpa.h && grep -q '(void)xi;' hybrid/gpa.h" || fail=1
    mk lf_tau_dropped hybrid_methods "sed -i 's/s1\\[i\\] = __fmaf_rn(tau, w, s1\\[i\\]);/s1[i] = __fadd_rn(w, s1[i]);/' hybrid/linefit.h && grep -q 's1\\[i\\] = __fadd_rn(w, s1\\[i\\]);' hybrid/linefit.h" || fail=1
    mk lf_jump_slope hybrid_methods "sed -i 's/float w = __fmaf_rn(a, s0\\[i\\], __fmul_rn(b, s1\\[i\\]));/float w = __fmul_rn(a, s0[i]);/' hybrid/linefit.h && grep -q 'float w = __fmul_rn(a, s0\\[i\\]);' hybrid/linefit.h" || fail=1
    rm -rf "$W"
    exit $fail
    ;;
run)
    fail=0
    for b in "$OUTD"/*; do
        [ -x "$b" ] || continue
        n=$(basename "$b")
        timeout "${CHECK_TIMEOUT:-120}" "$b" > "$b.log" 2>&1; rc=$?
        if [[ $n == good_* ]]; then want=0; else want=1; fi
        if { [ $want = 0 ] && [ $rc = 0 ]; } || { [ $want = 1 ] && [ $rc != 0 ]; }; then verdict=ok; else verdict=WRONG; fail=1; fi
        echo "$n: exit $rc ($(tail -n 1 "$b.log")) — $verdict"
    done
    exit $fail
    ;;
*)
    echo "usage: dev/cuda/break_once.sh build [ARCH] | run" >&2; exit 2 ;;
esac
