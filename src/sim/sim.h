/* sim — the discrete-event simulator: the workload drives the real scheduler (sched_*)
 * and the cost model (cost_*) under a virtual clock. No thread, no sleep: a 40 s run takes
 * milliseconds. Every step takes cost_step_ns(batch); every token of a step is stamped at
 * the step's end; a background user's next request arrives the instant its answer ends;
 * an injection or an open-loop request arrives at its planned time and joins the first step
 * that starts after it. With max_concurrency, an open-loop arrival that finds every slot
 * taken waits (first come, first served) until a request ends and is sent then: its
 * requests.csv row has t_plan (the arrival) and t_send (the slot) apart.
 * Writes the same token log as a live run, so one analysis serves both. */
#ifndef STALLSCOPE_SIM_H
#define STALLSCOPE_SIM_H
#include <stdint.h>

#include "common/tokenlog.h"
#include "engine/cost.h"
#include "engine/sched.h"
#include "workload/workload.h"

typedef struct sim_config {
    workload_config wl;
    cost_params cost;
    sched_config sched;
} sim_config;

typedef struct sim_stats {
    int64_t steps;
    int64_t token_events;
    int64_t requests;
    int64_t preemptions;
    int64_t virtual_ns; /* end of the last step */
    int64_t open_requests;       /* open-loop requests sent */
    int64_t open_waited;         /* of them, sent late for want of a slot (max_concurrency) */
    int64_t open_wait_total_ns;  /* their waits, summed */
    int64_t open_wait_max_ns;    /* the longest */
} sim_stats;

/* Refuse a workload the engine could never serve (an injection, the longest background
 * prompt the distributions can draw or a trace row longer than the context, or than the
 * token budget under mixed/prefill-first), with sched's own message ("trace FILE:LINE: ..."
 * for a trace row). Builds the arrival plan (reads the trace and empirical files). */
int sim_check(const sim_config *cfg, char *err);
/* The same against a plan already built from cfg->wl. */
int sim_check_plan(const sim_config *cfg, const workload_plan *plan, char *err);

/* Run one simulation. log may be NULL (statistics only: benchmarks). 0 or -1 with err. */
int sim_run(const sim_config *cfg, tokenlog *log, sim_stats *stats, char *err);
/* The same with cfg->wl's plan built already (workload_plan_build). */
int sim_run_plan(const sim_config *cfg, const workload_plan *plan, tokenlog *log,
                 sim_stats *stats, char *err);
/* The same run handed to sink as it goes, in time order (nothing held but the requests'
 * state): a step when it is scheduled; a request's row when it is sent and again at its first
 * token and its end (and, still running at the end of the run, once more with its tokens so
 * far); a step's token events once the arrivals planned during that step have been sent (an
 * injection's send is backdated to its plan, so the gaps it overlaps end after its row). The
 * rows and events are those sim_run would have put in a log, in the same order. */
int sim_run_sink(const sim_config *cfg, const tokenlog_sink *sink, sim_stats *stats, char *err);
/* sim_run_sink with the plan built already. */
int sim_run_plan_sink(const sim_config *cfg, const workload_plan *plan, const tokenlog_sink *sink,
                      sim_stats *stats, char *err);

#endif
