#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/err.h"
#include "common/units.h"
#include "engine/exec_cpu.h"

int cli_usage_error(const char *cmd, const char *msg)
{
    fprintf(stderr, "stallscope %s: %s\n", cmd, msg);
    return CLI_EXIT_USAGE;
}

static int copy_name(char *dst, size_t size, const char *value, char *err)
{
    if (strlen(value) >= size || value[0] == '\0')
        return err_set(err, "'%s' is empty or too long", value);
    strcpy(dst, value);
    return 0;
}

static int parse_int_count(const char *value, int *out, int64_t min, int64_t max, char *err)
{
    int64_t v;
    if (units_parse_count(value, &v, err) != 0)
        return -1;
    if (v < min || v > max)
        return err_set(err, "%lld is out of range [%lld, %lld]", (long long)v, (long long)min,
                       (long long)max);
    *out = (int)v;
    return 0;
}

static int parse_fraction(const char *value, double *out, char *err)
{
    double v;
    if (units_parse_quantity(value, &v, err) != 0)
        return -1;
    if (!(v > 0 && v <= 1))
        return err_set(err, "'%s' must be in (0, 1]", value);
    *out = v;
    return 0;
}

/* ---- engine ---------------------------------------------------------------------- */

void cli_engine_defaults(cli_engine_cfg *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    strcpy(cfg->gpu, "h100-sxm");
    strcpy(cfg->model, "llama-3.1-8b");
    cfg->compute_efficiency = 1.0;
    cfg->bandwidth_efficiency = 1.0;
    cfg->gpu_memory_utilization = 0.9;
}

static int eng_gpu(void *c, const char *v, char *err)
{
    ((cli_engine_cfg *)c)->gpu_set = true;
    return copy_name(((cli_engine_cfg *)c)->gpu, sizeof ((cli_engine_cfg *)c)->gpu, v, err);
}
static int eng_model(void *c, const char *v, char *err)
{
    ((cli_engine_cfg *)c)->model_set = true;
    return copy_name(((cli_engine_cfg *)c)->model, sizeof ((cli_engine_cfg *)c)->model, v, err);
}
static int eng_model_config(void *c, const char *v, char *err)
{
    cli_engine_cfg *cfg = c;
    cfg->model_set = true;
    return copy_name(cfg->model_config, sizeof cfg->model_config, v, err);
}
static int eng_hardware(void *c, const char *v, char *err)
{
    cli_engine_cfg *cfg = c;
    cfg->gpu_set = true;
    return copy_name(cfg->hardware, sizeof cfg->hardware, v, err);
}
static int eng_threads(void *c, const char *v, char *err)
{
    return parse_int_count(v, &((cli_engine_cfg *)c)->threads, 1, 1024, err);
}
static int eng_params(void *c, const char *v, char *err)
{
    double p;
    if (units_parse_quantity(v, &p, err) != 0)
        return -1;
    if (!(p > 0))
        return err_set(err, "'%s' must be positive", v);
    ((cli_engine_cfg *)c)->params_override = p;
    return 0;
}
static int eng_lesson_flops(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((cli_engine_cfg *)c)->params_override = 8e9;
    return 0;
}
static int eng_overhead(void *c, const char *v, char *err)
{
    int64_t ns;
    if (units_parse_duration_ns(v, &ns, err) != 0)
        return -1;
    if (ns < 0)
        return err_set(err, "'%s' must not be negative", v);
    ((cli_engine_cfg *)c)->step_overhead_ns = ns;
    ((cli_engine_cfg *)c)->step_overhead_set = true;
    return 0;
}
static int eng_ceff(void *c, const char *v, char *err)
{
    return parse_fraction(v, &((cli_engine_cfg *)c)->compute_efficiency, err);
}
static int eng_beff(void *c, const char *v, char *err)
{
    return parse_fraction(v, &((cli_engine_cfg *)c)->bandwidth_efficiency, err);
}
static int eng_memutil(void *c, const char *v, char *err)
{
    return parse_fraction(v, &((cli_engine_cfg *)c)->gpu_memory_utilization, err);
}

static const opts_spec engine_specs[] = {
    {"gpu", "G", "GPU of the catalog (default h100-sxm); see 'stallscope model --list'", eng_gpu},
    {"model", "M", "model of the catalog (default llama-3.1-8b)", eng_model},
    {"model-config", "FILE", "a Hugging Face config.json of a Llama-family model", eng_model_config},
    {"params", "N", "count every token as 2 x N FLOPs and weights as N params (e.g. 8e9)",
     eng_params},
    {"lesson-flops", NULL, "the lesson's arithmetic: --params 8e9 (16 GFLOP per token)",
     eng_lesson_flops},
    {"step-overhead", "DUR", "fixed time added to every step (default 0; e.g. 5ms)", eng_overhead},
    {"compute-efficiency", "F", "fraction of peak FLOP/s reached (default 1.0)", eng_ceff},
    {"bandwidth-efficiency", "F", "fraction of peak memory bandwidth reached (default 1.0)",
     eng_beff},
    {"gpu-memory-utilization", "F", "fraction of GPU memory for weights + KV (default 0.9)",
     eng_memutil},
    {"hardware", "FILE", "a hardware profile from 'stallscope calibrate' instead of --gpu",
     eng_hardware},
    {"threads", "N", "cpu engine: threads of the forward pass (default: cores - 1, at least 1)",
     eng_threads},
};

opts_group cli_engine_group(cli_engine_cfg *cfg)
{
    return (opts_group){"engine (cost model)", engine_specs,
                        (int)(sizeof engine_specs / sizeof engine_specs[0]), cfg};
}

int cli_engine_resolve(const cli_engine_cfg *cfg, cost_params *out, char *err)
{
    cost_gpu gpu;
    cost_arch arch;
    if (cfg->hardware[0]) {
        if (cost_gpu_from_profile(cfg->hardware, &gpu, err) != 0)
            return -1;
    } else if (cost_gpu_find(cfg->gpu, &gpu, err) != 0) {
        return -1;
    }
    if (cfg->model_config[0]) {
        if (cost_arch_from_hf_config(cfg->model_config, &arch, err) != 0)
            return -1;
    } else if (cost_arch_find(cfg->model, &arch, err) != 0) {
        return -1;
    }
    cost_params_init(out, &gpu, &arch);
    out->compute_efficiency = cfg->compute_efficiency;
    out->bandwidth_efficiency = cfg->bandwidth_efficiency;
    if (cfg->step_overhead_set || gpu.step_overhead_ns == 0)
        out->step_overhead_ns = cfg->step_overhead_ns;
    out->params_override = cfg->params_override;
    return 0;
}

void cli_engine_cpu_defaults(cli_engine_cfg *cfg)
{
    if (!cfg->gpu_set)
        strcpy(cfg->gpu, "cpu");
    if (!cfg->model_set)
        strcpy(cfg->model, CLI_CPU_DEFAULT_MODEL);
}

int cli_engine_create_cpu(const cli_engine_cfg *cfg, const cost_params *cost,
                          const sched_config *sched, struct exec **out, char *err)
{
    exec_cpu_config cpu = {
        .arch = cost->arch,
        .threads = cfg->threads,
        .kv_blocks = sched->kv_blocks,
        /* A prediction only makes sense for a CPU device: a profile or the "cpu" entry. */
        .cost = cost->gpu.threads > 0 ? cost : NULL,
    };
    if (exec_cpu_create(&cpu, out, err) != 0)
        return -1;
    if (cost->gpu.threads > 0 && cost->gpu.threads != exec_cpu_threads(*out))
        fprintf(stderr, "stallscope: note: %s was measured with %d thread%s, the engine runs %d: "
                        "modeled step times will not match\n",
                cost->gpu.name, cost->gpu.threads, cost->gpu.threads == 1 ? "" : "s",
                exec_cpu_threads(*out));
    return 0;
}

/* ---- scheduler ------------------------------------------------------------------- */

void cli_sched_defaults(cli_sched_cfg *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    /* The lesson's setting: one-step prefill (vLLM --max-num-batched-tokens 16384,
     * chunked prefill off). */
    cfg->sched.policy = SCHED_MIXED;
    cfg->sched.max_num_batched_tokens = 16384;
    cfg->sched.max_num_seqs = 256; /* vLLM's default */
    cfg->sched.block_size = 16;
}

static int sch_policy(void *c, const char *v, char *err)
{
    return sched_policy_parse(v, &((cli_sched_cfg *)c)->sched.policy, err);
}
static int sch_chunked_on(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((cli_sched_cfg *)c)->sched.policy = SCHED_CHUNKED;
    return 0;
}
static int sch_chunked_off(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((cli_sched_cfg *)c)->sched.policy = SCHED_MIXED;
    return 0;
}
static int sch_budget(void *c, const char *v, char *err)
{
    return parse_int_count(v, &((cli_sched_cfg *)c)->sched.max_num_batched_tokens, 1, 1 << 24,
                           err);
}
static int sch_seqs(void *c, const char *v, char *err)
{
    return parse_int_count(v, &((cli_sched_cfg *)c)->sched.max_num_seqs, 1, 1 << 20, err);
}
static int sch_max_len(void *c, const char *v, char *err)
{
    cli_sched_cfg *cfg = c;
    cfg->max_model_len_set = true;
    return parse_int_count(v, &cfg->sched.max_model_len, 1, 1 << 24, err);
}
static int sch_kv_blocks(void *c, const char *v, char *err)
{
    int64_t n;
    if (units_parse_count(v, &n, err) != 0)
        return -1;
    if (n <= 0 || n > (int64_t)1 << 32)
        return err_set(err, "'%s' must be a positive block count", v);
    ((cli_sched_cfg *)c)->kv_blocks_override = n;
    return 0;
}

static const opts_spec sched_specs[] = {
    {"policy", "P", "mixed | chunked | prefill-first (default mixed: one-step prefill)",
     sch_policy},
    {"max-num-batched-tokens", "N", "token budget per step (default 16384)", sch_budget},
    {"max-num-seqs", "N", "running requests at most (default 256)", sch_seqs},
    {"max-model-len", "N", "prompt + completion tokens at most (default: the model's)",
     sch_max_len},
    {"kv-blocks", "N", "KV-cache blocks of 16 tokens (default: from GPU memory)", sch_kv_blocks},
    {"enable-chunked-prefill", NULL, "alias for --policy chunked", sch_chunked_on},
    {"no-enable-chunked-prefill", NULL, "alias for --policy mixed", sch_chunked_off},
};

opts_group cli_sched_group(cli_sched_cfg *cfg)
{
    return (opts_group){"scheduler (vLLM names)", sched_specs,
                        (int)(sizeof sched_specs / sizeof sched_specs[0]), cfg};
}

int cli_sched_resolve(cli_sched_cfg *cfg, const cost_params *cost, double gpu_mem_util,
                      char *err)
{
    if (!cfg->max_model_len_set)
        cfg->sched.max_model_len = cost->arch.max_position;
    if (cfg->kv_blocks_override > 0) {
        cfg->sched.kv_blocks = cfg->kv_blocks_override;
    } else {
        cfg->sched.kv_blocks = cost_kv_blocks(cost, gpu_mem_util, cfg->sched.block_size);
        if (cfg->sched.kv_blocks <= 0)
            return err_set(err, "model %s does not fit in %s's memory (%.0f GB) with "
                                "gpu-memory-utilization %.2f",
                           cost->arch.name, cost->gpu.name, cost->gpu.mem_bytes / 1e9,
                           gpu_mem_util);
    }
    return sched_config_check(&cfg->sched, err);
}

/* ---- workload -------------------------------------------------------------------- */

int cli_workload_defaults(cli_workload_cfg *cfg, int argc, char **argv, char *err)
{
    workload_default(&cfg->wl);
    const char *preset = opts_find(argc, argv, "preset");
    return workload_preset(&cfg->wl, preset ? preset : "lesson", err);
}

static int wl_preset(void *c, const char *v, char *err)
{
    (void)c;
    /* Applied by cli_workload_defaults before the other flags; here only validated. */
    workload_config probe;
    workload_default(&probe);
    return workload_preset(&probe, v, err);
}
static int wl_users(void *c, const char *v, char *err)
{
    return parse_int_count(v, &((cli_workload_cfg *)c)->wl.users, 1, 1000000, err);
}
static int parse_positive_duration(const char *v, int64_t *out, bool allow_zero, char *err)
{
    int64_t ns;
    if (units_parse_duration_ns(v, &ns, err) != 0)
        return -1;
    if (ns < 0 || (!allow_zero && ns == 0))
        return err_set(err, "'%s' must be %s", v, allow_zero ? "zero or more" : "positive");
    *out = ns;
    return 0;
}
static int wl_duration(void *c, const char *v, char *err)
{
    return parse_positive_duration(v, &((cli_workload_cfg *)c)->wl.duration_ns, false, err);
}
static int wl_every(void *c, const char *v, char *err)
{
    return parse_positive_duration(v, &((cli_workload_cfg *)c)->wl.inject_every_ns, false, err);
}
static int wl_at(void *c, const char *v, char *err)
{
    return parse_positive_duration(v, &((cli_workload_cfg *)c)->wl.inject_at_ns, true, err);
}
static int wl_poisson(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((cli_workload_cfg *)c)->wl.inject_poisson = true;
    return 0;
}
static int wl_prompt(void *c, const char *v, char *err)
{
    return parse_int_count(v, &((cli_workload_cfg *)c)->wl.prompt_tokens, 1, 1 << 24, err);
}
static int wl_inject_max(void *c, const char *v, char *err)
{
    return parse_int_count(v, &((cli_workload_cfg *)c)->wl.inject_max_tokens, 1, 1 << 24, err);
}
static int wl_seed(void *c, const char *v, char *err)
{
    int64_t s;
    if (units_parse_count(v, &s, err) != 0)
        return -1;
    ((cli_workload_cfg *)c)->wl.seed = (uint64_t)s;
    return 0;
}
/* "MIN..MAX" or "N" */
static int parse_range(const char *v, int *lo, int *hi, char *err)
{
    char buf[64];
    if (strlen(v) >= sizeof buf)
        return err_set(err, "'%s' is too long", v);
    strcpy(buf, v);
    char *dots = strstr(buf, "..");
    const char *a = buf, *b = buf;
    if (dots) {
        *dots = '\0';
        b = dots + 2;
    }
    if (parse_int_count(a, lo, 1, 1 << 24, err) != 0 || parse_int_count(b, hi, 1, 1 << 24, err) != 0)
        return -1;
    if (*hi < *lo)
        return err_set(err, "'%s': MIN must not exceed MAX", v);
    return 0;
}
static int wl_bg_prompt(void *c, const char *v, char *err)
{
    workload_config *wl = &((cli_workload_cfg *)c)->wl;
    return parse_range(v, &wl->bg_prompt_min, &wl->bg_prompt_max, err);
}
static int wl_bg_answer(void *c, const char *v, char *err)
{
    workload_config *wl = &((cli_workload_cfg *)c)->wl;
    return parse_range(v, &wl->bg_answer_min, &wl->bg_answer_max, err);
}

static const opts_spec workload_specs[] = {
    {"preset", "NAME", "lesson (default: 32 users, 8k prompt at 5,15,25,35 s, 40 s) | lesson-1s",
     wl_preset},
    {"users", "N", "background streaming chats (default 32)", wl_users},
    {"duration", "DUR", "length of each run (default 40s)", wl_duration},
    {"inject-every", "DUR", "period of the long-prompt injector (default 10s)", wl_every},
    {"inject-at", "DUR", "first injection (default 5s)", wl_at},
    {"inject-poisson", NULL, "random (exponential) gaps with mean --inject-every", wl_poisson},
    {"prompt-tokens", "N", "tokens of each injected prompt (default 8000; 8k, 16k ...)", wl_prompt},
    {"inject-max-tokens", "N", "answer tokens of each injection (default 16)", wl_inject_max},
    {"bg-prompt-tokens", "MIN..MAX", "background prompt tokens (default 32..128)", wl_bg_prompt},
    {"bg-answer-tokens", "MIN..MAX", "background answer tokens (default 256..1024)", wl_bg_answer},
    {"seed", "N", "seed of the length draws and prompt ids (default 1)", wl_seed},
};

opts_group cli_workload_group(cli_workload_cfg *cfg)
{
    return (opts_group){"workload", workload_specs,
                        (int)(sizeof workload_specs / sizeof workload_specs[0]), cfg};
}

/* ---- config.json ----------------------------------------------------------------- */

json_t *cli_config_to_json(const char *label, const char *engine, const char *target,
                           const workload_config *wl, const cost_params *cost,
                           const sched_config *sched, int argc, char **argv)
{
    json_t *root = json_object();
    json_object_set_new(root, "label", json_string(label ? label : ""));
    json_object_set_new(root, "engine", json_string(engine ? engine : ""));
    json_object_set_new(root, "target", json_string(target ? target : ""));
    json_object_set_new(root, "duration_s", json_real((double)wl->duration_ns / 1e9));
    json_object_set_new(root, "users", json_integer(wl->users));
    json_object_set_new(root, "complete", json_true());
    json_t *args = json_array();
    for (int i = 0; i < argc; i++)
        json_array_append_new(args, json_string(argv[i]));
    json_object_set_new(root, "argv", args);

    json_t *w = json_object();
    json_object_set_new(w, "users", json_integer(wl->users));
    json_object_set_new(w, "duration_ns", json_integer(wl->duration_ns));
    json_object_set_new(w, "inject", json_boolean(wl->inject));
    json_object_set_new(w, "inject_at_ns", json_integer(wl->inject_at_ns));
    json_object_set_new(w, "inject_every_ns", json_integer(wl->inject_every_ns));
    json_object_set_new(w, "inject_poisson", json_boolean(wl->inject_poisson));
    json_object_set_new(w, "prompt_tokens", json_integer(wl->prompt_tokens));
    json_object_set_new(w, "inject_max_tokens", json_integer(wl->inject_max_tokens));
    json_object_set_new(w, "bg_prompt_min", json_integer(wl->bg_prompt_min));
    json_object_set_new(w, "bg_prompt_max", json_integer(wl->bg_prompt_max));
    json_object_set_new(w, "bg_answer_min", json_integer(wl->bg_answer_min));
    json_object_set_new(w, "bg_answer_max", json_integer(wl->bg_answer_max));
    json_object_set_new(w, "seed", json_integer((json_int_t)wl->seed));
    json_object_set_new(root, "workload", w);

    if (cost) {
        json_t *c = json_object();
        json_object_set_new(c, "gpu", json_string(cost->gpu.name));
        json_object_set_new(c, "peak_flops", json_real(cost->gpu.peak_flops));
        json_object_set_new(c, "mem_bandwidth", json_real(cost->gpu.mem_bandwidth));
        json_object_set_new(c, "model", json_string(cost->arch.name));
        json_object_set_new(c, "n_layers", json_integer(cost->arch.n_layers));
        json_object_set_new(c, "hidden", json_integer(cost->arch.hidden));
        json_object_set_new(c, "n_heads", json_integer(cost->arch.n_heads));
        json_object_set_new(c, "n_kv_heads", json_integer(cost->arch.n_kv_heads));
        json_object_set_new(c, "head_dim", json_integer(cost->arch.head_dim));
        json_object_set_new(c, "ffn", json_integer(cost->arch.ffn));
        json_object_set_new(c, "vocab", json_integer(cost->arch.vocab));
        json_object_set_new(c, "compute_efficiency", json_real(cost->compute_efficiency));
        json_object_set_new(c, "bandwidth_efficiency", json_real(cost->bandwidth_efficiency));
        json_object_set_new(c, "step_overhead_ns", json_integer(cost->step_overhead_ns));
        json_object_set_new(c, "params_override", json_real(cost->params_override));
        json_object_set_new(c, "attention_flops", json_real(cost->gpu.attention_flops));
        json_object_set_new(c, "bytes_per_param", json_real(cost->bytes_per_param));
        json_object_set_new(c, "kv_bytes_per_elem", json_real(cost->kv_bytes_per_elem));
        json_object_set_new(c, "threads", json_integer(cost->gpu.threads));
        json_object_set_new(root, "cost", c);
    }
    if (sched) {
        json_t *s = json_object();
        json_object_set_new(s, "policy", json_string(sched_policy_name(sched->policy)));
        json_object_set_new(s, "max_num_batched_tokens", json_integer(sched->max_num_batched_tokens));
        json_object_set_new(s, "max_num_seqs", json_integer(sched->max_num_seqs));
        json_object_set_new(s, "max_model_len", json_integer(sched->max_model_len));
        json_object_set_new(s, "block_size", json_integer(sched->block_size));
        json_object_set_new(s, "kv_blocks", json_integer(sched->kv_blocks));
        json_object_set_new(root, "sched", s);
    }
    return root;
}
