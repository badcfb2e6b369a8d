/*
 * test/fuzz/fuzz_hybrid.c — the hybrid state loader (hybrid_load in hybrid/hybrid.h) on hostile files,
 * as a resume in hybrid mode reads hybrid_%08d.bin. The input is a state file for a fixed configuration
 * (rssm predictor, adaptive horizons, EMA direction, 4 blocks of 8 parameters). An accepted state must
 * (1) save and load again to the same bytes, and (2) drive 24 more steps of a simulated training run
 * (a quadratic loss with AdamW, every hybrid call the trainer makes) without a memory error: the loader's
 * checks are what keep the loaded counters and indices inside the arrays they address.
 * Seed: FUZZ_HYBRID_SEED=<file> ./build/fuzz/replay_hybrid writes the state after 40 simulated steps.
 */
#include "test/fuzz/fuzz.h"
#include "hybrid/hybrid.h"

#define NB 4
#define P (NB * 8)
static const size_t offsets[NB + 1] = {0, 8, 16, 24, 32};
static const float decay[NB] = {0.0f, 0.1f, 0.0f, 0.1f};

typedef struct { float params[P], target[P], m[P], v[P], grads[P], direction[P], keep[P]; int t; } Sim;

static void setup(HybridState* h) {
    HybridConfig cfg;
    hybrid_config_default(&cfg);
    cfg.enabled = 1;
    cfg.predictor = PREDICTOR_RSSM;
    cfg.adaptive = 1;
    cfg.warmup = 4;
    cfg.max_predict_steps = 4;
    cfg.correction_interval = 2;
    hybrid_init(h, &cfg, offsets, NB, 200, 1e-2f, 0.9f, 0.95f, 1e-8f, decay, 1337);
}

static float sim_loss(const Sim* s) {
    float l = 0.0f;
    for (int i = 0; i < P; i++) { l += (s->params[i] - s->target[i]) * (s->params[i] - s->target[i]); }
    return l / P;
}

// one step of the trainer's loop (train_gpt2.c), on the quadratic model
static void sim_step(HybridState* h, Sim* s, int step) {
    float lr = 1e-2f;
    HybridPhase phase = hybrid_begin_step(h, step, lr);
    if (phase == PHASE_PREDICT) {
        ApplyDirection dir = hybrid_direction(h, s->direction, s->m, s->v);
        hybrid_apply_predict(h, s->params, s->keep, &dir);
        if (hybrid_micro_due(h)) { hybrid_micro_result(h, sim_loss(s)); }
        hybrid_end_step(h, NAN, NAN, 1.0);
        return;
    }
    float loss = sim_loss(s);
    if (hybrid_correct_check(h, loss) == ACTION_ROLLBACK) {
        hybrid_rollback(h, s->params, s->keep);
        loss = sim_loss(s);
    }
    float norm = 0.0f;
    for (int i = 0; i < P; i++) { s->grads[i] = 2.0f * (s->params[i] - s->target[i]) / P; norm += s->grads[i] * s->grads[i]; }
    s->t++;
    memset(h->stats, 0, NB * 3 * sizeof(double));
    hybrid_update(h, s->params, s->grads, s->m, s->v, s->direction, 1.0f, s->t);
    hybrid_end_step(h, loss, sqrtf(norm), 1.0);
}

static void sim_init(Sim* s) {
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < P; i++) { s->params[i] = 0.1f * (float)(i % 7); s->target[i] = 1.0f - 0.05f * (float)i; }
}

static void write_seed(const char* path) {
    HybridState h;
    Sim s;
    setup(&h);
    sim_init(&s);
    for (int step = 0; step < 40; step++) { sim_step(&h, &s, step); }
    FILE* fp = fopen(path, "wb");
    char err[200];
    if (fp == NULL || hybrid_save(&h, fp, s.direction, s.keep, err, sizeof(err)) != 0 || fclose(fp) != 0) {
        fprintf(stderr, "cannot write seed %s\n", path);
        exit(1);
    }
    hybrid_free(&h);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static int seeded;
    if (!seeded && getenv("FUZZ_HYBRID_SEED") != NULL) { write_seed(getenv("FUZZ_HYBRID_SEED")); }
    seeded = 1;
    const char* path = fuzz_write_input(data, size);
    static unsigned char buf1[1 << 20], buf2[1 << 20];
    if (fuzz_begin()) {
        HybridState h, h2;
        Sim s;
        setup(&h);
        sim_init(&s);
        FILE* fp = fopen(path, "rb");
        char err[200];
        int rc = hybrid_load(&h, fp, s.direction, s.keep, err, sizeof(err));
        fclose(fp);
        if (rc == 0) {
            size_t n = hybrid_state_size(&h, s.direction, s.keep);
            if (n > sizeof(buf1) || hybrid_save_buffer(&h, buf1, n, s.direction, s.keep) != 0) { abort(); }
            Sim s2 = s;
            setup(&h2);
            if (hybrid_load_buffer(&h2, buf1, n, s2.direction, s2.keep, err, sizeof(err)) != 0) {
                fprintf(stderr, "a saved state does not load: %s\n", err);
                abort();
            }
            if (hybrid_state_size(&h2, s2.direction, s2.keep) != n || hybrid_save_buffer(&h2, buf2, n, s2.direction, s2.keep) != 0 ||
                memcmp(buf1, buf2, n) != 0) {
                fprintf(stderr, "save(load(save(x))) differs from save(x)\n");
                abort();
            }
            hybrid_free(&h2);
            for (int k = 0; k < 24; k++) { sim_step(&h, &s, 40 + k); }  // the seed stopped at step 40
        }
        hybrid_free(&h);
    }
    fuzz_end();
    return 0;
}
