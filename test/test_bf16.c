// --precision bf16 (llmc/cpu_dnnl.h): the bf16 matmuls of the forward and of both backward GEMMs agree with
// an fp64 reference within bf16's rounding on random data, odd shapes included, and the attention's with
// the fp32 attention; a bf16 training run is
// deterministic and resumes bit for bit; on a CPU without bf16 (forced: LLMC_BF16_TEST_NO_BF16=1) nothing
// changes (auto is fp32) while where it has bf16 auto is bf16; a resume with another precision is refused.
// The bf16 tests skip, saying why, when the build has no oneDNN or the CPU no native bf16; under
// LLMC_BF16_TEST_REFERENCE=1 (test/test_bf16_reference.sh) they run on any CPU with the products computed by
// the test reference, to the same tolerances.
// Tolerance of one output element: rounding each operand to bf16 (8 significant bits, unit roundoff
// u = 2^-8) changes each product a_k b_k by at most (2u + u^2) |a_k b_k|, and the fp32 accumulation of K
// terms adds at most K 2^-24 (1 + ...) of sum |a_k b_k|; so |C - C_exact| <= (2^-7 + 2^-16 + K 2^-23) S with
// S = sum_k |a_k b_k| (the fp32 terms doubled for slack in the order of summation).
#define TESTING
#include "../train_gpt2.c"
#include "trainer_test_util.h"

static int bf16_ready(void) {
    const char* why = !dnnl_available() ? "built without oneDNN (libdnnl-dev)"
                    : !cpu_has_native_bf16() ? "this CPU has no native bf16 (avx512_bf16/AMX); test_bf16_reference.sh runs them" : NULL;
    if (why == NULL) { return 1; }
    fprintf(stderr, "test_bf16: skipped: %s\n", why);  // also without --verbose
    cr_skip_test("%s\n", why);
    return 0;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float urand(void) {  // uniform in [-1, 1)
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return (float)((rng_state * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}
static float* rand_buf(size_t n, float scale) {
    float* x = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { x[i] = scale * urand(); }
    return x;
}

static double bound(double sum_abs, int K) { return (1.0 / 128 + 1.0 / 65536 + K / 8388608.0) * sum_abs + 1e-30; }

// the three products of one linear layer at (N, C, OC), bf16 vs exact (fp64 of the fp32 inputs); pack_w: the
// weights packed (as the lm head's are)
static void check_linear(int N, int C, int OC, int with_residual, int pack_w, int chunk) {
    float* inp = rand_buf((size_t)N * C, 1.0f);
    float* w = rand_buf((size_t)OC * C, 0.5f);
    float* bias = rand_buf(OC, 0.1f);
    float* res = rand_buf((size_t)N * OC, 1.0f);
    float* dout = rand_buf((size_t)N * OC, 0.01f);
    float* out = (float*)malloc((size_t)N * OC * sizeof(float));
    float* dinp = rand_buf((size_t)N * C, 1.0f);  // overwritten
    float* dw0 = rand_buf((size_t)OC * C, 0.1f);  // accumulated into
    float* dw = (float*)malloc((size_t)OC * C * sizeof(float));
    memcpy(dw, dw0, (size_t)OC * C * sizeof(float));
    float* db = (float*)calloc(OC, sizeof(float));
    bf16* w16 = (bf16*)malloc((size_t)OC * C * sizeof(bf16));
    for (size_t i = 0; i < (size_t)OC * C; i++) { w16[i] = bf16_from_float(w[i]); }
    size_t wide = (size_t)(OC > C ? OC : C);
    bf16* s1 = (bf16*)malloc((size_t)N * wide * sizeof(bf16));
    bf16* s2 = (bf16*)malloc((size_t)N * wide * sizeof(bf16));
    Bf16Linear lin;
    memset(&lin, 0, sizeof(lin));
    bf16_linear_create(&lin, N, C, OC, with_residual ? DNNL_C_ADD : DNNL_C_BIAS, w16, 1, pack_w, chunk);
    bf16_linear_pack(&lin);
    void* packed = aligned_alloc(64, bf16_linear_act_bytes(&lin));
    for (size_t i = 0; i < (size_t)N * C; i++) { s2[i] = bf16_from_float(inp[i]); }  // as its producer keeps it
    matmul_forward_bf16(out, NULL, s2, &lin, 0, bias, with_residual ? res : NULL, N, C, OC);
    matmul_backward_bf16(dinp, dw, db, dout, s2, &lin, 0, N, C, OC, s1, packed);
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) {  // out = inp @ w^T + bias (+ res)
            double exact = bias[o] + (with_residual ? res[(size_t)n * OC + o] : 0.0), s = 0.0;
            for (int c = 0; c < C; c++) {
                double p = (double)inp[(size_t)n * C + c] * w[(size_t)o * C + c];
                exact += p; s += fabs(p);
            }
            double err = fabs(out[(size_t)n * OC + o] - exact);
            cr_assert_leq(err, bound(s, C) + 1e-6 * fabs(exact), "forward %dx%dx%d [%d,%d]: %g vs %g", N, C, OC, n, o,
                          out[(size_t)n * OC + o], exact);
        }
        for (int c = 0; c < C; c++) {  // dinp = dout @ w
            double exact = 0.0, s = 0.0;
            for (int o = 0; o < OC; o++) {
                double p = (double)dout[(size_t)n * OC + o] * w[(size_t)o * C + c];
                exact += p; s += fabs(p);
            }
            cr_assert_leq(fabs(dinp[(size_t)n * C + c] - exact), bound(s, OC), "dinp %dx%dx%d [%d,%d]", N, C, OC, n, c);
        }
    }
    for (int o = 0; o < OC; o++) {  // dw += dout^T @ inp; db = column sums of dout (fp32)
        double dbe = 0.0;
        for (int n = 0; n < N; n++) { dbe += dout[(size_t)n * OC + o]; }
        cr_assert_leq(fabs(db[o] - dbe), 1e-5 * N * 0.01, "dbias %d", o);
        for (int c = 0; c < C; c++) {
            double exact = dw0[(size_t)o * C + c], s = 0.0;
            for (int n = 0; n < N; n++) {
                double p = (double)dout[(size_t)n * OC + o] * inp[(size_t)n * C + c];
                exact += p; s += fabs(p);
            }
            double err = fabs(dw[(size_t)o * C + c] - exact);
            cr_assert_leq(err, bound(s, N) + 1e-6 * fabs(exact), "dweight %dx%dx%d [%d,%d]: %g vs %g", N, C, OC, o, c,
                          dw[(size_t)o * C + c], exact);
        }
    }
    bf16_linear_destroy(&lin);
    free(inp); free(w); free(bias); free(res); free(dout); free(out); free(dinp); free(dw0); free(dw); free(db);
    free(w16); free(s1); free(s2); free(packed);
}

Test(bf16_matmul, forward_and_both_backward_gemms_within_bf16_rounding) {
    if (!bf16_ready()) { return; }
    for (int pack_w = 0; pack_w <= 1; pack_w++) {
        check_linear(64, 48, 144, 0, pack_w, BF16_CHUNK);   // qkv-like
        check_linear(64, 192, 48, 1, pack_w, BF16_CHUNK);   // fcproj-like, with the residual
        check_linear(37, 19, 53, 1, pack_w, BF16_CHUNK);    // odd everything
        check_linear(1, 7, 3, 0, pack_w, BF16_CHUNK);       // one row
        check_linear(130, 64, 256, 0, pack_w, BF16_CHUNK);  // lm-head-like (no bias is a NULL bias in the model; bias here)
        // in pieces, as the lm head runs: dinp and dweight in chunks of W's rows (whole chunks, and a narrower
        // last one), the forward in blocks of BF16_ROWS rows where they divide N
        check_linear(130, 64, 256, 0, pack_w, 64);
        check_linear(3 * BF16_ROWS, 24, 100, 0, pack_w, 32);
        check_linear(37, 19, 53, 1, pack_w, 16);
        check_linear(5, 24, 40, 0, pack_w, 32);
    }
}

// packing a product's right operand (the weights, the dweight GEMM's inp) changes no bit of its result: the
// packed products against the same oneDNN products given the plain operands, at a few shapes
static void check_packing_exact(int N, int C, int OC) {
    bf16* x = (bf16*)malloc((size_t)N * C * sizeof(bf16));    // inp
    bf16* d = (bf16*)malloc((size_t)N * OC * sizeof(bf16));   // dout
    bf16* w = (bf16*)malloc((size_t)OC * C * sizeof(bf16));   // W
    for (size_t i = 0; i < (size_t)N * C; i++) { x[i] = bf16_from_float(urand()); }
    for (size_t i = 0; i < (size_t)N * OC; i++) { d[i] = bf16_from_float(0.01f * urand()); }
    for (size_t i = 0; i < (size_t)OC * C; i++) { w[i] = bf16_from_float(0.5f * urand()); }
    float* r[2][3];  // [packed][fwd, dinp, dweight]
    size_t outn[3] = {(size_t)N * OC, (size_t)N * C, (size_t)OC * C};
    for (int pk = 0; pk <= 1; pk++) {
        DnnlGemm g[3];
        dnnl_gemm_create(&g[0], 0, 1, N, OC, C, C, C, OC, 0, pk);  // as bf16_linear_create makes them
        dnnl_gemm_create(&g[1], 0, 0, N, C, OC, OC, C, C, 0, pk);
        dnnl_gemm_create(&g[2], 1, 0, OC, C, N, OC, C, C, 0, pk);
        const bf16* b[3] = {w, w, x};
        const bf16* a[3] = {x, d, d};
        for (int k = 0; k < 3; k++) {
            r[pk][k] = (float*)malloc(outn[k] * sizeof(float));
            void* bp = pk ? aligned_alloc(64, round64(dnnl_gemm_packed_bytes(&g[k]))) : NULL;
            if (pk) { dnnl_gemm_pack_b(&g[k], b[k], bp); }
            dnnl_gemm_run(&g[k], a[k], pk ? bp : (const void*)b[k], r[pk][k]);
            free(bp);
            dnnl_gemm_destroy(&g[k]);
        }
    }
    const char* name[3] = {"forward", "dinp", "dweight"};
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(memcmp(r[0][k], r[1][k], outn[k] * sizeof(float)), 0, "%s %dx%dx%d: packing changed bits", name[k],
                     N, C, OC);
        free(r[0][k]); free(r[1][k]);
    }
    free(x); free(d); free(w);
}

Test(bf16_matmul, packing_an_operand_changes_no_bit) {
    if (!bf16_ready()) { return; }
    check_packing_exact(256, 96, 1000);  // lm-head-like: a wide vocabulary, long rows
    check_packing_exact(512, 64, 256);   // fc-like
    check_packing_exact(37, 19, 53);     // odd everything
}

// a layer with a bias and no residual (qkv, fc) has oneDNN add the bias as it writes out (DNNL_C_BIAS); one
// with a residual accumulates onto bias + residual written first (DNNL_C_ADD). With the residual zero the
// two are the same sums: the same bits, weights plain and packed. And qkv's, written in bf16 (DNNL_C_BIAS |
// DNNL_C_BF16), is that out rounded to nearest even, bit for bit.
static void check_bias_form(int N, int C, int OC, int pack_w) {
    float* inp = rand_buf((size_t)N * C, 1.0f);
    float* w = rand_buf((size_t)OC * C, 0.5f);
    float* bias = rand_buf(OC, 0.3f);
    float* zeros = (float*)calloc((size_t)N * OC, sizeof(float));
    bf16* w16 = (bf16*)malloc((size_t)OC * C * sizeof(bf16));
    bf16* in16 = (bf16*)malloc((size_t)N * C * sizeof(bf16));
    for (size_t i = 0; i < (size_t)OC * C; i++) { w16[i] = bf16_from_float(w[i]); }
    for (size_t i = 0; i < (size_t)N * C; i++) { in16[i] = bf16_from_float(inp[i]); }
    float* out[2];
    int form[2] = {DNNL_C_BIAS, DNNL_C_ADD};
    for (int k = 0; k < 2; k++) {
        out[k] = (float*)malloc((size_t)N * OC * sizeof(float));
        memset(out[k], 0xff, (size_t)N * OC * sizeof(float));  // NaNs: every element must be written
        Bf16Linear lin;
        bf16_linear_create(&lin, N, C, OC, form[k], w16, 1, pack_w, BF16_CHUNK);
        bf16_linear_pack(&lin);
        matmul_forward_bf16(out[k], NULL, in16, &lin, 0, bias, k == 0 ? NULL : zeros, N, C, OC);
        bf16_linear_destroy(&lin);
    }
    for (size_t i = 0; i < (size_t)N * OC; i++) {
        cr_assert(memcmp(&out[0][i], &out[1][i], sizeof(float)) == 0, "%dx%dx%d packed %d, out (%zu, %zu): %g with the bias in the product, %g onto it",
                  N, C, OC, pack_w, i / OC, i % OC, out[0][i], out[1][i]);
    }
    bf16* out16 = (bf16*)malloc((size_t)N * OC * sizeof(bf16));
    memset(out16, 0xff, (size_t)N * OC * sizeof(bf16));
    Bf16Linear lin;
    bf16_linear_create(&lin, N, C, OC, DNNL_C_BIAS | DNNL_C_BF16, w16, 1, pack_w, BF16_CHUNK);
    bf16_linear_pack(&lin);
    matmul_forward_bf16(NULL, out16, in16, &lin, 0, bias, NULL, N, C, OC);
    bf16_linear_destroy(&lin);
    for (size_t i = 0; i < (size_t)N * OC; i++) {
        cr_assert_eq(out16[i], bf16_from_float(out[0][i]), "%dx%dx%d packed %d, out16 (%zu, %zu): 0x%04x, fp32 %g", N,
                     C, OC, pack_w, i / OC, i % OC, out16[i], out[0][i]);
    }
    free(inp); free(w); free(bias); free(zeros); free(w16); free(in16); free(out[0]); free(out[1]); free(out16);
}

Test(bf16_matmul, the_bias_added_by_the_product_gives_the_same_bits_and_qkv_them_rounded) {
    if (!bf16_ready()) { return; }
    for (int pack_w = 0; pack_w < 2; pack_w++) {
        check_bias_form(256, 64, 192, pack_w);  // qkv-like
        check_bias_form(37, 19, 53, pack_w);    // odd everything
    }
}

// the lm head's forward for a loss writes its logits in bf16 (oneDNN rounds the fp32 results): those of its
// fp32 forward rounded to nearest even, bit for bit, weights plain and packed, in row blocks and whole
static void check_logits16(int N, int C, int OC, int pack_w) {
    float* inp = rand_buf((size_t)N * C, 1.0f);
    float* w = rand_buf((size_t)OC * C, 0.5f);
    bf16* w16 = (bf16*)malloc((size_t)OC * C * sizeof(bf16));
    bf16* in16 = (bf16*)malloc((size_t)N * C * sizeof(bf16));
    for (size_t i = 0; i < (size_t)OC * C; i++) { w16[i] = bf16_from_float(w[i]); }
    for (size_t i = 0; i < (size_t)N * C; i++) { in16[i] = bf16_from_float(inp[i]); }
    float* out = (float*)malloc((size_t)N * OC * sizeof(float));
    bf16* out16 = (bf16*)malloc((size_t)N * OC * sizeof(bf16));
    memset(out16, 0xff, (size_t)N * OC * sizeof(bf16));  // NaNs: every element must be written
    Bf16Linear lin;
    bf16_linear_create(&lin, N, C, OC, DNNL_C_SET, w16, 1, pack_w, BF16_CHUNK);
    bf16_linear_pack(&lin);
    matmul_forward_bf16(out, NULL, in16, &lin, 0, NULL, NULL, N, C, OC);
    matmul_forward_bf16(NULL, out16, in16, &lin, 0, NULL, NULL, N, C, OC);
    for (size_t i = 0; i < (size_t)N * OC; i++) {
        cr_assert_eq(out16[i], bf16_from_float(out[i]), "%dx%dx%d packed %d, logit (%zu, %zu): 0x%04x, fp32 %g",
                     N, C, OC, pack_w, i / OC, i % OC, out16[i], out[i]);
    }
    bf16_linear_destroy(&lin);
    free(inp); free(w); free(w16); free(in16); free(out); free(out16);
}

Test(bf16_matmul, the_bf16_logits_are_the_fp32_logits_rounded) {
    if (!bf16_ready()) { return; }
    for (int pack_w = 0; pack_w < 2; pack_w++) {
        check_logits16(512, 64, 5000, pack_w);  // wider than a chunk: the forward in blocks of BF16_ROWS rows
        check_logits16(96, 32, 1000, pack_w);   // one product
    }
}

// the error is really bf16's: the same products are off by more than fp32 rounding would be, somewhere
// norm-wise relative error of x against the reference r (n values)
static double rel_err(const float* x, const float* r, size_t n) {
    double d = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) { d += ((double)x[i] - r[i]) * ((double)x[i] - r[i]); s += (double)r[i] * r[i]; }
    return sqrt(d / (s + 1e-300));
}

// The attention with its products in bf16 against the fp32 attention (which test_gradcheck checks against
// finite differences), forward and backward, on random q, k, v and dout: the probabilities, out (itself
// rounded to bf16, the next matmul's operand) and dqkv within 2^-6 norm-wise. bf16 rounds q, k, v, the probabilities, dout and d(scores), each by at most 2^-9
// relative, and a result goes through two or three of them (the scores' error also moves the softmax, and
// the backward's softmax runs on the rounded probabilities); a wrong block, mask or scale moves them by O(1).
// And not equal: bf16 is in use. Then the trainer's form: q, k, v kept in qkv's own memory, in groups of
// sequences per product call: the same results bit for bit as one sequence per call with q, k, v kept apart.
static void check_attention(int B, int T, int C, int NH) {
    size_t n3 = (size_t)B * T * 3 * C, nc = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    int threads = omp_get_max_threads();
    float* qkv = rand_buf(n3, 2.0f);
    float* dout = rand_buf(nc, 1.0f);
    float* out32 = (float*)malloc(nc * sizeof(float));
    float* out16 = (float*)malloc(nc * sizeof(float));
    bf16* o16 = (bf16*)malloc(nc * sizeof(bf16));
    bf16* o16g = (bf16*)malloc(nc * sizeof(bf16));
    float* att32 = (float*)malloc(na * sizeof(float));
    float* att16f = (float*)malloc(na * sizeof(float));
    bf16* att16 = (bf16*)malloc(na * sizeof(bf16));
    bf16* att16g = (bf16*)malloc(na * sizeof(bf16));
    float* dqkv32 = (float*)malloc(n3 * sizeof(float));
    float* dqkv16 = (float*)malloc(n3 * sizeof(float));
    float* dqkv16g = (float*)malloc(n3 * sizeof(float));
    float* scratch = (float*)malloc((size_t)threads * T * T * sizeof(float));
    bf16* kept = (bf16*)malloc(n3 * sizeof(bf16));
    bf16* scr = (bf16*)malloc(n3 * sizeof(bf16));
    bf16* dout_16 = (bf16*)malloc(nc * sizeof(bf16));
    bf16* qkv16 = (bf16*)malloc(n3 * sizeof(bf16));  // qkv as the qkv product writes it in bf16
    for (size_t i = 0; i < n3; i++) { qkv16[i] = bf16_from_float(qkv[i]); }
    bf16* shared = (bf16*)malloc(n3 * sizeof(bf16));  // qkv16, then q, k, v head by head over it
    memcpy(shared, qkv16, n3 * sizeof(bf16));
    Bf16Attention ba, bag;
    bf16_attention_create(&ba, 1, T, C, NH);
    bf16_attention_create(&bag, B, T, C, NH);
    attention_forward_fp32(out32, att32, qkv, B, T, C, NH);
    attention_forward_bf16(o16, att16, kept, qkv16, &ba, scr, B, T, C, NH);
    for (size_t i = 0; i < na; i++) { att16f[i] = bf16_to_float(att16[i]); }
    for (size_t i = 0; i < nc; i++) { out16[i] = bf16_to_float(o16[i]); }
    double e_att = rel_err(att16f, att32, na), e_out = rel_err(out16, out32, nc);
    memset(scr, 0x7f, n3 * sizeof(bf16));  // the backward takes nothing from the forward's scratch
    memset(ba.s32, 0x7f, (size_t)NH * T * T * sizeof(float));
    memset(ba.h32, 0x7f, (size_t)3 * T * C * sizeof(float));
    attention_backward_bf16(dqkv16, NULL, NULL, dout, kept, att16, &ba, dout_16, B, T, C, NH);
    attention_backward_fp32(dqkv32, scratch, dout, qkv, att32, B, T, C, NH);  // overwrites att32
    double e_d = rel_err(dqkv16, dqkv32, n3);
    double tol = 1.0 / 64;
    cr_assert_leq(e_att, tol, "B=%d T=%d C=%d NH=%d: probabilities off by %g", B, T, C, NH, e_att);
    cr_assert_leq(e_out, tol, "B=%d T=%d C=%d NH=%d: out off by %g", B, T, C, NH, e_out);
    cr_assert_leq(e_d, tol, "B=%d T=%d C=%d NH=%d: dqkv off by %g", B, T, C, NH, e_d);
    cr_assert_gt(e_out, 1e-5, "bf16 and fp32 attention agree to %g: is bf16 used?", e_out);
    cr_assert_gt(e_d, 1e-5, "bf16 and fp32 attention gradients agree to %g: is bf16 used?", e_d);
    // the trainer's form: kept in qkv's memory, all B sequences per call
    attention_forward_bf16(o16g, att16g, shared, shared, &bag, scr, B, T, C, NH);
    attention_backward_bf16(dqkv16g, NULL, NULL, dout, shared, att16g, &bag, dout_16, B, T, C, NH);
    cr_assert(memcmp(att16g, att16, na * sizeof(bf16)) == 0, "B=%d T=%d: grouped probabilities differ", B, T);
    cr_assert(memcmp(shared, kept, n3 * sizeof(bf16)) == 0, "B=%d T=%d: q, k, v kept in place differ", B, T);
    cr_assert(memcmp(o16g, o16, nc * sizeof(bf16)) == 0, "B=%d T=%d: grouped out differs", B, T);
    cr_assert(memcmp(dqkv16g, dqkv16, n3 * sizeof(float)) == 0, "B=%d T=%d: grouped dqkv differs", B, T);
    // and as the trainer has it: dqkv rounded to bf16 for the qkv layer's backward, with that layer's bias
    // gradient summed from the fp32 values as matmul_backward_bf16 would: the same bits
    bf16* d16 = (bf16*)malloc(n3 * sizeof(bf16));
    float* db0 = rand_buf(3 * C, 0.1f);  // the bias gradient accumulates
    float *db = (float*)malloc(3 * C * sizeof(float)), *db_ref = (float*)malloc(3 * C * sizeof(float));
    memcpy(db, db0, 3 * C * sizeof(float));
    memcpy(db_ref, db0, 3 * C * sizeof(float));
    #pragma omp parallel
    { colsum_part(omp_get_thread_num(), omp_get_num_threads(), db_ref, dqkv16, B * T, 3 * C); }
    attention_backward_bf16(NULL, d16, db, dout, shared, att16g, &bag, dout_16, B, T, C, NH);
    for (size_t i = 0; i < n3; i++) {
        cr_assert_eq(d16[i], bf16_from_float(dqkv16[i]), "B=%d T=%d: dqkv16 [%zu] 0x%04x vs %g", B, T, i, d16[i], dqkv16[i]);
    }
    cr_assert(memcmp(db, db_ref, 3 * C * sizeof(float)) == 0, "B=%d T=%d: the qkv bias gradient", B, T);
    free(d16); free(db0); free(db); free(db_ref);
    bf16_attention_destroy(&ba);
    bf16_attention_destroy(&bag);
    free(qkv); free(dout); free(out32); free(out16); free(o16); free(o16g); free(att32); free(att16f); free(att16);
    free(att16g); free(dqkv32); free(dqkv16); free(dqkv16g); free(scratch); free(kept); free(scr); free(dout_16);
    free(shared); free(qkv16);
}

Test(bf16_matmul, attention_products_within_bf16_rounding) {
    if (!bf16_ready()) { return; }
    check_attention(2, 103, 64, 4);   // hs 16, odd T
    check_attention(1, 64, 128, 2);   // hs 64, one sequence
    check_attention(3, 5, 24, 3);     // three sequences, hs 8
    cr_assert_eq(bf16_attention_group(8, 256, 12), 1, "d12 T=256: one sequence per call");
    cr_assert_eq(bf16_attention_group(8, 64, 12), 8, "d12 T=64: all eight");
    cr_assert_eq(bf16_attention_group(12, 128, 12), 4, "the largest divisor of B that fits");
}

// The producers of the activations the linear layers read (LayerNorm, GELU) write them in bf16 under
// --precision bf16: each value is the fp32 path's, rounded to nearest even, bit for bit, as the matmuls
// rounded them before they were kept in bf16.
Test(bf16_activations, layernorm_and_gelu_write_the_fp32_values_rounded) {
    int N = 37, C = 72;
    size_t n = (size_t)N * C;
    float* x = rand_buf(n, 3.0f);
    float* w = rand_buf(C, 1.0f);
    float* b = rand_buf(C, 0.5f);
    float* out = (float*)malloc(n * sizeof(float));
    bf16* out16 = (bf16*)malloc(n * sizeof(bf16));
    float *m = (float*)malloc(N * sizeof(float)), *r = (float*)malloc(N * sizeof(float));
    float *m16 = (float*)malloc(N * sizeof(float)), *r16 = (float*)malloc(N * sizeof(float));
    layernorm_forward(out, NULL, m, r, x, w, b, N, C);
    layernorm_forward(NULL, out16, m16, r16, x, w, b, N, C);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(out16[i], bf16_from_float(out[i]), "layernorm [%zu]: %04x vs %g", i, out16[i], out[i]);
    }
    cr_assert(memcmp(m, m16, N * sizeof(float)) == 0 && memcmp(r, r16, N * sizeof(float)) == 0, "layernorm's mean, rstd");
    gelu_forward(out, NULL, x, n);
    gelu_forward(NULL, out16, x, n);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(out16[i], bf16_from_float(out[i]), "gelu [%zu]: %04x vs %g", i, out16[i], out[i]);
    }
    free(x); free(w); free(b); free(out); free(out16); free(m); free(r); free(m16); free(r16);
}

// The fc layer's backward in bf16 takes d(fch) from gelu_backward_bf16: rounded to bf16, with its bias
// gradient, bit for bit what the fp32 GELU backward followed by matmul_backward_bf16's rounding and column
// sums give (the fp32 d(fch) is never written).
Test(bf16_activations, the_fused_gelu_backward_is_the_fp32_one_rounded_with_its_column_sums) {
    int N = 41, OC = 100;  // odd shapes: the threads' column ranges split unevenly
    size_t n = (size_t)N * OC;
    float* x = rand_buf(n, 3.0f);
    float* d = rand_buf(n, 1.0f);
    float* dref = (float*)malloc(n * sizeof(float));
    memcpy(dref, d, n * sizeof(float));
    float* bias0 = rand_buf(OC, 0.5f);  // dbias accumulates
    float *dbias = (float*)malloc(OC * sizeof(float)), *dbias_ref = (float*)malloc(OC * sizeof(float));
    memcpy(dbias, bias0, OC * sizeof(float));
    memcpy(dbias_ref, bias0, OC * sizeof(float));
    bf16* d16 = (bf16*)malloc(n * sizeof(bf16));
    gelu_backward_inplace(dref, x, n);
    #pragma omp parallel
    { colsum_part(omp_get_thread_num(), omp_get_num_threads(), dbias_ref, dref, N, OC); }
    gelu_backward_bf16(d16, dbias, d, x, N, OC);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(d16[i], bf16_from_float(dref[i]), "d(fch) [%zu]: %04x vs %g", i, d16[i], dref[i]);
    }
    cr_assert(memcmp(dbias, dbias_ref, OC * sizeof(float)) == 0, "the bias gradient, bit for bit");
    free(x); free(d); free(dref); free(bias0); free(dbias); free(dbias_ref); free(d16);
}

Test(bf16_matmul, bf16_is_really_used) {
    if (!bf16_ready()) { return; }
    int N = 32, C = 64, OC = 32;
    float* inp = rand_buf((size_t)N * C, 1.0f);
    float* w = rand_buf((size_t)OC * C, 1.0f);
    float* zero = (float*)calloc(OC, sizeof(float));
    float* o32 = (float*)malloc((size_t)N * OC * sizeof(float));
    float* o16 = (float*)malloc((size_t)N * OC * sizeof(float));
    bf16* w16 = (bf16*)malloc((size_t)OC * C * sizeof(bf16));
    bf16* s = (bf16*)malloc((size_t)N * C * sizeof(bf16));
    for (size_t i = 0; i < (size_t)OC * C; i++) { w16[i] = bf16_from_float(w[i]); }
    Bf16Linear lin;
    memset(&lin, 0, sizeof(lin));
    bf16_linear_create(&lin, N, C, OC, DNNL_C_BIAS, w16, 1, 0, BF16_CHUNK);
    matmul_forward_fp32(o32, inp, w, zero, NULL, N, C, OC);
    for (size_t i = 0; i < (size_t)N * C; i++) { s[i] = bf16_from_float(inp[i]); }
    matmul_forward_bf16(o16, NULL, s, &lin, 0, zero, NULL, N, C, OC);
    double maxdiff = 0.0;
    for (size_t i = 0; i < (size_t)N * OC; i++) { maxdiff = fmax(maxdiff, fabs(o32[i] - o16[i])); }
    cr_assert_gt(maxdiff, 1e-3, "bf16 and fp32 outputs agree to %g: is bf16 used?", maxdiff);
    bf16_linear_destroy(&lin);
    free(inp); free(w); free(zero); free(o32); free(o16); free(w16); free(s);
}

// crossentropy_forward on bf16 logits (crossentropy_forward_bf16) against the fp32 form on the same values,
// at GPT-2's vocabulary, on every thread: tolerance zero. The same losses and lse bit for bit, in the eval
// form (dloss 0: the logits left as they were) and the training form, where each bf16 dlogit, written over its
// logit, is the fp32 one rounded to nearest even (padded columns 0).
Test(bf16_crossentropy, the_fp32_losses_and_dlogits_rounded_bit_for_bit) {
    int N = 48, V = 50257, Vp = 50304, threads = omp_get_max_threads();
    size_t n = (size_t)N * Vp;
    float* logits = rand_buf(n, 8.0f);
    int* targets = (int*)malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) { targets[i] = (int)((i * 7919u + 13u) % (unsigned)V); }
    targets[0] = 0;
    targets[1] = V - 1;
    logits[(size_t)2 * Vp + targets[2]] = 30.0f;  // a row the target dominates
    bf16* x16 = (bf16*)malloc(n * sizeof(bf16));
    for (size_t i = 0; i < n; i++) {  // the values a bf16 lm head writes; its padded columns are not read
        x16[i] = i % Vp < (size_t)V ? bf16_from_float(logits[i]) : 0xffff;
        logits[i] = bf16_to_float(x16[i]);
    }
    bf16* before = (bf16*)malloc(n * sizeof(bf16));
    memcpy(before, x16, n * sizeof(bf16));
    float *loss32 = (float*)malloc(N * sizeof(float)), *lse32 = (float*)malloc(N * sizeof(float));
    float *loss16 = (float*)malloc(N * sizeof(float)), *lse16 = (float*)malloc(N * sizeof(float));
    float* scratch = (float*)malloc((size_t)threads * Vp * sizeof(float));
    float dloss = 1.0f / N;
    for (int train = 0; train < 2; train++) {
        const char* form = train ? "training" : "eval";
        crossentropy_forward(loss32, lse32, logits, NULL, targets, N, V, Vp, train ? dloss : 0.0f, NULL, 0);
        crossentropy_forward(loss16, lse16, NULL, x16, targets, N, V, Vp, train ? dloss : 0.0f, scratch, threads);
        cr_assert_eq(memcmp(loss16, loss32, N * sizeof(float)), 0, "%s: losses differ from the fp32 form", form);
        cr_assert_eq(memcmp(lse16, lse32, N * sizeof(float)), 0, "%s: lse differs from the fp32 form", form);
        if (!train) { cr_assert_eq(memcmp(x16, before, n * sizeof(bf16)), 0, "eval: the logits were written"); }
    }
    for (size_t i = 0; i < n; i++) {  // logits: the fp32 dlogits now
        bf16 want = bf16_from_float(logits[i]);
        cr_assert_eq(x16[i], want, "dlogit (%zu, %zu): 0x%04x, the fp32 one rounds to 0x%04x", i / Vp, i % Vp, x16[i],
                     want);
    }
    free(logits); free(targets); free(x16); free(before); free(loss32); free(lse32); free(loss16); free(lse16);
    free(scratch);
}

// In bf16 the kept tensors have half their fp32 size: a forward at another shape (text, fp32) fits when it has
// at most half the allocated rows, and gives the fp32 model's logits bit for bit; back in fp32 the arena is
// whole again and the allocated shape's forward is the fp32 model's, bit for bit
Test(bf16_activations, the_kept_tensors_at_half_size_hold_an_fp32_forward_of_half_the_rows) {
    if (!bf16_ready()) { return; }
    int B = 4, T = 32, V = 300;
    GPT2 f, h;
    gpt2_build_from_random(&f, 2, V, 21);
    gpt2_build_from_random(&h, 2, V, 21);
    gpt2_allocate(&f, B, T);
    gpt2_allocate(&h, B, T);
    size_t whole = f.num_activations;
    gpt2_set_precision(&h, 1);
    cr_assert_lt(h.num_activations, whole, "bf16's arena is not smaller");
    int x[4 * 32];
    for (int i = 0; i < B * T; i++) { x[i] = (i * 37 + 11) % V; }
    size_t Vp = f.config.padded_vocab_size;
    int shapes[2][2] = {{1, T}, {2, 16}};  // 1 x 32 and 2 x 16: a quarter of the rows
    for (int k = 0; k < 2; k++) {
        int b = shapes[k][0], t = shapes[k][1];
        gpt2_forward(&h, x, NULL, B, T);  // the kept tensors in bf16 first, as in training
        gpt2_forward(&f, x, NULL, b, t);
        gpt2_forward(&h, x, NULL, b, t);
        cr_assert_eq(memcmp(f.acts.logits, h.acts.logits, (size_t)b * t * Vp * sizeof(float)), 0,
                     "fp32 forward at %dx%d in a bf16 model: logits differ", b, t);
    }
    gpt2_set_precision(&h, 0);
    cr_assert_eq(h.num_activations, whole);
    gpt2_forward(&f, x, NULL, B, T);
    gpt2_forward(&h, x, NULL, B, T);
    cr_assert_eq(memcmp(f.acts.logits, h.acts.logits, (size_t)B * T * Vp * sizeof(float)), 0,
                 "back in fp32: logits differ at the allocated shape");
    gpt2_free(&f);
    gpt2_free(&h);
}

// more than half the rows at another shape do not fit: an error, not a write past the arena. In a child
// (run_fn), so that the test skips where there is no bf16 (a skip is no exit status the test could expect)
static void forward_more_than_half_the_rows(void* unused) {
    (void)unused;
    GPT2 h;
    gpt2_build_from_random(&h, 1, 300, 22);
    gpt2_allocate(&h, 4, 32);
    gpt2_set_precision(&h, 1);
    int x[3 * 32];
    for (int i = 0; i < 3 * 32; i++) { x[i] = i % 300; }
    gpt2_forward(&h, x, NULL, 3, 32);
}
Test(bf16_activations, a_forward_of_more_than_half_the_rows_at_another_shape_exits) {
    if (!bf16_ready()) { return; }
    RunResult r = run_fn(forward_more_than_half_the_rows, NULL);
    cr_assert(r.exited && r.status == 1, "exited %d status %d: %s", r.exited, r.status, r.err);
    cr_assert(strstr(r.err, "needs at most half") != NULL && count_program_lines(r.err) == 1, "%s", r.err);
}

Test(bf16_matmul, rounding_is_to_nearest_even_and_keeps_nan_inf) {
    cr_assert_eq(bf16_from_float(1.0f), 0x3f80);
    cr_assert_eq(bf16_from_float(1.0f + 1.0f / 256), 0x3f80);           // halfway: to even (down)
    cr_assert_eq(bf16_from_float(1.0f + 3.0f / 256), 0x3f82);           // halfway: to even (up)
    cr_assert_eq(bf16_from_float(1.0f + 1.0f / 256 + 1.0f / 65536), 0x3f81); // past halfway: up
    cr_assert_eq(bf16_from_float(INFINITY), 0x7f80);
    cr_assert_eq(bf16_from_float(-INFINITY), 0xff80);
    cr_assert(isnan(bf16_to_float(bf16_from_float(NAN))));
    uint32_t halfway_to_inf = 0x7f7f8000u;  // between the largest finite bf16 (odd) and Inf: to even is Inf
    float h;
    memcpy(&h, &halfway_to_inf, 4);
    cr_assert_eq(bf16_from_float(h), 0x7f80);
}

// ---- the trainer (./train_gpt2) in bf16 ----

static char dir[256], flags[2048];

static void setup(void) {
    make_temp_dir(dir, sizeof(dir));
    char path[512];
    join_path(path, sizeof(path), dir, "train_000000.bin");
    write_learnable_shard(path, 4000, 256, 10);
    join_path(path, sizeof(path), dir, "val_000000.bin");
    write_learnable_shard(path, 2000, 256, 99);
    snprintf(flags, sizeof(flags), "./train_gpt2 -i %s/train_*.bin -j %s/val_*.bin -e d1 -b 4 -t 32 -d 256 "
             "-l 3e-3 -u 3 -q 0.1 -c 0.1 -v 4 -m 3 -s 0", dir, dir);
}
static void teardown(void) { rm_rf(dir); }
TestSuite(bf16_train, .init = setup, .fini = teardown);

// no_bf16: the trainer runs as on a CPU without bf16 (LLMC_BF16_TEST_NO_BF16=1 in its environment)
static RunResult train_env(int no_bf16, const char* extra, const char* out_dir) {
    char cmd[4096], log[600];
    snprintf(cmd, sizeof(cmd), "%s %s -o %s", flags, extra, out_dir);
    snprintf(log, sizeof(log), "%s.stdout", out_dir);
    if (no_bf16) { setenv("LLMC_BF16_TEST_NO_BF16", "1", 1); }
    RunResult r = run_cmd(cmd, log);
    unsetenv("LLMC_BF16_TEST_NO_BF16");
    return r;
}
static void train_ok(int no_bf16, const char* extra, const char* out_dir) {
    RunResult r = train_env(no_bf16, extra, out_dir);
    cr_assert(r.exited && r.status == 0, "%s failed (%d): %s", extra, r.status, r.err);
}

static char* stdout_of(const char* out_dir) {
    char path[600];
    snprintf(path, sizeof(path), "%s.stdout", out_dir);
    char* t = read_text(path);
    cr_assert_not_null(t, "no %s", path);
    return t;
}

static double loss_at(const char* metrics, int step) {
    char key[64];
    snprintf(key, sizeof(key), "\"step\": %d,", step);
    const char* p = strstr(metrics, key);
    cr_assert_not_null(p, "no step %d", step);
    double x;
    cr_assert_eq(sscanf(strstr(p, "\"loss\": ") + 8, "%lf", &x), 1);
    return x;
}

Test(bf16_train, same_flags_give_identical_bf16_runs_close_to_fp32) {
    if (!bf16_ready()) { return; }
    char a[512], b[512], c[512];
    join_path(a, sizeof(a), dir, "bf16_a");
    join_path(b, sizeof(b), dir, "bf16_b");
    join_path(c, sizeof(c), dir, "fp32");
    train_ok(0, "-x 8 --precision bf16", a);
    train_ok(0, "-x 8 --precision bf16", b);
    train_ok(0, "-x 8 --precision fp32", c);
    char* ma = metrics_without_times(a);
    char* mb = metrics_without_times(b);
    char* mc = metrics_without_times(c);
    cr_assert_str_eq(ma, mb, "two bf16 runs with the same flags differ");
    cr_assert_str_neq(ma, mc, "bf16 and fp32 runs are identical: bf16 is not in use");
    for (int s = 1; s <= 8; s++) {  // the same training, to bf16's precision
        double l16 = loss_at(ma, s), l32 = loss_at(mc, s);
        cr_assert_lt(fabs(l16 - l32), 0.02 * l32, "step %d: bf16 loss %f vs fp32 %f", s, l16, l32);
    }
    char* out = stdout_of(a);
    cr_assert_not_null(strstr(out, "| precision            | bf16 (asked"), "the config table names bf16");
    free(ma); free(mb); free(mc); free(out);
}

Test(bf16_train, resume_from_a_middle_checkpoint_is_bit_exact) {
    if (!bf16_ready()) { return; }
    char a[512], b[512], path[700];
    join_path(a, sizeof(a), dir, "straight");
    join_path(b, sizeof(b), dir, "resumed");
    train_ok(0, "-x 12 -n 6 --precision bf16", a);
    train_ok(0, "-x 12 -n 6 --precision bf16", b);
    join_path(path, sizeof(path), b, "DONE_00000012");
    cr_assert_eq(unlink(path), 0);
    train_ok(0, "-x 12 -n 6 -y 1 --precision bf16", b);  // redoes steps 7..12 from the checkpoint at 6
    char* ma = metrics_without_times(a);
    char* mb = metrics_without_times(b);
    cr_assert_eq(count_lines(ma), 13, "step 0 (val) + 12 steps");
    cr_assert_str_eq(ma, mb);
    char pa[700], pb[700];
    join_path(pa, sizeof(pa), a, "model_00000012.bin");
    join_path(pb, sizeof(pb), b, "model_00000012.bin");
    char* x = read_text(pa);
    char* y = read_text(pb);
    cr_assert(x != NULL && y != NULL);
    FILE* f = fopen(pa, "rb"); fseek(f, 0, SEEK_END); long n = ftell(f); fclose(f);
    cr_assert_eq(memcmp(x, y, (size_t)n), 0, "the final weights differ");
    free(ma); free(mb); free(x); free(y);
}

Test(bf16_train, resume_with_another_precision_is_refused) {
    if (!bf16_ready()) { return; }
    char a[512];
    join_path(a, sizeof(a), dir, "switch");
    train_ok(0, "-x 12 -n 6 --precision bf16", a);
    char path[700];
    join_path(path, sizeof(path), a, "DONE_00000012");
    cr_assert_eq(unlink(path), 0);
    RunResult r = train_env(0, "-x 12 -n 6 -y 1 --precision fp32", a);
    cr_assert(r.exited && r.status != 0, "a resume in fp32 of a bf16 run was accepted");
    cr_assert_not_null(strstr(r.err, "flag --precision: fp32 differs from the checkpoint's bf16"), "%s", r.err);
    train_ok(0, "-x 12 -n 6 -y 1 --precision fp32 --allow-changed 1", a);
}

// where the CPU multiplies bf16 natively (and oneDNN is built in) and the probe says bf16 (the tests pin its
// answer: trainer_test_util.h; under the test reference auto is bf16 without it), auto is bf16: bit for bit the
// run that --precision bf16 gives, and the config table says it chose it
Test(bf16_train, auto_is_bf16_where_native) {
    if (!bf16_ready()) { return; }
    char a[512], b[512];
    join_path(a, sizeof(a), dir, "auto");
    join_path(b, sizeof(b), dir, "asked");
    train_ok(0, "-x 6", a);
    train_ok(0, "-x 6 --precision bf16", b);
    char* ma = metrics_without_times(a);
    char* mb = metrics_without_times(b);
    cr_assert_str_eq(ma, mb, "auto on a CPU with bf16 differs from --precision bf16");
    char* out = stdout_of(a);
    cr_assert_not_null(strstr(out, "| precision            | bf16 (auto: "), "the config table says why bf16");
    free(ma); free(mb); free(out);
}

// a CPU without bf16 (forced): auto is fp32, bit for bit the same run as --precision fp32, and asking for
// bf16 is one line naming what is missing. Runs everywhere (nothing here needs bf16).
Test(bf16_train, without_bf16_nothing_changes) {
    char a[512], b[512], c[512];
    join_path(a, sizeof(a), dir, "nobf16_auto");
    join_path(b, sizeof(b), dir, "fp32");
    join_path(c, sizeof(c), dir, "nobf16_asked");
    train_ok(1, "-x 6", a);
    train_ok(0, "-x 6 --precision fp32", b);
    char* ma = metrics_without_times(a);
    char* mb = metrics_without_times(b);
    cr_assert_str_eq(ma, mb, "auto on a CPU without bf16 differs from fp32");
    char* out = stdout_of(a);
    cr_assert_not_null(strstr(out, "| precision            | fp32 (auto: the CPU has no native bf16)"),
                       "the config table says why fp32");
    RunResult r = train_env(1, "-x 6 --precision bf16", c);
    cr_assert(r.exited && r.status == 1, "--precision bf16 without bf16 must fail, got %d", r.status);
    const char* why = dnnl_available() ? "flag --precision bf16: this CPU has no native bf16 dot products"
                                       : "flag --precision bf16: this build has no oneDNN";
    cr_assert_not_null(strstr(r.err, why), "%s", r.err);
    cr_assert_eq(count_program_lines(r.err), 1, "one line: %s", r.err);
    free(ma); free(mb); free(out);
}
