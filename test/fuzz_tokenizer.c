/*
 * test/fuzz_tokenizer.c — libFuzzer harness for llmc/bpe.h (`make fuzz-tokenizer`, clang, from the repo root).
 * For any byte string: ids lie in the vocabulary and below <|endoftext|>, decoding gives the bytes back,
 * and the heap merge equals encoder.py's merge loop on the whole input taken as one piece.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/bpe.h"

static BPETokenizer tok;
static int ready = 0;

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    if (!ready) { bpe_init(&tok, "data/gpt2"); ready = 1; }
    BPEIds ids = {0};
    bpe_encode(&tok, data, n, &ids);
    size_t off = 0;
    for (size_t k = 0; k < ids.n; k++) {
        if (ids.ids[k] < 0 || ids.ids[k] >= BPE_EOT) { abort(); }
        size_t len;
        const uint8_t* b = bpe_token_bytes(&tok, ids.ids[k], &len);
        if (off + len > n || memcmp(data + off, b, len) != 0) { abort(); }
        off += len;
    }
    if (off != n) { abort(); }
    bpe_ids_free(&ids);
    if (n > 0 && n <= 4096) {
        bpe_reserve_scratch(&tok, n);
        for (size_t k = 0; k < n; k++) { tok.sym[k] = tok.byte_token[data[k]]; }
        size_t a = bpe_merge_simple(&tok, n);
        int* simple = (int*)malloc(a * sizeof(int));
        memcpy(simple, tok.sym, a * sizeof(int));
        for (size_t k = 0; k < n; k++) { tok.sym[k] = tok.byte_token[data[k]]; }
        size_t b = bpe_merge_heap(&tok, n);
        if (a != b || memcmp(simple, tok.sym, a * sizeof(int)) != 0) { abort(); }
        free(simple);
    }
    return 0;
}
