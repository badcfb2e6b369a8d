/*
 * dev/bench_hybrid.c — the per-element passes of hybrid mode against the memory bandwidth, as `make bench`
 * measures them: on a random-init dN model (GPT-2 vocab), the median time of the plain AdamW update
 * (gpt2_update), the same update fused with hybrid mode's drift and look-ahead (hybrid_update, what every
 * measured step of hybrid mode runs instead), a Predict step (apply_predict: a run's first step, which also
 * keeps theta_0 for the rollback, and a later one) and a rollback (apply_rollback), the two AdamW passes again
 * folding the trainer's EMA of the weights (--ema: the look-ahead keeping it meets the baseline keeping it),
 * GPA's and Linefit's measured steps, next to a bandwidth
 * probe a += s*b over buffers far larger than the caches, with the same threads. Bytes are counted as
 * STREAM counts them (each float read or written once).
 * Every round runs each pass once, in turn (medians over the rounds after warm-up), so that on a shared
 * machine all of them see the same moments. Run it as the trainer runs (OMP_WAIT_POLICY=passive).
 * Prints a table, the update passes under PASS_FLOOR of plain AdamW's GB/s, and one JSON line.
 * usage: bench_hybrid depth [reps=15] [vocab=50257] [bf16=0]
 * (vocab 1024 is the hybrid study's model; bf16 1: the passes also round the bf16 weight copy, as a bf16
 * run's do)
 */
#define TESTING
#include "../train_gpt2.c"

#define MAX_REPS 64
#define WARMUP 3
#define NPASS 10
#define PASS_FLOOR 0.7  // an update pass under this share of plain AdamW's GB/s is named below the table

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
    for (size_t i = 0; i < n; i++) { x[i] = scale * (random_f32(&rng) - 0.5f); }
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s depth [reps=15] [vocab=50257] [bf16=0]\n", argv[0]);
        return 1;
    }
    int depth = atoi(argv[1]);
    int reps = argc > 2 ? atoi(argv[2]) : 15;
    int vocab = argc > 3 ? atoi(argv[3]) : 50257;
    int bf16_on = argc > 4 ? atoi(argv[4]) : 0;
    if (depth <= 0 || depth > 48 || reps < 1 || reps > MAX_REPS || vocab < 2 || vocab > 1000000 ||
        (bf16_on != 0 && bf16_on != 1)) {
        fprintf(stderr, "error: bad arguments (need 1 <= depth <= 48, 1 <= reps <= %d, 2 <= vocab <= 1000000, "
                        "bf16 0 or 1)\n", MAX_REPS);
        return 1;
    }
    GPT2 model;
    gpt2_build_from_random(&model, depth, vocab, 1337);
    gpt2_allocate(&model, 1, 64);
    gpt2_set_precision(&model, bf16_on);
    const size_t P = model.num_parameters;
    fill(model.grads_memory, P, 0.02f, 1);
    fill(model.m_memory, P, 0.002f, 2);
    fill(model.v_memory, P, 0.0f, 3);
    for (size_t i = 0; i < P; i++) { model.v_memory[i] = 1e-6f * (1.0f + (float)(i % 7)); }
    int L = model.config.num_layers, nb = 12 * L + 4;
    size_t* offsets = (size_t*)mallocCheck((size_t)(nb + 1) * sizeof(size_t));
    float* wd = (float*)mallocCheck((size_t)nb * sizeof(float));
    gpt2_param_blocks(&model.config, offsets, wd, 0.1f);
    float* drift = (float*)mallocCheck(P * sizeof(float));
    float* keep = (float*)mallocCheck(P * sizeof(float));
    fill(drift, P, 1e-3f, 4);
    // hybrid mode as the trainer runs it (the look-ahead on, Predict runs of 2 steps), with a look-ahead in
    // every block: the fused pass does the same work whatever the betas, non-zero ones keep it honest
    HybridConfig hc;
    hybrid_config_default(&hc);
    hc.enabled = 1;
    hc.lookahead = 0.5f;
    hc.predict_steps = 2;
    HybridState h;
    hybrid_init(&h, &hc, offsets, nb, 1000, 1024.0, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, NULL, 0); // the trainer's AdamW
    hybrid_use_buffers(&h, &drift);
    h.lr = 1e-3f;
    if (bf16_on) { hybrid_set_bf16_copy(&h, model.params_bf16); }
    float* coef = (float*)mallocCheck((size_t)nb * sizeof(float));
    Drift* dr = hybrid_drift(&h);
    for (int b = 0; b < nb; b++) { dr->la.beta_prev[b] = 0.25f; dr->la.beta_next[b] = 0.25f; coef[b] = 0.5f; }
    // the other methods' measured steps: GPA (its average x read and written) and Linefit on a step that
    // records a state (its two sums read and written)
    HybridState hg, hl;
    gpa_flags = GPA_CONFIG_DEFAULT;
    linefit_flags = LINEFIT_CONFIG_DEFAULT;
    linefit_flags.spacing = 2;  // step 1 records
    hc.lookahead = 0.0f; hc.predict_steps = 0;
    for (int k = 0; k < NUM_HYBRID_METHODS; k++) {
        if (strcmp(HYBRID_METHODS[k]->name, "gpa") == 0) { hc.enabled = k + 2; hybrid_init(&hg, &hc, offsets, nb, 1000, 1024.0, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, model.params_memory, 1); }
        if (strcmp(HYBRID_METHODS[k]->name, "linefit") == 0) { hc.enabled = k + 2; hybrid_init(&hl, &hc, offsets, nb, 1000, 1024.0, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, NULL, 1); }
    }
    if (bf16_on) { hybrid_set_bf16_copy(&hg, model.params_bf16); hybrid_set_bf16_copy(&hl, model.params_bf16); }
    // the trainer's EMA of the weights (--ema 0.95), folded by gpt2_update and by the look-ahead's pass
    WeightAverage avg;
    average_init_ema(&avg, model.params_memory, P, 0.95f);
    // the probe over two buffers of >= 128 MiB each (far past any cache here), or the model's size
    size_t tn = P > ((size_t)32 << 20) ? P : ((size_t)32 << 20);
    float *ta = (float*)mallocCheck(tn * 4), *tb = (float*)mallocCheck(tn * 4);
    fill(ta, tn, 1.0f, 5); fill(tb, tn, 1e-3f, 6);

    // rounds of every pass in turn, so that all of them see the same moments of a shared machine
    double times[NPASS][MAX_REPS];
    int step = 10;
    for (int r = 0; r < WARMUP + reps; r++) {
        for (int pass = 0; pass < NPASS; pass++) {
            double t0 = omp_get_wtime();
            switch (pass) {
                case 0: axpy(ta, tb, tn, (r % 2) ? 1.0f : -1.0f); break;
                case 1: gpt2_update(&model, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, step++); break;
                case 2:  // a measured step: AdamW fused with the drift and the look-ahead
                    hybrid_update(&h, model.params_memory, model.grads_memory, model.m_memory, model.v_memory, 1.0f, step++);
                    break;
                case 6:  // GPA's measured step
                    hybrid_plan(&hg, 1, 1e-3f);
                    hybrid_update(&hg, model.params_memory, model.grads_memory, model.m_memory, model.v_memory, 1.0f, step++);
                    break;
                case 7:  // Linefit's measured step that records a state
                    hybrid_plan(&hl, 1, 1e-3f);
                    hybrid_update(&hl, model.params_memory, model.grads_memory, model.m_memory, model.v_memory, 1.0f, step++);
                    break;
                case 3:  // a run's first Predict step: also writes theta_0 to the keep buffer
                case 4:  // a later one
                    apply_predict(model.params_memory, keep, drift, h.offsets, nb, coef, pass == 3);
                    break;
                case 5: // the rollback of a run: theta_0 back from the keep buffer
                    apply_rollback(model.params_memory, keep, P);
                    break;
                case 8:  // the baseline keeping an EMA (--ema)
                    model.average = &avg;
                    gpt2_update(&model, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, step++);
                    model.average = NULL;
                    break;
                case 9:  // the look-ahead keeping the same EMA, folded into its fused pass
                    hybrid_set_ema(&h, avg.weights, 0.95f);
                    hybrid_update(&h, model.params_memory, model.grads_memory, model.m_memory, model.v_memory, 1.0f, step++);
                    hybrid_set_ema(&h, NULL, 0.0f);
                    break;
            }
            if (r >= WARMUP) { times[pass][r - WARMUP] = omp_get_wtime() - t0; }
        }
    }
    double t[NPASS];
    for (int pass = 0; pass < NPASS; pass++) { t[pass] = median(times[pass], reps); }
    double t_probe = t[0], t_plain = t[1], t_fused = t[2], t_pred_first = t[3], t_pred = t[4], t_rollback = t[5];
    double t_gpa = t[6], t_linefit = t[7], t_plain_ema = t[8], t_fused_ema = t[9];
    double bw = 3.0 * 4.0 * tn / t_probe / 1e9;  // GB/s
    // floats per parameter read + written by each pass (the AdamW passes also write the gradients, zeroed;
    // the bf16 copy not counted)
    struct { const char* name; double s; int floats; } rows[] = {
        {"AdamW, plain (gpt2_update)", t_plain, 8},
        {"AdamW + drift + look-ahead (hybrid_update)", t_fused, 10},
        {"Predict, run's first step", t_pred_first, 4},
        {"Predict, later step", t_pred, 3},
        {"Rollback (apply_rollback)", t_rollback, 2},
        {"AdamW + GPA's average (--hybrid gpa)", t_gpa, 10},
        {"AdamW + Linefit's sums, a recording step (--hybrid linefit)", t_linefit, 12},
        {"AdamW + EMA (gpt2_update, --ema)", t_plain_ema, 10},
        {"AdamW + drift + look-ahead + EMA (hybrid_update, --ema)", t_fused_ema, 12},
    };
    const char* core = openblas_get_corename();
    printf("d%d: %zu parameters in %d blocks, %d threads, OpenBLAS core %s; medians of %d after %d warm-up\n", depth, P,
           nb, omp_get_max_threads(), core, reps, WARMUP);
    printf("bandwidth probe a += s*b over 2 x %.0f MiB: %.2f ms, %.2f GB/s\n", tn * 4.0 / (1 << 20), t_probe * 1e3, bw);
    printf("(the model's buffers are %.0f MiB each: where they fit in the last-level cache, a pass can beat the probe)\n\n",
           P * 4.0 / (1 << 20));
    printf("| pass (d%d) | ms | MB moved | GB/s | %% of probe bandwidth |\n|---|---|---|---|---|\n", depth);
    const size_t nrows = sizeof(rows) / sizeof(rows[0]);
    double gbs[sizeof(rows) / sizeof(rows[0])];
    for (size_t r = 0; r < nrows; r++) {
        double bytes = 4.0 * rows[r].floats * P;
        gbs[r] = bytes / rows[r].s / 1e9;
        printf("| %s | %.2f | %.0f | %.2f | %.0f%% |\n", rows[r].name, rows[r].s * 1e3, bytes / 1e6, gbs[r],
               100.0 * gbs[r] / bw);
    }
    // every update pass reads and writes each of its arrays as plain AdamW does (the copies write arrays they do
    // not read, which costs them unlisted traffic): one far below AdamW's GB/s has a loop left scalar, by a
    // branch or a call inside it
    printf("\nupdate passes under %.0f%% of plain AdamW's GB/s (a loop left scalar):", 100.0 * PASS_FLOOR);
    int slow = 0;
    for (size_t r = 1; r < nrows; r++) {
        if (strncmp(rows[r].name, "AdamW", 5) != 0) { continue; }
        if (gbs[r] < PASS_FLOOR * gbs[0]) { printf("%s %s (%.0f%%)", slow++ ? "," : "", rows[r].name, 100.0 * gbs[r] / gbs[0]); }
    }
    printf("%s\n", slow ? "" : " none");
    printf("{\"depth\": %d, \"params\": %zu, \"threads\": %d, \"blas_core\": \"%s\", \"probe_gbs\": %.3f, "
           "\"adamw_ms\": %.4f, \"fused_ms\": %.4f, \"predict_first_ms\": %.4f, \"predict_ms\": %.4f, "
           "\"rollback_ms\": %.4f, \"gpa_ms\": %.4f, \"linefit_ms\": %.4f, \"adamw_ema_ms\": %.4f, \"fused_ema_ms\": %.4f}\n",
           depth, P, omp_get_max_threads(), core, bw, t_plain * 1e3, t_fused * 1e3, t_pred_first * 1e3, t_pred * 1e3,
           t_rollback * 1e3, t_gpa * 1e3, t_linefit * 1e3, t_plain_ema * 1e3, t_fused_ema * 1e3);
    hybrid_free(&h); hybrid_free(&hg); hybrid_free(&hl);
    average_free(&avg);
    free(offsets); free(wd); free(drift); free(keep); free(coef); free(ta); free(tb);
    gpt2_free(&model);
    return 0;
}
