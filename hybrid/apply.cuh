/*
 * hybrid/apply.cuh — the GPU kernels of hybrid mode, one per CPU reference loop of hybrid/apply.h.
 * hybrid/hybrid.h decides on the host (phases, per-block coefficients, the look-ahead's betas); these
 * kernels touch the parameters: on the fp32 master weights, in place, with the floatX copy re-rounded in
 * the same pass.
 *   predict:  theta_i += fl(coef_b * d_i), d the drift; the run's first step keeps theta_0 in `keep` (the
 *             gradient buffer, idle during a Predict run) for an exact rollback
 *   rollback: theta = keep, bit-exactly, no other copy
 *   adamw+lookahead: a measured step's AdamW update fused with the drift update, the look-ahead and the
 *             per-block <delta,d>, |d|^2, |delta|^2 (double, fixed grid, fixed-order chunk sums): one pass
 *             over theta, g, m, v and d (and the trainer's EMA where it keeps one), the weights rounded
 *             exactly as the plain kernel
 * Products and sums use __fmul_rn/__fadd_rn/__fmaf_rn exactly where the CPU loops round (they are
 * compiled without contraction, and write their fused multiply-adds as fmaf), so both give the same bits.
 * Every kernel works on a range [lo, hi) of the flat parameters: this rank's ZeRO-1 shard, or all.
 * The drift and the AdamW moments are indexed from lo (shard-local).
 */
#ifndef HYBRID_APPLY_CUH
#define HYBRID_APPLY_CUH

#include "llmc/cuda_common.cuh"
#include "llmc/adamw.cuh"
#include "hybrid/apply.h"

// the block of flat index i: offsets[b] <= i < offsets[b+1] (binary search, offsets in device memory)
__device__ __forceinline__ int hybrid_block_of(const size_t* offsets, int nblocks, size_t i) {
    int lo = 0, hi = nblocks - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (offsets[mid] <= i) { lo = mid; } else { hi = mid - 1; }
    }
    return lo;
}

__global__ void hybrid_predict_kernel(float* master, floatX* params, float* keep, const float* drift,
                                      const size_t* offsets, int nblocks, const float* coef, size_t lo, size_t hi,
                                      int first, uint32_t seed) {
    size_t i = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= hi) { return; }
    float a = master[i];
    float x = 0.0f;
    if (i < offsets[nblocks]) {  // the padding after the last tensor has no block and stays as it is
        float c = coef[hybrid_block_of(offsets, nblocks, i)];
        x = __fmul_rn(c, drift[i - lo]);
    }
    if (first) { keep[i] = a; }
    float p = __fadd_rn(a, x);
    master[i] = p;
    params[i] = round_to_floatX(p, i, seed);
}

// drift: shard-local device buffer; coef: (nblocks) device
void hybrid_predict(float* master, floatX* params, float* keep, const float* drift, const size_t* offsets,
                    int nblocks, const float* coef, size_t lo, size_t hi, int first, uint32_t seed,
                    cudaStream_t stream) {
    const int block = 512;
    if (hi <= lo) { return; }
    hybrid_predict_kernel<<<ceil_div((long)(hi - lo), block), block, 0, stream>>>(master, params, keep, drift, offsets,
                                                                                  nblocks, coef, lo, hi, first, seed);
    cudaCheck(cudaGetLastError());
}

__global__ void hybrid_rollback_kernel(float* master, floatX* params, const float* keep, size_t lo, size_t hi,
                                       uint32_t seed) {
    size_t i = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= hi) { return; }
    float p = keep[i];
    master[i] = p;
    params[i] = round_to_floatX(p, i, seed);
}

void hybrid_rollback_device(float* master, floatX* params, const float* keep, size_t lo, size_t hi, uint32_t seed,
                            cudaStream_t stream) {
    const int block = 512;
    if (hi <= lo) { return; }
    hybrid_rollback_kernel<<<ceil_div((long)(hi - lo), block), block, 0, stream>>>(master, params, keep, lo, hi, seed);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// a measured step: AdamW fused with the drift, the look-ahead and the statistics (apply_adamw_lookahead).
// One CUDA block per (parameter block b, chunk c), a fixed grid, so each chunk's partial sums
// partial[(b*HYBRID_GPU_CHUNKS + c)*3 + k] and their in-order sum are the same bits on every run.
// More chunks than the CPU's APPLY_CHUNKS: the embedding block alone is a third of GPT-2 124M, and its
// chunks must fill the SMs (the sums differ from the CPU's in order only).

#define OBSERVE_THREADS 256
#define HYBRID_GPU_CHUNKS 256

__device__ __forceinline__ double block_sum_double(double v, double* shared) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    for (int off = 16; off > 0; off >>= 1) { v += __shfl_xor_sync(0xffffffffu, v, off); }
    __syncthreads();
    if (lane == 0) { shared[warp] = v; }
    __syncthreads();
    v = lane < nwarps ? shared[lane] : 0.0;
    for (int off = 16; off > 0; off >>= 1) { v += __shfl_xor_sync(0xffffffffu, v, off); }
    return v;
}

// scalars of apply_adamw_lookahead, computed once on the host as it computes them
typedef struct {
    float lr, beta1, beta2, eps, grad_scale;
    float bc1, bc2, gamma, omg;
    const float* la_beta;  // the look-ahead: (2*nblocks) device, beta_prev then beta_next
    float* ema;            // (padded P) device, indexed like master, or NULL: the trainer's EMA (--ema)
    float ema_w, ema_k;
} HybridAdamArgs;

__global__ void hybrid_adamw_lookahead_kernel(double* partial, float* master, floatX* params, const float* grads,
                                            float* m, float* v, float* d, HybridAdamArgs a, const size_t* offsets,
                                            const float* block_wd, size_t lo, size_t hi, uint32_t seed) {
    __shared__ double shared[32];
    int b = blockIdx.x / HYBRID_GPU_CHUNKS, c = blockIdx.x % HYBRID_GPU_CHUNKS;
    size_t n = offsets[b + 1] - offsets[b];
    size_t chunk = (n + HYBRID_GPU_CHUNKS - 1) / HYBRID_GPU_CHUNKS;
    size_t c_lo = offsets[b] + (size_t)c * chunk, c_hi = c_lo + chunk;
    if (c_hi > offsets[b + 1]) { c_hi = offsets[b + 1]; }
    if (c_lo < lo) { c_lo = lo; }
    if (c_hi > hi) { c_hi = hi; }
    const float wd = block_wd[b];
    const int nblocks = gridDim.x / HYBRID_GPU_CHUNKS;
    const float bp = a.la_beta[b], bn = a.la_beta[nblocks + b];
    double dot = 0.0, dd = 0.0, uu = 0.0;
    for (size_t i = c_lo + threadIdx.x; i < c_hi; i += blockDim.x) {
        size_t k = i - lo;  // m, v, d are shard-local
        float p = master[i];
        float mi = m[k], vi = v[k];
        float pn = adamw_element(p, grads[i] * a.grad_scale, &mi, &vi, a.lr, a.beta1, a.beta2, a.bc1, a.bc2, a.eps, wd);
        m[k] = mi;
        v[k] = vi;
        float delta = __fsub_rn(pn, p);
        float dold = d[k];
        float mn = __fmaf_rn(a.gamma, dold, __fmul_rn(a.omg, __fmaf_rn(bp, dold, delta)));
        d[k] = mn;
        float out = __fmaf_rn(bn, mn, pn);
        master[i] = out;
        params[i] = round_to_floatX(out, i, seed);
        if (a.ema != NULL) { a.ema[i] = average_ema_element(a.ema[i], out, a.ema_w, a.ema_k); }
        dot = fma((double)delta, (double)dold, dot);
        dd = fma((double)dold, (double)dold, dd);
        uu = fma((double)delta, (double)delta, uu);
    }
    dot = block_sum_double(dot, shared);
    dd = block_sum_double(dd, shared);
    uu = block_sum_double(uu, shared);
    if (threadIdx.x == 0) {
        double* out = partial + (size_t)blockIdx.x * 3;
        out[0] = dot; out[1] = dd; out[2] = uu;
    }
}

// stats[b*3 + k] = sum over the chunks of block b, in order (as apply_sum_partials)
__global__ void hybrid_sum_partials_kernel(double* stats, const double* partial, int nblocks) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= nblocks * 3) { return; }
    int b = idx / 3, k = idx % 3;
    double s = 0.0;
    for (int c = 0; c < HYBRID_GPU_CHUNKS; c++) { s += partial[((size_t)b * HYBRID_GPU_CHUNKS + c) * 3 + k]; }
    stats[idx] = s;
}

// The mirror of apply_adamw_lookahead on the blocks' part of [lo, hi) (this rank's shard): master, params,
// grads: full-length device buffers; m, v, d (the drift): shard-local; stats: (nblocks*3) device doubles;
// partial: nblocks*HYBRID_GPU_CHUNKS*3 device doubles; st->weight_decay: (nblocks) device; la_beta: the
// look-ahead's (2*nblocks) device betas (beta_prev, then beta_next); seed: the floatX rounding's.
// Elements past the last block (padding) are the caller's (plain adamw_update).
void hybrid_adamw_lookahead_device(double* stats, double* partial, float* master, floatX* params, const float* grads,
                                   float* m, float* v, float* d, const ApplyAdamStep* st, float gamma,
                                   const float* la_beta, const size_t* offsets, int nblocks, size_t lo, size_t hi,
                                   uint32_t seed, cudaStream_t stream) {
    HybridAdamArgs a;
    a.lr = st->lr; a.beta1 = st->beta1; a.beta2 = st->beta2; a.eps = st->eps; a.grad_scale = st->grad_scale;
    a.bc1 = 1.0f - powf(st->beta1, (float)st->t);
    a.bc2 = 1.0f - powf(st->beta2, (float)st->t);
    a.gamma = gamma;
    a.omg = 1.0f - gamma;
    a.la_beta = la_beta;
    a.ema = st->ema;
    a.ema_w = st->ema_w;
    a.ema_k = st->ema_k;
    hybrid_adamw_lookahead_kernel<<<nblocks * HYBRID_GPU_CHUNKS, OBSERVE_THREADS, 0, stream>>>(
        partial, master, params, grads, m, v, d, a, offsets, st->weight_decay, lo, hi, seed);
    cudaCheck(cudaGetLastError());
    hybrid_sum_partials_kernel<<<ceil_div(nblocks * 3, 256), 256, 0, stream>>>(stats, partial, nblocks);
    cudaCheck(cudaGetLastError());
}

#endif // HYBRID_APPLY_CUH
