/*
 * half.h - portable conversions between f32 and the 16-bit float formats.
 *
 * IEEE binary16 (f16) and bfloat16 (bf16) values are carried as their raw
 * uint16_t bit patterns, so nothing here depends on _Float16, __fp16 or any
 * compiler extension. Widening (f16/bf16 -> f32) is exact. Narrowing rounds
 * to nearest, ties to even, independent of the current rounding mode, and
 * handles signed zeros, subnormals, overflow to infinity, infinities and
 * NaNs (a NaN stays a NaN of the same sign and is made quiet; its payload is
 * truncated to the high bits that fit).
 */
#ifndef GEMMD_HALF_H
#define GEMMD_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t gemmd_f32_bits(float f)
{
        uint32_t x;
        memcpy(&x, &f, sizeof(x));
        return x;
}

static inline float gemmd_bits_f32(uint32_t x)
{
        float f;
        memcpy(&f, &x, sizeof(f));
        return f;
}

/* f16 -> f32, exact. */
static inline float gemmd_f16_to_f32(uint16_t h)
{
        uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
        int32_t exp = (h >> 10) & 0x1f;
        uint32_t man = h & 0x3ffu;

        if (exp == 0x1f) /* inf, or NaN with its payload */
                return gemmd_bits_f32(sign | 0x7f800000u | (man << 13));
        if (exp == 0) {
                if (man == 0)
                        return gemmd_bits_f32(sign);
                /* Subnormal man * 2^-24: shift the leading 1 up to bit 10,
                 * as if the exponent field could go below 1. */
                exp = 1;
                while (!(man & 0x400u)) {
                        man <<= 1;
                        exp--;
                }
                man &= 0x3ffu;
        }
        return gemmd_bits_f32(sign | ((uint32_t)(exp + 112) << 23) | (man << 13));
}

/* f32 -> f16, round to nearest even. */
static inline uint16_t gemmd_f32_to_f16(float f)
{
        uint32_t x = gemmd_f32_bits(f);
        uint32_t sign = (x >> 16) & 0x8000u;
        uint32_t ax = x & 0x7fffffffu;

        if (ax >= 0x7f800000u) {
                if (ax > 0x7f800000u) /* NaN: quiet, keep the top payload bits */
                        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
                return (uint16_t)(sign | 0x7c00u);
        }
        /* 65520 is halfway between 65504 (largest f16) and 2^16; the tie goes
         * to the even pattern, which is infinity. */
        if (ax >= 0x477ff000u)
                return (uint16_t)(sign | 0x7c00u);
        if (ax >= 0x38800000u) { /* normal f16 (>= 2^-14) */
                uint32_t r = ax - 0x38000000u; /* rebias the exponent: 127 - 15 */
                r += 0xfffu + ((r >> 13) & 1u);
                return (uint16_t)(sign | (r >> 13));
        }
        if (ax < 0x33000000u) /* below 2^-25 (half the smallest subnormal): zero */
                return (uint16_t)sign;
        /* Subnormal f16: the result is round(|f| * 2^24). */
        {
                uint32_t exp = ax >> 23; /* 102 .. 112 */
                uint32_t man = (ax & 0x7fffffu) | 0x800000u;
                uint32_t shift = 126u - exp; /* 14 .. 24 */
                uint32_t q = man >> shift;
                uint32_t rem = man & ((1u << shift) - 1u);
                uint32_t half = 1u << (shift - 1u);

                if (rem > half || (rem == half && (q & 1u)))
                        q++; /* may carry into 0x400, the smallest normal: correct */
                return (uint16_t)(sign | q);
        }
}

/* bf16 -> f32, exact. */
static inline float gemmd_bf16_to_f32(uint16_t h)
{
        return gemmd_bits_f32((uint32_t)h << 16);
}

/* f32 -> bf16, round to nearest even. */
static inline uint16_t gemmd_f32_to_bf16(float f)
{
        uint32_t x = gemmd_f32_bits(f);

        if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate and make it quiet */
                return (uint16_t)((x >> 16) | 0x40u);
        /* Rounding carries into the exponent naturally; the largest finite
         * values round up to infinity as they should. */
        x += 0x7fffu + ((x >> 16) & 1u);
        return (uint16_t)(x >> 16);
}

#endif /* GEMMD_HALF_H */
