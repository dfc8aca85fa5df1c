/* proxy_loop — see proxy.h: the loop, its listening sockets, the analysis's callbacks and
 * the run's start and stop (the connections: proxy_conns.c; the admin port: proxy_admin.c). */
#include "proxy/proxy.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/chunk.h"
#include "client/http1.h"
#include "client/sse.h"
#include "client/stamp.h"
#include "client/tls.h"
#include "client/url.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/tokenlog.h"
#include "proxy/inspect.h"
#include "proxy/plog.h"
#include "proxy/pmetrics.h"
#include "proxy/proxy_state.h"
#include "server/reqframe.h"

/* ---- small things --------------------------------------------------------------------- */


static int split_hostport(const char *s, char *host, size_t hsize, char *port, size_t psize)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || !colon[1])
        return -1;
    const char *h = s;
    size_t hlen = (size_t)(colon - s);
    if (h[0] == '[' && hlen >= 2 && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (hlen >= hsize || strlen(colon + 1) >= psize)
        return -1;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    snprintf(port, psize, "%s", colon + 1);
    return 0;
}

static int listen_on(const char *what, const char *addr, int *port_out, char *err)
{
    char host[256], port[32];
    if (split_hostport(addr, host, sizeof host, port, sizeof port) != 0)
        return err_set(err, "%s '%s': expected HOST:PORT (127.0.0.1:8001, 0.0.0.0:8001)", what, addr);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0)
        return err_set(err, "%s '%s': %s", what, addr, gai_strerror(rc));
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 4096) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        freeaddrinfo(res);
        return err_set(err, "%s %s: %s", what, addr, strerror(e));
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &len);
    *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}


/* ---- the analysis's results ------------------------------------------------------------------- */

static void on_gap(void *ctx, int64_t request, int64_t gap_ns)
{
    (void)request;
    pmet_observe(&((px *)ctx)->m.itl, (double)gap_ns / 1e9);
}

static void on_stall(void *ctx, const pobs_stall *s)
{
    px *p = ctx;
    p->m.stalls[s->cause]++;
    p->m.stalled_s += (double)s->gap_ns / 1e9;
    if (p->logging)
        plog_stall(&p->log, s, clock_now_ns());
}

static void on_culprit(void *ctx, int64_t request, int32_t prompt_tokens)
{
    (void)request;
    if (prompt_tokens > 0)
        pmet_observe(&((px *)ctx)->m.culprit_prompt, prompt_tokens);
}

/* ---- the loop --------------------------------------------------------------------------- */

void proxy_config_default(proxy_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->listen, sizeof cfg->listen, "127.0.0.1:8001");
    snprintf(cfg->admin, sizeof cfg->admin, "127.0.0.1:9464");
    cfg->sample = 1;
    pobs_config_default(&cfg->obs);
    cfg->connect_timeout_ns = 10 * CLOCK_NS_PER_S;
    cfg->idle_timeout_ns = 300 * CLOCK_NS_PER_S;
    cfg->max_body = 64LL << 20;
    cfg->max_conns = 20000;
}

/* Once a second: connects that took too long (504), clients idle too long between requests,
 * admin connections that never asked. */
static void timeouts(px *p, int64_t now)
{
    for (down *d = p->downs, *next; d; d = next) {
        next = d->next;
        if (d->busy && d->u && d->u->state != UP_OPEN &&
            now - d->u->t_open_ns > p->cfg->connect_timeout_ns)
            px_up_failed(p, d, 504, "no connection to the upstream within the connect timeout");
        else if (!d->busy && now - d->t_active_ns > p->cfg->idle_timeout_ns)
            px_down_close(p, d);
    }
    for (admin *a = p->admins, *next; a; a = next) {
        next = a->next;
        if (now - a->t_open_ns > 10 * CLOCK_NS_PER_S)
            px_admin_close(p, a);
    }
}

static void progress(px *p, int64_t now)
{
    if (p->cfg->quiet || now < p->next_progress_ns)
        return;
    p->next_progress_ns = now + PROGRESS_NS;
    int64_t stalls = 0;
    for (int c = 0; c < POBS_N_CAUSES; c++)
        stalls += p->m.stalls[c];
    fprintf(stderr,
            "stallscope proxy: %d connections, %lld streams open, %lld tokens and %lld stalls "
            "(prefill %lld) in the last minute, threshold %.1f ms\n",
            p->n_down, (long long)p->m.in_flight, (long long)(p->m.tokens - p->last_tokens),
            (long long)(stalls - p->last_stalls), (long long)p->m.stalls[POBS_CAUSE_PREFILL],
            (double)pobs_threshold_ns(p->obs) / 1e6);
    p->last_tokens = p->m.tokens;
    p->last_stalls = stalls;
}

static int resolve_upstream(px *p, char *err)
{
    char base[2048];
    snprintf(base, sizeof base, "%s", p->cfg->upstream);
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '/')
        base[--n] = '\0';
    if (url_split(base, &p->parts, err) != 0)
        return -1;
    p->upi.authority = p->cfg->upstream + (p->parts.authority - base);
    p->upi.authority_len = p->parts.authority_len;
    p->upi.path = p->parts.path;
    p->upi.basic = p->parts.basic;
    if (p->cfg->name[0])
        snprintf(p->label, sizeof p->label, "%s", p->cfg->name);
    else
        snprintf(p->label, sizeof p->label, strchr(p->parts.host, ':') ? "[%s]:%s" : "%s:%s",
                 p->parts.host, p->parts.port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(p->parts.host, p->parts.port, &hints, &res);
    if (rc != 0)
        return err_set(err, "--upstream: cannot resolve %s: %s", p->parts.host, gai_strerror(rc));
    memcpy(&p->up_addr, res->ai_addr, res->ai_addrlen);
    p->up_addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    if (p->parts.tls && !(p->tls = tls_context_new(p->cfg->insecure, err)))
        return -1;
    return 0;
}

static void shutdown_all(px *p)
{
    const int64_t now = clock_now_ns();
    while (p->downs) {
        down *d = p->downs;
        if (d->busy)
            px_exchange_end(p, d, "the proxy stopped");
        px_down_close(p, d);
    }
    while (p->admins)
        px_admin_close(p, p->admins);
    pobs_flush(p->obs, now);
    px_free_graves(p);
}

static void dispatch(px *p, struct epoll_event *ev)
{
    item *it = ev->data.ptr;
    switch (it->kind) {
    case K_LISTEN:
        px_accept_clients(p);
        break;
    case K_ADMIN_LISTEN:
        px_accept_admins(p);
        break;
    case K_SIGNAL: {
        char bytes[16];
        while (read(p->signal_fd, bytes, sizeof bytes) > 0)
            p->stopping = true;
        break;
    }
    case K_ADMIN: {
        admin *a = (admin *)it;
        if (ev->events & EPOLLOUT)
            px_admin_flush(p, a);
        else
            px_admin_read(p, a);
        break;
    }
    case K_UP: {
        up *u = (up *)it;
        if (!u->gone && (ev->events & (EPOLLOUT | EPOLLERR)))
            px_up_writable(p, u);
        if (!u->gone && (ev->events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
            px_up_read(p, u);
        break;
    }
    case K_DOWN: {
        down *d = (down *)it;
        if (d->gone)
            break;
        if (ev->events & EPOLLOUT)
            if (!px_down_flush(p, d))
                break;
        if (ev->events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            px_down_read(p, d);
        break;
    }
    }
}

static int stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig)
{
    (void)sig;
    const int saved = errno;
    if (write(stop_pipe[1], "s", 1) < 0) {
        /* full: a stop is pending already */
    }
    errno = saved;
}

int proxy_run(const proxy_config *cfg, char *err)
{
    px *p = calloc(1, sizeof *p);
    if (!p)
        return err_set(err, "out of memory");
    int rc = -1;
    p->cfg = cfg;
    p->listen_fd = p->admin_fd = p->signal_fd = p->ep = -1;
    pmet_init(&p->m);
    const pobs_sink sink = {p, on_gap, on_stall, on_culprit};
    int listen_port = 0, admin_port = 0;
    (void)stamp_switch_on(); /* the kernel's stamps on before the first upstream read */
    if (resolve_upstream(p, err) != 0)
        goto out;
    if (!(p->obs = pobs_new(&cfg->obs, &sink))) {
        err_set(err, "out of memory");
        goto out;
    }
    if ((p->listen_fd = listen_on("--listen", cfg->listen, &listen_port, err)) < 0)
        goto out;
    if (cfg->admin[0] && (p->admin_fd = listen_on("--admin", cfg->admin, &admin_port, err)) < 0)
        goto out;
    p->ep = epoll_create1(EPOLL_CLOEXEC);
    /* A handler, not signalfd: threads the libraries started before us (OpenBLAS's pool) do
     * not block the signals, and one of them may take it. The handler writes a byte to a pipe
     * the loop watches (async-signal-safe). */
    if (pipe2(stop_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
        err_set(err, "pipe: %s", strerror(errno));
        goto out;
    }
    p->signal_fd = stop_pipe[0];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    p->listen_item.kind = K_LISTEN;
    p->admin_item.kind = K_ADMIN_LISTEN;
    p->signal_item.kind = K_SIGNAL;
    px_watch(p, p->listen_fd, &p->listen_item, EPOLLIN, EPOLL_CTL_ADD);
    if (p->admin_fd >= 0)
        px_watch(p, p->admin_fd, &p->admin_item, EPOLLIN, EPOLL_CTL_ADD);
    px_watch(p, p->signal_fd, &p->signal_item, EPOLLIN, EPOLL_CTL_ADD);

    const int64_t t0 = clock_now_ns();
    if (cfg->out[0]) {
        const plog_meta meta = {t0, t0 + clock_realtime_offset_ns(3, NULL), p->label, cfg->sample,
                                &cfg->obs};
        if (plog_open(&p->log, cfg->out, &meta, err) != 0)
            goto out;
        p->logging = true;
    }
    fprintf(stderr, "stallscope proxy: listening on %.*s:%d, forwarding to %s\n",
            (int)(strrchr(cfg->listen, ':') - cfg->listen), cfg->listen, listen_port, p->label);
    if (p->admin_fd >= 0)
        fprintf(stderr, "stallscope proxy: metrics on http://%.*s:%d/metrics, /health\n",
                (int)(strrchr(cfg->admin, ':') - cfg->admin), cfg->admin, admin_port);
    if (p->logging)
        fprintf(stderr, "stallscope proxy: rows to %s (%.0f%% of streams)\n", p->log.session,
                cfg->sample * 100);
    if (cfg->ready_file) {
        FILE *f = fopen(cfg->ready_file, "w");
        if (f) {
            fprintf(f, "%d %d\n", listen_port, admin_port);
            fclose(f);
        }
    }
    p->next_progress_ns = t0 + PROGRESS_NS;
    int64_t next_second = t0 + CLOCK_NS_PER_S;
    struct epoll_event evs[MAX_EVENTS];
    while (!p->stopping) {
        int n = epoll_wait(p->ep, evs, MAX_EVENTS, (int)(TICK_NS / CLOCK_NS_PER_MS));
        if (n < 0 && errno != EINTR) {
            err_set(err, "epoll_wait: %s", strerror(errno));
            break;
        }
        p->realtime_offset_ns = clock_realtime_offset_ns(1, NULL);
        for (int i = 0; i < n; i++)
            dispatch(p, &evs[i]);
        px_free_graves(p);
        const int64_t now = clock_now_ns();
        pobs_advance(p->obs, now);
        if (p->logging)
            plog_tick(&p->log, now);
        if (now >= next_second) {
            next_second = now + CLOCK_NS_PER_S;
            if (p->accept_paused) {
                p->accept_paused = false;
                px_watch(p, p->listen_fd, &p->listen_item, EPOLLIN, EPOLL_CTL_MOD);
                if (p->admin_fd >= 0)
                    px_watch(p, p->admin_fd, &p->admin_item, EPOLLIN, EPOLL_CTL_MOD);
            }
            timeouts(p, now);
            px_free_graves(p);
            progress(p, now);
        }
        if (cfg->duration_ns > 0 && now - t0 >= cfg->duration_ns)
            p->stopping = true;
    }
    shutdown_all(p);
    rc = 0;
    if (p->logging && plog_close(&p->log, err) != 0)
        rc = -1;
    fprintf(stderr, "stallscope proxy: stopped: %lld requests, %lld tokens, %lld stalls (prefill %lld)\n",
            (long long)p->m.requests, (long long)p->m.tokens,
            (long long)(p->m.stalls[0] + p->m.stalls[1]), (long long)p->m.stalls[POBS_CAUSE_PREFILL]);
out:
    if (p->ep >= 0)
        close(p->ep);
    if (p->listen_fd >= 0)
        close(p->listen_fd);
    if (p->admin_fd >= 0)
        close(p->admin_fd);
    if (stop_pipe[0] >= 0) {
        /* The handler stays: a second SIGTERM (timeout(1) signals the child and then its
         * process group) must not kill a proxy that is already stopping. It writes to -1. */
        close(stop_pipe[0]);
        close(stop_pipe[1]);
        stop_pipe[0] = stop_pipe[1] = -1;
    }
    pobs_free(p->obs);
    tls_context_free(p->tls);
    url_parts_wipe(&p->parts);
    px_free_graves(p);
    free(p->grave);
    free(p->span);
    free(p);
    return rc;
}
