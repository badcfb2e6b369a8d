/*
 * test/fuzz/fuzz_hybrid.c — the hybrid state loader (hybrid_load in hybrid/hybrid.h) on hostile files,
 * as a resume in hybrid mode reads hybrid_%08d.bin. The input is a state file for a fixed configuration
 * (the look-ahead at beta0 0.5, Predict runs of 2 steps every 2 measured steps, 4 blocks of 8 parameters).
 * An accepted state must (1) save and load again to the same bytes, and (2) drive 24 more steps of a
 * simulated training run (a quadratic loss with AdamW, every hybrid call the trainer makes, in the order
 * train_gpt2.c makes them) without a memory error: the loader's checks are what keep the loaded counters
 * and positions inside what they address.
 * Every input is loaded twice: as it is, and with its checksum made to match (fix_checksum).
 * Once per process the target also runs the simulation itself for SEED_STEPS steps (ending inside an open
 * Predict run, so that the keep buffer is in the file) and checks that its state round-trips.
 * Seed: FUZZ_HYBRID_SEED=<file> ./build/fuzz/replay_hybrid writes that state.
 */
#include "test/fuzz/fuzz.h"
#include "hybrid/hybrid.h"

#define NB 4
#define P (NB * 8)
#define STEPS 200
#define SEED_STEPS 41   // steps 40-41 are a Predict run: the seed is saved with its run open
static const size_t offsets[NB + 1] = {0, 8, 16, 24, 32};
static const float decay[NB] = {0.0f, 0.1f, 0.0f, 0.1f};

// grads doubles as the keep buffer of an open Predict run, as the CPU trainer's gradient buffer does
typedef struct { float params[P], target[P], m[P], v[P], grads[P], drift[P]; int t; } Sim;

static void setup(HybridState* h, Sim* s) {
    HybridConfig cfg;
    hybrid_config_default(&cfg);
    cfg.enabled = 1;
    cfg.lookahead = 0.5f;
    cfg.warmup = 4;
    cfg.predict_steps = 2;
    cfg.full_steps = 2;
    cfg.noise_gate = 4.0f;  // sim_step's noise terms hover about a ratio of 4: the gate opens and closes
    hybrid_init(h, &cfg, offsets, NB, STEPS, 1024.0, 1e-2f, 0.9f, 0.95f, 1e-8f, decay, NULL, 0);
    float* bufs[1] = {s->drift};  // the simulated trainer's drift
    hybrid_use_buffers(h, bufs);
}

static float sim_loss(const Sim* s) {
    float l = 0.0f;
    for (int i = 0; i < P; i++) { l += (s->params[i] - s->target[i]) * (s->params[i] - s->target[i]); }
    return l / P;
}

// one step of the trainer's loop (train_gpt2.c: train_full_step, train_predict_step), on the quadratic model
static void sim_step(HybridState* h, Sim* s, int step) {
    float lr = 1e-2f;
    HybridPlan p = hybrid_plan(h, step, lr);
    if (p.phase == HYBRID_PHASE_PREDICT) {
        hybrid_apply_predict(h, &p, s->params, s->grads);
        hybrid_observe(h, NAN, NAN, NAN, NAN, NAN, 1.0);
        return;
    }
    float loss = sim_loss(s);
    if (p.check && hybrid_check(h, loss)) {  // the gradients still hold theta_0
        apply_rollback(s->params, s->grads, P);
        loss = sim_loss(s);
    }
    float norm2 = 0.0f;
    for (int i = 0; i < P; i++) { s->grads[i] = 2.0f * (s->params[i] - s->target[i]) / P; norm2 += s->grads[i] * s->grads[i]; }
    float norm = sqrtf(norm2);
    if (isfinite(loss) && isfinite(norm)) {
        float scale = norm > 1.0f ? 1.0f / norm : 1.0f;
        hybrid_update(h, s->params, s->grads, s->m, s->v, scale, ++s->t);
        hybrid_observe(h, loss, p.observe ? loss : NAN, norm, 4096.0 * norm * norm, (double)(step % 3) * norm * norm, 1.0);  // the gate opens and closes
    } else {
        hybrid_skip_update(h);
        hybrid_observe(h, NAN, p.observe ? loss : NAN, NAN, NAN, NAN, 1.0);
    }
}

static void sim_init(Sim* s) {
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < P; i++) { s->params[i] = 0.1f * (float)(i % 7); s->target[i] = 1.0f - 0.05f * (float)i; }
}

static unsigned char buf1[1 << 16], buf2[1 << 16];

// save(x) -> load -> save: the same bytes; aborts (a finding) otherwise
static void check_round_trip(HybridState* h, Sim* s) {
    size_t n = hybrid_state_size(h, NULL, s->grads);
    if (n > sizeof(buf1) || hybrid_save_buffer(h, buf1, n, NULL, s->grads) != 0) { abort(); }
    HybridState h2;
    Sim s2 = *s;
    memset(s2.drift, 0, sizeof(s2.drift));
    memset(s2.grads, 0, sizeof(s2.grads));
    setup(&h2, &s2);
    char err[200];
    if (hybrid_load_buffer(&h2, buf1, n, NULL, s2.grads, err, sizeof(err)) != 0) {
        fprintf(stderr, "a saved state does not load: %s\n", err);
        abort();
    }
    if (hybrid_state_size(&h2, NULL, s2.grads) != n || hybrid_save_buffer(&h2, buf2, n, NULL, s2.grads) != 0 ||
        memcmp(buf1, buf2, n) != 0) {
        fprintf(stderr, "save(load(save(x))) differs from save(x)\n");
        abort();
    }
    hybrid_free(&h2);
}

// the simulation's own state after SEED_STEPS steps: round-trips, and is the seed file if asked for
static void reference_state(void) {
    HybridState h;
    Sim s;
    setup(&h, &s);
    sim_init(&s);
    for (int step = 0; step < SEED_STEPS; step++) { sim_step(&h, &s, step); }
    if (!hybrid_run_open(&h) || hybrid_drift(&h)->pr.runs == 0) {
        fprintf(stderr, "the reference state is not inside a Predict run (%d runs)\n", hybrid_drift(&h)->pr.runs);
        abort();
    }
    check_round_trip(&h, &s);
    const char* path = getenv("FUZZ_HYBRID_SEED");
    if (path != NULL) {
        FILE* fp = fopen(path, "wb");
        char err[200];
        if (fp == NULL || hybrid_save(&h, fp, NULL, s.grads, err, sizeof(err)) != 0 || fclose(fp) != 0) {
            fprintf(stderr, "cannot write seed %s\n", path);
            abort();
        }
    }
    hybrid_free(&h);
}

// the input with its last 8 bytes replaced by the checksum of the others (FNV-1a, as hybrid/hio.h): a
// random mutation almost never passes the checksum, and this lets the fields past it reach the loader's
// own checks (ranges, positions) and the simulation
static size_t fix_checksum(const uint8_t* data, size_t size, uint8_t* out, size_t cap) {
    if (size < 8 || size > cap) { return 0; }
    memcpy(out, data, size);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size - 8; i++) { h ^= out[i]; h *= 1099511628211ull; }
    memcpy(out + size - 8, &h, 8);
    return size;
}

static void load_and_run(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_input(data, size);
    if (fuzz_begin()) {
        HybridState h;
        Sim s;
        setup(&h, &s);
        sim_init(&s);
        FILE* fp = fopen(path, "rb");
        char err[200];
        int rc = hybrid_load(&h, fp, NULL, s.grads, err, sizeof(err));
        fclose(fp);
        if (rc == 0) {
            check_round_trip(&h, &s);
            for (int k = 0; k < 24; k++) { sim_step(&h, &s, SEED_STEPS + k); }  // the seed stopped here
        }
        hybrid_free(&h);
    }
    fuzz_end();
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static int once;
    if (!once) { reference_state(); }
    once = 1;
    static uint8_t fixed[1 << 17];
    load_and_run(data, size);
    size_t n = fix_checksum(data, size, fixed, sizeof(fixed));
    if (n > 0) { load_and_run(fixed, n); }
    return 0;
}
