/* options — the flags that fill an experiment_config, one table per group. Every command
 * that runs experiments (run, sim, sweep) and serve share them, so a flag means one thing
 * everywhere; the sweep applies its varied values through the same tables. */
#include <stdint.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/units.h"
#include "experiment/experiment.h"

#define MAX_TOKENS (1 << 24)
#define MAX_DURATION_NS (30LL * 24 * 3600 * CLOCK_NS_PER_S) /* 30 days */

/* ---- workload --------------------------------------------------------------------------- */

int experiment_preset(experiment_config *cfg, int argc, char **argv, char *err)
{
    const char *preset = opts_find(argc, argv, "preset");
    return preset ? workload_preset(&cfg->wl, preset, err) : 0;
}

static int wl_preset(void *c, const char *v, char *err)
{
    (void)c;
    /* Applied by experiment_preset before the other flags; here only validated. */
    workload_config probe;
    workload_default(&probe);
    return workload_preset(&probe, v, err);
}

/* "MIN..MAX" or "N" */
static int parse_range(const char *v, int *lo, int *hi, char *err)
{
    const char *dots = strstr(v, "..");
    char first[32];
    size_t n = dots ? (size_t)(dots - v) : strlen(v);
    if (n >= sizeof first)
        return err_set(err, "'%s' is too long", v);
    memcpy(first, v, n);
    first[n] = '\0';
    int64_t a, b;
    if (units_parse_count(first, &a, err) != 0 ||
        units_parse_count(dots ? dots + 2 : first, &b, err) != 0)
        return -1;
    if (a < 1 || b > MAX_TOKENS || a > MAX_TOKENS || b < 1)
        return err_set(err, "'%s' is out of range [1, %d]", v, MAX_TOKENS);
    if (b < a)
        return err_set(err, "'%s': MIN must not exceed MAX", v);
    *lo = (int)a;
    *hi = (int)b;
    return 0;
}
static int wl_bg_prompt(void *c, const char *v, char *err)
{
    workload_config *wl = &((experiment_config *)c)->wl;
    return parse_range(v, &wl->bg_prompt_min, &wl->bg_prompt_max, err);
}
static int wl_bg_answer(void *c, const char *v, char *err)
{
    workload_config *wl = &((experiment_config *)c)->wl;
    return parse_range(v, &wl->bg_answer_min, &wl->bg_answer_max, err);
}

#define C experiment_config
static const opts_spec workload_specs[] = {
    OPTS_FN("preset", "NAME",
            "lesson (default: 32 users, 8k prompt at 5,15,25,35 s, 40 s) | lesson-1s", wl_preset),
    OPTS_INT("users", "N", "background streaming chats (default 32)", C, wl.users, 1, 1000000),
    OPTS_DURATION("duration", "DUR", "length of each run (default 40s)", C, wl.duration_ns, 1,
                  MAX_DURATION_NS),
    OPTS_DURATION("inject-every", "DUR", "period of the long-prompt injector (default 10s)", C,
                  wl.inject_every_ns, 1, MAX_DURATION_NS),
    OPTS_DURATION("inject-at", "DUR", "first injection (default 5s)", C, wl.inject_at_ns, 0,
                  MAX_DURATION_NS),
    OPTS_FLAG("inject-poisson", "random (exponential) gaps with mean --inject-every", C,
              wl.inject_poisson),
    OPTS_INT("prompt-tokens", "N", "tokens of each injected prompt (default 8000; 8k, 16k ...)", C,
             wl.prompt_tokens, 1, MAX_TOKENS),
    OPTS_INT("inject-max-tokens", "N", "answer tokens of each injection (default 16)", C,
             wl.inject_max_tokens, 1, MAX_TOKENS),
    OPTS_FN("bg-prompt-tokens", "MIN..MAX", "background prompt tokens (default 32..128)",
            wl_bg_prompt),
    OPTS_FN("bg-answer-tokens", "MIN..MAX", "background answer tokens (default 256..1024)",
            wl_bg_answer),
    OPTS_INT64("seed", "N", "seed of the length draws and prompt ids (default 1)", C, wl.seed, 0,
               INT64_MAX),
};

opts_group experiment_workload_group(experiment_config *cfg)
{
    return (opts_group){"workload", workload_specs, OPTS_COUNT(workload_specs), cfg};
}

/* ---- device ------------------------------------------------------------------------------ */

static int dev_lesson_flops(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((experiment_config *)c)->device.params_override = 8e9;
    return 0;
}

static const opts_spec device_specs[] = {
    OPTS_STRING("gpu", "G", "GPU of the catalog (default h100-sxm); see 'stallscope model --list'",
                C, device.gpu),
    OPTS_STRING("model", "M", "model of the catalog (default llama-3.1-8b; small on the cpu engine)",
                C, device.model),
    OPTS_STRING("model-config", "FILE", "a Hugging Face config.json of a Llama-family model", C,
                device.model_config),
    OPTS_POSITIVE("params", "N",
                  "count every token as 2 x N FLOPs and weights as N params (e.g. 8e9)", C,
                  device.params_override),
    OPTS_FN("lesson-flops", NULL, "the lesson's arithmetic: --params 8e9 (16 GFLOP per token)",
            dev_lesson_flops),
    OPTS_DURATION("step-overhead", "DUR", "fixed time added to every step (default 0; e.g. 5ms)",
                  C, device.step_overhead_ns, 0, 3600 * CLOCK_NS_PER_S),
    OPTS_FRACTION("compute-efficiency", "F", "fraction of peak FLOP/s reached (default 1.0)", C,
                  device.compute_efficiency),
    OPTS_FRACTION("bandwidth-efficiency", "F",
                  "fraction of peak memory bandwidth reached (default 1.0)", C,
                  device.bandwidth_efficiency),
    OPTS_FRACTION("gpu-memory-utilization", "F",
                  "fraction of GPU memory for weights + KV (default 0.9)", C,
                  device.gpu_memory_utilization),
    OPTS_STRING("hardware", "FILE", "a hardware profile from 'stallscope calibrate' instead of --gpu",
                C, device.hardware),
    OPTS_INT("threads", "N", "cpu engine: threads of the forward pass (default: cores - 1, at least 1)",
             C, device.threads, 1, 1024),
};

opts_group experiment_device_group(experiment_config *cfg)
{
    return (opts_group){"engine (cost model)", device_specs, OPTS_COUNT(device_specs), cfg};
}

/* ---- scheduler --------------------------------------------------------------------------- */

static int sch_policy(void *c, const char *v, char *err)
{
    return sched_policy_parse(v, &((experiment_config *)c)->sched.policy, err);
}
static int sch_chunked_on(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((experiment_config *)c)->sched.policy = SCHED_CHUNKED;
    return 0;
}
static int sch_chunked_off(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((experiment_config *)c)->sched.policy = SCHED_MIXED;
    return 0;
}

static const opts_spec sched_specs[] = {
    OPTS_FN("policy", "P", "mixed | chunked | prefill-first (default mixed: one-step prefill)",
            sch_policy),
    OPTS_INT("max-num-batched-tokens", "N", "token budget per step (default 16384)", C,
             sched.max_num_batched_tokens, 1, MAX_TOKENS),
    OPTS_INT("max-num-seqs", "N", "running requests at most (default 256)", C, sched.max_num_seqs,
             1, 1 << 20),
    OPTS_INT("max-model-len", "N", "prompt + completion tokens at most (default: the model's)", C,
             sched.max_model_len, 1, MAX_TOKENS),
    OPTS_INT64("kv-blocks", "N", "KV-cache blocks of 16 tokens (default: from GPU memory)", C,
               sched.kv_blocks, 1, (int64_t)1 << 32),
    OPTS_FN("enable-chunked-prefill", NULL, "alias for --policy chunked", sch_chunked_on),
    OPTS_FN("no-enable-chunked-prefill", NULL, "alias for --policy mixed", sch_chunked_off),
};

opts_group experiment_sched_group(experiment_config *cfg)
{
    return (opts_group){"scheduler (vLLM names)", sched_specs, OPTS_COUNT(sched_specs), cfg};
}

/* ---- client ------------------------------------------------------------------------------ */

static int cl_target(void *c, const char *v, char *err)
{
    experiment_client *cl = &((experiment_config *)c)->client;
    if (strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0)
        return err_set(err, "'%s' is not an http:// or https:// URL", v);
    if (strlen(v) >= sizeof cl->target)
        return err_set(err, "the URL is longer than %zu bytes", sizeof cl->target - 1);
    strcpy(cl->target, v);
    return 0;
}
static int cl_endpoint(void *c, const char *v, char *err)
{
    return driver_endpoint_parse(v, &((experiment_config *)c)->client.endpoint, err);
}
static int cl_transport(void *c, const char *v, char *err)
{
    return stream_transport_parse(v, &((experiment_config *)c)->client.transport, err);
}

static int cl_scrape_metrics(void *c, const char *v, char *err)
{
    experiment_client *cl = &((experiment_config *)c)->client;
    if (strcmp(v, "auto") == 0)
        v = "";
    else if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0 && strncmp(v, "http://", 7) != 0 &&
             strncmp(v, "https://", 8) != 0)
        return err_set(err, "'%s' is not auto, on, off or an http:// or https:// URL", v);
    if (strlen(v) >= sizeof cl->scrape_metrics)
        return err_set(err, "the URL is longer than %zu bytes", sizeof cl->scrape_metrics - 1);
    strcpy(cl->scrape_metrics, v);
    return 0;
}

static const opts_spec client_specs[] = {
    OPTS_FN("target", "URL",
            "an OpenAI-compatible server (vLLM, SGLang, llama.cpp ...); default: start the "
            "embedded server",
            cl_target),
    OPTS_FN("endpoint", "E", "completions (default) | chat", cl_endpoint),
    OPTS_STRING("model-name", "NAME",
                "the \"model\" of each request (default: the first of /v1/models)", C,
                client.model_name),
    OPTS_DURATION("request-timeout", "DUR",
                  "a request with no bytes for this long fails (default 30s)", C,
                  client.request_timeout_ns, 1, 24 * 3600 * CLOCK_NS_PER_S),
    OPTS_DURATION("warmup", "DUR",
                  "background load before t = 0, not recorded: users are mid-answer when the "
                  "run starts (default 2s)",
                  C, client.warmup_ns, 0, 3600 * CLOCK_NS_PER_S),
    OPTS_FLAG("fidelity",
              "ask --target for stallscope's per-chunk emit times (on for the embedded server)", C,
              client.fidelity),
    OPTS_FLAG("insecure", "https without certificate checks (self-signed test servers)", C,
              client.insecure),
    OPTS_FN("transport", "T",
            "raw | curl | auto (default: raw, our HTTP/1.1 client stamping each token with the "
            "kernel's receive time, for http:// and https://; curl when http_proxy, "
            "https_proxy or all_proxy applies to the target, for proxies, HTTP/2, other auth)",
            cl_transport),
    OPTS_INT("client-threads", "N",
             "event loops (threads) of the load generator, the users spread over them; the "
             "injector has one more of its own (default: the online cores the server leaves, "
             "at least 1: all but the cpu engine's --threads, all but one with emulate, all "
             "with --target)",
             C, client.threads, 1, 256),
    OPTS_FN("scrape-metrics", "URL|on|off",
            "the server's Prometheus metrics every 250 ms into server_metrics.csv (default "
            "auto: the target's /metrics when it answers; on: also the embedded server's)",
            cl_scrape_metrics),
};

opts_group experiment_client_group(experiment_config *cfg)
{
    return (opts_group){"client", client_specs, OPTS_COUNT(client_specs), cfg};
}

/* ---- analysis ----------------------------------------------------------------------------- */

static const opts_spec analysis_specs[] = {
    OPTS_FLAG("no-baseline", "skip the baseline run (injector off)", C, no_baseline),
    OPTS_DURATION("stall-threshold", "DUR",
                  "a stall is a gap above this (default 5 x baseline p50; e.g. 50ms)", C,
                  stall_threshold_ns, 1, 3600 * CLOCK_NS_PER_S),
};
#undef C

opts_group experiment_analysis_group(experiment_config *cfg)
{
    return (opts_group){"analysis", analysis_specs, OPTS_COUNT(analysis_specs), cfg};
}

/* ---- secrets ------------------------------------------------------------------------------ */

/* The values point into argv, which outlives every run. */
static int sec_api_key(void *c, const char *v, char *err)
{
    if (!v[0])
        return err_set(err, "the key is empty");
    ((experiment_secrets *)c)->api_key = v;
    return 0;
}
static int sec_header(void *c, const char *v, char *err)
{
    experiment_secrets *s = c;
    const char *colon = strchr(v, ':');
    if (!colon || colon == v)
        return err_set(err, "'%s' is not 'Name: value'", v);
    if (s->n_headers >= EXPERIMENT_MAX_HEADERS)
        return err_set(err, "at most %d headers", EXPERIMENT_MAX_HEADERS);
    s->headers[s->n_headers++] = v;
    return 0;
}

static const opts_spec secrets_specs[] = {
    OPTS_FN("api-key", "KEY", "sent as Authorization: Bearer KEY (never written to disk)",
            sec_api_key),
    OPTS_FN("header", "'K: V'", "an extra request header (repeatable; never written to disk)",
            sec_header),
};

opts_group experiment_secrets_group(experiment_secrets *secrets)
{
    return (opts_group){"credentials", secrets_specs, OPTS_COUNT(secrets_specs), secrets};
}
