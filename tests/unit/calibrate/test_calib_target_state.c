/* calibrate/calib_target_state — the sentinel's drift: none within the limit; the first
 * point past it names the stage after which the server moved, and what moved. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "calibrate/calib_target_state.h"

static void test_drift(void **state)
{
    (void)state;
    calib_target_sentinel s[4] = {{"start", 40e6, 8e6},
                                  {"decode", 42e6, 8.2e6},
                                  {"prefill", 41e6, 10.4e6},
                                  {"interference", 60e6, 10.4e6}};
    calib_target_drift d;
    /* within 10 % at decode; the step +30 % at prefill: moved after the prefill probes */
    calib_target_drift_of(s, 4, 0.10, &d);
    assert_int_equal(d.moved, 2);
    assert_string_equal(s[d.moved].after, "prefill");
    assert_false(d.moved_ttft);
    assert_true(fabs(d.by - 0.30) < 1e-9);
    assert_true(fabs(d.step - 0.30) < 1e-9);
    assert_true(fabs(d.ttft - 0.50) < 1e-9); /* the largest over every point */
    /* a limit above every move: none */
    calib_target_drift_of(s, 4, 0.60, &d);
    assert_int_equal(d.moved, -1);
    /* a server that got faster drifts too */
    s[1].ttft_ns = 30e6;
    calib_target_drift_of(s, 2, 0.10, &d);
    assert_int_equal(d.moved, 1);
    assert_true(d.moved_ttft);
    assert_true(fabs(d.by + 0.25) < 1e-9);
    /* one point, or a start with nothing measured: no drift */
    calib_target_drift_of(s, 1, 0.10, &d);
    assert_int_equal(d.moved, -1);
    s[0].step_ns = 0;
    calib_target_drift_of(s, 4, 0.10, &d);
    assert_int_equal(d.moved, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drift),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
