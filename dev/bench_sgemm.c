/*
 * dev/bench_sgemm.c — the machine's fp32 matmul peak as `make bench` measures it: OpenBLAS cblas_sgemm on
 * 2048x2048x2048, best of N runs after one warm-up, with the thread count OpenBLAS is given through the
 * environment (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS), the same as the trainer's, and the same kernel
 * (llmc/cpu_blas.h). Prints one JSON line, with the BLAS and its core.
 * usage: bench_sgemm [n=2048] [repeats=5]
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "llmc/cpu_blas.h"
#include "hybrid/hmath.h"  // hmath_seconds: the one monotonic clock

int main(int argc, char** argv) {
    cpu_blas_init(argc, argv);  // the OpenBLAS kernel and the OpenMP wait policy (may re-execute once)
    int n = argc > 1 ? atoi(argv[1]) : 2048;
    int repeats = argc > 2 ? atoi(argv[2]) : 5;
    if (n <= 0 || repeats <= 0) {
        fprintf(stderr, "usage: %s [n > 0] [repeats > 0]\n", argv[0]);
        return 1;
    }
    size_t nn = (size_t)n * n;
    float* a = (float*)malloc(nn * sizeof(float));
    float* b = (float*)malloc(nn * sizeof(float));
    float* c = (float*)malloc(nn * sizeof(float));
    if (!a || !b || !c) { fprintf(stderr, "error: out of memory for n=%d\n", n); return 1; }
    for (size_t i = 0; i < nn; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; c[i] = 0.0f; }
    double best = 1e30;
    for (int r = 0; r <= repeats; r++) {  // r = 0 is the warm-up
        double t0 = hmath_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = hmath_seconds() - t0;
        if (r > 0 && dt < best) { best = dt; }
    }
    double gflops = 2.0 * n * (double)n * n / best / 1e9;
    printf("{\"n\": %d, \"threads\": %d, \"best_s\": %.6f, \"gflops\": %.2f, \"check\": %.3f, \"blas\": \"%s\", \"core\": \"%s\"}\n",
           n, openblas_get_num_threads(), best, gflops, c[nn / 2], cpu_blas_describe(), openblas_get_corename());
    free(a); free(b); free(c);
    return 0;
}
