// Tests of ./train_gpt2's command line and inputs, run as a child process: every bad flag value, unknown
// flag, missing/empty/truncated/corrupt model file and bad shard gives one stderr line naming the flag or
// file and exit status 1 (never a crash); -h lists every flag with its default; NaN losses never reach
// the weights and stop the run after 5 in a row.
#include <math.h>
#include "llmc/checkpoint.h"
#include "llmc/config.h"    // NUM_TRAIN_ARGS: the rows -h lists
#include "llmc/cpu_dnnl.h"  // what --precision auto can be here
#include "hybrid/hybrid.h"  // NUM_HYBRID_ARGS
#include "trainer_test_util.h"

static char dir[256], train[512], val[512], base[2048];

static void setup(void) {
    make_temp_dir(dir, sizeof(dir));
    join_path(train, sizeof(train), dir, "train_000000.bin");
    join_path(val, sizeof(val), dir, "val_000000.bin");
    write_learnable_shard(train, 4000, 256, 1);
    write_learnable_shard(val, 1000, 256, 2);
    snprintf(base, sizeof(base), "./train_gpt2 -i %s -j %s -b 2 -t 16 -x 2 -v 0 -s 0", train, val);
}
static void teardown(void) { rm_rf(dir); }
TestSuite(cli, .init = setup, .fini = teardown);

static RunResult run_with(const char* extra) {
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s %s", base, extra);
    return run_cmd(cmd, NULL);
}

static void expect_error(const char* extra, const char* needle) {
    RunResult r = run_with(extra);
    assert_one_line_error(&r, needle);
}

Test(cli, help_lists_every_flag_with_its_default) {
    char out[512];
    join_path(out, sizeof(out), dir, "help.txt");
    RunResult r = run_cmd("./train_gpt2 -h", out);
    cr_assert(r.exited && r.status == 0);
    char* text = read_text(out);
    const char* flags[] = {"-i ", "-j ", "-e ", "-o ", "-b ", "-t ", "-d ", "-x ", "-l ", "-u ", "-q ", "-k ",
                           "-c ", "-v ", "-m ", "-s ", "-g ", "-n ", "-nk ", "-y ", "-a ", "--seed ", "--tokenizer ",
                           "--allow-changed ", "--prompt ", "--vocab ", "--temperature ", "--top-k ", "--precision "};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        char needle[32];
        snprintf(needle, sizeof(needle), "  %s", flags[i]);
        cr_assert_not_null(strstr(text, needle), "usage lacks %s", flags[i]);
    }
    // every flag line states its default
    int flag_lines = 0, default_lines = 0;
    for (char* line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (strncmp(line, "  -", 3) == 0 && strncmp(line, "  -h,", 5) != 0) {
            flag_lines++;
            default_lines += strstr(line, "(default ") != NULL;
        }
    }
    int method_flags = 0;  // each method's own table (hybrid/methods.h)
    for (int k = 0; k < NUM_HYBRID_METHODS; k++) { method_flags += HYBRID_METHODS[k]->flags->num_args; }
    cr_assert_gt(method_flags, 0);
    cr_assert_eq(flag_lines, NUM_TRAIN_ARGS + 1 + NUM_HYBRID_ARGS + method_flags);  // shared, --precision, hybrid's
    cr_assert_eq(default_lines, flag_lines);
    free(text);
    // and the methods of --hybrid, one line each with what it does
    text = read_text(out);
    for (int k = 0; k < NUM_HYBRID_METHODS; k++) {
        char needle[64];
        snprintf(needle, sizeof(needle), "    %-12s ", HYBRID_METHODS[k]->name);
        cr_assert_not_null(strstr(text, needle), "usage lacks the method %s", HYBRID_METHODS[k]->name);
    }
    free(text);
}

Test(cli, unknown_flag) { expect_error("--bogus 1", "'--bogus'"); }
Test(cli, flag_without_value) { expect_error("-b", "flag -b: missing value"); }
Test(cli, non_integer_value) { expect_error("-b x", "flag -b"); }
Test(cli, zero_batch) { expect_error("-b 0", "flag -b"); }
Test(cli, trailing_garbage) { expect_error("-t 16abc", "flag -t"); }
Test(cli, negative_steps) { expect_error("-x -5", "flag -x"); }
Test(cli, non_numeric_lr) { expect_error("-l fast", "flag -l"); }
Test(cli, nan_lr) { expect_error("-l nan", "flag -l"); }
Test(cli, negative_weight_decay) { expect_error("-c -0.1", "flag -c"); }
Test(cli, final_fraction_above_one) { expect_error("-q 1.5", "flag -q"); }
Test(cli, unknown_schedule) { expect_error("-k cosin", "flag -k"); }
Test(cli, resume_flag_not_boolean) { expect_error("-y 2", "flag -y"); }
Test(cli, resume_without_output_dir) { expect_error("-y 1", "flag -y"); }
Test(cli, total_batch_not_a_multiple) { expect_error("-d 40", "flag -d"); }
Test(cli, sample_longer_than_sequence_uses_a_sliding_window) {
    char out[512];
    join_path(out, sizeof(out), dir, "sample.txt");
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s -e d1 -s 1 -g 40", base);
    RunResult r = run_cmd(cmd, out);
    cr_assert(r.exited && r.status == 0, "status %d: %s", r.status, r.err);
    char* text = read_text(out);
    cr_assert_not_null(strstr(text, "generating:"));
    free(text);
}
Test(cli, zero_sample_tokens) { expect_error("-s 1 -g 0", "flag -g"); }
Test(cli, bad_depth) { expect_error("-e d0", "flag -e"); }
Test(cli, sequence_longer_than_model) { expect_error("-e d1 -t 1025", "flag -t"); }
Test(cli, huge_micro_batch) { expect_error("-b 1048576 -t 1048576", "flag -b"); }
Test(cli, bad_seed) { expect_error("--seed -1", "flag --seed"); }

// bad model files (-e) through the trainer: test/reliability/test_bad_inputs.sh; the loader itself:
// test/test_checkpoint.c. A valid tiny model file for the tests below:

static void write_model(const char* path, GPT2Config c, float fill, size_t cut_bytes, int magic, int version) {
    size_t n = gpt2_num_parameters(&c);
    float* p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { p[i] = fill * (float)((int)(i % 7) - 3); }
    model_write(path, &c, p, n);
    FILE* fp = fopen(path, "r+b");
    int hv[2] = {magic, version};
    fwrite(hv, sizeof(int), 2, fp);
    fclose(fp);
    if (cut_bytes > 0) { cr_assert_eq(truncate(path, (off_t)(1024 + n * 4 - cut_bytes)), 0); }
    free(p);
}

static GPT2Config tiny(int vocab) {
    GPT2Config c = {.max_seq_len = 32, .vocab_size = vocab, .padded_vocab_size = (vocab + 127) / 128 * 128,
                    .num_layers = 1, .num_heads = 2, .channels = 16};
    return c;
}

Test(cli, shard_smaller_than_one_batch) { expect_error("-e d1 --rows contiguous -b 16 -t 256", train); }

// --rows random needs one row (T+1 tokens) per shard, not a batch
Test(cli, shard_smaller_than_one_row) {
    char tiny[600], extra[1024];
    join_path(tiny, sizeof(tiny), dir, "tiny_train.bin");
    write_learnable_shard(tiny, 100, 256, 3);
    snprintf(extra, sizeof(extra), "-i %s -t 128", tiny);
    expect_error(extra, "fewer than one row needs (T+1 = 129)");
}

Test(cli, train_pattern_without_match) {
    char extra[1024];
    snprintf(extra, sizeof(extra), "-i %s/none_*.bin", dir);
    expect_error(extra, "none_*.bin");
}

Test(cli, truncated_val_shard) {
    uint16_t tok[100] = {0};
    write_shard_raw(val, 20240520, 1, 200, 256, tok, 100);
    expect_error("-v 1", val);
}

Test(cli, nan_loss_never_reaches_the_weights_and_stops_after_five) {
    // weights of 1e30 are finite, but the logits overflow: every step's loss is NaN/Inf
    char path[512], out[512], extra[2048], metrics[600];
    join_path(path, sizeof(path), dir, "huge.bin");
    join_path(out, sizeof(out), dir, "out");
    write_model(path, tiny(256), 1e30f, 0, 20240326, 3);
    snprintf(extra, sizeof(extra), "-e %s -x 20 -o %s", path, out);
    RunResult r = run_with(extra);
    assert_one_line_error(&r, "5 consecutive");
    join_path(metrics, sizeof(metrics), out, "metrics.jsonl");
    char* text = read_text(metrics);
    cr_assert_not_null(text);
    cr_assert_eq(count_lines(text), 5, "five skipped steps logged: %s", text);
    int skipped = 0;
    for (const char* p = text; (p = strstr(p, "\"skipped\": true")) != NULL; p++) { skipped++; }
    cr_assert_eq(skipped, 5);
    free(text);
}

// ---- what a new user meets first

Test(cli, checkpoints_without_output_dir) { expect_error("-n 5", "flag -n: checkpoints need an output dir (-o)"); }
Test(cli, lookahead_needs_hybrid_mode) { expect_error("--lookahead 0.3", "flag --lookahead: needs hybrid mode"); }
Test(cli, predict_steps_need_hybrid_mode) { expect_error("--predict-steps 2", "flag --predict-steps: needs hybrid mode"); }
Test(cli, drift_decay_needs_hybrid_mode) { expect_error("--drift-decay 0.9", "flag --drift-decay: needs hybrid mode"); }
Test(cli, removed_hybrid_flag_is_refused) { expect_error("--hybrid --predictor rssm", "unknown flag '--predictor'"); }
Test(cli, temperature_zero) { expect_error("--temperature 0", "flag --temperature"); }
Test(cli, temperature_not_a_number) { expect_error("--temperature hot", "flag --temperature"); }
Test(cli, negative_top_k) { expect_error("--top-k -1", "flag --top-k"); }
Test(cli, batch_above_the_gpu_grid) { expect_error("-b 65536 -t 1", "flag -b"); }
Test(cli, prompt_outside_the_vocabulary) {  // the shards' vocabulary is 256, none beside them: GPT-2's does not fit
    char* argv[] = {"./train_gpt2", "-i", train, "-e", "d1", "-x", "0", "--prompt", "And God said", "-g", "4", NULL};
    RunResult r = run_argv(argv, NULL);
    assert_one_line_error(&r, "has 50257 tokens, the model's vocabulary 256: give --vocab DIR");
}

Test(cli, output_dir_with_missing_parents_is_created) {
    char out[512], extra[1024], model[700];
    join_path(out, sizeof(out), dir, "a/b/c");
    snprintf(extra, sizeof(extra), "-e d1 -n 2 -o %s", out);
    RunResult r = run_with(extra);
    cr_assert(r.exited && r.status == 0, "status %d: %s", r.status, r.err);
    join_path(model, sizeof(model), out, "model_00000002.bin");
    cr_assert_eq(access(model, F_OK), 0, "no %s", model);
}

Test(cli, output_dir_below_a_file) {
    char extra[1024];
    snprintf(extra, sizeof(extra), "-e d1 -o %s/sub", train);  // train is a file
    RunResult r = run_with(extra);
    assert_one_line_error(&r, "cannot create output dir");
}

// -i without -j: val from the val_* shards beside the train shards, or off with a note; never the default corpus
static char* run_without_j(const char* train_pattern, const char* name) {
    char out[512], cmd[4096];
    join_path(out, sizeof(out), dir, name);
    snprintf(cmd, sizeof(cmd), "./train_gpt2 -i %s -e d1 -b 2 -t 16 -x 2 -v 1 -m 2 -s 0", train_pattern);
    RunResult r = run_cmd(cmd, out);
    cr_assert(r.exited && r.status == 0, "status %d: %s", r.status, r.err);
    return read_text(out);
}

Test(cli, val_shards_beside_the_train_shards) {
    char* text = run_without_j(train, "val_beside.txt");
    cr_assert_null(strstr(text, "note: no val shards"), "%s", text);
    cr_assert_not_null(strstr(text, "val loss "), "%s", text);
    cr_assert_not_null(strstr(text, "| val batches          | 31 "), "val = the 1000-token shard beside: %s", text);
    free(text);
}

Test(cli, no_val_shards_beside_means_val_off_with_a_note) {
    char lone[512], path[600];
    join_path(lone, sizeof(lone), dir, "lone");
    mkdir(lone, 0755);
    join_path(path, sizeof(path), lone, "train_000000.bin");
    write_learnable_shard(path, 4000, 256, 1);
    char* text = run_without_j(path, "val_off.txt");
    cr_assert_not_null(strstr(text, "note: no val shards beside"), "%s", text);
    cr_assert_null(strstr(text, "val loss "), "val must be off: %s", text);
    free(text);
}

// ---- generation from a model file: -x 0 --prompt; the prompt is encoded by our BPE (llmc/bpe.h)

static char* generate(const char* model, const char* seed, const char* tokenizer, const char* name) {
    char out[512];
    join_path(out, sizeof(out), dir, name);
    char* argv[] = {"./train_gpt2", "-e", (char*)model, "-x", "0", "--prompt", "And God said", "-g", "12",
                    "--seed", (char*)seed, "--top-k", "40", "--temperature", "0.8", "--tokenizer", (char*)tokenizer, NULL};
    RunResult r = run_argv(argv, out);
    cr_assert(r.exited && r.status == 0, "status %d: %s", r.status, r.err);
    char* text = read_text(out);
    char* sample = strstr(text, "---\n");
    cr_assert_not_null(sample, "%s", text);
    return sample;
}

Test(cli, generation_from_a_checkpoint_with_a_prompt) {
    // a checkpoint with GPT-2's vocabulary: one step on the default corpus
    char out[512], model[700];
    join_path(out, sizeof(out), dir, "gen");
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "./train_gpt2 -e d1 -b 2 -t 16 -x 1 -v 0 -s 0 -n 1 -o %s", out);
    RunResult r = run_cmd(cmd, NULL);
    cr_assert(r.exited && r.status == 0, "status %d: %s", r.status, r.err);
    join_path(model, sizeof(model), out, "model_00000001.bin");
    // same seed, same text; another seed, another text; the text starts with the prompt
    char* a = generate(model, "5", "data/gpt2_tokenizer.bin", "gen_a.txt");
    char* b = generate(model, "5", "data/gpt2_tokenizer.bin", "gen_b.txt");
    char* c = generate(model, "6", "data/gpt2_tokenizer.bin", "gen_c.txt");
    cr_assert_str_eq(a, b);
    cr_assert_str_neq(a, c);
    cr_assert_eq(strncmp(a, "---\nAnd God said", 16), 0, "%s", a);
    // without a tokenizer file the ids are printed: the prompt's are those of ./tokenize ids
    char* ids = generate(model, "5", "/nonexistent.bin", "gen_ids.txt");
    char text_path[512], ids_path[512];
    join_path(text_path, sizeof(text_path), dir, "prompt.txt");
    join_path(ids_path, sizeof(ids_path), dir, "prompt_ids.txt");
    write_bytes(text_path, "And God said", 12);
    char* targv[] = {"./tokenize", "ids", text_path, NULL};
    r = run_argv(targv, ids_path);
    cr_assert(r.exited && r.status == 0, "./tokenize ids failed (%d): %s", r.status, r.err);
    char* want = read_text(ids_path);
    char expected[256] = "---\n", *e = expected + 4;
    for (char* tok = strtok(want, " \n"); tok != NULL; tok = strtok(NULL, " \n")) { e += sprintf(e, "<%s>", tok); }
    cr_assert_gt(strlen(expected), 4);
    cr_assert_eq(strncmp(ids, expected, strlen(expected)), 0, "prompt ids %s, ./tokenize ids gives %s", ids, expected);
}

// ----------------------------------------------------------------------------
// --precision auto: fp32 where bf16 cannot run; elsewhere the faster of the two, measured at start-up (its
// answer forced each way by the test-only LLMC_PRECISION_TEST_PROBE, which the other tests pin to bf16: see
// trainer_test_util.h), named in the start-up table and summary.json; a resumed run keeps its precision.

// auto's answer where it is fixed whatever the probe says, else NULL
static const char* auto_fixed(void) {
    if (!cpu_has_native_bf16() || !dnnl_available()) { return "fp32"; }
    return bf16_test_reference() ? "bf16" : NULL;
}

// runs base + extra with its output dir dir/name, stdout into dir/name.txt; returns the stdout (free it)
static char* run_auto(const char* name, const char* extra) {
    char out[512], cmd[4096];
    snprintf(out, sizeof(out), "%s/%s.txt", dir, name);
    snprintf(cmd, sizeof(cmd), "%s -e d1 -o %s/%s %s", base, dir, name, extra);  // d1: the choice, not its speed
    RunResult r = run_cmd(cmd, out);
    cr_assert(r.exited && r.status == 0, "%s: exit %d; stderr: %s", cmd, r.status, r.err);
    return read_text(out);
}

// the run's summary.json has "precision": want
static void expect_summary_precision(const char* name, const char* want) {
    char path[512], key[64];
    snprintf(path, sizeof(path), "%s/%s/summary.json", dir, name);
    char* s = read_text(path);
    snprintf(key, sizeof(key), "\"precision\": \"%s\"", want);
    cr_assert_not_null(strstr(s, key), "summary.json lacks %s: %s", key, s);
    free(s);
}

Test(cli, auto_takes_what_the_probe_answers_each_way) {
    const char* answers[2] = {"fp32", "bf16"};
    for (int k = 0; k < 2; k++) {
        setenv("LLMC_PRECISION_TEST_PROBE", answers[k], 1);
        char name[32], row[128];
        snprintf(name, sizeof(name), "auto_%s", answers[k]);
        char* out = run_auto(name, "");
        const char* fixed = auto_fixed();
        const char* want = fixed != NULL ? fixed : answers[k];
        snprintf(row, sizeof(row), "| precision            | %s (auto: %s", want,
                 fixed != NULL ? "" : "LLMC_PRECISION_TEST_PROBE)");
        cr_assert_not_null(strstr(out, row), "no '%s' in: %s", row, out);
        expect_summary_precision(name, want);
        free(out);
    }
}

Test(cli, auto_measures_both_precisions_and_takes_the_faster) {
    unsetenv("LLMC_PRECISION_TEST_PROBE");
    char* out = run_auto("auto_probe", "");
    const char* fixed = auto_fixed();
    char* row = strstr(out, "| auto: products       | ");
    if (fixed != NULL) {
        cr_assert_null(row, "a probe row where auto is %s: %s", fixed, out);
        expect_summary_precision("auto_probe", fixed);
        free(out);
        return;
    }
    double ms32, ms16;
    cr_assert(row != NULL && sscanf(row, "| auto: products       | fp32 %lf, bf16 %lf ms/step", &ms32, &ms16) == 2,
              "no probe row with both speeds: %s", out);
    cr_assert(ms32 > 0.0 && ms16 > 0.0, "fp32 %g ms, bf16 %g ms", ms32, ms16);
    // the table rounds to 0.1 ms: the faster one is judged on summary.json's finer figures, and where those
    // tie too, either choice is the faster
    char path[512];
    snprintf(path, sizeof(path), "%s/auto_probe/summary.json", dir);
    char* s = read_text(path);
    const char* probe = strstr(s, "\"precision_probe_ms\": {\"fp32\": ");
    cr_assert_not_null(probe, "summary.json lacks the probe: %s", s);
    cr_assert(sscanf(probe, "\"precision_probe_ms\": {\"fp32\": %lf, \"bf16\": %lf}", &ms32, &ms16) == 2, "%s", s);
    const char* want = ms16 < ms32 ? "bf16" : "fp32";
    char expect[128];
    snprintf(expect, sizeof(expect), "| precision            | %s (auto: the faster", want);
    if (ms16 == ms32 && strstr(out, expect) == NULL) {
        want = "bf16";
        snprintf(expect, sizeof(expect), "| precision            | %s (auto: the faster", want);
    }
    cr_assert_not_null(strstr(out, expect), "fp32 %g ms, bf16 %g ms, but no '%s' in: %s", ms32, ms16, expect, out);
    expect_summary_precision("auto_probe", want);
    free(s);
    free(out);
}

Test(cli, resumed_auto_keeps_the_checkpoints_precision) {
    const char* fixed = auto_fixed();
    for (int k = 0; k < 2; k++) {  // the first part bf16 (where auto can be), the resume's probe says fp32; and back
        const char* first = fixed != NULL ? fixed : k == 0 ? "bf16" : "fp32";
        setenv("LLMC_PRECISION_TEST_PROBE", first, 1);
        char name[32], row[128];
        snprintf(name, sizeof(name), "resume_%d", k);
        free(run_auto(name, "-n 2"));
        setenv("LLMC_PRECISION_TEST_PROBE", k == 0 ? "fp32" : "bf16", 1);
        char* out = run_auto(name, "-n 2 -y 1");  // from its last step: the start-up and the summary
        snprintf(row, sizeof(row), "| precision            | %s (auto: as the checkpoint's run)", first);
        cr_assert_not_null(strstr(out, row), "no '%s' in: %s", row, out);
        expect_summary_precision(name, first);
        free(out);
    }
}

Test(cli, probe_override_other_than_fp32_or_bf16) {
    if (auto_fixed() != NULL) { return; }  // the override is not read there
    setenv("LLMC_PRECISION_TEST_PROBE", "fast", 1);
    expect_error("", "LLMC_PRECISION_TEST_PROBE: 'fast' is not fp32 or bf16");
}
