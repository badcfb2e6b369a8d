/*
 * llmc/kvcache.h — generation one position at a time. The forward pass of one new token reads the keys and
 * values of the tokens before it from a cache instead of recomputing the whole prefix: each new token costs
 * one position (matrix-vector products over the weights, attention over the cached positions), not a
 * forward over the context. The same GPT-2 as the trainer's forward (llm.c's model, parameters in the model
 * file's flat order), in fp32 whatever --precision the training runs in; cblas_sgemv where the trainer
 * multiplies with SGEMM, so the logits equal the trainer's fp32 forward up to the order of the sums.
 * All buffers are allocated in kvcache_init; kvcache_reset starts a new context.
 */
#ifndef LLMC_KVCACHE_H
#define LLMC_KVCACHE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include "llmc/utils.h"
#include "llmc/checkpoint.h"

typedef struct {
    GPT2Config config;
    int capacity;         // positions the cache holds (at most the model's maxT)
    int pos;              // positions cached: the next token goes to position pos
    float* key;           // (L, capacity, C) the keys of every cached position, per layer
    float* value;         // (L, capacity, C) and their values
    float* x;             // (C) the residual stream of the new position
    float* h;             // (C) a layer norm's output
    float* qkv;           // (3C) query, key and value of the new position
    float* y;             // (C) the attention's output, heads side by side
    float* att;           // (capacity) one head's attention weights
    float* fc;            // (4C) the MLP's hidden layer
    float* logits;        // (Vp) the logits of the next token
} KVCache;

static inline void kvcache_init(KVCache* kv, const GPT2Config* config, int capacity) {
    memset(kv, 0, sizeof(*kv));
    if (capacity <= 0 || capacity > config->max_seq_len) {
        fatal("kvcache: capacity %d outside 1..%d", capacity, config->max_seq_len);
    }
    kv->config = *config;
    kv->capacity = capacity;
    size_t L = config->num_layers, C = config->channels;
    kv->key = (float*)mallocCheck(L * capacity * C * sizeof(float));
    kv->value = (float*)mallocCheck(L * capacity * C * sizeof(float));
    kv->x = (float*)mallocCheck(C * sizeof(float));
    kv->h = (float*)mallocCheck(C * sizeof(float));
    kv->qkv = (float*)mallocCheck(3 * C * sizeof(float));
    kv->y = (float*)mallocCheck(C * sizeof(float));
    kv->att = (float*)mallocCheck((size_t)capacity * sizeof(float));
    kv->fc = (float*)mallocCheck(4 * C * sizeof(float));
    kv->logits = (float*)mallocCheck((size_t)config->padded_vocab_size * sizeof(float));
}

static inline void kvcache_free(KVCache* kv) {
    free(kv->key); free(kv->value); free(kv->x); free(kv->h); free(kv->qkv);
    free(kv->y); free(kv->att); free(kv->fc); free(kv->logits);
    memset(kv, 0, sizeof(*kv));
}

static inline void kvcache_reset(KVCache* kv) { kv->pos = 0; }

// out (C) = layernorm(x) * w + b, as the trainer's layernorm_forward
static inline void kvcache_layernorm(float* out, const float* x, const float* w, const float* b, int C) {
    float sum = 0.0f, var = 0.0f;
    for (int c = 0; c < C; c++) { sum += x[c]; }
    float m = sum / C;
    for (int c = 0; c < C; c++) { float d = x[c] - m; var += d * d; }
    float s = 1.0f / sqrtf(var / C + 1e-5f);
    for (int c = 0; c < C; c++) { out[c] = (x[c] - m) * s * w[c] + b[c]; }
}

// out (OC) = W x + b, W: (OC, IC) row-major as the model file stores it; b NULL: no bias. beta 1: out +=
static inline void kvcache_matvec(float* out, const float* W, const float* x, const float* b, int OC, int IC, float beta) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, IC, 1.0f, W, IC, x, 1, beta, out, 1);
    if (b != NULL) { for (int o = 0; o < OC; o++) { out[o] += b[o]; } }
}

// feeds `token` at position kv->pos and returns the logits (Vp) of the token after it; params: the model's
// parameters in file order. The caller keeps kv->pos below kv->capacity.
static inline const float* kvcache_forward(KVCache* kv, const float* params, int token) {
    const GPT2Config* c = &kv->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, hs = C / NH, p = kv->pos;
    if (p >= kv->capacity) { fatal("kvcache: position %d past the cache's %d", p, kv->capacity); }
    size_t sizes[NUM_PARAMETER_TENSORS];
    const float* t[NUM_PARAMETER_TENSORS];  // wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb
    gpt2_param_sizes(sizes, c);
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { t[i] = params + off; off += sizes[i]; }
    size_t LC = (size_t)C, cap = (size_t)kv->capacity;
    for (int i = 0; i < C; i++) { kv->x[i] = t[0][(size_t)token * LC + i] + t[1][(size_t)p * LC + i]; }
    float scale = 1.0f / sqrtf((float)hs);
    for (int l = 0; l < L; l++) {
        float* K = kv->key + (size_t)l * cap * LC;    // (capacity, C)
        float* Vc = kv->value + (size_t)l * cap * LC;
        kvcache_layernorm(kv->h, kv->x, t[2] + l * LC, t[3] + l * LC, C);
        kvcache_matvec(kv->qkv, t[4] + (size_t)l * 3 * LC * LC, kv->h, t[5] + (size_t)l * 3 * LC, 3 * C, C, 0.0f);
        memcpy(K + (size_t)p * LC, kv->qkv + C, LC * sizeof(float));
        memcpy(Vc + (size_t)p * LC, kv->qkv + 2 * C, LC * sizeof(float));
        // causal self-attention of the new position over positions 0..p, head by head
        for (int hh = 0; hh < NH; hh++) {
            const float* q = kv->qkv + hh * hs;
            float maxv = -INFINITY, sum = 0.0f;
            for (int j = 0; j <= p; j++) {
                const float* k = K + (size_t)j * LC + hh * hs;
                float d = 0.0f;
                for (int i = 0; i < hs; i++) { d += q[i] * k[i]; }
                kv->att[j] = d * scale;
                maxv = kv->att[j] > maxv ? kv->att[j] : maxv;
            }
            for (int j = 0; j <= p; j++) { kv->att[j] = expf(kv->att[j] - maxv); sum += kv->att[j]; }
            float* y = kv->y + hh * hs;
            memset(y, 0, (size_t)hs * sizeof(float));
            for (int j = 0; j <= p; j++) {
                const float* v = Vc + (size_t)j * LC + hh * hs;
                float a = kv->att[j] / sum;
                for (int i = 0; i < hs; i++) { y[i] += a * v[i]; }
            }
        }
        // x += attproj(y); x += fcproj(gelu(fc(layernorm(x))))
        kvcache_matvec(kv->x, t[6] + (size_t)l * LC * LC, kv->y, t[7] + l * LC, C, C, 1.0f);
        kvcache_layernorm(kv->h, kv->x, t[8] + l * LC, t[9] + l * LC, C);
        kvcache_matvec(kv->fc, t[10] + (size_t)l * 4 * LC * LC, kv->h, t[11] + (size_t)l * 4 * LC, 4 * C, C, 0.0f);
        for (int i = 0; i < 4 * C; i++) {
            float u = kv->fc[i];
            kv->fc[i] = 0.5f * u * (1.0f + tanhf(0.7978845608028654f * (u + 0.044715f * u * u * u)));
        }
        kvcache_matvec(kv->x, t[12] + (size_t)l * 4 * LC * LC, kv->fc, t[13] + l * LC, C, 4 * C, 1.0f);
    }
    kvcache_layernorm(kv->h, kv->x, t[14], t[15], C);
    kvcache_matvec(kv->logits, t[0], kv->h, NULL, c->padded_vocab_size, C, 0.0f);  // the lm head: wte
    kv->pos = p + 1;
    return kv->logits;
}

#endif // LLMC_KVCACHE_H
