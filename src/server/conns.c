#include "server/conns.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>

#include "common/clock.h"
#include "common/err.h"

typedef struct conn_rec {
    struct bufferevent *bev; /* NULL: free slot */
    int64_t deadline_ns;     /* the request must be whole by then; 0 while answering */
    int64_t unsent_since_ns; /* output waiting for the client since then; 0: none */
    bool shut;               /* shut down; evhttp has yet to free it */
} conn_rec;

struct conns {
    int64_t read_timeout_ns;
    /* Created since the last sweep: evhttp sets the descriptor right after creating the
     * bufferevent, so they are indexed on the next sweep (or lookup). */
    conn_rec *fresh;
    size_t n_fresh, cap_fresh;
    conn_rec *by_fd; /* indexed by descriptor */
    size_t cap_fd;
    int64_t open;
    uint64_t timed_out, write_stalls;
};

conns *conns_create(int64_t read_timeout_ns, char *err)
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
    return c;
}

void conns_free(conns *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_fresh; i++)
        bufferevent_decref(c->fresh[i].bev);
    for (size_t fd = 0; fd < c->cap_fd; fd++)
        if (c->by_fd[fd].bev)
            bufferevent_decref(c->by_fd[fd].bev);
    free(c->fresh);
    free(c->by_fd);
    free(c);
}

struct bufferevent *conns_new_bufferevent(struct event_base *base, void *arg)
{
    conns *c = arg;
    /* CLOSE_ON_FREE, as evhttp's own: the descriptor closes with the last reference. */
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!bev)
        return NULL; /* evhttp then makes its own; that connection goes untracked */
    if (c->n_fresh == c->cap_fresh) {
        size_t cap = c->cap_fresh ? c->cap_fresh * 2 : 64;
        conn_rec *grown = realloc(c->fresh, cap * sizeof *grown);
        if (!grown)
            return bev; /* untracked, not refused: the limit is a defence, not a gate */
        c->fresh = grown;
        c->cap_fresh = cap;
    }
    bufferevent_incref(bev);
    c->fresh[c->n_fresh++] = (conn_rec){bev, clock_now_ns() + c->read_timeout_ns, 0, false};
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

void conns_request_arrived(conns *c, struct evhttp_connection *conn)
{
    conn_rec *rec = lookup(c, conn);
    if (rec)
        rec->deadline_ns = 0;
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
            bufferevent_decref(rec->bev); /* the last reference: closes the descriptor */
            memset(rec, 0, sizeof *rec);
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
