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
 * passed in is then the bf16 matmul peak (bench_sgemm ... bf16). bf16 also probes that peak itself right
 * before the first timed step and after each one (2048^3, as the products mode below), and sets each timed
 * step against the better of the probes beside it: step_mfu_pct, the median over the timed steps. On a
 * machine whose peak moves from second to second (a VM beside other tenants) that pairs each step with its
 * own seconds, where the peak passed in was measured before the whole run.
 * Prints one JSON line.
 * usage: bench_gpt2 depth B T [steps=8] [warmup=2] [peak_gflops=0] [precision=fp32|bf16]
 *
 * products mode (bf16): what the gemm and attention phases are made of, shape by shape. For each linear layer
 * of a step (at depth 0; the lm head) its three products alone (forward, dinp, dweight with the packing of
 * its right operand, each as the trainer chunks it) and its two layer calls whole (matmul_forward_bf16 and
 * matmul_backward_bf16: the products on the input kept in bf16, with the bias, residual, dout's rounding and
 * the bias gradient); then the attention's six products alone and its two calls whole (the softmax, its backward
 * and the layout conversions with them). Each row: best of `reps` after one warm-up, in GFLOP/s of the
 * products' FLOPs as run (the attention's whole (T, T) squares), and as a share of the bf16 peak measured
 * right before and right after that row (the better of the two; 2048^3 products, as bench_sgemm bf16): on
 * a machine whose peak moves from minute to minute each row is still set against its own seconds.
 * Prints one table (markdown).
 * usage: bench_gpt2 products depth B T [reps=5] [only: the rows whose name contains it]
 */
#define TESTING
#include "../train_gpt2.c"
#include "bf16_peak.h"

// CPU time of the whole process (all threads)
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// The floor of each phase of a step: what it must move and compute at the least, for the step as the trainer
// defines it: its tensors in the types it keeps them in (activations, gradients and AdamW's state in fp32;
// under --precision bf16 the products' weights in bf16, and the activations the products read: the linear
// layers' inputs, the attention's q, k, v and probabilities, the lm head's logits and dlogits), each input read once
// and each output written once (an accumulation, +=, read and written); the copies made on the way (bf16 scratch,
// packed weights, the fp32 attention's zeros above the diagonal) count for nothing. FLOPs: the products' only
// (the attention's over the causal triangle); exps and the elementwise arithmetic are not counted, so a
// phase whose time is set by them shows it in its ratio. The floor in seconds is max(bytes / bandwidth,
// flops / peak), taken by scripts/bench.py with the bandwidth and peaks of the same run.
typedef struct { double bytes, flops; } PhaseFloor;

// a linear layer (N rows, C in, OC out, + residual or not): forward and backward; wb: the bytes of a weight
// and of an input as the products read them; ob: of an output element written, db: of a dout element read
static void linear_floor(PhaseFloor* f, double N, double C, double OC, int residual, double wb, double ob, double db) {
    f->bytes += wb * N * C + wb * OC * C + 4 * OC + (residual ? 4 * N * OC : 0) + ob * N * OC;  // in, W, b, res -> out
    f->bytes += db * N * OC + wb * N * C + wb * OC * C + 4 * N * C + 8 * OC * C + 8 * OC;     // dout, in, W -> dinp, dW+=, db+=
    f->flops += 6 * N * C * OC;
}

// floors[PROF_PHASES] is "other": what the step does outside the timed phases (the backward's dresidual
// cleared)
static void phase_floors(PhaseFloor floors[PROF_PHASES + 1], const GPT2Config* c, size_t P, int B, int T, int bf16_on) {
    double N = (double)B * T, C = c->channels, L = c->num_layers, V = c->vocab_size, Vp = c->padded_vocab_size;
    double tri = (double)T * (T + 1) / 2, heads = (double)B * c->num_heads, wb = bf16_on ? 2 : 4;
    memset(floors, 0, (PROF_PHASES + 1) * sizeof(PhaseFloor));
    PhaseFloor* f = &floors[PROF_GEMM];
    for (int l = 0; l < L; l++) {
        linear_floor(f, N, C, 3 * C, 0, wb, wb, wb); // qkv (in bf16 its output, and its dout, in bf16)
        linear_floor(f, N, C, C, 1, wb, 4, 4);       // attention projection, + residual
        linear_floor(f, N, C, 4 * C, 0, wb, 4, wb);  // fc (in bf16 its dout comes in bf16 from the GELU)
        linear_floor(f, N, 4 * C, C, 1, wb, 4, 4);   // fc projection, + residual
    }
    // lm head (wte, no bias): lnf -> logits; dlogits, lnf, wte -> dlnf, dwte += (logits and dlogits in bf16
    // under --precision bf16)
    f->bytes += wb * N * C + wb * Vp * C + wb * N * Vp;
    f->bytes += wb * N * Vp + wb * N * C + wb * Vp * C + 4 * N * C + 8 * Vp * C;
    f->flops += 6 * N * C * Vp;
    // attention: qkv (bf16 under --precision bf16) -> out and the probabilities (the triangle), and under
    // --precision bf16 q, k, v kept with them; dout, q, k, v, probabilities -> dqkv (bf16 under --precision
    // bf16, with the qkv bias gradient); six products
    floors[PROF_ATTENTION].bytes = L * ((wb * N * 3 * C + wb * N * C + wb * heads * tri + (bf16_on ? 2 * N * 3 * C : 0))
                                        + (4 * N * C + wb * N * 3 * C + wb * heads * tri + wb * N * 3 * C));
    floors[PROF_ATTENTION].flops = L * 6 * 2 * heads * (C / c->num_heads) * tri;
    // 2L + 1 layernorms: x -> out, mean, rstd; dout, x, mean, rstd, w -> dx +=, dw +=, db +=
    floors[PROF_LAYERNORM].bytes = (2 * L + 1) * ((4 * N * C + 8 * C + wb * N * C + 8 * N)
                                                  + (4 * N * C + 4 * N * C + 8 * N + 4 * C + 8 * N * C + 16 * C));
    // GELU over (N, 4C): in -> out; in, dout -> din (in place; under --precision bf16 in bf16, the fc
    // backward's operand, with its bias gradient)
    floors[PROF_GELU].bytes = L * (16 * N * C + wb * 4 * N * C + 2 * 16 * N * C + wb * 4 * N * C);
    // cross-entropy: the V real logits and the targets -> losses, lse, dlogits (N, Vp)
    floors[PROF_CROSSENTROPY].bytes = wb * N * V + 4 * N + 8 * N + wb * N * Vp;
    // encoder: ids, wte rows, wpe rows -> encoded; dout -> dwte rows +=, dwpe rows +=
    floors[PROF_ENCODER].bytes = (4 * N + 4 * N * C + 4 * T * C + 4 * N * C) + (4 * N * C + 8 * N * C + 8 * T * C);
    floors[PROF_GRAD_NORM].bytes = 4.0 * P;
    // AdamW: params, grads, m, v -> params, m, v, the gradients zeroed (and the bf16 copy)
    floors[PROF_ADAMW].bytes = 16.0 * P + 16.0 * P + (bf16_on ? 2.0 * P : 0);
    floors[PROF_PHASES].bytes = 4 * N * C;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

// ---- products mode

// the bf16 peak as bench_sgemm bf16 measures it (dev/bf16_peak.h: 2048^3, the better of B plain and B packed,
// best of 3 after a warm-up each), in GFLOP/s; made on the first call
static double peak_probe(Bf16Peak* p) {
    if (p->a == NULL) { bf16_peak_init(p, 2048); }
    double gflops[2];
    return bf16_peak_measure(p, 3, gflops, NULL);
}

// one kind of work of the step, run by run_item(which, ctx)
typedef struct {
    GPT2* model;
    int which;          // a LIN_* or BF16_ATTENTION
    int part;           // PART_*
    int N, C, OC, B, T;
    float *out, *inp, *dout, *dinp, *dweight, *dbias, *bias, *residual;
    bf16* in16;         // a linear layer's input as its producer keeps it, in bf16
} Item;
enum { PART_FWD, PART_DINP, PART_DWEIGHT, PART_FWD_CALL, PART_BWD_CALL, PART_ATT_FWD, PART_ATT_BWD,
       PART_ATT_FWD_CALL, PART_ATT_BWD_CALL };

static void run_item(Item* it) {
    GPT2* m = it->model;
    if (it->which == BF16_ATTENTION) {  // on layer 0's q, k, v and probabilities, kept by the forward
        Bf16Attention* ba = &m->att16;
        int NH = m->config.num_heads, G = ba->group;
        size_t psz = (size_t)it->B * it->T * it->C;
        bf16* qkv16 = (bf16*)m->acts.qkv;
        bf16* att16 = (bf16*)m->acts.att;
        for (int b0 = 0; b0 < it->B && it->part <= PART_ATT_BWD; b0 += G) {
            const bf16* q = qkv16 + (size_t)b0 * it->T * it->C;
            const bf16* a16 = att16 + (size_t)b0 * NH * it->T * it->T;
            const bf16* d = m->bf16_a + (size_t)b0 * it->T * it->C;
            if (it->part == PART_ATT_FWD) {
                dnnl_gemm_run(&ba->prim[ATT_SCORES], q, q + psz, ba->s32);
                dnnl_gemm_run(&ba->prim[ATT_AV], a16, q + 2 * psz, ba->h32);
            } else {
                dnnl_gemm_run(&ba->prim[ATT_DV], a16, d, ba->h32);
                dnnl_gemm_run(&ba->prim[ATT_DATT], d, q + 2 * psz, ba->s32);
                dnnl_gemm_run(&ba->prim[ATT_DQ], ba->ds16, q + psz, ba->h32);
                dnnl_gemm_run(&ba->prim[ATT_DK], ba->ds16, q, ba->h32);
            }
        }
        if (it->part == PART_ATT_FWD_CALL) {
            attention_forward_bf16((bf16*)it->out, att16, qkv16, qkv16, ba, m->bf16_b, it->B, it->T, it->C, NH);
        } else if (it->part == PART_ATT_BWD_CALL) {
            attention_backward_bf16(NULL, m->bf16_b, m->grads.qkvb, it->dout, qkv16, att16, ba, m->bf16_a, it->B,
                                    it->T, it->C, NH);  // as the trainer: dqkv in bf16 with the qkv bias gradient
        }
        return;
    }
    Bf16Linear* lin = &m->lin[it->which];
    int N = it->N, C = it->C;
    int lm = it->which == LIN_LM;  // its forward writes bf16 logits; its dout: the dlogits, over the logits
    bf16 *a = lm ? (bf16*)m->acts.logits : m->bf16_a, *in16 = it->in16;
    switch (it->part) {
    case PART_FWD:
        for (int r0 = 0; r0 < N; r0 += lin->fwd_rows) {
            if (lm) {
                dnnl_gemm_run(&lin->fwd16, in16 + (size_t)r0 * C, bf16_linear_w_fwd16(lin, 0),
                              (bf16*)it->out + (size_t)r0 * it->OC);
            } else {
                dnnl_gemm_run_bias(&lin->fwd, in16 + (size_t)r0 * C, bf16_linear_w_fwd(lin, 0),
                                   (lin->fwd_form & DNNL_C_BIAS) ? it->bias : NULL, it->out + (size_t)r0 * it->OC);
            }
        }
        break;
    case PART_DINP:
        for (int c = 0; c < lin->nchunks; c++) {
            dnnl_gemm_run(bf16_chunk_dinp(lin, c), a + (size_t)c * lin->chunk, bf16_linear_w_dinp(lin, 0, c), it->dinp);
        }
        break;
    case PART_DWEIGHT: {
        void* packed[2] = {m->bf16_b_packed, (char*)m->bf16_b_packed + lin->act_bytes[0]};
        for (int k = 0; k < 2; k++) {
            if (lin->act_bytes[k] > 0) { dnnl_gemm_pack_b(&lin->dweight[k], in16, packed[k]); }
        }
        for (int c = 0; c < lin->nchunks; c++) {
            dnnl_gemm_run(&lin->dweight[bf16_chunk_kind(lin, c)], a + (size_t)c * lin->chunk,
                          packed[bf16_chunk_kind(lin, c)], it->dweight + (size_t)c * lin->chunk * C);
        }
        break;
    }
    case PART_FWD_CALL: {
        bf16* out16 = lm || (lin->fwd_form & DNNL_C_BF16) ? (bf16*)it->out : NULL;  // the logits, q k v in bf16
        matmul_forward_bf16(it->out, out16, in16, lin, 0, it->bias, it->residual, N, C, it->OC);
        break;
    }
    default:
        matmul_backward_bf16(it->dinp, it->dweight, it->dbias, lm ? NULL : it->dout, in16, lin, 0,
                             N, C, it->OC, a, m->bf16_b_packed);
    }
}

static int bench_products(int depth, int B, int T, int reps, const char* only) {
    if (!dnnl_available()) { fprintf(stderr, "error: products: this build has no oneDNN (install libdnnl-dev)\n"); return 1; }
    if (!cpu_has_native_bf16()) {
        fprintf(stderr, "error: products: this CPU has no native bf16 dot products (avx512_bf16 or AMX): no bf16 products to measure\n");
        return 1;
    }
    GPT2 model;
    gpt2_build_from_random(&model, depth, 50257, 1337);
    gpt2_allocate(&model, B, T);
    gpt2_set_precision(&model, 1);
    int V = model.config.vocab_size;
    int* x = (int*)mallocCheck((size_t)(B * T + 1) * sizeof(int));
    uint64_t rng = 42;
    for (int i = 0; i <= B * T; i++) { x[i] = (int)(random_u32(&rng) % (uint32_t)V); }
    gpt2_zero_grad(&model);  // one step: activations, probabilities and the packed weights as in training
    gpt2_forward_train(&model, x, x + 1, B, T, 1.0f);
    gpt2_backward(&model, x, x + 1, 1.0f);
    gpt2_update(&model, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 1);
    const GPT2Config* c = &model.config;
    int C = c->channels, N = B * T, Vp = c->padded_vocab_size, NH = c->num_heads;
    size_t widest = (size_t)(Vp > 4 * C ? Vp : 4 * C);  // a layer's widest side: the lm head's, or fc's
    size_t wide = (size_t)N * widest;
    float* out = (float*)mallocCheck(wide * sizeof(float));
    float* dinp = (float*)mallocCheck(wide * sizeof(float));
    float* dweight = (float*)mallocCheck(widest * C * sizeof(float));
    float* f32 = (float*)mallocCheck(wide * sizeof(float));   // an fp32 operand (inp, dout, residual)
    float* dbias = (float*)mallocCheck((size_t)Vp * sizeof(float));
    float* bias = (float*)mallocCheck((size_t)Vp * sizeof(float));
    for (size_t i = 0; i < wide; i++) { f32[i] = 0.01f * (float)((int)(i % 17) - 8); }
    bf16* in16 = (bf16*)mallocCheck((size_t)N * 4 * C * sizeof(bf16));  // the widest input: fcproj's
    for (size_t i = 0; i < (size_t)N * 4 * C; i++) { in16[i] = bf16_from_float(f32[i]); }
    for (int i = 0; i < Vp; i++) { bias[i] = 0.001f * (float)(i % 11); }
    static const char* names[NUM_LINEARS] = {"qkv", "attproj", "fc", "fcproj", "lm head"};
    int ins[NUM_LINEARS] = {C, C, C, 4 * C, C}, outs[NUM_LINEARS] = {3 * C, C, 4 * C, C, Vp};
    int res[NUM_LINEARS] = {0, 1, 0, 1, 0};
    Bf16Peak probe;
    memset(&probe, 0, sizeof(probe));
    printf("d%d B=%d T=%d (%d rows), bf16 on %s, %d threads; ms per call, best of %d batches; GFLOP/s of the products' FLOPs, and %% of the "
           "bf16 peak probed right before and after each row (the better; 2048^3, B plain or packed)\n\n",
           depth, B, T, N, dnnl_isa_name(), omp_get_max_threads(), reps);
    printf("| work | shape (M x N x K) | ms | GFLOP/s | peak beside it | %% of it |\n|---|---|---|---|---|---|\n");
    Item items[NUM_LINEARS * 5 + 4];
    int n_items = 0;
    for (int w = 0; w < NUM_LINEARS; w++) {
        for (int part = PART_FWD; part <= PART_BWD_CALL; part++) {
            Item it = {&model, w, part, N, ins[w], outs[w], B, T, out, f32, f32, dinp, dweight,
                       w == LIN_LM ? NULL : dbias, w == LIN_LM ? NULL : bias, res[w] ? f32 : NULL, in16};
            items[n_items++] = it;
        }
    }
    for (int part = PART_ATT_FWD; part <= PART_ATT_BWD_CALL; part++) {
        Item it = {&model, BF16_ATTENTION, part, N, C, C, B, T, out, f32, f32, dinp, NULL, NULL, NULL, NULL, NULL};
        items[n_items++] = it;
    }
    static const char* part_names[] = {"forward product", "dinp product", "dweight product (+ packing inp)",
                                       "matmul_forward_bf16 (whole)", "matmul_backward_bf16 (whole)",
                                       "forward products (scores, att v)", "backward products (4)",
                                       "attention_forward_bf16 (whole)", "attention_backward_bf16 (whole)"};
    double hs = (double)C / NH;
    for (int i = 0; i < n_items; i++) {
        Item* it = &items[i];
        char name[128];
        snprintf(name, sizeof(name), "%s: %s", it->which == BF16_ATTENTION ? "attention" : names[it->which],
                 part_names[it->part]);
        if (only != NULL && strstr(name, only) == NULL) { continue; }
        double flops;
        char shape[96];
        if (it->which == BF16_ATTENTION) {
            int fwd = it->part == PART_ATT_FWD || it->part == PART_ATT_FWD_CALL;
            flops = (fwd ? 2 : 4) * 2.0 * B * NH * (double)T * T * hs;
            snprintf(shape, sizeof(shape), "%d x (%d heads: %d x %d x %d)", B, NH, T, T, (int)hs);
        } else {
            flops = (it->part == PART_BWD_CALL ? 4.0 : 2.0) * N * (double)it->C * it->OC;
            if (it->part == PART_FWD || it->part == PART_FWD_CALL) { snprintf(shape, sizeof(shape), "%d x %d x %d", N, it->OC, it->C); }
            else if (it->part == PART_DINP) { snprintf(shape, sizeof(shape), "%d x %d x %d", N, it->C, it->OC); }
            else if (it->part == PART_DWEIGHT) { snprintf(shape, sizeof(shape), "%d x %d x %d", it->OC, it->C, N); }
            else { snprintf(shape, sizeof(shape), "dinp and dweight"); }
        }
        double before = peak_probe(&probe);
        double t0 = clock_seconds();
        run_item(it);  // the warm-up, which also sizes a batch: runs of at least 20 ms, so that a short product
        int k = (int)(0.02 / (clock_seconds() - t0 + 1e-9)) + 1;  // is timed over many calls
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            t0 = clock_seconds();
            for (int j = 0; j < k; j++) { run_item(it); }
            double dt = (clock_seconds() - t0) / k;
            if (dt < best) { best = dt; }
        }
        double after = peak_probe(&probe);
        double pk = before > after ? before : after;
        double gf = flops / best / 1e9;
        printf("| %s | %s | %.4g | %.1f | %.1f | %.1f%% |\n", name, shape, best * 1e3, gf, pk, 100.0 * gf / pk);
    }
    free(out); free(dinp); free(dweight); free(f32); free(dbias); free(bias); free(x); free(in16);
    bf16_peak_free(&probe);
    gpt2_free(&model);
    return 0;
}

int main(int argc, char** argv) {
    cpu_blas_init(argc, argv);  // the OpenBLAS kernel and the OpenMP wait policy (may re-execute once)
    if (argc >= 5 && strcmp(argv[1], "products") == 0) {
        int depth = atoi(argv[2]), B = atoi(argv[3]), T = atoi(argv[4]), reps = argc > 5 ? atoi(argv[5]) : 5;
        if (depth <= 0 || B <= 0 || T <= 0 || T > 1024 || reps <= 0) {
            fprintf(stderr, "error: bad arguments (need depth, B, reps > 0, 0 < T <= 1024)\n");
            return 1;
        }
        return bench_products(depth, B, T, reps, argc > 6 ? argv[6] : NULL);
    }
    if (argc < 4) {
        fprintf(stderr, "usage: %s depth B T [steps=8] [warmup=2] [peak_gflops=0] [precision=fp32|bf16]\n"
                        "       %s products depth B T [reps=5] [only]\n", argv[0], argv[0]);
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
    int bf16_on = strcmp(precision, "bf16") == 0;
    double* probe_gf = (double*)mallocCheck((steps + 1) * sizeof(double));  // bf16: [s] the probe before step s
    Bf16Peak probe;
    memset(&probe, 0, sizeof(probe));
    cpu_profile_enabled = 1;
    double cpu0 = cpu_s();
    for (int s = 0; s < steps; s++) {
        if (s == warmup && bf16_on) { probe_gf[s] = peak_probe(&probe); }  // outside the profile and cpu_ms
        if (s == warmup) { memset(cpu_profile_seconds, 0, sizeof(cpu_profile_seconds)); cpu0 = cpu_s(); }
        for (int i = 0; i <= B * T; i++) { x[i] = (int)(random_u32(&rng) % (uint32_t)V); }
        double t0 = clock_seconds();
        if (s == 0) { gpt2_zero_grad(&model); }  // as the trainer: after it gpt2_update leaves them zero
        gpt2_forward_train(&model, x, x + 1, B, T, 1.0f);  // as the trainer's step: dlogits made in the forward
        gpt2_backward(&model, x, x + 1, 1.0f);
        float norm;
        PROF(PROF_GRAD_NORM, norm = gpt2_grad_norm(&model));
        PROF(PROF_ADAMW, gpt2_update(&model, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, norm > 1.0f ? 1.0f / norm : 1.0f, s + 1));
        ms[s] = (clock_seconds() - t0) * 1000.0;
        if (s >= warmup && bf16_on) {  // its time out of the profile's phases and cpu_ms
            double p0 = cpu_s(), pf[PROF_PHASES];
            memcpy(pf, cpu_profile_seconds, sizeof(pf));
            probe_gf[s + 1] = peak_probe(&probe);
            memcpy(cpu_profile_seconds, pf, sizeof(pf));
            cpu0 += cpu_s() - p0;
        }
    }
    int n = steps - warmup;
    const GPT2Config* c = &model.config;
    double flops_tok = 6.0 * model.num_parameters + 6.0 * c->num_layers * c->channels * T;
    double step_mfu = 0.0;  // bf16: the median over the timed steps of each against the better probe beside it
    double* step_ms = (double*)mallocCheck(n * sizeof(double));
    memcpy(step_ms, ms + warmup, n * sizeof(double));
    if (bf16_on) {
        double* mf = (double*)mallocCheck(n * sizeof(double));
        for (int s = warmup; s < steps; s++) {
            double pk = probe_gf[s] > probe_gf[s + 1] ? probe_gf[s] : probe_gf[s + 1];
            mf[s - warmup] = 100.0 * B * T * flops_tok / (ms[s] / 1000.0) / (pk * 1e9);
        }
        qsort(mf, n, sizeof(double), cmp_double);
        step_mfu = n % 2 ? mf[n / 2] : 0.5 * (mf[n / 2 - 1] + mf[n / 2]);
        free(mf);
    }
    double cpu_ms = (cpu_s() - cpu0) * 1000.0 / n;  // per step; / (threads * mean_ms): how busy the threads were
    double mean_ms = 0.0;
    for (int s = warmup; s < steps; s++) { mean_ms += ms[s] / n; }
    qsort(ms + warmup, n, sizeof(double), cmp_double);
    double med = n % 2 ? ms[warmup + n / 2] : 0.5 * (ms[warmup + n / 2 - 1] + ms[warmup + n / 2]);
    double tok_s = B * T / (med / 1000.0);
    double mfu = peak > 0 ? 100.0 * tok_s * flops_tok / (peak * 1e9) : 0.0;
    printf("{\"precision\": \"%s\", \"depth\": %d, \"B\": %d, \"T\": %d, \"steps\": %d, \"median_ms\": %.3f, \"tok_s\": %.2f, "
           "\"flops_per_token\": %.0f, \"mfu_pct\": %.2f, \"loss\": %.6f, \"blas\": \"%s\", \"bf16_isa\": \"%s\", "
           "\"wait_policy\": \"%s\", \"spincount\": \"%s\", \"mean_ms\": %.3f, \"cpu_ms\": %.3f, \"threads\": %d, ",
           precision, depth, B, T, steps, med, tok_s, flops_tok, mfu, model.mean_loss, cpu_blas_describe(), dnnl_isa_name(),
           getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "", getenv("GOMP_SPINCOUNT") ? getenv("GOMP_SPINCOUNT") : "",
           mean_ms, cpu_ms, omp_get_max_threads());
    if (bf16_on) {  // the timed steps' ms in order (ms[] is sorted by now: step_ms kept them), the probes around them
        printf("\"step_mfu_pct\": %.3f, \"step_ms\": [", step_mfu);
        for (int s = warmup; s < steps; s++) { printf("%.3f%s", step_ms[s - warmup], s + 1 < steps ? ", " : "], "); }
        printf("\"step_probes\": [");
        for (int s = warmup; s <= steps; s++) { printf("%.3f%s", probe_gf[s], s < steps ? ", " : "], "); }
    }
    printf("\"phases_ms\": {");
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
    free(ms); free(x); free(probe_gf); free(step_ms);
    if (bf16_on) { bf16_peak_free(&probe); }
    gpt2_free(&model);
    return 0;
}
