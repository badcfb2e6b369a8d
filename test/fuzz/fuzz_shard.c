/*
 * test/fuzz/fuzz_shard.c — the token shard reader (llmc/dataloader.h) on hostile files.
 * The input is a shard file. It goes through the trainer's start-up path: shard_vocab_size (header),
 * dataloader_init (header, length, at least one batch, every token below the vocab), then a full epoch
 * of shuffled batches in each train layout (--rows contiguous and random), checking that every input and
 * target id the model would see is in range, and a save/restore of the loader position.
 */
#include "test/fuzz/fuzz.h"
#include "llmc/dataloader.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_input(data, size);
    if (fuzz_begin()) {
        int vocab = shard_vocab_size(path);
        for (int order = LOADER_CHUNKS; order <= LOADER_ROWS; order++) {
            DataLoader loader;
            dataloader_init(&loader, path, 1, 4, vocab, order, 1337);
            unsigned char blob[4096];
            for (size_t b = 0; b < loader.total_batches; b++) {
                dataloader_next_batch(&loader);
                for (int i = 0; i < loader.B * loader.T; i++) {
                    if (loader.inputs[i] < 0 || loader.inputs[i] >= vocab || loader.targets[i] < 0 ||
                        loader.targets[i] >= vocab) {
                        fprintf(stderr, "token out of range after validation\n");
                        abort();
                    }
                }
                size_t n = dataloader_state_size(&loader);
                if (n <= sizeof(blob)) {
                    dataloader_state_save(&loader, blob);
                    dataloader_state_load(&loader, blob, n, path);
                }
            }
            dataloader_free(&loader);
        }
    }
    fuzz_end();
    return 0;
}
