/*
 * llmc/reduce.cuh — deterministic reductions: column sums (bias gradients) and the global L2 norm.
 * Both run in two stages, fixed chunks then a fixed-order sum of the chunk partials, instead of float
 * atomics, so that gradients and norms are bit-for-bit reproducible. A column sum loads one 16-byte pack per
 * thread and splits both the rows and the chunks over many threads: one thread per column left too few
 * loads in flight to reach the memory bandwidth.
 */
#ifndef LLMC_REDUCE_CUH
#define LLMC_REDUCE_CUH

#include "llmc/cuda_common.cuh"

// rows are split into this many chunks; scratch for a column reduction holds REDUCE_CHUNKS * 2 * C floats.
// Fixed, not sized to the GPU, so that a run adds in the same order on every card.
#define REDUCE_CHUNKS 256

// stage 2: dst[c] += sum_k partial[k*stride + c], k in order. A block takes 32 columns; its 32 rows of
// threads take every 32nd chunk each (coalesced loads, many in flight), then row 0 adds the 32 in order.
__global__ void __launch_bounds__(1024) chunk_sum_kernel(float* dst, const float* partial, int C, int stride,
                                                         int chunks) {
    __shared__ float sums[32][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (c < C) {
        for (int k = threadIdx.y; k < chunks; k += 32) { sum += partial[(size_t)k * stride + c]; }
    }
    sums[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float total = 0.0f;
        for (int y = 0; y < 32; y++) { total += sums[y][threadIdx.x]; }
        dst[c] += total;
    }
}

static void chunk_sum(float* dst, const float* partial, int C, int stride, int chunks, cudaStream_t stream) {
    chunk_sum_kernel<<<ceil_div(C, 32), dim3(32, 32), 0, stream>>>(dst, partial, C, stride, chunks);
    cudaCheck(cudaGetLastError());
}

// stage 1 of the column sum: partial[k,c] = sum of dout[r,c] over the rows r of chunk k. A block takes
// 32 * W columns (one pack per lane) and COLSUM_ROWS rows at a time: each thread sums every
// COLSUM_ROWS-th row of the chunk, then the block adds its rows of threads in order.
#define COLSUM_ROWS 8
template <int W>
__global__ void __launch_bounds__(32 * COLSUM_ROWS)
column_sum_kernel(float* partial, const floatX* dout, int N, int C, int rows_per_chunk) {
    __shared__ float sums[COLSUM_ROWS][32 * W];
    int lane = threadIdx.x, y = threadIdx.y, k = blockIdx.y;
    int c = (blockIdx.x * 32 + lane) * W;
    int r0 = k * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float acc[W];
    for (int i = 0; i < W; i++) { acc[i] = 0.0f; }
    if (c < C) {
        for (int r = r0 + y; r < r1; r += COLSUM_ROWS) {
            Vec<W> v = load_vec<W>(dout + (size_t)r * C + c);
            for (int i = 0; i < W; i++) { acc[i] += to_float(v.v[i]); }
        }
    }
    for (int i = 0; i < W; i++) { sums[y][lane * W + i] = acc[i]; }
    __syncthreads();
    int c0 = blockIdx.x * 32 * W;
    for (int t = y * 32 + lane; t < 32 * W && c0 + t < C; t += 32 * COLSUM_ROWS) {
        float total = 0.0f;
        for (int j = 0; j < COLSUM_ROWS; j++) { total += sums[j][t]; }
        partial[(size_t)k * C + c0 + t] = total;
    }
}

// dbias[c] += sum_r dout[r,c]; dout: (N,C), dbias: (C) fp32, scratch: REDUCE_CHUNKS*C floats
void bias_backward(float* dbias, const floatX* dout, float* scratch, int N, int C, cudaStream_t stream) {
    int rows_per_chunk = ceil_div(N, REDUCE_CHUNKS);
    int chunks = ceil_div(N, rows_per_chunk);
    dim3 block(32, COLSUM_ROWS);
    if (C % PACK == 0 && aligned16(dout)) {
        column_sum_kernel<PACK><<<dim3(ceil_div(C, 32 * PACK), chunks), block, 0, stream>>>(scratch, dout, N, C,
                                                                                           rows_per_chunk);
    } else {
        column_sum_kernel<1><<<dim3(ceil_div(C, 32), chunks), block, 0, stream>>>(scratch, dout, N, C, rows_per_chunk);
    }
    cudaCheck(cudaGetLastError());
    chunk_sum(dbias, scratch, C, C, chunks, stream);
}

// ----------------------------------------------------------------------------
// global norm: out[0] = sum of squares of x[0..n); the caller takes the sqrt (after summing over ranks)

#define NORM_BLOCKS 512
#define NORM_THREADS 512

__global__ void sum_squares_kernel(float* partial, const float* x, size_t n) {
    __shared__ float shared[32];
    float sum = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        sum += x[i] * x[i];
    }
    sum = block_sum(sum, shared);
    if (threadIdx.x == 0) { partial[blockIdx.x] = sum; }
}

__global__ void sum_partials_kernel(float* out, const float* partial, int n) {
    __shared__ float shared[32];
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { sum += partial[i]; }
    sum = block_sum(sum, shared);
    if (threadIdx.x == 0) { out[0] = sum; }
}

// out: 1 float; scratch: NORM_BLOCKS floats
void global_norm_squared(float* out, const float* x, size_t n, float* scratch, cudaStream_t stream) {
    sum_squares_kernel<<<NORM_BLOCKS, NORM_THREADS, 0, stream>>>(scratch, x, n);
    cudaCheck(cudaGetLastError());
    sum_partials_kernel<<<1, NORM_THREADS, 0, stream>>>(out, scratch, NORM_BLOCKS);
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_REDUCE_CUH
