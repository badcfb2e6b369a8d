// hybrid/bandit.h alone: LinUCB finds the best horizon on a synthetic reward.
#include <criterion/criterion.h>
#include "hybrid/bandit.h"

Test(bandit, arms_follow_the_maximum_horizon) {
    Bandit b;
    bandit_init(&b, 16, 1.0f);
    cr_assert_eq(b.arms, 5);
    cr_assert_eq(b.horizon[4], 16);
    bandit_init(&b, 5, 1.0f);
    cr_assert_eq(b.arms, 3); // 1, 2, 4
    bandit_init(&b, 0, 1.0f);
    cr_assert_eq(b.arms, 0);
    float x[BANDIT_DIM] = {1};
    cr_assert_eq(bandit_choose(&b, x), 0);
}

Test(bandit, picks_the_best_arm_on_a_noisy_reward) {
    Bandit b;
    bandit_init(&b, 16, 1.0f);
    uint64_t rng = 11;
    // reward peaks at horizon 4, plus noise; context is random features with a bias
    int picks[5] = {0};
    for (int round = 0; round < 600; round++) {
        float x[BANDIT_DIM];
        x[0] = 1.0f;
        for (int i = 1; i < BANDIT_DIM; i++) { x[i] = hmath_normal(&rng) * 0.3f; }
        int h = bandit_choose(&b, x);
        int a = bandit_arm_of(&b, h);
        float mean = 1.0f - 0.25f * fabsf(log2f((float)h) - 2.0f);
        float r = mean + 0.3f * hmath_normal(&rng);
        bandit_update(&b, a, x, r);
        if (round >= 400) { picks[a]++; }
    }
    cr_assert_gt(picks[2], 150, "horizon 4 picked %d of the last 200 rounds", picks[2]);
}

Test(bandit, context_changes_the_choice) {
    Bandit b;
    bandit_init(&b, 2, 0.1f);
    uint64_t rng = 3;
    // arm 0 (h=1) pays when x[1] > 0, arm 1 (h=2) when x[1] < 0
    for (int round = 0; round < 400; round++) {
        float x[BANDIT_DIM] = {1};
        x[1] = (round % 2) ? 1.0f : -1.0f;
        for (int a = 0; a < 2; a++) {
            float r = (a == 0 ? x[1] : -x[1]) + 0.1f * hmath_normal(&rng);
            bandit_update(&b, a, x, r);
        }
    }
    float xp[BANDIT_DIM] = {1, 1}, xn[BANDIT_DIM] = {1, -1};
    cr_assert_eq(bandit_choose(&b, xp), 1);
    cr_assert_eq(bandit_choose(&b, xn), 2);
}
