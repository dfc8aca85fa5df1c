/* bench_serve — the embedded server under N concurrent streams on an emulated H100
 * (Llama 3.1 8B, one-step prefill settings). Prints figures; never fails on time.
 *
 * In one process: the server (its loop thread + engine thread, as `stallscope serve`) and
 * an epoll client holding N HTTP/1.1 streams that ask for the per-chunk timestamps (64-token
 * prompts, ignore_eos, mixed 16384, max_num_seqs N, KV room for 1,536 tokens a stream so
 * nothing is preempted). After a
 * warm-up (every prompt prefilled), for a measured window it reports:
 *   - emulated step timing error, actual - modeled, from the step log: p50 / p99 / max;
 *   - schedule slips (the engine fell > 2 ms behind and restarted from now);
 *   - server CPU time (loop + engine threads) per token delivered;
 *   - keeping up: tokens/s delivered against the model's rate (N per modeled step), and the
 *     lag from a token's step end to the server's write (emit_ns) and to the client's read.
 * usage: bench_serve [N,N,...] [seconds]     (default 32,256,1024 and 5 s) */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "engine/cost.h"
#include "engine/exec_emulate.h"
#include "server/server.h"

#define PROMPT_TOKENS 64
#define WARMUP_NS (1500 * CLOCK_NS_PER_MS)

typedef struct conn {
    int fd;
    char *raw; /* bytes read, chunked framing not yet removed */
    size_t raw_len, raw_cap;
    char *body; /* de-chunked bytes not yet split into SSE events */
    size_t body_len, body_cap;
    bool headers_done;
} conn;

typedef struct sample {
    int64_t recv_ns;
    int64_t emit_ns;
    int64_t step;
} sample;

typedef struct samples {
    sample *v;
    size_t n, cap;
} samples;

static void grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return;
    size_t c = *cap ? *cap : 4096;
    while (c < need)
        c *= 2;
    *buf = realloc(*buf, c);
    *cap = c;
}

static int64_t parse_after(const char *s, size_t len, const char *key)
{
    const char *at = memmem(s, len, key, strlen(key));
    if (!at)
        return -1;
    return strtoll(at + strlen(key), NULL, 10);
}

/* Split complete SSE events out of c->body and record their stamps. */
static void take_events(conn *c, int64_t now, samples *out)
{
    if (!c->body)
        return;
    size_t at = 0;
    for (;;) {
        char *end = memmem(c->body + at, c->body_len - at, "\n\n", 2);
        if (!end)
            break;
        size_t len = (size_t)(end - (c->body + at));
        const char *ev = c->body + at;
        if (len > 6 && memmem(ev, len, "\"text\":", 7)) {
            if (out->n == out->cap) {
                out->cap = out->cap ? out->cap * 2 : 1 << 20;
                out->v = realloc(out->v, out->cap * sizeof *out->v);
            }
            out->v[out->n++] = (sample){now, parse_after(ev, len, "\"emit_ns\":"),
                                        parse_after(ev, len, "\"step\":")};
        }
        at += len + 2;
    }
    memmove(c->body, c->body + at, c->body_len - at);
    c->body_len -= at;
}

/* Remove chunked framing from c->raw into c->body. */
static void dechunk(conn *c)
{
    size_t at = 0;
    if (!c->headers_done) {
        char *end = memmem(c->raw, c->raw_len, "\r\n\r\n", 4);
        if (!end)
            return;
        c->headers_done = true;
        at = (size_t)(end - c->raw) + 4;
    }
    for (;;) {
        char *eol = memmem(c->raw + at, c->raw_len - at, "\r\n", 2);
        if (!eol)
            break;
        size_t size = strtoul(c->raw + at, NULL, 16);
        size_t start = (size_t)(eol - c->raw) + 2;
        if (c->raw_len < start + size + 2)
            break;
        grow(&c->body, &c->body_cap, c->body_len + size);
        memcpy(c->body + c->body_len, c->raw + start, size);
        c->body_len += size;
        at = start + size + 2;
    }
    memmove(c->raw, c->raw + at, c->raw_len - at);
    c->raw_len -= at;
}

static void *run_server(void *arg)
{
    char err[ERR_LEN];
    if (server_run(arg, err) != 0)
        fprintf(stderr, "server: %s\n", err);
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(const int64_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)(p * (double)(n - 1));
    return (double)v[i];
}

typedef struct step_row {
    int64_t step, t0, t1, modeled;
    int dec, pre, n;
} step_row;

static void bench_level(int n_streams, double seconds, const cost_params *cost)
{
    char err[ERR_LEN] = "";
    char log_path[] = "/tmp/bench_serve_steps_XXXXXX";
    int log_fd = mkstemp(log_path);
    if (log_fd < 0) {
        perror("mkstemp");
        return;
    }
    close(log_fd);
    server_config cfg;
    memset(&cfg, 0, sizeof cfg);
    strcpy(cfg.host, "127.0.0.1");
    strcpy(cfg.model_name, cost->arch.name);
    snprintf(cfg.step_log_path, sizeof cfg.step_log_path, "%s", log_path);
    cfg.realtime = true;
    /* KV room for 1,536 tokens per stream at least (more than the H100's 80 GB hold for
     * 1,024 streams): preemption would turn the window into recompute storms, and the
     * point here is the token path. The cost model still prices every step's KV reads. */
    int64_t kv_blocks = cost_kv_blocks(cost, 0.9, 16);
    if (kv_blocks < (int64_t)n_streams * 96)
        kv_blocks = (int64_t)n_streams * 96;
    cfg.sched = (sched_config){.policy = SCHED_MIXED, .max_num_batched_tokens = 16384,
                               .max_num_seqs = n_streams, .max_model_len = cost->arch.max_position,
                               .block_size = 16, .kv_blocks = kv_blocks};
    exec *x = exec_emulate_create(cost, err);
    server *srv = x ? server_create(&cfg, x, err) : NULL;
    if (!srv) {
        fprintf(stderr, "bench_serve: %s\n", err);
        return;
    }
    pthread_t thread;
    pthread_create(&thread, NULL, run_server, srv);

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)server_port(srv)),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ep = epoll_create1(0);
    conn *conns = calloc((size_t)n_streams, sizeof *conns);
    char body[2048];
    int blen = snprintf(body, sizeof body,
                        "{\"prompt\":[%s],\"max_tokens\":100000,\"ignore_eos\":true,"
                        "\"stream\":true,\"stallscope\":{\"timestamps\":true}}",
                        "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,"
                        "28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,"
                        "52,53,54,55,56,57,58,59,60,61,62,63,64");
    char req[4096];
    int rlen = snprintf(req, sizeof req,
                        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                        "application/json\r\nContent-Length: %d\r\n\r\n%s",
                        blen, body);
    for (int i = 0; i < n_streams; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
            perror("connect");
            exit(1);
        }
        if (write(fd, req, (size_t)rlen) != rlen) {
            perror("write");
            exit(1);
        }
        fcntl(fd, F_SETFL, O_NONBLOCK);
        conns[i].fd = fd;
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }

    samples all = {0};
    const int64_t t_start = clock_now_ns();
    const int64_t t_window = t_start + WARMUP_NS;
    const int64_t t_stop = t_window + (int64_t)(seconds * 1e9);
    int64_t cpu_window = -1, cpu_end = -1, client_cpu_window = 0;
    size_t samples_at_window = 0;
    struct epoll_event events[256];
    for (;;) {
        int64_t now = clock_now_ns();
        if (cpu_window < 0 && now >= t_window) {
            cpu_window = server_cpu_ns(srv);
            client_cpu_window = clock_process_cpu_ns() - cpu_window;
            samples_at_window = all.n;
        }
        if (now >= t_stop)
            break;
        int k = epoll_wait(ep, events, 256, 10);
        now = clock_now_ns();
        for (int e = 0; e < k; e++) {
            conn *c = &conns[events[e].data.u32];
            for (;;) {
                grow(&c->raw, &c->raw_cap, c->raw_len + 65536);
                ssize_t got = read(c->fd, c->raw + c->raw_len, 65536);
                if (got <= 0)
                    break;
                c->raw_len += (size_t)got;
            }
            dechunk(c);
            take_events(c, now, &all);
        }
    }
    cpu_end = server_cpu_ns(srv);
    const int64_t process_cpu_end = clock_process_cpu_ns();
    const int64_t t_end = clock_now_ns();
    server_stop(srv);
    pthread_join(thread, NULL);
    server_free(srv);
    for (int i = 0; i < n_streams; i++) {
        close(conns[i].fd);
        free(conns[i].raw);
        free(conns[i].body);
    }
    free(conns);
    close(ep);

    /* The step log: steps that started inside the window. */
    FILE *f = fopen(log_path, "r");
    char line[256];
    step_row *rows = NULL;
    size_t n_rows = 0, cap_rows = 0;
    if (f && fgets(line, sizeof line, f)) {
        step_row r;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "%ld,%ld,%ld,%d,%d,%d,%ld", &r.step, &r.t0, &r.t1, &r.dec, &r.pre,
                       &r.n, &r.modeled) != 7)
                continue;
            if (n_rows == cap_rows) {
                cap_rows = cap_rows ? cap_rows * 2 : 4096;
                rows = realloc(rows, cap_rows * sizeof *rows);
            }
            rows[n_rows++] = r;
        }
    }
    if (f)
        fclose(f);
    unlink(log_path);
    int64_t first_step = -1, last_step = -1;
    int64_t *errs = malloc((n_rows + 1) * sizeof *errs);
    size_t n_errs = 0;
    int64_t modeled_sum = 0, decode_modeled = 0, n_decode = 0, engine_tokens = 0;
    for (size_t i = 0; i < n_rows; i++) {
        if (rows[i].t0 < t_window || rows[i].t1 > t_stop)
            continue;
        if (first_step < 0)
            first_step = rows[i].step;
        last_step = rows[i].step;
        errs[n_errs++] = rows[i].t1 - rows[i].t0 - rows[i].modeled;
        modeled_sum += rows[i].modeled;
        engine_tokens += rows[i].dec; /* decodes sample one token each */
        if (rows[i].pre == 0) {
            decode_modeled += rows[i].modeled;
            n_decode++;
        }
    }
    qsort(errs, n_errs, sizeof *errs, cmp_i64);

    /* Lags of the tokens of those steps: step end -> server write -> client read. */
    int64_t *write_lag = malloc((all.n + 1) * sizeof *write_lag);
    int64_t *read_lag = malloc((all.n + 1) * sizeof *read_lag);
    size_t n_lag = 0, tokens_window = 0;
    for (size_t i = samples_at_window; i < all.n; i++) {
        const sample *s = &all.v[i];
        tokens_window++;
        if (s->step < first_step || s->step > last_step || first_step < 0)
            continue;
        const step_row *r = &rows[s->step]; /* steps are logged from 0, in order */
        if (r->step != s->step)
            continue;
        write_lag[n_lag] = s->emit_ns - r->t1;
        read_lag[n_lag] = s->recv_ns - r->t1;
        n_lag++;
    }
    qsort(write_lag, n_lag, sizeof *write_lag, cmp_i64);
    qsort(read_lag, n_lag, sizeof *read_lag, cmp_i64);

    const double window_s = (double)(t_stop - t_window) / 1e9;
    const double server_cpu_s = (double)(cpu_end - cpu_window) / 1e9;
    const double client_cpu_s =
        (double)(process_cpu_end - cpu_end - client_cpu_window) / 1e9;
    const double step_ms = n_decode ? (double)decode_modeled / (double)n_decode / 1e6 : 0;
    /* The model's rate: every stream one token per modeled decode step. What the engine
     * produced in the window and what the client read in it are compared against it. */
    const double model_rate = step_ms > 0 ? n_streams / (step_ms / 1e3) : 0;
    const double engine_rate = (double)engine_tokens / window_s;
    const double got_rate = (double)tokens_window / window_s;
    printf("\n== %d streams (H100, Llama 3.1 8B, %.0f s window after %.1f s warm-up)\n", n_streams,
           window_s, (double)WARMUP_NS / 1e9);
    printf("  steps in window       %zu (decode step modeled %.3f ms; busy %.1f %% of the window)\n",
           n_errs, step_ms, 100.0 * (double)modeled_sum / 1e9 / window_s);
    printf("  step error (actual - modeled): p50 %.3f ms  p99 %.3f ms  max %.3f ms\n",
           pct(errs, n_errs, 0.5) / 1e6, pct(errs, n_errs, 0.99) / 1e6,
           n_errs ? (double)errs[n_errs - 1] / 1e6 : 0);
    printf("  tokens/s: model %.0f (%d x 1 per %.3f ms), engine produced %.0f, client read %.0f "
           "(%.1f %% of the model)\n",
           model_rate, n_streams, step_ms, engine_rate, got_rate,
           model_rate > 0 ? 100.0 * got_rate / model_rate : 0);
    printf("  mean batch            %.1f requests per step\n",
           n_errs ? (double)engine_tokens / (double)n_errs : 0);
    printf("  lag step end -> server write: p50 %.3f ms  p99 %.3f ms  max %.3f ms\n",
           pct(write_lag, n_lag, 0.5) / 1e6, pct(write_lag, n_lag, 0.99) / 1e6,
           n_lag ? (double)write_lag[n_lag - 1] / 1e6 : 0);
    printf("  lag step end -> client read:  p50 %.3f ms  p99 %.3f ms  max %.3f ms\n",
           pct(read_lag, n_lag, 0.5) / 1e6, pct(read_lag, n_lag, 0.99) / 1e6,
           n_lag ? (double)read_lag[n_lag - 1] / 1e6 : 0);
    printf("  server CPU            %.2f s in %.0f s (%.0f %% of a core); %.2f us per token\n",
           server_cpu_s, window_s, 100.0 * server_cpu_s / window_s,
           tokens_window ? server_cpu_s * 1e6 / (double)tokens_window : 0);
    printf("  client CPU (same process, epoll reader): %.2f s\n", client_cpu_s);
    (void)t_end;
    free(errs);
    free(write_lag);
    free(read_lag);
    free(rows);
    free(all.v);
}

int main(int argc, char **argv)
{
    int levels[16] = {32, 256, 1024};
    int n_levels = 3;
    double seconds = 5;
    if (argc > 1) {
        n_levels = 0;
        for (char *tok = strtok(argv[1], ","); tok && n_levels < 16; tok = strtok(NULL, ","))
            levels[n_levels++] = atoi(tok);
    }
    if (argc > 2)
        seconds = atof(argv[2]);
    signal(SIGPIPE, SIG_IGN);
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
    char err[ERR_LEN];
    cost_gpu gpu;
    cost_arch arch;
    if (cost_gpu_find("h100-sxm", &gpu, err) != 0 || cost_arch_find("llama-3.1-8b", &arch, err) != 0) {
        fprintf(stderr, "bench_serve: %s\n", err);
        return 1;
    }
    cost_params cost;
    cost_params_init(&cost, &gpu, &arch);
    printf("bench_serve: emulated steps vs the cost model, and the server's token path\n");
    for (int i = 0; i < n_levels; i++)
        bench_level(levels[i], seconds, &cost);
    return 0;
}
