/*
 * llmc/cpu_profile.h — where a CPU training step's time goes, by kind of work: wall-clock timers around
 * the layer calls of train_gpt2.c, read by dev/bench_gpt2 (`make bench` prints the table). Compiled in
 * only where the build defines LLMC_PROFILE (the bench's build); elsewhere PROF(phase, stmt) is stmt.
 * When compiled in, it runs while cpu_profile_enabled is set: one omp_get_wtime pair per layer call
 * (~100 a step: negligible).
 * Time spent in OpenMP barriers and thread wake-ups is inside each phase; the step's remainder
 * (everything not wrapped) shows up as "other" in the bench.
 */
#ifndef LLMC_CPU_PROFILE_H
#define LLMC_CPU_PROFILE_H

#include <omp.h>

typedef enum {
    PROF_GEMM,          // the linear layers and the lm_head: their GEMMs, with the bias and residual adds and
                        // the bias gradients that share their parallel regions
    PROF_ATTENTION,     // causal self-attention, its O(T^2) products and softmax included
    PROF_LAYERNORM,
    PROF_GELU,
    PROF_CROSSENTROPY,  // softmax + cross-entropy, forward and backward
    PROF_ENCODER,       // token + position embeddings, forward and backward
    PROF_GRAD_NORM,
    PROF_ADAMW,
    PROF_PHASES
} ProfPhase;

static const char* const PROF_NAMES[PROF_PHASES] = {
    "gemm", "attention", "layernorm", "gelu", "crossentropy", "encoder", "grad_norm", "adamw",
};

static int cpu_profile_enabled = 0;
static double cpu_profile_seconds[PROF_PHASES];

static inline double prof_begin(void) { return cpu_profile_enabled ? omp_get_wtime() : 0.0; }
static inline void prof_end(ProfPhase phase, double t0) {
    if (cpu_profile_enabled) { cpu_profile_seconds[phase] += omp_get_wtime() - t0; }
}
// PROF(phase, statement): the statement's wall time added to the phase
#ifdef LLMC_PROFILE
#define PROF(phase, stmt) do { double prof_t0_ = prof_begin(); stmt; prof_end(phase, prof_t0_); } while (0)
#else
#define PROF(phase, stmt) do { stmt; } while (0)
#endif

#endif // LLMC_CPU_PROFILE_H
