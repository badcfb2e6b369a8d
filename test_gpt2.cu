/*
 * test_gpt2.cu — the GPU trainer against the PyTorch reference (test_gpt2cu), on any machine with a GPU.
 * Checks, each with a stated tolerance (bf16 build; fp32 build in brackets):
 *   1. logits and loss of one forward pass vs the reference debug state
 *   2. every parameter tensor's gradient (relative L2 error)
 *   3. the losses of 10 AdamW steps (lr 1e-4, wd 0.01, clip 1.0) on the same batch
 *   4. recompute (-r 0 vs -r 2) gives bit-identical gradients
 *   5. bit-exact resume: state saved after step 3 and restored gives the same steps 4..6, bit for bit
 *   6. hybrid: Predict steps on the model's master weights match hybrid/apply.h's CPU loop bit for bit
 *      (ema and adam directions), and rollback restores the weights (fp32 and floatX) bit for bit
 * In a cuDNN build (see the Makefile) attention runs through cuDNN (llmc/cudnn_att.cpp), so every check above
 * covers that path, with the same tolerances; the test fails if such a build fell back to the built-in kernels.
 * The model and the debug state come from the PyTorch reference (scripts/train_gpt2.py):
 *   /usr/bin/python3 scripts/train_gpt2.py --write-init build/gpu_test_model.bin --depth 2
 *   /usr/bin/python3 scripts/train_gpt2.py --write-debug-state build/gpu_test_state.bin \
 *       -e build/gpu_test_model.bin -b 4 -t 64
 *   ./test_gpt2cu build/gpu_test_model.bin build/gpu_test_state.bin
 * Exit status 0 only when every check passes.
 */
#define TESTING
#include "train_gpt2.cu"

#define DEBUG_STEPS 10
#define DEBUG_LR 1e-4f
#define DEBUG_WD 0.01f

#if defined(ENABLE_FP32)
#define TOL_LOGITS 1e-4
#define TOL_LOSS 1e-4
#define TOL_GRADS 1e-3
#define TOL_STEP_LOSS 1e-3
#else
#define TOL_LOGITS 2e-2
#define TOL_LOSS 2e-2
#define TOL_GRADS 1e-1
#define TOL_STEP_LOSS 5e-2
#endif

static int failures = 0;

static void expect(int ok, const char* what) {
    printf("%s %s\n", ok ? "[ OK ]" : "[FAIL]", what);
    if (!ok) { failures++; }
}

// ||a - b|| / ||b||, in double
static double rel_l2(const float* a, const float* b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static void grads_to_host(GPT2* model, float* out) {
    cudaCheck(cudaMemcpy(out, model->grads_memory, model->num_parameters * sizeof(float), cudaMemcpyDeviceToHost));
}

// one training step on (x, y) as the reference's debug loop: loss, clip at 1.0, AdamW
static float train_step(GPT2* model, const int* x, const int* y, int B, int T, int t) {
    gpt2_zero_grad(model);
    gpt2_forward(model, x, NULL, B, T);
    gpt2_backward(model, y, 1.0f / (B * T));
    float loss = gpt2_accumulated_loss(model);
    gpt2_reduce_grads(model);
    float norm = gpt2_grad_norm(model);
    float scale = norm > 1.0f ? 1.0f / norm : 1.0f;
    gpt2_update(model, DEBUG_LR, 0.9f, 0.95f, 1e-8f, DEBUG_WD, scale, t, t);
    return loss;
}

int main(int argc, char** argv) {
    const char* model_path = argc > 1 ? argv[1] : "build/gpu_test_model.bin";
    const char* state_path = argc > 2 ? argv[2] : "build/gpu_test_state.bin";
    MultiGpuConfig multi_gpu = multi_gpu_config_init(1, 0, 1, "fs", ".", "", 0);
    matmul_init();

    // the reference's debug state
    FILE* f = fopenCheck(state_path, "rb");
    int header[256];
    freadCheck(header, sizeof(int), 256, f, state_path);
    if (header[0] != 20240327 || header[1] != 2) {
        fatal("%s: not a debug state v2 (magic %d version %d)", state_path, header[0], header[1]);
    }
    int B = header[2], T = header[3], V = header[4], K = header[5];
    GPT2 model;
    gpt2_build_from_checkpoint(&model, model_path, &multi_gpu, 1337u, 0);
    GPT2Config c = model.config;
    int Vp = c.padded_vocab_size;
    size_t P = model.num_parameters;
    if (V != c.vocab_size) { fatal("%s: vocab %d does not match the model's %d", state_path, V, c.vocab_size); }
    if (K < DEBUG_STEPS) { fatal("%s: %d step losses, the test needs %d", state_path, K, DEBUG_STEPS); }
    int* x = (int*)mallocCheck((size_t)B * T * sizeof(int));
    int* y = (int*)mallocCheck((size_t)B * T * sizeof(int));
    float* ref_logits = (float*)mallocCheck((size_t)B * T * V * sizeof(float));
    float* ref_grads = (float*)mallocCheck(P * sizeof(float));
    float* ref_losses = (float*)mallocCheck(K * sizeof(float));
    float ref_loss;
    freadCheck(x, sizeof(int), (size_t)B * T, f, state_path);
    freadCheck(y, sizeof(int), (size_t)B * T, f, state_path);
    freadCheck(ref_logits, sizeof(float), (size_t)B * T * V, f, state_path);
    freadCheck(&ref_loss, sizeof(float), 1, f, state_path);
    freadCheck(ref_grads, sizeof(float), P, f, state_path);
    freadCheck(ref_losses, sizeof(float), K, f, state_path);
    fcloseCheck(f, state_path);
    printf("test_gpt2cu (%s): model %s (L %d, C %d, V %d), batch B=%d T=%d\n", PRECISION_NAME, model_path,
           c.num_layers, c.channels, V, B, T);

    // 1. forward: logits and loss
    gpt2_allocate(&model, B, T, 1);
    printf("attention: %s\n", model.use_cudnn ? "cuDNN" : "built-in kernels");
#ifdef ENABLE_CUDNN
    expect(model.use_cudnn, "this cuDNN build runs attention through cuDNN");
#endif
    gpt2_forward(&model, x, y, B, T);
    floatX* logits_x = (floatX*)mallocCheck((size_t)B * T * Vp * sizeof(floatX));
    float* logits = (float*)mallocCheck((size_t)B * T * V * sizeof(float));
    cudaCheck(cudaMemcpy(logits_x, model.acts.logits, (size_t)B * T * Vp * sizeof(floatX), cudaMemcpyDeviceToHost));
    for (size_t bt = 0; bt < (size_t)B * T; bt++) {
        for (int v = 0; v < V; v++) { logits[bt * V + v] = (float)logits_x[bt * Vp + v]; }
    }
    double e = rel_l2(logits, ref_logits, (size_t)B * T * V);
    printf("logits: relative L2 error %.3g (tolerance %.1g)\n", e, TOL_LOGITS);
    expect(e <= TOL_LOGITS, "logits match the reference");
    printf("loss: %.6f, reference %.6f\n", model.mean_loss, ref_loss);
    expect(fabsf(model.mean_loss - ref_loss) <= TOL_LOSS, "loss matches the reference");

    // 2. gradients, tensor by tensor
    gpt2_zero_grad(&model);
    gpt2_forward(&model, x, NULL, B, T);
    gpt2_backward(&model, y, 1.0f / (B * T));
    float* grads = (float*)mallocCheck(P * sizeof(float));
    grads_to_host(&model, grads);
    const char* names[NUM_PARAMETER_TENSORS] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw",
        "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    size_t off = 0;
    int grads_ok = 1;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        double ge = rel_l2(grads + off, ref_grads + off, model.param_sizes[i]);
        printf("  grad %-9s relative L2 error %.3g\n", names[i], ge);
        grads_ok &= ge <= TOL_GRADS;
        off += model.param_sizes[i];
    }
    expect(grads_ok, "every gradient tensor matches the reference");

    // 4. recompute 0 and 2 give the same gradients bit for bit (before 3: the model is still at init)
    {
        GPT2 m2;
        gpt2_build_from_checkpoint(&m2, model_path, &multi_gpu, 1337u, 0);
        gpt2_allocate(&m2, B, T, 2);
        gpt2_zero_grad(&m2);
        gpt2_forward(&m2, x, NULL, B, T);
        gpt2_backward(&m2, y, 1.0f / (B * T));
        float* g2 = (float*)mallocCheck(P * sizeof(float));
        grads_to_host(&m2, g2);
        GPT2 m0;
        gpt2_build_from_checkpoint(&m0, model_path, &multi_gpu, 1337u, 0);
        gpt2_allocate(&m0, B, T, 0);
        gpt2_zero_grad(&m0);
        gpt2_forward(&m0, x, NULL, B, T);
        gpt2_backward(&m0, y, 1.0f / (B * T));
        float* g0 = (float*)mallocCheck(P * sizeof(float));
        grads_to_host(&m0, g0);
        expect(memcmp(g0, g2, P * sizeof(float)) == 0 && memcmp(g0, grads, P * sizeof(float)) == 0,
               "gradients identical with -r 0, -r 1 and -r 2");
        gpt2_free(&m2);
        gpt2_free(&m0);
        free(g2);
        free(g0);
    }

    // 3. ten AdamW steps on the same batch
    int steps_ok = 1;
    for (int t = 1; t <= DEBUG_STEPS; t++) {
        float loss = train_step(&model, x, y, B, T, t);
        printf("  step %2d: loss %.6f, reference %.6f\n", t, loss, ref_losses[t - 1]);
        steps_ok &= fabsf(loss - ref_losses[t - 1]) <= TOL_STEP_LOSS;
    }
    expect(steps_ok, "10 training steps follow the reference losses");
    gpt2_free(&model);

    // 5. bit-exact resume: what a checkpoint holds (fp32 master weights, m, v, step) is enough
    {
        GPT2 m;
        gpt2_build_from_checkpoint(&m, model_path, &multi_gpu, 1337u, 0);
        gpt2_allocate(&m, B, T, 1);
        for (int t = 1; t <= 3; t++) { train_step(&m, x, y, B, T, t); }
        size_t S = m.shard_size;
        float* master = (float*)mallocCheck(P * sizeof(float));
        float* mm = (float*)mallocCheck(S * sizeof(float));
        float* vv = (float*)mallocCheck(S * sizeof(float));
        gpt2_params_to_host(&m, master);
        cudaCheck(cudaMemcpy(mm, m.m_memory, S * sizeof(float), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(vv, m.v_memory, S * sizeof(float), cudaMemcpyDeviceToHost));
        float losses_a[3], losses_b[3];
        for (int t = 4; t <= 6; t++) { losses_a[t - 4] = train_step(&m, x, y, B, T, t); }
        float* end_a = (float*)mallocCheck(P * sizeof(float));
        gpt2_params_to_host(&m, end_a);
        gpt2_free(&m);
        // a fresh model from the saved state, as -y 1 builds it
        GPT2 r;
        gpt2_init_params(&r, c, master, &multi_gpu, 1337u, 3);
        gpt2_allocate(&r, B, T, 1);
        cudaCheck(cudaMemcpy(r.m_memory, mm, S * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(r.v_memory, vv, S * sizeof(float), cudaMemcpyHostToDevice));
        for (int t = 4; t <= 6; t++) { losses_b[t - 4] = train_step(&r, x, y, B, T, t); }
        float* end_b = (float*)mallocCheck(P * sizeof(float));
        gpt2_params_to_host(&r, end_b);
        gpt2_free(&r);
        printf("  resumed losses %.9g %.9g %.9g vs %.9g %.9g %.9g\n", losses_b[0], losses_b[1], losses_b[2],
               losses_a[0], losses_a[1], losses_a[2]);
        expect(memcmp(losses_a, losses_b, sizeof(losses_a)) == 0 && memcmp(end_a, end_b, P * sizeof(float)) == 0,
               "resume from step 3 is bit-exact (losses and weights of steps 4..6)");
        free(master); free(mm); free(vv); free(end_a); free(end_b);
    }

    // 6. hybrid Predict / rollback on the real parameter layout, against the CPU reference loops
    {
        GPT2 m;
        gpt2_build_from_checkpoint(&m, model_path, &multi_gpu, 1337u, 0);
        gpt2_allocate(&m, B, T, 1);
        for (int t = 1; t <= 3; t++) { train_step(&m, x, y, B, T, t); }
        size_t S = m.shard_size;
        size_t* offsets = (size_t*)mallocCheck((size_t)(12 * c.num_layers + 5) * sizeof(size_t));
        float* block_wd = (float*)mallocCheck((size_t)(12 * c.num_layers + 4) * sizeof(float));
        int nb = gpt2_param_blocks(&m.config, offsets, block_wd, DEBUG_WD);
        float* coef = (float*)mallocCheck(nb * sizeof(float));
        uint64_t rng = 42;
        for (int b = 0; b < nb; b++) { coef[b] = 2.0f * random_f32(&rng) - 0.5f; }
        size_t* d_offsets = (size_t*)cudaMallocCheck((size_t)(nb + 1) * sizeof(size_t));
        float* d_coef = (float*)cudaMallocCheck(nb * sizeof(float));
        cudaCheck(cudaMemcpy(d_offsets, offsets, (size_t)(nb + 1) * sizeof(size_t), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_coef, coef, nb * sizeof(float), cudaMemcpyHostToDevice));
        float* theta0 = (float*)mallocCheck(P * sizeof(float));
        float* ref = (float*)mallocCheck(P * sizeof(float));
        float* keep = (float*)mallocCheck(P * sizeof(float));
        float* got = (float*)mallocCheck(P * sizeof(float));
        float* mm = (float*)mallocCheck(S * sizeof(float));
        float* vv = (float*)mallocCheck(S * sizeof(float));
        float* dd = (float*)mallocCheck(S * sizeof(float));
        floatX* x0 = (floatX*)mallocCheck(m.num_parameters_padded * sizeof(floatX));
        floatX* x1 = (floatX*)mallocCheck(m.num_parameters_padded * sizeof(floatX));
        cudaCheck(cudaMemcpy(theta0, m.master_weights, P * sizeof(float), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(x0, m.params_memory, m.num_parameters_padded * sizeof(floatX), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(mm, m.m_memory, S * sizeof(float), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(vv, m.v_memory, S * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < S; i++) { dd[i] = (i < P ? theta0[i] : 0.0f) * 1e-3f; }  // some drift
        float* d_dir = (float*)cudaMallocCheck(S * sizeof(float));
        cudaCheck(cudaMemcpy(d_dir, dd, S * sizeof(float), cudaMemcpyHostToDevice));
        {
            memcpy(ref, theta0, P * sizeof(float));
            for (int k = 0; k < 2; k++) {
                apply_predict(ref, keep, dd, offsets, nb, coef, k == 0);
                hybrid_predict(m.master_weights, m.params_memory, m.grads_memory, d_dir, d_offsets, nb, d_coef, 0, S,
                               k == 0, 7u + k, m.stream);
            }
            cudaCheck(cudaMemcpy(got, m.master_weights, P * sizeof(float), cudaMemcpyDeviceToHost));
            int changed = memcmp(got, theta0, P * sizeof(float)) != 0;
            expect(changed && memcmp(got, ref, P * sizeof(float)) == 0, "hybrid Predict x2 along the drift matches the CPU loop bit for bit");
            // rollback with the seed of the step that wrote theta0 (3): weights and floatX copy as before
            hybrid_rollback_device(m.master_weights, m.params_memory, m.grads_memory, 0, S, gpt2_step_seed(&m, 3), m.stream);
            cudaCheck(cudaStreamSynchronize(m.stream));
            cudaCheck(cudaMemcpy(got, m.master_weights, P * sizeof(float), cudaMemcpyDeviceToHost));
            cudaCheck(cudaMemcpy(x1, m.params_memory, m.num_parameters_padded * sizeof(floatX), cudaMemcpyDeviceToHost));
            expect(memcmp(got, theta0, P * sizeof(float)) == 0 &&
                   memcmp(x1, x0, m.num_parameters_padded * sizeof(floatX)) == 0,
                   "hybrid rollback restores master weights and floatX copy bit for bit");
        }
        // the model still trains after a Predict run and its rollback
        float loss = train_step(&m, x, y, B, T, 4);
        expect(isfinite(loss), "training continues after rollback");
        cudaCheck(cudaFree(d_offsets)); cudaCheck(cudaFree(d_coef)); cudaCheck(cudaFree(d_dir));
        free(offsets); free(block_wd); free(coef); free(theta0); free(ref); free(keep); free(got); free(mm); free(vv); free(dd);
        free(x0); free(x1);
        gpt2_free(&m);
    }

    matmul_free();
    multi_gpu_config_free(&multi_gpu);
    printf("%s: %d check(s) failed\n", failures == 0 ? "PASS" : "FAIL", failures);
    free(x); free(y); free(ref_logits); free(ref_grads); free(ref_losses); free(logits_x); free(logits); free(grads);
    return failures == 0 ? 0 : 1;
}
