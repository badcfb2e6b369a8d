/*
 * hybrid/apply.h — the per-element work of hybrid mode, as plain CPU reference loops.
 * The facade (hybrid/hybrid.h) decides per-block numbers; these loops touch the flat fp32
 * parameter buffer the trainer owns. A GPU trainer mirrors each loop with one kernel, and the CPU
 * tests pin down what that kernel must compute.
 *
 * Direction d (HYBRID.md §3), per element i, one of:
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
 * A Predict step adds exactly fl(c_b * d_i): the loops are compiled without floating-point
 * contraction (a*b+c -> fma rounds once), so a GPU kernel written with __fmul_rn/__fadd_rn matches.
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

#define APPLY_CHUNKS 64 // per-block partial sums of apply_observe

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

HYBRID_NOCONTRACT
static inline void apply_predict(float* params, float* keep, const ApplyDirection* dir,
                                 const size_t* offsets, int nblocks, const float* coef, int first) {
    HYBRID_NOCONTRACT_BODY
    for (int b = 0; b < nblocks; b++) {
        const float c = coef[b];
        #pragma omp parallel for if (offsets[b + 1] - offsets[b] > 65536)
        for (size_t i = offsets[b]; i < offsets[b + 1]; i++) {
            float a = params[i];
            float x = c * apply_direction_at(dir, i);
            if (first) { keep[i] = a; }
            params[i] = a + x;
        }
    }
}

// ----------------------------------------------------------------------------
// Rollback: the parameters from before the run, bit-exactly

static inline void apply_rollback(float* params, const float* keep, size_t n) {
    memcpy(params, keep, n * sizeof(float));
}

// ----------------------------------------------------------------------------
// After a measured step's AdamW update: per-block statistics of the real update against the
// direction used so far, and (ema) the direction update, in one pass.
// The real update is reconstructed from the optimizer state the step just wrote:
//   dtheta_i = -lr_t * (mhat_i / (sqrt(vhat_i) + eps) + wd_b * theta_i)
// The direction before this step: ema: d_i as stored; adam: the moments before this step,
// recovered from m, v and the (clipped) gradient g_i * grad_scale.
// stats (nblocks, 3): <dtheta_b, d_b>, |d_b|^2, |dtheta_b|^2, in double.

typedef struct {
    float beta1, beta2, eps;
    const float* weight_decay; // (nblocks) decoupled weight decay of each block
    int t;              // AdamW step count of the update just made (1-based)
    float lr, lr_peak;  // lr of the step, peak lr
    float grad_scale;   // the clipping factor the update applied to the gradients
} ApplyAdamStep;

HYBRID_NOCONTRACT
static inline void apply_observe(float* d, const float* params, const float* m, const float* v, const float* grads,
                          const ApplyAdamStep* st, int kind, float ema_beta,
                          const size_t* offsets, int nblocks, double* stats) {
    const float bc1 = 1.0f - powf(st->beta1, (float)st->t), bc2 = 1.0f - powf(st->beta2, (float)st->t);
    const float pbc1 = 1.0f - powf(st->beta1, (float)(st->t - 1)), pbc2 = 1.0f - powf(st->beta2, (float)(st->t - 1));
    const float norm = st->lr_peak / st->lr; // d is kept at peak-lr scale
    const int have_prev = st->t > 1;
    for (int b = 0; b < nblocks; b++) {
        // fixed chunks summed in a fixed order: the statistics (and so the predictions) are the
        // same bits whatever the thread count or scheduling, which bit-exact resume needs
        double part[APPLY_CHUNKS][3];
        const size_t n = offsets[b + 1] - offsets[b];
        const size_t chunk = (n + APPLY_CHUNKS - 1) / APPLY_CHUNKS;
        const float wd = st->weight_decay[b];
        #pragma omp parallel for if (n > 65536)
        for (int c = 0; c < APPLY_CHUNKS; c++) {
            double dot = 0.0, dd = 0.0, uu = 0.0;
            size_t lo = offsets[b] + (size_t)c * chunk, hi = lo + chunk;
            if (hi > offsets[b + 1]) { hi = offsets[b + 1]; }
            for (size_t i = lo; i < hi; i++) {
                float mh = m[i] / bc1, vh = v[i] / bc2;
                float delta = -st->lr * (mh / (sqrtf(vh) + st->eps) + wd * params[i]);
                float dold;
                if (kind == DIRECTION_EMA) {
                    dold = d[i];
                    d[i] = ema_beta * dold + (1.0f - ema_beta) * (delta * norm);
                } else if (have_prev) {
                    float g = grads[i] * st->grad_scale;
                    float mp = (m[i] - (1.0f - st->beta1) * g) / st->beta1;
                    float vp = (v[i] - (1.0f - st->beta2) * g * g) / st->beta2;
                    vp = vp > 0.0f ? vp : 0.0f;
                    dold = -st->lr_peak * ((mp / pbc1) / (sqrtf(vp / pbc2) + st->eps));
                } else {
                    dold = 0.0f;
                }
                dot += (double)delta * dold;
                dd += (double)dold * dold;
                uu += (double)delta * delta;
            }
            part[c][0] = dot; part[c][1] = dd; part[c][2] = uu;
        }
        double dot = 0.0, dd = 0.0, uu = 0.0;
        for (int c = 0; c < APPLY_CHUNKS; c++) { dot += part[c][0]; dd += part[c][1]; uu += part[c][2]; }
        stats[3 * b + 0] = dot;
        stats[3 * b + 1] = dd;
        stats[3 * b + 2] = uu;
    }
}

#endif // HYBRID_APPLY_H
