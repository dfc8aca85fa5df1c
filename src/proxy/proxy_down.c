/* proxy_down — the clients' side of the proxy (proxy.h): their connections, their requests
 * framed and sent on, what is written back to them, and each exchange's record (its row,
 * its metrics). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "proxy/proxy_state.h"
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "common/tokenlog.h"

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
        if (fd < 0)
            return;
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
