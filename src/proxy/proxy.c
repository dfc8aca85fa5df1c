/* proxy — see proxy.h. The loop, the client connections (down), the upstream connections
 * (up) and the admin port. */
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
#include "client/tls.h"
#include "client/url.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/tokenlog.h"
#include "proxy/inspect.h"
#include "proxy/plog.h"
#include "proxy/pmetrics.h"
#include "server/reqframe.h"

#define READ_BUF (64 * 1024)
#define MAX_EVENTS 256
#define TICK_NS (100 * CLOCK_NS_PER_MS)
#define IN_CAP (1 << 20)          /* a client's unframed bytes held while its request runs */
#define OUT_PAUSE (4 << 20)       /* a client this far behind: stop reading its upstream */
#define OUT_RESUME (1 << 20)
#define ADMIN_IN_CAP (16 * 1024)
#define PROGRESS_NS (60 * CLOCK_NS_PER_S)

enum { K_LISTEN, K_ADMIN_LISTEN, K_DOWN, K_UP, K_ADMIN, K_SIGNAL };
enum { UP_CONNECTING, UP_TLS, UP_OPEN };
enum { PH_IDLE, PH_HEAD, PH_BODY };

typedef struct px px;
typedef struct down down;

typedef struct item {
    int kind;
} item;

typedef struct up {
    int kind; /* K_UP */
    int fd;
    down *d;
    int state;
    tls_session *tls;
    bool request_queued; /* https: the request handed to TLS */
    buf out;
    size_t out_off;
    bool want_out, paused;
    bool reused; /* carried an answer before this one */
    int64_t t_open_ns;
    int phase;
    buf head;
    http1_response resp;
    http1_body body;
    bool got_bytes; /* a byte of the current answer */
    bool gone;      /* closed: freed at the end of this wake-up */
} up;

struct down {
    int kind; /* K_DOWN */
    int fd;
    int32_t user;
    reqframe rf;
    buf in, req, body, out;
    size_t out_off;
    bool want_out, reading;
    bool in_request; /* a head handed on, its request not complete yet */
    bool busy;       /* its request is with the upstream */
    bool close_after;/* close once out is written */
    bool gone;       /* closed: freed at the end of this wake-up */
    pinsp_head h;
    up *u;
    int64_t t_active_ns;
    int attempts;
    /* the exchange */
    int64_t rid;
    bool observed, logged, answered, streaming, sent;
    int status;
    int64_t t_arrive_ns, t_send_ns, t_first_ns;
    int32_t prompt_est;
    int64_t max_tokens;
    sse_parser sse;
    chunk_counter cc;
    char finish[16];
    char error[128];
    down *prev, *next;
};

typedef struct admin {
    int kind; /* K_ADMIN */
    int fd;
    reqframe rf;
    buf in, out;
    size_t out_off;
    int64_t t_open_ns;
    struct admin *prev, *next;
} admin;

struct px {
    const proxy_config *cfg;
    int ep;
    item listen_item, admin_item, signal_item;
    int listen_fd, admin_fd, signal_fd;
    struct sockaddr_storage up_addr;
    socklen_t up_addr_len;
    url_parts parts;
    pinsp_upstream upi;
    char label[300];
    tls_context *tls;
    pobs *obs;
    pmetrics m;
    plog log;
    bool logging;
    int64_t realtime_offset_ns;
    int64_t next_rid;
    int32_t next_user;
    int n_down;
    bool accept_paused; /* out of descriptors: the listeners unwatched until the next second */
    down *downs;
    admin *admins;
    void **grave; /* closed downs and ups, freed after this wake-up's events */
    int64_t n_grave, cap_grave;
    bool stopping;
    char rd[READ_BUF];
    char frame_out[REQFRAME_OUT_MIN];
    /* the spans of one read's body bytes */
    struct span {
        const char *data;
        size_t len;
    } * span;
    int64_t span_cap;
    int64_t next_progress_ns;
    int64_t last_tokens, last_stalls;
};

/* ---- small things --------------------------------------------------------------------- */

static void watch(px *p, int fd, void *ptr, uint32_t events, int op)
{
    struct epoll_event ev = {0};
    ev.events = events;
    ev.data.ptr = ptr;
    epoll_ctl(p->ep, op, fd, &ev);
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

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

/* ---- writing to a client ------------------------------------------------------------- */

static void down_close(px *p, down *d);
static void up_close(px *p, up *u);
static void exchange_end(px *p, down *d, const char *error);
static void down_input(px *p, down *d);

static void down_watch(px *p, down *d)
{
    const bool out = d->out_off < d->out.len;
    uint32_t ev = EPOLLRDHUP | (d->reading ? EPOLLIN : 0u) | (out ? EPOLLOUT : 0u);
    watch(p, d->fd, d, ev, EPOLL_CTL_MOD);
    d->want_out = out;
}

static void up_watch(px *p, up *u)
{
    const bool out = u->out_off < u->out.len || u->state == UP_CONNECTING;
    uint32_t ev = EPOLLRDHUP | (u->paused ? 0u : EPOLLIN) | (out ? EPOLLOUT : 0u);
    watch(p, u->fd, u, ev, EPOLL_CTL_MOD);
    u->want_out = out;
}

/* Write what d holds. false when d was closed. */
static bool down_flush(px *p, down *d)
{
    while (d->out_off < d->out.len) {
        ssize_t n = send(d->fd, d->out.data + d->out_off, d->out.len - d->out_off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            down_close(p, d);
            return false;
        }
        d->out_off += (size_t)n;
    }
    if (d->out_off == d->out.len) {
        buf_reset(&d->out);
        d->out_off = 0;
        if (d->close_after) {
            down_close(p, d);
            return false;
        }
    }
    const size_t behind = d->out.len - d->out_off;
    if (d->u && d->u->paused && behind < OUT_RESUME) {
        d->u->paused = false;
        up_watch(p, d->u);
    } else if (d->u && !d->u->paused && behind > OUT_PAUSE) {
        d->u->paused = true;
        up_watch(p, d->u);
    }
    if ((d->out_off < d->out.len) != d->want_out)
        down_watch(p, d);
    return true;
}

/* Bytes to the client: written at once when nothing waits before them. false when d was
 * closed. */
static bool down_send(px *p, down *d, const char *data, size_t n)
{
    if (buf_append(&d->out, data, n) != 0) {
        down_close(p, d);
        return false;
    }
    return down_flush(p, d);
}

/* An answer of the proxy's own: an OpenAI-style JSON error, the connection closed after. */
static bool down_error(px *p, down *d, int status, const char *type, const char *message)
{
    char body[512];
    char esc[300];
    size_t k = 0;
    for (const char *s = message; *s && k + 2 < sizeof esc; s++) {
        if (*s == '"' || *s == '\\')
            esc[k++] = '\\';
        esc[k++] = (unsigned char)*s < 0x20 ? ' ' : *s;
    }
    esc[k] = '\0';
    int blen = snprintf(body, sizeof body,
                        "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":%d}}",
                        esc, type, status);
    const char *reason = status == 400   ? "Bad Request"
                         : status == 413 ? "Payload Too Large"
                         : status == 502 ? "Bad Gateway"
                         : status == 504 ? "Gateway Timeout"
                         : status == 503 ? "Service Unavailable"
                                         : "Error";
    char whole[1024];
    int n = snprintf(whole, sizeof whole,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: "
                     "%d\r\nConnection: close\r\n\r\n%s",
                     status, reason, blen, body);
    d->answered = true;
    d->status = status;
    d->close_after = true;
    d->reading = false;
    return down_send(p, d, whole, (size_t)n); /* one piece: the close follows the whole */
}

/* ---- the upstream connection ------------------------------------------------------------ */

static bool up_flush(px *p, up *u);

static up *up_open(px *p, down *d)
{
    up *u = calloc(1, sizeof *u);
    if (!u)
        return NULL;
    u->kind = K_UP;
    u->d = d;
    u->fd = socket(p->up_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (u->fd < 0) {
        free(u);
        return NULL;
    }
    int one = 1;
    setsockopt(u->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(u->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    if (connect(u->fd, (const struct sockaddr *)&p->up_addr, p->up_addr_len) != 0 &&
        errno != EINPROGRESS) {
        close(u->fd);
        free(u);
        return NULL;
    }
    if (p->tls && !(u->tls = tls_session_new(p->tls, p->parts.host))) {
        close(u->fd);
        free(u);
        return NULL;
    }
    u->state = UP_CONNECTING;
    u->phase = PH_HEAD; /* a connection is opened for a request */
    u->t_open_ns = clock_now_ns();
    watch(p, u->fd, u, EPOLLIN | EPOLLOUT | EPOLLRDHUP, EPOLL_CTL_ADD);
    u->want_out = true;
    return u;
}

/* A closed connection's memory waits for the end of the wake-up: a later event of the same
 * batch may name it (its `gone` says so). */
static void bury(px *p, void *ptr)
{
    if (buf_grow_items((void **)&p->grave, &p->cap_grave, p->n_grave + 1, sizeof *p->grave) == 0)
        p->grave[p->n_grave++] = ptr;
    /* out of memory: leaked rather than freed under a pending event */
}

static void free_graves(px *p)
{
    for (int64_t i = 0; i < p->n_grave; i++)
        free(p->grave[i]);
    p->n_grave = 0;
}

static void up_close(px *p, up *u)
{
    if (!u || u->gone)
        return;
    if (u->d && u->d->u == u)
        u->d->u = NULL;
    u->gone = true;
    epoll_ctl(p->ep, EPOLL_CTL_DEL, u->fd, NULL);
    close(u->fd);
    tls_session_free(u->tls);
    buf_free(&u->out);
    buf_free(&u->head);
    bury(p, u);
}

/* The exchange is sent: t = 0 of its wait for a first token. */
static void exchange_sent(px *p, down *d)
{
    if (d->sent)
        return;
    d->sent = true;
    d->t_send_ns = clock_now_ns();
    if (d->observed) {
        pobs_request_start(p->obs, d->rid, d->user, d->t_send_ns, d->prompt_est);
        p->m.in_flight++;
    }
}

static bool up_flush(px *p, up *u)
{
    while (u->out_off < u->out.len) {
        ssize_t n = send(u->fd, u->out.data + u->out_off, u->out.len - u->out_off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0)
            return false; /* the caller sees the close on the next read */
        u->out_off += (size_t)n;
    }
    if (u->out_off == u->out.len) {
        buf_reset(&u->out);
        u->out_off = 0;
        if (u->d && u->d->busy && u->state == UP_OPEN && (!u->tls || u->request_queued))
            exchange_sent(p, u->d);
    }
    if ((u->out_off < u->out.len) != u->want_out)
        up_watch(p, u);
    return true;
}

/* The request on u: plaintext on its socket, or into TLS once the handshake is done. */
static bool up_queue_request(px *p, up *u)
{
    down *d = u->d;
    if (!u->tls)
        return buf_append(&u->out, d->req.data, d->req.len) == 0 && up_flush(p, u);
    char why[160];
    if (u->state == UP_TLS) {
        int rc = tls_session_handshake(u->tls, why, sizeof why);
        if (rc == TLS_FAILED) {
            snprintf(d->error, sizeof d->error, "TLS handshake with the upstream: %.90s", why);
            return false;
        }
        if (rc == TLS_DONE)
            u->state = UP_OPEN;
    }
    if (u->state == UP_OPEN && !u->request_queued) {
        if (tls_session_write(u->tls, d->req.data, d->req.len, why, sizeof why) != 0)
            return false;
        u->request_queued = true;
    }
    return tls_session_take(u->tls, &u->out) == 0 && up_flush(p, u);
}

/* The upstream could not answer d's request: once more on a fresh connection when a kept
 * connection was closed before answering (the server timed it out meanwhile), else the
 * proxy's own 502. false when d was closed. */
static bool up_failed(px *p, down *d, int status, const char *why)
{
    up *u = d->u;
    const bool retry = u && u->reused && !u->got_bytes && d->attempts < 2;
    up_close(p, u);
    if (retry) {
        d->attempts++;
        d->u = up_open(p, d);
        if (d->u)
            return true;
    }
    if (d->answered) { /* bytes already went to the client: it sees the cut */
        exchange_end(p, d, why);
        d->close_after = true;
        down_close(p, d);
        return false;
    }
    p->m.upstream_errors++;
    d->status = status;
    exchange_end(p, d, why);
    down_error(p, d, status, "upstream_error", why);
    return !d->gone;
}

/* ---- reading the answer ------------------------------------------------------------------ */

/* One token event of d's stream at t (the read's kernel stamp), forwarded at t_fwd. */
static void on_tokens(px *p, down *d, int n, int64_t t, int64_t t_fwd)
{
    if (d->t_first_ns < 0) {
        d->t_first_ns = t;
        if (d->sent)
            pmet_observe(&p->m.ttft, (double)(t - d->t_send_ns) / 1e9);
    }
    pobs_tokens(p->obs, d->rid, t, n);
    p->m.tokens++;
    pmet_observe(&p->m.forward_delay, (double)(t_fwd > t ? t_fwd - t : 0) / 1e9);
    if (d->logged && p->logging) {
        tokenlog_event ev = {t, d->rid, d->user, n, TOKENLOG_BG};
        plog_event(&p->log, &ev, t_fwd);
    }
}

/* The SSE bytes of a body span. */
static void observe_span(px *p, down *d, const char *data, size_t len, int64_t t, int64_t t_fwd)
{
    while (len > 0 && d->streaming) {
        size_t used = 0;
        sse_event ev;
        int r = sse_parse(&d->sse, data, len, &used, &ev);
        if (r < 0) {
            d->streaming = false;
            snprintf(d->error, sizeof d->error, "stream not SSE: left unobserved");
            return;
        }
        data += used;
        len -= used;
        if (r != SSE_EVENT)
            continue;
        chunk_info ci;
        char err[ERR_LEN];
        int n = chunk_counter_event(&d->cc, &ev, &ci, err);
        if (n < 0) {
            snprintf(d->error, sizeof d->error, "%.120s", err);
            continue; /* an error event: the stream goes on to its end */
        }
        if (ci.finish_reason[0])
            snprintf(d->finish, sizeof d->finish, "%s", ci.finish_reason);
        if (ci.prompt_tokens > 0 && d->cc.usage_prompt > 0)
            pobs_request_prompt(p->obs, d->rid, (int32_t)d->cc.usage_prompt);
        if (n > 0)
            on_tokens(p, d, n, t, t_fwd);
    }
}

/* The answer's head arrived whole in u->head: forward it, set up the body. false when d
 * was closed. */
static bool on_head(px *p, up *u, size_t head_len, int64_t t)
{
    down *d = u->d;
    (void)t;
    d->status = u->resp.status;
    if (!down_send(p, d, u->head.data, head_len))
        return false;
    d->answered = true;
    if (u->resp.status >= 100 && u->resp.status < 200) {
        /* 100 Continue, 103 Early Hints: forwarded, the answer follows */
        buf_consume(&u->head, head_len);
        return true;
    }
    http1_response r = u->resp;
    if (d->h.head_method)
        r.framing = HTTP1_BODY_NONE;
    http1_body_init(&u->body, &r);
    u->phase = PH_BODY;
    d->streaming = d->observed && u->resp.status == 200 &&
                   strncmp(u->resp.content_type, "text/event-stream", 17) == 0 &&
                   !u->resp.content_encoding[0];
    if (d->observed && !d->streaming && u->resp.status != 200)
        snprintf(d->error, sizeof d->error, "HTTP %d", u->resp.status);
    if (d->streaming) {
        sse_parser_init(&d->sse, 0);
        chunk_counter_init(&d->cc, d->max_tokens);
    }
    return true;
}

static bool body_bytes(px *p, up *u, const char *in, size_t len, int64_t t);

/* One read's plaintext from the upstream, at t. false when d (or u) was closed. */
static bool up_bytes(px *p, up *u, const char *in, size_t len, int64_t t)
{
    down *d = u->d;
    if (!d || !d->busy) { /* bytes nobody asked for: the connection is not reusable */
        up_close(p, u);
        return false;
    }
    u->got_bytes = true;
    while (len > 0 && u->phase == PH_HEAD) {
        if (buf_append(&u->head, in, len) != 0)
            return up_failed(p, d, 502, "out of memory");
        in += len;
        len = 0;
        for (;;) {
            ssize_t hl = http1_parse_head(u->head.data, u->head.len, &u->resp);
            if (hl == HTTP1_NEED_MORE)
                return true;
            if (hl == HTTP1_ERROR) {
                char why[160];
                snprintf(why, sizeof why, "the upstream's answer is not HTTP/1.x: %s", u->resp.error);
                return up_failed(p, d, 502, why);
            }
            if (u->resp.status == 101)
                return up_failed(p, d, 502, "the upstream switched protocols: the proxy "
                                            "carries HTTP/1.1 only");
            if (!on_head(p, u, (size_t)hl, t))
                return false;
            if (u->phase == PH_BODY) {
                /* what came after the head is body */
                size_t rest = u->head.len - (size_t)hl;
                buf tail = {0};
                if (rest && buf_append(&tail, u->head.data + hl, rest) != 0)
                    return up_failed(p, d, 502, "out of memory");
                buf_free(&u->head);
                bool ok = rest ? body_bytes(p, u, tail.data, rest, t) : true;
                if (ok && u->phase == PH_BODY && u->body.framing == HTTP1_BODY_NONE)
                    ok = body_bytes(p, u, "", 0, t);
                buf_free(&tail);
                return ok;
            }
            if (u->head.len == 0)
                return true;
        }
    }
    return u->phase == PH_BODY ? body_bytes(p, u, in, len, t) : true;
}

/* The body's framing over in[0, len): the spans of body bytes and where the body ends. */
static int64_t body_spans(px *p, up *u, const char *in, size_t len, size_t *end, bool *done,
                          bool *bad)
{
    int64_t n = 0;
    size_t at = 0;
    *done = u->body.done || u->body.framing == HTTP1_BODY_NONE;
    *bad = false;
    while (!*done && at < len) {
        size_t used = 0;
        const char *data = NULL;
        size_t data_len = 0;
        int r = http1_body_feed(&u->body, in + at, len - at, &used, &data, &data_len);
        if (r == HTTP1_ERROR) {
            *bad = true;
            break;
        }
        at += used;
        if (r == HTTP1_BODY_DATA && data_len > 0) {
            if (buf_grow_items((void **)&p->span, &p->span_cap, n + 1, sizeof *p->span) != 0)
                break;
            p->span[n].data = data;
            p->span[n++].len = data_len;
        }
        if (r == HTTP1_BODY_END || u->body.done)
            *done = true;
        if (r == HTTP1_BODY_MORE)
            break;
    }
    *end = at;
    return n;
}

static bool body_bytes(px *p, up *u, const char *in, size_t len, int64_t t)
{
    down *d = u->d;
    size_t end = 0;
    bool done = false, bad = false;
    int64_t n = body_spans(p, u, in, len, &end, &done, &bad);
    /* To the client first: the token is late to nobody for being looked at. */
    if (end > 0 && !down_send(p, d, in, end))
        return false;
    const int64_t t_fwd = clock_now_ns();
    for (int64_t k = 0; k < n && d->streaming; k++)
        observe_span(p, d, p->span[k].data, p->span[k].len, t, t_fwd);
    if (bad)
        return up_failed(p, d, 502, "the upstream's chunked body is malformed");
    if (done) {
        u->phase = PH_IDLE;
        u->reused = true;
        u->got_bytes = false;
        const bool keep = u->resp.keep_alive && end == len;
        exchange_end(p, d, NULL);
        if (!keep)
            up_close(p, d->u);
        if (d->gone)
            return false;
        if (!d->h.keep_alive || !keep)
            d->close_after = true;
        if (d->close_after) {
            d->reading = false;
            return down_flush(p, d);
        }
        d->reading = true;
        down_watch(p, d);
        down_input(p, d); /* a request pipelined behind this one */
        return !d->gone;
    }
    return true;
}

/* The upstream closed (or failed) at t. */
static void up_gone(px *p, up *u, int64_t t)
{
    down *d = u->d;
    if (!d || !d->busy) {
        up_close(p, u);
        return;
    }
    if (u->phase == PH_BODY && http1_body_complete_at_close(&u->body)) {
        u->resp.keep_alive = false;
        body_bytes(p, u, "", 0, t); /* nothing more: ends an until-close body */
        if (!d->gone && d->busy) {
            u->body.done = true;
            exchange_end(p, d, NULL);
            d->close_after = true;
            up_close(p, u);
            down_flush(p, d);
        }
        return;
    }
    up_failed(p, d, 502,
              u->got_bytes ? "the upstream closed the connection in the middle of its answer"
                           : "the upstream closed the connection without an answer");
}

static void up_read(px *p, up *u)
{
    for (int i = 0; i < 8 && !u->gone; i++) {
        union {
            char buf[CMSG_SPACE(sizeof(struct timespec))];
            struct cmsghdr align;
        } control;
        struct iovec iov = {p->rd, sizeof p->rd};
        struct msghdr msg = {0};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof control.buf;
        ssize_t n = recvmsg(u->fd, &msg, 0);
        const int64_t now = clock_now_ns();
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            up_gone(p, u, now);
            return;
        }
        /* The kernel's stamp mapped onto CLOCK_MONOTONIC (raw_conn.c's rule: never later
         * than our read, up to 1 ms past it taken as the mapping's error). */
        int64_t t = now;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                int64_t k = (int64_t)ts.tv_sec * CLOCK_NS_PER_S + ts.tv_nsec - p->realtime_offset_ns;
                if (ts.tv_sec != 0 && k <= now + CLOCK_NS_PER_MS)
                    t = k < now ? k : now;
            }
        if (!u->tls) {
            if (!up_bytes(p, u, p->rd, (size_t)n, t))
                return;
        } else {
            char why[160];
            if (tls_session_put(u->tls, p->rd, (size_t)n) != 0) {
                up_gone(p, u, now);
                return;
            }
            if (u->state == UP_TLS) {
                if (!up_queue_request(p, u)) {
                    up_failed(p, u->d, 502, u->d && u->d->error[0] ? u->d->error
                                                                   : "TLS with the upstream failed");
                    return;
                }
                if (u->state != UP_OPEN)
                    continue;
            }
            for (int k = 0; k < 1024; k++) {
                int got = tls_session_read(u->tls, p->rd, sizeof p->rd, why, sizeof why);
                if (got > 0) {
                    if (!up_bytes(p, u, p->rd, (size_t)got, t))
                        return;
                    continue;
                }
                if (got == TLS_AGAIN)
                    break;
                up_gone(p, u, now);
                return;
            }
            if (tls_session_take(u->tls, &u->out) == 0)
                up_flush(p, u);
        }
        if ((size_t)n < sizeof p->rd)
            return;
    }
}

static void up_writable(px *p, up *u)
{
    if (u->state == UP_CONNECTING) {
        int e = 0;
        socklen_t len = sizeof e;
        if (getsockopt(u->fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
            e = errno;
        if (e == EINPROGRESS)
            return;
        if (e != 0) {
            char why[160];
            snprintf(why, sizeof why, "cannot connect to the upstream: %s", strerror(e));
            if (u->d)
                up_failed(p, u->d, 502, why);
            else
                up_close(p, u);
            return;
        }
        u->state = u->tls ? UP_TLS : UP_OPEN;
        if (u->d && u->d->busy && !up_queue_request(p, u))
            up_failed(p, u->d, 502, u->d->error[0] ? u->d->error : "cannot send to the upstream");
        else
            up_watch(p, u);
        return;
    }
    if (!up_flush(p, u) && u->d)
        up_failed(p, u->d, 502, "cannot send to the upstream");
}

/* ---- the exchange --------------------------------------------------------------------- */

/* d's request is whole in d->req: send it. */
static void exchange_start(px *p, down *d)
{
    d->busy = true;
    d->in_request = false;
    d->rid = p->next_rid++;
    d->attempts = 0;
    d->answered = d->streaming = d->sent = false;
    d->status = 0;
    d->t_arrive_ns = clock_now_ns();
    d->t_send_ns = d->t_first_ns = -1;
    d->finish[0] = d->error[0] = '\0';
    pinsp_body b;
    pinsp_read_body(&d->h, d->body.data, d->body.len, &b);
    buf_free(&d->body);
    d->observed = b.observed;
    d->prompt_est = b.prompt_tokens;
    d->max_tokens = b.max_tokens;
    d->logged = p->logging && d->observed &&
                (p->cfg->sample >= 1 ||
                 (double)(mix64((uint64_t)d->rid) >> 11) * 0x1.0p-53 < p->cfg->sample);
    /* Reading the client stops while its request runs: a pipelined one waits in d->in. */
    d->reading = d->in.len < IN_CAP;
    down_watch(p, d);
    if (d->u && d->u->phase == PH_IDLE && d->u->state == UP_OPEN) {
        d->u->phase = PH_HEAD;
        d->u->request_queued = false;
        if (!up_queue_request(p, d->u))
            up_failed(p, d, 502, "cannot send to the upstream");
        return;
    }
    up_close(p, d->u);
    d->u = up_open(p, d);
    if (!d->u) {
        char why[160];
        snprintf(why, sizeof why, "cannot connect to the upstream: %s", strerror(errno));
        up_failed(p, d, 502, why);
        return;
    }
    d->u->phase = PH_HEAD;
}

/* d's exchange is over (error NULL: whole). Its row, its metrics. */
static void exchange_end(px *p, down *d, const char *error)
{
    if (!d->busy)
        return;
    d->busy = false;
    const int64_t now = clock_now_ns();
    /* 499 (nginx's word): the client left before any answer */
    pmet_count_code(&p->m, d->status                                              ? d->status
                           : error && strcmp(error, "client disconnected") == 0 ? 499
                                                                                  : 502);
    buf_free(&d->req);
    if (d->u)
        d->u->phase = PH_IDLE;
    if (error && !d->error[0])
        snprintf(d->error, sizeof d->error, "%s", error);
    if (!d->observed)
        return;
    if (d->sent) {
        pobs_request_end(p->obs, d->rid, now);
        p->m.in_flight--;
    }
    int32_t prompt = d->streaming && d->cc.usage_prompt > 0 ? (int32_t)d->cc.usage_prompt
                                                             : d->prompt_est;
    if (prompt > 0)
        pmet_observe(&p->m.prompt, prompt);
    if (d->logged && p->logging) {
        tokenlog_request r;
        memset(&r, 0, sizeof r);
        r.request = d->rid;
        r.user = d->user;
        r.kind = TOKENLOG_BG;
        r.t_plan_ns = d->t_arrive_ns;
        r.t_send_ns = d->sent ? d->t_send_ns : d->t_arrive_ns;
        r.t_first_ns = d->t_first_ns;
        r.t_end_ns = now;
        r.prompt_tokens_requested = d->prompt_est > 0 ? d->prompt_est : 0;
        r.prompt_tokens = prompt > 0 ? prompt : 0;
        r.completion_tokens = d->streaming ? (int32_t)chunk_counter_completion(&d->cc) : 0;
        /* A client that left, or the proxy stopping, cut the stream: not the server's
         * failure, run's "cut at the end" (finish_reason abort, no error). */
        const bool cut = error && (strcmp(error, "client disconnected") == 0 ||
                                   strcmp(error, "the proxy stopped") == 0);
        snprintf(r.finish_reason, sizeof r.finish_reason, "%s", cut ? "abort" : d->finish);
        snprintf(r.error, sizeof r.error, "%s", cut ? "" : d->error);
        r.sent_id = d->rid;
        plog_request(&p->log, &r, now);
    }
    if (d->streaming)
        sse_parser_free(&d->sse);
    d->streaming = false;
}

/* ---- the client's side ------------------------------------------------------------------ */

static void down_close(px *p, down *d)
{
    if (d->gone)
        return;
    if (d->busy) {
        p->m.client_aborts += d->answered || d->sent;
        exchange_end(p, d, "client disconnected");
    }
    up_close(p, d->u);
    d->gone = true;
    epoll_ctl(p->ep, EPOLL_CTL_DEL, d->fd, NULL);
    close(d->fd);
    if (d->prev)
        d->prev->next = d->next;
    else
        p->downs = d->next;
    if (d->next)
        d->next->prev = d->prev;
    p->n_down--;
    buf_free(&d->in);
    buf_free(&d->req);
    buf_free(&d->body);
    buf_free(&d->out);
    if (d->streaming)
        sse_parser_free(&d->sse);
    bury(p, d);
}

/* Frame what the client sent: requests, one at a time. */
static void down_input(px *p, down *d)
{
    size_t off = 0;
    while (!d->busy && !d->gone && !d->close_after) {
        reqframe_step st;
        reqframe_kind k = reqframe_next(&d->rf, d->in.data + off, d->in.len - off, p->frame_out,
                                        sizeof p->frame_out, &st);
        if (k == REQFRAME_NEED_MORE)
            break;
        off += st.consumed;
        if (k == REQFRAME_REFUSE) {
            d->busy = false;
            pmet_count_code(&p->m, st.status);
            down_error(p, d, st.status, "invalid_request_error", st.message);
            return;
        }
        if (k == REQFRAME_EMIT && st.head) {
            buf_reset(&d->req);
            buf_reset(&d->body);
            if (pinsp_rewrite_head(p->frame_out, st.produced, &p->upi, &d->req, &d->h) != 0) {
                down_error(p, d, 400, "invalid_request_error", "cannot read the request's head");
                return;
            }
            d->in_request = true;
            if (d->h.expect_continue && !down_send(p, d, "HTTP/1.1 100 Continue\r\n\r\n", 25))
                return;
        } else if (k == REQFRAME_EMIT && st.produced > 0) {
            buf_append(&d->req, p->frame_out, st.produced); /* chunk framing */
        } else if (k == REQFRAME_BODY && st.forward) {
            buf_append(&d->req, d->in.data + off - st.consumed, st.consumed);
            buf_append(&d->body, d->in.data + off - st.consumed, st.consumed);
        }
        if (d->req.failed || d->body.failed) {
            down_error(p, d, 503, "server_error", "the proxy is out of memory");
            return;
        }
        if (d->in_request && reqframe_at_boundary(&d->rf)) {
            buf_consume(&d->in, off);
            off = 0;
            exchange_start(p, d);
        }
    }
    if (!d->gone)
        buf_consume(&d->in, off);
}

static void down_read(px *p, down *d)
{
    for (int i = 0; i < 8 && !d->gone; i++) {
        ssize_t n = recv(d->fd, p->rd, sizeof p->rd, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            down_close(p, d); /* the client left: its upstream request is aborted */
            return;
        }
        d->t_active_ns = clock_now_ns();
        if (d->close_after)
            continue; /* refused: what follows is dropped */
        if (buf_append(&d->in, p->rd, (size_t)n) != 0) {
            down_close(p, d);
            return;
        }
        if (d->busy && d->in.len >= IN_CAP) {
            d->reading = false;
            down_watch(p, d);
            break;
        }
        if ((size_t)n < sizeof p->rd)
            break;
    }
    if (!d->gone && !d->busy)
        down_input(p, d);
}

/* accept4 failed. Out of descriptors (or memory), the connection stays in the backlog and
 * the listener readable: watched, it would wake the loop at once, again and again (a core
 * spinning for as long as descriptors are short). Both listeners are unwatched until the
 * next second's tick (resume_accepting). */
static void accept_failed(px *p)
{
    if (errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM)
        return;
    watch(p, p->listen_fd, &p->listen_item, 0, EPOLL_CTL_MOD);
    if (p->admin_fd >= 0)
        watch(p, p->admin_fd, &p->admin_item, 0, EPOLL_CTL_MOD);
    p->accept_paused = true;
}

static void resume_accepting(px *p)
{
    if (!p->accept_paused)
        return;
    p->accept_paused = false;
    watch(p, p->listen_fd, &p->listen_item, EPOLLIN, EPOLL_CTL_MOD);
    if (p->admin_fd >= 0)
        watch(p, p->admin_fd, &p->admin_item, EPOLLIN, EPOLL_CTL_MOD);
}

static void accept_clients(px *p)
{
    for (int i = 0; i < 64; i++) {
        int fd = accept4(p->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            accept_failed(p);
            return;
        }
        if (p->stopping || p->n_down >= p->cfg->max_conns) {
            close(fd);
            continue;
        }
        down *d = calloc(1, sizeof *d);
        if (!d) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        d->kind = K_DOWN;
        d->fd = fd;
        d->user = p->next_user;
        p->next_user = p->next_user == INT32_MAX ? 0 : p->next_user + 1;
        reqframe_init(&d->rf, (uint64_t)p->cfg->max_body);
        d->reading = true;
        d->t_active_ns = clock_now_ns();
        d->next = p->downs;
        if (p->downs)
            p->downs->prev = d;
        p->downs = d;
        p->n_down++;
        p->m.downstream_conns++;
        watch(p, fd, d, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
    }
}

/* ---- the admin port ----------------------------------------------------------------------- */

static void admin_close(px *p, admin *a)
{
    epoll_ctl(p->ep, EPOLL_CTL_DEL, a->fd, NULL);
    close(a->fd);
    if (a->prev)
        a->prev->next = a->next;
    else
        p->admins = a->next;
    if (a->next)
        a->next->prev = a->prev;
    buf_free(&a->in);
    buf_free(&a->out);
    free(a);
}

static void admin_flush(px *p, admin *a)
{
    while (a->out_off < a->out.len) {
        ssize_t n = send(a->fd, a->out.data + a->out_off, a->out.len - a->out_off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            watch(p, a->fd, a, EPOLLOUT | EPOLLRDHUP, EPOLL_CTL_MOD);
            return;
        }
        if (n <= 0)
            break;
        a->out_off += (size_t)n;
    }
    admin_close(p, a);
}

static void admin_answer(admin *a, int status, const char *type, const char *body)
{
    const char *reason = status == 200 ? "OK" : status == 404 ? "Not Found" : status == 405 ? "Method Not Allowed" : "Bad Request";
    buf_printf(&a->out, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
               status, reason, type, strlen(body), body);
}

static void admin_read(px *p, admin *a)
{
    ssize_t n = recv(a->fd, p->rd, sizeof p->rd, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0 || buf_append(&a->in, p->rd, (size_t)n) != 0 || a->in.len > ADMIN_IN_CAP) {
        admin_close(p, a);
        return;
    }
    reqframe_step st;
    reqframe_kind k = reqframe_next(&a->rf, a->in.data, a->in.len, p->frame_out, sizeof p->frame_out, &st);
    if (k == REQFRAME_NEED_MORE)
        return;
    pinsp_head h;
    buf scratch = {0};
    if (k == REQFRAME_REFUSE || !(k == REQFRAME_EMIT && st.head) ||
        pinsp_rewrite_head(p->frame_out, st.produced, &p->upi, &scratch, &h) != 0) {
        admin_answer(a, 400, "application/json",
                     "{\"error\":{\"message\":\"bad request\",\"type\":\"invalid_request_error\",\"code\":400}}");
    } else if (strcmp(h.method, "GET") != 0 && strcmp(h.method, "HEAD") != 0) {
        admin_answer(a, 405, "application/json",
                     "{\"error\":{\"message\":\"GET only\",\"type\":\"invalid_request_error\",\"code\":405}}");
    } else if (strcmp(h.path, "/metrics") == 0) {
        buf text = {0};
        p->m.threshold_s = (double)pobs_threshold_ns(p->obs) / 1e9;
        pmet_write(&p->m, p->label, &text);
        admin_answer(a, 200, "text/plain; version=0.0.4; charset=utf-8", text.data ? text.data : "");
        buf_free(&text);
    } else if (strcmp(h.path, "/health") == 0) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"status\":\"ok\",\"upstream\":\"%s\",\"streams_in_flight\":%lld,\"connections\":%d}",
                 p->label, (long long)p->m.in_flight, p->n_down);
        admin_answer(a, 200, "application/json", body);
    } else {
        admin_answer(a, 404, "application/json",
                     "{\"error\":{\"message\":\"the admin port serves /metrics and /health\","
                     "\"type\":\"invalid_request_error\",\"code\":404}}");
    }
    buf_free(&scratch);
    admin_flush(p, a);
}

static void accept_admins(px *p)
{
    for (int i = 0; i < 16; i++) {
        int fd = accept4(p->admin_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            accept_failed(p);
            return;
        }
        admin *a = calloc(1, sizeof *a);
        if (!a) {
            close(fd);
            continue;
        }
        a->kind = K_ADMIN;
        a->fd = fd;
        a->t_open_ns = clock_now_ns();
        reqframe_init(&a->rf, 0);
        a->next = p->admins;
        if (p->admins)
            p->admins->prev = a;
        p->admins = a;
        watch(p, fd, a, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
    }
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
            up_failed(p, d, 504, "no connection to the upstream within the connect timeout");
        else if (!d->busy && now - d->t_active_ns > p->cfg->idle_timeout_ns)
            down_close(p, d);
    }
    for (admin *a = p->admins, *next; a; a = next) {
        next = a->next;
        if (now - a->t_open_ns > 10 * CLOCK_NS_PER_S)
            admin_close(p, a);
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
            exchange_end(p, d, "the proxy stopped");
        down_close(p, d);
    }
    while (p->admins)
        admin_close(p, p->admins);
    pobs_flush(p->obs, now);
    free_graves(p);
}

static void dispatch(px *p, struct epoll_event *ev)
{
    item *it = ev->data.ptr;
    switch (it->kind) {
    case K_LISTEN:
        accept_clients(p);
        break;
    case K_ADMIN_LISTEN:
        accept_admins(p);
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
            admin_flush(p, a);
        else
            admin_read(p, a);
        break;
    }
    case K_UP: {
        up *u = (up *)it;
        if (!u->gone && (ev->events & (EPOLLOUT | EPOLLERR)))
            up_writable(p, u);
        if (!u->gone && (ev->events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
            up_read(p, u);
        break;
    }
    case K_DOWN: {
        down *d = (down *)it;
        if (d->gone)
            break;
        if (ev->events & EPOLLOUT)
            if (!down_flush(p, d))
                break;
        if (ev->events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            down_read(p, d);
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
    watch(p, p->listen_fd, &p->listen_item, EPOLLIN, EPOLL_CTL_ADD);
    if (p->admin_fd >= 0)
        watch(p, p->admin_fd, &p->admin_item, EPOLLIN, EPOLL_CTL_ADD);
    watch(p, p->signal_fd, &p->signal_item, EPOLLIN, EPOLL_CTL_ADD);

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
        free_graves(p);
        const int64_t now = clock_now_ns();
        pobs_advance(p->obs, now);
        if (p->logging)
            plog_tick(&p->log, now);
        if (now >= next_second) {
            next_second = now + CLOCK_NS_PER_S;
            resume_accepting(p);
            timeouts(p, now);
            free_graves(p);
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
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        close(stop_pipe[0]);
        close(stop_pipe[1]);
        stop_pipe[0] = stop_pipe[1] = -1;
    }
    pobs_free(p->obs);
    tls_context_free(p->tls);
    url_parts_wipe(&p->parts);
    free_graves(p);
    free(p->grave);
    free(p->span);
    free(p);
    return rc;
}
