/*
 * hybrid/hmath.h — the project's one random number generator, xorshift* (llmc/rand.h builds the
 * trainers' streams on it, the tests their data), a Gaussian sampler, the one monotonic clock, and the
 * one fp32 -> bf16 rounding (the CPU trainer's bf16 weight copy, which hybrid mode's fused pass writes too).
 * It lives in hybrid/ because hybrid/ is the bottom of the dependencies (libc only).
 */
#ifndef HYBRID_HMATH_H
#define HYBRID_HMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

// ----------------------------------------------------------------------------
// random numbers: xorshift* (64-bit state, 32-bit output). It lives here, at the bottom of the
// dependencies (hybrid/ needs only libc), so that everything above uses this one definition.

static inline uint32_t hmath_u32(uint64_t* state) {
    *state ^= *state >> 12; *state ^= *state << 25; *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}
static inline float hmath_f32(uint64_t* state) { return (hmath_u32(state) >> 8) / 16777216.0f; }

// standard normal by Box-Muller (one value per call; simple, and its cost is irrelevant here)
static inline float hmath_normal(uint64_t* state) {
    float u1 = (hmath_u32(state) >> 8) / 16777216.0f + 1.0f / 33554432.0f; // (0,1)
    float u2 = hmath_f32(state);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

// seconds on the monotonic clock: step times, hybrid/'s own time, benchmarks
static inline double hmath_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// fp32 -> bf16 (the upper half of an fp32), round to nearest even; NaN stays a (quiet) NaN, Inf stays Inf.
// Written to vectorise.
static inline uint16_t hmath_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

#endif // HYBRID_HMATH_H
