#include "engine/cpu/cpu_attn.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#include "engine/cpu/cpu_kernels.h"

void cpu_attn_naive(float *out, const float *q, const float *k, const float *v, int n_keys,
                    int stride, int head_dim, float scale, float *att)
{
    for (int j = 0; j < n_keys; j++) {
        double score = 0;
        for (int d = 0; d < head_dim; d++)
            score += (double)q[d] * k[(size_t)j * stride + d];
        att[j] = (float)(score * scale);
    }
    cpu_softmax(att, n_keys);
    for (int d = 0; d < head_dim; d++) {
        double val = 0;
        for (int j = 0; j < n_keys; j++)
            val += (double)att[j] * v[(size_t)j * stride + d];
        out[d] = (float)val;
    }
}

/* Key j of the tile's head: K element d is at kt[d * 16 + slot], V element d at
 * vb[slot * head_dim + d]. */
void cpu_attn_tile_generic(const cpu_attn_tile *t)
{
    const int hd = t->head_dim;
    for (int r = 0; r < t->n_rows; r++) {
        const float *q = t->q[r];
        float *out = t->out[r];
        float max_score = -INFINITY;
        double sum = 0;
        for (int d = 0; d < hd; d++)
            out[d] = 0;
        for (int j = 0; j <= t->pos[r]; j++) {
            const size_t block = (size_t)t->block_table[j / 16] * hd * 16;
            const int slot = j % 16;
            const float *kt = t->k + block;
            const float *vb = t->v + block;
            float score = 0;
            for (int d = 0; d < hd; d++)
                score += q[d] * kt[d * 16 + slot];
            score *= t->scale;
            if (score > max_score) { /* online softmax: rescale what was summed so far */
                const float factor = expf(max_score - score);
                sum *= factor;
                for (int d = 0; d < hd; d++)
                    out[d] *= factor;
                max_score = score;
            }
            const float p = expf(score - max_score);
            sum += p;
            for (int d = 0; d < hd; d++)
                out[d] += p * vb[slot * hd + d];
        }
        for (int d = 0; d < hd; d++)
            out[d] = (float)(out[d] / sum);
    }
}

/* The paged tile a block of 16 keys at a time: the 16 scores together (the block's K is laid
 * out d-major, so for each d the 16 products are one contiguous run), one rescale of the
 * running output per block instead of per key, then the block's 16 values added in. Every
 * loop runs over contiguous memory (the compiler may vectorize it for the target built). */
void cpu_attn_tile_blocked(const cpu_attn_tile *t)
{
    const int hd = t->head_dim;
    for (int r = 0; r < t->n_rows; r++) {
        const float *q = t->q[r];
        float *out = t->out[r];
        float max_score = -INFINITY;
        double sum = 0;
        for (int d = 0; d < hd; d++)
            out[d] = 0;
        const int n_keys = t->pos[r] + 1;
        for (int b = 0; b * 16 < n_keys; b++) {
            const int nk = n_keys - b * 16 < 16 ? n_keys - b * 16 : 16;
            const size_t block = (size_t)t->block_table[b] * hd * 16;
            const float *kt = t->k + block;
            const float *vb = t->v + block;
            float s[16] = {0};
            for (int d = 0; d < hd; d++) {
                const float qd = q[d];
                for (int j = 0; j < 16; j++)
                    s[j] += qd * kt[d * 16 + j];
            }
            float block_max = -INFINITY;
            for (int j = 0; j < nk; j++) {
                s[j] *= t->scale;
                block_max = s[j] > block_max ? s[j] : block_max;
            }
            if (block_max > max_score) { /* online softmax: rescale what was summed so far */
                const float factor = expf(max_score - block_max);
                sum *= factor;
                for (int d = 0; d < hd; d++)
                    out[d] *= factor;
                max_score = block_max;
            }
            for (int j = 0; j < nk; j++) {
                const float p = expf(s[j] - max_score);
                sum += p;
                const float *vj = vb + (size_t)j * hd;
                for (int d = 0; d < hd; d++)
                    out[d] += p * vj[d];
            }
        }
        for (int d = 0; d < hd; d++)
            out[d] = (float)(out[d] / sum);
    }
}

/* The same steps with AVX2 + FMA intrinsics. Up to 4 rows at once take their queries against
 * one load of each key and value: a block's 16 scores per row in two registers, their
 * softmax weights by a vector exp (avx2_exp), the running outputs updated 8 dimensions at a
 * time. Keys come in chunks of CPU_ATTN_CHUNK_BLOCKS blocks (64 KB of K and V at head_dim 64)
 * that every row group of up to AVX2_BATCH rows passes over while the chunk is in L1/L2, so a
 * long prefill computes from cache instead of streaming its whole K and V from L3 once per 4
 * rows. Rows past their own last key skip the block. For head_dim a multiple of 8
 * (cpu_attn_run checks). */
#define AVX2_ROWS 4
#define AVX2_BATCH 64

/* e^x, 8 lanes, for x <= 88: 2^n x 2^f with n = round(x log2 e), |f| <= 1/2, and 2^f by its
 * Taylor series in f ln 2 to the 7th power (relative error under 2e-7); 0 below -87 (and for
 * -inf, the score of a key past a row's last). */
__attribute__((target("avx2,fma"))) static inline __m256 avx2_exp(__m256 x)
{
    const __m256 floor_x = _mm256_set1_ps(-87.0f);
    const __m256 under = _mm256_cmp_ps(x, floor_x, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, floor_x), _mm256_set1_ps(88.0f));
    const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
    const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 g = _mm256_mul_ps(_mm256_sub_ps(t, n), _mm256_set1_ps(0.693147180559945309f));
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, g, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, g, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, g, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, g, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, g, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, g, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, g, _mm256_set1_ps(1.0f));
    /* 2^n for n in [-126, 127]: the exponent field alone. */
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                                            _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

__attribute__((target("avx2,fma"))) static inline float avx2_hmax(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

__attribute__((target("avx2,fma"))) static inline float avx2_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Keys [16 b0, 16 b1) against rows r0 .. r0 + rows - 1 of the tile (at most AVX2_ROWS), whose
 * running maxima and sums are max_score[0 .. rows - 1] and sum[0 .. rows - 1] and whose
 * unnormalised outputs are in t->out. With each block b it prefetches block b +
 * CPU_ATTN_CHUNK_BLOCKS when that is below prefetch_to (the first row group of a chunk does,
 * so the next chunk is in L2 when it starts): a sequence's blocks lie anywhere in the arena,
 * where the hardware's prefetchers, which follow addresses within a page, do not find them. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
avx2_rows_blocks(const cpu_attn_tile *t, int r0, const int rows, int b0, int b1, int prefetch_to,
                 float *max_score, float *sum)
{
    const int hd = t->head_dim;
    const float *q[AVX2_ROWS];
    float *out[AVX2_ROWS];
    int n_keys[AVX2_ROWS], most = 0;
    for (int i = 0; i < rows; i++) {
        q[i] = t->q[r0 + i];
        out[i] = t->out[r0 + i];
        n_keys[i] = t->pos[r0 + i] + 1;
        most = n_keys[i] > most ? n_keys[i] : most;
    }
    const __m256 scale = _mm256_set1_ps(t->scale);
    const __m256 lane_lo = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 lane_hi = _mm256_setr_ps(8, 9, 10, 11, 12, 13, 14, 15);
    const __m256 minus_inf = _mm256_set1_ps(-INFINITY);
    for (int b = b0; b < b1 && b * 16 < most; b++) {
        const size_t block = (size_t)t->block_table[b] * hd * 16;
        const float *kt = t->k + block;
        const float *vb = t->v + block;
        if (b + CPU_ATTN_CHUNK_BLOCKS < prefetch_to) { /* the next chunk's block, into L2 */
            const size_t ahead = (size_t)t->block_table[b + CPU_ATTN_CHUNK_BLOCKS] * hd * 16;
            for (int line = 0; line < hd * 16; line += 16) {
                _mm_prefetch((const char *)(t->k + ahead + line), _MM_HINT_T1);
                _mm_prefetch((const char *)(t->v + ahead + line), _MM_HINT_T1);
            }
        }
        __m256 s0[AVX2_ROWS], s1[AVX2_ROWS];
        for (int i = 0; i < AVX2_ROWS; i++)
            s0[i] = s1[i] = _mm256_setzero_ps();
        for (int d = 0; d < hd; d++) {
            const __m256 k0 = _mm256_loadu_ps(kt + d * 16), k1 = _mm256_loadu_ps(kt + d * 16 + 8);
            for (int i = 0; i < rows; i++) {
                const __m256 qd = _mm256_set1_ps(q[i][d]);
                s0[i] = _mm256_fmadd_ps(qd, k0, s0[i]);
                s1[i] = _mm256_fmadd_ps(qd, k1, s1[i]);
            }
        }
        float p[AVX2_ROWS][16];
        int nk[AVX2_ROWS];
        for (int i = 0; i < rows; i++) {
            nk[i] = n_keys[i] - b * 16;
            nk[i] = nk[i] < 0 ? 0 : nk[i] > 16 ? 16 : nk[i];
            if (nk[i] == 0) { /* this row's keys ended in an earlier block */
                _mm256_storeu_ps(p[i], _mm256_setzero_ps());
                _mm256_storeu_ps(p[i] + 8, _mm256_setzero_ps());
                continue;
            }
            __m256 a0 = _mm256_mul_ps(s0[i], scale), a1 = _mm256_mul_ps(s1[i], scale);
            if (nk[i] < 16) { /* keys past the row's last score -inf: weight 0 */
                const __m256 keys = _mm256_set1_ps((float)nk[i]);
                a0 = _mm256_blendv_ps(minus_inf, a0, _mm256_cmp_ps(lane_lo, keys, _CMP_LT_OQ));
                a1 = _mm256_blendv_ps(minus_inf, a1, _mm256_cmp_ps(lane_hi, keys, _CMP_LT_OQ));
            }
            const float block_max = avx2_hmax(_mm256_max_ps(a0, a1));
            if (block_max > max_score[i]) { /* online softmax: rescale the sum so far */
                const float factor = expf(max_score[i] - block_max);
                sum[i] *= factor;
                const __m256 f8 = _mm256_set1_ps(factor);
                for (int d = 0; d < hd; d += 8)
                    _mm256_storeu_ps(out[i] + d, _mm256_mul_ps(_mm256_loadu_ps(out[i] + d), f8));
                max_score[i] = block_max;
            }
            const __m256 m = _mm256_set1_ps(max_score[i]);
            const __m256 p0 = avx2_exp(_mm256_sub_ps(a0, m)), p1 = avx2_exp(_mm256_sub_ps(a1, m));
            sum[i] += avx2_hsum(_mm256_add_ps(p0, p1));
            _mm256_storeu_ps(p[i], p0);
            _mm256_storeu_ps(p[i] + 8, p1);
        }
        const int keys = most - b * 16 < 16 ? most - b * 16 : 16; /* the widest row's */
        for (int d = 0; d < hd; d += 8) {
            __m256 acc[AVX2_ROWS];
            for (int i = 0; i < rows; i++)
                acc[i] = _mm256_loadu_ps(out[i] + d);
            for (int j = 0; j < keys; j++) {
                const __m256 v = _mm256_loadu_ps(vb + (size_t)j * hd + d);
                for (int i = 0; i < rows; i++)
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(p[i][j]), v, acc[i]);
            }
            for (int i = 0; i < rows; i++)
                if (nk[i] > 0)
                    _mm256_storeu_ps(out[i] + d, acc[i]);
        }
    }
}

/* avx2_rows_blocks with the row count a constant, so the compiler keeps each row's scores
 * and accumulators in registers instead of arrays on the stack. */
__attribute__((target("avx2,fma"))) static void avx2_rows_dispatch(const cpu_attn_tile *t, int r0,
                                                                   int rows, int b0, int b1,
                                                                   int prefetch_to,
                                                                   float *max_score, float *sum)
{
    switch (rows) {
    case 4: avx2_rows_blocks(t, r0, 4, b0, b1, prefetch_to, max_score, sum); break;
    case 3: avx2_rows_blocks(t, r0, 3, b0, b1, prefetch_to, max_score, sum); break;
    case 2: avx2_rows_blocks(t, r0, 2, b0, b1, prefetch_to, max_score, sum); break;
    default: avx2_rows_blocks(t, r0, 1, b0, b1, prefetch_to, max_score, sum); break;
    }
}

__attribute__((target("avx2,fma"))) void cpu_attn_tile_avx2(const cpu_attn_tile *t)
{
    const int hd = t->head_dim;
    for (int base = 0; base < t->n_rows; base += AVX2_BATCH) {
        const int n = t->n_rows - base < AVX2_BATCH ? t->n_rows - base : AVX2_BATCH;
        float max_score[AVX2_BATCH], sum[AVX2_BATCH];
        int most = 0;
        for (int i = 0; i < n; i++) {
            max_score[i] = -INFINITY;
            sum[i] = 0;
            const int keys = t->pos[base + i] + 1;
            most = keys > most ? keys : most;
            for (int d = 0; d < hd; d += 8)
                _mm256_storeu_ps(t->out[base + i] + d, _mm256_setzero_ps());
        }
        const int n_blocks = (most + 15) / 16;
        for (int b0 = 0; b0 < n_blocks; b0 += CPU_ATTN_CHUNK_BLOCKS) {
            const int b1 = b0 + CPU_ATTN_CHUNK_BLOCKS < n_blocks ? b0 + CPU_ATTN_CHUNK_BLOCKS
                                                                 : n_blocks;
            for (int r0 = 0; r0 < n; r0 += AVX2_ROWS)
                avx2_rows_dispatch(t, base + r0, n - r0 < AVX2_ROWS ? n - r0 : AVX2_ROWS, b0, b1,
                                   r0 == 0 ? n_blocks : 0, max_score + r0, sum + r0);
        }
        for (int i = 0; i < n; i++) {
            const __m256 inv = _mm256_set1_ps(1.0f / sum[i]);
            float *out = t->out[base + i];
            for (int d = 0; d < hd; d += 8)
                _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_loadu_ps(out + d), inv));
        }
    }
}

bool cpu_avx2_available(void)
{
    __builtin_cpu_init();
    return cpu_isa_cap() >= CPU_ISA_AVX2 && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma");
}

static bool avx512_applies(int head_dim)
{
    return cpu_simd_enabled() &&
           (head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128);
}

size_t cpu_attn_scratch_floats(int n_rows, int head_dim)
{
    /* prescaled q, running max, running sum (16 lanes), output accumulators, p of one
     * block (8 rows x 16), plus alignment slack */
    return (size_t)n_rows * ((size_t)head_dim * 2 + 1 + 16) + 8 * 16 + 64;
}

void cpu_attn_run(const cpu_attn_tile *t, float *scratch)
{
    if (avx512_applies(t->head_dim))
        cpu_attn_tile_avx512(t, scratch);
    else if (t->head_dim % 8 == 0 && cpu_simd_allowed() && cpu_avx2_available())
        cpu_attn_tile_avx2(t);
    else
        cpu_attn_tile_blocked(t);
}
