/*
 * hybrid/lookahead.h — the look-ahead: predict the slow drift, not the last step.
 * A single AdamW update is mostly noise and the bounce across sharp directions; repeating it repeats the
 * bounce. What is predictable is the drift: m, an EMA
 * (decay gamma, a memory of 10% of the schedule up to 100 steps) of the weights' displacement. Before
 * each step the weights move ahead along it, theta += beta_t m, and the step's gradient is taken at
 * that point (EMA-Nesterov). The look-ahead costs no forward, no backward and no pass of its own: it
 * is fused into AdamW's pass (apply_adamw_lookahead in hybrid/apply.h; the GPU kernel in
 * hybrid/apply.cuh). It takes no slot of the schedule: `-x N` is still N backward passes.
 *
 * This header decides the per-block betas on the host:
 *   beta_t = --lookahead * lr_t / lr_peak * backoff, inside the window the facade sets ([the drift's
 *            prefill, --hybrid-warmup steps, to (1 - --hybrid-cooldown) of the schedule): before it m
 *            gathers, after it no look-ahead is added (the ones already in the weights stay: the
 *            trajectory goes on);
 *   cap:     per parameter block, |beta m_b| <= LOOKAHEAD_CAP |delta_b|, the block's last AdamW update
 *            (norms from the last pass's statistics): a drift estimate never moves a tensor further
 *            than a few of its own steps;
 *   backoff: a step whose gradient norm jumps (z-score above --divergence-threshold against the
 *            recent mean and variance) halves beta; quiet steps let it grow back;
 *   gate:    no look-ahead is added while the gradient noise scale B_noise (a running estimate from the
 *            steps' two gradient norms, llmc/run.h) is below --noise-gate times the tokens per step.
 *            The look-ahead pays where a step's tokens are far below B_noise and costs where they are
 *            about at it, where a tuned LR already takes the drift's step (docs/hybrid.md). With one
 *            micro batch per step B_noise cannot be measured: the gate stays open (the trainer says
 *            so at start-up).
 * The state is a few numbers per block, allocated in lookahead_init and saved with the hybrid state.
 */
#ifndef HYBRID_LOOKAHEAD_H
#define HYBRID_LOOKAHEAD_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hybrid/hio.h"

#define LOOKAHEAD_MEMORY 100.0 // the drift's longest memory in steps, 1/(1-gamma): gamma 0.99, whose
                               // noise is ~7% of one update's
#define LOOKAHEAD_CAP 2.0f      // |beta m_b| <= this many of the block's last update
#define LOOKAHEAD_GN_ALPHA 0.05 // EMA weight of the gradient-norm mean and variance
#define LOOKAHEAD_GN_MIN 10     // steps of gradient norms before a jump can be judged
#define LOOKAHEAD_RECOVER 1.05f // backoff growth per quiet step, up to 1
#define LOOKAHEAD_NOISE_ALPHA 0.05 // EMA weight of the noise scale's two terms (a memory of ~20 steps:
                                   // B_noise grows several-fold over a run; a one-step estimate can be negative)

typedef struct {
    float beta0;                // --lookahead (0: off)
    float gamma;                // the drift's EMA decay (--drift-decay, or from the schedule)
    float zmax;                 // --divergence-threshold
    float noise_gate;           // --noise-gate: look-ahead only while B_noise >= this x tokens per step (0: never gated)
    double tokens;              // tokens per step
    int start, stop;            // the window, in steps: [start, stop)
    int nblocks;
    float* beta_prev;           // (nblocks) the look-ahead the weights hold now
    float* beta_next;           // (nblocks) the one the coming pass adds
    float backoff;              // in (0, 1]
    double gn_mean, gn_var;     // recent gradient norms
    int gn_n;
    double noise_s, noise_g2;   // EMAs of the noise scale's terms: the noise's trace S and |G|^2 (B_noise = S / G2)
    int noise_n;                // steps that measured them (0: one micro batch per step, the gate stays open)
    int active;                 // this step adds a look-ahead (set by lookahead_plan)
    // diagnostics for the summary
    int active_steps, gated_steps, jumps, capped;
    double beta_sum, cos_sum;
    int n_cos;
} Lookahead;

// The drift's decay when --drift-decay is not given: a memory of 10% of the schedule, at most
// LOOKAHEAD_MEMORY steps. A fixed 0.99 (EMA-Nesterov's, for runs of thousands of steps) would leave a
// 172-step run's drift at a sixth of its length after the prefill, lagging the trajectory it should lead;
// from 1,000 steps on this is 0.99 exactly.
static inline float lookahead_default_gamma(int total_steps) {
    double mem = 0.1 * (double)total_steps;
    mem = mem > LOOKAHEAD_MEMORY ? LOOKAHEAD_MEMORY : mem < 1.0 ? 1.0 : mem;
    return (float)(1.0 - 1.0 / mem);
}

// start, stop: the window, in steps (0-based, [start, stop)); gamma: the drift's EMA decay; noise_gate:
// the gate's ratio (0: none), tokens: per step
static inline void lookahead_init(Lookahead* la, float beta0, float gamma, float zmax, float noise_gate, double tokens,
                                  int start, int stop, int nblocks) {
    memset(la, 0, sizeof(*la));
    la->beta0 = beta0;
    la->gamma = gamma;
    la->zmax = zmax;
    la->noise_gate = noise_gate;
    la->tokens = tokens;
    la->start = start;
    la->stop = stop;
    la->nblocks = nblocks;
    la->beta_prev = (float*)calloc((size_t)nblocks, sizeof(float));
    la->beta_next = (float*)calloc((size_t)nblocks, sizeof(float));
    if (la->beta_prev == NULL || la->beta_next == NULL) {
        fprintf(stderr, "error: lookahead_init: out of memory (%d blocks)\n", nblocks);
        exit(EXIT_FAILURE);
    }
    la->backoff = 1.0f;
}

static inline void lookahead_free(Lookahead* la) {
    free(la->beta_prev);
    free(la->beta_next);
    la->beta_prev = la->beta_next = NULL;
}

// the running B_noise in tokens; NAN before any step measured it, INFINITY where the noise swamps |G|^2
static inline double lookahead_noise_scale(const Lookahead* la) {
    if (la->noise_n == 0) { return NAN; }
    return la->noise_g2 > 0.0 ? la->noise_s / la->noise_g2 : la->noise_s > 0.0 ? INFINITY : NAN;
}

// the gate: open without a ratio, before any measurement, and while B_noise >= noise_gate x tokens
// (S >= ratio x tokens x G2 also holds where the noise swamps G2's estimate, G2 <= 0 < S)
static inline int lookahead_gate_open(const Lookahead* la) {
    return la->noise_gate <= 0.0f || la->noise_n == 0 || la->noise_s >= (double)la->noise_gate * la->tokens * la->noise_g2;
}

// before the pass of step `step` (0-based) at learning rate lr: beta_next per block. stats: (nblocks, 3)
// of the last pass (<delta,m>, |m|^2, |delta|^2), all zero before the first.
static inline void lookahead_plan(Lookahead* la, int step, float lr, float lr_peak, const double* stats) {
    int window = la->beta0 > 0.0f && step >= la->start && step < la->stop;
    int active = window && lookahead_gate_open(la);
    if (window && !active) { la->gated_steps++; }
    la->active = active;
    float beta = active ? la->beta0 * (lr / lr_peak) * la->backoff : 0.0f;
    for (int b = 0; b < la->nblocks; b++) {
        float bb = beta;
        double mm = stats[3 * b + 1], uu = stats[3 * b + 2];
        if (mm == 0.0 && uu == 0.0) { bb = 0.0f; }  // no measured pass (a skipped step): no cap to bound it by
        if (bb > 0.0f && mm > 0.0 && (double)bb * bb * mm > (double)LOOKAHEAD_CAP * LOOKAHEAD_CAP * uu) {
            bb = (float)(LOOKAHEAD_CAP * sqrt(uu / mm));
            la->capped++;
        }
        la->beta_next[b] = isfinite(bb) ? bb : 0.0f;
    }
    if (active) {
        la->active_steps++;
        la->beta_sum += beta;
    }
}

// after the pass: the betas it applied are now in the weights; a gradient-norm jump backs beta off.
// grad_norm: the step's (NAN if it was skipped); noise_s, noise_g2: the step's estimates of the noise
// scale's terms (NAN where not measured: one micro batch, a skipped step); stats: this pass's.
// A skipped step (NAN: no update, so no look-ahead was applied) keeps beta_prev and backs off.
static inline void lookahead_observe(Lookahead* la, float grad_norm, double noise_s, double noise_g2, const double* stats) {
    if (isfinite(noise_s) && isfinite(noise_g2)) {
        la->noise_s += LOOKAHEAD_NOISE_ALPHA * (noise_s - la->noise_s);
        la->noise_g2 += LOOKAHEAD_NOISE_ALPHA * (noise_g2 - la->noise_g2);
        la->noise_n++;
    }
    if (isfinite(grad_norm)) {
        memcpy(la->beta_prev, la->beta_next, (size_t)la->nblocks * sizeof(float));
        double g = grad_norm;
        if (la->gn_n >= LOOKAHEAD_GN_MIN && la->gn_var > 0.0 && (g - la->gn_mean) / sqrt(la->gn_var) > la->zmax) {
            la->backoff *= 0.5f;
            la->jumps++;
        } else {
            la->backoff = la->backoff * LOOKAHEAD_RECOVER > 1.0f ? 1.0f : la->backoff * LOOKAHEAD_RECOVER;
        }
        if (la->gn_n == 0) { la->gn_mean = g; la->gn_var = 0.0; }
        double dev = g - la->gn_mean;
        la->gn_mean += LOOKAHEAD_GN_ALPHA * dev;
        la->gn_var = (1.0 - LOOKAHEAD_GN_ALPHA) * (la->gn_var + LOOKAHEAD_GN_ALPHA * dev * dev);
        la->gn_n++;
    } else {
        la->backoff *= 0.5f;  // a non-finite step is the strongest jump
        la->jumps++;
    }
    // how well the drift predicted this update: the mean over blocks of cos(delta_b, m_b)
    double cs = 0.0;
    int n = 0;
    for (int b = 0; b < la->nblocks; b++) {
        double dot = stats[3 * b], mm = stats[3 * b + 1], uu = stats[3 * b + 2];
        if (mm > 0.0 && uu > 0.0) { cs += dot / sqrt(mm * uu); n++; }
    }
    if (n > 0) { la->cos_sum += cs / n; la->n_cos++; }
}

static inline float lookahead_mean_beta(const Lookahead* la) {
    return la->active_steps > 0 ? (float)(la->beta_sum / la->active_steps) : 0.0f;
}

static inline void lookahead_io(HybridIO* io, Lookahead* la) {
    hio_expect_f32(io, la->beta0, "--lookahead");
    hio_expect_f32(io, la->gamma, "--drift-decay");
    hio_expect_f32(io, la->noise_gate, "--noise-gate");
    hio_f32s(io, la->beta_prev, (size_t)la->nblocks);
    hio_f32s(io, la->beta_next, (size_t)la->nblocks);
    hio_f32(io, &la->backoff);
    hio_f64(io, &la->gn_mean);
    hio_f64(io, &la->gn_var);
    hio_i32(io, &la->gn_n);
    hio_f64(io, &la->noise_s);
    hio_f64(io, &la->noise_g2);
    hio_i32(io, &la->noise_n);
    hio_i32(io, &la->active_steps);
    hio_i32(io, &la->gated_steps);
    hio_i32(io, &la->jumps);
    hio_i32(io, &la->capped);
    hio_f64(io, &la->beta_sum);
    hio_f64(io, &la->cos_sum);
    hio_i32(io, &la->n_cos);
    if (!io->writing && !io->failed) {  // values no run produces (see predict_io)
        int ok = la->backoff > 0.0f && la->backoff <= 1.0f && isfinite(la->gn_mean) && isfinite(la->gn_var) &&
                 la->gn_var >= 0.0 && la->gn_n >= 0 && la->gn_n < (1 << 30) && isfinite(la->noise_s) &&
                 isfinite(la->noise_g2) && la->noise_n >= 0 && la->noise_n < (1 << 30) && la->active_steps >= 0 &&
                 la->active_steps < (1 << 30) && la->gated_steps >= 0 && la->gated_steps < (1 << 30) && la->jumps >= 0 && la->jumps < (1 << 30) && la->capped >= 0 &&
                 la->capped < (1 << 30) && la->n_cos >= 0 && la->n_cos < (1 << 30);
        for (int b = 0; b < la->nblocks && ok; b++) { ok = isfinite(la->beta_prev[b]) && isfinite(la->beta_next[b]); }
        if (!ok) { hio_fail(io, "look-ahead state out of range"); }
    }
}

#endif // HYBRID_LOOKAHEAD_H
