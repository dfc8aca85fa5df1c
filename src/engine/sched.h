/* sched — the continuous-batching scheduler. A pure module: no clock, no threads, no I/O.
 * The engine (live) and the simulator (virtual time) drive it the same way:
 *
 *     sched_add(s, req)            a request arrives (refused with a reason when it can
 *                                  never run: longer than max_model_len, or, under mixed
 *                                  and prefill-first, longer than the token budget)
 *     sched_next(s, &batch)        build the next step (0 items: nothing to run)
 *     ... executor runs the step ...
 *     sched_commit(s, &batch)      tokens are in the KV cache; sampling items produced one
 *                                  token each; finished requests leave (FINISHED)
 *     sched_finish / sched_abort   the engine ends a request early (stop string, client gone)
 *
 * Policies (vLLM V1 as the reference), with B = max_num_batched_tokens:
 *  - SCHED_MIXED (V1, chunked prefill off): running requests first, one decode token each,
 *    in admission order; then waiting requests FCFS, each admitted only if its whole
 *    remaining prompt fits in the budget left (the head of the queue blocks the rest: no
 *    overtaking, no starvation).
 *  - SCHED_CHUNKED (V1 default, Sarathi-Serve stall-free): running decodes first, then
 *    partially prefilled requests continue, then waiting requests FCFS, each taking a chunk
 *    of min(remaining prompt, budget left).
 *  - SCHED_PREFILL_FIRST (V0 without chunking, Orca-like): if the head waiting prompt fits,
 *    the step is prefill-only with as many waiting prompts (FCFS) as fit; else decode-only.
 * A request needs ceil(tokens_in_kv / block_size) KV blocks. When a running request needs a
 * block and none is free, the most recently admitted running request is preempted: its
 * blocks are freed, its progress reset (recompute) and it goes back to the front of the
 * waiting queue, as vLLM does. max_num_seqs caps the running set.
 *
 * Prefix caching (prefix_caching, vLLM's automatic prefix caching; kvcache.h): a request
 * may name its prompt's full blocks by their hash chain (block_hashes). Once a block's
 * tokens are computed it is cached; when the request leaves, its cached blocks stay (their
 * KV kept) until the pool needs them and evicts them, least recently released first. A
 * request admitted from the waiting queue (new or preempted) starts from the longest
 * cached prefix of its chain: those tokens are computed already and skip prefill (capped
 * one token short of what it must compute, so its first step still feeds a token, as vLLM
 * recomputes the last block of a fully cached prompt). They are still in its context (the
 * cost model charges attention over them). Blocks holding cached KV that nobody uses count
 * as free for admission and growth (evicted on demand) but not as used. Off, or without
 * hashes, nothing is shared and the scheduler behaves exactly as without a cache.
 *
 * KV layout (kv_layout). SCHED_KV_PAGED (vLLM, SGLang; the default): a request's KV is its
 * own blocks and its attention spans its own context. SCHED_KV_UNIFIED (llama.cpp's server):
 * max_num_seqs slots share one cache; a request takes a free slot at admission (kvslots.h:
 * the one whose last prompt shares the longest prefix with its hash chain, else the least
 * recently released) and when it leaves the slot keeps its cells (prompt and generated
 * tokens) until the next request takes it. A step's attention spans the occupied cells,
 * the running requests' KV and what the free slots retain: every batch carries their count
 * (occupied_cells) and the cost model charges each sequence's attention over them (cost.h).
 * Only the cost changes: admission, KV blocks and preemption are as under paged (a
 * preempted request's slot keeps nothing: its KV was dropped).
 *
 * Each step also says what it did to a request's place in the steps (sched_batch.changes):
 * who was preempted and who resumed, and who, having sampled a token already, was left out
 * of the step without being preempted and who is back in (sched_change_kind). A caller that
 * logs them (steps.csv's companion sched_events.csv) lets the analysis tell a stall spent
 * preempted or left out from one the client caused. */
#ifndef STALLSCOPE_SCHED_H
#define STALLSCOPE_SCHED_H
#include <stdbool.h>
#include <stdint.h>

typedef enum { SCHED_MIXED, SCHED_CHUNKED, SCHED_PREFILL_FIRST } sched_policy;
typedef enum { SCHED_KV_PAGED, SCHED_KV_UNIFIED } sched_kv_layout;

typedef enum {
    SCHED_WAITING,    /* queued, no KV blocks held (new, preempted, or prefilled elsewhere:
                         sched_add_prefilled, whose computed tokens arrive with it) */
    SCHED_PREFILLING, /* admitted, prompt partly in KV (chunked only) */
    SCHED_DECODING,   /* admitted, producing one token per step */
    SCHED_FINISHED,
    SCHED_ABORTED,
} sched_state;

typedef struct sched_config {
    sched_policy policy;
    int max_num_batched_tokens; /* B: tokens per step */
    int max_num_seqs;           /* running requests at most */
    int max_model_len;          /* prompt + completion at most */
    int block_size;             /* tokens per KV block: 16 */
    int64_t kv_blocks;          /* total KV blocks */
    bool prefix_caching;        /* reuse cached prefix blocks (see the top of this file) */
    sched_kv_layout kv_layout;  /* paged (0, the default) or unified (see the top) */
} sched_config;

/* A request as the scheduler sees it. The caller owns the memory (embed it in its own
 * request struct and use `user` to get back); it must stay valid until FINISHED/ABORTED
 * has been observed and sched no longer references it (after commit / finish / abort). */
typedef struct sched_req {
    int64_t id;
    int prompt_tokens;
    int max_tokens;     /* completion tokens at most (>= 1) */
    int min_tokens;     /* engine must not finish early before this many (informational) */
    void *user;
    /* the hash chain of its full blocks (kvcache_hash_blocks with block_size): the
     * prompt's, and may go on over completion tokens the caller knows in advance or
     * appends as they are sampled (up to (prompt_tokens + max_tokens - 1) / block_size; a
     * block is cached once computed and hashed). NULL, 0: a prompt that shares nothing.
     * Caller-owned, valid as long as the request. Read only with prefix_caching. */
    const uint64_t *block_hashes;
    int n_block_hashes;
    /* state, owned by sched */
    sched_state state;
    int generated;      /* completion tokens sampled so far */
    int computed;       /* tokens whose KV is in the cache */
    int64_t n_blocks;   /* KV blocks held */
    int n_preemptions;
    int cached_tokens;  /* prompt tokens found cached at its first admission */
    int n_shared;       /* its first n_shared blocks are cache entries (the rest its own) */
    bool cache_counted; /* its lookup is in the queries/hits counters */
    int slot;           /* unified layout: the slot it holds while running, else -1 */
    int64_t order;      /* arrival sequence number (FCFS) */
    struct sched_req *next, *prev; /* intrusive list links, owned by sched */
    int64_t carried_in; /* the last step (sched_next's count) that had an item for it */
    int absence;        /* why it is out of the steps (sched.c), 0: it is not */
} sched_req;

/* What a step did to a request's place in the steps. Every preemption and the re-admission
 * that follows it; and, for a request that has sampled a token (its stream is open, so a
 * step without it is a gap its client sees), every step that leaves it out while it is live
 * and not preempted (the token budget ran out before it, prefill-first's prefill-only steps,
 * a prefilled request waiting for a seat or blocks), and the step that carries it again. */
typedef enum {
    SCHED_CHANGE_PREEMPTED, /* lost its KV in this step: out of the steps until RESUMED */
    SCHED_CHANGE_RESUMED,   /* re-admitted after a preemption: this step recomputes its KV */
    SCHED_CHANGE_LEFT_OUT,  /* live, not preempted, not in this step (nor the next ones,
                               until REJOINED) */
    SCHED_CHANGE_REJOINED,  /* in this step again after being left out */
} sched_change_kind;

typedef struct sched_change {
    sched_req *req;
    sched_change_kind kind;
} sched_change;

typedef struct sched_item {
    sched_req *req;
    int new_tokens; /* fed in this step */
    int context;    /* already in KV before this step */
    bool samples;   /* produces a token at the end of this step */
} sched_item;

typedef struct sched_batch {
    sched_item *items; /* owned by sched, valid until the next sched_next */
    int n_items;
    int decode_tokens;  /* items with new_tokens == 1 that were already decoding */
    int prefill_tokens; /* everything else */
    int n_preempted;    /* preemptions while building this step */
    int prefix_queries; /* prompt tokens of the requests first admitted in this step */
    int prefix_hits;    /* of them, found cached (prefix caching; fed by nobody) */
    int64_t occupied_cells; /* unified layout: cells in the cache before the step (the
                               running requests' KV and the free slots' retained cells);
                               0 under paged */
    /* What this step did to requests' places (owned by sched, valid until the next
     * sched_next): at most one change per request, none when the step is empty. */
    const sched_change *changes;
    int n_changes;
} sched_batch;

typedef struct sched sched;

/* Validate the config (positive sizes, block_size > 0 ...): 0 or -1 with err. */
int sched_config_check(const sched_config *cfg, char *err);
sched *sched_create(const sched_config *cfg, char *err);
void sched_free(sched *s);

/* 0: queued. -1: refused, err says why ("prompt of 20000 tokens exceeds the token budget
 * max_num_batched_tokens=16384 under policy mixed; use --policy chunked or raise it"). */
int sched_add(sched *s, sched_req *req, char *err);
/* Build the next step into *batch. Returns n_items (0 when idle). */
int sched_next(sched *s, sched_batch *batch);
/* Apply a finished step: computed += new_tokens; sampling items get generated += 1; a
 * request whose generated reaches max_tokens becomes FINISHED and frees its blocks. */
void sched_commit(sched *s, const sched_batch *batch);
/* A request whose prompt was prefilled on another instance (disaggregated prefill, the
 * simulator's --disaggregate): its prompt's KV arrived with it and its first token was
 * sampled there, so it waits with computed = prompt_tokens and generated = 1 and, once
 * admitted (FCFS, max_num_seqs, blocks for prompt + 1 tokens), decodes at once: its first
 * item feeds that token over the prompt (a decode token, not a prefill). Preempted, it
 * recomputes here like any other request. Refused as sched_add refuses, except that the
 * token budget does not apply (it never feeds its prompt in one step). max_tokens >= 2. */
int sched_add_prefilled(sched *s, sched_req *req, char *err);
/* End a request now (stop string, EOS): FINISHED, blocks freed. Safe in any live state. */
void sched_finish(sched *s, sched_req *req);
/* Client went away: ABORTED, blocks freed, removed from queues. */
void sched_abort(sched *s, sched_req *req);

int sched_num_running(const sched *s);
int sched_num_waiting(const sched *s);
int64_t sched_blocks_used(const sched *s);
int64_t sched_blocks_total(const sched *s);
int64_t sched_num_preemptions(const sched *s);
/* Blocks holding cached KV that nobody uses (evictable; not in sched_blocks_used). */
int64_t sched_blocks_cached(const sched *s);
/* vLLM's prefix-cache counters, in tokens: every request's prompt at its first admission
 * (queries) and the part of it found cached (hits). 0 without prefix_caching. */
int64_t sched_prefix_queries(const sched *s);
int64_t sched_prefix_hits(const sched *s);
/* Forget every cached block nobody uses (vLLM's POST /reset_prefix_cache): the count. */
int64_t sched_reset_prefix_cache(sched *s);
const sched_config *sched_get_config(const sched *s);
/* Unified layout: erase a slot's retained cells (kvslots_erase: the cells, 0 for a taken or
 * empty slot, -1 for no such slot or under paged). */
int64_t sched_erase_slot(sched *s, int slot);
/* Unified layout: the cells in the cache now (the running requests' KV and the free slots'
 * retained cells); 0 under paged. */
int64_t sched_cells_occupied(const sched *s);

/* "mixed" | "chunked" | "prefill-first" */
int sched_policy_parse(const char *text, sched_policy *out, char *err);
const char *sched_policy_name(sched_policy p);
/* "paged" | "unified" */
int sched_kv_layout_parse(const char *text, sched_kv_layout *out, char *err);
const char *sched_kv_layout_name(sched_kv_layout layout);

#endif
