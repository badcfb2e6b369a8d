/*
 * hybrid/controller.h — the phase machine: Warmup -> Full -> Predict (H steps) -> Correct -> ...
 * It decides, before each step, which kind of step it is. It knows nothing of models: it is told
 * the confidence, the horizon wanted, and what the monitor demanded (shorten, force Full), and it
 * enforces the rules of docs/hybrid.md §2: no Predict before the warm-up ends, at least `full_steps`
 * Full/Correct steps between Predict runs, no Predict run reaching into the cool-down (the last
 * fraction of the LR schedule) nor starting before the LR has reached its peak (the warm-up), and
 * back-off: every harmful outcome (a rollback, or the value test of hybrid/value.h failing) doubles the
 * Full steps required before the next run, up to 64 x full_steps; every harmless one halves them back
 * toward the configured value. Where Predict steps are not worth their cost, what is left is one probe
 * run every 64 x full_steps: predicting has stopped, and it resumes if the probes show value.
 * The run length wanted can depend on the batch regime: with k micro batches per step a Full step
 * costs ~k forward-backward passes and a Predict step none, so longer runs are affordable
 * (phase_regime_horizon).
 */
#ifndef HYBRID_CONTROLLER_H
#define HYBRID_CONTROLLER_H

#include <math.h>
#include "hybrid/hio.h"

typedef enum { PHASE_WARMUP = 0, PHASE_FULL = 1, PHASE_PREDICT = 2, PHASE_CORRECT = 3 } HybridPhase;
#define PHASE_COUNT 4

static inline const char* phase_name(HybridPhase p) {
    static const char* names[PHASE_COUNT] = {"warmup", "full", "predict", "correct"};
    return (p >= 0 && p < PHASE_COUNT) ? names[p] : "?";
}

typedef struct {
    // configuration
    int warmup;            // Full steps of statistics only at the start
    int full_steps;        // configured minimum Full/Correct steps between Predict runs
    int max_horizon;       // longest Predict run
    int cooldown_start;    // first step (0-based) at which no Predict step may run
    int max_full_steps;    // back-off ceiling for full_required
    // state
    HybridPhase phase;     // phase of the current (or last decided) step
    int full_required;     // current minimum of Full steps between runs (>= full_steps)
    int full_done;         // Full/Correct steps since the last Predict run
    int forced_full;       // remaining steps forced to Full by the monitor
    int horizon_cap;       // monitor-shortened cap on the horizon (<= max_horizon)
    int run_length;        // length H of the current Predict run
    int run_done;          // Predict steps done in the current run
    int runs;              // Predict runs started
    int peak_reached;      // the LR has reached its peak (the LR warm-up is over)
} Controller;

static inline void phase_init(Controller* c, int warmup, int full_steps, int max_horizon,
                              int total_steps, float cooldown) {
    memset(c, 0, sizeof(*c));
    c->warmup = warmup;
    c->full_steps = full_steps < 1 ? 1 : full_steps;
    c->max_horizon = max_horizon;
    c->cooldown_start = (int)floor((1.0 - (double)cooldown) * (double)total_steps + 0.5);
    c->max_full_steps = 64 * c->full_steps;
    c->phase = PHASE_WARMUP;
    c->full_required = c->full_steps;
    c->horizon_cap = max_horizon;
}

// the run length the batch regime affords: 1 at one micro batch per step, +1 per factor 4 in micro batches
// (16 -> 3), never above max_horizon
static inline int phase_regime_horizon(int max_horizon, int micro_batches) {
    int h = 1;
    for (int k = micro_batches; k >= 4; k /= 4) { h++; }
    return h < max_horizon ? h : max_horizon;
}

// the learning rate of the coming step: no Predict run starts before it has reached the peak once
static inline void phase_lr(Controller* c, float lr, float lr_peak) {
    if (lr >= 0.999f * lr_peak) { c->peak_reached = 1; }
}

// decide the phase of step `step` (0-based). `confident`: the predictor's confidence passed the
// threshold; `horizon`: the run length wanted (bandit or confidence), used only if a run starts.
static inline HybridPhase phase_next(Controller* c, int step, int confident, int horizon) {
    if (step < c->warmup) {
        c->phase = PHASE_WARMUP;
        return c->phase;
    }
    if (c->phase == PHASE_PREDICT) {
        c->phase = c->run_done < c->run_length ? PHASE_PREDICT : PHASE_CORRECT;
        if (c->phase == PHASE_PREDICT) { c->run_done++; }
        return c->phase;
    }
    if (c->forced_full > 0) {
        c->forced_full--;
        c->phase = PHASE_FULL;
        return c->phase;
    }
    int h = horizon < c->horizon_cap ? horizon : c->horizon_cap;
    if (h > c->cooldown_start - step) { h = c->cooldown_start - step; } // the run's Predict steps end before the cool-down
    if (confident && c->peak_reached && c->full_done >= c->full_required && h >= 1 && c->max_horizon > 0) {
        c->phase = PHASE_PREDICT;
        c->run_length = h;
        c->run_done = 1;
        c->full_done = 0;
        c->runs++;
        return c->phase;
    }
    c->phase = PHASE_FULL;
    return c->phase;
}

// the step decided by phase_next ran its backward (Warmup/Full/Correct): count it
static inline void phase_full_done(Controller* c) { c->full_done++; }

// end a Predict run early (micro-correction mismatch): the next step is its Correct
static inline void phase_stop_run(Controller* c) {
    if (c->phase == PHASE_PREDICT) { c->run_length = c->run_done; }
}

// outcome of a Predict run: harmful runs double the Full steps between runs, harmless ones relax it
static inline void phase_correct_outcome(Controller* c, int harmful) {
    if (harmful) {
        c->full_required = c->full_required * 2 > c->max_full_steps ? c->max_full_steps : c->full_required * 2;
    } else {
        c->full_required = c->full_required / 2 < c->full_steps ? c->full_steps : c->full_required / 2;
        if (c->horizon_cap < c->max_horizon) { c->horizon_cap++; } // shortened horizons recover slowly
    }
}

static inline void phase_force_full(Controller* c, int steps) {
    if (steps > c->forced_full) { c->forced_full = steps; }
    if (c->phase == PHASE_PREDICT) { phase_stop_run(c); }
}

static inline void phase_shorten(Controller* c) {
    c->horizon_cap = c->horizon_cap > 1 ? c->horizon_cap / 2 : 1;
}

static inline void phase_io(HybridIO* io, Controller* c) {
    hio_expect_i32(io, c->warmup, "hybrid warmup");
    hio_expect_i32(io, c->full_steps, "hybrid full steps");
    hio_expect_i32(io, c->max_horizon, "hybrid max predict steps");
    hio_expect_i32(io, c->cooldown_start, "hybrid cooldown start step");
    int phase = (int)c->phase;
    hio_i32(io, &phase);
    c->phase = (HybridPhase)phase;
    if (phase < 0 || phase >= PHASE_COUNT) { hio_fail(io, "bad controller phase"); }
    hio_i32(io, &c->full_required);
    hio_i32(io, &c->full_done);
    hio_i32(io, &c->forced_full);
    hio_i32(io, &c->horizon_cap);
    hio_i32(io, &c->run_length);
    hio_i32(io, &c->run_done);
    hio_i32(io, &c->runs);
    hio_i32(io, &c->peak_reached);
}

#endif // HYBRID_CONTROLLER_H
