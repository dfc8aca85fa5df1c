/* cpu_avx2_math — the AVX2 + FMA lane arithmetic the AVX2 kernels share (cpu_avx2.c): exp2,
 * and horizontal max and sum. Compiled for AVX2 by function attribute, as the kernels are
 * (the build needs no -march flag); include only from code that runs after the CPU was
 * checked (cpu_avx2_available). */
#ifndef STALLSCOPE_CPU_AVX2_MATH_H
#define STALLSCOPE_CPU_AVX2_MATH_H
#include <immintrin.h>

#include "engine/cpu/cpu_isa_kernels.h"

#define CPU_AVX2_TGT __attribute__((target("avx2,fma,f16c")))
#define CPU_AVX2_INLINE static inline __attribute__((always_inline)) CPU_AVX2_TGT

/* 2^x on 8 lanes for x <= 127: 2^n x 2^f with n = round(x), |f| <= 1/2, 2^f by a degree-5
 * polynomial fitted for relative error on [-1/2, 1/2] (7.5e-8 before rounding; under 2e-7
 * after), 2^n built in the exponent field. Inputs below -126 give 0 (-inf included: the
 * score of a key past a row's last); NaN lanes on the way are masked off. */
CPU_AVX2_INLINE __m256 cpu_avx2_exp2_le127(__m256 x)
{
    const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_NGE_UQ);
    const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(CPU_EXP2_P5);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(CPU_EXP2_P4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(CPU_EXP2_P3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(CPU_EXP2_P2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(CPU_EXP2_P1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(CPU_EXP2_P0));
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

/* 2^x on 8 lanes for any x: above 127, 2^127. */
CPU_AVX2_INLINE __m256 cpu_avx2_exp2(__m256 x)
{
    return cpu_avx2_exp2_le127(_mm256_min_ps(x, _mm256_set1_ps(127.0f)));
}

CPU_AVX2_INLINE float cpu_avx2_hmax(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

CPU_AVX2_INLINE float cpu_avx2_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* r[i] = horizontal sum of a[i], for 8 vectors (a transposing reduction). */
CPU_AVX2_INLINE __m256 cpu_avx2_sum8(const __m256 *a)
{
    const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 q0 = _mm256_hadd_ps(h01, h23), q1 = _mm256_hadd_ps(h45, h67);
    /* q0 = [a0 a1 a2 a3 | a0 a1 a2 a3] partial sums of the low and high halves */
    return _mm256_add_ps(_mm256_permute2f128_ps(q0, q1, 0x20), _mm256_permute2f128_ps(q0, q1, 0x31));
}

/* Lanes [0, n) of 8 all ones, the rest zero (for masked loads and stores of a tail). */
CPU_AVX2_INLINE __m256i cpu_avx2_tail_mask(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#endif
