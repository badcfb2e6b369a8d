/*
 * llmc/hybrid_apply.cuh — the GPU kernels of hybrid mode, one per CPU reference loop of hybrid/apply.h.
 * hybrid/hybrid.h decides on the host (phases, per-block coefficients); these kernels touch the
 * parameters: on the fp32 master weights, in place, with the floatX copy re-rounded in the same pass.
 *   predict:  theta_i += fl(coef_b * d_i), the run's first step keeps theta_0 in `keep` (the gradient
 *             buffer, idle during a Predict run) for an exact rollback
 *   rollback: theta = keep, bit-exactly, no other copy
 *   observe:  after AdamW, per-block <dtheta,d>, |d|^2, |dtheta|^2 (double, fixed-order chunks) and
 *             the EMA direction update
 * Products and sums use __fmul_rn/__fadd_rn: no fused multiply-add, the same roundings as the CPU
 * loops (which are compiled without contraction), so a Predict step adds the same bits on both.
 * Every kernel works on a range [lo, hi) of the flat parameters: this rank's ZeRO-1 shard, or all.
 * The direction buffer and the AdamW moments are indexed from lo (shard-local).
 */
#ifndef LLMC_HYBRID_APPLY_CUH
#define LLMC_HYBRID_APPLY_CUH

#include "llmc/cuda_common.cuh"
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

// apply_direction_at of hybrid/apply.h; k is the shard-local index
__device__ __forceinline__ float hybrid_direction_at(ApplyDirection dir, size_t k) {
    if (dir.kind == DIRECTION_EMA) { return dir.d[k]; }
    float mh = __fdiv_rn(dir.m[k], dir.bc1);
    float vh = __fdiv_rn(dir.v[k], dir.bc2);
    return __fmul_rn(dir.scale, __fdiv_rn(mh, __fadd_rn(__fsqrt_rn(vh), dir.eps)));
}

__global__ void hybrid_predict_kernel(float* master, floatX* params, float* keep, ApplyDirection dir,
                                      const size_t* offsets, int nblocks, const float* coef, size_t lo, size_t hi,
                                      int first, uint32_t seed) {
    size_t i = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= hi) { return; }
    float a = master[i];
    float x = 0.0f;
    if (i < offsets[nblocks]) {  // the padding after the last tensor has no block and stays as it is
        float c = coef[hybrid_block_of(offsets, nblocks, i)];
        x = __fmul_rn(c, hybrid_direction_at(dir, i - lo));
    }
    if (first) { keep[i] = a; }
    float p = __fadd_rn(a, x);
    master[i] = p;
    params[i] = round_to_floatX(p, i, seed);
}

// dir's pointers (d, m, v) are device pointers to shard-local buffers; coef: (nblocks) device
void hybrid_predict(float* master, floatX* params, float* keep, ApplyDirection dir, const size_t* offsets,
                    int nblocks, const float* coef, size_t lo, size_t hi, int first, uint32_t seed,
                    cudaStream_t stream) {
    const int block = 512;
    if (hi <= lo) { return; }
    hybrid_predict_kernel<<<ceil_div((long)(hi - lo), block), block, 0, stream>>>(master, params, keep, dir, offsets,
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
// observe: one CUDA block per (parameter block b, chunk c); partial[(b*APPLY_CHUNKS + c)*3 + k]

#define OBSERVE_THREADS 256

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

// scalars of apply_observe, computed once on the host
typedef struct {
    ApplyAdamStep st;
    float bc1, bc2, pbc1, pbc2, norm;
    int have_prev, kind;
    float ema_beta;
} ObserveArgs;

__global__ void hybrid_observe_kernel(double* partial, float* d, const float* master, const float* m, const float* v,
                                      const float* grads, ObserveArgs a, const size_t* offsets, size_t lo, size_t hi) {
    __shared__ double shared[32];
    int b = blockIdx.x / APPLY_CHUNKS, c = blockIdx.x % APPLY_CHUNKS;
    size_t n = offsets[b + 1] - offsets[b];
    size_t chunk = (n + APPLY_CHUNKS - 1) / APPLY_CHUNKS;
    size_t c_lo = offsets[b] + (size_t)c * chunk, c_hi = c_lo + chunk;
    if (c_hi > offsets[b + 1]) { c_hi = offsets[b + 1]; }
    if (c_lo < lo) { c_lo = lo; }
    if (c_hi > hi) { c_hi = hi; }
    const ApplyAdamStep st = a.st;
    const float wd = st.weight_decay[b];  // st.weight_decay: (nblocks) device array
    double dot = 0.0, dd = 0.0, uu = 0.0;
    for (size_t i = c_lo + threadIdx.x; i < c_hi; i += blockDim.x) {
        size_t k = i - lo;
        float mh = __fdiv_rn(m[k], a.bc1), vh = __fdiv_rn(v[k], a.bc2);
        float q = __fdiv_rn(mh, __fadd_rn(__fsqrt_rn(vh), st.eps));
        float delta = __fmul_rn(-st.lr, __fadd_rn(q, __fmul_rn(wd, master[i])));
        float dold;
        if (a.kind == DIRECTION_EMA) {
            dold = d[k];
            d[k] = __fadd_rn(__fmul_rn(a.ema_beta, dold), __fmul_rn(__fsub_rn(1.0f, a.ema_beta), __fmul_rn(delta, a.norm)));
        } else if (a.have_prev) {
            float g = __fmul_rn(grads[i], st.grad_scale);
            float mp = __fdiv_rn(__fsub_rn(m[k], __fmul_rn(__fsub_rn(1.0f, st.beta1), g)), st.beta1);
            float vp = __fdiv_rn(__fsub_rn(v[k], __fmul_rn(__fmul_rn(__fsub_rn(1.0f, st.beta2), g), g)), st.beta2);
            vp = vp > 0.0f ? vp : 0.0f;
            dold = __fmul_rn(-st.lr_peak, __fdiv_rn(__fdiv_rn(mp, a.pbc1), __fadd_rn(__fsqrt_rn(__fdiv_rn(vp, a.pbc2)), st.eps)));
        } else {
            dold = 0.0f;
        }
        dot += (double)delta * dold;
        dd += (double)dold * dold;
        uu += (double)delta * delta;
    }
    dot = block_sum_double(dot, shared);
    dd = block_sum_double(dd, shared);
    uu = block_sum_double(uu, shared);
    if (threadIdx.x == 0) {
        double* p = partial + (size_t)blockIdx.x * 3;
        p[0] = dot; p[1] = dd; p[2] = uu;
    }
}

// stats[b*3 + k] = sum over the chunks of block b, in order
__global__ void hybrid_observe_sum_kernel(double* stats, const double* partial, int nblocks) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= nblocks * 3) { return; }
    int b = idx / 3, k = idx % 3;
    double s = 0.0;
    for (int c = 0; c < APPLY_CHUNKS; c++) { s += partial[((size_t)b * APPLY_CHUNKS + c) * 3 + k]; }
    stats[idx] = s;
}

// d, m, v: shard-local device buffers; master, grads: full-length device buffers; stats: (nblocks*3)
// device doubles; partial: nblocks*APPLY_CHUNKS*3 device doubles; st->weight_decay: (nblocks) device.
// The mirror of apply_observe.
void hybrid_observe_device(double* stats, double* partial, float* d, const float* master, const float* m,
                           const float* v, const float* grads, const ApplyAdamStep* st, int kind, float ema_beta,
                           const size_t* offsets, int nblocks, size_t lo, size_t hi, cudaStream_t stream) {
    ObserveArgs a;
    a.st = *st;
    a.bc1 = 1.0f - powf(st->beta1, (float)st->t);
    a.bc2 = 1.0f - powf(st->beta2, (float)st->t);
    a.pbc1 = 1.0f - powf(st->beta1, (float)(st->t - 1));
    a.pbc2 = 1.0f - powf(st->beta2, (float)(st->t - 1));
    a.norm = st->lr_peak / st->lr;
    a.have_prev = st->t > 1;
    a.kind = kind;
    a.ema_beta = ema_beta;
    hybrid_observe_kernel<<<nblocks * APPLY_CHUNKS, OBSERVE_THREADS, 0, stream>>>(partial, d, master, m, v, grads, a,
                                                                                offsets, lo, hi);
    cudaCheck(cudaGetLastError());
    hybrid_observe_sum_kernel<<<ceil_div(nblocks * 3, 256), 256, 0, stream>>>(stats, partial, nblocks);
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_HYBRID_APPLY_CUH
