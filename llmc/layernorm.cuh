/*
 * llmc/layernorm.cuh — LayerNorm over the last dimension C, fused with the residual addition.
 * Same math as the CPU path: mean, then var = mean((x-mean)^2), rstd = 1/sqrt(var + 1e-5),
 * y = (x-mean)*rstd*w + b; mean and rstd (fp32) are saved per row for the backward pass.
 * One warp per row; statistics in fp32. The backward is one kernel that also sums the weight/bias gradients
 * per chunk of rows, then fixed-order chunk sums (reduce.cuh): no float atomics.
 * Each kernel moves W consecutive values per load: W = PACK (16 bytes) where the rows split into aligned
 * packs (every GPT-2 width), else W = 1; a lane owns whole packs, so the fp32 sums of the two widths add
 * in different orders (tolerances, not bits, tie them).
 */
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include "llmc/cuda_common.cuh"
#include "llmc/reduce.cuh"

// residual_out = a + b (when a != NULL; else the input is `b` as is), then out = LN(residual)
template <int W>
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
        for (int c = lane * W; c < C; c += 32 * W) {
            Vec<W> va = load_vec<W>(xa + c), vb = load_vec<W>(x + c), vr;
            for (int k = 0; k < W; k++) { vr.v[k] = (floatX)(to_float(va.v[k]) + to_float(vb.v[k])); }
            store_vec<W>(r + c, vr);
        }
        __syncwarp();
        x = r;
    }
    float sum = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
        Vec<W> vx = load_vec<W>(x + c);
        for (int k = 0; k < W; k++) { sum += to_float(vx.v[k]); }
    }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
        Vec<W> vx = load_vec<W>(x + c);
        for (int k = 0; k < W; k++) { float d = to_float(vx.v[k]) - m; var += d * d; }
    }
    float s = 1.0f / sqrtf(warp_sum(var) / C + 1e-5f);
    floatX* o = out + (size_t)row * C;
    for (int c = lane * W; c < C; c += 32 * W) {
        Vec<W> vx = load_vec<W>(x + c), vw = load_vec<W>(weight + c), vb = load_vec<W>(bias + c), vo;
        for (int k = 0; k < W; k++) {
            vo.v[k] = (floatX)((to_float(vx.v[k]) - m) * s * to_float(vw.v[k]) + to_float(vb.v[k]));
        }
        store_vec<W>(o + c, vo);
    }
    if (lane == 0) {
        if (mean != NULL) { mean[row] = m; }
        rstd[row] = s;
    }
}

// rows of width C at these addresses split into aligned packs (NULL: not used)
static bool layernorm_packed(int C, const void* p0, const void* p1, const void* p2, const void* p3,
                             const void* p4, const void* p5) {
    const void* p[6] = {p0, p1, p2, p3, p4, p5};
    if (C % PACK != 0) { return false; }
    for (int i = 0; i < 6; i++) {
        if (p[i] != NULL && !aligned16(p[i])) { return false; }
    }
    return true;
}

static void layernorm_forward_launch(floatX* out, float* mean, float* rstd, floatX* residual, const floatX* a,
                                     const floatX* b, const floatX* weight, const floatX* bias, int N, int C,
                                     cudaStream_t stream) {
    const int block = 256;
    if (layernorm_packed(C, out, residual, a, b, weight, bias)) {
        layernorm_forward_kernel<PACK><<<ceil_div(N, block / 32), block, 0, stream>>>(out, mean, rstd, residual, a, b,
                                                                                      weight, bias, N, C);
    } else {
        layernorm_forward_kernel<1><<<ceil_div(N, block / 32), block, 0, stream>>>(out, mean, rstd, residual, a, b,
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

// The backward in one pass over dout and inp: a block owns a chunk of rows, one warp per row at a time.
// Each row is read twice by its warp (its two statistics, then dinp), the second time from cache; the
// warp's lanes keep the weight/bias gradient sums of their columns in registers across the chunk's rows,
// and the block adds its warps' sums in a fixed order into partial[chunk] (then chunk_sum, reduce.cuh).
// The registers hold LN_BWD_PACKS packs per lane: a row wider than 32 * LN_BWD_PACKS packs is split into
// column groups (gridDim.y), each recomputing the row's statistics, so every width runs this one kernel.
#define LN_BWD_PACKS 4
#define LN_BWD_WARPS 8

// dinp += (w*dout - mean(w*dout) - norm*mean(w*dout*norm)) * rstd;
// partial[k,0,c] = sum over chunk k of dout*norm, partial[k,1,c] = sum of dout (c in this block's group)
template <int W>
__global__ void __launch_bounds__(LN_BWD_WARPS * 32)
layernorm_backward_kernel(floatX* dinp, float* partial, const floatX* dout, const floatX* inp, const float* mean,
                          const float* rstd, const floatX* weight, int N, int C, int rows_per_chunk) {
    __shared__ float sum_dw[LN_BWD_WARPS][32 * W], sum_db[LN_BWD_WARPS][32 * W];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int k = blockIdx.x, group = blockIdx.y;
    int r0 = k * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float dw[LN_BWD_PACKS][W], db[LN_BWD_PACKS][W];
    for (int j = 0; j < LN_BWD_PACKS; j++) {
        for (int i = 0; i < W; i++) { dw[j][i] = 0.0f; db[j][i] = 0.0f; }
    }
    for (int row = r0 + warp; row < r1; row += LN_BWD_WARPS) {
        const floatX* x = inp + (size_t)row * C;
        const floatX* dy = dout + (size_t)row * C;
        floatX* dx = dinp + (size_t)row * C;
        float m = mean[row], s = rstd[row];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = lane * W; c < C; c += 32 * W) {
            Vec<W> vx = load_vec<W>(x + c), vdy = load_vec<W>(dy + c), vw = load_vec<W>(weight + c);
            for (int i = 0; i < W; i++) {
                float norm = (to_float(vx.v[i]) - m) * s;
                float dnorm = to_float(vw.v[i]) * to_float(vdy.v[i]);
                dnorm_mean += dnorm;
                dnorm_norm_mean += dnorm * norm;
            }
        }
        dnorm_mean = warp_sum(dnorm_mean) / C;
        dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
#pragma unroll
        for (int j = 0; j < LN_BWD_PACKS; j++) {
            int c = ((group * LN_BWD_PACKS + j) * 32 + lane) * W;
            if (c >= C) { continue; }
            Vec<W> vx = load_vec<W>(x + c), vdy = load_vec<W>(dy + c), vw = load_vec<W>(weight + c);
            Vec<W> vdx = load_vec<W>(dx + c);
            for (int i = 0; i < W; i++) {
                float norm = (to_float(vx.v[i]) - m) * s;
                float g = to_float(vdy.v[i]);
                float dnorm = to_float(vw.v[i]) * g;
                float d = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
                vdx.v[i] = (floatX)(to_float(vdx.v[i]) + d);
                dw[j][i] += g * norm;
                db[j][i] += g;
            }
            store_vec<W>(dx + c, vdx);
        }
    }
    // the block's sums, warp 0 + warp 1 + ... in order, pack by pack
#pragma unroll
    for (int j = 0; j < LN_BWD_PACKS; j++) {
        int c0 = (group * LN_BWD_PACKS + j) * 32 * W;
        if (c0 >= C) { break; }
        for (int i = 0; i < W; i++) {
            sum_dw[warp][lane * W + i] = dw[j][i];
            sum_db[warp][lane * W + i] = db[j][i];
        }
        __syncthreads();
        for (int t = threadIdx.x; t < 32 * W && c0 + t < C; t += blockDim.x) {
            float a = 0.0f, b = 0.0f;
            for (int w = 0; w < LN_BWD_WARPS; w++) { a += sum_dw[w][t]; b += sum_db[w][t]; }
            partial[(size_t)k * 2 * C + c0 + t] = a;
            partial[(size_t)k * 2 * C + C + c0 + t] = b;
        }
        __syncthreads();
    }
}

void layernorm_backward(floatX* dinp, float* dweight, float* dbias, float* scratch, const floatX* dout,
                        const floatX* inp, const floatX* weight, const float* mean, const float* rstd,
                        int N, int C, cudaStream_t stream) {
    // dinp: (N,C) accumulated into, dweight/dbias: (C) fp32 accumulated into, scratch: REDUCE_CHUNKS*2*C
    const int block = LN_BWD_WARPS * 32;
    int rows_per_chunk = ceil_div(N, REDUCE_CHUNKS);
    int chunks = ceil_div(N, rows_per_chunk);
    if (layernorm_packed(C, dinp, dout, inp, weight, NULL, NULL)) {
        dim3 grid(chunks, ceil_div(C, 32 * PACK * LN_BWD_PACKS));
        layernorm_backward_kernel<PACK><<<grid, block, 0, stream>>>(dinp, scratch, dout, inp, mean, rstd, weight, N,
                                                                    C, rows_per_chunk);
    } else {
        dim3 grid(chunks, ceil_div(C, 32 * LN_BWD_PACKS));
        layernorm_backward_kernel<1><<<grid, block, 0, stream>>>(dinp, scratch, dout, inp, mean, rstd, weight, N, C,
                                                                 rows_per_chunk);
    }
    cudaCheck(cudaGetLastError());
    chunk_sum(dweight, scratch, C, 2 * C, chunks, stream);
    chunk_sum(dbias, scratch + C, C, 2 * C, chunks, stream);
}

#endif // LLMC_LAYERNORM_CUH
