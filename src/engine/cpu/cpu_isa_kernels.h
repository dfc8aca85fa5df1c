/* cpu_isa_kernels — the kernels of one instruction set each (cpu_avx2.c, cpu_avx512.c), as
 * the dispatch in cpu_kernels.c calls them, and the scalar pieces they share. Callers check
 * the CPU first (cpu_kernels.h: cpu_isa_active); the tests call them directly. The kernel
 * files include this header alone, so they depend on nothing of the dispatch that calls them.
 */
#ifndef STALLSCOPE_CPU_ISA_KERNELS_H
#define STALLSCOPE_CPU_ISA_KERNELS_H
#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#include "engine/cpu/cpu_half.h"

/* A loop of a compile-time count unrolled whole, so that the arrays of vectors it indexes
 * stay in registers: gcc's pragma, or clang's own (clang takes gcc's without a word, but
 * then keeps such arrays in memory, and its kernels run at a fraction of their speed). */
#define CPU_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define CPU_UNROLL(n) CPU_PRAGMA(clang loop unroll(full))
#else
#define CPU_UNROLL(n) CPU_PRAGMA(GCC unroll n)
#endif

/* ---- the scalar pieces every instruction set's kernels share ---------------------- */

/* 1 / rms of a vector of size elements whose squares sum to ss */
static inline float cpu_inv_rms(double ss, int size, float eps)
{
    return (float)(1.0 / sqrt(ss / size + eps));
}

/* the pair (v[0], v[1]) rotated by an angle of cosine c and sine s */
static inline void cpu_rotate_pair(float *v, float c, float s)
{
    const float v0 = v[0], v1 = v[1];
    v[0] = v0 * c - v1 * s;
    v[1] = v0 * s + v1 * c;
}

/* exp2's degree-5 polynomial for 2^f on [-1/2, 1/2], fitted for relative error (7.5e-8
 * before rounding), highest power first: both instruction sets' exp2 evaluate it. */
#define CPU_EXP2_P5 1.3276440012232019e-03f
#define CPU_EXP2_P4 9.675541083281353e-03f
#define CPU_EXP2_P3 5.5507133724826394e-02f
#define CPU_EXP2_P2 2.4022119730090544e-01f
#define CPU_EXP2_P1 6.931469670040767e-01f
#define CPU_EXP2_P0 1.0000000716527573f

/* The small-batch kernels' tile (out[i * RN + j], RM x RN) into Y, its rows and columns past
 * rows_x and rows_w left out. */
static inline void cpu_gemm_store_tile(float *y, int ldy, const float *out, int rows_x,
                                       int rows_w, int RM, int RN, bool accumulate)
{
    for (int i = 0; i < RM && i < rows_x; i++) {
        float *yr = y + (size_t)i * ldy;
        for (int j = 0; j < RN && j < rows_w; j++)
            yr[j] = accumulate ? yr[j] + out[i * RN + j] : out[i * RN + j];
    }
}

/* ---- per instruction set (callers check the CPU first; the tests call them directly) */

/* The small-batch kernel on its own (rows [n0, n1) of W): same contract as cpu_gemm. */
void cpu_gemm_small_avx512(float *y, int ldy, const float *x, int ldx, const float *w, int m,
                           int n0, int n1, int k, bool accumulate);
void cpu_gemm_small_avx2(float *y, int ldy, const float *x, int ldx, const float *w, int m,
                         int n0, int n1, int k, bool accumulate);
/* W's rows per panel, X's rows per group (cpu_gemm_panels in cpu_kernels.h). */
#define CPU_PANEL 16
#define CPU_PANEL_ROWS 12

/* The two panels the kernels on panels take at a time, from Y's column n of [n0, n1): the
 * first panel, the columns of the two to store, and the next two panels' cache lines, which
 * the tiles over these two prefetch into L2, a share each (cpu_panel_prefetch_share). After
 * the last two of [n0, n1), the next are the first two of [after0, after1), the columns the
 * same thread computes next (after0 == after1: none). */
typedef struct cpu_panel_pair {
    const float *w;   /* the first panel; the second follows it, k x CPU_PANEL floats on */
    int cols;         /* columns to store, up to 2 x CPU_PANEL */
    const char *next; /* the next two panels' first line */
    int next_lines;   /* their lines (0: these are the last) */
    int line;         /* lines handed out so far */
} cpu_panel_pair;

static inline cpu_panel_pair cpu_panel_pair_at(const float *panels, int n, int n1, int k,
                                               int after0, int after1)
{
    cpu_panel_pair p;
    p.w = panels + (size_t)(n / CPU_PANEL) * k * CPU_PANEL;
    p.cols = n1 - n < 2 * CPU_PANEL ? n1 - n : 2 * CPU_PANEL;
    int next_cols = n1 - n - 2 * CPU_PANEL;
    p.next = (const char *)(p.w + (size_t)2 * k * CPU_PANEL);
    if (next_cols <= 0 && after1 > after0) {
        next_cols = after1 - after0;
        p.next = (const char *)(panels + (size_t)(after0 / CPU_PANEL) * k * CPU_PANEL);
    }
    p.next_lines = next_cols <= 0 ? 0
                   : (next_cols > CPU_PANEL ? 2 : 1) * k * CPU_PANEL * (int)sizeof(float) / 64;
    p.line = 0;
    return p;
}

/* The next lines for one of `tiles` tiles over the pair to prefetch: *from and the count. */
static inline int cpu_panel_prefetch_share(cpu_panel_pair *p, int tiles, const char **from)
{
    const int share = (p->next_lines + tiles - 1) / tiles;
    const int n = p->next_lines - p->line < share ? p->next_lines - p->line : share;
    *from = p->next + (size_t)p->line * 64;
    p->line += n;
    return n;
}
/* One group of X (its `rows` rows, up to CPU_PANEL_ROWS) rearranged for the kernels on
 * panels: out[p * rows + i] = x[i * ldx + p] (AVX2; the AVX-512 kernels read it too). */
void cpu_xpack_group_avx2(float *out, const float *x, int ldx, int rows, int k);
/* The kernels on panels (cpu_kernels.h): Y's columns [n0, n1) (n0 a multiple of 16)
 * from X rearranged in groups of 12 rows (xpack) and W in panels; the first two panels of
 * [after0, after1) (after0 a multiple of 16; equal: none), which the caller computes next,
 * prefetched into L2 while the last two of [n0, n1) compute. */
void cpu_gemm_panels_avx512(float *y, int ldy, const float *xpack, const float *panels, int m,
                            int n0, int n1, int k, bool accumulate, int after0, int after1);
void cpu_gemm_panels_avx2(float *y, int ldy, const float *xpack, const float *panels, int m,
                          int n0, int n1, int k, bool accumulate, int after0, int after1);

void cpu_swiglu_avx512(float *out, const float *gate, const float *up, int n);
void cpu_swiglu_avx2(float *out, const float *gate, const float *up, int n);
void cpu_rmsnorm_avx512(float *o, const float *x, const float *weight, int size, float eps);
void cpu_rmsnorm_avx2(float *o, const float *x, const float *weight, int size, float eps);
void cpu_rope_avx512(float *vec, int n_heads, int head_dim, const float *cos_sin);
void cpu_rope_avx2(float *vec, int n_heads, int head_dim, const float *cos_sin);
float cpu_stream_sum_avx512(const float *x, size_t n);
float cpu_stream_sum_avx2(const float *x, size_t n);
/* out[i] = the half nearest in[i], ties to even (F16C's vcvtps2ph; AVX-512 CPUs use it too). */
void cpu_halves_from_floats_avx2(cpu_half *out, const float *in, int n);

/* Sampling helpers: the largest value; x[i] = exp((x[i] - max) * inv_temperature) in place,
 * with the sum of each 256-element chunk in chunk_sums (ceil(n / 256) of them); returns the
 * total. */
float cpu_max_avx512(const float *x, int n);
float cpu_max_avx2(const float *x, int n);
double cpu_exp_weights_avx512(float *x, int n, float max, float inv_temperature,
                              double *chunk_sums);
double cpu_exp_weights_avx2(float *x, int n, float max, float inv_temperature,
                            double *chunk_sums);
#define CPU_SAMPLE_CHUNK 256

/* exp2 on vector lanes as the attention kernels compute it (relative error < 2e-7),
 * exposed for tests: out[i] = 2^in[i] for n values. */
void cpu_exp2_avx512(float *out, const float *in, int n);
void cpu_exp2_avx2(float *out, const float *in, int n);

#endif
