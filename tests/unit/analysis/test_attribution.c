/* analysis/attribution: the causes the server's log of requests' places gives
 * (sched_events.csv: preempted, not scheduled, and client only when it carried the request),
 * and stalls.csv, byte for byte. */
#include <setjmp.h>
#include <stdarg.h>
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

#include "sketch_bound.h"

#define MS 1000000LL

/* stalls.csv written by hand is printf's "%lld,%d,%lld,%.6f,%s," and culprits, byte for
 * byte, at every length of gap (a whole number of ms, sub-ms, days). */
static void test_stalls_csv_bytes(void **state)
{
    (void)state;
    analysis_summary sum;
    memset(&sum, 0, sizeof sum);
    sum.n_stall_list = 3000;
    sum.stall_list = calloc((size_t)sum.n_stall_list, sizeof *sum.stall_list);
    assert_non_null(sum.stall_list);
    char *want = NULL;
    size_t want_len = 0;
    FILE *w = open_memstream(&want, &want_len);
    fputs("t_ns,user,request,gap_ms,cause,culprits\n", w);
    for (int64_t i = 0; i < sum.n_stall_list; i++) {
        analysis_stall *st = &sum.stall_list[i];
        const int64_t scale[] = {1, 1000, MS, 1000 * MS, 86400000 * MS};
        st->t_ns = (int64_t)rnd(1ULL << 50);
        st->gap_ns = (int64_t)rnd(1000) * scale[rnd(5)] + (int64_t)rnd(3) * (int64_t)rnd(MS);
        st->request = (int64_t)rnd(1000000);
        st->user = (int32_t)rnd(300) - 1;
        st->cause = (int32_t)rnd(ANALYSIS_N_CAUSES);
        st->n_culprits = (int32_t)rnd(6);
        for (int c = 0; c < ANALYSIS_MAX_CULPRITS; c++) {
            st->culprit[c] = (int64_t)rnd(1000000);
            st->culprit_prompt[c] = (int32_t)rnd(20000);
        }
        fprintf(w, "%lld,%d,%lld,%.6f,%s,", (long long)st->t_ns, st->user, (long long)st->request,
                (double)st->gap_ns / 1e6, analysis_cause_name((analysis_cause)st->cause));
        int named = st->n_culprits < ANALYSIS_MAX_CULPRITS ? st->n_culprits : ANALYSIS_MAX_CULPRITS;
        for (int c = 0; c < named; c++)
            fprintf(w, "%s%lld:%d", c ? ";" : "", (long long)st->culprit[c], st->culprit_prompt[c]);
        if (st->n_culprits > named)
            fprintf(w, ";+%d", st->n_culprits - named);
        fputc('\n', w);
    }
    fclose(w);
    char path[] = "/tmp/test_stalls_csv_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[ERR_LEN] = "";
    assert_int_equal(analysis_write_stalls_csv(&sum, path, err), 0);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *got = calloc(want_len + 2, 1);
    assert_non_null(got);
    assert_int_equal(fread(got, 1, want_len + 1, f), want_len);
    fclose(f);
    unlink(path);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(sum.stall_list);
}

/* ---- the causes from the requests' places ---------------------------------------------- */

/* Request `request` (user `user`) receives a token every 10 ms in [from_ms, to_ms]. */
static void tokens(tokenlog *log, int64_t request, int user, double from_ms, double to_ms)
{
    tokenlog_request r = {.request = request, .user = user, .kind = TOKENLOG_BG,
                          .t_plan_ns = (int64_t)(from_ms * MS) - 5 * MS,
                          .t_send_ns = (int64_t)(from_ms * MS) - 5 * MS,
                          .t_first_ns = (int64_t)(from_ms * MS), .t_end_ns = -1,
                          .prompt_tokens_requested = 50, .prompt_tokens = 50};
    int64_t row;
    if (log->n_requests == 0 || log->requests[log->n_requests - 1].request != request)
        assert_int_equal(tokenlog_add_request(log, &r, &row), 0);
    for (double t = from_ms; t <= to_ms + 1e-9; t += 10) {
        tokenlog_event e = {.t_ns = (int64_t)(t * MS), .request = request, .user = user,
                            .n_tokens = 1, .kind = TOKENLOG_BG};
        assert_int_equal(tokenlog_add_event(log, &e), 0);
    }
}

static void sched_event(tokenlog *log, double t_ms, int64_t request, int event)
{
    tokenlog_sched_event e = {.step = (int64_t)(t_ms / 10), .t_ns = (int64_t)(t_ms * MS),
                              .request = request, .event = event};
    assert_int_equal(tokenlog_add_sched_event(log, &e), 0);
}

static int cmp_event(const void *x, const void *y)
{
    const tokenlog_event *a = x, *b = y;
    if (a->t_ns != b->t_ns)
        return (a->t_ns > b->t_ns) - (a->t_ns < b->t_ns);
    return (a->request > b->request) - (a->request < b->request);
}

/* Steps of 10 ms from 0 to 1600 ms, but for one of 200 ms from 1200 to 1400 that prefills the
 * 8,000-token injection (request 9, sent at 1195); threshold 50 ms. Each request stalls once:
 *   1  preempted at the step starting 200, resumed at 350 (its recompute ends at 360): its
 *      gap 200-360 is "preempted";
 *   2  left out at 500 (no preemption), back in at 640: its gap 500-650 is "not scheduled";
 *   3  carried in every step, but no token read from 800 to 900: "client";
 *   4  preempted at 1190, resumed at 1400: its gap 1190-1410 spans the long prefill, yet it
 *      was out of every step: "preempted" (the prefill is still its culprit);
 *   5  carried through the long step: its gap 1200-1400 is a "prefill";
 *   6  resumed at 100 after a preemption before the log began (a live server's log is read
 *      from the run's t = 0; its token at 5 was read just after): "preempted";
 *   7  its token at 100, the next read only at 300: preempted at 150, so the steps from 100
 *      to 150 carried it and their tokens were read late: "client";
 *   8  its first token from elsewhere at 403 (disaggregated prefill: it joins the decode
 *      instance mid-step), left out of the next step (410) for want of a seat, back at 600:
 *      its gap 403-610 is "not scheduled". */
static void test_causes_from_requests_places(void **state)
{
    (void)state;
    tokenlog log;
    tokenlog_init(&log);
    tokens(&log, 1, 0, 10, 200);
    tokens(&log, 1, 0, 360, 500);
    tokens(&log, 2, 1, 10, 500);
    tokens(&log, 2, 1, 650, 800);
    tokens(&log, 3, 2, 10, 800);
    tokens(&log, 3, 2, 900, 1000);
    tokens(&log, 4, 3, 1000, 1190);
    tokens(&log, 4, 3, 1410, 1500);
    tokens(&log, 5, 4, 1000, 1200);
    tokens(&log, 5, 4, 1400, 1500);
    tokens(&log, 6, 5, 5, 5);
    tokens(&log, 6, 5, 110, 200);
    tokens(&log, 7, 6, 10, 100);
    tokens(&log, 7, 6, 300, 300);
    tokens(&log, 8, 7, 403, 403);
    tokens(&log, 8, 7, 610, 700);
    qsort(log.events, (size_t)log.n_events, sizeof *log.events, cmp_event);
    tokenlog_request inject = {.request = 9, .user = -1, .kind = TOKENLOG_INJECT,
                               .t_plan_ns = 1195 * MS, .t_send_ns = 1195 * MS,
                               .t_first_ns = 1400 * MS, .t_end_ns = 1400 * MS,
                               .prompt_tokens_requested = 8000, .prompt_tokens = 8000};
    assert_int_equal(tokenlog_add_request(&log, &inject, NULL), 0);
    int64_t k = 0;
    for (double t = 0; t < 1600; k++) {
        const bool prefill = t == 1200;
        const double end = prefill ? 1400 : t + 10;
        tokenlog_step st = {.step = k, .t_start_ns = (int64_t)(t * MS),
                            .t_end_ns = (int64_t)(end * MS), .decode_tokens = 4,
                            .prefill_tokens = prefill ? 8000 : 0, .n_requests = 5,
                            .modeled_ns = (int64_t)((end - t) * MS)};
        assert_int_equal(tokenlog_add_step(&log, &st), 0);
        t = end;
    }
    sched_event(&log, 100, 6, TOKENLOG_RESUMED);
    sched_event(&log, 150, 7, TOKENLOG_PREEMPTED);
    sched_event(&log, 250, 7, TOKENLOG_RESUMED);
    sched_event(&log, 200, 1, TOKENLOG_PREEMPTED);
    sched_event(&log, 350, 1, TOKENLOG_RESUMED);
    sched_event(&log, 410, 8, TOKENLOG_LEFT_OUT);
    sched_event(&log, 500, 2, TOKENLOG_LEFT_OUT);
    sched_event(&log, 600, 8, TOKENLOG_REJOINED);
    sched_event(&log, 640, 2, TOKENLOG_REJOINED);
    sched_event(&log, 1190, 4, TOKENLOG_PREEMPTED);
    sched_event(&log, 1400, 4, TOKENLOG_RESUMED);

    analysis_options opt = {.label = "interference", .engine = "sim", .target = "none",
                            .threshold_ms = 50, .duration_s = 1.6, .complete = true};
    analysis_summary s;
    char err[ERR_LEN] = "";
    if (analysis_summarize(&log, &opt, &s, err) != 0)
        fail_msg("analysis_summarize: %s", err);
    char dir[] = "/tmp/test_places_XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/stalls.csv", dir);
    assert_int_equal(analysis_write_stalls_csv(&s, path, err), 0);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char text[1024] = "";
    text[fread(text, 1, sizeof text - 1, f)] = '\0';
    fclose(f);
    unlink(path);
    rmdir(dir);
    assert_string_equal(text, "t_ns,user,request,gap_ms,cause,culprits\n"
                              "200000000,0,1,160.000000,preempted,\n"
                              "500000000,1,2,150.000000,not_scheduled,\n"
                              "800000000,2,3,100.000000,client,\n"
                              "1190000000,3,4,220.000000,preempted,9:8000\n"
                              "1200000000,4,5,200.000000,prefill,9:8000\n"
                              "5000000,5,6,105.000000,preempted,\n"
                              "100000000,6,7,200.000000,client,\n"
                              "403000000,7,8,207.000000,not_scheduled,\n");
    const analysis_attribution *a = &s.attribution;
    assert_int_equal(a->by_cause[ANALYSIS_CAUSE_PREEMPTED].stalls, 3);
    assert_float_equal(a->by_cause[ANALYSIS_CAUSE_PREEMPTED].frozen_user_s, 0.485, 1e-9);
    assert_int_equal(a->by_cause[ANALYSIS_CAUSE_NOT_SCHEDULED].stalls, 2);
    assert_int_equal(a->by_cause[ANALYSIS_CAUSE_CLIENT].stalls, 2);
    assert_int_equal(a->by_cause[ANALYSIS_CAUSE_PREFILL].stalls, 1);
    analysis_summary_free(&s);

    /* The same log without its places (a server that does not log them): every stall over
     * short steps is the client's, as before. */
    log.n_sched_events = 0;
    if (analysis_summarize(&log, &opt, &s, err) != 0)
        fail_msg("analysis_summarize: %s", err);
    static const analysis_cause before[] = {ANALYSIS_CAUSE_CLIENT,  ANALYSIS_CAUSE_CLIENT,
                                            ANALYSIS_CAUSE_CLIENT,  ANALYSIS_CAUSE_PREFILL,
                                            ANALYSIS_CAUSE_PREFILL, ANALYSIS_CAUSE_CLIENT,
                                            ANALYSIS_CAUSE_CLIENT,  ANALYSIS_CAUSE_CLIENT};
    assert_int_equal(s.n_stall_list, 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(s.stall_list[i].cause, before[i]);
    analysis_summary_free(&s);
    tokenlog_free(&log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stalls_csv_bytes),
        cmocka_unit_test(test_causes_from_requests_places),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
