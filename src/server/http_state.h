/* http_state — internal to server: the state the HTTP front's files share (http.c the
 * server's lifetime, routes.c the handlers, streams.c the stream records and their token
 * events, answer.c the whole answers): the server itself and one stream record. Only these
 * files include it; server.h is the module's interface. */
#ifndef STALLSCOPE_SERVER_HTTP_STATE_H
#define STALLSCOPE_SERVER_HTTP_STATE_H
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <event2/event.h>
#include <event2/http.h>

#include "common/buf.h"
#include "engine/engine.h"
#include "server/conns.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/server.h"

typedef struct srv_stream srv_stream;

struct server {
    server_config cfg;
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    struct event *wake_ev;  /* activated by the engine thread: events to poll */
    struct event *stop_ev;  /* activated by server_stop from any thread */
    struct event *sigint_ev, *sigterm_ev;
    struct event *peek_ev;  /* non-streaming disconnect detection */
    struct event *grace_ev; /* shutdown deadline */
    engine *engine;
    exec *x;
    sched *probe; /* admission checks on the loop thread; never runs a step */
    conns *conns; /* request read deadlines (slowloris) */
    FILE *step_log;
    FILE *sched_log;
    int port;
    int64_t next_id;
    int64_t created; /* Unix time at start, for /v1/models */
    metrics_state metrics;
    buf scratch;          /* chunk encoding, reused */
    struct evbuffer *out; /* handed to evhttp_send_reply_chunk, which drains it */
    srv_stream *streams;  /* every stream not yet freed */
    int n_streams;
    int n_waiting; /* streams accepted and without a token yet: the --max-waiting queue */
    bool stopping;
    bool loop_running;
    pthread_t loop_thread;
};

struct srv_stream {
    engine_req er; /* first: the engine's part */
    server *srv;
    struct evhttp_request *http; /* NULL once the reply is handed over or the client left */
    struct evhttp_connection *conn;
    openai_request req;
    openai_stream enc;
    int64_t id;
    int64_t created;
    int64_t t_arrival_ns;
    int64_t t_last_token_ns;
    int64_t last_step;
    int completion_tokens;
    bool streaming;
    bool sent_role;
    bool got_first;
    bool waiting; /* counted in server.n_waiting */
    bool engine_done;
    bool http_done;
    buf text; /* non-streaming: the answer so far */
    srv_stream *next, *prev;
};

#endif
