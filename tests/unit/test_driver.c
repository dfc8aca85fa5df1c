/* driver: the closed loop and the open loop over a scripted transport in virtual time (the
 * transport table is the seam), request bodies, the token-id / text probe, and the event
 * loops: the same log whatever their number, totals summed, a stop and a full disk reaching
 * every loop, every token kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "client/driver.h"
#include "common/clock.h"
#include "common/err.h"

#include "scratch_file.h"

/* ---- a transport that answers from a script, in virtual time -------------------------- */

#define FAKE_MAX 4096
#define STEP_NS (10 * CLOCK_NS_PER_MS)
#define MAX_LOOPS 8

typedef struct fake_req {
    const transport_handlers *h;
    void *user;
    int max_tokens, prompt_len, sent;
    int64_t t_next;
    bool live;
    bool reject;
} fake_req;

typedef struct world world;

/* One loop's transport; alone (the probe's), it keeps its own clock in `now`. */
typedef struct fake {
    world *w; /* the clock it shares with the other loops' transports, NULL: alone */
    int64_t now;
    fake_req reqs[FAKE_MAX];
    int n, active, max_active_inject;
    int inject_prompt;    /* a prompt this long is an injection: slow first token */
    bool refuse_ids;      /* answer 400 to token-id prompts */
    bool text_usage;      /* usage.prompt_tokens = 3 + 1.5 x words for text */
    int64_t busy_from, busy_until; /* requests posted in [from, until) get 503 */
    int64_t retry_after_ns;        /* the 503s' Retry-After (transport_end), -1 none */
    int64_t violations_each;       /* protocol violations every answered request reports */
    /* with a world */
    bool waiting, left;            /* in run(), waiting for time to pass; done (cancel_all) */
    int64_t until, left_at;
    int64_t tokens_sent;           /* tokens it delivered */
    int injections;                /* requests it took that were injections */
} fake;

/* The transports of one phase's loops, in one virtual time: the clock moves only when every
 * loop waits in run(), to the earliest moment one of them has something to do, so each
 * loop sees exactly the script whatever the threads' real speed. A loop leaves the world
 * with its cancel_all (the driver's last call of it). */
struct world {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t now;
    fake script; /* the settings every loop's transport copies */
    fake *fakes[MAX_LOOPS];
    int n_fakes, members, waiting;
};

static fake *fake_new(void)
{
    fake *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->retry_after_ns = -1;
    return f;
}

static int64_t fake_time(fake *f)
{
    if (!f->w)
        return f->now;
    pthread_mutex_lock(&f->w->mu);
    int64_t now = f->left ? f->left_at : f->w->now;
    pthread_mutex_unlock(&f->w->mu);
    return now;
}

static int fake_post(void *impl, const transport_request *req, char *err)
{
    fake *f = impl;
    if (f->n >= FAKE_MAX)
        return err_set(err, "fake full");
    const int64_t now = fake_time(f);
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
    if (now >= f->busy_from && now < f->busy_until)
        r->reject = true;
    bool inject = r->prompt_len == f->inject_prompt;
    f->injections += inject;
    r->t_next = now + (inject ? 300 * CLOCK_NS_PER_MS : STEP_NS);
    if (r->reject)
        r->t_next = now + CLOCK_NS_PER_MS;
    r->live = true;
    f->active++;
    return 0;
}

/* r ends at now with finish_reason `reason`; cancelled (the transport's cancel_all): with error
 * `cancel` when not "". */
static void fake_finish(fake *f, fake_req *r, const char *reason, const char *cancel, int64_t now)
{
    r->live = false;
    f->active--;
    transport_end end = {0};
    end.t_end_ns = now;
    const bool busy = r->reject && !f->refuse_ids;
    end.http_status = r->reject ? (busy ? 503 : 400) : 200;
    end.prompt_tokens = r->reject ? -1 : r->prompt_len;
    end.completion_tokens = r->sent;
    snprintf(end.finish_reason, sizeof end.finish_reason, "%s", reason);
    if (r->reject)
        snprintf(end.error, sizeof end.error, "%s",
                 busy ? "HTTP 503: overloaded" : "HTTP 400: prompt must be a string");
    else if (cancel)
        snprintf(end.error, sizeof end.error, "%s", cancel);
    end.retry_after_ns = busy ? f->retry_after_ns : -1;
    end.protocol_violations = r->reject ? 0 : f->violations_each;
    end.violation = end.protocol_violations > 0 ? "an event after [DONE]" : NULL;
    r->h->on_end(r->h->ctx, r->user, &end);
}

/* The request due first at or before `by` (the earliest posted on ties), NULL none. */
static fake_req *fake_due(fake *f, int64_t by)
{
    fake_req *next = NULL;
    for (int i = 0; i < f->n; i++)
        if (f->reqs[i].live && f->reqs[i].t_next <= by && (!next || f->reqs[i].t_next < next->t_next))
            next = &f->reqs[i];
    return next;
}

/* What request r does at `now`: a refusal ends; an answer sends a token (and ends after
 * its max_tokens). */
static void fake_step(fake *f, fake_req *r, int64_t now)
{
    if (r->reject) {
        fake_finish(f, r, "", NULL, now);
        return;
    }
    r->sent++;
    f->tokens_sent++;
    transport_token tok = {now, 1, now - 1000, -1, TRANSPORT_STAMP_USER};
    r->h->on_token(r->h->ctx, r->user, &tok);
    r->t_next += STEP_NS;
    if (r->sent >= r->max_tokens)
        fake_finish(f, r, "length", NULL, now);
}

/* Every loop waits: time moves to the first thing any of them has to do. */
static void world_advance(world *w)
{
    int64_t next = INT64_MAX;
    for (int i = 0; i < w->n_fakes; i++) {
        fake *f = w->fakes[i];
        if (f->left)
            continue;
        fake_req *due = fake_due(f, INT64_MAX);
        if (f->until < next)
            next = f->until;
        if (due && due->t_next < next)
            next = due->t_next;
    }
    if (next != INT64_MAX && next > w->now)
        w->now = next;
    for (int i = 0; i < w->n_fakes; i++)
        w->fakes[i]->waiting = false;
    w->waiting = 0;
    pthread_cond_broadcast(&w->cv);
}

static int fake_run(void *impl, int64_t until_ns, char *err)
{
    (void)err;
    fake *f = impl;
    world *w = f->w;
    if (!w) {
        fake_req *next;
        while ((next = fake_due(f, until_ns))) {
            f->now = next->t_next;
            fake_step(f, next, f->now);
        }
        if (f->now < until_ns)
            f->now = until_ns;
        return 0;
    }
    pthread_mutex_lock(&w->mu);
    for (;;) {
        const int64_t now = w->now;
        fake_req *next = fake_due(f, now);
        if (next) {
            pthread_mutex_unlock(&w->mu); /* callbacks post, and may take the driver's lock */
            fake_step(f, next, now);
            pthread_mutex_lock(&w->mu);
            continue;
        }
        if (now >= until_ns)
            break;
        f->until = until_ns;
        f->waiting = true;
        if (++w->waiting == w->members)
            world_advance(w);
        while (f->waiting)
            pthread_cond_wait(&w->cv, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return 0;
}

static void fake_cancel(void *impl, const char *reason)
{
    fake *f = impl;
    const int64_t now = fake_time(f);
    for (int i = 0; i < f->n; i++)
        if (f->reqs[i].live)
            fake_finish(f, &f->reqs[i], "abort", reason, now);
    world *w = f->w;
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    if (!f->left) {
        f->left = true;
        f->left_at = w->now;
        w->members--;
        if (w->members > 0 && w->waiting == w->members)
            world_advance(w);
    }
    pthread_mutex_unlock(&w->mu);
}

static int fake_active(void *impl) { return ((fake *)impl)->active; }
static int64_t fake_now(void *impl) { return fake_time(impl); }

static transport fake_transport(fake *f)
{
    return (transport){f, fake_post, fake_run, fake_cancel, fake_active, fake_now, NULL, NULL};
}

/* driver_transports over a world: each loop gets a fake with the script's settings. */
static int world_open(void *ctx, int loop, transport *out, char *err)
{
    world *w = ctx;
    if (w->n_fakes >= MAX_LOOPS)
        return err_set(err, "more than %d loops", MAX_LOOPS);
    assert_int_equal(loop, w->n_fakes); /* in order, one each */
    fake *f = fake_new();
    *f = w->script;
    f->w = w;
    f->n = f->active = 0;
    pthread_mutex_lock(&w->mu);
    w->fakes[w->n_fakes++] = f;
    w->members++;
    pthread_mutex_unlock(&w->mu);
    *out = fake_transport(f);
    return 0;
}

static void world_close(void *ctx, int loop, transport *t)
{
    world *w = ctx;
    fake *f = t->impl;
    assert_ptr_equal(f, w->fakes[loop]);
    assert_true(f->left);            /* the driver cancelled what it had */
    assert_int_equal(f->active, 0); /* every request ended */
}

static world *world_new(int64_t now)
{
    world *w = calloc(1, sizeof *w);
    assert_non_null(w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->now = now;
    w->script.now = now;
    w->script.retry_after_ns = -1;
    return w;
}

static void world_free(world *w)
{
    for (int i = 0; i < w->n_fakes; i++)
        free(w->fakes[i]);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

static int64_t world_tokens_sent(const world *w)
{
    int64_t sum = 0;
    for (int i = 0; i < w->n_fakes; i++)
        sum += w->fakes[i]->tokens_sent;
    return sum;
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
    wl->prompt_len = (workload_dist){.kind = WORKLOAD_DIST_UNIFORM, .a = 20, .b = 40};
    wl->answer_len = (workload_dist){.kind = WORKLOAD_DIST_UNIFORM, .a = 5, .b = 30};
}

/* One phase over the world: virtual time from 1000 s, the small workload, token-id prompts,
 * an empty log. Tests change what they need (the script: s.f) before running it. */
typedef struct phase_setup {
    world *w;
    fake *f; /* the script every loop's transport copies */
    driver_transports t;
    workload_config wl;
    driver_api api;
    tokenlog log;
} phase_setup;

static void setup_phase(phase_setup *s)
{
    s->w = world_new(1000 * CLOCK_NS_PER_S);
    s->f = &s->w->script;
    s->t = (driver_transports){world_open, world_close, s->w};
    small_workload(&s->wl);
    driver_api_defaults(&s->api);
    s->api.token_ids = true;
    tokenlog_init(&s->log);
}

static void free_phase(phase_setup *s, driver_result *res)
{
    driver_result_free(res);
    tokenlog_free(&s->log);
    world_free(s->w);
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

    /* --extra-body: its members over ours (a model of the user's, sampling settings), the
     * rest of the body as before. */
    api.extra_body = "{\"temperature\":0.5,\"model\":\"other\",\"chat_template_kwargs\":{\"x\":1}}";
    a = driver_build_body(&api, &wl, 1, 1, 0, 8000, 16, &len, err);
    assert_non_null(a);
    root = json_loads(a, 0, NULL);
    assert_true(json_real_value(json_object_get(root, "temperature")) == 0.5);
    assert_string_equal(json_string_value(json_object_get(root, "model")), "other");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(root, "chat_template_kwargs"), "x")), 1);
    assert_int_equal(json_array_size(json_object_get(root, "prompt")), 8000);
    assert_int_equal(json_integer_value(json_object_get(root, "max_tokens")), 16);
    json_decref(root);
    free(a);
    api.extra_body = NULL;

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

static void test_probe(void **state)
{
    (void)state;
    fake *f = fake_new();
    transport t = fake_transport(f);
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
        cmocka_unit_test(test_open_loop_rate),
        cmocka_unit_test(test_trace_ends_the_phase),
        cmocka_unit_test(test_overload_burst),
        cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_nothing_recorded),
        cmocka_unit_test(test_protocol_violations),
        cmocka_unit_test(test_write_failure_stops_phase),
        cmocka_unit_test(test_loops_same_log),
        cmocka_unit_test(test_stop_reaches_every_loop),
        cmocka_unit_test(test_events_dropped_past_limit),
        cmocka_unit_test(test_probe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
