/* predict — the cost model's prediction for a measured run (predict.h). */
#include <string.h>

#include "common/err.h"
#include "engine/cost.h"
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
    ref.prefix_caching_said = true; /* the run's resolved setting, as config.json holds it */
    ref.kv_layout_said = ref.max_num_seqs_said = true;
    if (experiment_resolve(&ref, err) != 0)
        return -1;
    *cfg = ref;
    return 0;
}

/* A remote server's model: the hardware profile the run was given (--hardware: a profile of
 * that server, calibrate --target, or of a machine like it), for the model the run names or
 * else the one the profile's step model was fitted on. 0 and *why empty when there is one;
 * 0 and *why filled when there is none. */
static int remote_config(experiment_config *cfg, char *why, size_t size)
{
    if (!cfg->device.hardware[0])
        return snprintf(why, size,
                        "a remote server: no model for it (its hardware is not a profile of "
                        "the cost model; give the run --hardware PROFILE, e.g. from stallscope "
                        "calibrate --target)"),
               0;
    cost_gpu gpu;
    cost_arch arch;
    char reason[ERR_LEN];
    if (cost_gpu_from_profile(cfg->device.hardware, &gpu, reason) != 0)
        return snprintf(why, size, "a remote server whose --hardware profile is unreadable: %.250s",
                        reason),
               0;
    experiment_config sim = *cfg;
    sim.engine = EXPERIMENT_SIM;
    sim.device.gpu[0] = '\0';
    if (!sim.device.model_config[0] &&
        (!sim.device.model[0] || cost_arch_find(sim.device.model, &arch, reason) != 0)) {
        if (!gpu.fit.model[0])
            return snprintf(why, size, "a remote server: the run names no model of the catalog "
                                       "and its profile %.200s has no step model",
                            cfg->device.hardware),
                   0;
        snprintf(sim.device.model, sizeof sim.device.model, "%s", gpu.fit.model);
    }
    sim.sched.kv_blocks = 0;
    sim.sched.max_model_len = 0;
    sim.prefix_caching_said = true; /* the run's resolved setting, as config.json holds it */
    sim.kv_layout_said = sim.max_num_seqs_said = true;
    if (experiment_resolve(&sim, reason) != 0)
        return snprintf(why, size, "a remote server with --hardware %.150s: %.250s",
                        cfg->device.hardware, reason),
               0;
    *cfg = sim;
    why[0] = '\0';
    return 0;
}

double report_relative_error(double measured, double predicted)
{
    return measured > 0 ? predicted / measured - 1 : 0;
}

int report_predict(const report_run *run, bool reference, report_prediction *out, char *err)
{
    memset(out, 0, sizeof *out);
    if (!run->has_config)
        return snprintf(out->why, sizeof out->why, "%s", run->config_why), 0;
    experiment_config cfg = run->cfg;
    const experiment_engine engine = cfg.engine;
    if (!reference) {
        if (engine == EXPERIMENT_REMOTE) {
            remote_config(&cfg, out->why, sizeof out->why);
            if (out->why[0])
                return 0;
        }
        if (engine == EXPERIMENT_SIM)
            return snprintf(out->why, sizeof out->why,
                            "this run is itself the cost model's simulation"),
                   0;
        /* The cpu engine: its profile (--hardware, or the catalog's nominal cpu) predicts
         * the steps the run measured. */
        if (engine == EXPERIMENT_CPU && !cfg.device.hardware[0]) {
            cost_gpu nominal;
            char none[ERR_LEN];
            const bool known = cost_gpu_find(EXPERIMENT_CPU_DEVICE, &nominal, none) == 0 &&
                               nominal.source;
            snprintf(out->caveat, sizeof out->caveat,
                     "the catalog's nominal cpu profile (%.250s), not this machine: for a "
                     "prediction of this machine run stallscope calibrate --out hw.json and "
                     "give the run --hardware hw.json",
                     known ? nominal.source : "figures of another machine");
        }
    } else {
        /* Someone else's server: never an H100 stand-in for it. */
        if (engine == EXPERIMENT_REMOTE)
            return snprintf(out->why, sizeof out->why,
                            "a remote server: no reference device is assumed for it"),
                   0;
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
