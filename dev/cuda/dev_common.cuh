/*
 * dev/cuda/dev_common.cuh — helpers shared by the kernel development files: random inputs, host<->device
 * copies between fp32 and floatX, comparison against a CPU reference with a tolerance, and timing.
 * Each dev/cuda/<kernel>.cu includes the trainer's own kernel header (no copies), checks it against a
 * plain CPU loop written like train_gpt2.c, then times it over a sweep of sizes. Exit status 1 on mismatch.
 */
#ifndef DEV_COMMON_CUH
#define DEV_COMMON_CUH

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "llmc/cuda_common.cuh"

static uint64_t dev_rng = 0x853c49e6748fea9bull;
static inline float dev_randf(void) {  // uniform in [-1, 1)
    dev_rng ^= dev_rng >> 12; dev_rng ^= dev_rng << 25; dev_rng ^= dev_rng >> 27;
    return (float)((dev_rng * 0x2545F4914F6CDD1Dull) >> 40) / 8388608.0f - 1.0f;
}
static float* make_random(size_t n, float scale) {
    float* x = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { x[i] = dev_randf() * scale; }
    return x;
}

// host fp32 -> device floatX; the host copy is rounded the same way so the reference sees what the GPU sees
static floatX* to_device_x(float* host, size_t n) {
    floatX* tmp = (floatX*)mallocCheck(n * sizeof(floatX));
    for (size_t i = 0; i < n; i++) { tmp[i] = (floatX)host[i]; host[i] = (float)tmp[i]; }
    floatX* d = (floatX*)cudaMallocCheck(n * sizeof(floatX));
    cudaCheck(cudaMemcpy(d, tmp, n * sizeof(floatX), cudaMemcpyHostToDevice));
    free(tmp);
    return d;
}
static float* to_device_f(const float* host, size_t n) {
    float* d = (float*)cudaMallocCheck(n * sizeof(float));
    cudaCheck(cudaMemcpy(d, host, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}
static float* from_device_x(const floatX* d, size_t n) {
    floatX* tmp = (floatX*)mallocCheck(n * sizeof(floatX));
    cudaCheck(cudaMemcpy(tmp, d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    float* out = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { out[i] = (float)tmp[i]; }
    free(tmp);
    return out;
}
static float* from_device_f(const float* d, size_t n) {
    float* out = (float*)mallocCheck(n * sizeof(float));
    cudaCheck(cudaMemcpy(out, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return out;
}

// |gpu - ref| <= atol + rtol*|ref| everywhere; prints the worst element; returns 1 when it passes
static int check_close(const char* name, const float* gpu, const float* ref, size_t n, float atol, float rtol) {
    size_t worst = 0, bad = 0;
    float worst_excess = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        float tol = atol + rtol * fabsf(ref[i]);
        float excess = fabsf(gpu[i] - ref[i]) - tol;
        if (!(excess <= 0.0f)) { bad++; }
        if (excess > worst_excess || isnan(gpu[i])) { worst_excess = excess; worst = i; }
    }
    printf("%-24s %s  worst at %zu: gpu %.6g ref %.6g (%zu of %zu outside atol %g rtol %g)\n", name,
           bad == 0 ? "OK  " : "FAIL", worst, gpu[worst], ref[worst], bad, n, atol, rtol);
    return bad == 0;
}

// tolerances for floatX outputs
#if defined(ENABLE_FP32)
#define DEV_ATOL 1e-4f
#define DEV_RTOL 1e-4f
#else
#define DEV_ATOL 2e-2f
#define DEV_RTOL 2e-2f
#endif

// mean milliseconds of `launch` over `repeats` runs after one warm-up
template <typename F>
static float time_ms(F launch, int repeats) {
    launch();
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    cudaCheck(cudaEventRecord(start));
    for (int i = 0; i < repeats; i++) { launch(); }
    cudaCheck(cudaEventRecord(stop));
    cudaCheck(cudaEventSynchronize(stop));
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, start, stop));
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    return ms / repeats;
}

#endif // DEV_COMMON_CUH
