/* kernel_check — what the cpu engine's tests share (test_cpu_kernels, test_cpu_attn,
 * test_cpu_sample, test_cpu_forward): random inputs, the relative difference of a fast
 * kernel's output (or a forward pass's logits) from its reference, and the groups per
 * instruction set a kernel test's main runs (each group a ctest test through the file's
 * "ctest: groups" line). Include after <cmocka.h>. */
#ifndef STALLSCOPE_TEST_KERNEL_CHECK_H
#define STALLSCOPE_TEST_KERNEL_CHECK_H
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/rng.h"
#include "engine/cpu/cpu_attn.h"
#include "engine/cpu/cpu_kernels.h"

static inline void fill(float *x, size_t n, uint64_t seed, float scale)
{
    uint64_t state = seed;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(2 * rng_uniform(&state) - 1) * scale;
}

/* max |a - b| / (1 + max |b|) */
static inline double rel_diff(const float *a, const float *b, size_t n)
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

/* ---- groups per instruction set --------------------------------------------------------- */

/* One group of a kernel test: the tests of the kernels one instruction set runs. Its name is
 * the ctest group's (the file's "ctest: groups" line) and the command's argument. */
typedef struct isa_group {
    const char *name; /* "portable", "avx2" or "avx512" */
    const struct CMUnitTest *tests;
    size_t n_tests;
} isa_group;

#define ISA_GROUP(tests) ((isa_group){#tests, tests, sizeof tests / sizeof tests[0]})

/* Runs the group named by argv[1] ("all", or none given: every group). A group whose
 * instructions this CPU lacks runs none of its assertions and says why; when no group ran,
 * the exit is 77, which ctest reports as skipped, never passed. 2: an unknown group. */
static inline int isa_groups_run(int argc, char **argv, const isa_group *groups, int n_groups)
{
    const char *group = argc > 1 ? argv[1] : "all";
    const bool all = strcmp(group, "all") == 0;
    bool known = all;
    for (int g = 0; g < n_groups; g++)
        known |= strcmp(group, groups[g].name) == 0;
    if (!known) {
        fprintf(stderr, "usage: %s [", argv[0]);
        for (int g = 0; g < n_groups; g++)
            fprintf(stderr, "%s|", groups[g].name);
        fprintf(stderr, "all]\n");
        return 2;
    }
    int failed = 0, ran = 0;
    for (int g = 0; g < n_groups; g++) {
        const isa_group *G = &groups[g];
        if (!all && strcmp(group, G->name) != 0)
            continue;
        const char *why = cpu_isa_cap() == CPU_ISA_AVX512
                              ? "this CPU has no"
                              : "STALLSCOPE_CPU_ISA caps the kernels below, or this CPU has no";
        if (strcmp(G->name, "avx2") == 0 && !cpu_avx2_available()) {
            printf("SKIP avx2: %s AVX2 + FMA; the AVX2 kernels were not tested\n", why);
            continue;
        }
        if (strcmp(G->name, "avx512") == 0 && !cpu_simd_available()) {
            printf("SKIP avx512: %s AVX-512 F + DQ; the AVX-512 kernels were not tested\n", why);
            continue;
        }
        failed += _cmocka_run_group_tests(G->name, G->tests, G->n_tests, NULL, NULL);
        ran++;
    }
    if (failed)
        return 1;
    return ran ? 0 : 77;
}

#endif
