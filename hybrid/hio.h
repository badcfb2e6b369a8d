/*
 * hybrid/hio.h — symmetric (de)serialisation of the hybrid state.
 * Every component describes its state once, in a function `xxx_io(HybridIO*, Xxx*)` that calls
 * hio_* on each field; the same function writes (save) or reads (load), so save and load cannot
 * drift apart. The target is a FILE* or a caller-owned byte buffer (the trainer does the atomic
 * write: hybrid/ knows nothing of files beyond stdio). A running FNV-1a hash of every byte is
 * appended on save and checked on load, so a corrupt or truncated file is refused, never half-used.
 */
#ifndef HYBRID_HIO_H
#define HYBRID_HIO_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    int writing;        // 1 = save, 0 = load
    FILE* fp;           // stream target, or NULL for the buffer below
    unsigned char* buf; // buffer target (load reads it, save writes it; NULL = only count bytes)
    size_t cap, pos;    // buffer capacity and bytes moved so far (also counts for FILE targets)
    uint64_t hash;      // FNV-1a over every payload byte
    int failed;         // sticky: set on the first error, later calls do nothing
    char error[160];    // what went wrong, for the caller to print with the file name
} HybridIO;

static inline void hio_begin(HybridIO* io, int writing, FILE* fp, void* buf, size_t cap) {
    memset(io, 0, sizeof(*io));
    io->writing = writing; io->fp = fp; io->buf = (unsigned char*)buf; io->cap = cap;
    io->hash = 1469598103934665603ull;
}

static inline void hio_fail(HybridIO* io, const char* msg) {
    if (!io->failed) { io->failed = 1; snprintf(io->error, sizeof(io->error), "%s", msg); }
}

static inline void hio_hash(HybridIO* io, const unsigned char* p, size_t n) {
    uint64_t h = io->hash;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ull; }
    io->hash = h;
}

// raw transfer without hashing (used for the trailer itself)
static inline void hio_raw(HybridIO* io, void* p, size_t n) {
    if (io->failed) { if (!io->writing) { memset(p, 0, n); } return; }
    if (io->fp != NULL) {
        size_t got = io->writing ? fwrite(p, 1, n, io->fp) : fread(p, 1, n, io->fp);
        if (got != n) {
            hio_fail(io, io->writing ? "write failed" : "truncated file");
            if (!io->writing) { memset(p, 0, n); }
        }
    } else if (io->buf != NULL || !io->writing) {
        if (io->pos + n > io->cap) {
            hio_fail(io, io->writing ? "buffer too small" : "truncated buffer");
            if (!io->writing) { memset(p, 0, n); }
            return;
        }
        if (io->writing) { memcpy(io->buf + io->pos, p, n); } else { memcpy(p, io->buf + io->pos, n); }
    }
    io->pos += n;
}

static inline void hio_bytes(HybridIO* io, void* p, size_t n) {
    if (io->writing) { hio_hash(io, (const unsigned char*)p, n); }
    hio_raw(io, p, n);
    if (!io->writing && !io->failed) { hio_hash(io, (const unsigned char*)p, n); }
}
static inline void hio_i32(HybridIO* io, int* p) { hio_bytes(io, p, sizeof(*p)); }
static inline void hio_u64(HybridIO* io, uint64_t* p) { hio_bytes(io, p, sizeof(*p)); }
static inline void hio_f32(HybridIO* io, float* p) { hio_bytes(io, p, sizeof(*p)); }
static inline void hio_f64(HybridIO* io, double* p) { hio_bytes(io, p, sizeof(*p)); }
static inline void hio_f32s(HybridIO* io, float* p, size_t n) { hio_bytes(io, p, n * sizeof(*p)); }
static inline void hio_f64s(HybridIO* io, double* p, size_t n) { hio_bytes(io, p, n * sizeof(*p)); }
static inline void hio_i32s(HybridIO* io, int* p, size_t n) { hio_bytes(io, p, n * sizeof(*p)); }

// a value fixed by the configuration: saved, and on load it must equal what this run expects
static inline void hio_expect_i32(HybridIO* io, int value, const char* what) {
    int v = value;
    hio_i32(io, &v);
    if (!io->writing && !io->failed && v != value) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s is %d in the file, this run has %d", what, v, value);
        hio_fail(io, msg);
    }
}

static inline void hio_expect_f32(HybridIO* io, float value, const char* what) {
    float v = value;
    hio_f32(io, &v);
    if (!io->writing && !io->failed && memcmp(&v, &value, sizeof(v)) != 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s is %g in the file, this run has %g", what, v, value);
        hio_fail(io, msg);
    }
}

// save appends the hash; load compares it. Returns 0 on success, -1 with io->error set.
static inline int hio_finish(HybridIO* io) {
    uint64_t h = io->hash;
    hio_raw(io, &h, sizeof(h));
    if (!io->writing && !io->failed && h != io->hash) { hio_fail(io, "checksum mismatch (corrupt file)"); }
    return io->failed ? -1 : 0;
}

#endif // HYBRID_HIO_H
