/*
 * llmc/config.h — a run's configuration: one TrainConfig field per command-line flag, the flag table
 * both trainers parse, usage, the checks between flags, and the two path decisions made from flags (the
 * output dir, the val shards beside -i). A trainer adds its own flags, and any feature's (each a table of
 * rows into its own config struct), through a TrainCli; nothing here knows a model, a device or a feature.
 */
#ifndef LLMC_CONFIG_H
#define LLMC_CONFIG_H

#include <errno.h>
#include <glob.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "llmc/utils.h"
#include "llmc/args.h"
#include "llmc/schedulers.h"

#define ADAM_BETA1 0.9f              // --beta1 default
#define ADAM_BETA2 0.95f             // llm.c's beta2 (chosen at 524,288 tokens per step): --beta2 -1's above
#define ADAM_BETA2_SMALL 0.99f       // --beta2 -1's (the default) at up to ADAM_BETA2_SMALL_TOKENS tokens per step
#define ADAM_BETA2_SMALL_TOKENS 4096
#define ADAM_EPS 1e-8f
#define TRAIN_MAX_BT (1 << 24)       // B*T per micro batch: int token offsets stay far from overflow
#define TRAIN_MAX_B 65535            // B: the CUDA kernels' grid dimension y
enum { PRECISION_AUTO, PRECISION_FP32, PRECISION_BF16 };  // --precision's choices, in this order
enum { ROWS_CONTIGUOUS, ROWS_RANDOM };                     // --rows' choices, in this order

// ----------------------------------------------------------------------------
// configuration: one field per flag; the GPU-only fields are simply not in the CPU trainer's table

typedef struct {
    const char* train_pattern; // -i
    const char* val_pattern;   // -j (NULL: beside -i, see config_val_pattern)
    const char* init;          // -e: model file, or dN
    const char* output_dir;    // -o (NULL: no logs, no checkpoints)
    int B;                     // -b (per process)
    int T;                     // -t
    int total_batch;           // -d tokens per step over all processes (-1: B*T*processes)
    int rows;                  // --rows: ROWS_CONTIGUOUS (llm.c's layout) or ROWS_RANDOM
    int max_steps;             // -x (-1: one epoch, 0: no training, generate only)
    float lr;                  // -l peak learning rate
    int warmup;                // -u
    float final_frac;          // -q
    const char* schedule;      // -k
    float weight_decay;        // -c
    float beta1;               // --beta1 AdamW
    float beta2;               // --beta2 (-1: config_beta2_auto's, resolved once the tokens per step are known)
    float grad_clip;           // --grad-clip: the gradients' global norm is clipped to this
    float ema;                 // --ema: decay of the weights' EMA, evaluated and kept (0: off; llmc/average.h)
    int val_every;             // -v (0: off)
    int val_batches;           // -m (-1: all)
    int sample_every;          // -s (0: off)
    int sample_tokens;         // -g
    int ckpt_every;            // -n (0: off)
    int ckpt_keep;             // -nk (0: all)
    int resume;                // -y
    int allow_changed;         // --allow-changed
    int overfit;               // -a
    long long seed;            // --seed
    const char* tokenizer;     // --tokenizer
    const char* prompt;        // --prompt (NULL: samples start from EOT alone)
    const char* vocab_dir;     // --vocab
    float temperature;         // --temperature
    int top_k;                 // --top-k (0: off)
    // train_gpt2.c only
    int precision;             // --precision: PRECISION_AUTO, PRECISION_FP32 or PRECISION_BF16 (the matmuls)
    // train_gpt2.cu only
    int recompute;             // -r
    int zero_stage;            // -z
    int num_processes;         // -pn
    int process_rank;          // -pr
    int gpus_per_node;         // -pg
    const char* init_method;   // -pi
    const char* fs_path;       // -pf
    const char* server_ip;     // -ps
} TrainConfig;

// --beta2 -1, the default: AdamW's second-moment decay follows the tokens per step. llm.c's 0.95 was chosen
// for half a million tokens per step; a small step's gradient is noisier, and on the development corpus a
// longer memory of its squares trained lower at every LR at 1,024 and 4,096 tokens per step, while at 8,192 and
// 16,384 llm.c's value ended lower at the best LR (docs/suite.md, "The β2 default").
static inline float config_beta2_auto(double tokens_per_step) {
    return tokens_per_step <= ADAM_BETA2_SMALL_TOKENS ? ADAM_BETA2_SMALL : ADAM_BETA2;
}

static inline TrainConfig config_default(void) {
    TrainConfig c;
    memset(&c, 0, sizeof(c));
    c.train_pattern = "data/default/train_*.bin";
    c.val_pattern = NULL;
    c.init = "d6";
    c.output_dir = NULL;
    c.B = 4;
    c.T = 64;
    c.total_batch = -1;
    c.rows = ROWS_RANDOM;
    c.max_steps = -1;
    c.lr = 3e-4f;
    c.beta1 = ADAM_BETA1;
    c.beta2 = -1.0f;
    c.grad_clip = 1.0f;
    c.final_frac = 1.0f;
    c.schedule = "cosine";
    c.val_every = 20;
    c.val_batches = 20;
    c.sample_every = 20;
    c.sample_tokens = 64;
    c.seed = 1337;
    c.tokenizer = NULL;  // unset: found by vocab_resolve (llmc/vocab.h) once the model's vocabulary is known
    c.vocab_dir = NULL;
    c.temperature = 1.0f;
    c.recompute = 1;
    c.num_processes = 1;
    c.gpus_per_node = 8;
#ifdef USE_MPI
    c.init_method = "mpi";
#else
    c.init_method = "fs";
#endif
    c.fs_path = "/tmp";
    c.server_ip = "127.0.0.1";
    return c;
}

static const ArgSpec TRAIN_ARGS[] = {
    ARG("-i", ARG_STR, TrainConfig, train_pattern, 0, 0, 0, "train data shards (glob)"),
    ARG("-j", ARG_STR, TrainConfig, val_pattern, 0, 0, 0, "val data shards (glob; unset: the val_* shards beside -i's train_*, if any)"),
    ARG_FIXED("-e", ARG_STR, TrainConfig, init, 0, 0, 0, "init: llm.c model file (v3 fp32), or dN = random init, depth N (C=64N, N heads)"),
    ARG("-o", ARG_STR, TrainConfig, output_dir, 0, 0, 0, "output dir, created with its parents: main.log, metrics.jsonl, summary.json, checkpoints"),
    ARG("-b", ARG_INT, TrainConfig, B, 1, TRAIN_MAX_B, 0, "micro batch size B (per process)"),
    ARG("-t", ARG_INT, TrainConfig, T, 1, 1 << 20, 0, "sequence length T (at most the model's max, 1024 for dN)"),
    ARG("-d", ARG_INT, TrainConfig, total_batch, 1, 1 << 30, 1, "total batch in tokens per step, all processes (multiple of B*T*processes; -1: B*T*processes)"),
    {"--rows", ARG_CHOICE, offsetof(TrainConfig, rows), 0, 0, 0,
     "a micro batch's rows: random = each row (T+1 tokens) from its own place, a permutation of all of them per "
     "epoch; contiguous = llm.c's B*T consecutive tokens", "contiguous|random", NULL, 1},
    ARG_FIXED("-x", ARG_INT, TrainConfig, max_steps, 0, 1 << 30, 1, "number of steps (-1: one epoch of the train data; 0: no training, generate -g tokens)"),
    ARG_FIXED("-l", ARG_FLOAT, TrainConfig, lr, 0, 1e3, 0, "peak learning rate"),
    ARG_FIXED("-u", ARG_INT, TrainConfig, warmup, 0, 1 << 30, 0, "warm-up steps"),
    ARG_FIXED("-q", ARG_FLOAT, TrainConfig, final_frac, 0, 1, 0, "final learning rate as a fraction of the peak"),
    ARG_FIXED("-k", ARG_STR, TrainConfig, schedule, 0, 0, 0, "learning rate schedule: cosine | linear | constant | wsd"),
    ARG("-c", ARG_FLOAT, TrainConfig, weight_decay, 0, 1e3, 0, "weight decay (2-D weights only)"),
    ARG_FIXED("--beta1", ARG_FLOAT, TrainConfig, beta1, 0, 0.99999, 0, "AdamW beta1 (first-moment decay)"),
    ARG_FIXED("--beta2", ARG_FLOAT, TrainConfig, beta2, 0, 0.99999, 1, "AdamW beta2 (second-moment decay; -1: 0.99 at up to 4,096 tokens per step, llm.c's 0.95 above)"),
    ARG_FIXED("--grad-clip", ARG_FLOAT, TrainConfig, grad_clip, 1e-6, 1e9, 0, "clip the gradients' global norm to this"),
    ARG_FIXED("--ema", ARG_FLOAT, TrainConfig, ema, 0, 0.99999, 0, "keep an EMA of the weights with this decay per update (bias-corrected): val loss at it beside the weights', and it is the model written (0: off)"),
    ARG("-v", ARG_INT, TrainConfig, val_every, 0, 1 << 30, 0, "val loss every N steps (0: off)"),
    ARG("-m", ARG_INT, TrainConfig, val_batches, 1, 1 << 30, 1, "val batches per evaluation (-1: all)"),
    ARG("-s", ARG_INT, TrainConfig, sample_every, 0, 1 << 30, 0, "sample text every N steps and after the last (0: off)"),
    ARG("-g", ARG_INT, TrainConfig, sample_tokens, 1, 1 << 20, 0, "tokens per sample (past T, the model sees the last T)"),
    ARG("-n", ARG_INT, TrainConfig, ckpt_every, 0, 1 << 30, 0, "checkpoint every N steps and at the end (0: off; needs -o)"),
    ARG("-nk", ARG_INT, TrainConfig, ckpt_keep, 0, 1 << 30, 0, "keep only the last K checkpoints (0: all)"),
    ARG("-y", ARG_INT, TrainConfig, resume, 0, 1, 0, "resume from the latest complete checkpoint in -o (0|1)"),
    ARG("--allow-changed", ARG_INT, TrainConfig, allow_changed, 0, 1, 0, "resume even if a flag fixed on resume differs from the checkpoint's (0|1)"),
    ARG("-a", ARG_INT, TrainConfig, overfit, 0, 1, 0, "overfit a single batch (0|1)"),
    ARG("--seed", ARG_I64, TrainConfig, seed, 0, 9.2e18, 0, "seed of the random init, data order and sampling"),
    ARG("--tokenizer", ARG_STR, TrainConfig, tokenizer, 0, 0, 0, "tokenizer for decoding samples and bits per byte (unset: --vocab's tokenizer.bin, else data/gpt2_tokenizer.bin; missing or another size than the model's: print ids)"),
    ARG("--prompt", ARG_STR, TrainConfig, prompt, 0, 0, 0, "text the samples continue (encoded with --vocab's BPE)"),
    ARG("--vocab", ARG_STR, TrainConfig, vocab_dir, 0, 0, 0, "the model's vocabulary dir (encoder.json, vocab.bpe) for --prompt and samples (unset: the one the model's run recorded beside it, else vocab/ beside -i's shards, else data/gpt2; it must have the model's size)"),
    ARG("--temperature", ARG_FLOAT, TrainConfig, temperature, 1e-3, 100, 0, "sampling temperature"),
    ARG("--top-k", ARG_INT, TrainConfig, top_k, 0, 1 << 24, 0, "sample from the k most likely tokens only (0: all)"),
};
#define NUM_TRAIN_ARGS ((int)(sizeof(TRAIN_ARGS) / sizeof(TRAIN_ARGS[0])))

// a table of flags beside the shared one: the trainer's own (config NULL: rows into TrainConfig) or a
// feature's (rows into its own config struct, which the parse first resets to its defaults)
typedef struct {
    const ArgSpec* args;
    int num_args;
    void* config;              // the struct the rows point into; NULL: the TrainConfig parsed
    const void* defaults;      // that struct's defaults (usage text, the parse's start); NULL with config NULL
    size_t size;               // sizeof of that struct
    void (*check)(const void* config);  // the checks between the table's flags, after the parse, or NULL
    int first_row_enables;     // the first row (an int) turns the feature on; while off, the start-up table
                               // shows that row alone
    int (*shown)(const void* table);  // the start-up table shows the rows only while this says so (NULL: always):
                                      // a feature's option whose flags matter only when it is chosen
    void (*usage)(FILE* out);  // more lines for the usage text after the rows (a feature's choices), or NULL
} ArgTable;

// what a trainer adds to the command line: its name, its own flags and any feature's, its examples
typedef struct {
    const char* program;       // "./train_gpt2"
    const char* about;         // the usage line's tail
    const ArgTable* const* tables;  // flags beyond TRAIN_ARGS, table by table (may be NULL)
    int num_tables;
    const char* example;       // usage lines after the flags
} TrainCli;

// the struct a table's rows point into, for the TrainConfig c being parsed
static inline void* config_table_target(const ArgTable* t, TrainConfig* c) { return t->config != NULL ? t->config : c; }

static inline void config_print_usage(FILE* out, const TrainCli* cli) {
    TrainConfig d = config_default();
    fprintf(out, "usage: %s [options]   (%s; llm.c's flags)\n", cli->program, cli->about);
    arg_print_usage(out, TRAIN_ARGS, NUM_TRAIN_ARGS, &d);
    for (int k = 0; k < cli->num_tables; k++) {
        const ArgTable* t = cli->tables[k];
        arg_print_usage(out, t->args, t->num_args, t->config != NULL ? t->defaults : (const void*)&d);
        if (t->usage != NULL) { t->usage(out); }
    }
    fprintf(out, "  %-30s this text\n", "-h, --help");
    fprintf(out, "%s", cli->example);
}

static inline int config_file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

// fills c from the command line, or exits 1 with one line naming the flag and the problem
static inline void config_parse(TrainConfig* c, int argc, char** argv, const TrainCli* cli) {
    *c = config_default();
    for (int k = 0; k < cli->num_tables; k++) {
        const ArgTable* t = cli->tables[k];
        if (t->config != NULL) { memcpy(t->config, t->defaults, t->size); }
    }
    for (int i = 1; i < argc; i++) {
        const char* flag = argv[i];
        if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) { config_print_usage(stdout, cli); exit(EXIT_SUCCESS); }
        if (arg_parse_one(c, TRAIN_ARGS, NUM_TRAIN_ARGS, argc, argv, &i)) { continue; }
        int found = 0;
        for (int k = 0; k < cli->num_tables && !found; k++) {
            const ArgTable* t = cli->tables[k];
            found = arg_parse_one(config_table_target(t, c), t->args, t->num_args, argc, argv, &i);
        }
        if (found) { continue; }
        fatal("unknown flag '%s' (%s -h lists the flags)", flag, cli->program);
    }
    LRScheduleKind kind;
    if (lr_schedule_parse(c->schedule, &kind) != 0) {
        fatal("flag -k: expected cosine, linear, constant or wsd, got '%s'", c->schedule);
    }
    if (c->resume && c->output_dir == NULL) { fatal("flag -y: resuming needs the checkpoint dir (-o)"); }
    for (int k = 0; k < cli->num_tables; k++) {
        const ArgTable* t = cli->tables[k];
        if (t->check != NULL) { t->check(config_table_target(t, c)); }
    }
    if (c->ckpt_every > 0 && c->output_dir == NULL) { fatal("flag -n: checkpoints need an output dir (-o)"); }
    if ((long long)c->B * c->T > TRAIN_MAX_BT) {
        fatal("flag -b: B*T = %lld tokens per micro batch is more than the trainers support (%d)",
              (long long)c->B * c->T, TRAIN_MAX_BT);
    }
    if (c->total_batch != -1 && c->total_batch % (c->B * c->T * c->num_processes) != 0) {
        fatal("flag -d: total batch %d is not a multiple of B*T*processes = %d", c->total_batch,
              c->B * c->T * c->num_processes);
    }
}

// ----------------------------------------------------------------------------
// the resume record: every row marked fixed on resume (ARG_FIXED), of every table, as one "flag value" line
// (floats with every bit). A checkpoint keeps it (llmc/run_state.h); a resume compares it row by row.

// calls fn(row, the struct it points into, arg) for every fixed row of TRAIN_ARGS and the trainer's tables
static inline void config_each_fixed(const TrainConfig* c, const TrainCli* cli,
                                     void (*fn)(const ArgSpec* row, const void* values, void* arg), void* arg) {
    for (int i = 0; i < NUM_TRAIN_ARGS; i++) {
        if (TRAIN_ARGS[i].fixed) { fn(&TRAIN_ARGS[i], c, arg); }
    }
    for (int k = 0; cli != NULL && k < cli->num_tables; k++) {
        const ArgTable* t = cli->tables[k];
        for (int i = 0; i < t->num_args; i++) {
            if (t->args[i].fixed) { fn(&t->args[i], t->config != NULL ? t->config : (const void*)c, arg); }
        }
    }
}

typedef struct { char* out; size_t size, pos; } ConfigRecord;

static inline void config_record_row(const ArgSpec* row, const void* values, void* arg) {
    ConfigRecord* r = (ConfigRecord*)arg;
    char v[4096];
    arg_format_exact(v, sizeof(v), values, row);
    int n = snprintf(r->out + r->pos, r->size - r->pos, "%s %s\n", row->flag, v);
    if (n < 0 || (size_t)n >= r->size - r->pos) { fatal("flag %s: the resume record is full", row->flag); }
    r->pos += (size_t)n;
}

// the record of the run's fixed flags into out (size bytes, NUL-terminated)
static inline void config_fixed_record(const TrainConfig* c, const TrainCli* cli, char* out, size_t size) {
    ConfigRecord r = {out, size, 0};
    out[0] = '\0';
    config_each_fixed(c, cli, config_record_row, &r);
}

// the value of `flag` in a record into out; 0 when the record has no line for it
static inline int config_record_value(const char* record, const char* flag, char* out, size_t size) {
    size_t n = strlen(flag);
    for (const char* line = record; line != NULL && *line != '\0';) {
        const char* end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
        if (len > n && strncmp(line, flag, n) == 0 && line[n] == ' ') {
            snprintf(out, size, "%.*s", (int)(len - n - 1), line + n + 1);
            return 1;
        }
        line = end != NULL ? end + 1 : NULL;
    }
    return 0;
}

typedef struct { const char* record; const char* path; } ConfigCheck;

static inline void config_check_row(const ArgSpec* row, const void* values, void* arg) {
    const ConfigCheck* k = (const ConfigCheck*)arg;
    char now[4096], then[4096];
    arg_format_exact(now, sizeof(now), values, row);
    if (!config_record_value(k->record, row->flag, then, sizeof(then)) || strcmp(now, then) == 0) { return; }
    if (row->type == ARG_FLOAT) {  // both as the usage text shows numbers
        snprintf(then, sizeof(then), "%g", strtod(then, NULL));
        arg_format_value(now, sizeof(now), values, row);
    }
    fatal("flag %s: %s differs from the checkpoint's %s (%s); resume with the run's flags, or add --allow-changed 1",
          row->flag, now, then, k->path);
}

// A resume with another value of a flag fixed on resume would silently change the run: refused with one line
// naming the first such flag and both values, unless --allow-changed 1. A flag the record lacks (a checkpoint
// from before the flag was recorded) is not compared.
static inline void config_check_fixed(const TrainConfig* c, const TrainCli* cli, const char* record, const char* path) {
    if (c->allow_changed) { return; }
    ConfigCheck k = {record, path};
    config_each_fixed(c, cli, config_check_row, &k);
}

// mkdir -p: creates dir and its missing parents, or exits naming the one that cannot be made
static inline void config_make_dirs(const char* dir) {
    char path[4096];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path)) { fatal("%s: output dir path too long", dir); }
    for (char* p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') { continue; }
        char c = *p;
        *p = '\0';
        struct stat st;
        if (mkdir(path, 0755) != 0 && errno != EEXIST) { fatal("%s: cannot create output dir (%s)", path, strerror(errno)); }
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) { fatal("%s: cannot create output dir (not a directory)", path); }
        *p = c;
        if (c == '\0') { break; }
    }
}

// -j unset: the val shards beside the train shards (dir/train_*.bin -> dir/val_*.bin), when they
// exist; else NULL (val off). Writes into buf.
static inline const char* config_val_pattern(const TrainConfig* c, char* buf, size_t size) {
    if (c->val_pattern != NULL) { return c->val_pattern; }
    const char* slash = strrchr(c->train_pattern, '/');
    const char* base = slash != NULL ? slash + 1 : c->train_pattern;
    const char* hit = strstr(base, "train");
    if (hit == NULL) { return NULL; }
    int n = snprintf(buf, size, "%.*sval%s", (int)(hit - c->train_pattern), c->train_pattern, hit + 5);
    if (n < 0 || (size_t)n >= size) { return NULL; }
    glob_t g;
    int found = glob(buf, 0, NULL, &g) == 0 && g.gl_pathc > 0;
    globfree(&g);
    return found ? buf : NULL;
}


#endif // LLMC_CONFIG_H
