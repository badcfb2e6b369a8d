/*
 * llmc/adamw.cuh — AdamW on fp32 master weights, writing the floatX working copy with stochastic rounding.
 * The element is llmc/adamw.h's, the CPU trainer's (bias-corrected moments, decoupled weight decay).
 * Works on any contiguous range [offset, offset+n) of the flat parameters (ZeRO-1 shards); `idx_base`
 * is the global index of the first element, so the rounding noise does not depend on the sharding.
 * With an EMA of the weights (llmc/average.h) the same kernel folds each new master weight into it.
 */
#ifndef LLMC_ADAMW_CUH
#define LLMC_ADAMW_CUH

#include "llmc/cuda_common.cuh"
#include "llmc/adamw.h"  // adamw_element, the one definition of the update
#include "llmc/average.h"  // average_ema_element, the EMA's

__global__ void adamw_kernel(float* master, floatX* params, const float* grads, float* m_mem, float* v_mem,
                             size_t n, size_t idx_base, float lr, float beta1, float beta2,
                             float beta1_correction, float beta2_correction, float eps, float weight_decay,
                             float grad_scale, uint32_t seed, float* avg, float avg_w, float avg_k) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    float m = m_mem[i], v = v_mem[i];
    float p = adamw_element(master[i], grads[i] * grad_scale, &m, &v, lr, beta1, beta2, beta1_correction,
                            beta2_correction, eps, weight_decay);
    m_mem[i] = m;
    v_mem[i] = v;
    master[i] = p;
    params[i] = round_to_floatX(p, idx_base + i, seed);
    if (avg != NULL) { avg[i] = average_ema_element(avg[i], p, avg_w, avg_k); }  // the same in every thread
}

// avg: (n) the same slice of the EMA of the master weights, with beta avg_decay (NULL: none)
void adamw_update_averaged(float* master, floatX* params, const float* grads, float* m_mem, float* v_mem, size_t n,
                           size_t idx_base, float lr, float beta1, float beta2, int t, float eps, float weight_decay,
                           float grad_scale, uint32_t seed, float* avg, float avg_decay, cudaStream_t stream) {
    // master/params/grads/m/v: (n) slices of the flat parameter buffers; t: 1-based step
    float beta1_correction = 1.0f - powf(beta1, (float)t);
    float beta2_correction = 1.0f - powf(beta2, (float)t);
    float avg_w = 0.0f, avg_k = 0.0f;
    if (avg != NULL) { average_ema_coefs(avg_decay, t, &avg_w, &avg_k); }
    const int block = 512;
    adamw_kernel<<<ceil_div((long)n, block), block, 0, stream>>>(master, params, grads, m_mem, v_mem, n, idx_base,
        lr, beta1, beta2, beta1_correction, beta2_correction, eps, weight_decay, grad_scale, seed, avg, avg_w, avg_k);
    cudaCheck(cudaGetLastError());
}

void adamw_update(float* master, floatX* params, const float* grads, float* m_mem, float* v_mem, size_t n,
                  size_t idx_base, float lr, float beta1, float beta2, int t, float eps, float weight_decay,
                  float grad_scale, uint32_t seed, cudaStream_t stream) {
    adamw_update_averaged(master, params, grads, m_mem, v_mem, n, idx_base, lr, beta1, beta2, t, eps, weight_decay,
                          grad_scale, seed, NULL, 0.0f, stream);
}

// exchanges a (n) and b (n) in place, element by element: the weights to keep in and out of the master weights
__global__ void average_swap_kernel(float* a, float* b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float x = a[i]; a[i] = b[i]; b[i] = x; }
}

void average_swap_device(float* a, float* b, size_t n, cudaStream_t stream) {
    const int block = 512;
    average_swap_kernel<<<ceil_div((long)n, block), block, 0, stream>>>(a, b, n);
    cudaCheck(cudaGetLastError());
}

// dst = round(src) with the rounding AdamW used for `seed`: the floatX copy is a pure function of the
// master weights and the step's seed, so it can be rebuilt bit-exactly after loading a checkpoint
__global__ void round_to_floatX_kernel(floatX* dst, const float* src, size_t n, size_t idx_base, uint32_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { dst[i] = round_to_floatX(src[i], idx_base + i, seed); }
}

void round_to_floatX_range(floatX* dst, const float* src, size_t n, size_t idx_base, uint32_t seed,
                           cudaStream_t stream) {
    const int block = 512;
    round_to_floatX_kernel<<<ceil_div((long)n, block), block, 0, stream>>>(dst, src, n, idx_base, seed);
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_ADAMW_CUH
