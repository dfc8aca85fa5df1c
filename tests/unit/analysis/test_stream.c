/* analysis/stream: the streaming analysis against the in-memory one (analysis_summarize)
 * on random runs produced the way the simulator produces them: in time order, each
 * request's row given when it is sent and again at its first token and its end. Exact
 * budgets: the same summary.json, byte for byte, and the same stalls. A tiny budget: the
 * histogram's percentiles within the stated relative error of the exact ones, everything
 * else the same. A step's events in one call (analysis_stream_events): the same as one by
 * one, to the bit. An unknown threshold, a second pass, and time travel refused. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "analysis/analysis.h"
#include "analysis/sketch.h"
#include "analysis/stream.h"
#include "common/err.h"
#include "common/tokenlog.h"

#include "sketch_bound.h"

#define MS 1000000LL

/* What a producer hands over, in order. */
typedef enum { ACT_REQUEST, ACT_STEP, ACT_EVENT } act_kind;
typedef struct act {
    act_kind kind;
    tokenlog_request req;
    tokenlog_step step;
    tokenlog_event ev;
} act;

typedef struct run {
    tokenlog log; /* the final log, as analysis_summarize sees it */
    act *acts;
    int64_t n_acts, cap_acts;
    double duration_s;
} run;

static void push_act(run *r, const act *a)
{
    if (r->n_acts == r->cap_acts) {
        r->cap_acts = r->cap_acts ? r->cap_acts * 2 : 1024;
        r->acts = realloc(r->acts, (size_t)r->cap_acts * sizeof *r->acts);
        assert_non_null(r->acts);
    }
    r->acts[r->n_acts++] = *a;
}

static void act_request(run *r, const tokenlog_request *q)
{
    act a = {.kind = ACT_REQUEST, .req = *q};
    push_act(r, &a);
}

/* A small server in virtual time: steps of 1-3 ms, now and then a long one (a prefill),
 * users in a closed loop, injections at random times whose first token comes after a long
 * step; some events missing (a user that skipped a step). */
static void make_run(run *r, int users, int steps, int64_t *next_id)
{
    memset(r, 0, sizeof *r);
    tokenlog_init(&r->log);
    int64_t *row = calloc((size_t)users, sizeof *row); /* the user's request row */
    int *left = calloc((size_t)users, sizeof *left);
    assert_non_null(row);
    assert_non_null(left);
    int64_t t = 0, inject_row = -1;
    int inject_left = 0;
    for (int u = 0; u < users; u++) {
        tokenlog_request q = {.request = (*next_id)++, .user = u, .kind = TOKENLOG_BG,
                              .t_plan_ns = 0, .t_send_ns = 0, .t_first_ns = -1, .t_end_ns = -1,
                              .prompt_tokens_requested = 64, .prompt_tokens = 64};
        assert_int_equal(tokenlog_add_request(&r->log, &q, &row[u]), 0);
        act_request(r, &q);
        left[u] = 2 + (int)rnd(30);
    }
    for (int k = 0; k < steps; k++) {
        bool prefill = false;
        if (inject_row < 0 && rnd(40) == 0) {
            tokenlog_request q = {.request = (*next_id)++, .user = -1, .kind = TOKENLOG_INJECT,
                                  .t_plan_ns = t, .t_send_ns = t, .t_first_ns = -1,
                                  .t_end_ns = -1, .prompt_tokens_requested = 8000,
                                  .prompt_tokens = 8000};
            assert_int_equal(tokenlog_add_request(&r->log, &q, &inject_row), 0);
            act_request(r, &q);
            inject_left = 1 + (int)rnd(3);
            prefill = true;
        }
        int64_t dur = prefill ? (20 + (int64_t)rnd(40)) * MS : (int64_t)(1 + rnd(3)) * MS + (int64_t)rnd(1000);
        if (!prefill && rnd(200) == 0)
            dur = (int64_t)(30 + rnd(30)) * MS; /* a slow step: the machine */
        tokenlog_step st = {.step = k, .t_start_ns = t, .t_end_ns = t + dur,
                            .decode_tokens = users, .prefill_tokens = prefill ? 8000 : 0,
                            .n_requests = users, .modeled_ns = prefill ? dur : MS};
        assert_int_equal(tokenlog_add_step(&r->log, &st), 0);
        act sa = {.kind = ACT_STEP, .step = st};
        push_act(r, &sa);
        t += dur;
        if (inject_row >= 0) {
            tokenlog_request *q = &r->log.requests[inject_row];
            tokenlog_event e = {.t_ns = t, .request = q->request, .user = -1, .n_tokens = 1,
                                .kind = TOKENLOG_INJECT};
            assert_int_equal(tokenlog_add_event(&r->log, &e), 0);
            act ea = {.kind = ACT_EVENT, .ev = e};
            push_act(r, &ea);
            if (q->t_first_ns < 0)
                q->t_first_ns = t;
            if (--inject_left == 0) {
                q->t_end_ns = t;
                q->completion_tokens = 3;
                inject_row = -1;
            }
            act_request(r, q);
        }
        for (int u = 0; u < users; u++) {
            if (rnd(10) == 0)
                continue;
            tokenlog_request *q = &r->log.requests[row[u]];
            tokenlog_event e = {.t_ns = t, .request = q->request, .user = u,
                                .n_tokens = 1 + (int)(rnd(8) == 0), .kind = TOKENLOG_BG};
            assert_int_equal(tokenlog_add_event(&r->log, &e), 0);
            act ea = {.kind = ACT_EVENT, .ev = e};
            push_act(r, &ea);
            bool changed = false;
            if (q->t_first_ns < 0)
                q->t_first_ns = t, changed = true;
            q->completion_tokens++;
            if (--left[u] == 0) {
                q->t_end_ns = t;
                snprintf(q->finish_reason, sizeof q->finish_reason, "length");
                act_request(r, q);
                tokenlog_request n = {.request = (*next_id)++, .user = u, .kind = TOKENLOG_BG,
                                      .t_plan_ns = t, .t_send_ns = t, .t_first_ns = -1,
                                      .t_end_ns = -1, .prompt_tokens_requested = 64,
                                      .prompt_tokens = 64};
                assert_int_equal(tokenlog_add_request(&r->log, &n, &row[u]), 0);
                act_request(r, &n);
                left[u] = 2 + (int)rnd(30);
            } else if (changed) {
                act_request(r, q);
            }
        }
    }
    r->duration_s = (double)t / 1e9;
    free(row);
    free(left);
}

static void free_run(run *r)
{
    tokenlog_free(&r->log);
    free(r->acts);
}

static analysis_options options(const run *r, double threshold_ms, double reference_p50_ms)
{
    analysis_options opt;
    memset(&opt, 0, sizeof opt);
    opt.label = "interference";
    opt.engine = "sim";
    opt.target = "";
    opt.duration_s = r->duration_s;
    opt.threshold_ms = threshold_ms;
    opt.reference_p50_ms = reference_p50_ms;
    opt.complete = true;
    return opt;
}

/* The stream fed in the run's order; the return of analysis_stream_end. */
static int stream(const run *r, const analysis_options *opt, analysis_summary *out, double *thr)
{
    char err[ERR_LEN] = "";
    analysis_stream *s = analysis_stream_begin(opt, err);
    assert_non_null(s);
    for (int64_t i = 0; i < r->n_acts; i++) {
        const act *a = &r->acts[i];
        int rc = a->kind == ACT_REQUEST ? analysis_stream_request(s, &a->req, err)
                 : a->kind == ACT_STEP  ? analysis_stream_step(s, &a->step, err)
                                        : analysis_stream_event(s, &a->ev, err);
        if (rc != 0)
            fail_msg("stream: %s", err);
    }
    assert_int_equal(analysis_stream_log(s)->n_requests, r->log.n_requests);
    int rc = analysis_stream_end(s, opt, out, thr, err);
    if (rc == -1)
        fail_msg("analysis_stream_end: %s", err);
    return rc;
}

/* The same, the events between two request rows handed over in one analysis_stream_events
 * call (a simulator's step, and often several). */
static int stream_batched(const run *r, const analysis_options *opt, analysis_summary *out,
                          double *thr)
{
    char err[ERR_LEN] = "";
    analysis_stream *s = analysis_stream_begin(opt, err);
    assert_non_null(s);
    tokenlog_event *batch = malloc((size_t)(r->n_acts + 1) * sizeof *batch);
    assert_non_null(batch);
    int64_t n = 0;
    for (int64_t i = 0; i <= r->n_acts; i++) {
        const act *a = i < r->n_acts ? &r->acts[i] : NULL;
        if (a && a->kind == ACT_EVENT) {
            batch[n++] = a->ev;
            continue;
        }
        if (a && a->kind == ACT_STEP) { /* steps count only at the end: batches span steps */
            if (analysis_stream_step(s, &a->step, err) != 0)
                fail_msg("stream: %s", err);
            continue;
        }
        if (n > 0 && analysis_stream_events(s, batch, n, err) != 0)
            fail_msg("stream: %s", err);
        n = 0;
        if (!a)
            break;
        if (analysis_stream_request(s, &a->req, err) != 0)
            fail_msg("stream: %s", err);
    }
    free(batch);
    int rc = analysis_stream_end(s, opt, out, thr, err);
    if (rc == -1)
        fail_msg("analysis_stream_end: %s", err);
    return rc;
}

static char *json_text(const analysis_summary *s)
{
    json_t *j = analysis_summary_to_json(s);
    assert_non_null(j);
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(j);
    assert_non_null(text);
    return text;
}

static void assert_same_stalls(const analysis_summary *a, const analysis_summary *b)
{
    assert_int_equal(a->n_stall_list, b->n_stall_list);
    for (int64_t i = 0; i < a->n_stall_list; i++)
        assert_memory_equal(&a->stall_list[i], &b->stall_list[i], sizeof a->stall_list[i]);
}

static void assert_same_summary(const analysis_summary *a, const analysis_summary *b)
{
    char *ja = json_text(a), *jb = json_text(b);
    assert_string_equal(ja, jb);
    free(ja);
    free(jb);
    assert_same_stalls(a, b);
}

static void test_stream_equals_summarize(void **state)
{
    (void)state;
    int64_t id = 1;
    for (int trial = 0; trial < 30; trial++) {
        run r;
        make_run(&r, 1 + (int)rnd(12), 100 + (int)rnd(400), &id);
        /* Each threshold rule: own p50, a reference p50, a given threshold. */
        for (int rule = 0; rule < 3; rule++) {
            double thr = rule == 2 ? 4.5 : 0, ref = rule == 1 ? 2.0 : 0;
            analysis_options opt = options(&r, thr, ref);
            analysis_summary exact, streamed;
            char err[ERR_LEN] = "";
            if (analysis_summarize(&r.log, &opt, &exact, err) != 0)
                fail_msg("%s", err);
            assert_int_equal(stream(&r, &opt, &streamed, NULL), 0);
            assert_false(streamed.itl_histogram);
            assert_same_summary(&exact, &streamed);
            assert_true(exact.n_injections == 0 || exact.stalls.count > 0 || rule != 0);
            analysis_summary_free(&exact);
            analysis_summary_free(&streamed);
        }
        free_run(&r);
    }
}

static void test_stream_histogram_within_bound(void **state)
{
    (void)state;
    int64_t id = 1;
    int sketched_runs = 0;
    for (int trial = 0; trial < 30; trial++) {
        run r;
        make_run(&r, 2 + (int)rnd(12), 200 + (int)rnd(400), &id);
        analysis_options opt = options(&r, 0, 0);
        analysis_summary exact, sk;
        char err[ERR_LEN] = "";
        if (analysis_summarize(&r.log, &opt, &exact, err) != 0)
            fail_msg("%s", err);
        /* The stall threshold as the exact run found it: stalls must then be the same. */
        opt.threshold_ms = exact.stalls.threshold_ms;
        opt.exact_gaps_max = 50;
        assert_int_equal(stream(&r, &opt, &sk, NULL), 0);
        if (exact.itl_ms.count > 50) {
            sketched_runs++;
            assert_true(sk.itl_histogram);
            assert_float_equal(sk.itl_relative_error, SKETCH_RELATIVE_ERROR, 0);
        }
        assert_int_equal(sk.itl_ms.count, exact.itl_ms.count);
        assert_float_equal(sk.itl_ms.max, exact.itl_ms.max, 0);
        assert_float_equal(sk.itl_ms.mean, exact.itl_ms.mean, 1e-9 * exact.itl_ms.mean);
        assert_within(sk.itl_ms.p50, exact.itl_ms.p50, "p50");
        assert_within(sk.itl_ms.p90, exact.itl_ms.p90, "p90");
        assert_within(sk.itl_ms.p99, exact.itl_ms.p99, "p99");
        assert_within(sk.itl_ms.p999, exact.itl_ms.p999, "p99.9");
        assert_int_equal(sk.stalls.count, exact.stalls.count);
        assert_int_equal(sk.stalls.aligned, exact.stalls.aligned);
        assert_float_equal(sk.stalls.stalled_time_fraction, exact.stalls.stalled_time_fraction, 0);
        assert_same_stalls(&sk, &exact);
        assert_int_equal(sk.n_injections, exact.n_injections);
        for (int j = 0; j < sk.n_injections; j++) {
            assert_float_equal(sk.injections[j].max_gap_ms, exact.injections[j].max_gap_ms, 0);
            assert_within(sk.injections[j].median_gap_ms, exact.injections[j].median_gap_ms,
                          "an injection's median gap");
            assert_int_equal(sk.injections[j].users_stalled, exact.injections[j].users_stalled);
        }
        assert_int_equal(sk.attribution.n_culprits, exact.attribution.n_culprits);
        for (int c = 0; c < ANALYSIS_N_CAUSES; c++)
            assert_int_equal(sk.attribution.by_cause[c].stalls, exact.attribution.by_cause[c].stalls);
        analysis_summary_free(&exact);
        analysis_summary_free(&sk);
        free_run(&r);
    }
    assert_true(sketched_runs > 20);
}

/* A step's events in one call give the summary of the events one by one, byte for byte:
 * exact, with a budget crossed inside a batch (the histogram), and with the candidates
 * pruned while the threshold is unknown. */
static void test_stream_batches_equal_events(void **state)
{
    (void)state;
    int64_t id = 1;
    for (int trial = 0; trial < 20; trial++) {
        run r;
        if (trial == 10)
            id = (int64_t)1 << 40; /* sparse ids: the maps, not the tables */
        make_run(&r, 1 + (int)rnd(12), 100 + (int)rnd(400), &id);
        for (int rule = 0; rule < 4; rule++) {
            double thr = rule == 2 ? 4.5 : 0, ref = rule == 1 ? 2.0 : 0;
            analysis_options opt = options(&r, thr, ref);
            if (rule == 3) { /* small budgets: a histogram, candidates pruned */
                opt.exact_gaps_max = 1 + (int64_t)rnd(200);
                opt.stall_candidates_max = 64;
            }
            analysis_summary one, batched;
            double thr_one = 0, thr_batched = 0;
            int rc_one = stream(&r, &opt, &one, &thr_one);
            int rc_batched = stream_batched(&r, &opt, &batched, &thr_batched);
            assert_int_equal(rc_one, rc_batched);
            if (rc_one == -2) {
                assert_true(thr_one == thr_batched);
                continue;
            }
            assert_same_summary(&one, &batched);
            /* A histogram exactly when the gaps outgrew the budget (a small budget drawn for
             * rule 3 may still hold a short run's gaps: then the summary stays exact). */
            assert_true(one.itl_histogram == (rule == 3 && one.itl_ms.count > opt.exact_gaps_max));
            analysis_summary_free(&one);
            analysis_summary_free(&batched);
        }
        free_run(&r);
    }
}

/* The threshold unknown until the end (no baseline): a tiny candidate budget either still
 * holds every stall, or says so (-2) and a second pass with the threshold is exact. */
static void test_stream_unknown_threshold(void **state)
{
    (void)state;
    int64_t id = 1;
    int second_passes = 0, first_pass_exact = 0;
    for (int trial = 0; trial < 30; trial++) {
        run r;
        make_run(&r, 1 + (int)rnd(12), 100 + (int)rnd(400), &id);
        analysis_options opt = options(&r, 0, 0);
        analysis_summary exact, sk;
        char err[ERR_LEN] = "";
        if (analysis_summarize(&r.log, &opt, &exact, err) != 0)
            fail_msg("%s", err);
        opt.stall_candidates_max = trial % 2 ? 8 : 4096;
        double thr = 0;
        int rc = stream(&r, &opt, &sk, &thr);
        if (rc == -2) {
            second_passes++;
            assert_float_equal(thr, exact.stalls.threshold_ms, 0);
            opt.threshold_ms = thr;
            opt.threshold_known = true;
            assert_int_equal(stream(&r, &opt, &sk, NULL), 0);
        } else {
            first_pass_exact++;
        }
        assert_same_summary(&exact, &sk);
        analysis_summary_free(&exact);
        analysis_summary_free(&sk);
        free_run(&r);
    }
    assert_true(second_passes > 0);
    assert_true(first_pass_exact > 0);
}

/* Most gaps 0 (tokens coalesced into one read on a loaded client): the p50 and so the
 * threshold are 0, every other gap is a stall, and a second pass with a threshold of 0 still
 * settles them (0 is a threshold then, not "unknown"). */
static void test_stream_zero_threshold_second_pass(void **state)
{
    (void)state;
    tokenlog log;
    tokenlog_init(&log);
    int64_t t = 0;
    for (int read = 0; read < 40; read++) { /* every 2 ms, three events per request at once */
        t += 2 * MS;
        for (int r = 0; r < 4; r++)
            for (int k = 0; k < 3; k++) {
                tokenlog_event e = {.t_ns = t, .request = 1 + r, .user = r, .n_tokens = 1,
                                    .kind = TOKENLOG_BG};
                assert_int_equal(tokenlog_add_event(&log, &e), 0);
            }
    }
    analysis_options opt;
    memset(&opt, 0, sizeof opt);
    opt.duration_s = (double)t / 1e9;
    analysis_summary exact, sk;
    char err[ERR_LEN] = "";
    if (analysis_summarize(&log, &opt, &exact, err) != 0)
        fail_msg("%s", err);
    assert_float_equal(exact.stalls.threshold_ms, 0, 0);
    assert_true(exact.stalls.count > 8);
    /* The same log as a stream with room for 4 long gaps: a second pass, at threshold 0. */
    opt.stall_candidates_max = 4;
    analysis_stream *s = analysis_stream_begin(&opt, err);
    assert_non_null(s);
    for (int64_t i = 0; i < log.n_events; i++)
        assert_int_equal(analysis_stream_event(s, &log.events[i], err), 0);
    double thr = -1;
    assert_int_equal(analysis_stream_end(s, &opt, &sk, &thr, err), -2);
    assert_float_equal(thr, 0, 0);
    opt.threshold_ms = thr;
    opt.threshold_known = true;
    s = analysis_stream_begin(&opt, err);
    assert_non_null(s);
    for (int64_t i = 0; i < log.n_events; i++)
        assert_int_equal(analysis_stream_event(s, &log.events[i], err), 0);
    assert_int_equal(analysis_stream_end(s, &opt, &sk, NULL, err), 0);
    assert_same_summary(&exact, &sk);
    analysis_summary_free(&exact);
    analysis_summary_free(&sk);
    tokenlog_free(&log);
}

/* An event earlier than its request's previous one is refused, not mis-measured. */
static void test_stream_refuses_time_travel(void **state)
{
    (void)state;
    analysis_options opt;
    memset(&opt, 0, sizeof opt);
    opt.duration_s = 1;
    char err[ERR_LEN] = "";
    analysis_stream *s = analysis_stream_begin(&opt, err);
    assert_non_null(s);
    tokenlog_event e = {.t_ns = 5 * MS, .request = 7, .user = 0, .n_tokens = 1, .kind = TOKENLOG_BG};
    assert_int_equal(analysis_stream_event(s, &e, err), 0);
    e.t_ns = 4 * MS;
    assert_int_equal(analysis_stream_event(s, &e, err), -1);
    assert_non_null(strstr(err, "not in time order"));
    analysis_stream_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_equals_summarize),
        cmocka_unit_test(test_stream_histogram_within_bound),
        cmocka_unit_test(test_stream_unknown_threshold),
        cmocka_unit_test(test_stream_zero_threshold_second_pass),
        cmocka_unit_test(test_stream_refuses_time_travel),
        cmocka_unit_test(test_stream_batches_equal_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
