#include "engine/cpu/cpu_kv.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/rng.h"
#include "engine/cpu/cpu_kernels.h"

double cpu_kv_bytes(const cpu_config *c, int64_t n_blocks)
{
    return 2.0 * c->n_layers * (double)n_blocks * c->n_kv_heads * c->head_dim * CPU_KV_BLOCK *
           CPU_KV_ELEM_BYTES;
}

/* Bytes of one layer's pool: every KV head's K and V of every block, in either layout. */
static size_t layer_bytes(const cpu_kv *kv)
{
    return 2 * (size_t)kv->n_kv_heads * (size_t)kv->n_blocks * kv->block_elems * sizeof(cpu_half);
}

cpu_kv_layout cpu_kv_layout_for_isa(void)
{
    return cpu_isa_active() == CPU_ISA_AVX512 ? CPU_KV_BLOCK_MAJOR : CPU_KV_HEAD_MAJOR;
}

const char *cpu_kv_layout_name(cpu_kv_layout layout)
{
    return layout == CPU_KV_BLOCK_MAJOR ? "block-major" : "head-major";
}

int cpu_kv_init(cpu_kv *kv, const cpu_config *c, int64_t n_blocks, char *err)
{
    return cpu_kv_init_layout(kv, c, n_blocks, cpu_kv_layout_for_isa(), err);
}

int cpu_kv_init_layout(cpu_kv *kv, const cpu_config *c, int64_t n_blocks, cpu_kv_layout layout,
                       char *err)
{
    memset(kv, 0, sizeof *kv);
    if (n_blocks < 1 || n_blocks > INT32_MAX)
        return err_set(err, "KV cache of %lld blocks is out of range [1, 2^31)",
                       (long long)n_blocks);
    kv->n_layers = c->n_layers;
    kv->n_kv_heads = c->n_kv_heads;
    kv->head_dim = c->head_dim;
    kv->n_blocks = n_blocks;
    kv->layout = layout;
    kv->block_elems = (size_t)c->head_dim * CPU_KV_BLOCK;
    const size_t heads = (size_t)c->n_kv_heads;
    if (layout == CPU_KV_BLOCK_MAJOR) {
        kv->block_stride = 2 * heads * kv->block_elems;
        kv->head_stride = 2 * kv->block_elems;
        kv->v_offset = kv->block_elems;
    } else {
        kv->block_stride = kv->block_elems;
        kv->head_stride = (size_t)n_blocks * kv->block_elems;
        kv->v_offset = heads * kv->head_stride;
    }
    kv->layers = calloc((size_t)c->n_layers, sizeof *kv->layers);
    kv->free_blocks = malloc((size_t)n_blocks * sizeof *kv->free_blocks);
    kv->free_at = malloc((size_t)n_blocks * sizeof *kv->free_at);
    if (!kv->layers || !kv->free_blocks || !kv->free_at)
        goto oom;
    for (int l = 0; l < c->n_layers; l++) {
        /* Page-aligned, so that a block of a page's size is one page; 64-byte aligned at
         * least for the attention kernel's aligned loads. Untouched pages cost nothing until
         * a block is first written. */
        if (posix_memalign((void **)&kv->layers[l], 4096, layer_bytes(kv)) != 0)
            goto oom;
    }
    for (int64_t i = 0; i < n_blocks; i++) {
        kv->free_blocks[i] = (int32_t)(n_blocks - 1 - i); /* block 0 on top */
        kv->free_at[n_blocks - 1 - i] = (int32_t)i;
    }
    kv->n_free = n_blocks;
    return 0;
oom:
    cpu_kv_free(kv);
    return err_set(err, "out of memory for a KV cache of %lld blocks (%.1f MB)",
                   (long long)n_blocks, cpu_kv_bytes(c, n_blocks) / 1e6);
}

double cpu_kv_touch(cpu_kv *kv)
{
    for (int l = 0; l < kv->n_layers; l++)
        memset(kv->layers[l], 0, layer_bytes(kv));
    kv->n_touched = kv->n_blocks;
    return kv->n_layers * (double)layer_bytes(kv);
}

void cpu_kv_free(cpu_kv *kv)
{
    for (int l = 0; kv->layers && l < kv->n_layers; l++)
        free(kv->layers[l]);
    free(kv->layers);
    free(kv->free_blocks);
    free(kv->free_at);
    memset(kv, 0, sizeof *kv);
}

/* Room in s's table for `needed` blocks. */
static int grow_table(cpu_kv_seq *s, int needed, char *err)
{
    if (needed <= s->cap_blocks)
        return 0;
    int cap = s->cap_blocks ? s->cap_blocks : 8;
    while (cap < needed)
        cap *= 2;
    int32_t *grown = realloc(s->blocks, (size_t)cap * sizeof *grown);
    if (!grown)
        return err_set(err, "out of memory for a block table of %d blocks", cap);
    s->blocks = grown;
    s->cap_blocks = cap;
    return 0;
}

/* A free block off the stack: `want` if it is free and has been used before (taken from its
 * place, the top moved there), else the top. The top is a used block whenever one is free
 * (never-used ones lie below every freed one), else the lowest never-used id. */
static int32_t take_block(cpu_kv *kv, int32_t want)
{
    const int32_t top = kv->free_blocks[kv->n_free - 1];
    int32_t block = top;
    if (want >= 0 && want < kv->n_touched && kv->free_at[want] >= 0) {
        block = want;
        kv->free_blocks[kv->free_at[want]] = top;
        kv->free_at[top] = kv->free_at[want];
    }
    kv->n_free--;
    kv->free_at[block] = -1;
    if (block >= kv->n_touched)
        kv->n_touched = block + 1;
    return block;
}

int cpu_kv_reserve(cpu_kv *kv, cpu_kv_seq *s, int n_tokens, char *err)
{
    const int needed = (n_tokens + CPU_KV_BLOCK - 1) / CPU_KV_BLOCK;
    if (needed <= s->n_blocks)
        return 0;
    if (grow_table(s, needed, err) != 0)
        return -1;
    if (needed - s->n_blocks > kv->n_free)
        return err_set(err, "KV cache exhausted: %d more blocks wanted, %lld free of %lld",
                       needed - s->n_blocks, (long long)kv->n_free, (long long)kv->n_blocks);
    while (s->n_blocks < needed) {
        const int32_t block = take_block(kv, s->n_blocks ? s->blocks[s->n_blocks - 1] + 1 : -1);
        /* The attention kernel multiplies whole blocks of V by probabilities that are 0 past
         * the last key: never-written slots must hold numbers, not NaN bit patterns. */
        for (int l = 0; l < kv->n_layers; l++)
            for (int h = 0; h < kv->n_kv_heads; h++)
                memset((cpu_half *)cpu_kv_head_v(kv, l, h) + (size_t)block * kv->block_stride,
                       0, kv->block_elems * sizeof(cpu_half));
        s->blocks[s->n_blocks++] = block;
    }
    return 0;
}

void cpu_kv_release(cpu_kv *kv, cpu_kv_seq *s)
{
    cpu_kv_release_from(kv, s, 0);
}

void cpu_kv_release_from(cpu_kv *kv, cpu_kv_seq *s, int first)
{
    while (s->n_blocks > first)
        cpu_kv_give_back(kv, s->blocks[--s->n_blocks]);
    s->n_blocks = 0;
}

int cpu_kv_append(cpu_kv_seq *s, int32_t block, char *err)
{
    if (grow_table(s, s->n_blocks + 1, err) != 0)
        return -1;
    s->blocks[s->n_blocks++] = block;
    return 0;
}

void cpu_kv_give_back(cpu_kv *kv, int32_t block)
{
    kv->free_at[block] = (int32_t)kv->n_free;
    kv->free_blocks[kv->n_free++] = block;
}

void cpu_kv_shuffle_free(cpu_kv *kv, uint64_t seed)
{
    uint64_t state = seed;
    rng_shuffle_i32(&state, kv->free_blocks, kv->n_free);
    kv->n_touched = kv->n_blocks; /* never-used blocks no longer lie in id order */
    for (int64_t i = 0; i < kv->n_free; i++)
        kv->free_at[kv->free_blocks[i]] = (int32_t)i;
}

void cpu_kv_seq_free(cpu_kv_seq *s)
{
    free(s->blocks);
    memset(s, 0, sizeof *s);
}

const cpu_half *cpu_kv_head_k(const cpu_kv *kv, int layer, int kv_head)
{
    return kv->layers[layer] + (size_t)kv_head * kv->head_stride;
}

const cpu_half *cpu_kv_head_v(const cpu_kv *kv, int layer, int kv_head)
{
    return cpu_kv_head_k(kv, layer, kv_head) + kv->v_offset;
}

void cpu_kv_write_head(cpu_kv *kv, int layer, const cpu_kv_seq *s, int pos, int kv_head,
                       const float *k, const float *v)
{
    const int hd = kv->head_dim;
    const size_t block = (size_t)s->blocks[pos / CPU_KV_BLOCK] * kv->block_stride;
    const int slot = pos % CPU_KV_BLOCK;
    cpu_half *kt = (cpu_half *)cpu_kv_head_k(kv, layer, kv_head) + block; /* (head_dim, 16) */
    cpu_half *vr = kt + kv->v_offset + (size_t)slot * hd;
    cpu_half kh[256]; /* the head's K, rounded, then placed one element per row of 16 */
    for (int d0 = 0; d0 < hd; d0 += 256) {
        const int n = hd - d0 < 256 ? hd - d0 : 256;
        cpu_halves_from_floats(kh, k + d0, n);
        for (int d = 0; d < n; d++)
            kt[(d0 + d) * CPU_KV_BLOCK + slot] = kh[d];
    }
    cpu_halves_from_floats(vr, v, hd);
}

void cpu_kv_write(cpu_kv *kv, int layer, const cpu_kv_seq *s, int pos, const float *k,
                  const float *v)
{
    for (int h = 0; h < kv->n_kv_heads; h++)
        cpu_kv_write_head(kv, layer, s, pos, h, k + (size_t)h * kv->head_dim,
                          v + (size_t)h * kv->head_dim);
}
