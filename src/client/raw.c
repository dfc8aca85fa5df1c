#include "client/raw.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "client/http1.h"
#include "client/reply.h"
#include "client/url.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"

#define MAX_EPOLL_EVENTS 512
#define READ_BUF (64 * 1024)
#define READS_PER_WAKE 8 /* per socket per wake-up: one busy stream cannot starve the rest */
#define CHECK_EVERY_NS (100 * CLOCK_NS_PER_MS)
#define MAX_HOST 256
#define MAX_PATH 1024

typedef enum { CONN_CONNECTING, CONN_TLS, CONN_OPEN } conn_state;
typedef enum { RESP_HEAD, RESP_BODY, RESP_DONE } resp_phase;
/* How a request's transfer ended (the reply says what the body held). */
typedef enum { OUT_RUNNING, OUT_DONE, OUT_LOST, OUT_CONNECT_FAILED } outcome;

typedef struct raw_req raw_req;

typedef struct raw_conn {
    int fd;
    conn_state state;
    bool reused;         /* carried a response before the current request */
    bool want_out;       /* EPOLLOUT registered */
    raw_req *req;        /* the request on it; NULL when idle */
    resp_phase phase;
    buf head;            /* a response head that spans reads */
    http1_response resp;
    http1_body body;
    bool got_bytes;      /* any response byte for the current request */
    buf out;             /* bytes still to send (the request, or TLS records) */
    size_t out_off;
    SSL *ssl;            /* https: OpenSSL over memory BIOs */
    BIO *rbio, *wbio;
    bool request_queued; /* https: the request was handed to SSL_write */
    bool in_pool;        /* idle, in the keep-alive pool */
    struct raw_conn *idle_prev, *idle_next;
} raw_conn;

struct raw_req {
    raw_client *c;
    reply reply;
    char *wire; /* the whole request: head and body */
    size_t wire_len;
    raw_conn *conn;
    int attempts;
    outcome out;
};

struct raw_client {
    int ep;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    char host[MAX_HOST];  /* for SNI and certificate checks */
    char prefix[MAX_PATH]; /* the base URL's path, before each request's */
    char query[MAX_PATH];  /* the target's query, after each request's path ("" none) */
    buf headers;          /* "Host: ...\r\n" and the rest, each line with CRLF */
    char basic[MAX_PATH]; /* "Basic <base64 of user:password>" from the URL, "" none */
    bool tls;
    SSL_CTX *ssl_ctx;
    int64_t idle_timeout_ns, connect_timeout_ns;
    int max_idle;
    reply_book book; /* the requests running, those with bytes to parse */
    raw_conn *idle;
    int n_idle;
    int64_t next_check_ns;
    int64_t realtime_offset_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC at this wake-up */
    bool use_pwait2;
    transport_stats stats;
    raw_conn_stats conns;
    char rd[READ_BUF];
};

static bool tls_step(raw_client *c, raw_conn *k);
static bool conn_flush(raw_client *c, raw_conn *k);

/* ---- the base URL ------------------------------------------------------------------- */

static int hex_digit(char x)
{
    return x >= '0' && x <= '9' ? x - '0'
           : x >= 'a' && x <= 'f' ? x - 'a' + 10
           : x >= 'A' && x <= 'F' ? x - 'A' + 10
                                  : -1;
}

/* The URL's user:password (percent-decoded, as curl reads them) as c->basic, for an
 * Authorization: Basic header (RFC 7617). */
static int basic_auth(raw_client *c, const char *userinfo, size_t len, char *err)
{
    unsigned char plain[384];
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (n + 1 >= sizeof plain)
            return err_set(err, "the URL's credentials are too long");
        int hi, lo;
        if (userinfo[i] == '%' && i + 2 < len && (hi = hex_digit(userinfo[i + 1])) >= 0 &&
            (lo = hex_digit(userinfo[i + 2])) >= 0) {
            plain[n++] = (unsigned char)(hi * 16 + lo);
            i += 2;
        } else {
            plain[n++] = (unsigned char)userinfo[i];
        }
    }
    if (!memchr(plain, ':', n))
        plain[n++] = ':'; /* a user without a password: curl sends "user:" */
    static const char prefix[] = "Basic ";
    if (sizeof prefix - 1 + 4 * ((n + 2) / 3) + 1 > sizeof c->basic)
        return err_set(err, "the URL's credentials are too long");
    memcpy(c->basic, prefix, sizeof prefix - 1);
    EVP_EncodeBlock((unsigned char *)c->basic + sizeof prefix - 1, plain, (int)n);
    OPENSSL_cleanse(plain, sizeof plain);
    return 0;
}

static int parse_url(raw_client *c, const char *base_url, char *port, size_t port_size, char *err)
{
    const char *p = base_url;
    if (strncasecmp(p, "http://", 7) == 0) {
        p += 7;
        snprintf(port, port_size, "80");
    } else if (strncasecmp(p, "https://", 8) == 0) {
        p += 8;
        c->tls = true;
        snprintf(port, port_size, "443");
    } else {
        return err_set(err,
                       "the raw transport takes http:// and https:// URLs, not '%s' "
                       "(--transport curl)",
                       base_url);
    }
    size_t auth_len = strcspn(p, "/?#");
    const char *at = NULL;
    for (const char *q = p; q < p + auth_len; q++)
        if (*q == '@')
            at = q; /* the last '@': a raw one may sit in the password, as curl reads it */
    if (at) {
        if (basic_auth(c, p, (size_t)(at - p), err) != 0)
            return -1;
        auth_len -= (size_t)(at + 1 - p);
        p = at + 1;
    }
    const char *path = p + auth_len;
    const char *host = p;
    size_t host_len;
    const char *port_at = NULL;
    if (host[0] == '[') {
        const char *close = memchr(host, ']', auth_len);
        if (!close)
            return err_set(err, "bad IPv6 address in '%s'", base_url);
        host++;
        host_len = (size_t)(close - host);
        if (close + 1 < path && close[1] == ':')
            port_at = close + 2;
    } else {
        const char *colon = memchr(host, ':', auth_len);
        host_len = colon ? (size_t)(colon - host) : auth_len;
        if (colon)
            port_at = colon + 1;
    }
    if (host_len == 0 || host_len >= sizeof c->host)
        return err_set(err, "no host (or too long a one) in '%s'", base_url);
    memcpy(c->host, host, host_len);
    c->host[host_len] = '\0';
    if (port_at) {
        size_t n = (size_t)(path - port_at);
        if (n == 0 || n >= port_size || strspn(port_at, "0123456789") < n)
            return err_set(err, "bad port in '%s'", base_url);
        memcpy(port, port_at, n);
        port[n] = '\0';
    }
    size_t path_len = strcspn(path, "?#");
    if (path_len >= sizeof c->prefix)
        return err_set(err, "URL path too long");
    memcpy(c->prefix, path, path_len);
    c->prefix[path_len] = '\0';
    /* Host is the authority as the URL wrote it (RFC 9110 7.2). */
    buf_append_str(&c->headers, "Host: ");
    buf_append(&c->headers, p, auth_len);
    buf_append_str(&c->headers, "\r\n");
    return 0;
}

static int build_headers(raw_client *c, const transport_options *opt, char *err)
{
    /* identity: a compressed stream cannot be read (and stamped) as it comes. */
    buf_append_str(&c->headers, "User-Agent: stallscope\r\nContent-Type: application/json\r\n"
                                "Accept: text/event-stream\r\nAccept-Encoding: identity\r\n");
    if (opt->api_key && opt->api_key[0])
        buf_printf(&c->headers, "Authorization: Bearer %s\r\n", opt->api_key);
    else if (c->basic[0]) /* the URL's user:password; an API key wins, as with curl */
        buf_printf(&c->headers, "Authorization: %s\r\n", c->basic);
    for (int i = 0; i < opt->n_headers; i++) {
        const char *h = opt->headers[i];
        if (!strchr(h, ':') || strpbrk(h, "\r\n"))
            return err_set(err, "header '%s' is not 'Name: value'", h);
        buf_printf(&c->headers, "%s\r\n", h);
    }
    return c->headers.failed ? err_set(err, "out of memory building headers") : 0;
}

/* ---- TLS ------------------------------------------------------------------------------ */

static const char *tls_error(void)
{
    static char text[160];
    unsigned long e = ERR_get_error();
    if (!e)
        return "TLS failure";
    ERR_error_string_n(e, text, sizeof text);
    ERR_clear_error();
    return text;
}

static int tls_setup(raw_client *c, const transport_options *opt, char *err)
{
    c->ssl_ctx = SSL_CTX_new(TLS_client_method());
    if (!c->ssl_ctx)
        return err_set(err, "TLS: %s", tls_error());
    SSL_CTX_set_min_proto_version(c->ssl_ctx, TLS1_2_VERSION);
    if (opt->insecure) {
        SSL_CTX_set_verify(c->ssl_ctx, SSL_VERIFY_NONE, NULL);
    } else {
        SSL_CTX_set_verify(c->ssl_ctx, SSL_VERIFY_PEER, NULL);
        if (SSL_CTX_set_default_verify_paths(c->ssl_ctx) != 1)
            return err_set(err, "TLS: no CA certificates: %s", tls_error());
    }
    const unsigned char alpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_CTX_set_alpn_protos(c->ssl_ctx, alpn, sizeof alpn);
    return 0;
}

static int tls_start(raw_client *c, raw_conn *k)
{
    if (!(k->ssl = SSL_new(c->ssl_ctx)))
        return -1;
    k->rbio = BIO_new(BIO_s_mem());
    k->wbio = BIO_new(BIO_s_mem());
    if (!k->rbio || !k->wbio) {
        BIO_free(k->rbio);
        BIO_free(k->wbio);
        k->rbio = k->wbio = NULL;
        return -1;
    }
    BIO_set_mem_eof_return(k->rbio, -1); /* empty means "want more", not EOF */
    SSL_set_bio(k->ssl, k->rbio, k->wbio); /* the SSL owns them now */
    SSL_set_connect_state(k->ssl);
    SSL_set_tlsext_host_name(k->ssl, c->host);
    if (SSL_get_verify_mode(k->ssl) != SSL_VERIFY_NONE)
        SSL_set1_host(k->ssl, c->host);
    return 0;
}

/* Move what OpenSSL wrote into the memory BIO to the socket's outgoing buffer. */
static int tls_drain(raw_conn *k)
{
    char chunk[16384];
    int n;
    while ((n = BIO_read(k->wbio, chunk, sizeof chunk)) > 0)
        if (buf_append(&k->out, chunk, (size_t)n) != 0)
            return -1;
    return 0;
}

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

static void conn_close(raw_client *c, raw_conn *k)
{
    if (!k)
        return;
    pool_remove(c, k);
    if (k->req)
        k->req->conn = NULL;
    epoll_ctl(c->ep, EPOLL_CTL_DEL, k->fd, NULL);
    close(k->fd);
    if (k->ssl)
        SSL_free(k->ssl);
    buf_free(&k->head);
    buf_free(&k->out);
    free(k);
}

static void conn_reset_response(raw_conn *k)
{
    k->phase = RESP_HEAD;
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
    /* The kernel's receive time of every segment, as a control message of each read. */
    setsockopt(k->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    if (connect(k->fd, (const struct sockaddr *)&c->addr, c->addr_len) != 0 &&
        errno != EINPROGRESS) {
        int e = errno;
        close(k->fd);
        free(k);
        errno = e;
        return NULL;
    }
    if (c->tls && tls_start(c, k) != 0) {
        close(k->fd);
        free(k);
        errno = ENOMEM;
        return NULL;
    }
    k->state = CONN_CONNECTING;
    conn_watch(c, k, true, EPOLL_CTL_ADD);
    c->conns.opened++;
    return k;
}

/* ---- requests ------------------------------------------------------------------------- */

static void req_free(raw_req *r)
{
    reply_free(&r->reply);
    free(r->wire);
    free(r);
}

/* The transfer is over (the reply may still hold unparsed bytes: parsed before the end). */
static void req_finish(raw_client *c, raw_req *r, outcome how)
{
    if (r->out == OUT_RUNNING)
        r->out = how;
    reply_book_mark_dirty(&c->book, &r->reply);
}

static void req_lost(raw_client *c, raw_req *r, const char *why)
{
    reply_fail(&r->reply, "connection lost: %s", why);
    req_finish(c, r, OUT_LOST);
}

/* Tell the owner and free r. A connection still attached is mid-response: closed. */
static void req_end(raw_client *c, raw_req *r, bool timed_out)
{
    reply_book_remove(&c->book, &r->reply);
    conn_close(c, r->conn);
    r->conn = NULL;
    reply_end(&r->reply, r->out == OUT_CONNECT_FAILED, timed_out);
    req_free(r);
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

/* A connection for r: an idle one, or a new one. false with r failed. */
static bool req_connect(raw_client *c, raw_req *r)
{
    raw_conn *k = c->idle;
    if (k) {
        pool_remove(c, k);
        k->reused = true;
        c->conns.reused++;
    } else if (!(k = conn_open(c))) {
        reply_fail(&r->reply, "cannot connect: %s", strerror(errno));
        req_finish(c, r, OUT_CONNECT_FAILED);
        return false;
    }
    r->attempts++;
    conn_assign(c, k, r);
    if (k->state == CONN_OPEN) /* a kept-alive connection: send now, not at the next wake-up */
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
    conn_close(c, k);
    c->conns.retried++;
    raw_conn *fresh = conn_open(c);
    if (!fresh) {
        reply_fail(&r->reply, "cannot connect: %s", strerror(errno));
        req_finish(c, r, OUT_CONNECT_FAILED);
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
    req_finish(c, r, OUT_DONE);
    r->conn = NULL;
    k->req = NULL;
    k->phase = RESP_DONE;
    if (!k->resp.keep_alive || leftover > 0 || c->n_idle >= c->max_idle ||
        k->out_off < k->out.len) {
        conn_close(c, k);
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
    req_finish(c, r, OUT_DONE);
    conn_close(c, k);
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
            conn_close(c, k);
            return false;
        }
        k->got_bytes = true;
        if (k->phase == RESP_HEAD) {
            /* Parse straight from the read when the head is all in it (the usual case);
             * otherwise gather it. */
            const char *head = in;
            size_t head_len = len, before = k->head.len;
            if (before > 0) {
                if (buf_append(&k->head, in, len) != 0) {
                    req_lost(c, r, "out of memory");
                    conn_close(c, k);
                    return false;
                }
                head = k->head.data;
                head_len = k->head.len;
            }
            ssize_t n = http1_parse_head(head, head_len, &k->resp);
            if (n == HTTP1_NEED_MORE) {
                if (before == 0 && buf_append(&k->head, in, len) != 0) {
                    req_lost(c, r, "out of memory");
                    conn_close(c, k);
                    return false;
                }
                return true;
            }
            if (n == HTTP1_ERROR) {
                req_lost(c, r, k->resp.error);
                conn_close(c, k);
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
            k->phase = RESP_BODY;
        }
        size_t used = 0;
        const char *data;
        size_t data_len;
        int rc = http1_body_feed(&k->body, in, len, &used, &data, &data_len);
        in += used;
        len -= used;
        if (rc == HTTP1_ERROR) {
            req_lost(c, r, "malformed chunked encoding");
            conn_close(c, k);
            return false;
        }
        if (rc == HTTP1_BODY_DATA) {
            if (reply_body(&r->reply, data, data_len, t_ns, source) != 0) {
                req_finish(c, r, OUT_LOST);
                conn_close(c, k);
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
        conn_close(c, k); /* an idle connection the server let go */
        return;
    }
    if (retry_fresh(c, k))
        return;
    if (errno_value == 0 && k->phase == RESP_BODY && http1_body_complete_at_close(&k->body)) {
        req_finish(c, r, OUT_DONE); /* a body that lasts until the close */
    } else if (errno_value) {
        req_lost(c, r, strerror(errno_value));
    } else {
        req_lost(c, r, k->got_bytes ? "the server closed the connection in the middle of the "
                                      "response"
                                    : "the server closed the connection without an answer");
    }
    conn_close(c, k);
}

/* https: the ciphertext of one read (in c->rd) in; the handshake's next step, or the
 * plaintext out to conn_feed with the read's stamp. false when k was closed or handed back. */
static bool tls_feed(raw_client *c, raw_conn *k, size_t n, int64_t t, transport_stamp source)
{
    if (BIO_write(k->rbio, c->rd, (int)n) != (int)n) {
        if (k->req)
            req_lost(c, k->req, "out of memory");
        conn_close(c, k);
        return false;
    }
    if (k->state == CONN_TLS && (!tls_step(c, k) || k->state != CONN_OPEN))
        return false;
    for (int i = 0; i < 1024; i++) { /* bounded: a 64 KiB read holds at most ~5 records */
        int got = SSL_read(k->ssl, c->rd, sizeof c->rd); /* the ciphertext is in the BIO */
        if (got > 0) {
            if (!conn_feed(c, k, c->rd, (size_t)got, t, source))
                return false;
            continue;
        }
        int e = SSL_get_error(k->ssl, got);
        if (e == SSL_ERROR_WANT_READ)
            break;
        if (e == SSL_ERROR_ZERO_RETURN) { /* close_notify */
            conn_gone(c, k, 0);
            return false;
        }
        if (k->req)
            req_lost(c, k->req, tls_error());
        conn_close(c, k);
        return false;
    }
    /* Reading may make TLS answer (a key update): send it. */
    if (tls_drain(k) != 0)
        return false;
    return k->out_off < k->out.len ? conn_flush(c, k) : true;
}

/* Read k until it is drained (or READS_PER_WAKE reads), stamping each read. */
static void conn_read(raw_client *c, raw_conn *k)
{
    for (int i = 0; i < READS_PER_WAKE; i++) {
        union {
            char buf[CMSG_SPACE(sizeof(struct timespec))];
            struct cmsghdr align;
        } control;
        struct iovec iov = {c->rd, sizeof c->rd};
        struct msghdr msg = {0};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof control.buf;
        ssize_t n = recvmsg(k->fd, &msg, 0);
        int64_t now = clock_now_ns(); /* right after the read, before any parsing */
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
        /* The kernel's stamp, realtime -> monotonic. It cannot be later than our read: up to
         * 1 ms past it is the mapping's error (taken as the read's time); more is a clock
         * step between the two, and the read's own time is used. */
        int64_t t = now;
        transport_stamp source = TRANSPORT_STAMP_USER;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                int64_t kernel = (int64_t)ts.tv_sec * CLOCK_NS_PER_S + ts.tv_nsec -
                                 c->realtime_offset_ns;
                if (ts.tv_sec != 0 && kernel <= now + CLOCK_NS_PER_MS) {
                    t = kernel < now ? kernel : now;
                    source = TRANSPORT_STAMP_KERNEL;
                }
            }
        }
        c->stats.kernel_stamps_refused += source == TRANSPORT_STAMP_USER;
        if (!(k->ssl ? tls_feed(c, k, (size_t)n, t, source)
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
    if (k->state == CONN_TLS) {
        int rc = SSL_do_handshake(k->ssl);
        if (rc == 1) {
            k->state = CONN_OPEN;
        } else {
            int e = SSL_get_error(k->ssl, rc);
            if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
                if (r) {
                    long verify = SSL_get_verify_result(k->ssl);
                    reply_fail(&r->reply, "cannot connect: TLS handshake: %s",
                               verify != X509_V_OK ? X509_verify_cert_error_string(verify)
                                                   : tls_error());
                    req_finish(c, r, OUT_CONNECT_FAILED);
                }
                conn_close(c, k);
                return false;
            }
        }
    }
    if (k->state == CONN_OPEN && r && !k->request_queued) {
        /* A memory BIO takes the whole request at once. */
        if (SSL_write(k->ssl, r->wire, (int)r->wire_len) <= 0) {
            req_lost(c, r, tls_error());
            conn_close(c, k);
            return false;
        }
        k->request_queued = true;
    }
    if (tls_drain(k) != 0) {
        if (r)
            req_lost(c, r, "out of memory");
        conn_close(c, k);
        return false;
    }
    return conn_flush(c, k);
}

/* Writable (or failed): finish connecting, send what is queued. false when k was closed. */
static bool conn_write(raw_client *c, raw_conn *k)
{
    if (k->state == CONN_CONNECTING) {
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
                req_finish(c, r, OUT_CONNECT_FAILED);
            }
            conn_close(c, k);
            return false;
        }
        k->state = c->tls ? CONN_TLS : CONN_OPEN;
        return c->tls ? tls_step(c, k) : conn_flush(c, k);
    }
    if (k->ssl && k->req && !k->request_queued)
        return tls_step(c, k);
    return conn_flush(c, k);
}

/* ---- the loop --------------------------------------------------------------------------- */

static void process_dirty(raw_client *c)
{
    reply *rep;
    while ((rep = reply_book_next_dirty(&c->book))) {
        raw_req *r = rep->owner;
        bool ok = reply_parse(rep);
        if (!ok) {
            r->out = r->out == OUT_RUNNING ? OUT_LOST : r->out;
            req_end(c, r, false);
        } else if (r->out != OUT_RUNNING) {
            if (r->out == OUT_DONE)
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
        if (r->out == OUT_RUNNING && k && k->state != CONN_OPEN &&
            now - r->reply.t_start_ns > c->connect_timeout_ns) {
            reply_fail(&r->reply, "cannot connect: timed out after %.1f s",
                       (double)c->connect_timeout_ns / 1e9);
            req_finish(c, r, OUT_CONNECT_FAILED);
            reply_book_parse(&c->book, &r->reply);
            req_end(c, r, false);
        } else if (r->out == OUT_RUNNING) {
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
            if ((what & (EPOLLOUT | EPOLLERR)) || k->state == CONN_CONNECTING) {
                if (!conn_write(c, k))
                    continue;
                if (k->state == CONN_CONNECTING)
                    continue;
            }
            if (what & (EPOLLIN | EPOLLHUP | EPOLLRDHUP | EPOLLERR))
                conn_read(c, k);
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
    c->connect_timeout_ns = opt->connect_timeout_ns > 0 ? opt->connect_timeout_ns : 5 * CLOCK_NS_PER_S;
    c->max_idle = (opt->max_streams > 0 ? opt->max_streams : 64) + 16;
    char base[1024], port[16];
    url_base(opt->base_url, base, sizeof base);
    size_t query_len;
    const char *query = url_query(opt->base_url, &query_len);
    if (query && query_len + 2 > sizeof c->query) {
        err_set(err, "the target's query is too long");
        goto error;
    }
    if (query)
        snprintf(c->query, sizeof c->query, "?%.*s", (int)query_len, query);
    if (parse_url(c, base, port, sizeof port, err) != 0 || build_headers(c, opt, err) != 0)
        goto error;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_ADDRCONFIG;
    int rc = getaddrinfo(c->host, port, &hints, &res);
    if (rc != 0 || !res) {
        err_set(err, "cannot resolve %s: %s", c->host, gai_strerror(rc));
        goto error;
    }
    memcpy(&c->addr, res->ai_addr, res->ai_addrlen);
    c->addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    if (c->tls && tls_setup(c, opt, err) != 0)
        goto error;
    if ((c->ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        err_set(err, "epoll_create1: %s", strerror(errno));
        goto error;
    }
    transport_raise_fd_limit(c->max_idle);
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
        conn_close(c, r->conn);
        req_free(r);
    }
    while (c->idle)
        conn_close(c, c->idle);
    if (c->ep >= 0)
        close(c->ep);
    if (c->ssl_ctx)
        SSL_CTX_free(c->ssl_ctx);
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
    req_connect(c, r); /* a failure is the request's: ended at the next run() */
    return 0;
}

static void cancel_end(void *ctx, reply *rep) { req_end(ctx, rep->owner, false); }

static void cancel_drop(void *ctx, reply *rep)
{
    raw_client *c = ctx;
    raw_req *r = rep->owner;
    reply_book_remove(&c->book, rep);
    conn_close(c, r->conn);
    req_free(r);
}

void raw_cancel_all(raw_client *c, const char *reason)
{
    reply_book_cancel_all(&c->book, reason, cancel_end, cancel_drop, c);
}

int raw_active(const raw_client *c) { return c->book.n_active; }

void raw_get_stats(const raw_client *c, transport_stats *out) { *out = c->stats; }

void raw_get_conn_stats(const raw_client *c, raw_conn_stats *out) { *out = c->conns; }

static int t_post(void *impl, const transport_request *req, char *err)
{
    return raw_post(impl, req, err);
}
static int t_run(void *impl, int64_t until_ns, char *err) { return raw_run(impl, until_ns, err); }
static void t_cancel(void *impl, const char *reason) { raw_cancel_all(impl, reason); }
static int t_active(void *impl) { return raw_active(impl); }
static int64_t t_now(void *impl)
{
    (void)impl;
    return clock_now_ns();
}
static void t_destroy(void *impl) { raw_free(impl); }
static void t_stats(void *impl, transport_stats *out) { raw_get_stats(impl, out); }

transport raw_client_transport(raw_client *c)
{
    return (transport){c, t_post, t_run, t_cancel, t_active, t_now, t_destroy, t_stats};
}
