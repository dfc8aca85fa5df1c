/* engine/cpu/cpu_kv: the block pool's free stack. A sequence that grows takes the block right
 * after its last one when that one is free and used before (its blocks then form runs), else
 * the stack's top (the block freed last); a never-used block only when no used one is free,
 * so the blocks ever used are as many as were ever in use at once; blocks are never handed
 * out twice, and none is lost. And the two layouts: where each head's K and V of a block
 * lie. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "engine/cpu/cpu_kv.h"

static const cpu_config CONFIG = {.dim = 16, .hidden_dim = 16, .n_layers = 2, .n_heads = 2,
                                  .n_kv_heads = 1, .head_dim = 8, .vocab_size = 16,
                                  .max_seq_len = 4096};

static void init(cpu_kv *kv, int64_t n_blocks)
{
    char err[ERR_LEN];
    assert_int_equal(cpu_kv_init(kv, &CONFIG, n_blocks, err), 0);
}

static void reserve(cpu_kv *kv, cpu_kv_seq *s, int n_tokens)
{
    char err[ERR_LEN];
    if (cpu_kv_reserve(kv, s, n_tokens, err) != 0)
        fail_msg("cpu_kv_reserve: %s", err);
}

/* Every block is either free (once, at the place free_at says) or in exactly one table. */
static void assert_consistent(const cpu_kv *kv, cpu_kv_seq *const *seqs, int n_seqs)
{
    int owners[256] = {0};
    assert_true(kv->n_blocks <= 256);
    for (int64_t i = 0; i < kv->n_free; i++) {
        const int32_t b = kv->free_blocks[i];
        assert_int_equal(kv->free_at[b], i);
        owners[b]++;
    }
    for (int s = 0; s < n_seqs; s++)
        for (int i = 0; i < seqs[s]->n_blocks; i++) {
            assert_int_equal(kv->free_at[seqs[s]->blocks[i]], -1);
            owners[seqs[s]->blocks[i]]++;
        }
    for (int64_t b = 0; b < kv->n_blocks; b++)
        assert_int_equal(owners[b], 1);
}

static void test_prompt_blocks_form_a_run(void **state)
{
    (void)state;
    cpu_kv kv;
    init(&kv, 64);
    cpu_kv_shuffle_free(&kv, 3);
    cpu_kv_seq a = {0};
    const int32_t top = kv.free_blocks[kv.n_free - 1];
    reserve(&kv, &a, 5 * CPU_KV_BLOCK);
    assert_int_equal(a.blocks[0], top); /* the first from the top (freed last) */
    int run = 1;
    while (run < a.n_blocks && a.blocks[run] == a.blocks[run - 1] + 1)
        run++;
    /* a run up to the pool's end, then the top again */
    assert_true(run == a.n_blocks || a.blocks[run - 1] == kv.n_blocks - 1);
    cpu_kv_seq *all[] = {&a};
    assert_consistent(&kv, all, 1);
    cpu_kv_release(&kv, &a);
    assert_int_equal(kv.n_free, kv.n_blocks);
    assert_consistent(&kv, all, 0);
    cpu_kv_seq_free(&a);
    cpu_kv_free(&kv);
}

static void test_growth_skips_taken_neighbours(void **state)
{
    (void)state;
    cpu_kv kv;
    init(&kv, 32);
    /* a fresh pool: block 0 on top; two sequences growing in turn interleave */
    cpu_kv_seq a = {0}, b = {0};
    for (int upto = CPU_KV_BLOCK; upto <= 4 * CPU_KV_BLOCK; upto += CPU_KV_BLOCK) {
        reserve(&kv, &a, upto);
        reserve(&kv, &b, upto);
    }
    const int32_t want_a[] = {0, 2, 4, 6}, want_b[] = {1, 3, 5, 7};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(a.blocks[i], want_a[i]);
        assert_int_equal(b.blocks[i], want_b[i]);
    }
    cpu_kv_seq *all[] = {&a, &b};
    assert_consistent(&kv, all, 2);
    /* b's blocks back: a's next block is the one after its last, now free */
    cpu_kv_release(&kv, &b);
    reserve(&kv, &a, 5 * CPU_KV_BLOCK);
    assert_int_equal(a.blocks[4], 7);
    assert_consistent(&kv, all, 2);
    cpu_kv_release(&kv, &a);
    assert_consistent(&kv, all, 2);
    assert_int_equal(kv.n_free, kv.n_blocks);
    cpu_kv_seq_free(&a);
    cpu_kv_seq_free(&b);
    cpu_kv_free(&kv);
}

static void test_exhausted_pool_is_an_error(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    cpu_kv kv;
    init(&kv, 4);
    cpu_kv_seq a = {0};
    assert_int_equal(cpu_kv_reserve(&kv, &a, 5 * CPU_KV_BLOCK, err), -1);
    assert_non_null(strstr(err, "KV cache exhausted"));
    assert_int_equal(kv.n_free, 4); /* nothing taken */
    reserve(&kv, &a, 4 * CPU_KV_BLOCK);
    assert_int_equal(kv.n_free, 0);
    cpu_kv_seq *all[] = {&a};
    assert_consistent(&kv, all, 1);
    cpu_kv_release(&kv, &a);
    cpu_kv_seq_free(&a);
    cpu_kv_free(&kv);
}

static void test_shuffle_keeps_every_block(void **state)
{
    (void)state;
    cpu_kv kv;
    init(&kv, 200);
    cpu_kv_seq a = {0}, b = {0};
    reserve(&kv, &a, 30 * CPU_KV_BLOCK);
    cpu_kv_shuffle_free(&kv, 11);
    cpu_kv_seq *all[] = {&a, &b};
    assert_consistent(&kv, all, 2);
    int in_order = 0;
    for (int64_t i = 1; i < kv.n_free; i++)
        in_order += kv.free_blocks[i] == kv.free_blocks[i - 1] - 1;
    assert_true(in_order < kv.n_free / 4); /* shuffled, not the fresh descending stack */
    for (int upto = CPU_KV_BLOCK; upto <= 40 * CPU_KV_BLOCK; upto += CPU_KV_BLOCK)
        reserve(&kv, &b, upto);
    assert_consistent(&kv, all, 2);
    cpu_kv_release(&kv, &a);
    cpu_kv_release(&kv, &b);
    assert_consistent(&kv, all, 2);
    assert_int_equal(kv.n_free, kv.n_blocks);
    cpu_kv_seq_free(&a);
    cpu_kv_seq_free(&b);
    cpu_kv_free(&kv);
}

/* A fresh pool: the blocks ever used ([0, n_touched)) are as many as were ever in use at
 * once, through churn of sequences that start, grow and end at different times; and a
 * sequence that grows at the edge of the used blocks takes a freed one rather than a new
 * one past the edge. */
static void test_used_blocks_are_the_peak(void **state)
{
    (void)state;
    cpu_kv kv;
    init(&kv, 256);
    cpu_kv_seq a = {0}, b = {0};
    reserve(&kv, &a, 3 * CPU_KV_BLOCK); /* 0 1 2 */
    reserve(&kv, &b, 2 * CPU_KV_BLOCK); /* 3 4 */
    assert_int_equal(kv.n_touched, 5);
    cpu_kv_release(&kv, &a);
    reserve(&kv, &b, 3 * CPU_KV_BLOCK); /* 5 is free but never used: one of a's instead */
    assert_true(b.blocks[2] < 3);
    assert_int_equal(kv.n_touched, 5);
    cpu_kv_release(&kv, &b);

    enum { N_SEQS = 6 };
    cpu_kv_seq seqs[N_SEQS] = {{0}};
    cpu_kv_seq *all[N_SEQS];
    int len[N_SEQS] = {0}, goal[N_SEQS] = {0};
    for (int i = 0; i < N_SEQS; i++)
        all[i] = &seqs[i];
    int64_t peak = kv.n_touched; /* a and b's 5 */
    uint32_t x = 12345;
    for (int step = 0; step < 2000; step++) {
        for (int i = 0; i < N_SEQS; i++) {
            if (len[i] == 0) {
                x = x * 1664525u + 1013904223u;
                goal[i] = 1 + (int)((x >> 8) % (20 * CPU_KV_BLOCK));
            }
            len[i] += 1 + (i + step) % 5; /* they grow at different rates */
            if (len[i] >= goal[i]) {
                cpu_kv_release(&kv, &seqs[i]);
                len[i] = 0;
                continue;
            }
            reserve(&kv, &seqs[i], len[i]);
            const int64_t in_use = kv.n_blocks - kv.n_free;
            peak = in_use > peak ? in_use : peak;
            assert_int_equal(kv.n_touched, peak);
        }
    }
    assert_true(peak > 20 && peak < kv.n_blocks); /* churn that grew the used set, in room */
    assert_consistent(&kv, all, N_SEQS);
    for (int i = 0; i < N_SEQS; i++) {
        for (int j = 0; j < seqs[i].n_blocks; j++)
            assert_true(seqs[i].blocks[j] < kv.n_touched);
        cpu_kv_release(&kv, &seqs[i]);
        cpu_kv_seq_free(&seqs[i]);
    }
    assert_int_equal(kv.n_free, kv.n_blocks);
    cpu_kv_seq_free(&a);
    cpu_kv_seq_free(&b);
    cpu_kv_free(&kv);
}

/* The layouts cpu_kv.h states, for a model of ref-256's KV shape (head_dim 32, 2 KV heads),
 * each layer's pool starting on a page: block-major, a block's K and V of both heads one
 * 4 KB span, block after block; head-major, one head's K blocks one after the other, every
 * head's K before any V. Either way, what cpu_kv_write stores for a position lands in its
 * block of its head, K transposed, V in a row. */
static void check_layout(cpu_kv_layout layout)
{
    const cpu_config c = {.dim = 64, .hidden_dim = 64, .n_layers = 2, .n_heads = 8,
                          .n_kv_heads = 2, .head_dim = 32, .vocab_size = 16,
                          .max_seq_len = 4096};
    enum { BLOCKS = 8 };
    char err[ERR_LEN];
    cpu_kv kv;
    assert_int_equal(cpu_kv_init_layout(&kv, &c, BLOCKS, layout, err), 0);
    assert_int_equal(kv.layout, layout);
    const size_t be = 32 * CPU_KV_BLOCK;
    assert_int_equal(kv.block_elems, be);
    for (int l = 0; l < c.n_layers; l++) {
        assert_int_equal((uintptr_t)kv.layers[l] % 4096, 0);
        for (int h = 0; h < c.n_kv_heads; h++) {
            const cpu_half *k = cpu_kv_head_k(&kv, l, h), *v = cpu_kv_head_v(&kv, l, h);
            if (layout == CPU_KV_BLOCK_MAJOR) {
                assert_int_equal(kv.block_stride * sizeof(cpu_half), 4096);
                assert_ptr_equal(k, kv.layers[l] + (size_t)h * 2 * be);
                assert_ptr_equal(v, k + be);
            } else {
                assert_int_equal(kv.block_stride, be);
                assert_ptr_equal(k, kv.layers[l] + (size_t)h * BLOCKS * be);
                assert_ptr_equal(v, kv.layers[l] + (size_t)(2 + h) * BLOCKS * be);
            }
        }
    }
    cpu_kv_seq s = {0};
    assert_int_equal(cpu_kv_reserve(&kv, &s, 3 * CPU_KV_BLOCK, err), 0);
    float k[64], v[64];
    for (int i = 0; i < 64; i++) {
        k[i] = (float)(i + 1);
        v[i] = (float)(-i - 1);
    }
    const int pos = 2 * CPU_KV_BLOCK + 5; /* block s.blocks[2], slot 5 */
    cpu_kv_write(&kv, 1, &s, pos, k, v);
    const size_t at = (size_t)s.blocks[2] * kv.block_stride;
    for (int h = 0; h < 2; h++)
        for (int d = 0; d < 32; d++) {
            const cpu_half *kb = cpu_kv_head_k(&kv, 1, h) + at, *vb = cpu_kv_head_v(&kv, 1, h) + at;
            assert_true(cpu_half_to_float(kb[d * CPU_KV_BLOCK + 5]) == k[h * 32 + d]);
            assert_true(cpu_half_to_float(vb[5 * 32 + d]) == v[h * 32 + d]);
        }
    cpu_kv_release(&kv, &s);
    cpu_kv_seq_free(&s);
    cpu_kv_free(&kv);
}

static void test_block_major_layout(void **state)
{
    (void)state;
    check_layout(CPU_KV_BLOCK_MAJOR);
}

static void test_head_major_layout(void **state)
{
    (void)state;
    check_layout(CPU_KV_HEAD_MAJOR);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompt_blocks_form_a_run),
        cmocka_unit_test(test_growth_skips_taken_neighbours),
        cmocka_unit_test(test_exhausted_pool_is_an_error),
        cmocka_unit_test(test_shuffle_keeps_every_block),
        cmocka_unit_test(test_used_blocks_are_the_peak),
        cmocka_unit_test(test_block_major_layout),
        cmocka_unit_test(test_head_major_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
