/* driver: the closed loop and the open loop over a scripted transport in virtual time (the
 * transport table is the seam), request bodies, and the token-id / text probe. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
} fake;

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
        stream_token tok = {f->now, 1, f->now - 1000, -1};
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
    return (stream_transport){f, fake_post, fake_run, fake_cancel, fake_active, fake_now};
}

/* ---- tests ------------------------------------------------------------------------- */

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
    fake *f = calloc(1, sizeof *f);
    f->now = 1000 * CLOCK_NS_PER_S;
    f->inject_prompt = 500;
    stream_transport t = fake_transport(f);
    workload_config wl;
    small_workload(&wl);
    driver_api api;
    driver_api_defaults(&api);
    api.token_ids = true;
    tokenlog log;
    tokenlog_init(&log);
    FILE *tokens = tmpfile();
    driver_phase ph = {.wl = &wl, .api = &api, .salt = 1, .record = true, .tokens_csv = tokens};
    driver_result res;
    char err[ERR_LEN];
    assert_int_equal(driver_run_phase(&t, &ph, &log, &res, err), 0);
    assert_true(res.complete);
    assert_int_equal(res.t0_ns, 1000 * CLOCK_NS_PER_S);
    assert_int_equal(res.injections_sent, 10); /* 0.1, 0.3, ... 1.9 s */

    int inject = 0;
    for (int64_t i = 0; i < log.n_requests; i++) {
        tokenlog_request *r = &log.requests[i];
        assert_int_equal(r->request, i);
        if (r->kind != TOKENLOG_INJECT)
            continue;
        /* Open loop: sent exactly on schedule although each answer takes ~450 ms, longer
         * than the 200 ms period. */
        assert_int_equal(r->t_plan_ns, wl.inject_at_ns + inject * wl.inject_every_ns);
        assert_int_equal(r->t_send_ns, r->t_plan_ns);
        assert_int_equal(r->user, -1);
        assert_int_equal(r->prompt_tokens, 500);
        if (r->t_end_ns < wl.duration_ns - 1)
            assert_int_equal(r->t_first_ns - r->t_send_ns, 300 * CLOCK_NS_PER_MS);
        inject++;
    }
    assert_int_equal(inject, 10);

    /* Closed loop: each user's next request leaves when its previous one ends. */
    for (int u = 0; u < wl.users; u++) {
        int64_t prev_end = -1, k = 0;
        for (int64_t i = 0; i < log.n_requests; i++) {
            tokenlog_request *r = &log.requests[i];
            if (r->kind != TOKENLOG_BG || r->user != u)
                continue;
            if (prev_end >= 0)
                assert_int_equal(r->t_send_ns, prev_end);
            else
                assert_int_equal(r->t_send_ns, 0);
            workload_bg_request want = workload_bg(&wl, u, k++);
            assert_int_equal(r->prompt_tokens_requested, want.prompt_tokens);
            if (strcmp(r->finish_reason, "abort") != 0)
                assert_int_equal(r->completion_tokens, want.max_tokens);
            prev_end = r->t_end_ns;
        }
        assert_true(k > 4);
        assert_int_equal(prev_end, wl.duration_ns); /* the last one was cut at the end */
    }
    /* Every token is in the log and in the incremental CSV. */
    int64_t sum = 0;
    for (int64_t i = 0; i < log.n_events; i++)
        sum += log.events[i].n_tokens;
    assert_int_equal(sum, res.tokens);
    rewind(tokens);
    int lines = 0, ch;
    while ((ch = fgetc(tokens)) != EOF)
        lines += ch == '\n';
    assert_int_equal(lines, log.n_events);
    assert_int_equal(res.n_fidelity, log.n_events);
    assert_true(res.fidelity_ms[0] > 0.0009 && res.fidelity_ms[0] < 0.0011);
    assert_int_equal(f->active, 0);
    fclose(tokens);
    driver_result_free(&res);
    tokenlog_free(&log);
    free(f);
}

/* A server that answers 503 to everything for 1.5 s: the users back off (50 ms, doubling,
 * at most 2 s) instead of retrying thousands of times, the phase does not give up ("every
 * request fails"), and it streams again once the server is back. */
static void test_overload_burst(void **state)
{
    (void)state;
    fake *f = calloc(1, sizeof *f);
    f->now = 1000 * CLOCK_NS_PER_S;
    f->busy_from = f->now + 500 * CLOCK_NS_PER_MS;
    f->busy_until = f->busy_from + 1500 * CLOCK_NS_PER_MS;
    stream_transport t = fake_transport(f);
    workload_config wl;
    small_workload(&wl);
    wl.inject = false;
    wl.duration_ns = 5 * CLOCK_NS_PER_S;
    driver_api api;
    driver_api_defaults(&api);
    api.token_ids = true;
    tokenlog log;
    tokenlog_init(&log);
    driver_phase ph = {.wl = &wl, .api = &api, .salt = 1, .record = true};
    driver_result res;
    char err[ERR_LEN];
    assert_int_equal(driver_run_phase(&t, &ph, &log, &res, err), 0);
    assert_true(res.complete);
    /* 1.5 s of refusals: per user at most 50 + 100 + 200 + 400 + 800 ms of waits fit, so
     * 6 refusals each, 24 in all (instant retries would make thousands). */
    assert_true(res.errors >= wl.users && res.errors <= 6 * wl.users);
    const int64_t back = f->busy_until - 1000 * CLOCK_NS_PER_S;
    int after = 0;
    for (int64_t i = 0; i < log.n_requests; i++) {
        tokenlog_request *r = &log.requests[i];
        if (r->error[0]) {
            assert_true(strncmp(r->error, "HTTP 503", 8) == 0);
            assert_true(r->t_send_ns >= back - 1500 * CLOCK_NS_PER_MS && r->t_send_ns < back);
        } else if (r->t_send_ns >= back && r->completion_tokens > 0) {
            after++;
        }
    }
    assert_true(after >= wl.users); /* every user came back */
    driver_result_free(&res);
    tokenlog_free(&log);
    free(f);
}

static void test_probe(void **state)
{
    (void)state;
    fake *f = calloc(1, sizeof *f);
    stream_transport t = fake_transport(f);
    workload_config wl;
    small_workload(&wl);
    driver_api api;
    driver_api_defaults(&api);
    char err[ERR_LEN];
    assert_int_equal(driver_probe(&t, &api, &wl, CLOCK_NS_PER_S, NULL, err), 0);
    assert_true(api.token_ids);

    memset(f, 0, sizeof *f);
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
        cmocka_unit_test(test_probe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
