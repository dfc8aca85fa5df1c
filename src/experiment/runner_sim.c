/* runner_sim — the simulator as a runner: the workload drives the real scheduler and the
 * cost model under a virtual clock, in process, in milliseconds. */
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/fsio.h"
#include "experiment/config.h"
#include "experiment/config_json.h"
#include "experiment/runner.h"
#include "sim/sim.h"

/* A streamed run's rows: to the analysis as they come, and its events held for tokens.csv
 * while under the limit: written at the end when the run stayed under it (the same bytes as
 * tokenlog_write_dir), dropped the moment it goes over (--tokens-csv-max; summary.json's
 * "tokens_csv" says so, docs/reference/artifacts.md): an hour's 10^8 rows would be most of
 * its cost, and formatting rows that are thrown away is waste. At most SIM_HOLD_MAX events
 * are held (32 MiB: holding the default limit's 5 M, 160 MiB, cost a long run 40,000 page
 * faults for rows it then dropped); a run that ends between the two is simulated again into
 * a log for its tokens.csv (the simulator is deterministic: the same events, in the same
 * order). */
#define SIM_HOLD_MAX ((int64_t)1 << 20)

typedef struct sim_sink {
    experiment_streaming *io;
    tokenlog held; /* events only, while under max_events and SIM_HOLD_MAX */
    bool keep;     /* the run has a directory: tokens.csv is written when under the limit */
    bool holding;
    int64_t max_events;
} sim_sink;

/* A step's events at once (sink_event: one). */
static int sink_events(void *ctx, const tokenlog_event *evs, int64_t n, char *err)
{
    sim_sink *k = ctx;
    if (k->holding) {
        if (k->io->events + n <= k->max_events && k->io->events + n <= SIM_HOLD_MAX) {
            for (int64_t i = 0; i < n; i++)
                if (tokenlog_add_event(&k->held, &evs[i]) != 0)
                    return err_set(err, "out of memory for tokens.csv's rows");
        } else {
            tokenlog_free(&k->held);
            tokenlog_init(&k->held);
            k->holding = false;
        }
    }
    k->io->events += n;
    k->io->tokens_csv_dropped = k->keep && k->io->events > k->max_events;
    return analysis_stream_events(k->io->stream, evs, n, err);
}

static int sink_event(void *ctx, const tokenlog_event *ev, char *err)
{
    return sink_events(ctx, ev, 1, err);
}

static int sink_request(void *ctx, const tokenlog_request *r, char *err)
{
    return analysis_stream_request(((sim_sink *)ctx)->io->stream, r, err);
}

static int sink_step(void *ctx, const tokenlog_step *st, char *err)
{
    return analysis_stream_step(((sim_sink *)ctx)->io->stream, st, err);
}

static int sink_sched_event(void *ctx, const tokenlog_sched_event *ev, char *err)
{
    return analysis_stream_sched_event(((sim_sink *)ctx)->io->stream, ev, err);
}

static int sim_streamed(const sim_config *sim, const workload_plan *plan,
                        const experiment_phase *ph, sim_stats *stats, char *err)
{
    experiment_streaming *io = ph->streaming;
    sim_sink k = {.io = io,
                  .keep = ph->dir != NULL,
                  .holding = ph->dir != NULL,
                  .max_events = io->tokens_csv_max_events > 0 ? io->tokens_csv_max_events
                                                              : EXPERIMENT_TOKENS_CSV_MAX_DEFAULT};
    tokenlog_init(&k.held);
    io->events = 0;
    io->tokens_csv_dropped = false;
    tokenlog_sink sink = {.event = sink_event,   .request = sink_request,
                          .step = sink_step,     .ctx = &k,
                          .events = sink_events, .sched_event = sink_sched_event};
    int rc = -1;
    if (sim_run_plan_sink(sim, plan, &sink, stats, err) != 0)
        goto done;
    if (ph->dir) {
        /* tokens.csv from the held events, requests.csv, steps.csv and sched_events.csv from
         * the stream's rows. */
        const tokenlog *rows = analysis_stream_log(io->stream);
        if (!k.holding && !io->tokens_csv_dropped) {
            /* Under the limit but past what was held: the events again, from the simulator. */
            sim_stats again;
            if (sim_run_plan(sim, plan, &k.held, &again, err) != 0)
                goto done;
            if (k.held.n_events != io->events) {
                err_set(err, "the simulator gave %lld token events the second time, %lld the "
                             "first",
                        (long long)k.held.n_events, (long long)io->events);
                goto done;
            }
            k.holding = true;
        }
        tokenlog all = *rows;
        all.events = k.held.events;
        all.n_events = k.held.n_events;
        if ((k.holding ? tokenlog_write_dir(&all, ph->dir, err)
                       : tokenlog_write_dir_rows(rows, ph->dir, err)) != 0)
            goto done;
    }
    if (io->tokens_csv_dropped && ph->notes)
        fprintf(ph->notes,
                "sim %-12s %lld token events: over --tokens-csv-max %lld, tokens.csv not kept "
                "(the analysis streamed them)\n",
                ph->label, (long long)io->events, (long long)k.max_events);
    rc = 0;
done:
    tokenlog_free(&k.held);
    return rc;
}

static int sim_phase(void *impl, const experiment_phase *ph, tokenlog *log, experiment_meta *meta,
                     char *err)
{
    (void)impl;
    const experiment_config *cfg = ph->cfg;
    if (cfg->engine == EXPERIMENT_REMOTE)
        return err_set(err, "the simulator needs a cost model: a remote target has none");
    /* The client's warm-up, in virtual time: the simulator starts as a live run does. */
    sim_config sim = {.wl = *ph->wl, .cost = cfg->cost, .sched = cfg->sched,
                      .disagg = cfg->disagg, .warmup_ns = cfg->client.warmup_ns,
                      .client_turnaround_ns = SIM_CLIENT_TURNAROUND_NS};
    sim_stats stats;
    workload_plan plan;
    if (workload_plan_build(ph->wl, &plan, err) != 0)
        return -1;
    int rc;
    meta->target[0] = '\0';
    meta->ended_ns = 0;
    if (ph->streaming) {
        rc = sim_streamed(&sim, &plan, ph, &stats, err);
    } else {
        rc = sim_run_plan(&sim, &plan, log, &stats, err);
        if (rc == 0 && ph->dir)
            rc = tokenlog_write_dir(log, ph->dir, err);
    }
    /* What the plan holds (skipped rows above all) is said even with --json: on stderr. */
    FILE *say = ph->quiet ? stderr : ph->notes;
    if (rc == 0 && say && workload_open_loop(ph->wl)) {
        char what[1200];
        workload_plan_describe(&plan, ph->wl, what, sizeof what);
        fprintf(say, "[%s] %s\n", ph->label, what);
        if (ph->wl->max_concurrency > 0)
            fprintf(say,
                    "[%s] max concurrency %d: %lld of %lld open-loop requests waited for a "
                    "slot, %.1f ms on average (of those that waited), %.1f ms at most; %lld "
                    "still waiting at the end\n",
                    ph->label, ph->wl->max_concurrency, (long long)stats.open_waited,
                    (long long)stats.open_requests,
                    stats.open_waited ? (double)stats.open_wait_total_ns / 1e6 /
                                            (double)stats.open_waited
                                      : 0.0,
                    (double)stats.open_wait_max_ns / 1e6,
                    (long long)(plan.n_arrivals - stats.open_requests));
    }
    workload_plan_free(&plan);
    if (rc != 0)
        return -1;
    meta->complete = true;
    if (ph->wl->until_trace_end && stats.virtual_ns < ph->wl->duration_ns)
        meta->ended_ns = stats.virtual_ns;
    if (ph->notes && !ph->quiet)
        fprintf(ph->notes,
                "sim %-12s %lld steps, %lld token events, %lld requests, %lld preemptions\n",
                ph->label, (long long)stats.steps, (long long)stats.token_events,
                (long long)stats.requests, (long long)stats.preemptions);
    return 0;
}

static void sim_destroy(void *impl)
{
    (void)impl;
}

int experiment_runner_sim(experiment_runner *out, char *err)
{
    (void)err;
    *out = (experiment_runner){.impl = NULL, .name = "sim", .streams = true, .run = sim_phase,
                               .destroy = sim_destroy};
    return 0;
}

void experiment_runner_free(experiment_runner *r)
{
    if (r && r->destroy)
        r->destroy(r->impl);
    if (r)
        memset(r, 0, sizeof *r);
}
