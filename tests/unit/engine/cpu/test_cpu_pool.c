/* engine/cpu/cpu_pool: the thread pool runs every task once; cpu_pool_run_ahead tells each
 * task the one its thread runs next; a solo pool calls its caller by the index it was given. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
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

/* What each thread ran, in order, and the next each task was told. */
typedef struct ahead_job {
    int next_of[500];
    int hits[500];
    int order[3][500];
    int n_order[3];
} ahead_job;

static void ahead_task(void *arg, int task, int next, int thread)
{
    ahead_job *j = arg;
    j->hits[task]++;
    j->next_of[task] = next;
    j->order[thread][j->n_order[thread]++] = task;
}

static void test_pool_run_ahead_names_the_next_task(void **state)
{
    (void)state;
    char err[ERR_LEN];
    for (int threads = 1; threads <= 3; threads++) {
        cpu_pool *pool = cpu_pool_create(threads, err);
        assert_non_null(pool);
        for (int round = 0; round < 50; round++) {
            ahead_job *job = calloc(1, sizeof *job);
            assert_non_null(job);
            const int n = 1 + round * 37 % 500;
            cpu_pool_run_ahead(pool, n, ahead_task, job);
            int ran = 0, named = 0;
            for (int t = 0; t < threads; t++) {
                /* a task's next, when named, is the task its thread ran after it; the
                 * thread's last is told none */
                for (int i = 0; i < job->n_order[t]; i++) {
                    const int task = job->order[t][i];
                    const int after = i + 1 < job->n_order[t] ? job->order[t][i + 1] : -1;
                    if (job->next_of[task] != -1 || after == -1)
                        assert_int_equal(job->next_of[task], after);
                    named += job->next_of[task] != -1;
                }
                ran += job->n_order[t];
            }
            assert_int_equal(ran, n);
            /* all but the last task of each thread claimed ahead, but for the tasks too
             * few to go round: at least n - 2 x threads */
            assert_true(named >= n - 2 * threads);
            for (int i = 0; i < 500; i++)
                assert_int_equal(job->hits[i], i < n ? 1 : 0);
            free(job);
        }
        cpu_pool_free(pool);
    }
}

/* ---- a solo pool ---------------------------------------------------------------------- */

typedef struct thread_job {
    int thread[8];
    int next[8];
} thread_job;

static void thread_task(void *arg, int task, int thread)
{
    ((thread_job *)arg)->thread[task] = thread;
}

static void thread_ahead_task(void *arg, int task, int next, int thread)
{
    ((thread_job *)arg)->thread[task] = thread;
    ((thread_job *)arg)->next[task] = next;
}

/* A solo pool runs every task on its caller, in order, and tells each the thread index it
 * was made with; a negative index is refused. */
static void test_solo_pool_names_its_thread(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    assert_null(cpu_pool_create_solo(-1, err));
    assert_non_null(strstr(err, "-1"));
    for (int self = 0; self < 3; self++) {
        cpu_pool *pool = cpu_pool_create_solo(self, err);
        assert_non_null(pool);
        assert_int_equal(cpu_pool_threads(pool), 1);
        thread_job job;
        memset(&job, 0xff, sizeof job);
        cpu_pool_run(pool, 5, thread_task, &job);
        for (int t = 0; t < 8; t++)
            assert_int_equal(job.thread[t], t < 5 ? self : -1);
        memset(&job, 0xff, sizeof job);
        cpu_pool_run_ahead(pool, 4, thread_ahead_task, &job);
        for (int t = 0; t < 4; t++) {
            assert_int_equal(job.thread[t], self);
            assert_int_equal(job.next[t], t + 1 < 4 ? t + 1 : -1);
        }
        cpu_pool_free(pool);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_runs_every_task_once),
        cmocka_unit_test(test_pool_run_ahead_names_the_next_task),
        cmocka_unit_test(test_solo_pool_names_its_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
