/* html_sweep — a sweep's points back from disk, one table, and the sweep's report: spike
 * vs prompt length with the cost model's line, the chunked-prefill trade-off, the tail
 * of every point. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "common/units.h"
#include "report/artifacts.h"
#include "report/html.h"
#include "report/html_internal.h"
#include "report/plot.h"
#include "report/report.h"

#define TIMES "\xc3\x97"
#define DASH "\xe2\x80\x94"

bool html_is_sweep(const char *dir)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/sweep.json", dir);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static const html_run *point_main(const html_sweep_point *pt)
{
    return pt->loaded ? html_set_main(&pt->set) : NULL;
}

static const analysis_summary *point_summary(const html_sweep_point *pt)
{
    const html_run *r = point_main(pt);
    return r ? &r->summary : NULL;
}

static const analysis_summary *point_baseline(const html_sweep_point *pt)
{
    if (!pt->loaded || pt->set.baseline < 0)
        return NULL;
    const html_run *b = &pt->set.runs[pt->set.baseline];
    return b == point_main(pt) ? NULL : &b->summary;
}

int html_sweep_load(html_sweep *sw, const char *dir, double threshold_ms, FILE *warn, char *err)
{
    memset(sw, 0, sizeof *sw);
    snprintf(sw->dir, sizeof sw->dir, "%s", dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/sweep.json", dir);
    json_error_t jerr;
    sw->json = json_load_file(path, 0, &jerr);
    if (!sw->json)
        return err_set(err, "%s:%d: %s", path, jerr.line, jerr.text);
    json_t *axes = json_object_get(sw->json, "axes"), *points = json_object_get(sw->json, "points");
    if (!json_is_array(axes) || !json_is_array(points) || json_array_size(axes) == 0 ||
        json_array_size(axes) > HTML_MAX_AXES)
        return err_set(err, "%s: needs \"axes\" (1 or 2 names) and \"points\"", path);
    sw->n_axes = (int)json_array_size(axes);
    for (int a = 0; a < sw->n_axes; a++) {
        const char *name = json_string_value(json_array_get(axes, (size_t)a));
        snprintf(sw->axes[a], sizeof sw->axes[a], "%s", name ? name : "?");
    }
    const char *mode = json_string_value(json_object_get(sw->json, "mode"));
    snprintf(sw->mode, sizeof sw->mode, "%s", mode ? mode : "sim");
    size_t n = json_array_size(points);
    sw->points = calloc(n > 0 ? n : 1, sizeof *sw->points);
    if (!sw->points)
        return err_set(err, "out of memory");
    sw->n_points = (int)n;
    for (size_t i = 0; i < n; i++) {
        html_sweep_point *pt = &sw->points[i];
        json_t *p = json_array_get(points, i);
        const char *label = json_string_value(json_object_get(p, "label"));
        const char *status = json_string_value(json_object_get(p, "status"));
        const char *reason = json_string_value(json_object_get(p, "reason"));
        snprintf(pt->label, sizeof pt->label, "%s", label ? label : "?");
        snprintf(pt->status, sizeof pt->status, "%s", status ? status : "ok");
        snprintf(pt->reason, sizeof pt->reason, "%s", reason ? reason : "");
        json_t *values = json_object_get(p, "values");
        for (int a = 0; a < sw->n_axes; a++) {
            const char *v = json_string_value(json_array_get(values, (size_t)a));
            snprintf(pt->values[a], sizeof pt->values[a], "%s", v ? v : "?");
        }
        snprintf(pt->dir, sizeof pt->dir, "%s/%s", dir, pt->label);
        if (strcmp(pt->status, "ok") != 0)
            continue;
        char why[ERR_LEN];
        if (html_set_load(&pt->set, pt->dir, threshold_ms, false, warn, why) != 0) {
            snprintf(pt->status, sizeof pt->status, "failed");
            snprintf(pt->reason, sizeof pt->reason, "%s", why);
            html_set_free(&pt->set);
            continue;
        }
        pt->loaded = true;
        const html_run *x = html_set_main(&pt->set);
        workload_config wl;
        cost_params cost;
        sched_config sched;
        if (x && x->config && html_config_workload(x->config, &wl, why) == 0 &&
            html_config_cost(x->config, &cost, why) == 0 &&
            html_config_sched(x->config, &cost, &sched, why) == 0)
            pt->model_spike_ms = html_model_spike_ms(&cost, &wl, &sched, wl.prompt_tokens);
    }
    return 0;
}

void html_sweep_free(html_sweep *sw)
{
    for (int i = 0; i < sw->n_points; i++)
        if (sw->points[i].loaded)
            html_set_free(&sw->points[i].set);
    free(sw->points);
    json_decref(sw->json);
    memset(sw, 0, sizeof *sw);
}

/* ---- rows --------------------------------------------------------------------------------- */

typedef struct sweep_row {
    const html_sweep_point *pt;
    const analysis_summary *x, *b;
    analysis_dist ttft_ms; /* the injections' TTFT; count 0 when none got a token */
    double spike_ms;   /* the typical spike: median over injections of each one's longest gap */
    int prev;          /* the previous point on the same line along the first axis, -1 */
    double step;       /* spike / prev's spike, 0 without prev */
    double model_step; /* the same for the cost model's spike */
    double prompt_tokens, budget;
} sweep_row;

/* Median over injections of the longest gap each caused: the spike one long prompt
 * causes, robust to the odd step that also carried a background prompt. */
static double typical_spike(const analysis_summary *s)
{
    double *v = malloc((size_t)(s->n_injections > 0 ? s->n_injections : 1) * sizeof *v);
    if (!v)
        return 0;
    int n = 0;
    for (int i = 0; i < s->n_injections; i++)
        if (s->injections[i].max_gap_ms > 0)
            v[n++] = s->injections[i].max_gap_ms;
    analysis_dist d;
    analysis_dist_from(v, n, &d);
    free(v);
    return n > 0 ? d.p50 : 0;
}

static bool same_line(const html_sweep *sw, const html_sweep_point *a, const html_sweep_point *b)
{
    for (int k = 1; k < sw->n_axes; k++)
        if (strcmp(a->values[k], b->values[k]) != 0)
            return false;
    return true;
}

static sweep_row *build_rows(const html_sweep *sw)
{
    sweep_row *rows = calloc((size_t)(sw->n_points > 0 ? sw->n_points : 1), sizeof *rows);
    if (!rows)
        return NULL;
    for (int i = 0; i < sw->n_points; i++) {
        sweep_row *r = &rows[i];
        r->pt = &sw->points[i];
        r->x = point_summary(r->pt);
        r->b = point_baseline(r->pt);
        r->prev = -1;
        if (r->x) {
            analysis_injection_ttft(r->x, &r->ttft_ms);
            r->spike_ms = typical_spike(r->x);
        }
        const html_run *main = point_main(r->pt);
        json_t *cfg = main ? main->config : NULL;
        json_t *w = cfg ? json_object_get(cfg, "workload") : NULL;
        json_t *s = cfg ? json_object_get(cfg, "sched") : NULL;
        r->prompt_tokens = w ? (double)json_integer_value(json_object_get(w, "prompt_tokens")) : 0;
        r->budget = s ? (double)json_integer_value(json_object_get(s, "max_num_batched_tokens")) : 0;
        for (int a = 0; a < sw->n_axes; a++) {
            int64_t v;
            if (strcmp(sw->axes[a], "max-num-batched-tokens") == 0 && r->budget <= 0 &&
                units_parse_count(r->pt->values[a], &v, NULL) == 0)
                r->budget = (double)v;
            if (strcmp(sw->axes[a], "prompt-tokens") == 0 && r->prompt_tokens <= 0 &&
                units_parse_count(r->pt->values[a], &v, NULL) == 0)
                r->prompt_tokens = (double)v;
        }
        if (!r->x)
            continue;
        for (int j = i - 1; j >= 0; j--)
            if (rows[j].x && same_line(sw, rows[j].pt, r->pt)) {
                r->prev = j;
                break;
            }
        if (r->prev >= 0) {
            const sweep_row *p = &rows[r->prev];
            if (p->spike_ms > 0 && r->spike_ms > 0)
                r->step = r->spike_ms / p->spike_ms;
            if (p->pt->model_spike_ms > 0 && r->pt->model_spike_ms > 0)
                r->model_step = r->pt->model_spike_ms / p->pt->model_spike_ms;
        }
    }
    return rows;
}

/* ---- the terminal table -------------------------------------------------------------------- */

#define N_COLS 11
static const char *const COL_TITLES[N_COLS] = {"p50",      "p99",    "p99.9",    "max",
                                               "max/p50",  "stalls", "spike",    "TTFT p50",
                                               "TTFT max", "step",   "model"};

/* The numeric cells of a row as text ("" when not applicable). */
static void row_cells(const sweep_row *r, char cells[N_COLS][32])
{
    for (int c = 0; c < N_COLS; c++)
        snprintf(cells[c], 32, "%s", DASH);
    if (!r->x)
        return;
    report_format_ms(cells[0], 32, r->x->itl_ms.p50);
    report_format_ms(cells[1], 32, r->x->itl_ms.p99);
    report_format_ms(cells[2], 32, r->x->itl_ms.p999);
    report_format_ms(cells[3], 32, r->x->itl_ms.max);
    snprintf(cells[4], 32, "%.1f", r->x->spike_ratio);
    snprintf(cells[5], 32, "%lld", (long long)r->x->stalls.count);
    if (r->spike_ms > 0)
        report_format_ms(cells[6], 32, r->spike_ms);
    if (r->ttft_ms.count > 0) {
        report_format_ms(cells[7], 32, r->ttft_ms.p50);
        report_format_ms(cells[8], 32, r->ttft_ms.max);
    }
    if (r->step > 0)
        snprintf(cells[9], 32, TIMES "%.2f", r->step);
    if (r->model_step > 0)
        snprintf(cells[10], 32, TIMES "%.2f", r->model_step);
}

void html_sweep_table_print(FILE *out, const html_sweep *sw)
{
    sweep_row *rows = build_rows(sw);
    if (!rows)
        return;
    int w_label = 5, w_axis[HTML_MAX_AXES];
    for (int a = 0; a < sw->n_axes; a++)
        w_axis[a] = report_display_width(sw->axes[a]);
    for (int i = 0; i < sw->n_points; i++) {
        int w = report_display_width(sw->points[i].label);
        if (w > w_label)
            w_label = w;
        for (int a = 0; a < sw->n_axes; a++) {
            w = report_display_width(sw->points[i].values[a]);
            if (w > w_axis[a])
                w_axis[a] = w;
        }
    }
    fprintf(out, "gaps in ms (background users, interference run); spike = the longest gap each "
                 "injection caused, median over injections;\nstep = spike / the previous point's "
                 "along %s; model = the same step in the cost model\n\n",
            sw->axes[0]);
    report_print_padded(out, "point", w_label, false);
    for (int a = 0; a < sw->n_axes; a++) {
        fputs("  ", out);
        report_print_padded(out, sw->axes[a], w_axis[a], false);
    }
    for (int c = 0; c < N_COLS; c++) {
        fputs("  ", out);
        report_print_padded(out, COL_TITLES[c], 8, true);
    }
    fputc('\n', out);
    for (int i = 0; i < sw->n_points; i++) {
        const sweep_row *r = &rows[i];
        report_print_padded(out, r->pt->label, w_label, false);
        for (int a = 0; a < sw->n_axes; a++) {
            fputs("  ", out);
            report_print_padded(out, r->pt->values[a], w_axis[a], false);
        }
        if (!r->x) {
            fprintf(out, "  %s: %s\n", r->pt->status, r->pt->reason);
            continue;
        }
        char cells[N_COLS][32];
        row_cells(r, cells);
        for (int c = 0; c < N_COLS; c++) {
            fputs("  ", out);
            report_print_padded(out, cells[c], 8, true);
        }
        fputc('\n', out);
    }
    free(rows);
}

/* ---- results ------------------------------------------------------------------------------ */

static json_t *dist_json(const analysis_dist *d)
{
    json_t *j = json_object();
    json_object_set_new(j, "count", json_integer(d->count));
    json_object_set_new(j, "p50", json_real(d->p50));
    json_object_set_new(j, "p90", json_real(d->p90));
    json_object_set_new(j, "p99", json_real(d->p99));
    json_object_set_new(j, "p999", json_real(d->p999));
    json_object_set_new(j, "max", json_real(d->max));
    return j;
}

json_t *html_sweep_results_json(const html_sweep *sw)
{
    sweep_row *rows = build_rows(sw);
    if (!rows)
        return NULL;
    json_t *all = json_array();
    for (int i = 0; i < sw->n_points; i++) {
        const sweep_row *r = &rows[i];
        json_t *j = json_object();
        json_object_set_new(j, "label", json_string(r->pt->label));
        json_t *values = json_object();
        for (int a = 0; a < sw->n_axes; a++)
            json_object_set_new(values, sw->axes[a], json_string(r->pt->values[a]));
        json_object_set_new(j, "values", values);
        json_object_set_new(j, "status", json_string(r->pt->status));
        if (r->pt->reason[0])
            json_object_set_new(j, "reason", json_string(r->pt->reason));
        if (r->x) {
            json_object_set_new(j, "prompt_tokens", json_integer((json_int_t)r->prompt_tokens));
            json_object_set_new(j, "max_num_batched_tokens", json_integer((json_int_t)r->budget));
            json_object_set_new(j, "itl_ms", dist_json(&r->x->itl_ms));
            if (r->b)
                json_object_set_new(j, "baseline_itl_ms", dist_json(&r->b->itl_ms));
            json_object_set_new(j, "spike_ratio", json_real(r->x->spike_ratio));
            json_object_set_new(j, "stalls", json_integer(r->x->stalls.count));
            json_object_set_new(j, "injections", json_integer(r->x->n_injections));
            json_object_set_new(j, "injection_ttft_p50_ms",
                                r->ttft_ms.count > 0 ? json_real(r->ttft_ms.p50) : json_null());
            json_object_set_new(j, "injection_ttft_max_ms",
                                r->ttft_ms.count > 0 ? json_real(r->ttft_ms.max) : json_null());
            json_object_set_new(j, "spike_ms", r->spike_ms > 0 ? json_real(r->spike_ms) : json_null());
            json_object_set_new(j, "spike_step", r->step > 0 ? json_real(r->step) : json_null());
            json_object_set_new(j, "model_spike_ms", r->pt->model_spike_ms > 0
                                                         ? json_real(r->pt->model_spike_ms)
                                                         : json_null());
            json_object_set_new(j, "model_step",
                                r->model_step > 0 ? json_real(r->model_step) : json_null());
            json_object_set_new(j, "complete", json_boolean(r->x->complete));
        }
        json_array_append_new(all, j);
    }
    free(rows);
    return all;
}

int html_sweep_write_results(const html_sweep *sw, char *err)
{
    json_t *results = html_sweep_results_json(sw);
    if (!results)
        return err_set(err, "out of memory");
    json_object_set_new(sw->json, "results", results);
    char path[4200];
    snprintf(path, sizeof path, "%s/sweep.json", sw->dir);
    char *text = json_dumps(sw->json, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    if (!text)
        return err_set(err, "out of memory");
    size_t len = strlen(text);
    char *with_nl = realloc(text, len + 2);
    if (!with_nl) {
        free(text);
        return err_set(err, "out of memory");
    }
    with_nl[len] = '\n';
    with_nl[len + 1] = '\0';
    int rc = artifacts_write_atomic(path, with_nl, len + 1, err);
    free(with_nl);
    if (rc != 0)
        return -1;

    /* sweep.csv: the same, flat, for spreadsheets and scripts. */
    sweep_row *rows = build_rows(sw);
    char *csv = NULL;
    size_t csv_len = 0;
    FILE *f = open_memstream(&csv, &csv_len);
    if (!rows || !f) {
        free(rows);
        if (f)
            fclose(f);
        free(csv);
        return err_set(err, "out of memory");
    }
    fputs("point", f);
    for (int a = 0; a < sw->n_axes; a++)
        fprintf(f, ",%s", sw->axes[a]);
    fputs(",status,p50_ms,p90_ms,p99_ms,p999_ms,max_ms,spike_ratio,stalls,spike_ms,"
          "injection_ttft_p50_ms,injection_ttft_max_ms,spike_step,model_spike_ms,model_step,"
          "baseline_p50_ms,baseline_p99_ms,baseline_p999_ms,baseline_max_ms\n",
          f);
    for (int i = 0; i < sw->n_points; i++) {
        const sweep_row *r = &rows[i];
        fprintf(f, "%s", r->pt->label);
        for (int a = 0; a < sw->n_axes; a++)
            fprintf(f, ",%s", r->pt->values[a]);
        fprintf(f, ",%s", r->pt->status);
        if (!r->x) {
            fputs(",,,,,,,,,,,,,,,,,\n", f);
            continue;
        }
        const analysis_dist *d = &r->x->itl_ms;
        fprintf(f, ",%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%lld", d->p50, d->p90, d->p99, d->p999, d->max,
                r->x->spike_ratio, (long long)r->x->stalls.count);
        if (r->spike_ms > 0)
            fprintf(f, ",%.6f", r->spike_ms);
        else
            fputs(",", f);
        if (r->ttft_ms.count > 0)
            fprintf(f, ",%.6f,%.6f", r->ttft_ms.p50, r->ttft_ms.max);
        else
            fputs(",,", f);
        if (r->step > 0)
            fprintf(f, ",%.6f", r->step);
        else
            fputs(",", f);
        if (r->pt->model_spike_ms > 0)
            fprintf(f, ",%.6f", r->pt->model_spike_ms);
        else
            fputs(",", f);
        if (r->model_step > 0)
            fprintf(f, ",%.6f", r->model_step);
        else
            fputs(",", f);
        if (r->b)
            fprintf(f, ",%.6f,%.6f,%.6f,%.6f\n", r->b->itl_ms.p50, r->b->itl_ms.p99,
                    r->b->itl_ms.p999, r->b->itl_ms.max);
        else
            fputs(",,,,\n", f);
    }
    fclose(f);
    free(rows);
    snprintf(path, sizeof path, "%s/sweep.csv", sw->dir);
    rc = artifacts_write_atomic(path, csv, csv_len, err);
    free(csv);
    return rc;
}

/* ---- the report --------------------------------------------------------------------------- */

static int axis_index(const html_sweep *sw, const char *name)
{
    for (int a = 0; a < sw->n_axes; a++)
        if (strcmp(sw->axes[a], name) == 0)
            return a;
    return -1;
}

/* "policy=chunked" for the axes other than skip; "" when there are none. */
static void group_name(const html_sweep *sw, const html_sweep_point *pt, int skip, char *buf,
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

static void point_name(const html_sweep *sw, const html_sweep_point *pt, char *buf, size_t size)
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
static void common_engine(const html_sweep *sw, char *buf, size_t size)
{
    buf[0] = '\0';
    for (int i = 0; i < sw->n_points && !buf[0]; i++) {
        const html_run *r = point_main(&sw->points[i]);
        if (r && r->engine[0])
            snprintf(buf, size, "%s", r->engine);
    }
    bool sched_varies = axis_index(sw, "policy") >= 0 ||
                        axis_index(sw, "max-num-batched-tokens") >= 0;
    char *last = strrchr(buf, ' ');
    if (sched_varies && last && strchr(last, '/'))
        *last = '\0';
}

static void write_summary_lines(FILE *out, const html_sweep *sw, const sweep_row *rows)
{
    /* Along the first axis, per line: the longest gap at each point and its step. */
    fputs("<ul>\n", out);
    for (int i = 0; i < sw->n_points; i++) {
        if (!rows[i].x)
            continue;
        bool starts_line = true;
        for (int j = 0; j < i; j++)
            if (rows[j].x && same_line(sw, rows[j].pt, rows[i].pt))
                starts_line = false;
        if (!starts_line)
            continue;
        char group[160];
        group_name(sw, rows[i].pt, 0, group, sizeof group);
        fputs("<li>", out);
        if (group[0]) {
            html_escape(out, group);
            fputs(": ", out);
        }
        fputs("spike (longest gap per injection, median) ", out);
        bool first = true;
        for (int k = i; k < sw->n_points; k++) {
            if (!rows[k].x || !same_line(sw, rows[k].pt, rows[i].pt))
                continue;
            char ms[32];
            report_format_ms(ms, sizeof ms, rows[k].spike_ms > 0 ? rows[k].spike_ms : rows[k].x->itl_ms.max);
            fprintf(out, "%s%s ms at %s=", first ? "" : ", ", ms, sw->axes[0]);
            html_escape(out, rows[k].pt->values[0]);
            if (rows[k].step > 0)
                fprintf(out, " (" TIMES "%.2f", rows[k].step);
            if (rows[k].step > 0 && rows[k].model_step > 0)
                fprintf(out, "; cost model " TIMES "%.2f", rows[k].model_step);
            if (rows[k].step > 0)
                fputs(")", out);
            char p99[32], p999[32], max[32];
            report_format_ms(p99, sizeof p99, rows[k].x->itl_ms.p99);
            report_format_ms(p999, sizeof p999, rows[k].x->itl_ms.p999);
            report_format_ms(max, sizeof max, rows[k].x->itl_ms.max);
            fprintf(out, " [p99 %s, p99.9 %s, max %s ms", p99, p999, max);
            if (rows[k].ttft_ms.count > 0) {
                char ttft[32];
                report_format_ms(ttft, sizeof ttft, rows[k].ttft_ms.p50);
                fprintf(out, ", TTFT p50 %s ms", ttft);
            }
            fputs("]", out);
            first = false;
        }
        fputs(".</li>\n", out);
    }
    for (int i = 0; i < sw->n_points; i++)
        if (!rows[i].x) {
            fputs("<li>", out);
            html_escape(out, rows[i].pt->label);
            fputs(" ", out);
            html_escape(out, rows[i].pt->status);
            fputs(": ", out);
            html_escape(out, rows[i].pt->reason);
            fputs("</li>\n", out);
        }
    fputs("</ul>\n", out);
}

static void write_table(FILE *out, const html_sweep *sw, const sweep_row *rows)
{
    fputs("<table>\n<tr><th class=\"k\">point</th>", out);
    for (int a = 0; a < sw->n_axes; a++) {
        fputs("<th class=\"k\">", out);
        html_escape(out, sw->axes[a]);
        fputs("</th>", out);
    }
    static const char *const heads[N_COLS] = {
        "p50 (ms)", "p99 (ms)", "p99.9 (ms)", "max (ms)", "max/p50", "stalls", "spike (ms)",
        "inj. TTFT p50 (ms)", "inj. TTFT max (ms)", "spike step", "cost model step"};
    for (int c = 0; c < N_COLS; c++)
        fprintf(out, "<th>%s</th>", heads[c]);
    fputs("<th>baseline p99 (ms)</th></tr>\n", out);
    for (int i = 0; i < sw->n_points; i++) {
        const sweep_row *r = &rows[i];
        char link[4200];
        snprintf(link, sizeof link, "%s/%s", r->pt->label,
                 html_exists(r->pt->dir, "report.html") ? "report.html" : "");
        fputs("<tr><td class=\"k p\"><a href=\"", out);
        html_url(out, link);
        fputs("\">", out);
        html_escape(out, r->pt->label);
        fputs("</a></td>", out);
        for (int a = 0; a < sw->n_axes; a++) {
            fputs("<td class=\"k\">", out);
            html_escape(out, r->pt->values[a]);
            fputs("</td>", out);
        }
        if (!r->x) {
            fprintf(out, "<td class=\"k\" colspan=\"%d\">", N_COLS + 1);
            html_escape(out, r->pt->status);
            fputs(": ", out);
            html_escape(out, r->pt->reason);
            fputs("</td></tr>\n", out);
            continue;
        }
        char cells[N_COLS][32];
        row_cells(r, cells);
        for (int c = 0; c < N_COLS; c++)
            fprintf(out, "<td>%s</td>", cells[c]);
        char b99[32] = DASH;
        if (r->b)
            report_format_ms(b99, sizeof b99, r->b->itl_ms.p99);
        fprintf(out, "<td>%s</td></tr>\n", b99);
    }
    fputs("</table>\n", out);
}

/* The sweep's points as chart input, grouped by the axes other than `axis`. */
static plot_sweep_point *chart_points(const html_sweep *sw, const sweep_row *rows, int axis,
                                      char (*groups)[160], int *n_out)
{
    plot_sweep_point *pts = calloc((size_t)(sw->n_points > 0 ? sw->n_points : 1), sizeof *pts);
    if (!pts)
        return NULL;
    int n = 0;
    for (int i = 0; i < sw->n_points; i++) {
        const sweep_row *r = &rows[i];
        if (!r->x)
            continue;
        group_name(sw, r->pt, axis, groups[n], 160);
        pts[n] = (plot_sweep_point){.group = groups[n],
                                    .prompt_tokens = r->prompt_tokens,
                                    .budget = r->budget,
                                    .max_gap_ms = r->x->itl_ms.max,
                                    .spike_ms = r->spike_ms,
                                    .p999_gap_ms = r->x->itl_ms.p999,
                                    .p50_gap_ms = r->x->itl_ms.p50,
                                    .ttft_ms = r->ttft_ms.count > 0 ? r->ttft_ms.p50 : -1,
                                    .model_ms = r->pt->model_spike_ms};
        n++;
    }
    *n_out = n;
    return pts;
}

/* The cost model's spike across the sweep's prompt range, from the first point's profile. */
static int model_line(const html_sweep *sw, const sweep_row *rows, double *xs, double *ys,
                      int max, char *name, size_t name_size)
{
    double lo = INFINITY, hi = 0;
    const html_run *first = NULL;
    for (int i = 0; i < sw->n_points; i++) {
        if (!rows[i].x || rows[i].prompt_tokens <= 0)
            continue;
        lo = fmin(lo, rows[i].prompt_tokens);
        hi = fmax(hi, rows[i].prompt_tokens);
        if (!first)
            first = point_main(rows[i].pt);
    }
    workload_config wl;
    cost_params cost;
    sched_config sched;
    char why[ERR_LEN];
    if (!first || !first->config || !(hi > 0) ||
        html_config_workload(first->config, &wl, why) != 0 ||
        html_config_cost(first->config, &cost, why) != 0 ||
        html_config_sched(first->config, &cost, &sched, why) != 0)
        return 0;
    snprintf(name, name_size, "cost model: the prompt%s + %d decodes in one step (%.31s, %.63s%s)",
             sched.policy == SCHED_CHUNKED ? "'s longest chunk" : "", wl.users, cost.gpu.name,
             cost.arch.name, cost.params_override > 0 ? ", lesson FLOPs" : "");
    double a = lo / 1.4, b = hi * 1.4; /* past the chart's edges: it clips */
    for (int i = 0; i < max; i++) {
        double t = (double)i / (max - 1);
        xs[i] = a * pow(b / a, t);
        ys[i] = html_model_spike_ms(&cost, &wl, &sched, (int)llround(xs[i]));
    }
    return max;
}

int html_write_sweep_report(const html_sweep *sw, const html_options *opt, char *err)
{
    (void)opt;
    sweep_row *rows = build_rows(sw);
    if (!rows)
        return err_set(err, "out of memory");
    char *doc = NULL;
    size_t doc_len = 0;
    FILE *out = open_memstream(&doc, &doc_len);
    if (!out) {
        free(rows);
        return err_set(err, "open_memstream: %s", strerror(errno));
    }
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
    write_summary_lines(out, sw, rows);
    fputs("</section>\n<section id=\"table\">\n<h2>Points</h2>\n", out);
    write_table(out, sw, rows);
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
        pts = chart_points(sw, rows, prompt_axis, groups, &n_pts);
        double xs[48], ys[48];
        char model_name[256] = "cost model";
        int n_model = model_line(sw, rows, xs, ys, 48, model_name, sizeof model_name);
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
        pts = chart_points(sw, rows, budget_axis, groups, &n_pts);
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
        if (!rows[i].x)
            continue;
        point_name(sw, rows[i].pt, names[n_runs], 160);
        runs[n_runs] = (plot_run){names[n_runs], plot_palette(n_runs), NULL, rows[i].x};
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
    free(rows);
    return html_finish_document(out, &doc, &doc_len, sw->dir, rc, err);
}
