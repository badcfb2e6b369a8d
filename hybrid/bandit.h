/*
 * hybrid/bandit.h — LinUCB over Predict horizons (docs/hybrid.md §7).
 * Arms are horizons {1, 2, 4, 8, 16} up to the configured maximum; the context is the feature
 * vector. Each arm keeps A = I + sum x x^T and b = sum r x; it scores theta^T x + alpha sqrt(x^T A^-1 x)
 * with theta = A^-1 b and the best score is played. The reward (set by the facade) is the loss
 * decrease per second of the Predict+Correct cycle relative to the Full-step rate of the same run,
 * so an arm is worth playing only if it beats plain training. Fixed size; no allocation.
 */
#ifndef HYBRID_BANDIT_H
#define HYBRID_BANDIT_H

#include "hybrid/hmath.h"
#include "hybrid/hio.h"
#include "hybrid/features.h"

#define BANDIT_MAX_ARMS 5
#define BANDIT_DIM FEATURES_DIM

typedef struct {
    int arms;                       // arms in use (horizons <= max)
    int horizon[BANDIT_MAX_ARMS];
    float alpha;                    // exploration strength
    double A[BANDIT_MAX_ARMS][BANDIT_DIM * BANDIT_DIM];
    double b[BANDIT_MAX_ARMS][BANDIT_DIM];
    int pulls[BANDIT_MAX_ARMS];
    double reward_sum[BANDIT_MAX_ARMS];
    int last_arm;                   // arm played by the last choice (-1: none)
    double work[BANDIT_DIM * BANDIT_DIM + 2 * BANDIT_DIM];
} Bandit;

static inline void bandit_init(Bandit* bd, int max_horizon, float alpha) {
    memset(bd, 0, sizeof(*bd));
    bd->alpha = alpha;
    for (int h = 1; h <= 16 && bd->arms < BANDIT_MAX_ARMS; h *= 2) {
        if (h <= max_horizon) { bd->horizon[bd->arms++] = h; }
    }
    for (int a = 0; a < BANDIT_MAX_ARMS; a++) {
        for (int i = 0; i < BANDIT_DIM; i++) { bd->A[a][i * BANDIT_DIM + i] = 1.0; }
    }
    bd->last_arm = -1;
}

// upper confidence bound of arm a in context x
static inline double bandit_score(Bandit* bd, int a, const float* x) {
    const int d = BANDIT_DIM;
    double xd[BANDIT_DIM], theta[BANDIT_DIM], ainvx[BANDIT_DIM];
    for (int i = 0; i < d; i++) { xd[i] = x[i]; }
    if (hmath_spd_solve(bd->A[a], bd->b[a], theta, bd->work, d) != 0) { return 0.0; }
    hmath_spd_solve(bd->A[a], xd, ainvx, bd->work, d);
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < d; i++) { mean += theta[i] * xd[i]; var += xd[i] * ainvx[i]; }
    return mean + bd->alpha * sqrt(var > 0.0 ? var : 0.0);
}

// choose an arm for context x; returns its horizon (0 if there are no arms)
static inline int bandit_choose(Bandit* bd, const float* x) {
    if (bd->arms == 0) { return 0; }
    int best = 0;
    double best_score = bandit_score(bd, 0, x);
    for (int a = 1; a < bd->arms; a++) {
        double s = bandit_score(bd, a, x);
        if (s > best_score) { best_score = s; best = a; }
    }
    bd->last_arm = best;
    return bd->horizon[best];
}

static inline int bandit_arm_of(const Bandit* bd, int horizon) {
    for (int a = 0; a < bd->arms; a++) { if (bd->horizon[a] == horizon) { return a; } }
    return -1;
}

// reward r for arm a played in context x
static inline void bandit_update(Bandit* bd, int a, const float* x, float r) {
    if (a < 0 || a >= bd->arms) { return; }
    const int d = BANDIT_DIM;
    for (int i = 0; i < d; i++) {
        for (int j = 0; j < d; j++) { bd->A[a][i * d + j] += (double)x[i] * x[j]; }
        bd->b[a][i] += (double)r * x[i];
    }
    bd->pulls[a]++;
    bd->reward_sum[a] += r;
}

static inline void bandit_io(HybridIO* io, Bandit* bd) {
    hio_expect_i32(io, bd->arms, "bandit arms");
    for (int a = 0; a < BANDIT_MAX_ARMS; a++) {
        hio_f64s(io, bd->A[a], BANDIT_DIM * BANDIT_DIM);
        hio_f64s(io, bd->b[a], BANDIT_DIM);
    }
    hio_i32s(io, bd->pulls, BANDIT_MAX_ARMS);
    hio_f64s(io, bd->reward_sum, BANDIT_MAX_ARMS);
    hio_i32(io, &bd->last_arm);
    if (bd->last_arm < -1 || bd->last_arm >= bd->arms) { hio_fail(io, "bandit arm out of range"); bd->last_arm = -1; }
}

#endif // HYBRID_BANDIT_H
