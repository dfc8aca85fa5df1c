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
 * waiting queue, as vLLM does. max_num_seqs caps the running set. */
#ifndef STALLSCOPE_SCHED_H
#define STALLSCOPE_SCHED_H
#include <stdbool.h>
#include <stdint.h>

typedef enum { SCHED_MIXED, SCHED_CHUNKED, SCHED_PREFILL_FIRST } sched_policy;

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
    /* state, owned by sched */
    sched_state state;
    int generated;      /* completion tokens sampled so far */
    int computed;       /* tokens whose KV is in the cache */
    int64_t n_blocks;   /* KV blocks held */
    int n_preemptions;
    int64_t order;      /* arrival sequence number (FCFS) */
    struct sched_req *next, *prev; /* intrusive list links, owned by sched */
} sched_req;

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
const sched_config *sched_get_config(const sched *s);
/* Drop every cached prefix block no running request holds (vLLM's POST
 * /reset_prefix_cache). The blocks dropped; 0: nothing cached (this scheduler caches no
 * prefix yet: a stub the prefix cache fills in). */
int sched_reset_prefix_cache(sched *s);

/* "mixed" | "chunked" | "prefill-first" */
int sched_policy_parse(const char *text, sched_policy *out, char *err);
const char *sched_policy_name(sched_policy p);

#endif
