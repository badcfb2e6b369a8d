/*
 * llmc/rand.h — the project's one random number generator (xorshift*) and the streams built on it: the
 * random init, the data order and sampling, each from --seed and its own salt, and the tests' data.
 * Every random choice goes through it so that runs are reproducible bit for bit, and so that the Python
 * reference (scripts/train_gpt2.py) can replay the data order exactly (docs/formats.md).
 * A state is a plain uint64_t: it is saved in checkpoints as is. Depends on libc only.
 */
#ifndef LLMC_RAND_H
#define LLMC_RAND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

// ----------------------------------------------------------------------------
// the generator: xorshift* (64-bit state, 32-bit output)

static inline uint32_t random_u32(uint64_t* state) {
    *state ^= *state >> 12; *state ^= *state << 25; *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

// uniform in [0, 1), 24 bits
static inline float random_f32(uint64_t* state) { return (random_u32(state) >> 8) / 16777216.0f; }

// standard normal by Box-Muller (one value per call; simple, and its cost is irrelevant where it is used)
static inline float random_normal(uint64_t* state) {
    float u1 = (random_u32(state) >> 8) / 16777216.0f + 1.0f / 33554432.0f; // (0,1)
    float u2 = random_f32(state);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

// ----------------------------------------------------------------------------
// the trainers' streams

// seeds of the independent streams, derived from the user's --seed
#define RNG_DATA_SALT 0xD1B54A32D192ED03ull
#define RNG_SAMPLE_SALT 0x9E3779B97F4A7C15ull

// xorshift* is stuck at 0 forever, so a zero state (seed equal to a salt) is replaced by a fixed constant
static inline uint64_t random_state(uint64_t seed, uint64_t salt) {
    uint64_t s = seed ^ salt;
    return s != 0 ? s : 0x853C49E6748FEA9Bull;
}

// n samples of N(mean, std) by Box-Muller, pairing consecutive uniforms (u1 in (0,1], u2 in [0,1)).
// Used for the dN random init; sequential, so the same seed always gives the same weights.
static inline void normal_fill(float* out, size_t n, float mean, float std, uint64_t* state) {
    for (size_t i = 0; i < n; i += 2) {
        double u1 = 1.0 - random_f32(state);  // (0, 1]: log is finite
        double u2 = random_f32(state);
        double r = sqrt(-2.0 * log(u1));
        out[i] = (float)(mean + std * r * cos(2.0 * M_PI * u2));
        if (i + 1 < n) { out[i + 1] = (float)(mean + std * r * sin(2.0 * M_PI * u2)); }
    }
}

// Fisher-Yates shuffle of a[0..n), the loop the Python reference replays
static inline void random_permute(int* a, size_t n, uint64_t* state) {
    if (n < 2) { return; }
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = random_u32(state) % (i + 1);
        int tmp = a[i]; a[i] = a[j]; a[j] = tmp;
    }
}

#endif // LLMC_RAND_H
