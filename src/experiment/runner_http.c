/* runner_http — a run over HTTP: background chats and the injector (client/driver) against
 * an OpenAI-compatible server, every token stamped as it is read.
 *
 * Without a target each run gets a fresh embedded server: this binary's `serve --config
 * DIR/config.json` on a free loopback port (a child in its own process group that dies with
 * us), so each run's steps.csv comes from its own engine and no state (KV cache, queues)
 * leaks from the baseline into the interference run. The server runs exactly the
 * configuration the run records. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "client/driver.h"
#include "client/fetch.h"
#include "client/scrape.h"
#include "client/transport.h"
#include "client/transport_kind.h"
#include "client/url.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/fsio.h"
#include "common/proc.h"
#include "common/redact.h"
#include "common/units.h"
#include "experiment/config.h"
#include "experiment/config_json.h"
#include "experiment/runner.h"
#include "experiment/shard.h"

/* The cpu engine's warm start (buffers touched, one budget-sized step) comes before the
 * ready line: seconds on a quiet machine, several times that on a loaded one or in the
 * sanitizer build. */
#define SERVER_START_TIMEOUT_NS (180 * CLOCK_NS_PER_S)
#define SERVER_STOP_GRACE_NS (5 * CLOCK_NS_PER_S)
#define TARGET_READY_TIMEOUT_NS (3 * CLOCK_NS_PER_S)
#define PROBE_TIMEOUT_NS (30 * CLOCK_NS_PER_S)
#define PROGRESS_TTY_NS (200 * CLOCK_NS_PER_MS)
#define PROGRESS_PLAIN_NS (5 * CLOCK_NS_PER_S)

typedef struct http_runner {
    const experiment_secrets *secrets;
    driver_api api;
    bool probed;
    int nice_errno; /* why the priority could not be raised (0: it was, or needed not be) */
    bool warned_cpus; /* the client threads' warning is said once per runner */
} http_runner;

/* ---- the embedded server ---------------------------------------------------------------- */

typedef struct embedded {
    proc child;
    char url[128];
    char log_path[4200];
    char step_log[4200];
    char sched_log[4200];
} embedded;

/* Ready once it printed "listening on http://HOST:PORT" (its URL). */
static bool listening(void *ctx, char *why, size_t size)
{
    embedded *e = ctx;
    FILE *f = fopen(e->log_path, "r");
    char line[512];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "listening on http://");
        if (!at)
            continue;
        at += strlen("listening on ");
        size_t len = strcspn(at, " \r\n");
        if (len < sizeof e->url) {
            memcpy(e->url, at, len);
            e->url[len] = '\0';
            found = true;
        }
    }
    if (f)
        fclose(f);
    if (!found)
        snprintf(why, size, "no 'listening on' line in %s yet", e->log_path);
    return found;
}

/* The last lines of the server's log, to show why it failed. */
static void print_log_tail(FILE *out, const char *path)
{
    FILE *f = out ? fopen(path, "r") : NULL;
    if (!f)
        return;
    char lines[8][256];
    int n = 0;
    while (fgets(lines[n % 8], sizeof lines[0], f))
        n++;
    fclose(f);
    for (int i = n > 8 ? n - 8 : 0; i < n; i++)
        fprintf(out, "  server: %s%s", lines[i % 8], strchr(lines[i % 8], '\n') ? "" : "\n");
}

static int embedded_start(const experiment_phase *ph, embedded *e, char *err)
{
    memset(e, 0, sizeof *e);
    char config[4200];
    if (fsio_join(e->log_path, sizeof e->log_path, ph->dir, "server.log", err) != 0 ||
        fsio_join(e->step_log, sizeof e->step_log, ph->dir, "server_steps_raw.csv", err) != 0 ||
        fsio_join(e->sched_log, sizeof e->sched_log, ph->dir, "server_sched_raw.csv", err) != 0 ||
        fsio_join(config, sizeof config, ph->dir, "config.json", err) != 0)
        return -1;
    unlink(e->step_log);
    unlink(e->sched_log);
    char *argv[] = {"stallscope", "serve", "--host", "127.0.0.1", "--port", "0",
                    "--step-log", e->step_log, "--sched-events", e->sched_log,
                    "--config", config, NULL};
    proc_spec spec = {.argv = argv, .exe = "/proc/self/exe", .log_path = e->log_path,
                      .die_with_parent = true};
    if (proc_start(&e->child, &spec, err) != 0)
        return -1;
    char why[ERR_LEN];
    if (proc_wait_ready(&e->child, listening, e, SERVER_START_TIMEOUT_NS, 10 * CLOCK_NS_PER_MS,
                        ph->interrupted, why) != 0) {
        proc_stop(&e->child, 0);
        print_log_tail(ph->notes, e->log_path);
        return err_set(err, "the embedded server: %s (log: %s)", why, e->log_path);
    }
    return 0;
}

static void embedded_stop(embedded *e, FILE *notes)
{
    if (e->child.pid <= 0 || proc_exited(&e->child))
        return;
    if (!proc_stop(&e->child, SERVER_STOP_GRACE_NS) && notes)
        fprintf(notes, "stallscope: the embedded server ignored SIGTERM; killed it\n");
}

/* ---- readiness, model name ---------------------------------------------------------------- */

typedef struct health_check {
    const transport_options *so;
    bool need_200; /* the embedded server has /health; someone else's may not */
} health_check;

/* Answers HTTP at all (any status), or 200 where /health is known to exist. */
static bool answers(void *ctx, char *why, size_t size)
{
    health_check *h = ctx;
    int status = 0;
    char err[ERR_LEN] = "";
    if (fetch_http(h->so, "GET", "/health", NULL, CLOCK_NS_PER_S, &status, NULL, err) != 0) {
        snprintf(why, size, "%s", err);
        return false;
    }
    if (status == 200 || !h->need_200)
        return true;
    snprintf(why, size, "/health answered HTTP %d", status);
    return false;
}

static int wait_ready(const transport_options *so, embedded *server, const experiment_phase *ph,
                      char *err)
{
    health_check h = {so, server != NULL};
    char why[ERR_LEN] = "";
    if (server) {
        if (proc_wait_ready(&server->child, answers, &h, SERVER_START_TIMEOUT_NS,
                            50 * CLOCK_NS_PER_MS, ph->interrupted, why) == 0)
            return 0;
        return err_set(err, "the server at %s is not reachable: %s", so->base_url, why);
    }
    int64_t deadline = clock_now_ns() + TARGET_READY_TIMEOUT_NS;
    while (!answers(&h, why, sizeof why)) {
        if (ph->interrupted && *ph->interrupted)
            return err_set(err, "interrupted");
        if (clock_now_ns() >= deadline)
            return err_set(err, "the server at %s is not reachable: %s", so->base_url, why);
        clock_sleep_until_ns(clock_now_ns() + 50 * CLOCK_NS_PER_MS);
    }
    return 0;
}

/* GET /v1/models: the target's first model names the requests' (unless --model-name), and a
 * 401/403 here is the first thing said, with the flag that fixes it. */
static int check_models(const transport_options *so, driver_api *api, bool want_name, FILE *notes,
                        char *err)
{
    int status = 0;
    char *body = NULL, herr[ERR_LEN];
    if (fetch_http(so, "GET", "/v1/models", NULL, 5 * CLOCK_NS_PER_S, &status, &body, herr) != 0)
        status = 0; /* no answer here: the probe request will say what is wrong */
    if (status == 401 || status == 403) {
        free(body);
        return err_set(err, "the target refused our credentials (HTTP %d on GET /v1/models): %s "
                            "(--api-key KEY or OPENAI_API_KEY for a bearer token, --header "
                            "'Name: value' for another scheme)",
                       status, so->api_key ? "is the key right?" : "it needs a key");
    }
    if (want_name && status == 200) {
        json_t *root = json_loads(body, 0, NULL);
        json_t *first = json_array_get(json_object_get(root, "data"), 0);
        const char *id = json_string_value(json_object_get(first, "id"));
        if (id)
            snprintf(api->model, sizeof api->model, "%s", id);
        json_decref(root);
    }
    free(body);
    if (want_name && !api->model[0] && notes)
        fprintf(notes, "stallscope: note: /v1/models named no model; requests carry no "
                       "\"model\" (use --model-name)\n");
    return 0;
}

/* ---- the client's transports ------------------------------------------------------------------ */

/* Every transport of a run comes from here: one per event loop, and the probe's. The
 * raw-socket transport plugs in at this one place. */
/* What every loop's transport is made of: the options and the resolved kind. */
typedef struct transport_ctx {
    const transport_options *so;
    transport_kind kind;
} transport_ctx;

static int open_transport(void *ctx, int loop, transport *out, char *err)
{
    const transport_ctx *tc = ctx;
    (void)loop; /* every loop talks to the same server the same way */
    return transport_kind_create(tc->kind, tc->so, out, err);
}

static void close_transport(void *ctx, int loop, transport *t)
{
    (void)ctx, (void)loop;
    if (t->impl)
        t->destroy(t->impl);
    t->impl = NULL;
}

/* ---- progress and stopping ------------------------------------------------------------------ */

typedef struct progress_ctx {
    const char *label;
    FILE *out;
    bool tty;
    bool printed;
} progress_ctx;

static void on_progress(void *ctx, const driver_progress *p)
{
    progress_ctx *pc = ctx;
    char worst[32], stalls[32] = "";
    units_format_duration(p->worst_gap_ns, worst, sizeof worst);
    if (p->stalls >= 0)
        snprintf(stalls, sizeof stalls, "%sstalls %lld", p->final ? ", " : "  ",
                 (long long)p->stalls);
    char line[256];
    if (p->final) /* the run is over: its totals, nothing that reads like a stall */
        snprintf(line, sizeof line,
                 "[%s] done: %.1f s, %lld tokens (%.0f tok/s), injections %d/%d%s, worst gap %s, "
                 "errors %lld",
                 pc->label, (double)p->elapsed_ns / 1e9, (long long)p->tokens, p->tokens_per_s,
                 p->injections_sent, p->injections_planned, stalls, worst, (long long)p->errors);
    else
        snprintf(line, sizeof line,
                 "[%s] %5.1f/%.0f s  %7.0f tok/s  %4d streams  injections %d/%d%s  worst gap %s  "
                 "errors %lld",
                 pc->label, (double)p->elapsed_ns / 1e9, (double)p->duration_ns / 1e9,
                 p->tokens_per_s, p->active, p->injections_sent, p->injections_planned, stalls,
                 worst, (long long)p->errors);
    if (pc->tty) {
        fprintf(pc->out, "\r\033[K%s", line);
        pc->printed = true;
    } else {
        fprintf(pc->out, "%s\n", line);
    }
    fflush(pc->out);
}

static void progress_done(progress_ctx *pc)
{
    if (pc->tty && pc->printed)
        fputc('\n', pc->out);
    pc->printed = false;
}

typedef struct stop_ctx {
    embedded *server; /* NULL with a target */
    const volatile sig_atomic_t *interrupted;
} stop_ctx;

static bool should_stop(void *ctx, char *why, size_t size)
{
    stop_ctx *sc = ctx;
    if (sc->interrupted && *sc->interrupted) {
        snprintf(why, size, "interrupted");
        return true;
    }
    if (sc->server && proc_exited(&sc->server->child)) {
        char how[128];
        proc_describe(&sc->server->child, how, sizeof how);
        snprintf(why, size, "the embedded server (pid %d) %s", (int)sc->server->child.pid, how);
        return true;
    }
    return false;
}

/* ---- artifacts of the run -------------------------------------------------------------------- */

static int open_csv(tokenlog_writer *w, const char *dir, const char *name, tokenlog_file kind,
                    char *err)
{
    char path[4200];
    if (fsio_join(path, sizeof path, dir, name, err) != 0)
        return -1;
    return tokenlog_writer_open(w, path, kind, err);
}

/* Token events the run recorded: the log's, or (held only until written) the stamps'. */
static int64_t recorded_events(const driver_result *res, const tokenlog *log)
{
    if (!res->events_dropped)
        return log->n_events;
    int64_t n = 0;
    for (int k = 0; k < TRANSPORT_STAMP_KINDS; k++)
        n += res->stamps[k];
    return n;
}

static int write_fidelity(const experiment_phase *ph, driver_result *res,
                          const experiment_meta *meta, char *err)
{
    json_t *root = json_object();
    json_object_set_new(root, "label", json_string(ph->label));
    json_object_set_new(root, "stamps", experiment_stamps_json(meta));
    /* What the server sent that the client did not believe (docs/reference/run.md): the total of
     * summary.json, and by kind. */
    json_t *kinds = json_object();
    for (int k = CHUNK_VIOLATION_NONE + 1; k < CHUNK_VIOLATION_KINDS; k++)
        json_object_set_new(kinds, chunk_violation_name((chunk_violation)k),
                            json_integer(res->violations_by_kind[k]));
    json_object_set_new(root, "protocol_violations", json_integer(res->protocol_violations));
    json_object_set_new(root, "violations_by_kind", kinds);
    if (res->n_fidelity > 0) {
        analysis_dist d;
        analysis_dist_from(res->fidelity_ms, res->n_fidelity, &d);
        json_object_set_new(root, "what",
                            json_string("client timestamp error: receive stamp minus the "
                                        "server's emit_ns, same CLOCK_MONOTONIC"));
        json_object_set_new(root, "events", json_integer(d.count));
        json_object_set_new(root, "mean_us", json_real(d.mean * 1e3));
        json_object_set_new(root, "p50_us", json_real(d.p50 * 1e3));
        json_object_set_new(root, "p99_us", json_real(d.p99 * 1e3));
        json_object_set_new(root, "p999_us", json_real(d.p999 * 1e3));
        json_object_set_new(root, "max_us", json_real(d.max * 1e3));
        if (ph->notes && !ph->quiet)
            fprintf(ph->notes, "[%s] client timestamp error (receive - emit): p50 %.0f us, p99 "
                               "%.0f us, max %.0f us over %lld events\n",
                    ph->label, d.p50 * 1e3, d.p99 * 1e3, d.max * 1e3, (long long)d.count);
    }
    char path[4200];
    int rc = fsio_join(path, sizeof path, ph->dir, "fidelity.json", err);
    if (rc == 0)
        rc = fsio_write_json(path, root, JSON_INDENT(2) | JSON_REAL_PRECISION(6), err);
    json_decref(root);
    int64_t events = meta->stamps_kernel + meta->stamps_kernel_coalesced + meta->stamps_user;
    if (rc == 0 && ph->notes && !ph->quiet && events > 0)
        fprintf(ph->notes, "[%s] %s transport, stamps: %.1f %% kernel, %.1f %% kernel "
                           "(coalesced: a bound), %.1f %% user space%s\n",
                ph->label, meta->transport, 100.0 * (double)meta->stamps_kernel / (double)events,
                100.0 * (double)meta->stamps_kernel_coalesced / (double)events,
                100.0 * (double)meta->stamps_user / (double)events,
                meta->stamps_user > 0 && strcmp(meta->transport, "raw") == 0
                    ? " (where the kernel gave none)"
                    : "");
    return rc;
}

/* ---- the server's own metrics ------------------------------------------------------------ */

#define METRICS_PROBE_TIMEOUT_NS (2 * CLOCK_NS_PER_S)

/* Where to scrape (--scrape-metrics): "" when not at all. */
static void metrics_url(const experiment_config *cfg, const char *server_url, bool remote,
                        char *out, size_t size)
{
    const char *want = cfg->client.scrape_metrics;
    out[0] = '\0';
    if (strcmp(want, "off") == 0 || (!want[0] && !remote))
        return;
    if (want[0] && strcmp(want, "on") != 0) {
        snprintf(out, size, "%s", want);
        return;
    }
    if (url_join(server_url, "/metrics", out, size) != 0) /* the target's query too */
        out[0] = '\0'; /* cannot be longer than the target, which fits */
}

/* Probe the exposition once and start the scraper on its own thread; NULL (and one line
 * saying why) when the server has none this run can read: the run goes on without. */
static scraper *metrics_start(const experiment_phase *ph, const transport_options *so,
                              experiment_meta *meta)
{
    char url[512];
    metrics_url(ph->cfg, so->base_url, ph->cfg->engine == EXPERIMENT_REMOTE, url, sizeof url);
    char path[4200], err[ERR_LEN] = "";
    if (fsio_join(path, sizeof path, ph->dir, "server_metrics.csv", err) != 0)
        return NULL;
    unlink(path);
    if (!url[0])
        return NULL;
    scrape_options opt = {.so = *so, .csv_path = path};
    opt.so.base_url = url;
    scraper *s = NULL;
    char answered[sizeof url];
    if (scrape_probe(&opt.so, METRICS_PROBE_TIMEOUT_NS, answered, sizeof answered, err) == 0) {
        opt.so.base_url = answered;
        s = scrape_start(&opt, err);
    }
    if (!s) {
        if (ph->notes && !ph->quiet)
            fprintf(ph->notes, "[%s] server metrics: not scraped, going on without: %s; "
                               "--scrape-metrics URL points elsewhere, off stops asking\n",
                    ph->label, err);
        return NULL;
    }
    redact_url(answered, meta->metrics_url, sizeof meta->metrics_url);
    return s;
}

typedef struct metrics_window {
    scraper *scraper;
    int64_t duration_ns;
} metrics_window;

static void on_t0(void *ctx, int64_t t0_ns)
{
    metrics_window *w = ctx;
    scrape_set_window(w->scraper, t0_ns, t0_ns + w->duration_ns);
}

static void metrics_stop(const experiment_phase *ph, scraper **s, experiment_meta *meta)
{
    if (!*s)
        return;
    scrape_stats st;
    scrape_stop(*s, &st);
    *s = NULL;
    meta->metrics_scrapes = st.scrapes;
    meta->metrics_scrape_failures = st.failures;
    meta->metrics_rows = st.rows;
    char late[96] = "";
    if (st.late > 0)
        snprintf(late, sizeof late, ", %lld periods skipped (a scrape outlasted its 250 ms)",
                 (long long)st.late);
    if (ph->notes && !ph->quiet)
        fprintf(ph->notes, "[%s] server metrics: %lld rows in server_metrics.csv from %lld "
                           "scrapes of %s, %lld failed%s%s%s%s\n",
                ph->label, (long long)st.rows, (long long)st.scrapes, meta->metrics_url,
                (long long)st.failures, st.first_error[0] ? " (first: " : "", st.first_error,
                st.first_error[0] ? ")" : "", late);
}

/* ---- one run ----------------------------------------------------------------------------------- */

/* The server of this run: a --target (its URL redacted into the record), or a fresh
 * embedded one. 0, or -1 with err. */
static int server_up(const experiment_phase *ph, embedded *server, experiment_meta *meta,
                     char *err)
{
    const experiment_config *cfg = ph->cfg;
    if (cfg->engine == EXPERIMENT_REMOTE) {
        redact_url(cfg->client.target, meta->target, sizeof meta->target); /* the record's */
        return 0;
    }
    if (embedded_start(ph, server, err) != 0)
        return -1;
    snprintf(meta->target, sizeof meta->target, "%s", server->url);
    if (ph->notes && !ph->quiet)
        fprintf(ph->notes, "[%s] embedded server pid %d at %s\n", ph->label,
                (int)server->child.pid, server->url);
    return 0;
}

/* The client's threads beside the server: said with the setup; too many, warned once. */
static void client_cpus(http_runner *hr, const experiment_phase *ph, experiment_client_cpus *cpus)
{
    experiment_client_cpus_of(ph->cfg, cpus);
    char cpus_line[320];
    const bool over = experiment_client_cpus_describe(cpus, ph->cfg, cpus_line, sizeof cpus_line);
    FILE *warn_to = ph->quiet ? stderr : ph->notes;
    if (over && !hr->warned_cpus && warn_to)
        fprintf(warn_to, "stallscope: %s\n", cpus_line);
    else if (!over && ph->notes && !ph->quiet)
        fprintf(ph->notes, "[%s] %s\n", ph->label, cpus_line);
    hr->warned_cpus = hr->warned_cpus || over;
}

/* The connection takes the URL as given, credentials and all; meta->target is the record's. */
static transport_options connection(const http_runner *hr, const experiment_phase *ph,
                                 const char *url)
{
    const experiment_config *cfg = ph->cfg;
    return (transport_options){
        .base_url = url,
        .api_key = hr->secrets ? hr->secrets->api_key : NULL,
        .headers = hr->secrets ? hr->secrets->headers : NULL,
        .n_headers = hr->secrets ? hr->secrets->n_headers : 0,
        .idle_timeout_ns = cfg->client.request_timeout_ns,
        /* Each loop has a share, but a file descriptor limit sized for all is one limit. */
        .max_streams = ph->wl->users + 64 +
                       (workload_open_loop(ph->wl)
                            ? (ph->wl->max_concurrency > 0 ? ph->wl->max_concurrency : 256)
                            : 0),
        .insecure = cfg->client.insecure,
    };
}

/* The first run's first contact: the API the requests speak (the model's name, token-id
 * prompts or calibrated text), found once per runner. 0, or -1 with err. */
static int first_contact(http_runner *hr, const experiment_phase *ph, const transport_options *so,
                         transport_ctx *tc, char *err)
{
    const experiment_config *cfg = ph->cfg;
    const bool remote = cfg->engine == EXPERIMENT_REMOTE;
    if (hr->nice_errno && ph->notes && !ph->quiet)
        fprintf(ph->notes, "stallscope: note: cannot raise priority (%s); timings may suffer "
                           "from other load on this machine\n",
                strerror(hr->nice_errno));
    driver_api_defaults(&hr->api);
    hr->api.endpoint = cfg->client.endpoint;
    /* Our own server: ids from the model's vocabulary, and its emit times. */
    hr->api.vocab = remote ? hr->api.vocab : cfg->cost.arch.vocab;
    hr->api.timestamps = remote ? cfg->client.fidelity : true;
    hr->api.request_ids = !remote; /* its sched log names them as the run's files do */
    hr->api.extra_body = cfg->client.extra_body;
    if (cfg->client.model_name[0])
        snprintf(hr->api.model, sizeof hr->api.model, "%s", cfg->client.model_name);
    if (check_models(so, &hr->api, !cfg->client.model_name[0], ph->notes, err) != 0)
        return -1;
    transport probe;
    if (open_transport(tc, 0, &probe, err) != 0)
        return -1;
    int rc = driver_probe(&probe, &hr->api, ph->wl, PROBE_TIMEOUT_NS, ph->notes, err);
    close_transport(tc, 0, &probe);
    if (rc != 0)
        return -1;
    hr->probed = true;
    return 0;
}

/* What the client learned, for config.json. */
static void record_learned(const http_runner *hr, const experiment_phase *ph,
                           const driver_result *res, const experiment_shard_start *shard_start,
                           experiment_meta *meta)
{
    meta->has_client = true;
    snprintf(meta->served_model, sizeof meta->served_model, "%s", hr->api.model);
    meta->token_id_prompts = hr->api.token_ids;
    meta->text_overhead = hr->api.text_overhead;
    meta->text_tokens_per_word = hr->api.text_per_word;
    meta->timestamps = hr->api.timestamps;
    meta->nice = getpriority(PRIO_PROCESS, 0);
    /* t = 0 on this machine's CLOCK_MONOTONIC: aligns server-side logs (a --target
     * stallscope serve --step-log) with tokens.csv. */
    meta->t0_monotonic_ns = res->t0_ns;
    experiment_shard_record(shard_start, res->t0_ns, meta); /* and on the wall clock */
    meta->protocol_violations = res->protocol_violations;
    meta->ended_ns = res->drained ? res->t_end_ns - res->t0_ns : 0;
    meta->stamps_kernel = res->stamps[TRANSPORT_STAMP_KERNEL];
    meta->stamps_kernel_coalesced = res->stamps[TRANSPORT_STAMP_KERNEL_COALESCED];
    meta->stamps_user = res->stamps[TRANSPORT_STAMP_USER];
    if (ph->cfg->engine == EXPERIMENT_REMOTE)
        experiment_engine_name(ph->cfg, hr->api.model, meta->engine_name,
                               sizeof meta->engine_name);
}

/* The whole log, in request order, replaces the incremental copies (atomically: when it
 * cannot, the incremental copies stay). A phase stopped by a failed write (a full disk)
 * keeps its own reason: it is the first cause, this one only follows from it. 0, or -1 with
 * err. */
static int write_record(const experiment_phase *ph, const tokenlog *log, driver_result *res,
                        const experiment_meta *meta, char *err)
{
    char why[ERR_LEN];
    if (res->events_dropped) {
        /* The events left memory as they were written: the incremental tokens.csv and
         * requests.csv stay (their request ids agree), steps.csv joins them. */
        ph->streaming->events_on_disk = true;
        if (tokenlog_write_steps(log, ph->dir, why) != 0 || write_fidelity(ph, res, meta, why) != 0)
            return err_set(err, "%s", res->complete ? why : res->error);
    } else if (tokenlog_write_dir(log, ph->dir, why) != 0 ||
               write_fidelity(ph, res, meta, why) != 0) {
        return err_set(err, "%s", res->complete ? why : res->error);
    }
    return 0;
}

/* Prompts sent as text, checked against the server's count of them: off by more than this
 * (the total) or EXPERIMENT_TEXT_WORST (one request), the calibration does not hold. */
#define EXPERIMENT_TEXT_DRIFT 0.05
#define EXPERIMENT_TEXT_WORST 0.10

/* The run's totals, the open loop's plan and its waits for a slot; with text prompts, how
 * the server counted them against the plan. */
static void say_totals(const experiment_phase *ph, const tokenlog *log, const driver_result *res,
                       bool text)
{
    if (ph->notes && !ph->quiet)
        fprintf(ph->notes, "[%s] %lld token events%s, %lld requests, %lld errors, %lld steps logged\n",
                ph->label, (long long)recorded_events(res, log),
                res->events_dropped ? " (each held only until written)" : "",
                (long long)res->requests, (long long)res->errors, (long long)log->n_steps);
    FILE *say = ph->quiet ? stderr : ph->notes; /* said even with --json */
    analysis_prompt_tokens pt;
    analysis_prompt_count(log, &pt);
    if (say && text && pt.requests > 0) {
        const bool off = fabs(pt.ratio - 1) > EXPERIMENT_TEXT_DRIFT || pt.worst > EXPERIMENT_TEXT_WORST;
        fprintf(say, "[%s] prompts sent as text: the server counted %lld prompt tokens where %lld "
                "were planned (%+.1f %%; the worst request %.1f %% off)%s\n",
                ph->label, (long long)pt.counted, (long long)pt.planned, (pt.ratio - 1) * 100,
                pt.worst * 100,
                off ? ": more than the text calibration allows (5 % in all, 10 % a request); "
                      "prompts that share text may not share tokens where they join: a server "
                      "that takes token-id prompts shares them exactly"
                    : "");
    }
    if (say && res->open_plan[0])
        fprintf(say, "[%s] %s\n", ph->label, res->open_plan);
    if (say && ph->wl->max_concurrency > 0)
        fprintf(say,
                "[%s] max concurrency %d: %lld of %lld open-loop requests waited for a slot, "
                "%.1f ms on average (of those that waited), %.1f ms at most; %lld still "
                "waiting at the end\n",
                ph->label, workload_shard_concurrency(ph->wl, ph->wl->shard.index),
                (long long)res->open_waited, (long long)res->open_requests,
                res->open_waited ? (double)res->open_wait_total_ns / 1e6 / (double)res->open_waited
                                 : 0.0,
                (double)res->open_wait_max_ns / 1e6,
                (long long)(res->open_planned - res->open_requests));
}

static int http_phase(void *impl, const experiment_phase *ph, tokenlog *log, experiment_meta *meta,
                      char *err)
{
    http_runner *hr = impl;
    const experiment_config *cfg = ph->cfg;
    const bool remote = cfg->engine == EXPERIMENT_REMOTE;
    if (!ph->dir)
        return err_set(err, "an HTTP run writes its artifacts as it goes: it needs a directory");
    embedded server;
    memset(&server, 0, sizeof server);
    tokenlog_writer tokens = {0}, requests = {0};
    driver_result res;
    memset(&res, 0, sizeof res);
    scraper *metrics = NULL;
    int status = -1;
    meta->complete = false;
    meta->ended_ns = 0;

    if (server_up(ph, &server, meta, err) != 0)
        goto done;
    experiment_client_cpus cpus;
    client_cpus(hr, ph, &cpus);
    const transport_options so = connection(hr, ph, remote ? cfg->client.target : server.url);
    /* The transport: raw unless a proxy applies or --transport says
     * (docs/explanation/load-generator.md). */
    transport_ctx tc = {&so, transport_kind_resolve(cfg->client.transport, so.base_url)};
    snprintf(meta->transport, sizeof meta->transport, "%s", transport_kind_name(tc.kind));
    const driver_transports transports = {open_transport, close_transport, &tc};
    if (wait_ready(&so, remote ? NULL : &server, ph, err) != 0 ||
        (!hr->probed && first_contact(hr, ph, &so, &tc, err) != 0))
        goto done;

    stop_ctx sc = {remote ? NULL : &server, ph->interrupted};
    progress_ctx pc = {ph->label, ph->notes, ph->notes && isatty(fileno(ph->notes)) == 1, false};
    if (open_csv(&tokens, ph->dir, "tokens.csv", TOKENLOG_TOKENS_CSV, err) != 0 ||
        open_csv(&requests, ph->dir, "requests.csv", TOKENLOG_REQUESTS_CSV, err) != 0)
        goto done;
    /* From before the warm-up, so the first row at t >= 0 has a previous scrape. */
    metrics = metrics_start(ph, &so, meta);
    metrics_window window = {metrics, ph->wl->duration_ns};
    /* A shard waits for the common start: its warm-up ends on the planned instant. */
    experiment_shard_start shard_start;
    int64_t warmup_ns = cfg->client.warmup_ns;
    if (experiment_shard_wait(ph, &shard_start, &warmup_ns, err) != 0)
        goto done;
    driver_phase dp = {
        .wl = ph->wl,
        .api = &hr->api,
        .salt = ph->wl->inject ? 1 : 0,
        .record = true,
        .warmup_ns = warmup_ns,
        .threads = cpus.threads,
        .stall_ns = ph->stall_threshold_ns,
        .tokens_csv = &tokens,
        .requests_csv = &requests,
        .notes = ph->notes,
        .progress = ph->notes && !ph->quiet ? on_progress : NULL,
        .progress_ctx = &pc,
        .progress_every_ns = pc.tty ? PROGRESS_TTY_NS : PROGRESS_PLAIN_NS,
        .should_stop = should_stop,
        .stop_ctx = &sc,
        /* Flat memory over a long run: past the limit the files written as the run goes are
         * its record (experiment_streaming). */
        .log_events_max = !ph->streaming || !ph->dir ? 0
                          : ph->streaming->log_events_max > 0 ? ph->streaming->log_events_max
                                                               : EXPERIMENT_LOG_EVENTS_MAX_DEFAULT,
        .on_t0 = metrics ? on_t0 : NULL,
        .t0_ctx = &window,
    };
    if (driver_run_phase(&transports, &dp, log, &res, err) != 0)
        goto done;
    progress_done(&pc);
    metrics_stop(ph, &metrics, meta);
    /* The driver flushed them; a failure stopped the phase and is in res.error. */
    tokenlog_writer_close(&tokens, NULL);
    tokenlog_writer_close(&requests, NULL);

    if (!res.complete) {
        err_set(err, "%s", res.error);
        if (!remote && proc_exited(&server.child) && ph->notes) {
            char how[128];
            proc_describe(&server.child, how, sizeof how);
            fprintf(ph->notes, "stallscope: the embedded server (pid %d) %s (log: %s)\n",
                    (int)server.child.pid, how, server.log_path);
        }
    }
    if (!remote) {
        embedded_stop(&server, ph->notes);
        char why[ERR_LEN];
        /* The server's steps and what they did to requests' places, in the run's window; the
         * places' requests named as the run's files name them. */
        if (tokenlog_read_steps(log, server.step_log, res.t0_ns, res.t_end_ns, NULL, why) != 0 ||
            tokenlog_read_sched_events(log, server.sched_log, res.t0_ns, res.t_end_ns, NULL,
                                       why) != 0 ||
            tokenlog_name_sched_events(log, res.events_dropped, why) != 0) {
            err_set(err, "%s", why);
            goto done;
        }
        if (res.complete) {
            unlink(server.step_log);
            unlink(server.sched_log);
        }
    }
    record_learned(hr, ph, &res, &shard_start, meta);
    if (write_record(ph, log, &res, meta, err) != 0)
        goto done;
    say_totals(ph, log, &res, !hr->api.token_ids);
    meta->complete = res.complete;
    status = 0;
done:
    metrics_stop(ph, &metrics, meta);
    tokenlog_writer_close(&tokens, NULL);
    tokenlog_writer_close(&requests, NULL);
    if (!remote)
        embedded_stop(&server, ph->notes);
    driver_result_free(&res);
    return status;
}

static void http_destroy(void *impl)
{
    free(impl);
}

int experiment_runner_http(experiment_runner *out, const experiment_secrets *secrets, char *err)
{
    http_runner *hr = calloc(1, sizeof *hr);
    if (!hr)
        return err_set(err, "out of memory");
    hr->secrets = secrets;
    int nice_before = getpriority(PRIO_PROCESS, 0);
    if (nice_before > -10 && setpriority(PRIO_PROCESS, 0, -10) != 0)
        hr->nice_errno = errno;
    *out = (experiment_runner){.impl = hr, .name = "http", .run = http_phase,
                               .destroy = http_destroy};
    return 0;
}
