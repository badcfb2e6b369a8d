/*
 * llmc/attention.cuh — causal multi-head self-attention without the (B,NH,T,T) matrix (flash-style).
 * Reads q,k,v straight from the qkv projection (B,T,3C) and writes (B,T,C); saves only the softmax
 * log-sum-exp per query, (B,NH,T) fp32, for the backward pass, which recomputes the probabilities.
 * Math as the CPU path: scores q.k/sqrt(HS), causal mask, softmax (here online: running max and sum),
 * weighted sum of v. All accumulation in fp32. Head sizes 64 (every GPT-2 size and dN model) and 128.
 * Two implementations: CUDA-core kernels (one thread per query (forward, dq) or per key (dk, dv), fp32
 * math) kept as the reference and for fp32 builds, and tensor-core kernels (bf16 mma, fp32 accumulation)
 * that attention_forward/attention_backward use in bf16 builds. dev/cuda/attention.cu checks both against
 * the CPU loop and each other.
 */
#ifndef LLMC_ATTENTION_CUH
#define LLMC_ATTENTION_CUH

#include "llmc/cuda_common.cuh"

#define ATT_HS 64     // the trainer's head size (every GPT-2 size and dN model)
// CUDA-core kernels: queries (or keys) per thread block, and rows per shared-memory tile (static shared
// memory stays under 48 KiB at head size 128)
#define ATT_CC_TILE(HS) (2048 / (HS))

// forward: one thread per query row i; keys in tiles of ATT_CC_TILE(HS) through shared memory
template <int HS>
__global__ void attention_forward_kernel(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH) {
    __shared__ float ks[ATT_CC_TILE(HS)][HS];
    __shared__ float vs[ATT_CC_TILE(HS)][HS];
    int C = NH * HS, b = blockIdx.z, h = blockIdx.y;
    int i0 = blockIdx.x * ATT_CC_TILE(HS), i = i0 + threadIdx.x;
    const float scale = 1.0f / sqrtf((float)HS);
    const floatX* base = qkv + (size_t)b * T * 3 * C + h * HS;
    float q[HS], o[HS];
    if (i < T) {
        for (int d = 0; d < HS; d++) { q[d] = to_float(base[(size_t)i * 3 * C + d]); o[d] = 0.0f; }
    }
    float m = -INFINITY, l = 0.0f;
    int last = min(T - 1, i0 + ATT_CC_TILE(HS) - 1);  // the last key any query of this block sees
    for (int j0 = 0; j0 <= last; j0 += ATT_CC_TILE(HS)) {
        __syncthreads();
        for (int e = threadIdx.x; e < ATT_CC_TILE(HS) * HS; e += blockDim.x) {
            int r = e / HS, d = e % HS, j = j0 + r;
            ks[r][d] = j < T ? to_float(base[(size_t)j * 3 * C + C + d]) : 0.0f;
            vs[r][d] = j < T ? to_float(base[(size_t)j * 3 * C + 2 * C + d]) : 0.0f;
        }
        __syncthreads();
        if (i >= T) { continue; }
        int jn = min(ATT_CC_TILE(HS), i - j0 + 1);  // causal: keys j <= i
        for (int r = 0; r < jn; r++) {
            float s = 0.0f;
            for (int d = 0; d < HS; d++) { s += q[d] * ks[r][d]; }
            s *= scale;
            if (s > m) {  // new running max: rescale what was accumulated so far
                float f = expf(m - s);
                l *= f;
                for (int d = 0; d < HS; d++) { o[d] *= f; }
                m = s;
            }
            float p = expf(s - m);
            l += p;
            for (int d = 0; d < HS; d++) { o[d] += p * vs[r][d]; }
        }
    }
    if (i < T) {
        floatX* y = out + ((size_t)b * T + i) * C + h * HS;
        for (int d = 0; d < HS; d++) { y[d] = (floatX)(o[d] / l); }
        lse[((size_t)b * NH + h) * T + i] = m + logf(l);
    }
}

static void attention_check_head_size(int C, int NH) {
    if (C % NH != 0 || (C / NH != 64 && C / NH != 128)) {
        fatal("attention: head size %d (C %d, NH %d) is not supported: the GPU kernels take 64 or 128", C / NH, C, NH);
    }
}

// the CUDA-core forward: the reference the tensor-core kernels are checked against (dev/cuda/attention.cu),
// and the forward of fp32 builds
void attention_forward_cc(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH,
                          cudaStream_t stream) {
    // out: (B,T,C), lse: (B,NH,T) fp32, qkv: (B,T,3C)
    attention_check_head_size(C, NH);
    if (C / NH == 64) {
        dim3 grid(ceil_div(T, ATT_CC_TILE(64)), NH, B);
        attention_forward_kernel<64><<<grid, ATT_CC_TILE(64), 0, stream>>>(out, lse, qkv, B, T, NH);
    } else {
        dim3 grid(ceil_div(T, ATT_CC_TILE(128)), NH, B);
        attention_forward_kernel<128><<<grid, ATT_CC_TILE(128), 0, stream>>>(out, lse, qkv, B, T, NH);
    }
    cudaCheck(cudaGetLastError());
}

// delta[b,h,i] = sum_d dout[b,i,h,d] * out[b,i,h,d] (the softmax backward's row term)
template <int HS>
__global__ void attention_delta_kernel(float* delta, const floatX* dout, const floatX* out, int B, int T, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * T) { return; }
    int i = idx % T, h = (idx / T) % NH, b = idx / (T * NH);
    size_t off = ((size_t)b * T + i) * NH * HS + h * HS;
    float sum = 0.0f;
    for (int d = 0; d < HS; d++) { sum += to_float(dout[off + d]) * to_float(out[off + d]); }
    delta[idx] = sum;
}

// dk, dv: one thread per key j, accumulating over the queries i >= j in tiles
template <int HS>
__global__ void attention_backward_dkv_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv,
                                              const float* lse, const float* delta, int B, int T, int NH) {
    __shared__ float qs[ATT_CC_TILE(HS)][HS];
    __shared__ float dos[ATT_CC_TILE(HS)][HS];
    __shared__ float kown[ATT_CC_TILE(HS)][HS + 1];  // +1: each thread reads its own row, conflict-free
    __shared__ float vown[ATT_CC_TILE(HS)][HS + 1];
    __shared__ float lse_s[ATT_CC_TILE(HS)], delta_s[ATT_CC_TILE(HS)];
    int C = NH * HS, b = blockIdx.z, h = blockIdx.y;
    int j0 = blockIdx.x * ATT_CC_TILE(HS), j = j0 + threadIdx.x;
    const float scale = 1.0f / sqrtf((float)HS);
    const floatX* base = qkv + (size_t)b * T * 3 * C + h * HS;
    const floatX* dbase = dout + (size_t)b * T * C + h * HS;
    const float* lse_bh = lse + ((size_t)b * NH + h) * T;
    const float* delta_bh = delta + ((size_t)b * NH + h) * T;
    for (int e = threadIdx.x; e < ATT_CC_TILE(HS) * HS; e += blockDim.x) {
        int r = e / HS, d = e % HS, jj = j0 + r;
        kown[r][d] = jj < T ? to_float(base[(size_t)jj * 3 * C + C + d]) : 0.0f;
        vown[r][d] = jj < T ? to_float(base[(size_t)jj * 3 * C + 2 * C + d]) : 0.0f;
    }
    float dk[HS], dv[HS];
    for (int d = 0; d < HS; d++) { dk[d] = 0.0f; dv[d] = 0.0f; }
    for (int i0 = j0; i0 < T; i0 += ATT_CC_TILE(HS)) {
        __syncthreads();
        for (int e = threadIdx.x; e < ATT_CC_TILE(HS) * HS; e += blockDim.x) {
            int r = e / HS, d = e % HS, i = i0 + r;
            qs[r][d] = i < T ? to_float(base[(size_t)i * 3 * C + d]) : 0.0f;
            dos[r][d] = i < T ? to_float(dbase[(size_t)i * C + d]) : 0.0f;
        }
        if (threadIdx.x < ATT_CC_TILE(HS)) {
            int i = i0 + threadIdx.x;
            lse_s[threadIdx.x] = i < T ? lse_bh[i] : 0.0f;
            delta_s[threadIdx.x] = i < T ? delta_bh[i] : 0.0f;
        }
        __syncthreads();
        if (j >= T) { continue; }
        int r_begin = max(0, j - i0), r_end = min(ATT_CC_TILE(HS), T - i0);  // causal: queries i >= j
        for (int r = r_begin; r < r_end; r++) {
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < HS; d++) {
                s += qs[r][d] * kown[threadIdx.x][d];
                dp += dos[r][d] * vown[threadIdx.x][d];
            }
            float p = expf(s * scale - lse_s[r]);
            float ds = p * (dp - delta_s[r]) * scale;
            for (int d = 0; d < HS; d++) {
                dv[d] += p * dos[r][d];
                dk[d] += ds * qs[r][d];
            }
        }
    }
    if (j < T) {
        floatX* g = dqkv + ((size_t)b * T + j) * 3 * C + h * HS;
        for (int d = 0; d < HS; d++) { g[C + d] = (floatX)dk[d]; g[2 * C + d] = (floatX)dv[d]; }
    }
}

// dq: one thread per query i, accumulating over the keys j <= i in tiles
template <int HS>
__global__ void attention_backward_dq_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv,
                                             const float* lse, const float* delta, int B, int T, int NH) {
    __shared__ float ks[ATT_CC_TILE(HS)][HS];
    __shared__ float vs[ATT_CC_TILE(HS)][HS];
    __shared__ float qown[ATT_CC_TILE(HS)][HS + 1];
    __shared__ float doown[ATT_CC_TILE(HS)][HS + 1];
    int C = NH * HS, b = blockIdx.z, h = blockIdx.y;
    int i0 = blockIdx.x * ATT_CC_TILE(HS), i = i0 + threadIdx.x;
    const float scale = 1.0f / sqrtf((float)HS);
    const floatX* base = qkv + (size_t)b * T * 3 * C + h * HS;
    const floatX* dbase = dout + (size_t)b * T * C + h * HS;
    for (int e = threadIdx.x; e < ATT_CC_TILE(HS) * HS; e += blockDim.x) {
        int r = e / HS, d = e % HS, ii = i0 + r;
        qown[r][d] = ii < T ? to_float(base[(size_t)ii * 3 * C + d]) : 0.0f;
        doown[r][d] = ii < T ? to_float(dbase[(size_t)ii * C + d]) : 0.0f;
    }
    float my_lse = 0.0f, my_delta = 0.0f;
    if (i < T) {
        my_lse = lse[((size_t)b * NH + h) * T + i];
        my_delta = delta[((size_t)b * NH + h) * T + i];
    }
    float dq[HS];
    for (int d = 0; d < HS; d++) { dq[d] = 0.0f; }
    int last = min(T - 1, i0 + ATT_CC_TILE(HS) - 1);
    for (int j0 = 0; j0 <= last; j0 += ATT_CC_TILE(HS)) {
        __syncthreads();
        for (int e = threadIdx.x; e < ATT_CC_TILE(HS) * HS; e += blockDim.x) {
            int r = e / HS, d = e % HS, j = j0 + r;
            ks[r][d] = j < T ? to_float(base[(size_t)j * 3 * C + C + d]) : 0.0f;
            vs[r][d] = j < T ? to_float(base[(size_t)j * 3 * C + 2 * C + d]) : 0.0f;
        }
        __syncthreads();
        if (i >= T) { continue; }
        int jn = min(ATT_CC_TILE(HS), i - j0 + 1);
        for (int r = 0; r < jn; r++) {
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < HS; d++) {
                s += qown[threadIdx.x][d] * ks[r][d];
                dp += doown[threadIdx.x][d] * vs[r][d];
            }
            float p = expf(s * scale - my_lse);
            float ds = p * (dp - my_delta) * scale;
            for (int d = 0; d < HS; d++) { dq[d] += ds * ks[r][d]; }
        }
    }
    if (i < T) {
        floatX* g = dqkv + ((size_t)b * T + i) * 3 * C + h * HS;
        for (int d = 0; d < HS; d++) { g[d] = (floatX)dq[d]; }
    }
}

template <int HS>
static void attention_backward_cc_hs(floatX* dqkv, float* delta, const floatX* dout, const floatX* qkv,
                                     const floatX* out, const float* lse, int B, int T, int NH, cudaStream_t stream) {
    const int block = 256;
    attention_delta_kernel<HS><<<ceil_div((long)B * NH * T, block), block, 0, stream>>>(delta, dout, out, B, T, NH);
    cudaCheck(cudaGetLastError());
    dim3 grid(ceil_div(T, ATT_CC_TILE(HS)), NH, B);
    attention_backward_dkv_kernel<HS><<<grid, ATT_CC_TILE(HS), 0, stream>>>(dqkv, dout, qkv, lse, delta, B, T, NH);
    cudaCheck(cudaGetLastError());
    attention_backward_dq_kernel<HS><<<grid, ATT_CC_TILE(HS), 0, stream>>>(dqkv, dout, qkv, lse, delta, B, T, NH);
    cudaCheck(cudaGetLastError());
}

// the CUDA-core backward (reference, and fp32 builds)
void attention_backward_cc(floatX* dqkv, float* delta, const floatX* dout, const floatX* qkv, const floatX* out,
                           const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
    // dqkv: (B,T,3C) overwritten; delta: (B,NH,T) fp32 scratch; dout, out: (B,T,C); lse: (B,NH,T)
    attention_check_head_size(C, NH);
    if (C / NH == 64) {
        attention_backward_cc_hs<64>(dqkv, delta, dout, qkv, out, lse, B, T, NH, stream);
    } else {
        attention_backward_cc_hs<128>(dqkv, delta, dout, qkv, out, lse, B, T, NH, stream);
    }
}

// ----------------------------------------------------------------------------
// tensor-core flash attention (bf16 builds): the same math and the same saved log-sum-exp, with the matmuls
// (Q K^T, P V in the forward; K Q^T, V dO^T, P^T dO, dS^T Q, dS K in the backward) on tensor cores through
// nvcuda::wmma (bf16 16x16x16 tiles, fp32 accumulation). A block takes 64 rows (queries, or keys for dK/dV)
// of one (b, h), 4 warps of 16 rows each, and walks the other side in tiles of 64 rows through shared
// memory; tiles wholly above the causal diagonal are never loaded, and a warp skips a tile none of its
// rows sees. The softmax runs in fp32 (online in the forward: running max and sum); P and dS are rounded to
// bf16 only as matmul operands (as cuDNN does). Each output row is staged in shared memory and written by
// the 32 lanes of a warp side by side (coalesced). Like the CUDA-core kernels the backward is two kernels
// (dK,dV per key block; dQ per query block) with no atomics, so it repeats bit for bit.
#if !defined(ENABLE_FP32)
#include <mma.h>

#define TC_ROWS 64   // rows per block and per tile of the other side
#define TC_WARPS 4   // 16 rows each
#define TC_PAD 8     // bf16 row padding: leading dimensions stay multiples of 8, rows shift across banks
#define TC_FPAD 4    // fp32 row padding

namespace att_tc {
using namespace nvcuda;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> FragB;    // B(k,n) at [k*ld+n]
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> FragBt;   // B(k,n) at [n*ld+k]
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

// dst (TC_ROWS, HS + TC_PAD) shared <- rows row0 .. row0+TC_ROWS-1 of src (row r at src + r*stride), rows at or
// past T as zeros; 16-byte copies (src and stride are 16-byte aligned: checked by the launchers)
template <int HS>
__device__ __forceinline__ void load_rows(__nv_bfloat16* dst, const __nv_bfloat16* src, size_t stride, int row0, int T) {
    const int chunks = HS / 8;
    for (int e = threadIdx.x; e < TC_ROWS * chunks; e += blockDim.x) {
        int r = e / chunks, c = (e % chunks) * 8;
        int4 v = make_int4(0, 0, 0, 0);
        if (row0 + r < T) { v = *(const int4*)(src + (size_t)(row0 + r) * stride + c); }
        *(int4*)(dst + r * (HS + TC_PAD) + c) = v;
    }
}

// one warp: c (16, TC_ROWS) fp32 = a (16, HS) b^T, with b (TC_ROWS, HS); a and b have leading dimension
// HS + TC_PAD, c has TC_ROWS + TC_FPAD
template <int HS>
__device__ __forceinline__ void warp_abt(float* c, const __nv_bfloat16* a, const __nv_bfloat16* b) {
#pragma unroll
    for (int n = 0; n < TC_ROWS / 16; n++) {
        FragC acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int k = 0; k < HS / 16; k++) {
            FragA fa;
            FragBt fb;
            wmma::load_matrix_sync(fa, a + k * 16, HS + TC_PAD);
            wmma::load_matrix_sync(fb, b + n * 16 * (HS + TC_PAD) + k * 16, HS + TC_PAD);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(c + n * 16, acc, TC_ROWS + TC_FPAD, wmma::mem_row_major);
    }
}

// one warp: acc[n] (16, 16) += a (16, TC_ROWS) b[:, 16n .. 16n+15], a bf16 with leading dimension
// TC_ROWS + TC_PAD, b (TC_ROWS, HS) with HS + TC_PAD
template <int HS>
__device__ __forceinline__ void warp_ab_acc(FragC* acc, const __nv_bfloat16* a, const __nv_bfloat16* b) {
#pragma unroll
    for (int n = 0; n < HS / 16; n++) {
#pragma unroll
        for (int k = 0; k < TC_ROWS / 16; k++) {
            FragA fa;
            FragB fb;
            wmma::load_matrix_sync(fa, a + k * 16, TC_ROWS + TC_PAD);
            wmma::load_matrix_sync(fb, b + k * 16 * (HS + TC_PAD) + n * 16, HS + TC_PAD);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

// one warp: rows row0 .. row0+15 (those below T) of dst (row r at dst + r*stride) <- the 16 x HS tile in acc,
// staged through stage (16, HS + TC_FPAD) fp32; lanes write consecutive elements
template <int HS>
__device__ __forceinline__ void warp_store_rows(floatX* dst, size_t stride, int row0, int T, FragC* acc, float* stage) {
    const int ld = HS + TC_FPAD;
#pragma unroll
    for (int n = 0; n < HS / 16; n++) { wmma::store_matrix_sync(stage + n * 16, acc[n], ld, wmma::mem_row_major); }
    __syncwarp();
    int lane = threadIdx.x % 32;
    for (int r = 0; r < 16 && row0 + r < T; r++) {
        floatX* y = dst + (size_t)(row0 + r) * stride;
        for (int d = lane; d < HS; d += 32) { y[d] = (floatX)stage[r * ld + d]; }
    }
    __syncwarp();
}

template <int HS>
struct Smem {  // byte sizes of the shared-memory regions
    static const int LDH = HS + TC_PAD, LDS = TC_ROWS + TC_FPAD, LDP = TC_ROWS + TC_PAD, LDO = HS + TC_FPAD;
    static const int H = TC_ROWS * LDH * 2;  // a (TC_ROWS, HS) bf16 tile
    static const int S = TC_ROWS * LDS * 4;  // a (TC_ROWS, TC_ROWS) fp32 tile
    static const int P = TC_ROWS * LDP * 2;  // a (TC_ROWS, TC_ROWS) bf16 tile
    static const int O = TC_ROWS * LDO * 4;  // a (TC_ROWS, HS) fp32 tile
    static const int STAT = 2 * TC_ROWS * 4; // lse and delta of TC_ROWS rows
    static const int fwd = 3 * H + S + P + O;
    static const int dkv = 4 * H + 2 * S + 2 * P + STAT;
    static const int dq = 4 * H + 2 * S + P + STAT;
};
}  // namespace att_tc

// forward: block (T/64, NH, B), 4 warps; query rows q0 .. q0+63 of head h of sequence b
template <int HS>
__global__ void __launch_bounds__(TC_WARPS * 32)
attention_forward_tc_kernel(floatX* out, float* lse, const floatX* qkv, int T, int NH) {
    using namespace att_tc;
    typedef Smem<HS> M;
    extern __shared__ __align__(128) unsigned char smem[];
    __nv_bfloat16* qs = (__nv_bfloat16*)smem;            // (64, LDH) this block's queries
    __nv_bfloat16* ks = (__nv_bfloat16*)(smem + M::H);   // (64, LDH) the key tile
    __nv_bfloat16* vs = (__nv_bfloat16*)(smem + 2 * M::H);
    float* ss = (float*)(smem + 3 * M::H);               // (64, LDS) scores
    __nv_bfloat16* ps = (__nv_bfloat16*)(smem + 3 * M::H + M::S);        // (64, LDP) probabilities
    float* os = (float*)(smem + 3 * M::H + M::S + M::P);                 // (64, LDO) output accumulator
    int C = NH * HS, b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * TC_ROWS;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int rr = lane >> 1, half = lane & 1;  // lanes 2r, 2r+1 own row r of the warp's 16, half of its columns each
    int row = warp * 16 + rr, i = q0 + row;
    const float scale = 1.0f / sqrtf((float)HS);
    const floatX* base = qkv + (size_t)b * T * 3 * C + h * HS;
    load_rows<HS>(qs, base, 3 * C, q0, T);
    for (int e = threadIdx.x; e < TC_ROWS * HS; e += blockDim.x) { os[(e / HS) * M::LDO + e % HS] = 0.0f; }
    float m = -INFINITY, l = 0.0f;  // running max and sum of row `row` (both lanes of the pair hold them)
    int last = min(T - 1, q0 + TC_ROWS - 1), warp_last = q0 + warp * 16 + 15;
    float* sw = ss + warp * 16 * M::LDS;
    __nv_bfloat16* pw = ps + warp * 16 * M::LDP;
    float* ow = os + warp * 16 * M::LDO;
    for (int j0 = 0; j0 <= last; j0 += TC_ROWS) {
        __syncthreads();  // the previous tile is consumed (and qs, os are ready on the first pass)
        load_rows<HS>(ks, base + C, 3 * C, j0, T);
        load_rows<HS>(vs, base + 2 * C, 3 * C, j0, T);
        __syncthreads();
        if (j0 > warp_last) { continue; }  // every key of the tile comes after every query of this warp
        warp_abt<HS>(sw, qs + warp * 16 * M::LDH, ks);
        __syncwarp();
        float* srow = sw + rr * M::LDS + half * 32;
        float mt = -INFINITY;
        for (int c = 0; c < 32; c++) {
            int j = j0 + half * 32 + c;
            float x = (j <= i && i < T) ? srow[c] * scale : -INFINITY;  // causal (so j < T too)
            srow[c] = x;
            mt = fmaxf(mt, x);
        }
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        float m_new = fmaxf(m, mt);
        // m_new is finite once a row has seen key 0 (tile 0 comes first); it stays -inf only for rows past T
        // (every key masked): no inf - inf there, their sums stay 0 and they are never written
        bool none = m_new == -INFINITY;
        float f = none ? 1.0f : expf(m - m_new);
        float lt = 0.0f;
        __nv_bfloat16* prow = pw + rr * M::LDP + half * 32;
        for (int c = 0; c < 32; c++) {
            float p = none ? 0.0f : expf(srow[c] - m_new);
            lt += p;
            prow[c] = __float2bfloat16(p);
        }
        lt += __shfl_xor_sync(0xffffffffu, lt, 1);
        l = l * f + lt;
        m = m_new;
        float* orow = ow + rr * M::LDO + half * (HS / 2);
        for (int d = 0; d < HS / 2; d++) { orow[d] *= f; }
        __syncwarp();
        // O += P V, the accumulator round-tripping through shared memory (it was just rescaled per row)
#pragma unroll
        for (int n = 0; n < HS / 16; n++) {
            FragC acc;
            wmma::load_matrix_sync(acc, ow + n * 16, M::LDO, wmma::mem_row_major);
#pragma unroll
            for (int k = 0; k < TC_ROWS / 16; k++) {
                FragA fa;
                FragB fb;
                wmma::load_matrix_sync(fa, pw + k * 16, M::LDP);
                wmma::load_matrix_sync(fb, vs + k * 16 * M::LDH + n * 16, M::LDH);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(ow + n * 16, acc, M::LDO, wmma::mem_row_major);
        }
        __syncwarp();
    }
    __syncwarp();
    for (int r = 0; r < 16; r++) {  // out = O / l, one row at a time, lanes side by side
        float lr = __shfl_sync(0xffffffffu, l, 2 * r);
        int ii = q0 + warp * 16 + r;
        if (ii >= T) { break; }
        floatX* y = out + ((size_t)b * T + ii) * C + h * HS;
        for (int d = lane; d < HS; d += 32) { y[d] = (floatX)(ow[r * M::LDO + d] / lr); }
    }
    if (half == 0 && i < T) { lse[((size_t)b * NH + h) * T + i] = m + logf(l); }
}

// delta[b,h,i] = sum_d dout[b,i,h,d] * out[b,i,h,d]: one warp per (b,h,i), lanes over d (coalesced)
template <int HS>
__global__ void attention_delta_tc_kernel(float* delta, const floatX* dout, const floatX* out, int B, int T, int NH) {
    long idx = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (idx >= (long)B * NH * T) { return; }  // whole warps leave together
    int i = idx % T, h = (idx / T) % NH, b = idx / ((long)T * NH);
    size_t off = ((size_t)b * T + i) * NH * HS + h * HS;
    float sum = 0.0f;
    for (int d = lane; d < HS; d += 32) { sum += to_float(dout[off + d]) * to_float(out[off + d]); }
    for (int o = 16; o > 0; o >>= 1) { sum += __shfl_xor_sync(0xffffffffu, sum, o); }
    if (lane == 0) { delta[idx] = sum; }
}

// dK, dV: block (T/64, NH, B); key rows j0 .. j0+63, walking the query tiles i0 >= j0. Computed transposed
// (keys as rows): S^T = K Q^T, dP^T = V dO^T, then dV += P^T dO and dK += dS^T Q in registers
template <int HS>
__global__ void __launch_bounds__(TC_WARPS * 32)
attention_backward_dkv_tc_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                                 const float* delta, int T, int NH) {
    using namespace att_tc;
    typedef Smem<HS> M;
    extern __shared__ __align__(128) unsigned char smem[];
    __nv_bfloat16* ks = (__nv_bfloat16*)smem;             // (64, LDH) this block's keys
    __nv_bfloat16* vs = (__nv_bfloat16*)(smem + M::H);    // their values
    __nv_bfloat16* qs = (__nv_bfloat16*)(smem + 2 * M::H);  // the query tile
    __nv_bfloat16* dos = (__nv_bfloat16*)(smem + 3 * M::H); // its dout
    float* ss = (float*)(smem + 4 * M::H);                // (64, LDS) S^T
    float* dps = (float*)(smem + 4 * M::H + M::S);        // dP^T
    __nv_bfloat16* ps = (__nv_bfloat16*)(smem + 4 * M::H + 2 * M::S);          // (64, LDP) P^T
    __nv_bfloat16* dss = (__nv_bfloat16*)(smem + 4 * M::H + 2 * M::S + M::P);  // dS^T
    float* stat = (float*)(smem + 4 * M::H + 2 * M::S + 2 * M::P);           // lse (64) | delta (64) of the tile
    int C = NH * HS, b = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * TC_ROWS;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, rr = lane >> 1, half = lane & 1;
    int j = j0 + warp * 16 + rr;  // the key of this lane pair's row
    const float scale = 1.0f / sqrtf((float)HS);
    const floatX* base = qkv + (size_t)b * T * 3 * C + h * HS;
    const floatX* dbase = dout + (size_t)b * T * C + h * HS;
    const float* lse_bh = lse + ((size_t)b * NH + h) * T;
    const float* delta_bh = delta + ((size_t)b * NH + h) * T;
    load_rows<HS>(ks, base + C, 3 * C, j0, T);
    load_rows<HS>(vs, base + 2 * C, 3 * C, j0, T);
    FragC dk[HS / 16], dv[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++) { wmma::fill_fragment(dk[n], 0.0f); wmma::fill_fragment(dv[n], 0.0f); }
    bool active = j0 + warp * 16 < T;  // the warp has keys below T
    float* sw = ss + warp * 16 * M::LDS;
    float* dpw = dps + warp * 16 * M::LDS;
    __nv_bfloat16* pw = ps + warp * 16 * M::LDP;
    __nv_bfloat16* dsw = dss + warp * 16 * M::LDP;
    for (int i0 = j0; i0 < T; i0 += TC_ROWS) {  // causal: query tiles before j0 see none of these keys
        __syncthreads();
        load_rows<HS>(qs, base, 3 * C, i0, T);
        load_rows<HS>(dos, dbase, C, i0, T);
        for (int e = threadIdx.x; e < TC_ROWS; e += blockDim.x) {
            stat[e] = i0 + e < T ? lse_bh[i0 + e] : 0.0f;
            stat[TC_ROWS + e] = i0 + e < T ? delta_bh[i0 + e] : 0.0f;
        }
        __syncthreads();
        if (!active) { continue; }
        warp_abt<HS>(sw, ks + warp * 16 * M::LDH, qs);
        warp_abt<HS>(dpw, vs + warp * 16 * M::LDH, dos);
        __syncwarp();
        for (int c = 0; c < 32; c++) {
            int ii = half * 32 + c, i = i0 + ii;
            float p = (i >= j && i < T) ? expf(sw[rr * M::LDS + ii] * scale - stat[ii]) : 0.0f;
            pw[rr * M::LDP + ii] = __float2bfloat16(p);
            dsw[rr * M::LDP + ii] = __float2bfloat16(p * (dpw[rr * M::LDS + ii] - stat[TC_ROWS + ii]) * scale);
        }
        __syncwarp();
        warp_ab_acc<HS>(dv, pw, dos);
        warp_ab_acc<HS>(dk, dsw, qs);
    }
    __syncthreads();  // ss and dps are free: they become each warp's staging area
    float* stage = ss + warp * 16 * M::LDO;
    floatX* g = dqkv + (size_t)b * T * 3 * C + h * HS;
    warp_store_rows<HS>(g + C, 3 * C, j0 + warp * 16, T, dk, stage);
    warp_store_rows<HS>(g + 2 * C, 3 * C, j0 + warp * 16, T, dv, stage);
}

// dQ: block (T/64, NH, B); query rows q0 .. q0+63, walking the key tiles j0 <= the block's last query:
// S = Q K^T, dP = dO V^T, dQ += dS K in registers
template <int HS>
__global__ void __launch_bounds__(TC_WARPS * 32)
attention_backward_dq_tc_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                                const float* delta, int T, int NH) {
    using namespace att_tc;
    typedef Smem<HS> M;
    extern __shared__ __align__(128) unsigned char smem[];
    __nv_bfloat16* qs = (__nv_bfloat16*)smem;               // (64, LDH) this block's queries
    __nv_bfloat16* dos = (__nv_bfloat16*)(smem + M::H);     // their dout
    __nv_bfloat16* ks = (__nv_bfloat16*)(smem + 2 * M::H);  // the key tile
    __nv_bfloat16* vs = (__nv_bfloat16*)(smem + 3 * M::H);  // its values
    float* ss = (float*)(smem + 4 * M::H);                  // (64, LDS) S
    float* dps = (float*)(smem + 4 * M::H + M::S);          // dP
    __nv_bfloat16* dss = (__nv_bfloat16*)(smem + 4 * M::H + 2 * M::S);   // (64, LDP) dS
    float* stat = (float*)(smem + 4 * M::H + 2 * M::S + M::P);          // lse (64) | delta (64) of the queries
    int C = NH * HS, b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * TC_ROWS;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, rr = lane >> 1, half = lane & 1;
    int row = warp * 16 + rr, i = q0 + row;
    const float scale = 1.0f / sqrtf((float)HS);
    const floatX* base = qkv + (size_t)b * T * 3 * C + h * HS;
    load_rows<HS>(qs, base, 3 * C, q0, T);
    load_rows<HS>(dos, dout + (size_t)b * T * C + h * HS, C, q0, T);
    for (int e = threadIdx.x; e < TC_ROWS; e += blockDim.x) {
        stat[e] = q0 + e < T ? lse[((size_t)b * NH + h) * T + q0 + e] : 0.0f;
        stat[TC_ROWS + e] = q0 + e < T ? delta[((size_t)b * NH + h) * T + q0 + e] : 0.0f;
    }
    FragC dq[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++) { wmma::fill_fragment(dq[n], 0.0f); }
    int last = min(T - 1, q0 + TC_ROWS - 1), warp_last = q0 + warp * 16 + 15;
    bool active = q0 + warp * 16 < T;
    float* sw = ss + warp * 16 * M::LDS;
    float* dpw = dps + warp * 16 * M::LDS;
    __nv_bfloat16* dsw = dss + warp * 16 * M::LDP;
    for (int j0 = 0; j0 <= last; j0 += TC_ROWS) {
        __syncthreads();  // the previous tile is consumed (and qs, dos, stat are ready on the first pass)
        load_rows<HS>(ks, base + C, 3 * C, j0, T);
        load_rows<HS>(vs, base + 2 * C, 3 * C, j0, T);
        __syncthreads();
        if (!active || j0 > warp_last) { continue; }
        warp_abt<HS>(sw, qs + warp * 16 * M::LDH, ks);
        warp_abt<HS>(dpw, dos + warp * 16 * M::LDH, vs);
        __syncwarp();
        float my_lse = stat[row], my_delta = stat[TC_ROWS + row];
        for (int c = 0; c < 32; c++) {
            int jj = half * 32 + c, jk = j0 + jj;
            float p = (jk <= i && i < T) ? expf(sw[rr * M::LDS + jj] * scale - my_lse) : 0.0f;
            dsw[rr * M::LDP + jj] = __float2bfloat16(p * (dpw[rr * M::LDS + jj] - my_delta) * scale);
        }
        __syncwarp();
        warp_ab_acc<HS>(dq, dsw, ks);
    }
    __syncthreads();
    float* stage = ss + warp * 16 * M::LDO;
    warp_store_rows<HS>(dqkv + (size_t)b * T * 3 * C + h * HS, 3 * C, q0 + warp * 16, T, dq, stage);
}

// the launchers: 16-byte aligned tensors (the 16-byte row loads), and the dynamic shared memory granted once
static void attention_tc_check(const void* a, const void* b, const void* c, int C, int NH, int smem) {
    attention_check_head_size(C, NH);
    if (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 != 0) {
        fatal("attention (tensor cores): tensors must be 16-byte aligned");
    }
    static int optin = 0;
    if (optin == 0) {
        int dev;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    }
    if (smem > optin) {
        fatal("attention (tensor cores): head size %d needs %d bytes of shared memory per block, this GPU allows %d",
              C / NH, smem, optin);
    }
}

template <typename K>
static void attention_tc_smem(K kernel, int smem) {
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
}

template <int HS>
static void attention_forward_tc_hs(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH,
                                    cudaStream_t stream) {
    const int smem = att_tc::Smem<HS>::fwd;
    attention_tc_check(out, qkv, qkv, NH * HS, NH, smem);
    static bool ready = false;
    if (!ready) { attention_tc_smem(attention_forward_tc_kernel<HS>, smem); ready = true; }
    dim3 grid(ceil_div(T, TC_ROWS), NH, B);
    attention_forward_tc_kernel<HS><<<grid, TC_WARPS * 32, smem, stream>>>(out, lse, qkv, T, NH);
    cudaCheck(cudaGetLastError());
}

template <int HS>
static void attention_backward_tc_hs(floatX* dqkv, float* delta, const floatX* dout, const floatX* qkv,
                                     const floatX* out, const float* lse, int B, int T, int NH, cudaStream_t stream) {
    const int smem_dkv = att_tc::Smem<HS>::dkv, smem_dq = att_tc::Smem<HS>::dq;
    attention_tc_check(dqkv, dout, qkv, NH * HS, NH, smem_dkv > smem_dq ? smem_dkv : smem_dq);
    static bool ready = false;
    if (!ready) {
        attention_tc_smem(attention_backward_dkv_tc_kernel<HS>, smem_dkv);
        attention_tc_smem(attention_backward_dq_tc_kernel<HS>, smem_dq);
        ready = true;
    }
    const int block = 256;
    attention_delta_tc_kernel<HS><<<ceil_div((long)B * NH * T * 32, block), block, 0, stream>>>(delta, dout, out, B, T, NH);
    cudaCheck(cudaGetLastError());
    dim3 grid(ceil_div(T, TC_ROWS), NH, B);
    attention_backward_dkv_tc_kernel<HS><<<grid, TC_WARPS * 32, smem_dkv, stream>>>(dqkv, dout, qkv, lse, delta, T, NH);
    cudaCheck(cudaGetLastError());
    attention_backward_dq_tc_kernel<HS><<<grid, TC_WARPS * 32, smem_dq, stream>>>(dqkv, dout, qkv, lse, delta, T, NH);
    cudaCheck(cudaGetLastError());
}

// tensor-core forward and backward, head size 64 or 128; same arguments as attention_forward/backward
void attention_forward_tc(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH,
                          cudaStream_t stream) {
    attention_check_head_size(C, NH);
    if (C / NH == 64) {
        attention_forward_tc_hs<64>(out, lse, qkv, B, T, NH, stream);
    } else {
        attention_forward_tc_hs<128>(out, lse, qkv, B, T, NH, stream);
    }
}

void attention_backward_tc(floatX* dqkv, float* delta, const floatX* dout, const floatX* qkv, const floatX* out,
                           const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
    attention_check_head_size(C, NH);
    if (C / NH == 64) {
        attention_backward_tc_hs<64>(dqkv, delta, dout, qkv, out, lse, B, T, NH, stream);
    } else {
        attention_backward_tc_hs<128>(dqkv, delta, dout, qkv, out, lse, B, T, NH, stream);
    }
}
#endif  // !ENABLE_FP32

// the trainer's attention (when cuDNN is not used): tensor cores in bf16 builds, CUDA cores in fp32 builds
void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH,
                       cudaStream_t stream) {
#if defined(ENABLE_FP32)
    attention_forward_cc(out, lse, qkv, B, T, C, NH, stream);
#else
    attention_forward_tc(out, lse, qkv, B, T, C, NH, stream);
#endif
}

void attention_backward(floatX* dqkv, float* delta, const floatX* dout, const floatX* qkv, const floatX* out,
                        const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
#if defined(ENABLE_FP32)
    attention_backward_cc(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, stream);
#else
    attention_backward_tc(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, stream);
#endif
}

#endif // LLMC_ATTENTION_CUH
