/*
 * tokenize — GPT-2 BPE tokenizer command: text -> llm.c token shards, shards -> text, and llm.c's
 * gpt2_tokenizer.bin for the trainers' sampler. See data/README.md for the formats.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <sys/stat.h>
#include "llmc/utils.h"
#include "llmc/bpe.h"
#include "data/bpe_learn.h"
#include "data/jsonl.h"
#include "data/shard.h"

// where `encode` writes without -o: inside the repository's data/ (git-ignored), not the working directory
#define DEFAULT_OUT_DIR "data/tokenized"

static void usage(FILE* out) {
    fprintf(out,
        "usage: ./tokenize [--vocab DIR] COMMAND [options]\n"
        "GPT-2 byte-level BPE (ids identical to OpenAI's encoder), llm.c shard and tokenizer files.\n"
        "\n"
        "commands:\n"
        "  encode [options] [FILE...]   text -> <out>/train_%%06d.bin and <out>/val_%%06d.bin shards\n"
        "                               (no FILE or '-' reads stdin); each document is prefixed by\n"
        "                               <|endoftext|> (%d)\n"
        "      -o DIR              output directory, must exist (default: %s, created)\n"
        "      --doc-sep LINE      a line equal to LINE separates documents inside a file\n"
        "                          (default: none, each FILE is one document)\n"
        "      --val-every K       document k (0-based, over all files) goes to val when k %% K == K-1;\n"
        "                          0 = no val split (default 10); with fewer than K documents the\n"
        "                          last 1/K of the tokens (the end of the text) go to val\n"
        "      --shard-tokens N    tokens per shard file (default 100000000)\n"
        "      --jsonl FIELD       the files are JSON Lines: one document per line, its text in FIELD\n"
        "  decode SHARD...              shard tokens -> text on stdout (<|endoftext|> printed as is)\n"
        "  ids [FILE]                   token ids of the text, space-separated, on stdout\n"
        "  vocab OUT                    write llm.c's tokenizer file (magic 20240328, version 2)\n"
        "  learn -n N -o DIR [FILE...]  learn a byte-level BPE vocabulary of N tokens (>= 257; 257: bytes)\n"
        "                               from the text: DIR/encoder.json, vocab.bpe, tokenizer.bin\n"
        "                               (--doc-sep and --jsonl as for encode; --vocab DIR then uses it)\n"
        "\n"
        "  --vocab DIR   directory of encoder.json and vocab.bpe: GPT-2's, or one `learn` wrote\n"
        "                (default data/gpt2)\n"
        "  -h, --help    this text\n",
        BPE_EOT, DEFAULT_OUT_DIR);
}

__attribute__((noreturn)) static void bad_usage(const char* msg, const char* arg) {
    fprintf(stderr, "error: %s%s%s (see ./tokenize --help)\n", msg, arg ? ": " : "", arg ? arg : "");
    exit(EXIT_FAILURE);
}

static size_t parse_count(const char* flag, const char* s, size_t max) {
    char* end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (s[0] == '\0' || s[0] == '-' || *end != '\0' || errno != 0 || v > max) {
        fprintf(stderr, "error: flag %s: expected an integer in [0, %zu], got '%s'\n", flag, max, s);
        exit(EXIT_FAILURE);
    }
    return (size_t)v;
}

// whole file (or stdin for "-") into memory
static uint8_t* read_input(const char* path, size_t* size) {
    FILE* fp = strcmp(path, "-") == 0 ? stdin : fopenCheck(path, "rb");
    size_t cap = 1 << 20, n = 0;
    uint8_t* buf = (uint8_t*)mallocCheck(cap);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            uint8_t* grown = (uint8_t*)realloc(buf, cap);
            if (grown == NULL) { fatal("%s: out of memory reading %zu bytes", path, cap); }
            buf = grown;
        }
        size_t got = fread(buf + n, 1, cap - n, fp);
        n += got;
        if (got == 0) {
            if (ferror(fp)) { fatal("%s: read error (%s)", path, strerror(errno)); }
            break;
        }
    }
    if (fp != stdin) { fclose(fp); }
    *size = n;
    return buf;
}

// ----------------------------------------------------------------------------
// encode

typedef struct {
    BPETokenizer* tok;
    BPEIds ids;
    ShardWriter train, val;
    int val_every;
    size_t docs[2];      // documents in train, val
    size_t bytes;
} Encoder;

static void encode_document(Encoder* e, const uint8_t* text, size_t n) {
    if (n == 0) { return; }  // nothing between two separators: not a document
    size_t k = e->docs[0] + e->docs[1];
    int is_val = e->val_every > 0 && k % (size_t)e->val_every == (size_t)e->val_every - 1;
    e->ids.n = 0;
    bpe_ids_reserve(&e->ids, 1);
    e->ids.ids[e->ids.n++] = e->tok->eot;
    bpe_encode(e->tok, text, n, &e->ids);
    shard_writer_push(is_val ? &e->val : &e->train, e->ids.ids, e->ids.n);
    e->docs[is_val]++;
    e->bytes += n;
}

// the documents of one input: the whole file, or the parts between --doc-sep lines, or (--jsonl FIELD)
// one per line; each goes to fn
typedef void (*DocFn)(void* ctx, const uint8_t* text, size_t n);

static void read_documents(const char* path, const char* sep, const char* jsonl, DocFn fn, void* ctx) {
    size_t n;
    uint8_t* text = read_input(path, &n);
    if (jsonl != NULL) {
        uint8_t* doc = (uint8_t*)mallocCheck(n + 1);
        size_t line_no = 0;
        for (size_t pos = 0; pos < n;) {
            uint8_t* nl = (uint8_t*)memchr(text + pos, '\n', n - pos);
            size_t end = nl ? (size_t)(nl - text) : n;
            line_no++;
            const char* why = NULL;
            long len = jsonl_field((const char*)text + pos, (const char*)text + end, jsonl, doc, &why);
            if (len == -1) { fatal("%s:%zu: %s (--jsonl %s)", path, line_no, why, jsonl); }
            if (len >= 0) { fn(ctx, doc, (size_t)len); }
            pos = nl ? end + 1 : n;
        }
        free(doc);
    } else if (sep == NULL) {
        fn(ctx, text, n);
    } else {
        size_t sep_len = strlen(sep), doc_start = 0;
        for (size_t pos = 0; pos < n;) {
            uint8_t* nl = (uint8_t*)memchr(text + pos, '\n', n - pos);
            size_t end = nl ? (size_t)(nl - text) : n;
            size_t next = nl ? end + 1 : n;
            if (end - pos == sep_len && memcmp(text + pos, sep, sep_len) == 0) {
                fn(ctx, text + doc_start, pos - doc_start);
                doc_start = next;
            }
            pos = next;
        }
        fn(ctx, text + doc_start, n - doc_start);
    }
    free(text);
}

static void encode_doc(void* ctx, const uint8_t* text, size_t n) { encode_document((Encoder*)ctx, text, n); }

// fewer documents than --val-every gave no val document: move the last 1/K of the train tokens (the tail
// of the last document(s), still in the writer's buffer unless it was just flushed) to val, so that the
// trainer has val data from the same text. Returns the number of tokens moved.
static size_t hold_out_tail(Encoder* e) {
    size_t total = e->train.tokens_written + e->train.n;
    size_t hold = total / (size_t)e->val_every;
    if (hold > e->train.n) { hold = e->train.n; }
    if (hold == 0) { return 0; }
    int* ids = (int*)mallocCheck(hold * sizeof(int));
    for (size_t i = 0; i < hold; i++) { ids[i] = e->train.buf[e->train.n - hold + i]; }
    e->train.n -= hold;
    shard_writer_push(&e->val, ids, hold);
    free(ids);
    return hold;
}

static int cmd_encode(BPETokenizer* tok, int argc, char** argv) {
    const char* out_dir = NULL;
    const char* sep = NULL;
    const char* jsonl = NULL;
    int val_every = 10;
    size_t shard_tokens = 100000000;
    int first_file = argc;
    for (int i = 0; i < argc; i++) {
        int has_value = i + 1 < argc;
        if (strcmp(argv[i], "-o") == 0 && has_value) { out_dir = argv[++i]; }
        else if (strcmp(argv[i], "--doc-sep") == 0 && has_value) { sep = argv[++i]; }
        else if (strcmp(argv[i], "--jsonl") == 0 && has_value) { jsonl = argv[++i]; }
        else if (strcmp(argv[i], "--val-every") == 0 && has_value) { val_every = (int)parse_count(argv[i], argv[i + 1], INT32_MAX); i++; }
        else if (strcmp(argv[i], "--shard-tokens") == 0 && has_value) { shard_tokens = parse_count(argv[i], argv[i + 1], INT32_MAX); i++; }
        else if (argv[i][0] == '-' && argv[i][1] != '\0') { bad_usage("unknown flag or missing value", argv[i]); }
        else { first_file = i; break; }
    }
    if (shard_tokens == 0) { bad_usage("flag --shard-tokens: must be at least 1", NULL); }
    if (sep != NULL && strchr(sep, '\n') != NULL) { bad_usage("flag --doc-sep: the separator is one line", NULL); }
    struct stat st;
    if (out_dir == NULL) {
        out_dir = DEFAULT_OUT_DIR;
        if (mkdir("data", 0755) != 0 && errno != EEXIST) { fatal("data: cannot create directory (%s)", strerror(errno)); }
        if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) { fatal("%s: cannot create directory (%s)", out_dir, strerror(errno)); }
        printf("no -o given: writing the shards to %s/\n", out_dir);
    }
    if (stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode)) { fatal("%s: output directory does not exist", out_dir); }
    for (int i = first_file; i < argc; i++) {  // fail on an unreadable input before writing anything
        if (strcmp(argv[i], "-") != 0) { fcloseCheck(fopenCheck(argv[i], "rb"), argv[i]); }
    }
    Encoder e = {0};
    e.tok = tok;
    e.val_every = val_every;
    shard_writer_init(&e.train, out_dir, "train", shard_tokens, tok->vocab_size);
    shard_writer_init(&e.val, out_dir, "val", shard_tokens, tok->vocab_size);
    double t0 = clock_seconds();
    if (first_file == argc) { read_documents("-", sep, jsonl, encode_doc, &e); }
    for (int i = first_file; i < argc; i++) { read_documents(argv[i], sep, jsonl, encode_doc, &e); }
    double dt = clock_seconds() - t0;
    size_t train_tokens = e.train.tokens_written + e.train.n, val_tokens = e.val.tokens_written + e.val.n;
    if (train_tokens == 0) { fatal("no training documents in the input (empty input, or every document went to val)"); }
    if (e.val_every > 0 && e.docs[1] == 0) {
        size_t held = hold_out_tail(&e);
        train_tokens -= held;
        val_tokens += held;
        if (held > 0) {
            printf("fewer documents (%zu) than --val-every %d: held out the last %zu tokens (1/%d of the text, "
                   "from its end) as val\n", e.docs[0], e.val_every, held, e.val_every);
        } else {
            printf("fewer documents (%zu) than --val-every %d and too little text to hold any out: no val shard\n",
                   e.docs[0], e.val_every);
        }
    }
    int train_shards = shard_writer_close(&e.train);
    int val_shards = shard_writer_close(&e.val);
    bpe_ids_free(&e.ids);
    fprintf(stderr, "train: %zu documents, %zu tokens, %d shard(s) %s/train_*.bin\n",
            e.docs[0], train_tokens, train_shards, out_dir);
    fprintf(stderr, "val: %zu documents, %zu tokens, %d shard(s)%s%s%s\n", e.docs[1], val_tokens, val_shards,
            val_shards ? " " : " (no val documents)", val_shards ? out_dir : "", val_shards ? "/val_*.bin" : "");
    fprintf(stderr, "encoded %.1f MB in %.2f s (%.1f MB/s, including reading and writing)\n",
            (double)e.bytes / 1e6, dt, dt > 0 ? (double)e.bytes / 1e6 / dt : 0.0);
    const char* splits[2] = {"train", "val"};
    int counts[2] = {train_shards, val_shards};
    for (int k = 0; k < 2; k++) {  // a stale shard from an earlier, longer run would join the trainer's glob
        char path[4200];
        shard_path(path, sizeof(path), out_dir, splits[k], counts[k]);
        if (stat(path, &st) == 0) {
            fprintf(stderr, "warning: %s is left over from an earlier run; delete it before training\n", path);
        }
    }
    return 0;
}

// ----------------------------------------------------------------------------
// decode, ids, vocab

static int cmd_decode(BPETokenizer* tok, int argc, char** argv) {
    if (argc == 0) { bad_usage("decode needs at least one shard", NULL); }
    for (int i = 0; i < argc; i++) {
        Shard s;
        shard_read(&s, argv[i]);
        if (s.vocab_size > tok->vocab_size) {
            fatal("%s: vocabulary of %d tokens, larger than GPT-2's %d", argv[i], s.vocab_size, tok->vocab_size);
        }
        for (size_t k = 0; k < s.num_tokens; k++) {
            size_t len;
            const uint8_t* bytes = bpe_token_bytes(tok, s.tokens[k], &len);
            fwrite(bytes, 1, len, stdout);
        }
        shard_free(&s);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) { fatal("stdout: write failed (%s)", strerror(errno)); }
    return 0;
}

static int cmd_ids(BPETokenizer* tok, int argc, char** argv) {
    if (argc > 1) { bad_usage("ids takes at most one file", NULL); }
    size_t n;
    uint8_t* text = read_input(argc == 1 ? argv[0] : "-", &n);
    BPEIds ids = {0};
    bpe_encode(tok, text, n, &ids);
    for (size_t k = 0; k < ids.n; k++) { printf(k ? " %d" : "%d", ids.ids[k]); }
    printf("\n");
    free(text);
    bpe_ids_free(&ids);
    return 0;
}

static int cmd_vocab(BPETokenizer* tok, int argc, char** argv) {
    if (argc != 1) { bad_usage("vocab needs exactly one output path", NULL); }
    bpe_write_tokenizer_file(tok, argv[0]);
    fprintf(stderr, "wrote %s (%d tokens, eot %d)\n", argv[0], tok->vocab_size, tok->eot);
    return 0;
}

// ----------------------------------------------------------------------------
// learn

static void learn_doc(void* ctx, const uint8_t* text, size_t n) { bpe_learn_add_text((BPELearner*)ctx, text, n); }

static int cmd_learn(int argc, char** argv) {
    const char* out_dir = NULL;
    const char* sep = NULL;
    const char* jsonl = NULL;
    long n_tokens = -1;
    int first_file = argc;
    for (int i = 0; i < argc; i++) {
        int has_value = i + 1 < argc;
        if (strcmp(argv[i], "-o") == 0 && has_value) { out_dir = argv[++i]; }
        else if (strcmp(argv[i], "-n") == 0 && has_value) { n_tokens = (long)parse_count(argv[i], argv[i + 1], 65536); i++; }
        else if (strcmp(argv[i], "--doc-sep") == 0 && has_value) { sep = argv[++i]; }
        else if (strcmp(argv[i], "--jsonl") == 0 && has_value) { jsonl = argv[++i]; }
        else if (argv[i][0] == '-' && argv[i][1] != '\0') { bad_usage("unknown flag or missing value", argv[i]); }
        else { first_file = i; break; }
    }
    if (n_tokens < 257) { bad_usage("learn needs -n N with N >= 257 (256 bytes + <|endoftext|>)", NULL); }
    if (out_dir == NULL) { bad_usage("learn needs -o DIR", NULL); }
    struct stat st;
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) { fatal("%s: cannot create directory (%s)", out_dir, strerror(errno)); }
    if (stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode)) { fatal("%s: not a directory", out_dir); }
    for (int i = first_file; i < argc; i++) {
        if (strcmp(argv[i], "-") != 0) { fcloseCheck(fopenCheck(argv[i], "rb"), argv[i]); }
    }
    double t0 = clock_seconds();
    BPELearner L;
    bpe_learn_init(&L);
    if (first_file == argc) { read_documents("-", sep, jsonl, learn_doc, &L); }
    for (int i = first_file; i < argc; i++) { read_documents(argv[i], sep, jsonl, learn_doc, &L); }
    double t1 = clock_seconds();
    int got = bpe_learn_run(&L, (int)n_tokens);
    double t2 = clock_seconds();
    bpe_learn_write(&L, out_dir);
    fprintf(stderr, "learned %d tokens (%d merges) from %d distinct words in %.2f s (counting %.2f s, merging %.2f s)%s\n",
            got, L.nmerges, L.nwords, t2 - t0, t1 - t0, t2 - t1, got < n_tokens ? ": the text has no more pairs to merge" : "");
    bpe_learn_free(&L);
    // the llm.c tokenizer file, for the trainers' samples, from the files just written (read back: checked)
    BPETokenizer tok;
    bpe_init(&tok, out_dir);
    char path[4200];
    snprintf(path, sizeof(path), "%s/tokenizer.bin", out_dir);
    bpe_write_tokenizer_file(&tok, path);
    bpe_free(&tok);
    fprintf(stderr, "wrote %s/encoder.json, %s/vocab.bpe, %s (%d tokens, eot %d)\n", out_dir, out_dir, path, got, got - 1);
    return 0;
}

int main(int argc, char** argv) {
    const char* vocab_dir = "data/gpt2";
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) { usage(stdout); return 0; }
        if (strcmp(argv[i], "--vocab") == 0 && i + 1 < argc) { vocab_dir = argv[++i]; }
        else { bad_usage("unknown flag or missing value", argv[i]); }
    }
    if (i == argc) { bad_usage("no command given", NULL); }
    const char* cmd = argv[i];
    if (strcmp(cmd, "learn") == 0) {
        for (int k = i + 1; k < argc; k++) {
            if (strcmp(argv[k], "-h") == 0 || strcmp(argv[k], "--help") == 0) { usage(stdout); return 0; }
        }
        return cmd_learn(argc - i - 1, argv + i + 1);
    }
    int (*run)(BPETokenizer*, int, char**) =
        strcmp(cmd, "encode") == 0 ? cmd_encode : strcmp(cmd, "decode") == 0 ? cmd_decode :
        strcmp(cmd, "ids") == 0 ? cmd_ids : strcmp(cmd, "vocab") == 0 ? cmd_vocab : NULL;
    if (run == NULL) { bad_usage("unknown command", cmd); }
    for (int k = i + 1; k < argc; k++) {
        if (strcmp(argv[k], "-h") == 0 || strcmp(argv[k], "--help") == 0) { usage(stdout); return 0; }
    }
    BPETokenizer tok;
    bpe_init(&tok, vocab_dir);
    int rc = run(&tok, argc - i - 1, argv + i + 1);
    bpe_free(&tok);
    return rc;
}
