/* driver: the closed loop and the open loop over a scripted transport in virtual time (the
 * transport table is the seam), request bodies, and the token-id / text probe. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "client/driver.h"
#include "common/clock.h"
#include "common/err.h"

/* ---- a transport that answers from a script, in virtual time -------------------------- */

#define FAKE_MAX 4096
#define STEP_NS (10 * CLOCK_NS_PER_MS)

typedef struct fake_req {
    const stream_handlers *h;
    void *user;
    int max_tokens, prompt_len, sent;
    int64_t t_next;
    bool live;
    bool reject;
} fake_req;

typedef struct fake {
    int64_t now;
    fake_req reqs[FAKE_MAX];
    int n, active, max_active_inject;
    int inject_prompt;    /* a prompt this long is an injection: slow first token */
    bool refuse_ids;      /* answer 400 to token-id prompts */
    bool text_usage;      /* usage.prompt_tokens = 3 + 1.5 x words for text */
    int64_t busy_from, busy_until; /* requests posted in [from, until) get 503 */
    int64_t retry_after_ns;        /* the 503s' Retry-After (stream_end), -1 none */
    int64_t violations_each;       /* protocol violations every answered request reports */
} fake;

static fake *fake_new(void)
{
    fake *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->retry_after_ns = -1;
    return f;
}

static int fake_post(void *impl, const stream_request *req, char *err)
{
    fake *f = impl;
    if (f->n >= FAKE_MAX)
        return err_set(err, "fake full");
    json_t *root = json_loadb(req->body, req->body_len, 0, NULL);
    assert_non_null(root);
    fake_req *r = &f->reqs[f->n++];
    memset(r, 0, sizeof *r);
    r->h = req->handlers;
    r->user = req->user;
    r->max_tokens = (int)json_integer_value(json_object_get(root, "max_tokens"));
    assert_int_equal(req->max_tokens, r->max_tokens); /* the bound the stream counts to */
    json_t *prompt = json_object_get(root, "prompt");
    if (json_is_array(prompt)) {
        r->prompt_len = (int)json_array_size(prompt);
        r->reject = f->refuse_ids;
    } else {
        const char *text = json_string_value(prompt);
        int words = 1;
        for (const char *p = text; *p; p++)
            words += *p == ' ';
        r->prompt_len = f->text_usage ? 3 + (words * 3) / 2 : words;
    }
    json_decref(root);
    if (f->now >= f->busy_from && f->now < f->busy_until)
        r->reject = true;
    bool inject = r->prompt_len == f->inject_prompt;
    r->t_next = f->now + (inject ? 300 * CLOCK_NS_PER_MS : STEP_NS);
    if (r->reject)
        r->t_next = f->now + CLOCK_NS_PER_MS;
    r->live = true;
    f->active++;
    return 0;
}

static void fake_finish(fake *f, fake_req *r, const char *reason)
{
    r->live = false;
    f->active--;
    stream_end end = {0};
    end.t_end_ns = f->now;
    const bool busy = r->reject && !f->refuse_ids;
    end.http_status = r->reject ? (busy ? 503 : 400) : 200;
    end.prompt_tokens = r->reject ? -1 : r->prompt_len;
    end.completion_tokens = r->sent;
    snprintf(end.finish_reason, sizeof end.finish_reason, "%s", reason);
    if (r->reject)
        snprintf(end.error, sizeof end.error, "%s",
                 busy ? "HTTP 503: overloaded" : "HTTP 400: prompt must be a string");
    end.retry_after_ns = busy ? f->retry_after_ns : -1;
    end.protocol_violations = r->reject ? 0 : f->violations_each;
    end.violation = end.protocol_violations > 0 ? "an event after [DONE]" : NULL;
    r->h->on_end(r->h->ctx, r->user, &end);
}

static int fake_run(void *impl, int64_t until_ns, char *err)
{
    (void)err;
    fake *f = impl;
    for (;;) {
        fake_req *next = NULL;
        for (int i = 0; i < f->n; i++)
            if (f->reqs[i].live && f->reqs[i].t_next <= until_ns &&
                (!next || f->reqs[i].t_next < next->t_next))
                next = &f->reqs[i];
        if (!next) {
            if (f->now < until_ns)
                f->now = until_ns;
            return 0;
        }
        f->now = next->t_next;
        if (next->reject) {
            fake_finish(f, next, "");
            continue;
        }
        next->sent++;
        stream_token tok = {f->now, 1, f->now - 1000, -1, STREAM_STAMP_USER};
        next->h->on_token(next->h->ctx, next->user, &tok);
        next->t_next += STEP_NS;
        if (next->sent >= next->max_tokens)
            fake_finish(f, next, "length");
    }
}

static void fake_cancel(void *impl, const char *reason)
{
    (void)reason;
    fake *f = impl;
    for (int i = 0; i < f->n; i++)
        if (f->reqs[i].live)
            fake_finish(f, &f->reqs[i], "abort");
}

static int fake_active(void *impl) { return ((fake *)impl)->active; }
static int64_t fake_now(void *impl) { return ((fake *)impl)->now; }

static stream_transport fake_transport(fake *f)
{
    return (stream_transport){f, fake_post, fake_run, fake_cancel, fake_active, fake_now, NULL, NULL};
}

/* ---- tests ------------------------------------------------------------------------- */

/* A scratch directory and DIR/tokens.csv in it. */
static void make_tmpdir(char *dir, size_t size, char *path, size_t path_size)
{
    snprintf(dir, size, "/tmp/test_driver_XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, path_size, "%s/tokens.csv", dir);
}

static int64_t count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int64_t lines = 0;
    int ch;
    while ((ch = fgetc(f)) != EOF)
        lines += ch == '\n';
    fclose(f);
    return lines;
}

static void small_workload(workload_config *wl)
{
    workload_default(wl);
    wl->users = 4;
    wl->duration_ns = 2 * CLOCK_NS_PER_S;
    wl->inject_at_ns = 100 * CLOCK_NS_PER_MS;
    wl->inject_every_ns = 200 * CLOCK_NS_PER_MS;
    wl->prompt_tokens = 500;
    wl->inject_max_tokens = 16;
    wl->bg_prompt_min = 20;
    wl->bg_prompt_max = 40;
    wl->bg_answer_min = 5;
    wl->bg_answer_max = 30;
}

/* One phase over the fake: virtual time from 1000 s, the small workload, token-id prompts,
 * an empty log. Tests change what they need before running it. */
typedef struct phase_setup {
    fake *f;
    stream_transport t;
    workload_config wl;
    driver_api api;
    tokenlog log;
} phase_setup;

static void setup_phase(phase_setup *s)
{
    s->f = fake_new();
    s->f->now = 1000 * CLOCK_NS_PER_S;
    s->t = fake_transport(s->f);
    small_workload(&s->wl);
    driver_api_defaults(&s->api);
    s->api.token_ids = true;
    tokenlog_init(&s->log);
}

static void free_phase(phase_setup *s, driver_result *res)
{
    assert_int_equal(s->f->active, 0); /* every request ended */
    driver_result_free(res);
    tokenlog_free(&s->log);
    free(s->f);
}

static void test_body(void **state)
{
    (void)state;
    workload_config wl;
    small_workload(&wl);
    driver_api api;
    driver_api_defaults(&api);
    api.token_ids = true;
    snprintf(api.model, sizeof api.model, "m");
    api.timestamps = true;
    char err[ERR_LEN];
    size_t len;
    char *a = driver_build_body(&api, &wl, 1, 1, 0, 8000, 16, &len, err);
    char *b = driver_build_body(&api, &wl, 1, 1, 1, 8000, 16, &len, err);
    char *c = driver_build_body(&api, &wl, 0, 1, 0, 8000, 16, &len, err);
    assert_non_null(a);
    json_t *root = json_loads(a, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(root, "prompt")), 8000);
    assert_string_equal(json_string_value(json_object_get(root, "model")), "m");
    assert_true(json_is_true(json_object_get(root, "stream")));
    assert_true(json_is_true(json_object_get(root, "ignore_eos")));
    assert_int_equal(json_integer_value(json_object_get(root, "max_tokens")), 16);
    json_t *so = json_object_get(root, "stream_options");
    assert_true(json_is_true(json_object_get(so, "include_usage")));
    assert_true(json_is_true(json_object_get(so, "continuous_usage_stats")));
    assert_true(json_is_true(json_object_get(json_object_get(root, "stallscope"), "timestamps")));
    json_decref(root);
    /* Unique per injection and per phase: no shared prefix for a cache to find. */
    assert_int_not_equal(strncmp(a, b, 80), 0);
    assert_int_not_equal(strncmp(a, c, 80), 0);
    free(a), free(b), free(c);

    api.token_ids = false;
    api.endpoint = DRIVER_CHAT;
    api.timestamps = false;
    api.text_overhead = 10;
    api.text_per_word = 2;
    a = driver_build_body(&api, &wl, 1, 0, 0, 110, 16, &len, err);
    root = json_loads(a, 0, NULL);
    json_t *msg = json_array_get(json_object_get(root, "messages"), 0);
    const char *text = json_string_value(json_object_get(msg, "content"));
    int words = 1;
    for (const char *p = text; *p; p++)
        words += *p == ' ';
    assert_int_equal(words, 50); /* (110 - 10) / 2 */
    assert_null(json_object_get(root, "stallscope"));
    json_decref(root);
    free(a);
}

static void test_open_and_closed_loop(void **state)
{
    (void)state;
    phase_setup s;
    setup_phase(&s);
    s.f->inject_prompt = 500;
    char dir[64], path[128];
    make_tmpdir(dir, sizeof dir, path, sizeof path);
    tokenlog_writer tokens;
    char err[ERR_LEN];
    assert_int_equal(tokenlog_writer_open(&tokens, path, TOKENLOG_TOKENS_CSV, err), 0);
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true,
                       .tokens_csv = &tokens};
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
    unlink(path);
    rmdir(dir);
    free_phase(&s, &res);
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
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true};
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
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true};
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

/* What the streams ignored as impossible is summed over the recorded requests and said in
 * the phase's notes. */
static void test_protocol_violations(void **state)
{
    (void)state;
    phase_setup s;
    setup_phase(&s);
    s.f->violations_each = 2;
    char *notes_text = NULL;
    size_t notes_len = 0;
    FILE *notes = open_memstream(&notes_text, &notes_len);
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true, .notes = notes};
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

/* The disk fills 1 s into the run: the next flush fails, the phase stops at once
 * (incomplete, the reason named), and the file keeps the whole rows written before. */
typedef struct fill_disk {
    tokenlog_writer *w;
    const char *path;
    int64_t at_ns, size;
    bool done;
} fill_disk;

static ssize_t no_space(int fd, const void *data, size_t len, off_t offset)
{
    (void)fd, (void)data, (void)len, (void)offset;
    errno = ENOSPC;
    return -1;
}

static void fill_at(void *ctx, const driver_progress *p)
{
    fill_disk *fd = ctx;
    if (fd->done || p->elapsed_ns < fd->at_ns)
        return;
    fd->done = true;
    fd->at_ns = p->elapsed_ns;
    struct stat st;
    assert_int_equal(stat(fd->path, &st), 0);
    fd->size = (int64_t)st.st_size;
    fd->w->write_at = no_space; /* every later write: ENOSPC */
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
    fill_disk fd = {&tokens, path, CLOCK_NS_PER_S, 0, false};
    driver_phase ph = {.wl = &s.wl, .api = &s.api, .salt = 1, .record = true, .tokens_csv = &tokens,
                       .progress = fill_at, .progress_ctx = &fd,
                       .progress_every_ns = 100 * CLOCK_NS_PER_MS};
    driver_result res;
    assert_int_equal(driver_run_phase(&s.t, &ph, &s.log, &res, err), 0);
    assert_true(fd.done);
    assert_false(res.complete);
    assert_string_equal(res.error, "cannot write tokens.csv: No space left on device");
    /* Stopped at the first flush after the failure: a tick (250 ms) at most. */
    int64_t stopped_after = res.t_end_ns - (res.t0_ns + fd.at_ns);
    assert_true(stopped_after >= 0 && stopped_after <= 250 * CLOCK_NS_PER_MS);
    tokenlog_writer_close(&tokens, NULL);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((int64_t)st.st_size, fd.size); /* the rows before, untouched */
    assert_true(count_lines(path) > 50);
    unlink(path);
    rmdir(dir);
    free_phase(&s, &res);
}

static void test_probe(void **state)
{
    (void)state;
    fake *f = fake_new();
    stream_transport t = fake_transport(f);
    workload_config wl;
    small_workload(&wl);
    driver_api api;
    driver_api_defaults(&api);
    char err[ERR_LEN];
    assert_int_equal(driver_probe(&t, &api, &wl, CLOCK_NS_PER_S, NULL, err), 0);
    assert_true(api.token_ids);

    memset(f, 0, sizeof *f);
    f->retry_after_ns = -1;
    f->refuse_ids = true;
    f->text_usage = true;
    driver_api_defaults(&api);
    assert_int_equal(driver_probe(&t, &api, &wl, CLOCK_NS_PER_S, NULL, err), 0);
    assert_false(api.token_ids);
    assert_true(api.text_calibrated);
    assert_true(api.text_per_word > 1.49 && api.text_per_word < 1.51);
    assert_true(api.text_overhead > 1.5 && api.text_overhead < 4.5);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_body),
        cmocka_unit_test(test_open_and_closed_loop),
        cmocka_unit_test(test_overload_burst),
        cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_protocol_violations),
        cmocka_unit_test(test_write_failure_stops_phase),
        cmocka_unit_test(test_probe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
