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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
