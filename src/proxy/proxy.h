/* proxy — `stallscope proxy`: an HTTP/1.1 reverse proxy in front of one OpenAI-compatible
 * server (a sidecar per replica) that forwards every request untouched, times every token of
 * the streams it carries, and names the long prompt that froze the others: live, on
 * production traffic, with no load generated (docs/guide/production.md).
 *
 * One thread, one epoll loop. A client's request is read whole (framed by the server's strict
 * parser, server/reqframe.h: anything ambiguous is refused with an OpenAI-style JSON error
 * and never reaches the upstream), its head rewritten for the upstream (inspect.h), and sent
 * on a connection of the proxy's own, one per client connection, kept alive while both sides
 * keep theirs. The answer goes back byte for byte as it arrives: each read of the upstream is
 * written to the client before it is looked at. The read carries the kernel's receive stamp
 * (SO_TIMESTAMPNS, as `run` stamps, client/raw_conn.c), and a stream of /completions or
 * /chat/completions ("stream": true) is parsed as it passes (client/http1.h, sse.h,
 * chunk.h): each token event at its read's stamp goes to the live analysis (observe.h), the
 * metrics (pmetrics.h) and, with --out, the files (plog.h).
 *
 * What the client sees is the upstream's: status, headers and body byte for byte (its
 * Connection field too: the proxy closes the client's connection when the upstream's answer
 * or the client asked for it). The proxy answers itself only when the upstream cannot: 502 (unreachable,
 * closed without an answer, or an answer that is not HTTP) and 504 (no connection within
 * the connect timeout), as OpenAI-style JSON errors. A client that leaves aborts its
 * upstream request (the connection is closed). */
#ifndef STALLSCOPE_PROXY_H
#define STALLSCOPE_PROXY_H
#include <stdbool.h>
#include <stdint.h>

#include "proxy/observe.h"

typedef struct proxy_config {
    char listen[256];         /* HOST:PORT the clients connect to (port 0: any free one) */
    char upstream[2048];      /* http(s)://HOST:PORT[/base] of the server */
    char admin[256];          /* HOST:PORT of /metrics and /health; "" none */
    char name[128];           /* the metrics' upstream label; "" the upstream's host:port */
    char out[1024];           /* --out DIR; "" no files */
    double sample;            /* the fraction of streams written to --out (metrics count all) */
    pobs_config obs;          /* the stall threshold */
    bool insecure;            /* https upstream: no certificate checks */
    int64_t connect_timeout_ns;
    int64_t idle_timeout_ns;  /* a client connection idle this long between requests closes */
    int64_t max_body;         /* the largest request body (413 above) */
    int max_conns;            /* client connections at once (more are closed at accept) */
    int64_t duration_ns;      /* > 0: stop after this long (tests, benchmarks) */
    const char *ready_file;   /* when set: "LISTEN_PORT ADMIN_PORT\n" written there once
                                 listening (tests, port 0) */
    bool quiet;               /* no progress line every minute */
} proxy_config;

void proxy_config_default(proxy_config *cfg);

/* Run until SIGINT/SIGTERM (or duration). 0 after a clean stop, -1 with err when it could not
 * start (a bad address, a port taken, an upstream URL it cannot use) or its files failed. */
int proxy_run(const proxy_config *cfg, char *err);

#endif
