/* cpu_avx2 — the AVX2 + FMA kernels, one for each AVX-512 kernel (cpu_avx512.c): the
 * small-batch GEMM, the element-wise kernels (SwiGLU, RMSNorm, RoPE), the sampler's max and
 * exp weights, the streaming read, and the attention tile. Compiled for AVX2 by function
 * attribute; callers dispatch on cpu_isa_active() first. Each kernel has a plain reference
 * in cpu_kernels.c or cpu_attn.c that the tests compare it with. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/cpu/cpu_attn.h"
#include "engine/cpu/cpu_avx2_math.h"
#include "engine/cpu/cpu_isa_kernels.h"

#define TGT CPU_AVX2_TGT
#define INLINE CPU_AVX2_INLINE

/* ---- small-batch GEMM ------------------------------------------------------------ */

/* One tile: RM rows of X against RN rows of W, RM x RN = 12 (4 x 3) or 8 (2 x 4, 1 x 8) dot
 * products of length k, out[i * RN + j] = x_i . w_j: 12 accumulators keep the two FMA pipes
 * busy past the FMA's latency of 4 cycles (8 would just cover it), and leave 4 registers
 * for the loads. Rows past the end are clamped to the last valid one (the caller does not
 * store them). */
INLINE void gemm_tile(const float *x, int ldx, int rows_x, const float *w, int rows_w, int k,
                      int RM, int RN, float *out)
{
    __m256 acc[12];
    const float *xr[4];
    const float *wr[8];
CPU_UNROLL(12)
    for (int i = 0; i < 12; i++)
        acc[i] = _mm256_setzero_ps();
CPU_UNROLL(4)
    for (int i = 0; i < RM; i++)
        xr[i] = x + (size_t)(i < rows_x ? i : rows_x - 1) * ldx;
CPU_UNROLL(8)
    for (int j = 0; j < RN; j++)
        wr[j] = w + (size_t)(j < rows_w ? j : rows_w - 1) * k;
    int p = 0;
    for (; p + 8 <= k; p += 8) {
        if (RM >= RN) { /* 4 x 3: each W load serves 4 rows of X */
            __m256 wv[3];
CPU_UNROLL(3)
            for (int j = 0; j < RN; j++)
                wv[j] = _mm256_loadu_ps(wr[j] + p);
CPU_UNROLL(4)
            for (int i = 0; i < RM; i++) {
                const __m256 xv = _mm256_loadu_ps(xr[i] + p);
CPU_UNROLL(3)
                for (int j = 0; j < RN; j++)
                    acc[i * RN + j] = _mm256_fmadd_ps(xv, wv[j], acc[i * RN + j]);
            }
        } else { /* 2 x 4, 1 x 8: each X load serves RN rows of W */
            __m256 xv[2];
CPU_UNROLL(2)
            for (int i = 0; i < RM; i++)
                xv[i] = _mm256_loadu_ps(xr[i] + p);
CPU_UNROLL(8)
            for (int j = 0; j < RN; j++) {
                const __m256 wv = _mm256_loadu_ps(wr[j] + p);
CPU_UNROLL(2)
                for (int i = 0; i < RM; i++)
                    acc[i * RN + j] = _mm256_fmadd_ps(xv[i], wv, acc[i * RN + j]);
            }
        }
    }
    if (p < k) {
        const __m256i tail = cpu_avx2_tail_mask(k - p);
CPU_UNROLL(4)
        for (int i = 0; i < RM; i++) {
            const __m256 xv = _mm256_maskload_ps(xr[i] + p, tail);
CPU_UNROLL(8)
            for (int j = 0; j < RN; j++)
                acc[i * RN + j] =
                    _mm256_fmadd_ps(xv, _mm256_maskload_ps(wr[j] + p, tail), acc[i * RN + j]);
        }
    }
    _mm256_storeu_ps(out, cpu_avx2_sum8(acc));
    if (RM * RN > 8) { /* the last 4 */
        const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(acc[8], acc[9]), _mm256_hadd_ps(acc[10], acc[11]));
        _mm_storeu_ps(out + 8, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
    }
}

/* As cpu_gemm_small_avx512: W in blocks of rows that every row group of X passes over (so
 * W streams from memory once per call), the next block prefetched into L2 while this one
 * computes, its lines spread over the block's tiles. Blocks of 24 rows: 8 tiles of 4 x 3 for
 * each group of 4 rows of X, 6 of 2 x 4 for a pair, 3 of 1 x 8 for a single row. */
#define SMALL_BLOCK 24
TGT void cpu_gemm_small_avx2(float *y, int ldy, const float *x, int ldx, const float *w, int m,
                             int n0, int n1, int k, bool accumulate)
{
    float out[12] __attribute__((aligned(32)));
    const int tiles = (m / 4) * 8 + ((m % 4) >= 2 ? 6 : 0) + ((m % 4) % 2) * 3;
    for (int n = n0; n < n1; n += SMALL_BLOCK) {
        const float *wb = w + (size_t)n * k;
        const int rows_w = n1 - n < SMALL_BLOCK ? n1 - n : SMALL_BLOCK;
        const int left = n1 - n - SMALL_BLOCK;
        const int next_rows = left < SMALL_BLOCK ? left : SMALL_BLOCK; /* <= 0: none */
        const char *next = (const char *)(wb + (size_t)SMALL_BLOCK * k);
        const size_t next_lines = next_rows > 0 ? ((size_t)next_rows * k * sizeof(float) + 63) / 64 : 0;
        const size_t lines_per_tile = (next_lines + (size_t)tiles - 1) / (size_t)tiles;
        size_t line = 0;
#define PREFETCH_SHARE()                                                                     \
        for (size_t end_ = line + lines_per_tile; line < end_ && line < next_lines; line++)  \
            _mm_prefetch(next + line * 64, _MM_HINT_T1)
        int i = 0;
        for (; i + 4 <= m; i += 4)
            for (int j = 0; j < SMALL_BLOCK; j += 3) {
                PREFETCH_SHARE();
                if (j >= rows_w)
                    continue;
                gemm_tile(x + (size_t)i * ldx, ldx, 4, wb + (size_t)j * k, rows_w - j, k, 4, 3, out);
                cpu_gemm_store_tile(y + (size_t)i * ldy + n + j, ldy, out, 4, rows_w - j, 4, 3, accumulate);
            }
        if (m - i >= 2) {
            for (int j = 0; j < SMALL_BLOCK; j += 4) {
                PREFETCH_SHARE();
                if (j >= rows_w)
                    continue;
                gemm_tile(x + (size_t)i * ldx, ldx, 2, wb + (size_t)j * k, rows_w - j, k, 2, 4, out);
                cpu_gemm_store_tile(y + (size_t)i * ldy + n + j, ldy, out, 2, rows_w - j, 2, 4, accumulate);
            }
            i += 2;
        }
        if (m - i == 1)
            for (int j = 0; j < SMALL_BLOCK; j += 8) {
                PREFETCH_SHARE();
                if (j >= rows_w)
                    continue;
                gemm_tile(x + (size_t)i * ldx, ldx, 1, wb + (size_t)j * k, rows_w - j, k, 1, 8, out);
                cpu_gemm_store_tile(y + (size_t)i * ldy + n + j, ldy, out, 1, rows_w - j, 1, 8, accumulate);
            }
#undef PREFETCH_SHARE
    }
}

/* ---- GEMM on panels --------------------------------------------------------------- */

/* As cpu_gemm_panels_avx512's tile, on 8-lane vectors: R (up to 6) rows of a group of X
 * (xg[p * G + i0 + i], G the group's rows) against one panel of W (16 columns, two vectors):
 * 12 accumulators, per step of k two loads of W, R broadcasts of X and 2R FMAs. */
INLINE void panel_tile(float *y, int ldy, const float *xg, int G, int i0, const float *wp, int k,
                       int R, int cols, bool accumulate, const char *pf, int npf)
{
    __m256 acc[12];
CPU_UNROLL(12)
    for (int i = 0; i < 2 * R; i++)
        acc[i] = _mm256_setzero_ps();
    int f = 0;
    for (int p = 0; p < k; p++) {
        if (f < npf && (p & 1) == 0)
            _mm_prefetch(pf + (size_t)f++ * 64, _MM_HINT_T1);
        const __m256 w0 = _mm256_loadu_ps(wp + (size_t)p * CPU_PANEL);
        const __m256 w1 = _mm256_loadu_ps(wp + (size_t)p * CPU_PANEL + 8);
        const float *xp = xg + (size_t)p * G + i0;
CPU_UNROLL(6)
        for (int i = 0; i < R; i++) {
            const __m256 xv = _mm256_broadcast_ss(xp + i);
            acc[2 * i] = _mm256_fmadd_ps(xv, w0, acc[2 * i]);
            acc[2 * i + 1] = _mm256_fmadd_ps(xv, w1, acc[2 * i + 1]);
        }
    }
    for (; f < npf; f++)
        _mm_prefetch(pf + (size_t)f * 64, _MM_HINT_T1);
    const __m256i m0 = cpu_avx2_tail_mask(cols >= 8 ? 8 : cols);
    const __m256i m1 = cpu_avx2_tail_mask(cols >= 16 ? 8 : cols <= 8 ? 0 : cols - 8);
CPU_UNROLL(6)
    for (int i = 0; i < R; i++) {
        float *yr = y + (size_t)(i0 + i) * ldy;
        __m256 v0 = acc[2 * i], v1 = acc[2 * i + 1];
        if (accumulate) {
            v0 = _mm256_add_ps(v0, _mm256_maskload_ps(yr, m0));
            v1 = _mm256_add_ps(v1, _mm256_maskload_ps(yr + 8, m1));
        }
        _mm256_maskstore_ps(yr, m0, v0);
        _mm256_maskstore_ps(yr + 8, m1, v1);
    }
}

#define PANEL_CASE(RR)                                                                       \
    case RR:                                                                                 \
        panel_tile(y, ldy, xg, G, i0, wp, k, RR, cols, accumulate, pf, npf);                 \
        break

static TGT void panel_tile_rows(float *y, int ldy, const float *xg, int G, int i0,
                                const float *wp, int k, int R, int cols, bool accumulate,
                                const char *pf, int npf)
{
    switch (R) {
        PANEL_CASE(1); PANEL_CASE(2); PANEL_CASE(3); PANEL_CASE(4); PANEL_CASE(5);
        default: PANEL_CASE(6);
    }
}
#undef PANEL_CASE

/* As cpu_gemm_panels_avx512: two panels at a time, every group of X (in two halves of up
 * to 6 rows) passing over each, the next two prefetched into L2, spread over the tiles. */
TGT void cpu_gemm_panels_avx2(float *y, int ldy, const float *xpack, const float *panels, int m,
                              int n0, int n1, int k, bool accumulate, int after0, int after1)
{
    const int groups = (m + CPU_PANEL_ROWS - 1) / CPU_PANEL_ROWS;
    /* tiles per two panels: two halves of each full group, one or two of the last */
    const int tiles = 2 * ((m / CPU_PANEL_ROWS) * 2 + (m % CPU_PANEL_ROWS + 5) / 6);
    for (int n = n0; n < n1; n += 2 * CPU_PANEL) {
        cpu_panel_pair pair = cpu_panel_pair_at(panels, n, n1, k, after0, after1);
        for (int g = 0; g < groups; g++) {
            const int r0 = g * CPU_PANEL_ROWS;
            const int G = m - r0 < CPU_PANEL_ROWS ? m - r0 : CPU_PANEL_ROWS;
            const float *xg = xpack + (size_t)r0 * k;
            for (int j = 0; j < 2 && j * CPU_PANEL < pair.cols; j++)
                for (int i0 = 0; i0 < G; i0 += 6) {
                    const char *pf;
                    const int npf = cpu_panel_prefetch_share(&pair, tiles, &pf);
                    panel_tile_rows(y + (size_t)r0 * ldy + n + j * CPU_PANEL, ldy, xg, G, i0,
                                    pair.w + (size_t)j * k * CPU_PANEL, k, G - i0 < 6 ? G - i0 : 6,
                                    pair.cols - j * CPU_PANEL, accumulate, pf, npf);
                }
        }
    }
}

/* ---- X rearranged for the kernels on panels ---------------------------------------- */

/* One group of X's rows (cpu_gemm_panels): out[p * rows + i] = x[i * ldx + p]. Four rows by
 * four columns at a time, transposed in registers, so each store writes four of a column's
 * consecutive floats where a plain loop writes one float per 4 * rows bytes. */
TGT void cpu_xpack_group_avx2(float *out, const float *x, int ldx, int rows, int k)
{
    int i = 0;
    for (; i + 4 <= rows; i += 4) {
        const float *x0 = x + (size_t)i * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
        int p = 0;
        for (; p + 4 <= k; p += 4) {
            /* a_r = row r's columns p..p+3; t: interleaved pairs; c_j = column p+j's rows */
            const __m128 a0 = _mm_loadu_ps(x0 + p), a1 = _mm_loadu_ps(x1 + p);
            const __m128 a2 = _mm_loadu_ps(x2 + p), a3 = _mm_loadu_ps(x3 + p);
            const __m128 t0 = _mm_unpacklo_ps(a0, a1), t1 = _mm_unpackhi_ps(a0, a1);
            const __m128 t2 = _mm_unpacklo_ps(a2, a3), t3 = _mm_unpackhi_ps(a2, a3);
            float *o = out + (size_t)p * rows + i;
            _mm_storeu_ps(o, _mm_movelh_ps(t0, t2));
            _mm_storeu_ps(o + rows, _mm_movehl_ps(t2, t0));
            _mm_storeu_ps(o + 2 * rows, _mm_movelh_ps(t1, t3));
            _mm_storeu_ps(o + 3 * rows, _mm_movehl_ps(t3, t1));
        }
        for (; p < k; p++) {
            float *o = out + (size_t)p * rows + i;
            o[0] = x0[p];
            o[1] = x1[p];
            o[2] = x2[p];
            o[3] = x3[p];
        }
    }
    for (; i < rows; i++) {
        const float *xr = x + (size_t)i * ldx;
        for (int p = 0; p < k; p++)
            out[(size_t)p * rows + i] = xr[p];
    }
}

/* ---- streaming read ---------------------------------------------------------------- */

TGT float cpu_stream_sum_avx2(const float *x, size_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
    }
    float sum = cpu_avx2_hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++)
        sum += x[i];
    return sum;
}

/* ---- element-wise -------------------------------------------------------------------- */

TGT void cpu_exp2_avx2(float *out, const float *in, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, cpu_avx2_exp2(_mm256_loadu_ps(in + i)));
    if (i < n) {
        const __m256i tail = cpu_avx2_tail_mask(n - i);
        _mm256_maskstore_ps(out + i, tail, cpu_avx2_exp2(_mm256_maskload_ps(in + i, tail)));
    }
}

/* silu(g) * u = g / (1 + 2^(-g log2 e)) * u */
INLINE __m256 swiglu8(__m256 g, __m256 u)
{
    const __m256 e = cpu_avx2_exp2(_mm256_mul_ps(g, _mm256_set1_ps(-1.4426950408889634f)));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

TGT void cpu_swiglu_avx2(float *out, const float *gate, const float *up, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        const __m256i tail = cpu_avx2_tail_mask(n - i);
        _mm256_maskstore_ps(out + i, tail,
                            swiglu8(_mm256_maskload_ps(gate + i, tail),
                                    _mm256_maskload_ps(up + i, tail)));
    }
}

TGT void cpu_rmsnorm_avx2(float *o, const float *x, const float *weight, int size, float eps)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int i = 0;
    for (; i + 16 <= size; i += 16) {
        const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
        a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    double ss = cpu_avx2_hsum(_mm256_add_ps(a0, a1));
    for (int j = i; j < size; j++)
        ss += (double)x[j] * x[j];
    const float inv_rms = cpu_inv_rms(ss, size, eps);
    const __m256 inv = _mm256_set1_ps(inv_rms);
    int j = 0;
    for (; j + 8 <= size; j += 8)
        _mm256_storeu_ps(o + j, _mm256_mul_ps(_mm256_loadu_ps(weight + j),
                                              _mm256_mul_ps(inv, _mm256_loadu_ps(x + j))));
    for (; j < size; j++)
        o[j] = weight[j] * (inv_rms * x[j]);
}

/* Pairs (2i, 2i + 1) of each head rotated by cos_sin[2i], cos_sin[2i + 1]: with c and s each
 * duplicated over its pair and the pair swapped, v c -+ v' s is one fmaddsub. */
TGT void cpu_rope_avx2(float *vec, int n_heads, int head_dim, const float *cos_sin)
{
    for (int h = 0; h < n_heads; h++) {
        float *v = vec + (size_t)h * head_dim;
        int d = 0;
        for (; d + 8 <= head_dim; d += 8) {
            const __m256 cs = _mm256_loadu_ps(cos_sin + d);
            const __m256 x = _mm256_loadu_ps(v + d);
            const __m256 swapped = _mm256_permute_ps(x, 0xB1);
            _mm256_storeu_ps(v + d, _mm256_fmaddsub_ps(x, _mm256_moveldup_ps(cs),
                                                       _mm256_mul_ps(swapped, _mm256_movehdup_ps(cs))));
        }
        for (; d < head_dim; d += 2)
            cpu_rotate_pair(v + d, cos_sin[d], cos_sin[d + 1]);
    }
}

/* ---- sampling -------------------------------------------------------------------- */

TGT float cpu_max_avx2(const float *x, int n)
{
    __m256 b0 = _mm256_set1_ps(-INFINITY), b1 = b0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        b0 = _mm256_max_ps(b0, _mm256_loadu_ps(x + i));
        b1 = _mm256_max_ps(b1, _mm256_loadu_ps(x + i + 8));
    }
    float top = cpu_avx2_hmax(_mm256_max_ps(b0, b1));
    for (; i < n; i++)
        top = x[i] > top ? x[i] : top;
    return top;
}

TGT double cpu_exp_weights_avx2(float *x, int n, float max, float inv_temperature,
                                double *chunk_sums)
{
    const __m256 scale = _mm256_set1_ps(inv_temperature * 1.4426950408889634f);
    const __m256 shift = _mm256_set1_ps(max);
    double total = 0;
    for (int c = 0; c * CPU_SAMPLE_CHUNK < n; c++) {
        const int lo = c * CPU_SAMPLE_CHUNK;
        const int hi = lo + CPU_SAMPLE_CHUNK < n ? lo + CPU_SAMPLE_CHUNK : n;
        __m256 sum = _mm256_setzero_ps();
        int i = lo;
        for (; i + 8 <= hi; i += 8) {
            const __m256 e =
                cpu_avx2_exp2(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), shift), scale));
            _mm256_storeu_ps(x + i, e);
            sum = _mm256_add_ps(sum, e);
        }
        float rest = 0;
        for (; i < hi; i++) {
            x[i] = exp2f((x[i] - max) * inv_temperature * 1.4426950408889634f);
            rest += x[i];
        }
        chunk_sums[c] = (double)cpu_avx2_hsum(sum) + rest;
        total += chunk_sums[c];
    }
    return total;
}

TGT void cpu_halves_from_floats_avx2(cpu_half *out, const float *in, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        out[i] = cpu_half_from_float(in[i]);
}

/* ---- attention ------------------------------------------------------------------- */

/* The AVX-512 kernel's flash attention on 8-lane vectors: a block of 16 keys is two vectors
 * of scores per row, up to A2_ROWS rows take their queries against one load of each key
 * (12 score accumulators, 2 key vectors and a broadcast: 15 of the 16 registers; 12
 * independent chains of FMAs cover the FMA's latency on both pipes, where 8 just did), exp2
 * with scale x log2(e) folded into Q, the running max only raised (and the row's output and
 * sums rescaled) when a score overtakes it by 2^A2_LAZY. The weighted values are added for
 * all the group's rows at a time, 16 dimensions (2 accumulators per row) per pass over the
 * block's values, so each value is loaded once per pass. Keys come in chunks of
 * CPU_ATTN_CHUNK_BLOCKS, widened from the cache's halves to F32 into a buffer once per chunk
 * (a2_widen_chunk, which prefetches A2_PREFETCH blocks ahead), and every row group passes
 * over the chunk while it is in L1/L2. A tile of one row group (a decode token's kv_mul rows)
 * has no second reader of the buffer: it widens K and V as it loads them from the cache
 * (each value widened once, a2_load) and prefetches A2_PREFETCH blocks ahead itself (a
 * decode row streams every block from memory once). For head_dim a multiple of 8. */
#define A2_ROWS 6
#define A2_LAZY 8.0f
#define A2_PREFETCH 3

typedef struct a2_state {
    float *qs; /* (n_rows, hd) q x scale x log2(e) */
    float *m;  /* (n_rows,) running max, log2 units */
    float *l;  /* (n_rows, 8) running sums, one per lane */
    float *o;  /* (n_rows, hd) unnormalised output */
    float *p;  /* (2, A2_ROWS, 16) weights of this block and of the previous one, then
                  (A2_ROWS, 16) this block's scores */
    float *kc; /* (CPU_ATTN_CHUNK_BLOCKS, hd, 16) the chunk's keys, widened to F32 */
    float *vc; /* (CPU_ATTN_CHUNK_BLOCKS, 16, hd) its values, widened */
} a2_state;

/* 8 elements of a block at element i: F32 from the widened chunk, or the cache's halves
 * widened on load. */
INLINE __m256 a2_load(const void *block, size_t i, bool halves)
{
    return halves ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const cpu_half *)block + i)))
                  : _mm256_loadu_ps((const float *)block + i);
}

/* o[r] += sum_j p[r][j] v_j over dims [d0, d0 + 8 NV) for RR rows, keys [0, keys); V F32
 * or halves (a2_load). */
INLINE void a2_values(float *o, int hd, const float *pb, const void *vb, int keys, int d0,
                      int RR, int NV, bool halves)
{
    __m256 acc[A2_ROWS][2];
CPU_UNROLL(6)
    for (int r = 0; r < RR; r++)
CPU_UNROLL(2)
        for (int v = 0; v < NV; v++)
            acc[r][v] = _mm256_loadu_ps(o + (size_t)r * hd + d0 + v * 8);
    for (int j = 0; j < keys; j++) {
        __m256 vj[2];
CPU_UNROLL(2)
        for (int v = 0; v < NV; v++)
            vj[v] = a2_load(vb, (size_t)j * hd + d0 + v * 8, halves);
CPU_UNROLL(6)
        for (int r = 0; r < RR; r++) {
            const __m256 pj = _mm256_broadcast_ss(pb + r * 16 + j);
CPU_UNROLL(2)
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm256_fmadd_ps(pj, vj[v], acc[r][v]);
        }
    }
CPU_UNROLL(6)
    for (int r = 0; r < RR; r++)
CPU_UNROLL(2)
        for (int v = 0; v < NV; v++)
            _mm256_storeu_ps(o + (size_t)r * hd + d0 + v * 8, acc[r][v]);
}

/* The weighted values of one block for R rows, F32 or the cache's halves: all rows in one
 * pass over each 16 dimensions (R x 2 accumulators), so each value is loaded (and widened)
 * once. */
INLINE void a2_add_values(float *o, int hd, const float *pb, const void *vb, int keys, int R,
                          bool halves)
{
    int d0 = 0;
    for (; d0 + 16 <= hd; d0 += 16)
        a2_values(o, hd, pb, vb, keys, d0, R, 2, halves);
    if (d0 < hd)
        a2_values(o, hd, pb, vb, keys, d0, R, 1, halves);
}

/* Prefetch block `want` of the tile, whose blocks end at n_blocks, or past the end the next
 * tile's (t->ahead), or nothing: every 64-byte line of its K and V halves. */
INLINE void a2_prefetch_at(const cpu_attn_tile *t, int want, int n_blocks)
{
    const cpu_half *k, *v;
    if (!cpu_attn_block_at(t, want, n_blocks, t->ahead.n_blocks, &k, &v))
        return;
    for (int i = 0; i < t->head_dim * 16; i += 32) {
        _mm_prefetch((const char *)(k + i), _MM_HINT_T0);
        _mm_prefetch((const char *)(v + i), _MM_HINT_T0);
    }
}

/* Widen the F16 keys and values of blocks [c0, c1) into the chunk buffers, once for every
 * row group that passes over them. The blocks A2_PREFETCH ahead (past n_blocks, the next
 * tile's) are prefetched as each block is widened: a decode row streams every block from
 * memory once. */
static TGT void a2_widen_chunk(const cpu_attn_tile *t, const a2_state *st, int c0, int c1,
                               int n_blocks)
{
    const size_t block_elems = (size_t)t->head_dim * 16;
    for (int b = c0; b < c1; b++) {
        const size_t block = (size_t)t->block_table[b] * t->block_stride;
        const cpu_half *kh = t->k + block, *vh = t->v + block;
        a2_prefetch_at(t, b + A2_PREFETCH, n_blocks);
        float *kf = st->kc + (size_t)(b - c0) * block_elems;
        float *vf = st->vc + (size_t)(b - c0) * block_elems;
        for (size_t i = 0; i < block_elems; i += 16) /* head_dim is a multiple of 8 */
            for (size_t h = i; h < i + 16; h += 8) {
                _mm256_storeu_ps(kf + h, a2_load(kh, h, true));
                _mm256_storeu_ps(vf + h, a2_load(vh, h, true));
            }
    }
}

/* Rows [row0, row0 + R) against key blocks [c0, b1) of the chunk that starts at block c0,
 * widened in the chunk buffers (a2_widen_chunk).
 *
 * Software-pipelined: a block's scores are computed before the previous block's values are
 * added, so the scores' chains of dependent FMAs (one per dimension) overlap the values'
 * FMAs instead of waiting on them; the previous block's weights were computed with the max
 * as it was then, and its values are added before this block may raise the max (and rescale
 * the outputs), so every term is scaled alike. */
INLINE void a2_group(const cpu_attn_tile *t, const a2_state *st, int row0, int c0, int b1,
                     int R, bool halves)
{
    const int hd = t->head_dim;
    const int32_t *pos = t->pos + row0;
    const float *qs = st->qs + (size_t)row0 * hd;
    float *m = st->m + row0;
    float *l = st->l + (size_t)row0 * 8;
    float *o = st->o + (size_t)row0 * hd;
    float *sb = st->p + 2 * A2_ROWS * 16; /* (A2_ROWS, 16) this block's scores */
    const __m256 lane_lo = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 lane_hi = _mm256_setr_ps(8, 9, 10, 11, 12, 13, 14, 15);
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
    const void *prev_vb = NULL; /* the block whose values are still to add */
    int prev_keys = 0, cur = 0;
    for (int b = c0; b < b1; b++) {
        const void *kb, *vb; /* the block: the widened chunk's F32, or the cache's halves */
        if (halves) {
            kb = t->k + (size_t)t->block_table[b] * t->block_stride;
            vb = t->v + (size_t)t->block_table[b] * t->block_stride;
            a2_prefetch_at(t, b + A2_PREFETCH, b1);
        } else {
            kb = st->kc + (size_t)(b - c0) * hd * 16;
            vb = st->vc + (size_t)(b - c0) * hd * 16;
        }
        const int key0 = b * 16;
        const bool masked = key0 + 15 > pos[0];
        {
            __m256 s0[A2_ROWS], s1[A2_ROWS];
CPU_UNROLL(6)
            for (int r = 0; r < R; r++)
                s0[r] = s1[r] = _mm256_setzero_ps();
            for (int e = 0; e < hd; e++) {
                const __m256 k0 = a2_load(kb, (size_t)e * 16, halves);
                const __m256 k1 = a2_load(kb, (size_t)e * 16 + 8, halves);
CPU_UNROLL(6)
                for (int r = 0; r < R; r++) {
                    const __m256 q = _mm256_broadcast_ss(qs + (size_t)r * hd + e);
                    s0[r] = _mm256_fmadd_ps(q, k0, s0[r]);
                    s1[r] = _mm256_fmadd_ps(q, k1, s1[r]);
                }
            }
CPU_UNROLL(6)
            for (int r = 0; r < R; r++) {
                _mm256_storeu_ps(sb + r * 16, s0[r]);
                _mm256_storeu_ps(sb + r * 16 + 8, s1[r]);
            }
        }
        if (prev_vb)
            a2_add_values(o, hd, st->p + (1 - cur) * A2_ROWS * 16, prev_vb, prev_keys, R, halves);
        float *pb = st->p + cur * A2_ROWS * 16;
        int keys = 0; /* the widest row's keys in this block */
CPU_UNROLL(6)
        for (int r = 0; r < R; r++) {
            __m256 s0 = _mm256_loadu_ps(sb + r * 16), s1 = _mm256_loadu_ps(sb + r * 16 + 8);
            int n_valid = 16;
            if (masked) {
                n_valid = pos[r] - key0 + 1;
                n_valid = n_valid < 0 ? 0 : n_valid > 16 ? 16 : n_valid;
                if (n_valid == 0) { /* this row's keys ended in an earlier block */
                    _mm256_storeu_ps(pb + r * 16, _mm256_setzero_ps());
                    _mm256_storeu_ps(pb + r * 16 + 8, _mm256_setzero_ps());
                    continue;
                }
                const __m256 nv = _mm256_set1_ps((float)n_valid);
                s0 = _mm256_blendv_ps(neg_inf, s0, _mm256_cmp_ps(lane_lo, nv, _CMP_LT_OQ));
                s1 = _mm256_blendv_ps(neg_inf, s1, _mm256_cmp_ps(lane_hi, nv, _CMP_LT_OQ));
            }
            keys = n_valid > keys ? n_valid : keys;
            const __m256 top8 = _mm256_max_ps(s0, s1);
            if (_mm256_movemask_ps(_mm256_cmp_ps(top8, _mm256_set1_ps(m[r] + A2_LAZY), _CMP_GT_OQ))) {
                const float top = cpu_avx2_hmax(top8);
                const float new_max = top > m[r] ? top : m[r];
                /* in registers, not libm's exp2f (a call saves every live register) */
                const __m256 factor = cpu_avx2_exp2_le127(_mm256_set1_ps(m[r] - new_max));
                for (int d = 0; d < hd; d += 8)
                    _mm256_storeu_ps(o + (size_t)r * hd + d,
                                     _mm256_mul_ps(_mm256_loadu_ps(o + (size_t)r * hd + d), factor));
                _mm256_storeu_ps(l + r * 8, _mm256_mul_ps(_mm256_loadu_ps(l + r * 8), factor));
                m[r] = new_max;
            }
            const __m256 mv = _mm256_set1_ps(m[r]);
            /* s - m <= A2_LAZY: no clamp */
            const __m256 p0 = cpu_avx2_exp2_le127(_mm256_sub_ps(s0, mv));
            const __m256 p1 = cpu_avx2_exp2_le127(_mm256_sub_ps(s1, mv));
            _mm256_storeu_ps(l + r * 8, _mm256_add_ps(_mm256_loadu_ps(l + r * 8), _mm256_add_ps(p0, p1)));
            _mm256_storeu_ps(pb + r * 16, p0);
            _mm256_storeu_ps(pb + r * 16 + 8, p1);
        }
        prev_vb = vb;
        prev_keys = keys;
        cur = 1 - cur;
    }
    if (prev_vb)
        a2_add_values(o, hd, st->p + (1 - cur) * A2_ROWS * 16, prev_vb, prev_keys, R, halves);
}

/* One instance of a2_group per (rows, halves): its loops see both as constants. */
static TGT void a2_group_rows(const cpu_attn_tile *t, const a2_state *st, int row0, int c0,
                              int b1, int R, bool halves)
{
#define A2_CASE(RR)                                                                          \
    case RR:                                                                                 \
        if (halves)                                                                          \
            a2_group(t, st, row0, c0, b1, RR, true);                                         \
        else                                                                                 \
            a2_group(t, st, row0, c0, b1, RR, false);                                        \
        break
    switch (R) {
        A2_CASE(6); A2_CASE(5); A2_CASE(4); A2_CASE(3); A2_CASE(2);
    default:
        A2_CASE(1);
    }
#undef A2_CASE
}

TGT void cpu_attn_tile_avx2(const cpu_attn_tile *t, float *scratch)
{
    const int hd = t->head_dim, n = t->n_rows;
    const float qscale = t->scale * 1.4426950408889634f;
    a2_state st;
    st.p = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    st.qs = st.p + 3 * A2_ROWS * 16;
    st.o = st.qs + (size_t)n * hd;
    st.l = st.o + (size_t)n * hd;
    st.m = st.l + (size_t)n * 8;
    st.kc = (float *)(((uintptr_t)(st.m + n) + 63) & ~(uintptr_t)63);
    st.vc = st.kc + (size_t)CPU_ATTN_CHUNK_BLOCKS * hd * 16;
    const __m256 qs8 = _mm256_set1_ps(qscale);
    for (int r = 0; r < n; r++) {
        for (int d = 0; d < hd; d += 8) {
            _mm256_storeu_ps(st.qs + (size_t)r * hd + d, _mm256_mul_ps(_mm256_loadu_ps(t->q[r] + d), qs8));
            _mm256_storeu_ps(st.o + (size_t)r * hd + d, _mm256_setzero_ps());
        }
        _mm256_storeu_ps(st.l + (size_t)r * 8, _mm256_setzero_ps());
        st.m[r] = -INFINITY;
    }
    const int n_blocks = t->pos[n - 1] / 16 + 1;
    if (n <= A2_ROWS) { /* one row group: widened into the chunk buffers, each block would
                           be read back once, so it reads the cache's halves itself */
        for (int i = 0; i < A2_PREFETCH && i < n_blocks; i++) /* the first blocks */
            a2_prefetch_at(t, i, n_blocks);
        a2_group_rows(t, &st, 0, 0, n_blocks, n, true);
    }
    for (int c0 = 0; c0 < n_blocks && n > A2_ROWS; c0 += CPU_ATTN_CHUNK_BLOCKS) {
        const int c1 = c0 + CPU_ATTN_CHUNK_BLOCKS < n_blocks ? c0 + CPU_ATTN_CHUNK_BLOCKS : n_blocks;
        a2_widen_chunk(t, &st, c0, c1, n_blocks);
        for (int row0 = 0; row0 < n; row0 += A2_ROWS) {
            const int rows = n - row0 < A2_ROWS ? n - row0 : A2_ROWS;
            const int last = t->pos[row0 + rows - 1] / 16 + 1;
            const int b1 = c1 < last ? c1 : last;
            if (c0 >= b1)
                continue;
            a2_group_rows(t, &st, row0, c0, b1, rows, false);
        }
    }
    for (int r = 0; r < n; r++) {
        const __m256 inv = _mm256_set1_ps(1.0f / cpu_avx2_hsum(_mm256_loadu_ps(st.l + (size_t)r * 8)));
        for (int d = 0; d < hd; d += 8)
            _mm256_storeu_ps(t->out[r] + d, _mm256_mul_ps(_mm256_loadu_ps(st.o + (size_t)r * hd + d), inv));
    }
}
