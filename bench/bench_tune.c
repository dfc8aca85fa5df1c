/* bench_tune — how long `stallscope tune` searches the lesson's workload (issue 13's goal: a
 * 100-point search in at most 10 s on the 2-core VM). Prints figures; never fails on time.
 *
 *   bench_tune
 *
 * 1. The default search: every policy x budgets 256 ... 16384 x max-num-seqs 16 ... 256,
 *    105 points, of which one-step prefill under the 8000-token prompt cannot serve (checked,
 *    not simulated).
 * 2. 100 points that all run: chunked x 20 budgets from 256 to 16384 (geometric) x
 *    max-num-seqs 16 ... 256.
 * Each: wall time, CPU time (this process, user + system), points, points simulated, ms per
 * point and per simulated point. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "common/clock.h"
#include "common/err.h"
#include "experiment/config.h"
#include "tune/tune.h"

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static int bench(const char *what, tune_config *tc)
{
    char err[ERR_LEN];
    if (experiment_resolve(&tc->base, err) != 0) {
        fprintf(stderr, "bench_tune: %s\n", err);
        return -1;
    }
    tune_result res;
    const double c0 = cpu_s();
    const int64_t t0 = clock_now_ns();
    if (tune_search(tc, &res, NULL, NULL, err) != 0) {
        fprintf(stderr, "bench_tune: %s\n", err);
        tune_result_free(&res);
        return -1;
    }
    const double wall = (double)(clock_now_ns() - t0) / 1e9, cpu = cpu_s() - c0;
    char choice[64] = "none";
    if (res.choice >= 0)
        tune_point_name(&res.points[res.choice], choice, sizeof choice);
    printf("%s\n  points %d (simulated %d), wall %.2f s, CPU %.2f s, %.1f ms per point, "
           "%.1f ms per simulated point; choice %s\n",
           what, res.n_points, res.n_servable, wall, cpu, wall * 1e3 / res.n_points,
           res.n_servable ? wall * 1e3 / res.n_servable : 0.0, choice);
    tune_result_free(&res);
    return 0;
}

int main(void)
{
    char err[ERR_LEN];
    tune_config *tc = calloc(1, sizeof *tc);
    if (!tc || tune_defaults(tc, err) != 0) {
        fprintf(stderr, "bench_tune: %s\n", tc ? err : "out of memory");
        free(tc);
        return 1;
    }
    int rc = bench("1. default search of the lesson (SLOs " TUNE_DEFAULT_SLO ")", tc);
    if (rc == 0 && tune_defaults(tc, err) == 0) {
        tc->policies[0] = SCHED_CHUNKED;
        tc->n_policies = 1;
        tc->n_budgets = 20;
        for (int i = 0; i < tc->n_budgets; i++)
            tc->budgets[i] = (int)lround(256 * pow(64, i / 19.0));
        rc = bench("2. 100 points that all run: chunked x 20 budgets 256..16384 x 5 max-num-seqs",
                   tc);
    }
    free(tc);
    return rc == 0 ? 0 : 1;
}
