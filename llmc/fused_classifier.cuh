/*
 * llmc/fused_classifier.cuh — softmax + cross-entropy (+ its backward) per row of logits, fused.
 * loss[row] = logsumexp(logits[row, :V]) - logits[row, target]; with dloss != 0 the logits row is then
 * overwritten in place by dlogits = (softmax - onehot(target)) * dloss, and the padded columns [V, Vp)
 * by 0. The probabilities are never stored: the backward recomputes them from the max and the sum.
 * One block per row; the max and the sum are block reductions in a fixed order. W values per load: PACK
 * where the rows split into aligned packs (every padded vocabulary), else 1. The exponentials are the fast
 * ones (__expf, a few fp32 ulps): with expf the kernel was bound by its arithmetic, not by the logits' bytes.
 */
#ifndef LLMC_FUSED_CLASSIFIER_CUH
#define LLMC_FUSED_CLASSIFIER_CUH

#include "llmc/cuda_common.cuh"

#define CLASSIFIER_THREADS 512

template <int W>
__global__ void fused_classifier_kernel(floatX* logits, float* losses, const int* targets, float dloss,
                                        int accumulate, int V, int Vp) {
    __shared__ float shared[32];
    size_t row = blockIdx.x;
    floatX* x = logits + row * Vp;
    // online max/sum per thread (a group of W values rescales the sum once), then combined across the block
    float m = -INFINITY, s = 0.0f;
    for (int v0 = threadIdx.x * W; v0 < V; v0 += blockDim.x * W) {
        Vec<W> vx = load_vec<W>(x + v0);
        int nv = min(W, V - v0);
        float vm = -INFINITY;
        for (int k = 0; k < nv; k++) { vm = fmaxf(vm, to_float(vx.v[k])); }
        if (vm > m) { s *= __expf(m - vm); m = vm; }
        for (int k = 0; k < nv; k++) { s += __expf(to_float(vx.v[k]) - m); }
    }
    float row_max = block_max(m, shared);
    float sum = block_sum(m == -INFINITY ? 0.0f : s * __expf(m - row_max), shared);
    int target = targets[row];
    float lse = row_max + logf(sum);
    if (threadIdx.x == 0) {
        float loss = lse - to_float(x[target]);
        losses[row] = accumulate ? losses[row] + loss : loss;
    }
    if (dloss == 0.0f) { return; }
    __syncthreads();  // x[target] is read above before anyone overwrites it
    for (int v0 = threadIdx.x * W; v0 < Vp; v0 += blockDim.x * W) {
        Vec<W> vx = load_vec<W>(x + v0);
        for (int k = 0; k < W; k++) {
            int v = v0 + k;
            float d = 0.0f;
            if (v < V) {
                float p = __expf(to_float(vx.v[k]) - lse);
                d = (p - (v == target ? 1.0f : 0.0f)) * dloss;
            }
            vx.v[k] = (floatX)d;
        }
        store_vec<W>(x + v0, vx);
    }
}

void fused_classifier(floatX* logits, float* losses, const int* targets, float dloss, int accumulate,
                      int N, int V, int Vp, cudaStream_t stream) {
    // logits: (N,Vp), overwritten by dlogits when dloss != 0; losses: (N) fp32, added to when accumulate;
    // targets: (N)
    if (Vp % PACK == 0 && aligned16(logits)) {
        fused_classifier_kernel<PACK><<<N, CLASSIFIER_THREADS, 0, stream>>>(logits, losses, targets, dloss,
                                                                            accumulate, V, Vp);
    } else {
        fused_classifier_kernel<1><<<N, CLASSIFIER_THREADS, 0, stream>>>(logits, losses, targets, dloss, accumulate,
                                                                         V, Vp);
    }
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_FUSED_CLASSIFIER_CUH
