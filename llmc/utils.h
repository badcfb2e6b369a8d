/*
 * llmc/utils.h — checked wrappers for file I/O and allocation, atomic file writes, and the one clock.
 * Every failure prints one line naming the file (or the size) and the problem, then exits 1:
 * a trainer that runs for hours must fail loudly and early, never crash or continue on bad data.
 * Atomic writes (temp file + fsync + rename + directory fsync) are how checkpoints survive kill -9
 * and full disks: a reader only ever sees a complete file or the previous one.
 */
#ifndef LLMC_UTILS_H
#define LLMC_UTILS_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>
#include <time.h>

// seconds on the monotonic clock: step times, timings, benchmarks
static inline double clock_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// ----------------------------------------------------------------------------
// fatal errors: one line on stderr, exit status 1

__attribute__((noreturn, format(printf, 1, 2)))
static inline void fatal(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(EXIT_FAILURE);
}

// ----------------------------------------------------------------------------
// checked stdio; `path` is carried along so that every message can name the file

static inline FILE* fopen_check(const char* path, const char* mode, const char* file, int line) {
    FILE* fp = fopen(path, mode);
    if (fp == NULL) {
        fatal("%s: cannot open (%s) [%s:%d]", path, strerror(errno), file, line);
    }
    return fp;
}
#define fopenCheck(path, mode) fopen_check(path, mode, __FILE__, __LINE__)

// reads exactly `count` items or exits naming the file; a short read means a truncated file
static inline void fread_check(void* ptr, size_t size, size_t count, FILE* fp, const char* path,
                               const char* file, int line) {
    size_t got = fread(ptr, size, count, fp);
    if (got != count) {
        if (ferror(fp)) {
            fatal("%s: read error (%s) [%s:%d]", path, strerror(errno), file, line);
        }
        fatal("%s: truncated file (wanted %zu items of %zu bytes, got %zu) [%s:%d]",
              path, count, size, got, file, line);
    }
}
#define freadCheck(ptr, size, count, fp, path) fread_check(ptr, size, count, fp, path, __FILE__, __LINE__)

static inline void fwrite_check(const void* ptr, size_t size, size_t count, FILE* fp, const char* path,
                                const char* file, int line) {
    size_t put = fwrite(ptr, size, count, fp);
    if (put != count) {
        fatal("%s: write failed (%s) [%s:%d]", path, strerror(errno), file, line);
    }
}
#define fwriteCheck(ptr, size, count, fp, path) fwrite_check(ptr, size, count, fp, path, __FILE__, __LINE__)

static inline void fseek_check(FILE* fp, long off, int whence, const char* path, const char* file, int line) {
    if (fseek(fp, off, whence) != 0) {
        fatal("%s: seek failed (%s) [%s:%d]", path, strerror(errno), file, line);
    }
}
#define fseekCheck(fp, off, whence, path) fseek_check(fp, off, whence, path, __FILE__, __LINE__)

static inline void fclose_check(FILE* fp, const char* path, const char* file, int line) {
    if (fclose(fp) != 0) {
        fatal("%s: close failed (%s) [%s:%d]", path, strerror(errno), file, line);
    }
}
#define fcloseCheck(fp, path) fclose_check(fp, path, __FILE__, __LINE__)

// size of an open file in bytes, for validating headers against the real length
static inline size_t file_size_check(FILE* fp, const char* path) {
    struct stat st;
    if (fstat(fileno(fp), &st) != 0) {
        fatal("%s: cannot stat (%s)", path, strerror(errno));
    }
    return (size_t)st.st_size;
}

// ----------------------------------------------------------------------------
// checked allocation: only at start-up, so a failure names the size and stops

static inline void* malloc_check(size_t size, const char* file, int line) {
    void* ptr = malloc(size);
    if (ptr == NULL && size > 0) {
        fatal("out of memory allocating %zu bytes [%s:%d]", size, file, line);
    }
    return ptr;
}
#define mallocCheck(size) malloc_check(size, __FILE__, __LINE__)

static inline void* calloc_check(size_t n, size_t size, const char* file, int line) {
    void* ptr = calloc(n, size);
    if (ptr == NULL && n > 0 && size > 0) {
        fatal("out of memory allocating %zu x %zu bytes [%s:%d]", n, size, file, line);
    }
    return ptr;
}
#define callocCheck(n, size) calloc_check(n, size, __FILE__, __LINE__)

// ----------------------------------------------------------------------------
// atomic writes: write to "<path>.tmp", fsync, rename over <path>, fsync the directory

typedef struct {
    FILE* fp;
    char path[4096];      // final name
    char tmp_path[4096];  // where the bytes go until commit
} AtomicFile;

static inline void atomic_open(AtomicFile* af, const char* path) {
    if (snprintf(af->path, sizeof(af->path), "%s", path) >= (int)sizeof(af->path) ||
        snprintf(af->tmp_path, sizeof(af->tmp_path), "%s.tmp", path) >= (int)sizeof(af->tmp_path)) {
        fatal("%s: path too long", path);
    }
    af->fp = fopen(af->tmp_path, "wb");
    if (af->fp == NULL) {
        fatal("%s: cannot create (%s)", af->tmp_path, strerror(errno));
    }
}

static inline void atomic_write(AtomicFile* af, const void* ptr, size_t size, size_t count) {
    if (fwrite(ptr, size, count, af->fp) != count) {
        int err = errno;
        fclose(af->fp);
        unlink(af->tmp_path);  // leave the previous complete file, never a partial one
        fatal("%s: write failed (%s); previous file left intact", af->path, strerror(err));
    }
}

static inline void fsync_dir_of(const char* path) {
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char* slash = strrchr(dir, '/');
    if (slash == NULL) { strcpy(dir, "."); } else if (slash == dir) { dir[1] = '\0'; } else { *slash = '\0'; }
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) { fsync(fd); close(fd); }
}

static inline void atomic_commit(AtomicFile* af) {
    int err = 0;
    if (fflush(af->fp) != 0 || fsync(fileno(af->fp)) != 0) { err = errno; }
    if (fclose(af->fp) != 0 && err == 0) { err = errno; }
    if (err != 0) {
        unlink(af->tmp_path);
        fatal("%s: write failed (%s); previous file left intact", af->path, strerror(err));
    }
    if (rename(af->tmp_path, af->path) != 0) {
        err = errno;
        unlink(af->tmp_path);
        fatal("%s: rename failed (%s)", af->path, strerror(err));
    }
    fsync_dir_of(af->path);
}

#endif // LLMC_UTILS_H
