/* sim_types — what a simulation is given (sim_config: the workload, the cost model, the
 * scheduler and the disaggregation) and what it counts (sim_stats): the types that sim.c
 * and disagg.c share. They stand below both, so that sim.c calls into disagg.c and never
 * the other way round. The contract is sim.h: include sim/sim.h, not this. */
#ifndef STALLSCOPE_SIM_TYPES_H
#define STALLSCOPE_SIM_TYPES_H
#include <stdint.h>

#include "engine/cost.h"
#include "engine/sched.h"
#include "workload/workload.h"

/* Prefill/decode disaggregation (sim.h, "Disaggregated prefill"). All zero: one instance, as
 * always. */
typedef struct sim_disagg {
    int prefill;            /* P prefill instances; 0: not disaggregated */
    int decode;             /* D decode instances */
    char link[32];          /* the KV link as named: a catalog name or "25GB/s" */
    double link_bytes_per_s; /* its bandwidth, one direction, bytes/s */
    int64_t link_latency_ns; /* added to every transfer */
} sim_disagg;

#define SIM_DISAGG_MAX_INSTANCES 64 /* P and D each */
#define SIM_KV_LINK_DEFAULT "nvlink"

typedef struct sim_config {
    workload_config wl;
    cost_params cost;
    sched_config sched;
    sim_disagg disagg;
    /* The closed users start this long before t = 0, unrecorded, as a live run's client
     * warms up (run --warmup): at t = 0 they are mid-answer (sim.h, "Warm start"). 0: they
     * all start at t = 0 (cold). */
    int64_t warmup_ns;
    /* A closed user's turnaround: its next request arrives this long (plus --think-time)
     * after the step that ended its answer (sim.h; the runs use SIM_CLIENT_TURNAROUND_NS).
     * 0: at that step's end, in time for the next step. */
    int64_t client_turnaround_ns;
    /* The simulator's own (callers leave it 0): the virtual time of t = 0 during a warm
     * start; injections and open-loop arrivals are planned from it, the run ends at
     * t0_ns + duration. */
    int64_t t0_ns;
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

#endif
