/* cpu_avx512 — the AVX-512 kernels: the small-batch GEMM and the GEMM on panels, exp2, SwiGLU,
 * RMSNorm, RoPE, the sampler's helpers, the streaming read and the attention tile.
 * Compiled for AVX-512 by function attribute (no -march for the whole build); callers
 * check cpu_simd_enabled() first. Each kernel has a plain reference in cpu_kernels.c or
 * cpu_attn.c that the tests compare it with. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/cpu/cpu_attn.h"
#include "engine/cpu/cpu_isa_kernels.h"

#define TGT __attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma")))
#define INLINE static inline __attribute__((always_inline)) TGT

/* ---- horizontal sums ------------------------------------------------------------- */

/* Four vectors to one: lane group g (4 floats) of the result holds, for a..d, the sum of
 * their 4-float lane group g. */
INLINE __m512 sum4_by_lane(__m512 a, __m512 b, __m512 c, __m512 d)
{
    const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    const __m512 lo = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd)));
    const __m512 hi = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd)));
    return _mm512_add_ps(lo, hi);
}

/* r[i] = horizontal sum of acc[i], for 16 vectors (a transposing reduction: 45 operations
 * instead of 16 separate reductions). */
INLINE __m512 sum16(const __m512 *acc)
{
    const __m512 t0 = sum4_by_lane(acc[0], acc[1], acc[2], acc[3]);
    const __m512 t1 = sum4_by_lane(acc[4], acc[5], acc[6], acc[7]);
    const __m512 t2 = sum4_by_lane(acc[8], acc[9], acc[10], acc[11]);
    const __m512 t3 = sum4_by_lane(acc[12], acc[13], acc[14], acc[15]);
    const __m512 w0 = _mm512_add_ps(_mm512_shuffle_f32x4(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 w1 = _mm512_add_ps(_mm512_shuffle_f32x4(t2, t3, _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(t2, t3, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w0, w1, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* ---- small-batch GEMM ------------------------------------------------------------ */

/* One tile: RM rows of X against RN rows of W (RM x RN = 16 dot products of length k),
 * out[i * RN + j] = x_i . w_j. Rows past the end are clamped to the last valid one (the
 * caller does not store them). */
INLINE void gemm_tile(const float *x, int ldx, int rows_x, const float *w, int rows_w, int k,
                      int RM, int RN, float *out)
{
    __m512 acc[16];
    const float *xr[16];
    const float *wr[16];
CPU_UNROLL(16)
    for (int i = 0; i < 16; i++)
        acc[i] = _mm512_setzero_ps();
CPU_UNROLL(16)
    for (int i = 0; i < RM; i++)
        xr[i] = x + (size_t)(i < rows_x ? i : rows_x - 1) * ldx;
CPU_UNROLL(16)
    for (int j = 0; j < RN; j++)
        wr[j] = w + (size_t)(j < rows_w ? j : rows_w - 1) * k;
    int p = 0;
    for (; p + 16 <= k; p += 16) {
        if (RN <= 8) {
            __m512 wv[8];
CPU_UNROLL(8)
            for (int j = 0; j < RN; j++)
                wv[j] = _mm512_loadu_ps(wr[j] + p);
CPU_UNROLL(4)
            for (int i = 0; i < RM; i++) {
                const __m512 xv = _mm512_loadu_ps(xr[i] + p);
CPU_UNROLL(8)
                for (int j = 0; j < RN; j++)
                    acc[i * RN + j] = _mm512_fmadd_ps(xv, wv[j], acc[i * RN + j]);
            }
        } else {
            const __m512 xv = _mm512_loadu_ps(xr[0] + p);
CPU_UNROLL(16)
            for (int j = 0; j < RN; j++)
                acc[j] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(wr[j] + p), acc[j]);
        }
    }
    if (p < k) {
        const __mmask16 tail = (__mmask16)((1u << (k - p)) - 1);
CPU_UNROLL(4)
        for (int i = 0; i < RM; i++) {
            const __m512 xv = _mm512_maskz_loadu_ps(tail, xr[i] + p);
CPU_UNROLL(16)
            for (int j = 0; j < RN; j++)
                acc[i * RN + j] =
                    _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(tail, wr[j] + p), acc[i * RN + j]);
        }
    }
    _mm512_storeu_ps(out, sum16(acc));
}

/* W is walked in blocks of 16 rows (16 k floats, in L1/L2 after the first tile); every row
 * group of X passes over the block, so W streams from memory once per call. While a block
 * computes, the next one (contiguous: rows follow each other) is prefetched into L2, its
 * lines spread evenly over the block's tiles: without it a block's loads only start when
 * its compute does, and time is memory plus compute instead of the larger of the two. */
TGT void cpu_gemm_small_avx512(float *y, int ldy, const float *x, int ldx, const float *w,
                               int m, int n0, int n1, int k, bool accumulate)
{
    float out[16] __attribute__((aligned(64)));
    /* tiles per block: 4 per group of 4 rows, 2 for a pair, 1 for a single row */
    const int tiles = (m / 4) * 4 + ((m % 4) >= 2 ? 2 : 0) + ((m % 4) % 2);
    for (int n = n0; n < n1; n += 16) {
        const float *wb = w + (size_t)n * k;
        const int rows_w = n1 - n < 16 ? n1 - n : 16;
        const int next_rows = n1 - n - 16 < 16 ? n1 - n - 16 : 16; /* <= 0: none */
        const char *next = (const char *)(wb + (size_t)16 * k);
        const size_t next_lines = next_rows > 0 ? ((size_t)next_rows * k * sizeof(float) + 63) / 64 : 0;
        const size_t lines_per_tile = (next_lines + (size_t)tiles - 1) / (size_t)tiles;
        size_t line = 0;
#define PREFETCH_SHARE()                                                                     \
        for (size_t end_ = line + lines_per_tile; line < end_ && line < next_lines; line++)  \
            _mm_prefetch(next + line * 64, _MM_HINT_T1)
        int i = 0;
        for (; i + 4 <= m; i += 4)
            for (int j = 0; j < 16; j += 4) {
                PREFETCH_SHARE();
                if (j >= rows_w)
                    continue;
                gemm_tile(x + (size_t)i * ldx, ldx, 4, wb + (size_t)j * k, rows_w - j, k, 4, 4, out);
                cpu_gemm_store_tile(y + (size_t)i * ldy + n + j, ldy, out, 4, rows_w - j, 4, 4, accumulate);
            }
        if (m - i >= 2) {
            for (int j = 0; j < 16; j += 8) {
                PREFETCH_SHARE();
                if (j >= rows_w)
                    continue;
                gemm_tile(x + (size_t)i * ldx, ldx, 2, wb + (size_t)j * k, rows_w - j, k, 2, 8, out);
                cpu_gemm_store_tile(y + (size_t)i * ldy + n + j, ldy, out, 2, rows_w - j, 2, 8, accumulate);
            }
            i += 2;
        }
        if (m - i == 1) {
            PREFETCH_SHARE();
            gemm_tile(x + (size_t)i * ldx, ldx, 1, wb, rows_w, k, 1, 16, out);
            cpu_gemm_store_tile(y + (size_t)i * ldy + n, ldy, out, 1, rows_w, 1, 16, accumulate);
        }
#undef PREFETCH_SHARE
    }
}

/* ---- GEMM on panels --------------------------------------------------------------- */

/* One tile: R rows of X (a group of xpack: xg[p * R + i] = X[i][p]) against NP panels of W
 * (16 columns each, wp[p * 16 + j], the next panel k * 16 floats on): R x NP accumulators,
 * per step of k NP loads of W, R broadcasts of X and R x NP FMAs. cols: the tile's columns
 * to store (past them, zero padding or a neighbour's). While it computes, npf lines from pf
 * are prefetched into L2 (the next panels): one every other step of k, or every step when
 * the share is more than half of k (few groups: a decode of 32 rows has three over a pair
 * of panels, 171 lines each at k 256), rather than the rest at once after the loop, where
 * the next pair's first group would wait on them. */
INLINE void panel_tile(float *y, int ldy, const float *xg, const float *wp, int k, int R, int NP,
                       int cols, bool accumulate, const char *pf, int npf)
{
    __m512 acc[2 * CPU_PANEL_ROWS];
CPU_UNROLL(24)
    for (int i = 0; i < R * NP; i++)
        acc[i] = _mm512_setzero_ps();
    const float *wp1 = wp + (size_t)k * CPU_PANEL;
    const int odd = npf * 2 > k ? 0 : 1; /* step mask: 0 every step, 1 every other */
    int f = 0;
    for (int p = 0; p < k; p++) {
        if (f < npf && (p & odd) == 0)
            _mm_prefetch(pf + (size_t)f++ * 64, _MM_HINT_T1);
        const __m512 w0 = _mm512_loadu_ps(wp + (size_t)p * CPU_PANEL);
        const __m512 w1 = NP > 1 ? _mm512_loadu_ps(wp1 + (size_t)p * CPU_PANEL) : w0;
CPU_UNROLL(12)
        for (int i = 0; i < R; i++) {
            const __m512 xv = _mm512_set1_ps(xg[(size_t)p * R + i]);
            acc[i * NP] = _mm512_fmadd_ps(xv, w0, acc[i * NP]);
            if (NP > 1)
                acc[i * NP + 1] = _mm512_fmadd_ps(xv, w1, acc[i * NP + 1]);
        }
    }
    for (; f < npf; f++)
        _mm_prefetch(pf + (size_t)f * 64, _MM_HINT_T1);
    const __mmask16 m0 = cols >= 16 ? 0xFFFF : (__mmask16)((1u << cols) - 1);
    const __mmask16 m1 = cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1);
CPU_UNROLL(12)
    for (int i = 0; i < R; i++) {
        float *yr = y + (size_t)i * ldy;
        __m512 v0 = acc[i * NP];
        if (accumulate)
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, yr));
        _mm512_mask_storeu_ps(yr, m0, v0);
        if (NP > 1 && m1) {
            __m512 v1 = acc[i * NP + 1];
            if (accumulate)
                v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, yr + 16));
            _mm512_mask_storeu_ps(yr + 16, m1, v1);
        }
    }
}

#define PANEL_CASE(RR, NPP)                                                                  \
    case RR:                                                                                 \
        panel_tile(y, ldy, xg, wp, k, RR, NPP, cols, accumulate, pf, npf);                   \
        break

static TGT void panel_tile_np2(float *y, int ldy, const float *xg, const float *wp, int k, int R,
                               int cols, bool accumulate, const char *pf, int npf)
{
    switch (R) {
        PANEL_CASE(1, 2); PANEL_CASE(2, 2); PANEL_CASE(3, 2); PANEL_CASE(4, 2);
        PANEL_CASE(5, 2); PANEL_CASE(6, 2); PANEL_CASE(7, 2); PANEL_CASE(8, 2);
        PANEL_CASE(9, 2); PANEL_CASE(10, 2); PANEL_CASE(11, 2); default: PANEL_CASE(12, 2);
    }
}
static TGT void panel_tile_np1(float *y, int ldy, const float *xg, const float *wp, int k, int R,
                               int cols, bool accumulate, const char *pf, int npf)
{
    switch (R) {
        PANEL_CASE(1, 1); PANEL_CASE(2, 1); PANEL_CASE(3, 1); PANEL_CASE(4, 1);
        PANEL_CASE(5, 1); PANEL_CASE(6, 1); PANEL_CASE(7, 1); PANEL_CASE(8, 1);
        PANEL_CASE(9, 1); PANEL_CASE(10, 1); PANEL_CASE(11, 1); default: PANEL_CASE(12, 1);
    }
}
#undef PANEL_CASE

/* Two panels (32 columns, 2 x 16 x k floats, in L1 after the first group) at a time; every
 * group of X passes over them, so W streams from memory once per call, and the next two
 * panels are prefetched into L2 meanwhile, their lines spread over the groups. */
TGT void cpu_gemm_panels_avx512(float *y, int ldy, const float *xpack, const float *panels,
                                int m, int n0, int n1, int k, bool accumulate, int after0,
                                int after1)
{
    const int groups = (m + CPU_PANEL_ROWS - 1) / CPU_PANEL_ROWS;
    for (int n = n0; n < n1; n += 2 * CPU_PANEL) {
        cpu_panel_pair pair = cpu_panel_pair_at(panels, n, n1, k, after0, after1);
        for (int g = 0; g < groups; g++) {
            const int r0 = g * CPU_PANEL_ROWS;
            const int rows = m - r0 < CPU_PANEL_ROWS ? m - r0 : CPU_PANEL_ROWS;
            const float *xg = xpack + (size_t)r0 * k;
            const char *pf;
            const int npf = cpu_panel_prefetch_share(&pair, groups, &pf);
            float *yg = y + (size_t)r0 * ldy + n;
            if (pair.cols > CPU_PANEL)
                panel_tile_np2(yg, ldy, xg, pair.w, k, rows, pair.cols, accumulate, pf, npf);
            else
                panel_tile_np1(yg, ldy, xg, pair.w, k, rows, pair.cols, accumulate, pf, npf);
        }
    }
}

/* ---- streaming read ---------------------------------------------------------------- */

TGT float cpu_stream_sum_avx512(const float *x, size_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(x + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(x + i + 48));
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < n; i++)
        sum += x[i];
    return sum;
}

/* ---- exp2 ------------------------------------------------------------------------ */

/* 2^x = 2^n * 2^f with n = round(x), |f| <= 1/2: 2^f by a degree-5 polynomial fitted for
 * relative error on [-1/2, 1/2] (7.5e-8 before rounding; the AVX2 kernels' own), 2^n by
 * vscalefps. Inputs below -127 give 2^-127 (callers mask what must be zero). */
INLINE __m512 exp2_ps(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-127.0f));
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(CPU_EXP2_P5);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(CPU_EXP2_P4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(CPU_EXP2_P3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(CPU_EXP2_P2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(CPU_EXP2_P1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(CPU_EXP2_P0));
    return _mm512_scalef_ps(p, n);
}

TGT void cpu_exp2_avx512(float *out, const float *in, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, exp2_ps(_mm512_loadu_ps(in + i)));
    if (i < n) {
        const __mmask16 tail = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(out + i, tail, exp2_ps(_mm512_maskz_loadu_ps(tail, in + i)));
    }
}

/* silu(g) * u = g / (1 + 2^(-g log2 e)) * u */
TGT void cpu_swiglu_avx512(float *out, const float *gate, const float *up, int n)
{
    const __m512 neg_log2e = _mm512_set1_ps(-1.4426950408889634f);
    const __m512 one = _mm512_set1_ps(1.0f);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 g = _mm512_loadu_ps(gate + i);
        const __m512 e = exp2_ps(_mm512_mul_ps(g, neg_log2e));
        const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(silu, _mm512_loadu_ps(up + i)));
    }
    if (i < n) {
        const __mmask16 tail = (__mmask16)((1u << (n - i)) - 1);
        const __m512 g = _mm512_maskz_loadu_ps(tail, gate + i);
        const __m512 e = exp2_ps(_mm512_mul_ps(g, neg_log2e));
        const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(out + i, tail, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(tail, up + i)));
    }
}

TGT void cpu_rmsnorm_avx512(float *o, const float *x, const float *weight, int size, float eps)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int i = 0;
    for (; i + 32 <= size; i += 32) {
        const __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        a0 = _mm512_fmadd_ps(v0, v0, a0);
        a1 = _mm512_fmadd_ps(v1, v1, a1);
    }
    double ss = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (int j = i; j < size; j++)
        ss += (double)x[j] * x[j];
    const float inv_rms = cpu_inv_rms(ss, size, eps);
    const __m512 inv = _mm512_set1_ps(inv_rms);
    int j = 0;
    for (; j + 16 <= size; j += 16)
        _mm512_storeu_ps(o + j, _mm512_mul_ps(_mm512_loadu_ps(weight + j),
                                              _mm512_mul_ps(inv, _mm512_loadu_ps(x + j))));
    for (; j < size; j++)
        o[j] = weight[j] * (inv_rms * x[j]);
}

/* As cpu_rope_avx2, 16 lanes: v c -+ v' s in one fmaddsub, c and s duplicated over each pair
 * and v' the pair swapped. */
TGT void cpu_rope_avx512(float *vec, int n_heads, int head_dim, const float *cos_sin)
{
    for (int h = 0; h < n_heads; h++) {
        float *v = vec + (size_t)h * head_dim;
        int d = 0;
        for (; d + 16 <= head_dim; d += 16) {
            const __m512 cs = _mm512_loadu_ps(cos_sin + d);
            const __m512 x = _mm512_loadu_ps(v + d);
            const __m512 swapped = _mm512_permute_ps(x, 0xB1);
            _mm512_storeu_ps(v + d, _mm512_fmaddsub_ps(x, _mm512_moveldup_ps(cs),
                                                       _mm512_mul_ps(swapped, _mm512_movehdup_ps(cs))));
        }
        for (; d < head_dim; d += 2)
            cpu_rotate_pair(v + d, cos_sin[d], cos_sin[d + 1]);
    }
}

/* ---- sampling -------------------------------------------------------------------- */

TGT float cpu_max_avx512(const float *x, int n)
{
    __m512 best = _mm512_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        best = _mm512_max_ps(best, _mm512_loadu_ps(x + i));
    float top = _mm512_reduce_max_ps(best);
    for (; i < n; i++)
        top = x[i] > top ? x[i] : top;
    return top;
}

TGT double cpu_exp_weights_avx512(float *x, int n, float max, float inv_temperature,
                                  double *chunk_sums)
{
    const __m512 scale = _mm512_set1_ps(inv_temperature * 1.4426950408889634f);
    const __m512 shift = _mm512_set1_ps(max);
    double total = 0;
    for (int c = 0; c * CPU_SAMPLE_CHUNK < n; c++) {
        const int lo = c * CPU_SAMPLE_CHUNK;
        const int hi = lo + CPU_SAMPLE_CHUNK < n ? lo + CPU_SAMPLE_CHUNK : n;
        __m512 sum = _mm512_setzero_ps();
        int i = lo;
        for (; i + 16 <= hi; i += 16) {
            const __m512 e = exp2_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), shift), scale));
            _mm512_storeu_ps(x + i, e);
            sum = _mm512_add_ps(sum, e);
        }
        if (i < hi) {
            const __mmask16 tail = (__mmask16)((1u << (hi - i)) - 1);
            const __m512 v = _mm512_maskz_loadu_ps(tail, x + i);
            const __m512 e = _mm512_maskz_mov_ps(tail, exp2_ps(_mm512_mul_ps(_mm512_sub_ps(v, shift), scale)));
            _mm512_mask_storeu_ps(x + i, tail, e);
            sum = _mm512_add_ps(sum, e);
        }
        chunk_sums[c] = _mm512_reduce_add_ps(sum);
        total += chunk_sums[c];
    }
    return total;
}

/* ---- attention ------------------------------------------------------------------- */

/* A score may exceed the running max by this much (log2 units) before the max is raised
 * and the sums rescaled: terms stay below 2^8, far from overflow. */
#define LAZY_MAX 8.0f
/* Blocks ahead to prefetch. */
#define ATTN_PREFETCH 3

typedef struct attn_state {
    float *qs;  /* (n_rows, hd) q * scale * log2(e) */
    float *m;   /* (n_rows,) running max, log2 units */
    float *l;   /* (n_rows, 16) running sums, one per lane */
    float *o;   /* (n_rows, hd) unnormalised output */
    float *p;   /* (8, 32) probabilities of the current pair of blocks */
    int ahead;  /* blocks of the next tile (t->ahead) that the prefetches may run on into:
                   its first ones, past this row group's last block (0: none) */
} attn_state;

/* 16 halves of a block at element i, widened to F32. */
INLINE __m512 attn_load(const cpu_half *block, size_t i)
{
    return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(block + i)));
}

/* NB (1 or 2) blocks from b for R rows: their scores, the softmax terms, and the weighted
 * values added into the output accumulators acc (R x DV, in registers). */
INLINE void attn_blocks(const cpu_attn_tile *t, const attn_state *st, __m512 *acc, int row0,
                        int b, int b_end, int R, int DV, int NB)
{
    const int hd = DV * 16;
    const int32_t *pos = t->pos + row0;
    const float *qs = st->qs + (size_t)row0 * hd;
    float *m = st->m + row0;
    float *l = st->l + (size_t)row0 * 16;
    float *pb = st->p;
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
    const cpu_half *kt[2], *vb[2];
    /* Decode rows stream every block from memory once: fetch the lines of the blocks
     * ATTN_PREFETCH ahead, K's (hd / 2: 16 halves per d) a line per two steps of the score
     * loop and V's (as many: hd halves per key) spread over the value loop's keys; a block
     * of compute is shorter than a memory round trip. Fetching V's lines in the score loop
     * too (as many misses in flight at once, then none) made decode 256 about 2.5 % slower. */
    const cpu_half *kt_next[2], *vb_next[2];
CPU_UNROLL(2)
    for (int i = 0; i < NB; i++) {
        const size_t block = (size_t)t->block_table[b + i] * t->block_stride;
        kt[i] = t->k + block;
        vb[i] = t->v + block;
        if (!cpu_attn_block_at(t, b + i + ATTN_PREFETCH, b_end, st->ahead, &kt_next[i],
                               &vb_next[i])) {
            kt_next[i] = kt[i];
            vb_next[i] = vb[i];
        }
    }
    const int key0 = b * 16;
    const bool masked = key0 + 16 * NB - 1 > pos[0];

    __m512 s[2][8];
CPU_UNROLL(8)
    for (int r = 0; r < R; r++)
CPU_UNROLL(2)
        for (int i = 0; i < NB; i++)
            s[i][r] = _mm512_setzero_ps();
    for (int d0 = 0; d0 < hd; d0 += 2) {
CPU_UNROLL(2)
        for (int i = 0; i < NB; i++)
            _mm_prefetch((const char *)(kt_next[i] + d0 * 16), _MM_HINT_T0);
CPU_UNROLL(2)
        for (int d = d0; d < d0 + 2; d++) {
            __m512 kd[2];
CPU_UNROLL(2)
            for (int i = 0; i < NB; i++)
                kd[i] = attn_load(kt[i], (size_t)d * 16);
CPU_UNROLL(8)
            for (int r = 0; r < R; r++) {
                const __m512 q = _mm512_set1_ps(qs[(size_t)r * hd + d]);
CPU_UNROLL(2)
                for (int i = 0; i < NB; i++)
                    s[i][r] = _mm512_fmadd_ps(q, kd[i], s[i][r]);
            }
        }
    }
CPU_UNROLL(8)
    for (int r = 0; r < R; r++) {
        __mmask16 valid[2] = {0xFFFF, 0xFFFF};
        if (masked) {
CPU_UNROLL(2)
            for (int i = 0; i < NB; i++) {
                const int n_valid = pos[r] - (key0 + 16 * i) + 1;
                valid[i] = n_valid >= 16 ? 0xFFFF : n_valid <= 0 ? 0 : (__mmask16)((1u << n_valid) - 1);
                s[i][r] = _mm512_mask_mov_ps(neg_inf, valid[i], s[i][r]);
            }
        }
        const __m512 top16 = NB == 2 ? _mm512_max_ps(s[0][r], s[1][r]) : s[0][r];
        if (_mm512_cmp_ps_mask(top16, _mm512_set1_ps(m[r] + LAZY_MAX), _CMP_GT_OQ)) {
            const float top = _mm512_reduce_max_ps(top16);
            const float new_max = top > m[r] ? top : m[r];
            /* in registers, not libm's exp2f: a call would make every accumulator a save
             * around it. A first max (m = -inf) or a jump past 127 gives 2^-127, not 0: the
             * old terms keep a weight that no float sum can see. */
            const __m512 factor = exp2_ps(_mm512_set1_ps(m[r] - new_max));
CPU_UNROLL(8)
            for (int dv = 0; dv < DV; dv++)
                acc[r * DV + dv] = _mm512_mul_ps(acc[r * DV + dv], factor);
            _mm512_store_ps(l + r * 16, _mm512_mul_ps(_mm512_load_ps(l + r * 16), factor));
            m[r] = new_max;
        }
        const __m512 mv = _mm512_set1_ps(m[r]);
        __m512 sum = _mm512_load_ps(l + r * 16);
CPU_UNROLL(2)
        for (int i = 0; i < NB; i++) {
            __m512 p = exp2_ps(_mm512_sub_ps(s[i][r], mv));
            if (masked)
                p = _mm512_maskz_mov_ps(valid[i], p);
            sum = _mm512_add_ps(sum, p);
            _mm512_store_ps(pb + r * 32 + i * 16, p);
        }
        _mm512_store_ps(l + r * 16, sum);
    }
CPU_UNROLL(2)
    for (int i = 0; i < NB; i++)
        for (int j = 0; j < 16; j++) {
            /* V's hd / 2 lines (32 halves each), hd / 32 per key */
            for (int ln = j * hd / 32; ln < (j + 1) * hd / 32; ln++)
                _mm_prefetch((const char *)(vb_next[i] + ln * 32), _MM_HINT_T0);
            __m512 vj[8];
CPU_UNROLL(8)
            for (int dv = 0; dv < DV; dv++)
                vj[dv] = attn_load(vb[i], (size_t)j * hd + dv * 16);
CPU_UNROLL(8)
            for (int r = 0; r < R; r++) {
                const __m512 pj = _mm512_set1_ps(pb[r * 32 + i * 16 + j]);
CPU_UNROLL(8)
                for (int dv = 0; dv < DV; dv++)
                    acc[r * DV + dv] = _mm512_fmadd_ps(pj, vj[dv], acc[r * DV + dv]);
            }
        }
}

/* Rows [row0, row0 + R) against key blocks [b0, b1), two blocks a pass (2R chains of
 * dependent FMAs in the score loop, past the FMA's latency on two pipes, and each
 * broadcast of q serves two keys' vectors); blocks up to b_end exist for the group (those
 * ahead are prefetched while these compute). DV = head_dim / 16; R x DV output accumulators
 * stay in registers across the blocks. */
INLINE void attn_group(const cpu_attn_tile *t, const attn_state *st, int row0, int b0, int b1,
                       int b_end, int R, int DV)
{
    const int hd = DV * 16;
    float *o = st->o + (size_t)row0 * hd;
    __m512 acc[16];
CPU_UNROLL(16)
    for (int r = 0; r < R; r++)
CPU_UNROLL(8)
        for (int dv = 0; dv < DV; dv++)
            acc[r * DV + dv] = _mm512_load_ps(o + (size_t)r * hd + dv * 16);
    int b = b0;
    for (; b + 2 <= b1; b += 2)
        attn_blocks(t, st, acc, row0, b, b_end, R, DV, 2);
    if (b < b1)
        attn_blocks(t, st, acc, row0, b, b_end, R, DV, 1);
CPU_UNROLL(16)
    for (int r = 0; r < R; r++)
CPU_UNROLL(8)
        for (int dv = 0; dv < DV; dv++)
            _mm512_store_ps(o + (size_t)r * hd + dv * 16, acc[r * DV + dv]);
}

#define GROUP_CASE(RR, DVV)                                                                  \
    case RR:                                                                                 \
        attn_group(t, st, row0, b0, b1, b_end, RR, DVV);                                     \
        break

static TGT void attn_group_dv1(const cpu_attn_tile *t, const attn_state *st, int row0, int b0,
                               int b1, int b_end, int R)
{
    switch (R) {
        GROUP_CASE(1, 1); GROUP_CASE(2, 1); GROUP_CASE(3, 1); GROUP_CASE(4, 1);
        GROUP_CASE(5, 1); GROUP_CASE(6, 1); GROUP_CASE(7, 1); default: attn_group(t, st, row0, b0, b1, b_end, 8, 1);
    }
}
static TGT void attn_group_dv2(const cpu_attn_tile *t, const attn_state *st, int row0, int b0,
                               int b1, int b_end, int R)
{
    switch (R) {
        GROUP_CASE(1, 2); GROUP_CASE(2, 2); GROUP_CASE(3, 2); GROUP_CASE(4, 2);
        GROUP_CASE(5, 2); default: attn_group(t, st, row0, b0, b1, b_end, 6, 2);
    }
}
static TGT void attn_group_dv4(const cpu_attn_tile *t, const attn_state *st, int row0, int b0,
                               int b1, int b_end, int R)
{
    switch (R) {
        GROUP_CASE(1, 4); GROUP_CASE(2, 4); GROUP_CASE(3, 4); default: attn_group(t, st, row0, b0, b1, b_end, 4, 4);
    }
}
static TGT void attn_group_dv8(const cpu_attn_tile *t, const attn_state *st, int row0, int b0,
                               int b1, int b_end, int R)
{
    switch (R) {
        GROUP_CASE(1, 8); default: attn_group(t, st, row0, b0, b1, b_end, 2, 8);
    }
}

static float *align64(float *p)
{
    return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

TGT void cpu_attn_tile_avx512(const cpu_attn_tile *t, float *scratch)
{
    const int hd = t->head_dim, n = t->n_rows, dv = hd / 16;
    const int group_rows = dv == 8 ? 2 : dv == 4 ? 4 : dv == 2 ? 6 : 8;
    /* scale * log2(e): scores come out in log2 units for exp2 */
    const float qscale = t->scale * 1.4426950408889634f;
    attn_state st;
    st.p = align64(scratch);
    st.qs = st.p + 8 * 32;
    st.o = st.qs + (size_t)n * hd;
    st.l = st.o + (size_t)n * hd;
    st.m = st.l + (size_t)n * 16;
    for (int r = 0; r < n; r++) {
        for (int d = 0; d < hd; d++) {
            st.qs[(size_t)r * hd + d] = t->q[r][d] * qscale;
            st.o[(size_t)r * hd + d] = 0;
        }
        memset(st.l + (size_t)r * 16, 0, 16 * sizeof(float));
        st.m[r] = -INFINITY;
    }
    const int n_blocks = t->pos[n - 1] / 16 + 1;
    for (int c0 = 0; c0 < n_blocks; c0 += CPU_ATTN_CHUNK_BLOCKS) {
        const int c1 = c0 + CPU_ATTN_CHUNK_BLOCKS < n_blocks ? c0 + CPU_ATTN_CHUNK_BLOCKS : n_blocks;
        for (int row0 = 0; row0 < n; row0 += group_rows) {
            const int rows = n - row0 < group_rows ? n - row0 : group_rows;
            /* the tile's last pass over its last blocks runs on into the next tile's */
            st.ahead = row0 + rows == n && c1 == n_blocks ? t->ahead.n_blocks : 0;
            const int last = t->pos[row0 + rows - 1] / 16 + 1;
            const int b1 = c1 < last ? c1 : last;
            if (c0 >= b1)
                continue;
            switch (dv) {
            case 1: attn_group_dv1(t, &st, row0, c0, b1, last, rows); break;
            case 2: attn_group_dv2(t, &st, row0, c0, b1, last, rows); break;
            case 4: attn_group_dv4(t, &st, row0, c0, b1, last, rows); break;
            default: attn_group_dv8(t, &st, row0, c0, b1, last, rows); break;
            }
        }
    }
    for (int r = 0; r < n; r++) {
        const float inv = 1.0f / _mm512_reduce_add_ps(_mm512_load_ps(st.l + (size_t)r * 16));
        for (int d = 0; d < hd; d++)
            t->out[r][d] = st.o[(size_t)r * hd + d] * inv;
    }
}
