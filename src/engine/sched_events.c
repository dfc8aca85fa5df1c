#include "engine/sched_events.h"

tokenlog_sched_event sched_events_row(const sched_change *c, int64_t step, int64_t t_ns,
                                      int64_t request_id)
{
    tokenlog_sched_event row = {.step = step, .t_ns = t_ns, .request = request_id};
    switch (c->kind) {
    case SCHED_CHANGE_PREEMPTED:
        row.event = TOKENLOG_PREEMPTED;
        break;
    case SCHED_CHANGE_RESUMED:
        row.event = TOKENLOG_RESUMED;
        break;
    case SCHED_CHANGE_LEFT_OUT:
        row.event = TOKENLOG_LEFT_OUT;
        break;
    case SCHED_CHANGE_REJOINED:
        row.event = TOKENLOG_REJOINED;
        break;
    }
    return row;
}
