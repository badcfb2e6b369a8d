/*
 * test/test_gpt2.c — train_gpt2.c against the PyTorch reference (scripts/train_gpt2.py).
 * The Makefile writes the fixture into build/ before this runs: a random-init d2 checkpoint (V=50257) and
 * the reference's debug state for one batch of random tokens, computed in float64 and stored as fp32, so the
 * differences measured here are the C trainer's own fp32 error. Compared: logits, loss, all 16 gradient
 * tensors (max abs and max relative error per tensor, printed), and the losses of 10 AdamW steps with
 * clipping on the same batch (lr 1e-4, betas 0.9/0.95, eps 1e-8, wd 0.01 on the 2-D weights, clip 1.0:
 * the constants of scripts/train_gpt2.py's debug state).
 * Tolerances (fp32; llm.c's own test uses 1e-2), with what was measured on this fixture in brackets:
 *   logits: |c - r| <= 5e-6 absolute                        [<= 9.6e-7; max |logit| 1.9]
 *   loss:   |c - r| <= 5e-6                                  [0 to 1 ulp of 10.85]
 *   grads, per tensor: max|c - r| <= 1e-5 * max|r|           [<= 1.2e-6]
 *          and |c - r| <= 1e-3 * |r| for every element with |r| >= 1e-3 * max|r|   [<= 3e-4]
 *   steps:  |c - r| <= 1e-5 for each of the 10 losses        [<= 1e-6]
 * and the same gradient tolerance for the sum of two backward passes with dloss_scale 1/2.
 * All of it also for a second batch of odd shape (B=3, T=17). Also: llmc/dataloader.h gives the reference
 * loader's batches in the same order (3 shards, 40 batches, 3 epochs).
 */
#define TESTING
#include "../train_gpt2.c"
#include <criterion/criterion.h>
#include <math.h>

#define MODEL_PATH "build/ref_d2.bin"
#define STATE_PATH "build/ref_d2_state.bin"
#define ODD_STATE_PATH "build/ref_d2_state_odd.bin"  // B=3, T=17: every vector loop has a remainder
#define DEBUG_MAGIC 20240327
#define DEBUG_VERSION 2

#define LOGITS_ATOL 5e-6f
#define LOSS_ATOL 5e-6f
#define GRAD_NORMWISE_RTOL 1e-5
#define GRAD_ELEM_RTOL 1e-3
#define GRAD_ELEM_FLOOR 1e-3   // elements below this fraction of max|r| are covered by the normwise bound
#define STEP_LOSS_ATOL 1e-5f

static const char* tensor_names[16] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                       "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

typedef struct {
    int B, T, V, K;
    int* x;          // (B*T)
    int* y;          // (B*T)
    float* logits;   // (B*T*V), unpadded
    float loss;
    float* grads;    // (num_parameters), padded flat layout
    float* losses;   // (K)
} DebugState;

static void debug_state_read(DebugState* s, const char* path, size_t num_parameters) {
    FILE* fp = fopenCheck(path, "rb");
    int header[256];
    freadCheck(header, sizeof(int), 256, fp, path);
    cr_assert_eq(header[0], DEBUG_MAGIC, "%s: bad magic", path);
    cr_assert_eq(header[1], DEBUG_VERSION, "%s: bad version", path);
    s->B = header[2]; s->T = header[3]; s->V = header[4]; s->K = header[5];
    size_t BT = (size_t)s->B * s->T;
    s->x = (int*)mallocCheck(BT * sizeof(int));
    s->y = (int*)mallocCheck(BT * sizeof(int));
    s->logits = (float*)mallocCheck(BT * s->V * sizeof(float));
    s->grads = (float*)mallocCheck(num_parameters * sizeof(float));
    s->losses = (float*)mallocCheck(s->K * sizeof(float));
    freadCheck(s->x, sizeof(int), BT, fp, path);
    freadCheck(s->y, sizeof(int), BT, fp, path);
    freadCheck(s->logits, sizeof(float), BT * s->V, fp, path);
    freadCheck(&s->loss, sizeof(float), 1, fp, path);
    freadCheck(s->grads, sizeof(float), num_parameters, fp, path);
    freadCheck(s->losses, sizeof(float), s->K, fp, path);
    char extra;
    cr_assert_eq(fread(&extra, 1, 1, fp), 0, "%s: longer than its header says (model mismatch?)", path);
    fcloseCheck(fp, path);
}

static void debug_state_free(DebugState* s) {
    free(s->x); free(s->y); free(s->logits); free(s->grads); free(s->losses);
}

static GPT2 model;
static DebugState ref;

static void setup_from(const char* state_path) {
    gpt2_build_from_checkpoint(&model, MODEL_PATH);
    debug_state_read(&ref, state_path, model.num_parameters);
    cr_assert_eq(ref.V, model.config.vocab_size);
    gpt2_allocate(&model, ref.B, ref.T);
}

static void setup(void) { setup_from(STATE_PATH); }
static void setup_odd(void) { setup_from(ODD_STATE_PATH); }

static void teardown(void) {
    debug_state_free(&ref);
    gpt2_free(&model);
}

static void forward_backward(void) {
    gpt2_forward(&model, ref.x, ref.y, ref.B, ref.T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model, ref.x, ref.y, 1.0f);
}

static void check_logits_and_loss(void) {
    gpt2_forward(&model, ref.x, ref.y, ref.B, ref.T);
    int BT = ref.B * ref.T, V = ref.V, Vp = model.config.padded_vocab_size;
    float max_err = 0.0f, max_ref = 0.0f;
    for (int i = 0; i < BT; i++) {
        for (int v = 0; v < V; v++) {
            float c = model.acts.logits[(size_t)i * Vp + v], r = ref.logits[(size_t)i * V + v];
            cr_assert(isfinite(c), "logit (%d,%d) is not finite", i, v);
            max_err = fmaxf(max_err, fabsf(c - r));
            max_ref = fmaxf(max_ref, fabsf(r));
        }
    }
    float loss_err = fabsf(model.mean_loss - ref.loss);
    fprintf(stderr, "logits: max abs err %.3e (max |logit| %.3e, tol %.0e); loss %.7f vs %.7f, err %.3e (tol %.0e)\n",
            max_err, max_ref, LOGITS_ATOL, model.mean_loss, ref.loss, loss_err, LOSS_ATOL);
    cr_expect_leq(max_err, LOGITS_ATOL, "logits: max abs err %.3e > %.0e", max_err, LOGITS_ATOL);
    cr_expect_leq(loss_err, LOSS_ATOL, "loss: %.7f vs reference %.7f", model.mean_loss, ref.loss);
}

static void check_every_gradient_tensor(void) {
    forward_backward();
    size_t off = 0;
    fprintf(stderr, "%-9s %10s %10s %10s %10s %10s\n", "grad", "numel", "max|ref|", "max abs", "abs/max", "max rel");
    for (int t = 0; t < 16; t++) {
        size_t n = model.param_sizes[t];
        const float* c = model.grads_memory + off;
        const float* r = ref.grads + off;
        double max_ref = 0.0, max_abs = 0.0, max_rel = 0.0;
        for (size_t i = 0; i < n; i++) { max_ref = fmax(max_ref, fabs(r[i])); }
        size_t bad = 0, first_bad = 0;
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)c[i] - r[i]);
            if (!(d <= max_abs)) { max_abs = d; }  // NaN propagates
            if (fabs(r[i]) >= GRAD_ELEM_FLOOR * max_ref) {
                if (!(d <= GRAD_ELEM_RTOL * fabs(r[i])) && bad++ == 0) { first_bad = i; }  // also catches NaN
                max_rel = fmax(max_rel, d / fabs(r[i]));
            }
        }
        fprintf(stderr, "%-9s %10zu %10.3e %10.3e %10.3e %10.3e\n", tensor_names[t], n, max_ref, max_abs,
                max_abs / max_ref, max_rel);
        cr_expect(max_abs <= GRAD_NORMWISE_RTOL * max_ref, "grad %s: max abs err %.3e > %.0e * max|ref| %.3e",
                      tensor_names[t], max_abs, GRAD_NORMWISE_RTOL, max_ref);
        cr_expect_eq(bad, 0, "grad %s: %zu elements out of tolerance, first at %zu: %.9g vs reference %.9g",
                     tensor_names[t], bad, first_bad, c[first_bad], r[first_bad]);
        off += n;
    }
    cr_assert_eq(off, model.num_parameters);
}

// gradient accumulation: two backward passes of the same batch with dloss_scale 1/2 each must add up to
// the reference gradient (the backward accumulates into the parameter gradients, scaled by dloss_scale)
static void check_accumulated_half_gradients(void) {
    gpt2_zero_grad(&model);
    for (int k = 0; k < 2; k++) {
        gpt2_forward(&model, ref.x, ref.y, ref.B, ref.T);
        gpt2_backward(&model, ref.x, ref.y, 0.5f);
    }
    size_t off = 0;
    for (int t = 0; t < 16; t++) {
        size_t n = model.param_sizes[t];
        double max_ref = 0.0, max_abs = 0.0;
        for (size_t i = off; i < off + n; i++) {
            max_ref = fmax(max_ref, fabs(ref.grads[i]));
            double d = fabs((double)model.grads_memory[i] - ref.grads[i]);
            if (!(d <= max_abs)) { max_abs = d; }
        }
        cr_expect(max_abs <= GRAD_NORMWISE_RTOL * max_ref, "grad %s after 2 x 0.5: max abs err %.3e, max|ref| %.3e",
                  tensor_names[t], max_abs, max_ref);
        off += n;
    }
}

static void check_ten_adamw_steps(void) {
    for (int step = 0; step < ref.K; step++) {
        forward_backward();
        float norm = gpt2_grad_norm(&model);
        float scale = norm > 1.0f ? 1.0f / norm : 1.0f;
        gpt2_update(&model, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.01f, scale, step + 1);
        float err = fabsf(model.mean_loss - ref.losses[step]);
        fprintf(stderr, "step %2d: loss %.7f reference %.7f err %.3e (grad norm %.4f)\n",
                step, model.mean_loss, ref.losses[step], err, norm);
        cr_expect_leq(err, STEP_LOSS_ATOL, "step %d: loss %.7f vs reference %.7f", step, model.mean_loss,
                      ref.losses[step]);
    }
    cr_expect_lt(ref.losses[ref.K - 1], ref.losses[0], "the reference loss must fall over the steps");
}

TestSuite(gpt2_vs_pytorch, .init = setup, .fini = teardown, .timeout = 120);
Test(gpt2_vs_pytorch, logits_and_loss_match) { check_logits_and_loss(); }
Test(gpt2_vs_pytorch, every_gradient_tensor_matches) { check_every_gradient_tensor(); }
Test(gpt2_vs_pytorch, ten_adamw_steps_match) { check_ten_adamw_steps(); }
Test(gpt2_vs_pytorch, accumulated_half_gradients_match) { check_accumulated_half_gradients(); }

TestSuite(gpt2_vs_pytorch_odd_shapes, .init = setup_odd, .fini = teardown, .timeout = 120);
Test(gpt2_vs_pytorch_odd_shapes, logits_and_loss_match) { check_logits_and_loss(); }
Test(gpt2_vs_pytorch_odd_shapes, every_gradient_tensor_matches) { check_every_gradient_tensor(); }
Test(gpt2_vs_pytorch_odd_shapes, ten_adamw_steps_match) { check_ten_adamw_steps(); }

// ----------------------------------------------------------------------------
// the DataLoader order: llmc/dataloader.h and the reference's loader must give the same batches, across
// shards of different sizes and across epochs (three shards of 5, 3 and 7 batches of B=2, T=4; 40 batches)

#define LOADER_DIR "build/loader_fixture"
#define LOADER_BATCHES 40

static void write_shard(const char* path, int ntok, uint64_t* rng) {
    int header[256] = {20240520, 1, ntok, 0};
    uint16_t* tok = (uint16_t*)mallocCheck(ntok * sizeof(uint16_t));
    for (int i = 0; i < ntok; i++) { tok[i] = (uint16_t)(random_u32(rng) % 50257); }
    FILE* fp = fopenCheck(path, "wb");
    fwriteCheck(header, sizeof(int), 256, fp, path);
    fwriteCheck(tok, sizeof(uint16_t), ntok, fp, path);
    fcloseCheck(fp, path);
    free(tok);
}

// both layouts: the reference's --dump-batches against the C loader, batch by batch
static void check_order_against_reference(const char* rows, int order) {
    const int B = 2, T = 4, BT = B * T;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 scripts/train_gpt2.py --dump-batches 40 " LOADER_DIR "/order.bin"
             " -i '" LOADER_DIR "/train_*.bin' -b 2 -t 4 --seed 7 --vocab 50257 --rows %s", rows);
    cr_assert_eq(system(cmd), 0, "scripts/train_gpt2.py --dump-batches failed");
    int* ref_xy = (int*)mallocCheck(LOADER_BATCHES * 2 * BT * sizeof(int));
    FILE* fp = fopenCheck(LOADER_DIR "/order.bin", "rb");
    freadCheck(ref_xy, sizeof(int), LOADER_BATCHES * 2 * BT, fp, LOADER_DIR "/order.bin");
    fcloseCheck(fp, LOADER_DIR "/order.bin");
    DataLoader loader;
    dataloader_init(&loader, LOADER_DIR "/train_*.bin", B, T, 50257, order, 7);
    for (int k = 0; k < LOADER_BATCHES; k++) {
        dataloader_next_batch(&loader);
        const int* rx = ref_xy + k * 2 * BT;
        cr_assert_arr_eq(loader.inputs, rx, BT * sizeof(int), "--rows %s batch %d: inputs differ from the reference", rows, k);
        cr_assert_arr_eq(loader.targets, rx + BT, BT * sizeof(int), "--rows %s batch %d: targets differ from the reference", rows, k);
    }
    dataloader_free(&loader);
    free(ref_xy);
}

Test(dataloader, order_matches_pytorch_reference, .timeout = 60) {
    const int BT = 2 * 4;
    cr_assert_eq(system("mkdir -p " LOADER_DIR), 0);
    uint64_t rng = 99;
    write_shard(LOADER_DIR "/train_000000.bin", 5 * BT + 1, &rng);
    write_shard(LOADER_DIR "/train_000001.bin", 3 * BT + 5, &rng);   // trailing tokens that make no batch
    write_shard(LOADER_DIR "/train_000002.bin", 7 * BT + 1, &rng);
    check_order_against_reference("contiguous", LOADER_CHUNKS);
    check_order_against_reference("random", LOADER_ROWS);  // 61 windows: 40 batches cross an epoch
}
