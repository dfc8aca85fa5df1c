/* stallscope report DIR — recompute every summary from a run's token log, so the numbers
 * people quote always come from the one analysis, whatever wrote the CSVs; then rebuild
 * DIR/report.html and DIR/plots/ from the same files. DIR is a run directory (baseline/ and
 * interference/, or one run) or a sweep (sweep.json and its point-k/ directories). */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "analysis/analysis.h"
#include "cli/cli.h"
#include "common/err.h"
#include "common/units.h"
#include "report/html.h"
#include "report/plot.h"
#include "report/report.h"

#define JSON_FLAGS (JSON_INDENT(2) | JSON_REAL_PRECISION(10))

typedef struct report_cfg {
    double threshold_ms; /* 0: the default rule */
    bool json;
    bool no_report;
} report_cfg;

static int opt_threshold(void *ctx, const char *value, char *err)
{
    report_cfg *cfg = ctx;
    /* A bare number is ms here (the unit of every gap we print); a suffixed value goes
     * through the usual duration parser. */
    char *end = NULL;
    double ms = strtod(value, &end);
    if (end == value || *end != '\0') {
        int64_t ns;
        if (units_parse_duration_ns(value, &ns, NULL) != 0)
            return err_set(err, "'%s' is not a time (examples: 50, 50ms, 0.05s)", value);
        ms = (double)ns / 1e6;
    }
    if (!(ms > 0) || ms > 1e9)
        return err_set(err, "'%s' must be a positive duration in ms", value);
    cfg->threshold_ms = ms;
    return 0;
}

static int opt_json(void *ctx, const char *value, char *err)
{
    (void)value, (void)err;
    ((report_cfg *)ctx)->json = true;
    return 0;
}

static int opt_no_report(void *ctx, const char *value, char *err)
{
    (void)value, (void)err;
    ((report_cfg *)ctx)->no_report = true;
    return 0;
}

static const opts_spec report_specs[] = {
    {"threshold", "MS", "stall threshold in ms (default: 5 x the baseline's p50)",
     opt_threshold},
    {"json", NULL, "print comparison.json (or the summary), not the table", opt_json},
    {"no-report", NULL, "recompute the summaries only: no report.html, no plots", opt_no_report},
};

static int write_json(json_t *j, const char *path, char *err)
{
    if (!j)
        return err_set(err, "%s: out of memory building JSON", path);
    /* Write beside and rename, so a reader never sees half a file. */
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (json_dump_file(j, tmp, JSON_FLAGS) != 0) {
        remove(tmp);
        return err_set(err, "%s: cannot write", tmp);
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return err_set(err, "%s: %s", path, strerror(e));
    }
    return 0;
}

static void print_json(json_t *j)
{
    if (j)
        json_dumpf(j, stdout, JSON_FLAGS);
    fputc('\n', stdout);
}

/* summary.json in every run directory, comparison.json beside them when there is a
 * baseline/interference pair (*comparison: new reference, or NULL). */
static int write_summaries(const html_set *set, json_t **comparison, char *err)
{
    *comparison = NULL;
    for (int i = 0; i < set->n_runs; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/summary.json", set->runs[i].dir);
        json_t *j = analysis_summary_to_json(&set->runs[i].summary);
        int rc = write_json(j, path, err);
        json_decref(j);
        if (rc != 0)
            return -1;
    }
    if (set->baseline >= 0 && set->interference >= 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/comparison.json", set->root);
        *comparison = analysis_comparison_to_json(&set->runs[set->baseline].summary,
                                                  &set->runs[set->interference].summary);
        if (write_json(*comparison, path, err) != 0)
            return -1;
    }
    return 0;
}

static int report_runs(const char *root, const report_cfg *cfg)
{
    char err[ERR_LEN] = "";
    html_set set;
    json_t *comparison = NULL;
    int status = CLI_EXIT_OK;
    if (html_set_load(&set, root, cfg->threshold_ms, true, stderr, err) != 0) {
        /* A directory without a readable log is the user's input, not our failure. */
        status = cli_usage_error("report", err);
        goto done;
    }
    if (write_summaries(&set, &comparison, err) != 0)
        goto fail;
    bool html = !cfg->no_report && html_set_main(&set) != NULL;
    if (html) {
        html_options opt = {.predict = true};
        int rc = html_write_run_report(&set, &opt, err);
        plot_release_caches();
        if (rc != 0)
            goto fail;
    } else if (!cfg->no_report) {
        fprintf(stderr, "stallscope report: no report.html: %d runs and none labelled "
                        "interference\n",
                set.n_runs);
    }

    const analysis_summary *base = set.baseline >= 0 ? &set.runs[set.baseline].summary : NULL;
    if (cfg->json) {
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
    if (comparison)
        printf("\nwrote %s/comparison.json and summary.json in each run directory\n", root);
    if (html)
        printf("report: %s/report.html\n", root);
    goto done;
fail:
    fprintf(stderr, "stallscope report: %s\n", err);
    status = CLI_EXIT_FAIL;
done:
    json_decref(comparison);
    html_set_free(&set);
    return status;
}

static int report_sweep(const char *root, const report_cfg *cfg)
{
    char err[ERR_LEN] = "";
    html_sweep sw;
    int status = CLI_EXIT_OK;
    if (html_sweep_load(&sw, root, cfg->threshold_ms, stderr, err) != 0) {
        status = cli_usage_error("report", err);
        goto done;
    }
    for (int i = 0; i < sw.n_points; i++) {
        json_t *comparison = NULL;
        if (sw.points[i].loaded && write_summaries(&sw.points[i].set, &comparison, err) != 0)
            goto fail;
        json_decref(comparison);
    }
    if (html_sweep_write_results(&sw, err) != 0)
        goto fail;
    if (!cfg->no_report) {
        html_options opt = {.predict = true};
        int rc = html_write_sweep_report(&sw, &opt, err);
        plot_release_caches();
        if (rc != 0)
            goto fail;
    }
    if (cfg->json) {
        print_json(sw.json);
    } else {
        html_sweep_table_print(stdout, &sw);
        printf("\nwrote %s/sweep.json, %s/sweep.csv%s\n", root, root,
               cfg->no_report ? "" : " and report.html");
    }
    goto done;
fail:
    fprintf(stderr, "stallscope report: %s\n", err);
    status = CLI_EXIT_FAIL;
done:
    html_sweep_free(&sw);
    return status;
}

int cli_report(int argc, char **argv)
{
    static const char usage[] = "stallscope report DIR [--threshold MS] [--json] [--no-report]";
    report_cfg cfg = {0, false, false};
    opts_group groups[] = {
        {"report options", report_specs, (int)(sizeof report_specs / sizeof report_specs[0]),
         &cfg},
    };
    if (opts_wants_help(argc, argv)) {
        opts_print_help(stdout, usage,
                        "Recompute summary.json (and comparison.json) from the token logs in\n"
                        "DIR/<label>/ (or in DIR itself), print the side-by-side table and the\n"
                        "verdict, and rebuild DIR/report.html with its plots (DIR/plots/). For a\n"
                        "sweep (DIR/sweep.json), every point, sweep.csv and the sweep's report.",
                        groups, 1);
        return CLI_EXIT_OK;
    }
    char err[ERR_LEN] = "";
    char *positional[1];
    int n_positional = 0;
    if (opts_parse(argc, argv, groups, 1, positional, 1, &n_positional, err) != 0)
        return cli_usage_error("report", err);
    if (n_positional != 1)
        return cli_usage_error("report", "needs one directory (usage: stallscope report DIR)");
    const char *root = positional[0];
    return html_is_sweep(root) ? report_sweep(root, &cfg) : report_runs(root, &cfg);
}
