// hybrid/residual.h alone: the ring buffer and the similarity x age weighting.
#include <criterion/criterion.h>
#include "hybrid/residual.h"

Test(residual, ring_keeps_the_newest_capacity_entries) {
    ResidualStore r;
    residual_store_init(&r, 4, 3, 2);
    float f[3] = {1, 1, 0}, res[2];
    for (int i = 0; i < 6; i++) { res[0] = (float)i; res[1] = -(float)i; residual_store_push(&r, f, res, 1, i); }
    cr_assert_eq(r.count, 4);
    cr_assert_eq(r.head, 2);
    // entries 2..5 remain; slots 0,1 were overwritten by 4,5
    cr_assert_float_eq(r.residuals[0 * 2], 4.0f, 0.0f);
    cr_assert_float_eq(r.residuals[1 * 2], 5.0f, 0.0f);
    cr_assert_float_eq(r.residuals[2 * 2], 2.0f, 0.0f);
    cr_assert_eq(r.step[3], 3);
    residual_store_free(&r);
}

Test(residual, similar_features_weigh_more_and_opposite_not_at_all) {
    ResidualStore r;
    residual_store_init(&r, 8, 3, 1);
    r.age_decay = 1.0f;
    float fa[3] = {1, 1, 0}, fb[3] = {1, 0, 1}, fc[3] = {1, -1, 0};
    float ra = 1.0f, rb = -1.0f, rc = 100.0f;
    residual_store_push(&r, fa, &ra, 1, 0);
    residual_store_push(&r, fb, &rb, 1, 0);
    residual_store_push(&r, fc, &rc, 1, 0);
    float q[3] = {1, 1, 0.1f}, out;
    float w = residual_store_correction(&r, q, 0, &out);
    // weights: cos(q,a) ~ 0.995, cos(q,b) ~ 0.0995, cos(q,c) < 0 -> 0 (the 100 never enters)
    float wa = 1.0f / sqrtf(1.01f), wb = 0.1f / sqrtf(1.01f);
    cr_assert_float_eq(w, wa + wb, 1e-5f);
    cr_assert_float_eq(out, (wa * 1.0f - wb * 1.0f) / (wa + wb), 1e-5f);
    residual_store_free(&r);
}

Test(residual, old_entries_decay) {
    ResidualStore r;
    residual_store_init(&r, 8, 2, 1);
    r.age_decay = 0.5f;
    float f[2] = {1, 1}, old = 10.0f, recent = 0.0f, out;
    residual_store_push(&r, f, &old, 1, 0);
    residual_store_push(&r, f, &recent, 1, 10);
    residual_store_correction(&r, f, 10, &out);
    // weights 0.5^10 and 1: the old entry barely matters
    cr_assert_float_eq(out, 10.0f * powf(0.5f, 10) / (1.0f + powf(0.5f, 10)), 1e-5f);
    residual_store_free(&r);
}

Test(residual, empty_store_gives_no_correction) {
    ResidualStore r;
    residual_store_init(&r, 4, 2, 3);
    float f[2] = {1, 1}, out[3] = {7, 7, 7};
    cr_assert_float_eq(residual_store_correction(&r, f, 0, out), 0.0f, 0.0f);
    for (int i = 0; i < 3; i++) { cr_assert_float_eq(out[i], 0.0f, 0.0f); }
    residual_store_free(&r);
}
