/*
 * test/test_gradcheck.c — finite-difference checks of every backward pass of train_gpt2.c.
 * Each layer: a fixed random projection w of its output gives the scalar f = sum_i w_i * out_i, accumulated
 * in double; the layer's backward with dout = w must give df/dinput. Each gradient is checked at sampled
 * coordinates (the 8 largest |grad| and 16 random ones) and along the gradient's own direction, by centred
 * differences f(x + h e) - f(x - h e) over the actually representable step (x+h) - (x-h). A coordinate
 * perturbation changes few outputs and the unchanged ones cancel exactly, so fp32 forward passes are enough.
 * Pass: |fd - grad| <= RTOL * |grad| + ATOL * max|grad| at every sampled coordinate, and relative error
 * <= RTOL along the gradient direction. RTOL, ATOL: 1e-4, 1e-5 for the linear maps (encoder, matmul, residual,
 * layernorm weight and bias); 1e-3, 5e-5 through the nonlinear ones (layernorm input, attention, GELU,
 * softmax-cross-entropy); 5e-3, 5e-4 for the whole model, whose loss is fp32 (h = 1e-2 throughout).
 * The residual add is fused into matmul_forward_fp32 and checked there. Then the whole model: a tiny GPT-2 (V=64 padded to 128, L=2, NH=2, C=16, T=8, B=2, weights large enough
 * that every nonlinearity matters), each of the 16 parameter tensors, f = the mean loss.
 */
#define TESTING
#include "../train_gpt2.c"
#include <criterion/criterion.h>
#include <math.h>

#define N_TOP 8
#define N_RANDOM 16

typedef double (*ScalarFn)(void* ctx);

static uint64_t test_rng = 0x1234567ull;

static float randn(void) {
    float u1 = 1.0f - random_f32(&test_rng), u2 = random_f32(&test_rng);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

static void fill_randn(float* a, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i++) { a[i] = mean + std * randn(); }
}

static float* randn_alloc(size_t n, float mean, float std) {
    float* a = (float*)mallocCheck(n * sizeof(float));
    fill_randn(a, n, mean, std);
    return a;
}

static float* zeros(size_t n) { return (float*)callocCheck(n, sizeof(float)); }

// sum_i w_i * out_i in double
static double project(const float* out, const float* w, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) { s += (double)w[i] * out[i]; }
    return s;
}

// centred difference of f along coordinate i of x (restored afterwards)
static double fd_coord(float* x, size_t i, float h, ScalarFn f, void* ctx) {
    float x0 = x[i];
    float xp = x0 + h, xm = x0 - h;
    x[i] = xp; double fp = f(ctx);
    x[i] = xm; double fm = f(ctx);
    x[i] = x0;
    return (fp - fm) / ((double)xp - (double)xm);
}

// checks grad (n) of f with respect to x (n); returns the worst err / (RTOL|g| + ATOL gmax) (pass <= 1)
static double check_input(const char* layer, const char* input, float* x, const float* grad, size_t n,
                          float h, double rtol, double atol, ScalarFn f, void* ctx) {
    double gmax = 0.0, gnorm2 = 0.0;
    for (size_t i = 0; i < n; i++) { gmax = fmax(gmax, fabs(grad[i])); gnorm2 += (double)grad[i] * grad[i]; }
    cr_assert(gmax > 0.0 && isfinite(gnorm2), "%s/%s: gradient is zero or not finite", layer, input);
    double worst = 0.0, worst_fd = 0.0, worst_an = 0.0;
    size_t worst_i = 0;
    // coordinates: the N_TOP largest |grad| (selection by repeated scan, n is small) then random ones
    size_t picked[N_TOP + N_RANDOM];
    int np = 0;
    for (int k = 0; k < N_TOP && k < (int)n; k++) {
        size_t best = 0; double bv = -1.0;
        for (size_t i = 0; i < n; i++) {
            int seen = 0;
            for (int j = 0; j < np; j++) { seen |= picked[j] == i; }
            if (!seen && fabs(grad[i]) > bv) { bv = fabs(grad[i]); best = i; }
        }
        picked[np++] = best;
    }
    for (int k = 0; k < N_RANDOM; k++) { picked[np++] = random_u32(&test_rng) % n; }
    for (int k = 0; k < np; k++) {
        size_t i = picked[k];
        double fd = fd_coord(x, i, h, f, ctx);
        double err = fabs(fd - grad[i]) / (rtol * fabs(grad[i]) + atol * gmax);
        if (!(err <= worst)) { worst = err; worst_fd = fd; worst_an = grad[i]; worst_i = i; }
    }
    // along the gradient direction: f(x + h g/|g|) - f(x - h g/|g|) ~ 2h |g|, using the stored steps
    float* x0 = (float*)mallocCheck(n * sizeof(float));
    memcpy(x0, x, n * sizeof(float));
    double gnorm = sqrt(gnorm2), dot = 0.0;
    for (size_t i = 0; i < n; i++) { x[i] = x0[i] + h * (float)(grad[i] / gnorm); }
    double fp = f(ctx);
    for (size_t i = 0; i < n; i++) { dot += grad[i] * ((double)x[i] - x0[i]); x[i] = x0[i] - h * (float)(grad[i] / gnorm); }
    double fm = f(ctx);
    for (size_t i = 0; i < n; i++) { dot -= grad[i] * ((double)x[i] - x0[i]); }
    memcpy(x, x0, n * sizeof(float));
    free(x0);
    double dir_err = fabs((fp - fm) - dot) / fabs(dot);  // relative error of the directional derivative
    fprintf(stderr, "%-10s %-8s n=%-6zu max|g| %.3e  coord worst %.3f of tol (i=%zu fd %.6e an %.6e)  "
            "direction rel err %.2e\n", layer, input, n, gmax, worst, worst_i, worst_fd, worst_an, dir_err);
    cr_expect_leq(worst, 1.0, "%s/%s: coordinate %zu: finite difference %.7e, backward %.7e (rtol %.0e, atol %.0e*%.3e)",
                  layer, input, worst_i, worst_fd, worst_an, rtol, atol, gmax);
    cr_expect_leq(dir_err, rtol, "%s/%s: directional derivative rel err %.3e > %.0e", layer, input, dir_err, rtol);
    return worst;
}

// ----------------------------------------------------------------------------
// layers (B=2, T=5, C=8 unless noted)

enum { B_ = 2, T_ = 5, C_ = 8, NH_ = 2, OC_ = 12, V_ = 11, VP_ = 16, N_ = B_ * T_ };

typedef struct {
    float *out, *w, *a, *b, *c, *d;   // output, projection, up to four float inputs
    float *s1, *s2;                   // saved statistics
    int* tok;                         // token inputs
    size_t nout;
} Ctx;

// encoder: out[b,t,:] = wte[tok[b,t],:] + wpe[t,:]
static double encoder_f(void* p) {
    Ctx* c = (Ctx*)p;
    encoder_forward(c->out, c->tok, c->a, c->b, B_, T_, C_);
    return project(c->out, c->w, c->nout);
}

Test(gradcheck, encoder) {
    Ctx c = {0};
    int tok[N_] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};  // repeated ids: the backward must accumulate
    c.tok = tok; c.nout = N_ * C_;
    c.out = zeros(c.nout); c.w = randn_alloc(c.nout, 0, 1);
    c.a = randn_alloc(V_ * C_, 0, 1); c.b = randn_alloc(T_ * C_, 0, 1);
    float *dwte = zeros(V_ * C_), *dwpe = zeros(T_ * C_);
    encoder_backward(dwte, dwpe, c.w, tok, B_, T_, C_);
    for (int i = 0; i < C_; i++) { cr_assert_eq(dwte[0 * C_ + i], 0.0f, "unused token row 0 got a gradient"); }
    check_input("encoder", "wte", c.a, dwte, V_ * C_, 1e-2f, 1e-4, 1e-5, encoder_f, &c);
    check_input("encoder", "wpe", c.b, dwpe, T_ * C_, 1e-2f, 1e-4, 1e-5, encoder_f, &c);
}

// layernorm over C with weight and bias, N = B*T rows
static double layernorm_f(void* p) {
    Ctx* c = (Ctx*)p;
    layernorm_forward(c->out, NULL, c->s1, c->s2, c->a, c->b, c->c, N_, C_);
    return project(c->out, c->w, c->nout);
}

Test(gradcheck, layernorm) {
    Ctx c = {0};
    c.nout = N_ * C_;
    c.out = zeros(c.nout); c.w = randn_alloc(c.nout, 0, 1);
    c.a = randn_alloc(c.nout, 0.5f, 2.0f); c.b = randn_alloc(C_, 1, 0.3f); c.c = randn_alloc(C_, 0, 0.3f);
    c.s1 = zeros(N_); c.s2 = zeros(N_);
    float *dinp = zeros(c.nout), *dw = zeros(C_), *db = zeros(C_);
    layernorm_f(&c);
    layernorm_backward(dinp, dw, db, c.w, c.a, c.b, c.s1, c.s2, N_, C_);
    check_input("layernorm", "inp", c.a, dinp, c.nout, 1e-2f, 1e-3, 5e-5, layernorm_f, &c);
    check_input("layernorm", "weight", c.b, dw, C_, 1e-2f, 1e-4, 1e-5, layernorm_f, &c);
    check_input("layernorm", "bias", c.c, db, C_, 1e-2f, 1e-4, 1e-5, layernorm_f, &c);
}

// matmul: out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC) + residual (N,OC); the residual's gradient
// is dout itself (the trainer's residual connections are this fused add)
static double matmul_f(void* p) {
    Ctx* c = (Ctx*)p;
    matmul_forward_fp32(c->out, c->a, c->b, c->c, c->d, N_, C_, OC_);
    return project(c->out, c->w, c->nout);
}

Test(gradcheck, matmul_and_residual) {
    Ctx c = {0};
    c.nout = N_ * OC_;
    c.out = zeros(c.nout); c.w = randn_alloc(c.nout, 0, 1);
    c.a = randn_alloc(N_ * C_, 0, 1); c.b = randn_alloc(OC_ * C_, 0, 1); c.c = randn_alloc(OC_, 0, 1);
    c.d = randn_alloc(c.nout, 0, 1);
    float *dinp = zeros(N_ * C_), *dw = zeros(OC_ * C_), *db = zeros(OC_);
    matmul_backward_fp32(dinp, dw, db, c.w, c.a, c.b, N_, C_, OC_);
    check_input("matmul", "inp", c.a, dinp, N_ * C_, 1e-2f, 1e-4, 1e-5, matmul_f, &c);
    check_input("matmul", "weight", c.b, dw, OC_ * C_, 1e-2f, 1e-4, 1e-5, matmul_f, &c);
    check_input("matmul", "bias", c.c, db, OC_, 1e-2f, 1e-4, 1e-5, matmul_f, &c);
    check_input("residual", "inp", c.d, c.w, c.nout, 1e-2f, 1e-4, 1e-5, matmul_f, &c);
    c.d = NULL;  // without the residual the output is the plain matmul
    float* plain = zeros(c.nout);
    matmul_forward_fp32(plain, c.a, c.b, c.c, NULL, N_, C_, OC_);
    double s = 0.0;
    for (int n = 0; n < N_; n++) {
        for (int o = 0; o < OC_; o++) {
            double acc = c.c[o];
            for (int i = 0; i < C_; i++) { acc += (double)c.a[n * C_ + i] * c.b[o * C_ + i]; }
            s = fmax(s, fabs(acc - plain[n * OC_ + o]));
        }
    }
    cr_expect_leq(s, 1e-5, "matmul without residual: max err %.3e against a double loop", s);
}

// causal self-attention: qkv (B,T,3C) -> out (B,T,C)
static double attention_f(void* p) {
    Ctx* c = (Ctx*)p;
    attention_forward_fp32(c->out, c->s1, c->a, B_, T_, C_, NH_);
    return project(c->out, c->w, c->nout);
}

Test(gradcheck, attention) {
    Ctx c = {0};
    c.nout = N_ * C_;
    c.out = zeros(c.nout); c.w = randn_alloc(c.nout, 0, 1);
    c.a = randn_alloc(N_ * 3 * C_, 0, 1);
    c.s1 = zeros(B_ * NH_ * T_ * T_);
    float *dqkv = zeros(N_ * 3 * C_), *scratch = zeros((size_t)omp_get_max_threads() * T_ * T_);
    attention_f(&c);
    attention_backward_fp32(dqkv, scratch, c.w, c.a, c.s1, B_, T_, C_, NH_);
    check_input("attention", "qkv", c.a, dqkv, N_ * 3 * C_, 1e-2f, 1e-3, 5e-5, attention_f, &c);
}

// The blocked causal attention (ATT_BLOCK rows or columns at a time) against a plain double-precision
// forward and backward, at a T that spans several blocks and ends in a partial one. Tolerance: fp32
// accumulation over T terms of order 1 (|q.k| <= hs with entries in [-1, 1]): 1e-5 relative to the largest
// |value| of each output.
static void attention_reference(double* out, double* dqkv, const float* qkv, const float* dout, int B, int T, int C,
                                int NH) {
    int C3 = 3 * C, hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    double *p = (double*)mallocCheck((size_t)T * sizeof(double)), *dp = (double*)mallocCheck((size_t)T * sizeof(double));
    memset(dqkv, 0, (size_t)B * T * C3 * sizeof(double));
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float* q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                double mx = -1e300, sum = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
                    double s = 0.0;
                    for (int i = 0; i < hs; i++) { s += (double)q[i] * k[i]; }
                    p[t2] = s * scale;
                    mx = fmax(mx, p[t2]);
                }
                for (int t2 = 0; t2 <= t; t2++) { p[t2] = exp(p[t2] - mx); sum += p[t2]; }
                for (int t2 = 0; t2 <= t; t2++) { p[t2] /= sum; }
                const float* d = dout + ((size_t)b * T + t) * C + h * hs;
                double* o = out + ((size_t)b * T + t) * C + h * hs;
                double* dq = dqkv + ((size_t)b * T + t) * C3 + h * hs;
                double dsum = 0.0;
                for (int i = 0; i < hs; i++) { o[i] = 0.0; }
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    double* dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    dp[t2] = 0.0;
                    for (int i = 0; i < hs; i++) { o[i] += p[t2] * v[i]; dv[i] += p[t2] * d[i]; dp[t2] += (double)d[i] * v[i]; }
                    dsum += p[t2] * dp[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    double ds = p[t2] * (dp[t2] - dsum) * scale;
                    const float* k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
                    double* dk = dqkv + ((size_t)b * T + t2) * C3 + C + h * hs;
                    for (int i = 0; i < hs; i++) { dq[i] += ds * k[i]; dk[i] += ds * q[i]; }
                }
            }
        }
    }
    free(p);
    free(dp);
}

static double max_rel_err(const float* got, const double* want, size_t n) {
    double mx = 0.0, err = 0.0;
    for (size_t i = 0; i < n; i++) { mx = fmax(mx, fabs(want[i])); }
    for (size_t i = 0; i < n; i++) { err = fmax(err, fabs(got[i] - want[i])); }
    return err / mx;
}

Test(gradcheck, attention_blocks) {
    enum { B = 2, T = 3 * ATT_BLOCK + 7, C = 32, NH = 2 };
    size_t n3 = (size_t)B * T * 3 * C, n = (size_t)B * T * C;
    float* qkv = zeros(n3);
    for (size_t i = 0; i < n3; i++) { qkv[i] = 2.0f * random_f32(&test_rng) - 1.0f; }
    float *dout = randn_alloc(n, 0, 1), *out = zeros(n), *att = zeros((size_t)B * NH * T * T);
    float *dqkv = zeros(n3), *scratch = zeros((size_t)omp_get_max_threads() * T * T);
    double *out_ref = (double*)mallocCheck(n * sizeof(double)), *dqkv_ref = (double*)mallocCheck(n3 * sizeof(double));
    attention_forward_fp32(out, att, qkv, B, T, C, NH);
    for (int bh = 0; bh < B * NH; bh++) {  // probabilities exactly zero above the diagonal
        for (int t = 0; t < T; t++) {
            for (int t2 = t + 1; t2 < T; t2++) { cr_assert_eq(att[((size_t)bh * T + t) * T + t2], 0.0f, "att above the diagonal"); }
        }
    }
    attention_backward_fp32(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    attention_reference(out_ref, dqkv_ref, qkv, dout, B, T, C, NH);
    double e_out = max_rel_err(out, out_ref, n), e_d = max_rel_err(dqkv, dqkv_ref, n3);
    fprintf(stderr, "attention T=%d (blocks of %d): forward rel err %.2e, backward %.2e\n", T, ATT_BLOCK, e_out, e_d);
    cr_expect_leq(e_out, 1e-5, "blocked attention forward: rel err %.3e against double", e_out);
    cr_expect_leq(e_d, 1e-5, "blocked attention backward: rel err %.3e against double", e_d);
}

// tanh GELU, elementwise
static double gelu_f(void* p) {
    Ctx* c = (Ctx*)p;
    gelu_forward(c->out, NULL, c->a, c->nout);
    return project(c->out, c->w, c->nout);
}

Test(gradcheck, gelu) {
    Ctx c = {0};
    c.nout = 64;
    c.out = zeros(c.nout); c.w = randn_alloc(c.nout, 0, 1);
    c.a = randn_alloc(c.nout, 0, 2);
    float* d = zeros(c.nout);
    memcpy(d, c.w, c.nout * sizeof(float));
    gelu_backward_inplace(d, c.a, c.nout);
    check_input("gelu", "inp", c.a, d, c.nout, 1e-2f, 1e-3, 5e-5, gelu_f, &c);
}

// softmax over the first V of Vp logits + cross-entropy; f = mean loss over N rows
static double softmax_ce_f(void* p) {
    Ctx* c = (Ctx*)p;
    crossentropy_forward(c->out, c->s1, c->a, NULL, c->tok, N_, V_, VP_, 0.0f, NULL, 0);
    double s = 0.0;
    for (int i = 0; i < N_; i++) { s += c->out[i]; }
    return s / N_;
}

Test(gradcheck, softmax_crossentropy) {
    Ctx c = {0};
    int tok[N_] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 10};
    c.tok = tok;
    c.out = zeros(N_); c.s1 = zeros(N_);
    c.a = randn_alloc(N_ * VP_, 0, 2);
    softmax_ce_f(&c);
    // the training form of the same call: the same losses, bit for bit, and the logits become dlogits
    float* dlogits = (float*)mallocCheck(N_ * VP_ * sizeof(float));
    memcpy(dlogits, c.a, N_ * VP_ * sizeof(float));
    float *losses2 = zeros(N_), *lse2 = zeros(N_);
    crossentropy_forward(losses2, lse2, dlogits, NULL, tok, N_, V_, VP_, 1.0f / N_, NULL, 0);
    cr_assert_eq(memcmp(losses2, c.out, N_ * sizeof(float)), 0, "training cross-entropy: losses differ from the eval form");
    cr_assert_eq(memcmp(lse2, c.s1, N_ * sizeof(float)), 0, "training cross-entropy: lse differs from the eval form");
    for (int i = 0; i < N_; i++) {
        for (int v = V_; v < VP_; v++) { cr_assert_eq(dlogits[i * VP_ + v], 0.0f, "padded dlogit (%d,%d) != 0", i, v); }
    }
    check_input("softmax_ce", "logits", c.a, dlogits, N_ * VP_, 1e-2f, 1e-3, 5e-5, softmax_ce_f, &c);
}

// ----------------------------------------------------------------------------
// the whole model: a tiny checkpoint written here, loaded through the trainer's own reader

#define TINY_PATH "build/gradcheck_tiny.bin"
enum { TV = 64, TVP = 128, TL = 2, TNH = 2, TC = 16, TMAXT = 8, TB = 2, TT = 8 };

static void write_tiny_checkpoint(void) {
    size_t sizes[16] = {TVP * TC, TMAXT * TC, TL * TC, TL * TC, TL * 3 * TC * TC, TL * 3 * TC, TL * TC * TC, TL * TC,
                        TL * TC, TL * TC, TL * 4 * TC * TC, TL * 4 * TC, TL * TC * 4 * TC, TL * TC, TC, TC};
    int header[256] = {20240326, 3, TMAXT, TV, TL, TNH, TC, TVP};
    FILE* fp = fopenCheck(TINY_PATH, "wb");
    fwriteCheck(header, sizeof(int), 256, fp, TINY_PATH);
    for (int t = 0; t < 16; t++) {
        float* p = (float*)mallocCheck(sizes[t] * sizeof(float));
        int ln_weight = t == 2 || t == 8 || t == 14, bias = t == 3 || t == 5 || t == 7 || t == 9 || t == 11 ||
                        t == 13 || t == 15;
        // weights ~ N(0, 0.3) (0.5 for the embeddings): logits of order 1, attention far from uniform
        fill_randn(p, sizes[t], ln_weight ? 1.0f : 0.0f, ln_weight || bias ? 0.2f : (t <= 1 ? 0.5f : 0.3f));
        if (t == 0) { memset(p + TV * TC, 0, (TVP - TV) * TC * sizeof(float)); }  // padded rows are zero
        fwriteCheck(p, sizeof(float), sizes[t], fp, TINY_PATH);
        free(p);
    }
    fcloseCheck(fp, TINY_PATH);
}

typedef struct { GPT2* model; int* x; int* y; } ModelCtx;

static double model_f(void* p) {
    ModelCtx* c = (ModelCtx*)p;
    gpt2_forward(c->model, c->x, c->y, TB, TT);
    return c->model->mean_loss;
}

Test(gradcheck, whole_model_every_parameter_tensor) {
    static const char* names[16] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    write_tiny_checkpoint();
    GPT2 model;
    gpt2_build_from_checkpoint(&model, TINY_PATH);
    gpt2_allocate(&model, TB, TT);
    int x[TB * TT], y[TB * TT];
    for (int i = 0; i < TB * TT; i++) { x[i] = random_u32(&test_rng) % TV; y[i] = random_u32(&test_rng) % TV; }
    ModelCtx c = {&model, x, y};
    model_f(&c);
    gpt2_zero_grad(&model);
    gpt2_backward(&model, x, y, 1.0f);
    float* grads = (float*)mallocCheck(model.num_parameters * sizeof(float));
    memcpy(grads, model.grads_memory, model.num_parameters * sizeof(float));
    fprintf(stderr, "tiny model loss %.6f\n", model.mean_loss);
    size_t off = 0;
    for (int t = 0; t < 16; t++) {
        size_t n = model.param_sizes[t];
        size_t live = t == 0 ? (size_t)TV * TC : n;  // padded wte rows: zero gradient, checked below
        check_input("model", names[t], model.params_memory + off, grads + off, live, 1e-2f, 5e-3, 5e-4, model_f, &c);
        off += n;
    }
    for (size_t i = (size_t)TV * TC; i < (size_t)TVP * TC; i++) {
        cr_assert_eq(grads[i], 0.0f, "gradient of padded wte element %zu is %g, not 0", i, grads[i]);
    }
    free(grads);
    gpt2_free(&model);
}
