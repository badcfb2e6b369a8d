/*
 * dev/bench_hybrid.c — the per-element passes of hybrid mode against the memory bandwidth, as `make bench`
 * measures them: on a random-init dN model (GPT-2 vocab), the median time of the plain AdamW update
 * (gpt2_update), the same update fused with hybrid mode's statistics (hybrid_update, ema and adam
 * directions), and a Predict step (hybrid_apply_predict: a run's first step, which also writes the rollback
 * copy, and a later one), next to a bandwidth probe a += s*b over buffers far larger than the caches, with
 * the same threads. Bytes are counted as STREAM counts them (each float read or written once).
 * Every round runs each pass once, in turn (medians over the rounds after warm-up), so that on a shared
 * machine all of them see the same moments. Run it as the trainer runs (OMP_WAIT_POLICY=passive).
 * Prints a table and one JSON line.
 * usage: bench_hybrid depth [reps=15]
 */
#define TESTING
#include "../train_gpt2.c"

#define MAX_REPS 64
#define WARMUP 3
#define NPASS 8

static double median(double* x, int n) {  // insertion sort: n is small
    for (int i = 1; i < n; i++) {
        for (int j = i; j > 0 && x[j - 1] > x[j]; j--) { double t = x[j]; x[j] = x[j - 1]; x[j - 1] = t; }
    }
    return x[n / 2];
}

// the bandwidth probe: a += s*b, the shape of a Predict step (read one stream, read-write another; a
// write-only stream would also pay a read for ownership that the count below does not see)
static void axpy(float* a, const float* b, size_t n, float s) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) { a[i] = a[i] + s * b[i]; }
}

static void fill(float* x, size_t n, float scale, uint64_t seed) {
    uint64_t rng = seed;
    for (size_t i = 0; i < n; i++) { x[i] = scale * (hmath_f32(&rng) - 0.5f); }
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s depth [reps=15]\n", argv[0]);
        return 1;
    }
    int depth = atoi(argv[1]);
    int reps = argc > 2 ? atoi(argv[2]) : 15;
    if (depth <= 0 || depth > 48 || reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "error: bad arguments (need 1 <= depth <= 48, 1 <= reps <= %d)\n", MAX_REPS);
        return 1;
    }
    GPT2 model;
    gpt2_build_from_random(&model, depth, 50257, 1337);
    gpt2_allocate(&model, 1, 64);
    const size_t P = model.num_parameters;
    fill(model.grads_memory, P, 0.02f, 1);
    fill(model.m_memory, P, 0.002f, 2);
    fill(model.v_memory, P, 0.0f, 3);
    for (size_t i = 0; i < P; i++) { model.v_memory[i] = 1e-6f * (1.0f + (float)(i % 7)); }
    int L = model.config.num_layers, nb = 12 * L + 4;
    size_t* offsets = (size_t*)mallocCheck((size_t)(nb + 1) * sizeof(size_t));
    float* wd = (float*)mallocCheck((size_t)nb * sizeof(float));
    gpt2_param_blocks(&model.config, offsets, wd, 0.1f);
    float* direction = (float*)mallocCheck(P * sizeof(float));
    float* keep = (float*)mallocCheck(P * sizeof(float));
    fill(direction, P, 1e-3f, 4);
    HybridConfig hc[2];
    HybridState h[2];
    for (int k = 0; k < 2; k++) {
        hybrid_config_default(&hc[k]);
        hc[k].enabled = 1;
        hc[k].direction = k == 0 ? DIRECTION_EMA : DIRECTION_ADAM;
        hybrid_init(&h[k], &hc[k], offsets, nb, 1000, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, 1); // the trainer's AdamW
        h[k].lr = 1e-3f;
        for (int b = 0; b < nb; b++) { h[k].coef[b] = 0.5f; }
    }
    // the probe over two buffers of >= 128 MiB each (far past any cache here), or the model's size
    size_t tn = P > ((size_t)32 << 20) ? P : ((size_t)32 << 20);
    float *ta = (float*)mallocCheck(tn * 4), *tb = (float*)mallocCheck(tn * 4);
    fill(ta, tn, 1.0f, 5); fill(tb, tn, 1e-3f, 6);

    // rounds of every pass in turn, so that all of them see the same moments of a shared machine
    ApplyDirection dirs[2];
    for (int k = 0; k < 2; k++) { dirs[k] = hybrid_direction(&h[k], direction, model.m_memory, model.v_memory); }
    double times[NPASS][MAX_REPS];
    int step = 10;
    for (int r = 0; r < WARMUP + reps; r++) {
        for (int pass = 0; pass < NPASS; pass++) {
            int k = pass % 2;  // ema, adam
            double t0 = omp_get_wtime();
            switch (pass) {
                case 0: axpy(ta, tb, tn, (r % 2) ? 1.0f : -1.0f); break;
                case 1: gpt2_update(&model, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, step++); break;
                case 2: case 3:
                    hybrid_update(&h[k], model.params_memory, model.grads_memory, model.m_memory, model.v_memory,
                                  direction, 1.0f, step++);
                    break;
                default:  // 4, 5: a run's first Predict step (writes the rollback copy); 6, 7: a later one
                    h[k].run_steps = pass < 6 ? 1 : 2;
                    hybrid_apply_predict(&h[k], model.params_memory, keep, &dirs[k]);
            }
            if (r >= WARMUP) { times[pass][r - WARMUP] = omp_get_wtime() - t0; }
        }
    }
    double t[NPASS];
    for (int pass = 0; pass < NPASS; pass++) { t[pass] = median(times[pass], reps); }
    double t_probe = t[0], t_plain = t[1], t_fused[2] = {t[2], t[3]};
    double t_pred_first[2] = {t[4], t[5]}, t_pred[2] = {t[6], t[7]};
    double bw = 3.0 * 4.0 * tn / t_probe / 1e9;  // GB/s
    // floats per parameter read + written by each pass
    struct { const char* name; double s; int floats; } rows[] = {
        {"AdamW, plain (gpt2_update)", t_plain, 7},
        {"AdamW + hybrid stats, ema", t_fused[0], 9},
        {"AdamW + hybrid stats, adam", t_fused[1], 7},
        {"Predict, ema, run's first step", t_pred_first[0], 4},
        {"Predict, ema, later step", t_pred[0], 3},
        {"Predict, adam, run's first step", t_pred_first[1], 5},
        {"Predict, adam, later step", t_pred[1], 4},
    };
    const char* core = openblas_get_corename();
    printf("d%d: %zu parameters in %d blocks, %d threads, OpenBLAS core %s; medians of %d after %d warm-up\n", depth, P,
           nb, omp_get_max_threads(), core, reps, WARMUP);
    printf("bandwidth probe a += s*b over 2 x %.0f MiB: %.2f ms, %.2f GB/s\n", tn * 4.0 / (1 << 20), t_probe * 1e3, bw);
    printf("(the model's buffers are %.0f MiB each: where they fit in the last-level cache, a pass can beat the probe)\n\n",
           P * 4.0 / (1 << 20));
    printf("| pass (d%d) | ms | MB moved | GB/s | %% of probe bandwidth |\n|---|---|---|---|---|\n", depth);
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        double bytes = 4.0 * rows[r].floats * P;
        printf("| %s | %.2f | %.0f | %.2f | %.0f%% |\n", rows[r].name, rows[r].s * 1e3, bytes / 1e6,
               bytes / rows[r].s / 1e9, 100.0 * bytes / rows[r].s / 1e9 / bw);
    }
    printf("{\"depth\": %d, \"params\": %zu, \"threads\": %d, \"blas_core\": \"%s\", \"probe_gbs\": %.3f, "
           "\"adamw_ms\": %.4f, \"fused_ema_ms\": %.4f, \"fused_adam_ms\": %.4f, \"predict_ema_first_ms\": %.4f, "
           "\"predict_ema_ms\": %.4f, \"predict_adam_first_ms\": %.4f, \"predict_adam_ms\": %.4f}\n",
           depth, P, omp_get_max_threads(), core, bw, t_plain * 1e3, t_fused[0] * 1e3, t_fused[1] * 1e3,
           t_pred_first[0] * 1e3, t_pred[0] * 1e3, t_pred_first[1] * 1e3, t_pred[1] * 1e3);
    for (int k = 0; k < 2; k++) { hybrid_free(&h[k]); }
    free(offsets); free(wd); free(direction); free(keep); free(ta); free(tb);
    gpt2_free(&model);
    return 0;
}
