/* engine/cpu/cpu_sample: what either sampler must do (a valid id, never the banned one,
 * greedy the argmax, draws that follow softmax(logits / T)), and the AVX-512 and AVX2
 * samplers against the naive one.
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

#include "engine/cpu/cpu_kernels.h"
#include "engine/cpu/cpu_sample.h"

#include "kernel_check.h"

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
 * within rounding of a boundary: allow 1 in 100). Without a vector path cpu_sample is
 * cpu_sample_naive and the comparison would be the reference against itself: a test of the
 * avx2 and avx512 groups, each with its instruction set made the active one. */
static void check_sampler_matches_naive(cpu_isa isa)
{
    assert_int_equal(cpu_isa_set(isa), isa);
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
    check_sampler_properties(cpu_sample);
    cpu_isa_set(CPU_ISA_AVX512); /* the widest again */
}

static void test_sampler_matches_naive_avx2(void **state)
{
    (void)state;
    check_sampler_matches_naive(CPU_ISA_AVX2);
}

static void test_sampler_matches_naive_avx512(void **state)
{
    (void)state;
    check_sampler_matches_naive(CPU_ISA_AVX512);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest portable[] = {
        cmocka_unit_test(test_sampler_properties),
    };
    const struct CMUnitTest avx2[] = {
        cmocka_unit_test(test_sampler_matches_naive_avx2),
    };
    const struct CMUnitTest avx512[] = {
        cmocka_unit_test(test_sampler_matches_naive_avx512),
    };
    const isa_group groups[] = {ISA_GROUP(portable), ISA_GROUP(avx2), ISA_GROUP(avx512)};
    return isa_groups_run(argc, argv, groups, 3);
}
