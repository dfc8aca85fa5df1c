/* analysis/sketch: the buckets tile the values, every value's bucket midpoint within the
 * stated bound, a histogram's quantiles against the exact ones, and a step's values in one
 * call (sketch_add_n) the same as one by one, to the bit. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "analysis/sketch.h"

#include "sketch_bound.h"

#define MS 1000000LL

/* sketch_add_n is n sketch_adds: the same count, extremes and sum (to the bit), and after
 * finish the same values (exact) or buckets (a budget crossed in the middle of a run). */
static void test_sketch_add_n(void **state)
{
    (void)state;
    const int64_t budgets[] = {INT64_MAX, 37, 1000, 5000};
    for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++)
        for (int trial = 0; trial < 20; trial++) {
            sketch one, many;
            sketch_init(&one, budgets[b]);
            sketch_init(&many, budgets[b]);
            int runs = 1 + (int)rnd(300);
            int64_t v = (int64_t)rnd(20 * MS);
            for (int k = 0; k < runs; k++) {
                if (rnd(3) != 0) /* often the same gap again, as a simulator's steps give */
                    v = (int64_t)rnd(4) == 0 ? (int64_t)rnd(300) : (int64_t)rnd(60 * MS);
                int64_t count = 1 + (int64_t)(rnd(4) == 0 ? rnd(300) : rnd(3));
                for (int64_t i = 0; i < count; i++)
                    assert_int_equal(sketch_add(&one, v), 0);
                assert_int_equal(sketch_add_n(&many, v, sketch_bucket(v), count), 0);
            }
            assert_int_equal(one.n, many.n);
            assert_int_equal(one.min, many.min);
            assert_int_equal(one.max, many.max);
            assert_memory_equal(&one.sum_ns, &many.sum_ns, sizeof one.sum_ns);
            assert_int_equal(sketch_exact(&one), sketch_exact(&many));
            assert_int_equal(sketch_finish(&one), 0);
            assert_int_equal(sketch_finish(&many), 0);
            if (sketch_exact(&one))
                assert_memory_equal(one.values, many.values, (size_t)one.n * sizeof *one.values);
            else
                assert_memory_equal(one.buckets, many.buckets,
                                    SKETCH_BUCKETS * sizeof *one.buckets);
            assert_true(sketch_quantile_ns(&one, 0.5) == sketch_quantile_ns(&many, 0.5));
            sketch_free(&one);
            sketch_free(&many);
        }
}

static void test_sketch_buckets(void **state)
{
    (void)state;
    /* Buckets tile the values: consecutive, no gap, no overlap, ascending. */
    int64_t prev_hi = -1;
    for (int b = 0; b < SKETCH_BUCKETS; b++) {
        int64_t lo, hi;
        sketch_bucket_range(b, &lo, &hi);
        assert_int_equal(lo, prev_hi + 1);
        assert_true(hi >= lo);
        assert_int_equal(sketch_bucket(lo), b);
        assert_int_equal(sketch_bucket(hi), b);
        prev_hi = hi;
    }
    assert_int_equal(prev_hi, INT64_MAX);
    /* Every value's midpoint within the stated error (random values over 12 decades). */
    for (int i = 0; i < 100000; i++) {
        int64_t v = (int64_t)pow(10, (double)rnd(1200000) / 100000.0) + (int64_t)rnd(1000);
        int64_t lo, hi;
        sketch_bucket_range(sketch_bucket(v), &lo, &hi);
        double mid = ((double)lo + (double)hi) / 2;
        assert_true(fabs(mid - (double)v) <= (double)v * SKETCH_RELATIVE_ERROR);
    }
    /* Quantiles from a histogram vs the exact ones. */
    sketch ex, hist;
    sketch_init(&ex, INT64_MAX);
    sketch_init(&hist, 10);
    for (int i = 0; i < 20000; i++) {
        int64_t v = (int64_t)(rnd(2000) == 0 ? 100 * MS + rnd(50 * MS) : 5 * MS + rnd(2 * MS));
        assert_int_equal(sketch_add(&ex, v), 0);
        assert_int_equal(sketch_add(&hist, v), 0);
    }
    assert_true(sketch_exact(&ex));
    assert_false(sketch_exact(&hist));
    sketch_finish(&ex);
    sketch_finish(&hist);
    const double ps[] = {0.001, 0.5, 0.9, 0.99, 0.999, 1.0};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        assert_within(sketch_quantile_ns(&hist, ps[i]), sketch_quantile_ns(&ex, ps[i]), "quantile");
    assert_float_equal(sketch_quantile_ns(&hist, 1.0), (double)ex.max, 0);
    sketch_free(&ex);
    sketch_free(&hist);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sketch_buckets),
        cmocka_unit_test(test_sketch_add_n),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
