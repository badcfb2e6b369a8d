/*
 * dev/bench_sgemm.c — the machine's fp32 matmul peak as `make bench` measures it: OpenBLAS cblas_sgemm on
 * 2048x2048x2048, best of N runs after one warm-up, with the thread count OpenBLAS is given through the
 * environment (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS), the same as the trainer's, and the same kernel
 * (llmc/cpu_blas.h). Prints one JSON line, with the BLAS and its core.
 * bf16: the bf16 peak instead, as train_gpt2 --precision bf16 multiplies (dev/bf16_peak.h: oneDNN, bf16
 * operands, fp32 output, B plain and B packed, the better of the two; both reported), on
 * omp_get_max_threads() threads.
 * bandwidth: the memory bandwidth instead, as `make bench` sets the floors of a step's phases against it:
 * a += s*b over two arrays of n MiB each (n 0: four times the last-level cache, at least 256 MiB, so that
 * neither fits in it), on the same threads, bytes counted as 3 x 4 per element (a read, b read, a written;
 * a is read before it is written, so no write-allocate read goes uncounted).
 * usage: bench_sgemm [n=2048] [repeats=5] [fp32|bf16|bandwidth]
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <unistd.h>
#include <omp.h>
#include "llmc/cpu_blas.h"
#include "llmc/cpu_dnnl.h"
#include "llmc/utils.h"  // clock_seconds: the one monotonic clock
#include "dev/bf16_peak.h"  // the bf16 peak (bf16 mode)

// a += s*b over n floats, best of repeats after one warm-up; prints one JSON line
static int bench_bandwidth(int mib, int repeats) {
    if (mib == 0) {
        long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
        mib = (int)(4 * (llc > 0 ? llc : 0) / (1 << 20));
        if (mib < 256) { mib = 256; }
    }
    size_t n = (size_t)mib * (1 << 20) / sizeof(float);
    float* a = (float*)malloc(n * sizeof(float));
    float* b = (float*)malloc(n * sizeof(float));
    if (!a || !b) { fprintf(stderr, "error: out of memory for 2 x %d MiB\n", mib); return 1; }
    #pragma omp parallel for simd schedule(static)  // first touch by the threads that run the probe
    for (size_t i = 0; i < n; i++) { a[i] = 1.0f; b[i] = (float)(i % 7); }
    double best = 1e30;
    for (int r = 0; r <= repeats; r++) {  // r = 0 is the warm-up
        double t0 = clock_seconds();
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) { a[i] = a[i] + 1e-3f * b[i]; }
        double dt = clock_seconds() - t0;
        if (r > 0 && dt < best) { best = dt; }
    }
    printf("{\"mib\": %d, \"threads\": %d, \"best_s\": %.6f, \"gbs\": %.2f, \"check\": %.3f}\n", mib,
           omp_get_max_threads(), best, 3.0 * sizeof(float) * n / best / 1e9, a[n / 2]);
    free(a); free(b);
    return 0;
}

int main(int argc, char** argv) {
    cpu_blas_init(argc, argv);  // the OpenBLAS kernel and the OpenMP wait policy (may re-execute once)
    int n = argc > 1 ? atoi(argv[1]) : 2048;
    int repeats = argc > 2 ? atoi(argv[2]) : 5;
    int bf16_mode = argc > 3 && strcmp(argv[3], "bf16") == 0;
    int bw_mode = argc > 3 && strcmp(argv[3], "bandwidth") == 0;
    if (bw_mode && n >= 0 && repeats > 0) { return bench_bandwidth(n, repeats); }
    if (n <= 0 || repeats <= 0 || (argc > 3 && !bf16_mode && strcmp(argv[3], "fp32") != 0)) {
        fprintf(stderr, "usage: %s [n > 0] [repeats > 0] [fp32|bf16|bandwidth (n MiB, 0: auto)]\n", argv[0]);
        return 1;
    }
    if (bf16_mode) {
        if (!dnnl_available()) { fprintf(stderr, "error: bf16: this build has no oneDNN (install libdnnl-dev)\n"); return 1; }
        Bf16Peak pk;
        double gf[2], best;  // B plain, B packed
        bf16_peak_init(&pk, n);
        double gflops = bf16_peak_measure(&pk, repeats, gf, &best);
        printf("{\"n\": %d, \"threads\": %d, \"best_s\": %.6f, \"gflops\": %.2f, \"gflops_plain\": %.2f, \"gflops_packed\": %.2f, "
               "\"check\": %.3f, \"blas\": \"oneDNN bf16 matmul (%s)\", \"core\": \"%s\"}\n",
               n, omp_get_max_threads(), best, gflops, gf[0], gf[1], pk.c[(size_t)n * n / 2], dnnl_isa_name(), openblas_get_corename());
        bf16_peak_free(&pk);
        return 0;
    }
    size_t nn = (size_t)n * n;
    float* a = (float*)malloc(nn * sizeof(float));
    float* b = (float*)malloc(nn * sizeof(float));
    float* c = (float*)malloc(nn * sizeof(float));
    if (!a || !b || !c) { fprintf(stderr, "error: out of memory for n=%d\n", n); return 1; }
    for (size_t i = 0; i < nn; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; c[i] = 0.0f; }
    double best = 1e30;
    for (int r = 0; r <= repeats; r++) {  // r = 0 is the warm-up
        double t0 = clock_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = clock_seconds() - t0;
        if (r > 0 && dt < best) { best = dt; }
    }
    double gflops = 2.0 * n * (double)n * n / best / 1e9;
    printf("{\"n\": %d, \"threads\": %d, \"best_s\": %.6f, \"gflops\": %.2f, \"check\": %.3f, \"blas\": \"%s\", \"core\": \"%s\"}\n",
           n, openblas_get_num_threads(), best, gflops, c[nn / 2], cpu_blas_describe(), openblas_get_corename());
    free(a); free(b); free(c);
    return 0;
}
