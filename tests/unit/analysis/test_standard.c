/* test_standard — TTFT, TPOT, ITL, E2E, throughputs and goodput on a log whose every time the
 * test sets, against values worked out by hand in the comments; vLLM's result keys pinned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "analysis/metric.h"
#include "analysis/standard.h"
#include "common/err.h"

#define MS 1000000LL

static void add_req(tokenlog *log, int64_t id, int kind, int64_t send, int64_t first, int64_t end,
                    int prompt, int completion, const char *finish, const char *error)
{
    tokenlog_request r;
    memset(&r, 0, sizeof r);
    r.request = id;
    r.user = (int32_t)id;
    r.kind = kind;
    r.t_plan_ns = send;
    r.t_send_ns = send;
    r.t_first_ns = first;
    r.t_end_ns = end;
    r.prompt_tokens_requested = r.prompt_tokens = prompt;
    r.completion_tokens = completion;
    snprintf(r.finish_reason, sizeof r.finish_reason, "%s", finish);
    snprintf(r.error, sizeof r.error, "%s", error);
    int64_t index;
    assert_int_equal(tokenlog_add_request(log, &r, &index), 0);
}

static void add_ev(tokenlog *log, int64_t id, int kind, int64_t t, int n)
{
    tokenlog_event e = {t, id, (int32_t)id, n, kind};
    assert_int_equal(tokenlog_add_event(log, &e), 0);
}

/* Request 7 (background): sent 0, tokens at 10, 20, 40 ms (1 token each), ends at 40 ms:
 *   TTFT 10, E2E 40, TPOT (40 - 10) / 2 = 15, ITL gaps 10 and 20.
 * Request 3 (background): sent 100, tokens at 130 (2 tokens), 140 (1): ends 140:
 *   TTFT 30, E2E 40, TPOT (40 - 30) / 2 = 5, ITL gap 10.
 * Request 9 (injected): sent 50, one token at 250, ends 250: TTFT 200, E2E 200, no TPOT.
 * Request 4: failed (an error). Request 5: cut by the run's end (abort). Request 6: sent in
 * the warm-up (t_send -1): no TTFT, TPOT or E2E, but its gap of 5 ms is an ITL gap of the
 * run like any other. Duration 2 s. */
static void make_log(tokenlog *log)
{
    tokenlog_init(log);
    add_req(log, 7, TOKENLOG_BG, 0, 10 * MS, 40 * MS, 100, 3, "length", "");
    add_req(log, 3, TOKENLOG_BG, 100 * MS, 130 * MS, 140 * MS, 50, 3, "length", "");
    add_req(log, 9, TOKENLOG_INJECT, 50 * MS, 250 * MS, 250 * MS, 8000, 1, "length", "");
    add_req(log, 4, TOKENLOG_BG, 300 * MS, -1, 310 * MS, 10, 0, "", "HTTP 500");
    add_req(log, 5, TOKENLOG_BG, 400 * MS, 410 * MS, 420 * MS, 10, 1, "abort", "");
    add_req(log, 6, TOKENLOG_BG, -1, -1, 30 * MS, 10, 2, "length", "");
    add_ev(log, 6, TOKENLOG_BG, 25 * MS, 1);
    add_ev(log, 6, TOKENLOG_BG, 30 * MS, 1);
    add_ev(log, 7, TOKENLOG_BG, 10 * MS, 1);
    add_ev(log, 7, TOKENLOG_BG, 20 * MS, 1);
    add_ev(log, 7, TOKENLOG_BG, 40 * MS, 1);
    add_ev(log, 3, TOKENLOG_BG, 130 * MS, 2);
    add_ev(log, 3, TOKENLOG_BG, 140 * MS, 1);
    add_ev(log, 9, TOKENLOG_INJECT, 250 * MS, 1);
    add_ev(log, 5, TOKENLOG_BG, 410 * MS, 1);
}

static void test_metrics(void **state)
{
    (void)state;
    char err[ERR_LEN];
    tokenlog log;
    make_log(&log);
    standard_options o;
    standard_defaults(&o);
    assert_int_equal(standard_parse_goodput("ttft:20,tpot:20", &o, err), 0);
    standard_metrics m;
    assert_int_equal(standard_compute(&log, &o, 2.0, &m, err), 0);
    const standard_class *a = &m.all, *bg = &m.background, *inj = &m.injected;
    assert_int_equal(a->completed, 3);
    assert_int_equal(a->failed, 1);
    assert_int_equal(a->unfinished, 1);
    assert_int_equal(bg->completed, 2);
    assert_int_equal(inj->completed, 1);
    assert_int_equal(a->input_tokens, 100 + 50 + 8000);
    assert_int_equal(a->output_tokens, 3 + 3 + 1);
    assert_float_equal(a->request_throughput, 1.5, 1e-12);
    assert_float_equal(a->output_throughput, 3.5, 1e-12);
    assert_float_equal(a->total_token_throughput, (8150 + 7) / 2.0, 1e-9);
    /* TTFT 10, 30, 200: mean 80, median 30, std sqrt(((70)^2 + 50^2 + 120^2) / 3). */
    assert_int_equal(a->ttft_ms.count, 3);
    assert_float_equal(a->ttft_ms.mean, 80, 1e-9);
    assert_float_equal(a->ttft_ms.median, 30, 1e-9);
    assert_float_equal(a->ttft_ms.std, 85.24474568, 1e-6); /* sqrt(21800 / 3) */
    assert_float_equal(a->ttft_ms.max, 200, 1e-9);
    /* p90 of {10, 30, 200}: rank 0.9 x 2 = 1.8 -> 30 + 0.8 x 170 = 166. */
    assert_float_equal(a->ttft_ms.p[1], 166, 1e-9);
    /* TPOT 15 and 5 (the one-token answer has none). */
    assert_int_equal(a->tpot_ms.count, 2);
    assert_float_equal(a->tpot_ms.mean, 10, 1e-9);
    /* ITL 5 (the warm-up request's), 10, 20, 10: median of {5, 10, 10, 20} is 10, mean 11.25,
     * std sqrt((6.25^2 + 1.25^2 + 1.25^2 + 8.75^2) / 4) = sqrt(29.6875). */
    assert_int_equal(a->itl_ms.count, 4);
    assert_float_equal(a->itl_ms.max, 20, 1e-9);
    assert_float_equal(a->itl_ms.median, 10, 1e-9);
    assert_float_equal(a->itl_ms.mean, 11.25, 1e-9);
    assert_float_equal(a->itl_ms.std, 5.448623679, 1e-6);
    assert_false(m.itl_histogram);
    assert_int_equal(inj->itl_ms.count, 0);
    /* E2E 40, 40, 200. */
    assert_float_equal(a->e2el_ms.median, 40, 1e-9);
    /* Goodput (TTFT <= 20 and TPOT <= 20): request 7 only; 3 has TTFT 30; 9 has TTFT 200. */
    assert_true(a->has_goodput);
    assert_int_equal(a->good, 1);
    assert_float_equal(a->goodput, 1.0 / 3, 1e-12);
    assert_float_equal(a->request_goodput, 0.5, 1e-12);
    assert_float_equal(bg->goodput, 0.5, 1e-12);
    /* The itl SLO: request 7's longest gap is 20 ms. */
    standard_options o2;
    standard_defaults(&o2);
    assert_int_equal(standard_parse_goodput("itl:15", &o2, err), 0);
    assert_int_equal(standard_compute(&log, &o2, 2.0, &m, err), 0);
    assert_int_equal(m.background.good, 1); /* request 3 (gap 10), not 7 (gap 20) */
    tokenlog_free(&log);
}

static void test_vllm_keys(void **state)
{
    (void)state;
    char err[ERR_LEN];
    tokenlog log;
    make_log(&log);
    standard_metrics m;
    assert_int_equal(standard_compute(&log, NULL, 2.0, &m, err), 0);
    /* The result is the metric table's (metric.h), read from a summary holding m. */
    analysis_summary s = {.duration_s = 2.0, .standard = m};
    json_t *j = metric_vllm_result(&s);
    /* The names of vllm/benchmarks/serve.py's result (p_word: "99", "99.9"). */
    const char *keys[] = {"duration", "completed", "failed", "total_input_tokens",
                          "total_output_tokens", "request_throughput", "request_goodput",
                          "output_throughput", "total_token_throughput", "mean_ttft_ms",
                          "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "p99.9_ttft_ms",
                          "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p50_tpot_ms",
                          "p90_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms",
                          "std_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms",
                          "std_e2el_ms", "p99_e2el_ms"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!json_object_get(j, keys[i]))
            fail_msg("no '%s' in the result", keys[i]);
    assert_true(json_is_null(json_object_get(j, "request_goodput"))); /* no SLO given */
    assert_int_equal(json_integer_value(json_object_get(j, "completed")), 3);
    assert_float_equal(json_real_value(json_object_get(j, "duration")), 2.0, 1e-12);
    assert_float_equal(json_real_value(json_object_get(j, "mean_ttft_ms")), 80, 1e-9);
    assert_float_equal(json_real_value(json_object_get(j, "p50_itl_ms")), 10, 1e-9);
    assert_int_equal(m.all.itl_ms.count, 4);
    json_decref(j);
    tokenlog_free(&log);
}

static void test_parse(void **state)
{
    (void)state;
    char err[ERR_LEN];
    standard_options o;
    standard_defaults(&o);
    assert_int_equal(standard_parse_percentiles("25,75,99.99", &o, err), 0);
    assert_int_equal(o.n_percentiles, 3);
    assert_true(o.percentiles[2] == 99.99);
    const char *bad_p[] = {"", "0", "101", "50;90", "a", "1,2,3,4,5,6,7,8,9"};
    for (size_t i = 0; i < sizeof bad_p / sizeof bad_p[0]; i++)
        if (standard_parse_percentiles(bad_p[i], &o, err) != -1)
            fail_msg("percentiles '%s' accepted", bad_p[i]);
    assert_int_equal(standard_parse_goodput("ttft:2000 tpot:100 e2el:9000", &o, err), 0);
    assert_true(o.slo_ttft_ms == 2000 && o.slo_tpot_ms == 100 && o.slo_e2el_ms == 9000);
    const char *bad_g[] = {"ttft", "ttft:", "ttft:-1", "foo:3", "ttft:1x", ""};
    for (size_t i = 0; i < sizeof bad_g / sizeof bad_g[0]; i++)
        if (standard_parse_goodput(bad_g[i], &o, err) != -1)
            fail_msg("goodput '%s' accepted", bad_g[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_metrics),
                                       cmocka_unit_test(test_vllm_keys),
                                       cmocka_unit_test(test_parse)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
