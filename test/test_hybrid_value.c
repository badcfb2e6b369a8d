// hybrid/value.h alone: the pooled test's decision, its cost model, which runs are probed, and save/load.
#include <criterion/criterion.h>
#include <stdio.h>
#include "hybrid/value.h"

// a fixed pseudo-random sequence in [-1, 1)
static float noise(uint64_t* s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xFFFFFF) / (float)(1 << 23) - 1.0f;
}

Test(value, gathers_first_then_decides) {
    ValueTest v;
    value_init(&v);
    // runs worth nothing: pred gain ~0, a Full step gains 0.01
    uint64_t s = 1;
    for (int i = 0; i < VALUE_MIN_PAIRS - 1; i++) {
        cr_assert(value_add(&v, 0.01f * noise(&s), 0.01f, 0.1f), "pair %d: still gathering", i + 1);
    }
    cr_assert_not(value_add(&v, 0.01f * noise(&s), 0.01f, 0.1f), "the 8th pair decides: no value, stop");
    cr_assert_eq(v.pairs, VALUE_MIN_PAIRS);
    cr_assert_lt(fabsf(value_rho(&v)), 1.0f);
}

Test(value, runs_worth_most_of_a_full_step_pass) {
    ValueTest v;
    value_init(&v);
    uint64_t s = 2;
    for (int i = 0; i < 12; i++) { value_add(&v, 0.008f + 0.002f * noise(&s), 0.01f + 0.002f * noise(&s), 0.1f); }
    cr_assert(v.open);
    cr_assert_float_eq(value_rho(&v), 0.8f, 0.1f, "rho %g", value_rho(&v));
    // the same gains against a cost above them: rho < cost fails
    ValueTest w;
    value_init(&w);
    s = 2;
    for (int i = 0; i < 12; i++) { value_add(&w, 0.008f + 0.002f * noise(&s), 0.01f + 0.002f * noise(&s), 1.0f); }
    cr_assert_not(w.open);
}

Test(value, a_failed_test_can_pass_again_on_evidence) {
    ValueTest v;
    value_init(&v);
    for (int i = 0; i < VALUE_MIN_PAIRS; i++) { value_add(&v, (i % 2) ? 0.001f : -0.001f, 0.01f, 0.0f); }
    cr_assert_not(v.open);
    int n = 0;
    while (!v.open && n < 100) { value_add(&v, 0.005f + (n % 2 ? 0.001f : -0.001f), 0.01f, 0.0f); n++; }
    cr_assert(v.open, "never passed");
    cr_assert_gt(n, 2, "passed after %d pairs: too easily", n);
}

Test(value, non_finite_pairs_are_ignored) {
    ValueTest v;
    value_init(&v);
    value_add(&v, NAN, 0.01f, 0.1f);
    value_add(&v, 0.01f, INFINITY, 0.1f);
    cr_assert_eq(v.pairs, 0);
    cr_assert(isnan(value_rho(&v)));
}

Test(value, cost_model) {
    // one micro batch, runs of 1: 1% + 2 forwards (2/3 of a Full step) in one run out of 4
    cr_assert_float_eq(value_cost(1, 1), 0.01f + (2.0f / 3.0f) / 4.0f, 1e-6f);
    // 16 micro batches, runs of 3: the probes are 1/72 of a Full step per predicted step, in one run of 4
    cr_assert_float_eq(value_cost(16, 3), 0.01f + 2.0f / (3.0f * 16.0f * 3.0f) / 4.0f, 1e-6f);
}

Test(value, which_runs_are_probed) {
    ValueTest v;
    value_init(&v);
    for (int r = 1; r <= VALUE_MIN_PAIRS; r++) { cr_assert(value_probe_run(&v, r)); }
    for (int i = 0; i < VALUE_MIN_PAIRS; i++) { value_add(&v, 0.01f + 0.0001f * (float)i, 0.01f, 0.0f); }
    cr_assert(v.open);
    int probed = 0;
    for (int r = 100; r < 140; r++) { probed += value_probe_run(&v, r); }
    cr_assert_eq(probed, 40 / VALUE_PROBE_EVERY);
    v.open = 0;
    for (int r = 100; r < 110; r++) { cr_assert(value_probe_run(&v, r), "a closed test probes every run"); }
}

Test(value, save_load_round_trip_and_refusal) {
    ValueTest v, w;
    value_init(&v);
    for (int i = 0; i < 5; i++) { value_add(&v, 0.003f * (float)i, 0.01f, 0.1f); }
    v.l0 = 4.5f; v.pending = NAN; v.pred_gain = 0.002f; v.cost = 0.2f;
    unsigned char buf[256];
    HybridIO io;
    hio_begin(&io, 1, NULL, buf, sizeof(buf));
    value_io(&io, &v);
    cr_assert_eq(hio_finish(&io), 0);
    size_t n = io.pos;
    value_init(&w);
    hio_begin(&io, 0, NULL, buf, n);
    value_io(&io, &w);
    cr_assert_eq(hio_finish(&io), 0, "%s", io.error);
    cr_assert_eq(memcmp(&v.sum, &w.sum, sizeof(double)), 0);
    cr_assert_eq(w.pairs, 5);
    cr_assert_float_eq(w.l0, 4.5f, 0.0f);
    cr_assert(isnan(w.pending));
    // a corrupt decision flag is refused
    v.open = 7;
    hio_begin(&io, 1, NULL, buf, sizeof(buf));
    value_io(&io, &v);
    hio_finish(&io);
    value_init(&w);
    hio_begin(&io, 0, NULL, buf, n);
    value_io(&io, &w);
    cr_assert_neq(hio_finish(&io), 0);
}
