/* scripted_transport — the driver's tests' transport (test_driver, test_driver_loop,
 * test_driver_api): it answers from a script in virtual time, behind the transport table
 * (the seam); a "world" shares one clock among a phase's loops, so each loop sees exactly
 * the script whatever the threads' real speed. Also one phase set up over it (the small
 * workload, token-id prompts, an empty log). Include after <cmocka.h>. */
#ifndef STALLSCOPE_TEST_SCRIPTED_TRANSPORT_H
#define STALLSCOPE_TEST_SCRIPTED_TRANSPORT_H
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/driver.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/tokenlog.h"
#include "workload/workload.h"

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

static inline fake *fake_new(void)
{
    fake *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->retry_after_ns = -1;
    return f;
}

static inline int64_t fake_time(fake *f)
{
    if (!f->w)
        return f->now;
    pthread_mutex_lock(&f->w->mu);
    int64_t now = f->left ? f->left_at : f->w->now;
    pthread_mutex_unlock(&f->w->mu);
    return now;
}

static inline int fake_post(void *impl, const transport_request *req, char *err)
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
static inline void fake_finish(fake *f, fake_req *r, const char *reason, const char *cancel,
                               int64_t now)
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
static inline fake_req *fake_due(fake *f, int64_t by)
{
    fake_req *next = NULL;
    for (int i = 0; i < f->n; i++)
        if (f->reqs[i].live && f->reqs[i].t_next <= by && (!next || f->reqs[i].t_next < next->t_next))
            next = &f->reqs[i];
    return next;
}

/* What request r does at `now`: a refusal ends; an answer sends a token (and ends after
 * its max_tokens). */
static inline void fake_step(fake *f, fake_req *r, int64_t now)
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
static inline void world_advance(world *w)
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

static inline int fake_run(void *impl, int64_t until_ns, char *err)
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

static inline void fake_cancel(void *impl, const char *reason)
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

static inline int fake_active(void *impl) { return ((fake *)impl)->active; }
static inline int64_t fake_now(void *impl) { return fake_time(impl); }

static inline transport fake_transport(fake *f)
{
    return (transport){f, fake_post, fake_run, fake_cancel, fake_active, fake_now, NULL, NULL};
}

/* driver_transports over a world: each loop gets a fake with the script's settings. */
static inline int world_open(void *ctx, int loop, transport *out, char *err)
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

static inline void world_close(void *ctx, int loop, transport *t)
{
    world *w = ctx;
    fake *f = t->impl;
    assert_ptr_equal(f, w->fakes[loop]);
    assert_true(f->left);            /* the driver cancelled what it had */
    assert_int_equal(f->active, 0); /* every request ended */
}

static inline world *world_new(int64_t now)
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

static inline void world_free(world *w)
{
    for (int i = 0; i < w->n_fakes; i++)
        free(w->fakes[i]);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

static inline int64_t world_tokens_sent(const world *w)
{
    int64_t sum = 0;
    for (int i = 0; i < w->n_fakes; i++)
        sum += w->fakes[i]->tokens_sent;
    return sum;
}

/* ---- one phase over the world: its files, the small workload, set up and freed ------ */

/* A scratch directory and DIR/tokens.csv in it. */
static inline void make_tmpdir(char *dir, size_t size, char *path, size_t path_size)
{
    snprintf(dir, size, "/tmp/test_driver_XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, path_size, "%s/tokens.csv", dir);
}

static inline int64_t count_lines(const char *path)
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

static inline void small_workload(workload_config *wl)
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

static inline void setup_phase(phase_setup *s)
{
    s->w = world_new(1000 * CLOCK_NS_PER_S);
    s->f = &s->w->script;
    s->t = (driver_transports){world_open, world_close, s->w};
    small_workload(&s->wl);
    driver_api_defaults(&s->api);
    s->api.token_ids = true;
    tokenlog_init(&s->log);
}

static inline void free_phase(phase_setup *s, driver_result *res)
{
    driver_result_free(res);
    tokenlog_free(&s->log);
    world_free(s->w);
}

#endif
