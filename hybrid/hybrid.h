/*
 * hybrid/hybrid.h — hybrid predictive training, the one interface between a trainer and hybrid/
 * (docs/hybrid.md). A trainer runs whichever method of the table `--hybrid NAME` chose (hybrid/methods.h:
 * the look-ahead and Predict runs along the drift, GPA, Linefit); this facade knows none by name. Per step
 * (a trainer's loop calls the first and the last through hybrid/run.h):
 *     HybridPlan p = hybrid_plan(h, step, lr);   (without --hybrid: a Full step, nothing else)
 *     Predict:  hybrid_apply_predict(h, &p, params, keep) (a step without a batch)
 *     else:     forward the first micro batch; if p.check and hybrid_check(h, loss): apply_rollback
 *               (theta_0 from the keep buffer) and forward again; the other micro batches, backward, clip;
 *               then hybrid_update (the method's fused AdamW pass)
 *     hybrid_observe(h, loss or NAN, loss_micro1 (p.observe) or NAN, grad_norm or NAN, noise_s, noise_g2
 *                    (or NAN: one micro batch), ms);
 * A method that keeps weights apart (GPA's average) hands them to the trainer's evaluation facility
 * (llmc/average.h) through hybrid_kept_weights; a trainer's own EMA of the weights (--ema) is folded into the
 * update of a method whose row says it can (hybrid_set_ema, hybrid_takes_ema). The keep buffer is any P-float buffer idle from a Predict
 * run's first step to its Correct step's backward (the gradients). Allocation happens in hybrid_init only:
 * the method's state and its P-float buffers (host memory, where the trainer is not a GPU's). Depends on
 * llmc/args.h (the flag table's rows) and llmc/utils.h (the clock).
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
#include "hybrid/metrics.h"
#include "hybrid/method.h"
#include "hybrid/methods.h"

#define HYBRID_MAGIC 20261122
#define HYBRID_VERSION 8  // 6: the drift's decay; 7: the noise gate; 8: the method table (the row's name)

// ----------------------------------------------------------------------------
// the flags: --hybrid (off, on, or a method) and the drift family's, one row per HybridConfig field, in the
// rows of the trainers' parser (llmc/args.h); each method's own flags are its table (HYBRID_ARG_TABLES)

static HybridConfig hybrid_flags;  // what the command line gave (static: the trainers' parse fills it)

#define HYBRID_ARG(f, t, field, lo, hi, bare, h) {f, t, offsetof(HybridConfig, field), lo, hi, 0, h, NULL, bare, 0}
static const ArgSpec HYBRID_ARGS[] = {
    {"--hybrid", ARG_CHOICE, offsetof(HybridConfig, enabled), 0, 0, 0,
     "hybrid predictive training: 0 off, 1 on with nothing predicted unless a flag below asks, or a method by name "
     "(a bare --hybrid is 1; docs/hybrid.md)", HYBRID_CHOICES, "1", 0},
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

// the row --hybrid chose: NULL when off
static inline const HybridMethod* hybrid_method_of(const HybridConfig* c) {
    if (c->enabled <= 0) { return NULL; }
    if (c->enabled == 1) { return &drift_method; }
    return c->enabled - 2 < NUM_HYBRID_METHODS ? HYBRID_METHODS[c->enabled - 2] : NULL;
}

static inline int hybrid_is_drift(const HybridMethod* m) {
    return m == &drift_method || m == &lookahead_method || m == &predict_method;
}

// the first flag of table rows [0, n) whose value differs from its default, or NULL
static inline const ArgSpec* hybrid_changed_flag(const ArgSpec* rows, int n, const void* config, const void* defaults) {
    for (int i = 0; i < n; i++) {
        char now[256], def[256];
        arg_format_exact(now, sizeof(now), config, &rows[i]);
        arg_format_exact(def, sizeof(def), defaults, &rows[i]);
        if (strcmp(now, def) != 0) { return &rows[i]; }
    }
    return NULL;
}

// every row of the table complete; a flag of a method the run did not choose would be silently ignored:
// refused, naming the flag and what it needs
static inline void hybrid_config_check(const void* config) {
    const HybridConfig* c = (const HybridConfig*)config;
    const HybridMethod* chosen = hybrid_method_of(c);
    char why[256];
    for (int k = 0; k < NUM_HYBRID_METHODS; k++) {  // a row with a hook missing fails every run, before a step
        if (!hybrid_method_complete(HYBRID_METHODS[k], why, sizeof(why))) { fatal("hybrid/methods.h: %s", why); }
    }
    if (!hybrid_is_drift(chosen)) {  // the drift family's rows: HybridConfig's, after --hybrid
        const ArgSpec* f = hybrid_changed_flag(HYBRID_ARGS + 1, NUM_HYBRID_ARGS - 1, c, &HYBRID_CONFIG_DEFAULT);
        if (f != NULL) {
            fatal("flag %s: needs hybrid mode's drift family (--hybrid 1, lookahead or predict)%s%s", f->flag,
                  chosen ? ", not --hybrid " : "", chosen ? chosen->name : "");
        }
    }
    for (int k = 0; k < NUM_HYBRID_METHODS; k++) {
        const HybridMethod* m = HYBRID_METHODS[k];
        const ArgTable* t = m->flags;
        if (m == chosen || t == NULL || t->num_args == 0) { continue; }
        const ArgSpec* f = hybrid_changed_flag(t->args, t->num_args, t->config, t->defaults);
        if (f != NULL) { fatal("flag %s: needs --hybrid %s", f->flag, m->name); }
    }
}

static int hybrid_table_shown(const void* table) {
    const HybridMethod* m = hybrid_method_of(&hybrid_flags);
    return m != NULL && m->flags == (const ArgTable*)table;
}

// the usage text's list of methods, after --hybrid's flags
static void hybrid_print_methods(FILE* out) {
    fprintf(out, "  methods of --hybrid NAME (hybrid/methods.h):\n");
    for (int k = 0; k < NUM_HYBRID_METHODS; k++) {
        fprintf(out, "    %-12s %s\n", HYBRID_METHODS[k]->name, HYBRID_METHODS[k]->about);
    }
}

// the tables a trainer lists beside its own (llmc/config.h's TrainCli): --hybrid's, then every method's
#define HYBRID_METHOD_TABLE(name) &name##_table,
static const ArgTable hybrid_table = {HYBRID_ARGS, NUM_HYBRID_ARGS, &hybrid_flags, &HYBRID_CONFIG_DEFAULT,
                                      sizeof(HybridConfig), hybrid_config_check, 1, NULL, hybrid_print_methods};
#define HYBRID_ARG_TABLES &hybrid_table, HYBRID_METHOD_ROWS(HYBRID_METHOD_TABLE)

// ----------------------------------------------------------------------------
// state

typedef struct {
    HybridConfig cfg;
    const HybridMethod* method; // the row --hybrid chose; NULL: hybrid mode off (a zeroed state)
    void* self;                 // the method's state
    HybridModel model;
    size_t* offsets;            // (nblocks+1) block offsets in floats
    float* weight_decay;        // (nblocks) AdamW's decoupled weight decay per block
    float* bufs[HYBRID_MAX_BUFFERS]; // the method's P-float buffers (host), or NULL (a GPU keeps its own)
    int owns_bufs;              // hybrid_init allocated them (else the caller lent them: hybrid_use_buffers)
    uint16_t* params16;         // (P) the trainer's bf16 weight copy, rounded in the fused pass; NULL: none
    float* ema;                 // (P) the trainer's EMA of the weights (--ema), folded in the method's pass; NULL: none
    float ema_decay;            // its beta
    HybridMetrics metrics;
    // the step in progress
    int step;                   // 0-based
    HybridPhase phase;
    float lr;
    double decide_ms;           // this step's time in hybrid/ so far
} HybridState;

static inline double hybrid_now_ms(void) { return clock_seconds() * 1e3; }

// --hybrid 1 with nothing on (the defaults): the run is the baseline's, which hybrid_setup says at start-up
// rather than let a user believe something else is running
static inline int hybrid_nothing_on(const HybridConfig* c) { return c->enabled == 1 && drift_nothing_on(c); }

// the method's state for hybrid mode (cfg->enabled > 0; the method's own flags are its table's static
// config): offsets (nblocks+1) block boundaries in floats (offsets[nblocks] = P); lr_peak and the AdamW
// hyper-parameters are the trainer's (weight_decay: (nblocks), the decay each block gets); total_steps is
// the schedule length, tokens_per_step what one measured step trains on (all micro batches of all
// processes). params: the initial weights (P, host), which a method that keeps weights copies; host_buffers:
// allocate the method's buffers here (0: a GPU trainer keeps them on its device). Exits with one line on a
// method row that is incomplete.
static inline void hybrid_init(HybridState* h, const HybridConfig* cfg, const size_t* offsets, int nblocks,
                               int total_steps, double tokens_per_step, float lr_peak, float beta1, float beta2,
                               float eps, const float* weight_decay, const float* params, int host_buffers) {
    memset(h, 0, sizeof(*h));
    h->cfg = *cfg;
    h->method = hybrid_method_of(cfg);
    if (h->method == NULL) { fatal("hybrid_init: --hybrid %d is no method", cfg->enabled); }
    char why[256];
    if (!hybrid_method_complete(h->method, why, sizeof(why))) { fatal("%s", why); }
    size_t P = offsets[nblocks];
    h->offsets = (size_t*)mallocCheck((size_t)(nblocks + 1) * sizeof(size_t));
    h->weight_decay = (float*)mallocCheck((size_t)nblocks * sizeof(float));
    memcpy(h->offsets, offsets, (size_t)(nblocks + 1) * sizeof(size_t));
    memcpy(h->weight_decay, weight_decay, (size_t)nblocks * sizeof(float));
    HybridModel m = {P, nblocks, h->offsets, h->weight_decay, total_steps, lr_peak, beta1, beta2, eps, tokens_per_step};
    h->model = m;
    for (int k = 0; host_buffers && k < h->method->buffers; k++) { h->bufs[k] = (float*)callocCheck(P, sizeof(float)); }
    h->owns_bufs = host_buffers;
    const void* config = h->method->flags->num_args > 0 ? h->method->flags->config : (const void*)&h->cfg;
    h->self = h->method->init(&h->model, config, host_buffers ? h->bufs : NULL, host_buffers ? params : NULL);
    metrics_init(&h->metrics);
    h->phase = HYBRID_PHASE_WARMUP;
}

static inline void hybrid_free(HybridState* h) {
    if (h->method != NULL) { h->method->free(h->self); }
    for (int k = 0; h->owns_bufs && k < HYBRID_MAX_BUFFERS; k++) { free(h->bufs[k]); }
    free(h->offsets); free(h->weight_decay);
    memset(h, 0, sizeof(*h));
}

static inline int hybrid_enabled(const HybridState* h) { return h->method != NULL; }

// host buffers of the caller's (the method's count of them, P floats each) for a state initialised without
// its own (a test's simulated trainer); the state never frees them
static inline void hybrid_use_buffers(HybridState* h, float* const* bufs) {
    for (int k = 0; k < h->method->buffers; k++) { h->bufs[k] = bufs[k]; }
    h->owns_bufs = 0;
}

// the weights to evaluate and keep where the method keeps them apart (P floats, host), else NULL
static inline float* hybrid_kept_weights(const HybridState* h) {
    return h->method != NULL && h->method->keeps_weights ? h->bufs[0] : NULL;
}

// the drift family's state (the GPU trainer's kernels and the tests read it), or NULL for another method
static inline Drift* hybrid_drift(const HybridState* h) { return hybrid_is_drift(h->method) ? (Drift*)h->self : NULL; }

// ----------------------------------------------------------------------------
// the step

// the plan of step `step` (0-based) at learning rate lr. A state hybrid_init never saw (zeroed: hybrid mode
// off) plans a Full step.
static inline HybridPlan hybrid_plan(HybridState* h, int step, float lr) {
    HybridPlan p;
    memset(&p, 0, sizeof(p));
    p.phase = HYBRID_PHASE_FULL;
    if (h->method == NULL) { return p; }
    double t0 = hybrid_now_ms();
    h->step = step;
    h->lr = lr;
    h->method->plan(h->self, step, lr, &p);
    h->phase = p.phase;
    h->decide_ms = hybrid_now_ms() - t0;
    return p;
}

// a measured step's first micro batch loss (when the plan asked for it). Returns 1 on a Correct step whose
// loss jumped: the trainer restores theta_0 from its keep buffer and runs the forward again.
static inline int hybrid_check(HybridState* h, float loss) {
    return h->method != NULL && h->method->check != NULL ? h->method->check(h->self, loss) : 0;
}

// the trainer's EMA into a step's numbers: its buffer and its coefficients for update t (none: left NULL)
static inline void hybrid_step_ema(const HybridState* h, ApplyAdamStep* st, int t) {
    st->ema = h->ema;
    st->ema_w = st->ema_k = 0.0f;
    if (h->ema != NULL) { average_ema_coefs(h->ema_decay, t, &st->ema_w, &st->ema_k); }
}

// the AdamW numbers of this step's update (t: AdamW's 1-based count)
static inline ApplyAdamStep hybrid_adam_step(const HybridState* h, float grad_scale, int t) {
    ApplyAdamStep st = {h->model.beta1, h->model.beta2, h->model.eps, h->weight_decay, t, h->lr, grad_scale, h->params16, 1, NULL, 0.0f, 0.0f};
    hybrid_step_ema(h, &st, t);
    return st;
}

// CPU reference of a measured step's update: the method's AdamW pass. grads: the step's gradients,
// grad_scale their clipping factor, left zero (as gpt2_update leaves them)
static inline void hybrid_update(HybridState* h, float* params, float* grads, float* m, float* v, float grad_scale, int t) {
    ApplyAdamStep st = hybrid_adam_step(h, grad_scale, t);
    h->method->update(h->self, &h->model, &st, params, grads, m, v, h->bufs);
}

// CPU reference of a Predict step (the plan's), in params (P); keep: the rollback point's buffer (P)
static inline void hybrid_apply_predict(HybridState* h, const HybridPlan* p, float* params, float* keep) {
    h->method->predict(h->self, &h->model, p, params, keep, h->bufs);
}

// the trainer keeps a bf16 copy of the weights (P values, NULL: none): the fused pass rounds it as it writes
// the weights, as the trainer's own AdamW pass does
static inline void hybrid_set_bf16_copy(HybridState* h, uint16_t* params16) { h->params16 = params16; }

// whether the method's update folds a trainer's EMA of the weights in (else the trainer refuses --ema with it)
static inline int hybrid_takes_ema(const HybridState* h) { return h->method == NULL || h->method->folds_ema; }

// the trainer keeps an EMA of the weights (--ema; llmc/average.h): ema (P floats, where the update writes the
// weights: host, or the GPU's device memory), decay its beta; each measured update folds its weights in. A
// method whose update does not fold it stops the run with one line.
static inline void hybrid_set_ema(HybridState* h, float* ema, float decay) {
    if (!hybrid_takes_ema(h)) {
        fatal("flag --ema: not with --hybrid %s (it keeps its own average, or moves the weights outside the update that averages them)",
              h->method->name);
    }
    h->ema = ema;
    h->ema_decay = decay;
}

// a measured step that was skipped (non-finite loss or norm): no update
static inline void hybrid_skip_update(HybridState* h) {
    if (h->method != NULL && h->method->skip != NULL) { h->method->skip(h->self); }
}

// end of every step: loss and grad_norm NAN on Predict steps and skipped steps; loss_micro1 the first micro
// batch's loss where the plan asked for it (observe; even if the step was then skipped), else NAN; noise_s,
// noise_g2 the step's estimates of the gradient noise scale's terms (llmc/run.h), NAN where not measured;
// ms the step's wall time (hybrid/'s own time for the step is added to it and returned)
static inline double hybrid_observe(HybridState* h, float loss, float loss_micro1, float grad_norm, double noise_s,
                                   double noise_g2, double ms) {
    double t0 = hybrid_now_ms();
    HybridObservation o = {h->phase, loss, loss_micro1, grad_norm, noise_s, noise_g2};
    h->method->observe(h->self, &o);
    double own = h->decide_ms + (hybrid_now_ms() - t0);
    h->metrics.steps[h->phase] += 1;
    h->metrics.ms[h->phase] += ms + own;
    h->metrics.decide_ms += own;
    return own;
}

// this step's log line (a rollback) into buf; returns 0 if there was none
static inline int hybrid_take_event(const HybridState* h, char* buf, size_t n) {
    return h->method->event != NULL ? h->method->event(h->self, buf, n) : 0;
}

// a Predict step's text for the step line
static inline void hybrid_what(const HybridState* h, char* buf, size_t n) {
    if (h->method->what != NULL) { h->method->what(h->self, buf, n); } else { snprintf(buf, n, "predict"); }
}

// "phase" of the step, for the step line and metrics.jsonl
static inline const char* hybrid_phase_name(const HybridState* h) { return hybrid_phase_label(h->phase); }

// the method's fields of this step's metrics.jsonl line (the method's name first)
static inline int hybrid_step_json(const HybridState* h, char* buf, size_t n) {
    size_t pos = 0;
    buf[0] = '\0';
    metrics_append(buf, n, &pos, "\"method\": \"%s\"", h->method->name);
    if (h->method->step_json != NULL && pos + 2 < n) {  // the method's fields whole after ", ", or left out
        int w = h->method->step_json(h->self, buf + pos + 2, n - pos - 2);
        if (w < 0 || (size_t)w >= n - pos - 2) {
            buf[pos] = '\0';
            return (int)n;
        }
        memcpy(buf + pos, ", ", 2);
        pos += 2 + (size_t)w;
    }
    return (int)pos;
}

// With one micro batch per step (over every process) B_noise cannot be measured: the noise gate cannot
// close and the look-ahead runs on every step of its window, whatever the batch is against the noise scale
// (near or above it, that costs loss: docs/hybrid_usage.md). hybrid_setup says so at start-up, before a
// step is spent, with what to do about it.
static inline int hybrid_gate_blind(const HybridConfig* c, int micro_batches) {
    const HybridMethod* m = hybrid_method_of(c);
    float beta0 = m == &lookahead_method && c->lookahead == HYBRID_CONFIG_DEFAULT.lookahead ? DRIFT_LOOKAHEAD : c->lookahead;
    return hybrid_is_drift(m) && beta0 > 0.0f && c->noise_gate > 0.0f && micro_batches < 2;
}

static inline void hybrid_print_gate_blind(float beta0, double tokens_per_step, FILE* f) {
    fprintf(f, "noise gate: blind at one micro batch per step: the gradient noise scale cannot be measured, so the "
               "look-ahead runs ungated, at beta0 %g. It pays well below the noise scale and at or below a tuned LR, "
               "and can cost near or above either. To know which: a short run with -d a multiple of -b x -t (2+ micro "
               "batches) prints the noise scale at its end; if %.0f tokens per step is near or above it, add "
               "--lookahead 0 (or train with 2+ micro batches and the gate decides).\n", beta0, tokens_per_step);
}

static inline void hybrid_print_nothing_on(FILE* f) {
    fprintf(f, "hybrid: nothing is on: --hybrid 1 names no method and the drift family's look-ahead and Predict runs are "
               "off by default, so this run trains as the baseline, bit for bit. --hybrid NAME runs a method (-h lists "
               "them; --hybrid lookahead is --lookahead 0.5); README says which paid where.\n");
}

static inline void hybrid_print_summary(const HybridState* h, FILE* f) {
    metrics_print_table(&h->metrics, f);
    fprintf(f, "method: %s\n", h->method->name);
    h->method->print_summary(h->self, f);
}

// the summary's "key": value pairs (no braces), for the trainer's summary.json: their length, or n where
// they did not all fit in n bytes (buf then holds the ones that did, whole)
static inline size_t hybrid_summary_fields(const HybridState* h, char* buf, size_t n) {
    size_t pos = metrics_summary_fields(&h->metrics, buf, n);
    metrics_append(buf, n, &pos, ", \"method\": \"%s\"", h->method->name);
    return pos < n ? (size_t)h->method->summary_fields(h->self, buf, n) : n;
}

// ----------------------------------------------------------------------------
// save / load: magic, version, the configuration it must match, the method's name and record (its buffers
// among it, from bufs: the state's own, or a device's staging), the metrics, and a checksum.

static inline void hybrid_io(HybridIO* io, HybridState* h, float* const* bufs, float* keep) {
    hio_expect_i32(io, HYBRID_MAGIC, "magic");
    hio_expect_i32(io, HYBRID_VERSION, "version");
    hio_expect_i32(io, h->model.nblocks, "parameter blocks");
    uint64_t P = h->model.num_params;
    hio_u64(io, &P);
    if (!io->writing && !io->failed && P != h->model.num_params) { hio_fail(io, "parameter count differs from the model"); }
    hio_expect_i32(io, h->model.total_steps, "schedule length");
    char name[32] = {0};
    snprintf(name, sizeof(name), "%s", h->method->name);
    char got[32];
    memcpy(got, name, sizeof(got));
    hio_bytes(io, got, sizeof(got));
    if (!io->writing && !io->failed && memcmp(got, name, sizeof(got)) != 0) {
        hio_fail(io, "the file is another method's (--hybrid differs)");
    }
    h->method->io(io, h->self, bufs != NULL ? bufs : h->bufs, keep);
    metrics_io(io, &h->metrics);
}

// whether a checkpoint taken now must save the keep buffer (an open Predict run)
static inline int hybrid_run_open(const HybridState* h) {
    return h->method != NULL && h->method->run_open != NULL && h->method->run_open(h->self);
}

// save to a stream; returns 0, or -1 with the reason in err. bufs: NULL (the state's own) or a device's staging
static inline int hybrid_save(HybridState* h, FILE* f, float* const* bufs, const float* keep, char* err, size_t errn) {
    HybridIO io;
    hio_begin(&io, 1, f, NULL, 0);
    hybrid_io(&io, h, bufs, (float*)keep);
    int rc = hio_finish(&io);
    if (rc != 0 && err != NULL) { snprintf(err, errn, "%s", io.error); }
    return rc;
}

// load from a stream into an initialised state of the same configuration; returns 0, or -1 with
// the reason in err (the state is then unusable: the caller exits)
static inline int hybrid_load(HybridState* h, FILE* f, float* const* bufs, float* keep, char* err, size_t errn) {
    HybridIO io;
    hio_begin(&io, 0, f, NULL, 0);
    hybrid_io(&io, h, bufs, keep);
    int rc = hio_finish(&io);
    if (rc == 0 && fgetc(f) != EOF) { hio_fail(&io, "trailing bytes after the checksum"); rc = -1; }
    if (rc != 0 && err != NULL) { snprintf(err, errn, "%s", io.error); }
    return rc;
}

// the same to and from a byte buffer: size first (buf NULL), then save; load checks the size
static inline size_t hybrid_state_size(HybridState* h, float* const* bufs, const float* keep) {
    HybridIO io;
    hio_begin(&io, 1, NULL, NULL, 0);
    hybrid_io(&io, h, bufs, (float*)keep);
    hio_finish(&io);
    return io.pos;
}

static inline int hybrid_save_buffer(HybridState* h, void* buf, size_t cap, float* const* bufs, const float* keep) {
    HybridIO io;
    hio_begin(&io, 1, NULL, buf, cap);
    hybrid_io(&io, h, bufs, (float*)keep);
    return hio_finish(&io);
}

static inline int hybrid_load_buffer(HybridState* h, const void* buf, size_t n, float* const* bufs, float* keep, char* err,
                                     size_t errn) {
    HybridIO io;
    hio_begin(&io, 0, NULL, (void*)buf, n);
    hybrid_io(&io, h, bufs, keep);
    int rc = hio_finish(&io);
    if (rc == 0 && io.pos != n) { hio_fail(&io, "trailing bytes after the checksum"); rc = -1; }
    if (rc != 0 && err != NULL) { snprintf(err, errn, "%s", io.error); }
    return rc;
}

#endif // HYBRID_HYBRID_H
