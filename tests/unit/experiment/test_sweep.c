/* experiment/sweep: the axes taken from argv and the sweep's plan of points. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "experiment/config.h"
#include "experiment/pair.h"
#include "experiment/runner.h"
#include "experiment/sweep.h"

static void test_sweep_plan(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    experiment_sweep *sw = calloc(1, sizeof *sw);
    assert_non_null(sw);
    experiment_defaults(&sw->base, EXPERIMENT_SIM);
    char *argv[] = {"--prompt-tokens", "4k,8k", "--max-num-batched-tokens=16384,4096",
                    "--users", "8"};
    char *rest[8];
    int n_rest = 0;
    assert_int_equal(experiment_axes_from_argv(5, argv, sw->axes, &sw->n_axes, rest, &n_rest, err),
                     0);
    assert_int_equal(sw->n_axes, 2);
    assert_int_equal(n_rest, 2); /* --users 8: one value, passed through */
    assert_true(sw->axes[1].server_side);
    assert_int_equal(experiment_sweep_plan(sw, err), 0);
    assert_int_equal(sw->n_points, 4);
    /* The first axis varies fastest; 8k under a 4096 budget with one-step prefill is refused. */
    char desc[128];
    experiment_sweep_point_desc(sw, &sw->points[3], desc, sizeof desc);
    assert_string_equal(desc, "prompt-tokens=8k max-num-batched-tokens=4096");
    assert_string_equal(sw->points[3].status, "refused");
    assert_string_equal(sw->points[2].status, "ok");
    experiment_config pc;
    assert_int_equal(experiment_sweep_point_config(sw, &sw->points[2], &pc, err), 0);
    assert_int_equal(pc.wl.prompt_tokens, 4000);
    assert_int_equal(pc.sched.max_num_batched_tokens, 4096);
    /* A bad value is bad input before anything runs, through the option's own parser. */
    snprintf(sw->axes[0].values[1], sizeof sw->axes[0].values[1], "8q");
    assert_int_equal(experiment_sweep_plan(sw, err), -1);
    assert_non_null(strstr(err, "--prompt-tokens"));
    free(sw);
}

/* Issue 28, point 15: a saturation sweep. --max-concurrency, --burstiness and --num-prompts
 * are axes (--max-concurrency 2,4 was refused as "not a size": it was not one), the error
 * and the list name every axis; --rate-search K runs the request rate max first, and its
 * measured throughput sets the K rates after it (R/K ... R). */
static void test_sweep_saturation(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    experiment_sweep *sw = calloc(1, sizeof *sw);
    assert_non_null(sw);
    experiment_defaults(&sw->base, EXPERIMENT_SIM);
    char *argv[] = {"--max-concurrency", "2,4", "--num-prompts", "10"};
    char *rest[8];
    int n_rest = 0;
    assert_int_equal(experiment_axes_from_argv(4, argv, sw->axes, &sw->n_axes, rest, &n_rest, err),
                     0);
    assert_int_equal(sw->n_axes, 1);
    assert_string_equal(sw->axes[0].name, "max-concurrency");
    sw->base.wl.users = 0;
    sw->base.wl.num_prompts = 10;
    assert_int_equal(experiment_sweep_plan(sw, err), 0);
    assert_int_equal(sw->n_points, 2);
    experiment_config pc;
    assert_int_equal(experiment_sweep_point_config(sw, &sw->points[1], &pc, err), 0);
    assert_int_equal(pc.wl.max_concurrency, 4);
    assert_true(pc.wl.until_trace_end);
    char names[512];
    experiment_axes_names(names, sizeof names);
    assert_non_null(strstr(names, "--request-rate, --max-concurrency, --burstiness, "
                                  "--num-prompts and --prefix-caching"));
    /* prefix caching varies as a server setting, off and on */
    experiment_sweep *sw2 = calloc(1, sizeof *sw2);
    assert_non_null(sw2);
    char *argv2[] = {"--prefix-caching", "off,on"};
    char *rest2[2];
    int n_rest2 = 0;
    assert_int_equal(experiment_axes_from_argv(2, argv2, sw2->axes, &sw2->n_axes, rest2,
                                               &n_rest2, err), 0);
    assert_int_equal(sw2->n_axes, 1);
    assert_true(sw2->axes[0].server_side);
    assert_int_equal(sw2->axes[0].n_values, 2);
    free(sw2);

    /* --rate-search 3 in the simulator: 30 prompts at once, then three rates up to it */
    memset(sw, 0, sizeof *sw);
    experiment_defaults(&sw->base, EXPERIMENT_SIM);
    sw->base.wl.users = 0;
    sw->base.wl.no_inject = true;
    sw->base.no_baseline = true;
    sw->base.wl.num_prompts = 30;
    sw->base.duration_until_end = true;
    sw->rate_search = 3;
    assert_int_equal(experiment_sweep_plan(sw, err), 0);
    assert_int_equal(sw->n_points, 4);
    assert_string_equal(sw->axes[0].values[3], "max");
    char dir[] = "/tmp/test_sweep_rate_XXXXXX";
    assert_non_null(mkdtemp(dir));
    experiment_runner runner;
    assert_int_equal(experiment_runner_sim(&runner, err), 0);
    experiment_io io = {.out_dir = dir};
    assert_int_equal(experiment_sweep_run(sw, &runner, &io, err), 0);
    experiment_runner_free(&runner);
    const double r = sw->points[0].request_throughput;
    assert_true(r > 0);
    for (int k = 1; k < 4; k++) {
        assert_string_equal(sw->points[k].status, "ok");
        char want[64];
        snprintf(want, sizeof want, "%.4g", r * k / 3);
        assert_string_equal(sw->axes[0].values[k], want);
        /* each ran at its rate: a lower rate, a lower throughput than the point at once */
        assert_true(sw->points[k].request_throughput > 0);
        assert_true(sw->points[k].request_throughput <= r * 1.05);
    }
    assert_true(sw->points[1].request_throughput < sw->points[3].request_throughput);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    free(sw);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep_plan),
        cmocka_unit_test(test_sweep_saturation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
