// hybrid/hybrid.h driven by a simulated trainer (a noisy quadratic, AdamW): all four phases run,
// rollback restores the pre-Predict point, and save/load round trips resume bit-exactly.
#include <criterion/criterion.h>
#include <stdlib.h>
#include "hybrid/hybrid.h"
#include "llmc/config.h"  // the parser that reads hybrid/'s flag table

#define NB 4
#define STEPS 120
static const size_t sizes[NB] = {300, 1200, 50, 450};

typedef struct {
    size_t off[NB + 1], P;
    float *p, *m, *v, *g, *d, *target;
    int t, batch;
} Sim;

static void sim_init(Sim* s) {
    s->off[0] = 0;
    for (int b = 0; b < NB; b++) { s->off[b + 1] = s->off[b] + sizes[b]; }
    s->P = s->off[NB];
    s->p = calloc(s->P, 4); s->m = calloc(s->P, 4); s->v = calloc(s->P, 4);
    s->g = calloc(s->P, 4); s->d = calloc(s->P, 4); s->target = calloc(s->P, 4);
    uint64_t rng = 77;
    for (size_t i = 0; i < s->P; i++) { s->p[i] = 0.5f * hmath_normal(&rng); s->target[i] = hmath_normal(&rng); }
    s->t = 0; s->batch = 0;
}

static void sim_copy(Sim* dst, const Sim* src) {
    dst->P = src->P; dst->t = src->t; dst->batch = src->batch;
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
    return (float)sqrt(n2);
}

// > 0: every Correct step reports a loss this much worse than measured (a prediction gone wrong);
// g_sabotage_sigma: the same in units of the monitor's loss noise
static float g_sabotage = 0.0f, g_sabotage_sigma = 0.0f;
// > 0: every run-start probe reports theta_0 this much better than it is (Predict runs worth nothing)
static float g_probe_bias = 0.0f;
// if set, called after every hybrid_begin_step (the tests' probe of the decisions)
static void (*g_probe)(const HybridState* h, int step, float lr, HybridPhase ph) = NULL;

static float lr_at(int step) { return 0.02f * (0.1f + 0.9f * 0.5f * (1.0f + cosf(3.14159265f * step / STEPS))); }

static void config(HybridConfig* c, int predictor, int direction) {
    hybrid_config_default(c);
    c->enabled = 1; c->predictor = predictor; c->direction = direction;
    c->warmup = 5; c->full_steps = 1; c->max_predict_steps = 4; c->confidence_threshold = 0.0f;
    c->direction_beta = 0.9f;
}

// the schedule hybrid_init is told is 4 x the STEPS simulated: no cool-down inside them, and a probe budget
// (5% of the schedule) that lets the value test decide
static void hybrid_for_schedule(HybridState* h, const HybridConfig* c, const Sim* s, int schedule) {
    const float wd[NB] = {0.0f, 0.0f, 0.0f, 0.0f};
    hybrid_init(h, c, s->off, NB, schedule, 0.02f, 0.9f, 0.95f, 1e-8f, wd, 1337);
}

static void hybrid_for(HybridState* h, const HybridConfig* c, const Sim* s) { hybrid_for_schedule(h, c, s, 4 * STEPS); }

// run steps [from, to); losses[step] = the measured loss (NAN on Predict); returns rollbacks verified
static int sim_run(HybridState* h, Sim* s, int from, int to, float* losses, float* snapshot) {
    int verified = 0;
    for (int step = from; step < to; step++) {
        float lr = lr_at(step);
        HybridPhase ph = hybrid_begin_step(h, step, lr);
        if (g_probe != NULL) { g_probe(h, step, lr, ph); }
        ApplyDirection dir = hybrid_direction(h, s->d, s->m, s->v);
        if (ph == PHASE_PREDICT) {
            // the value test's probe: the loss of theta_0 on the batch the Correct step will train on
            if (hybrid_probe_wanted(h)) { hybrid_probe_loss(h, sim_loss(s, s->batch) - g_probe_bias, 0.0); }
            if (h->run_steps == 1 && snapshot != NULL) { memcpy(snapshot, s->p, s->P * 4); } // test-side copy only
            hybrid_apply_predict(h, s->p, s->g, &dir);
            losses[step] = NAN;
            hybrid_end_step(h, NAN, NAN, 1.0);
            continue;
        }
        float L = sim_loss(s, s->batch);
        if (ph == PHASE_CORRECT && hybrid_correct_check(h, L + g_sabotage + g_sabotage_sigma * hybrid_sigma(h)) == ACTION_ROLLBACK) {
            hybrid_rollback(h, s->p, s->g);
            if (snapshot != NULL) {
                for (size_t i = 0; i < s->P; i++) { cr_assert(s->p[i] == snapshot[i], "rollback elem %zu", i); }
                verified++;
            }
            L = sim_loss(s, s->batch);
            hybrid_rollback_loss(h, L - g_probe_bias, 1.0);
        }
        if (ph != PHASE_CORRECT && hybrid_probe_wanted(h)) { hybrid_probe_loss(h, L, 0.0); }
        float gn = sim_backward(s, s->batch);
        s->batch++;
        if (ph == PHASE_CORRECT && hybrid_probe_wanted(h)) { hybrid_probe_loss(h, sim_loss(s, s->batch), 0.0); }
        s->t++;
        hybrid_update(h, s->p, s->g, s->m, s->v, s->d, 1.0f, s->t);
        losses[step] = L;
        hybrid_end_step(h, L, gn, 1.0);
    }
    return verified;
}

static void same_bits(const float* a, const float* b, size_t n, const char* what) {
    cr_assert(memcmp(a, b, n * 4) == 0, "%s differ", what);
}

static void resume_case(int predictor, int direction, int split) {
    HybridConfig c;
    config(&c, predictor, direction);
    Sim a, b;
    sim_init(&a); sim_init(&b);
    HybridState ha, hb;
    hybrid_for(&ha, &c, &a);
    float la[STEPS], lb[STEPS];
    sim_run(&ha, &a, 0, STEPS, la, NULL);
    // second run: stop at `split`, save to a buffer, load into a fresh state, continue
    hybrid_for(&hb, &c, &b);
    sim_run(&hb, &b, 0, split, lb, NULL);
    size_t n = hybrid_state_size(&hb, b.d, b.g);
    void* buf = malloc(n);
    cr_assert_eq(hybrid_save_buffer(&hb, buf, n, b.d, b.g), 0);
    Sim b2;
    sim_init(&b2);
    sim_copy(&b2, &b);
    memset(b2.d, 0, b2.P * 4);
    if (hb.run_steps > 0) { memset(b2.g, 0, b2.P * 4); } // the keep buffer must come from the file
    HybridState hc;
    hybrid_for(&hc, &c, &b2);
    char err[200] = "";
    cr_assert_eq(hybrid_load_buffer(&hc, buf, n, b2.d, b2.g, err, sizeof(err)), 0, "load: %s", err);
    sim_run(&hc, &b2, split, STEPS, lb, NULL);
    for (int s = 0; s < STEPS; s++) {
        cr_assert(memcmp(&la[s], &lb[s], 4) == 0, "%s/%s split %d: step %d loss %.9g vs %.9g",
                  predictor_name(predictor), direction_name(direction), split, s, la[s], lb[s]);
    }
    same_bits(a.p, b2.p, a.P, "parameters");
    same_bits(a.d, b2.d, a.P, "direction");
    cr_assert_eq(memcmp(ha.metrics.steps, hc.metrics.steps, sizeof(ha.metrics.steps)), 0);
    cr_assert_gt(ha.metrics.steps[PHASE_PREDICT], 5, "%s: no Predict steps", predictor_name(predictor));
    cr_assert_gt(ha.metrics.steps[PHASE_CORRECT], 2);
    free(buf);
    hybrid_free(&ha); hybrid_free(&hb); hybrid_free(&hc);
    sim_free(&a); sim_free(&b); sim_free(&b2);
}

Test(state, resume_is_bit_exact_for_every_predictor) {
    for (int k = 0; k < PREDICTOR_KINDS; k++) {
        resume_case(k, DIRECTION_EMA, 40);
        resume_case(k, DIRECTION_EMA, 41);
        resume_case(k, DIRECTION_EMA, 42);
    }
    resume_case(PREDICTOR_LINEAR, DIRECTION_ADAM, 43);
}

// fixed-scale predictors: every block's coefficient is scale * lr_t / lr_peak (scale: beta1 or kappa)
static float g_want_scale;
static int g_checked;
static void check_fixed_coef(const HybridState* h, int step, float lr, HybridPhase ph) {
    if (ph != PHASE_PREDICT) { return; }
    for (int b = 0; b < NB; b++) {
        float want = g_want_scale * lr / 0.02f;
        cr_assert_float_eq(h->coef[b], want, 1e-6f * fabsf(want), "step %d block %d: coef %g, want %g", step, b, h->coef[b], want);
    }
    g_checked++;
}

Test(state, fixed_scale_predictors_move_scale_times_lr_ratio) {
    int kinds[2] = {PREDICTOR_NESTEROV, PREDICTOR_SCALED};
    float scales[2] = {0.9f, 0.7f}; // nesterov: AdamW's beta1 (0.9 in hybrid_for); scaled: --kappa
    for (int i = 0; i < 2; i++) {
        HybridConfig c;
        config(&c, kinds[i], DIRECTION_EMA);
        c.kappa = 0.7f;
        Sim s;
        sim_init(&s);
        HybridState h;
        hybrid_for(&h, &c, &s);
        float losses[STEPS];
        g_want_scale = scales[i]; g_checked = 0; g_probe = check_fixed_coef;
        sim_run(&h, &s, 0, STEPS, losses, NULL);
        g_probe = NULL;
        cr_assert_gt(g_checked, 10, "%s: %d Predict steps checked", predictor_name(kinds[i]), g_checked);
        hybrid_free(&h);
        sim_free(&s);
    }
}

// the value test (hybrid/value.h): on the simulated problem Predict runs along the update EMA lower the
// loss on unseen batches by more than their cost, so predicting goes on; where every run-start probe says
// theta_0 was better by far (runs worth nothing), predicting stops after VALUE_MIN_PAIRS pairs and the
// gaps between runs grow to their ceiling. The monitor is kept out (threshold 1000: no rollback).
// g_undone_starts: runs started to be undone with no pair waiting (their L(theta_0) comes after the undo);
// g_wasted_starts: those of them that still asked for a forward at their start
static int g_max_gap, g_predict_after, g_undone_starts, g_wasted_starts;
static void track_gaps(const HybridState* h, int step, float lr, HybridPhase ph) {
    (void)lr;
    if (h->ctrl.full_required > g_max_gap) { g_max_gap = h->ctrl.full_required; }
    if (ph == PHASE_PREDICT && h->value.pairs >= VALUE_MIN_PAIRS && !h->value.open && step >= 0) { g_predict_after++; }
    if (ph == PHASE_PREDICT && h->run_steps == 1 && h->probing && !value_proven(&h->value) &&
        !isfinite(h->value.pending)) {
        g_undone_starts++;
        g_wasted_starts += hybrid_probe_wanted(h);
    }
}

// schedule: the length hybrid_init is told (the probe budget is 2% of it); the simulation runs STEPS
static void value_case(float bias, int schedule, HybridState* h, Sim* s) {
    HybridConfig c;
    config(&c, PREDICTOR_SCALED, DIRECTION_EMA);
    c.divergence_threshold = 1000.0f;
    c.max_predict_steps = 1;
    c.warmup = 2;
    sim_init(s);
    hybrid_for_schedule(h, &c, s, schedule);
    float losses[STEPS];
    float* snapshot = malloc(s->P * 4);
    g_max_gap = 0; g_predict_after = 0; g_undone_starts = 0; g_wasted_starts = 0; g_probe = track_gaps;
    g_probe_bias = bias;
    int restored = sim_run(h, s, 0, STEPS, losses, snapshot);
    g_probe = NULL; g_probe_bias = 0.0f;
    free(snapshot);
    cr_assert_eq(h->metrics.rollbacks, 0);
    // every probe run before the test passed was undone, bit-exactly (sim_run compares with its snapshot)
    cr_assert_gt(h->metrics.probe_undos, 0);
    cr_assert_eq(restored, h->metrics.probe_undos, "%d runs restored, %d undone", restored, h->metrics.probe_undos);
    // a run to be undone does not measure L(theta_0) at its start: the Correct step's forward after the undo
    // is the same loss (hybrid_rollback_loss), and the pairs still complete (the tests below count them)
    cr_assert_gt(g_undone_starts, 0);
    cr_assert_eq(g_wasted_starts, 0, "%d of %d runs to be undone measured theta_0 at their start", g_wasted_starts,
                 g_undone_starts);
    cr_log_info("bias %g: %d pairs, rho %g, excess %g +- %g, open %d, %d Predict steps, max gap %d", bias, h->value.pairs,
                value_rho(&h->value), value_mean(&h->value), value_se(&h->value), h->value.open,
                h->metrics.steps[PHASE_PREDICT], g_max_gap);
}

Test(state, value_test_keeps_predicting_where_runs_pay) {
    HybridState h;
    Sim s;
    value_case(0.0f, 1000, &h, &s);
    cr_assert_geq(h.value.pairs, VALUE_MIN_PAIRS, "%d pairs", h.value.pairs);
    cr_assert_eq(h.value.open, 1, "pairs %d, rho %g, excess %g +- %g", h.value.pairs, value_rho(&h.value),
                 value_mean(&h.value), value_se(&h.value));
    cr_assert_gt(value_rho(&h.value), 0.0f);
    cr_assert_eq(h.ctrl.full_required, 1, "gaps stay at --full-steps");
    cr_assert_gt(h.metrics.steps[PHASE_PREDICT], 20);
    hybrid_free(&h);
    sim_free(&s);
}

Test(state, value_test_stops_predicting_where_runs_do_not_pay) {
    HybridState h;
    Sim s;
    value_case(0.05f, 2000, &h, &s);
    cr_assert_geq(h.value.pairs, VALUE_MIN_PAIRS, "%d pairs", h.value.pairs);
    cr_assert_eq(h.value.open, 0, "pairs %d, rho %g", h.value.pairs, value_rho(&h.value));
    cr_assert_lt(value_rho(&h.value), 0.0f);
    cr_assert_geq(g_max_gap, 16, "gaps %d after the test failed", g_max_gap);
    cr_assert_leq(h.metrics.steps[PHASE_PREDICT], (int)(VALUE_BUDGET * 2000) + 1, "%d Predict steps", h.metrics.steps[PHASE_PREDICT]);
    hybrid_free(&h);
    sim_free(&s);
}

// a schedule too short for the test to decide: the budget (2% of 120 steps) ends the probing
Test(state, value_test_budget_caps_unproven_prediction) {
    HybridState h;
    Sim s;
    value_case(0.05f, STEPS, &h, &s);
    cr_assert_lt(h.value.pairs, VALUE_MIN_PAIRS);
    cr_assert_eq(h.metrics.probe_undos, h.metrics.steps[PHASE_CORRECT], "never proven: every run was undone");
    cr_assert_eq(h.metrics.steps[PHASE_PREDICT], (int)(VALUE_BUDGET * STEPS) + (VALUE_BUDGET * STEPS > (int)(VALUE_BUDGET * STEPS)),
                 "%d Predict steps", h.metrics.steps[PHASE_PREDICT]);
    char buf[2048];
    hybrid_summary_fields(&h, buf, sizeof(buf));
    cr_assert(strstr(buf, "\"value_predicting\": 0") != NULL, "%s", buf);
    hybrid_free(&h);
    sim_free(&s);
}

Test(state, all_phases_run_and_predict_moves_the_loss) {
    HybridConfig c;
    config(&c, PREDICTOR_MOMENTUM, DIRECTION_EMA);
    c.full_steps = 2; // a Full step between Correct and Predict
    Sim s;
    sim_init(&s);
    HybridState h;
    hybrid_for(&h, &c, &s);
    float L[STEPS];
    sim_run(&h, &s, 0, STEPS, L, NULL);
    for (int p = 0; p < PHASE_COUNT; p++) { cr_assert_gt(h.metrics.steps[p], 0, "no %s steps", phase_name((HybridPhase)p)); }
    cr_assert_lt(sim_loss(&s, 0), L[0], "training must make progress");
    hybrid_free(&h);
    sim_free(&s);
}

Test(state, rollback_restores_the_pre_predict_parameters) {
    HybridConfig c;
    config(&c, PREDICTOR_LINEAR, DIRECTION_EMA);
    Sim s;
    sim_init(&s);
    HybridState h;
    hybrid_for(&h, &c, &s);
    float L[STEPS];
    float* snap = malloc(s.P * 4);
    g_sabotage = 1.0f;
    int verified = sim_run(&h, &s, 0, STEPS, L, snap);
    g_sabotage = 0.0f;
    cr_assert_gt(verified, 0, "no rollback happened");
    cr_assert_eq(verified, h.metrics.rollbacks);
    char line[160];
    cr_assert(hybrid_take_event(&h, line, sizeof(line)));
    cr_assert(strstr(line, "hybrid monitor: step ") == line, "%s", line);
    cr_assert_not(hybrid_take_event(&h, line, sizeof(line)), "an event is reported once");
    free(snap);
    hybrid_free(&h);
    sim_free(&s);
}

Test(state, file_round_trip_and_refusals) {
    HybridConfig c;
    config(&c, PREDICTOR_RSSM, DIRECTION_EMA);
    Sim s;
    sim_init(&s);
    HybridState h;
    hybrid_for(&h, &c, &s);
    float L[STEPS];
    sim_run(&h, &s, 0, 30, L, NULL);
    FILE* f = tmpfile();
    char err[200] = "";
    cr_assert_eq(hybrid_save(&h, f, s.d, s.g, err, sizeof(err)), 0, "%s", err);
    long size = ftell(f);
    rewind(f);
    unsigned char* bytes = malloc((size_t)size);
    cr_assert_eq(fread(bytes, 1, (size_t)size, f), (size_t)size);
    cr_assert_eq((size_t)size, hybrid_state_size(&h, s.d, s.g));
    // intact: loads
    HybridState h2;
    hybrid_for(&h2, &c, &s);
    rewind(f);
    cr_assert_eq(hybrid_load(&h2, f, s.d, s.g, err, sizeof(err)), 0, "%s", err);
    // one flipped byte: refused by the checksum
    bytes[size / 2] ^= 0x40;
    cr_assert_eq(hybrid_load_buffer(&h2, bytes, (size_t)size, s.d, s.g, err, sizeof(err)), -1);
    cr_assert(strstr(err, "checksum") != NULL || strstr(err, "range") != NULL, "%s", err);
    bytes[size / 2] ^= 0x40;
    // truncated: refused
    cr_assert_eq(hybrid_load_buffer(&h2, bytes, (size_t)size - 9, s.d, s.g, err, sizeof(err)), -1);
    cr_assert(strstr(err, "truncated") != NULL, "%s", err);
    // wrong magic
    bytes[0] ^= 1;
    cr_assert_eq(hybrid_load_buffer(&h2, bytes, (size_t)size, s.d, s.g, err, sizeof(err)), -1);
    cr_assert(strstr(err, "magic") != NULL, "%s", err);
    bytes[0] ^= 1;
    // a run with another predictor refuses the file
    HybridConfig c2 = c;
    c2.predictor = PREDICTOR_MLP;
    HybridState h3;
    hybrid_for(&h3, &c2, &s);
    cr_assert_eq(hybrid_load_buffer(&h3, bytes, (size_t)size, s.d, s.g, err, sizeof(err)), -1);
    cr_assert(strstr(err, "predictor") != NULL, "%s", err);
    fclose(f);
    free(bytes);
    hybrid_free(&h); hybrid_free(&h2); hybrid_free(&h3);
    sim_free(&s);
}

// hybrid/'s flag table, read by the trainers' parser (llmc/args.h through llmc/config.h)
static int parse_hybrid(TrainConfig* c, int argc, char** argv, int* i) {
    return arg_parse_one(c, config_hybrid_args(), NUM_HYBRID_FLAGS, argc, argv, i);
}

Test(state, flags_parse_and_reject_bad_values) {
    TrainConfig t = config_default();
    HybridConfig* c = &t.hybrid;
    char* argv[] = {"prog", "--hybrid", "--predictor", "rssm", "--max-predict-steps", "8", "--direction", "adam",
                    "--hybrid", "0", "--adaptive", "1", "--hybrid", "-x", "--other"};
    int argc = 15;
    int i = 1;
    cr_assert(parse_hybrid(&t, argc, argv, &i)); cr_assert_eq(c->enabled, 1); cr_assert_eq(i, 1); i++;
    cr_assert(parse_hybrid(&t, argc, argv, &i)); cr_assert_eq(c->predictor, PREDICTOR_RSSM); i++;
    cr_assert(parse_hybrid(&t, argc, argv, &i)); cr_assert_eq(c->max_predict_steps, 8); i++;
    cr_assert(parse_hybrid(&t, argc, argv, &i)); cr_assert_eq(c->direction, DIRECTION_ADAM); i++;
    cr_assert(parse_hybrid(&t, argc, argv, &i)); cr_assert_eq(c->enabled, 0); i++;
    cr_assert(parse_hybrid(&t, argc, argv, &i)); cr_assert_eq(c->adaptive, 1); i++;
    cr_assert(parse_hybrid(&t, argc, argv, &i)); cr_assert_eq(c->enabled, 1); i++; // bare, before -x
    cr_assert_not(parse_hybrid(&t, argc, argv, &i)); i++;                          // -x is not ours
    cr_assert_not(parse_hybrid(&t, argc, argv, &i));                               // --other neither
}

Test(state, bad_predictor_name_exits_with_one_line, .exit_code = 1) {
    TrainConfig t = config_default();
    char* argv[] = {"prog", "--predictor", "oracle"};
    int i = 1;
    parse_hybrid(&t, 3, argv, &i);
}

Test(state, bad_number_exits_with_one_line, .exit_code = 1) {
    TrainConfig t = config_default();
    char* argv[] = {"prog", "--max-predict-steps", "17"};
    int i = 1;
    parse_hybrid(&t, 3, argv, &i);
}

Test(state, summary_fields_and_table) {
    HybridConfig c;
    config(&c, PREDICTOR_MOMENTUM, DIRECTION_EMA);
    Sim s;
    sim_init(&s);
    HybridState h;
    hybrid_for(&h, &c, &s);
    float L[STEPS];
    sim_run(&h, &s, 0, STEPS, L, NULL);
    char buf[2048];
    hybrid_summary_fields(&h, buf, sizeof(buf));
    char want[64];
    snprintf(want, sizeof(want), "\"steps_predict\": %d", h.metrics.steps[PHASE_PREDICT]);
    cr_assert(strstr(buf, want) != NULL, "%s", buf);
    cr_assert(strstr(buf, "\"peak_rss_mib\": ") != NULL);
    char step_json[256];
    h.metrics.horizon = 3; h.metrics.confidence = NAN; h.metrics.predicted_loss = 2.5f;
    h.metrics.step_probes = 0;
    hybrid_step_json(&h, step_json, sizeof(step_json));
    cr_assert_str_eq(step_json, "\"predicted_loss\": 2.5, \"horizon\": 3, \"confidence\": null, \"probe_ms\": null");
    h.metrics.step_probes = 1; h.metrics.step_probe_ms = 1.25;
    hybrid_step_json(&h, step_json, sizeof(step_json));
    cr_assert(strstr(step_json, "\"probe_ms\": 1.2500") != NULL, "%s", step_json);
    snprintf(want, sizeof(want), "\"value_pairs\": %d", h.value.pairs);
    cr_assert(strstr(buf, want) != NULL, "%s", buf);
    FILE* f = tmpfile();
    hybrid_print_summary(&h, f);
    cr_assert_gt(ftell(f), 500);
    fclose(f);
    hybrid_free(&h);
    sim_free(&s);
}

Test(state, kappa_flag_sets_the_scale_of_the_scaled_predictor) {
    TrainConfig t = config_default();
    char* argv[] = {"prog", "--predictor", "scaled", "--kappa", "0.5"};
    int i = 1;
    cr_assert(parse_hybrid(&t, 5, argv, &i)); i++;
    cr_assert(parse_hybrid(&t, 5, argv, &i));
    cr_assert_eq(t.hybrid.predictor, PREDICTOR_SCALED);
    cr_assert_float_eq(t.hybrid.kappa, 0.5f, 0.0f);
}

Test(state, kappa_out_of_range_exits_with_one_line, .exit_code = 1) {
    TrainConfig t = config_default();
    char* argv[] = {"prog", "--kappa", "5"};
    int i = 1;
    parse_hybrid(&t, 3, argv, &i);
}
