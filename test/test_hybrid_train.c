// Hybrid mode on a tiny GPT-2 (depth 1, vocab 256): in process, Predict steps move the real
// parameters by exactly the predicted amount and rollback restores them, and the fused update with no
// look-ahead is AdamW; through ./train_gpt2, every phase runs, rollbacks happen and back off, memory stays
// constant over 2,000 steps, a hybrid run resumes bit-exactly, and `--hybrid 0` (or --hybrid with
// nothing predicted) gives the baseline's losses.
#define TESTING
#include "../train_gpt2.c"
#include <criterion/criterion.h>
#include <sys/wait.h>

#define VOCAB 256
#define DIR "build/test_hybrid_train.d"

#include "tiny_run.h"  // the tiny corpus under DIR, ./train_gpt2 on it, its logs read back

// ----------------------------------------------------------------------------
// in process: the facade on a real model, as train_gpt2.c drives it

typedef struct { GPT2 model; HybridState h; float* drift; int t; int* x; int* y; } Tiny;

static void tiny_init(Tiny* s) {
    gpt2_build_from_random(&s->model, 1, VOCAB, 7);
    gpt2_allocate(&s->model, 2, 16);
    int nb = 12 + 4;
    size_t offsets[17];
    float wd[16];
    gpt2_param_blocks(&s->model.config, offsets, wd, 0.1f);
    cr_assert_eq(offsets[nb], s->model.num_parameters);
    HybridConfig c;
    hybrid_config_default(&c);
    c.enabled = 1; c.lookahead = 0.5f; c.warmup = 3; c.predict_steps = 2; c.full_steps = 1;
    hybrid_init(&s->h, &c, offsets, nb, 100, 1024.0, 1e-3f, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, wd, NULL, 1);
    s->drift = s->h.bufs[0];
    s->t = 0;
    s->x = malloc(32 * sizeof(int)); s->y = malloc(32 * sizeof(int));
    uint64_t rng = 3;
    for (int i = 0; i < 32; i++) { s->x[i] = random_u32(&rng) % VOCAB; s->y[i] = (s->x[i] * 7) % VOCAB; }
}

static void tiny_free(Tiny* s) {
    hybrid_free(&s->h);
    gpt2_free(&s->model);
    free(s->x); free(s->y);
}

// one step of the trainer's protocol on the tiny model (no rollback expected: one batch, a falling loss)
static HybridPhase tiny_step(Tiny* s, int step, float lr) {
    GPT2* m = &s->model;
    HybridPlan p = hybrid_plan(&s->h, step, lr);
    if (p.phase == HYBRID_PHASE_PREDICT) {
        apply_predict(m->params_memory, m->grads_memory, s->drift, s->h.offsets, s->h.model.nblocks, p.coef, p.keep);
        hybrid_observe(&s->h, NAN, NAN, NAN, NAN, NAN, 1.0);
        return p.phase;
    }
    gpt2_forward(m, s->x, s->y, 2, 16);
    if (p.check) { cr_assert_eq(hybrid_check(&s->h, m->mean_loss), 0, "step %d rolled back", step); }
    gpt2_zero_grad(m);
    gpt2_backward(m, s->x, s->y, 1.0f);
    float gn = gpt2_grad_norm(m);
    float scale = gn > 1.0f ? 1.0f / gn : 1.0f;
    hybrid_update(&s->h, m->params_memory, m->grads_memory, m->m_memory, m->v_memory, scale, ++s->t);
    hybrid_observe(&s->h, m->mean_loss, p.observe ? m->mean_loss : NAN, gn, NAN, NAN, 1.0);
    return p.phase;
}

// a Predict run on the real parameter layout moves every block by exactly fl(c_b * m_i) per step, keeps
// theta_0 in the gradient buffer, and apply_rollback brings the weights back bit for bit
Test(hybrid_train, predict_moves_exactly_and_rollback_restores) {
    Tiny s;
    tiny_init(&s);
    GPT2* m = &s.model;
    size_t P = m->num_parameters;
    float* before = malloc(P * 4);
    float* prev = malloc(P * 4);
    int step = 0;
    while (hybrid_drift(&s.h)->pr.loss_n < PREDICT_LOSS_MIN || step < 4) { tiny_step(&s, step, 1e-3f); step++; }
    for (int k = 0; k < 2; k++, step++) {  // the gap (1 measured step) has passed: a run of 2 starts now
        HybridPlan p = hybrid_plan(&s.h, step, 1e-3f);
        cr_assert_eq(p.phase, HYBRID_PHASE_PREDICT, "step %d", step);
        cr_assert_eq(p.keep, k == 0);
        if (p.keep) { memcpy(before, m->params_memory, P * 4); }
        memcpy(prev, m->params_memory, P * 4);
        apply_predict(m->params_memory, m->grads_memory, s.drift, s.h.offsets, s.h.model.nblocks, p.coef, p.keep);
        for (int b = 0; b < s.h.model.nblocks; b++) {
            for (size_t i = s.h.offsets[b]; i < s.h.offsets[b + 1]; i++) {
                volatile float x = p.coef[b] * s.drift[i];
                volatile float want = prev[i] + x;
                cr_assert(m->params_memory[i] == want, "block %d elem %zu: %a != %a", b, i, m->params_memory[i], (float)want);
            }
        }
        hybrid_observe(&s.h, NAN, NAN, NAN, NAN, NAN, 1.0);
    }
    cr_assert(memcmp(m->grads_memory, before, P * 4) == 0, "the gradient buffer must hold theta_0");
    cr_assert(memcmp(m->params_memory, before, P * 4) != 0, "the Predict run must move the weights");
    apply_rollback(m->params_memory, m->grads_memory, P);
    cr_assert(memcmp(m->params_memory, before, P * 4) == 0, "rollback must restore theta_0 bit for bit");
    free(before); free(prev);
    tiny_free(&s);
}

// hybrid_update with no look-ahead (the drift's prefill) moves the weights and moments exactly as the
// trainer's plain gpt2_update over several steps, and it measures the update
Test(hybrid_train, fused_update_equals_plain_adamw) {
    Tiny a, b;
    tiny_init(&a);
    tiny_init(&b);
    size_t P = a.model.num_parameters;
    for (int t = 1; t <= 3; t++) {
        float lr = 1e-3f * (float)t;
        HybridPlan p = hybrid_plan(&b.h, t - 1, lr);
        cr_assert_eq(p.phase, HYBRID_PHASE_WARMUP);
        for (Tiny* s = &a; s != NULL; s = s == &a ? &b : NULL) {
            gpt2_forward(&s->model, s->x, s->y, 2, 16);
            gpt2_zero_grad(&s->model);
            gpt2_backward(&s->model, s->x, s->y, 1.0f);
        }
        float gn = gpt2_grad_norm(&a.model), scale = gn > 1.0f ? 1.0f / gn : 1.0f;
        gpt2_update(&a.model, lr, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, 0.1f, scale, t);
        hybrid_update(&b.h, b.model.params_memory, b.model.grads_memory, b.model.m_memory, b.model.v_memory,
                      scale, t);
        cr_assert(memcmp(a.model.params_memory, b.model.params_memory, P * 4) == 0, "step %d: weights differ", t);
        cr_assert(memcmp(a.model.m_memory, b.model.m_memory, P * 4) == 0, "step %d: m differs", t);
        cr_assert(memcmp(a.model.v_memory, b.model.v_memory, P * 4) == 0, "step %d: v differs", t);
        cr_assert_gt(hybrid_drift(&b.h)->stats[2], 0.0, "no update measured");
        hybrid_observe(&b.h, b.model.mean_loss, p.observe ? b.model.mean_loss : NAN, gn, NAN, NAN, 1.0);
    }
    tiny_free(&a); tiny_free(&b);
}

// ----------------------------------------------------------------------------
// through the binary

static const char* PREDICT_FLAGS = "--hybrid --hybrid-warmup 5 --predict-steps 2 --full-steps 3";

Test(hybrid_train, all_phases_and_summary) {
    corpus();
    char args[512];
    snprintf(args, sizeof(args), "-x 60 -v 20 -m 2 --lookahead 0.125 %s", PREDICT_FLAGS);
    cr_assert_eq(trainer(DIR "/phases", args), 0);
    for (int p = 0; p < HYBRID_PHASE_COUNT; p++) {
        char key[32];
        snprintf(key, sizeof(key), "steps_%s", hybrid_phase_label((HybridPhase)p));
        cr_assert_gt(summary_number(DIR "/phases", key), 0, "no %s steps", key);
    }
    cr_assert_gt(summary_number(DIR "/phases", "lookahead_steps"), 0);
    char* log = slurp(DIR "/phases.log");
    cr_assert(strstr(log, "| predict 1/2 along the drift |") != NULL);
    cr_assert(strstr(log, "hybrid summary") != NULL);
    cr_assert(strstr(log, "look-ahead: beta0 0.125") != NULL);  // one micro batch: as given
    free(log);
    // backward passes = steps - Predict steps; the summary counts the runs' steps
    cr_assert_eq(summary_number(DIR "/phases", "backward"), 60 - summary_number(DIR "/phases", "steps_predict"));
    cr_assert_eq(summary_number(DIR "/phases", "predict_steps"), summary_number(DIR "/phases", "steps_predict"));
}

// a threshold no Correct step can pass: every run is rolled back, the run still trains to the end, and
// the back-off spaces the runs out (fewer runs than without rollbacks)
Test(hybrid_train, rollbacks_through_the_binary) {
    corpus();
    char args[512];
    snprintf(args, sizeof(args), "-x 80 -v 40 -m 2 %s --divergence-threshold 0.1", PREDICT_FLAGS);
    cr_assert_eq(trainer(DIR "/rollback", args), 0);
    snprintf(args, sizeof(args), "-x 80 -v 40 -m 2 %s --divergence-threshold 1000", PREDICT_FLAGS);
    cr_assert_eq(trainer(DIR "/norollback", args), 0);
    double rb = summary_number(DIR "/rollback", "rollbacks"), runs = summary_number(DIR "/rollback", "predict_runs");
    cr_assert_gt(rb, 0, "no rollback at threshold 0.1");
    cr_assert_eq(summary_number(DIR "/norollback", "rollbacks"), 0);
    cr_assert_lt(runs, summary_number(DIR "/norollback", "predict_runs"), "rollbacks must back the runs off");
    char* log = slurp(DIR "/rollback.log");
    cr_assert(strstr(log, "Predict run rolled back") != NULL);
    free(log);
}

Test(hybrid_train, hybrid_0_equals_no_flag) {
    corpus();
    cr_assert_eq(trainer(DIR "/noflag", "-x 30 -v 10 -m 2"), 0);
    cr_assert_eq(trainer(DIR "/off", "-x 30 -v 10 -m 2 --hybrid 0"), 0);
    char *a = loss_fields(DIR "/noflag"), *b = loss_fields(DIR "/off");
    cr_assert_gt(strlen(a), 100);
    cr_assert_str_eq(a, b);
    free(a); free(b);
}

// the look-ahead with no look-ahead (--lookahead 0) and no Predict runs trains exactly as the baseline:
// the fused pass is AdamW, bit for bit
Test(hybrid_train, hybrid_with_nothing_predicted_equals_the_baseline) {
    corpus();
    cr_assert_eq(trainer(DIR "/base", "-x 30 -v 10 -m 2"), 0);
    cr_assert_eq(trainer(DIR "/zero", "-x 30 -v 10 -m 2 --hybrid --lookahead 0"), 0);
    char *a = loss_fields(DIR "/base"), *b = loss_fields(DIR "/zero");
    cr_assert_gt(strlen(a), 100);
    cr_assert_eq(same_losses(a, b, "--lookahead 0"), 30);
    free(a); free(b);
}

// the noise gate through the binary, at 2 micro batches per step (B_noise measured, ~1k tokens here at
// 64 tokens per step): a ratio no run reaches keeps the look-ahead off the whole window, and the run is
// the baseline's bit for bit; ratio 0 looks ahead; one micro batch cannot measure: a given look-ahead
// runs with the gate open;
// a resume inside the window continues the running estimate bit-exactly
// on llm.c's layout (--rows contiguous): with rows drawn apart, this small corpus's running estimate of |G|^2
// falls to about zero or below on some of these 30 steps (noise dominates), which opens the gate at any ratio
Test(hybrid_train, noise_gate_through_the_binary, .timeout = 300) {
    corpus();
    cr_assert_eq(trainer(DIR "/gate_base", "--rows contiguous -x 30 -v 10 -m 2 -d 64"), 0);
    cr_assert_eq(trainer(DIR "/gate_closed", "--rows contiguous -x 30 -v 10 -m 2 -d 64 -n 1 --hybrid --lookahead 0.5 --noise-gate 1000000"), 0);
    cr_assert_eq(trainer(DIR "/gate_none", "--rows contiguous -x 30 -v 10 -m 2 -d 64 --hybrid --lookahead 0.5 --noise-gate 0"), 0);
    cr_assert_eq(trainer(DIR "/gate_micro1", "--rows contiguous -x 30 -v 10 -m 2 --hybrid --noise-gate 1000000 --lookahead 0.125"), 0);
    cr_assert_eq(summary_number(DIR "/gate_closed", "lookahead_steps"), 0);
    cr_assert_gt(summary_number(DIR "/gate_closed", "lookahead_gated_steps"), 15);  // the window: 27 steps
    cr_assert_gt(summary_number(DIR "/gate_closed", "noise_scale_running"), 64);
    // no cool-down by default: the look-ahead runs from the prefill (10%: 3 steps) to the last step
    cr_assert_eq(summary_number(DIR "/gate_none", "lookahead_steps"), 27);
    cr_assert_eq(summary_number(DIR "/gate_none", "lookahead_gated_steps"), 0);
    cr_assert_gt(summary_number(DIR "/gate_micro1", "lookahead_steps"), 15, "one micro batch: the gate must stay open");
    char *base = loss_fields(DIR "/gate_base"), *closed = loss_fields(DIR "/gate_closed"), *none = loss_fields(DIR "/gate_none");
    cr_assert_eq(same_losses(base, closed, "gate closed against the baseline"), 30);
    char* last_base = strrchr(base, 'v'), *last_none = strrchr(none, 'v');  // the final "val_loss" fields
    cr_assert(strcmp(last_base, last_none) != 0, "ratio 0 must look ahead and train differently");
    char* log = slurp(DIR "/gate_micro1.log");
    cr_assert(strstr(log, "noise gate: open (one micro batch per step") != NULL);
    free(log);
    // resume from inside the window (the gate's estimate and counters come back with the hybrid state)
    cr_assert_eq(system("rm -rf " DIR "/gate_resume && cp -r " DIR "/gate_closed " DIR "/gate_resume && cd " DIR "/gate_resume && "
                        "for f in DONE_*; do s=$(echo $f | sed 's/DONE_0*//'); [ \"$s\" -gt 12 ] && rm $f; done; true"), 0);
    cr_assert_eq(trainer(DIR "/gate_resume", "--rows contiguous -x 30 -v 10 -m 2 -d 64 -n 1 --hybrid --lookahead 0.5 --noise-gate 1000000 -y 1"), 0);
    char *want = loss_fields(DIR "/gate_closed"), *got = loss_fields(DIR "/gate_resume");
    cr_assert_str_eq(got, want, "resume inside the window differs");
    cr_assert_eq(summary_number(DIR "/gate_resume", "lookahead_gated_steps"), summary_number(DIR "/gate_closed", "lookahead_gated_steps"));
    cr_assert_eq(summary_number(DIR "/gate_resume", "noise_scale_running"), summary_number(DIR "/gate_closed", "noise_scale_running"));
    free(want); free(got); free(base); free(closed); free(none);
}

// an EMA beside hybrid mode with nothing on: the drift family's fused pass folds it exactly as the baseline's
// AdamW pass does, so the run is the baseline's with the same --ema bit for bit, val_loss_ema included
Test(hybrid_train, hybrid_alone_with_an_ema_is_the_baseline_with_it) {
    corpus();
    cr_assert_eq(trainer(DIR "/alone_ema", "-x 12 -v 4 -m 2 -d 64 --ema 0.9 --hybrid"), 0);
    cr_assert_eq(trainer(DIR "/alone_ema_base", "-x 12 -v 4 -m 2 -d 64 --ema 0.9"), 0);
    char *la = as_baseline(DIR "/alone_ema"), *lb = as_baseline(DIR "/alone_ema_base");
    cr_assert(la != NULL, "a step with a look-ahead, a Predict run or a rollback");
    cr_assert(strstr(lb, "\"val_loss_ema\"") != NULL, "no val_loss_ema in the baseline's metrics");
    cr_assert_str_eq(la, lb, "metrics.jsonl differs from the baseline's with the same EMA");
    free(la); free(lb);
}

// nothing is on by default: `--hybrid` alone is the baseline's run bit for bit, at one micro batch per step
// and at two (where the gate measures), and the trainer says so at start-up, before the first step, with
// how to turn the look-ahead on; a look-ahead given at one micro batch runs ungated, with a warning that
// names it and what to do; neither line where it does not apply
Test(hybrid_train, hybrid_alone_is_the_baseline) {
    corpus();
    const char* nothing = "hybrid: nothing is on: --hybrid 1 names no method";
    const char* blind = "noise gate: blind at one micro batch per step";
    const char* arms[][3] = {{DIR "/alone1", DIR "/alone1_base", ""}, {DIR "/alone2", DIR "/alone2_base", " -d 64"}};
    for (int i = 0; i < 2; i++) {
        char flags[128];
        snprintf(flags, sizeof(flags), "-x 12 -v 4 -m 2%s --hybrid", arms[i][2]);
        cr_assert_eq(trainer(arms[i][0], flags), 0);
        snprintf(flags, sizeof(flags), "-x 12 -v 4 -m 2%s", arms[i][2]);
        cr_assert_eq(trainer(arms[i][1], flags), 0);
        char path[256];
        snprintf(path, sizeof(path), "%s.log", arms[i][0]);
        char* log = slurp(path);
        char *at = strstr(log, nothing), *step1 = strstr(log, "step    1/");
        cr_assert(at != NULL, "%s: no start-up line", flags);
        cr_assert(step1 != NULL && at < step1, "the line must come before the first step");
        cr_assert(strstr(at, "--lookahead 0.5") != NULL && strstr(log, blind) == NULL);
        cr_assert(strstr(log, "look-ahead: off (--lookahead gives beta0)") != NULL, "the summary must say the look-ahead was off");
        free(log);
        cr_assert_eq(summary_number(arms[i][0], "lookahead_beta0"), 0);
        cr_assert_eq(summary_number(arms[i][0], "lookahead_steps"), 0);
        char *a = loss_fields(arms[i][0]), *b = loss_fields(arms[i][1]);
        cr_assert_eq(same_losses(b, a, "--hybrid alone against the baseline"), 12);
        free(a); free(b);
        // every other field too, the phase names included: the log a baseline run writes
        char *la = as_baseline(arms[i][0]), *lb = as_baseline(arms[i][1]);
        cr_assert(la != NULL, "%s: a step with a look-ahead, a Predict run or a rollback", flags);
        cr_assert(strstr(lb, "\"rollback\"") == NULL && strstr(lb, "\"ms\"") == NULL && strlen(lb) > 500);
        cr_assert_str_eq(la, lb, "%s: metrics.jsonl differs from the baseline's", flags);
        free(la); free(lb);
    }
    // a given beta0 at one micro batch runs ungated: the warning names it and what to do
    cr_assert_eq(trainer(DIR "/micro1_given", "-x 4 -v 0 --hybrid --lookahead 0.3"), 0);
    cr_assert_float_eq(summary_number(DIR "/micro1_given", "lookahead_beta0"), 0.3, 1e-6);
    char* log = slurp(DIR "/micro1_given.log");
    char* at = strstr(log, blind);
    cr_assert(at != NULL && strstr(at, "32 tokens per step") != NULL && strstr(at, "--lookahead 0") != NULL);
    cr_assert(strstr(at, "at beta0 0.3") != NULL && strstr(log, nothing) == NULL);
    free(log);
    const char* quiet[][2] = {{DIR "/given_d64", "-x 4 -v 0 -d 64 --hybrid --lookahead 0.5"},
                              {DIR "/given_nogate", "-x 4 -v 0 --hybrid --lookahead 0.5 --noise-gate 0"},
                              {DIR "/predict_only", "-x 8 -v 0 --hybrid --hybrid-warmup 2 --predict-steps 2"},
                              {DIR "/no_hybrid", "-x 4 -v 0"}};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(trainer(quiet[i][0], quiet[i][1]), 0);
        char path[256];
        snprintf(path, sizeof(path), "%s.log", quiet[i][0]);
        log = slurp(path);
        cr_assert(strstr(log, nothing) == NULL && strstr(log, blind) == NULL, "%s: a line where none applies", quiet[i][1]);
        free(log);
    }
    cr_assert_eq(summary_number(DIR "/given_d64", "lookahead_beta0"), 0.5);
}

Test(hybrid_train, resume_is_bit_exact, .timeout = 600) {
    corpus();
    // a checkpoint every step, resumed from several of them: inside the drift's prefill, inside a Predict run,
    // on a Correct step, inside the look-ahead's window, after it
    char flags[512];
    snprintf(flags, sizeof(flags), "-x 45 -v 15 -m 2 -n 1 %s", PREDICT_FLAGS);
    cr_assert_eq(trainer(DIR "/full", flags), 0);
    char* want = loss_fields(DIR "/full");
    cr_assert(strstr(want, "predict") != NULL);
    int mid_run = 0;
    const int froms[] = {3, 15, 16, 17, 18, 19, 20, 35};
    for (int f = 0; f < (int)(sizeof(froms) / sizeof(froms[0])); f++) {
        int from = froms[f];
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "rm -rf " DIR "/resume && cp -r " DIR "/full " DIR "/resume && cd " DIR "/resume && "
                 "for f in DONE_*; do s=$(echo $f | sed 's/DONE_0*//'); [ \"$s\" -gt %d ] && rm $f; done; true", from);
        cr_assert_eq(system(cmd), 0);
        char args[600];
        snprintf(args, sizeof(args), "%s -y 1", flags);
        cr_assert_eq(trainer(DIR "/resume", args), 0, "resume from %d failed", from);
        char* got = loss_fields(DIR "/resume");
        cr_assert_str_eq(got, want, "resume from step %d differs", from);
        free(got);
        // was that checkpoint inside a Predict run? (the step after it is the run's second Predict step)
        char line[96];
        snprintf(line, sizeof(line), "\"step\": %d;\"phase\": \"predict\"", from);
        char next[96];
        snprintf(next, sizeof(next), "\"step\": %d;\"phase\": \"predict\"", from + 1);
        mid_run += strstr(want, line) != NULL && strstr(want, next) != NULL;
    }
    cr_assert_gt(mid_run, 0, "no checkpoint fell inside a Predict run; the test must cover that case");
    free(want);
}

Test(hybrid_train, memory_constant_over_2000_steps, .timeout = 600) {
    corpus();
    char args[512];
    snprintf(args, sizeof(args), "-x 50 -v 0 %s", PREDICT_FLAGS);
    cr_assert_eq(trainer(DIR "/rss50", args), 0);
    snprintf(args, sizeof(args), "-x 2000 -v 0 %s", PREDICT_FLAGS);
    cr_assert_eq(trainer(DIR "/rss2000", args), 0);
    double a = summary_number(DIR "/rss50", "peak_rss_mib"), b = summary_number(DIR "/rss2000", "peak_rss_mib");
    cr_assert(fabs(a - b) <= 1.0, "peak RSS %.2f MiB after 50 steps, %.2f MiB after 2000", a, b);
    cr_assert_gt(summary_number(DIR "/rss2000", "steps_predict"), 300);
}
