/* config_json — config.json, written and read by one table per section, so the writer and
 * the reader cannot drift apart: a field is in the table, or it is in neither.
 *
 *   { "format": 2, "label", "engine", "engine_kind", "target", "duration_s", "users",
 *     "complete", "argv": [...],
 *     "experiment": {no_baseline, stall_threshold_ns},
 *     "workload": {...}, "sched": {...}, "device": {...},
 *     "cost": {"gpu": {...}, "model": {...}, efficiencies, overhead ...}   (our engines)
 *     "client": {...}                                     (the client's settings)
 *     "session": {...}                                    (what an HTTP run learned)
 *     "shard": {index, count, start_at, start_at_ns,      (a shard of a sharded run)
 *               t0_realtime_ns, start_late_ns, "clock": {...}}
 *     "merge": {...} }                                    (a run report --merge made)
 *
 * duration_s and users repeat the workload's for readers of the first format. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/fsio.h"
#include "common/redact.h"
#include "experiment/config.h"
#include "experiment/config_json.h"

#define CONFIG_FORMAT 2

typedef enum {
    F_INT,      /* int */
    F_I64,      /* int64_t */
    F_U64,      /* uint64_t (stored as a JSON integer, same bits) */
    F_DOUBLE,   /* double */
    F_BOOL,     /* bool */
    F_TEXT,     /* char[size] */
    F_URL,      /* char[size], a URL: written and read back redacted (common/redact.h) */
    F_SOURCE,   /* const char *: written; read back as "config.json" (provenance) */
    F_POLICY,   /* sched_policy, by name */
    F_KV_LAYOUT, /* sched_kv_layout, by name */
    F_ENDPOINT, /* driver_endpoint, by name */
    F_TRANSPORT, /* transport_kind, by name */
    F_DIST,     /* workload_dist, as --prompt-len spells it */
    F_TRACE_FORMAT, /* trace_format (int), by name */
} field_type;

typedef struct field {
    const char *key;
    field_type type;
    size_t offset, size;
} field;

#define FLD(KEY, TYPE, T, F) {KEY, TYPE, offsetof(T, F), sizeof(((T *)0)->F)}
#define N_FIELDS(t) (sizeof(t) / sizeof((t)[0]))

static const field EXPERIMENT_FIELDS[] = {
    FLD("no_baseline", F_BOOL, experiment_config, no_baseline),
    FLD("stall_threshold_ns", F_I64, experiment_config, stall_threshold_ns),
    FLD("label", F_TEXT, experiment_config, label),
    FLD("metadata", F_TEXT, experiment_config, metadata),
    FLD("metric_percentiles", F_TEXT, experiment_config, metric_percentiles),
    FLD("goodput", F_TEXT, experiment_config, goodput),
    /* --disaggregate and --kv-link (0 prefill instances: off) */
    FLD("disaggregate_prefill", F_INT, experiment_config, disagg.prefill),
    FLD("disaggregate_decode", F_INT, experiment_config, disagg.decode),
    FLD("kv_link", F_TEXT, experiment_config, disagg.link),
    FLD("kv_link_bytes_per_s", F_DOUBLE, experiment_config, disagg.link_bytes_per_s),
    FLD("kv_link_latency_ns", F_I64, experiment_config, disagg.link_latency_ns),
};

static const field WORKLOAD_FIELDS[] = {
    FLD("users", F_INT, workload_config, users),
    FLD("duration_ns", F_I64, workload_config, duration_ns),
    FLD("inject", F_BOOL, workload_config, inject),
    FLD("inject_at_ns", F_I64, workload_config, inject_at_ns),
    FLD("inject_every_ns", F_I64, workload_config, inject_every_ns),
    FLD("inject_poisson", F_BOOL, workload_config, inject_poisson),
    FLD("prompt_tokens", F_INT, workload_config, prompt_tokens),
    FLD("inject_max_tokens", F_INT, workload_config, inject_max_tokens),
    FLD("no_inject", F_BOOL, workload_config, no_inject),
    FLD("prompt_len", F_DIST, workload_config, prompt_len),
    FLD("answer_len", F_DIST, workload_config, answer_len),
    FLD("seed", F_U64, workload_config, seed),
    FLD("request_rate", F_DOUBLE, workload_config, request_rate),
    FLD("burstiness", F_DOUBLE, workload_config, burstiness),
    FLD("ramp_up_ns", F_I64, workload_config, ramp_up_ns),
    FLD("max_concurrency", F_INT, workload_config, max_concurrency),
    FLD("trace", F_TEXT, workload_config, trace),
    FLD("trace_format", F_TRACE_FORMAT, workload_config, trace_format),
    FLD("speedup", F_DOUBLE, workload_config, speedup),
    FLD("trace_from_ns", F_I64, workload_config, trace_from_ns),
    FLD("trace_to_ns", F_I64, workload_config, trace_to_ns),
    FLD("trace_loop", F_BOOL, workload_config, trace_loop),
    FLD("until_trace_end", F_BOOL, workload_config, until_trace_end),
    FLD("skip_bad_rows", F_BOOL, workload_config, skip_bad_rows),
    FLD("max_requests", F_I64, workload_config, max_requests),
    FLD("num_prompts", F_I64, workload_config, num_prompts),
    FLD("tokenizer", F_TEXT, workload_config, tokenizer),
    FLD("synthetic_prompts", F_BOOL, workload_config, synthetic_prompts),
    FLD("system_prompt_tokens", F_INT, workload_config, system_prompt_tokens),
    FLD("turns", F_INT, workload_config, turns),
    FLD("think_time_ns", F_I64, workload_config, think_time_ns),
};

static const field SCHED_FIELDS[] = {
    FLD("policy", F_POLICY, sched_config, policy),
    FLD("max_num_batched_tokens", F_INT, sched_config, max_num_batched_tokens),
    FLD("max_num_seqs", F_INT, sched_config, max_num_seqs),
    FLD("max_model_len", F_INT, sched_config, max_model_len),
    FLD("block_size", F_INT, sched_config, block_size),
    FLD("kv_blocks", F_I64, sched_config, kv_blocks),
    FLD("prefix_caching", F_BOOL, sched_config, prefix_caching),
    FLD("kv_layout", F_KV_LAYOUT, sched_config, kv_layout),
};

static const field DEVICE_FIELDS[] = {
    FLD("gpu", F_TEXT, experiment_device, gpu),
    FLD("model", F_TEXT, experiment_device, model),
    FLD("model_config", F_TEXT, experiment_device, model_config),
    FLD("hardware", F_TEXT, experiment_device, hardware),
    FLD("params_override", F_DOUBLE, experiment_device, params_override),
    FLD("step_overhead_ns", F_I64, experiment_device, step_overhead_ns),
    FLD("compute_efficiency", F_DOUBLE, experiment_device, compute_efficiency),
    FLD("bandwidth_efficiency", F_DOUBLE, experiment_device, bandwidth_efficiency),
    FLD("gpu_memory_utilization", F_DOUBLE, experiment_device, gpu_memory_utilization),
    FLD("threads", F_INT, experiment_device, threads),
};

static const field GPU_FIELDS[] = {
    FLD("name", F_TEXT, cost_gpu, name),
    FLD("peak_flops", F_DOUBLE, cost_gpu, peak_flops),
    FLD("mem_bandwidth", F_DOUBLE, cost_gpu, mem_bandwidth),
    FLD("mem_bytes", F_DOUBLE, cost_gpu, mem_bytes),
    FLD("source", F_SOURCE, cost_gpu, source),
    FLD("attention_flops", F_DOUBLE, cost_gpu, attention_flops),
    FLD("bytes_per_param", F_DOUBLE, cost_gpu, bytes_per_param),
    FLD("kv_bytes_per_elem", F_DOUBLE, cost_gpu, kv_bytes_per_elem),
    FLD("step_overhead_ns", F_I64, cost_gpu, step_overhead_ns),
    FLD("threads", F_INT, cost_gpu, threads),
    /* a hardware profile's fitted step model (engine/profile.h); absent: none */
    FLD("fit_model", F_TEXT, cost_gpu, fit.model),
    FLD("fit_step_ns", F_DOUBLE, cost_gpu, fit.step_ns),
    FLD("fit_seq_ns", F_DOUBLE, cost_gpu, fit.seq_ns),
    FLD("fit_ctx_ns", F_DOUBLE, cost_gpu, fit.ctx_ns),
    FLD("fit_token_ns", F_DOUBLE, cost_gpu, fit.token_ns),
    FLD("fit_pair_ns", F_DOUBLE, cost_gpu, fit.pair_ns),
};

static const field ARCH_FIELDS[] = {
    FLD("name", F_TEXT, cost_arch, name),
    FLD("n_layers", F_INT, cost_arch, n_layers),
    FLD("hidden", F_INT, cost_arch, hidden),
    FLD("n_heads", F_INT, cost_arch, n_heads),
    FLD("n_kv_heads", F_INT, cost_arch, n_kv_heads),
    FLD("head_dim", F_INT, cost_arch, head_dim),
    FLD("ffn", F_INT, cost_arch, ffn),
    FLD("vocab", F_INT, cost_arch, vocab),
    FLD("max_position", F_INT, cost_arch, max_position),
    FLD("tied_embeddings", F_BOOL, cost_arch, tied_embeddings),
    FLD("source", F_SOURCE, cost_arch, source),
};

static const field COST_FIELDS[] = {
    FLD("compute_efficiency", F_DOUBLE, cost_params, compute_efficiency),
    FLD("bandwidth_efficiency", F_DOUBLE, cost_params, bandwidth_efficiency),
    FLD("step_overhead_ns", F_I64, cost_params, step_overhead_ns),
    FLD("bytes_per_param", F_DOUBLE, cost_params, bytes_per_param),
    FLD("kv_bytes_per_elem", F_DOUBLE, cost_params, kv_bytes_per_elem),
    FLD("params_override", F_DOUBLE, cost_params, params_override),
};

static const field CLIENT_FIELDS[] = {
    FLD("target", F_URL, experiment_client, target),
    FLD("endpoint", F_ENDPOINT, experiment_client, endpoint),
    FLD("model_name", F_TEXT, experiment_client, model_name),
    FLD("request_timeout_ns", F_I64, experiment_client, request_timeout_ns),
    FLD("warmup_ns", F_I64, experiment_client, warmup_ns),
    FLD("fidelity", F_BOOL, experiment_client, fidelity),
    FLD("insecure", F_BOOL, experiment_client, insecure),
    FLD("transport", F_TRANSPORT, experiment_client, transport),
    FLD("threads", F_INT, experiment_client, threads),
    FLD("threads_given", F_BOOL, experiment_client, threads_given),
    FLD("extra_body", F_TEXT, experiment_client, extra_body),
    FLD("scrape_metrics", F_URL, experiment_client, scrape_metrics),
};

static const field SESSION_FIELDS[] = {
    FLD("model_name", F_TEXT, experiment_meta, served_model),
    FLD("token_id_prompts", F_BOOL, experiment_meta, token_id_prompts),
    FLD("text_overhead", F_DOUBLE, experiment_meta, text_overhead),
    FLD("text_tokens_per_word", F_DOUBLE, experiment_meta, text_tokens_per_word),
    FLD("timestamps", F_BOOL, experiment_meta, timestamps),
    FLD("nice", F_INT, experiment_meta, nice),
    FLD("protocol_violations", F_I64, experiment_meta, protocol_violations),
    FLD("transport", F_TEXT, experiment_meta, transport),
    FLD("stamps_kernel", F_I64, experiment_meta, stamps_kernel),
    FLD("stamps_kernel_coalesced", F_I64, experiment_meta, stamps_kernel_coalesced),
    FLD("stamps_user", F_I64, experiment_meta, stamps_user),
    FLD("t0_monotonic_ns", F_I64, experiment_meta, t0_monotonic_ns),
    FLD("metrics_url", F_URL, experiment_meta, metrics_url),
    FLD("metrics_scrapes", F_I64, experiment_meta, metrics_scrapes),
    FLD("metrics_scrape_failures", F_I64, experiment_meta, metrics_scrape_failures),
    FLD("metrics_rows", F_I64, experiment_meta, metrics_rows),
};

/* "shard": the share (workload), the common start (configuration), where this shard's
 * t = 0 fell on the wall clock and that clock (the run's record). */
static const field SHARD_FIELDS[] = {
    FLD("index", F_INT, workload_shard, index),
    FLD("count", F_INT, workload_shard, count),
};

static const field START_FIELDS[] = {
    FLD("start_at", F_TEXT, experiment_shard, start_at),
    FLD("start_at_ns", F_I64, experiment_shard, start_at_ns),
};

static const field SHARD_RUN_FIELDS[] = {
    FLD("t0_realtime_ns", F_I64, experiment_meta, t0_realtime_ns),
    FLD("start_late_ns", F_I64, experiment_meta, start_late_ns),
};

static const field CLOCK_FIELDS[] = {
    FLD("maxerror_us", F_I64, experiment_clock, maxerror_us),
    FLD("esterror_us", F_I64, experiment_clock, esterror_us),
    FLD("synchronized", F_BOOL, experiment_clock, synchronized),
    FLD("state", F_INT, experiment_clock, state),
    FLD("status", F_INT, experiment_clock, status),
    FLD("pair_error_ns", F_I64, experiment_clock, pair_error_ns),
    FLD("step_ns", F_I64, experiment_clock, step_ns),
    FLD("boot_id", F_TEXT, experiment_clock, boot_id),
    FLD("host", F_TEXT, experiment_clock, host),
};

static const field MERGE_FIELDS[] = {
    FLD("shards", F_INT, experiment_merge, shards),
    FLD("merged", F_TEXT, experiment_merge, merged),
    FLD("missing", F_TEXT, experiment_merge, missing),
    FLD("users", F_INT, experiment_merge, users),
    FLD("t0_realtime_ns", F_I64, experiment_merge, t0_realtime_ns),
    FLD("clock_uncertainty_ns", F_I64, experiment_merge, clock_uncertainty_ns),
    FLD("clock_estimated_ns", F_I64, experiment_merge, clock_estimated_ns),
    FLD("one_host", F_BOOL, experiment_merge, one_host),
};

static const field RUN_FIELDS[] = {
    FLD("label", F_TEXT, experiment_meta, label),
    FLD("engine", F_TEXT, experiment_meta, engine_name),
    FLD("target", F_URL, experiment_meta, target),
    FLD("complete", F_BOOL, experiment_meta, complete),
};

/* Where the token events' times came from, for fidelity.json and summary.json. */
json_t *experiment_stamps_json(const experiment_meta *meta)
{
    return json_pack("{s:s, s:I, s:I, s:I}", "transport", meta->transport, "kernel",
                     (json_int_t)meta->stamps_kernel, "kernel_coalesced",
                     (json_int_t)meta->stamps_kernel_coalesced, "user",
                     (json_int_t)meta->stamps_user);
}

void experiment_meta_stamps(const experiment_meta *meta, analysis_options *opt)
{
    memset(&opt->stamps, 0, sizeof opt->stamps);
    if (!meta->has_client)
        return;
    opt->stamps.known = true;
    snprintf(opt->stamps.transport, sizeof opt->stamps.transport, "%s", meta->transport);
    opt->stamps.kernel = meta->stamps_kernel;
    opt->stamps.kernel_coalesced = meta->stamps_kernel_coalesced;
    opt->stamps.user = meta->stamps_user;
}

/* ---- writing ------------------------------------------------------------------------------ */

static json_t *field_json(const field *f, const void *base)
{
    const char *p = (const char *)base + f->offset;
    switch (f->type) {
    case F_INT:
        return json_integer(*(const int *)p);
    case F_I64:
        return json_integer(*(const int64_t *)p);
    case F_U64:
        return json_integer((json_int_t) * (const uint64_t *)p);
    case F_DOUBLE:
        return json_real(*(const double *)p);
    case F_BOOL:
        return json_boolean(*(const bool *)p);
    case F_TEXT:
        return json_string(p);
    case F_URL: {
        char shown[1024];
        redact_url(p, shown, sizeof shown);
        return json_string(shown);
    }
    case F_SOURCE:
        return json_string(*(const char *const *)p ? *(const char *const *)p : "");
    case F_POLICY:
        return json_string(sched_policy_name(*(const sched_policy *)p));
    case F_KV_LAYOUT:
        return json_string(sched_kv_layout_name(*(const sched_kv_layout *)p));
    case F_ENDPOINT:
        return json_string(*(const driver_endpoint *)p == DRIVER_CHAT ? "chat" : "completions");
    case F_TRANSPORT:
        return json_string(transport_kind_name(*(const transport_kind *)p));
    case F_DIST: {
        char text[320];
        workload_dist_format((const workload_dist *)p, text, sizeof text);
        return json_string(text);
    }
    case F_TRACE_FORMAT:
        return json_string(trace_format_name((trace_format) * (const int *)p));
    }
    return json_null();
}

static void put_fields(json_t *obj, const field *fields, size_t n, const void *base)
{
    for (size_t i = 0; i < n; i++)
        json_object_set_new(obj, fields[i].key, field_json(&fields[i], base));
}

static json_t *section(const field *fields, size_t n, const void *base)
{
    json_t *obj = json_object();
    put_fields(obj, fields, n, base);
    return obj;
}

json_t *experiment_config_to_json(const experiment_config *cfg, const experiment_meta *meta)
{
    static const experiment_meta none;
    if (!meta)
        meta = &none;
    json_t *root = json_object();
    json_object_set_new(root, "format", json_integer(CONFIG_FORMAT));
    put_fields(root, RUN_FIELDS, N_FIELDS(RUN_FIELDS), meta);
    json_object_set_new(root, "engine_kind", json_string(experiment_engine_label(cfg->engine)));
    json_object_set_new(root, "duration_s", json_real((double)cfg->wl.duration_ns / 1e9));
    json_object_set_new(root, "users", json_integer(cfg->wl.users));
    json_t *args = json_array();
    for (int i = 0; i < meta->argc; i++)
        json_array_append_new(args, json_string(meta->argv[i]));
    json_object_set_new(root, "argv", args);
    json_object_set_new(root, "experiment",
                        section(EXPERIMENT_FIELDS, N_FIELDS(EXPERIMENT_FIELDS), cfg));
    json_object_set_new(root, "workload", section(WORKLOAD_FIELDS, N_FIELDS(WORKLOAD_FIELDS), &cfg->wl));
    json_object_set_new(root, "sched", section(SCHED_FIELDS, N_FIELDS(SCHED_FIELDS), &cfg->sched));
    json_object_set_new(root, "device", section(DEVICE_FIELDS, N_FIELDS(DEVICE_FIELDS), &cfg->device));
    if (cfg->engine != EXPERIMENT_REMOTE) {
        json_t *cost = section(COST_FIELDS, N_FIELDS(COST_FIELDS), &cfg->cost);
        json_object_set_new(cost, "gpu", section(GPU_FIELDS, N_FIELDS(GPU_FIELDS), &cfg->cost.gpu));
        json_object_set_new(cost, "model", section(ARCH_FIELDS, N_FIELDS(ARCH_FIELDS), &cfg->cost.arch));
        json_object_set_new(root, "cost", cost);
    }
    json_object_set_new(root, "client", section(CLIENT_FIELDS, N_FIELDS(CLIENT_FIELDS), &cfg->client));
    if (meta->has_client)
        json_object_set_new(root, "session", section(SESSION_FIELDS, N_FIELDS(SESSION_FIELDS), meta));
    if (cfg->wl.shard.count > 0) {
        json_t *shard = section(SHARD_FIELDS, N_FIELDS(SHARD_FIELDS), &cfg->wl.shard);
        put_fields(shard, START_FIELDS, N_FIELDS(START_FIELDS), &cfg->shard);
        put_fields(shard, SHARD_RUN_FIELDS, N_FIELDS(SHARD_RUN_FIELDS), meta);
        json_object_set_new(shard, "clock", section(CLOCK_FIELDS, N_FIELDS(CLOCK_FIELDS), &meta->clock));
        json_object_set_new(root, "shard", shard);
    }
    if (meta->merge.shards > 0)
        json_object_set_new(root, "merge", section(MERGE_FIELDS, N_FIELDS(MERGE_FIELDS), &meta->merge));
    return root;
}

/* ---- reading ------------------------------------------------------------------------------ */

static int bad(char *err, const char *where, const field *f, const char *what)
{
    return err_set(err, "config.json: %s%s%s: %s", where, where[0] ? "." : "", f->key, what);
}

static int read_field(const json_t *v, const field *f, void *base, const char *where, char *err)
{
    char *p = (char *)base + f->offset;
    char why[ERR_LEN];
    switch (f->type) {
    case F_INT:
    case F_I64:
    case F_U64: {
        if (!json_is_integer(v))
            return bad(err, where, f, "not an integer");
        json_int_t x = json_integer_value(v);
        if (f->type == F_INT && (x < INT32_MIN || x > INT32_MAX))
            return bad(err, where, f, "out of range");
        if (f->type == F_INT)
            *(int *)p = (int)x;
        else if (f->type == F_I64)
            *(int64_t *)p = (int64_t)x;
        else
            *(uint64_t *)p = (uint64_t)x;
        return 0;
    }
    case F_DOUBLE:
        if (!json_is_number(v))
            return bad(err, where, f, "not a number");
        *(double *)p = json_number_value(v);
        return 0;
    case F_BOOL:
        if (!json_is_boolean(v))
            return bad(err, where, f, "not true or false");
        *(bool *)p = json_is_true(v);
        return 0;
    case F_TEXT:
        if (!json_is_string(v))
            return bad(err, where, f, "not a string");
        if (json_string_length(v) >= f->size)
            return bad(err, where, f, "too long");
        memcpy(p, json_string_value(v), json_string_length(v) + 1);
        return 0;
    case F_URL: /* redacted again: a file an earlier version wrote may hold credentials (a
                 * record for reading, so a URL longer than the field is cut, not refused) */
        if (!json_is_string(v))
            return bad(err, where, f, "not a string");
        redact_url(json_string_value(v), p, f->size);
        return 0;
    case F_SOURCE:
        if (!json_is_string(v))
            return bad(err, where, f, "not a string");
        *(const char **)p = "config.json";
        return 0;
    case F_POLICY:
        if (!json_is_string(v) || sched_policy_parse(json_string_value(v), (sched_policy *)p, why) != 0)
            return bad(err, where, f, "not a policy (mixed, chunked, prefill-first)");
        return 0;
    case F_KV_LAYOUT:
        if (!json_is_string(v) ||
            sched_kv_layout_parse(json_string_value(v), (sched_kv_layout *)p, why) != 0)
            return bad(err, where, f, "not a KV layout (paged, unified)");
        return 0;
    case F_ENDPOINT:
        if (!json_is_string(v) ||
            driver_endpoint_parse(json_string_value(v), (driver_endpoint *)p, why) != 0)
            return bad(err, where, f, "not an endpoint (completions, chat)");
        return 0;
    case F_TRANSPORT:
        if (!json_is_string(v) ||
            transport_kind_parse(json_string_value(v), (transport_kind *)p, why) != 0)
            return bad(err, where, f, "not a transport (auto, raw, curl)");
        return 0;
    case F_DIST:
        if (!json_is_string(v) ||
            workload_dist_parse(json_string_value(v), (workload_dist *)p, why) != 0)
            return bad(err, where, f, "not a distribution (fixed:N, uniform:A-B, "
                                      "lognormal:MEDIAN,P90,MAX, empirical:FILE)");
        return 0;
    case F_TRACE_FORMAT: {
        trace_format tf;
        if (!json_is_string(v) || trace_format_parse(json_string_value(v), &tf, why) != 0)
            return bad(err, where, f, "not a trace format (auto, azure, burstgpt, mooncake, jsonl)");
        *(int *)p = (int)tf;
        return 0;
    }
    }
    return bad(err, where, f, "unknown field type");
}

/* Fields absent from obj keep what base holds (the defaults). */
static int get_fields(const json_t *obj, const field *fields, size_t n, void *base,
                      const char *where, char *err)
{
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_object_get(obj, fields[i].key);
        if (v && read_field(v, &fields[i], base, where, err) != 0)
            return -1;
    }
    return 0;
}

/* The object at key (NULL when absent), or -1 with err when it is something else. */
static int get_section(const json_t *root, const char *key, const json_t **out, char *err)
{
    *out = json_object_get(root, key);
    if (*out && !json_is_object(*out))
        return err_set(err, "config.json: %s is not an object", key);
    return 0;
}

static int read_section(const json_t *root, const char *key, const field *fields, size_t n,
                        void *base, char *err)
{
    const json_t *obj;
    if (get_section(root, key, &obj, err) != 0)
        return -1;
    return obj ? get_fields(obj, fields, n, base, key, err) : 0;
}

/* Files written before the length distributions held bg_prompt_min/max and
 * bg_answer_min/max: uniform ranges. */
static int read_legacy_ranges(const json_t *root, workload_config *wl)
{
    const json_t *w = json_object_get(root, "workload");
    static const char *const keys[2][2] = {{"bg_prompt_min", "bg_prompt_max"},
                                           {"bg_answer_min", "bg_answer_max"}};
    workload_dist *d[2] = {&wl->prompt_len, &wl->answer_len};
    for (int i = 0; w && i < 2; i++) {
        const json_t *lo = json_object_get(w, keys[i][0]), *hi = json_object_get(w, keys[i][1]);
        if (json_is_integer(lo) && json_is_integer(hi) && !json_object_get(w, i ? "answer_len" : "prompt_len"))
            *d[i] = (workload_dist){.kind = WORKLOAD_DIST_UNIFORM,
                                    .a = (int)json_integer_value(lo),
                                    .b = (int)json_integer_value(hi)};
    }
    return 0;
}

static int read_argv(const json_t *root, experiment_meta *meta, char *err)
{
    const json_t *args = json_object_get(root, "argv");
    if (!args)
        return 0;
    if (!json_is_array(args))
        return err_set(err, "config.json: argv is not an array");
    size_t n = json_array_size(args);
    char **strs = calloc(n + 1, sizeof *strs);
    if (!strs)
        return err_set(err, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(args, i));
        if (!s) {
            free(strs);
            return err_set(err, "config.json: argv[%zu] is not a string", i);
        }
        strs[i] = (char *)s; /* borrowed: experiment_meta_set_argv copies */
    }
    int rc = experiment_meta_set_argv(meta, (int)n, strs);
    free(strs);
    return rc == 0 ? 0 : err_set(err, "out of memory");
}

static int read_shard(const json_t *root, experiment_config *cfg, experiment_meta *meta,
                      char *err)
{
    const json_t *shard, *clock;
    if (get_section(root, "shard", &shard, err) != 0)
        return -1;
    if (!shard)
        return 0;
    if (get_fields(shard, SHARD_FIELDS, N_FIELDS(SHARD_FIELDS), &cfg->wl.shard, "shard", err) != 0 ||
        get_fields(shard, START_FIELDS, N_FIELDS(START_FIELDS), &cfg->shard, "shard", err) != 0 ||
        get_fields(shard, SHARD_RUN_FIELDS, N_FIELDS(SHARD_RUN_FIELDS), meta, "shard", err) != 0 ||
        get_section(shard, "clock", &clock, err) != 0)
        return -1;
    if (clock &&
        get_fields(clock, CLOCK_FIELDS, N_FIELDS(CLOCK_FIELDS), &meta->clock, "shard.clock", err) != 0)
        return -1;
    const workload_shard *s = &cfg->wl.shard;
    if (s->count < 1 || s->count > WORKLOAD_MAX_SHARDS)
        return err_set(err, "config.json: shard.count: %d is not between 1 and %d", s->count,
                       WORKLOAD_MAX_SHARDS);
    if (s->index < 0 || s->index >= s->count)
        return err_set(err, "config.json: shard.index: %d is not between 0 and %d", s->index,
                       s->count - 1);
    return 0;
}

int experiment_config_from_json(const json_t *json, experiment_config *cfg,
                                experiment_meta *meta, char *err)
{
    experiment_meta scratch;
    if (!meta)
        meta = &scratch;
    memset(meta, 0, sizeof *meta);
    if (!json_is_object(json))
        return err_set(err, "config.json: not a JSON object");
    const json_t *format = json_object_get(json, "format");
    if (!format)
        return err_set(err, "config.json: no \"format\" (written by an older stallscope: rerun, "
                            "or read its tables with `stallscope report`)");
    if (!json_is_integer(format) || json_integer_value(format) != CONFIG_FORMAT)
        return err_set(err, "config.json: format %lld, this stallscope reads format %d",
                       (long long)json_integer_value(format), CONFIG_FORMAT);
    const char *kind = json_string_value(json_object_get(json, "engine_kind"));
    experiment_engine engine;
    char why[ERR_LEN];
    if (!kind || experiment_engine_parse(kind, &engine, why) != 0)
        return err_set(err, "config.json: engine_kind is missing or unknown");
    experiment_defaults(cfg, engine);
    const json_t *cost;
    int rc = -1;
    if (get_fields(json, RUN_FIELDS, N_FIELDS(RUN_FIELDS), meta, "", err) != 0 ||
        read_argv(json, meta, err) != 0 ||
        read_section(json, "experiment", EXPERIMENT_FIELDS, N_FIELDS(EXPERIMENT_FIELDS), cfg, err) != 0 ||
        read_section(json, "workload", WORKLOAD_FIELDS, N_FIELDS(WORKLOAD_FIELDS), &cfg->wl, err) != 0 ||
        read_legacy_ranges(json, &cfg->wl) != 0 ||
        read_section(json, "sched", SCHED_FIELDS, N_FIELDS(SCHED_FIELDS), &cfg->sched, err) != 0 ||
        read_section(json, "device", DEVICE_FIELDS, N_FIELDS(DEVICE_FIELDS), &cfg->device, err) != 0 ||
        read_section(json, "client", CLIENT_FIELDS, N_FIELDS(CLIENT_FIELDS), &cfg->client, err) != 0 ||
        get_section(json, "cost", &cost, err) != 0)
        goto fail;
    if (cost) {
        if (get_fields(cost, COST_FIELDS, N_FIELDS(COST_FIELDS), &cfg->cost, "cost", err) != 0 ||
            read_section(cost, "gpu", GPU_FIELDS, N_FIELDS(GPU_FIELDS), &cfg->cost.gpu, err) != 0 ||
            read_section(cost, "model", ARCH_FIELDS, N_FIELDS(ARCH_FIELDS), &cfg->cost.arch, err) != 0)
            goto fail;
    } else if (engine != EXPERIMENT_REMOTE) {
        err_set(err, "config.json: no cost section for the %s engine", kind);
        goto fail;
    }
    const json_t *session;
    if (get_section(json, "session", &session, err) != 0)
        goto fail;
    if (session) {
        meta->has_client = true;
        if (get_fields(session, SESSION_FIELDS, N_FIELDS(SESSION_FIELDS), meta, "session", err) != 0)
            goto fail;
    }
    if (read_shard(json, cfg, meta, err) != 0 ||
        read_section(json, "merge", MERGE_FIELDS, N_FIELDS(MERGE_FIELDS), &meta->merge, err) != 0)
        goto fail;
    rc = 0;
fail:
    if (rc != 0 || meta == &scratch)
        experiment_meta_free(meta);
    return rc;
}

int experiment_config_write(const char *path, const experiment_config *cfg,
                            const experiment_meta *meta, char *err)
{
    json_t *json = experiment_config_to_json(cfg, meta);
    int rc = fsio_write_json(path, json, 0, err);
    json_decref(json);
    return rc;
}

int experiment_config_read(const char *path, experiment_config *cfg, experiment_meta *meta,
                           char *err)
{
    json_t *json = fsio_read_json(path, 0, err);
    if (!json)
        return -1;
    char why[ERR_LEN];
    int rc = experiment_config_from_json(json, cfg, meta, why);
    json_decref(json);
    if (rc != 0)
        return err_set(err, "%s: %s", path, why);
    return 0;
}

/* ---- one experiment or two ------------------------------------------------------------------ */

/* The first key (depth first, in the writer's order) where a and b differ. */
static bool first_difference(const json_t *a, const json_t *b, const char *where, char *field,
                             size_t size)
{
    const char *key;
    json_t *va;
    json_object_foreach((json_t *)a, key, va) {
        const json_t *vb = json_object_get(b, key);
        char path[128];
        snprintf(path, sizeof path, "%s%s%s", where, where[0] ? "." : "", key);
        if (json_is_object(va) && json_is_object(vb)) {
            if (first_difference(va, vb, path, field, size))
                return true;
            continue;
        }
        if (vb && json_equal(va, vb))
            continue;
        char *ta = json_dumps(va, JSON_ENCODE_ANY | JSON_COMPACT);
        char *tb = vb ? json_dumps(vb, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        snprintf(field, size, "%s (%.60s vs %.60s)", path, ta ? ta : "?", tb ? tb : "absent");
        free(ta);
        free(tb);
        return true;
    }
    return false;
}

/* What makes two runs one experiment: engine, workload (but the injector switch), scheduler,
 * device and cost model, the target the client talked to, and for shards their count and
 * common start (but not which shard). */
static json_t *identity(const experiment_config *cfg)
{
    json_t *j = experiment_config_to_json(cfg, NULL);
    static const char *const per_run[] = {"format", "label", "engine", "target", "complete",
                                          "argv", "duration_s", "users", "experiment"};
    for (size_t i = 0; i < sizeof per_run / sizeof per_run[0]; i++)
        json_object_del(j, per_run[i]);
    json_object_del(json_object_get(j, "workload"), "inject");
    json_object_del(json_object_get(j, "shard"), "index"); /* shards of one experiment */
    json_t *client = json_object_get(j, "client");
    json_t *kept = json_pack("{s:O, s:O, s:O}", "target", json_object_get(client, "target"),
                             "endpoint", json_object_get(client, "endpoint"), "model_name",
                             json_object_get(client, "model_name"));
    json_object_set_new(j, "client", kept);
    return j;
}

bool experiment_config_differ(const experiment_config *a, const experiment_config *b, char *field,
                              size_t size)
{
    json_t *ja = identity(a), *jb = identity(b);
    bool differ = first_difference(ja, jb, "", field, size) || first_difference(jb, ja, "", field, size);
    json_decref(ja);
    json_decref(jb);
    return differ;
}

/* ---- the run's record ----------------------------------------------------------------------- */

int experiment_meta_set_argv(experiment_meta *meta, int argc, char **argv)
{
    char **copy = redact_argv(argc, argv);
    if (!copy)
        return -1;
    redact_argv_free(meta->argc, meta->argv);
    meta->argv = copy;
    meta->argc = argc;
    return 0;
}

void experiment_meta_free(experiment_meta *meta)
{
    redact_argv_free(meta->argc, meta->argv);
    meta->argv = NULL;
    meta->argc = 0;
}
