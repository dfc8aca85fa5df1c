/* proxy_conns — the proxy's connections (proxy.h): the clients' side (their requests framed
 * and sent on, what is written back to them, each exchange's record: its row, its metrics)
 * and the upstream's (its connections, TLS through the client's tls.h; the answers read with
 * the kernel's receive stamps, forwarded, and the streams among them timed). The two sides
 * call each other, so they are one file; the loop (proxy_loop.c) calls into it. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "client/stamp.h"
#include "common/tokenlog.h"
#include "proxy/proxy_state.h"

/* A closed connection's memory waits for the end of the wake-up: a later event of the same
 * batch may name it (its `gone` says so). */
void px_bury(px *p, void *ptr)
{
    if (buf_grow_items((void **)&p->grave, &p->cap_grave, p->n_grave + 1, sizeof *p->grave) == 0)
        p->grave[p->n_grave++] = ptr;
    /* out of memory: leaked rather than freed under a pending event */
}

void px_free_graves(px *p)
{
    for (int64_t i = 0; i < p->n_grave; i++)
        free(p->grave[i]);
    p->n_grave = 0;
}

/* ==== the clients' side ==================================================================== */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* ---- writing to a client ------------------------------------------------------------- */


void px_down_watch(px *p, down *d)
{
    const bool out = d->out_off < d->out.len;
    uint32_t ev = EPOLLRDHUP | (d->reading ? EPOLLIN : 0u) | (out ? EPOLLOUT : 0u);
    px_watch(p, d->fd, d, ev, EPOLL_CTL_MOD);
    d->want_out = out;
}

void px_up_watch(px *p, up *u)
{
    const bool out = u->out_off < u->out.len || u->state == UP_CONNECTING;
    uint32_t ev = EPOLLRDHUP | (u->paused ? 0u : EPOLLIN) | (out ? EPOLLOUT : 0u);
    px_watch(p, u->fd, u, ev, EPOLL_CTL_MOD);
    u->want_out = out;
}

/* Write what d holds. false when d was closed. */
bool px_down_flush(px *p, down *d)
{
    while (d->out_off < d->out.len) {
        ssize_t n = send(d->fd, d->out.data + d->out_off, d->out.len - d->out_off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            px_down_close(p, d);
            return false;
        }
        d->out_off += (size_t)n;
    }
    if (d->out_off == d->out.len) {
        buf_reset(&d->out);
        d->out_off = 0;
        if (d->close_after) {
            px_down_close(p, d);
            return false;
        }
    }
    const size_t behind = d->out.len - d->out_off;
    if (d->u && d->u->paused && behind < OUT_RESUME) {
        d->u->paused = false;
        px_up_watch(p, d->u);
    } else if (d->u && !d->u->paused && behind > OUT_PAUSE) {
        d->u->paused = true;
        px_up_watch(p, d->u);
    }
    if ((d->out_off < d->out.len) != d->want_out)
        px_down_watch(p, d);
    return true;
}

/* Bytes to the client: written at once when nothing waits before them. false when d was
 * closed. */
bool px_down_send(px *p, down *d, const char *data, size_t n)
{
    if (buf_append(&d->out, data, n) != 0) {
        px_down_close(p, d);
        return false;
    }
    return px_down_flush(p, d);
}

/* An answer of the proxy's own: an OpenAI-style JSON error, the connection closed after. */
bool px_down_error(px *p, down *d, int status, const char *type, const char *message)
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
    return px_down_send(p, d, whole, (size_t)n); /* one piece: the close follows the whole */
}

/* ---- the exchange --------------------------------------------------------------------- */

/* d's request is whole in d->req: send it. */
void px_exchange_start(px *p, down *d)
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
    d->prompt_told = 0;
    d->max_tokens = b.max_tokens;
    d->logged = p->logging && d->observed &&
                (p->cfg->sample >= 1 ||
                 (double)(mix64((uint64_t)d->rid) >> 11) * 0x1.0p-53 < p->cfg->sample);
    /* Reading the client stops while its request runs: a pipelined one waits in d->in. */
    d->reading = d->in.len < IN_CAP;
    px_down_watch(p, d);
    if (d->u && d->u->phase == PH_IDLE && d->u->state == UP_OPEN) {
        d->u->phase = PH_HEAD;
        d->u->request_queued = false;
        if (!px_up_queue_request(p, d->u))
            px_up_failed(p, d, 502, "cannot send to the upstream");
        return;
    }
    px_up_close(p, d->u);
    d->u = px_up_open(p, d);
    if (!d->u) {
        char why[160];
        snprintf(why, sizeof why, "cannot connect to the upstream: %s", strerror(errno));
        px_up_failed(p, d, 502, why);
        return;
    }
    d->u->phase = PH_HEAD;
}

/* d's exchange is over (error NULL: whole). Its row, its metrics. */
void px_exchange_end(px *p, down *d, const char *error)
{
    if (!d->busy)
        return;
    d->busy = false;
    const int64_t now = clock_now_ns();
    d->t_active_ns = now; /* idle from here: a long answer is no idle time */
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
    /* The server's count when its stream said one (usage), else the body's estimate. */
    const int32_t said = d->streaming && d->cc.usage_prompt > 0 ? (int32_t)d->cc.usage_prompt : 0;
    const int32_t prompt = said > 0 ? said : d->prompt_est;
    if (prompt > 0)
        pmet_observe(&p->m.prompt, prompt);
    p->m.prompt_estimated += said == 0 && d->sent;
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
        /* prompt_tokens is the server's word alone (0: it said none); the proxy's own count
         * from the body, exact for token ids and an estimate for text, is the "requested" */
        r.prompt_tokens_requested = d->prompt_est > 0 ? d->prompt_est : 0;
        r.prompt_tokens = said;
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

void px_down_close(px *p, down *d)
{
    if (d->gone)
        return;
    if (d->busy) {
        p->m.client_aborts += d->answered || d->sent;
        px_exchange_end(p, d, "client disconnected");
    }
    px_up_close(p, d->u);
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
    px_bury(p, d);
}

/* Frame what the client sent: requests, one at a time. */
void px_down_input(px *p, down *d)
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
            px_down_error(p, d, st.status, "invalid_request_error", st.message);
            return;
        }
        if (k == REQFRAME_EMIT && st.head) {
            buf_reset(&d->req);
            buf_reset(&d->body);
            if (pinsp_rewrite_head(p->frame_out, st.produced, &p->upi, &d->req, &d->h) != 0) {
                px_down_error(p, d, 400, "invalid_request_error", "cannot read the request's head");
                return;
            }
            d->in_request = true;
            if (d->h.expect_continue && !px_down_send(p, d, "HTTP/1.1 100 Continue\r\n\r\n", 25))
                return;
        } else if (k == REQFRAME_EMIT && st.produced > 0) {
            buf_append(&d->req, p->frame_out, st.produced); /* chunk framing */
        } else if (k == REQFRAME_BODY && st.forward) {
            buf_append(&d->req, d->in.data + off - st.consumed, st.consumed);
            buf_append(&d->body, d->in.data + off - st.consumed, st.consumed);
        }
        if (d->req.failed || d->body.failed) {
            px_down_error(p, d, 503, "server_error", "the proxy is out of memory");
            return;
        }
        if (d->in_request && reqframe_at_boundary(&d->rf)) {
            buf_consume(&d->in, off);
            off = 0;
            px_exchange_start(p, d);
        }
    }
    if (!d->gone)
        buf_consume(&d->in, off);
}

void px_down_read(px *p, down *d)
{
    for (int i = 0; i < 8 && !d->gone; i++) {
        ssize_t n = recv(d->fd, p->rd, sizeof p->rd, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            px_down_close(p, d); /* the client left: its upstream request is aborted */
            return;
        }
        d->t_active_ns = clock_now_ns();
        if (d->close_after)
            continue; /* refused: what follows is dropped */
        if (buf_append(&d->in, p->rd, (size_t)n) != 0) {
            px_down_close(p, d);
            return;
        }
        if (d->busy && d->in.len >= IN_CAP) {
            d->reading = false;
            px_down_watch(p, d);
            break;
        }
        if ((size_t)n < sizeof p->rd)
            break;
    }
    if (!d->gone && !d->busy)
        px_down_input(p, d);
}

void px_accept_clients(px *p)
{
    for (int i = 0; i < 64; i++) {
        int fd = accept4(p->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            px_accept_failed(p);
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
        px_watch(p, fd, d, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
    }
}

/* ==== the upstream's side ================================================================== */

/* ---- the upstream connection ------------------------------------------------------------ */


up *px_up_open(px *p, down *d)
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
    stamp_enable(u->fd);
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
    px_watch(p, u->fd, u, EPOLLIN | EPOLLOUT | EPOLLRDHUP, EPOLL_CTL_ADD);
    u->want_out = true;
    return u;
}

void px_up_close(px *p, up *u)
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
    px_bury(p, u);
}

/* The exchange is sent: t = 0 of its wait for a first token. */
void px_exchange_sent(px *p, down *d)
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

bool px_up_flush(px *p, up *u)
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
            px_exchange_sent(p, u->d);
    }
    if ((u->out_off < u->out.len) != u->want_out)
        px_up_watch(p, u);
    return true;
}

/* The request on u: plaintext on its socket, or into TLS once the handshake is done. */
bool px_up_queue_request(px *p, up *u)
{
    down *d = u->d;
    if (!u->tls)
        return buf_append(&u->out, d->req.data, d->req.len) == 0 && px_up_flush(p, u);
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
    return tls_session_take(u->tls, &u->out) == 0 && px_up_flush(p, u);
}

/* The upstream could not answer d's request: once more on a fresh connection when a kept
 * connection was closed before answering (the server timed it out meanwhile), else the
 * proxy's own 502. false when d was closed. */
bool px_up_failed(px *p, down *d, int status, const char *why)
{
    up *u = d->u;
    const bool retry = u && u->reused && !u->got_bytes && d->attempts < 2;
    px_up_close(p, u);
    if (retry) {
        d->attempts++;
        d->u = px_up_open(p, d);
        if (d->u)
            return true;
    }
    if (d->answered) { /* bytes already went to the client: it sees the cut */
        px_exchange_end(p, d, why);
        d->close_after = true;
        px_down_close(p, d);
        return false;
    }
    p->m.upstream_errors++;
    d->status = status;
    px_exchange_end(p, d, why);
    px_down_error(p, d, status, "upstream_error", why);
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
        /* the server's count, told once (continuous usage repeats it in every chunk) */
        if (d->cc.usage_prompt > 0 && d->cc.usage_prompt != d->prompt_told) {
            d->prompt_told = d->cc.usage_prompt;
            pobs_request_prompt(p->obs, d->rid, (int32_t)d->cc.usage_prompt);
        }
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
    if (!px_down_send(p, d, u->head.data, head_len))
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
        px_up_close(p, u);
        return false;
    }
    u->got_bytes = true;
    while (len > 0 && u->phase == PH_HEAD) {
        if (buf_append(&u->head, in, len) != 0)
            return px_up_failed(p, d, 502, "out of memory");
        in += len;
        len = 0;
        for (;;) {
            ssize_t hl = http1_parse_head(u->head.data, u->head.len, &u->resp);
            if (hl == HTTP1_NEED_MORE)
                return true;
            if (hl == HTTP1_ERROR) {
                char why[160];
                snprintf(why, sizeof why, "the upstream's answer is not HTTP/1.x: %s", u->resp.error);
                return px_up_failed(p, d, 502, why);
            }
            if (u->resp.status == 101)
                return px_up_failed(p, d, 502, "the upstream switched protocols: the proxy "
                                            "carries HTTP/1.1 only");
            if (!on_head(p, u, (size_t)hl, t))
                return false;
            if (u->phase == PH_BODY) {
                /* what came after the head is body */
                size_t rest = u->head.len - (size_t)hl;
                buf tail = {0};
                if (rest && buf_append(&tail, u->head.data + hl, rest) != 0)
                    return px_up_failed(p, d, 502, "out of memory");
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
    if (end > 0 && !px_down_send(p, d, in, end))
        return false;
    const int64_t t_fwd = clock_now_ns();
    for (int64_t k = 0; k < n && d->streaming; k++)
        observe_span(p, d, p->span[k].data, p->span[k].len, t, t_fwd);
    if (bad)
        return px_up_failed(p, d, 502, "the upstream's chunked body is malformed");
    if (done) {
        u->phase = PH_IDLE;
        u->reused = true;
        u->got_bytes = false;
        const bool keep = u->resp.keep_alive && end == len;
        px_exchange_end(p, d, NULL);
        if (!keep)
            px_up_close(p, d->u);
        if (d->gone)
            return false;
        if (!d->h.keep_alive || !keep)
            d->close_after = true;
        if (d->close_after) {
            d->reading = false;
            return px_down_flush(p, d);
        }
        d->reading = true;
        px_down_watch(p, d);
        px_down_input(p, d); /* a request pipelined behind this one */
        return !d->gone;
    }
    return true;
}

/* The upstream closed (or failed) at t. */
static void up_gone(px *p, up *u, int64_t t)
{
    down *d = u->d;
    if (!d || !d->busy) {
        px_up_close(p, u);
        return;
    }
    if (u->phase == PH_BODY && http1_body_complete_at_close(&u->body)) {
        u->resp.keep_alive = false;
        body_bytes(p, u, "", 0, t); /* nothing more: ends an until-close body */
        if (!d->gone && d->busy) {
            u->body.done = true;
            px_exchange_end(p, d, NULL);
            d->close_after = true;
            px_up_close(p, u);
            px_down_flush(p, d);
        }
        return;
    }
    px_up_failed(p, d, 502,
              u->got_bytes ? "the upstream closed the connection in the middle of its answer"
                           : "the upstream closed the connection without an answer");
}

void px_up_read(px *p, up *u)
{
    for (int i = 0; i < 8 && !u->gone; i++) {
        /* the kernel's receive stamp, mapped as the raw transport maps it */
        stamp_read st;
        const ssize_t n = stamp_recv(u->fd, p->rd, sizeof p->rd, p->realtime_offset_ns, &st);
        const int64_t now = st.now_ns, t = st.t_ns;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            up_gone(p, u, now);
            return;
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
                if (!px_up_queue_request(p, u)) {
                    px_up_failed(p, u->d, 502, u->d && u->d->error[0] ? u->d->error
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
                px_up_flush(p, u);
        }
        if ((size_t)n < sizeof p->rd)
            return;
    }
}

void px_up_writable(px *p, up *u)
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
                px_up_failed(p, u->d, 502, why);
            else
                px_up_close(p, u);
            return;
        }
        u->state = u->tls ? UP_TLS : UP_OPEN;
        if (u->d && u->d->busy && !px_up_queue_request(p, u))
            px_up_failed(p, u->d, 502, u->d->error[0] ? u->d->error : "cannot send to the upstream");
        else
            px_up_watch(p, u);
        return;
    }
    if (!px_up_flush(p, u) && u->d)
        px_up_failed(p, u->d, 502, "cannot send to the upstream");
}
