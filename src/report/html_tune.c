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
#include "report/html_internal.h"
#include "report/tune_table.h"

/* ---- the plot: ITL p99.9 (log x) against output throughput (y) ---------------------------- */

#define PLOT_W 900
#define PLOT_H 460
#define PLOT_L 80 /* margins */
#define PLOT_R 20
#define PLOT_T 20
#define PLOT_B 60

static const char *const POLICY_COLOUR[] = {"#d9541a", "#1f77b4", "#555555"}; /* sched_policy */
static const char *const DISAGG_COLOUR = "#7b3294"; /* a --disaggregate split's ring */

typedef struct axes {
    double x_lo, x_hi; /* log10 of ms */
    double y_lo, y_hi; /* tok/s */
} axes;

static double px(const axes *a, double ms)
{
    const double l = log10(ms > 1e-3 ? ms : 1e-3);
    return PLOT_L + (l - a->x_lo) / (a->x_hi - a->x_lo) * (PLOT_W - PLOT_L - PLOT_R);
}

static double py(const axes *a, double tok_s)
{
    return PLOT_H - PLOT_B - (tok_s - a->y_lo) / (a->y_hi - a->y_lo) * (PLOT_H - PLOT_T - PLOT_B);
}

/* The SLO on itl.p999 with an upper limit, if any: its limit in ms (0: none). */
static double itl_limit(const gate_rules *slo)
{
    for (int r = 0; r < slo->n; r++)
        if (strcmp(gate_rule_metric(&slo->rule[r]), "itl.p999") == 0 &&
            (slo->rule[r].op == GATE_LT || slo->rule[r].op == GATE_LE))
            return slo->rule[r].value;
    return 0;
}

static void write_plot(FILE *out, const tune_config *tc, const tune_result *res)
{
    axes a = {1e9, -1e9, 1e18, -1e18};
    for (int i = 0; i < res->n_points; i++) {
        const tune_point *pt = &res->points[i];
        if (!pt->servable)
            continue;
        const double l = log10(pt->predicted.itl_p999_ms > 1e-3 ? pt->predicted.itl_p999_ms : 1e-3);
        a.x_lo = fmin(a.x_lo, l);
        a.x_hi = fmax(a.x_hi, l);
        a.y_lo = fmin(a.y_lo, pt->predicted.output_per_gpu);
        a.y_hi = fmax(a.y_hi, pt->predicted.output_per_gpu);
    }
    const double limit = itl_limit(&tc->slo);
    if (limit > 0) {
        a.x_lo = fmin(a.x_lo, log10(limit));
        a.x_hi = fmax(a.x_hi, log10(limit));
    }
    a.x_lo = floor(a.x_lo);
    a.x_hi = ceil(a.x_hi);
    if (a.x_hi - a.x_lo < 1)
        a.x_hi = a.x_lo + 1;
    const double span = a.y_hi - a.y_lo > 0 ? a.y_hi - a.y_lo : fmax(a.y_hi, 1) * 0.1;
    a.y_lo -= span * 0.08;
    a.y_hi += span * 0.08;
    if (a.y_lo < 0)
        a.y_lo = 0;

    fprintf(out, "<figure><svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" "
                 "width=\"%d\" height=\"%d\" font-family=\"DejaVu Sans,Arial,sans-serif\" "
                 "font-size=\"12\">\n",
            PLOT_W, PLOT_H, PLOT_W, PLOT_H);
    fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fff\" "
                 "stroke=\"#999\"/>\n",
            PLOT_L, PLOT_T, PLOT_W - PLOT_L - PLOT_R, PLOT_H - PLOT_T - PLOT_B);
    /* decades on x, five ticks on y */
    for (int d = (int)a.x_lo; d <= (int)a.x_hi; d++) {
        const double x = px(&a, pow(10, d));
        fprintf(out, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>"
                     "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g ms</text>\n",
                x, PLOT_T, x, PLOT_H - PLOT_B, x, PLOT_H - PLOT_B + 16, pow(10, d));
    }
    for (int k = 0; k <= 4; k++) {
        const double v = a.y_lo + (a.y_hi - a.y_lo) * k / 4, y = py(&a, v);
        fprintf(out, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>"
                     "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n",
                PLOT_L, y, PLOT_W - PLOT_R, y, PLOT_L - 6, y + 4, v);
    }
    fprintf(out, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">ITL p99.9 (predicted, log "
                 "scale)</text>\n",
            (PLOT_L + PLOT_W - PLOT_R) / 2, PLOT_H - 20);
    fprintf(out, "<text transform=\"translate(18 %d) rotate(-90)\" text-anchor=\"middle\">"
                 "output throughput (tok/s%s)</text>\n",
            (PLOT_T + PLOT_H - PLOT_B) / 2, tc->n_setups > 1 ? " per GPU" : "");
    if (limit > 0) {
        const double x = px(&a, limit);
        fprintf(out, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#c00\" "
                     "stroke-dasharray=\"5 4\"/><text x=\"%.1f\" y=\"%d\" fill=\"#c00\" "
                     "text-anchor=\"end\">ITL p99.9 SLO %g ms</text>\n",
                x, PLOT_T, x, PLOT_H - PLOT_B, x - 4, PLOT_H - PLOT_B - 6, limit);
    }
    for (int i = 0; i < res->n_points; i++) {
        const tune_point *pt = &res->points[i];
        if (!pt->servable)
            continue;
        char name[64];
        tune_point_name(pt, name, sizeof name);
        const double x = px(&a, pt->predicted.itl_p999_ms),
                     y = py(&a, pt->predicted.output_per_gpu);
        /* One shape per policy, so settings with one prediction stay visible: chunked a dot,
         * mixed a larger hollow square around it, prefill-first a hollow triangle. */
        const char *opacity = pt->feasible ? "0.9" : "0.3";
        const char *ring = pt->on_front ? "#000" : "none";
        if (pt->policy == SCHED_CHUNKED)
            fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%d\" fill=\"%s\" "
                         "fill-opacity=\"%s\" stroke=\"%s\">",
                    x, y, pt->on_front ? 5 : 4, POLICY_COLOUR[pt->policy], opacity, ring);
        else if (pt->policy == SCHED_MIXED)
            fprintf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"16\" height=\"16\" fill=\"none\" "
                         "stroke=\"%s\" stroke-opacity=\"%s\" stroke-width=\"%s\">",
                    x - 8, y - 8, POLICY_COLOUR[pt->policy], opacity, pt->on_front ? "2.5" : "1.5");
        else
            fprintf(out, "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"none\" "
                         "stroke=\"%s\" stroke-opacity=\"%s\" stroke-width=\"%s\">",
                    x, y - 12, x - 11, y + 8, x + 11, y + 8, POLICY_COLOUR[pt->policy], opacity,
                    pt->on_front ? "2.5" : "1.5");
        fputs("<title>", out);
        html_escape(out, name);
        if (pt->disagg.prefill > 0)
            fprintf(out, " (%d GPUs: %.0f tok/s per GPU)", tune_point_gpus(pt),
                    pt->predicted.output_per_gpu);
        fprintf(out, ": %.0f tok/s, ITL p99.9 %.2f ms, ITL max %.1f ms, TTFT p99 %.0f ms%s%s</title>",
                pt->predicted.output_throughput, pt->predicted.itl_p999_ms,
                pt->predicted.itl_max_ms, pt->predicted.ttft_p99_ms,
                pt->feasible ? ", meets the SLOs" : "", pt->on_front ? ", on the front" : "");
        fputs(pt->policy == SCHED_CHUNKED ? "</circle>\n"
              : pt->policy == SCHED_MIXED ? "</rect>\n"
                                          : "</polygon>\n",
              out);
        if (pt->disagg.prefill > 0) /* a split: a dashed ring around its policy's shape */
            fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"14\" fill=\"none\" "
                         "stroke=\"%s\" stroke-opacity=\"%s\" stroke-dasharray=\"3 2\"/>\n",
                    x, y, DISAGG_COLOUR, opacity);
    }
    const int mark = res->choice >= 0 ? res->choice : res->closest;
    if (mark >= 0) {
        const tune_point *pt = &res->points[mark];
        char name[64];
        tune_point_name(pt, name, sizeof name);
        const double x = px(&a, pt->predicted.itl_p999_ms),
                     y = py(&a, pt->predicted.output_per_gpu);
        fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"11\" fill=\"none\" stroke=\"#0a0\" "
                     "stroke-width=\"2.5\"/><text x=\"%.1f\" y=\"%.1f\" fill=\"#070\" "
                     "font-weight=\"bold\">",
                x, y, x + 14, y - 10);
        fprintf(out, "%s ", res->choice >= 0 ? "chosen" : "closest");
        html_escape(out, name);
        fputs("</text>\n", out);
    }
    /* legend */
    fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"none\" "
                 "stroke=\"%s\" stroke-width=\"1.5\"/><text x=\"%d\" y=\"%d\">mixed</text>\n",
            PLOT_L + 4, PLOT_H - 15, POLICY_COLOUR[SCHED_MIXED], PLOT_L + 20, PLOT_H - 4);
    fprintf(out, "<circle cx=\"%d\" cy=\"%d\" r=\"5\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">"
                 "chunked</text>\n",
            PLOT_L + 130, PLOT_H - 9, POLICY_COLOUR[SCHED_CHUNKED], PLOT_L + 140, PLOT_H - 4);
    fprintf(out, "<polygon points=\"%d,%d %d,%d %d,%d\" fill=\"none\" stroke=\"%s\" "
                 "stroke-width=\"1.5\"/><text x=\"%d\" y=\"%d\">prefill-first</text>\n",
            PLOT_L + 250, PLOT_H - 17, PLOT_L + 243, PLOT_H - 4, PLOT_L + 257, PLOT_H - 4,
            POLICY_COLOUR[SCHED_PREFILL_FIRST], PLOT_L + 264, PLOT_H - 4);
    fprintf(out, "<text x=\"%d\" y=\"%d\">faint: breaks an SLO; bold: on the front%s</text>\n",
            PLOT_L + 390, PLOT_H - 4,
            tc->n_setups > 1 ? "; dashed: P:D split" : "");
    fputs("</svg><figcaption>Every setting that can serve the workload, as the simulator "
          "predicts it: up is more output, left is a shorter tail. Ringed in black (chunked) or "
          "drawn bold (mixed, prefill-first): the Pareto front (output throughput, TTFT p99, "
          "ITL p99.9); hover a point for its figures."
          "</figcaption></figure>\n",
          out);
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
    write_plot(out, tc, res);
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
    return rc;
}
