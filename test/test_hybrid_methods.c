// The method table (hybrid/methods.h) and its rows: every row complete and an incomplete one refused; GPA
// against a reference that keeps its three sequences apart; Linefit's jump onto the line of a linear
// trajectory; and through ./train_gpt2, every method of the table resuming bit for bit, GPA's model file
// being its average, and a method's flags refused without it.
#define TESTING
#include "../train_gpt2.c"
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <sys/wait.h>

#define VOCAB 256
#define DIR "build/test_hybrid_methods.d"
#include "tiny_run.h"

// --hybrid's value that picks the row named `name`
static int method_index(const char* name) {
    for (int k = 0; k < NUM_HYBRID_METHODS; k++) {
        if (strcmp(HYBRID_METHODS[k]->name, name) == 0) { return k + 2; }
    }
    cr_assert_fail("no method %s in the table", name);
    return -1;
}

// ----------------------------------------------------------------------------
// the table

Test(methods, every_row_is_complete_and_named_once_in_the_choices) {
    char why[256];
    char choices[512] = "0|1";
    for (int k = 0; k < NUM_HYBRID_METHODS; k++) {
        const HybridMethod* m = HYBRID_METHODS[k];
        cr_assert(hybrid_method_complete(m, why, sizeof(why)), "%s", why);
        for (int j = 0; j < k; j++) { cr_assert_str_neq(m->name, HYBRID_METHODS[j]->name, "two rows named %s", m->name); }
        strcat(choices, "|");
        strcat(choices, m->name);
    }
    cr_assert_str_eq(HYBRID_CHOICES, choices, "--hybrid's values are not the table's rows in order");
    cr_assert(hybrid_method_complete(&drift_method, why, sizeof(why)), "%s", why);
}

Test(methods, an_incomplete_row_is_refused) {
    char why[256];
    HybridMethod m = gpa_method;
    m.io = NULL;
    cr_assert_not(hybrid_method_complete(&m, why, sizeof(why)));
    cr_assert(strstr(why, "gpa") != NULL && strstr(why, "io") != NULL, "%s", why);
    m = linefit_method;
    m.predict = NULL;  // it plans Predict steps
    cr_assert_not(hybrid_method_complete(&m, why, sizeof(why)));
    cr_assert(strstr(why, "predict") != NULL, "%s", why);
    m = gpa_method;
    m.buffers = 0;  // keeps weights in no buffer
    cr_assert_not(hybrid_method_complete(&m, why, sizeof(why)));
    m = gpa_method;
    m.flags = NULL;
    cr_assert_not(hybrid_method_complete(&m, why, sizeof(why)));
    m = gpa_method;
    m.plan = NULL;
    cr_assert_not(hybrid_method_complete(&m, why, sizeof(why)));
    cr_assert(strstr(why, "plan") != NULL, "%s", why);
}

// ----------------------------------------------------------------------------
// in process: a method's update on synthetic weights and gradients, through the facade

#define SP 1000     // parameters
#define SNB 2       // in two blocks
static const size_t S_OFF[SNB + 1] = {0, 600, SP};
static const float S_WD[SNB] = {0.1f, 0.0f};
#define S_LR 1e-2f

static float synth_grad(size_t i, int step) {
    uint64_t r = (uint64_t)i * 2654435761u + (uint64_t)step * 40503u + 17u;
    return ((float)(random_u32(&r) % 2001) - 1000.0f) * 1e-3f + 0.3f * sinf(0.01f * (float)i);
}

static void synth_state(HybridState* h, const char* name, int total_steps, const float* params) {
    HybridConfig c;
    hybrid_config_default(&c);
    c.enabled = method_index(name);
    hybrid_init(h, &c, S_OFF, SNB, total_steps, 1024.0, S_LR, 0.9f, 0.95f, 1e-8f, S_WD, params, 1);
}

// GPA's update against a reference that keeps z, x and y each in its own array (the method keeps y and x
// and recovers z from them, so it agrees to rounding): 200 steps
Test(methods, gpa_matches_a_reference_with_z_kept_apart) {
    gpa_flags = GPA_CONFIG_DEFAULT;
    gpa_flags.mu_y = 0.7f; gpa_flags.mu_x = 0.98f;
    float* y = malloc(SP * 4); float* g = malloc(SP * 4); float* m = calloc(SP, 4); float* v = calloc(SP, 4);
    float* z_ref = malloc(SP * 4); float* x_ref = malloc(SP * 4); float* y_ref = malloc(SP * 4);
    float* m_ref = calloc(SP, 4); float* v_ref = calloc(SP, 4);
    for (size_t i = 0; i < SP; i++) { y[i] = z_ref[i] = x_ref[i] = y_ref[i] = 0.02f * sinf((float)i); }
    HybridState h;
    synth_state(&h, "gpa", 200, y);
    float* x = hybrid_kept_weights(&h);
    cr_assert_not_null(x);
    cr_assert_arr_eq(x, y, SP * 4, "x starts at the initial weights");
    double worst = 0.0, scale = 0.0;
    for (int t = 1; t <= 200; t++) {
        float lr = S_LR * (t < 20 ? t / 20.0f : 1.0f);
        for (size_t i = 0; i < SP; i++) { g[i] = synth_grad(i, t); }
        HybridPlan p = hybrid_plan(&h, t - 1, lr);
        cr_assert_eq(p.phase, HYBRID_PHASE_FULL);
        hybrid_update(&h, y, g, m, v, 1.0f, t);
        hybrid_observe(&h, 1.0f, NAN, 1.0f, NAN, NAN, 1.0);
        float bc1 = 1.0f - powf(0.9f, (float)t), bc2 = 1.0f - powf(0.95f, (float)t);
        for (size_t i = 0; i < SP; i++) {
            float wd = i < 600 ? 0.1f : 0.0f;
            float gi = synth_grad(i, t);
            z_ref[i] = adamw_element(z_ref[i], gi, &m_ref[i], &v_ref[i], lr, 0.9f, 0.95f, bc1, bc2, 1e-8f, wd);
            x_ref[i] = (float)(0.98 * x_ref[i] + 0.02 * z_ref[i]);
            y_ref[i] = (float)(0.7 * x_ref[i] + 0.3 * z_ref[i]);
            cr_assert_eq(g[i], 0.0f, "the gradients are left zero");
        }
        for (size_t i = 0; i < SP; i++) {
            worst = fmax(worst, fmax(fabs((double)y[i] - y_ref[i]), fabs((double)x[i] - x_ref[i])));
            scale = fmax(scale, fabs(y_ref[i]));
        }
    }
    // the moments see the same gradients: the same bits; y and x within the rounding of z's recovery, a few
    // ulp a step (z = (y - mu_y x) / (1 - mu_y)), a random walk over 200 steps: 1e-5 of the weights' scale is
    // ~170 ulp, and one step of AdamW moves a weight by ~lr = 1e-2 of it
    cr_assert_arr_eq(m, m_ref, SP * 4);
    cr_assert_arr_eq(v, v_ref, SP * 4);
    cr_assert_lt(worst / scale, 1e-5, "y or x off the reference by %.3g of the weights' scale", worst / scale);
    // and not the plain AdamW iterate: the average moved the gradient's point
    double off = 0.0;
    for (size_t i = 0; i < SP; i++) { off = fmax(off, fabs((double)y[i] - z_ref[i])); }
    cr_assert_gt(off, 1e-4, "y is z: no averaging happened");
    hybrid_free(&h);
    free(y); free(g); free(m); free(v); free(z_ref); free(x_ref); free(y_ref); free(m_ref); free(v_ref);
}

// mu_y 0: the gradient at z itself, so the weights are AdamW's to the last bit, and x is an EMA of them
Test(methods, gpa_with_mu_y_0_is_adamw_bit_for_bit) {
    gpa_flags.mu_y = 0.0f; gpa_flags.mu_x = 0.9f;
    float* y = malloc(SP * 4); float* a = malloc(SP * 4); float* g = malloc(SP * 4);
    float* m = calloc(SP, 4); float* v = calloc(SP, 4); float* ma = calloc(SP, 4); float* va = calloc(SP, 4);
    for (size_t i = 0; i < SP; i++) { y[i] = a[i] = 0.02f * cosf((float)i); }
    HybridState h;
    synth_state(&h, "gpa", 50, y);
    for (int t = 1; t <= 50; t++) {
        for (size_t i = 0; i < SP; i++) { g[i] = synth_grad(i, t); }
        hybrid_plan(&h, t - 1, S_LR);
        hybrid_update(&h, y, g, m, v, 0.5f, t);
        hybrid_observe(&h, 1.0f, NAN, 1.0f, NAN, NAN, 1.0);
        float bc1 = 1.0f - powf(0.9f, (float)t), bc2 = 1.0f - powf(0.95f, (float)t);
        for (size_t i = 0; i < SP; i++) {
            a[i] = adamw_element(a[i], synth_grad(i, t) * 0.5f, &ma[i], &va[i], S_LR, 0.9f, 0.95f, bc1, bc2, 1e-8f,
                                 i < 600 ? 0.1f : 0.0f);
        }
        cr_assert_arr_eq(y, a, SP * 4, "step %d: not AdamW's weights", t);
    }
    float* x = hybrid_kept_weights(&h);
    double gap = 0.0;
    for (size_t i = 0; i < SP; i++) { gap = fmax(gap, fabs((double)x[i] - y[i])); }
    cr_assert_gt(gap, 0.0, "the average is the last iterate");
    hybrid_free(&h);
    free(y); free(a); free(g); free(m); free(v); free(ma); free(va);
    gpa_flags = GPA_CONFIG_DEFAULT;
}

// Linefit on weights that move along a line, w_i(tau) = a_i + b_i tau (tau: the updates of the period the
// weights carry): with lr 0 AdamW leaves each set of weights as given, so the states it records are points
// of the line, and the jump lands on the line at tau* = c s - 1 + J, J the squared linspace from J0 to 1.
Test(methods, linefit_jumps_onto_the_line_of_a_linear_trajectory) {
    linefit_flags.states = 4; linefit_flags.spacing = 3; linefit_flags.jump = 9.0f;
    const int T = 40, period = 12;
    float* w = malloc(SP * 4); float* g = calloc(SP, 4); float* m = calloc(SP, 4); float* v = calloc(SP, 4);
    HybridState h;
    synth_state(&h, "linefit", T, NULL);
    int jumps = 0;
    for (int step = 0; step < T; step++) {
        int j = step % period;
        HybridPlan p = hybrid_plan(&h, step, 0.0f);
        if (p.phase == HYBRID_PHASE_PREDICT) {
            cr_assert_eq(j, period - 1, "step %d: a jump off the period's last step", step);
            hybrid_apply_predict(&h, &p, w, NULL);
            double J = 3.0 + (1.0 - 3.0) * step / (double)(T - 1);
            J = J * J;
            double tstar = period - 1 + J, worst = 0.0;
            for (size_t i = 0; i < SP; i++) {
                double want = 0.05 * sin((double)i) + 1e-3 * cos(0.1 * (double)i) * tstar;
                worst = fmax(worst, fabs(w[i] - want));
            }
            cr_assert_lt(worst, 2e-6, "step %d: the jump is %.3g off the line", step, worst);
            jumps++;
        } else {
            cr_assert_neq(j, period - 1, "step %d: the period's last step trained", step);
            for (size_t i = 0; i < SP; i++) { w[i] = (float)(0.05 * sin((double)i) + 1e-3 * cos(0.1 * (double)i) * (j + 1)); }
            hybrid_update(&h, w, g, m, v, 1.0f, step + 1);
        }
        hybrid_observe(&h, 1.0f, NAN, 1.0f, NAN, NAN, 1.0);
    }
    cr_assert_eq(jumps, 3);
    hybrid_free(&h);
    free(w); free(g); free(m); free(v);
    linefit_flags = LINEFIT_CONFIG_DEFAULT;
}

// a period whose updates were skipped has fewer than two states: no line, its last step trains
Test(methods, linefit_without_two_states_does_not_jump) {
    linefit_flags.states = 3; linefit_flags.spacing = 2; linefit_flags.jump = 4.0f;  // states after steps 1, 3, 4
    float* w = calloc(SP, 4); float* g = calloc(SP, 4); float* m = calloc(SP, 4); float* v = calloc(SP, 4);
    HybridState h;
    synth_state(&h, "linefit", 12, NULL);
    for (int step = 0; step < 6; step++) {
        HybridPlan p = hybrid_plan(&h, step, 0.0f);
        cr_assert_eq(p.phase, HYBRID_PHASE_FULL, "step %d: a jump through one state", step);
        if (step == 1) { hybrid_update(&h, w, g, m, v, 1.0f, 1); } else { hybrid_skip_update(&h); }
        hybrid_observe(&h, 1.0f, NAN, 1.0f, NAN, NAN, 1.0);
    }
    hybrid_free(&h);
    free(w); free(g); free(m); free(v);
    linefit_flags = LINEFIT_CONFIG_DEFAULT;
}

// ----------------------------------------------------------------------------
// through the binary

// each method of the table (and --hybrid 1 with the look-ahead and Predict runs) resumes bit for bit from
// checkpoints inside its schedule: Linefit's mid-period and on a jump's step; one test per row, which
// Criterion runs side by side
ParameterizedTestParameters(methods, each_method_resumes_bit_exactly) {
    static int rows[NUM_HYBRID_METHODS + 1];
    for (int k = 0; k <= NUM_HYBRID_METHODS; k++) { rows[k] = k - 1; }
    return cr_make_param_array(int, rows, NUM_HYBRID_METHODS + 1);
}

ParameterizedTest(int* row, methods, each_method_resumes_bit_exactly, .timeout = 600) {
    corpus();
    const int k = *row;
    const char* name = k < 0 ? "1 --lookahead 0.5 --predict-steps 2 --full-steps 3" : HYBRID_METHODS[k]->name;
    int drift = k < 0 || hybrid_is_drift(HYBRID_METHODS[k]);
    int linefit = k >= 0 && strcmp(name, "linefit") == 0;
    char flags[512], full[128], res[128];
    snprintf(flags, sizeof(flags), "-x 30 -v 10 -m 2 -n 1 -l 3e-3 --hybrid %s%s%s", name,
             drift ? " --hybrid-warmup 4" : "", linefit ? " --linefit-states 3 --linefit-spacing 3" : "");
    snprintf(full, sizeof(full), DIR "/full_%d", k + 1);
    snprintf(res, sizeof(res), DIR "/resumed_%d", k + 1);
    cr_assert_eq(trainer(full, flags), 0, "%s failed", flags);
    char* want = loss_fields(full);
    const int froms[] = {5, 8, 13, 17};
    for (int f = 0; f < 4; f++) {
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "rm -rf %s && cp -r %s %s && cd %s && "
                 "for f in DONE_*; do s=$(echo $f | sed 's/DONE_0*//'); [ \"$s\" -gt %d ] && rm $f; done; true",
                 res, full, res, res, froms[f]);
        cr_assert_eq(system(cmd), 0);
        char args[600];
        snprintf(args, sizeof(args), "%s -y 1", flags);
        cr_assert_eq(trainer(res, args), 0, "%s: resume from %d failed", name, froms[f]);
        char* got = loss_fields(res);
        cr_assert_str_eq(got, want, "%s: resume from step %d differs", name, froms[f]);
        free(got);
        char a[600];
        snprintf(a, sizeof(a), "cmp -s %s/model_00000030.bin %s/model_00000030.bin", full, res);
        cr_assert_eq(system(a), 0, "%s: the final model differs after a resume from %d", name, froms[f]);
    }
    if (linefit) {
        cr_assert(strstr(want, "\"phase\": \"predict\"") != NULL, "linefit made no jump");
        cr_assert(summary_number(full, "linefit_jumps") >= 3);
    }
    free(want);
}

// GPA's model file is the average x, and it is what val_loss_gpa measured: a run from it sees that val loss
// at step 0, to the last bit; the trained weights (y) give val_loss
Test(methods, gpa_model_file_is_the_average_it_evaluated) {
    corpus();
    cr_assert_eq(trainer(DIR "/gpa_kept", "-x 8 -n 8 -v 8 -m 2 -l 3e-3 --hybrid gpa --gpa-mu-x 0.9"), 0);
    cr_assert_eq(trainer(DIR "/gpa_loaded", "-x 1 -v 1 -m 2 -e " DIR "/gpa_kept/model_00000008.bin"), 0);
    char* kept = slurp(DIR "/gpa_kept/metrics.jsonl");
    char* loaded = slurp(DIR "/gpa_loaded/metrics.jsonl");
    char* k = strstr(kept, "\"val_loss_gpa\": ");
    char* l = strstr(loaded, "\"val_loss\": ");
    cr_assert(k != NULL && l != NULL, "no val_loss_gpa / val_loss in the logs");
    double vk = atof(k + strlen("\"val_loss_gpa\": ")), vl = atof(l + strlen("\"val_loss\": "));
    cr_assert(vk == vl, "val_loss_gpa %.9g, the model file's val loss %.9g", vk, vl);
    char* raw = strstr(kept, "\"step\": 8");
    cr_assert_not_null(raw);
    raw = strstr(raw, "\"val_loss\": ");
    cr_assert(atof(raw + strlen("\"val_loss\": ")) != vk, "the model file is the average, not the trained weights");
    cr_assert(summary_number(DIR "/gpa_kept", "gpa_mu_x") > 0.89);
    free(kept); free(loaded);
}

// a method's flag without that method, or the drift family's flags with another method: one line, exit 1
Test(methods, a_flag_of_another_method_is_refused) {
    corpus();
    const char* bad[][2] = {{"--gpa-mu-y 0.5", "--gpa-mu-y"},
                            {"--hybrid linefit --gpa-mu-x 0.9", "--gpa-mu-x"},
                            {"--hybrid gpa --linefit-spacing 4", "--linefit-spacing"},
                            {"--hybrid gpa --lookahead 0.5", "--lookahead"},
                            {"--hybrid nosuch", "--hybrid"}};
    for (int i = 0; i < 5; i++) {
        char args[256];
        snprintf(args, sizeof(args), "-x 2 %s", bad[i][0]);
        cr_assert_eq(trainer(DIR "/refused", args), 1, "%s was accepted", bad[i][0]);
        char* log = slurp(DIR "/refused.log");
        cr_assert(strstr(log, bad[i][1]) != NULL && strchr(log, '\n') == log + strlen(log) - 1,
                  "%s: not one line naming the flag: %s", bad[i][0], log);
        free(log);
    }
}
