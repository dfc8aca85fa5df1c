/* steplog — internal to src/sim/ (sim.c's and disagg.c's): a simulated step into the
 * caller's log or sink (one of them): its steps.csv row, then what it did to requests' places
 * (sched_events.csv), each change naming its request by sched_req.id, the simulator's
 * request id. */
#ifndef STALLSCOPE_SIM_STEPLOG_H
#define STALLSCOPE_SIM_STEPLOG_H
#include "common/tokenlog.h"
#include "engine/sched.h"

/* 0, or -1 with err (out of memory, or the sink's own error). */
int sim_steplog_add(tokenlog *log, const tokenlog_sink *sink, const tokenlog_step *step,
                    const sched_batch *batch, char *err);

#endif
