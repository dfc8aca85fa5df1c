/* load — runs and sweeps back from disk (load.h). */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fsio.h"
#include "common/units.h"
#include "experiment/options.h"
#include "experiment/pair.h"
#include "report/load.h"

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

static int add_run(report_set *set, const char *path, char *err)
{
    if (set->n_runs == REPORT_MAX_RUNS)
        return err_set(err, "%s: more than %d run directories", set->root, REPORT_MAX_RUNS);
    if (set->n_runs == set->cap_runs) {
        int cap = set->cap_runs ? set->cap_runs * 2 : 4;
        report_run *runs = realloc(set->runs, (size_t)cap * sizeof *runs);
        if (!runs)
            return err_set(err, "out of memory");
        set->runs = runs;
        set->cap_runs = cap;
    }
    report_run *r = &set->runs[set->n_runs++];
    memset(r, 0, sizeof *r);
    tokenlog_init(&r->log);
    snprintf(r->dir, sizeof r->dir, "%s", path);
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* dir's subdirectories for which keep(path) holds, by name, at most max (the rest counted
 * in the return value but not kept); their names into names[] (freed by the caller). */
static int child_dirs(const char *dir, bool (*keep)(const char *), char **names, int max)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[4096];
        struct stat st;
        if (e->d_name[0] == '.' ||
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path ||
            stat(path, &st) != 0 || !S_ISDIR(st.st_mode) || !keep(path))
            continue;
        if (n < max && !(names[n] = strdup(e->d_name)))
            break;
        n++;
    }
    closedir(d);
    qsort(names, (size_t)(n < max ? n : max), sizeof *names, cmp_name);
    return n;
}

/* root itself, or its subdirectories holding a token log, sorted by name. */
static int find_runs(report_set *set, const char *root, char *err)
{
    struct stat st;
    if (stat(root, &st) != 0)
        return err_set(err, "%s: %s", root, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return err_set(err, "%s: not a directory", root);
    if (is_run_dir(root))
        return add_run(set, root, err);
    if (access(root, R_OK | X_OK) != 0)
        return err_set(err, "%s: %s", root, strerror(errno));
    char *names[REPORT_MAX_RUNS];
    const int n = child_dirs(root, is_run_dir, names, REPORT_MAX_RUNS);
    int rc = n > REPORT_MAX_RUNS
                 ? err_set(err, "%s: more than %d run directories", root, REPORT_MAX_RUNS)
                 : 0;
    for (int i = 0; i < n && i < REPORT_MAX_RUNS; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", root, names[i]);
        if (rc == 0)
            rc = add_run(set, path, err);
        free(names[i]);
    }
    if (rc == 0 && set->n_runs == 0)
        return err_set(err, "%s: no token log here (expected tokens.csv and requests.csv in it "
                            "or in its run directories, e.g. %s/baseline)",
                       root, root);
    return rc;
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

/* config.json is advisory: without it (or with one this version cannot read) the run is
 * still reported from its data (analysis derives users and duration from the log). */
static void load_config(report_run *r, FILE *warn)
{
    base_name(r->dir, r->label, sizeof r->label);
    r->engine[0] = r->target[0] = '\0';
    memset(&r->opt, 0, sizeof r->opt);
    r->opt.complete = true;

    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", r->dir);
    if (!has_file(r->dir, "config.json")) {
        snprintf(r->config_why, sizeof r->config_why, "no config.json beside the token log");
        return;
    }
    char why[ERR_LEN];
    r->json = fsio_read_json(path, 0, why);
    if (r->json && experiment_config_from_json(r->json, &r->cfg, &r->meta, why) == 0)
        r->has_config = true;
    if (!r->has_config) {
        snprintf(r->config_why, sizeof r->config_why, "%s", why);
        if (warn)
            fprintf(warn, "stallscope report: warning: %s (using the data's values)\n", why);
        return;
    }
    if (r->meta.label[0])
        snprintf(r->label, sizeof r->label, "%s", r->meta.label);
    snprintf(r->engine, sizeof r->engine, "%s", r->meta.engine_name);
    snprintf(r->target, sizeof r->target, "%s", r->meta.target);
    r->opt.duration_s = (double)r->cfg.wl.duration_ns / 1e9;
    /* A shard drove its share of the users; a merged run those of the shards it holds. */
    r->opt.users = r->meta.merge.shards > 0 ? r->meta.merge.users
                                            : workload_analysis_users(&r->cfg.wl);
    r->opt.users_are_streams = workload_open_loop(&r->cfg.wl);
    r->opt.shard = r->cfg.wl.shard.index; /* a merged run's config has no shard */
    r->opt.shards = r->cfg.wl.shard.count;
    r->opt.complete = r->meta.complete;
    r->opt.protocol_violations = r->meta.protocol_violations;
    r->opt.gpus = experiment_gpus(&r->cfg);
    experiment_meta_stamps(&r->meta, &r->opt);
    experiment_standard_options(&r->cfg, &r->standard);
}

/* The summary with every injection's wait widened (grow) or shrunk by margin_ns (see
 * report_run.has_bounds). A wait that shrinks to nothing is dropped (its send set to -1):
 * no stall aligns with it under every offset, so lo stays a lower bound. */
static int summarize_window(const report_run *r, int64_t margin_ns, bool grow,
                            analysis_summary *out, char *err)
{
    tokenlog moved = r->log; /* events shared, requests copied */
    size_t size = (size_t)(r->log.n_requests > 0 ? r->log.n_requests : 1) * sizeof *moved.requests;
    if (!(moved.requests = malloc(size)))
        return err_set(err, "%s: out of memory", r->dir);
    memcpy(moved.requests, r->log.requests, (size_t)r->log.n_requests * sizeof *moved.requests);
    for (int64_t i = 0; i < moved.n_requests; i++) {
        tokenlog_request *q = &moved.requests[i];
        if (q->kind != TOKENLOG_INJECT || q->t_send_ns < 0)
            continue;
        int64_t *end = q->t_first_ns >= 0 ? &q->t_first_ns : q->t_end_ns >= 0 ? &q->t_end_ns : NULL;
        if (grow) {
            q->t_send_ns = q->t_send_ns > margin_ns ? q->t_send_ns - margin_ns : 0;
            if (end)
                *end += margin_ns;
        } else {
            q->t_send_ns += margin_ns;
            if (end && (*end -= margin_ns) < q->t_send_ns)
                q->t_send_ns = -1;
        }
    }
    analysis_options opt = r->opt;
    opt.threshold_ms = r->summary.stalls.threshold_ms; /* the run's own threshold, as is */
    char why[ERR_LEN];
    int rc = analysis_summarize(&moved, &opt, out, why);
    free(moved.requests);
    return rc == 0 ? 0 : err_set(err, "%s: %s", r->dir, why);
}

/* An optional artifact: absent, the report has no such section; unreadable, a warning. */
static void load_server_metrics(report_run *r, FILE *warn)
{
    char path[4200], why[ERR_LEN];
    if (fsio_join(path, sizeof path, r->dir, "server_metrics.csv", why) != 0 ||
        access(path, F_OK) != 0)
        return;
    if (scrape_csv_read(path, &r->server_metrics, why) == 0) {
        r->has_server_metrics = true;
        return;
    }
    scrape_series_free(&r->server_metrics);
    if (warn)
        fprintf(warn, "stallscope report: warning: %s; the report leaves it out\n", why);
}

/* A tokens.csv too large to hold: the analysis streams the run's files (analysis.h). */
static int summarize_streamed(report_run *r, FILE *warn, char *err)
{
    char why[ERR_LEN];
    int64_t cut = 0;
    if (analysis_summarize_files(r->dir, &r->opt, &r->summary, &cut, why) != 0)
        return err_set(err, "%s: %s", r->dir, why);
    if (cut > 0) {
        r->opt.complete = false;
        if (warn)
            fprintf(warn, "stallscope report: warning: %s: dropped %lld row%s cut short at the end "
                          "of its CSVs (a run killed while writing); reported as incomplete\n",
                    r->dir, (long long)cut, cut == 1 ? "" : "s");
    }
    r->summarized = r->no_tokens = true;
    return 0;
}

static int summarize(report_run *r, double threshold_ms, double reference_p50_ms, bool keep_log,
                     FILE *warn, char *err)
{
    if (r->summarized)
        return 0; /* handed over by the run pair (report_given) */
    r->opt.label = r->label;
    r->opt.standard = &r->standard; /* here: runs move (sorted, grown) while the set loads */
    r->opt.engine = r->engine;
    r->opt.target = r->target;
    /* No threshold given: the one the run was made with (run --stall-threshold, kept in its
     * config.json and in a merge's), else the default rule, as the run itself counted. */
    if (threshold_ms <= 0 && r->has_config && r->cfg.stall_threshold_ns > 0)
        threshold_ms = (double)r->cfg.stall_threshold_ns / 1e6;
    r->opt.threshold_ms = threshold_ms;
    r->opt.reference_p50_ms = reference_p50_ms;
    if (r->stream_tokens)
        return summarize_streamed(r, warn, err);
    char why[ERR_LEN];
    if (analysis_summarize(&r->log, &r->opt, &r->summary, why) != 0)
        return err_set(err, "%s: %s", r->dir, why);
    r->summarized = true;
    int64_t margin = r->meta.merge.clock_uncertainty_ns;
    if (r->has_config && r->meta.merge.shards > 0 && margin > 0 && r->summary.n_injections > 0) {
        if (summarize_window(r, margin, false, &r->bound_lo, err) != 0)
            return -1;
        if (summarize_window(r, margin, true, &r->bound_hi, err) != 0) {
            analysis_summary_free(&r->bound_lo);
            return -1;
        }
        r->has_bounds = true;
    }
    if (!keep_log) {
        tokenlog_free(&r->log);
        tokenlog_init(&r->log);
    }
    return 0;
}

/* Bytes of DIR/tokens.csv, -1 when absent. */
static int64_t tokens_size(const char *dir)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/tokens.csv", dir);
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* The run a pair reports: the interference run, or --no-inject's traffic run. */
static bool is_main_label(const char *label)
{
    return strcmp(label, EXPERIMENT_RUN_INTERFERENCE) == 0 ||
           strcmp(label, EXPERIMENT_RUN_TRAFFIC) == 0;
}

/* The summary a run pair handed over for this run, when its tokens.csv was not kept. */
static const analysis_summary *given_summary(const report_run *r, const report_given *given)
{
    if (!given || has_file(r->dir, "tokens.csv"))
        return NULL;
    return strcmp(r->label, EXPERIMENT_RUN_BASELINE) == 0 ? given->baseline
           : is_main_label(r->label)                     ? given->interference
                                                          : NULL;
}

/* A run without tokens.csv whose summary.json says the file was not kept: say why the
 * report cannot be rebuilt from the files, instead of "No such file". */
static int explain_missing_tokens(const report_run *r, char *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/summary.json", r->dir);
    json_t *j = has_file(r->dir, "summary.json") ? json_load_file(path, 0, NULL) : NULL;
    json_t *t = j ? json_object_get(j, "tokens_csv") : NULL;
    bool dropped = t && json_is_false(json_object_get(t, "written"));
    long long max = t ? (long long)json_integer_value(json_object_get(t, "max_events")) : 0;
    json_decref(j);
    if (!dropped)
        return 0;
    return err_set(err, "%s: tokens.csv was not kept (the run had more than %lld token events: "
                        "--tokens-csv-max); its summary.json and report were written by the run "
                        "itself, and rebuilding them needs the events: run it again with a larger "
                        "--tokens-csv-max",
                   r->dir, max);
}

int report_set_load(report_set *set, const char *root, double threshold_ms, bool keep_logs,
                  FILE *warn, char *err)
{
    return report_set_load_given(set, root, threshold_ms, keep_logs, NULL, warn, err);
}

int report_set_load_given(report_set *set, const char *root, double threshold_ms,
                          bool keep_logs, const report_given *given, FILE *warn, char *err)
{
    memset(set, 0, sizeof *set);
    set->baseline = set->interference = -1;
    snprintf(set->root, sizeof set->root, "%s", root);
    if (find_runs(set, root, err) != 0)
        return -1;
    for (int i = 0; i < set->n_runs; i++) {
        report_run *r = &set->runs[i];
        load_config(r, warn);
        int64_t cut = 0;
        const analysis_summary *g = given_summary(r, given);
        if (g) {
            if (tokenlog_read_dir_rows(&r->log, r->dir, &cut, err) != 0)
                return -1;
            if (analysis_summary_copy(&r->summary, g) != 0)
                return err_set(err, "out of memory");
            r->summarized = r->no_tokens = true;
        } else if (!has_file(r->dir, "tokens.csv") && explain_missing_tokens(r, err) != 0) {
            return -1;
        } else if (tokens_size(r->dir) > (given && given->stream_tokens_bytes > 0
                                              ? given->stream_tokens_bytes
                                              : REPORT_STREAM_TOKENS_BYTES)) {
            if (tokenlog_read_dir_rows(&r->log, r->dir, &cut, err) != 0)
                return -1;
            r->stream_tokens = true;
        } else if (tokenlog_read_dir(&r->log, r->dir, &cut, err) != 0) {
            return -1;
        }
        if (cut > 0) {
            /* A run killed while writing: what came before is good data, the run is not whole. */
            r->opt.complete = false;
            if (warn)
                fprintf(warn, "stallscope report: warning: %s: dropped %lld row%s cut short at the "
                              "end of its CSVs (a run killed while writing); reported as "
                              "incomplete\n",
                        r->dir, (long long)cut, cut == 1 ? "" : "s");
        }
        load_server_metrics(r, warn);
        if (strcmp(r->label, EXPERIMENT_RUN_BASELINE) == 0 && set->baseline < 0)
            set->baseline = i;
        else if (is_main_label(r->label) && set->interference < 0)
            set->interference = i;
    }
    /* Two experiments in one directory (an earlier run's baseline beside a newer
     * interference run) are never compared: name what differs. */
    if (set->baseline >= 0 && set->interference >= 0) {
        const report_run *b = &set->runs[set->baseline], *x = &set->runs[set->interference];
        char field[200];
        if (b->has_config && x->has_config && experiment_config_differ(&b->cfg, &x->cfg, field, sizeof field))
            return err_set(err, "%s: baseline and interference are not one experiment: they "
                                "differ in %s",
                           root, field);
    }
    double reference_p50 = 0;
    if (set->baseline >= 0) {
        if (summarize(&set->runs[set->baseline], threshold_ms, 0, keep_logs, warn, err) != 0)
            return -1;
        reference_p50 = set->runs[set->baseline].summary.itl_ms.p50;
    }
    for (int i = 0; i < set->n_runs; i++)
        if (i != set->baseline &&
            summarize(&set->runs[i], threshold_ms, reference_p50, keep_logs, warn, err) != 0)
            return -1;
    return 0;
}

void report_set_free(report_set *set)
{
    for (int i = 0; i < set->n_runs; i++) {
        report_run *r = &set->runs[i];
        tokenlog_free(&r->log);
        if (r->summarized)
            analysis_summary_free(&r->summary);
        if (r->has_bounds) {
            analysis_summary_free(&r->bound_lo);
            analysis_summary_free(&r->bound_hi);
        }
        json_decref(r->json);
        experiment_meta_free(&r->meta);
        scrape_series_free(&r->server_metrics);
    }
    free(set->runs);
    set->runs = NULL;
    set->n_runs = set->cap_runs = 0;
}

const report_run *report_set_main(const report_set *set)
{
    if (set->interference >= 0)
        return &set->runs[set->interference];
    const report_run *only = NULL;
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

const report_run *report_set_baseline(const report_set *set)
{
    const report_run *x = report_set_main(set);
    if (set->baseline < 0)
        return NULL;
    const report_run *b = &set->runs[set->baseline];
    return b == x ? NULL : b;
}

/* ---- sweeps ------------------------------------------------------------------------------ */

bool report_is_sweep(const char *dir)
{
    return has_file(dir, "sweep.json");
}

static bool is_point_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    return strncmp(slash ? slash + 1 : path, "point-", 6) == 0;
}

static bool reportable(const char *path)
{
    char kind[8];
    return report_dir_kind(path, kind, sizeof kind);
}

int report_dir_children(const char *dir, char **names, int max)
{
    return child_dirs(dir, reportable, names, max);
}

bool report_dir_kind(const char *dir, char *kind, size_t size)
{
    char *names[REPORT_MAX_RUNS];
    kind[0] = '\0';
    if (report_is_sweep(dir)) {
        const int n = child_dirs(dir, is_point_dir, names, REPORT_MAX_RUNS);
        for (int i = 0; i < n && i < REPORT_MAX_RUNS; i++)
            free(names[i]);
        snprintf(kind, size, "sweep, %d point%s", n, n == 1 ? "" : "s");
        return true;
    }
    if (is_run_dir(dir)) {
        snprintf(kind, size, "one run");
        return true;
    }
    const int n = child_dirs(dir, is_run_dir, names, REPORT_MAX_RUNS);
    size_t len = 0;
    for (int i = 0; i < n && i < REPORT_MAX_RUNS; i++) {
        int w = snprintf(kind + len, size - len, "%s%s", i ? " + " : "", names[i]);
        if (w > 0 && (size_t)w < size - len)
            len += (size_t)w;
        free(names[i]);
    }
    return n > 0;
}

const report_run *report_sweep_point_main(const report_sweep_point *pt)
{
    return pt->loaded ? report_set_main(&pt->set) : NULL;
}

/* What the point ran with: its configuration, else the values it was given. */
static void point_params(const report_sweep *sw, report_sweep_point *pt)
{
    const report_run *x = report_sweep_point_main(pt);
    if (x && x->has_config) {
        pt->prompt_tokens = x->cfg.wl.prompt_tokens;
        pt->budget = x->cfg.sched.max_num_batched_tokens;
        pt->fig.model_spike_ms = experiment_model_spike_ms(&x->cfg, x->cfg.wl.prompt_tokens);
    }
    for (int a = 0; a < sw->n_axes; a++) {
        int64_t v;
        if (strcmp(sw->axes[a], "max-num-batched-tokens") == 0 && pt->budget <= 0 &&
            units_parse_count(pt->values[a], &v, NULL) == 0)
            pt->budget = (double)v;
        if (strcmp(sw->axes[a], "prompt-tokens") == 0 && pt->prompt_tokens <= 0 &&
            units_parse_count(pt->values[a], &v, NULL) == 0)
            pt->prompt_tokens = (double)v;
    }
    size_t len = 0;
    pt->line[0] = '\0';
    for (int a = 1; a < sw->n_axes && len < sizeof pt->line; a++)
        len += (size_t)snprintf(pt->line + len, sizeof pt->line - len, "%s%s", a > 1 ? "," : "",
                                pt->values[a]);
}

static void read_point(report_sweep_point *pt, const json_t *p, int n_axes)
{
    const char *label = json_string_value(json_object_get(p, "label"));
    const char *status = json_string_value(json_object_get(p, "status"));
    const char *reason = json_string_value(json_object_get(p, "reason"));
    snprintf(pt->label, sizeof pt->label, "%s", label ? label : "?");
    snprintf(pt->status, sizeof pt->status, "%s", status ? status : "ok");
    snprintf(pt->reason, sizeof pt->reason, "%s", reason ? reason : "");
    json_t *values = json_object_get(p, "values");
    for (int a = 0; a < n_axes; a++) {
        const char *v = json_string_value(json_array_get(values, (size_t)a));
        snprintf(pt->values[a], sizeof pt->values[a], "%s", v ? v : "?");
    }
}

int report_sweep_load(report_sweep *sw, const char *dir, double threshold_ms, FILE *warn,
                      char *err)
{
    memset(sw, 0, sizeof *sw);
    snprintf(sw->dir, sizeof sw->dir, "%s", dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/sweep.json", dir);
    sw->json = fsio_read_json(path, 0, err);
    if (!sw->json)
        return -1;
    json_t *axes = json_object_get(sw->json, "axes"), *points = json_object_get(sw->json, "points");
    if (!json_is_array(axes) || !json_is_array(points) || json_array_size(axes) == 0 ||
        json_array_size(axes) > REPORT_MAX_AXES)
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
    analysis_sweep_point *figs = calloc(n > 0 ? n : 1, sizeof *figs);
    if (!sw->points || !figs) {
        free(figs);
        return err_set(err, "out of memory");
    }
    sw->n_points = (int)n;
    for (size_t i = 0; i < n; i++) {
        report_sweep_point *pt = &sw->points[i];
        read_point(pt, json_array_get(points, i), sw->n_axes);
        snprintf(pt->dir, sizeof pt->dir, "%s/%s", dir, pt->label);
        if (strcmp(pt->status, "ok") == 0) {
            char why[ERR_LEN];
            if (report_set_load(&pt->set, pt->dir, threshold_ms, false, warn, why) != 0) {
                snprintf(pt->status, sizeof pt->status, "failed");
                snprintf(pt->reason, sizeof pt->reason, "%s", why);
                report_set_free(&pt->set);
            } else {
                pt->loaded = true;
            }
        }
        point_params(sw, pt);
        const report_run *x = report_sweep_point_main(pt);
        const report_run *b = pt->loaded ? report_set_baseline(&pt->set) : NULL;
        pt->fig.x = x ? &x->summary : NULL;
        pt->fig.b = b ? &b->summary : NULL;
        pt->fig.line = pt->line;
        figs[i] = pt->fig;
    }
    /* The figures depend on the points before each: computed over the whole list. */
    analysis_sweep(figs, sw->n_points);
    for (int i = 0; i < sw->n_points; i++)
        sw->points[i].fig = figs[i];
    free(figs);
    return 0;
}

void report_sweep_free(report_sweep *sw)
{
    for (int i = 0; i < sw->n_points; i++)
        if (sw->points[i].loaded)
            report_set_free(&sw->points[i].set);
    free(sw->points);
    json_decref(sw->json);
    memset(sw, 0, sizeof *sw);
}
