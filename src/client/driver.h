/* driver — the load: background users and the injector, over a transport.
 *
 * Background users run a closed loop: user u sends workload_bg(wl, u, k), and the moment
 * that answer ends (or fails) sends request k + 1. The injector runs an open loop on the
 * absolute schedule workload_injection_times(): injection i is sent at t0 + plan_i however
 * many earlier injections are still running, and both the planned and the actual send time
 * are recorded (wrk2's lesson: measure from the intended time, never let a slow answer
 * delay the next send).
 *
 * How a request is made (endpoint, prompts of exact lengths, the probe) is driver_api.h.
 *
 * Open-loop requests (a rate or a trace: workload_plan) are sent like the injections, on the
 * absolute schedule of the plan from t = 0, each a stream of its own (user id
 * workload_arrival_user), from loops of their own: `threads` of them, arrival i of this
 * shard on open loop i mod threads, or one loop when max_concurrency is set (a free slot goes
 * to the earliest arrival waiting; t_plan is the arrival, t_send when it got its slot).
 * With wl->until_trace_end the phase ends as soon as every open-loop request of this process
 * has ended (driver_result.drained), at the duration otherwise.
 *
 * A phase runs on several event loops, one thread each (driver_phase.threads): the
 * background users are spread over them (user u on loop u mod threads), the injector has a
 * loop of its own, and each loop has its own transport (driver_transports), buffers and
 * segment of the token log; at the end the segments are merged in time order
 * (tokenlog_merge). Loop 0 runs in the caller's thread and delivers the progress and
 * should_stop callbacks; every other callback (a transport's run() delivering tokens) runs
 * in the loop's own thread. One loop is driver_loop.c's; setting the loops up, running them
 * and putting their results together, driver.c's; what a phase takes and gives,
 * driver_phase.h. */
#ifndef STALLSCOPE_DRIVER_H
#define STALLSCOPE_DRIVER_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "client/driver_api.h"
#include "client/driver_phase.h"
#include "common/tokenlog.h"

/* Run one phase (warm-up, baseline or interference) on transports from `transports`.
 * The open-loop plan is built from cfg->wl here (a bad trace is an error).
 * Events and requests go into log (times from t0) when cfg->record: requests in the order
 * they were sent (then by user), each with its row's index as id; events in time order
 * (then by user, then request), each request's events in the order they came. The same
 * arrivals give the same log whatever the number of loops. res sums every loop. Returns 0
 * when the phase ran (res->complete tells whether to the end), -1 with err on a local
 * failure (out of memory, a transport or a thread that cannot start). */
int driver_run_phase(const driver_transports *transports, const driver_phase *cfg, tokenlog *log,
                     driver_result *res, char *err);
void driver_result_free(driver_result *res);

#endif
