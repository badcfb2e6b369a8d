/*
 * hybrid/predict.h — Predict runs along the drift: H steps that train without a batch.
 * Every `--full-steps` K measured steps (inside the look-ahead's window), a run of H = `--predict-steps`
 * Predict steps moves the weights along the drift m, one step's worth each (theta_b += c_b m_b, c_b = 1
 * capped so that |c_b m_b| <= PREDICT_CAP times the block's last update), and takes H slots of the
 * schedule without a forward or a backward. The step after a run is its Correct step: a Full step taken
 * at the predicted point. Where a Full step is expensive (many micro batches) H steps of one memory pass
 * each are cheap; whether they are worth their slots is what scripts/compare_hybrid measures (rho).
 * Safe by construction: the Correct step's first micro batch loss is judged against the recent losses of
 * measured steps (a z-score above --divergence-threshold, from an EMA of their mean and variance). A jump
 * rolls the run back (the trainer restores theta_0 from its keep buffer, hybrid/apply.h) and doubles the
 * gap before the next run (up to PREDICT_MAX_GAP x K); a clean run halves it back toward K.
 * The drift itself is not updated by Predict steps: it measures the trained trajectory only, so a
 * rollback restores everything there is to restore.
 * No allocation: the facade owns the per-block coefficients.
 */
#ifndef HYBRID_PREDICT_H
#define HYBRID_PREDICT_H

#include <math.h>
#include <string.h>
#include "hybrid/hio.h"
#include "hybrid/method.h" // HybridPhase

#define PREDICT_CAP 2.0f       // |c_b m_b| <= this many of the block's last update (as the look-ahead's cap)
#define PREDICT_MAX_GAP 16     // back-off ceiling, in multiples of --full-steps
#define PREDICT_LOSS_ALPHA 0.05 // EMA weight of the measured losses' mean and variance
#define PREDICT_LOSS_MIN 10    // measured losses before a run may start (the z-score needs a history)


typedef struct {
    int horizon;            // --predict-steps H (0: no Predict runs)
    int every;              // --full-steps K
    float zmax;             // --divergence-threshold
    int start, stop;        // the window, in steps: a run starts at or after start and ends before stop
    int gap;                // measured steps required before the next run (K .. PREDICT_MAX_GAP K)
    int since;              // measured steps since the last run
    int run_done;           // Predict steps of the open run (0: none open)
    double loss_mean, loss_var; // the measured steps' first micro batch losses
    int loss_n;
    // diagnostics for the summary
    int runs, steps, rollbacks;
} PredictRuns;

static inline void predict_init(PredictRuns* pr, int horizon, int every, float zmax, int start, int stop) {
    memset(pr, 0, sizeof(*pr));
    pr->horizon = horizon;
    pr->every = every < 1 ? 1 : every;
    pr->zmax = zmax;
    pr->start = start;
    pr->stop = stop;
    pr->gap = pr->every;
}

// the phase of step `step` (0-based): the open run goes on, a finished one is corrected, a new one starts
// when the gap has passed and the run fits in the window (and the losses have a history to judge by)
static inline HybridPhase predict_next(PredictRuns* pr, int step) {
    if (pr->run_done > 0) { return pr->run_done < pr->horizon ? HYBRID_PHASE_PREDICT : HYBRID_PHASE_CORRECT; }
    if (step < pr->start) { return HYBRID_PHASE_WARMUP; }
    if (pr->horizon > 0 && pr->since >= pr->gap && pr->loss_n >= PREDICT_LOSS_MIN && step + pr->horizon < pr->stop) {
        return HYBRID_PHASE_PREDICT;
    }
    return HYBRID_PHASE_FULL;
}

// a Predict step's coefficients: one step of the drift per block, capped (stats: the last measured
// pass's <delta,m>, |m|^2, |delta|^2 per block)
static inline void predict_coef(const PredictRuns* pr, const double* stats, int nblocks, float* coef) {
    (void)pr;
    for (int b = 0; b < nblocks; b++) {
        double mm = stats[3 * b + 1], uu = stats[3 * b + 2];
        float c = 1.0f;
        if (mm > 0.0 && (double)c * c * mm > (double)PREDICT_CAP * PREDICT_CAP * uu) { c = (float)(PREDICT_CAP * sqrt(uu / mm)); }
        coef[b] = isfinite(c) && mm > 0.0 ? c : 0.0f;
    }
}

static inline void predict_step_done(PredictRuns* pr) {
    if (pr->run_done == 0) { pr->runs++; }
    pr->run_done++;
    pr->steps++;
}

static inline void predict_observe_loss(PredictRuns* pr, double loss) {
    if (pr->loss_n == 0) { pr->loss_mean = loss; pr->loss_var = 0.0; }
    double dev = loss - pr->loss_mean;
    pr->loss_mean += PREDICT_LOSS_ALPHA * dev;
    pr->loss_var = (1.0 - PREDICT_LOSS_ALPHA) * (pr->loss_var + PREDICT_LOSS_ALPHA * dev * dev);
    pr->loss_n++;
}

// a measured step's first micro batch loss. On a Correct step: returns 1 if the run must be rolled back
// (a jump against the recent losses, or a non-finite loss); the loss then stays out of the history.
static inline int predict_check(PredictRuns* pr, HybridPhase phase, float loss) {
    if (phase == HYBRID_PHASE_CORRECT) {
        double sd = sqrt(pr->loss_var);
        int jump = !isfinite(loss) || (sd > 0.0 && ((double)loss - pr->loss_mean) / sd > pr->zmax);
        pr->run_done = 0;
        if (jump) {
            pr->rollbacks++;
            pr->gap = pr->gap * 2 < PREDICT_MAX_GAP * pr->every ? pr->gap * 2 : PREDICT_MAX_GAP * pr->every;
            return 1;
        }
        pr->gap = pr->gap / 2 > pr->every ? pr->gap / 2 : pr->every;
    }
    if (isfinite(loss)) { predict_observe_loss(pr, loss); }
    return 0;
}

// after a measured step (Full or Correct): the gap counts it; after a Correct step a new gap begins
static inline void predict_measured(PredictRuns* pr, HybridPhase phase) {
    pr->since = phase == HYBRID_PHASE_CORRECT ? 0 : pr->since + 1;
}

static inline void predict_io(HybridIO* io, PredictRuns* pr) {
    hio_expect_i32(io, pr->horizon, "--predict-steps");
    hio_expect_i32(io, pr->every, "--full-steps");
    hio_i32(io, &pr->gap);
    hio_i32(io, &pr->since);
    hio_i32(io, &pr->run_done);
    if (!io->writing && (pr->run_done < 0 || pr->run_done > pr->horizon)) { hio_fail(io, "predict run position out of range"); pr->run_done = 0; }
    hio_f64(io, &pr->loss_mean);
    hio_f64(io, &pr->loss_var);
    hio_i32(io, &pr->loss_n);
    hio_i32(io, &pr->runs);
    hio_i32(io, &pr->steps);
    hio_i32(io, &pr->rollbacks);
    // a file whose checksum holds can still carry values no run produces: refuse them rather than let the
    // gap's doubling or a counter overflow
    if (!io->writing && !io->failed) {
        int ok = pr->gap >= pr->every && pr->gap <= PREDICT_MAX_GAP * pr->every && pr->since >= 0 && pr->since < (1 << 30) &&
                 pr->loss_n >= 0 && pr->loss_n < (1 << 30) && isfinite(pr->loss_mean) && isfinite(pr->loss_var) &&
                 pr->loss_var >= 0.0 && pr->runs >= 0 && pr->runs < (1 << 30) && pr->steps >= 0 &&
                 pr->steps < (1 << 30) && pr->rollbacks >= 0 && pr->rollbacks < (1 << 30);
        if (!ok) { hio_fail(io, "predict run state out of range"); }
    }
}

#endif // HYBRID_PREDICT_H
