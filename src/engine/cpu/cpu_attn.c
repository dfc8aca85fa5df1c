#include "engine/cpu/cpu_attn.h"

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
    else
        cpu_attn_tile_generic(t);
}
