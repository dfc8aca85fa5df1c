/* client/driver_loop: one event loop's sending over the scripted transport in virtual
 * time: the closed loop and the open loop (rates, --max-concurrency), a trace's end, back-off
 * and Retry-After on overload, nothing recorded, protocol violations summed. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "client/driver.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/tokenlog.h"
#include "workload/workload.h"

#include "scratch_file.h"
#include "scripted_transport.h"

static void check_open_and_closed_loop(int threads)
{
    phase_setup s;
    setup_phase(&s);
    s.f->inject_prompt = 500;
    char dir[64], path[128];
    make_tmpdir(dir, sizeof dir, path, sizeof path);
    tokenlog_writer tokens;
    char err[ERR_LEN];
    assert_int_equal(tokenlog_writer_open(&tokens, path, TOKENLOG_TOKENS_CSV, err), 0);
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true,
                       .tokens_csv = &tokens, .threads = threads};
    driver_result res;
    assert_int_equal(driver_run_phase(&s.t, &ph, &s.log, &res, err), 0);
    assert_true(res.complete);
    assert_int_equal(res.t0_ns, 1000 * CLOCK_NS_PER_S);
    assert_int_equal(res.injections_sent, 10); /* 0.1, 0.3, ... 1.9 s */

    int inject = 0;
    for (int64_t i = 0; i < s.log.n_requests; i++) {
        tokenlog_request *r = &s.log.requests[i];
        assert_int_equal(r->request, i);
        if (r->kind != TOKENLOG_INJECT)
            continue;
        /* Open loop: sent exactly on schedule although each answer takes ~450 ms, longer
         * than the 200 ms period. */
        assert_int_equal(r->t_plan_ns, s.wl.inject_at_ns + inject * s.wl.inject_every_ns);
        assert_int_equal(r->t_send_ns, r->t_plan_ns);
        assert_int_equal(r->user, -1);
        assert_int_equal(r->prompt_tokens, 500);
        if (r->t_end_ns < s.wl.duration_ns - 1)
            assert_int_equal(r->t_first_ns - r->t_send_ns, 300 * CLOCK_NS_PER_MS);
        inject++;
    }
    assert_int_equal(inject, 10);

    /* Closed loop: each user's next request leaves when its previous one ends. */
    for (int u = 0; u < s.wl.users; u++) {
        int64_t prev_end = -1, k = 0;
        for (int64_t i = 0; i < s.log.n_requests; i++) {
            tokenlog_request *r = &s.log.requests[i];
            if (r->kind != TOKENLOG_BG || r->user != u)
                continue;
            if (prev_end >= 0)
                assert_int_equal(r->t_send_ns, prev_end);
            else
                assert_int_equal(r->t_send_ns, 0);
            workload_bg_request want = workload_bg(&s.wl, u, k++);
            assert_int_equal(r->prompt_tokens_requested, want.prompt_tokens);
            if (strcmp(r->finish_reason, "abort") != 0)
                assert_int_equal(r->completion_tokens, want.max_tokens);
            prev_end = r->t_end_ns;
        }
        assert_true(k > 4);
        assert_int_equal(prev_end, s.wl.duration_ns); /* the last one was cut at the end */
    }
    /* Every token is in the log and in the incremental CSV. */
    int64_t sum = 0;
    for (int64_t i = 0; i < s.log.n_events; i++)
        sum += s.log.events[i].n_tokens;
    assert_int_equal(sum, res.tokens);
    assert_int_equal(tokenlog_writer_close(&tokens, err), 0);
    assert_int_equal(count_lines(path), 1 + s.log.n_events); /* the header, a row per event */
    assert_int_equal(res.n_fidelity, s.log.n_events);
    assert_true(res.fidelity_ms[0] > 0.0009 && res.fidelity_ms[0] < 0.0011);
    /* The injector had a loop of its own: every injection went to the last transport. */
    assert_int_equal(s.w->n_fakes, threads + 1);
    assert_int_equal(s.w->fakes[threads]->injections, 10);
    assert_int_equal(s.w->fakes[threads]->n, 10);
    unlink(path);
    rmdir(dir);
    free_phase(&s, &res);
}

static void test_open_and_closed_loop(void **state)
{
    (void)state;
    check_open_and_closed_loop(1);
    check_open_and_closed_loop(3);
}

/* Conversations with think time: a user's next turn leaves --think-time after its answer
 * ended, its prompt the last turn's prompt + answer + a new message (a new conversation
 * after --turns). */
static void test_turns_and_think_time(void **state)
{
    (void)state;
    phase_setup s;
    setup_phase(&s);
    s.wl.turns = 2;
    s.wl.think_time_ns = 50 * CLOCK_NS_PER_MS;
    s.wl.inject = false;
    char err[ERR_LEN];
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true, .threads = 1};
    driver_result res;
    assert_int_equal(driver_run_phase(&s.t, &ph, &s.log, &res, err), 0);
    for (int u = 0; u < s.wl.users; u++) {
        const tokenlog_request *prev = NULL;
        int64_t k = 0;
        for (int64_t i = 0; i < s.log.n_requests; i++) {
            const tokenlog_request *r = &s.log.requests[i];
            if (r->kind != TOKENLOG_BG || r->user != u)
                continue;
            const workload_bg_request want = workload_bg(&s.wl, u, k);
            if (prev)
                assert_int_equal(r->t_send_ns, prev->t_end_ns + s.wl.think_time_ns);
            if (k % 2 == 1) /* the second turn */
                assert_int_equal(r->prompt_tokens_requested,
                                 prev->prompt_tokens_requested + prev->completion_tokens +
                                     want.prompt_tokens);
            else
                assert_int_equal(r->prompt_tokens_requested, want.prompt_tokens);
            prev = r;
            k++;
        }
        assert_true(k >= 3);
    }
    free_phase(&s, &res);
}

/* Open-loop arrivals (a rate) beside closed users: each sent exactly at its planned time
 * from the open loops (virtual time), a stream of its own (users + its index), lengths as
 * planned; with --max-concurrency at most that many in flight, a late one first come, first
 * served, and the waits counted. */
static void check_open_loop_rate(int limit)
{
    phase_setup s;
    setup_phase(&s);
    s.wl.inject = false;
    s.wl.request_rate = 20;
    s.wl.max_concurrency = limit;
    s.wl.answer_len = (workload_dist){.kind = WORKLOAD_DIST_FIXED, .a = 30, .b = 30};
    char err[ERR_LEN];
    workload_plan plan;
    assert_int_equal(workload_plan_build(&s.wl, &plan, err), 0);
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true, .threads = 2};
    driver_result res;
    assert_int_equal(driver_run_phase(&s.t, &ph, &s.log, &res, err), 0);
    assert_true(res.complete);
    assert_int_equal(res.open_planned, plan.n_arrivals);
    int64_t open = 0, waited = 0, last_send = -1;
    for (int64_t i = 0; i < s.log.n_requests; i++) {
        const tokenlog_request *r = &s.log.requests[i];
        if (r->user < s.wl.users)
            continue; /* a closed-loop user's */
        const int64_t index = r->user - s.wl.users;
        assert_true(index >= 0 && index < plan.n_arrivals);
        const workload_arrival *a = &plan.arrivals[index];
        assert_int_equal(r->kind, TOKENLOG_BG);
        assert_int_equal(r->t_plan_ns, a->t_ns);
        assert_int_equal(r->prompt_tokens_requested, a->prompt_tokens);
        if (limit == 0)
            assert_int_equal(r->t_send_ns, r->t_plan_ns); /* on time, whatever runs */
        assert_true(r->t_send_ns >= r->t_plan_ns);
        assert_true(r->t_send_ns >= last_send); /* first come, first served */
        last_send = r->t_send_ns;
        waited += r->t_send_ns > r->t_plan_ns;
        int64_t in_flight = 0;
        for (int64_t j = 0; j < s.log.n_requests; j++) {
            const tokenlog_request *q = &s.log.requests[j];
            in_flight += q->user >= s.wl.users && q->t_send_ns <= r->t_send_ns &&
                         (q->t_end_ns < 0 || q->t_end_ns > r->t_send_ns);
        }
        if (limit > 0)
            assert_true(in_flight <= limit);
        open++;
    }
    assert_int_equal(res.open_requests, open);
    assert_int_equal(res.open_waited, waited);
    if (limit == 0) {
        assert_int_equal(open, plan.n_arrivals); /* every arrival of the 2 s went out */
        /* two background loops, two open loops, no injector */
        assert_int_equal(s.w->n_fakes, 4);
    } else {
        assert_true(waited > 0); /* 20/s of 300 ms answers need ~6 slots */
        assert_true(open < plan.n_arrivals);
        assert_int_equal(s.w->n_fakes, 3); /* one open loop under a limit */
    }
    workload_plan_free(&plan);
    free_phase(&s, &res);
}

static void test_open_loop_rate(void **state)
{
    (void)state;
    check_open_loop_rate(0);
    check_open_loop_rate(2);
}

/* A server that answers 503 to everything for 1.5 s: the users back off (50 ms, doubling,
 * at most 2 s) instead of retrying thousands of times, the phase does not give up ("every
 * request fails"), and it streams again once the server is back. */
static void test_overload_burst(void **state)
{
    (void)state;
    phase_setup s;
    setup_phase(&s);
    s.f->busy_from = s.f->now + 500 * CLOCK_NS_PER_MS;
    s.f->busy_until = s.f->busy_from + 1500 * CLOCK_NS_PER_MS;
    s.wl.inject = false;
    s.wl.duration_ns = 5 * CLOCK_NS_PER_S;
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true, .threads = 2};
    driver_result res;
    char err[ERR_LEN];
    assert_int_equal(driver_run_phase(&s.t, &ph, &s.log, &res, err), 0);
    assert_true(res.complete);
    /* 1.5 s of refusals: per user at most 50 + 100 + 200 + 400 + 800 ms of waits fit, so
     * 6 refusals each, 24 in all (instant retries would make thousands). */
    assert_true(res.errors >= s.wl.users && res.errors <= 6 * s.wl.users);
    const int64_t back = s.f->busy_until - 1000 * CLOCK_NS_PER_S;
    int after = 0;
    for (int64_t i = 0; i < s.log.n_requests; i++) {
        tokenlog_request *r = &s.log.requests[i];
        if (r->error[0]) {
            assert_true(strncmp(r->error, "HTTP 503", 8) == 0);
            assert_true(r->t_send_ns >= back - 1500 * CLOCK_NS_PER_MS && r->t_send_ns < back);
        } else if (r->t_send_ns >= back && r->completion_tokens > 0) {
            after++;
        }
    }
    assert_true(after >= s.wl.users); /* every user came back */
    free_phase(&s, &res);
}

/* A server that refuses everything, and a run shorter than the users' wait after the
 * warm-up's refusals: nothing is recorded, and the phase says so with the refusal, not as a
 * complete run of nothing. */
static void test_nothing_recorded(void **state)
{
    (void)state;
    phase_setup s;
    setup_phase(&s);
    s.f->busy_from = 0;
    s.f->busy_until = INT64_MAX;
    s.f->retry_after_ns = 5 * CLOCK_NS_PER_S;
    s.wl.inject = false;
    s.wl.duration_ns = 500 * CLOCK_NS_PER_MS;
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true, .threads = 2,
                       .warmup_ns = CLOCK_NS_PER_S};
    driver_result res;
    char err[ERR_LEN];
    assert_int_equal(driver_run_phase(&s.t, &ph, &s.log, &res, err), 0);
    assert_int_equal(res.requests, 0);
    assert_false(res.complete);
    char want[128];
    snprintf(want, sizeof want, "no request was recorded: the %d before t = 0 failed, the last "
                                "with: HTTP 503: overloaded", s.wl.users);
    assert_string_equal(res.error, want);
    free_phase(&s, &res);
}

/* A 400 ms burst of 503s carrying retry_after_ns: after each, the same user's next request
 * leaves when the rule says: its own back-off (50 ms doubling per failure in a row) or the
 * server's Retry-After capped at 60 s, whichever is longer; none when that is past the
 * run's end, which comes on time whatever the server asked. */
static void check_retry_waits(int64_t retry_after_ns, int64_t duration_ns)
{
    phase_setup s;
    setup_phase(&s);
    s.f->busy_from = s.f->now + 500 * CLOCK_NS_PER_MS;
    s.f->busy_until = s.f->busy_from + 400 * CLOCK_NS_PER_MS; /* longer than any answer */
    s.f->retry_after_ns = retry_after_ns;
    s.wl.inject = false;
    s.wl.duration_ns = duration_ns;
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true, .threads = 2};
    driver_result res;
    char err[ERR_LEN];
    assert_int_equal(driver_run_phase(&s.t, &ph, &s.log, &res, err), 0);
    assert_true(res.complete);
    assert_int_equal(res.t_end_ns - res.t0_ns, duration_ns);
    for (int u = 0; u < s.wl.users; u++) {
        int streak = 0, refused = 0;
        for (int64_t i = 0; i < s.log.n_requests; i++) {
            const tokenlog_request *r = &s.log.requests[i];
            if (r->user != u)
                continue;
            if (!r->error[0]) {
                streak = 0;
                continue;
            }
            refused++;
            streak++;
            int64_t want = 50 * CLOCK_NS_PER_MS << (streak - 1);
            const int64_t cap = 60 * CLOCK_NS_PER_S;
            int64_t asked = retry_after_ns < cap ? retry_after_ns : cap;
            if (asked > want)
                want = asked;
            const tokenlog_request *next = NULL;
            for (int64_t j = i + 1; j < s.log.n_requests && !next; j++)
                if (s.log.requests[j].user == u)
                    next = &s.log.requests[j];
            if (r->t_end_ns + want < duration_ns - 250 * CLOCK_NS_PER_MS) {
                /* It leaves at the driver's first wake-up after the wait: a tick (250 ms)
                 * at most, when the failure came in the middle of one. */
                assert_non_null(next);
                const int64_t waited = next->t_send_ns - r->t_end_ns;
                if (waited < want || waited > want + 250 * CLOCK_NS_PER_MS)
                    fail_msg("user %d waited %lld ns after a 503, want %lld (+ a tick)", u,
                             (long long)waited, (long long)want);
            } else if (r->t_end_ns + want >= duration_ns) {
                assert_null(next); /* the wait outlasts the run: the user sends no more */
            }
        }
        assert_true(refused >= 1); /* every user met the burst */
        if (retry_after_ns > 400 * CLOCK_NS_PER_MS)
            assert_int_equal(refused, 1); /* and waited it out */
    }
    free_phase(&s, &res);
}

/* Retry-After on a 503 (or 429): the user waits what the server asked, per user, at least
 * its own back-off, at most 60 s, never past the run's end. */
static void test_retry_after(void **state)
{
    (void)state;
    check_retry_waits(1200 * CLOCK_NS_PER_MS, 5 * CLOCK_NS_PER_S);
    check_retry_waits(0, 5 * CLOCK_NS_PER_S);
    check_retry_waits(3600 * CLOCK_NS_PER_S, 90 * CLOCK_NS_PER_S);
    check_retry_waits(3600 * CLOCK_NS_PER_S, 5 * CLOCK_NS_PER_S);
}

/* What the streams ignored as impossible is summed over the recorded requests (of every
 * loop) and said in the phase's notes. */
static void test_protocol_violations(void **state)
{
    (void)state;
    phase_setup s;
    setup_phase(&s);
    s.f->violations_each = 2;
    char *notes_text = NULL;
    size_t notes_len = 0;
    FILE *notes = open_memstream(&notes_text, &notes_len);
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true, .notes = notes,
                       .threads = 3};
    driver_result res;
    char err[ERR_LEN];
    assert_int_equal(driver_run_phase(&s.t, &ph, &s.log, &res, err), 0);
    fclose(notes);
    assert_true(res.complete);
    assert_true(res.requests > 10);
    assert_int_equal(res.protocol_violations, 2 * res.requests);
    char want[160];
    snprintf(want, sizeof want, "%lld protocol violations", (long long)res.protocol_violations);
    if (!strstr(notes_text, want) || !strstr(notes_text, "an event after [DONE]"))
        fail_msg("notes lack '%s' and the first one: %s", want, notes_text);
    free(notes_text);
    free_phase(&s, &res);
}

/* Issue 22, defect 10: a trace replayed to its end (until_trace_end) stops when its last
 * request has finished, whatever the cap and the closed users still running (their answers
 * are cut as at the end of a run, not "stopped early"); every trace request ends whole. */
static void test_trace_ends_the_phase(void **state)
{
    (void)state;
    phase_setup s;
    setup_phase(&s);
    char path[128], err[ERR_LEN];
    scratch_file(path, sizeof path, "test_driver", "end.jsonl",
                 "{\"t\": 0.1, \"prompt_tokens\": 30, \"max_tokens\": 10}\n"
                 "{\"t\": 0.2, \"prompt_tokens\": 30, \"max_tokens\": 10}\n"
                 "{\"t\": 0.5, \"prompt_tokens\": 30, \"max_tokens\": 20}\n");
    s.wl.inject = false;
    snprintf(s.wl.trace, sizeof s.wl.trace, "%s", path);
    s.wl.duration_ns = 600 * CLOCK_NS_PER_S; /* the cap: far away */
    s.wl.until_trace_end = true;
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true, .threads = 2};
    driver_result res;
    assert_int_equal(driver_run_phase(&s.t, &ph, &s.log, &res, err), 0);
    assert_true(res.complete);
    assert_true(res.drained);
    int64_t last_end = 0;
    int open = 0, cut = 0;
    for (int64_t i = 0; i < s.log.n_requests; i++) {
        const tokenlog_request *r = &s.log.requests[i];
        if (r->user >= s.wl.users) {
            open++;
            assert_string_equal(r->finish_reason, "length");
            if (r->t_end_ns > last_end)
                last_end = r->t_end_ns;
        } else if (strcmp(r->finish_reason, "abort") == 0) {
            assert_string_equal(r->error, "");
            cut++;
        }
    }
    assert_int_equal(open, 3);
    assert_true(cut >= 1); /* the closed users were mid-answer */
    /* ended within a stop check (20 ms) of the last trace request's end */
    const int64_t ended = res.t_end_ns - res.t0_ns;
    assert_true(ended >= last_end && ended <= last_end + 20 * CLOCK_NS_PER_MS);
    /* without until_trace_end the same phase runs to its duration */
    free_phase(&s, &res);
    setup_phase(&s);
    s.wl.inject = false;
    snprintf(s.wl.trace, sizeof s.wl.trace, "%s", path);
    s.wl.duration_ns = 2 * CLOCK_NS_PER_S;
    assert_int_equal(driver_run_phase(&s.t, &ph, &s.log, &res, err), 0);
    assert_false(res.drained);
    assert_true(res.t_end_ns - res.t0_ns >= 2 * CLOCK_NS_PER_S);
    free_phase(&s, &res);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_and_closed_loop),
        cmocka_unit_test(test_turns_and_think_time),
        cmocka_unit_test(test_open_loop_rate),
        cmocka_unit_test(test_trace_ends_the_phase),
        cmocka_unit_test(test_overload_burst),
        cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_nothing_recorded),
        cmocka_unit_test(test_protocol_violations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
