/*
 * test/hf_reference.c — what our C forward pass says about a prompt, for test/test_hf_export.mjs to hold the
 * exported model against: the prompt's ids as the trainer's sampler builds them (<|endoftext|>, then the
 * prompt encoded with llmc/bpe.h), N greedy tokens drawn by the sampler at --top-k 1 (the trainer's
 * `generate` loop: a forward over the context for every token), and the fp32 logits (T+N-1, V) of one
 * forward pass over the prompt and the tokens generated (row t: the logits that predict token t+1).
 *     build/hf_reference MODEL VOCAB_DIR PROMPT N LOGITS_OUT
 * prints {"ids": [...], "greedy": [...], "T": T, "V": V} on stdout and writes the logits, little-endian fp32,
 * row after row, to LOGITS_OUT.
 */
#define TESTING
#include "../train_gpt2.c"

int main(int argc, char** argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s MODEL VOCAB_DIR PROMPT N LOGITS_OUT\n", argv[0]);
        return 1;
    }
    const char* vocab = argv[2];
    int n_new = atoi(argv[4]);
    GPT2 model;
    gpt2_build_from_checkpoint(&model, argv[1]);
    int V = model.config.vocab_size, Vp = model.config.padded_vocab_size, maxT = model.config.max_seq_len;
    Sampler s;
    sampler_init(&s, argv[3], vocab, V - 1, V, n_new, 1.0f, 1, 0);
    if (s.end > maxT) { fatal("prompt and %d new tokens (%d) exceed the model's %d positions", n_new, s.end, maxT); }
    gpt2_allocate(&model, 1, maxT);  // fp32: gpt2_set_precision is never called

    // greedy: the sampler at --top-k 1, each token from a forward over all tokens before it
    for (int t = s.prompt_len; t < s.end; t++) {
        gpt2_forward(&model, s.tokens, NULL, 1, t);
        s.tokens[t] = sampler_draw(&s, model.acts.logits + (size_t)(t - 1) * Vp, V);
    }
    // the logits of one forward over the prompt and the generated tokens but the last: row t predicts token t+1
    int T = s.prompt_len, rows = s.end - 1;
    gpt2_forward(&model, s.tokens, NULL, 1, rows);
    FILE* f = fopenCheck(argv[5], "wb");
    for (int t = 0; t < rows; t++) { fwriteCheck(model.acts.logits + (size_t)t * Vp, sizeof(float), (size_t)V, f, argv[5]); }
    fcloseCheck(f, argv[5]);
    printf("{\"ids\": [");
    for (int t = 0; t < T; t++) { printf(t ? ", %d" : "%d", s.tokens[t]); }
    printf("], \"greedy\": [");
    for (int t = T; t < s.end; t++) { printf(t > T ? ", %d" : "%d", s.tokens[t]); }
    printf("], \"T\": %d, \"V\": %d}\n", T, V);
    sampler_free(&s);
    gpt2_free(&model);
    return 0;
}
