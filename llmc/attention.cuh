/*
 * llmc/attention.cuh — causal multi-head self-attention without the (B,NH,T,T) matrix (flash-style).
 * Reads q,k,v straight from the qkv projection (B,T,3C) and writes (B,T,C); saves only the softmax
 * log-sum-exp per query, (B,NH,T) fp32, for the backward pass, which recomputes the probabilities.
 * Math as the CPU path: scores q.k/sqrt(HS), causal mask, softmax (here online: running max and sum),
 * weighted sum of v. All accumulation in fp32. The head size is fixed at 64 (every GPT-2 size and
 * every dN model has it); other sizes stop with an error. These kernels use CUDA cores, one thread
 * per query (forward, dq) or per key (dk, dv): no tensor cores.
 */
#ifndef LLMC_ATTENTION_CUH
#define LLMC_ATTENTION_CUH

#include "llmc/cuda_common.cuh"

#define ATT_HS 64     // head size
#define ATT_TILE 32   // queries (or keys) per thread block, and rows per shared-memory tile

// forward: one thread per query row i; keys in tiles of ATT_TILE through shared memory
__global__ void attention_forward_kernel(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH) {
    __shared__ float ks[ATT_TILE][ATT_HS];
    __shared__ float vs[ATT_TILE][ATT_HS];
    int C = NH * ATT_HS, b = blockIdx.z, h = blockIdx.y;
    int i0 = blockIdx.x * ATT_TILE, i = i0 + threadIdx.x;
    const float scale = 1.0f / sqrtf((float)ATT_HS);
    const floatX* base = qkv + (size_t)b * T * 3 * C + h * ATT_HS;
    float q[ATT_HS], o[ATT_HS];
    if (i < T) {
        for (int d = 0; d < ATT_HS; d++) { q[d] = to_float(base[(size_t)i * 3 * C + d]); o[d] = 0.0f; }
    }
    float m = -INFINITY, l = 0.0f;
    int last = min(T - 1, i0 + ATT_TILE - 1);  // the last key any query of this block sees
    for (int j0 = 0; j0 <= last; j0 += ATT_TILE) {
        __syncthreads();
        for (int e = threadIdx.x; e < ATT_TILE * ATT_HS; e += blockDim.x) {
            int r = e / ATT_HS, d = e % ATT_HS, j = j0 + r;
            ks[r][d] = j < T ? to_float(base[(size_t)j * 3 * C + C + d]) : 0.0f;
            vs[r][d] = j < T ? to_float(base[(size_t)j * 3 * C + 2 * C + d]) : 0.0f;
        }
        __syncthreads();
        if (i >= T) { continue; }
        int jn = min(ATT_TILE, i - j0 + 1);  // causal: keys j <= i
        for (int r = 0; r < jn; r++) {
            float s = 0.0f;
            for (int d = 0; d < ATT_HS; d++) { s += q[d] * ks[r][d]; }
            s *= scale;
            if (s > m) {  // new running max: rescale what was accumulated so far
                float f = expf(m - s);
                l *= f;
                for (int d = 0; d < ATT_HS; d++) { o[d] *= f; }
                m = s;
            }
            float p = expf(s - m);
            l += p;
            for (int d = 0; d < ATT_HS; d++) { o[d] += p * vs[r][d]; }
        }
    }
    if (i < T) {
        floatX* y = out + ((size_t)b * T + i) * C + h * ATT_HS;
        for (int d = 0; d < ATT_HS; d++) { y[d] = (floatX)(o[d] / l); }
        lse[((size_t)b * NH + h) * T + i] = m + logf(l);
    }
}

void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH,
                       cudaStream_t stream) {
    // out: (B,T,C), lse: (B,NH,T) fp32, qkv: (B,T,3C)
    if (C / NH != ATT_HS || C % NH != 0) {
        fatal("attention: head size %d is not supported (the GPU kernels are built for head size %d)",
              C / NH, ATT_HS);
    }
    dim3 grid(ceil_div(T, ATT_TILE), NH, B);
    attention_forward_kernel<<<grid, ATT_TILE, 0, stream>>>(out, lse, qkv, B, T, NH);
    cudaCheck(cudaGetLastError());
}

// delta[b,h,i] = sum_d dout[b,i,h,d] * out[b,i,h,d] (the softmax backward's row term)
__global__ void attention_delta_kernel(float* delta, const floatX* dout, const floatX* out, int B, int T, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * T) { return; }
    int i = idx % T, h = (idx / T) % NH, b = idx / (T * NH);
    size_t off = ((size_t)b * T + i) * NH * ATT_HS + h * ATT_HS;
    float sum = 0.0f;
    for (int d = 0; d < ATT_HS; d++) { sum += to_float(dout[off + d]) * to_float(out[off + d]); }
    delta[idx] = sum;
}

// dk, dv: one thread per key j, accumulating over the queries i >= j in tiles
__global__ void attention_backward_dkv_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv,
                                              const float* lse, const float* delta, int B, int T, int NH) {
    __shared__ float qs[ATT_TILE][ATT_HS];
    __shared__ float dos[ATT_TILE][ATT_HS];
    __shared__ float kown[ATT_TILE][ATT_HS + 1];  // +1: each thread reads its own row, conflict-free
    __shared__ float vown[ATT_TILE][ATT_HS + 1];
    __shared__ float lse_s[ATT_TILE], delta_s[ATT_TILE];
    int C = NH * ATT_HS, b = blockIdx.z, h = blockIdx.y;
    int j0 = blockIdx.x * ATT_TILE, j = j0 + threadIdx.x;
    const float scale = 1.0f / sqrtf((float)ATT_HS);
    const floatX* base = qkv + (size_t)b * T * 3 * C + h * ATT_HS;
    const floatX* dbase = dout + (size_t)b * T * C + h * ATT_HS;
    const float* lse_bh = lse + ((size_t)b * NH + h) * T;
    const float* delta_bh = delta + ((size_t)b * NH + h) * T;
    for (int e = threadIdx.x; e < ATT_TILE * ATT_HS; e += blockDim.x) {
        int r = e / ATT_HS, d = e % ATT_HS, jj = j0 + r;
        kown[r][d] = jj < T ? to_float(base[(size_t)jj * 3 * C + C + d]) : 0.0f;
        vown[r][d] = jj < T ? to_float(base[(size_t)jj * 3 * C + 2 * C + d]) : 0.0f;
    }
    float dk[ATT_HS], dv[ATT_HS];
    for (int d = 0; d < ATT_HS; d++) { dk[d] = 0.0f; dv[d] = 0.0f; }
    for (int i0 = j0; i0 < T; i0 += ATT_TILE) {
        __syncthreads();
        for (int e = threadIdx.x; e < ATT_TILE * ATT_HS; e += blockDim.x) {
            int r = e / ATT_HS, d = e % ATT_HS, i = i0 + r;
            qs[r][d] = i < T ? to_float(base[(size_t)i * 3 * C + d]) : 0.0f;
            dos[r][d] = i < T ? to_float(dbase[(size_t)i * C + d]) : 0.0f;
        }
        if (threadIdx.x < ATT_TILE) {
            int i = i0 + threadIdx.x;
            lse_s[threadIdx.x] = i < T ? lse_bh[i] : 0.0f;
            delta_s[threadIdx.x] = i < T ? delta_bh[i] : 0.0f;
        }
        __syncthreads();
        if (j >= T) { continue; }
        int r_begin = max(0, j - i0), r_end = min(ATT_TILE, T - i0);  // causal: queries i >= j
        for (int r = r_begin; r < r_end; r++) {
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < ATT_HS; d++) {
                s += qs[r][d] * kown[threadIdx.x][d];
                dp += dos[r][d] * vown[threadIdx.x][d];
            }
            float p = expf(s * scale - lse_s[r]);
            float ds = p * (dp - delta_s[r]) * scale;
            for (int d = 0; d < ATT_HS; d++) {
                dv[d] += p * dos[r][d];
                dk[d] += ds * qs[r][d];
            }
        }
    }
    if (j < T) {
        floatX* g = dqkv + ((size_t)b * T + j) * 3 * C + h * ATT_HS;
        for (int d = 0; d < ATT_HS; d++) { g[C + d] = (floatX)dk[d]; g[2 * C + d] = (floatX)dv[d]; }
    }
}

// dq: one thread per query i, accumulating over the keys j <= i in tiles
__global__ void attention_backward_dq_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv,
                                             const float* lse, const float* delta, int B, int T, int NH) {
    __shared__ float ks[ATT_TILE][ATT_HS];
    __shared__ float vs[ATT_TILE][ATT_HS];
    __shared__ float qown[ATT_TILE][ATT_HS + 1];
    __shared__ float doown[ATT_TILE][ATT_HS + 1];
    int C = NH * ATT_HS, b = blockIdx.z, h = blockIdx.y;
    int i0 = blockIdx.x * ATT_TILE, i = i0 + threadIdx.x;
    const float scale = 1.0f / sqrtf((float)ATT_HS);
    const floatX* base = qkv + (size_t)b * T * 3 * C + h * ATT_HS;
    const floatX* dbase = dout + (size_t)b * T * C + h * ATT_HS;
    for (int e = threadIdx.x; e < ATT_TILE * ATT_HS; e += blockDim.x) {
        int r = e / ATT_HS, d = e % ATT_HS, ii = i0 + r;
        qown[r][d] = ii < T ? to_float(base[(size_t)ii * 3 * C + d]) : 0.0f;
        doown[r][d] = ii < T ? to_float(dbase[(size_t)ii * C + d]) : 0.0f;
    }
    float my_lse = 0.0f, my_delta = 0.0f;
    if (i < T) {
        my_lse = lse[((size_t)b * NH + h) * T + i];
        my_delta = delta[((size_t)b * NH + h) * T + i];
    }
    float dq[ATT_HS];
    for (int d = 0; d < ATT_HS; d++) { dq[d] = 0.0f; }
    int last = min(T - 1, i0 + ATT_TILE - 1);
    for (int j0 = 0; j0 <= last; j0 += ATT_TILE) {
        __syncthreads();
        for (int e = threadIdx.x; e < ATT_TILE * ATT_HS; e += blockDim.x) {
            int r = e / ATT_HS, d = e % ATT_HS, j = j0 + r;
            ks[r][d] = j < T ? to_float(base[(size_t)j * 3 * C + C + d]) : 0.0f;
            vs[r][d] = j < T ? to_float(base[(size_t)j * 3 * C + 2 * C + d]) : 0.0f;
        }
        __syncthreads();
        if (i >= T) { continue; }
        int jn = min(ATT_TILE, i - j0 + 1);
        for (int r = 0; r < jn; r++) {
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < ATT_HS; d++) {
                s += qown[threadIdx.x][d] * ks[r][d];
                dp += doown[threadIdx.x][d] * vs[r][d];
            }
            float p = expf(s * scale - my_lse);
            float ds = p * (dp - my_delta) * scale;
            for (int d = 0; d < ATT_HS; d++) { dq[d] += ds * ks[r][d]; }
        }
    }
    if (i < T) {
        floatX* g = dqkv + ((size_t)b * T + i) * 3 * C + h * ATT_HS;
        for (int d = 0; d < ATT_HS; d++) { g[d] = (floatX)dq[d]; }
    }
}

void attention_backward(floatX* dqkv, float* delta, const floatX* dout, const floatX* qkv, const floatX* out,
                        const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
    // dqkv: (B,T,3C) overwritten; delta: (B,NH,T) fp32 scratch; dout, out: (B,T,C); lse: (B,NH,T)
    if (C != NH * ATT_HS) { fatal("attention: head size %d is not supported (built for %d)", C / NH, ATT_HS); }
    const int block = 256;
    attention_delta_kernel<<<ceil_div((long)B * NH * T, block), block, 0, stream>>>(delta, dout, out, B, T, NH);
    cudaCheck(cudaGetLastError());
    dim3 grid(ceil_div(T, ATT_TILE), NH, B);
    attention_backward_dkv_kernel<<<grid, ATT_TILE, 0, stream>>>(dqkv, dout, qkv, lse, delta, B, T, NH);
    cudaCheck(cudaGetLastError());
    attention_backward_dq_kernel<<<grid, ATT_TILE, 0, stream>>>(dqkv, dout, qkv, lse, delta, B, T, NH);
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_ATTENTION_CUH
