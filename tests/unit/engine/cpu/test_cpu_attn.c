/* engine/cpu/cpu_attn: each attention tile (plain C, AVX2 + FMA, AVX-512) against the
 * naive reference over a paged KV cache (cpu_kv.h): decode rows, prefill tiles, peaked
 * scores (the fast tiles also with the next tile's blocks named, for their prefetch: the
 * same output). And the cache's element, the half (cpu_half.h): its portable conversions on known
 * values and every half, and against the F16C instructions (the AVX2 group).
 *
 * Groups, one ctest test each (the line below; CMakeLists.txt reads it): the kernels of
 * each instruction set (kernel_check.h). A group whose instructions this CPU lacks runs
 * none of its assertions, so it exits 77 and ctest reports it skipped, with the reason
 * printed — never passed.
 * ctest: groups portable avx2 avx512 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <immintrin.h>

#include "common/err.h"
#include "engine/cpu/cpu_attn.h"
#include "engine/cpu/cpu_kv.h"

#include "kernel_check.h"

/* ---- attention ------------------------------------------------------------------------ */

/* A KV cache of one layer holding n_keys random keys for a sequence whose block table is
 * a shuffled set of blocks (pages are not contiguous), plus contiguous copies of the keys
 * and values of kv head `head` for the naive reference. */
typedef struct attn_fixture {
    cpu_kv kv;
    cpu_kv_seq seq;
    float *keys, *values; /* (n_keys, kv_dim) */
    int n_keys, kv_dim;
} attn_fixture;

static void fixture_build(attn_fixture *f, int n_kv_heads, int head_dim, int n_keys)
{
    char err[ERR_LEN];
    cpu_config c = {.dim = 16, .hidden_dim = 16, .n_layers = 1, .n_heads = n_kv_heads,
                    .n_kv_heads = n_kv_heads, .head_dim = head_dim, .vocab_size = 16,
                    .max_seq_len = 4096};
    memset(f, 0, sizeof *f);
    const int blocks = 2 * ((n_keys + 15) / 16) + 3;
    assert_int_equal(cpu_kv_init(&f->kv, &c, blocks, err), 0);
    /* blocks that do not follow each other: a decoy sequence grows with this one, a block
     * each in turn, and takes every other block */
    cpu_kv_seq decoy = {0};
    for (int upto = 16; upto < n_keys + 16; upto += 16) {
        assert_int_equal(cpu_kv_reserve(&f->kv, &f->seq, upto < n_keys ? upto : n_keys, err), 0);
        assert_int_equal(cpu_kv_reserve(&f->kv, &decoy, upto, err), 0);
    }
    if (f->seq.n_blocks > 1)
        assert_int_not_equal(f->seq.blocks[1], f->seq.blocks[0] + 1);
    cpu_kv_release(&f->kv, &decoy);
    cpu_kv_seq_free(&decoy);
    f->n_keys = n_keys;
    f->kv_dim = n_kv_heads * head_dim;
    f->keys = malloc(sizeof(float) * (size_t)n_keys * f->kv_dim);
    f->values = malloc(sizeof(float) * (size_t)n_keys * f->kv_dim);
    fill(f->keys, (size_t)n_keys * f->kv_dim, 11, 1.0f);
    fill(f->values, (size_t)n_keys * f->kv_dim, 12, 1.0f);
    /* the reference reads what the cache holds: each element rounded to a half */
    for (size_t i = 0; i < (size_t)n_keys * f->kv_dim; i++) {
        f->keys[i] = cpu_half_round(f->keys[i]);
        f->values[i] = cpu_half_round(f->values[i]);
    }
    for (int p = 0; p < n_keys; p++)
        cpu_kv_write(&f->kv, 0, &f->seq, p, f->keys + (size_t)p * f->kv_dim,
                     f->values + (size_t)p * f->kv_dim);
}

static void fixture_free(attn_fixture *f)
{
    cpu_kv_release(&f->kv, &f->seq);
    cpu_kv_seq_free(&f->seq);
    cpu_kv_free(&f->kv);
    free(f->keys);
    free(f->values);
}

/* Which attention tile a check runs against the naive reference. */
typedef enum attn_kernel {
    ATTN_PORTABLE, /* cpu_attn_tile_generic and cpu_attn_tile_blocked (plain C) */
    ATTN_AVX2,     /* cpu_attn_tile_avx2 (AVX2 + FMA; head_dim a multiple of 8) */
    ATTN_AVX512,   /* cpu_attn_tile_avx512 */
} attn_kernel;

/* n_rows query rows at positions pos0, pos0 (kv_mul heads per token), ... against the
 * fixture's keys: the kernel's tiles against the naive reference. */
static void check_attention(attn_kernel kernel, int n_kv_heads, int head_dim, int n_keys,
                            int tokens, int kv_mul, float q_scale)
{
    attn_fixture f;
    fixture_build(&f, n_kv_heads, head_dim, n_keys);
    const int n_rows = tokens * kv_mul;
    float *q = malloc(sizeof(float) * (size_t)n_rows * head_dim);
    float *out = malloc(sizeof(float) * (size_t)n_rows * head_dim);
    float *ref = malloc(sizeof(float) * (size_t)n_rows * head_dim);
    float *att = malloc(sizeof(float) * (size_t)n_keys);
    const float **qp = malloc(sizeof *qp * (size_t)n_rows);
    float **op = malloc(sizeof *op * (size_t)n_rows);
    int32_t *pos = malloc(sizeof *pos * (size_t)n_rows);
    float *scratch = malloc(sizeof(float) * cpu_attn_scratch_floats(n_rows, head_dim));
    fill(q, (size_t)n_rows * head_dim, 13, q_scale);
    const float scale = 1.0f / sqrtf((float)head_dim);
    for (int h = 0; h < n_kv_heads; h++) {
        for (int r = 0; r < n_rows; r++) {
            qp[r] = q + (size_t)r * head_dim;
            op[r] = out + (size_t)r * head_dim;
            pos[r] = n_keys - tokens + r / kv_mul; /* the last `tokens` positions */
            cpu_attn_naive(ref + (size_t)r * head_dim, qp[r], f.keys + (size_t)h * head_dim,
                           f.values + (size_t)h * head_dim, pos[r] + 1, f.kv_dim, head_dim,
                           scale, att);
        }
        cpu_attn_tile tile = {.k = cpu_kv_head_k(&f.kv, 0, h),
                              .v = cpu_kv_head_v(&f.kv, 0, h),
                              .head_dim = head_dim,
                              .block_stride = f.kv.block_stride,
                              .block_table = f.seq.blocks,
                              .n_rows = n_rows,
                              .q = qp,
                              .out = op,
                              .pos = pos,
                              .scale = scale};
        switch (kernel) {
        case ATTN_PORTABLE:
            cpu_attn_tile_generic(&tile);
            assert_close(out, ref, (size_t)n_rows * head_dim, 2e-5);
            memset(out, 0, sizeof(float) * (size_t)n_rows * head_dim);
            cpu_attn_tile_blocked(&tile); /* 16 keys at a time */
            break;
        case ATTN_AVX2:
            if (head_dim % 8 != 0) /* the tile's precondition: cpu_attn_run never picks it */
                continue;
            cpu_attn_tile_avx2(&tile, scratch);
            break;
        case ATTN_AVX512:
            cpu_attn_tile_avx512(&tile, scratch);
            break;
        }
        assert_close(out, ref, (size_t)n_rows * head_dim, 2e-5);
        if (kernel == ATTN_PORTABLE)
            continue;
        /* With the next tile's blocks named (another head's, as a decode step's next tile
         * is), the fast kernels prefetch them and compute the same output. */
        memcpy(ref, out, sizeof(float) * (size_t)n_rows * head_dim);
        memset(out, 0, sizeof(float) * (size_t)n_rows * head_dim);
        const int other = (h + 1) % n_kv_heads;
        tile.ahead = (cpu_attn_ahead){cpu_kv_head_k(&f.kv, 0, other), cpu_kv_head_v(&f.kv, 0, other),
                                      f.seq.blocks, (n_keys + 15) / 16};
        if (kernel == ATTN_AVX2)
            cpu_attn_tile_avx2(&tile, scratch);
        else
            cpu_attn_tile_avx512(&tile, scratch);
        assert_memory_equal(out, ref, sizeof(float) * (size_t)n_rows * head_dim);
    }
    free(q);
    free(out);
    free(ref);
    free(att);
    free(qp);
    free(op);
    free(pos);
    free(scratch);
    fixture_free(&f);
}

/* one token, kv_mul heads, contexts around block and chunk edges */
static void check_attention_decode_rows(attn_kernel kernel)
{
    enum { CHUNK = CPU_ATTN_CHUNK_BLOCKS * 16 }; /* keys of a chunk */
    static const int keys[] = {1, 15, 16, 17, 127, 128, 129, 300, CHUNK - 1, CHUNK, CHUNK + 1,
                               2 * CHUNK + 70};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        check_attention(kernel, 2, 32, keys[i], 1, 4, 1.0f);
        check_attention(kernel, 1, 16, keys[i], 1, 3, 1.0f);
        check_attention(kernel, 1, 64, keys[i], 1, 2, 1.0f);
        check_attention(kernel, 1, 128, keys[i], 1, 1, 1.0f);
    }
}

/* many tokens: causal rows, row groups of every size 1..8; and tiles of one row group whose
 * rows are several tokens (each row its own last key): 4 rows, and the AVX2 kernel's widest
 * group, 6 rows (3 tokens x 2 heads), and 5 */
static void check_attention_prefill_tiles(attn_kernel kernel)
{
    check_attention(kernel, 1, 32, 40, 2, 2, 1.0f);
    check_attention(kernel, 1, 16, 33, 4, 1, 1.0f);
    check_attention(kernel, 2, 32, 200, 37, 4, 1.0f);
    check_attention(kernel, 1, 32, 64, 64, 1, 1.0f);
    check_attention(kernel, 1, 16, 90, 23, 5, 1.0f);
    check_attention(kernel, 1, 64, 70, 19, 3, 1.0f);
    check_attention(kernel, 1, 128, 40, 9, 2, 1.0f);
    check_attention(kernel, 1, 32, 50, 3, 2, 1.0f);
    check_attention(kernel, 1, 32, 47, 5, 1, 1.0f);
    /* a tile across the edge of a chunk of keys, and one past two chunks */
    check_attention(kernel, 1, 32, CPU_ATTN_CHUNK_BLOCKS * 16 + 20, 37, 4, 1.0f);
    check_attention(kernel, 1, 16, 2 * CPU_ATTN_CHUNK_BLOCKS * 16 + 3, 11, 2, 1.0f);
}

/* Peaked scores (large q) make the running max jump mid-sequence: the lazy rescale must
 * still give the exact softmax. */
static void check_attention_peaked_scores(attn_kernel kernel)
{
    check_attention(kernel, 1, 32, 260, 5, 4, 40.0f);
    check_attention(kernel, 1, 64, 100, 3, 2, 60.0f);
}

static void check_attention_all(attn_kernel kernel)
{
    check_attention_decode_rows(kernel);
    check_attention_prefill_tiles(kernel);
    check_attention_peaked_scores(kernel);
}

static void test_attention_portable(void **state)
{
    (void)state;
    check_attention_all(ATTN_PORTABLE);
}

/* The AVX2 kernel takes any head_dim a multiple of 8: widths whose values pass is not a
 * whole number of 16-dimension runs (the 8 tail: 8, 24, 40, 56) and one that is (96),
 * decode and prefill. */
static void test_attention_avx2(void **state)
{
    (void)state;
    check_attention_all(ATTN_AVX2);
    static const int widths[] = {8, 24, 40, 56, 96};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        check_attention(ATTN_AVX2, 1, widths[i], 129, 1, 4, 1.0f);
        check_attention(ATTN_AVX2, 1, widths[i], 90, 23, 3, 1.0f);
        check_attention(ATTN_AVX2, 1, widths[i], 100, 3, 2, 30.0f);
    }
}

static void test_attention_avx512(void **state)
{
    (void)state;
    check_attention_all(ATTN_AVX512);
}

/* ---- the half ------------------------------------------------------------------------- */

static float from_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Known roundings (ties to even, overflow, subnormals, NaN), and every half back and forth. */
static void test_half_portable(void **state)
{
    (void)state;
    static const struct {
        float f;
        cpu_half h;
    } known[] = {
        {0.0f, 0x0000},           {-0.0f, 0x8000},        {1.0f, 0x3c00},
        {-2.0f, 0xc000},          {65504.0f, 0x7bff},     {65519.0f, 0x7bff},
        {65520.0f, 0x7c00},       {1e9f, 0x7c00},         {-INFINITY, 0xfc00},
        {0x1p-14f, 0x0400},       {0x1p-24f, 0x0001},     {0x1p-25f, 0x0000},
        {0x3p-25f, 0x0002},       {0x1.002p0f, 0x3c00},   {0x1.006p0f, 0x3c02},
        {0x1.003p0f, 0x3c01},     {0x1.0021p0f, 0x3c01},  {0x1.ff8p-15f, 0x03ff},
        {0x1.ffcp-15f, 0x0400},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        const cpu_half h = cpu_half_from_float(known[i].f);
        if (h != known[i].h) {
            print_error("%a -> 0x%04x, expected 0x%04x\n", (double)known[i].f, h, known[i].h);
            fail();
        }
    }
    const cpu_half nan = cpu_half_from_float(NAN);
    assert_true((nan & 0x7c00) == 0x7c00 && (nan & 0x03ff) != 0 && (nan & 0x0200) != 0);
    assert_true(isnan(cpu_half_to_float(0x7c01)));
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x03ff)) /* NaN: comes back quiet */
            continue;
        const float f = cpu_half_to_float((cpu_half)h);
        if (cpu_half_from_float(f) != h) {
            print_error("half 0x%04x -> %a -> 0x%04x\n", h, (double)f, cpu_half_from_float(f));
            fail();
        }
    }
    assert_true(cpu_half_to_float(0x0001) == 0x1p-24f && cpu_half_to_float(0xfbff) == -65504.0f);
}

/* The portable conversions agree bit for bit with F16C (vcvtps2ph, round to nearest; and
 * vcvtph2ps), which the AVX2 and AVX-512 kernels use: every half, and floats across the whole
 * range (every 997th bit pattern, then all that lie near a rounding tie in [1, 2)); and
 * cpu_halves_from_floats_avx2, the cache's writes, against the portable rounding. */
__attribute__((target("f16c"))) static void test_half_f16c(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        const float a = cpu_half_to_float((cpu_half)h), b = _cvtsh_ss((unsigned short)h);
        assert_memory_equal(&a, &b, sizeof a);
    }
    uint64_t mismatches = 0;
    for (uint64_t i = 0; i < (1ull << 32); i += 997) {
        const float f = from_bits((uint32_t)i);
        mismatches += cpu_half_from_float(f) != _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
    }
    for (uint32_t m = 0; m < (1u << 23); m += 1u << 12) /* ties and their neighbours */
        for (int d = -2; d <= 2; d++) {
            const float f = from_bits(0x3f800000u + m + (uint32_t)(0x1000 + d));
            mismatches += cpu_half_from_float(f) != _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
        }
    assert_int_equal(mismatches, 0);
    /* the cache's writes (cpu_kv_write): 8 at a time with F16C, the tail one by one */
    enum { N = 1003 };
    float in[N];
    cpu_half fast[N];
    fill(in, N, 21, 70000.0f); /* past the largest half, both signs: overflow too */
    for (int i = 0; i < N; i += 7)
        in[i] *= 0x1p-30f; /* subnormal halves */
    cpu_halves_from_floats_avx2(fast, in, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(fast[i], cpu_half_from_float(in[i]));
}

int main(int argc, char **argv)
{
    const struct CMUnitTest portable[] = {
        cmocka_unit_test(test_attention_portable),
        cmocka_unit_test(test_half_portable),
    };
    const struct CMUnitTest avx2[] = {
        cmocka_unit_test(test_attention_avx2),
        cmocka_unit_test(test_half_f16c),
    };
    const struct CMUnitTest avx512[] = {
        cmocka_unit_test(test_attention_avx512),
    };
    const isa_group groups[] = {ISA_GROUP(portable), ISA_GROUP(avx2), ISA_GROUP(avx512)};
    return isa_groups_run(argc, argv, groups, 3);
}
