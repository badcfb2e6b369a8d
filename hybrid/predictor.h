/*
 * hybrid/predictor.h — the predictors of docs/hybrid.md §4, behind one interface.
 * A predictor maps the feature vector (hybrid/features.h) to `out` numbers: one scale s_b per
 * parameter block (how far the next update goes along the direction buffer) and, last, the loss
 * change per step (in units of the loss noise). It is trained online on every measured step and
 * asked for the k-th step of a Predict run.
 *   momentum: an EMA of the targets (the control every learned predictor must beat)
 *   linear:   ridge regression with exponential forgetting, solved exactly (Cholesky) when asked
 *   mlp:      one hidden layer (tanh), online Adam
 *   rssm:     RSSM-lite ensemble (hybrid/rssm.h)
 *   nesterov: no learning: s_b = beta1, the look-ahead of Nesterov momentum (with --direction adam: theta moves
 *             by beta1 * lr_t * mhat/sqrt(vhat), the part of AdamW's next update already known)
 *   scaled:   no learning: s_b = kappa (--kappa), along a long-memory EMA of updates (--direction ema,
 *             --direction-beta 0.98 or more); the facade multiplies by lr_t/lr_peak like every scale
 * The two fixed-scale kinds predict the loss change like momentum (an EMA of the measured ones).
 * Every predictor starts at 0 (no movement) and can learn s = 0 where predicting does not pay:
 * the ridge and the weight decay of the learned ones pull toward 0, never toward extrapolation.
 * All memory is allocated in predictor_init.
 */
#ifndef HYBRID_PREDICTOR_H
#define HYBRID_PREDICTOR_H

#include <stdlib.h>
#include <string.h>
#include "hybrid/hmath.h"
#include "hybrid/hio.h"
#include "hybrid/rssm.h"

typedef enum { PREDICTOR_MOMENTUM = 0, PREDICTOR_LINEAR = 1, PREDICTOR_MLP = 2, PREDICTOR_RSSM = 3,
               PREDICTOR_NESTEROV = 4, PREDICTOR_SCALED = 5 } PredictorKind;
#define PREDICTOR_KINDS 6
#define PREDICTOR_MLP_HIDDEN 32

static inline const char* predictor_name(int kind) {
    static const char* names[PREDICTOR_KINDS] = {"momentum", "linear", "mlp", "rssm", "nesterov", "scaled"};
    return (kind >= 0 && kind < PREDICTOR_KINDS) ? names[kind] : "?";
}

// the kinds whose scale is a fixed number (fixed_scale), not learned
static inline int predictor_is_fixed(int kind) { return kind == PREDICTOR_NESTEROV || kind == PREDICTOR_SCALED; }

static inline int predictor_parse(const char* s) {
    for (int k = 0; k < PREDICTOR_KINDS; k++) { if (strcmp(s, predictor_name(k)) == 0) { return k; } }
    return -1;
}

typedef struct {
    int kind, in_dim, out_dim;
    int seen;          // observations so far
    // momentum, and the loss output of the fixed-scale kinds
    float* ema;        // (out)
    float ema_decay;
    float fixed_scale; // nesterov: beta1; scaled: kappa
    // linear (ridge with forgetting): A = sum w x x^T, B = sum w x y^T, W solves (A + ridge I) W = B
    double* A;         // (in, in)
    double* B;         // (in, out)
    double* W;         // (in, out) cached solution
    double* work;      // (2*in*in + 2*in) solver scratch
    double forget, ridge;
    int solved;        // W is current
    // mlp: W1 (H,in) b1 (H) W2 (out,H) b2 (out), flat
    float *params, *grads, *m, *v, *hidden, *yhat; // yhat: (out) scratch
    int nparams, t;
    float lr;
    // rssm
    Rssm rssm;
} Predictor;

static inline void predictor_init(Predictor* p, int kind, int in_dim, int out_dim, uint64_t seed) {
    memset(p, 0, sizeof(*p));
    p->kind = kind; p->in_dim = in_dim; p->out_dim = out_dim;
    p->ema_decay = 0.9f; p->forget = 0.99; p->ridge = 1.0; p->lr = 3e-3f;
    if (kind == PREDICTOR_MOMENTUM || predictor_is_fixed(kind)) {
        p->ema = (float*)calloc((size_t)out_dim, sizeof(float));
    } else if (kind == PREDICTOR_LINEAR) {
        p->A = (double*)calloc((size_t)in_dim * in_dim, sizeof(double));
        p->B = (double*)calloc((size_t)in_dim * out_dim, sizeof(double));
        p->W = (double*)calloc((size_t)in_dim * out_dim, sizeof(double));
        p->work = (double*)calloc(2 * (size_t)in_dim * in_dim + 2 * (size_t)in_dim, sizeof(double));
    } else if (kind == PREDICTOR_MLP) {
        const int H = PREDICTOR_MLP_HIDDEN;
        p->nparams = H * in_dim + H + out_dim * H + out_dim;
        p->params = (float*)calloc((size_t)p->nparams, sizeof(float));
        p->grads = (float*)calloc((size_t)p->nparams, sizeof(float));
        p->m = (float*)calloc((size_t)p->nparams, sizeof(float));
        p->v = (float*)calloc((size_t)p->nparams, sizeof(float));
        p->hidden = (float*)calloc((size_t)H, sizeof(float));
        p->yhat = (float*)calloc((size_t)out_dim, sizeof(float));
        uint64_t rng = seed ^ 0xA5A5A5A5ull;
        float sx = 1.0f / sqrtf((float)in_dim);
        for (int i = 0; i < H * in_dim; i++) { p->params[i] = sx * hmath_normal(&rng); }
        // W2, b2 = 0: the untrained MLP predicts 0
    } else {
        rssm_init(&p->rssm, in_dim, out_dim, seed);
        p->lr = 1e-2f; // the recurrent read-out learns slower than the MLP's; the ensemble mean averages the noise
    }
}

static inline void predictor_free(Predictor* p) {
    free(p->ema); free(p->A); free(p->B); free(p->W); free(p->work);
    free(p->params); free(p->grads); free(p->m); free(p->v); free(p->hidden); free(p->yhat);
    if (p->kind == PREDICTOR_RSSM) { rssm_free(&p->rssm); }
    memset(p, 0, sizeof(*p));
}

static inline void predictor_mlp_forward(Predictor* p, const float* x, float* y) {
    const int H = PREDICTOR_MLP_HIDDEN, in = p->in_dim, out = p->out_dim;
    const float *W1 = p->params, *b1 = W1 + H * in, *W2 = b1 + H, *b2 = W2 + out * H;
    for (int i = 0; i < H; i++) {
        float a = b1[i];
        for (int j = 0; j < in; j++) { a += W1[i * in + j] * x[j]; }
        p->hidden[i] = tanhf(a);
    }
    for (int o = 0; o < out; o++) {
        float a = b2[o];
        for (int i = 0; i < H; i++) { a += W2[o * H + i] * p->hidden[i]; }
        y[o] = a;
    }
}

static inline void predictor_solve(Predictor* p) {
    const int in = p->in_dim, out = p->out_dim;
    double* Areg = p->work;                      // (in, in) A + ridge I
    double* chol = Areg + (size_t)in * in;       // (in, in) Cholesky scratch
    double* rhs = chol + (size_t)in * in;        // (in)
    double* sol = rhs + in;                      // (in)
    for (int i = 0; i < in * in; i++) { Areg[i] = p->A[i]; }
    for (int i = 0; i < in; i++) { Areg[i * in + i] += p->ridge; }
    for (int o = 0; o < out; o++) {
        for (int j = 0; j < in; j++) { rhs[j] = p->B[j * out + o]; }
        if (hmath_spd_solve(Areg, rhs, sol, chol, in) != 0) { memset(sol, 0, (size_t)in * sizeof(double)); }
        for (int j = 0; j < in; j++) { p->W[j * out + o] = sol[j]; }
    }
    p->solved = 1;
}

// one observation: features x (in), targets y (out)
static inline void predictor_update(Predictor* p, const float* x, const float* y) {
    const int in = p->in_dim, out = p->out_dim;
    p->seen++;
    if (p->kind == PREDICTOR_MOMENTUM || predictor_is_fixed(p->kind)) {
        float a = p->seen == 1 ? 0.0f : p->ema_decay;
        for (int o = 0; o < out; o++) { p->ema[o] = a * p->ema[o] + (1.0f - a) * y[o]; }
    } else if (p->kind == PREDICTOR_LINEAR) {
        for (int i = 0; i < in; i++) {
            for (int j = 0; j < in; j++) { p->A[i * in + j] = p->forget * p->A[i * in + j] + (double)x[i] * x[j]; }
            for (int o = 0; o < out; o++) { p->B[i * out + o] = p->forget * p->B[i * out + o] + (double)x[i] * y[o]; }
        }
        p->solved = 0;
    } else if (p->kind == PREDICTOR_MLP) {
        const int H = PREDICTOR_MLP_HIDDEN;
        float* yh = p->yhat;
        predictor_mlp_forward(p, x, yh);
        float *W2 = p->params + H * in + H;
        float *gW1 = p->grads, *gb1 = gW1 + H * in, *gW2 = gb1 + H, *gb2 = gW2 + out * H;
        memset(p->grads, 0, (size_t)p->nparams * sizeof(float));
        float dh[PREDICTOR_MLP_HIDDEN] = {0};
        for (int o = 0; o < out; o++) {
            float dy = 2.0f * (yh[o] - y[o]) / (float)out;
            gb2[o] = dy;
            for (int i = 0; i < H; i++) { gW2[o * H + i] = dy * p->hidden[i]; dh[i] += dy * W2[o * H + i]; }
        }
        for (int i = 0; i < H; i++) {
            float da = dh[i] * (1.0f - p->hidden[i] * p->hidden[i]);
            gb1[i] = da;
            for (int j = 0; j < in; j++) { gW1[i * in + j] = da * x[j]; }
        }
        for (int i = 0; i < p->nparams; i++) { p->grads[i] += 1e-4f * p->params[i]; } // decay toward 0
        p->t++;
        hmath_adam(p->params, p->grads, p->m, p->v, p->nparams, p->t, p->lr);
    } else {
        rssm_update(&p->rssm, x, y, p->lr);
    }
}

// prediction for step k (1-based) of a Predict run; *spread = ensemble disagreement (rssm) or 0
static inline void predictor_predict(Predictor* p, const float* x, int k, float* y, float* spread) {
    const int in = p->in_dim, out = p->out_dim;
    if (spread != NULL) { *spread = 0.0f; }
    if (p->kind == PREDICTOR_MOMENTUM) {
        memcpy(y, p->ema, (size_t)out * sizeof(float));
    } else if (predictor_is_fixed(p->kind)) {
        for (int o = 0; o < out - 1; o++) { y[o] = p->fixed_scale; }
        y[out - 1] = p->ema[out - 1];
    } else if (p->kind == PREDICTOR_LINEAR) {
        if (!p->solved) { predictor_solve(p); }
        for (int o = 0; o < out; o++) {
            double a = 0.0;
            for (int j = 0; j < in; j++) { a += p->W[j * out + o] * x[j]; }
            y[o] = (float)a;
        }
    } else if (p->kind == PREDICTOR_MLP) {
        predictor_mlp_forward(p, x, y);
    } else {
        rssm_predict(&p->rssm, x, k < 1 ? 1 : k, y, spread);
    }
}

static inline void predictor_io(HybridIO* io, Predictor* p) {
    hio_expect_i32(io, p->kind, "predictor kind");
    hio_expect_i32(io, p->in_dim, "predictor input size");
    hio_expect_i32(io, p->out_dim, "predictor output size");
    hio_i32(io, &p->seen);
    if (p->kind == PREDICTOR_MOMENTUM || predictor_is_fixed(p->kind)) {
        hio_expect_f32(io, p->fixed_scale, "predictor fixed scale");
        hio_f32s(io, p->ema, (size_t)p->out_dim);
    } else if (p->kind == PREDICTOR_LINEAR) {
        hio_f64s(io, p->A, (size_t)p->in_dim * p->in_dim);
        hio_f64s(io, p->B, (size_t)p->in_dim * p->out_dim);
        p->solved = 0; // W is recomputed from A and B, bit-identically
    } else if (p->kind == PREDICTOR_MLP) {
        hio_i32(io, &p->t);
        hio_f32s(io, p->params, (size_t)p->nparams);
        hio_f32s(io, p->m, (size_t)p->nparams);
        hio_f32s(io, p->v, (size_t)p->nparams);
    } else {
        rssm_io(io, &p->rssm);
    }
}

#endif // HYBRID_PREDICTOR_H
