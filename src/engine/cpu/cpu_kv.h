/* cpu_kv — the paged KV cache: a pool of 16-token blocks and each sequence's block table
 * (vLLM's PagedAttention layout, block ids shared by all layers). Its elements are IEEE half
 * precision (F16, cpu_half.h; llama.cpp's default KV type): cpu_kv_write rounds the F32 K
 * and V to nearest, and the attention kernels widen them back to F32 as they load them, so a
 * decode step reads half the bytes an F32 cache would.
 *
 * Per layer l, one pool of n_blocks blocks of 16 tokens for every KV head's K and V:
 *   K of a block and head (head_dim, 16)  transposed inside a block: the 16 keys' element d
 *                                         form one vector (widened)
 *   V of a block and head (16, head_dim)  row-major: token j's values in a row
 * in one of two layouts (cpu_kv_layout), each the faster for its kernels (the figures:
 * docs/results/cpu-engine-isa.md):
 *   CPU_KV_HEAD_MAJOR   all K, then all V; in each, head by head, block by block: one head's
 *                       blocks follow each other (block_stride = block_elems), so a tile
 *                       (one head) streams compact K and V. The AVX2 and plain C kernels'.
 *   CPU_KV_BLOCK_MAJOR  block by block; in each, head by head, its K then its V: a block's K
 *                       and V of every head are one span (block_stride = 2 n_kv_heads
 *                       block_elems; 4 KB, a page, for head_dim 32 and 2 KV heads), so a
 *                       decode tile reads a block's K and V from one page and the tile of the
 *                       block's other head the same page. The AVX-512 kernel's: on blocks
 *                       scattered over the arena its decode attention reads them faster.
 * Either way head h's K of block b is at layers[l] + h * head_stride + b * block_stride, and
 * its V v_offset further.
 * Token at position p of a sequence lives in block table[p / 16], slot p % 16.
 * The pool is allocated once and its pages become resident as blocks are first used
 * (cpu_kv_touch writes them all at once, for a benchmark or a probe that must not pay
 * first-use page faults). Free blocks are a stack, so recently freed (cache-warm) blocks are
 * reused first, except that a sequence that grows takes the block right after its last one
 * when that block is free and has been used before: a prompt's blocks then follow each
 * other, and a decode step reads them as one stream, which the hardware prefetcher follows,
 * rather than as 1 KB pieces from anywhere, which it does not (a core reads those at a
 * fraction of the streaming rate: bench_cpu's scattered-block bandwidth). Sequences that
 * grow together still interleave their blocks.
 * A never-used block is handed out only when no used one is free, lowest id first, so the
 * blocks ever used are [0, n_touched) and n_touched is the most blocks ever in use at once:
 * the resident part of a large arena is what the traffic needed, not all of it. (Memory
 * written once and then left alone is what a host's proactive reclaim scans, and pages it
 * cannot reclaim cost their process time at each pass: an arena written whole at start made
 * such a host stall the server about twice a second, docs/results/warm-start.md.)
 * A table may name blocks it does not own (a prefix cache's shared blocks, exec_cpu.c):
 * cpu_kv_append adds one, cpu_kv_release_from gives back only the table's own ones. */
#ifndef STALLSCOPE_CPU_KV_H
#define STALLSCOPE_CPU_KV_H
#include <stddef.h>
#include <stdint.h>

#include "engine/cpu/cpu_half.h"
#include "engine/cpu/cpu_model.h"

#define CPU_KV_BLOCK 16
/* Bytes of one cached element (F16): the cost model's kv_bytes_per_elem for the cpu device. */
#define CPU_KV_ELEM_BYTES ((int)sizeof(cpu_half))

typedef enum cpu_kv_layout { CPU_KV_HEAD_MAJOR, CPU_KV_BLOCK_MAJOR } cpu_kv_layout;

typedef struct cpu_kv {
    int n_layers;
    int n_kv_heads;
    int head_dim;
    int64_t n_blocks;
    cpu_kv_layout layout;
    size_t block_elems;   /* head_dim * 16: one block of one head's K (or V) */
    size_t block_stride;  /* halves from a block of a head's K (or V) to the next block */
    size_t head_stride;   /* from a head's K to the next head's */
    size_t v_offset;      /* from a head's K to its V */
    cpu_half **layers;    /* (n_layers,) pools, layout above */
    int32_t *free_blocks; /* stack of free block ids */
    int64_t n_free;
    int32_t *free_at;     /* (n_blocks,) each block's place in free_blocks; -1: in use */
    int64_t n_touched;    /* blocks [0, n_touched) have been used (resident); the others
                           * are free, at the bottom of the stack in id order */
} cpu_kv;

typedef struct cpu_kv_seq {
    int32_t *blocks; /* block table */
    int n_blocks;
    int cap_blocks;
} cpu_kv_seq;

/* The pool in the layout of the active kernels (cpu_kv_layout_for_isa), or in `layout`. */
int cpu_kv_init(cpu_kv *kv, const cpu_config *c, int64_t n_blocks, char *err);
int cpu_kv_init_layout(cpu_kv *kv, const cpu_config *c, int64_t n_blocks, cpu_kv_layout layout,
                       char *err);
/* Block-major when the AVX-512 kernels are active (cpu_isa_active), else head-major. */
cpu_kv_layout cpu_kv_layout_for_isa(void);
const char *cpu_kv_layout_name(cpu_kv_layout layout);
void cpu_kv_free(cpu_kv *kv);
/* Write every byte of the pool (zeros), so no page of it is first touched inside a step;
 * the bytes touched. Every block then counts as used. Call it before any block holds KV. */
double cpu_kv_touch(cpu_kv *kv);
/* Bytes the pool occupies when every block is in use (of n_blocks = kv->n_touched: the
 * bytes resident so far). */
double cpu_kv_bytes(const cpu_config *c, int64_t n_blocks);

/* Grow s's table to cover n_tokens positions. 0, or -1 with err (pool exhausted, memory). */
int cpu_kv_reserve(cpu_kv *kv, cpu_kv_seq *s, int n_tokens, char *err);
/* Return all of s's blocks to the pool (the table's memory is kept for reuse). */
void cpu_kv_release(cpu_kv *kv, cpu_kv_seq *s);
/* Empty s's table, returning only blocks [first, n_blocks) to the pool: the first ones
 * belong to someone else (shared). */
void cpu_kv_release_from(cpu_kv *kv, cpu_kv_seq *s, int first);
/* Append a block the caller holds elsewhere (a shared, full one) to s's table. 0, or -1
 * with err (memory). */
int cpu_kv_append(cpu_kv_seq *s, int32_t block, char *err);
/* Return one block that no table names any more to the pool. */
void cpu_kv_give_back(cpu_kv *kv, int32_t block);
/* Put the free blocks in an order drawn from seed, as a server that has run a while leaves
 * them (a benchmark's scattered arena). Every block then counts as used (n_touched). */
void cpu_kv_shuffle_free(cpu_kv *kv, uint64_t seed);
/* Free the table's memory (after release). */
void cpu_kv_seq_free(cpu_kv_seq *s);

/* One layer's K (or V) of one KV head: block b's (head_dim, 16) (V: (16, head_dim)) starts
 * at b * kv->block_stride, in either layout. */
const cpu_half *cpu_kv_head_k(const cpu_kv *kv, int layer, int kv_head);
const cpu_half *cpu_kv_head_v(const cpu_kv *kv, int layer, int kv_head);

/* Store the K and V vectors (kv_dim = n_kv_heads * head_dim each) of position pos, each
 * element rounded to the nearest half. */
void cpu_kv_write(cpu_kv *kv, int layer, const cpu_kv_seq *s, int pos, const float *k,
                  const float *v);
/* The same for one KV head: k and v its head_dim elements. */
void cpu_kv_write_head(cpu_kv *kv, int layer, const cpu_kv_seq *s, int pos, int kv_head,
                       const float *k, const float *v);

#endif
