/* calibrate/calib_target_state — the sentinel's drift: none within the limit; the first
 * point past it names the stage after which the server moved, and what moved. Prefix caching
 * from two TTFTs; /metrics read for KV usage and the prefix cache's counters; the KV usage's
 * spread over the lone prefill probes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "calibrate/calib_target_admin.h"
#include "calibrate/calib_target_state.h"
#include "common/err.h"

static void test_drift(void **state)
{
    (void)state;
    calib_target_sentinel s[4] = {{.after = "start", .ttft_ns = 40e6, .step_ns = 8e6},
                                  {.after = "decode", .ttft_ns = 42e6, .step_ns = 8.2e6},
                                  {.after = "prefill", .ttft_ns = 41e6, .step_ns = 10.4e6},
                                  {.after = "interference", .ttft_ns = 60e6, .step_ns = 10.4e6}};
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

static void test_caching(void **state)
{
    (void)state;
    calib_target_kept k;
    memset(&k, 0, sizeof k);
    assert_int_equal(calib_target_prefix_caching(&k), -1); /* not measured */
    k.cache_first_ns = 100e6;
    k.cache_second_ns = 49e6;
    assert_int_equal(calib_target_prefix_caching(&k), 1);
    k.cache_second_ns = 51e6;
    assert_int_equal(calib_target_prefix_caching(&k), 0);
}

static void test_metrics(void **state)
{
    (void)state;
    /* vLLM V1: KV usage, the prefix cache's counters summed over two label sets */
    static const char page[] =
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n"
        "# TYPE vllm:prefix_cache_queries_total counter\n"
        "vllm:prefix_cache_queries_total{model_name=\"m\",engine=\"0\"} 1000\n"
        "vllm:prefix_cache_queries_total{model_name=\"m\",engine=\"1\"} 24\n"
        "# TYPE vllm:prefix_cache_hits_total counter\n"
        "vllm:prefix_cache_hits_total{model_name=\"m\"} 512\n";
    calib_target_metrics m;
    char err[ERR_LEN] = "";
    assert_int_equal(calib_target_metrics_parse(page, strlen(page), &m, err), 0);
    assert_true(m.kv_usage == 0.25 && m.cache_queries == 1024 && m.cache_hits == 512);
    /* llama.cpp: KV usage only */
    static const char llama[] = "llamacpp:kv_cache_usage_ratio 0.5\n";
    assert_int_equal(calib_target_metrics_parse(llama, strlen(llama), &m, err), 0);
    assert_true(m.kv_usage == 0.5 && m.cache_queries == -1 && m.cache_hits == -1 &&
                m.kv_cells == -1);
    /* a unified cache's occupied cells: ours, llama.cpp's older gauge (the largest series) */
    static const char cells[] =
        "stallscope_kv_cells_occupied{model_name=\"m\"} 12345\n";
    assert_int_equal(calib_target_metrics_parse(cells, strlen(cells), &m, err), 0);
    assert_true(m.kv_cells == 12345 && m.kv_usage == -1);
    static const char older[] = "llamacpp:kv_cache_usage_ratio 0.25\n"
                                "llamacpp:kv_cache_tokens{slot=\"0\"} 700\n"
                                "llamacpp:kv_cache_tokens{slot=\"1\"} 900\n";
    assert_int_equal(calib_target_metrics_parse(older, strlen(older), &m, err), 0);
    assert_true(m.kv_cells == 900 && m.kv_usage == 0.25);
    /* malformed: refused, nothing kept */
    static const char bad[] = "vllm:kv_cache_usage_perc{ 0.5\n";
    assert_int_equal(calib_target_metrics_parse(bad, strlen(bad), &m, err), -1);
    assert_true(m.kv_usage == -1);

    /* the spread over the scrapes that said it */
    calib_target_metrics v[4] = {{0.02, -1, -1, -1}, {-1, -1, -1, -1}, {0.41, -1, -1, -1},
                                 {0.10, -1, -1, -1}};
    double lo = 0, hi = 0;
    assert_true(fabs(calib_target_kv_spread(v, 4, &lo, &hi) - 0.39) < 1e-12);
    assert_true(lo == 0.02 && hi == 0.41);
    assert_true(calib_target_kv_spread(v, 2, NULL, NULL) == -1); /* one said it */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drift),
        cmocka_unit_test(test_caching),
        cmocka_unit_test(test_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
