// Tests of the training-step semantics of train_gpt2.c through its C API: gradient accumulation equals one
// big batch, weight decay touches the 2-D weights only, grad_scale (clipping) scales the gradient, the
// random init follows llm.c's scheme and is deterministic.
#define TESTING
#include "../train_gpt2.c"
#include <criterion/criterion.h>

#define V 64
#define B 4
#define T 8

static void tokens(int* x, int* y, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) { x[i] = (int)(random_u32(&seed) % V); y[i] = (int)(random_u32(&seed) % V); }
}

Test(train_step, two_micro_batches_equal_one_batch_of_twice_the_size) {
    GPT2 big, acc;
    gpt2_build_from_random(&big, 1, V, 11);
    gpt2_build_from_random(&acc, 1, V, 11);
    gpt2_allocate(&big, 2 * B, T);
    gpt2_allocate(&acc, B, T);
    int x[2 * B * T], y[2 * B * T];
    tokens(x, y, 2 * B * T, 3);
    gpt2_forward(&big, x, y, 2 * B, T);
    float big_loss = big.mean_loss;
    gpt2_zero_grad(&big);
    gpt2_backward(&big, x, y, 1.0f);
    gpt2_zero_grad(&acc);
    double loss = 0.0;
    for (int k = 0; k < 2; k++) {
        gpt2_forward(&acc, x + k * B * T, y + k * B * T, B, T);
        gpt2_backward(&acc, x + k * B * T, y + k * B * T, 0.5f);
        loss += 0.5 * acc.mean_loss;
    }
    cr_assert_float_eq((float)loss, big_loss, 1e-5f);
    double max_ref = 0.0, max_err = 0.0;
    for (size_t i = 0; i < big.num_parameters; i++) {
        max_ref = fmax(max_ref, fabs(big.grads_memory[i]));
        max_err = fmax(max_err, fabs(big.grads_memory[i] - acc.grads_memory[i]));
    }
    cr_assert_gt(max_ref, 0.0);
    cr_assert_leq(max_err, 1e-5 * max_ref, "max |diff| %g vs max |grad| %g", max_err, max_ref);
    gpt2_free(&big);
    gpt2_free(&acc);
}

// a training forward writes the dlogits over its logits for its dloss_scale: a backward for another scale has
// nothing to make its dlogits from, and says so (and exits) rather than run on the dlogits
Test(train_step, a_backward_for_another_scale_after_a_training_forward_exits, .exit_code = 1) {
    GPT2 m;
    gpt2_build_from_random(&m, 1, V, 5);
    gpt2_allocate(&m, B, T);
    int x[B * T], y[B * T];
    tokens(x, y, B * T, 6);
    gpt2_forward_train(&m, x, y, B, T, 0.5f);
    gpt2_backward(&m, x, y, 0.5f);  // its own scale: fine
    gpt2_forward_train(&m, x, y, B, T, 0.5f);
    gpt2_backward(&m, x, y, 0.25f);
}

Test(train_step, weight_decay_only_on_two_dimensional_weights) {
    GPT2 m;
    gpt2_build_from_random(&m, 1, V, 5);
    gpt2_allocate(&m, B, T);
    for (size_t i = 0; i < m.num_parameters; i++) { m.params_memory[i] += 0.25f; }  // biases nonzero too
    float* before = malloc(m.num_parameters * sizeof(float));
    memcpy(before, m.params_memory, m.num_parameters * sizeof(float));
    gpt2_zero_grad(&m);  // zero gradient: AdamW's step is pure decay
    float lr = 0.1f, wd = 0.5f;
    gpt2_update(&m, lr, 0.9f, 0.95f, 1e-8f, wd, 1.0f, 1);
    size_t off = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        for (size_t i = 0; i < m.param_sizes[k]; i++) {
            float expect = PARAM_DECAYS[k] ? before[off + i] - lr * wd * before[off + i] : before[off + i];
            cr_assert_float_eq(m.params_memory[off + i], expect, 1e-6f, "tensor %d element %zu", k, i);
        }
        off += m.param_sizes[k];
    }
    cr_assert(PARAM_DECAYS[0] && PARAM_DECAYS[1] && PARAM_DECAYS[4] && PARAM_DECAYS[6] && PARAM_DECAYS[10] &&
              PARAM_DECAYS[12]);
    free(before);
    gpt2_free(&m);
}

Test(train_step, grad_scale_is_a_scaled_gradient) {
    GPT2 a, b;
    gpt2_build_from_random(&a, 1, V, 9);
    gpt2_build_from_random(&b, 1, V, 9);
    gpt2_allocate(&a, B, T);
    gpt2_allocate(&b, B, T);
    int x[B * T], y[B * T];
    tokens(x, y, B * T, 4);
    gpt2_forward(&a, x, y, B, T);
    gpt2_zero_grad(&a);
    gpt2_backward(&a, x, y, 1.0f);
    gpt2_forward(&b, x, y, B, T);
    gpt2_zero_grad(&b);
    gpt2_backward(&b, x, y, 0.25f);  // the same gradient, scaled by 1/4
    cr_assert_float_eq(gpt2_grad_norm(&b), 0.25f * gpt2_grad_norm(&a), 1e-6f * gpt2_grad_norm(&a));
    gpt2_update(&a, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.25f, 1);
    gpt2_update(&b, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 1);
    for (size_t i = 0; i < a.num_parameters; i++) {
        cr_assert_float_eq(a.params_memory[i], b.params_memory[i], 1e-6f, "param %zu", i);
    }
    gpt2_free(&a);
    gpt2_free(&b);
}

// the trainer's step makes the dlogits in the forward (gpt2_forward_train); an eval forward leaves the logits
// and gpt2_backward makes them: the same loss and gradients bit for bit, fp32 and, where it runs, bf16 (its
// logits kept in bf16: the backward's cross-entropy reads them again)
Test(train_step, dlogits_made_in_the_forward_or_in_the_backward_are_the_same) {
    int runs = dnnl_available() && cpu_has_native_bf16() ? 2 : 1;
    for (int bf16_on = 0; bf16_on < runs; bf16_on++) {
        GPT2 m[2];
        int x[B * T], y[B * T];
        tokens(x, y, B * T, 9);
        for (int k = 0; k < 2; k++) {
            gpt2_build_from_random(&m[k], 2, V, 14);
            gpt2_allocate(&m[k], B, T);
            gpt2_set_precision(&m[k], bf16_on);
            if (k == 0) { gpt2_forward_train(&m[k], x, y, B, T, 0.5f); } else { gpt2_forward(&m[k], x, y, B, T); }
            gpt2_backward(&m[k], x, y, 0.5f);
        }
        const char* what = bf16_on ? "bf16" : "fp32";
        cr_assert_eq(m[0].mean_loss, m[1].mean_loss, "%s: loss %g vs %g", what, m[0].mean_loss, m[1].mean_loss);
        cr_assert_eq(memcmp(m[0].grads_memory, m[1].grads_memory, m[0].num_parameters * sizeof(float)), 0,
                     "%s: the gradients differ", what);
        gpt2_free(&m[0]);
        gpt2_free(&m[1]);
    }
}

// gpt2_update leaves every gradient zero (the trainer's next step accumulates into them with no zeroing
// pass), fp32 and, where it runs, bf16 (its loop also rounds the bf16 copy)
Test(train_step, the_update_leaves_the_gradients_zero) {
    int runs = dnnl_available() && cpu_has_native_bf16() ? 2 : 1;
    for (int bf16_on = 0; bf16_on < runs; bf16_on++) {
        GPT2 m;
        gpt2_build_from_random(&m, 2, V, 12);
        gpt2_allocate(&m, B, T);
        gpt2_set_precision(&m, bf16_on);
        int x[B * T], y[B * T];
        tokens(x, y, B * T, 8);
        gpt2_forward(&m, x, y, B, T);
        gpt2_backward(&m, x, y, 1.0f);
        size_t nonzero = 0;
        for (size_t i = 0; i < m.num_parameters; i++) { nonzero += m.grads_memory[i] != 0.0f; }
        cr_assert_gt(nonzero, m.num_parameters / 2);
        gpt2_update(&m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1);
        for (size_t i = 0; i < m.num_parameters; i++) {
            cr_assert_eq(m.grads_memory[i], 0.0f, "%s: gradient %zu is %g after the update", bf16_on ? "bf16" : "fp32",
                         i, m.grads_memory[i]);
        }
        gpt2_free(&m);
    }
}

Test(train_step, random_init_follows_llmc_and_is_deterministic) {
    GPT2 a, b, c;
    gpt2_build_from_random(&a, 2, V, 1337);
    gpt2_build_from_random(&b, 2, V, 1337);
    gpt2_build_from_random(&c, 2, V, 1338);
    cr_assert_eq(a.config.channels, 128);
    cr_assert_eq(a.config.num_heads, 2);
    cr_assert_eq(a.config.padded_vocab_size, 128);
    cr_assert_arr_eq(a.params_memory, b.params_memory, a.num_parameters * sizeof(float));
    cr_assert_neq(memcmp(a.params_memory, c.params_memory, a.num_parameters * sizeof(float)), 0);
    // standard deviations: 0.02, and 0.02/sqrt(2L) for the residual projections
    size_t n = a.param_sizes[4];
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) { ss += (double)a.params.qkvw[i] * a.params.qkvw[i]; }
    cr_assert_float_eq(sqrt(ss / n), 0.02, 0.001);
    n = a.param_sizes[12];
    ss = 0.0;
    for (size_t i = 0; i < n; i++) { ss += (double)a.params.fcprojw[i] * a.params.fcprojw[i]; }
    cr_assert_float_eq(sqrt(ss / n), 0.02 / sqrt(4.0), 0.0005);
    for (int i = 0; i < 2 * 128; i++) {
        cr_assert_eq(a.params.ln1w[i], 1.0f);
        cr_assert_eq(a.params.ln1b[i], 0.0f);
        cr_assert_eq(a.params.qkvb[i], 0.0f);
    }
    for (size_t i = (size_t)V * 128; i < a.param_sizes[0]; i++) { cr_assert_eq(a.params.wte[i], 0.0f, "padded row"); }
    gpt2_free(&a);
    gpt2_free(&b);
    gpt2_free(&c);
}

// the run's noise scale is a ratio of two sums of unbiased estimates: with either sum <= 0 the noise (or
// the signal) was too small to measure at this batch size, and the summary says nothing rather than a
// negative number of tokens
Test(train_step, noise_scale_needs_both_sums_positive) {
    TrainRun run;
    memset(&run, 0, sizeof(run));
    cr_assert(isnan(run_gns(&run)), "no steps: not measured");
    run.gns_steps = 3;
    run.gns_s_sum = 2000.0;
    run.gns_g2_sum = 2.0;
    cr_assert_float_eq(run_gns(&run), 1000.0, 1e-9);
    run.gns_s_sum = -20.0;
    cr_assert(isnan(run_gns(&run)), "negative noise sum: not measured, got %g", run_gns(&run));
    run.gns_s_sum = 2000.0;
    run.gns_g2_sum = -2.0;
    cr_assert(isnan(run_gns(&run)), "negative signal sum: not measured, got %g", run_gns(&run));
}
