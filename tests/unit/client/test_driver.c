/* client/driver: a phase's event loops over the scripted transport: the same log whatever
 * their number (the loops' segments merged), totals summed, a stop and a full disk reaching
 * every loop, every token kept, events past the limit dropped and counted. */
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "client/driver.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/tokenlog.h"

#include "scripted_transport.h"

/* The disk fills 1 s into the run: the next flush fails, the phase stops at once
 * (incomplete, the reason named), and the file keeps the whole rows written before, with
 * three loops writing it. The disk is full from the moment the lead's progress line at
 * 1 s says so; the first write refused notes the file's size then. */
static atomic_bool disk_full;
static _Atomic int64_t size_when_full;

static ssize_t filling_disk(int fd, const void *data, size_t len, off_t offset)
{
    if (!atomic_load(&disk_full))
        return pwrite(fd, data, len, offset);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    int64_t none = -1;
    atomic_compare_exchange_strong(&size_when_full, &none, (int64_t)st.st_size);
    errno = ENOSPC;
    return -1;
}

typedef struct fill_disk {
    int64_t at_ns;
    bool done;
} fill_disk;

static void fill_at(void *ctx, const driver_progress *p)
{
    fill_disk *fd = ctx;
    if (fd->done || p->elapsed_ns < fd->at_ns)
        return;
    fd->done = true;
    fd->at_ns = p->elapsed_ns;
    atomic_store(&disk_full, true);
}

static void test_write_failure_stops_phase(void **state)
{
    (void)state;
    phase_setup s;
    setup_phase(&s);
    s.wl.duration_ns = 10 * CLOCK_NS_PER_S;
    char dir[64], path[128], err[ERR_LEN];
    make_tmpdir(dir, sizeof dir, path, sizeof path);
    tokenlog_writer tokens;
    assert_int_equal(tokenlog_writer_open(&tokens, path, TOKENLOG_TOKENS_CSV, err), 0);
    atomic_store(&disk_full, false);
    atomic_store(&size_when_full, -1);
    tokens.write_at = filling_disk;
    fill_disk fd = {CLOCK_NS_PER_S, false};
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true, .tokens_csv = &tokens,
                       .progress = fill_at, .progress_ctx = &fd,
                       .progress_every_ns = 100 * CLOCK_NS_PER_MS, .threads = 3};
    driver_result res;
    assert_int_equal(driver_run_phase(&s.t, &ph, &s.log, &res, err), 0);
    assert_true(fd.done);
    assert_false(res.complete);
    assert_string_equal(res.error, "cannot write tokens.csv: No space left on device");
    /* Stopped at the first flush after the failure (a tick, 250 ms, at most; a loop that
     * found the files busy writes at its next wake-up, 20 ms later at most), and every
     * other loop within 20 ms of it. */
    int64_t stopped_after = res.t_end_ns - (res.t0_ns + fd.at_ns);
    if (stopped_after < 0 || stopped_after > 290 * CLOCK_NS_PER_MS)
        fail_msg("stopped %lld ms after the disk filled", (long long)(stopped_after / 1000000));
    tokenlog_writer_close(&tokens, NULL);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(atomic_load(&size_when_full) > 0);
    assert_int_equal((int64_t)st.st_size, atomic_load(&size_when_full)); /* rows before: kept */
    assert_true(count_lines(path) > 50);
    unlink(path);
    rmdir(dir);
    free_phase(&s, &res);
}

/* ---- several loops --------------------------------------------------------------------- */

static int cmp_i64(const void *x, const void *y)
{
    const int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* The merged log's promises: ids are rows; requests in send order, then by user; events in
 * time order, ties by user then request; each event names a request of its user. Returns
 * how many neighbouring events tie in time with different users (the tie-break at work). */
static int64_t check_log_order(const tokenlog *log)
{
    for (int64_t i = 0; i < log->n_requests; i++) {
        const tokenlog_request *r = &log->requests[i];
        assert_int_equal(r->request, i);
        if (i > 0) {
            const tokenlog_request *p = &log->requests[i - 1];
            assert_true(p->t_send_ns < r->t_send_ns ||
                        (p->t_send_ns == r->t_send_ns && p->user < r->user));
        }
    }
    int64_t ties = 0;
    for (int64_t i = 0; i < log->n_events; i++) {
        const tokenlog_event *e = &log->events[i];
        assert_true(e->request >= 0 && e->request < log->n_requests);
        assert_int_equal(e->user, log->requests[e->request].user);
        if (i == 0)
            continue;
        const tokenlog_event *p = &log->events[i - 1];
        assert_true(p->t_ns < e->t_ns || (p->t_ns == e->t_ns && p->user < e->user) ||
                    (p->t_ns == e->t_ns && p->user == e->user && p->request <= e->request));
        ties += p->t_ns == e->t_ns && p->user != e->user;
    }
    return ties;
}

typedef struct script_run {
    tokenlog log;
    driver_result res;
    world *w;
} script_run;

/* One script: 5 users, 300 ms of warm-up (their answers in flight at t = 0 carried over),
 * the injector, a 400 ms burst of 503s, a protocol violation per answer; on `threads`
 * loops. */
static void run_script(int threads, script_run *out)
{
    phase_setup s;
    setup_phase(&s);
    s.wl.users = 5;
    s.wl.duration_ns = 3 * CLOCK_NS_PER_S;
    s.f->inject_prompt = 500;
    s.f->busy_from = s.f->now + 1200 * CLOCK_NS_PER_MS;
    s.f->busy_until = s.f->busy_from + 400 * CLOCK_NS_PER_MS;
    s.f->violations_each = 1;
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true,
                       .warmup_ns = 300 * CLOCK_NS_PER_MS, .threads = threads};
    char err[ERR_LEN];
    if (driver_run_phase(&s.t, &ph, &s.log, &out->res, err) != 0)
        fail_msg("%d loops: %s", threads, err);
    assert_true(out->res.complete);
    out->log = s.log;
    out->w = s.w;
}

static void free_script_run(script_run *r)
{
    driver_result_free(&r->res);
    tokenlog_free(&r->log);
    world_free(r->w);
}

/* The same arrivals on 1, 2, 3 and 5 loops give the same log, row for row (the k-way merge
 * of the loops' segments is the one loop's order), and the same totals. */
static void test_loops_same_log(void **state)
{
    (void)state;
    script_run one;
    run_script(1, &one);
    const tokenlog *a = &one.log;
    assert_true(check_log_order(a) > 100); /* many ties between users: the order is tested */
    int carried = 0, refused = 0;
    for (int64_t i = 0; i < a->n_requests; i++) {
        carried += a->requests[i].t_send_ns == -1;
        refused += strncmp(a->requests[i].error, "HTTP 503", 8) == 0;
    }
    assert_int_equal(carried, 5); /* every user was mid-answer at t = 0 */
    assert_true(refused >= 5);
    assert_true(one.res.protocol_violations > 50);
    assert_int_equal(one.res.injections_sent, 15);
    /* Each request's rows add up to what its stream delivered after t = 0. */
    for (int64_t i = 0; i < a->n_requests; i++) {
        const tokenlog_request *r = &a->requests[i];
        if (r->t_send_ns < 0)
            continue;
        int64_t sum = 0;
        for (int64_t j = 0; j < a->n_events; j++)
            sum += a->events[j].request == i ? a->events[j].n_tokens : 0;
        assert_int_equal(sum, r->completion_tokens);
    }
    const int counts[] = {2, 3, 5};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        script_run many;
        run_script(counts[c], &many);
        const tokenlog *b = &many.log;
        assert_int_equal(many.w->n_fakes, counts[c] + 1);
        for (int i = 0; i < counts[c]; i++) /* every loop had users, the last the injector */
            assert_true(many.w->fakes[i]->n > 0 && many.w->fakes[i]->injections == 0);
        assert_int_equal(many.w->fakes[counts[c]]->injections, 15);
        assert_int_equal(b->n_requests, a->n_requests);
        assert_int_equal(b->n_events, a->n_events);
        for (int64_t i = 0; i < a->n_requests; i++) {
            const tokenlog_request *x = &a->requests[i], *y = &b->requests[i];
            if (x->request != y->request || x->user != y->user || x->kind != y->kind ||
                x->t_plan_ns != y->t_plan_ns || x->t_send_ns != y->t_send_ns ||
                x->t_first_ns != y->t_first_ns || x->t_end_ns != y->t_end_ns ||
                x->prompt_tokens_requested != y->prompt_tokens_requested ||
                x->prompt_tokens != y->prompt_tokens ||
                x->completion_tokens != y->completion_tokens ||
                strcmp(x->finish_reason, y->finish_reason) != 0 || strcmp(x->error, y->error) != 0)
                fail_msg("%d loops: request row %lld differs (user %d sent at %lld vs user %d "
                         "at %lld)",
                         counts[c], (long long)i, x->user, (long long)x->t_send_ns, y->user,
                         (long long)y->t_send_ns);
        }
        for (int64_t i = 0; i < a->n_events; i++) {
            const tokenlog_event *x = &a->events[i], *y = &b->events[i];
            if (x->t_ns != y->t_ns || x->user != y->user || x->request != y->request ||
                x->n_tokens != y->n_tokens || x->kind != y->kind)
                fail_msg("%d loops: event %lld differs: (%lld, user %d, request %lld) vs (%lld, "
                         "user %d, request %lld)",
                         counts[c], (long long)i, (long long)x->t_ns, x->user,
                         (long long)x->request, (long long)y->t_ns, y->user,
                         (long long)y->request);
        }
        assert_int_equal(many.res.requests, one.res.requests);
        assert_int_equal(many.res.errors, one.res.errors);
        assert_int_equal(many.res.tokens, one.res.tokens);
        assert_int_equal(many.res.protocol_violations, one.res.protocol_violations);
        assert_int_equal(many.res.injections_sent, one.res.injections_sent);
        assert_int_equal(many.res.prompt_mismatches, one.res.prompt_mismatches);
        assert_int_equal(many.res.n_fidelity, one.res.n_fidelity);
        assert_int_equal(many.res.t_end_ns, one.res.t_end_ns);
        free_script_run(&many);
    }
    free_script_run(&one);
}

/* An interrupt (should_stop from the lead, in the caller's thread) with 3 background loops
 * and the injector's: every loop stops within 20 ms, the phase is incomplete, and every
 * token the transports delivered is counted and in the log; the incremental files (every
 * loop writing them) hold the same rows, whole, each request once under a unique id. */
typedef struct interrupt {
    world *w;
    int ticks;
    int64_t at; /* the lead's clock when it said stop */
} interrupt;

static bool interrupt_at_tick_5(void *ctx, char *why, size_t size)
{
    interrupt *in = ctx;
    if (++in->ticks < 5)
        return false;
    in->at = fake_time(in->w->fakes[0]);
    snprintf(why, size, "interrupted");
    return true;
}

static int cmp_event_content(const void *x, const void *y)
{
    const tokenlog_event *a = x, *b = y;
    if (a->t_ns != b->t_ns)
        return a->t_ns < b->t_ns ? -1 : 1;
    if (a->user != b->user)
        return a->user < b->user ? -1 : 1;
    return (a->n_tokens > b->n_tokens) - (a->n_tokens < b->n_tokens);
}

/* Past log_events_max the events leave memory once written: the log gets the requests only,
 * the incremental files hold every event, and their ids agree with requests.csv. */
static void test_events_dropped_past_limit(void **state)
{
    (void)state;
    phase_setup s;
    setup_phase(&s);
    s.wl.users = 5;
    s.f->inject_prompt = 500;
    char dir[64], path[128], requests_path[160], err[ERR_LEN];
    make_tmpdir(dir, sizeof dir, path, sizeof path);
    snprintf(requests_path, sizeof requests_path, "%s/requests.csv", dir);
    tokenlog_writer tokens, requests;
    assert_int_equal(tokenlog_writer_open(&tokens, path, TOKENLOG_TOKENS_CSV, err), 0);
    assert_int_equal(tokenlog_writer_open(&requests, requests_path, TOKENLOG_REQUESTS_CSV, err), 0);
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true, .threads = 2,
                       .tokens_csv = &tokens, .requests_csv = &requests, .log_events_max = 20};
    driver_result res;
    assert_int_equal(driver_run_phase(&s.t, &ph, &s.log, &res, err), 0);
    assert_int_equal(tokenlog_writer_close(&tokens, err), 0);
    assert_int_equal(tokenlog_writer_close(&requests, err), 0);
    assert_true(res.complete);
    assert_true(res.events_dropped);
    assert_int_equal(s.log.n_events, 0);
    assert_true(s.log.n_requests > 0);
    tokenlog files;
    int64_t cut_rows = -1;
    assert_int_equal(tokenlog_read_dir(&files, dir, &cut_rows, err), 0);
    assert_int_equal(cut_rows, 0);
    assert_int_equal(files.n_requests, s.log.n_requests);
    int64_t sum = 0, recorded = 0;
    for (int64_t i = 0; i < files.n_events; i++)
        sum += files.events[i].n_tokens;
    for (int k = 0; k < TRANSPORT_STAMP_KINDS; k++)
        recorded += res.stamps[k];
    assert_true(files.n_events > 20);
    assert_int_equal(files.n_events, recorded);
    assert_int_equal(sum, res.tokens);
    for (int64_t i = 0; i < files.n_events; i++) {
        bool found = false;
        for (int64_t j = 0; j < files.n_requests && !found; j++)
            found = files.requests[j].request == files.events[i].request;
        assert_true(found);
    }
    tokenlog_free(&files);
    unlink(path);
    unlink(requests_path);
    rmdir(dir);
    free_phase(&s, &res);
}

static void test_stop_reaches_every_loop(void **state)
{
    (void)state;
    phase_setup s;
    setup_phase(&s);
    s.wl.users = 7;
    s.wl.duration_ns = 10 * CLOCK_NS_PER_S;
    s.f->inject_prompt = 500;
    char dir[64], path[128], requests_path[160], err[ERR_LEN];
    make_tmpdir(dir, sizeof dir, path, sizeof path);
    snprintf(requests_path, sizeof requests_path, "%s/requests.csv", dir);
    tokenlog_writer tokens, requests;
    assert_int_equal(tokenlog_writer_open(&tokens, path, TOKENLOG_TOKENS_CSV, err), 0);
    assert_int_equal(tokenlog_writer_open(&requests, requests_path, TOKENLOG_REQUESTS_CSV, err), 0);
    interrupt in = {s.w, 0, 0};
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true, .threads = 3,
                       .tokens_csv = &tokens, .requests_csv = &requests,
                       .should_stop = interrupt_at_tick_5, .stop_ctx = &in};
    driver_result res;
    assert_int_equal(driver_run_phase(&s.t, &ph, &s.log, &res, err), 0);
    assert_int_equal(tokenlog_writer_close(&tokens, err), 0);
    assert_int_equal(tokenlog_writer_close(&requests, err), 0);
    assert_false(res.complete);
    assert_string_equal(res.error, "interrupted");
    assert_int_equal(in.at, res.t0_ns + 5 * 250 * CLOCK_NS_PER_MS);
    assert_true(res.t_end_ns >= in.at && res.t_end_ns <= in.at + 20 * CLOCK_NS_PER_MS);
    assert_int_equal(s.w->n_fakes, 4);
    int cut = 0;
    for (int64_t i = 0; i < s.log.n_requests; i++) {
        const tokenlog_request *r = &s.log.requests[i];
        assert_true(r->t_end_ns >= 0 && r->t_end_ns <= res.t_end_ns - res.t0_ns);
        if (strcmp(r->finish_reason, "abort") == 0) {
            assert_string_equal(r->error, "the run stopped early");
            cut++;
        }
    }
    assert_true(cut >= 7); /* every user's answer, on every loop */
    /* Every token delivered is kept and counted. */
    int64_t sum = 0;
    for (int64_t i = 0; i < s.log.n_events; i++)
        sum += s.log.events[i].n_tokens;
    assert_int_equal(world_tokens_sent(s.w), res.tokens);
    assert_int_equal(sum, res.tokens);
    check_log_order(&s.log);

    /* The incremental files: the same rows (ids aside), whole, each request once. */
    tokenlog files;
    tokenlog_init(&files);
    int64_t cut_rows = -1;
    assert_int_equal(tokenlog_read_dir(&files, dir, &cut_rows, err), 0);
    assert_int_equal(cut_rows, 0);
    assert_int_equal(files.n_events, s.log.n_events);
    assert_int_equal(files.n_requests, s.log.n_requests);
    int64_t *ids = malloc((size_t)files.n_requests * sizeof *ids);
    assert_non_null(ids);
    for (int64_t i = 0; i < files.n_requests; i++)
        ids[i] = files.requests[i].request;
    qsort(ids, (size_t)files.n_requests, sizeof *ids, cmp_i64);
    for (int64_t i = 1; i < files.n_requests; i++)
        assert_true(ids[i] > ids[i - 1]); /* unique */
    for (int64_t i = 0; i < files.n_events; i++) {
        const tokenlog_event *e = &files.events[i];
        const int64_t *at = bsearch(&e->request, ids, (size_t)files.n_requests, sizeof *ids, cmp_i64);
        assert_non_null(at); /* names a request of requests.csv */
        for (int64_t j = 0; j < files.n_requests; j++)
            if (files.requests[j].request == e->request)
                assert_int_equal(files.requests[j].user, e->user);
    }
    tokenlog_event *mine = malloc((size_t)s.log.n_events * sizeof *mine);
    assert_non_null(mine);
    memcpy(mine, s.log.events, (size_t)s.log.n_events * sizeof *mine);
    qsort(mine, (size_t)s.log.n_events, sizeof *mine, cmp_event_content);
    qsort(files.events, (size_t)files.n_events, sizeof *files.events, cmp_event_content);
    for (int64_t i = 0; i < files.n_events; i++)
        assert_int_equal(cmp_event_content(&mine[i], &files.events[i]), 0);
    free(mine);
    free(ids);
    tokenlog_free(&files);
    unlink(path);
    unlink(requests_path);
    rmdir(dir);
    free_phase(&s, &res);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_failure_stops_phase),
        cmocka_unit_test(test_loops_same_log),
        cmocka_unit_test(test_stop_reaches_every_loop),
        cmocka_unit_test(test_events_dropped_past_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
