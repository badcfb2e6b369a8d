/*
 * test/tiny_run.h — ./train_gpt2 on a tiny corpus, for the tests that drive the binary: shards in llm.c's
 * format (vocab 256, a learnable pattern with noise) under DIR (the includer defines it, one per test
 * file), a run with given flags, and its logs read back (metrics.jsonl's loss fields, summary.json).
 * Included after criterion.h and the trainer (VOCAB, random_u32).
 */
#ifndef TEST_TINY_RUN_H
#define TEST_TINY_RUN_H

// ----------------------------------------------------------------------------
// a tiny corpus: shards in llm.c's format with vocab 256, token streams with structure to learn

static inline void write_shard(const char* path, int ntok, uint64_t seed) {
    int header[256] = {0};
    header[0] = 20240520; header[1] = 1; header[2] = ntok; header[3] = VOCAB;
    uint16_t* toks = malloc((size_t)ntok * sizeof(uint16_t));
    uint64_t rng = seed;
    for (int i = 0; i < ntok; i++) {
        // mostly an arithmetic pattern, with noise: learnable, not trivial
        toks[i] = (uint16_t)((random_u32(&rng) % 4 == 0) ? random_u32(&rng) % VOCAB : (uint32_t)(i * 7 + i / 13) % VOCAB);
    }
    // Criterion runs tests in parallel and each rewrites the shards: write aside and rename, so that a
    // trainer started by another test never reads a half-written shard
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    FILE* f = fopen(tmp, "wb");
    cr_assert_not_null(f, "%s", tmp);
    fwrite(header, sizeof(int), 256, f);
    fwrite(toks, sizeof(uint16_t), (size_t)ntok, f);
    fclose(f);
    cr_assert_eq(rename(tmp, path), 0);
    free(toks);
}

static inline void corpus(void) {
    mkdir("build", 0755);
    mkdir(DIR, 0755);
    write_shard(DIR "/train_000000.bin", 1 << 16, 1);
    write_shard(DIR "/val_000000.bin", 4096, 2);
}

// runs ./train_gpt2 with the tiny corpus and `args`, output to out_dir; returns the exit status
static inline int trainer(const char* out_dir, const char* args) {
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 ./train_gpt2 -i " DIR "/train_*.bin -j " DIR "/val_*.bin -e d1 "
             "-b 2 -t 16 -s 0 -o %s %s > %s.log 2>&1", out_dir, args, out_dir);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static inline char* slurp(const char* path) {
    FILE* f = fopen(path, "rb");
    cr_assert_not_null(f, "%s missing", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char* s = malloc((size_t)n + 1);
    cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

// the "step", "phase", "loss", "val_loss" and "beta" fields of every metrics.jsonl line, concatenated:
// what must be identical between two runs (times differ)
static inline char* loss_fields(const char* dir) {
    char path[512];
    snprintf(path, sizeof(path), "%s/metrics.jsonl", dir);
    char* text = slurp(path);
    size_t cap = strlen(text) + 1;
    char* out = calloc(cap, 1);
    static const char* keys[] = {"\"step\": ", "\"phase\": ", "\"loss\": ", "\"val_loss\": ", "\"beta\": "};
    for (char* line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        for (int k = 0; k < 5; k++) {
            char* p = strstr(line, keys[k]);
            if (p == NULL) { continue; }
            size_t len = strcspn(p, ",}");
            strncat(out, p, len);
            strcat(out, ";");
        }
        strcat(out, "\n");
    }
    free(text);
    return out;
}

// a run's metrics.jsonl as the baseline would log it: without the times and the three fields only a hybrid
// run logs, which must then say that nothing happened (NULL if a line says otherwise)
static inline char* as_baseline(const char* dir) {
    char path[512];
    snprintf(path, sizeof(path), "%s/metrics.jsonl", dir);
    char* text = slurp(path);
    char* out = calloc(strlen(text) + 1, 1);
    static const char* hybrid_only = ", \"method\": \"drift\", \"beta\": null, \"predict_run_step\": null, \"rollback\": 0";
    static const char* times[] = {"\"ms\": ", "\"train_time_s\": "};
    for (char* line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char* h = strstr(line, hybrid_only);
        if (h != NULL) { memmove(h, h + strlen(hybrid_only), strlen(h + strlen(hybrid_only)) + 1); }
        else if (strstr(line, "\"beta\"") != NULL) { free(text); free(out); return NULL; }
        for (int k = 0; k < 2; k++) {
            char* t = strstr(line, times[k]);
            if (t == NULL) { continue; }
            char* end = t + strcspn(t, ",}");
            if (*end == ',') { end++; }
            while (*end == ' ') { end++; }
            memmove(t, end, strlen(end) + 1);
        }
        strcat(out, line);
        strcat(out, "\n");
    }
    free(text);
    return out;
}

// the "loss" fields of two loss_fields() records, in order: how many lines match before either ends
// (asserting each is equal); phase names may differ (warmup/full against full)
static inline int same_losses(const char* a, const char* b, const char* what) {
    const char *pa = a, *pb = b;
    int lines = 0;
    while ((pa = strstr(pa, "\"loss\": ")) != NULL && (pb = strstr(pb, "\"loss\": ")) != NULL) {
        cr_assert_eq(strncmp(pa, pb, strcspn(pa, ";")), 0, "%s: loss line %d differs", what, lines);
        pa++; pb++; lines++;
    }
    return lines;
}

static inline double summary_number(const char* dir, const char* key) {
    char path[512];
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    char* text = slurp(path);
    char pat[128];
    snprintf(pat, sizeof(pat), "\"%s\": ", key);
    char* p = strstr(text, pat);
    cr_assert_not_null(p, "%s has no %s", path, key);
    double v = atof(p + strlen(pat));
    free(text);
    return v;
}

#endif // TEST_TINY_RUN_H
