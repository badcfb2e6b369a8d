/*
 * test/fuzz/fuzz_tokenizer.c — llm.c's gpt2_tokenizer.bin reader (llmc/tokenizer.h) on hostile files.
 * The input is a tokenizer file; an accepted one must decode every id in range and NULL outside it.
 */
#include "test/fuzz/fuzz.h"
#include "llmc/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static FILE* sink;
    if (sink == NULL) { sink = fopen("/dev/null", "w"); }
    const char* path = fuzz_write_input(data, size);
    if (fuzz_begin()) {
        Tokenizer tok;
        tokenizer_init(&tok, path);
        if (tok.init_ok) {
            for (uint32_t id = 0; id < tok.vocab_size; id++) { tokenizer_print(&tok, id, sink); }
            if (tokenizer_decode(&tok, tok.vocab_size) != NULL) { fprintf(stderr, "decoded an id past the vocab\n"); abort(); }
        }
        tokenizer_free(&tok);
    }
    fuzz_end();
    return 0;
}
