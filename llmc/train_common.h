/*
 * llmc/train_common.h — everything train_gpt2.c (CPU) and train_gpt2.cu (CUDA) share: the run
 * configuration and its flag table (with hybrid/hybrid.h's flags), usage, validation, the config
 * table, the data/schedule/log set-up, the training loop around a step, evaluation, sampling and
 * generation, checkpoint and resume decisions, signals, the resume hint and the run summary.
 * A trainer keeps the backend: model, forward, backward, update, device memory. It embeds the
 * shared fields (TRAIN_RUN_FIELDS) at the top of its Trainer and plugs in through a TrainBackend,
 * a handful of function pointers, so the orchestration below is written once.
 */
#ifndef LLMC_TRAIN_COMMON_H
#define LLMC_TRAIN_COMMON_H

#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include "llmc/utils.h"
#include "llmc/args.h"
#include "llmc/rand.h"
#include "llmc/dataloader.h"
#include "llmc/schedulers.h"
#include "llmc/tokenizer.h"
#include "llmc/checkpoint.h"
#include "llmc/logger.h"
#include "data/bpe.h"
#include "hybrid/hybrid.h"

#define MAX_FAULTS 5                 // consecutive NaN/Inf steps before giving up
#define GRAD_CLIP 1.0f
#define ADAM_BETA1 0.9f
#define ADAM_BETA2 0.95f
#define ADAM_EPS 1e-8f
#define TRAIN_MAX_BT (1 << 24)       // B*T per micro batch: int token offsets stay far from overflow
#define TRAIN_MAX_B 65535            // B: the CUDA kernels' grid dimension y

// ----------------------------------------------------------------------------
// configuration: one field per flag; the GPU-only fields are simply not in the CPU trainer's table

typedef struct {
    const char* train_pattern; // -i
    const char* val_pattern;   // -j (NULL: beside -i, see train_val_pattern)
    const char* init;          // -e: model file, or dN
    const char* output_dir;    // -o (NULL: no logs, no checkpoints)
    int B;                     // -b (per process)
    int T;                     // -t
    int total_batch;           // -d tokens per step over all processes (-1: B*T*processes)
    int max_steps;             // -x (-1: one epoch, 0: no training, generate only)
    float lr;                  // -l peak learning rate
    int warmup;                // -u
    float final_frac;          // -q
    const char* schedule;      // -k
    float weight_decay;        // -c
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
    // train_gpt2.cu only
    int recompute;             // -r
    int zero_stage;            // -z
    int num_processes;         // -pn
    int process_rank;          // -pr
    int gpus_per_node;         // -pg
    const char* init_method;   // -pi
    const char* fs_path;       // -pf
    const char* server_ip;     // -ps
    HybridConfig hybrid;       // --hybrid, --predictor, ... (hybrid/hybrid.h's table)
} TrainConfig;

static inline TrainConfig train_config_default(void) {
    TrainConfig c;
    memset(&c, 0, sizeof(c));
    c.train_pattern = "data/default/train_*.bin";
    c.val_pattern = NULL;
    c.init = "d6";
    c.output_dir = NULL;
    c.B = 4;
    c.T = 64;
    c.total_batch = -1;
    c.max_steps = -1;
    c.lr = 3e-4f;
    c.final_frac = 1.0f;
    c.schedule = "cosine";
    c.val_every = 20;
    c.val_batches = 20;
    c.sample_every = 20;
    c.sample_tokens = 64;
    c.seed = 1337;
    c.tokenizer = "data/gpt2_tokenizer.bin";
    c.vocab_dir = "data/gpt2";
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
    hybrid_config_default(&c.hybrid);
    return c;
}

static const ArgSpec TRAIN_ARGS[] = {
    ARG("-i", ARG_STR, TrainConfig, train_pattern, 0, 0, 0, "train data shards (glob)"),
    ARG("-j", ARG_STR, TrainConfig, val_pattern, 0, 0, 0, "val data shards (glob; unset: the val_* shards beside -i's train_*, if any)"),
    ARG("-e", ARG_STR, TrainConfig, init, 0, 0, 0, "init: llm.c model file (v3 fp32), or dN = random init, depth N (C=64N, N heads)"),
    ARG("-o", ARG_STR, TrainConfig, output_dir, 0, 0, 0, "output dir, created with its parents: main.log, metrics.jsonl, summary.json, checkpoints"),
    ARG("-b", ARG_INT, TrainConfig, B, 1, TRAIN_MAX_B, 0, "micro batch size B (per process)"),
    ARG("-t", ARG_INT, TrainConfig, T, 1, 1 << 20, 0, "sequence length T (at most the model's max, 1024 for dN)"),
    ARG("-d", ARG_INT, TrainConfig, total_batch, 1, 1 << 30, 1, "total batch in tokens per step, all processes (multiple of B*T*processes; -1: B*T*processes)"),
    ARG("-x", ARG_INT, TrainConfig, max_steps, 0, 1 << 30, 1, "number of steps (-1: one epoch of the train data; 0: no training, generate -g tokens)"),
    ARG("-l", ARG_FLOAT, TrainConfig, lr, 0, 1e3, 0, "peak learning rate"),
    ARG("-u", ARG_INT, TrainConfig, warmup, 0, 1 << 30, 0, "warm-up steps"),
    ARG("-q", ARG_FLOAT, TrainConfig, final_frac, 0, 1, 0, "final learning rate as a fraction of the peak"),
    ARG("-k", ARG_STR, TrainConfig, schedule, 0, 0, 0, "learning rate schedule: cosine | linear | constant | wsd"),
    ARG("-c", ARG_FLOAT, TrainConfig, weight_decay, 0, 1e3, 0, "weight decay (2-D weights only)"),
    ARG("-v", ARG_INT, TrainConfig, val_every, 0, 1 << 30, 0, "val loss every N steps (0: off)"),
    ARG("-m", ARG_INT, TrainConfig, val_batches, 1, 1 << 30, 1, "val batches per evaluation (-1: all)"),
    ARG("-s", ARG_INT, TrainConfig, sample_every, 0, 1 << 30, 0, "sample text every N steps and after the last (0: off)"),
    ARG("-g", ARG_INT, TrainConfig, sample_tokens, 1, 1 << 20, 0, "tokens per sample (past T, the model sees the last T)"),
    ARG("-n", ARG_INT, TrainConfig, ckpt_every, 0, 1 << 30, 0, "checkpoint every N steps and at the end (0: off; needs -o)"),
    ARG("-nk", ARG_INT, TrainConfig, ckpt_keep, 0, 1 << 30, 0, "keep only the last K checkpoints (0: all)"),
    ARG("-y", ARG_INT, TrainConfig, resume, 0, 1, 0, "resume from the latest complete checkpoint in -o (0|1)"),
    ARG("--allow-changed", ARG_INT, TrainConfig, allow_changed, 0, 1, 0, "resume even if -x -l -u -q -k -e differ from the checkpoint's (0|1)"),
    ARG("-a", ARG_INT, TrainConfig, overfit, 0, 1, 0, "overfit a single batch (0|1)"),
    ARG("--seed", ARG_I64, TrainConfig, seed, 0, 9.2e18, 0, "seed of the random init, data order and sampling"),
    ARG("--tokenizer", ARG_STR, TrainConfig, tokenizer, 0, 0, 0, "tokenizer for decoding samples (missing: print ids)"),
    ARG("--prompt", ARG_STR, TrainConfig, prompt, 0, 0, 0, "text the samples continue (encoded with --vocab's BPE)"),
    ARG("--vocab", ARG_STR, TrainConfig, vocab_dir, 0, 0, 0, "directory of GPT-2's encoder.json and vocab.bpe, for --prompt"),
    ARG("--temperature", ARG_FLOAT, TrainConfig, temperature, 1e-3, 100, 0, "sampling temperature"),
    ARG("--top-k", ARG_INT, TrainConfig, top_k, 0, 1 << 24, 0, "sample from the k most likely tokens only (0: all)"),
};
#define NUM_TRAIN_ARGS ((int)(sizeof(TRAIN_ARGS) / sizeof(TRAIN_ARGS[0])))

// hybrid/hybrid.h's flag table as rows of this parser's table (fields inside TrainConfig.hybrid)
static inline const ArgSpec* train_hybrid_args(void) {
    static ArgSpec rows[NUM_HYBRID_FLAGS];
    for (int k = 0; k < NUM_HYBRID_FLAGS; k++) {
        const HybridFlag* f = &HYBRID_FLAGS[k];
        ArgSpec a = {f->flag, f->type == HYBRID_FLAG_INT ? ARG_INT : f->type == HYBRID_FLAG_FLOAT ? ARG_FLOAT : ARG_CHOICE,
                     offsetof(TrainConfig, hybrid) + f->offset, f->min, f->max, 0, f->help, f->choices, f->bare};
        rows[k] = a;
    }
    return rows;
}

// what a trainer adds to the command line: its name, its own flags, its checks
typedef struct {
    const char* program;       // "./train_gpt2"
    const char* about;         // the usage line's tail
    const ArgSpec* args;       // the trainer's own flags (may be NULL)
    int num_args;
    const char* example;       // usage lines after the flags
} TrainCli;

static inline void train_print_usage(FILE* out, const TrainCli* cli) {
    TrainConfig d = train_config_default();
    fprintf(out, "usage: %s [options]   (%s; llm.c's flags)\n", cli->program, cli->about);
    arg_print_usage(out, TRAIN_ARGS, NUM_TRAIN_ARGS, &d);
    if (cli->args != NULL) { arg_print_usage(out, cli->args, cli->num_args, &d); }
    arg_print_usage(out, train_hybrid_args(), NUM_HYBRID_FLAGS, &d);
    fprintf(out, "  %-30s this text\n", "-h, --help");
    fprintf(out, "%s", cli->example);
}

// fills c from the command line, or exits 1 with one line naming the flag and the problem
static inline void train_parse_args(TrainConfig* c, int argc, char** argv, const TrainCli* cli) {
    *c = train_config_default();
    for (int i = 1; i < argc; i++) {
        const char* flag = argv[i];
        if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) { train_print_usage(stdout, cli); exit(EXIT_SUCCESS); }
        if (arg_parse_one(c, TRAIN_ARGS, NUM_TRAIN_ARGS, argc, argv, &i)) { continue; }
        if (cli->args != NULL && arg_parse_one(c, cli->args, cli->num_args, argc, argv, &i)) { continue; }
        if (arg_parse_one(c, train_hybrid_args(), NUM_HYBRID_FLAGS, argc, argv, &i)) { continue; }
        fatal("unknown flag '%s' (%s -h lists the flags)", flag, cli->program);
    }
    LRScheduleKind kind;
    if (lr_schedule_parse(c->schedule, &kind) != 0) {
        fatal("flag -k: expected cosine, linear, constant or wsd, got '%s'", c->schedule);
    }
    if (c->resume && c->output_dir == NULL) { fatal("flag -y: resuming needs the checkpoint dir (-o)"); }
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

// mkdir -p: creates dir and its missing parents, or exits naming the one that cannot be made
static inline void train_make_dirs(const char* dir) {
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
static inline const char* train_val_pattern(const TrainConfig* c, char* buf, size_t size) {
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

// ----------------------------------------------------------------------------
// the run: what both trainers keep besides the model. A Trainer starts with these fields, so that
// (TrainRun*)&trainer reaches them.

#define TRAIN_RUN_FIELDS                                                                            \
    TrainConfig cfg;                                                                                \
    int num_processes;                                                                              \
    int rank0;                /* this process prints, logs and writes checkpoints */              \
    DataLoader train_loader;                                                                        \
    DataLoader val_loader;                                                                          \
    int has_val;                                                                                    \
    LRScheduler scheduler;                                                                          \
    Tokenizer tokenizer;                                                                            \
    Logger logger;                                                                                  \
    int grad_accum;           /* micro batches per step and process */                            \
    int total_steps;                                                                                \
    int step;                 /* steps completed (saved) */                                       \
    int adam_steps;           /* AdamW updates applied (saved) */                                 \
    uint64_t sample_rng;      /* (saved) */                                                       \
    uint64_t tokens;          /* train tokens consumed, all processes (saved) */                  \
    uint64_t backward;        /* backward passes, all processes (saved) */                        \
    double train_time_s;      /* cumulative training seconds (saved) */                           \
    int faults;               /* consecutive non-finite steps */                                  \
    float last_val_loss;      /* -1 until computed */                                             \
    float last_train_loss;                                                                          \
    unsigned char* loader_blob; /* (dataloader_state_max_size) scratch for checkpoints */         \
    int* gen_tokens;          /* (prompt + -g) sampling context */                                \
    int gen_prompt;           /* tokens of the prompt (EOT + --prompt) at the start of gen_tokens */ \
    float* gen_logits;        /* (V) host logits of the last position */                          \
    float* gen_sorted;        /* (V) scratch for --top-k */                                       \
    double flops_per_token;                                                                         \
    double peak_flops;        /* all processes; 0: unknown, no MFU */                             \
    HybridState hybrid;

typedef struct { TRAIN_RUN_FIELDS } TrainRun;

typedef struct {
    float loss;       // mean over the step's micro batches (and processes)
    float grad_norm;  // before clipping
    int skipped;      // non-finite loss or norm: no update
    double ms;
} StepResult;

// the backend a trainer plugs in; ctx is its Trainer
typedef struct {
    void* ctx;
    StepResult (*full_step)(void* ctx, float lr);      // forward, backward, update over grad_accum micro batches
    StepResult (*predict_step)(void* ctx);             // hybrid mode's Predict step
    float (*batch_loss)(void* ctx, const int* inputs, const int* targets);  // mean loss of one (B,T) batch
    void (*next_logits)(void* ctx, const int* tokens, int n, float* logits); // (V) logits after tokens[0..n), n <= T
    void (*save)(void* ctx);                           // model, state and mode files of run->step (no DONE marker)
    float (*sum_over_ranks)(void* ctx, float x);       // NULL: one process
    void (*after_step)(void* ctx);                     // NULL or per-step bookkeeping (device memory)
} TrainBackend;

static inline double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// ----------------------------------------------------------------------------
// signals: the first stops the run after this step (with a checkpoint); a second one stops at once.
// Checkpoints are atomic with DONE markers, so the last complete one stays valid.

static volatile sig_atomic_t stop_signal = 0;

static inline void train_on_signal(int sig) {
    if (stop_signal != 0) {
        static const char msg[] = "\nsecond signal: stopping now, without a checkpoint\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
        (void)w;
        _exit(128 + sig);
    }
    stop_signal = sig;
    static const char msg[] = "\nsignal: stopping after this step and writing a checkpoint (again: stop at once)\n";
    ssize_t w = write(STDOUT_FILENO, msg, sizeof(msg) - 1);
    (void)w;
}

static inline void train_install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = train_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

// s in single quotes for sh, each ' as '\'' ; plain words as they are
static inline void print_shell_word(FILE* out, const char* s) {
    int plain = s[0] != '\0';
    for (const char* p = s; *p; p++) {
        if (!(('a' <= *p && *p <= 'z') || ('A' <= *p && *p <= 'Z') || ('0' <= *p && *p <= '9') || strchr("-_./=:,+@%", *p))) { plain = 0; }
    }
    if (plain) { fputs(s, out); return; }
    fputc('\'', out);
    for (const char* p = s; *p; p++) {
        if (*p == '\'') { fputs("'\\''", out); } else { fputc(*p, out); }
    }
    fputc('\'', out);
}

// the command line that continues this run: the same arguments, -y 1, quoted so that it survives a paste
static inline void train_print_resume_hint(const TrainRun* run, int argc, char** argv) {
    printf("stopped by signal after step %d.", run->step);
    if (run->cfg.output_dir == NULL) { printf(" No -o given: nothing saved.\n"); return; }
    printf(" Resume with the same flags plus -y 1:\n ");
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-y") == 0) { i++; continue; }
        putchar(' ');
        print_shell_word(stdout, argv[i]);
    }
    printf(" -y 1\n");
    fflush(stdout);
}

// ----------------------------------------------------------------------------
// set-up: the model's origin, data, schedule, sampling, logs

// the checkpoint to resume from (-y 1), or -1; with a note when there is none
static inline int train_resume_step(const TrainRun* run) {
    const TrainConfig* c = &run->cfg;
    int step = c->resume ? checkpoint_find_latest(c->output_dir) : -1;
    if (c->resume && step < 0 && run->rank0) {
        printf("note: no complete checkpoint in %s; starting from -e %s\n", c->output_dir, c->init);
    }
    return step;
}

// the model file to load into path, or 0 with *depth set (-e dN: random init)
static inline int train_model_source(const TrainConfig* c, int resume_step, char* path, size_t size, int* depth) {
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

// the prompt as token ids after an EOT (our BPE encoder, data/bpe.h) into gen_tokens; sets gen_prompt
static inline void train_encode_prompt(TrainRun* run, int eot, int V) {
    int n = 0;
    BPEIds ids;
    memset(&ids, 0, sizeof(ids));
    if (run->cfg.prompt != NULL) {
        BPETokenizer bpe;
        bpe_init(&bpe, run->cfg.vocab_dir);
        bpe_encode(&bpe, (const uint8_t*)run->cfg.prompt, strlen(run->cfg.prompt), &ids);
        bpe_free(&bpe);
        n = (int)ids.n;
    }
    run->gen_tokens = (int*)mallocCheck((size_t)(1 + n + run->cfg.sample_tokens) * sizeof(int));
    run->gen_tokens[0] = eot;
    for (int i = 0; i < n; i++) {
        if ((int)ids.ids[i] >= V) { fatal("flag --prompt: token %d is outside the model's vocabulary (%d)", (int)ids.ids[i], V); }
        run->gen_tokens[1 + i] = (int)ids.ids[i];
    }
    run->gen_prompt = 1 + n;
    bpe_ids_free(&ids);
}

// data loaders, steps, schedule, sampling buffers, tokenizer and logs; the model is built (V known)
static inline void train_setup(TrainRun* run, int vocab_size, int resume_step) {
    TrainConfig* c = &run->cfg;
    int np = run->num_processes;
    run->last_val_loss = -1.0f;
    run->sample_rng = random_state((uint64_t)c->seed, RNG_SAMPLE_SALT);
    int eot = GPT2_EOT < vocab_size ? GPT2_EOT : 0;
    if (c->sample_every > 0 || c->max_steps == 0) {
        tokenizer_init(&run->tokenizer, c->tokenizer);
        if (!run->tokenizer.init_ok && run->rank0) { printf("note: no tokenizer at %s; samples print token ids\n", c->tokenizer); }
        if (run->tokenizer.init_ok && run->tokenizer.eot_token >= 0 && run->tokenizer.eot_token < vocab_size) {
            eot = run->tokenizer.eot_token;
        }
    }
    train_encode_prompt(run, eot, vocab_size);
    run->gen_logits = (float*)mallocCheck((size_t)vocab_size * sizeof(float));
    run->gen_sorted = (float*)mallocCheck((size_t)vocab_size * sizeof(float));
    if (c->max_steps == 0) { return; }  // generation only: no data
    dataloader_init(&run->train_loader, c->train_pattern, c->B, c->T, vocab_size, 1, (uint64_t)c->seed);
    char val_buf[4096];
    const char* val_pattern = train_val_pattern(c, val_buf, sizeof(val_buf));
    run->has_val = c->val_every > 0 && val_pattern != NULL;
    if (c->val_every > 0 && val_pattern == NULL && run->rank0) {
        printf("note: no val shards beside %s (and no -j): val is off\n", c->train_pattern);
    }
    if (run->has_val) {
        dataloader_init(&run->val_loader, val_pattern, c->B, c->T, vocab_size, 0, (uint64_t)c->seed);
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

static inline void train_free(TrainRun* run) {
    logger_free(&run->logger);
    tokenizer_free(&run->tokenizer);
    if (run->cfg.max_steps != 0) { dataloader_free(&run->train_loader); }
    if (run->has_val) { dataloader_free(&run->val_loader); }
    free(run->loader_blob);
    free(run->gen_tokens);
    free(run->gen_logits);
    free(run->gen_sorted);
    if (run->cfg.hybrid.enabled && run->cfg.max_steps != 0) { hybrid_free(&run->hybrid); }
}

// ----------------------------------------------------------------------------
// checkpoints: the shared part of the state file, the resume checks, DONE markers and pruning

static inline void train_state_fill(const TrainRun* run, TrainState* s, size_t num_parameters) {
    memset(s, 0, sizeof(*s));
    const TrainConfig* c = &run->cfg;
    s->step = run->step;
    s->shuffle = 1;
    s->sample_rng = run->sample_rng;
    s->shard_index = dataloader_shard_index(&run->train_loader);
    s->batch_index = dataloader_batch_index(&run->train_loader);
    s->num_parameters = num_parameters;
    s->tokens = run->tokens;
    s->backward = run->backward;
    s->train_time_s = run->train_time_s;
    s->init_seed = (uint64_t)c->seed;
    s->adam_steps = (uint64_t)run->adam_steps;
    s->has_run_flags = 1;
    s->max_steps = c->max_steps;
    s->lr = c->lr;
    s->warmup = c->warmup;
    s->final_frac = c->final_frac;
    snprintf(s->schedule, sizeof(s->schedule), "%s", c->schedule);
    snprintf(s->init, sizeof(s->init), "%s", c->init);
}

// a resume with another schedule or init would silently change the run: refused, one line per the
// first difference, unless --allow-changed 1
static inline void train_check_resume_flags(const TrainConfig* c, const TrainState* s, const char* path) {
    if (!s->has_run_flags || c->allow_changed) { return; }
    char now[112], then[112];
    const char* flag = NULL;
    if (c->max_steps != s->max_steps) { flag = "-x"; snprintf(now, sizeof(now), "%d", c->max_steps); snprintf(then, sizeof(then), "%d", s->max_steps); }
    else if (c->lr != s->lr) { flag = "-l"; snprintf(now, sizeof(now), "%g", c->lr); snprintf(then, sizeof(then), "%g", s->lr); }
    else if (c->warmup != s->warmup) { flag = "-u"; snprintf(now, sizeof(now), "%d", c->warmup); snprintf(then, sizeof(then), "%d", s->warmup); }
    else if (c->final_frac != s->final_frac) { flag = "-q"; snprintf(now, sizeof(now), "%g", c->final_frac); snprintf(then, sizeof(then), "%g", s->final_frac); }
    else if (strncmp(c->schedule, s->schedule, sizeof(s->schedule) - 1) != 0) { flag = "-k"; snprintf(now, sizeof(now), "%s", c->schedule); snprintf(then, sizeof(then), "%s", s->schedule); }
    else if (strncmp(c->init, s->init, sizeof(s->init) - 1) != 0) { flag = "-e"; snprintf(now, sizeof(now), "%s", c->init); snprintf(then, sizeof(then), "%s", s->init); }
    if (flag != NULL) {
        fatal("flag %s: %s differs from the checkpoint's %s (%s); resume with the run's flags, or add --allow-changed 1",
              flag, now, then, path);
    }
}

// reads the state file of checkpoint `step` into s (m, v into the given buffers), checks it against
// the flags and restores the counters and data position
static inline void train_load_state(TrainRun* run, int step, size_t num_parameters, float* m, float* v) {
    char path[4096];
    checkpoint_path(path, sizeof(path), run->cfg.output_dir, "state", step);
    TrainState s;
    unsigned char* blob;
    size_t blob_bytes;
    state_read(path, &s, num_parameters, m, v, &blob, &blob_bytes);
    if (s.step != step) { fatal("%s: state is for step %d, expected %d", path, s.step, step); }
    train_check_resume_flags(&run->cfg, &s, path);
    dataloader_state_load(&run->train_loader, blob, blob_bytes, path);
    free(blob);
    run->step = s.step;
    run->adam_steps = (int)s.adam_steps;
    run->sample_rng = s.sample_rng;
    run->tokens = s.tokens;
    run->backward = s.backward;
    run->train_time_s = s.train_time_s;
}

// the open hybrid state file of checkpoint `step` (caller: hybrid_load, then fcloseCheck)
static inline FILE* train_open_hybrid_state(const TrainRun* run, int step, char* path, size_t size) {
    checkpoint_path(path, size, run->cfg.output_dir, "hybrid", step);
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { fatal("%s: cannot open (%s); was the run saved without --hybrid?", path, strerror(errno)); }
    return fp;
}

// the standard state file (rank 0): counters, m, v, loader position
static inline void train_write_state(TrainRun* run, size_t num_parameters, const float* m, const float* v) {
    char path[4096];
    TrainState s;
    train_state_fill(run, &s, num_parameters);
    dataloader_state_save(&run->train_loader, run->loader_blob);
    checkpoint_path(path, sizeof(path), run->cfg.output_dir, "state", run->step);
    state_write(path, &s, m, v, run->loader_blob, dataloader_state_size(&run->train_loader));
}

// hybrid_%08d.bin of this step (rank 0); keep: the rollback point of an open Predict run, or NULL
static inline void train_write_hybrid_state(TrainRun* run, const float* direction, const float* keep) {
    char path[4096];
    checkpoint_path(path, sizeof(path), run->cfg.output_dir, "hybrid", run->step);
    AtomicFile af;
    atomic_open(&af, path);
    char err[256];
    if (hybrid_save(&run->hybrid, af.fp, direction, keep, err, sizeof(err)) != 0) {
        fatal("%s: cannot write the hybrid state (%s)", path, err);
    }
    atomic_commit(&af);
}

static inline void train_checkpoint(TrainRun* run, const TrainBackend* be) {
    be->save(be->ctx);
    if (run->rank0) {
        checkpoint_write_done(run->cfg.output_dir, run->step);
        checkpoint_prune(run->cfg.output_dir, run->cfg.ckpt_keep);
        printf("checkpoint: step %d written to %s\n", run->step, run->cfg.output_dir);
    }
    // nobody continues (or exits) before rank 0 has finished writing
    if (be->sum_over_ranks != NULL) { be->sum_over_ranks(be->ctx, 0.0f); }
}

// ----------------------------------------------------------------------------
// evaluation and sampling

// mean loss over the first -m val batches (all with -m -1), always the same batches, split over processes
static inline float train_evaluate(TrainRun* run, const TrainBackend* be) {
    DataLoader* val = &run->val_loader;
    dataloader_reset(val, (uint64_t)run->cfg.seed);
    size_t n = run->cfg.val_batches == -1 || (size_t)run->cfg.val_batches > val->total_batches
             ? val->total_batches : (size_t)run->cfg.val_batches;
    int np = run->num_processes, rank = run->cfg.process_rank;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        dataloader_next_batch(val);
        if (np > 1 && (int)(i % np) != rank) { continue; }
        sum += be->batch_loss(be->ctx, val->inputs, val->targets);
    }
    if (be->sum_over_ranks != NULL && np > 1) { sum = be->sum_over_ranks(be->ctx, (float)sum); }
    return (float)(sum / n);
}

static inline int float_desc(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x < y) - (x > y);
}

// one token from logits (V): softmax at --temperature over the --top-k largest (all with 0),
// drawn with the sampling stream
static inline int train_sample_token(TrainRun* run, const float* logits, int V) {
    float t = run->cfg.temperature, cut = -FLT_MAX, maxval = -FLT_MAX;
    for (int i = 0; i < V; i++) { maxval = logits[i] > maxval ? logits[i] : maxval; }
    if (run->cfg.top_k > 0 && run->cfg.top_k < V) {
        memcpy(run->gen_sorted, logits, (size_t)V * sizeof(float));
        qsort(run->gen_sorted, (size_t)V, sizeof(float), float_desc);
        cut = run->gen_sorted[run->cfg.top_k - 1];
    }
    double sum = 0.0;
    for (int i = 0; i < V; i++) { sum += logits[i] >= cut ? exp((logits[i] - maxval) / t) : 0.0; }
    double coin = random_f32(&run->sample_rng) * sum, cdf = 0.0;
    int next = -1;
    for (int i = 0; i < V; i++) {
        if (logits[i] < cut) { continue; }
        cdf += exp((logits[i] - maxval) / t);
        next = i;
        if (coin < cdf) { break; }
    }
    return next;
}

// the prompt (EOT + --prompt), then -g sampled tokens, printed decoded. The context is the last T
// tokens at most (a sliding window), so -g is not bounded by -t.
static inline void train_sample_text(TrainRun* run, const TrainBackend* be, int V) {
    int T = run->cfg.T, end = run->gen_prompt + run->cfg.sample_tokens;
    printf("generating:\n---\n");
    for (int i = 1; i < run->gen_prompt; i++) { tokenizer_print(&run->tokenizer, (uint32_t)run->gen_tokens[i], stdout); }
    for (int t = run->gen_prompt; t < end; t++) {
        int ctx = t < T ? t : T;
        be->next_logits(be->ctx, run->gen_tokens + (t - ctx), ctx, run->gen_logits);
        int next = train_sample_token(run, run->gen_logits, V);
        run->gen_tokens[t] = next;
        tokenizer_print(&run->tokenizer, (uint32_t)next, stdout);
        fflush(stdout);
    }
    printf("\n---\n");
}

// ----------------------------------------------------------------------------
// the start-up table and the summary

static inline void train_print_row(const char* name, const char* value) { printf("| %-20s | %-50s |\n", name, value); }

static inline void train_print_rows(const TrainConfig* cfg, const ArgSpec* specs, int n) {
    for (int i = 0; i < n; i++) {
        char v[256];
        arg_format_value(v, sizeof(v), cfg, &specs[i]);
        train_print_row(specs[i].flag, v);
    }
}

// the flags, the model and the run; extra_rows (NULL or a function) adds the backend's
static inline void train_print_config(const TrainRun* run, const TrainCli* cli, const GPT2Config* c,
                                      size_t num_parameters, int resume_step, void (*extra_rows)(const void*),
                                      const void* ctx) {
    const char* line = "+----------------------+----------------------------------------------------+\n";
    char v[256];
    printf("%s", line);
    train_print_row("Parameter", "Value");
    printf("%s", line);
    train_print_rows(&run->cfg, TRAIN_ARGS, NUM_TRAIN_ARGS);
    if (cli->args != NULL) { train_print_rows(&run->cfg, cli->args, cli->num_args); }
    train_print_rows(&run->cfg, train_hybrid_args(), run->cfg.hybrid.enabled ? NUM_HYBRID_FLAGS : 1);
    printf("%s", line);
    const char* names[] = {"max_seq_len", "vocab_size", "padded_vocab_size", "num_layers", "num_heads", "channels"};
    int values[] = {c->max_seq_len, c->vocab_size, c->padded_vocab_size, c->num_layers, c->num_heads, c->channels};
    for (int i = 0; i < 6; i++) { snprintf(v, sizeof(v), "%d", values[i]); train_print_row(names[i], v); }
    snprintf(v, sizeof(v), "%zu", num_parameters); train_print_row("num_parameters", v);
    if (run->cfg.max_steps != 0) {
        snprintf(v, sizeof(v), "%zu", run->train_loader.total_batches); train_print_row("train batches/epoch", v);
        snprintf(v, sizeof(v), "%zu", run->has_val ? run->val_loader.total_batches : 0); train_print_row("val batches", v);
        snprintf(v, sizeof(v), "%d", run->grad_accum); train_print_row("grad accumulation", v);
        snprintf(v, sizeof(v), "%d", run->total_steps); train_print_row("steps", v);
    }
    if (extra_rows != NULL) { extra_rows(ctx); }
    if (resume_step >= 0) { snprintf(v, sizeof(v), "%d", resume_step); train_print_row("resumed from step", v); }
    printf("%s", line);
}

// summary.json; extra: more "key": value pairs of the backend (leading ", "), or ""
static inline void train_write_summary(TrainRun* run, const char* extra) {
    char body[4096];
    char val[64];
    if (run->last_val_loss >= 0.0f) { snprintf(val, sizeof(val), "%.9g", run->last_val_loss); } else { snprintf(val, sizeof(val), "null"); }
    int n = snprintf(body, sizeof(body),
             "\"steps\": %d, \"train_time_s\": %.6f, \"val_loss\": %s, \"train_loss\": %.9g, \"backward\": %llu, "
             "\"tokens\": %llu%s",
             run->step, run->train_time_s, val, run->last_train_loss, (unsigned long long)run->backward,
             (unsigned long long)run->tokens, extra);
    if (run->cfg.hybrid.enabled) {
        const int* ps = run->hybrid.metrics.steps;
        n += snprintf(body + n, sizeof(body) - n,
                      ", \"phase_steps\": {\"warmup\": %d, \"full\": %d, \"predict\": %d, \"correct\": %d}, \"hybrid\": {",
                      ps[PHASE_WARMUP], ps[PHASE_FULL], ps[PHASE_PREDICT], ps[PHASE_CORRECT]);
        n += hybrid_summary_fields(&run->hybrid, body + n, sizeof(body) - n - 2);
        snprintf(body + n, sizeof(body) - n, "}");
    } else {
        snprintf(body + n, sizeof(body) - n, ", \"phase_steps\": {\"full\": %d}", run->step);
    }
    logger_write_summary(&run->logger, body);
    if (run->cfg.hybrid.enabled) { hybrid_print_summary(&run->hybrid, stdout); }
    printf("done: %d steps, %.2f s training time, %llu backward passes\n", run->step, run->train_time_s,
           (unsigned long long)run->backward);
}

// ----------------------------------------------------------------------------
// the training loop around the backend's steps

// one step: Full, or in hybrid mode whatever the controller decides; the controller's own work
// counts as training time. *predict: it was a Predict step.
static inline StepResult train_one_step(TrainRun* run, const TrainBackend* be, float lr, int* predict, char* hybrid_json, size_t size) {
    if (!run->cfg.hybrid.enabled) { *predict = 0; return be->full_step(be->ctx, lr); }
    double h0 = now_seconds();
    HybridPhase ph = hybrid_begin_step(&run->hybrid, run->step, lr);
    double decide_ms = (now_seconds() - h0) * 1000.0;
    StepResult r = ph == PHASE_PREDICT ? be->predict_step(be->ctx) : be->full_step(be->ctx, lr);
    // the controller's inputs must be the same on every process: with the bandit, the step time too
    int np = run->num_processes;
    double ms = np > 1 && run->cfg.hybrid.adaptive ? be->sum_over_ranks(be->ctx, (float)r.ms) / np : r.ms;
    h0 = now_seconds();
    hybrid_end_step(&run->hybrid, r.skipped ? NAN : r.loss, r.skipped ? NAN : r.grad_norm, ms + decide_ms);
    double hybrid_ms = decide_ms + (now_seconds() - h0) * 1000.0;
    r.ms += hybrid_ms;
    run->train_time_s += hybrid_ms / 1000.0;
    hybrid_step_json(&run->hybrid, hybrid_json, size);
    char event[160];
    if (hybrid_take_event(&run->hybrid, event, sizeof(event)) && run->rank0) { printf("%s\n", event); }
    *predict = run->hybrid.phase == PHASE_PREDICT;
    return r;
}

static inline void train_print_step(const TrainRun* run, const StepResult* r, float lr, int predict, const char* phase) {
    if (!run->rank0) { return; }
    if (predict) {
        printf("step %4d/%d | predict | predicted loss %.6f | lr %.2e | %.2f ms\n",
               run->step, run->total_steps, run->hybrid.metrics.predicted_loss, lr, r->ms);
        return;
    }
    double tok_s = (double)run->grad_accum * run->num_processes * run->cfg.B * run->cfg.T / (r->ms / 1000.0);
    char mfu[32] = "n/a";
    if (run->peak_flops > 0.0) { snprintf(mfu, sizeof(mfu), "%.1f%%", 100.0 * run->flops_per_token * tok_s / run->peak_flops); }
    printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | %.2f ms | %s MFU | %.0f tok/s%s%s\n",
           run->step, run->total_steps, r->loss, r->grad_norm, lr, r->ms, mfu, tok_s,
           run->cfg.hybrid.enabled ? " | " : "", run->cfg.hybrid.enabled ? phase : "");
}

// trains from run->step to the last step, or until a signal; then the summary
static inline void train_loop(TrainRun* run, const TrainBackend* be, int V, int argc, char** argv) {
    TrainConfig* cfg = &run->cfg;
    train_install_signals();
    if (run->has_val && run->step == 0) {
        run->last_val_loss = train_evaluate(run, be);
        if (run->rank0) { printf("val loss %.6f\n", run->last_val_loss); }
        logger_log_init_val(&run->logger, run->last_val_loss);
    }
    while (run->step < run->total_steps) {
        float lr = lr_scheduler_get(&run->scheduler, run->step);
        char hybrid_json[256] = "";
        int predict;
        StepResult r = train_one_step(run, be, lr, &predict, hybrid_json, sizeof(hybrid_json));
        const char* phase = cfg->hybrid.enabled ? hybrid_phase_name(&run->hybrid) : "full";
        run->step++;
        if (!predict) { run->last_train_loss = r.loss; }
        if (be->after_step != NULL) { be->after_step(be->ctx); }
        train_print_step(run, &r, lr, predict, phase);
        // per-step metrics: val loss (after the update) joins the step's line
        StepMetrics m;
        memset(&m, 0, sizeof(m));
        m.step = run->step;
        m.phase = phase;
        m.has_loss = !predict;
        m.loss = r.loss;
        m.lr = lr;
        m.has_norm = !predict;
        m.grad_norm = r.grad_norm;
        m.extra = cfg->hybrid.enabled ? hybrid_json : NULL;
        m.ms = r.ms;
        m.train_time_s = run->train_time_s;
        m.tokens = run->tokens;
        m.backward = run->backward;
        m.skipped = r.skipped;
        if (run->has_val && (run->step % cfg->val_every == 0 || run->step == run->total_steps)) {
            run->last_val_loss = train_evaluate(run, be);
            if (run->rank0) { printf("val loss %.6f\n", run->last_val_loss); }
            m.has_val = 1;
            m.val_loss = run->last_val_loss;
        }
        logger_log_step(&run->logger, &m);
        if (r.skipped) {
            run->faults++;
            if (run->rank0) {
                printf("step %d: non-finite loss %f or grad norm %f; update skipped (%d/%d in a row)\n",
                       run->step, r.loss, r.grad_norm, run->faults, MAX_FAULTS);
                fflush(stdout);
            }
            if (run->faults >= MAX_FAULTS) {
                fatal("%d consecutive steps with NaN/Inf loss or grad norm (step %d); stopping with the weights "
                      "of the last good step (lower -l?)", MAX_FAULTS, run->step);
            }
        } else {
            run->faults = 0;
        }
        int last = run->step == run->total_steps;
        // samples every -s steps and after the last one, so that a run ends with text
        if (cfg->sample_every > 0 && (run->step % cfg->sample_every == 0 || last) && run->rank0) { train_sample_text(run, be, V); }
        // a signal reaches processes at different moments: rank 0's decision is everyone's. Predict
        // steps communicate nothing, so the decision waits for the next measured step
        int stop = stop_signal != 0;
        if (be->sum_over_ranks != NULL && run->num_processes > 1) {
            stop = predict && !last ? 0 : (int)be->sum_over_ranks(be->ctx, run->rank0 && stop_signal ? 1.0f : 0.0f);
        }
        if (cfg->output_dir != NULL && ((cfg->ckpt_every > 0 && (run->step % cfg->ckpt_every == 0 || last)) || stop)) {
            train_checkpoint(run, be);
        }
        if (stop && !last) {
            if (run->rank0) { train_print_resume_hint(run, argc, argv); }
            break;
        }
    }
}

#endif // LLMC_TRAIN_COMMON_H
