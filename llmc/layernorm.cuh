/*
 * llmc/layernorm.cuh — LayerNorm over the last dimension C, fused with the residual addition.
 * Same math as the CPU path: mean, then var = mean((x-mean)^2), rstd = 1/sqrt(var + 1e-5),
 * y = (x-mean)*rstd*w + b; mean and rstd (fp32) are saved per row for the backward pass.
 * One warp per row; statistics in fp32. Weight/bias gradients use fixed-order chunk sums (reduce.cuh).
 * Rows that split into aligned 16-byte packs (every GPT-2 width) take the packed kernels.
 */
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include "llmc/cuda_common.cuh"
#include "llmc/reduce.cuh"

// residual_out = a + b (when a != NULL; else the input is `b` as is), then out = LN(residual)
__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, floatX* residual_out,
                                         const floatX* a, const floatX* b, const floatX* weight,
                                         const floatX* bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) { return; }
    const floatX* x = b + (size_t)row * C;
    if (a != NULL) {
        // the sum is rounded to floatX first: the statistics describe the stored residual exactly
        const floatX* xa = a + (size_t)row * C;
        floatX* r = residual_out + (size_t)row * C;
        for (int c = lane; c < C; c += 32) { r[c] = (floatX)(to_float(xa[c]) + to_float(x[c])); }
        __syncwarp();
        x = r;
    }
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) { sum += to_float(x[c]); }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) { float d = to_float(x[c]) - m; var += d * d; }
    float s = 1.0f / sqrtf(warp_sum(var) / C + 1e-5f);
    floatX* o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        o[c] = (floatX)((to_float(x[c]) - m) * s * to_float(weight[c]) + to_float(bias[c]));
    }
    if (lane == 0) {
        if (mean != NULL) { mean[row] = m; }
        rstd[row] = s;
    }
}

// the same in 16-byte packs (C % PACK == 0, every row 16-byte aligned): each lane owns whole packs, so the
// fp32 sums add in another order than above (tolerances, not bits, tie the two)
__global__ void layernorm_forward_pack_kernel(floatX* out, float* mean, float* rstd, floatX* residual_out,
                                              const floatX* a, const floatX* b, const floatX* weight,
                                              const floatX* bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) { return; }
    const floatX* x = b + (size_t)row * C;
    if (a != NULL) {
        const floatX* xa = a + (size_t)row * C;
        floatX* r = residual_out + (size_t)row * C;
        for (int c = lane * PACK; c < C; c += 32 * PACK) {
            packX pa = load_pack(xa + c), pb = load_pack(x + c), pr;
            for (int k = 0; k < PACK; k++) { pr.v[k] = (floatX)(to_float(pa.v[k]) + to_float(pb.v[k])); }
            store_pack(r + c, pr);
        }
        __syncwarp();
        x = r;
    }
    float sum = 0.0f;
    for (int c = lane * PACK; c < C; c += 32 * PACK) {
        packX px = load_pack(x + c);
        for (int k = 0; k < PACK; k++) { sum += to_float(px.v[k]); }
    }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane * PACK; c < C; c += 32 * PACK) {
        packX px = load_pack(x + c);
        for (int k = 0; k < PACK; k++) { float d = to_float(px.v[k]) - m; var += d * d; }
    }
    float s = 1.0f / sqrtf(warp_sum(var) / C + 1e-5f);
    floatX* o = out + (size_t)row * C;
    for (int c = lane * PACK; c < C; c += 32 * PACK) {
        packX px = load_pack(x + c), pw = load_pack(weight + c), pb = load_pack(bias + c), po;
        for (int k = 0; k < PACK; k++) {
            po.v[k] = (floatX)((to_float(px.v[k]) - m) * s * to_float(pw.v[k]) + to_float(pb.v[k]));
        }
        store_pack(o + c, po);
    }
    if (lane == 0) {
        if (mean != NULL) { mean[row] = m; }
        rstd[row] = s;
    }
}

static bool layernorm_packed(int C, const void* p0, const void* p1, const void* p2, const void* p3,
                             const void* p4, const void* p5) {
    return C % PACK == 0 && aligned16(p0) && aligned16(p1) && aligned16(p2) && aligned16(p3) &&
           aligned16(p4) && aligned16(p5);
}

static void layernorm_forward_launch(floatX* out, float* mean, float* rstd, floatX* residual, const floatX* a,
                                     const floatX* b, const floatX* weight, const floatX* bias, int N, int C,
                                     cudaStream_t stream) {
    const int block = 256;
    const void* r = residual != NULL ? (const void*)residual : (const void*)out;
    const void* pa = a != NULL ? (const void*)a : (const void*)out;
    if (layernorm_packed(C, out, r, pa, b, weight, bias)) {
        layernorm_forward_pack_kernel<<<ceil_div(N, block / 32), block, 0, stream>>>(out, mean, rstd, residual, a, b,
                                                                                     weight, bias, N, C);
    } else {
        layernorm_forward_kernel<<<ceil_div(N, block / 32), block, 0, stream>>>(out, mean, rstd, residual, a, b,
                                                                                weight, bias, N, C);
    }
    cudaCheck(cudaGetLastError());
}

void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                       const floatX* bias, int N, int C, cudaStream_t stream) {
    // out: (N,C), mean/rstd: (N), inp: (N,C), weight/bias: (C); N = B*T
    layernorm_forward_launch(out, mean, rstd, NULL, NULL, inp, weight, bias, N, C, stream);
}

void fused_residual_layernorm_forward(floatX* residual, floatX* out, float* mean, float* rstd,
                                      const floatX* a, const floatX* b, const floatX* weight,
                                      const floatX* bias, int N, int C, cudaStream_t stream) {
    // residual = a + b: (N,C); out = LN(residual): (N,C)
    layernorm_forward_launch(out, mean, rstd, residual, a, b, weight, bias, N, C, stream);
}

// dinp += (w*dout - mean(w*dout) - norm*mean(w*dout*norm)) * rstd, one warp per row
__global__ void layernorm_backward_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                               const float* mean, const float* rstd, const floatX* weight,
                                               int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) { return; }
    const floatX* x = inp + (size_t)row * C;
    const floatX* dy = dout + (size_t)row * C;
    floatX* dx = dinp + (size_t)row * C;
    float m = mean[row], s = rstd[row];
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float norm = (to_float(x[c]) - m) * s;
        float dnorm = to_float(weight[c]) * to_float(dy[c]);
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean = warp_sum(dnorm_mean) / C;
    dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
    for (int c = lane; c < C; c += 32) {
        float norm = (to_float(x[c]) - m) * s;
        float dnorm = to_float(weight[c]) * to_float(dy[c]);
        float d = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        dx[c] = (floatX)(to_float(dx[c]) + d);
    }
}

// the same in 16-byte packs (see layernorm_forward_pack_kernel)
__global__ void layernorm_backward_dinp_pack_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                                    const float* mean, const float* rstd, const floatX* weight,
                                                    int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) { return; }
    const floatX* x = inp + (size_t)row * C;
    const floatX* dy = dout + (size_t)row * C;
    floatX* dx = dinp + (size_t)row * C;
    float m = mean[row], s = rstd[row];
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int c = lane * PACK; c < C; c += 32 * PACK) {
        packX px = load_pack(x + c), pdy = load_pack(dy + c), pw = load_pack(weight + c);
        for (int k = 0; k < PACK; k++) {
            float norm = (to_float(px.v[k]) - m) * s;
            float dnorm = to_float(pw.v[k]) * to_float(pdy.v[k]);
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
    }
    dnorm_mean = warp_sum(dnorm_mean) / C;
    dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
    for (int c = lane * PACK; c < C; c += 32 * PACK) {
        packX px = load_pack(x + c), pdy = load_pack(dy + c), pw = load_pack(weight + c), pdx = load_pack(dx + c);
        for (int k = 0; k < PACK; k++) {
            float norm = (to_float(px.v[k]) - m) * s;
            float dnorm = to_float(pw.v[k]) * to_float(pdy.v[k]);
            float d = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
            pdx.v[k] = (floatX)(to_float(pdx.v[k]) + d);
        }
        store_pack(dx + c, pdx);
    }
}

// stage 1 of dweight/dbias: partial[k,0,c] = sum dout*norm, partial[k,1,c] = sum dout over chunk k
__global__ void layernorm_backward_params_kernel(float* partial, const floatX* dout, const floatX* inp,
                                                 const float* mean, const float* rstd, int N, int C,
                                                 int rows_per_chunk) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int k = blockIdx.y;
    if (c >= C) { return; }
    int r0 = k * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float dw = 0.0f, db = 0.0f;
    for (int r = r0; r < r1; r++) {
        float dy = to_float(dout[(size_t)r * C + c]);
        float norm = (to_float(inp[(size_t)r * C + c]) - mean[r]) * rstd[r];
        dw += dy * norm;
        db += dy;
    }
    partial[(size_t)k * 2 * C + c] = dw;
    partial[(size_t)k * 2 * C + C + c] = db;
}

void layernorm_backward(floatX* dinp, float* dweight, float* dbias, float* scratch, const floatX* dout,
                        const floatX* inp, const floatX* weight, const float* mean, const float* rstd,
                        int N, int C, cudaStream_t stream) {
    // dinp: (N,C) accumulated into, dweight/dbias: (C) fp32 accumulated into, scratch: REDUCE_CHUNKS*2*C
    const int block = 256;
    if (layernorm_packed(C, dinp, dout, inp, weight, dinp, dinp)) {
        layernorm_backward_dinp_pack_kernel<<<ceil_div(N, block / 32), block, 0, stream>>>(dinp, dout, inp, mean,
                                                                                           rstd, weight, N, C);
    } else {
        layernorm_backward_dinp_kernel<<<ceil_div(N, block / 32), block, 0, stream>>>(dinp, dout, inp, mean, rstd,
                                                                                      weight, N, C);
    }
    cudaCheck(cudaGetLastError());
    int rows_per_chunk = ceil_div(N, REDUCE_CHUNKS);
    int chunks = ceil_div(N, rows_per_chunk);
    layernorm_backward_params_kernel<<<dim3(ceil_div(C, block), chunks), block, 0, stream>>>(
        scratch, dout, inp, mean, rstd, N, C, rows_per_chunk);
    cudaCheck(cudaGetLastError());
    chunk_sum_kernel<<<ceil_div(C, block), block, 0, stream>>>(dweight, scratch, C, 2 * C, chunks);
    cudaCheck(cudaGetLastError());
    chunk_sum_kernel<<<ceil_div(C, block), block, 0, stream>>>(dbias, scratch + C, C, 2 * C, chunks);
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_LAYERNORM_CUH
