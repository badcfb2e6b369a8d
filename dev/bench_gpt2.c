/*
 * dev/bench_gpt2.c — speed of full training steps of train_gpt2.c (forward, backward, grad norm, AdamW),
 * as `make bench` measures it: a random-init dN model (GPT-2 vocab), random tokens, the median step time
 * over the steps after `warmup`. tok/s = B*T / median; MFU against the SGEMM peak passed in (GFLOP/s),
 * with FLOPs per token = 6*N + 6*L*C*T (llm.c's accounting). Also the mean time per step of each kind of
 * work (llmc/cpu_profile.h; "other" is the rest of the step), the process CPU time per step (cpu_ms; with
 * a sleeping wait policy, cpu_ms / (threads * mean_ms) is how busy the threads were), the BLAS and its core,
 * the ISA of oneDNN's bf16 products, the wait policy, and each phase's floor: the bytes it must move and the
 * FLOPs it must do (phase_floors), which scripts/bench.py sets against the bandwidth and peaks it measures.
 * precision bf16: the linear layers' matmuls in bf16 through oneDNN (train_gpt2 --precision bf16); the peak
 * passed in is then the bf16 matmul peak (bench_sgemm ... bf16).
 * Prints one JSON line.
 * usage: bench_gpt2 depth B T [steps=8] [warmup=2] [peak_gflops=0] [precision=fp32|bf16]
 */
#define TESTING
#include "../train_gpt2.c"

// CPU time of the whole process (all threads)
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// The floor of each phase of a step: what it must move and compute at the least, for the step as the trainer
// defines it: its tensors in the types it keeps them in (activations, gradients and AdamW's state in fp32; the
// products' weights in bf16 under --precision bf16, with the lm head's dlogits), each input read once and each
// output written once (an accumulation, +=, read and written); the copies made on the way (bf16 scratch,
// packed weights, the fp32 attention's zeros above the diagonal) count for nothing. FLOPs: the products' only
// (the attention's over the causal triangle); exps and the elementwise arithmetic are not counted, so a
// phase whose time is set by them shows it in its ratio. The floor in seconds is max(bytes / bandwidth,
// flops / peak), taken by scripts/bench.py with the bandwidth and peaks of the same run.
typedef struct { double bytes, flops; } PhaseFloor;

// a linear layer (N rows, C in, OC out, + residual or not): forward and backward
static void linear_floor(PhaseFloor* f, double N, double C, double OC, int residual, double wb) {
    f->bytes += 4 * N * C + wb * OC * C + 4 * OC + (residual ? 4 * N * OC : 0) + 4 * N * OC;  // in, W, b, res -> out
    f->bytes += 4 * N * OC + 4 * N * C + wb * OC * C + 4 * N * C + 8 * OC * C + 8 * OC;     // dout, in, W -> dinp, dW+=, db+=
    f->flops += 6 * N * C * OC;
}

// floors[PROF_PHASES] is "other": what the step does outside the timed phases (the gradients zeroed, the
// backward's dresidual cleared)
static void phase_floors(PhaseFloor floors[PROF_PHASES + 1], const GPT2Config* c, size_t P, int B, int T, int bf16_on) {
    double N = (double)B * T, C = c->channels, L = c->num_layers, V = c->vocab_size, Vp = c->padded_vocab_size;
    double tri = (double)T * (T + 1) / 2, heads = (double)B * c->num_heads, wb = bf16_on ? 2 : 4;
    memset(floors, 0, (PROF_PHASES + 1) * sizeof(PhaseFloor));
    PhaseFloor* f = &floors[PROF_GEMM];
    for (int l = 0; l < L; l++) {
        linear_floor(f, N, C, 3 * C, 0, wb);      // qkv
        linear_floor(f, N, C, C, 1, wb);          // attention projection, + residual
        linear_floor(f, N, C, 4 * C, 0, wb);      // fc
        linear_floor(f, N, 4 * C, C, 1, wb);      // fc projection, + residual
    }
    // lm head (wte, no bias): lnf -> logits; dlogits (bf16 under --precision bf16), lnf, wte -> dlnf, dwte +=
    f->bytes += 4 * N * C + wb * Vp * C + 4 * N * Vp;
    f->bytes += (bf16_on ? 2 : 4) * N * Vp + 4 * N * C + wb * Vp * C + 4 * N * C + 8 * Vp * C;
    f->flops += 6 * N * C * Vp;
    // attention: qkv -> out and the probabilities (the triangle); dout, qkv, probabilities -> dqkv; six products
    floors[PROF_ATTENTION].bytes = L * ((4 * N * 3 * C + 4 * N * C + 4 * heads * tri)
                                        + (4 * N * C + 4 * N * 3 * C + 4 * heads * tri + 4 * N * 3 * C));
    floors[PROF_ATTENTION].flops = L * 6 * 2 * heads * (C / c->num_heads) * tri;
    // 2L + 1 layernorms: x -> out, mean, rstd; dout, x, mean, rstd, w -> dx +=, dw +=, db +=
    floors[PROF_LAYERNORM].bytes = (2 * L + 1) * ((4 * N * C + 8 * C + 4 * N * C + 8 * N)
                                                  + (4 * N * C + 4 * N * C + 8 * N + 4 * C + 8 * N * C + 16 * C));
    // GELU over (N, 4C): in -> out; in, dout -> din (in place)
    floors[PROF_GELU].bytes = L * (2 * 16 * N * C + 3 * 16 * N * C);
    // cross-entropy: the V real logits and the targets -> losses, lse, dlogits (N, Vp)
    floors[PROF_CROSSENTROPY].bytes = 4 * N * V + 4 * N + 8 * N + (bf16_on ? 2 : 4) * N * Vp;
    // encoder: ids, wte rows, wpe rows -> encoded; dout -> dwte rows +=, dwpe rows +=
    floors[PROF_ENCODER].bytes = (4 * N + 4 * N * C + 4 * T * C + 4 * N * C) + (4 * N * C + 8 * N * C + 8 * T * C);
    floors[PROF_GRAD_NORM].bytes = 4.0 * P;
    // AdamW: params, grads, m, v -> params, m, v (and the bf16 copy)
    floors[PROF_ADAMW].bytes = 16.0 * P + 12.0 * P + (bf16_on ? 2.0 * P : 0);
    floors[PROF_PHASES].bytes = 4.0 * P + 4 * N * C;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

int main(int argc, char** argv) {
    cpu_blas_init(argc, argv);  // the OpenBLAS kernel and the OpenMP wait policy (may re-execute once)
    if (argc < 4) {
        fprintf(stderr, "usage: %s depth B T [steps=8] [warmup=2] [peak_gflops=0] [precision=fp32|bf16]\n", argv[0]);
        return 1;
    }
    int depth = atoi(argv[1]), B = atoi(argv[2]), T = atoi(argv[3]);
    int steps = argc > 4 ? atoi(argv[4]) : 8;
    int warmup = argc > 5 ? atoi(argv[5]) : 2;
    double peak = argc > 6 ? atof(argv[6]) : 0.0;
    const char* precision = argc > 7 ? argv[7] : "fp32";
    if (strcmp(precision, "fp32") != 0 && strcmp(precision, "bf16") != 0) {
        fprintf(stderr, "error: precision must be fp32 or bf16, got '%s'\n", precision);
        return 1;
    }
    if (depth <= 0 || B <= 0 || T <= 0 || T > 1024 || steps <= warmup || warmup < 0) {
        fprintf(stderr, "error: bad arguments (need depth, B > 0, 0 < T <= 1024, steps > warmup >= 0)\n");
        return 1;
    }
    GPT2 model;
    gpt2_build_from_random(&model, depth, 50257, 1337);
    gpt2_allocate(&model, B, T);
    gpt2_set_precision(&model, strcmp(precision, "bf16") == 0);
    int V = model.config.vocab_size;
    int* x = (int*)mallocCheck((size_t)(B * T + 1) * sizeof(int));
    uint64_t rng = 42;
    double* ms = (double*)mallocCheck(steps * sizeof(double));
    cpu_profile_enabled = 1;
    double cpu0 = cpu_s();
    for (int s = 0; s < steps; s++) {
        if (s == warmup) { memset(cpu_profile_seconds, 0, sizeof(cpu_profile_seconds)); cpu0 = cpu_s(); }
        for (int i = 0; i <= B * T; i++) { x[i] = (int)(random_u32(&rng) % (uint32_t)V); }
        double t0 = clock_seconds();
        gpt2_zero_grad(&model);
        gpt2_forward_train(&model, x, x + 1, B, T, 1.0f);  // as the trainer's step: dlogits made in the forward
        gpt2_backward(&model, x, x + 1, 1.0f);
        float norm;
        PROF(PROF_GRAD_NORM, norm = gpt2_grad_norm(&model));
        PROF(PROF_ADAMW, gpt2_update(&model, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, norm > 1.0f ? 1.0f / norm : 1.0f, s + 1));
        ms[s] = (clock_seconds() - t0) * 1000.0;
    }
    int n = steps - warmup;
    double cpu_ms = (cpu_s() - cpu0) * 1000.0 / n;  // per step; / (threads * mean_ms): how busy the threads were
    double mean_ms = 0.0;
    for (int s = warmup; s < steps; s++) { mean_ms += ms[s] / n; }
    qsort(ms + warmup, n, sizeof(double), cmp_double);
    double med = n % 2 ? ms[warmup + n / 2] : 0.5 * (ms[warmup + n / 2 - 1] + ms[warmup + n / 2]);
    const GPT2Config* c = &model.config;
    double flops_tok = 6.0 * model.num_parameters + 6.0 * c->num_layers * c->channels * T;
    double tok_s = B * T / (med / 1000.0);
    double mfu = peak > 0 ? 100.0 * tok_s * flops_tok / (peak * 1e9) : 0.0;
    printf("{\"precision\": \"%s\", \"depth\": %d, \"B\": %d, \"T\": %d, \"steps\": %d, \"median_ms\": %.3f, \"tok_s\": %.2f, "
           "\"flops_per_token\": %.0f, \"mfu_pct\": %.2f, \"loss\": %.6f, \"blas\": \"%s\", \"bf16_isa\": \"%s\", "
           "\"wait_policy\": \"%s\", \"spincount\": \"%s\", \"mean_ms\": %.3f, \"cpu_ms\": %.3f, \"threads\": %d, \"phases_ms\": {",
           precision, depth, B, T, steps, med, tok_s, flops_tok, mfu, model.mean_loss, cpu_blas_describe(), dnnl_isa_name(),
           getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "", getenv("GOMP_SPINCOUNT") ? getenv("GOMP_SPINCOUNT") : "",
           mean_ms, cpu_ms, omp_get_max_threads());
    double accounted = 0.0;
    for (int k = 0; k < PROF_PHASES; k++) {
        accounted += cpu_profile_seconds[k] * 1000.0 / n;
        printf("\"%s\": %.3f, ", PROF_NAMES[k], cpu_profile_seconds[k] * 1000.0 / n);
    }
    printf("\"other\": %.3f}, \"floor\": {", mean_ms - accounted);
    PhaseFloor floors[PROF_PHASES + 1];
    phase_floors(floors, c, model.num_parameters, B, T, strcmp(precision, "bf16") == 0);
    for (int k = 0; k <= PROF_PHASES; k++) {
        printf("\"%s\": {\"bytes\": %.0f, \"flops\": %.0f}%s", k < PROF_PHASES ? PROF_NAMES[k] : "other",
               floors[k].bytes, floors[k].flops, k < PROF_PHASES ? ", " : "}}\n");
    }
    free(ms); free(x);
    gpt2_free(&model);
    return 0;
}
