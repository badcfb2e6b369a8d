/*
 * hybrid/value.h — the value test: is a Predict step worth what it costs? (docs/hybrid.md §2)
 * A step's expected loss gain is far below one batch's loss noise, so comparing a Correct step's
 * loss with a trend says nothing. Paired losses on the same unseen batch do: a probed Predict run
 * measures, on the batch its Correct step will train on,
 *     pred gain = (L(theta_0) - L(theta_pred)) / H        per predicted step (H steps in the run)
 * and its Correct step measures, on the batch after it, what one Full step gains,
 *     full gain = L(theta_pred) - L(theta_pred + Correct update)
 * (the second loss is the next step's first forward: no extra cost). Their ratio is the run's value
 * rho in Full steps per Predict step. A predicted step pays where rho exceeds its cost c in Full
 * steps (the probes' forward passes included), so each pair adds x = pred gain - c * full gain and
 * the test keeps Predict runs going only while the pooled mean of x is above zero by `z` standard
 * errors; the first VALUE_MIN_PAIRS pairs are gathered unconditionally. The burden of proof is on
 * prediction: worthless Predict steps (rho ~ 0) fail the test and predicting stops. Until the test has
 * passed, a probe run only measures: its Correct step rolls it back (exactly) after the check, so a
 * Predict step that would have done harm costs no more than a step without progress; and such steps are
 * capped at VALUE_BUDGET of the schedule (in a short run the budget may end the probing before the test
 * could decide).
 * Fixed size; no allocation. Depends on libc and hybrid/hio.h.
 */
#ifndef HYBRID_VALUE_H
#define HYBRID_VALUE_H

#include <math.h>
#include <string.h>
#include "hybrid/hio.h"

#define VALUE_MIN_PAIRS 8       // pairs gathered before the test decides
#define VALUE_Z 2.0f            // one-sided: the mean excess must be this many standard errors above 0
#define VALUE_PROBE_EVERY 4     // while the test passes, one run in this many is probed
#define VALUE_PASS_COST 0.01f   // a Predict step's own pass, in Full steps (measured: ~0.5%; rounded up)
#define VALUE_BUDGET 0.02f      // until the test has passed, Predict steps are at most this share of the schedule

typedef struct {
    int pairs;                 // completed (pred gain, full gain) pairs
    double sum, sq;            // of x = pred gain - cost * full gain
    double pred_sum, full_sum; // of the gains, for the rho estimate
    int open;                  // Predict runs may continue (the test passes, or too few pairs yet)
    float l0;                  // this run's probe: loss at theta_0 on the Correct step's batch, NAN if none
    float pred_gain;           // the last probed run's gain per predicted step, waiting for its pair
    float cost;                // the last probed run's cost per predicted step, in Full steps
    float pending;             // loss at theta_pred on the batch after the Correct step, NAN if none
} ValueTest;

static inline void value_init(ValueTest* v) {
    memset(v, 0, sizeof(*v));
    v->open = 1;
    v->l0 = NAN; v->pred_gain = NAN; v->pending = NAN;
}

// the cost of a predicted step in Full steps, if the runs go on: its own pass, and the two probe forwards
// (a forward is ~1/3 of a forward-backward; a Full step is `micro_batches` of them), one run in
// VALUE_PROBE_EVERY, spread over the run's H steps
static inline float value_cost(int micro_batches, int run_steps) {
    float probe = 2.0f / (3.0f * (float)micro_batches * (float)(run_steps > 0 ? run_steps : 1));
    return VALUE_PASS_COST + probe / (float)VALUE_PROBE_EVERY;
}

// pooled estimate of rho (Full steps per Predict step): mean pred gain / mean full gain; NAN before a pair
static inline float value_rho(const ValueTest* v) {
    return v->pairs > 0 && v->full_sum != 0.0 ? (float)(v->pred_sum / v->full_sum) : NAN;
}

static inline double value_mean(const ValueTest* v) { return v->pairs ? v->sum / v->pairs : NAN; }

static inline double value_se(const ValueTest* v) {
    if (v->pairs < 2) { return NAN; }
    double n = v->pairs, m = v->sum / n;
    double var = (v->sq - n * m * m) / (n - 1.0);
    return sqrt(var > 0.0 ? var / n : 0.0);
}

// a pair is complete: update the sums and the decision; returns whether Predict runs may go on
static inline int value_add(ValueTest* v, float pred_gain, float full_gain, float cost) {
    if (!isfinite(pred_gain) || !isfinite(full_gain)) { return v->open; }
    double x = (double)pred_gain - (double)cost * full_gain;
    v->pairs++;
    v->sum += x; v->sq += x * x;
    v->pred_sum += pred_gain; v->full_sum += full_gain;
    v->open = v->pairs < VALUE_MIN_PAIRS || value_mean(v) > VALUE_Z * value_se(v);
    return v->open;
}

// whether the run starting now is probed: all of them until the test passes, then one in VALUE_PROBE_EVERY
static inline int value_probe_run(const ValueTest* v, int run_index) {
    return !v->open || v->pairs < VALUE_MIN_PAIRS || run_index % VALUE_PROBE_EVERY == 0;
}

// the test has passed: Predict runs train (before, and after it failed, probe runs only measure)
static inline int value_proven(const ValueTest* v) { return v->open && v->pairs >= VALUE_MIN_PAIRS; }

// whether a Predict run may start: always once the test has passed; before, and after it failed, only
// while the Predict steps so far are under VALUE_BUDGET of the schedule
static inline int value_may_predict(const ValueTest* v, int predict_steps, int total_steps) {
    return value_proven(v) || (float)predict_steps < VALUE_BUDGET * (float)total_steps;
}

static inline void value_io(HybridIO* io, ValueTest* v) {
    hio_i32(io, &v->pairs);
    hio_f64(io, &v->sum); hio_f64(io, &v->sq);
    hio_f64(io, &v->pred_sum); hio_f64(io, &v->full_sum);
    hio_i32(io, &v->open);
    hio_f32(io, &v->l0); hio_f32(io, &v->pred_gain); hio_f32(io, &v->cost); hio_f32(io, &v->pending);
    if (v->pairs < 0 || (v->open != 0 && v->open != 1)) { hio_fail(io, "bad value-test state"); }
}

#endif // HYBRID_VALUE_H
