#include "client/reply.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "client/json_scan.h"
#include "common/clock.h"
#include "common/err.h"

void reply_init(reply *r, const transport_request *req, transport_stats *stats)
{
    memset(r, 0, sizeof *r);
    r->h = req->handlers;
    r->user = req->user;
    r->stats = stats;
    r->t_start_ns = clock_now_ns();
    chunk_counter_init(&r->count, req->max_tokens);
    sse_parser_init(&r->sse, 0);
}

void reply_free(reply *r)
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

void reply_fail(reply *r, const char *fmt, ...)
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
static bool compressed(const reply *r)
{
    return r->content_encoding[0] && strcasecmp(r->content_encoding, "identity") != 0;
}

bool reply_refused(const reply *r)
{
    /* 0: no status yet; 1xx: an interim answer, the final one still to come. */
    return r->http_status > 200 || compressed(r);
}

bool reply_said(const reply *r)
{
    return reply_refused(r) && (r->http_status < 400 || r->head_len >= sizeof r->head - 1);
}

int reply_body(reply *r, const char *bytes, size_t n, int64_t t_ns, transport_stamp source)
{
    r->last_byte_ns = clock_now_ns(); /* for the idle timeout: when we read, not the stamp */
    r->stats->bytes += (int64_t)n;
    if (r->head_len < sizeof r->head - 1) {
        size_t k = n < sizeof r->head - 1 - r->head_len ? n : sizeof r->head - 1 - r->head_len;
        memcpy(r->head + r->head_len, bytes, k);
        r->head_len += k;
        r->head[r->head_len] = '\0';
    }
    if (reply_refused(r) || n == 0)
        return 0; /* not a stream: kept in head */
    /* One segment per read; two reads with the same stamp (and source) are one segment:
     * the curl transport's reads of one wake-up, or one kernel skb read in two pieces. */
    reply_seg *last = r->n_segs > 0 ? &r->segs[r->n_segs - 1] : NULL;
    if (!(last && last->t_ns == t_ns && last->source == source) && r->n_segs == r->cap_segs) {
        int cap = r->cap_segs ? r->cap_segs * 2 : 8;
        reply_seg *grown = realloc(r->segs, (size_t)cap * sizeof *grown);
        if (!grown) {
            reply_fail(r, "out of memory");
            return -1;
        }
        r->segs = grown;
        r->cap_segs = cap;
        last = r->n_segs > 0 ? &r->segs[r->n_segs - 1] : NULL;
    }
    if (buf_append(&r->raw, bytes, n) != 0) {
        reply_fail(r, "out of memory");
        return -1;
    }
    if (last && last->t_ns == t_ns && last->source == source)
        last->end = r->raw.len;
    else
        r->segs[r->n_segs++] = (reply_seg){r->raw.len, t_ns, source};
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

/* Why a refused answer (reply_refused) is no stream, in words. */
static void refusal(const reply *r, char *out, size_t size)
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

static void deliver(reply *r, const transport_token *tok)
{
    r->stats->events++;
    r->stats->tokens += tok->n_tokens;
    r->stats->stamps[tok->stamp]++;
    if (r->h && r->h->on_token)
        r->h->on_token(r->h->ctx, r->user, tok);
}

bool reply_parse(reply *r)
{
    size_t off = 0;
    char why[ERR_LEN] = ""; /* the first failure in these bytes: malformed SSE, a bad chunk */
    for (int j = 0; j < r->n_segs && !r->error[0] && !why[0]; j++) {
        const reply_seg *seg = &r->segs[j];
        /* A token event is held back until the next event of the same read is known: when
         * one read completes more than one event, their kernel stamp is the last segment's
         * (the kernel coalesces what queued unread), so every token event of that read is
         * labelled "kernel, coalesced". */
        transport_token held;
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
            transport_stamp stamp = seg->source;
            if (++events_in_read > 1 && seg->source == TRANSPORT_STAMP_KERNEL)
                stamp = held.stamp = TRANSPORT_STAMP_KERNEL_COALESCED;
            if (k < 0)
                continue; /* why says it: the stream failed */
            if (chunk.finish_reason[0])
                snprintf(r->finish_reason, sizeof r->finish_reason, "%s", chunk.finish_reason);
            r->stopped |= chunk.stopped;
            if (k == 0)
                continue;
            if (holding)
                deliver(r, &held);
            held = (transport_token){seg->t_ns, k, chunk.emit_ns, chunk.step, stamp};
            holding = true;
        }
        if (holding)
            deliver(r, &held);
    }
    if (why[0])
        reply_fail(r, "%s", why);
    buf_reset(&r->raw);
    r->n_segs = 0;
    return r->error[0] == '\0';
}

void reply_judge(reply *r)
{
    if (reply_refused(r)) {
        char why[256];
        refusal(r, why, sizeof why);
        r->error[0] = '\0'; /* what the head said comes first: the transport's loss after it */
        reply_fail(r, "%s", why);
    } else if (!r->count.done && !r->stopped) {
        if (!r->any_event && r->content_type[0] &&
            strncasecmp(r->content_type, "text/event-stream", 17) != 0)
            reply_fail(r, "not an SSE stream (Content-Type: %.40s): %.60s", r->content_type,
                       r->head);
        else if (!r->any_event)
            reply_fail(r, "not an SSE stream: %.80s", r->head);
        else
            reply_fail(r, "%s",
                       sse_parser_pending(&r->sse) ? "stream cut in the middle of an event"
                                                   : "stream ended without [DONE]");
    }
}

void reply_end(reply *r, bool connect_failed, bool timed_out)
{
    if (reply_refused(r))
        reply_judge(r); /* its status, whatever ended it after the head */
    transport_end end = {0};
    end.http_status = r->http_status;
    end.t_end_ns = clock_now_ns();
    end.prompt_tokens = r->count.usage_prompt;
    end.completion_tokens = chunk_counter_completion(&r->count);
    end.retry_after_ns = (r->http_status == 429 || r->http_status == 503) && r->retry_after[0]
                             ? reply_retry_after_ns(r->retry_after, (int64_t)time(NULL))
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

/* ---- the requests a transport runs --------------------------------------------------- */

void reply_book_add(reply_book *b, reply *r)
{
    r->prev = NULL;
    r->next = b->active;
    if (b->active)
        b->active->prev = r;
    b->active = r;
    b->n_active++;
}

static void book_unmark(reply_book *b, reply *r)
{
    if (!r->dirty)
        return;
    for (reply **p = &b->dirty; *p; p = &(*p)->next_dirty)
        if (*p == r) {
            *p = r->next_dirty;
            break;
        }
    r->dirty = false;
    r->next_dirty = NULL;
}

void reply_book_remove(reply_book *b, reply *r)
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

void reply_book_mark_dirty(reply_book *b, reply *r)
{
    if (r->dirty)
        return;
    r->dirty = true;
    r->next_dirty = b->dirty;
    b->dirty = r;
}

bool reply_book_parse(reply_book *b, reply *r)
{
    book_unmark(b, r);
    return reply_parse(r);
}

reply *reply_book_next_dirty(reply_book *b)
{
    reply *r = b->dirty;
    if (r) {
        b->dirty = r->next_dirty;
        r->dirty = false;
        r->next_dirty = NULL;
    }
    return r;
}

void reply_book_cancel_all(reply_book *b, const char *reason, void (*end)(void *ctx, reply *r),
                           void (*drop)(void *ctx, reply *r), void *ctx)
{
    /* A snapshot first: on_end may post new requests, which must not be cancelled here. */
    int n = b->n_active;
    if (n == 0)
        return;
    reply **snap = malloc((size_t)n * sizeof *snap);
    if (!snap) { /* no memory for the list: end them without callbacks */
        for (int i = 0; i < n && b->active; i++)
            drop(ctx, b->active);
        return;
    }
    int k = 0;
    for (reply *r = b->active; r && k < n; r = r->next)
        snap[k++] = r;
    for (int i = 0; i < k; i++) {
        reply *r = snap[i];
        reply_book_parse(b, r);
        snprintf(r->finish_reason, sizeof r->finish_reason, "abort");
        if (reason && reason[0])
            reply_fail(r, "%s", reason);
        end(ctx, r);
    }
    free(snap);
}

/* ---- Retry-After ----------------------------------------------------------------------- */

int64_t reply_retry_after_ns(const char *value, int64_t now_unix_s)
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
        for (size_t i = 0; i < len && seconds < REPLY_RETRY_AFTER_LIMIT_S; i++)
            seconds = seconds * 10 + (text[i] - '0');
    } else { /* an HTTP-date: curl parses RFC 1123, RFC 850 and asctime dates */
        time_t when = curl_getdate(text, NULL);
        if (when == (time_t)-1)
            return -1;
        seconds = (int64_t)when > now_unix_s ? (int64_t)when - now_unix_s : 0;
    }
    if (seconds > REPLY_RETRY_AFTER_LIMIT_S)
        seconds = REPLY_RETRY_AFTER_LIMIT_S;
    return seconds * CLOCK_NS_PER_S;
}
