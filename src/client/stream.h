/* stream — many concurrent HTTP/SSE requests in ONE thread, behind stream_transport, a
 * table of function pointers (wrk's habit) the load generator talks to, so tests can swap
 * the network for a script. Two transports fill it (stream_transport_create):
 *   - raw (src/client/raw.c, the default): our own HTTP/1.1 client on sockets it owns,
 *     each token stamped with the kernel's receive time of the bytes that carried it;
 *   - curl (this file): libcurl's multi interface driven by our own epoll loop
 *     (curl_multi_socket_action: O(ready sockets) per wake-up), for what the raw transport
 *     does not do (proxies, HTTP/2, other auth); its stamps are taken in user space when
 *     curl hands over the bytes it just read.
 * Both stamp first and parse later: bytes are appended with their stamp to the request's
 * pending buffer, and SSE splitting and JSON decoding run after the whole batch of ready
 * sockets has been read, so one stream's parsing never delays another stream's stamp.
 * An event's time is the stamp of the read that delivered its last byte. The response
 * accounting both share (stamped bytes -> events -> tokens, errors, the end) is
 * stream_reply, below. */
#ifndef STALLSCOPE_STREAM_H
#define STALLSCOPE_STREAM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client/chunk.h"
#include "common/buf.h"

/* Where an event's time came from (docs/client.md, "Time"). */
typedef enum stream_stamp {
    STREAM_STAMP_USER = 0,         /* clock_now_ns() at the read, before parsing: the kernel
                                      gave no stamp (the curl transport, or no cmsg) */
    STREAM_STAMP_KERNEL,           /* the kernel's receive time of the bytes (SO_TIMESTAMPNS),
                                      mapped to CLOCK_MONOTONIC */
    STREAM_STAMP_KERNEL_COALESCED, /* a kernel stamp, but more than one event completed in
                                      the read that carried it: the kernel reports the last
                                      segment's time for all, so it only bounds this one */
    STREAM_STAMP_KINDS
} stream_stamp;

/* "user", "kernel", "kernel_coalesced" (the keys of fidelity.json's and summary.json's
 * "stamps"). */
const char *stream_stamp_name(stream_stamp s);

typedef struct stream_token {
    int64_t t_ns;    /* CLOCK_MONOTONIC of the read that completed the event */
    int n_tokens;    /* tokens this event carried (usage deltas), >= 1 */
    int64_t emit_ns; /* the server's emit time (stallscope extension), -1 when absent */
    int64_t step;    /* the server's engine step (stallscope extension), -1 when absent */
    stream_stamp stamp; /* where t_ns came from */
} stream_token;

typedef struct stream_end {
    int http_status;           /* 0 when no response came */
    int64_t t_end_ns;
    int64_t prompt_tokens;     /* server-reported (usage), -1 when unknown */
    int64_t completion_tokens; /* server-reported when given, else counted */
    char finish_reason[16];    /* "length", "stop", "abort" (cancelled by us), "" */
    char error[128];           /* "" when the answer ended normally */
    bool connect_failed;       /* never reached the server: refused, unreachable */
    bool timed_out;            /* no bytes for the idle timeout */
    /* A 429 or 503 with a Retry-After header: how long the server asked us to wait (ns,
     * from the end of this request); -1 without one (or another status). Not capped. */
    int64_t retry_after_ns;
    /* What the server sent that cannot be true, ignored and counted (chunk_violation): events
     * after [DONE], impossible or backward counts, tokens past max_tokens, a usage above the
     * tokens streamed. */
    int64_t protocol_violations;
    int64_t violations_by_kind[CHUNK_VIOLATION_KINDS]; /* the same by kind */
    const char *violation;     /* the first one in words, NULL without */
} stream_end;

typedef struct stream_handlers {
    void *ctx;
    /* One token event. Called outside curl's callbacks: may post new requests. */
    void (*on_token)(void *ctx, void *user, const stream_token *tok);
    /* The request is over (fine, failed or cancelled); user is not referenced again. */
    void (*on_end)(void *ctx, void *user, const stream_end *end);
} stream_handlers;

struct stream_stats;

typedef struct stream_request {
    const char *path; /* "/v1/completions", appended to the base URL */
    const char *body; /* JSON, copied */
    size_t body_len;
    const stream_handlers *handlers; /* borrowed; must outlive the request */
    void *user;
    /* The body's max_tokens: no stream is counted more tokens than it asked for (a usage
     * count past it is a protocol violation). 0: unknown, unbounded. */
    int64_t max_tokens;
} stream_request;

/* The transport as the driver sees it. Every function returns 0 (OK) or -1 (ERROR) with
 * err filled; run() pumps I/O until until_ns (CLOCK_MONOTONIC) and delivers callbacks. */
typedef struct stream_transport {
    void *impl;
    int (*post)(void *impl, const stream_request *req, char *err);
    int (*run)(void *impl, int64_t until_ns, char *err);
    /* End every request now: on_end with finish_reason "abort" and error = reason ("" for
     * a planned stop, e.g. the end of the run). */
    void (*cancel_all)(void *impl, const char *reason);
    int (*active)(void *impl);
    int64_t (*now)(void *impl);
    /* Free the transport (aborting what runs, no callbacks). NULL for borrowed ones. */
    void (*destroy)(void *impl);
    /* Counters since creation (stream_stats); NULL where not kept. */
    void (*stats)(void *impl, struct stream_stats *out);
} stream_transport;

typedef struct stream_options {
    const char *base_url;       /* "http://127.0.0.1:8000" or https:// */
    const char *api_key;        /* Authorization: Bearer; NULL or "" for none */
    const char *const *headers; /* extra "Name: value" lines */
    int n_headers;
    int64_t idle_timeout_ns;    /* no bytes for this long -> the request fails (0: 30 s) */
    int64_t connect_timeout_ns; /* 0: 5 s */
    int max_streams;            /* expected concurrency: sizes the connection cache and fd limit */
    bool insecure;              /* skip TLS verification (self-signed test servers) */
} stream_options;

/* Which transport. AUTO: raw for http:// and https:// unless a proxy variable applies to
 * the target (http_proxy / https_proxy / all_proxy, upper-case too except HTTP_PROXY, not
 * excluded by no_proxy), then curl, which honours them. */
typedef enum stream_transport_kind {
    STREAM_TRANSPORT_AUTO = 0,
    STREAM_TRANSPORT_RAW,
    STREAM_TRANSPORT_CURL
} stream_transport_kind;

/* "auto" | "raw" | "curl". 0, or -1 with err. */
int stream_transport_parse(const char *text, stream_transport_kind *out, char *err);
const char *stream_transport_name(stream_transport_kind kind);
/* What AUTO means for this target, reading the environment's proxy variables; RAW and
 * CURL are returned as they are. */
stream_transport_kind stream_transport_resolve(stream_transport_kind kind, const char *base_url);
/* The factory: the transport `kind` (AUTO resolved as above) for opt. Free it with
 * out->destroy(out->impl). 0, or -1 with err (a target the raw transport cannot use: an
 * unknown scheme, a name that does not resolve, no TLS in this build). */
int stream_transport_create(stream_transport_kind kind, const stream_options *opt,
                            stream_transport *out, char *err);

typedef struct stream_client stream_client;

stream_client *stream_create(const stream_options *opt, char *err);
/* Abort whatever is running (no callbacks) and free everything. */
void stream_free(stream_client *c);
stream_transport stream_client_transport(stream_client *c);

int stream_post(stream_client *c, const stream_request *req, char *err);
int stream_run(stream_client *c, int64_t until_ns, char *err);
void stream_cancel_all(stream_client *c, const char *reason);
int stream_active(const stream_client *c);

/* Counters since creation, for progress lines and benchmarks. */
typedef struct stream_stats {
    int64_t stamps[STREAM_STAMP_KINDS]; /* token events by the source of their time */
    /* Reads of the raw transport that carried no usable kernel stamp (none, or one more
     * than 1 ms after the read: a clock step between the two, or the kernel reusing the
     * sender's time), whose events fell back to STREAM_STAMP_USER. */
    int64_t kernel_stamps_refused;
    int64_t events;   /* token events delivered */
    int64_t tokens;   /* tokens in them */
    int64_t bytes;    /* response bytes read */
    int64_t requests; /* requests ended */
    int64_t errors;   /* of which failed */
    int64_t protocol_violations; /* server events ignored (stream_end.protocol_violations) */
} stream_stats;
void stream_get_stats(const stream_client *c, stream_stats *out);

/* A blocking request (not streamed) for /health, /v1/models and the like, with the same
 * base URL, key and headers. method "GET" or "POST" (body may be NULL). *status is the
 * HTTP status; *body_out (malloc'ed, NUL-terminated, caller frees) may be NULL. -1 with err
 * when no HTTP answer came (refused, timeout, TLS). */
int stream_http(const stream_options *opt, const char *method, const char *path, const char *body,
                int64_t timeout_ns, int *status, char **body_out, char *err);

/* A Retry-After header's value (RFC 9110 10.2.3): delta-seconds ("120") or an HTTP-date
 * ("Wed, 21 Oct 2015 07:28:00 GMT", compared with now_unix_s; a date in the past is 0).
 * Returns the wait in ns, at most STREAM_RETRY_AFTER_LIMIT_S seconds, or -1 when the value
 * is neither. */
#define STREAM_RETRY_AFTER_LIMIT_S 1000000000LL /* only keeps the ns in range */
int64_t stream_retry_after_ns(const char *value, int64_t now_unix_s);

/* ---- for transports: one response's accounting ---------------------------------------
 * Both transports hand each request's response to a stream_reply: the status, headers they
 * parsed, and body bytes with the stamp of the read that carried them; it splits events,
 * decodes chunks, counts tokens (chunk_counter), delivers on_token, and at the end judges
 * the response (a status other than 200, a compressed body, not SSE, cut mid-event, no
 * [DONE]) and delivers on_end. Only a 200 whose body is not compressed is read as a stream
 * (we send Accept-Encoding: identity): any other status is an error naming it (a redirect
 * also names its Location), a Content-Encoding other than identity one naming that. */

typedef struct stream_stamp_seg {
    size_t end;         /* raw[0, end) was read at or before t_ns */
    int64_t t_ns;
    stream_stamp source;
} stream_stamp_seg;

typedef struct stream_reply {
    const stream_handlers *h;
    void *user;
    stream_stats *stats;       /* the transport's counters */
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
    stream_stamp_seg *segs;
    int n_segs, cap_segs;
    sse_parser sse;
    chunk_counter count;         /* tokens delivered, usage, [DONE], violations */
    char finish_reason[16];
    bool stopped, any_event;
    char error[128];           /* the first failure, "" none */
    /* The transport's bookkeeping (stream_book): */
    void *owner;               /* the transport's request that holds this reply */
    struct stream_reply *prev, *next;  /* every request running */
    bool dirty;                /* bytes appended since the last parse */
    struct stream_reply *next_dirty;
} stream_reply;

void stream_reply_init(stream_reply *r, const stream_request *req, stream_stats *stats);
void stream_reply_free(stream_reply *r);
/* Body bytes read at t_ns (stamped by source). The body of a refused answer
 * (stream_reply_refused) is only kept in head, for the message. 0, or -1 when memory ran
 * out (the request is then failed). */
int stream_reply_body(stream_reply *r, const char *bytes, size_t n, int64_t t_ns,
                      stream_stamp source);
/* Split and decode what was appended; on_token for each token event. Returns false when the
 * response failed (malformed SSE, an error event): the transport then ends it. */
bool stream_reply_parse(stream_reply *r);
/* The first failure is the one reported. The text is kept as one line of UTF-8: control
 * characters become spaces and bytes that are not UTF-8 "\xNN" (a hostile body quoted in
 * a message must not put raw bytes into requests.csv). */
void stream_reply_fail(stream_reply *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The answer is not a stream to read: its final status (known: not 1xx) is not 200, or its
 * body is compressed (a Content-Encoding other than identity). */
bool stream_reply_refused(const stream_reply *r);
/* A refused answer whose words are known: its head says all (a status other than 200 below
 * 400, a compressed body) or its body has filled head (an error status's message). The
 * transport ends it now, its body unread: a 202 may stream a whole answer, an error page
 * may never end. */
bool stream_reply_said(const stream_reply *r);
/* Say what was wrong with the response, if anything: a refused answer's status (with the
 * server's message, or the redirect's Location) or its encoding, which replace any failure
 * the transport met after the head; else not an SSE stream, a stream cut in the middle of
 * an event or without [DONE]. Transports call it when the response ended without a
 * transport error (stream_reply_end calls it for a refused answer however it ended). */
void stream_reply_judge(stream_reply *r);
/* Fill stream_end, count it, call on_end. The transport frees r after. */
void stream_reply_end(stream_reply *r, bool connect_failed, bool timed_out);

/* The requests a transport runs (intrusive lists through their replies): all of them, and
 * those that read bytes not parsed yet. */
typedef struct stream_book {
    stream_reply *active;
    int n_active;
    stream_reply *dirty;
} stream_book;

void stream_book_add(stream_book *b, stream_reply *r);
/* Off both lists (the request is ending). */
void stream_book_remove(stream_book *b, stream_reply *r);
void stream_book_mark_dirty(stream_book *b, stream_reply *r);
/* Parse what r read, if anything, and take it off the dirty list. False when r failed. */
bool stream_book_parse(stream_book *b, stream_reply *r);
/* The next request with bytes to parse (taken off the dirty list), NULL when none. */
stream_reply *stream_book_next_dirty(stream_book *b);
/* End every request running now (not those that end() posts): each parsed, finish_reason
 * "abort", error = reason ("" for a planned stop), then end(ctx, r), which delivers on_end
 * and frees it. Without memory for the list, drop(ctx, r) frees them without callbacks. */
void stream_book_cancel_all(stream_book *b, const char *reason,
                            void (*end)(void *ctx, stream_reply *r),
                            void (*drop)(void *ctx, stream_reply *r), void *ctx);

/* epoll_pwait2 (ns timeouts: an injection planned at t leaves at t), or epoll_wait where the
 * kernel lacks it (*use_pwait2 is then cleared). */
struct epoll_event;
int stream_epoll_wait(int ep, struct epoll_event *evs, int max_events, int64_t wait_ns,
                      bool *use_pwait2);

/* Raise the soft limit of open files for this many connections (thousands of streams). */
void stream_raise_fd_limit(int connections);

/* Normalise a user's --target: drop its query and fragment, strip a trailing "/" and "/v1"
 * so paths can be appended. */
void stream_base_url(const char *target, char *out, size_t size);
/* The target's query (after '?', before '#'; *len its length), or NULL. Every request
 * carries it (an API version, a key a gateway wants in the URL). */
const char *stream_url_query(const char *target, size_t *len);
/* The URL of path (e.g. "/v1/completions") on the target: its base URL, path, and its query.
 * 0, or -1 when it does not fit in size. */
int stream_url_join(const char *target, const char *path, char *out, size_t size);

#endif
