/* metrics: histogram buckets (le is inclusive, cumulative output) and the Prometheus text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "server/metrics.h"

static void test_buckets(void **state)
{
    (void)state;
    metrics_state m;
    metrics_init(&m);
    /* TTFT bounds start 0.001, 0.005, 0.01 ...; a value equal to a bound is in its bucket. */
    metrics_hist_observe(&m.ttft, 0.0005);
    metrics_hist_observe(&m.ttft, 0.001);
    metrics_hist_observe(&m.ttft, 0.0011);
    metrics_hist_observe(&m.ttft, 1e9); /* +Inf */
    assert_int_equal(m.ttft.counts[0], 2);
    assert_int_equal(m.ttft.counts[1], 1);
    assert_int_equal(m.ttft.counts[m.ttft.n_bounds], 1);
    assert_int_equal(m.ttft.count, 4);
    assert_true(m.ttft.sum > 1e9);
}

static void test_format(void **state)
{
    (void)state;
    metrics_state m;
    metrics_init(&m);
    m.running = 3;
    m.waiting = 1;
    m.kv_usage = 0.25;
    m.prompt_tokens = 8000;
    m.generation_tokens = 42;
    m.preemptions = 2;
    m.heap_bytes = 716800;
    m.kv_cells_occupied = 16414;
    metrics_hist_observe(&m.itl, 0.005);
    metrics_hist_observe(&m.itl, 0.146);
    metrics_hist_observe(&m.iteration_tokens, 8032);
    buf b = {0};
    metrics_format(&m, "llama \"8b\"", &b);
    const char *t = b.data;
    const char *l = "{model_name=\"llama \\\"8b\\\"\"";
    char want[256];
#define HAS(fmt)                                                                               \
    do {                                                                                       \
        snprintf(want, sizeof want, fmt, l);                                                   \
        if (!strstr(t, want))                                                                  \
            fail_msg("missing: %s", want);                                                     \
    } while (0)
    HAS("vllm:num_requests_running%s} 3\n");
    HAS("vllm:num_requests_waiting%s} 1\n");
    HAS("vllm:kv_cache_usage_perc%s} 0.25\n");
    HAS("vllm:prompt_tokens_total%s} 8000\n");
    HAS("vllm:generation_tokens_total%s} 42\n");
    HAS("vllm:num_preemptions_total%s} 2\n");
    HAS("stallscope_heap_bytes%s} 716800\n");
    HAS("stallscope_kv_cells_occupied%s} 16414\n");
    HAS("vllm:inter_token_latency_seconds_bucket%s,le=\"0.01\"} 1\n");
    HAS("vllm:inter_token_latency_seconds_bucket%s,le=\"0.15\"} 2\n"); /* cumulative */
    HAS("vllm:inter_token_latency_seconds_bucket%s,le=\"+Inf\"} 2\n");
    HAS("vllm:inter_token_latency_seconds_count%s} 2\n");
    HAS("vllm:iteration_tokens_total_bucket%s,le=\"8192\"} 1\n");
    HAS("vllm:iteration_tokens_total_bucket%s,le=\"4096\"} 0\n");
    HAS("vllm:time_to_first_token_seconds_count%s} 0\n");
    assert_non_null(strstr(t, "# TYPE vllm:prompt_tokens_total counter\n"));
    assert_non_null(strstr(t, "# HELP vllm:prompt_tokens_total "));
    assert_null(strstr(t, "# TYPE vllm:prompt_tokens counter"));
    assert_non_null(strstr(t, "# TYPE stallscope_engine_steps_total counter\n"));
    assert_null(strstr(t, "stallscope:"));
    assert_non_null(strstr(t, "# TYPE vllm:time_to_first_token_seconds histogram\n"));
    assert_non_null(strstr(t, "# TYPE vllm:kv_cache_usage_perc gauge\n"));
    assert_non_null(strstr(t, "# TYPE stallscope_heap_bytes gauge\n"));
    /* Every line is a comment or "name{labels} value". */
    for (const char *line = t; *line;) {
        const char *end = strchr(line, '\n');
        assert_non_null(end);
        if (line[0] != '#') {
            const char *brace = memchr(line, '{', (size_t)(end - line));
            const char *close = memchr(line, '}', (size_t)(end - line));
            assert_true(brace && close && close[1] == ' ');
        }
        line = end + 1;
    }
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets),
        cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
