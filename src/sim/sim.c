#include "sim/sim.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "engine/kvcache.h"
#include "sim/disagg.h"
#include "sim/steplog.h"
#include "sim/warm.h"

/* One simulated request; sched_req is embedded so the scheduler's pointer leads back. */
typedef struct sim_req {
    sched_req sr;
    int user; /* -1 for the injector */
    bool open; /* an open-loop request (holds a max_concurrency slot) */
    int kind; /* tokenlog_kind */
    int64_t k; /* index of this request for its user, or injection index */
    int64_t log_index; /* row in log->requests, -1 without a log */
    int64_t t_plan_ns; /* an open-loop request waits past its plan under max_concurrency */
    int64_t t_send_ns;
    int64_t t_first_ns;
    uint64_t *hashes; /* its prompt's block hashes (prefix caching, shared content), or NULL */
} sim_req;

/* The ids a request's prompt is hashed from: any vocabulary names the same segments alike
 * (the hits depend on which segments are shared, not on the ids). */
#define SIM_HASH_VOCAB 32000

typedef struct sim_ready {
    int user;
    int64_t at;
} sim_ready;

typedef struct sim_state {
    const sim_config *cfg;
    sched *sched;
    tokenlog *log;
    const tokenlog_sink *sink; /* instead of log, may be NULL */
    /* With a sink, a step's token events wait for the next step's arrivals: an injection
     * planned during the step is sent (backdated to its plan) before the events that end
     * the gaps it overlaps, as a live client would have sent it. */
    tokenlog_event *pending;
    int n_pending, cap_pending;
    sim_stats *stats;
    sim_req **reqs; /* every request ever created, for freeing */
    int64_t n_reqs, cap_reqs;
    int64_t *next_k; /* per user: index of its next request */
    const workload_plan *plan;
    sim_req **finished; /* the requests a step finished (sched_add may move its items) */
    int cap_finished;
    int64_t next_open; /* the next open-loop arrival not yet sent */
    int open_in_flight;
    cost_seq *seqs;
    int cap_seqs;
    int64_t next_id;
    workload_conv *convs;  /* per user: its conversation (turns, system prompt) */
    /* Closed users between two requests (the client's turnaround, then --think-time), in
     * the order they send again: every wait is the same, so the queue stays sorted. */
    sim_ready *ready;
    int ready_head, n_thinking;
    workload_prompt prompt; /* scratch: the prompt being built */
    int32_t *ids;           /* scratch: its ids */
    int64_t cap_ids;
} sim_state;

/* A closed user sends its next request at `at`. */
static void sim_ready_push(sim_state *st, int user, int64_t at)
{
    const int cap = st->cfg->wl.users + 1;
    st->ready[(st->ready_head + st->n_thinking) % cap] = (sim_ready){user, at};
    st->n_thinking++;
}

static sim_req *sim_new_req(sim_state *st)
{
    if (st->n_reqs == st->cap_reqs) {
        int64_t cap = st->cap_reqs ? st->cap_reqs * 2 : 1024;
        sim_req **grown = realloc(st->reqs, (size_t)cap * sizeof *grown);
        if (!grown)
            return NULL;
        st->reqs = grown;
        st->cap_reqs = cap;
    }
    sim_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    st->reqs[st->n_reqs++] = r;
    r->sr.user = r;
    r->sr.id = st->next_id++;
    r->log_index = -1;
    r->t_first_ns = -1;
    return r;
}

/* The request's row as it stands (t_end_ns: -1 while it runs). */
static void sim_row(const sim_req *r, int64_t t_end_ns, tokenlog_request *row)
{
    memset(row, 0, sizeof *row);
    row->request = r->sr.id;
    row->user = r->user;
    row->kind = r->kind;
    /* Virtual time has no network: planned, sent and arrived are one instant. */
    row->t_plan_ns = r->t_plan_ns;
    row->t_send_ns = r->t_send_ns;
    row->t_first_ns = r->t_first_ns;
    row->t_end_ns = t_end_ns;
    row->prompt_tokens_requested = r->sr.prompt_tokens;
    row->prompt_tokens = r->sr.prompt_tokens;
    row->completion_tokens = r->sr.generated;
    if (t_end_ns >= 0)
        strcpy(row->finish_reason, "length");
}

static int sim_submit(sim_state *st, sim_req *r, int64_t t_plan_ns, int64_t t_ns, char *err)
{
    r->t_plan_ns = t_plan_ns;
    r->t_send_ns = t_ns;
    if (st->log || st->sink) {
        tokenlog_request row;
        sim_row(r, -1, &row);
        if (st->log && tokenlog_add_request(st->log, &row, &r->log_index) != 0)
            return err_set(err, "out of memory for the request log");
        if (st->sink && st->sink->request(st->sink->ctx, &row, err) != 0)
            return -1;
    }
    st->stats->requests++;
    char why[ERR_LEN];
    if (sched_add(st->sched, &r->sr, why) != 0)
        return err_set(err, "request %lld refused: %s", (long long)r->sr.id, why);
    return 0;
}

/* With prefix caching, a prompt that may share content gets its block hashes, so the
 * scheduler reuses prefixes as the embedded server does for the same ids over HTTP. A unique
 * prompt shares nothing: it goes unhashed (the counters are the same, the run faster). */
static int sim_hash_prompt(sim_state *st, sim_req *r, char *err)
{
    const workload_prompt *p = &st->prompt;
    const int bs = st->cfg->sched.block_size;
    if (!st->cfg->sched.prefix_caching || !workload_prompt_shared(p) || bs <= 0 ||
        p->tokens < bs)
        return 0;
    if (p->tokens > st->cap_ids) {
        int32_t *grown = realloc(st->ids, (size_t)p->tokens * sizeof *grown);
        if (!grown)
            return err_set(err, "out of memory");
        st->ids = grown;
        st->cap_ids = p->tokens;
    }
    workload_prompt_fill(&st->cfg->wl, p, 0, st->ids, SIM_HASH_VOCAB);
    if (!(r->hashes = malloc((size_t)(p->tokens / bs) * sizeof *r->hashes)))
        return err_set(err, "out of memory");
    r->sr.block_hashes = r->hashes;
    r->sr.n_block_hashes = (int)kvcache_hash_blocks(st->ids, p->tokens, bs, r->hashes);
    return 0;
}

static int sim_start_bg(sim_state *st, int user, int64_t t_ns, char *err)
{
    sim_req *r = sim_new_req(st);
    if (!r)
        return err_set(err, "out of memory");
    workload_bg_request w;
    if (workload_conv_next(st->plan, &st->cfg->wl, &st->convs[user], user, st->next_k[user], &w,
                           &st->prompt) != 0)
        return err_set(err, "out of memory");
    if (sim_hash_prompt(st, r, err) != 0)
        return -1;
    r->user = user;
    r->kind = TOKENLOG_BG;
    r->k = st->next_k[user]++;
    r->sr.prompt_tokens = w.prompt_tokens;
    r->sr.max_tokens = w.max_tokens;
    r->sr.min_tokens = w.max_tokens; /* ignore_eos: answers run to max_tokens */
    return sim_submit(st, r, t_ns, t_ns, err);
}

/* Open-loop arrival `index` of the plan, sent at t_send_ns (its planned time, or later when it
 * waited for a slot). */
static int sim_start_open(sim_state *st, int64_t index, int64_t t_send_ns, char *err)
{
    const workload_arrival *a = &st->plan->arrivals[index];
    sim_req *r = sim_new_req(st);
    if (!r)
        return err_set(err, "out of memory");
    r->user = workload_arrival_user(&st->cfg->wl, index);
    r->kind = TOKENLOG_BG;
    r->open = true;
    r->k = index;
    if (workload_arrival_prompt(st->plan, &st->cfg->wl, index, &st->prompt) != 0)
        return err_set(err, "out of memory");
    if (sim_hash_prompt(st, r, err) != 0)
        return -1;
    r->sr.prompt_tokens = (int)st->prompt.tokens;
    r->sr.max_tokens = a->max_tokens;
    r->sr.min_tokens = a->max_tokens;
    st->open_in_flight++;
    st->stats->open_requests++;
    if (t_send_ns > a->t_ns) {
        int64_t wait = t_send_ns - a->t_ns;
        st->stats->open_waited++;
        st->stats->open_wait_total_ns += wait;
        if (wait > st->stats->open_wait_max_ns)
            st->stats->open_wait_max_ns = wait;
    }
    return sim_submit(st, r, a->t_ns, t_send_ns, err);
}

/* Send the open-loop arrivals due by t while a slot is free (max_concurrency; 0: always).
 * during_step: the arrivals that came during the step ending at t (planned before t) take
 * the slots free during it, at their own time; otherwise (after the step's requests ended)
 * an arrival planned before t waited for its slot and is sent at t. */
static int sim_admit_open(sim_state *st, int64_t t, bool during_step, char *err)
{
    const int limit = st->cfg->wl.max_concurrency;
    while (st->next_open < st->plan->n_arrivals) {
        const int64_t planned = st->plan->arrivals[st->next_open].t_ns;
        if (during_step ? planned >= t : planned > t)
            break;
        if (limit > 0 && st->open_in_flight >= limit)
            break;
        int64_t send = during_step || planned >= t ? planned : t;
        if (sim_start_open(st, st->next_open, send, err) != 0)
            return -1;
        st->next_open++;
    }
    return 0;
}

static int sim_start_inject(sim_state *st, int64_t index, int64_t t_ns, char *err)
{
    sim_req *r = sim_new_req(st);
    if (!r)
        return err_set(err, "out of memory");
    r->user = -1;
    r->kind = TOKENLOG_INJECT;
    r->k = index;
    r->sr.prompt_tokens = st->cfg->wl.prompt_tokens;
    r->sr.max_tokens = st->cfg->wl.inject_max_tokens;
    r->sr.min_tokens = st->cfg->wl.inject_max_tokens;
    return sim_submit(st, r, t_ns, t_ns, err);
}

/* Whether the scheduler admits a request of this size (sched's words in why). */
static bool admits(sched *s, int prompt_tokens, int max_tokens, char *why)
{
    sched_req probe;
    memset(&probe, 0, sizeof probe);
    probe.prompt_tokens = prompt_tokens;
    probe.max_tokens = max_tokens;
    if (sched_add(s, &probe, why) != 0)
        return false;
    sched_abort(s, &probe);
    return true;
}

int sim_check_plan(const sim_config *cfg, const workload_plan *plan, char *err)
{
    if (workload_check(&cfg->wl, err) != 0 || sim_disagg_check(&cfg->disagg, err) != 0)
        return -1;
    if (cfg->disagg.prefill > 0 && (workload_shares_prefixes(&cfg->wl) ||
                                    cfg->wl.think_time_ns > 0))
        return err_set(err, "--disaggregate does not model --system-prompt-tokens, --turns or "
                            "--think-time yet");
    sched *s = sched_create(&cfg->sched, err);
    if (!s)
        return -1;
    int rc = 0;
    char why[ERR_LEN];
    if (workload_injects(&cfg->wl) &&
        !admits(s, cfg->wl.prompt_tokens, cfg->wl.inject_max_tokens, why))
        rc = err_set(err, "the injected prompt cannot run: %s", why);
    /* The longest prompt (the token budget) and the longest prompt + answer (the context)
     * any background request can have. */
    workload_arrival longest[2];
    workload_plan_largest(plan, &cfg->wl, &longest[0], &longest[1]);
    for (int i = 0; rc == 0 && i < 2; i++) {
        const workload_arrival *a = &longest[i];
        if (a->prompt_tokens <= 0 || admits(s, a->prompt_tokens, a->max_tokens, why))
            continue;
        if (a->line > 0)
            rc = err_set(err, "trace %s:%d: a request of %d prompt + %d answer tokens cannot run: "
                              "%s",
                         cfg->wl.trace, a->line, a->prompt_tokens, a->max_tokens, why);
        else
            rc = err_set(err, "a background request cannot run (up to %d prompt + %d answer "
                              "tokens): %s",
                         a->prompt_tokens, a->max_tokens, why);
    }
    sched_free(s);
    return rc;
}

int sim_check(const sim_config *cfg, char *err)
{
    if (workload_check(&cfg->wl, err) != 0)
        return -1;
    workload_plan plan;
    if (workload_plan_build(&cfg->wl, &plan, err) != 0)
        return -1;
    int rc = sim_check_plan(cfg, &plan, err);
    workload_plan_free(&plan);
    return rc;
}

/* The last step's token events, once this step's arrivals are sent. */
static int sim_flush_events(sim_state *st, char *err)
{
    if (st->sink->events && st->n_pending > 0) {
        if (st->sink->events(st->sink->ctx, st->pending, st->n_pending, err) != 0)
            return -1;
        st->n_pending = 0;
        return 0;
    }
    for (int i = 0; i < st->n_pending; i++)
        if (st->sink->event(st->sink->ctx, &st->pending[i], err) != 0)
            return -1;
    st->n_pending = 0;
    return 0;
}

static void sim_free_state(sim_state *st)
{
    free(st->pending);
    for (int64_t i = 0; i < st->n_reqs; i++) {
        free(st->reqs[i]->hashes);
        free(st->reqs[i]);
    }
    for (int u = 0; st->convs && u < st->cfg->wl.users; u++)
        workload_conv_free(&st->convs[u]);
    free(st->convs);
    free(st->ready);
    free(st->ids);
    workload_prompt_free(&st->prompt);
    free(st->reqs);
    free(st->next_k);
    free(st->seqs);
    free(st->finished);
    if (st->sched)
        sched_free(st->sched);
}

/* The end of a step: stamp each sampled token, close finished requests and let their
 * users start the next one at once (closed loop). */
static int sim_finish_step(sim_state *st, const sched_batch *b, int64_t t_end, char *err)
{
    int n_finished = 0;
    if (b->n_items > st->cap_finished) {
        sim_req **grown = realloc(st->finished, (size_t)b->n_items * 2 * sizeof *grown);
        if (!grown)
            return err_set(err, "out of memory");
        st->finished = grown;
        st->cap_finished = b->n_items * 2;
    }
    for (int i = 0; i < b->n_items; i++) {
        const sched_item *it = &b->items[i];
        if (!it->samples)
            continue;
        sim_req *r = it->req->user;
        st->stats->token_events++;
        bool first = r->t_first_ns < 0;
        if (first)
            r->t_first_ns = t_end;
        if (st->sink) {
            tokenlog_event ev = {.t_ns = t_end, .request = r->sr.id, .user = r->user,
                                 .n_tokens = 1, .kind = r->kind};
            bool finished = r->sr.state == SCHED_FINISHED;
            tokenlog_request row;
            if (st->n_pending == st->cap_pending) {
                int cap = st->cap_pending ? st->cap_pending * 2 : 256;
                tokenlog_event *p = realloc(st->pending, (size_t)cap * sizeof *p);
                if (!p)
                    return err_set(err, "out of memory");
                st->pending = p;
                st->cap_pending = cap;
            }
            st->pending[st->n_pending++] = ev;
            if (first || finished) {
                sim_row(r, finished ? t_end : -1, &row);
                if (st->sink->request(st->sink->ctx, &row, err) != 0)
                    return -1;
            }
        }
        if (st->log) {
            tokenlog_event ev = {.t_ns = t_end, .request = r->sr.id, .user = r->user,
                                 .n_tokens = 1, .kind = r->kind};
            if (tokenlog_add_event(st->log, &ev) != 0)
                return err_set(err, "out of memory for the token log");
            tokenlog_request *row = &st->log->requests[r->log_index];
            if (row->t_first_ns < 0)
                row->t_first_ns = t_end;
            row->completion_tokens = r->sr.generated;
        }
        if (r->sr.state == SCHED_FINISHED) {
            if (st->log) {
                tokenlog_request *row = &st->log->requests[r->log_index];
                row->t_end_ns = t_end;
                strcpy(row->finish_reason, "length");
            }
            st->finished[n_finished++] = r;
        }
    }
    /* New requests only now: sched_add may move the batch's items. Arrivals during the step
     * take the slots free during it, before its requests end; then the ended requests free
     * theirs and the closed users start their next request. */
    if (sim_admit_open(st, t_end, true, err) != 0)
        return -1;
    for (int i = 0; i < n_finished; i++) {
        sim_req *r = st->finished[i];
        if (r->open) {
            st->open_in_flight--;
        } else if (r->kind == TOKENLOG_BG) {
            sim_ready_push(st, r->user,
                           t_end + st->cfg->client_turnaround_ns + st->cfg->wl.think_time_ns);
        }
    }
    return 0;
}

/* The users whose wait is over by t send their next request (at their own time); the
 * earliest still waiting, INT64_MAX when none. */
static int64_t sim_wake_users(sim_state *st, int64_t t, char *err)
{
    const int cap = st->cfg->wl.users + 1;
    while (st->n_thinking > 0) {
        const sim_ready next = st->ready[st->ready_head];
        if (next.at > t)
            return next.at;
        st->ready_head = (st->ready_head + 1) % cap;
        st->n_thinking--;
        if (sim_start_bg(st, next.user, next.at, err) != 0)
            return -1;
    }
    return INT64_MAX;
}

static int sim_run_core(const sim_config *cfg, const workload_plan *plan_in, tokenlog *log,
                        const tokenlog_sink *sink, sim_stats *stats, char *err);

/* A warm start (warm.h): the run with its t = 0 at warmup_ns, through the filter that keeps
 * what a live client would have recorded. */
static int sim_run_warm(const sim_config *cfg, const workload_plan *plan, tokenlog *log,
                        const tokenlog_sink *sink, sim_stats *stats, char *err)
{
    sim_config warm = *cfg;
    warm.warmup_ns = 0;
    warm.t0_ns = cfg->warmup_ns;
    sim_warm w;
    workload_plan shifted;
    int rc = sim_warm_begin(&w, cfg, plan, &shifted, log, sink, err);
    if (rc == 0)
        rc = sim_run_core(&warm, &shifted, NULL, &w.sink, stats, err);
    if (rc == 0)
        rc = sim_warm_end(&w, stats, err);
    sim_warm_free(&w);
    return rc;
}

static int sim_run_core(const sim_config *cfg, const workload_plan *plan_in, tokenlog *log,
                        const tokenlog_sink *sink, sim_stats *stats, char *err)
{
    sim_stats local;
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    if (sim_check_plan(cfg, plan_in, err) != 0)
        return -1;
    /* Without closed users nothing runs before t = 0: a warm start would change nothing. */
    if (cfg->warmup_ns > 0 && cfg->wl.users > 0)
        return sim_run_warm(cfg, plan_in, log, sink, stats, err);
    if (cfg->disagg.prefill > 0)
        return sim_disagg_run(cfg, plan_in, log, sink, stats, err);
    const workload_plan plan = *plan_in;

    sim_state st;
    memset(&st, 0, sizeof st);
    st.cfg = cfg;
    st.log = log;
    st.sink = sink;
    st.stats = stats;
    st.plan = plan_in;
    int64_t *inject_times = NULL;
    int rc = -1;

    st.sched = sched_create(&cfg->sched, err);
    st.next_k = calloc((size_t)cfg->wl.users + 1, sizeof *st.next_k);
    st.convs = calloc((size_t)cfg->wl.users + 1, sizeof *st.convs);
    st.ready = malloc(((size_t)cfg->wl.users + 1) * sizeof *st.ready);
    inject_times = malloc(sizeof *inject_times * WORKLOAD_MAX_INJECTIONS);
    if (!st.sched || !st.next_k || !st.convs || !st.ready || !inject_times) {
        if (st.sched)
            err_set(err, "out of memory");
        goto done;
    }
    int n_inject = workload_injection_times(&cfg->wl, inject_times, WORKLOAD_MAX_INJECTIONS);
    for (int i = 0; i < n_inject; i++)
        inject_times[i] += cfg->t0_ns; /* planned from t = 0 (a warm start's) */

    for (int u = 0; u < cfg->wl.users; u++) {
        if (sim_start_bg(&st, u, 0, err) != 0)
            goto done;
    }

    int64_t t = 0;
    int next_inject = 0;
    sched_batch batch;
    while (t < cfg->t0_ns + cfg->wl.duration_ns) {
        if (cfg->wl.until_trace_end && st.next_open >= plan.n_arrivals && st.open_in_flight == 0)
            break; /* the trace's last request has finished: the run ends with it */
        /* Closed users first: their requests were sent during the step that just ended, before
         * anything planned at its end (a warm start keeps them in send order). */
        int64_t next_wake = st.n_thinking > 0 ? sim_wake_users(&st, t, err) : INT64_MAX;
        if (next_wake < 0)
            goto done;
        while (next_inject < n_inject && inject_times[next_inject] <= t) {
            if (sim_start_inject(&st, next_inject, inject_times[next_inject], err) != 0)
                goto done;
            next_inject++;
        }
        if (sim_admit_open(&st, t, false, err) != 0)
            goto done;
        if (sink && sim_flush_events(&st, err) != 0)
            goto done;
        int n = sched_next(st.sched, &batch);
        if (n == 0) {
            /* Idle until the next arrival (nothing runs, so no arrival waits for a slot). */
            int64_t next = next_wake;
            if (next_inject < n_inject)
                next = inject_times[next_inject];
            if (st.next_open < plan.n_arrivals && plan.arrivals[st.next_open].t_ns < next)
                next = plan.arrivals[st.next_open].t_ns;
            if (next == INT64_MAX || next <= t)
                break; /* nothing running and nothing to come */
            t = next;
            continue;
        }
        if (n > st.cap_seqs) {
            int cap = n * 2;
            cost_seq *grown = realloc(st.seqs, (size_t)cap * sizeof *grown);
            if (!grown) {
                err_set(err, "out of memory");
                goto done;
            }
            st.seqs = grown;
            st.cap_seqs = cap;
        }
        for (int i = 0; i < n; i++)
            st.seqs[i] = (cost_seq){.new_tokens = batch.items[i].new_tokens,
                                    .context = batch.items[i].context,
                                    .samples = batch.items[i].samples};
        int64_t duration =
            cost_step_cells_ns(&cfg->cost, st.seqs, n, batch.occupied_cells, NULL);
        if (duration < 1)
            duration = 1; /* time must move */
        int64_t t_end = t + duration;
        sched_commit(st.sched, &batch);
        if (log || sink) {
            tokenlog_step step = {.step = stats->steps, .t_start_ns = t, .t_end_ns = t_end,
                                  .decode_tokens = batch.decode_tokens,
                                  .prefill_tokens = batch.prefill_tokens, .n_requests = n,
                                  .modeled_ns = duration,
                                  .prefix_queries = batch.prefix_queries,
                                  .prefix_hits = batch.prefix_hits};
            if (sim_steplog_add(log, sink, &step, &batch, err) != 0)
                goto done;
        }
        stats->steps++;
        if (sim_finish_step(&st, &batch, t_end, err) != 0)
            goto done;
        t = t_end;
    }
    stats->virtual_ns = t;
    stats->preemptions = sched_num_preemptions(st.sched);
    if (sink && sim_flush_events(&st, err) != 0)
        goto done;
    /* The rows of the requests still running: their tokens so far, as a log would hold. */
    for (int64_t i = 0; sink && i < st.n_reqs; i++) {
        const sim_req *r = st.reqs[i];
        tokenlog_request row;
        if (r->sr.state == SCHED_FINISHED || r->t_first_ns < 0)
            continue;
        sim_row(r, -1, &row);
        if (sink->request(sink->ctx, &row, err) != 0)
            goto done;
    }
    rc = 0;
done:
    free(inject_times);
    sim_free_state(&st);
    return rc;
}

/* cfg->wl's plan built here. */
static int sim_run_to(const sim_config *cfg, tokenlog *log, const tokenlog_sink *sink,
                      sim_stats *stats, char *err)
{
    if (workload_check(&cfg->wl, err) != 0)
        return -1;
    workload_plan plan;
    if (workload_plan_build(&cfg->wl, &plan, err) != 0)
        return -1;
    int rc = sim_run_core(cfg, &plan, log, sink, stats, err);
    workload_plan_free(&plan);
    return rc;
}

int sim_run(const sim_config *cfg, tokenlog *log, sim_stats *stats, char *err)
{
    return sim_run_to(cfg, log, NULL, stats, err);
}

int sim_run_plan(const sim_config *cfg, const workload_plan *plan, tokenlog *log,
                 sim_stats *stats, char *err)
{
    return sim_run_core(cfg, plan, log, NULL, stats, err);
}

int sim_run_sink(const sim_config *cfg, const tokenlog_sink *sink, sim_stats *stats, char *err)
{
    return sim_run_to(cfg, NULL, sink, stats, err);
}

int sim_run_plan_sink(const sim_config *cfg, const workload_plan *plan, const tokenlog_sink *sink,
                      sim_stats *stats, char *err)
{
    return sim_run_core(cfg, plan, NULL, sink, stats, err);
}
