/* engine/cpu/cpu_kernels: every fast kernel against its plain reference (GEMM, the
 * small-batch GEMM, exp2, SwiGLU, RMSNorm, softmax, argmax), on shapes that hit the vector
 * tails and block edges.
 *
 * Groups, one ctest test each (the line below; CMakeLists.txt reads it): the kernels of
 * each instruction set (kernel_check.h). A group whose instructions this CPU lacks runs
 * none of its assertions, so it exits 77 and ctest reports it skipped, with the reason
 * printed — never passed.
 * ctest: groups portable avx512 */
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

int main(int argc, char **argv)
{
    const struct CMUnitTest portable[] = {
        cmocka_unit_test(test_gemm_plain_matches_naive),
        cmocka_unit_test(test_swiglu_reference_by_hand),
        cmocka_unit_test(test_rmsnorm_softmax_argmax),
    };
    const struct CMUnitTest avx512[] = {
        cmocka_unit_test(test_gemm_avx512_matches_naive),
        cmocka_unit_test(test_gemm_small_subrange),
        cmocka_unit_test(test_exp2_accuracy),
        cmocka_unit_test(test_swiglu_fast),
    };
    const isa_group groups[] = {ISA_GROUP(portable), ISA_GROUP(avx512)};
    return isa_groups_run(argc, argv, groups, 2);
}
