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
 */
#include "engine/sched.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

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
    sched_item *items; /* the batch's items, reused every step */
    int items_capacity;
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

static void release_blocks(sched *s, sched_req *req)
{
    s->blocks_free += req->n_blocks;
    req->n_blocks = 0;
}

/* Take a live request out of whichever queue holds it, free its blocks, set `final`. */
static void leave(sched *s, sched_req *req, sched_state final)
{
    if (req->state == SCHED_WAITING) {
        list_remove(&s->waiting, req);
    } else if (is_running_state(req->state)) {
        if (req->state == SCHED_PREFILLING)
            s->n_prefilling--;
        list_remove(&s->running, req);
        release_blocks(s, req);
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
    if (reserve_items(s, cfg->max_num_seqs < 16 ? cfg->max_num_seqs : 16, err) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

void sched_free(sched *s)
{
    if (!s)
        return;
    free(s->items);
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
    if (reserve_items(s, running_bound, err) != 0)
        return -1;

    req->state = SCHED_WAITING;
    req->generated = prefilled ? 1 : 0;
    req->computed = prefilled ? req->prompt_tokens : 0;
    req->n_blocks = 0;
    req->n_preemptions = 0;
    req->order = s->next_order++;
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

static void add_item(step_builder *b, sched_req *req, int new_tokens)
{
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
        break;
    }
    if (victim->state == SCHED_PREFILLING)
        s->n_prefilling--;
    list_remove(&s->running, victim);
    release_blocks(s, victim);
    victim->computed = 0;
    victim->state = SCHED_WAITING;
    victim->n_preemptions++;
    list_push_front(&s->waiting, victim);
    s->n_preemptions++;
    batch->n_preempted++;
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
    while (s->blocks_free < needed) {
        sched_req *victim = s->running.tail;
        preempt(b, victim);
        if (victim == req)
            return false;
    }
    s->blocks_free -= needed;
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

/* How many tokens a waiting request would feed if admitted with `budget_left`; 0 when it
 * does not fit under the policy. */
static int admission_chunk(const sched *s, const sched_req *req, int budget_left)
{
    if (budget_left <= 0)
        return 0;
    const int remaining = known_tokens(req) - req->computed;
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

static bool head_admissible(const sched *s, int budget_left)
{
    const sched_req *head = s->waiting.head;
    if (!head || s->running.count >= s->cfg.max_num_seqs)
        return false;
    const int chunk = admission_chunk(s, head, budget_left);
    return chunk > 0 && blocks_for_tokens(s, (int64_t)head->computed + chunk) <= s->blocks_free;
}

/* Waiting requests FCFS: the first one that does not fit (budget, blocks, seats) stops
 * admission, so nobody overtakes the head and nobody starves. Admission never preempts. */
static void schedule_waiting(step_builder *b)
{
    sched *s = b->s;
    while (head_admissible(s, b->budget_left)) {
        sched_req *req = s->waiting.head;
        const int chunk = admission_chunk(s, req, b->budget_left);
        const int64_t blocks = blocks_for_tokens(s, (int64_t)req->computed + chunk);
        list_remove(&s->waiting, req);
        list_push_back(&s->running, req);
        /* Only a prefilled request (sched_add_prefilled) waits with KV: it decodes at once. */
        if (req->computed > 0) {
            req->state = SCHED_DECODING;
        } else {
            req->state = SCHED_PREFILLING;
            s->n_prefilling++;
        }
        s->blocks_free -= blocks;
        req->n_blocks = blocks;
        add_item(b, req, chunk);
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
    return s->cfg.kv_blocks - s->blocks_free;
}

int64_t sched_blocks_total(const sched *s)
{
    return s->cfg.kv_blocks;
}

int64_t sched_num_preemptions(const sched *s)
{
    return s->n_preemptions;
}

int sched_reset_prefix_cache(sched *s)
{
    (void)s;
    return 0; /* nothing cached: no prefix cache yet */
}

const sched_config *sched_get_config(const sched *s)
{
    return &s->cfg;
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
