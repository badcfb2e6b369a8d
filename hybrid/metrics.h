/*
 * hybrid/metrics.h — what hybrid mode reports (docs/hybrid.md §8).
 * Per step: the JSON fields the trainer appends to its metrics.jsonl line (predicted loss,
 * horizon, confidence, the ms of the value test's probe forwards). Per run: counters and sums from
 * which the summary JSON and the console table are printed: steps and time per phase, backward passes
 * saved, predictor error at Correct steps (MAE and correlation of predicted vs measured loss), mean
 * cosine of predicted vs real block updates, rollbacks and divergence events, probes, predictor cost
 * per step, peak RSS. The value test's own numbers are printed by hybrid.h.
 * Fixed size; no allocation.
 */
#ifndef HYBRID_METRICS_H
#define HYBRID_METRICS_H

#include <math.h>
#include <stdio.h>
#include <sys/resource.h>
#include "hybrid/hio.h"
#include "hybrid/controller.h"

typedef struct {
    int steps[PHASE_COUNT];
    double ms[PHASE_COUNT];       // wall ms per phase, as the trainer measured each step
    int n_loss;                   // Correct steps with a loss prediction
    double abs_err, sx, sy, sxx, syy, sxy; // |pred - actual| and moments for the correlation
    int n_cos;
    double cos_sum;               // cosine of predicted vs real block updates at Correct steps
    int rollbacks, events, micro_checks, micro_stops;
    double predictor_ms;          // host time spent in the hybrid decisions (predictor, bandit, store)
    int probes;                   // probe losses measured (hybrid/value.h)
    int probe_undos;              // probe runs rolled back because the value test had not passed
    double probe_ms;              // their forward passes' time (included in the phases' ms)
    // the current step, for its metrics line
    float predicted_loss;         // NAN when not applicable
    int horizon;                  // 0 when not applicable
    float confidence;             // NAN when not applicable
    int step_probes;              // probe losses measured (or probe work timed) in this step
    double step_probe_ms;         // and their ms
} HybridMetrics;

static inline void metrics_init(HybridMetrics* m) {
    memset(m, 0, sizeof(*m));
    m->predicted_loss = NAN; m->confidence = NAN;
}

static inline void metrics_loss_pair(HybridMetrics* m, float predicted, float actual) {
    if (!isfinite(predicted) || !isfinite(actual)) { return; }
    m->n_loss++;
    m->abs_err += fabs((double)predicted - actual);
    m->sx += predicted; m->sy += actual;
    m->sxx += (double)predicted * predicted; m->syy += (double)actual * actual; m->sxy += (double)predicted * actual;
}

static inline double metrics_mae(const HybridMetrics* m) { return m->n_loss ? m->abs_err / m->n_loss : NAN; }

static inline double metrics_correlation(const HybridMetrics* m) {
    if (m->n_loss < 2) { return NAN; }
    double n = m->n_loss;
    double cov = m->sxy / n - (m->sx / n) * (m->sy / n);
    double vx = m->sxx / n - (m->sx / n) * (m->sx / n), vy = m->syy / n - (m->sy / n) * (m->sy / n);
    return (vx > 0.0 && vy > 0.0) ? cov / sqrt(vx * vy) : NAN;
}

// peak resident set size of this process, in MiB (Linux reports ru_maxrss in KiB)
static inline double metrics_peak_rss_mib(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) { return NAN; }
    return ru.ru_maxrss / 1024.0;
}

static inline int metrics_total_steps(const HybridMetrics* m) {
    int t = 0;
    for (int p = 0; p < PHASE_COUNT; p++) { t += m->steps[p]; }
    return t;
}

// writes `"predicted_loss": x, "horizon": h, "confidence": c, "probe_ms": p` (null where not applicable;
// probe_ms: the part of the step's ms spent in probe forwards, null if it measured none)
static inline int metrics_step_json(const HybridMetrics* m, char* buf, size_t n) {
    char pl[32], hz[16], cf[32], pm[32];
    if (isfinite(m->predicted_loss)) { snprintf(pl, sizeof(pl), "%.9g", m->predicted_loss); } else { snprintf(pl, sizeof(pl), "null"); }
    if (m->horizon > 0) { snprintf(hz, sizeof(hz), "%d", m->horizon); } else { snprintf(hz, sizeof(hz), "null"); }
    if (isfinite(m->confidence)) { snprintf(cf, sizeof(cf), "%.6g", m->confidence); } else { snprintf(cf, sizeof(cf), "null"); }
    if (m->step_probes > 0) { snprintf(pm, sizeof(pm), "%.4f", m->step_probe_ms); } else { snprintf(pm, sizeof(pm), "null"); }
    return snprintf(buf, n, "\"predicted_loss\": %s, \"horizon\": %s, \"confidence\": %s, \"probe_ms\": %s", pl, hz, cf, pm);
}

// appends `, "key": value` (null when not finite) at buf[*pos]
static inline void metrics_field(char* buf, size_t n, size_t* pos, const char* key, double v, int integer) {
    if (*pos >= n) { return; }
    int w;
    if (!isfinite(v)) { w = snprintf(buf + *pos, n - *pos, "%s\"%s\": null", *pos ? ", " : "", key); }
    else if (integer) { w = snprintf(buf + *pos, n - *pos, "%s\"%s\": %.0f", *pos ? ", " : "", key, v); }
    else { w = snprintf(buf + *pos, n - *pos, "%s\"%s\": %.9g", *pos ? ", " : "", key, v); }
    if (w > 0) { *pos += (size_t)w; }
}

// the run summary as "key": value pairs without braces (the trainer embeds them in summary.json)
static inline int metrics_summary_fields(const HybridMetrics* m, char* buf, size_t n) {
    size_t pos = 0;
    int total = metrics_total_steps(m);
    double time_total = 0.0;
    buf[0] = '\0';
    for (int p = 0; p < PHASE_COUNT; p++) { time_total += m->ms[p]; }
    for (int p = 0; p < PHASE_COUNT; p++) {
        char key[32];
        snprintf(key, sizeof(key), "steps_%s", phase_name((HybridPhase)p));
        metrics_field(buf, n, &pos, key, m->steps[p], 1);
    }
    for (int p = 0; p < PHASE_COUNT; p++) {
        char key[32];
        snprintf(key, sizeof(key), "time_s_%s", phase_name((HybridPhase)p));
        metrics_field(buf, n, &pos, key, m->ms[p] / 1000.0, 0);
    }
    metrics_field(buf, n, &pos, "pct_steps_without_backward", total ? 100.0 * m->steps[PHASE_PREDICT] / total : 0.0, 0);
    metrics_field(buf, n, &pos, "correct_steps_scored", m->n_loss, 1);
    metrics_field(buf, n, &pos, "predicted_loss_mae", metrics_mae(m), 0);
    metrics_field(buf, n, &pos, "predicted_loss_correlation", metrics_correlation(m), 0);
    metrics_field(buf, n, &pos, "mean_update_cosine", m->n_cos ? m->cos_sum / m->n_cos : NAN, 0);
    metrics_field(buf, n, &pos, "rollbacks", m->rollbacks, 1);
    metrics_field(buf, n, &pos, "divergence_events", m->events, 1);
    metrics_field(buf, n, &pos, "micro_checks", m->micro_checks, 1);
    metrics_field(buf, n, &pos, "micro_stops", m->micro_stops, 1);
    metrics_field(buf, n, &pos, "probes", m->probes, 1);
    metrics_field(buf, n, &pos, "probe_runs_undone", m->probe_undos, 1);
    metrics_field(buf, n, &pos, "time_s_probes", m->probe_ms / 1000.0, 0);
    metrics_field(buf, n, &pos, "predictor_ms_per_step", total ? m->predictor_ms / total : NAN, 0);
    metrics_field(buf, n, &pos, "hybrid_time_s", time_total / 1000.0, 0);
    metrics_field(buf, n, &pos, "peak_rss_mib", metrics_peak_rss_mib(), 0);
    return (int)pos;
}

static inline void metrics_print_table(const HybridMetrics* m, FILE* f) {
    int total = metrics_total_steps(m);
    double full_ms = m->steps[PHASE_FULL] ? m->ms[PHASE_FULL] / m->steps[PHASE_FULL] : NAN;
    fprintf(f, "+--------------------------------------+------------------+\n");
    fprintf(f, "| hybrid summary                       |                  |\n");
    fprintf(f, "+--------------------------------------+------------------+\n");
    for (int p = 0; p < PHASE_COUNT; p++) {
        char label[64];
        snprintf(label, sizeof(label), "%s steps / time (s)", phase_name((HybridPhase)p));
        fprintf(f, "| %-36s | %6d / %7.2f |\n", label, m->steps[p], m->ms[p] / 1000.0);
    }
    fprintf(f, "| %-36s | %15.1f%% |\n", "steps without backward", total ? 100.0 * m->steps[PHASE_PREDICT] / total : 0.0);
    fprintf(f, "| %-36s | %16.6f |\n", "predicted loss MAE (Correct steps)", metrics_mae(m));
    fprintf(f, "| %-36s | %16.4f |\n", "predicted loss correlation", metrics_correlation(m));
    fprintf(f, "| %-36s | %16.4f |\n", "mean cosine predicted vs real update", m->n_cos ? m->cos_sum / m->n_cos : NAN);
    fprintf(f, "| %-36s | %7d / %6d |\n", "rollbacks / divergence events", m->rollbacks, m->events);
    fprintf(f, "| %-36s | %7d / %6d |\n", "micro-checks / early stops", m->micro_checks, m->micro_stops);
    fprintf(f, "| %-36s | %7d / %6.2f |\n", "probe losses / their time (s)", m->probes, m->probe_ms / 1000.0);
    fprintf(f, "| %-36s | %16d |\n", "probe runs undone (test not passed)", m->probe_undos);
    fprintf(f, "| %-36s | %16.4f |\n", "predictor ms per step", total ? m->predictor_ms / total : NAN);
    fprintf(f, "| %-36s | %15.3f%% |\n", "predictor cost / Full step", 100.0 * (total ? m->predictor_ms / total : NAN) / full_ms);
    fprintf(f, "| %-36s | %16.1f |\n", "peak RSS (MiB)", metrics_peak_rss_mib());
    fprintf(f, "+--------------------------------------+------------------+\n");
}

static inline void metrics_io(HybridIO* io, HybridMetrics* m) {
    hio_i32s(io, m->steps, PHASE_COUNT);
    hio_f64s(io, m->ms, PHASE_COUNT);
    hio_i32(io, &m->n_loss);
    hio_f64(io, &m->abs_err); hio_f64(io, &m->sx); hio_f64(io, &m->sy);
    hio_f64(io, &m->sxx); hio_f64(io, &m->syy); hio_f64(io, &m->sxy);
    hio_i32(io, &m->n_cos);
    hio_f64(io, &m->cos_sum);
    hio_i32(io, &m->rollbacks); hio_i32(io, &m->events);
    hio_i32(io, &m->micro_checks); hio_i32(io, &m->micro_stops);
    hio_f64(io, &m->predictor_ms);
    hio_i32(io, &m->probes);
    hio_i32(io, &m->probe_undos);
    hio_f64(io, &m->probe_ms);
}

#endif // HYBRID_METRICS_H
