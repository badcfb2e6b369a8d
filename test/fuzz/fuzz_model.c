/*
 * test/fuzz/fuzz_model.c — the model checkpoint loader (gpt2_build_from_checkpoint in train_gpt2.c,
 * llmc/checkpoint.h) on hostile files. The input is a model file. An accepted model must hold only
 * finite weights, and must run a forward pass (B=1, T<=4) with a finite loss bound: the loader's
 * checks are what stand between a damaged file and out-of-bounds reads in the kernels.
 */
#define TESTING
#include "test/fuzz/fuzz.h"
#include "train_gpt2.c"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_input(data, size);
    if (fuzz_begin()) {
        GPT2 model;
        memset(&model, 0, sizeof(model));
        gpt2_build_from_checkpoint(&model, path);
        for (size_t i = 0; i < model.num_parameters; i++) {
            if (!isfinite(model.params_memory[i])) { fprintf(stderr, "non-finite weight accepted\n"); abort(); }
        }
        // a forward pass only on models small enough to keep the fuzzer fast
        if (model.num_parameters < (1u << 16)) {
            int T = model.config.max_seq_len < 4 ? model.config.max_seq_len : 4;
            int inputs[4], targets[4];
            for (int t = 0; t < T; t++) {
                inputs[t] = t % model.config.vocab_size;
                targets[t] = (t + 1) % model.config.vocab_size;
            }
            gpt2_allocate(&model, 1, T);
            gpt2_forward(&model, inputs, targets, 1, T);
        }
        gpt2_free(&model);
    }
    fuzz_end();
    return 0;
}
