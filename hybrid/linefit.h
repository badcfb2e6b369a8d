/*
 * hybrid/linefit.h — Linefit, the nowcast jump without a learned model (the baseline of NiNo, Knyazev et
 * al., 2025): fit a least-squares line per weight through c states of the recent trajectory and jump
 * along it, the jump replacing a step. NiNo's schedule: the states a fixed spacing s apart, a jump every
 * c*s steps, the jump's length decaying over training as a squared linspace (from --linefit-jump steps
 * ahead at the start to 1 at the end), Adam's moments kept as they are.
 *
 * Each period of c*s steps: its steps s-1, 2s-1, ..., (c-1)s-1 and c*s-2 record the weights after their
 * update (c states, at "times" tau = the updates of the period they carry), and its last step is the jump:
 *     w <- intercept + slope (tau_last + J)
 * No states are kept: a line over known times needs only two running sums per weight, S0 = sum w and
 * S1 = sum tau w (the two buffers, folded into the AdamW pass that writes the weights), and the times'
 * sums, a few scalars. Then w* = A S0 + B S1 with A, B from n, sum tau, sum tau^2 and tau* (in double,
 * rounded once). A period with fewer than two states (skipped updates) has no jump: its last step trains.
 * Whether it pays under a decayed LR, or only under NiNo's constant one, is the question it is here for.
 * On the GPU: linefit_device_update and linefit_device_predict, the same elements on the step's range (the
 * sums full length), compiled under nvcc only; dev/cuda/check_all.sh holds them to the CPU passes.
 */
#ifndef HYBRID_LINEFIT_H
#define HYBRID_LINEFIT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "llmc/adamw.h"
#include "llmc/args.h"
#include "llmc/bf16.h"
#include "llmc/utils.h"
#include "hybrid/hio.h"
#include "hybrid/method.h"
#include "hybrid/metrics.h"
#ifdef __CUDACC__
#include "hybrid/apply.cuh"  // hybrid_block_of, round_to_floatX
#endif

typedef struct {
    int states;     // --linefit-states: c, the states a line is fitted through
    int spacing;    // --linefit-spacing: s, steps between them
    float jump;     // --linefit-jump: J0, how far ahead the first jump lands, in steps (decays to 1)
} LinefitConfig;

// NiNo's five states; spacing and first jump chosen on the development corpus (docs/suite.md, the methods'
// screen), then frozen: the least harmful there of (10, 50), (10, 10), (40, 200); every setting ended above the
// baseline, and a first jump of 5 windows (10, 50) diverged
static const LinefitConfig LINEFIT_CONFIG_DEFAULT = {5, 10, 10.0f};
static LinefitConfig linefit_flags;

static const ArgSpec LINEFIT_ARGS[] = {
    ARG("--linefit-states", ARG_INT, LinefitConfig, states, 2, 64, 0, "linefit: c, states a line is fitted through (a jump every c x spacing steps)"),
    ARG("--linefit-spacing", ARG_INT, LinefitConfig, spacing, 2, 1 << 20, 0, "linefit: s, steps between the states"),
    ARG("--linefit-jump", ARG_FLOAT, LinefitConfig, jump, 1, 1e6, 0, "linefit: steps ahead the first jump lands; decays to 1 over the schedule as a squared linspace"),
};
static const ArgTable linefit_table = {LINEFIT_ARGS, 3, &linefit_flags, &LINEFIT_CONFIG_DEFAULT, sizeof(LinefitConfig),
                                       NULL, 0, hybrid_table_shown, NULL};

typedef struct {
    LinefitConfig cfg;
    size_t num_params;
    int total_steps;
    int step;           // the step in progress
    int period;         // c * s
    int n;              // states in the sums this period
    double st, stt;     // sum tau, sum tau^2 of those states
    float tau;          // the time of the state this step records (0: none)
    float a, b;         // the jump's coefficients, w = a S0 + b S1
    float ahead;        // this jump's length in steps
    int jumps;
    double ahead_sum;
} Linefit;

static inline void* linefit_init(const HybridModel* model, const void* config, float* const* bufs, const float* params) {
    (void)bufs; (void)params;
    Linefit* l = (Linefit*)callocCheck(1, sizeof(Linefit));
    l->cfg = *(const LinefitConfig*)config;
    l->num_params = model->num_params;
    l->total_steps = model->total_steps;
    l->period = l->cfg.states * l->cfg.spacing;
    return l;
}

static inline void linefit_free(void* self) { free(self); }

// the record time of step `step`'s update (0: it records none): steps s-1, 2s-1, ..., (c-1)s-1 and c*s-2 of
// each period, as the number of the period's updates the weights then carry
static inline float linefit_tau(const Linefit* l, int step) {
    int j = step % l->period, s = l->cfg.spacing;
    if (j == l->period - 2) { return (float)(l->period - 1); }
    if ((j + 1) % s == 0 && j < l->period - 1) { return (float)(j + 1); }
    return 0.0f;
}

// the jump's length at step `step`: a squared linspace from J0 at step 0 to 1 at the schedule's end
static inline float linefit_ahead(const Linefit* l, int step) {
    double f = (double)step / (double)(l->total_steps > 1 ? l->total_steps - 1 : 1);
    double r = sqrt((double)l->cfg.jump) + (1.0 - sqrt((double)l->cfg.jump)) * f;
    return (float)(r * r);
}

static inline void linefit_plan(void* self, int step, float lr, HybridPlan* p) {
    (void)lr;
    Linefit* l = (Linefit*)self;
    l->step = step;
    l->tau = 0.0f;
    if (step % l->period == l->period - 1 && l->n >= 2) {
        // w* = S0/n + (tau* - st/n) (n S1 - st S0) / D, D = n stt - st^2: the least-squares line at tau*
        double n = l->n, tstar = (double)(l->period - 1) + linefit_ahead(l, step);
        double D = n * l->stt - l->st * l->st, c = tstar - l->st / n;
        l->a = (float)(1.0 / n - c * l->st / D);
        l->b = (float)(c * n / D);
        l->ahead = linefit_ahead(l, step);
        p->phase = HYBRID_PHASE_PREDICT;
        return;
    }
    if (step % l->period == l->period - 1) { l->n = 0; l->st = l->stt = 0.0; }  // no line: a new period
    l->tau = linefit_tau(l, step);
    p->phase = HYBRID_PHASE_FULL;
}

// after a recording step's pass: the state's time joins the times' sums
static inline void linefit_recorded(Linefit* l) {
    if (l->tau > 0.0f) { l->n++; l->st += l->tau; l->stt += (double)l->tau * l->tau; }
}

// after a jump: the sums are spent, a new period begins
static inline void linefit_jumped(Linefit* l) {
    l->jumps++;
    l->ahead_sum += l->ahead;
    l->n = 0;
    l->st = l->stt = 0.0;
}

// the pass over the elements lo..hi of a block, with AFTER what follows each new weight w: one loop per
// combination of the bf16 copy, the zeroed gradient and the sums' fold, each a constant of its loop, so that
// every one vectorises (a conditional 16-bit store kept the whole loop scalar on CPUs without AVX-512)
#define LINEFIT_LOOP(AFTER)                                                                                      \
    _Pragma("omp for simd schedule(static) nowait")                                                            \
    for (size_t i = lo; i < hi; i++) {                                                                         \
        float w = adamw_element(params[i], grads[i] * gs, &m[i], &v[i], lr, beta1, beta2, bc1, bc2, eps, wd);     \
        params[i] = w;                                                                                         \
        AFTER                                                                                                  \
    }
#define LINEFIT_FOLDS(AFTER)                                                                                     \
    if (record && first) { LINEFIT_LOOP(AFTER s0[i] = w; s1[i] = tau * w;) }                                   \
    else if (record) { LINEFIT_LOOP(AFTER s0[i] += w; s1[i] = fmaf(tau, w, s1[i]);) }                          \
    else { LINEFIT_LOOP(AFTER) }

// AdamW, and on a recording step the new weights folded into the sums (the period's first state starts them)
static inline void linefit_update(void* self, const HybridModel* model, const ApplyAdamStep* st, float* params,
                                  float* grads, float* m, float* v, float* const* bufs) {
    Linefit* l = (Linefit*)self;
    const float beta1 = st->beta1, beta2 = st->beta2, eps = st->eps, lr = st->lr, gs = st->grad_scale;
    float bc1, bc2;
    apply_bias_corrections(st, &bc1, &bc2);
    const float tau = l->tau;
    const int record = tau > 0.0f, first = l->n == 0;
    float* s0 = bufs[0];
    float* s1 = bufs[1];
    uint16_t* p16 = st->params16;
    const int zero = st->zero_grads;
    #pragma omp parallel
    for (int b = 0; b < model->nblocks; b++) {
        const float wd = st->weight_decay[b];
        const size_t lo = model->offsets[b], hi = model->offsets[b + 1];
        if (p16 != NULL && zero) { LINEFIT_FOLDS(p16[i] = bf16_from_float(w); grads[i] = 0.0f;) }
        else if (p16 != NULL) { LINEFIT_FOLDS(p16[i] = bf16_from_float(w);) }
        else if (zero) { LINEFIT_FOLDS(grads[i] = 0.0f;) }
        else { LINEFIT_FOLDS() }
    }
    linefit_recorded(l);
}

// the jump: every weight to its line at tau*; the sums are spent, a new period begins
static inline void linefit_predict(void* self, const HybridModel* model, const HybridPlan* p, float* params, float* keep,
                                   float* const* bufs) {
    (void)p; (void)keep;
    Linefit* l = (Linefit*)self;
    const float a = l->a, b = l->b;
    const float* s0 = bufs[0];
    const float* s1 = bufs[1];
    const size_t n = model->num_params;
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) { params[i] = fmaf(a, s0[i], b * s1[i]); }
    linefit_jumped(l);
}

static inline void linefit_skip(void* self) { ((Linefit*)self)->tau = 0.0f; }

static inline void linefit_observe(void* self, const HybridObservation* o) { (void)self; (void)o; }

static inline void linefit_io(HybridIO* io, void* self, float* const* bufs, float* keep) {
    (void)keep;
    Linefit* l = (Linefit*)self;
    hio_expect_i32(io, l->cfg.states, "--linefit-states");
    hio_expect_i32(io, l->cfg.spacing, "--linefit-spacing");
    hio_expect_f32(io, l->cfg.jump, "--linefit-jump");
    hio_i32(io, &l->n);
    hio_f64(io, &l->st);
    hio_f64(io, &l->stt);
    hio_i32(io, &l->jumps);
    hio_f64(io, &l->ahead_sum);
    if (!io->writing && !io->failed && (l->n < 0 || l->n > l->cfg.states || l->jumps < 0 || !isfinite(l->st) ||
                                        !isfinite(l->stt) || !isfinite(l->ahead_sum))) {
        hio_fail(io, "linefit: state out of range");
    }
    if (bufs == NULL || bufs[0] == NULL || bufs[1] == NULL) { hio_fail(io, "linefit: no buffers given"); return; }
    hio_f32s(io, bufs[0], l->num_params);
    hio_f32s(io, bufs[1], l->num_params);
}

static inline void linefit_print_summary(const void* self, FILE* f) {
    const Linefit* l = (const Linefit*)self;
    fprintf(f, "linefit: %d states %d steps apart, %d jumps (mean %.1f steps ahead, first %g)\n", l->cfg.states,
            l->cfg.spacing, l->jumps, l->jumps ? l->ahead_sum / l->jumps : 0.0, l->cfg.jump);
}

static inline int linefit_summary_fields(const void* self, char* buf, size_t n) {
    const Linefit* l = (const Linefit*)self;
    size_t pos = strlen(buf);
    metrics_field(buf, n, &pos, "linefit_jumps", l->jumps, 1);
    metrics_field(buf, n, &pos, "linefit_mean_ahead", l->jumps ? l->ahead_sum / l->jumps : 0.0, 0);
    return (int)pos;
}

static inline void linefit_what(const void* self, char* buf, size_t n) {
    const Linefit* l = (const Linefit*)self;
    snprintf(buf, n, "jump %.1f steps ahead along the fitted line", l->ahead);
}

#ifdef __CUDACC__
__global__ void linefit_update_kernel(float* master, floatX* params, const float* grads, float* m_mem, float* v_mem,
                                      float* s0, float* s1, const size_t* offsets, const float* block_wd, int nblocks,
                                      size_t lo, size_t hi, ApplyAdamStep st, float bc1, float bc2, float tau, int first,
                                      uint32_t seed) {
    size_t i = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= hi) { return; }
    float wd = i < offsets[nblocks] ? block_wd[hybrid_block_of(offsets, nblocks, i)] : 0.0f;  // padding: no decay
    float m = m_mem[i - lo], v = v_mem[i - lo];
    float w = adamw_element(master[i], grads[i] * st.grad_scale, &m, &v, st.lr, st.beta1, st.beta2, bc1, bc2, st.eps, wd);
    m_mem[i - lo] = m;
    v_mem[i - lo] = v;
    master[i] = w;
    params[i] = round_to_floatX(w, i, seed);
    if (tau > 0.0f && first) { s0[i] = w; s1[i] = __fmul_rn(tau, w); }
    else if (tau > 0.0f) { s0[i] = __fadd_rn(s0[i], w); s1[i] = __fmaf_rn(tau, w, s1[i]); }
}

__global__ void linefit_jump_kernel(float* master, floatX* params, const float* s0, const float* s1, size_t lo, size_t hi,
                                    float a, float b, uint32_t seed) {
    size_t i = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= hi) { return; }
    float w = __fmaf_rn(a, s0[i], __fmul_rn(b, s1[i]));
    master[i] = w;
    params[i] = round_to_floatX(w, i, seed);
}

static void linefit_device_update(void* self, const HybridDeviceStep* s) {
    Linefit* l = (Linefit*)self;
    const ApplyAdamStep* st = &s->adam;
    float bc1, bc2;
    apply_bias_corrections(st, &bc1, &bc2);
    HYBRID_LAUNCH_RANGE(linefit_update_kernel, s, s->master, (floatX*)s->params, s->grads, s->m, s->v, s->bufs[0], s->bufs[1],
                        s->block_offsets, s->block_wd, s->nblocks, s->lo, s->hi, *st, bc1, bc2, l->tau, l->n == 0, s->seed);
    linefit_recorded(l);
}

static void linefit_device_predict(void* self, const HybridDeviceStep* s) {
    Linefit* l = (Linefit*)self;
    HYBRID_LAUNCH_RANGE(linefit_jump_kernel, s, s->master, (floatX*)s->params, s->bufs[0], s->bufs[1], s->lo, s->hi, l->a, l->b,
                        s->seed);
    linefit_jumped(l);
}
#endif

static const HybridMethod linefit_method = {
    "linefit", "nowcast jumps: a least-squares line per weight through c states s steps apart, a jump along it every c x s steps",
    &linefit_table, 2, 0, 1, 1,
    linefit_init, linefit_free, linefit_plan, linefit_update, linefit_predict, NULL, linefit_skip, linefit_observe,
    linefit_io, NULL, linefit_print_summary, linefit_summary_fields, NULL, NULL, linefit_what,
    HYBRID_ON_DEVICE(linefit_device_update), HYBRID_ON_DEVICE(linefit_device_predict), 0,
};

#endif // HYBRID_LINEFIT_H
