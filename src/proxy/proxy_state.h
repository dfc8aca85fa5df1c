/* proxy_state — internal to proxy: the state the proxy's files share (proxy_loop.c the loop and
 * the listening sockets, proxy_conns.c the connections of both sides and their exchanges,
 * proxy_admin.c the admin port). Only these files include it; proxy.h is the module's
 * interface. */
#ifndef STALLSCOPE_PROXY_STATE_H
#define STALLSCOPE_PROXY_STATE_H
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "client/chunk.h"
#include "client/http1.h"
#include "client/sse.h"
#include "client/tls.h"
#include "client/url.h"
#include "common/buf.h"
#include "proxy/inspect.h"
#include "proxy/observe.h"
#include "proxy/plog.h"
#include "proxy/pmetrics.h"
#include "proxy/proxy.h"
#include "server/reqframe.h"

#define READ_BUF (64 * 1024)
#define MAX_EVENTS 256
#define TICK_NS (100 * CLOCK_NS_PER_MS)
#define IN_CAP (1 << 20)          /* a client's unframed bytes held while its request runs */
#define OUT_PAUSE (4 << 20)       /* a client this far behind: stop reading its upstream */
#define OUT_RESUME (1 << 20)
#define ADMIN_IN_CAP (16 * 1024)
#define PROGRESS_NS (60 * CLOCK_NS_PER_S)

enum { K_LISTEN, K_ADMIN_LISTEN, K_DOWN, K_UP, K_ADMIN, K_SIGNAL };
enum { UP_CONNECTING, UP_TLS, UP_OPEN };
enum { PH_IDLE, PH_HEAD, PH_BODY };

typedef struct px px;
typedef struct down down;

typedef struct item {
    int kind;
} item;

typedef struct up {
    int kind; /* K_UP */
    int fd;
    down *d;
    int state;
    tls_session *tls;
    bool request_queued; /* https: the request handed to TLS */
    buf out;
    size_t out_off;
    bool want_out, paused;
    bool reused; /* carried an answer before this one */
    int64_t t_open_ns;
    int phase;
    buf head;
    http1_response resp;
    http1_body body;
    bool got_bytes; /* a byte of the current answer */
    bool gone;      /* closed: freed at the end of this wake-up */
} up;

struct down {
    int kind; /* K_DOWN */
    int fd;
    int32_t user;
    reqframe rf;
    buf in, req, body, out;
    size_t out_off;
    bool want_out, reading;
    bool in_request; /* a head handed on, its request not complete yet */
    bool busy;       /* its request is with the upstream */
    bool close_after;/* close once out is written */
    bool gone;       /* closed: freed at the end of this wake-up */
    pinsp_head h;
    up *u;
    int64_t t_active_ns;
    int attempts;
    /* the exchange */
    int64_t rid;
    bool observed, logged, answered, streaming, sent;
    int status;
    int64_t t_arrive_ns, t_send_ns, t_first_ns;
    int32_t prompt_est;
    int64_t prompt_told; /* the usage.prompt_tokens observe.h was told (0: none yet) */
    int64_t max_tokens;
    sse_parser sse;
    chunk_counter cc;
    char finish[16];
    char error[128];
    down *prev, *next;
};

typedef struct admin {
    int kind; /* K_ADMIN */
    int fd;
    reqframe rf;
    buf in, out;
    size_t out_off;
    int64_t t_open_ns;
    struct admin *prev, *next;
} admin;

struct px {
    const proxy_config *cfg;
    int ep;
    item listen_item, admin_item, signal_item;
    int listen_fd, admin_fd, signal_fd;
    struct sockaddr_storage up_addr;
    socklen_t up_addr_len;
    url_parts parts;
    pinsp_upstream upi;
    char label[300];
    tls_context *tls;
    pobs *obs;
    pmetrics m;
    plog log;
    bool logging;
    int64_t realtime_offset_ns;
    int64_t next_rid;
    int32_t next_user;
    int n_down;
    bool accept_paused; /* out of descriptors: the listeners unwatched until the next second */
    down *downs;
    admin *admins;
    void **grave; /* closed downs and ups, freed after this wake-up's events */
    int64_t n_grave, cap_grave;
    bool stopping;
    char rd[READ_BUF];
    char frame_out[REQFRAME_OUT_MIN];
    /* the spans of one read's body bytes */
    struct span {
        const char *data;
        size_t len;
    } * span;
    int64_t span_cap;
    int64_t next_progress_ns;
    int64_t last_tokens, last_stalls;
};

/* Watch fd for events (epoll_ctl op), its event naming ptr. */
static inline void px_watch(px *p, int fd, void *ptr, uint32_t events, int op)
{
    struct epoll_event ev = {0};
    ev.events = events;
    ev.data.ptr = ptr;
    epoll_ctl(p->ep, op, fd, &ev);
}

/* accept4 failed. Out of descriptors (or memory), the connection stays in the backlog and
 * the listener readable: watched, it would wake the loop at once, again and again (a core
 * spinning for as long as descriptors are short). Both listeners are unwatched until the
 * next second's tick (proxy_loop.c resumes them). */
static inline void px_accept_failed(px *p)
{
    if (errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM)
        return;
    px_watch(p, p->listen_fd, &p->listen_item, 0, EPOLL_CTL_MOD);
    if (p->admin_fd >= 0)
        px_watch(p, p->admin_fd, &p->admin_item, 0, EPOLL_CTL_MOD);
    p->accept_paused = true;
}

/* ---- shared among the proxy's files (px_: the module's internal prefix) ------------------ */

void px_bury(px *p, void *ptr);
void px_free_graves(px *p);
void px_down_watch(px *p, down *d);
void px_up_watch(px *p, up *u);
bool px_down_flush(px *p, down *d);
bool px_down_send(px *p, down *d, const char *data, size_t n);
bool px_down_error(px *p, down *d, int status, const char *type, const char *message);
up *px_up_open(px *p, down *d);
void px_up_close(px *p, up *u);
void px_exchange_sent(px *p, down *d);
bool px_up_flush(px *p, up *u);
bool px_up_queue_request(px *p, up *u);
bool px_up_failed(px *p, down *d, int status, const char *why);
void px_up_read(px *p, up *u);
void px_up_writable(px *p, up *u);
void px_exchange_start(px *p, down *d);
void px_exchange_end(px *p, down *d, const char *error);
void px_down_close(px *p, down *d);
void px_down_input(px *p, down *d);
void px_down_read(px *p, down *d);
void px_accept_clients(px *p);
void px_admin_close(px *p, admin *a);
void px_admin_flush(px *p, admin *a);
void px_admin_read(px *p, admin *a);
void px_accept_admins(px *p);

#endif
