/* sweep — the experiment over one or two varied parameters. Each point is the base
 * configuration with the point's values applied through the same option tables as the
 * command line (a value means what it means in `run` and `sim`), resolved, and run as a
 * whole pair (experiment_run_pair) in OUT/point-k/ with the sweep's runner. A --target's
 * server can be started and stopped per point (--server-cmd), its /health awaited. */
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/fsio.h"
#include "common/proc.h"
#include "common/redact.h"
#include "experiment/config.h"
#include "experiment/config_json.h"
#include "experiment/options.h"
#include "experiment/pair.h"
#include "experiment/runner.h"
#include "experiment/server_cmd.h"
#include "experiment/server_flags.h"
#include "experiment/sweep.h"

/* The options that may vary, and whether the server (not the client) must apply them. */
static const struct {
    const char *name;
    bool server_side;
} SWEEPABLE[] = {
    {"prompt-tokens", false},  {"inject-every", false},          {"users", false},
    {"policy", true},          {"max-num-batched-tokens", true}, {"step-overhead", true},
    {"request-rate", false},   {"max-concurrency", false},       {"burstiness", false},
    {"num-prompts", false},    {"prefix-caching", true},
};
#define N_SWEEPABLE ((int)(sizeof SWEEPABLE / sizeof SWEEPABLE[0]))

bool experiment_axis_known(const char *name, size_t len, bool *server_side)
{
    for (int i = 0; i < N_SWEEPABLE; i++)
        if (strlen(SWEEPABLE[i].name) == len && strncmp(SWEEPABLE[i].name, name, len) == 0) {
            if (server_side)
                *server_side = SWEEPABLE[i].server_side;
            return true;
        }
    return false;
}

void experiment_axes_names(char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_SWEEPABLE && len < size; i++) {
        int n = snprintf(buf + len, size - len, "%s--%s", i == 0 ? "" : i == N_SWEEPABLE - 1 ? " and " : ", ",
                         SWEEPABLE[i].name);
        if (n < 0)
            break;
        len += (size_t)n;
    }
}

static int split_values(experiment_axis *ax, const char *value, char *err)
{
    for (const char *p = value; *p;) {
        size_t n = strcspn(p, ",");
        if (n == 0 || n >= sizeof ax->values[0])
            return err_set(err, "--%s: empty or too long value in '%s'", ax->name, value);
        if (ax->n_values == EXPERIMENT_SWEEP_MAX_VALUES)
            return err_set(err, "--%s: at most %d values", ax->name, EXPERIMENT_SWEEP_MAX_VALUES);
        snprintf(ax->values[ax->n_values++], sizeof ax->values[0], "%.*s", (int)n, p);
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
}

int experiment_axes_from_argv(int argc, char **argv, experiment_axis *axes, int *n_axes,
                              char **rest, int *n_rest, char *err)
{
    *n_axes = *n_rest = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            rest[(*n_rest)++] = argv[i];
            continue;
        }
        const char *name = a + 2, *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        bool server_side = false;
        const char *value = eq ? eq + 1 : i + 1 < argc ? argv[i + 1] : NULL;
        if (!experiment_axis_known(name, len, &server_side) || !value || !strchr(value, ',')) {
            rest[(*n_rest)++] = argv[i];
            continue;
        }
        if (*n_axes == EXPERIMENT_SWEEP_MAX_AXES)
            return err_set(err, "at most %d parameters vary at once (--%.*s is a third)",
                           EXPERIMENT_SWEEP_MAX_AXES, (int)len, name);
        experiment_axis *ax = &axes[(*n_axes)++];
        memset(ax, 0, sizeof *ax);
        snprintf(ax->name, sizeof ax->name, "%.*s", (int)len, name);
        ax->server_side = server_side;
        for (int j = 0; j < *n_axes - 1; j++)
            if (strcmp(axes[j].name, ax->name) == 0)
                return err_set(err, "--%s is given twice", ax->name);
        if (split_values(ax, value, err) != 0)
            return -1;
        if (!eq)
            i++;
    }
    return 0;
}

/* The configuration's option tables, for applying "--name=value" to it. */
static int apply_value(experiment_config *cfg, const char *name, const char *value, char *err)
{
    opts_group groups[] = {experiment_workload_group(cfg), experiment_device_group(cfg),
                           experiment_sched_group(cfg)};
    return opts_apply(groups, OPTS_COUNT(groups), name, value, err);
}

int experiment_sweep_point_config(const experiment_sweep *sw, const experiment_sweep_point *pt,
                                  experiment_config *cfg, char *err)
{
    *cfg = sw->base;
    for (int a = 0; a < sw->n_axes; a++)
        if (apply_value(cfg, sw->axes[a].name, sw->axes[a].values[pt->index[a]], err) != 0)
            return -1;
    return experiment_resolve(cfg, err);
}

void experiment_sweep_point_desc(const experiment_sweep *sw, const experiment_sweep_point *pt,
                                 char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int a = 0; a < sw->n_axes && len < size; a++) {
        int n = snprintf(buf + len, size - len, "%s%s=%s", a ? " " : "", sw->axes[a].name,
                         sw->axes[a].values[pt->index[a]]);
        if (n < 0)
            break;
        len += (size_t)n;
    }
}

/* --rate-search K: the request-rate axis, every value "max" until the first point has run
 * (fill_rate_search). It varies alone. */
static int rate_search_axis(experiment_sweep *sw, char *err)
{
    if (sw->rate_search >= EXPERIMENT_SWEEP_MAX_VALUES)
        return err_set(err, "--rate-search: at most %d rates after the throughput point",
                       EXPERIMENT_SWEEP_MAX_VALUES - 1);
    if (sw->n_axes > 0)
        return err_set(err, "--rate-search varies --request-rate alone (--%s is a list too)",
                       sw->axes[0].name);
    experiment_axis *ax = &sw->axes[sw->n_axes++];
    memset(ax, 0, sizeof *ax);
    snprintf(ax->name, sizeof ax->name, "request-rate");
    for (ax->n_values = 0; ax->n_values <= sw->rate_search; ax->n_values++)
        snprintf(ax->values[ax->n_values], sizeof ax->values[0], "max");
    return 0;
}

/* After the throughput point: the K rates up to the throughput it reached, or, when it
 * failed or completed nothing, the other points refused with the reason. */
static void fill_rate_search(experiment_sweep *sw)
{
    const experiment_sweep_point *top = &sw->points[0];
    const double r = top->request_throughput;
    experiment_axis *ax = &sw->axes[0];
    for (int k = 1; k < sw->n_points; k++) {
        experiment_sweep_point *pt = &sw->points[k];
        if (strcmp(top->status, "ok") != 0 || !(r > 0)) {
            snprintf(pt->status, sizeof pt->status, "refused");
            snprintf(pt->reason, sizeof pt->reason, "--rate-search: the throughput point (%s) %s",
                     top->label, strcmp(top->status, "ok") != 0 ? top->status : "completed nothing");
            continue;
        }
        snprintf(ax->values[pt->index[0]], sizeof ax->values[0], "%.4g",
                 r * pt->index[0] / sw->rate_search);
    }
}

int experiment_sweep_plan(experiment_sweep *sw, char *err)
{
    sw->n_points = 0;
    if (sw->rate_search > 0 && rate_search_axis(sw, err) != 0)
        return -1;
    if (sw->n_axes == 0)
        return err_set(err, "nothing varies: give one or two of the sweepable flags a comma list "
                            "(e.g. --prompt-tokens 4k,8k,16k; 'stallscope sweep --help' lists "
                            "them), or --rate-search K");
    if (sw->zip && sw->n_axes != 2)
        return err_set(err, "--zip pairs two varied parameters; only one varies");
    /* Every value through its own option's parser before anything runs. */
    for (int a = 0; a < sw->n_axes; a++)
        for (int v = 0; v < sw->axes[a].n_values; v++) {
            experiment_config probe = sw->base;
            if (apply_value(&probe, sw->axes[a].name, sw->axes[a].values[v], err) != 0)
                return -1;
        }
    const experiment_axis *ax = sw->axes;
    if (sw->n_axes == 2 && sw->zip) {
        if (ax[0].n_values != ax[1].n_values)
            return err_set(err, "--zip needs lists of one length (--%s has %d, --%s %d)",
                           ax[0].name, ax[0].n_values, ax[1].name, ax[1].n_values);
        for (int i = 0; i < ax[0].n_values; i++)
            sw->points[sw->n_points++] = (experiment_sweep_point){.index = {i, i}};
    } else {
        int n1 = sw->n_axes == 2 ? ax[1].n_values : 1;
        if (ax[0].n_values * n1 > EXPERIMENT_SWEEP_MAX_POINTS)
            return err_set(err, "%d points: at most %d", ax[0].n_values * n1,
                           EXPERIMENT_SWEEP_MAX_POINTS);
        /* The first axis varies fastest: consecutive points walk along it, which is the
         * line the table's "step" column and the plots follow. */
        for (int j = 0; j < n1; j++)
            for (int i = 0; i < ax[0].n_values; i++)
                sw->points[sw->n_points++] = (experiment_sweep_point){.index = {i, j}};
    }
    for (int k = 0; k < sw->n_points; k++) {
        experiment_sweep_point *pt = &sw->points[k];
        snprintf(pt->label, sizeof pt->label, "point-%d", k + 1);
        snprintf(pt->status, sizeof pt->status, "ok");
        experiment_config cfg;
        if (experiment_sweep_point_config(sw, pt, &cfg, err) != 0)
            return -1;
        /* mixed with a budget under the prompt, say: a point that cannot run, not an error. */
        char why[ERR_LEN];
        if (experiment_check(&cfg, why) != 0) {
            snprintf(pt->status, sizeof pt->status, "refused");
            snprintf(pt->reason, sizeof pt->reason, "%s", why);
        }
    }
    return 0;
}

/* ---- a --target's server per point -------------------------------------------------------- */

static int start_server(const experiment_sweep *sw, const experiment_config *cfg,
                        const experiment_sweep_point *pt, const char *dir,
                        const volatile sig_atomic_t *interrupted, proc *server, char *err)
{
    char log_path[4200];
    if (fsio_join(log_path, sizeof log_path, dir, "server.log", err) != 0)
        return -1;
    return experiment_server_start(sw->server_cmd, cfg, pt->label, log_path,
                                   sw->server_timeout_ns, interrupted, server, err);
}

/* ---- running ------------------------------------------------------------------------------- */

static int run_point(experiment_sweep *sw, experiment_sweep_point *pt,
                     const experiment_runner *runner, const experiment_io *io, char *err)
{
    char dir[4096], log_path[4200];
    if (fsio_join(dir, sizeof dir, io->out_dir, pt->label, err) != 0 || fsio_mkdirs(dir, err) != 0 ||
        fsio_join(log_path, sizeof log_path, dir, "run.log", err) != 0)
        return -1;
    experiment_config cfg;
    if (experiment_sweep_point_config(sw, pt, &cfg, err) != 0)
        return -1;
    proc server;
    memset(&server, 0, sizeof server);
    if (sw->server_cmd[0] && start_server(sw, &cfg, pt, dir, io->interrupted, &server, err) != 0)
        return -1;
    /* Each point's runs talk into its own log, as a `run` of their own would. */
    FILE *log = fopen(log_path, "w");
    experiment_io point_io = *io;
    point_io.out_dir = dir;
    point_io.notes = log;
    point_io.quiet = false;
    experiment_pair pair;
    int rc = experiment_run_pair(&cfg, runner, &point_io, &pair, err);
    if (rc == 0 && !pair.complete)
        rc = err_set(err, "%s", pair.why);
    if (rc == 0) {
        const analysis_summary *x = &pair.interference;
        snprintf(pt->summary, sizeof pt->summary,
                 "max gap %.1f ms, p99.9 %.2f ms, p99 %.2f ms, %lld stalls", x->itl_ms.max,
                 x->itl_ms.p999, x->itl_ms.p99, (long long)x->stalls.count);
        pt->request_throughput = x->standard.background.request_throughput;
    }
    if (log) {
        if (rc != 0)
            fprintf(log, "stallscope sweep: %s\n", err);
        fclose(log);
    }
    experiment_pair_free(&pair);
    experiment_server_stop(&server);
    return rc;
}

static int write_plan(const experiment_sweep *sw, const experiment_runner *runner,
                      const experiment_io *io, char *err)
{
    json_t *root = json_object();
    json_object_set_new(root, "mode", json_string(strcmp(runner->name, "sim") == 0 ? "sim" : "run"));
    json_object_set_new(root, "engine", json_string(experiment_engine_label(sw->base.engine)));
    char target[1024];
    redact_url(sw->base.client.target, target, sizeof target);
    json_object_set_new(root, "target", json_string(target));
    json_t *axes = json_array(), *args = json_array(), *points = json_array();
    for (int a = 0; a < sw->n_axes; a++)
        json_array_append_new(axes, json_string(sw->axes[a].name));
    experiment_meta masked;
    memset(&masked, 0, sizeof masked);
    if (experiment_meta_set_argv(&masked, io->argc, io->argv) == 0)
        for (int i = 0; i < masked.argc; i++)
            json_array_append_new(args, json_string(masked.argv[i]));
    experiment_meta_free(&masked);
    for (int k = 0; k < sw->n_points; k++) {
        const experiment_sweep_point *pt = &sw->points[k];
        json_t *p = json_object(), *values = json_array();
        json_object_set_new(p, "label", json_string(pt->label));
        for (int a = 0; a < sw->n_axes; a++)
            json_array_append_new(values, json_string(sw->axes[a].values[pt->index[a]]));
        json_object_set_new(p, "values", values);
        json_object_set_new(p, "status", json_string(pt->status));
        json_object_set_new(p, "reason", json_string(pt->reason));
        json_array_append_new(points, p);
    }
    json_object_set_new(root, "axes", axes);
    json_object_set_new(root, "argv", args);
    json_object_set_new(root, "points", points);
    char path[4200];
    int rc = fsio_join(path, sizeof path, io->out_dir, "sweep.json", err);
    if (rc == 0)
        rc = fsio_write_json(path, root, JSON_INDENT(2), err);
    json_decref(root);
    return rc;
}

int experiment_sweep_run(experiment_sweep *sw, const experiment_runner *runner,
                         const experiment_io *io, char *err)
{
    if (!io->out_dir)
        return err_set(err, "a sweep writes its points to a directory");
    if (fsio_mkdirs(io->out_dir, err) != 0)
        return -1;
    int failed = 0;
    for (int k = 0; k < sw->n_points; k++) {
        experiment_sweep_point *pt = &sw->points[k];
        char desc[256], why[ERR_LEN] = "";
        experiment_sweep_point_desc(sw, pt, desc, sizeof desc);
        int64_t t0 = clock_now_ns();
        if (strcmp(pt->status, "refused") != 0 && run_point(sw, pt, runner, io, why) != 0) {
            snprintf(pt->status, sizeof pt->status, "failed");
            snprintf(pt->reason, sizeof pt->reason, "%s", why);
            failed++;
        }
        bool ok = strcmp(pt->status, "ok") == 0;
        if (io->notes)
            fprintf(io->notes, "[%s %s] %s%s%s (%.1f s)\n", pt->label, desc, pt->status,
                    !ok || pt->summary[0] ? ": " : "", ok ? pt->summary : pt->reason,
                    (double)(clock_now_ns() - t0) / 1e9);
        if (k == 0 && sw->rate_search > 0) {
            fill_rate_search(sw);
            if (io->notes && ok)
                fprintf(io->notes, "--rate-search: %.4g requests/s at most; the %d rates up to it: "
                                   "%s .. %s\n",
                        pt->request_throughput, sw->rate_search, sw->axes[0].values[1],
                        sw->axes[0].values[sw->rate_search]);
        }
        if (io->interrupted && *io->interrupted)
            break;
    }
    if (write_plan(sw, runner, io, err) != 0)
        return -1;
    return failed;
}

void experiment_sweep_print_flags(FILE *out, const experiment_sweep *sw)
{
    for (int k = 0; k < sw->n_points; k++) {
        const experiment_sweep_point *pt = &sw->points[k];
        experiment_config cfg;
        char desc[256], why[ERR_LEN];
        experiment_sweep_point_desc(sw, pt, desc, sizeof desc);
        if (experiment_sweep_point_config(sw, pt, &cfg, why) != 0) {
            fprintf(out, "%s (%s): %s\n", pt->label, desc, why);
            continue;
        }
        fprintf(out, "%s (%s):\n", pt->label, desc);
        experiment_print_server_flags(out, "  ", cfg.sched.policy, cfg.sched.max_num_batched_tokens,
                                      &cfg.wl);
    }
}
