// Tests of llmc/checkpoint.h: model and state round trips (bit for bit), DONE markers and the latest
// complete checkpoint, keep-last-K pruning, and bad model/state files (one line naming the file, exit 1).
#include <math.h>
#include "llmc/checkpoint.h"
#include "trainer_test_util.h"

static char dir[256];
static void setup(void) { make_temp_dir(dir, sizeof(dir)); }
static void teardown(void) { rm_rf(dir); }
TestSuite(checkpoint, .init = setup, .fini = teardown);

static GPT2Config tiny_config(void) {
    GPT2Config c = {.max_seq_len = 16, .vocab_size = 100, .padded_vocab_size = 128, .num_layers = 2,
                    .num_heads = 2, .channels = 8};
    return c;
}

static float* random_params(size_t n, uint64_t seed) {
    float* p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { p[i] = (float)(((seed = seed * 6364136223846793005ull + 1) >> 40) % 2000) / 1000.0f - 1.0f; }
    return p;
}

Test(checkpoint, parameter_count_matches_gpt2_124M) {
    GPT2Config c = {.max_seq_len = 1024, .vocab_size = 50257, .padded_vocab_size = 50304, .num_layers = 12,
                    .num_heads = 12, .channels = 768};
    cr_assert_eq(gpt2_num_parameters(&c), 124475904);  // llm.c's count with the padded vocab
}

Test(checkpoint, model_round_trip_is_exact) {
    GPT2Config c = tiny_config();
    size_t n = gpt2_num_parameters(&c);
    float* p = random_params(n, 1);
    char path[512];
    join_path(path, sizeof(path), dir, "model.bin");
    model_write(path, &c, p, n);
    GPT2Config c2;
    cr_assert_eq(model_read_header(path, &c2), n);
    cr_assert_eq(memcmp(&c, &c2, sizeof(c)), 0);
    float* q = calloc(n, sizeof(float));
    model_read_params(path, q, n);
    cr_assert_arr_eq(p, q, n * sizeof(float));
    char tmp[520];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    cr_assert_neq(access(tmp, F_OK), 0, "the temp file must be gone after commit");
    free(p);
    free(q);
}

Test(checkpoint, state_round_trip_is_exact) {
    size_t n = 1000;
    float* m = random_params(n, 2);
    float* v = random_params(n, 3);
    for (size_t i = 0; i < n; i++) { v[i] = fabsf(v[i]); }
    unsigned char blob[77];
    for (int i = 0; i < 77; i++) { blob[i] = (unsigned char)(i * 13); }
    TrainState s = {.step = 42, .shuffle = 1, .sample_rng = 0x123456789abcdefull, .shard_index = 3,
                    .batch_index = 9, .num_parameters = n, .tokens = 1ull << 40, .backward = 99,
                    .train_time_s = 12.625, .init_seed = 1337, .adam_steps = 41,
                    .gns_s_sum = 123.25, .gns_g2_sum = 0.5, .gns_steps = 40};
    char path[512];
    join_path(path, sizeof(path), dir, "state.bin");
    state_write(path, &s, m, v, blob, sizeof(blob));
    TrainState r;
    float* m2 = calloc(n, sizeof(float));
    float* v2 = calloc(n, sizeof(float));
    unsigned char* blob2;
    size_t nb;
    state_read(path, &r, n, m2, v2, &blob2, &nb);
    cr_assert_eq(memcmp(&s, &r, sizeof(s)), 0);
    cr_assert_arr_eq(m, m2, n * sizeof(float));
    cr_assert_arr_eq(v, v2, n * sizeof(float));
    cr_assert_eq(nb, sizeof(blob));
    cr_assert_arr_eq(blob, blob2, nb);
    int header[256];
    FILE* fp = fopen(path, "rb");
    cr_assert_eq(fread(header, sizeof(int), 256, fp), 256);
    fclose(fp);
    cr_assert_eq(header[0], 20240527);
    cr_assert_eq(header[10], 42);
    free(m); free(v); free(m2); free(v2); free(blob2);
}

// a run that keeps an average (--ema) writes its trained weights into the state (slot 109): they come back
// exactly, and the record stays the file's last bytes, where state_read_record (and scripts/export_hf) find it
Test(checkpoint, state_with_trained_weights_round_trip_and_the_record_stays_last) {
    size_t n = 1000;
    float* m = random_params(n, 4);
    float* v = random_params(n, 5);
    float* w = random_params(n, 6);
    for (size_t i = 0; i < n; i++) { v[i] = fabsf(v[i]); }
    unsigned char blob[33];
    for (int i = 0; i < 33; i++) { blob[i] = (unsigned char)(i * 7); }
    TrainState s = {.step = 7, .shuffle = 1, .num_parameters = n, .adam_steps = 7, .has_run_flags = 1, .weights = w};
    snprintf(s.run_flags, sizeof(s.run_flags), "-x 10\n--ema 0.95\n");
    char path[512], record[STATE_RECORD_MAX];
    join_path(path, sizeof(path), dir, "state_w.bin");
    state_write(path, &s, m, v, blob, sizeof(blob));
    TrainState r;
    float* m2 = calloc(n, sizeof(float));
    float* v2 = calloc(n, sizeof(float));
    float* w2 = calloc(n, sizeof(float));
    unsigned char* blob2;
    size_t nb;
    state_read(path, &r, n, m2, v2, &blob2, &nb);
    cr_assert_eq(r.has_weights, 1);
    cr_assert_arr_eq(m, m2, n * sizeof(float));
    cr_assert_arr_eq(v, v2, n * sizeof(float));
    cr_assert_eq(nb, sizeof(blob));
    cr_assert_arr_eq(blob, blob2, nb);
    cr_assert_str_eq(r.run_flags, s.run_flags);
    state_read_weights(path, n, w2);
    cr_assert_arr_eq(w, w2, n * sizeof(float));
    cr_assert(state_read_record(path, record, sizeof(record)));
    cr_assert_str_eq(record, s.run_flags);
    free(m); free(v); free(w); free(m2); free(v2); free(w2); free(blob2);
}

static void touch(const char* name) {
    char path[512];
    join_path(path, sizeof(path), dir, name);
    write_bytes(path, "", 0);
}

static int exists(const char* name) {
    char path[512];
    join_path(path, sizeof(path), dir, name);
    return access(path, F_OK) == 0;
}

Test(checkpoint, latest_ignores_checkpoints_without_done) {
    cr_assert_eq(checkpoint_find_latest(dir), -1);
    touch("model_00000010.bin");
    touch("state_00000010_00000.bin");
    cr_assert_eq(checkpoint_find_latest(dir), -1, "no DONE marker: incomplete");
    checkpoint_write_done(dir, 10);
    touch("model_00000020.bin");  // a later, interrupted checkpoint
    touch("DONE_00000020.tmp");
    cr_assert_eq(checkpoint_find_latest(dir), 10);
    checkpoint_write_done(dir, 20);
    checkpoint_write_done(dir, 5);
    cr_assert_eq(checkpoint_find_latest(dir), 20);
    cr_assert_eq(checkpoint_find_latest("/nonexistent/dir"), -1);
}

Test(checkpoint, prune_keeps_the_last_k) {
    int steps[] = {5, 10, 15, 20};
    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof(name), "model_%08d.bin", steps[i]); touch(name);
        snprintf(name, sizeof(name), "state_%08d_00000.bin", steps[i]); touch(name);
        snprintf(name, sizeof(name), "hybrid_%08d.bin", steps[i]); touch(name);
        checkpoint_write_done(dir, steps[i]);
    }
    checkpoint_prune(dir, 0);
    cr_assert(exists("model_00000005.bin"), "keep 0 keeps all");
    checkpoint_prune(dir, 2);
    cr_assert(!exists("DONE_00000005") && !exists("model_00000005.bin") && !exists("state_00000005_00000.bin"));
    cr_assert(!exists("DONE_00000010") && !exists("model_00000010.bin") && !exists("hybrid_00000010.bin"));
    cr_assert(exists("DONE_00000015") && exists("model_00000015.bin") && exists("state_00000015_00000.bin"));
    cr_assert(exists("DONE_00000020") && exists("model_00000020.bin"));
    cr_assert_eq(checkpoint_find_latest(dir), 20);
}

// ---- bad model files

static char bad_path[512];
static void read_model(void* arg) {
    (void)arg;
    GPT2Config c;
    size_t n = model_read_header(bad_path, &c);
    float* p = malloc(n * sizeof(float));
    model_read_params(bad_path, p, n);
}

static void write_model_file(int magic, int version, size_t cut_floats, float poison) {
    GPT2Config c = tiny_config();
    size_t n = gpt2_num_parameters(&c);
    float* p = random_params(n, 5);
    p[n / 2] = poison;
    model_write(bad_path, &c, p, n);
    FILE* fp = fopen(bad_path, "r+b");
    int hv[2] = {magic, version};
    fwrite(hv, sizeof(int), 2, fp);
    fclose(fp);
    if (cut_floats > 0) { cr_assert_eq(truncate(bad_path, (off_t)(1024 + (n - cut_floats) * sizeof(float))), 0); }
    free(p);
}

static void expect_bad_model(const char* needle) {
    RunResult r = run_fn(read_model, NULL);
    assert_one_line_error(&r, bad_path);
    assert_one_line_error(&r, needle);
}

Test(checkpoint, missing_model_file) {
    join_path(bad_path, sizeof(bad_path), dir, "missing.bin");
    expect_bad_model("cannot open");
}

Test(checkpoint, empty_model_file) {
    join_path(bad_path, sizeof(bad_path), dir, "empty.bin");
    write_bytes(bad_path, "", 0);
    expect_bad_model("truncated");
}

Test(checkpoint, truncated_model_file) {
    join_path(bad_path, sizeof(bad_path), dir, "cut.bin");
    write_model_file(20240326, 3, 10, 0.0f);
    expect_bad_model("truncated");
}

Test(checkpoint, wrong_magic) {
    join_path(bad_path, sizeof(bad_path), dir, "magic.bin");
    write_model_file(20240520, 3, 0, 0.0f);
    expect_bad_model("magic");
}

Test(checkpoint, bf16_version_is_named) {
    join_path(bad_path, sizeof(bad_path), dir, "bf16.bin");
    write_model_file(20240326, 5, 0, 0.0f);
    expect_bad_model("bf16");
}

Test(checkpoint, unknown_version) {
    join_path(bad_path, sizeof(bad_path), dir, "v4.bin");
    write_model_file(20240326, 4, 0, 0.0f);
    expect_bad_model("version 4");
}

Test(checkpoint, nan_weights_are_rejected) {
    join_path(bad_path, sizeof(bad_path), dir, "nan.bin");
    write_model_file(20240326, 3, 0, NAN);
    expect_bad_model("NaN/Inf");
}

Test(checkpoint, inf_weights_are_rejected) {
    join_path(bad_path, sizeof(bad_path), dir, "inf.bin");
    write_model_file(20240326, 3, 0, INFINITY);
    expect_bad_model("NaN/Inf");
}

static void read_state(void* arg) {
    (void)arg;
    float m[1000], v[1000];
    TrainState s;
    unsigned char* blob;
    size_t nb;
    state_read(bad_path, &s, 1000, m, v, &blob, &nb);
}

Test(checkpoint, truncated_state_file) {
    join_path(bad_path, sizeof(bad_path), dir, "state.bin");
    float m[1000] = {0}, v[1000] = {0};
    TrainState s = {.step = 3, .num_parameters = 1000};
    state_write(bad_path, &s, m, v, "abcd", 4);
    cr_assert_eq(truncate(bad_path, 1024 + 4000), 0);
    RunResult r = run_fn(read_state, NULL);
    assert_one_line_error(&r, bad_path);
}

Test(checkpoint, state_for_another_model) {
    join_path(bad_path, sizeof(bad_path), dir, "state.bin");
    float m[999] = {0}, v[999] = {0};
    TrainState s = {.step = 3, .num_parameters = 999};
    state_write(bad_path, &s, m, v, "abcd", 4);
    RunResult r = run_fn(read_state, NULL);
    assert_one_line_error(&r, "999 parameters");
}
