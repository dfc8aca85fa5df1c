/* sketch_bound — what the streaming analysis' tests share (test_stream, test_sketch,
 * test_attribution): a seeded xorshift for random runs, values and stalls, and a
 * histogram's figure held to the sketch's stated relative error of the exact one
 * (analysis/sketch.h). Include after <cmocka.h>. */
#ifndef STALLSCOPE_TEST_SKETCH_BOUND_H
#define STALLSCOPE_TEST_SKETCH_BOUND_H
#include <math.h>
#include <stdint.h>

#include "analysis/sketch.h"

static uint64_t rng_state = 88172645463325252ULL;
static inline uint64_t rnd(uint64_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state % n;
}

static inline void assert_within(double sketched, double exact, const char *what)
{
    double bound = exact * SKETCH_RELATIVE_ERROR;
    if (!(fabs(sketched - exact) <= bound + 1e-12))
        fail_msg("%s: %.9f vs exact %.9f: off by more than %.4f %%", what, sketched, exact,
                 100 * SKETCH_RELATIVE_ERROR);
}

#endif
