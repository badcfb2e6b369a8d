/*
 * llmc/cuda_common.cuh — what every CUDA file of the trainer shares: the activation/weight type floatX
 * (bf16 by default, fp32 with PRECISION=FP32), checked CUDA/cuBLAS calls, warp and block reductions,
 * stochastic rounding, and a device allocator that counts what it hands out.
 * Reductions here have a fixed order (no float atomics), so a run is bit-for-bit reproducible on one GPU.
 */
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <stdint.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include "llmc/utils.h"

// ----------------------------------------------------------------------------
// checked calls: one line naming the call site, exit 1

static inline void cuda_check(cudaError_t err, const char* file, int line) {
    if (err != cudaSuccess) {
        fatal("CUDA: %s [%s:%d]", cudaGetErrorString(err), file, line);
    }
}
#define cudaCheck(err) cuda_check((err), __FILE__, __LINE__)

static inline void cublas_check(cublasStatus_t status, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fatal("cuBLAS: status %d (%s) [%s:%d]", (int)status, cublasGetStatusString(status), file, line);
    }
}
#define cublasCheck(status) cublas_check((status), __FILE__, __LINE__)

static inline int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }

// ----------------------------------------------------------------------------
// precision: floatX holds activations and the working copy of the weights; master weights,
// gradients, optimizer state, statistics and losses are always fp32

#if defined(ENABLE_FP32)
typedef float floatX;
#define PRECISION_NAME "fp32"
#define CUBLAS_LOWP CUDA_R_32F
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "bf16"
#define CUBLAS_LOWP CUDA_R_16BF
#endif

__device__ __forceinline__ float to_float(floatX x) { return (float)x; }

// W consecutive floatX moved by one load or store instruction: W = PACK is 16 bytes (8 bf16 or 4 fp32).
// The element-wise and per-row kernels are templates on W: they come near the memory bandwidth only with
// PACK (loads of one bf16 left them 1.6-12x short on an H100) and take W = 1 where a size or an address
// does not split into aligned packs.
constexpr int PACK = 16 / (int)sizeof(floatX);
template <int W> struct __align__(W * sizeof(floatX)) Vec { floatX v[W]; };
template <int W> __device__ __forceinline__ Vec<W> load_vec(const floatX* p) {
    return *reinterpret_cast<const Vec<W>*>(p);
}
template <int W> __device__ __forceinline__ void store_vec(floatX* p, const Vec<W>& x) {
    *reinterpret_cast<Vec<W>*>(p) = x;
}
static inline bool aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

// ----------------------------------------------------------------------------
// stochastic rounding fp32 -> bf16: add 16 random bits below the bf16 mantissa, then truncate.
// The random bits are a hash of (element index, seed): deterministic for a given step seed, and the same
// on every GPU, so ZeRO shards round identically wherever they are computed.

__device__ __forceinline__ uint32_t hash_u32(uint32_t x) {  // lowbias32 integer hash
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

__device__ __forceinline__ floatX round_to_floatX(float x, size_t idx, uint32_t seed) {
#if defined(ENABLE_FP32)
    (void)idx; (void)seed;
    return x;
#else
    uint32_t bits = __float_as_uint(x);
    if ((bits & 0x7f800000u) == 0x7f800000u) { return __float2bfloat16_rn(x); }  // inf/nan unchanged
    uint32_t r = hash_u32((uint32_t)idx ^ hash_u32(seed ^ (uint32_t)(idx >> 32))) & 0xffffu;
    return __ushort_as_bfloat16((unsigned short)((bits + r) >> 16));
#endif
}

// ----------------------------------------------------------------------------
// reductions with a fixed order

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) { v += __shfl_xor_sync(0xffffffffu, v, off); }
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) { v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off)); }
    return v;
}
// sum over the whole block; every thread gets the result. `shared` holds >= 32 floats.
__device__ __forceinline__ float block_sum(float v, float* shared) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();  // shared may still be read by a previous call
    if (lane == 0) { shared[warp] = v; }
    __syncthreads();
    v = lane < nwarps ? shared[lane] : 0.0f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) { shared[warp] = v; }
    __syncthreads();
    v = lane < nwarps ? shared[lane] : -INFINITY;
    return warp_max(v);
}

// ----------------------------------------------------------------------------
// device allocation: start-up only; the running total is what the trainer logs as "allocated"

static size_t cuda_bytes_allocated = 0;

static inline void* cuda_malloc_check(size_t bytes, const char* file, int line) {
    void* ptr = NULL;
    cudaError_t err = cudaMalloc(&ptr, bytes);
    if (err != cudaSuccess) {
        fatal("CUDA: cannot allocate %zu bytes on the device (%s) [%s:%d]", bytes, cudaGetErrorString(err), file, line);
    }
    cuda_bytes_allocated += bytes;
    return ptr;
}
#define cudaMallocCheck(bytes) cuda_malloc_check((bytes), __FILE__, __LINE__)

// device memory in use right now (driver view, includes cuBLAS workspaces and NCCL buffers), in MiB
static inline double cuda_used_mib(void) {
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    return (double)(total_b - free_b) / (1024.0 * 1024.0);
}

#endif // LLMC_CUDA_COMMON_CUH
