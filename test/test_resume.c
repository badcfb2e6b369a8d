// Bit-exact resume and determinism of ./train_gpt2, on tiny generated shards and a d1 model:
// a run resumed from a checkpoint logs the same losses, grad norms and val losses, bit for bit, and ends
// with the same weights as an uninterrupted run; -nk prunes; loss falls; changed flags are refused;
// the look-ahead resumes inside its window; the gradient noise scale's inputs are what they claim.
#include <dirent.h>
#include <float.h>
#include <math.h>
#include "trainer_test_util.h"

static char dir[256], flags[2048];

static void setup(void) {
    make_temp_dir(dir, sizeof(dir));
    char path[512];
    for (int s = 0; s < 2; s++) {
        snprintf(path, sizeof(path), "%s/train_%06d.bin", dir, s);
        write_learnable_shard(path, 3000 + 1000 * s, 256, 10 + s);
    }
    join_path(path, sizeof(path), dir, "val_000000.bin");
    write_learnable_shard(path, 2000, 256, 99);
    // cosine with warm-up, weight decay, 2 micro batches per step, val every 4 steps: all the state
    snprintf(flags, sizeof(flags), "./train_gpt2 -i %s/train_*.bin -j %s/val_*.bin -e d1 -b 4 -t 32 -d 256 "
             "-l 3e-3 -u 3 -q 0.1 -c 0.1 -v 4 -m 3 -s 0", dir, dir);
}
static void teardown(void) { rm_rf(dir); }
TestSuite(resume, .init = setup, .fini = teardown);

static void train(const char* extra, const char* out_dir) {
    char cmd[4096], log[600];
    snprintf(cmd, sizeof(cmd), "%s %s -o %s", flags, extra, out_dir);
    snprintf(log, sizeof(log), "%s.stdout", out_dir);
    RunResult r = run_cmd(cmd, log);
    cr_assert(r.exited && r.status == 0, "%s failed (%d): %s", cmd, r.status, r.err);
}

// a (straight through) and b (the same flags), then b's checkpoints after step `from` forgotten (their DONE
// markers) and b resumed (-y 1): it must say it resumed from `from`, and then redo the later steps as a did
// them. a, b: the runs' directories, dir/TAG_straight and dir/TAG_resumed (512 bytes each)
static void straight_and_resumed(const char* run_flags, int from, const char* tag, char* a, char* b) {
    char name[128], path[700], again[1024];
    snprintf(name, sizeof(name), "%s_straight", tag);
    join_path(a, 512, dir, name);
    snprintf(name, sizeof(name), "%s_resumed", tag);
    join_path(b, 512, dir, name);
    train(run_flags, a);
    train(run_flags, b);
    DIR* d = opendir(b);
    cr_assert_not_null(d, "%s", b);
    int forgot = 0;
    for (struct dirent* e; (e = readdir(d)) != NULL;) {
        int k;
        if (sscanf(e->d_name, "DONE_%d", &k) == 1 && k > from) {
            join_path(path, sizeof(path), b, e->d_name);
            cr_assert_eq(unlink(path), 0, "%s", path);
            forgot++;
        }
    }
    closedir(d);
    cr_assert_gt(forgot, 0, "%s: no checkpoint after step %d", b, from);
    snprintf(again, sizeof(again), "%s -y 1", run_flags);
    train(again, b);
    snprintf(path, sizeof(path), "%s.stdout", b);
    char* out = read_text(path);
    cr_assert_not_null(out, "%s", path);
    const char* row = strstr(out, "resumed from step");
    int got = -1;
    cr_assert(row != NULL && sscanf(row + strcspn(row, "|") + 1, "%d", &got) == 1 && got == from,
              "%s resumed from step %d, not %d", b, got, from);
    free(out);
}

static void assert_same_file(const char* a, const char* b) {
    char* x = read_text(a);
    char* y = read_text(b);
    cr_assert_not_null(x, "missing %s", a);
    cr_assert_not_null(y, "missing %s", b);
    FILE* fa = fopen(a, "rb"); fseek(fa, 0, SEEK_END); long na = ftell(fa); fclose(fa);
    FILE* fb = fopen(b, "rb"); fseek(fb, 0, SEEK_END); long nb = ftell(fb); fclose(fb);
    cr_assert_eq(na, nb, "%s and %s differ in size", a, b);
    cr_assert_eq(memcmp(x, y, (size_t)na), 0, "%s and %s differ", a, b);
    free(x);
    free(y);
}

// compares the data loader blobs of two state files (header slots 40..43: parameters, blob bytes; the blob
// follows m and v): 0 when equal
static int state_blob_cmp(const char* a, const char* b) {
    unsigned char* blobs[2] = {NULL, NULL};
    long long sizes[2] = {0, 0};
    const char* paths[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        FILE* f = fopen(paths[k], "rb");
        cr_assert_not_null(f, "missing %s", paths[k]);
        int header[256];
        cr_assert_eq(fread(header, sizeof(int), 256, f), 256);
        long long P, n;
        memcpy(&P, &header[40], 8);
        memcpy(&n, &header[42], 8);
        cr_assert(n > 0 && n < 1 << 20, "%s: blob of %lld bytes", paths[k], n);
        blobs[k] = malloc((size_t)n);
        cr_assert_eq(fseek(f, 1024 + 8 * P, SEEK_SET), 0);
        cr_assert_eq(fread(blobs[k], 1, (size_t)n, f), (size_t)n);
        sizes[k] = n;
        fclose(f);
    }
    int diff = sizes[0] != sizes[1] || memcmp(blobs[0], blobs[1], (size_t)sizes[0]) != 0;
    free(blobs[0]); free(blobs[1]);
    return diff;
}

Test(resume, resume_from_a_middle_checkpoint_is_bit_exact) {
    char a[512], b[512], pa[700], pb[700];
    straight_and_resumed("-x 12 -n 6", 6, "plain", a, b);  // b redoes steps 7..12
    char* ma = metrics_without_times(a);
    char* mb = metrics_without_times(b);
    cr_assert_eq(count_lines(ma), 13, "step 0 (val) + 12 steps");
    cr_assert_str_eq(ma, mb);
    join_path(pa, sizeof(pa), a, "model_00000012.bin");
    join_path(pb, sizeof(pb), b, "model_00000012.bin");
    assert_same_file(pa, pb);
    snprintf(pb, sizeof(pb), "%s.stdout", b);
    char* out = read_text(pb);
    cr_assert_not_null(strstr(out, "resumed from step"), "the config table names the resumed step");
    free(ma); free(mb); free(out);
}

// --rows random: the resume replays the epoch's permutation from the record and continues bit for bit
Test(resume, rows_random_resume_from_a_middle_checkpoint_is_bit_exact) {
    char a[512], b[512], path[700], pa[700], pb[700];
    straight_and_resumed("-x 12 -n 5 --rows random", 5, "rows", a, b);  // from step 5
    char* ma = metrics_without_times(a);
    char* mb = metrics_without_times(b);
    cr_assert_str_eq(ma, mb);
    join_path(pa, sizeof(pa), a, "model_00000012.bin");
    join_path(pb, sizeof(pb), b, "model_00000012.bin");
    assert_same_file(pa, pb);
    join_path(pa, sizeof(pa), a, "state_00000012_00000.bin");
    join_path(pb, sizeof(pb), b, "state_00000012_00000.bin");
    cr_assert_eq(state_blob_cmp(pa, pb), 0, "the data position at step 12");
    // and it is another run than llm.c's layout
    join_path(path, sizeof(path), dir, "rows_contiguous");
    train("-x 12 -n 12 --rows contiguous", path);
    char* mc = metrics_without_times(path);
    cr_assert_str_neq(ma, mc);
    free(ma); free(mb); free(mc);
}

// the data order is the loader's alone: after 6 steps at 1 and at 2 threads, the same position
Test(resume, rows_random_position_is_the_same_at_one_and_two_threads) {
    char a[512], b[512], pa[700], pb[700];
    join_path(a, sizeof(a), dir, "rows_t1");
    join_path(b, sizeof(b), dir, "rows_t2");
    const char* old = getenv("OMP_NUM_THREADS");
    char saved[64];
    snprintf(saved, sizeof(saved), "%s", old != NULL ? old : "");
    setenv("OMP_NUM_THREADS", "1", 1);
    train("-x 7 -n 7 --rows random", a);
    setenv("OMP_NUM_THREADS", "2", 1);
    train("-x 7 -n 7 --rows random", b);
    if (old != NULL) { setenv("OMP_NUM_THREADS", saved, 1); } else { unsetenv("OMP_NUM_THREADS"); }
    join_path(pa, sizeof(pa), a, "state_00000007_00000.bin");
    join_path(pb, sizeof(pb), b, "state_00000007_00000.bin");
    cr_assert_eq(state_blob_cmp(pa, pb), 0);
}

Test(resume, ten_steps_then_ten_more_equal_twenty) {
    char a[512], b[512], pa[700], pb[700];
    join_path(a, sizeof(a), dir, "twenty");
    join_path(b, sizeof(b), dir, "ten_ten");
    // the schedule depends on -x, so this split uses the constant schedule (with warm-up), and the
    // resume says that -x changes on purpose
    // (val every 5 steps, so that the first run's final val at step 10 is also one of the long run's)
    train("-x 20 -k constant -v 5", a);
    train("-x 10 -k constant -v 5 -n 10", b);
    train("-x 20 -k constant -v 5 -n 10 -y 1 --allow-changed 1", b);  // a longer run, said explicitly
    char* ma = metrics_without_times(a);
    char* mb = metrics_without_times(b);
    cr_assert_str_eq(ma, mb);
    join_path(pa, sizeof(pa), b, "model_00000010.bin");
    join_path(pb, sizeof(pb), b, "model_00000020.bin");
    cr_assert_eq(access(pa, F_OK), 0);
    cr_assert_eq(access(pb, F_OK), 0);
    // and the loss fell
    double first, last;
    char* p1 = strstr(ma, "\"step\": 1,");
    char* p20 = strstr(ma, "\"step\": 20,");
    cr_assert(p1 && p20);
    cr_assert_eq(sscanf(strstr(p1, "\"loss\": ") + 8, "%lf", &first), 1);
    cr_assert_eq(sscanf(strstr(p20, "\"loss\": ") + 8, "%lf", &last), 1);
    cr_assert_lt(last, first - 0.5, "loss %f -> %f", first, last);
    free(ma); free(mb);
}

// runs a, b and c (each its own flags): a and b train the same, bit for bit; c another way
static void expect_same_then_other(const char* tag, const char* fa, const char* fb, const char* fc) {
    char a[512], b[512], c[512], name[64];
    const char* fl[3] = {fa, fb, fc};
    char* dirs[3] = {a, b, c};
    char* m[3];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof(name), "%s_%d", tag, i);
        join_path(dirs[i], 512, dir, name);
        train(fl[i], dirs[i]);
        m[i] = metrics_without_times(dirs[i]);
    }
    cr_assert_str_eq(m[0], m[1]);
    cr_assert_str_neq(m[0], m[2]);
    for (int i = 0; i < 3; i++) { free(m[i]); }
}

Test(resume, same_flags_give_identical_runs_and_another_seed_differs) {
    expect_same_then_other("same", "-x 6", "-x 6", "-x 6 --seed 7");
}

Test(resume, keep_last_k_checkpoints) {
    char a[512], path[700];
    join_path(a, sizeof(a), dir, "keep");
    train("-x 12 -n 3 -nk 2", a);
    int steps[] = {3, 6, 9, 12};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/DONE_%08d", a, steps[i]);
        int present = access(path, F_OK) == 0;
        snprintf(path, sizeof(path), "%s/model_%08d.bin", a, steps[i]);
        int model_present = access(path, F_OK) == 0;
        cr_assert_eq(present, i >= 2, "DONE for step %d", steps[i]);
        cr_assert_eq(model_present, i >= 2, "model for step %d", steps[i]);
    }
}

// stopping by a signal and resuming: test/reliability/test_signal.sh and test_resume_hint.sh

Test(resume, minus_one_steps_is_one_epoch) {
    // shards of 3000 and 4000 tokens at B*T = 128: 23 + 31 = 54 batches; 2 micro batches per step: 27 steps
    char a[512];
    join_path(a, sizeof(a), dir, "epoch");
    train("-x -1 -v 0", a);
    char* m = metrics_without_times(a);
    cr_assert_eq(count_lines(m), 27);
    cr_assert_not_null(strstr(m, "\"step\": 27,"));
    cr_assert_not_null(strstr(m, "\"tokens\": 6912,"), "27 steps x 256 tokens");
    free(m);
}

// a resume with another schedule or init is refused with one line naming the flag and both values
static void expect_resume_refused(const char* first, const char* second, const char* name, const char* needle) {
    char out[512], cmd[4096];
    join_path(out, sizeof(out), dir, name);
    train(first, out);
    snprintf(cmd, sizeof(cmd), "%s %s -o %s", flags, second, out);
    RunResult r = run_cmd(cmd, NULL);
    assert_one_line_error(&r, needle);
}

Test(resume, changed_steps_refused) {
    expect_resume_refused("-x 4 -n 2", "-x 6 -y 1", "refuse_x", "flag -x: 6 differs from the checkpoint's 4");
}
Test(resume, changed_lr_refused) {
    expect_resume_refused("-x 4 -n 2", "-x 4 -l 1e-3 -y 1", "refuse_l", "flag -l: 0.001 differs from the checkpoint's 0.003");
}
Test(resume, changed_schedule_refused) {
    expect_resume_refused("-x 4 -n 2", "-x 4 -k linear -y 1", "refuse_k", "flag -k: linear differs from the checkpoint's cosine");
}
Test(resume, changed_init_refused) {
    expect_resume_refused("-x 4 -n 2", "-x 4 -e d2 -y 1", "refuse_e", "flag -e: d2 differs from the checkpoint's d1");
}
Test(resume, changed_adam_betas_refused) {
    expect_resume_refused("-x 4 -n 2 --beta1 0.8", "-x 4 --beta1 0.9 -y 1", "refuse_b1", "flag --beta1: 0.9 differs from the checkpoint's 0.8");
    expect_resume_refused("-x 4 -n 2", "-x 4 --beta2 0.95 -y 1", "refuse_b2", "flag --beta2: 0.95 differs from the checkpoint's 0.99");
}
Test(resume, changed_rows_refused) {
    expect_resume_refused("-x 4 -n 2 --rows contiguous", "-x 4 -y 1", "refuse_rows", "flag --rows: random differs from the checkpoint's contiguous");
}
Test(resume, changed_grad_clip_refused) {
    expect_resume_refused("-x 4 -n 2", "-x 4 --grad-clip 0.5 -y 1", "refuse_clip", "flag --grad-clip: 0.5 differs from the checkpoint's 1");
}

// a state file from before the run's flags were recorded (slot 60 not set) cannot be checked: the resume
// goes on, with one note on stderr naming the file, instead of passing silently
Test(resume, older_state_without_flags_resumes_with_a_note) {
    char out[512], path[700], cmd[4096];
    join_path(out, sizeof(out), dir, "older_state");
    train("-x 4 -n 2", out);
    join_path(path, sizeof(path), out, "state_00000004_00000.bin");
    FILE* f = fopen(path, "r+b");
    cr_assert_not_null(f, "%s", path);
    int32_t zero = 0;
    cr_assert_eq(fseek(f, 60 * 4, SEEK_SET), 0);
    cr_assert_eq(fwrite(&zero, 4, 1, f), 1);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "%s -x 6 -y 1 -o %s", flags, out);
    RunResult r = run_cmd(cmd, NULL);
    cr_assert(r.exited && r.status == 0, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.err, "predates the record of the run's flags") != NULL && strstr(r.err, "state_00000004_00000.bin") != NULL,
              "no note naming the file: %s", r.err);
}

// --beta1 reaches AdamW: another beta1 trains other weights (and the default is the old constant)
Test(resume, beta1_flag_changes_the_run) {
    expect_same_then_other("b1", "-x 4", "-x 4 --beta1 0.9 --beta2 0.99", "-x 4 --beta1 0.8");
}

// --beta2 -1, the default: 0.99 up to 4,096 tokens per step, llm.c's 0.95 above; three steps, since the
// bias-corrected first step is the same for every beta2. The test's steps are 256 tokens; -d moves them
// to the boundary and one micro batch past it.
Test(resume, beta2_default_follows_the_tokens_per_step) {
    expect_same_then_other("b2_small", "-x 3", "-x 3 --beta2 0.99", "-x 3 --beta2 0.95");
    expect_same_then_other("b2_edge", "-x 3 -d 4096", "-x 3 -d 4096 --beta2 0.99", "-x 3 -d 4096 --beta2 0.95");
    expect_same_then_other("b2_large", "-x 3 -d 4224", "-x 3 -d 4224 --beta2 0.95", "-x 3 -d 4224 --beta2 0.99");
}

// a run resumed without --beta2 keeps the beta2 its checkpoint recorded (its moments were built with it),
// whatever the rule would pick for its tokens per step, and continues bit for bit
Test(resume, beta2_default_on_resume_keeps_the_checkpoints) {
    char a[512], b[512], path[700], cmd[4096];
    join_path(a, sizeof(a), dir, "b2_kept_straight");
    join_path(b, sizeof(b), dir, "b2_kept_resumed");
    train("-x 8 -n 4 --beta2 0.9", a);
    train("-x 8 -n 4 --beta2 0.9", b);
    join_path(path, sizeof(path), b, "DONE_00000008");
    cr_assert_eq(unlink(path), 0, "%s", path);
    snprintf(cmd, sizeof(cmd), "%s -x 8 -n 4 -y 1 -o %s", flags, b);
    snprintf(path, sizeof(path), "%s.stdout", b);
    RunResult r = run_cmd(cmd, path);
    cr_assert(r.exited && r.status == 0, "the resume without --beta2 failed (%d): %s", r.status, r.err);
    char* out = read_text(path);
    cr_assert_not_null(out, "%s", path);
    cr_assert(strstr(out, "0.9: the checkpoint's") != NULL, "the table does not say the checkpoint chose beta2:\n%s", out);
    char* ma = metrics_without_times(a);
    char* mb = metrics_without_times(b);
    cr_assert_str_eq(ma, mb);
    free(ma); free(mb); free(out);
}

// hybrid mode's look-ahead: a checkpoint inside its window (steps 2..12 of 12) holds the drift, the
// betas in the weights and the back-off; the resumed run continues bit-exactly
Test(resume, lookahead_resume_inside_the_window_is_bit_exact) {
    char a[512], b[512], pa[700], pb[700];
    straight_and_resumed("-x 12 -n 6 --hybrid --lookahead 0.5 --hybrid-warmup 2", 6, "la", a, b);
    char* ma = metrics_without_times(a);
    char* mb = metrics_without_times(b);
    cr_assert_str_eq(ma, mb);
    join_path(pa, sizeof(pa), a, "model_00000012.bin");
    join_path(pb, sizeof(pb), b, "model_00000012.bin");
    assert_same_file(pa, pb);
    // and the look-ahead did act: the run differs from plain AdamW
    char c[512];
    join_path(c, sizeof(c), dir, "la_plain");
    train("-x 12", c);
    char* mc = metrics_without_times(c);
    cr_assert_str_neq(ma, mc);
    free(ma); free(mb); free(mc);
}

// the number after "key": in the metrics line of `step`, or NAN
static double metric_at(const char* out_dir, int step, const char* key) {
    char path[600], want[64], k[80];
    join_path(path, sizeof(path), out_dir, "metrics.jsonl");
    char* text = read_text(path);
    cr_assert_not_null(text, "no %s", path);
    snprintf(want, sizeof(want), "{\"step\": %d,", step);
    snprintf(k, sizeof(k), "\"%s\": ", key);
    double x = NAN;
    char* line = strstr(text, want);
    if (line != NULL) {
        char* end = strchr(line, '\n');
        char* p = strstr(line, k);
        if (p != NULL && (end == NULL || p < end)) { x = strtod(p + strlen(k), NULL); }
    }
    free(text);
    return x;
}

// the gradient noise scale's inputs: the first micro batch's gradient norm is the gradient norm a run
// with that micro batch alone sees (same init, same first batch), and gns follows from the two norms
Test(resume, gradient_noise_scale_from_the_first_micro_batch) {
    char a[512], b[512];
    join_path(a, sizeof(a), dir, "gns_two");
    join_path(b, sizeof(b), dir, "gns_one");
    train("-x 1", a);            // -d 256: two micro batches of 128 tokens
    train("-x 1 -d 128", b);     // the first of them alone
    double g1 = metric_at(a, 1, "grad_norm_micro1"), g = metric_at(a, 1, "grad_norm");
    double alone = metric_at(b, 1, "grad_norm");
    cr_assert(isfinite(g1) && isfinite(g) && isfinite(alone));
    cr_assert(fabs(g1 - alone) <= 1e-5 * alone, "first micro batch %.9g vs alone %.9g", g1, alone);
    double bs = 128, bb = 256;
    double want = ((g1 * g1 - g * g) / (1 / bs - 1 / bb)) / ((bb * g * g - bs * g1 * g1) / (bb - bs));
    double got = metric_at(a, 1, "gns");
    cr_assert(fabs(got - want) <= 1e-6 * fabs(want), "gns %.9g, by hand %.9g", got, want);
    cr_assert(isnan(metric_at(b, 1, "gns")), "one micro batch per step: no noise scale");
}

// summary.json's gradient_noise_scale is the ratio of sums over the second half of the run (steps 7-12 of
// 12, recomputed here from the per-step norms): the checkpoint carries the sums, so a run resumed at step 9
// reports the uninterrupted run's value, not that of steps 10-12 alone
Test(resume, gradient_noise_scale_survives_a_resume) {
    char a[512], b[512], path[700];
    straight_and_resumed("-x 12 -n 9", 9, "gns", a, b);  // b rewrites its summary from step 9
    double want = NAN, got = NAN;
    join_path(path, sizeof(path), a, "summary.json");
    char* sa = read_text(path);
    join_path(path, sizeof(path), b, "summary.json");
    char* sb = read_text(path);
    cr_assert_not_null(sa);
    cr_assert_not_null(sb);
    char* pa = strstr(sa, "\"gradient_noise_scale\": ");
    char* pb = strstr(sb, "\"gradient_noise_scale\": ");
    cr_assert(pa != NULL && pb != NULL, "summary.json has gradient_noise_scale");
    want = strtod(pa + 24, NULL);
    got = strtod(pb + 24, NULL);
    // from the per-step records: the second half (the summary's), the last three steps (what a resume
    // without the sums would report), the whole run (what the summary reported before)
    double s_half = 0, g2_half = 0, s_tail = 0, g2_tail = 0, s_all = 0, g2_all = 0, bs = 128, bb = 256;
    for (int step = 1; step <= 12; step++) {
        double g1 = metric_at(a, step, "grad_norm_micro1"), g = metric_at(a, step, "grad_norm");
        double s = (g1 * g1 - g * g) / (1 / bs - 1 / bb), g2 = (bb * g * g - bs * g1 * g1) / (bb - bs);
        s_all += s; g2_all += g2;
        if (step >= 7) { s_half += s; g2_half += g2; }
        if (step >= 10) { s_tail += s; g2_tail += g2; }
    }
    double half = s_half / g2_half, tail = s_tail / g2_tail, all = s_all / g2_all;
    cr_assert(isfinite(want) && want != 0.0, "a finite noise scale: %s", sa);
    cr_assert(fabs(want - half) <= 1e-4 * fabs(half), "summary %.9g, second half by hand %.9g", want, half);
    cr_assert(fabs(got - want) <= 1e-5 * fabs(want), "resumed run's noise scale %.9g, uninterrupted %.9g", got, want);
    cr_assert(fabs(tail - want) > 1e-3 * fabs(want), "the test cannot tell: last steps alone %.9g, half %.9g", tail, want);
    cr_assert(fabs(all - want) > 1e-3 * fabs(want), "the test cannot tell: whole run %.9g, half %.9g", all, want);
    free(sa);
    free(sb);
}

// ----------------------------------------------------------------------------
// --ema: the weights' EMA (llmc/average.h), evaluated beside the weights and written as the model

// a checkpoint's model file (P floats after the 1024-byte header) into a malloc'd array; *n = P
static float* read_model_weights(const char* out_dir, int step, size_t* n) {
    char path[700];
    snprintf(path, sizeof(path), "%s/model_%08d.bin", out_dir, step);
    FILE* fp = fopen(path, "rb");
    cr_assert_not_null(fp, "no %s", path);
    fseek(fp, 0, SEEK_END);
    *n = ((size_t)ftell(fp) - 1024) / sizeof(float);
    float* w = malloc(*n * sizeof(float));
    fseek(fp, 1024, SEEK_SET);
    cr_assert_eq(fread(w, sizeof(float), *n, fp), *n);
    fclose(fp);
    return w;
}

// the trained weights a state file carries after its loader blob (slot 109: llmc/checkpoint.h)
static float* read_state_weights(const char* out_dir, int step, size_t n) {
    char path[700];
    snprintf(path, sizeof(path), "%s/state_%08d_00000.bin", out_dir, step);
    FILE* fp = fopen(path, "rb");
    cr_assert_not_null(fp, "no %s", path);
    int h[256];
    cr_assert_eq(fread(h, sizeof(int), 256, fp), 256);
    cr_assert_eq(h[109], 1, "%s: slot 109 announces the trained weights", path);
    uint64_t P, blob;
    memcpy(&P, h + 40, 8);
    memcpy(&blob, h + 42, 8);
    cr_assert_eq(P, n);
    float* w = malloc(n * sizeof(float));
    fseek(fp, (long)(1024 + 8 * n + blob), SEEK_SET);
    cr_assert_eq(fread(w, sizeof(float), n, fp), n);
    long at = ftell(fp);
    fseek(fp, 0, SEEK_END);
    cr_assert_eq(ftell(fp) - at, h[108], "%s: the record follows the trained weights and ends the file", path);
    fclose(fp);
    return w;
}

// The kept model after update t is the bias-corrected EMA of the trained weights after every update so far,
// sum_s beta^(t-s) (1 - beta) p_s / (1 - beta^t), computed here in double from the trained weights each
// step's state file carries; after the first update it is those weights exactly. run_flags: the run's (with
// --ema 0.7), name: its folder
static void assert_ema_closed_form(const char* run_flags, const char* name) {
    char a[512];
    join_path(a, sizeof(a), dir, name);
    const int steps = 6;
    const double beta = 0.7;
    train(run_flags, a);
    size_t n;
    float* p[6];
    for (int s = 0; s < steps; s++) {
        float* e = read_model_weights(a, s + 1, &n);
        p[s] = read_state_weights(a, s + 1, n);
        if (s == 0) { cr_assert_arr_eq(e, p[0], n * sizeof(float), "the first update's weights start the average"); }
        double norm = (1.0 - beta) / (1.0 - pow(beta, s + 1)), worst = 0.0, apart = 0.0;
        for (size_t i = 0; i < n; i++) {
            double ref = 0.0, big = 0.0;  // big: the largest weight averaged, the scale of the rounding
            for (int r = 0; r <= s; r++) { ref += pow(beta, s - r) * p[r][i]; big = fmax(big, fabs(p[r][i])); }
            ref *= norm;
            worst = fmax(worst, fabs(e[i] - ref) / (1e-30 + big));  // in units of that scale
            apart = fmax(apart, fabs(e[i] - p[s][i]));
        }
        cr_assert_lt(worst, 4 * FLT_EPSILON, "%s: step %d: the kept model is %.3g of its weights' scale from the closed form",
                     name, s + 1, worst);
        if (s > 0) { cr_assert_gt(apart, 1e-5, "%s: step %d: the average is not the trained weights", name, s + 1); }
        free(e);
    }
    for (int s = 0; s < steps; s++) { free(p[s]); }
}

Test(resume, ema_is_the_bias_corrected_average_of_the_trained_weights) {
    assert_ema_closed_form("-x 6 -n 1 -v 0 --ema 0.7", "ema_ref");
}

// with the look-ahead (from its second step) the method's fused pass folds the EMA in: the average is of
// the weights it wrote, the look-ahead point included, as the baseline's is of AdamW's
Test(resume, ema_with_the_lookahead_is_the_bias_corrected_average) {
    assert_ema_closed_form("-x 6 -n 1 -v 0 --ema 0.7 --hybrid lookahead --hybrid-warmup 1", "ema_la_ref");
    // and the look-ahead did act: its trained weights are not AdamW's
    char a[512], c[512];
    join_path(a, sizeof(a), dir, "ema_la_ref");
    join_path(c, sizeof(c), dir, "ema_la_plain");
    train("-x 6 -n 6 -v 0 --ema 0.7", c);
    size_t n;
    free(read_model_weights(a, 6, &n));
    float* wa = read_state_weights(a, 6, n);
    float* wc = read_state_weights(c, 6, n);
    cr_assert_neq(memcmp(wa, wc, n * sizeof(float)), 0, "the look-ahead's weights are AdamW's");
    free(wa); free(wc);
}

// resumed from a middle checkpoint, a run with --ema logs the same numbers (val_loss_ema included) and
// writes the same model (the average) and state (the trained weights: every byte but the training seconds)
static void assert_ema_resume_bit_exact(const char* run_flags, int from, int last, const char* tag) {
    char a[512], b[512], path[700], pa[700], pb[700], name[64];
    straight_and_resumed(run_flags, from, tag, a, b);
    char* ma = metrics_without_times(a);
    char* mb = metrics_without_times(b);
    cr_assert_str_eq(ma, mb);
    cr_assert(isfinite(metric_at(a, last, "val_loss_ema")) && isfinite(metric_at(a, last, "val_bpb_ema")) == 0,
              "val_loss_ema at the last step (no tokenizer for these shards: no bits per byte)");
    cr_assert(metric_at(a, last, "val_loss_ema") != metric_at(a, last, "val_loss"));
    snprintf(name, sizeof(name), "model_%08d.bin", last);
    join_path(pa, sizeof(pa), a, name);
    join_path(pb, sizeof(pb), b, name);
    assert_same_file(pa, pb);
    size_t n;
    float* wa = read_state_weights(a, last, (free(read_model_weights(a, last, &n)), n));
    float* wb = read_state_weights(b, last, n);
    cr_assert_arr_eq(wa, wb, n * sizeof(float), "the trained weights survive the resume");
    join_path(path, sizeof(path), a, "summary.json");
    char* sa = read_text(path);
    cr_assert_not_null(strstr(sa, "\"val_loss_ema\": "), "summary.json has the average's val loss: %s", sa);
    free(ma); free(mb); free(wa); free(wb); free(sa);
}

Test(resume, ema_resume_is_bit_exact) {
    assert_ema_resume_bit_exact("-x 12 -n 6 --ema 0.8", 6, 12, "ema");
}

// the look-ahead's window (steps 2..12) spans the checkpoint; the EMA's trained weights are the look-ahead's
Test(resume, ema_with_the_lookahead_resume_is_bit_exact) {
    assert_ema_resume_bit_exact("-x 12 -n 6 --ema 0.8 --hybrid --lookahead 0.5 --hybrid-warmup 2", 6, 12, "ema_la");
}

// with Predict runs the EMA folds the measured updates only (a Predict step moves the weights outside the
// update, and a rollback takes them back); the checkpoint at step 12 falls inside a run (Predict steps 11
// and 12, asserted below), and the resumed run goes on bit for bit all the same
Test(resume, ema_with_predict_runs_resume_is_bit_exact) {
    assert_ema_resume_bit_exact("-x 24 -n 12 --ema 0.8 --hybrid --hybrid-warmup 2 --predict-steps 2 --full-steps 2", 12, 24,
                                "ema_pr");
    char a[512], path[700];
    join_path(a, sizeof(a), dir, "ema_pr_straight");
    join_path(path, sizeof(path), a, "metrics.jsonl");
    char* m = read_text(path);
    cr_assert_not_null(strstr(m, "{\"step\": 12, \"phase\": \"predict\""), "step 12 is no Predict step: %s", m);
    cr_assert_not_null(strstr(m, "\"phase\": \"correct\""), "no Correct step: %s", m);
    free(m);
}

// the model a run with --ema writes is an llm.c model file, and it is what val_loss_ema measured: a run
// from it (-e) sees that val loss at step 0, to the last bit
Test(resume, ema_model_loads_as_an_llmc_model_and_is_what_val_loss_ema_measured) {
    char a[512], b[512], cmd[4096], log[700];
    join_path(a, sizeof(a), dir, "ema_kept");
    join_path(b, sizeof(b), dir, "ema_loaded");
    train("-x 6 -n 6 -v 6 --ema 0.8", a);
    snprintf(cmd, sizeof(cmd), "%s -x 1 -v 1 -e %s/model_00000006.bin -o %s", flags, a, b);
    snprintf(log, sizeof(log), "%s.stdout", b);
    RunResult r = run_cmd(cmd, log);
    cr_assert(r.exited && r.status == 0, "%s failed (%d): %s", cmd, r.status, r.err);
    double kept = metric_at(a, 6, "val_loss_ema"), loaded = metric_at(b, 0, "val_loss");
    cr_assert(isfinite(kept) && kept == loaded, "val_loss_ema %.9g, the model file's val loss %.9g", kept, loaded);
    cr_assert(metric_at(a, 6, "val_loss") != kept, "the model file is the average, not the trained weights");
}

Test(resume, ema_changed_refused_and_not_with_gpa_linefit_or_x0) {
    expect_resume_refused("-x 4 -n 2 --ema 0.9", "-x 4 --ema 0.95 -y 1", "refuse_ema", "flag --ema: 0.95 differs from the checkpoint's 0.9");
    char cmd[4096];
    // a method that keeps its own average, or moves the weights outside its update, takes no EMA
    snprintf(cmd, sizeof(cmd), "%s -x 2 --ema 0.9 --hybrid gpa", flags);
    RunResult r = run_cmd(cmd, NULL);
    assert_one_line_error(&r, "flag --ema: not with --hybrid gpa");
    snprintf(cmd, sizeof(cmd), "%s -x 2 --ema 0.9 --hybrid linefit", flags);
    r = run_cmd(cmd, NULL);
    assert_one_line_error(&r, "flag --ema: not with --hybrid linefit");
    // -x 0 trains nothing: an average or a method asked for beside it is refused, not ignored
    snprintf(cmd, sizeof(cmd), "%s -x 0 -g 2 --ema 0.9", flags);
    r = run_cmd(cmd, NULL);
    assert_one_line_error(&r, "flag --ema: -x 0 only writes text from the model");
    snprintf(cmd, sizeof(cmd), "%s -x 0 -g 2 --hybrid gpa", flags);
    r = run_cmd(cmd, NULL);
    assert_one_line_error(&r, "flag --hybrid: -x 0 only writes text from the model");
}
