/*
 * test/fuzz/fuzz_vocab.c — the vocabulary loaders of the BPE tokenizer (llmc/bpe.h) on hostile files:
 * encoder.json (bpe_load_encoder) when the input's first byte is even, vocab.bpe (bpe_load_merges,
 * against GPT-2's real encoder.json, loaded once) when it is odd; the rest of the input is the file.
 * Run from the repository root (data/gpt2/ holds the real vocabulary).
 */
#include "test/fuzz/fuzz.h"
#include "llmc/bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static BPETokenizer gpt2;   // encoder.json only: the merges loader's input
    static int cp_to_byte[324];
    if (gpt2.vocab_size == 0) {
        uint32_t byte_to_cp[256];
        bpe_bytes_to_unicode(byte_to_cp);
        for (int i = 0; i < 324; i++) { cp_to_byte[i] = -1; }
        for (int b = 0; b < 256; b++) { cp_to_byte[byte_to_cp[b]] = b; }
        bpe_load_encoder(&gpt2, "data/gpt2/encoder.json", cp_to_byte);
    }
    if (size == 0) { return 0; }
    const char* path = fuzz_write_input(data + 1, size - 1);
    if (fuzz_begin()) {
        if (data[0] % 2 == 0) {
            BPETokenizer t;
            memset(&t, 0, sizeof(t));
            bpe_load_encoder(&t, path, cp_to_byte);
            bpe_free(&t);
        } else {
            BPETokenizer t = gpt2;  // shares the vocabulary tables; only t.merges is new
            bpe_load_merges(&t, path, cp_to_byte);
            free(t.merges);
        }
    }
    fuzz_end();
    return 0;
}
