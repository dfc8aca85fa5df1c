/* stallscope model — the lesson's arithmetic from the cost model: FLOP per token, and for
 * each prompt length the linear and attention time of a one-step prefill, the decode-only
 * step it interrupts, and their ratios. Output is a table, or one JSON object (--json)
 * whose keys docs/reference/model.md lists. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "common/err.h"
#include "common/units.h"
#include "experiment/config.h"
#include "experiment/options.h"

#define MODEL_MAX_PROMPTS 32
/* A prompt or context past this cannot be an int token count anywhere downstream. */
#define MODEL_MAX_TOKENS ((int64_t)1 << 24)

typedef struct model_cfg {
    int64_t prompt_tokens[MODEL_MAX_PROMPTS];
    int n_prompts;
    int64_t decode_batch;
    int64_t decode_context;
    bool json;
    bool list;
} model_cfg;

static int opt_prompts(void *c, const char *v, char *err)
{
    model_cfg *cfg = c;
    int64_t counts[MODEL_MAX_PROMPTS];
    int n = 0;
    if (units_parse_count_list(v, counts, MODEL_MAX_PROMPTS, &n, err) != 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (counts[i] <= 0 || counts[i] > MODEL_MAX_TOKENS)
            return err_set(err, "%lld tokens: each prompt must be between 1 and %lld tokens",
                           (long long)counts[i], (long long)MODEL_MAX_TOKENS);
    memcpy(cfg->prompt_tokens, counts, sizeof counts[0] * (size_t)n);
    cfg->n_prompts = n;
    return 0;
}

static int opt_help(void *c, const char *v, char *err)
{
    (void)c, (void)v, (void)err; /* handled before parsing; listed here for the help text */
    return 0;
}

static const opts_spec model_specs[] = {
    OPTS_FN("prompt-tokens", "LIST", "prompt lengths to price (default 4000,8000,16000; 8k, 16k ...)",
            opt_prompts),
    OPTS_INT64("decode-batch", "N", "requests in the decode-only step compared against (default 1)",
               model_cfg, decode_batch, 1, 1 << 20),
    OPTS_INT64("decode-context", "N", "tokens each decoding request already holds (default 0)",
               model_cfg, decode_context, 0, MODEL_MAX_TOKENS - 1),
    OPTS_FLAG("json", "one JSON object on stdout instead of the table", model_cfg, json),
    OPTS_FLAG("list", "print the catalog of GPUs and models and exit", model_cfg, list),
    OPTS_FN("help", NULL, "this text", opt_help),
};

/* Everything the table and the JSON print, computed once. */
typedef struct prompt_row {
    int tokens;
    double linear_ms;    /* linear layers + LM head at the effective peak */
    double attention_ms; /* causal attention at the effective peak */
    double memory_ms;    /* weights + KV at the effective bandwidth */
    double total_ms;     /* the step: max(compute, memory) + overhead */
    bool compute_bound;
    double ratio_linear; /* linear_ms / decode_ms: the lesson's 130 / 4.8 */
    double ratio_total;  /* total_ms / decode_ms */
    double scaling;      /* total_ms / previous row's total_ms; 0 for the first row */
} prompt_row;

typedef struct model_report {
    double flops_per_s;
    double bytes_per_s;
    double flop_per_token;   /* 2 x linear params (the override when given) */
    double lm_head_flop_row; /* 2 x LM head params per sampled row (0 with an override) */
    cost_breakdown decode;
    double decode_ms;
    prompt_row rows[MODEL_MAX_PROMPTS];
    int n_rows;
} model_report;

static void compute_report(const cost_params *p, const model_cfg *cfg, model_report *r)
{
    memset(r, 0, sizeof *r);
    r->flops_per_s = p->gpu.peak_flops * p->compute_efficiency;
    r->bytes_per_s = p->gpu.mem_bandwidth * p->bandwidth_efficiency;
    r->flop_per_token = 2 * cost_linear_params(p);
    r->lm_head_flop_row = 2 * cost_lm_head_params(p);
    r->decode_ms = (double)cost_decode_ns(p, (int)cfg->decode_batch, (int)cfg->decode_context,
                                          &r->decode) / 1e6;
    for (int i = 0; i < cfg->n_prompts; i++) {
        prompt_row *row = &r->rows[i];
        cost_breakdown b;
        row->tokens = (int)cfg->prompt_tokens[i];
        row->total_ms = (double)cost_prefill_ns(p, row->tokens, &b) / 1e6;
        row->linear_ms = (b.linear_flops + b.lm_head_flops) / r->flops_per_s * 1e3;
        row->attention_ms = b.attention_flops / r->flops_per_s * 1e3;
        if (cost_fit_applies(p)) { /* the measured terms, not the rates */
            const double n = row->tokens;
            row->linear_ms = (p->gpu.fit.token_ns * n + p->gpu.fit.seq_ns) / 1e6;
            row->attention_ms = p->gpu.fit.pair_ns * n * (n + 1) / 2 / 1e6;
        }
        row->memory_ms = b.memory_ns / 1e6;
        row->compute_bound = b.compute_ns >= b.memory_ns;
        row->ratio_linear = row->linear_ms / r->decode_ms;
        row->ratio_total = row->total_ms / r->decode_ms;
        row->scaling = i > 0 ? row->total_ms / r->rows[i - 1].total_ms : 0;
    }
    r->n_rows = cfg->n_prompts;
}

static void print_table(FILE *out, const cost_params *p, const model_cfg *cfg,
                        const model_report *r)
{
    const cost_gpu *g = &p->gpu;
    const cost_arch *a = &p->arch;
    fprintf(out, "GPU    %s: %.1f TFLOP/s dense BF16, %.2f TB/s, %.0f GB", g->name,
            g->peak_flops / 1e12, g->mem_bandwidth / 1e12, g->mem_bytes / 1e9);
    if (p->compute_efficiency != 1.0 || p->bandwidth_efficiency != 1.0)
        fprintf(out, " (reaching %.0f%% of FLOP/s, %.0f%% of bandwidth)",
                p->compute_efficiency * 100, p->bandwidth_efficiency * 100);
    fprintf(out, "\nmodel  %s: %d layers, hidden %d, %d heads / %d KV heads x %d, FFN %d, "
                 "vocab %d, context %d%s\n",
            a->name, a->n_layers, a->hidden, a->n_heads, a->n_kv_heads, a->head_dim, a->ffn,
            a->vocab, a->max_position, a->tied_embeddings ? ", tied embeddings" : "");
    if (p->params_override > 0)
        fprintf(out, "FLOP per token: %.1f GFLOP (2 x %.2f G params, LM head included)\n",
                r->flop_per_token / 1e9, p->params_override / 1e9);
    else
        fprintf(out, "FLOP per token: %.2f GFLOP (2 x %.3f G linear params) + %.2f GFLOP LM "
                     "head per sampled row\n",
                r->flop_per_token / 1e9, cost_linear_params(p) / 1e9, r->lm_head_flop_row / 1e9);
    fprintf(out, "weights read per step: %.2f GB; KV cache: %.1f KiB per token\n",
            cost_weight_bytes(p) / 1e9, cost_kv_bytes_per_token(p) / 1024);

    const double weights_ms = r->decode.weight_bytes / r->bytes_per_s * 1e3;
    const double kv_ms = r->decode.kv_bytes / r->bytes_per_s * 1e3;
    char overhead[32];
    units_format_duration(p->step_overhead_ns, overhead, sizeof overhead);
    const bool fitted = cost_fit_applies(p);
    if (fitted)
        fprintf(out, "step model fitted on %s (the profile's): step %s + %.4f ms per sequence + "
                     "%.3f us per context token; %.4f ms per prompt token + %.3f ns per "
                     "attention pair\n",
                a->name, overhead, p->gpu.fit.seq_ns / 1e6, p->gpu.fit.ctx_ns / 1e3,
                p->gpu.fit.token_ns / 1e6, p->gpu.fit.pair_ns);
    if (fitted)
        fprintf(out, "decode-only step (batch %lld, context %lld): %.2f ms = step %s + "
                     "sequences and context %.3f ms\n\n",
                (long long)cfg->decode_batch, (long long)cfg->decode_context, r->decode_ms,
                overhead, r->decode.compute_ns / 1e6);
    else
        fprintf(out, "decode-only step (batch %lld, context %lld): %.2f ms = max(compute %.3f ms, "
                     "weights %.2f ms + KV %.3f ms) + overhead %s\n\n",
                (long long)cfg->decode_batch, (long long)cfg->decode_context, r->decode_ms,
                r->decode.compute_ns / 1e6, weights_ms, kv_ms, overhead);

    fprintf(out, "%8s %10s %10s %10s %8s %10s %10s %9s\n", "prompt", "linear", "attention",
            "prefill", "bound", "linear /", "prefill /", "vs");
    fprintf(out, "%8s %10s %10s %10s %8s %10s %10s %9s\n", "tokens", "(ms)", "(ms)",
            "step (ms)", "", "decode", "decode", "previous");
    for (int i = 0; i < r->n_rows; i++) {
        const prompt_row *row = &r->rows[i];
        char scaling[16];
        if (i > 0)
            snprintf(scaling, sizeof scaling, "%.2fx", row->scaling);
        else
            snprintf(scaling, sizeof scaling, "-");
        fprintf(out, "%8d %10.1f %10.1f %10.1f %8s %9.1fx %9.1fx %9s\n", row->tokens,
                row->linear_ms, row->attention_ms, row->total_ms,
                fitted ? "fitted" : row->compute_bound ? "compute" : "memory", row->ratio_linear,
                row->ratio_total, scaling);
    }
    if (fitted) {
        fprintf(out, "\nlinear = per-token x tokens + one sequence; attention = per-pair x n (n + "
                     "1) / 2;\nprefill step = step + linear + attention (the fitted step model, "
                     "one prompt alone in its step).\n");
        return;
    }
    fprintf(out, "\nlinear = 2 x params x tokens / %.1f TFLOP/s; attention = L x 2 x d x n (n + 1) "
                 "/ the same;\nprefill step = max(compute, memory) + overhead (one prompt, "
                 "alone in its step).\n",
            r->flops_per_s / 1e12);
}

static int set_real(json_t *obj, const char *key, double v)
{
    return json_object_set_new(obj, key, json_real(v));
}

static json_t *build_json(const cost_params *p, const model_cfg *cfg, const model_report *r)
{
    json_t *root = json_object();
    json_t *prompts = json_array();
    if (!root || !prompts)
        goto error;
    int rc = 0;
    rc |= json_object_set_new(root, "gpu", json_string(p->gpu.name));
    rc |= json_object_set_new(root, "model", json_string(p->arch.name));
    rc |= set_real(root, "peak_flops", p->gpu.peak_flops);
    rc |= set_real(root, "mem_bandwidth", p->gpu.mem_bandwidth);
    rc |= set_real(root, "compute_efficiency", p->compute_efficiency);
    rc |= set_real(root, "bandwidth_efficiency", p->bandwidth_efficiency);
    rc |= set_real(root, "step_overhead_ms", (double)p->step_overhead_ns / 1e6);
    rc |= json_object_set_new(root, "params_override", p->params_override > 0
                                                           ? json_real(p->params_override)
                                                           : json_null());
    rc |= set_real(root, "linear_params", cost_linear_params(p));
    rc |= set_real(root, "lm_head_params", cost_lm_head_params(p));
    rc |= set_real(root, "flop_per_token", r->flop_per_token);
    rc |= set_real(root, "lm_head_flop_per_sampled_row", r->lm_head_flop_row);
    rc |= set_real(root, "weight_bytes", cost_weight_bytes(p));
    rc |= set_real(root, "kv_bytes_per_token", cost_kv_bytes_per_token(p));
    rc |= json_object_set_new(root, "decode_batch", json_integer(cfg->decode_batch));
    rc |= json_object_set_new(root, "decode_context", json_integer(cfg->decode_context));
    rc |= set_real(root, "decode_ms", r->decode_ms);
    for (int i = 0; i < r->n_rows; i++) {
        const prompt_row *row = &r->rows[i];
        json_t *o = json_object();
        if (!o || json_array_append_new(prompts, o) != 0)
            goto error;
        rc |= json_object_set_new(o, "tokens", json_integer(row->tokens));
        rc |= set_real(o, "linear_ms", row->linear_ms);
        rc |= set_real(o, "attention_ms", row->attention_ms);
        rc |= set_real(o, "memory_ms", row->memory_ms);
        rc |= set_real(o, "total_ms", row->total_ms);
        rc |= json_object_set_new(o, "bound", json_string(row->compute_bound ? "compute"
                                                                              : "memory"));
        rc |= set_real(o, "ratio_linear", row->ratio_linear);
        rc |= set_real(o, "ratio_total", row->ratio_total);
        rc |= json_object_set_new(o, "scaling_vs_previous",
                                  i > 0 ? json_real(row->scaling) : json_null());
    }
    rc |= json_object_set(root, "prompts", prompts);
    json_decref(prompts);
    if (rc != 0) {
        json_decref(root);
        return NULL;
    }
    return root;
error:
    json_decref(prompts);
    json_decref(root);
    return NULL;
}

int cli_model(int argc, char **argv)
{
    experiment_config engine;
    model_cfg cfg;
    experiment_defaults(&engine, EXPERIMENT_SIM);
    memset(&cfg, 0, sizeof cfg);
    cfg.prompt_tokens[0] = 4000, cfg.prompt_tokens[1] = 8000, cfg.prompt_tokens[2] = 16000;
    cfg.n_prompts = 3;
    cfg.decode_batch = 1;
    cfg.decode_context = 0;

    const opts_group groups[] = {
        experiment_device_group(&engine),
        {"output", model_specs, OPTS_COUNT(model_specs), &cfg},
    };
    const int n_groups = (int)(sizeof groups / sizeof groups[0]);
    if (opts_show_help(stdout, argc, argv, "stallscope model [options]",
                       "The arithmetic behind long-prompt interference: how long one prompt's "
                       "prefill step\nlasts against a decode-only step, from the roofline cost "
                       "model (docs/explanation/cost-model.md).\nThe lesson's figures: "
                       "--gpu h100-sxm --model llama-3.1-8b --lesson-flops.",
                       groups, n_groups))
        return CLI_EXIT_OK;

    char err[ERR_LEN];
    err[0] = '\0';
    if (opts_parse(argc, argv, groups, n_groups, NULL, 0, NULL, err) != 0)
        return cli_usage_error("model", err);
    if (cfg.list) {
        cost_catalog_print(stdout);
        return CLI_EXIT_OK;
    }

    if (experiment_resolve_cost(&engine, err) != 0)
        return cli_usage_error("model", err);
    const cost_params params = engine.cost;
    const int max_position = params.arch.max_position;
    for (int i = 0; i < cfg.n_prompts; i++)
        if (cfg.prompt_tokens[i] > max_position) {
            err_set(err, "a prompt of %lld tokens exceeds %s's context of %d tokens",
                    (long long)cfg.prompt_tokens[i], params.arch.name, max_position);
            return cli_usage_error("model", err);
        }
    if (cfg.decode_context + 1 > max_position) {
        err_set(err, "--decode-context %lld leaves no room to decode in %s's context of %d "
                     "tokens",
                (long long)cfg.decode_context, params.arch.name, max_position);
        return cli_usage_error("model", err);
    }

    model_report report;
    compute_report(&params, &cfg, &report);
    if (!cfg.json) {
        print_table(stdout, &params, &cfg, &report);
        return CLI_EXIT_OK;
    }
    json_t *doc = build_json(&params, &cfg, &report);
    if (!doc || json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(12)) != 0) {
        json_decref(doc);
        fprintf(stderr, "stallscope model: cannot write JSON (out of memory?)\n");
        return CLI_EXIT_FAIL;
    }
    json_decref(doc);
    fputc('\n', stdout);
    return CLI_EXIT_OK;
}
