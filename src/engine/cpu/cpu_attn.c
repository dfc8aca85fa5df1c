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
            const size_t block = (size_t)t->block_table[j / 16] * t->block_stride;
            const int slot = j % 16;
            const cpu_half *kt = t->k + block;
            const cpu_half *vb = t->v + block;
            float score = 0;
            for (int d = 0; d < hd; d++)
                score += q[d] * cpu_half_to_float(kt[d * 16 + slot]);
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
                out[d] += p * cpu_half_to_float(vb[slot * hd + d]);
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
            const size_t block = (size_t)t->block_table[b] * t->block_stride;
            const cpu_half *kt = t->k + block;
            const cpu_half *vb = t->v + block;
            float s[16] = {0};
            for (int d = 0; d < hd; d++) {
                const float qd = q[d];
                for (int j = 0; j < 16; j++)
                    s[j] += qd * cpu_half_to_float(kt[d * 16 + j]);
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
                const cpu_half *vj = vb + (size_t)j * hd;
                for (int d = 0; d < hd; d++)
                    out[d] += p * cpu_half_to_float(vj[d]);
            }
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
    /* prescaled q, running max, running sum (16 lanes), output accumulators, the block
     * buffers (AVX-512: p of a pair of blocks, 8 rows x 32; AVX2: p of two blocks and the
     * scores of one, 6 rows x 16 each, and a chunk's keys and values widened to F32), plus the
     * alignment slack of two buffers */
    return (size_t)n_rows * ((size_t)head_dim * 2 + 1 + 16) + 3 * 8 * 16 +
           2 * (size_t)CPU_ATTN_CHUNK_BLOCKS * 16 * head_dim + 2 * 16;
}

void cpu_attn_run(const cpu_attn_tile *t, float *scratch)
{
    if (avx512_applies(t->head_dim))
        cpu_attn_tile_avx512(t, scratch);
    else if (t->head_dim % 8 == 0 && cpu_isa_active() >= CPU_ISA_AVX2)
        cpu_attn_tile_avx2(t, scratch);
    else
        cpu_attn_tile_blocked(t);
}
