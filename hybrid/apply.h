/*
 * hybrid/apply.h — the per-element work of hybrid mode, as plain CPU reference loops.
 * The facade (hybrid/hybrid.h) decides per-block numbers; these loops touch the flat fp32 parameter
 * buffer the trainer owns and the drift buffer m (P floats, the EMA of the weights' displacement per
 * step). A GPU trainer mirrors each loop with one kernel (hybrid/apply.cuh), and the CPU tests pin
 * down what that kernel must compute. Three loops:
 *   apply_adamw_lookahead  a measured step: AdamW fused with the drift update and the look-ahead, and the
 *                          per-block statistics the facade needs; one pass over theta, g, m, v and the drift
 *                          (and the trainer's EMA of the weights, where it keeps one)
 *   apply_predict          a Predict step: theta_b += fl(coef_b * m_b), no forward, no backward
 *   apply_rollback         undo a Predict run, bit-exactly
 *
 * Exact rollback. Undoing a Predict run by subtraction cannot be exact: fl(theta + x) is not injective,
 * and when |x| >> |theta| (a bias near zero) the low bits of theta are simply gone. Keeping them needs
 * one float per element somewhere; the trainer already has a P-float buffer that is idle from a Predict
 * run's first step until its Correct step's backward (on the CPU: the gradients). The run's first Predict
 * step writes theta_0 there as it reads it anyway, and rollback copies it back: bit-exact, no extra
 * memory. The parameters stay the trainer's; nothing else is ever copied.
 *
 * A Predict step adds exactly fl(c_b * m_i): its loop is compiled without floating-point contraction, so
 * a GPU kernel written with __fmul_rn/__fadd_rn matches; the fused pass writes its look-ahead with
 * explicit fmaf, the rounding a GPU's __fmaf_rn gives.
 */
#ifndef HYBRID_APPLY_H
#define HYBRID_APPLY_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "llmc/adamw.h"  // adamw_element
#include "llmc/average.h" // average_ema_element: a trainer's EMA, folded in the same pass
#include "llmc/bf16.h"   // bf16_from_float

// no contraction inside the loops that must round exactly as written (GCC: per function; clang: the
// standard pragma at the top of the function body, so the includer's code is not affected)
#if defined(__clang__)
#define HYBRID_NOCONTRACT
#define HYBRID_NOCONTRACT_BODY _Pragma("STDC FP_CONTRACT OFF")
#elif defined(__GNUC__)
#define HYBRID_NOCONTRACT __attribute__((optimize("fp-contract=off")))
#define HYBRID_NOCONTRACT_BODY
#else
#define HYBRID_NOCONTRACT
#define HYBRID_NOCONTRACT_BODY
#endif

#define APPLY_CHUNKS 64 // fixed chunks per block of apply_adamw_lookahead's partial sums

// ----------------------------------------------------------------------------
// Predict step: theta_b += fl(coef_b * m_b) in place, m the drift. params, keep, drift: (P); offsets:
// (nblocks+1) in floats; coef: (nblocks). first: the run's first step, which keeps theta_0 in `keep` for
// rollback. One streaming pass: read m, read-write theta, write keep on a run's first step only. Each
// block is split statically over the threads; `first` is a constant of each loop, so both vectorise.

HYBRID_NOCONTRACT
static inline void apply_predict(float* params, float* keep, const float* drift, const size_t* offsets, int nblocks,
                                 const float* coef, int first) {
    HYBRID_NOCONTRACT_BODY
    #pragma omp parallel
    for (int b = 0; b < nblocks; b++) {
        const float c = coef[b];
        const size_t lo = offsets[b], hi = offsets[b + 1];
        if (first) {
            #pragma omp for simd schedule(static) nowait
            for (size_t i = lo; i < hi; i++) { float a = params[i]; keep[i] = a; params[i] = a + c * drift[i]; }
        } else {
            #pragma omp for simd schedule(static) nowait
            for (size_t i = lo; i < hi; i++) { params[i] = params[i] + c * drift[i]; }
        }
    }
}

// ----------------------------------------------------------------------------
// Rollback: the parameters from before the run, bit-exactly

static inline void apply_rollback(float* params, const float* keep, size_t n) {
    memcpy(params, keep, n * sizeof(float));
}

// ----------------------------------------------------------------------------
// A measured step: AdamW, the drift update and the look-ahead in one pass over theta, g, m, v and the
// drift d. Per element of block b, with g = grads * grad_scale, bp = the look-ahead the weights hold now
// (beta_prev[b]) and bn = the one to add (beta_next[b]):
//   m' = b1 m + (1-b1) g;  v' = b2 v + (1-b2) g^2
//   theta' = theta - lr * ( (m'/bc1) / (sqrt(v'/bc2) + eps) + wd_b theta )   (llmc/adamw.h's element)
//   delta = theta' - theta, the update as applied
//   d <- gamma d + (1-gamma) (bp d + delta)    (the displacement includes the look-ahead it undid)
//   theta <- theta' + bn d
// so the next gradient is taken at the look-ahead point and no theta_prev is kept. With bp = bn = 0
// (the drift's prefill) d gathers and the weights are AdamW's, bit for bit: theta' is the one AdamW
// element every update pass uses (compiled with the same contraction), and delta is derived from it
// rather than recomputed.
// stats (nblocks, 3): <delta_b, d_b>, |d_b|^2 (d before this step), |delta_b|^2, in double. Each block is
// cut into APPLY_CHUNKS fixed chunks summed in a fixed (simd) order, the chunk sums added in chunk
// order: the same bits whatever the thread count, which bit-exact resume needs.
// partial: (nblocks, APPLY_CHUNKS, 3) scratch.

// stats[b*3 + k] = the sum of block b's chunk partials, in chunk order (the GPU path sums alike)
static inline void apply_sum_partials(double* stats, const double* partial, int nblocks) {
    for (int b = 0; b < nblocks; b++) {
        for (int k = 0; k < 3; k++) {
            double s = 0.0;
            for (int c = 0; c < APPLY_CHUNKS; c++) { s += partial[((size_t)b * APPLY_CHUNKS + c) * 3 + k]; }
            stats[3 * b + k] = s;
        }
    }
}

// chunk c of block b: [lo, hi), the fixed cut both fused passes sum in
static inline void apply_chunk(const size_t* offsets, int b, int c, size_t chunk, size_t* lo, size_t* hi) {
    *lo = offsets[b] + (size_t)c * chunk;
    *hi = *lo + chunk;
    if (*lo > offsets[b + 1]) { *lo = offsets[b + 1]; }
    if (*hi > offsets[b + 1]) { *hi = offsets[b + 1]; }
}

typedef struct {
    float beta1, beta2, eps;
    const float* weight_decay; // (nblocks) decoupled weight decay of each block
    int t;              // AdamW step count of this update (1-based)
    float lr;           // lr of the step
    float grad_scale;   // the clipping factor applied to the gradients
    uint16_t* params16; // (P) or NULL: the trainer's bf16 copy of the weights, rounded (bf16_from_float) in the same
                        // pass from the weights it writes, so that a bf16 trainer needs no pass of its own
    int zero_grads;     // each gradient set to 0 where it is read (hybrid_update: the trainer's next step
                        // accumulates into them with no zeroing pass of its own, as after gpt2_update)
    float* ema;         // (P) or NULL: the trainer's EMA of the weights (--ema, llmc/average.h), into which the
                        // pass folds each weight it writes, e = ema_w p + ema_k e, as the trainer's own pass does
    float ema_w, ema_k; // the EMA's coefficients for this update (average_ema_coefs)
} ApplyAdamStep;

// AdamW's bias corrections 1 - beta^t of the step, as every update pass (CPU or device) computes them
static inline void apply_bias_corrections(const ApplyAdamStep* st, float* bc1, float* bc2) {
    *bc1 = 1.0f - powf(st->beta1, (float)st->t);
    *bc2 = 1.0f - powf(st->beta2, (float)st->t);
}

// one element of the fused pass: AdamW, the drift, the look-ahead (pf: the weight as written), the statistics;
// ZERO and AFTER: what a variant adds (the gradient zeroed, the bf16 copy, the EMA)
#define APPLY_ADAMW_LOOP(ZERO, AFTER)                                                      \
    _Pragma("omp simd reduction(+:dot, dd, uu)")                                           \
    for (size_t i = lo; i < hi; i++) {                                                     \
        float p = params[i];                                                               \
        float pn = adamw_element(p, grads[i] * grad_scale, &m[i], &v[i], lr, beta1, beta2, bc1, bc2, eps, wd); \
        ZERO                                                                               \
        float delta = pn - p;                                                              \
        float dold = d[i];                                                                 \
        float mn = fmaf(gamma, dold, omg * fmaf(bp, dold, delta));                         \
        d[i] = mn;                                                                         \
        float pf = fmaf(bn, mn, pn);                                                       \
        params[i] = pf;                                                                    \
        AFTER                                                                              \
        dot += (double)delta * dold;                                                       \
        dd += (double)dold * dold;                                                         \
        uu += (double)delta * delta;                                                       \
    }
#define APPLY_ZERO grads[i] = 0.0f;
#define APPLY_P16 p16[i] = bf16_from_float(pf);
#define APPLY_EMA e[i] = average_ema_element(e[i], pf, ew, ek);
// the four variants of what follows each weight, for one choice of ZERO (each a constant of its loop, so all vectorise)
#define APPLY_ADAMW_VARIANTS(ZERO)                                                         \
    if (p16 != NULL && e != NULL) { APPLY_ADAMW_LOOP(ZERO, APPLY_P16 APPLY_EMA) }          \
    else if (p16 != NULL) { APPLY_ADAMW_LOOP(ZERO, APPLY_P16) }                            \
    else if (e != NULL) { APPLY_ADAMW_LOOP(ZERO, APPLY_EMA) }                              \
    else { APPLY_ADAMW_LOOP(ZERO, ) }

static inline void apply_adamw_lookahead(float* params, float* grads, float* m, float* v, float* d,
                                         const ApplyAdamStep* st, float gamma, const float* beta_prev,
                                         const float* beta_next, const size_t* offsets, int nblocks,
                                         double* partial, double* stats) {
    const float beta1 = st->beta1, beta2 = st->beta2, eps = st->eps, lr = st->lr, grad_scale = st->grad_scale;
    float bc1, bc2;
    apply_bias_corrections(st, &bc1, &bc2);
    const float omg = 1.0f - gamma;
    uint16_t* const p16 = st->params16;
    float* const e = st->ema;
    const float ew = st->ema_w, ek = st->ema_k;
    #pragma omp parallel
    for (int b = 0; b < nblocks; b++) {
        const size_t n = offsets[b + 1] - offsets[b];
        const size_t chunk = (n + APPLY_CHUNKS - 1) / APPLY_CHUNKS;
        const float wd = st->weight_decay[b], bp = beta_prev[b], bn = beta_next[b];
        #pragma omp for schedule(static) nowait
        for (int c = 0; c < APPLY_CHUNKS; c++) {
            size_t lo, hi;
            apply_chunk(offsets, b, c, chunk, &lo, &hi);
            double dot = 0.0, dd = 0.0, uu = 0.0;
            if (st->zero_grads) {
                APPLY_ADAMW_VARIANTS(APPLY_ZERO)
            } else {
                APPLY_ADAMW_VARIANTS()
            }
            double* out = partial + ((size_t)b * APPLY_CHUNKS + c) * 3;
            out[0] = dot; out[1] = dd; out[2] = uu;
        }
    }
    apply_sum_partials(stats, partial, nblocks);
}

#endif // HYBRID_APPLY_H
