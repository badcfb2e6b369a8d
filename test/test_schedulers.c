// Tests of llmc/schedulers.h: warm-up, the four schedules and the final fraction (step is 0-based).
#include <math.h>
#include "llmc/schedulers.h"
#include "trainer_test_util.h"

#define EPS 1e-7f

static LRScheduler make(LRScheduleKind kind, int warmup, int total, float frac) {
    LRScheduler s;
    lr_scheduler_init(&s, kind, 1e-3f, warmup, total, frac);
    return s;
}

Test(schedulers, names_parse_and_bad_names_fail) {
    LRScheduleKind k;
    const char* names[] = {"cosine", "linear", "constant", "wsd"};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(lr_schedule_parse(names[i], &k), 0);
        cr_assert_str_eq(lr_schedule_name(k), names[i]);
    }
    cr_assert_eq(lr_schedule_parse("cosin", &k), -1);
    cr_assert_eq(lr_schedule_parse("", &k), -1);
}

Test(schedulers, warmup_is_linear_from_one_step) {
    LRScheduleKind kinds[] = {LR_COSINE, LR_LINEAR, LR_CONSTANT, LR_WSD};
    for (int i = 0; i < 4; i++) {
        LRScheduler s = make(kinds[i], 10, 100, 0.1f);
        cr_assert_float_eq(lr_scheduler_get(&s, 0), 1e-4f, EPS);
        cr_assert_float_eq(lr_scheduler_get(&s, 4), 5e-4f, EPS);
        cr_assert_float_eq(lr_scheduler_get(&s, 9), 1e-3f, EPS);
    }
}

Test(schedulers, cosine_decays_to_the_final_fraction) {
    LRScheduler s = make(LR_COSINE, 10, 110, 0.1f);
    cr_assert_float_eq(lr_scheduler_get(&s, 10), 1e-3f, EPS);             // p = 0
    cr_assert_float_eq(lr_scheduler_get(&s, 60), 0.55e-3f, EPS);          // p = 0.5: halfway
    float p = 25.0f / 100.0f;
    cr_assert_float_eq(lr_scheduler_get(&s, 35), 1e-4f + 0.5f * (1 + cosf((float)M_PI * p)) * 9e-4f, EPS);
    cr_assert_float_eq(lr_scheduler_get(&s, 110), 1e-4f, EPS);            // p = 1
    cr_assert_float_eq(lr_scheduler_get(&s, 500), 1e-4f, EPS);            // past the end: stays
    for (int t = 11; t < 110; t++) { cr_assert_leq(lr_scheduler_get(&s, t), lr_scheduler_get(&s, t - 1)); }
}

Test(schedulers, cosine_with_final_fraction_one_is_constant) {
    LRScheduler s = make(LR_COSINE, 0, 50, 1.0f);
    for (int t = 0; t < 60; t++) { cr_assert_float_eq(lr_scheduler_get(&s, t), 1e-3f, EPS); }
}

Test(schedulers, linear_decays_linearly) {
    LRScheduler s = make(LR_LINEAR, 0, 100, 0.0f);
    cr_assert_float_eq(lr_scheduler_get(&s, 0), 1e-3f, EPS);
    cr_assert_float_eq(lr_scheduler_get(&s, 25), 0.75e-3f, EPS);
    cr_assert_float_eq(lr_scheduler_get(&s, 100), 0.0f, EPS);
}

Test(schedulers, constant_stays_at_peak) {
    LRScheduler s = make(LR_CONSTANT, 3, 100, 0.1f);
    cr_assert_float_eq(lr_scheduler_get(&s, 3), 1e-3f, EPS);
    cr_assert_float_eq(lr_scheduler_get(&s, 99), 1e-3f, EPS);
}

Test(schedulers, wsd_is_stable_then_decays_in_the_last_fifth) {
    LRScheduler s = make(LR_WSD, 10, 100, 0.1f);
    cr_assert_float_eq(lr_scheduler_get(&s, 50), 1e-3f, EPS);
    cr_assert_float_eq(lr_scheduler_get(&s, 79), 1e-3f, EPS);
    cr_assert_float_eq(lr_scheduler_get(&s, 80), 1e-3f, EPS);             // q = 0
    cr_assert_float_eq(lr_scheduler_get(&s, 85), 1e-4f + (1 - sqrtf(0.25f)) * 9e-4f, EPS);
    cr_assert_float_eq(lr_scheduler_get(&s, 100), 1e-4f, EPS);
}
