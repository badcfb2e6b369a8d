// hybrid/apply.h alone: Predict steps add exactly fl(c * d) per element, and rollback restores the
// pre-Predict parameters bit-exactly (the spec allows 1 ulp) for both direction kinds.
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include "hybrid/apply.h"
#include "hybrid/hmath.h"

#define NB 5
static const size_t sizes[NB] = {7, 1000, 70000, 3, 4096}; // one block above the OpenMP threshold

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
        case 0: return 0.02f * hmath_normal(rng);
        case 1: return 0.0f;
        case 2: return 1e-9f * hmath_normal(rng);
        case 3: return 1.0f + 0.1f * hmath_normal(rng);
        default: return 3.0f * hmath_normal(rng);
    }
}

static void setup(size_t* off, float** params, float** d, float** m, float** v, uint64_t* rng) {
    off[0] = 0;
    for (int b = 0; b < NB; b++) { off[b + 1] = off[b] + sizes[b]; }
    size_t P = off[NB];
    *params = malloc(P * 4); *d = malloc(P * 4); *m = malloc(P * 4); *v = malloc(P * 4);
    for (size_t i = 0; i < P; i++) {
        (*params)[i] = param_value(rng, i);
        (*d)[i] = (i % 7 == 0) ? 0.0f : 3e-3f * hmath_normal(rng) * ((i % 3 == 0) ? 100.0f : 1.0f);
        (*m)[i] = 1e-3f * hmath_normal(rng);
        float s = 1e-3f * hmath_normal(rng);
        (*v)[i] = s * s + ((i % 11 == 0) ? 0.0f : 1e-12f);
    }
}

static void check_kind(int kind) {
    uint64_t rng = 1234 + kind;
    size_t off[NB + 1];
    float *params, *d, *m, *v;
    setup(off, &params, &d, &m, &v, &rng);
    size_t P = off[NB];
    float* before = malloc(P * 4);
    float* prev = malloc(P * 4);
    float* keep = malloc(P * 4);
    memcpy(before, params, P * 4);
    for (size_t i = 0; i < P; i++) { keep[i] = 12345.0f; } // garbage: the first step must overwrite it
    ApplyDirection dir = {kind, d, m, v, 1.0f - powf(0.9f, 7.0f), 1.0f - powf(0.95f, 7.0f), 1e-8f, -3e-4f};
    const int H = 16;
    float coefs[16 * NB];
    for (int k = 0; k < H; k++) {
        for (int b = 0; b < NB; b++) { coefs[k * NB + b] = 8.0f * (hmath_f32(&rng) - 0.3f); }
        memcpy(prev, params, P * 4);
        apply_predict(params, keep, &dir, off, NB, coefs + k * NB, k == 0);
        // exactly the predicted amount: theta_new = fl(theta + fl(c * d_i)), element by element
        for (int b = 0; b < NB; b++) {
            for (size_t i = off[b]; i < off[b + 1]; i++) {
                volatile float x = coefs[k * NB + b] * apply_direction_at(&dir, i);
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
    uint32_t worst = 0;
    size_t exact = 0;
    for (size_t i = 0; i < P; i++) {
        uint32_t u = ulp_diff(params[i], before[i]);
        if (u > worst) { worst = u; }
        exact += u == 0;
    }
    cr_assert_leq(worst, 1, "rollback error %u ulp", worst);
    cr_assert_eq(exact, P, "rollback should be bit-exact: %zu of %zu", exact, P);
    free(params); free(d); free(m); free(v); free(before); free(prev); free(keep);
}

Test(apply, predict_adds_exactly_and_rollback_restores_ema_direction) { check_kind(DIRECTION_EMA); }
Test(apply, predict_adds_exactly_and_rollback_restores_adam_direction) { check_kind(DIRECTION_ADAM); }

Test(apply, naive_reverse_subtraction_would_not_be_exact) {
    // why rollback keeps theta_0 instead of subtracting: tiny theta plus a large update loses its bits
    volatile float theta = 1e-9f, x = 1e-3f;
    volatile float s = theta + x;
    volatile float back = s - x;
    cr_assert_gt(ulp_diff(back, theta), 1);
}

Test(apply, observe_statistics_and_ema_update) {
    // one block, AdamW state known: check <dtheta,d>, |d|^2, |dtheta|^2 and the EMA in double
    size_t off[2] = {0, 1000};
    float params[1000], d[1000], d0[1000], m[1000], v[1000], g[1000];
    uint64_t rng = 5;
    for (int i = 0; i < 1000; i++) {
        params[i] = 0.02f * hmath_normal(&rng); d[i] = d0[i] = 1e-3f * hmath_normal(&rng);
        m[i] = 1e-3f * hmath_normal(&rng); v[i] = 1e-6f * (1.0f + hmath_f32(&rng)); g[i] = 0.0f;
    }
    const float wd = 0.1f;
    ApplyAdamStep st = {0.9f, 0.95f, 1e-8f, &wd, 10, 1e-4f, 3e-4f, 1.0f};
    double stats[3];
    apply_observe(d, params, m, v, g, &st, DIRECTION_EMA, 0.9f, off, 1, stats);
    double dot = 0, dd = 0, uu = 0, bc1 = 1 - pow(0.9, 10), bc2 = 1 - pow(0.95, 10);
    for (int i = 0; i < 1000; i++) {
        double delta = -1e-4 * ((m[i] / bc1) / (sqrt(v[i] / bc2) + 1e-8) + 0.1 * params[i]);
        dot += delta * d0[i]; dd += (double)d0[i] * d0[i]; uu += delta * delta;
        double want = 0.9 * d0[i] + 0.1 * delta * 3.0;
        cr_assert(fabs(d[i] - want) <= 1e-5 * fabs(want) + 1e-12, "d[%d] %g vs %g", i, d[i], want);
    }
    cr_assert(fabs(stats[0] - dot) <= 1e-4 * fabs(dot), "dot %g vs %g", stats[0], dot);
    cr_assert(fabs(stats[1] - dd) <= 1e-6 * dd);
    cr_assert(fabs(stats[2] - uu) <= 1e-4 * uu);
}
