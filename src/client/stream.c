#include "client/stream.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "client/chunk.h"
#include "client/json_scan.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"

#define MAX_EPOLL_EVENTS 512
#define IDLE_CHECK_NS (100 * CLOCK_NS_PER_MS)
#define MAX_URL 1024

typedef struct stream_req {
    stream_client *c;
    CURL *easy;
    char *body;
    size_t body_len;
    char url[MAX_URL];
    stream_reply reply; /* status, headers, stamped bytes, SSE, tokens, the error; the
                           lists of c->book */
    char curl_err[CURL_ERROR_SIZE];
} stream_req;

struct stream_client {
    CURLM *multi;
    int ep;
    struct curl_slist *headers;
    char target[MAX_URL]; /* as given: each request's URL is stream_url_join's */
    int64_t idle_timeout_ns, connect_timeout_ns;
    bool insecure;
    int64_t timer_ns; /* curl's next timeout, -1 none */
    int64_t ready_ns; /* when epoll reported this wake-up's sockets readable; 0 outside it */
    int64_t next_idle_check_ns;
    stream_book book; /* the requests running, those with bytes to parse */
    stream_stats stats;
    bool use_pwait2;
};

static void global_init(void)
{
    static bool done;
    if (!done) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        done = true;
    }
}

int64_t stream_retry_after_ns(const char *value, int64_t now_unix_s)
{
    while (*value == ' ' || *value == '\t')
        value++;
    size_t len = strlen(value);
    while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t'))
        len--;
    if (len == 0 || len >= 64)
        return -1;
    char text[64];
    memcpy(text, value, len);
    text[len] = '\0';
    int64_t seconds = 0;
    if (strspn(text, "0123456789") == len) { /* delta-seconds */
        for (size_t i = 0; i < len && seconds < STREAM_RETRY_AFTER_LIMIT_S; i++)
            seconds = seconds * 10 + (text[i] - '0');
    } else { /* an HTTP-date: curl parses RFC 1123, RFC 850 and asctime dates */
        time_t when = curl_getdate(text, NULL);
        if (when == (time_t)-1)
            return -1;
        seconds = (int64_t)when > now_unix_s ? (int64_t)when - now_unix_s : 0;
    }
    if (seconds > STREAM_RETRY_AFTER_LIMIT_S)
        seconds = STREAM_RETRY_AFTER_LIMIT_S;
    return seconds * CLOCK_NS_PER_S;
}

void stream_base_url(const char *target, char *out, size_t size)
{
    snprintf(out, size, "%.*s", (int)strcspn(target, "?#"), target);
    size_t n = strlen(out);
    while (n > 0 && out[n - 1] == '/')
        out[--n] = '\0';
    if (n >= 3 && strcmp(out + n - 3, "/v1") == 0)
        out[n - 3] = '\0';
}

const char *stream_url_query(const char *target, size_t *len)
{
    const char *q = target + strcspn(target, "?#");
    if (*q != '?') {
        *len = 0;
        return NULL;
    }
    q++;
    *len = strcspn(q, "#");
    return q;
}

int stream_url_join(const char *target, const char *path, char *out, size_t size)
{
    stream_base_url(target, out, size);
    size_t query_len, n = strlen(out);
    const char *query = stream_url_query(target, &query_len);
    int w = query ? snprintf(out + n, size - n, "%s?%.*s", path, (int)query_len, query)
                  : snprintf(out + n, size - n, "%s", path);
    return w < 0 || (size_t)w >= size - n ? -1 : 0;
}

/* ---- one response's accounting (both transports) ------------------------------------ */

const char *stream_stamp_name(stream_stamp s)
{
    switch (s) {
    case STREAM_STAMP_KERNEL:
        return "kernel";
    case STREAM_STAMP_KERNEL_COALESCED:
        return "kernel_coalesced";
    default:
        return "user";
    }
}

void stream_reply_init(stream_reply *r, const stream_request *req, stream_stats *stats)
{
    memset(r, 0, sizeof *r);
    r->h = req->handlers;
    r->user = req->user;
    r->stats = stats;
    r->t_start_ns = clock_now_ns();
    chunk_counter_init(&r->count, req->max_tokens);
    sse_parser_init(&r->sse, 0);
}

void stream_reply_free(stream_reply *r)
{
    sse_parser_free(&r->sse);
    buf_free(&r->raw);
    free(r->segs);
    r->segs = NULL;
}

/* text as one line of UTF-8 into out[size]: control characters become spaces, bytes that
 * are not UTF-8 "\xNN"; cut before a character or an escape that does not fit. */
static void one_line(char *out, size_t size, const char *text)
{
    const unsigned char *p = (const unsigned char *)text, *end = p + strlen(text);
    size_t at = 0;
    while (p < end) {
        char escape[8];
        const char *piece = (const char *)p;
        size_t piece_len = 1, used = 1;
        if (*p < 0x20 || *p == 0x7f) {
            piece = " ";
        } else if (*p >= 0x80) {
            used = json_scan_utf8_length(p, end);
            piece_len = used;
            if (used == 0) {
                snprintf(escape, sizeof escape, "\\x%02x", *p);
                piece = escape;
                piece_len = strlen(escape);
                used = 1;
            }
        }
        if (at + piece_len >= size)
            break;
        memcpy(out + at, piece, piece_len);
        at += piece_len;
        p += used;
    }
    out[at] = '\0';
}

void stream_reply_fail(stream_reply *r, const char *fmt, ...)
{
    if (r->error[0])
        return;
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    one_line(r->error, sizeof r->error, text);
}

/* A Content-Encoding other than identity: the body is not the stream's bytes. */
static bool compressed(const stream_reply *r)
{
    return r->content_encoding[0] && strcasecmp(r->content_encoding, "identity") != 0;
}

bool stream_reply_refused(const stream_reply *r)
{
    /* 0: no status yet; 1xx: an interim answer, the final one still to come. */
    return r->http_status > 200 || compressed(r);
}

bool stream_reply_said(const stream_reply *r)
{
    return stream_reply_refused(r) &&
           (r->http_status < 400 || r->head_len >= sizeof r->head - 1);
}

int stream_reply_body(stream_reply *r, const char *bytes, size_t n, int64_t t_ns,
                      stream_stamp source)
{
    r->last_byte_ns = clock_now_ns(); /* for the idle timeout: when we read, not the stamp */
    r->stats->bytes += (int64_t)n;
    if (r->head_len < sizeof r->head - 1) {
        size_t k = n < sizeof r->head - 1 - r->head_len ? n : sizeof r->head - 1 - r->head_len;
        memcpy(r->head + r->head_len, bytes, k);
        r->head_len += k;
        r->head[r->head_len] = '\0';
    }
    if (stream_reply_refused(r) || n == 0)
        return 0; /* not a stream: kept in head */
    /* One segment per read; two reads with the same stamp (and source) are one segment:
     * the curl transport's reads of one wake-up, or one kernel skb read in two pieces. */
    stream_stamp_seg *last = r->n_segs > 0 ? &r->segs[r->n_segs - 1] : NULL;
    if (!(last && last->t_ns == t_ns && last->source == source) && r->n_segs == r->cap_segs) {
        int cap = r->cap_segs ? r->cap_segs * 2 : 8;
        stream_stamp_seg *grown = realloc(r->segs, (size_t)cap * sizeof *grown);
        if (!grown) {
            stream_reply_fail(r, "out of memory");
            return -1;
        }
        r->segs = grown;
        r->cap_segs = cap;
        last = r->n_segs > 0 ? &r->segs[r->n_segs - 1] : NULL;
    }
    if (buf_append(&r->raw, bytes, n) != 0) {
        stream_reply_fail(r, "out of memory");
        return -1;
    }
    if (last && last->t_ns == t_ns && last->source == source)
        last->end = r->raw.len;
    else
        r->segs[r->n_segs++] = (stream_stamp_seg){r->raw.len, t_ns, source};
    return 0;
}

/* The message inside an OpenAI-style error body, an HTML page's title (a proxy's error
 * page), else the body's first line; "(no message)" for an empty body. */
static void error_from_body(const char *body, char *out, size_t size)
{
    json_t *root = json_loads(body, 0, NULL);
    const char *msg = NULL;
    int len = -1;
    if (root) {
        json_t *e = json_object_get(root, "error");
        msg = json_is_object(e) ? json_string_value(json_object_get(e, "message"))
                                : json_string_value(e);
        if (!msg)
            msg = json_string_value(json_object_get(root, "message"));
        if (!msg)
            msg = json_string_value(json_object_get(root, "detail"));
    }
    const char *title = msg ? NULL : strcasestr(body, "<title>");
    if (title) {
        msg = title + strlen("<title>");
        const char *close = strcasestr(msg, "</title>");
        len = close ? (int)(close - msg) : -1;
    }
    if (!msg)
        msg = body + strspn(body, " \t\r\n");
    if (len < 0)
        len = (int)strcspn(msg, "\r\n");
    if (len > 0)
        snprintf(out, size, "%.*s", len, msg);
    else
        snprintf(out, size, "(no message)");
    json_decref(root);
}

/* Why a refused answer (stream_reply_refused) is no stream, in words. */
static void refusal(const stream_reply *r, char *out, size_t size)
{
    const int status = r->http_status;
    if (status <= 200) { /* a compressed body */
        snprintf(out, size, "the server compressed the stream (Content-Encoding: %.24s) although "
                            "we ask for identity; turn its compression off",
                 r->content_encoding);
    } else if (status >= 300 && status < 400 && r->location[0]) {
        /* The whole error is 128 bytes: a long URL keeps its start and its end. */
        const size_t room = 79, len = strlen(r->location);
        if (len <= room)
            snprintf(out, size, "HTTP %d: the target redirects to %.79s; use that URL", status,
                     r->location);
        else
            snprintf(out, size, "HTTP %d: the target redirects to %.56s...%s; use that URL",
                     status, r->location, r->location + len - (room - 59));
    } else if (status >= 300 && status < 400) {
        snprintf(out, size, "HTTP %d: a redirect without a Location", status);
    } else if (status < 300) {
        snprintf(out, size, "HTTP %d: not 200, so no stream was read", status);
    } else {
        char body[100];
        error_from_body(r->head, body, sizeof body);
        snprintf(out, size, "HTTP %d: %s", status, body);
    }
}

static void deliver(stream_reply *r, const stream_token *tok)
{
    r->stats->events++;
    r->stats->tokens += tok->n_tokens;
    r->stats->stamps[tok->stamp]++;
    if (r->h && r->h->on_token)
        r->h->on_token(r->h->ctx, r->user, tok);
}

bool stream_reply_parse(stream_reply *r)
{
    size_t off = 0;
    char why[ERR_LEN] = ""; /* the first failure in these bytes: malformed SSE, a bad chunk */
    for (int j = 0; j < r->n_segs && !r->error[0] && !why[0]; j++) {
        const stream_stamp_seg *seg = &r->segs[j];
        /* A token event is held back until the next event of the same read is known: when
         * one read completes more than one event, their kernel stamp is the last segment's
         * (the kernel coalesces what queued unread), so every token event of that read is
         * labelled "kernel, coalesced". */
        stream_token held;
        bool holding = false;
        int events_in_read = 0;
        while (off < seg->end && !why[0]) {
            size_t used = 0;
            sse_event ev;
            int rc = sse_parse(&r->sse, r->raw.data + off, seg->end - off, &used, &ev);
            off += used;
            if (rc == SSE_ERROR)
                snprintf(why, sizeof why, "malformed SSE: an event larger than the 1 MiB limit");
            if (rc != SSE_EVENT)
                continue;
            chunk_info chunk;
            const int k = chunk_counter_event(&r->count, &ev, &chunk, why);
            r->any_event = true;
            stream_stamp stamp = seg->source;
            if (++events_in_read > 1 && seg->source == STREAM_STAMP_KERNEL)
                stamp = held.stamp = STREAM_STAMP_KERNEL_COALESCED;
            if (k < 0)
                continue; /* why says it: the stream failed */
            if (chunk.finish_reason[0])
                snprintf(r->finish_reason, sizeof r->finish_reason, "%s", chunk.finish_reason);
            r->stopped |= chunk.stopped;
            if (k == 0)
                continue;
            if (holding)
                deliver(r, &held);
            held = (stream_token){seg->t_ns, k, chunk.emit_ns, chunk.step, stamp};
            holding = true;
        }
        if (holding)
            deliver(r, &held);
    }
    if (why[0])
        stream_reply_fail(r, "%s", why);
    buf_reset(&r->raw);
    r->n_segs = 0;
    return r->error[0] == '\0';
}

void stream_reply_judge(stream_reply *r)
{
    if (stream_reply_refused(r)) {
        char why[256];
        refusal(r, why, sizeof why);
        r->error[0] = '\0'; /* what the head said comes first: the transport's loss after it */
        stream_reply_fail(r, "%s", why);
    } else if (!r->count.done && !r->stopped) {
        if (!r->any_event && r->content_type[0] &&
            strncasecmp(r->content_type, "text/event-stream", 17) != 0)
            stream_reply_fail(r, "not an SSE stream (Content-Type: %.40s): %.60s",
                              r->content_type, r->head);
        else if (!r->any_event)
            stream_reply_fail(r, "not an SSE stream: %.80s", r->head);
        else
            stream_reply_fail(r, "%s", sse_parser_pending(&r->sse)
                                           ? "stream cut in the middle of an event"
                                           : "stream ended without [DONE]");
    }
}

void stream_reply_end(stream_reply *r, bool connect_failed, bool timed_out)
{
    if (stream_reply_refused(r))
        stream_reply_judge(r); /* its status, whatever ended it after the head */
    stream_end end = {0};
    end.http_status = r->http_status;
    end.t_end_ns = clock_now_ns();
    end.prompt_tokens = r->count.usage_prompt;
    end.completion_tokens = chunk_counter_completion(&r->count);
    end.retry_after_ns = (r->http_status == 429 || r->http_status == 503) && r->retry_after[0]
                             ? stream_retry_after_ns(r->retry_after, (int64_t)time(NULL))
                             : -1;
    end.protocol_violations = r->count.violations;
    memcpy(end.violations_by_kind, r->count.by_kind, sizeof end.violations_by_kind);
    end.violation = r->count.violations > 0 ? chunk_violation_text(r->count.first) : NULL;
    r->stats->protocol_violations += r->count.violations;
    snprintf(end.finish_reason, sizeof end.finish_reason, "%s", r->finish_reason);
    snprintf(end.error, sizeof end.error, "%s", r->error);
    end.connect_failed = connect_failed;
    end.timed_out = timed_out;
    r->stats->requests++;
    if (end.error[0])
        r->stats->errors++;
    if (r->h && r->h->on_end)
        r->h->on_end(r->h->ctx, r->user, &end);
}

void stream_raise_fd_limit(int connections)
{
    /* Thousands of streams need thousands of descriptors: raise the soft limit. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rlim_t want = (rlim_t)connections * 2 + 256;
        if (rl.rlim_cur < want && rl.rlim_cur != RLIM_INFINITY) {
            rl.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want) ? want : rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
    }
}

/* ---- the requests a transport runs --------------------------------------------------- */

void stream_book_add(stream_book *b, stream_reply *r)
{
    r->prev = NULL;
    r->next = b->active;
    if (b->active)
        b->active->prev = r;
    b->active = r;
    b->n_active++;
}

static void book_unmark(stream_book *b, stream_reply *r)
{
    if (!r->dirty)
        return;
    for (stream_reply **p = &b->dirty; *p; p = &(*p)->next_dirty)
        if (*p == r) {
            *p = r->next_dirty;
            break;
        }
    r->dirty = false;
    r->next_dirty = NULL;
}

void stream_book_remove(stream_book *b, stream_reply *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else if (b->active == r)
        b->active = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
    b->n_active--;
    book_unmark(b, r);
}

void stream_book_mark_dirty(stream_book *b, stream_reply *r)
{
    if (r->dirty)
        return;
    r->dirty = true;
    r->next_dirty = b->dirty;
    b->dirty = r;
}

bool stream_book_parse(stream_book *b, stream_reply *r)
{
    book_unmark(b, r);
    return stream_reply_parse(r);
}

stream_reply *stream_book_next_dirty(stream_book *b)
{
    stream_reply *r = b->dirty;
    if (r) {
        b->dirty = r->next_dirty;
        r->dirty = false;
        r->next_dirty = NULL;
    }
    return r;
}

void stream_book_cancel_all(stream_book *b, const char *reason,
                            void (*end)(void *ctx, stream_reply *r),
                            void (*drop)(void *ctx, stream_reply *r), void *ctx)
{
    /* A snapshot first: on_end may post new requests, which must not be cancelled here. */
    int n = b->n_active;
    if (n == 0)
        return;
    stream_reply **snap = malloc((size_t)n * sizeof *snap);
    if (!snap) { /* no memory for the list: end them without callbacks */
        for (int i = 0; i < n && b->active; i++)
            drop(ctx, b->active);
        return;
    }
    int k = 0;
    for (stream_reply *r = b->active; r && k < n; r = r->next)
        snap[k++] = r;
    for (int i = 0; i < k; i++) {
        stream_reply *r = snap[i];
        stream_book_parse(b, r);
        snprintf(r->finish_reason, sizeof r->finish_reason, "abort");
        if (reason && reason[0])
            stream_reply_fail(r, "%s", reason);
        end(ctx, r);
    }
    free(snap);
}

int stream_epoll_wait(int ep, struct epoll_event *evs, int max_events, int64_t wait_ns,
                      bool *use_pwait2)
{
    if (wait_ns < 0)
        wait_ns = 0;
    if (*use_pwait2) {
        /* ns resolution: an injection planned at t is sent at t, not at the next ms. */
        struct timespec ts = {wait_ns / CLOCK_NS_PER_S, wait_ns % CLOCK_NS_PER_S};
        int n = epoll_pwait2(ep, evs, max_events, &ts, NULL);
        if (n >= 0 || errno != ENOSYS)
            return n;
        *use_pwait2 = false;
    }
    return epoll_wait(ep, evs, max_events, (int)((wait_ns + CLOCK_NS_PER_MS - 1) / CLOCK_NS_PER_MS));
}

static struct curl_slist *build_headers(const stream_options *opt, char *err)
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
    stream_client *c = userp;
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
    stream_client *c = userp;
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
    stream_req *r = userdata;
    int64_t t = r->c->ready_ns > 0 ? r->c->ready_ns : clock_now_ns();
    size_t n = size * nmemb;
    if (r->reply.http_status == 0) {
        long code = 0;
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
        r->reply.http_status = (int)code;
    }
    if (stream_reply_body(&r->reply, ptr, n, t, STREAM_STAMP_USER) != 0 ||
        stream_reply_said(&r->reply))
        return 0; /* curl treats a short write as an error: the transfer ends here */
    stream_book_mark_dirty(&r->c->book, &r->reply);
    return n;
}

/* Response headers: those a stream_reply keeps (Retry-After, Location, Content-Encoding,
 * Content-Type). A new status line (a redirect, a 100 Continue) starts over. */
static size_t on_header(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    stream_req *r = userdata;
    stream_reply *reply = &r->reply;
    size_t n = size * nmemb;
    const struct {
        const char *name; /* with its colon */
        char *value;
        size_t room;
    } kept[] = {
        {"retry-after:", reply->retry_after, sizeof reply->retry_after},
        {"location:", reply->location, sizeof reply->location},
        {"content-encoding:", reply->content_encoding, sizeof reply->content_encoding},
        {"content-type:", reply->content_type, sizeof reply->content_type},
    };
    const size_t n_kept = sizeof kept / sizeof kept[0];
    if (n >= 5 && memcmp(ptr, "HTTP/", 5) == 0) {
        for (size_t i = 0; i < n_kept; i++)
            kept[i].value[0] = '\0';
        const char *code = memchr(ptr, ' ', n);
        reply->http_status = code ? atoi(code + 1) : 0;
        return n;
    }
    /* The head's end: a final answer that is refused and says all in its head ends here
     * (curl returns CURLE_WRITE_ERROR for the short count), before any of its body. */
    if ((n == 2 && ptr[0] == '\r') || (n == 1 && ptr[0] == '\n'))
        return stream_reply_said(reply) ? 0 : n;
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

static void req_free(stream_req *r)
{
    if (r->easy)
        curl_easy_cleanup(r->easy);
    stream_reply_free(&r->reply);
    free(r->body);
    free(r);
}

/* Take r out of curl, tell the owner, free it. */
static void req_end(stream_client *c, stream_req *r, bool connect_failed, bool timed_out)
{
    curl_multi_remove_handle(c->multi, r->easy);
    stream_book_remove(&c->book, &r->reply);
    stream_reply_end(&r->reply, connect_failed, timed_out);
    req_free(r);
}

static void process_dirty(stream_client *c)
{
    stream_reply *reply;
    while ((reply = stream_book_next_dirty(&c->book)))
        if (!stream_reply_parse(reply))
            req_end(c, reply->owner, false, false);
}

static void collect_done(stream_client *c)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(c->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        char *priv = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
        stream_req *r = (stream_req *)priv;
        stream_reply *reply = &r->reply;
        CURLcode rc = msg->data.result;
        /* Streams have no overall timeout, only a connect timeout: a timeout here means
         * the connection never came up. */
        bool connect_failed = rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
                              (rc == CURLE_OPERATION_TIMEDOUT && reply->head_len == 0);
        stream_book_parse(&c->book, reply); /* bytes of the last read */
        if (reply->http_status == 0) {
            long code = 0;
            curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
            reply->http_status = (int)code;
        }
        if (connect_failed) {
            long os_errno = 0;
            curl_easy_getinfo(r->easy, CURLINFO_OS_ERRNO, &os_errno);
            if (os_errno)
                stream_reply_fail(reply, "cannot connect: %s", strerror((int)os_errno));
            else
                stream_reply_fail(reply, "cannot connect: %.100s",
                                  r->curl_err[0] ? r->curl_err : curl_easy_strerror(rc));
        } else if (rc == CURLE_OUT_OF_MEMORY && !r->curl_err[0] && reply->head_len == 0) {
            /* What libcurl says when a header line outgrows its buffer (100 KiB). */
            stream_reply_fail(reply, "connection lost: libcurl refused the response head (a "
                                     "header line past 100 KiB, or out of memory)");
        } else if (rc != CURLE_OK) {
            stream_reply_fail(reply, "connection lost: %.100s",
                              r->curl_err[0] ? r->curl_err : curl_easy_strerror(rc));
        } else {
            stream_reply_judge(reply);
        }
        req_end(c, r, connect_failed, false);
    }
}

static void check_idle(stream_client *c, int64_t now)
{
    stream_reply *reply = c->book.active;
    while (reply) {
        stream_reply *next = reply->next;
        stream_req *r = reply->owner;
        int64_t since = r->reply.last_byte_ns ? r->reply.last_byte_ns : r->reply.t_start_ns;
        if (now - since > c->idle_timeout_ns) {
            char why[64];
            snprintf(why, sizeof why, "%.1f s", (double)c->idle_timeout_ns / 1e9);
            stream_reply_fail(&r->reply, "timeout: no bytes for %s", why);
            stream_book_parse(&c->book, &r->reply);
            req_end(c, r, false, true);
        }
        reply = next;
    }
}

/* ---- public API -------------------------------------------------------------------- */

stream_client *stream_create(const stream_options *opt, char *err)
{
    global_init();
    stream_client *c = calloc(1, sizeof *c);
    if (!c) {
        err_set(err, "out of memory");
        return NULL;
    }
    c->ep = -1;
    snprintf(c->target, sizeof c->target, "%s", opt->base_url);
    c->idle_timeout_ns = opt->idle_timeout_ns > 0 ? opt->idle_timeout_ns : 30 * CLOCK_NS_PER_S;
    c->connect_timeout_ns = opt->connect_timeout_ns > 0 ? opt->connect_timeout_ns : 5 * CLOCK_NS_PER_S;
    c->insecure = opt->insecure;
    c->timer_ns = -1;
    c->use_pwait2 = true;
    if (!(c->headers = build_headers(opt, err)))
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
    stream_raise_fd_limit((int)maxconn);
    return c;
error:
    stream_free(c);
    return NULL;
}

void stream_free(stream_client *c)
{
    if (!c)
        return;
    while (c->book.active) {
        stream_req *r = c->book.active->owner;
        curl_multi_remove_handle(c->multi, r->easy);
        stream_book_remove(&c->book, &r->reply);
        req_free(r);
    }
    if (c->multi)
        curl_multi_cleanup(c->multi);
    if (c->ep >= 0)
        close(c->ep);
    curl_slist_free_all(c->headers);
    free(c);
}

int stream_post(stream_client *c, const stream_request *req, char *err)
{
    stream_req *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(err, "out of memory");
    r->c = c;
    stream_reply_init(&r->reply, req, &c->stats);
    r->reply.owner = r;
    if (stream_url_join(c->target, req->path, r->url, sizeof r->url) != 0) {
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
    stream_book_add(&c->book, &r->reply);
    return 0;
}

int stream_run(stream_client *c, int64_t until_ns, char *err)
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
        int n = stream_epoll_wait(c->ep, evs, MAX_EPOLL_EVENTS, wake - now, &c->use_pwait2);
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

static void cancel_end(void *ctx, stream_reply *reply) { req_end(ctx, reply->owner, false, false); }

static void cancel_drop(void *ctx, stream_reply *reply)
{
    stream_client *c = ctx;
    stream_req *r = reply->owner;
    curl_multi_remove_handle(c->multi, r->easy);
    stream_book_remove(&c->book, reply);
    req_free(r);
}

void stream_cancel_all(stream_client *c, const char *reason)
{
    stream_book_cancel_all(&c->book, reason, cancel_end, cancel_drop, c);
}

int stream_active(const stream_client *c) { return c->book.n_active; }

void stream_get_stats(const stream_client *c, stream_stats *out) { *out = c->stats; }

static int t_post(void *impl, const stream_request *req, char *err)
{
    return stream_post(impl, req, err);
}
static int t_run(void *impl, int64_t until_ns, char *err) { return stream_run(impl, until_ns, err); }
static void t_cancel(void *impl, const char *reason) { stream_cancel_all(impl, reason); }
static int t_active(void *impl) { return stream_active(impl); }
static int64_t t_now(void *impl)
{
    (void)impl;
    return clock_now_ns();
}

static void t_destroy(void *impl) { stream_free(impl); }
static void t_stats(void *impl, stream_stats *out) { stream_get_stats(impl, out); }

stream_transport stream_client_transport(stream_client *c)
{
    return (stream_transport){c, t_post, t_run, t_cancel, t_active, t_now, t_destroy, t_stats};
}

/* ---- blocking helper --------------------------------------------------------------- */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    buf *reply = userdata;
    size_t n = size * nmemb;
    if (reply->len + n + 1 > (size_t)16 << 20)
        return 0; /* curl treats a short write as an error */ /* nothing we ask for is that large */
    if (buf_append(reply, ptr, n) != 0)
        return 0; /* curl treats a short write as an error */
    return n;
}

int stream_http(const stream_options *opt, const char *method, const char *path, const char *body,
                int64_t timeout_ns, int *status, char **body_out, char *err)
{
    global_init();
    char url[MAX_URL + 256];
    if (stream_url_join(opt->base_url, path, url, sizeof url) != 0)
        return err_set(err, "URL too long");
    struct curl_slist *headers = build_headers(opt, err);
    if (!headers)
        return -1;
    CURL *e = curl_easy_init();
    if (!e) {
        curl_slist_free_all(headers);
        return err_set(err, "curl_easy_init failed");
    }
    buf reply = {0};
    char curl_err[CURL_ERROR_SIZE] = "";
    int64_t connect_ns = opt->connect_timeout_ns > 0 ? opt->connect_timeout_ns : 5 * CLOCK_NS_PER_S;
    if (connect_ns > timeout_ns)
        connect_ns = timeout_ns;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &reply);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(timeout_ns / CLOCK_NS_PER_MS));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(connect_ns / CLOCK_NS_PER_MS));
    if (opt->insecure) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body ? body : "");
    }
    CURLcode rc = curl_easy_perform(e);
    long code = 0, os_errno = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(e, CURLINFO_OS_ERRNO, &os_errno);
    curl_easy_cleanup(e);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) {
        buf_free(&reply);
        /* curl says "Couldn't connect"; the OS says why (refused, unreachable ...). */
        return err_set(err, "%s %s: %s%s%s%s", method, url, os_errno ? strerror((int)os_errno) : "",
                       os_errno ? " (" : "", curl_err[0] ? curl_err : curl_easy_strerror(rc),
                       os_errno ? ")" : "");
    }
    *status = (int)code;
    if (!body_out) {
        buf_free(&reply);
        return 0;
    }
    *body_out = buf_detach(&reply);
    return *body_out ? 0 : err_set(err, "%s %s: out of memory", method, url);
}
