/* report — the entry points: after a run pair, after a sweep, and `report DIR`. Each reads
 * back what is on disk (load.c), so all three show the same numbers for the same files. */
#include "report/report.h"

#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/fsio.h"
#include "report/html.h"
#include "report/html_sweep.h"
#include "report/load.h"
#include "report/plot.h"
#include "report/sweep.h"
#include "report/table.h"

static void print_json(const json_t *j)
{
    if (j)
        json_dumpf(j, stdout, FSIO_JSON_FLAGS);
    fputc('\n', stdout);
}

/* report.html and plots/ for a directory of runs or a sweep. */
static int build_html(const char *dir, double threshold_ms, const report_given *given, char *err)
{
    html_options opt = {.predict = true};
    char why[ERR_LEN];
    int rc;
    if (report_is_sweep(dir)) {
        report_sweep sw;
        rc = report_sweep_load(&sw, dir, threshold_ms, stderr, why);
        if (rc == 0)
            rc = html_write_sweep_report(&sw, &opt, why);
        report_sweep_free(&sw);
    } else {
        report_set set;
        rc = report_set_load_given(&set, dir, threshold_ms, true, given, stderr, why);
        if (rc == 0)
            rc = html_write_run_report(&set, &opt, why);
        report_set_free(&set);
    }
    plot_release_caches();
    return rc == 0 ? 0 : err_set(err, "report: %s", why);
}

int report_finish_pair(const char *out_dir, const experiment_pair *pair, bool json, bool html, char *err)
{
    const analysis_summary *b = pair->have_baseline ? &pair->baseline : NULL;
    const analysis_summary *x = &pair->interference;
    /* The report reads back what was just written; the threshold in hand keeps its stall
     * counts equal to these summaries'. */
    report_given given = {.baseline = b, .interference = x};
    if (html && build_html(out_dir, x->stalls.threshold_ms, &given, err) != 0)
        return -1;
    if (json) {
        json_t *cmp = analysis_comparison_to_json(b, x);
        print_json(cmp);
        json_decref(cmp);
    } else {
        char verdict[1024];
        report_table_print(stdout, b, x);
        report_verdict(verdict, sizeof verdict, b, x);
        printf("\n%s\n", verdict);
        printf("\nartifacts: %s/\n", out_dir);
        if (html)
            printf("report:    %s/report.html\n", out_dir);
    }
    fflush(stdout);
    return 0;
}

/* summary.json in every run directory, comparison.json beside them when there is a
 * baseline/interference pair (*comparison: new reference, or NULL). */
static int write_summaries(const report_set *set, json_t **comparison, char *err)
{
    *comparison = NULL;
    char path[4200];
    for (int i = 0; i < set->n_runs; i++) {
        json_t *j = analysis_summary_to_json(&set->runs[i].summary);
        int rc = fsio_join(path, sizeof path, set->runs[i].dir, "summary.json", err);
        if (rc == 0)
            rc = fsio_write_json(path, j, 0, err);
        json_decref(j);
        if (rc == 0)
            rc = fsio_join(path, sizeof path, set->runs[i].dir, "stalls.csv", err);
        if (rc == 0)
            rc = analysis_write_stalls_csv(&set->runs[i].summary, path, err);
        if (rc != 0)
            return -1;
    }
    if (set->baseline >= 0 && set->interference >= 0) {
        *comparison = analysis_comparison_to_json(&set->runs[set->baseline].summary,
                                                  &set->runs[set->interference].summary);
        if (fsio_join(path, sizeof path, set->root, "comparison.json", err) != 0 ||
            fsio_write_json(path, *comparison, 0, err) != 0)
            return -1;
    }
    return 0;
}

static int sweep_results(report_sweep *sw, double threshold_ms, bool rewrite_summaries, bool json,
                         bool html, char *err)
{
    for (int i = 0; rewrite_summaries && i < sw->n_points; i++) {
        json_t *comparison = NULL;
        int rc = sw->points[i].loaded ? write_summaries(&sw->points[i].set, &comparison, err) : 0;
        json_decref(comparison);
        if (rc != 0)
            return -1;
    }
    if (report_sweep_write_results(sw, err) != 0)
        return -1;
    /* A live point gets its own report, as a `run` would write it (a simulated point's
     * report would only repeat the sweep's). The sweep's report links to them. */
    for (int i = 0; html && strcmp(sw->mode, "run") == 0 && i < sw->n_points; i++)
        if (report_sweep_point_main(&sw->points[i]) &&
            build_html(sw->points[i].dir, threshold_ms, NULL, err) != 0)
            return -1;
    if (html) {
        html_options opt = {.predict = true};
        int rc = html_write_sweep_report(sw, &opt, err);
        plot_release_caches();
        if (rc != 0)
            return -1;
    }
    if (json) {
        print_json(sw->json);
    } else {
        report_sweep_table_print(stdout, sw);
        printf("\nartifacts: %s/ (sweep.json, sweep.csv, point-k/)\n", sw->dir);
        if (html)
            printf("report:    %s/report.html\n", sw->dir);
    }
    fflush(stdout);
    return 0;
}

int report_finish_sweep(const char *out_dir, double threshold_ms, bool json, bool html, char *err)
{
    report_sweep sw;
    int rc = report_sweep_load(&sw, out_dir, threshold_ms, stderr, err);
    if (rc == 0)
        rc = sweep_results(&sw, threshold_ms, false, json, html, err);
    report_sweep_free(&sw);
    return rc;
}

static int runs_dir(const char *dir, double threshold_ms, bool json, bool html, char *err)
{
    report_set set;
    json_t *comparison = NULL;
    int rc = -1;
    if (report_set_load(&set, dir, threshold_ms, true, stderr, err) != 0) {
        rc = -2; /* a directory without a readable log is the user's input, not our failure */
        goto done;
    }
    if (write_summaries(&set, &comparison, err) != 0)
        goto done;
    html = html && report_set_main(&set) != NULL;
    if (html) {
        html_options opt = {.predict = true};
        int hr = html_write_run_report(&set, &opt, err);
        plot_release_caches();
        if (hr != 0)
            goto done;
    } else if (report_set_main(&set) == NULL) {
        fprintf(stderr, "stallscope report: no report.html: %d runs and none labelled "
                        "interference\n",
                set.n_runs);
    }
    rc = 0;
    const analysis_summary *base = set.baseline >= 0 ? &set.runs[set.baseline].summary : NULL;
    if (json) {
        if (comparison) {
            print_json(comparison);
        } else if (set.n_runs == 1) {
            json_t *j = analysis_summary_to_json(&set.runs[0].summary);
            print_json(j);
            json_decref(j);
        } else {
            /* Several runs without a baseline/interference pair: by label. */
            json_t *all = json_object();
            for (int i = 0; i < set.n_runs; i++)
                json_object_set_new(all, set.runs[i].label,
                                    analysis_summary_to_json(&set.runs[i].summary));
            print_json(all);
            json_decref(all);
        }
        goto done;
    }
    int printed = 0;
    char verdict[1024];
    for (int i = 0; i < set.n_runs; i++) {
        if (i == set.baseline && set.n_runs > 1)
            continue;
        const analysis_summary *b = i == set.baseline ? NULL : base;
        if (printed++)
            fputc('\n', stdout);
        report_table_print(stdout, b, &set.runs[i].summary);
        report_verdict(verdict, sizeof verdict, b, &set.runs[i].summary);
        printf("\n%s\n", verdict);
    }
    const report_run *x = report_set_main(&set);
    if (x && x->has_config && x->meta.merge.shards > 0) { /* a merged run's cross-shard figures */
        fputc('\n', stdout);
        report_merge_print(stdout, x);
    }
    if (comparison)
        printf("\nwrote %s/comparison.json and summary.json in each run directory\n", dir);
    if (html)
        printf("report: %s/report.html\n", dir);
    /* A run that failed is reported whole, and the command says so by its status, as `run`
     * did: 1 with the reason (the first failed run's). */
    for (int i = 0; i < set.n_runs; i++)
        if (set.runs[i].summary.failed) {
            char why[512];
            analysis_failure_text(&set.runs[i].summary, why, sizeof why);
            err_set(err, "the %s run failed: %s", set.runs[i].label, why);
            rc = 1;
            break;
        }
done:
    fflush(stdout);
    json_decref(comparison);
    report_set_free(&set);
    return rc;
}

/* A directory of runs and sweeps (out/ after the tour), none its own: each named with what
 * it holds and the command that reports it, or the same as JSON. The count named. */
static int print_index(const char *dir, bool json)
{
    char *names[REPORT_MAX_RUNS];
    const int n = report_dir_children(dir, names, REPORT_MAX_RUNS);
    const int kept = n < REPORT_MAX_RUNS ? n : REPORT_MAX_RUNS;
    if (n <= 0)
        return 0;
    json_t *all = json ? json_array() : NULL;
    if (!json)
        printf("%s holds no run of its own but %d run or sweep director%s; report one:\n\n",
               dir, n, n == 1 ? "y" : "ies");
    for (int i = 0; i < kept; i++) {
        char path[4200], kind[512];
        snprintf(path, sizeof path, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/",
                 names[i]);
        report_dir_kind(path, kind, sizeof kind);
        if (all)
            json_array_append_new(all, json_pack("{s:s, s:s}", "dir", path, "holds", kind));
        else
            printf("  stallscope report %-28s # %s\n", path, kind);
        free(names[i]);
    }
    if (kept < n && !json)
        printf("  ... and %d more\n", n - kept);
    if (all) {
        json_t *doc = json_pack("{s:s, s:o}", "dir", dir, "runs", all);
        print_json(doc);
        json_decref(doc);
    }
    fflush(stdout);
    return n;
}

int report_rebuild_dir(const char *dir, double threshold_ms, bool json, bool html, char *err)
{
    char kind[512];
    if (!report_dir_kind(dir, kind, sizeof kind) && print_index(dir, json) > 0)
        return REPORT_LISTED;
    if (!report_is_sweep(dir))
        return runs_dir(dir, threshold_ms, json, html, err);
    report_sweep sw;
    int rc = report_sweep_load(&sw, dir, threshold_ms, stderr, err);
    if (rc != 0)
        rc = -2;
    else
        rc = sweep_results(&sw, threshold_ms, true, json, html, err);
    report_sweep_free(&sw);
    return rc;
}

int report_merge_dirs(const report_merge_options *opt, double threshold_ms, bool json, bool html,
                      bool *complete, char *err)
{
    int rc = report_merge(opt, complete, err);
    if (rc != 0)
        return rc;
    /* What was just written is ours: a directory that cannot be read back is a failure. A
     * merged run that failed (1) is reported, and said. */
    rc = report_rebuild_dir(opt->out, threshold_ms, json, html, err);
    return rc == 0 || rc == 1 ? rc : -1;
}
