/*
 * hybrid/features.h — the feature vector every predictor, the residual store and the bandit see.
 * A handful of scalars describing where training is (loss level and trend, gradient norm, learning
 * rate, how well the direction buffer explains recent updates, progress), each standardised online
 * by Welford's running mean and variance so that no predictor depends on the loss scale of a
 * particular model. Fixed size; no allocation at all.
 */
#ifndef HYBRID_FEATURES_H
#define HYBRID_FEATURES_H

#include <math.h>
#include "hybrid/hio.h"

#define FEATURES_DIM 10 // feature 0 is a constant 1 (the bias), the rest are standardised

enum {
    FEAT_BIAS, FEAT_LOSS, FEAT_LOSS_TREND, FEAT_LOG_GRAD_NORM, FEAT_GRAD_RATIO, FEAT_LR,
    FEAT_COSINE, FEAT_SCALE, FEAT_SINCE_PREDICT, FEAT_PROGRESS
};

// what the trainer-side state knows about the latest step (raw, unnormalised)
typedef struct {
    float loss, loss_trend, grad_norm, grad_ratio, lr_frac, cosine, scale, since_predict, progress;
} FeatureInputs;

typedef struct {
    double count;
    double mean[FEATURES_DIM];
    double m2[FEATURES_DIM]; // sum of squared deviations (Welford)
} FeatureNormalizer;

static inline void features_init(FeatureNormalizer* fn) { memset(fn, 0, sizeof(*fn)); }

static inline void features_raw(const FeatureInputs* in, float* raw) {
    raw[FEAT_BIAS] = 1.0f;
    raw[FEAT_LOSS] = in->loss;
    raw[FEAT_LOSS_TREND] = in->loss_trend;
    raw[FEAT_LOG_GRAD_NORM] = logf(fmaxf(in->grad_norm, 1e-12f));
    raw[FEAT_GRAD_RATIO] = in->grad_ratio;
    raw[FEAT_LR] = in->lr_frac;
    raw[FEAT_COSINE] = in->cosine;
    raw[FEAT_SCALE] = in->scale;
    raw[FEAT_SINCE_PREDICT] = log1pf(in->since_predict);
    raw[FEAT_PROGRESS] = in->progress;
}

// add one observation to the running statistics (only from measured steps, so Predict steps'
// extrapolated inputs never shift the normalisation)
static inline void features_observe(FeatureNormalizer* fn, const float* raw) {
    fn->count += 1.0;
    for (int i = 1; i < FEATURES_DIM; i++) {
        if (!isfinite(raw[i])) { continue; }
        double d = raw[i] - fn->mean[i];
        fn->mean[i] += d / fn->count;
        fn->m2[i] += d * (raw[i] - fn->mean[i]);
    }
}

// standardise: (x - mean) / std, clipped to +-5 so that one outlier cannot dominate a regression
static inline void features_normalize(const FeatureNormalizer* fn, const float* raw, float* out) {
    out[0] = 1.0f;
    for (int i = 1; i < FEATURES_DIM; i++) {
        double var = fn->count > 1.0 ? fn->m2[i] / (fn->count - 1.0) : 0.0;
        double sd = sqrt(var);
        double z = (sd > 1e-12 && isfinite(raw[i])) ? (raw[i] - fn->mean[i]) / sd : 0.0;
        out[i] = (float)(z > 5.0 ? 5.0 : (z < -5.0 ? -5.0 : z));
    }
}

static inline void features_io(HybridIO* io, FeatureNormalizer* fn) {
    hio_f64(io, &fn->count);
    hio_f64s(io, fn->mean, FEATURES_DIM);
    hio_f64s(io, fn->m2, FEATURES_DIM);
}

#endif // HYBRID_FEATURES_H
