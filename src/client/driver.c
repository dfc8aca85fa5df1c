#include "client/driver.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/rng.h"

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
    if (api->extra_body && api->extra_body[0]) { /* checked an object when it was given */
        json_t *extra = json_loads(api->extra_body, 0, NULL);
        int rc = json_is_object(extra) ? json_object_update(root, extra) : 0;
        json_decref(extra);
        if (rc != 0)
            goto oom;
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
    transport_end end;
    int64_t tokens;
} probe_state;

static void probe_token(void *ctx, void *user, const transport_token *tok)
{
    (void)ctx;
    ((probe_state *)user)->tokens += tok->n_tokens;
}

static void probe_end(void *ctx, void *user, const transport_end *end)
{
    (void)ctx;
    probe_state *p = user;
    p->ended = true;
    p->end = *end;
}

static int probe_once(const transport *t, const driver_api *api, const workload_config *wl,
                      int prompt_tokens, int64_t timeout_ns, probe_state *out, char *err)
{
    static const transport_handlers handlers = {NULL, probe_token, probe_end};
    memset(out, 0, sizeof *out);
    size_t len;
    char *body = driver_build_body(api, wl, 0xfe, 0, prompt_tokens, prompt_tokens, 1, &len, err);
    if (!body)
        return -1;
    transport_request req = {driver_endpoint_path(api->endpoint), body, len, &handlers, out, 1};
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

int driver_probe(const transport *t, driver_api *api, const workload_config *wl, int64_t timeout_ns,
                 FILE *notes, char *err)
{
    probe_state p;
    if (api->endpoint == DRIVER_COMPLETIONS) {
        api->token_ids = true;
        if (probe_once(t, api, wl, PROBE_PROMPT_TOKENS, timeout_ns, &p, err) != 0)
            return -1;
        if (p.end.connect_failed)
            return err_set(err, "%s", p.end.error);
        if (p.end.http_status == 401 || p.end.http_status == 403)
            return err_set(err, "the target refused our credentials (HTTP %d on the probe "
                                "request: %s): --api-key KEY or OPENAI_API_KEY for a bearer "
                                "token, --header 'Name: value' for another scheme",
                           p.end.http_status, p.end.error);
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

/* ---- a phase: one event loop per client thread ------------------------------------------
 *
 * The background users are spread over cfg->threads loops (user u on loop u mod threads);
 * the injector, when the workload has one, runs on a loop of its own, so a busy loop never
 * delays an injection. Loop 0 runs in the caller's thread and leads: it calls should_stop
 * and progress; the others run in threads of their own. Each loop has its own transport
 * (driver_transports.open), its own users, buffers and segment of the token log, and
 * shares only what is below in `phase`: the stop flag, the first failure, the count of
 * failures in a row, the incremental files (under a lock) and the ids of their requests.
 * At the end each loop puts its segment in time order (in its own thread: the rows arrive
 * nearly in order) and the caller merges the segments, k-way, into the one log. */

#define TICK_NS (250 * CLOCK_NS_PER_MS)
/* A loop looks at the phase's stop flag (another loop failed, the lead was told to stop) at
 * least this often: the transport's run() has no way to be woken by another thread. */
#define STOP_CHECK_NS (20 * CLOCK_NS_PER_MS)

typedef struct phase phase;
typedef struct loop loop;

typedef struct drv_req {
    loop *l;
    int slot; /* the user's index in its loop, -1: the injector or an open-loop request */
    int user; /* -1: the injector */
    int kind;
    bool open; /* an open-loop request (holds a max_concurrency slot) */
    int64_t row; /* in the loop's segment, -1 when not recorded */
    int prompt_requested;
    int64_t t_last_ns; /* absolute, -1 none */
} drv_req;

/* A loop's live figures for the lead's progress lines: written by the loop alone, read by
 * the lead (relaxed: a progress line needs no ordering). */
typedef struct loop_figures {
    _Atomic int64_t tokens, errors, worst_gap_ns, stalls;
    _Atomic int active, injections_sent;
} loop_figures;

struct loop {
    phase *ph;
    int index;
    transport t;
    bool opened;
    const int *users; /* slot -> user */
    int n_users;
    bool injector;
    transport_handlers h;
    tokenlog seg; /* this loop's rows; an event's request is its row in seg until the merge */
    /* per slot */
    int64_t *next_k;   /* index of the user's next request */
    drv_req **current; /* its request in flight, NULL none */
    int64_t *retry_at; /* when it sends again after a failure, 0: not waiting */
    int *failures;     /* its failed requests in a row */
    int n_retrying;    /* users waiting in retry_at */
    bool recording, stopping;
    int next_inj; /* the injector: the next injection of the plan */
    char *inj_body;
    size_t inj_len;
    /* open-loop arrivals (an open loop): the plan's indices it sends, in time order */
    bool open_loop;
    const int64_t *open_idx;
    int64_t n_open, next_open;
    int open_limit, open_in_flight; /* max_concurrency (0: none), requests in flight */
    bool open_blocked;              /* the next arrival is due and waits for a slot */
    char *open_body;                /* the next arrival's body, built ahead of its time */
    size_t open_len;
    driver_result res; /* this loop's totals and fidelity samples */
    const char *first_violation; /* in words, NULL none; and when */
    int64_t first_violation_ns;
    int64_t worst_gap_ns, stalls; /* since t = 0, for progress lines (tokens: res.tokens) */
    int64_t handed_events;        /* seg events given to tokens_csv */
    int64_t fidelity_seen;        /* fidelity samples offered (the reservoir's count) */
    uint64_t rng;                 /* the reservoir's draws (rng_next, seeded by the loop) */
    int64_t *ended;               /* seg rows ended, not yet given to requests_csv */
    int64_t n_ended, cap_ended;
    int64_t t_end_ns;
    pthread_t thread;
    bool started;
    int status; /* -1: a local failure (out of memory ordering the segment), in err */
    char err[ERR_LEN];
    /* Last: with the padding below, no other loop's fields share its cache line. */
    loop_figures fig; /* written by this loop, read by the lead */
    char pad[64];
};

struct phase {
    const driver_phase *cfg;
    const workload_config *wl;
    int64_t t_start, t0, t_stop;
    int64_t *plan; /* injection times from t = 0 */
    int n_plan;
    workload_plan wplan;  /* the open-loop arrivals and the length tables */
    int64_t *open_table;  /* plan indices, grouped by open loop */
    loop *loops;
    int n_loops, n_bg; /* all loops; those of the background users (the first n_bg) */
    int n_open;        /* open loops, after the background ones */
    int *user_table;   /* the users, grouped by loop */
    atomic_bool stop;  /* set with the first failure: every loop stops */
    pthread_mutex_t mu; /* failed, error, last_error; the incremental files (cfg->tokens_csv,
                           requests_csv) */
    bool failed;
    char error[256];
    char last_error[128]; /* the last request's error, recorded or not */
    _Atomic int64_t consecutive_errors; /* requests ended in error, in a row, over all loops */
    int64_t error_limit;
    _Atomic int64_t next_request;       /* the incremental files' request ids */
    _Atomic int64_t held_events;        /* over the loops, while log_events_max > 0 */
    atomic_bool dropping;               /* past log_events_max: events leave once written */
    /* A trace replayed to its end (wl.until_trace_end): this process's open-loop requests
     * not yet ended; at 0 `drained` ends every loop, as the duration would. */
    _Atomic int64_t open_left;
    atomic_bool drained;
    int64_t first_request;              /* log->n_requests when the phase began */
};

static void phase_fail(loop *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void phase_fail(loop *l, const char *fmt, ...)
{
    phase *ph = l->ph;
    pthread_mutex_lock(&ph->mu);
    if (!ph->failed) {
        ph->failed = true;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ph->error, sizeof ph->error, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&ph->mu);
    atomic_store(&ph->stop, true);
    l->stopping = true;
}

/* A row for r in the loop's segment. t_plan/t_send are -1 for a request carried over from
 * the warm-up (sent before t = 0): it contributes its gaps, not a TTFT. Its id (the
 * incremental files') is unique over the loops; the merge renumbers the rows in time order. */
static int add_row(loop *l, drv_req *r, int64_t t_plan_ns, int64_t t_send_ns)
{
    tokenlog_request row = {0};
    row.request = l->ph->first_request + atomic_fetch_add(&l->ph->next_request, 1);
    row.user = r->user;
    row.kind = r->kind;
    row.t_plan_ns = t_plan_ns;
    row.t_send_ns = t_send_ns;
    row.t_first_ns = -1;
    row.t_end_ns = -1;
    row.prompt_tokens_requested = r->prompt_requested;
    row.prompt_tokens = r->prompt_requested;
    if (tokenlog_add_request(&l->seg, &row, &r->row) != 0) {
        phase_fail(l, "out of memory");
        return -1;
    }
    return 0;
}

static char *build(loop *l, int kind, int64_t index, int prompt_tokens, int max_tokens,
                   size_t *len)
{
    char err[ERR_LEN];
    const driver_phase *cfg = l->ph->cfg;
    char *body = driver_build_body(cfg->api, cfg->wl, cfg->salt, kind == TOKENLOG_INJECT, index,
                                   prompt_tokens, max_tokens, len, err);
    if (!body)
        phase_fail(l, "%s", err);
    return body;
}

/* Send a built body (taken: freed here). */
static drv_req *send_request(loop *l, int slot, int user, int kind, char *body, size_t len,
                             int prompt_tokens, int max_tokens, int64_t t_plan_ns)
{
    char err[ERR_LEN];
    phase *ph = l->ph;
    drv_req *r = calloc(1, sizeof *r);
    if (!body || !r) {
        free(body);
        free(r);
        phase_fail(l, "out of memory");
        return NULL;
    }
    r->l = l;
    r->slot = slot;
    r->user = user;
    r->kind = kind;
    r->open = slot < 0 && kind == TOKENLOG_BG;
    r->prompt_requested = prompt_tokens;
    r->t_last_ns = -1;
    r->row = -1;
    const int64_t now = l->t.now(l->t.impl);
    if (l->recording &&
        add_row(l, r, t_plan_ns < 0 ? now - ph->t0 : t_plan_ns, now - ph->t0) != 0) {
        free(body);
        free(r);
        return NULL;
    }
    transport_request req = {
        driver_endpoint_path(ph->cfg->api->endpoint), body, len, &l->h, r, max_tokens};
    int rc = l->t.post(l->t.impl, &req, err);
    free(body);
    if (rc != 0) {
        if (r->row >= 0)
            snprintf(l->seg.requests[r->row].error, sizeof l->seg.requests[0].error, "%.120s", err);
        free(r);
        phase_fail(l, "cannot send: %s", err);
        return NULL;
    }
    return r;
}

static void start_bg(loop *l, int slot)
{
    const int user = l->users[slot];
    int64_t k = l->next_k[slot]++;
    workload_bg_request bg = workload_plan_bg(&l->ph->wplan, l->ph->wl, user, k);
    /* The index keeps (user, k) apart: each background prompt is unique too. t_plan is the
     * moment the user is ready (now): a closed loop has no other plan. */
    size_t len = 0;
    char *body = build(l, TOKENLOG_BG, ((int64_t)user << 24) | (k & 0xffffff), bg.prompt_tokens,
                       bg.max_tokens, &len);
    l->current[slot] = body ? send_request(l, slot, user, TOKENLOG_BG, body, len,
                                           bg.prompt_tokens, bg.max_tokens, -1)
                            : NULL;
}

/* The body of open-loop arrival `index` of the plan: its prompt unique by its stream. */
static char *build_open(loop *l, int64_t index, size_t *len)
{
    const workload_arrival *a = &l->ph->wplan.arrivals[index];
    const int32_t user = workload_arrival_user(l->ph->wl, index);
    return build(l, TOKENLOG_BG, (int64_t)user << 24, a->prompt_tokens, a->max_tokens, len);
}

/* Open loop: every arrival due by now goes out while a slot is free (max_concurrency), late
 * or not, whatever is still running; t_plan is the plan, t_send what happened. An arrival
 * that finds every slot taken waits for the first to free up (on_end sends it). The next
 * body is built ahead of its time, so it leaves on schedule. */
static void send_open(loop *l, int64_t now)
{
    phase *ph = l->ph;
    while (l->next_open < l->n_open && !l->stopping) {
        const int64_t index = l->open_idx[l->next_open];
        const workload_arrival *a = &ph->wplan.arrivals[index];
        if (now < ph->t0 + a->t_ns)
            break;
        if (l->open_limit > 0 && l->open_in_flight >= l->open_limit) {
            l->open_blocked = true;
            break;
        }
        if (!l->open_body)
            l->open_body = build_open(l, index, &l->open_len);
        if (l->open_body) {
            if (l->open_blocked) {
                const int64_t wait = now - (ph->t0 + a->t_ns);
                l->res.open_waited++;
                l->res.open_wait_total_ns += wait;
                if (wait > l->res.open_wait_max_ns)
                    l->res.open_wait_max_ns = wait;
            }
            l->open_blocked = false;
            if (send_request(l, -1, workload_arrival_user(ph->wl, index), TOKENLOG_BG,
                             l->open_body, l->open_len, a->prompt_tokens, a->max_tokens,
                             a->t_ns))
                l->open_in_flight++;
            l->res.open_requests++;
        }
        l->open_body = NULL;
        l->next_open++;
    }
    if (l->next_open < l->n_open && !l->open_body && !l->stopping)
        l->open_body = build_open(l, l->open_idx[l->next_open], &l->open_len);
}

/* t = 0: the users are mid-answer (steady state, no synchronized start). Their answers in
 * flight are recorded from here on. */
static void start_recording(loop *l)
{
    l->recording = true;
    l->worst_gap_ns = 0;
    l->stalls = 0;
    for (int s = 0; s < l->n_users; s++) {
        drv_req *r = l->current[s];
        if (!r)
            continue;
        if (add_row(l, r, -1, -1) != 0)
            return;
        r->t_last_ns = -1; /* no gap across t = 0 */
    }
}

static void on_token(void *ctx, void *user, const transport_token *tok)
{
    loop *l = ctx;
    phase *ph = l->ph;
    drv_req *r = user;
    if (atomic_load_explicit(&ph->consecutive_errors, memory_order_relaxed) != 0)
        atomic_store_explicit(&ph->consecutive_errors, 0, memory_order_relaxed);
    int64_t prev = r->t_last_ns;
    r->t_last_ns = tok->t_ns;
    if (r->row < 0)
        return; /* warm-up */
    if (r->kind == TOKENLOG_BG && prev >= 0) {
        const int64_t gap = tok->t_ns - prev;
        if (gap > l->worst_gap_ns)
            l->worst_gap_ns = gap;
        l->stalls += ph->cfg->stall_ns > 0 && gap > ph->cfg->stall_ns;
    }
    driver_result *res = &l->res;
    res->tokens += tok->n_tokens;
    if (tok->stamp >= 0 && tok->stamp < TRANSPORT_STAMP_KINDS)
        res->stamps[tok->stamp]++;
    tokenlog_request *row = &l->seg.requests[r->row];
    if (row->t_first_ns < 0 && row->t_send_ns >= 0)
        row->t_first_ns = tok->t_ns - ph->t0;
    tokenlog_event ev = {tok->t_ns - ph->t0, r->row, r->user, tok->n_tokens, r->kind};
    if (tokenlog_add_event(&l->seg, &ev) != 0) {
        phase_fail(l, "out of memory for the token log");
        return;
    }
    if (ph->cfg->log_events_max > 0 && !atomic_load_explicit(&ph->dropping, memory_order_relaxed) &&
        atomic_fetch_add_explicit(&ph->held_events, 1, memory_order_relaxed) >= ph->cfg->log_events_max)
        atomic_store(&ph->dropping, true);
    if (tok->emit_ns >= 0) {
        const double sample = (double)(tok->t_ns - tok->emit_ns) / 1e6;
        /* Memory stays flat past log_events_max: the samples become a uniform reservoir of
         * that many (Algorithm R), so fidelity.json still describes the whole run. */
        int64_t keep = ph->cfg->log_events_max;
        if (keep > 0 && res->n_fidelity >= keep) {
            l->fidelity_seen++;
            const uint64_t j = rng_next(&l->rng) % (uint64_t)l->fidelity_seen;
            if (j < (uint64_t)keep)
                res->fidelity_ms[j] = sample;
            return;
        }
        if (res->n_fidelity == res->cap_fidelity &&
            buf_grow_items((void **)&res->fidelity_ms, &res->cap_fidelity, res->n_fidelity + 1,
                           sizeof *res->fidelity_ms) != 0)
            return; /* the self-check is optional; the token is logged */
        res->fidelity_ms[res->n_fidelity++] = sample;
        l->fidelity_seen = res->n_fidelity;
    }
}

/* The user of slot waits before sending again: its back-off after a failure (50 ms,
 * doubling with each failure in a row, at most 2 s), or what the server asked for with
 * Retry-After (at most 60 s) when that is longer. */
static void retry_later(loop *l, int slot, const transport_end *end)
{
    int64_t wait = RETRY_FIRST_NS;
    for (int i = 0; i < l->failures[slot] && wait < RETRY_MAX_NS; i++)
        wait *= 2;
    if (wait > RETRY_MAX_NS)
        wait = RETRY_MAX_NS;
    if (end->retry_after_ns >= 0) {
        int64_t asked = end->retry_after_ns < RETRY_AFTER_MAX_NS ? end->retry_after_ns
                                                                 : RETRY_AFTER_MAX_NS;
        if (asked > wait)
            wait = asked;
    }
    l->failures[slot]++;
    l->retry_at[slot] = l->t.now(l->t.impl) + wait;
    l->n_retrying++;
}

static void on_end(void *ctx, void *user, const transport_end *end)
{
    loop *l = ctx;
    phase *ph = l->ph;
    drv_req *r = user;
    driver_result *res = &l->res;
    bool is_error = end->error[0] != '\0';
    if (r->row >= 0) {
        res->requests++;
        res->errors += is_error;
        tokenlog_request *row = &l->seg.requests[r->row];
        row->t_end_ns = end->t_end_ns - ph->t0;
        if (end->prompt_tokens >= 0)
            row->prompt_tokens = (int32_t)end->prompt_tokens;
        row->completion_tokens = (int32_t)end->completion_tokens;
        snprintf(row->finish_reason, sizeof row->finish_reason, "%s", end->finish_reason);
        snprintf(row->error, sizeof row->error, "%s", end->error);
        if (ph->cfg->requests_csv) { /* given to requests.csv with the loop's next rows */
            if (l->n_ended == l->cap_ended) {
                int64_t cap = l->cap_ended ? l->cap_ended * 2 : 256;
                int64_t *grown = realloc(l->ended, (size_t)cap * sizeof *grown);
                if (grown) {
                    l->ended = grown;
                    l->cap_ended = cap;
                }
            }
            if (l->n_ended < l->cap_ended)
                l->ended[l->n_ended++] = r->row;
            else
                phase_fail(l, "out of memory");
        }
        res->protocol_violations += end->protocol_violations;
        for (int k = 0; k < CHUNK_VIOLATION_KINDS; k++)
            res->violations_by_kind[k] += end->violations_by_kind[k];
        if (end->protocol_violations > 0 && !l->first_violation) {
            l->first_violation = end->violation;
            l->first_violation_ns = end->t_end_ns;
        }
        if (end->prompt_tokens >= 0 &&
            fabs((double)(end->prompt_tokens - r->prompt_requested)) > 0.02 * r->prompt_requested) {
            res->prompt_mismatches++;
            if (r->kind == TOKENLOG_INJECT && ph->cfg->notes)
                fprintf(ph->cfg->notes,
                        "warning: an injected prompt of %d tokens was counted as %lld by the "
                        "server (> 2 %% off)\n",
                        r->prompt_requested, (long long)end->prompt_tokens);
        }
    }
    if (is_error) {
        pthread_mutex_lock(&ph->mu);
        snprintf(ph->last_error, sizeof ph->last_error, "%s", end->error);
        pthread_mutex_unlock(&ph->mu);
        const int64_t in_a_row = atomic_fetch_add(&ph->consecutive_errors, 1) + 1;
        if (end->connect_failed && !l->stopping)
            phase_fail(l, "lost the server: %s", end->error);
        else if (in_a_row >= ph->error_limit && !l->stopping)
            phase_fail(l, "every request fails; the last: %s", end->error);
    }
    const int slot = r->slot;
    const bool bg = r->kind == TOKENLOG_BG && slot >= 0; /* a closed-loop user's */
    const bool open = r->open;
    if (bg && l->current[slot] == r)
        l->current[slot] = NULL;
    free(r);
    if (open) {
        /* Its slot is free: the earliest arrival waiting for one goes now. */
        l->open_in_flight--;
        if (atomic_fetch_sub(&ph->open_left, 1) == 1 && ph->wl->until_trace_end)
            atomic_store(&ph->drained, true);
        if (!l->stopping)
            send_open(l, l->t.now(l->t.impl));
        return;
    }
    if (!bg || l->stopping)
        return;
    /* Closed loop: the user's next request goes out the moment this one ends, or after a
     * back-off when it failed (see RETRY_FIRST_NS). */
    if (is_error) {
        retry_later(l, slot, end);
    } else {
        l->failures[slot] = 0;
        start_bg(l, slot);
    }
}

/* Users whose back-off is over send again; returns the earliest retry still pending
 * (INT64_MAX: none). */
static int64_t start_retries(loop *l, int64_t now)
{
    int64_t next = INT64_MAX;
    for (int s = 0; s < l->n_users && l->n_retrying > 0 && !l->stopping; s++) {
        if (l->retry_at[s] == 0)
            continue;
        if (l->retry_at[s] <= now) {
            l->retry_at[s] = 0;
            l->n_retrying--;
            start_bg(l, s);
        } else if (l->retry_at[s] < next) {
            next = l->retry_at[s];
        }
    }
    return next;
}

/* Open loop: every injection due by now goes out, late or not, whatever is still running;
 * t_plan is the schedule, t_send what happened. The next one's body is built ahead of its
 * time (a long prompt takes a while to encode), so it leaves on schedule. */
static void send_injections(loop *l, int64_t now)
{
    phase *ph = l->ph;
    const workload_config *wl = ph->wl;
    while (l->next_inj < ph->n_plan && now >= ph->t0 + ph->plan[l->next_inj] && !l->stopping) {
        if (!l->inj_body)
            l->inj_body = build(l, TOKENLOG_INJECT, l->next_inj, wl->prompt_tokens,
                                wl->inject_max_tokens, &l->inj_len);
        if (l->inj_body)
            send_request(l, -1, -1, TOKENLOG_INJECT, l->inj_body, l->inj_len, wl->prompt_tokens,
                         wl->inject_max_tokens, ph->plan[l->next_inj]);
        l->inj_body = NULL;
        l->next_inj++;
        l->res.injections_sent = l->next_inj;
    }
    if (l->next_inj < ph->n_plan && !l->inj_body && !l->stopping)
        l->inj_body = build(l, TOKENLOG_INJECT, l->next_inj, wl->prompt_tokens,
                            wl->inject_max_tokens, &l->inj_len);
}

/* Give the rows this loop collected since last time to the incremental files, and write
 * them (flush) when asked: under the phase's lock, since every loop writes the same two
 * files. wait false: only when the lock is free at once, so a loop never stalls (its
 * sockets unread) behind another's write; returns whether it got the lock. A failed write
 * (a full disk) stops the phase: the files keep every whole row written before. */
static bool hand_rows(loop *l, bool wait, bool flush)
{
    phase *ph = l->ph;
    tokenlog_writer *tokens = ph->cfg->tokens_csv, *requests = ph->cfg->requests_csv;
    const bool rows = (tokens && l->handed_events < l->seg.n_events) || l->n_ended > 0;
    if (!rows && !flush)
        return true;
    if (wait)
        pthread_mutex_lock(&ph->mu);
    else if (pthread_mutex_trylock(&ph->mu) != 0)
        return false;
    char err[ERR_LEN];
    int rc = 0;
    for (; tokens && rc == 0 && l->handed_events < l->seg.n_events; l->handed_events++) {
        tokenlog_event ev = l->seg.events[l->handed_events];
        ev.request = l->seg.requests[ev.request].request; /* the files' id */
        rc = tokenlog_writer_event(tokens, &ev, err);
    }
    for (int64_t i = 0; requests && rc == 0 && i < l->n_ended; i++)
        rc = tokenlog_writer_request(requests, &l->seg.requests[l->ended[i]], err);
    l->n_ended = 0;
    /* Past the limit an event lives from its arrival to its write: memory stays flat. */
    if (rc == 0 && tokens && requests && atomic_load(&ph->dropping) &&
        l->handed_events == l->seg.n_events)
        l->seg.n_events = l->handed_events = 0;
    if (flush && rc == 0 && tokens)
        rc = tokenlog_writer_flush(tokens, err);
    if (flush && rc == 0 && requests)
        rc = tokenlog_writer_flush(requests, err);
    pthread_mutex_unlock(&ph->mu);
    if (rc != 0)
        phase_fail(l, "%s", err);
    return true;
}

static void publish(loop *l)
{
    atomic_store_explicit(&l->fig.tokens, l->res.tokens, memory_order_relaxed);
    atomic_store_explicit(&l->fig.errors, l->res.errors, memory_order_relaxed);
    atomic_store_explicit(&l->fig.worst_gap_ns, l->worst_gap_ns, memory_order_relaxed);
    atomic_store_explicit(&l->fig.stalls, l->stalls, memory_order_relaxed);
    atomic_store_explicit(&l->fig.active, l->t.active(l->t.impl), memory_order_relaxed);
    atomic_store_explicit(&l->fig.injections_sent, l->next_inj, memory_order_relaxed);
}

/* The phase's figures, over every loop (the lead's progress lines). */
static driver_progress phase_figures(const phase *ph, int64_t now)
{
    driver_progress p = {now - ph->t0, ph->wl->duration_ns, 0, 0, 0, 0, ph->n_plan, 0, 0,
                         ph->cfg->stall_ns > 0 ? 0 : -1, false};
    for (int i = 0; i < ph->n_loops; i++) {
        loop_figures *f = &ph->loops[i].fig;
        p.tokens += atomic_load_explicit(&f->tokens, memory_order_relaxed);
        p.errors += atomic_load_explicit(&f->errors, memory_order_relaxed);
        p.active += atomic_load_explicit(&f->active, memory_order_relaxed);
        if (p.stalls >= 0)
            p.stalls += atomic_load_explicit(&f->stalls, memory_order_relaxed);
        p.injections_sent += atomic_load_explicit(&f->injections_sent, memory_order_relaxed);
        int64_t gap = atomic_load_explicit(&f->worst_gap_ns, memory_order_relaxed);
        if (gap > p.worst_gap_ns)
            p.worst_gap_ns = gap;
    }
    return p;
}

/* The lead's progress lines: every progress_every_ns from t = 0. */
typedef struct progress_clock {
    int64_t every, next, last, last_tokens;
} progress_clock;

static void lead_progress(loop *l, progress_clock *pc, int64_t now)
{
    const driver_phase *cfg = l->ph->cfg;
    publish(l);
    driver_progress p = phase_figures(l->ph, now);
    p.tokens_per_s = (double)(p.tokens - pc->last_tokens) * 1e9 / (double)(now - pc->last);
    cfg->progress(cfg->progress_ctx, &p);
    pc->last = now;
    pc->last_tokens = p.tokens;
    pc->next = now + pc->every;
}

/* One loop, from its first request to its segment in time order. */
static void run_loop(loop *l)
{
    phase *ph = l->ph;
    const driver_phase *cfg = ph->cfg;
    const transport *t = &l->t;
    const bool lead = l->index == 0;
    char err[ERR_LEN];
    if (cfg->record && ph->t0 == ph->t_start)
        l->recording = true;
    for (int s = 0; s < l->n_users && !l->stopping; s++)
        start_bg(l, s);
    int64_t next_tick = ph->t_start + TICK_NS;
    bool flush_due = false;
    progress_clock pc = {cfg->progress_every_ns > 0 ? cfg->progress_every_ns : CLOCK_NS_PER_S,
                         0, ph->t0, 0};
    pc.next = ph->t0 + pc.every;
    while (!l->stopping) {
        int64_t now = t->now(t->impl);
        if (atomic_load_explicit(&ph->stop, memory_order_relaxed) ||
            atomic_load_explicit(&ph->drained, memory_order_relaxed))
            break;
        if (cfg->record && !l->recording && now >= ph->t0)
            start_recording(l);
        if (l->injector)
            send_injections(l, now);
        if (l->open_loop)
            send_open(l, now);
        const int64_t next_retry = l->n_retrying > 0 ? start_retries(l, now) : INT64_MAX;
        if (now >= ph->t_stop || l->stopping)
            break;
        if (now >= next_tick) {
            next_tick = now + TICK_NS;
            flush_due = true; /* a killed client loses at most a tick */
            char why[200];
            if (lead && cfg->should_stop && cfg->should_stop(cfg->stop_ctx, why, sizeof why))
                phase_fail(l, "%s", why);
            if (l->stopping)
                break; /* at once, not after another wait */
        }
        if (hand_rows(l, false, flush_due))
            flush_due = false; /* else: another loop is writing; next time round */
        if (l->stopping)
            break;
        if (lead && cfg->progress && now >= pc.next)
            lead_progress(l, &pc, now);
        publish(l);
        int64_t wake = ph->t_stop;
        if (!l->recording && ph->t0 > now && ph->t0 < wake)
            wake = ph->t0;
        if (l->injector && l->next_inj < ph->n_plan && ph->t0 + ph->plan[l->next_inj] < wake)
            wake = ph->t0 + ph->plan[l->next_inj];
        if (l->open_loop && l->next_open < l->n_open && !l->open_blocked &&
            ph->t0 + ph->wplan.arrivals[l->open_idx[l->next_open]].t_ns < wake)
            wake = ph->t0 + ph->wplan.arrivals[l->open_idx[l->next_open]].t_ns;
        if (next_tick < wake)
            wake = next_tick;
        if (next_retry < wake)
            wake = next_retry;
        if (lead && cfg->progress && pc.next < wake)
            wake = pc.next;
        if (now + STOP_CHECK_NS < wake)
            wake = now + STOP_CHECK_NS;
        if (t->run(t->impl, wake, err) != 0) {
            phase_fail(l, "%s", err);
            break;
        }
    }
    l->stopping = true;
    /* In-flight answers are cut at the end of the run: finish_reason "abort", no error. */
    t->cancel_all(t->impl, atomic_load(&ph->stop) ? "the run stopped early" : "");
    l->t_end_ns = t->now(t->impl);
    hand_rows(l, true, true); /* the rows of the answers just cut */
    publish(l);
    free(l->inj_body);
    l->inj_body = NULL;
    free(l->open_body);
    l->open_body = NULL;
    if (cfg->record && tokenlog_merge_order(&l->seg, l->err) != 0)
        l->status = -1;
}

static void *loop_thread(void *arg)
{
    run_loop(arg);
    return NULL;
}

/* ---- putting the segments together ---------------------------------------------------- */

/* The k-way merge (tokenlog_merge): the loops' ordered segments into log, requests first
 * (their ids become their rows in log), then events unless they were dropped as they were
 * written (the log then gets the requests only). */
static int merge_segments(phase *ph, tokenlog *log, char *err)
{
    tokenlog **parts = malloc((size_t)ph->n_loops * sizeof *parts);
    if (!parts)
        return err_set(err, "out of memory merging the token log");
    for (int i = 0; i < ph->n_loops; i++)
        parts[i] = &ph->loops[i].seg;
    int rc = tokenlog_merge(parts, ph->n_loops, !atomic_load(&ph->dropping), log, err);
    free(parts);
    return rc;
}

/* The loops' totals into res. */
static void sum_results(phase *ph, driver_result *res, const char **first_violation)
{
    int64_t first_at = INT64_MAX;
    *first_violation = NULL;
    for (int i = 0; i < ph->n_loops; i++) {
        loop *l = &ph->loops[i];
        res->requests += l->res.requests;
        res->errors += l->res.errors;
        res->tokens += l->res.tokens;
        res->injections_sent += l->res.injections_sent;
        res->open_requests += l->res.open_requests;
        res->open_waited += l->res.open_waited;
        res->open_wait_total_ns += l->res.open_wait_total_ns;
        if (l->res.open_wait_max_ns > res->open_wait_max_ns)
            res->open_wait_max_ns = l->res.open_wait_max_ns;
        res->prompt_mismatches += l->res.prompt_mismatches;
        res->protocol_violations += l->res.protocol_violations;
        for (int k = 0; k < CHUNK_VIOLATION_KINDS; k++)
            res->violations_by_kind[k] += l->res.violations_by_kind[k];
        for (int k = 0; k < TRANSPORT_STAMP_KINDS; k++)
            res->stamps[k] += l->res.stamps[k];
        if (l->t_end_ns > res->t_end_ns)
            res->t_end_ns = l->t_end_ns;
        if (l->first_violation && l->first_violation_ns < first_at) {
            first_at = l->first_violation_ns;
            *first_violation = l->first_violation;
        }
        if (l->res.n_fidelity == 0)
            continue;
        if (buf_grow_items((void **)&res->fidelity_ms, &res->cap_fidelity,
                           res->n_fidelity + l->res.n_fidelity, sizeof *res->fidelity_ms) != 0)
            continue; /* the self-check is optional */
        memcpy(res->fidelity_ms + res->n_fidelity, l->res.fidelity_ms,
               (size_t)l->res.n_fidelity * sizeof *res->fidelity_ms);
        res->n_fidelity += l->res.n_fidelity;
    }
}

/* This shard's users (every user when the run is not sharded): workload_shard_has_user. */
static int shard_users(const workload_config *wl)
{
    int n = 0;
    for (int u = 0; u < wl->users; u++)
        n += workload_shard_has_user(wl, u);
    return n;
}

/* Users to loops: the k-th of this shard's users runs on background loop k mod n_bg, so
 * every loop has its share whatever the count, and a user's loop depends only on (u, n_bg,
 * the shard). */
static int assign_users(phase *ph)
{
    const workload_config *wl = ph->wl;
    const int users = wl->users > 0 ? wl->users : 0;
    ph->user_table = malloc((size_t)(users > 0 ? users : 1) * sizeof *ph->user_table);
    if (!ph->user_table)
        return -1;
    int at = 0;
    for (int i = 0; i < ph->n_bg; i++) {
        loop *l = &ph->loops[i];
        l->users = ph->user_table + at;
        for (int u = 0, k = 0; u < users; u++)
            if (workload_shard_has_user(wl, u) && k++ % ph->n_bg == i)
                ph->user_table[at++] = u;
        l->n_users = (int)(ph->user_table + at - l->users);
    }
    return 0;
}

/* Open-loop arrivals to open loops: this shard's (workload_shard_has_arrival), the k-th of
 * them on open loop k mod n_open, each loop's in time order (the plan's). */
static int assign_arrivals(phase *ph)
{
    const workload_config *wl = ph->wl;
    const int64_t n = ph->wplan.n_arrivals;
    ph->open_table = malloc((size_t)(n > 0 ? n : 1) * sizeof *ph->open_table);
    if (!ph->open_table)
        return -1;
    int64_t at = 0;
    const int limit = workload_shard_concurrency(wl, wl->shard.index);
    for (int j = 0; j < ph->n_open; j++) {
        loop *l = &ph->loops[ph->n_bg + j];
        l->open_idx = ph->open_table + at;
        for (int64_t i = 0, k = 0; i < n; i++)
            if (workload_shard_has_arrival(wl, i) && k++ % ph->n_open == j)
                ph->open_table[at++] = i;
        l->n_open = ph->open_table + at - l->open_idx;
        l->open_limit = limit;
    }
    return 0;
}

static int loop_init(phase *ph, int index)
{
    loop *l = &ph->loops[index];
    l->ph = ph;
    l->index = index;
    l->injector = index == ph->n_bg + ph->n_open;
    l->open_loop = index >= ph->n_bg && index < ph->n_bg + ph->n_open;
    l->rng = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)index + 1) * 0xbf58476d1ce4e5b9ULL;
    l->h = (transport_handlers){l, on_token, on_end};
    tokenlog_init(&l->seg);
    size_t n = (size_t)(l->n_users > 0 ? l->n_users : 1);
    l->next_k = calloc(n, sizeof *l->next_k);
    l->current = calloc(n, sizeof *l->current);
    l->retry_at = calloc(n, sizeof *l->retry_at);
    l->failures = calloc(n, sizeof *l->failures);
    return l->next_k && l->current && l->retry_at && l->failures ? 0 : -1;
}

static void loop_free(loop *l)
{
    free(l->next_k);
    free(l->current);
    free(l->retry_at);
    free(l->failures);
    free(l->ended);
    free(l->inj_body);
    free(l->open_body);
    driver_result_free(&l->res);
    tokenlog_free(&l->seg);
}

int driver_run_phase(const driver_transports *transports, const driver_phase *cfg, tokenlog *log,
                     driver_result *res, char *err)
{
    const workload_config *wl = cfg->wl;
    memset(res, 0, sizeof *res);
    phase ph;
    memset(&ph, 0, sizeof ph);
    ph.cfg = cfg;
    ph.wl = wl;
    ph.error_limit = wl->users * 4 > 64 ? wl->users * 4 : 64;
    ph.first_request = log->n_requests;
    atomic_init(&ph.stop, false);
    atomic_init(&ph.consecutive_errors, 0);
    atomic_init(&ph.next_request, 0);
    atomic_init(&ph.held_events, 0);
    atomic_init(&ph.dropping, false);
    atomic_init(&ph.open_left, 0);
    atomic_init(&ph.drained, false);
    const int users = shard_users(wl) > 0 ? shard_users(wl) : 1;
    ph.n_bg = cfg->threads > 0 ? cfg->threads : 1;
    if (ph.n_bg > users)
        ph.n_bg = users;
    int status = -1, n_started = 0;
    bool mutex = false;
    if (workload_plan_build(wl, &ph.wplan, err) != 0)
        return -1;
    if (cfg->record && workload_open_loop(wl))
        workload_plan_describe(&ph.wplan, wl, res->open_plan, sizeof res->open_plan);
    int64_t mine = 0;
    for (int64_t i = 0; i < ph.wplan.n_arrivals; i++)
        mine += workload_shard_has_arrival(wl, i);
    res->open_planned = mine;
    atomic_store(&ph.open_left, mine);
    if (mine > 0) /* one loop keeps the arrivals first come, first served under a limit */
        ph.n_open = wl->max_concurrency > 0 ? 1 : (cfg->threads > 0 ? cfg->threads : 1);
    ph.n_loops = ph.n_bg + ph.n_open + (workload_injects(wl) ? 1 : 0);
    if (workload_injects(wl)) {
        int64_t max = (wl->duration_ns - wl->inject_at_ns) / wl->inject_every_ns + 2;
        ph.plan = malloc((size_t)(max > 1 ? max : 1) * sizeof *ph.plan);
        if (!ph.plan)
            goto oom;
        if (workload_shard_has_injector(wl)) /* the injector runs in one shard */
            ph.n_plan = workload_injection_times(wl, ph.plan, (int)(max > 1 ? max : 1));
    }
    if (!(ph.loops = calloc((size_t)ph.n_loops, sizeof *ph.loops)) || assign_users(&ph) != 0 ||
        assign_arrivals(&ph) != 0)
        goto oom;
    for (int i = 0; i < ph.n_loops; i++)
        if (loop_init(&ph, i) != 0)
            goto oom;
    if (pthread_mutex_init(&ph.mu, NULL) != 0) {
        err_set(err, "cannot create a lock");
        goto done;
    }
    mutex = true;
    for (int i = 0; i < ph.n_loops; i++) {
        if (transports->open(transports->ctx, i, &ph.loops[i].t, err) != 0)
            goto done;
        ph.loops[i].opened = true;
    }
    ph.t_start = ph.loops[0].t.now(ph.loops[0].t.impl);
    ph.t0 = ph.t_start + (cfg->warmup_ns > 0 ? cfg->warmup_ns : 0);
    ph.t_stop = ph.t0 + wl->duration_ns;
    res->t0_ns = ph.t0;
    if (cfg->on_t0)
        cfg->on_t0(cfg->t0_ctx, ph.t0);
    for (int i = 1; i < ph.n_loops; i++) {
        int rc = pthread_create(&ph.loops[i].thread, NULL, loop_thread, &ph.loops[i]);
        if (rc != 0) {
            err_set(err, "cannot start client thread %d: %s", i, strerror(rc));
            atomic_store(&ph.stop, true);
            break;
        }
        ph.loops[i].started = true;
        n_started++;
    }
    if (n_started == ph.n_loops - 1)
        run_loop(&ph.loops[0]);
    for (int i = 1; i < ph.n_loops; i++)
        if (ph.loops[i].started)
            pthread_join(ph.loops[i].thread, NULL);
    if (n_started < ph.n_loops - 1)
        goto done; /* err says which thread */
    for (int i = 0; i < ph.n_loops; i++)
        if (ph.loops[i].status != 0) {
            err_set(err, "%s", ph.loops[i].err);
            goto done;
        }
    const char *first_violation;
    sum_results(&ph, res, &first_violation);
    /* Nothing recorded, and every request since the last token failed (the warm-up's, its
     * users still backing off when a short run ended): no run to report, and the reason. */
    const int64_t in_a_row = atomic_load(&ph.consecutive_errors);
    if (cfg->record && !ph.failed && res->requests == 0 && in_a_row > 0) {
        ph.failed = true;
        snprintf(ph.error, sizeof ph.error,
                 "no request was recorded: the %lld before t = 0 failed, the last with: %s",
                 (long long)in_a_row, ph.last_error);
    }
    res->complete = !ph.failed;
    res->drained = atomic_load(&ph.drained);
    res->events_dropped = atomic_load(&ph.dropping);
    snprintf(res->error, sizeof res->error, "%s", ph.error);
    if (cfg->record && merge_segments(&ph, log, err) != 0)
        goto done;
    if (cfg->progress && ph.loops[0].recording) { /* not when stopped before t = 0 */
        driver_progress p = phase_figures(&ph, res->t_end_ns);
        p.active = 0;
        p.final = true; /* the rate over the whole run, not the last interval's */
        p.tokens_per_s = p.elapsed_ns > 0 ? (double)p.tokens * 1e9 / (double)p.elapsed_ns : 0;
        cfg->progress(cfg->progress_ctx, &p);
    }
    if (cfg->record && res->protocol_violations > 0 && cfg->notes)
        fprintf(cfg->notes,
                "warning: %lld protocol violations from the server, ignored (the first: %s; "
                "see docs/client.md)\n",
                (long long)res->protocol_violations, first_violation ? first_violation : "?");
    if (cfg->record && res->violations_by_kind[CHUNK_VIOLATION_ABOVE_STREAM] > 0 && cfg->notes)
        fprintf(cfg->notes,
                "warning: %lld usage counts claimed more completion tokens than were streamed: "
                "refused; requests.csv, the throughputs and tokens.csv count what streamed\n",
                (long long)res->violations_by_kind[CHUNK_VIOLATION_ABOVE_STREAM]);
    if (cfg->record && res->prompt_mismatches > 0 && cfg->notes)
        fprintf(cfg->notes,
                "warning: %d requests had a server-counted prompt more than 2 %% off the "
                "requested length\n",
                res->prompt_mismatches);
    status = 0;
    goto done;
oom:
    err_set(err, "out of memory");
done:
    for (int i = 0; ph.loops && i < ph.n_loops; i++) {
        if (ph.loops[i].opened)
            transports->close(transports->ctx, i, &ph.loops[i].t);
        loop_free(&ph.loops[i]);
    }
    if (mutex)
        pthread_mutex_destroy(&ph.mu);
    free(ph.loops);
    free(ph.user_table);
    free(ph.open_table);
    free(ph.plan);
    workload_plan_free(&ph.wplan);
    if (status != 0)
        driver_result_free(res);
    return status;
}

void driver_result_free(driver_result *res)
{
    free(res->fidelity_ms);
    res->fidelity_ms = NULL;
    res->n_fidelity = res->cap_fidelity = 0;
}
