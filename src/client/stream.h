/* stream — many concurrent HTTP/SSE requests in ONE thread, on libcurl's multi interface
 * driven by our own epoll loop (curl_multi_socket_action: O(ready sockets) per wake-up,
 * where curl_multi_perform would walk every transfer).
 *
 * Timestamps: the write callback stamps clock_now_ns() first thing, as soon as curl hands
 * over the bytes it just read, and only appends them (with the stamp) to the request's
 * pending buffer. SSE splitting and JSON decoding run after the whole batch of ready
 * sockets has been read, so one stream's parsing never delays another stream's stamp.
 * An event's time is the stamp of the read that delivered its last byte.
 *
 * The load generator talks to this through stream_transport, a table of function pointers
 * (wrk's habit), so tests can swap the network for a script. */
#ifndef STALLSCOPE_STREAM_H
#define STALLSCOPE_STREAM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct stream_token {
    int64_t t_ns;    /* CLOCK_MONOTONIC of the read that completed the event */
    int n_tokens;    /* tokens this event carried (usage deltas), >= 1 */
    int64_t emit_ns; /* the server's emit time (stallscope extension), -1 when absent */
    int64_t step;    /* the server's engine step (stallscope extension), -1 when absent */
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
    /* What the server sent that cannot be true, ignored and counted (sse_violation): events
     * after [DONE], impossible or backward counts, tokens past max_tokens. */
    int64_t protocol_violations;
    const char *violation;     /* the first one in words, NULL without */
} stream_end;

typedef struct stream_handlers {
    void *ctx;
    /* One token event. Called outside curl's callbacks: may post new requests. */
    void (*on_token)(void *ctx, void *user, const stream_token *tok);
    /* The request is over (fine, failed or cancelled); user is not referenced again. */
    void (*on_end)(void *ctx, void *user, const stream_end *end);
} stream_handlers;

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
} stream_transport;

typedef struct stream_options {
    const char *base_url;       /* "http://127.0.0.1:8000"; https works through libcurl */
    const char *api_key;        /* Authorization: Bearer; NULL or "" for none */
    const char *const *headers; /* extra "Name: value" lines */
    int n_headers;
    int64_t idle_timeout_ns;    /* no bytes for this long -> the request fails (0: 30 s) */
    int64_t connect_timeout_ns; /* 0: 5 s */
    int max_streams;            /* expected concurrency: sizes the connection cache and fd limit */
    bool insecure;              /* skip TLS verification (self-signed test servers) */
} stream_options;

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

/* Normalise a user's --target: strip a trailing "/" and "/v1" so paths can be appended. */
void stream_base_url(const char *target, char *out, size_t size);

#endif
