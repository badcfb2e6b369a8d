/*
 * hybrid/metrics.h — what hybrid mode counts for its summary: steps and wall time per phase and the
 * decision time hybrid/ itself took, as "key": value pairs for the trainer's summary.json and as a
 * console table. The look-ahead's and the Predict runs' own numbers are printed by hybrid.h.
 * Fixed size; no allocation.
 */
#ifndef HYBRID_METRICS_H
#define HYBRID_METRICS_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/resource.h>
#include "hybrid/hio.h"
#include "hybrid/method.h" // HybridPhase

typedef struct {
    int steps[HYBRID_PHASE_COUNT];
    double ms[HYBRID_PHASE_COUNT];       // wall ms per phase, as the trainer measured each step
    double decide_ms;             // host time spent in hybrid/'s decisions and bookkeeping
} HybridMetrics;

static inline void metrics_init(HybridMetrics* m) { memset(m, 0, sizeof(*m)); }

// peak resident set size of this process, in MiB (Linux reports ru_maxrss in KiB)
static inline double metrics_peak_rss_mib(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) { return NAN; }
    return ru.ru_maxrss / 1024.0;
}

static inline int metrics_total_steps(const HybridMetrics* m) {
    int t = 0;
    for (int p = 0; p < HYBRID_PHASE_COUNT; p++) { t += m->steps[p]; }
    return t;
}

// appends printf-style text at buf[*pos] whole, or nothing where it does not fit in n bytes: then *pos
// becomes n, so that every later append is refused too and the caller can tell that something was left
// out. Either way buf stays NUL-terminated and cut only between fields, so summary.json stays valid JSON
// (a field cut in the middle, or a position past the end, would write past the caller's buffer).
static inline void metrics_append(char* buf, size_t n, size_t* pos, const char* fmt, ...) {
    if (*pos >= n) { return; }
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *pos, n - *pos, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= n - *pos) {
        buf[*pos] = '\0';
        *pos = n;
        return;
    }
    *pos += (size_t)w;
}

// appends `, "key": value` (null when not finite) at buf[*pos], whole or not at all (metrics_append)
static inline void metrics_field(char* buf, size_t n, size_t* pos, const char* key, double v, int integer) {
    const char* sep = *pos ? ", " : "";
    if (!isfinite(v)) { metrics_append(buf, n, pos, "%s\"%s\": null", sep, key); }
    else if (integer) { metrics_append(buf, n, pos, "%s\"%s\": %.0f", sep, key, v); }
    else { metrics_append(buf, n, pos, "%s\"%s\": %.9g", sep, key, v); }
}

// steps and time per phase, the share of steps without a backward, the decision cost, peak RSS
static inline size_t metrics_summary_fields(const HybridMetrics* m, char* buf, size_t n) {
    size_t pos = 0;
    int total = metrics_total_steps(m);
    double time_total = 0.0;
    buf[0] = '\0';
    for (int p = 0; p < HYBRID_PHASE_COUNT; p++) { time_total += m->ms[p]; }
    for (int p = 0; p < HYBRID_PHASE_COUNT; p++) {
        char key[32];
        snprintf(key, sizeof(key), "steps_%s", hybrid_phase_label((HybridPhase)p));
        metrics_field(buf, n, &pos, key, m->steps[p], 1);
    }
    for (int p = 0; p < HYBRID_PHASE_COUNT; p++) {
        char key[32];
        snprintf(key, sizeof(key), "time_s_%s", hybrid_phase_label((HybridPhase)p));
        metrics_field(buf, n, &pos, key, m->ms[p] / 1000.0, 0);
    }
    metrics_field(buf, n, &pos, "pct_steps_without_backward", total ? 100.0 * m->steps[HYBRID_PHASE_PREDICT] / total : 0.0, 0);
    metrics_field(buf, n, &pos, "decide_ms_per_step", total ? m->decide_ms / total : NAN, 0);
    metrics_field(buf, n, &pos, "hybrid_time_s", time_total / 1000.0, 0);
    metrics_field(buf, n, &pos, "peak_rss_mib", metrics_peak_rss_mib(), 0);
    return pos;
}

static inline void metrics_print_table(const HybridMetrics* m, FILE* f) {
    int total = metrics_total_steps(m);
    double full_ms = m->steps[HYBRID_PHASE_FULL] ? m->ms[HYBRID_PHASE_FULL] / m->steps[HYBRID_PHASE_FULL] : NAN;
    fprintf(f, "+--------------------------------------+------------------+\n");
    fprintf(f, "| hybrid summary                       |                  |\n");
    fprintf(f, "+--------------------------------------+------------------+\n");
    for (int p = 0; p < HYBRID_PHASE_COUNT; p++) {
        char label[64];
        snprintf(label, sizeof(label), "%s steps / time (s)", hybrid_phase_label((HybridPhase)p));
        fprintf(f, "| %-36s | %6d / %7.2f |\n", label, m->steps[p], m->ms[p] / 1000.0);
    }
    fprintf(f, "| %-36s | %15.1f%% |\n", "steps without backward", total ? 100.0 * m->steps[HYBRID_PHASE_PREDICT] / total : 0.0);
    fprintf(f, "| %-36s | %16.4f |\n", "decision ms per step", total ? m->decide_ms / total : NAN);
    fprintf(f, "| %-36s | %15.3f%% |\n", "decision cost / Full step", 100.0 * (total ? m->decide_ms / total : NAN) / full_ms);
    fprintf(f, "| %-36s | %16.1f |\n", "peak RSS (MiB)", metrics_peak_rss_mib());
    fprintf(f, "+--------------------------------------+------------------+\n");
}

static inline void metrics_io(HybridIO* io, HybridMetrics* m) {
    hio_i32s(io, m->steps, HYBRID_PHASE_COUNT);
    hio_f64s(io, m->ms, HYBRID_PHASE_COUNT);
    hio_f64(io, &m->decide_ms);
    for (int p = 0; p < HYBRID_PHASE_COUNT && !io->writing && !io->failed; p++) {
        if (m->steps[p] < 0 || m->steps[p] >= (1 << 30)) { hio_fail(io, "step counts out of range"); }
    }
}

#endif // HYBRID_METRICS_H
