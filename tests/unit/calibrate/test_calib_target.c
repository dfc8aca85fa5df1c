/* calibrate/calib_target: --count-tokens read into the configuration. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "calibrate/calib_target.h"
#include "calibrate/calib_target_fit.h"
#include "common/err.h"

static void test_count_parse(void **state)
{
    (void)state;
    calib_target_config cfg;
    calib_target_config_init(&cfg);
    char err[ERR_LEN] = "";
    assert_int_equal(cfg.count_tokens, CALIB_TARGET_COUNT_AUTO);
    assert_int_equal(calib_target_count_parse(&cfg, "usage", err), 0);
    assert_int_equal(cfg.count_tokens, CALIB_TARGET_COUNT_USAGE);
    assert_int_equal(calib_target_count_parse(&cfg, "stream", err), 0);
    assert_int_equal(cfg.count_tokens, CALIB_TARGET_COUNT_STREAM);
    assert_string_equal(calib_target_count_name(cfg.count_tokens), "stream");
    assert_int_equal(calib_target_count_parse(&cfg, "auto", err), 0);
    assert_int_equal(cfg.count_tokens, CALIB_TARGET_COUNT_AUTO);
    assert_int_equal(calib_target_count_parse(&cfg, "events", err), -1);
    assert_string_equal(err, "'events' is not auto, stream or usage");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
