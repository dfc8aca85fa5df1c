#include "client/driver_loop.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/rng.h"

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

#define TICK_NS (250 * CLOCK_NS_PER_MS)
/* A loop looks at the phase's stop flag (another loop failed, the lead was told to stop) at
 * least this often: the transport's run() has no way to be woken by another thread. */
#define STOP_CHECK_NS (20 * CLOCK_NS_PER_MS)

typedef struct driver_loop_req {
    driver_loop *l;
    int slot; /* the user's index in its loop, -1: the injector or an open-loop request */
    int user; /* -1: the injector */
    int kind;
    bool open; /* an open-loop request (holds a max_concurrency slot) */
    int64_t id;  /* unique over the loops, given when its body was built (the body names it) */
    int64_t row; /* in the loop's segment, -1 when not recorded */
    int prompt_requested;
    int64_t t_last_ns; /* absolute, -1 none */
} driver_loop_req;

static void phase_fail(driver_loop *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void phase_fail(driver_loop *l, const char *fmt, ...)
{
    driver_shared *ph = l->ph;
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
 * incremental files', the one its body gave the server) is unique over the loops; the merge
 * renumbers the rows in time order and keeps it as sent_id. */
static int add_row(driver_loop *l, driver_loop_req *r, int64_t t_plan_ns, int64_t t_send_ns)
{
    tokenlog_request row = {0};
    row.request = r->id;
    row.sent_id = r->id;
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

/* The id of a request about to be built: unique over the loops (every request has one, a
 * warm-up's too: carried over, its row keeps the id its body gave the server). */
static int64_t next_id(driver_loop *l)
{
    return l->ph->first_request + atomic_fetch_add(&l->ph->next_request, 1);
}

/* A body, and the id it names the request by (*id). */
static char *build(driver_loop *l, int kind, int64_t index, int prompt_tokens, int max_tokens,
                   int64_t *id, size_t *len)
{
    char err[ERR_LEN];
    const driver_phase *cfg = l->ph->cfg;
    *id = next_id(l);
    char *body = driver_build_body(cfg->api, cfg->wl, cfg->salt, kind == TOKENLOG_INJECT, index,
                                   prompt_tokens, max_tokens, *id, len, err);
    if (!body)
        phase_fail(l, "%s", err);
    return body;
}

/* Send a built body (taken: freed here). */
static driver_loop_req *send_request(driver_loop *l, int slot, int user, int kind, char *body,
                                     size_t len, int64_t id, int prompt_tokens, int max_tokens,
                                     int64_t t_plan_ns)
{
    char err[ERR_LEN];
    driver_shared *ph = l->ph;
    driver_loop_req *r = calloc(1, sizeof *r);
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
    r->id = id;
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

/* The body of a prompt described by segments (phase_fail on failure), and the id it names
 * the request by (*id). */
static char *build_prompt(driver_loop *l, const workload_prompt *p, int max_tokens, int64_t *id,
                          size_t *len)
{
    char err[ERR_LEN];
    const driver_phase *cfg = l->ph->cfg;
    *id = next_id(l);
    char *body =
        driver_build_body_prompt(cfg->api, cfg->wl, cfg->salt, p, max_tokens, *id, len, err);
    if (!body)
        phase_fail(l, "%s", err);
    return body;
}

static void start_bg(driver_loop *l, int slot)
{
    const int user = l->users[slot];
    int64_t k = l->next_k[slot]++;
    workload_bg_request bg;
    /* The user's conversation says what its prompt holds; without turns or a system prompt
     * the index (user, k) keeps each background prompt unique. t_plan is the moment the user
     * is ready (now): a closed loop has no other plan. */
    if (workload_conv_next(&l->ph->wplan, l->ph->wl, &l->convs[slot], user, k, &bg,
                           &l->prompt) != 0) {
        phase_fail(l, "out of memory");
        l->current[slot] = NULL;
        return;
    }
    size_t len = 0;
    int64_t id;
    char *body = build_prompt(l, &l->prompt, bg.max_tokens, &id, &len);
    l->current[slot] = body ? send_request(l, slot, user, TOKENLOG_BG, body, len, id,
                                           bg.prompt_tokens, bg.max_tokens, -1)
                            : NULL;
}

/* The body of open-loop arrival `index` of the plan: its trace row's prompt text, else a
 * made-up prompt unique by its stream (after the system prompt and a Mooncake row's
 * blocks). */
static char *build_open(driver_loop *l, int64_t index, int64_t *id, size_t *len)
{
    const workload_plan *plan = &l->ph->wplan;
    const workload_arrival *a = &plan->arrivals[index];
    if (a->text_len > 0) {
        char err[ERR_LEN];
        *id = next_id(l);
        char *body = driver_build_body_text(l->ph->cfg->api, plan->texts.data + a->text_off,
                                            (size_t)a->text_len, a->max_tokens, *id, len, err);
        if (!body)
            phase_fail(l, "%s", err);
        return body;
    }
    if (workload_arrival_prompt(plan, l->ph->wl, index, &l->prompt) != 0) {
        phase_fail(l, "out of memory");
        return NULL;
    }
    return build_prompt(l, &l->prompt, a->max_tokens, id, len);
}

/* Open loop: every arrival due by now goes out while a slot is free (max_concurrency), late
 * or not, whatever is still running; t_plan is the plan, t_send what happened. An arrival
 * that finds every slot taken waits for the first to free up (on_end sends it). The next
 * body is built ahead of its time, so it leaves on schedule. */
static void send_open(driver_loop *l, int64_t now)
{
    driver_shared *ph = l->ph;
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
            l->open_body = build_open(l, index, &l->open_id, &l->open_len);
        if (l->open_body) {
            if (l->open_blocked) {
                const int64_t wait = now - (ph->t0 + a->t_ns);
                l->res.open_waited++;
                l->res.open_wait_total_ns += wait;
                if (wait > l->res.open_wait_max_ns)
                    l->res.open_wait_max_ns = wait;
            }
            l->open_blocked = false;
            /* A made-up prompt starts with the system prompt (a trace's text is sent as is). */
            const int prompt =
                a->prompt_tokens + (a->text_len > 0 ? 0 : ph->wl->system_prompt_tokens);
            if (send_request(l, -1, workload_arrival_user(ph->wl, index), TOKENLOG_BG,
                             l->open_body, l->open_len, l->open_id, prompt, a->max_tokens,
                             a->t_ns))
                l->open_in_flight++;
            l->res.open_requests++;
        }
        l->open_body = NULL;
        l->next_open++;
    }
    if (l->next_open < l->n_open && !l->open_body && !l->stopping)
        l->open_body = build_open(l, l->open_idx[l->next_open], &l->open_id, &l->open_len);
}

/* t = 0: the users are mid-answer (steady state, no synchronized start). Their answers in
 * flight are recorded from here on. */
static void start_recording(driver_loop *l)
{
    l->recording = true;
    l->worst_gap_ns = 0;
    l->stalls = 0;
    for (int s = 0; s < l->n_users; s++) {
        driver_loop_req *r = l->current[s];
        if (!r)
            continue;
        if (add_row(l, r, -1, -1) != 0)
            return;
        r->t_last_ns = -1; /* no gap across t = 0 */
    }
}

static void on_token(void *ctx, void *user, const transport_token *tok)
{
    driver_loop *l = ctx;
    driver_shared *ph = l->ph;
    driver_loop_req *r = user;
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
    const int64_t events_max = ph->cfg->log_events_max;
    if (events_max > 0 && !atomic_load_explicit(&ph->dropping, memory_order_relaxed) &&
        atomic_fetch_add_explicit(&ph->held_events, 1, memory_order_relaxed) >= events_max)
        atomic_store(&ph->dropping, true);
    if (tok->emit_ns >= 0) {
        const double sample = (double)(tok->t_ns - tok->emit_ns) / 1e6;
        /* Memory stays flat past log_events_max: the samples become a uniform reservoir of
         * that many (Algorithm R), so fidelity.json still describes the whole run. */
        const int64_t keep = events_max;
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
static void retry_later(driver_loop *l, int slot, const transport_end *end)
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
    driver_loop *l = ctx;
    driver_shared *ph = l->ph;
    driver_loop_req *r = user;
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
    } else if (l->ph->wl->think_time_ns > 0) {
        /* The user reads the answer first: it waits in retry_at like a back-off. */
        l->failures[slot] = 0;
        l->retry_at[slot] = l->t.now(l->t.impl) + l->ph->wl->think_time_ns;
        l->n_retrying++;
    } else {
        l->failures[slot] = 0;
        start_bg(l, slot);
    }
}

/* Users whose back-off is over send again; returns the earliest retry still pending
 * (INT64_MAX: none). */
static int64_t start_retries(driver_loop *l, int64_t now)
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
static void send_injections(driver_loop *l, int64_t now)
{
    driver_shared *ph = l->ph;
    const workload_config *wl = ph->wl;
    while (l->next_inj < ph->n_plan && now >= ph->t0 + ph->plan[l->next_inj] && !l->stopping) {
        if (!l->inj_body)
            l->inj_body = build(l, TOKENLOG_INJECT, l->next_inj, wl->prompt_tokens,
                                wl->inject_max_tokens, &l->inj_id, &l->inj_len);
        if (l->inj_body)
            send_request(l, -1, -1, TOKENLOG_INJECT, l->inj_body, l->inj_len, l->inj_id,
                         wl->prompt_tokens, wl->inject_max_tokens, ph->plan[l->next_inj]);
        l->inj_body = NULL;
        l->next_inj++;
        l->res.injections_sent = l->next_inj;
    }
    if (l->next_inj < ph->n_plan && !l->inj_body && !l->stopping)
        l->inj_body = build(l, TOKENLOG_INJECT, l->next_inj, wl->prompt_tokens,
                            wl->inject_max_tokens, &l->inj_id, &l->inj_len);
}

/* Give the rows this loop collected since last time to the incremental files, and write
 * them (flush) when asked: under the phase's lock, since every loop writes the same two
 * files. wait false: only when the lock is free at once, so a loop never stalls (its
 * sockets unread) behind another's write; returns whether it got the lock. A failed write
 * (a full disk) stops the phase: the files keep every whole row written before. */
static bool hand_rows(driver_loop *l, bool wait, bool flush)
{
    driver_shared *ph = l->ph;
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

static void publish(driver_loop *l)
{
    atomic_store_explicit(&l->fig.tokens, l->res.tokens, memory_order_relaxed);
    atomic_store_explicit(&l->fig.errors, l->res.errors, memory_order_relaxed);
    atomic_store_explicit(&l->fig.worst_gap_ns, l->worst_gap_ns, memory_order_relaxed);
    atomic_store_explicit(&l->fig.stalls, l->stalls, memory_order_relaxed);
    atomic_store_explicit(&l->fig.active, l->t.active(l->t.impl), memory_order_relaxed);
    atomic_store_explicit(&l->fig.injections_sent, l->next_inj, memory_order_relaxed);
}

/* The phase's figures, over every loop (the lead's progress lines). */
driver_progress driver_loop_figures(const driver_shared *ph, int64_t now)
{
    driver_progress p = {now - ph->t0, ph->wl->duration_ns, 0, 0, 0, 0, ph->n_plan, 0, 0,
                         ph->cfg->stall_ns > 0 ? 0 : -1, false};
    for (int i = 0; i < ph->n_loops; i++) {
        driver_loop_live *f = &ph->loops[i].fig;
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

static void lead_progress(driver_loop *l, progress_clock *pc, int64_t now)
{
    const driver_phase *cfg = l->ph->cfg;
    publish(l);
    driver_progress p = driver_loop_figures(l->ph, now);
    p.tokens_per_s = (double)(p.tokens - pc->last_tokens) * 1e9 / (double)(now - pc->last);
    cfg->progress(cfg->progress_ctx, &p);
    pc->last = now;
    pc->last_tokens = p.tokens;
    pc->next = now + pc->every;
}

void driver_loop_run(driver_loop *l)
{
    driver_shared *ph = l->ph;
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

int driver_loop_init(driver_shared *ph, int index)
{
    driver_loop *l = &ph->loops[index];
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
    l->convs = calloc(n, sizeof *l->convs);
    return l->next_k && l->current && l->retry_at && l->failures && l->convs ? 0 : -1;
}

void driver_loop_free(driver_loop *l)
{
    free(l->next_k);
    free(l->current);
    free(l->retry_at);
    free(l->failures);
    for (int s = 0; l->convs && s < l->n_users; s++)
        workload_conv_free(&l->convs[s]);
    free(l->convs);
    workload_prompt_free(&l->prompt);
    free(l->ended);
    free(l->inj_body);
    free(l->open_body);
    free(l->res.fidelity_ms);
    tokenlog_free(&l->seg);
}
