/*
 * llmc/run_state.h — a run's checkpoints as the trainers use them: where a run starts (the latest
 * complete checkpoint with -y 1, else -e), the shared state file (counters, AdamW m and v, the data
 * position, the sampler's stream and the flags that define the schedule), the refusal to resume with
 * another schedule, and the DONE marker that completes a checkpoint. The file formats themselves are
 * llmc/checkpoint.h's; the model file is the trainer's to write, as is a feature's own file.
 */
#ifndef LLMC_RUN_STATE_H
#define LLMC_RUN_STATE_H

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "llmc/utils.h"
#include "llmc/checkpoint.h"
#include "llmc/run.h"

// the checkpoint to resume from (-y 1), or -1; with a note when there is none
static inline int run_state_resume_step(const TrainRun* run) {
    const TrainConfig* c = &run->cfg;
    int step = c->resume ? checkpoint_find_latest(c->output_dir) : -1;
    if (c->resume && step < 0 && run->rank0) {
        printf("note: no complete checkpoint in %s; starting from -e %s\n", c->output_dir, c->init);
    }
    return step;
}

// the model file to load into path, or 0 with *depth set (-e dN: random init)
static inline int run_state_model_source(const TrainConfig* c, int resume_step, char* path, size_t size, int* depth) {
    char tail;
    *depth = 0;
    if (resume_step >= 0) { checkpoint_path(path, size, c->output_dir, "model", resume_step); return 1; }
    if (sscanf(c->init, "d%d%c", depth, &tail) == 1) {
        if (*depth <= 0 || *depth > 64) { fatal("flag -e: depth must be in [1, 64], got '%s'", c->init); }
        return 0;
    }
    snprintf(path, size, "%s", c->init);
    return 1;
}

static inline void run_state_fill(const TrainRun* run, TrainState* s, size_t num_parameters) {
    memset(s, 0, sizeof(*s));
    const TrainConfig* c = &run->cfg;
    s->step = run->step;
    s->shuffle = 1;
    s->sample_rng = run->sampler.rng;
    s->shard_index = dataloader_shard_index(&run->train_loader);
    s->batch_index = dataloader_batch_index(&run->train_loader);
    s->num_parameters = num_parameters;
    s->tokens = run->tokens;
    s->backward = run->backward;
    s->train_time_s = run->train_time_s;
    s->init_seed = (uint64_t)c->seed;
    s->adam_steps = (uint64_t)run->adam_steps;
    s->has_run_flags = 1;
    config_fixed_record(c, run->cli, s->run_flags, sizeof(s->run_flags));
    if (c->vocab_dir != NULL) {  // the vocabulary it trained with (llmc/vocab.h): not a flag a resume compares
        size_t used = strlen(s->run_flags);
        int n = snprintf(s->run_flags + used, sizeof(s->run_flags) - used, "--vocab %s\n", c->vocab_dir);
        if (n < 0 || (size_t)n >= sizeof(s->run_flags) - used) { fatal("flag --vocab: the resume record is full"); }
    }
    s->gns_s_sum = run->gns_s_sum;
    s->gns_g2_sum = run->gns_g2_sum;
    s->gns_steps = run->gns_steps;
}

// a resume with another schedule or init would silently change the run: refused, one line per the
// first difference, unless --allow-changed 1 (llmc/config.h compares the record row by row)
static inline void run_state_check_flags(const TrainRun* run, const TrainState* s, const char* path) {
    if (run->cfg.allow_changed) { return; }
    if (!s->has_run_flags) {  // an older file: nothing to compare against, and the user should know
        fprintf(stderr, "note: %s predates the record of the run's flags: the flags fixed on resume are not "
                        "checked against it\n", path);
        return;
    }
    config_check_fixed(&run->cfg, run->cli, s->run_flags, path);
}

// the value checkpoint `step` recorded for a flag fixed on resume, into out; 0 where its record has none. Reads
// the header and the record at the file's end only: the run's start-up asks before it has the model's buffers
// (--precision auto keeps the precision the run chose)
static inline int run_state_recorded(const TrainRun* run, int step, const char* flag, char* out, size_t size) {
    char path[4096], record[STATE_RECORD_MAX];
    checkpoint_path(path, sizeof(path), run->cfg.output_dir, "state", step);
    FILE* fp = fopenCheck(path, "rb");
    int header[256];
    size_t bytes = file_size_check(fp, path);
    if (bytes < sizeof(header)) { fatal("%s: truncated state file (%zu bytes)", path, bytes); }
    freadCheck(header, sizeof(int), 256, fp, path);
    if (header[0] != STATE_MAGIC) { fatal("%s: not a state file (magic %d, expected %d)", path, header[0], STATE_MAGIC); }
    size_t n = header[60] == 2 && header[108] > 0 && header[108] < STATE_RECORD_MAX ? (size_t)header[108] : 0;
    record[0] = '\0';
    if (header[60] == 1) { state_legacy_record(header, record, sizeof(record)); }
    if (n > 0 && n <= bytes - sizeof(header)) {
        fseekCheck(fp, (long)(bytes - n), SEEK_SET, path);
        freadCheck(record, 1, n, fp, path);
        record[n] = '\0';
    }
    fcloseCheck(fp, path);
    return config_record_value(record, flag, out, size);
}

// --beta2 -1 (the default): config_beta2_auto's value at this run's tokens per step; a resumed run keeps the
// value its checkpoint recorded, which built its moments (a checkpoint from before --beta2 was recorded: llm.c's).
// run->beta2_auto says which chose (the start-up table shows it). After run_setup: it knows the tokens per step.
static inline void run_resolve_beta2(TrainRun* run, int resume_step) {
    run->beta2_auto = 0;
    if (run->cfg.beta2 != -1.0f) { return; }
    if (resume_step < 0) {
        run->beta2_auto = 1;
        run->cfg.beta2 = config_beta2_auto(run_tokens_per_step(run));
        return;
    }
    char recorded[64];
    run->beta2_auto = 2;
    run->cfg.beta2 = run_state_recorded(run, resume_step, "--beta2", recorded, sizeof(recorded)) ? strtof(recorded, NULL) : ADAM_BETA2;
}

// reads the state file of checkpoint `step` into s (m, v into the given buffers), checks it against
// the flags and restores the counters and data position. weights: (P) for the trained weights of a run whose
// model file keeps others (llmc/average.h), NULL for a run that trains the weights it keeps; a file must
// match, or the resume would continue from the other set
static inline void run_state_load(TrainRun* run, int step, size_t num_parameters, float* m, float* v, float* weights) {
    char path[4096];
    checkpoint_path(path, sizeof(path), run->cfg.output_dir, "state", step);
    TrainState s;
    unsigned char* blob;
    size_t blob_bytes;
    state_read(path, &s, num_parameters, m, v, &blob, &blob_bytes);
    if (s.step != step) { fatal("%s: state is for step %d, expected %d", path, s.step, step); }
    run_state_check_flags(run, &s, path);
    if (s.has_weights && weights == NULL) {
        fatal("%s: the model file keeps an average, the state the trained weights; resume with the run's --ema", path);
    }
    if (!s.has_weights && weights != NULL) {
        fatal("%s: the checkpoint keeps no average (a run without --ema); resume without --ema", path);
    }
    if (weights != NULL) { state_read_weights(path, num_parameters, weights); }
    dataloader_state_load(&run->train_loader, blob, blob_bytes, path);
    free(blob);
    run->step = s.step;
    run->adam_steps = (int)s.adam_steps;
    run->sampler.rng = s.sample_rng;
    run->tokens = s.tokens;
    run->backward = s.backward;
    run->train_time_s = s.train_time_s;
    run->gns_s_sum = s.gns_s_sum;
    run->gns_g2_sum = s.gns_g2_sum;
    run->gns_steps = s.gns_steps;
}

// the standard state file (rank 0): counters, m, v, loader position; weights: (P) the trained weights where
// the model file keeps others, else NULL
static inline void run_state_write(TrainRun* run, size_t num_parameters, const float* m, const float* v,
                                   const float* weights) {
    char path[4096];
    TrainState s;
    run_state_fill(run, &s, num_parameters);
    s.weights = weights;
    dataloader_state_save(&run->train_loader, run->loader_blob);
    checkpoint_path(path, sizeof(path), run->cfg.output_dir, "state", run->step);
    state_write(path, &s, m, v, run->loader_blob, dataloader_state_size(&run->train_loader));
}

// after the trainer wrote this step's files (rank 0): the DONE marker that makes them a checkpoint, then -nk
static inline void run_state_commit(const TrainRun* run) {
    if (!run->rank0) { return; }
    checkpoint_write_done(run->cfg.output_dir, run->step);
    checkpoint_prune(run->cfg.output_dir, run->cfg.ckpt_keep);
    printf("checkpoint: step %d written to %s\n", run->step, run->cfg.output_dir);
}

#endif // LLMC_RUN_STATE_H
