/*
 * test/fuzz/fuzz.h — lets libFuzzer drive the project's real loaders, error paths included.
 * The loaders take a path and, on bad input, print one line and exit(1) through fatal(). A fuzz target
 * cannot exit per input, so fuzz binaries are linked with -Wl,--wrap=exit,--wrap=fopen,... (FUZZ_WRAP in
 * the Makefile): while an input runs, exit() jumps back to the target, and the files and memory the
 * loader held are released, so the next input starts clean. The loaders themselves are unchanged.
 *
 * A target writes its input to a file and runs the loader between fuzz_begin() and fuzz_end():
 *     const char* path = fuzz_write_input(data, size);
 *     if (fuzz_begin()) { Thing t; thing_load(&t, path); ...use t...; thing_free(&t); }
 *     fuzz_end();
 * After an accepted input the tracking is simply dropped: a block the code forgot to free is then
 * unreachable and LeakSanitizer reports it (per input under libFuzzer, at exit in the replay binary).
 * fuzz_end() aborts (a finding) if an accepted input left a file open.
 * The same target builds without libFuzzer into a replay binary (replay.c) that `make test` runs over
 * the corpus and the saved crashers.
 */
#ifndef TEST_FUZZ_H
#define TEST_FUZZ_H

#include <glob.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static jmp_buf fuzz_env;
static volatile int fuzz_active;   // 1 while an input runs: exit() jumps back, allocations are tracked
static int fuzz_exits;             // inputs that ended in exit() (the loader rejected them)

// ----------------------------------------------------------------------------
// tracked resources: open FILE*s and heap blocks owned by the loader while an input runs

#define FUZZ_MAX_FILES 64
#define FUZZ_SLOTS (1 << 18)      // open addressing table of live heap blocks (tokenizers allocate ~50k)
static FILE* fuzz_files[FUZZ_MAX_FILES];
static glob_t fuzz_globs[FUZZ_MAX_FILES];  // copies: the loader's glob_t may live in a frame exit() unwound
static void* fuzz_blocks[FUZZ_SLOTS];
static size_t fuzz_live;
static uint32_t fuzz_used[FUZZ_SLOTS / 2];  // slots this input filled, so that clearing is O(used)
static size_t fuzz_nused;
#define FUZZ_TOMB ((void*)1)

void* __real_malloc(size_t size);
void* __real_calloc(size_t n, size_t size);
void* __real_realloc(void* ptr, size_t size);
void __real_free(void* ptr);
char* __real_strdup(const char* s);
FILE* __real_fopen(const char* path, const char* mode);
int __real_glob(const char* pattern, int flags, int (*errfunc)(const char*, int), glob_t* g);
void __real_globfree(glob_t* g);
int __real_fclose(FILE* fp);
__attribute__((noreturn)) void __real_exit(int status);

static size_t fuzz_slot(void* p) { return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull) & (FUZZ_SLOTS - 1); }

static void fuzz_track(void* p) {
    if (!fuzz_active || p == NULL) { return; }
    if (fuzz_nused >= FUZZ_SLOTS / 2) { fprintf(stderr, "fuzz.h: more than %d allocations\n", FUZZ_SLOTS / 2); abort(); }
    size_t i = fuzz_slot(p);
    while (fuzz_blocks[i] != NULL && fuzz_blocks[i] != FUZZ_TOMB) { i = (i + 1) & (FUZZ_SLOTS - 1); }
    if (fuzz_blocks[i] == NULL) { fuzz_used[fuzz_nused++] = (uint32_t)i; }
    fuzz_blocks[i] = p;
    fuzz_live++;
}

static void fuzz_untrack(void* p) {
    if (p == NULL || fuzz_live == 0) { return; }
    for (size_t i = fuzz_slot(p); fuzz_blocks[i] != NULL; i = (i + 1) & (FUZZ_SLOTS - 1)) {
        if (fuzz_blocks[i] == p) { fuzz_blocks[i] = FUZZ_TOMB; fuzz_live--; return; }
    }
}

void* __wrap_malloc(size_t size) { void* p = __real_malloc(size); fuzz_track(p); return p; }
void* __wrap_calloc(size_t n, size_t size) { void* p = __real_calloc(n, size); fuzz_track(p); return p; }
char* __wrap_strdup(const char* s) { char* p = __real_strdup(s); fuzz_track(p); return p; }
void* __wrap_realloc(void* ptr, size_t size) {
    void* p = __real_realloc(ptr, size);
    if (p != NULL || size == 0) { fuzz_untrack(ptr); fuzz_track(p); }
    return p;
}
void __wrap_free(void* ptr) { fuzz_untrack(ptr); __real_free(ptr); }

FILE* __wrap_fopen(const char* path, const char* mode) {
    FILE* fp = __real_fopen(path, mode);
    if (fp != NULL && fuzz_active) {
        int i = 0;
        while (i < FUZZ_MAX_FILES && fuzz_files[i] != NULL) { i++; }
        if (i == FUZZ_MAX_FILES) { fprintf(stderr, "fuzz.h: more than %d open files\n", FUZZ_MAX_FILES); abort(); }
        fuzz_files[i] = fp;
    }
    return fp;
}

int __wrap_fclose(FILE* fp) {
    for (int i = 0; i < FUZZ_MAX_FILES; i++) { if (fuzz_files[i] == fp) { fuzz_files[i] = NULL; } }
    return __real_fclose(fp);
}

int __wrap_glob(const char* pattern, int flags, int (*errfunc)(const char*, int), glob_t* g) {
    int rc = __real_glob(pattern, flags, errfunc, g);
    if (fuzz_active && g->gl_pathv != NULL) {
        int i = 0;
        while (i < FUZZ_MAX_FILES && fuzz_globs[i].gl_pathv != NULL) { i++; }
        if (i == FUZZ_MAX_FILES) { fprintf(stderr, "fuzz.h: more than %d live globs\n", FUZZ_MAX_FILES); abort(); }
        fuzz_globs[i] = *g;
    }
    return rc;
}

void __wrap_globfree(glob_t* g) {
    for (int i = 0; i < FUZZ_MAX_FILES; i++) {
        if (fuzz_globs[i].gl_pathv != NULL && fuzz_globs[i].gl_pathv == g->gl_pathv) { fuzz_globs[i].gl_pathv = NULL; }
    }
    __real_globfree(g);
}

__attribute__((noreturn)) void __wrap_exit(int status) {
    if (fuzz_active) { longjmp(fuzz_env, 1); }
    __real_exit(status);
}

// ----------------------------------------------------------------------------
// the target's side

// a per-process scratch file (on tmpfs when available) holding the current input
static char fuzz_path[256];  // removed again by fuzz_end(): libFuzzer ends with _Exit, no atexit

__attribute__((unused)) static const char* fuzz_write_input(const uint8_t* data, size_t size) {
    char* path = fuzz_path;
    if (path[0] == '\0') {
        const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(fuzz_path, sizeof(fuzz_path), "%s/llmc_fuzz_%d.bin", dir, (int)getpid());
    }
    FILE* fp = __real_fopen(path, "wb");
    if (fp == NULL || fwrite(data, 1, size, fp) != size || __real_fclose(fp) != 0) {
        fprintf(stderr, "fuzz.h: cannot write %s\n", path);
        abort();
    }
    return path;
}

// releases what a rejected input left behind: the loader exited holding files and memory
static void fuzz_release_all(void) {
    for (int i = 0; i < FUZZ_MAX_FILES; i++) {
        if (fuzz_files[i] != NULL) { __real_fclose(fuzz_files[i]); fuzz_files[i] = NULL; }
    }
    for (int i = 0; i < FUZZ_MAX_FILES; i++) {
        if (fuzz_globs[i].gl_pathv != NULL) { __real_globfree(&fuzz_globs[i]); fuzz_globs[i].gl_pathv = NULL; }
    }
    for (size_t k = 0; k < fuzz_nused; k++) {
        void* p = fuzz_blocks[fuzz_used[k]];
        if (p != FUZZ_TOMB) { __real_free(p); }
        fuzz_blocks[fuzz_used[k]] = NULL;
    }
    fuzz_live = 0;
    fuzz_nused = 0;
}

// setjmp must run in the target's own frame, hence a macro; true on entry, false after a rejection
#define fuzz_begin() (setjmp(fuzz_env) == 0 ? (fuzz_active = 1) : (fuzz_active = 0, fuzz_exits++, fuzz_release_all(), 0))

static void fuzz_end(void) {
    fuzz_active = 0;
    if (fuzz_path[0] != '\0') { unlink(fuzz_path); }
    int open_files = 0;
    for (int i = 0; i < FUZZ_MAX_FILES; i++) { open_files += fuzz_files[i] != NULL; }
    if (open_files != 0) {
        fprintf(stderr, "fuzz.h: an accepted input left %d files open\n", open_files);
        abort();
    }
    // forget this input's blocks (LeakSanitizer judges them now) and globs, so the tables never fill up
    for (size_t k = 0; k < fuzz_nused; k++) { fuzz_blocks[fuzz_used[k]] = NULL; }
    fuzz_nused = 0;
    fuzz_live = 0;
    for (int i = 0; i < FUZZ_MAX_FILES; i++) { fuzz_globs[i].gl_pathv = NULL; }
}

#endif // TEST_FUZZ_H
