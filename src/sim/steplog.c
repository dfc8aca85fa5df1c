#include "sim/steplog.h"

#include "common/err.h"
#include "engine/sched_events.h"

int sim_steplog_add(tokenlog *log, const tokenlog_sink *sink, const tokenlog_step *step,
                    const sched_batch *batch, char *err)
{
    if (log && tokenlog_add_step(log, step) != 0)
        return err_set(err, "out of memory for the step log");
    if (sink && sink->step(sink->ctx, step, err) != 0)
        return -1;
    for (int i = 0; i < batch->n_changes; i++) {
        const sched_change *c = &batch->changes[i];
        const tokenlog_sched_event ev =
            sched_events_row(c, step->step, step->t_start_ns, c->req->id);
        if (log && tokenlog_add_sched_event(log, &ev) != 0)
            return err_set(err, "out of memory for the step log");
        if (sink && sink->sched_event && sink->sched_event(sink->ctx, &ev, err) != 0)
            return -1;
    }
    return 0;
}
