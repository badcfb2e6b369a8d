// hybrid/controller.h alone: the phase machine's transitions, cool-down, LR warm-up, forced Full, back-off,
// and the run length of the batch regime.
#include <criterion/criterion.h>
#include "hybrid/controller.h"

// run the controller for n steps with constant inputs, recording phases
static void run(Controller* c, int from, int n, int confident, int horizon, HybridPhase* out) {
    for (int s = from; s < from + n; s++) {
        phase_lr(c, 1.0f, 1.0f); // at the peak LR
        out[s] = phase_next(c, s, confident, horizon);
        if (out[s] != PHASE_PREDICT) { phase_full_done(c); }
    }
}

Test(controller, warmup_then_full_predict_correct_cycle) {
    Controller c;
    phase_init(&c, 3, 2, 4, 100, 0.2f);
    HybridPhase p[100];
    run(&c, 0, 14, 1, 2, p);
    for (int s = 0; s < 3; s++) { cr_assert_eq(p[s], PHASE_WARMUP, "step %d", s); }
    // warm-up steps count as Full: the first run may start right away
    HybridPhase want[] = {PHASE_PREDICT, PHASE_PREDICT, PHASE_CORRECT, PHASE_FULL, PHASE_PREDICT, PHASE_PREDICT,
                          PHASE_CORRECT, PHASE_FULL, PHASE_PREDICT};
    for (int i = 0; i < 9; i++) { cr_assert_eq(p[3 + i], want[i], "step %d: %s", 3 + i, phase_name(p[3 + i])); }
    cr_assert_eq(c.run_length, 2);
}

Test(controller, no_predict_without_confidence) {
    Controller c;
    phase_init(&c, 0, 1, 4, 100, 0.0f);
    HybridPhase p[100];
    run(&c, 0, 50, 0, 4, p);
    for (int s = 0; s < 50; s++) { cr_assert_eq(p[s], PHASE_FULL); }
}

Test(controller, cooldown_blocks_predict_and_truncates_runs) {
    Controller c;
    phase_init(&c, 0, 1, 8, 100, 0.2f); // cool-down starts at step 80
    cr_assert_eq(c.cooldown_start, 80);
    HybridPhase p[100];
    run(&c, 0, 100, 1, 8, p);
    for (int s = 80; s < 100; s++) { cr_assert_neq(p[s], PHASE_PREDICT, "predict at step %d in the cool-down", s); }
    // runs are truncated so that their last Predict step is before the cool-down
    cr_assert_eq(p[80], PHASE_CORRECT);
    int predicts = 0;
    for (int s = 0; s < 80; s++) { predicts += p[s] == PHASE_PREDICT; }
    cr_assert_gt(predicts, 40);
}

Test(controller, forced_full_overrides_confidence) {
    Controller c;
    phase_init(&c, 0, 1, 2, 1000, 0.0f);
    HybridPhase p[1000];
    run(&c, 0, 2, 1, 2, p);
    cr_assert_eq(p[1], PHASE_PREDICT);
    phase_force_full(&c, 5);       // in the middle of a run: the run ends, its Correct comes next
    run(&c, 2, 7, 1, 2, p);
    cr_assert_eq(p[2], PHASE_CORRECT);
    for (int s = 3; s < 8; s++) { cr_assert_eq(p[s], PHASE_FULL, "step %d: %s", s, phase_name(p[s])); }
    cr_assert_eq(p[8], PHASE_PREDICT);
}

Test(controller, harmful_corrects_back_off_and_recover) {
    Controller c;
    phase_init(&c, 0, 2, 1, 1000, 0.0f);
    phase_correct_outcome(&c, 1);
    cr_assert_eq(c.full_required, 4);
    phase_correct_outcome(&c, 1);
    cr_assert_eq(c.full_required, 8);
    HybridPhase p[1000];
    run(&c, 0, 12, 1, 1, p);
    int first = -1;
    for (int s = 0; s < 12; s++) { if (p[s] == PHASE_PREDICT) { first = s; break; } }
    cr_assert_eq(first, 8, "first Predict after 8 Full steps, got %d", first);
    phase_correct_outcome(&c, 0);
    phase_correct_outcome(&c, 0);
    phase_correct_outcome(&c, 0);
    cr_assert_eq(c.full_required, 2);
    for (int i = 0; i < 20; i++) { phase_correct_outcome(&c, 1); }
    cr_assert_eq(c.full_required, c.max_full_steps);
}

Test(controller, shorten_halves_the_horizon_cap) {
    Controller c;
    phase_init(&c, 0, 1, 8, 1000, 0.0f);
    phase_shorten(&c);
    HybridPhase p[1000];
    run(&c, 0, 2, 1, 8, p);
    cr_assert_eq(c.run_length, 4);
    phase_shorten(&c); phase_shorten(&c); phase_shorten(&c);
    cr_assert_eq(c.horizon_cap, 1);
}

Test(controller, no_predict_before_the_lr_peak) {
    Controller c;
    phase_init(&c, 0, 1, 1, 100, 0.0f);
    for (int s = 0; s < 10; s++) { // LR warm-up: 0.1, 0.2, ... 1.0 of the peak at step 9
        phase_lr(&c, 0.1f * (float)(s + 1), 1.0f);
        HybridPhase p = phase_next(&c, s, 1, 1);
        if (p != PHASE_PREDICT) { phase_full_done(&c); }
        cr_assert_eq(p == PHASE_PREDICT, s == 9, "step %d (lr %.1f of the peak): %s", s, 0.1 * (s + 1), phase_name(p));
    }
    phase_lr(&c, 0.2f, 1.0f); // the decay after the peak does not stop predicting
    cr_assert_eq(phase_next(&c, 10, 1, 1), PHASE_CORRECT);
    phase_full_done(&c);
    cr_assert_eq(phase_next(&c, 11, 1, 1), PHASE_PREDICT);
}

Test(controller, regime_horizon_grows_with_micro_batches) {
    int k[] = {1, 2, 3, 4, 8, 15, 16, 32, 64, 256};
    int h[] = {1, 1, 1, 2, 2, 2, 3, 3, 4, 5};
    for (int i = 0; i < 10; i++) {
        cr_assert_eq(phase_regime_horizon(16, k[i]), h[i], "%d micro batches: %d", k[i], phase_regime_horizon(16, k[i]));
    }
    cr_assert_eq(phase_regime_horizon(2, 256), 2, "capped by --max-predict-steps");
    cr_assert_eq(phase_regime_horizon(0, 16), 0, "--max-predict-steps 0: no Predict");
}
