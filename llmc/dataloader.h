/*
 * llmc/dataloader.h — batches of (B, T) tokens from llm.c token shards (magic 20240520).
 * A shard is int32 header[256] then num_tokens uint16 tokens. Two ways to cut a micro batch out of them
 * (docs/formats.md), chosen by the trainers' --rows flag:
 *   LOADER_ROWS (random, the default): a window is T+1 tokens starting at a multiple of T in one shard;
 *     every epoch permutes all windows of all shards, and each of a micro batch's B rows is the next
 *     window of that permutation. The rows of a step come from all over the data, as in nanoGPT, so a
 *     small text's step is not one stretch of it.
 *   LOADER_CHUNKS (contiguous, llm.c's layout): batch k of a shard is the B*T+1 tokens starting at k*B*T,
 *     so a micro batch's rows are neighbours in the text. Every epoch permutes the shard order, and
 *     entering a shard permutes its batch order.
 * Both draw from one xorshift* stream; the val loader (LOADER_IN_ORDER) reads shards and batches in order
 * and is reset before every evaluation, so val sees the same tokens whatever --rows says.
 * Every shard is validated when the loader opens: magic, version, length, at least one batch (one window
 * for rows), and every token below the model's vocab size, so bad data stops the run at start-up.
 * Allocates in dataloader_init only; its position is a small blob that checkpoints save and restore.
 */
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include "llmc/rand.h"
#include "llmc/utils.h"

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256
#define GPT2_EOT 50256
#define GPT2_VOCAB 50257

// the loader's order: the val loader's, and the two train layouts (--rows contiguous | random)
enum { LOADER_IN_ORDER, LOADER_CHUNKS, LOADER_ROWS };

typedef struct {
    int B, T;
    int order;              // LOADER_IN_ORDER, LOADER_CHUNKS or LOADER_ROWS
    // shards: glob results, sorted
    glob_t glob_result;
    int num_shards;
    size_t* shard_batches;  // (num_shards) batches per shard
    size_t total_batches;   // micro batches in one epoch (rows: the windows over B, rounded down)
    // position
    uint64_t rng;           // data-order stream (train loader only)
    int epoch;              // 0-based
    int* shard_order;       // (num_shards) permutation of this epoch
    int shard_pos;          // index into shard_order of the current shard
    int* batch_order;       // (max shard_batches) permutation of the current shard's batches
    size_t batch_pos;       // index into batch_order of the next batch
    // current shard
    FILE* fp;
    int open_shard;         // shard index whose file is open, -1 if none
    // LOADER_ROWS: every window of every shard, permuted once per epoch
    int* shard_fds;         // (num_shards) open for the whole run: a row may come from any shard
    size_t* window_base;    // (num_shards + 1) index of each shard's first window; [num_shards] = all
    int* window_order;      // (windows) this epoch's permutation
    size_t window_pos;      // index into window_order of the next row
    uint64_t epoch_rng;     // the stream as this epoch's permutation started: a resume replays it
    // output of dataloader_next_batch
    uint16_t* buffer;       // (B*T+1)
    int* inputs;            // (B, T)
    int* targets;           // (B, T)
} DataLoader;

// reads and checks a shard header; returns the number of tokens. vocab_out (may be NULL) gets the
// header's vocab size (GPT-2's 50257 when the slot is 0).
static inline size_t shard_read_header(FILE* fp, const char* path, int* vocab_out) {
    int header[SHARD_HEADER_INTS];
    size_t file_bytes = file_size_check(fp, path);
    if (file_bytes < sizeof(header)) {
        fatal("%s: truncated token shard (%zu bytes, smaller than the 1024-byte header)", path, file_bytes);
    }
    fseekCheck(fp, 0, SEEK_SET, path);
    freadCheck(header, sizeof(int), SHARD_HEADER_INTS, fp, path);
    if (header[0] != SHARD_MAGIC) {
        fatal("%s: not a token shard (magic %d, expected %d)", path, header[0], SHARD_MAGIC);
    }
    if (header[1] != SHARD_VERSION) {
        fatal("%s: unsupported token shard version %d (expected %d: uint16 tokens)", path, header[1], SHARD_VERSION);
    }
    if (header[2] < 0 || header[3] < 0 || header[3] > 65536) {
        fatal("%s: corrupt token shard header (num tokens %d, vocab %d)", path, header[2], header[3]);
    }
    size_t ntok = (size_t)header[2];
    size_t expected = sizeof(header) + 2 * ntok;
    if (file_bytes != expected) {
        fatal("%s: token shard length %zu bytes, header says %zu tokens = %zu bytes%s", path, file_bytes,
              ntok, expected, file_bytes < expected ? " (truncated)" : "");
    }
    if (vocab_out != NULL) { *vocab_out = header[3] != 0 ? header[3] : GPT2_VOCAB; }
    return ntok;
}

static inline void shard_glob(glob_t* g, const char* pattern, const char* what) {
    int rc = glob(pattern, 0, NULL, g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g->gl_pathc == 0)) {
        fatal("%s: no %s shard matches this pattern", pattern, what);
    }
    if (rc != 0) { fatal("%s: glob failed (code %d)", pattern, rc); }
}

// the vocab size of the data: the header slot of the first shard matching `pattern` (50257 if 0).
// A random-init model takes its vocab from here.
static inline int shard_vocab_size(const char* pattern) {
    glob_t g;
    shard_glob(&g, pattern, "data");
    FILE* fp = fopenCheck(g.gl_pathv[0], "rb");
    int vocab;
    shard_read_header(fp, g.gl_pathv[0], &vocab);
    fcloseCheck(fp, g.gl_pathv[0]);
    globfree(&g);
    return vocab;
}

// every token of the shard must be a valid input of a model with `vocab_size` rows
static inline void shard_check_tokens(FILE* fp, const char* path, size_t ntok, int vocab_size) {
    uint16_t chunk[1 << 15];
    fseekCheck(fp, SHARD_HEADER_INTS * sizeof(int), SEEK_SET, path);
    for (size_t done = 0; done < ntok;) {
        size_t n = ntok - done < (1u << 15) ? ntok - done : (1u << 15);
        freadCheck(chunk, sizeof(uint16_t), n, fp, path);
        for (size_t i = 0; i < n; i++) {
            if (chunk[i] >= vocab_size) {
                fatal("%s: token %d at position %zu is out of range for vocab size %d",
                      path, chunk[i], done + i, vocab_size);
            }
        }
        done += n;
    }
}

static inline void dataloader_enter_shard(DataLoader* loader) {
    int shard = loader->shard_order[loader->shard_pos];
    size_t nb = loader->shard_batches[shard];
    for (size_t i = 0; i < nb; i++) { loader->batch_order[i] = (int)i; }
    if (loader->order == LOADER_CHUNKS) { random_permute(loader->batch_order, nb, &loader->rng); }
    loader->batch_pos = 0;
}

// the permutation of every window, from the stream as it stands; a resume calls this with the saved epoch_rng
static inline void dataloader_permute_windows(DataLoader* loader) {
    size_t n = loader->window_base[loader->num_shards];
    loader->epoch_rng = loader->rng;
    for (size_t i = 0; i < n; i++) { loader->window_order[i] = (int)i; }
    random_permute(loader->window_order, n, &loader->rng);
    loader->window_pos = 0;
}

static inline void dataloader_start_epoch(DataLoader* loader) {
    if (loader->order == LOADER_ROWS) { dataloader_permute_windows(loader); return; }
    for (int i = 0; i < loader->num_shards; i++) { loader->shard_order[i] = i; }
    if (loader->order == LOADER_CHUNKS) { random_permute(loader->shard_order, (size_t)loader->num_shards, &loader->rng); }
    loader->shard_pos = 0;
    dataloader_enter_shard(loader);
}

// rewinds to the first batch of epoch 0 (the val loader before each evaluation)
static inline void dataloader_reset(DataLoader* loader, uint64_t seed) {
    loader->rng = random_state(seed, RNG_DATA_SALT);
    loader->epoch = 0;
    dataloader_start_epoch(loader);
}

// pattern: glob of shards; vocab_size: the model's (tokens must be below it); order: LOADER_*; seed: --seed
static inline void dataloader_init(DataLoader* loader, const char* pattern, int B, int T, int vocab_size,
                                   int order, uint64_t seed) {
    memset(loader, 0, sizeof(*loader));
    loader->B = B;
    loader->T = T;
    loader->order = order;
    shard_glob(&loader->glob_result, pattern, order != LOADER_IN_ORDER ? "train" : "val");
    loader->num_shards = (int)loader->glob_result.gl_pathc;
    loader->shard_batches = (size_t*)mallocCheck(loader->num_shards * sizeof(size_t));
    loader->window_base = (size_t*)mallocCheck((loader->num_shards + 1) * sizeof(size_t));
    size_t bt = (size_t)B * T, max_batches = 0;
    size_t need = order == LOADER_ROWS ? (size_t)T + 1 : bt + 1;  // a shard too short to give anything is bad data
    loader->window_base[0] = 0;
    for (int s = 0; s < loader->num_shards; s++) {
        const char* path = loader->glob_result.gl_pathv[s];
        FILE* fp = fopenCheck(path, "rb");
        size_t ntok = shard_read_header(fp, path, NULL);
        if (ntok < need) {
            fatal("%s: %zu tokens, fewer than one %s needs (%s = %zu)", path, ntok,
                  order == LOADER_ROWS ? "row" : "batch", order == LOADER_ROWS ? "T+1" : "B*T+1", need);
        }
        shard_check_tokens(fp, path, ntok, vocab_size);
        fcloseCheck(fp, path);
        loader->shard_batches[s] = (ntok - 1) / bt;
        loader->window_base[s + 1] = loader->window_base[s] + (ntok - 1) / (size_t)T;
        loader->total_batches += loader->shard_batches[s];
        if (loader->shard_batches[s] > max_batches) { max_batches = loader->shard_batches[s]; }
    }
    loader->shard_order = (int*)mallocCheck(loader->num_shards * sizeof(int));
    loader->batch_order = (int*)mallocCheck((max_batches > 0 ? max_batches : 1) * sizeof(int));
    if (order == LOADER_ROWS) {
        size_t windows = loader->window_base[loader->num_shards];
        if (windows > (size_t)INT32_MAX) {
            fatal("%s: %zu windows of T+1 tokens, more than --rows random can permute (%d); use a longer -t or "
                  "--rows contiguous", pattern, windows, INT32_MAX);
        }
        loader->total_batches = windows / (size_t)B;
        loader->window_order = (int*)mallocCheck(windows * sizeof(int));
        loader->shard_fds = (int*)mallocCheck(loader->num_shards * sizeof(int));
        for (int s = 0; s < loader->num_shards; s++) {
            const char* path = loader->glob_result.gl_pathv[s];
            loader->shard_fds[s] = open(path, O_RDONLY);
            if (loader->shard_fds[s] < 0) { fatal("%s: cannot open token shard (%s)", path, strerror(errno)); }
        }
    }
    loader->buffer = (uint16_t*)mallocCheck((bt + 1) * sizeof(uint16_t));
    loader->inputs = (int*)mallocCheck(bt * sizeof(int));
    loader->targets = (int*)mallocCheck(bt * sizeof(int));
    loader->open_shard = -1;
    dataloader_reset(loader, seed);
}

// the shard holding window w: the last s with window_base[s] <= w
static inline int dataloader_window_shard(const DataLoader* loader, size_t w) {
    int lo = 0, hi = loader->num_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (loader->window_base[mid] <= w) { lo = mid; } else { hi = mid - 1; }
    }
    return lo;
}

// LOADER_ROWS: each row is the next window of the permutation (T+1 tokens read straight from its shard)
static inline void dataloader_next_rows(DataLoader* loader) {
    size_t T = (size_t)loader->T, windows = loader->window_base[loader->num_shards];
    for (int b = 0; b < loader->B; b++) {
        size_t w = (size_t)loader->window_order[loader->window_pos];
        int s = dataloader_window_shard(loader, w);
        const char* path = loader->glob_result.gl_pathv[s];
        off_t at = (off_t)(SHARD_HEADER_INTS * sizeof(int) + (w - loader->window_base[s]) * T * sizeof(uint16_t));
        size_t want = (T + 1) * sizeof(uint16_t);
        ssize_t got = pread(loader->shard_fds[s], loader->buffer, want, at);
        if (got != (ssize_t)want) {
            fatal("%s: read of %zu bytes at offset %lld failed (%s)", path, want, (long long)at,
                  got < 0 ? strerror(errno) : "the file shrank since the run started");
        }
        for (size_t t = 0; t < T; t++) {
            loader->inputs[b * T + t] = loader->buffer[t];
            loader->targets[b * T + t] = loader->buffer[t + 1];
        }
        if (++loader->window_pos == windows) {
            loader->epoch++;
            dataloader_permute_windows(loader);
        }
    }
}

// loads the next batch into inputs/targets and advances; crosses shards and epochs as needed
static inline void dataloader_next_batch(DataLoader* loader) {
    if (loader->order == LOADER_ROWS) { dataloader_next_rows(loader); return; }
    int shard = loader->shard_order[loader->shard_pos];
    const char* path = loader->glob_result.gl_pathv[shard];
    if (loader->open_shard != shard) {
        if (loader->fp != NULL) { fcloseCheck(loader->fp, loader->glob_result.gl_pathv[loader->open_shard]); }
        loader->fp = fopenCheck(path, "rb");
        loader->open_shard = shard;
    }
    size_t bt = (size_t)loader->B * loader->T;
    size_t k = (size_t)loader->batch_order[loader->batch_pos];
    fseekCheck(loader->fp, (long)(SHARD_HEADER_INTS * sizeof(int) + k * bt * sizeof(uint16_t)), SEEK_SET, path);
    freadCheck(loader->buffer, sizeof(uint16_t), bt + 1, loader->fp, path);
    for (size_t i = 0; i < bt; i++) {
        loader->inputs[i] = loader->buffer[i];
        loader->targets[i] = loader->buffer[i + 1];
    }
    loader->batch_pos++;
    if (loader->batch_pos == loader->shard_batches[shard]) {
        loader->shard_pos++;
        if (loader->shard_pos == loader->num_shards) {
            loader->epoch++;
            dataloader_start_epoch(loader);
        } else {
            dataloader_enter_shard(loader);
        }
    }
}

// ----------------------------------------------------------------------------
// position blob for checkpoints (all little-endian, as in memory).
// LOADER_CHUNKS:
//   uint64 rng, int32 epoch, int32 shard_pos (>= 0), uint64 batch_pos, int32 num_shards, int32 max_batches,
//   int32 shard_order[num_shards], int32 batch_order[shard_batches of the current shard]
//   The permutations are stored, not replayed.
// LOADER_ROWS (32 bytes):
//   uint64 epoch_rng, int32 epoch, int32 -1 (marks this layout), uint64 window_pos, uint64 windows
//   The epoch's permutation is replayed from epoch_rng: the stream is used for nothing else.

#define DATALOADER_ROWS_MARK (-1)
#define DATALOADER_ROWS_STATE 32

static inline size_t dataloader_state_size(const DataLoader* loader) {
    if (loader->order == LOADER_ROWS) { return DATALOADER_ROWS_STATE; }
    size_t nb = loader->shard_batches[loader->shard_order[loader->shard_pos]];
    return 8 + 4 + 4 + 8 + 4 + 4 + 4 * (size_t)loader->num_shards + 4 * nb;
}

// the largest blob any position can need: a buffer of this size is allocated once at start-up
static inline size_t dataloader_state_max_size(const DataLoader* loader) {
    if (loader->order == LOADER_ROWS) { return DATALOADER_ROWS_STATE; }
    size_t max_batches = 0;
    for (int s = 0; s < loader->num_shards; s++) {
        if (loader->shard_batches[s] > max_batches) { max_batches = loader->shard_batches[s]; }
    }
    return 32 + 4 * (size_t)loader->num_shards + 4 * max_batches;
}

// for the state header's llm.c slots: the shard (in glob order) of the next batch and that batch's index in
// it (rows: the next row's shard and window)
static inline size_t dataloader_shard_index(const DataLoader* l) {
    if (l->order == LOADER_ROWS) { return (size_t)dataloader_window_shard(l, (size_t)l->window_order[l->window_pos]); }
    return (size_t)l->shard_order[l->shard_pos];
}
static inline size_t dataloader_batch_index(const DataLoader* l) {
    if (l->order == LOADER_ROWS) {
        size_t w = (size_t)l->window_order[l->window_pos];
        return w - l->window_base[dataloader_window_shard(l, w)];
    }
    return (size_t)l->batch_order[l->batch_pos];
}

static inline void dataloader_state_save(const DataLoader* loader, unsigned char* out) {
    if (loader->order == LOADER_ROWS) {
        int32_t mark = DATALOADER_ROWS_MARK;
        uint64_t pos = loader->window_pos, windows = loader->window_base[loader->num_shards];
        memcpy(out, &loader->epoch_rng, 8);
        memcpy(out + 8, &loader->epoch, 4);
        memcpy(out + 12, &mark, 4);
        memcpy(out + 16, &pos, 8);
        memcpy(out + 24, &windows, 8);
        return;
    }
    size_t nb = loader->shard_batches[loader->shard_order[loader->shard_pos]];
    int32_t ns = loader->num_shards, nbi = (int32_t)nb;
    uint64_t bp = loader->batch_pos;
    memcpy(out, &loader->rng, 8); out += 8;
    memcpy(out, &loader->epoch, 4); out += 4;
    memcpy(out, &loader->shard_pos, 4); out += 4;
    memcpy(out, &bp, 8); out += 8;
    memcpy(out, &ns, 4); out += 4;
    memcpy(out, &nbi, 4); out += 4;
    memcpy(out, loader->shard_order, 4 * (size_t)ns); out += 4 * (size_t)ns;
    memcpy(out, loader->batch_order, 4 * nb);
}

// whether a[0..n) holds each of 0..n-1 once (a repeated batch would train on some data twice, silently)
static inline int is_permutation(const int32_t* a, int n) {
    unsigned char* seen = (unsigned char*)callocCheck((size_t)n + 1, 1);  // at resume only
    int ok = 1;
    for (int i = 0; i < n && ok; i++) {
        ok = a[i] >= 0 && a[i] < n && !seen[a[i]];
        if (ok) { seen[a[i]] = 1; }
    }
    free(seen);
    return ok;
}

// restores a position saved by dataloader_state_save over the same shards, (B, T) and --rows;
// `source` names the checkpoint file for error messages
static inline void dataloader_state_load(DataLoader* loader, const unsigned char* in, size_t size,
                                         const char* source) {
    if (size < 32) { fatal("%s: data loader state too short (%zu bytes)", source, size); }
    uint64_t rng, bp;
    int32_t epoch, shard_pos, ns, nb;
    memcpy(&rng, in, 8); memcpy(&epoch, in + 8, 4); memcpy(&shard_pos, in + 12, 4);
    memcpy(&bp, in + 16, 8); memcpy(&ns, in + 24, 4); memcpy(&nb, in + 28, 4);
    int saved_rows = shard_pos == DATALOADER_ROWS_MARK;
    if (saved_rows != (loader->order == LOADER_ROWS)) {
        const char* saved = saved_rows ? "random" : "contiguous";
        fatal("%s: the checkpoint's data position is for --rows %s, this run reads --rows %s (resume with --rows %s)",
              source, saved, loader->order == LOADER_ROWS ? "random" : "contiguous", saved);
    }
    if (saved_rows) {
        uint64_t windows;
        memcpy(&windows, in + 24, 8);
        if (size != DATALOADER_ROWS_STATE) { fatal("%s: data loader state has the wrong size", source); }
        if (windows != loader->window_base[loader->num_shards] || bp >= windows || epoch < 0) {
            fatal("%s: data loader state does not match the data (%llu windows saved, the data has %zu: "
                  "different shards or -t?)", source, (unsigned long long)windows, loader->window_base[loader->num_shards]);
        }
        loader->rng = rng;
        loader->epoch = epoch;
        dataloader_permute_windows(loader);
        loader->window_pos = (size_t)bp;
        return;
    }
    if (ns != loader->num_shards || shard_pos < 0 || shard_pos >= ns) {
        fatal("%s: data loader state is for %d shards, the data has %d (same -i pattern needed to resume)",
              source, ns, loader->num_shards);
    }
    if (size != 32 + 4 * (size_t)ns + 4 * (size_t)nb) { fatal("%s: data loader state has the wrong size", source); }
    const int32_t* order = (const int32_t*)(in + 32);
    if (epoch < 0 || !is_permutation(order, ns)) {
        fatal("%s: corrupt data loader state (epoch %d, shard order)", source, epoch);
    }
    if ((size_t)nb != loader->shard_batches[order[shard_pos]] || bp >= (uint64_t)nb) {
        fatal("%s: data loader state does not match the data (different shards or -b/-t?)", source);
    }
    const int32_t* border = order + ns;
    if (!is_permutation(border, nb)) { fatal("%s: corrupt data loader state (batch order)", source); }
    loader->rng = rng;
    loader->epoch = epoch;
    loader->shard_pos = shard_pos;
    loader->batch_pos = (size_t)bp;
    memcpy(loader->shard_order, order, 4 * (size_t)ns);
    memcpy(loader->batch_order, border, 4 * (size_t)nb);
}

static inline void dataloader_free(DataLoader* loader) {
    if (loader->fp != NULL) { fclose(loader->fp); }
    if (loader->shard_fds != NULL) {
        for (int s = 0; s < loader->num_shards; s++) { close(loader->shard_fds[s]); }
    }
    globfree(&loader->glob_result);
    free(loader->shard_batches);
    free(loader->window_base);
    free(loader->window_order);
    free(loader->shard_fds);
    free(loader->shard_order);
    free(loader->batch_order);
    free(loader->buffer);
    free(loader->inputs);
    free(loader->targets);
}

#endif // LLMC_DATALOADER_H
