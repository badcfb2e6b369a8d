// Tests of llmc/dataloader.h: the batch order of docs/formats.md, epochs, the val loader, the checkpoint
// blob, and every kind of bad shard (one-line error naming the file, exit 1).
#include "llmc/dataloader.h"
#include "trainer_test_util.h"

#define B 2
#define T 4
#define BT (B * T)

// shard s has token i = s*1000 + i, so a batch tells where it came from
static void write_numbered_shard(const char* path, int s, size_t n) {
    uint16_t* tok = malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) { tok[i] = (uint16_t)(s * 1000 + i); }
    write_shard_raw(path, 20240520, 1, (int)n, 5000, tok, n);
    free(tok);
}

static char dir[256], pattern[512];
static const size_t shard_tokens[3] = {BT * 5 + 1, BT * 3 + 3, BT * 4 + 1};  // 5, 3, 4 batches

static void setup_shards(void) {
    make_temp_dir(dir, sizeof(dir));
    for (int s = 0; s < 3; s++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/train_%06d.bin", dir, s);
        write_numbered_shard(path, s, shard_tokens[s]);
    }
    snprintf(pattern, sizeof(pattern), "%s/train_*.bin", dir);
}
static void teardown_shards(void) { rm_rf(dir); }

TestSuite(dataloader, .init = setup_shards, .fini = teardown_shards);

// replays that order independently: per epoch, permute shards, then each shard's batches on entry
Test(dataloader, train_order_follows_contract_over_three_epochs) {
    uint64_t seed = 1337;
    DataLoader loader;
    dataloader_init(&loader, pattern, B, T, 5000, 1, seed);
    cr_assert_eq(loader.total_batches, 12);
    uint64_t rng = seed ^ 0xD1B54A32D192ED03ull;
    for (int epoch = 0; epoch < 3; epoch++) {
        int shards[3] = {0, 1, 2};
        for (int i = 2; i > 0; i--) { int j = random_u32(&rng) % (i + 1); int t = shards[i]; shards[i] = shards[j]; shards[j] = t; }
        for (int si = 0; si < 3; si++) {
            int s = shards[si];
            int nb = (int)((shard_tokens[s] - 1) / BT);
            int order[8];
            for (int i = 0; i < nb; i++) { order[i] = i; }
            for (int i = nb - 1; i > 0; i--) { int j = random_u32(&rng) % (i + 1); int t = order[i]; order[i] = order[j]; order[j] = t; }
            for (int k = 0; k < nb; k++) {
                dataloader_next_batch(&loader);
                int base = s * 1000 + order[k] * BT;
                for (int i = 0; i < BT; i++) {
                    cr_assert_eq(loader.inputs[i], base + i, "epoch %d shard %d batch %d pos %d", epoch, s, order[k], i);
                    cr_assert_eq(loader.targets[i], base + i + 1);
                }
            }
        }
    }
    cr_assert_eq(loader.epoch, 3);
    dataloader_free(&loader);
}

Test(dataloader, different_seeds_give_different_orders) {
    DataLoader a, b;
    dataloader_init(&a, pattern, B, T, 5000, 1, 1);
    dataloader_init(&b, pattern, B, T, 5000, 1, 2);
    int differ = 0;
    for (int i = 0; i < 12; i++) {
        dataloader_next_batch(&a);
        dataloader_next_batch(&b);
        differ += a.inputs[0] != b.inputs[0];
    }
    cr_assert_gt(differ, 0);
    dataloader_free(&a);
    dataloader_free(&b);
}

Test(dataloader, val_loader_reads_in_order_and_resets) {
    DataLoader val;
    dataloader_init(&val, pattern, B, T, 5000, 0, 99);
    for (int round = 0; round < 2; round++) {
        dataloader_reset(&val, 99);
        for (int s = 0; s < 3; s++) {
            int nb = (int)((shard_tokens[s] - 1) / BT);
            for (int k = 0; k < nb; k++) {
                dataloader_next_batch(&val);
                cr_assert_eq(val.inputs[0], s * 1000 + k * BT);
                cr_assert_eq(val.targets[BT - 1], s * 1000 + k * BT + BT);
            }
        }
    }
    dataloader_free(&val);
}

Test(dataloader, state_blob_restores_the_position) {
    DataLoader a, b;
    dataloader_init(&a, pattern, B, T, 5000, 1, 7);
    for (int i = 0; i < 17; i++) { dataloader_next_batch(&a); }  // into the second epoch
    unsigned char blob[1024];
    cr_assert_leq(dataloader_state_size(&a), dataloader_state_max_size(&a));
    dataloader_state_save(&a, blob);
    dataloader_init(&b, pattern, B, T, 5000, 1, 12345);  // another seed: everything must come from the blob
    dataloader_state_load(&b, blob, dataloader_state_size(&a), "blob");
    for (int i = 0; i < 30; i++) {
        dataloader_next_batch(&a);
        dataloader_next_batch(&b);
        cr_assert_arr_eq(a.inputs, b.inputs, BT * sizeof(int), "batch %d after restore", i);
    }
    dataloader_free(&a);
    dataloader_free(&b);
}

Test(dataloader, vocab_size_comes_from_the_header) {
    char path[512];
    join_path(path, sizeof(path), dir, "v0.bin");
    write_shard(path, 100, 50257, 0);
    uint16_t tok[20] = {0};
    write_shard_raw(path, 20240520, 1, 20, 0, tok, 20);
    cr_assert_eq(shard_vocab_size(path), 50257, "vocab slot 0 means GPT-2's 50257");
    write_shard_raw(path, 20240520, 1, 20, 300, tok, 20);
    cr_assert_eq(shard_vocab_size(path), 300);
}

// ---- bad shards: each one line on stderr naming the file, exit 1

static char bad_path[512];
static void open_bad(void* arg) {
    (void)arg;
    DataLoader l;
    dataloader_init(&l, bad_path, B, T, 300, 1, 1);
}

static void expect_bad(const char* needle) {
    RunResult r = run_fn(open_bad, NULL);
    assert_one_line_error(&r, bad_path);
    assert_one_line_error(&r, needle);
}

Test(dataloader, token_at_or_above_vocab_is_rejected) {
    join_path(bad_path, sizeof(bad_path), dir, "bad.bin");
    uint16_t tok[64];
    for (int i = 0; i < 64; i++) { tok[i] = (uint16_t)i; }
    tok[40] = 300;  // the model's vocab is 300
    write_shard_raw(bad_path, 20240520, 1, 64, 300, tok, 64);
    expect_bad("out of range");
}

Test(dataloader, shard_smaller_than_one_batch_is_rejected) {
    join_path(bad_path, sizeof(bad_path), dir, "small.bin");
    uint16_t tok[BT] = {0};
    write_shard_raw(bad_path, 20240520, 1, BT, 300, tok, BT);  // needs B*T+1
    expect_bad("fewer than one batch");
}

Test(dataloader, truncated_shard_is_rejected) {
    join_path(bad_path, sizeof(bad_path), dir, "trunc.bin");
    uint16_t tok[64] = {0};
    write_shard_raw(bad_path, 20240520, 1, 100, 300, tok, 64);  // header says 100 tokens, 64 present
    expect_bad("truncated");
}

Test(dataloader, header_only_shard_is_rejected) {
    join_path(bad_path, sizeof(bad_path), dir, "hdr.bin");
    write_bytes(bad_path, "abc", 3);
    expect_bad("truncated");
}

Test(dataloader, empty_shard_is_rejected) {
    join_path(bad_path, sizeof(bad_path), dir, "empty.bin");
    write_bytes(bad_path, "", 0);
    expect_bad("truncated");
}

Test(dataloader, wrong_magic_is_rejected) {
    join_path(bad_path, sizeof(bad_path), dir, "magic.bin");
    uint16_t tok[64] = {0};
    write_shard_raw(bad_path, 20240326, 1, 64, 300, tok, 64);
    expect_bad("magic");
}

Test(dataloader, wrong_version_is_rejected) {
    join_path(bad_path, sizeof(bad_path), dir, "version.bin");
    uint16_t tok[64] = {0};
    write_shard_raw(bad_path, 20240520, 2, 64, 300, tok, 64);
    expect_bad("version");
}

Test(dataloader, pattern_without_match_is_rejected) {
    join_path(bad_path, sizeof(bad_path), dir, "nothing_*.bin");
    expect_bad("no train shard");
}
