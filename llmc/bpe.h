/*
 * llmc/bpe.h — GPT-2's byte-level BPE tokenizer (encoder and decoder), header-only.
 * Produces the same token ids as OpenAI's GPT-2 encoder: the pre-tokenisation pattern
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * is implemented by hand over code point classes from llmc/unicode_tables.h, each piece is split
 * into bytes (GPT-2's byte-to-unicode map is only needed to read encoder.json and vocab.bpe), and
 * merged by rank exactly like encoder.py's bpe(). Works on raw bytes: a byte that does not start a
 * valid UTF-8 sequence counts as a code point of class "other", so every byte string encodes and
 * decodes back to itself.
 * Speed comes from a word cache (piece bytes -> ids) and a pair hash map (id pair -> rank, merged id);
 * scratch buffers grow only when a longer piece than ever before appears.
 */
#ifndef DATA_BPE_H
#define DATA_BPE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"
#include "llmc/unicode_tables.h"

#define BPE_EOT 50256            // GPT-2's <|endoftext|>; a vocabulary's own is BPETokenizer.eot, its last id
#define BPE_MAX_TOKEN_BYTES 255  // llm.c's tokenizer file stores token lengths in one byte

// ----------------------------------------------------------------------------
// growable id vector (amortised doubling; the encoder appends to it)

typedef struct {
    int* ids;
    size_t n, cap;
} BPEIds;

static inline void bpe_ids_reserve(BPEIds* v, size_t extra) {
    if (v->n + extra <= v->cap) { return; }
    size_t cap = v->cap ? v->cap : 1024;
    while (cap < v->n + extra) { cap *= 2; }
    int* ids = (int*)realloc(v->ids, cap * sizeof(int));
    if (ids == NULL) { fatal("out of memory growing a token buffer to %zu ids", cap); }
    v->ids = ids;
    v->cap = cap;
}

static inline void bpe_ids_free(BPEIds* v) { free(v->ids); v->ids = NULL; v->n = v->cap = 0; }

// ----------------------------------------------------------------------------
// code point classes of the pattern; invalid UTF-8 bytes are OTHER, one byte each

enum { BPE_OTHER = 0, BPE_LETTER = 1, BPE_NUMBER = 2, BPE_SPACE = 3 };

static inline int bpe_class_of(uint32_t cp) {
    int lo = 0, hi = (int)(sizeof(unicode_ranges) / sizeof(unicode_ranges[0])) - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < unicode_ranges[mid].lo) { hi = mid - 1; }
        else if (cp > unicode_ranges[mid].hi) { lo = mid + 1; }
        else { return unicode_ranges[mid].cls; }
    }
    return BPE_OTHER;
}

// length of the strict UTF-8 sequence at s[0..n) (WHATWG ranges: no overlongs, surrogates or
// code points above U+10FFFF); 0 if s[0] does not start a valid sequence
static inline int bpe_utf8_decode(const uint8_t* s, size_t n, uint32_t* cp) {
    uint8_t b = s[0];
    if (b < 0x80) { *cp = b; return 1; }
    int len;
    uint8_t lo = 0x80, hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) { len = 2; *cp = b & 0x1f; }
    else if (b >= 0xe0 && b <= 0xef) {
        len = 3; *cp = b & 0x0f;
        if (b == 0xe0) { lo = 0xa0; } else if (b == 0xed) { hi = 0x9f; }
    } else if (b >= 0xf0 && b <= 0xf4) {
        len = 4; *cp = b & 0x07;
        if (b == 0xf0) { lo = 0x90; } else if (b == 0xf4) { hi = 0x8f; }
    } else { return 0; }
    if ((size_t)len > n || s[1] < lo || s[1] > hi) { return 0; }
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80) { return 0; }
        *cp = (*cp << 6) | (s[k] & 0x3f);
    }
    return len;
}

// ----------------------------------------------------------------------------
// the tokenizer

typedef struct {
    uint64_t key;   // (left id << 32 | right id) + 1; 0 = empty slot
    int rank;       // line index in vocab.bpe: lower merges first
    int merged;     // id of left+right
} BPEMergeSlot;

typedef struct {
    int rank, pos;  // heap order: lowest rank first, then leftmost
    int left, right, merged;
} BPEHeapItem;

typedef struct {
    uint64_t hash;  // 0 = empty slot
    uint32_t key_off, val_off;
    uint16_t key_len, val_len;
} BPECacheSlot;

#define BPE_CACHE_SLOTS (1u << 17)
#define BPE_CACHE_MAX_ENTRIES (BPE_CACHE_SLOTS / 2)
#define BPE_CACHE_KEY_BYTES (1u << 22)
#define BPE_CACHE_VAL_IDS (1u << 21)
#define BPE_CACHE_MAX_PIECE 128  // longer pieces are rare; they are merged every time

typedef struct {
    int vocab_size;             // 50257 for GPT-2; a learned vocabulary (data/bpe_learn.h): 257 or more
    int eot;                    // <|endoftext|>, the last id
    uint8_t* token_bytes;       // (sum of token lengths) the bytes of every token, concatenated
    uint32_t* token_offset;     // (vocab_size + 1) token i is token_bytes[token_offset[i] .. token_offset[i+1])
    int byte_token[256];        // id of the one-byte token of each byte
    int* vocab_slots;           // (vocab_mask + 1) open-addressing map token bytes -> id; -1 = empty
    size_t vocab_mask;
    BPEMergeSlot* merges;       // (merge_mask + 1) open-addressing map id pair -> rank, merged id
    size_t merge_mask;
    int num_merges;
    uint8_t ascii_class[128];
    // word cache: piece bytes -> ids; cleared when full
    BPECacheSlot* cache;        // (BPE_CACHE_SLOTS)
    uint8_t* cache_keys;        // (BPE_CACHE_KEY_BYTES)
    uint16_t* cache_vals;       // (BPE_CACHE_VAL_IDS)
    uint32_t cache_entries, cache_key_used, cache_val_used;
    int heap_ok;                // 1 if every merge's parts come from lower-ranked merges (GPT-2: yes)
    // scratch for one piece, grown to the longest piece seen
    int* sym;                   // (sym_cap) symbol ids
    int* next;                  // (sym_cap) linked list of live symbols, heap path only
    int* prev;                  // (sym_cap)
    BPEHeapItem* heap;          // (3 * sym_cap) every pair ever formed: n-1 initial + 2 per merge
    size_t sym_cap;
} BPETokenizer;

static inline uint64_t bpe_hash_bytes(const uint8_t* s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
    for (size_t i = 0; i < n; i++) { h = (h ^ s[i]) * 0x100000001b3ull; }
    return h | 1;  // never 0, which marks an empty cache slot
}

static inline uint64_t bpe_mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the other 68 to U+0100 and up
static inline void bpe_bytes_to_unicode(uint32_t byte_to_cp[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        byte_to_cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

static inline int bpe_lookup_token(const BPETokenizer* t, const uint8_t* s, size_t n) {
    for (size_t i = bpe_hash_bytes(s, n) & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
        int id = t->vocab_slots[i];
        if (id < 0) { return -1; }
        size_t len = t->token_offset[id + 1] - t->token_offset[id];
        if (len == n && memcmp(t->token_bytes + t->token_offset[id], s, n) == 0) { return id; }
    }
}

static inline const BPEMergeSlot* bpe_lookup_merge(const BPETokenizer* t, int left, int right) {
    uint64_t key = (((uint64_t)left << 32) | (uint32_t)right) + 1;
    for (size_t i = bpe_mix64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const BPEMergeSlot* s = &t->merges[i];
        if (s->key == key) { return s; }
        if (s->key == 0) { return NULL; }
    }
}

// ----------------------------------------------------------------------------
// loading encoder.json and vocab.bpe (validated: any problem is one line naming the file)

static inline char* bpe_read_file(const char* path, size_t* size) {
    FILE* fp = fopenCheck(path, "rb");
    size_t n = file_size_check(fp, path);
    char* buf = (char*)mallocCheck(n + 1);
    if (n > 0) { freadCheck(buf, 1, n, fp, path); }
    fcloseCheck(fp, path);
    buf[n] = '\0';
    *size = n;
    return buf;
}

// a GPT-2 vocabulary string (code points from bytes_to_unicode) -> raw bytes; returns byte count or -1
static inline int bpe_unmap_string(const uint32_t* cps, int n, const int cp_to_byte[324], uint8_t* out) {
    for (int i = 0; i < n; i++) {
        if (cps[i] >= 324 || cp_to_byte[cps[i]] < 0) { return -1; }
        out[i] = (uint8_t)cp_to_byte[cps[i]];
    }
    return n;
}

// parses one JSON string at *p (the opening quote) into code points; returns count or -1
static inline int bpe_json_string(const char** p, uint32_t* cps, int max) {
    const uint8_t* s = (const uint8_t*)*p;
    if (*s != '"') { return -1; }
    s++;
    int n = 0;
    while (*s != '"') {
        if (*s == '\0' || n == max) { return -1; }
        uint32_t cp;
        if (*s == '\\') {
            s++;
            switch (*s) {
                case '"': cp = '"'; break;
                case '\\': cp = '\\'; break;
                case '/': cp = '/'; break;
                case 'b': cp = '\b'; break;
                case 'f': cp = '\f'; break;
                case 'n': cp = '\n'; break;
                case 'r': cp = '\r'; break;
                case 't': cp = '\t'; break;
                case 'u': {
                    char hex[5] = {0};
                    for (int k = 0; k < 4; k++) {
                        if (s[1 + k] == '\0') { return -1; }
                        hex[k] = (char)s[1 + k];
                    }
                    char* end;
                    cp = (uint32_t)strtoul(hex, &end, 16);
                    if (end != hex + 4) { return -1; }
                    s += 4;
                    break;
                }
                default: return -1;
            }
            s++;
        } else {
            int len = bpe_utf8_decode(s, 4, &cp);  // the terminating NUL stops a truncated sequence
            if (len == 0) { return -1; }
            s += len;
        }
        cps[n++] = cp;
    }
    *p = (const char*)(s + 1);
    return n;
}

static inline const char* bpe_skip_ws(const char* p) {
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') { p++; }
    return p;
}

static inline void bpe_load_encoder(BPETokenizer* t, const char* path, const int cp_to_byte[324]) {
    size_t size;
    char* json = bpe_read_file(path, &size);
    // pass 1 collects (id, bytes) pairs into a temporary array indexed by id
    int cap = 65536;  // shard tokens are uint16, so no vocabulary can be larger
    uint8_t* bytes = (uint8_t*)mallocCheck((size_t)cap * (BPE_MAX_TOKEN_BYTES + 1));
    int* lens = (int*)mallocCheck((size_t)cap * sizeof(int));
    for (int i = 0; i < cap; i++) { lens[i] = -1; }
    uint32_t cps[BPE_MAX_TOKEN_BYTES + 1];
    const char* p = bpe_skip_ws(json);
    if (*p != '{') { fatal("%s: corrupt vocabulary (expected a JSON object)", path); }
    p = bpe_skip_ws(p + 1);
    int count = 0, max_id = -1;
    while (*p != '}') {
        const char* entry = p;
        int n = bpe_json_string(&p, cps, BPE_MAX_TOKEN_BYTES + 1);
        if (n < 0) { fatal("%s: corrupt vocabulary (bad string at byte %td)", path, entry - json); }
        p = bpe_skip_ws(p);
        if (*p != ':') { fatal("%s: corrupt vocabulary (expected ':' at byte %td)", path, p - json); }
        char* end;
        long id = strtol(p + 1, &end, 10);
        if (end == p + 1 || id < 0 || id >= cap) {
            fatal("%s: corrupt vocabulary (bad token id at byte %td)", path, p - json);
        }
        if (n == 0 || n > BPE_MAX_TOKEN_BYTES) {
            fatal("%s: corrupt vocabulary (token %ld has length %d)", path, id, n);
        }
        if (lens[id] >= 0) { fatal("%s: corrupt vocabulary (token id %ld appears twice)", path, id); }
        if (bpe_unmap_string(cps, n, cp_to_byte, bytes + (size_t)id * (BPE_MAX_TOKEN_BYTES + 1)) < 0) {
            fatal("%s: corrupt vocabulary (token %ld has a character outside GPT-2's byte map)", path, id);
        }
        lens[id] = n;
        count++;
        if (id > max_id) { max_id = (int)id; }
        p = bpe_skip_ws(end);
        if (*p == ',') { p = bpe_skip_ws(p + 1); }
        else if (*p != '}') { fatal("%s: corrupt vocabulary (expected ',' or '}' at byte %td)", path, p - json); }
    }
    if (*bpe_skip_ws(p + 1) != '\0') { fatal("%s: corrupt vocabulary (data after the object)", path); }
    if (count != max_id + 1) {
        fatal("%s: corrupt vocabulary (%d tokens but ids go up to %d)", path, count, max_id);
    }
    if (count <= 256) { fatal("%s: corrupt vocabulary (only %d tokens)", path, count); }
    t->vocab_size = count;
    size_t total = 0;
    for (int i = 0; i < count; i++) { total += (size_t)lens[i]; }
    t->token_bytes = (uint8_t*)mallocCheck(total);
    t->token_offset = (uint32_t*)mallocCheck(((size_t)count + 1) * sizeof(uint32_t));
    size_t off = 0;
    for (int i = 0; i < count; i++) {
        t->token_offset[i] = (uint32_t)off;
        memcpy(t->token_bytes + off, bytes + (size_t)i * (BPE_MAX_TOKEN_BYTES + 1), (size_t)lens[i]);
        off += (size_t)lens[i];
    }
    t->token_offset[count] = (uint32_t)off;
    free(bytes);
    free(lens);
    free(json);
    // bytes -> id map, at most 1/4 full
    size_t slots = 1;
    while (slots < 4 * (size_t)count) { slots *= 2; }
    t->vocab_mask = slots - 1;
    t->vocab_slots = (int*)mallocCheck(slots * sizeof(int));
    for (size_t i = 0; i < slots; i++) { t->vocab_slots[i] = -1; }
    for (int id = 0; id < count; id++) {
        const uint8_t* s = t->token_bytes + t->token_offset[id];
        size_t n = t->token_offset[id + 1] - t->token_offset[id];
        if (bpe_lookup_token(t, s, n) >= 0) { fatal("%s: corrupt vocabulary (token %d appears twice)", path, id); }
        size_t i = bpe_hash_bytes(s, n) & t->vocab_mask;
        while (t->vocab_slots[i] >= 0) { i = (i + 1) & t->vocab_mask; }
        t->vocab_slots[i] = id;
    }
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        t->byte_token[b] = bpe_lookup_token(t, &byte, 1);
        if (t->byte_token[b] < 0) { fatal("%s: corrupt vocabulary (no token for byte 0x%02x)", path, b); }
    }
    const char* eot = "<|endoftext|>";
    if (bpe_lookup_token(t, (const uint8_t*)eot, strlen(eot)) != count - 1) {
        fatal("%s: not a GPT-2-style vocabulary (its last token, id %d, must be <|endoftext|>)", path, count - 1);
    }
    t->eot = count - 1;
}

static inline void bpe_load_merges(BPETokenizer* t, const char* path, const int cp_to_byte[324]) {
    size_t size;
    char* text = bpe_read_file(path, &size);
    int expected = t->vocab_size - 257;  // every merge adds one token to the 256 bytes and <|endoftext|>
    size_t slots = 1;
    while (slots < 4 * (size_t)expected) { slots *= 2; }
    t->merge_mask = slots - 1;
    t->merges = (BPEMergeSlot*)callocCheck(slots, sizeof(BPEMergeSlot));
    t->num_merges = 0;
    char* line = text;
    int line_no = 0;
    uint32_t cps[BPE_MAX_TOKEN_BYTES + 1];
    uint8_t buf[2 * (BPE_MAX_TOKEN_BYTES + 1)];
    while (*line != '\0') {
        char* eol = strchr(line, '\n');
        if (eol != NULL) { *eol = '\0'; }
        line_no++;
        if (line_no == 1) {
            if (strncmp(line, "#version", 8) != 0) { fatal("%s: corrupt merges (line 1 is not '#version: ...')", path); }
        } else if (*line != '\0') {
            char* space = strchr(line, ' ');
            if (space == NULL || space == line || space[1] == '\0' || strchr(space + 1, ' ') != NULL) {
                fatal("%s: corrupt merges (line %d is not two tokens)", path, line_no);
            }
            int lens[2];
            const char* parts[2] = {line, space + 1};
            *space = '\0';
            for (int k = 0; k < 2; k++) {
                const uint8_t* s = (const uint8_t*)parts[k];
                size_t remaining = strlen(parts[k]);
                int n = 0;
                while (remaining > 0) {
                    int len = n <= BPE_MAX_TOKEN_BYTES ? bpe_utf8_decode(s, remaining, &cps[n]) : 0;
                    if (len == 0) { fatal("%s: corrupt merges (line %d: bad UTF-8 or token too long)", path, line_no); }
                    s += len; remaining -= (size_t)len; n++;
                }
                lens[k] = bpe_unmap_string(cps, n, cp_to_byte, buf + (k == 0 ? 0 : lens[0]));
                if (lens[k] < 0) { fatal("%s: corrupt merges (line %d: character outside GPT-2's byte map)", path, line_no); }
            }
            int left = bpe_lookup_token(t, buf, (size_t)lens[0]);
            int right = bpe_lookup_token(t, buf + lens[0], (size_t)lens[1]);
            int merged = bpe_lookup_token(t, buf, (size_t)(lens[0] + lens[1]));
            if (left < 0 || right < 0 || merged < 0) {
                fatal("%s: corrupt merges (line %d names a token missing from the vocabulary)", path, line_no);
            }
            if (t->num_merges == expected) { fatal("%s: corrupt merges (more than %d merges)", path, expected); }
            uint64_t key = (((uint64_t)left << 32) | (uint32_t)right) + 1;
            size_t i = bpe_mix64(key) & t->merge_mask;
            while (t->merges[i].key != 0) {
                if (t->merges[i].key == key) { fatal("%s: corrupt merges (line %d repeats a merge)", path, line_no); }
                i = (i + 1) & t->merge_mask;
            }
            t->merges[i].key = key;
            t->merges[i].rank = t->num_merges++;
            t->merges[i].merged = merged;
        }
        if (eol == NULL) { break; }
        line = eol + 1;
    }
    if (t->num_merges != expected) {
        fatal("%s: corrupt merges (found %d, expected %d: truncated?)", path, t->num_merges, expected);
    }
    free(text);
    int* creator = (int*)mallocCheck((size_t)t->vocab_size * sizeof(int));  // rank of the merge making each token
    for (int id = 0; id < t->vocab_size; id++) { creator[id] = -1; }
    t->heap_ok = 1;
    for (size_t i = 0; i <= t->merge_mask; i++) {
        const BPEMergeSlot* m = &t->merges[i];
        if (m->key == 0) { continue; }
        if (creator[m->merged] >= 0) { t->heap_ok = 0; }  // two merges make the same token
        creator[m->merged] = m->rank;
    }
    for (size_t i = 0; i <= t->merge_mask; i++) {
        const BPEMergeSlot* m = &t->merges[i];
        if (m->key == 0) { continue; }
        int left = (int)((m->key - 1) >> 32), right = (int)((m->key - 1) & 0xffffffffu);
        if (creator[left] >= m->rank || creator[right] >= m->rank) { t->heap_ok = 0; }
    }
    free(creator);
}

static inline void bpe_reserve_scratch(BPETokenizer* t, size_t n);

// loads <dir>/encoder.json and <dir>/vocab.bpe
static inline void bpe_init(BPETokenizer* t, const char* dir) {
    memset(t, 0, sizeof(*t));
    uint32_t byte_to_cp[256];
    int cp_to_byte[324];
    bpe_bytes_to_unicode(byte_to_cp);
    for (int i = 0; i < 324; i++) { cp_to_byte[i] = -1; }
    for (int b = 0; b < 256; b++) { cp_to_byte[byte_to_cp[b]] = b; }
    char path[4096];
    snprintf(path, sizeof(path), "%s/encoder.json", dir);
    bpe_load_encoder(t, path, cp_to_byte);
    snprintf(path, sizeof(path), "%s/vocab.bpe", dir);
    bpe_load_merges(t, path, cp_to_byte);
    for (int c = 0; c < 128; c++) { t->ascii_class[c] = (uint8_t)bpe_class_of((uint32_t)c); }
    t->cache = (BPECacheSlot*)callocCheck(BPE_CACHE_SLOTS, sizeof(BPECacheSlot));
    t->cache_keys = (uint8_t*)mallocCheck(BPE_CACHE_KEY_BYTES);
    t->cache_vals = (uint16_t*)mallocCheck(BPE_CACHE_VAL_IDS * sizeof(uint16_t));
    t->sym_cap = 1;
    bpe_reserve_scratch(t, 256);
}

static inline void bpe_free(BPETokenizer* t) {
    free(t->token_bytes); free(t->token_offset); free(t->vocab_slots); free(t->merges);
    free(t->cache); free(t->cache_keys); free(t->cache_vals);
    free(t->sym); free(t->next); free(t->prev); free(t->heap);
    memset(t, 0, sizeof(*t));
}

// ----------------------------------------------------------------------------
// pre-tokenisation: the end of the pattern match that starts at s[i]

static inline int bpe_class_at(const BPETokenizer* t, const uint8_t* s, size_t n, size_t i, int* len) {
    if (s[i] < 0x80) { *len = 1; return t->ascii_class[s[i]]; }
    uint32_t cp;
    *len = bpe_utf8_decode(s + i, n - i, &cp);
    if (*len == 0) { *len = 1; return BPE_OTHER; }  // invalid byte: "other", on its own
    return bpe_class_of(cp);
}

static inline size_t bpe_piece_end(const BPETokenizer* t, const uint8_t* s, size_t n, size_t i) {
    // 's|'t|'re|'ve|'m|'ll|'d
    if (s[i] == '\'' && i + 1 < n) {
        uint8_t a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') { return i + 2; }
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) { return i + 3; }
    }
    int len;
    int cls = bpe_class_at(t, s, n, i, &len);
    size_t j = i + (size_t)len;
    //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+ : an optional ASCII space, then a run of one class
    if (s[i] == ' ' && j < n) {
        int next = bpe_class_at(t, s, n, j, &len);
        if (next != BPE_SPACE) { cls = next; j += (size_t)len; }
    }
    if (cls != BPE_SPACE) {
        while (j < n && bpe_class_at(t, s, n, j, &len) == cls) { j += (size_t)len; }
        return j;
    }
    // \s+(?!\S) | \s+ : a whitespace run, less its last character when a non-space follows
    size_t last = i;
    while (j < n && bpe_class_at(t, s, n, j, &len) == BPE_SPACE) { last = j; j += (size_t)len; }
    if (j < n && last > i) { return last; }
    return j;
}

// ----------------------------------------------------------------------------
// byte-pair merging of one piece, exactly as encoder.py: repeatedly take the lowest-ranked adjacent
// pair and merge all its occurrences, left to right. Short pieces (almost all) do just that. Long
// pieces would cost O(n^2) that way, so they pop pairs from a heap ordered by (rank, position):
// the same merges in the same order, because a merge's result only ever forms pairs of higher rank
// (bpe_init checks this property of the vocabulary; without it every piece takes the short path).

#define BPE_HEAP_MIN_PIECE 64

static inline void bpe_reserve_scratch(BPETokenizer* t, size_t n) {
    if (n <= t->sym_cap) { return; }
    while (t->sym_cap < n) { t->sym_cap *= 2; }
    free(t->sym); free(t->next); free(t->prev); free(t->heap);
    t->sym = (int*)mallocCheck(t->sym_cap * sizeof(int));
    t->next = (int*)mallocCheck(t->sym_cap * sizeof(int));
    t->prev = (int*)mallocCheck(t->sym_cap * sizeof(int));
    t->heap = (BPEHeapItem*)mallocCheck(3 * t->sym_cap * sizeof(BPEHeapItem));
}

// the symbols are t->sym[0..n) on entry and t->sym[0..return value) on exit
static inline size_t bpe_merge_simple(BPETokenizer* t, size_t n) {
    int* sym = t->sym;
    size_t count = n;
    while (count > 1) {
        const BPEMergeSlot* best = NULL;
        for (size_t k = 0; k + 1 < count; k++) {
            const BPEMergeSlot* m = bpe_lookup_merge(t, sym[k], sym[k + 1]);
            if (m != NULL && (best == NULL || m->rank < best->rank)) { best = m; }
        }
        if (best == NULL) { break; }
        int left = (int)((best->key - 1) >> 32), right = (int)((best->key - 1) & 0xffffffffu);
        size_t w = 0;
        for (size_t k = 0; k < count;) {
            if (k + 1 < count && sym[k] == left && sym[k + 1] == right) {
                sym[w++] = best->merged;
                k += 2;
            } else {
                sym[w++] = sym[k++];
            }
        }
        count = w;
    }
    return count;
}

static inline int bpe_heap_less(const BPEHeapItem* a, const BPEHeapItem* b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static inline void bpe_heap_push(BPETokenizer* t, size_t* size, const BPEMergeSlot* m, int pos, int left, int right) {
    BPEHeapItem item = {m->rank, pos, left, right, m->merged};
    BPEHeapItem* h = t->heap;
    size_t i = (*size)++;
    while (i > 0 && bpe_heap_less(&item, &h[(i - 1) / 2])) { h[i] = h[(i - 1) / 2]; i = (i - 1) / 2; }
    h[i] = item;
}

static inline BPEHeapItem bpe_heap_pop(BPETokenizer* t, size_t* size) {
    BPEHeapItem* h = t->heap;
    BPEHeapItem top = h[0], last = h[--(*size)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *size) { break; }
        if (c + 1 < *size && bpe_heap_less(&h[c + 1], &h[c])) { c++; }
        if (!bpe_heap_less(&h[c], &last)) { break; }
        h[i] = h[c];
        i = c;
    }
    if (*size > 0) { h[i] = last; }
    return top;
}

// symbols live at their first byte's position in a singly linked list (next); merged-away ones are -1
static inline size_t bpe_merge_heap(BPETokenizer* t, size_t n) {
    int* sym = t->sym;
    int* next = t->next;
    int* prev = t->prev;
    size_t size = 0;
    for (size_t k = 0; k < n; k++) { next[k] = (int)k + 1; prev[k] = (int)k - 1; }
    for (size_t k = 0; k + 1 < n; k++) {
        const BPEMergeSlot* m = bpe_lookup_merge(t, sym[k], sym[k + 1]);
        if (m != NULL) { bpe_heap_push(t, &size, m, (int)k, sym[k], sym[k + 1]); }
    }
    while (size > 0) {
        BPEHeapItem it = bpe_heap_pop(t, &size);
        int q = next[it.pos];
        if (sym[it.pos] != it.left || q >= (int)n || sym[q] != it.right) { continue; }  // stale entry
        sym[it.pos] = it.merged;
        sym[q] = -1;
        next[it.pos] = next[q];
        if (next[q] < (int)n) { prev[next[q]] = it.pos; }
        int p = prev[it.pos];
        const BPEMergeSlot* m;
        if (p >= 0 && (m = bpe_lookup_merge(t, sym[p], sym[it.pos])) != NULL) {
            bpe_heap_push(t, &size, m, p, sym[p], sym[it.pos]);
        }
        int r = next[it.pos];
        if (r < (int)n && (m = bpe_lookup_merge(t, sym[it.pos], sym[r])) != NULL) {
            bpe_heap_push(t, &size, m, it.pos, sym[it.pos], sym[r]);
        }
    }
    size_t w = 0;
    for (int k = 0; k < (int)n; k = next[k]) { sym[w++] = sym[k]; }
    return w;
}

// merges the bytes s[0..n) into t->sym[0..return value)
static inline size_t bpe_merge_piece(BPETokenizer* t, const uint8_t* s, size_t n) {
    bpe_reserve_scratch(t, n);
    for (size_t k = 0; k < n; k++) { t->sym[k] = t->byte_token[s[k]]; }
    return n >= BPE_HEAP_MIN_PIECE && t->heap_ok ? bpe_merge_heap(t, n) : bpe_merge_simple(t, n);
}

static inline void bpe_cache_clear(BPETokenizer* t) {
    memset(t->cache, 0, BPE_CACHE_SLOTS * sizeof(BPECacheSlot));
    t->cache_entries = t->cache_key_used = t->cache_val_used = 0;
}

// appends the ids of one piece to out, through the word cache
static inline void bpe_encode_piece(BPETokenizer* t, const uint8_t* s, size_t n, BPEIds* out) {
    BPECacheSlot* slot = NULL;
    uint64_t h = 0;
    if (n <= BPE_CACHE_MAX_PIECE) {
        h = bpe_hash_bytes(s, n);
        for (size_t i = h & (BPE_CACHE_SLOTS - 1);; i = (i + 1) & (BPE_CACHE_SLOTS - 1)) {
            slot = &t->cache[i];
            if (slot->hash == 0) { break; }
            if (slot->hash == h && slot->key_len == n && memcmp(t->cache_keys + slot->key_off, s, n) == 0) {
                bpe_ids_reserve(out, slot->val_len);
                for (int k = 0; k < slot->val_len; k++) { out->ids[out->n++] = t->cache_vals[slot->val_off + k]; }
                return;
            }
        }
    }
    size_t count = bpe_merge_piece(t, s, n);
    bpe_ids_reserve(out, count);
    memcpy(out->ids + out->n, t->sym, count * sizeof(int));
    out->n += count;
    if (slot == NULL) { return; }
    if (t->cache_entries >= BPE_CACHE_MAX_ENTRIES || t->cache_key_used + n > BPE_CACHE_KEY_BYTES ||
        t->cache_val_used + count > BPE_CACHE_VAL_IDS) {
        bpe_cache_clear(t);  // rare: a text with more distinct pieces than the cache holds
        size_t i = h & (BPE_CACHE_SLOTS - 1);
        slot = &t->cache[i];
    }
    slot->hash = h;
    slot->key_off = t->cache_key_used;
    slot->key_len = (uint16_t)n;
    slot->val_off = t->cache_val_used;
    slot->val_len = (uint16_t)count;
    memcpy(t->cache_keys + t->cache_key_used, s, n);
    for (size_t k = 0; k < count; k++) { t->cache_vals[t->cache_val_used + k] = (uint16_t)t->sym[k]; }
    t->cache_key_used += (uint32_t)n;
    t->cache_val_used += (uint32_t)count;
    t->cache_entries++;
}

// appends the GPT-2 token ids of text[0..n) (any bytes) to out
static inline void bpe_encode(BPETokenizer* t, const uint8_t* text, size_t n, BPEIds* out) {
    for (size_t i = 0; i < n;) {
        size_t end = bpe_piece_end(t, text, n, i);
        bpe_encode_piece(t, text + i, end - i, out);
        i = end;
    }
}

// the bytes of one token; ids outside the vocabulary are a caller bug, checked by the shard reader
static inline const uint8_t* bpe_token_bytes(const BPETokenizer* t, int id, size_t* len) {
    *len = t->token_offset[id + 1] - t->token_offset[id];
    return t->token_bytes + t->token_offset[id];
}

// ----------------------------------------------------------------------------
// llm.c's gpt2_tokenizer.bin: int32 header[256] = {20240328, 2, vocab size, eot id, 0...},
// then for each token: uint8 length, bytes

#define BPE_TOKENIZER_MAGIC 20240328

static inline void bpe_write_tokenizer_file(const BPETokenizer* t, const char* path) {
    int header[256] = {0};
    header[0] = BPE_TOKENIZER_MAGIC;
    header[1] = 2;
    header[2] = t->vocab_size;
    header[3] = t->eot;
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, header, sizeof(int), 256);
    for (int id = 0; id < t->vocab_size; id++) {
        size_t len;
        const uint8_t* bytes = bpe_token_bytes(t, id, &len);
        uint8_t len8 = (uint8_t)len;  // <= BPE_MAX_TOKEN_BYTES, checked at load
        atomic_write(&af, &len8, 1, 1);
        atomic_write(&af, bytes, 1, len);
    }
    atomic_commit(&af);
}

#endif // DATA_BPE_H
