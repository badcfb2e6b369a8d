/*
 * llmc/sampler.h — text from a model: the prompt (EOT + --prompt, encoded with our BPE encoder), then
 * tokens drawn one by one from the model's logits at --temperature over the --top-k most likely.
 * The trainer runs the model (the CPU trainer one new position through llmc/kvcache.h while the context
 * fits in T, else a forward over the last T tokens); the sampler holds the context, draws with its own
 * random stream (saved in checkpoints, so a resumed run samples the same text) and prints.
 * All buffers are allocated in sampler_init: generating during training allocates nothing.
 */
#ifndef LLMC_SAMPLER_H
#define LLMC_SAMPLER_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"
#include "llmc/rand.h"
#include "llmc/tokenizer.h"
#include "llmc/bpe.h"

typedef struct {
    int* tokens;          // (prompt + -g) the context: EOT, the prompt, the sampled tokens
    int prompt_len;       // EOT + --prompt tokens at the start of tokens
    int end;              // prompt_len + -g
    float* sorted;        // (V) scratch for --top-k
    uint64_t rng;         // the sampling stream (saved in checkpoints)
    float temperature;
    int top_k;            // 0: all
} Sampler;

// the prompt as token ids after eot; prompt NULL: EOT alone. vocab_dir holds encoder.json and vocab.bpe.
static inline void sampler_init(Sampler* s, const char* prompt, const char* vocab_dir, int eot, int V,
                                int sample_tokens, float temperature, int top_k, uint64_t seed) {
    memset(s, 0, sizeof(*s));
    int n = 0;
    BPEIds ids;
    memset(&ids, 0, sizeof(ids));
    if (prompt != NULL) {
        BPETokenizer bpe;
        bpe_init(&bpe, vocab_dir);
        bpe_encode(&bpe, (const uint8_t*)prompt, strlen(prompt), &ids);
        bpe_free(&bpe);
        n = (int)ids.n;
    }
    s->tokens = (int*)mallocCheck((size_t)(1 + n + sample_tokens) * sizeof(int));
    s->tokens[0] = eot;
    for (int i = 0; i < n; i++) {
        if ((int)ids.ids[i] >= V) { fatal("flag --prompt: token %d is outside the model's vocabulary (%d)", (int)ids.ids[i], V); }
        s->tokens[1 + i] = (int)ids.ids[i];
    }
    bpe_ids_free(&ids);
    s->prompt_len = 1 + n;
    s->end = s->prompt_len + sample_tokens;
    s->sorted = (float*)mallocCheck((size_t)V * sizeof(float));
    s->rng = random_state(seed, RNG_SAMPLE_SALT);
    s->temperature = temperature;
    s->top_k = top_k;
}

static inline void sampler_free(Sampler* s) {
    free(s->tokens);
    free(s->sorted);
    s->tokens = NULL;
    s->sorted = NULL;
}

static inline int sampler_float_desc(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x < y) - (x > y);
}

// one token from logits (V): softmax at the temperature over the top-k largest (all with 0)
static inline int sampler_draw(Sampler* s, const float* logits, int V) {
    float t = s->temperature, cut = -FLT_MAX, maxval = -FLT_MAX;
    for (int i = 0; i < V; i++) { maxval = logits[i] > maxval ? logits[i] : maxval; }
    if (s->top_k > 0 && s->top_k < V) {
        memcpy(s->sorted, logits, (size_t)V * sizeof(float));
        qsort(s->sorted, (size_t)V, sizeof(float), sampler_float_desc);
        cut = s->sorted[s->top_k - 1];
    }
    double sum = 0.0;
    for (int i = 0; i < V; i++) { sum += logits[i] >= cut ? exp((logits[i] - maxval) / t) : 0.0; }
    double coin = random_f32(&s->rng) * sum, cdf = 0.0;
    int next = -1;
    for (int i = 0; i < V; i++) {
        if (logits[i] < cut) { continue; }
        cdf += exp((logits[i] - maxval) / t);
        next = i;
        if (coin < cdf) { break; }
    }
    return next;
}

// prints the prompt; the context of the first token to draw is then sampler_context(s, prompt_len, T)
static inline void sampler_begin(const Sampler* s, const Tokenizer* tok) {
    printf("generating:\n---\n");
    for (int i = 1; i < s->prompt_len; i++) { tokenizer_print(tok, (uint32_t)s->tokens[i], stdout); }
}

// position t's context: the last T tokens at most (a sliding window, so -g is not bounded by -t)
static inline int sampler_context_len(int t, int T) { return t < T ? t : T; }

// draws token t from the logits (V) of the context before it, stores and prints it
static inline void sampler_push(Sampler* s, int t, const float* logits, int V, const Tokenizer* tok) {
    int next = sampler_draw(s, logits, V);
    s->tokens[t] = next;
    tokenizer_print(tok, (uint32_t)next, stdout);
    fflush(stdout);
}

static inline void sampler_end(void) { printf("\n---\n"); }

#endif // LLMC_SAMPLER_H
