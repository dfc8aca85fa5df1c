/* html_sweep — a sweep's report.html (html_sweep.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "report/html_page.h"
#include "report/html_sweep.h"
#include "report/plot.h"
#include "report/sweep.h"
#include "report/table.h"

#define TIMES "\xc3\x97"
#define DASH "\xe2\x80\x94"

/* ---- the report --------------------------------------------------------------------------- */

static int axis_index(const report_sweep *sw, const char *name)
{
    for (int a = 0; a < sw->n_axes; a++)
        if (strcmp(sw->axes[a], name) == 0)
            return a;
    return -1;
}

/* "policy=chunked" for the axes other than skip; "" when there are none. */
static void group_name(const report_sweep *sw, const report_sweep_point *pt, int skip, char *buf,
                       size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int a = 0; a < sw->n_axes; a++) {
        if (a == skip)
            continue;
        int n = snprintf(buf + len, size - len, "%s%s=%s", len ? ", " : "", sw->axes[a],
                         pt->values[a]);
        if (n < 0 || (size_t)n >= size - len)
            break;
        len += (size_t)n;
    }
}

static void point_name(const report_sweep *sw, const report_sweep_point *pt, char *buf, size_t size)
{
    size_t len = (size_t)snprintf(buf, size, "%s:", pt->label);
    for (int a = 0; a < sw->n_axes && len < size; a++) {
        int n = snprintf(buf + len, size - len, "%s %s=%s", a ? "," : "", sw->axes[a],
                         pt->values[a]);
        if (n < 0)
            break;
        len += (size_t)n;
    }
}

/* The engine the points share: the first point's, without its "policy/budget" word
 * when the sweep varies the scheduler. */
static void common_engine(const report_sweep *sw, char *buf, size_t size)
{
    buf[0] = '\0';
    for (int i = 0; i < sw->n_points && !buf[0]; i++) {
        const report_run *r = report_sweep_point_main(&sw->points[i]);
        if (r && r->engine[0])
            snprintf(buf, size, "%.159s", r->engine);
    }
    bool sched_varies = axis_index(sw, "policy") >= 0 ||
                        axis_index(sw, "max-num-batched-tokens") >= 0;
    char *last = strrchr(buf, ' ');
    if (sched_varies && last && strchr(last, '/'))
        *last = '\0';
}

static void write_summary_lines(FILE *out, const report_sweep *sw)
{
    /* Along the first axis, per line: the longest gap at each point and its step. */
    fputs("<ul>\n", out);
    for (int i = 0; i < sw->n_points; i++) {
        if (!sw->points[i].fig.x)
            continue;
        bool starts_line = true;
        for (int j = 0; j < i; j++)
            if (sw->points[j].fig.x && strcmp(sw->points[j].line, sw->points[i].line) == 0)
                starts_line = false;
        if (!starts_line)
            continue;
        char group[160];
        group_name(sw, &sw->points[i], 0, group, sizeof group);
        fputs("<li>", out);
        if (group[0]) {
            html_escape(out, group);
            fputs(": ", out);
        }
        fputs("spike (longest gap per injection, median) ", out);
        bool first = true;
        for (int k = i; k < sw->n_points; k++) {
            if (!sw->points[k].fig.x || strcmp(sw->points[k].line, sw->points[i].line) != 0)
                continue;
            char ms[32];
            report_format_ms(ms, sizeof ms, sw->points[k].fig.spike_ms > 0 ? sw->points[k].fig.spike_ms : sw->points[k].fig.x->itl_ms.max);
            fprintf(out, "%s%s ms at %s=", first ? "" : ", ", ms, sw->axes[0]);
            html_escape(out, sw->points[k].values[0]);
            if (sw->points[k].fig.step > 0)
                fprintf(out, " (" TIMES "%.2f", sw->points[k].fig.step);
            if (sw->points[k].fig.step > 0 && sw->points[k].fig.model_step > 0)
                fprintf(out, "; cost model " TIMES "%.2f", sw->points[k].fig.model_step);
            if (sw->points[k].fig.step > 0)
                fputs(")", out);
            char p99[32], p999[32], max[32];
            report_format_ms(p99, sizeof p99, sw->points[k].fig.x->itl_ms.p99);
            report_format_ms(p999, sizeof p999, sw->points[k].fig.x->itl_ms.p999);
            report_format_ms(max, sizeof max, sw->points[k].fig.x->itl_ms.max);
            fprintf(out, " [p99 %s, p99.9 %s, max %s ms", p99, p999, max);
            if (sw->points[k].fig.ttft_ms.count > 0) {
                char ttft[32];
                report_format_ms(ttft, sizeof ttft, sw->points[k].fig.ttft_ms.p50);
                fprintf(out, ", injected prompt's TTFT p50 %s ms", ttft);
            }
            fputs("]", out);
            first = false;
        }
        fputs(".</li>\n", out);
    }
    for (int i = 0; i < sw->n_points; i++)
        if (!sw->points[i].fig.x) {
            fputs("<li>", out);
            html_escape(out, sw->points[i].label);
            fputs(" ", out);
            html_escape(out, sw->points[i].status);
            fputs(": ", out);
            html_escape(out, sw->points[i].reason);
            fputs("</li>\n", out);
        }
    fputs("</ul>\n", out);
}

static void write_table(FILE *out, const report_sweep *sw)
{
    fputs("<table>\n<tr><th class=\"k\">point</th>", out);
    for (int a = 0; a < sw->n_axes; a++) {
        fputs("<th class=\"k\">", out);
        html_escape(out, sw->axes[a]);
        fputs("</th>", out);
    }
    static const char *const heads[REPORT_SWEEP_COLS] = {
        "p50 (ms)", "p99 (ms)", "p99.9 (ms)", "max (ms)", "max/p50", "stalls", "spike (ms)",
        "inj. TTFT p50 (ms)", "inj. TTFT max (ms)", "spike step", "cost model step",
        "TPOT median (ms)", "goodput"};
    for (int c = 0; c < REPORT_SWEEP_COLS; c++)
        fprintf(out, "<th>%s</th>", heads[c]);
    fputs("<th>baseline p99 (ms)</th></tr>\n", out);
    for (int i = 0; i < sw->n_points; i++) {
        const report_sweep_point *r = &sw->points[i];
        char link[4200];
        snprintf(link, sizeof link, "%s/%s", r->label,
                 html_exists(r->dir, "report.html") ? "report.html" : "");
        fputs("<tr><td class=\"k p\"><a href=\"", out);
        html_url(out, link);
        fputs("\">", out);
        html_escape(out, r->label);
        fputs("</a></td>", out);
        for (int a = 0; a < sw->n_axes; a++) {
            fputs("<td class=\"k\">", out);
            html_escape(out, r->values[a]);
            fputs("</td>", out);
        }
        if (!r->fig.x) {
            fprintf(out, "<td class=\"k\" colspan=\"%d\">", REPORT_SWEEP_COLS + 1);
            html_escape(out, r->status);
            fputs(": ", out);
            html_escape(out, r->reason);
            fputs("</td></tr>\n", out);
            continue;
        }
        char cells[REPORT_SWEEP_COLS][32];
        report_sweep_cells(r, cells);
        for (int c = 0; c < REPORT_SWEEP_COLS; c++)
            fprintf(out, "<td>%s</td>", cells[c]);
        char b99[32] = DASH;
        if (r->fig.b)
            report_format_ms(b99, sizeof b99, r->fig.b->itl_ms.p99);
        fprintf(out, "<td>%s</td></tr>\n", b99);
    }
    fputs("</table>\n", out);
}

/* The sweep's points as chart input, grouped by the axes other than `axis`. */
static plot_sweep_point *chart_points(const report_sweep *sw, int axis,
                                      char (*groups)[160], int *n_out)
{
    plot_sweep_point *pts = calloc((size_t)(sw->n_points > 0 ? sw->n_points : 1), sizeof *pts);
    if (!pts)
        return NULL;
    int n = 0;
    for (int i = 0; i < sw->n_points; i++) {
        const report_sweep_point *r = &sw->points[i];
        if (!r->fig.x)
            continue;
        group_name(sw, r, axis, groups[n], 160);
        pts[n] = (plot_sweep_point){.group = groups[n],
                                    .prompt_tokens = r->prompt_tokens,
                                    .budget = r->budget,
                                    .max_gap_ms = r->fig.x->itl_ms.max,
                                    .spike_ms = r->fig.spike_ms,
                                    .p999_gap_ms = r->fig.x->itl_ms.p999,
                                    .p50_gap_ms = r->fig.x->itl_ms.p50,
                                    .ttft_ms = r->fig.ttft_ms.count > 0 ? r->fig.ttft_ms.p50 : -1,
                                    .model_ms = r->fig.model_spike_ms};
        n++;
    }
    *n_out = n;
    return pts;
}

/* The cost model's spike across the sweep's prompt range, from the first point's profile. */
static int model_line(const report_sweep *sw, double *xs, double *ys, int max, char *name,
                      size_t name_size)
{
    double lo = INFINITY, hi = 0;
    const report_run *first = NULL;
    for (int i = 0; i < sw->n_points; i++) {
        const report_sweep_point *pt = &sw->points[i];
        if (!pt->fig.x || pt->prompt_tokens <= 0)
            continue;
        lo = fmin(lo, pt->prompt_tokens);
        hi = fmax(hi, pt->prompt_tokens);
        if (!first)
            first = report_sweep_point_main(pt);
    }
    if (!first || !first->has_config || first->cfg.engine == EXPERIMENT_REMOTE || !(hi > 0))
        return 0;
    const experiment_config *cfg = &first->cfg;
    snprintf(name, name_size, "cost model: the prompt%s + %d decodes in one step (%.31s, %.63s%s)",
             cfg->sched.policy == SCHED_CHUNKED ? "'s longest chunk" : "", cfg->wl.users,
             cfg->cost.gpu.name, cfg->cost.arch.name,
             cfg->cost.params_override > 0 ? ", lesson FLOPs" : "");
    double a = lo / 1.4, b = hi * 1.4; /* past the chart's edges: it clips */
    for (int i = 0; i < max; i++) {
        double t = (double)i / (max - 1);
        xs[i] = a * pow(b / a, t);
        ys[i] = experiment_model_spike_ms(cfg, (int)llround(xs[i]));
    }
    return max;
}

int html_write_sweep_report(const report_sweep *sw, const html_options *opt, char *err)
{
    (void)opt;
    char *doc = NULL;
    size_t doc_len = 0;
    FILE *out = open_memstream(&doc, &doc_len);
    if (!out)
        return err_set(err, "open_memstream: %s", strerror(errno));
    int rc = -1;
    plot_chart chart;
    memset(&chart, 0, sizeof chart);
    char (*groups)[160] = calloc((size_t)(sw->n_points > 0 ? sw->n_points : 1), sizeof *groups);
    plot_sweep_point *pts = NULL;
    plot_run *runs = calloc((size_t)(sw->n_points > 0 ? sw->n_points : 1), sizeof *runs);
    char (*names)[160] = calloc((size_t)(sw->n_points > 0 ? sw->n_points : 1), sizeof *names);
    if (!groups || !runs || !names) {
        err_set(err, "out of memory");
        goto done;
    }
    char title[256], note[512];
    size_t tl = (size_t)snprintf(title, sizeof title, "Sweep over");
    for (int a = 0; a < sw->n_axes; a++)
        tl += (size_t)snprintf(title + tl, sizeof title - (tl < sizeof title ? tl : sizeof title),
                               "%s --%s", a ? " \xc3\x97" : "", sw->axes[a]);
    char engine[160];
    common_engine(sw, engine, sizeof engine);
    snprintf(note, sizeof note, "%s%s%d points", engine, engine[0] ? " \xc2\xb7 " : "",
             sw->n_points);
    html_begin(out, title);
    fputs("<h1>", out);
    html_escape(out, title);
    fputs("</h1>\n<p class=\"meta\">", out);
    html_escape(out, note);
    fputs("</p>\n<section id=\"verdict\">\n<h2>What changed</h2>\n", out);
    write_summary_lines(out, sw);
    fputs("</section>\n<section id=\"table\">\n<h2>Points</h2>\n", out);
    write_table(out, sw);
    fputs("<p class=\"note\">Gaps are the background users' time between tokens in each point's "
          "interference run. \"spike\" is the longest gap each injection caused, median over "
          "the injections; \"spike step\" divides a point's spike by the previous point's "
          "along the first axis; \"cost model step\" does the same for the cost model's "
          "one-step prefill (the prompt beside one decode per user).</p>\n</section>\n",
          out);

    int prompt_axis = axis_index(sw, "prompt-tokens");
    int budget_axis = axis_index(sw, "max-num-batched-tokens");
    int n_pts = 0;
    if (prompt_axis >= 0) {
        pts = chart_points(sw, prompt_axis, groups, &n_pts);
        double xs[48], ys[48];
        char model_name[256] = "cost model";
        int n_model = model_line(sw, xs, ys, 48, model_name, sizeof model_name);
        fputs("<section id=\"spike\">\n<h2>Spike vs prompt length</h2>\n", out);
        if (!pts || plot_spike_vs_prompt(&chart, pts, n_pts, xs, ys, n_model, model_name, note,
                                         err) != 0 ||
            html_figure(out, sw->dir, &chart, "spike_vs_prompt",
                        "Measured longest gap per prompt length (points, labelled with the step "
                        "from the previous length) and the cost model's prediction (dashed).",
                        err) != 0)
            goto done;
        plot_chart_free(&chart);
        free(pts);
        pts = NULL;
        fputs("</section>\n", out);
    }
    if (budget_axis >= 0) {
        pts = chart_points(sw, budget_axis, groups, &n_pts);
        fputs("<section id=\"tradeoff\">\n<h2>Token budget trade-off</h2>\n", out);
        if (!pts || plot_tradeoff(&chart, pts, n_pts, note, err) != 0 ||
            html_figure(out, sw->dir, &chart, "tradeoff",
                        "Sarathi-Serve's trade-off: a smaller token budget cuts the long prompt "
                        "into more chunks, so the gaps users see shrink while the prompt waits "
                        "longer for its first token. Each point is labelled with its budget B.",
                        err) != 0)
            goto done;
        plot_chart_free(&chart);
        free(pts);
        pts = NULL;
        fputs("</section>\n", out);
    }

    int n_runs = 0;
    for (int i = 0; i < sw->n_points; i++) {
        if (!sw->points[i].fig.x)
            continue;
        point_name(sw, &sw->points[i], names[n_runs], 160);
        runs[n_runs] = (plot_run){names[n_runs], plot_palette(n_runs), NULL, sw->points[i].fig.x};
        n_runs++;
    }
    fputs("<section id=\"percentiles\">\n<h2>Tail of every point</h2>\n", out);
    if (plot_percentiles(&chart, "Tail of the time between tokens, per point", runs, n_runs, note,
                         err) != 0 ||
        html_figure(out, sw->dir, &chart, "percentiles",
                    "p99 moves only when spikes exceed 1 % of gaps; max and p99.9 show every "
                    "spike.",
                    err) != 0)
        goto done;
    plot_chart_free(&chart);
    fputs("</section>\n", out);

    fputs("<section id=\"config\">\n<h2>Configuration</h2>\n<p>", out);
    json_t *argv = json_object_get(sw->json, "argv");
    fputs("<code>stallscope sweep", out);
    for (size_t i = 0; argv && i < json_array_size(argv); i++) {
        fputc(' ', out);
        html_escape(out, json_string_value(json_array_get(argv, i)));
    }
    fputs("</code></p>\n<p class=\"note\">Mode: ", out);
    html_escape(out, sw->mode);
    fputs(". Each point's config.json holds everything needed to rerun it.</p>\n</section>\n"
          "<section id=\"files\">\n<h2>Files</h2>\n<ul class=\"files\">\n"
          "<li><a href=\"sweep.json\">sweep.json</a></li>\n"
          "<li><a href=\"sweep.csv\">sweep.csv</a></li>\n",
          out);
    for (int i = 0; i < sw->n_points; i++) {
        fputs("<li><a href=\"", out);
        html_url(out, sw->points[i].label);
        fputs("/\">", out);
        html_escape(out, sw->points[i].label);
        fputs("/</a></li>\n", out);
    }
    if (prompt_axis >= 0)
        fputs("<li><a href=\"plots/spike_vs_prompt.png\">plots/spike_vs_prompt.png</a></li>\n", out);
    if (budget_axis >= 0)
        fputs("<li><a href=\"plots/tradeoff.png\">plots/tradeoff.png</a></li>\n", out);
    fputs("<li><a href=\"plots/percentiles.png\">plots/percentiles.png</a></li>\n</ul>\n"
          "</section>\n",
          out);
    html_end(out);
    rc = 0;
done:
    plot_chart_free(&chart);
    free(pts);
    free(groups);
    free(runs);
    free(names);
    return html_finish_document(out, &doc, &doc_len, sw->dir, rc, err);
}
