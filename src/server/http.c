/* http — the evhttp front of the server (see server.h).
 *
 * A request's life on the loop thread. POST -> parse (openai.c) -> the same admission
 * checks the scheduler will make, run on a private probe scheduler so a refusal is an
 * immediate 400 with sched_add's own words -> a stream record (srv_stream) embedding the
 * engine_req -> headers sent (streaming) -> engine_submit. Token events come back through
 * engine_poll; each becomes one SSE chunk written with evhttp_send_reply_chunk. The final
 * event ends the reply.
 *
 * Two owners, one free. A stream is freed when both sides are done with it: the engine
 * (its final event was polled) and HTTP (the reply was handed to libevent in full, or the
 * connection closed). A client that disconnects makes libevent call on_close; the stream
 * is cancelled in the engine (its KV blocks freed at the next step boundary) and freed
 * when the final event arrives.
 *
 * The front is four files, one job each, calling one way: http.c (this one: the server's
 * lifetime, its shutdown, the disconnect peeks) -> routes.c (the endpoints and their
 * handlers) -> streams.c (the stream records, token events -> chunks) -> answer.c (whole
 * answers, the end of the loop); http_state.h holds the state they share.
 *
 * libevent 2.1 details the front relies on:
 *  - While a request is being answered, evhttp stops reading its connection, so a client
 *    leaving is seen when a write fails: within two chunks for a stream (the first write
 *    after the peer's close draws an RST, the next one fails). A non-streaming request
 *    writes nothing until its end, so a timer peeks at those sockets (recv MSG_PEEK) every
 *    PEEK_MS and cancels the request when the peer has closed.
 *  - When the connection fails while the request is unfinished (userdone == 0), evhttp
 *    detaches the request (evhttp_request_get_connection() == NULL) and leaves it to us: we
 *    free it. When the connection is freed for another reason (evhttp_free) the request is
 *    still attached and evhttp frees it.
 *  - Framing: evhttp never parses a client's raw bytes. conns.c runs every byte through
 *    reqframe (strict RFC 9112 framing) first and hands evhttp requests in a normal form;
 *    what the framing refuses (smuggling attempts, HTTP/1.2, a body over --max-body-size,
 *    a head over 64 KiB ...) reaches on_request as a stand-in that conns_request_arrived
 *    recognises, answered with an OpenAI-style JSON error and "Connection: close". evhttp's
 *    own limits are set where the normal form never reaches them (they answer in HTML).
 *  - Shutdown ends when no stream is left and no reply bytes wait on a live connection
 *    (conns_unsent), not on a count of replies handed to evhttp: evhttp never reports a
 *    reply whose connection failed, so such a count can stay up forever.
 *
 * Limits against hostile or overloaded traffic (docs/reference/reliability.md):
 *  - --max-waiting: streams accepted and without a token yet are counted (n_waiting); one
 *    more is answered 429 before its body is parsed.
 *  - --request-read-timeout: conns.c gives every request a deadline to arrive whole, which
 *    a byte-a-second client (slowloris) cannot stretch, and drops clients that leave their
 *    reply unread that long.
 *  - The listening socket's backlog is SOMAXCONN, not evhttp's 128 (connection storms). */
#include "server/server.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <event2/util.h>

#include "common/clock.h"
#include "common/err.h"
#include "server/http_state.h"
#include "server/answer.h"
#include "server/reqframe.h"
#include "server/routes.h"
#include "server/streams.h"

#define PEEK_MS 100

/* ---- disconnect detection for non-streaming requests ------------------------------------- */

static void on_peek(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    server *s = arg;
    for (srv_stream *st = s->streams; st; st = st->next) {
        if (st->streaming || !st->http || !st->conn || st->engine_done ||
            atomic_load(&st->er.cancel))
            continue;
        struct bufferevent *bev = evhttp_connection_get_bufferevent(st->conn);
        evutil_socket_t sock = bev ? bufferevent_getfd(bev) : -1;
        if (sock < 0)
            continue;
        char byte;
        ssize_t n = recv(sock, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            engine_cancel(s->engine, &st->er); /* the reply, when it comes, fails to send */
    }
    conns_sweep(s->conns, clock_now_ns());
    answer_exit_if_done(s); /* shutting down: a connection freed since may have been the last */
}

/* ---- shutdown ----------------------------------------------------------------------------- */

static void on_grace_over(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    server *s = arg;
    event_base_loopexit(s->base, NULL);
}

static void begin_shutdown(server *s)
{
    if (s->stopping)
        return;
    s->stopping = true;
    if (s->bound) {
        evhttp_del_accept_socket(s->http, s->bound);
        s->bound = NULL;
    }
    engine_shutdown(s->engine);
    struct timeval grace = {SERVER_GRACE_S, 0};
    event_add(s->grace_ev, &grace);
    answer_exit_if_done(s);
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    begin_shutdown(arg);
}

/* ---- lifetime ----------------------------------------------------------------------------- */

/* evhttp_bind_socket listens with a backlog of 128: 10,000 clients connecting at once
 * overflow it, the kernel drops their SYNs and they retry after 1, 3, 7 s, so connects
 * time out under a storm the server could serve. Listen with SOMAXCONN instead (the kernel
 * caps it at net.core.somaxconn). */
static int listen_on(server *s, char *err)
{
    char port[16];
    snprintf(port, sizeof port, "%d", s->cfg.port);
    struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                    .ai_protocol = IPPROTO_TCP, .ai_flags = EVUTIL_AI_PASSIVE};
    struct evutil_addrinfo *ai = NULL;
    int rc = evutil_getaddrinfo(s->cfg.host, port, &hints, &ai);
    if (rc != 0)
        return err_set(err, "cannot listen on %s:%d: %s", s->cfg.host, s->cfg.port,
                       evutil_gai_strerror(rc));
    struct evconnlistener *listener = evconnlistener_new_bind(
        s->base, NULL, NULL, LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
        SOMAXCONN, ai->ai_addr, (int)ai->ai_addrlen);
    const int saved = EVUTIL_SOCKET_ERROR();
    evutil_freeaddrinfo(ai);
    if (!listener)
        return err_set(err, "cannot listen on %s:%d: %s", s->cfg.host, s->cfg.port,
                       evutil_socket_error_to_string(saved));
    s->bound = evhttp_bind_listener(s->http, listener); /* owns the listener from here */
    if (!s->bound) {
        evconnlistener_free(listener);
        return err_set(err, "cannot listen on %s:%d: out of memory", s->cfg.host, s->cfg.port);
    }
    return 0;
}

server *server_create(const server_config *cfg, exec *executor, char *err)
{
    server *s = calloc(1, sizeof *s);
    if (!s) {
        executor->destroy(executor);
        err_set(err, "out of memory creating the server");
        return NULL;
    }
    s->cfg = *cfg;
    if (s->cfg.max_body_bytes == 0)
        s->cfg.max_body_bytes = SERVER_DEFAULT_MAX_BODY;
    if (s->cfg.max_waiting <= 0)
        s->cfg.max_waiting = SERVER_DEFAULT_MAX_WAITING;
    if (s->cfg.read_timeout_ns <= 0)
        s->cfg.read_timeout_ns = SERVER_DEFAULT_READ_TIMEOUT_S * CLOCK_NS_PER_S;
    s->x = executor;
    s->next_id = 1;
    s->created = (int64_t)time(NULL);
    metrics_init(&s->metrics);

    /* Before any event_base exists: locks for event_active from the engine thread. */
    if (evthread_use_pthreads() != 0) {
        err_set(err, "libevent without pthreads support");
        goto error_executor;
    }
    s->probe = sched_create(&cfg->sched, err);
    if (!s->probe)
        goto error_executor;
    s->conns = conns_create(s->cfg.read_timeout_ns, s->cfg.max_body_bytes, err);
    if (!s->conns)
        goto error_executor;
    if (cfg->step_log_path[0]) {
        s->step_log = fopen(cfg->step_log_path, "w");
        if (!s->step_log) {
            err_set(err, "%s: %s", cfg->step_log_path, strerror(errno));
            goto error_executor;
        }
    }
    if (cfg->sched_log_path[0]) {
        s->sched_log = fopen(cfg->sched_log_path, "w");
        if (!s->sched_log) {
            err_set(err, "%s: %s", cfg->sched_log_path, strerror(errno));
            goto error_executor;
        }
    }
    engine_config ecfg = {
        .sched = cfg->sched,
        .executor = executor,
        .step_log = s->step_log,
        .sched_log = s->sched_log,
        .notify = streams_notify,
        .notify_arg = s,
        .realtime = cfg->realtime,
    };
    s->engine = engine_create(&ecfg, err); /* owns the executor from here, even on failure */
    if (!s->engine)
        goto error;

    /* The changelist merges the add/remove of a connection's write interest within one
     * loop pass into one epoll_ctl (or none): every streamed chunk arms EV_WRITE. */
    struct event_config *ev_cfg = event_config_new();
    if (ev_cfg) {
        event_config_set_flag(ev_cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
        s->base = event_base_new_with_config(ev_cfg);
        event_config_free(ev_cfg);
    }
    s->http = s->base ? evhttp_new(s->base) : NULL;
    s->out = evbuffer_new();
    s->wake_ev = s->base ? event_new(s->base, -1, 0, streams_on_wake, s) : NULL;
    s->stop_ev = s->base ? event_new(s->base, -1, 0, on_stop, s) : NULL;
    s->peek_ev = s->base ? event_new(s->base, -1, EV_PERSIST, on_peek, s) : NULL;
    s->grace_ev = s->base ? evtimer_new(s->base, on_grace_over, s) : NULL;
    if (!s->http || !s->out || !s->wake_ev || !s->stop_ev || !s->peek_ev || !s->grace_ev) {
        err_set(err, "out of memory setting up libevent");
        goto error;
    }
    if (cfg->handle_signals) {
        s->sigint_ev = evsignal_new(s->base, SIGINT, on_stop, s);
        s->sigterm_ev = evsignal_new(s->base, SIGTERM, on_stop, s);
        if (!s->sigint_ev || !s->sigterm_ev || evsignal_add(s->sigint_ev, NULL) != 0 ||
            evsignal_add(s->sigterm_ev, NULL) != 0) {
            err_set(err, "cannot install the SIGINT/SIGTERM handlers");
            goto error;
        }
    }
    evhttp_set_gencb(s->http, routes_on_request, s);
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                            EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    /* The framing (conns.c, reqframe.h) enforces the head and body limits, with a JSON
     * answer, before evhttp sees a byte; evhttp's own limits are set where the normal form
     * it gets can never reach them (they would answer with an HTML page). */
    evhttp_set_max_headers_size(s->http, REQFRAME_OUT_MIN);
    evhttp_set_max_body_size(s->http, (ev_ssize_t)s->cfg.max_body_bytes);
    /* Framing, deadlines for requests to arrive and for clients to read their replies
     * (conns.h says why not evhttp_set_timeout). */
    evhttp_set_bevcb(s->http, conns_new_bufferevent, s->conns);
    if (listen_on(s, err) != 0)
        goto error;
    struct sockaddr_storage addr;
    socklen_t addr_len = sizeof addr;
    if (getsockname(evhttp_bound_socket_get_fd(s->bound), (struct sockaddr *)&addr, &addr_len) !=
        0) {
        err_set(err, "getsockname: %s", strerror(errno));
        goto error;
    }
    s->port = addr.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&addr)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&addr)->sin_port);
    return s;

error_executor:
    executor->destroy(executor);
error:
    server_free(s);
    return NULL;
}

int server_port(const server *s)
{
    return s->port;
}

int server_run(server *s, char *err)
{
    s->loop_thread = pthread_self();
    if (engine_start(s->engine, err) != 0)
        return -1;
    s->loop_running = true;
    struct timeval peek = {0, PEEK_MS * 1000};
    event_add(s->peek_ev, &peek);
    if (event_base_dispatch(s->base) < 0)
        return err_set(err, "the event loop failed");
    return 0;
}

void server_stop(server *s)
{
    event_active(s->stop_ev, EV_READ, 0);
}

void server_free(server *s)
{
    if (!s)
        return;
    /* Connections first: their close callbacks cancel what still runs. */
    if (s->http)
        evhttp_free(s->http);
    conns_free(s->conns); /* after evhttp_free: the last references to the connections */
    engine_free(s->engine); /* joins the thread; nothing refers to the streams after */
    while (s->streams) {
        srv_stream *st = s->streams;
        streams_remove(s, st);
        streams_destroy(st);
    }
    if (s->wake_ev)
        event_free(s->wake_ev);
    if (s->stop_ev)
        event_free(s->stop_ev);
    if (s->peek_ev)
        event_free(s->peek_ev);
    if (s->grace_ev)
        event_free(s->grace_ev);
    if (s->sigint_ev)
        event_free(s->sigint_ev);
    if (s->sigterm_ev)
        event_free(s->sigterm_ev);
    if (s->out)
        evbuffer_free(s->out);
    if (s->base)
        event_base_free(s->base);
    if (s->step_log)
        fclose(s->step_log);
    if (s->sched_log)
        fclose(s->sched_log);
    sched_free(s->probe);
    buf_free(&s->scratch);
    free(s);
}

int64_t server_cpu_ns(server *s)
{
    if (!s->loop_running)
        return -1;
    clockid_t id;
    struct timespec ts;
    if (pthread_getcpuclockid(s->loop_thread, &id) != 0 || clock_gettime(id, &ts) != 0)
        return -1;
    const int64_t loop_ns = (int64_t)ts.tv_sec * CLOCK_NS_PER_S + ts.tv_nsec;
    const int64_t engine_ns = engine_thread_cpu_ns(s->engine);
    return loop_ns + (engine_ns > 0 ? engine_ns : 0);
}
