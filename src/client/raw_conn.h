/* raw_conn — the raw transport's connections, for raw.c alone: a socket, its TLS
 * (tls.h), the request's bytes sent on it, and its answer read into the request's reply
 * (reply.h), every read stamped with the kernel's receive time of its bytes. A connection
 * carries one request at a time; one that answered whole goes back to the client's pool of
 * idle ones (keep-alive), and a reused one the server closed before answering is replaced
 * once. What ends a request, and the loop, are raw.c's: a connection only marks a request's
 * transfer over (raw_conn_finish) for raw.c to end it after parsing. */
#ifndef STALLSCOPE_RAW_CONN_H
#define STALLSCOPE_RAW_CONN_H
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "client/http1.h"
#include "client/reply.h"
#include "client/tls.h"
#include "common/buf.h"

#define RAW_READ_BUF (64 * 1024)
#define RAW_MAX_HOST 256
#define RAW_MAX_PATH 1024

typedef enum { RAW_CONN_CONNECTING, RAW_CONN_TLS, RAW_CONN_OPEN } raw_conn_state;
typedef enum { RAW_RESP_HEAD, RAW_RESP_BODY, RAW_RESP_DONE } raw_resp_phase;
/* How a request's transfer ended (the reply says what the body held). */
typedef enum { RAW_OUT_RUNNING, RAW_OUT_DONE, RAW_OUT_LOST, RAW_OUT_CONNECT_FAILED } raw_outcome;

typedef struct raw_client raw_client; /* as raw.h names it */
typedef struct raw_req raw_req;

typedef struct raw_conn {
    int fd;
    raw_conn_state state;
    bool reused;         /* carried a response before the current request */
    bool want_out;       /* EPOLLOUT registered */
    raw_req *req;        /* the request on it; NULL when idle */
    raw_resp_phase phase;
    buf head;            /* a response head that spans reads */
    http1_response resp;
    http1_body body;
    bool got_bytes;      /* any response byte for the current request */
    buf out;             /* bytes still to send (the request, or TLS records) */
    size_t out_off;
    tls_session *tls;    /* https, NULL for http */
    bool request_queued; /* https: the request was handed to TLS */
    bool in_pool;        /* idle, in the keep-alive pool */
    struct raw_conn *idle_prev, *idle_next;
} raw_conn;

struct raw_req {
    raw_client *c;
    reply reply;
    char *wire; /* the whole request: head and body */
    size_t wire_len;
    raw_conn *conn;
    int attempts;
    raw_outcome out;
};

struct raw_client {
    int ep;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    char host[RAW_MAX_HOST];   /* for SNI and certificate checks */
    char prefix[RAW_MAX_PATH]; /* the base URL's path, before each request's */
    char query[RAW_MAX_PATH];  /* the target's query, after each request's path ("" none) */
    buf headers;               /* "Host: ...\r\n" and the rest, each line with CRLF */
    tls_context *tls;          /* https, NULL for http */
    int64_t idle_timeout_ns, connect_timeout_ns;
    int max_idle;
    reply_book book; /* the requests running, those with bytes to parse */
    raw_conn *idle;
    int n_idle;
    int64_t next_check_ns;
    int64_t realtime_offset_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC at this wake-up */
    bool use_pwait2;
    transport_stats stats;
    struct {
        int64_t opened, reused, retried; /* raw_get_conn_stats */
    } conns;
    char rd[RAW_READ_BUF];
};

/* A connection for r: an idle one from the pool, or a new one, with r's bytes on it (sent
 * at once on an open connection). false with r failed and its transfer over. */
bool raw_conn_request(raw_client *c, raw_req *r);
/* k is writable (or failed): finish connecting (and the TLS handshake), send what is
 * queued. false when k was closed. */
bool raw_conn_write(raw_client *c, raw_conn *k);
/* k is readable: read it until it is drained (or a few reads, so one busy stream cannot
 * starve the rest), each read stamped, its bytes fed to the request's reply. */
void raw_conn_read(raw_client *c, raw_conn *k);
/* Close k (NULL: nothing), out of the pool; its request, if any, loses it. */
void raw_conn_close(raw_client *c, raw_conn *k);
/* r's transfer is over (`how`, unless it was over already): it waits, with what it read, to
 * be parsed and ended. */
void raw_conn_finish(raw_client *c, raw_req *r, raw_outcome how);

#endif
