/*
 * llmc/run.h — a training run as both trainers keep it besides the model: the configuration, the data
 * loaders, the LR schedule, the sampler, the logs and the counters a checkpoint saves. The helpers here
 * are the parts of a step that do not touch the model: the console line, the metrics line, the count of
 * non-finite steps, and when to evaluate, sample or checkpoint. Each trainer's main() holds the loop
 * itself and calls these; the model's forward, backward and update stay in the trainer, and a feature
 * that acts on steps tags the StepResult (its phase, its metrics fields) before the loop logs it.
 */
#ifndef LLMC_RUN_H
#define LLMC_RUN_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"
#include "llmc/config.h"
#include "llmc/dataloader.h"
#include "llmc/schedulers.h"
#include "llmc/tokenizer.h"
#include "llmc/sampler.h"
#include "llmc/vocab.h"
#include "llmc/logger.h"

#define MAX_FAULTS 5  // consecutive NaN/Inf steps before giving up

typedef struct {
    TrainConfig cfg;
    const TrainCli* cli;      // the trainer's command line: its tables, whose fixed rows a checkpoint records
    int num_processes;
    int rank0;                // this process prints, logs and writes checkpoints
    DataLoader train_loader;
    DataLoader val_loader;
    int has_val;
    LRScheduler scheduler;
    Tokenizer tokenizer;
    Sampler sampler;          // its stream is saved
    Logger logger;
    int grad_accum;           // micro batches per step and process
    int beta2_auto;           // --beta2 -1 resolved (llmc/run_state.h): 1 by the tokens per step, 2 by the checkpoint
    int total_steps;
    int step;                 // steps completed (saved)
    int adam_steps;           // AdamW updates applied (saved)
    uint64_t tokens;          // train tokens consumed, all processes (saved)
    uint64_t backward;        // backward passes, all processes (saved)
    double train_time_s;      // cumulative training seconds (saved)
    int faults;               // consecutive non-finite steps
    float last_val_loss;      // -1 until computed
    const char* kept_label;   // a run that keeps other weights than it trains (llmc/average.h): their name in the
                              // logs, val_loss_<label> (NULL: none)
    float last_val_kept;      // val loss at the kept weights; -1 until computed
    float last_train_loss;
    unsigned char* loader_blob; // (dataloader_state_max_size) scratch for checkpoints
    double flops_per_token;
    double peak_flops;        // all processes; 0: unknown, no MFU
    double gns_s_sum, gns_g2_sum; // the gradient noise scale's two estimates, summed over the run's second half (saved)
    int gns_steps;
    double val_bytes;         // text bytes of the val targets one evaluation sees (0: unknown, no bits per byte)
    double val_tokens;        // and their number
} TrainRun;

// what a trainer's step returns
typedef struct {
    float loss;       // mean over the step's micro batches (and processes)
    float grad_norm;  // before clipping
    float grad_norm_micro1; // the first micro batch's gradient alone (NAN: one micro batch, or not measured)
    float loss_micro1;      // the first micro batch's loss (NAN: not measured)
    int skipped;      // non-finite loss or norm: no update
    double ms;
    // what a feature that planned the step adds for the logs (all zero: a plain step)
    const char* phase;      // the step's phase for the step line and metrics.jsonl (NULL: "full", not printed)
    int unmeasured;         // a step without a batch: no loss, no norm; `what` says what it did
    char what[96];          // such a step's console text
    char json[256];         // more "key": value pairs for its metrics line ("": none)
} StepResult;

static inline size_t run_val_begin(TrainRun* run);

// the text bytes behind the val targets an evaluation sees, once at start-up, for val loss in bits per
// byte (a loss that compares across vocabularies): each target token's bytes in the tokenizer file.
// The tokenizer must be the data's (same vocabulary size), else bits per byte stay off.
static inline void run_count_val_bytes(TrainRun* run, int vocab_size) {
    run->val_bytes = 0.0;
    if (!run->tokenizer.init_ok || (int)run->tokenizer.vocab_size != vocab_size) { return; }  // run_setup said so
    DataLoader* val = &run->val_loader;
    size_t n = run_val_begin(run), bytes = 0, count = (size_t)run->cfg.B * run->cfg.T;
    for (size_t i = 0; i < n; i++) {
        dataloader_next_batch(val);
        for (size_t k = 0; k < count; k++) { bytes += tokenizer_text_bytes(&run->tokenizer, (uint32_t)val->targets[k]); }
    }
    run->val_bytes = (double)bytes;
    run->val_tokens = (double)n * count;
}

// val loss (nats per token, the mean over the targets) in bits per byte of text; NAN when unknown
static inline double run_val_bpb(const TrainRun* run, float val_loss) {
    if (run->val_bytes <= 0.0) { return NAN; }
    return (double)val_loss * run->val_tokens / (run->val_bytes * M_LN2);
}

// ----------------------------------------------------------------------------
// set-up: data, steps, schedule, sampler, tokenizer and logs, once the model is built (V known)

static inline void run_setup(TrainRun* run, int vocab_size, int resume_step) {
    TrainConfig* c = &run->cfg;
    int np = run->num_processes;
    run->last_val_loss = -1.0f;
    run->last_val_kept = -1.0f;
    // the model's vocabulary (llmc/vocab.h): the model file is the checkpoint resumed from, or -e's file
    char model[4096];
    int depth;
    char tail;
    int from_file = resume_step >= 0 || sscanf(c->init, "d%d%c", &depth, &tail) != 1;  // -e dN: a random init
    if (resume_step >= 0) { checkpoint_path(model, sizeof(model), c->output_dir, "model", resume_step); }
    else { snprintf(model, sizeof(model), "%s", c->init); }
    const char* given_tokenizer = c->tokenizer;
    vocab_resolve(c, vocab_size, from_file ? model : NULL, c->max_steps == 0 || c->prompt != NULL, run->rank0);
    if (c->tokenizer != NULL && (c->sample_every > 0 || c->max_steps == 0 || c->val_every > 0)) {  // samples, bits per byte
        tokenizer_init(&run->tokenizer, c->tokenizer);
        if (!run->tokenizer.init_ok && run->rank0) {
            printf("note: no tokenizer at %s; samples print token ids, val loss has no bits per byte\n", c->tokenizer);
        }
        if (run->tokenizer.init_ok && (int)run->tokenizer.vocab_size != vocab_size) {  // never decode with another's
            if (given_tokenizer != NULL && c->max_steps == 0) {
                fatal("flag --tokenizer: %s has %u tokens, the model's vocabulary %d: not the vocabulary it was "
                      "trained with", c->tokenizer, run->tokenizer.vocab_size, vocab_size);
            }
            if (run->rank0) {
                printf("note: the tokenizer %s has %u tokens, the model %d: samples print token ids, no "
                       "bits per byte\n", c->tokenizer, run->tokenizer.vocab_size, vocab_size);
            }
            tokenizer_free(&run->tokenizer);
        }
    }
    // the context starts from <|endoftext|>, the vocabulary's last id
    sampler_init(&run->sampler, c->prompt, c->vocab_dir, vocab_size - 1, vocab_size, c->sample_tokens,
                 c->temperature, c->top_k, (uint64_t)c->seed);
    if (c->max_steps == 0) { return; }  // generation only: no data
    dataloader_init(&run->train_loader, c->train_pattern, c->B, c->T, vocab_size,
                    c->rows == ROWS_RANDOM ? LOADER_ROWS : LOADER_CHUNKS, (uint64_t)c->seed);
    char val_buf[4096];
    const char* val_pattern = config_val_pattern(c, val_buf, sizeof(val_buf));
    run->has_val = c->val_every > 0 && val_pattern != NULL;
    if (c->val_every > 0 && val_pattern == NULL && run->rank0) {
        printf("note: no val shards beside %s (and no -j): val is off\n", c->train_pattern);
    }
    if (run->has_val) {
        dataloader_init(&run->val_loader, val_pattern, c->B, c->T, vocab_size, LOADER_IN_ORDER, (uint64_t)c->seed);
        run_count_val_bytes(run, vocab_size);
    }
    run->grad_accum = c->total_batch == -1 ? 1 : c->total_batch / (c->B * c->T * np);
    run->total_steps = c->max_steps;
    if (run->total_steps == -1) {
        run->total_steps = (int)(run->train_loader.total_batches / ((size_t)run->grad_accum * np));
        if (run->total_steps == 0) {
            fatal("%s: one epoch has %zu batches, fewer than one step needs (%d)", c->train_pattern,
                  run->train_loader.total_batches, run->grad_accum * np);
        }
    }
    LRScheduleKind kind;
    lr_schedule_parse(c->schedule, &kind);
    lr_scheduler_init(&run->scheduler, kind, c->lr, c->warmup, run->total_steps, c->final_frac);
    run->loader_blob = (unsigned char*)mallocCheck(dataloader_state_max_size(&run->train_loader));
    logger_init(&run->logger, run->rank0 ? c->output_dir : NULL, resume_step);
}

static inline void run_free(TrainRun* run) {
    logger_free(&run->logger);
    tokenizer_free(&run->tokenizer);
    sampler_free(&run->sampler);
    if (run->cfg.max_steps != 0) { dataloader_free(&run->train_loader); }
    if (run->has_val) { dataloader_free(&run->val_loader); }
    free(run->loader_blob);
}

// what one step trains on: every micro batch of every process
static inline double run_tokens_per_step(const TrainRun* run) {
    return (double)run->cfg.B * run->cfg.T * run->grad_accum * run->num_processes;
}

// The gradient noise scale B_simple (McCandlish et al. 2018), in tokens: from the norms of one micro
// batch's gradient (b tokens) and of the step's accumulated one (Bb tokens), unbiased estimates of the
// true gradient's squared norm G2 = (Bb |G_Bb|^2 - b |G_b|^2) / (Bb - b) and of the noise's trace
// S = (|G_b|^2 - |G_Bb|^2) / (1/b - 1/Bb); B_noise = S / G2. One step's estimate is noisy (it can be
// negative); a ratio of sums is the stable one. The summary's sums cover the second half of the run
// (steps past total/2): B_noise grows as the loss falls, and over the whole run the first steps' large
// G2 would dominate the sum. Steps with more tokens than B_noise gain little per token from a larger
// batch: the regime a comparison of runs must know.
// The step's S and G2 (NAN, NAN where not measured: one micro batch, a skipped step); a feature may keep
// a running ratio of them.
static inline void run_noise_terms(const TrainRun* run, const StepResult* r, double* s, double* g2) {
    int micro = run->grad_accum * run->num_processes;  // micro batches per step, over every process
    *s = *g2 = NAN;
    if (r->skipped || !isfinite(r->grad_norm_micro1) || !isfinite(r->grad_norm) || micro < 2) { return; }
    double b = (double)run->cfg.B * run->cfg.T, bb = b * micro;
    double gb2 = (double)r->grad_norm_micro1 * r->grad_norm_micro1, gbb2 = (double)r->grad_norm * r->grad_norm;
    *g2 = (bb * gbb2 - b * gb2) / (bb - b);
    *s = (gb2 - gbb2) / (1.0 / b - 1.0 / bb);
}

static inline double run_gns_step(TrainRun* run, const StepResult* r) {
    double s, g2;
    run_noise_terms(run, r, &s, &g2);
    if (!isfinite(s)) { return NAN; }
    if (run->step > run->total_steps / 2) {
        run->gns_s_sum += s;
        run->gns_g2_sum += g2;
        run->gns_steps++;
    }
    return s / g2;
}

// NAN (not measured: null in summary.json, no line in the summary) unless both sums are positive: a
// negative one means the noise was too small to see at this batch size, not a negative number of tokens
static inline double run_gns(const TrainRun* run) {
    return run->gns_steps > 0 && run->gns_g2_sum > 0.0 && run->gns_s_sum > 0.0 ? run->gns_s_sum / run->gns_g2_sum : NAN;
}

// ----------------------------------------------------------------------------
// around a step

// the step counts as done, and the last train loss is kept
static inline void run_step_end(TrainRun* run, const StepResult* r) {
    run->step++;
    if (!r->unmeasured) { run->last_train_loss = r->loss; }
}

static inline void run_print_step(const TrainRun* run, const StepResult* r, float lr) {
    if (!run->rank0) { return; }
    if (r->unmeasured) {
        printf("step %4d/%d | %s | lr %.2e | %.2f ms\n", run->step, run->total_steps, r->what, lr, r->ms);
        return;
    }
    double tok_s = (double)run->grad_accum * run->num_processes * run->cfg.B * run->cfg.T / (r->ms / 1000.0);
    char mfu[32] = "n/a";
    if (run->peak_flops > 0.0) { snprintf(mfu, sizeof(mfu), "%.1f%%", 100.0 * run->flops_per_token * tok_s / run->peak_flops); }
    printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | %.2f ms | %s MFU | %.0f tok/s%s%s\n",
           run->step, run->total_steps, r->loss, r->grad_norm, lr, r->ms, mfu, tok_s,
           r->phase != NULL ? " | " : "", r->phase != NULL ? r->phase : "");
}

// val after the step: every -v steps and after the last one
static inline int run_val_due(const TrainRun* run) {
    return run->has_val && (run->step % run->cfg.val_every == 0 || run->step == run->total_steps);
}

// the val batches of one evaluation (the first -m, all with -m -1), from the start of the val data:
// every evaluation sees the same batches
static inline size_t run_val_begin(TrainRun* run) {
    DataLoader* val = &run->val_loader;
    dataloader_reset(val, (uint64_t)run->cfg.seed);
    return run->cfg.val_batches == -1 || (size_t)run->cfg.val_batches > val->total_batches
         ? val->total_batches : (size_t)run->cfg.val_batches;
}

// "val loss X" and, where known, its bits per byte; named: the kept weights' label, or NULL
static inline void run_print_val_named(const TrainRun* run, const char* name, float val_loss) {
    if (!run->rank0) { return; }
    double bpb = run_val_bpb(run, val_loss);
    const char* sp = name != NULL ? " " : "";
    name = name != NULL ? name : "";
    if (isfinite(bpb)) { printf("%s%sval loss %.6f | %.4f bits per byte\n", name, sp, val_loss, bpb); }
    else { printf("%s%sval loss %.6f\n", name, sp, val_loss); }
}

static inline void run_print_val(const TrainRun* run, float val_loss) { run_print_val_named(run, NULL, val_loss); }

static inline void run_log_init_val(TrainRun* run, float val_loss) {
    run->last_val_loss = val_loss;
    run_print_val(run, val_loss);
    logger_log_init_val(&run->logger, val_loss, run_val_bpb(run, val_loss));
}

// the step's metrics line (val_loss: NAN when not evaluated at this step; val_kept: at the kept weights, NAN
// when not evaluated or none are kept), then the fault count: a non-finite step was skipped by the trainer;
// MAX_FAULTS of them in a row stop the run
static inline void run_log_step(TrainRun* run, const StepResult* r, float lr, float val_loss, float val_kept) {
    StepMetrics m;
    memset(&m, 0, sizeof(m));
    m.step = run->step;
    m.phase = r->phase != NULL ? r->phase : "full";
    m.has_loss = !r->unmeasured;
    m.loss = r->loss;
    m.lr = lr;
    m.has_norm = !r->unmeasured;
    m.grad_norm = r->grad_norm;
    double gns = r->unmeasured || r->skipped ? NAN : run_gns_step(run, r);
    m.has_gns = isfinite(r->grad_norm_micro1) && !r->unmeasured;
    m.grad_norm_micro1 = r->grad_norm_micro1;
    m.gns = gns;
    m.extra = r->json[0] != '\0' ? r->json : NULL;
    m.ms = r->ms;
    m.train_time_s = run->train_time_s;
    m.tokens = run->tokens;
    m.backward = run->backward;
    m.skipped = r->skipped;
    if (!isnan(val_loss)) {
        run->last_val_loss = val_loss;
        run_print_val(run, val_loss);
        m.has_val = 1;
        m.val_loss = val_loss;
        m.val_bpb = run_val_bpb(run, val_loss);
    }
    if (!isnan(val_kept) && run->kept_label != NULL) {
        run->last_val_kept = val_kept;
        run_print_val_named(run, run->kept_label, val_kept);
        m.kept_label = run->kept_label;
        m.val_loss_kept = val_kept;
        m.val_bpb_kept = run_val_bpb(run, val_kept);
    }
    logger_log_step(&run->logger, &m);
    if (!r->skipped) { run->faults = 0; return; }
    run->faults++;
    if (run->rank0) {
        printf("step %d: non-finite loss %f or grad norm %f; update skipped (%d/%d in a row)\n",
               run->step, r->loss, r->grad_norm, run->faults, MAX_FAULTS);
        fflush(stdout);
    }
    if (run->faults >= MAX_FAULTS) {
        fatal("%d consecutive steps with NaN/Inf loss or grad norm (step %d); stopping with the weights "
              "of the last good step (lower -l?)", MAX_FAULTS, run->step);
    }
}

static inline int run_last_step(const TrainRun* run) { return run->step == run->total_steps; }

// samples every -s steps and after the last one, so that a run ends with text (run_sample_step: on every
// process, for what they must do together around it; run_sample_due: the one that samples)
static inline int run_sample_step(const TrainRun* run) {
    const TrainConfig* c = &run->cfg;
    return c->sample_every > 0 && (run->step % c->sample_every == 0 || run_last_step(run));
}
static inline int run_sample_due(const TrainRun* run) { return run_sample_step(run) && run->rank0; }

// checkpoints every -n steps, after the last one, and when stopped by a signal (needs -o)
static inline int run_checkpoint_due(const TrainRun* run, int stop) {
    const TrainConfig* c = &run->cfg;
    return c->output_dir != NULL && ((c->ckpt_every > 0 && (run->step % c->ckpt_every == 0 || run_last_step(run))) || stop);
}

#endif // LLMC_RUN_H
