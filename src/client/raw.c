#include "client/raw.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "client/raw_conn.h"
#include "client/reply.h"
#include "client/stamp.h"
#include "client/tls.h"
#include "client/url.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"

#define MAX_EPOLL_EVENTS 512
#define CHECK_EVERY_NS (100 * CLOCK_NS_PER_MS)

/* The head lines of every request: Host (the authority as the URL wrote it, RFC 9110 7.2),
 * ours, the credentials (an API key, else the URL's user:password) and the options' own. */
static int build_headers(raw_client *c, const url_parts *parts, const transport_options *opt,
                         char *err)
{
    buf_printf(&c->headers, "Host: %.*s\r\n", (int)parts->authority_len, parts->authority);
    /* identity: a compressed stream cannot be read (and stamped) as it comes. */
    buf_append_str(&c->headers, "User-Agent: stallscope\r\nContent-Type: application/json\r\n"
                                "Accept: text/event-stream\r\nAccept-Encoding: identity\r\n");
    if (opt->api_key && opt->api_key[0])
        buf_printf(&c->headers, "Authorization: Bearer %s\r\n", opt->api_key);
    else if (parts->basic[0]) /* the URL's user:password; an API key wins, as with curl */
        buf_printf(&c->headers, "Authorization: %s\r\n", parts->basic);
    for (int i = 0; i < opt->n_headers; i++) {
        const char *h = opt->headers[i];
        if (!strchr(h, ':') || strpbrk(h, "\r\n"))
            return err_set(err, "header '%s' is not 'Name: value'", h);
        buf_printf(&c->headers, "%s\r\n", h);
    }
    return c->headers.failed ? err_set(err, "out of memory building headers") : 0;
}

/* ---- requests ------------------------------------------------------------------------- */

static void req_free(raw_req *r)
{
    reply_free(&r->reply);
    free(r->wire);
    free(r);
}

/* Tell the owner and free r. A connection still attached is mid-response: closed. */
static void req_end(raw_client *c, raw_req *r, bool timed_out)
{
    reply_book_remove(&c->book, &r->reply);
    raw_conn_close(c, r->conn);
    r->conn = NULL;
    reply_end(&r->reply, r->out == RAW_OUT_CONNECT_FAILED, timed_out);
    req_free(r);
}

/* ---- the loop --------------------------------------------------------------------------- */

static void process_dirty(raw_client *c)
{
    reply *rep;
    while ((rep = reply_book_next_dirty(&c->book))) {
        raw_req *r = rep->owner;
        bool ok = reply_parse(rep);
        if (!ok) {
            r->out = r->out == RAW_OUT_RUNNING ? RAW_OUT_LOST : r->out;
            req_end(c, r, false);
        } else if (r->out != RAW_OUT_RUNNING) {
            if (r->out == RAW_OUT_DONE)
                reply_judge(&r->reply);
            req_end(c, r, false);
        }
    }
}

static void check_timeouts(raw_client *c, int64_t now)
{
    reply *rep = c->book.active;
    while (rep) {
        reply *next = rep->next;
        raw_req *r = rep->owner;
        raw_conn *k = r->conn;
        if (r->out == RAW_OUT_RUNNING && k && k->state != RAW_CONN_OPEN &&
            now - r->reply.t_start_ns > c->connect_timeout_ns) {
            reply_fail(&r->reply, "cannot connect: timed out after %.1f s",
                       (double)c->connect_timeout_ns / 1e9);
            raw_conn_finish(c, r, RAW_OUT_CONNECT_FAILED);
            reply_book_parse(&c->book, &r->reply);
            req_end(c, r, false);
        } else if (r->out == RAW_OUT_RUNNING) {
            int64_t since = r->reply.last_byte_ns ? r->reply.last_byte_ns : r->reply.t_start_ns;
            if (now - since > c->idle_timeout_ns) {
                reply_fail(&r->reply, "timeout: no bytes for %.1f s",
                           (double)c->idle_timeout_ns / 1e9);
                reply_book_parse(&c->book, &r->reply);
                req_end(c, r, true);
            }
        }
        rep = next;
    }
}

int raw_run(raw_client *c, int64_t until_ns, char *err)
{
    struct epoll_event evs[MAX_EPOLL_EVENTS];
    for (;;) {
        process_dirty(c); /* requests that failed in post (refused at once) */
        int64_t now = clock_now_ns();
        if (now >= until_ns)
            return 0;
        int64_t wake = until_ns;
        if (c->book.n_active > 0) {
            if (c->next_check_ns == 0)
                c->next_check_ns = now + CHECK_EVERY_NS;
            if (c->next_check_ns < wake)
                wake = c->next_check_ns;
        }
        int n = transport_epoll_wait(c->ep, evs, MAX_EPOLL_EVENTS, wake - now, &c->use_pwait2);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return err_set(err, "epoll_wait: %s", strerror(errno));
        }
        if (n > 0)
            c->realtime_offset_ns = clock_realtime_offset_ns(1, NULL);
        /* Read (and stamp) every ready socket first; parse after. */
        for (int i = 0; i < n; i++) {
            raw_conn *k = evs[i].data.ptr;
            uint32_t what = evs[i].events;
            if ((what & (EPOLLOUT | EPOLLERR)) || k->state == RAW_CONN_CONNECTING) {
                if (!raw_conn_write(c, k))
                    continue;
                if (k->state == RAW_CONN_CONNECTING)
                    continue;
            }
            if (what & (EPOLLIN | EPOLLHUP | EPOLLRDHUP | EPOLLERR))
                raw_conn_read(c, k);
        }
        process_dirty(c);
        now = clock_now_ns();
        if (c->next_check_ns && now >= c->next_check_ns) {
            c->next_check_ns = c->book.n_active > 0 ? now + CHECK_EVERY_NS : 0;
            check_timeouts(c, now);
        }
    }
}

/* ---- public API -------------------------------------------------------------------------- */

raw_client *raw_create(const transport_options *opt, char *err)
{
    raw_client *c = calloc(1, sizeof *c);
    if (!c) {
        err_set(err, "out of memory");
        return NULL;
    }
    c->ep = -1;
    c->use_pwait2 = true;
    c->idle_timeout_ns = opt->idle_timeout_ns > 0 ? opt->idle_timeout_ns : 30 * CLOCK_NS_PER_S;
    c->connect_timeout_ns =
        opt->connect_timeout_ns > 0 ? opt->connect_timeout_ns : 5 * CLOCK_NS_PER_S;
    c->max_idle = (opt->max_streams > 0 ? opt->max_streams : 64) + 16;
    char base[1024];
    url_parts parts;
    url_base(opt->base_url, base, sizeof base);
    size_t query_len;
    const char *query = url_query(opt->base_url, &query_len);
    if (query && query_len + 2 > sizeof c->query) {
        err_set(err, "the target's query is too long");
        goto error;
    }
    if (query)
        snprintf(c->query, sizeof c->query, "?%.*s", (int)query_len, query);
    if (url_split(base, &parts, err) != 0)
        goto error;
    snprintf(c->host, sizeof c->host, "%s", parts.host);
    snprintf(c->prefix, sizeof c->prefix, "%s", parts.path);
    const int headers = build_headers(c, &parts, opt, err);
    url_parts_wipe(&parts);
    if (headers != 0)
        goto error;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_ADDRCONFIG;
    int rc = getaddrinfo(c->host, parts.port, &hints, &res);
    if (rc != 0 || !res) {
        err_set(err, "cannot resolve %s: %s", c->host, gai_strerror(rc));
        goto error;
    }
    memcpy(&c->addr, res->ai_addr, res->ai_addrlen);
    c->addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    if (parts.tls && !(c->tls = tls_context_new(opt->insecure, err)))
        goto error;
    if ((c->ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        err_set(err, "epoll_create1: %s", strerror(errno));
        goto error;
    }
    transport_raise_fd_limit(c->max_idle);
    (void)stamp_switch_on(); /* when not on in 20 ms, the first reads may be user stamps: counted */
    return c;
error:
    raw_free(c);
    return NULL;
}

void raw_free(raw_client *c)
{
    if (!c)
        return;
    while (c->book.active) {
        raw_req *r = c->book.active->owner;
        reply_book_remove(&c->book, &r->reply);
        raw_conn_close(c, r->conn);
        req_free(r);
    }
    while (c->idle)
        raw_conn_close(c, c->idle);
    if (c->ep >= 0)
        close(c->ep);
    tls_context_free(c->tls);
    buf_free(&c->headers);
    free(c);
}

int raw_post(raw_client *c, const transport_request *req, char *err)
{
    raw_req *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(err, "out of memory");
    r->c = c;
    reply_init(&r->reply, req, &c->stats);
    r->reply.owner = r;
    buf wire = {0};
    buf_printf(&wire, "POST %s%s%s HTTP/1.1\r\n", c->prefix, req->path, c->query);
    buf_append(&wire, c->headers.data, c->headers.len);
    buf_printf(&wire, "Content-Length: %zu\r\n\r\n", req->body_len);
    buf_append(&wire, req->body, req->body_len);
    if (wire.failed) {
        buf_free(&wire);
        req_free(r);
        return err_set(err, "out of memory");
    }
    r->wire_len = wire.len;
    r->wire = buf_detach(&wire);
    reply_book_add(&c->book, &r->reply);
    raw_conn_request(c, r); /* a failure is the request's: ended at the next run() */
    return 0;
}

static void cancel_end(void *ctx, reply *rep) { req_end(ctx, rep->owner, false); }

static void cancel_drop(void *ctx, reply *rep)
{
    raw_client *c = ctx;
    raw_req *r = rep->owner;
    reply_book_remove(&c->book, rep);
    raw_conn_close(c, r->conn);
    req_free(r);
}

void raw_cancel_all(raw_client *c, const char *reason)
{
    reply_book_cancel_all(&c->book, reason, cancel_end, cancel_drop, c);
}

int raw_active(const raw_client *c) { return c->book.n_active; }

void raw_get_stats(const raw_client *c, transport_stats *out) { *out = c->stats; }

void raw_get_conn_stats(const raw_client *c, raw_conn_stats *out)
{
    *out = (raw_conn_stats){c->conns.opened, c->conns.reused, c->conns.retried};
}

static int t_post(void *impl, const transport_request *req, char *err)
{
    return raw_post(impl, req, err);
}
static int t_run(void *impl, int64_t until_ns, char *err) { return raw_run(impl, until_ns, err); }
static void t_cancel(void *impl, const char *reason) { raw_cancel_all(impl, reason); }
static int t_active(void *impl) { return raw_active(impl); }
static void t_destroy(void *impl) { raw_free(impl); }
static void t_stats(void *impl, transport_stats *out) { raw_get_stats(impl, out); }

transport raw_client_transport(raw_client *c)
{
    return (transport){c, t_post, t_run, t_cancel, t_active, transport_clock_now,
                       t_destroy, t_stats};
}
