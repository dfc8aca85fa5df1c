/* stallscope report DIR — recompute every summary from a run's token log, so the numbers
 * people quote always come from the one analysis, whatever wrote the CSVs. */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "analysis/analysis.h"
#include "cli/cli.h"
#include "common/err.h"
#include "common/tokenlog.h"
#include "common/units.h"
#include "report/report.h"

#define REPORT_MAX_RUNS 256
#define JSON_FLAGS (JSON_INDENT(2) | JSON_REAL_PRECISION(10))

typedef struct report_cfg {
    double threshold_ms; /* 0: the default rule */
    bool json;
} report_cfg;

typedef struct report_run {
    char dir[4096];
    char label[64];
    char engine[128];
    char target[256];
    analysis_options opt;
    tokenlog log;
    analysis_summary summary;
    bool summarized;
} report_run;

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

static const opts_spec report_specs[] = {
    {"threshold", "MS", "stall threshold in ms (default: 5 x the baseline's p50)",
     opt_threshold},
    {"json", NULL, "print comparison.json (or the summary), not the table", opt_json},
};

static int has_file(const char *dir, const char *name)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_run_dir(const char *dir)
{
    return has_file(dir, "tokens.csv") || has_file(dir, "requests.csv");
}

static int cmp_run_dir(const void *a, const void *b)
{
    return strcmp(((const report_run *)a)->dir, ((const report_run *)b)->dir);
}

/* DIR itself, or its subdirectories holding a token log, sorted by name. */
static int find_runs(const char *root, report_run *runs, int *n_runs, char *err)
{
    struct stat st;
    *n_runs = 0;
    if (stat(root, &st) != 0)
        return err_set(err, "%s: %s", root, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return err_set(err, "%s: not a directory", root);
    if (is_run_dir(root)) {
        snprintf(runs[0].dir, sizeof runs[0].dir, "%s", root);
        *n_runs = 1;
        return 0;
    }
    DIR *d = opendir(root);
    if (!d)
        return err_set(err, "%s: %s", root, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", root, e->d_name) >= (int)sizeof path)
            continue;
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode) || !is_run_dir(path))
            continue;
        if (*n_runs == REPORT_MAX_RUNS) {
            closedir(d);
            return err_set(err, "%s: more than %d run directories", root, REPORT_MAX_RUNS);
        }
        snprintf(runs[*n_runs].dir, sizeof runs[*n_runs].dir, "%s", path);
        (*n_runs)++;
    }
    closedir(d);
    if (*n_runs == 0)
        return err_set(err, "%s: no token log here (expected tokens.csv and requests.csv in it "
                            "or in its run directories, e.g. %s/baseline)",
                       root, root);
    qsort(runs, (size_t)*n_runs, sizeof *runs, cmp_run_dir);
    return 0;
}

/* The last path component, trailing slashes ignored: "out/baseline/" -> "baseline". */
static void base_name(const char *path, char *out, size_t size)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    size_t start = len;
    while (start > 0 && path[start - 1] != '/')
        start--;
    snprintf(out, size, "%.*s", (int)(len - start), path + start);
}

/* config.json is advisory here: every key it lacks falls back to what the data says
 * (analysis derives users and duration from the log when they are 0). */
static void load_config(report_run *r)
{
    base_name(r->dir, r->label, sizeof r->label);
    r->engine[0] = r->target[0] = '\0';
    memset(&r->opt, 0, sizeof r->opt);
    r->opt.complete = true;

    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", r->dir);
    json_error_t jerr;
    json_t *cfg = json_load_file(path, 0, &jerr);
    if (!cfg) {
        if (has_file(r->dir, "config.json"))
            fprintf(stderr, "stallscope report: warning: %s:%d: %s (using the data's values)\n",
                    path, jerr.line, jerr.text);
        return;
    }
    json_t *v;
    if ((v = json_object_get(cfg, "label")) && json_is_string(v) && json_string_length(v) > 0)
        snprintf(r->label, sizeof r->label, "%s", json_string_value(v));
    if ((v = json_object_get(cfg, "engine")) && json_is_string(v)) {
        snprintf(r->engine, sizeof r->engine, "%s", json_string_value(v));
    } else if (v && !json_is_null(v)) {
        char *text = json_dumps(v, JSON_COMPACT);
        if (text)
            snprintf(r->engine, sizeof r->engine, "%s", text);
        free(text);
    }
    if ((v = json_object_get(cfg, "target")) && json_is_string(v))
        snprintf(r->target, sizeof r->target, "%s", json_string_value(v));
    if ((v = json_object_get(cfg, "duration_s")) && json_is_number(v)) {
        r->opt.duration_s = json_number_value(v);
    } else if (v && json_is_string(v)) {
        int64_t ns;
        if (units_parse_duration_ns(json_string_value(v), &ns, NULL) == 0)
            r->opt.duration_s = (double)ns / 1e9;
    }
    if ((v = json_object_get(cfg, "users")) && json_is_integer(v) && json_integer_value(v) > 0 &&
        json_integer_value(v) < 1000000000)
        r->opt.users = (int)json_integer_value(v);
    if ((v = json_object_get(cfg, "complete")) && json_is_boolean(v))
        r->opt.complete = json_is_true(v);
    json_decref(cfg);
}

static int summarize_run(report_run *r, const report_cfg *cfg, double reference_p50_ms,
                         char *err)
{
    r->opt.label = r->label;
    r->opt.engine = r->engine;
    r->opt.target = r->target;
    r->opt.threshold_ms = cfg->threshold_ms;
    r->opt.reference_p50_ms = reference_p50_ms;
    if (analysis_summarize(&r->log, &r->opt, &r->summary, err) != 0)
        return -1;
    r->summarized = true;
    return 0;
}

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

int cli_report(int argc, char **argv)
{
    static const char usage[] = "stallscope report DIR [--threshold MS] [--json]";
    report_cfg cfg = {0, false};
    opts_group groups[] = {
        {"report options", report_specs, (int)(sizeof report_specs / sizeof report_specs[0]),
         &cfg},
    };
    if (opts_wants_help(argc, argv)) {
        opts_print_help(stdout, usage,
                        "Recompute summary.json (and comparison.json) from the token logs in\n"
                        "DIR/<label>/ (or in DIR itself) and print the side-by-side table and\n"
                        "the verdict.",
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

    report_run *runs = calloc(REPORT_MAX_RUNS, sizeof *runs);
    if (!runs) {
        fprintf(stderr, "stallscope report: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    int n_runs = 0, status = CLI_EXIT_OK;
    json_t *comparison = NULL;
    if (find_runs(root, runs, &n_runs, err) != 0) {
        status = cli_usage_error("report", err);
        goto done;
    }
    int baseline = -1, interference = -1;
    for (int i = 0; i < n_runs; i++) {
        load_config(&runs[i]);
        if (tokenlog_read_dir(&runs[i].log, runs[i].dir, err) != 0) {
            status = cli_usage_error("report", err);
            goto done;
        }
        if (strcmp(runs[i].label, "baseline") == 0 && baseline < 0)
            baseline = i;
        else if (strcmp(runs[i].label, "interference") == 0 && interference < 0)
            interference = i;
    }

    /* The baseline first: its p50 sets every other run's stall threshold, so a stall
     * means the same thing in every column. */
    double reference_p50 = 0;
    if (baseline >= 0) {
        if (summarize_run(&runs[baseline], &cfg, 0, err) != 0)
            goto fail;
        reference_p50 = runs[baseline].summary.itl_ms.p50;
    }
    for (int i = 0; i < n_runs; i++)
        if (i != baseline && summarize_run(&runs[i], &cfg, reference_p50, err) != 0)
            goto fail;
    for (int i = 0; i < n_runs; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/summary.json", runs[i].dir);
        json_t *j = analysis_summary_to_json(&runs[i].summary);
        int rc = write_json(j, path, err);
        json_decref(j);
        if (rc != 0)
            goto fail;
    }
    if (baseline >= 0 && interference >= 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/comparison.json", root);
        comparison = analysis_comparison_to_json(&runs[baseline].summary,
                                                 &runs[interference].summary);
        if (write_json(comparison, path, err) != 0)
            goto fail;
    }

    const analysis_summary *base = baseline >= 0 ? &runs[baseline].summary : NULL;
    if (cfg.json) {
        if (comparison) {
            print_json(comparison);
        } else if (n_runs == 1) {
            json_t *j = analysis_summary_to_json(&runs[0].summary);
            print_json(j);
            json_decref(j);
        } else {
            /* Several runs without a baseline/interference pair (a sweep): by label. */
            json_t *all = json_object();
            for (int i = 0; i < n_runs; i++)
                json_object_set_new(all, runs[i].label,
                                    analysis_summary_to_json(&runs[i].summary));
            print_json(all);
            json_decref(all);
        }
        goto done;
    }
    int printed = 0;
    char verdict[1024];
    for (int i = 0; i < n_runs; i++) {
        if (i == baseline && n_runs > 1)
            continue;
        const analysis_summary *b = i == baseline ? NULL : base;
        if (printed++)
            fputc('\n', stdout);
        report_table_print(stdout, b, &runs[i].summary);
        report_verdict(verdict, sizeof verdict, b, &runs[i].summary);
        printf("\n%s\n", verdict);
    }
    if (comparison)
        printf("\nwrote %s/comparison.json and summary.json in each run directory\n", root);
    goto done;

fail:
    fprintf(stderr, "stallscope report: %s\n", err);
    status = CLI_EXIT_FAIL;
done:
    json_decref(comparison);
    for (int i = 0; i < n_runs; i++) {
        tokenlog_free(&runs[i].log);
        analysis_summary_free(&runs[i].summary);
    }
    free(runs);
    return status;
}
