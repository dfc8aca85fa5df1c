/* html_tune — OUT/tune.html (html_tune.h). */
#include "report/html_tune.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/fsio.h"
#include "common/redact.h"
#include "experiment/server_flags.h"
#include "report/html_page.h"
#include "report/tune_table.h"

/* ---- the front as a chart (plot.h) --------------------------------------------------------- */

#define FRONT_W 900
#define FRONT_H 480

/* One mark per policy (sched_policy's order), so settings with one prediction stay apart:
 * mixed a hollow square around where a chunked dot would be, chunked a dot, prefill-first a
 * hollow triangle. Mixed is the interference run's orange: one-step prefill. */
static const struct {
    plot_mark mark;
    bool hollow;
    double size;
} POLICY_MARK[] = {{PLOT_MARK_SQUARE, true, 13}, {PLOT_MARK_CIRCLE, false, 8},
                   {PLOT_MARK_TRIANGLE, true, 14}};

static plot_color policy_colour(sched_policy p, bool feasible)
{
    plot_color c = p == SCHED_MIXED     ? PLOT_COLOR_INTERFERENCE
                   : p == SCHED_CHUNKED ? PLOT_COLOR_BASELINE
                                        : (plot_color){0.33, 0.33, 0.33, 1};
    c.a = feasible ? 0.9 : 0.3; /* faint: it breaks an SLO */
    return c;
}

/* A --disaggregate split's wide ring (tests find it in the SVG: stroke:rgb(55%,34%,29%)). */
#define SPLIT_COLOUR ((plot_color){0.55, 0.34, 0.29, 1})
#define FRONT_COLOUR ((plot_color){0, 0, 0, 1})
#define CHOICE_COLOUR ((plot_color){0, 0.5, 0, 1})
#define SLO_COLOUR ((plot_color){0.8, 0, 0, 1})

/* The SLO on itl.p999 with an upper limit, if any: its limit in ms (0: none). */
static double itl_limit(const gate_rules *slo)
{
    for (int r = 0; r < slo->n; r++)
        if (strcmp(gate_rule_metric(&slo->rule[r]), "itl.p999") == 0 &&
            (slo->rule[r].op == GATE_LT || slo->rule[r].op == GATE_LE))
            return slo->rule[r].value;
    return 0;
}

static double objective(const tune_config *tc, const tune_point *pt)
{
    return tc->n_setups > 1 ? pt->predicted.output_per_gpu : pt->predicted.output_throughput;
}

/* Which servable points a series holds. */
typedef struct point_filter {
    bool split;   /* only --disaggregate's splits */
    bool front;   /* only the front's */
    int policy;   /* only this sched_policy; -1: any */
    int feasible; /* only those that meet every SLO (1) or break one (0); -1: any */
} point_filter;

static bool keep_point(const tune_point *pt, const point_filter *f)
{
    return pt->servable && (!f->split || pt->disagg.prefill > 0) && (!f->front || pt->on_front) &&
           (f->policy < 0 || (int)pt->policy == f->policy) &&
           (f->feasible < 0 || pt->feasible == (f->feasible == 1));
}

/* A series of the points f keeps, or none when it keeps none (an empty series would still
 * get a legend entry). 0, or -1 with err. */
static int add_points(plot_panel *p, const tune_config *tc, const tune_result *res,
                      const char *name, plot_mark mark, bool hollow, double size,
                      plot_color colour, point_filter f, char *err)
{
    plot_series *s = NULL;
    for (int i = 0; i < res->n_points; i++) {
        const tune_point *pt = &res->points[i];
        if (!keep_point(pt, &f))
            continue;
        if (!s && !(s = plot_panel_add_series(p, name, PLOT_POINTS, colour)))
            return err_set(err, "out of memory");
        s->mark = mark;
        s->hollow = hollow;
        s->size = size;
        if (plot_series_push(s, objective(tc, pt), pt->predicted.itl_p999_ms) != 0)
            return err_set(err, "out of memory");
    }
    return 0;
}

/* Every servable setting's output throughput (x; per GPU with --disaggregate's splits)
 * against its predicted ITL p99.9 (y, log), as the report's trade-off chart sets a tail
 * against what it buys: one mark per policy, faint where an SLO breaks, the front ringed in
 * black, the splits in a wide brown ring, the choice (or the closest) in a green diamond,
 * labelled, the ITL p99.9 SLO a dashed line. 0, or -1 with err. */
static int front_chart(plot_chart *c, const tune_config *tc, const tune_result *res, char *err)
{
    char engine[256];
    tune_engine_name(tc, engine, sizeof engine);
    plot_chart_init(c, "Every setting that can serve the workload, as the simulator predicts it",
                    FRONT_W, FRONT_H);
    snprintf(c->note, sizeof c->note, "%.120s; %d settings, %d can serve, %d meet every SLO", engine,
             res->n_points, res->n_servable, res->n_feasible);
    plot_panel *p = plot_chart_add_panel(c, "");
    if (!p)
        return err_set(err, "out of memory");
    snprintf(p->x.label, sizeof p->x.label, "output throughput (tok/s%s)",
             tc->n_setups > 1 ? " per GPU" : "");
    snprintf(p->y.label, sizeof p->y.label, "ITL p99.9, predicted (ms, log scale)");
    p->y.log = true;
    for (int met = 1; met >= 0; met--)
        for (int k = 0; k < tc->n_policies; k++) {
            const sched_policy pol = tc->policies[k];
            char name[96];
            snprintf(name, sizeof name, "%s%s", sched_policy_name(pol),
                     met ? "" : ", breaks an SLO");
            if (add_points(p, tc, res, name, POLICY_MARK[pol].mark, POLICY_MARK[pol].hollow,
                           POLICY_MARK[pol].size, policy_colour(pol, met),
                           (point_filter){.policy = (int)pol, .feasible = met}, err) != 0)
                return -1;
        }
    /* Rings around the marks: the front's, and wider, a split's. */
    if (add_points(p, tc, res, "on the Pareto front", PLOT_MARK_CIRCLE, true, 19, FRONT_COLOUR,
                   (point_filter){.front = true, .policy = -1, .feasible = -1}, err) != 0 ||
        add_points(p, tc, res, "P:D split", PLOT_MARK_CIRCLE, true, 27, SPLIT_COLOUR,
                   (point_filter){.split = true, .policy = -1, .feasible = -1}, err) != 0)
        return -1;
    const int mark = res->choice >= 0 ? res->choice : res->closest;
    if (mark >= 0) {
        const tune_point *pt = &res->points[mark];
        char name[64], label[96];
        tune_point_name(pt, name, sizeof name);
        snprintf(label, sizeof label, "%s %s", res->choice >= 0 ? "chosen" : "closest", name);
        plot_series *s = plot_panel_add_series(p, "", PLOT_POINTS, CHOICE_COLOUR);
        if (!s || plot_series_push_labelled(s, objective(tc, pt), pt->predicted.itl_p999_ms,
                                            label) != 0)
            return err_set(err, "out of memory");
        s->mark = PLOT_MARK_DIAMOND;
        s->hollow = true;
        s->size = 24;
    }
    const double limit = itl_limit(&tc->slo);
    if (limit > 0) {
        char label[64];
        snprintf(label, sizeof label, "ITL p99.9 SLO %g ms", limit);
        plot_panel_add_hline(p, limit, label, SLO_COLOUR);
    }
    return 0;
}

static int write_front(FILE *out, const char *dir, const tune_config *tc, const tune_result *res,
                       char *err)
{
    plot_chart chart;
    int rc = front_chart(&chart, tc, res, err);
    if (rc == 0) {
        char caption[512] = "";
        const int mark = res->choice >= 0 ? res->choice : res->closest;
        if (mark >= 0) {
            char name[64];
            tune_point_name(&res->points[mark], name, sizeof name);
            snprintf(caption, sizeof caption, " In a green diamond: the %s %s%s.",
                     res->choice >= 0 ? "chosen" : "closest", name,
                     res->choice >= 0 ? "" : ", which breaks an SLO");
        }
        char text[1024];
        snprintf(text, sizeof text,
                 "Right is more output, down is a shorter tail. Ringed in black: the Pareto "
                 "front (output throughput, TTFT p99, ITL p99.9); faint: a setting that breaks "
                 "an SLO.%s Every setting's figures are in the tables below.",
                 caption);
        rc = html_figure(out, dir, &chart, "tune_front", text, err);
    }
    plot_chart_free(&chart);
    return rc;
}

/* ---- tables ------------------------------------------------------------------------------- */

static void cell_ms(FILE *out, double v)
{
    fprintf(out, "<td>%.*f</td>", v >= 100 ? 0 : v >= 10 ? 1 : 2, v);
}

static void point_row(FILE *out, const tune_config *tc, const tune_result *res, int i, bool same)
{
    const tune_point *pt = &res->points[i];
    char name[64], why[400];
    tune_point_name(pt, name, sizeof name);
    tune_point_why(&tc->slo, pt, why, sizeof why);
    fputs(i == res->choice ? "<tr style=\"background:#eaf6ea\"><td class=\"k\"><b>" : "<tr><td class=\"k\">", out);
    html_escape(out, name);
    fputs(i == res->choice ? "</b> (chosen)" : "", out);
    const int n_same = same ? tune_table_same_count(res, i) : 1;
    if (n_same > 1)
        fprintf(out, " <span class=\"note\">+%d with these figures</span>", n_same - 1);
    fputs("</td>", out);
    if (!pt->servable) {
        fputs("<td colspan=\"6\" class=\"k\">", out);
        html_escape(out, why);
        fputs("</td></tr>\n", out);
        return;
    }
    if (pt->disagg.prefill > 0)
        fprintf(out, "<td>%.1f <span class=\"note\">(%.1f per GPU)</span></td>",
                pt->predicted.output_throughput, pt->predicted.output_per_gpu);
    else
        fprintf(out, "<td>%.1f</td>", pt->predicted.output_throughput);
    cell_ms(out, pt->predicted.ttft_p99_ms);
    cell_ms(out, pt->predicted.itl_p50_ms);
    cell_ms(out, pt->predicted.itl_p999_ms);
    cell_ms(out, pt->predicted.itl_max_ms);
    fputs("<td class=\"k\">", out);
    html_escape(out, pt->feasible ? "meets every SLO" : why);
    fputs("</td></tr>\n", out);
}

static void table_head(FILE *out)
{
    fputs("<table><tr><th class=\"k\">setting (policy/budget/max-num-seqs)</th><th>output "
          "tok/s</th><th>TTFT p99 ms</th><th>ITL p50 ms</th><th>ITL p99.9 ms</th><th>ITL max "
          "ms</th><th class=\"k\">SLOs</th></tr>\n",
          out);
}

/* A function that prints to a FILE, its output escaped into the page. */
static void pre_of(FILE *out, void (*print)(FILE *, const void *, const void *), const void *a,
                   const void *b)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem)
        return;
    print(mem, a, b);
    fclose(mem);
    fputs("<pre style=\"white-space:pre-wrap\">", out);
    html_escape(out, text ? text : "");
    fputs("</pre>\n", out);
    free(text);
}

static void print_failures(FILE *f, const void *a, const void *b)
{
    tune_table_print_failures(f, "", a, b);
}

static void print_setups(FILE *f, const void *a, const void *b)
{
    tune_table_print_setups(f, a, b);
}

static void print_flags(FILE *f, const void *a, const void *b)
{
    const tune_config *tc = a;
    const tune_point *pt = b;
    experiment_print_server_setting(f, "", pt->policy, pt->max_num_batched_tokens,
                                    pt->max_num_seqs, &tc->base.wl);
    if (pt->prefix_caching)
        experiment_print_prefix_caching(f, "");
}

static void verify_row(FILE *out, const char *figure, double p, double m)
{
    char e[32];
    tune_table_rel_error(p, m, e, sizeof e);
    fprintf(out, "<tr><td class=\"k\">%s</td><td>%.2f</td><td>%.2f</td><td>%s</td></tr>\n",
            figure, p, m, e);
}

static void write_verify(FILE *out, const tune_config *tc, const tune_result *res)
{
    fputs("<h2>Predicted vs measured (--verify)</h2>\n<p class=\"meta\">Live against ", out);
    char target[1024];
    redact_url(tc->base.client.target, target, sizeof target);
    html_escape(out, target);
    fputs("; error = (predicted &minus; measured) / measured.</p>\n", out);
    for (int c = 0; c < res->n_verified; c++) {
        const tune_verified *v = &res->verified[c];
        const tune_point *pt = &res->points[v->point];
        char name[64];
        tune_point_name(pt, name, sizeof name);
        fprintf(out, "<h3>%d. ", c + 1);
        html_escape(out, name);
        fputs(" (", out);
        html_escape(out, v->dir);
        fputs(")</h3>\n", out);
        if (!v->ran) {
            fputs("<p>Did not run: ", out);
            html_escape(out, v->why);
            fputs("</p>\n", out);
            continue;
        }
        fprintf(out, "<p class=\"verdict%s\">%s</p>\n", v->meets ? " model" : "",
                v->meets ? "Meets every SLO live." : "Misses an SLO live.");
        fputs("<table><tr><th class=\"k\">figure</th><th>predicted</th><th>measured</th>"
              "<th>error</th></tr>\n",
              out);
        verify_row(out, "ITL p50 (ms)", pt->predicted.itl_p50_ms, v->measured.itl_p50_ms);
        verify_row(out, "ITL p99.9 (ms)", pt->predicted.itl_p999_ms, v->measured.itl_p999_ms);
        verify_row(out, "ITL max (ms)", pt->predicted.itl_max_ms, v->measured.itl_max_ms);
        verify_row(out, "TTFT p99 (ms)", pt->predicted.ttft_p99_ms, v->measured.ttft_p99_ms);
        verify_row(out, "output tok/s", pt->predicted.output_throughput,
                   v->measured.output_throughput);
        fputs("</table>\n", out);
    }
}

int html_tune_write(const char *dir, const tune_config *tc, const tune_result *res, char *err)
{
    char *doc = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&doc, &len);
    if (!out)
        return err_set(err, "tune.html: %s", strerror(errno));
    html_begin(out, "stallscope tune");
    char engine[256], verdict[1024];
    tune_engine_name(tc, engine, sizeof engine);
    tune_table_verdict(tc, res, verdict, sizeof verdict);
    fputs("<h1>stallscope tune</h1>\n<p class=\"meta\">", out);
    fprintf(out, "%d settings (%d can serve, %d meet every SLO) in the simulator, ",
            res->n_points, res->n_servable, res->n_feasible);
    html_escape(out, engine);
    fprintf(out, ", searched in %.1f s. SLOs:", res->search_s);
    for (int r = 0; r < tc->slo.n; r++) {
        fputs(" <code>", out);
        html_escape(out, tc->slo.rule[r].text);
        fputs("</code>", out);
    }
    fputs("</p>\n<p class=\"verdict\">", out);
    html_escape(out, res->choice >= 0 ? "Chosen: " : "No feasible setting: ");
    html_escape(out, verdict);
    fputs(".</p>\n<h2>The front</h2>\n", out);
    if (write_front(out, dir, tc, res, err) != 0) {
        fclose(out);
        free(doc);
        plot_release_caches();
        return -1;
    }
    int *rows = calloc((size_t)res->n_points + 1, sizeof *rows);
    const int n_rows = rows ? tune_table_front_rows(res, rows) : 0;
    fprintf(out, "<p>%d settings on the Pareto front (no other setting has at least their "
                 "output throughput with no more TTFT p99 and ITL p99.9), %d distinct "
                 "predictions:</p>\n",
            res->n_front, n_rows);
    table_head(out);
    for (int k = 0; k < n_rows; k++)
        point_row(out, tc, res, rows[k], true);
    free(rows);
    fputs("</table>\n", out);
    if (tc->n_setups > 1) {
        fputs("<h2>One instance against disaggregated prefill</h2>\n<p class=\"meta\">Judged by "
              "output tokens/s per GPU: a P:D split runs on P + D GPUs.</p>\n",
              out);
        pre_of(out, print_setups, tc, res);
    }
    fputs("<h2>Why the others fail</h2>\n<p class=\"meta\">Each setting by the SLO "
          "it breaks most (nearest and furthest named).</p>\n",
          out);
    pre_of(out, print_failures, tc, res);
    const int shown = res->choice >= 0 ? res->choice : res->closest;
    if (shown >= 0) {
        char name[64];
        tune_point_name(&res->points[shown], name, sizeof name);
        fputs("<h2>Server flags for ", out);
        html_escape(out, name);
        fputs(res->choice >= 0 ? "</h2>\n" : " (the closest; it does not meet the SLOs)</h2>\n",
              out);
        pre_of(out, print_flags, tc, &res->points[shown]);
    }
    if (res->n_verified > 0)
        write_verify(out, tc, res);
    fputs("<h2>Every setting</h2>\n", out);
    table_head(out);
    for (int i = 0; i < res->n_points; i++)
        point_row(out, tc, res, i, false);
    fputs("</table>\n<p class=\"note\">Written by <code>stallscope tune</code>; every figure "
          "is in tune.json beside this page. Self-contained: no script, no network.</p>\n"
          "</body>\n</html>\n",
          out);
    if (fclose(out) != 0) {
        free(doc);
        return err_set(err, "tune.html: %s", strerror(errno));
    }
    char path[1200];
    int rc = fsio_join(path, sizeof path, dir, "tune.html", err);
    if (rc == 0)
        rc = fsio_write_atomic(path, doc, len, err);
    free(doc);
    plot_release_caches(); /* the page's chart was the command's last drawing */
    return rc;
}
