// Tests of llmc/dataloader.h: both train layouts' order (docs/formats.md), epochs, the val loader, the
// checkpoint blob, and every kind of bad shard (one-line error naming the file, exit 1).
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
    dataloader_init(&loader, pattern, B, T, 5000, LOADER_CHUNKS, seed);
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
    dataloader_init(&a, pattern, B, T, 5000, LOADER_CHUNKS, 1);
    dataloader_init(&b, pattern, B, T, 5000, LOADER_CHUNKS, 2);
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
    dataloader_init(&val, pattern, B, T, 5000, LOADER_IN_ORDER, 99);
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
    dataloader_init(&a, pattern, B, T, 5000, LOADER_CHUNKS, 7);
    for (int i = 0; i < 17; i++) { dataloader_next_batch(&a); }  // into the second epoch
    unsigned char blob[1024];
    cr_assert_leq(dataloader_state_size(&a), dataloader_state_max_size(&a));
    dataloader_state_save(&a, blob);
    dataloader_init(&b, pattern, B, T, 5000, LOADER_CHUNKS, 12345);  // another seed: everything must come from the blob
    dataloader_state_load(&b, blob, dataloader_state_size(&a), "blob");
    for (int i = 0; i < 30; i++) {
        dataloader_next_batch(&a);
        dataloader_next_batch(&b);
        cr_assert_arr_eq(a.inputs, b.inputs, BT * sizeof(int), "batch %d after restore", i);
    }
    dataloader_free(&a);
    dataloader_free(&b);
}

// ---- --rows random: every window of T+1 tokens of every shard, permuted per epoch, B of them per batch

// windows per shard: (tokens - 1) / T
static size_t shard_windows(int s) { return (shard_tokens[s] - 1) / T; }
static size_t all_windows(void) { return shard_windows(0) + shard_windows(1) + shard_windows(2); }

// the first token of window w of the numbered shards (window w: shard s, offset (w - base_s) * T)
static int window_first_token(size_t w) {
    for (int s = 0; s < 3; s++) {
        if (w < shard_windows(s)) { return s * 1000 + (int)(w * T); }
        w -= shard_windows(s);
    }
    return -1;
}

// replays the contract independently: one Fisher-Yates permutation of all windows per epoch, rows in its order
Test(dataloader, rows_follow_one_permutation_of_all_windows_per_epoch) {
    uint64_t seed = 1337;
    DataLoader loader;
    dataloader_init(&loader, pattern, B, T, 5000, LOADER_ROWS, seed);
    size_t W = all_windows();  // 10 + 6 + 8 = 24
    cr_assert_eq(loader.window_base[3], W);
    cr_assert_eq(loader.total_batches, W / B);
    uint64_t rng = seed ^ 0xD1B54A32D192ED03ull;
    int order[64];
    int row = 0;
    for (int epoch = 0; epoch < 3; epoch++) {
        for (size_t i = 0; i < W; i++) { order[i] = (int)i; }
        for (size_t i = W - 1; i > 0; i--) { size_t j = random_u32(&rng) % (i + 1); int t = order[i]; order[i] = order[j]; order[j] = t; }
        for (size_t k = 0; k < W; k++, row++) {
            if (row % B == 0) { dataloader_next_batch(&loader); }
            int base = window_first_token((size_t)order[k]);
            int b = row % B;
            for (int t = 0; t < T; t++) {
                cr_assert_eq(loader.inputs[b * T + t], base + t, "epoch %d row %zu pos %d", epoch, k, t);
                cr_assert_eq(loader.targets[b * T + t], base + t + 1);
            }
        }
    }
    cr_assert_eq(loader.epoch, 3);
    dataloader_free(&loader);
}

// every window once per epoch, and no row of a batch next to another in the text for most batches
Test(dataloader, rows_cover_every_window_once_per_epoch) {
    DataLoader loader;
    dataloader_init(&loader, pattern, B, T, 5000, LOADER_ROWS, 42);
    size_t W = all_windows();
    int seen[64] = {0}, adjacent = 0;
    for (size_t k = 0; k < W / B; k++) {
        dataloader_next_batch(&loader);
        for (int b = 0; b < B; b++) {
            int first = loader.inputs[b * T];
            size_t w = 0;
            while (window_first_token(w) != first) { w++; cr_assert_lt(w, W, "row starts at %d: no window", first); }
            seen[w]++;
        }
        adjacent += loader.inputs[T] == loader.inputs[0] + T;  // llm.c's layout: always
    }
    for (size_t w = 0; w < W; w++) { cr_assert_eq(seen[w], 1, "window %zu read %d times in one epoch", w, seen[w]); }
    cr_assert_lt(adjacent, (int)(W / B) / 2, "%d of %zu batches have neighbouring rows", adjacent, W / B);
    dataloader_free(&loader);
}

// a batch that crosses an epoch's end takes its last rows from the next permutation
Test(dataloader, rows_cross_an_epoch_inside_a_batch) {
    DataLoader loader;
    dataloader_init(&loader, pattern, 5, T, 5000, LOADER_ROWS, 3);  // 24 windows: 4 batches, then 4 + 1
    for (int k = 0; k < 5; k++) { dataloader_next_batch(&loader); }
    cr_assert_eq(loader.epoch, 1);
    cr_assert_eq(loader.window_pos, 1, "the 5th batch took 4 rows of epoch 0 and 1 of epoch 1");
    dataloader_free(&loader);
}

Test(dataloader, rows_state_blob_restores_the_position) {
    for (int n = 0; n < 40; n += 13) {  // at the start, inside epoch 0, inside epoch 1
        DataLoader a, b;
        dataloader_init(&a, pattern, B, T, 5000, LOADER_ROWS, 7);
        for (int i = 0; i < n; i++) { dataloader_next_batch(&a); }
        unsigned char blob[1024];
        cr_assert_eq(dataloader_state_size(&a), dataloader_state_max_size(&a));
        dataloader_state_save(&a, blob);
        dataloader_init(&b, pattern, B, T, 5000, LOADER_ROWS, 12345);  // another seed: all from the blob
        dataloader_state_load(&b, blob, dataloader_state_size(&a), "blob");
        cr_assert_eq(dataloader_shard_index(&a), dataloader_shard_index(&b));
        cr_assert_eq(dataloader_batch_index(&a), dataloader_batch_index(&b));
        for (int i = 0; i < 60; i++) {
            dataloader_next_batch(&a);
            dataloader_next_batch(&b);
            cr_assert_arr_eq(a.inputs, b.inputs, BT * sizeof(int), "batch %d after a restore at %d", i, n);
        }
        cr_assert_eq(a.epoch, b.epoch);
        dataloader_free(&a);
        dataloader_free(&b);
    }
}

// a position saved by one layout, loaded by the other: one line naming the checkpoint and the flag
static unsigned char mixed_blob[1024];
static size_t mixed_size;
static int mixed_order;
static void load_mixed(void* arg) {
    (void)arg;
    DataLoader l;
    dataloader_init(&l, pattern, B, T, 5000, mixed_order, 1);
    dataloader_state_load(&l, mixed_blob, mixed_size, "state_x.bin");
}

Test(dataloader, a_position_of_the_other_layout_is_refused) {
    int orders[2] = {LOADER_ROWS, LOADER_CHUNKS};
    for (int k = 0; k < 2; k++) {
        DataLoader a;
        dataloader_init(&a, pattern, B, T, 5000, orders[k], 1);
        dataloader_next_batch(&a);
        mixed_size = dataloader_state_size(&a);
        dataloader_state_save(&a, mixed_blob);
        dataloader_free(&a);
        mixed_order = orders[1 - k];
        RunResult r = run_fn(load_mixed, NULL);
        assert_one_line_error(&r, "state_x.bin");
        assert_one_line_error(&r, k == 0 ? "is for --rows random" : "is for --rows contiguous");
    }
}

// a rows position saved over other data (another -t): refused, not a silent jump
static void load_other_t(void* arg) {
    (void)arg;
    DataLoader l;
    dataloader_init(&l, pattern, B, T + 1, 5000, LOADER_ROWS, 1);
    dataloader_state_load(&l, mixed_blob, mixed_size, "state_t.bin");
}
Test(dataloader, a_rows_position_over_other_windows_is_refused) {
    DataLoader a;
    dataloader_init(&a, pattern, B, T, 5000, LOADER_ROWS, 1);
    mixed_size = dataloader_state_size(&a);
    dataloader_state_save(&a, mixed_blob);
    dataloader_free(&a);
    RunResult r = run_fn(load_other_t, NULL);
    assert_one_line_error(&r, "state_t.bin");
    assert_one_line_error(&r, "does not match the data");
}

// rows need T+1 tokens per shard, not B*T+1: a short shard still gives its windows
Test(dataloader, rows_accept_a_shard_shorter_than_a_batch) {
    char d2[256], p2[512], path[512];
    make_temp_dir(d2, sizeof(d2));
    snprintf(path, sizeof(path), "%s/train_000000.bin", d2);
    write_numbered_shard(path, 0, 2 * T + 1);  // 2 windows
    snprintf(path, sizeof(path), "%s/train_000001.bin", d2);
    write_numbered_shard(path, 1, T + 1);      // 1 window: too short for a contiguous batch
    snprintf(p2, sizeof(p2), "%s/train_*.bin", d2);
    DataLoader l;
    dataloader_init(&l, p2, B, T, 5000, LOADER_ROWS, 5);
    cr_assert_eq(l.window_base[2], 3);
    for (int k = 0; k < 6; k++) { dataloader_next_batch(&l); }  // 12 rows: 4 epochs of 3 windows
    cr_assert_eq(l.epoch, 4);
    dataloader_free(&l);
    rm_rf(d2);
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
    dataloader_init(&l, bad_path, B, T, 300, LOADER_CHUNKS, 1);
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
