/*
 * llmc/tokenizer.h — reads llm.c's gpt2_tokenizer.bin (magic 20240328, versions 1 and 2) to decode
 * token ids into bytes when printing samples. Decoding only: encoding lives in data/.
 * File: int32 header[256] ([0] magic, [1] version, [2] vocab size, [3] EOT id in version 2), then per
 * token one uint8 length and that many bytes. A missing file is not an error: samples print ids instead.
 */
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#include <ctype.h>
#include <stdint.h>
#include "llmc/utils.h"

#define TOKENIZER_MAGIC 20240328

typedef struct {
    uint32_t vocab_size;
    char** token_table;  // (vocab_size) NUL-terminated byte strings
    unsigned char* token_length; // (vocab_size) their lengths in bytes (a token may hold a 0 byte)
    int init_ok;
    int eot_token;
} Tokenizer;

// loads `path`; if the file does not exist, returns with init_ok = 0 (and no message, the caller decides)
static inline void tokenizer_init(Tokenizer* tokenizer, const char* path) {
    memset(tokenizer, 0, sizeof(*tokenizer));
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { return; }
    int header[256];
    size_t bytes = file_size_check(fp, path);
    if (bytes < sizeof(header)) { fatal("%s: truncated tokenizer file (%zu bytes, smaller than the 1024-byte header)", path, bytes); }
    freadCheck(header, sizeof(int), 256, fp, path);
    if (header[0] != TOKENIZER_MAGIC) {
        fatal("%s: not a tokenizer file (magic %d, expected %d)", path, header[0], TOKENIZER_MAGIC);
    }
    if (header[1] != 1 && header[1] != 2) { fatal("%s: unsupported tokenizer version %d", path, header[1]); }
    // every token takes at least its length byte: bounds the table before it is allocated
    if (header[2] <= 0 || header[2] > (1 << 24) || (size_t)header[2] > bytes - sizeof(header)) {
        fatal("%s: bad tokenizer vocab size %d for a %zu-byte file", path, header[2], bytes);
    }
    tokenizer->vocab_size = (uint32_t)header[2];
    tokenizer->eot_token = header[1] == 2 ? header[3] : 50256;
    tokenizer->token_table = (char**)mallocCheck(tokenizer->vocab_size * sizeof(char*));
    tokenizer->token_length = (unsigned char*)mallocCheck(tokenizer->vocab_size);
    for (uint32_t i = 0; i < tokenizer->vocab_size; i++) {
        unsigned char length;
        freadCheck(&length, 1, 1, fp, path);
        tokenizer->token_length[i] = length;
        tokenizer->token_table[i] = (char*)mallocCheck((size_t)length + 1);
        if (length > 0) { freadCheck(tokenizer->token_table[i], 1, length, fp, path); }
        tokenizer->token_table[i][length] = '\0';
    }
    if (ftell(fp) != (long)bytes) {
        fatal("%s: %zu bytes after the last of %u tokens (corrupt tokenizer file)", path, bytes - (size_t)ftell(fp),
              tokenizer->vocab_size);
    }
    fcloseCheck(fp, path);
    tokenizer->init_ok = 1;
}

// the bytes of token `id`, or NULL when out of range
static inline const char* tokenizer_decode(const Tokenizer* tokenizer, uint32_t id) {
    if (!tokenizer->init_ok || id >= tokenizer->vocab_size) { return NULL; }
    return tokenizer->token_table[id];
}

// the bytes of text token `id` stands for: 0 for <|endoftext|> (a marker, not text) and out-of-range ids
static inline size_t tokenizer_text_bytes(const Tokenizer* tokenizer, uint32_t id) {
    if (!tokenizer->init_ok || id >= tokenizer->vocab_size || (int)id == tokenizer->eot_token) { return 0; }
    return tokenizer->token_length[id];
}

// prints a token so that a terminal survives it: printable bytes and whitespace as is, others as \xNN
static inline void tokenizer_print(const Tokenizer* tokenizer, uint32_t id, FILE* out) {
    const char* s = tokenizer_decode(tokenizer, id);
    if (s == NULL) { fprintf(out, "<%u>", id); return; }
    for (const unsigned char* p = (const unsigned char*)s; *p; p++) {
        if (isprint(*p) || isspace(*p) || *p >= 0x80) { fputc(*p, out); } else { fprintf(out, "\\x%02x", *p); }
    }
}

static inline void tokenizer_free(Tokenizer* tokenizer) {
    if (tokenizer->init_ok) {
        for (uint32_t i = 0; i < tokenizer->vocab_size; i++) { free(tokenizer->token_table[i]); }
        free(tokenizer->token_table);
        free(tokenizer->token_length);
    }
    tokenizer->init_ok = 0;
}

#endif // LLMC_TOKENIZER_H
