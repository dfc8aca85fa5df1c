#include "client/curl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <curl/curl.h>

#include "client/reply.h"
#include "client/url.h"
#include "common/clock.h"
#include "common/err.h"

#define MAX_EPOLL_EVENTS 512
#define IDLE_CHECK_NS (100 * CLOCK_NS_PER_MS)
#define MAX_URL 1024

typedef struct curlt_req {
    curlt_client *c;
    CURL *easy;
    char *body;
    size_t body_len;
    char url[MAX_URL];
    reply reply; /* status, headers, stamped bytes, SSE, tokens, the error; the lists of
                    c->book */
    char curl_err[CURL_ERROR_SIZE];
} curlt_req;

struct curlt_client {
    CURLM *multi;
    int ep;
    struct curl_slist *headers;
    char target[MAX_URL]; /* as given: each request's URL is url_join's */
    int64_t idle_timeout_ns, connect_timeout_ns;
    bool insecure;
    int64_t timer_ns; /* curl's next timeout, -1 none */
    int64_t ready_ns; /* when epoll reported this wake-up's sockets readable; 0 outside it */
    int64_t next_idle_check_ns;
    reply_book book; /* the requests running, those with bytes to parse */
    transport_stats stats;
    bool use_pwait2;
};

void curlt_global_init(void)
{
    static bool done;
    if (!done) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        done = true;
    }
}

struct curl_slist *curlt_headers(const transport_options *opt, char *err)
{
    struct curl_slist *list = NULL, *tmp;
    const char *fixed[] = {"Content-Type: application/json", "Accept: text/event-stream",
                           /* a compressed stream cannot be read as it comes */
                           "Accept-Encoding: identity",
                           /* curl would wait for "100 Continue" before a large body */
                           "Expect:"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        if (!(tmp = curl_slist_append(list, fixed[i])))
            goto oom;
        list = tmp;
    }
    if (opt->api_key && opt->api_key[0]) {
        char line[1024];
        snprintf(line, sizeof line, "Authorization: Bearer %s", opt->api_key);
        if (!(tmp = curl_slist_append(list, line)))
            goto oom;
        list = tmp;
    }
    for (int i = 0; i < opt->n_headers; i++) {
        if (!strchr(opt->headers[i], ':')) {
            curl_slist_free_all(list);
            err_set(err, "header '%s' is not 'Name: value'", opt->headers[i]);
            return NULL;
        }
        if (!(tmp = curl_slist_append(list, opt->headers[i])))
            goto oom;
        list = tmp;
    }
    return list;
oom:
    curl_slist_free_all(list);
    err_set(err, "out of memory building headers");
    return NULL;
}

/* ---- curl callbacks ---------------------------------------------------------------- */

static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    (void)easy;
    curlt_client *c = userp;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(c->ep, EPOLL_CTL_DEL, s, NULL); /* may already be closed: fine */
        curl_multi_assign(c->multi, s, NULL);
        return 0;
    }
    struct epoll_event ev = {0};
    ev.data.fd = s;
    ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
    int op = socketp ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(c->ep, op, s, &ev) != 0) {
        /* A recycled fd number can be known to one side and not the other. */
        op = (errno == EEXIST) ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
        epoll_ctl(c->ep, op, s, &ev);
    }
    if (!socketp)
        curl_multi_assign(c->multi, s, c);
    return 0;
}

static int on_timer(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    curlt_client *c = userp;
    c->timer_ns = timeout_ms < 0 ? -1 : clock_now_ns() + (int64_t)timeout_ms * CLOCK_NS_PER_MS;
    return 0;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    /* The stamp comes first, before any parsing: the moment epoll reported the socket
     * readable, or now when curl reads outside a wake-up (timeouts). Stamping at the
     * wake-up rather than at each read keeps the tokens of one engine step, which arrive
     * together, from being skewed by the order in which curl reads their sockets (about
     * 7 us each). Everything else (splitting, JSON) waits until every ready socket of this
     * wake-up has been read. */
    curlt_req *r = userdata;
    int64_t t = r->c->ready_ns > 0 ? r->c->ready_ns : clock_now_ns();
    size_t n = size * nmemb;
    if (r->reply.http_status == 0) {
        long code = 0;
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
        r->reply.http_status = (int)code;
    }
    if (reply_body(&r->reply, ptr, n, t, TRANSPORT_STAMP_USER) != 0 || reply_said(&r->reply))
        return 0; /* curl treats a short write as an error: the transfer ends here */
    reply_book_mark_dirty(&r->c->book, &r->reply);
    return n;
}

/* Response headers: those a reply keeps (Retry-After, Location, Content-Encoding,
 * Content-Type). A new status line (a redirect, a 100 Continue) starts over. */
static size_t on_header(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    curlt_req *r = userdata;
    reply *rep = &r->reply;
    size_t n = size * nmemb;
    const struct {
        const char *name; /* with its colon */
        char *value;
        size_t room;
    } kept[] = {
        {"retry-after:", rep->retry_after, sizeof rep->retry_after},
        {"location:", rep->location, sizeof rep->location},
        {"content-encoding:", rep->content_encoding, sizeof rep->content_encoding},
        {"content-type:", rep->content_type, sizeof rep->content_type},
    };
    const size_t n_kept = sizeof kept / sizeof kept[0];
    if (n >= 5 && memcmp(ptr, "HTTP/", 5) == 0) {
        for (size_t i = 0; i < n_kept; i++)
            kept[i].value[0] = '\0';
        const char *code = memchr(ptr, ' ', n);
        rep->http_status = code ? atoi(code + 1) : 0;
        return n;
    }
    /* The head's end: a final answer that is refused and says all in its head ends here
     * (curl returns CURLE_WRITE_ERROR for the short count), before any of its body. */
    if ((n == 2 && ptr[0] == '\r') || (n == 1 && ptr[0] == '\n'))
        return reply_said(rep) ? 0 : n;
    for (size_t i = 0; i < n_kept; i++) {
        const size_t name_len = strlen(kept[i].name);
        if (n <= name_len || strncasecmp(ptr, kept[i].name, name_len) != 0)
            continue;
        const char *value = ptr + name_len;
        size_t len = n - name_len;
        while (len > 0 && (*value == ' ' || *value == '\t'))
            value++, len--;
        while (len > 0 && strchr("\r\n \t", value[len - 1]))
            len--;
        if (len >= kept[i].room)
            len = kept[i].room - 1; /* cut: a Retry-After too long to be valid fails to parse */
        memcpy(kept[i].value, value, len);
        kept[i].value[len] = '\0';
    }
    return n;
}

/* ---- request lifecycle ------------------------------------------------------------- */

static void req_free(curlt_req *r)
{
    if (r->easy)
        curl_easy_cleanup(r->easy);
    reply_free(&r->reply);
    free(r->body);
    free(r);
}

/* Take r out of curl, tell the owner, free it. */
static void req_end(curlt_client *c, curlt_req *r, bool connect_failed, bool timed_out)
{
    curl_multi_remove_handle(c->multi, r->easy);
    reply_book_remove(&c->book, &r->reply);
    reply_end(&r->reply, connect_failed, timed_out);
    req_free(r);
}

static void process_dirty(curlt_client *c)
{
    reply *rep;
    while ((rep = reply_book_next_dirty(&c->book)))
        if (!reply_parse(rep))
            req_end(c, rep->owner, false, false);
}

static void collect_done(curlt_client *c)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(c->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        char *priv = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
        curlt_req *r = (curlt_req *)priv;
        reply *rep = &r->reply;
        CURLcode rc = msg->data.result;
        /* Streams have no overall timeout, only a connect timeout: a timeout here means
         * the connection never came up. */
        bool connect_failed = rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
                              (rc == CURLE_OPERATION_TIMEDOUT && rep->head_len == 0);
        reply_book_parse(&c->book, rep); /* bytes of the last read */
        if (rep->http_status == 0) {
            long code = 0;
            curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
            rep->http_status = (int)code;
        }
        if (connect_failed) {
            long os_errno = 0;
            curl_easy_getinfo(r->easy, CURLINFO_OS_ERRNO, &os_errno);
            if (os_errno)
                reply_fail(rep, "cannot connect: %s", strerror((int)os_errno));
            else
                reply_fail(rep, "cannot connect: %.100s",
                           r->curl_err[0] ? r->curl_err : curl_easy_strerror(rc));
        } else if (rc == CURLE_OUT_OF_MEMORY && !r->curl_err[0] && rep->head_len == 0) {
            /* What libcurl says when a header line outgrows its buffer (100 KiB). */
            reply_fail(rep, "connection lost: libcurl refused the response head (a "
                            "header line past 100 KiB, or out of memory)");
        } else if (rc != CURLE_OK) {
            reply_fail(rep, "connection lost: %.100s",
                       r->curl_err[0] ? r->curl_err : curl_easy_strerror(rc));
        } else {
            reply_judge(rep);
        }
        req_end(c, r, connect_failed, false);
    }
}

static void check_idle(curlt_client *c, int64_t now)
{
    reply *rep = c->book.active;
    while (rep) {
        reply *next = rep->next;
        curlt_req *r = rep->owner;
        int64_t since = r->reply.last_byte_ns ? r->reply.last_byte_ns : r->reply.t_start_ns;
        if (now - since > c->idle_timeout_ns) {
            char why[64];
            snprintf(why, sizeof why, "%.1f s", (double)c->idle_timeout_ns / 1e9);
            reply_fail(&r->reply, "timeout: no bytes for %s", why);
            reply_book_parse(&c->book, &r->reply);
            req_end(c, r, false, true);
        }
        rep = next;
    }
}

/* ---- public API -------------------------------------------------------------------- */

curlt_client *curlt_create(const transport_options *opt, char *err)
{
    curlt_global_init();
    curlt_client *c = calloc(1, sizeof *c);
    if (!c) {
        err_set(err, "out of memory");
        return NULL;
    }
    c->ep = -1;
    snprintf(c->target, sizeof c->target, "%s", opt->base_url);
    c->idle_timeout_ns = opt->idle_timeout_ns > 0 ? opt->idle_timeout_ns : 30 * CLOCK_NS_PER_S;
    c->connect_timeout_ns =
        opt->connect_timeout_ns > 0 ? opt->connect_timeout_ns : 5 * CLOCK_NS_PER_S;
    c->insecure = opt->insecure;
    c->timer_ns = -1;
    c->use_pwait2 = true;
    if (!(c->headers = curlt_headers(opt, err)))
        goto error;
    if ((c->ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        err_set(err, "epoll_create1: %s", strerror(errno));
        goto error;
    }
    if (!(c->multi = curl_multi_init())) {
        err_set(err, "curl_multi_init failed");
        goto error;
    }
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    /* Closed-loop users reuse their connection; keep one per stream cached. */
    long maxconn = (long)(opt->max_streams > 0 ? opt->max_streams : 64) + 16;
    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, maxconn);
    transport_raise_fd_limit((int)maxconn);
    return c;
error:
    curlt_free(c);
    return NULL;
}

void curlt_free(curlt_client *c)
{
    if (!c)
        return;
    while (c->book.active) {
        curlt_req *r = c->book.active->owner;
        curl_multi_remove_handle(c->multi, r->easy);
        reply_book_remove(&c->book, &r->reply);
        req_free(r);
    }
    if (c->multi)
        curl_multi_cleanup(c->multi);
    if (c->ep >= 0)
        close(c->ep);
    curl_slist_free_all(c->headers);
    free(c);
}

int curlt_post(curlt_client *c, const transport_request *req, char *err)
{
    curlt_req *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(err, "out of memory");
    r->c = c;
    reply_init(&r->reply, req, &c->stats);
    r->reply.owner = r;
    if (url_join(c->target, req->path, r->url, sizeof r->url) != 0) {
        req_free(r);
        return err_set(err, "URL too long");
    }
    if (!(r->body = malloc(req->body_len + 1)) || !(r->easy = curl_easy_init())) {
        req_free(r);
        return err_set(err, "out of memory");
    }
    memcpy(r->body, req->body, req->body_len);
    r->body[req->body_len] = '\0';
    r->body_len = req->body_len;
    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_URL, r->url);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->curl_err);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(c->connect_timeout_ns / CLOCK_NS_PER_MS));
    if (c->insecure) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    r->reply.t_start_ns = clock_now_ns();
    CURLMcode mc = curl_multi_add_handle(c->multi, e);
    if (mc != CURLM_OK) {
        req_free(r);
        return err_set(err, "curl_multi_add_handle: %s", curl_multi_strerror(mc));
    }
    reply_book_add(&c->book, &r->reply);
    return 0;
}

int curlt_run(curlt_client *c, int64_t until_ns, char *err)
{
    struct epoll_event evs[MAX_EPOLL_EVENTS];
    int running;
    for (;;) {
        int64_t now = clock_now_ns();
        if (now >= until_ns)
            return 0;
        int64_t wake = until_ns;
        if (c->timer_ns >= 0 && c->timer_ns < wake)
            wake = c->timer_ns;
        if (c->book.n_active > 0) {
            if (c->next_idle_check_ns == 0)
                c->next_idle_check_ns = now + IDLE_CHECK_NS;
            if (c->next_idle_check_ns < wake)
                wake = c->next_idle_check_ns;
        }
        int n = transport_epoll_wait(c->ep, evs, MAX_EPOLL_EVENTS, wake - now, &c->use_pwait2);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return err_set(err, "epoll_wait: %s", strerror(errno));
        }
        c->ready_ns = n > 0 ? clock_now_ns() : 0;
        for (int i = 0; i < n; i++) {
            int flags = 0;
            if (evs[i].events & EPOLLIN)
                flags |= CURL_CSELECT_IN;
            if (evs[i].events & EPOLLOUT)
                flags |= CURL_CSELECT_OUT;
            if (evs[i].events & (EPOLLERR | EPOLLHUP))
                flags |= CURL_CSELECT_ERR;
            curl_multi_socket_action(c->multi, evs[i].data.fd, flags, &running);
        }
        c->ready_ns = 0;
        now = clock_now_ns();
        if (c->timer_ns >= 0 && now >= c->timer_ns) {
            c->timer_ns = -1;
            curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        }
        process_dirty(c);
        collect_done(c);
        if (c->next_idle_check_ns && now >= c->next_idle_check_ns) {
            c->next_idle_check_ns = now + IDLE_CHECK_NS;
            check_idle(c, now);
        }
    }
}

static void cancel_end(void *ctx, reply *rep) { req_end(ctx, rep->owner, false, false); }

static void cancel_drop(void *ctx, reply *rep)
{
    curlt_client *c = ctx;
    curlt_req *r = rep->owner;
    curl_multi_remove_handle(c->multi, r->easy);
    reply_book_remove(&c->book, rep);
    req_free(r);
}

void curlt_cancel_all(curlt_client *c, const char *reason)
{
    reply_book_cancel_all(&c->book, reason, cancel_end, cancel_drop, c);
}

int curlt_active(const curlt_client *c) { return c->book.n_active; }

void curlt_get_stats(const curlt_client *c, transport_stats *out) { *out = c->stats; }

static int t_post(void *impl, const transport_request *req, char *err)
{
    return curlt_post(impl, req, err);
}
static int t_run(void *impl, int64_t until_ns, char *err) { return curlt_run(impl, until_ns, err); }
static void t_cancel(void *impl, const char *reason) { curlt_cancel_all(impl, reason); }
static int t_active(void *impl) { return curlt_active(impl); }

static void t_destroy(void *impl) { curlt_free(impl); }
static void t_stats(void *impl, transport_stats *out) { curlt_get_stats(impl, out); }

transport curlt_client_transport(curlt_client *c)
{
    return (transport){c, t_post, t_run, t_cancel, t_active, transport_clock_now,
                       t_destroy, t_stats};
}
