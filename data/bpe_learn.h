/*
 * data/bpe_learn.h — learns a byte-level BPE vocabulary of N tokens from text, in the form GPT-2's
 * encoder (llmc/bpe.h) reads: the 256 byte tokens first (id = byte value), then one token per merge,
 * then <|endoftext|> last (id N-1); N = 257 is plain bytes.
 * The text is cut into words by GPT-2's own pre-tokenisation (bpe_piece_end), so merges never cross a
 * word and encoding a learned vocabulary goes through the same code as GPT-2's. Each merge joins the
 * most frequent adjacent pair over all words, weighted by how often each word occurs; ties go to the
 * smallest (left id, right id). A pair whose joined bytes already form a token (another merge path
 * reached them) or would exceed 255 bytes (llm.c's tokenizer file) is never merged.
 * Speed: pair counts are kept up to date incrementally (a merge touches only the words that hold its
 * pair, listed per pair), and the best pair comes from a max-heap with lazy deletion; no recount.
 */
#ifndef DATA_BPE_LEARN_H
#define DATA_BPE_LEARN_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"
#include "llmc/bpe.h"

// ----------------------------------------------------------------------------
// words: every distinct pre-tokenised piece with its count and its current symbols

typedef struct {
    int* sym;          // current symbols (token ids), n of them
    int n;
    int64_t count;     // occurrences in the text
} LearnWord;

typedef struct {
    uint64_t key;      // (left << 32 | right) + 1; 0: empty slot
    int64_t count;     // weighted occurrences in the words now
    int* words;        // words that held the pair when it was formed (may be stale)
    int nwords, capwords;
    int banned;        // never merged (duplicate bytes or too long)
} LearnPair;

typedef struct { int64_t count; int left, right; } LearnHeapItem;

typedef struct {
    // pieces -> word index, during counting
    uint64_t* piece_hash;   // (piece_cap) 0: empty
    int* piece_word;        // (piece_cap)
    size_t piece_cap, piece_used;
    uint8_t** piece_bytes;  // (word_cap) each word's bytes, for hashing collisions
    int* piece_len;
    LearnWord* words;
    int nwords, word_cap;
    // pairs
    LearnPair* pairs;       // (pair_cap) open addressing
    size_t pair_cap, pair_used;
    LearnHeapItem* heap;
    size_t heap_n, heap_cap;
    // the vocabulary so far
    uint8_t** tok;          // (vocab) bytes of each token
    int* tok_len;
    int ntok, vocab_cap;
    int (*merges)[2];       // (N - 257) the merges in order
    int nmerges;
    BPETokenizer pre;       // only its pre-tokenisation tables are used
} BPELearner;

static inline uint64_t bpe_learn_pair_key(int left, int right) { return (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1; }

static inline void bpe_learn_init(BPELearner* L) {
    memset(L, 0, sizeof(*L));
    for (int c = 0; c < 128; c++) { L->pre.ascii_class[c] = (uint8_t)bpe_class_of((uint32_t)c); }
    L->piece_cap = 1 << 16;
    L->piece_hash = (uint64_t*)callocCheck(L->piece_cap, sizeof(uint64_t));
    L->piece_word = (int*)mallocCheck(L->piece_cap * sizeof(int));
}

static inline void bpe_learn_grow_pieces(BPELearner* L) {
    size_t cap = L->piece_cap * 2;
    uint64_t* h = (uint64_t*)callocCheck(cap, sizeof(uint64_t));
    int* w = (int*)mallocCheck(cap * sizeof(int));
    for (size_t i = 0; i < L->piece_cap; i++) {
        if (L->piece_hash[i] == 0) { continue; }
        size_t j = L->piece_hash[i] & (cap - 1);
        while (h[j] != 0) { j = (j + 1) & (cap - 1); }
        h[j] = L->piece_hash[i];
        w[j] = L->piece_word[i];
    }
    free(L->piece_hash); free(L->piece_word);
    L->piece_hash = h; L->piece_word = w; L->piece_cap = cap;
}

// one piece of text (a word of the pre-tokenisation) seen once more
static inline void bpe_learn_add_piece(BPELearner* L, const uint8_t* s, size_t n) {
    if (2 * (L->piece_used + 1) > L->piece_cap) { bpe_learn_grow_pieces(L); }
    uint64_t h = bpe_hash_bytes(s, n) | 1;  // never 0
    size_t i = h & (L->piece_cap - 1);
    while (L->piece_hash[i] != 0) {
        if (L->piece_hash[i] == h) {
            int w = L->piece_word[i];
            if ((size_t)L->piece_len[w] == n && memcmp(L->piece_bytes[w], s, n) == 0) { L->words[w].count++; return; }
        }
        i = (i + 1) & (L->piece_cap - 1);
    }
    if (L->nwords == L->word_cap) {
        L->word_cap = L->word_cap ? 2 * L->word_cap : 1 << 14;
        L->words = (LearnWord*)realloc(L->words, (size_t)L->word_cap * sizeof(LearnWord));
        L->piece_bytes = (uint8_t**)realloc(L->piece_bytes, (size_t)L->word_cap * sizeof(uint8_t*));
        L->piece_len = (int*)realloc(L->piece_len, (size_t)L->word_cap * sizeof(int));
        if (!L->words || !L->piece_bytes || !L->piece_len) { fatal("out of memory counting %d words", L->word_cap); }
    }
    int w = L->nwords++;
    L->piece_bytes[w] = (uint8_t*)mallocCheck(n);
    memcpy(L->piece_bytes[w], s, n);
    L->piece_len[w] = (int)n;
    L->words[w].n = (int)n;
    L->words[w].count = 1;
    L->words[w].sym = (int*)mallocCheck(n * sizeof(int));
    for (size_t k = 0; k < n; k++) { L->words[w].sym[k] = s[k]; }
    L->piece_hash[i] = h;
    L->piece_word[i] = w;
    L->piece_used++;
}

// one document's text, cut into words exactly as the encoder cuts it
static inline void bpe_learn_add_text(BPELearner* L, const uint8_t* text, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t end = bpe_piece_end(&L->pre, text, n, i);
        bpe_learn_add_piece(L, text + i, end - i);
        i = end;
    }
}

// ----------------------------------------------------------------------------
// pairs and the heap

static inline LearnPair* bpe_learn_pair(BPELearner* L, int left, int right, int create);

static inline void bpe_learn_grow_pairs(BPELearner* L) {
    size_t cap = L->pair_cap ? 2 * L->pair_cap : 1 << 16;
    LearnPair* p = (LearnPair*)callocCheck(cap, sizeof(LearnPair));
    for (size_t i = 0; i < L->pair_cap; i++) {
        if (L->pairs[i].key == 0) { continue; }
        size_t j = bpe_mix64(L->pairs[i].key) & (cap - 1);
        while (p[j].key != 0) { j = (j + 1) & (cap - 1); }
        p[j] = L->pairs[i];
    }
    free(L->pairs);
    L->pairs = p;
    L->pair_cap = cap;
}

static inline LearnPair* bpe_learn_pair(BPELearner* L, int left, int right, int create) {
    if (create && 2 * (L->pair_used + 1) > L->pair_cap) { bpe_learn_grow_pairs(L); }
    if (L->pair_cap == 0) { return NULL; }
    uint64_t key = bpe_learn_pair_key(left, right);
    size_t i = bpe_mix64(key) & (L->pair_cap - 1);
    while (L->pairs[i].key != 0) {
        if (L->pairs[i].key == key) { return &L->pairs[i]; }
        i = (i + 1) & (L->pair_cap - 1);
    }
    if (!create) { return NULL; }
    L->pairs[i].key = key;
    L->pair_used++;
    return &L->pairs[i];
}

// the heap's order: more occurrences first, then the smaller (left, right)
static inline int bpe_learn_before(const LearnHeapItem* a, const LearnHeapItem* b) {
    if (a->count != b->count) { return a->count > b->count; }
    if (a->left != b->left) { return a->left < b->left; }
    return a->right < b->right;
}

static inline void bpe_learn_heap_push(BPELearner* L, int64_t count, int left, int right) {
    if (L->heap_n == L->heap_cap) {
        L->heap_cap = L->heap_cap ? 2 * L->heap_cap : 1 << 16;
        L->heap = (LearnHeapItem*)realloc(L->heap, L->heap_cap * sizeof(LearnHeapItem));
        if (L->heap == NULL) { fatal("out of memory: pair heap of %zu entries", L->heap_cap); }
    }
    size_t i = L->heap_n++;
    LearnHeapItem it = {count, left, right};
    while (i > 0 && bpe_learn_before(&it, &L->heap[(i - 1) / 2])) { L->heap[i] = L->heap[(i - 1) / 2]; i = (i - 1) / 2; }
    L->heap[i] = it;
}

static inline LearnHeapItem bpe_learn_heap_pop(BPELearner* L) {
    LearnHeapItem top = L->heap[0], last = L->heap[--L->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= L->heap_n) { break; }
        if (c + 1 < L->heap_n && bpe_learn_before(&L->heap[c + 1], &L->heap[c])) { c++; }
        if (!bpe_learn_before(&L->heap[c], &last)) { break; }
        L->heap[i] = L->heap[c];
        i = c;
    }
    if (L->heap_n > 0) { L->heap[i] = last; }
    return top;
}

// count change of a pair in word w (delta may be negative); new pairs list w and enter the heap
static inline void bpe_learn_count(BPELearner* L, int left, int right, int64_t delta, int w) {
    LearnPair* p = bpe_learn_pair(L, left, right, 1);
    p->count += delta;
    if (delta > 0) {
        if (p->nwords == 0 || p->words[p->nwords - 1] != w) {
            if (p->nwords == p->capwords) {
                p->capwords = p->capwords ? 2 * p->capwords : 4;
                p->words = (int*)realloc(p->words, (size_t)p->capwords * sizeof(int));
                if (p->words == NULL) { fatal("out of memory: pair word lists"); }
            }
            p->words[p->nwords++] = w;
        }
        if (!p->banned) { bpe_learn_heap_push(L, p->count, left, right); }
    }
}

// ----------------------------------------------------------------------------
// learning

static inline int bpe_learn_token_id(const BPELearner* L, const uint8_t* s, int n) {
    for (int id = 0; id < L->ntok; id++) {  // only at merge time, vocabularies of thousands: cheap enough
        if (L->tok_len[id] == n && memcmp(L->tok[id], s, (size_t)n) == 0) { return id; }
    }
    return -1;
}

static inline void bpe_learn_add_token(BPELearner* L, const uint8_t* s, int n) {
    L->tok[L->ntok] = (uint8_t*)mallocCheck((size_t)n);
    memcpy(L->tok[L->ntok], s, (size_t)n);
    L->tok_len[L->ntok] = n;
    L->ntok++;
}

// learns merges until the vocabulary has vocab_size tokens (with <|endoftext|>) or no pair is left;
// returns the final vocabulary size
static inline int bpe_learn_run(BPELearner* L, int vocab_size) {
    if (vocab_size < 257) { fatal("a byte-level vocabulary has at least 257 tokens (256 bytes + <|endoftext|>), not %d", vocab_size); }
    L->vocab_cap = vocab_size;
    L->tok = (uint8_t**)mallocCheck((size_t)vocab_size * sizeof(uint8_t*));
    L->tok_len = (int*)mallocCheck((size_t)vocab_size * sizeof(int));
    L->merges = (int(*)[2])mallocCheck((size_t)(vocab_size - 256) * sizeof(int[2]));
    for (int b = 0; b < 256; b++) { uint8_t c = (uint8_t)b; bpe_learn_add_token(L, &c, 1); }
    for (int w = 0; w < L->nwords; w++) {
        const LearnWord* lw = &L->words[w];
        for (int k = 0; k + 1 < lw->n; k++) { bpe_learn_count(L, lw->sym[k], lw->sym[k + 1], lw->count, w); }
    }
    uint8_t buf[2 * BPE_MAX_TOKEN_BYTES + 2];
    while (L->ntok < vocab_size - 1 && L->heap_n > 0) {
        LearnHeapItem it = bpe_learn_heap_pop(L);
        LearnPair* p = bpe_learn_pair(L, it.left, it.right, 0);
        if (p == NULL || p->banned || p->count <= 0) { continue; }
        // a stale entry: the pair's count fell since (its true count re-enters), or rose (a newer entry has it)
        if (p->count != it.count) {
            if (p->count < it.count) { bpe_learn_heap_push(L, p->count, it.left, it.right); }
            continue;
        }
        int nl = L->tok_len[it.left], nr = L->tok_len[it.right];
        if (nl + nr > BPE_MAX_TOKEN_BYTES) { p->banned = 1; continue; }
        memcpy(buf, L->tok[it.left], (size_t)nl);
        memcpy(buf + nl, L->tok[it.right], (size_t)nr);
        if (bpe_learn_token_id(L, buf, nl + nr) >= 0) { p->banned = 1; continue; }
        int id = L->ntok;
        bpe_learn_add_token(L, buf, nl + nr);
        L->merges[L->nmerges][0] = it.left;
        L->merges[L->nmerges][1] = it.right;
        L->nmerges++;
        // rewrite every word that holds the pair; the counts of the pairs around each merge move
        int nwords = p->nwords;
        int* words = p->words;
        p->words = NULL; p->nwords = p->capwords = 0;  // words gaining the pair again re-list themselves
        for (int k = 0; k < nwords; k++) {
            LearnWord* lw = &L->words[words[k]];
            int w = words[k];
            int out = 0, merged_prev = 0;
            for (int i = 0; i < lw->n;) {
                if (i + 1 < lw->n && lw->sym[i] == it.left && lw->sym[i + 1] == it.right) {
                    // the pair on the left: (x, left) becomes (x, merged); after a merge right before,
                    // (merged, left) was never counted (see below) and (right, left) is already gone
                    if (out > 0 && !merged_prev) { bpe_learn_count(L, lw->sym[out - 1], it.left, -lw->count, w); }
                    if (out > 0) { bpe_learn_count(L, lw->sym[out - 1], id, lw->count, w); }
                    if (i + 2 < lw->n) {
                        bpe_learn_count(L, it.right, lw->sym[i + 2], -lw->count, w);
                        // the next pair is formed with the merged token unless it merges too (then it is
                        // counted when that merge is written)
                        if (!(i + 3 < lw->n && lw->sym[i + 2] == it.left && lw->sym[i + 3] == it.right)) {
                            bpe_learn_count(L, id, lw->sym[i + 2], lw->count, w);
                        }
                    }
                    bpe_learn_count(L, it.left, it.right, -lw->count, w);
                    lw->sym[out++] = id;
                    i += 2;
                    merged_prev = 1;
                } else {
                    lw->sym[out++] = lw->sym[i++];
                    merged_prev = 0;
                }
            }
            lw->n = out;
        }
        free(words);
    }
    const char* eot = "<|endoftext|>";
    bpe_learn_add_token(L, (const uint8_t*)eot, (int)strlen(eot));
    return L->ntok;
}

// ----------------------------------------------------------------------------
// output: encoder.json and vocab.bpe in GPT-2's byte-to-unicode form, as llmc/bpe.h reads them

static inline void bpe_learn_put_mapped(FILE* f, const uint8_t* s, int n, const uint32_t byte_to_cp[256], int json) {
    for (int k = 0; k < n; k++) {
        uint32_t cp = byte_to_cp[s[k]];
        if (json && (cp == '"' || cp == '\\')) { fputc('\\', f); fputc((int)cp, f); continue; }
        if (cp < 0x80) { fputc((int)cp, f); }
        else if (cp < 0x800) { fputc((int)(0xC0 | (cp >> 6)), f); fputc((int)(0x80 | (cp & 0x3F)), f); }
        else { fputc((int)(0xE0 | (cp >> 12)), f); fputc((int)(0x80 | ((cp >> 6) & 0x3F)), f); fputc((int)(0x80 | (cp & 0x3F)), f); }
    }
}

static inline void bpe_learn_write(const BPELearner* L, const char* dir) {
    uint32_t byte_to_cp[256];
    bpe_bytes_to_unicode(byte_to_cp);
    char path[4096];
    snprintf(path, sizeof(path), "%s/encoder.json", dir);
    AtomicFile af;
    atomic_open(&af, path);
    fputc('{', af.fp);
    for (int id = 0; id < L->ntok; id++) {
        fputs(id ? ", \"" : "\"", af.fp);
        if (id == L->ntok - 1) { fputs("<|endoftext|>", af.fp); }  // a special token: written as itself
        else { bpe_learn_put_mapped(af.fp, L->tok[id], L->tok_len[id], byte_to_cp, 1); }
        fprintf(af.fp, "\": %d", id);
    }
    fputs("}", af.fp);
    atomic_commit(&af);
    snprintf(path, sizeof(path), "%s/vocab.bpe", dir);
    atomic_open(&af, path);
    fputs("#version: 0.2\n", af.fp);
    for (int m = 0; m < L->nmerges; m++) {
        bpe_learn_put_mapped(af.fp, L->tok[L->merges[m][0]], L->tok_len[L->merges[m][0]], byte_to_cp, 0);
        fputc(' ', af.fp);
        bpe_learn_put_mapped(af.fp, L->tok[L->merges[m][1]], L->tok_len[L->merges[m][1]], byte_to_cp, 0);
        fputc('\n', af.fp);
    }
    atomic_commit(&af);
}

static inline void bpe_learn_free(BPELearner* L) {
    for (int w = 0; w < L->nwords; w++) { free(L->words[w].sym); free(L->piece_bytes[w]); }
    for (size_t i = 0; i < L->pair_cap; i++) { free(L->pairs[i].words); }
    for (int id = 0; id < L->ntok; id++) { free(L->tok[id]); }
    free(L->words); free(L->piece_bytes); free(L->piece_len); free(L->piece_hash); free(L->piece_word);
    free(L->pairs); free(L->heap); free(L->tok); free(L->tok_len); free(L->merges);
    memset(L, 0, sizeof(*L));
}

#endif // DATA_BPE_LEARN_H
