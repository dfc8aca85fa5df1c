/* conns — the server's record of its client connections, for what evhttp 2.1 lacks: strict
 * request framing in front of its parser, and a deadline for a request to arrive whole.
 *
 * Framing. Every byte a client sends passes reqframe (reqframe.h) before evhttp reads it:
 * an evbuffer callback on the connection's input buffer runs inside the socket read, takes
 * the bytes just read out, and puts back only what the parser handed on (requests in a
 * normal form). A refused request never reaches evhttp; the parser hands on a stand-in
 * instead, evhttp delivers it like any request, and conns_request_arrived tells the server
 * that this one is the refusal (status, message), so it answers with a JSON error and
 * closes — after answering, in order, whatever was pipelined before it.
 *
 * evhttp's timeout (evhttp_set_timeout) is an idle timeout, re-armed by every byte, so
 * a client that sends a header byte a second (slowloris) holds its connection, and a file
 * descriptor, for as long as it likes; a few thousand such clients exhaust the server's
 * descriptors. Here a connection gets a deadline whenever it starts waiting for a request
 * (accepted, or its previous reply written): a request that has not arrived whole by then
 * gets its socket shut down, which evhttp handles as the client leaving. While a request is
 * being answered there is no deadline (a stream may wait in the queue, or between two
 * tokens, for minutes). What a reply needs instead is a client that reads: a connection
 * whose output has waited unsent for the timeout (or grown past CONNS_MAX_UNSENT) is shut
 * down too, or a client that never reads would make the server buffer a whole answer.
 *
 * evhttp's own timeout (evhttp_set_timeout) is not used: while a reply streams, evhttp keeps
 * reading enabled to notice a close, so its read timeout would end any stream that goes
 * quiet for that long (a long queue, a slow prefill on the cpu engine).
 *
 * How connections are seen: evhttp_set_bevcb makes evhttp create each connection's
 * bufferevent through conns_new_bufferevent, which keeps one extra reference to it. When
 * evhttp frees the connection, bufferevent_free clears the callbacks and drops evhttp's
 * reference; ours keeps the bufferevent, and (BEV_OPT_CLOSE_ON_FREE) its descriptor, open
 * until the next sweep notices the cleared callbacks and lets go. A tracked descriptor
 * number therefore cannot be reused by a new connection while its record exists, so records
 * are indexed by descriptor. The cost: a closed connection's descriptor lives until the
 * next sweep (the server sweeps every 100 ms).
 *
 * Loop thread only. */
#ifndef STALLSCOPE_CONNS_H
#define STALLSCOPE_CONNS_H
#include <stdbool.h>
#include <stdint.h>

#include "server/reqframe.h"

/* A client this far behind is not coming back: ~20,000 tokens of SSE chunks. */
#define CONNS_MAX_UNSENT (8u << 20)

struct bufferevent;
struct event_base;
struct evhttp_connection;

typedef struct conns conns;

typedef struct conns_refusal {
    int status;
    char message[REQFRAME_MESSAGE_LEN];
} conns_refusal;

/* read_timeout_ns: how long a request may take to arrive whole (> 0); max_body: the largest
 * request body (413 above it). NULL with err. */
conns *conns_create(int64_t read_timeout_ns, uint64_t max_body, char *err);
/* Let go of every connection (after evhttp_free: it closes their descriptors). */
void conns_free(conns *c);

/* For evhttp_set_bevcb(http, conns_new_bufferevent, c). */
struct bufferevent *conns_new_bufferevent(struct event_base *base, void *arg);
/* A request arrived whole on conn: no deadline while it is answered. true: it is the one the
 * framing refused; *refusal says how to answer (then close the connection). */
bool conns_request_arrived(conns *c, struct evhttp_connection *conn, conns_refusal *refusal);
/* conn's reply was written: the next request must arrive within the timeout. */
void conns_reply_written(conns *c, struct evhttp_connection *conn);
/* Drop the records of connections evhttp freed; shut down the ones past their deadline. */
void conns_sweep(conns *c, int64_t now_ns);

/* Some connection evhttp still serves has reply bytes the kernel has not taken yet. */
bool conns_unsent(const conns *c);

int64_t conns_open(const conns *c);           /* connections tracked now */
uint64_t conns_timed_out_total(const conns *c); /* shut down for a late request */
uint64_t conns_write_stalls_total(const conns *c); /* shut down for not reading a reply */

#endif
