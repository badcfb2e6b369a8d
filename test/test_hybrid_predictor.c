// hybrid/predictor.h alone: each predictor learns synthetic targets online.
#include <criterion/criterion.h>
#include "hybrid/predictor.h"

// GCC -O3 inlines every predictor kind into each test and then warns about reads in the branches
// of the kinds not taken; the arrays are initialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define IN 6
#define OUT 3

// features at time t: bias, a slow ramp, a period-12 phase (sin, cos), and two noise-free extras
static void feats(int t, float* x) {
    x[0] = 1.0f;
    x[1] = (float)((t % 50) - 25) / 25.0f;
    x[2] = sinf(6.2831853f * t / 12.0f);
    x[3] = cosf(6.2831853f * t / 12.0f);
    x[4] = 0.5f * sinf(6.2831853f * t / 7.0f);
    x[5] = 0.0f;
}
// linear targets (one of them periodic through the phase features, one constant)
static void target(const float* x, float* y) {
    y[0] = 0.8f + 0.5f * x[1];
    y[1] = 1.5f * x[2] - 0.7f * x[3];
    y[2] = -0.3f;
}

// train for n steps, then the mean absolute error over the next 50 steps (predictions only)
static float train_and_score(int kind, int n) {
    Predictor p;
    predictor_init(&p, kind, IN, OUT, 42);
    float x[IN] = {0}, y[OUT] = {0}, yh[OUT];
    for (int t = 0; t < n; t++) { feats(t, x); target(x, y); predictor_update(&p, x, y); }
    double err = 0.0;
    for (int t = n; t < n + 50; t++) {
        feats(t, x); target(x, y);
        predictor_predict(&p, x, 1, yh, NULL);
        for (int o = 0; o < OUT; o++) { err += fabsf(yh[o] - y[o]); }
    }
    predictor_free(&p);
    return (float)(err / (50.0 * OUT));
}

// the same error for always predicting 0 (what an untrained predictor does)
static float zero_score(void) {
    float x[IN], y[OUT];
    double err = 0.0;
    for (int t = 0; t < 50; t++) { feats(t, x); target(x, y); for (int o = 0; o < OUT; o++) { err += fabsf(y[o]); } }
    return (float)(err / (50.0 * OUT));
}

Test(predictor, untrained_predictors_predict_zero) {
    for (int k = 0; k < PREDICTOR_KINDS; k++) {
        Predictor p;
        predictor_init(&p, k, IN, OUT, 1);
        float x[IN], yh[OUT];
        feats(3, x);
        predictor_predict(&p, x, 1, yh, NULL);
        for (int o = 0; o < OUT; o++) { cr_assert_float_eq(yh[o], 0.0f, 1e-6f, "%s output %d", predictor_name(k), o); }
        predictor_free(&p);
    }
}

Test(predictor, momentum_tracks_a_constant_and_a_shift) {
    Predictor p;
    predictor_init(&p, PREDICTOR_MOMENTUM, IN, OUT, 1);
    float x[IN] = {1}, y[OUT] = {2.0f, -1.0f, 0.0f}, yh[OUT];
    for (int t = 0; t < 100; t++) { predictor_update(&p, x, y); }
    predictor_predict(&p, x, 1, yh, NULL);
    cr_assert_float_eq(yh[0], 2.0f, 1e-4f);
    cr_assert_float_eq(yh[1], -1.0f, 1e-4f);
    y[0] = 0.0f; // the target drops to 0: momentum follows (it can learn s = 0)
    for (int t = 0; t < 100; t++) { predictor_update(&p, x, y); }
    predictor_predict(&p, x, 1, yh, NULL);
    cr_assert_float_eq(yh[0], 0.0f, 1e-3f);
    predictor_free(&p);
}

Test(predictor, linear_learns_linear_and_periodic_targets) {
    float e = train_and_score(PREDICTOR_LINEAR, 300), z = zero_score();
    cr_assert_lt(e, 0.05f * z, "linear MAE %g vs zero-predictor %g", e, z);
}

Test(predictor, mlp_learns_linear_and_periodic_targets) {
    float e = train_and_score(PREDICTOR_MLP, 3000), z = zero_score();
    cr_assert_lt(e, 0.15f * z, "mlp MAE %g vs zero-predictor %g", e, z);
}

Test(predictor, rssm_learns_linear_and_periodic_targets) {
    float e = train_and_score(PREDICTOR_RSSM, 3000), z = zero_score();
    cr_assert_lt(e, 0.2f * z, "rssm MAE %g vs zero-predictor %g", e, z);
}

Test(predictor, rssm_ensemble_reports_spread) {
    Predictor p;
    predictor_init(&p, PREDICTOR_RSSM, IN, OUT, 7);
    float x[IN] = {0}, y[OUT] = {0}, yh[OUT], spread = -1.0f;
    for (int t = 0; t < 50; t++) { feats(t, x); target(x, y); predictor_update(&p, x, y); }
    predictor_predict(&p, x, 4, yh, &spread);
    cr_assert(isfinite(spread) && spread > 0.0f, "spread %g", spread);
    predictor_free(&p);
}

Test(predictor, learned_predictors_learn_zero_from_noise) {
    // targets are zero-mean noise: every predictor must end near s = 0, not extrapolate
    for (int k = 0; k < PREDICTOR_KINDS; k++) {
        Predictor p;
        predictor_init(&p, k, IN, OUT, 3);
        uint64_t rng = 99;
        float x[IN] = {0}, y[OUT] = {0}, yh[OUT];
        for (int t = 0; t < 2000; t++) {
            feats(t, x);
            for (int o = 0; o < OUT; o++) { y[o] = hmath_normal(&rng); }
            predictor_update(&p, x, y);
        }
        double m = 0.0;
        for (int t = 2000; t < 2100; t++) {
            feats(t, x);
            predictor_predict(&p, x, 1, yh, NULL);
            for (int o = 0; o < OUT; o++) { m += fabsf(yh[o]); }
        }
        m /= 100.0 * OUT;
        cr_assert_lt(m, 0.5, "%s mean |prediction| %g on pure noise", predictor_name(k), m);
        predictor_free(&p);
    }
}

Test(predictor, fixed_scale_kinds_ignore_the_scale_targets_and_track_the_loss_change) {
    int kinds[2] = {PREDICTOR_NESTEROV, PREDICTOR_SCALED};
    for (int i = 0; i < 2; i++) {
        Predictor p;
        predictor_init(&p, kinds[i], IN, OUT, 1);
        p.fixed_scale = 0.7f;
        cr_assert(predictor_is_fixed(kinds[i]));
        float x[IN] = {1}, y[OUT] = {3.0f, -2.0f, -0.5f}, yh[OUT];
        for (int t = 0; t < 100; t++) { predictor_update(&p, x, y); }
        predictor_predict(&p, x, 1, yh, NULL);
        for (int o = 0; o < OUT - 1; o++) { cr_assert_float_eq(yh[o], 0.7f, 0.0f, "%s scale %d", predictor_name(kinds[i]), o); }
        cr_assert_float_eq(yh[OUT - 1], -0.5f, 1e-4f, "%s: the loss change is the EMA of the measured ones", predictor_name(kinds[i]));
        predictor_free(&p);
    }
    cr_assert(!predictor_is_fixed(PREDICTOR_MOMENTUM) && !predictor_is_fixed(PREDICTOR_RSSM));
}
