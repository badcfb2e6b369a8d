// Hybrid mode on a tiny GPT-2 (depth 1, vocab 256): in process, Predict steps move the real
// parameters by exactly the predicted amount and rollback restores them; through ./train_gpt2,
// memory stays constant over 2,000 steps, a hybrid run resumes bit-exactly, and `--hybrid 0`
// gives the same losses as no flag.
#define TESTING
#include "../train_gpt2.c"
#include <criterion/criterion.h>
#include <sys/wait.h>

#define VOCAB 256
#define DIR "build/test_hybrid_train.d"
#define ADAM_BETA1 0.9f  // the trainer's AdamW settings (defined in its main section)
#define ADAM_BETA2 0.95f
#define ADAM_EPS 1e-8f

// ----------------------------------------------------------------------------
// a tiny corpus: shards in llm.c's format with vocab 256, token streams with structure to learn

static void write_shard(const char* path, int ntok, uint64_t seed) {
    int header[256] = {0};
    header[0] = 20240520; header[1] = 1; header[2] = ntok; header[3] = VOCAB;
    uint16_t* toks = malloc((size_t)ntok * sizeof(uint16_t));
    uint64_t rng = seed;
    for (int i = 0; i < ntok; i++) {
        // mostly an arithmetic pattern, with noise: learnable, not trivial
        toks[i] = (uint16_t)((hmath_u32(&rng) % 4 == 0) ? hmath_u32(&rng) % VOCAB : (uint32_t)(i * 7 + i / 13) % VOCAB);
    }
    // Criterion runs tests in parallel and each rewrites the shards: write aside and rename, so that a
    // trainer started by another test never reads a half-written shard
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    FILE* f = fopen(tmp, "wb");
    cr_assert_not_null(f, "%s", tmp);
    fwrite(header, sizeof(int), 256, f);
    fwrite(toks, sizeof(uint16_t), (size_t)ntok, f);
    fclose(f);
    cr_assert_eq(rename(tmp, path), 0);
    free(toks);
}

static void corpus(void) {
    mkdir("build", 0755);
    mkdir(DIR, 0755);
    write_shard(DIR "/train_000000.bin", 1 << 16, 1);
    write_shard(DIR "/val_000000.bin", 4096, 2);
}

// runs ./train_gpt2 with the tiny corpus and `args`, output to out_dir; returns the exit status
static int trainer(const char* out_dir, const char* args) {
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 ./train_gpt2 -i " DIR "/train_*.bin -j " DIR "/val_*.bin -e d1 "
             "-b 2 -t 16 -s 0 -o %s %s > %s.log 2>&1", out_dir, args, out_dir);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static char* slurp(const char* path) {
    FILE* f = fopen(path, "rb");
    cr_assert_not_null(f, "%s missing", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char* s = malloc((size_t)n + 1);
    cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

// the "loss", "val_loss", "phase" and "predicted_loss" fields of every metrics.jsonl line, concatenated:
// what must be identical between two runs (times differ)
static char* loss_fields(const char* dir) {
    char path[512];
    snprintf(path, sizeof(path), "%s/metrics.jsonl", dir);
    char* text = slurp(path);
    size_t cap = strlen(text) + 1;
    char* out = calloc(cap, 1);
    static const char* keys[] = {"\"step\": ", "\"phase\": ", "\"loss\": ", "\"val_loss\": ", "\"predicted_loss\": "};
    for (char* line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        for (int k = 0; k < 5; k++) {
            char* p = strstr(line, keys[k]);
            if (p == NULL) { continue; }
            size_t len = strcspn(p, ",}");
            strncat(out, p, len);
            strcat(out, ";");
        }
        strcat(out, "\n");
    }
    free(text);
    return out;
}

static double summary_number(const char* dir, const char* key) {
    char path[512];
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    char* text = slurp(path);
    char pat[128];
    snprintf(pat, sizeof(pat), "\"%s\": ", key);
    char* p = strstr(text, pat);
    cr_assert_not_null(p, "%s has no %s", path, key);
    double v = atof(p + strlen(pat));
    free(text);
    return v;
}

// ----------------------------------------------------------------------------
// in process: the facade on a real model, as train_gpt2.c drives it

typedef struct { GPT2 model; HybridState h; float* direction; int t; int* x; int* y; } Tiny;

static void tiny_init(Tiny* s, int direction) {
    gpt2_build_from_random(&s->model, 1, VOCAB, 7);
    gpt2_allocate(&s->model, 2, 16);
    int nb = 12 + 4;
    size_t offsets[17];
    float wd[16];
    gpt2_param_blocks(&s->model.config, offsets, wd, 0.1f);
    cr_assert_eq(offsets[nb], s->model.num_parameters);
    HybridConfig c;
    hybrid_config_default(&c);
    c.enabled = 1; c.warmup = 3; c.full_steps = 1; c.max_predict_steps = 4; c.confidence_threshold = 0.0f;
    c.direction = direction;
    hybrid_init(&s->h, &c, offsets, nb, 100, 1e-3f, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, wd, 7);
    s->direction = calloc(s->model.num_parameters, sizeof(float));
    s->t = 0;
    s->x = malloc(32 * sizeof(int)); s->y = malloc(32 * sizeof(int));
    uint64_t rng = 3;
    for (int i = 0; i < 32; i++) { s->x[i] = hmath_u32(&rng) % VOCAB; s->y[i] = (s->x[i] * 7) % VOCAB; }
}

static void tiny_free(Tiny* s) {
    hybrid_free(&s->h);
    gpt2_free(&s->model);
    free(s->direction); free(s->x); free(s->y);
}

// one measured step (Full/Warmup/Correct without rollback)
static void tiny_full(Tiny* s, float lr) {
    GPT2* m = &s->model;
    gpt2_forward(m, s->x, s->y, 2, 16);
    gpt2_zero_grad(m);
    gpt2_backward(m, s->x, s->y, 1.0f);
    float gn = gpt2_grad_norm(m);
    float scale = gn > 1.0f ? 1.0f / gn : 1.0f;
    s->t++;
    cr_assert_eq(s->h.lr, lr);
    hybrid_update(&s->h, m->params_memory, m->grads_memory, m->m_memory, m->v_memory, s->direction, scale, s->t);
    hybrid_end_step(&s->h, m->mean_loss, gn, 1.0);
}

static void predict_moves_exactly_and_rollback_restores(int direction) {
    Tiny s;
    tiny_init(&s, direction);
    GPT2* m = &s.model;
    size_t P = m->num_parameters;
    float* before = malloc(P * sizeof(float));
    float* prev = malloc(P * sizeof(float));
    int step = 0, predicted = 0;
    for (; step < 20; step++) {
        HybridPhase ph = hybrid_begin_step(&s.h, step, 1e-3f);
        if (ph != PHASE_PREDICT) { tiny_full(&s, 1e-3f); continue; }
        if (s.h.run_steps == 1) { memcpy(before, m->params_memory, P * sizeof(float)); } // the test's own copy
        memcpy(prev, m->params_memory, P * sizeof(float));
        ApplyDirection dir = hybrid_direction(&s.h, s.direction, m->m_memory, m->v_memory);
        hybrid_apply_predict(&s.h, m->params_memory, m->grads_memory, &dir);
        // exactly the predicted amount, element by element: theta + fl(coef_b * d_i)
        size_t moved = 0;
        for (int b = 0; b < s.h.nblocks; b++) {
            for (size_t i = s.h.offsets[b]; i < s.h.offsets[b + 1]; i++) {
                volatile float x = s.h.coef[b] * apply_direction_at(&dir, i);
                volatile float want = prev[i] + x;
                cr_assert(m->params_memory[i] == want, "block %d elem %zu: %a vs %a", b, i, m->params_memory[i], (float)want);
                moved += m->params_memory[i] != prev[i];
            }
        }
        cr_assert_gt(moved, P / 4, "a Predict step must move the weights (%zu of %zu moved)", moved, P);
        hybrid_end_step(&s.h, NAN, NAN, 1.0);
        predicted++;
        if (s.h.ctrl.run_done == s.h.ctrl.run_length && s.h.ctrl.run_length >= 2) { break; }
    }
    cr_assert_gt(predicted, 1, "no Predict run happened");
    // the run's loss differs from the loss before it: Predict steps change the model
    gpt2_forward(m, s.x, s.y, 2, 16);
    float loss_after = m->mean_loss;
    hybrid_rollback(&s.h, m->params_memory, m->grads_memory);
    size_t worst = 0;
    for (size_t i = 0; i < P; i++) {
        uint32_t a, b;
        memcpy(&a, &m->params_memory[i], 4);
        memcpy(&b, &before[i], 4);
        size_t d = a > b ? a - b : b - a; // same sign here: ulp distance
        if (d > worst) { worst = d; }
    }
    cr_assert_leq(worst, 1, "rollback off by %zu ulp", worst);
    gpt2_forward(m, s.x, s.y, 2, 16);
    cr_assert_neq(loss_after, m->mean_loss);
    free(before); free(prev);
    tiny_free(&s);
}

Test(hybrid_train, predict_moves_exactly_and_rollback_restores_ema) { predict_moves_exactly_and_rollback_restores(DIRECTION_EMA); }
Test(hybrid_train, predict_moves_exactly_and_rollback_restores_adam) { predict_moves_exactly_and_rollback_restores(DIRECTION_ADAM); }

// the fused pass (hybrid_update) moves the weights and moments exactly as the trainer's plain
// gpt2_update over several steps, for both directions: hybrid mode costs no accuracy on its Full steps
static void fused_update_equals_plain(int direction) {
    Tiny a, b;
    tiny_init(&a, direction);
    tiny_init(&b, direction);
    size_t P = a.model.num_parameters;
    for (int t = 1; t <= 4; t++) {
        float lr = 1e-3f * (float)t;
        hybrid_begin_step(&b.h, t - 1, lr);
        for (Tiny* s = &a; s != NULL; s = s == &a ? &b : NULL) {
            gpt2_forward(&s->model, s->x, s->y, 2, 16);
            gpt2_zero_grad(&s->model);
            gpt2_backward(&s->model, s->x, s->y, 1.0f);
        }
        float gn = gpt2_grad_norm(&a.model), scale = gn > 1.0f ? 1.0f / gn : 1.0f;
        gpt2_update(&a.model, lr, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, 0.1f, scale, t);
        hybrid_update(&b.h, b.model.params_memory, b.model.grads_memory, b.model.m_memory, b.model.v_memory,
                      b.direction, scale, t);
        cr_assert(memcmp(a.model.params_memory, b.model.params_memory, P * 4) == 0, "step %d: weights differ", t);
        cr_assert(memcmp(a.model.m_memory, b.model.m_memory, P * 4) == 0, "step %d: m differs", t);
        cr_assert(memcmp(a.model.v_memory, b.model.v_memory, P * 4) == 0, "step %d: v differs", t);
        cr_assert_gt(b.h.stats[2], 0.0, "no update measured");
        hybrid_end_step(&b.h, b.model.mean_loss, gn, 1.0);
    }
    tiny_free(&a); tiny_free(&b);
}

Test(hybrid_train, fused_update_equals_plain_adamw_ema) { fused_update_equals_plain(DIRECTION_EMA); }
Test(hybrid_train, fused_update_equals_plain_adamw_adam) { fused_update_equals_plain(DIRECTION_ADAM); }

// ----------------------------------------------------------------------------
// through the binary

Test(hybrid_train, all_phases_and_summary) {
    corpus();
    cr_assert_eq(trainer(DIR "/phases", "-x 60 -v 20 -m 2 --hybrid --hybrid-warmup 5 --max-predict-steps 4 --confidence-threshold 0"), 0);
    for (int p = 0; p < PHASE_COUNT; p++) {
        char key[32];
        snprintf(key, sizeof(key), "steps_%s", phase_name((HybridPhase)p));
        cr_assert_gt(summary_number(DIR "/phases", key), 0, "no %s steps", key);
    }
    char* log = slurp(DIR "/phases.log");
    cr_assert(strstr(log, "| predict | predicted loss") != NULL);
    cr_assert(strstr(log, "hybrid summary") != NULL);
    cr_assert(strstr(log, "steps without backward") != NULL);
    free(log);
    // backward passes = steps - Predict steps
    cr_assert_eq(summary_number(DIR "/phases", "backward"), 60 - summary_number(DIR "/phases", "steps_predict"));
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

Test(hybrid_train, resume_is_bit_exact, .timeout = 600) {
    corpus();
    // a checkpoint every step: the value test probes only the first runs (2% of the schedule), so the
    // checkpoints inside a Predict run, after its Correct step (a probe pair open) and after the pair
    // completes all lie in the first steps
    const char* flags = "-x 45 -v 15 -m 2 -n 1 --hybrid --hybrid-warmup 4 --max-predict-steps 4 --confidence-threshold 0";
    cr_assert_eq(trainer(DIR "/full", flags), 0);
    char* want = loss_fields(DIR "/full");
    cr_assert(strstr(want, "predict") != NULL);
    // resume from several checkpoints, some of them in the middle of a Predict run
    int mid_run = 0;
    const int froms[] = {5, 6, 7, 8, 9, 20, 35};
    for (int f = 0; f < (int)(sizeof(froms) / sizeof(froms[0])); f++) {
        int from = froms[f];
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "rm -rf " DIR "/resume && cp -r " DIR "/full " DIR "/resume && cd " DIR "/resume && "
                 "for f in DONE_*; do s=$(echo $f | sed 's/DONE_0*//'); [ \"$s\" -gt %d ] && rm $f; done; true", from);
        cr_assert_eq(system(cmd), 0);
        char args[512];
        snprintf(args, sizeof(args), "%s -y 1", flags);
        cr_assert_eq(trainer(DIR "/resume", args), 0, "resume from %d failed", from);
        char* got = loss_fields(DIR "/resume");
        cr_assert_str_eq(got, want, "resume from step %d differs", from);
        free(got);
        // was that checkpoint inside a Predict run? (the next step is predict or correct)
        char line[64];
        snprintf(line, sizeof(line), "\"step\": %d;\"phase\": \"predict\"", from);
        mid_run += strstr(want, line) != NULL;
    }
    cr_assert_gt(mid_run, 0, "no checkpoint fell inside a Predict run; the test must cover that case");
    free(want);
}

Test(hybrid_train, memory_constant_over_2000_steps, .timeout = 600) {
    corpus();
    const char* flags = "-v 0 --hybrid --hybrid-warmup 5 --max-predict-steps 4 --confidence-threshold 0 --predictor rssm";
    char args[512];
    snprintf(args, sizeof(args), "-x 50 %s", flags);
    cr_assert_eq(trainer(DIR "/rss50", args), 0);
    snprintf(args, sizeof(args), "-x 2000 %s", flags);
    cr_assert_eq(trainer(DIR "/rss2000", args), 0);
    double a = summary_number(DIR "/rss50", "peak_rss_mib"), b = summary_number(DIR "/rss2000", "peak_rss_mib");
    cr_assert(fabs(a - b) <= 1.0, "peak RSS %.2f MiB after 50 steps, %.2f MiB after 2000", a, b);
    cr_assert_gt(summary_number(DIR "/rss2000", "steps_predict"), 500);
}
