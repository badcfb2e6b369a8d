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
#include "llmc/utils.h"
#include "llmc/cuda_common.cuh"
#include "llmc/encoder.cuh"
#include "llmc/layernorm.cuh"
#include "llmc/matmul.cuh"
#include "llmc/attention.cuh"
#include "llmc/fused_classifier.cuh"
#include "llmc/adamw.cuh"
#include "llmc/reduce.cuh"
#include "llmc/zero.cuh"

// ----------------------------------------------------------------------------
// GPT-2 model definition: the same configuration and parameter layout as train_gpt2.c (llm.c order)

typedef struct {
    int max_seq_len;        // maxT, e.g. 1024
    int vocab_size;         // V, e.g. 50257
    int padded_vocab_size;  // Vp, V rounded up to 128
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPT2Config;

#define NUM_PARAMETER_TENSORS 16

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

void fill_in_parameter_sizes(size_t* sizes, GPT2Config config) {
    size_t Vp = config.padded_vocab_size, C = config.channels, maxT = config.max_seq_len, L = config.num_layers;
    sizes[0] = Vp * C;
    sizes[1] = maxT * C;
    sizes[2] = L * C;
    sizes[3] = L * C;
    sizes[4] = L * (3 * C) * C;
    sizes[5] = L * (3 * C);
    sizes[6] = L * C * C;
    sizes[7] = L * C;
    sizes[8] = L * C;
    sizes[9] = L * C;
    sizes[10] = L * (4 * C) * C;
    sizes[11] = L * (4 * C);
    sizes[12] = L * C * (4 * C);
    sizes[13] = L * C;
    sizes[14] = C;
    sizes[15] = C;
}

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
    size_t shard_offset, shard_size;  // this rank's range of the flat parameters
    ActivationTensors acts;
    int batch_size, seq_len;      // what acts were allocated for
    int recompute;                // 0, 1 (GELU), 2 (GELU + LayerNorm)
    float mean_loss;              // of the last forward with targets, or of the last step
    uint32_t rounding_seed;       // base of the per-step stochastic-rounding seeds (from --seed)
    // inputs: device copies and host scratch for the wte gradient buckets
    int* inputs;                  // (B,T) device
    int* targets;                 // (B,T) device
    int* bucket_memory;           // device: token (B*T) | start (B*T+1) | pos (B*T)
    int* bucket_host;             // host, same layout
    int* bucket_count;            // host (Vp) scratch
    int num_buckets;
    float* scratch;               // device fp32: REDUCE_CHUNKS * 2 * 4C (column reductions), norm partials
    float* norm_out;              // device, 1 float
    float* host_losses;           // (B,T) pinned host
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
    fill_in_parameter_sizes(model->param_sizes, config);
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

// read an llm.c model file (v3, fp32) into a host buffer; returns the parameters (P floats, malloc'd)
float* read_model_file(const char* path, GPT2Config* config) {
    FILE* f = fopenCheck(path, "rb");
    int header[256];
    size_t bytes = file_size_check(f, path);
    if (bytes < sizeof(header)) { fatal("%s: truncated model file (%zu bytes)", path, bytes); }
    freadCheck(header, sizeof(int), 256, f, path);
    if (header[0] != 20240326) { fatal("%s: not an llm.c model file (magic %d, expected 20240326)", path, header[0]); }
    if (header[1] == 5) { fatal("%s: a bf16 model file (version 5); this trainer reads fp32 version 3", path); }
    if (header[1] != 3) { fatal("%s: unsupported model file version %d (expected 3)", path, header[1]); }
    config->max_seq_len = header[2];
    config->vocab_size = header[3];
    config->num_layers = header[4];
    config->num_heads = header[5];
    config->channels = header[6];
    config->padded_vocab_size = header[7];
    gpt2_validate_config(config, path);
    size_t sizes[NUM_PARAMETER_TENSORS], P = 0;
    fill_in_parameter_sizes(sizes, *config);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { P += sizes[i]; }
    if (bytes != sizeof(header) + P * sizeof(float)) {
        fatal("%s: file size %zu does not match the header (%zu parameters)", path, bytes, P);
    }
    float* params = (float*)mallocCheck(P * sizeof(float));
    freadCheck(params, sizeof(float), P, f, path);
    fcloseCheck(f, path);
    return params;
}

void gpt2_build_from_checkpoint(GPT2* model, const char* path, MultiGpuConfig* multi_gpu, uint32_t rounding_seed,
                                int step) {
    GPT2Config config;
    float* params = read_model_file(path, &config);
    gpt2_init_params(model, config, params, multi_gpu, rounding_seed, step);
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
    a->encoded = ALLOC_X(BT * C);
    a->ln1 = ALLOC_X(Lln * BT * C);
    a->ln1_mean = ALLOC_F(L * BT);
    a->ln1_rstd = ALLOC_F(L * BT);
    a->qkv = ALLOC_X(L * BT * 3 * C);
    a->atty = ALLOC_X(L * BT * C);
    a->att_lse = ALLOC_F(L * B * NH * T);
    a->residual2 = ALLOC_X(L * BT * C);
    a->ln2 = ALLOC_X(Lln * BT * C);
    a->ln2_mean = ALLOC_F(L * BT);
    a->ln2_rstd = ALLOC_F(L * BT);
    a->fch = ALLOC_X(L * BT * 4 * C);
    a->fch_gelu = ALLOC_X(Lgelu * BT * 4 * C);
    a->residual3 = ALLOC_X(L * BT * C);
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
    model->bucket_memory = (int*)cudaMallocCheck((3 * BT + 1) * sizeof(int));
    model->bucket_host = (int*)mallocCheck((3 * BT + 1) * sizeof(int));
    model->bucket_count = (int*)mallocCheck(Vp * sizeof(int));
    size_t scratch_floats = (size_t)REDUCE_CHUNKS * 2 * 4 * C;
    if (scratch_floats < NORM_BLOCKS) { scratch_floats = NORM_BLOCKS; }
    model->scratch = (float*)cudaMallocCheck(scratch_floats * sizeof(float));
    model->norm_out = (float*)cudaMallocCheck(sizeof(float));
    cudaCheck(cudaMallocHost((void**)&model->host_losses, BT * sizeof(float)));
    cudaCheck(cudaMemset(a->losses, 0, BT * sizeof(float)));
}

// ----------------------------------------------------------------------------
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
    int* h = model->bucket_host;
    model->num_buckets = encoder_buckets(h, h + BT, h + 2 * BT + 1, model->bucket_count, inputs, (int)BT, V);
    cudaCheck(cudaMemcpyAsync(model->bucket_memory, h, (3 * BT + 1) * sizeof(int), cudaMemcpyHostToDevice, model->stream));
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
    size_t BTC = (size_t)N * C;
    cudaStream_t s = model->stream;
    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    int ln_all = model->recompute < 2, gelu_all = model->recompute < 1;
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
        attention_forward(atty, a.att_lse + (size_t)l * B * NH * T, qkv, B, T, C, NH, s);
        matmul_forward(a.btc, atty, p.attprojw + (size_t)l * C * C, p.attprojb + l * C, N, C, C, s);
        fused_residual_layernorm_forward(residual2, ln2, a.ln2_mean + (size_t)l * N, a.ln2_rstd + (size_t)l * N,
                                         residual, a.btc, p.ln2w + l * C, p.ln2b + l * C, N, C, s);
        matmul_forward(fch, ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, N, C, 4 * C, s);
        gelu_forward(fch_gelu, fch, (size_t)N * 4 * C, s);
        matmul_forward(a.btc, fch_gelu, p.fcprojw + (size_t)l * 4 * C * C, p.fcprojb + l * C, N, 4 * C, C, s);
        if (l + 1 < L) {
            floatX* next_ln1 = a.ln1 + (ln_all ? (l + 1) * BTC : 0);
            fused_residual_layernorm_forward(residual3, next_ln1, a.ln1_mean + (size_t)(l + 1) * N,
                                             a.ln1_rstd + (size_t)(l + 1) * N, residual2, a.btc,
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
        float sum = 0.0f;
        for (int i = 0; i < N; i++) { sum += model->host_losses[i]; }
        model->mean_loss = sum / N;
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
    size_t BTC = (size_t)N * C;
    cudaStream_t s = model->stream;
    ParameterTensors p = model->params;
    GradTensors g = model->grads;
    ActivationTensors a = model->acts;
    int ln_all = model->recompute < 2, gelu_all = model->recompute < 1;
    float* scratch = model->scratch;
    cudaCheck(cudaMemcpyAsync(model->targets, targets, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, s));

    // classifier: losses accumulate (for the step's mean loss), logits become dlogits in place
    fused_classifier(a.logits, a.losses, model->targets, dloss, 1, N, V, Vp, s);
    matmul_backward(a.btc, g.wte, NULL, scratch, a.logits, a.lnf, p.wte, N, C, Vp, s);
    cudaCheck(cudaMemsetAsync(a.dresidual, 0, BTC * sizeof(floatX), s));
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
        float* ln1_mean = a.ln1_mean + (size_t)l * N;
        float* ln1_rstd = a.ln1_rstd + (size_t)l * N;
        float* ln2_mean = a.ln2_mean + (size_t)l * N;
        float* ln2_rstd = a.ln2_rstd + (size_t)l * N;
        // dresidual holds d(loss)/d(residual3[l]), which is also the gradient flowing into residual2[l]
        if (!gelu_all) { gelu_forward(fch_gelu, fch, (size_t)N * 4 * C, s); }
        matmul_backward(a.bt4c, g.fcprojw + (size_t)l * 4 * C * C, g.fcprojb + l * C, scratch, a.dresidual,
                        fch_gelu, p.fcprojw + (size_t)l * 4 * C * C, N, 4 * C, C, s);
        gelu_backward(a.bt4c, fch, a.bt4c, (size_t)N * 4 * C, s);
        if (!ln_all) { layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, p.ln2w + l * C, p.ln2b + l * C, N, C, s); }
        matmul_backward(a.btc, g.fcw + (size_t)l * 4 * C * C, g.fcb + l * 4 * C, scratch, a.bt4c, ln2,
                        p.fcw + (size_t)l * 4 * C * C, N, C, 4 * C, s);
        layernorm_backward(a.dresidual, g.ln2w + l * C, g.ln2b + l * C, scratch, a.btc, residual2, p.ln2w + l * C,
                           ln2_mean, ln2_rstd, N, C, s);
        matmul_backward(a.btc, g.attprojw + (size_t)l * C * C, g.attprojb + l * C, scratch, a.dresidual, atty,
                        p.attprojw + (size_t)l * C * C, N, C, C, s);
        attention_backward(a.bt4c, a.att_delta, a.btc, qkv, atty, a.att_lse + (size_t)l * B * NH * T, B, T, C, NH, s);
        if (!ln_all) { layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, p.ln1w + l * C, p.ln1b + l * C, N, C, s); }
        matmul_backward(a.btc, g.qkvw + (size_t)l * 3 * C * C, g.qkvb + l * 3 * C, scratch, a.bt4c, ln1,
                        p.qkvw + (size_t)l * 3 * C * C, N, C, 3 * C, s);
        layernorm_backward(a.dresidual, g.ln1w + l * C, g.ln1b + l * C, scratch, a.btc, residual, p.ln1w + l * C,
                           ln1_mean, ln1_rstd, N, C, s);
    }
    int* bk = model->bucket_memory;
    encoder_backward(g.wte, g.wpe, a.dresidual, bk, bk + N, bk + 2 * N + 1, model->num_buckets, B, T, C, s);
    model->micro_steps++;
}

// mean loss over every position of the micro batches since gpt2_zero_grad (syncs; also over all ranks)
float gpt2_accumulated_loss(GPT2* model) {
    int N = model->batch_size * model->seq_len;
    cudaCheck(cudaMemcpyAsync(model->host_losses, model->acts.losses, (size_t)N * sizeof(float),
                              cudaMemcpyDeviceToHost, model->stream));
    cudaCheck(cudaStreamSynchronize(model->stream));
    float sum = 0.0f;
    for (int i = 0; i < N; i++) { sum += model->host_losses[i]; }
    float mean = model->micro_steps > 0 ? sum / ((float)N * model->micro_steps) : 0.0f;
    if (model->multi_gpu->num_processes > 1) {
        cudaCheck(cudaMemcpyAsync(model->norm_out, &mean, sizeof(float), cudaMemcpyHostToDevice, model->stream));
        multi_gpu_sum_scalar(model->norm_out, model->multi_gpu, model->stream);
        cudaCheck(cudaMemcpyAsync(&mean, model->norm_out, sizeof(float), cudaMemcpyDeviceToHost, model->stream));
        cudaCheck(cudaStreamSynchronize(model->stream));
        mean /= model->multi_gpu->num_processes;
    }
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

// the seed of the stochastic rounding that produced the weights after step t (t = 0: the initial weights)
static uint32_t gpt2_step_seed(const GPT2* model, int t) {
    uint64_t x = ((uint64_t)model->rounding_seed << 32) ^ (uint64_t)(uint32_t)t;
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return (uint32_t)x;
}

// rebuild the floatX working copy from the master weights as the update of step t rounded it:
// after init (t = 0) and after loading a checkpoint of step t, bit-identical to an uninterrupted run
void gpt2_sync_floatX(GPT2* model, int t) {
    round_to_floatX_range(model->params_memory, model->master_weights, model->num_parameters_padded, 0,
                          gpt2_step_seed(model, t), model->stream);
    cudaCheck(cudaStreamSynchronize(model->stream));
}

// weight decay applies to the 2-D weights only (wte, wpe, qkvw, attprojw, fcw, fcprojw), as the CPU path
static const int decayed_tensor[NUM_PARAMETER_TENSORS] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};

// AdamW on this rank's shard, one launch per tensor (the decay differs), then the weights are gathered.
// t: 1-based step
void gpt2_update(GPT2* model, float lr, float beta1, float beta2, float eps, float weight_decay,
                 float grad_scale, int t) {
    uint32_t seed = gpt2_step_seed(model, t);
    size_t lo = model->shard_offset, hi = model->shard_offset + model->shard_size, start = 0;
    for (int i = 0; i <= NUM_PARAMETER_TENSORS; i++) {
        // the padding after the last tensor is one more range (zero gradients: it stays zero)
        size_t end = i < NUM_PARAMETER_TENSORS ? start + model->param_sizes[i] : model->num_parameters_padded;
        size_t a = start > lo ? start : lo, b = end < hi ? end : hi;
        if (a < b) {
            float wd = i < NUM_PARAMETER_TENSORS && decayed_tensor[i] ? weight_decay : 0.0f;
            adamw_update(model->master_weights + a, model->params_memory + a, model->grads_memory + a,
                         model->m_memory + (a - lo), model->v_memory + (a - lo), b - a, a, lr, beta1, beta2, t,
                         eps, wd, grad_scale, seed, model->stream);
        }
        start = end;
    }
    if (model->multi_gpu->zero_stage == 1) {
        multi_gpu_all_gather(model->params_memory, model->num_parameters_padded, sizeof(floatX), model->multi_gpu,
                             model->stream);
    }
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
}

#ifndef TESTING
int main(int argc, char** argv) {
    (void)argc; (void)argv;
    return 0;
}
#endif
