// hybrid/apply.h alone: Predict steps add exactly fl(c * d) per element along the drift, and rollback
// restores the pre-Predict parameters bit-exactly; the fused AdamW + drift + look-ahead pass updates exactly
// as the plain AdamW loop followed by a plainly written drift and look-ahead loop, and sums its statistics
// as a plain loop does; hybrid/lookahead.h's window, cap and back-off.
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <omp.h>
#include "hybrid/apply.h"
#include "hybrid/lookahead.h"
#include "llmc/rand.h"

#define NB 5
static const size_t sizes[NB] = {7, 1000, 70001, 3, 4099}; // tails that are no multiple of a vector; a block < APPLY_CHUNKS

static uint32_t ordered(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x80000000u) ? 0x80000000u - (u & 0x7fffffffu) : 0x80000000u + u;
}
static uint32_t ulp_diff(float a, float b) { uint32_t x = ordered(a), y = ordered(b); return x > y ? x - y : y - x; }

// parameters of every kind a trained net holds: ordinary weights, exact zeros (biases), tiny
// values next to large updates (where float addition loses the low bits), LayerNorm-like ~1
static float param_value(uint64_t* rng, size_t i) {
    switch (i % 5) {
        case 0: return 0.02f * random_normal(rng);
        case 1: return 0.0f;
        case 2: return 1e-9f * random_normal(rng);
        case 3: return 1.0f + 0.1f * random_normal(rng);
        default: return 3.0f * random_normal(rng);
    }
}

static void setup(size_t* off, float** params, float** d, float** m, float** v, uint64_t* rng) {
    off[0] = 0;
    for (int b = 0; b < NB; b++) { off[b + 1] = off[b] + sizes[b]; }
    size_t P = off[NB];
    *params = malloc(P * 4); *d = malloc(P * 4); *m = malloc(P * 4); *v = malloc(P * 4);
    for (size_t i = 0; i < P; i++) {
        (*params)[i] = param_value(rng, i);
        (*d)[i] = (i % 7 == 0) ? 0.0f : 3e-3f * random_normal(rng) * ((i % 3 == 0) ? 100.0f : 1.0f);
        (*m)[i] = 1e-3f * random_normal(rng);
        float s = 1e-3f * random_normal(rng);
        (*v)[i] = s * s + ((i % 11 == 0) ? 0.0f : 1e-12f);
    }
}

Test(apply, predict_adds_exactly_and_rollback_restores) {
    uint64_t rng = 1234;
    size_t off[NB + 1];
    float *params, *d, *m, *v;
    setup(off, &params, &d, &m, &v, &rng);
    size_t P = off[NB];
    float* before = malloc(P * 4);
    float* prev = malloc(P * 4);
    float* keep = malloc(P * 4);
    memcpy(before, params, P * 4);
    for (size_t i = 0; i < P; i++) { keep[i] = 12345.0f; } // garbage: the first step must overwrite it
    const int H = 16;
    float coefs[16 * NB];
    for (int k = 0; k < H; k++) {
        for (int b = 0; b < NB; b++) { coefs[k * NB + b] = 8.0f * (random_f32(&rng) - 0.3f); }
        memcpy(prev, params, P * 4);
        apply_predict(params, keep, d, off, NB, coefs + k * NB, k == 0);
        // exactly the predicted amount: theta_new = fl(theta + fl(c * d_i)), element by element
        for (int b = 0; b < NB; b++) {
            for (size_t i = off[b]; i < off[b + 1]; i++) {
                volatile float x = coefs[k * NB + b] * d[i];
                volatile float want = prev[i] + x;
                cr_assert(params[i] == want || (isnan(params[i]) && isnan(want)),
                          "step %d elem %zu: %a != %a", k, i, params[i], (float)want);
            }
        }
    }
    size_t moved = 0;
    for (size_t i = 0; i < P; i++) { moved += params[i] != before[i]; }
    cr_assert_gt(moved, P / 2, "the Predict steps must actually move the parameters");
    apply_rollback(params, keep, P);
    cr_assert(memcmp(params, before, P * 4) == 0, "rollback must restore the parameters bit for bit");
    free(params); free(d); free(m); free(v); free(before); free(prev); free(keep);
}

Test(apply, naive_reverse_subtraction_would_not_be_exact) {
    // why rollback keeps theta_0 instead of subtracting: tiny theta plus a large update loses its bits
    volatile float theta = 1e-9f, x = 1e-3f;
    volatile float s = theta + x;
    volatile float back = s - x;
    cr_assert_gt(ulp_diff(back, theta), 1);
}

// ----------------------------------------------------------------------------
// the fused AdamW + statistics pass against a plain reference: the trainer's AdamW loop (the
// original formula, as in train_gpt2.c's gpt2_update), then a separate loop for the statistics

static const float WD[NB] = {0.1f, 0.0f, 0.1f, 0.0f, 0.1f};

// the plain AdamW update of one block, written as train_gpt2.c writes it
static void reference_adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                            float eps, float wd, float grad_scale, int t) {
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    for (size_t i = 0; i < n; i++) {
        float grad = g[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * grad;
        float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    }
}

typedef struct { float *p, *g, *m, *v, *d; double stats[NB * 3]; } FusedState;

// gradients and state of a run some steps in
static void fused_state(FusedState* s, const size_t* off, uint64_t seed) {
    uint64_t rng = seed;
    float *p, *d, *m, *v;
    size_t tmp[NB + 1];
    setup(tmp, &p, &d, &m, &v, &rng);
    s->p = p; s->d = d; s->m = m; s->v = v;
    s->g = malloc(off[NB] * 4);
    for (size_t i = 0; i < off[NB]; i++) { s->g[i] = (i % 13 == 0) ? 0.0f : 0.05f * random_normal(&rng); }
}

// a short schedule's drift decay (172 steps: 0.942), not the long runs' 0.99
#define GAMMA (lookahead_default_gamma(172))

static void fused_free(FusedState* s) { free(s->p); free(s->g); free(s->m); free(s->v); free(s->d); }

static void fused_run(FusedState* s, const size_t* off, const ApplyAdamStep* st, const float* bp, const float* bn,
                      int threads) {
    double partial[NB * APPLY_CHUNKS * 3];
    omp_set_num_threads(threads);
    apply_adamw_lookahead(s->p, s->g, s->m, s->v, s->d, st, GAMMA, bp, bn, off, NB, partial, s->stats);
}

static void same_bits(const float* a, const float* b, size_t n, const char* what, int threads) {
    for (size_t i = 0; i < n; i++) {
        cr_assert(memcmp(a + i, b + i, 4) == 0, "%s[%zu] %a vs %a (%d threads)", what, i, a[i], b[i], threads);
    }
}

// the statistics the facade reads (<delta,d>, |d|^2, |delta|^2 per block, d before the pass) in one
// sequential double loop over the reference's states; mag: the sums of the terms' magnitudes
static void reference_stats(const float* p0, const float* p1, const float* d0, const size_t* off, double* stats,
                            double* mag) {
    for (int b = 0; b < NB; b++) {
        double dot = 0, dd = 0, uu = 0, adot = 0;
        for (size_t i = off[b]; i < off[b + 1]; i++) {
            float delta = p1[i] - p0[i];
            dot += (double)delta * d0[i]; adot += fabs((double)delta * d0[i]);
            dd += (double)d0[i] * d0[i];
            uu += (double)delta * delta;
        }
        stats[3 * b] = dot; stats[3 * b + 1] = dd; stats[3 * b + 2] = uu;
        mag[3 * b] = adot; mag[3 * b + 1] = dd; mag[3 * b + 2] = uu;
    }
}

// with no look-ahead (the drift's prefill) the fused pass is the plain AdamW loop, bit for bit, at any
// thread count; its statistics equal a sequential double loop to 1e-9 of the terms' magnitudes (summed in
// another, fixed order) and are the same bits at 1 and 2 threads (bit-exact resume needs that)
Test(apply, fused_adamw_equals_plain_adamw_then_statistics) {
    size_t off[NB + 1];
    off[0] = 0;
    for (int b = 0; b < NB; b++) { off[b + 1] = off[b] + sizes[b]; }
    const size_t P = off[NB];
    const ApplyAdamStep st = {0.9f, 0.95f, 1e-8f, WD, 9, 3e-4f, 0.7f, NULL, 0, NULL, 0.0f, 0.0f};
    const float zero[NB] = {0};
    static double one_thread[NB * 3];
    for (int threads = 1; threads <= 2; threads++) {
        FusedState ref, fused, again;
        fused_state(&ref, off, 77); fused_state(&fused, off, 77); fused_state(&again, off, 77);
        float *p0 = malloc(P * 4), *d0 = malloc(P * 4);
        memcpy(p0, ref.p, P * 4); memcpy(d0, ref.d, P * 4);
        for (int b = 0; b < NB; b++) {
            reference_adamw(ref.p + off[b], ref.g + off[b], ref.m + off[b], ref.v + off[b], sizes[b], st.lr, st.beta1,
                            st.beta2, st.eps, WD[b], st.grad_scale, st.t);
        }
        double mag[NB * 3];
        reference_stats(p0, ref.p, d0, off, ref.stats, mag);
        fused_run(&fused, off, &st, zero, zero, threads);
        same_bits(fused.p, ref.p, P, "params", threads);
        same_bits(fused.m, ref.m, P, "m", threads);
        same_bits(fused.v, ref.v, P, "v", threads);
        for (int k = 0; k < NB * 3; k++) {
            cr_assert(fabs(fused.stats[k] - ref.stats[k]) <= 1e-9 * mag[k], "stat %d (block %d): %.17g vs %.17g",
                      k % 3, k / 3, fused.stats[k], ref.stats[k]);
        }
        for (int b = 0; b < NB; b++) { cr_assert_gt(ref.stats[3 * b + 1], 0.0, "block %d: no drift", b); }
        fused_run(&again, off, &st, zero, zero, threads);
        same_bits(again.p, fused.p, P, "params (again)", threads);
        same_bits(again.d, fused.d, P, "drift (again)", threads);
        cr_assert(memcmp(again.stats, fused.stats, sizeof(fused.stats)) == 0, "statistics differ between two runs");
        if (threads == 1) { memcpy(one_thread, fused.stats, sizeof(one_thread)); }
        else { cr_assert(memcmp(one_thread, fused.stats, sizeof(one_thread)) == 0, "1 vs 2 threads: statistics differ"); }
        fused_free(&ref); fused_free(&fused); fused_free(&again);
        free(p0); free(d0);
    }
}

Test(apply, fused_statistics_match_double_precision_math) {
    // one block, independent math in double: <delta,d>, |d|^2, |delta|^2 and the drift's EMA (gamma 0.9)
    size_t off[2] = {0, 1000};
    float params[1000], p0[1000], d[1000], d0[1000], m[1000], m0[1000], v[1000], v0[1000], g[1000];
    uint64_t rng = 5;
    for (int i = 0; i < 1000; i++) {
        params[i] = p0[i] = 0.02f * random_normal(&rng); d[i] = d0[i] = 1e-3f * random_normal(&rng);
        m[i] = m0[i] = 1e-3f * random_normal(&rng); v[i] = v0[i] = 1e-6f * (1.0f + random_f32(&rng));
        g[i] = 1e-3f * random_normal(&rng);
    }
    const float wd = 0.1f;
    ApplyAdamStep st = {0.9f, 0.95f, 1e-8f, &wd, 10, 1e-4f, 1.0f, NULL, 0, NULL, 0.0f, 0.0f};
    double stats[3], partial[APPLY_CHUNKS * 3];
    const float zero = 0.0f;
    apply_adamw_lookahead(params, g, m, v, d, &st, 0.9f, &zero, &zero, off, 1, partial, stats);
    double dot = 0, dd = 0, uu = 0, bc1 = 1 - pow(0.9, 10), bc2 = 1 - pow(0.95, 10);
    for (int i = 0; i < 1000; i++) {
        double mi = 0.9 * m0[i] + 0.1 * (double)g[i], vi = 0.95 * v0[i] + 0.05 * (double)g[i] * g[i];
        double delta = -1e-4 * ((mi / bc1) / (sqrt(vi / bc2) + 1e-8) + 0.1 * p0[i]);
        cr_assert(fabs(params[i] - (p0[i] + delta)) <= 1e-5 * fabs(delta) + 1.2e-7 * fabs(p0[i]), "theta[%d]", i);
        dot += delta * d0[i]; dd += (double)d0[i] * d0[i]; uu += delta * delta;
        double want = 0.9 * d0[i] + 0.1 * delta;
        cr_assert(fabs(d[i] - want) <= 1e-3 * fabs(want) + 1e-12, "d[%d] %g vs %g", i, d[i], want);
    }
    cr_assert(fabs(stats[0] - dot) <= 1e-3 * fabs(dot), "dot %g vs %g", stats[0], dot);
    cr_assert(fabs(stats[1] - dd) <= 1e-6 * dd);
    cr_assert(fabs(stats[2] - uu) <= 1e-3 * uu);
}

// ---- the look-ahead along the drift (apply_adamw_lookahead, hybrid/lookahead.h)

// plainly written: AdamW as train_gpt2.c writes it, then the drift and the look-ahead
static void reference_lookahead(float* p, const float* g, float* m, float* v, float* d, const size_t* off,
                                const ApplyAdamStep* st, float gamma, const float* bp, const float* bn) {
    for (int b = 0; b < NB; b++) {
        float* p0 = malloc(sizes[b] * 4);
        memcpy(p0, p + off[b], sizes[b] * 4);
        reference_adamw(p + off[b], g + off[b], m + off[b], v + off[b], sizes[b], st->lr, st->beta1, st->beta2,
                        st->eps, WD[b], st->grad_scale, st->t);
        for (size_t k = 0; k < sizes[b]; k++) {
            size_t i = off[b] + k;
            float delta = p[i] - p0[k];
            float disp = fmaf(bp[b], d[i], delta);        // the look-ahead undone, plus the update
            float mn = fmaf(gamma, d[i], (1.0f - gamma) * disp);
            d[i] = mn;
            p[i] = fmaf(bn[b], mn, p[i]);
        }
        free(p0);
    }
}

Test(apply, lookahead_pass_equals_the_reference_loop_over_steps) {
    size_t off[NB + 1];
    off[0] = 0;
    for (int b = 0; b < NB; b++) { off[b + 1] = off[b] + sizes[b]; }
    const size_t P = off[NB];
    FusedState ref, fused;
    fused_state(&ref, off, 91); fused_state(&fused, off, 91);
    float bp[NB] = {0}, bn[NB];
    double partial[NB * APPLY_CHUNKS * 3], stats[NB * 3];
    for (int t = 1; t <= 4; t++) {  // the betas change between steps, as the schedule and the caps change them
        for (int b = 0; b < NB; b++) { bn[b] = t == 1 ? 0.0f : 0.1f * t + 0.05f * b; }
        ApplyAdamStep st = {0.9f, 0.95f, 1e-8f, WD, t, 3e-4f, 0.7f, NULL, 0, NULL, 0.0f, 0.0f};
        reference_lookahead(ref.p, ref.g, ref.m, ref.v, ref.d, off, &st, GAMMA, bp, bn);
        omp_set_num_threads(2);
        apply_adamw_lookahead(fused.p, fused.g, fused.m, fused.v, fused.d, &st, GAMMA, bp, bn, off, NB,
                              partial, stats);
        same_bits(fused.p, ref.p, P, "params", 2);
        same_bits(fused.d, ref.d, P, "drift", 2);
        same_bits(fused.m, ref.m, P, "m", 2);
        memcpy(bp, bn, sizeof(bp));
    }
    fused_free(&ref); fused_free(&fused);
}

// a bf16 trainer's copy of the weights, rounded in the same pass: the weights, drift and moments are those of
// the pass without it, bit for bit, and the copy is exactly the weights rounded to nearest even. And with
// zero_grads (hybrid_update's): the same again, bf16 copy and all, and every gradient left zero.
Test(apply, lookahead_pass_rounds_the_bf16_copy_and_zeroes_the_gradients) {
    size_t off[NB + 1];
    off[0] = 0;
    for (int b = 0; b < NB; b++) { off[b + 1] = off[b] + sizes[b]; }
    const size_t P = off[NB];
    FusedState plain, with16, zeroed;
    fused_state(&plain, off, 17); fused_state(&with16, off, 17); fused_state(&zeroed, off, 17);
    uint16_t* p16 = (uint16_t*)calloc(P, sizeof(uint16_t));
    uint16_t* z16 = (uint16_t*)calloc(P, sizeof(uint16_t));
    float bp[NB] = {0}, bn[NB];
    double partial[NB * APPLY_CHUNKS * 3], stats[NB * 3], stats16[NB * 3];
    for (int t = 1; t <= 3; t++) {
        for (int b = 0; b < NB; b++) { bn[b] = 0.2f * t; }
        ApplyAdamStep st = {0.9f, 0.95f, 1e-8f, WD, t, 3e-4f, 0.7f, NULL, 0, NULL, 0.0f, 0.0f};
        apply_adamw_lookahead(plain.p, plain.g, plain.m, plain.v, plain.d, &st, GAMMA, bp, bn, off, NB,
                              partial, stats);
        st.params16 = p16;
        apply_adamw_lookahead(with16.p, with16.g, with16.m, with16.v, with16.d, &st, GAMMA, bp, bn, off, NB,
                              partial, stats16);
        memcpy(zeroed.g, plain.g, P * sizeof(float));  // this step's gradients (the last step zeroed them)
        st.params16 = z16;
        st.zero_grads = 1;
        double statsz[NB * 3];
        apply_adamw_lookahead(zeroed.p, zeroed.g, zeroed.m, zeroed.v, zeroed.d, &st, GAMMA, bp, bn, off, NB,
                              partial, statsz);
        same_bits(with16.p, plain.p, P, "params", 2);
        same_bits(with16.d, plain.d, P, "drift", 2);
        cr_assert_eq(memcmp(stats16, stats, sizeof(stats)), 0, "statistics differ with the bf16 copy");
        same_bits(zeroed.p, plain.p, P, "params (gradients zeroed)", 2);
        same_bits(zeroed.d, plain.d, P, "drift (gradients zeroed)", 2);
        same_bits(zeroed.m, plain.m, P, "m (gradients zeroed)", 2);
        same_bits(zeroed.v, plain.v, P, "v (gradients zeroed)", 2);
        cr_assert_eq(memcmp(statsz, stats, sizeof(stats)), 0, "statistics differ with the gradients zeroed");
        cr_assert_eq(memcmp(z16, p16, P * sizeof(uint16_t)), 0, "the bf16 copy differs with the gradients zeroed");
        for (size_t i = 0; i < P; i++) { cr_assert_eq(zeroed.g[i], 0.0f, "gradient %zu left at %g", i, zeroed.g[i]); }
        for (size_t i = 0; i < P; i++) {
            cr_assert_eq(p16[i], bf16_from_float(with16.p[i]), "bf16 copy [%zu]: 0x%04x, the weight rounds to 0x%04x", i,
                         p16[i], bf16_from_float(with16.p[i]));
        }
        memcpy(bp, bn, sizeof(bp));
    }
    free(p16); free(z16);
    fused_free(&plain); fused_free(&with16); fused_free(&zeroed);
}

// a trainer's EMA of the weights (--ema), folded in the same pass: with and without the bf16 copy and the
// gradients zeroed, the weights, drift, moments and statistics are the plain pass's, bit for bit; the EMA is
// the trainer's own EMA element applied to the weights the pass wrote (what gpt2_update folds), bit for bit,
// and the bias-corrected average of those weights over the steps (llmc/average.h), computed here in double
Test(apply, lookahead_pass_folds_the_ema) {
    size_t off[NB + 1];
    off[0] = 0;
    for (int b = 0; b < NB; b++) { off[b + 1] = off[b] + sizes[b]; }
    const size_t P = off[NB];
    const int steps = 4;
    const float decay = 0.7f;
    FusedState plain, folded[4];
    fused_state(&plain, off, 23);
    float* ema[4];
    uint16_t* p16[4];
    for (int k = 0; k < 4; k++) {
        fused_state(&folded[k], off, 23);
        ema[k] = (float*)malloc(P * sizeof(float));
        memcpy(ema[k], folded[k].p, P * sizeof(float));  // the buffer starts as the weights (average_init_ema)
        p16[k] = (uint16_t*)calloc(P, sizeof(uint16_t));
    }
    float* ref = (float*)malloc(P * sizeof(float));
    memcpy(ref, plain.p, P * sizeof(float));
    double* hist = (double*)calloc(P * steps, sizeof(double));  // the weights after each update
    float bp[NB] = {0}, bn[NB];
    double partial[NB * APPLY_CHUNKS * 3], stats[NB * 3], statsk[NB * 3];
    for (int t = 1; t <= steps; t++) {
        for (int b = 0; b < NB; b++) { bn[b] = t == 1 ? 0.0f : 0.15f * t + 0.05f * b; }
        ApplyAdamStep st = {0.9f, 0.95f, 1e-8f, WD, t, 3e-4f, 0.7f, NULL, 0, NULL, 0.0f, 0.0f};
        float* grads_t = (float*)malloc(P * sizeof(float));
        memcpy(grads_t, plain.g, P * sizeof(float));
        apply_adamw_lookahead(plain.p, plain.g, plain.m, plain.v, plain.d, &st, GAMMA, bp, bn, off, NB, partial, stats);
        float w, kk;
        average_ema_coefs(decay, t, &w, &kk);
        for (size_t i = 0; i < P; i++) { ref[i] = average_ema_element(ref[i], plain.p[i], w, kk); }
        for (size_t i = 0; i < P; i++) { hist[(size_t)(t - 1) * P + i] = plain.p[i]; }
        for (int k = 0; k < 4; k++) {  // k: bit 0 the bf16 copy, bit 1 the gradients zeroed
            ApplyAdamStep sk = st;
            sk.ema = ema[k];
            sk.ema_w = w;
            sk.ema_k = kk;
            sk.params16 = (k & 1) ? p16[k] : NULL;
            sk.zero_grads = (k & 2) != 0;
            memcpy(folded[k].g, grads_t, P * sizeof(float));
            apply_adamw_lookahead(folded[k].p, folded[k].g, folded[k].m, folded[k].v, folded[k].d, &sk, GAMMA, bp, bn,
                                  off, NB, partial, statsk);
            same_bits(folded[k].p, plain.p, P, "params (EMA folded)", 2);
            same_bits(folded[k].d, plain.d, P, "drift (EMA folded)", 2);
            same_bits(folded[k].m, plain.m, P, "m (EMA folded)", 2);
            same_bits(folded[k].v, plain.v, P, "v (EMA folded)", 2);
            cr_assert_eq(memcmp(statsk, stats, sizeof(stats)), 0, "statistics differ with the EMA folded (variant %d)", k);
            same_bits(ema[k], ref, P, "the EMA against the trainer's EMA element", 2);
            if (k & 1) {
                for (size_t i = 0; i < P; i++) { cr_assert_eq(p16[k][i], bf16_from_float(plain.p[i]), "bf16 copy [%zu]", i); }
            }
        }
        free(grads_t);
        double norm = (1.0 - decay) / (1.0 - pow(decay, t)), worst = 0.0, apart = 0.0;
        for (size_t i = 0; i < P; i++) {
            double r = 0.0, big = 0.0;
            for (int s = 0; s < t; s++) {
                double x = hist[(size_t)s * P + i];
                r += pow(decay, t - 1 - s) * x;
                big = fmax(big, fabs(x));
            }
            r *= norm;
            worst = fmax(worst, fabs(ema[0][i] - r) / (1e-30 + big));
            apart = fmax(apart, fabs(ema[0][i] - plain.p[i]));
        }
        cr_assert_lt(worst, 4 * FLT_EPSILON, "step %d: the EMA is %.3g of its weights' scale from the closed form", t, worst);
        if (t == 1) { cr_assert_eq(apart, 0.0, "the first update's weights start the average"); }
        else { cr_assert_gt(apart, 0.0, "step %d: the average is not the weights", t); }
        memcpy(bp, bn, sizeof(bp));
    }
    for (int k = 0; k < 4; k++) { free(ema[k]); free(p16[k]); fused_free(&folded[k]); }
    free(ref); free(hist);
    fused_free(&plain);
}

Test(lookahead, window_schedule_cap_and_backoff) {
    Lookahead la;
    lookahead_init(&la, 0.5f, 0.99f, 3.0f, 0.0f, 1024.0, 10, 80, 2);
    double stats[6] = {0};
    lookahead_plan(&la, 9, 1e-3f, 1e-3f, stats);  // the prefill: no look-ahead
    cr_assert_eq(la.beta_next[0], 0.0f);
    lookahead_plan(&la, 80, 1e-3f, 1e-3f, stats); // the cool-down: none
    cr_assert_eq(la.beta_next[0], 0.0f);
    lookahead_plan(&la, 10, 5e-4f, 1e-3f, stats); // inside, but no measured pass (stats all zero): nothing
    cr_assert_eq(la.beta_next[0], 0.0f);
    stats[1] = stats[2] = stats[4] = stats[5] = 1.0;
    lookahead_plan(&la, 10, 5e-4f, 1e-3f, stats); // inside: beta0 * lr / lr_peak
    cr_assert_float_eq(la.beta_next[0], 0.25f, 1e-7f);
    // block 1's drift is 100x its last update: |beta m| capped at LOOKAHEAD_CAP updates
    stats[4] = 1e4; stats[5] = 1.0;   // |m_1|^2, |delta_1|^2
    stats[1] = 1.0; stats[2] = 1.0;   // block 0: |m| = |delta|, under the cap
    lookahead_plan(&la, 10, 1e-3f, 1e-3f, stats);
    cr_assert_float_eq(la.beta_next[0], 0.5f, 1e-7f);
    cr_assert_float_eq(la.beta_next[1], LOOKAHEAD_CAP / 100.0f, 1e-7f);
    // steady gradient norms, then a jump: beta halves; quiet steps bring it back
    for (int i = 0; i < 30; i++) { lookahead_observe(&la, 1.0f + 0.01f * (i % 3), NAN, NAN, stats); }
    cr_assert_float_eq(la.backoff, 1.0f, 1e-7f);
    lookahead_observe(&la, 5.0f, NAN, NAN, stats);
    cr_assert_float_eq(la.backoff, 0.5f, 1e-7f);
    cr_assert_eq(la.jumps, 1);
    lookahead_plan(&la, 20, 1e-3f, 1e-3f, stats);
    cr_assert_float_eq(la.beta_next[0], 0.25f, 1e-7f);
    for (int i = 0; i < 30; i++) { lookahead_observe(&la, 1.0f, NAN, NAN, stats); }
    cr_assert_float_eq(la.backoff, 1.0f, 1e-7f);
    // a skipped step applied nothing: beta_prev stays what the weights hold
    la.beta_prev[0] = 0.125f; la.beta_next[0] = 0.5f;
    lookahead_observe(&la, NAN, NAN, NAN, stats);
    cr_assert_float_eq(la.beta_prev[0], 0.125f, 0.0f);
    lookahead_free(&la);
}

// the noise gate: open before any measurement (one micro batch per step), closed while the running
// B_noise = S / G2 is below noise_gate x tokens per step, open again once it grows past it; ratio 0 never closes
Test(lookahead, noise_gate) {
    Lookahead la;
    lookahead_init(&la, 0.5f, 0.99f, 3.0f, 4.0f, 1000.0, 10, 80, 1);
    double stats[3] = {0.0, 1.0, 1.0};
    lookahead_plan(&la, 10, 1e-3f, 1e-3f, stats);
    cr_assert_float_eq(la.beta_next[0], 0.5f, 1e-7f, "unmeasured: the gate stays open");
    cr_assert(isnan(lookahead_noise_scale(&la)));
    for (int i = 0; i < 5; i++) { lookahead_observe(&la, 1.0f, 2000.0, 1.0, stats); }  // B_noise 2,000 < 4 x 1,000
    cr_assert_float_eq(lookahead_noise_scale(&la), 2000.0, 1e-9);
    lookahead_plan(&la, 11, 1e-3f, 1e-3f, stats);
    cr_assert_eq(la.beta_next[0], 0.0f, "B_noise 2k at 1k tokens per step: closed");
    cr_assert_eq(la.gated_steps, 1);
    cr_assert_eq(la.active_steps, 1);
    lookahead_plan(&la, 5, 1e-3f, 1e-3f, stats);  // outside the window: not counted as gated
    cr_assert_eq(la.gated_steps, 1);
    // B_noise grows to 10k: the running estimate crosses 4k after a few steps and the gate opens
    int opened = -1;
    for (int i = 0; i < 60 && opened < 0; i++) {
        lookahead_observe(&la, 1.0f, 10000.0, 1.0, stats);
        lookahead_plan(&la, 12 + i, 1e-3f, 1e-3f, stats);
        if (la.beta_next[0] > 0.0f) { opened = i; }
    }
    cr_assert(opened > 0 && opened < 20, "the gate opened after %d steps", opened);
    cr_assert(lookahead_noise_scale(&la) >= 4000.0);
    // a one-step estimate swamped by noise (G2 <= 0 < S) keeps it open; a skipped step's NANs change nothing
    double s0 = la.noise_s;
    lookahead_observe(&la, NAN, NAN, NAN, stats);
    cr_assert_eq(la.noise_s, s0);
    lookahead_observe(&la, 1.0f, 1e6, -50.0, stats);
    lookahead_plan(&la, 70, 1e-3f, 1e-3f, stats);
    cr_assert_gt(la.beta_next[0], 0.0f);
    lookahead_free(&la);
    // ratio 0: never gated, whatever B_noise
    lookahead_init(&la, 0.5f, 0.99f, 3.0f, 0.0f, 1000.0, 10, 80, 1);
    for (int i = 0; i < 5; i++) { lookahead_observe(&la, 1.0f, 10.0, 1.0, stats); }
    lookahead_plan(&la, 11, 1e-3f, 1e-3f, stats);
    cr_assert_float_eq(la.beta_next[0], 0.5f, 1e-7f);
    cr_assert_eq(la.gated_steps, 0);
    lookahead_free(&la);
}

// the drift's default decay: a memory of 10% of the schedule, capped at 100 steps, so that every run of
// 1,000 steps or more keeps EMA-Nesterov's 0.99 bit for bit (the studies of long runs depend on it)
Test(lookahead, default_decay_follows_the_schedule) {
    cr_assert_eq(lookahead_default_gamma(2767), 0.99f, "%a", lookahead_default_gamma(2767));
    cr_assert_eq(lookahead_default_gamma(1000), 0.99f, "%a", lookahead_default_gamma(1000));
    cr_assert_float_eq(lookahead_default_gamma(172), 1.0f - 1.0f / 17.2f, 1e-7f);
    cr_assert_float_eq(lookahead_default_gamma(691), 1.0f - 1.0f / 69.1f, 1e-7f);
    cr_assert_eq(lookahead_default_gamma(5), 0.0f, "a memory below one step is one step");
    cr_assert(lookahead_default_gamma(300) < lookahead_default_gamma(600), "longer schedules remember longer");
}
