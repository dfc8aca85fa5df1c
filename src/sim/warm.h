/* warm — the simulator's warm start (warm.c), internal to src/sim/ (sim.c's alone; the
 * contract is sim.h): a run started warmup_ns early in virtual time, recorded from its t = 0
 * as a live run's client records it after its warm-up.
 *
 * sim.c runs the workload with its t = 0 at virtual time W = warmup_ns: the closed users
 * start at 0, the injections and open-loop arrivals are planned from W (the plan's copy made
 * here), the run ends at W + duration. What it produces passes through this filter on its
 * way to the caller's log or sink:
 *   - steps that start before W (and what they did to requests' places), token events
 *     before W and the requests that ended before W are dropped;
 *   - the requests in flight at W are "carried over" (the driver's start_recording): their
 *     rows come first, when the first thing at or after W comes out, with t_plan, t_send and
 *     t_first -1 (sent before t = 0: they count for gaps, not TTFT), and their events from W
 *     on are kept; the first of those has no gap before it (no gap across t = 0);
 *   - requests sent at or after W, and their events, are kept;
 * every time kept is rebased to t - W and the requests renumbered 0, 1, ... in the order
 * their rows first come out (carried over first), as a live run's log numbers them. */
#ifndef STALLSCOPE_SIM_WARM_H
#define STALLSCOPE_SIM_WARM_H
#include <stdbool.h>
#include <stdint.h>

#include "common/tokenlog.h"
#include "sim/sim_types.h"
#include "workload/workload.h"

/* A request sent before t = 0: its row as it stands, and whether it may be in flight at t = 0. */
typedef struct sim_warm_early {
    tokenlog_request row;
    bool live;
} sim_warm_early;

typedef struct sim_warm {
    tokenlog_sink sink;       /* what the simulator is given */
    int64_t t0_ns;            /* W: virtual time of t = 0 */
    tokenlog *log;            /* where the kept rows go: the log, */
    const tokenlog_sink *out; /* or the caller's sink */
    bool recording;           /* something at or after W has come out */
    int64_t *ids;             /* simulator id -> kept id; -1 not (yet) kept */
    int64_t cap_ids;
    sim_warm_early *early;    /* the requests sent before W, by simulator id */
    int64_t n_early, cap_early;
    int64_t next_id;          /* the next kept id */
    int64_t steps, events, requests; /* what was kept */
    tokenlog_event *batch;    /* a batch of events, rebased */
    int64_t cap_batch;
    workload_arrival *arrivals; /* the plan's arrivals, moved to W */
} sim_warm;

/* Set w up for a run of cfg (cfg->warmup_ns > 0) that gives its rows to log or to out (one
 * of them); *shifted: plan with its arrivals moved by W (shares plan's other members: free
 * only through sim_warm_free). 0, or -1 with err (out of memory). */
int sim_warm_begin(sim_warm *w, const sim_config *cfg, const workload_plan *plan,
                   workload_plan *shifted, tokenlog *log, const tokenlog_sink *out, char *err);
/* After the run: carry over what is in flight if nothing came out at or after W, and put what
 * was kept into stats (steps, token events, requests; virtual_ns rebased). 0, or -1 with err. */
int sim_warm_end(sim_warm *w, sim_stats *stats, char *err);
void sim_warm_free(sim_warm *w);

#endif
