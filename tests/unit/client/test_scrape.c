/* client/scrape: the exposition's names mapped to server_metrics.csv's columns for vLLM,
 * SGLang, llama.cpp and stallscope serve (whose own page the parser reads strictly), and the
 * rows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "client/prom.h"
#include "client/scrape.h"
#include "common/buf.h"
#include "common/err.h"
#include "server/metrics.h"

#include "prom_collect.h"

/* ---- the columns ------------------------------------------------------------------------ */

static void frame_ok(const char *text, scrape_frame *f)
{
    char err[ERR_LEN] = "";
    if (scrape_frame_parse(f, text, strlen(text), err) != 0)
        fail_msg("refused: %s", err);
}

static void test_vllm(void **state)
{
    (void)state;
    scrape_frame f;
    /* Two engines (data parallel) of one model: counts add up, the fuller cache counts. */
    frame_ok("# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
             "# TYPE vllm:num_requests_running gauge\n"
             "vllm:num_requests_running{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B\"} 20.0\n"
             "vllm:num_requests_running{engine=\"1\",model_name=\"meta-llama/Llama-3.1-8B\"} 12.0\n"
             "# TYPE vllm:num_requests_waiting gauge\n"
             "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 1.0\n"
             "vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 0.0\n"
             "# TYPE vllm:kv_cache_usage_perc gauge\n"
             "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n"
             "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.5\n"
             "# TYPE vllm:prompt_tokens_total counter\n"
             "vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} 8032.0\n"
             "vllm:prompt_tokens_total{engine=\"1\",model_name=\"m\"} 100.0\n"
             "# TYPE vllm:generation_tokens_total counter\n"
             "vllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} 5000.0\n"
             "# TYPE vllm:iteration_tokens_total histogram\n"
             "vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"1.0\",model_name=\"m\"} 0.0\n"
             "vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 300.0\n"
             "vllm:iteration_tokens_total_count{engine=\"0\",model_name=\"m\"} 300.0\n"
             "vllm:iteration_tokens_total_sum{engine=\"0\",model_name=\"m\"} 13132.0\n"
             "# TYPE vllm:time_to_first_token_seconds histogram\n"
             "vllm:time_to_first_token_seconds_count{model_name=\"m\"} 4.0\n"
             "# TYPE python_gc_objects_collected_total counter\n"
             "python_gc_objects_collected_total{generation=\"0\"} 1234.0\n",
             &f);
    assert_true(f.has[SCRAPE_RUNNING] && f.value[SCRAPE_RUNNING] == 32);
    assert_true(f.has[SCRAPE_WAITING] && f.value[SCRAPE_WAITING] == 1);
    assert_true(f.has[SCRAPE_KV_USAGE] && f.value[SCRAPE_KV_USAGE] == 0.5);
    assert_true(f.has[SCRAPE_PROMPT_TOKENS] && f.value[SCRAPE_PROMPT_TOKENS] == 8132);
    assert_true(f.has[SCRAPE_GENERATION_TOKENS] && f.value[SCRAPE_GENERATION_TOKENS] == 5000);
    assert_true(f.has[SCRAPE_STEPS] && f.value[SCRAPE_STEPS] == 300);

    /* Older vLLM: gpu_cache_usage_perc; with both, kv_cache_usage_perc wins in any order. */
    frame_ok("vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.75\n", &f);
    assert_true(f.has[SCRAPE_KV_USAGE] && f.value[SCRAPE_KV_USAGE] == 0.75);
    assert_false(f.has[SCRAPE_RUNNING]);
    frame_ok("vllm:gpu_cache_usage_perc 0.75\nvllm:kv_cache_usage_perc 0.125\n"
             "vllm:gpu_cache_usage_perc 0.9\n",
             &f);
    assert_true(f.value[SCRAPE_KV_USAGE] == 0.125);
    assert_int_equal(f.rank[SCRAPE_KV_USAGE], 0);
    /* NaN (a gauge not set yet) gives no value. */
    frame_ok("vllm:num_requests_waiting NaN\n", &f);
    assert_false(f.has[SCRAPE_WAITING]);
}

static void test_sglang(void **state)
{
    (void)state;
    scrape_frame f;
    frame_ok("# HELP sglang:num_running_reqs The number of running requests.\n"
             "# TYPE sglang:num_running_reqs gauge\n"
             "sglang:num_running_reqs{model_name=\"Qwen/Qwen2.5-7B\"} 8.0\n"
             "# TYPE sglang:num_queue_reqs gauge\n"
             "sglang:num_queue_reqs{model_name=\"Qwen/Qwen2.5-7B\"} 4.0\n"
             "# TYPE sglang:token_usage gauge\n"
             "sglang:token_usage{model_name=\"Qwen/Qwen2.5-7B\"} 0.52\n"
             "# TYPE sglang:prompt_tokens_total counter\n"
             "sglang:prompt_tokens_total{model_name=\"Qwen/Qwen2.5-7B\"} 16384.0\n"
             "# TYPE sglang:generation_tokens_total counter\n"
             "sglang:generation_tokens_total{model_name=\"Qwen/Qwen2.5-7B\"} 2048.0\n"
             "sglang:cache_hit_rate{model_name=\"Qwen/Qwen2.5-7B\"} 0.28\n",
             &f);
    assert_true(f.value[SCRAPE_RUNNING] == 8 && f.value[SCRAPE_WAITING] == 4);
    assert_true(f.value[SCRAPE_KV_USAGE] == 0.52);
    assert_true(f.value[SCRAPE_PROMPT_TOKENS] == 16384);
    assert_true(f.value[SCRAPE_GENERATION_TOKENS] == 2048);
    assert_false(f.has[SCRAPE_STEPS]);
}

static void test_llamacpp(void **state)
{
    (void)state;
    scrape_frame f;
    frame_ok("# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
             "# TYPE llamacpp:prompt_tokens_total counter\n"
             "llamacpp:prompt_tokens_total 1200\n"
             "# TYPE llamacpp:tokens_predicted_total counter\n"
             "llamacpp:tokens_predicted_total 39080\n"
             "# TYPE llamacpp:n_decode_total counter\n"
             "llamacpp:n_decode_total 39303\n"
             "# TYPE llamacpp:requests_processing gauge\n"
             "llamacpp:requests_processing 4\n"
             "# TYPE llamacpp:requests_deferred gauge\n"
             "llamacpp:requests_deferred 46\n"
             "llamacpp:predicted_tokens_seconds 0\n",
             &f);
    assert_true(f.value[SCRAPE_RUNNING] == 4 && f.value[SCRAPE_WAITING] == 46);
    assert_false(f.has[SCRAPE_KV_USAGE]); /* current builds export none */
    assert_true(f.value[SCRAPE_PROMPT_TOKENS] == 1200);
    assert_true(f.value[SCRAPE_GENERATION_TOKENS] == 39080);
    assert_true(f.value[SCRAPE_STEPS] == 39303);
    frame_ok("llamacpp:kv_cache_usage_ratio 0.3\n", &f); /* older builds */
    assert_true(f.has[SCRAPE_KV_USAGE] && f.value[SCRAPE_KV_USAGE] == 0.3);
    /* A server with none of the names: nothing. */
    frame_ok("# TYPE up gauge\nup 1\nprocess_cpu_seconds_total 3\n", &f);
    for (int c = 0; c < SCRAPE_COLUMNS; c++)
        assert_false(f.has[c]);
}

/* stallscope serve's own page, as metrics_format writes it. */
static void test_stallscope(void **state)
{
    (void)state;
    metrics_state m;
    metrics_init(&m);
    m.running = 31;
    m.waiting = 2;
    m.kv_usage = 0.375;
    m.prompt_tokens = 8000;
    m.generation_tokens = 4242;
    m.steps = 900;
    metrics_hist_observe(&m.iteration_tokens, 32);
    metrics_hist_observe(&m.iteration_tokens, 8032);
    buf b = {0};
    metrics_format(&m, "llama \"8b\"\\", &b);
    scrape_frame f;
    frame_ok(b.data, &f);
    assert_true(f.value[SCRAPE_RUNNING] == 31 && f.value[SCRAPE_WAITING] == 2);
    assert_true(f.value[SCRAPE_KV_USAGE] == 0.375);
    assert_true(f.value[SCRAPE_PROMPT_TOKENS] == 8000);
    assert_true(f.value[SCRAPE_GENERATION_TOKENS] == 4242);
    /* vLLM's histogram count first; our own step counter only where it is absent. */
    assert_true(f.value[SCRAPE_STEPS] == 2 && f.rank[SCRAPE_STEPS] == 0);
    /* Strict 0.0.4: every *_total sample belongs to a family its # TYPE named a counter. */
    static seen v;
    parse_ok(b.data, &v);
    int counters = 0;
    for (int i = 0; i < v.n; i++) {
        size_t n = strlen(v.names[i]);
        if (n > 6 && strcmp(v.names[i] + n - 6, "_total") == 0 &&
            strstr(v.names[i], "iteration_tokens") == NULL) {
            assert_int_equal(v.s[i].type, PROM_COUNTER);
            assert_string_equal(v.families[i], v.names[i]); /* TYPE named it whole */
            counters++;
        }
        assert_int_not_equal(v.s[i].type, PROM_UNTYPED);
        assert_false(strncmp(v.names[i], "stallscope:", 11) == 0);
    }
    assert_true(counters >= 8);
    buf_free(&b);
}

static void test_rows(void **state)
{
    (void)state;
    scrape_frame a, b2;
    frame_ok("vllm:num_requests_running 3\nvllm:prompt_tokens_total 100\n"
             "vllm:generation_tokens_total 50\n",
             &a);
    frame_ok("vllm:num_requests_running 4\nvllm:num_requests_waiting 1\n"
             "vllm:prompt_tokens_total 8100\nvllm:generation_tokens_total 20\n",
             &b2);
    scrape_row row;
    char line[512];
    /* No previous scrape: counters empty; gauges as read. */
    scrape_row_from(&row, &a, NULL, 1000, 900);
    scrape_row_format(&row, line, sizeof line);
    assert_string_equal(line, "1000,900,3,,,,,\n");
    /* Increases; a counter that went down was reset and counts from 0. */
    scrape_row_from(&row, &b2, &a, 251000000, 250000000);
    size_t len = scrape_row_format(&row, line, sizeof line);
    assert_string_equal(line, "251000000,250000000,4,1,,8000,20,\n");
    assert_int_equal(len, strlen(line));
    assert_int_equal(scrape_row_format(&row, line, 10), 0); /* too small: nothing */
    char origin[64], url_path[64];
    assert_int_equal(scrape_split_url("http://h:8000/metrics/", origin, sizeof origin, url_path,
                                      sizeof url_path), 0);
    assert_string_equal(origin, "http://h:8000");
    assert_string_equal(url_path, "/metrics/");
    assert_int_equal(scrape_split_url("https://h", origin, sizeof origin, url_path, sizeof url_path), 0);
    assert_string_equal(origin, "https://h");
    assert_string_equal(url_path, "/");
    assert_int_equal(scrape_split_url("h:8000/metrics", origin, sizeof origin, url_path, sizeof url_path),
                     -1);
    assert_int_equal(scrape_split_url("http://h/metrics", origin, 4, url_path, sizeof url_path), -1);
    assert_string_equal(scrape_column_name(SCRAPE_GENERATION_TOKENS), "generation_tokens");
    assert_true(scrape_column_is_counter(SCRAPE_STEPS));
    assert_false(scrape_column_is_counter(SCRAPE_KV_USAGE));

    /* The file and its reader. */
    char path[] = "/tmp/test_prom_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(scrape_csv_header(), f);
    scrape_row_from(&row, &a, NULL, 1000, 900);
    scrape_row_format(&row, line, sizeof line);
    fputs(line, f);
    scrape_row_from(&row, &b2, &a, 251000000, 250000000);
    scrape_row_format(&row, line, sizeof line);
    fputs(line, f);
    fclose(f);
    scrape_series s;
    char err[ERR_LEN] = "";
    if (scrape_csv_read(path, &s, err) != 0)
        fail_msg("%s", err);
    assert_int_equal(s.n, 2);
    assert_true(s.rows[1].t_ns == 251000000 && s.rows[1].t_sent_ns == 250000000);
    assert_true(s.rows[1].has[SCRAPE_PROMPT_TOKENS] && s.rows[1].value[SCRAPE_PROMPT_TOKENS] == 8000);
    assert_false(s.rows[0].has[SCRAPE_PROMPT_TOKENS]);
    assert_true(s.has[SCRAPE_WAITING] && !s.has[SCRAPE_KV_USAGE] && !s.has[SCRAPE_STEPS]);
    scrape_series_free(&s);
    /* A last row cut without its LF is dropped; whole without its LF, it is taken. */
    f = fopen(path, "a");
    fputs("300000000,299000000,4,1,,8", f);
    fclose(f);
    if (scrape_csv_read(path, &s, err) != 0)
        fail_msg("%s", err);
    assert_true(s.n == 2 && s.cut);
    scrape_series_free(&s);
    f = fopen(path, "a");
    fputs("x\n400000000,399000000,4,1,,8,20,", f);
    fclose(f);
    assert_int_equal(scrape_csv_read(path, &s, err), -1); /* the cut row, now inside: refused */
    assert_non_null(strstr(err, ":4: 8 columns expected"));
    scrape_series_free(&s);
    f = fopen(path, "w");
    fputs(scrape_csv_header(), f);
    fputs("400000000,399000000,4,1,,8,20,", f);
    fclose(f);
    if (scrape_csv_read(path, &s, err) != 0)
        fail_msg("%s", err);
    assert_true(s.n == 1 && !s.cut && s.rows[0].value[SCRAPE_GENERATION_TOKENS] == 20);
    scrape_series_free(&s);
    /* A broken row is refused with its line. */
    f = fopen(path, "a");
    fputs("\n5,4,1,2\n", f);
    fclose(f);
    assert_int_equal(scrape_csv_read(path, &s, err), -1);
    assert_non_null(strstr(err, ":3: 8 columns expected"));
    scrape_series_free(&s);
    f = fopen(path, "w");
    fputs("t,x\n", f);
    fclose(f);
    assert_int_equal(scrape_csv_read(path, &s, err), -1);
    assert_non_null(strstr(err, "header"));
    scrape_series_free(&s);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vllm),
        cmocka_unit_test(test_sglang),
        cmocka_unit_test(test_llamacpp),
        cmocka_unit_test(test_stallscope),
        cmocka_unit_test(test_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
