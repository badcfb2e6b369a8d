/*
 * llmc/adamw.h — one element of AdamW, the one definition every update pass uses: the CPU trainer's loop,
 * the GPU kernels (llmc/adamw.cuh) and any pass that fuses more work into the update. One expression, so
 * that every pass compiled alike rounds alike, bit for bit:
 *   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
 *   p -= lr * ( (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + wd * p )
 * Plain C, compiled as host and device code under nvcc. Depends on libm only.
 */
#ifndef LLMC_ADAMW_H
#define LLMC_ADAMW_H

#include <math.h>

#ifdef __CUDACC__
#define ADAMW_FN static __host__ __device__ __forceinline__
#else
// inlined on the host too: a call left in a loop keeps the loop scalar, and a pass of many loops
// (hybrid/linefit.h) outgrew the compiler's inlining budget
#define ADAMW_FN static inline __attribute__((always_inline))
#endif

// g: the scaled gradient; *m, *v: the moments, updated; bc1, bc2: the bias corrections 1 - beta^t;
// returns the new weight
ADAMW_FN float adamw_element(float p, float g, float* m, float* v, float lr, float beta1, float beta2, float bc1,
                             float bc2, float eps, float wd) {
    float mi = beta1 * *m + (1.0f - beta1) * g;
    float vi = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mi;
    *v = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    return p - lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
}

#endif // LLMC_ADAMW_H
