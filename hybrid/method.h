/*
 * hybrid/method.h — what a method of hybrid mode is: one row of the method table (hybrid/methods.h).
 * A method predicts the weights some way; hybrid mode's facade (hybrid/hybrid.h) runs whichever row
 * `--hybrid NAME` chose and knows no method by name. A row gives:
 *   its name and one line for --help and the start-up table, and its flags (an ArgTable into its own
 *   config struct, with defaults; the drift rows share --hybrid's table);
 *   the P-float buffers it needs (allocated once, by the facade on the CPU), and whether the first of them
 *   holds the weights to evaluate and keep (llmc/average.h's facility: val loss, samples and the model
 *   file at them, an exact swap);
 *   its step hooks: plan (the phase of a step: Full, Predict, Correct, or Warmup), update (the measured
 *   step's AdamW pass, with whatever the method fuses into it), predict (a step without a batch),
 *   check (a Correct step's loss, which may roll a Predict run back), observe (after every step);
 *   its resume record (io: everything a resumed run needs, bit for bit) and its summary (lines and
 *   summary.json fields); whether its update folds a trainer's EMA of the weights (--ema) in.
 * The parts of the seed's design card keep their names where a method has them: the phase controller is
 * plan, the residual store is what a method keeps of the measured trajectory (its buffers and io), the
 * divergence monitor is check with the trainer's exact rollback.
 * hybrid_method_complete refuses a row with a hook missing, before a step is spent.
 */
#ifndef HYBRID_METHOD_H
#define HYBRID_METHOD_H

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "llmc/config.h"  // ArgTable
#include "hybrid/hio.h"
#include "hybrid/apply.h" // ApplyAdamStep

typedef enum { HYBRID_PHASE_WARMUP = 0, HYBRID_PHASE_FULL = 1, HYBRID_PHASE_PREDICT = 2, HYBRID_PHASE_CORRECT = 3 } HybridPhase;
#define HYBRID_PHASE_COUNT 4

static inline const char* hybrid_phase_label(HybridPhase p) {
    static const char* names[HYBRID_PHASE_COUNT] = {"warmup", "full", "predict", "correct"};
    return (p >= 0 && p < HYBRID_PHASE_COUNT) ? names[p] : "?";
}

// what the trainer does in this step
typedef struct {
    HybridPhase phase;
    const float* coef;          // Predict (drift rows): (nblocks) coefficients along the drift
    int keep;                   // Predict: the step keeps the weights in the keep buffer for a rollback
    int check;                  // Correct steps: the first micro batch's loss to hybrid_check before the backward
    int observe;                // other measured steps: that loss to hybrid_observe, after the step
} HybridPlan;

// the model and the run as a method sees them
typedef struct {
    size_t num_params;          // P
    int nblocks;                // parameter blocks (each tensor of each layer)
    const size_t* offsets;      // (nblocks+1) block boundaries in floats
    const float* weight_decay;  // (nblocks) AdamW's decoupled weight decay per block
    int total_steps;            // the schedule's length
    float lr_peak, beta1, beta2, eps;
    double tokens_per_step;     // what one measured step trains on (all micro batches of all processes)
} HybridModel;

// what a step gave, for observe: loss and grad_norm NAN on Predict and skipped steps; loss_micro1 the first
// micro batch's loss where the plan asked for it; noise_s, noise_g2 the gradient noise scale's terms (NAN:
// not measured)
typedef struct {
    HybridPhase phase;
    float loss, loss_micro1, grad_norm;
    double noise_s, noise_g2;
} HybridObservation;

// a measured step or a Predict step on a GPU, for a method's kernels (the GPU trainer's buffers through
// hybrid/device.cuh; plain C types, so that the row compiles on the CPU too)
typedef struct {
    float* master;              // (padded P) fp32 master weights, device
    void* params;               // (padded P) their floatX working copy, device
    float* grads;               // (padded P) the step's gradients, device
    float* m;                   // (shard) AdamW's moments, device, indexed from lo
    float* v;                   // (shard)
    float* const* bufs;         // the method's buffers, (padded P) each, device, indexed like the weights
    const size_t* block_offsets; // (nblocks+1) device
    const float* block_wd;      // (nblocks) device
    int nblocks;
    size_t lo, hi;              // this rank's range of the flat parameters
    ApplyAdamStep adam;         // the update's numbers (its weight_decay is the host's: use block_wd)
    uint32_t seed;              // the floatX rounding's
    void* stream;               // cudaStream_t
} HybridDeviceStep;

#ifdef __CUDACC__
#define HYBRID_ON_DEVICE(fn) fn
// a method's kernel over the step's range [lo, hi) of the flat parameters, one thread per weight, on the
// step's stream; the kernel's first thread is weight lo
#define HYBRID_LAUNCH_RANGE(kernel, s, ...)                                                                       \
    do {                                                                                                      \
        if ((s)->hi > (s)->lo) {                                                                              \
            kernel<<<ceil_div((long)((s)->hi - (s)->lo), 512), 512, 0, (cudaStream_t)(s)->stream>>>(__VA_ARGS__); \
            cudaCheck(cudaGetLastError());                                                                    \
        }                                                                                                     \
    } while (0)
#else
#define HYBRID_ON_DEVICE(fn) NULL
#endif

typedef struct HybridMethod {
    const char* name;           // --hybrid NAME
    const char* about;          // one line: what it does
    const ArgTable* flags;      // its own flags (no rows: it reads --hybrid's table, HybridConfig)
    int buffers;                // P-float buffers it keeps (0..HYBRID_MAX_BUFFERS)
    int keeps_weights;          // buffer 0 holds the weights to evaluate and keep
    int predicts;               // plan may return Predict steps (then predict is required)
    int gpu;                    // 1: hybrid/device.cuh runs it on the GPU (the drift family's kernels, or the two
                                // hooks at the end of the row)
    // its state, from its flags (config: the struct its ArgTable points into, or HybridConfig); bufs: its
    // buffers, zeroed (host memory; NULL where the GPU trainer keeps them); params: the initial weights
    // (P, host) or NULL. The only place a method allocates.
    void* (*init)(const HybridModel* model, const void* config, float* const* bufs, const float* params);
    void (*free)(void* self);
    void (*plan)(void* self, int step, float lr, HybridPlan* p);
    // a measured step's update: AdamW (st: its numbers) and what the method fuses into the same pass;
    // leaves the gradients zero (st->zero_grads) and rounds st->params16 where given
    void (*update)(void* self, const HybridModel* model, const ApplyAdamStep* st, float* params, float* grads, float* m,
                   float* v, float* const* bufs);
    void (*predict)(void* self, const HybridModel* model, const HybridPlan* p, float* params, float* keep,
                    float* const* bufs);
    int (*check)(void* self, float loss);          // NULL: never rolls back
    void (*skip)(void* self);                      // a measured step whose update was skipped; NULL: nothing
    void (*observe)(void* self, const HybridObservation* o);
    // the resume record: bufs as the facade or the GPU's staging holds them; keep: the rollback point of
    // an open Predict run (drift rows) or NULL
    void (*io)(HybridIO* io, void* self, float* const* bufs, float* keep);
    int (*run_open)(const void* self);             // a Predict run is open (the keep buffer matters); NULL: never
    void (*print_summary)(const void* self, FILE* f);
    // "key": value pairs, no braces, appended to buf with metrics_field: buf's new length, or n where some
    // did not fit (those left out whole)
    int (*summary_fields)(const void* self, char* buf, size_t n);
    int (*step_json)(const void* self, char* buf, size_t n);  // this step's metrics.jsonl fields (snprintf's return); NULL: none
    int (*event)(const void* self, char* buf, size_t n);           // a log line for this step (0: none); NULL
    void (*what)(const void* self, char* buf, size_t n);           // a Predict step's text for the step line; NULL
    // on the GPU (HYBRID_ON_DEVICE(fn): NULL in a CPU build): a measured step's update and a Predict step as
    // kernels on the step's range, the host bookkeeping as update and predict do it
    void (*device_update)(void* self, const HybridDeviceStep* s);
    void (*device_predict)(void* self, const HybridDeviceStep* s);
    int folds_ema;              // 1: its update folds ApplyAdamStep's ema in (CPU and GPU), so a trainer's --ema
                                // runs with it; 0: the trainer refuses --ema (the method keeps its own average,
                                // or moves the weights outside the update)
} HybridMethod;

#define HYBRID_MAX_BUFFERS 2

// a method's flag table shows in the start-up table only while --hybrid chose its method (hybrid/hybrid.h)
static int hybrid_table_shown(const void* table);

// a row with a hook missing, or numbers out of range: 0 and the reason in why (n bytes); 1 when complete
static inline int hybrid_method_complete(const HybridMethod* m, char* why, size_t n) {
    const char* missing = NULL;
    if (m->name == NULL || m->name[0] == '\0') { missing = "name"; }
    else if (m->about == NULL) { missing = "about"; }
    else if (m->init == NULL) { missing = "init"; }
    else if (m->free == NULL) { missing = "free"; }
    else if (m->plan == NULL) { missing = "plan"; }
    else if (m->update == NULL) { missing = "update"; }
    else if (m->predicts && m->predict == NULL) { missing = "predict (it plans Predict steps)"; }
    else if (m->observe == NULL) { missing = "observe"; }
    else if (m->io == NULL) { missing = "io (its resume record)"; }
    else if (m->print_summary == NULL) { missing = "print_summary"; }
    else if (m->summary_fields == NULL) { missing = "summary_fields"; }
    if (missing != NULL) {
        snprintf(why, n, "method %s: its row has no %s", m->name ? m->name : "(unnamed)", missing);
        return 0;
    }
    if (m->buffers < 0 || m->buffers > HYBRID_MAX_BUFFERS) {
        snprintf(why, n, "method %s: %d buffers (at most %d)", m->name, m->buffers, HYBRID_MAX_BUFFERS);
        return 0;
    }
    if (m->keeps_weights && m->buffers < 1) {
        snprintf(why, n, "method %s: keeps weights but has no buffer to keep them in", m->name);
        return 0;
    }
    if (m->flags == NULL) {
        snprintf(why, n, "method %s: its row has no flag table (an empty one where it has no flags)", m->name);
        return 0;
    }
    if (m->flags->num_args > 0 && (m->flags->config == NULL || m->flags->defaults == NULL)) {
        snprintf(why, n, "method %s: its flag table has no config struct or defaults", m->name);
        return 0;
    }
    return 1;
}

#endif // HYBRID_METHOD_H
