/* transport — the contract between the load generator and the network: many concurrent
 * HTTP/SSE requests in ONE thread, behind `transport`, a table of function pointers (wrk's
 * habit) the load generator talks to, so tests can swap the network for a script. Two
 * transports fill it (transport_kind.h picks and makes one):
 *   - raw (raw.c, the default): our own HTTP/1.1 client on sockets it owns, each token
 *     stamped with the kernel's receive time of the bytes that carried it;
 *   - curl (curl.c): libcurl's multi interface driven by our own epoll loop
 *     (curl_multi_socket_action: O(ready sockets) per wake-up), for what the raw transport
 *     does not do (proxies, HTTP/2, other auth); its stamps are taken in user space when
 *     curl hands over the bytes it just read.
 * Both stamp first and parse later: bytes are appended with their stamp to the request's
 * pending buffer, and SSE splitting and JSON decoding run after the whole batch of ready
 * sockets has been read, so one stream's parsing never delays another stream's stamp.
 * An event's time is the stamp of the read that delivered its last byte. The response
 * accounting both share (stamped bytes -> events -> tokens, errors, the end) is reply.h;
 * the target URL's reading, url.h. At the end, what both transports' loops use. */
#ifndef STALLSCOPE_TRANSPORT_H
#define STALLSCOPE_TRANSPORT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client/chunk.h"

/* Where an event's time came from (docs/explanation/timestamps.md). */
typedef enum transport_stamp {
    /* clock_now_ns() at the read, before parsing: the kernel gave no stamp (the curl
     * transport, or no cmsg) */
    TRANSPORT_STAMP_USER = 0,
    /* the kernel's receive time of the bytes (SO_TIMESTAMPNS), mapped to CLOCK_MONOTONIC */
    TRANSPORT_STAMP_KERNEL,
    /* a kernel stamp, but more than one event completed in the read that carried it: the
     * kernel reports the last segment's time for all, so it only bounds this one */
    TRANSPORT_STAMP_KERNEL_COALESCED,
    TRANSPORT_STAMP_KINDS
} transport_stamp;

/* "user", "kernel", "kernel_coalesced" (the keys of fidelity.json's and summary.json's
 * "stamps"). */
const char *transport_stamp_name(transport_stamp s);

typedef struct transport_token {
    int64_t t_ns;    /* CLOCK_MONOTONIC of the read that completed the event */
    int n_tokens;    /* tokens this event carried (usage deltas), >= 1 */
    int64_t emit_ns; /* the server's emit time (stallscope extension), -1 when absent */
    int64_t step;    /* the server's engine step (stallscope extension), -1 when absent */
    transport_stamp stamp; /* where t_ns came from */
} transport_token;

typedef struct transport_end {
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
} transport_end;

typedef struct transport_handlers {
    void *ctx;
    /* One token event. Called outside curl's callbacks: may post new requests. */
    void (*on_token)(void *ctx, void *user, const transport_token *tok);
    /* The request is over (fine, failed or cancelled); user is not referenced again. */
    void (*on_end)(void *ctx, void *user, const transport_end *end);
} transport_handlers;

struct transport_stats;

typedef struct transport_request {
    const char *path; /* "/v1/completions", appended to the base URL */
    const char *body; /* JSON, copied */
    size_t body_len;
    const transport_handlers *handlers; /* borrowed; must outlive the request */
    void *user;
    /* The body's max_tokens: no stream is counted more tokens than it asked for (a usage
     * count past it is a protocol violation). 0: unknown, unbounded. */
    int64_t max_tokens;
} transport_request;

/* The transport as the driver sees it. Every function returns 0 (OK) or -1 (ERROR) with
 * err filled; run() pumps I/O until until_ns (CLOCK_MONOTONIC) and delivers callbacks. */
typedef struct transport {
    void *impl;
    int (*post)(void *impl, const transport_request *req, char *err);
    int (*run)(void *impl, int64_t until_ns, char *err);
    /* End every request now: on_end with finish_reason "abort" and error = reason ("" for
     * a planned stop, e.g. the end of the run). */
    void (*cancel_all)(void *impl, const char *reason);
    int (*active)(void *impl);
    int64_t (*now)(void *impl);
    /* Free the transport (aborting what runs, no callbacks). NULL for borrowed ones. */
    void (*destroy)(void *impl);
    /* Counters since creation (transport_stats); NULL where not kept. */
    void (*stats)(void *impl, struct transport_stats *out);
} transport;

typedef struct transport_options {
    const char *base_url;       /* "http://127.0.0.1:8000" or https:// */
    const char *api_key;        /* Authorization: Bearer; NULL or "" for none */
    const char *const *headers; /* extra "Name: value" lines */
    int n_headers;
    int64_t idle_timeout_ns;    /* no bytes for this long -> the request fails (0: 30 s) */
    int64_t connect_timeout_ns; /* 0: 5 s */
    int max_streams;            /* expected concurrency: sizes the connection cache and fd limit */
    bool insecure;              /* skip TLS verification (self-signed test servers) */
} transport_options;

/* Counters since creation, for progress lines and benchmarks. */
typedef struct transport_stats {
    int64_t stamps[TRANSPORT_STAMP_KINDS]; /* token events by the source of their time */
    /* Reads of the raw transport that carried no usable kernel stamp (none, or one more
     * than 1 ms after the read: a clock step between the two, or the kernel reusing the
     * sender's time), whose events fell back to TRANSPORT_STAMP_USER. */
    int64_t kernel_stamps_refused;
    int64_t events;   /* token events delivered */
    int64_t tokens;   /* tokens in them */
    int64_t bytes;    /* response bytes read */
    int64_t requests; /* requests ended */
    int64_t errors;   /* of which failed */
    int64_t protocol_violations; /* server events ignored (transport_end.protocol_violations) */
} transport_stats;

/* epoll_pwait2 (ns timeouts: an injection planned at t leaves at t), or epoll_wait where the
 * kernel lacks it (*use_pwait2 is then cleared). */
struct epoll_event;
int transport_epoll_wait(int ep, struct epoll_event *evs, int max_events, int64_t wait_ns,
                         bool *use_pwait2);

/* The now() of a transport on the real clock (both of ours): clock_now_ns(); impl unused. */
int64_t transport_clock_now(void *impl);

/* Raise the soft limit of open files for this many connections (thousands of streams). */
void transport_raise_fd_limit(int connections);

#endif
