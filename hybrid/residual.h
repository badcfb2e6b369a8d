/*
 * hybrid/residual.h — fixed-capacity store of prediction residuals (docs/hybrid.md §5).
 * Each Correct step records how far the real update differed from the predicted one (per-block
 * scale residual s_b* - s_b, and the loss residual) with the features it was made under. The next
 * predictions are corrected by a similarity-weighted mean of these residuals (error feedback):
 * weight = max(0, cosine of standardised features) * decay^(age in steps).
 * Allocates once in residual_store_init; never afterwards.
 */
#ifndef HYBRID_RESIDUAL_H
#define HYBRID_RESIDUAL_H

#include <math.h>
#include <stdlib.h>
#include "hybrid/hio.h"

typedef struct {
    int capacity, feat_dim, out_dim; // out_dim = blocks + 1 (the last is the loss residual)
    int count, head;                 // entries held, next slot to write
    float* features;                 // (capacity, feat_dim)
    float* residuals;                // (capacity, out_dim)
    int* horizon;                    // (capacity)
    int* step;                       // (capacity)
    float age_decay;                 // per-step decay of an entry's weight
} ResidualStore;

static inline void residual_store_init(ResidualStore* r, int capacity, int feat_dim, int out_dim) {
    memset(r, 0, sizeof(*r));
    r->capacity = capacity; r->feat_dim = feat_dim; r->out_dim = out_dim; r->age_decay = 0.99f;
    r->features = (float*)calloc((size_t)capacity * feat_dim, sizeof(float));
    r->residuals = (float*)calloc((size_t)capacity * out_dim, sizeof(float));
    r->horizon = (int*)calloc((size_t)capacity, sizeof(int));
    r->step = (int*)calloc((size_t)capacity, sizeof(int));
}

static inline void residual_store_free(ResidualStore* r) {
    free(r->features); free(r->residuals); free(r->horizon); free(r->step);
    memset(r, 0, sizeof(*r));
}

// record one residual; the oldest entry is overwritten when full
static inline void residual_store_push(ResidualStore* r, const float* features, const float* residual,
                                       int horizon, int step) {
    int slot = r->head;
    memcpy(r->features + (size_t)slot * r->feat_dim, features, (size_t)r->feat_dim * sizeof(float));
    memcpy(r->residuals + (size_t)slot * r->out_dim, residual, (size_t)r->out_dim * sizeof(float));
    r->horizon[slot] = horizon;
    r->step[slot] = step;
    r->head = (r->head + 1) % r->capacity;
    if (r->count < r->capacity) { r->count++; }
}

// weight of entry i for a query made at `step` under `features` (feature 0, the bias, is skipped)
static inline float residual_store_weight(const ResidualStore* r, int i, const float* features, int step) {
    const float* f = r->features + (size_t)i * r->feat_dim;
    double dot = 0.0, na = 0.0, nb = 0.0;
    for (int j = 1; j < r->feat_dim; j++) { dot += (double)f[j] * features[j]; na += (double)f[j] * f[j]; nb += (double)features[j] * features[j]; }
    double cosine = (na > 0.0 && nb > 0.0) ? dot / sqrt(na * nb) : 1.0; // all-zero features: equally similar
    if (cosine <= 0.0) { return 0.0f; }
    int age = step - r->step[i];
    return (float)(cosine * pow((double)r->age_decay, age < 0 ? 0 : age));
}

// correction (out) = weighted mean of residuals; returns the total weight (0: no correction)
static inline float residual_store_correction(const ResidualStore* r, const float* features, int step, float* out) {
    memset(out, 0, (size_t)r->out_dim * sizeof(float));
    double wsum = 0.0;
    for (int i = 0; i < r->count; i++) {
        float w = residual_store_weight(r, i, features, step);
        if (w <= 0.0f) { continue; }
        wsum += w;
        const float* res = r->residuals + (size_t)i * r->out_dim;
        for (int o = 0; o < r->out_dim; o++) { out[o] += w * res[o]; }
    }
    if (wsum > 0.0) { for (int o = 0; o < r->out_dim; o++) { out[o] = (float)(out[o] / wsum); } }
    return (float)wsum;
}

static inline void residual_store_io(HybridIO* io, ResidualStore* r) {
    hio_expect_i32(io, r->capacity, "residual store capacity");
    hio_expect_i32(io, r->feat_dim, "residual feature size");
    hio_expect_i32(io, r->out_dim, "residual output size");
    hio_i32(io, &r->count);
    hio_i32(io, &r->head);
    if (r->count < 0 || r->count > r->capacity || r->head < 0 || r->head >= r->capacity) {
        hio_fail(io, "residual store indices out of range");
        return;
    }
    hio_f32s(io, r->features, (size_t)r->capacity * r->feat_dim);
    hio_f32s(io, r->residuals, (size_t)r->capacity * r->out_dim);
    hio_i32s(io, r->horizon, (size_t)r->capacity);
    hio_i32s(io, r->step, (size_t)r->capacity);
}

#endif // HYBRID_RESIDUAL_H
