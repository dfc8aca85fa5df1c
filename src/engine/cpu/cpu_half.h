/* cpu_half — IEEE 754 half precision (binary16), the KV cache's element (cpu_kv.h), in
 * portable C: the plain kernels and the reference read it through these, the AVX2 (F16C) and
 * AVX-512 kernels with their conversion instructions, which round the same way.
 *
 * cpu_half_from_float rounds to nearest, ties to even (as vcvtps2ph with
 * _MM_FROUND_TO_NEAREST_INT): above the largest half (65504) to infinity, below the smallest
 * subnormal to zero, NaN to a quiet NaN. cpu_half_to_float is exact for every half (a NaN
 * comes back quiet). Both
 * assume the default floating-point environment (round to nearest, no flush to zero). */
#ifndef STALLSCOPE_CPU_HALF_H
#define STALLSCOPE_CPU_HALF_H
#include <stdint.h>
#include <string.h>

typedef uint16_t cpu_half;

static inline cpu_half cpu_half_from_float(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* infinity, or NaN (kept quiet) */
        return (cpu_half)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    if (ax >= 0x477ff000u) /* 65520 and above round to infinity */
        return (cpu_half)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal half, or zero */
        float a;
        memcpy(&a, &ax, sizeof a);
        a += 0.5f; /* the float unit in the last place at 0.5 is 2^-24, the half subnormal's */
        uint32_t r;
        memcpy(&r, &a, sizeof r);
        return (cpu_half)(sign | (r - 0x3f000000u));
    }
    /* normal: rebias the exponent (127 -> 15) and round away the 13 low bits, ties to even */
    ax += 0xc8000fffu + ((ax >> 13) & 1u);
    return (cpu_half)(sign | (ax >> 13));
}

static inline float cpu_half_to_float(cpu_half h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t em = h & 0x7fffu;
    uint32_t bits;
    float f;
    if (em >= 0x7c00u) { /* infinity, NaN (quiet, as vcvtph2ps gives it) */
        bits = sign | 0x7f800000u | ((em & 0x3ffu) << 13) | (em > 0x7c00u ? 0x400000u : 0);
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    /* The half's exponent and mantissa in a float's fields, then scaled by 2^112 (the bias
     * difference): exact for normal halves and, through a float subnormal, for subnormal ones. */
    bits = em << 13;
    memcpy(&f, &bits, sizeof f);
    f *= 5.192296858534828e+33f; /* 2^112 */
    memcpy(&bits, &f, sizeof bits);
    bits |= sign;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* x as the cache holds it: rounded to the nearest half and widened back. */
static inline float cpu_half_round(float x)
{
    return cpu_half_to_float(cpu_half_from_float(x));
}

#endif
