/*
 * hybrid/monitor.h — the divergence monitor (docs/hybrid.md §6).
 * Watches every measured step and every Correct step and answers with an action:
 * none, shorten the horizon, force Full steps, or roll back the Predict run. Signals:
 *   - NaN/Inf in the loss or the gradient norm
 *   - loss z-score against its EMA (a spike)
 *   - gradient-norm ratio against its EMA
 *   - oscillation: the recent loss changes alternate in sign with amplitudes above the noise
 *   - Correct-step mismatch: the loss measured at the predicted point is worse than the predicted
 *     loss by more than `threshold` noise standard deviations
 *   - cosine collapse: the real update points away from the predicted one
 * Each event is counted and remembered (step, signal, value) for the log. No allocation.
 */
#ifndef HYBRID_MONITOR_H
#define HYBRID_MONITOR_H

#include <math.h>
#include "hybrid/hio.h"

typedef enum { ACTION_NONE = 0, ACTION_SHORTEN = 1, ACTION_FORCE_FULL = 2, ACTION_ROLLBACK = 3 } MonitorAction;
typedef enum {
    SIGNAL_NONE = 0, SIGNAL_NONFINITE, SIGNAL_LOSS_SPIKE, SIGNAL_GRAD_RATIO, SIGNAL_OSCILLATION,
    SIGNAL_RESIDUAL, SIGNAL_COSINE, SIGNAL_COUNT
} MonitorSignal;

static inline const char* monitor_action_name(MonitorAction a) {
    static const char* n[] = {"none", "shorten", "force-full", "rollback"};
    return n[a];
}
static inline const char* monitor_signal_name(MonitorSignal s) {
    static const char* n[] = {"none", "nonfinite", "loss-spike", "grad-ratio", "oscillation", "residual", "cosine"};
    return n[s];
}

#define MONITOR_WINDOW 8

typedef struct {
    float threshold;         // z-score (and grad-norm ratio) above which a signal fires
    float ema_decay;
    int seen;                // measured steps observed
    double loss_ema, loss_var; // EMA of the loss and of its squared deviation (the noise)
    double gn_ema;           // EMA of the gradient norm
    float deltas[MONITOR_WINDOW]; // recent loss changes (ring)
    int ndeltas, dhead;
    float last_loss;
    int events[SIGNAL_COUNT];     // how often each signal fired
    int actions[4];               // how often each action was taken
    // the last event, for the log line
    int last_step; MonitorSignal last_signal; float last_value; MonitorAction last_action;
} Monitor;

static inline void monitor_init(Monitor* m, float threshold) {
    memset(m, 0, sizeof(*m));
    m->threshold = threshold;
    m->ema_decay = 0.95f;
}

static inline float monitor_sigma(const Monitor* m) {
    double s = sqrt(m->loss_var);
    return (float)(s > 1e-3 * fabs(m->loss_ema) + 1e-6 ? s : 1e-3 * fabs(m->loss_ema) + 1e-6);
}

static inline MonitorAction monitor_event(Monitor* m, int step, MonitorSignal s, float value, MonitorAction a) {
    m->events[s]++;
    m->actions[a]++;
    m->last_step = step; m->last_signal = s; m->last_value = value; m->last_action = a;
    return a;
}

// a measured step (Warmup/Full/Correct, after its backward): loss and gradient norm.
// `after_predict`: this is a Correct step (a spike here is blamed on the Predict run).
static inline MonitorAction monitor_observe(Monitor* m, int step, float loss, float grad_norm, int after_predict) {
    if (!isfinite(loss) || !isfinite(grad_norm)) {
        return monitor_event(m, step, SIGNAL_NONFINITE, isfinite(loss) ? grad_norm : loss, ACTION_FORCE_FULL);
    }
    MonitorAction action = ACTION_NONE;
    if (m->seen >= 5) {
        float z = (float)((loss - m->loss_ema) / monitor_sigma(m));
        float ratio = (float)(grad_norm / (m->gn_ema > 1e-12 ? m->gn_ema : 1e-12));
        if (z > m->threshold) {
            action = monitor_event(m, step, SIGNAL_LOSS_SPIKE, z, ACTION_FORCE_FULL);
        } else if (ratio > m->threshold) {
            action = monitor_event(m, step, SIGNAL_GRAD_RATIO, ratio, after_predict ? ACTION_FORCE_FULL : ACTION_SHORTEN);
        }
        // oscillation: every recent change flips sign and is larger than the noise
        float d = loss - m->last_loss;
        m->deltas[m->dhead] = d;
        m->dhead = (m->dhead + 1) % MONITOR_WINDOW;
        if (m->ndeltas < MONITOR_WINDOW) { m->ndeltas++; }
        if (action == ACTION_NONE && m->ndeltas == MONITOR_WINDOW) {
            int flips = 0, big = 0;
            for (int i = 0; i < MONITOR_WINDOW; i++) {
                float a = m->deltas[(m->dhead + i) % MONITOR_WINDOW];
                float b = m->deltas[(m->dhead + i + 1) % MONITOR_WINDOW];
                if (i + 1 < MONITOR_WINDOW && a * b < 0.0f) { flips++; }
                if (fabsf(a) > 2.0f * monitor_sigma(m)) { big++; }
            }
            if (flips == MONITOR_WINDOW - 1 && big == MONITOR_WINDOW) {
                action = monitor_event(m, step, SIGNAL_OSCILLATION, (float)flips, ACTION_SHORTEN);
                m->ndeltas = 0; // one event per oscillating window
            }
        }
    }
    // statistics follow every finite step; a spike is damped (clipped) so it cannot hide the next
    float a = m->seen == 0 ? 0.0f : m->ema_decay;
    double sd = monitor_sigma(m);
    double x = m->seen >= 5 ? fmin(loss, m->loss_ema + 3.0 * sd) : loss;
    double dev = x - m->loss_ema;
    if (m->seen == 0) { m->loss_ema = x; m->gn_ema = grad_norm; m->loss_var = 0.0; }
    else {
        m->loss_ema = a * m->loss_ema + (1.0 - a) * x;
        m->loss_var = a * m->loss_var + (1.0 - a) * dev * dev;
        m->gn_ema = a * m->gn_ema + (1.0 - a) * fmin(grad_norm, 10.0 * m->gn_ema);
    }
    m->last_loss = loss;
    m->seen++;
    return action;
}

// a Correct step, after its forward and before its backward: the loss at the predicted point
// against the predicted loss. Worse by > threshold sigmas (or non-finite) => roll back.
static inline MonitorAction monitor_correct(Monitor* m, int step, float loss, float predicted_loss) {
    if (!isfinite(loss)) { return monitor_event(m, step, SIGNAL_NONFINITE, loss, ACTION_ROLLBACK); }
    float z = (loss - predicted_loss) / monitor_sigma(m);
    if (z > m->threshold) { return monitor_event(m, step, SIGNAL_RESIDUAL, z, ACTION_ROLLBACK); }
    if (z > 0.5f * m->threshold) { return monitor_event(m, step, SIGNAL_RESIDUAL, z, ACTION_SHORTEN); }
    return ACTION_NONE;
}

// a Correct step, after its backward: mean cosine between the predicted and the real block updates
static inline MonitorAction monitor_cosine(Monitor* m, int step, float cosine) {
    if (cosine < -0.1f) { return monitor_event(m, step, SIGNAL_COSINE, cosine, ACTION_FORCE_FULL); }
    return ACTION_NONE;
}

static inline void monitor_io(HybridIO* io, Monitor* m) {
    hio_i32(io, &m->seen);
    hio_f64(io, &m->loss_ema);
    hio_f64(io, &m->loss_var);
    hio_f64(io, &m->gn_ema);
    hio_f32s(io, m->deltas, MONITOR_WINDOW);
    hio_i32(io, &m->ndeltas);
    hio_i32(io, &m->dhead);
    hio_f32(io, &m->last_loss);
    hio_i32s(io, m->events, SIGNAL_COUNT);
    hio_i32s(io, m->actions, 4);
    hio_i32(io, &m->last_step);
    int s = (int)m->last_signal, a = (int)m->last_action;
    hio_i32(io, &s); hio_i32(io, &a);
    if (s < 0 || s >= SIGNAL_COUNT || a < 0 || a > ACTION_ROLLBACK || m->dhead < 0 || m->dhead >= MONITOR_WINDOW) {
        hio_fail(io, "monitor state out of range");
        s = 0; a = 0; m->dhead = 0;
    }
    m->last_signal = (MonitorSignal)s; m->last_action = (MonitorAction)a;
    hio_f32(io, &m->last_value);
}

#endif // HYBRID_MONITOR_H
