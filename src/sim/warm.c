/* warm — the simulator's warm start: what a run started W early produces, recorded from W on
 * as a live client records it after its warm-up (warm.h). */
#include "sim/warm.h"

#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"

/* Room for simulator id `id` in ids[] (new entries -1). */
static int grow_ids(sim_warm *w, int64_t id, char *err)
{
    if (id < w->cap_ids)
        return 0;
    const int64_t old = w->cap_ids;
    if (buf_grow_items((void **)&w->ids, &w->cap_ids, id + 1, sizeof *w->ids) != 0)
        return err_set(err, "out of memory");
    for (int64_t i = old; i < w->cap_ids; i++)
        w->ids[i] = -1;
    return 0;
}

/* A kept row to the log (appended when new, replaced when its row changed) or the sink. */
static int give_row(sim_warm *w, const tokenlog_request *row, char *err)
{
    if (!w->log)
        return w->out->request(w->out->ctx, row, err);
    if (row->request < w->log->n_requests) {
        w->log->requests[row->request] = *row;
        return 0;
    }
    int64_t index;
    if (tokenlog_add_request(w->log, row, &index) != 0)
        return err_set(err, "out of memory for the request log");
    return 0;
}

/* The row as kept: its kept id (the next one when new), its times from t = 0; a request sent
 * before t = 0 has no plan, send or first token (it counts for gaps, not TTFT). */
static int keep_row(sim_warm *w, const tokenlog_request *row, bool early, char *err)
{
    if (grow_ids(w, row->request, err) != 0)
        return -1;
    if (w->ids[row->request] < 0) {
        w->ids[row->request] = w->next_id++;
        w->requests++;
    }
    tokenlog_request kept = *row;
    kept.request = w->ids[row->request];
    const int64_t t0 = w->t0_ns;
    if (early) {
        kept.t_plan_ns = kept.t_send_ns = kept.t_first_ns = -1;
    } else {
        kept.t_plan_ns -= t0;
        kept.t_send_ns -= t0;
        kept.t_first_ns = kept.t_first_ns >= 0 ? kept.t_first_ns - t0 : -1;
    }
    kept.t_end_ns = kept.t_end_ns >= 0 ? kept.t_end_ns - t0 : -1;
    return give_row(w, &kept, err);
}

/* t = 0 has come: the requests in flight then are carried over, in the order they were sent. */
static int start_recording(sim_warm *w, char *err)
{
    w->recording = true;
    for (int64_t i = 0; i < w->n_early; i++)
        if (w->early[i].live && keep_row(w, &w->early[i].row, true, err) != 0)
            return -1;
    return 0;
}

/* A request sent before t = 0: its row kept as it changes, until t = 0 says whether it is
 * carried over (still running then) or dropped (ended before). */
static int early_row(sim_warm *w, const tokenlog_request *row, char *err)
{
    const int64_t id = row->request;
    if (id >= w->cap_early &&
        buf_grow_items((void **)&w->early, &w->cap_early, id + 1, sizeof *w->early) != 0)
        return err_set(err, "out of memory");
    for (; w->n_early <= id; w->n_early++)
        w->early[w->n_early].live = false;
    w->early[id].row = *row;
    w->early[id].live = row->t_end_ns < 0 || row->t_end_ns >= w->t0_ns;
    /* Recording: kept already, or sent before t = 0 but told only now (a closed user's next
     * request, sent during the step that crossed t = 0 and handed over at its end): carried
     * over, as start_recording would have. */
    if (w->recording)
        return (id < w->cap_ids && w->ids[id] >= 0) || w->early[id].live
                   ? keep_row(w, row, true, err)
                   : 0;
    const int64_t at = row->t_end_ns >= 0 ? row->t_end_ns
                       : row->t_first_ns >= 0 ? row->t_first_ns
                                              : row->t_send_ns;
    if (at < w->t0_ns)
        return 0;
    return start_recording(w, err); /* this row among them */
}

static int on_request(void *ctx, const tokenlog_request *row, char *err)
{
    sim_warm *w = ctx;
    if (row->request < 0)
        return err_set(err, "warm start: a request without an id");
    if (row->t_send_ns < w->t0_ns)
        return early_row(w, row, err);
    if (!w->recording && start_recording(w, err) != 0)
        return -1;
    return keep_row(w, row, false, err);
}

/* The events at or after t = 0 of kept requests, rebased, into w->batch: their count. */
static int64_t keep_events(sim_warm *w, const tokenlog_event *evs, int64_t n, char *err)
{
    if (n > w->cap_batch &&
        buf_grow_items((void **)&w->batch, &w->cap_batch, n, sizeof *w->batch) != 0)
        return err_set(err, "out of memory");
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        const tokenlog_event *ev = &evs[i];
        if (ev->t_ns < w->t0_ns)
            continue;
        if (!w->recording && start_recording(w, err) != 0)
            return -1;
        if (ev->request < 0 || ev->request >= w->cap_ids || w->ids[ev->request] < 0)
            continue; /* ended before t = 0 (none should come out after it) */
        w->batch[kept] = *ev;
        w->batch[kept].t_ns -= w->t0_ns;
        w->batch[kept].request = w->ids[ev->request];
        kept++;
    }
    w->events += kept;
    return kept;
}

static int on_events(void *ctx, const tokenlog_event *evs, int64_t n, char *err)
{
    sim_warm *w = ctx;
    const int64_t kept = keep_events(w, evs, n, err);
    if (kept <= 0)
        return (int)kept;
    if (!w->log && w->out->events)
        return w->out->events(w->out->ctx, w->batch, kept, err);
    for (int64_t i = 0; i < kept; i++) {
        if (w->log && tokenlog_add_event(w->log, &w->batch[i]) != 0)
            return err_set(err, "out of memory for the token log");
        if (!w->log && w->out->event(w->out->ctx, &w->batch[i], err) != 0)
            return -1;
    }
    return 0;
}

static int on_event(void *ctx, const tokenlog_event *ev, char *err)
{
    return on_events(ctx, ev, 1, err);
}

static int on_step(void *ctx, const tokenlog_step *st, char *err)
{
    sim_warm *w = ctx;
    if (st->t_start_ns < w->t0_ns)
        return 0;
    if (!w->recording && start_recording(w, err) != 0)
        return -1;
    tokenlog_step kept = *st;
    kept.t_start_ns -= w->t0_ns;
    kept.t_end_ns -= w->t0_ns;
    w->steps++;
    if (w->log)
        return tokenlog_add_step(w->log, &kept) != 0 ? err_set(err, "out of memory for the step log")
                                                     : 0;
    return w->out->step(w->out->ctx, &kept, err);
}

/* What a step at or after t = 0 did to a kept request's place, rebased and renumbered. */
static int on_sched_event(void *ctx, const tokenlog_sched_event *ev, char *err)
{
    sim_warm *w = ctx;
    if (ev->t_ns < w->t0_ns)
        return 0;
    if (!w->recording && start_recording(w, err) != 0)
        return -1;
    if (ev->request < 0 || ev->request >= w->cap_ids || w->ids[ev->request] < 0)
        return 0; /* ended before t = 0 */
    tokenlog_sched_event kept = *ev;
    kept.t_ns -= w->t0_ns;
    kept.request = w->ids[ev->request];
    if (w->log)
        return tokenlog_add_sched_event(w->log, &kept) != 0
                   ? err_set(err, "out of memory for the step log")
                   : 0;
    return w->out->sched_event ? w->out->sched_event(w->out->ctx, &kept, err) : 0;
}

int sim_warm_begin(sim_warm *w, const sim_config *cfg, const workload_plan *plan,
                   workload_plan *shifted, tokenlog *log, const tokenlog_sink *out, char *err)
{
    memset(w, 0, sizeof *w);
    w->t0_ns = cfg->warmup_ns;
    w->log = log;
    w->out = out;
    w->sink = (tokenlog_sink){.event = on_event, .request = on_request, .step = on_step,
                              .ctx = w, .events = on_events, .sched_event = on_sched_event};
    *shifted = *plan;
    if (plan->n_arrivals > 0) {
        w->arrivals = malloc((size_t)plan->n_arrivals * sizeof *w->arrivals);
        if (!w->arrivals)
            return err_set(err, "out of memory");
        for (int64_t i = 0; i < plan->n_arrivals; i++) {
            w->arrivals[i] = plan->arrivals[i];
            w->arrivals[i].t_ns += w->t0_ns;
        }
        shifted->arrivals = w->arrivals;
    }
    return 0;
}

int sim_warm_end(sim_warm *w, sim_stats *stats, char *err)
{
    if (!w->recording && start_recording(w, err) != 0)
        return -1;
    stats->steps = w->steps;
    stats->token_events = w->events;
    stats->requests = w->requests;
    stats->virtual_ns = stats->virtual_ns > w->t0_ns ? stats->virtual_ns - w->t0_ns : 0;
    return 0;
}

void sim_warm_free(sim_warm *w)
{
    free(w->ids);
    free(w->early);
    free(w->batch);
    free(w->arrivals);
    memset(w, 0, sizeof *w);
}
