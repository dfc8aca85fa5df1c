#include "server/conns.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>

#include "common/clock.h"
#include "common/err.h"
#include "server/reqframe.h"

/* The strict framing in front of evhttp (reqframe.h): bytes the socket delivered and the
 * parser has not finished with, and which of the requests handed on is refused. */
typedef struct conn_framing {
    conns *owner;
    struct bufferevent *bev;
    struct evbuffer *input; /* the bufferevent's input: what evhttp reads */
    struct evbuffer *raw;   /* received, not framed yet (an incomplete head or line) */
    struct evbuffer_cb_entry *watch;
    reqframe parser;
    int64_t forwarded;     /* requests handed to evhttp */
    int64_t delivered;     /* requests evhttp handed to the server */
    int64_t refused_index; /* which of them is refused; -1: none */
    conns_refusal refusal;
    bool busy; /* inside on_input: our own changes to input call it again */
} conn_framing;

typedef struct conn_rec {
    struct bufferevent *bev; /* NULL: free slot */
    conn_framing *framing;
    int64_t deadline_ns;     /* the request must be whole by then; 0 while answering */
    int64_t unsent_since_ns; /* output waiting for the client since then; 0: none */
    bool shut;               /* shut down; evhttp has yet to free it */
} conn_rec;

struct conns {
    int64_t read_timeout_ns;
    uint64_t max_body;
    char *scratch;          /* a head in normal form (REQFRAME_OUT_MIN), reused */
    struct evbuffer *held;  /* on_input's scratch: bytes evhttp has yet to read */
    /* Created since the last sweep: evhttp sets the descriptor right after creating the
     * bufferevent, so they are indexed on the next sweep (or lookup). */
    conn_rec *fresh;
    size_t n_fresh, cap_fresh;
    conn_rec *by_fd; /* indexed by descriptor */
    size_t cap_fd;
    int64_t open;
    uint64_t timed_out, write_stalls;
};

conns *conns_create(int64_t read_timeout_ns, uint64_t max_body, char *err)
{
    if (read_timeout_ns <= 0) {
        err_set(err, "the request read timeout must be positive");
        return NULL;
    }
    conns *c = calloc(1, sizeof *c);
    if (!c) {
        err_set(err, "out of memory");
        return NULL;
    }
    c->read_timeout_ns = read_timeout_ns;
    c->max_body = max_body;
    c->scratch = malloc(REQFRAME_OUT_MIN);
    c->held = evbuffer_new();
    if (!c->scratch || !c->held) {
        conns_free(c);
        err_set(err, "out of memory");
        return NULL;
    }
    return c;
}

/* The record goes: stop framing (its bufferevent lives until the decref), let go. */
static void drop_record(conn_rec *rec)
{
    conn_framing *fr = rec->framing;
    if (fr) {
        evbuffer_remove_cb_entry(fr->input, fr->watch);
        evbuffer_free(fr->raw);
        free(fr);
    }
    bufferevent_decref(rec->bev); /* the last reference: closes the descriptor */
    memset(rec, 0, sizeof *rec);
}

void conns_free(conns *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_fresh; i++)
        drop_record(&c->fresh[i]);
    for (size_t fd = 0; fd < c->cap_fd; fd++)
        if (c->by_fd[fd].bev)
            drop_record(&c->by_fd[fd]);
    free(c->fresh);
    free(c->by_fd);
    free(c->scratch);
    if (c->held)
        evbuffer_free(c->held);
    free(c);
}

/* ---- framing ---------------------------------------------------------------------------- */

static void sink_forward(void *ctx, const char *bytes, size_t n)
{
    conn_framing *fr = ctx;
    evbuffer_add(fr->input, bytes, n);
}

static void sink_request(void *ctx)
{
    ((conn_framing *)ctx)->forwarded++;
}

static void sink_refused(void *ctx, int status, const char *message)
{
    conn_framing *fr = ctx;
    fr->refused_index = fr->forwarded - 1;
    fr->refusal.status = status;
    snprintf(fr->refusal.message, sizeof fr->refusal.message, "%s", message);
}

/* A client whose bytes cannot be framed (out of memory) must not reach evhttp unchecked:
 * drop what it sent and shut the connection down; evhttp frees it on seeing that. */
static void shut_unframed(struct bufferevent *bev, struct evbuffer *bytes)
{
    evbuffer_drain(bytes, evbuffer_get_length(bytes));
    const evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
}

/* Called by the input buffer whenever it changes; acts on the socket's reads, which append
 * (evhttp only drains from the front). It runs inside the bufferevent's read, before
 * evhttp's read callback, so evhttp only ever sees what the parser handed on. */
static void on_input(struct evbuffer *input, const struct evbuffer_cb_info *info, void *arg)
{
    conn_framing *fr = arg;
    if (fr->busy || info->n_added == 0)
        return;
    fr->busy = true;
    conns *c = fr->owner;
    /* The newest n_added bytes are raw: move them behind what waits to be framed, and
     * leave in input only what was handed on before (evhttp has yet to read it). */
    const size_t total = evbuffer_get_length(input);
    const size_t handed_on = total > info->n_added ? total - info->n_added : 0;
    evbuffer_remove_buffer(input, c->held, handed_on);
    evbuffer_add_buffer(fr->raw, input);
    evbuffer_add_buffer(input, c->held);
    const size_t len = evbuffer_get_length(fr->raw);
    const char *bytes = (const char *)evbuffer_pullup(fr->raw, -1);
    if (bytes) {
        const reqframe_sink sink = {fr, sink_forward, sink_request, sink_refused};
        evbuffer_drain(fr->raw, reqframe_feed(&fr->parser, bytes, len, c->scratch,
                                              REQFRAME_OUT_MIN, &sink));
    } else {
        shut_unframed(fr->bev, fr->raw); /* out of memory */
    }
    fr->busy = false;
}

/* The input callback of a connection left without framing state (out of memory). */
static void on_input_unframed(struct evbuffer *input, const struct evbuffer_cb_info *info,
                              void *arg)
{
    if (info->n_added > 0)
        shut_unframed(arg, input);
}

struct bufferevent *conns_new_bufferevent(struct event_base *base, void *arg)
{
    conns *c = arg;
    /* CLOSE_ON_FREE, as evhttp's own: the descriptor closes with the last reference. */
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!bev)
        return NULL; /* evhttp's own attempt fails the same way and drops the client */
    conn_framing *fr = calloc(1, sizeof *fr);
    if (fr) {
        fr->owner = c;
        fr->bev = bev;
        fr->input = bufferevent_get_input(bev);
        fr->raw = evbuffer_new();
        fr->refused_index = -1;
        reqframe_init(&fr->parser, c->max_body);
    }
    if (c->n_fresh == c->cap_fresh && fr) {
        size_t cap = c->cap_fresh ? c->cap_fresh * 2 : 64;
        conn_rec *grown = realloc(c->fresh, cap * sizeof *grown);
        if (grown) {
            c->fresh = grown;
            c->cap_fresh = cap;
        }
    }
    if (fr && fr->raw && c->n_fresh < c->cap_fresh)
        fr->watch = evbuffer_add_cb(fr->input, on_input, fr);
    if (!fr || !fr->watch) {
        if (fr && fr->raw)
            evbuffer_free(fr->raw);
        free(fr);
        evbuffer_add_cb(bufferevent_get_input(bev), on_input_unframed, bev);
        return bev; /* untracked: evhttp frees it when the shutdown is seen */
    }
    bufferevent_incref(bev);
    c->fresh[c->n_fresh++] = (conn_rec){bev, fr, clock_now_ns() + c->read_timeout_ns, 0, false};
    c->open++;
    return bev;
}

static bool index_fd(conns *c, int fd, const conn_rec *rec)
{
    if ((size_t)fd >= c->cap_fd) {
        size_t cap = c->cap_fd ? c->cap_fd : 256;
        while (cap <= (size_t)fd)
            cap *= 2;
        conn_rec *grown = realloc(c->by_fd, cap * sizeof *grown);
        if (!grown)
            return false;
        memset(grown + c->cap_fd, 0, (cap - c->cap_fd) * sizeof *grown);
        c->by_fd = grown;
        c->cap_fd = cap;
    }
    c->by_fd[fd] = *rec;
    return true;
}

/* Move fresh records whose descriptor is known into the table. */
static void index_fresh(conns *c)
{
    size_t kept = 0;
    for (size_t i = 0; i < c->n_fresh; i++) {
        conn_rec *rec = &c->fresh[i];
        const int fd = (int)bufferevent_getfd(rec->bev);
        if (fd < 0 || !index_fd(c, fd, rec))
            c->fresh[kept++] = *rec; /* try again next time */
    }
    c->n_fresh = kept;
}

static conn_rec *lookup(conns *c, struct evhttp_connection *conn)
{
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    if (!bev)
        return NULL;
    const int fd = (int)bufferevent_getfd(bev);
    if (fd >= 0 && (size_t)fd < c->cap_fd && c->by_fd[fd].bev == bev)
        return &c->by_fd[fd];
    index_fresh(c);
    if (fd >= 0 && (size_t)fd < c->cap_fd && c->by_fd[fd].bev == bev)
        return &c->by_fd[fd];
    return NULL; /* untracked (made by evhttp after an allocation failure) */
}

bool conns_request_arrived(conns *c, struct evhttp_connection *conn, conns_refusal *refusal)
{
    conn_rec *rec = lookup(c, conn);
    if (!rec)
        return false;
    rec->deadline_ns = 0;
    conn_framing *fr = rec->framing;
    if (fr->delivered++ != fr->refused_index)
        return false;
    *refusal = fr->refusal;
    return true;
}

void conns_reply_written(conns *c, struct evhttp_connection *conn)
{
    conn_rec *rec = lookup(c, conn);
    if (rec)
        rec->deadline_ns = clock_now_ns() + c->read_timeout_ns;
}

/* bufferevent_free clears every callback; evhttp always has at least its event callback
 * set on a live connection. */
static bool freed_by_evhttp(struct bufferevent *bev)
{
    bufferevent_data_cb readcb, writecb;
    bufferevent_event_cb eventcb;
    void *arg;
    bufferevent_getcb(bev, &readcb, &writecb, &eventcb, &arg);
    return !readcb && !writecb && !eventcb;
}

void conns_sweep(conns *c, int64_t now_ns)
{
    index_fresh(c);
    for (size_t fd = 0; fd < c->cap_fd; fd++) {
        conn_rec *rec = &c->by_fd[fd];
        if (!rec->bev)
            continue;
        if (freed_by_evhttp(rec->bev)) {
            drop_record(rec);
            c->open--;
            continue;
        }
        if (rec->shut)
            continue;
        /* A reply the client does not take: the tokens pile up in our output buffer. */
        const size_t unsent = evbuffer_get_length(bufferevent_get_output(rec->bev));
        if (unsent == 0)
            rec->unsent_since_ns = 0;
        else if (rec->unsent_since_ns == 0)
            rec->unsent_since_ns = now_ns;
        const bool late = rec->deadline_ns > 0 && now_ns > rec->deadline_ns;
        const bool stalled = rec->unsent_since_ns > 0 &&
                             (now_ns - rec->unsent_since_ns > c->read_timeout_ns ||
                              unsent > CONNS_MAX_UNSENT);
        if (late || stalled) {
            /* evhttp sees the end on its next pass and frees the connection (cancelling
             * its stream); the record goes on the sweep after that. */
            shutdown((int)fd, SHUT_RDWR);
            rec->shut = true;
            if (late)
                c->timed_out++;
            else
                c->write_stalls++;
        }
    }
}

/* Output not yet taken by the kernel on a connection evhttp still serves. */
static bool has_unsent(const conn_rec *rec)
{
    return rec->bev && !rec->shut && !freed_by_evhttp(rec->bev) &&
           evbuffer_get_length(bufferevent_get_output(rec->bev)) > 0;
}

bool conns_unsent(const conns *c)
{
    for (size_t i = 0; i < c->n_fresh; i++)
        if (has_unsent(&c->fresh[i]))
            return true;
    for (size_t fd = 0; fd < c->cap_fd; fd++)
        if (has_unsent(&c->by_fd[fd]))
            return true;
    return false;
}

int64_t conns_open(const conns *c)
{
    return c->open;
}

uint64_t conns_timed_out_total(const conns *c)
{
    return c->timed_out;
}

uint64_t conns_write_stalls_total(const conns *c)
{
    return c->write_stalls;
}
