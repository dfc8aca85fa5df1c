/* sched — the continuous-batching scheduler (see sched.h for the policy rules).
 *
 * Data: two intrusive doubly-linked lists through sched_req.next/prev. A live request is
 * on exactly one of them, and its state says which: WAITING on `waiting` (FCFS, preempted
 * requests pushed to the front), PREFILLING/DECODING on `running` (admission order, so the
 * tail is the most recently admitted request, the preemption victim). KV blocks are only
 * counted: nothing downstream needs block ids, and a counter keeps a step O(batch).
 *
 * Cost per step: one pass over the running list for decodes, a second one only when some
 * running request is mid-prefill, and the waiting queue up to the first request that does
 * not fit. sched_commit is one pass over the items. The items array is sized in sched_add
 * (which can report an allocation failure), so sched_next never allocates.
 *
 * Clarifications of the contract, decided here:
 *  - A step that preempted admits nobody from the waiting queue (vLLM V1 does the same):
 *    blocks are short, and a victim re-admitted at once would only thrash.
 *  - Under mixed and prefill-first a prompt longer than the budget is refused at sched_add,
 *    but a preempted request recomputes prompt + generated tokens, which can exceed the
 *    budget. Such a request could never be admitted whole and would block the queue
 *    forever, so it is recomputed in chunks (min(remaining, budget left)) and continues
 *    like a chunked prefill until it samples.
 *  - sched_add refuses a request whose longest possible KV footprint
 *    (prompt + max_tokens - 1 tokens: the last sampled token is never fed back) exceeds the
 *    whole cache: it would preempt itself forever once alone.
 *  - sched_commit skips items whose request was finished or aborted after sched_next (the
 *    engine may end a request while its step runs); the memory must stay valid until then.
 *  - Every sched_next must be followed by sched_commit of that batch before the next one.
 *  - The changes (sched_batch.changes): each request's `absence` says why it is out of the
 *    steps. add_item brings it back (RESUMED after PREEMPTED, REJOINED after LEFT_OUT);
 *    preempt() takes it out; at the end of sched_next the running requests with a token
 *    that got no item are LEFT_OUT (one pass over the running list, which the decodes walk
 *    anyway), and so are the prefilled requests that wait for a seat past their first step
 *    (UNSEATED until then, counted, so the waiting queue is walked only while some are).
 */
#include "engine/sched.h"

#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "engine/kvcache.h"
#include "engine/kvslots.h"

typedef struct req_list {
    sched_req *head, *tail;
    int count;
} req_list;

struct sched {
    sched_config cfg;
    req_list waiting; /* FCFS; preempted requests at the front */
    req_list running; /* admission order; tail = most recently admitted */
    int n_prefilling; /* running requests in SCHED_PREFILLING, to skip the continuation pass */
    int64_t blocks_free;
    int64_t next_order;
    int64_t n_preemptions;
    kvcache *cache;    /* prefix_caching only, else NULL */
    kvslots *slots;    /* the unified layout only, else NULL */
    int64_t prefix_queries, prefix_hits;
    sched_item *items; /* the batch's items, reused every step */
    int items_capacity;
    sched_change *changes; /* the batch's changes, reused every step: one per live request */
    int64_t changes_capacity;
    int64_t n_steps;       /* sched_next calls so far: the step being built is n_steps */
    int n_unseated;        /* prefilled requests waiting, not yet in a step nor LEFT_OUT */
};

/* sched_req.absence: why a live request is out of the steps. */
enum {
    PRESENT = 0,
    ABSENT_PREEMPTED, /* preempted, not re-admitted yet */
    ABSENT_LEFT_OUT,  /* left out (announced), not carried since */
    ABSENT_UNSEATED,  /* prefilled, waiting, in no step yet and not announced */
};

/* ---- small helpers ---------------------------------------------------------------- */

static void list_push_back(req_list *list, sched_req *req)
{
    req->next = NULL;
    req->prev = list->tail;
    if (list->tail)
        list->tail->next = req;
    else
        list->head = req;
    list->tail = req;
    list->count++;
}

static void list_push_front(req_list *list, sched_req *req)
{
    req->prev = NULL;
    req->next = list->head;
    if (list->head)
        list->head->prev = req;
    else
        list->tail = req;
    list->head = req;
    list->count++;
}

static void list_remove(req_list *list, sched_req *req)
{
    if (req->prev)
        req->prev->next = req->next;
    else
        list->head = req->next;
    if (req->next)
        req->next->prev = req->prev;
    else
        list->tail = req->prev;
    req->next = req->prev = NULL;
    list->count--;
}

static int64_t blocks_for_tokens(const sched *s, int64_t tokens)
{
    return (tokens + s->cfg.block_size - 1) / s->cfg.block_size;
}

/* Prompt plus everything sampled so far: what a request has to have in KV to sample next. */
static int known_tokens(const sched_req *req)
{
    return req->prompt_tokens + req->generated;
}

static bool is_running_state(sched_state state)
{
    return state == SCHED_PREFILLING || state == SCHED_DECODING;
}

/* Blocks a request may take: the free ones and the cached ones nobody uses (evicted when
 * taken). */
static int64_t blocks_available(const sched *s)
{
    return s->blocks_free + (s->cache ? kvcache_evictable(s->cache) : 0);
}

/* Take n blocks for a request, evicting cached ones least recently released first when the
 * free ones run short. The caller checked blocks_available. */
static void take_blocks(sched *s, int64_t n)
{
    while (s->blocks_free < n && s->cache && kvcache_evict(s->cache))
        s->blocks_free++;
    s->blocks_free -= n;
}

/* Its own blocks go back to the pool; its cached ones stay cached, deepest first in the
 * eviction order. */
static void release_blocks(sched *s, sched_req *req)
{
    for (int i = req->n_shared - 1; i >= 0; i--)
        kvcache_unref(s->cache, req->block_hashes[i]);
    s->blocks_free += req->n_blocks - req->n_shared;
    req->n_blocks = 0;
    req->n_shared = 0;
}

/* The prompt's blocks the request may look up: whole blocks of its hash chain, one token
 * short of what it has to compute (its first step feeds at least one token). */
static int64_t lookup_blocks(const sched *s, const sched_req *req)
{
    if (!s->cache || !req->block_hashes)
        return 0;
    const int64_t most = (known_tokens(req) - 1) / s->cfg.block_size;
    return req->n_block_hashes < most ? req->n_block_hashes : most;
}

/* Its computed full prompt blocks become cache entries (or references to equal ones). */
static void cache_computed_blocks(sched *s, sched_req *req)
{
    if (!s->cache || !req->block_hashes)
        return;
    int64_t full = req->computed / s->cfg.block_size;
    if (full > req->n_block_hashes)
        full = req->n_block_hashes;
    while (req->n_shared < full) {
        const kvcache_put put = kvcache_insert(s->cache, req->block_hashes[req->n_shared]);
        if (put == KVCACHE_PRIVATE)
            return;
        if (put == KVCACHE_SHARED)
            s->blocks_free++; /* its own copy of the block is not needed */
        req->n_shared++;
    }
}

/* Unified layout: a request leaving the running set gives its slot back, the slot keeping
 * `cells` of its KV (0 when the KV was dropped) and the hashes of the full blocks among
 * them. */
static void release_slot(sched *s, sched_req *req, int64_t cells)
{
    if (!s->slots || req->slot < 0)
        return;
    int64_t n_hashes = cells / s->cfg.block_size;
    if (n_hashes > req->n_block_hashes)
        n_hashes = req->n_block_hashes;
    kvslots_release(s->slots, req->slot, cells, req->block_hashes, (int)n_hashes);
    req->slot = -1;
}

/* Take a live request out of whichever queue holds it, free its blocks, set `final`. */
static void leave(sched *s, sched_req *req, sched_state final)
{
    if (is_running_state(req->state) || req->state == SCHED_WAITING) {
        s->n_unseated -= req->absence == ABSENT_UNSEATED;
        req->absence = PRESENT;
    }
    if (req->state == SCHED_WAITING) {
        list_remove(&s->waiting, req);
    } else if (is_running_state(req->state)) {
        if (req->state == SCHED_PREFILLING)
            s->n_prefilling--;
        list_remove(&s->running, req);
        release_blocks(s, req);
        release_slot(s, req, req->computed); /* its cells stay until the slot is reused */
    } else {
        return; /* already FINISHED or ABORTED: nothing to undo */
    }
    req->state = final;
}

/* ---- config, lifetime --------------------------------------------------------------- */

int sched_config_check(const sched_config *cfg, char *err)
{
    if (!cfg)
        return err_set(err, "scheduler config missing");
    if (cfg->policy != SCHED_MIXED && cfg->policy != SCHED_CHUNKED &&
        cfg->policy != SCHED_PREFILL_FIRST)
        return err_set(err, "unknown scheduler policy %d", (int)cfg->policy);
    if (cfg->max_num_batched_tokens <= 0)
        return err_set(err, "max_num_batched_tokens must be positive (got %d)",
                       cfg->max_num_batched_tokens);
    if (cfg->max_num_seqs <= 0)
        return err_set(err, "max_num_seqs must be positive (got %d)", cfg->max_num_seqs);
    if (cfg->max_model_len <= 0)
        return err_set(err, "max_model_len must be positive (got %d)", cfg->max_model_len);
    if (cfg->block_size <= 0)
        return err_set(err, "block_size must be positive (got %d)", cfg->block_size);
    if (cfg->kv_blocks <= 0)
        return err_set(err, "kv_blocks must be positive (got %lld)", (long long)cfg->kv_blocks);
    if (cfg->kv_layout != SCHED_KV_PAGED && cfg->kv_layout != SCHED_KV_UNIFIED)
        return err_set(err, "unknown KV layout %d", (int)cfg->kv_layout);
    return 0;
}

/* Room for every item a step can hold: one per running request, and the running set is at
 * most min(live requests, max_num_seqs). Growing geometrically keeps sched_add amortised
 * O(1) and sched_next free of allocation. */
static int reserve_items(sched *s, int needed, char *err)
{
    if (needed <= s->items_capacity)
        return 0;
    int capacity = s->items_capacity > 0 ? s->items_capacity : 16;
    while (capacity < needed)
        capacity = capacity > s->cfg.max_num_seqs / 2 ? s->cfg.max_num_seqs : capacity * 2;
    sched_item *items = realloc(s->items, (size_t)capacity * sizeof *items);
    if (!items)
        return err_set(err, "out of memory growing the batch to %d items", capacity);
    s->items = items;
    s->items_capacity = capacity;
    return 0;
}

/* Room for one change per live request (a step changes each at most once). */
static int reserve_changes(sched *s, int needed, char *err)
{
    if (buf_grow_items((void **)&s->changes, &s->changes_capacity, needed, sizeof *s->changes))
        return err_set(err, "out of memory for the changes of %d requests", needed);
    return 0;
}

sched *sched_create(const sched_config *cfg, char *err)
{
    if (sched_config_check(cfg, err) != 0)
        return NULL;
    sched *s = calloc(1, sizeof *s);
    if (!s) {
        err_set(err, "out of memory creating the scheduler");
        return NULL;
    }
    s->cfg = *cfg;
    s->blocks_free = cfg->kv_blocks;
    if ((cfg->prefix_caching && !(s->cache = kvcache_create(cfg->kv_blocks, err))) ||
        (cfg->kv_layout == SCHED_KV_UNIFIED &&
         !(s->slots = kvslots_create(cfg->max_num_seqs, err))) ||
        reserve_items(s, cfg->max_num_seqs < 16 ? cfg->max_num_seqs : 16, err) != 0) {
        sched_free(s);
        return NULL;
    }
    return s;
}

void sched_free(sched *s)
{
    if (!s)
        return;
    kvcache_free(s->cache);
    kvslots_free(s->slots);
    free(s->items);
    free(s->changes);
    free(s);
}

/* ---- arrivals and departures ---------------------------------------------------------- */

static int add_request(sched *s, sched_req *req, bool prefilled, char *err)
{
    const sched_config *cfg = &s->cfg;
    const char *policy = sched_policy_name(cfg->policy);
    if (req->prompt_tokens <= 0)
        return err_set(err, "request %lld: prompt must have at least one token (got %d)",
                       (long long)req->id, req->prompt_tokens);
    if (req->max_tokens <= 0)
        return err_set(err, "request %lld: max_tokens must be at least 1 (got %d)",
                       (long long)req->id, req->max_tokens);
    if (req->prompt_tokens > cfg->max_model_len)
        return err_set(err, "request %lld: prompt of %d tokens exceeds max_model_len=%d",
                       (long long)req->id, req->prompt_tokens, cfg->max_model_len);
    if ((int64_t)req->prompt_tokens + req->max_tokens > cfg->max_model_len)
        return err_set(err,
                       "request %lld: prompt (%d tokens) + max_tokens (%d) = %lld exceeds "
                       "max_model_len=%d; lower max_tokens",
                       (long long)req->id, req->prompt_tokens, req->max_tokens,
                       (long long)req->prompt_tokens + req->max_tokens, cfg->max_model_len);
    if (prefilled && req->max_tokens < 2)
        return err_set(err, "request %lld: a prefilled request needs max_tokens >= 2 (got %d)",
                       (long long)req->id, req->max_tokens);
    if (!prefilled && cfg->policy != SCHED_CHUNKED &&
        req->prompt_tokens > cfg->max_num_batched_tokens)
        return err_set(err,
                       "request %lld: prompt of %d tokens exceeds the token budget "
                       "max_num_batched_tokens=%d under policy %s; use --policy chunked or "
                       "raise it",
                       (long long)req->id, req->prompt_tokens, cfg->max_num_batched_tokens,
                       policy);
    /* The last sampled token is never fed back, so KV holds at most this many tokens. */
    const int64_t max_kv_tokens = (int64_t)req->prompt_tokens + req->max_tokens - 1;
    const int64_t max_blocks = blocks_for_tokens(s, max_kv_tokens);
    if (max_blocks > cfg->kv_blocks)
        return err_set(err,
                       "request %lld: prompt (%d tokens) + max_tokens (%d) needs %lld KV blocks "
                       "but the whole cache has %lld",
                       (long long)req->id, req->prompt_tokens, req->max_tokens,
                       (long long)max_blocks, (long long)cfg->kv_blocks);
    const int live_after = s->waiting.count + s->running.count + 1;
    const int running_bound = live_after < cfg->max_num_seqs ? live_after : cfg->max_num_seqs;
    if (reserve_items(s, running_bound, err) != 0 || reserve_changes(s, live_after, err) != 0)
        return -1;

    req->state = SCHED_WAITING;
    req->generated = prefilled ? 1 : 0;
    req->computed = prefilled ? req->prompt_tokens : 0;
    req->n_blocks = 0;
    req->n_shared = 0;
    req->cached_tokens = 0;
    req->cache_counted = false;
    req->slot = -1;
    req->n_preemptions = 0;
    if (req->n_block_hashes < 0 || !req->block_hashes)
        req->n_block_hashes = 0;
    if (req->n_block_hashes > max_kv_tokens / cfg->block_size)
        req->n_block_hashes = (int)(max_kv_tokens / cfg->block_size);
    req->order = s->next_order++;
    req->carried_in = -1;
    req->absence = prefilled ? ABSENT_UNSEATED : PRESENT;
    s->n_unseated += prefilled;
    list_push_back(&s->waiting, req);
    return 0;
}

int sched_add(sched *s, sched_req *req, char *err)
{
    return add_request(s, req, false, err);
}

int sched_add_prefilled(sched *s, sched_req *req, char *err)
{
    return add_request(s, req, true, err);
}

void sched_finish(sched *s, sched_req *req)
{
    leave(s, req, SCHED_FINISHED);
}

void sched_abort(sched *s, sched_req *req)
{
    leave(s, req, SCHED_ABORTED);
}

/* ---- building a step ---------------------------------------------------------------- */

typedef struct step_builder {
    sched *s;
    sched_batch *batch;
    int budget_left;
} step_builder;

static void add_change(step_builder *b, sched_req *req, sched_change_kind kind)
{
    b->s->changes[b->batch->n_changes++] = (sched_change){req, kind};
}

/* The request is in this step: back from its absence, if it had one. */
static void add_item(step_builder *b, sched_req *req, int new_tokens)
{
    if (req->absence == ABSENT_PREEMPTED)
        add_change(b, req, SCHED_CHANGE_RESUMED);
    else if (req->absence == ABSENT_LEFT_OUT)
        add_change(b, req, SCHED_CHANGE_REJOINED);
    b->s->n_unseated -= req->absence == ABSENT_UNSEATED;
    req->absence = PRESENT;
    req->carried_in = b->s->n_steps;
    sched_item *item = &b->batch->items[b->batch->n_items++];
    item->req = req;
    item->new_tokens = new_tokens;
    item->context = req->computed;
    item->samples = req->computed + new_tokens == known_tokens(req);
    b->budget_left -= new_tokens;
}

/* Recompute preemption: the victim loses its KV and goes back to the front of the waiting
 * queue. With the policies as they are the victim never has an item yet: decodes walk the
 * running list head to tail and the victim is the tail, and a partial prefill always takes
 * the whole budget left, so it is the newest running request and its own victim. Should
 * that change (a decode scheduled before a chunk that needs its blocks), the item is
 * withdrawn and its tokens return to the budget rather than running a request with no KV.
 * The scan only runs on a preemption. */
static void preempt(step_builder *b, sched_req *victim)
{
    sched *s = b->s;
    sched_batch *batch = b->batch;
    for (int i = batch->n_items - 1; i >= 0; i--) {
        if (batch->items[i].req != victim)
            continue;
        b->budget_left += batch->items[i].new_tokens;
        memmove(&batch->items[i], &batch->items[i + 1],
                (size_t)(batch->n_items - i - 1) * sizeof batch->items[0]);
        batch->n_items--;
        /* Its item may have announced a return (REJOINED): one change per request. */
        if (batch->n_changes > 0 && s->changes[batch->n_changes - 1].req == victim)
            batch->n_changes--;
        break;
    }
    if (victim->state == SCHED_PREFILLING)
        s->n_prefilling--;
    list_remove(&s->running, victim);
    release_blocks(s, victim);
    release_slot(s, victim, 0); /* recompute: its KV is gone */
    victim->computed = 0;
    victim->state = SCHED_WAITING;
    victim->n_preemptions++;
    list_push_front(&s->waiting, victim);
    s->n_preemptions++;
    batch->n_preempted++;
    victim->absence = ABSENT_PREEMPTED;
    add_change(b, victim, SCHED_CHANGE_PREEMPTED);
}

/* Give a running request the blocks for `tokens_after` tokens in KV, preempting the most
 * recently admitted running requests until they fit. False when the request itself was
 * the victim (it is then WAITING and skipped this step). Always terminates: a request's
 * largest footprint fits the whole cache (checked in sched_add), so once it is alone its
 * blocks are free. */
static bool grow_running(step_builder *b, sched_req *req, int64_t tokens_after)
{
    sched *s = b->s;
    const int64_t needed = blocks_for_tokens(s, tokens_after) - req->n_blocks;
    if (needed <= 0)
        return true;
    while (blocks_available(s) < needed) {
        sched_req *victim = s->running.tail;
        preempt(b, victim);
        if (victim == req)
            return false;
    }
    take_blocks(s, needed);
    req->n_blocks += needed;
    return true;
}

/* Decodes first, one token each, in admission order. Victims of a preemption are always at
 * or after the request being served (the tail), so the walk stays valid: when the request
 * itself was preempted it was the tail and the walk is over. */
static void schedule_decodes(step_builder *b)
{
    for (sched_req *req = b->s->running.head; req;) {
        if (b->budget_left <= 0)
            return;
        if (req->state != SCHED_DECODING) {
            req = req->next;
            continue;
        }
        if (!grow_running(b, req, (int64_t)req->computed + 1))
            return;
        add_item(b, req, 1);
        req = req->next;
    }
}

/* Running requests mid-prefill continue with min(remaining, budget left). */
static void schedule_continuations(step_builder *b)
{
    if (b->s->n_prefilling == 0)
        return;
    for (sched_req *req = b->s->running.head; req;) {
        if (b->budget_left <= 0)
            return;
        if (req->state != SCHED_PREFILLING) {
            req = req->next;
            continue;
        }
        const int remaining = known_tokens(req) - req->computed;
        const int chunk = remaining < b->budget_left ? remaining : b->budget_left;
        if (!grow_running(b, req, (int64_t)req->computed + chunk))
            return;
        add_item(b, req, chunk);
        req = req->next;
    }
}

/* How many tokens a waiting request would feed if admitted with `budget_left` from
 * `computed` tokens in KV; 0 when it does not fit under the policy. */
static int admission_chunk(const sched *s, const sched_req *req, int computed, int budget_left)
{
    if (budget_left <= 0)
        return 0;
    const int remaining = known_tokens(req) - computed;
    if (s->cfg.policy == SCHED_CHUNKED)
        return remaining < budget_left ? remaining : budget_left;
    if (remaining <= budget_left)
        return remaining;
    /* Only a preempted request's recompute can exceed the whole budget; chunk it, or it
     * would block the queue forever (see the top of this file). */
    if (remaining > s->cfg.max_num_batched_tokens)
        return budget_left;
    return 0;
}

/* What admitting the head would take: its cached prefix blocks (`hits`, tokens computed
 * already), the tokens it feeds, and the blocks it needs besides the cached ones. */
typedef struct admission {
    int64_t hits;
    int computed;
    int chunk;
    int64_t new_blocks;
} admission;

static bool head_admission(const sched *s, int budget_left, admission *a)
{
    const sched_req *head = s->waiting.head;
    if (!head || s->running.count >= s->cfg.max_num_seqs)
        return false;
    /* Only a prefilled request (sched_add_prefilled) waits with KV; it looks nothing up. */
    a->hits = head->computed > 0 ? 0
                                 : kvcache_match(s->cache, head->block_hashes,
                                                 lookup_blocks(s, head));
    a->computed = head->computed > 0 ? head->computed : (int)(a->hits * s->cfg.block_size);
    a->chunk = admission_chunk(s, head, a->computed, budget_left);
    a->new_blocks = blocks_for_tokens(s, (int64_t)a->computed + a->chunk) - a->hits;
    /* Cached blocks it takes nobody used are no longer evictable once it holds them. */
    const int64_t taken = a->hits ? kvcache_unreferenced(s->cache, head->block_hashes, a->hits)
                                  : 0;
    return a->chunk > 0 && a->new_blocks <= blocks_available(s) - taken;
}

static bool head_admissible(const sched *s, int budget_left)
{
    admission a;
    return head_admission(s, budget_left, &a);
}

/* Waiting requests FCFS: the first one that does not fit (budget, blocks, seats) stops
 * admission, so nobody overtakes the head and nobody starves. Admission never preempts. */
static void schedule_waiting(step_builder *b)
{
    sched *s = b->s;
    admission a;
    while (head_admission(s, b->budget_left, &a)) {
        sched_req *req = s->waiting.head;
        list_remove(&s->waiting, req);
        list_push_back(&s->running, req);
        if (req->computed > 0) {
            req->state = SCHED_DECODING;
        } else {
            req->state = SCHED_PREFILLING;
            s->n_prefilling++;
        }
        for (int64_t i = 0; i < a.hits; i++)
            kvcache_ref(s->cache, req->block_hashes[i]);
        if (s->cache && !req->cache_counted) {
            req->cache_counted = true;
            req->cached_tokens = a.computed;
            s->prefix_queries += req->prompt_tokens;
            s->prefix_hits += a.computed;
            b->batch->prefix_queries += req->prompt_tokens;
            b->batch->prefix_hits += a.computed;
        }
        take_blocks(s, a.new_blocks);
        if (s->slots) /* a seat is free (head_admission), so is a slot */
            req->slot = kvslots_take(s->slots, req->block_hashes, req->n_block_hashes);
        req->computed = a.computed;
        req->n_shared = (int)a.hits;
        req->n_blocks = a.hits + a.new_blocks;
        add_item(b, req, a.chunk);
    }
}

/* The requests with a token that this step leaves out: running ones without an item, and
 * prefilled ones still waiting for their first seat. */
static void note_left_out(step_builder *b)
{
    sched *s = b->s;
    for (sched_req *req = s->running.head; req; req = req->next) {
        if (req->carried_in == s->n_steps || req->generated == 0 || req->absence != PRESENT)
            continue;
        req->absence = ABSENT_LEFT_OUT;
        add_change(b, req, SCHED_CHANGE_LEFT_OUT);
    }
    for (sched_req *req = s->waiting.head; req && s->n_unseated > 0; req = req->next) {
        if (req->absence != ABSENT_UNSEATED)
            continue;
        s->n_unseated--;
        req->absence = ABSENT_LEFT_OUT;
        add_change(b, req, SCHED_CHANGE_LEFT_OUT);
    }
}

int sched_next(sched *s, sched_batch *batch)
{
    memset(batch, 0, sizeof *batch);
    batch->items = s->items;
    step_builder builder = {s, batch, s->cfg.max_num_batched_tokens};

    if (s->cfg.policy == SCHED_PREFILL_FIRST) {
        const bool prefill_step =
            s->n_prefilling > 0 || head_admissible(s, s->cfg.max_num_batched_tokens);
        if (prefill_step) {
            schedule_continuations(&builder);
            if (batch->n_preempted == 0)
                schedule_waiting(&builder);
        }
        /* A prefill step comes out empty when its only candidate, a chunked recompute,
         * had to preempt itself; an empty step would read as "idle" to the engine while
         * requests wait, so the running decodes go instead. */
        if (batch->n_items == 0)
            schedule_decodes(&builder);
    } else {
        schedule_decodes(&builder);
        schedule_continuations(&builder);
        if (batch->n_preempted == 0)
            schedule_waiting(&builder);
    }

    for (int i = 0; i < batch->n_items; i++) {
        const sched_item *item = &batch->items[i];
        if (item->req->state == SCHED_DECODING && item->new_tokens == 1)
            batch->decode_tokens += 1;
        else
            batch->prefill_tokens += item->new_tokens;
    }
    if (batch->n_items > 0) {
        batch->occupied_cells = sched_cells_occupied(s);
        note_left_out(&builder);
    }
    batch->changes = s->changes;
    s->n_steps++;
    return batch->n_items;
}

void sched_commit(sched *s, const sched_batch *batch)
{
    for (int i = 0; i < batch->n_items; i++) {
        const sched_item *item = &batch->items[i];
        sched_req *req = item->req;
        if (!is_running_state(req->state))
            continue; /* finished or aborted while the step ran */
        req->computed += item->new_tokens;
        cache_computed_blocks(s, req);
        if (!item->samples)
            continue;
        req->generated++;
        if (req->state == SCHED_PREFILLING) {
            req->state = SCHED_DECODING;
            s->n_prefilling--;
        }
        if (req->generated >= req->max_tokens)
            leave(s, req, SCHED_FINISHED);
    }
}

/* ---- queries -------------------------------------------------------------------------- */

int sched_num_running(const sched *s)
{
    return s->running.count;
}

int sched_num_waiting(const sched *s)
{
    return s->waiting.count;
}

int64_t sched_blocks_used(const sched *s)
{
    return s->cfg.kv_blocks - blocks_available(s);
}

int64_t sched_blocks_cached(const sched *s)
{
    return s->cache ? kvcache_evictable(s->cache) : 0;
}

int64_t sched_prefix_queries(const sched *s)
{
    return s->prefix_queries;
}

int64_t sched_prefix_hits(const sched *s)
{
    return s->prefix_hits;
}

int64_t sched_reset_prefix_cache(sched *s)
{
    if (!s->cache)
        return 0;
    const int64_t n = kvcache_evict_all(s->cache);
    s->blocks_free += n;
    return n;
}

int64_t sched_blocks_total(const sched *s)
{
    return s->cfg.kv_blocks;
}

int64_t sched_num_preemptions(const sched *s)
{
    return s->n_preemptions;
}

const sched_config *sched_get_config(const sched *s)
{
    return &s->cfg;
}

int64_t sched_erase_slot(sched *s, int slot)
{
    return s->slots ? kvslots_erase(s->slots, slot) : -1;
}

int64_t sched_cells_occupied(const sched *s)
{
    if (!s->slots)
        return 0;
    int64_t cells = kvslots_retained_cells(s->slots);
    for (const sched_req *req = s->running.head; req; req = req->next)
        cells += req->computed;
    return cells;
}

int sched_policy_parse(const char *text, sched_policy *out, char *err)
{
    static const sched_policy policies[] = {SCHED_MIXED, SCHED_CHUNKED, SCHED_PREFILL_FIRST};
    for (size_t i = 0; text && i < sizeof policies / sizeof policies[0]; i++) {
        if (strcmp(text, sched_policy_name(policies[i])) == 0) {
            *out = policies[i];
            return 0;
        }
    }
    return err_set(err, "unknown policy '%s' (expected mixed, chunked or prefill-first)",
                   text ? text : "");
}

const char *sched_policy_name(sched_policy p)
{
    switch (p) {
    case SCHED_MIXED: return "mixed";
    case SCHED_CHUNKED: return "chunked";
    case SCHED_PREFILL_FIRST: return "prefill-first";
    }
    return "unknown";
}

int sched_kv_layout_parse(const char *text, sched_kv_layout *out, char *err)
{
    static const sched_kv_layout layouts[] = {SCHED_KV_PAGED, SCHED_KV_UNIFIED};
    for (size_t i = 0; text && i < sizeof layouts / sizeof layouts[0]; i++) {
        if (strcmp(text, sched_kv_layout_name(layouts[i])) == 0) {
            *out = layouts[i];
            return 0;
        }
    }
    return err_set(err, "unknown KV layout '%s' (expected paged or unified)", text ? text : "");
}

const char *sched_kv_layout_name(sched_kv_layout layout)
{
    switch (layout) {
    case SCHED_KV_PAGED: return "paged";
    case SCHED_KV_UNIFIED: return "unified";
    }
    return "unknown";
}
