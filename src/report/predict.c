/* predict — the cost model's prediction for a measured run (predict.h). */
#include <string.h>

#include "common/err.h"
#include "report/predict.h"

/* The run's profile is the reference already (catalog figures and no knobs). */
static bool is_reference(const cost_params *c)
{
    return strcmp(c->gpu.name, REPORT_REFERENCE_GPU) == 0 &&
           strcmp(c->arch.name, REPORT_REFERENCE_MODEL) == 0 && c->compute_efficiency == 1 &&
           c->bandwidth_efficiency == 1 && c->step_overhead_ns == 0 && c->params_override == 0;
}

/* Same workload and scheduler, the reference device: an H100 SXM running Llama 3.1 8B at
 * catalog figures, its KV cache sized from its own memory. */
static int reference_config(experiment_config *cfg, char *err)
{
    experiment_config ref;
    experiment_defaults(&ref, EXPERIMENT_SIM);
    ref.wl = cfg->wl;
    ref.sched = cfg->sched;
    ref.sched.kv_blocks = 0;
    ref.sched.max_model_len = 0;
    if (experiment_resolve(&ref, err) != 0)
        return -1;
    *cfg = ref;
    return 0;
}

int report_predict(const report_run *run, bool reference, report_prediction *out, char *err)
{
    memset(out, 0, sizeof *out);
    if (!run->has_config)
        return snprintf(out->why, sizeof out->why, "%s", run->config_why), 0;
    experiment_config cfg = run->cfg;
    const experiment_engine engine = cfg.engine;
    if (!reference) {
        if (engine == EXPERIMENT_REMOTE)
            return snprintf(out->why, sizeof out->why,
                            "a remote server: its hardware is not a profile of the cost model"),
                   0;
        if (engine == EXPERIMENT_SIM)
            return snprintf(out->why, sizeof out->why,
                            "this run is itself the cost model's simulation"),
                   0;
        if (engine == EXPERIMENT_CPU)
            return snprintf(out->why, sizeof out->why,
                            "measured on this CPU: step times are real, not modeled"),
                   0;
    } else {
        if (engine != EXPERIMENT_REMOTE && is_reference(&cfg.cost))
            return snprintf(out->why, sizeof out->why, "%s",
                            engine == EXPERIMENT_SIM
                                ? "this simulation already runs the reference profile"
                                : "the run's profile is the reference: see the same-profile "
                                  "column"),
                   0;
        if (reference_config(&cfg, err) != 0)
            return -1;
    }
    cfg.engine = EXPERIMENT_SIM;
    cfg.no_baseline = false;
    cfg.stall_threshold_ns = 0;
    experiment_profile_name(&cfg.cost, &cfg.sched, out->profile, sizeof out->profile);
    char why[ERR_LEN];
    if (experiment_check(&cfg, why) != 0)
        return snprintf(out->why, sizeof out->why, "the scheduler refuses this workload: %.200s",
                        why),
               0;
    experiment_runner sim;
    experiment_runner_sim(&sim, err);
    experiment_io io = {0}; /* in memory, quiet */
    if (experiment_run_pair(&cfg, &sim, &io, &out->pair, err) != 0) {
        experiment_pair_free(&out->pair);
        return -1;
    }
    out->ok = true;
    return 0;
}

void report_prediction_free(report_prediction *p)
{
    experiment_pair_free(&p->pair);
    p->ok = false;
}
