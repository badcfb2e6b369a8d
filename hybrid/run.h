/*
 * hybrid/run.h — hybrid mode in a trainer's run (llmc/run.h): its flags as one more table of the command
 * line, the call after each step that does hybrid/'s bookkeeping and tags the step for the logs, its file
 * in each checkpoint (hybrid_%08d.bin) and its part of the summary. A trainer keeps a HybridConfig (the
 * flags) and a HybridState next to its buffers; its loop reads
 *     HybridPlan plan = hybrid_plan(&hy, step, lr);   // Full, or in hybrid mode Predict or Correct
 *     StepResult r = ...the step...;
 *     hybrid_report(&hy, run, &r);                      // all of hybrid/'s bookkeeping happens in there
 * Without --hybrid the state stays zeroed: every step is a Full step and hybrid_report does nothing.
 * This is the one place where hybrid/ meets llmc/'s run; llmc/ knows nothing of hybrid mode.
 */
#ifndef HYBRID_RUN_H
#define HYBRID_RUN_H

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"
#include "llmc/config.h"
#include "llmc/checkpoint.h"
#include "llmc/run.h"
#include "hybrid/hybrid.h"

// hybrid mode's state for a training run, over the model's parameter blocks (llmc/checkpoint.h's
// gpt2_param_blocks: each tensor of each layer); zeroed when hybrid mode is off or nothing is trained.
// eps: AdamW's, the trainer's constant; params: the initial weights (host) and host_buffers as hybrid_init's.
static inline void hybrid_setup(HybridState* h, const HybridConfig* cfg, const TrainRun* run, const GPT2Config* mc,
                                float eps, const float* params, int host_buffers) {
    memset(h, 0, sizeof(*h));
    if (!cfg->enabled || run->cfg.max_steps == 0) { return; }
    int nblocks = 12 * mc->num_layers + 4;
    size_t* offsets = (size_t*)mallocCheck((size_t)(nblocks + 1) * sizeof(size_t));
    float* block_wd = (float*)mallocCheck((size_t)nblocks * sizeof(float));
    gpt2_param_blocks(mc, offsets, block_wd, run->cfg.weight_decay);
    int micro_batches = run->grad_accum * run->num_processes;
    hybrid_init(h, cfg, offsets, nblocks, run->total_steps, run_tokens_per_step(run), run->cfg.lr,
                run->cfg.beta1, run->cfg.beta2, eps, block_wd, params, host_buffers);
    free(offsets);
    free(block_wd);
    if (run->cfg.process_rank == 0) {
        if (hybrid_gate_blind(&h->cfg, micro_batches)) { hybrid_print_gate_blind(hybrid_drift(h)->la.beta0, run_tokens_per_step(run), stdout); }
        if (hybrid_nothing_on(&h->cfg)) { hybrid_print_nothing_on(stdout); }
        else { printf("hybrid: method %s: %s\n", h->method->name, h->method->about); }
    }
}

// after the step: hybrid/ records it (its own time is added to the step's and to the run's training
// time) and tags the StepResult for the step line and metrics.jsonl; a rollback is printed
static inline void hybrid_report(HybridState* h, TrainRun* run, StepResult* r) {
    if (!hybrid_enabled(h)) { return; }
    double s, g2;
    run_noise_terms(run, r, &s, &g2);
    double own = hybrid_observe(h, r->skipped ? NAN : r->loss, r->loss_micro1, r->skipped ? NAN : r->grad_norm, s, g2,
                                r->ms);
    r->ms += own;
    run->train_time_s += own / 1000.0;
    hybrid_step_json(h, r->json, sizeof(r->json));
    char event[160];
    if (hybrid_take_event(h, event, sizeof(event)) && run->rank0) { printf("%s\n", event); }
    r->phase = hybrid_phase_name(h);
    r->unmeasured = h->phase == HYBRID_PHASE_PREDICT;
    if (r->unmeasured) { hybrid_what(h, r->what, sizeof(r->what)); }
}

// the phase of the last planned step (the GPU trainer logs device memory at each change)
static inline HybridPhase hybrid_phase(const HybridState* h) { return h->phase; }

// ----------------------------------------------------------------------------
// checkpoints: hybrid_%08d.bin beside the model and state files of the step

// this step's file (rank 0); bufs: the method's buffers (NULL: the state's own; a GPU trainer's host staging);
// keep: the rollback point of an open Predict run, or NULL
static inline void hybrid_checkpoint_write(HybridState* h, const TrainRun* run, float* const* bufs, const float* keep) {
    char path[4096];
    checkpoint_path(path, sizeof(path), run->cfg.output_dir, "hybrid", run->step);
    AtomicFile af;
    atomic_open(&af, path);
    char err[256];
    if (hybrid_save(h, af.fp, bufs, keep, err, sizeof(err)) != 0) {
        fatal("%s: cannot write the hybrid state (%s)", path, err);
    }
    atomic_commit(&af);
}

// checkpoint `step`'s file into an initialised state of the same configuration, the method's buffers (bufs as
// above) and, when a Predict run was open, its rollback point into keep (P); exits with one line naming the
// file on any problem
static inline void hybrid_checkpoint_load(HybridState* h, const TrainRun* run, int step, float* const* bufs, float* keep) {
    char path[4096];
    checkpoint_path(path, sizeof(path), run->cfg.output_dir, "hybrid", step);
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { fatal("%s: cannot open (%s); was the run saved without --hybrid?", path, strerror(errno)); }
    char err[200];
    if (hybrid_load(h, fp, bufs, keep, err, sizeof(err)) != 0) { fatal("%s: %s", path, err); }
    fcloseCheck(fp, path);
}

// ----------------------------------------------------------------------------
// the summary: hybrid's table on the console (hybrid mode on), and its pairs appended to summary.json's
// extra (extra: a NUL-terminated string of n bytes): the steps per phase, and hybrid's own numbers. Returns
// 0 where they did not all fit (extra then holds the ones that did, still valid JSON), else 1.

static inline int hybrid_summary(const HybridState* h, const TrainRun* run, char* extra, size_t n) {
    size_t pos = strlen(extra);
    if (!hybrid_enabled(h)) {
        metrics_append(extra, n, &pos, ", \"phase_steps\": {\"full\": %d}", run->step);
        return pos < n;
    }
    if (run->rank0) { hybrid_print_summary(h, stdout); }
    const int* ps = h->metrics.steps;
    metrics_append(extra, n, &pos, ", \"phase_steps\": {\"warmup\": %d, \"full\": %d, \"predict\": %d, \"correct\": %d}",
                   ps[HYBRID_PHASE_WARMUP], ps[HYBRID_PHASE_FULL], ps[HYBRID_PHASE_PREDICT], ps[HYBRID_PHASE_CORRECT]);
    size_t before = pos;
    metrics_append(extra, n, &pos, ", \"hybrid\": {");
    if (pos + 2 >= n) {  // no room for the object and its closing brace: leave hybrid's object out
        if (before < n) { extra[before] = '\0'; }
        return 0;
    }
    size_t room = n - pos - 1;  // one byte kept for the closing brace
    size_t w = hybrid_summary_fields(h, extra + pos, room);
    int fit = w < room;
    pos += strlen(extra + pos);
    extra[pos++] = '}';
    extra[pos] = '\0';
    return fit;
}

#endif // HYBRID_RUN_H
