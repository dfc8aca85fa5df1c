/* reply — one response's accounting, the same for both transports (transport.h).
 *
 * A transport hands each request's response to its reply: the status, the headers it
 * parsed, and body bytes with the stamp of the read that carried them. The reply splits
 * events (sse.h), decodes and counts them (chunk.h), delivers on_token, and at the end
 * judges the response (a status other than 200, a compressed body, not SSE, cut mid-event,
 * no [DONE]) and delivers on_end. Only a 200 whose body is not compressed is read as a
 * stream (we send Accept-Encoding: identity): any other status is an error naming it (a
 * redirect also names its Location), a Content-Encoding other than identity one naming
 * that. The book below keeps the requests a transport runs. */
#ifndef STALLSCOPE_REPLY_H
#define STALLSCOPE_REPLY_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client/chunk.h"
#include "client/sse.h"
#include "client/transport.h"
#include "common/buf.h"

typedef struct reply_seg {
    size_t end;         /* raw[0, end) was read at or before t_ns */
    int64_t t_ns;
    transport_stamp source;
} reply_seg;

typedef struct reply {
    const transport_handlers *h;
    void *user;
    transport_stats *stats;    /* the transport's counters */
    int http_status;           /* 0 until the status line came */
    /* The final response's fields, "" without them (cut to the size) */
    char retry_after[64];
    char location[256];
    char content_encoding[64];
    char content_type[64];
    char head[512];            /* the body's first bytes, for error messages */
    size_t head_len;
    int64_t t_start_ns, last_byte_ns;
    /* Body bytes read but not parsed yet, with the time each read happened. */
    buf raw;
    reply_seg *segs;
    int n_segs, cap_segs;
    sse_parser sse;
    chunk_counter count;       /* tokens delivered, usage, [DONE], violations */
    char finish_reason[16];
    bool stopped, any_event;
    char error[128];           /* the first failure, "" none */
    /* The transport's bookkeeping (reply_book): */
    void *owner;               /* the transport's request that holds this reply */
    struct reply *prev, *next; /* every request running */
    bool dirty;                /* bytes appended since the last parse */
    struct reply *next_dirty;
} reply;

void reply_init(reply *r, const transport_request *req, transport_stats *stats);
void reply_free(reply *r);
/* Body bytes read at t_ns (stamped by source). The body of a refused answer
 * (reply_refused) is only kept in head, for the message. 0, or -1 when memory ran
 * out (the request is then failed). */
int reply_body(reply *r, const char *bytes, size_t n, int64_t t_ns, transport_stamp source);
/* Split and decode what was appended; on_token for each token event. Returns false when the
 * response failed (malformed SSE, an error event): the transport then ends it. */
bool reply_parse(reply *r);
/* The first failure is the one reported. The text is kept as one line of UTF-8: control
 * characters become spaces and bytes that are not UTF-8 "\xNN" (a hostile body quoted in
 * a message must not put raw bytes into requests.csv). */
void reply_fail(reply *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The answer is not a stream to read: its final status (known: not 1xx) is not 200, or its
 * body is compressed (a Content-Encoding other than identity). */
bool reply_refused(const reply *r);
/* A refused answer whose words are known: its head says all (a status other than 200 below
 * 400, a compressed body) or its body has filled head (an error status's message). The
 * transport ends it now, its body unread: a 202 may stream a whole answer, an error page
 * may never end. */
bool reply_said(const reply *r);
/* Say what was wrong with the response, if anything: a refused answer's status (with the
 * server's message, or the redirect's Location) or its encoding, which replace any failure
 * the transport met after the head; else not an SSE stream, a stream cut in the middle of
 * an event or without [DONE]. Transports call it when the response ended without a
 * transport error (reply_end calls it for a refused answer however it ended). */
void reply_judge(reply *r);
/* Fill transport_end, count it, call on_end. The transport frees r after. */
void reply_end(reply *r, bool connect_failed, bool timed_out);

/* The requests a transport runs (intrusive lists through their replies): all of them, and
 * those that read bytes not parsed yet. */
typedef struct reply_book {
    reply *active;
    int n_active;
    reply *dirty;
} reply_book;

void reply_book_add(reply_book *b, reply *r);
/* Off both lists (the request is ending). */
void reply_book_remove(reply_book *b, reply *r);
void reply_book_mark_dirty(reply_book *b, reply *r);
/* Parse what r read, if anything, and take it off the dirty list. False when r failed. */
bool reply_book_parse(reply_book *b, reply *r);
/* The next request with bytes to parse (taken off the dirty list), NULL when none. */
reply *reply_book_next_dirty(reply_book *b);
/* End every request running now (not those that end() posts): each parsed, finish_reason
 * "abort", error = reason ("" for a planned stop), then end(ctx, r), which delivers on_end
 * and frees it. Without memory for the list, drop(ctx, r) frees them without callbacks. */
void reply_book_cancel_all(reply_book *b, const char *reason, void (*end)(void *ctx, reply *r),
                           void (*drop)(void *ctx, reply *r), void *ctx);

/* A Retry-After header's value (RFC 9110 10.2.3): delta-seconds ("120") or an HTTP-date
 * ("Wed, 21 Oct 2015 07:28:00 GMT", compared with now_unix_s; a date in the past is 0).
 * Returns the wait in ns, at most REPLY_RETRY_AFTER_LIMIT_S seconds, or -1 when the value
 * is neither. */
#define REPLY_RETRY_AFTER_LIMIT_S 1000000000LL /* only keeps the ns in range */
int64_t reply_retry_after_ns(const char *value, int64_t now_unix_s);

#endif
