/*
 * test/trainer_test_util.h — helpers for the trainer's tests: a private temp dir, tiny token shards and
 * model files written on the spot, and running ./train_gpt2 (or a function) in a child process while
 * capturing its exit status and stderr. Tests never depend on the default corpus.
 */
#ifndef TRAINER_TEST_UTIL_H
#define TRAINER_TEST_UTIL_H

#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

// --precision auto measures which precision is faster here, and a machine's load can change its answer from one
// run to the next: the trainer runs of the tests, which compare runs bit for bit, take the test-only override of
// that measurement, bf16 (auto as it was before it measured: bf16 wherever it can be), unless a test sets it
__attribute__((constructor)) static void pin_precision_probe(void) { setenv("LLMC_PRECISION_TEST_PROBE", "bf16", 0); }

// a fresh directory under /tmp; removed by rm_rf at the end of a test
static inline void make_temp_dir(char* out, size_t size) {
    snprintf(out, size, "/tmp/llmc_test_XXXXXX");
    cr_assert_not_null(mkdtemp(out), "mkdtemp failed");
}

static inline void rm_rf(const char* dir) {
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

// dir/name in out; a path that does not fit fails the test rather than naming another file
static inline void join_path(char* out, size_t size, const char* dir, const char* name) {
    int w = snprintf(out, size, "%s/%s", dir, name);
    cr_assert(w >= 0 && (size_t)w < size, "path %s/%s longer than %zu bytes", dir, name, size);
}

// a shard with an explicit header (magic, version, declared count, vocab) and `n` tokens of data
static inline void write_shard_raw(const char* path, int magic, int version, int declared, int vocab,
                                   const uint16_t* tokens, size_t n) {
    FILE* fp = fopen(path, "wb");
    cr_assert_not_null(fp, "cannot write %s", path);
    int header[256] = {0};
    header[0] = magic;
    header[1] = version;
    header[2] = declared;
    header[3] = vocab;
    fwrite(header, sizeof(int), 256, fp);
    if (n > 0) { fwrite(tokens, sizeof(uint16_t), n, fp); }
    fclose(fp);
}

// a valid shard of n tokens, token i = (i * 7 + salt) % vocab, with vocab in the header
static inline void write_shard(const char* path, size_t n, int vocab, int salt) {
    uint16_t* tokens = (uint16_t*)malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) { tokens[i] = (uint16_t)((i * 7 + (size_t)salt) % (size_t)vocab); }
    write_shard_raw(path, 20240520, 1, (int)n, vocab, tokens, n);
    free(tokens);
}

// a shard of text-like data that a tiny model can learn: repeated runs of consecutive ids
static inline void write_learnable_shard(const char* path, size_t n, int vocab, uint32_t seed) {
    uint16_t* tokens = (uint16_t*)malloc(n * sizeof(uint16_t));
    uint32_t s = seed * 2654435761u + 1;
    size_t i = 0;
    while (i < n) {
        s = s * 1664525u + 1013904223u;
        int start = (int)((s >> 8) % (uint32_t)(vocab / 2));
        int len = 8 + (int)((s >> 20) % 24);
        for (int k = 0; k < len && i < n; k++) { tokens[i++] = (uint16_t)((start + k) % vocab); }
    }
    write_shard_raw(path, 20240520, 1, (int)n, vocab, tokens, n);
    free(tokens);
}

static inline void write_bytes(const char* path, const void* data, size_t n) {
    FILE* fp = fopen(path, "wb");
    cr_assert_not_null(fp);
    if (n > 0) { fwrite(data, 1, n, fp); }
    fclose(fp);
}

// whole file into a NUL-terminated malloc'd buffer (NULL if missing)
static inline char* read_text(const char* path) {
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { return NULL; }
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char* buf = (char*)malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, fp);
    buf[got] = '\0';
    fclose(fp);
    return buf;
}

// metrics.jsonl without the wall-clock fields ("ms" and "train_time_s" sit between grad_norm and tokens)
static inline char* metrics_without_times(const char* out_dir) {
    char path[1024];
    join_path(path, sizeof(path), out_dir, "metrics.jsonl");
    char* text = read_text(path);
    cr_assert_not_null(text, "no %s", path);
    char* out = malloc(strlen(text) + 1);
    char* o = out;
    for (char* p = text; *p;) {
        char* ms = strstr(p, ", \"ms\": ");
        char* nl = strchr(p, '\n');
        if (ms != NULL && (nl == NULL || ms < nl)) {
            char* tok = strstr(ms, ", \"tokens\"");
            memcpy(o, p, (size_t)(ms - p));
            o += ms - p;
            p = tok;
        } else {
            size_t n = nl ? (size_t)(nl - p) + 1 : strlen(p);
            memcpy(o, p, n);
            o += n;
            p += n;
        }
    }
    *o = '\0';
    free(text);
    return out;
}

static inline int count_lines(const char* text) {
    int n = 0;
    for (const char* p = text; *p; p++) { n += *p == '\n'; }
    return n;
}

// LeakSanitizer cannot stop the threads a forked child inherited from Criterion's runner in its
// registry, and says so on stderr at exit; a child that ran `fn` only to see it exit checks no leaks.
static int in_forked_child = 0;
int __lsan_is_turned_off(void) { return in_forked_child; }

typedef struct {
    int exited;        // 1: normal exit, 0: killed by a signal (a crash)
    int status;        // exit code, or signal number
    char err[8192];    // stderr
} RunResult;

static inline void collect(pid_t pid, int fd, RunResult* r) {
    size_t len = 0;
    ssize_t got;
    while ((got = read(fd, r->err + len, sizeof(r->err) - 1 - len)) > 0) {
        len += (size_t)got;
        if (len == sizeof(r->err) - 1) { break; }
    }
    r->err[len] = '\0';
    close(fd);
    int st;
    waitpid(pid, &st, 0);
    r->exited = WIFEXITED(st);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st);
}

// runs argv (argv[0] a path) with stdout to `stdout_path` (or /dev/null), capturing stderr
static inline RunResult run_argv(char* const argv[], const char* stdout_path) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        FILE* out = fopen(stdout_path ? stdout_path : "/dev/null", "w");
        if (out != NULL) { dup2(fileno(out), 1); }
        setenv("OMP_NUM_THREADS", "2", 1);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    RunResult r;
    collect(pid, fds[0], &r);
    return r;
}

// splits a command line on spaces (no quoting needed by the tests) into argv (capacity 128). A leading
// ./train_gpt2 becomes $LLMC_TRAINER when set (`make test-asan` points it at the sanitized build).
static inline int split_cmd(char* buf, char** argv) {
    int argc = 0;
    for (char* tok = strtok(buf, " "); tok != NULL && argc < 127; tok = strtok(NULL, " ")) { argv[argc++] = tok; }
    argv[argc] = NULL;
    const char* trainer = getenv("LLMC_TRAINER");
    if (argc > 0 && trainer != NULL && trainer[0] != '\0' && strcmp(argv[0], "./train_gpt2") == 0) {
        argv[0] = (char*)trainer;
    }
    return argc;
}

static inline RunResult run_cmd(const char* cmdline, const char* stdout_path) {
    char buf[8192];
    snprintf(buf, sizeof(buf), "%s", cmdline);
    char* argv[128];
    split_cmd(buf, argv);
    return run_argv(argv, stdout_path);
}

// runs fn(arg) in a child (for code that calls fatal()), capturing its exit status and stderr
static inline RunResult run_fn(void (*fn)(void*), void* arg) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        in_forked_child = 1;
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    RunResult r;
    collect(pid, fds[0], &r);
    return r;
}

// stderr lines of the program itself: a sanitizer's notes ("==PID==...", under `make test-asan`) are not
// the program's output
static inline int count_program_lines(const char* text) {
    int n = 0;
    for (const char* line = text; *line;) {
        const char* nl = strchr(line, '\n');
        n += strncmp(line, "==", 2) != 0;
        if (nl == NULL) { break; }
        line = nl + 1;
    }
    return n;
}

// the standard expectation for bad input: a normal exit 1 and exactly one stderr line containing `needle`
static inline void assert_one_line_error(const RunResult* r, const char* needle) {
    cr_assert(r->exited, "crashed with signal %d; stderr: %s", r->status, r->err);
    cr_assert_eq(r->status, 1, "exit status %d, expected 1; stderr: %s", r->status, r->err);
    cr_assert_eq(count_program_lines(r->err), 1, "expected one stderr line, got: %s", r->err);
    cr_assert(strncmp(r->err, "error: ", 7) == 0, "stderr does not start with 'error: ': %s", r->err);
    cr_assert_not_null(strstr(r->err, needle), "stderr does not mention '%s': %s", needle, r->err);
}

#endif // TRAINER_TEST_UTIL_H
