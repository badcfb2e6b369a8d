/*
 * data/shard.h — llm.c token shards: writing them (split into files of at most N tokens) and
 * reading them back with full validation.
 * Format: int32 header[256] = {20240520, 1 (uint16 tokens), number of tokens, vocab size, 0...},
 * then the tokens as little-endian uint16. Shards are named <dir>/<split>_%06d.bin and written
 * atomically, so a reader sees a whole shard or none.
 */
#ifndef DATA_SHARD_H
#define DATA_SHARD_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"
#include "llmc/dataloader.h"

// ----------------------------------------------------------------------------
// writer: tokens accumulate in a buffer of one shard; a full buffer becomes the next file

typedef struct {
    char dir[4096];
    char split[64];        // "train" or "val": the file name prefix
    int vocab_size;        // written to header[3]
    uint16_t* buf;         // (shard_tokens)
    size_t shard_tokens;   // tokens per file, at most INT32_MAX (the header counts in int32)
    size_t n;              // tokens in buf
    int shards_written;
    size_t tokens_written;
} ShardWriter;

static inline void shard_path(char* out, size_t size, const char* dir, const char* split, int index) {
    if (snprintf(out, size, "%s/%s_%06d.bin", dir, split, index) >= (int)size) {
        fatal("%s: output path too long", dir);
    }
}

static inline void shard_writer_init(ShardWriter* w, const char* dir, const char* split,
                                     size_t shard_tokens, int vocab_size) {
    memset(w, 0, sizeof(*w));
    snprintf(w->dir, sizeof(w->dir), "%s", dir);
    snprintf(w->split, sizeof(w->split), "%s", split);
    if (shard_tokens == 0 || shard_tokens > INT32_MAX) {
        fatal("shard size must be between 1 and %d tokens, got %zu", INT32_MAX, shard_tokens);
    }
    w->shard_tokens = shard_tokens;
    w->vocab_size = vocab_size;
    w->buf = (uint16_t*)mallocCheck(shard_tokens * sizeof(uint16_t));
}

static inline void shard_writer_flush(ShardWriter* w) {
    if (w->n == 0) { return; }
    char path[4200];
    shard_path(path, sizeof(path), w->dir, w->split, w->shards_written);
    int header[SHARD_HEADER_INTS] = {0};
    header[0] = SHARD_MAGIC;
    header[1] = SHARD_VERSION;
    header[2] = (int)w->n;
    header[3] = w->vocab_size;
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, header, sizeof(int), SHARD_HEADER_INTS);
    atomic_write(&af, w->buf, sizeof(uint16_t), w->n);
    atomic_commit(&af);
    w->shards_written++;
    w->tokens_written += w->n;
    w->n = 0;
}

static inline void shard_writer_push(ShardWriter* w, const int* ids, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= w->vocab_size) { fatal("token id %d outside the vocabulary", ids[i]); }
        w->buf[w->n++] = (uint16_t)ids[i];
        if (w->n == w->shard_tokens) { shard_writer_flush(w); }
    }
}

// writes the last partial shard; returns the number of shard files written
static inline int shard_writer_close(ShardWriter* w) {
    shard_writer_flush(w);
    free(w->buf);
    w->buf = NULL;
    return w->shards_written;
}

// ----------------------------------------------------------------------------
// reader: the whole shard, validated (magic, version, length, token range)

typedef struct {
    uint16_t* tokens;  // (num_tokens)
    size_t num_tokens;
    int vocab_size;    // header[3], or 50257 when 0 (llm.c's older shards)
} Shard;

static inline void shard_read(Shard* s, const char* path) {
    FILE* fp = fopenCheck(path, "rb");
    s->num_tokens = shard_read_header(fp, path, &s->vocab_size);
    shard_check_tokens(fp, path, s->num_tokens, s->vocab_size);
    fseekCheck(fp, SHARD_HEADER_INTS * sizeof(int), SEEK_SET, path);
    s->tokens = (uint16_t*)mallocCheck(s->num_tokens * sizeof(uint16_t));
    if (s->num_tokens > 0) { freadCheck(s->tokens, sizeof(uint16_t), s->num_tokens, fp, path); }
    fcloseCheck(fp, path);
}

static inline void shard_free(Shard* s) { free(s->tokens); s->tokens = NULL; s->num_tokens = 0; }

#endif // DATA_SHARD_H
