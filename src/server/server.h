/* server — the embedded OpenAI-compatible HTTP server in front of the engine.
 *
 * HTTP/1.1 on libevent's evhttp: one event-loop thread (the caller of server_run) parses
 * requests, encodes SSE chunks and writes them; the engine thread (engine.h) owns the
 * scheduler and the executor. The loop thread only posts requests into the engine and
 * takes token events out (engine_poll), woken by event_active from the engine thread
 * (libevent built with evthread_use_pthreads). Why evhttp: it is already a dependency (the
 * client side uses libevent-free libcurl, the build needs libevent anyway), it has chunked
 * replies with per-chunk sends, a connection-close callback to notice clients leaving,
 * header/body size limits, and thread-safe cross-thread activation; libmicrohttpd would
 * bring a second event model and its own threads.
 *
 * Endpoints: POST /v1/completions, POST /v1/chat/completions (openai.h), GET /v1/models,
 * GET /health, GET /metrics (metrics.h). --api-key guards /v1/ only, as vLLM does.
 * Shutdown (SIGINT/SIGTERM or server_stop): stop accepting, abort what runs, end every
 * stream with a finish_reason "abort" chunk (+ usage when asked) and [DONE], answer every
 * cut non-streaming request 503 with Retry-After, and return 0 as soon as the replies to
 * live clients are written (at most SERVER_GRACE_S). See docs/reference/server-api.md. */
#ifndef STALLSCOPE_SERVER_H
#define STALLSCOPE_SERVER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/exec.h"
#include "engine/sched.h"

#define SERVER_DEFAULT_MAX_BODY (4u << 20) /* 4 MiB: a 128k-token id prompt is ~0.9 MB */
#define SERVER_GRACE_S 5
/* Requests accepted and not streaming yet (queued or in prefill) at most; one more is
 * answered 429 at once. 4096 is 16 x the default max_num_seqs: a queue that deep means
 * minutes of wait, and each entry holds its parsed prompt in memory. */
#define SERVER_DEFAULT_MAX_WAITING 4096
/* A request's headers and body must arrive within this (from the connection's start or its
 * previous reply: an idle keep-alive connection is closed after it), and a client must take
 * its reply's bytes within it (see conns.h). */
#define SERVER_DEFAULT_READ_TIMEOUT_S 30

typedef struct server_config {
    char host[256];
    int port;             /* 0: a free port (see server_port) */
    char api_key[256];    /* "": no authentication */
    char model_name[128]; /* the served model's name, as /v1/models lists it */
    size_t max_body_bytes;
    int max_waiting; /* 0: SERVER_DEFAULT_MAX_WAITING (see above) */
    int64_t read_timeout_ns; /* 0: SERVER_DEFAULT_READ_TIMEOUT_S (see above) */
    char step_log_path[1024]; /* "": no step log */
    char sched_log_path[1024]; /* "": no sched log (sched_events.csv's rows) */
    sched_config sched;
    bool handle_signals; /* SIGINT / SIGTERM start a graceful shutdown */
    bool realtime;       /* try SCHED_FIFO for the engine thread (engine_config.realtime) */
    bool no_slots;       /* --kv-layout unified: no POST /slots/{id} (llama.cpp's --no-slots):
                            a server calibrate cannot reset */
} server_config;

typedef struct server server;

/* Bind and set everything up (the engine thread is not started yet). The executor is
 * owned by the server from here on, also on failure. NULL with err. */
server *server_create(const server_config *cfg, exec *executor, char *err);
int server_port(const server *s);
/* Run the loop on the calling thread until shut down. 0, or -1 with err. */
int server_run(server *s, char *err);
/* Any thread: begin the graceful shutdown (server_run then returns). */
void server_stop(server *s);
void server_free(server *s);
/* CPU time of the loop thread plus the engine thread, ns (-1 before server_run). */
int64_t server_cpu_ns(server *s);

#endif
