/* runner_sim — the simulator as a runner: the workload drives the real scheduler and the
 * cost model under a virtual clock, in process, in milliseconds. */
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "experiment/experiment.h"
#include "sim/sim.h"

static int sim_phase(void *impl, const experiment_phase *ph, tokenlog *log, experiment_meta *meta,
                     char *err)
{
    (void)impl;
    const experiment_config *cfg = ph->cfg;
    if (cfg->engine == EXPERIMENT_REMOTE)
        return err_set(err, "the simulator needs a cost model: a remote target has none");
    sim_config sim = {.wl = *ph->wl, .cost = cfg->cost, .sched = cfg->sched};
    sim_stats stats;
    workload_plan plan;
    if (workload_plan_build(ph->wl, &plan, err) != 0)
        return -1;
    int rc = sim_run_plan(&sim, &plan, log, &stats, err);
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
    meta->target[0] = '\0';
    if (ph->dir && tokenlog_write_dir(log, ph->dir, err) != 0)
        return -1;
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
    *out = (experiment_runner){.impl = NULL, .name = "sim", .run = sim_phase,
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
