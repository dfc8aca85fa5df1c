/* driver_phase — a phase as the driver takes and gives it (driver.h runs it): its
 * configuration (driver_phase), where its event loops' transports come from
 * (driver_transports), its live figures (driver_progress) and its results (driver_result).
 * Types alone: what driver.c and one loop (driver_loop.c) both read. */
#ifndef STALLSCOPE_DRIVER_PHASE_H
#define STALLSCOPE_DRIVER_PHASE_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "client/chunk.h"
#include "client/driver_api.h"
#include "client/transport.h"
#include "common/tokenlog.h"
#include "workload/workload.h"

/* Where each event loop's transport comes from. open makes loop `loop`'s (0 .. n - 1; all
 * in the caller's thread, before any loop starts); the loop then uses it alone, from its own
 * thread. close frees it once every loop has ended. A transport that fails to open fails
 * the phase before anything is sent. */
typedef struct driver_transports {
    int (*open)(void *ctx, int loop, transport *out, char *err);
    void (*close)(void *ctx, int loop, transport *t);
    void *ctx;
} driver_transports;

/* Live figures for progress lines (over every loop). */
typedef struct driver_progress {
    int64_t elapsed_ns, duration_ns;
    double tokens_per_s;   /* over the last interval */
    int64_t tokens;        /* received in this phase */
    int active;            /* streams open */
    int injections_sent, injections_planned;
    int64_t worst_gap_ns;  /* longest background gap so far */
    int64_t errors;
    int64_t stalls;        /* background gaps above driver_phase.stall_ns; -1: not counted */
    bool final;            /* the last call: the run is over, tokens_per_s its average */
} driver_progress;

typedef struct driver_phase {
    const workload_config *wl; /* users, duration, injector */
    const driver_api *api;
    uint64_t salt;             /* different per phase: prompts never repeat across runs */
    bool record;               /* false: nothing kept (probes, tests) */
    /* Background load before t = 0, not recorded: the users start at once, and at t = 0
     * they are mid-answer at random points (steady state, no synchronized first prefill).
     * Their answers in flight at t = 0 are recorded from then on, with t_plan/t_send -1
     * (sent before t = 0): they give gaps, not TTFTs. Injections count from t = 0. */
    int64_t warmup_ns;
    /* Event loops for the background users, one thread each (0: 1); never more than the
     * users. The injector, when the workload has one, runs on one more loop of its own. */
    int threads;
    /* Progress lines count the background gaps above this (0: they do not count stalls). */
    int64_t stall_ns;
    /* Incremental copies (open, header written), may be NULL: every loop gives them its
     * rows as they come (under one lock, whole rows) and writes them every tick (250 ms)
     * and at its end. A failed write stops the phase (incomplete, "cannot write tokens.csv:
     * ..."); the file keeps its whole rows. Their request ids are unique over the loops; the
     * final log numbers requests in time order (tokenlog_write_dir rewrites the files). */
    tokenlog_writer *tokens_csv;
    tokenlog_writer *requests_csv;
    /* > 0 (with tokens_csv and requests_csv): once the loops together hold more token events
     * than this, every event is dropped from memory as soon as it is written (memory stays
     * flat over an hour); the log then gets no events (res->events_dropped) and the
     * incremental files, with their own request ids, are the run's record. 0: keep all. */
    int64_t log_events_max;
    FILE *notes;               /* warnings (stderr), may be NULL */
    /* Called about every progress_every_ns (and at the end), in the caller's thread */
    void (*progress)(void *ctx, const driver_progress *p);
    void *progress_ctx;
    int64_t progress_every_ns;
    /* Called every tick in the caller's thread; return true (and fill why) to stop the
     * phase as failed, e.g. when the embedded server died. Every loop stops within
     * 20 ms of it. */
    bool (*should_stop)(void *ctx, char *why, size_t size);
    void *stop_ctx;
    /* Called once with t = 0 (CLOCK_MONOTONIC) as soon as it is set, before any request is
     * sent, in the caller's thread (may be NULL): aligns what runs beside the client (the
     * metrics scraper) with the run's clock. */
    void (*on_t0)(void *ctx, int64_t t0_ns);
    void *t0_ctx;
} driver_phase;

typedef struct driver_result {
    int64_t t0_ns;     /* CLOCK_MONOTONIC of t = 0 */
    int64_t t_end_ns;  /* when the phase stopped */
    bool complete;     /* false: cut short, or nothing recorded while every request before
                          t = 0 failed (error says why) */
    /* wl.until_trace_end: the phase ended when its last open-loop request did, before the
     * duration (every loop stops within 20 ms of it; what else runs is cut as at the end) */
    bool drained;
    char error[256];
    int64_t requests, errors, tokens;
    int injections_sent;
    /* Open-loop requests sent, and those that waited for a max_concurrency slot */
    int64_t open_planned; /* this shard's open-loop arrivals in the plan */
    int64_t open_requests, open_waited, open_wait_total_ns, open_wait_max_ns;
    char open_plan[1024];  /* workload_plan_describe of the phase's plan ("" closed loop) */
    int prompt_mismatches; /* requests whose server-counted prompt differed by > 2 % */
    /* Server events ignored because they cannot be true (after [DONE], impossible or
     * backward counts, tokens past max_tokens, a usage above the tokens streamed;
     * transport_end.protocol_violations), over the recorded requests; and the same by kind. */
    int64_t protocol_violations;
    int64_t violations_by_kind[CHUNK_VIOLATION_KINDS];
    /* Recorded token events by the source of their time (transport_stamp). */
    int64_t stamps[TRANSPORT_STAMP_KINDS];
    /* The events were dropped from memory as they were written (driver_phase.log_events_max):
     * log holds the requests only (renumbered as always); tokens.csv and requests.csv as the
     * driver wrote them are the record. */
    bool events_dropped;
    /* receive - emit per event, ms, where the server sent emit_ns (fidelity self-check);
     * with log_events_max, a uniform sample of at most that many per loop */
    double *fidelity_ms;
    int64_t n_fidelity, cap_fidelity;
} driver_result;

#endif
