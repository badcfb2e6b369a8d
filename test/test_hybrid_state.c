// hybrid/hybrid.h driven by a simulated trainer (a noisy quadratic, AdamW) through the protocol of
// train_gpt2.c: hybrid_plan, apply_predict / hybrid_check + apply_rollback, hybrid_update, hybrid_report.
// The schedule of Predict runs, their coefficients, the rollback and its back-off, bit-exact resume at any
// step (an open Predict run included), the state file's refusals, the flags and the summary.
#include <criterion/criterion.h>
#include <omp.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "hybrid/hybrid.h"
#include "hybrid/run.h"   // hybrid's flag table as one of the trainers' parser tables (llmc/config.h)

#define NB 4
#define STEPS 120
#define CLIP 1.0f
#define LR_PEAK 0.02f
static const size_t sizes[NB] = {300, 1200, 50, 450};

// one thread: on a model of 2000 parameters a parallel region costs more than its loop, and far more on a
// busy machine. The passes' results do not depend on the thread count (test_hybrid_apply checks that).
static void one_thread(void) { omp_set_num_threads(1); }
TestSuite(state, .init = one_thread);

typedef struct {
    size_t off[NB + 1], P;
    float *p, *m, *v, *g, *d, *target;  // g: the gradients, and the keep buffer of a Predict run
    int t, batch;
    int frozen;                         // a block whose gradient is always zero (-1: none)
    int backward;                       // backward passes so far
} Sim;

static void sim_init(Sim* s) {
    s->off[0] = 0;
    for (int b = 0; b < NB; b++) { s->off[b + 1] = s->off[b] + sizes[b]; }
    s->P = s->off[NB];
    s->p = calloc(s->P, 4); s->m = calloc(s->P, 4); s->v = calloc(s->P, 4);
    s->g = calloc(s->P, 4); s->d = calloc(s->P, 4); s->target = calloc(s->P, 4);
    uint64_t rng = 77;
    for (size_t i = 0; i < s->P; i++) { s->p[i] = 0.5f * random_normal(&rng); s->target[i] = random_normal(&rng); }
    s->t = 0; s->batch = 0; s->frozen = -1; s->backward = 0;
}

// the trainer's state at a checkpoint: parameters, AdamW moments, counters (the drift and the keep
// buffer are copied too; the resume test overwrites them with garbage before loading the hybrid state)
static void sim_copy(Sim* dst, const Sim* src) {
    dst->P = src->P; dst->t = src->t; dst->batch = src->batch; dst->frozen = src->frozen; dst->backward = src->backward;
    memcpy(dst->off, src->off, sizeof(src->off));
    memcpy(dst->p, src->p, src->P * 4); memcpy(dst->m, src->m, src->P * 4); memcpy(dst->v, src->v, src->P * 4);
    memcpy(dst->g, src->g, src->P * 4); memcpy(dst->d, src->d, src->P * 4); memcpy(dst->target, src->target, src->P * 4);
}

static void sim_free(Sim* s) { free(s->p); free(s->m); free(s->v); free(s->g); free(s->d); free(s->target); }

// the "batch" is a deterministic perturbation of the target
static float sim_loss(const Sim* s, int batch) {
    double L = 0.0;
    for (size_t i = 0; i < s->P; i++) {
        float noise = 0.05f * sinf(0.37f * (float)i + 1.3f * (float)batch);
        double e = s->p[i] - s->target[i] - noise;
        L += 0.5 * e * e;
    }
    return (float)(L / s->P);
}

static float sim_backward(Sim* s, int batch) {
    double n2 = 0.0;
    for (size_t i = 0; i < s->P; i++) {
        float noise = 0.05f * sinf(0.37f * (float)i + 1.3f * (float)batch);
        s->g[i] = s->p[i] - s->target[i] - noise;
        n2 += (double)s->g[i] * s->g[i];
    }
    if (s->frozen >= 0) { memset(s->g + s->off[s->frozen], 0, sizes[s->frozen] * 4); }
    s->backward++;
    return (float)sqrt(n2);
}

// the Correct steps whose first micro batch loss is reported this much worse than measured (a prediction
// gone wrong), by step; 0: none
static float g_sabotage[STEPS];
// the steps whose batch has gradients this many times larger (a spike: clipped, and the look-ahead backs
// off); 0: none
static float g_spike[STEPS];
// if set, called after every hybrid_plan (the tests' probe of the decisions)
static void (*g_probe)(HybridState* h, const Sim* s, int step, const HybridPlan* p) = NULL;

static float lr_at(int step) { return LR_PEAK * (0.1f + 0.9f * 0.5f * (1.0f + cosf(3.14159265f * step / STEPS))); }

// the look-ahead on (beta0 0.5, what a run gives to turn it on) and Predict runs of H steps every K measured steps
static void config(HybridConfig* c, int H, int K, int warmup) {
    hybrid_config_default(c);
    c->enabled = 1;
    c->lookahead = 0.5f;
    c->predict_steps = H; c->full_steps = K; c->warmup = warmup;
    c->divergence_threshold = 100.0f;  // only the sabotaged Correct steps roll back
}

static void hybrid_for(HybridState* h, const HybridConfig* c, const Sim* s) {
    const float wd[NB] = {0.0f, 0.1f, 0.0f, 0.1f};
    hybrid_init(h, c, s->off, NB, STEPS, 1024.0, LR_PEAK, 0.9f, 0.95f, 1e-8f, wd, NULL, 0);
    float* bufs[1] = {s->d};  // the simulated trainer's drift
    hybrid_use_buffers(h, bufs);
}

typedef struct {
    float loss[STEPS];        // the measured loss (NAN on Predict steps)
    HybridPhase phase[STEPS];
    int keep[STEPS];          // the plan's keep flag
    int rolled_back[STEPS];
    int verified;             // rollbacks whose parameters matched the pre-run copy bit for bit
} Trace;

// what most tests start from: the simulated trainer, the look-ahead with Predict runs of 2 every 3 measured
// steps after 5 of warm-up (config), and an empty trace
static Trace* start(HybridState* h, Sim* s) {
    HybridConfig c;
    config(&c, 2, 3, 5);
    sim_init(s);
    hybrid_for(h, &c, s);
    return calloc(1, sizeof(Trace));
}

// run steps [from, to) as train_gpt2.c does; snapshot (P floats, or NULL): the test's own copy of the
// parameters before each Predict run, to check rollbacks against
static void sim_run(HybridState* h, Sim* s, int from, int to, Trace* tr, float* snapshot) {
    for (int step = from; step < to; step++) {
        float lr = lr_at(step);
        HybridPlan p = hybrid_plan(h, step, lr);
        if (g_probe != NULL) { g_probe(h, s, step, &p); }
        // the loss a Correct step is judged on comes before its backward; the other measured steps' (its
        // history) after their step, so that a GPU does not wait for it in the middle of a step
        int runs = hybrid_drift(h)->pr.horizon > 0, measured = p.phase != HYBRID_PHASE_PREDICT;
        cr_assert_eq(p.check, runs && p.phase == HYBRID_PHASE_CORRECT, "step %d: check", step);
        cr_assert_eq(p.observe, runs && measured && p.phase != HYBRID_PHASE_CORRECT, "step %d: observe", step);
        tr->phase[step] = p.phase;
        tr->keep[step] = p.keep;
        tr->rolled_back[step] = 0;
        if (p.phase == HYBRID_PHASE_PREDICT) {
            if (p.keep && snapshot != NULL) { memcpy(snapshot, s->p, s->P * 4); }
            apply_predict(s->p, s->g, s->d, h->offsets, h->model.nblocks, p.coef, p.keep);
            tr->loss[step] = NAN;
            hybrid_observe(h, NAN, NAN, NAN, NAN, NAN, 1.0);
            continue;
        }
        float L = sim_loss(s, s->batch);
        float L1 = p.observe ? L + g_sabotage[step] : NAN;  // the other measured steps' loss, reported after
        // the gradient buffer still holds theta_0 of an open run: the check comes before the backward
        if (p.check && hybrid_check(h, L + g_sabotage[step])) {
            apply_rollback(s->p, s->g, s->P);
            tr->rolled_back[step] = 1;
            if (snapshot != NULL) {
                cr_assert(memcmp(s->p, snapshot, s->P * 4) == 0, "step %d: rollback is not the pre-run point", step);
                tr->verified++;
            }
            L = sim_loss(s, s->batch);
        }
        float gn = sim_backward(s, s->batch);
        if (g_spike[step] > 0.0f) {
            for (size_t i = 0; i < s->P; i++) { s->g[i] *= g_spike[step]; }
            gn *= g_spike[step];
        }
        s->batch++;
        if (isfinite(L) && isfinite(gn)) {
            float scale = gn > CLIP ? CLIP / gn : 1.0f;
            hybrid_update(h, s->p, s->g, s->m, s->v, scale, ++s->t);
        } else {
            hybrid_skip_update(h);
        }
        tr->loss[step] = L;
        hybrid_observe(h, L, L1, gn, NAN, NAN, 1.0);
    }
}

static void same_bits(const float* a, const float* b, size_t n, const char* what) {
    cr_assert(memcmp(a, b, n * 4) == 0, "%s differ", what);
}

// ----------------------------------------------------------------------------
// resume

// run STEPS straight; then run to `split`, save (state, drift, keep) to a buffer, load into a fresh
// state and a copy of the trainer's buffers whose drift and keep are garbage, and run to the end.
// Returns whether the split fell inside an open Predict run.
static int resume_case(const HybridConfig* c, int split) {
    Sim a, b, b2;
    sim_init(&a); sim_init(&b); sim_init(&b2);
    HybridState ha, hb, hc;
    hybrid_for(&ha, c, &a);
    Trace *ta = calloc(1, sizeof(Trace)), *tb = calloc(1, sizeof(Trace));
    sim_run(&ha, &a, 0, STEPS, ta, NULL);
    hybrid_for(&hb, c, &b);
    sim_run(&hb, &b, 0, split, tb, NULL);
    int in_run = hybrid_run_open(&hb);
    size_t n = hybrid_state_size(&hb, &b.d, b.g);
    void* buf = malloc(n);
    cr_assert_eq(hybrid_save_buffer(&hb, buf, n, &b.d, b.g), 0);
    sim_copy(&b2, &b);
    for (size_t i = 0; i < b2.P; i++) { b2.d[i] = 1e3f; b2.g[i] = -1e3f; } // both must come from the file
    hybrid_for(&hc, c, &b2);
    char err[200] = "";
    cr_assert_eq(hybrid_load_buffer(&hc, buf, n, &b2.d, b2.g, err, sizeof(err)), 0, "split %d: load: %s", split, err);
    sim_run(&hc, &b2, split, STEPS, tb, NULL);
    for (int s = 0; s < STEPS; s++) {
        cr_assert_eq(ta->phase[s], tb->phase[s], "split %d: step %d phase", split, s);
        cr_assert(memcmp(&ta->loss[s], &tb->loss[s], 4) == 0, "split %d: step %d loss %.9g vs %.9g", split, s,
                  ta->loss[s], tb->loss[s]);
    }
    same_bits(a.p, b2.p, a.P, "parameters");
    same_bits(a.m, b2.m, a.P, "AdamW m");
    same_bits(a.v, b2.v, a.P, "AdamW v");
    same_bits(a.d, b2.d, a.P, "drift");
    cr_assert_eq(memcmp(&hybrid_drift(&ha)->pr, &hybrid_drift(&hc)->pr, sizeof(PredictRuns)), 0, "split %d: Predict runs' state differs", split);
    // the look-ahead's state, field by field (it holds pointers), bit for bit
    const Lookahead *x = &hybrid_drift(&ha)->la, *y = &hybrid_drift(&hc)->la;
    cr_assert(x->backoff == y->backoff && x->gn_mean == y->gn_mean && x->gn_var == y->gn_var && x->gn_n == y->gn_n &&
              x->active_steps == y->active_steps && x->jumps == y->jumps && x->capped == y->capped &&
              x->beta_sum == y->beta_sum && x->cos_sum == y->cos_sum && x->n_cos == y->n_cos,
              "split %d: the look-ahead's state differs", split);
    cr_assert_eq(memcmp(x->beta_prev, y->beta_prev, NB * 4), 0);
    cr_assert_eq(memcmp(x->beta_next, y->beta_next, NB * 4), 0);
    cr_assert_eq(memcmp(hybrid_drift(&ha)->stats, hybrid_drift(&hc)->stats, NB * 3 * sizeof(double)), 0);
    cr_assert_eq(memcmp(ha.metrics.steps, hc.metrics.steps, sizeof(ha.metrics.steps)), 0);
    cr_assert_gt(ha.metrics.steps[HYBRID_PHASE_PREDICT], 10, "no Predict runs to resume across");
    cr_assert_gt(hybrid_drift(&ha)->la.active_steps, 20, "no look-ahead");
    cr_assert_eq(hybrid_drift(&ha)->pr.rollbacks, 1);
    cr_assert_eq(hybrid_drift(&ha)->la.jumps, 1, "the spike was not a jump");
    free(buf); free(ta); free(tb);
    hybrid_free(&ha); hybrid_free(&hb); hybrid_free(&hc);
    sim_free(&a); sim_free(&b); sim_free(&b2);
    return in_run;
}

Test(state, resume_is_bit_exact_at_any_step) {
    HybridConfig c;
    config(&c, 2, 3, 5);
    // steps 0-4 warm-up, 5-9 Full (the loss history fills), 10-11 Predict, 12 Correct, rolled back here
    // (the keep buffer then comes from the file when the split is at 11 or 12), the next runs 6 steps later
    // and a gradient spike at step 15 halves the look-ahead, which then grows back over ~14 steps
    memset(g_sabotage, 0, sizeof(g_sabotage));
    memset(g_spike, 0, sizeof(g_spike));
    g_sabotage[12] = 1e3f;
    g_spike[15] = 100.0f;
    const int splits[] = {3, 10, 11, 12, 13, 20, 21, 22, 50, 90};
    int in_run = 0;
    for (size_t k = 0; k < sizeof(splits) / sizeof(splits[0]); k++) { in_run += resume_case(&c, splits[k]); }
    memset(g_sabotage, 0, sizeof(g_sabotage));
    memset(g_spike, 0, sizeof(g_spike));
    cr_assert_geq(in_run, 3, "only %d splits inside an open Predict run", in_run);
}

// ----------------------------------------------------------------------------
// the schedule

// what the schedule must be without rollbacks: `warmup` warm-up steps; the first run once there are
// PREDICT_LOSS_MIN measured losses to judge its Correct step by; then runs of H Predict steps, each
// followed by its Correct step and K Full steps; no run that would reach the cool-down start
static void schedule_want(HybridPhase* want, int warmup, int H, int K, int stop) {
    int since = 0, measured = 0;
    for (int step = 0; step < STEPS;) {
        if (step < warmup) { want[step++] = HYBRID_PHASE_WARMUP; since++; measured++; continue; }
        if (H > 0 && since >= K && measured >= PREDICT_LOSS_MIN && step + H < stop) {
            for (int k = 0; k < H && step < STEPS; k++) { want[step++] = HYBRID_PHASE_PREDICT; }
            if (step < STEPS) { want[step++] = HYBRID_PHASE_CORRECT; }
            since = 0; measured++;
            continue;
        }
        want[step++] = HYBRID_PHASE_FULL; since++; measured++;
    }
}

static void schedule_case(int H, int K, int warmup, float cooldown) {
    HybridConfig c;
    config(&c, H, K, warmup);
    c.cooldown = cooldown;
    c.divergence_threshold = 1000.0f;  // no rollback: the schedule as planned
    Sim s;
    sim_init(&s);
    HybridState h;
    hybrid_for(&h, &c, &s);
    Trace* tr = calloc(1, sizeof(Trace));
    sim_run(&h, &s, 0, STEPS, tr, NULL);
    int stop = (int)((1.0f - cooldown) * (float)STEPS);
    cr_assert_eq(hybrid_drift(&h)->pr.stop, stop);
    HybridPhase want[STEPS];
    schedule_want(want, warmup, H, K, stop);
    int predicted = 0;
    for (int step = 0; step < STEPS; step++) {
        HybridPhase ph = tr->phase[step];
        cr_assert_eq(ph, want[step], "H %d K %d warmup %d: step %d is %s, want %s", H, K, warmup, step,
                     hybrid_phase_label(ph), hybrid_phase_label(want[step]));
        int first = ph == HYBRID_PHASE_PREDICT && (step == 0 || tr->phase[step - 1] != HYBRID_PHASE_PREDICT);
        cr_assert_eq(tr->keep[step], first, "step %d: keep %d", step, tr->keep[step]);
        if (ph == HYBRID_PHASE_PREDICT || ph == HYBRID_PHASE_CORRECT) { cr_assert_lt(step, stop, "step %d: predicted in the cool-down", step); }
        predicted += ph == HYBRID_PHASE_PREDICT;
    }
    // every run: H Predict steps, then one Correct step, then >= K Full steps before the next
    for (int step = 0; step < STEPS; step++) {
        if (tr->phase[step] != HYBRID_PHASE_CORRECT) { continue; }
        for (int k = 1; k <= H; k++) { cr_assert_eq(tr->phase[step - k], HYBRID_PHASE_PREDICT, "step %d", step - k); }
        cr_assert(step - H - 1 < 0 || tr->phase[step - H - 1] != HYBRID_PHASE_PREDICT, "a run longer than %d", H);
        int full = 0;
        int next = step + 1;
        while (next < STEPS && tr->phase[next] == HYBRID_PHASE_FULL) { full++; next++; }
        if (next < STEPS) { cr_assert_geq(full, K, "step %d: %d Full steps before the next run", step, full); }
    }
    if (H > 0) { cr_assert_gt(predicted, 0, "H %d K %d: no Predict run", H, K); }
    cr_assert_eq(hybrid_drift(&h)->pr.steps, predicted);
    cr_assert_eq(h.metrics.steps[HYBRID_PHASE_PREDICT], predicted);
    cr_assert_eq(s.backward, STEPS - predicted, "backward passes %d, Predict steps %d", s.backward, predicted);
    cr_assert_eq(hybrid_drift(&h)->pr.rollbacks, 0);
    free(tr);
    hybrid_free(&h);
    sim_free(&s);
}

Test(state, schedule_of_predict_runs) {
    schedule_case(2, 3, 5, 0.3f);
    schedule_case(1, 1, 0, 0.3f);
    schedule_case(4, 2, 12, 0.5f);
    schedule_case(16, 1, 5, 0.0f);  // the longest run: its Correct step must still fit
    schedule_case(0, 4, 5, 0.3f);   // no Predict runs: the look-ahead alone
}

// ----------------------------------------------------------------------------
// rollback and its back-off

static int count_full_after(const Trace* tr, int step) {
    int n = 0;
    for (int s = step + 1; s < STEPS && tr->phase[s] == HYBRID_PHASE_FULL; s++) { n++; }
    return n;
}

Test(state, rollback_restores_theta0_and_backs_off) {
    Sim s;
    HybridState h;
    Trace* tr = start(&h, &s);
    float* snap = malloc(s.P * 4);
    // runs: 10-11 + Correct 12 (rolled back: gap 6), 19-20 + 21 (rolled back: gap 12), 34-35 + 36 (clean:
    // gap 6), 43-44 + 45 (clean: gap 3, K)
    memset(g_sabotage, 0, sizeof(g_sabotage));
    g_sabotage[12] = 1e3f;
    g_sabotage[21] = 1e3f;
    sim_run(&h, &s, 0, 13, tr, snap);
    cr_assert_eq(tr->phase[12], HYBRID_PHASE_CORRECT);
    cr_assert_eq(tr->rolled_back[12], 1);
    cr_assert_eq(hybrid_drift(&h)->pr.rollbacks, 1);
    cr_assert_eq(hybrid_drift(&h)->pr.gap, 2 * 3, "gap %d after a rollback", hybrid_drift(&h)->pr.gap);
    char line[200];
    cr_assert(hybrid_take_event(&h, line, sizeof(line)));
    cr_assert(strstr(line, "hybrid: step 13: ") == line && strstr(line, "rolled back") != NULL, "%s", line);
    sim_run(&h, &s, 13, STEPS, tr, snap);
    memset(g_sabotage, 0, sizeof(g_sabotage));
    cr_assert_eq(hybrid_drift(&h)->pr.rollbacks, 2);
    cr_assert_eq(tr->verified, 2, "%d rollbacks verified", tr->verified);
    int corrects[8], nc = 0;
    for (int step = 0; step < STEPS && nc < 8; step++) { if (tr->phase[step] == HYBRID_PHASE_CORRECT) { corrects[nc++] = step; } }
    cr_assert_geq(nc, 5);
    cr_assert_eq(corrects[0], 12); cr_assert_eq(corrects[1], 21);
    cr_assert_eq(tr->rolled_back[21], 1);
    cr_assert_eq(tr->rolled_back[corrects[2]], 0);
    cr_assert_eq(count_full_after(tr, corrects[0]), 6, "after the first rollback: gap doubled");
    cr_assert_eq(count_full_after(tr, corrects[1]), 12, "after the second: doubled again");
    cr_assert_eq(count_full_after(tr, corrects[2]), 6, "a clean Correct step halves it");
    cr_assert_eq(count_full_after(tr, corrects[3]), 3, "and halves it back to --full-steps");
    cr_assert_eq(count_full_after(tr, corrects[4]), 3, "not below");
    cr_assert_eq(hybrid_drift(&h)->pr.gap, 3);
    free(snap); free(tr);
    hybrid_free(&h);
    sim_free(&s);
}

// a non-finite loss at the predicted point is the strongest jump: rolled back
Test(state, nonfinite_correct_loss_rolls_back) {
    HybridConfig c;
    config(&c, 1, 2, 5);
    Sim s;
    sim_init(&s);
    HybridState h;
    hybrid_for(&h, &c, &s);
    Trace* tr = calloc(1, sizeof(Trace));
    float* snap = malloc(s.P * 4);
    sim_run(&h, &s, 0, 11, tr, snap);
    cr_assert_eq(tr->phase[10], HYBRID_PHASE_PREDICT);
    HybridPlan p = hybrid_plan(&h, 11, lr_at(11));
    cr_assert_eq(p.phase, HYBRID_PHASE_CORRECT);
    cr_assert(p.check);
    cr_assert_eq(hybrid_check(&h, NAN), 1);
    apply_rollback(s.p, s.g, s.P);
    same_bits(s.p, snap, s.P, "parameters after the rollback");
    cr_assert_eq(hybrid_drift(&h)->pr.rollbacks, 1);
    cr_assert_eq(hybrid_drift(&h)->pr.run_done, 0);
    free(snap); free(tr);
    hybrid_free(&h);
    sim_free(&s);
}

// ----------------------------------------------------------------------------
// Predict coefficients

// c_b = 1 (one step of the drift), capped at PREDICT_CAP |delta_b| / |m_b|; 0 where the drift is zero
static float coef_want(const double* stats, int b) {
    double mm = stats[3 * b + 1], uu = stats[3 * b + 2];
    if (!(mm > 0.0)) { return 0.0f; }
    return mm > (double)PREDICT_CAP * PREDICT_CAP * uu ? (float)(PREDICT_CAP * sqrt(uu / mm)) : 1.0f;
}

static int g_coef_checked;
static void check_coef(HybridState* h, const Sim* s, int step, const HybridPlan* p) {
    if (p->phase != HYBRID_PHASE_PREDICT) { return; }
    for (int b = 0; b < NB; b++) {
        float want = coef_want(hybrid_drift(h)->stats, b);
        cr_assert(memcmp(&p->coef[b], &want, 4) == 0, "step %d block %d: coef %g, want %g", step, b, p->coef[b], want);
    }
    cr_assert_eq(p->coef[s->frozen], 0.0f, "step %d: a block without drift moved", step);
    cr_assert_eq(p->coef[0], 1.0f, "step %d: one step of the drift", step);
    g_coef_checked++;
}

Test(state, predict_coefficients_follow_the_drift_capped) {
    HybridConfig c;
    config(&c, 2, 2, 5);
    Sim s;
    sim_init(&s);
    s.frozen = 2;  // zero gradients and no weight decay: its drift stays zero
    HybridState h;
    hybrid_for(&h, &c, &s);
    Trace* tr = calloc(1, sizeof(Trace));
    g_coef_checked = 0;
    g_probe = check_coef;
    sim_run(&h, &s, 0, STEPS, tr, NULL);
    g_probe = NULL;
    cr_assert_gt(g_coef_checked, 10, "%d Predict steps checked", g_coef_checked);
    for (size_t i = s.off[2]; i < s.off[3]; i++) { cr_assert_eq(s.d[i], 0.0f); }
    hybrid_free(&h);
    free(tr);
    sim_free(&s);
}

// the cap, with the statistics set by hand before a run's first step; then the step itself: theta +=
// fl(c_b m_b) exactly, theta_0 kept on the first step only
Test(state, predict_cap_and_step) {
    Sim s;
    HybridState h;
    Trace* tr = start(&h, &s);
    sim_run(&h, &s, 0, 10, tr, NULL);
    // per block: (<delta,m>, |m|^2, |delta|^2)
    const double stats[NB * 3] = {0, 4, 4,     // |m| = |delta|: one step
                                  0, 100, 1,   // |m| = 10 |delta|: capped at 2 |delta|, c = 0.2
                                  0, 0, 5,     // no drift: 0
                                  0, 4, 1};    // |m| = 2 |delta|: at the cap, not past it
    memcpy(hybrid_drift(&h)->stats, stats, sizeof(stats));
    HybridPlan p = hybrid_plan(&h, 10, lr_at(10));
    cr_assert_eq(p.phase, HYBRID_PHASE_PREDICT);
    cr_assert_eq(p.keep, 1);
    const float want[NB] = {1.0f, (float)(PREDICT_CAP * sqrt(0.01)), 0.0f, 1.0f};
    for (int b = 0; b < NB; b++) { cr_assert_eq(p.coef[b], want[b], "block %d: coef %.9g, want %.9g", b, p.coef[b], want[b]); }
    cr_assert_float_eq(p.coef[1], 0.2f, 1e-7f);
    float* before = malloc(s.P * 4);
    memcpy(before, s.p, s.P * 4);
    for (size_t i = 0; i < s.P; i++) { s.g[i] = NAN; }
    apply_predict(s.p, s.g, s.d, h.offsets, h.model.nblocks, p.coef, p.keep);
    same_bits(s.g, before, s.P, "the keep buffer");
    for (int b = 0; b < NB; b++) {
        for (size_t i = s.off[b]; i < s.off[b + 1]; i++) {
            volatile float step = p.coef[b] * s.d[i];  // rounded on its own: no contraction into the add
            float w = before[i] + step;
            cr_assert(memcmp(&s.p[i], &w, 4) == 0, "block %d elem %zu: %.9g, want %.9g", b, i, s.p[i], w);
        }
    }
    hybrid_observe(&h, NAN, NAN, NAN, NAN, NAN, 1.0);
    // the run's second step: keeps nothing
    p = hybrid_plan(&h, 11, lr_at(11));
    cr_assert_eq(p.phase, HYBRID_PHASE_PREDICT);
    cr_assert_eq(p.keep, 0);
    cr_assert(hybrid_run_open(&h));
    float* mid = malloc(s.P * 4);
    memcpy(mid, s.p, s.P * 4);
    apply_predict(s.p, s.g, s.d, h.offsets, h.model.nblocks, p.coef, p.keep);
    same_bits(s.g, before, s.P, "the keep buffer after the second step");
    cr_assert(memcmp(s.p, mid, s.P * 4) != 0, "the second step moved nothing");
    hybrid_observe(&h, NAN, NAN, NAN, NAN, NAN, 1.0);
    p = hybrid_plan(&h, 12, lr_at(12));
    cr_assert_eq(p.phase, HYBRID_PHASE_CORRECT);
    cr_assert(p.check);
    free(before); free(mid); free(tr);
    hybrid_free(&h);
    sim_free(&s);
}

// ----------------------------------------------------------------------------
// the state file

// a state saved inside an open Predict run (after its first step: the keep buffer is in the file)
static void saved_state(const HybridConfig* c, Sim* s, HybridState* h, unsigned char** bytes, size_t* size) {
    sim_init(s);
    hybrid_for(h, c, s);
    Trace* tr = calloc(1, sizeof(Trace));
    sim_run(h, s, 0, 11, tr, NULL);
    free(tr);
    cr_assert(hybrid_run_open(h));
    FILE* f = tmpfile();
    char err[200] = "";
    cr_assert_eq(hybrid_save(h, f, &s->d, s->g, err, sizeof(err)), 0, "%s", err);
    long n = ftell(f);
    cr_assert_eq((size_t)n, hybrid_state_size(h, &s->d, s->g));
    rewind(f);
    *bytes = malloc((size_t)n + 1);
    cr_assert_eq(fread(*bytes, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
}

// loads bytes into a fresh state of configuration c (and total_steps); returns rc, the reason in err
static int load_into(const HybridConfig* c, int total_steps, const Sim* s, const unsigned char* bytes, size_t n,
                     char* err, size_t errn) {
    HybridState h;
    const float wd[NB] = {0.0f, 0.1f, 0.0f, 0.1f};
    hybrid_init(&h, c, s->off, NB, total_steps, 1024.0, LR_PEAK, 0.9f, 0.95f, 1e-8f, wd, NULL, 0);
    float* d = malloc(s->P * 4);
    float* keep = malloc(s->P * 4);
    err[0] = '\0';
    int rc = hybrid_load_buffer(&h, bytes, n, &d, keep, err, errn);
    free(d); free(keep);
    hybrid_free(&h);
    return rc;
}

static void refused(const HybridConfig* c, int total_steps, const Sim* s, const unsigned char* bytes, size_t n,
                    const char* needle) {
    char err[200];
    cr_assert_eq(load_into(c, total_steps, s, bytes, n, err, sizeof(err)), -1, "loaded, want refused (%s)", needle);
    cr_assert(strstr(err, needle) != NULL, "refused with '%s', want '%s'", err, needle);
}

Test(state, file_round_trip_and_refusals) {
    HybridConfig c;
    config(&c, 2, 3, 5);
    Sim s;
    HybridState h;
    unsigned char* bytes;
    size_t size;
    saved_state(&c, &s, &h, &bytes, &size);
    char err[200] = "";
    // intact: loads from the stream, with the drift and the keep buffer, and saves the same bytes again
    {
        HybridState h2;
        hybrid_for(&h2, &c, &s);
        float* d = calloc(s.P, 4);
        float* keep = calloc(s.P, 4);
        FILE* f = tmpfile();
        fwrite(bytes, 1, size, f);
        rewind(f);
        cr_assert_eq(hybrid_load(&h2, f, &d, keep, err, sizeof(err)), 0, "%s", err);
        fclose(f);
        same_bits(d, s.d, s.P, "drift");
        same_bits(keep, s.g, s.P, "keep buffer");
        cr_assert_eq(hybrid_drift(&h2)->pr.run_done, 1);
        unsigned char* again = malloc(size);
        cr_assert_eq(hybrid_state_size(&h2, &d, keep), size);
        cr_assert_eq(hybrid_save_buffer(&h2, again, size, &d, keep), 0);
        cr_assert(memcmp(again, bytes, size) == 0, "save(load(x)) != x");
        // an open run needs its keep buffer
        cr_assert_eq(hybrid_load_buffer(&h2, bytes, size, &d, NULL, err, sizeof(err)), -1);
        cr_assert(strstr(err, "keep buffer") != NULL, "%s", err);
        free(again); free(d); free(keep);
        hybrid_free(&h2);
    }
    // the buffer loads too
    cr_assert_eq(load_into(&c, STEPS, &s, bytes, size, err, sizeof(err)), 0, "%s", err);
    // truncated: refused, at every cut
    refused(&c, STEPS, &s, bytes, size - 9, "truncated");
    refused(&c, STEPS, &s, bytes, size / 2, "truncated");
    refused(&c, STEPS, &s, bytes, 3, "truncated");
    // trailing bytes: refused (buffer and stream)
    bytes[size] = 0;
    refused(&c, STEPS, &s, bytes, size + 1, "trailing");
    {
        HybridState h2;
        hybrid_for(&h2, &c, &s);
        float* d = calloc(s.P, 4);
        float* keep = calloc(s.P, 4);
        FILE* f = tmpfile();
        fwrite(bytes, 1, size + 1, f);
        rewind(f);
        cr_assert_eq(hybrid_load(&h2, f, &d, keep, err, sizeof(err)), -1);
        cr_assert(strstr(err, "trailing") != NULL, "%s", err);
        fclose(f); free(d); free(keep);
        hybrid_free(&h2);
    }
    // one flipped byte in the drift, in the keep buffer, in the checksum itself: refused by the checksum
    size_t flips[3] = {size / 2, size - 8 - 4 * 10, size - 1};
    for (int k = 0; k < 3; k++) {
        bytes[flips[k]] ^= 0x40;
        refused(&c, STEPS, &s, bytes, size, "checksum");
        bytes[flips[k]] ^= 0x40;
    }
    // wrong magic, wrong version
    bytes[0] ^= 1;
    refused(&c, STEPS, &s, bytes, size, "magic");
    bytes[0] ^= 1;
    int32_t old = 4;
    memcpy(bytes + 4, &old, 4);
    refused(&c, STEPS, &s, bytes, size, "version is 4 in the file");
    int32_t ver = HYBRID_VERSION;
    memcpy(bytes + 4, &ver, 4);
    cr_assert_eq(load_into(&c, STEPS, &s, bytes, size, err, sizeof(err)), 0, "%s", err);
    // another configuration refuses the file, naming what differs
    HybridConfig c2 = c;
    c2.predict_steps = 3;
    refused(&c2, STEPS, &s, bytes, size, "--predict-steps");
    c2 = c; c2.full_steps = 4;
    refused(&c2, STEPS, &s, bytes, size, "--full-steps");
    c2 = c; c2.lookahead = 0.3f;
    refused(&c2, STEPS, &s, bytes, size, "--lookahead");
    c2 = c; c2.drift_decay = 0.9f;
    refused(&c2, STEPS, &s, bytes, size, "--drift-decay");
    c2 = c; c2.warmup = 6;
    refused(&c2, STEPS, &s, bytes, size, "--hybrid-warmup");
    c2 = c; c2.cooldown = 0.2f;
    refused(&c2, STEPS, &s, bytes, size, "--hybrid-cooldown");
    refused(&c, STEPS + 1, &s, bytes, size, "schedule length");
    free(bytes);
    hybrid_free(&h);
    sim_free(&s);
}

// ----------------------------------------------------------------------------
// flags

// hybrid/'s flag table, read by the trainers' parser (llmc/args.h through llmc/config.h)
static int parse_hybrid(HybridConfig* c, int argc, char** argv, int* i) {
    return arg_parse_one(c, HYBRID_ARGS, NUM_HYBRID_ARGS, argc, argv, i);
}

static const ArgTable* const TEST_TABLES[] = {HYBRID_ARG_TABLES};
static const TrainCli TEST_CLI = {"./train_gpt2", "test", TEST_TABLES, (int)(sizeof(TEST_TABLES) / sizeof(TEST_TABLES[0])), ""};

// runs fn(argv) in a child; returns its exit status, and the number of lines it wrote to stderr
static int child_exit(void (*fn)(int, char**), int argc, char** argv, int* lines, char* first, size_t firstn) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn(argc, argv);
        _exit(0);
    }
    close(fds[1]);
    char buf[4096];
    size_t n = 0;
    ssize_t r;
    while ((r = read(fds[0], buf + n, sizeof(buf) - 1 - n)) > 0) { n += (size_t)r; }
    close(fds[0]);
    buf[n] = '\0';
    int status;
    waitpid(pid, &status, 0);
    *lines = 0;
    for (size_t k = 0; k < n; k++) { *lines += buf[k] == '\n'; }
    snprintf(first, firstn, "%s", buf);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void parse_one_flag(int argc, char** argv) {
    HybridConfig t = HYBRID_CONFIG_DEFAULT;
    int i = 1;
    parse_hybrid(&t, argc, argv, &i);
}

static void parse_command_line(int argc, char** argv) {
    TrainConfig t;
    config_parse(&t, argc, argv, &TEST_CLI);
}

static void expect_exit1(void (*fn)(int, char**), int argc, char** argv) {
    int lines;
    char msg[4096];
    int rc = child_exit(fn, argc, argv, &lines, msg, sizeof(msg));
    cr_assert_eq(rc, 1, "%s %s: exit %d (%s)", argv[1], argc > 2 ? argv[2] : "", rc, msg);
    cr_assert_eq(lines, 1, "%s %s: %d lines: %s", argv[1], argc > 2 ? argv[2] : "", lines, msg);
    cr_assert(strstr(msg, argv[1]) != NULL, "the message does not name the flag: %s", msg);
}

// the field each flag must set, written out here so that a row pointing at the wrong field fails
static const struct { const char* flag; size_t offset; } FLAG_FIELDS[] = {
    {"--hybrid", offsetof(HybridConfig, enabled)},
    {"--lookahead", offsetof(HybridConfig, lookahead)},
    {"--drift-decay", offsetof(HybridConfig, drift_decay)},
    {"--hybrid-warmup", offsetof(HybridConfig, warmup)},
    {"--hybrid-cooldown", offsetof(HybridConfig, cooldown)},
    {"--predict-steps", offsetof(HybridConfig, predict_steps)},
    {"--full-steps", offsetof(HybridConfig, full_steps)},
    {"--divergence-threshold", offsetof(HybridConfig, divergence_threshold)},
    {"--noise-gate", offsetof(HybridConfig, noise_gate)},
};
#define NUM_FLAG_FIELDS ((int)(sizeof(FLAG_FIELDS) / sizeof(FLAG_FIELDS[0])))

Test(state, every_flag_parses_and_rejects_out_of_range) {
    cr_assert_eq(NUM_HYBRID_ARGS, NUM_FLAG_FIELDS, "a flag without a test row (or a row without a flag)");
    for (int k = 0; k < NUM_HYBRID_ARGS; k++) {
        const ArgSpec* f = &HYBRID_ARGS[k];
        int found = 0;
        for (int j = 0; j < NUM_FLAG_FIELDS; j++) {
            if (strcmp(FLAG_FIELDS[j].flag, f->flag) == 0) {
                cr_assert_eq(f->offset, FLAG_FIELDS[j].offset, "%s sets the wrong field", f->flag);
                found = 1;
            }
        }
        cr_assert(found, "%s: no test row", f->flag);
        if (f->type == ARG_CHOICE) { continue; }  // --hybrid: its names (hybrid_choice_names_each_method)
        // in range: the lowest, the highest and a middle value land in the field
        double vals[3] = {f->min, f->max, f->type == ARG_INT ? floor(0.5 * (f->min + f->max)) : 0.5 * (f->min + f->max)};
        for (int j = 0; j < 3; j++) {
            char value[64];
            if (f->type == ARG_INT) { snprintf(value, sizeof(value), "%.0f", vals[j]); }
            else { snprintf(value, sizeof(value), "%.17g", vals[j]); }
            HybridConfig t = HYBRID_CONFIG_DEFAULT;
            char* argv[] = {"prog", (char*)f->flag, value};
            int i = 1;
            cr_assert(parse_hybrid(&t, 3, argv, &i), "%s not in the table", f->flag);
            cr_assert_eq(i, 2, "%s %s: the value not consumed", f->flag, value);
            const char* field = (const char*)&t + f->offset;
            if (f->type == ARG_INT) {
                cr_assert_eq(*(const int*)field, (int)vals[j], "%s %s", f->flag, value);
            } else {
                cr_assert_eq(*(const float*)field, (float)vals[j], "%s %s", f->flag, value);
            }
        }
        // out of range, either side, and not a number: exit 1 with one line naming the flag
        char lo[64], hi[64];
        const char* fmt = f->type == ARG_INT ? "%.0f" : "%.9g";
        snprintf(lo, sizeof(lo), fmt, f->min - 1.0);
        snprintf(hi, sizeof(hi), fmt, f->max + 1.0);
        char* bad[3] = {lo, hi, "x1"};
        for (int j = 0; j < 3; j++) {
            if (f->bare != NULL && bad[j][0] == '-') { continue; }  // a bare flag takes "-1" as the next flag
            char* argv[] = {"prog", (char*)f->flag, bad[j]};
            expect_exit1(parse_one_flag, 3, argv);
        }
    }
}

// --hybrid's values: 0, 1, then each row of the method table by its name, in the table's order; anything
// else is refused naming the flag
Test(state, hybrid_choice_names_each_method) {
    char* names[2 + NUM_HYBRID_METHODS];
    names[0] = "0"; names[1] = "1";
    for (int k = 0; k < NUM_HYBRID_METHODS; k++) { names[2 + k] = (char*)HYBRID_METHODS[k]->name; }
    for (int k = 0; k < 2 + NUM_HYBRID_METHODS; k++) {
        HybridConfig t = HYBRID_CONFIG_DEFAULT;
        char* argv[] = {"prog", "--hybrid", names[k]};
        int i = 1;
        cr_assert(parse_hybrid(&t, 3, argv, &i));
        cr_assert_eq(t.enabled, k, "--hybrid %s", names[k]);
        const HybridMethod* m = hybrid_method_of(&t);
        if (k >= 2) { cr_assert_eq(m, HYBRID_METHODS[k - 2]); cr_assert_str_eq(m->name, names[k]); }
        else if (k == 1) { cr_assert_eq(m, &drift_method); }
        else { cr_assert_null(m); }
    }
    char* bad[] = {"prog", "--hybrid", "gpa2"};
    expect_exit1(parse_one_flag, 3, bad);
}

Test(state, flags_parse_in_sequence_and_bare_hybrid) {
    HybridConfig t = HYBRID_CONFIG_DEFAULT;
    HybridConfig* c = &t;
    char* argv[] = {"prog", "--hybrid", "--lookahead", "0.3", "--predict-steps", "2", "--full-steps", "5",
                    "--hybrid", "0", "--hybrid-warmup", "-1", "--hybrid", "-x", "--other"};
    int argc = 15;
    int i = 1;
    cr_assert(parse_hybrid(&t, argc, argv, &i)); cr_assert_eq(c->enabled, 1); cr_assert_eq(i, 1); i++;
    cr_assert(parse_hybrid(&t, argc, argv, &i)); cr_assert_float_eq(c->lookahead, 0.3f, 0.0f); i++;
    cr_assert(parse_hybrid(&t, argc, argv, &i)); cr_assert_eq(c->predict_steps, 2); i++;
    cr_assert(parse_hybrid(&t, argc, argv, &i)); cr_assert_eq(c->full_steps, 5); i++;
    cr_assert(parse_hybrid(&t, argc, argv, &i)); cr_assert_eq(c->enabled, 0); i++;
    cr_assert(parse_hybrid(&t, argc, argv, &i)); cr_assert_eq(c->warmup, -1); i++;
    cr_assert(parse_hybrid(&t, argc, argv, &i)); cr_assert_eq(c->enabled, 1); i++; // bare, before -x
    cr_assert_not(parse_hybrid(&t, argc, argv, &i)); i++;                          // -x is not ours
    cr_assert_not(parse_hybrid(&t, argc, argv, &i));                               // --other neither
    // the whole command line: with --hybrid, accepted
    TrainConfig full;
    char* ok[] = {"prog", "--hybrid", "--lookahead", "0.3", "--predict-steps", "2", "--full-steps", "3"};
    config_parse(&full, 8, ok, &TEST_CLI);
    cr_assert_eq(hybrid_flags.enabled, 1);
    cr_assert_eq(hybrid_flags.predict_steps, 2);
}

// a hybrid flag without --hybrid would be silently ignored: refused
Test(state, hybrid_flags_without_hybrid_exit_1) {
    char* a[] = {"prog", "--lookahead", "0.3"};
    expect_exit1(parse_command_line, 3, a);
    char* b[] = {"prog", "--predict-steps", "2"};
    expect_exit1(parse_command_line, 3, b);
    char* d[] = {"prog", "--hybrid", "0", "--predict-steps", "2"};
    int lines;
    char msg[4096];
    cr_assert_eq(child_exit(parse_command_line, 5, d, &lines, msg, sizeof(msg)), 1, "%s", msg);
    cr_assert(strstr(msg, "--predict-steps") != NULL && strstr(msg, "--hybrid") != NULL, "%s", msg);
}

// as the old tests did, once through Criterion's own exit check
Test(state, bad_number_exits_with_one_line, .exit_code = 1) {
    HybridConfig t = HYBRID_CONFIG_DEFAULT;
    char* argv[] = {"prog", "--predict-steps", "17"};
    int i = 1;
    parse_hybrid(&t, 3, argv, &i);
}

// ----------------------------------------------------------------------------
// summary

static void want_field(const char* buf, const char* key, double v) {
    char want[96];
    if (v == floor(v)) { snprintf(want, sizeof(want), "\"%s\": %.0f", key, v); }
    else { snprintf(want, sizeof(want), "\"%s\": %.9g", key, v); }
    cr_assert(strstr(buf, want) != NULL, "no %s in %s", want, buf);
}

Test(state, summary_fields_and_table) {
    Sim s;
    HybridState h;
    Trace* tr = start(&h, &s);
    memset(g_sabotage, 0, sizeof(g_sabotage));
    g_sabotage[12] = 1e3f;
    sim_run(&h, &s, 0, STEPS, tr, NULL);
    g_sabotage[12] = 0.0f;
    char buf[4096];
    int n = hybrid_summary_fields(&h, buf, sizeof(buf));
    cr_assert_eq((size_t)n, strlen(buf));
    int counted[HYBRID_PHASE_COUNT] = {0};
    for (int step = 0; step < STEPS; step++) { counted[tr->phase[step]]++; }
    const char* keys[HYBRID_PHASE_COUNT] = {"steps_warmup", "steps_full", "steps_predict", "steps_correct"};
    for (int p = 0; p < HYBRID_PHASE_COUNT; p++) {
        cr_assert_gt(counted[p], 0, "no %s steps", hybrid_phase_label((HybridPhase)p));
        cr_assert_eq(h.metrics.steps[p], counted[p]);
        want_field(buf, keys[p], counted[p]);
    }
    want_field(buf, "lookahead_steps", hybrid_drift(&h)->la.active_steps);
    cr_assert_gt(hybrid_drift(&h)->la.active_steps, 0);
    cr_assert(strstr(buf, "\"lookahead_mean_beta\": ") != NULL, "%s", buf);
    cr_assert(strstr(buf, "\"lookahead_jumps\": ") != NULL, "%s", buf);
    cr_assert(strstr(buf, "\"lookahead_caps\": ") != NULL, "%s", buf);
    cr_assert(strstr(buf, "\"lookahead_cos\": ") != NULL, "%s", buf);
    want_field(buf, "predict_runs", counted[HYBRID_PHASE_CORRECT]);
    want_field(buf, "predict_steps", counted[HYBRID_PHASE_PREDICT]);
    want_field(buf, "rollbacks", 1);
    cr_assert(strstr(buf, "\"peak_rss_mib\": ") != NULL, "%s", buf);
    FILE* f = tmpfile();
    hybrid_print_summary(&h, f);
    long size = ftell(f);
    rewind(f);
    char* text = calloc((size_t)size + 1, 1);
    cr_assert_eq(fread(text, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    cr_assert(strstr(text, "| hybrid summary") != NULL, "%s", text);
    for (int p = 0; p < HYBRID_PHASE_COUNT; p++) {
        char row[96];
        snprintf(row, sizeof(row), "%s steps / time (s)", hybrid_phase_label((HybridPhase)p));
        cr_assert(strstr(text, row) != NULL, "no '%s' in %s", row, text);
    }
    char line[128];
    snprintf(line, sizeof(line), "predict runs: %d of 2 steps (%d Predict steps), 1 rolled back", counted[HYBRID_PHASE_CORRECT],
             counted[HYBRID_PHASE_PREDICT]);
    cr_assert(strstr(text, line) != NULL, "no '%s' in %s", line, text);
    cr_assert(strstr(text, "look-ahead: beta0 0.5, ") != NULL, "%s", text);
    free(text); free(tr);
    hybrid_free(&h);
    sim_free(&s);
}

// the value of peak_rss_mib (which may grow between two calls) as "R", so that two outputs compare
static void mask_rss(char* s) {
    char* v = strstr(s, "\"peak_rss_mib\": ");
    if (v == NULL) { return; }
    v += strlen("\"peak_rss_mib\": ");
    char* end = v + strcspn(v, ",}");
    if (end == v) { return; }
    *v = 'R';
    memmove(v + 1, end, strlen(end) + 1);
}

// A buffer too small for every field gets the fields that fit, each whole: a prefix of the full output cut
// between two fields, never a byte past its end, and the caller is told (the return is n); summary.json's
// extra gets the same, its object closed. The fields are fixed, so this is how a new field that outgrew the
// trainers' 3,072 bytes would show; and the real ones must fit there with room.
Test(state, summary_fields_cut_whole) {
    Sim s;
    HybridState h;
    Trace* tr = start(&h, &s);
    sim_run(&h, &s, 0, STEPS, tr, NULL);
    // the fields hold the peak RSS, which only grows and can gain a digit while this runs (a first touch of a
    // page is enough): every buffer is touched first, and each cut is judged against the output as it is then
    static char full[4096], got[4096 + 16], ref[4096], extra[4096 + 16];
    memset(full, 0, sizeof(full)); memset(got, 0, sizeof(got)); memset(ref, 0, sizeof(ref)); memset(extra, 0, sizeof(extra));
    size_t len = hybrid_summary_fields(&h, full, sizeof(full));
    cr_assert_eq(len, strlen(full));
    cr_assert_lt(len, 1536, "hybrid's fields take %zu bytes: half the trainers' 3,072 at most", len);
    for (size_t n = 1; n <= len + 1; n++) {
        memset(got, 0x5a, sizeof(got));
        size_t now = hybrid_summary_fields(&h, full, sizeof(full));
        mask_rss(full);
        size_t w = hybrid_summary_fields(&h, got, n);
        for (size_t i = n; i < sizeof(got); i++) { cr_assert_eq(got[i], 0x5a, "n %zu: byte %zu written", n, i); }
        size_t k = strnlen(got, n);
        cr_assert_lt(k, n, "n %zu: not NUL-terminated", n);
        cr_assert_eq(w, n <= now ? n : now, "n %zu: returned %zu", n, w);
        mask_rss(got);
        size_t km = strlen(got);
        cr_assert(km == 0 || (strncmp(got, full, km) == 0 && (full[km] == ',' || full[km] == '\0')),
                  "n %zu: '%s' is not the full output cut between fields", n, got);
    }
    TrainRun run;
    memset(&run, 0, sizeof(run));
    run.step = STEPS;
    const char* head = ", \"precision\": \"fp32\"";
    snprintf(extra, sizeof(extra), "%s", head);
    cr_assert(hybrid_summary(&h, &run, extra, 4096));
    size_t all = strlen(extra);
    for (size_t n = strlen(head) + 1; n <= all + 1; n++) {
        snprintf(ref, sizeof(ref), "%s", head);
        cr_assert(hybrid_summary(&h, &run, ref, sizeof(ref)));
        size_t now = strlen(ref);
        memset(extra, 0x5a, sizeof(extra));
        snprintf(extra, n, "%s", head);
        int fit = hybrid_summary(&h, &run, extra, n);
        for (size_t i = n; i < sizeof(extra); i++) { cr_assert_eq(extra[i], 0x5a, "n %zu: byte %zu written", n, i); }
        cr_assert_lt(strnlen(extra, n), n, "n %zu: not NUL-terminated", n);
        cr_assert_eq(fit, n > now, "n %zu: fit %d", n, fit);
        int depth = 0;
        for (const char* p = extra; *p; p++) { depth += *p == '{' ? 1 : *p == '}' ? -1 : 0; }
        cr_assert_eq(depth, 0, "n %zu: braces unbalanced in '%s'", n, extra);
        cr_assert(strncmp(extra, head, strlen(head)) == 0, "n %zu: %s", n, extra);
    }
    free(tr);
    hybrid_free(&h);
    sim_free(&s);
}

// the per-step fields of metrics.jsonl
Test(state, step_json) {
    Sim s;
    HybridState h;
    Trace* tr = start(&h, &s);
    char buf[256];
    sim_run(&h, &s, 0, 1, tr, NULL);  // warm-up: no look-ahead yet
    hybrid_step_json(&h, buf, sizeof(buf));
    cr_assert_str_eq(buf, "\"method\": \"drift\", \"beta\": null, \"predict_run_step\": null, \"rollback\": 0");
    sim_run(&h, &s, 1, 11, tr, NULL);  // step 10: a run's first Predict step
    cr_assert_eq(tr->phase[10], HYBRID_PHASE_PREDICT);
    hybrid_step_json(&h, buf, sizeof(buf));
    cr_assert_str_eq(buf, "\"method\": \"drift\", \"beta\": null, \"predict_run_step\": 1, \"rollback\": 0");
    sim_run(&h, &s, 11, 14, tr, NULL);  // 13: a Full step in the window
    hybrid_step_json(&h, buf, sizeof(buf));
    cr_assert(strstr(buf, "\"method\": \"drift\", \"beta\": 0.") == buf && strstr(buf, "\"predict_run_step\": null, \"rollback\": 0") != NULL, "%s", buf);
    free(tr);
    hybrid_free(&h);
    sim_free(&s);
}

// nothing is on by default (no look-ahead, no Predict runs): the start-up line says so; a given beta0 or
// Predict runs are something; the gate is blind only for a given look-ahead at one micro batch
Test(hybrid_config, nothing_is_on_by_default) {
    HybridConfig c;
    hybrid_config_default(&c);
    c.enabled = 1;
    cr_assert_eq(c.lookahead, 0.0f, "no look-ahead by default");
    cr_assert_eq(c.predict_steps, 0, "no Predict runs by default");
    cr_assert(hybrid_nothing_on(&c));
    cr_assert(!hybrid_gate_blind(&c, 1), "no look-ahead: nothing to gate");
    HybridConfig e = c;
    e.lookahead = 0.3f;
    cr_assert(!hybrid_nothing_on(&e));
    cr_assert(hybrid_gate_blind(&e, 1) && !hybrid_gate_blind(&e, 2));
    e.noise_gate = 0.0f;
    cr_assert(!hybrid_gate_blind(&e, 1), "no gate: nothing is blind");
    HybridConfig p = c;
    p.predict_steps = 2;
    cr_assert(!hybrid_nothing_on(&p));
    HybridConfig off = c;
    off.enabled = 0;
    cr_assert(!hybrid_nothing_on(&off), "without --hybrid nothing is said");
}
