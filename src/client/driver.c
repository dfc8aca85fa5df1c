#include "client/driver.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/clock.h"
#include "common/err.h"

#define TICK_NS (250 * CLOCK_NS_PER_MS)
#define PROBE_PROMPT_TOKENS 8
#define CALIB_WORDS_SMALL 32
#define CALIB_WORDS_LARGE 1024
#define UNKNOWN_VOCAB 32000 /* every tokenizer in use has at least this many ids */
/* After a failed request a background user waits before its next one: 50 ms, doubling with
 * each failure in a row, at most 2 s. Without it a server answering 429 or 503 for a
 * second (an overload burst) gets thousands of instant retries, and the run stops with
 * "every request fails" although the server recovers. */
#define RETRY_FIRST_NS (50 * CLOCK_NS_PER_MS)
#define RETRY_MAX_NS (2 * CLOCK_NS_PER_S)
/* A 429 or 503 with Retry-After: the user waits what the server asked (never less than its
 * own back-off above), at most this long. 60 s covers the windows of the rate limiters that
 * send the header (per-minute request and token quotas); a longer value is a per-hour quota
 * or a mistake (a hostile 10^18 too), and honouring it would silently take the user out of
 * the load for the rest of the run. The run's end bounds every wait anyway: a retry due
 * after it never happens. */
#define RETRY_AFTER_MAX_NS (60 * CLOCK_NS_PER_S)

/* ---- API description --------------------------------------------------------------- */

void driver_api_defaults(driver_api *api)
{
    memset(api, 0, sizeof *api);
    api->endpoint = DRIVER_COMPLETIONS;
    api->text_per_word = 1.0;
    api->vocab = UNKNOWN_VOCAB;
}

int driver_endpoint_parse(const char *text, driver_endpoint *out, char *err)
{
    if (strcmp(text, "completions") == 0)
        *out = DRIVER_COMPLETIONS;
    else if (strcmp(text, "chat") == 0)
        *out = DRIVER_CHAT;
    else
        return err_set(err, "unknown endpoint '%s' (completions | chat)", text);
    return 0;
}

const char *driver_endpoint_path(driver_endpoint e)
{
    return e == DRIVER_CHAT ? "/v1/chat/completions" : "/v1/completions";
}

/* Text prompts: one pseudo-word per drawn id, syllables chosen by its bits. Words differ
 * from prompt to prompt (the ids do), so no two prompts share a prefix. */
static const char *const syllables[16] = {"ka", "lo", "mi", "ne", "su", "ta", "ri", "po",
                                          "ve", "zu", "ba", "de", "fi", "go", "hu", "ja"};

static int append_word(char *buf, size_t off, int32_t id)
{
    uint32_t u = (uint32_t)id;
    int n = 0;
    if (off > 0)
        buf[off + (size_t)n++] = ' ';
    const char *a = syllables[u & 15], *b = syllables[(u >> 4) & 15];
    memcpy(buf + off + n, a, 2), n += 2;
    memcpy(buf + off + n, b, 2), n += 2;
    if ((u >> 8) & 1) {
        memcpy(buf + off + n, syllables[(u >> 9) & 15], 2);
        n += 2;
    }
    return n;
}

static int64_t mix_index(uint64_t salt, int64_t index)
{
    return (int64_t)(((uint64_t)index) ^ (salt << 48));
}

char *driver_build_body(const driver_api *api, const workload_config *wl, uint64_t salt,
                        int is_inject, int64_t index, int prompt_tokens, int max_tokens,
                        size_t *len, char *err)
{
    int n_ids = prompt_tokens;
    if (!api->token_ids) {
        double words = ((double)prompt_tokens - api->text_overhead) / api->text_per_word;
        n_ids = words < 1 ? 1 : (int)lround(words);
    }
    int32_t *ids = malloc((size_t)n_ids * sizeof *ids);
    char *text = NULL, *out = NULL;
    json_t *root = json_object(), *prompt = NULL;
    if (!ids || !root)
        goto oom;
    workload_prompt_ids(wl, is_inject, mix_index(salt, index), ids, n_ids,
                        api->vocab > 0 ? api->vocab : UNKNOWN_VOCAB);
    if (api->token_ids) {
        if (!(prompt = json_array()))
            goto oom;
        for (int i = 0; i < n_ids; i++)
            if (json_array_append_new(prompt, json_integer(ids[i])) != 0)
                goto oom;
    } else {
        if (!(text = malloc((size_t)n_ids * 7 + 1)))
            goto oom;
        size_t off = 0;
        for (int i = 0; i < n_ids; i++)
            off += (size_t)append_word(text, off, ids[i]);
        text[off] = '\0';
        prompt = json_string(text);
    }
    if (api->model[0])
        json_object_set_new(root, "model", json_string(api->model));
    if (api->endpoint == DRIVER_CHAT) {
        json_t *msg = json_object();
        json_object_set_new(msg, "role", json_string("user"));
        json_object_set_new(msg, "content", prompt);
        json_t *messages = json_array();
        json_array_append_new(messages, msg);
        json_object_set_new(root, "messages", messages);
    } else {
        json_object_set_new(root, "prompt", prompt);
    }
    prompt = NULL;
    json_object_set_new(root, "max_tokens", json_integer(max_tokens));
    json_object_set_new(root, "stream", json_true());
    json_object_set_new(root, "ignore_eos", json_true());
    json_t *so = json_object();
    json_object_set_new(so, "include_usage", json_true());
    json_object_set_new(so, "continuous_usage_stats", json_true());
    json_object_set_new(root, "stream_options", so);
    if (api->timestamps) {
        json_t *ours = json_object();
        json_object_set_new(ours, "timestamps", json_true());
        json_object_set_new(root, "stallscope", ours);
    }
    if (!(out = json_dumps(root, JSON_COMPACT)))
        goto oom;
    *len = strlen(out);
    json_decref(root);
    free(ids);
    free(text);
    return out;
oom:
    json_decref(prompt);
    json_decref(root);
    free(ids);
    free(text);
    err_set(err, "out of memory building a request");
    return NULL;
}

/* ---- probe ------------------------------------------------------------------------- */

typedef struct probe_state {
    bool ended;
    stream_end end;
    int64_t tokens;
} probe_state;

static void probe_token(void *ctx, void *user, const stream_token *tok)
{
    (void)ctx;
    ((probe_state *)user)->tokens += tok->n_tokens;
}

static void probe_end(void *ctx, void *user, const stream_end *end)
{
    (void)ctx;
    probe_state *p = user;
    p->ended = true;
    p->end = *end;
}

static int probe_once(const stream_transport *t, const driver_api *api, const workload_config *wl,
                      int prompt_tokens, int64_t timeout_ns, probe_state *out, char *err)
{
    static const stream_handlers handlers = {NULL, probe_token, probe_end};
    memset(out, 0, sizeof *out);
    size_t len;
    char *body = driver_build_body(api, wl, 0xfe, 0, prompt_tokens, prompt_tokens, 1, &len, err);
    if (!body)
        return -1;
    stream_request req = {driver_endpoint_path(api->endpoint), body, len, &handlers, out, 1};
    int rc = t->post(t->impl, &req, err);
    free(body);
    if (rc != 0)
        return -1;
    int64_t deadline = t->now(t->impl) + timeout_ns;
    while (!out->ended) {
        int64_t now = t->now(t->impl);
        if (now >= deadline) {
            t->cancel_all(t->impl, "the probe request timed out");
            break;
        }
        if (t->run(t->impl, now + 50 * CLOCK_NS_PER_MS < deadline ? now + 50 * CLOCK_NS_PER_MS
                                                                   : deadline,
                   err) != 0)
            return -1;
    }
    return 0;
}

int driver_probe(const stream_transport *t, driver_api *api, const workload_config *wl,
                 int64_t timeout_ns, FILE *notes, char *err)
{
    probe_state p;
    if (api->endpoint == DRIVER_COMPLETIONS) {
        api->token_ids = true;
        if (probe_once(t, api, wl, PROBE_PROMPT_TOKENS, timeout_ns, &p, err) != 0)
            return -1;
        if (p.end.connect_failed)
            return err_set(err, "%s", p.end.error);
        /* A server may add a BOS token to an id prompt: one token off is still exact for
         * our purpose (it is the same for every request). */
        if (!p.end.error[0] &&
            (p.end.prompt_tokens < 0 || llabs(p.end.prompt_tokens - PROBE_PROMPT_TOKENS) <= 1)) {
            if (p.end.prompt_tokens < 0 && notes)
                fprintf(notes, "note: the server reports no usage; prompt lengths are as sent\n");
            return 0;
        }
        if (notes)
            fprintf(notes, "note: the server does not take token-id prompts (%s); using text "
                           "calibrated against usage.prompt_tokens\n",
                    p.end.error[0] ? p.end.error : "its prompt count disagreed");
    }
    api->token_ids = false;
    api->text_overhead = 0;
    api->text_per_word = 1;
    probe_state small, large;
    if (probe_once(t, api, wl, CALIB_WORDS_SMALL, timeout_ns, &small, err) != 0)
        return -1;
    if (small.end.connect_failed || small.end.error[0])
        return err_set(err, "probe request failed: %s", small.end.error);
    if (probe_once(t, api, wl, CALIB_WORDS_LARGE, timeout_ns, &large, err) != 0)
        return -1;
    if (large.end.connect_failed || large.end.error[0])
        return err_set(err, "probe request failed: %s", large.end.error);
    if (small.end.prompt_tokens < 0 || large.end.prompt_tokens < 0 ||
        large.end.prompt_tokens <= small.end.prompt_tokens) {
        if (notes)
            fprintf(notes, "note: the server reports no usable usage.prompt_tokens; text prompts "
                           "use one word per token, lengths unverified\n");
        api->text_calibrated = false;
        return 0;
    }
    api->text_per_word = (double)(large.end.prompt_tokens - small.end.prompt_tokens) /
                         (CALIB_WORDS_LARGE - CALIB_WORDS_SMALL);
    api->text_overhead = (double)small.end.prompt_tokens - api->text_per_word * CALIB_WORDS_SMALL;
    api->text_calibrated = true;
    if (notes)
        fprintf(notes, "note: text prompts calibrated: tokens = %.1f + %.3f x words\n",
                api->text_overhead, api->text_per_word);
    return 0;
}

/* ---- a phase ----------------------------------------------------------------------- */

typedef struct drv drv;

typedef struct drv_req {
    drv *d;
    int user; /* -1: the injector */
    int kind;
    int64_t log_index; /* row in log->requests, -1 when not recorded */
    int prompt_requested;
    int64_t t_first_ns, t_last_ns; /* absolute, -1 none */
} drv_req;

struct drv {
    const stream_transport *t;
    const driver_phase *cfg;
    tokenlog *log;
    driver_result *res;
    stream_handlers h;
    int64_t t0;         /* t = 0: the end of the warm-up */
    bool recording;     /* from t0 on, when cfg->record */
    int64_t *next_k;    /* per user: index of its next request */
    drv_req **current;  /* per user: the request in flight, NULL none */
    int64_t *retry_at;  /* per user: when it sends again after a failure, 0: not waiting */
    int *failures;      /* per user: failed requests in a row */
    int n_retrying;     /* users waiting in retry_at */
    bool stopping;
    bool failed;
    int64_t consecutive_errors, error_limit;
    int64_t worst_gap_ns;
    int64_t tokens;
    const char *first_violation; /* the first protocol violation in words, NULL none */
};

static void phase_fail(drv *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void phase_fail(drv *d, const char *fmt, ...)
{
    if (!d->failed) {
        d->failed = true;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->res->error, sizeof d->res->error, fmt, ap);
        va_end(ap);
    }
    d->stopping = true;
}

/* A row for r in the log. t_plan/t_send are -1 for a request carried over from the warm-up
 * (sent before t = 0): it contributes its gaps, not a TTFT. */
static int add_row(drv *d, drv_req *r, int64_t t_plan_ns, int64_t t_send_ns)
{
    tokenlog_request row = {0};
    row.request = d->log->n_requests;
    row.user = r->user;
    row.kind = r->kind;
    row.t_plan_ns = t_plan_ns;
    row.t_send_ns = t_send_ns;
    row.t_first_ns = -1;
    row.t_end_ns = -1;
    row.prompt_tokens_requested = r->prompt_requested;
    row.prompt_tokens = r->prompt_requested;
    if (tokenlog_add_request(d->log, &row, &r->log_index) != 0) {
        phase_fail(d, "out of memory");
        return -1;
    }
    return 0;
}

static char *build(drv *d, int kind, int64_t index, int prompt_tokens, int max_tokens,
                   size_t *len)
{
    char err[ERR_LEN];
    char *body = driver_build_body(d->cfg->api, d->cfg->wl, d->cfg->salt, kind == TOKENLOG_INJECT,
                                   index, prompt_tokens, max_tokens, len, err);
    if (!body)
        phase_fail(d, "%s", err);
    return body;
}

/* Send a built body (taken: freed here). */
static drv_req *send_request(drv *d, int user, int kind, char *body, size_t len,
                             int prompt_tokens, int max_tokens, int64_t t_plan_ns)
{
    char err[ERR_LEN];
    drv_req *r = calloc(1, sizeof *r);
    if (!body || !r) {
        free(body);
        free(r);
        phase_fail(d, "out of memory");
        return NULL;
    }
    r->d = d;
    r->user = user;
    r->kind = kind;
    r->prompt_requested = prompt_tokens;
    r->t_first_ns = r->t_last_ns = -1;
    r->log_index = -1;
    int64_t now = d->t->now(d->t->impl);
    if (d->recording && add_row(d, r, t_plan_ns < 0 ? now - d->t0 : t_plan_ns, now - d->t0) != 0) {
        free(body);
        free(r);
        return NULL;
    }
    stream_request req = {driver_endpoint_path(d->cfg->api->endpoint), body, len, &d->h, r,
                          max_tokens};
    int rc = d->t->post(d->t->impl, &req, err);
    free(body);
    if (rc != 0) {
        if (r->log_index >= 0)
            snprintf(d->log->requests[r->log_index].error, sizeof d->log->requests[0].error,
                     "%.120s", err);
        free(r);
        phase_fail(d, "cannot send: %s", err);
        return NULL;
    }
    return r;
}

static void start_bg(drv *d, int user)
{
    int64_t k = d->next_k[user]++;
    workload_bg_request bg = workload_bg(d->cfg->wl, user, k);
    /* The index keeps (user, k) apart: each background prompt is unique too. t_plan is the
     * moment the user is ready (now): a closed loop has no other plan. */
    size_t len = 0;
    char *body = build(d, TOKENLOG_BG, ((int64_t)user << 24) | (k & 0xffffff), bg.prompt_tokens,
                       bg.max_tokens, &len);
    d->current[user] = body ? send_request(d, user, TOKENLOG_BG, body, len, bg.prompt_tokens,
                                         bg.max_tokens, -1)
                            : NULL;
}

/* t = 0: the users are mid-answer (steady state, no synchronized start). Their answers in
 * flight are recorded from here on. */
static void start_recording(drv *d)
{
    d->recording = true;
    d->worst_gap_ns = 0;
    d->tokens = 0;
    for (int u = 0; u < d->cfg->wl->users; u++) {
        drv_req *r = d->current[u];
        if (!r)
            continue;
        if (add_row(d, r, -1, -1) != 0)
            return;
        r->t_last_ns = -1; /* no gap across t = 0 */
    }
}

static void on_token(void *ctx, void *user, const stream_token *tok)
{
    drv *d = ctx;
    drv_req *r = user;
    d->consecutive_errors = 0;
    if (r->t_first_ns < 0)
        r->t_first_ns = tok->t_ns;
    int64_t prev = r->t_last_ns;
    r->t_last_ns = tok->t_ns;
    if (r->log_index < 0)
        return; /* warm-up */
    d->tokens += tok->n_tokens;
    if (r->kind == TOKENLOG_BG && prev >= 0 && tok->t_ns - prev > d->worst_gap_ns)
        d->worst_gap_ns = tok->t_ns - prev;
    driver_result *res = d->res;
    res->tokens += tok->n_tokens;
    tokenlog_request *row = &d->log->requests[r->log_index];
    if (row->t_first_ns < 0 && row->t_send_ns >= 0)
        row->t_first_ns = tok->t_ns - d->t0;
    tokenlog_event ev = {tok->t_ns - d->t0, r->log_index, r->user, tok->n_tokens, r->kind};
    if (tokenlog_add_event(d->log, &ev) != 0) {
        phase_fail(d, "out of memory for the token log");
        return;
    }
    char err[ERR_LEN];
    if (d->cfg->tokens_csv && tokenlog_writer_event(d->cfg->tokens_csv, &ev, err) != 0)
        phase_fail(d, "%s", err);
    if (tok->emit_ns >= 0) {
        if (res->n_fidelity == res->cap_fidelity) {
            int64_t cap = res->cap_fidelity ? res->cap_fidelity * 2 : 4096;
            double *f = realloc(res->fidelity_ms, (size_t)cap * sizeof *f);
            if (!f)
                return; /* the self-check is optional; the token is logged */
            res->fidelity_ms = f;
            res->cap_fidelity = cap;
        }
        res->fidelity_ms[res->n_fidelity++] = (double)(tok->t_ns - tok->emit_ns) / 1e6;
    }
}

static void on_end(void *ctx, void *user, const stream_end *end)
{
    drv *d = ctx;
    drv_req *r = user;
    driver_result *res = d->res;
    bool is_error = end->error[0] != '\0';
    if (r->log_index >= 0) {
        res->requests++;
        res->errors += is_error;
        tokenlog_request *row = &d->log->requests[r->log_index];
        row->t_end_ns = end->t_end_ns - d->t0;
        if (end->prompt_tokens >= 0)
            row->prompt_tokens = (int32_t)end->prompt_tokens;
        row->completion_tokens = (int32_t)end->completion_tokens;
        snprintf(row->finish_reason, sizeof row->finish_reason, "%s", end->finish_reason);
        snprintf(row->error, sizeof row->error, "%s", end->error);
        char err[ERR_LEN];
        if (d->cfg->requests_csv && tokenlog_writer_request(d->cfg->requests_csv, row, err) != 0)
            phase_fail(d, "%s", err);
        res->protocol_violations += end->protocol_violations;
        if (end->protocol_violations > 0 && !d->first_violation)
            d->first_violation = end->violation;
    }
    if (r->log_index >= 0 && end->prompt_tokens >= 0 &&
        fabs((double)(end->prompt_tokens - r->prompt_requested)) > 0.02 * r->prompt_requested) {
        res->prompt_mismatches++;
        if (r->kind == TOKENLOG_INJECT && d->cfg->notes)
            fprintf(d->cfg->notes,
                    "warning: an injected prompt of %d tokens was counted as %lld by the server "
                    "(> 2 %% off)\n",
                    r->prompt_requested, (long long)end->prompt_tokens);
    }
    if (is_error) {
        d->consecutive_errors++;
        if (end->connect_failed && !d->stopping)
            phase_fail(d, "lost the server: %s", end->error);
        else if (d->consecutive_errors >= d->error_limit && !d->stopping)
            phase_fail(d, "every request fails; the last: %s", end->error);
    }
    int u = r->user;
    bool bg = r->kind == TOKENLOG_BG;
    if (bg && d->current[u] == r)
        d->current[u] = NULL;
    free(r);
    if (!bg || d->stopping)
        return;
    /* Closed loop: the user's next request goes out the moment this one ends, or after a
     * back-off when it failed (see RETRY_FIRST_NS). */
    if (!is_error) {
        d->failures[u] = 0;
        start_bg(d, u);
        return;
    }
    int64_t wait = RETRY_FIRST_NS;
    for (int i = 0; i < d->failures[u] && wait < RETRY_MAX_NS; i++)
        wait *= 2;
    if (wait > RETRY_MAX_NS)
        wait = RETRY_MAX_NS;
    if (end->retry_after_ns >= 0) {
        int64_t asked = end->retry_after_ns < RETRY_AFTER_MAX_NS ? end->retry_after_ns
                                                                 : RETRY_AFTER_MAX_NS;
        if (asked > wait)
            wait = asked;
    }
    d->failures[u]++;
    d->retry_at[u] = d->t->now(d->t->impl) + wait;
    d->n_retrying++;
}

/* Write the rows collected since the last flush; a failure (a full disk) stops the phase:
 * the files keep every whole row written before. */
static void flush_rows(drv *d)
{
    tokenlog_writer *files[] = {d->cfg->tokens_csv, d->cfg->requests_csv};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char err[ERR_LEN];
        if (files[i] && tokenlog_writer_flush(files[i], err) != 0)
            phase_fail(d, "%s", err);
    }
}

/* Users whose back-off is over send again; returns the earliest retry still pending
 * (INT64_MAX: none). */
static int64_t start_retries(drv *d, int64_t now)
{
    int64_t next = INT64_MAX;
    for (int u = 0; u < d->cfg->wl->users && d->n_retrying > 0 && !d->stopping; u++) {
        if (d->retry_at[u] == 0)
            continue;
        if (d->retry_at[u] <= now) {
            d->retry_at[u] = 0;
            d->n_retrying--;
            start_bg(d, u);
        } else if (d->retry_at[u] < next) {
            next = d->retry_at[u];
        }
    }
    return next;
}

static void report_progress(drv *d, const driver_phase *cfg, int64_t now, double tokens_per_s,
                            int sent, int planned)
{
    const workload_config *wl = cfg->wl;
    driver_progress p = {now - d->t0, wl->duration_ns, tokens_per_s, d->tokens,
                         d->t->active(d->t->impl), sent, planned, d->worst_gap_ns,
                         d->res->errors};
    cfg->progress(cfg->progress_ctx, &p);
}

int driver_run_phase(const stream_transport *t, const driver_phase *cfg, tokenlog *log,
                     driver_result *res, char *err)
{
    const workload_config *wl = cfg->wl;
    memset(res, 0, sizeof *res);
    drv d = {0};
    d.t = t;
    d.cfg = cfg;
    d.log = log;
    d.res = res;
    d.h = (stream_handlers){&d, on_token, on_end};
    d.error_limit = wl->users * 4 > 64 ? wl->users * 4 : 64;
    int64_t *plan = NULL;
    int n_plan = 0;
    size_t n_users = (size_t)(wl->users > 0 ? wl->users : 1);
    d.next_k = calloc(n_users, sizeof *d.next_k);
    d.current = calloc(n_users, sizeof *d.current);
    d.retry_at = calloc(n_users, sizeof *d.retry_at);
    d.failures = calloc(n_users, sizeof *d.failures);
    if (wl->inject) {
        int64_t max = (wl->duration_ns - wl->inject_at_ns) / wl->inject_every_ns + 2;
        plan = malloc((size_t)(max > 1 ? max : 1) * sizeof *plan);
        if (plan && workload_shard_has_injector(wl)) /* the injector runs in one shard */
            n_plan = workload_injection_times(wl, plan, (int)(max > 1 ? max : 1));
    }
    if (!d.next_k || !d.current || !d.retry_at || !d.failures || (wl->inject && !plan)) {
        free(d.next_k);
        free(d.current);
        free(d.retry_at);
        free(d.failures);
        free(plan);
        return err_set(err, "out of memory");
    }
    int64_t t_start = t->now(t->impl);
    d.t0 = t_start + (cfg->warmup_ns > 0 ? cfg->warmup_ns : 0);
    res->t0_ns = d.t0;
    if (cfg->record && d.t0 == t_start)
        d.recording = true;
    int64_t t_stop = d.t0 + wl->duration_ns;
    for (int u = 0; u < wl->users && !d.stopping; u++)
        if (workload_shard_has_user(wl, u)) /* this shard's users (all when not sharded) */
            start_bg(&d, u);

    int next_inj = 0;
    char *inj_body = NULL;
    size_t inj_len = 0;
    int64_t next_tick = t_start + TICK_NS;
    int64_t every = cfg->progress_every_ns > 0 ? cfg->progress_every_ns : CLOCK_NS_PER_S;
    int64_t next_progress = d.t0 + every, last_progress = d.t0, last_tokens = 0;
    while (!d.stopping) {
        int64_t now = t->now(t->impl);
        if (cfg->record && !d.recording && now >= d.t0)
            start_recording(&d);
        /* Open loop: every injection due by now goes out, late or not, whatever is still
         * running; t_plan is the schedule, t_send what happened. */
        while (next_inj < n_plan && now >= d.t0 + plan[next_inj] && !d.stopping) {
            if (!inj_body)
                inj_body = build(&d, TOKENLOG_INJECT, next_inj, wl->prompt_tokens,
                                 wl->inject_max_tokens, &inj_len);
            if (inj_body)
                send_request(&d, -1, TOKENLOG_INJECT, inj_body, inj_len, wl->prompt_tokens,
                             wl->inject_max_tokens, plan[next_inj]);
            inj_body = NULL;
            next_inj++;
            res->injections_sent = next_inj;
        }
        /* The next injection's body is built ahead of its time (a long prompt takes a
         * while to encode), so it leaves on schedule. */
        if (next_inj < n_plan && !inj_body && !d.stopping)
            inj_body = build(&d, TOKENLOG_INJECT, next_inj, wl->prompt_tokens,
                             wl->inject_max_tokens, &inj_len);
        const int64_t next_retry = d.n_retrying > 0 ? start_retries(&d, now) : INT64_MAX;
        if (now >= t_stop || d.stopping)
            break;
        if (now >= next_tick) {
            next_tick = now + TICK_NS;
            flush_rows(&d); /* a killed client loses at most a tick */
            char why[200];
            if (!d.stopping && cfg->should_stop && cfg->should_stop(cfg->stop_ctx, why, sizeof why))
                phase_fail(&d, "%s", why);
            if (d.stopping)
                break; /* at once, not after another wait */
        }
        if (cfg->progress && now >= next_progress) {
            report_progress(&d, cfg, now,
                            (double)(d.tokens - last_tokens) * 1e9 / (double)(now - last_progress),
                            next_inj, n_plan);
            last_progress = now;
            last_tokens = d.tokens;
            next_progress = now + every;
        }
        int64_t wake = t_stop;
        if (!d.recording && d.t0 > now && d.t0 < wake)
            wake = d.t0;
        if (next_inj < n_plan && d.t0 + plan[next_inj] < wake)
            wake = d.t0 + plan[next_inj];
        if (next_tick < wake)
            wake = next_tick;
        if (next_retry < wake)
            wake = next_retry;
        if (cfg->progress && next_progress < wake)
            wake = next_progress;
        if (t->run(t->impl, wake, err) != 0) {
            phase_fail(&d, "%s", err);
            break;
        }
    }
    d.stopping = true;
    /* In-flight answers are cut at the end of the run: finish_reason "abort", no error. */
    t->cancel_all(t->impl, d.failed ? "the run stopped early" : "");
    res->t_end_ns = t->now(t->impl);
    flush_rows(&d); /* the rows of the answers just cut */
    res->complete = !d.failed;
    if (cfg->progress && d.recording)
        report_progress(&d, cfg, res->t_end_ns, 0, next_inj, n_plan);
    if (cfg->record && res->protocol_violations > 0 && cfg->notes)
        fprintf(cfg->notes,
                "warning: %lld protocol violations from the server, ignored (the first: %s; "
                "see docs/client.md)\n",
                (long long)res->protocol_violations,
                d.first_violation ? d.first_violation : "?");
    if (cfg->record && res->prompt_mismatches > 0 && cfg->notes)
        fprintf(cfg->notes,
                "warning: %d requests had a server-counted prompt more than 2 %% off the "
                "requested length\n",
                res->prompt_mismatches);
    free(inj_body);
    free(plan);
    free(d.next_k);
    free(d.current);
    free(d.retry_at);
    free(d.failures);
    return 0;
}

void driver_result_free(driver_result *res)
{
    free(res->fidelity_ms);
    res->fidelity_ms = NULL;
    res->n_fidelity = res->cap_fidelity = 0;
}
