/*
 * dev/bench_att_products.c — what the attention's per-head products would gain in bf16: one thread runs
 * the six products of one (batch, head) exactly as train_gpt2.c's attention_forward and attention_backward
 * call them (blocks of ATT_BLOCK rows or columns that stop at the causal diagonal, q, k, v read in place
 * from the (T, 3C) qkv rows) through OpenBLAS in fp32, then the same shapes through oneDNN with bf16
 * operands and fp32 output (a primitive per block shape, made before timing). The trainer keeps these
 * products in fp32 (docs/correctness.md, "bf16 on the CPU", says why); this is the measurement behind that.
 * Prints one JSON line: microseconds per head (all six products, every block; best of the repeats).
 * usage: bench_att_products [T=256] [C=768] [NH=12] [repeats=200]
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "llmc/cpu_blas.h"
#include "llmc/cpu_dnnl.h"
#include "hybrid/hmath.h"  // hmath_seconds

#define ATT_BLOCK 32  // as in train_gpt2.c

// one head's buffers, each in fp32 and as a bf16 twin: qkv (T, 3C), att and datt (T, T), dout and out
// (T, C), dqkv (T, 3C); the head is head 0 (q, k, v at columns 0, C, 2C)
enum { QKV, ATT, DOUT, OUT, DQKV, DATT, NBUF };

// C (M,N) = op(A) (M,K) · op(B) (K,N), operands at offsets into the buffers, row-major with leading dims
typedef struct { int transA, transB, M, N, K, a, b, c, lda, ldb, ldc; size_t a_off, b_off, c_off; } Product;

static Product product(int transA, int transB, int M, int N, int K, int a, size_t a_off, int lda, int b,
                       size_t b_off, int ldb, int c, size_t c_off, int ldc) {
    Product p = {transA, transB, M, N, K, a, b, c, lda, ldb, ldc, a_off, b_off, c_off};
    return p;
}

// the products of attention_forward and attention_backward for one head, in their order; returns how many
static int head_products(Product* p, int T, int C, int hs) {
    int C3 = 3 * C, n = 0;
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {  // forward: scores = q k^T, out = att v
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        p[n++] = product(0, 1, r1 - r0, r1, hs, QKV, (size_t)r0 * C3, C3, QKV, C, C3, ATT, (size_t)r0 * T, T);
        p[n++] = product(0, 0, r1 - r0, hs, r1, ATT, (size_t)r0 * T, T, QKV, 2 * C, C3, OUT, (size_t)r0 * C, C);
    }
    for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {  // dv = att^T dout
        int c1 = c0 + ATT_BLOCK < T ? c0 + ATT_BLOCK : T;
        p[n++] = product(1, 0, c1 - c0, hs, T - c0, ATT, (size_t)c0 * T + c0, T, DOUT, (size_t)c0 * C, C, DQKV,
                         (size_t)c0 * C3 + 2 * C, C3);
    }
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {  // datt = dout v^T, dq = dscores k
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        p[n++] = product(0, 1, r1 - r0, r1, hs, DOUT, (size_t)r0 * C, C, QKV, 2 * C, C3, DATT, (size_t)r0 * T, T);
        p[n++] = product(0, 0, r1 - r0, hs, r1, ATT, (size_t)r0 * T, T, QKV, C, C3, DQKV, (size_t)r0 * C3, C3);
    }
    for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {  // dk = dscores^T q
        int c1 = c0 + ATT_BLOCK < T ? c0 + ATT_BLOCK : T;
        p[n++] = product(1, 0, c1 - c0, hs, T - c0, ATT, (size_t)c0 * T + c0, T, QKV, (size_t)c0 * C3, C3, DQKV,
                         (size_t)c0 * C3 + C, C3);
    }
    return n;
}

int main(int argc, char** argv) {
    cpu_blas_init(argc, argv);  // the OpenBLAS kernel (may re-execute once)
    int T = argc > 1 ? atoi(argv[1]) : 256, C = argc > 2 ? atoi(argv[2]) : 768;
    int NH = argc > 3 ? atoi(argv[3]) : 12, repeats = argc > 4 ? atoi(argv[4]) : 200;
    if (T <= 0 || C <= 0 || NH <= 0 || C % NH != 0 || repeats <= 0) {
        fprintf(stderr, "usage: %s [T > 0] [C > 0] [NH > 0 dividing C] [repeats > 0]\n", argv[0]);
        return 1;
    }
    if (!dnnl_available()) { fprintf(stderr, "error: this build has no oneDNN (install libdnnl-dev)\n"); return 1; }
    // one thread, as each of the trainer's threads runs its own heads
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    int hs = C / NH, nblocks = (T + ATT_BLOCK - 1) / ATT_BLOCK;
    size_t sizes[NBUF] = {(size_t)T * 3 * C, (size_t)T * T, (size_t)T * C, (size_t)T * C, (size_t)T * 3 * C, (size_t)T * T};
    float* f[NBUF];
    bf16* h[NBUF];
    unsigned int seed = 1;
    for (int i = 0; i < NBUF; i++) {
        f[i] = (float*)mallocCheck(sizes[i] * sizeof(float));
        h[i] = (bf16*)mallocCheck(sizes[i] * sizeof(bf16));
        for (size_t j = 0; j < sizes[i]; j++) {
            seed = seed * 1664525u + 1013904223u;
            f[i][j] = (float)(seed >> 8) / 16777216.0f - 0.5f;
            h[i][j] = bf16_from_float(f[i][j]);
        }
    }
    Product* p = (Product*)mallocCheck(6 * (size_t)nblocks * sizeof(Product));
    int n = head_products(p, T, C, hs);
    DnnlGemm* g = (DnnlGemm*)mallocCheck((size_t)n * sizeof(DnnlGemm));
    double flops = 0.0;
    for (int i = 0; i < n; i++) {
        dnnl_gemm_create(&g[i], p[i].transA, p[i].transB, p[i].M, p[i].N, p[i].K, p[i].lda, p[i].ldb, p[i].ldc, 0, 0);
        flops += 2.0 * p[i].M * p[i].N * p[i].K;
    }
    double best32 = 1e30, best16 = 1e30;
    for (int r = 0; r <= repeats; r++) {  // r = 0 is the warm-up; the two precisions alternate
        double t0 = hmath_seconds();
        for (int i = 0; i < n; i++) {
            cblas_sgemm(CblasRowMajor, p[i].transA ? CblasTrans : CblasNoTrans, p[i].transB ? CblasTrans : CblasNoTrans,
                        p[i].M, p[i].N, p[i].K, 1.0f, f[p[i].a] + p[i].a_off, p[i].lda, f[p[i].b] + p[i].b_off, p[i].ldb,
                        0.0f, f[p[i].c] + p[i].c_off, p[i].ldc);
        }
        double t1 = hmath_seconds();
        for (int i = 0; i < n; i++) { dnnl_gemm_run(&g[i], h[p[i].a] + p[i].a_off, h[p[i].b] + p[i].b_off, f[p[i].c] + p[i].c_off); }
        double t2 = hmath_seconds();
        if (r > 0 && t1 - t0 < best32) { best32 = t1 - t0; }
        if (r > 0 && t2 - t1 < best16) { best16 = t2 - t1; }
    }
    printf("{\"T\": %d, \"C\": %d, \"NH\": %d, \"products\": %d, \"mflop_per_head\": %.2f, \"fp32_us\": %.2f, "
           "\"bf16_us\": %.2f, \"fp32_gflops\": %.1f, \"bf16_gflops\": %.1f, \"blas\": \"%s\", \"bf16\": \"oneDNN (%s)\"}\n",
           T, C, NH, n, flops / 1e6, best32 * 1e6, best16 * 1e6, flops / best32 / 1e9, flops / best16 / 1e9,
           cpu_blas_describe(), dnnl_isa_name());
    for (int i = 0; i < n; i++) { dnnl_gemm_destroy(&g[i]); }
    for (int i = 0; i < NBUF; i++) { free(f[i]); free(h[i]); }
    free(g); free(p);
    return 0;
}
