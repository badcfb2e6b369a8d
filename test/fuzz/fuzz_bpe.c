/*
 * test/fuzz/fuzz_bpe.c — the BPE encoder (llmc/bpe.h, GPT-2's real vocabulary) on arbitrary bytes.
 * Every byte string must encode to ids inside the vocabulary that decode back to exactly those bytes,
 * and encoding must not depend on what was encoded before (the word cache): a second encoding of the
 * same input, after the cache has seen it, must give the same ids. The heap merge must equal the simple
 * merge loop (encoder.py's) on the whole input taken as one piece. Run from the repository root.
 */
#include "test/fuzz/fuzz.h"
#include "llmc/bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static BPETokenizer t;
    if (t.vocab_size == 0) { bpe_init(&t, "data/gpt2"); }
    if (fuzz_begin()) {
        BPEIds first = {0}, second = {0};
        bpe_encode(&t, data, size, &first);
        bpe_encode(&t, data, size, &second);
        size_t at = 0;
        for (size_t i = 0; i < first.n; i++) {
            if (first.ids[i] < 0 || first.ids[i] >= t.vocab_size) { fprintf(stderr, "id %d outside the vocab\n", first.ids[i]); abort(); }
            size_t len;
            const uint8_t* bytes = bpe_token_bytes(&t, first.ids[i], &len);
            if (at + len > size || memcmp(bytes, data + at, len) != 0) { fprintf(stderr, "decode(encode(x)) != x at byte %zu\n", at); abort(); }
            at += len;
        }
        if (at != size) { fprintf(stderr, "decode(encode(x)) is %zu bytes, x is %zu\n", at, size); abort(); }
        if (first.n != second.n || (first.n > 0 && memcmp(first.ids, second.ids, first.n * sizeof(int)) != 0)) {
            fprintf(stderr, "second encoding differs (word cache)\n");
            abort();
        }
        bpe_ids_free(&first);
        bpe_ids_free(&second);
        if (size > 0 && size <= 4096) {
            bpe_reserve_scratch(&t, size);
            for (size_t k = 0; k < size; k++) { t.sym[k] = t.byte_token[data[k]]; }
            size_t a = bpe_merge_simple(&t, size);
            int* simple = (int*)malloc(a * sizeof(int));
            memcpy(simple, t.sym, a * sizeof(int));
            for (size_t k = 0; k < size; k++) { t.sym[k] = t.byte_token[data[k]]; }
            size_t b = bpe_merge_heap(&t, size);
            if (a != b || memcmp(simple, t.sym, a * sizeof(int)) != 0) { fprintf(stderr, "heap merge != simple merge\n"); abort(); }
            free(simple);
        }
    }
    fuzz_end();
    return 0;
}
