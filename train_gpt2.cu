/*
 * train_gpt2.cu — GPT-2 training on NVIDIA GPUs: the CUDA twin of train_gpt2.c.
 * Same CLI, data order, schedules, checkpoint files and outputs as the CPU trainer; the math of every
 * kernel mirrors the CPU path (see the llmc/ kernel headers), so the CPU tests pin down what the GPU computes.
 * Weights and activations in floatX (bf16 by default), fp32 master weights, gradients and AdamW state;
 * the working bf16 copy is written with stochastic rounding. Multi-GPU: one process per GPU, NCCL,
 * optional ZeRO-1. Everything is allocated before the first step; the training loop allocates nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include "llmc/config.h"       // the flags
#include "llmc/run.h"          // data, schedule, sampler, logs, counters
#include "llmc/run_state.h"    // checkpoints and resume
#include "llmc/report.h"       // the start-up table and the summary
#include "llmc/signals.h"      // Ctrl-C: stop after this step, with a checkpoint
#include "llmc/cuda_common.cuh"
#include "llmc/encoder.cuh"
#include "llmc/layernorm.cuh"
#include "llmc/matmul.cuh"
#include "llmc/attention.cuh"
#ifdef ENABLE_CUDNN
#if defined(ENABLE_FP32)
#error "cuDNN attention needs bf16 (PRECISION=FP32 builds with USE_CUDNN=0)"
#endif
#include "llmc/cudnn_att.h"
#endif
#include "llmc/fused_classifier.cuh"
#include "llmc/adamw.cuh"
#include "llmc/average.h"      // the weights to evaluate and keep: an EMA of the weights (--ema)
#include "llmc/reduce.cuh"
#include "llmc/zero.cuh"
#include "hybrid/run.h"        // hybrid mode: its flags, its plan before a step and its report after it
#include "hybrid/device.cuh"   // and its device buffers and kernels

// ----------------------------------------------------------------------------
// GPT-2 model definition: GPT2Config and the parameter layout (llm.c order) come from llmc/checkpoint.h


// the 16 tensors of the flat parameter buffer, for weights (floatX) and for gradients (float)
template <typename T>
struct ParamSet {
    T* wte;       // (Vp, C)
    T* wpe;       // (maxT, C)
    T* ln1w;      // (L, C)
    T* ln1b;      // (L, C)
    T* qkvw;      // (L, 3*C, C)
    T* qkvb;      // (L, 3*C)
    T* attprojw;  // (L, C, C)
    T* attprojb;  // (L, C)
    T* ln2w;      // (L, C)
    T* ln2b;      // (L, C)
    T* fcw;       // (L, 4*C, C)
    T* fcb;       // (L, 4*C)
    T* fcprojw;   // (L, C, 4*C)
    T* fcprojb;   // (L, C)
    T* lnfw;      // (C)
    T* lnfb;      // (C)
};
typedef ParamSet<floatX> ParameterTensors;
typedef ParamSet<float> GradTensors;

template <typename T>
void point_parameters(ParamSet<T>* p, T* base, const size_t* sizes) {
    T** ptrs[NUM_PARAMETER_TENSORS] = {
        &p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb, &p->attprojw, &p->attprojb,
        &p->ln2w, &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb, &p->lnfw, &p->lnfb};
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        *ptrs[i] = base;
        base += sizes[i];
    }
}

// activations for one micro batch (B,T); per-layer tensors are what the backward pass reads back.
// With recompute >= 1 the GELU output, with recompute >= 2 also the LayerNorm outputs, keep one layer's
// worth and are recomputed in the backward pass.
typedef struct {
    floatX* encoded;    // (B,T,C)
    floatX* ln1;        // (L,B,T,C), (B,T,C) with recompute >= 2
    float* ln1_mean;    // (L,B,T)
    float* ln1_rstd;    // (L,B,T)
    floatX* qkv;        // (L,B,T,3C)
    floatX* atty;       // (L,B,T,C)
    float* att_lse;     // (L,B,NH,T) softmax log-sum-exp per query
    floatX* residual2;  // (L,B,T,C)
    floatX* ln2;        // (L,B,T,C), (B,T,C) with recompute >= 2
    float* ln2_mean;    // (L,B,T)
    float* ln2_rstd;    // (L,B,T)
    floatX* fch;        // (L,B,T,4C) pre-GELU
    floatX* fch_gelu;   // (L,B,T,4C), (B,T,4C) with recompute >= 1
    floatX* residual3;  // (L,B,T,C)
    floatX* lnf;        // (B,T,C)
    float* lnf_mean;    // (B,T)
    float* lnf_rstd;    // (B,T)
    floatX* logits;     // (B,T,Vp), dlogits after the backward classifier
    float* losses;      // (B,T) per-position loss, summed over the micro batches of a step
    // backward scratch (also used as forward scratch for the projection outputs)
    floatX* bt4c;       // (B,T,4C)
    floatX* btc;        // (B,T,C)
    floatX* dresidual;  // (B,T,C)
    float* att_delta;   // (B,NH,T)
    // element strides between the layers of the (L,...) tensors: the allocated sizes rounded up to 256 bytes,
    // so every layer's slice is as aligned as a fresh cudaMalloc whatever B, T and -r are (cuBLASLt plans are
    // chosen per operand alignment: -r 0/1/2 then pick the same algorithms; cuDNN wants 16-byte tensors)
    size_t btc_stride;  // (B,T,C) floatX; (B,T,3C) and (B,T,4C) slices are 3x and 4x this
    size_t bt_stride;   // (B,T) fp32
    size_t lse_stride;  // (B,NH,T) fp32
} ActivationTensors;

typedef struct {
    GPT2Config config;
    ParameterTensors params;      // device, floatX working copy
    GradTensors grads;            // device, fp32
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    size_t num_parameters;        // P
    size_t num_parameters_padded; // P rounded up so that it splits into equal, aligned ZeRO shards
    floatX* params_memory;        // (Ppad) device
    float* master_weights;        // (Ppad) device fp32
    float* grads_memory;          // (Ppad) device fp32
    float* m_memory;              // (shard) device fp32 AdamW first moment
    float* v_memory;              // (shard) device fp32 AdamW second moment
    WeightAverage* average;       // weights kept apart (llmc/average.h; device, Ppad): with an EMA decay the AdamW
                                  // kernel updates this rank's shard of it; NULL: none
    size_t shard_offset, shard_size;  // this rank's range of the flat parameters
    ActivationTensors acts;
    int batch_size, seq_len;      // what acts were allocated for
    int recompute;                // 0, 1 (GELU), 2 (GELU + LayerNorm)
    int use_cudnn;                // attention through cuDNN (cuDNN builds, when it has an engine for the shape)
    float mean_loss;              // of the last forward with targets, or of the last step
    uint32_t rounding_seed;       // base of the per-step stochastic-rounding seeds (from --seed)
    // inputs: device copies and host scratch for the wte gradient buckets
    int* inputs;                  // (B,T) device
    int* targets;                 // (B,T) device
    int* bucket_memory;           // device: token (N) | start (N+1) | pos (N), N = the allocated B*T (bucket_parts)
    int* bucket_host;             // host, same layout
    int* bucket_count;            // host (Vp) scratch
    int num_buckets;
    float* scratch;               // device fp32: REDUCE_CHUNKS * 2 * 4C (column reductions), norm partials
    float* norm_out;              // device (2): the step's squared gradient norm, the first micro batch's
    float* host_losses;           // (2,B,T) pinned host: a forward's or the step's; the first micro batch's
    int micro_steps;              // micro batches accumulated since the last zero_grad
    MultiGpuConfig* multi_gpu;
    cudaStream_t stream;
} GPT2;

// ----------------------------------------------------------------------------
// building the model: from fp32 parameters on the host (llm.c v3 checkpoint or a random init)

static void gpt2_validate_config(const GPT2Config* c, const char* what) {
    if (c->max_seq_len <= 0 || c->vocab_size <= 0 || c->padded_vocab_size < c->vocab_size ||
        c->num_layers <= 0 || c->num_heads <= 0 || c->channels <= 0 || c->channels % c->num_heads != 0) {
        fatal("%s: bad model config (maxT %d, V %d, Vp %d, L %d, NH %d, C %d)", what, c->max_seq_len,
              c->vocab_size, c->padded_vocab_size, c->num_layers, c->num_heads, c->channels);
    }
    if (c->channels / c->num_heads != ATT_HS) {
        fatal("%s: head size %d; the CUDA attention kernels support head size %d", what,
              c->channels / c->num_heads, ATT_HS);
    }
}

void gpt2_sync_floatX(GPT2* model, int t);

// allocates parameters, gradients and the optimizer state (this rank's shard) and uploads `host_params`
// (P fp32 values, llm.c order) as the master weights of step `step`
void gpt2_init_params(GPT2* model, GPT2Config config, const float* host_params, MultiGpuConfig* multi_gpu,
                      uint32_t rounding_seed, int step) {
    memset(model, 0, sizeof(*model));
    gpt2_validate_config(&config, "model");
    model->config = config;
    model->multi_gpu = multi_gpu;
    model->rounding_seed = rounding_seed;
    cudaCheck(cudaStreamCreate(&model->stream));
    gpt2_param_sizes(model->param_sizes, &config);
    size_t P = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { P += model->param_sizes[i]; }
    model->num_parameters = P;
    size_t quantum = (size_t)multi_gpu->num_processes * 1024;  // 1024: 2 KiB-aligned bf16 shards
    model->num_parameters_padded = (P + quantum - 1) / quantum * quantum;
    size_t Ppad = model->num_parameters_padded;
    if (multi_gpu->zero_stage == 1) {
        model->shard_size = Ppad / multi_gpu->num_processes;
        model->shard_offset = model->shard_size * multi_gpu->process_rank;
    } else {
        model->shard_size = Ppad;
        model->shard_offset = 0;
    }
    model->params_memory = (floatX*)cudaMallocCheck(Ppad * sizeof(floatX));
    model->master_weights = (float*)cudaMallocCheck(Ppad * sizeof(float));
    model->grads_memory = (float*)cudaMallocCheck(Ppad * sizeof(float));
    model->m_memory = (float*)cudaMallocCheck(model->shard_size * sizeof(float));
    model->v_memory = (float*)cudaMallocCheck(model->shard_size * sizeof(float));
    cudaCheck(cudaMemset(model->master_weights, 0, Ppad * sizeof(float)));
    cudaCheck(cudaMemset(model->grads_memory, 0, Ppad * sizeof(float)));
    cudaCheck(cudaMemset(model->m_memory, 0, model->shard_size * sizeof(float)));
    cudaCheck(cudaMemset(model->v_memory, 0, model->shard_size * sizeof(float)));
    cudaCheck(cudaMemcpy(model->master_weights, host_params, P * sizeof(float), cudaMemcpyHostToDevice));
    point_parameters(&model->params, model->params_memory, model->param_sizes);
    point_parameters(&model->grads, model->grads_memory, model->param_sizes);
    gpt2_sync_floatX(model, step);
}

void gpt2_build_from_checkpoint(GPT2* model, const char* path, MultiGpuConfig* multi_gpu, uint32_t rounding_seed,
                                int step) {
    GPT2Config config;
    size_t n = model_read_header(path, &config);
    gpt2_validate_config(&config, path);
    float* params = (float*)mallocCheck(n * sizeof(float));
    model_read_params(path, params, n);
    gpt2_init_params(model, config, params, multi_gpu, rounding_seed, step);
    free(params);
}

// llm.c's init, exactly as train_gpt2.c draws it (same stream, same order): N(0, 0.02) for the 2-D
// weights, residual projections scaled by 1/sqrt(2L), LayerNorm weights 1, biases 0, padded wte rows 0
void gpt2_build_from_random(GPT2* model, int depth, int vocab_size, uint64_t seed, MultiGpuConfig* multi_gpu,
                            uint32_t rounding_seed) {
    if (depth <= 0 || vocab_size <= 0) { fatal("model: depth %d and vocab %d must be positive", depth, vocab_size); }
    GPT2Config c;
    c.max_seq_len = 1024;
    c.vocab_size = vocab_size;
    c.padded_vocab_size = (vocab_size + 127) / 128 * 128;
    c.num_layers = depth;
    c.num_heads = depth;
    c.channels = 64 * depth;
    size_t sizes[NUM_PARAMETER_TENSORS];
    gpt2_param_sizes(sizes, &c);
    size_t n = gpt2_num_parameters(&c);
    float* params = (float*)callocCheck(n, sizeof(float));
    ParamSet<float> p;
    point_parameters(&p, params, sizes);
    uint64_t rng = random_state(seed, 0);
    float residual_std = 0.02f / sqrtf(2.0f * depth);
    size_t C = c.channels;
    normal_fill(p.wte, (size_t)vocab_size * C, 0.0f, 0.02f, &rng);
    normal_fill(p.wpe, sizes[1], 0.0f, 0.02f, &rng);
    for (size_t i = 0; i < sizes[2]; i++) { p.ln1w[i] = 1.0f; }
    normal_fill(p.qkvw, sizes[4], 0.0f, 0.02f, &rng);
    normal_fill(p.attprojw, sizes[6], 0.0f, residual_std, &rng);
    for (size_t i = 0; i < sizes[8]; i++) { p.ln2w[i] = 1.0f; }
    normal_fill(p.fcw, sizes[10], 0.0f, 0.02f, &rng);
    normal_fill(p.fcprojw, sizes[12], 0.0f, residual_std, &rng);
    for (size_t i = 0; i < C; i++) { p.lnfw[i] = 1.0f; }
    gpt2_init_params(model, c, params, multi_gpu, rounding_seed, 0);
    free(params);
}

// master weights -> host fp32 (P floats); with ZeRO-1 gathers every shard first (all ranks must call)
void gpt2_params_to_host(GPT2* model, float* host_params) {
    multi_gpu_all_gather(model->master_weights, model->num_parameters_padded, sizeof(float),
                         model->multi_gpu, model->stream);
    cudaCheck(cudaMemcpyAsync(host_params, model->master_weights, model->num_parameters * sizeof(float),
                              cudaMemcpyDeviceToHost, model->stream));
    cudaCheck(cudaStreamSynchronize(model->stream));
}

// the one layout of the wte-gradient buckets (bucket_memory, bucket_host), sized by the allocated batch so
// that every micro batch, whatever its B, puts the parts where gpt2_backward reads them
static size_t bucket_ints(const GPT2* model) { return 3 * (size_t)model->batch_size * model->seq_len + 1; }
static void bucket_parts(const GPT2* model, int* base, int** token, int** start, int** pos) {
    size_t N = (size_t)model->batch_size * model->seq_len;
    *token = base;
    *start = base + N;
    *pos = base + 2 * N + 1;
}

// allocate activations for micro batches of (B,T) and the input buffers; once, before training
void gpt2_allocate(GPT2* model, int B, int T, int recompute) {
    GPT2Config c = model->config;
    if (T > c.max_seq_len) { fatal("sequence length %d exceeds the model's maximum %d", T, c.max_seq_len); }
    if (recompute < 0 || recompute > 2) { fatal("flag -r: expected 0, 1 or 2, got %d", recompute); }
    size_t L = c.num_layers, C = c.channels, NH = c.num_heads, Vp = c.padded_vocab_size, BT = (size_t)B * T;
    size_t Lln = recompute >= 2 ? 1 : L, Lgelu = recompute >= 1 ? 1 : L;
    model->batch_size = B;
    model->seq_len = T;
    model->recompute = recompute;
    ActivationTensors* a = &model->acts;
#define ALLOC_X(n) (floatX*)cudaMallocCheck((n) * sizeof(floatX))
#define ALLOC_F(n) (float*)cudaMallocCheck((n) * sizeof(float))
    size_t sx = 256 / sizeof(floatX), sf = 256 / sizeof(float);
    a->btc_stride = (BT * C + sx - 1) / sx * sx;
    a->bt_stride = (BT + sf - 1) / sf * sf;
    a->lse_stride = (BT * NH + sf - 1) / sf * sf;
    size_t sbtc = a->btc_stride;
    a->encoded = ALLOC_X(BT * C);
    a->ln1 = ALLOC_X(Lln * sbtc);
    a->ln1_mean = ALLOC_F(L * a->bt_stride);
    a->ln1_rstd = ALLOC_F(L * a->bt_stride);
    a->qkv = ALLOC_X(L * 3 * sbtc);
    a->atty = ALLOC_X(L * sbtc);
    a->att_lse = ALLOC_F(L * a->lse_stride);
    a->residual2 = ALLOC_X(L * sbtc);
    a->ln2 = ALLOC_X(Lln * sbtc);
    a->ln2_mean = ALLOC_F(L * a->bt_stride);
    a->ln2_rstd = ALLOC_F(L * a->bt_stride);
    a->fch = ALLOC_X(L * 4 * sbtc);
    a->fch_gelu = ALLOC_X(Lgelu * 4 * sbtc);
    a->residual3 = ALLOC_X(L * sbtc);
    a->lnf = ALLOC_X(BT * C);
    a->lnf_mean = ALLOC_F(BT);
    a->lnf_rstd = ALLOC_F(BT);
    a->logits = ALLOC_X(BT * Vp);
    a->losses = ALLOC_F(BT);
    a->bt4c = ALLOC_X(BT * 4 * C);
    a->btc = ALLOC_X(BT * C);
    a->dresidual = ALLOC_X(BT * C);
    a->att_delta = ALLOC_F(B * NH * T);
#undef ALLOC_X
#undef ALLOC_F
    model->inputs = (int*)cudaMallocCheck(BT * sizeof(int));
    model->targets = (int*)cudaMallocCheck(BT * sizeof(int));
    model->bucket_memory = (int*)cudaMallocCheck(bucket_ints(model) * sizeof(int));
    model->bucket_host = (int*)mallocCheck(bucket_ints(model) * sizeof(int));
    model->bucket_count = (int*)mallocCheck(Vp * sizeof(int));
    size_t scratch_floats = (size_t)REDUCE_CHUNKS * 2 * 4 * C;
    if (scratch_floats < NORM_BLOCKS) { scratch_floats = NORM_BLOCKS; }
    model->scratch = (float*)cudaMallocCheck(scratch_floats * sizeof(float));
    model->norm_out = (float*)cudaMallocCheck(2 * sizeof(float));
    cudaCheck(cudaMallocHost((void**)&model->host_losses, 2 * BT * sizeof(float)));
    cudaCheck(cudaMemset(a->losses, 0, BT * sizeof(float)));
    model->use_cudnn = 0;
#ifdef ENABLE_CUDNN
    // cuDNN's plans and workspace for this shape, now rather than in the first step; if cuDNN has no engine
    // for the graph, say so and keep the built-in kernels (the reference the cuDNN path is tested against)
    char err[256];
    cudnn_att_init();
    model->use_cudnn = cudnn_att_prepare(B, T, (int)NH, (int)(C / NH), err, sizeof(err)) == 0;
    if (!model->use_cudnn) { fprintf(stderr, "cuDNN attention unavailable (%s): using the built-in tensor-core kernels (llmc/attention.cuh)\n", err); }
#endif
}

// attention through cuDNN when this build has it and it has an engine for the shape, else llmc/attention.cuh
static void gpt2_attention_forward(const GPT2* model, floatX* out, float* lse, const floatX* qkv, int B, int T,
                                   int C, int NH, cudaStream_t s) {
#ifdef ENABLE_CUDNN
    if (model->use_cudnn) { cudnn_att_forward(out, lse, qkv, B, T, NH, C / NH, s); return; }
#endif
    (void)model;
    attention_forward(out, lse, qkv, B, T, C, NH, s);
}

static void gpt2_attention_backward(const GPT2* model, floatX* dqkv, float* delta, const floatX* dout,
                                    const floatX* qkv, const floatX* out, const float* lse, int B, int T, int C,
                                    int NH, cudaStream_t s) {
#ifdef ENABLE_CUDNN
    if (model->use_cudnn) { cudnn_att_backward(dqkv, delta, dout, qkv, out, lse, B, T, NH, C / NH, s); return; }
#endif
    (void)model;
    attention_backward(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, s);
}

// ----------------------------------------------------------------------------
// the per-position losses copied to the host, summed in order (every mean loss here is read this way)
static float host_sum(const float* x, int n) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) { sum += x[i]; }
    return sum;
}

// forward pass. With targets, also the per-position losses (summed into acts.losses when `accumulate`)

static void gpt2_upload_batch(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    size_t BT = (size_t)B * T;
    int V = model->config.vocab_size;
    for (size_t i = 0; i < BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) { fatal("input token %d at position %zu is outside the vocabulary (%d)", inputs[i], i, V); }
        if (targets != NULL && (targets[i] < 0 || targets[i] >= V)) {
            fatal("target token %d at position %zu is outside the vocabulary (%d)", targets[i], i, V);
        }
    }
    cudaCheck(cudaMemcpyAsync(model->inputs, inputs, BT * sizeof(int), cudaMemcpyHostToDevice, model->stream));
    if (targets != NULL) {
        cudaCheck(cudaMemcpyAsync(model->targets, targets, BT * sizeof(int), cudaMemcpyHostToDevice, model->stream));
    }
    // group positions by token for the deterministic wte gradient
    int *token, *start, *pos;
    bucket_parts(model, model->bucket_host, &token, &start, &pos);
    model->num_buckets = encoder_buckets(token, start, pos, model->bucket_count, inputs, (int)BT, V);
    cudaCheck(cudaMemcpyAsync(model->bucket_memory, model->bucket_host, bucket_ints(model) * sizeof(int),
                              cudaMemcpyHostToDevice, model->stream));
    // the host buffers are reused by the next call: wait until the copies have read them
    cudaCheck(cudaStreamSynchronize(model->stream));
}

void gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    // inputs, targets: (B,T) host token ids; targets may be NULL (logits only)
    if (B > model->batch_size || T != model->seq_len) {
        fatal("forward: batch (%d,%d) does not fit the allocated (%d,%d)", B, T, model->batch_size, model->seq_len);
    }
    GPT2Config c = model->config;
    int L = c.num_layers, C = c.channels, NH = c.num_heads, V = c.vocab_size, Vp = c.padded_vocab_size;
    int N = B * T;
    cudaStream_t s = model->stream;
    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    int ln_all = model->recompute < 2, gelu_all = model->recompute < 1;
    size_t BTC = a.btc_stride, BTs = a.bt_stride;  // per-layer strides (not B*T*C: see ActivationTensors)
    gpt2_upload_batch(model, inputs, targets, B, T);

    encoder_forward(a.encoded, model->inputs, p.wte, p.wpe, B, T, C, s);
    layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.encoded, p.ln1w, p.ln1b, N, C, s);
    for (int l = 0; l < L; l++) {
        floatX* residual = l == 0 ? a.encoded : a.residual3 + (size_t)(l - 1) * BTC;
        floatX* ln1 = a.ln1 + (ln_all ? l * BTC : 0);
        floatX* ln2 = a.ln2 + (ln_all ? l * BTC : 0);
        floatX* qkv = a.qkv + (size_t)l * 3 * BTC;
        floatX* atty = a.atty + (size_t)l * BTC;
        floatX* residual2 = a.residual2 + (size_t)l * BTC;
        floatX* fch = a.fch + (size_t)l * 4 * BTC;
        floatX* fch_gelu = a.fch_gelu + (gelu_all ? (size_t)l * 4 * BTC : 0);
        floatX* residual3 = a.residual3 + (size_t)l * BTC;
        matmul_forward(qkv, ln1, p.qkvw + (size_t)l * 3 * C * C, p.qkvb + l * 3 * C, N, C, 3 * C, s);
        gpt2_attention_forward(model, atty, a.att_lse + l * a.lse_stride, qkv, B, T, C, NH, s);
        matmul_forward(a.btc, atty, p.attprojw + (size_t)l * C * C, p.attprojb + l * C, N, C, C, s);
        fused_residual_layernorm_forward(residual2, ln2, a.ln2_mean + l * BTs, a.ln2_rstd + l * BTs,
                                         residual, a.btc, p.ln2w + l * C, p.ln2b + l * C, N, C, s);
        matmul_forward(fch, ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, N, C, 4 * C, s);
        gelu_forward(fch_gelu, fch, (size_t)N * 4 * C, s);
        matmul_forward(a.btc, fch_gelu, p.fcprojw + (size_t)l * 4 * C * C, p.fcprojb + l * C, N, 4 * C, C, s);
        if (l + 1 < L) {
            floatX* next_ln1 = a.ln1 + (ln_all ? (l + 1) * BTC : 0);
            fused_residual_layernorm_forward(residual3, next_ln1, a.ln1_mean + (l + 1) * BTs,
                                             a.ln1_rstd + (l + 1) * BTs, residual2, a.btc,
                                             p.ln1w + (l + 1) * C, p.ln1b + (l + 1) * C, N, C, s);
        } else {
            fused_residual_layernorm_forward(residual3, a.lnf, a.lnf_mean, a.lnf_rstd, residual2, a.btc,
                                             p.lnfw, p.lnfb, N, C, s);
        }
    }
    matmul_forward(a.logits, a.lnf, p.wte, NULL, N, C, Vp, s);
    if (targets != NULL) {
        fused_classifier(a.logits, a.losses, model->targets, 0.0f, 0, N, V, Vp, s);
        cudaCheck(cudaMemcpyAsync(model->host_losses, a.losses, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost, s));
        cudaCheck(cudaStreamSynchronize(s));
        model->mean_loss = host_sum(model->host_losses, N) / N;
    } else {
        model->mean_loss = -1.0f;
    }
}

// ----------------------------------------------------------------------------
// backward pass: gradients accumulate into grads_memory (fp32) until gpt2_zero_grad

void gpt2_zero_grad(GPT2* model) {
    cudaCheck(cudaMemsetAsync(model->grads_memory, 0, model->num_parameters_padded * sizeof(float), model->stream));
    cudaCheck(cudaMemsetAsync(model->acts.losses, 0, (size_t)model->batch_size * model->seq_len * sizeof(float),
                              model->stream));
    model->micro_steps = 0;
}

// call after gpt2_forward(model, inputs, NULL or targets, B, T) on the same batch. dloss is the weight of
// each position's loss in the objective: 1/(B*T*grad_accum) for the mean over a step's tokens.
void gpt2_backward(GPT2* model, const int* targets, float dloss) {
    GPT2Config c = model->config;
    int B = model->batch_size, T = model->seq_len;
    int L = c.num_layers, C = c.channels, NH = c.num_heads, V = c.vocab_size, Vp = c.padded_vocab_size;
    int N = B * T;
    cudaStream_t s = model->stream;
    ParameterTensors p = model->params;
    GradTensors g = model->grads;
    ActivationTensors a = model->acts;
    int ln_all = model->recompute < 2, gelu_all = model->recompute < 1;
    size_t BTC = a.btc_stride, BTs = a.bt_stride;  // per-layer strides (not B*T*C: see ActivationTensors)
    float* scratch = model->scratch;
    cudaCheck(cudaMemcpyAsync(model->targets, targets, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, s));

    // classifier: losses accumulate (for the step's mean loss), logits become dlogits in place
    fused_classifier(a.logits, a.losses, model->targets, dloss, 1, N, V, Vp, s);
    matmul_backward(a.btc, g.wte, NULL, scratch, a.logits, a.lnf, p.wte, NULL, N, C, Vp, s);
    cudaCheck(cudaMemsetAsync(a.dresidual, 0, (size_t)N * C * sizeof(floatX), s));
    layernorm_backward(a.dresidual, g.lnfw, g.lnfb, scratch, a.btc, a.residual3 + (size_t)(L - 1) * BTC, p.lnfw,
                       a.lnf_mean, a.lnf_rstd, N, C, s);

    for (int l = L - 1; l >= 0; l--) {
        floatX* residual = l == 0 ? a.encoded : a.residual3 + (size_t)(l - 1) * BTC;
        floatX* ln1 = a.ln1 + (ln_all ? l * BTC : 0);
        floatX* ln2 = a.ln2 + (ln_all ? l * BTC : 0);
        floatX* qkv = a.qkv + (size_t)l * 3 * BTC;
        floatX* atty = a.atty + (size_t)l * BTC;
        floatX* residual2 = a.residual2 + (size_t)l * BTC;
        floatX* fch = a.fch + (size_t)l * 4 * BTC;
        floatX* fch_gelu = a.fch_gelu + (gelu_all ? (size_t)l * 4 * BTC : 0);
        float* ln1_mean = a.ln1_mean + l * BTs;
        float* ln1_rstd = a.ln1_rstd + l * BTs;
        float* ln2_mean = a.ln2_mean + l * BTs;
        float* ln2_rstd = a.ln2_rstd + l * BTs;
        // dresidual holds d(loss)/d(residual3[l]), which is also the gradient flowing into residual2[l]
        if (!gelu_all) { gelu_forward(fch_gelu, fch, (size_t)N * 4 * C, s); }
        // bt4c = d(loss)/d(fch): GELU's backward is fused into this matmul (matmul.cuh)
        matmul_backward(a.bt4c, g.fcprojw + (size_t)l * 4 * C * C, g.fcprojb + l * C, scratch, a.dresidual,
                        fch_gelu, p.fcprojw + (size_t)l * 4 * C * C, fch, N, 4 * C, C, s);
        if (!ln_all) { layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, p.ln2w + l * C, p.ln2b + l * C, N, C, s); }
        matmul_backward(a.btc, g.fcw + (size_t)l * 4 * C * C, g.fcb + l * 4 * C, scratch, a.bt4c, ln2,
                        p.fcw + (size_t)l * 4 * C * C, NULL, N, C, 4 * C, s);
        layernorm_backward(a.dresidual, g.ln2w + l * C, g.ln2b + l * C, scratch, a.btc, residual2, p.ln2w + l * C,
                           ln2_mean, ln2_rstd, N, C, s);
        matmul_backward(a.btc, g.attprojw + (size_t)l * C * C, g.attprojb + l * C, scratch, a.dresidual, atty,
                        p.attprojw + (size_t)l * C * C, NULL, N, C, C, s);
        gpt2_attention_backward(model, a.bt4c, a.att_delta, a.btc, qkv, atty, a.att_lse + l * a.lse_stride, B, T,
                                C, NH, s);
        if (!ln_all) { layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, p.ln1w + l * C, p.ln1b + l * C, N, C, s); }
        matmul_backward(a.btc, g.qkvw + (size_t)l * 3 * C * C, g.qkvb + l * 3 * C, scratch, a.bt4c, ln1,
                        p.qkvw + (size_t)l * 3 * C * C, NULL, N, C, 3 * C, s);
        layernorm_backward(a.dresidual, g.ln1w + l * C, g.ln1b + l * C, scratch, a.btc, residual, p.ln1w + l * C,
                           ln1_mean, ln1_rstd, N, C, s);
    }
    int *token, *start, *pos;
    bucket_parts(model, model->bucket_memory, &token, &start, &pos);
    encoder_backward(g.wte, g.wpe, a.dresidual, token, start, pos, model->num_buckets, B, T, C, s);
    model->micro_steps++;
}

float gpt2_sum_over_ranks(GPT2* model, float x);

// mean loss over every position of the micro batches since gpt2_zero_grad (syncs; also over all ranks)
float gpt2_accumulated_loss(GPT2* model) {
    int N = model->batch_size * model->seq_len;
    cudaCheck(cudaMemcpyAsync(model->host_losses, model->acts.losses, (size_t)N * sizeof(float),
                              cudaMemcpyDeviceToHost, model->stream));
    cudaCheck(cudaStreamSynchronize(model->stream));
    float sum = host_sum(model->host_losses, N);
    float mean = model->micro_steps > 0 ? sum / ((float)N * model->micro_steps) : 0.0f;
    mean = gpt2_sum_over_ranks(model, mean) / model->multi_gpu->num_processes;
    model->mean_loss = mean;
    return mean;
}

// ----------------------------------------------------------------------------
// optimizer: average gradients over ranks, global norm, AdamW on this rank's shard, gather the weights

void gpt2_reduce_grads(GPT2* model) {
    multi_gpu_reduce_grads(model->grads_memory, model->num_parameters_padded, model->multi_gpu, model->stream);
}

// global L2 norm of the (averaged) gradients; call after gpt2_reduce_grads
float gpt2_grad_norm(GPT2* model) {
    const float* g = model->grads_memory + model->shard_offset;
    global_norm_squared(model->norm_out, g, model->shard_size, model->scratch, model->stream);
    if (model->multi_gpu->zero_stage == 1) { multi_gpu_sum_scalar(model->norm_out, model->multi_gpu, model->stream); }
    float sq = 0.0f;
    cudaCheck(cudaMemcpyAsync(&sq, model->norm_out, sizeof(float), cudaMemcpyDeviceToHost, model->stream));
    cudaCheck(cudaStreamSynchronize(model->stream));
    return sqrtf(sq);
}

// the first micro batch's loss, queued right after its backward (acts.losses then holds only its losses)
// and summed after the step (gpt2_loss_micro1): the same value a forward with targets gives, without a
// wait for the host in the middle of the step
void gpt2_queue_loss_micro1(GPT2* model) {
    size_t N = (size_t)model->batch_size * model->seq_len;
    cudaCheck(cudaMemcpyAsync(model->host_losses + N, model->acts.losses, N * sizeof(float), cudaMemcpyDeviceToHost,
                              model->stream));
}

// after the step's last synchronization: the queued micro batch's mean loss (summed as gpt2_forward does)
float gpt2_loss_micro1(const GPT2* model) {
    int N = model->batch_size * model->seq_len;
    return host_sum(model->host_losses + N, N) / N;
}

// the first micro batch's gradient, queued right after its backward (this rank's whole buffer, before any
// reduction): its squared norm goes to norm_out[1] and is read with the step's (gpt2_grad_norm_micro1), so
// measuring it adds one pass over the gradients and no wait in the middle of the step. With the step's norm it gives the
// gradient noise scale (llmc/run.h), as the CPU trainer measures it.
void gpt2_queue_grad_norm_micro1(GPT2* model) {
    global_norm_squared(model->norm_out + 1, model->grads_memory, model->num_parameters, model->scratch, model->stream);
}

// after gpt2_grad_norm: the queued norm, as the norm of that micro batch's mean gradient (its loss was
// scaled by 1/grad_accum of a step's)
float gpt2_grad_norm_micro1(GPT2* model, int grad_accum) {
    float sq = 0.0f;
    cudaCheck(cudaMemcpyAsync(&sq, model->norm_out + 1, sizeof(float), cudaMemcpyDeviceToHost, model->stream));
    cudaCheck(cudaStreamSynchronize(model->stream));
    return sqrtf(sq) * (float)grad_accum;
}

// the seed of the stochastic rounding of the weights written by training step `step` (1-based; 0: the
// initial weights). Invariant after every step s, whatever it did (update, Predict, rollback, skipped):
// params == round(master, seed(s)). So the floatX copy is a pure function of the master weights and the
// step, and a checkpoint of fp32 master weights is enough to continue bit-exactly.
static uint32_t gpt2_step_seed(const GPT2* model, int step) {
    uint64_t x = ((uint64_t)model->rounding_seed << 32) ^ (uint64_t)(uint32_t)step;
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return (uint32_t)x;
}

// rebuild the floatX copy from the master weights (this rank's shard, then gathered) with step's seed
void gpt2_sync_floatX(GPT2* model, int step) {
    size_t lo = model->shard_offset;
    round_to_floatX_range(model->params_memory + lo, model->master_weights + lo, model->shard_size, lo,
                          gpt2_step_seed(model, step), model->stream);
    if (model->multi_gpu->zero_stage == 1) {
        multi_gpu_all_gather(model->params_memory, model->num_parameters_padded, sizeof(floatX), model->multi_gpu,
                             model->stream);
    }
    cudaCheck(cudaStreamSynchronize(model->stream));
}

// AdamW on this rank's shard, one launch per tensor (the decay differs), then the weights are gathered.
// t: AdamW's 1-based update count (bias correction); step: the 1-based training step (rounding seed)
void gpt2_update(GPT2* model, float lr, float beta1, float beta2, float eps, float weight_decay,
                 float grad_scale, int t, int step) {
    uint32_t seed = gpt2_step_seed(model, step);
    WeightAverage* avg = model->average;  // the EMA of the master weights, in the same kernel (llmc/average.h)
    int ema = average_on(avg) && avg->ema_decay > 0.0f;
    if (ema && avg->swapped) { fatal("model: gpt2_update with the kept weights swapped in"); }
    size_t lo = model->shard_offset, hi = model->shard_offset + model->shard_size, start = 0;
    for (int i = 0; i <= NUM_PARAMETER_TENSORS; i++) {
        // the padding after the last tensor is one more range (zero gradients: it stays zero)
        size_t end = i < NUM_PARAMETER_TENSORS ? start + model->param_sizes[i] : model->num_parameters_padded;
        size_t a = start > lo ? start : lo, b = end < hi ? end : hi;
        if (a < b) {
            float wd = i < NUM_PARAMETER_TENSORS && PARAM_DECAYS[i] ? weight_decay : 0.0f;
            adamw_update_averaged(model->master_weights + a, model->params_memory + a, model->grads_memory + a,
                                  model->m_memory + (a - lo), model->v_memory + (a - lo), b - a, a, lr, beta1, beta2,
                                  t, eps, wd, grad_scale, seed, ema ? avg->weights + a : NULL,
                                  ema ? avg->ema_decay : 0.0f, model->stream);
        }
        start = end;
    }
    if (model->multi_gpu->zero_stage == 1) {
        multi_gpu_all_gather(model->params_memory, model->num_parameters_padded, sizeof(floatX), model->multi_gpu,
                             model->stream);
    }
}

// AdamW m and v -> host (P floats each); with ZeRO-1 the shards are gathered through the gradient buffer,
// which is idle between an update and the next zero_grad (all ranks must call)
void gpt2_optimizer_to_host(GPT2* model, float* m_host, float* v_host) {
    float* src[2] = {model->m_memory, model->v_memory};
    float* dst[2] = {m_host, v_host};
    for (int k = 0; k < 2; k++) {
        const float* full = src[k];
        if (model->multi_gpu->zero_stage == 1) {
            cudaCheck(cudaMemcpyAsync(model->grads_memory + model->shard_offset, src[k],
                                      model->shard_size * sizeof(float), cudaMemcpyDeviceToDevice, model->stream));
            multi_gpu_all_gather(model->grads_memory, model->num_parameters_padded, sizeof(float), model->multi_gpu,
                                 model->stream);
            full = model->grads_memory;
        }
        cudaCheck(cudaMemcpyAsync(dst[k], full, model->num_parameters * sizeof(float), cudaMemcpyDeviceToHost,
                                  model->stream));
    }
    cudaCheck(cudaStreamSynchronize(model->stream));
}

// host m and v (P floats each) -> this rank's shard of the optimizer state
void gpt2_optimizer_from_host(GPT2* model, const float* m_host, const float* v_host) {
    size_t lo = model->shard_offset, P = model->num_parameters;
    size_t n = lo >= P ? 0 : (lo + model->shard_size <= P ? model->shard_size : P - lo);
    cudaCheck(cudaMemsetAsync(model->m_memory, 0, model->shard_size * sizeof(float), model->stream));
    cudaCheck(cudaMemsetAsync(model->v_memory, 0, model->shard_size * sizeof(float), model->stream));
    cudaCheck(cudaMemcpyAsync(model->m_memory, m_host + lo, n * sizeof(float), cudaMemcpyHostToDevice, model->stream));
    cudaCheck(cudaMemcpyAsync(model->v_memory, v_host + lo, n * sizeof(float), cudaMemcpyHostToDevice, model->stream));
    cudaCheck(cudaStreamSynchronize(model->stream));
}

// sum of a host float over all ranks (the value itself with one process)
float gpt2_sum_over_ranks(GPT2* model, float x) {
    if (model->multi_gpu->num_processes == 1) { return x; }
    cudaCheck(cudaMemcpyAsync(model->norm_out, &x, sizeof(float), cudaMemcpyHostToDevice, model->stream));
    multi_gpu_sum_scalar(model->norm_out, model->multi_gpu, model->stream);
    cudaCheck(cudaMemcpyAsync(&x, model->norm_out, sizeof(float), cudaMemcpyDeviceToHost, model->stream));
    cudaCheck(cudaStreamSynchronize(model->stream));
    return x;
}

void gpt2_free(GPT2* model) {
    void* dev[] = {model->params_memory, model->master_weights, model->grads_memory, model->m_memory,
                   model->v_memory, model->inputs, model->targets, model->bucket_memory, model->scratch,
                   model->norm_out};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) { cudaCheck(cudaFree(dev[i])); }
    ActivationTensors* a = &model->acts;
    void* acts[] = {a->encoded, a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->atty, a->att_lse, a->residual2,
                    a->ln2, a->ln2_mean, a->ln2_rstd, a->fch, a->fch_gelu, a->residual3, a->lnf, a->lnf_mean,
                    a->lnf_rstd, a->logits, a->losses, a->bt4c, a->btc, a->dresidual, a->att_delta};
    for (size_t i = 0; i < sizeof(acts) / sizeof(acts[0]); i++) { cudaCheck(cudaFree(acts[i])); }
    cudaCheck(cudaFreeHost(model->host_losses));
    free(model->bucket_host);
    free(model->bucket_count);
    cudaCheck(cudaStreamDestroy(model->stream));
#ifdef ENABLE_CUDNN
    cudnn_att_destroy();
#endif
}

#ifndef TESTING
// ----------------------------------------------------------------------------
// command line: the shared table (llmc/config.h) plus the GPU flags

static const ArgSpec GPU_ARGS[] = {
    ARG("-r", ARG_INT, TrainConfig, recompute, 0, 2, 0, "recompute in the backward pass: 0 none, 1 GELU, 2 GELU + LayerNorm"),
    ARG("-z", ARG_INT, TrainConfig, zero_stage, 0, 1, 0, "ZeRO stage: 0 replicated optimizer, 1 sharded optimizer state"),
    ARG("-pn", ARG_INT, TrainConfig, num_processes, 1, 1 << 16, 0, "number of processes (one per GPU)"),
    ARG("-pr", ARG_INT, TrainConfig, process_rank, 0, 1 << 16, 0, "rank of this process"),
    ARG("-pg", ARG_INT, TrainConfig, gpus_per_node, 1, 1 << 10, 0, "GPUs per node (rank % this = the local GPU)"),
    ARG("-pi", ARG_STR, TrainConfig, init_method, 0, 0, 0, "multi-process init: mpi (USE_MPI=1 builds) | fs | tcp"),
    ARG("-pf", ARG_STR, TrainConfig, fs_path, 0, 0, 0, "-pi fs: shared directory for the NCCL id"),
    ARG("-ps", ARG_STR, TrainConfig, server_ip, 0, 0, 0, "-pi tcp: IP address of rank 0"),
};

static const ArgTable GPU_TABLE = {GPU_ARGS, (int)(sizeof(GPU_ARGS) / sizeof(GPU_ARGS[0])), NULL, NULL, 0, NULL, 0, NULL, NULL};
static const ArgTable* const GPU_TABLES[] = {&GPU_TABLE, HYBRID_ARG_TABLES};  // hybrid/: --hybrid's and each method's

static const TrainCli CLI = {
    "./train_gpt2cu", "GPT-2 training on NVIDIA GPUs, " PRECISION_NAME, GPU_TABLES, (int)(sizeof(GPU_TABLES) / sizeof(GPU_TABLES[0])),
    "Example: ./train_gpt2cu -e d12 -b 16 -t 1024 -d 524288 -x 100 -o out/d12\n"
    "Text from a model file: ./train_gpt2cu -e out/d12/model_00000100.bin -x 0 --prompt \"And God said\" -g 200\n"
    "Two GPUs, one process each: ./train_gpt2cu -pn 2 -pr 0 -pi fs -pf /tmp/run1 ... &\n"
    "                            ./train_gpt2cu -pn 2 -pr 1 -pi fs -pf /tmp/run1 ...\n",
};

// the GPU flags' checks (the shared ones are in config_parse)
static void check_gpu_args(const TrainConfig* c) {
    if (c->process_rank >= c->num_processes && strcmp(c->init_method, "mpi") != 0) {
        fatal("flag -pr: rank %d is not below the number of processes -pn %d", c->process_rank, c->num_processes);
    }
    if (strcmp(c->init_method, "mpi") != 0 && strcmp(c->init_method, "fs") != 0 && strcmp(c->init_method, "tcp") != 0) {
        fatal("flag -pi: expected mpi, fs or tcp, got '%s'", c->init_method);
    }
}

// ----------------------------------------------------------------------------
// the trainer: the run (llmc/run.h) and the model, its device buffers and staging

// dense peak TFLOP/s for the MFU column: bf16 tensor cores, and plain fp32 (PRECISION=FP32)
typedef struct { const char* name; double bf16, fp32; } GpuPeak;
static const GpuPeak GPU_PEAKS[] = {
    {"H200", 989.0, 67.0},  {"H100 PCIe", 756.0, 51.0}, {"H100", 989.0, 67.0}, {"A100", 312.0, 19.5},
    {"A10G", 70.0, 31.2},   {"A10", 125.0, 31.2},       {"L40S", 362.0, 91.6}, {"L4", 121.0, 30.3},
    {"RTX 4090", 165.0, 82.6}, {"RTX 3090", 71.0, 35.6},
};

static double gpu_peak_flops(const char* device_name) {
    for (size_t i = 0; i < sizeof(GPU_PEAKS) / sizeof(GPU_PEAKS[0]); i++) {
        if (strstr(device_name, GPU_PEAKS[i].name) != NULL) {
#if defined(ENABLE_FP32)
            return GPU_PEAKS[i].fp32 * 1e12;
#else
            return GPU_PEAKS[i].bf16 * 1e12;
#endif
        }
    }
    return 0.0;  // unknown GPU: no MFU
}

typedef struct {
    TrainRun run;
    MultiGpuConfig multi_gpu;
    GPT2 model;
    float* host_params;       // (P) checkpoint staging
    float* host_m;            // (P)
    float* host_v;            // (P)
    float* host_trained;      // (P) checkpoint staging of the trained weights, where the model file keeps others
    WeightAverage avg;        // the weights to evaluate and keep where they are not the trained ones (--ema):
                              // device memory (Ppad)
    int* gen_batch;           // (B*T) sampling input: the context window, padded
    floatX* gen_row;          // (Vp) host, one row of logits
    float* gen_logits;        // (V) host, that row in fp32 for the sampler
    double peak_device_mib;   // highest device memory in use seen at the logged points
    HybridPhase last_phase;   // for the device memory log at phase changes
    char device_name[256];
    HybridState hybrid;       // hybrid mode (hybrid/hybrid.h decides on the host); zeroed without --hybrid
    HybridDevice hybrid_dev;  // its device buffers (hybrid/device.cuh applies)
} Trainer;

// device memory in use now; remembered as the peak when it is the highest seen; logged with `where`
static void log_device_memory(Trainer* tr, const char* where) {
    double used = cuda_used_mib();
    if (used > tr->peak_device_mib) { tr->peak_device_mib = used; }
    if (tr->run.rank0) {
        printf("device memory (%s): %.1f MiB in use, %.1f MiB allocated by the trainer\n", where, used,
               cuda_bytes_allocated / (1024.0 * 1024.0));
    }
}

// ----------------------------------------------------------------------------
// hybrid mode on the device

// the model's flat buffers as hybrid mode reads and writes them (hybrid/device.cuh)
static HybridBuffers hybrid_buffers(GPT2* model) {
    HybridBuffers b = {model->master_weights, model->params_memory, model->grads_memory, model->m_memory,
                       model->v_memory, model->num_parameters, model->num_parameters_padded, model->shard_offset,
                       model->shard_size, model->multi_gpu, model->stream};
    return b;
}

// a Predict step: theta += coef_b * d_b along the drift on this rank's shard (no forward, no backward, no
// batch, no gradient all-reduce); with ZeRO-1 the floatX weights are then gathered
static StepResult train_predict_step(Trainer* tr, const HybridPlan* plan) {
    StepResult r;
    memset(&r, 0, sizeof(r));
    double t0 = clock_seconds();
    HybridBuffers b = hybrid_buffers(&tr->model);
    hybrid_device_predict(&tr->hybrid_dev, &tr->hybrid, plan, &b, gpt2_step_seed(&tr->model, tr->run.step + 1));
    r.loss = r.grad_norm = r.grad_norm_micro1 = r.loss_micro1 = NAN;
    r.ms = (clock_seconds() - t0) * 1000.0;
    tr->run.train_time_s += r.ms / 1000.0;
    return r;
}

// one Full (or Correct) step: every process steps the shared loader through grad_accum * processes micro
// batches and trains on its own (k % processes == rank), so the data order does not depend on the process
// count; then gradients are averaged, clipped, and AdamW updates the weights. A non-finite loss or norm
// never reaches the weights: the update is skipped (on every rank, since the values are global).
// Hybrid mode (plan->check): the first micro batch's loss goes to hybrid_check, which may roll a Predict run
// back while the gradient buffer still holds the weights from before it (so zero_grad comes after it).
static StepResult train_full_step(Trainer* tr, const HybridPlan* plan, float lr) {
    StepResult r;
    memset(&r, 0, sizeof(r));
    r.grad_norm_micro1 = r.loss_micro1 = NAN;
    double t0 = clock_seconds();
    GPT2* model = &tr->model;
    DataLoader* loader = &tr->run.train_loader;
    HybridBuffers hb = hybrid_buffers(model);
    int B = tr->run.cfg.B, T = tr->run.cfg.T, np = tr->multi_gpu.num_processes;
    int hybrid = hybrid_enabled(&tr->hybrid);
    // the gradient noise scale's input: rank 0's first micro batch alone (the logging rank; its micro batch
    // is the step's first on every process count), when a step has more than one
    int micro1 = tr->multi_gpu.process_rank == 0 && tr->run.grad_accum * np > 1;
    if (plan->check) {
        if (!tr->run.cfg.overfit) { dataloader_next_batch(loader); }
        // the first micro batch (rank 0's) is the check batch: one decision, the same on every rank
        int rank0 = tr->multi_gpu.process_rank == 0;
        if (rank0) { gpt2_forward(model, loader->inputs, loader->targets, B, T); }
        float loss = gpt2_sum_over_ranks(model, rank0 ? model->mean_loss : 0.0f);
        if (hybrid_check(&tr->hybrid, loss)) {
            hybrid_device_rollback(&hb, gpt2_step_seed(model, tr->run.step + 1));
            log_device_memory(tr, "rollback");
            if (rank0) { gpt2_forward(model, loader->inputs, loader->targets, B, T); }
        }
        gpt2_zero_grad(model);
        // rank 0 trains on the check batch; the others read on to their own first micro batch
        for (int k = 1; k <= tr->multi_gpu.process_rank; k++) {
            if (!tr->run.cfg.overfit) { dataloader_next_batch(loader); }
        }
        if (!rank0) { gpt2_forward(model, loader->inputs, NULL, B, T); }
        gpt2_backward(model, loader->targets, 1.0f / ((float)B * T * tr->run.grad_accum));
        if (micro1) { gpt2_queue_grad_norm_micro1(model); }
        for (int k = tr->multi_gpu.process_rank + 1; k < tr->run.grad_accum * np; k++) {
            if (!tr->run.cfg.overfit) { dataloader_next_batch(loader); }
            if (k % np != tr->multi_gpu.process_rank) { continue; }
            gpt2_forward(model, loader->inputs, NULL, B, T);
            gpt2_backward(model, loader->targets, 1.0f / ((float)B * T * tr->run.grad_accum));
        }
    } else {
        gpt2_zero_grad(model);
        for (int k = 0; k < tr->run.grad_accum * np; k++) {
            if (!tr->run.cfg.overfit) { dataloader_next_batch(loader); }
            if (k % np != tr->multi_gpu.process_rank) { continue; }
            gpt2_forward(model, loader->inputs, NULL, B, T);
            gpt2_backward(model, loader->targets, 1.0f / ((float)B * T * tr->run.grad_accum));
            if (k == 0 && micro1) { gpt2_queue_grad_norm_micro1(model); }
            if (k == 0 && plan->observe) { gpt2_queue_loss_micro1(model); }  // rank 0's
        }
    }
    r.loss = gpt2_accumulated_loss(model);
    gpt2_reduce_grads(model);
    r.grad_norm = gpt2_grad_norm(model);
    if (micro1) { r.grad_norm_micro1 = gpt2_grad_norm_micro1(model, tr->run.grad_accum); }
    if (!isfinite(r.loss) || !isfinite(r.grad_norm)) {
        r.skipped = 1;
        gpt2_sync_floatX(model, tr->run.step + 1);  // keeps params == round(master, seed(step))
        if (hybrid) { hybrid_skip_update(&tr->hybrid); }
    } else {
        float grad_scale = r.grad_norm > tr->run.cfg.grad_clip ? tr->run.cfg.grad_clip / r.grad_norm : 1.0f;
        tr->run.adam_steps++;
        if (hybrid) {  // the same AdamW, fused with the look-ahead
            hybrid_device_update(&tr->hybrid_dev, &tr->hybrid, &hb, grad_scale, tr->run.adam_steps,
                                 gpt2_step_seed(model, tr->run.step + 1));
        } else {
            gpt2_update(model, lr, tr->run.cfg.beta1, tr->run.cfg.beta2, ADAM_EPS, tr->run.cfg.weight_decay, grad_scale,
                        tr->run.adam_steps, tr->run.step + 1);
        }
    }
    cudaCheck(cudaStreamSynchronize(model->stream));
    if (plan->observe) {  // rank 0's first micro batch, every rank's history (hybrid/predict.h)
        float l = tr->multi_gpu.process_rank == 0 ? gpt2_loss_micro1(model) : 0.0f;
        r.loss_micro1 = np > 1 ? gpt2_sum_over_ranks(model, l) : l;
    }
    tr->run.tokens += (uint64_t)tr->run.grad_accum * np * B * T;
    tr->run.backward += (uint64_t)tr->run.grad_accum * np;
    r.ms = (clock_seconds() - t0) * 1000.0;
    tr->run.train_time_s += r.ms / 1000.0;
    return r;
}


// ----------------------------------------------------------------------------
// evaluation, text, checkpoints: val loss at the trained weights and at the kept ones; samples and the model
// file at the kept ones

// the master weights hold the weights to evaluate and keep (in = 1) or the trained ones (in = 0): an exact
// swap of this rank's shard with the set kept apart (llmc/average.h), where the run keeps one; the floatX copy
// is rounded again with this step's seed (so after swapping back it is as the step left it) and gathered.
// Every rank calls it.
static void use_kept_weights(Trainer* tr, int in) {
    WeightAverage* a = &tr->avg;
    GPT2* model = &tr->model;
    if (!average_on(a) || a->swapped == in) { return; }
    size_t lo = model->shard_offset;
    average_swap_device(model->master_weights + lo, a->weights + lo, model->shard_size, model->stream);
    a->swapped = in;
    gpt2_sync_floatX(model, tr->run.step);
}

// mean val loss over the run's val batches (the same batches every time), split over the processes
static float evaluate(Trainer* tr) {
    TrainRun* run = &tr->run;
    DataLoader* val = &run->val_loader;
    size_t n = run_val_begin(run);
    int np = run->num_processes, rank = run->cfg.process_rank;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        dataloader_next_batch(val);
        if (np > 1 && (int)(i % np) != rank) { continue; }
        gpt2_forward(&tr->model, val->inputs, val->targets, run->cfg.B, run->cfg.T);
        sum += tr->model.mean_loss;
    }
    if (np > 1) { sum = gpt2_sum_over_ranks(&tr->model, (float)sum); }
    return (float)(sum / n);
}

// val loss at the kept weights; NAN where the run keeps none apart, or before its first update (they are the
// trained ones then)
static float evaluate_kept(Trainer* tr) {
    if (!average_on(&tr->avg) || tr->run.adam_steps == 0) { return NAN; }
    use_kept_weights(tr, 1);
    float loss = evaluate(tr);
    use_kept_weights(tr, 0);
    return loss;
}

// the prompt, then -g tokens (rank 0). Each forward runs on the full allocated (B,T) batch with the
// context window at the start of the first row; causality makes the padding after it irrelevant.
static void generate(Trainer* tr) {
    GPT2* model = &tr->model;
    Sampler* s = &tr->run.sampler;
    int V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    sampler_begin(s, &tr->run.tokenizer);
    for (int t = s->prompt_len; t < s->end; t++) {
        int n = sampler_context_len(t, tr->run.cfg.T);
        memcpy(tr->gen_batch, s->tokens + (t - n), (size_t)n * sizeof(int));
        gpt2_forward(model, tr->gen_batch, NULL, tr->run.cfg.B, tr->run.cfg.T);
        cudaCheck(cudaMemcpy(tr->gen_row, model->acts.logits + (size_t)(n - 1) * Vp, Vp * sizeof(floatX), cudaMemcpyDeviceToHost));
        for (int i = 0; i < V; i++) { tr->gen_logits[i] = (float)tr->gen_row[i]; }
        sampler_push(s, t, tr->gen_logits, V, &tr->run.tokenizer);
    }
    sampler_end();
}

// model (fp32 master weights), state (AdamW m and v gathered to one llm.c-layout file, so a run can
// resume on another number of GPUs). Every rank takes part in the gathers; rank 0 writes.
// The model file holds the weights to keep; where those are not the trained ones, the state carries the
// trained ones (swapped out of the master weights meanwhile, gathered like them).
static void checkpoint(Trainer* tr) {
    GPT2* model = &tr->model;
    HybridBuffers hb = hybrid_buffers(model);
    int hybrid = hybrid_enabled(&tr->hybrid);
    if (hybrid) { hybrid_device_checkpoint_stage(&tr->hybrid_dev, &tr->hybrid, &hb); }
    use_kept_weights(tr, 1);
    gpt2_params_to_host(model, tr->host_params);
    if (average_on(&tr->avg)) {
        multi_gpu_all_gather(tr->avg.weights, model->num_parameters_padded, sizeof(float), model->multi_gpu, model->stream);
        cudaCheck(cudaMemcpyAsync(tr->host_trained, tr->avg.weights, model->num_parameters * sizeof(float),
                                  cudaMemcpyDeviceToHost, model->stream));
        cudaCheck(cudaStreamSynchronize(model->stream));
    }
    use_kept_weights(tr, 0);
    gpt2_optimizer_to_host(model, tr->host_m, tr->host_v);
    if (hybrid) { hybrid_device_checkpoint_done(&tr->hybrid_dev, &tr->hybrid, &hb); }
    if (tr->run.rank0) {
        char path[4096];
        checkpoint_path(path, sizeof(path), tr->run.cfg.output_dir, "model", tr->run.step);
        model_write(path, &model->config, tr->host_params, model->num_parameters);
        run_state_write(&tr->run, model->num_parameters, tr->host_m, tr->host_v,
                        average_on(&tr->avg) ? tr->host_trained : NULL);
        if (hybrid) { hybrid_device_checkpoint_write(&tr->hybrid_dev, &tr->hybrid, &tr->run); }
        run_state_commit(&tr->run);
    }
    // nobody continues (or exits) before rank 0 has finished writing
    gpt2_sum_over_ranks(model, 0.0f);
}

// device memory after the first step and at every phase change
static void log_device_memory_after_step(Trainer* tr) {
    if (tr->run.step == 1) { log_device_memory(tr, "after the first step"); }
    if (hybrid_enabled(&tr->hybrid) && hybrid_phase(&tr->hybrid) != tr->last_phase) {
        char where[64];
        snprintf(where, sizeof(where), "step %d, %s", tr->run.step, hybrid_phase_name(&tr->hybrid));
        log_device_memory(tr, where);
        tr->last_phase = hybrid_phase(&tr->hybrid);
    }
}

int main(int argc, char** argv) {
    static Trainer tr;  // large: not on the stack
    TrainRun* run = &tr.run;
    TrainConfig* cfg = &run->cfg;
    config_parse(cfg, argc, argv, &CLI);
    run->cli = &CLI;
    check_gpu_args(cfg);
    tr.multi_gpu = multi_gpu_config_init(cfg->num_processes, cfg->process_rank, cfg->gpus_per_node,
                                         cfg->init_method, cfg->fs_path, cfg->server_ip, cfg->zero_stage);
    run->rank0 = tr.multi_gpu.process_rank == 0;
    int np = run->num_processes = tr.multi_gpu.num_processes;
    cfg->process_rank = tr.multi_gpu.process_rank;
    if (cfg->total_batch != -1 && cfg->total_batch % (cfg->B * cfg->T * np) != 0) {
        fatal("flag -d: total batch %d is not a multiple of B*T*processes = %d", cfg->total_batch, cfg->B * cfg->T * np);
    }
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, tr.multi_gpu.local_device_idx));
    snprintf(tr.device_name, sizeof(tr.device_name), "%s", prop.name);
    run->peak_flops = gpu_peak_flops(prop.name) * np;
    if (cfg->output_dir != NULL && run->rank0) { config_make_dirs(cfg->output_dir); }
    matmul_init();

    // the model: from the latest checkpoint when resuming, else from -e
    int resume_step = run_state_resume_step(run);
    uint32_t rounding_seed = (uint32_t)((uint64_t)cfg->seed ^ ((uint64_t)cfg->seed >> 32));
    char path[4096];
    int depth;
    if (run_state_model_source(cfg, resume_step, path, sizeof(path), &depth)) {
        gpt2_build_from_checkpoint(&tr.model, path, &tr.multi_gpu, rounding_seed, 0);
    } else {
        gpt2_build_from_random(&tr.model, depth, shard_vocab_size(cfg->train_pattern), (uint64_t)cfg->seed,
                               &tr.multi_gpu, rounding_seed);
    }
    if (cfg->T > tr.model.config.max_seq_len) {
        fatal("flag -t: sequence length %d exceeds the model's maximum %d", cfg->T, tr.model.config.max_seq_len);
    }
    gpt2_allocate(&tr.model, cfg->B, cfg->T, cfg->recompute);
    const GPT2Config* mc = &tr.model.config;
    size_t P = tr.model.num_parameters;
    tr.gen_batch = (int*)callocCheck((size_t)cfg->B * cfg->T, sizeof(int));
    tr.gen_row = (floatX*)mallocCheck((size_t)mc->padded_vocab_size * sizeof(floatX));
    tr.gen_logits = (float*)mallocCheck((size_t)mc->vocab_size * sizeof(float));

    // data, schedule, sampler, logs; -x 0: text from the model, no training
    if (cfg->max_steps == 0 && (cfg->ema > 0.0f || hybrid_flags.enabled)) {  // nothing trains to average or predict
        fatal("flag %s: -x 0 only writes text from the model", cfg->ema > 0.0f ? "--ema" : "--hybrid");
    }
    run_setup(run, mc->vocab_size, resume_step);
    run_resolve_beta2(run, resume_step);  // --beta2 -1: by the tokens per step, or the checkpoint's
    if (cfg->max_steps == 0) {
        if (run->rank0) { generate(&tr); }
    } else {
        cudaCheck(cudaMallocHost((void**)&tr.host_params, P * sizeof(float)));
        cudaCheck(cudaMallocHost((void**)&tr.host_m, P * sizeof(float)));
        cudaCheck(cudaMallocHost((void**)&tr.host_v, P * sizeof(float)));
        hybrid_setup(&tr.hybrid, &hybrid_flags, run, mc, ADAM_EPS, NULL, 0);
        HybridBuffers hb = hybrid_buffers(&tr.model);
        if (hybrid_enabled(&tr.hybrid)) { hybrid_device_init(&tr.hybrid_dev, &tr.hybrid, &hb); }
        size_t Ppad = tr.model.num_parameters_padded;
        if (cfg->ema > 0.0f) {  // the EMA: one device buffer, a copy of the weights until the first update folds in
            tr.avg.weights = (float*)cudaMallocCheck(Ppad * sizeof(float));
            cudaCheck(cudaMemcpy(tr.avg.weights, tr.model.master_weights, Ppad * sizeof(float), cudaMemcpyDeviceToDevice));
            tr.avg.n = Ppad;
            tr.avg.ema_decay = cfg->ema;
            tr.avg.label = "ema";
            tr.model.average = &tr.avg;
            hybrid_set_ema(&tr.hybrid, tr.avg.weights, cfg->ema);  // the method's kernel folds it (or refuses it)
            run->kept_label = tr.avg.label;
            cudaCheck(cudaMallocHost((void**)&tr.host_trained, P * sizeof(float)));
        }
        if (hybrid_enabled(&tr.hybrid) && hybrid_device_kept(&tr.hybrid_dev, &tr.hybrid) != NULL) {
            tr.avg.weights = hybrid_device_kept(&tr.hybrid_dev, &tr.hybrid);  // a method's kept weights (GPA's x)
            tr.avg.n = Ppad;
            tr.avg.label = tr.hybrid.method->name;
            run->kept_label = tr.avg.label;
            cudaCheck(cudaMallocHost((void**)&tr.host_trained, P * sizeof(float)));
        }
        if (resume_step >= 0) {  // counters, AdamW state, data position (and hybrid state) of the checkpoint
            run_state_load(run, resume_step, P, tr.host_m, tr.host_v, average_on(&tr.avg) ? tr.host_trained : NULL);
            gpt2_optimizer_from_host(&tr.model, tr.host_m, tr.host_v);
            if (average_on(&tr.avg)) {  // the model file held the kept weights, the state the trained ones: swap
                cudaCheck(cudaMemcpy(tr.avg.weights, tr.host_trained, P * sizeof(float), cudaMemcpyHostToDevice));
                tr.avg.swapped = 1;
                use_kept_weights(&tr, 0);
            }
            if (hybrid_enabled(&tr.hybrid)) { hybrid_device_load(&tr.hybrid_dev, &tr.hybrid, run, resume_step, &hb); }
            // the floatX copy as this step left it: the resumed run continues bit-exactly
            gpt2_sync_floatX(&tr.model, run->step);
        }
        if (cfg->overfit) {  // the same first batch on every step, also after a resume
            dataloader_reset(&run->train_loader, (uint64_t)cfg->seed);
            dataloader_next_batch(&run->train_loader);
        }
        run->flops_per_token = 6.0 * P + 6.0 * mc->num_layers * mc->channels * cfg->T;
        if (run->rank0) {
            char v[64];
            report_config_begin(run, &CLI, mc, P);
            report_row("device", tr.device_name);
            report_row("precision", PRECISION_NAME);
            report_row("attention", tr.model.use_cudnn ? "cuDNN (fused flash attention)" : "built-in kernels");
            snprintf(v, sizeof(v), "%d", np); report_row("processes (GPUs)", v);
            snprintf(v, sizeof(v), "%.0f", run->peak_flops / np / 1e12); report_row("MFU peak TFLOP/s", v);
            report_config_end(resume_step);
        }
        log_device_memory(&tr, "start-up");
        tr.last_phase = (HybridPhase)HYBRID_PHASE_COUNT;

        // the training loop, as train_gpt2.c's; the processes agree on stopping (a signal reaches them at
        // different moments: rank 0's decision is everyone's)
        signals_install();
        if (run->has_val && run->step == 0) { run_log_init_val(run, evaluate(&tr)); }
        while (run->step < run->total_steps) {
            float lr = lr_scheduler_get(&run->scheduler, run->step);
            HybridPlan plan = hybrid_plan(&tr.hybrid, run->step, lr);  // a Full step, or hybrid mode's Predict or Correct
            StepResult r = plan.phase == HYBRID_PHASE_PREDICT ? train_predict_step(&tr, &plan) : train_full_step(&tr, &plan, lr);
            hybrid_report(&tr.hybrid, run, &r);                        // all of hybrid/'s bookkeeping happens in there
            run_step_end(run, &r);
            log_device_memory_after_step(&tr);
            run_print_step(run, &r, lr);
            int val = run_val_due(run);
            float val_loss = val ? evaluate(&tr) : NAN;
            run_log_step(run, &r, lr, val_loss, val ? evaluate_kept(&tr) : NAN);  // at the trained and kept weights
            if (run_sample_step(run)) {  // at the kept weights: every rank swaps, rank 0 samples
                use_kept_weights(&tr, 1);
                if (run->rank0) { generate(&tr); }
                use_kept_weights(&tr, 0);
            }
            // Predict steps communicate nothing, so the decision waits for the next measured step
            int stop = signals_stop_requested();
            if (np > 1) {
                stop = r.unmeasured && !run_last_step(run) ? 0
                     : (int)gpt2_sum_over_ranks(&tr.model, run->rank0 && stop ? 1.0f : 0.0f);
            }
            if (run_checkpoint_due(run, stop)) { checkpoint(&tr); }
            if (stop && !run_last_step(run)) {
                if (run->rank0) { signals_print_resume_hint(run->step, cfg->output_dir, argc, argv); }
                break;
            }
        }
        log_device_memory(&tr, "end");
        if (run->rank0) {
            char extra[3072];
            snprintf(extra, sizeof(extra), ", \"peak_device_mib\": %.1f, \"processes\": %d", tr.peak_device_mib, np);
            if (!hybrid_summary(&tr.hybrid, run, extra, sizeof(extra))) {
                fprintf(stderr, "warning: summary.json: hybrid's fields did not all fit in %zu bytes; written without the rest\n", sizeof(extra));
            }
            report_summary(run, extra);
            printf("peak device memory %.1f MiB\n", tr.peak_device_mib);
        }
        cudaCheck(cudaFreeHost(tr.host_params));
        cudaCheck(cudaFreeHost(tr.host_m));
        cudaCheck(cudaFreeHost(tr.host_v));
        if (average_on(&tr.avg)) {
            cudaCheck(cudaFreeHost(tr.host_trained));
            if (tr.avg.ema_decay > 0.0f) { cudaCheck(cudaFree(tr.avg.weights)); }  // else hybrid/'s buffer
        }
    }

    cudaCheck(cudaStreamSynchronize(tr.model.stream));
    hybrid_device_free(&tr.hybrid_dev);
    hybrid_free(&tr.hybrid);
    run_free(run);
    free(tr.gen_batch);
    free(tr.gen_row);
    free(tr.gen_logits);
    gpt2_free(&tr.model);
    matmul_free();
    multi_gpu_config_free(&tr.multi_gpu);
    return EXIT_SUCCESS;
}
#endif // TESTING
