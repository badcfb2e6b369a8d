/*
 * test/reliability/nan_sgemm.c — fault injection for test_numeric.sh, loaded with LD_PRELOAD.
 * Wraps OpenBLAS's cblas_sgemm, which computes every matrix multiply of the trainer's forward and
 * backward passes, and writes NaN into the output of calls number [NAN_SGEMM_FROM, NAN_SGEMM_TO)
 * (1-based; unset: never), as a hardware fault or an overflow would. The trainer is not changed.
 * With NAN_SGEMM_COUNT=1 it prints the number of calls at exit, to place the faults on steps.
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*sgemm_fn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE, const enum CBLAS_TRANSPOSE,
                         const blasint, const blasint, const blasint, const float, const float*, const blasint,
                         const float*, const blasint, const float, float*, const blasint);

static long calls;

static long env_long(const char* name, long fallback) {
    const char* s = getenv(name);
    return s != NULL ? atol(s) : fallback;
}

void cblas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta, const enum CBLAS_TRANSPOSE tb,
                 const blasint M, const blasint N, const blasint K, const float alpha, const float* A,
                 const blasint lda, const float* B, const blasint ldb, const float beta, float* C,
                 const blasint ldc) {
    static sgemm_fn real;
    if (real == NULL) { real = (sgemm_fn)dlsym(RTLD_NEXT, "cblas_sgemm"); }
    real(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    long n = __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
    if (n >= env_long("NAN_SGEMM_FROM", -1) && n < env_long("NAN_SGEMM_TO", -1)) { C[0] = NAN; }
}

__attribute__((destructor)) static void report(void) {
    if (getenv("NAN_SGEMM_COUNT") != NULL) { fprintf(stderr, "nan_sgemm: %ld calls\n", calls); }
}
