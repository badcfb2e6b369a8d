/*
 * dev/bench_generate.c — tokens per second of the trainer's generation, before and after the KV cache:
 *   before: every token from a forward over the whole context (the trainer's generate until the cache came,
 *           as llm.c's), gpt2_forward at (1, t);
 *   after:  every token one new position through llmc/kvcache.h.
 * Both greedy (argmax) from <|endoftext|>, in fp32, N new tokens, timed in turns (before, after, before, ...)
 * and reported as the median of the repeats; the two token sequences must be equal.
 *     build/bench_generate MODEL|dN[:V] [N=256] [REPEATS=3]    (dN: a random-init depth-N model, V default 50257)
 * `make bench-generate` runs it on the quick start's checkpoint when it exists and on a random-init d4.
 */
#define TESTING
#include "../train_gpt2.c"

static int argmax(const float* x, int V) {
    int best = 0;
    for (int i = 1; i < V; i++) { best = x[i] > x[best] ? i : best; }
    return best;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

int main(int argc, char** argv) {
    cpu_blas_init(argc, argv);  // the OpenBLAS kernel and the OpenMP wait policy, as the trainer (may re-execute once)
    if (argc < 2) { fprintf(stderr, "usage: %s MODEL|dN[:V] [N=256] [REPEATS=3]\n", argv[0]); return 1; }
    int N = argc > 2 ? atoi(argv[2]) : 256, R = argc > 3 ? atoi(argv[3]) : 3;
    GPT2 model;
    int depth, vocab = 50257;
    if (sscanf(argv[1], "d%d:%d", &depth, &vocab) >= 1 && strchr(argv[1], '/') == NULL && strchr(argv[1], '.') == NULL) {
        gpt2_build_from_random(&model, depth, vocab, 7);
    } else {
        gpt2_build_from_checkpoint(&model, argv[1]);
    }
    GPT2Config* c = &model.config;
    if (N < 1 || N + 1 > c->max_seq_len || R < 1) { fatal("N must be in 1..%d and REPEATS >= 1", c->max_seq_len - 1); }
    int V = c->vocab_size, Vp = c->padded_vocab_size;
    gpt2_allocate(&model, 1, N + 1);
    KVCache kv;
    kvcache_init(&kv, c, N + 1);
    int* before = (int*)mallocCheck((size_t)(N + 1) * sizeof(int));
    int* after = (int*)mallocCheck((size_t)(N + 1) * sizeof(int));
    double* tb = (double*)mallocCheck((size_t)R * sizeof(double));
    double* ta = (double*)mallocCheck((size_t)R * sizeof(double));
    struct timespec t0, t1;
    for (int r = 0; r < R; r++) {
        before[0] = after[0] = V - 1;  // <|endoftext|>
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int t = 1; t <= N; t++) {
            gpt2_forward(&model, before, NULL, 1, t);
            before[t] = argmax(model.acts.logits + (size_t)(t - 1) * Vp, V);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        tb[r] = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        kvcache_reset(&kv);
        for (int t = 1; t <= N; t++) { after[t] = argmax(kvcache_forward(&kv, model.params_memory, after[t - 1]), V); }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ta[r] = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    }
    int same = 0;
    while (same < N && before[same + 1] == after[same + 1]) { same++; }
    qsort(tb, (size_t)R, sizeof(double), cmp_double);
    qsort(ta, (size_t)R, sizeof(double), cmp_double);
    double b = tb[R / 2], a = ta[R / 2];
    printf("{\"model\": \"%s\", \"L\": %d, \"C\": %d, \"V\": %d, \"threads\": %d, \"new_tokens\": %d, \"repeats\": %d, "
           "\"before_tok_s\": %.1f, \"after_tok_s\": %.1f, \"speedup\": %.2f, \"same_tokens\": %d}\n",
           argv[1], c->num_layers, c->channels, V, omp_get_max_threads(), N, R, N / b, N / a, b / a, same);
    kvcache_free(&kv);
    free(before); free(after); free(tb); free(ta);
    gpt2_free(&model);
    return same == N ? 0 : 1;
}
