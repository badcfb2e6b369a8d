/*
 * llmc/report.h — what a run tells its user besides the per-step lines: the start-up table (every flag
 * with its value, the model, the run, and the trainer's own rows) and, at the end, summary.json and the
 * closing lines.
 */
#ifndef LLMC_REPORT_H
#define LLMC_REPORT_H

#include <math.h>
#include <stdio.h>
#include "llmc/config.h"
#include "llmc/checkpoint.h"
#include "llmc/run.h"

#define REPORT_LINE "+----------------------+----------------------------------------------------+\n"

static inline void report_row(const char* name, const char* value) { printf("| %-20s | %-50s |\n", name, value); }

static inline void report_flag_rows(const void* cfg, const ArgSpec* specs, int n) {
    for (int i = 0; i < n; i++) {
        char v[256];
        arg_format_value(v, sizeof(v), cfg, &specs[i]);
        report_row(specs[i].flag, v);
    }
}

// the start-up table, first part: the flags, the model and the run. The trainer adds its own rows
// (report_row), then report_config_end closes the table.
static inline void report_config_begin(const TrainRun* run, const TrainCli* cli, const GPT2Config* c,
                                       size_t num_parameters) {
    char v[256];
    printf("%s", REPORT_LINE);
    report_row("Parameter", "Value");
    printf("%s", REPORT_LINE);
    report_flag_rows(&run->cfg, TRAIN_ARGS, NUM_TRAIN_ARGS);
    for (int k = 0; k < cli->num_tables; k++) {
        const ArgTable* t = cli->tables[k];
        const void* values = t->config != NULL ? t->config : (const void*)&run->cfg;
        if (t->shown != NULL && !t->shown(t)) { continue; }
        int on = !t->first_row_enables || *(const int*)((const char*)values + t->args[0].offset);
        report_flag_rows(values, t->args, on ? t->num_args : (t->num_args > 0 ? 1 : 0));
    }
    printf("%s", REPORT_LINE);
    const char* names[] = {"max_seq_len", "vocab_size", "padded_vocab_size", "num_layers", "num_heads", "channels"};
    int values[] = {c->max_seq_len, c->vocab_size, c->padded_vocab_size, c->num_layers, c->num_heads, c->channels};
    for (int i = 0; i < 6; i++) { snprintf(v, sizeof(v), "%d", values[i]); report_row(names[i], v); }
    snprintf(v, sizeof(v), "%zu", num_parameters); report_row("num_parameters", v);
    if (run->cfg.max_steps != 0) {
        snprintf(v, sizeof(v), "%zu", run->train_loader.total_batches); report_row("train batches/epoch", v);
        snprintf(v, sizeof(v), "%zu", run->has_val ? run->val_loader.total_batches : 0); report_row("val batches", v);
        snprintf(v, sizeof(v), "%d", run->grad_accum); report_row("grad accumulation", v);
        if (run->beta2_auto != 0) {  // what chose --beta2 -1's value: the tokens per step, or the checkpoint
            if (run->beta2_auto == 1) { snprintf(v, sizeof(v), "%g: %.0f tokens per step", run->cfg.beta2, run_tokens_per_step(run)); }
            else { snprintf(v, sizeof(v), "%g: the checkpoint's", run->cfg.beta2); }
            report_row("beta2 (-1)", v);
        }
        snprintf(v, sizeof(v), "%d", run->total_steps); report_row("steps", v);
    }
}

static inline void report_config_end(int resume_step) {
    char v[64];
    if (resume_step >= 0) { snprintf(v, sizeof(v), "%d", resume_step); report_row("resumed from step", v); }
    printf("%s", REPORT_LINE);
}

// summary.json; extra: more "key": value pairs of the trainer and its features (each with a leading ", "),
// or "". Sized from its parts, once at the end of a run: a long vocabulary path or a long extra is written
// whole, never cut into invalid JSON.
static inline void report_summary(TrainRun* run, const char* extra) {
    char val[64];
    if (run->last_val_loss >= 0.0f) { snprintf(val, sizeof(val), "%.9g", run->last_val_loss); } else { snprintf(val, sizeof(val), "null"); }
    char gns[64] = "null", bpb[64] = "null";
    if (run->last_val_loss >= 0.0f && isfinite(run_val_bpb(run, run->last_val_loss))) {
        snprintf(bpb, sizeof(bpb), "%.9g", run_val_bpb(run, run->last_val_loss));
    }
    if (isfinite(run_gns(run))) { snprintf(gns, sizeof(gns), "%.6g", run_gns(run)); }
    char kept[256] = "";  // the kept weights' final numbers, where a run keeps them apart (llmc/average.h)
    if (run->kept_label != NULL) {
        char kv[64] = "null", kb[64] = "null";
        if (run->last_val_kept >= 0.0f) { snprintf(kv, sizeof(kv), "%.9g", run->last_val_kept); }
        if (run->last_val_kept >= 0.0f && isfinite(run_val_bpb(run, run->last_val_kept))) {
            snprintf(kb, sizeof(kb), "%.9g", run_val_bpb(run, run->last_val_kept));
        }
        snprintf(kept, sizeof(kept), ", \"val_loss_%s\": %s, \"val_bpb_%s\": %s", run->kept_label, kv, run->kept_label, kb);
    }
    // the vocabulary it trained with (llmc/vocab.h), a JSON string: each byte at most two
    const char* vdir = run->cfg.vocab_dir;
    char* vocab = (char*)mallocCheck(vdir != NULL ? 2 * strlen(vdir) + 3 : 5);
    if (vdir != NULL) {
        size_t k = 0;
        vocab[k++] = '"';
        for (const char* p = vdir; *p != '\0'; p++) {
            if (*p == '"' || *p == '\\') { vocab[k++] = '\\'; }
            vocab[k++] = (unsigned char)*p < 0x20 ? '?' : *p;
        }
        vocab[k++] = '"';
        vocab[k] = '\0';
    } else {
        strcpy(vocab, "null");
    }
    const char* fmt = "\"steps\": %d, \"train_time_s\": %.6f, \"val_loss\": %s, \"val_bpb\": %s%s, \"train_loss\": %.9g, "
                      "\"backward\": %llu, \"tokens\": %llu, \"gradient_noise_scale\": %s, \"vocab\": %s%s";
    int n = snprintf(NULL, 0, fmt, run->step, run->train_time_s, val, bpb, kept, run->last_train_loss,
                     (unsigned long long)run->backward, (unsigned long long)run->tokens, gns, vocab, extra);
    char* body = (char*)mallocCheck((size_t)n + 1);
    snprintf(body, (size_t)n + 1, fmt, run->step, run->train_time_s, val, bpb, kept, run->last_train_loss,
             (unsigned long long)run->backward, (unsigned long long)run->tokens, gns, vocab, extra);
    logger_write_summary(&run->logger, body);
    free(body);
    free(vocab);
    printf("done: %d steps, %.2f s training time, %llu backward passes\n", run->step, run->train_time_s,
           (unsigned long long)run->backward);
    if (isfinite(run_gns(run))) {
        printf("gradient noise scale over the second half of the run: %.0f tokens (%d tokens per step)\n", run_gns(run),
               run->grad_accum * run->num_processes * run->cfg.B * run->cfg.T);
    }
}

#endif // LLMC_REPORT_H
