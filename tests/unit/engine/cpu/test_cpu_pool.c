/* engine/cpu/cpu_pool: the thread pool runs every task once. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "engine/cpu/cpu_pool.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_runs_every_task_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
