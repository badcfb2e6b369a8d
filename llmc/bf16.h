/*
 * llmc/bf16.h — bf16 on the CPU: the type (the upper half of an fp32) and the one fp32 -> bf16 rounding,
 * round to nearest even. Every CPU pass that writes bf16 (the matmuls' operands, the weight copy AdamW
 * refreshes) rounds with it, so the same float always gives the same bits. Depends on libc only.
 */
#ifndef LLMC_BF16_H
#define LLMC_BF16_H

#include <stdint.h>
#include <string.h>

typedef uint16_t bf16;  // 1 sign, 8 exponent, 7 mantissa bits

// fp32 -> bf16, round to nearest even; NaN stays a (quiet) NaN, Inf stays Inf. Written to vectorise.
static inline bf16 bf16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    return (bf16)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

static inline float bf16_to_float(bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif // LLMC_BF16_H
