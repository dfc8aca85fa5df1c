/* driver_loop — one event loop of a phase, for driver.c alone: its users, injections and
 * open-loop arrivals sent on its own transport, their tokens and ends recorded in its own
 * segment of the token log, its rows handed to the incremental files, and (loop 0, the
 * lead) the progress lines and should_stop.
 *
 * The background users are spread over cfg->threads loops (user u on loop u mod threads);
 * the injector, when the workload has one, runs on a loop of its own, so a busy loop never
 * delays an injection. Loop 0 runs in the caller's thread and leads: it calls should_stop
 * and progress; the others run in threads of their own. Each loop has its own transport
 * (driver_transports.open), its own users, buffers and segment of the token log, and
 * shares only what is in driver_shared: the stop flag, the first failure, the count of
 * failures in a row, the incremental files (under a lock) and the ids of their requests.
 * At the end each loop puts its segment in time order (in its own thread: the rows arrive
 * nearly in order) and the caller merges the segments, k-way, into the one log. */
#ifndef STALLSCOPE_DRIVER_LOOP_H
#define STALLSCOPE_DRIVER_LOOP_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "client/driver_phase.h"
#include "common/err.h"

typedef struct driver_shared driver_shared;
typedef struct driver_loop driver_loop;
typedef struct driver_loop_req driver_loop_req; /* a request in flight (driver_loop.c) */

/* A loop's live figures for the lead's progress lines: written by the loop alone, read by
 * the lead (relaxed: a progress line needs no ordering). */
typedef struct driver_loop_live {
    _Atomic int64_t tokens, errors, worst_gap_ns, stalls;
    _Atomic int active, injections_sent;
} driver_loop_live;

struct driver_loop {
    driver_shared *ph;
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
    driver_loop_req **current; /* its request in flight, NULL none */
    int64_t *retry_at; /* when it sends again after a failure, 0: not waiting */
    int *failures;     /* its failed requests in a row */
    workload_conv *convs; /* its conversation (turns, system prompt) */
    workload_prompt prompt; /* scratch: the prompt being built */
    int n_retrying;    /* users waiting in retry_at */
    bool recording, stopping;
    int next_inj; /* the injector: the next injection of the plan */
    char *inj_body;
    size_t inj_len;
    int64_t inj_id; /* its request id (given when its body is built) */
    /* open-loop arrivals (an open loop): the plan's indices it sends, in time order */
    bool open_loop;
    const int64_t *open_idx;
    int64_t n_open, next_open;
    int open_limit, open_in_flight; /* max_concurrency (0: none), requests in flight */
    bool open_blocked;              /* the next arrival is due and waits for a slot */
    char *open_body;                /* the next arrival's body, built ahead of its time */
    size_t open_len;
    int64_t open_id;
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
    driver_loop_live fig; /* written by this loop, read by the lead */
    char pad[64];
};

struct driver_shared {
    const driver_phase *cfg;
    const workload_config *wl;
    int64_t t_start, t0, t_stop;
    int64_t *plan; /* injection times from t = 0 */
    int n_plan;
    workload_plan wplan;  /* the open-loop arrivals and the length tables */
    int64_t *open_table;  /* plan indices, grouped by open loop */
    driver_loop *loops;
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
    _Atomic int64_t next_request;       /* the request ids: the incremental files', and what
                                           the embedded server's sched log names them by */
    _Atomic int64_t held_events;        /* over the loops, while log_events_max > 0 */
    atomic_bool dropping;               /* past log_events_max: events leave once written */
    /* A trace replayed to its end (wl.until_trace_end): this process's open-loop requests
     * not yet ended; at 0 `drained` ends every loop, as the duration would. */
    _Atomic int64_t open_left;
    atomic_bool drained;
    int64_t first_request;              /* log->n_requests when the phase began */
};

/* Loop `index` of ph (ph->loops[index]) set up for its users (ph->user_table assigned): 0,
 * or -1 when out of memory. */
int driver_loop_init(driver_shared *ph, int index);
void driver_loop_free(driver_loop *l);
/* One loop, from its first request to its segment in time order (tokenlog_merge_order), in
 * the caller's thread: loop 0 in driver_run_phase's, the others in threads of their own. */
void driver_loop_run(driver_loop *l);
/* The phase's figures at now, over every loop (the lead's progress lines). */
driver_progress driver_loop_figures(const driver_shared *ph, int64_t now);

#endif
