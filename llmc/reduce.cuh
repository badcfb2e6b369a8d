/*
 * llmc/reduce.cuh — deterministic reductions: column sums (bias gradients) and the global L2 norm.
 * Both run in two stages, fixed chunks then a fixed-order sum of the chunk partials, instead of float
 * atomics, so that gradients and norms are bit-for-bit reproducible.
 */
#ifndef LLMC_REDUCE_CUH
#define LLMC_REDUCE_CUH

#include "llmc/cuda_common.cuh"

// rows are split into this many chunks; scratch for a column reduction holds REDUCE_CHUNKS * 2 * C floats
#define REDUCE_CHUNKS 128

// stage 2: dst[c] += sum_k partial[k*stride + c], k in order
__global__ void chunk_sum_kernel(float* dst, const float* partial, int C, int stride, int chunks) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) { return; }
    float sum = 0.0f;
    for (int k = 0; k < chunks; k++) { sum += partial[(size_t)k * stride + c]; }
    dst[c] += sum;
}

// stage 1 of the column sum: partial[k,c] = sum of dout[r,c] over the rows r of chunk k
__global__ void column_sum_kernel(float* partial, const floatX* dout, int N, int C, int rows_per_chunk) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int k = blockIdx.y;
    if (c >= C) { return; }
    int r0 = k * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float sum = 0.0f;
    for (int r = r0; r < r1; r++) { sum += to_float(dout[(size_t)r * C + c]); }
    partial[(size_t)k * C + c] = sum;
}

// dbias[c] += sum_r dout[r,c]; dout: (N,C), dbias: (C) fp32, scratch: REDUCE_CHUNKS*C floats
void bias_backward(float* dbias, const floatX* dout, float* scratch, int N, int C, cudaStream_t stream) {
    const int block = 256;
    int rows_per_chunk = ceil_div(N, REDUCE_CHUNKS);
    int chunks = ceil_div(N, rows_per_chunk);
    column_sum_kernel<<<dim3(ceil_div(C, block), chunks), block, 0, stream>>>(scratch, dout, N, C, rows_per_chunk);
    cudaCheck(cudaGetLastError());
    chunk_sum_kernel<<<ceil_div(C, block), block, 0, stream>>>(dbias, scratch, C, C, chunks);
    cudaCheck(cudaGetLastError());
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
