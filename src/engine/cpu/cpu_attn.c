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

/* The same steps with AVX2 + FMA intrinsics, up to 4 rows at once (their queries against one
 * load of each key and value): a block's 16 scores per row in two registers, the running
 * outputs updated 8 dimensions at a time. Rows past their own last key skip the block. For
 * head_dim a multiple of 8 (cpu_attn_run checks). */
#define AVX2_ROWS 4
__attribute__((target("avx2,fma"))) void cpu_attn_tile_avx2(const cpu_attn_tile *t)
{
    const int hd = t->head_dim;
    for (int r0 = 0; r0 < t->n_rows; r0 += AVX2_ROWS) {
        const int rows = t->n_rows - r0 < AVX2_ROWS ? t->n_rows - r0 : AVX2_ROWS;
        float max_score[AVX2_ROWS], sum[AVX2_ROWS];
        int n_keys[AVX2_ROWS];
        const float *q[AVX2_ROWS];
        float *out[AVX2_ROWS];
        int most = 0;
        for (int i = 0; i < rows; i++) {
            q[i] = t->q[r0 + i];
            out[i] = t->out[r0 + i];
            max_score[i] = -INFINITY;
            sum[i] = 0;
            n_keys[i] = t->pos[r0 + i] + 1;
            most = n_keys[i] > most ? n_keys[i] : most;
            for (int d = 0; d < hd; d += 8)
                _mm256_storeu_ps(out[i] + d, _mm256_setzero_ps());
        }
        for (int b = 0; b * 16 < most; b++) {
            const size_t block = (size_t)t->block_table[b] * hd * 16;
            const float *kt = t->k + block;
            const float *vb = t->v + block;
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
            const __m256 scale = _mm256_set1_ps(t->scale);
            for (int i = 0; i < rows; i++) {
                nk[i] = n_keys[i] - b * 16;
                nk[i] = nk[i] < 0 ? 0 : nk[i] > 16 ? 16 : nk[i];
                if (nk[i] == 0)
                    continue; /* this row's keys ended in an earlier block */
                float sc[16];
                _mm256_storeu_ps(sc, _mm256_mul_ps(s0[i], scale));
                _mm256_storeu_ps(sc + 8, _mm256_mul_ps(s1[i], scale));
                float block_max = -INFINITY;
                for (int j = 0; j < nk[i]; j++)
                    block_max = sc[j] > block_max ? sc[j] : block_max;
                if (block_max > max_score[i]) { /* online softmax: rescale the sum so far */
                    const float factor = expf(max_score[i] - block_max);
                    sum[i] *= factor;
                    const __m256 f8 = _mm256_set1_ps(factor);
                    for (int d = 0; d < hd; d += 8)
                        _mm256_storeu_ps(out[i] + d, _mm256_mul_ps(_mm256_loadu_ps(out[i] + d), f8));
                    max_score[i] = block_max;
                }
                for (int j = 0; j < 16; j++) {
                    p[i][j] = j < nk[i] ? expf(sc[j] - max_score[i]) : 0.0f;
                    sum[i] += p[i][j];
                }
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
        for (int i = 0; i < rows; i++) {
            const __m256 inv = _mm256_set1_ps(1.0f / sum[i]);
            for (int d = 0; d < hd; d += 8)
                _mm256_storeu_ps(out[i] + d, _mm256_mul_ps(_mm256_loadu_ps(out[i] + d), inv));
        }
    }
}

bool cpu_avx2_available(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
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
