/* html — the run report: OUT/report.html with the verdict, the table, the plots, the
 * injections, the cost model's prediction, the configuration and the files. */
#include "report/html.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/metric.h"
#include "common/err.h"
#include "common/units.h"
#include "report/html_page.h"
#include "report/merge.h"
#include "report/plot.h"
#include "report/predict.h"
#include "report/table.h"

#define MAX_INJECTION_ROWS 200

/* ---- the run report ------------------------------------------------------------------------- */

/* "10 s", "0.5 s", "250 ms": as short as the value allows. */
static void format_duration(int64_t ns, char *buf, size_t size)
{
    if (ns >= 1000000000)
        snprintf(buf, size, "%g s", (double)ns / 1e9);
    else
        snprintf(buf, size, "%g ms", (double)ns / 1e6);
}

/* "32 users, 40 s; one 8000-token prompt every 10 s from 5 s" from config.json. */
static void describe_workload(const report_run *x, char *buf, size_t size)
{
    buf[0] = '\0';
    if (!x->has_config)
        return;
    const workload_config *wl = &x->cfg.wl;
    char every[32], at[32], dur[32];
    format_duration(wl->inject_every_ns, every, sizeof every);
    format_duration(wl->inject_at_ns, at, sizeof at);
    format_duration(wl->duration_ns, dur, sizeof dur);
    char load[96], users[32] = "";
    /* Open-loop requests replace the closed users unless both were asked for. */
    if (wl->users > 0)
        snprintf(users, sizeof users, "%d users + ", wl->users);
    if (wl->trace[0])
        snprintf(load, sizeof load, "%sa trace (%s)", users,
                 trace_format_name((trace_format)wl->trace_format));
    else if (wl->request_rate > 0)
        snprintf(load, sizeof load, "%sopen loop %.3g req/s", users, wl->request_rate);
    else if (wl->num_prompts > 0)
        snprintf(load, sizeof load, "%s%lld prompts at once", users, (long long)wl->num_prompts);
    else
        snprintf(load, sizeof load, "%d users", wl->users);
    if (workload_injects(wl))
        snprintf(buf, size, "%s, %s; one %d-token prompt %s %s from %s", load, dur,
                 wl->prompt_tokens, wl->inject_poisson ? "on average every" : "every", every, at);
    else
        snprintf(buf, size, "%s, %s; injector off", load, dur);
}

static void chart_note(const report_run *x, char *buf, size_t size)
{
    char wl[320];
    describe_workload(x, wl, sizeof wl);
    snprintf(buf, size, "%.190s%s%.250s", x->engine[0] ? x->engine : x->label,
             wl[0] ? " \xc2\xb7 " : "", wl);
}

static void cell_ms(FILE *out, bool have, double ms)
{
    char buf[32];
    if (!have) {
        fputs("<td>\xe2\x80\x94</td>", out);
        return;
    }
    report_format_ms(buf, sizeof buf, ms);
    fprintf(out, "<td>%s</td>", buf);
}

static void write_injections(FILE *out, const report_run *run)
{
    const analysis_summary *x = &run->summary;
    fputs("<section id=\"injections\">\n<h2>Each injection</h2>\n", out);
    if (x->n_injections == 0) {
        fputs(run->has_config && !workload_injects(&run->cfg.wl)
                  ? "<p>The injector was off (<code>--no-inject</code>): the workload's own "
                    "traffic alone.</p>\n</section>\n"
                  : "<p>No injections in this run.</p>\n</section>\n",
              out);
        return;
    }
    const char *who = report_users_word(x);
    fprintf(out, "<p class=\"note\">The longest and the median background gap that overlaps the "
                 "prompt's wait [sent, first token], and the %s with a stall there.</p>\n"
                 "<table>\n<tr><th>#</th><th>planned (s)</th><th>sent (s)</th><th>prompt tokens</th>"
                 "<th>TTFT (ms)</th><th>longest gap (ms)</th><th>median gap (ms)</th>"
                 "<th>%s stalled</th></tr>\n",
            who, who);
    for (int i = 0; i < x->n_injections && i < MAX_INJECTION_ROWS; i++) {
        const analysis_injection *in = &x->injections[i];
        fprintf(out, "<tr><td>%d</td><td>%.3f</td><td>%.3f</td><td>%d</td>", i + 1, in->t_plan_s,
                in->t_send_s, in->prompt_tokens);
        cell_ms(out, in->ttft_ms >= 0, in->ttft_ms);
        cell_ms(out, in->max_gap_ms > 0, in->max_gap_ms);
        cell_ms(out, in->median_gap_ms > 0, in->median_gap_ms);
        fprintf(out, "<td>%d/%d", in->users_stalled, x->users);
        if (run->has_bounds) /* a merged run: the range under the shards' clock uncertainty */
            fprintf(out, " (%d..%d)", run->bound_lo.injections[i].users_stalled,
                    run->bound_hi.injections[i].users_stalled);
        fputs("</td></tr>\n", out);
    }
    fputs("</table>\n", out);
    if (x->n_injections > MAX_INJECTION_ROWS)
        fprintf(out, "<p class=\"note\">First %d of %d; all are in summary.json.</p>\n",
                MAX_INJECTION_ROWS, x->n_injections);
    fputs("</section>\n", out);
}

/* A standard figure's median and its p99 (k99 < 0: its max) in one cell, formatted by fmt
 * (two doubles); a dash when it had no sample. */
static void stat_cell(FILE *out, const standard_stat *st, int k99, const char *fmt)
{
    if (st->count == 0) {
        fputs("<td>\xe2\x80\x94</td>", out);
        return;
    }
    char text[64];
    snprintf(text, sizeof text, fmt, st->median, k99 >= 0 ? st->p[k99] : st->max);
    fprintf(out, "<td>%s</td>", text);
}

/* The benchmark world's figures: each request class, vLLM's meanings (analysis/standard.h). */
static void write_standard(FILE *out, const report_run *x)
{
    const standard_metrics *m = &x->summary.standard;
    fputs("<section id=\"standard\">\n<h2>Standard metrics</h2>\n<p class=\"note\">What "
          "<code>vllm bench serve</code> prints, with its meanings: TTFT from send to first "
          "token, TPOT = (E2E &minus; TTFT) / (output tokens &minus; 1), ITL every gap between "
          "two token events, E2E from send to the last byte; percentiles interpolated (numpy's "
          "rule), unlike the nearest-rank figures above. Requests the run's end cut are left "
          "out (&ldquo;unfinished&rdquo;). <code>--save-result FILE</code> writes them under "
          "vLLM's keys.</p>\n",
          out);
    /* A short run completes few requests: output tok/s is theirs, not the server's rate. */
    fprintf(out, "<p>Streamed: <b>%.1f tokens/s</b> over every request, finished or not; "
                 "<i>output tok/s</i> below counts the completed requests' tokens only.</p>\n",
            x->summary.streamed_throughput);
    fputs("<table>\n<tr><th>requests</th><th>completed</th><th>failed</th>"
          "<th>unfinished</th><th>req/s</th><th>output tok/s</th><th>goodput</th>"
          "<th>TTFT median / p99 (ms)</th><th>TPOT median / p99 (ms)</th>"
          "<th>ITL median / max (ms)</th><th>E2E median / p99 (ms)</th></tr>\n",
          out);
    int k99 = -1;
    for (int k = 0; k < m->opt.n_percentiles; k++)
        if (m->opt.percentiles[k] == 99)
            k99 = k;
    const struct {
        const char *name;
        const standard_class *c;
    } rows[] = {{"all", &m->all}, {"background", &m->background}, {"injected", &m->injected}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const standard_class *c = rows[i].c;
        /* A class without requests (no injector, or none sent yet) has no figures to show. */
        if (c->completed + c->failed + c->unfinished == 0)
            continue;
        char good[32] = "&mdash;";
        if (c->has_goodput)
            snprintf(good, sizeof good, "%.2f %%", c->goodput * 100);
        fprintf(out,
                "<tr><td class=\"k\">%s</td><td>%lld</td><td>%lld</td><td>%lld</td><td>%.2f</td>"
                "<td>%.1f</td><td>%s</td>",
                rows[i].name, (long long)c->completed, (long long)c->failed,
                (long long)c->unfinished, c->request_throughput, c->output_throughput, good);
        /* TTFT, TPOT and E2E are the completed requests': a short run may have none. */
        stat_cell(out, &c->ttft_ms, k99, "%.1f / %.1f");
        stat_cell(out, &c->tpot_ms, k99, "%.2f / %.2f");
        stat_cell(out, &c->itl_ms, -1, "%.2f / %.1f");
        stat_cell(out, &c->e2el_ms, k99, "%.0f / %.0f");
        fputs("</tr>\n", out);
    }
    fputs("</table>\n</section>\n", out);
}

static void write_causes(FILE *out, const report_run *x)
{
    const analysis_summary *s = &x->summary;
    const analysis_attribution *a = &s->attribution;
    fputs("<table>\n<tr><th class=\"k\">cause</th><th>stalls</th><th>share</th>"
          "<th>frozen user-seconds</th></tr>\n", out);
    static const char *const what[ANALYSIS_N_CAUSES] = {
        [ANALYSIS_CAUSE_PREFILL] = "the server was prefilling a long prompt (culprits below)",
        [ANALYSIS_CAUSE_SERVER] = "a server step took far longer than its work: the server's "
                                  "machine",
        [ANALYSIS_CAUSE_CLIENT] = "the server kept stepping on time and carried the request: "
                                  "the client read late",
        [ANALYSIS_CAUSE_UNEXPLAINED] = "no evidence either way",
        [ANALYSIS_CAUSE_PREEMPTED] = "the server had preempted the request (its KV freed, "
                                     "recomputed when re-admitted)",
        [ANALYSIS_CAUSE_NOT_SCHEDULED] = "the server left the request out of its short steps "
                                         "without preempting it (budget, seats)"};
    /* In the rule's order of evidence (analysis.h); the causes only a server that preempts
     * or leaves requests out has, only when there are such stalls. */
    static const analysis_cause order[ANALYSIS_N_CAUSES] = {
        ANALYSIS_CAUSE_PREEMPTED,     ANALYSIS_CAUSE_PREFILL, ANALYSIS_CAUSE_SERVER,
        ANALYSIS_CAUSE_NOT_SCHEDULED, ANALYSIS_CAUSE_CLIENT,  ANALYSIS_CAUSE_UNEXPLAINED};
    for (int i = 0; i < ANALYSIS_N_CAUSES; i++) {
        const analysis_cause c = order[i];
        const analysis_cause_total *t = &a->by_cause[c];
        if (t->stalls == 0 && (c == ANALYSIS_CAUSE_PREEMPTED || c == ANALYSIS_CAUSE_NOT_SCHEDULED))
            continue;
        fprintf(out, "<tr><td class=\"k\"><b>%s</b> \xe2\x80\x94 %s</td><td>%lld</td>"
                     "<td>%.1f %%</td><td>%.2f</td></tr>\n",
                analysis_cause_name((analysis_cause)c), what[c], (long long)t->stalls,
                s->n_stall_list > 0 ? 100.0 * (double)t->stalls / (double)s->n_stall_list : 0,
                t->frozen_user_s);
    }
    fputs("</table>\n", out);
    fprintf(out, "<p>%.2f stalls per minute, %.1f per 1,000 requests; %.1f frozen user-seconds "
                 "per hour; %.2f %% of requests saw a gap over 100 ms, %.2f %% over 1 s.%s</p>\n",
            a->stalls_per_min, a->stalls_per_1k_requests, a->frozen_user_s_per_hour,
            100 * a->requests_stalled_100ms, 100 * a->requests_stalled_1s,
            a->step_log ? ""
                        : " No step log (a server that is not ours): only prefill is told apart "
                          "from the rest.");
    if (a->n_culprits == 0)
        return;
    fprintf(out, "<h3>Who stalled whom</h3>\n<table>\n<tr><th>request</th><th class=\"k\">kind</th>"
                 "<th>prompt tokens</th><th>stalls</th><th>%s stalled</th>"
                 "<th>frozen user-seconds</th></tr>\n",
            report_users_word(s));
    for (int i = 0; i < a->n_culprits && i < 10; i++) {
        const analysis_culprit *c = &a->culprits[i];
        fprintf(out, "<tr><td>%lld</td><td class=\"k\">%s</td><td>%d</td><td>%lld</td><td>%d</td>"
                     "<td>%.2f</td></tr>\n",
                (long long)c->request, tokenlog_kind_name(c->kind), c->prompt_tokens,
                (long long)c->stalls, c->users, c->frozen_user_s);
    }
    fputs("</table>\n", out);
    if (a->n_culprits > 10)
        fprintf(out, "<p class=\"note\">The first 10 of %d; every stall is in stalls.csv.</p>\n",
                a->n_culprits);
    fputs("<table>\n<tr><th class=\"k\">longest culprit's prompt</th><th>prefill stalls</th>"
          "<th>frozen user-seconds</th></tr>\n", out);
    for (int b = 0; b < ANALYSIS_PROMPT_BUCKETS; b++) {
        const analysis_cause_total *t = &a->by_prompt[b];
        if (t->stalls == 0)
            continue;
        if (b + 1 < ANALYSIS_PROMPT_BUCKETS)
            fprintf(out, "<tr><td class=\"k\">%d \xe2\x80\x93 %d tokens</td>",
                    analysis_prompt_bucket_lo[b], analysis_prompt_bucket_lo[b + 1] - 1);
        else
            fprintf(out, "<tr><td class=\"k\">%d tokens and more</td>", analysis_prompt_bucket_lo[b]);
        fprintf(out, "<td>%lld</td><td>%.2f</td></tr>\n", (long long)t->stalls, t->frozen_user_s);
    }
    fputs("</table>\n", out);
}

typedef struct pred_col {
    const char *title;
    const analysis_summary *s;
} pred_col;

static void pred_row(FILE *out, const metric *m, const pred_col *cols, int n)
{
    fprintf(out, "<tr><td class=\"k\">%s</td>", m->label);
    for (int i = 0; i < n; i++) {
        double v;
        char buf[32];
        if (!cols[i].s || !metric_value(m, cols[i].s, &v)) {
            fputs("<td>\xe2\x80\x94</td>", out);
            continue;
        }
        report_format_metric(buf, sizeof buf, m->unit, v);
        fprintf(out, "<td>%s</td>", buf);
    }
    fputs("</tr>\n", out);
}

/* Each injection's spike (the longest background gap over its prefill), measured beside the
 * same-profile model's, and the model's error. */
static void write_injection_prediction(FILE *out, const analysis_summary *measured,
                                       const analysis_summary *model, const char *profile)
{
    const int n = measured->n_injections < model->n_injections ? measured->n_injections
                                                               : model->n_injections;
    if (n == 0)
        return;
    fputs("<table>\n<tr><th class=\"k\">injection (sent at)</th><th>measured spike (ms)</th>"
          "<th>predicted spike (ms)</th><th>error</th></tr>\n", out);
    for (int i = 0; i < n; i++) {
        const double m = measured->injections[i].max_gap_ms, p = model->injections[i].max_gap_ms;
        char bm[32], bp[32];
        report_format_ms(bm, sizeof bm, m);
        report_format_ms(bp, sizeof bp, p);
        fprintf(out, "<tr><td class=\"k\">%d (%.1f s)</td><td>%s</td><td>%s</td>", i + 1,
                measured->injections[i].t_send_s, bm, bp);
        if (m > 0)
            fprintf(out, "<td>%+.1f %%</td></tr>\n", report_relative_error(m, p) * 100);
        else
            fputs("<td>\xe2\x80\x94</td></tr>\n", out);
    }
    fputs("</table>\n<p class=\"note\">Predicted by ", out);
    html_escape(out, profile);
    fputs("; error = predicted \xc3\xb7 measured \xe2\x88\x92 1. A spike is the longest "
          "background gap overlapping the injection's prefill (summary.json "
          "injections[].max_gap_ms).</p>\n", out);
}

static int write_prediction(FILE *out, const report_run *b, const report_run *x,
                            const html_options *opt, char *err)
{
    fputs("<section id=\"prediction\">\n<h2>Measured beside the cost model</h2>\n", out);
    if (!opt->predict) {
        fputs("<p>Prediction skipped.</p>\n</section>\n", out);
        return 0;
    }
    report_prediction same, ref;
    if (report_predict(x, false, &same, err) != 0)
        return -1;
    if (report_predict(x, true, &ref, err) != 0) {
        report_prediction_free(&same);
        return -1;
    }
    fputs("<p class=\"note\">The same workload (config.json) through the simulator in "
          "process: the real scheduler, the cost model (a calibrated profile's fitted step "
          "model for the model it was fitted on, else the roofline), a virtual clock. "
          "\"Reference\" is what an H100 SXM running Llama 3.1 8B would show (catalog "
          "figures, efficiency 1, no per-step overhead); a remote server gets none.</p>\n",
          out);
    char t_same[256], t_ref[256], t_b[96], t_x[96];
    snprintf(t_b, sizeof t_b, "measured %s", b ? b->label : "baseline");
    snprintf(t_x, sizeof t_x, "measured %s", x->label);
    snprintf(t_same, sizeof t_same, "model, same profile (%s)", same.profile);
    snprintf(t_ref, sizeof t_ref, "model, reference (%s)", ref.profile);
    /* Only the columns there are: no baseline, or no prediction, is said below the table,
     * not shown as a column of dashes. */
    pred_col cols[4];
    int n = 0;
    if (b)
        cols[n++] = (pred_col){t_b, &b->summary};
    cols[n++] = (pred_col){t_x, &x->summary};
    if (same.ok)
        cols[n++] = (pred_col){t_same, &same.pair.interference};
    if (ref.ok)
        cols[n++] = (pred_col){t_ref, &ref.pair.interference};
    fputs("<table>\n<tr><th class=\"k\">metric</th>", out);
    for (int i = 0; i < n; i++) {
        fputs("<th>", out);
        html_escape(out, cols[i].title);
        fputs("</th>", out);
    }
    fputs("</tr>\n", out);
    static const struct {
        const char *id;
        bool injections; /* a figure of the injections: none measured, no row */
    } rows[] = {{"itl.p50", false},     {"itl.p99", false},
                {"itl.p999", false},    {"itl.max", false},
                {"spike_ratio", false}, {"stalls", false},
                {"injection_ttft.p50", true}, {"injection_ttft.max", true}};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const metric *m = metric_find(rows[r].id);
        if (m && !(rows[r].injections && x->summary.n_injections == 0))
            pred_row(out, m, cols, n);
    }
    fputs("</table>\n", out);
    char verdict[1024];
    if (same.ok)
        write_injection_prediction(out, &x->summary, &same.pair.interference, same.profile);
    if (same.ok && same.caveat[0]) {
        fputs("<p class=\"note\"><b>The same-profile model is ", out);
        html_escape(out, same.caveat);
        fputs(".</b></p>\n", out);
    }
    if (same.ok) {
        report_verdict(verdict, sizeof verdict, &same.pair.baseline, &same.pair.interference);
        fputs("<p class=\"verdict model\"><b>Model, same profile:</b> ", out);
        html_escape(out, verdict);
        fputs("</p>\n", out);
    } else {
        fputs("<p class=\"note\">No same-profile prediction: ", out);
        html_escape(out, same.why);
        fputs(".</p>\n", out);
    }
    if (ref.ok) {
        report_verdict(verdict, sizeof verdict, &ref.pair.baseline, &ref.pair.interference);
        fputs("<p class=\"verdict model\"><b>Reference, H100 + Llama 3.1 8B:</b> ", out);
        html_escape(out, verdict);
        fputs("</p>\n", out);
    } else {
        fputs("<p class=\"note\">No reference prediction: ", out);
        html_escape(out, ref.why);
        fputs(".</p>\n", out);
    }
    report_prediction_free(&same);
    report_prediction_free(&ref);
    fputs("</section>\n", out);
    return 0;
}

static void kv_row(FILE *out, const char *key, const char *value)
{
    if (!value || !value[0])
        return;
    fputs("<tr><td class=\"k\">", out);
    html_escape(out, key);
    fputs("</td><td class=\"k\">", out);
    html_escape(out, value);
    fputs("</td></tr>\n", out);
}

static void write_config(FILE *out, const report_run *x)
{
    fputs("<section id=\"config\">\n<h2>Configuration</h2>\n", out);
    if (!x->json) {
        fputs("<p>No config.json beside the token log.</p>\n</section>\n", out);
        return;
    }
    char buf[512], wl[320];
    fputs("<table>\n", out);
    kv_row(out, "engine", x->engine);
    kv_row(out, "target", x->target);
    if (x->has_config) {
        const experiment_config *c = &x->cfg;
        if (c->label[0])
            kv_row(out, "label", c->label);
        if (c->metadata[0])
            kv_row(out, "metadata", c->metadata); /* "k=v" lines; the cell keeps them apart */
        if (c->client.extra_body[0])
            kv_row(out, "extra request body", c->client.extra_body);
        describe_workload(x, wl, sizeof wl);
        kv_row(out, "workload", wl);
        char prompt_len[300], answer_len[300];
        workload_dist_format(&c->wl.prompt_len, prompt_len, sizeof prompt_len);
        workload_dist_format(&c->wl.answer_len, answer_len, sizeof answer_len);
        snprintf(buf, sizeof buf, "prompt %.200s tokens, answer %.200s tokens (%s)", prompt_len,
                 answer_len,
                 c->wl.trace[0]            ? "closed loop; open-loop lengths from the trace"
                 : workload_drawn_arrivals(&c->wl) ? (c->wl.users > 0 ? "closed loop and open loop"
                                                                       : "open loop")
                                          : "closed loop");
        kv_row(out, "background users", buf);
        if (workload_open_loop(&c->wl)) {
            if (c->wl.trace[0])
                snprintf(buf, sizeof buf, "trace %.300s (%s), %.3gx speed%s%s",
                         c->wl.trace, trace_format_name((trace_format)c->wl.trace_format),
                         c->wl.speedup, c->wl.trace_loop ? ", looped" : "",
                         c->wl.skip_bad_rows ? ", bad rows skipped" : "");
            else if (c->wl.request_rate > 0)
                snprintf(buf, sizeof buf, "%.4g requests/s, burstiness %.3g%s", c->wl.request_rate,
                         c->wl.burstiness, c->wl.max_concurrency > 0 ? ", concurrency capped" : "");
            else
                snprintf(buf, sizeof buf, "%lld requests at t = 0%s",
                         (long long)c->wl.num_prompts,
                         c->wl.max_concurrency > 0 ? ", concurrency capped" : "");
            kv_row(out, "open loop", buf);
        }
        if (c->engine != EXPERIMENT_REMOTE) {
            snprintf(buf, sizeof buf,
                     "%s (%.1f TFLOP/s, %.2f TB/s), %s; efficiency %.2g compute, %.2g bandwidth; "
                     "step overhead %.3g ms%s",
                     c->cost.gpu.name, c->cost.gpu.peak_flops / 1e12,
                     c->cost.gpu.mem_bandwidth / 1e12, c->cost.arch.name,
                     c->cost.compute_efficiency, c->cost.bandwidth_efficiency,
                     (double)c->cost.step_overhead_ns / 1e6,
                     c->cost.params_override > 0 ? "; lesson FLOPs (2 x params per token)" : "");
            kv_row(out, "hardware profile", buf);
        }
        snprintf(buf, sizeof buf, "--policy %s --max-num-batched-tokens %d --max-num-seqs %d "
                 "(KV blocks %lld)",
                 sched_policy_name(c->sched.policy), c->sched.max_num_batched_tokens,
                 c->sched.max_num_seqs, (long long)c->sched.kv_blocks);
        kv_row(out, c->engine == EXPERIMENT_REMOTE ? "scheduler (assumed)" : "scheduler", buf);
        char line[2048] = "";
        size_t len = 0;
        for (int i = 0; i < x->meta.argc && len < sizeof line - 1; i++) {
            int n = snprintf(line + len, sizeof line - len, "%s%s", i ? " " : "", x->meta.argv[i]);
            if (n > 0)
                len += (size_t)n;
        }
        kv_row(out, "command-line options", line);
    } else {
        kv_row(out, "config.json", x->config_why);
    }
    fputs("</table>\n<details><summary>config.json of the ", out);
    html_escape(out, x->label);
    fputs(" run</summary>\n<pre>", out);
    char *text = json_dumps(x->json, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    html_escape(out, text ? text : "");
    free(text);
    fputs("</pre>\n</details>\n</section>\n", out);
}

static void write_files(FILE *out, const report_set *set, bool steps)
{
    static const char *const names[] = {"tokens.csv", "requests.csv", "steps.csv",
                                        "sched_events.csv", "stalls.csv",
                                        "summary.json", "config.json", "fidelity.json",
                                        "server_metrics.csv"};
    fputs("<section id=\"files\">\n<h2>Files</h2>\n<ul class=\"files\">\n", out);
    for (int i = 0; i < set->n_runs; i++) {
        char rel[4200];
        html_rel(set->root, set->runs[i].dir, rel, sizeof rel);
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
            if (!html_exists(set->runs[i].dir, names[k]))
                continue;
            char path[4300];
            if (strcmp(rel, ".") == 0)
                snprintf(path, sizeof path, "%s", names[k]);
            else
                snprintf(path, sizeof path, "%s/%s", rel, names[k]);
            fputs("<li><a href=\"", out);
            html_url(out, path);
            fputs("\">", out);
            html_escape(out, path);
            fputs("</a></li>\n", out);
        }
    }
    if (html_exists(set->root, "comparison.json"))
        fputs("<li><a href=\"comparison.json\">comparison.json</a></li>\n", out);
    static const char *const plots[] = {"timeline", "percentiles", "ccdf", "steps"};
    for (size_t k = 0; k < sizeof plots / sizeof plots[0]; k++) {
        if (k == 3 && !steps)
            continue;
        fprintf(out, "<li><a href=\"plots/%s.png\">plots/%s.png</a>, "
                     "<a href=\"plots/%s.svg\">.svg</a></li>\n",
                plots[k], plots[k], plots[k]);
    }
    fputs("</ul>\n</section>\n", out);
}

/* What print writes about arg, HTML-escaped. 0, or -1 with err. */
static int write_escaped(FILE *out, void (*print)(FILE *, const void *), const void *arg,
                         char *err)
{
    char *text = NULL;
    size_t len = 0;
    FILE *t = open_memstream(&text, &len);
    if (!t)
        return err_set(err, "open_memstream: %s", strerror(errno));
    print(t, arg);
    fclose(t);
    html_escape(out, text);
    free(text);
    return 0;
}

/* arg: {baseline or NULL, the run} */
static void print_table(FILE *f, const void *arg)
{
    const report_run *const *pair = arg;
    report_table_print(f, pair[0] ? &pair[0]->summary : NULL, &pair[1]->summary);
}

static void print_shards(FILE *f, const void *arg)
{
    report_merge_print(f, arg);
}

/* ---- the charts' sections -------------------------------------------------------------------- */

/* What a run's charts are drawn from, and what the page says where a chart cannot be. */
typedef struct run_charts {
    const char *root;      /* the report's directory: plots/ goes there */
    const report_run *x;   /* the run reported */
    plot_run runs[2];      /* the baseline (when there is one), then x */
    int n_runs;
    char note[512];        /* under each chart's title: the engine and the workload */
    bool per_gap;          /* the runs' gaps are there to draw one by one */
    char no_gaps[400];     /* said instead of a chart of every gap */
} run_charts;

static void run_charts_init(run_charts *c, const report_set *set, const report_run *b,
                            const report_run *x)
{
    memset(c, 0, sizeof *c);
    c->root = set->root;
    c->x = x;
    chart_note(x, c->note, sizeof c->note);
    if (b)
        c->runs[c->n_runs++] = (plot_run){b->label, PLOT_COLOR_BASELINE, &b->log, &b->summary};
    c->runs[c->n_runs++] = (plot_run){x->label, PLOT_COLOR_INTERFERENCE, &x->log, &x->summary};
    /* A long simulation past --tokens-csv-max kept no events: its figures were computed as
     * it ran, and the charts of every single gap have nothing to draw. */
    c->per_gap = (!x->no_tokens || x->summary.gap_digest) &&
                 !(b && b->no_tokens && !b->summary.gap_digest);
    snprintf(c->no_gaps, sizeof c->no_gaps,
             "<p class=\"note\">tokens.csv was not kept (more than %lld token events: "
             "<code>--tokens-csv-max</code>): no chart of every gap. The figures were computed "
             "as the run went (gap percentiles: %s).</p>\n",
             (long long)x->summary.tokens_csv_max_events,
             !x->summary.itl_histogram ? "exact" : "log histogram, ±0.39 % relative error");
}

/* A chart its plot function built (built: that function's return) into the page as a
 * figure (html_figure), and freed either way. 0, or -1 with err. */
static int chart_figure(FILE *out, const run_charts *c, plot_chart *chart, int built,
                        const char *name, const char *caption, char *err)
{
    const int rc = built == 0 ? html_figure(out, c->root, chart, name, caption, err) : -1;
    plot_chart_free(chart);
    return rc;
}

/* Every gap over time, and under it the server's own account (server_metrics.csv) with its
 * plot area at the same pixels: both charts keep the wider one's y tick labels' room. */
static int write_timeline(FILE *out, const run_charts *c, char *err)
{
    const report_run *x = c->x;
    plot_chart chart, metrics;
    memset(&chart, 0, sizeof chart);
    memset(&metrics, 0, sizeof metrics);
    const bool has_metrics = x->has_server_metrics && x->server_metrics.n > 0;
    char metrics_why[ERR_LEN] = "";
    plot_run metrics_run = {x->label, PLOT_COLOR_INTERFERENCE, &x->log, &x->summary};
    const bool metrics_drawn =
        has_metrics &&
        plot_server_metrics(&metrics, &metrics_run, &x->server_metrics, c->note, metrics_why) == 0;
    int rc = 0;
    fputs("<section id=\"timeline\">\n<h2>Every gap over time</h2>\n", out);
    if (!c->per_gap) {
        fputs(c->no_gaps, out);
    } else {
        int built = plot_timeline(&chart, c->runs, c->n_runs, c->note, err);
        if (built == 0 && metrics_drawn)
            chart.y_label_w = metrics.y_label_w =
                fmax(plot_y_label_width(&chart), plot_y_label_width(&metrics)) + 2;
        /* The markers are the injections: without any, the words about them go too. */
        rc = chart_figure(out, c, &chart, built, "timeline",
                          x->summary.n_injections > 0
                              ? "Each dot is a background stream's gap between two tokens (ms, "
                                "log scale), placed where the wait began; the faint purple lines "
                                "are the long prompts' sends, marked at the top. The spikes "
                                "stand on the markers."
                              : "Each dot is a background stream's gap between two tokens (ms, "
                                "log scale), placed where the wait began.",
                          err);
    }
    if (rc == 0)
        fputs("</section>\n", out);
    if (rc == 0 && has_metrics) {
        /* On a --target it stands in for the step log. A file with no column to draw is
         * said, not fatal. */
        fputs("<section id=\"server-metrics\">\n<h2>Inside the server</h2>\n", out);
        if (!metrics_drawn) {
            fputs("<p class=\"note\">", out);
            html_escape(out, metrics_why);
            fputs("</p>\n", out);
        } else {
            rc = chart_figure(out, c, &metrics, 0, "server_metrics",
                              "The server's Prometheus metrics, scraped during the run "
                              "(server_metrics.csv), on the timeline's time axis: the queue "
                              "grows and the generated tokens dip where a long prompt is "
                              "prefilled.",
                              err);
        }
        if (rc == 0)
            fputs("</section>\n", out);
    }
    plot_chart_free(&metrics);
    return rc;
}

/* The percentiles, the distribution of gaps and, with a step log, the engine's steps. */
static int write_distributions(FILE *out, const run_charts *c, char *err)
{
    plot_chart chart;
    fputs("<section id=\"percentiles\">\n<h2>Percentiles</h2>\n", out);
    if (chart_figure(out, c, &chart,
                     plot_percentiles(&chart, NULL, c->runs, c->n_runs, c->note, err),
                     "percentiles",
                     c->x->summary.n_injections > 0
                         ? "The median stays put; the tail is where the long prompts show."
                         : "A long prompt's prefill shows in the tail (p99.9, max), never in the "
                           "median.",
                     err) != 0)
        return -1;
    fputs("</section>\n", out);

    fputs("<section id=\"ccdf\">\n<h2>Distribution of gaps</h2>\n", out);
    if (!c->per_gap)
        fputs(c->no_gaps, out);
    else if (chart_figure(out, c, &chart, plot_ccdf(&chart, c->runs, c->n_runs, c->note, err),
                          "ccdf",
                          "A percentile moves only when the spikes are more common than its "
                          "line: under 1 % of gaps, p99 cannot see them.",
                          err) != 0)
        return -1;
    fputs("</section>\n", out);

    if (c->x->log.n_steps == 0)
        return 0;
    fputs("<section id=\"steps\">\n<h2>Engine steps</h2>\n", out);
    const plot_run step_run = {c->x->label, PLOT_COLOR_INTERFERENCE, &c->x->log, &c->x->summary};
    if (chart_figure(out, c, &chart, plot_steps(&chart, &step_run, c->note, err), "steps",
                     "The server's ground truth (steps.csv): a step lasts as long as its work, "
                     "and the step carrying a whole prompt is the spike.",
                     err) != 0)
        return -1;
    fputs("</section>\n", out);
    return 0;
}

/* What caused the stalls: the causes' table, their lengths and who stalled whom, and the
 * link to every stall. */
static int write_causes_section(FILE *out, const run_charts *c, char *err)
{
    const analysis_summary *s = &c->x->summary;
    plot_chart chart;
    fputs("<section id=\"causes\">\n<h2>What caused the stalls</h2>\n", out);
    write_causes(out, c->x);
    if (s->n_stall_list > 0 &&
        chart_figure(out, c, &chart, plot_stall_ccdf(&chart, s, c->note, err), "stall_ccdf",
                     "Each cause's stalls by length: a prefill stall lasts one long step, a "
                     "machine's pause whatever the machine took.",
                     err) != 0)
        return -1;
    /* Against the prompt length only when there are lengths to compare: with one, the
     * chart is a single column of dots in an empty frame. */
    int32_t one_length;
    const int lengths = plot_stall_prompt_lengths(s, &one_length);
    if (lengths == 1)
        fprintf(out, "<p class=\"note\">No chart of the stalls against their culprits' prompt "
                     "length: every prefill stall's culprit had a prompt of %d tokens. A sweep "
                     "over the length draws the spike against it (<code>stallscope sweep "
                     "--prompt-tokens 4k,8k,16k</code>).</p>\n",
                one_length);
    if (lengths == 2 &&
        chart_figure(out, c, &chart, plot_stalls_vs_prompt(&chart, s, c->note, err),
                     "stalls_vs_prompt",
                     "Every prefill stall at its culprit's prompt length: longer prompts, longer "
                     "stalls (the step grows with the prompt, a little faster than linearly).",
                     err) != 0)
        return -1;
    char rel[4200], path[4300];
    html_rel(c->root, c->x->dir, rel, sizeof rel);
    snprintf(path, sizeof path, "%s%sstalls.csv", strcmp(rel, ".") == 0 ? "" : rel,
             strcmp(rel, ".") == 0 ? "" : "/");
    fputs("<p class=\"note\">Every stall, its cause and culprits: <a href=\"", out);
    html_url(out, path);
    fputs("\">", out);
    html_escape(out, path);
    fputs("</a>.</p>\n</section>\n", out);
    return 0;
}

/* ---- the page ---------------------------------------------------------------------------------- */

static int write_shards(FILE *out, const report_run *x, char *err)
{
    if (!x->has_config || x->meta.merge.shards == 0)
        return 0;
    fputs("<section id=\"shards\">\n<h2>Shards and clocks</h2>\n<p class=\"note\">This run "
          "was merged from shards (<code>report --merge</code>, docs/guide/shards.md). A gap "
          "lies within one shard's clock; a figure that sets one shard's tokens against an "
          "injection sent by another carries the offset between their clocks, shown as the "
          "range the figure takes for any offset within the bound.</p>\n<pre>",
          out);
    if (write_escaped(out, print_shards, x, err) != 0)
        return -1;
    fputs("</pre>\n</section>\n", out);
    return 0;
}

int html_write_run_report(const report_set *set, const html_options *opt, char *err)
{
    const report_run *x = report_set_main(set);
    if (!x)
        return err_set(err, "%s: no run to report (expected interference/ or a single run)",
                       set->root);
    const report_run *b = report_set_baseline(set);
    char *doc = NULL;
    size_t doc_len = 0;
    FILE *out = open_memstream(&doc, &doc_len);
    if (!out)
        return err_set(err, "open_memstream: %s", strerror(errno));
    run_charts charts;
    run_charts_init(&charts, set, b, x);
    char title[256], verdict[1024];
    snprintf(title, sizeof title, "stallscope: %s", x->engine[0] ? x->engine : x->label);
    html_begin(out, title);
    fputs("<h1>Long-prompt interference</h1>\n<p class=\"meta\">", out);
    html_escape(out, charts.note);
    fputs("</p>\n", out);

    fputs("<section id=\"verdict\">\n<h2>Verdict</h2>\n<p class=\"verdict\">", out);
    report_verdict(verdict, sizeof verdict, b ? &b->summary : NULL, &x->summary);
    html_escape(out, verdict);
    fputs("</p>\n</section>\n", out);

    int rc = write_timeline(out, &charts, err);
    if (rc == 0) {
        fputs("<section id=\"table\">\n<h2>Side by side</h2>\n<pre>", out);
        const report_run *pair[2] = {b, x};
        rc = write_escaped(out, print_table, pair, err);
        fputs("</pre>\n</section>\n", out);
    }
    if (rc == 0)
        rc = write_distributions(out, &charts, err);
    if (rc == 0)
        rc = write_shards(out, x, err);
    if (rc == 0) {
        write_injections(out, x);
        write_standard(out, x);
        rc = write_causes_section(out, &charts, err);
    }
    if (rc == 0)
        rc = write_prediction(out, b, x, opt, err);
    if (rc == 0) {
        write_config(out, x);
        write_files(out, set, x->log.n_steps > 0);
        html_end(out);
    }
    return html_finish_document(out, &doc, &doc_len, set->root, rc, err);
}
