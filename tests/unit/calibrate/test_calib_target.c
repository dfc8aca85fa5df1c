/* calibrate/calib_target: --count-tokens read into the configuration. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>

#include <jansson.h>

#include "calibrate/calib_target.h"
#include "calibrate/calib_target_fit.h"
#include "client/driver.h"
#include "common/err.h"
#include "workload/workload.h"

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

/* Every probe prompt is fresh from its first tokens: calib_target posts prompt `index` of
 * its salt (driver_build_body), and over 400 consecutive indices no two prompts share more
 * than 2 leading tokens (a prefix cache's block is 16; a radix cache would save at most 2). */
static void test_prompts_fresh(void **state)
{
    (void)state;
    driver_api api;
    driver_api_defaults(&api);
    api.token_ids = true;
    api.vocab = 128256;
    workload_config wl;
    workload_default(&wl);
    enum { N = 400, LEN = 32 };
    static int ids[N][LEN];
    char err[ERR_LEN] = "";
    const uint64_t salt = 0x5eed1234ULL;
    for (int i = 0; i < N; i++) {
        size_t len = 0;
        char *body = driver_build_body(&api, &wl, salt, 0, i, LEN, 1, -1, &len, err);
        assert_non_null(body);
        json_t *root = json_loads(body, 0, NULL);
        json_t *prompt = json_object_get(root, "prompt");
        assert_int_equal(json_array_size(prompt), LEN);
        for (int k = 0; k < LEN; k++)
            ids[i][k] = (int)json_integer_value(json_array_get(prompt, (size_t)k));
        json_decref(root);
        free(body);
    }
    int longest = 0;
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++) {
            int k = 0;
            while (k < LEN && ids[i][k] == ids[j][k])
                k++;
            longest = k > longest ? k : longest;
        }
    assert_true(longest <= 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_parse),
        cmocka_unit_test(test_prompts_fresh),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
