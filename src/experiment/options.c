/* options — the flags that fill an experiment_config, one table per group. Every command
 * that runs experiments (run, sim, sweep) and serve share them, so a flag means one thing
 * everywhere; the sweep applies its varied values through the same tables. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/units.h"
#include "experiment/options.h"

#define MAX_TOKENS (1 << 24)
#define MAX_DURATION_NS (30LL * 24 * 3600 * CLOCK_NS_PER_S) /* 30 days */

/* ---- workload --------------------------------------------------------------------------- */

int experiment_preset(experiment_config *cfg, int argc, char **argv, char *err)
{
    const char *preset = opts_find(argc, argv, "preset");
    if (preset && workload_preset(&cfg->wl, preset, err) != 0)
        return -1;
    /* Open-loop arrivals replace the closed users unless --users asks for both. */
    const bool open_loop = opts_find(argc, argv, "request-rate") ||
                           opts_find(argc, argv, "trace") || opts_find(argc, argv, "num-prompts");
    if (open_loop && !opts_find(argc, argv, "users"))
        cfg->wl.users = 0;
    /* A trace, or --num-prompts, without --duration runs until its last request has
     * finished (experiment_resolve), not for 40 s. */
    cfg->duration_until_end =
        (opts_find(argc, argv, "trace") || opts_find(argc, argv, "num-prompts")) &&
        !opts_find(argc, argv, "duration");
    return 0;
}

static int wl_preset(void *c, const char *v, char *err)
{
    (void)c;
    /* Applied by experiment_preset before the other flags; here only validated. */
    workload_config probe;
    workload_default(&probe);
    return workload_preset(&probe, v, err);
}

/* The older flags: "MIN..MAX" or "N", a uniform distribution. */
static int parse_range(const char *v, workload_dist *d, char *err)
{
    if (strchr(v, ':'))
        return err_set(err, "'%s': MIN..MAX or N (--prompt-len/--answer-len take a distribution)",
                       v);
    return workload_dist_parse(v, d, err);
}
static int wl_bg_prompt(void *c, const char *v, char *err)
{
    return parse_range(v, &((experiment_config *)c)->wl.prompt_len, err);
}
static int wl_bg_answer(void *c, const char *v, char *err)
{
    return parse_range(v, &((experiment_config *)c)->wl.answer_len, err);
}
static int wl_prompt_len(void *c, const char *v, char *err)
{
    return workload_dist_parse(v, &((experiment_config *)c)->wl.prompt_len, err);
}
static int wl_answer_len(void *c, const char *v, char *err)
{
    return workload_dist_parse(v, &((experiment_config *)c)->wl.answer_len, err);
}
/* A rate, or inf (max): every request at t = 0, vLLM's default (it needs --num-prompts:
 * experiment_resolve). */
static int wl_request_rate(void *c, const char *v, char *err)
{
    experiment_config *cfg = c;
    if (strcmp(v, "inf") == 0 || strcmp(v, "max") == 0) {
        cfg->wl.request_rate = 0;
        cfg->rate_all_at_once = true;
        return 0;
    }
    char *end = NULL;
    double r = strtod(v, &end);
    if (end == v || *end || !(r > 0) || !isfinite(r))
        return err_set(err, "'%s' is not a rate > 0 (requests per second), inf or max", v);
    cfg->wl.request_rate = r;
    cfg->rate_all_at_once = false;
    return 0;
}
static int wl_trace_format(void *c, const char *v, char *err)
{
    trace_format f;
    if (trace_format_parse(v, &f, err) != 0)
        return -1;
    ((experiment_config *)c)->wl.trace_format = (int)f;
    return 0;
}

#define C experiment_config
static const opts_spec workload_specs[] = {
    OPTS_FN("preset", "NAME",
            "lesson (default: 32 users, 8k prompt at 5,15,25,35 s, 40 s) | lesson-1s | chat | "
            "summarization (open loop at 2 and 1 req/s, 60 s, Sarathi-Serve's lengths: "
            "docs/guide/traces.md)",
            wl_preset),
    OPTS_INT("users", "N",
             "closed-loop streaming chats (default 32; 0 with --request-rate or --trace, which "
             "replace them unless --users is given: then both run)",
             C, wl.users, 0, 1000000),
    OPTS_DURATION("duration", "DUR",
                  "length of each run (default 40s; with --trace: until the trace's last request "
                  "has finished, at most 10 min after its send)",
                  C, wl.duration_ns, 1, MAX_DURATION_NS),
    OPTS_DURATION("warmup", "DUR",
                  "the closed users start this long before t = 0, unrecorded: they are "
                  "mid-answer when the run starts, in run and sim alike (default 2s; tune: 0, "
                  "its search and --verify both cold)",
                  C, client.warmup_ns, 0, 3600 * CLOCK_NS_PER_S),
    OPTS_DURATION("inject-every", "DUR", "period of the long-prompt injector (default 10s)", C,
                  wl.inject_every_ns, 1, MAX_DURATION_NS),
    OPTS_DURATION("inject-at", "DUR", "first injection (default 5s)", C, wl.inject_at_ns, 0,
                  MAX_DURATION_NS),
    OPTS_FLAG("inject-poisson", "random (exponential) gaps with mean --inject-every", C,
              wl.inject_poisson),
    OPTS_FLAG("no-inject",
              "no injector at all (a trace's own long prompts alone): one run, OUT/traffic, "
              "no baseline",
              C, wl.no_inject),
    OPTS_INT("prompt-tokens", "N", "tokens of each injected prompt (default 8000; 8k, 16k ...)", C,
             wl.prompt_tokens, 1, MAX_TOKENS),
    OPTS_INT("inject-max-tokens", "N", "answer tokens of each injection (default 16)", C,
             wl.inject_max_tokens, 1, MAX_TOKENS),
    OPTS_FN("prompt-len", "DIST",
            "background prompt tokens: fixed:N | uniform:A-B | lognormal:MEDIAN,P90[,MAX] | "
            "empirical:FILE[@COLUMN] (default uniform:32-128)",
            wl_prompt_len),
    OPTS_FN("answer-len", "DIST", "background answer tokens, as --prompt-len (default "
                                  "uniform:256-1024)",
            wl_answer_len),
    OPTS_FN("bg-prompt-tokens", "MIN..MAX", "the same as --prompt-len uniform:MIN-MAX",
            wl_bg_prompt),
    OPTS_FN("bg-answer-tokens", "MIN..MAX", "the same as --answer-len uniform:MIN-MAX",
            wl_bg_answer),
    OPTS_INT("system-prompt-tokens", "N",
             "every background request (closed users, rate and trace arrivals; not the "
             "injector) starts with the same N tokens, a shared system prompt (default 0)",
             C, wl.system_prompt_tokens, 0, MAX_TOKENS),
    OPTS_INT("turns", "K",
             "each closed user holds conversations of K turns, each turn's prompt the system "
             "prompt, the earlier messages and answers and a new --prompt-len message; a "
             "conversation ends early before --max-model-len would be exceeded (default 1)",
             C, wl.turns, 1, WORKLOAD_MAX_TURNS),
    OPTS_DURATION("think-time", "DUR",
                  "a closed user waits DUR after each answer before its next request "
                  "(default 0)",
                  C, wl.think_time_ns, 0, MAX_DURATION_NS),
    OPTS_INT64("seed", "N", "seed of the length draws, arrivals and prompt ids (default 1)", C,
               wl.seed, 0, INT64_MAX),
    OPTS_FN("request-rate", "R",
            "open loop: R requests per second, each a stream of its own, sent on time "
            "whatever is running (replaces the closed users unless --users is given); inf (or "
            "max): every --num-prompts request at t = 0, vLLM's default",
            wl_request_rate),
    OPTS_POSITIVE("burstiness", "F",
                  "shape of the gamma inter-arrival times (vllm bench serve's; default 1: "
                  "Poisson; < 1 burstier, > 1 more regular)",
                  C, wl.burstiness),
    OPTS_DURATION("ramp-up", "DUR", "the request rate grows linearly from 0 over DUR (default 0)",
                  C, wl.ramp_up_ns, 0, MAX_DURATION_NS),
    OPTS_INT("max-concurrency", "N",
             "open-loop requests in flight at most: an arrival waits for a slot (the run says "
             "how many waited and how long; default: no limit)",
             C, wl.max_concurrency, 1, 1 << 20),
    OPTS_STRING("trace", "FILE",
                "replay a trace's arrivals and lengths (Azure CSV, BurstGPT CSV, Mooncake JSONL, "
                "plain JSONL: docs/guide/traces.md); replaces the closed users unless --users",
                C, wl.trace),
    OPTS_FN("trace-format", "F", "auto (default: from the first line) | azure | burstgpt | "
                                 "mooncake | jsonl",
            wl_trace_format),
    OPTS_POSITIVE("speedup", "X", "replay the trace X times as fast (default 1)", C, wl.speedup),
    OPTS_DURATION("from", "DUR", "the trace's window starts at this trace time (re-based to 0)",
                  C, wl.trace_from_ns, 0, MAX_DURATION_NS * 120),
    OPTS_DURATION("to", "DUR", "the trace's window ends before this trace time (default: its end)",
                  C, wl.trace_to_ns, 1, MAX_DURATION_NS * 120),
    OPTS_FLAG("loop", "repeat the (windowed) trace until --duration (which it needs)", C,
              wl.trace_loop),
    OPTS_INT64("max-requests", "N", "open-loop requests at most (a trace's or a rate's)", C,
               wl.max_requests, 1, WORKLOAD_MAX_ARRIVALS),
    OPTS_INT64("num-prompts", "N",
               "vllm bench serve's: send N open-loop requests and wait for every one (the run "
               "ends when the last has finished; --duration, if given, caps it, else 1 h after "
               "the last planned send); at --request-rate, else all at t = 0 (--max-concurrency "
               "meters them); with --trace its first N rows",
               C, wl.num_prompts, 1, WORKLOAD_MAX_ARRIVALS),
    OPTS_STRING("tokenizer", "FILE",
                "the target's tokenizer.json or GGUF model file (read here, never downloaded): "
                "a JSONL trace's \"prompt\" texts are counted in its tokens (default: one per "
                "4 bytes); byte-level BPE only (GPT-2, Llama 3 ...)",
                C, wl.tokenizer),
    OPTS_FLAG("synthetic-prompts",
              "send a made-up prompt of each JSONL row's length instead of its \"prompt\" text "
              "(default: the text is sent; made-up prompts are unique, so no prefix cache "
              "shortens a prefill)",
              C, wl.synthetic_prompts),
    OPTS_FLAG("skip-bad-rows",
              "skip and count a trace's bad rows (default: the first is an error, FILE:LINE)", C,
              wl.skip_bad_rows),
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
    OPTS_STRING("model", "M", "model of the catalog (default: small on the cpu engine, the default of serve and run; llama-3.1-8b with --engine emulate and in sim)",
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
    OPTS_INT("threads", "N",
             "cpu engine: threads of the forward pass (default: the CPUs it may run on - 1, at "
             "least 1)",
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

static int sch_cache_on(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((experiment_config *)c)->sched.prefix_caching = true;
    ((experiment_config *)c)->prefix_caching_said = true;
    return 0;
}
static int sch_cache_off(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((experiment_config *)c)->sched.prefix_caching = false;
    ((experiment_config *)c)->prefix_caching_said = true;
    return 0;
}

static int sch_cache_value(void *c, const char *v, char *err)
{
    if (strcmp(v, "on") == 0)
        return sch_cache_on(c, v, err);
    if (strcmp(v, "off") == 0)
        return sch_cache_off(c, v, err);
    return err_set(err, "--prefix-caching: '%s' is not off or on", v);
}

static int sch_kv_layout(void *c, const char *v, char *err)
{
    ((experiment_config *)c)->kv_layout_said = true;
    return sched_kv_layout_parse(v, &((experiment_config *)c)->sched.kv_layout, err);
}

/* As an OPTS_INT, and said (a unified --hardware profile's slots yield to it). */
static int sch_max_num_seqs(void *c, const char *v, char *err)
{
    int64_t n = 0;
    if (units_parse_count(v, &n, err) != 0)
        return -1;
    if (n < 1 || n > (1 << 20))
        return err_set(err, "'%s' is out of range [1, %d]", v, 1 << 20);
    ((experiment_config *)c)->sched.max_num_seqs = (int)n;
    ((experiment_config *)c)->max_num_seqs_said = true;
    return 0;
}

static const opts_spec sched_specs[] = {
    OPTS_FN("policy", "P", "mixed | chunked | prefill-first (default mixed: one-step prefill)",
            sch_policy),
    OPTS_INT("max-num-batched-tokens", "N", "token budget per step (default 16384)", C,
             sched.max_num_batched_tokens, 1, MAX_TOKENS),
    OPTS_FN("max-num-seqs", "N",
            "running requests at most (default 256; under --kv-layout unified the slots, "
            "default a unified --hardware profile's)",
            sch_max_num_seqs),
    OPTS_INT("max-model-len", "N", "prompt + completion tokens at most (default: the model's)", C,
             sched.max_model_len, 1, MAX_TOKENS),
    OPTS_INT64("kv-blocks", "N", "KV-cache blocks of 16 tokens (default: from GPU memory)", C,
               sched.kv_blocks, 1, (int64_t)1 << 32),
    OPTS_FN("enable-prefix-caching", NULL,
            "reuse cached prefix blocks across requests, vLLM's automatic prefix caching: a "
            "prompt sharing full 16-token blocks with an earlier one skips their prefill "
            "(default off here, unless a --hardware profile found the server caching; on by "
            "default in vLLM V1 and SGLang)",
            sch_cache_on),
    OPTS_FN("no-enable-prefix-caching", NULL, "prefix caching off (the default)", sch_cache_off),
    OPTS_FN("prefix-caching", "off|on",
            "the same as a value (sweep --prefix-caching off,on runs both side by side)",
            sch_cache_value),
    OPTS_FN("kv-layout", "L",
            "paged (default: vLLM, SGLang; a request attends over its own context) | unified "
            "(llama.cpp's server: max-num-seqs slots share one cache, a slot keeps its last "
            "request's cells until the next takes it, and every step's attention spans all "
            "occupied cells, so what earlier requests left behind slows later steps; default "
            "a --hardware profile's, as calibrate --target found the server)",
            sch_kv_layout),
    OPTS_FN("enable-chunked-prefill", NULL, "alias for --policy chunked", sch_chunked_on),
    OPTS_FN("no-enable-chunked-prefill", NULL, "alias for --policy mixed", sch_chunked_off),
};

opts_group experiment_sched_group(experiment_config *cfg)
{
    return (opts_group){"scheduler (vLLM names)", sched_specs, OPTS_COUNT(sched_specs), cfg};
}

/* ---- disaggregation (the simulator) ------------------------------------------------------- */

static int dis_instances(void *c, const char *v, char *err)
{
    return sim_disagg_parse(v, &((experiment_config *)c)->disagg, err);
}
static int dis_link(void *c, const char *v, char *err)
{
    return sim_kv_link_parse(v, &((experiment_config *)c)->disagg, err);
}

static const opts_spec disagg_specs[] = {
    OPTS_FN("disaggregate", "P:D",
            "prefill on P instances, decode on D others (each the same GPU and model, its own "
            "scheduler); a prompt's KV moves over --kv-link after its prefill, its first token "
            "arrives then; summary.json counts P + D GPUs (default: off, one instance)",
            dis_instances),
    OPTS_FN("kv-link", "L",
            "the KV link of --disaggregate: nvlink (450 GB/s one way), pcie5 (64), rdma-100g "
            "(12.5), rdma-400g (50), or a bandwidth such as 25GB/s (default nvlink)",
            dis_link),
};

opts_group experiment_disagg_group(experiment_config *cfg)
{
    return (opts_group){"disaggregated prefill (simulator)", disagg_specs,
                        OPTS_COUNT(disagg_specs), cfg};
}

/* ---- client ------------------------------------------------------------------------------ */

static int cl_target(void *c, const char *v, char *err)
{
    experiment_client *cl = &((experiment_config *)c)->client;
    /* HOST:PORT (no scheme) means http://HOST:PORT, as curl and vLLM's --base-url take it;
     * any other scheme is refused. */
    const char *scheme = strstr(v, "://");
    if (scheme && strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0)
        return err_set(err, "'%s' is not an http:// or https:// URL", v);
    if (!v[0] || (!scheme && (v[0] == '/' || v[0] == ':')))
        return err_set(err, "'%s' is not a URL (http://HOST:PORT, or HOST:PORT)", v);
    int n = snprintf(cl->target, sizeof cl->target, "%s%s", scheme ? "" : "http://", v);
    if (n < 0 || (size_t)n >= sizeof cl->target)
        return err_set(err, "the URL is longer than %zu bytes", sizeof cl->target - 1);
    return 0;
}
static int cl_endpoint(void *c, const char *v, char *err)
{
    return driver_endpoint_parse(v, &((experiment_config *)c)->client.endpoint, err);
}
/* A JSON object whose members go into every request body, over ours (temperature,
 * chat_template_kwargs, ...); the members that shape the experiment stay ours. */
static int cl_extra_body(void *c, const char *v, char *err)
{
    experiment_client *cl = &((experiment_config *)c)->client;
    json_error_t je;
    json_t *root = json_loads(v, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return err_set(err, "not a JSON object: %s", root ? "another JSON value" : je.text);
    }
    static const char *const ours[] = {"prompt", "messages", "stream", "max_tokens",
                                       "stream_options", "ignore_eos", "stallscope"};
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        if (json_object_get(root, ours[i])) {
            json_decref(root);
            return err_set(err, "\"%s\" is the experiment's own (the workload flags set it)",
                           ours[i]);
        }
    char *compact = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!compact)
        return err_set(err, "out of memory");
    int n = snprintf(cl->extra_body, sizeof cl->extra_body, "%s", compact);
    free(compact);
    if (n < 0 || (size_t)n >= sizeof cl->extra_body) {
        cl->extra_body[0] = '\0';
        return err_set(err, "longer than %zu bytes", sizeof cl->extra_body - 1);
    }
    return 0;
}
static int cl_transport(void *c, const char *v, char *err)
{
    return transport_kind_parse(v, &((experiment_config *)c)->client.transport, err);
}

static int cl_threads(void *c, const char *v, char *err)
{
    experiment_client *cl = &((experiment_config *)c)->client;
    int64_t n;
    if (units_parse_count(v, &n, err) != 0)
        return -1;
    if (n < 1 || n > 256)
        return err_set(err, "'%s' is out of range [1, 256]", v);
    cl->threads = (int)n;
    cl->threads_given = true;
    return 0;
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

/* The first N_CONNECTION_SPECS are the connection (experiment_connection_group). */
static const opts_spec client_specs[] = {
    OPTS_FN("target", "URL",
            "an OpenAI-compatible server (vLLM, SGLang, llama.cpp ...); default: our own (run: "
            "the embedded server; calibrate: this CPU); user:password@ and query values are "
            "written as ***",
            cl_target),
    OPTS_STRING("model-name", "NAME",
                "the \"model\" of each request (default: the first of /v1/models)", C,
                client.model_name),
    OPTS_FLAG("insecure", "https without certificate checks (self-signed test servers)", C,
              client.insecure),
    OPTS_FN("transport", "T",
            "raw | curl | auto (default: raw, our HTTP/1.1 client stamping each token with the "
            "kernel's receive time, for http:// and https://; curl when http_proxy, "
            "https_proxy or all_proxy applies to the target, for proxies, HTTP/2, other auth)",
            cl_transport),
    OPTS_FN("endpoint", "E", "completions (default) | chat", cl_endpoint),
    OPTS_DURATION("request-timeout", "DUR",
                  "a request with no bytes for this long fails (default 30s)", C,
                  client.request_timeout_ns, 1, 24 * 3600 * CLOCK_NS_PER_S),
    OPTS_FLAG("fidelity",
              "ask --target for stallscope's per-chunk emit times (on for the embedded server)", C,
              client.fidelity),
    OPTS_FN("extra-body", "JSON",
            "a JSON object merged into every request (temperature, chat_template_kwargs, ...; "
            "not the members the experiment sets: prompt, messages, stream, max_tokens)",
            cl_extra_body),
    OPTS_FN("client-threads", "N",
            "event loops (threads) of the load generator, the users spread over them; the "
            "injector has one more of its own (default: the CPUs this process may run on "
            "(taskset counts) that the embedded server leaves, at least 1: all but the cpu "
            "engine's --threads, all but one with emulate, all with --target; more than that "
            "is warned about)",
            cl_threads),
    OPTS_FN("scrape-metrics", "URL|on|off",
            "the server's Prometheus metrics every 250 ms into server_metrics.csv (default "
            "auto: the target's /metrics when it answers; on: also the embedded server's)",
            cl_scrape_metrics),
};
#define N_CONNECTION_SPECS 4

opts_group experiment_client_group(experiment_config *cfg)
{
    return (opts_group){"client", client_specs, OPTS_COUNT(client_specs), cfg};
}

opts_group experiment_connection_group(experiment_config *cfg)
{
    return (opts_group){"client", client_specs, N_CONNECTION_SPECS, cfg};
}

/* ---- analysis ----------------------------------------------------------------------------- */

static int an_label(void *c, const char *v, char *err)
{
    experiment_config *cfg = c;
    if (strchr(v, '\n'))
        return err_set(err, "one line, please");
    int n = snprintf(cfg->label, sizeof cfg->label, "%s", v);
    if (n < 0 || (size_t)n >= sizeof cfg->label)
        return err_set(err, "longer than %zu bytes", sizeof cfg->label - 1);
    return 0;
}
static int an_metadata(void *c, const char *v, char *err)
{
    experiment_config *cfg = c;
    const char *eq = strchr(v, '=');
    if (!eq || eq == v || strchr(v, '\n'))
        return err_set(err, "'%s' is not KEY=VALUE (one line)", v);
    size_t used = strlen(cfg->metadata);
    int n = snprintf(cfg->metadata + used, sizeof cfg->metadata - used, "%s%s", used ? "\n" : "",
                     v);
    if (n < 0 || (size_t)n >= sizeof cfg->metadata - used) {
        cfg->metadata[used] = '\0';
        return err_set(err, "more metadata than %zu bytes", sizeof cfg->metadata - 1);
    }
    return 0;
}

static int an_percentiles(void *c, const char *v, char *err)
{
    experiment_config *cfg = c;
    standard_options o;
    standard_defaults(&o);
    if (standard_parse_percentiles(v, &o, err) != 0)
        return -1;
    if (snprintf(cfg->metric_percentiles, sizeof cfg->metric_percentiles, "%s", v) >=
        (int)sizeof cfg->metric_percentiles)
        return err_set(err, "longer than %zu bytes", sizeof cfg->metric_percentiles - 1);
    return 0;
}
static int an_goodput(void *c, const char *v, char *err)
{
    experiment_config *cfg = c;
    standard_options o;
    standard_defaults(&o);
    if (standard_parse_goodput(v, &o, err) != 0)
        return -1;
    if (snprintf(cfg->goodput, sizeof cfg->goodput, "%s", v) >= (int)sizeof cfg->goodput)
        return err_set(err, "longer than %zu bytes", sizeof cfg->goodput - 1);
    return 0;
}

void experiment_standard_options(const experiment_config *cfg, standard_options *out)
{
    char err[ERR_LEN];
    standard_defaults(out);
    if (cfg->metric_percentiles[0] &&
        standard_parse_percentiles(cfg->metric_percentiles, out, err) != 0)
        standard_defaults(out); /* checked when given: only a hand-edited config lands here */
    if (cfg->goodput[0])
        (void)standard_parse_goodput(cfg->goodput, out, err);
}

static const opts_spec analysis_specs[] = {
    OPTS_FLAG("no-baseline", "skip the baseline run (injector off)", C, no_baseline),
    OPTS_DURATION("stall-threshold", "DUR",
                  "a stall is a gap above this (default 5 x baseline p50; e.g. 50ms)", C,
                  stall_threshold_ns, 1, 3600 * CLOCK_NS_PER_S),
    OPTS_FN("metric-percentiles", "LIST",
            "percentiles of TTFT, TPOT, ITL and E2E in summary.json and --save-result "
            "(default 50,90,99,99.9)",
            an_percentiles),
    OPTS_FN("goodput", "SLOS",
            "SLOs in ms, vLLM's syntax: 'ttft:2000 tpot:100' (also e2el, itl: a request's "
            "longest gap); goodput = the requests meeting every one",
            an_goodput),
    OPTS_FN("label", "NAME", "a name for this experiment, kept in config.json and the report",
            an_label),
    OPTS_FN("metadata", "K=V", "a note kept in config.json and the report (repeatable)",
            an_metadata),
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
    if (!colon || colon == v) /* not echoed: the value may be a credential */
        return err_set(err, "not 'Name: value' (a name, a colon, the value)");
    if (s->n_headers >= EXPERIMENT_MAX_HEADERS)
        return err_set(err, "at most %d headers", EXPERIMENT_MAX_HEADERS);
    s->headers[s->n_headers++] = v;
    return 0;
}

static const opts_spec secrets_specs[] = {
    OPTS_FN("api-key", "KEY",
            "sent as Authorization: Bearer KEY (default: $OPENAI_API_KEY when set; never "
            "written to disk)",
            sec_api_key),
    OPTS_FN("header", "'K: V'", "an extra request header (repeatable; never written to disk)",
            sec_header),
};

void experiment_secrets_from_env(experiment_secrets *secrets)
{
    const char *key = getenv("OPENAI_API_KEY");
    if (!secrets->api_key && key && key[0])
        secrets->api_key = key;
}

opts_group experiment_secrets_group(experiment_secrets *secrets)
{
    return (opts_group){"credentials", secrets_specs, OPTS_COUNT(secrets_specs), secrets};
}
