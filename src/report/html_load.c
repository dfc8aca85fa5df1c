/* html_load — a directory of runs back into memory: token logs, config.json, and the
 * summaries recomputed by the one analysis (the baseline first: its p50 sets the stall
 * threshold of every run, so a stall means the same thing in every column). */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "common/units.h"
#include "report/html.h"

static bool has_file(const char *dir, const char *name)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool is_run_dir(const char *dir)
{
    return has_file(dir, "tokens.csv") || has_file(dir, "requests.csv");
}

static int cmp_run_dir(const void *a, const void *b)
{
    return strcmp(((const html_run *)a)->dir, ((const html_run *)b)->dir);
}

static int add_run(html_set *set, const char *path, char *err)
{
    if (set->n_runs == HTML_MAX_RUNS)
        return err_set(err, "%s: more than %d run directories", set->root, HTML_MAX_RUNS);
    if (set->n_runs == set->cap_runs) {
        int cap = set->cap_runs ? set->cap_runs * 2 : 4;
        html_run *runs = realloc(set->runs, (size_t)cap * sizeof *runs);
        if (!runs)
            return err_set(err, "out of memory");
        set->runs = runs;
        set->cap_runs = cap;
    }
    html_run *r = &set->runs[set->n_runs++];
    memset(r, 0, sizeof *r);
    tokenlog_init(&r->log);
    snprintf(r->dir, sizeof r->dir, "%s", path);
    return 0;
}

/* root itself, or its subdirectories holding a token log, sorted by name. */
static int find_runs(html_set *set, const char *root, char *err)
{
    struct stat st;
    if (stat(root, &st) != 0)
        return err_set(err, "%s: %s", root, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return err_set(err, "%s: not a directory", root);
    if (is_run_dir(root))
        return add_run(set, root, err);
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
        if (add_run(set, path, err) != 0) {
            closedir(d);
            return -1;
        }
    }
    closedir(d);
    if (set->n_runs == 0)
        return err_set(err, "%s: no token log here (expected tokens.csv and requests.csv in it "
                            "or in its run directories, e.g. %s/baseline)",
                       root, root);
    qsort(set->runs, (size_t)set->n_runs, sizeof *set->runs, cmp_run_dir);
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

/* config.json is advisory: every key it lacks falls back to what the data says (analysis
 * derives users and duration from the log when they are 0). */
static void load_config(html_run *r, FILE *warn)
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
        if (has_file(r->dir, "config.json") && warn)
            fprintf(warn, "stallscope report: warning: %s:%d: %s (using the data's values)\n",
                    path, jerr.line, jerr.text);
        return;
    }
    if (!json_is_object(cfg)) {
        if (warn)
            fprintf(warn, "stallscope report: warning: %s: not a JSON object (ignored)\n", path);
        json_decref(cfg);
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
    r->config = cfg;
}

static int summarize(html_run *r, double threshold_ms, double reference_p50_ms, bool keep_log,
                     char *err)
{
    r->opt.label = r->label;
    r->opt.engine = r->engine;
    r->opt.target = r->target;
    r->opt.threshold_ms = threshold_ms;
    r->opt.reference_p50_ms = reference_p50_ms;
    char why[ERR_LEN];
    if (analysis_summarize(&r->log, &r->opt, &r->summary, why) != 0)
        return err_set(err, "%s: %s", r->dir, why);
    r->summarized = true;
    if (!keep_log) {
        tokenlog_free(&r->log);
        tokenlog_init(&r->log);
    }
    return 0;
}

int html_set_load(html_set *set, const char *root, double threshold_ms, bool keep_logs,
                  FILE *warn, char *err)
{
    memset(set, 0, sizeof *set);
    set->baseline = set->interference = -1;
    snprintf(set->root, sizeof set->root, "%s", root);
    if (find_runs(set, root, err) != 0)
        return -1;
    for (int i = 0; i < set->n_runs; i++) {
        html_run *r = &set->runs[i];
        load_config(r, warn);
        if (tokenlog_read_dir(&r->log, r->dir, err) != 0)
            return -1;
        if (strcmp(r->label, "baseline") == 0 && set->baseline < 0)
            set->baseline = i;
        else if (strcmp(r->label, "interference") == 0 && set->interference < 0)
            set->interference = i;
    }
    double reference_p50 = 0;
    if (set->baseline >= 0) {
        if (summarize(&set->runs[set->baseline], threshold_ms, 0, keep_logs, err) != 0)
            return -1;
        reference_p50 = set->runs[set->baseline].summary.itl_ms.p50;
    }
    for (int i = 0; i < set->n_runs; i++)
        if (i != set->baseline &&
            summarize(&set->runs[i], threshold_ms, reference_p50, keep_logs, err) != 0)
            return -1;
    return 0;
}

void html_set_free(html_set *set)
{
    for (int i = 0; i < set->n_runs; i++) {
        html_run *r = &set->runs[i];
        tokenlog_free(&r->log);
        if (r->summarized)
            analysis_summary_free(&r->summary);
        json_decref(r->config);
    }
    free(set->runs);
    set->runs = NULL;
    set->n_runs = set->cap_runs = 0;
}

const html_run *html_set_main(const html_set *set)
{
    if (set->interference >= 0)
        return &set->runs[set->interference];
    const html_run *only = NULL;
    for (int i = 0; i < set->n_runs; i++) {
        if (i == set->baseline)
            continue;
        if (only)
            return NULL; /* several candidates: none is "the" run */
        only = &set->runs[i];
    }
    if (!only && set->baseline >= 0 && set->n_runs == 1)
        return &set->runs[set->baseline];
    return only;
}
