/* sweep — a sweep's figures in text (sweep.h); the figures themselves come from
 * analysis_sweep (load.c computes them). */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/fsio.h"
#include "report/sweep.h"
#include "report/table.h"

#define TIMES "\xc3\x97"
#define DASH "\xe2\x80\x94"

/* The TTFT columns are the injected prompts' (the legend says so): the background's TTFT is
 * not in the sweep's table. */
static const char *const COL_TITLES[REPORT_SWEEP_COLS] = {
    "p50", "p99", "p99.9", "max", "max/p50", "stalls", "spike", "inj. TTFT p50", "inj. TTFT max",
    "step", "model", "TPOT p50", "goodput"};
#define COL_MIN_WIDTH 8

void report_sweep_cells(const report_sweep_point *pt, char cells[REPORT_SWEEP_COLS][32])
{
    const analysis_sweep_point *f = &pt->fig;
    for (int c = 0; c < REPORT_SWEEP_COLS; c++)
        snprintf(cells[c], 32, "%s", DASH);
    if (!f->x)
        return;
    report_format_ms(cells[0], 32, f->x->itl_ms.p50);
    report_format_ms(cells[1], 32, f->x->itl_ms.p99);
    report_format_ms(cells[2], 32, f->x->itl_ms.p999);
    report_format_ms(cells[3], 32, f->x->itl_ms.max);
    snprintf(cells[4], 32, "%.1f", f->x->spike_ratio);
    snprintf(cells[5], 32, "%lld", (long long)f->x->stalls.count);
    if (f->spike_ms > 0)
        report_format_ms(cells[6], 32, f->spike_ms);
    if (f->ttft_ms.count > 0) {
        report_format_ms(cells[7], 32, f->ttft_ms.p50);
        report_format_ms(cells[8], 32, f->ttft_ms.max);
    }
    if (f->step > 0)
        snprintf(cells[9], 32, TIMES "%.2f", f->step);
    if (f->model_step > 0)
        snprintf(cells[10], 32, TIMES "%.2f", f->model_step);
    /* The benchmark world's: every request's median TPOT, and the SLO attainment. */
    const standard_class *all = &f->x->standard.all;
    if (all->tpot_ms.count > 0)
        report_format_ms(cells[11], 32, all->tpot_ms.median);
    if (all->has_goodput)
        snprintf(cells[12], 32, "%.2f %%", all->goodput * 100);
}

void report_sweep_table_print(FILE *out, const report_sweep *sw)
{
    int w_label = 5, w_axis[REPORT_MAX_AXES];
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
    int w_col[REPORT_SWEEP_COLS];
    for (int c = 0; c < REPORT_SWEEP_COLS; c++) {
        w_col[c] = report_display_width(COL_TITLES[c]);
        if (w_col[c] < COL_MIN_WIDTH)
            w_col[c] = COL_MIN_WIDTH;
    }
    fprintf(out, "gaps in ms (background users, interference run); spike = the longest gap each "
                 "injection caused, median over injections;\nstep = spike / the previous point's "
                 "along %s; model = the same step in the cost model;\ninj. TTFT = the injected "
                 "prompts' time to first token (ms); TPOT p50 = every completed request's\n\n",
            sw->axes[0]);
    report_print_padded(out, "point", w_label, false);
    for (int a = 0; a < sw->n_axes; a++) {
        fputs("  ", out);
        report_print_padded(out, sw->axes[a], w_axis[a], false);
    }
    for (int c = 0; c < REPORT_SWEEP_COLS; c++) {
        fputs("  ", out);
        report_print_padded(out, COL_TITLES[c], w_col[c], true);
    }
    fputc('\n', out);
    for (int i = 0; i < sw->n_points; i++) {
        const report_sweep_point *pt = &sw->points[i];
        report_print_padded(out, pt->label, w_label, false);
        for (int a = 0; a < sw->n_axes; a++) {
            fputs("  ", out);
            report_print_padded(out, pt->values[a], w_axis[a], false);
        }
        if (!pt->fig.x) {
            fprintf(out, "  %s: %s\n", pt->status, pt->reason);
            continue;
        }
        char cells[REPORT_SWEEP_COLS][32];
        report_sweep_cells(pt, cells);
        for (int c = 0; c < REPORT_SWEEP_COLS; c++) {
            fputs("  ", out);
            report_print_padded(out, cells[c], w_col[c], true);
        }
        fputc('\n', out);
    }
}

/* ---- results -------------------------------------------------------------------------------- */

static json_t *real_if(bool have, double v)
{
    return have ? json_real(v) : json_null();
}

static json_t *results_json(const report_sweep *sw)
{
    json_t *all = json_array();
    for (int i = 0; i < sw->n_points; i++) {
        const report_sweep_point *pt = &sw->points[i];
        const analysis_sweep_point *f = &pt->fig;
        json_t *j = json_object();
        json_object_set_new(j, "label", json_string(pt->label));
        json_t *values = json_object();
        for (int a = 0; a < sw->n_axes; a++)
            json_object_set_new(values, sw->axes[a], json_string(pt->values[a]));
        json_object_set_new(j, "values", values);
        json_object_set_new(j, "status", json_string(pt->status));
        if (pt->reason[0])
            json_object_set_new(j, "reason", json_string(pt->reason));
        if (f->x) {
            json_object_set_new(j, "prompt_tokens", json_integer((json_int_t)pt->prompt_tokens));
            json_object_set_new(j, "max_num_batched_tokens", json_integer((json_int_t)pt->budget));
            json_object_set_new(j, "itl_ms", analysis_dist_to_json(&f->x->itl_ms));
            if (f->b)
                json_object_set_new(j, "baseline_itl_ms", analysis_dist_to_json(&f->b->itl_ms));
            json_object_set_new(j, "spike_ratio", json_real(f->x->spike_ratio));
            json_object_set_new(j, "stalls", json_integer(f->x->stalls.count));
            json_object_set_new(j, "injections", json_integer(f->x->n_injections));
            json_object_set_new(j, "injection_ttft_p50_ms", real_if(f->ttft_ms.count > 0, f->ttft_ms.p50));
            json_object_set_new(j, "injection_ttft_max_ms", real_if(f->ttft_ms.count > 0, f->ttft_ms.max));
            json_object_set_new(j, "spike_ms", real_if(f->spike_ms > 0, f->spike_ms));
            json_object_set_new(j, "spike_step", real_if(f->step > 0, f->step));
            json_object_set_new(j, "model_spike_ms", real_if(f->model_spike_ms > 0, f->model_spike_ms));
            json_object_set_new(j, "model_step", real_if(f->model_step > 0, f->model_step));
            json_object_set_new(j, "complete", json_boolean(f->x->complete));
            json_object_set_new(j, "metrics", standard_to_json(&f->x->standard));
        }
        json_array_append_new(all, j);
    }
    return all;
}

/* A value, or an empty cell. */
static void csv_cell(FILE *f, bool have, double v)
{
    if (have)
        fprintf(f, ",%.6f", v);
    else
        fputc(',', f);
}

static int write_csv(const report_sweep *sw, char *err)
{
    char path[4200];
    fsio_file out;
    if (fsio_join(path, sizeof path, sw->dir, "sweep.csv", err) != 0 ||
        fsio_create(&out, path, err) != 0)
        return -1;
    FILE *f = out.f;
    fputs("point", f);
    for (int a = 0; a < sw->n_axes; a++)
        fprintf(f, ",%s", sw->axes[a]);
    fputs(",status,p50_ms,p90_ms,p99_ms,p999_ms,max_ms,spike_ratio,stalls,spike_ms,"
          "injection_ttft_p50_ms,injection_ttft_max_ms,spike_step,model_spike_ms,model_step,"
          "baseline_p50_ms,baseline_p99_ms,baseline_p999_ms,baseline_max_ms\n",
          f);
    for (int i = 0; i < sw->n_points; i++) {
        const report_sweep_point *pt = &sw->points[i];
        const analysis_sweep_point *r = &pt->fig;
        fprintf(f, "%s", pt->label);
        for (int a = 0; a < sw->n_axes; a++)
            fprintf(f, ",%s", pt->values[a]);
        fprintf(f, ",%s", pt->status);
        if (!r->x) {
            fputs(",,,,,,,,,,,,,,,,,\n", f);
            continue;
        }
        const analysis_dist *d = &r->x->itl_ms;
        fprintf(f, ",%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%lld", d->p50, d->p90, d->p99, d->p999, d->max,
                r->x->spike_ratio, (long long)r->x->stalls.count);
        csv_cell(f, r->spike_ms > 0, r->spike_ms);
        csv_cell(f, r->ttft_ms.count > 0, r->ttft_ms.p50);
        csv_cell(f, r->ttft_ms.count > 0, r->ttft_ms.max);
        csv_cell(f, r->step > 0, r->step);
        csv_cell(f, r->model_spike_ms > 0, r->model_spike_ms);
        csv_cell(f, r->model_step > 0, r->model_step);
        const analysis_dist *b = r->b ? &r->b->itl_ms : NULL;
        csv_cell(f, b, b ? b->p50 : 0);
        csv_cell(f, b, b ? b->p99 : 0);
        csv_cell(f, b, b ? b->p999 : 0);
        csv_cell(f, b, b ? b->max : 0);
        fputc('\n', f);
    }
    return fsio_commit(&out, err);
}

int report_sweep_write_results(const report_sweep *sw, char *err)
{
    json_t *results = results_json(sw);
    if (!results)
        return err_set(err, "out of memory");
    json_object_set_new(sw->json, "results", results);
    char path[4200];
    if (fsio_join(path, sizeof path, sw->dir, "sweep.json", err) != 0 ||
        fsio_write_json(path, sw->json, 0, err) != 0)
        return -1;
    /* sweep.csv: the same, flat, for spreadsheets and scripts. */
    return write_csv(sw, err);
}
