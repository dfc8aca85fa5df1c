/* stallscope sweep — the experiment over one or two varied parameters: each of
 * --prompt-tokens, --inject-every, --policy, --max-num-batched-tokens, --users and
 * --step-overhead may take a comma list. Every point is a whole experiment (baseline +
 * interference) in OUT/point-k/:
 *
 *   --engine sim (default)   in process, virtual time: the same path as `stallscope sim`;
 *   --engine emulate | cpu   a child `stallscope run` per point on the embedded server;
 *   --target URL             a child `stallscope run --target URL` per point; server-side
 *                            parameters need --server-cmd TEMPLATE (the server is started
 *                            and stopped per point, /health awaited) or, with
 *                            --print-server-flags, the flags each point's server needs.
 *
 * Children are driven through /proc/self/exe, so the sweep depends on `run`'s command line
 * and artifacts, never on its internals. Then OUT/sweep.json, OUT/sweep.csv, one table and
 * OUT/report.html (spike vs prompt length with the cost model's line, the token-budget
 * trade-off, the tail of every point). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "cli/cli.h"
#include "cli/cli_sim.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/units.h"
#include "report/artifacts.h"
#include "report/html.h"
#include "report/plot.h"
#include "sim/sim.h"

#define SWEEP_MAX_VALUES 16
#define SWEEP_MAX_POINTS 64
#define SWEEP_MAX_ARGS 256
#define SERVER_STOP_NS (30 * CLOCK_NS_PER_S)

/* The options that may vary, and whether the server (not the client) must apply them. */
static const struct {
    const char *name;
    bool server_side;
} SWEEPABLE[] = {
    {"prompt-tokens", false},         {"inject-every", false}, {"users", false},
    {"policy", true},                 {"max-num-batched-tokens", true},
    {"step-overhead", true},
};
#define N_SWEEPABLE ((int)(sizeof SWEEPABLE / sizeof SWEEPABLE[0]))

typedef struct sweep_axis {
    char name[48];
    bool server_side;
    char values[SWEEP_MAX_VALUES][64];
    int n_values;
} sweep_axis;

typedef struct sweep_cfg {
    char engine[16]; /* sim | emulate | cpu */
    char target[512];
    char server_cmd[2048];
    int64_t server_timeout_ns;
    char out[1024];
    bool zip, json, no_report, print_flags;
} sweep_cfg;

typedef struct sweep_point {
    char label[32];
    int index[HTML_MAX_AXES]; /* value index per axis */
    char status[16];
    char reason[256];
} sweep_point;

/* ---- options ---------------------------------------------------------------------------- */

static int copy_opt(char *dst, size_t size, const char *v, char *err)
{
    if (!v[0] || strlen(v) >= size)
        return err_set(err, "'%s' is empty or too long", v);
    strcpy(dst, v);
    return 0;
}
static int o_engine(void *c, const char *v, char *err)
{
    if (strcmp(v, "sim") != 0 && strcmp(v, "emulate") != 0 && strcmp(v, "cpu") != 0)
        return err_set(err, "'%s': expected sim, emulate or cpu", v);
    return copy_opt(((sweep_cfg *)c)->engine, sizeof ((sweep_cfg *)c)->engine, v, err);
}
static int o_target(void *c, const char *v, char *err)
{
    return copy_opt(((sweep_cfg *)c)->target, sizeof ((sweep_cfg *)c)->target, v, err);
}
static int o_server_cmd(void *c, const char *v, char *err)
{
    return copy_opt(((sweep_cfg *)c)->server_cmd, sizeof ((sweep_cfg *)c)->server_cmd, v, err);
}
static int o_server_timeout(void *c, const char *v, char *err)
{
    int64_t ns;
    if (units_parse_duration_ns(v, &ns, err) != 0)
        return -1;
    if (ns <= 0)
        return err_set(err, "'%s' must be positive", v);
    ((sweep_cfg *)c)->server_timeout_ns = ns;
    return 0;
}
static int o_out(void *c, const char *v, char *err)
{
    return copy_opt(((sweep_cfg *)c)->out, sizeof ((sweep_cfg *)c)->out, v, err);
}
static int o_zip(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((sweep_cfg *)c)->zip = true;
    return 0;
}
static int o_json(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((sweep_cfg *)c)->json = true;
    return 0;
}
static int o_no_report(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((sweep_cfg *)c)->no_report = true;
    return 0;
}
static int o_print_flags(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((sweep_cfg *)c)->print_flags = true;
    return 0;
}

static const opts_spec sweep_specs[] = {
    {"engine", "E", "sim (default: in process, virtual time) | emulate | cpu (a `run` per point)",
     o_engine},
    {"target", "URL", "run every point against this OpenAI-compatible server", o_target},
    {"server-cmd", "TEMPLATE", "shell command starting the target's server for each point; "
     "{policy} {max_num_batched_tokens} {chunked_prefill} {port} {host} {point}", o_server_cmd},
    {"server-timeout", "DUR", "wait at most this for the server's /health (default 10m)",
     o_server_timeout},
    {"zip", NULL, "vary two lists together (pairwise) instead of every combination", o_zip},
    {"out", "DIR", "sweep directory (default out/sweep); points in DIR/point-k/", o_out},
    {"json", NULL, "print sweep.json (with each point's results) instead of the table", o_json},
    {"no-report", NULL, "skip DIR/report.html and DIR/plots/", o_no_report},
    {"print-server-flags", NULL, "print the server flags each point needs and run nothing",
     o_print_flags},
};
#define N_SWEEP_SPECS ((int)(sizeof sweep_specs / sizeof sweep_specs[0]))

/* Options of `sim` a sweep point also takes (run has the same two). */
typedef struct sim_extras {
    bool no_baseline;
    double threshold_ms;
} sim_extras;

static int x_no_baseline(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((sim_extras *)c)->no_baseline = true;
    return 0;
}
static int x_threshold(void *c, const char *v, char *err)
{
    int64_t ns;
    if (units_parse_duration_ns(v, &ns, err) != 0)
        return -1;
    if (ns <= 0)
        return err_set(err, "'%s' must be positive", v);
    ((sim_extras *)c)->threshold_ms = (double)ns / 1e6;
    return 0;
}
static const opts_spec extra_specs[] = {
    {"no-baseline", NULL, "skip each point's baseline run (injector off)", x_no_baseline},
    {"stall-threshold", "DUR", "a stall is a gap above this (default 5 x baseline p50)",
     x_threshold},
};

static const opts_spec *find_spec(const opts_spec *specs, int n, const char *name, size_t len)
{
    for (int i = 0; i < n; i++)
        if (strlen(specs[i].name) == len && strncmp(specs[i].name, name, len) == 0)
            return &specs[i];
    return NULL;
}

static int sweepable(const char *name, size_t len)
{
    for (int i = 0; i < N_SWEEPABLE; i++)
        if (strlen(SWEEPABLE[i].name) == len && strncmp(SWEEPABLE[i].name, name, len) == 0)
            return i;
    return -1;
}

/* Split argv three ways: the sweep's own options, the varied ones (a comma list), and the
 * rest, passed to every point verbatim. */
static int split_args(int argc, char **argv, char **own, int *n_own, char **pass, int *n_pass,
                      sweep_axis *axes, int *n_axes, char *err)
{
    *n_own = *n_pass = *n_axes = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            if (*n_pass >= SWEEP_MAX_ARGS)
                return err_set(err, "too many arguments");
            pass[(*n_pass)++] = argv[i];
            continue;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const opts_spec *spec = find_spec(sweep_specs, N_SWEEP_SPECS, name, len);
        if (spec) {
            if (*n_own + 2 > SWEEP_MAX_ARGS)
                return err_set(err, "too many arguments");
            own[(*n_own)++] = argv[i];
            if (spec->metavar && !eq && i + 1 < argc)
                own[(*n_own)++] = argv[++i];
            continue;
        }
        int k = sweepable(name, len);
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
        if (k >= 0 && value && strchr(value, ',')) {
            if (*n_axes == HTML_MAX_AXES)
                return err_set(err, "at most %d parameters vary at once (--%.*s is a third)",
                               HTML_MAX_AXES, (int)len, name);
            sweep_axis *ax = &axes[(*n_axes)++];
            memset(ax, 0, sizeof *ax);
            snprintf(ax->name, sizeof ax->name, "%s", SWEEPABLE[k].name);
            ax->server_side = SWEEPABLE[k].server_side;
            for (int j = 0; j < *n_axes - 1; j++)
                if (strcmp(axes[j].name, ax->name) == 0)
                    return err_set(err, "--%s is given twice", ax->name);
            const char *p = value;
            while (*p) {
                const char *comma = strchr(p, ',');
                size_t n = comma ? (size_t)(comma - p) : strlen(p);
                if (n == 0 || n >= sizeof ax->values[0])
                    return err_set(err, "--%s: empty or too long value in '%s'", ax->name, value);
                if (ax->n_values == SWEEP_MAX_VALUES)
                    return err_set(err, "--%s: at most %d values", ax->name, SWEEP_MAX_VALUES);
                snprintf(ax->values[ax->n_values++], sizeof ax->values[0], "%.*s", (int)n, p);
                p += n;
                if (*p == ',')
                    p++;
            }
            if (!eq)
                i++;
            continue;
        }
        if (*n_pass >= SWEEP_MAX_ARGS)
            return err_set(err, "too many arguments");
        pass[(*n_pass)++] = argv[i];
    }
    return 0;
}

/* ---- points ---------------------------------------------------------------------------- */

static int plan_points(const sweep_cfg *sc, const sweep_axis *axes, int n_axes,
                       sweep_point *pts, int *n_pts, char *err)
{
    *n_pts = 0;
    if (n_axes == 2 && sc->zip) {
        if (axes[0].n_values != axes[1].n_values)
            return err_set(err, "--zip needs lists of one length (--%s has %d, --%s %d)",
                           axes[0].name, axes[0].n_values, axes[1].name, axes[1].n_values);
        for (int i = 0; i < axes[0].n_values; i++)
            pts[(*n_pts)++] = (sweep_point){.index = {i, i}};
    } else {
        int n1 = n_axes == 2 ? axes[1].n_values : 1;
        if (axes[0].n_values * n1 > SWEEP_MAX_POINTS)
            return err_set(err, "%d points: at most %d", axes[0].n_values * n1, SWEEP_MAX_POINTS);
        /* The first axis varies fastest: consecutive points walk along it, which is the
         * line the table's "step" column and the plots follow. */
        for (int j = 0; j < n1; j++)
            for (int i = 0; i < axes[0].n_values; i++)
                pts[(*n_pts)++] = (sweep_point){.index = {i, j}};
    }
    for (int k = 0; k < *n_pts; k++) {
        snprintf(pts[k].label, sizeof pts[k].label, "point-%d", k + 1);
        snprintf(pts[k].status, sizeof pts[k].status, "ok");
    }
    return 0;
}

/* The point's argv: everything passed through, then its value of each varied option. */
static int point_args(char **pass, int n_pass, const sweep_axis *axes, int n_axes,
                      const sweep_point *pt, char **out, char (*store)[128])
{
    int n = 0;
    for (int i = 0; i < n_pass; i++)
        out[n++] = pass[i];
    for (int a = 0; a < n_axes; a++) {
        snprintf(store[a], 128, "--%s=%s", axes[a].name, axes[a].values[pt->index[a]]);
        out[n++] = store[a];
    }
    return n;
}

static void point_desc(const sweep_axis *axes, int n_axes, const sweep_point *pt, char *buf,
                       size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int a = 0; a < n_axes && len < size; a++) {
        int n = snprintf(buf + len, size - len, "%s%s=%s", a ? " " : "", axes[a].name,
                         axes[a].values[pt->index[a]]);
        if (n < 0)
            break;
        len += (size_t)n;
    }
}

/* ---- a point in the simulator ---------------------------------------------------------- */

typedef enum { POINT_OK, POINT_REFUSED, POINT_FAILED, POINT_BAD_INPUT } point_result;

static point_result sim_point(int argc, char **argv, const char *dir, char *summary_line,
                              size_t line_size, char *reason, size_t reason_size, char *err)
{
    cli_engine_cfg eng;
    cli_sched_cfg sch;
    cli_workload_cfg wl;
    sim_extras ex = {false, 0};
    cli_engine_defaults(&eng);
    cli_sched_defaults(&sch);
    if (cli_workload_defaults(&wl, argc, argv, err) != 0)
        return POINT_BAD_INPUT;
    opts_group groups[] = {
        cli_workload_group(&wl),
        cli_engine_group(&eng),
        cli_sched_group(&sch),
        {"point", extra_specs, (int)(sizeof extra_specs / sizeof extra_specs[0]), &ex},
    };
    if (opts_parse(argc, argv, groups, (int)(sizeof groups / sizeof groups[0]), NULL, 0, NULL,
                   err) != 0)
        return POINT_BAD_INPUT;
    sim_config cfg;
    if (cli_sim_resolve(&eng, &sch, &wl, &cfg, err) != 0)
        return POINT_BAD_INPUT;
    char why[ERR_LEN];
    if (sim_check(&cfg, why) != 0) {
        /* mixed with a budget under the prompt, say: a point that cannot run, not an error. */
        snprintf(reason, reason_size, "%s", why);
        return POINT_REFUSED;
    }
    char engine[128];
    cli_sim_engine_name(&cfg, engine, sizeof engine);
    analysis_summary base, x;
    memset(&base, 0, sizeof base);
    memset(&x, 0, sizeof x);
    point_result res = POINT_FAILED;
    if (cli_sim_experiment(dir, &cfg, engine, ex.no_baseline, ex.threshold_ms, argc, argv, NULL,
                           &base, &x, err) != 0)
        goto done;
    if (artifacts_write_comparison(dir, ex.no_baseline ? NULL : &base, &x, err) != 0)
        goto done;
    snprintf(summary_line, line_size, "max gap %.1f ms, p99.9 %.2f ms, p99 %.2f ms, %lld stalls",
             x.itl_ms.max, x.itl_ms.p999, x.itl_ms.p99, (long long)x.stalls.count);
    res = POINT_OK;
done:
    analysis_summary_free(&base);
    analysis_summary_free(&x);
    return res;
}

/* ---- a point through `stallscope run` ---------------------------------------------------- */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * CLOCK_NS_PER_S + ts.tv_nsec;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Wait for pid at most timeout_ns; then SIGTERM its group, then SIGKILL. Exit status, or
 * -1 when it had to be stopped. */
static int wait_bounded(pid_t pid, int64_t timeout_ns, int64_t grace_ns)
{
    int64_t deadline = now_ns() + timeout_ns;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        if (r < 0 && errno != EINTR)
            return -1;
        if (now_ns() >= deadline)
            break;
        sleep_ms(50);
    }
    kill(-pid, SIGTERM);
    deadline = now_ns() + grace_ns;
    while (now_ns() < deadline) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return -1;
        sleep_ms(50);
    }
    kill(-pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* Start argv[0] (or `sh -c cmd` when cmd is set) in its own process group, stdout and
 * stderr to files. */
static pid_t spawn(char *const *argv, const char *cmd, const char *out_path, const char *err_path,
                   char *err)
{
    pid_t pid = fork();
    if (pid < 0) {
        err_set(err, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        int fe = strcmp(out_path, err_path) == 0 ? fo
                                                 : open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (fo < 0 || fe < 0)
            _exit(127);
        dup2(fo, STDOUT_FILENO);
        dup2(fe, STDERR_FILENO);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        if (cmd)
            execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        else
            execv("/proc/self/exe", argv);
        fprintf(stderr, "exec: %s\n", strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    return pid;
}

/* The last non-empty line of a log: the child's own words on why it stopped. */
static void last_line(const char *path, char *out, size_t size)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n > 0)
            snprintf(out, size, "%s", line);
    }
    fclose(f);
}

static size_t discard(char *p, size_t size, size_t n, void *u)
{
    (void)p, (void)u;
    return size * n;
}

/* The server base URL without a trailing "/v1" or "/". */
static void base_url(const char *target, char *out, size_t size)
{
    snprintf(out, size, "%s", target);
    size_t n = strlen(out);
    while (n > 0 && out[n - 1] == '/')
        out[--n] = '\0';
    if (n >= 3 && strcmp(out + n - 3, "/v1") == 0)
        out[n - 3] = '\0';
}

static int wait_health(const char *target, pid_t server, int64_t timeout_ns, const char *log,
                       char *err)
{
    char url[700];
    base_url(target, url, sizeof url - 8);
    strcat(url, "/health");
    CURL *curl = curl_easy_init();
    if (!curl)
        return err_set(err, "curl_easy_init failed");
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 2000L);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard);
    int64_t deadline = now_ns() + timeout_ns;
    int rc = -1;
    while (now_ns() < deadline) {
        long code = 0;
        if (curl_easy_perform(curl) == CURLE_OK &&
            curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code == 200) {
            rc = 0;
            break;
        }
        int st;
        if (waitpid(server, &st, WNOHANG) == server) {
            char tail[256];
            last_line(log, tail, sizeof tail);
            err_set(err, "the server exited before %s answered (%s)", url,
                    tail[0] ? tail : "no output");
            curl_easy_cleanup(curl);
            return -2; /* reaped */
        }
        sleep_ms(250);
    }
    curl_easy_cleanup(curl);
    if (rc != 0)
        err_set(err, "%s did not answer 200 within the server timeout", url);
    return rc;
}

/* Replace {name} placeholders; -1 with err on an unknown one. */
static int expand_template(const char *tmpl, const char *const *keys, const char *const *vals,
                           int n, char *out, size_t size, char *err)
{
    size_t len = 0;
    for (const char *p = tmpl; *p;) {
        if (*p == '{') {
            const char *close = strchr(p, '}');
            if (!close)
                return err_set(err, "--server-cmd: unclosed '{' in '%s'", tmpl);
            size_t klen = (size_t)(close - p - 1);
            int k = -1;
            for (int i = 0; i < n; i++)
                if (strlen(keys[i]) == klen && strncmp(keys[i], p + 1, klen) == 0)
                    k = i;
            if (k < 0)
                return err_set(err, "--server-cmd: unknown placeholder {%.*s} (known: {policy} "
                                    "{max_num_batched_tokens} {chunked_prefill} {port} {host} "
                                    "{point})",
                               (int)klen, p + 1);
            int w = snprintf(out + len, size - len, "%s", vals[k]);
            if (w < 0 || (size_t)w >= size - len)
                return err_set(err, "--server-cmd: too long once expanded");
            len += (size_t)w;
            p = close + 1;
            continue;
        }
        if (len + 1 >= size)
            return err_set(err, "--server-cmd: too long once expanded");
        out[len++] = *p++;
    }
    out[len] = '\0';
    return 0;
}

/* host and port of a URL ("http://127.0.0.1:8000/v1" -> "127.0.0.1", "8000"). */
static void url_host_port(const char *url, char *host, size_t hs, char *port, size_t ps)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    bool https = strncmp(url, "https", 5) == 0;
    size_t n = strcspn(p, ":/");
    snprintf(host, hs, "%.*s", (int)n, p);
    if (p[n] == ':')
        snprintf(port, ps, "%.*s", (int)strcspn(p + n + 1, "/"), p + n + 1);
    else
        snprintf(port, ps, "%s", https ? "443" : "80");
}

/* The policy and budget a point's server runs: its value when varied, the passed-through
 * flag otherwise, else the lesson's default. */
static void point_server_params(char **args, int n, const char **policy, const char **budget)
{
    *policy = opts_find(n, args, "policy");
    *budget = opts_find(n, args, "max-num-batched-tokens");
    if (!*policy)
        *policy = "mixed";
    if (!*budget)
        *budget = "16384";
}

static void print_flags(FILE *out, const char *label, const char *desc, const char *policy,
                        const char *budget)
{
    bool chunked = strcmp(policy, "chunked") == 0;
    fprintf(out, "%s (%s):\n  vLLM:       --max-num-batched-tokens %s %s\n"
                 "  stallscope: stallscope serve --policy %s --max-num-batched-tokens %s\n",
            label, desc, budget,
            chunked ? "--enable-chunked-prefill"
                    : strcmp(policy, "prefill-first") == 0
                          ? "--no-enable-chunked-prefill (prefill-first is vLLM V0's scheduler)"
                          : "--no-enable-chunked-prefill",
            policy, budget);
}

static point_result run_point(const sweep_cfg *sc, int argc, char **argv, const char *dir,
                              const char *label, int64_t bound_ns, char *reason,
                              size_t reason_size, char *err)
{
    if (artifacts_mkdirs(dir, err) != 0)
        return POINT_FAILED;
    char log_path[4200], out_path[4200], server_log[4200];
    snprintf(log_path, sizeof log_path, "%s/run.log", dir);
    snprintf(out_path, sizeof out_path, "%s/run.json", dir);
    snprintf(server_log, sizeof server_log, "%s/server.log", dir);

    pid_t server = -1;
    if (sc->server_cmd[0]) {
        const char *policy, *budget;
        point_server_params(argv, argc, &policy, &budget);
        char host[256], port[32], cmd[4096];
        url_host_port(sc->target, host, sizeof host, port, sizeof port);
        const char *keys[] = {"policy", "max_num_batched_tokens", "chunked_prefill", "port",
                              "host", "point"};
        const char *vals[] = {policy, budget,
                              strcmp(policy, "chunked") == 0 ? "--enable-chunked-prefill"
                                                             : "--no-enable-chunked-prefill",
                              port, host, label};
        if (expand_template(sc->server_cmd, keys, vals, 6, cmd, sizeof cmd, err) != 0)
            return POINT_BAD_INPUT;
        if ((server = spawn(NULL, cmd, server_log, server_log, err)) < 0)
            return POINT_FAILED;
        int h = wait_health(sc->target, server, sc->server_timeout_ns, server_log, err);
        if (h != 0) {
            if (h != -2)
                wait_bounded(server, 0, SERVER_STOP_NS);
            return POINT_FAILED;
        }
    }

    char *args[SWEEP_MAX_ARGS + 16];
    int n = 0;
    args[n++] = "stallscope";
    args[n++] = "run";
    for (int i = 0; i < argc; i++)
        args[n++] = argv[i];
    char out_opt[1200], target_opt[600], engine_opt[40];
    snprintf(out_opt, sizeof out_opt, "--out=%s", dir);
    args[n++] = out_opt;
    args[n++] = "--json";
    if (sc->target[0]) {
        snprintf(target_opt, sizeof target_opt, "--target=%s", sc->target);
        args[n++] = target_opt;
    } else {
        snprintf(engine_opt, sizeof engine_opt, "--engine=%s", sc->engine);
        args[n++] = engine_opt;
    }
    args[n] = NULL;
    point_result res = POINT_FAILED;
    pid_t child = spawn(args, NULL, out_path, log_path, err);
    if (child >= 0) {
        int status = wait_bounded(child, bound_ns, 10 * CLOCK_NS_PER_S);
        char tail[256];
        last_line(log_path, tail, sizeof tail);
        if (status == 0) {
            res = POINT_OK;
        } else if (status == CLI_EXIT_USAGE) {
            snprintf(reason, reason_size, "%s", tail[0] ? tail : "run refused its options");
            res = POINT_REFUSED;
        } else {
            snprintf(reason, reason_size, "%s",
                     status < 0 ? "timed out and was stopped"
                                : tail[0] ? tail : "run failed without a message");
            err_set(err, "%s", reason);
        }
    }
    if (server > 0)
        wait_bounded(server, 0, SERVER_STOP_NS);
    return res;
}

/* ---- the command ---------------------------------------------------------------------- */

static int write_plan(const char *out, const sweep_cfg *sc, const sweep_axis *axes, int n_axes,
                      const sweep_point *pts, int n_pts, int argc, char **argv, char *err)
{
    json_t *root = json_object();
    json_object_set_new(root, "mode", json_string(strcmp(sc->engine, "sim") == 0 && !sc->target[0]
                                                      ? "sim" : "run"));
    json_object_set_new(root, "engine", json_string(sc->engine));
    json_object_set_new(root, "target", json_string(sc->target));
    json_t *ax = json_array(), *args = json_array(), *points = json_array();
    for (int a = 0; a < n_axes; a++)
        json_array_append_new(ax, json_string(axes[a].name));
    for (int i = 0; i < argc; i++)
        json_array_append_new(args, json_string(argv[i]));
    for (int k = 0; k < n_pts; k++) {
        json_t *p = json_object(), *values = json_array();
        json_object_set_new(p, "label", json_string(pts[k].label));
        for (int a = 0; a < n_axes; a++)
            json_array_append_new(values, json_string(axes[a].values[pts[k].index[a]]));
        json_object_set_new(p, "values", values);
        json_object_set_new(p, "status", json_string(pts[k].status));
        json_object_set_new(p, "reason", json_string(pts[k].reason));
        json_array_append_new(points, p);
    }
    json_object_set_new(root, "axes", ax);
    json_object_set_new(root, "argv", args);
    json_object_set_new(root, "points", points);
    char path[1200], tmp[1300];
    snprintf(path, sizeof path, "%s/sweep.json", out);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = 0;
    if (json_dump_file(root, tmp, JSON_INDENT(2)) != 0 || rename(tmp, path) != 0)
        rc = err_set(err, "cannot write %s: %s", path, strerror(errno));
    json_decref(root);
    return rc;
}

int cli_sweep(int argc, char **argv)
{
    char err[ERR_LEN] = "";
    sweep_cfg sc;
    memset(&sc, 0, sizeof sc);
    strcpy(sc.engine, "sim");
    strcpy(sc.out, "out/sweep");
    sc.server_timeout_ns = 600 * CLOCK_NS_PER_S;

    cli_engine_cfg eng;
    cli_sched_cfg sch;
    cli_workload_cfg wl;
    sim_extras ex = {false, 0};
    cli_engine_defaults(&eng);
    cli_sched_defaults(&sch);
    if (cli_workload_defaults(&wl, argc, argv, err) != 0)
        return cli_usage_error("sweep", err);
    if (opts_wants_help(argc, argv)) {
        opts_group groups[] = {
            {"sweep", sweep_specs, N_SWEEP_SPECS, &sc},
            cli_workload_group(&wl),
            cli_engine_group(&eng),
            cli_sched_group(&sch),
            {"each point", extra_specs, (int)(sizeof extra_specs / sizeof extra_specs[0]), &ex},
        };
        opts_print_help(
            stdout, "stallscope sweep --PARAM A,B[,C...] [--PARAM2 X,Y...] [options]",
            "Run the experiment (baseline + interference) once per point, varying one or two\n"
            "of --prompt-tokens, --inject-every, --users, --policy, --max-num-batched-tokens and\n"
            "--step-overhead (a comma list each; every combination, or pairwise with --zip).\n"
            "Points run in the simulator (default), as `stallscope run` children on the\n"
            "embedded server (--engine emulate|cpu), or against --target URL (server-side\n"
            "parameters then need --server-cmd, or --print-server-flags). Writes OUT/point-k/,\n"
            "OUT/sweep.json, OUT/sweep.csv and OUT/report.html; prints one table.\n"
            "Examples:\n"
            "  stallscope sweep --prompt-tokens 4k,8k,16k --lesson-flops\n"
            "  stallscope sweep --inject-every 10s,1s --inject-at 0.5s --step-overhead 5ms\n"
            "  stallscope sweep --policy chunked --max-num-batched-tokens 512,2048,8192,16384",
            groups, (int)(sizeof groups / sizeof groups[0]));
        return CLI_EXIT_OK;
    }

    char **own = calloc(SWEEP_MAX_ARGS, sizeof *own), **pass = calloc(SWEEP_MAX_ARGS, sizeof *pass);
    sweep_axis *axes = calloc(HTML_MAX_AXES, sizeof *axes);
    sweep_point *pts = calloc(SWEEP_MAX_POINTS, sizeof *pts);
    int status = CLI_EXIT_FAIL;
    if (!own || !pass || !axes || !pts) {
        fprintf(stderr, "stallscope sweep: out of memory\n");
        goto done;
    }
    int n_own, n_pass, n_axes, n_pts;
    if (split_args(argc, argv, own, &n_own, pass, &n_pass, axes, &n_axes, err) != 0) {
        status = cli_usage_error("sweep", err);
        goto done;
    }
    opts_group own_group = {"sweep", sweep_specs, N_SWEEP_SPECS, &sc};
    if (opts_parse(n_own, own, &own_group, 1, NULL, 0, NULL, err) != 0) {
        status = cli_usage_error("sweep", err);
        goto done;
    }
    if (n_axes == 0) {
        status = cli_usage_error("sweep", "nothing varies: give one or two of --prompt-tokens, "
                                          "--inject-every, --users, --policy, "
                                          "--max-num-batched-tokens, --step-overhead a comma "
                                          "list (e.g. --prompt-tokens 4k,8k,16k)");
        goto done;
    }
    /* Every value through its own option's parser before anything runs. */
    for (int a = 0; a < n_axes; a++)
        for (int v = 0; v < axes[a].n_values; v++) {
            char opt[128];
            snprintf(opt, sizeof opt, "--%s=%s", axes[a].name, axes[a].values[v]);
            char *probe[] = {opt};
            cli_workload_cfg w2;
            cli_engine_cfg e2;
            cli_sched_cfg s2;
            cli_engine_defaults(&e2);
            cli_sched_defaults(&s2);
            workload_default(&w2.wl);
            opts_group g[] = {cli_workload_group(&w2), cli_engine_group(&e2), cli_sched_group(&s2)};
            if (opts_parse(1, probe, g, 3, NULL, 0, NULL, err) != 0) {
                status = cli_usage_error("sweep", err);
                goto done;
            }
        }
    if (sc.zip && n_axes != 2) {
        status = cli_usage_error("sweep", "--zip pairs two varied parameters; only one varies");
        goto done;
    }
    bool run_mode = sc.target[0] || strcmp(sc.engine, "sim") != 0;
    if (sc.target[0] && strcmp(sc.engine, "sim") != 0) {
        status = cli_usage_error("sweep", "--engine picks the embedded server; with --target the "
                                          "server is yours (drop --engine)");
        goto done;
    }
    if (sc.server_cmd[0] && !sc.target[0]) {
        status = cli_usage_error("sweep", "--server-cmd starts the server behind --target URL; "
                                          "give --target too");
        goto done;
    }
    if (plan_points(&sc, axes, n_axes, pts, &n_pts, err) != 0) {
        status = cli_usage_error("sweep", err);
        goto done;
    }

    bool server_axes = false;
    for (int a = 0; a < n_axes; a++)
        server_axes = server_axes || axes[a].server_side;
    if (sc.print_flags || (sc.target[0] && server_axes && !sc.server_cmd[0])) {
        FILE *out = sc.print_flags ? stdout : stderr;
        if (!sc.print_flags)
            fprintf(out, "stallscope sweep: each point needs its own server configuration; "
                         "start them with --server-cmd TEMPLATE, or run the points one by one "
                         "with these flags:\n");
        for (int k = 0; k < n_pts; k++) {
            char *args[SWEEP_MAX_ARGS + HTML_MAX_AXES];
            char store[HTML_MAX_AXES][128], desc[256];
            int n = point_args(pass, n_pass, axes, n_axes, &pts[k], args, store);
            const char *policy, *budget;
            point_server_params(args, n, &policy, &budget);
            point_desc(axes, n_axes, &pts[k], desc, sizeof desc);
            print_flags(out, pts[k].label, desc, policy, budget);
        }
        status = sc.print_flags ? CLI_EXIT_OK : CLI_EXIT_USAGE;
        goto done;
    }

    if (artifacts_mkdirs(sc.out, err) != 0) {
        fprintf(stderr, "stallscope sweep: %s\n", err);
        goto done;
    }
    /* A bound for each child run: both runs, their warm-ups and a generous margin. */
    int64_t duration_ns = wl.wl.duration_ns;
    const char *dur = opts_find(n_pass, pass, "duration");
    if (dur)
        units_parse_duration_ns(dur, &duration_ns, NULL);
    int64_t bound_ns = 3 * (2 * duration_ns + 60 * CLOCK_NS_PER_S);
    const char *thr = opts_find(n_pass, pass, "stall-threshold");
    int64_t thr_ns = 0;
    if (thr)
        units_parse_duration_ns(thr, &thr_ns, NULL);

    int failed = 0;
    for (int k = 0; k < n_pts; k++) {
        char *args[SWEEP_MAX_ARGS + HTML_MAX_AXES];
        char store[HTML_MAX_AXES][128], desc[256], dir[1100], line[256] = "";
        int n = point_args(pass, n_pass, axes, n_axes, &pts[k], args, store);
        point_desc(axes, n_axes, &pts[k], desc, sizeof desc);
        snprintf(dir, sizeof dir, "%s/%s", sc.out, pts[k].label);
        int64_t t0 = now_ns();
        point_result r = run_mode ? run_point(&sc, n, args, dir, pts[k].label, bound_ns,
                                              pts[k].reason, sizeof pts[k].reason, err)
                                  : sim_point(n, args, dir, line, sizeof line, pts[k].reason,
                                              sizeof pts[k].reason, err);
        if (r == POINT_BAD_INPUT || (r == POINT_REFUSED && run_mode && k == 0)) {
            status = cli_usage_error("sweep", r == POINT_BAD_INPUT ? err : pts[k].reason);
            goto done;
        }
        snprintf(pts[k].status, sizeof pts[k].status, "%s",
                 r == POINT_OK ? "ok" : r == POINT_REFUSED ? "refused" : "failed");
        if (r == POINT_FAILED) {
            failed++;
            if (!pts[k].reason[0])
                snprintf(pts[k].reason, sizeof pts[k].reason, "%s", err);
        }
        fprintf(stderr, "[%s %s] %s%s%s (%.1f s)\n", pts[k].label, desc, pts[k].status,
                r == POINT_OK ? (line[0] ? ": " : "") : ": ",
                r == POINT_OK ? line : pts[k].reason, (double)(now_ns() - t0) / 1e9);
    }
    if (write_plan(sc.out, &sc, axes, n_axes, pts, n_pts, argc, argv, err) != 0) {
        fprintf(stderr, "stallscope sweep: %s\n", err);
        goto done;
    }

    html_sweep sw;
    if (html_sweep_load(&sw, sc.out, (double)thr_ns / 1e6, stderr, err) != 0 ||
        html_sweep_write_results(&sw, err) != 0) {
        fprintf(stderr, "stallscope sweep: %s\n", err);
        html_sweep_free(&sw);
        goto done;
    }
    if (!sc.no_report) {
        html_options opt = {.predict = true};
        int rc = html_write_sweep_report(&sw, &opt, err);
        plot_release_caches();
        if (rc != 0) {
            fprintf(stderr, "stallscope sweep: report: %s\n", err);
            html_sweep_free(&sw);
            goto done;
        }
    }
    if (sc.json) {
        json_dumpf(sw.json, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        fputc('\n', stdout);
    } else {
        html_sweep_table_print(stdout, &sw);
        printf("\nartifacts: %s/ (sweep.json, sweep.csv, point-k/)\n", sc.out);
        if (!sc.no_report)
            printf("report:    %s/report.html\n", sc.out);
    }
    html_sweep_free(&sw);
    status = failed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
    if (failed)
        fprintf(stderr, "stallscope sweep: %d of %d points failed (see sweep.json)\n", failed,
                n_pts);
done:
    free(own);
    free(pass);
    free(axes);
    free(pts);
    fflush(stdout);
    return status;
}
