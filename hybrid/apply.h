/*
 * hybrid/apply.h — the per-element work of hybrid mode, as plain CPU reference loops.
 * The facade (hybrid/hybrid.h) decides per-block numbers; these loops touch the flat fp32
 * parameter buffer the trainer owns. A GPU trainer mirrors each loop with one kernel, and the CPU
 * tests pin down what that kernel must compute.
 *
 * Direction d (docs/hybrid.md §3), per element i, one of:
 *   ema:  d_i read from the direction buffer, d <- beta d + (1-beta) dtheta * lr_peak/lr_t
 *   adam: d_i = -lr_peak * mhat_i / (sqrt(vhat_i) + eps), read from the optimizer state (no memory)
 * Both are normalised to the peak learning rate, so a scale s = 1 means "one more step like the
 * recent ones at peak LR".
 *
 * Exact rollback. Undoing a Predict run by subtraction cannot be exact: fl(theta + x) is not
 * injective, and when |x| >> |theta| (a bias near zero, a large step) the low bits of theta are
 * simply gone (test_hybrid_apply shows a 1e-9 weight coming back thousands of ulp off). Keeping
 * them needs one float per element somewhere; the trainer already has a P-float buffer that is idle
 * from a Predict run's first step until its Correct step's backward (on the CPU: the gradients).
 * The run's first Predict step writes theta_0 there as it reads it anyway, and rollback copies it
 * back: bit-exact, no extra memory, one extra write per element per run (the later Predict steps of
 * the run do not touch it). The parameters stay the trainer's; nothing else is ever copied.
 *
 * A Predict step adds exactly fl(c_b * d_i): its loops are compiled without floating-point
 * contraction (a*b+c -> fma rounds once), so a GPU kernel written with __fmul_rn/__fadd_rn matches.
 *
 * A measured step's AdamW update and the statistics hybrid mode needs (and the EMA direction update)
 * are one fused pass, apply_adamw_observe (apply_adamw_lookahead with the look-ahead): hybrid mode adds no pass over the parameters to a Full
 * step, and a Predict step is one streaming pass (see each function).
 */
#ifndef HYBRID_APPLY_H
#define HYBRID_APPLY_H

#include <math.h>
#include <stddef.h>
#include <string.h>

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

#define APPLY_CHUNKS 64 // fixed chunks per block of apply_adamw_observe's partial sums

typedef enum { DIRECTION_EMA = 0, DIRECTION_ADAM = 1 } DirectionKind;

static inline const char* direction_name(int kind) { return kind == DIRECTION_ADAM ? "adam" : "ema"; }

// how to read d_i: the EMA buffer, or AdamW's moments with their bias corrections
typedef struct {
    int kind;
    const float* d;     // (P) direction buffer (ema)
    const float* m;     // (P) AdamW first moment (adam)
    const float* v;     // (P) AdamW second moment (adam)
    float bc1, bc2;     // 1 - beta1^t, 1 - beta2^t of the moments read
    float eps, scale;   // AdamW eps; scale = -lr_peak
} ApplyDirection;

static inline float apply_direction_at(const ApplyDirection* dir, size_t i) {
    if (dir->kind == DIRECTION_EMA) { return dir->d[i]; }
    float mh = dir->m[i] / dir->bc1;
    float vh = dir->v[i] / dir->bc2;
    return dir->scale * (mh / (sqrtf(vh) + dir->eps));
}

// ----------------------------------------------------------------------------
// Predict step: theta_b += fl(coef_b * d_b) in place. params, keep: (P); offsets: (nblocks+1) in
// floats; coef: (nblocks). first: the run's first step, which keeps theta_0 in `keep` for rollback.
// One streaming pass: read d (or m and v), read-write theta, write keep on a run's first step only.
// One parallel region, each block split statically over the threads; the kind and `first` are
// constants of each loop (no per-element branch), so every variant vectorises.

#define APPLY_PREDICT_LOOP(BODY)                                        \
    _Pragma("omp for simd schedule(static) nowait")                     \
    for (size_t i = lo; i < hi; i++) { BODY }

HYBRID_NOCONTRACT
static inline void apply_predict(float* params, float* keep, const ApplyDirection* dir,
                                 const size_t* offsets, int nblocks, const float* coef, int first) {
    HYBRID_NOCONTRACT_BODY
    const float* d = dir->d;
    const float* m = dir->m;
    const float* v = dir->v;
    const float bc1 = dir->bc1, bc2 = dir->bc2, eps = dir->eps, scale = dir->scale;
    const int ema = dir->kind == DIRECTION_EMA;
    #pragma omp parallel
    for (int b = 0; b < nblocks; b++) {
        const float c = coef[b];
        const size_t lo = offsets[b], hi = offsets[b + 1];
        if (ema && first) {
            APPLY_PREDICT_LOOP(float a = params[i]; keep[i] = a; params[i] = a + c * d[i];)
        } else if (ema) {
            APPLY_PREDICT_LOOP(params[i] = params[i] + c * d[i];)
        } else if (first) {
            APPLY_PREDICT_LOOP(float a = params[i]; keep[i] = a;
                               params[i] = a + c * (scale * ((m[i] / bc1) / (sqrtf(v[i] / bc2) + eps)));)
        } else {
            APPLY_PREDICT_LOOP(params[i] = params[i] + c * (scale * ((m[i] / bc1) / (sqrtf(v[i] / bc2) + eps)));)
        }
    }
}

// ----------------------------------------------------------------------------
// Rollback: the parameters from before the run, bit-exactly

static inline void apply_rollback(float* params, const float* keep, size_t n) {
    memcpy(params, keep, n * sizeof(float));
}

// ----------------------------------------------------------------------------
// A measured step: the AdamW update fused with hybrid mode's per-element work, one pass over
// theta, g, m, v (and d). Per element, with g = grads * grad_scale:
//   m' = b1 m + (1-b1) g;  v' = b2 v + (1-b2) g^2
//   theta' = theta - lr * ( (m'/bc1) / (sqrt(v'/bc2) + eps) + wd_b theta )   (as the plain AdamW loop)
//   dtheta = theta' - theta, the update as applied
//   d_old  = ema: d;  adam: -lr_peak * (m/pbc1) / (sqrt(v/pbc2) + eps), the moments before this step
//            (0 on the first update, when there are none)
//   ema: d <- fma(beta, d_old, (1-beta) * (dtheta * lr_peak/lr))   (d is kept at peak-lr scale)
// stats (nblocks, 3): <dtheta_b, d_old_b>, |d_old_b|^2, |dtheta_b|^2, in double.
// theta' is written with exactly the expression of the trainer's plain AdamW loop (compiled with the
// same contraction), so hybrid mode moves the weights as a plain run would; dtheta is derived from it
// rather than recomputed, so no product is shared between the update and the statistics (that would
// change where the compiler fuses multiply-adds). The EMA uses an explicit fmaf, the same rounding a
// GPU's __fmaf_rn gives. Sums: each block is cut into APPLY_CHUNKS fixed chunks summed in a fixed
// (simd) order, the chunk sums added in chunk order: the same bits whatever the thread count or
// scheduling, which bit-exact resume needs.
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
    float lr, lr_peak;  // lr of the step, peak lr
    float grad_scale;   // the clipping factor applied to the gradients
} ApplyAdamStep;

#define APPLY_ADAMW_LOOP(DOLD, AFTER)                                                      \
    _Pragma("omp simd reduction(+:dot, dd, uu)")                                           \
    for (size_t i = lo; i < hi; i++) {                                                     \
        float p = params[i];                                                               \
        float grad = grads[i] * grad_scale;                                                \
        float mo = m[i], vo = v[i];                                                        \
        float mi = beta1 * mo + (1.0f - beta1) * grad;                                     \
        float vi = beta2 * vo + (1.0f - beta2) * grad * grad;                              \
        m[i] = mi;                                                                         \
        v[i] = vi;                                                                         \
        float mhat = mi / bc1, vhat = vi / bc2;                                            \
        float pn = p - lr * (mhat / (sqrtf(vhat) + eps) + wd * p);                         \
        params[i] = pn;                                                                    \
        float delta = pn - p;                                                              \
        float dold = DOLD;                                                                 \
        AFTER                                                                              \
        dot += (double)delta * dold;                                                       \
        dd += (double)dold * dold;                                                         \
        uu += (double)delta * delta;                                                       \
    }

static inline void apply_adamw_observe(float* params, const float* grads, float* m, float* v, float* d,
                                       const ApplyAdamStep* st, int kind, float ema_beta,
                                       const size_t* offsets, int nblocks, double* partial, double* stats) {
    const float beta1 = st->beta1, beta2 = st->beta2, eps = st->eps, lr = st->lr, grad_scale = st->grad_scale;
    const float bc1 = 1.0f - powf(beta1, (float)st->t), bc2 = 1.0f - powf(beta2, (float)st->t);
    const int have_prev = st->t > 1;
    const float pbc1 = have_prev ? 1.0f - powf(beta1, (float)(st->t - 1)) : 1.0f;
    const float pbc2 = have_prev ? 1.0f - powf(beta2, (float)(st->t - 1)) : 1.0f;
    const float pscale = have_prev ? -st->lr_peak : 0.0f;
    const float norm = st->lr_peak / st->lr, omb = 1.0f - ema_beta;
    #pragma omp parallel
    for (int b = 0; b < nblocks; b++) {
        const size_t n = offsets[b + 1] - offsets[b];
        const size_t chunk = (n + APPLY_CHUNKS - 1) / APPLY_CHUNKS;
        const float wd = st->weight_decay[b];
        #pragma omp for schedule(static) nowait
        for (int c = 0; c < APPLY_CHUNKS; c++) {
            size_t lo, hi;
            apply_chunk(offsets, b, c, chunk, &lo, &hi);
            double dot = 0.0, dd = 0.0, uu = 0.0;
            if (kind == DIRECTION_EMA) {
                APPLY_ADAMW_LOOP(d[i], d[i] = fmaf(ema_beta, dold, omb * (delta * norm));)
            } else {
                APPLY_ADAMW_LOOP(pscale * ((mo / pbc1) / (sqrtf(vo / pbc2) + eps)), )
            }
            double* out = partial + ((size_t)b * APPLY_CHUNKS + c) * 3;
            out[0] = dot; out[1] = dd; out[2] = uu;
        }
    }
    apply_sum_partials(stats, partial, nblocks);
}

// ----------------------------------------------------------------------------
// The look-ahead along the slow drift (hybrid/lookahead.h): the same AdamW pass, with d as m, the EMA
// of the weights' displacement, and the look-ahead applied in the same pass. Per element of block b,
// with bp = the look-ahead the weights hold now (beta_prev[b]) and bn = the next one (beta_next[b]):
//   theta' = AdamW(theta) exactly as above;  delta = theta' - theta
//   m <- gamma m + (1-gamma) (bp m + delta)      (the displacement includes the look-ahead it undid)
//   theta <- theta' + bn m
// so the next gradient is taken at the look-ahead point and no theta_prev is kept. With bp = bn = 0
// (the prefill) m gathers and the weights are AdamW's, bit for bit. The look-ahead's arithmetic is
// written with explicit fmaf, the rounding a GPU's __fmaf_rn gives, so no contraction can change it.
// stats (nblocks, 3): <delta_b, m_b>, |m_b|^2 (m before this step), |delta_b|^2, as apply_adamw_observe.

static inline void apply_adamw_lookahead(float* params, const float* grads, float* m, float* v, float* d,
                                         const ApplyAdamStep* st, float gamma, const float* beta_prev,
                                         const float* beta_next, const size_t* offsets, int nblocks,
                                         double* partial, double* stats) {
    const float beta1 = st->beta1, beta2 = st->beta2, eps = st->eps, lr = st->lr, grad_scale = st->grad_scale;
    const float bc1 = 1.0f - powf(beta1, (float)st->t), bc2 = 1.0f - powf(beta2, (float)st->t);
    const float omg = 1.0f - gamma;
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
            APPLY_ADAMW_LOOP(d[i], float mn = fmaf(gamma, dold, omg * fmaf(bp, dold, delta));
                                   d[i] = mn;
                                   params[i] = fmaf(bn, mn, pn);)
            double* out = partial + ((size_t)b * APPLY_CHUNKS + c) * 3;
            out[0] = dot; out[1] = dd; out[2] = uu;
        }
    }
    apply_sum_partials(stats, partial, nblocks);
}

#endif // HYBRID_APPLY_H
