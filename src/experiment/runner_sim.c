/* runner_sim — the simulator as a runner: the workload drives the real scheduler and the
 * cost model under a virtual clock, in process, in milliseconds. */
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/fsio.h"
#include "experiment/experiment.h"
#include "sim/sim.h"

/* A streamed run's rows: to the analysis, and tokens.csv as they come while under its
 * limit (past it the file is dropped: the DESIGN's "written only on request past a size"). */
typedef struct sim_sink {
    experiment_streaming *io;
    fsio_file tokens; /* open while tokens.f */
    int64_t max_events;
} sim_sink;

static int sink_event(void *ctx, const tokenlog_event *ev, char *err)
{
    sim_sink *k = ctx;
    if (k->tokens.f) {
        if (k->io->events < k->max_events) {
            tokenlog_write_event(k->tokens.f, ev);
        } else {
            fsio_abandon(&k->tokens);
            k->tokens.f = NULL;
            k->io->tokens_csv_dropped = true;
        }
    }
    k->io->events++;
    return analysis_stream_event(k->io->stream, ev, err);
}

static int sink_request(void *ctx, const tokenlog_request *r, char *err)
{
    return analysis_stream_request(((sim_sink *)ctx)->io->stream, r, err);
}

static int sink_step(void *ctx, const tokenlog_step *st, char *err)
{
    return analysis_stream_step(((sim_sink *)ctx)->io->stream, st, err);
}

static int sim_streamed(const sim_config *sim, const experiment_phase *ph, sim_stats *stats,
                        char *err)
{
    experiment_streaming *io = ph->streaming;
    sim_sink k = {.io = io,
                  .max_events = io->tokens_csv_max_events > 0 ? io->tokens_csv_max_events
                                                              : EXPERIMENT_TOKENS_CSV_MAX_DEFAULT};
    io->events = 0;
    io->tokens_csv_dropped = false;
    if (ph->dir) {
        char path[4200];
        if (fsio_join(path, sizeof path, ph->dir, "tokens.csv", err) != 0 ||
            fsio_create(&k.tokens, path, err) != 0)
            return -1;
        setvbuf(k.tokens.f, NULL, _IOFBF, 1 << 20);
        tokenlog_write_events_header(k.tokens.f);
    }
    tokenlog_sink sink = {.event = sink_event, .request = sink_request, .step = sink_step, .ctx = &k};
    if (sim_run_sink(sim, &sink, stats, err) != 0) {
        if (k.tokens.f)
            fsio_abandon(&k.tokens);
        return -1;
    }
    if (k.tokens.f && fsio_commit(&k.tokens, err) != 0)
        return -1;
    if (ph->dir && tokenlog_write_dir_rows(analysis_stream_log(io->stream), ph->dir, err) != 0)
        return -1;
    if (io->tokens_csv_dropped && ph->notes)
        fprintf(ph->notes,
                "sim %-12s %lld token events: over --tokens-csv-max %lld, tokens.csv not kept "
                "(the analysis streamed them)\n",
                ph->label, (long long)io->events, (long long)k.max_events);
    return 0;
}

static int sim_phase(void *impl, const experiment_phase *ph, tokenlog *log, experiment_meta *meta,
                     char *err)
{
    (void)impl;
    const experiment_config *cfg = ph->cfg;
    if (cfg->engine == EXPERIMENT_REMOTE)
        return err_set(err, "the simulator needs a cost model: a remote target has none");
    sim_config sim = {.wl = *ph->wl, .cost = cfg->cost, .sched = cfg->sched};
    sim_stats stats;
    meta->target[0] = '\0';
    if (ph->streaming) {
        if (sim_streamed(&sim, ph, &stats, err) != 0)
            return -1;
    } else {
        if (sim_run(&sim, log, &stats, err) != 0)
            return -1;
        if (ph->dir && tokenlog_write_dir(log, ph->dir, err) != 0)
            return -1;
    }
    meta->complete = true;
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
