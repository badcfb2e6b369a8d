/*
 * dev/bf16_peak.h — the bf16 matmul peak as `make bench` measures it, for the two benches that probe it
 * (bench_sgemm bf16, and bench_gpt2 products beside each row): oneDNN's n x n x n product with bf16
 * operands and fp32 output, A row-major and B read transposed, once as it is (through strides) and once
 * packed into the layout oneDNN asks for, as the trainer packs its weights (the reorder is not timed). The
 * peak is the better of the two: a probe that leaves packing out is beaten by the step's own products.
 * Needs llmc/cpu_dnnl.h and llmc/utils.h.
 */
#ifndef DEV_BF16_PEAK_H
#define DEV_BF16_PEAK_H

typedef struct {
    int n;
    DnnlGemm g[2];   // B read as it is, B packed
    bf16 *a, *b;     // (n, n) each
    void* packed;    // b packed for g[1]
    float* c;        // (n, n) the last product
} Bf16Peak;

// operands of n x n (fixed values) and both products, made once
static void bf16_peak_init(Bf16Peak* p, int n) {
    size_t nn = (size_t)n * n;
    memset(p, 0, sizeof(*p));
    p->n = n;
    p->a = (bf16*)mallocCheck(nn * sizeof(bf16));
    p->b = (bf16*)mallocCheck(nn * sizeof(bf16));
    p->c = (float*)mallocCheck(nn * sizeof(float));
    for (size_t i = 0; i < nn; i++) { p->a[i] = bf16_from_float((float)(i % 7) * 0.1f); p->b[i] = bf16_from_float((float)(i % 5) * 0.1f); }
    for (int k = 0; k < 2; k++) { dnnl_gemm_create(&p->g[k], 0, 1, n, n, n, n, n, n, 0, k); }
    p->packed = aligned_alloc(64, (dnnl_gemm_packed_bytes(&p->g[1]) + 63) / 64 * 64);
    if (p->packed == NULL) { fatal("bf16 peak: out of memory for n=%d", n); }
    dnnl_gemm_pack_b(&p->g[1], p->b, p->packed);
}

// GFLOP/s of each form, best of `repeats` runs after one warm-up: gflops[0] B plain, gflops[1] B packed;
// returns the better, and its best time in *best_s (NULL: not wanted)
static double bf16_peak_measure(Bf16Peak* p, int repeats, double gflops[2], double* best_s) {
    double flops = 2.0 * p->n * (double)p->n * p->n, best = 1e30;
    for (int k = 0; k < 2; k++) {
        double best_k = 1e30;
        for (int r = 0; r <= repeats; r++) {  // r = 0 is the warm-up
            double t0 = clock_seconds();
            dnnl_gemm_run(&p->g[k], p->a, k ? p->packed : (const void*)p->b, p->c);
            double dt = clock_seconds() - t0;
            if (r > 0 && dt < best_k) { best_k = dt; }
        }
        gflops[k] = flops / best_k / 1e9;
        if (best_k < best) { best = best_k; }
    }
    if (best_s != NULL) { *best_s = best; }
    return flops / best / 1e9;
}

static void bf16_peak_free(Bf16Peak* p) {
    free(p->a); free(p->b); free(p->c); free(p->packed);
    for (int k = 0; k < 2; k++) { dnnl_gemm_destroy(&p->g[k]); }
    memset(p, 0, sizeof(*p));
}

#endif // DEV_BF16_PEAK_H
