/* analysis: every number users quote (analysis.h: percentiles, gaps, the summary, its
 * stalls, alignment and causes, summary.json), against hand-computed cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "analysis/analysis.h"
#include "analysis/attribution.h"
#include "common/err.h"
#include "common/tokenlog.h"

#define MS 1000000LL

static void ev(tokenlog *log, double t_ms, int user, int64_t request, int kind, int n_tokens)
{
    tokenlog_event e = {.t_ns = (int64_t)(t_ms * MS), .request = request, .user = user,
                        .n_tokens = n_tokens, .kind = kind};
    assert_int_equal(tokenlog_add_event(log, &e), 0);
}

/* Times in ms; a negative time means "never" (-1 ns). */
static void req(tokenlog *log, int64_t request, int user, int kind, double plan_ms,
                double send_ms, double first_ms, double end_ms, int prompt, const char *error)
{
    tokenlog_request r;
    memset(&r, 0, sizeof r);
    r.request = request;
    r.user = user;
    r.kind = kind;
    r.t_plan_ns = (int64_t)(plan_ms * MS);
    r.t_send_ns = send_ms < 0 ? -1 : (int64_t)(send_ms * MS);
    r.t_first_ns = first_ms < 0 ? -1 : (int64_t)(first_ms * MS);
    r.t_end_ns = end_ms < 0 ? -1 : (int64_t)(end_ms * MS);
    r.prompt_tokens_requested = prompt;
    r.prompt_tokens = prompt;
    if (error)
        snprintf(r.error, sizeof r.error, "%s", error);
    assert_int_equal(tokenlog_add_request(log, &r, NULL), 0);
}

static analysis_summary summarize(const tokenlog *log, double threshold_ms, double reference,
                                  double duration_s)
{
    analysis_options opt;
    memset(&opt, 0, sizeof opt);
    opt.label = "interference";
    opt.engine = "sim";
    opt.target = "none";
    opt.threshold_ms = threshold_ms;
    opt.reference_p50_ms = reference;
    opt.duration_s = duration_s;
    opt.complete = true;
    analysis_summary s;
    char err[ERR_LEN] = "";
    if (analysis_summarize(log, &opt, &s, err) != 0)
        fail_msg("analysis_summarize: %s", err);
    return s;
}

/* ---- percentiles ------------------------------------------------------------------ */

static void test_quantile_nearest_rank(void **state)
{
    (void)state;
    double four[] = {1, 2, 3, 4};
    assert_float_equal(analysis_quantile(four, 4, 0.5), 2, 0);
    assert_float_equal(analysis_quantile(four, 4, 0.9), 4, 0);
    assert_float_equal(analysis_quantile(four, 4, 0.25), 1, 0);
    assert_float_equal(analysis_quantile(four, 4, 0.26), 2, 0);
    assert_float_equal(analysis_quantile(four, 4, 1.0), 4, 0);

    double *thousand = malloc(1000 * sizeof *thousand);
    for (int i = 0; i < 1000; i++)
        thousand[i] = i + 1;
    assert_float_equal(analysis_quantile(thousand, 1000, 0.999), 999, 0);
    assert_float_equal(analysis_quantile(thousand, 1000, 0.99), 990, 0);
    assert_float_equal(analysis_quantile(thousand, 1000, 0.5), 500, 0);
    assert_float_equal(analysis_quantile(thousand, 1000, 1.0), 1000, 0);
    /* 0.07 x 100 is 7.000000000000001 in binary: still rank 7. */
    assert_float_equal(analysis_quantile(thousand, 100, 0.07), 7, 0);
    free(thousand);

    double one[] = {42};
    assert_float_equal(analysis_quantile(one, 1, 0.5), 42, 0);
    assert_float_equal(analysis_quantile(one, 1, 0.999), 42, 0);
    assert_float_equal(analysis_quantile(one, 0, 0.5), 0, 0);
}

static void test_dist_mean_max_sorted(void **state)
{
    (void)state;
    double v[] = {10, 2, 8, 4, 6};
    analysis_dist d;
    analysis_dist_from(v, 5, &d);
    assert_int_equal(d.count, 5);
    assert_float_equal(d.mean, 6, 1e-12);
    assert_float_equal(d.max, 10, 0);
    assert_float_equal(d.p50, 6, 0); /* rank ceil(2.5) = 3 */
    assert_float_equal(d.p90, 10, 0);
    for (int i = 1; i < 5; i++)
        assert_true(v[i - 1] <= v[i]);
    analysis_dist_from(v, 0, &d);
    assert_int_equal(d.count, 0);
    assert_float_equal(d.max, 0, 0);
}

/* ---- gaps ------------------------------------------------------------------------- */

static void test_gaps_out_of_order_per_request(void **state)
{
    (void)state;
    tokenlog log;
    tokenlog_init(&log);
    /* User 0: request 12 (25, 35) after request 10 (0, 10, 20); user 1: request 11
     * (5, 12, 30). Written shuffled, plus injector events that must make no gap. */
    ev(&log, 35, 0, 12, TOKENLOG_BG, 1);
    ev(&log, 20, 0, 10, TOKENLOG_BG, 1);
    ev(&log, 30, 1, 11, TOKENLOG_BG, 2);
    ev(&log, 7, -1, 99, TOKENLOG_INJECT, 1);
    ev(&log, 0, 0, 10, TOKENLOG_BG, 1);
    ev(&log, 25, 0, 12, TOKENLOG_BG, 1);
    ev(&log, 5, 1, 11, TOKENLOG_BG, 1);
    ev(&log, 10, 0, 10, TOKENLOG_BG, 1);
    ev(&log, 9, -1, 99, TOKENLOG_INJECT, 1);
    ev(&log, 12, 1, 11, TOKENLOG_BG, 1);
    double *gaps = NULL;
    int64_t n = 0;
    char err[ERR_LEN];
    assert_int_equal(analysis_gaps_ms(&log, &gaps, &n, err), 0);
    /* (request, time) order: r10 {10, 10}, r11 {7, 18}, r12 {10}. No 20 -> 25 gap
     * across requests, no injector gap (2 ms). */
    double want[] = {10, 10, 7, 18, 10};
    assert_int_equal(n, 5);
    for (int i = 0; i < 5; i++)
        assert_float_equal(gaps[i], want[i], 1e-9);
    free(gaps);

    analysis_summary s = summarize(&log, 0, 0, 1);
    assert_int_equal(s.itl_ms.count, 5);
    assert_int_equal(s.tokens_received, 11); /* every event's n_tokens, injector included */
    assert_float_equal(s.streamed_throughput, 11.0, 1e-12); /* over the 1 s run */
    assert_int_equal(s.users, 2);            /* from the data: config said nothing */
    analysis_summary_free(&s);
    tokenlog_free(&log);
}

/* ---- stalls and attribution -------------------------------------------------------- */

/* User 0 (request 10): tokens at 0, 10, 20, 30, 40, 100, 110 ms: gaps 10 10 10 10 60 10.
 * User 1 (request 11): tokens at 0, 10, 20, 30, 50, 120, 130 ms: gaps 10 10 10 20 70 10.
 * Sorted gaps: nine 10s, 20, 60, 70 -> p50 = 10 (rank 6 of 12), max 70.
 * Injection 99 sent at 45, first token at 95: window [45, 95]. */
static void build_two_users(tokenlog *log)
{
    tokenlog_init(log);
    double u0[] = {0, 10, 20, 30, 40, 100, 110};
    double u1[] = {0, 10, 20, 30, 50, 120, 130};
    for (int i = 0; i < 7; i++) {
        ev(log, u0[i], 0, 10, TOKENLOG_BG, 1);
        ev(log, u1[i], 1, 11, TOKENLOG_BG, 1);
    }
    ev(log, 95, -1, 99, TOKENLOG_INJECT, 1);
    ev(log, 96, -1, 99, TOKENLOG_INJECT, 1);
    /* TTFT comes from the requests table: 5 and 8 ms. */
    req(log, 10, 0, TOKENLOG_BG, 0, 0, 5, 110, 20, NULL);
    req(log, 11, 1, TOKENLOG_BG, 0, 0, 8, 130, 20, NULL);
    req(log, 12, 1, TOKENLOG_BG, 130, 130, -1, 135, 20, "HTTP 503");
    req(log, 99, -1, TOKENLOG_INJECT, 45, 45, 95, 96, 8000, NULL);
}

static void test_threshold_rules(void **state)
{
    (void)state;
    tokenlog log;
    build_two_users(&log);
    /* Own p50 (10) x 5 = 50: the 60 and 70 gaps. */
    analysis_summary s = summarize(&log, 0, 0, 0.2);
    assert_float_equal(s.itl_ms.p50, 10, 1e-9);
    assert_float_equal(s.stalls.threshold_ms, 50, 1e-9);
    assert_int_equal(s.stalls.count, 2);
    analysis_summary_free(&s);
    /* The baseline's p50 (4) x 5 = 20; a gap of exactly 20 is not over it. */
    s = summarize(&log, 0, 4, 0.2);
    assert_float_equal(s.stalls.threshold_ms, 20, 1e-9);
    assert_int_equal(s.stalls.count, 2);
    analysis_summary_free(&s);
    s = summarize(&log, 0, 3, 0.2); /* 15: now the 20 ms gap counts */
    assert_int_equal(s.stalls.count, 3);
    analysis_summary_free(&s);
    /* An explicit threshold wins over both. */
    s = summarize(&log, 65, 4, 0.2);
    assert_float_equal(s.stalls.threshold_ms, 65, 0);
    assert_int_equal(s.stalls.count, 1);
    analysis_summary_free(&s);
    tokenlog_free(&log);
}

static void test_summary_two_users(void **state)
{
    (void)state;
    tokenlog log;
    build_two_users(&log);
    analysis_summary s = summarize(&log, 0, 0, 0.2);
    assert_int_equal(s.itl_ms.count, 12);
    assert_float_equal(s.itl_ms.max, 70, 1e-9);
    assert_float_equal(s.itl_ms.mean, 240.0 / 12, 1e-9);
    assert_float_equal(s.spike_ratio, 7, 1e-9);
    assert_int_equal(s.stalls.count, 2);
    assert_float_equal(s.stalls.fraction_of_gaps, 2.0 / 12, 1e-12);
    assert_int_equal(s.stalls.aligned, 2);
    assert_float_equal(s.stalls.aligned_fraction, 1, 0);
    /* Union of (40, 100) and (50, 120) is 80 ms, not the 130 ms sum: 80 / 200. */
    assert_float_equal(s.stalls.stalled_time_fraction, 0.4, 1e-12);
    /* Background TTFT: 5 and 8 ms; request 12 never got a token. */
    assert_int_equal(s.ttft_ms.count, 2);
    assert_float_equal(s.ttft_ms.p50, 5, 1e-9);
    assert_float_equal(s.ttft_ms.max, 8, 1e-9);
    assert_int_equal(s.errors, 1);
    assert_int_equal(s.n_injections, 1);
    const analysis_injection *inj = &s.injections[0];
    assert_float_equal(inj->t_send_s, 0.045, 1e-12);
    assert_float_equal(inj->t_plan_s, 0.045, 1e-12);
    assert_float_equal(inj->ttft_ms, 50, 1e-9);
    assert_int_equal(inj->prompt_tokens, 8000);
    /* Gaps overlapping [45, 95]: user 0 (40, 100) = 60; user 1 (30, 50) = 20 and
     * (50, 120) = 70. Max 70, median (rank 2 of 3) 60. */
    assert_float_equal(inj->max_gap_ms, 70, 1e-9);
    assert_float_equal(inj->median_gap_ms, 60, 1e-9);
    assert_int_equal(inj->users_stalled, 2);
    assert_int_equal(s.injections_with_stalls, 1);
    assert_string_equal(s.label, "interference");
    assert_true(s.complete);
    analysis_summary_free(&s);
    tokenlog_free(&log);
}

static void test_alignment_boundaries(void **state)
{
    (void)state;
    tokenlog log;
    tokenlog_init(&log);
    /* User 0 stalls over (10, 60) and (70, 130); user 1 over (200, 300). */
    double t0[] = {0, 10, 60, 70, 130};
    for (int i = 0; i < 5; i++)
        ev(&log, t0[i], 0, 1, TOKENLOG_BG, 1);
    ev(&log, 195, 1, 2, TOKENLOG_BG, 1);
    ev(&log, 200, 1, 2, TOKENLOG_BG, 1);
    ev(&log, 300, 1, 2, TOKENLOG_BG, 1);
    /* Injection A: window [60, 70] touches the first stall only at its end (60) and the
     * second only at its start (70): neither is aligned. Injection B, sent at 140 with
     * no first token and no end: its window is [140, inf) and catches (200, 300). */
    req(&log, 50, -1, TOKENLOG_INJECT, 60, 60, 70, 80, 4000, NULL);
    req(&log, 51, -1, TOKENLOG_INJECT, 140, 140, -1, -1, 4000, NULL);
    analysis_summary s = summarize(&log, 30, 0, 0.3);
    assert_int_equal(s.stalls.count, 3);
    assert_int_equal(s.stalls.aligned, 1);
    assert_float_equal(s.stalls.aligned_fraction, 1.0 / 3, 1e-12);
    assert_int_equal(s.injections[0].users_stalled, 0);
    /* Gaps over [60, 70]: (60, 70) itself = 10. The stall gaps only touch it. */
    assert_float_equal(s.injections[0].max_gap_ms, 10, 1e-9);
    assert_int_equal(s.injections[1].users_stalled, 1);
    assert_float_equal(s.injections[1].ttft_ms, -1, 0);
    assert_int_equal(s.injections_with_stalls, 1);
    analysis_summary_free(&s);

    /* Injection whose first token never came but which ended: window to its end.
     * [100, 199] overlaps (70, 130) but not (200, 300). */
    log.n_requests = 0;
    req(&log, 52, -1, TOKENLOG_INJECT, 100, 100, -1, 199, 4000, "timeout");
    s = summarize(&log, 30, 0, 0.3);
    assert_int_equal(s.stalls.aligned, 1);
    assert_int_equal(s.injections[0].users_stalled, 1);
    assert_float_equal(s.injections[0].max_gap_ms, 60, 1e-9);
    analysis_summary_free(&s);

    /* No injection at all: stalls, none aligned. */
    log.n_requests = 0;
    s = summarize(&log, 30, 0, 0.3);
    assert_int_equal(s.stalls.count, 3);
    assert_int_equal(s.stalls.aligned, 0);
    assert_float_equal(s.stalls.aligned_fraction, 0, 0);
    assert_int_equal(s.n_injections, 0);
    analysis_summary_free(&s);
    tokenlog_free(&log);
}

static void test_users_stalled_counts_distinct_users(void **state)
{
    (void)state;
    tokenlog log;
    tokenlog_init(&log);
    /* User 0 stalls twice inside the window, once in each of two requests (it finished
     * one answer and started the next mid-prefill); user 1 stalls once; user 2 never. */
    double r1[] = {0, 10, 100};
    double r2[] = {105, 200, 210};
    for (int i = 0; i < 3; i++) {
        ev(&log, r1[i], 0, 1, TOKENLOG_BG, 1);
        ev(&log, r2[i], 0, 2, TOKENLOG_BG, 1);
    }
    double u1[] = {0, 10, 150, 160};
    for (int i = 0; i < 4; i++)
        ev(&log, u1[i], 1, 3, TOKENLOG_BG, 1);
    for (int i = 0; i <= 20; i++)
        ev(&log, i * 10.0, 2, 4, TOKENLOG_BG, 1);
    req(&log, 9, -1, TOKENLOG_INJECT, 20, 20, 190, 195, 8000, NULL);
    analysis_summary s = summarize(&log, 50, 0, 0.21);
    /* Stalls: (10, 100), (105, 200), (10, 150). */
    assert_int_equal(s.stalls.count, 3);
    assert_int_equal(s.stalls.aligned, 3);
    assert_int_equal(s.injections[0].users_stalled, 2);
    /* Union: (10, 150) + (105, 200) -> (10, 200) = 190 ms of 210. */
    assert_float_equal(s.stalls.stalled_time_fraction, 190.0 / 210, 1e-12);
    analysis_summary_free(&s);
    tokenlog_free(&log);
}

static void test_injections_in_plan_order(void **state)
{
    (void)state;
    tokenlog log;
    tokenlog_init(&log);
    for (int i = 0; i <= 40; i++)
        ev(&log, i * 10.0, 0, 1, TOKENLOG_BG, 1);
    /* Written out of order; the late one was sent after the next one's plan. */
    req(&log, 7, -1, TOKENLOG_INJECT, 300, 301, 310, 320, 3000, NULL);
    req(&log, 5, -1, TOKENLOG_INJECT, 100, 250, 260, 270, 1000, NULL);
    req(&log, 6, -1, TOKENLOG_INJECT, 200, 201, -1, -1, 2000, NULL);
    req(&log, 8, -1, TOKENLOG_INJECT, 400, -1, -1, -1, 4000, NULL); /* never sent */
    analysis_summary s = summarize(&log, 0, 0, 0.4);
    assert_int_equal(s.n_injections, 4);
    assert_int_equal(s.injections[0].prompt_tokens, 1000);
    assert_int_equal(s.injections[1].prompt_tokens, 2000);
    assert_int_equal(s.injections[2].prompt_tokens, 3000);
    assert_int_equal(s.injections[3].prompt_tokens, 4000);
    assert_float_equal(s.injections[0].t_plan_s, 0.1, 1e-12);
    assert_float_equal(s.injections[0].t_send_s, 0.25, 1e-12);
    assert_float_equal(s.injections[3].t_send_s, -1, 0);
    assert_float_equal(s.injections[3].max_gap_ms, 0, 0);
    assert_int_equal(s.stalls.count, 0);
    assert_int_equal(s.injections_with_stalls, 0);
    /* Even without stalls each sent injection saw the 10 ms gaps across it. */
    assert_float_equal(s.injections[0].median_gap_ms, 10, 1e-9);
    analysis_summary_free(&s);
    tokenlog_free(&log);
}

static void test_empty_log(void **state)
{
    (void)state;
    tokenlog log;
    tokenlog_init(&log);
    analysis_summary s = summarize(&log, 0, 0, 0);
    assert_int_equal(s.itl_ms.count, 0);
    assert_int_equal(s.stalls.count, 0);
    assert_float_equal(s.spike_ratio, 0, 0);
    assert_float_equal(s.stalls.stalled_time_fraction, 0, 0);
    assert_int_equal(s.n_injections, 0);
    analysis_summary_free(&s);
}

/* Failed requests: counted, the most common error named (of equal counts, the first in
 * byte order), and a run with at least half of its requests failed is failed and not
 * complete; fewer, and it stands. summary.json says so. */
static void test_failed_run(void **state)
{
    (void)state;
    tokenlog log;
    tokenlog_init(&log);
    const char *redirect = "HTTP 301: the target redirects to http://h/v2; use that URL";
    req(&log, 0, 0, TOKENLOG_BG, 0, 0, -1, 5, 8, redirect);
    req(&log, 1, 1, TOKENLOG_BG, 0, 0, -1, 6, 8, "timeout: no bytes for 1.0 s");
    req(&log, 2, 0, TOKENLOG_BG, 5, 5, -1, 9, 8, redirect);
    req(&log, 3, 1, TOKENLOG_BG, 6, 6, 7, 20, 8, NULL);
    ev(&log, 7, 1, 3, TOKENLOG_BG, 1);
    ev(&log, 12, 1, 3, TOKENLOG_BG, 1);
    analysis_summary s = summarize(&log, 0, 0, 0.02);
    assert_int_equal(s.requests, 4);
    assert_int_equal(s.errors, 3);
    assert_string_equal(s.error_common, redirect);
    assert_int_equal(s.error_common_count, 2);
    assert_true(s.failed);
    assert_false(s.complete);
    char why[256];
    analysis_failure_text(&s, why, sizeof why);
    assert_string_equal(why, "3 of 4 requests failed; the most common error (2): HTTP 301: the "
                             "target redirects to http://h/v2; use that URL");
    json_t *j = analysis_summary_to_json(&s);
    assert_true(json_is_true(json_object_get(j, "failed")));
    assert_true(json_is_false(json_object_get(j, "complete")));
    assert_int_equal(json_integer_value(json_object_get(j, "requests")), 4);
    json_t *common = json_object_get(j, "error_common");
    assert_string_equal(json_string_value(json_object_get(common, "error")), redirect);
    assert_int_equal(json_integer_value(json_object_get(common, "count")), 2);
    json_decref(j);
    analysis_summary_free(&s);

    /* Exactly half: failed. A tie between two errors: the first in byte order. */
    tokenlog_free(&log);
    tokenlog_init(&log);
    req(&log, 0, 0, TOKENLOG_BG, 0, 0, -1, 5, 8, "timeout: no bytes for 1.0 s");
    req(&log, 1, 1, TOKENLOG_BG, 0, 0, -1, 6, 8, "HTTP 500: boom");
    req(&log, 2, 0, TOKENLOG_BG, 5, 5, 6, 9, 8, NULL);
    req(&log, 3, 1, TOKENLOG_BG, 6, 6, 7, 20, 8, NULL);
    s = summarize(&log, 0, 0, 0.02);
    assert_true(s.failed);
    assert_string_equal(s.error_common, "HTTP 500: boom");
    assert_int_equal(s.error_common_count, 1);
    analysis_summary_free(&s);

    /* One of three: the run stands (complete), its error still named. */
    tokenlog_free(&log);
    tokenlog_init(&log);
    req(&log, 0, 0, TOKENLOG_BG, 0, 0, -1, 5, 8, "HTTP 500: boom");
    req(&log, 1, 1, TOKENLOG_BG, 0, 0, 1, 6, 8, NULL);
    req(&log, 2, 0, TOKENLOG_BG, 5, 5, 6, 9, 8, NULL);
    s = summarize(&log, 0, 0, 0.02);
    assert_false(s.failed);
    assert_true(s.complete);
    assert_int_equal(s.errors, 1);
    assert_string_equal(s.error_common, "HTTP 500: boom");
    analysis_failure_text(&s, why, sizeof why);
    assert_string_equal(why, "");
    analysis_summary_free(&s);
    tokenlog_free(&log);

    /* No request at all is no failure. */
    tokenlog_init(&log);
    s = summarize(&log, 0, 0, 0);
    assert_false(s.failed);
    assert_true(s.complete);
    j = analysis_summary_to_json(&s);
    assert_true(json_is_null(json_object_get(j, "error_common")));
    json_decref(j);
    analysis_summary_free(&s);
    tokenlog_free(&log);
}

/* ---- the fast sweep against a naive reference ------------------------------------ */

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rnd(uint64_t n)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state % n;
}

/* Random small logs (times in ns below 20,000, shuffled, several requests per user,
 * injections with and without first token or end), checked against the definitions
 * applied literally: every gap against every window, stalled time by marking each ns. */
static void test_matches_naive_reference(void **state)
{
    (void)state;
    enum { SPAN = 20000, USERS = 4, REQS = 3, INJ = 3 };
    for (int trial = 0; trial < 200; trial++) {
        tokenlog log;
        tokenlog_init(&log);
        int64_t times[USERS * REQS][40];
        int n_times[USERS * REQS];
        for (int r = 0; r < USERS * REQS; r++) {
            n_times[r] = (int)rnd(40);
            for (int i = 0; i < n_times[r]; i++)
                times[r][i] = (int64_t)rnd(SPAN);
        }
        /* Emit in a shuffled order: walk requests round-robin from a random start. */
        int cursor[USERS * REQS] = {0};
        for (int left = 1; left;) {
            left = 0;
            for (int k = 0, r0 = (int)rnd(USERS * REQS); k < USERS * REQS; k++) {
                int r = (r0 + k) % (USERS * REQS);
                if (cursor[r] < n_times[r]) {
                    tokenlog_event e = {.t_ns = times[r][cursor[r]++], .request = 100 + r,
                                        .user = r % USERS, .n_tokens = 1, .kind = TOKENLOG_BG};
                    assert_int_equal(tokenlog_add_event(&log, &e), 0);
                    left = 1;
                }
            }
        }
        int64_t send[INJ], wend[INJ];
        for (int j = 0; j < INJ; j++) {
            tokenlog_request q;
            memset(&q, 0, sizeof q);
            q.request = 900 + j;
            q.user = -1;
            q.kind = TOKENLOG_INJECT;
            q.t_plan_ns = j * 1000; /* plan order = j */
            q.t_send_ns = (int64_t)rnd(SPAN);
            int shape = (int)rnd(3);
            q.t_first_ns = shape == 0 ? q.t_send_ns + (int64_t)rnd(4000) : -1;
            q.t_end_ns = shape == 2 ? -1 : q.t_send_ns + 4000 + (int64_t)rnd(4000);
            send[j] = q.t_send_ns;
            wend[j] = q.t_first_ns >= 0 ? q.t_first_ns : q.t_end_ns >= 0 ? q.t_end_ns : INT64_MAX;
            assert_int_equal(tokenlog_add_request(&log, &q, NULL), 0);
        }
        const double threshold_ms = 0.0015; /* 1,500 ns */
        analysis_summary s = summarize(&log, threshold_ms, 0, SPAN / 1e9);

        int64_t n_gaps = 0, n_stalls = 0, n_aligned = 0;
        double max_gap[INJ] = {0};
        int stalled_user[INJ][USERS];
        memset(stalled_user, 0, sizeof stalled_user);
        static unsigned char covered[SPAN];
        memset(covered, 0, sizeof covered);
        for (int r = 0; r < USERS * REQS; r++) {
            int64_t *t = times[r];
            for (int i = 1; i < n_times[r]; i++) /* insertion sort */
                for (int k = i; k > 0 && t[k - 1] > t[k]; k--) {
                    int64_t tmp = t[k];
                    t[k] = t[k - 1];
                    t[k - 1] = tmp;
                }
            for (int i = 0; i + 1 < n_times[r]; i++) {
                int64_t a = t[i], b = t[i + 1];
                double gap_ms = (double)(b - a) / 1e6;
                int stall = gap_ms > threshold_ms, aligned = 0;
                n_gaps++;
                for (int j = 0; j < INJ; j++)
                    if (a < b && a < wend[j] && b > send[j]) {
                        if (gap_ms > max_gap[j])
                            max_gap[j] = gap_ms;
                        if (stall) {
                            aligned = 1;
                            stalled_user[j][r % USERS] = 1;
                        }
                    }
                if (stall) {
                    n_stalls++;
                    n_aligned += aligned;
                    for (int64_t x = a; x < b; x++)
                        covered[x] = 1;
                }
            }
        }
        int64_t covered_ns = 0;
        for (int x = 0; x < SPAN; x++)
            covered_ns += covered[x];
        assert_int_equal(s.itl_ms.count, n_gaps);
        assert_int_equal(s.stalls.count, n_stalls);
        assert_int_equal(s.stalls.aligned, n_aligned);
        assert_float_equal(s.stalls.stalled_time_fraction, (double)covered_ns / SPAN, 1e-9);
        for (int j = 0; j < INJ; j++) {
            int users = 0;
            for (int u = 0; u < USERS; u++)
                users += stalled_user[j][u];
            assert_int_equal(s.injections[j].users_stalled, users);
            assert_float_equal(s.injections[j].max_gap_ms, max_gap[j], 1e-12);
        }
        analysis_summary_free(&s);
        tokenlog_free(&log);
    }
}

/* ---- JSON -------------------------------------------------------------------------- */

static void expect_keys(json_t *obj, const char *const *keys, size_t n)
{
    assert_true(json_is_object(obj));
    for (size_t i = 0; i < n; i++)
        if (!json_object_get(obj, keys[i]))
            fail_msg("missing key '%s'", keys[i]);
}

static void test_summary_json_keys(void **state)
{
    (void)state;
    tokenlog log;
    build_two_users(&log);
    analysis_summary s = summarize(&log, 0, 0, 0.2);
    json_t *j = analysis_summary_to_json(&s);
    static const char *const top[] = {"label", "engine", "target", "duration_s", "users",
                                      "tokens_received", "itl_ms", "ttft_ms", "stalls",
                                      "injections", "spike_ratio", "complete", "errors",
                                      "injections_with_stalls", "streamed_throughput"};
    static const char *const itl[] = {"count", "mean", "p50", "p90", "p99", "p999", "max"};
    static const char *const ttft[] = {"count", "p50", "p99", "max"};
    static const char *const stalls[] = {"threshold_ms", "count", "fraction_of_gaps",
                                         "aligned", "aligned_fraction",
                                         "stalled_time_fraction"};
    static const char *const inj[] = {"t_send_s", "ttft_ms", "prompt_tokens", "max_gap_ms",
                                      "median_gap_ms", "users_stalled", "t_plan_s"};
    expect_keys(j, top, sizeof top / sizeof *top);
    expect_keys(json_object_get(j, "itl_ms"), itl, sizeof itl / sizeof *itl);
    expect_keys(json_object_get(j, "ttft_ms"), ttft, sizeof ttft / sizeof *ttft);
    expect_keys(json_object_get(j, "stalls"), stalls, sizeof stalls / sizeof *stalls);
    json_t *injections = json_object_get(j, "injections");
    assert_int_equal(json_array_size(injections), 1);
    expect_keys(json_array_get(injections, 0), inj, sizeof inj / sizeof *inj);
    assert_string_equal(json_string_value(json_object_get(j, "label")), "interference");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "itl_ms"), "count")),
                     12);
    assert_float_equal(json_number_value(json_object_get(j, "spike_ratio")), 7, 1e-9);
    assert_true(json_is_true(json_object_get(j, "complete")));
    json_decref(j);

    /* Comparison: interference / baseline, null where the baseline has nothing. */
    analysis_summary base = s;
    base.injections = NULL;
    base.n_injections = 0;
    base.itl_ms.p99 = s.itl_ms.p99 / 2;
    base.itl_ms.max = s.itl_ms.max / 4;
    base.stalls.count = 0;
    json_t *c = analysis_comparison_to_json(&base, &s);
    json_t *ratios = json_object_get(c, "ratios");
    static const char *const rk[] = {"p50", "p90", "p99", "p999", "max", "stall_count"};
    expect_keys(ratios, rk, 6);
    assert_float_equal(json_number_value(json_object_get(ratios, "p99")), 2, 1e-12);
    assert_float_equal(json_number_value(json_object_get(ratios, "max")), 4, 1e-12);
    assert_float_equal(json_number_value(json_object_get(ratios, "p50")), 1, 1e-12);
    assert_true(json_is_null(json_object_get(ratios, "stall_count")));
    assert_true(json_is_object(json_object_get(c, "baseline")));
    assert_true(json_is_object(json_object_get(c, "interference")));
    json_decref(c);
    c = analysis_comparison_to_json(NULL, &s);
    assert_true(json_is_null(json_object_get(c, "baseline")));
    assert_true(json_is_null(json_object_get(json_object_get(c, "ratios"), "p99")));
    json_decref(c);
    analysis_summary_free(&s);
    tokenlog_free(&log);
}

/* ---- causes ------------------------------------------------------------------------- */

static void step(tokenlog *log, int64_t i, double start_ms, double end_ms, int prefill,
                 double modeled_ms)
{
    tokenlog_step st = {.step = i, .t_start_ns = (int64_t)(start_ms * MS),
                        .t_end_ns = (int64_t)(end_ms * MS), .decode_tokens = 1,
                        .prefill_tokens = prefill, .n_requests = 1,
                        .modeled_ns = (int64_t)(modeled_ms * MS)};
    assert_int_equal(tokenlog_add_step(log, &st), 0);
}

/* One user streaming a token every 10 ms from 0 to 1000 ms, but for four 200 ms gaps, each
 * behind a different cause (threshold 50 ms):
 *   200-400  a step carrying 8,000 prompt tokens, 200 ms long and modeled so: prefill, its
 *            culprit the injection (request 9) whose wait [200, 400] overlapped it; request 8,
 *            a 100-token background prompt that queued behind it, waited too but is no culprit;
 *   500-700  a decode step measured 200 ms, modeled 10: the server's machine;
 *   800-1000 10 ms steps all through: the client read late;
 *   1100-1300 no step at all: unexplained. */
static void build_causes(tokenlog *log, bool with_steps)
{
    tokenlog_init(log);
    static const double gaps[] = {200, 500, 800, 1100};
    for (double t = 0; t <= 1300; t += 10) {
        bool in_gap = false;
        for (int g = 0; g < 4; g++)
            in_gap = in_gap || (t > gaps[g] && t < gaps[g] + 200);
        if (!in_gap)
            ev(log, t, 0, 1, TOKENLOG_BG, 1);
    }
    req(log, 1, 0, TOKENLOG_BG, 0, 0, 0, 1300, 50, NULL);
    req(log, 9, -1, TOKENLOG_INJECT, 195, 195, 400, 405, 8000, NULL);
    req(log, 8, 1, TOKENLOG_BG, 250, 250, 410, 500, 100, NULL);
    if (!with_steps)
        return;
    int64_t k = 0;
    for (double t = 0; t < 200; t += 10)
        step(log, k++, t, t + 10, 0, 10);
    step(log, k++, 200, 400, 8000, 195);
    for (double t = 400; t < 500; t += 10)
        step(log, k++, t, t + 10, 0, 10);
    step(log, k++, 500, 700, 0, 10);
    for (double t = 700; t < 1100; t += 10)
        step(log, k++, t, t + 10, 0, 10);
    /* nothing from 1100 to 1300 */
    for (double t = 1300; t < 1310; t += 10)
        step(log, k++, t, t + 10, 0, 10);
}

static void test_causes_from_the_step_log(void **state)
{
    (void)state;
    tokenlog log;
    build_causes(&log, true);
    analysis_summary s = summarize(&log, 50, 0, 1.3);
    assert_int_equal(s.n_stall_list, 4);
    const analysis_attribution *a = &s.attribution;
    assert_true(a->step_log);
    static const analysis_cause want[] = {ANALYSIS_CAUSE_PREFILL, ANALYSIS_CAUSE_SERVER,
                                          ANALYSIS_CAUSE_CLIENT, ANALYSIS_CAUSE_UNEXPLAINED};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(s.stall_list[i].cause, want[i]);
        assert_int_equal(a->by_cause[want[i]].stalls, 1);
        assert_float_equal(a->by_cause[want[i]].frozen_user_s, 0.2, 1e-9);
        assert_int_equal(s.stall_list[i].gap_ns, 200 * MS);
    }
    /* The culprit is the 8,000-token injection alone, in the 8k-16k bucket. */
    assert_int_equal(s.stall_list[0].n_culprits, 1);
    assert_int_equal(s.stall_list[0].culprit[0], 9);
    assert_int_equal(s.stall_list[0].culprit_prompt[0], 8000);
    assert_int_equal(a->n_culprits, 1);
    assert_int_equal(a->culprits[0].request, 9);
    assert_int_equal(a->culprits[0].users, 1);
    assert_int_equal(a->culprits[0].stalls, 1);
    assert_int_equal(a->by_prompt[4].stalls, 1); /* 8000 is in [8k, 16k) */
    /* Rates: 4 stalls in 1.3 s; the one request saw gaps over 100 ms, none over 1 s. */
    assert_float_equal(a->stalls_per_min, 4 / (1.3 / 60), 1e-9);
    assert_float_equal(a->stalls_per_1k_requests, 4000, 1e-9);
    assert_float_equal(a->frozen_user_s_per_hour, 0.8 * 3600 / 1.3, 1e-6);
    assert_float_equal(a->requests_stalled_100ms, 1, 0);
    assert_float_equal(a->requests_stalled_1s, 0, 0);

    /* stalls.csv: one row per stall, the culprit named with its prompt. */
    char dir[] = "/tmp/test_causes_XXXXXX", path[64], err[ERR_LEN] = "";
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/stalls.csv", dir);
    assert_int_equal(analysis_write_stalls_csv(&s, path, err), 0);
    FILE *f = fopen(path, "r");
    char text[1024] = "";
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    assert_string_equal(text, "t_ns,user,request,gap_ms,cause,culprits\n"
                              "200000000,0,1,200.000000,prefill,9:8000\n"
                              "500000000,0,1,200.000000,server,\n"
                              "800000000,0,1,200.000000,client,\n"
                              "1100000000,0,1,200.000000,unexplained,\n");
    unlink(path);
    rmdir(dir);
    analysis_summary_free(&s);
    tokenlog_free(&log);
}

/* Without a step log (a --target) only a long prefill is told apart from the rest. */
static void test_causes_without_steps(void **state)
{
    (void)state;
    tokenlog log;
    build_causes(&log, false);
    analysis_summary s = summarize(&log, 50, 0, 1.3);
    assert_false(s.attribution.step_log);
    assert_int_equal(s.stall_list[0].cause, ANALYSIS_CAUSE_PREFILL);
    for (int i = 1; i < 4; i++)
        assert_int_equal(s.stall_list[i].cause, ANALYSIS_CAUSE_UNEXPLAINED);
    /* A short prefill step that the machine stretched is the machine's, not a prefill. */
    analysis_summary_free(&s);
    tokenlog_free(&log);
    tokenlog_init(&log);
    for (double t = 0; t <= 300; t += 10)
        if (!(t > 100 && t < 200))
            ev(&log, t, 0, 1, TOKENLOG_BG, 1);
    req(&log, 1, 0, TOKENLOG_BG, 0, 0, 0, 300, 50, NULL);
    for (double t = 0; t < 100; t += 10)
        step(&log, (int64_t)t, t, t + 10, 0, 10);
    step(&log, 100, 100, 200, 64, 11); /* 64 prompt tokens, modeled 11 ms, took 100 */
    for (double t = 200; t < 300; t += 10)
        step(&log, (int64_t)t, t, t + 10, 0, 10);
    s = summarize(&log, 50, 0, 0.3);
    assert_int_equal(s.n_stall_list, 1);
    assert_int_equal(s.stall_list[0].cause, ANALYSIS_CAUSE_SERVER);
    analysis_summary_free(&s);
    tokenlog_free(&log);
}

/* A machine slower than its model: every step takes 4x its modeled time (a cpu engine priced
 * by another machine's profile, or a sanitizer build). Decode steps measured 40 ms, modeled
 * 10; a step carrying 1,000 prompt tokens measured 600 ms, modeled 150 (threshold 200): at
 * face value its work was short and the machine stretched it, but at this machine's pace
 * (4 x 150 = 600 ms) the prefill is the whole wait: a prefill stall. A decode step measured
 * 600 ms (modeled 10, so 40 at this pace) in the same run stays the machine's. */
static void test_causes_at_the_machines_pace(void **state)
{
    (void)state;
    tokenlog log;
    tokenlog_init(&log);
    for (double t = 0; t <= 2400; t += 40)
        if (!(t > 400 && t < 1000) && !(t > 1400 && t < 2000))
            ev(&log, t, 0, 1, TOKENLOG_BG, 1);
    req(&log, 1, 0, TOKENLOG_BG, 0, 0, 0, 2400, 50, NULL);
    req(&log, 9, -1, TOKENLOG_INJECT, 390, 390, 1000, 1005, 1000, NULL);
    int64_t k = 0;
    for (double t = 0; t < 400; t += 40)
        step(&log, k++, t, t + 40, 0, 10);
    step(&log, k++, 400, 1000, 1000, 150);
    for (double t = 1000; t < 1400; t += 40)
        step(&log, k++, t, t + 40, 0, 10);
    step(&log, k++, 1400, 2000, 0, 10);
    for (double t = 2000; t < 2400; t += 40)
        step(&log, k++, t, t + 40, 0, 10);
    analysis_summary s = summarize(&log, 200, 0, 2.4);
    assert_int_equal(s.n_stall_list, 2);
    assert_int_equal(s.stall_list[0].cause, ANALYSIS_CAUSE_PREFILL);
    assert_int_equal(s.stall_list[0].culprit[0], 9);
    assert_int_equal(s.stall_list[1].cause, ANALYSIS_CAUSE_SERVER);
    analysis_summary_free(&s);
    tokenlog_free(&log);
}

/* The whole run's percentiles are read off its two sorted halves (no second sort): they
 * must equal the percentiles of all the gaps sorted together, on random runs. */
static void test_percentiles_from_halves(void **state)
{
    (void)state;
    for (int round = 0; round < 40; round++) {
        tokenlog log;
        tokenlog_init(&log);
        int users = 1 + (int)rnd(6);
        for (int u = 0; u < users; u++) {
            double t = (double)rnd(50);
            int n = (int)rnd(round < 5 ? 3 : 400);
            for (int i = 0; i < n; i++) {
                ev(&log, t, u, u, TOKENLOG_BG, 1);
                t += 1 + (double)rnd(round % 2 ? 3 : 90); /* many ties, or few */
            }
        }
        analysis_summary s = summarize(&log, 1e9, 0, 0);
        double *all = NULL;
        int64_t n = 0;
        char err[ERR_LEN] = "";
        assert_int_equal(analysis_gaps_ms(&log, &all, &n, err), 0);
        analysis_dist want;
        analysis_dist_from(all, n, &want);
        assert_int_equal(s.itl_ms.count, want.count);
        assert_float_equal(s.itl_ms.p50, want.p50, 0);
        assert_float_equal(s.itl_ms.p90, want.p90, 0);
        assert_float_equal(s.itl_ms.p99, want.p99, 0);
        assert_float_equal(s.itl_ms.p999, want.p999, 0);
        assert_float_equal(s.itl_ms.max, want.max, 0);
        assert_float_equal(s.itl_ms.mean, want.mean, 1e-9 * (want.mean + 1));
        free(all);
        analysis_summary_free(&s);
        tokenlog_free(&log);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantile_nearest_rank),
        cmocka_unit_test(test_dist_mean_max_sorted),
        cmocka_unit_test(test_gaps_out_of_order_per_request),
        cmocka_unit_test(test_threshold_rules),
        cmocka_unit_test(test_summary_two_users),
        cmocka_unit_test(test_alignment_boundaries),
        cmocka_unit_test(test_users_stalled_counts_distinct_users),
        cmocka_unit_test(test_injections_in_plan_order),
        cmocka_unit_test(test_empty_log),
        cmocka_unit_test(test_failed_run),
        cmocka_unit_test(test_matches_naive_reference),
        cmocka_unit_test(test_summary_json_keys),
        cmocka_unit_test(test_causes_from_the_step_log),
        cmocka_unit_test(test_percentiles_from_halves),
        cmocka_unit_test(test_causes_without_steps),
        cmocka_unit_test(test_causes_at_the_machines_pace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
