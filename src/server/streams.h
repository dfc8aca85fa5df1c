/* streams — internal to server: the stream records (one per generation request, owned by
 * the engine and by HTTP until both are done with it, http.c) and the token events the
 * engine hands back, each written as one SSE chunk, or gathered into the whole answer of a
 * request that did not ask for a stream. */
#ifndef STALLSCOPE_SERVER_STREAMS_H
#define STALLSCOPE_SERVER_STREAMS_H
#include "server/http_state.h"

/* st (filled by the handler) joins s->streams; a client that leaves its connection
 * cancels it in the engine from now on. */
void streams_add(server *s, srv_stream *st);
/* st leaves s->streams; and its memory, with its engine request's. */
void streams_remove(server *s, srv_stream *st);
void streams_destroy(srv_stream *st);
/* The engine thread's notify (engine_config.notify): wakes the loop ... */
void streams_notify(void *arg);
/* ... whose event then polls the engine's events and writes each to its stream. */
void streams_on_wake(evutil_socket_t fd, short what, void *arg);

#endif
