/* bench_scale — many concurrent streams for a long time against the embedded emulated
 * server, and not one token lost. Prints figures; exits 1 only when a token was lost or a
 * request failed (that is a bug, not a slow machine).
 *
 * The server runs in a child process (fork, then server_create/server_run as `stallscope
 * serve --engine emulate` would: H100 SXM, Llama 3.1 8B, mixed 16384, max_num_seqs and
 * max_waiting sized for the streams, KV room for every stream), so client and server each
 * have their own descriptor table (10,000 streams need 10,000 sockets on each side) and
 * their own RSS to measure. The client is this project's load generator core (curl.h:
 * libcurl multi on one thread): `streams` closed-loop slots, each sending a 16-token prompt
 * for `answer` tokens (ignore_eos, include_usage) and, when it ends, the next one, until
 * `seconds` have passed; then every stream in flight finishes (no cancellation, so every
 * request has the server's usage to compare).
 *
 * No token lost: for every request, tokens the client counted (one per chunk with text) ==
 * the server's usage.completion_tokens == answer, finish_reason "length", no error; and in
 * all, the client's tokens == the server's vllm:generation_tokens_total.
 * Memory per stream: (RSS with every stream open - RSS before any) / streams, for each side,
 * RSS the peak of one-second samples of /proc/PID/status VmRSS.
 *
 * usage: bench_scale [streams] [seconds] [answer_tokens]    (default 10000 60 64)
 * Raises RLIMIT_NOFILE to its hard limit; needs hard >= streams + ~100. Release build. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/curl.h"
#include "client/fetch.h"
#include "common/clock.h"
#include "common/err.h"
#include "engine/cost.h"
#include "engine/exec_emulate.h"
#include "server/server.h"

#include "proc_info.h"

#define PROMPT_TOKENS 16
#define RAMP_PER_TICK 500                  /* connections opened per ramp tick */
#define RAMP_TICK_NS (50 * CLOCK_NS_PER_MS) /* 10,000 streams in 1 s */
#define DRAIN_NS (120 * CLOCK_NS_PER_S)

typedef struct slot {
    int index;
    int64_t counted; /* tokens of the request in flight */
    bool busy;
} slot;

typedef struct bench {
    curlt_client *client;
    slot *slots;
    int n_slots;
    int answer;
    char body[512];
    size_t body_len;
    bool sending; /* false: let the streams in flight end, send no more */
    int64_t requests, tokens, lost_requests, errors, busy;
    char first_problem[256];
} bench;

static double cpu_s(int who)
{
    struct rusage ru;
    getrusage(who, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

static void on_token(void *ctx, void *user, const transport_token *tok)
{
    (void)ctx;
    ((slot *)user)->counted += tok->n_tokens;
}

static void post(bench *b, slot *s);

static void on_end(void *ctx, void *user, const transport_end *end)
{
    bench *b = ctx;
    slot *s = user;
    b->requests++;
    b->tokens += s->counted;
    const bool has_usage = end->prompt_tokens >= 0;
    if (end->error[0]) {
        b->errors++;
        if (!b->first_problem[0])
            snprintf(b->first_problem, sizeof b->first_problem, "request failed: %.200s",
                     end->error);
    } else if (!has_usage || end->completion_tokens != s->counted || s->counted != b->answer ||
               strcmp(end->finish_reason, "length") != 0) {
        b->lost_requests++;
        if (!b->first_problem[0])
            snprintf(b->first_problem, sizeof b->first_problem,
                     "counted %lld tokens, usage %lld, want %d, finish '%s'",
                     (long long)s->counted, (long long)end->completion_tokens, b->answer,
                     end->finish_reason);
    }
    s->busy = false;
    b->busy--;
    if (b->sending)
        post(b, s);
}

static const transport_handlers *handlers(bench *b)
{
    static transport_handlers h;
    h = (transport_handlers){b, on_token, on_end};
    return &h;
}

static void post(bench *b, slot *s)
{
    char err[ERR_LEN];
    transport_request req = {"/v1/completions", b->body, b->body_len, handlers(b), s, b->answer};
    s->counted = 0;
    if (curlt_post(b->client, &req, err) != 0) {
        b->errors++;
        if (!b->first_problem[0])
            snprintf(b->first_problem, sizeof b->first_problem, "post: %.200s", err);
        return;
    }
    s->busy = true;
    b->busy++;
}

/* The child: the server until SIGTERM. Writes its port to fd. */
static int run_server(int streams, int answer, int fd)
{
    char err[ERR_LEN] = "";
    cost_gpu gpu;
    cost_arch arch;
    if (cost_gpu_find("h100-sxm", &gpu, err) != 0 || cost_arch_find("llama-3.1-8b", &arch, err) != 0) {
        fprintf(stderr, "bench_scale server: %s\n", err);
        return 1;
    }
    cost_params cost;
    cost_params_init(&cost, &gpu, &arch);
    server_config cfg;
    memset(&cfg, 0, sizeof cfg);
    strcpy(cfg.host, "127.0.0.1");
    strcpy(cfg.model_name, arch.name);
    cfg.handle_signals = true;
    cfg.realtime = true;
    cfg.max_waiting = 2 * streams;
    /* Room for every stream's whole answer: this bench is about the token path at scale,
     * not preemption (serve_limits.sh covers that). The cost model still prices the KV
     * reads of every step, so steps get long with 10,000 streams, as on a real GPU. */
    const int64_t per_stream = (PROMPT_TOKENS + answer + 15) / 16 + 1;
    cfg.sched = (sched_config){.policy = SCHED_MIXED, .max_num_batched_tokens = 16384,
                               .max_num_seqs = streams, .max_model_len = arch.max_position,
                               .block_size = 16, .kv_blocks = per_stream * streams + 1024};
    exec *x = exec_emulate_create(&cost, err);
    server *srv = x ? server_create(&cfg, x, err) : NULL;
    if (!srv) {
        fprintf(stderr, "bench_scale server: %s\n", err);
        return 1;
    }
    int port = server_port(srv);
    if (write(fd, &port, sizeof port) != (ssize_t)sizeof port)
        return 1;
    close(fd);
    int rc = server_run(srv, err);
    if (rc != 0)
        fprintf(stderr, "bench_scale server: %s\n", err);
    server_free(srv);
    return rc == 0 ? 0 : 1;
}

static int64_t metric(const char *base_url, const char *name)
{
    transport_options so = {.base_url = base_url};
    int status = 0;
    char *body = NULL, err[ERR_LEN];
    int64_t value = -1;
    if (fetch_http(&so, "GET", "/metrics", NULL, 10 * CLOCK_NS_PER_S, &status, &body, err) == 0 &&
        body) {
        const char *at = strstr(body, name);
        if (at && (at = strchr(at, ' ')))
            value = (int64_t)strtod(at + 1, NULL);
    }
    free(body);
    return value;
}

int main(int argc, char **argv)
{
    int streams = argc > 1 ? atoi(argv[1]) : 10000;
    const double seconds = argc > 2 ? atof(argv[2]) : 60;
    const int answer = argc > 3 ? atoi(argv[3]) : 64;
    if (streams < 1 || seconds <= 0 || answer < 1) {
        fprintf(stderr, "usage: bench_scale [streams] [seconds] [answer_tokens]\n");
        return 2;
    }
    /* Every stream is a socket on both sides: raise the soft limit to the hard one (the
     * child inherits it). */
    struct rlimit lim;
    getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
    if (lim.rlim_cur < (rlim_t)streams + 100) {
        /* `make bench` runs this with no arguments: fewer streams, said loudly, beat a
         * failed bench run on a machine with a low hard limit. */
        const int fit = lim.rlim_cur > 200 ? (int)lim.rlim_cur - 100 : 100;
        printf("bench_scale: RLIMIT_NOFILE hard limit %llu: %d streams instead of %d\n",
               (unsigned long long)lim.rlim_cur, fit, streams);
        streams = fit;
    }
    signal(SIGPIPE, SIG_IGN);
    int pipefd[2];
    if (pipe(pipefd) != 0)
        return 2;
    pid_t child = fork();
    if (child < 0)
        return 2;
    if (child == 0) {
        close(pipefd[0]);
        _exit(run_server(streams, answer, pipefd[1]));
    }
    close(pipefd[1]);
    int port = 0;
    if (read(pipefd[0], &port, sizeof port) != (ssize_t)sizeof port) {
        fprintf(stderr, "bench_scale: the server did not start\n");
        waitpid(child, NULL, 0);
        return 2;
    }
    close(pipefd[0]);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);

    char err[ERR_LEN];
    bench b;
    memset(&b, 0, sizeof b);
    b.answer = answer;
    b.n_slots = streams;
    b.body_len = (size_t)snprintf(
        b.body, sizeof b.body,
        "{\"prompt\":[11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26],\"max_tokens\":%d,"
        "\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
        answer);
    transport_options so = {.base_url = url,
                            .max_streams = streams,
                            .idle_timeout_ns = 60 * CLOCK_NS_PER_S,
                            .connect_timeout_ns = 30 * CLOCK_NS_PER_S};
    b.client = curlt_create(&so, err);
    b.slots = calloc((size_t)streams, sizeof *b.slots);
    if (!b.client || !b.slots) {
        fprintf(stderr, "bench_scale: %s\n", b.client ? "out of memory" : err);
        kill(child, SIGTERM);
        waitpid(child, NULL, 0);
        return 2;
    }
    for (int i = 0; i < streams; i++)
        b.slots[i].index = i;
    clock_sleep_until_ns(clock_now_ns() + 200 * CLOCK_NS_PER_MS);
    const long client_rss0 = proc_info_rss_kb(getpid()), server_rss0 = proc_info_rss_kb(child);
    const double client_cpu0 = cpu_s(RUSAGE_SELF);

    printf("bench_scale: %d streams for %.0f s, %d-token answers, emulated H100 / Llama 3.1 8B\n",
           streams, seconds, answer);
    b.sending = true;
    const int64_t t0 = clock_now_ns(), t_stop = t0 + (int64_t)(seconds * 1e9);
    int opened = 0;
    long client_peak = client_rss0, server_peak = server_rss0;
    int64_t next_sample = t0 + CLOCK_NS_PER_S, last_tokens = 0;
    int64_t max_busy = 0;
    while (clock_now_ns() < t_stop) {
        /* Ramp: 500 connections every 50 ms rather than 10,000 SYNs at once. */
        for (int k = 0; k < RAMP_PER_TICK && opened < streams; k++)
            post(&b, &b.slots[opened++]);
        int64_t until = clock_now_ns() + (opened < streams ? RAMP_TICK_NS : 100 * CLOCK_NS_PER_MS);
        if (curlt_run(b.client, until < t_stop ? until : t_stop, err) != 0) {
            fprintf(stderr, "bench_scale: %s\n", err);
            break;
        }
        if (b.busy > max_busy)
            max_busy = b.busy;
        const int64_t now = clock_now_ns();
        if (now >= next_sample) {
            long c = proc_info_rss_kb(getpid()), s = proc_info_rss_kb(child);
            if (c > client_peak)
                client_peak = c;
            if (s > server_peak)
                server_peak = s;
            fprintf(stderr, "  %5.1f s: %lld streams open, %lld requests done, %6.0f tok/s, "
                            "RSS client %ld MiB server %ld MiB\n",
                    (double)(now - t0) / 1e9, (long long)b.busy, (long long)b.requests,
                    (double)(b.tokens - last_tokens), c / 1024, s / 1024);
            last_tokens = b.tokens;
            next_sample += CLOCK_NS_PER_S;
        }
        if (b.errors > 100)
            break; /* something is badly wrong: do not spin for a minute */
    }
    /* Let every request in flight end by itself: each then carries its usage. */
    b.sending = false;
    const int64_t t_sent = clock_now_ns(), drain_deadline = t_sent + DRAIN_NS;
    while (b.busy > 0 && clock_now_ns() < drain_deadline)
        if (curlt_run(b.client, clock_now_ns() + 100 * CLOCK_NS_PER_MS, err) != 0)
            break;
    const int64_t t_end = clock_now_ns();
    const double client_cpu = cpu_s(RUSAGE_SELF) - client_cpu0;
    const int64_t generated = metric(url, "vllm:generation_tokens_total{");
    const int64_t preemptions = metric(url, "vllm:num_preemptions_total{");
    const int64_t slips = metric(url, "stallscope:engine_slips_total{");
    const bool drained = b.busy == 0;
    curlt_free(b.client);
    kill(child, SIGTERM);
    int status = 0;
    waitpid(child, &status, 0);
    struct rusage child_ru;
    getrusage(RUSAGE_CHILDREN, &child_ru);
    const double server_cpu = (double)child_ru.ru_utime.tv_sec + (double)child_ru.ru_stime.tv_sec +
                              ((double)child_ru.ru_utime.tv_usec + (double)child_ru.ru_stime.tv_usec) / 1e6;

    const double wall = (double)(t_end - t0) / 1e9;
    printf("  requests %lld, tokens %lld (%.0f tok/s over %.1f s incl. %.1f s drain), at most "
           "%lld streams open at once\n",
           (long long)b.requests, (long long)b.tokens, (double)b.tokens / wall, wall,
           (double)(t_end - t_sent) / 1e9, (long long)max_busy);
    printf("  errors %lld, requests whose count != usage %lld, drained %s, server generated "
           "%lld (client counted %lld), preemptions %lld, engine slips %lld\n",
           (long long)b.errors, (long long)b.lost_requests, drained ? "yes" : "NO",
           (long long)generated, (long long)b.tokens, (long long)preemptions, (long long)slips);
    printf("  memory per stream: client %.1f KiB (RSS %ld -> %ld MiB), server %.1f KiB (RSS %ld "
           "-> %ld MiB)\n",
           (double)(client_peak - client_rss0) / streams, client_rss0 / 1024, client_peak / 1024,
           (double)(server_peak - server_rss0) / streams, server_rss0 / 1024, server_peak / 1024);
    printf("  CPU: client %.1f s (%.1f us/token), server %.1f s (%.1f us/token); server exit %d\n",
           client_cpu, client_cpu * 1e6 / (double)(b.tokens ? b.tokens : 1), server_cpu,
           server_cpu * 1e6 / (double)(b.tokens ? b.tokens : 1),
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    /* The scale is the point: every stream must have been open at once at least once. */
    const bool concurrent = max_busy >= streams;
    if (!concurrent && !b.first_problem[0])
        snprintf(b.first_problem, sizeof b.first_problem,
                 "at most %lld of %d streams were open at once", (long long)max_busy, streams);
    const bool ok = concurrent && b.errors == 0 && b.lost_requests == 0 && drained &&
                    generated == b.tokens && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok)
        printf("  FAILED: %s\n", b.first_problem[0] ? b.first_problem : "see the figures above");
    else
        printf("  ok: no token lost, no error\n");
    free(b.slots);
    return ok ? 0 : 1;
}
