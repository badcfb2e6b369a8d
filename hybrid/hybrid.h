/*
 * hybrid/hybrid.h — hybrid predictive training, the one interface between a trainer and hybrid/
 * (docs/hybrid.md). What is predicted is the slow drift of the weights, m, the EMA of their displacement
 * per step; a single update is mostly noise and bounce, the drift is what carries the run.
 * Two ways to use it, both in place in the trainer's flat fp32 parameter buffer:
 *   the look-ahead (hybrid/lookahead.h): every measured step, theta += beta_t m fused into AdamW's pass;
 *   Predict runs (hybrid/predict.h): every K measured steps, H steps of theta += c m without a batch,
 *     then a Correct step at the predicted point, which may roll the run back.
 * Per step (a trainer's loop calls the first and the last through hybrid/run.h):
 *     HybridPlan p = hybrid_plan(h, step, lr);   (without --hybrid: a Full step, nothing else)
 *     Predict:  apply_predict(params, keep, drift, offsets, nblocks, p.coef, p.keep) or its kernel
 *     else:     forward the first micro batch; if p.check and hybrid_check(h, loss): apply_rollback
 *               (theta_0 from the keep buffer) and forward again; the other micro batches, backward, clip;
 *               then hybrid_update (the fused AdamW pass) or its kernel (hybrid_update_numbers in,
 *               hybrid_stats_out back)
 *     hybrid_observe(h, loss or NAN, loss_micro1 (p.observe) or NAN, grad_norm or NAN, noise_s, noise_g2
 *                    (or NAN: one micro batch), ms);
 * All bookkeeping lives here; the trainer runs only the per-element loops (hybrid/apply.h) or their
 * kernels, and reads or writes no field of HybridState. The keep buffer is any P-float buffer idle from a
 * Predict run's first step to its Correct step's backward (the gradients). Allocation happens in
 * hybrid_init only. Depends on llmc/args.h (the flag table's rows) and llmc/utils.h (the clock).
 */
#ifndef HYBRID_HYBRID_H
#define HYBRID_HYBRID_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"   // clock_seconds
#include "llmc/args.h"    // ArgSpec: the flag table
#include "hybrid/hio.h"
#include "hybrid/apply.h"
#include "hybrid/lookahead.h"
#include "hybrid/predict.h"
#include "hybrid/metrics.h"

#define HYBRID_MAGIC 20261122
#define HYBRID_VERSION 7  // 6: the drift's decay; 7: the noise gate
#define HYBRID_PREFILL 0.1f   // the drift's default prefill, a fraction of the schedule

// ----------------------------------------------------------------------------
// configuration: one field per flag

typedef struct {
    int enabled;                 // --hybrid [0|1]
    float lookahead;             // --lookahead: beta0 of the look-ahead (0: off, the default)
    float drift_decay;           // --drift-decay: gamma of the drift's EMA (-1: from the schedule)
    int warmup;                  // --hybrid-warmup: the drift's prefill in steps (-1: 10% of the schedule)
    float cooldown;              // --hybrid-cooldown: nothing predicted in this last fraction of the schedule
    int predict_steps;           // --predict-steps: H of a Predict run (0: none)
    int full_steps;              // --full-steps: measured steps between Predict runs (minimum)
    float divergence_threshold;  // --divergence-threshold: z-score of a jump (grad norm, Correct loss)
    float noise_gate;            // --noise-gate: look-ahead only while B_noise >= this x tokens per step (0: always)
} HybridConfig;

// Nothing is on by default: no look-ahead and no Predict runs, so `--hybrid` alone trains as the baseline,
// bit for bit, and says so at start-up. The look-ahead was not safe on text it was never tuned on: where a
// larger model overfits a small corpus it ended worse than the baseline at the tuned LR, and above a tuned
// LR it acts like a larger step (docs/suite.md); the trainer cannot tell those runs from the ones where it
// pays, so a run turns it on knowingly (--lookahead 0.5, EMA-Nesterov's beta0, the value the development
// corpus tuned). The rest are the look-ahead's settings once on: 10% prefill, kept on to the end of the
// schedule (beta_t shrinks with the learning rate anyway; why no cool-down: docs/hybrid.md), and the noise
// gate's threshold, chosen on the development corpus for safety above a tuned LR.
static const HybridConfig HYBRID_CONFIG_DEFAULT = {
    0,      // enabled
    0.0f,   // lookahead
    -1.0f,  // drift_decay
    -1,     // warmup
    0.0f,   // cooldown
    0,      // predict_steps
    4,      // full_steps
    3.0f,   // divergence_threshold
    3.0f,   // noise_gate
};

static inline void hybrid_config_default(HybridConfig* c) { *c = HYBRID_CONFIG_DEFAULT; }

// The flags as a table, one row per HybridConfig field, in the rows of the trainers' parser (llmc/args.h):
// a trainer lists it beside its own (hybrid/run.h), so hybrid mode has no parser of its own.
#define HYBRID_ARG(f, t, field, lo, hi, bare, h) {f, t, offsetof(HybridConfig, field), lo, hi, 0, h, NULL, bare, 0}
static const ArgSpec HYBRID_ARGS[] = {
    HYBRID_ARG("--hybrid", ARG_INT, enabled, 0, 1, "1", "hybrid predictive training (0|1; a bare --hybrid turns it on)"),
    HYBRID_ARG("--lookahead", ARG_FLOAT, lookahead, 0, 0.95, NULL, "hybrid: look-ahead along the drift, beta0 (0: off, the default; 0.5 is what the development corpus tuned; README says where it paid and where it cost)"),
    HYBRID_ARG("--drift-decay", ARG_FLOAT, drift_decay, -1, 0.9999, NULL, "hybrid: EMA decay of the drift (-1: a memory of 10% of the schedule, at most 100 steps: 0.99)"),
    HYBRID_ARG("--hybrid-warmup", ARG_INT, warmup, -1, 1 << 30, NULL, "hybrid: steps of drift prefill before any prediction (-1: 10% of the schedule)"),
    HYBRID_ARG("--hybrid-cooldown", ARG_FLOAT, cooldown, 0, 1, NULL, "hybrid: nothing predicted in this last fraction of the schedule"),
    HYBRID_ARG("--predict-steps", ARG_INT, predict_steps, 0, 16, NULL, "hybrid: steps of a Predict run along the drift (0: none)"),
    HYBRID_ARG("--full-steps", ARG_INT, full_steps, 1, 1 << 20, NULL, "hybrid: min measured steps between Predict runs"),
    HYBRID_ARG("--divergence-threshold", ARG_FLOAT, divergence_threshold, 0.1, 1000, NULL, "hybrid: z-score of a jump (grad norm backs beta off; Correct loss rolls back)"),
    HYBRID_ARG("--noise-gate", ARG_FLOAT, noise_gate, 0, 1e6, NULL, "hybrid: look-ahead only while the gradient noise scale >= this x tokens per step (0: always; measured from 2+ micro batches)"),
};
#define NUM_HYBRID_ARGS ((int)(sizeof(HYBRID_ARGS) / sizeof(HYBRID_ARGS[0])))

// a hybrid flag set without hybrid mode would be silently ignored: refused, naming the flag
static inline void hybrid_config_check(const void* config) {
    const HybridConfig* c = (const HybridConfig*)config;
    const HybridConfig* d = &HYBRID_CONFIG_DEFAULT;
    if (c->enabled) { return; }
    if (c->lookahead != d->lookahead) { fatal("flag --lookahead: needs hybrid mode (--hybrid)"); }
    if (c->predict_steps != d->predict_steps) { fatal("flag --predict-steps: needs hybrid mode (--hybrid)"); }
    if (c->drift_decay != d->drift_decay) { fatal("flag --drift-decay: needs hybrid mode (--hybrid)"); }
}

// ----------------------------------------------------------------------------
// state

typedef struct {
    HybridConfig cfg;
    int nblocks;
    size_t num_params;
    size_t* offsets;            // (nblocks+1) block offsets in floats
    int total_steps;
    float lr_peak, beta1, beta2, eps;
    float* weight_decay;        // (nblocks) AdamW's decoupled weight decay per block
    Lookahead la;
    PredictRuns pr;
    HybridMetrics metrics;
    float* coef;                // (nblocks) this Predict step: theta_b += coef_b m_b
    double* stats;              // (nblocks, 3) the last measured pass's <delta,m>, |m|^2, |delta|^2
    double* partial;            // (nblocks, APPLY_CHUNKS, 3) their per-chunk sums
    uint16_t* params16;         // (P) the trainer's bf16 weight copy, rounded in the fused pass; NULL: none
    // the step in progress
    int step;                   // 0-based
    HybridPhase phase;
    float lr;
    double decide_ms;           // this step's time in hybrid/ so far
    int rolled_back;            // this Correct step rolled its run back
    float check_loss;           // and the loss that made it
    double check_z;
} HybridState;

// what the trainer does in this step
typedef struct {
    HybridPhase phase;
    const float* coef;          // Predict: (nblocks) coefficients along the drift
    int keep;                   // Predict: the run's first step, which keeps theta_0 in the keep buffer
    int check;                  // Correct steps: the first micro batch's loss to hybrid_check before the backward
    int observe;                // other measured steps (with Predict runs): that loss to hybrid_observe, after
                                // the step (no wait in its middle: on a GPU the loss is a copy to the host)
} HybridPlan;

static inline double hybrid_now_ms(void) { return clock_seconds() * 1e3; }

// hybrid mode with nothing on (the defaults): the run is the baseline's, which hybrid_setup says at start-up
// rather than let a user believe something else is running
static inline int hybrid_nothing_on(const HybridConfig* c) {
    return c->enabled && c->lookahead == 0.0f && c->predict_steps == 0;
}

// offsets: (nblocks+1) block boundaries in floats (offsets[nblocks] = P); lr_peak and the AdamW
// hyper-parameters are the trainer's (weight_decay: (nblocks), the decay each block gets);
// total_steps is the schedule length, tokens_per_step what one measured step trains on (all micro
// batches of all processes) in micro_batches backward passes.
static inline void hybrid_init(HybridState* h, const HybridConfig* cfg, const size_t* offsets, int nblocks,
                               int total_steps, double tokens_per_step, float lr_peak, float beta1, float beta2,
                               float eps, const float* weight_decay) {
    memset(h, 0, sizeof(*h));
    h->cfg = *cfg;
    cfg = &h->cfg;
    h->nblocks = nblocks;
    h->num_params = offsets[nblocks];
    h->total_steps = total_steps;
    h->lr_peak = lr_peak; h->beta1 = beta1; h->beta2 = beta2; h->eps = eps;
    h->offsets = (size_t*)malloc((size_t)(nblocks + 1) * sizeof(size_t));
    h->weight_decay = (float*)malloc((size_t)nblocks * sizeof(float));
    h->coef = (float*)calloc((size_t)nblocks, sizeof(float));
    h->stats = (double*)calloc((size_t)nblocks * 3, sizeof(double));
    h->partial = (double*)calloc((size_t)nblocks * APPLY_CHUNKS * 3, sizeof(double));
    if (!h->offsets || !h->weight_decay || !h->coef || !h->stats || !h->partial) {
        fprintf(stderr, "error: hybrid_init: out of memory (%d blocks)\n", nblocks);
        exit(EXIT_FAILURE);
    }
    memcpy(h->offsets, offsets, (size_t)(nblocks + 1) * sizeof(size_t));
    memcpy(h->weight_decay, weight_decay, (size_t)nblocks * sizeof(float));
    // the window: after the drift's prefill, before the cool-down. With nothing on there is nothing to wait
    // for: every step is a full one, and the log is the baseline's
    int start = hybrid_nothing_on(cfg) ? 0
              : cfg->warmup >= 0      ? cfg->warmup
                                      : (int)(HYBRID_PREFILL * (float)total_steps + 0.5f);
    int stop = (int)((1.0f - cfg->cooldown) * (float)total_steps);
    float gamma = cfg->drift_decay >= 0.0f ? cfg->drift_decay : lookahead_default_gamma(total_steps);
    lookahead_init(&h->la, cfg->lookahead, gamma, cfg->divergence_threshold, cfg->noise_gate, tokens_per_step, start,
                   stop, nblocks);
    predict_init(&h->pr, cfg->predict_steps, cfg->full_steps, cfg->divergence_threshold, start, stop);
    metrics_init(&h->metrics);
    h->phase = HYBRID_PHASE_WARMUP;
    h->check_loss = NAN;
}

static inline void hybrid_free(HybridState* h) {
    lookahead_free(&h->la);
    free(h->offsets); free(h->weight_decay); free(h->coef); free(h->stats); free(h->partial);
    memset(h, 0, sizeof(*h));
}

// ----------------------------------------------------------------------------
// the step

// the plan of step `step` (0-based) at learning rate lr: a Predict step's coefficients, or a measured
// step's look-ahead (kept here for hybrid_update, or for the trainer's kernel: hybrid_update_numbers).
// A state that hybrid_init never saw (zeroed: hybrid mode off) plans a Full step.
static inline HybridPlan hybrid_plan(HybridState* h, int step, float lr) {
    HybridPlan p;
    memset(&p, 0, sizeof(p));
    if (!h->cfg.enabled) { p.phase = HYBRID_PHASE_FULL; return p; }  // hybrid mode off: a plain Full step
    double t0 = hybrid_now_ms();
    h->step = step;
    h->lr = lr;
    h->rolled_back = 0;
    h->check_loss = NAN;
    h->phase = predict_next(&h->pr, step);
    p.phase = h->phase;
    if (h->phase == HYBRID_PHASE_PREDICT) {
        p.keep = h->pr.run_done == 0;
        predict_coef(&h->pr, h->stats, h->nblocks, h->coef);
        predict_step_done(&h->pr);
        p.coef = h->coef;
    } else {
        lookahead_plan(&h->la, step, lr, h->lr_peak, h->stats);
        p.check = h->pr.horizon > 0 && h->phase == HYBRID_PHASE_CORRECT;
        p.observe = h->pr.horizon > 0 && h->phase != HYBRID_PHASE_CORRECT;
    }
    h->decide_ms = hybrid_now_ms() - t0;
    return p;
}

// a measured step's first micro batch loss (when the plan asked for it). Returns 1 on a Correct step whose
// loss jumped: the trainer restores theta_0 from its keep buffer and runs the forward again.
static inline int hybrid_check(HybridState* h, float loss) {
    double sd = sqrt(h->pr.loss_var), mean = h->pr.loss_mean;
    int undo = predict_check(&h->pr, h->phase, loss);
    if (undo) {
        h->rolled_back = 1;
        h->check_loss = loss;
        h->check_z = sd > 0.0 ? ((double)loss - mean) / sd : NAN;
    }
    return undo;
}

// CPU reference of a measured step's update: AdamW step t at the step's lr with the drift and the
// look-ahead, one pass (apply_adamw_lookahead); fills h->stats. grads: the step's gradients, grad_scale
// their clipping factor, left zero (as gpt2_update leaves them); drift: (P).
static inline void hybrid_update(HybridState* h, float* params, float* grads, float* m, float* v, float* drift,
                                 float grad_scale, int t) {
    ApplyAdamStep st = {h->beta1, h->beta2, h->eps, h->weight_decay, t, h->lr, grad_scale, h->params16, 1};
    apply_adamw_lookahead(params, grads, m, v, drift, &st, h->la.gamma, h->la.beta_prev, h->la.beta_next,
                          h->offsets, h->nblocks, h->partial, h->stats);
}

// what a device's fused pass needs of this step's update (the mirror of hybrid_update's arguments): the
// AdamW step, the drift's decay, the look-ahead's per-block betas (host arrays, nblocks each), and
// where the blocks end (the elements past it, padding, take a plain AdamW step)
typedef struct {
    ApplyAdamStep adam;         // weight_decay: the host's (nblocks); a device pass passes its own copy
    float gamma;
    const float* beta_prev;     // (nblocks) the look-ahead the weights hold now
    const float* beta_next;     // (nblocks) the one to add
    int nblocks;
    size_t num_params;          // offsets[nblocks]
} HybridUpdate;

static inline HybridUpdate hybrid_update_numbers(const HybridState* h, float grad_scale, int t) {
    HybridUpdate u;
    ApplyAdamStep st = {h->beta1, h->beta2, h->eps, h->weight_decay, t, h->lr, grad_scale, NULL, 0};
    u.adam = st;
    u.gamma = h->la.gamma;
    u.beta_prev = h->la.beta_prev;
    u.beta_next = h->la.beta_next;
    u.nblocks = h->nblocks;
    u.num_params = h->num_params;
    return u;
}

// the parameter blocks' boundaries, (nblocks+1) floats into the flat parameters (a device keeps a copy)
static inline const size_t* hybrid_block_offsets(const HybridState* h) { return h->offsets; }

// where a device's fused pass returns its statistics, (nblocks, 3) doubles on the host: <delta,m>, |m|^2,
// |delta|^2 per block (as hybrid_update fills them), before hybrid_observe
static inline double* hybrid_stats_out(HybridState* h) { return h->stats; }

// CPU reference of a Predict step (the plan's): theta_b += coef_b m_b along the drift (P), in params (P);
// the run's first step keeps theta_0 in keep (P)
static inline void hybrid_apply_predict(const HybridState* h, const HybridPlan* p, float* params, float* keep,
                                        const float* drift) {
    apply_predict(params, keep, drift, h->offsets, h->nblocks, p->coef, p->keep);
}

// the trainer keeps a bf16 copy of the weights (P values, NULL: none): hybrid_update rounds it as it writes
// the weights, as the trainer's own AdamW pass does
static inline void hybrid_set_bf16_copy(HybridState* h, uint16_t* params16) { h->params16 = params16; }

// a measured step that was skipped (non-finite loss or norm): no update, so no statistics
static inline void hybrid_skip_update(HybridState* h) {
    memset(h->stats, 0, (size_t)h->nblocks * 3 * sizeof(double));
}

// end of every step: loss and grad_norm NAN on Predict steps and skipped steps; loss_micro1 the first micro
// batch's loss where the plan asked for it (observe; even if the step was then skipped), else NAN; noise_s,
// noise_g2 the step's estimates of the gradient noise scale's terms, the noise's trace S and |G|^2
// (llmc/run.h), NAN where not measured; ms the step's wall time (hybrid/'s own time for the step is added
// to it and returned)
static inline double hybrid_observe(HybridState* h, float loss, float loss_micro1, float grad_norm, double noise_s,
                                   double noise_g2, double ms) {
    double t0 = hybrid_now_ms();
    if (h->phase != HYBRID_PHASE_CORRECT && isfinite(loss_micro1)) {
        predict_observe_loss(&h->pr, loss_micro1);  // p.observe: the history a Correct step is judged against
    }
    if (h->phase != HYBRID_PHASE_PREDICT) {
        int ok = isfinite(loss);
        lookahead_observe(&h->la, ok ? grad_norm : NAN, ok ? noise_s : NAN, ok ? noise_g2 : NAN, h->stats);
        predict_measured(&h->pr, h->phase);
    }
    double own = h->decide_ms + (hybrid_now_ms() - t0);
    h->metrics.steps[h->phase] += 1;
    h->metrics.ms[h->phase] += ms + own;
    h->metrics.decide_ms += own;
    return own;
}

// the rollback of this step as one log line; returns 0 if there was none
static inline int hybrid_take_event(const HybridState* h, char* buf, size_t n) {
    if (!h->rolled_back) { return 0; }
    snprintf(buf, n, "hybrid: step %d: loss %.6f at the predicted point (z %.2f): Predict run rolled back",
             h->step + 1, h->check_loss, h->check_z);
    return 1;
}

// "phase" of the step, for the step line and metrics.jsonl
static inline const char* hybrid_phase_name(const HybridState* h) { return predict_phase_name(h->phase); }

// the hybrid fields of this step's metrics.jsonl line: the look-ahead's beta (before the per-block caps;
// null outside the window and while the noise gate is closed), the position in a Predict run, whether it was rolled back
static inline int hybrid_step_json(const HybridState* h, char* buf, size_t n) {
    char beta[32], run[16];
    if (h->phase != HYBRID_PHASE_PREDICT && h->la.active) { snprintf(beta, sizeof(beta), "%.6g", h->la.beta0 * (h->lr / h->lr_peak) * h->la.backoff); }
    else { snprintf(beta, sizeof(beta), "null"); }
    if (h->phase == HYBRID_PHASE_PREDICT) { snprintf(run, sizeof(run), "%d", h->pr.run_done); } else { snprintf(run, sizeof(run), "null"); }
    return snprintf(buf, n, "\"beta\": %s, \"predict_run_step\": %s, \"rollback\": %d", beta, run, h->rolled_back);
}

// With one micro batch per step (over every process) B_noise cannot be measured: the noise gate cannot
// close and the look-ahead runs on every step of its window, whatever the batch is against the noise scale
// (near or above it, that costs loss: docs/hybrid_usage.md). hybrid_setup says so at start-up, before a
// step is spent, with what to do about it.
static inline int hybrid_gate_blind(const HybridConfig* c, int micro_batches) {
    return c->enabled && c->lookahead > 0.0f && c->noise_gate > 0.0f && micro_batches < 2;
}

static inline void hybrid_print_gate_blind(float beta0, double tokens_per_step, FILE* f) {
    fprintf(f, "noise gate: blind at one micro batch per step: the gradient noise scale cannot be measured, so the "
               "look-ahead runs ungated, at beta0 %g. It pays well below the noise scale and at or below a tuned LR, "
               "and can cost near or above either. To know which: a short run with -d a multiple of -b x -t (2+ micro "
               "batches) prints the noise scale at its end; if %.0f tokens per step is near or above it, add "
               "--lookahead 0 (or train with 2+ micro batches and the gate decides).\n", beta0, tokens_per_step);
}

static inline void hybrid_print_nothing_on(FILE* f) {
    fprintf(f, "hybrid: nothing is on: the look-ahead and Predict runs are off by default, so this run trains as the "
               "baseline, bit for bit. --lookahead 0.5 turns the look-ahead on (with -d at 2+ micro batches per step "
               "the noise gate decides where); it paid on some held-out corpora and cost on others (README).\n");
}

static inline void hybrid_print_summary(const HybridState* h, FILE* f) {
    metrics_print_table(&h->metrics, f);
    const Lookahead* la = &h->la;
    if (la->beta0 == 0.0f) {  // the default: nothing to report but what the drift measured
        fprintf(f, "look-ahead: off (--lookahead gives beta0); drift decay %.4g, mean cos(update, drift) %.3f\n", la->gamma,
                la->n_cos ? la->cos_sum / la->n_cos : 0.0);
    } else {
        fprintf(f, "look-ahead: beta0 %.3g, drift decay %.4g, %d steps with a look-ahead (mean beta %.3f), %d grad-norm jumps "
                   "backed it off, %d block caps; mean cos(update, drift) %.3f\n", la->beta0, la->gamma, la->active_steps,
                lookahead_mean_beta(la), la->jumps, la->capped, la->n_cos ? la->cos_sum / la->n_cos : 0.0);
    }
    double bn = lookahead_noise_scale(la);
    if (la->noise_gate > 0.0f && la->beta0 > 0.0f && la->noise_n > 0) {
        fprintf(f, "noise gate: look-ahead only while B_noise >= %g x %.0f tokens per step: closed on %d of %d window steps; "
                   "B_noise at the end %.0f tokens\n", la->noise_gate, la->tokens, la->gated_steps,
                la->gated_steps + la->active_steps, bn);
    } else if (la->noise_gate > 0.0f && la->beta0 > 0.0f) {
        fprintf(f, "noise gate: open (one micro batch per step: B_noise not measured)\n");
    }
    if (h->pr.horizon > 0) {
        fprintf(f, "predict runs: %d of %d steps (%d Predict steps), %d rolled back\n", h->pr.runs, h->pr.horizon,
                h->pr.steps, h->pr.rollbacks);
    }
}

// the summary's "key": value pairs (no braces), for the trainer's summary.json
static inline int hybrid_summary_fields(const HybridState* h, char* buf, size_t n) {
    size_t pos = metrics_summary_fields(&h->metrics, buf, n);
    const Lookahead* la = &h->la;
    metrics_field(buf, n, &pos, "lookahead_beta0", la->beta0, 0);
    metrics_field(buf, n, &pos, "lookahead_steps", la->active_steps, 1);
    metrics_field(buf, n, &pos, "lookahead_gated_steps", la->gated_steps, 1);
    metrics_field(buf, n, &pos, "noise_scale_running", lookahead_noise_scale(la), 0);
    metrics_field(buf, n, &pos, "lookahead_mean_beta", lookahead_mean_beta(la), 0);
    metrics_field(buf, n, &pos, "lookahead_jumps", la->jumps, 1);
    metrics_field(buf, n, &pos, "lookahead_caps", la->capped, 1);
    metrics_field(buf, n, &pos, "lookahead_cos", la->n_cos ? la->cos_sum / la->n_cos : 0.0, 0);
    metrics_field(buf, n, &pos, "predict_runs", h->pr.runs, 1);
    metrics_field(buf, n, &pos, "predict_steps", h->pr.steps, 1);
    metrics_field(buf, n, &pos, "rollbacks", h->pr.rollbacks, 1);
    return (int)pos;
}

// ----------------------------------------------------------------------------
// save / load: magic, version, the configuration it must match, every component, the drift buffer, the
// keep buffer if a Predict run is open (theta_0, for its rollback), and a checksum.

static inline void hybrid_io(HybridIO* io, HybridState* h, float* drift, float* keep) {
    hio_expect_i32(io, HYBRID_MAGIC, "magic");
    hio_expect_i32(io, HYBRID_VERSION, "version");
    hio_expect_i32(io, h->nblocks, "parameter blocks");
    uint64_t P = h->num_params;
    hio_u64(io, &P);
    if (!io->writing && !io->failed && P != h->num_params) { hio_fail(io, "parameter count differs from the model"); }
    hio_expect_i32(io, h->total_steps, "schedule length");
    hio_expect_i32(io, h->la.start, "--hybrid-warmup");
    hio_expect_i32(io, h->la.stop, "--hybrid-cooldown");
    lookahead_io(io, &h->la);
    predict_io(io, &h->pr);
    metrics_io(io, &h->metrics);
    hio_f64s(io, h->stats, (size_t)h->nblocks * 3);
    if (drift == NULL) { hio_fail(io, "no drift buffer given"); }
    else { hio_f32s(io, drift, h->num_params); }
    int has_keep = h->pr.run_done > 0;
    hio_i32(io, &has_keep);
    if (!io->writing && has_keep != (h->pr.run_done > 0)) { hio_fail(io, "keep buffer flag does not match the Predict run"); }
    if (has_keep) {
        if (keep == NULL) { hio_fail(io, "a Predict run is open but no keep buffer was given"); }
        else { hio_f32s(io, keep, h->num_params); }
    }
}

// whether a checkpoint taken now must save the keep buffer (an open Predict run)
static inline int hybrid_run_open(const HybridState* h) { return h->pr.run_done > 0; }

// save to a stream; returns 0, or -1 with the reason in err
static inline int hybrid_save(HybridState* h, FILE* f, const float* drift, const float* keep, char* err, size_t errn) {
    HybridIO io;
    hio_begin(&io, 1, f, NULL, 0);
    hybrid_io(&io, h, (float*)drift, (float*)keep);
    int rc = hio_finish(&io);
    if (rc != 0 && err != NULL) { snprintf(err, errn, "%s", io.error); }
    return rc;
}

// load from a stream into an initialised state of the same configuration; returns 0, or -1 with
// the reason in err (the state is then unusable: the caller exits)
static inline int hybrid_load(HybridState* h, FILE* f, float* drift, float* keep, char* err, size_t errn) {
    HybridIO io;
    hio_begin(&io, 0, f, NULL, 0);
    hybrid_io(&io, h, drift, keep);
    int rc = hio_finish(&io);
    if (rc == 0 && fgetc(f) != EOF) { hio_fail(&io, "trailing bytes after the checksum"); rc = -1; }
    if (rc != 0 && err != NULL) { snprintf(err, errn, "%s", io.error); }
    return rc;
}

// the same to and from a byte buffer: size first (buf NULL), then save; load checks the size
static inline size_t hybrid_state_size(HybridState* h, const float* drift, const float* keep) {
    HybridIO io;
    hio_begin(&io, 1, NULL, NULL, 0);
    hybrid_io(&io, h, (float*)drift, (float*)keep);
    hio_finish(&io);
    return io.pos;
}

static inline int hybrid_save_buffer(HybridState* h, void* buf, size_t cap, const float* drift, const float* keep) {
    HybridIO io;
    hio_begin(&io, 1, NULL, buf, cap);
    hybrid_io(&io, h, (float*)drift, (float*)keep);
    return hio_finish(&io);
}

static inline int hybrid_load_buffer(HybridState* h, const void* buf, size_t n, float* drift, float* keep, char* err, size_t errn) {
    HybridIO io;
    hio_begin(&io, 0, NULL, (void*)buf, n);
    hybrid_io(&io, h, drift, keep);
    int rc = hio_finish(&io);
    if (rc == 0 && io.pos != n) { hio_fail(&io, "trailing bytes after the checksum"); rc = -1; }
    if (rc != 0 && err != NULL) { snprintf(err, errn, "%s", io.error); }
    return rc;
}

#endif // HYBRID_HYBRID_H
