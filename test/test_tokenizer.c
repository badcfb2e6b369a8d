/*
 * test/test_tokenizer.c — GPT-2 BPE tokenizer (llmc/bpe.h), shards (data/shard.h) and ./tokenize.
 * Expected ids come from an independent encoder (npm gpt-3-encoder under node, see
 * data/reference/gpt2_reference.js), committed as test/fixtures/tokenizer_cases.tsv and
 * data/default/reference.sha256. Run from the repository root (make test does).
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "llmc/bpe.h"
#include "data/shard.h"
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"

static BPETokenizer tok;

static uint32_t test_rand(uint64_t* state) {  // xorshift*, as llmc/rand.h
    *state ^= *state >> 12; *state ^= *state << 25; *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

static void load_tokenizer(void) { bpe_init(&tok, "data/gpt2"); }
static void free_tokenizer(void) { bpe_free(&tok); }

// decode ids into a malloc'd buffer
static uint8_t* decode_ids(const int* ids, size_t n, size_t* len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) { size_t l; bpe_token_bytes(&tok, ids[i], &l); total += l; }
    uint8_t* out = malloc(total + 1);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const uint8_t* b = bpe_token_bytes(&tok, ids[i], &l);
        memcpy(out + off, b, l);
        off += l;
    }
    *len = total;
    return out;
}

// ----------------------------------------------------------------------------
// known answers from the independent encoder

static int hex_value(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

Test(known_answers, ids_equal_reference_encoder_and_decode_back, .init = load_tokenizer, .fini = free_tokenizer) {
    FILE* fp = fopen("test/fixtures/tokenizer_cases.tsv", "r");
    cr_assert_not_null(fp, "test/fixtures/tokenizer_cases.tsv missing (run from the repository root)");
    static char line[1 << 16];
    int cases = 0;
    BPEIds ids = {0};
    while (fgets(line, sizeof(line), fp) != NULL) {
        if (line[0] == '#') { continue; }
        line[strcspn(line, "\n")] = '\0';
        char* name = line;
        char* hex = strchr(name, '\t');
        cr_assert_not_null(hex);
        *hex++ = '\0';
        char* expected = strchr(hex, '\t');
        cr_assert_not_null(expected);
        *expected++ = '\0';
        size_t n = strlen(hex) / 2;
        uint8_t* input = malloc(n + 1);
        for (size_t i = 0; i < n; i++) { input[i] = (uint8_t)(hex_value(hex[2 * i]) * 16 + hex_value(hex[2 * i + 1])); }
        ids.n = 0;
        bpe_encode(&tok, input, n, &ids);
        size_t k = 0;
        for (char* p = expected; *p != '\0'; k++) {
            char* end;
            long want = strtol(p, &end, 10);
            cr_assert(k < ids.n, "case %s: only %zu ids, expected more", name, ids.n);
            cr_assert_eq(ids.ids[k], want, "case %s: id %zu is %d, reference says %ld", name, k, ids.ids[k], want);
            p = end;
            while (*p == ' ') { p++; }
        }
        cr_assert_eq(ids.n, k, "case %s: %zu ids, reference has %zu", name, ids.n, k);
        size_t len;
        uint8_t* back = decode_ids(ids.ids, ids.n, &len);
        cr_assert(len == n && memcmp(back, input, n) == 0, "case %s: decode(encode(x)) != x", name);
        free(back);
        free(input);
        cases++;
    }
    fclose(fp);
    bpe_ids_free(&ids);
    cr_assert_geq(cases, 25, "expected the full fixture file, read %d cases", cases);
}

Test(known_answers, word_cache_gives_the_same_ids_as_a_cold_encode, .init = load_tokenizer, .fini = free_tokenizer) {
    const char* text = "The cache must not change a thing: the the the, don't don't; 1984 1984\n\n";
    BPEIds a = {0}, b = {0};
    bpe_encode(&tok, (const uint8_t*)text, strlen(text), &a);   // fills the cache
    bpe_encode(&tok, (const uint8_t*)text, strlen(text), &b);   // served from it
    cr_assert_eq(a.n, b.n);
    cr_assert(memcmp(a.ids, b.ids, a.n * sizeof(int)) == 0);
    bpe_ids_free(&a);
    bpe_ids_free(&b);
}

// ----------------------------------------------------------------------------
// round trip on random byte strings: every byte string encodes to valid ids and decodes to itself

Test(round_trip, random_byte_strings, .init = load_tokenizer, .fini = free_tokenizer) {
    static const char* fragments[] = {"'s", "'ll", " ", "  ", "\n", "\t", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\xa6\x99",
                                      "\xe2\x82", "\x80", "\xff", "\xed\xa0\x80", "a", "Z", "7", "!", "\xc2\xa0"};
    const size_t num_fragments = sizeof(fragments) / sizeof(fragments[0]);
    uint64_t rng = 42;
    uint8_t buf[600];
    BPEIds ids = {0};
    for (int trial = 0; trial < 3000; trial++) {
        size_t n = 0, target = test_rand(&rng) % 300;
        int mode = trial % 3;  // 0: uniform bytes, 1: printable ASCII, 2: mixed valid/invalid UTF-8 fragments
        while (n < target) {
            if (mode == 0) { buf[n++] = (uint8_t)test_rand(&rng); }
            else if (mode == 1) { buf[n++] = (uint8_t)(32 + test_rand(&rng) % 95); }
            else {
                const char* f = fragments[test_rand(&rng) % num_fragments];
                size_t l = strlen(f);
                memcpy(buf + n, f, l);
                n += l;
            }
        }
        ids.n = 0;
        bpe_encode(&tok, buf, n, &ids);
        for (size_t k = 0; k < ids.n; k++) {
            cr_assert(ids.ids[k] >= 0 && ids.ids[k] < BPE_EOT, "trial %d: id %d out of range", trial, ids.ids[k]);
        }
        size_t len;
        uint8_t* back = decode_ids(ids.ids, ids.n, &len);
        cr_assert(len == n && memcmp(back, buf, n) == 0, "trial %d (mode %d, %zu bytes): round trip failed", trial, mode, n);
        free(back);
    }
    bpe_ids_free(&ids);
}

Test(round_trip, long_pieces_bypass_the_cache_correctly, .init = load_tokenizer, .fini = free_tokenizer) {
    // pieces longer than BPE_CACHE_MAX_PIECE: a 1000-letter word, a 1000-space run, 1000 punctuation marks
    static uint8_t text[3100];
    size_t n = 0;
    for (int i = 0; i < 1000; i++) { text[n++] = (uint8_t)("abcdefghij"[i % 10]); }
    for (int i = 0; i < 1000; i++) { text[n++] = ' '; }
    for (int i = 0; i < 1000; i++) { text[n++] = (uint8_t)("!?-"[i % 3]); }
    BPEIds ids = {0};
    bpe_encode(&tok, text, n, &ids);
    size_t len;
    uint8_t* back = decode_ids(ids.ids, ids.n, &len);
    cr_assert(len == n && memcmp(back, text, n) == 0);
    free(back);
    bpe_ids_free(&ids);
}

Test(round_trip, heap_merge_equals_simple_merge, .init = load_tokenizer, .fini = free_tokenizer) {
    // the long-piece path must merge exactly like encoder.py's loop, on pieces of every length
    cr_assert_eq(tok.heap_ok, 1, "GPT-2's merges should allow the heap path");
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz eeeetaoin  ,.'!?0123";
    uint64_t rng = 7;
    uint8_t piece[700];
    int* expected = malloc(sizeof(piece) * sizeof(int));
    for (int trial = 0; trial < 400; trial++) {
        size_t n = 1 + test_rand(&rng) % (trial < 200 ? 40 : sizeof(piece));
        for (size_t k = 0; k < n; k++) {
            piece[k] = trial % 2 ? (uint8_t)alphabet[test_rand(&rng) % (sizeof(alphabet) - 1)] : (uint8_t)test_rand(&rng);
        }
        bpe_reserve_scratch(&tok, n);
        for (size_t k = 0; k < n; k++) { tok.sym[k] = tok.byte_token[piece[k]]; }
        size_t a = bpe_merge_simple(&tok, n);
        memcpy(expected, tok.sym, a * sizeof(int));
        for (size_t k = 0; k < n; k++) { tok.sym[k] = tok.byte_token[piece[k]]; }
        size_t b = bpe_merge_heap(&tok, n);
        cr_assert_eq(a, b, "trial %d (%zu bytes): %zu vs %zu symbols", trial, n, a, b);
        cr_assert(memcmp(expected, tok.sym, a * sizeof(int)) == 0, "trial %d: different merges", trial);
    }
    free(expected);
}

// ----------------------------------------------------------------------------
// helpers for running ./tokenize

static char tmpdir[64];

static void make_tmpdir(void) {
    load_tokenizer();
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_tokenizer_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    cr_assert_eq(system(cmd), 0);
    free_tokenizer();
}

// runs a shell command with stderr captured; returns its exit status, fills err (first line) and lines
static int run(const char* cmd, char* err, size_t err_size, int* lines) {
    char full[8192], errfile[128];
    snprintf(errfile, sizeof(errfile), "%s/stderr.txt", tmpdir);
    snprintf(full, sizeof(full), "(%s) 2>%s", cmd, errfile);
    int status = system(full);
    FILE* fp = fopen(errfile, "r");
    cr_assert_not_null(fp);
    *lines = 0;
    err[0] = '\0';
    char line[4096];
    while (fgets(line, sizeof(line), fp) != NULL) {
        if (*lines == 0) { snprintf(err, err_size, "%s", line); }
        (*lines)++;
    }
    fclose(fp);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void write_file(const char* path, const char* text) {
    FILE* fp = fopen(path, "wb");
    cr_assert_not_null(fp);
    fputs(text, fp);
    fclose(fp);
}

// ----------------------------------------------------------------------------
// shards: what `tokenize encode` writes is what the reader (and the trainer) expects

Test(shards, encode_splits_documents_and_places_eot, .init = make_tmpdir, .fini = remove_tmpdir) {
    const char* docs[] = {"First document.\nTwo lines.\n", "Second one", "Third: don't stop\n",
                          "Fourth \xff invalid byte", "Fifth.\n"};
    char path[256], cmd[1024];
    // file a holds docs 0-2 separated by "===" lines (with an empty document to skip), file b holds 3-4
    snprintf(path, sizeof(path), "%s/a.txt", tmpdir);
    char a[512];
    snprintf(a, sizeof(a), "%s===\n%s\n===\n===\n%s", docs[0], docs[1], docs[2]);
    write_file(path, a);
    snprintf(path, sizeof(path), "%s/b.txt", tmpdir);
    char b[512];
    snprintf(b, sizeof(b), "%s\n===\n%s", docs[3], docs[4]);
    write_file(path, b);
    snprintf(cmd, sizeof(cmd), "./tokenize encode -o %s --doc-sep === --val-every 2 --shard-tokens 7 %s/a.txt %s/b.txt",
             tmpdir, tmpdir, tmpdir);
    char err[4096];
    int lines;
    cr_assert_eq(run(cmd, err, sizeof(err), &lines), 0, "encode failed: %s", err);
    // the separator line's own newline ends the separator; the newline before it stays in the document
    const char* expect_docs[] = {"First document.\nTwo lines.\n", "Second one\n", "Third: don't stop\n",
                                 "Fourth \xff invalid byte\n", "Fifth.\n"};
    for (int split = 0; split < 2; split++) {  // train: docs 0, 2, 4; val: docs 1, 3 (k % 2 == 1)
        BPEIds want = {0};
        for (int d = split; d < 5; d += 2) {
            bpe_ids_reserve(&want, 1);
            want.ids[want.n++] = BPE_EOT;
            bpe_encode(&tok, (const uint8_t*)expect_docs[d], strlen(expect_docs[d]), &want);
        }
        size_t got = 0;
        int shard_index = 0;
        for (;; shard_index++) {
            snprintf(path, sizeof(path), "%s/%s_%06d.bin", tmpdir, split ? "val" : "train", shard_index);
            FILE* fp = fopen(path, "rb");
            if (fp == NULL) { break; }
            int header[256];
            cr_assert_eq(fread(header, sizeof(int), 256, fp), 256);
            fseek(fp, 0, SEEK_END);
            long size = ftell(fp);
            fclose(fp);
            cr_assert_eq(header[0], 20240520);
            cr_assert_eq(header[1], 1);
            cr_assert_eq(header[3], 50257);
            cr_assert_eq(size, 1024 + 2 * header[2], "%s: size %ld for %d tokens", path, size, header[2]);
            Shard s;
            shard_read(&s, path);
            cr_assert(s.num_tokens == 7 || got + s.num_tokens == want.n, "%s: only the last shard may be short", path);
            for (size_t i = 0; i < s.num_tokens; i++, got++) {
                cr_assert(got < want.n);
                cr_assert_eq(s.tokens[i], want.ids[got], "%s token %zu", path, i);
            }
            shard_free(&s);
        }
        cr_assert_eq(got, want.n, "%s: %zu tokens, expected %zu", split ? "val" : "train", got, want.n);
        cr_assert_eq(shard_index, (int)((want.n + 6) / 7));
        bpe_ids_free(&want);
    }
}

Test(shards, decode_prints_the_original_text, .init = make_tmpdir, .fini = remove_tmpdir) {
    char path[256], cmd[1024], err[4096];
    int lines;
    const char* text = "Caf\xc3\xa9 \xf0\x9f\xa6\x99  spaces\t\ttabs \x80\xfe bytes\n";
    snprintf(path, sizeof(path), "%s/in.txt", tmpdir);
    write_file(path, text);
    snprintf(cmd, sizeof(cmd), "./tokenize encode -o %s --val-every 0 %s && ./tokenize decode %s/train_000000.bin > %s/out.txt",
             tmpdir, path, tmpdir, tmpdir);
    cr_assert_eq(run(cmd, err, sizeof(err), &lines), 0, "%s", err);
    snprintf(path, sizeof(path), "%s/out.txt", tmpdir);
    FILE* fp = fopen(path, "rb");
    char out[512];
    size_t n = fread(out, 1, sizeof(out), fp);
    fclose(fp);
    const char* eot = "<|endoftext|>";
    cr_assert_eq(n, strlen(eot) + strlen(text));
    cr_assert(memcmp(out, eot, strlen(eot)) == 0 && memcmp(out + strlen(eot), text, strlen(text)) == 0);
}

// reads a whole (small) file into a NUL-terminated buffer
static char* read_text(const char* path) {
    FILE* fp = fopen(path, "rb");
    cr_assert_not_null(fp, "%s missing", path);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return buf;
}

Test(shards, fewer_documents_than_val_every_still_hold_out_the_tail, .init = make_tmpdir, .fini = remove_tmpdir) {
    // 3 documents with the default --val-every 10: no document is a val document, so the last tenth of
    // the tokens moves to val; train followed by val must be exactly the encoded text, and stdout says so
    const char* docs[] = {"In the beginning was a small corpus.\n", "It had three documents, not ten.\n",
                          "The last one ends the text, and its tail becomes the val data.\n"};
    char path[256], cmd[1024], err[4096];
    int lines;
    BPEIds want = {0};
    for (int d = 0; d < 3; d++) {
        snprintf(path, sizeof(path), "%s/doc%d.txt", tmpdir, d);
        write_file(path, docs[d]);
        bpe_ids_reserve(&want, 1);
        want.ids[want.n++] = BPE_EOT;
        bpe_encode(&tok, (const uint8_t*)docs[d], strlen(docs[d]), &want);
    }
    snprintf(cmd, sizeof(cmd), "./tokenize encode -o %s %s/doc0.txt %s/doc1.txt %s/doc2.txt > %s/stdout.txt",
             tmpdir, tmpdir, tmpdir, tmpdir, tmpdir);
    cr_assert_eq(run(cmd, err, sizeof(err), &lines), 0, "encode failed: %s", err);
    Shard train, val;
    snprintf(path, sizeof(path), "%s/train_000000.bin", tmpdir);
    shard_read(&train, path);
    snprintf(path, sizeof(path), "%s/val_000000.bin", tmpdir);
    shard_read(&val, path);
    cr_assert_eq(val.num_tokens, want.n / 10, "val holds %zu tokens, expected 1/10 of %zu", val.num_tokens, want.n);
    cr_assert_eq(train.num_tokens + val.num_tokens, want.n);
    for (size_t i = 0; i < want.n; i++) {
        int got = i < train.num_tokens ? train.tokens[i] : val.tokens[i - train.num_tokens];
        cr_assert_eq(got, want.ids[i], "token %zu", i);
    }
    snprintf(path, sizeof(path), "%s/stdout.txt", tmpdir);
    char expect[256];
    snprintf(expect, sizeof(expect), "fewer documents (3) than --val-every 10: held out the last %zu tokens", want.n / 10);
    const char* out = read_text(path);
    cr_assert_not_null(strstr(out, expect), "stdout does not say what was held out: %s", out);
    shard_free(&train);
    shard_free(&val);
    bpe_ids_free(&want);
}

Test(shards, encode_without_o_writes_to_data_tokenized, .init = make_tmpdir, .fini = remove_tmpdir) {
    // run from an empty directory so that the default directory is created from nothing (data/ included)
    char cwd[4096], path[4500], cmd[10000], err[4096];
    int lines;
    cr_assert_not_null(getcwd(cwd, sizeof(cwd)));
    snprintf(path, sizeof(path), "%s/in.txt", tmpdir);
    write_file(path, "Some text of my own.\n");
    snprintf(cmd, sizeof(cmd), "cd %s && %s/tokenize --vocab %s/data/gpt2 encode --val-every 0 in.txt > stdout.txt",
             tmpdir, cwd, cwd);
    cr_assert_eq(run(cmd, err, sizeof(err), &lines), 0, "encode failed: %s", err);
    snprintf(path, sizeof(path), "%s/stdout.txt", tmpdir);
    const char* out = read_text(path);
    cr_assert_not_null(strstr(out, "no -o given: writing the shards to data/tokenized/"), "stdout: %s", out);
    Shard s;
    snprintf(path, sizeof(path), "%s/data/tokenized/train_000000.bin", tmpdir);
    shard_read(&s, path);
    cr_assert_eq(s.tokens[0], BPE_EOT);
    shard_free(&s);
    snprintf(path, sizeof(path), "%s/train_000000.bin", tmpdir);
    cr_assert_eq(access(path, F_OK), -1, "a shard was written into the working directory");
}

Test(shards, trainer_dataloader_reads_what_encode_writes, .init = make_tmpdir, .fini = remove_tmpdir) {
    // several shards of 100 tokens; the val loader (no shuffle) must yield batch k of shard s as
    // tokens[k*B*T .. k*B*T + B*T] (inputs) shifted by one (targets), shard by shard in glob order
    char path[256], cmd[1024], err[4096];
    int lines;
    snprintf(path, sizeof(path), "%s/in.txt", tmpdir);
    FILE* fp = fopen(path, "wb");
    for (int d = 0; d < 40; d++) { fprintf(fp, "Document %d: it's a truth universally acknowledged.\n--\n", d); }
    fclose(fp);
    snprintf(cmd, sizeof(cmd), "./tokenize encode -o %s --doc-sep -- --val-every 0 --shard-tokens 100 %s", tmpdir, path);
    cr_assert_eq(run(cmd, err, sizeof(err), &lines), 0, "%s", err);
    int B = 2, T = 8;
    char pattern[256];
    snprintf(pattern, sizeof(pattern), "%s/train_*.bin", tmpdir);
    glob_t g;
    cr_assert_eq(glob(pattern, 0, NULL, &g), 0);
    size_t expected_batches = 0;
    for (size_t s = 0; s < g.gl_pathc; s++) {
        Shard shard;
        shard_read(&shard, g.gl_pathv[s]);
        if (s == 0) { cr_assert_eq(shard.tokens[0], GPT2_EOT, "the first token is a document start"); }
        if (shard.num_tokens >= (size_t)(B * T + 1)) { expected_batches += (shard.num_tokens - 1) / (size_t)(B * T); }
        shard_free(&shard);
    }
    cr_assert_geq(g.gl_pathc, 3);
    // drop a too-short last shard: the trainer requires every shard to hold one batch
    Shard last;
    shard_read(&last, g.gl_pathv[g.gl_pathc - 1]);
    if (last.num_tokens < (size_t)(B * T + 1)) { unlink(g.gl_pathv[g.gl_pathc - 1]); }
    shard_free(&last);
    globfree(&g);
    DataLoader loader;
    dataloader_init(&loader, pattern, B, T, GPT2_VOCAB, 0, 1337);
    cr_assert_eq(loader.total_batches, expected_batches);
    for (int s = 0; s < loader.num_shards; s++) {
        Shard shard;
        shard_read(&shard, loader.glob_result.gl_pathv[s]);
        for (size_t k = 0; k < loader.shard_batches[s]; k++) {
            dataloader_next_batch(&loader);
            for (int i = 0; i < B * T; i++) {
                cr_assert_eq(loader.inputs[i], shard.tokens[k * B * T + i], "shard %d batch %zu input %d", s, k, i);
                cr_assert_eq(loader.targets[i], shard.tokens[k * B * T + i + 1], "shard %d batch %zu target %d", s, k, i);
            }
        }
        shard_free(&shard);
    }
    dataloader_free(&loader);
    // the default corpus opens with the trainer's defaults (B=4, T=64), and val starts at a document
    dataloader_init(&loader, "data/default/val_*.bin", 4, 64, GPT2_VOCAB, 0, 1337);
    dataloader_next_batch(&loader);
    cr_assert_eq(loader.inputs[0], GPT2_EOT);
    dataloader_free(&loader);
    dataloader_init(&loader, "data/default/train_*.bin", 4, 64, GPT2_VOCAB, 1, 1337);
    cr_assert_gt(loader.total_batches, 7000);
    dataloader_free(&loader);
}

// ----------------------------------------------------------------------------
// llm.c's tokenizer file

Test(tokenizer_file, matches_llmc_layout, .init = make_tmpdir, .fini = remove_tmpdir) {
    char path[256];
    snprintf(path, sizeof(path), "%s/gpt2_tokenizer.bin", tmpdir);
    bpe_write_tokenizer_file(&tok, path);
    FILE* fp = fopen(path, "rb");
    int header[256];
    cr_assert_eq(fread(header, sizeof(int), 256, fp), 256);
    cr_assert_eq(header[0], 20240328);
    cr_assert_eq(header[1], 2);
    cr_assert_eq(header[2], 50257);
    cr_assert_eq(header[3], 50256);
    for (int id = 0; id < 50257; id++) {
        uint8_t len;
        uint8_t bytes[256];
        cr_assert_eq(fread(&len, 1, 1, fp), 1);
        cr_assert_eq(fread(bytes, 1, len, fp), len);
        size_t want_len;
        const uint8_t* want = bpe_token_bytes(&tok, id, &want_len);
        cr_assert(len == want_len && memcmp(bytes, want, len) == 0, "token %d", id);
    }
    cr_assert_eq(fgetc(fp), EOF, "trailing bytes after the last token");
    fclose(fp);
    // the committed default file is the same
    char cmd[512], err[4096];
    int lines;
    snprintf(cmd, sizeof(cmd), "cmp %s data/gpt2_tokenizer.bin", path);
    cr_assert_eq(run(cmd, err, sizeof(err), &lines), 0, "data/gpt2_tokenizer.bin differs from a fresh one: %s", err);
    size_t len;
    // and the trainer's reader (llmc/tokenizer.h) gets every token back
    Tokenizer reader;
    tokenizer_init(&reader, "data/gpt2_tokenizer.bin");
    cr_assert_eq(reader.init_ok, 1);
    cr_assert_eq(reader.vocab_size, 50257);
    cr_assert_eq(reader.eot_token, 50256);
    for (int id = 0; id < 50257; id++) {
        size_t want_len;
        const uint8_t* want = bpe_token_bytes(&tok, id, &want_len);
        cr_assert(memcmp(tokenizer_decode(&reader, (uint32_t)id), want, want_len) == 0, "token %d", id);
    }
    tokenizer_free(&reader);
    cr_assert(memcmp(bpe_token_bytes(&tok, 15496, &len), "Hello", 5) == 0 && len == 5);
    cr_assert(memcmp(bpe_token_bytes(&tok, 995, &len), " world", 6) == 0 && len == 6);
}

// ----------------------------------------------------------------------------
// the default corpus: committed shards are the reference encoder's output, and our encoder agrees

Test(default_corpus, shards_equal_reference_and_reencode_identically, .init = make_tmpdir, .fini = remove_tmpdir) {
    char err[4096];
    int lines;
    cr_assert_eq(run("sha256sum -c --quiet data/default/reference.sha256", err, sizeof(err), &lines), 0,
                 "default shards differ from the reference encoder's: %s", err);
    const char* splits[2] = {"data/default/train_000000.bin", "data/default/val_000000.bin"};
    for (int k = 0; k < 2; k++) {
        Shard s;
        shard_read(&s, splits[k]);
        cr_assert_eq(s.tokens[0], BPE_EOT, "%s must start with a document", splits[k]);
        cr_assert_gt(s.num_tokens, 4 * 64 + 1, "%s: smaller than one default batch", splits[k]);
        // decode each document and encode it again: the same ids
        BPEIds ids = {0};
        size_t start = 0, docs = 0;
        for (size_t i = 1; i <= s.num_tokens; i++) {
            if (i < s.num_tokens && s.tokens[i] != BPE_EOT) { continue; }
            int* doc = malloc((i - start - 1) * sizeof(int) + 1);
            for (size_t j = start + 1; j < i; j++) { doc[j - start - 1] = s.tokens[j]; }
            size_t len;
            uint8_t* text = decode_ids(doc, i - start - 1, &len);
            ids.n = 0;
            bpe_encode(&tok, text, len, &ids);
            cr_assert_eq(ids.n, i - start - 1, "%s document %zu: token count", splits[k], docs);
            cr_assert(memcmp(ids.ids, doc, ids.n * sizeof(int)) == 0, "%s document %zu: ids", splits[k], docs);
            free(text);
            free(doc);
            start = i;
            docs++;
        }
        cr_assert_geq(docs, k == 0 ? 1000 : 50, "%s: %zu documents", splits[k], docs);
        bpe_ids_free(&ids);
        shard_free(&s);
    }
}

// ----------------------------------------------------------------------------
// bad input: one line on stderr naming the problem, exit status 1

static void expect_error(const char* cmd, const char* needle) {
    char err[4096];
    int lines;
    int rc = run(cmd, err, sizeof(err), &lines);
    cr_assert_eq(rc, 1, "`%s` exited %d, expected 1 (stderr: %s)", cmd, rc, err);
    cr_assert_eq(lines, 1, "`%s` printed %d lines on stderr, expected one: %s", cmd, lines, err);
    cr_assert(strncmp(err, "error: ", 7) == 0, "`%s`: %s", cmd, err);
    cr_assert_not_null(strstr(err, needle), "`%s`: error does not mention '%s': %s", cmd, needle, err);
}

Test(bad_input, one_line_errors, .init = make_tmpdir, .fini = remove_tmpdir) {
    char cmd[2048], dir[256], path[256];
    snprintf(path, sizeof(path), "%s/ok.txt", tmpdir);
    write_file(path, "hello\n");
    snprintf(cmd, sizeof(cmd), "./tokenize encode -o %s %s/no_such_file.txt", tmpdir, tmpdir);
    expect_error(cmd, "no_such_file.txt");
    snprintf(cmd, sizeof(cmd), "./tokenize encode -o %s/no_such_dir %s", tmpdir, path);
    expect_error(cmd, "no_such_dir");
    snprintf(cmd, sizeof(cmd), "./tokenize encode --shard-tokens 12x -o %s %s", tmpdir, path);
    expect_error(cmd, "--shard-tokens");
    expect_error("./tokenize encode --frobnicate", "--frobnicate");
    expect_error("./tokenize transmogrify", "transmogrify");
    // vocabulary: missing, truncated, wrong content
    snprintf(cmd, sizeof(cmd), "echo hi | ./tokenize --vocab %s/nowhere ids", tmpdir);
    expect_error(cmd, "encoder.json");
    snprintf(dir, sizeof(dir), "%s/vocab_trunc", tmpdir);
    snprintf(cmd, sizeof(cmd), "mkdir %s && head -c 500000 data/gpt2/encoder.json > %s/encoder.json && cp data/gpt2/vocab.bpe %s/",
             dir, dir, dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "echo hi | ./tokenize --vocab %s ids", dir);
    expect_error(cmd, "encoder.json");
    snprintf(dir, sizeof(dir), "%s/merges_trunc", tmpdir);
    snprintf(cmd, sizeof(cmd), "mkdir %s && cp data/gpt2/encoder.json %s/ && head -n 30000 data/gpt2/vocab.bpe > %s/vocab.bpe",
             dir, dir, dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "echo hi | ./tokenize --vocab %s ids", dir);
    expect_error(cmd, "vocab.bpe");
    snprintf(dir, sizeof(dir), "%s/merges_garbage", tmpdir);
    snprintf(cmd, sizeof(cmd), "mkdir %s && cp data/gpt2/encoder.json %s/ && (head -n 100 data/gpt2/vocab.bpe; echo 'zz qq xx'; "
             "tail -n +102 data/gpt2/vocab.bpe) > %s/vocab.bpe", dir, dir, dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "echo hi | ./tokenize --vocab %s ids", dir);
    expect_error(cmd, "vocab.bpe");
    // shards: not a shard, truncated, token out of range
    snprintf(cmd, sizeof(cmd), "./tokenize decode %s", path);
    expect_error(cmd, "ok.txt");
    snprintf(cmd, sizeof(cmd), "head -c 2000 data/default/val_000000.bin > %s/short.bin && ./tokenize decode %s/short.bin",
             tmpdir, tmpdir);
    expect_error(cmd, "short.bin");
    snprintf(cmd, sizeof(cmd), "(head -c 1024 data/default/val_000000.bin; printf '\\377\\377'; "
             "tail -c +1027 data/default/val_000000.bin) > %s/range.bin && ./tokenize decode %s/range.bin", tmpdir, tmpdir);
    expect_error(cmd, "range.bin");
    snprintf(cmd, sizeof(cmd), "./tokenize decode %s/missing.bin", tmpdir);
    expect_error(cmd, "missing.bin");
}
