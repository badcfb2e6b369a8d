/*
 * llmc/vocab.h — which vocabulary a model's text uses: the BPE files (encoder.json, vocab.bpe) that encode
 * --prompt and the tokenizer file that prints samples. Nothing is guessed: the model's vocabulary size V
 * decides. The candidate is --vocab if given, else the one the model's run recorded in the state file
 * beside the model file (a checkpoint knows its vocabulary), else vocab/ beside -i's shards, else GPT-2's
 * data/gpt2; a candidate with another number of tokens is never used. Where text needs it (--prompt, or
 * -x 0) that is one line saying which flag to give; during training the samples print token ids.
 * The end-of-text token is the vocabulary's last id, V - 1 (GPT-2's 50256, ./tokenize learn's likewise).
 */
#ifndef LLMC_VOCAB_H
#define LLMC_VOCAB_H

#include <stdio.h>
#include <string.h>
#include "llmc/utils.h"
#include "llmc/config.h"
#include "llmc/checkpoint.h"
#include "llmc/bpe.h"

#define VOCAB_GPT2_DIR "data/gpt2"
#define VOCAB_GPT2_TOKENIZER "data/gpt2_tokenizer.bin"

// the number of tokens of the vocabulary in dir (its encoder.json); -1 when dir has none
static inline int vocab_size_of(const char* dir) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/encoder.json", dir);
    if (!config_file_exists(path)) { return -1; }
    BPETokenizer bpe;
    bpe_init(&bpe, dir);  // a corrupt vocabulary is one line here
    int n = bpe.vocab_size;
    bpe_free(&bpe);
    return n;
}

// the vocabulary the run of model file `model` (DIR/model_%08d.bin) recorded in its state file
// (DIR/state_%08d_00000.bin, whose path goes into state) into out; 0 when there is no such record
static inline int vocab_recorded(const char* model, char* state, size_t state_size, char* out, size_t size) {
    const char* slash = strrchr(model, '/');
    const char* base = slash != NULL ? slash + 1 : model;
    int step, end = 0;
    if (sscanf(base, "model_%8d.bin%n", &step, &end) != 1 || end == 0 || base[end] != '\0' || strlen(base) != 18) {
        return 0;
    }
    int n = snprintf(state, state_size, "%.*sstate_%08d_00000.bin", (int)(base - model), model, step);
    char record[STATE_RECORD_MAX];
    return n > 0 && (size_t)n < state_size && state_read_record(state, record, sizeof(record)) &&
           config_record_value(record, "--vocab", out, size) && out[0] != '\0';
}

// fills c->vocab_dir (NULL: none fits the model) and, unless given, c->tokenizer (NULL: none) for a model of
// V tokens loaded from `model` (NULL: a random init). strict: the text needs the vocabulary (--prompt, -x 0),
// so one that does not fit is an error naming the flag to give; else a note (printed if verbose), and
// samples print ids.
static inline void vocab_resolve(TrainConfig* c, int V, const char* model, int strict, int verbose) {
    static char dir_buf[4096], tok_buf[4096 + 16];
    char state[4096] = "", why[4200];
    const char* dir = c->vocab_dir;
    snprintf(why, sizeof(why), "--vocab");
    if (dir == NULL && model != NULL && vocab_recorded(model, state, sizeof(state), dir_buf, sizeof(dir_buf))) {
        snprintf(why, sizeof(why), "the vocabulary %s records", state);
        dir = dir_buf;
        if (vocab_size_of(dir) < 0 && !strict) { dir = NULL; }  // moved since: the data's, as before the record
    }
    if (dir == NULL) {  // the data's: vocab/ beside -i's shards (data/prepare_small.sh's layout), else GPT-2's
        const char* slash = strrchr(c->train_pattern, '/');
        int n = slash != NULL ? snprintf(dir_buf, sizeof(dir_buf), "%.*s/vocab", (int)(slash - c->train_pattern), c->train_pattern)
                              : snprintf(dir_buf, sizeof(dir_buf), "vocab");
        int beside = n > 0 && (size_t)n < sizeof(dir_buf) && vocab_size_of(dir_buf) >= 0;
        dir = beside ? dir_buf : VOCAB_GPT2_DIR;
        snprintf(why, sizeof(why), beside ? "the vocabulary beside -i's shards"
                                   : model != NULL ? "GPT-2's: no record of the model's beside it" : "GPT-2's, the default");
    }
    int n = vocab_size_of(dir);
    if (n != V) {
        char has[64];
        snprintf(has, sizeof(has), n < 0 ? "has no encoder.json" : "has %d tokens", n);
        if (strict && strcmp(why, "--vocab") == 0) {
            fatal("flag --vocab: %s %s, the model's vocabulary %d: not the vocabulary it was trained with", dir, has, V);
        }
        if (strict) {
            fatal("%s: %s (%s) %s, the model's vocabulary %d: give --vocab DIR, the vocabulary it was trained with",
                  model != NULL ? model : c->train_pattern, dir, why, has, V);
        }
        if (verbose) {
            printf("note: %s (%s) %s, the model's vocabulary %d: samples print token ids, no bits per byte "
                   "(--vocab DIR: the vocabulary it was trained with)\n", dir, why, has, V);
        }
        dir = NULL;
    }
    c->vocab_dir = dir;
    if (c->tokenizer == NULL && dir != NULL) {  // --vocab DIR brings DIR/tokenizer.bin (./tokenize learn writes both)
        snprintf(tok_buf, sizeof(tok_buf), "%s/tokenizer.bin", dir);
        c->tokenizer = config_file_exists(tok_buf) ? tok_buf : VOCAB_GPT2_TOKENIZER;
    }
}

#endif // LLMC_VOCAB_H
