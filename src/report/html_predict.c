/* html_predict — the cost model's prediction for a measured run's workload: config.json
 * back into a simulator configuration, and the simulator run in process. */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "report/html.h"
#include "sim/sim.h"

#define REFERENCE_GPU "h100-sxm"
#define REFERENCE_MODEL "llama-3.1-8b"

static bool get_int(const json_t *obj, const char *key, int64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || !json_is_number(v))
        return false;
    *out = json_is_integer(v) ? (int64_t)json_integer_value(v) : (int64_t)json_number_value(v);
    return true;
}

static bool get_real(const json_t *obj, const char *key, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || !json_is_number(v))
        return false;
    *out = json_number_value(v);
    return true;
}

static bool get_bool(const json_t *obj, const char *key, bool *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || !json_is_boolean(v))
        return false;
    *out = json_is_true(v);
    return true;
}

static const char *get_str(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return v && json_is_string(v) ? json_string_value(v) : NULL;
}

/* An int field within [lo, hi], when present. */
static int get_int_field(const json_t *obj, const char *key, int *out, int64_t lo, int64_t hi,
                         char *err)
{
    int64_t v;
    if (!get_int(obj, key, &v))
        return 0;
    if (v < lo || v > hi)
        return err_set(err, "config.json: %s = %lld is out of range", key, (long long)v);
    *out = (int)v;
    return 0;
}

int html_config_workload(const json_t *config, workload_config *wl, char *err)
{
    const json_t *w = json_object_get(config, "workload");
    if (!w || !json_is_object(w))
        return err_set(err, "config.json has no workload section");
    workload_default(wl);
    int64_t v;
    if (get_int(w, "duration_ns", &v))
        wl->duration_ns = v;
    if (get_int(w, "inject_at_ns", &v))
        wl->inject_at_ns = v;
    if (get_int(w, "inject_every_ns", &v))
        wl->inject_every_ns = v;
    if (get_int(w, "seed", &v))
        wl->seed = (uint64_t)v;
    get_bool(w, "inject_poisson", &wl->inject_poisson);
    if (get_int_field(w, "users", &wl->users, 1, 1000000, err) != 0 ||
        get_int_field(w, "prompt_tokens", &wl->prompt_tokens, 1, 1 << 24, err) != 0 ||
        get_int_field(w, "inject_max_tokens", &wl->inject_max_tokens, 1, 1 << 24, err) != 0 ||
        get_int_field(w, "bg_prompt_min", &wl->bg_prompt_min, 1, 1 << 24, err) != 0 ||
        get_int_field(w, "bg_prompt_max", &wl->bg_prompt_max, 1, 1 << 24, err) != 0 ||
        get_int_field(w, "bg_answer_min", &wl->bg_answer_min, 1, 1 << 24, err) != 0 ||
        get_int_field(w, "bg_answer_max", &wl->bg_answer_max, 1, 1 << 24, err) != 0)
        return -1;
    wl->inject = true;
    char why[ERR_LEN];
    if (workload_check(wl, why) != 0)
        return err_set(err, "config.json workload: %s", why);
    return 0;
}

int html_config_cost(const json_t *config, cost_params *cost, char *err)
{
    const json_t *c = json_object_get(config, "cost");
    if (!c || !json_is_object(c))
        return err_set(err, "config.json has no cost section (a remote target)");
    const char *gpu_name = get_str(c, "gpu"), *model_name = get_str(c, "model");
    cost_gpu gpu;
    cost_arch arch;
    memset(&gpu, 0, sizeof gpu);
    memset(&arch, 0, sizeof arch);
    if (!gpu_name || cost_gpu_find(gpu_name, &gpu, NULL) != 0) {
        /* Not in the catalog: the figures config.json carries are all the model needs,
         * except memory (KV capacity), taken as 80 GB. */
        snprintf(gpu.name, sizeof gpu.name, "%s", gpu_name ? gpu_name : "custom");
        gpu.mem_bytes = 80e9;
        gpu.source = "config.json";
    }
    get_real(c, "peak_flops", &gpu.peak_flops);
    get_real(c, "mem_bandwidth", &gpu.mem_bandwidth);
    /* A calibrated CPU profile times attention at its own rate (0: at peak_flops). */
    get_real(c, "attention_flops", &gpu.attention_flops);
    if (!(gpu.peak_flops > 0) || !(gpu.mem_bandwidth > 0))
        return err_set(err, "config.json cost: GPU %s without peak_flops and mem_bandwidth",
                       gpu.name);
    if (!model_name || cost_arch_find(model_name, &arch, NULL) != 0) {
        snprintf(arch.name, sizeof arch.name, "%s", model_name ? model_name : "custom");
        arch.max_position = 131072;
        arch.source = "config.json";
    }
    if (get_int_field(c, "n_layers", &arch.n_layers, 1, 1 << 16, err) != 0 ||
        get_int_field(c, "hidden", &arch.hidden, 1, 1 << 20, err) != 0 ||
        get_int_field(c, "n_heads", &arch.n_heads, 1, 1 << 16, err) != 0 ||
        get_int_field(c, "n_kv_heads", &arch.n_kv_heads, 1, 1 << 16, err) != 0 ||
        get_int_field(c, "head_dim", &arch.head_dim, 1, 1 << 16, err) != 0 ||
        get_int_field(c, "ffn", &arch.ffn, 1, 1 << 24, err) != 0 ||
        get_int_field(c, "vocab", &arch.vocab, 1, 1 << 24, err) != 0)
        return -1;
    if (arch.n_layers <= 0 || arch.hidden <= 0 || arch.n_heads <= 0 || arch.head_dim <= 0)
        return err_set(err, "config.json cost: model %s lacks its dimensions", arch.name);
    cost_params_init(cost, &gpu, &arch);
    double v;
    int64_t ns;
    if (get_real(c, "compute_efficiency", &v) && v > 0 && v <= 1)
        cost->compute_efficiency = v;
    if (get_real(c, "bandwidth_efficiency", &v) && v > 0 && v <= 1)
        cost->bandwidth_efficiency = v;
    if (get_int(c, "step_overhead_ns", &ns) && ns >= 0)
        cost->step_overhead_ns = ns;
    if (get_real(c, "params_override", &v) && v >= 0)
        cost->params_override = v;
    /* The CPU engine keeps FP32 weights and KV (4 bytes), not the GPUs' BF16. */
    if (get_real(c, "bytes_per_param", &v) && v > 0)
        cost->bytes_per_param = v;
    if (get_real(c, "kv_bytes_per_elem", &v) && v > 0)
        cost->kv_bytes_per_elem = v;
    return 0;
}

static void sched_lesson(sched_config *s)
{
    memset(s, 0, sizeof *s);
    s->policy = SCHED_MIXED;
    s->max_num_batched_tokens = 16384;
    s->max_num_seqs = 256;
    s->block_size = 16;
}

int html_config_sched(const json_t *config, const cost_params *cost, sched_config *sched,
                      char *err)
{
    sched_lesson(sched);
    sched->max_model_len = cost->arch.max_position;
    const json_t *s = json_object_get(config, "sched");
    int64_t kv_blocks = 0;
    if (s && json_is_object(s)) {
        const char *policy = get_str(s, "policy");
        if (policy && sched_policy_parse(policy, &sched->policy, err) != 0)
            return -1;
        if (get_int_field(s, "max_num_batched_tokens", &sched->max_num_batched_tokens, 1,
                          1 << 24, err) != 0 ||
            get_int_field(s, "max_num_seqs", &sched->max_num_seqs, 1, 1 << 20, err) != 0 ||
            get_int_field(s, "max_model_len", &sched->max_model_len, 1, 1 << 24, err) != 0 ||
            get_int_field(s, "block_size", &sched->block_size, 1, 1 << 12, err) != 0)
            return -1;
        get_int(s, "kv_blocks", &kv_blocks);
    }
    sched->kv_blocks = kv_blocks > 0 ? kv_blocks : cost_kv_blocks(cost, 0.9, sched->block_size);
    if (sched->kv_blocks <= 0)
        return err_set(err, "model %s does not fit in %s's memory", cost->arch.name,
                       cost->gpu.name);
    return sched_config_check(sched, err);
}

int html_reference_cost(cost_params *cost, char *err)
{
    cost_gpu gpu;
    cost_arch arch;
    if (cost_gpu_find(REFERENCE_GPU, &gpu, err) != 0 || cost_arch_find(REFERENCE_MODEL, &arch, err) != 0)
        return -1;
    cost_params_init(cost, &gpu, &arch);
    return 0;
}

static bool starts_with(const char *s, const char *prefix)
{
    return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The run's profile is the reference already (a sim with catalog figures and no knobs). */
static bool is_reference(const cost_params *c)
{
    return strcmp(c->gpu.name, REFERENCE_GPU) == 0 && strcmp(c->arch.name, REFERENCE_MODEL) == 0 &&
           c->compute_efficiency == 1 && c->bandwidth_efficiency == 1 &&
           c->step_overhead_ns == 0 && c->params_override == 0;
}

static int simulate(const sim_config *cfg, const char *label, double reference_p50_ms,
                    const char *profile, analysis_summary *out, char *err)
{
    tokenlog log;
    tokenlog_init(&log);
    sim_stats stats;
    int rc = sim_run(cfg, &log, &stats, err);
    if (rc == 0) {
        analysis_options opt = {.label = label,
                                .engine = profile,
                                .target = "",
                                .duration_s = (double)cfg->wl.duration_ns / 1e9,
                                .users = cfg->wl.users,
                                .reference_p50_ms = reference_p50_ms,
                                .complete = true};
        rc = analysis_summarize(&log, &opt, out, err);
    }
    tokenlog_free(&log);
    return rc;
}

int html_predict(const json_t *config, bool reference, html_prediction *out, char *err)
{
    memset(out, 0, sizeof *out);
    if (!config)
        return snprintf(out->why, sizeof out->why, "no config.json beside the token log"), 0;
    const char *engine = get_str(config, "engine"), *target = get_str(config, "target");
    bool remote = starts_with(engine, "remote") || (target && target[0] && !json_object_get(config, "cost"));
    sim_config cfg;
    memset(&cfg, 0, sizeof cfg);
    char why[ERR_LEN];
    if (html_config_workload(config, &cfg.wl, why) != 0)
        return snprintf(out->why, sizeof out->why, "%s", why), 0;

    cost_params measured;
    bool have_measured = !remote && html_config_cost(config, &measured, why) == 0;
    if (!reference) {
        if (remote)
            return snprintf(out->why, sizeof out->why,
                            "a remote server: its hardware is not a profile of the cost model"),
                   0;
        if (starts_with(engine, "sim"))
            return snprintf(out->why, sizeof out->why,
                            "this run is itself the cost model's simulation"),
                   0;
        if (starts_with(engine, "cpu"))
            return snprintf(out->why, sizeof out->why,
                            "measured on this CPU: step times are real, not modeled"),
                   0;
        if (!have_measured)
            return snprintf(out->why, sizeof out->why, "%s", why), 0;
        cfg.cost = measured;
    } else {
        if (have_measured && is_reference(&measured))
            return snprintf(out->why, sizeof out->why, "%s",
                            starts_with(engine, "sim")
                                ? "this simulation already runs the reference profile"
                                : "the run's profile is the reference: see the same-profile "
                                  "column"),
                   0;
        if (html_reference_cost(&cfg.cost, err) != 0)
            return -1;
    }
    /* The scheduler as the run had it (the lesson's one-step prefill for a remote target
     * that did not say). */
    if (html_config_sched(config, &cfg.cost, &cfg.sched, why) != 0)
        return snprintf(out->why, sizeof out->why, "%s", why), 0;
    if (reference)
        cfg.sched.kv_blocks = cost_kv_blocks(&cfg.cost, 0.9, cfg.sched.block_size);
    snprintf(out->profile, sizeof out->profile, "%s %s %s/%d", cfg.cost.gpu.name,
             cfg.cost.arch.name, sched_policy_name(cfg.sched.policy),
             cfg.sched.max_num_batched_tokens);
    if (sim_check(&cfg, why) != 0)
        return snprintf(out->why, sizeof out->why, "the scheduler refuses this workload: %.200s",
                        why),
               0;
    sim_config base = cfg;
    base.wl.inject = false;
    if (simulate(&base, "baseline", 0, out->profile, &out->baseline, err) != 0)
        return -1;
    if (simulate(&cfg, "interference", out->baseline.itl_ms.p50, out->profile, &out->interference,
                 err) != 0) {
        analysis_summary_free(&out->baseline);
        return -1;
    }
    out->ok = true;
    return 0;
}

void html_prediction_free(html_prediction *p)
{
    if (!p->ok)
        return;
    analysis_summary_free(&p->baseline);
    analysis_summary_free(&p->interference);
    p->ok = false;
}

double html_model_spike_ms(const cost_params *cost, const workload_config *wl,
                           const sched_config *sched, int prompt_tokens)
{
    /* Every user mid-answer feeds one decode token (context: a typical prompt plus half a
     * typical answer); the prompt takes what the budget leaves, whole unless chunked. */
    int users = wl->users > 0 ? wl->users : 0;
    int context = (wl->bg_prompt_min + wl->bg_prompt_max) / 2 +
                  (wl->bg_answer_min + wl->bg_answer_max) / 4;
    int budget = sched && sched->policy == SCHED_CHUNKED ? sched->max_num_batched_tokens : 0;
    return (double)cost_injection_step_ns(cost, prompt_tokens, users, context, budget) / 1e6;
}
