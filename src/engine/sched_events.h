/* sched_events — what a scheduler step did to requests' places (sched_batch.changes) as
 * sched_events.csv rows (common/tokenlog.h): the one translation, for the simulator's log and
 * the engine's. */
#ifndef STALLSCOPE_SCHED_EVENTS_H
#define STALLSCOPE_SCHED_EVENTS_H
#include <stdint.h>

#include "common/tokenlog.h"
#include "engine/sched.h"

/* Change c of step `step`, which started at t_ns, naming its request by request_id. */
tokenlog_sched_event sched_events_row(const sched_change *c, int64_t step, int64_t t_ns,
                                      int64_t request_id);

#endif
