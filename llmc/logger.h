/*
 * llmc/logger.h — the run's logs in the output dir:
 *   main.log       llm.c's format: "s:%d trl:%.4f lr:%.6f norm:%.2f" per step, "s:%d tel:%.4f" per eval
 *   metrics.jsonl  one JSON object per step (docs/formats.md), losses at full precision (%.9g)
 *   summary.json   written once at the end
 * Lines are flushed as written, so a killed run keeps every finished step. On resume, lines past the
 * resumed step are dropped first, so the logs of a resumed run equal those of an uninterrupted one.
 */
#ifndef LLMC_LOGGER_H
#define LLMC_LOGGER_H

#include <math.h>
#include <stdint.h>
#include "llmc/utils.h"

typedef struct {
    int active;            // 0 when there is no output dir: every call is a no-op
    FILE* main_log;
    FILE* metrics;
    char dir[4000];
} Logger;

// one step's numbers for metrics.jsonl; fields a step did not compute are flagged off
typedef struct {
    int step;               // 1-based
    const char* phase;      // "full", "warmup", "predict", "correct"
    int has_loss;  double loss;
    int has_val;   double val_loss, val_bpb; // val_bpb: NAN when unknown
    const char* kept_label; double val_loss_kept, val_bpb_kept; // at the kept weights (llmc/average.h) as
                            // val_loss_<label>, val_bpb_<label>; kept_label NULL: not evaluated
    double lr;
    int has_norm;  double grad_norm;
    int has_gns;   double grad_norm_micro1, gns; // first micro batch's gradient norm, noise scale (tokens)
    double ms;              // wall ms of the step's training work
    double train_time_s;    // cumulative
    uint64_t tokens;        // cumulative
    uint64_t backward;      // cumulative
    int skipped;            // update skipped (NaN/Inf loss or grad norm)
    const char* extra;      // extra "key": value pairs (no braces, no leading comma), or NULL
} StepMetrics;

static inline void logger_path(char* out, size_t size, const char* dir, const char* name) {
    int n = snprintf(out, size, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= size) { fatal("%s: output path too long", dir); }
}

// keeps the lines of `path` whose step (parsed by `step_of`) is <= last_step; atomic rewrite
static inline void logger_truncate_file(const char* path, int last_step, int (*step_of)(const char* line)) {
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { return; }
    size_t size = file_size_check(fp, path);
    char* text = (char*)mallocCheck(size + 1);
    if (size > 0) { freadCheck(text, 1, size, fp, path); }
    text[size] = '\0';
    fcloseCheck(fp, path);
    AtomicFile af;
    atomic_open(&af, path);
    char* line = text;
    while (line < text + size) {
        char* nl = strchr(line, '\n');
        size_t len = nl != NULL ? (size_t)(nl - line) + 1 : strlen(line);
        char saved = line[len - 1];
        line[len - 1] = '\0';
        int keep = step_of(line) <= last_step && nl != NULL;  // a line without newline was cut by a kill
        line[len - 1] = saved;
        if (keep) { atomic_write(&af, line, 1, len); }
        line += len;
    }
    atomic_commit(&af);
    free(text);
}

static inline int main_log_step(const char* line) {
    int s;
    return sscanf(line, "s:%d", &s) == 1 ? s : INT32_MAX;
}

static inline int metrics_step(const char* line) {
    const char* p = strstr(line, "\"step\":");
    int s;
    return (p != NULL && sscanf(p + 7, "%d", &s) == 1) ? s : INT32_MAX;
}

// opens the logs in dir (NULL: logging off). resume_step >= 0: keep lines up to it and append;
// resume_step < 0: start fresh.
static inline void logger_init(Logger* logger, const char* dir, int resume_step) {
    memset(logger, 0, sizeof(*logger));
    if (dir == NULL) { return; }
    logger->active = 1;
    snprintf(logger->dir, sizeof(logger->dir), "%s", dir);
    char path[4096];
    logger_path(path, sizeof(path), dir, "main.log");
    if (resume_step >= 0) { logger_truncate_file(path, resume_step, main_log_step); }
    logger->main_log = fopenCheck(path, resume_step >= 0 ? "ab" : "wb");
    logger_path(path, sizeof(path), dir, "metrics.jsonl");
    if (resume_step >= 0) { logger_truncate_file(path, resume_step, metrics_step); }
    logger->metrics = fopenCheck(path, resume_step >= 0 ? "ab" : "wb");
}

static inline void logger_flush(Logger* logger, FILE* fp, const char* name) {
    if (fflush(fp) != 0) { fatal("%s/%s: write failed (%s)", logger->dir, name, strerror(errno)); }
}

// JSON has no NaN/Inf: a non-finite number is written as null
static inline void json_number(FILE* fp, const char* key, double x) {
    if (isfinite(x)) { fprintf(fp, ", \"%s\": %.9g", key, x); } else { fprintf(fp, ", \"%s\": null", key); }
}

// the initial validation loss, before any update (step 0, phase "init")
// (val_bpb: NAN when unknown, then left out)
static inline void logger_log_init_val(Logger* logger, double val_loss, double val_bpb) {
    if (!logger->active) { return; }
    fprintf(logger->main_log, "s:0 tel:%.4f\n", val_loss);
    logger_flush(logger, logger->main_log, "main.log");
    fprintf(logger->metrics, "{\"step\": 0, \"phase\": \"init\"");
    json_number(logger->metrics, "val_loss", val_loss);
    if (isfinite(val_bpb)) { json_number(logger->metrics, "val_bpb", val_bpb); }
    fprintf(logger->metrics, "}\n");
    logger_flush(logger, logger->metrics, "metrics.jsonl");
}

static inline void logger_log_step(Logger* logger, const StepMetrics* m) {
    if (!logger->active) { return; }
    if (m->has_loss) {
        fprintf(logger->main_log, "s:%d trl:%.4f lr:%.6f norm:%.2f\n", m->step, m->loss, m->lr,
                m->has_norm ? m->grad_norm : 0.0);
    }
    if (m->has_val) { fprintf(logger->main_log, "s:%d tel:%.4f\n", m->step, m->val_loss); }
    logger_flush(logger, logger->main_log, "main.log");
    FILE* fp = logger->metrics;
    fprintf(fp, "{\"step\": %d, \"phase\": \"%s\"", m->step, m->phase);
    if (m->has_loss) { json_number(fp, "loss", m->loss); } else { fprintf(fp, ", \"loss\": null"); }
    if (m->has_val) { json_number(fp, "val_loss", m->val_loss); }
    if (m->has_val && isfinite(m->val_bpb)) { json_number(fp, "val_bpb", m->val_bpb); }
    if (m->kept_label != NULL) {
        char key[64];
        snprintf(key, sizeof(key), "val_loss_%s", m->kept_label);
        json_number(fp, key, m->val_loss_kept);
        snprintf(key, sizeof(key), "val_bpb_%s", m->kept_label);
        if (isfinite(m->val_bpb_kept)) { json_number(fp, key, m->val_bpb_kept); }
    }
    json_number(fp, "lr", m->lr);
    if (m->has_norm) { json_number(fp, "grad_norm", m->grad_norm); } else { fprintf(fp, ", \"grad_norm\": null"); }
    if (m->has_gns) { json_number(fp, "grad_norm_micro1", m->grad_norm_micro1); json_number(fp, "gns", m->gns); }
    json_number(fp, "ms", m->ms);
    json_number(fp, "train_time_s", m->train_time_s);
    fprintf(fp, ", \"tokens\": %llu, \"backward\": %llu", (unsigned long long)m->tokens,
            (unsigned long long)m->backward);
    if (m->skipped) { fprintf(fp, ", \"skipped\": true"); }
    if (m->extra != NULL && m->extra[0] != '\0') { fprintf(fp, ", %s", m->extra); }
    fprintf(fp, "}\n");
    logger_flush(logger, fp, "metrics.jsonl");
}

// summary.json: `body` is the object's content ("key": value pairs), written atomically
static inline void logger_write_summary(Logger* logger, const char* body) {
    if (!logger->active) { return; }
    char path[4096];
    logger_path(path, sizeof(path), logger->dir, "summary.json");
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, "{", 1, 1);
    atomic_write(&af, body, 1, strlen(body));
    atomic_write(&af, "}\n", 1, 2);
    atomic_commit(&af);
}

static inline void logger_free(Logger* logger) {
    if (!logger->active) { return; }
    fcloseCheck(logger->main_log, "main.log");
    fcloseCheck(logger->metrics, "metrics.jsonl");
    logger->active = 0;
}

#endif // LLMC_LOGGER_H
