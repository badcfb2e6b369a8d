/*
 * hybrid/drift.h — the drift family: two rows of the method table that predict along the drift of the
 * weights, m, the EMA of their displacement per step (a single update is mostly noise and bounce; the
 * drift is what carries the run).
 *   lookahead: every measured step, theta += beta_t m fused into AdamW's pass (hybrid/lookahead.h);
 *   predict:   every K measured steps, H steps of theta += c m without a batch, then a Correct step at the
 *              predicted point, which may roll the run back (hybrid/predict.h).
 * Both keep one buffer, the drift (P floats), and the same state; one run may use both (`--hybrid
 * lookahead --predict-steps 2`). Their flags are --hybrid's own table (HybridConfig), the table hybrid mode
 * had before it had methods: `--hybrid 1` is this family with its flags as given (nothing on by default).
 * The keep buffer of a Predict run is the trainer's, idle from the run's first step to its Correct step's
 * backward (the gradients).
 */
#ifndef HYBRID_DRIFT_H
#define HYBRID_DRIFT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"
#include "hybrid/hio.h"
#include "hybrid/method.h"
#include "hybrid/apply.h"
#include "hybrid/lookahead.h"
#include "hybrid/predict.h"
#include "hybrid/metrics.h"

#define HYBRID_PREFILL 0.1f   // the drift's default prefill, a fraction of the schedule
#define DRIFT_LOOKAHEAD 0.5f  // --hybrid lookahead's beta0 when --lookahead is not given (EMA-Nesterov's;
                              // what the development corpus tuned)
#define DRIFT_PREDICT_STEPS 1 // --hybrid predict's H when --predict-steps is not given

// ----------------------------------------------------------------------------
// configuration: --hybrid and the drift family's flags, one field per flag

typedef struct {
    int enabled;                 // --hybrid: 0 off, 1 on (the drift family, flags as given), 2+ a method of the table
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
// pays, so a run turns it on knowingly (--hybrid lookahead, or --lookahead 0.5). The rest are the
// look-ahead's settings once on: 10% prefill, kept on to the end of the schedule (beta_t shrinks with the
// learning rate anyway; why no cool-down: docs/hybrid.md), and the noise gate's threshold, chosen on the
// development corpus for safety above a tuned LR.
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

// ----------------------------------------------------------------------------
// state

typedef struct {
    HybridConfig cfg;           // as the run gives it, with the row's own default switched on
    HybridModel model;
    Lookahead la;
    PredictRuns pr;
    float* coef;                // (nblocks) this Predict step: theta_b += coef_b m_b
    double* stats;              // (nblocks, 3) the last measured pass's <delta,m>, |m|^2, |delta|^2
    double* partial;            // (nblocks, APPLY_CHUNKS, 3) their per-chunk sums
    int step;                   // the step in progress, 0-based
    HybridPhase phase;
    float lr;
    int rolled_back;            // this Correct step rolled its run back
    float check_loss;           // and the loss that made it
    double check_z;
} Drift;

// hybrid mode with nothing on (the defaults): the run is the baseline's, which the facade says at start-up
// rather than let a user believe something else is running
static inline int drift_nothing_on(const HybridConfig* c) {
    return c->enabled && c->lookahead == 0.0f && c->predict_steps == 0;
}

static inline void* drift_init_with(const HybridModel* model, const HybridConfig* cfg, float* const* bufs) {
    Drift* d = (Drift*)callocCheck(1, sizeof(Drift));
    d->cfg = *cfg;
    cfg = &d->cfg;
    d->model = *model;
    int nb = model->nblocks;
    (void)bufs;  // the drift, zeroed: the facade passes it to every pass
    d->coef = (float*)callocCheck((size_t)nb, sizeof(float));
    d->stats = (double*)callocCheck((size_t)nb * 3, sizeof(double));
    d->partial = (double*)callocCheck((size_t)nb * APPLY_CHUNKS * 3, sizeof(double));
    // the window: after the drift's prefill, before the cool-down. With nothing on there is nothing to wait
    // for: every step is a full one, and the log is the baseline's
    int T = model->total_steps;
    int start = drift_nothing_on(cfg) ? 0
              : cfg->warmup >= 0      ? cfg->warmup
                                      : (int)(HYBRID_PREFILL * (float)T + 0.5f);
    int stop = (int)((1.0f - cfg->cooldown) * (float)T);
    float gamma = cfg->drift_decay >= 0.0f ? cfg->drift_decay : lookahead_default_gamma(T);
    lookahead_init(&d->la, cfg->lookahead, gamma, cfg->divergence_threshold, cfg->noise_gate, model->tokens_per_step,
                   start, stop, nb);
    predict_init(&d->pr, cfg->predict_steps, cfg->full_steps, cfg->divergence_threshold, start, stop);
    d->phase = HYBRID_PHASE_WARMUP;
    d->check_loss = NAN;
    return d;
}

// `--hybrid 1`: the flags as given
static inline void* drift_init(const HybridModel* model, const void* config, float* const* bufs, const float* params) {
    (void)params;
    return drift_init_with(model, (const HybridConfig*)config, bufs);
}

// `--hybrid lookahead`: the look-ahead on at DRIFT_LOOKAHEAD unless --lookahead says otherwise
static inline void* drift_init_lookahead(const HybridModel* model, const void* config, float* const* bufs,
                                         const float* params) {
    (void)params;
    HybridConfig c = *(const HybridConfig*)config;
    if (c.lookahead == HYBRID_CONFIG_DEFAULT.lookahead) { c.lookahead = DRIFT_LOOKAHEAD; }
    return drift_init_with(model, &c, bufs);
}

// `--hybrid predict`: Predict runs of DRIFT_PREDICT_STEPS unless --predict-steps says otherwise
static inline void* drift_init_predict(const HybridModel* model, const void* config, float* const* bufs,
                                       const float* params) {
    (void)params;
    HybridConfig c = *(const HybridConfig*)config;
    if (c.predict_steps == HYBRID_CONFIG_DEFAULT.predict_steps) { c.predict_steps = DRIFT_PREDICT_STEPS; }
    return drift_init_with(model, &c, bufs);
}

static inline void drift_free(void* self) {
    Drift* d = (Drift*)self;
    if (d == NULL) { return; }
    lookahead_free(&d->la);
    free(d->coef); free(d->stats); free(d->partial);
    free(d);
}

// ----------------------------------------------------------------------------
// the step

// a Predict step's coefficients, or a measured step's look-ahead (kept for drift_update, or for a device's
// kernel: drift_update_numbers)
static inline void drift_plan(void* self, int step, float lr, HybridPlan* p) {
    Drift* d = (Drift*)self;
    d->step = step;
    d->lr = lr;
    d->rolled_back = 0;
    d->check_loss = NAN;
    d->phase = predict_next(&d->pr, step);
    p->phase = d->phase;
    if (d->phase == HYBRID_PHASE_PREDICT) {
        p->keep = d->pr.run_done == 0;
        predict_coef(&d->pr, d->stats, d->model.nblocks, d->coef);
        predict_step_done(&d->pr);
        p->coef = d->coef;
    } else {
        lookahead_plan(&d->la, step, lr, d->model.lr_peak, d->stats);
        p->check = d->pr.horizon > 0 && d->phase == HYBRID_PHASE_CORRECT;
        p->observe = d->pr.horizon > 0 && d->phase != HYBRID_PHASE_CORRECT;
    }
}

// a Correct step's first micro batch loss: 1 when it jumped (the trainer rolls the run back)
static inline int drift_check(void* self, float loss) {
    Drift* d = (Drift*)self;
    double sd = sqrt(d->pr.loss_var), mean = d->pr.loss_mean;
    int undo = predict_check(&d->pr, d->phase, loss);
    if (undo) {
        d->rolled_back = 1;
        d->check_loss = loss;
        d->check_z = sd > 0.0 ? ((double)loss - mean) / sd : NAN;
    }
    return undo;
}

// CPU reference of a measured step's update: AdamW fused with the drift and the look-ahead, one pass
// (apply_adamw_lookahead); fills the statistics
static inline void drift_update(void* self, const HybridModel* model, const ApplyAdamStep* st, float* params,
                                float* grads, float* m, float* v, float* const* bufs) {
    Drift* d = (Drift*)self;
    apply_adamw_lookahead(params, grads, m, v, bufs[0], st, d->la.gamma, d->la.beta_prev, d->la.beta_next,
                          model->offsets, model->nblocks, d->partial, d->stats);
}

// CPU reference of a Predict step: theta_b += coef_b m_b; the run's first step keeps theta_0 in keep (P)
static inline void drift_predict(void* self, const HybridModel* model, const HybridPlan* p, float* params, float* keep,
                                 float* const* bufs) {
    (void)self;
    apply_predict(params, keep, bufs[0], model->offsets, model->nblocks, p->coef, p->keep);
}

static inline void drift_skip(void* self) {
    Drift* d = (Drift*)self;
    memset(d->stats, 0, (size_t)d->model.nblocks * 3 * sizeof(double));
}

static inline void drift_observe(void* self, const HybridObservation* o) {
    Drift* d = (Drift*)self;
    if (o->phase != HYBRID_PHASE_CORRECT && isfinite(o->loss_micro1)) {
        predict_observe_loss(&d->pr, o->loss_micro1);  // the history a Correct step is judged against
    }
    if (o->phase != HYBRID_PHASE_PREDICT) {
        int ok = isfinite(o->loss);
        lookahead_observe(&d->la, ok ? o->grad_norm : NAN, ok ? o->noise_s : NAN, ok ? o->noise_g2 : NAN, d->stats);
        predict_measured(&d->pr, o->phase);
    }
}

static inline int drift_run_open(const void* self) { return ((const Drift*)self)->pr.run_done > 0; }

static inline int drift_event(const void* self, char* buf, size_t n) {
    const Drift* d = (const Drift*)self;
    if (!d->rolled_back) { return 0; }
    snprintf(buf, n, "hybrid: step %d: loss %.6f at the predicted point (z %.2f): Predict run rolled back",
             d->step + 1, d->check_loss, d->check_z);
    return 1;
}

static inline void drift_what(const void* self, char* buf, size_t n) {
    const Drift* d = (const Drift*)self;
    snprintf(buf, n, "predict %d/%d along the drift", d->pr.run_done, d->pr.horizon);
}

// the look-ahead's beta (before the per-block caps; null outside the window and while the noise gate is
// closed), the position in a Predict run, whether it was rolled back
static inline int drift_step_json(const void* self, char* buf, size_t n) {
    const Drift* d = (const Drift*)self;
    char beta[32], run[16];
    if (d->phase != HYBRID_PHASE_PREDICT && d->la.active) {
        snprintf(beta, sizeof(beta), "%.6g", d->la.beta0 * (d->lr / d->model.lr_peak) * d->la.backoff);
    } else {
        snprintf(beta, sizeof(beta), "null");
    }
    if (d->phase == HYBRID_PHASE_PREDICT) { snprintf(run, sizeof(run), "%d", d->pr.run_done); } else { snprintf(run, sizeof(run), "null"); }
    return snprintf(buf, n, "\"beta\": %s, \"predict_run_step\": %s, \"rollback\": %d", beta, run, d->rolled_back);
}

static inline void drift_print_summary(const void* self, FILE* f) {
    const Drift* d = (const Drift*)self;
    const Lookahead* la = &d->la;
    if (la->beta0 == 0.0f) {  // nothing to report but what the drift measured
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
    if (d->pr.horizon > 0) {
        fprintf(f, "predict runs: %d of %d steps (%d Predict steps), %d rolled back\n", d->pr.runs, d->pr.horizon,
                d->pr.steps, d->pr.rollbacks);
    }
}

static inline int drift_summary_fields(const void* self, char* buf, size_t n) {
    const Drift* d = (const Drift*)self;
    const Lookahead* la = &d->la;
    size_t pos = strlen(buf);
    metrics_field(buf, n, &pos, "lookahead_beta0", la->beta0, 0);
    metrics_field(buf, n, &pos, "lookahead_steps", la->active_steps, 1);
    metrics_field(buf, n, &pos, "lookahead_gated_steps", la->gated_steps, 1);
    metrics_field(buf, n, &pos, "noise_scale_running", lookahead_noise_scale(la), 0);
    metrics_field(buf, n, &pos, "lookahead_mean_beta", lookahead_mean_beta(la), 0);
    metrics_field(buf, n, &pos, "lookahead_jumps", la->jumps, 1);
    metrics_field(buf, n, &pos, "lookahead_caps", la->capped, 1);
    metrics_field(buf, n, &pos, "lookahead_cos", la->n_cos ? la->cos_sum / la->n_cos : 0.0, 0);
    metrics_field(buf, n, &pos, "predict_runs", d->pr.runs, 1);
    metrics_field(buf, n, &pos, "predict_steps", d->pr.steps, 1);
    metrics_field(buf, n, &pos, "rollbacks", d->pr.rollbacks, 1);
    return (int)pos;
}

// the resume record: the window it must match, the look-ahead and Predict runs, the last pass's
// statistics, the drift, and the keep buffer if a Predict run is open (theta_0, for its rollback)
static inline void drift_io(HybridIO* io, void* self, float* const* bufs, float* keep) {
    Drift* d = (Drift*)self;
    hio_expect_i32(io, d->la.start, "--hybrid-warmup");
    hio_expect_i32(io, d->la.stop, "--hybrid-cooldown");
    lookahead_io(io, &d->la);
    predict_io(io, &d->pr);
    hio_f64s(io, d->stats, (size_t)d->model.nblocks * 3);
    if (bufs == NULL || bufs[0] == NULL) { hio_fail(io, "no drift buffer given"); }
    else { hio_f32s(io, bufs[0], d->model.num_params); }
    int has_keep = d->pr.run_done > 0;
    hio_i32(io, &has_keep);
    if (!io->writing && has_keep != (d->pr.run_done > 0)) { hio_fail(io, "keep buffer flag does not match the Predict run"); }
    if (has_keep) {
        if (keep == NULL) { hio_fail(io, "a Predict run is open but no keep buffer was given"); }
        else { hio_f32s(io, keep, d->model.num_params); }
    }
}

// ----------------------------------------------------------------------------
// for a device's fused pass (hybrid/device.cuh): this step's numbers, the mirror of drift_update's arguments

typedef struct {
    ApplyAdamStep adam;         // weight_decay: the host's (nblocks); a device pass passes its own copy
    float gamma;
    const float* beta_prev;     // (nblocks) the look-ahead the weights hold now
    const float* beta_next;     // (nblocks) the one to add
    int nblocks;
    size_t num_params;          // offsets[nblocks]
} HybridUpdate;

static inline HybridUpdate drift_update_numbers(const Drift* d, float lr, float grad_scale, int t) {
    HybridUpdate u;
    const HybridModel* m = &d->model;
    ApplyAdamStep st = {m->beta1, m->beta2, m->eps, m->weight_decay, t, lr, grad_scale, NULL, 0, NULL, 0.0f, 0.0f};
    u.adam = st;
    u.gamma = d->la.gamma;
    u.beta_prev = d->la.beta_prev;
    u.beta_next = d->la.beta_next;
    u.nblocks = m->nblocks;
    u.num_params = m->num_params;
    return u;
}

// the drift rows' own tables are empty: their flags are --hybrid's table
static const ArgTable lookahead_table = {NULL, 0, NULL, NULL, 0, NULL, 0, NULL, NULL};
static const ArgTable predict_table = {NULL, 0, NULL, NULL, 0, NULL, 0, NULL, NULL};

#define DRIFT_ROW(NAME, ABOUT, INIT)                                                                        \
    {NAME, ABOUT, &lookahead_table, 1, 0, 1, 1, INIT, drift_free, drift_plan, drift_update, drift_predict, drift_check,   \
     drift_skip, drift_observe, drift_io, drift_run_open, drift_print_summary, drift_summary_fields,          \
     drift_step_json, drift_event, drift_what, NULL, NULL, 1}  /* on the GPU: hybrid/device.cuh's drift kernels */

static const HybridMethod lookahead_method = DRIFT_ROW(
    "lookahead", "the weights a step ahead along their drift before each gradient (--lookahead beta0, 0.5 unless given)",
    drift_init_lookahead);
static const HybridMethod predict_method = DRIFT_ROW(
    "predict", "Predict runs: H steps along the drift without a batch, then a Correct step that may roll back (--predict-steps H, 1 unless given)",
    drift_init_predict);
// `--hybrid 1`: the drift family with its flags as given (the row no name chooses)
static const HybridMethod drift_method = DRIFT_ROW("drift", "the drift family, its flags as given (nothing on by default)",
                                                   drift_init);

#endif // HYBRID_DRIFT_H
