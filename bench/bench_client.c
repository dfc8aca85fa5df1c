/* bench_client — how well the load generator sees time, and what it costs.
 *
 * For 32, 1,024 and 4,096 concurrent closed-loop streams it prints the client's timestamp
 * error (receive stamp - the server's emit_ns, both CLOCK_MONOTONIC on this machine)
 * p50/p99/p999/max, tokens/s received, client CPU time per token and where the stamps came
 * from (kernel receive stamps, the share of them coalesced, user space), for each transport
 * (raw: ours with kernel stamps, the default; curl) against:
 *   1. the embedded emulated server (`stallscope serve`, a child process): the number the
 *      acceptance names; it includes the server's own delay between stamping a chunk and
 *      its event loop writing it;
 *   2. a raw sender (raw_sender.h, a child process: one epoll loop that stamps each chunk
 *      right before its send()): the client's own error, with the server out of the way;
 *   3. a Python aiohttp streaming client (Debian's python3-aiohttp, what Python benchmark
 *      clients do) against the same embedded server, for the ratio.
 * Each of our rows is run with each transport and with 1 and 2 client threads (event loops; --client-threads N,...).
 * Prints figures; never fails on time. Options: --quick (short runs), --streams N,...,
 * --no-python, --transport raw|curl (only one), --model M (the emulated server's model: llama-3.2-1b steps ~4x faster than
 * the default llama-3.1-8b, so it offers more tokens than one client core reads).
 * STALLSCOPE_BIN overrides the server binary (default: ./stallscope beside this one). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "analysis/analysis.h"
#include "client/driver.h"
#include "client/chunk.h"
#include "client/transport_kind.h"
#include "common/clock.h"
#include "common/err.h"
#include "workload/workload.h"

#include "proc_info.h"
#include "raw_sender.h"

/* A transport in front of the real one that sees each token event before the driver does:
 * the error (receive - emit) by the source of the stamp, for the per-source distributions
 * (the driver keeps one distribution of all). */
typedef struct tap {
    transport inner;
    int64_t from_ns; /* the end of the warm-up: earlier events are not kept */
    double *error_ms[TRANSPORT_STAMP_KINDS];
    int64_t n[TRANSPORT_STAMP_KINDS], cap[TRANSPORT_STAMP_KINDS];
} tap;

typedef struct figures {
    int streams;
    int threads; /* our client's event loops (0: not ours) */
    double end_ms; /* from the last loop's end to the merged log (ours) */
    double seconds;
    int64_t tokens;
    double cpu_ns_per_token;
    analysis_dist error_ms;
    int64_t errors;
    int64_t stamps[TRANSPORT_STAMP_KINDS]; /* recorded events by stamp source; all 0: unknown */
    tap tap;                            /* the error by stamp source, every loop's (ours) */
} figures;

static void print_sources(const tap *t);

static void print_row(const char *against, figures *f)
{
    char threads[16] = "-", merge[16] = "-";
    if (f->threads > 0) {
        snprintf(threads, sizeof threads, "%d", f->threads);
        snprintf(merge, sizeof merge, "%.0f", f->end_ms);
    }
    int64_t events = 0;
    for (int i = 0; i < TRANSPORT_STAMP_KINDS; i++)
        events += f->stamps[i];
    char mix[64] = "";
    if (events > 0)
        snprintf(mix, sizeof mix, "%5.1f %5.1f %5.1f",
                 100.0 * (double)f->stamps[TRANSPORT_STAMP_KERNEL] / (double)events,
                 100.0 * (double)f->stamps[TRANSPORT_STAMP_KERNEL_COALESCED] / (double)events,
                 100.0 * (double)f->stamps[TRANSPORT_STAMP_USER] / (double)events);
    char p999[16] = "-"; /* the Python probe reports no p99.9 */
    if (f->threads > 0)
        snprintf(p999, sizeof p999, "%.0f", f->error_ms.p999 * 1e3);
    printf("%-26s %7s %6d %9.0f %10.2f %9.0f %9.0f %9s %9.0f %7lld %8s  %s\n", against, threads,
           f->streams, (double)f->tokens / f->seconds, f->cpu_ns_per_token / 1e3,
           f->error_ms.p50 * 1e3, f->error_ms.p99 * 1e3, p999, f->error_ms.max * 1e3,
           (long long)f->errors, merge, mix);
    if (events > 0)
        print_sources(&f->tap);
    for (int s = 0; s < TRANSPORT_STAMP_KINDS; s++)
        free(f->tap.error_ms[s]);
    memset(&f->tap, 0, sizeof f->tap);
    fflush(stdout);
}

/* ---- child processes --------------------------------------------------------------- */

static pid_t spawn_serve(const char *bin, const char *model, int streams, char *url,
                         size_t url_size, const char *log)
{
    char seqs[32], blocks[32];
    snprintf(seqs, sizeof seqs, "%d", streams * 2 + 64);
    snprintf(blocks, sizeof blocks, "%d", streams * 32 + 4096); /* KV is virtual here */
    unlink(log);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        execl(bin, "stallscope", "serve", "--engine", "emulate", "--model", model, "--host",
              "127.0.0.1", "--port", "0", "--max-num-seqs", seqs, "--kv-blocks", blocks,
              (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 300; i++) {
        FILE *f = fopen(log, "r");
        char line[256];
        while (f && fgets(line, sizeof line, f)) {
            char *at = strstr(line, "http://");
            if (strstr(line, "listening on") && at) {
                at[strcspn(at, " \r\n")] = '\0';
                snprintf(url, url_size, "%s", at);
                fclose(f);
                return pid;
            }
        }
        if (f)
            fclose(f);
        clock_sleep_until_ns(clock_now_ns() + 20 * CLOCK_NS_PER_MS);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static void stop_child(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    for (int i = 0; i < 300; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        clock_sleep_until_ns(clock_now_ns() + 10 * CLOCK_NS_PER_MS);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* ---- our client ---------------------------------------------------------------------- */

typedef struct tap_req {
    tap *t;
    transport_handlers h;
    const transport_handlers *orig;
    void *user;
} tap_req;

static void tap_token(void *ctx, void *user, const transport_token *tok)
{
    (void)ctx;
    tap_req *q = user;
    tap *t = q->t;
    int s = tok->stamp;
    if (tok->emit_ns >= 0 && tok->t_ns >= t->from_ns && s >= 0 && s < TRANSPORT_STAMP_KINDS) {
        if (t->n[s] == t->cap[s]) {
            int64_t cap = t->cap[s] ? t->cap[s] * 2 : 4096;
            double *grown = realloc(t->error_ms[s], (size_t)cap * sizeof *grown);
            if (grown) {
                t->error_ms[s] = grown;
                t->cap[s] = cap;
            }
        }
        if (t->n[s] < t->cap[s])
            t->error_ms[s][t->n[s]++] = (double)(tok->t_ns - tok->emit_ns) / 1e6;
    }
    if (q->orig->on_token)
        q->orig->on_token(q->orig->ctx, q->user, tok);
}

static void tap_end(void *ctx, void *user, const transport_end *end)
{
    (void)ctx;
    tap_req *q = user;
    if (q->orig->on_end)
        q->orig->on_end(q->orig->ctx, q->user, end);
    free(q);
}

static int tap_post(void *impl, const transport_request *req, char *err)
{
    tap *t = impl;
    tap_req *q = malloc(sizeof *q);
    if (!q)
        return err_set(err, "out of memory");
    *q = (tap_req){t, {NULL, tap_token, tap_end}, req->handlers, req->user};
    transport_request wrapped = *req;
    wrapped.handlers = &q->h;
    wrapped.user = q;
    if (t->inner.post(t->inner.impl, &wrapped, err) != 0) {
        free(q);
        return -1;
    }
    return 0;
}
static int tap_run(void *impl, int64_t until_ns, char *err)
{
    tap *t = impl;
    return t->inner.run(t->inner.impl, until_ns, err);
}
static void tap_cancel(void *impl, const char *reason)
{
    tap *t = impl;
    t->inner.cancel_all(t->inner.impl, reason);
}
static int tap_active(void *impl)
{
    tap *t = impl;
    return t->inner.active(t->inner.impl);
}
static int64_t tap_now(void *impl)
{
    tap *t = impl;
    return t->inner.now(t->inner.impl);
}

/* "kernel 97.0 % p50 4 p99 38 us" per source with events. */
static void print_sources(const tap *t)
{
    int64_t all = 0;
    for (int s = 0; s < TRANSPORT_STAMP_KINDS; s++)
        all += t->n[s];
    printf("%-26s", "");
    for (int s = 0; s < TRANSPORT_STAMP_KINDS; s++) {
        if (t->n[s] == 0)
            continue;
        analysis_dist d;
        analysis_dist_from(t->error_ms[s], t->n[s], &d);
        printf("  %s %.1f %%: p50 %.0f p99 %.0f p999 %.0f us;",
               transport_stamp_name((transport_stamp)s), 100.0 * (double)t->n[s] / (double)all,
               d.p50 * 1e3, d.p99 * 1e3, d.p999 * 1e3);
    }
    printf("\n");
}

/* One tapped transport per event loop, kept for their counters and stamps. */
#define MAX_LOOPS 64
typedef struct loop_clients {
    transport_options so;
    transport_kind kind;
    int64_t from_ns; /* each tap keeps events from here on */
    tap taps[MAX_LOOPS];
    transport_stats last[MAX_LOOPS]; /* each one's counters when it was closed */
} loop_clients;

static int open_loop(void *ctx, int loop, transport *out, char *err)
{
    loop_clients *lc = ctx;
    if (loop >= MAX_LOOPS)
        return err_set(err, "more than %d loops", MAX_LOOPS);
    tap *tp = &lc->taps[loop];
    if (transport_kind_create(lc->kind, &lc->so, &tp->inner, err) != 0)
        return -1;
    tp->from_ns = lc->from_ns;
    *out = (transport){tp, tap_post, tap_run, tap_cancel, tap_active, tap_now, NULL, NULL};
    return 0;
}

static void close_loop(void *ctx, int loop, transport *t)
{
    loop_clients *lc = ctx;
    (void)t;
    tap *tp = &lc->taps[loop];
    if (tp->inner.stats)
        tp->inner.stats(tp->inner.impl, &lc->last[loop]);
    tp->inner.destroy(tp->inner.impl);
    tp->inner.impl = NULL;
}

/* Every loop's per-source errors in one tap (out's), the loops' freed. */
static void gather_taps(loop_clients *lc, tap *out)
{
    memset(out, 0, sizeof *out);
    for (int s = 0; s < TRANSPORT_STAMP_KINDS; s++) {
        int64_t n = 0;
        for (int i = 0; i < MAX_LOOPS; i++)
            n += lc->taps[i].n[s];
        out->error_ms[s] = n ? malloc((size_t)n * sizeof(double)) : NULL;
        out->cap[s] = out->error_ms[s] ? n : 0;
        for (int i = 0; i < MAX_LOOPS; i++) {
            tap *tp = &lc->taps[i];
            if (out->error_ms[s] && tp->n[s] > 0)
                memcpy(out->error_ms[s] + out->n[s], tp->error_ms[s],
                       (size_t)tp->n[s] * sizeof(double));
            out->n[s] += out->error_ms[s] ? tp->n[s] : 0;
            free(tp->error_ms[s]);
            tp->error_ms[s] = NULL;
        }
    }
}

static int run_ours(const char *url, int streams, int threads, transport_kind kind,
                    int64_t duration_ns, figures *out)
{
    char err[ERR_LEN];
    loop_clients lc;
    memset(&lc, 0, sizeof lc);
    lc.so.base_url = url;
    lc.so.max_streams = streams;
    lc.so.idle_timeout_ns = 30 * CLOCK_NS_PER_S;
    lc.kind = kind;
    const driver_transports transports = {open_loop, close_loop, &lc};
    workload_config wl;
    workload_default(&wl);
    wl.users = streams;
    wl.duration_ns = duration_ns;
    wl.inject = false;
    wl.prompt_len = (workload_dist){.kind = WORKLOAD_DIST_UNIFORM, .a = 16, .b = 32};
    wl.answer_len = (workload_dist){.kind = WORKLOAD_DIST_UNIFORM, .a = 64, .b = 128};
    driver_api api;
    driver_api_defaults(&api);
    api.token_ids = true;
    api.timestamps = true;
    api.vocab = 32000;
    driver_phase ph = {.wl = &wl, .api = &api, .salt = 3, .record = true,
                       .warmup_ns = CLOCK_NS_PER_S, .threads = threads};
    tokenlog log;
    tokenlog_init(&log);
    driver_result res;
    /* The CPU of the whole phase: warm-up, run, and the merge of the loops' logs at the
     * end (timed apart too). */
    lc.from_ns = clock_now_ns() + ph.warmup_ns;
    int64_t cpu0 = clock_process_cpu_ns(), t0 = clock_now_ns();
    int rc = driver_run_phase(&transports, &ph, &log, &res, err);
    int64_t cpu1 = clock_process_cpu_ns(), t1 = clock_now_ns();
    if (rc == 0) {
        memset(out, 0, sizeof *out);
        out->streams = streams;
        out->threads = threads;
        out->seconds = (double)(t1 - t0) / 1e9;
        for (int i = 0; i < MAX_LOOPS; i++) { /* over warm-up + run, like the CPU time */
            out->tokens += lc.last[i].tokens;
            out->errors += lc.last[i].errors;
        }
        out->cpu_ns_per_token = out->tokens ? (double)(cpu1 - cpu0) / (double)out->tokens : 0;
        out->end_ms = (double)(t1 - res.t_end_ns) / 1e6;
        analysis_dist_from(res.fidelity_ms, res.n_fidelity, &out->error_ms);
        memcpy(out->stamps, res.stamps, sizeof out->stamps);
        gather_taps(&lc, &out->tap);
        if (!res.complete)
            fprintf(stderr, "bench_client: run incomplete: %s\n", res.error);
    } else {
        fprintf(stderr, "bench_client: %s\n", err);
    }
    driver_result_free(&res);
    tokenlog_free(&log);
    for (int i = 0; i < MAX_LOOPS; i++)
        for (int s = 0; s < TRANSPORT_STAMP_KINDS; s++)
            free(lc.taps[i].error_ms[s]); /* after a failure; gathered ones are NULL */
    return rc;
}

/* ---- the chunk decoder alone ---------------------------------------------------------- */

/* ns per decode of one chunk, over about `seconds` of CPU. */
static double ns_per_decode(int (*decode)(const sse_event *, chunk_info *, char *),
                            const sse_event *ev, double seconds)
{
    char err[ERR_LEN];
    chunk_info chunk;
    int64_t n = 0, cpu0 = clock_process_cpu_ns(), cpu = 0;
    while (cpu < (int64_t)(seconds * 1e9)) {
        for (int i = 0; i < 10000; i++)
            decode(ev, &chunk, err);
        n += 10000;
        cpu = clock_process_cpu_ns() - cpu0;
    }
    return (double)cpu / (double)n;
}

/* The client's in-place scanner against jansson (the reference) on a chunk as vLLM and our
 * server send it, with stallscope's extension. */
static void bench_decoder(bool quick)
{
    static const char chunk[] =
        "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1732000000,\"model\":"
        "\"llama-3.1-8b\",\"choices\":[{\"index\":0,\"text\":\" w\",\"logprobs\":null,"
        "\"finish_reason\":null,\"stop_reason\":null}],\"usage\":{\"prompt_tokens\":16,"
        "\"total_tokens\":17,\"completion_tokens\":1},\"stallscope\":{\"emit_ns\":"
        "123456789012345,\"step\":4242}}";
    const sse_event ev = {chunk, sizeof chunk - 1, ""};
    const double seconds = quick ? 0.2 : 1.0;
    const double scanner = ns_per_decode(chunk_decode, &ev, seconds);
    const double reference = ns_per_decode(chunk_decode_jansson, &ev, seconds);
    printf("chunk decoder, a %zu-byte vLLM chunk: scanner %.0f ns, jansson %.0f ns (CPU per "
           "decode)\n\n",
           sizeof chunk - 1, scanner, reference);
}

/* ---- the Python client ---------------------------------------------------------------- */

static const char *python_client =
    "import asyncio, json, math, random, sys, time\n"
    "import aiohttp\n"
    "url, streams, duration = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])\n"
    "errors, tokens = [], 0\n"
    "async def user(session, stop):\n"
    "    global tokens\n"
    "    while time.monotonic() < stop:\n"
    "        body = {'prompt': [random.randrange(100, 32000) for _ in range(random.randint(16, 32))],\n"
    "                'max_tokens': random.randint(64, 128), 'stream': True, 'ignore_eos': True,\n"
    "                'stream_options': {'include_usage': True, 'continuous_usage_stats': True},\n"
    "                'stallscope': {'timestamps': True}}\n"
    "        async with session.post(url + '/v1/completions', json=body) as resp:\n"
    "            async for line in resp.content:\n"
    "                t = time.monotonic_ns()\n"
    "                if not line.startswith(b'data: ') or line.startswith(b'data: [DONE]'):\n"
    "                    continue\n"
    "                chunk = json.loads(line[6:])\n"
    "                if chunk.get('choices'):\n"
    "                    tokens += 1\n"
    "                    emit = chunk.get('stallscope', {}).get('emit_ns')\n"
    "                    if emit: errors.append((t - emit) / 1e6)\n"
    "                if time.monotonic() >= stop: break\n"
    "async def main():\n"
    "    conn = aiohttp.TCPConnector(limit=0)\n"
    "    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None)) as s:\n"
    "        stop = time.monotonic() + duration\n"
    "        await asyncio.gather(*(user(s, stop) for _ in range(streams)), return_exceptions=True)\n"
    "c0, t0 = time.process_time(), time.monotonic()\n"
    "asyncio.run(main())\n"
    "c1, t1 = time.process_time(), time.monotonic()\n"
    "errors.sort(); n = len(errors)\n"
    "q = lambda p: errors[max(0, min(n - 1, math.ceil(p * n) - 1))] if n else 0\n"
    "print(json.dumps({'tokens': tokens, 'seconds': t1 - t0, 'cpu_s': c1 - c0,\n"
    "                  'p50': q(0.5), 'p99': q(0.99), 'max': errors[-1] if n else 0}))\n";

static int run_python(const char *url, int streams, double seconds, figures *out)
{
    const char *py = "/usr/bin/python3";
    char path[] = "/tmp/bench_client_aiohttp_XXXXXX.py";
    int fd = mkstemps(path, 3);
    if (fd < 0)
        return -1;
    if (write(fd, python_client, strlen(python_client)) < 0) {
        close(fd);
        return -1;
    }
    close(fd);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s %s %d %.1f 2>/dev/null", py, path, url, streams, seconds);
    FILE *p = popen(cmd, "r");
    char line[1024] = "";
    if (p) {
        if (!fgets(line, sizeof line, p))
            line[0] = '\0';
        pclose(p);
    }
    unlink(path);
    double tokens = 0, secs = 0, cpu = 0, p50 = 0, p99 = 0, max = 0;
    if (sscanf(line, "{\"tokens\": %lf, \"seconds\": %lf, \"cpu_s\": %lf, \"p50\": %lf, \"p99\": "
                     "%lf, \"max\": %lf}",
               &tokens, &secs, &cpu, &p50, &p99, &max) != 6)
        return -1;
    memset(out, 0, sizeof *out);
    out->streams = streams;
    out->seconds = secs;
    out->tokens = (int64_t)tokens;
    out->cpu_ns_per_token = tokens > 0 ? cpu * 1e9 / tokens : 0;
    out->error_ms.p50 = p50;
    out->error_ms.p99 = p99;
    out->error_ms.max = max;
    return 0;
}

int main(int argc, char **argv)
{
    bool quick = false, only_raw = false, python = true;
    const char *model = "llama-3.1-8b"; /* the emulated server's; a smaller one steps faster */
    int counts[8] = {32, 1024, 4096}, n_counts = 3;
    int threads[8] = {1, 2}, n_threads = 2;
    transport_kind kinds[2] = {TRANSPORT_RAW, TRANSPORT_CURL};
    int n_kinds = 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--raw-only") == 0) {
            only_raw = true; /* for profiling the client alone */
        } else if (strcmp(argv[i], "--no-python") == 0) {
            python = false;
        } else if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc) {
            i++;
            kinds[0] = strcmp(argv[i], "curl") == 0 ? TRANSPORT_CURL : TRANSPORT_RAW;
            n_kinds = 1;
        } else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
            model = argv[++i];
        } else if (strcmp(argv[i], "--streams") == 0 && i + 1 < argc) {
            n_counts = 0;
            for (char *tok = strtok(argv[++i], ","); tok && n_counts < 8; tok = strtok(NULL, ","))
                counts[n_counts++] = atoi(tok);
        } else if (strcmp(argv[i], "--client-threads") == 0 && i + 1 < argc) {
            n_threads = 0;
            for (char *tok = strtok(argv[++i], ","); tok && n_threads < 8; tok = strtok(NULL, ","))
                if (atoi(tok) >= 1 && atoi(tok) <= MAX_LOOPS)
                    threads[n_threads++] = atoi(tok);
        }
    }
    signal(SIGPIPE, SIG_IGN);
    char bin[PATH_MAX];
    proc_info_stallscope_bin(bin, sizeof bin);
    int64_t duration = (quick ? 3 : 8) * CLOCK_NS_PER_S;
    bool have_python = python && access("/usr/bin/python3", X_OK) == 0 &&
                       system("/usr/bin/python3 -c 'import aiohttp' 2>/dev/null") == 0;
    printf("bench_client: %lld s per point (+1 s warm-up), closed-loop streams, answers of 64-128 "
           "tokens; the emulated server runs %s on an H100\n",
           (long long)(duration / CLOCK_NS_PER_S), model);
    printf("timestamp error = client receive stamp - server emit_ns (same CLOCK_MONOTONIC)\n\n");
    bench_decoder(quick);
    printf("%-26s %7s %6s %9s %10s %9s %9s %9s %9s %7s %8s  %s\n", "against, transport", "threads",
           "streams", "tokens/s", "cpu us/tok", "err p50us", "err p99us", "err p999", "err maxus",
           "errors", "end ms", "stamps % kernel/coalesced/user");
    for (int i = 0; i < n_counts; i++) {
        int n = counts[i];
        char url[128], log[] = "/tmp/bench_client_serve.log";
        figures f;
        pid_t pid = only_raw ? 0 : spawn_serve(bin, model, n, url, sizeof url, log);
        if (only_raw) {
        } else if (pid < 0) {
            printf("%-22s %6d (the server did not start: %s)\n", "embedded emulate", n, bin);
        } else {
            for (int t = 0; t < n_kinds; t++)
                for (int k = 0; k < n_threads; k++)
                    if (run_ours(url, n, threads[k], kinds[t], duration, &f) == 0)
                        print_row(kinds[t] == TRANSPORT_RAW ? "emulate, raw" : "emulate, curl", &f);
            if (have_python && n <= 1024) {
                figures py;
                if (run_python(url, n, (double)duration / 1e9, &py) == 0)
                    print_row("emulate, python aiohttp", &py);
                else
                    printf("  python aiohttp: failed\n");
            }
            stop_child(pid);
        }
        /* The raw sender: 20 ms steps offer 50 tokens/s per stream. */
        raw_sender sender;
        char err[ERR_LEN];
        if (raw_sender_start(&sender, 20 * CLOCK_NS_PER_MS, 100, err) == 0) {
            for (int t = 0; t < n_kinds; t++)
                for (int k = 0; k < n_threads; k++)
                    if (run_ours(sender.url, n, threads[k], kinds[t], duration, &f) == 0)
                        print_row(kinds[t] == TRANSPORT_RAW ? "raw sender 20 ms, raw"
                                                            : "raw sender 20 ms, curl",
                                  &f);
            raw_sender_stop(&sender);
        } else {
            fprintf(stderr, "bench_client: %s\n", err);
        }
    }
    if (!have_python && python)
        printf("\n(python3-aiohttp not installed: no Python comparison)\n");
    printf("\nthreads: the client's event loops (--client-threads). cpu us/tok: this process's CPU "
           "time (user + system, every thread) / tokens received; 1 / it is the token rate one "
           "core sustains. end ms: from the loops' end to the merged log (ordering, k-way "
           "merge, closing).\n");
    return 0;
}
