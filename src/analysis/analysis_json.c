/* summary.json and comparison.json, built in one place: every key is specified in
 * docs/reference/artifacts.md (tests/integration/artifacts_spec.sh holds them to it). */
#include <math.h>

#include "analysis/analysis.h"

/* A non-finite double has no JSON spelling: write null rather than a broken file. */
static json_t *real_or_null(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

json_t *analysis_dist_to_json(const analysis_dist *d)
{
    return json_pack("{s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "count", (json_int_t)d->count,
                     "mean", real_or_null(d->mean), "p50", real_or_null(d->p50), "p90",
                     real_or_null(d->p90), "p99", real_or_null(d->p99), "p999",
                     real_or_null(d->p999), "max", real_or_null(d->max));
}

static json_t *ttft_json(const analysis_dist *d)
{
    return json_pack("{s:I, s:o, s:o, s:o}", "count", (json_int_t)d->count, "p50",
                     real_or_null(d->p50), "p99", real_or_null(d->p99), "max",
                     real_or_null(d->max));
}

static json_t *injection_json(const analysis_injection *inj)
{
    /* -1 means "never happened" in memory; in the file that is null, not a time. */
    return json_pack("{s:o, s:o, s:o, s:i, s:o, s:o, s:i}", "t_plan_s",
                     real_or_null(inj->t_plan_s), "t_send_s",
                     inj->t_send_s >= 0 ? json_real(inj->t_send_s) : json_null(), "ttft_ms",
                     inj->ttft_ms >= 0 ? json_real(inj->ttft_ms) : json_null(), "prompt_tokens",
                     inj->prompt_tokens, "max_gap_ms", real_or_null(inj->max_gap_ms),
                     "median_gap_ms", real_or_null(inj->median_gap_ms), "users_stalled",
                     inj->users_stalled);
}

static json_t *total_json(const analysis_cause_total *t, int64_t all)
{
    return json_pack("{s:I, s:o, s:o}", "stalls", (json_int_t)t->stalls, "frozen_user_s",
                     real_or_null(t->frozen_user_s), "share",
                     real_or_null(all > 0 ? (double)t->stalls / (double)all : 0));
}

#define TOP_CULPRITS 10

static json_t *attribution_json(const analysis_summary *s)
{
    const analysis_attribution *a = &s->attribution;
    json_t *causes = json_object(), *buckets = json_array(), *culprits = json_array();
    for (int c = 0; c < ANALYSIS_N_CAUSES; c++)
        json_object_set_new(causes, analysis_cause_name((analysis_cause)c),
                            total_json(&a->by_cause[c], s->n_stall_list));
    for (int b = 0; b < ANALYSIS_PROMPT_BUCKETS; b++) {
        json_t *j = total_json(&a->by_prompt[b], a->by_cause[ANALYSIS_CAUSE_PREFILL].stalls);
        json_object_set_new(j, "prompt_tokens_from", json_integer(analysis_prompt_bucket_lo[b]));
        json_object_set_new(j, "prompt_tokens_to", b + 1 < ANALYSIS_PROMPT_BUCKETS
                                                       ? json_integer(analysis_prompt_bucket_lo[b + 1])
                                                       : json_null());
        json_array_append_new(buckets, j);
    }
    for (int i = 0; i < a->n_culprits && i < TOP_CULPRITS; i++) {
        const analysis_culprit *c = &a->culprits[i];
        json_array_append_new(culprits,
                              json_pack("{s:I, s:s, s:i, s:I, s:i, s:o}", "request",
                                        (json_int_t)c->request, "kind", tokenlog_kind_name(c->kind),
                                        "prompt_tokens", c->prompt_tokens, "stalls",
                                        (json_int_t)c->stalls, "users", c->users, "frozen_user_s",
                                        real_or_null(c->frozen_user_s)));
    }
    return json_pack("{s:b, s:o, s:o, s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "step_log",
                     (int)a->step_log, "by_cause", causes, "by_prompt_tokens", buckets,
                     "culprit_requests", (json_int_t)a->n_culprits, "top_culprits", culprits,
                     "stalls_per_min", real_or_null(a->stalls_per_min), "stalls_per_1k_requests",
                     real_or_null(a->stalls_per_1k_requests), "frozen_user_s_per_hour",
                     real_or_null(a->frozen_user_s_per_hour), "requests_stalled_100ms",
                     real_or_null(a->requests_stalled_100ms), "requests_stalled_1s",
                     real_or_null(a->requests_stalled_1s));
}

json_t *analysis_summary_to_json(const analysis_summary *s)
{
    json_t *injections = json_array();
    if (!injections)
        return NULL;
    for (int i = 0; i < s->n_injections; i++)
        if (json_array_append_new(injections, injection_json(&s->injections[i])) != 0) {
            json_decref(injections);
            return NULL;
        }
    const analysis_stalls *st = &s->stalls;
    json_t *stalls = json_pack(
        "{s:o, s:I, s:o, s:I, s:o, s:o}", "threshold_ms", real_or_null(st->threshold_ms),
        "count", (json_int_t)st->count, "fraction_of_gaps", real_or_null(st->fraction_of_gaps),
        "aligned", (json_int_t)st->aligned, "aligned_fraction",
        real_or_null(st->aligned_fraction), "stalled_time_fraction",
        real_or_null(st->stalled_time_fraction));
    /* "o" steals each reference, even when json_pack fails, so nothing leaks here. */
    json_t *root = json_pack("{s:s, s:s, s:s, s:o, s:i, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:I, s:i, s:I, s:o}",
                     "label", s->label, "engine", s->engine, "target", s->target, "duration_s",
                     real_or_null(s->duration_s), "users", s->users, "tokens_received",
                     (json_int_t)s->tokens_received, "itl_ms", analysis_dist_to_json(&s->itl_ms), "itl_noise",
                     analysis_dist_to_json(&s->itl_noise), "ttft_ms",
                     ttft_json(&s->ttft_ms), "stalls", stalls, "injections", injections,
                     "spike_ratio", real_or_null(s->spike_ratio), "complete", (int)s->complete,
                     "errors", (json_int_t)s->errors, "injections_with_stalls",
                     s->injections_with_stalls, "protocol_violations",
                     (json_int_t)s->protocol_violations, "attribution", attribution_json(s));
    if (root) {
        json_object_set_new(root, "streamed_throughput", json_real(s->streamed_throughput));
        json_object_set_new(root, "metrics", standard_to_json(&s->standard));
        json_object_set_new(root, "requests", json_integer((json_int_t)s->requests));
        const analysis_prompt_tokens *pt = &s->prompt_tokens;
        json_object_set_new(root, "prompt_tokens",
                            pt->requests > 0
                                ? json_pack("{s:I, s:I, s:I, s:f, s:f}", "requests",
                                            (json_int_t)pt->requests, "planned",
                                            (json_int_t)pt->planned, "counted",
                                            (json_int_t)pt->counted, "ratio", pt->ratio, "worst",
                                            pt->worst)
                                : json_null());
        json_object_set_new(root, "failed", json_boolean(s->failed));
        json_object_set_new(root, "error_common",
                            s->errors > 0 ? json_pack("{s:s, s:I}", "error", s->error_common,
                                                      "count", (json_int_t)s->error_common_count)
                                          : json_null());
    }
    if (root && s->gpus > 0) {
        /* Per GPU: what a disaggregated setup's extra hardware costs (the simulator: 1 GPU, or
         * P + D). */
        const standard_class *all = &s->standard.all;
        json_object_set_new(root, "gpus", json_integer(s->gpus));
        json_object_set_new(root, "per_gpu",
                            json_pack("{s:o, s:o}", "output_throughput",
                                      json_real(all->output_throughput / s->gpus),
                                      "request_goodput",
                                      all->has_goodput ? json_real(all->request_goodput / s->gpus)
                                                       : json_null()));
    }
    if (root && s->prefix_cache)
        json_object_set_new(root, "prefix_cache",
                            json_pack("{s:I, s:I, s:o}", "queries", (json_int_t)s->prefix_queries,
                                      "hits", (json_int_t)s->prefix_hits, "hit_rate",
                                      s->prefix_queries > 0
                                          ? json_real((double)s->prefix_hits /
                                                      (double)s->prefix_queries)
                                          : json_null()));
    if (root && s->stamps.known)
        json_object_set_new(root, "stamps",
                            json_pack("{s:s, s:I, s:I, s:I}", "transport", s->stamps.transport,
                                      "kernel", (json_int_t)s->stamps.kernel, "kernel_coalesced",
                                      (json_int_t)s->stamps.kernel_coalesced, "user",
                                      (json_int_t)s->stamps.user));
    /* Which percentiles: exact, or a histogram's with a bounded error (long runs). */
    if (root)
        json_object_set_new(root, "itl_percentiles",
                            json_pack("{s:s, s:o}", "method", s->itl_histogram ? "log-histogram" : "exact",
                                      "relative_error", json_real(s->itl_relative_error)));
    if (root && s->tokens_csv_dropped)
        json_object_set_new(root, "tokens_csv",
                            json_pack("{s:b, s:I, s:s}", "written", 0, "max_events",
                                      (json_int_t)s->tokens_csv_max_events, "why",
                                      "more token events than the limit (--tokens-csv-max); "
                                      "the summary was computed as the run went"));
    return root;
}

/* interference / baseline, or null when there is nothing to divide by. */
static json_t *ratio(const analysis_summary *baseline, double base, double value)
{
    if (!baseline || !(base != 0) || !isfinite(value / base))
        return json_null();
    return json_real(value / base);
}

json_t *analysis_comparison_to_json(const analysis_summary *baseline,
                                    const analysis_summary *interference)
{
    const analysis_dist *b = baseline ? &baseline->itl_ms : NULL;
    const analysis_dist *x = &interference->itl_ms;
    json_t *ratios = json_pack(
        "{s:o, s:o, s:o, s:o, s:o, s:o}", "p50", ratio(baseline, b ? b->p50 : 0, x->p50), "p90",
        ratio(baseline, b ? b->p90 : 0, x->p90), "p99", ratio(baseline, b ? b->p99 : 0, x->p99),
        "p999", ratio(baseline, b ? b->p999 : 0, x->p999), "max",
        ratio(baseline, b ? b->max : 0, x->max), "stall_count",
        ratio(baseline, baseline ? (double)baseline->stalls.count : 0,
              (double)interference->stalls.count));
    return json_pack("{s:o, s:o, s:o}", "baseline",
                     baseline ? analysis_summary_to_json(baseline) : json_null(), "interference",
                     analysis_summary_to_json(interference), "ratios", ratios);
}
