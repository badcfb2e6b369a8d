/*
 * hybrid/hybrid.h — hybrid predictive training, the facade a trainer drives (docs/hybrid.md).
 * A trainer that owns a flat fp32 parameter buffer split into blocks (one per tensor per layer)
 * calls, per step:
 *     phase = hybrid_begin_step(h, step, lr);
 *     Predict:  apply h->coef with hybrid_apply_predict (CPU) or its kernel; no forward, no backward,
 *               no batch; optionally a forward-only check when hybrid_micro_due(h) (hybrid_micro_result)
 *     otherwise: forward; on a Correct step hybrid_correct_check(h, loss) may answer ACTION_ROLLBACK
 *               (the monitor's, or a probe run's before the value test passed: it only measures):
 *               then hybrid_rollback (or its kernel), forward again and hybrid_rollback_loss;
 *               backward, clip; then AdamW fused with the statistics: hybrid_update (or its kernel,
 *               which fills h->stats)
 *     probes:   where hybrid_probe_wanted(h), a loss for the value test (hybrid/value.h): on a Predict
 *               step before its update and on a Correct step after its backward, a forward on the next
 *               batch, peeked (not consumed); on a Full step its first micro batch's loss; each given
 *               to hybrid_probe_loss
 *     hybrid_end_step(h, loss or NAN, grad_norm or NAN, ms);
 * Everything decided here is host-side and small (phases, horizons, per-block scales, rollback
 * coefficients); everything per element is in hybrid/apply.h, which a GPU trainer mirrors.
 * For exact rollback the trainer lends a "keep" buffer: any P-float buffer that is idle from a
 * Predict run's first step to its Correct step's backward (on the CPU: the gradients); see apply.h.
 * Allocation happens in hybrid_init only. Depends on libc and the other hybrid/ headers.
 */
#ifndef HYBRID_HYBRID_H
#define HYBRID_HYBRID_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "hybrid/hmath.h"
#include "hybrid/hio.h"
#include "hybrid/features.h"
#include "hybrid/controller.h"
#include "hybrid/predictor.h"
#include "hybrid/residual.h"
#include "hybrid/monitor.h"
#include "hybrid/bandit.h"
#include "hybrid/metrics.h"
#include "hybrid/apply.h"
#include "hybrid/value.h"
#include "hybrid/lookahead.h"

#define HYBRID_MAGIC 20261122
#define HYBRID_VERSION 4
#define HYBRID_RESIDUAL_CAPACITY 64
#define HYBRID_MAX_SCALE 4.0f       // |s_b| cap: a scale beyond 4 steps' worth is an outlier, not a trend
#define HYBRID_RESIDUAL_GAIN 0.5f   // share of the similarity-weighted residual added to a prediction

// ----------------------------------------------------------------------------
// configuration: one field per flag

typedef struct {
    int enabled;                 // --hybrid [0|1]
    int predictor;               // --predictor momentum|linear|mlp|rssm|nesterov|scaled
    int warmup;                  // --hybrid-warmup: Full steps of statistics only
    int full_steps;              // --full-steps: Full/Correct steps between Predict runs (minimum)
    int max_predict_steps;       // --max-predict-steps: longest Predict run
    float confidence_threshold;  // --confidence-threshold: Predict only above this confidence
    float divergence_threshold;  // --divergence-threshold: monitor z-score / ratio threshold
    int correction_interval;     // --correction-interval: forward-only check every N Predict steps (0 = off)
    float cooldown;              // --hybrid-cooldown: no Predict in this last fraction of the schedule
    int adaptive;                // --adaptive: horizons from the LinUCB bandit (else from confidence)
    int direction;               // --direction ema|adam
    float direction_beta;        // --direction-beta: EMA decay of the direction buffer
    float kappa;                 // --kappa: the scale of --predictor scaled
    float lookahead;             // --lookahead: beta0 of the look-ahead along the drift (0: off; hybrid/lookahead.h)
} HybridConfig;

// Conservative defaults (docs/hybrid.md §10): one Predict step per two backward steps, a long-memory
// direction (beta 0.98, the only setting that helped in the prototype), no Predict in the last 20%.
static inline void hybrid_config_default(HybridConfig* c) {
    c->enabled = 0;
    c->predictor = PREDICTOR_LINEAR;
    c->warmup = 20;
    c->full_steps = 2;
    c->max_predict_steps = 1;
    c->confidence_threshold = 0.05f;
    c->divergence_threshold = 3.0f;
    c->correction_interval = 0;
    c->cooldown = 0.2f;
    c->adaptive = 0;
    c->direction = DIRECTION_EMA;
    c->direction_beta = 0.98f;
    c->kappa = 1.0f;
    c->lookahead = 0.0f;
}

// The flags as a table, one row per HybridConfig field. The trainer's command-line parser
// (llmc/args.h through llmc/config.h) reads this table, so hybrid mode has no parser of its own.
// An enum field's value is the index of its name in `choices` ("a|b|c").
typedef enum { HYBRID_FLAG_INT, HYBRID_FLAG_FLOAT, HYBRID_FLAG_CHOICE } HybridFlagType;
typedef struct {
    const char* flag;
    HybridFlagType type;
    size_t offset;          // into HybridConfig
    double min, max;        // valid range (numbers)
    const char* choices;    // HYBRID_FLAG_CHOICE: "name0|name1|..."
    const char* bare;       // value of the flag given without one (a bare --hybrid), or NULL
    const char* help;
} HybridFlag;

#define HYBRID_FLAG(f, t, field, lo, hi, ch, bare, h) {f, t, offsetof(HybridConfig, field), lo, hi, ch, bare, h}
static const HybridFlag HYBRID_FLAGS[] = {
    HYBRID_FLAG("--hybrid", HYBRID_FLAG_INT, enabled, 0, 1, NULL, "1", "hybrid predictive training (0|1; a bare --hybrid turns it on)"),
    HYBRID_FLAG("--predictor", HYBRID_FLAG_CHOICE, predictor, 0, 0, "momentum|linear|mlp|rssm|nesterov|scaled", NULL, "hybrid: predictor of the next loss"),
    HYBRID_FLAG("--hybrid-warmup", HYBRID_FLAG_INT, warmup, 0, 1 << 30, NULL, NULL, "hybrid: Full steps before any prediction"),
    HYBRID_FLAG("--full-steps", HYBRID_FLAG_INT, full_steps, 1, 1 << 20, NULL, NULL, "hybrid: min Full/Correct steps between Predict runs"),
    HYBRID_FLAG("--max-predict-steps", HYBRID_FLAG_INT, max_predict_steps, 0, 16, NULL, NULL, "hybrid: longest Predict run"),
    HYBRID_FLAG("--confidence-threshold", HYBRID_FLAG_FLOAT, confidence_threshold, 0, 1, NULL, NULL, "hybrid: Predict only above this confidence"),
    HYBRID_FLAG("--divergence-threshold", HYBRID_FLAG_FLOAT, divergence_threshold, 0.1, 1000, NULL, NULL, "hybrid: monitor z-score / grad-norm ratio"),
    HYBRID_FLAG("--correction-interval", HYBRID_FLAG_INT, correction_interval, 0, 16, NULL, NULL, "hybrid: forward-only check every N Predict steps (0: off)"),
    HYBRID_FLAG("--hybrid-cooldown", HYBRID_FLAG_FLOAT, cooldown, 0, 1, NULL, NULL, "hybrid: no Predict in this last fraction of the schedule"),
    HYBRID_FLAG("--adaptive", HYBRID_FLAG_INT, adaptive, 0, 1, NULL, NULL, "hybrid: horizon from a LinUCB bandit (not bit-reproducible: wall-clock reward)"),
    HYBRID_FLAG("--direction", HYBRID_FLAG_CHOICE, direction, 0, 0, "ema|adam", NULL, "hybrid: predicted direction, EMA of updates or Adam's mhat/sqrt(vhat)"),
    HYBRID_FLAG("--direction-beta", HYBRID_FLAG_FLOAT, direction_beta, 0, 0.9999, NULL, NULL, "hybrid: EMA decay of the direction buffer"),
    HYBRID_FLAG("--kappa", HYBRID_FLAG_FLOAT, kappa, 0, HYBRID_MAX_SCALE, NULL, NULL, "hybrid: scale of --predictor scaled, times lr_t/lr_peak"),
    HYBRID_FLAG("--lookahead", HYBRID_FLAG_FLOAT, lookahead, 0, 0.95, NULL, NULL, "hybrid: look-ahead along the drift, beta0 (0: off; replaces Predict runs)"),
};
#define NUM_HYBRID_FLAGS ((int)(sizeof(HYBRID_FLAGS) / sizeof(HYBRID_FLAGS[0])))

// ----------------------------------------------------------------------------
// state

typedef struct {
    HybridConfig cfg;
    int nblocks, outputs;       // outputs = nblocks scales + 1 loss change
    size_t num_params;
    size_t* offsets;            // (nblocks+1) block offsets in floats
    int total_steps;
    float lr_peak, beta1, beta2, eps;
    float* weight_decay;        // (nblocks) AdamW's decoupled weight decay per block
    int micro_batches;          // forward-backward passes per Full step (hybrid_set_micro_batches)

    Controller ctrl;
    FeatureNormalizer fnorm;
    Predictor pred;
    ResidualStore store;
    Monitor mon;
    ValueTest value;
    Bandit bandit;
    Lookahead la;
    HybridMetrics metrics;

    // decisions for the current step
    int step;                   // 0-based
    HybridPhase phase;
    float lr;
    float* coef;                // (nblocks) this Predict step: theta_b += coef_b * d_b
    float* run_scale;           // (nblocks) mean predicted scale over the current run
    int run_steps;              // Predict steps applied in the current run (keep buffer live if > 0)
    int probing;                // the current run is probed (the value test)
    double* stats;              // (nblocks, 3) filled by hybrid_update: <dtheta,d>, |d|^2, |dtheta|^2
    double* partial;            // (nblocks, APPLY_CHUNKS, 3) its per-chunk sums

    // features: x is standardised from the last measured step; x_prev is the input of its target
    float raw[FEATURES_DIM], x[FEATURES_DIM], x_prev[FEATURES_DIM], run_x[FEATURES_DIM];
    float* y;                   // (outputs) targets / scratch
    float* yhat;                // (outputs) prediction
    float* corr;                // (outputs) residual correction
    int have_x_prev;

    // scalars of the recent past
    int adam_t;                 // AdamW step count of the optimizer state (adam direction)
    int measured;               // measured steps so far
    int steps_since_measured;   // steps since the last measured step (for the loss target)
    float last_loss;            // loss of the last measured step
    float loss_fast, loss_slow; // loss EMAs (trend = fast - slow)
    float grad_norm, gn_ema;
    float cos_mean, cos_ema;    // cosine of real updates with the direction, last step / EMA
    float scale_mean;           // mean target scale of the last measured step
    float dloss_ema, full_ms_ema; // per-step loss change and ms of Full steps (bandit baseline)
    float resid_ema;            // EMA of |Correct loss residual| in noise units
    float spread;               // predictor ensemble spread at the last prediction
    int since_predict;
    float confidence;
    float run_start_loss, predicted_loss, correct_loss;
    double cycle_ms;
    int run_arm;
    int rolled_back;            // this Correct step rolled back
    int event_pending;          // the monitor acted since the last hybrid_take_event
} HybridState;

static inline float hybrid_sigma(const HybridState* h) { return monitor_sigma(&h->mon); }

static inline double hybrid_now_ms(void) { return hmath_seconds() * 1e3; }

// offsets: (nblocks+1) block boundaries in floats (offsets[nblocks] = P); lr_peak and the AdamW
// hyper-parameters are the trainer's (weight_decay: (nblocks), the decay each block gets);
// total_steps is the schedule length; seed initialises the learned predictors.
static inline void hybrid_init(HybridState* h, const HybridConfig* cfg, const size_t* offsets, int nblocks,
                               int total_steps, float lr_peak, float beta1, float beta2, float eps,
                               const float* weight_decay, uint64_t seed) {
    memset(h, 0, sizeof(*h));
    h->cfg = *cfg;
    h->nblocks = nblocks;
    h->outputs = nblocks + 1;
    h->num_params = offsets[nblocks];
    h->offsets = (size_t*)malloc((size_t)(nblocks + 1) * sizeof(size_t));
    memcpy(h->offsets, offsets, (size_t)(nblocks + 1) * sizeof(size_t));
    h->total_steps = total_steps;
    h->lr_peak = lr_peak; h->beta1 = beta1; h->beta2 = beta2; h->eps = eps;
    h->weight_decay = (float*)malloc((size_t)nblocks * sizeof(float));
    if (h->weight_decay != NULL) { memcpy(h->weight_decay, weight_decay, (size_t)nblocks * sizeof(float)); }
    phase_init(&h->ctrl, cfg->warmup, cfg->full_steps, cfg->max_predict_steps, total_steps, cfg->cooldown);
    features_init(&h->fnorm);
    predictor_init(&h->pred, cfg->predictor, FEATURES_DIM, h->outputs, seed);
    // only the fixed-scale kinds use it; 0 otherwise, so --kappa does not bind a momentum run's checkpoint
    h->pred.fixed_scale = cfg->predictor == PREDICTOR_NESTEROV ? beta1 : cfg->predictor == PREDICTOR_SCALED ? cfg->kappa : 0.0f;
    h->micro_batches = 1;
    residual_store_init(&h->store, HYBRID_RESIDUAL_CAPACITY, FEATURES_DIM, h->outputs);
    monitor_init(&h->mon, cfg->divergence_threshold);
    value_init(&h->value);
    bandit_init(&h->bandit, cfg->max_predict_steps, 1.0f);
    metrics_init(&h->metrics);
    lookahead_init(&h->la, cfg->lookahead, cfg->divergence_threshold, cfg->warmup, cfg->cooldown, total_steps, nblocks);
    h->coef = (float*)calloc((size_t)nblocks, sizeof(float));
    h->run_scale = (float*)calloc((size_t)nblocks, sizeof(float));
    h->stats = (double*)calloc((size_t)nblocks * 3, sizeof(double));
    h->partial = (double*)calloc((size_t)nblocks * APPLY_CHUNKS * 3, sizeof(double));
    h->y = (float*)calloc((size_t)h->outputs, sizeof(float));
    h->yhat = (float*)calloc((size_t)h->outputs, sizeof(float));
    h->corr = (float*)calloc((size_t)h->outputs, sizeof(float));
    if (!h->offsets || !h->weight_decay || !h->coef || !h->run_scale || !h->stats || !h->partial || !h->y || !h->yhat || !h->corr) {
        fprintf(stderr, "error: hybrid_init: out of memory (%d blocks)\n", nblocks);
        exit(EXIT_FAILURE);
    }
    h->phase = PHASE_WARMUP;
    h->run_arm = -1;
    h->correct_loss = NAN; h->predicted_loss = NAN; h->run_start_loss = NAN;
}

// the trainer's micro batches per Full step (gradient accumulation): sets the Predict runs' length
// (phase_regime_horizon); call after hybrid_init, before the first step
static inline void hybrid_set_micro_batches(HybridState* h, int micro_batches) {
    h->micro_batches = micro_batches > 1 ? micro_batches : 1;
}

static inline void hybrid_free(HybridState* h) {
    predictor_free(&h->pred);
    residual_store_free(&h->store);
    lookahead_free(&h->la);
    free(h->offsets); free(h->weight_decay); free(h->coef); free(h->run_scale); free(h->stats); free(h->partial);
    free(h->y); free(h->yhat); free(h->corr);
    memset(h, 0, sizeof(*h));
}

// the direction the per-element loops read (d: the EMA buffer, or m, v: AdamW's moments)
static inline ApplyDirection hybrid_direction(const HybridState* h, const float* d, const float* m, const float* v) {
    ApplyDirection dir;
    dir.kind = h->cfg.direction;
    dir.d = d; dir.m = m; dir.v = v;
    int t = h->adam_t > 0 ? h->adam_t : 1;
    dir.bc1 = 1.0f - powf(h->beta1, (float)t);
    dir.bc2 = 1.0f - powf(h->beta2, (float)t);
    dir.eps = h->eps;
    dir.scale = -h->lr_peak;
    return dir;
}

// ----------------------------------------------------------------------------
// per-step decisions

// confidence in [0, 1]: the direction explains recent updates (cosine), Correct steps matched
// their predictions (loss residual in noise units), and the ensemble agrees (rssm)
static inline float hybrid_confidence(const HybridState* h) {
    float c = h->cos_ema > 0.0f ? h->cos_ema : 0.0f;
    c /= 1.0f + h->resid_ema * h->resid_ema;
    if (h->cfg.predictor == PREDICTOR_RSSM) { c /= 1.0f + 2.0f * h->spread; }
    return c > 1.0f ? 1.0f : c;
}

// decide the phase of step `step` (0-based) with learning rate `lr`. On a Predict step h->coef
// holds the per-block coefficients to apply.
static inline HybridPhase hybrid_begin_step(HybridState* h, int step, float lr) {
    double t0 = hybrid_now_ms();
    h->step = step;
    h->lr = lr;
    h->rolled_back = 0;
    HybridMetrics* mt = &h->metrics;
    mt->predicted_loss = NAN; mt->horizon = 0; mt->confidence = NAN;
    mt->step_probes = 0; mt->step_probe_ms = 0.0;
    if (!h->cfg.enabled) { h->phase = PHASE_FULL; return h->phase; }
    if (h->cfg.lookahead > 0.0f) {  // every step is measured; the look-ahead rides on its update
        h->phase = step < h->la.start ? PHASE_WARMUP : PHASE_FULL;
        lookahead_plan(&h->la, step, lr, h->lr_peak, h->stats);
        mt->predictor_ms += hybrid_now_ms() - t0;
        return h->phase;
    }
    int starting = h->ctrl.phase != PHASE_PREDICT;
    int horizon = 0, arm = -1;
    const int fixed = predictor_is_fixed(h->cfg.predictor);
    phase_lr(&h->ctrl, lr, h->lr_peak);
    h->confidence = hybrid_confidence(h);
    int confident = h->measured > 1 && h->confidence >= h->cfg.confidence_threshold &&
                    value_may_predict(&h->value, h->metrics.steps[PHASE_PREDICT], h->total_steps);
    if (starting && confident && step >= h->ctrl.warmup && h->cfg.max_predict_steps > 0) {
        if (h->cfg.adaptive) {
            horizon = bandit_choose(&h->bandit, h->x);
            arm = h->bandit.last_arm;
        } else {
            // learned predictors: as long as the confidence allows; fixed-scale ones: as long as the batch regime affords
            horizon = fixed ? phase_regime_horizon(h->cfg.max_predict_steps, h->micro_batches)
                            : 1 + (int)(h->confidence * (h->cfg.max_predict_steps - 1) + 0.5f);
        }
    }
    h->phase = phase_next(&h->ctrl, step, confident, horizon);
    if (h->phase == PHASE_PREDICT) {
        int k = h->ctrl.run_done; // 1-based position in the run
        if (k == 1) {
            h->run_steps = 0;
            h->run_start_loss = h->last_loss;
            h->predicted_loss = h->last_loss;
            h->probing = value_probe_run(&h->value, h->ctrl.runs);
            h->value.l0 = NAN;
            h->cycle_ms = 0.0;
            h->run_arm = h->cfg.adaptive ? bandit_arm_of(&h->bandit, h->ctrl.run_length) : -1;
            if (arm >= 0 && h->run_arm < 0) { h->run_arm = arm; }
            memcpy(h->run_x, h->x, sizeof(h->x));
            memset(h->run_scale, 0, (size_t)h->nblocks * sizeof(float));
        }
        // features as they would be now: the loss moved by the prediction so far
        float raw[FEATURES_DIM], xk[FEATURES_DIM];
        memcpy(raw, h->raw, sizeof(raw));
        raw[FEAT_LOSS] = h->predicted_loss;
        raw[FEAT_SINCE_PREDICT] = 0.0f;
        raw[FEAT_LR] = lr / h->lr_peak;
        raw[FEAT_PROGRESS] = (float)step / (float)(h->total_steps > 0 ? h->total_steps : 1);
        features_normalize(&h->fnorm, raw, xk);
        predictor_predict(&h->pred, xk, k, h->yhat, &h->spread);
        float w = fixed ? 0.0f : residual_store_correction(&h->store, xk, step, h->corr);
        float sigma = hybrid_sigma(h);
        for (int b = 0; b < h->nblocks; b++) {
            float s = h->yhat[b] + (w > 0.0f ? HYBRID_RESIDUAL_GAIN * h->corr[b] : 0.0f);
            s = hmath_clampf(isfinite(s) ? s : 0.0f, -HYBRID_MAX_SCALE, HYBRID_MAX_SCALE);
            h->coef[b] = s * lr / h->lr_peak;
            h->run_scale[b] += s / (float)h->ctrl.run_length;
        }
        float dl = h->yhat[h->nblocks] + (w > 0.0f ? HYBRID_RESIDUAL_GAIN * h->corr[h->nblocks] : 0.0f);
        dl = hmath_clampf(isfinite(dl) ? dl : 0.0f, -3.0f, 3.0f); // loss change in noise units
        h->predicted_loss += dl * sigma;
        h->run_steps++;
        mt->predicted_loss = h->predicted_loss;
    }
    if (h->phase == PHASE_PREDICT || h->phase == PHASE_CORRECT) {
        mt->horizon = h->ctrl.run_length;
        mt->predicted_loss = h->predicted_loss;
    }
    if (h->cfg.enabled && h->measured > 1) { mt->confidence = h->confidence; }
    mt->predictor_ms += hybrid_now_ms() - t0;
    return h->phase;
}

// CPU reference of the Predict step: theta += coef * d in place (the run's first step keeps theta_0)
static inline void hybrid_apply_predict(const HybridState* h, float* params, float* keep, const ApplyDirection* dir) {
    apply_predict(params, keep, dir, h->offsets, h->nblocks, h->coef, h->run_steps == 1);
}

// a forward-only micro-correction is wanted after this Predict step
static inline int hybrid_micro_due(const HybridState* h) {
    return h->cfg.enabled && h->phase == PHASE_PREDICT && h->cfg.correction_interval > 0 &&
           h->ctrl.run_done % h->cfg.correction_interval == 0 && h->ctrl.run_done < h->ctrl.run_length;
}

// the micro-correction's loss: a mismatch with the prediction ends the run early
static inline void hybrid_micro_result(HybridState* h, float loss) {
    h->metrics.micro_checks++;
    float z = (loss - h->predicted_loss) / hybrid_sigma(h);
    if (!isfinite(loss) || z > 0.5f * h->cfg.divergence_threshold) {
        phase_stop_run(&h->ctrl);
        h->metrics.micro_stops++;
    }
}

// whether the trainer measures a probe loss in this step (hybrid/value.h): on a probed run's first Predict
// step, before its update, the loss on the next batch (peeked: the Correct step trains on it); on its
// Correct step, after the backward and before the update, the loss on the batch after (peeked); on the
// first measured step after that, its first micro batch's loss (it is on the same batch: no extra cost).
// A probe run that will be undone (the test has not passed) skips the first: its Correct step runs the
// same forward on the same weights after the undo, and hybrid_rollback_loss takes L(theta_0) from there.
static inline int hybrid_probe_wanted(const HybridState* h) {
    if (!h->cfg.enabled) { return 0; }
    // a pair waiting for the loss of these weights on the next batch gets it from a run's first step too
    if (h->phase == PHASE_PREDICT) {
        return h->run_steps == 1 && (isfinite(h->value.pending) || (h->probing && value_proven(&h->value)));
    }
    if (h->phase == PHASE_CORRECT) { return h->probing && isfinite(h->value.l0); }
    return isfinite(h->value.pending);
}

// time a trainer spent for the value test outside hybrid_probe_loss (undoing a probe run and running the
// Correct step's forward again), counted with the probes' time
static inline void hybrid_probe_ms(HybridState* h, double ms) {
    h->metrics.probe_ms += ms;
    h->metrics.step_probe_ms += ms;
    h->metrics.step_probes++;
}

// the probe's loss (see hybrid_probe_wanted) and the ms its forward took (0 where it was free)
static inline void hybrid_probe_loss(HybridState* h, float loss, double ms) {
    ValueTest* v = &h->value;
    h->metrics.probes++;
    hybrid_probe_ms(h, ms);
    if (h->phase == PHASE_CORRECT) { // the run's L(theta_0) is known by now (at its start, or after the undo)
        int H = h->ctrl.run_length > 0 ? h->ctrl.run_length : 1;
        v->pred_gain = (v->l0 - h->correct_loss) / (float)H; // per predicted step, on the batch it was probed on
        v->cost = value_cost(h->micro_batches, H);
        v->pending = isfinite(loss) ? loss : NAN;
        return;
    }
    if (isfinite(v->pending)) { // the pair of the last probed run is complete: decide
        int open = value_add(v, v->pred_gain, v->pending - loss, v->cost);
        phase_correct_outcome(&h->ctrl, !open);
        v->pending = NAN;
    }
    if (h->phase == PHASE_PREDICT && h->probing) { v->l0 = loss; }
}

// Correct step, after its forward and before its backward. ACTION_ROLLBACK: the trainer must call
// hybrid_rollback (or its kernel), run the forward again and give its loss to hybrid_rollback_loss before
// the backward; h->rolled_back says whether the monitor asked for it (else the run was a probe before the
// value test passed).
static inline MonitorAction hybrid_correct_check(HybridState* h, float loss) {
    if (h->phase != PHASE_CORRECT) { return ACTION_NONE; }
    h->correct_loss = loss;
    MonitorAction a = monitor_correct(&h->mon, h->step, loss, h->predicted_loss);
    if (a != ACTION_NONE) { h->metrics.events++; h->event_pending = 1; }
    if (a == ACTION_SHORTEN) { phase_shorten(&h->ctrl); }
    if (a == ACTION_ROLLBACK) {
        h->metrics.rollbacks++;
        h->rolled_back = 1;
    } else if (h->probing && !value_proven(&h->value)) {
        a = ACTION_ROLLBACK; // a probe run before the value test has passed measures; it does not train
        h->metrics.probe_undos++;
    }
    return a;
}

// the Correct step's loss after a rollback: the weights from before the run, on the batch it was checked on,
// i.e. L(theta_0) for a probe run that left it to this forward (hybrid_probe_wanted); `ms`: the time the
// undo and this forward took, the value test's cost unless the monitor asked for the rollback
static inline void hybrid_rollback_loss(HybridState* h, float loss, double ms) {
    if (h->probing && !isfinite(h->value.l0)) {
        h->value.l0 = isfinite(loss) ? loss : NAN;
        h->metrics.probes++;
    }
    if (!h->rolled_back) { hybrid_probe_ms(h, ms); }
}

// CPU reference of the rollback: restore the parameters from before the current Predict run
static inline void hybrid_rollback(HybridState* h, float* params, const float* keep) {
    apply_rollback(params, keep, h->num_params);
    h->run_steps = 0;
}

// CPU reference of a measured step's update: AdamW step t with the step's lr (hybrid_begin_step) on
// every block, fused with the statistics into h->stats and (ema) the direction update; one pass
// (apply_adamw_observe). grads: the step's gradients, grad_scale their clipping factor.
static inline void hybrid_update(HybridState* h, float* params, const float* grads, float* m, float* v, float* d,
                                 float grad_scale, int t) {
    ApplyAdamStep st = {h->beta1, h->beta2, h->eps, h->weight_decay, t, h->lr, h->lr_peak, grad_scale};
    if (h->cfg.lookahead > 0.0f) {
        apply_adamw_lookahead(params, grads, m, v, d, &st, LOOKAHEAD_GAMMA, h->la.beta_prev, h->la.beta_next,
                              h->offsets, h->nblocks, h->partial, h->stats);
    } else {
        apply_adamw_observe(params, grads, m, v, d, &st, h->cfg.direction, h->cfg.direction_beta, h->offsets,
                            h->nblocks, h->partial, h->stats);
    }
    h->adam_t = t;
}

static inline void hybrid_act(HybridState* h, MonitorAction a) {
    if (a == ACTION_NONE) { return; }
    h->metrics.events++;
    h->event_pending = 1;
    if (a == ACTION_SHORTEN) { phase_shorten(&h->ctrl); }
    if (a == ACTION_FORCE_FULL || a == ACTION_ROLLBACK) { phase_force_full(&h->ctrl, 2 * h->cfg.full_steps + 8); }
}

// end of every step. loss, grad_norm: NAN on Predict steps; ms: the step's wall time.
// On measured steps hybrid_update (or the trainer's kernel) must have filled h->stats.
static inline void hybrid_end_step(HybridState* h, float loss, float grad_norm, double ms) {
    HybridMetrics* mt = &h->metrics;
    mt->steps[h->phase] += 1;
    mt->ms[h->phase] += ms;
    if (!h->cfg.enabled) { return; }
    double t0 = hybrid_now_ms();
    if (h->cfg.lookahead > 0.0f) {
        lookahead_observe(&h->la, isfinite(loss) ? grad_norm : NAN, h->stats);
        if (isfinite(loss)) { h->last_loss = loss; }
        if (isfinite(grad_norm)) { h->grad_norm = grad_norm; }
        h->measured++;
        mt->predictor_ms += hybrid_now_ms() - t0;
        return;
    }
    h->steps_since_measured++;
    if (h->phase == PHASE_PREDICT) {
        h->cycle_ms += ms;
        h->since_predict = 0;
        mt->predictor_ms += hybrid_now_ms() - t0;
        return;
    }
    phase_full_done(&h->ctrl);
    const int nb = h->nblocks;
    const float sigma = hybrid_sigma(h);
    // targets: per-block scale along the direction, and the loss change per step in noise units
    double cos_sum = 0.0, pcos_sum = 0.0, s_sum = 0.0;
    int ncos = 0;
    for (int b = 0; b < nb; b++) {
        double dot = h->stats[3 * b], dd = h->stats[3 * b + 1], uu = h->stats[3 * b + 2];
        float s = 0.0f;
        if (dd > 0.0 && uu > 0.0) {
            s = (float)(dot / dd * h->lr_peak / h->lr);
            double c = dot / sqrt(dd * uu);
            cos_sum += c;
            if (h->phase == PHASE_CORRECT) { pcos_sum += (h->run_scale[b] >= 0.0f ? c : -c); }
            ncos++;
        }
        s = hmath_clampf(isfinite(s) ? s : 0.0f, -HYBRID_MAX_SCALE, HYBRID_MAX_SCALE);
        h->y[b] = s;
        s_sum += s;
    }
    float dloss = 0.0f;
    if (h->measured > 0 && isfinite(loss) && isfinite(h->last_loss)) {
        dloss = (loss - h->last_loss) / (float)h->steps_since_measured;
    }
    h->y[nb] = hmath_clampf(dloss / sigma, -3.0f, 3.0f);
    h->cos_mean = ncos ? (float)(cos_sum / ncos) : 0.0f;
    h->scale_mean = (float)(s_sum / nb);
    int train = ncos > 0 && h->have_x_prev && isfinite(loss);

    if (h->phase == PHASE_CORRECT) {
        // residuals of the run's prediction, the error feedback for the next ones
        float lr_res = isfinite(h->correct_loss) ? (h->correct_loss - h->predicted_loss) / sigma : 0.0f;
        for (int b = 0; b < nb; b++) { h->corr[b] = h->y[b] - h->run_scale[b]; }
        h->corr[nb] = hmath_clampf(lr_res, -3.0f, 3.0f) / (float)(h->ctrl.run_length > 0 ? h->ctrl.run_length : 1);
        residual_store_push(&h->store, h->run_x, h->corr, h->ctrl.run_length, h->step);
        metrics_loss_pair(mt, h->predicted_loss, h->correct_loss);
        float pcos = ncos ? (float)(pcos_sum / ncos) : 0.0f;
        if (ncos) { mt->n_cos++; mt->cos_sum += pcos; }
        h->resid_ema = 0.8f * h->resid_ema + 0.2f * fabsf(lr_res);
        // a probed run is judged when its pair completes (hybrid_probe_loss); the others by the test so far
        if (h->rolled_back) { phase_correct_outcome(&h->ctrl, 1); }
        else if (!h->probing) { phase_correct_outcome(&h->ctrl, !h->value.open); }
        h->value.l0 = NAN;
        hybrid_act(h, monitor_cosine(&h->mon, h->step, pcos));
        if (h->cfg.adaptive && h->run_arm >= 0) {
            double cycle = h->cycle_ms + ms;
            double drop_rate = (h->run_start_loss - h->correct_loss) / cycle;
            double full_rate = -h->dloss_ema / (h->full_ms_ema > 0.0f ? h->full_ms_ema : 1.0f);
            float r = full_rate > 0.0 ? (float)(drop_rate / full_rate - 1.0) : (drop_rate > 0.0 ? 1.0f : -1.0f);
            bandit_update(&h->bandit, h->run_arm, h->run_x, hmath_clampf(isfinite(r) ? r : -3.0f, -3.0f, 3.0f));
        }
        h->run_steps = 0; // the Correct backward has reused the keep buffer
    } else if (h->measured > 0 && h->steps_since_measured == 1 && isfinite(loss)) {
        h->dloss_ema = h->measured < 3 ? dloss : 0.9f * h->dloss_ema + 0.1f * dloss;
        h->full_ms_ema = h->full_ms_ema == 0.0f ? (float)ms : 0.9f * h->full_ms_ema + 0.1f * (float)ms;
    }
    if (train) { predictor_update(&h->pred, h->x_prev, h->y); }
    hybrid_act(h, monitor_observe(&h->mon, h->step, loss, grad_norm, h->phase == PHASE_CORRECT));

    // the features of "now", the input of the next prediction and of the next target
    if (isfinite(loss)) {
        h->last_loss = loss;
        h->loss_fast = h->measured == 0 ? loss : 0.7f * h->loss_fast + 0.3f * loss;
        h->loss_slow = h->measured == 0 ? loss : 0.95f * h->loss_slow + 0.05f * loss;
    }
    if (isfinite(grad_norm)) {
        h->grad_norm = grad_norm;
        h->gn_ema = h->measured == 0 ? grad_norm : 0.9f * h->gn_ema + 0.1f * grad_norm;
    }
    if (ncos) { h->cos_ema = h->measured == 0 ? h->cos_mean : 0.9f * h->cos_ema + 0.1f * h->cos_mean; }
    h->since_predict++;
    FeatureInputs in;
    in.loss = h->last_loss;
    in.loss_trend = h->loss_fast - h->loss_slow;
    in.grad_norm = h->grad_norm;
    in.grad_ratio = h->gn_ema > 0.0f ? h->grad_norm / h->gn_ema : 1.0f;
    in.lr_frac = h->lr / h->lr_peak;
    in.cosine = h->cos_mean;
    in.scale = h->scale_mean;
    in.since_predict = (float)h->since_predict;
    in.progress = (float)(h->step + 1) / (float)(h->total_steps > 0 ? h->total_steps : 1);
    features_raw(&in, h->raw);
    features_observe(&h->fnorm, h->raw);
    features_normalize(&h->fnorm, h->raw, h->x);
    memcpy(h->x_prev, h->x, sizeof(h->x));
    h->have_x_prev = 1;
    h->measured++;
    h->steps_since_measured = 0;
    h->correct_loss = NAN;
    mt->predictor_ms += hybrid_now_ms() - t0;
}

// the monitor's last event as one log line ("hybrid monitor: step S: signal value -> action"); returns 0
// if nothing happened since the last call
static inline int hybrid_take_event(HybridState* h, char* buf, size_t n) {
    if (!h->event_pending) { return 0; }
    h->event_pending = 0;
    const Monitor* m = &h->mon;
    snprintf(buf, n, "hybrid monitor: step %d: %s %.4g -> %s", m->last_step + 1, monitor_signal_name(m->last_signal),
             m->last_value, monitor_action_name(m->last_action));
    return 1;
}

// "phase" of the step just decided, for the step line and metrics.jsonl
static inline const char* hybrid_phase_name(const HybridState* h) { return phase_name(h->phase); }

// the hybrid fields of this step's metrics.jsonl line (see hybrid/metrics.h)
static inline int hybrid_step_json(const HybridState* h, char* buf, size_t n) { return metrics_step_json(&h->metrics, buf, n); }

static inline void hybrid_print_summary(const HybridState* h, FILE* f) {
    metrics_print_table(&h->metrics, f);
    if (h->cfg.lookahead > 0.0f) {
        const Lookahead* la = &h->la;
        fprintf(f, "look-ahead: beta0 %.3g, %d steps with a look-ahead (mean beta %.3f), %d grad-norm jumps backed it off, "
                   "%d block caps; mean cos(update, drift) %.3f\n", la->beta0, la->active_steps, lookahead_mean_beta(la),
                la->jumps, la->capped, la->n_cos ? la->cos_sum / la->n_cos : 0.0);
        return;
    }
    const ValueTest* v = &h->value;
    const char* verdict = v->pairs >= VALUE_MIN_PAIRS ? (v->open ? "predicting" : "stopped predicting")
                          : !value_may_predict(v, h->metrics.steps[PHASE_PREDICT], h->total_steps)
                          ? "probe budget spent before the test could decide: stopped predicting" : "still gathering";
    fprintf(f, "value test: %d pairs, rho %.3f (Full steps per Predict step), excess over cost %.3g +- %.2g: %s\n",
            v->pairs, value_rho(v), value_mean(v), value_se(v), verdict);
    if (h->cfg.adaptive) { // the bandit's state: pulls and mean reward per horizon
        for (int a = 0; a < h->bandit.arms; a++) {
            int n = h->bandit.pulls[a];
            fprintf(f, "bandit: horizon %2d: %4d pulls, mean reward %+.3f\n", h->bandit.horizon[a], n,
                    n ? h->bandit.reward_sum[a] / n : 0.0);
        }
    }
}
// the summary's "key": value pairs (no braces), for the trainer's summary.json
static inline int hybrid_summary_fields(const HybridState* h, char* buf, size_t n) {
    int w = metrics_summary_fields(&h->metrics, buf, n);
    size_t pos = w > 0 ? (size_t)w : 0;
    if (h->cfg.lookahead > 0.0f) {
        const Lookahead* la = &h->la;
        metrics_field(buf, n, &pos, "lookahead_steps", la->active_steps, 1);
        metrics_field(buf, n, &pos, "lookahead_mean_beta", lookahead_mean_beta(la), 0);
        metrics_field(buf, n, &pos, "lookahead_jumps", la->jumps, 1);
        metrics_field(buf, n, &pos, "lookahead_caps", la->capped, 1);
        metrics_field(buf, n, &pos, "lookahead_cos", la->n_cos ? la->cos_sum / la->n_cos : 0.0, 0);
        return (int)pos;
    }
    const ValueTest* v = &h->value;
    metrics_field(buf, n, &pos, "value_pairs", v->pairs, 1);
    metrics_field(buf, n, &pos, "value_rho", value_rho(v), 0);
    metrics_field(buf, n, &pos, "value_excess_mean", value_mean(v), 0);
    metrics_field(buf, n, &pos, "value_excess_se", value_se(v), 0);
    metrics_field(buf, n, &pos, "value_predicting", v->open && value_may_predict(v, h->metrics.steps[PHASE_PREDICT], h->total_steps), 1);
    return (int)pos;
}

// ----------------------------------------------------------------------------
// save / load: magic, version, the configuration it must match, every component, the direction
// buffer (ema), the keep buffer if a Predict run is open (theta_0, for its rollback), and a checksum.

static inline void hybrid_io(HybridIO* io, HybridState* h, float* direction, float* keep) {
    hio_expect_i32(io, HYBRID_MAGIC, "magic");
    hio_expect_i32(io, HYBRID_VERSION, "version");
    hio_expect_i32(io, h->nblocks, "parameter blocks");
    uint64_t P = h->num_params;
    hio_u64(io, &P);
    if (!io->writing && !io->failed && P != h->num_params) { hio_fail(io, "parameter count differs from the model"); }
    hio_expect_i32(io, h->cfg.predictor, "predictor");
    hio_expect_i32(io, h->cfg.direction, "direction kind");
    hio_expect_i32(io, h->total_steps, "schedule length");
    hio_expect_i32(io, h->micro_batches, "micro batches per step");
    phase_io(io, &h->ctrl);
    features_io(io, &h->fnorm);
    predictor_io(io, &h->pred);
    residual_store_io(io, &h->store);
    monitor_io(io, &h->mon);
    bandit_io(io, &h->bandit);
    metrics_io(io, &h->metrics);
    int H = h->cfg.max_predict_steps > 0 ? h->cfg.max_predict_steps : 1;
    int phase = (int)h->phase;
    hio_i32(io, &phase);
    h->phase = (HybridPhase)(phase >= 0 && phase < PHASE_COUNT ? phase : 0);
    hio_f32s(io, h->coef, (size_t)h->nblocks);
    hio_f32s(io, h->run_scale, (size_t)h->nblocks);
    hio_i32(io, &h->run_steps);
    if (h->run_steps < 0 || h->run_steps > H) { hio_fail(io, "predict run length out of range"); h->run_steps = 0; }
    hio_f32s(io, h->raw, FEATURES_DIM); hio_f32s(io, h->x, FEATURES_DIM);
    hio_f32s(io, h->x_prev, FEATURES_DIM); hio_f32s(io, h->run_x, FEATURES_DIM);
    hio_i32(io, &h->have_x_prev);
    hio_i32(io, &h->adam_t); hio_i32(io, &h->measured); hio_i32(io, &h->steps_since_measured);
    hio_f32(io, &h->last_loss); hio_f32(io, &h->loss_fast); hio_f32(io, &h->loss_slow);
    hio_f32(io, &h->grad_norm); hio_f32(io, &h->gn_ema); hio_f32(io, &h->cos_mean); hio_f32(io, &h->cos_ema);
    hio_f32(io, &h->scale_mean); hio_f32(io, &h->dloss_ema); hio_f32(io, &h->full_ms_ema);
    hio_f32(io, &h->resid_ema); hio_f32(io, &h->spread); hio_i32(io, &h->since_predict);
    hio_f32(io, &h->confidence); hio_f32(io, &h->run_start_loss); hio_f32(io, &h->predicted_loss);
    hio_f64(io, &h->cycle_ms); hio_i32(io, &h->run_arm);
    value_io(io, &h->value);
    hio_i32(io, &h->probing);
    lookahead_io(io, &h->la);
    if (h->cfg.direction == DIRECTION_EMA) {
        if (direction == NULL) { hio_fail(io, "no direction buffer given"); }
        else { hio_f32s(io, direction, h->num_params); }
    }
    int has_keep = h->run_steps > 0;
    hio_i32(io, &has_keep);
    if (has_keep) {
        if (keep == NULL) { hio_fail(io, "a Predict run is open but no keep buffer was given"); }
        else { hio_f32s(io, keep, h->num_params); }
    }
}

// save to a stream; returns 0, or -1 with the reason in err
static inline int hybrid_save(HybridState* h, FILE* f, const float* direction, const float* keep, char* err, size_t errn) {
    HybridIO io;
    hio_begin(&io, 1, f, NULL, 0);
    hybrid_io(&io, h, (float*)direction, (float*)keep);
    int rc = hio_finish(&io);
    if (rc != 0 && err != NULL) { snprintf(err, errn, "%s", io.error); }
    return rc;
}

// load from a stream into an initialised state of the same configuration; returns 0, or -1 with
// the reason in err (the state is then unusable: the caller exits)
static inline int hybrid_load(HybridState* h, FILE* f, float* direction, float* keep, char* err, size_t errn) {
    HybridIO io;
    hio_begin(&io, 0, f, NULL, 0);
    hybrid_io(&io, h, direction, keep);
    int rc = hio_finish(&io);
    if (rc == 0 && fgetc(f) != EOF) { hio_fail(&io, "trailing bytes after the checksum"); rc = -1; }
    if (rc != 0 && err != NULL) { snprintf(err, errn, "%s", io.error); }
    return rc;
}

// the same to and from a byte buffer: size first (buf NULL), then save; load checks the size
static inline size_t hybrid_state_size(HybridState* h, const float* direction, const float* keep) {
    HybridIO io;
    hio_begin(&io, 1, NULL, NULL, 0);
    hybrid_io(&io, h, (float*)direction, (float*)keep);
    hio_finish(&io);
    return io.pos;
}

static inline int hybrid_save_buffer(HybridState* h, void* buf, size_t cap, const float* direction, const float* keep) {
    HybridIO io;
    hio_begin(&io, 1, NULL, buf, cap);
    hybrid_io(&io, h, (float*)direction, (float*)keep);
    return hio_finish(&io);
}

static inline int hybrid_load_buffer(HybridState* h, const void* buf, size_t n, float* direction, float* keep, char* err, size_t errn) {
    HybridIO io;
    hio_begin(&io, 0, NULL, (void*)buf, n);
    hybrid_io(&io, h, direction, keep);
    int rc = hio_finish(&io);
    if (rc == 0 && io.pos != n) { hio_fail(&io, "trailing bytes after the checksum"); rc = -1; }
    if (rc != 0 && err != NULL) { snprintf(err, errn, "%s", io.error); }
    return rc;
}

#endif // HYBRID_HYBRID_H
