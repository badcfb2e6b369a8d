/*
 * test/fuzz/fuzz_state.c — the training-state loader (state_read in llmc/checkpoint.h) and the data
 * loader position it carries (dataloader_state_load) on hostile files, as a resume reads them.
 * The input is a state file. The model size it is checked against is the header's own claim when the
 * file is long enough to hold it, and a mismatching size otherwise, so both paths are exercised.
 * The position is restored into loaders over two fixed shards (3 and 5 batches of B=1, T=4), one of each
 * train layout (--rows contiguous, --rows random).
 */
#include "test/fuzz/fuzz.h"
#include "llmc/checkpoint.h"
#include "llmc/dataloader.h"

static DataLoader loader, rows_loader;

static void make_shards(void) {
    char pattern[256], path[256];
    snprintf(pattern, sizeof(pattern), "/tmp/llmc_fuzz_state_%d_*.bin", (int)getpid());
    for (int s = 0; s < 2; s++) {
        snprintf(path, sizeof(path), "/tmp/llmc_fuzz_state_%d_%d.bin", (int)getpid(), s);
        int header[256] = {SHARD_MAGIC, SHARD_VERSION, s == 0 ? 13 : 21, 256};
        uint16_t tokens[21];
        for (int i = 0; i < 21; i++) { tokens[i] = (uint16_t)(i * 7 % 256); }
        FILE* fp = fopen(path, "wb");
        fwrite(header, sizeof(int), 256, fp);
        fwrite(tokens, sizeof(uint16_t), (size_t)header[2], fp);
        fclose(fp);
    }
    dataloader_init(&loader, pattern, 1, 4, 256, LOADER_CHUNKS, 1337);
    dataloader_init(&rows_loader, pattern, 1, 4, 256, LOADER_ROWS, 1337);
    for (int s = 0; s < 2; s++) {  // the loader read them at init and keeps only the names
        snprintf(path, sizeof(path), "/tmp/llmc_fuzz_state_%d_%d.bin", (int)getpid(), s);
        unlink(path);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (loader.num_shards == 0) { make_shards(); }
    const char* path = fuzz_write_input(data, size);
    size_t fits = size > 1024 ? (size - 1024) / 8 : 0;
    size_t claimed = 0;
    if (size >= 1024) { memcpy(&claimed, data + 40 * 4, sizeof(claimed)); }
    size_t P = claimed <= fits ? claimed : fits + 1;
    float* m = malloc((P + 1) * sizeof(float));
    float* v = malloc((P + 1) * sizeof(float));
    if (fuzz_begin()) {
        TrainState state;
        unsigned char* blob;
        size_t blob_bytes;
        state_read(path, &state, P, m, v, &blob, &blob_bytes);
        if (blob_bytes >= 16 && (int32_t)(blob[12] | blob[13] << 8 | blob[14] << 16 | (uint32_t)blob[15] << 24) == -1) {
            dataloader_state_load(&rows_loader, blob, blob_bytes, path);  // the rows layout's mark
        } else {
            dataloader_state_load(&loader, blob, blob_bytes, path);
        }
        free(blob);
    }
    fuzz_end();
    free(m);
    free(v);
    return 0;
}
