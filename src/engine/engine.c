/* engine — the loop (see engine.h for the contract).
 *
 * Threads and locks. One mutex guards the inbox (new requests), the stopping flag and the
 * outbox (events). Cancellation does not go through the inbox: the caller sets the
 * request's atomic cancel flag and bumps cancel_gen, and the engine scans its live list
 * only when cancel_gen moved, so a step costs nothing extra when nobody leaves. The flag
 * lives in the request, which stays valid until the caller has seen its final event, so
 * the engine never reads freed memory and the caller never waits for an acknowledgement.
 *
 * Events of one step are collected in a private array and appended to the outbox under the
 * lock in one memcpy; the consumer swaps the outbox with its own array (double buffering),
 * so neither side allocates in the steady state and the lock is held for a copy. */
#include "engine/engine.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/tokenlog.h"
#include "engine/kvcache.h"
#include "engine/sched_events.h"

struct engine {
    engine_config cfg;
    sched *sched;
    exec *x;
    pthread_t thread;
    bool started;

    pthread_mutex_t lock;
    pthread_cond_t wake; /* CLOCK_MONOTONIC */
    /* under lock */
    engine_req *inbox_head, *inbox_tail;
    bool stopping;
    engine_event *out;
    size_t n_out, cap_out;
    engine_event *spare; /* the consumer's array, handed over at engine_poll */
    size_t cap_spare;

    atomic_uint cancel_gen;
    atomic_uint reset_gen;     /* engine_reset_prefix_cache's asks */
    atomic_uint resets_applied;
    atomic_uint erase_gen;     /* engine_erase_slot's asks: which slots in erase_asked */
    atomic_bool *erase_asked;  /* unified layout: one per slot (NULL under paged) */
    int n_slots;
    atomic_bool is_realtime;

    /* engine thread only */
    unsigned seen_cancel_gen;
    unsigned seen_reset_gen;
    unsigned seen_erase_gen;
    engine_req *live_head, *live_tail;
    engine_event *pending; /* this step's events */
    size_t n_pending, cap_pending;
    const exec_seq **seqs;
    int32_t *tokens;
    int cap_items;
    int64_t step_index;
    int64_t idle_summary_step; /* step_index when the last idle summary went out */
    int64_t slips;
    int64_t last_flush_ns;
    bool log_dirty;
    bool failed; /* the executor failed: refuse everything with failure */
    char failure[ERR_LEN];
};

const char *engine_finish_name(engine_finish f)
{
    switch (f) {
    case ENGINE_FINISH_NONE: return "";
    case ENGINE_FINISH_LENGTH: return "length";
    case ENGINE_FINISH_STOP: return "stop";
    case ENGINE_FINISH_ABORT: return "abort";
    case ENGINE_FINISH_ERROR: return "error";
    }
    return "";
}

/* ---- live list (engine thread) ------------------------------------------------------ */

static void live_add(engine *e, engine_req *r)
{
    r->live_next = NULL;
    r->live_prev = e->live_tail;
    if (e->live_tail)
        e->live_tail->live_next = r;
    else
        e->live_head = r;
    e->live_tail = r;
}

static void live_remove(engine *e, engine_req *r)
{
    if (r->live_prev)
        r->live_prev->live_next = r->live_next;
    else
        e->live_head = r->live_next;
    if (r->live_next)
        r->live_next->live_prev = r->live_prev;
    else
        e->live_tail = r->live_prev;
    r->live_next = r->live_prev = NULL;
}

void engine_req_release(engine_req *req)
{
    buf_free(&req->tail);
    free(req->hashes);
    free(req->pending);
    req->hashes = NULL;
    req->pending = NULL;
    req->n_hashes_max = req->n_pending = 0;
}

/* Prefix caching: name the prompt's full blocks (by its token ids, or a text prompt's as the
 * server tokenized them: cache_ids) and keep the partial last block's ids so sampled tokens go on the
 * chain. Without memory the request simply shares nothing. */
static void hash_prompt(engine *e, engine_req *r)
{
    const int bs = e->cfg.sched.block_size;
    r->hashes = NULL;
    r->pending = NULL;
    r->n_hashes_max = r->n_pending = 0;
    const int32_t *ids = r->seq.prompt_ids ? r->seq.prompt_ids : r->cache_ids;
    const int n_ids = r->seq.prompt_ids ? r->seq.n_prompt_ids : r->n_cache_ids;
    if (!e->cfg.sched.prefix_caching || !ids || n_ids != r->prompt_tokens || r->max_tokens < 1)
        return;
    const int64_t most = ((int64_t)r->prompt_tokens + r->max_tokens - 1) / bs;
    if (most <= 0 || most > INT32_MAX)
        return;
    r->hashes = malloc((size_t)most * sizeof *r->hashes);
    r->pending = malloc((size_t)bs * sizeof *r->pending);
    if (!r->hashes || !r->pending) {
        engine_req_release(r);
        return;
    }
    r->n_hashes_max = (int)most;
    const int64_t n = kvcache_hash_blocks(ids, r->prompt_tokens, bs, r->hashes);
    r->n_pending = (int)(r->prompt_tokens - n * bs);
    memcpy(r->pending, ids + n * bs, (size_t)r->n_pending * sizeof *r->pending);
    r->sr.block_hashes = r->hashes;
    r->sr.n_block_hashes = (int)n;
}

/* A sampled token joins the block being filled; a full block extends the chain. */
static void hash_token(engine *e, engine_req *r, int32_t token)
{
    const int bs = e->cfg.sched.block_size;
    if (!r->hashes || r->sr.n_block_hashes >= r->n_hashes_max)
        return;
    r->pending[r->n_pending++] = token;
    if (r->n_pending < bs)
        return;
    const int n = r->sr.n_block_hashes;
    r->hashes[n] = kvcache_hash_block(n > 0 ? r->hashes[n - 1] : KVCACHE_HASH_SEED, r->pending, bs);
    r->sr.n_block_hashes = n + 1;
    r->n_pending = 0;
}

/* ---- events --------------------------------------------------------------------------- */

static engine_event *try_push_event(engine *e)
{
    if (e->n_pending == e->cap_pending) {
        size_t cap = e->cap_pending ? e->cap_pending * 2 : 256;
        engine_event *grown = realloc(e->pending, cap * sizeof *grown);
        if (!grown)
            return NULL;
        e->pending = grown;
        e->cap_pending = cap;
    }
    engine_event *ev = &e->pending[e->n_pending++];
    memset(ev, 0, sizeof *ev);
    ev->stop_index = -1;
    ev->token = -1;
    return ev;
}

/* A lost event would strand its request (no final event, no end of stream), so on
 * out-of-memory the engine waits and retries: the allocation is a few kilobytes. */
static engine_event *push_event(engine *e)
{
    engine_event *ev;
    while (!(ev = try_push_event(e))) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return ev;
}

/* The request's last event; after it the engine forgets the request. */
static void emit_final(engine *e, engine_req *r, engine_finish finish, int64_t t_ns)
{
    engine_event *ev = push_event(e);
    ev->req = r;
    ev->step = e->step_index - 1;
    ev->t_ns = t_ns;
    ev->completion_tokens = r->sr.generated;
    ev->finish = (int16_t)finish;
    engine_req_release(r);
    if (e->x->release)
        e->x->release(e->x, r->id);
}

/* Append this step's events to the outbox; wake the consumer if it had nothing. */
static void publish(engine *e)
{
    if (e->n_pending == 0)
        return;
    pthread_mutex_lock(&e->lock);
    if (e->n_out + e->n_pending > e->cap_out) {
        size_t cap = e->cap_out ? e->cap_out : 1024;
        while (cap < e->n_out + e->n_pending)
            cap *= 2;
        engine_event *grown = realloc(e->out, cap * sizeof *grown);
        if (!grown) {
            /* Keep them pending and try again after the next step. */
            pthread_mutex_unlock(&e->lock);
            return;
        }
        e->out = grown;
        e->cap_out = cap;
    }
    const bool was_empty = e->n_out == 0;
    memcpy(e->out + e->n_out, e->pending, e->n_pending * sizeof *e->pending);
    e->n_out += e->n_pending;
    pthread_mutex_unlock(&e->lock);
    e->n_pending = 0;
    if (was_empty && e->cfg.notify)
        e->cfg.notify(e->cfg.notify_arg);
}

/* ---- intake --------------------------------------------------------------------------- */

static size_t max_stop_len(const engine_req *r)
{
    size_t longest = 0;
    for (int i = 0; i < r->n_stop; i++) {
        size_t n = strlen(r->stop[i]);
        if (n > longest)
            longest = n;
    }
    return longest;
}

static void admit(engine *e, engine_req *r, int64_t now_ns)
{
    memset(&r->sr, 0, sizeof r->sr);
    r->sr.id = r->id;
    r->sr.prompt_tokens = r->prompt_tokens;
    r->sr.max_tokens = r->max_tokens;
    r->sr.min_tokens = r->seq.min_tokens;
    r->sr.user = r;
    r->finishing = ENGINE_FINISH_NONE;
    r->tail = (buf){0};
    r->max_stop_len = r->n_stop > 0 ? max_stop_len(r) : 0;
    r->error[0] = '\0';
    hash_prompt(e, r);
    if (atomic_load(&r->cancel)) {
        emit_final(e, r, ENGINE_FINISH_ABORT, now_ns);
        return;
    }
    if (e->failed) {
        snprintf(r->error, sizeof r->error, "%s", e->failure);
        emit_final(e, r, ENGINE_FINISH_ERROR, now_ns);
        return;
    }
    if (sched_add(e->sched, &r->sr, r->error) != 0) {
        emit_final(e, r, ENGINE_FINISH_ERROR, now_ns);
        return;
    }
    live_add(e, r);
}

static void apply_cancels(engine *e, int64_t now_ns)
{
    unsigned gen = atomic_load(&e->cancel_gen);
    if (gen == e->seen_cancel_gen)
        return;
    e->seen_cancel_gen = gen;
    for (engine_req *r = e->live_head; r;) {
        engine_req *next = r->live_next;
        if (atomic_load(&r->cancel)) {
            sched_abort(e->sched, &r->sr);
            live_remove(e, r);
            emit_final(e, r, ENGINE_FINISH_ABORT, now_ns);
        }
        r = next;
    }
}

static void end_all(engine *e, engine_finish finish, const char *why, int64_t now_ns)
{
    while (e->live_head) {
        engine_req *r = e->live_head;
        sched_abort(e->sched, &r->sr);
        live_remove(e, r);
        if (why)
            snprintf(r->error, sizeof r->error, "%s", why);
        emit_final(e, r, finish, now_ns);
    }
}

/* ---- one step ------------------------------------------------------------------------- */

static int reserve_items(engine *e, int n)
{
    if (n <= e->cap_items)
        return 0;
    int cap = e->cap_items ? e->cap_items : 64;
    while (cap < n)
        cap *= 2;
    const exec_seq **seqs = realloc(e->seqs, (size_t)cap * sizeof *seqs);
    if (!seqs)
        return -1;
    e->seqs = seqs;
    int32_t *tokens = realloc(e->tokens, (size_t)cap * sizeof *tokens);
    if (!tokens)
        return -1;
    e->tokens = tokens;
    e->cap_items = cap;
    return 0;
}

/* Append the token's text to the request's tail and, when search is set, look for a stop
 * string ending in it. Returns the index of the earliest-starting match, or -1; *cut gets
 * how many bytes of the token's text come before the match. The tail keeps
 * max_stop_len - 1 bytes between tokens: a match cannot start earlier and still end in the
 * new text. (Before min_tokens the tail is kept but not searched, as vLLM ignores stop
 * strings until then.) */
static int match_stop(engine_req *r, const char *text, size_t len, bool search, size_t *cut)
{
    const size_t keep = r->tail.len;
    if (buf_append(&r->tail, text, len) != 0)
        return -1; /* out of memory: stop strings stop working, the answer goes on */

    int best = -1;
    size_t best_at = 0;
    for (int i = 0; search && i < r->n_stop; i++) {
        const char *found = memmem(r->tail.data, r->tail.len, r->stop[i], strlen(r->stop[i]));
        if (found && (best < 0 || (size_t)(found - r->tail.data) < best_at)) {
            best = i;
            best_at = (size_t)(found - r->tail.data);
        }
    }
    if (best >= 0) {
        *cut = best_at > keep ? best_at - keep : 0;
        return best;
    }
    const size_t hold = r->max_stop_len > 0 ? r->max_stop_len - 1 : 0;
    if (r->tail.len > hold)
        buf_consume(&r->tail, r->tail.len - hold);
    return -1;
}

static void handle_token(engine *e, const sched_item *item, int32_t token, int64_t step,
                         int64_t t_end_ns)
{
    engine_req *r = item->req->user;
    const int64_t position = item->req->generated; /* sched_commit has not counted it yet */
    engine_event *ev = push_event(e);
    ev->req = r;
    ev->step = step;
    ev->t_ns = t_end_ns;
    ev->token = token;
    ev->completion_tokens = (int32_t)position + 1;
    hash_token(e, r, token);

    size_t len = 0;
    const char *text = e->x->token_text(e->x, token, &len);
    ev->text_len = (int32_t)len;
    const bool may_end = position + 1 >= r->seq.min_tokens;
    if (e->x->is_eos(e->x, token) && !r->seq.ignore_eos && position >= r->seq.min_tokens) {
        ev->text_len = 0;
        ev->finish = ENGINE_FINISH_STOP;
    } else if (r->n_stop > 0) {
        size_t cut = 0;
        int which = match_stop(r, text, len, may_end, &cut);
        if (which >= 0) {
            ev->text_len = (int32_t)cut;
            ev->finish = ENGINE_FINISH_STOP;
            ev->stop_index = (int16_t)which;
        }
    }
    if (ev->finish == ENGINE_FINISH_NONE && position + 1 >= r->max_tokens)
        ev->finish = ENGINE_FINISH_LENGTH;
    r->finishing = (engine_finish)ev->finish;
}

/* Both logs' rows out at least once a second (and when the engine goes idle, and at exit). */
static void flush_logs(engine *e, int64_t now_ns)
{
    if (e->cfg.step_log)
        fflush(e->cfg.step_log);
    if (e->cfg.sched_log)
        fflush(e->cfg.sched_log);
    e->last_flush_ns = now_ns;
    e->log_dirty = false;
}

/* What the step did to requests' places, before any of them can end (their memory is the
 * engine's until their final event is polled, after this step). */
static void write_sched_log(engine *e, const sched_batch *batch, int64_t step, int64_t start_ns)
{
    if (!e->cfg.sched_log)
        return;
    for (int i = 0; i < batch->n_changes; i++) {
        const sched_change *c = &batch->changes[i];
        const tokenlog_sched_event row =
            sched_events_row(c, step, start_ns, ((const engine_req *)c->req->user)->log_id);
        tokenlog_write_sched_event(e->cfg.sched_log, &row);
        e->log_dirty = true;
    }
}

static void write_step_log(engine *e, int64_t step, const engine_step_info *info)
{
    if (!e->cfg.step_log)
        return;
    tokenlog_step row = {
        .step = step,
        .t_start_ns = info->t_start_ns,
        .t_end_ns = info->t_end_ns,
        .decode_tokens = info->decode_tokens,
        .prefill_tokens = info->prefill_tokens,
        .n_requests = info->n_requests,
        .modeled_ns = info->modeled_ns,
        .late_ns = info->late_ns,
        .prefix_queries = info->prefix_queries,
        .prefix_hits = info->prefix_hits,
    };
    tokenlog_write_step(e->cfg.step_log, &row, e->cfg.sched.prefix_caching);
    e->log_dirty = true;
    if (info->t_end_ns - e->last_flush_ns >= CLOCK_NS_PER_S)
        flush_logs(e, info->t_end_ns);
}

/* Run the batch starting at start_ns; returns when the next step may start. */
static int64_t run_step(engine *e, const sched_batch *batch, int64_t start_ns)
{
    const int n = batch->n_items;
    char err[ERR_LEN] = "";
    int64_t modeled_ns = 0;
    int rc = reserve_items(e, n);
    if (rc != 0)
        snprintf(err, sizeof err, "out of memory for a batch of %d", n);
    if (rc == 0) {
        for (int i = 0; i < n; i++) {
            e->seqs[i] = &((engine_req *)batch->items[i].req->user)->seq;
            e->tokens[i] = -1;
        }
        rc = e->x->step(e->x, batch, e->seqs, start_ns, e->tokens, &modeled_ns, err);
    }
    const int64_t t_end = clock_now_ns();
    const int64_t step = e->step_index++;
    if (rc != 0) {
        /* Without an executor nothing can run: fail what is here and what comes. */
        e->failed = true;
        snprintf(e->failure, sizeof e->failure, "executor %.16s failed: %.200s", e->x->name, err);
        sched_commit(e->sched, batch);
        end_all(e, ENGINE_FINISH_ERROR, e->failure, t_end);
        publish(e);
        return t_end;
    }
    write_sched_log(e, batch, step, start_ns);

    for (int i = 0; i < n; i++)
        if (batch->items[i].samples)
            handle_token(e, &batch->items[i], e->tokens[i], step, t_end);
    sched_commit(e->sched, batch);
    for (int i = 0; i < n; i++) {
        engine_req *r = batch->items[i].req->user;
        if (r->finishing == ENGINE_FINISH_NONE)
            continue;
        /* Length was applied by sched_commit; EOS and stop strings end it here. */
        sched_finish(e->sched, &r->sr);
        if (e->x->release)
            e->x->release(e->x, r->id);
        r->finishing = ENGINE_FINISH_NONE;
        live_remove(e, r);
        engine_req_release(r);
    }

    engine_event *summary = push_event(e);
    summary->step = step;
    summary->t_ns = t_end;
    engine_step_info info = {
        .is_step = true,
        .t_start_ns = start_ns,
        .t_end_ns = t_end,
        .modeled_ns = modeled_ns,
        .late_ns = e->x->paced ? e->x->late_ns : 0,
        .decode_tokens = batch->decode_tokens,
        .prefill_tokens = batch->prefill_tokens,
        .n_requests = n,
        .running = sched_num_running(e->sched),
        .waiting = sched_num_waiting(e->sched),
        .kv_blocks_used = sched_blocks_used(e->sched),
        .kv_blocks_total = sched_blocks_total(e->sched),
        .preemptions_total = sched_num_preemptions(e->sched),
        .slips_total = e->slips,
        .prefix_queries = batch->prefix_queries,
        .prefix_hits = batch->prefix_hits,
        .prefix_queries_total = sched_prefix_queries(e->sched),
        .prefix_hits_total = sched_prefix_hits(e->sched),
        .kv_cells_occupied = sched_cells_occupied(e->sched),
    };
    summary->info = info;
    write_step_log(e, step, &info);
    publish(e);
    return e->x->paced ? start_ns + modeled_ns : t_end;
}

/* ---- the thread ----------------------------------------------------------------------- */

/* Gauges only (no step ran): sent when the engine goes idle after something changed. */
static void push_idle_summary(engine *e, int64_t now_ns)
{
    engine_event *ev = push_event(e);
    ev->step = e->step_index - 1;
    ev->t_ns = now_ns;
    ev->info = (engine_step_info){
        .is_step = false,
        .t_start_ns = now_ns,
        .t_end_ns = now_ns,
        .running = sched_num_running(e->sched),
        .waiting = sched_num_waiting(e->sched),
        .kv_blocks_used = sched_blocks_used(e->sched),
        .kv_blocks_total = sched_blocks_total(e->sched),
        .preemptions_total = sched_num_preemptions(e->sched),
        .slips_total = e->slips,
        .prefix_queries_total = sched_prefix_queries(e->sched),
        .prefix_hits_total = sched_prefix_hits(e->sched),
        .kv_cells_occupied = sched_cells_occupied(e->sched),
    };
}

static engine_req *take_inbox(engine *e, bool *stopping)
{
    pthread_mutex_lock(&e->lock);
    engine_req *head = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    *stopping = e->stopping;
    pthread_mutex_unlock(&e->lock);
    return head;
}

/* Idle: sleep until a request, a cancel or shutdown arrives (or a second passes, to flush
 * the step log). */
static void wait_for_work(engine *e)
{
    if (e->log_dirty)
        flush_logs(e, clock_now_ns());
    int64_t deadline = clock_now_ns() + CLOCK_NS_PER_S;
    struct timespec ts = {deadline / CLOCK_NS_PER_S, deadline % CLOCK_NS_PER_S};
    pthread_mutex_lock(&e->lock);
    while (!e->inbox_head && !e->stopping && atomic_load(&e->cancel_gen) == e->seen_cancel_gen &&
           atomic_load(&e->reset_gen) == e->seen_reset_gen &&
           atomic_load(&e->erase_gen) == e->seen_erase_gen) {
        if (pthread_cond_timedwait(&e->wake, &e->lock, &ts) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&e->lock);
}

/* Wake-up precision of the emulated steps. The default timer slack (50 us) delays every
 * wake-up by up to that much; 1 ns asks for the deadline itself. Under CPU contention a
 * normal thread can still wait a scheduler tick (~1 ms) for a core after its timer fired;
 * with cfg.realtime the thread asks for SCHED_FIFO (lowest RT priority), which preempts
 * ordinary threads at once. It sleeps most of the time and its work per step is bounded,
 * so it cannot starve the machine; without the privilege it stays SCHED_OTHER. */
static void tune_thread(engine *e)
{
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    if (e->cfg.realtime) {
        struct sched_param param = {.sched_priority = 1};
        atomic_store(&e->is_realtime,
                     pthread_setschedparam(pthread_self(), SCHED_FIFO, &param) == 0);
    }
}

static void *engine_main(void *arg)
{
    engine *e = arg;
    tune_thread(e);
    int64_t next_start = -1; /* scheduled start of the next step; -1 after idling */
    for (;;) {
        bool stopping;
        engine_req *arrivals = take_inbox(e, &stopping);
        const int64_t now = clock_now_ns();
        const bool arrivals_seen =
            arrivals != NULL || atomic_load(&e->cancel_gen) != e->seen_cancel_gen;
        while (arrivals) {
            engine_req *r = arrivals;
            arrivals = r->inbox_next;
            r->inbox_next = NULL;
            admit(e, r, now);
        }
        apply_cancels(e, now);
        const unsigned reset = atomic_load(&e->reset_gen);
        if (reset != e->seen_reset_gen) { /* a step boundary: no step holds a block */
            e->seen_reset_gen = reset;
            sched_reset_prefix_cache(e->sched);
            atomic_fetch_add(&e->resets_applied, 1);
        }
        const unsigned erase = atomic_load(&e->erase_gen);
        if (erase != e->seen_erase_gen) { /* the slots asked since: erased before the step */
            e->seen_erase_gen = erase;
            for (int i = 0; i < e->n_slots; i++)
                if (atomic_exchange(&e->erase_asked[i], false))
                    sched_erase_slot(e->sched, i);
        }
        if (stopping) {
            end_all(e, ENGINE_FINISH_ABORT, NULL, now);
            publish(e);
            break;
        }
        sched_batch batch;
        if (sched_next(e->sched, &batch) == 0) {
            if (e->step_index != e->idle_summary_step || arrivals_seen) {
                push_idle_summary(e, now);
                e->idle_summary_step = e->step_index;
            }
            publish(e);
            wait_for_work(e);
            next_start = -1;
            continue;
        }
        /* The step starts at the previous step's deadline, or now after idling or a slip. */
        const int64_t t = clock_now_ns();
        if (next_start < 0 || t - next_start > ENGINE_SLIP_NS) {
            if (next_start >= 0)
                e->slips++;
            next_start = t;
        }
        next_start = run_step(e, &batch, next_start);
    }
    flush_logs(e, clock_now_ns());
    return NULL;
}

/* ---- public --------------------------------------------------------------------------- */

engine *engine_create(const engine_config *cfg, char *err)
{
    engine *e = calloc(1, sizeof *e);
    if (!e) {
        if (cfg->executor)
            cfg->executor->destroy(cfg->executor);
        err_set(err, "out of memory creating the engine");
        return NULL;
    }
    e->cfg = *cfg;
    e->x = cfg->executor;
    if (!e->x) {
        free(e);
        err_set(err, "engine needs an executor");
        return NULL;
    }
    e->sched = sched_create(&cfg->sched, err);
    if (!e->sched) {
        e->x->destroy(e->x);
        free(e);
        return NULL;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&e->wake, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&e->lock, NULL);
    atomic_init(&e->cancel_gen, 0);
    atomic_init(&e->reset_gen, 0);
    atomic_init(&e->resets_applied, 0);
    atomic_init(&e->erase_gen, 0);
    if (cfg->sched.kv_layout == SCHED_KV_UNIFIED) {
        e->n_slots = cfg->sched.max_num_seqs;
        e->erase_asked = calloc((size_t)e->n_slots, sizeof *e->erase_asked);
        if (!e->erase_asked) {
            engine_free(e);
            err_set(err, "out of memory for %d KV slots", cfg->sched.max_num_seqs);
            return NULL;
        }
        for (int i = 0; i < e->n_slots; i++)
            atomic_init(&e->erase_asked[i], false);
    }
    if (cfg->step_log) {
        tokenlog_write_steps_header(cfg->step_log, cfg->sched.prefix_caching);
        fflush(cfg->step_log);
    }
    if (cfg->sched_log) {
        tokenlog_write_sched_events_header(cfg->sched_log);
        fflush(cfg->sched_log);
    }
    e->last_flush_ns = clock_now_ns();
    return e;
}

int engine_start(engine *e, char *err)
{
    /* Signals belong to the main (HTTP) thread: block them all here so SIGINT never lands
     * in the middle of an emulated step. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&e->thread, NULL, engine_main, e);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return err_set(err, "cannot start the engine thread: %s", strerror(rc));
    e->started = true;
    return 0;
}

void engine_submit(engine *e, engine_req *req)
{
    req->inbox_next = NULL;
    pthread_mutex_lock(&e->lock);
    if (e->stopping) {
        /* The thread may be gone: answer here, straight into the outbox. */
        bool was_empty = e->n_out == 0;
        bool queued = false;
        if (e->n_out == e->cap_out) {
            size_t cap = e->cap_out ? e->cap_out * 2 : 1024;
            engine_event *grown = realloc(e->out, cap * sizeof *grown);
            if (grown) {
                e->out = grown;
                e->cap_out = cap;
            }
        }
        if (e->n_out < e->cap_out) {
            engine_event *ev = &e->out[e->n_out++];
            memset(ev, 0, sizeof *ev);
            ev->req = req;
            ev->step = -1;
            ev->t_ns = clock_now_ns();
            ev->token = -1;
            ev->stop_index = -1;
            ev->finish = ENGINE_FINISH_ABORT;
            queued = true;
        }
        pthread_mutex_unlock(&e->lock);
        if (queued && was_empty && e->cfg.notify)
            e->cfg.notify(e->cfg.notify_arg);
        return;
    }
    if (e->inbox_tail)
        e->inbox_tail->inbox_next = req;
    else
        e->inbox_head = req;
    e->inbox_tail = req;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
}

void engine_cancel(engine *e, engine_req *req)
{
    atomic_store(&req->cancel, true);
    atomic_fetch_add(&e->cancel_gen, 1);
    /* Under the lock, so an idle engine checking cancel_gen cannot miss the signal. */
    pthread_mutex_lock(&e->lock);
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
}

void engine_reset_prefix_cache(engine *e)
{
    atomic_fetch_add(&e->reset_gen, 1);
    pthread_mutex_lock(&e->lock); /* as engine_cancel: an idle engine cannot miss it */
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
}

int engine_erase_slot(engine *e, int slot)
{
    if (!e->erase_asked || slot < 0 || slot >= e->n_slots)
        return -1;
    atomic_store(&e->erase_asked[slot], true);
    atomic_fetch_add(&e->erase_gen, 1);
    pthread_mutex_lock(&e->lock); /* as engine_cancel: an idle engine cannot miss it */
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    return 0;
}

int engine_slots(const engine *e)
{
    return e->n_slots;
}

unsigned engine_prefix_cache_resets(engine *e)
{
    return atomic_load(&e->resets_applied);
}

size_t engine_poll(engine *e, engine_event **events)
{
    pthread_mutex_lock(&e->lock);
    engine_event *full = e->out;
    size_t n = e->n_out, cap = e->cap_out;
    e->out = e->spare;
    e->cap_out = e->cap_spare;
    e->n_out = 0;
    e->spare = full;
    e->cap_spare = cap;
    pthread_mutex_unlock(&e->lock);
    *events = full;
    return n;
}

void engine_shutdown(engine *e)
{
    pthread_mutex_lock(&e->lock);
    e->stopping = true;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
}

void engine_free(engine *e)
{
    if (!e)
        return;
    if (e->started) {
        engine_shutdown(e);
        pthread_join(e->thread, NULL);
    }
    sched_free(e->sched);
    e->x->destroy(e->x);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->wake);
    free(e->out);
    free(e->spare);
    free(e->pending);
    free(e->seqs);
    free(e->tokens);
    free(e->erase_asked);
    free(e);
}

bool engine_is_realtime(engine *e)
{
    return atomic_load(&e->is_realtime);
}

int64_t engine_thread_cpu_ns(engine *e)
{
    if (!e->started)
        return -1;
    clockid_t id;
    if (pthread_getcpuclockid(e->thread, &id) != 0)
        return -1;
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return -1;
    return (int64_t)ts.tv_sec * CLOCK_NS_PER_S + ts.tv_nsec;
}
