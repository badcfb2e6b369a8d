/*
 * bench_tokenizer — encoding speed of llmc/bpe.h on one core, in MB of UTF-8 text per second.
 * The text is a shard decoded back to documents (the default corpus: English prose), so the benchmark
 * needs no extra files. Reports the first pass (empty word cache) and the best of later passes, and
 * checks that re-encoding reproduces the shard's tokens exactly.
 * usage: build/bench_tokenizer SHARD [passes]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "llmc/utils.h"
#include "llmc/bpe.h"
#include "data/shard.h"

int main(int argc, char** argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s SHARD [passes]\n", argv[0]); return 1; }
    int passes = argc > 2 ? atoi(argv[2]) : 5;
    if (passes < 2) { fatal("passes must be at least 2, got '%s'", argv[2]); }
    BPETokenizer tok;
    bpe_init(&tok, "data/gpt2");
    Shard shard;
    shard_read(&shard, argv[1]);
    // documents: the text between <|endoftext|> tokens, concatenated; doc_start[d] is the byte offset
    size_t total = 0, num_docs = 0;
    for (size_t i = 0; i < shard.num_tokens; i++) {
        size_t len;
        if (shard.tokens[i] == BPE_EOT) { num_docs++; } else { bpe_token_bytes(&tok, shard.tokens[i], &len); total += len; }
    }
    uint8_t* text = (uint8_t*)mallocCheck(total);
    size_t* doc_start = (size_t*)mallocCheck((num_docs + 1) * sizeof(size_t));
    size_t off = 0, d = 0;
    for (size_t i = 0; i < shard.num_tokens; i++) {
        if (shard.tokens[i] == BPE_EOT) { doc_start[d++] = off; continue; }
        size_t len;
        const uint8_t* b = bpe_token_bytes(&tok, shard.tokens[i], &len);
        memcpy(text + off, b, len);
        off += len;
    }
    doc_start[num_docs] = total;
    BPEIds ids = {0};
    bpe_ids_reserve(&ids, shard.num_tokens);
    double first = 0, best = 1e30;
    for (int p = 0; p < passes; p++) {
        if (p == 0) { bpe_cache_clear(&tok); }
        ids.n = 0;
        double t0 = clock_seconds();
        for (size_t k = 0; k < num_docs; k++) {
            ids.ids[ids.n++] = BPE_EOT;
            bpe_encode(&tok, text + doc_start[k], doc_start[k + 1] - doc_start[k], &ids);
        }
        double dt = clock_seconds() - t0;
        if (p == 0) { first = dt; } else if (dt < best) { best = dt; }
        if (ids.n != shard.num_tokens) { fatal("re-encoding gave %zu tokens, the shard has %zu", ids.n, shard.num_tokens); }
        for (size_t i = 0; i < ids.n; i++) {
            if (ids.ids[i] != shard.tokens[i]) { fatal("re-encoding differs from the shard at token %zu", i); }
        }
    }
    printf("bench_tokenizer: %s: %zu documents, %.2f MB, %zu tokens\n", argv[1], num_docs, total / 1e6, shard.num_tokens);
    printf("  first pass (empty word cache): %7.1f MB/s  (%.3f s)\n", total / 1e6 / first, first);
    printf("  best of %d warm passes:         %7.1f MB/s  (%.3f s)\n", passes - 1, total / 1e6 / best, best);
    bpe_ids_free(&ids);
    free(text); free(doc_start);
    shard_free(&shard);
    bpe_free(&tok);
    return 0;
}
