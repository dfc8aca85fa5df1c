/* engine/cpu/cpu_kernels: every fast kernel of each instruction set against its plain
 * reference (GEMM, the small-batch GEMM, the GEMM on panels with and without a prep of X's
 * rows, X rearranged for it, exp2, SwiGLU, RMSNorm, RoPE, the streaming read), and the
 * references themselves (RMSNorm, softmax, argmax, SwiGLU by hand), on shapes that hit the
 * vector tails and block edges.
 *
 * Groups, one ctest test each (the line below; CMakeLists.txt reads it): the kernels of
 * each instruction set (kernel_check.h). A group whose instructions this CPU lacks runs
 * none of its assertions, so it exits 77 and ctest reports it skipped, with the reason
 * printed — never passed.
 * ctest: groups portable avx2 avx512 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "engine/cpu/cpu_kernels.h"
#include "engine/cpu/cpu_pool.h"

#include "kernel_check.h"

/* ---- GEMM ------------------------------------------------------------------------ */

/* The prep of check_gemm's product through cpu_gemm_panels_prep: X's rows r0..r1 made from
 * the source rows, row r scaled by 1 + r % 3 (each row once: a row made twice, or not made,
 * fails the comparison). */
typedef struct scale_prep {
    const float *src;
    float *x;
    int ldx, k, threads;
    int made[600];
    int bad_thread; /* a thread index out of range was passed (checked on the main thread) */
} scale_prep;

static void scale_rows(void *arg, int r0, int r1, int thread)
{
    scale_prep *p = arg;
    if (thread < 0 || thread >= p->threads)
        p->bad_thread = 1;
    for (int r = r0; r < r1; r++) {
        p->made[r]++;
        for (int i = 0; i < p->k; i++)
            p->x[(size_t)r * p->ldx + i] = p->src[(size_t)r * p->ldx + i] * (float)(1 + r % 3);
    }
}

/* Y = X W^T (and Y += ...) through cpu_gemm, through cpu_gemm_panels and through
 * cpu_gemm_panels_prep (X made by a prep first) with 1 and 2 threads, against the
 * double-precision triple loop, for row counts on both sides of CPU_GEMM_PANEL_M and
 * CPU_GEMM_SMALL_M and sizes that are not multiples of 16. */
static void check_gemm(int m, int n, int k, int threads, cpu_isa isa)
{
    char err[ERR_LEN];
    assert_int_equal(cpu_isa_set(isa), isa);
    cpu_pool *pool = cpu_pool_create(threads, err);
    assert_non_null(pool);
    const int ldx = k + 3, ldy = n + 5; /* strided rows, as the forward pass uses them */
    float *x = malloc(sizeof(float) * (size_t)m * ldx);
    float *w = malloc(sizeof(float) * (size_t)n * k);
    float *y = malloc(sizeof(float) * (size_t)m * ldy);
    float *ref = malloc(sizeof(float) * (size_t)m * ldy);
    float *panels = malloc(sizeof(float) * cpu_panels_floats(n, k));
    float *xpack = malloc(sizeof(float) * cpu_gemm_xpack_floats(m, k));
    fill(x, (size_t)m * ldx, 1, 1.0f);
    fill(w, (size_t)n * k, 2, 0.1f);
    cpu_pack_panels(panels, w, n, k);
    for (int acc = 0; acc < 2; acc++) {
        fill(y, (size_t)m * ldy, 3, 1.0f);
        memcpy(ref, y, sizeof(float) * (size_t)m * ldy);
        cpu_gemm(pool, y, ldy, x, ldx, w, m, n, k, acc);
        cpu_gemm_naive(ref, ldy, x, ldx, w, m, n, k, acc);
        for (int i = 0; i < m; i++)
            assert_close(y + (size_t)i * ldy, ref + (size_t)i * ldy, (size_t)n, 1e-5);
        /* the same through W in panels (the kernel on panels for 16 to 511 rows, else cpu_gemm) */
        fill(y, (size_t)m * ldy, 3, 1.0f);
        cpu_gemm_panels(pool, y, ldy, x, ldx, w, panels, m, n, k, acc, xpack);
        for (int i = 0; i < m; i++)
            assert_close(y + (size_t)i * ldy, ref + (size_t)i * ldy, (size_t)n, 1e-5);
        /* X made by a prep: X's rows scaled, then the product of the scaled rows */
        scale_prep *prep = calloc(1, sizeof *prep);
        float *xs = malloc(sizeof(float) * (size_t)m * ldx);
        assert_true(prep && xs && m <= 600);
        *prep = (scale_prep){.src = x, .x = xs, .ldx = ldx, .k = k, .threads = threads};
        for (int i = 0; i < m * ldx; i++)
            xs[i] = x[i] * (float)(1 + i / ldx % 3); /* the reference's X */
        fill(y, (size_t)m * ldy, 3, 1.0f);
        memcpy(ref, y, sizeof(float) * (size_t)m * ldy);
        cpu_gemm_naive(ref, ldy, xs, ldx, w, m, n, k, acc);
        memset(xs, 0, sizeof(float) * (size_t)m * ldx);
        cpu_gemm_panels_prep(pool, y, ldy, xs, ldx, w, panels, m, n, k, acc, xpack, scale_rows,
                             prep);
        assert_int_equal(prep->bad_thread, 0);
        for (int i = 0; i < m; i++) {
            assert_int_equal(prep->made[i], 1);
            assert_close(y + (size_t)i * ldy, ref + (size_t)i * ldy, (size_t)n, 1e-5);
        }
        free(xs);
        free(prep);
    }
    free(x);
    free(w);
    free(y);
    free(ref);
    free(panels);
    free(xpack);
    cpu_pool_free(pool);
    cpu_isa_set(CPU_ISA_AVX512); /* the widest again */
}

static void check_gemm_shapes(cpu_isa isa)
{
    static const int shapes[][3] = {{1, 37, 64}, {2, 16, 17}, {3, 50, 96}, {5, 33, 40},
                                    {7, 64, 128}, {31, 20, 48}, {32, 40, 64}, {70, 33, 80},
                                    {40, 203, 33}, {300, 29, 40}, {600, 24, 40}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int threads = 1; threads <= 2; threads++)
            check_gemm(shapes[i][0], shapes[i][1], shapes[i][2], threads, isa);
}

static void test_gemm_plain_matches_naive(void **state)
{
    (void)state;
    check_gemm_shapes(CPU_ISA_PORTABLE);
}

static void test_gemm_avx512_matches_naive(void **state)
{
    (void)state;
    check_gemm_shapes(CPU_ISA_AVX512);
}

static void test_gemm_avx2_matches_naive(void **state)
{
    (void)state;
    check_gemm_shapes(CPU_ISA_AVX2);
}

typedef void (*gemm_small_fn)(float *y, int ldy, const float *x, int ldx, const float *w, int m,
                              int n0, int n1, int k, bool accumulate);

/* The small-batch kernel alone over a sub-range of W's rows: rows outside stay untouched. */
static void check_gemm_small_subrange(gemm_small_fn gemm_small)
{
    const int m = 6, n = 40, k = 33;
    float x[6 * 33], w[40 * 33], y[6 * 40], ref[6 * 40];
    fill(x, sizeof x / sizeof x[0], 4, 1.0f);
    fill(w, sizeof w / sizeof w[0], 5, 1.0f);
    for (int i = 0; i < m * n; i++)
        y[i] = ref[i] = -7.0f;
    gemm_small(y, n, x, k, w, m, 16, 35, k, false);
    cpu_gemm_naive(ref, n, x, k, w, m, n, k, false);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            if (j >= 16 && j < 35)
                assert_true(fabsf(y[i * n + j] - ref[i * n + j]) <= 1e-4f * (1 + fabsf(ref[i * n + j])));
            else
                assert_true(y[i * n + j] == -7.0f);
        }
}

static void test_gemm_small_subrange_avx512(void **state)
{
    (void)state;
    check_gemm_small_subrange(cpu_gemm_small_avx512);
}

typedef void (*gemm_panels_fn)(float *y, int ldy, const float *xpack, const float *panels,
                               int m, int n0, int n1, int k, bool accumulate, int after0,
                               int after1);

/* A kernel on panels alone over a sub-range of Y's columns (from the second pair of panels
 * to within the fifth panel), every group size of X from 1 to 12 rows and one more group:
 * columns outside stay untouched. With an even row count the call is also told a next range
 * (columns 16 to 48, before its own) to prefetch, which changes nothing it computes. */
static void check_gemm_panels_subrange(gemm_panels_fn gemm_panels)
{
    const int n = 80, k = 37, ldy = n + 3;
    for (int m = 1; m <= 2 * CPU_PANEL_ROWS + 1; m++) {
        float x[25 * 37], w[80 * 37], y[25 * 83], ref[25 * 83];
        float panels[80 * 37], xpack[25 * 37];
        fill(x, sizeof x / sizeof x[0], 6, 1.0f);
        fill(w, sizeof w / sizeof w[0], 7, 1.0f);
        cpu_pack_panels(panels, w, n, k);
        for (int acc = 0; acc < 2; acc++) {
            for (int i = 0; i < m * ldy; i++)
                y[i] = ref[i] = -7.0f;
            /* X in groups of CPU_PANEL_ROWS rows, each group's columns one after the other */
            for (int r0 = 0; r0 < m; r0 += CPU_PANEL_ROWS) {
                const int rows = m - r0 < CPU_PANEL_ROWS ? m - r0 : CPU_PANEL_ROWS;
                for (int i = 0; i < rows; i++)
                    for (int p = 0; p < k; p++)
                        xpack[r0 * k + p * rows + i] = x[(r0 + i) * k + p];
            }
            gemm_panels(y, ldy, xpack, panels, m, 32, 71, k, acc, m % 2 ? 0 : 16, m % 2 ? 0 : 48);
            cpu_gemm_naive(ref, ldy, x, k, w, m, n, k, acc);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    if (j >= 32 && j < 71)
                        assert_true(fabsf(y[i * ldy + j] - ref[i * ldy + j]) <=
                                    1e-4f * (1 + fabsf(ref[i * ldy + j])));
                    else
                        assert_true(y[i * ldy + j] == -7.0f);
                }
        }
    }
}

/* X's groups rearranged for the kernels on panels (cpu_xpack_group_avx2) against the plain
 * loop, exactly: every group size, column counts on both sides of its four at a time. */
static void test_xpack_group_avx2(void **state)
{
    (void)state;
    static const int ks[] = {1, 3, 4, 5, 8, 37};
    for (int rows = 1; rows <= CPU_PANEL_ROWS; rows++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            const int k = ks[ki], ldx = k + 3;
            float x[CPU_PANEL_ROWS * 40], got[CPU_PANEL_ROWS * 40], want[CPU_PANEL_ROWS * 40];
            fill(x, (size_t)rows * ldx, 11, 1.0f);
            for (int i = 0; i < rows; i++)
                for (int p = 0; p < k; p++)
                    want[p * rows + i] = x[i * ldx + p];
            memset(got, 0, sizeof got);
            cpu_xpack_group_avx2(got, x, ldx, rows, k);
            assert_memory_equal(got, want, sizeof(float) * (size_t)rows * k);
        }
}

static void test_gemm_panels_subrange_avx512(void **state)
{
    (void)state;
    check_gemm_panels_subrange(cpu_gemm_panels_avx512);
}

static void test_gemm_panels_subrange_avx2(void **state)
{
    (void)state;
    check_gemm_panels_subrange(cpu_gemm_panels_avx2);
}

static void test_gemm_small_subrange_avx2(void **state)
{
    (void)state;
    check_gemm_small_subrange(cpu_gemm_small_avx2);
}

/* ---- element-wise -------------------------------------------------------------------- */

typedef void (*exp2_fn)(float *out, const float *in, int n);

/* [-100, 8]: the attention's range; relative error at most 3e-7; -inf gives 0 or a finite
 * value below 1e-37 (AVX-512 floors at 2^-127, AVX2 gives 0). */
static void check_exp2_accuracy(exp2_fn exp2_vec)
{
    enum { N = 1001 };
    float in[N], out[N];
    for (int i = 0; i < N; i++)
        in[i] = -100.0f + 108.0f * (float)i / (N - 1);
    exp2_vec(out, in, N);
    for (int i = 0; i < N; i++) {
        const double want = exp2((double)in[i]);
        if (!(fabs(out[i] - want) <= 3e-7 * want))
            fail_msg("2^%g: %.9g, want %.9g", (double)in[i], (double)out[i], want);
    }
    float masked = -INFINITY, tiny;
    exp2_vec(&tiny, &masked, 1);
    assert_true(tiny >= 0 && tiny < 1e-37f);
}

static void test_exp2_accuracy_avx512(void **state)
{
    (void)state;
    check_exp2_accuracy(cpu_exp2_avx512);
}

static void test_exp2_accuracy_avx2(void **state)
{
    (void)state;
    check_exp2_accuracy(cpu_exp2_avx2);
}

/* The dispatched element-wise kernels (SwiGLU, RMSNorm, RoPE) and the streaming read with
 * `isa` active, against their references. With the plain kernels active they call the
 * references, and the comparisons would hold each to itself: tests of the avx2 and avx512
 * groups. Sizes leave vector tails (77, 300; RoPE head_dim 40 and 24). */
static void check_elementwise(cpu_isa isa)
{
    assert_int_equal(cpu_isa_set(isa), isa);
    enum { N = 77 };
    float gate[N], up[N], fast[N], ref[N];
    fill(gate, N, 6, 12.0f);
    fill(up, N, 7, 1.0f);
    gate[0] = -200.0f; /* exp overflow side: silu -> -0 */
    gate[1] = 200.0f;
    cpu_swiglu(ref, gate, up, N);
    cpu_swiglu_fast(fast, gate, up, N);
    assert_close(fast, ref, N, 1e-6);

    enum { D = 300 };
    float x[D], gain[D], o_fast[D], o_ref[D];
    fill(x, D, 8, 3.0f);
    fill(gain, D, 9, 1.0f);
    cpu_rmsnorm(o_ref, x, gain, D, 1e-5f);
    cpu_rmsnorm_fast(o_fast, x, gain, D, 1e-5f);
    assert_close(o_fast, o_ref, D, 1e-6);

    static const int head_dims[] = {40, 24, 64};
    for (int h = 0; h < 3; h++) {
        const int hd = head_dims[h], heads = 3, pos = 1234;
        float vec[3 * 64], want[3 * 64], table[64];
        fill(vec, (size_t)heads * hd, 10 + (uint64_t)h, 2.0f);
        memcpy(want, vec, sizeof(float) * (size_t)heads * hd);
        for (int i = 0; i < hd / 2; i++) { /* the RoPE table's row for pos, theta 10000 */
            const double angle = pos * pow(10000.0, -(double)(2 * i) / hd);
            table[2 * i] = (float)cos(angle);
            table[2 * i + 1] = (float)sin(angle);
        }
        cpu_rope_naive(want, heads, hd, pos, 10000.0);
        cpu_rope_fast(vec, heads, hd, table);
        assert_close(vec, want, (size_t)heads * hd, 1e-5);
    }

    enum { S = 1003 };
    float stream[S];
    double sum = 0;
    for (int i = 0; i < S; i++) {
        stream[i] = (float)(i % 17) - 8.0f;
        sum += stream[i];
    }
    assert_true(fabs(cpu_stream_sum(stream, S) - sum) < 1e-3);
    cpu_isa_set(CPU_ISA_AVX512); /* the widest again */
}

static void test_elementwise_avx512(void **state)
{
    (void)state;
    check_elementwise(CPU_ISA_AVX512);
}

static void test_elementwise_avx2(void **state)
{
    (void)state;
    check_elementwise(CPU_ISA_AVX2);
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

int main(int argc, char **argv)
{
    const struct CMUnitTest portable[] = {
        cmocka_unit_test(test_gemm_plain_matches_naive),
        cmocka_unit_test(test_swiglu_reference_by_hand),
        cmocka_unit_test(test_rmsnorm_softmax_argmax),
    };
    const struct CMUnitTest avx2[] = {
        cmocka_unit_test(test_gemm_avx2_matches_naive),
        cmocka_unit_test(test_gemm_small_subrange_avx2),
        cmocka_unit_test(test_gemm_panels_subrange_avx2),
        cmocka_unit_test(test_xpack_group_avx2),
        cmocka_unit_test(test_exp2_accuracy_avx2),
        cmocka_unit_test(test_elementwise_avx2),
    };
    const struct CMUnitTest avx512[] = {
        cmocka_unit_test(test_gemm_avx512_matches_naive),
        cmocka_unit_test(test_gemm_small_subrange_avx512),
        cmocka_unit_test(test_gemm_panels_subrange_avx512),
        cmocka_unit_test(test_exp2_accuracy_avx512),
        cmocka_unit_test(test_elementwise_avx512),
    };
    const isa_group groups[] = {ISA_GROUP(portable), ISA_GROUP(avx2), ISA_GROUP(avx512)};
    return isa_groups_run(argc, argv, groups, 3);
}
