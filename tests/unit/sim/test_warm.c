/* test_warm — the simulator's warm start (sim/warm.h): a run with warmup_ns W is the cold run
 * of the same workload started W earlier (its injections and arrivals W later, its end W
 * later), recorded as a live client records it after its warm-up. The reference here is that
 * cold run filtered by hand, rule by rule (warm.h): requests sent from W on kept, those in
 * flight at W carried over first with no plan, send or first token, the rest dropped; events
 * from W on, steps that start from W on; every time rebased, requests renumbered. The warm
 * run must give exactly that, to its log and to a sink alike, on one instance and on a
 * disaggregated pair; without closed users it changes nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "common/tokenlog.h"
#include "sim/sim.h"
#include "workload/workload.h"

#include "toy_cost.h"

/* The cold run W earlier, filtered by warm.h's rules: the reference. */
static void reference(const sim_config *warm, tokenlog *out)
{
    const int64_t W = warm->warmup_ns;
    sim_config cold = *warm;
    cold.warmup_ns = 0;
    cold.wl.duration_ns += W;
    cold.wl.inject_at_ns += W; /* fixed period: every injection exactly W later */
    tokenlog all;
    sim_stats st;
    run_or_fail(&cold, &all, &st);
    tokenlog_init(out);
    int64_t *ids = malloc((size_t)(all.n_requests + 1) * sizeof *ids);
    assert_non_null(ids);
    for (int64_t i = 0; i < all.n_requests; i++)
        ids[i] = -1;
    /* carried over (sent before W, running at W) first, then the rest sent from W on */
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < all.n_requests; i++) {
            tokenlog_request r = all.requests[i];
            const bool early = r.t_send_ns < W;
            const bool carried = early && (r.t_end_ns < 0 || r.t_end_ns >= W);
            if (pass == 0 ? !carried : early)
                continue;
            ids[i] = out->n_requests;
            r.request = ids[i];
            if (carried) {
                r.t_plan_ns = r.t_send_ns = r.t_first_ns = -1;
            } else {
                r.t_plan_ns -= W;
                r.t_send_ns -= W;
                r.t_first_ns = r.t_first_ns >= 0 ? r.t_first_ns - W : -1;
            }
            r.t_end_ns = r.t_end_ns >= 0 ? r.t_end_ns - W : -1;
            int64_t index;
            assert_int_equal(tokenlog_add_request(out, &r, &index), 0);
        }
    for (int64_t i = 0; i < all.n_events; i++) {
        tokenlog_event ev = all.events[i];
        if (ev.t_ns < W)
            continue;
        assert_true(ids[ev.request] >= 0); /* an event from W on is a kept request's */
        ev.request = ids[ev.request];
        ev.t_ns -= W;
        assert_int_equal(tokenlog_add_event(out, &ev), 0);
    }
    for (int64_t i = 0; i < all.n_steps; i++) {
        tokenlog_step s = all.steps[i];
        if (s.t_start_ns < W)
            continue;
        s.t_start_ns -= W;
        s.t_end_ns -= W;
        assert_int_equal(tokenlog_add_step(out, &s), 0);
    }
    /* what the steps from W on did to the kept requests' places */
    for (int64_t i = 0; i < all.n_sched_events; i++) {
        tokenlog_sched_event e = all.sched_events[i];
        if (e.t_ns < W || ids[e.request] < 0)
            continue;
        e.request = ids[e.request];
        e.t_ns -= W;
        assert_int_equal(tokenlog_add_sched_event(out, &e), 0);
    }
    free(ids);
    tokenlog_free(&all);
}

static void assert_logs_equal(const tokenlog *a, const tokenlog *b)
{
    if (!toy_logs_equal(a, b))
        fail_msg("the logs differ (%lld/%lld requests, %lld/%lld events, %lld/%lld steps)",
                 (long long)a->n_requests, (long long)b->n_requests, (long long)a->n_events,
                 (long long)b->n_events, (long long)a->n_steps, (long long)b->n_steps);
}

/* What a sink is handed, as a log: each request id's last row. */
static int col_event(void *ctx, const tokenlog_event *ev, char *err)
{
    (void)err;
    return tokenlog_add_event(ctx, ev);
}
static int col_request(void *ctx, const tokenlog_request *r, char *err)
{
    (void)err;
    tokenlog *log = ctx;
    if (r->request < log->n_requests) {
        log->requests[r->request] = *r;
        return 0;
    }
    assert_int_equal(r->request, log->n_requests); /* ids 0, 1, ... as they first come */
    int64_t index;
    return tokenlog_add_request(log, r, &index);
}
static int col_step(void *ctx, const tokenlog_step *s, char *err)
{
    (void)err;
    return tokenlog_add_step(ctx, s);
}
static int col_sched_event(void *ctx, const tokenlog_sched_event *e, char *err)
{
    (void)err;
    return tokenlog_add_sched_event(ctx, e);
}

/* The warm run against the reference, through the log and through a sink; its statistics
 * count what was kept; every closed user is carried over (a closed user is always mid-answer). */
static void check_warm(const sim_config *c)
{
    tokenlog warm, ref, sunk;
    sim_stats st, st_sink;
    run_or_fail(c, &warm, &st);
    reference(c, &ref);
    assert_logs_equal(&warm, &ref);
    tokenlog_init(&sunk);
    tokenlog_sink sink = {.event = col_event, .request = col_request, .step = col_step,
                          .ctx = &sunk, .sched_event = col_sched_event};
    char err[ERR_LEN] = "";
    if (sim_run_sink(c, &sink, &st_sink, err) != 0)
        fail_msg("sim_run_sink: %s", err);
    assert_logs_equal(&sunk, &warm);
    assert_memory_equal(&st, &st_sink, sizeof st);
    assert_int_equal(st.token_events, warm.n_events);
    assert_int_equal(st.steps, warm.n_steps);
    assert_int_equal(st.requests, warm.n_requests);
    int carried = 0;
    for (int64_t i = 0; i < warm.n_requests; i++)
        carried += warm.requests[i].t_send_ns == -1;
    assert_int_equal(carried, c->wl.users);
    for (int i = 0; i < carried; i++)
        assert_true(warm.requests[i].t_send_ns == -1 && warm.requests[i].t_first_ns == -1);
    assert_true(warm.n_events > 100 && warm.n_steps > 50 && warm.n_requests > carried + 10);
    tokenlog_free(&warm);
    tokenlog_free(&ref);
    tokenlog_free(&sunk);
}

static void test_warm_is_the_cold_run_recorded_from_w(void **state)
{
    (void)state;
    sim_config c = toy_busy_config();
    c.warmup_ns = 300000;
    check_warm(&c);
    /* the check can fail: a cold run is not its own warm reference */
    sim_config cold = c;
    cold.warmup_ns = 0;
    tokenlog a, ref;
    sim_stats st;
    run_or_fail(&cold, &a, &st);
    reference(&c, &ref);
    bool differ = a.n_events != ref.n_events || a.n_requests != ref.n_requests;
    for (int64_t i = 0; !differ && i < a.n_events; i++)
        differ = a.events[i].t_ns != ref.events[i].t_ns;
    assert_true(differ);
    tokenlog_free(&a);
    tokenlog_free(&ref);
}

/* A cache too small for the workload (5 blocks): the steps preempt, and what they did to the
 * kept requests' places (sched_events.csv) is kept too, rebased and renumbered. */
static void test_warm_preempting(void **state)
{
    (void)state;
    sim_config c = toy_busy_config();
    c.warmup_ns = 300000;
    c.sched.kv_blocks = 5;
    check_warm(&c);
    tokenlog log;
    sim_stats st;
    run_or_fail(&c, &log, &st);
    int64_t preempted = 0;
    for (int64_t i = 0; i < log.n_sched_events; i++)
        preempted += log.sched_events[i].event == TOKENLOG_PREEMPTED;
    if (!(preempted > 10 && preempted < st.preemptions)) /* some came before t = 0 */
        fail_msg("%lld preempted in the log, %lld in all", (long long)preempted,
                 (long long)st.preemptions);
    tokenlog_free(&log);
}

static void test_warm_disaggregated(void **state)
{
    (void)state;
    sim_config c = toy_busy_config();
    c.warmup_ns = 250000;
    char err[ERR_LEN];
    assert_int_equal(sim_disagg_parse("1:1", &c.disagg, err), 0);
    assert_int_equal(sim_kv_link_parse("nvlink", &c.disagg, err), 0);
    check_warm(&c);
}

/* The longest TTFT of the requests sent in [from, to]. */
static int64_t ttft_max(const tokenlog *log, int64_t from, int64_t to)
{
    int64_t max = 0;
    for (int64_t i = 0; i < log->n_requests; i++) {
        const tokenlog_request *r = &log->requests[i];
        if (r->t_send_ns >= from && r->t_send_ns <= to && r->t_first_ns >= 0 &&
            r->t_first_ns - r->t_send_ns > max)
            max = r->t_first_ns - r->t_send_ns;
    }
    return max;
}

/* The cold start's synchronized first prefill, the reason for the warm start: cold, every
 * user's first request waits for one step holding all the prompts; warm, no recorded request
 * waits that long. */
static void test_warm_has_no_synchronized_start(void **state)
{
    (void)state;
    sim_config c = toy_busy_config();
    c.wl.users = 12;
    c.wl.inject = false;
    c.wl.prompt_len = (workload_dist){.kind = WORKLOAD_DIST_UNIFORM, .a = 60, .b = 120};
    c.sched.policy = SCHED_MIXED;
    c.sched.max_num_batched_tokens = 2048;
    c.sched.max_num_seqs = 64;
    tokenlog cold, warm;
    sim_stats st;
    run_or_fail(&c, &cold, &st);
    const int64_t cold_first_max = ttft_max(&cold, 0, 0);
    c.warmup_ns = 200000;
    run_or_fail(&c, &warm, &st);
    const int64_t warm_max = ttft_max(&warm, 0, INT64_MAX);
    assert_true(warm_max > 0);
    if (!(warm_max * 2 < cold_first_max))
        fail_msg("TTFT max %lld ns warm, %lld ns for the cold start's first requests",
                 (long long)warm_max, (long long)cold_first_max);
    tokenlog_free(&cold);
    tokenlog_free(&warm);
}

/* Without closed users nothing runs before t = 0: a warm-up changes nothing. */
static void test_warm_without_users_is_cold(void **state)
{
    (void)state;
    sim_config c = toy_busy_config();
    c.wl.users = 0;
    c.wl.request_rate = 20000; /* 20 requests a ms */
    tokenlog cold, warm;
    sim_stats a, b;
    run_or_fail(&c, &cold, &a);
    c.warmup_ns = 300000;
    run_or_fail(&c, &warm, &b);
    assert_true(cold.n_requests > 10);
    assert_logs_equal(&warm, &cold);
    assert_memory_equal(&a, &b, sizeof a);
    tokenlog_free(&cold);
    tokenlog_free(&warm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_warm_is_the_cold_run_recorded_from_w),
        cmocka_unit_test(test_warm_preempting),
        cmocka_unit_test(test_warm_disaggregated),
        cmocka_unit_test(test_warm_has_no_synchronized_start),
        cmocka_unit_test(test_warm_without_users_is_cold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
