/*
 * hybrid/hmath.h — the small numerics every hybrid component shares: the project's one random number
 * generator, xorshift* (so predictor init and the RSSM's stochastic latent are reproducible and
 * checkpointable; llmc/rand.h builds the trainers' streams on it), the one monotonic clock, a
 * Gaussian sampler, a Cholesky solver for the tiny SPD systems of ridge regression and LinUCB, and
 * a flat-vector Adam used by the learned predictors. All sizes here are tens, never parameters.
 */
#ifndef HYBRID_HMATH_H
#define HYBRID_HMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

// ----------------------------------------------------------------------------
// random numbers: xorshift* (64-bit state, 32-bit output). It lives here, at the bottom of the
// dependencies (hybrid/ needs only libc), so that everything above uses this one definition.

static inline uint32_t hmath_u32(uint64_t* state) {
    *state ^= *state >> 12; *state ^= *state << 25; *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}
static inline float hmath_f32(uint64_t* state) { return (hmath_u32(state) >> 8) / 16777216.0f; }

// standard normal by Box-Muller (one value per call; simple, and its cost is irrelevant here)
static inline float hmath_normal(uint64_t* state) {
    float u1 = (hmath_u32(state) >> 8) / 16777216.0f + 1.0f / 33554432.0f; // (0,1)
    float u2 = hmath_f32(state);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

// seconds on the monotonic clock: step times, the controller's own time, benchmarks
static inline double hmath_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline float hmath_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float hmath_clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

// ----------------------------------------------------------------------------
// solve A x = b for symmetric positive definite A (n x n, row-major) by Cholesky.
// `work` holds n*n doubles; A and b are not modified. Returns 0, or -1 if A is not SPD.

static inline int hmath_spd_solve(const double* A, const double* b, double* x, double* work, int n) {
    double* Lm = work; // lower triangle of the factor
    for (int i = 0; i < n; i++) {
        for (int j = 0; j <= i; j++) {
            double s = A[i * n + j];
            for (int k = 0; k < j; k++) { s -= Lm[i * n + k] * Lm[j * n + k]; }
            if (i == j) {
                if (!(s > 0.0)) { return -1; }
                Lm[i * n + i] = sqrt(s);
            } else {
                Lm[i * n + j] = s / Lm[j * n + j];
            }
        }
    }
    for (int i = 0; i < n; i++) { // forward: L y = b
        double s = b[i];
        for (int k = 0; k < i; k++) { s -= Lm[i * n + k] * x[k]; }
        x[i] = s / Lm[i * n + i];
    }
    for (int i = n - 1; i >= 0; i--) { // backward: L^T x = y
        double s = x[i];
        for (int k = i + 1; k < n; k++) { s -= Lm[k * n + i] * x[k]; }
        x[i] = s / Lm[i * n + i];
    }
    return 0;
}

// ----------------------------------------------------------------------------
// Adam over a flat parameter vector (predictor weights): p -= lr * mhat / (sqrt(vhat) + eps)

static inline void hmath_adam(float* p, const float* g, float* m, float* v, int n, int t, float lr) {
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
    for (int i = 0; i < n; i++) {
        float gi = hmath_clampf(g[i], -10.0f, 10.0f); // one bad target must not wreck the weights
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        p[i] -= lr * (m[i] / bc1) / (sqrtf(v[i] / bc2) + eps);
    }
}

#endif // HYBRID_HMATH_H
