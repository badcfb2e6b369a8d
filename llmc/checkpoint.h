/*
 * llmc/checkpoint.h — the files of a checkpoint, shared by the CPU and CUDA trainers.
 *   model_%08d.bin        llm.c model (magic 20240326, version 3 = fp32): header then all parameters
 *   state_%08d_00000.bin  training state (magic 20240527): step, RNGs, loader position, AdamW m and v
 *   DONE_%08d             empty marker, written last: a checkpoint without it is incomplete and ignored
 * Every file is written atomically (llmc/utils.h), and every read validates sizes and values, so a resume
 * either continues bit-exactly or stops with one line naming the file. The GPT-2 config and the parameter
 * layout live here because they are part of the file format.
 *
 * State header slots (int32 [256]): llm.c's [0] magic, [1] version 1, [2] processes, [3] rank,
 * [4] master weights, [5] shuffle, [10] step, [20..21] sampling rng, [30..31] shard index,
 * [32..33] batch index in that shard; ours: [40..41] num parameters, [42..43] loader blob bytes,
 * [44..45] tokens consumed, [46..47] backward passes, [48..49] training seconds (double),
 * [50..51] init seed, [52..53] AdamW updates applied (its bias-correction step), [60] 2 when the record of
 * the flags fixed on resume follows the blob (1: an older file, the flags in slots 61..101), [102..105]
 * the gradient noise scale's two sums (doubles), [106] the steps in them, [107] 1 when 102..106 are set,
 * [108] the record's bytes, [109] 1 when the trained weights follow the loader blob (0: older files, and
 * runs whose model file holds the weights they train). After the header: m (P fp32), v (P fp32), loader
 * blob (llmc/dataloader.h), with slot 109 the trained weights (P fp32: the model file of such a checkpoint
 * holds other weights to keep, an average (llmc/average.h), and training continues from these), then the
 * record, always the file's last bytes (text, one "flag value" line per flag: llmc/config.h; then
 * "--vocab DIR", the vocabulary the run trained with, when it knew it: llmc/vocab.h).
 */
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include "llmc/utils.h"

#define MODEL_MAGIC 20240326
#define MODEL_VERSION_FP32 3
#define MODEL_VERSION_BF16 5
#define STATE_MAGIC 20240527
#define STATE_VERSION 1
#define STATE_RECORD_MAX 16384  // bytes of the record of the run's fixed flags
#define NUM_PARAMETER_TENSORS 16

typedef struct {
    int max_seq_len;        // maxT, e.g. 1024
    int vocab_size;         // V, e.g. 50257
    int padded_vocab_size;  // Vp, V rounded up to a multiple of 128
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPT2Config;

// sizes (in floats) of the 16 parameter tensors, in file order
static inline void gpt2_param_sizes(size_t sizes[NUM_PARAMETER_TENSORS], const GPT2Config* c) {
    size_t Vp = c->padded_vocab_size, C = c->channels, maxT = c->max_seq_len, L = c->num_layers;
    sizes[0] = Vp * C;           // wte
    sizes[1] = maxT * C;         // wpe
    sizes[2] = L * C;            // ln1w
    sizes[3] = L * C;            // ln1b
    sizes[4] = L * (3 * C) * C;  // qkvw
    sizes[5] = L * (3 * C);      // qkvb
    sizes[6] = L * C * C;        // attprojw
    sizes[7] = L * C;            // attprojb
    sizes[8] = L * C;            // ln2w
    sizes[9] = L * C;            // ln2b
    sizes[10] = L * (4 * C) * C; // fcw
    sizes[11] = L * (4 * C);     // fcb
    sizes[12] = L * C * (4 * C); // fcprojw
    sizes[13] = L * C;           // fcprojb
    sizes[14] = C;               // lnfw
    sizes[15] = C;               // lnfb
}

static inline size_t gpt2_num_parameters(const GPT2Config* c) {
    size_t sizes[NUM_PARAMETER_TENSORS], n = 0;
    gpt2_param_sizes(sizes, c);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { n += sizes[i]; }
    return n;
}

// weight decay applies to the 2-D weights only (llm.c): wte, wpe, qkvw, attprojw, fcw, fcprojw
static const int PARAM_DECAYS[NUM_PARAMETER_TENSORS] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};

// the parameter blocks: each tensor of each layer, 12 L + 4 blocks (wte, wpe, lnfw, lnfb are
// one block each). offsets: (12L+5) in floats; weight_decay: (12L+4), the AdamW decay each block gets
// (wd on the 2-D weights, else 0). Returns the number of blocks.
static inline int gpt2_param_blocks(const GPT2Config* c, size_t* offsets, float* weight_decay, float wd) {
    size_t sizes[NUM_PARAMETER_TENSORS], off = 0;
    gpt2_param_sizes(sizes, c);
    int L = c->num_layers, nb = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        int parts = k >= 2 && k < NUM_PARAMETER_TENSORS - 2 ? L : 1;
        for (int l = 0; l < parts; l++) {
            offsets[nb] = off;
            weight_decay[nb] = PARAM_DECAYS[k] ? wd : 0.0f;
            off += sizes[k] / parts;
            nb++;
        }
    }
    offsets[nb] = off;
    return nb;
}

// ----------------------------------------------------------------------------
// model file

// reads and validates the header of an llm.c model file; returns the number of parameters
static inline size_t model_read_header(const char* path, GPT2Config* config) {
    FILE* fp = fopenCheck(path, "rb");
    int header[256];
    size_t bytes = file_size_check(fp, path);
    if (bytes < sizeof(header)) {
        fatal("%s: truncated model file (%zu bytes, smaller than the 1024-byte header)", path, bytes);
    }
    freadCheck(header, sizeof(int), 256, fp, path);
    fcloseCheck(fp, path);
    if (header[0] != MODEL_MAGIC) {
        fatal("%s: not an llm.c model file (magic %d, expected %d)", path, header[0], MODEL_MAGIC);
    }
    if (header[1] == MODEL_VERSION_BF16) {
        fatal("%s: model file is version 5 (bf16); this trainer reads version 3 (fp32) only", path);
    }
    if (header[1] != MODEL_VERSION_FP32) {
        fatal("%s: unsupported model file version %d (expected 3, fp32)", path, header[1]);
    }
    config->max_seq_len = header[2];
    config->vocab_size = header[3];
    config->num_layers = header[4];
    config->num_heads = header[5];
    config->channels = header[6];
    config->padded_vocab_size = header[7];
    if (config->max_seq_len <= 0 || config->max_seq_len > (1 << 20) || config->vocab_size <= 0 ||
        config->vocab_size > (1 << 24) || config->num_layers <= 0 || config->num_layers > 1024 ||
        config->num_heads <= 0 || config->channels <= 0 || config->channels > (1 << 16) ||
        config->channels % config->num_heads != 0 || config->padded_vocab_size < config->vocab_size ||
        config->padded_vocab_size > (1 << 24)) {
        fatal("%s: corrupt model header (maxT %d, V %d, L %d, NH %d, C %d, Vp %d)", path, config->max_seq_len,
              config->vocab_size, config->num_layers, config->num_heads, config->channels,
              config->padded_vocab_size);
    }
    size_t n = gpt2_num_parameters(config);
    if (bytes != sizeof(header) + n * sizeof(float)) {
        fatal("%s: model file is %zu bytes, its header implies %zu%s", path, bytes, sizeof(header) + n * sizeof(float),
              bytes < sizeof(header) + n * sizeof(float) ? " (truncated)" : "");
    }
    return n;
}

// reads the parameters (n floats, from model_read_header) and rejects NaN/Inf weights
static inline void model_read_params(const char* path, float* params, size_t n) {
    FILE* fp = fopenCheck(path, "rb");
    fseekCheck(fp, 256 * sizeof(int), SEEK_SET, path);
    freadCheck(params, sizeof(float), n, fp, path);
    fcloseCheck(fp, path);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(params[i])) { fatal("%s: parameter %zu is %f (NaN/Inf weights)", path, i, params[i]); }
    }
}

static inline void model_write(const char* path, const GPT2Config* config, const float* params, size_t n) {
    int header[256] = {0};
    header[0] = MODEL_MAGIC;
    header[1] = MODEL_VERSION_FP32;
    header[2] = config->max_seq_len;
    header[3] = config->vocab_size;
    header[4] = config->num_layers;
    header[5] = config->num_heads;
    header[6] = config->channels;
    header[7] = config->padded_vocab_size;
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, header, sizeof(int), 256);
    atomic_write(&af, params, sizeof(float), n);
    atomic_commit(&af);
}

// ----------------------------------------------------------------------------
// state file

typedef struct {
    int step;                 // steps completed
    int shuffle;
    uint64_t sample_rng;      // sampling stream
    size_t shard_index;       // informational (llm.c slots); the loader blob is authoritative
    size_t batch_index;
    size_t num_parameters;
    uint64_t tokens;          // train tokens consumed so far
    uint64_t backward;        // backward passes (micro batches) so far
    double train_time_s;      // cumulative training seconds
    uint64_t init_seed;
    uint64_t adam_steps;      // AdamW updates applied so far
    // the flags a resume must not change, one "flag value" line each (files without them: has_run_flags 0,
    // nothing is checked)
    int has_run_flags;
    char run_flags[STATE_RECORD_MAX];
    double gns_s_sum, gns_g2_sum; // the gradient noise scale's sums over the run so far (slots 102-107;
    int gns_steps;                // files without them: 0, so a resumed summary covers the steps since)
    const float* weights;     // state_write: (P) the trained weights, where the model file keeps others (NULL: none)
    int has_weights;          // state_read: the file carries them (slot 109); state_read_weights reads them
} TrainState;

static inline void put_u64(int* h, int slot, uint64_t v) { memcpy(h + slot, &v, 8); }
static inline uint64_t get_u64(const int* h, int slot) { uint64_t v; memcpy(&v, h + slot, 8); return v; }

// the record of a file from before it was text (slots 61..101, the flags then fixed on resume), as text
static inline void state_legacy_record(const int* h, char* out, size_t size) {
    float lr, final_frac, beta1 = 0.9f, beta2 = 0.95f;  // the only AdamW betas before they were flags
    char schedule[16], init[112];
    memcpy(&lr, h + 62, 4);
    memcpy(&final_frac, h + 64, 4);
    memcpy(schedule, h + 66, sizeof(schedule));
    memcpy(init, h + 70, sizeof(init));
    schedule[sizeof(schedule) - 1] = '\0';
    init[sizeof(init) - 1] = '\0';
    if (h[100] == 1) { memcpy(&beta1, h + 98, 4); memcpy(&beta2, h + 99, 4); }
    const char* precision = h[101] == 1 ? "--precision fp32\n" : h[101] == 2 ? "--precision bf16\n" : "";
    snprintf(out, size, "-x %d\n-l %.9g\n-u %d\n-q %.9g\n-k %s\n-e %s\n--beta1 %.9g\n--beta2 %.9g\n%s", h[61], lr, h[63],
             final_frac, schedule, init, beta1, beta2, precision);
}

// m, v: (num_parameters) AdamW moments; blob: the data loader position
static inline void state_write(const char* path, const TrainState* s, const float* m, const float* v,
                               const void* blob, size_t blob_bytes) {
    int header[256] = {0};
    header[0] = STATE_MAGIC;
    header[1] = STATE_VERSION;
    header[2] = 1;
    header[3] = 0;
    header[4] = 0;
    header[5] = s->shuffle;
    header[10] = s->step;
    put_u64(header, 20, s->sample_rng);
    put_u64(header, 30, s->shard_index);
    put_u64(header, 32, s->batch_index);
    put_u64(header, 40, s->num_parameters);
    put_u64(header, 42, blob_bytes);
    put_u64(header, 44, s->tokens);
    put_u64(header, 46, s->backward);
    memcpy(header + 48, &s->train_time_s, 8);
    put_u64(header, 50, s->init_seed);
    put_u64(header, 52, s->adam_steps);
    size_t record = s->has_run_flags ? strnlen(s->run_flags, STATE_RECORD_MAX - 1) : 0;
    header[60] = s->has_run_flags ? 2 : 0;
    header[108] = (int)record;
    memcpy(header + 102, &s->gns_s_sum, 8);
    memcpy(header + 104, &s->gns_g2_sum, 8);
    header[106] = s->gns_steps;
    header[107] = 1;
    header[109] = s->weights != NULL;
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, header, sizeof(int), 256);
    atomic_write(&af, m, sizeof(float), s->num_parameters);
    atomic_write(&af, v, sizeof(float), s->num_parameters);
    atomic_write(&af, blob, 1, blob_bytes);
    if (s->weights != NULL) { atomic_write(&af, s->weights, sizeof(float), s->num_parameters); }
    atomic_write(&af, s->run_flags, 1, record);
    atomic_commit(&af);
}

// reads a state file for a model of `num_parameters`; m and v are filled, *blob is malloc'd (free it).
// Runs only at start-up (resume), so the blob allocation is not in the training loop.
static inline void state_read(const char* path, TrainState* s, size_t num_parameters, float* m, float* v,
                              unsigned char** blob, size_t* blob_bytes) {
    FILE* fp = fopenCheck(path, "rb");
    int header[256];
    size_t bytes = file_size_check(fp, path);
    if (bytes < sizeof(header)) { fatal("%s: truncated state file (%zu bytes)", path, bytes); }
    freadCheck(header, sizeof(int), 256, fp, path);
    if (header[0] != STATE_MAGIC) {
        fatal("%s: not a state file (magic %d, expected %d)", path, header[0], STATE_MAGIC);
    }
    if (header[1] != STATE_VERSION) { fatal("%s: unsupported state file version %d", path, header[1]); }
    if (header[2] != 1 || header[4] != 0) {
        fatal("%s: state file from a %d-process run with master weights %d; this trainer resumes 1-process fp32 state",
              path, header[2], header[4]);
    }
    memset(s, 0, sizeof(*s));
    s->shuffle = header[5];
    s->step = header[10];
    s->sample_rng = get_u64(header, 20);
    s->shard_index = get_u64(header, 30);
    s->batch_index = get_u64(header, 32);
    s->num_parameters = get_u64(header, 40);
    size_t nb = get_u64(header, 42);
    s->tokens = get_u64(header, 44);
    s->backward = get_u64(header, 46);
    memcpy(&s->train_time_s, header + 48, 8);
    s->init_seed = get_u64(header, 50);
    s->adam_steps = get_u64(header, 52);
    if (header[108] < 0 || header[108] >= STATE_RECORD_MAX) {
        fatal("%s: corrupt state (a record of %d bytes)", path, header[108]);
    }
    size_t record = (size_t)header[108];  // in the file even where slot 60 says it does not count
    s->has_run_flags = header[60] == 2 || header[60] == 1;
    if (header[60] == 1) { state_legacy_record(header, s->run_flags, sizeof(s->run_flags)); }
    if (header[107] == 1) {
        memcpy(&s->gns_s_sum, header + 102, 8);
        memcpy(&s->gns_g2_sum, header + 104, 8);
        s->gns_steps = header[106];
        if (!isfinite(s->gns_s_sum) || !isfinite(s->gns_g2_sum) || s->gns_steps < 0 || s->gns_steps > s->step) {
            fatal("%s: corrupt state (gradient noise scale sums %g, %g over %d steps)", path, s->gns_s_sum,
                  s->gns_g2_sum, s->gns_steps);
        }
    }
    if (header[109] != 0 && header[109] != 1) { fatal("%s: corrupt state (slot 109 is %d, not 0 or 1)", path, header[109]); }
    s->has_weights = header[109];
    if (s->num_parameters != num_parameters) {
        fatal("%s: state is for %zu parameters, the model has %zu", path, s->num_parameters, num_parameters);
    }
    size_t floats = (2 + (size_t)s->has_weights) * num_parameters;  // m, v and the trained weights if any
    if (s->step < 0 || nb > (1u << 30) || bytes != sizeof(header) + floats * sizeof(float) + nb + record) {
        fatal("%s: state file is %zu bytes, its header implies %zu (truncated or corrupt)", path, bytes,
              sizeof(header) + floats * sizeof(float) + nb + record);
    }
    // AdamW's bias correction divides by 1 - beta^t: a count that is not in [0, step] would put
    // Inf/NaN into the first update (skipped steps do not count, so adam_steps <= step always)
    if (s->adam_steps > (uint64_t)s->step) {
        fatal("%s: corrupt state (%llu AdamW steps after %d steps)", path, (unsigned long long)s->adam_steps, s->step);
    }
    freadCheck(m, sizeof(float), num_parameters, fp, path);
    freadCheck(v, sizeof(float), num_parameters, fp, path);
    *blob = (unsigned char*)mallocCheck(nb > 0 ? nb : 1);
    if (nb > 0) { freadCheck(*blob, 1, nb, fp, path); }
    *blob_bytes = nb;
    if (s->has_weights) { fseekCheck(fp, (long)(num_parameters * sizeof(float)), SEEK_CUR, path); }  // state_read_weights'
    char tail[STATE_RECORD_MAX];
    if (record > 0) { freadCheck(tail, 1, record, fp, path); }
    if (header[60] == 2) { memcpy(s->run_flags, tail, record); s->run_flags[record] = '\0'; }
    fcloseCheck(fp, path);
    for (size_t i = 0; i < num_parameters; i++) {
        if (!isfinite(m[i]) || !isfinite(v[i]) || v[i] < 0.0f) {
            fatal("%s: optimizer state %zu is not finite (m %f, v %f)", path, i, m[i], v[i]);
        }
    }
}

// the record of the run's flags in the state file at path, alone (it is the file's last header[108] bytes),
// into out; 0 when there is none: no such file, not a state file, or one from before the record was text
static inline int state_read_record(const char* path, char* out, size_t size) {
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { return 0; }
    int header[256];
    size_t bytes = file_size_check(fp, path);
    int ok = bytes >= sizeof(header) && fread(header, sizeof(int), 256, fp) == 256 && header[0] == STATE_MAGIC &&
             header[60] == 2 && header[108] >= 0 && header[108] < STATE_RECORD_MAX &&
             (size_t)header[108] < size && bytes >= sizeof(header) + (size_t)header[108];
    if (ok) {
        size_t record = (size_t)header[108];
        ok = fseek(fp, (long)(bytes - record), SEEK_SET) == 0 && fread(out, 1, record, fp) == record;
        out[ok ? record : 0] = '\0';
    }
    fclose(fp);
    return ok;
}

// the trained weights (P floats) of a state file that carries them (state_read said so: has_weights), into
// weights; rejects NaN/Inf as model_read_params does
static inline void state_read_weights(const char* path, size_t num_parameters, float* weights) {
    FILE* fp = fopenCheck(path, "rb");
    int header[256];
    freadCheck(header, sizeof(int), 256, fp, path);
    if (header[109] != 1) { fatal("%s: the state file carries no trained weights (slot 109)", path); }
    long offset = (long)(sizeof(header) + 2 * num_parameters * sizeof(float) + get_u64(header, 42));  // after the blob
    fseekCheck(fp, offset, SEEK_SET, path);
    freadCheck(weights, sizeof(float), num_parameters, fp, path);
    fcloseCheck(fp, path);
    for (size_t i = 0; i < num_parameters; i++) {
        if (!isfinite(weights[i])) { fatal("%s: trained weight %zu is %f (NaN/Inf)", path, i, weights[i]); }
    }
}

// ----------------------------------------------------------------------------
// checkpoint names, DONE markers, latest complete checkpoint, pruning

static inline void checkpoint_path(char* out, size_t size, const char* dir, const char* kind, int step) {
    int n;
    if (strcmp(kind, "state") == 0) {
        n = snprintf(out, size, "%s/state_%08d_00000.bin", dir, step);
    } else if (strcmp(kind, "DONE") == 0) {
        n = snprintf(out, size, "%s/DONE_%08d", dir, step);
    } else {
        n = snprintf(out, size, "%s/%s_%08d.bin", dir, kind, step);  // model, or a feature's file
    }
    if (n < 0 || (size_t)n >= size) { fatal("%s: output path too long", dir); }
}

// the DONE marker: written after every other file of the checkpoint is committed
static inline void checkpoint_write_done(const char* dir, int step) {
    char path[4096];
    checkpoint_path(path, sizeof(path), dir, "DONE", step);
    AtomicFile af;
    atomic_open(&af, path);
    atomic_commit(&af);
}

// steps of every DONE_%08d in dir, sorted ascending, into steps (capacity max); returns the count
static inline int checkpoint_list_done(const char* dir, int* steps, int max) {
    DIR* d = opendir(dir);
    if (d == NULL) { return 0; }
    int count = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int step;
        char extra;
        if (strlen(e->d_name) == 13 && sscanf(e->d_name, "DONE_%8d%c", &step, &extra) == 1 && step >= 0) {
            if (count < max) { steps[count++] = step; }
        }
    }
    closedir(d);
    for (int i = 1; i < count; i++) {  // insertion sort: a handful of entries
        int x = steps[i], j = i - 1;
        while (j >= 0 && steps[j] > x) { steps[j + 1] = steps[j]; j--; }
        steps[j + 1] = x;
    }
    return count;
}

// the step of the latest complete checkpoint in dir (DONE marker present), or -1
static inline int checkpoint_find_latest(const char* dir) {
    int steps[4096];
    int n = checkpoint_list_done(dir, steps, 4096);
    return n > 0 ? steps[n - 1] : -1;
}

// whether name is a file of checkpoint `step`: KIND_%08d.bin or state_%08d_00000.bin (any KIND: the
// model's, the state's, a feature's own)
static inline int checkpoint_file_of(const char* name, int step) {
    char tail[32];
    const char* us = strrchr(name, '_');
    if (us != NULL && strcmp(us, "_00000.bin") == 0) {  // state_%08d_00000.bin
        snprintf(tail, sizeof(tail), "_%08d_00000.bin", step);
        return strlen(name) > strlen(tail) && strcmp(name + strlen(name) - strlen(tail), tail) == 0;
    }
    snprintf(tail, sizeof(tail), "_%08d.bin", step);
    return strlen(name) > strlen(tail) && strcmp(name + strlen(name) - strlen(tail), tail) == 0;
}

// keeps the newest `keep` complete checkpoints (0 = all). The DONE marker goes first, so a checkpoint
// interrupted half-way through deletion is never mistaken for a complete one; then every file of its step.
static inline void checkpoint_prune(const char* dir, int keep) {
    if (keep <= 0) { return; }
    int steps[4096];
    int n = checkpoint_list_done(dir, steps, 4096);
    for (int i = 0; i < n - keep; i++) {
        char path[4096];
        checkpoint_path(path, sizeof(path), dir, "DONE", steps[i]);
        if (unlink(path) != 0 && errno != ENOENT) {
            fprintf(stderr, "warning: %s: cannot delete old checkpoint file (%s)\n", path, strerror(errno));
        }
        DIR* d = opendir(dir);
        struct dirent* e;
        while (d != NULL && (e = readdir(d)) != NULL) {
            if (!checkpoint_file_of(e->d_name, steps[i])) { continue; }
            if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path)) { continue; }
            if (unlink(path) != 0 && errno != ENOENT) {
                fprintf(stderr, "warning: %s: cannot delete old checkpoint file (%s)\n", path, strerror(errno));
            }
        }
        if (d != NULL) { closedir(d); }
    }
}

#endif // LLMC_CHECKPOINT_H
