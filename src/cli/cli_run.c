/* stallscope run — the experiment over HTTP: background chats plus the injector against an
 * OpenAI-compatible server (the embedded one unless --target), a baseline run with the
 * injector off, then the interference run; artifacts, the side-by-side table, the verdict.
 *
 * Without --target each run gets a fresh embedded server (a child process: this binary's
 * `serve` on a free loopback port), so each run's steps.csv comes from its own engine and
 * no state (KV cache, queues) leaks from the baseline into the interference run. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "analysis/analysis.h"
#include "cli/cli.h"
#include "client/driver.h"
#include "client/stream.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/units.h"
#include "report/artifacts.h"

#define RUN_MAX_HEADERS 32
#define SERVER_START_TIMEOUT_NS (30 * CLOCK_NS_PER_S)
#define TARGET_READY_TIMEOUT_NS (3 * CLOCK_NS_PER_S)
#define PROGRESS_TTY_NS (200 * CLOCK_NS_PER_MS)
#define PROGRESS_PLAIN_NS (5 * CLOCK_NS_PER_S)

typedef struct run_cfg {
    char target[512];
    char engine_kind[16];
    driver_endpoint endpoint;
    char api_key[512];
    const char *headers[RUN_MAX_HEADERS];
    int n_headers;
    char model_name[128];
    bool no_baseline, json, print_flags, fidelity, insecure;
    char out[1024];
    int64_t request_timeout_ns, warmup_ns;
    double threshold_ms;
} run_cfg;

/* ---- options ----------------------------------------------------------------------- */

static int copy_opt(char *dst, size_t size, const char *v, char *err)
{
    if (!*v || strlen(v) >= size)
        return err_set(err, "'%s' is empty or too long", v);
    strcpy(dst, v);
    return 0;
}
static int o_target(void *c, const char *v, char *err)
{
    run_cfg *r = c;
    if (strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0)
        return err_set(err, "'%s' is not an http:// or https:// URL", v);
    return copy_opt(r->target, sizeof r->target, v, err);
}
static int o_engine(void *c, const char *v, char *err)
{
    if (strcmp(v, "emulate") != 0 && strcmp(v, "cpu") != 0)
        return err_set(err, "unknown engine '%s' (emulate | cpu)", v);
    return copy_opt(((run_cfg *)c)->engine_kind, sizeof ((run_cfg *)c)->engine_kind, v, err);
}
static int o_endpoint(void *c, const char *v, char *err)
{
    return driver_endpoint_parse(v, &((run_cfg *)c)->endpoint, err);
}
static int o_api_key(void *c, const char *v, char *err)
{
    return copy_opt(((run_cfg *)c)->api_key, sizeof ((run_cfg *)c)->api_key, v, err);
}
static int o_header(void *c, const char *v, char *err)
{
    run_cfg *r = c;
    const char *colon = strchr(v, ':');
    if (!colon || colon == v)
        return err_set(err, "'%s' is not 'Name: value'", v);
    if (r->n_headers >= RUN_MAX_HEADERS)
        return err_set(err, "at most %d headers", RUN_MAX_HEADERS);
    r->headers[r->n_headers++] = v; /* argv outlives the run */
    return 0;
}
static int o_model_name(void *c, const char *v, char *err)
{
    return copy_opt(((run_cfg *)c)->model_name, sizeof ((run_cfg *)c)->model_name, v, err);
}
static int o_no_baseline(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((run_cfg *)c)->no_baseline = true;
    return 0;
}
static int o_out(void *c, const char *v, char *err)
{
    return copy_opt(((run_cfg *)c)->out, sizeof ((run_cfg *)c)->out, v, err);
}
static int o_json(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((run_cfg *)c)->json = true;
    return 0;
}
static int o_print_flags(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((run_cfg *)c)->print_flags = true;
    return 0;
}
static int o_fidelity(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((run_cfg *)c)->fidelity = true;
    return 0;
}
static int o_insecure(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((run_cfg *)c)->insecure = true;
    return 0;
}
static int parse_duration(const char *v, int64_t *out, bool allow_zero, char *err)
{
    int64_t ns = 0;
    if (units_parse_duration_ns(v, &ns, err) != 0)
        return -1;
    if (ns < 0 || (!allow_zero && ns == 0))
        return err_set(err, "'%s' must be %s", v, allow_zero ? "zero or more" : "positive");
    *out = ns;
    return 0;
}
static int o_request_timeout(void *c, const char *v, char *err)
{
    return parse_duration(v, &((run_cfg *)c)->request_timeout_ns, false, err);
}
static int o_warmup(void *c, const char *v, char *err)
{
    return parse_duration(v, &((run_cfg *)c)->warmup_ns, true, err);
}
static int o_threshold(void *c, const char *v, char *err)
{
    int64_t ns = 0;
    if (parse_duration(v, &ns, false, err) != 0)
        return -1;
    ((run_cfg *)c)->threshold_ms = (double)ns / 1e6;
    return 0;
}

static const opts_spec run_specs[] = {
    {"target", "URL", "an OpenAI-compatible server (vLLM, SGLang, llama.cpp ...); default: "
                      "start the embedded server",
     o_target},
    {"engine", "E", "embedded server's executor: cpu (default: a real forward pass) | emulate (a GPU)", o_engine},
    {"endpoint", "E", "completions (default) | chat", o_endpoint},
    {"api-key", "KEY", "sent as Authorization: Bearer KEY", o_api_key},
    {"header", "'K: V'", "an extra request header (repeatable)", o_header},
    {"model-name", "NAME", "the \"model\" of each request (default: the first of /v1/models)",
     o_model_name},
    {"no-baseline", NULL, "skip the baseline run (injector off)", o_no_baseline},
    {"out", "DIR", "artifacts directory (default out)", o_out},
    {"json", NULL, "print comparison.json instead of the table", o_json},
    {"stall-threshold", "DUR", "a stall is a gap above this (default 5 x baseline p50)",
     o_threshold},
    {"request-timeout", "DUR", "a request with no bytes for this long fails (default 30s)",
     o_request_timeout},
    {"warmup", "DUR", "background load before t = 0, not recorded: users are mid-answer when "
                      "the run starts (default 2s)",
     o_warmup},
    {"fidelity", NULL, "ask --target for stallscope's per-chunk emit times (on for the "
                       "embedded server)",
     o_fidelity},
    {"insecure", NULL, "https without certificate checks (self-signed test servers)", o_insecure},
    {"print-server-flags", NULL, "print vLLM, SGLang and llama.cpp flags for one-step and "
                                 "chunked prefill, then exit",
     o_print_flags},
};

static void print_server_flags(const workload_config *wl, const sched_config *sched)
{
    int budget = sched->max_num_batched_tokens;
    if (budget < wl->prompt_tokens)
        budget = wl->prompt_tokens;
    int ctx = wl->prompt_tokens + wl->inject_max_tokens + 1024;
    printf("Server settings for the experiment (long prompt: %d tokens).\n\n", wl->prompt_tokens);
    printf("One-step prefill (the problem: the whole prompt in one step, every stream waits):\n");
    printf("  vLLM:      vllm serve MODEL --max-num-batched-tokens %d --no-enable-chunked-prefill "
           "--max-model-len %d\n",
           budget, ctx);
    printf("             (newer vLLM chunks by default; a budget >= the prompt still prefills it "
           "in one step)\n");
    printf("  SGLang:    python -m sglang.launch_server --model-path MODEL --chunked-prefill-size "
           "-1 --max-prefill-tokens %d\n",
           budget);
    printf("  llama.cpp: llama-server -m MODEL.gguf --batch-size %d --ubatch-size %d --parallel "
           "%d --ctx-size %d\n",
           budget, budget, wl->users + 2, (wl->users + 2) * ctx);
    printf("\nChunked prefill (the fix: decodes first, the prompt in slices of the budget left):\n");
    printf("  vLLM:      vllm serve MODEL --enable-chunked-prefill --max-num-batched-tokens 512\n");
    printf("  SGLang:    python -m sglang.launch_server --model-path MODEL --chunked-prefill-size "
           "512 --enable-mixed-chunk\n");
    printf("  llama.cpp: llama-server -m MODEL.gguf --batch-size 512 --ubatch-size 512 --parallel "
           "%d --ctx-size %d\n",
           wl->users + 2, (wl->users + 2) * ctx);
    printf("\nThen: stallscope run --target http://HOST:PORT [--model-name NAME]\n");
    printf("The embedded server's own equivalents: --policy mixed --max-num-batched-tokens %d | "
           "--policy chunked --max-num-batched-tokens 512\n",
           budget);
}

/* ---- the embedded server ------------------------------------------------------------ */

typedef struct embedded {
    pid_t pid;
    bool exited;
    int status;
    char url[128];
    char log_path[1300];
    char step_log[1300];
} embedded;

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void describe_exit(int status, char *out, size_t size)
{
    if (WIFSIGNALED(status))
        snprintf(out, size, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(out, size, "exited with status %d", WEXITSTATUS(status));
}

static bool embedded_poll_exit(embedded *e)
{
    if (e->pid <= 0 || e->exited)
        return e->exited;
    if (waitpid(e->pid, &e->status, WNOHANG) == e->pid)
        e->exited = true;
    return e->exited;
}

/* The last lines of the server's log, to show why it failed. */
static void print_log_tail(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char lines[8][256];
    int n = 0;
    while (fgets(lines[n % 8], sizeof lines[0], f))
        n++;
    fclose(f);
    int from = n > 8 ? n - 8 : 0;
    for (int i = from; i < n; i++)
        fprintf(stderr, "  server: %s%s", lines[i % 8],
                strchr(lines[i % 8], '\n') ? "" : "\n");
}

/* The engine and scheduler flags of argv, exactly as given, for `serve`. */
static bool is_passthrough(const char *arg, const opts_group *groups, int n_groups, bool *takes_value)
{
    if (strncmp(arg, "--", 2) != 0)
        return false;
    const char *name = arg + 2;
    size_t len = strcspn(name, "=");
    for (int g = 0; g < n_groups; g++)
        for (int i = 0; i < groups[g].n_specs; i++) {
            const opts_spec *s = &groups[g].specs[i];
            if (strlen(s->name) == len && strncmp(s->name, name, len) == 0) {
                *takes_value = s->metavar != NULL && name[len] != '=';
                return true;
            }
        }
    return false;
}

static int embedded_start(const run_cfg *rc, int argc, char **argv, const opts_group *pass,
                          int n_pass, const char *dir, embedded *e, char *err)
{
    memset(e, 0, sizeof *e);
    snprintf(e->log_path, sizeof e->log_path, "%s/server.log", dir);
    snprintf(e->step_log, sizeof e->step_log, "%s/server_steps_raw.csv", dir);
    unlink(e->step_log);
    char **args = calloc((size_t)argc + 16, sizeof *args);
    if (!args)
        return err_set(err, "out of memory");
    int n = 0;
    args[n++] = "stallscope";
    args[n++] = "serve";
    args[n++] = "--host";
    args[n++] = "127.0.0.1";
    args[n++] = "--port";
    args[n++] = "0";
    args[n++] = "--step-log";
    args[n++] = e->step_log;
    args[n++] = "--engine";
    args[n++] = (char *)rc->engine_kind;
    for (int i = 0; i < argc; i++) {
        bool takes_value = false;
        if (!is_passthrough(argv[i], pass, n_pass, &takes_value))
            continue;
        args[n++] = argv[i];
        if (takes_value && i + 1 < argc)
            args[n++] = argv[++i];
    }
    args[n] = NULL;
    int log_fd = open(e->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) {
        free(args);
        return err_set(err, "cannot create %s: %s", e->log_path, strerror(errno));
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(log_fd);
        free(args);
        return err_set(err, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        /* The server must not outlive the run, even when the run is killed. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        dup2(log_fd, STDOUT_FILENO);
        dup2(log_fd, STDERR_FILENO);
        execv("/proc/self/exe", args);
        dprintf(STDERR_FILENO, "exec /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    close(log_fd);
    free(args);
    e->pid = pid;

    /* Ready when it prints "listening on http://HOST:PORT". */
    int64_t deadline = clock_now_ns() + SERVER_START_TIMEOUT_NS;
    while (clock_now_ns() < deadline) {
        FILE *f = fopen(e->log_path, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) {
            const char *at = strstr(line, "listening on http://");
            if (at) {
                at += strlen("listening on ");
                size_t len = strcspn(at, " \r\n");
                if (len < sizeof e->url) {
                    memcpy(e->url, at, len);
                    e->url[len] = '\0';
                    fclose(f);
                    return 0;
                }
            }
        }
        if (f)
            fclose(f);
        if (embedded_poll_exit(e)) {
            char how[128];
            describe_exit(e->status, how, sizeof how);
            print_log_tail(e->log_path);
            return err_set(err, "the embedded server %s before it was ready (log: %s)", how,
                           e->log_path);
        }
        if (interrupted)
            break;
        clock_sleep_until_ns(clock_now_ns() + 10 * CLOCK_NS_PER_MS);
    }
    kill(e->pid, SIGKILL);
    waitpid(e->pid, &e->status, 0);
    e->exited = true;
    print_log_tail(e->log_path);
    return err_set(err, "the embedded server did not print 'listening on' within %lld s (log: %s)",
                   (long long)(SERVER_START_TIMEOUT_NS / CLOCK_NS_PER_S), e->log_path);
}

static void embedded_stop(embedded *e)
{
    if (e->pid <= 0 || embedded_poll_exit(e))
        return;
    kill(e->pid, SIGTERM);
    int64_t deadline = clock_now_ns() + 5 * CLOCK_NS_PER_S;
    while (clock_now_ns() < deadline) {
        if (embedded_poll_exit(e))
            return;
        clock_sleep_until_ns(clock_now_ns() + 10 * CLOCK_NS_PER_MS);
    }
    fprintf(stderr, "stallscope run: the embedded server ignored SIGTERM; killing it\n");
    kill(e->pid, SIGKILL);
    waitpid(e->pid, &e->status, 0);
    e->exited = true;
}

/* The server's step log (absolute CLOCK_MONOTONIC ns) rebased to the run's t0; steps before
 * t0 (warm-up) are dropped. A missing or cut log gives what it has. */
static int load_steps(const char *path, int64_t t0, int64_t t_end, tokenlog *log, char *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        long long step, start, end, modeled = 0;
        int decode, prefill, nreq;
        int got = sscanf(line, "%lld,%lld,%lld,%d,%d,%d,%lld", &step, &start, &end, &decode,
                         &prefill, &nreq, &modeled);
        if (got < 6 || start < t0 || start > t_end)
            continue; /* the header, a cut last line, or outside the run */
        tokenlog_step st = {step, start - t0, end - t0, decode, prefill, nreq, got >= 7 ? modeled : 0};
        if (tokenlog_add_step(log, &st) != 0) {
            fclose(f);
            return err_set(err, "out of memory reading %s", path);
        }
    }
    fclose(f);
    return 0;
}

/* ---- progress ------------------------------------------------------------------------ */

typedef struct progress_ctx {
    const char *label;
    bool tty;
    bool printed;
} progress_ctx;

static void on_progress(void *ctx, const driver_progress *p)
{
    progress_ctx *pc = ctx;
    char worst[32];
    units_format_duration(p->worst_gap_ns, worst, sizeof worst);
    char line[256];
    snprintf(line, sizeof line,
             "[%s] %5.1f/%.0f s  %7.0f tok/s  %4d streams  injections %d/%d  worst gap %s  "
             "errors %lld",
             pc->label, (double)p->elapsed_ns / 1e9, (double)p->duration_ns / 1e9, p->tokens_per_s,
             p->active, p->injections_sent, p->injections_planned, worst, (long long)p->errors);
    if (pc->tty) {
        fprintf(stderr, "\r\033[K%s", line);
        pc->printed = true;
    } else {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
}

static void progress_done(progress_ctx *pc)
{
    if (pc->tty && pc->printed)
        fputc('\n', stderr);
    pc->printed = false;
}

typedef struct stop_ctx {
    embedded *server; /* NULL with --target */
} stop_ctx;

static bool should_stop(void *ctx, char *why, size_t size)
{
    stop_ctx *sc = ctx;
    if (interrupted) {
        snprintf(why, size, "interrupted");
        return true;
    }
    if (sc->server && embedded_poll_exit(sc->server)) {
        char how[128];
        describe_exit(sc->server->status, how, sizeof how);
        snprintf(why, size, "the embedded server (pid %d) %s", (int)sc->server->pid, how);
        return true;
    }
    return false;
}

/* ---- one run ------------------------------------------------------------------------- */

typedef struct run_ctx {
    run_cfg *rc;
    int argc;
    char **argv;
    const opts_group *pass;
    int n_pass;
    cost_params cost;
    sched_config sched;
    driver_api api;
    bool probed;
    char engine[128];
} run_ctx;

/* Wait until the server answers HTTP at all (any status: /health may not exist on every
 * server), bounded. Refused connections are retried until the deadline. */
static int wait_ready(const stream_options *so, int64_t timeout_ns, embedded *server, char *err)
{
    int64_t deadline = clock_now_ns() + timeout_ns;
    char last[ERR_LEN] = "";
    while (clock_now_ns() < deadline) {
        int status = 0;
        int64_t left = deadline - clock_now_ns();
        if (stream_http(so, "GET", "/health", NULL, left < CLOCK_NS_PER_S ? left : CLOCK_NS_PER_S,
                        &status, NULL, last) == 0) {
            if (status == 200 || !server)
                return 0;
            snprintf(last, sizeof last, "/health answered HTTP %d", status);
        }
        if (server && embedded_poll_exit(server))
            break;
        if (interrupted)
            return err_set(err, "interrupted");
        clock_sleep_until_ns(clock_now_ns() + 50 * CLOCK_NS_PER_MS);
    }
    return err_set(err, "the server at %s is not reachable: %s", so->base_url, last);
}

static void resolve_model_name(const stream_options *so, driver_api *api)
{
    int status = 0;
    char *body = NULL, err[ERR_LEN];
    if (stream_http(so, "GET", "/v1/models", NULL, 5 * CLOCK_NS_PER_S, &status, &body, err) == 0 &&
        status == 200) {
        json_t *root = json_loads(body, 0, NULL);
        json_t *first = json_array_get(json_object_get(root, "data"), 0);
        const char *id = json_string_value(json_object_get(first, "id"));
        if (id)
            snprintf(api->model, sizeof api->model, "%s", id);
        json_decref(root);
    }
    free(body);
    if (!api->model[0])
        fprintf(stderr, "stallscope run: note: /v1/models named no model; requests carry no "
                        "\"model\" (use --model-name)\n");
}

static FILE *open_csv(const char *dir, const char *name, void (*header)(FILE *), char *err)
{
    char path[1300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        err_set(err, "cannot create %s: %s", path, strerror(errno));
        return NULL;
    }
    setvbuf(f, NULL, _IOFBF, 1 << 16);
    header(f);
    return f;
}

static void write_fidelity(const char *dir, const char *label, driver_result *res, bool quiet)
{
    if (res->n_fidelity == 0)
        return;
    analysis_dist d;
    analysis_dist_from(res->fidelity_ms, res->n_fidelity, &d);
    json_t *root = json_object();
    json_object_set_new(root, "label", json_string(label));
    json_object_set_new(root, "what", json_string("client timestamp error: receive stamp minus "
                                                  "the server's emit_ns, same CLOCK_MONOTONIC"));
    json_object_set_new(root, "events", json_integer(d.count));
    json_object_set_new(root, "mean_us", json_real(d.mean * 1e3));
    json_object_set_new(root, "p50_us", json_real(d.p50 * 1e3));
    json_object_set_new(root, "p99_us", json_real(d.p99 * 1e3));
    json_object_set_new(root, "p999_us", json_real(d.p999 * 1e3));
    json_object_set_new(root, "max_us", json_real(d.max * 1e3));
    char path[1300];
    snprintf(path, sizeof path, "%s/fidelity.json", dir);
    if (json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) != 0)
        fprintf(stderr, "stallscope run: cannot write %s\n", path);
    json_decref(root);
    if (!quiet)
        fprintf(stderr, "[%s] client timestamp error (receive - emit): p50 %.0f us, p99 %.0f us, "
                        "max %.0f us over %lld events\n",
                label, d.p50 * 1e3, d.p99 * 1e3, d.max * 1e3, (long long)d.count);
}

static int run_one(run_ctx *ctx, const char *label, const workload_config *wl,
                   double reference_p50_ms, analysis_summary *summary, bool *complete, char *err)
{
    run_cfg *rc = ctx->rc;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", rc->out, label);
    if (artifacts_mkdirs(dir, err) != 0)
        return -1;
    tokenlog log;
    tokenlog_init(&log);
    embedded server = {0};
    bool have_server = false;
    stream_client *client = NULL;
    FILE *tokens = NULL, *requests = NULL;
    json_t *config = NULL;
    driver_result res = {0};
    int status = -1;
    *complete = false;

    char target[512];
    if (rc->target[0]) {
        snprintf(target, sizeof target, "%s", rc->target);
    } else {
        if (embedded_start(rc, ctx->argc, ctx->argv, ctx->pass, ctx->n_pass, dir, &server, err) != 0)
            goto done;
        have_server = true;
        snprintf(target, sizeof target, "%s", server.url);
        if (!rc->json)
            fprintf(stderr, "[%s] embedded server pid %d at %s\n", label, (int)server.pid, server.url);
    }
    stream_options so = {0};
    so.base_url = target;
    so.api_key = rc->api_key;
    so.headers = rc->headers;
    so.n_headers = rc->n_headers;
    so.idle_timeout_ns = rc->request_timeout_ns;
    so.max_streams = wl->users + 64;
    so.insecure = rc->insecure;
    if (wait_ready(&so, have_server ? SERVER_START_TIMEOUT_NS : TARGET_READY_TIMEOUT_NS,
                   have_server ? &server : NULL, err) != 0)
        goto done;
    if (!(client = stream_create(&so, err)))
        goto done;
    stream_transport t = stream_client_transport(client);
    if (!ctx->probed) {
        if (rc->model_name[0])
            snprintf(ctx->api.model, sizeof ctx->api.model, "%s", rc->model_name);
        else
            resolve_model_name(&so, &ctx->api);
        if (driver_probe(&t, &ctx->api, wl, 30 * CLOCK_NS_PER_S, stderr, err) != 0)
            goto done;
        ctx->probed = true;
    }

    stop_ctx sc = {have_server ? &server : NULL};
    progress_ctx pc = {label, isatty(STDERR_FILENO) == 1, false};
    if (!(tokens = open_csv(dir, "tokens.csv", tokenlog_write_events_header, err)) ||
        !(requests = open_csv(dir, "requests.csv", tokenlog_write_requests_header, err)))
        goto done;
    driver_phase ph = {
        .wl = wl,
        .api = &ctx->api,
        .salt = wl->inject ? 1 : 0,
        .record = true,
        .warmup_ns = rc->warmup_ns,
        .tokens_csv = tokens,
        .requests_csv = requests,
        .notes = stderr,
        .progress = on_progress,
        .progress_ctx = &pc,
        .progress_every_ns = pc.tty ? PROGRESS_TTY_NS : PROGRESS_PLAIN_NS,
        .should_stop = should_stop,
        .stop_ctx = &sc,
    };
    if (driver_run_phase(&t, &ph, &log, &res, err) != 0)
        goto done;
    progress_done(&pc);
    fclose(tokens);
    fclose(requests);
    tokens = requests = NULL;
    stream_free(client);
    client = NULL;
    *complete = res.complete;
    if (!res.complete) {
        fprintf(stderr, "stallscope run: the %s run stopped early: %s\n", label, res.error);
        if (have_server && embedded_poll_exit(&server)) {
            char how[128];
            describe_exit(server.status, how, sizeof how);
            fprintf(stderr, "stallscope run: the embedded server (pid %d) %s (log: %s)\n",
                    (int)server.pid, how, server.log_path);
        }
    }

    if (have_server) {
        embedded_stop(&server);
        if (load_steps(server.step_log, res.t0_ns, res.t_end_ns, &log, err) != 0)
            goto done;
        if (res.complete)
            unlink(server.step_log);
    }

    const char *engine = ctx->engine;
    char engine_remote[192];
    if (rc->target[0]) {
        snprintf(engine_remote, sizeof engine_remote, "remote %s",
                 ctx->api.model[0] ? ctx->api.model : "(unnamed model)");
        engine = engine_remote;
    }
    config = cli_config_to_json(label, engine, target, wl, rc->target[0] ? NULL : &ctx->cost,
                                rc->target[0] ? NULL : &ctx->sched, ctx->argc, ctx->argv);
    if (config) {
        json_object_set_new(config, "complete", json_boolean(res.complete));
        json_t *client_cfg = json_object();
        json_object_set_new(client_cfg, "endpoint",
                            json_string(driver_endpoint_path(ctx->api.endpoint)));
        json_object_set_new(client_cfg, "model_name", json_string(ctx->api.model));
        json_object_set_new(client_cfg, "token_id_prompts", json_boolean(ctx->api.token_ids));
        json_object_set_new(client_cfg, "text_overhead", json_real(ctx->api.text_overhead));
        json_object_set_new(client_cfg, "text_tokens_per_word", json_real(ctx->api.text_per_word));
        json_object_set_new(client_cfg, "request_timeout_ns", json_integer(rc->request_timeout_ns));
        json_object_set_new(client_cfg, "warmup_ns", json_integer(rc->warmup_ns));
        json_object_set_new(client_cfg, "timestamps", json_boolean(ctx->api.timestamps));
        json_object_set_new(client_cfg, "nice", json_integer(getpriority(PRIO_PROCESS, 0)));
        /* t = 0 on this machine's CLOCK_MONOTONIC: aligns server-side logs (a --target
         * stallscope serve --step-log) with tokens.csv. */
        json_object_set_new(client_cfg, "t0_monotonic_ns", json_integer(res.t0_ns));
        json_object_set_new(config, "client", client_cfg);
    }
    analysis_options opt = {.label = label,
                            .engine = engine,
                            .target = target,
                            .duration_s = (double)wl->duration_ns / 1e9,
                            .users = wl->users,
                            .threshold_ms = rc->threshold_ms,
                            .reference_p50_ms = reference_p50_ms,
                            .complete = res.complete};
    if (artifacts_write_run(rc->out, &log, &opt, config, summary, err) != 0)
        goto done;
    write_fidelity(dir, label, &res, rc->json);
    if (!rc->json)
        fprintf(stderr, "[%s] %lld token events, %lld requests, %lld errors, %lld steps logged\n",
                label, (long long)log.n_events, (long long)res.requests, (long long)res.errors,
                (long long)log.n_steps);
    status = 0;
done:
    if (tokens)
        fclose(tokens);
    if (requests)
        fclose(requests);
    stream_free(client);
    if (have_server)
        embedded_stop(&server);
    json_decref(config);
    driver_result_free(&res);
    tokenlog_free(&log);
    return status;
}

/* ---- the command ----------------------------------------------------------------------- */

int cli_run(int argc, char **argv)
{
    char err[ERR_LEN];
    cli_engine_cfg eng;
    cli_sched_cfg sch;
    cli_workload_cfg wl;
    run_cfg rc;
    memset(&rc, 0, sizeof rc);
    strcpy(rc.engine_kind, "cpu");
    strcpy(rc.out, "out");
    rc.request_timeout_ns = 30 * CLOCK_NS_PER_S;
    rc.warmup_ns = 2 * CLOCK_NS_PER_S;
    cli_engine_defaults(&eng);
    cli_sched_defaults(&sch);
    if (cli_workload_defaults(&wl, argc, argv, err) != 0)
        return cli_usage_error("run", err);
    opts_group groups[] = {
        cli_workload_group(&wl),
        {"run", run_specs, (int)(sizeof run_specs / sizeof run_specs[0]), &rc},
        cli_engine_group(&eng),
        cli_sched_group(&sch),
    };
    int n_groups = (int)(sizeof groups / sizeof groups[0]);
    if (opts_wants_help(argc, argv)) {
        opts_print_help(
            stdout, "stallscope run [options]",
            "Reproduce long-prompt interference over HTTP: background streaming chats (closed\n"
            "loop) plus an injector of long prompts (open loop, absolute schedule) against an\n"
            "OpenAI-compatible server, every token stamped as it is read. Runs a baseline\n"
            "(injector off) then the interference run; writes OUT/<run>/{tokens,requests,steps}.csv,\n"
            "summary.json, config.json, fidelity.json and OUT/comparison.json, then prints the\n"
            "table and the verdict. Without --target it starts the embedded server (a fresh one\n"
            "per run) with the engine and scheduler flags below; default: the lesson, one-step\n"
            "prefill on the real CPU engine (model 'small'); --engine emulate --gpu h100-sxm\n"
            "--model llama-3.1-8b for the lesson's GPU numbers.",
            groups, n_groups);
        return CLI_EXIT_OK;
    }
    if (opts_parse(argc, argv, groups, n_groups, NULL, 0, NULL, err) != 0)
        return cli_usage_error("run", err);
    wl.wl.inject = true;
    if (workload_check(&wl.wl, err) != 0)
        return cli_usage_error("run", err);

    run_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.rc = &rc;
    ctx.argc = argc;
    ctx.argv = argv;
    ctx.pass = &groups[2];
    ctx.n_pass = 2;
    if (!rc.target[0] && strcmp(rc.engine_kind, "cpu") == 0)
        cli_engine_cpu_defaults(&eng);
    if (cli_engine_resolve(&eng, &ctx.cost, err) != 0 ||
        cli_sched_resolve(&sch, &ctx.cost, eng.gpu_memory_utilization, err) != 0)
        return cli_usage_error("run", err);
    ctx.sched = sch.sched;
    if (rc.print_flags) {
        print_server_flags(&wl.wl, &ctx.sched);
        return CLI_EXIT_OK;
    }
    driver_api_defaults(&ctx.api);
    ctx.api.endpoint = rc.endpoint;
    if (!rc.target[0]) {
        /* Our own server: ids from the model's vocabulary, and its emit times. */
        ctx.api.vocab = ctx.cost.arch.vocab;
        ctx.api.timestamps = true;
        if (ctx.cost.arch.max_position > 0 && wl.wl.prompt_tokens + wl.wl.inject_max_tokens >
                                                  ctx.sched.max_model_len)
            return cli_usage_error("run", "the injected prompt plus its answer exceed "
                                          "--max-model-len");
    } else {
        ctx.api.timestamps = rc.fidelity;
    }
    /* "emulate h100-sxm llama-3.1-8b mixed/16384", "cpu small mixed/16384" (the device of
     * the cpu engine is this machine, named only when a --hardware profile names it). */
    const bool device_is_kind = strcmp(ctx.cost.gpu.name, rc.engine_kind) == 0;
    snprintf(ctx.engine, sizeof ctx.engine, "%s%s%s %s %s/%d", rc.engine_kind,
             device_is_kind ? "" : " ", device_is_kind ? "" : ctx.cost.gpu.name,
             ctx.cost.arch.name, sched_policy_name(ctx.sched.policy),
             ctx.sched.max_num_batched_tokens);
    if (artifacts_mkdirs(rc.out, err) != 0) {
        fprintf(stderr, "stallscope run: %s\n", err);
        return CLI_EXIT_FAIL;
    }

    /* A load generator that measures latency in ms wants the CPU when bytes arrive, not
     * after a compiler's time slice: ask for nice -10 (works as root, else stays 0; the
     * embedded server inherits it). */
    int nice_before = getpriority(PRIO_PROCESS, 0);
    if (nice_before > -10 && setpriority(PRIO_PROCESS, 0, -10) != 0 && !rc.json)
        fprintf(stderr, "stallscope run: note: cannot raise priority (%s); timings may suffer "
                        "from other load on this machine\n",
                strerror(errno));

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    analysis_summary baseline, interference;
    memset(&baseline, 0, sizeof baseline);
    memset(&interference, 0, sizeof interference);
    bool have_baseline = false, complete = true;
    int status = CLI_EXIT_FAIL;
    double reference_p50 = 0;
    if (!rc.no_baseline) {
        workload_config base = wl.wl;
        base.inject = false;
        if (run_one(&ctx, "baseline", &base, 0, &baseline, &complete, err) != 0) {
            fprintf(stderr, "stallscope run: %s\n", err);
            goto done;
        }
        have_baseline = true;
        if (!complete)
            goto done; /* no comparison against half a baseline */
        reference_p50 = baseline.itl_ms.p50;
    }
    if (run_one(&ctx, "interference", &wl.wl, reference_p50, &interference, &complete, err) != 0) {
        fprintf(stderr, "stallscope run: %s\n", err);
        goto done;
    }
    if (artifacts_finish(rc.out, have_baseline ? &baseline : NULL, &interference, rc.json, err) !=
        0) {
        fprintf(stderr, "stallscope run: %s\n", err);
        analysis_summary_free(&interference);
        goto done;
    }
    analysis_summary_free(&interference);
    status = complete ? CLI_EXIT_OK : CLI_EXIT_FAIL;
    if (!complete)
        fprintf(stderr, "stallscope run: incomplete: the artifacts in %s hold every token "
                        "received, summary.json says \"complete\": false\n",
                rc.out);
done:
    if (have_baseline)
        analysis_summary_free(&baseline);
    return status;
}
