/* config — the experiment's configuration: the lesson's defaults (the one place they
 * live), the option tables that fill it, its resolution against the catalog, its checks
 * and its names. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/proc.h"
#include "common/units.h"
#include "engine/cpu/cpu_pool.h"
#include "engine/exec_cpu.h"
#include "engine/exec_emulate.h"
#include "engine/profile.h"
#include "experiment/config.h"
#include "sim/sim.h"

/* ---- defaults and names --------------------------------------------------------------- */

void experiment_lesson_sched(sched_config *sched)
{
    memset(sched, 0, sizeof *sched);
    /* One-step prefill: vLLM --max-num-batched-tokens 16384 with chunked prefill off. */
    sched->policy = SCHED_MIXED;
    sched->max_num_batched_tokens = 16384;
    sched->max_num_seqs = 256; /* vLLM's default */
    sched->block_size = 16;
}

void experiment_defaults(experiment_config *cfg, experiment_engine engine)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->engine = engine;
    workload_default(&cfg->wl);
    experiment_lesson_sched(&cfg->sched);
    cfg->device.step_overhead_ns = -1;
    cfg->device.compute_efficiency = 1.0;
    cfg->device.bandwidth_efficiency = 1.0;
    cfg->device.gpu_memory_utilization = 0.9;
    cfg->client.endpoint = DRIVER_COMPLETIONS;
    cfg->client.request_timeout_ns = 30 * CLOCK_NS_PER_S;
    cfg->client.warmup_ns = 2 * CLOCK_NS_PER_S;
}

static const char *const ENGINE_LABELS[] = {"sim", "emulate", "cpu", "remote"};

const char *experiment_engine_label(experiment_engine engine)
{
    return (unsigned)engine < sizeof ENGINE_LABELS / sizeof ENGINE_LABELS[0]
               ? ENGINE_LABELS[engine]
               : "unknown";
}

int experiment_engine_parse(const char *text, experiment_engine *out, char *err)
{
    for (int i = 0; i < (int)(sizeof ENGINE_LABELS / sizeof ENGINE_LABELS[0]); i++)
        if (strcmp(text, ENGINE_LABELS[i]) == 0) {
            *out = (experiment_engine)i;
            return 0;
        }
    return err_set(err, "unknown engine '%s' (sim | emulate | cpu | remote)", text);
}

void experiment_profile_name(const cost_params *cost, const sched_config *sched, char *buf,
                             size_t size)
{
    snprintf(buf, size, "%s %s %s/%d", cost->gpu.name, cost->arch.name,
             sched_policy_name(sched->policy), sched->max_num_batched_tokens);
}

void experiment_engine_name(const experiment_config *cfg, const char *served_model, char *buf,
                            size_t size)
{
    if (cfg->engine == EXPERIMENT_REMOTE) {
        snprintf(buf, size, "remote %s",
                 served_model && served_model[0] ? served_model : "(unnamed model)");
        return;
    }
    /* The cpu engine's device is this machine: named only when a profile names it. */
    if (cfg->engine == EXPERIMENT_CPU && strcmp(cfg->cost.gpu.name, EXPERIMENT_CPU_DEVICE) == 0) {
        snprintf(buf, size, "cpu %s %s/%d", cfg->cost.arch.name,
                 sched_policy_name(cfg->sched.policy), cfg->sched.max_num_batched_tokens);
        return;
    }
    char profile[160], setup[96];
    experiment_profile_name(&cfg->cost, &cfg->sched, profile, sizeof profile);
    sim_disagg_describe(&cfg->disagg, setup, sizeof setup);
    snprintf(buf, size, "%s %s%s%s", experiment_engine_label(cfg->engine), profile,
             setup[0] ? ", " : "", setup);
}

int experiment_gpus(const experiment_config *cfg)
{
    return cfg->engine == EXPERIMENT_SIM ? sim_disagg_gpus(&cfg->disagg) : 0;
}

/* ---- resolution and checks -------------------------------------------------------------- */

int experiment_resolve_cost(experiment_config *cfg, char *err)
{
    const experiment_device *d = &cfg->device;
    const bool cpu = cfg->engine == EXPERIMENT_CPU;
    cost_gpu gpu;
    cost_arch arch;
    if (d->hardware[0]) {
        profile_info info;
        if (profile_read(d->hardware, &gpu, &info, err) != 0)
            return -1;
        /* calibrate --target found the server caching prefixes (or not): the simulator
         * does as the server does, unless the command line said. */
        if (info.prefix_caching >= 0 && !cfg->prefix_caching_said)
            cfg->sched.prefix_caching = info.prefix_caching == 1;
        /* ... and so is its KV layout, a unified one with the server's slots */
        if (info.kv_layout >= 0 && !cfg->kv_layout_said)
            cfg->sched.kv_layout = (sched_kv_layout)info.kv_layout;
        if (cfg->sched.kv_layout == SCHED_KV_UNIFIED && info.kv_layout == SCHED_KV_UNIFIED &&
            info.slots > 0 && !cfg->max_num_seqs_said)
            cfg->sched.max_num_seqs = info.slots;
        /* A server's profile holds its step model alone: no rates for another model. */
        if (!(gpu.peak_flops > 0 && gpu.mem_bandwidth > 0) && gpu.fit.model[0] &&
            (d->model_config[0] || (d->model[0] && strcmp(d->model, gpu.fit.model) != 0)))
            return err_set(err, "%s: a step model of %s only (no rates for another model); "
                                "use --model %s",
                           d->hardware, gpu.fit.model, gpu.fit.model);
    } else if (cost_gpu_find(d->gpu[0] ? d->gpu : cpu ? EXPERIMENT_CPU_DEVICE
                                                        : EXPERIMENT_DEFAULT_GPU,
                             &gpu, err) != 0) {
        return -1;
    }
    /* Without --model, a profile's step model names the model it predicts. */
    const char *fitted = d->hardware[0] && gpu.fit.model[0] ? gpu.fit.model : NULL;
    if (d->model_config[0]) {
        if (cost_arch_from_hf_config(d->model_config, &arch, err) != 0)
            return -1;
    } else if (cost_arch_find(d->model[0] ? d->model
                              : fitted    ? fitted
                              : cpu       ? EXPERIMENT_CPU_MODEL
                                          : EXPERIMENT_DEFAULT_MODEL,
                              &arch, err) != 0) {
        return -1;
    }
    cost_params_init(&cfg->cost, &gpu, &arch);
    cfg->cost.compute_efficiency = d->compute_efficiency;
    cfg->cost.bandwidth_efficiency = d->bandwidth_efficiency;
    /* A profile measured its own per-step overhead; --step-overhead replaces it. */
    if (d->step_overhead_ns >= 0)
        cfg->cost.step_overhead_ns = d->step_overhead_ns;
    cfg->cost.params_override = d->params_override;
    return 0;
}

void experiment_client_cpus_of(const experiment_config *cfg, experiment_client_cpus *out)
{
    memset(out, 0, sizeof *out);
    out->cpus = proc_cpus();
    if (cfg->engine == EXPERIMENT_SIM)
        return; /* no client */
    if (cfg->engine == EXPERIMENT_EMULATE)
        out->server = 1;
    else if (cfg->engine == EXPERIMENT_CPU)
        out->server = cfg->device.threads > 0 ? cfg->device.threads : cpu_pool_default_threads();
    out->given = cfg->client.threads_given && cfg->client.threads > 0;
    const int left = out->cpus - out->server;
    out->threads = out->given ? cfg->client.threads : left > 1 ? left : 1;
}

bool experiment_client_cpus_describe(const experiment_client_cpus *c, const experiment_config *cfg,
                                     char *line, size_t size)
{
    const bool over = c->given && c->server > 0 && c->threads + c->server > c->cpus;
    const char *engine = experiment_engine_label(cfg->engine);
    char beside[96] = "the server runs elsewhere";
    if (c->server > 0)
        snprintf(beside, sizeof beside, "%d busy in the embedded %s server", c->server, engine);
    if (over)
        snprintf(line, size,
                 "warning: --client-threads %d beside the embedded %s server's %d busy thread%s: "
                 "%d threads on %d CPU%s, token stamps suffer from the wait for a CPU (the "
                 "default here: %d)",
                 c->threads, engine, c->server, c->server == 1 ? "" : "s", c->threads + c->server,
                 c->cpus, c->cpus == 1 ? "" : "s",
                 c->cpus - c->server > 1 ? c->cpus - c->server : 1);
    else
        snprintf(line, size, "client: %d event loop%s (%s; %d CPU%s available, %s)", c->threads,
                 c->threads == 1 ? "" : "s", c->given ? "--client-threads" : "the default",
                 c->cpus, c->cpus == 1 ? "" : "s", beside);
    return over;
}

int experiment_client_threads(const experiment_config *cfg)
{
    experiment_client_cpus c;
    experiment_client_cpus_of(cfg, &c);
    return c.threads;
}

int experiment_resolve(experiment_config *cfg, char *err)
{
    /* A tokenizer the trace's rows cannot be counted with is bad input now, not at the run. */
    if (cfg->wl.tokenizer[0]) {
        workload_tokenizer *tok;
        if (workload_tokenizer_load(cfg->wl.tokenizer, &tok, err) != 0)
            return -1;
        workload_tokenizer_free(tok);
    }
    if (cfg->rate_all_at_once && cfg->wl.num_prompts == 0)
        return err_set(err, "--request-rate inf (or max) sends every request at t = 0: give "
                            "--num-prompts N (how many)");
    if (cfg->duration_until_end) {
        if (workload_until_end(&cfg->wl, err) != 0)
            return -1;
        cfg->duration_until_end = false; /* resolved: idempotent */
    }
    /* --num-prompts with --duration: the run ends when the last request has, at most then. */
    if (cfg->wl.num_prompts > 0)
        cfg->wl.until_trace_end = true;
    cfg->client.threads = experiment_client_threads(cfg); /* recorded: config.json */
    if (cfg->engine == EXPERIMENT_REMOTE) {
        if (!cfg->client.target[0])
            return err_set(err, "a remote engine needs --target URL");
        memset(&cfg->cost, 0, sizeof cfg->cost); /* someone else's hardware */
        cfg->wl.max_context = cfg->sched.max_model_len; /* --max-model-len, else unbounded */
        /* A profile of that server (--hardware) is what the report predicts it with: a
         * malformed one is bad input now, not a note after the run. */
        if (cfg->device.hardware[0]) {
            cost_gpu gpu;
            if (cost_gpu_from_profile(cfg->device.hardware, &gpu, err) != 0)
                return -1;
        }
        return 0;
    }
    if (experiment_resolve_cost(cfg, err) != 0)
        return -1;
    if (cfg->disagg.prefill > 0 && !cfg->disagg.link[0] &&
        sim_kv_link_parse(SIM_KV_LINK_DEFAULT, &cfg->disagg, err) != 0)
        return -1;
    if (cfg->sched.max_model_len <= 0)
        cfg->sched.max_model_len = cfg->cost.arch.max_position;
    cfg->wl.max_context = cfg->sched.max_model_len;
    cfg->wl.max_prompt = cfg->sched.policy != SCHED_CHUNKED ? cfg->sched.max_num_batched_tokens : 0;
    if (cfg->sched.kv_blocks <= 0) {
        cfg->sched.kv_blocks = cost_kv_blocks(&cfg->cost, cfg->device.gpu_memory_utilization,
                                              cfg->sched.block_size);
        if (cfg->sched.kv_blocks <= 0)
            return err_set(err, "model %s does not fit in %s's memory (%.0f GB) with "
                                "gpu-memory-utilization %.2f",
                           cfg->cost.arch.name, cfg->cost.gpu.name, cfg->cost.gpu.mem_bytes / 1e9,
                           cfg->device.gpu_memory_utilization);
    }
    return 0;
}

int experiment_check(const experiment_config *cfg, char *err)
{
    workload_config wl = cfg->wl;
    wl.inject = true;
    if (workload_check(&wl, err) != 0)
        return -1;
    const bool sharded = cfg->wl.shard.count > 0;
    if (sharded && cfg->engine != EXPERIMENT_REMOTE)
        return err_set(err, "--shard needs --target URL: the shards must drive one server "
                            "(each would start its own embedded server)");
    if (sharded && cfg->shard.start_at_ns <= 0)
        return err_set(err, "--shard needs --start-at TIME: the shards agree on t = 0 only "
                            "through it");
    if (!sharded && cfg->shard.start_at_ns > 0)
        return err_set(err, "--start-at needs --shard I/N (a single process starts at once)");
    if (cfg->disagg.prefill > 0 && cfg->engine != EXPERIMENT_SIM)
        return err_set(err, "--disaggregate runs in the simulator only (sim, sweep --engine sim)");
    if (cfg->disagg.prefill == 0 && cfg->disagg.link[0])
        return err_set(err, "--kv-link needs --disaggregate P:D");
    if (cfg->engine == EXPERIMENT_REMOTE) {
        /* Its scheduler is the server's: only it can refuse a size. The trace and the
         * empirical files are ours: read them now, not after the server is up. */
        workload_plan plan;
        if (workload_plan_build(&wl, &plan, err) != 0)
            return -1;
        workload_plan_free(&plan);
        return 0;
    }
    if (sched_config_check(&cfg->sched, err) != 0)
        return -1;
    /* The simulator's admission rule is the embedded engine's: one check for both. */
    sim_config sim = {.wl = wl, .cost = cfg->cost, .sched = cfg->sched, .disagg = cfg->disagg};
    return sim_check(&sim, err);
}

bool experiment_no_injection_inside(const experiment_config *cfg, char *buf, size_t size)
{
    workload_config wl = cfg->wl;
    wl.inject = true;
    int64_t first;
    if (!workload_injects(&wl) || workload_injection_times(&wl, &first, 1) > 0)
        return false;
    char at[32], duration[32];
    units_format_duration(wl.inject_at_ns, at, sizeof at);
    units_format_duration(wl.duration_ns, duration, sizeof duration);
    snprintf(buf, size, "no injection falls inside the run: the first is planned at %s and the "
                        "run lasts %s, so the interference run has none (a --duration above %s, "
                        "or an --inject-at below %s)",
             at, duration, at, duration);
    return true;
}

double experiment_model_spike_ms(const experiment_config *cfg, int prompt_tokens)
{
    if (cfg->engine == EXPERIMENT_REMOTE)
        return 0;
    int users = cfg->wl.users > 0 ? cfg->wl.users : 0;
    int budget = cfg->sched.policy == SCHED_CHUNKED ? cfg->sched.max_num_batched_tokens : 0;
    return (double)cost_injection_step_ns(&cfg->cost, prompt_tokens, users,
                                          workload_typical_context(&cfg->wl), budget) /
           1e6;
}

/* ---- the embedded server's executor --------------------------------------------------- */

int experiment_create_executor(const experiment_config *cfg, FILE *notes, exec **out, char *err)
{
    if (cfg->engine == EXPERIMENT_EMULATE) {
        *out = exec_emulate_create(&cfg->cost, err);
        return *out ? 0 : -1;
    }
    if (cfg->engine != EXPERIMENT_CPU)
        return err_set(err, "the %s engine has no executor", experiment_engine_label(cfg->engine));
    const cost_params *cost = &cfg->cost;
    exec_cpu_config cpu = {
        .arch = cost->arch,
        .threads = cfg->device.threads,
        .kv_blocks = cfg->sched.kv_blocks,
        /* A prediction only makes sense for a CPU device: a profile or the "cpu" entry. */
        .cost = cost->gpu.threads > 0 ? cost : NULL,
    };
    if (exec_cpu_create(&cpu, out, err) != 0)
        return -1;
    if (notes && cost->gpu.threads > 0 && cost->gpu.threads != exec_cpu_threads(*out))
        fprintf(notes, "stallscope: note: %s was measured with %d thread%s, the engine runs %d: "
                       "modeled step times will not match\n",
                cost->gpu.name, cost->gpu.threads, cost->gpu.threads == 1 ? "" : "s",
                exec_cpu_threads(*out));
    return 0;
}
