#include "client/raw_conn.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "client/stamp.h"
#include "common/clock.h"

#define READS_PER_WAKE 8 /* per socket per wake-up: one busy stream cannot starve the rest */

static bool tls_step(raw_client *c, raw_conn *k);
static bool conn_flush(raw_client *c, raw_conn *k);

/* ---- connections ------------------------------------------------------------------- */

static void conn_watch(raw_client *c, raw_conn *k, bool want_out, int op)
{
    struct epoll_event ev = {0};
    ev.data.ptr = k;
    ev.events = EPOLLIN | EPOLLRDHUP | (want_out ? EPOLLOUT : 0u);
    k->want_out = want_out;
    epoll_ctl(c->ep, op, k->fd, &ev);
}

static void pool_push(raw_client *c, raw_conn *k)
{
    k->in_pool = true;
    k->idle_prev = NULL;
    k->idle_next = c->idle;
    if (c->idle)
        c->idle->idle_prev = k;
    c->idle = k;
    c->n_idle++;
}

static void pool_remove(raw_client *c, raw_conn *k)
{
    if (!k->in_pool)
        return;
    if (k->idle_prev)
        k->idle_prev->idle_next = k->idle_next;
    else
        c->idle = k->idle_next;
    if (k->idle_next)
        k->idle_next->idle_prev = k->idle_prev;
    k->idle_prev = k->idle_next = NULL;
    k->in_pool = false;
    c->n_idle--;
}

void raw_conn_close(raw_client *c, raw_conn *k)
{
    if (!k)
        return;
    pool_remove(c, k);
    if (k->req)
        k->req->conn = NULL;
    epoll_ctl(c->ep, EPOLL_CTL_DEL, k->fd, NULL);
    close(k->fd);
    tls_session_free(k->tls);
    buf_free(&k->head);
    buf_free(&k->out);
    free(k);
}

static void conn_reset_response(raw_conn *k)
{
    k->phase = RAW_RESP_HEAD;
    buf_reset(&k->head);
    k->got_bytes = false;
}

/* A new connection, connecting. NULL with errno set. */
static raw_conn *conn_open(raw_client *c)
{
    raw_conn *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (k->fd < 0) {
        int e = errno;
        free(k);
        errno = e;
        return NULL;
    }
    int one = 1;
    setsockopt(k->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    stamp_enable(k->fd); /* the kernel's receive time of every segment */
    if (connect(k->fd, (const struct sockaddr *)&c->addr, c->addr_len) != 0 &&
        errno != EINPROGRESS) {
        int e = errno;
        close(k->fd);
        free(k);
        errno = e;
        return NULL;
    }
    if (c->tls && !(k->tls = tls_session_new(c->tls, c->host))) {
        close(k->fd);
        free(k);
        errno = ENOMEM;
        return NULL;
    }
    k->state = RAW_CONN_CONNECTING;
    conn_watch(c, k, true, EPOLL_CTL_ADD);
    c->conns.opened++;
    return k;
}

/* ---- requests ------------------------------------------------------------------------- */

void raw_conn_finish(raw_client *c, raw_req *r, raw_outcome how)
{
    if (r->out == RAW_OUT_RUNNING)
        r->out = how;
    reply_book_mark_dirty(&c->book, &r->reply);
}

static void req_lost(raw_client *c, raw_req *r, const char *why)
{
    reply_fail(&r->reply, "connection lost: %s", why);
    raw_conn_finish(c, r, RAW_OUT_LOST);
}

/* Put r's bytes on k and start sending. */
static void conn_assign(raw_client *c, raw_conn *k, raw_req *r)
{
    k->req = r;
    r->conn = k;
    conn_reset_response(k);
    buf_reset(&k->out);
    k->out_off = 0;
    k->request_queued = false;
    if (!c->tls)
        buf_append(&k->out, r->wire, r->wire_len);
}

bool raw_conn_request(raw_client *c, raw_req *r)
{
    raw_conn *k = c->idle;
    if (k) {
        pool_remove(c, k);
        k->reused = true;
        c->conns.reused++;
    } else if (!(k = conn_open(c))) {
        reply_fail(&r->reply, "cannot connect: %s", strerror(errno));
        raw_conn_finish(c, r, RAW_OUT_CONNECT_FAILED);
        return false;
    }
    r->attempts++;
    conn_assign(c, k, r);
    if (k->state == RAW_CONN_OPEN) /* a kept-alive connection: send now, not at the next wake-up */
        c->tls ? tls_step(c, k) : conn_flush(c, k);
    return true;
}

/* A reused connection closed before any byte of the answer: the server dropped an idle
 * connection as we sent on it (a race every keep-alive client meets). Send once more on a
 * fresh one; true when that was done. */
static bool retry_fresh(raw_client *c, raw_conn *k)
{
    raw_req *r = k->req;
    if (!r || !k->reused || k->got_bytes || r->attempts > 1)
        return false;
    k->req = NULL;
    r->conn = NULL;
    raw_conn_close(c, k);
    c->conns.retried++;
    raw_conn *fresh = conn_open(c);
    if (!fresh) {
        reply_fail(&r->reply, "cannot connect: %s", strerror(errno));
        raw_conn_finish(c, r, RAW_OUT_CONNECT_FAILED);
        return true;
    }
    r->attempts++;
    conn_assign(c, fresh, r);
    return true;
}

/* The response on k ended: the request is done; k goes back to the pool or is closed. */
static void response_done(raw_client *c, raw_conn *k, size_t leftover)
{
    raw_req *r = k->req;
    raw_conn_finish(c, r, RAW_OUT_DONE);
    r->conn = NULL;
    k->req = NULL;
    k->phase = RAW_RESP_DONE;
    if (!k->resp.keep_alive || leftover > 0 || c->n_idle >= c->max_idle ||
        k->out_off < k->out.len) {
        raw_conn_close(c, k);
        return;
    }
    conn_reset_response(k);
    if (k->want_out)
        conn_watch(c, k, false, EPOLL_CTL_MOD);
    pool_push(c, k);
}

/* ---- reading ---------------------------------------------------------------------------- */

/* A refused answer whose words are known (reply_said) ends now, its body unread (a
 * 202 may stream a whole answer, an error page may never end); k is closed. */
static bool refused_now(raw_client *c, raw_conn *k, raw_req *r)
{
    if (!reply_said(&r->reply))
        return false;
    raw_conn_finish(c, r, RAW_OUT_DONE);
    raw_conn_close(c, k);
    return true;
}

/* Response bytes of one read (plaintext), all stamped t_ns by source. Returns false when k
 * was closed or handed back (the caller stops reading it). */
static bool conn_feed(raw_client *c, raw_conn *k, const char *in, size_t len, int64_t t_ns,
                      transport_stamp source)
{
    while (len > 0) {
        raw_req *r = k->req;
        if (!r) { /* bytes nobody asked for on an idle connection */
            raw_conn_close(c, k);
            return false;
        }
        k->got_bytes = true;
        if (k->phase == RAW_RESP_HEAD) {
            /* Parse straight from the read when the head is all in it (the usual case);
             * otherwise gather it. */
            const char *head = in;
            size_t head_len = len, before = k->head.len;
            if (before > 0) {
                if (buf_append(&k->head, in, len) != 0) {
                    req_lost(c, r, "out of memory");
                    raw_conn_close(c, k);
                    return false;
                }
                head = k->head.data;
                head_len = k->head.len;
            }
            ssize_t n = http1_parse_head(head, head_len, &k->resp);
            if (n == HTTP1_NEED_MORE) {
                if (before == 0 && buf_append(&k->head, in, len) != 0) {
                    req_lost(c, r, "out of memory");
                    raw_conn_close(c, k);
                    return false;
                }
                return true;
            }
            if (n == HTTP1_ERROR) {
                req_lost(c, r, k->resp.error);
                raw_conn_close(c, k);
                return false;
            }
            size_t used = (size_t)n - before; /* of this read's bytes */
            in += used;
            len -= used;
            buf_reset(&k->head);
            if (k->resp.status < 200)
                continue; /* 100 Continue and friends: the real head follows */
            reply *rep = &r->reply;
            rep->http_status = k->resp.status;
            snprintf(rep->retry_after, sizeof rep->retry_after, "%s", k->resp.retry_after);
            snprintf(rep->location, sizeof rep->location, "%s", k->resp.location);
            snprintf(rep->content_encoding, sizeof rep->content_encoding, "%s",
                     k->resp.content_encoding);
            snprintf(rep->content_type, sizeof rep->content_type, "%s", k->resp.content_type);
            if (refused_now(c, k, r))
                return false;
            http1_body_init(&k->body, &k->resp);
            k->phase = RAW_RESP_BODY;
        }
        size_t used = 0;
        const char *data;
        size_t data_len;
        int rc = http1_body_feed(&k->body, in, len, &used, &data, &data_len);
        in += used;
        len -= used;
        if (rc == HTTP1_ERROR) {
            req_lost(c, r, "malformed chunked encoding");
            raw_conn_close(c, k);
            return false;
        }
        if (rc == HTTP1_BODY_DATA) {
            if (reply_body(&r->reply, data, data_len, t_ns, source) != 0) {
                raw_conn_finish(c, r, RAW_OUT_LOST);
                raw_conn_close(c, k);
                return false;
            }
            if (refused_now(c, k, r))
                return false;
            reply_book_mark_dirty(&c->book, &r->reply);
        }
        if (k->body.done) {
            response_done(c, k, len); /* k is closed or idle: the caller lets it be */
            return false;
        }
    }
    return true;
}

/* The server closed k (EOF) or it failed (errno_value, 0 for a clean close). */
static void conn_gone(raw_client *c, raw_conn *k, int errno_value)
{
    raw_req *r = k->req;
    if (!r) {
        raw_conn_close(c, k); /* an idle connection the server let go */
        return;
    }
    if (retry_fresh(c, k))
        return;
    if (errno_value == 0 && k->phase == RAW_RESP_BODY && http1_body_complete_at_close(&k->body)) {
        raw_conn_finish(c, r, RAW_OUT_DONE); /* a body that lasts until the close */
    } else if (errno_value) {
        req_lost(c, r, strerror(errno_value));
    } else {
        req_lost(c, r, k->got_bytes ? "the server closed the connection in the middle of the "
                                      "response"
                                    : "the server closed the connection without an answer");
    }
    raw_conn_close(c, k);
}

/* https: the ciphertext of one read (in c->rd) in; the handshake's next step, or the
 * plaintext out to conn_feed with the read's stamp. false when k was closed or handed back. */
static bool tls_feed(raw_client *c, raw_conn *k, size_t n, int64_t t, transport_stamp source)
{
    char why[160];
    if (tls_session_put(k->tls, c->rd, n) != 0) {
        if (k->req)
            req_lost(c, k->req, "out of memory");
        raw_conn_close(c, k);
        return false;
    }
    if (k->state == RAW_CONN_TLS && (!tls_step(c, k) || k->state != RAW_CONN_OPEN))
        return false;
    for (int i = 0; i < 1024; i++) { /* bounded: a 64 KiB read holds at most ~5 records */
        int got = tls_session_read(k->tls, c->rd, sizeof c->rd, why, sizeof why);
        if (got > 0) {
            if (!conn_feed(c, k, c->rd, (size_t)got, t, source))
                return false;
            continue;
        }
        if (got == TLS_AGAIN)
            break;
        if (got == TLS_CLOSED) { /* close_notify */
            conn_gone(c, k, 0);
            return false;
        }
        if (k->req)
            req_lost(c, k->req, why);
        raw_conn_close(c, k);
        return false;
    }
    /* Reading may make TLS answer (a key update): send it. */
    if (tls_session_take(k->tls, &k->out) != 0)
        return false;
    return k->out_off < k->out.len ? conn_flush(c, k) : true;
}

void raw_conn_read(raw_client *c, raw_conn *k)
{
    for (int i = 0; i < READS_PER_WAKE; i++) {
        stamp_read st;
        const ssize_t n = stamp_recv(k->fd, c->rd, sizeof c->rd, c->realtime_offset_ns, &st);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno == EINTR)
                continue;
            conn_gone(c, k, errno);
            return;
        }
        if (n == 0) {
            conn_gone(c, k, 0);
            return;
        }
        const int64_t t = st.t_ns;
        const transport_stamp source = st.kernel ? TRANSPORT_STAMP_KERNEL : TRANSPORT_STAMP_USER;
        c->stats.kernel_stamps_refused += !st.kernel;
        if (!(k->tls ? tls_feed(c, k, (size_t)n, t, source)
                     : conn_feed(c, k, c->rd, (size_t)n, t, source)))
            return;
        if ((size_t)n < sizeof c->rd)
            return; /* drained, most likely: epoll says so if not */
    }
}

/* ---- writing ---------------------------------------------------------------------------- */

/* Send what is queued; EPOLLOUT while some is left. false when k was closed. */
static bool conn_flush(raw_client *c, raw_conn *k)
{
    while (k->out_off < k->out.len) {
        ssize_t n = send(k->fd, k->out.data + k->out_off, k->out.len - k->out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            if (errno == EINTR)
                continue;
            conn_gone(c, k, errno);
            return false;
        }
        k->out_off += (size_t)n;
    }
    bool left = k->out_off < k->out.len;
    if (!left) {
        buf_reset(&k->out);
        k->out_off = 0;
    }
    if (left != k->want_out)
        conn_watch(c, k, left, EPOLL_CTL_MOD);
    return true;
}

/* https: drive the handshake; once done, hand the request to TLS; send the records. false
 * when k was closed. */
static bool tls_step(raw_client *c, raw_conn *k)
{
    raw_req *r = k->req;
    char why[160];
    if (k->state == RAW_CONN_TLS) {
        const int rc = tls_session_handshake(k->tls, why, sizeof why);
        if (rc == TLS_DONE) {
            k->state = RAW_CONN_OPEN;
        } else if (rc == TLS_FAILED) {
            if (r) {
                reply_fail(&r->reply, "cannot connect: TLS handshake: %s", why);
                raw_conn_finish(c, r, RAW_OUT_CONNECT_FAILED);
            }
            raw_conn_close(c, k);
            return false;
        }
    }
    if (k->state == RAW_CONN_OPEN && r && !k->request_queued) {
        if (tls_session_write(k->tls, r->wire, r->wire_len, why, sizeof why) != 0) {
            req_lost(c, r, why);
            raw_conn_close(c, k);
            return false;
        }
        k->request_queued = true;
    }
    if (tls_session_take(k->tls, &k->out) != 0) {
        if (r)
            req_lost(c, r, "out of memory");
        raw_conn_close(c, k);
        return false;
    }
    return conn_flush(c, k);
}

bool raw_conn_write(raw_client *c, raw_conn *k)
{
    if (k->state == RAW_CONN_CONNECTING) {
        int e = 0;
        socklen_t len = sizeof e;
        if (getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
            e = errno;
        if (e == EINPROGRESS)
            return true;
        if (e != 0) {
            raw_req *r = k->req;
            if (r) {
                reply_fail(&r->reply, "cannot connect: %s", strerror(e));
                raw_conn_finish(c, r, RAW_OUT_CONNECT_FAILED);
            }
            raw_conn_close(c, k);
            return false;
        }
        k->state = c->tls ? RAW_CONN_TLS : RAW_CONN_OPEN;
        return c->tls ? tls_step(c, k) : conn_flush(c, k);
    }
    if (k->tls && k->req && !k->request_queued)
        return tls_step(c, k);
    return conn_flush(c, k);
}
