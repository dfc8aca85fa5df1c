/* bench_proxy — what `stallscope proxy` adds to every token, and whether it holds many
 * streams for long without losing one or growing.
 *
 * Added latency. The upstream is the raw sender (raw_sender.h: a child process that stamps
 * each SSE chunk with its emit time right before its send(), 20 ms steps, 100-token
 * answers); the client is the project's load generator (client/driver.h, one event loop,
 * the raw transport with kernel receive stamps). Per token, error = the client's receive
 * stamp - the sender's emit_ns (one CLOCK_MONOTONIC). The same closed-loop streams run
 * directly against the sender and through a `stallscope proxy` child process, alternating
 * (direct, proxy, direct, proxy ...: pairs), so both see the same machine at nearly the
 * same time; per run the error's p50/p99/p99.9/max, per pair the added latency (through
 * the proxy - direct, at p50 and at p99), and the median pair's. Beside them, the proxy's
 * own figure from its /metrics (stallscope_proxy_forward_delay_seconds: its kernel receive
 * stamp -> the bytes written downstream; a histogram, so a quantile is read as the bucket
 * bound it falls under) and its CPU time per token (/proc/PID/stat utime + stime, 10 ms
 * ticks, over the tokens_total it counted in the run).
 *
 * First, the machine's floor: how long a process asleep in epoll_wait for a step (20 ms)
 * takes to run once a byte reaches its socket (a child of this bench, a socketpair): what any
 * proxy pays before it can forward a step's first token, whatever its code.
 *
 * Soak. N streams through the proxy for SECONDS at 400 ms steps (25-token answers: each
 * stream 10 s, then the user's next), the raw transport driven directly as bench_scale
 * drives curl: after SECONDS no stream starts and those in flight end by themselves, so
 * every stream has an end to count against: tokens the sender sent (streams sent whole, and
 * any the peer cut), tokens the client received, and the proxy's
 * stallscope_proxy_tokens_total, which are all equal when none is lost; and the proxy's RSS
 * (/proc/PID/status VmRSS) every 5 s, with the ratio last / first after the warm-up.
 * A proxied stream holds two descriptors in the proxy: N is lowered to what the
 * RLIMIT_NOFILE hard limit allows, and says so.
 *
 * Prints figures; never fails on time. Options: --quick (3 s runs, 3 pairs, soak 2000:10),
 * --streams 32,1000, --pairs K, --soak N:SECONDS (default 10000:60), --no-soak.
 * STALLSCOPE_BIN overrides the proxy's binary (default: ./stallscope beside this one). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "analysis/analysis.h"
#include "client/driver.h"
#include "client/fetch.h"
#include "client/prom.h"
#include "client/transport_kind.h"
#include "common/clock.h"
#include "common/err.h"
#include "workload/workload.h"

#include "proc_info.h"
#include "raw_sender.h"

#define MAX_COUNTS 8
#define MAX_PAIRS 64
#define LATENCY_STEP_NS (20 * CLOCK_NS_PER_MS)
#define LATENCY_ANSWER 100
/* 400 ms steps: 10,000 streams offer 25,000 tokens/s, which sender, proxy and client (~40 us
 * of CPU a token between them) keep up with on 2 cores; at 200 ms they fell behind. */
#define SOAK_STEP_NS (400 * CLOCK_NS_PER_MS)
#define SOAK_ANSWER 25
#define SOAK_SAMPLE_NS (5 * CLOCK_NS_PER_S)
#define SOAK_RAMP_PER_TICK 500                  /* streams opened per ramp tick */
#define SOAK_RAMP_TICK_NS (50 * CLOCK_NS_PER_MS) /* 10,000 streams in 1 s */
#define PROXY_FDS_SPARE 64 /* the proxy's descriptors besides two per stream */
#define HIST_MAX 24

/* ---- the proxy, a child process ---------------------------------------------------- */

typedef struct proxy_child {
    pid_t pid;
    char url[64];   /* where clients connect */
    char admin[64]; /* its /metrics */
    char log[64];
} proxy_child;

/* `stallscope proxy` in front of upstream, on free loopback ports (its --ready-file says
 * which). 0, or -1 with err (its log's path in it). */
static int proxy_start(const char *bin, const char *upstream, proxy_child *px, char *err)
{
    memset(px, 0, sizeof *px);
    char ready[64];
    snprintf(ready, sizeof ready, "/tmp/bench_proxy_ready_%d", (int)getpid());
    snprintf(px->log, sizeof px->log, "/tmp/bench_proxy_%d.log", (int)getpid());
    unlink(ready);
    px->pid = fork();
    if (px->pid < 0)
        return err_set(err, "fork: %s", strerror(errno));
    if (px->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(px->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        execl(bin, "stallscope", "proxy", "--upstream", upstream, "--listen", "127.0.0.1:0",
              "--admin", "127.0.0.1:0", "--ready-file", ready, "--quiet", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(ready, "r");
        int port = 0, admin_port = 0;
        const bool got = f && fscanf(f, "%d %d", &port, &admin_port) == 2;
        if (f)
            fclose(f);
        if (got) {
            unlink(ready);
            snprintf(px->url, sizeof px->url, "http://127.0.0.1:%d", port);
            snprintf(px->admin, sizeof px->admin, "http://127.0.0.1:%d", admin_port);
            return 0;
        }
        if (waitpid(px->pid, NULL, WNOHANG) == px->pid)
            break;
        clock_sleep_until_ns(clock_now_ns() + 10 * CLOCK_NS_PER_MS);
    }
    kill(px->pid, SIGKILL);
    waitpid(px->pid, NULL, 0);
    px->pid = 0;
    return err_set(err, "%s proxy did not start (see %s)", bin, px->log);
}

/* SIGTERM, and its log removed once it stopped by itself (kept when it had to be killed). */
static void proxy_stop(proxy_child *px)
{
    if (px->pid <= 0)
        return;
    kill(px->pid, SIGTERM);
    for (int i = 0; i < 500; i++) {
        if (waitpid(px->pid, NULL, WNOHANG) == px->pid) {
            px->pid = 0;
            unlink(px->log);
            return;
        }
        clock_sleep_until_ns(clock_now_ns() + 10 * CLOCK_NS_PER_MS);
    }
    kill(px->pid, SIGKILL);
    waitpid(px->pid, NULL, 0);
    px->pid = 0;
}

/* ---- /proc ------------------------------------------------------------------------------ */

/* utime + stime of pid (/proc/PID/stat fields 14 and 15, clock ticks), ns; -1 unreadable. */
static int64_t proc_cpu_ns(pid_t pid)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    const bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    const char *after_name = got ? strrchr(line, ')') : NULL; /* the name may hold spaces */
    unsigned long long utime = 0, stime = 0;
    if (!after_name ||
        sscanf(after_name + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
               &stime) != 2)
        return -1;
    const long tick = sysconf(_SC_CLK_TCK);
    return (int64_t)((utime + stime) * (CLOCK_NS_PER_S / (unsigned long long)tick));
}

static void print_loadavg(const char *when)
{
    char line[128] = "?";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(line, sizeof line, f))
            snprintf(line, sizeof line, "?");
        fclose(f);
    }
    line[strcspn(line, "\n")] = '\0';
    printf("load average %s: %s\n", when, line);
}

/* ---- the machine's floor ------------------------------------------------------------------ */

/* How long a process asleep in epoll_wait takes to run once a byte reaches its socket, after
 * 20 ms idle (a step): what any proxy on this machine pays on a step's first token before it
 * can forward it. The child echoes (its wake-up - the parent's stamp before write()). */
static void bench_wakeup(int samples)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return;
    pid_t child = fork();
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(sv[0]);
        int ep = epoll_create1(0);
        struct epoll_event ev = {.events = EPOLLIN};
        epoll_ctl(ep, EPOLL_CTL_ADD, sv[1], &ev);
        for (int i = 0; i < samples; i++) {
            int64_t sent_ns = 0;
            if (epoll_wait(ep, &ev, 1, -1) != 1 || read(sv[1], &sent_ns, sizeof sent_ns) != 8)
                _exit(1);
            const int64_t wake_ns = clock_now_ns() - sent_ns;
            if (write(sv[1], &wake_ns, sizeof wake_ns) != 8)
                _exit(1);
        }
        _exit(0);
    }
    close(sv[1]);
    double *wake_ms = calloc((size_t)samples, sizeof *wake_ms);
    int n = 0;
    for (int i = 0; child > 0 && wake_ms && i < samples; i++) {
        clock_sleep_until_ns(clock_now_ns() + LATENCY_STEP_NS);
        int64_t t = clock_now_ns(), wake_ns = 0;
        if (write(sv[0], &t, sizeof t) != 8 || read(sv[0], &wake_ns, sizeof wake_ns) != 8)
            break;
        wake_ms[n++] = (double)wake_ns / 1e6;
    }
    analysis_dist d;
    analysis_dist_from(wake_ms, n, &d);
    printf("the machine's floor: a process asleep in epoll_wait for 20 ms runs %.0f us (p50), %.0f "
           "us (p99), %.0f us (max) after a byte is written to its socket (%d samples)\n",
           d.p50 * 1e3, d.p99 * 1e3, d.max * 1e3, n);
    free(wake_ms);
    close(sv[0]);
    if (child > 0)
        waitpid(child, NULL, 0);
}

/* ---- the proxy's /metrics ------------------------------------------------------------------ */

/* A Prometheus histogram as exported: cumulative counts per upper bound (+Inf last). */
typedef struct prom_hist {
    int n;
    double le[HIST_MAX];  /* seconds */
    double cum[HIST_MAX]; /* observations <= le */
    double sum, count;
} prom_hist;

#define MAX_CODES 16

typedef struct proxy_metrics {
    double tokens;   /* stallscope_proxy_tokens_total */
    double requests; /* stallscope_proxy_requests_total, every code */
    char code[MAX_CODES][16]; /* ... by code, in the exposition's order */
    double code_n[MAX_CODES];
    int n_codes;
    double client_aborts, upstream_errors;
    prom_hist forward; /* stallscope_proxy_forward_delay_seconds */
} proxy_metrics;

static int on_metric(void *ctx, const prom_sample *s)
{
    proxy_metrics *m = ctx;
    char label[64];
    if (prom_name_is(s, "stallscope_proxy_tokens_total")) {
        m->tokens = s->value;
    } else if (prom_name_is(s, "stallscope_proxy_requests_total")) {
        m->requests += s->value;
        if (m->n_codes < MAX_CODES && prom_label_get(s, "code", label, sizeof label) > 0) {
            snprintf(m->code[m->n_codes], sizeof m->code[0], "%.15s", label);
            m->code_n[m->n_codes++] = s->value;
        }
    } else if (prom_name_is(s, "stallscope_proxy_client_aborts_total")) {
        m->client_aborts = s->value;
    } else if (prom_name_is(s, "stallscope_proxy_upstream_errors_total")) {
        m->upstream_errors = s->value;
    } else if (prom_name_is(s, "stallscope_proxy_forward_delay_seconds_bucket")) {
        if (m->forward.n < HIST_MAX && prom_label_get(s, "le", label, sizeof label) > 0) {
            m->forward.le[m->forward.n] = strtod(label, NULL); /* "+Inf" reads as inf */
            m->forward.cum[m->forward.n++] = s->value;
        }
    } else if (prom_name_is(s, "stallscope_proxy_forward_delay_seconds_sum")) {
        m->forward.sum = s->value;
    } else if (prom_name_is(s, "stallscope_proxy_forward_delay_seconds_count")) {
        m->forward.count = s->value;
    }
    return 0;
}

static int proxy_scrape(const proxy_child *px, proxy_metrics *out, char *err)
{
    memset(out, 0, sizeof *out);
    transport_options so = {.base_url = px->admin};
    int status = 0;
    char *body = NULL;
    int rc = fetch_http(&so, "GET", "/metrics", NULL, 10 * CLOCK_NS_PER_S, &status, &body, err);
    if (rc == 0 && status != 200)
        rc = err_set(err, "GET %s/metrics: HTTP %d", px->admin, status);
    if (rc == 0 && body)
        rc = prom_parse(body, strlen(body), on_metric, out, err);
    free(body);
    return rc;
}

/* after - before: what a run added (the proxy's counters only grow). */
static void metrics_delta(const proxy_metrics *after, const proxy_metrics *before,
                          proxy_metrics *out)
{
    *out = *after;
    out->tokens -= before->tokens;
    out->requests -= before->requests;
    for (int i = 0; i < out->n_codes; i++)
        for (int k = 0; k < before->n_codes; k++)
            if (strcmp(out->code[i], before->code[k]) == 0)
                out->code_n[i] -= before->code_n[k];
    out->client_aborts -= before->client_aborts;
    out->upstream_errors -= before->upstream_errors;
    out->forward.sum -= before->forward.sum;
    out->forward.count -= before->forward.count;
    for (int i = 0; i < out->forward.n && i < before->forward.n; i++)
        out->forward.cum[i] -= before->forward.cum[i];
}

/* "200: 22803, 499: 896" (the codes with requests) */
static const char *codes_text(const proxy_metrics *m, char *out, size_t size)
{
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < m->n_codes && at + 1 < size; i++)
        if (m->code_n[i] > 0)
            at += (size_t)snprintf(out + at, size - at, "%s%s: %.0f", at ? ", " : "", m->code[i],
                                   m->code_n[i]);
    return out;
}

/* The upper bound (µs) of the bucket the p-quantile falls in: the quantile is at most
 * this; inf when above every finite bound. */
static double hist_bound_us(const prom_hist *h, double p)
{
    const double rank = ceil(p * h->count);
    for (int i = 0; i < h->n; i++)
        if (h->cum[i] >= rank)
            return h->le[i] * 1e6;
    return INFINITY;
}

/* "<=25" or ">25000" (µs) */
static const char *bound_text(const prom_hist *h, double p, char *out, size_t size)
{
    const double b = hist_bound_us(h, p);
    if (isinf(b) && h->n >= 2)
        snprintf(out, size, ">%.0f", h->le[h->n - 2] * 1e6);
    else
        snprintf(out, size, "<=%.0f", b);
    return out;
}

/* The share (%) of observations at most le_us. */
static double hist_share_at(const prom_hist *h, double le_us)
{
    for (int i = 0; i < h->n; i++)
        if (fabs(h->le[i] * 1e6 - le_us) < 1e-6)
            return h->count > 0 ? 100.0 * h->cum[i] / h->count : 0;
    return NAN;
}

/* ---- one run of the load generator ---------------------------------------------------------- */

typedef struct run_figures {
    double tokens_per_s;
    analysis_dist error_ms; /* receive - emit */
    int64_t errors;
    int64_t stamps[TRANSPORT_STAMP_KINDS];
    double sender_cpu_us_per_token; /* the raw sender's CPU over the chunks it sent */
    /* through the proxy: what its /metrics and /proc said over the run */
    proxy_metrics proxy;
    double proxy_cpu_s;
} run_figures;

static int open_loop(void *ctx, int loop, transport *out, char *err)
{
    (void)loop;
    return transport_kind_create(TRANSPORT_RAW, ctx, out, err);
}

static void close_loop(void *ctx, int loop, transport *t)
{
    (void)ctx;
    (void)loop;
    t->destroy(t->impl);
}

/* `streams` closed-loop users against url for duration_ns (+1 s warm-up), as bench_client's
 * run_ours: one loop, the raw transport; with the sender's CPU per chunk meanwhile. */
static int run_driver(const char *url, const raw_sender *sender, int streams, int64_t duration_ns,
                      run_figures *out)
{
    char err[ERR_LEN];
    transport_options so = {.base_url = url,
                            .max_streams = streams,
                            .idle_timeout_ns = 30 * CLOCK_NS_PER_S};
    const driver_transports transports = {open_loop, close_loop, &so};
    workload_config wl;
    workload_default(&wl);
    wl.users = streams;
    wl.duration_ns = duration_ns;
    wl.inject = false;
    wl.prompt_len = (workload_dist){.kind = WORKLOAD_DIST_UNIFORM, .a = 16, .b = 32};
    /* the sender's length: no token past max_tokens to refuse */
    wl.answer_len = (workload_dist){.kind = WORKLOAD_DIST_FIXED, .a = LATENCY_ANSWER};
    driver_api api;
    driver_api_defaults(&api);
    api.token_ids = true;
    api.timestamps = true;
    api.vocab = 32000;
    driver_phase ph = {.wl = &wl, .api = &api, .salt = 5, .record = true,
                       .warmup_ns = CLOCK_NS_PER_S, .threads = 1};
    tokenlog log;
    tokenlog_init(&log);
    driver_result res;
    raw_sender_counts sent0, sent1;
    raw_sender_read(sender, &sent0);
    const int64_t cpu0 = proc_cpu_ns(sender->pid);
    int rc = driver_run_phase(&transports, &ph, &log, &res, err);
    const int64_t cpu1 = proc_cpu_ns(sender->pid);
    raw_sender_read(sender, &sent1);
    if (rc == 0) {
        memset(out, 0, sizeof *out);
        const int64_t chunks = sent1.tokens_sent - sent0.tokens_sent;
        out->sender_cpu_us_per_token =
            chunks > 0 ? (double)(cpu1 - cpu0) / 1e3 / (double)chunks : 0;
        out->tokens_per_s = (double)res.tokens / ((double)duration_ns / 1e9);
        out->errors = res.errors;
        analysis_dist_from(res.fidelity_ms, res.n_fidelity, &out->error_ms);
        memcpy(out->stamps, res.stamps, sizeof out->stamps);
        if (!res.complete)
            fprintf(stderr, "bench_proxy: run incomplete: %s\n", res.error);
    } else {
        fprintf(stderr, "bench_proxy: %s\n", err);
    }
    driver_result_free(&res);
    tokenlog_free(&log);
    return rc;
}

/* The same through the proxy, with what the proxy says it did meanwhile. */
static int run_through(const proxy_child *px, const raw_sender *sender, int streams,
                       int64_t duration_ns, run_figures *out)
{
    char err[ERR_LEN];
    proxy_metrics before, after;
    if (proxy_scrape(px, &before, err) != 0) {
        fprintf(stderr, "bench_proxy: %s\n", err);
        return -1;
    }
    const int64_t cpu0 = proc_cpu_ns(px->pid);
    if (run_driver(px->url, sender, streams, duration_ns, out) != 0)
        return -1;
    const int64_t cpu1 = proc_cpu_ns(px->pid);
    if (proxy_scrape(px, &after, err) != 0) {
        fprintf(stderr, "bench_proxy: %s\n", err);
        return -1;
    }
    metrics_delta(&after, &before, &out->proxy);
    out->proxy_cpu_s = (double)(cpu1 - cpu0) / 1e9;
    return 0;
}

/* ---- added latency ---------------------------------------------------------------------- */

static double median_of(const double *values, int n)
{
    double sorted[MAX_PAIRS];
    memcpy(sorted, values, (size_t)n * sizeof *sorted);
    analysis_dist d;
    analysis_dist_from(sorted, n, &d); /* the project's nearest-rank rule */
    return d.p50;
}

static void print_run(int pair, const char *path, const run_figures *f)
{
    int64_t events = 0;
    for (int s = 0; s < TRANSPORT_STAMP_KINDS; s++)
        events += f->stamps[s];
    const double share = events > 0 ? 100.0 / (double)events : 0;
    printf("%4d  %-6s %9.0f %9.0f %9.0f %9.0f %9.0f %6lld   %5.1f %5.1f %5.1f %8.2f", pair,
           path, f->tokens_per_s, f->error_ms.p50 * 1e3, f->error_ms.p99 * 1e3,
           f->error_ms.p999 * 1e3, f->error_ms.max * 1e3, (long long)f->errors,
           share * (double)f->stamps[TRANSPORT_STAMP_KERNEL],
           share * (double)f->stamps[TRANSPORT_STAMP_KERNEL_COALESCED],
           share * (double)f->stamps[TRANSPORT_STAMP_USER], f->sender_cpu_us_per_token);
}

/* What the proxy added in one pair, µs: through it - direct, at p50 and at p99. */
typedef struct added_us {
    double p50, p99;
} added_us;

static added_us pair_added(const run_figures *direct, const run_figures *proxied)
{
    return (added_us){(proxied->error_ms.p50 - direct->error_ms.p50) * 1e3,
                      (proxied->error_ms.p99 - direct->error_ms.p99) * 1e3};
}

static void print_pair(int pair, const run_figures *direct, const run_figures *proxied)
{
    print_run(pair, "direct", direct);
    printf("\n");
    print_run(pair, "proxy", proxied);
    const added_us added = pair_added(direct, proxied);
    const proxy_metrics *m = &proxied->proxy;
    char b50[24], b99[24], b999[24];
    printf("   %+8.0f %+8.0f   %9.2f    %6s %6s %6s %7.1f\n", added.p50, added.p99,
           m->tokens > 0 ? proxied->proxy_cpu_s * 1e6 / m->tokens : 0,
           bound_text(&m->forward, 0.5, b50, sizeof b50),
           bound_text(&m->forward, 0.99, b99, sizeof b99),
           bound_text(&m->forward, 0.999, b999, sizeof b999),
           m->forward.count > 0 ? m->forward.sum / m->forward.count * 1e6 : 0);
    fflush(stdout);
}

/* The raw sender (step_ns, answer) and a proxy in front of it; 0, or -1 having said why (and
 * stopped what had started). */
static int start_sender_and_proxy(const char *bin, int64_t step_ns, int answer, raw_sender *sender,
                                  proxy_child *px)
{
    char err[ERR_LEN];
    if (raw_sender_start(sender, step_ns, answer, err) != 0) {
        printf("(no raw sender: %s)\n", err);
        return -1;
    }
    if (proxy_start(bin, sender->url, px, err) != 0) {
        printf("(no proxy: %s)\n", err);
        raw_sender_stop(sender);
        return -1;
    }
    return 0;
}

static void bench_latency(const char *bin, int streams, int pairs, int64_t duration_ns)
{
    char err[ERR_LEN];
    printf("\n== %d streams, %lld ms steps (%lld tokens/s each), %d-token answers; %d pairs of "
           "%lld s runs (+1 s warm-up): direct, then through the proxy\n",
           streams, (long long)(LATENCY_STEP_NS / CLOCK_NS_PER_MS),
           (long long)(CLOCK_NS_PER_S / LATENCY_STEP_NS), LATENCY_ANSWER, pairs,
           (long long)(duration_ns / CLOCK_NS_PER_S));
    raw_sender sender;
    proxy_child px;
    if (start_sender_and_proxy(bin, LATENCY_STEP_NS, LATENCY_ANSWER, &sender, &px) != 0)
        return;
    printf("pair  path    tokens/s err p50us err p99us  err p999 err maxus errors  stamps %% "
           "k/c/u  sender us/tok  added p50 p99 us  proxy us/tok  forward delay p50 p99 p999 "
           "mean us\n");
    proxy_metrics first, last;
    const bool scraped = proxy_scrape(&px, &first, err) == 0;
    double added_p50[MAX_PAIRS], added_p99[MAX_PAIRS];
    double cpu_s = 0, tokens = 0; /* over the proxied runs alone: it idles during the others */
    int done = 0;
    for (int k = 1; k <= pairs; k++) {
        run_figures direct, proxied;
        if (run_driver(sender.url, &sender, streams, duration_ns, &direct) != 0 ||
            run_through(&px, &sender, streams, duration_ns, &proxied) != 0) {
            printf("%4d  (failed: see stderr)\n", k);
            continue;
        }
        print_pair(k, &direct, &proxied);
        const added_us added = pair_added(&direct, &proxied);
        added_p50[done] = added.p50;
        added_p99[done++] = added.p99;
        cpu_s += proxied.proxy_cpu_s;
        tokens += proxied.proxy.tokens;
    }
    if (done > 0) {
        printf("median pair: added p50 %+.0f us, p99 %+.0f us (goal: p99 <= 50 us added: %s)\n",
               median_of(added_p50, done), median_of(added_p99, done),
               median_of(added_p99, done) <= 50 ? "met" : "NOT met");
    }
    if (scraped && proxy_scrape(&px, &last, err) == 0) {
        proxy_metrics all;
        metrics_delta(&last, &first, &all);
        char b50[24], b99[24], b999[24], codes[256];
        printf("the proxy over its %d runs: %.0f tokens, CPU %.2f s = %.2f us/token "
               "(/proc/PID/stat); forward delay (its /metrics, kernel receive -> written "
               "downstream) over %.0f events: p50 %s, p99 %s, p999 %s us, mean %.1f us, "
               "%.1f %% <= 50 us; requests %.0f (%s), client aborts %.0f, upstream "
               "errors %.0f\n",
               done, tokens, cpu_s, tokens > 0 ? cpu_s * 1e6 / tokens : 0,
               all.forward.count, bound_text(&all.forward, 0.5, b50, sizeof b50),
               bound_text(&all.forward, 0.99, b99, sizeof b99),
               bound_text(&all.forward, 0.999, b999, sizeof b999),
               all.forward.count > 0 ? all.forward.sum / all.forward.count * 1e6 : 0,
               hist_share_at(&all.forward, 50), all.requests,
               codes_text(&all, codes, sizeof codes), all.client_aborts,
               all.upstream_errors);
    }
    fflush(stdout);
    proxy_stop(&px);
    raw_sender_stop(&sender);
}

/* ---- the soak ------------------------------------------------------------------------------- */

typedef struct soak_slot {
    int64_t counted; /* tokens of the stream in flight */
    bool busy;
} soak_slot;

typedef struct soak {
    transport t;
    transport_handlers h;
    soak_slot *slots;
    int answer;
    char body[512];
    size_t body_len;
    bool sending; /* false: let the streams in flight end, start no more */
    int64_t received;                       /* tokens as they come (the rate) */
    int64_t requests, tokens, errors, wrong; /* streams ended, and their tokens */
    int64_t busy;
    char first_problem[256];
} soak;

static void soak_post(soak *s, soak_slot *slot);

static void soak_token(void *ctx, void *user, const transport_token *tok)
{
    ((soak *)ctx)->received += tok->n_tokens;
    ((soak_slot *)user)->counted += tok->n_tokens;
}

/* A stream is whole when it carried `answer` tokens, the last "length", and no error. */
static void soak_end(void *ctx, void *user, const transport_end *end)
{
    soak *s = ctx;
    soak_slot *slot = user;
    s->requests++;
    s->tokens += slot->counted;
    if (end->error[0]) {
        s->errors++;
        if (!s->first_problem[0])
            snprintf(s->first_problem, sizeof s->first_problem, "a request failed: %.200s",
                     end->error);
    } else if (slot->counted != s->answer || strcmp(end->finish_reason, "length") != 0) {
        s->wrong++;
        if (!s->first_problem[0])
            snprintf(s->first_problem, sizeof s->first_problem,
                     "a stream counted %lld tokens of %d, finish '%s'", (long long)slot->counted,
                     s->answer, end->finish_reason);
    }
    slot->busy = false;
    s->busy--;
    if (s->sending)
        soak_post(s, slot);
}

static void soak_post(soak *s, soak_slot *slot)
{
    char err[ERR_LEN];
    transport_request req = {"/v1/completions", s->body, s->body_len, &s->h, slot, s->answer};
    slot->counted = 0;
    if (s->t.post(s->t.impl, &req, err) != 0) {
        s->errors++;
        if (!s->first_problem[0])
            snprintf(s->first_problem, sizeof s->first_problem, "post: %.200s", err);
        return;
    }
    slot->busy = true;
    s->busy++;
}

/* The streams the proxy can hold under the descriptor limit: two each (client, upstream). */
static int soak_fit(int streams)
{
    struct rlimit lim;
    getrlimit(RLIMIT_NOFILE, &lim);
    const int64_t fit = ((int64_t)lim.rlim_max - PROXY_FDS_SPARE) / 2;
    if (lim.rlim_max != RLIM_INFINITY && fit < streams) {
        printf("soak: RLIMIT_NOFILE hard limit %llu: the proxy holds two descriptors a stream, "
               "so %lld streams instead of %d\n",
               (unsigned long long)lim.rlim_max, (long long)fit, streams);
        return fit > 1 ? (int)fit : 1;
    }
    return streams;
}

static void bench_soak(const char *bin, int streams, int seconds)
{
    char err[ERR_LEN];
    streams = soak_fit(streams);
    const int64_t stream_ns = SOAK_ANSWER * SOAK_STEP_NS;
    printf("\n== soak: %d streams through the proxy for %d s, %lld ms steps (%.0f tokens/s "
           "offered), %d-token answers (a stream %.0f s, then its user's next); then the streams "
           "in flight end\n",
           streams, seconds, (long long)(SOAK_STEP_NS / CLOCK_NS_PER_MS),
           (double)streams * 1e9 / (double)SOAK_STEP_NS, SOAK_ANSWER, (double)stream_ns / 1e9);
    raw_sender sender;
    proxy_child px;
    if (start_sender_and_proxy(bin, SOAK_STEP_NS, SOAK_ANSWER, &sender, &px) != 0)
        return;
    soak s;
    memset(&s, 0, sizeof s);
    s.answer = SOAK_ANSWER;
    s.h = (transport_handlers){&s, soak_token, soak_end};
    s.body_len = (size_t)snprintf(
        s.body, sizeof s.body,
        "{\"prompt\":[11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26],\"max_tokens\":%d,"
        "\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
        SOAK_ANSWER);
    transport_options so = {.base_url = px.url,
                            .max_streams = streams,
                            .idle_timeout_ns = 60 * CLOCK_NS_PER_S,
                            .connect_timeout_ns = 30 * CLOCK_NS_PER_S};
    s.slots = calloc((size_t)streams, sizeof *s.slots);
    if (!s.slots || transport_kind_create(TRANSPORT_RAW, &so, &s.t, err) != 0) {
        printf("(no client: %s)\n", s.slots ? err : "out of memory");
        free(s.slots);
        proxy_stop(&px);
        raw_sender_stop(&sender);
        return;
    }
    const int64_t warmup_ns = seconds >= 20 ? 10 * CLOCK_NS_PER_S : seconds * CLOCK_NS_PER_S / 2;
    long rss[1024];
    int n_rss = 0;
    printf("     t s  proxy RSS KiB  streams open  tokens/s (last 5 s)\n");
    const int64_t cpu0 = proc_cpu_ns(px.pid);
    s.sending = true;
    const int64_t t0 = clock_now_ns(), t_stop = t0 + seconds * CLOCK_NS_PER_S;
    int64_t next_sample = t0, last_tokens = 0;
    int opened = 0, rss_first = -1;
    for (;;) {
        const int64_t now = clock_now_ns();
        if (now >= next_sample && n_rss < 1024) {
            rss[n_rss] = proc_info_rss_kb(px.pid);
            if (rss_first < 0 && now - t0 >= warmup_ns)
                rss_first = n_rss;
            printf("  %6.1f  %13ld  %12lld  %10.0f\n", (double)(now - t0) / 1e9, rss[n_rss],
                   (long long)s.busy,
                   n_rss ? (double)(s.received - last_tokens) / ((double)SOAK_SAMPLE_NS / 1e9) : 0);
            fflush(stdout);
            n_rss++;
            last_tokens = s.received;
            next_sample += SOAK_SAMPLE_NS;
        }
        if (now >= t_stop)
            break;
        /* Ramp: 500 streams every 50 ms rather than 10,000 SYNs at once. */
        for (int k = 0; k < SOAK_RAMP_PER_TICK && opened < streams; k++)
            soak_post(&s, &s.slots[opened++]);
        int64_t until = now + (opened < streams ? SOAK_RAMP_TICK_NS : 100 * CLOCK_NS_PER_MS);
        until = until < next_sample ? until : next_sample;
        if (s.t.run(s.t.impl, until < t_stop ? until : t_stop, err) != 0) {
            printf("(client: %s)\n", err);
            break;
        }
        if (s.errors > 100)
            break; /* badly wrong: do not spin for the rest of the soak */
    }
    const int last = n_rss - 1;
    /* Every stream in flight ends by itself: each then has an end to count. */
    s.sending = false;
    const int64_t drain_deadline = clock_now_ns() + stream_ns + 30 * CLOCK_NS_PER_S;
    while (s.busy > 0 && clock_now_ns() < drain_deadline)
        if (s.t.run(s.t.impl, clock_now_ns() + 100 * CLOCK_NS_PER_MS, err) != 0)
            break;
    const int64_t t_end = clock_now_ns();
    clock_sleep_until_ns(t_end + 200 * CLOCK_NS_PER_MS); /* the proxy's closes, counted */
    const int64_t cpu1 = proc_cpu_ns(px.pid);
    const long rss_drained = proc_info_rss_kb(px.pid);
    raw_sender_counts sent;
    raw_sender_read(&sender, &sent);
    proxy_metrics m;
    char codes[256];
    const bool scraped = proxy_scrape(&px, &m, err) == 0;
    if (!scraped)
        printf("(no /metrics: %s)\n", err);

    printf("drained in %.1f s, %lld streams still open%s; proxy RSS after: %ld KiB\n",
           (double)(t_end - t_stop) / 1e9, (long long)s.busy,
           s.busy ? " (cut: not counted whole)" : "", rss_drained);
    printf("tokens: sender %lld (%lld streams sent whole; cut by the peer: %lld streams, %lld "
           "tokens; short sends %lld), client %lld (%lld streams, %lld failed, %lld not whole), "
           "proxy tokens_total %.0f (requests %.0f (%s), client aborts %.0f, upstream "
           "errors %.0f)\n",
           (long long)(sent.tokens_done + sent.tokens_cut), (long long)sent.streams_done,
           (long long)sent.streams_cut, (long long)sent.tokens_cut, (long long)sent.short_sends,
           (long long)s.tokens, (long long)s.requests, (long long)s.errors, (long long)s.wrong,
           m.tokens, m.requests, codes_text(&m, codes, sizeof codes), m.client_aborts,
           m.upstream_errors);
    const bool equal = scraped && sent.tokens_cut == 0 && sent.short_sends == 0 && s.busy == 0 &&
                       s.errors == 0 && s.wrong == 0 && sent.tokens_done == s.tokens &&
                       (double)s.tokens == m.tokens;
    printf("lost: %s\n", equal ? "0 (sender = client = proxy, every stream whole)"
                               : s.first_problem[0] ? s.first_problem : "the counts differ");
    if (rss_first >= 0 && last > rss_first && rss[rss_first] > 0)
        printf("proxy RSS: %ld KiB at %.0f s (after the warm-up) -> %ld KiB at %.0f s: "
               "last/first %.3f\n",
               rss[rss_first], (double)rss_first * 5, rss[last], (double)last * 5,
               (double)rss[last] / (double)rss[rss_first]);
    printf("proxy CPU: %.2f s over %.0f tokens = %.2f us/token (/proc/PID/stat)\n",
           (double)(cpu1 - cpu0) / 1e9, m.tokens,
           m.tokens > 0 ? (double)(cpu1 - cpu0) / 1e3 / m.tokens : 0);
    fflush(stdout);
    s.t.destroy(s.t.impl);
    free(s.slots);
    proxy_stop(&px);
    raw_sender_stop(&sender);
}

/* ---- main ----------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    bool quick = false, soak_on = true;
    int counts[MAX_COUNTS] = {32, 1000}, n_counts = 2;
    int pairs = 0, soak_streams = 0, soak_seconds = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--no-soak") == 0) {
            soak_on = false;
        } else if (strcmp(argv[i], "--streams") == 0 && i + 1 < argc) {
            n_counts = 0;
            for (char *tok = strtok(argv[++i], ","); tok && n_counts < MAX_COUNTS;
                 tok = strtok(NULL, ","))
                if (atoi(tok) > 0)
                    counts[n_counts++] = atoi(tok);
        } else if (strcmp(argv[i], "--pairs") == 0 && i + 1 < argc) {
            pairs = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--soak") == 0 && i + 1 < argc) {
            if (sscanf(argv[++i], "%d:%d", &soak_streams, &soak_seconds) != 2 ||
                soak_streams < 1 || soak_seconds < 1) {
                fprintf(stderr, "bench_proxy: --soak N:SECONDS (10000:60)\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_proxy [--quick] [--streams 32,1000] [--pairs K] "
                            "[--soak N:SECONDS | --no-soak]\n");
            return 2;
        }
    }
    if (pairs < 1 || pairs > MAX_PAIRS)
        pairs = quick ? 3 : 5;
    if (soak_streams == 0) {
        soak_streams = quick ? 2000 : 10000;
        soak_seconds = quick ? 10 : 60;
    }
    signal(SIGPIPE, SIG_IGN);
    /* Thousands of streams are a socket each here and in the children (who inherit it). */
    struct rlimit lim;
    getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
    char bin[PATH_MAX];
    proc_info_stallscope_bin(bin, sizeof bin);
    const int64_t duration = (quick ? 3 : 8) * CLOCK_NS_PER_S;
    printf("bench_proxy: the latency `stallscope proxy` adds per token, and a soak (%s)\n", bin);
    printf("error = the client's receive stamp - the raw sender's emit_ns (same "
           "CLOCK_MONOTONIC); added = through the proxy - direct, in the same pair\n");
    print_loadavg("at the start");
    bench_wakeup(quick ? 100 : 250);
    for (int i = 0; i < n_counts; i++)
        bench_latency(bin, counts[i], pairs, duration);
    if (soak_on)
        bench_soak(bin, soak_streams, soak_seconds);
    printf("\n");
    print_loadavg("at the end");
    printf("stamps %% k/c/u: the client's stamps, kernel / kernel coalesced (a bound) / user "
           "space. sender us/tok: the raw sender's CPU over the chunks it sent in the run. proxy "
           "us/tok: the proxy's CPU over the tokens it counted in the run (warm-up included). "
           "CPU: /proc/PID/stat utime + stime, 10 ms ticks. forward delay: the proxy's histogram "
           "(buckets 10, 25, 50, 100, 250, 500 us, 1, 5, 25 ms): a quantile is at most the "
           "bound shown.\n");
    return 0;
}
