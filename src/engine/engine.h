/* engine — the continuous-batching loop on its own thread (llama.cpp server's shape).
 *
 * One engine thread owns the scheduler (sched.h) and the executor (exec.h). Other threads
 * talk to it through two queues and never touch its state:
 *
 *   in:   engine_submit(req)     a request (caller-filled engine_req) joins at the next
 *                                step boundary
 *         engine_cancel(req)     the client went away: abort, free its KV blocks
 *   out:  engine_poll(&events)   token events and one summary per step, in order; the
 *                                engine calls cfg.notify when the queue turns non-empty
 *
 * Ownership: the caller allocates an engine_req and fills its input fields, then hands it
 * over with engine_submit. The engine reads it (and writes its private part) until it
 * emits the request's final event (finish != ENGINE_FINISH_NONE); from the moment the
 * caller has polled that event the request is the caller's again and the engine never
 * looks at it. engine_cancel may be called any time before the caller has seen the final
 * event (a request whose final event is already queued is simply not aborted).
 *
 * Timing: a step starts when the previous one ended or when work arrives. A paced
 * executor (emulate) sleeps to step_start + modeled duration and the next step starts at
 * that deadline, so late wake-ups do not add up; if the engine falls more than
 * ENGINE_SLIP_NS behind (the machine stalled it), the schedule restarts from now rather
 * than running later steps short to catch up, and the slip is counted.
 *
 * Finishing: max_tokens reached -> "length"; EOS sampled (unless ignore_eos) -> "stop";
 * a stop string appears in the text -> "stop", the token's text cut before the match.
 * Stop strings and EOS count only once min_tokens tokens exist. Text already streamed is
 * never taken back: no hold-back of partial matches (vLLM holds back), so a stop string
 * spanning tokens ends the answer at the token that completes it. */
#ifndef STALLSCOPE_ENGINE_H
#define STALLSCOPE_ENGINE_H
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/buf.h"
#include "common/err.h"
#include "engine/exec.h"
#include "engine/sched.h"

#define ENGINE_SLIP_NS (2 * 1000000LL) /* 2 ms */

typedef enum {
    ENGINE_FINISH_NONE = 0,
    ENGINE_FINISH_LENGTH, /* max_tokens reached */
    ENGINE_FINISH_STOP,   /* EOS or a stop string */
    ENGINE_FINISH_ABORT,  /* cancelled, or the engine shut down */
    ENGINE_FINISH_ERROR,  /* refused (sched_add) or the executor failed: see req->error */
} engine_finish;

const char *engine_finish_name(engine_finish f); /* "length", "stop", "abort", "error" */

typedef struct engine_req {
    /* ---- input: filled by the caller before engine_submit, then read-only ---- */
    int64_t id;
    int prompt_tokens;
    int max_tokens;          /* >= 1 */
    exec_seq seq;            /* sampling parameters for the executor */
    /* Prefix caching of a text prompt: its ids as the server tokenized them (caller-owned,
     * valid until the final event), which name its KV blocks (seq.prompt_ids does for a
     * token-id prompt, and wins). NULL, or n_cache_ids != prompt_tokens: it shares nothing. */
    const int32_t *cache_ids;
    int n_cache_ids;
    const char *const *stop; /* stop strings (caller-owned, non-empty), n_stop of them */
    int n_stop;
    void *user;              /* the caller's */
    int64_t log_id;          /* the request in the sched log (sched_events.csv's request) */

    /* ---- output: written by the engine before the final event ---- */
    char error[ERR_LEN]; /* why, when the final event says ENGINE_FINISH_ERROR */

    /* ---- private to the engine ---- */
    sched_req sr;
    atomic_bool cancel;
    engine_finish finishing; /* decided during this step, applied after commit */
    buf tail;                /* last bytes of the text, for stop strings */
    size_t max_stop_len;
    /* prefix caching: the hash chain of its blocks (sched_req.block_hashes), the prompt's
     * and then its answer's as tokens are sampled (a later turn that sends the answer back
     * finds it cached); ids of the block being filled */
    uint64_t *hashes;
    int n_hashes_max;
    int32_t *pending;
    int n_pending;
    struct engine_req *inbox_next;
    struct engine_req *live_next, *live_prev;
} engine_req;

/* Per-step figures, also the steps.csv row. When the engine goes idle it sends one more
 * summary with is_step false (no step ran: only the gauges are meaningful), so gauges read
 * 0 running after the last request left. */
typedef struct engine_step_info {
    bool is_step;
    int64_t t_start_ns; /* CLOCK_MONOTONIC: the step's (scheduled) start */
    int64_t t_end_ns;   /* when the engine observed its end */
    int64_t modeled_ns; /* the executor's modeled duration */
    int64_t late_ns;    /* paced executor: how late it woke past the deadline (exec.h) */
    int32_t decode_tokens;
    int32_t prefill_tokens;
    int32_t n_requests; /* items in the batch */
    int32_t running;    /* after the step */
    int32_t waiting;
    int64_t kv_blocks_used;
    int64_t kv_blocks_total;
    int64_t preemptions_total;
    int64_t slips_total;
    int32_t prefix_queries;     /* this step's admissions: prompt tokens (sched_batch) */
    int32_t prefix_hits;        /* of them, found in the prefix cache */
    int64_t prefix_queries_total; /* vLLM's prefix-cache counters so far (sched.h) */
    int64_t prefix_hits_total;
    int64_t kv_cells_occupied;  /* --kv-layout unified: cells in the cache (sched.h); 0 paged */
} engine_step_info;

typedef struct engine_event {
    engine_req *req;   /* NULL: a step summary (info) */
    int64_t step;      /* engine step index that produced it; -1 for none */
    int64_t t_ns;      /* CLOCK_MONOTONIC end of that step (or of the intake) */
    int32_t token;     /* sampled id, -1 for none (refused, aborted) */
    int32_t text_len;  /* bytes of the token's text to show (cut by a stop string) */
    int32_t completion_tokens; /* the request's tokens so far, this one included */
    int16_t finish;    /* engine_finish; != NONE: the request's last event */
    int16_t stop_index; /* which stop string matched, -1 */
    engine_step_info info; /* only when req == NULL */
} engine_event;

typedef struct engine_config {
    sched_config sched;
    exec *executor;        /* owned by the engine from engine_create on (even on failure) */
    FILE *step_log;        /* NULL: none. Caller-owned; header + one row per step, flushed at
                              least once a second and at exit */
    FILE *sched_log;       /* NULL: none. The same for sched_events.csv's rows: what each step
                              did to requests' places (sched.h), naming each by its log_id */
    void (*notify)(void *arg); /* called on the engine thread when events become available */
    void *notify_arg;
    bool realtime; /* try SCHED_FIFO for the engine thread (precise step wake-ups) */
} engine_config;

typedef struct engine engine;

engine *engine_create(const engine_config *cfg, char *err);
/* Start the thread. 0 or -1 with err. */
int engine_start(engine *e, char *err);
/* Any thread. The request joins at the next step boundary. */
void engine_submit(engine *e, engine_req *req);
/* Any thread, until the caller has polled req's final event. */
void engine_cancel(engine *e, engine_req *req);
/* Any thread: queue a reset of the prefix cache; the engine thread applies it at the next
 * step boundary (sched_reset_prefix_cache), before the step that follows, idle or not.
 * engine_prefix_cache_resets counts the resets applied. */
void engine_reset_prefix_cache(engine *e);
unsigned engine_prefix_cache_resets(engine *e);
/* Any thread, unified layout: queue the erase of a slot's retained cells (llama.cpp's POST
 * /slots/{id}?action=erase), applied at the next step boundary as a reset (sched_erase_slot:
 * a slot taken then keeps its occupant's cells). 0, or -1 when the layout is paged or there
 * is no such slot. engine_slots: the slots (max_num_seqs; 0 under paged). */
int engine_erase_slot(engine *e, int slot);
int engine_slots(const engine *e);
/* Consumer thread (one): take every queued event. *events stays valid until the next
 * engine_poll. Returns the count. */
size_t engine_poll(engine *e, engine_event **events);
/* Ask the thread to stop: every live request is aborted (final event ENGINE_FINISH_ABORT),
 * then the thread exits. Any thread; returns at once. */
void engine_shutdown(engine *e);
/* Join the thread (after engine_shutdown) and free everything. Requests still owned by the
 * engine at that point are not freed (they are the caller's memory). */
void engine_free(engine *e);
/* Whether the thread got SCHED_FIFO (cfg.realtime and the privilege to have it). */
bool engine_is_realtime(engine *e);
/* CPU time of the engine thread so far, ns (-1 when not started). */
int64_t engine_thread_cpu_ns(engine *e);

/* Release engine-private memory of a request the caller got back (safe to call twice). */
void engine_req_release(engine_req *req);

#endif
