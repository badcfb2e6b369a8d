// hybrid/monitor.h alone: each signal fires on its pattern and maps to its action.
#include <criterion/criterion.h>
#include "hybrid/monitor.h"
#include "hybrid/hmath.h"

// a quiet run: loss slowly falling with noise, gradient norm steady
static void quiet(Monitor* m, int n) {
    uint64_t rng = 5;
    for (int s = 0; s < n; s++) {
        float noise = ((hmath_u32(&rng) % 1000) / 1000.0f - 0.5f) * 0.02f;
        MonitorAction a = monitor_observe(m, s, 3.0f - 0.001f * s + noise, 1.0f + noise, 0);
        cr_assert_eq(a, ACTION_NONE, "quiet step %d fired %s", s, monitor_signal_name(m->last_signal));
    }
}

Test(monitor, quiet_training_fires_nothing) {
    Monitor m;
    monitor_init(&m, 3.0f);
    quiet(&m, 200);
    for (int s = 1; s < SIGNAL_COUNT; s++) { cr_assert_eq(m.events[s], 0); }
}

Test(monitor, nan_and_inf_force_full_and_roll_back_a_correct) {
    Monitor m;
    monitor_init(&m, 3.0f);
    quiet(&m, 50);
    cr_assert_eq(monitor_observe(&m, 50, NAN, 1.0f, 0), ACTION_FORCE_FULL);
    cr_assert_eq(m.last_signal, SIGNAL_NONFINITE);
    cr_assert_eq(monitor_observe(&m, 51, 3.0f, INFINITY, 0), ACTION_FORCE_FULL);
    cr_assert_eq(monitor_correct(&m, 52, NAN, 2.9f), ACTION_ROLLBACK);
    cr_assert_eq(m.events[SIGNAL_NONFINITE], 3);
}

Test(monitor, loss_spike_forces_full) {
    Monitor m;
    monitor_init(&m, 3.0f);
    quiet(&m, 100);
    cr_assert_eq(monitor_observe(&m, 100, 4.0f, 1.0f, 0), ACTION_FORCE_FULL);
    cr_assert_eq(m.last_signal, SIGNAL_LOSS_SPIKE);
    cr_assert_gt(m.last_value, 3.0f);
}

Test(monitor, grad_norm_ratio_shortens) {
    Monitor m;
    monitor_init(&m, 3.0f);
    quiet(&m, 100);
    cr_assert_eq(monitor_observe(&m, 100, 2.9f, 10.0f, 0), ACTION_SHORTEN);
    cr_assert_eq(m.last_signal, SIGNAL_GRAD_RATIO);
}

Test(monitor, oscillation_shortens) {
    Monitor m;
    monitor_init(&m, 10.0f); // high threshold: the swings must be caught as oscillation, not spikes
    quiet(&m, 100);
    MonitorAction seen = ACTION_NONE;
    for (int s = 100; s < 120 && seen == ACTION_NONE; s++) {
        seen = monitor_observe(&m, s, (s % 2) ? 2.95f : 2.75f, 1.0f, 0);
    }
    cr_assert_eq(seen, ACTION_SHORTEN);
    cr_assert_eq(m.last_signal, SIGNAL_OSCILLATION);
}

Test(monitor, correct_residual_rolls_back_only_when_worse) {
    Monitor m;
    monitor_init(&m, 3.0f);
    quiet(&m, 100);
    float sigma = monitor_sigma(&m);
    cr_assert_eq(monitor_correct(&m, 100, 2.9f, 2.9f), ACTION_NONE);
    cr_assert_eq(monitor_correct(&m, 101, 2.9f - 10.0f * sigma, 2.9f), ACTION_NONE);   // better than predicted
    cr_assert_eq(monitor_correct(&m, 102, 2.9f + 2.0f * sigma, 2.9f), ACTION_SHORTEN);
    cr_assert_eq(monitor_correct(&m, 103, 2.9f + 4.0f * sigma, 2.9f), ACTION_ROLLBACK);
    cr_assert_eq(m.last_signal, SIGNAL_RESIDUAL);
}

Test(monitor, cosine_collapse_forces_full) {
    Monitor m;
    monitor_init(&m, 3.0f);
    cr_assert_eq(monitor_cosine(&m, 1, 0.3f), ACTION_NONE);
    cr_assert_eq(monitor_cosine(&m, 2, -0.5f), ACTION_FORCE_FULL);
    cr_assert_eq(m.last_signal, SIGNAL_COSINE);
}
