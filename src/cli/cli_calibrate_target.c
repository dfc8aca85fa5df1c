/* stallscope calibrate --target URL — fit the step model of a black-box server from probes
 * it answers (calibrate/calib_target.h) and write a hardware profile (profile.h, version 2,
 * source "target"): model, sim and run take it with --hardware FILE, and, without --model,
 * run the model the step model was fitted on (the target's, mapped to the catalog).
 *
 * Every probe is printed with its fitted time and residual; a fit whose decode or prefill
 * rms relative residual passes --max-rms is refused (exit 1, nothing written, the probe that
 * disagreed most named) unless --force-profile; so is one that predicts its own
 * interference probes' stall or prefill time 25 % off or more (calib_target_check: each probe
 * beside its prediction is printed either way, the probe that missed most named); and one
 * whose gaps the target's usage
 * counts differently from the stream (exit 1, nothing written) unless --count-tokens says
 * which to trust. Bad input (an unreachable target, a model the catalog does not know, bad
 * flags): one line, exit 2, nothing written. --target, --model-name, --insecure and
 * --transport are run's own (experiment_connection_group), --api-key and --header too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "calibrate/calib_target.h"
#include "cli/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/fsio.h"
#include "common/redact.h"
#include "engine/fit.h"
#include "experiment/config.h"
#include "experiment/options.h"

typedef struct target_opts {
    calib_target_config cfg;
    char out[512];
    char model[64];
    char name[32];
    double max_rms;
    double mem_bytes;
    bool force;
    bool no_interference;
    bool json;
} target_opts;

/* A fraction (0.15) or a percentage (15%) in (0, 10] into *out. 0, or -1 with err. */
static int parse_fraction(const char *value, double *out, char *err)
{
    char *end = NULL;
    double x = strtod(value, &end);
    if (end != value && strcmp(end, "%") == 0)
        x /= 100;
    else if (end == value || *end)
        x = -1;
    if (!(x > 0 && x <= 10))
        return err_set(err, "'%s' is not a fraction (0.15) or a percentage (15%%)", value);
    *out = x;
    return 0;
}

static int apply_max_rms(void *ctx, const char *value, char *err)
{
    return parse_fraction(value, &((target_opts *)ctx)->max_rms, err);
}

static int apply_max_drift(void *ctx, const char *value, char *err)
{
    return parse_fraction(value, &((target_opts *)ctx)->cfg.max_drift, err);
}

static int apply_count_tokens(void *ctx, const char *value, char *err)
{
    target_opts *o = ctx;
    return calib_target_count_parse(&o->cfg, value, err);
}

static int apply_weight_bound(void *ctx, const char *value, char *err)
{
    target_opts *o = ctx;
    char *end = NULL;
    const double x = strtod(value, &end);
    if (end == value || *end || !(x >= 0 && x <= 1000))
        return err_set(err, "'%s' is not a number in [0, 1000]", value);
    o->cfg.weight_bound = x;
    return 0;
}

#define O target_opts
static const opts_spec target_specs[] = {
    OPTS_STRING("out", "FILE", "where to write the profile (default hardware.json; written "
                "atomically, only when the fit is accepted)", O, out),
    OPTS_STRING("model", "M", "the catalog architecture the step model is stated for (default: "
                "the served model's name, e.g. Qwen/Qwen2.5-7B-Instruct -> qwen2.5-7b)", O, model),
    OPTS_INT("max-streams", "N", "largest decode probe: 1, 2, 4 ... N concurrent streams "
             "(default 128)", O, cfg.max_streams, 1, 1024),
    OPTS_INT("short-context", "N", "decode probes' short prompt (default 64)", O, cfg.contexts[0],
             1, 1 << 20),
    OPTS_INT("long-context", "N", "decode probes' long prompt (default 1024; 0: none)", O,
             cfg.contexts[1], 0, 1 << 20),
    OPTS_INT("min-prompt-tokens", "N", "shortest prefill probe; then x2 ... (default 256)", O,
             cfg.min_prompt_tokens, 16, 1 << 20),
    OPTS_INT("max-prompt-tokens", "N", "longest prefill probe (default 16k; shrinks to what the "
             "target accepts, and says so)", O, cfg.max_prompt_tokens, 16, 1 << 20),
    OPTS_INT("interference-streams", "N", "streams the interference probes inject into "
             "(default 32)", O, cfg.interference_streams, 1, 1024),
    OPTS_FLAG("no-interference", "skip the interference probes (no policy or budget inferred)",
              O, no_interference),
    OPTS_DURATION("seconds", "DUR", "steady window of each decode probe (default 1s)", O,
                  cfg.window_ns, 100 * CLOCK_NS_PER_MS, 600 * CLOCK_NS_PER_S),
    OPTS_INT("repeats", "N", "prefill probes: the median TTFT of N prompts (default 3)", O,
             cfg.repeats, 1, 15),
    OPTS_FN("weight-bound", "F", "fit a prefill only when its TTFT is >= F x the one-stream "
            "decode step (default 4; 0: fit every prefill); shorter ones read weights more than "
            "they compute, which a GPU overlaps and the step model adds", apply_weight_bound),
    OPTS_DURATION("timeout", "DUR", "longest wait of one probe (default 120s)", O, cfg.timeout_ns,
                  CLOCK_NS_PER_S, 3600 * CLOCK_NS_PER_S),
    OPTS_FN("max-rms", "F", "refuse a fit whose decode or prefill rms relative residual is above "
            "F (default 15%)", apply_max_rms),
    OPTS_FN("max-drift", "F", "report a drift of the sentinel (a 512-token prompt alone, at the "
            "start, after each stage and at the end) over F, naming the stage after which the "
            "server moved (default 10%)", apply_max_drift),
    OPTS_FN("count-tokens", "C", "what a gap is divided by: auto (default: the tokens streamed, "
            "one per event; exit 1, nothing written, when usage.completion_tokens disagrees by "
            "more than 2 % or breaks the protocol) | stream (the events, whatever usage says) | "
            "usage (usage's count: a server that sends several tokens per event)",
            apply_count_tokens),
    OPTS_FLAG("force-profile", "write the profile even when it is refused (a fit over "
              "--max-rms, or one that misses its own interference probes by over 25 %: exit 0; "
              "\"measured\".\"accepted\" false)", O, force),
    OPTS_POSITIVE("mem-bytes", "B", "the target's memory for weights + KV cache, which sizes "
                  "the simulated KV cache (default 80e9)", O, mem_bytes),
    OPTS_STRING("name", "NAME", "the profile's name (default target)", O, name),
    OPTS_FLAG("json", "also print the profile on stdout", O, json),
};
#undef O

static void print_fit(const calib_target_result *r, const calib_target_fitted *m)
{
    const cost_step_fit *fit = &m->gpu.fit;
    printf("  probes (decode: median steady gap; prefill: median TTFT) and the fitted step model:\n");
    printf("    %-26s %12s %12s %9s\n", "step", "measured ms", "fitted ms", "residual");
    for (int i = 0; i < m->n; i++) {
        char shape[48];
        cli_calibrate_probe_shape(&m->probes[i], shape, sizeof shape);
        printf("    %-26s %12.3f %12.3f %+8.1f %%\n", shape, m->probes[i].ns / 1e6,
               fit_predict_ns(fit, &m->probes[i]) / 1e6, m->residual[i] * 100);
    }
    for (int i = 0; i < r->n_prefill; i++) {
        if (r->prefill[i].fitted)
            continue;
        const fit_probe p = {.batch = 1, .prompt_tokens = r->prefill[i].prompt_tokens,
                             .ns = r->prefill[i].ttft_ns};
        const double f = fit_predict_ns(fit, &p);
        char shape[48];
        cli_calibrate_probe_shape(&p, shape, sizeof shape);
        printf("    %-26s %12.3f %12.3f %+8.1f %%  (not fitted: weight-bound)\n", shape,
               p.ns / 1e6, f / 1e6, (f - p.ns) / p.ns * 100);
    }
    printf("  fit: step %.3f ms + %.4f ms per sequence + %.3f ns per context token; prefill "
           "%.4f ms per token + %.4f ns per attention pair\n",
           fit->step_ns / 1e6, fit->seq_ns / 1e6, fit->ctx_ns, fit->token_ns / 1e6, fit->pair_ns);
    cli_calibrate_print_residuals(&m->fit);
}

/* What the gaps were divided by, and whether usage agreed (it must, unless told). */
static void print_tokens(const calib_target_tokens *t, calib_target_count asked)
{
    char why[ERR_LEN];
    const bool agree = calib_target_tokens_agree(t, why, sizeof why);
    printf("  tokens: %lld streamed, usage.completion_tokens %lld; the gaps are divided by %s\n",
           (long long)t->streamed, (long long)t->usage,
           t->counted == CALIB_TARGET_COUNT_USAGE ? "usage's count" : "the events streamed");
    if (!agree)
        printf("  note: usage and the stream disagree (%s); --count-tokens %s trusts %s\n", why,
               calib_target_count_name(asked), t->counted == CALIB_TARGET_COUNT_USAGE
                                                   ? "usage" : "the stream");
}

static void print_policy(const calib_target_result *r, const calib_target_fitted *m)
{
    const calib_target_policy *pol = &m->policy;
    if (r->n_stall == 0)
        return;
    printf("  interference (one prompt into %d streams): each prompt's stall against its own "
           "prefill time (TTFT less queueing)\n",
           r->stall[0].streams);
    printf("    %8s %10s %10s %10s %6s %7s %12s %7s\n", "prompt", "stall ms", "TTFT ms",
           "queued ms", "steps", "ratio", "fitted 1-step", "ratio");
    for (int i = 0; i < r->n_stall; i++) {
        const calib_target_stall *st = &m->stall[i];
        int64_t one_ns = 0;
        cost_injection_prefill_cells_ns(&m->cost, st->prompt_tokens, st->streams,
                                        (int)(st->mean_context + 0.5), 0,
                                        (int64_t)st->occupied_cells, &one_ns);
        const double one = (double)one_ns;
        printf("    %8d %10.2f %10.2f %10.2f %6d %7.2f %12.2f %7.2f%s\n", st->prompt_tokens,
               st->stall_ns / 1e6, st->ttft_ns / 1e6, st->queue_ns / 1e6, st->steps,
               pol->own_ratio[i],
               one / 1e6, pol->ratio[i],
               i < pol->n && !pol->informative[i] ? "  (too short to tell)" : "");
    }
    if (strcmp(pol->policy, "mixed") == 0)
        printf("  policy inferred: one-step prefill (each long prompt's stall is its whole prefill: "
               "mixed or prefill-first), budget >= %d tokens\n", pol->budget);
    else if (strcmp(pol->policy, "chunked") == 0)
        printf("  policy inferred: chunked prefill (a stall is a part of the prompt's prefill), "
               "budget ~%d tokens (%s)\n", pol->budget,
               pol->budget_counted ? "bounded by the steps each prefill took"
                                   : "the fitted step that long");
    else if (strcmp(pol->policy, "none") == 0)
        printf("  policy inferred: none: no prompt stalled the streams (prefill runs elsewhere?)\n");
    else
        printf("  policy inferred: unknown: no prompt's prefill lasted %.0f decode steps "
               "(raise --max-prompt-tokens)\n", CALIB_TARGET_INFORMATIVE);
    if (r->stall_note[0])
        printf("  note: %s\n", r->stall_note);
}

/* Each interference probe beside what the profile predicts of it (calib_target_check). */
static void print_check(const calib_target_result *r, const calib_target_fitted *m)
{
    const calib_target_check *ck = &m->check;
    if (ck->n == 0)
        return;
    printf("  the profile against its own interference probes (%s; a miss over %.0f %% "
           "refuses it):\n",
           strcmp(m->policy.policy, "chunked") == 0 ? "chunked at the budget inferred"
                                                    : "one-step prefill",
           CALIB_TARGET_MAX_MISS * 100);
    printf("    %8s %10s %10s %8s %11s %10s %8s\n", "prompt", "stall ms", "predicted", "miss",
           "prefill ms", "predicted", "miss");
    for (int i = 0; i < ck->n; i++) {
        const calib_target_stall *st = &r->stall[i];
        printf("    %8d %10.2f %10.2f %+7.1f%% %11.2f %10.2f %+7.1f%%%s\n", st->prompt_tokens,
               st->stall_ns / 1e6, ck->stall_ns[i] / 1e6, ck->stall_miss[i] * 100,
               (st->ttft_ns - st->queue_ns) / 1e6, ck->prefill_ns[i] / 1e6,
               ck->prefill_miss[i] * 100, ck->judged[i] ? "" : "  (not judged)");
    }
    if (ck->n_judged == 0)
        printf("  note: no probe judged (%s)\n", m->policy.policy[0] ? "no prompt stalled the streams"
                                                                      : "no policy inferred");
}

/* The sentinel's series and whether the server drifted, and after which stage. */
static void print_sentinel(const calib_target_result *r)
{
    if (r->n_sentinel == 0)
        return;
    printf("  sentinel (a %d-token prompt alone, %d tokens answered, %d times):", r->sentinel_tokens,
           CALIB_TARGET_SENTINEL_ANSWER, CALIB_TARGET_SENTINEL_REPEATS);
    for (int i = 0; i < r->n_sentinel; i++)
        printf("%s %s TTFT %.2f ms step %.3f ms", i ? ";" : "",
               i ? r->sentinel[i].after : "start", r->sentinel[i].ttft_ns / 1e6,
               r->sentinel[i].step_ns / 1e6);
    printf("\n");
    if (r->sentinel_note[0])
        printf("  note: %s\n", r->sentinel_note);
    calib_target_drift d;
    calib_target_drift_of(r->sentinel, r->n_sentinel, r->max_drift, &d);
    if (d.moved < 0)
        printf("  drift: TTFT %.1f %%, step %.1f %% (within --max-drift %.0f %%)\n", d.ttft * 100,
               d.step * 100, r->max_drift * 100);
    else
        printf("  drift: the server moved after the %s probes: the sentinel's %s %+.1f %% from the "
               "start (over --max-drift %.0f %%); the probes after it were measured on another "
               "server than those before\n",
               r->sentinel[d.moved].after, d.moved_ttft ? "TTFT" : "step", d.by * 100,
               r->max_drift * 100);
}

/* The target's KV usage over the lone prefill probes (/metrics, where offered). */
static void print_occupancy(const calib_target_result *r)
{
    calib_target_metrics m[CALIB_TARGET_MAX_PROMPTS];
    for (int i = 0; i < r->n_prefill; i++)
        m[i] = r->prefill[i].metrics;
    double lo = 0, hi = 0;
    const double spread = calib_target_kv_spread(m, r->n_prefill, &lo, &hi);
    const double cells = calib_target_cells_seen(r);
    if (cells > 0)
        printf("  /metrics: a unified cache's occupied cells, up to %.0f during the probes: %s\n",
               cells, calib_target_cells_said(r)
                          ? "no reset, so the fit charges each probe's attention over the cells "
                            "said"
                          : "a reset cleared them before each probe, so each probe's own");
    if (spread < 0)
        printf("  /metrics: no KV usage said before the lone prefill probes\n");
    else if (spread > CALIB_TARGET_OCCUPANCY_MOVED)
        printf("  occupancy moved: KV usage %.0f %% .. %.0f %% before the lone prefill probes (%.0f "
               "points): the prefill fit saw a cache that filled, not one state (%s)\n",
               lo * 100, hi * 100, spread * 100,
               cells > 0 && calib_target_cells_said(r)
                   ? "fitted against the occupied cells said"
                   : "not fitted against it: the server says no occupied cells");
    else
        printf("  /metrics: KV usage %.0f %% .. %.0f %% before the lone prefill probes\n", lo * 100,
               hi * 100);
}

/* The server's state as the probes saw it: the reset, prefix caching, a prefill after a fill. */
static void print_kept(const calib_target_result *r)
{
    const calib_target_kept *k = &r->kept;
    if (k->reset_path[0] && k->reset_slots > 1)
        printf("  reset: %s's POST /slots/{0..%d}?action=erase (every slot), before every lone "
               "prefill and sentinel (%d sent)\n",
               k->reset_server, k->reset_slots - 1, k->resets);
    else if (k->reset_path[0])
        printf("  reset: %s's POST %s, before every lone prefill and sentinel (%d sent)\n",
               k->reset_server, k->reset_path, k->resets);
    else
        printf("  reset: none offered (POST /reset_prefix_cache, /flush_cache, "
               "/slots/0?action=erase): lone probes measured after whatever came before\n");
    if (k->props_slots > 0 && !(k->reset_path[0] && k->reset_slots > 1))
        printf("  slots: %d (llama.cpp's GET /props)\n", k->props_slots);
    const int caching = calib_target_prefix_caching(k);
    if (caching >= 0)
        printf("  prefix caching: %s: the same %d-token prompt twice: TTFT %.2f ms, then %.2f ms "
               "(%.2fx)\n", caching ? "on" : "off", k->prompt_tokens, k->cache_first_ns / 1e6,
               k->cache_second_ns / 1e6, k->cache_second_ns / k->cache_first_ns);
    if (calib_target_retained_ratio(k) > 0)
        printf("  retained state: a fresh %d-token prompt alone right after the interference "
               "probes: TTFT %.2f ms, quiet %.2f ms (%.2fx)\n", k->prompt_tokens,
               k->after_fill_ns / 1e6, k->quiet_ns / 1e6, calib_target_retained_ratio(k));
}

/* The KV layout the fit took, and why (calib_target_fit_model). */
static void print_layout(const calib_target_result *r, const calib_target_fitted *m)
{
    const double ratio = calib_target_retained_ratio(&r->kept);
    if (m->kv_layout == SCHED_KV_UNIFIED && ratio >= CALIB_TARGET_RETAINED)
        printf("  KV layout: unified (llama.cpp's slots): what the streams left behind slowed a "
               "fresh prompt %.2fx, and decode steps fitted with every sequence attending over "
               "all the streams' cells miss by rms %.1f %% against %.1f %% over their own\n",
               ratio, m->unified_decode_rms * 100, m->paged_decode_rms * 100);
    else if (m->kv_layout == SCHED_KV_UNIFIED)
        printf("  KV layout: unified (llama.cpp's slots): /metrics said occupied cells, and "
               "decode steps fitted with every sequence attending over them miss by rms %.1f %% "
               "against %.1f %% over their own\n",
               m->unified_decode_rms * 100, m->paged_decode_rms * 100);
    else if (m->unified_decode_rms >= 0)
        printf("  KV layout: paged: a fresh prompt after the streams took %.2fx its quiet TTFT, "
               "but decode steps fitted over all the occupied cells miss more (rms %.1f %% "
               "against %.1f %%)\n",
               ratio, m->unified_decode_rms * 100, m->paged_decode_rms * 100);
    else if (ratio > 0)
        printf("  KV layout: paged (a fresh prompt after the streams took %.2fx its quiet TTFT, "
               "under %.2fx: nothing they left behind slowed it)\n",
               ratio, CALIB_TARGET_RETAINED);
    if (m->sum_miss >= 0 && m->overlap_miss >= 0)
        printf("  mixed steps: the decodes' reads %s the prompt's compute (the interference "
               "probes miss by rms %.1f %% so, %.1f %% %s)\n",
               m->gpu.fit.overlap ? "overlap" : "add to",
               (m->gpu.fit.overlap ? m->overlap_miss : m->sum_miss) * 100,
               (m->gpu.fit.overlap ? m->sum_miss : m->overlap_miss) * 100,
               m->gpu.fit.overlap ? "added" : "overlapped");
}

/* A profile that misses its own probes: said with the probe that missed most. */
static void say_missed(const calib_target_result *r, const calib_target_fitted *m, bool force)
{
    const calib_target_check *ck = &m->check;
    const int w = ck->worst;
    const calib_target_stall *st = &r->stall[w];
    const bool stall = ck->worst_is_stall;
    fprintf(stderr, "stallscope calibrate: the profile misses its own interference probes: the "
            "%d-token prompt into %d streams: %s measured %.2f ms, predicted %.2f ms (%+.0f %%, "
            "over %.0f %%)%s\n",
            st->prompt_tokens, st->streams, stall ? "stall" : "prefill (TTFT less queueing)",
            stall ? st->stall_ns / 1e6 : (st->ttft_ns - st->queue_ns) / 1e6,
            (stall ? ck->stall_ns[w] : ck->prefill_ns[w]) / 1e6,
            (stall ? ck->stall_miss[w] : ck->prefill_miss[w]) * 100, CALIB_TARGET_MAX_MISS * 100,
            force ? "; written anyway (--force-profile)" : "; nothing written");
}

static const char HELP[] =
    "Fit the step model of a server stallscope cannot see inside, from "
    "probes it sends itself:\n"
    "  decode        ITL of 1, 2, 4 ... --max-streams concurrent streams at a "
    "short and a long\n"
    "                prompt -> per-step, per-sequence, per-context-token cost\n"
    "  prefill       TTFT of a lone prompt of --min-prompt-tokens ... "
    "--max-prompt-tokens\n"
    "                -> per-token and attention (quadratic) cost\n"
    "  interference  the stall 32 streams (--interference-streams) see when a "
    "prompt of each length "
    "arrives\n"
    "                -> one-step or chunked prefill, and the token budget\n"
    "  state         a sentinel (a 512-token prompt alone) at the start and after "
    "each stage\n"
    "                (drift over --max-drift said, with the stage); the server's "
    "cache reset\n"
    "                (vLLM, SGLang, llama.cpp) used between lone probes; prefix "
    "caching (one\n"
    "                prompt twice); a prefill right after the interference probes; "
    "/metrics\n"
    "Prints every probe with its fitted time and residual, and writes a "
    "hardware profile\n(version 2, source \"target\") that model, sim and run "
    "take as --hardware FILE; without\n--model they run the model it was "
    "fitted on. A fit with residuals over --max-rms is\nrefused: exit 1, "
    "nothing written; so is one that misses its own interference probes\n(stall or "
    "prefill) by over 25 %. Gaps are divided by the tokens streamed, one per "
    "event;\nwhen the target's usage says otherwise the fit is refused "
    "too, unless --count-tokens\nsays which to trust. Takes about a minute "
    "against an emulated A100; progress on stderr.";

/* A fit over --max-rms: said with the probe that disagreed most. */
static void say_refused(const calib_target_fitted *m, bool force)
{
    const fit_probe *worst = &m->probes[m->worst];
    char shape[48];
    cli_calibrate_probe_shape(worst, shape, sizeof shape);
    fprintf(stderr, "stallscope calibrate: the fit is refused: decode rms %.3g %%, prefill "
            "rms %.3g %% (--max-rms %.3g %%); the probe that disagreed most: %s, measured "
            "%.3f ms, fitted %.3f ms (%+.3g %%)%s\n",
            m->fit.decode_rms * 100, m->fit.prefill_rms * 100, m->max_rms * 100, shape,
            worst->ns / 1e6, fit_predict_ns(&m->gpu.fit, worst) / 1e6,
            m->residual[m->worst] * 100,
            force ? "; written anyway (--force-profile)" : "; nothing written");
}

/* Write the profile and say how to use it. The exit status. */
static int write_profile(const target_opts *o, json_t *root, const calib_target_fitted *m,
                         const cost_arch *arch)
{
    const calib_target_policy *pol = &m->policy;
    char err[ERR_LEN];
    if (fsio_write_json(o->out, root, JSON_INDENT(2) | JSON_SORT_KEYS, err) != 0) {
        fprintf(stderr, "stallscope calibrate: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    printf("wrote %s (use: stallscope sim --hardware %s: runs %s with this step model)\n",
           o->out, o->out, arch->name);
    /* the scheduler is the simulation's flags, not the profile's: say which match */
    if (strcmp(pol->policy, "chunked") == 0)
        printf("the target chunks prompts: simulate it with --policy chunked "
               "--max-num-batched-tokens %d\n", pol->budget);
    else if (strcmp(pol->policy, "mixed") == 0)
        printf("the target prefills in one step: sim's default (--policy mixed "
               "--max-num-batched-tokens 16384) matches when its budget is >= %d\n",
               pol->budget);
    if (m->kv_layout == SCHED_KV_UNIFIED) {
        const json_t *slots = json_object_get(root, "slots");
        printf("the target keeps a unified KV cache: sim --hardware %s runs --kv-layout unified%s",
               o->out, slots ? " --max-num-seqs " : "");
        if (slots)
            printf("%lld (its slots)", (long long)json_integer_value(slots));
        printf("\n");
    }
    if (o->json) {
        json_dumpf(root, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
        printf("\n");
    }
    return CLI_EXIT_OK;
}

/* Everything after the probes: the fit, what it says, the profile. The exit status. */
static int fit_and_write(const target_opts *o, const calib_target_result *r, const cost_arch *arch,
                         const char *shown)
{
    char err[ERR_LEN];
    calib_target_fitted m;
    if (calib_target_fit_model(r, arch, o->name, o->mem_bytes, o->max_rms, &m, err) != 0) {
        fprintf(stderr, "stallscope calibrate: the step model: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    printf("  %d decode, %d prefill and %d interference probes in %.0f s\n", r->n_decode,
           r->n_prefill, r->n_stall, r->seconds);
    print_fit(r, &m);
    print_tokens(&r->tokens, o->cfg.count_tokens);
    if (r->decode_note[0])
        printf("  note: the decode grid stopped early: %s\n", r->decode_note);
    if (r->prefill_note[0])
        printf("  note: the prefill range shrank: %s\n", r->prefill_note);
    print_policy(r, &m);
    print_check(r, &m);
    print_sentinel(r);
    print_kept(r);
    print_layout(r, &m);
    print_occupancy(r);
    if (!m.accepted)
        say_refused(&m, o->force);
    if (!m.check.ok)
        say_missed(r, &m, o->force);
    if ((!m.accepted || !m.check.ok) && !o->force)
        return CLI_EXIT_FAIL;
    json_t *root = calib_target_profile_json(r, &m, arch, shown);
    if (!root) {
        fprintf(stderr, "stallscope calibrate: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    const int rc = write_profile(o, root, &m, arch);
    json_decref(root);
    return rc;
}

int cli_calibrate_target(int argc, char **argv)
{
    target_opts o;
    memset(&o, 0, sizeof o);
    calib_target_config_init(&o.cfg);
    strcpy(o.out, "hardware.json");
    strcpy(o.name, "target");
    o.max_rms = 0.15;
    o.mem_bytes = 80e9;
    experiment_config conn; /* --target --model-name --insecure --transport, as run has them */
    experiment_defaults(&conn, EXPERIMENT_REMOTE);
    experiment_secrets secrets = {0};
    const opts_group groups[] = {
        {"calibrate --target", target_specs, OPTS_COUNT(target_specs), &o},
        experiment_connection_group(&conn),
        experiment_secrets_group(&secrets),
    };
    const int n_groups = (int)(sizeof groups / sizeof groups[0]);
    if (opts_show_help(stdout, argc, argv, "stallscope calibrate --target URL [options]", HELP,
                       groups, n_groups))
        return CLI_EXIT_OK;
    char err[ERR_LEN] = "";
    if (opts_parse(argc, argv, groups, n_groups, NULL, 0, NULL, err) != 0)
        return cli_usage_error("calibrate", err);
    experiment_secrets_from_env(&secrets);
    if (o.cfg.min_prompt_tokens > o.cfg.max_prompt_tokens)
        return cli_usage_error("calibrate", "--min-prompt-tokens is above --max-prompt-tokens");
    cost_arch arch;
    if (o.model[0] && cost_arch_find(o.model, &arch, err) != 0)
        return cli_usage_error("calibrate", err);
    if (o.no_interference)
        o.cfg.interference_streams = 0;
    o.cfg.client = &conn.client;
    o.cfg.secrets = &secrets;
    o.cfg.progress = stderr;
    o.cfg.interrupted = cli_catch_interrupts();

    calib_target *ct = calib_target_open(&o.cfg, err);
    if (!ct)
        return cli_usage_error("calibrate", err);
    const char *served = calib_target_model(ct);
    if (!o.model[0] && calib_target_arch(served[0] ? served : "(unnamed)", &arch, err) != 0) {
        calib_target_close(ct);
        return cli_usage_error("calibrate", err);
    }
    char shown[sizeof conn.client.target];
    redact_url(conn.client.target, shown, sizeof shown); /* the profile's, and what is printed */
    printf("calibrating %s (serves %s; the step model is stated for %s) ...\n", shown,
           served[0] ? served : "an unnamed model", arch.name);
    fflush(stdout);
    calib_target_result *r = calloc(1, sizeof *r);
    if (!r || calib_target_run(ct, r, err) != 0) {
        calib_target_close(ct);
        fprintf(stderr, "stallscope calibrate: %s; nothing written\n", r ? err : "out of memory");
        free(r);
        return CLI_EXIT_FAIL;
    }
    calib_target_close(ct);
    const int rc = fit_and_write(&o, r, &arch, shown);
    free(r);
    return rc;
}
