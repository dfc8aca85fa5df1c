/* Unit tests for the cpu engine's kernels: every fast kernel against its plain reference
 * (cpu_kernels.h, cpu_attn.h), on shapes that hit the vector tails and block edges.
 *
 * Three groups, one ctest test each (the line below; CMakeLists.txt reads it): the portable
 * kernels, the AVX2 + FMA ones, the AVX-512 ones. A group whose instructions this CPU lacks
 * runs none of its assertions, so it exits 77 and ctest reports it skipped, with the reason
 * printed — never passed.
 * ctest: groups portable avx2 avx512 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "common/err.h"
#include "common/rng.h"
#include "engine/cpu/cpu_attn.h"
#include "engine/cpu/cpu_kernels.h"
#include "engine/cpu/cpu_kv.h"
#include "engine/cpu/cpu_pool.h"
#include "engine/cpu/cpu_sample.h"

static void fill(float *x, size_t n, uint64_t seed, float scale)
{
    uint64_t state = seed;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(2 * rng_uniform(&state) - 1) * scale;
}

/* max |a - b| / (1 + max |b|) */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double worst = 0, top = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        worst = d > worst ? d : worst;
        top = fabs(b[i]) > top ? fabs(b[i]) : top;
    }
    return worst / (1 + top);
}

#define assert_close(a, b, n, tol)                                                           \
    do {                                                                                     \
        double d_ = rel_diff((a), (b), (n));                                                 \
        if (!(d_ <= (tol))) {                                                                \
            print_error("%s vs %s: relative difference %.3g > %.3g\n", #a, #b, d_,           \
                        (double)(tol));                                                      \
            fail();                                                                          \
        }                                                                                    \
    } while (0)

/* ---- GEMM ------------------------------------------------------------------------ */

/* Y = X W^T (and Y += ...) through cpu_gemm with 1 and 2 threads, against the double-
 * precision triple loop, for row counts on both sides of CPU_GEMM_SMALL_M and sizes that
 * are not multiples of 16. */
static void check_gemm(int m, int n, int k, int threads, bool simd)
{
    char err[ERR_LEN];
    cpu_simd_enable(simd);
    cpu_pool *pool = cpu_pool_create(threads, err);
    assert_non_null(pool);
    const int ldx = k + 3, ldy = n + 5; /* strided rows, as the forward pass uses them */
    float *x = malloc(sizeof(float) * (size_t)m * ldx);
    float *w = malloc(sizeof(float) * (size_t)n * k);
    float *y = malloc(sizeof(float) * (size_t)m * ldy);
    float *ref = malloc(sizeof(float) * (size_t)m * ldy);
    fill(x, (size_t)m * ldx, 1, 1.0f);
    fill(w, (size_t)n * k, 2, 0.1f);
    for (int acc = 0; acc < 2; acc++) {
        fill(y, (size_t)m * ldy, 3, 1.0f);
        memcpy(ref, y, sizeof(float) * (size_t)m * ldy);
        cpu_gemm(pool, y, ldy, x, ldx, w, m, n, k, acc);
        cpu_gemm_naive(ref, ldy, x, ldx, w, m, n, k, acc);
        for (int i = 0; i < m; i++)
            assert_close(y + (size_t)i * ldy, ref + (size_t)i * ldy, (size_t)n, 1e-5);
    }
    free(x);
    free(w);
    free(y);
    free(ref);
    cpu_pool_free(pool);
    cpu_simd_enable(true);
}

static void check_gemm_shapes(bool simd)
{
    static const int shapes[][3] = {{1, 37, 64}, {2, 16, 17}, {3, 50, 96}, {5, 33, 40},
                                    {7, 64, 128}, {31, 20, 48}, {32, 40, 64}, {70, 33, 80}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int threads = 1; threads <= 2; threads++)
            check_gemm(shapes[i][0], shapes[i][1], shapes[i][2], threads, simd);
}

static void test_gemm_plain_matches_naive(void **state)
{
    (void)state;
    check_gemm_shapes(false);
}

static void test_gemm_avx512_matches_naive(void **state)
{
    (void)state;
    check_gemm_shapes(true);
}

/* The small-batch kernel alone over a sub-range of W's rows: rows outside stay untouched. */
static void test_gemm_small_subrange(void **state)
{
    (void)state;
    const int m = 6, n = 40, k = 33;
    float x[6 * 33], w[40 * 33], y[6 * 40], ref[6 * 40];
    fill(x, sizeof x / sizeof x[0], 4, 1.0f);
    fill(w, sizeof w / sizeof w[0], 5, 1.0f);
    for (int i = 0; i < m * n; i++)
        y[i] = ref[i] = -7.0f;
    cpu_gemm_small_avx512(y, n, x, k, w, m, 16, 35, k, false);
    cpu_gemm_naive(ref, n, x, k, w, m, n, k, false);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            if (j >= 16 && j < 35)
                assert_true(fabsf(y[i * n + j] - ref[i * n + j]) <= 1e-4f * (1 + fabsf(ref[i * n + j])));
            else
                assert_true(y[i * n + j] == -7.0f);
        }
}

/* ---- element-wise -------------------------------------------------------------------- */

static void test_exp2_accuracy(void **state)
{
    (void)state;
    enum { N = 1001 };
    float in[N], out[N];
    for (int i = 0; i < N; i++)
        in[i] = -100.0f + 108.0f * (float)i / (N - 1); /* [-100, 8]: the kernel's range */
    cpu_exp2_avx512(out, in, N);
    for (int i = 0; i < N; i++) {
        const double want = exp2((double)in[i]);
        assert_true(fabs(out[i] - want) <= 3e-7 * want);
    }
    float masked = -INFINITY, tiny;
    cpu_exp2_avx512(&tiny, &masked, 1); /* -inf clamps to 2^-127: finite, ~0 */
    assert_true(tiny >= 0 && tiny < 1e-37f);
}

/* cpu_swiglu_fast runs the AVX-512 kernel only when cpu_simd_enabled() (the CPU has
 * AVX-512 F and DQ and nobody switched the fast path off); otherwise it calls cpu_swiglu,
 * and the comparison below would hold the reference to itself: an avx512-group test. */
static void test_swiglu_fast(void **state)
{
    (void)state;
    cpu_simd_enable(true); /* on, whatever an earlier test left */
    assert_true(cpu_simd_enabled());
    enum { N = 77 };
    float gate[N], up[N], fast[N], ref[N];
    fill(gate, N, 6, 12.0f);
    fill(up, N, 7, 1.0f);
    gate[0] = -200.0f; /* exp overflow side: silu -> -0 */
    gate[1] = 200.0f;
    cpu_swiglu(ref, gate, up, N);
    cpu_swiglu_fast(fast, gate, up, N);
    assert_close(fast, ref, N, 1e-6);
}

/* The reference itself, by hand: the fast kernel (above) and the batched forward pass
 * (test_cpu_forward) are held to it, so neither would notice a wrong reference.
 * silu(g) x up = g / (1 + e^-g) x up:
 *   g = 1, up = 2:   1 / (1 + 0.3678794) x 2  =  0.7310586 x 2  =  1.4621172
 *   g = -2, up = 1: -2 / (1 + 7.3890561)      = -0.2384058
 *   g = 0, up = 5:   0
 *   g = 3, up = -1:  3 / (1 + 0.0497871) x -1 = -2.8577224 */
static void test_swiglu_reference_by_hand(void **state)
{
    (void)state;
    const float gate[4] = {1, -2, 0, 3}, up[4] = {2, 1, 5, -1};
    const float want[4] = {1.4621172f, -0.2384058f, 0.0f, -2.8577224f};
    float out[4];
    cpu_swiglu(out, gate, up, 4);
    for (int i = 0; i < 4; i++)
        assert_true(fabsf(out[i] - want[i]) <= 1e-6f * (1 + fabsf(want[i])));
}

static void test_rmsnorm_softmax_argmax(void **state)
{
    (void)state;
    const float x[4] = {1, 2, 3, 4}, gain[4] = {1, 1, 1, 2};
    float o[4];
    cpu_rmsnorm(o, x, gain, 4, 0);
    /* rms = sqrt(30 / 4) = 2.7386 */
    assert_true(fabsf(o[0] - 0.365148f) < 1e-5f && fabsf(o[3] - 2.921187f) < 1e-5f);
    float p[3] = {1, 2, 3};
    cpu_softmax(p, 3);
    assert_true(fabsf(p[0] - 0.0900306f) < 1e-6f && fabsf(p[2] - 0.6652409f) < 1e-6f);
    const float ties[5] = {1, 5, 2, 5, 0};
    assert_int_equal(cpu_argmax(ties, 5), 1); /* lowest index among equals */
}

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
    const int blocks = (n_keys + 15) / 16 + 3;
    assert_int_equal(cpu_kv_init(&f->kv, &c, blocks, err), 0);
    /* take the blocks in a scrambled order: a decoy sequence holds some first */
    cpu_kv_seq decoy = {0};
    assert_int_equal(cpu_kv_reserve(&f->kv, &decoy, 16 * 2, err), 0);
    assert_int_equal(cpu_kv_reserve(&f->kv, &f->seq, n_keys, err), 0);
    cpu_kv_release(&f->kv, &decoy);
    cpu_kv_seq_free(&decoy);
    f->n_keys = n_keys;
    f->kv_dim = n_kv_heads * head_dim;
    f->keys = malloc(sizeof(float) * (size_t)n_keys * f->kv_dim);
    f->values = malloc(sizeof(float) * (size_t)n_keys * f->kv_dim);
    fill(f->keys, (size_t)n_keys * f->kv_dim, 11, 1.0f);
    fill(f->values, (size_t)n_keys * f->kv_dim, 12, 1.0f);
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
        cpu_attn_tile tile = {cpu_kv_head_k(&f.kv, 0, h), cpu_kv_head_v(&f.kv, 0, h), head_dim,
                              f.seq.blocks, n_rows, qp, op, pos, scale};
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
            cpu_attn_tile_avx2(&tile);
            break;
        case ATTN_AVX512:
            cpu_attn_tile_avx512(&tile, scratch);
            break;
        }
        assert_close(out, ref, (size_t)n_rows * head_dim, 2e-5);
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
    static const int keys[] = {1, 15, 16, 17, 127, 128, 129, 300};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        check_attention(kernel, 2, 32, keys[i], 1, 4, 1.0f);
        check_attention(kernel, 1, 16, keys[i], 1, 3, 1.0f);
        check_attention(kernel, 1, 64, keys[i], 1, 2, 1.0f);
        check_attention(kernel, 1, 128, keys[i], 1, 1, 1.0f);
    }
}

/* many tokens: causal rows, row groups of every size 1..8 */
static void check_attention_prefill_tiles(attn_kernel kernel)
{
    check_attention(kernel, 2, 32, 200, 37, 4, 1.0f);
    check_attention(kernel, 1, 32, 64, 64, 1, 1.0f);
    check_attention(kernel, 1, 16, 90, 23, 5, 1.0f);
    check_attention(kernel, 1, 64, 70, 19, 3, 1.0f);
    check_attention(kernel, 1, 128, 40, 9, 2, 1.0f);
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

static void test_attention_avx2(void **state)
{
    (void)state;
    check_attention_all(ATTN_AVX2);
}

static void test_attention_avx512(void **state)
{
    (void)state;
    check_attention_all(ATTN_AVX512);
}

/* ---- sampling ---------------------------------------------------------------------- */

/* What either sampler must do, checked on each (cpu_sample is cpu_sample_naive without
 * AVX-512, so this is no comparison of the two): a valid id, never the banned one, greedy
 * is the argmax (the favourite 17, or the best of the rest when 17 is banned), and over
 * many positions the draws follow softmax(logits / T) — three logits 0, ln 2, ln 4 at
 * T = 1 give p = 1/7, 2/7, 4/7 (the draw is a hash of (seed, position), so the counts are
 * fixed; 5 binomial standard deviations, sqrt(7000 x 4/7 x 3/7) = 41, is the margin). */
typedef int32_t (*sampler_fn)(float *, int, double, uint64_t, int64_t, int32_t);

static void check_sampler_properties(sampler_fn sample)
{
    enum { V = 1000, DRAWS = 400 };
    float logits[V], a[V];
    fill(logits, V, 21, 4.0f);
    logits[17] = 6.0f; /* the favourite: every other logit is below 4 */
    int runner_up = 0;
    for (int i = 0; i < V; i++)
        if (i != 17 && logits[i] > logits[runner_up])
            runner_up = i;
    for (int i = 0; i < DRAWS; i++) {
        const double t = i % 4 == 0 ? 0.0 : 0.3 + (i % 7) * 0.4;
        const int32_t banned = i % 3 == 0 ? 17 : -1;
        memcpy(a, logits, sizeof a);
        const int32_t token = sample(a, V, t, 1000 + (uint64_t)i, i, banned);
        assert_true(token >= 0 && token < V);
        if (banned >= 0)
            assert_int_not_equal(token, banned);
        if (t == 0)
            assert_int_equal(token, banned >= 0 ? runner_up : 17);
    }
    enum { N = 7000 };
    const float three[3] = {0.0f, (float)log(2.0), (float)log(4.0)};
    int count[3] = {0, 0, 0};
    for (int i = 0; i < N; i++) {
        float x[3];
        memcpy(x, three, sizeof x);
        const int32_t token = sample(x, 3, 1.0, 42, i, -1);
        assert_true(token >= 0 && token < 3);
        count[token]++;
    }
    assert_true(abs(count[0] - N / 7) <= 5 * 29);     /* sd sqrt(7000 x 1/7 x 6/7) = 29 */
    assert_true(abs(count[1] - 2 * N / 7) <= 5 * 38); /* sd sqrt(7000 x 2/7 x 5/7) = 38 */
    assert_true(abs(count[2] - 4 * N / 7) <= 5 * 41); /* sd sqrt(7000 x 4/7 x 3/7) = 41 */
}

/* The reference, and cpu_sample as dispatched on this CPU (plain C, or AVX-512 where the CPU
 * has it and the fast path is on). */
static void test_sampler_properties(void **state)
{
    (void)state;
    check_sampler_properties(cpu_sample_naive);
    cpu_simd_enable(true);
    check_sampler_properties(cpu_sample);
}

/* The fast sampler draws what the reference draws (they may differ only when a draw lands
 * within rounding of a boundary: allow 1 in 100). Without the AVX-512 path cpu_sample is
 * cpu_sample_naive and the comparison would be the reference against itself: an
 * avx512-group test. */
static void test_sampler_matches_naive(void **state)
{
    (void)state;
    cpu_simd_enable(true);
    assert_true(cpu_simd_enabled());
    enum { V = 1000, DRAWS = 400 };
    float logits[V], a[V], b[V];
    fill(logits, V, 21, 4.0f);
    logits[17] = 6.0f;
    int same = 0;
    for (int i = 0; i < DRAWS; i++) {
        const double t = i % 4 == 0 ? 0.0 : 0.3 + (i % 7) * 0.4;
        const int32_t banned = i % 3 == 0 ? 17 : -1;
        memcpy(a, logits, sizeof a);
        memcpy(b, logits, sizeof b);
        const int32_t fast = cpu_sample(a, V, t, 1000 + (uint64_t)i, i, banned);
        const int32_t ref = cpu_sample_naive(b, V, t, 1000 + (uint64_t)i, i, banned);
        same += fast == ref;
    }
    assert_true(same >= DRAWS - DRAWS / 100);
}

/* ---- pool ------------------------------------------------------------------------------ */

typedef struct count_job {
    int hits[1000];
} count_job;

static void count_task(void *arg, int task, int thread)
{
    (void)thread;
    ((count_job *)arg)->hits[task]++;
}

static void test_pool_runs_every_task_once(void **state)
{
    (void)state;
    char err[ERR_LEN];
    for (int threads = 1; threads <= 3; threads++) {
        cpu_pool *pool = cpu_pool_create(threads, err);
        assert_non_null(pool);
        assert_int_equal(cpu_pool_threads(pool), threads);
        for (int round = 0; round < 50; round++) {
            count_job job;
            memset(&job, 0, sizeof job);
            const int n = 1 + round * 19 % 1000;
            cpu_pool_run(pool, n, count_task, &job);
            for (int i = 0; i < 1000; i++)
                assert_int_equal(job.hits[i], i < n ? 1 : 0);
        }
        cpu_pool_free(pool);
    }
    assert_null(cpu_pool_create(0, err));
    assert_true(cpu_pool_default_threads() >= 1);
}

/* ---- groups ------------------------------------------------------------------------- */

/* argv[1] names the group (all three when absent). A group needing instructions this CPU
 * lacks exits 77 with the reason: ctest's SKIP_RETURN_CODE. */
int main(int argc, char **argv)
{
    const struct CMUnitTest portable[] = {
        cmocka_unit_test(test_gemm_plain_matches_naive),
        cmocka_unit_test(test_swiglu_reference_by_hand),
        cmocka_unit_test(test_rmsnorm_softmax_argmax),
        cmocka_unit_test(test_attention_portable),
        cmocka_unit_test(test_sampler_properties),
        cmocka_unit_test(test_pool_runs_every_task_once),
    };
    const struct CMUnitTest avx2[] = {
        cmocka_unit_test(test_attention_avx2),
    };
    const struct CMUnitTest avx512[] = {
        cmocka_unit_test(test_gemm_avx512_matches_naive),
        cmocka_unit_test(test_gemm_small_subrange),
        cmocka_unit_test(test_exp2_accuracy),
        cmocka_unit_test(test_swiglu_fast),
        cmocka_unit_test(test_attention_avx512),
        cmocka_unit_test(test_sampler_matches_naive),
    };
    const char *group = argc > 1 ? argv[1] : "all";
    const bool all = strcmp(group, "all") == 0;
    if (!all && strcmp(group, "portable") && strcmp(group, "avx2") && strcmp(group, "avx512")) {
        fprintf(stderr, "usage: %s [portable|avx2|avx512|all]\n", argv[0]);
        return 2;
    }
    int failed = 0, ran = 0;
    if (all || strcmp(group, "portable") == 0) {
        failed += cmocka_run_group_tests_name("portable", portable, NULL, NULL);
        ran++;
    }
    if (all || strcmp(group, "avx2") == 0) {
        if (cpu_avx2_available()) {
            failed += cmocka_run_group_tests_name("avx2", avx2, NULL, NULL);
            ran++;
        } else {
            printf("SKIP avx2: this CPU has no AVX2 + FMA; the AVX2 kernels were not tested\n");
        }
    }
    if (all || strcmp(group, "avx512") == 0) {
        if (cpu_simd_available()) {
            failed += cmocka_run_group_tests_name("avx512", avx512, NULL, NULL);
            ran++;
        } else {
            printf("SKIP avx512: this CPU has no AVX-512 F + DQ; the AVX-512 kernels were not "
                   "tested\n");
        }
    }
    if (failed)
        return 1;
    return ran ? 0 : 77;
}
