/* analysis/timeline: the fast sort of the gaps against qsort. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "analysis/timeline.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The fast sort against qsort, on random values with many repeats (simulated gaps repeat
 * the same step time) and on already sorted and reversed input. */
static void test_sort_matches_qsort(void **state)
{
    (void)state;
    const int64_t n = 200003;
    double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    uint64_t x = 88172645463325252ULL;
    for (int shape = 0; shape < 4; shape++) {
        for (int64_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            double r = (double)(x % 1000003) / 7.0;
            a[i] = shape == 0 ? r : shape == 1 ? (double)(x % 3) : shape == 2 ? (double)i
                                                                 : (double)(n - i);
        }
        memcpy(b, a, (size_t)n * sizeof *a);
        analysis_sort_doubles(a, n);
        qsort(b, (size_t)n, sizeof *b, cmp_double);
        assert_memory_equal(a, b, (size_t)n * sizeof *a);
    }
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sort_matches_qsort),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
