/* cpu_attn — causal attention over the paged KV cache.
 *
 * The unit of work is a tile: query rows of one sequence that share one KV head (the
 * kv_mul query heads of a grouped-query attention group, for one or more consecutive
 * tokens). Every row attends to keys 0..pos[row] of its sequence, where keys live in
 * 16-token blocks named by the sequence's block table (cpu_kv.h has the layout). A prefill
 * chunk that starts at context c therefore sees the earlier chunks through the table, and a
 * decode row is a tile of kv_mul rows at one position. K and V are halves (F16, cpu_kv.h),
 * widened to F32 as they are loaded; every sum is in F32 (or double: the naive one).
 *
 * Five implementations, tested against each other (test_cpu_attn):
 *   cpu_attn_naive        one query over contiguous keys: scores, softmax, weighted sum
 *                         (llama2.c; the reference forward uses it)
 *   cpu_attn_tile_generic the paged tile, one key at a time with an online softmax: the
 *                         paged layout's reference, run by the tests only
 *   cpu_attn_tile_blocked the paged tile 16 keys at a time, plain C
 *   cpu_attn_tile_avx512  the paged tile as a flash-attention kernel: up to 8 rows at once
 *                         against 16 keys (one vector), exp2 with the scale folded into Q,
 *                         and the running max only rescaled when a score overtakes it by
 *                         2^8 (a compare, not a reduction, per row and block)
 *   cpu_attn_tile_avx2    the same kernel on 8-lane vectors (cpu_avx2.c): up to 4 rows
 *                         against 16 keys (two vectors), the values added for two rows at
 *                         a time
 * Both fast kernels take keys in chunks of CPU_ATTN_CHUNK_BLOCKS that every row group passes
 * over while the chunk is in cache. cpu_attn_run runs AVX-512 when it is active and applies
 * (head_dim 16, 32, 64 or 128), else AVX2 (head_dim a multiple of 8), else the blocked one. */
#ifndef STALLSCOPE_CPU_ATTN_H
#define STALLSCOPE_CPU_ATTN_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/cpu/cpu_half.h"

/* The first key blocks of the tile a thread computes next (cpu_pool_run_ahead): a decode
 * tile is a single pass over its blocks, too short for the prefetches within it to hide the
 * latency of its first blocks, so the kernels prefetch the next tile's first blocks while
 * they finish this one. n_blocks 0: none. */
typedef struct cpu_attn_ahead {
    const cpu_half *k, *v;      /* as the tile's k and v */
    const int32_t *block_table;
    int n_blocks;               /* its blocks (of its last row) */
} cpu_attn_ahead;

typedef struct cpu_attn_tile {
    const cpu_half *k;          /* this layer's K of the tile's KV head: blocks of (head_dim, 16) */
    const cpu_half *v;          /* its V: blocks of (16, head_dim) */
    int head_dim;
    size_t block_stride;        /* block b starts at b * block_stride in both (cpu_kv's) */
    const int32_t *block_table; /* physical block of keys [16 b, 16 b + 16) */
    int n_rows;
    const float *const *q;      /* (n_rows,) query vectors of head_dim */
    float *const *out;          /* (n_rows,) outputs of head_dim */
    const int32_t *pos;         /* (n_rows,) row r attends to keys 0..pos[r]; non-decreasing */
    float scale;                /* 1 / sqrt(head_dim) */
    cpu_attn_ahead ahead;       /* the next tile's first blocks, to prefetch (or none) */
} cpu_attn_tile;

/* Where the fast kernels' prefetch for block `want` goes, in a pass over the tile's blocks
 * that ends at `end`: that block's K and V, or past the end block want - end of the next
 * tile's (t->ahead, while fewer than `ahead`: 0 for a pass that is not the tile's last), or
 * nowhere (false). */
static inline bool cpu_attn_block_at(const cpu_attn_tile *t, int want, int end, int ahead,
                                     const cpu_half **k, const cpu_half **v)
{
    const size_t stride = t->block_stride;
    const cpu_half *k0 = t->k, *v0 = t->v;
    const int32_t *table = t->block_table;
    if (want >= end) {
        if (want - end >= ahead)
            return false;
        k0 = t->ahead.k;
        v0 = t->ahead.v;
        table = t->ahead.block_table;
        want -= end;
    }
    *k = k0 + (size_t)table[want] * stride;
    *v = v0 + (size_t)table[want] * stride;
    return true;
}

/* out (head_dim) = softmax(q . k_j * scale over j < n_keys) . v_j, with key j at
 * k + j * stride (and v likewise). att: n_keys floats of scratch. */
void cpu_attn_naive(float *out, const float *q, const float *k, const float *v, int n_keys,
                    int stride, int head_dim, float scale, float *att);

void cpu_attn_tile_generic(const cpu_attn_tile *t);
/* The same, 16 keys at a time, in plain C (vectorizable loops). */
void cpu_attn_tile_blocked(const cpu_attn_tile *t);
/* Floats of scratch the fast kernels and cpu_attn_run need for a tile. */
size_t cpu_attn_scratch_floats(int n_rows, int head_dim);
/* The flash kernels: AVX2 (head_dim a multiple of 8; only where cpu_avx2_available()) and
 * AVX-512 (head_dim 16, 32, 64 or 128; only where cpu_simd_available()). */
void cpu_attn_tile_avx2(const cpu_attn_tile *t, float *scratch);
void cpu_attn_tile_avx512(const cpu_attn_tile *t, float *scratch);
/* The fast kernel when it applies, else the generic one. */
void cpu_attn_run(const cpu_attn_tile *t, float *scratch);

/* Key blocks per chunk of the AVX-512 and AVX2 kernels: a chunk of K and V stays in L2 (32
 * KB of halves at head_dim 32; the AVX2 kernel's widened copy twice that) while every row
 * group of the tile passes over it. 32 blocks took 2-3 % off a prefill of 8,192 tokens
 * against 8, on both instruction sets. */
#define CPU_ATTN_CHUNK_BLOCKS 32

#endif
