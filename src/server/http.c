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
 * libevent 2.1 details this file relies on:
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
 * Limits against hostile or overloaded traffic (docs/reliability.md):
 *  - --max-waiting: streams accepted and without a token yet are counted (n_waiting); one
 *    more is answered 429 before its body is parsed.
 *  - --request-read-timeout: conns.c gives every request a deadline to arrive whole, which
 *    a byte-a-second client (slowloris) cannot stretch, and drops clients that leave their
 *    reply unread that long.
 *  - The listening socket's backlog is SOMAXCONN, not evhttp's 128 (connection storms). */
#include "server/server.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <event2/util.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/rng.h"
#include "engine/engine.h"
#include "server/conns.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/reqframe.h"

#define PEEK_MS 100
#define SEED_SALT 0x73656564ULL /* "seed" */

/* Under AddressSanitizer the allocator is ASan's: glibc's mallinfo2 knows nothing of it. */
#if defined(__SANITIZE_ADDRESS__)
#define HEAP_FROM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEAP_FROM_ASAN 1
#endif
#endif
#ifdef HEAP_FROM_ASAN
size_t __sanitizer_get_current_allocated_bytes(void); /* <sanitizer/allocator_interface.h> */
#endif

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

/* ---- small helpers ------------------------------------------------------------------------ */

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Internal Server Error";
    }
}

/* Shutting down, the loop ends once the live work is done: no stream left, and no reply
 * bytes waiting for a connection evhttp still serves (a client that left has none: evhttp
 * freed its connection). Not a count of replies handed over: evhttp never reports a
 * reply whose connection failed mid-write. */
static void maybe_exit_loop(server *s)
{
    if (s->stopping && s->n_streams == 0 && !conns_unsent(s->conns))
        event_base_loopexit(s->base, NULL);
}

/* evhttp calls this once a reply is completely written. */
static void on_reply_complete(struct evhttp_request *hreq, void *arg)
{
    server *s = arg;
    /* The connection waits for its next request from now: that one has a deadline. */
    struct evhttp_connection *conn = evhttp_request_get_connection(hreq);
    if (conn)
        conns_reply_written(s->conns, conn);
    maybe_exit_loop(s);
}

static void hand_over(server *s, struct evhttp_request *hreq)
{
    evhttp_request_set_on_complete_cb(hreq, on_reply_complete, s);
}

static void send_body(server *s, struct evhttp_request *hreq, int status,
                      const char *content_type, const char *body, size_t len)
{
    struct evkeyvalq *headers = evhttp_request_get_output_headers(hreq);
    evhttp_add_header(headers, "Content-Type", content_type);
    evbuffer_add(s->out, body, len);
    hand_over(s, hreq);
    evhttp_send_reply(hreq, status, reason_phrase(status), s->out);
    evbuffer_drain(s->out, evbuffer_get_length(s->out));
}

static void send_error(server *s, struct evhttp_request *hreq, const openai_error *error)
{
    char *body = openai_error_body(error);
    const char *fallback = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                           "\"param\":null,\"code\":500}}";
    if (error->status == 401)
        evhttp_add_header(evhttp_request_get_output_headers(hreq), "WWW-Authenticate", "Bearer");
    send_body(s, hreq, body ? error->status : 500, "application/json", body ? body : fallback,
              strlen(body ? body : fallback));
    free(body);
}

static void send_error_text(server *s, struct evhttp_request *hreq, int status,
                            const char *type, const char *message)
{
    openai_error error;
    openai_fail(&error, status, type, NULL, "%s", message);
    send_error(s, hreq, &error);
}

/* 503 with Retry-After: the server is going away (a client should retry elsewhere or
 * after a restart), as the 429 of a full queue says when to come back. */
static void send_unavailable(server *s, struct evhttp_request *hreq, const char *message)
{
    evhttp_add_header(evhttp_request_get_output_headers(hreq), "Retry-After", "1");
    send_error_text(s, hreq, 503, "server_error", message);
}

/* ---- stream records ------------------------------------------------------------------------ */

static void stream_unlink(server *s, srv_stream *st)
{
    if (st->prev)
        st->prev->next = st->next;
    else
        s->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    s->n_streams--;
}

static void stream_destroy(srv_stream *st)
{
    engine_req_release(&st->er);
    openai_request_free(&st->req);
    buf_free(&st->text);
    free(st);
}

static void maybe_free(server *s, srv_stream *st)
{
    if (!st->engine_done || !st->http_done)
        return;
    stream_unlink(s, st);
    stream_destroy(st);
    maybe_exit_loop(s);
}

/* The client is gone (or the reply is out of our hands): never touch st->http again. */
static void detach_http(srv_stream *st)
{
    if (st->conn)
        evhttp_connection_set_closecb(st->conn, NULL, NULL);
    st->conn = NULL;
    st->http = NULL;
    st->http_done = true;
}

/* The request left the queue: its first token came, or it ended without one. */
static void leave_waiting(server *s, srv_stream *st)
{
    if (!st->waiting)
        return;
    st->waiting = false;
    s->n_waiting--;
}

static void on_close(struct evhttp_connection *conn, void *arg)
{
    (void)conn;
    srv_stream *st = arg;
    server *s = st->srv;
    if (st->http && evhttp_request_get_connection(st->http) == NULL)
        evhttp_request_free(st->http); /* detached by evhttp: ours to free */
    st->conn = NULL; /* the connection is being freed: no closecb reset on it */
    st->http = NULL;
    st->http_done = true;
    if (!st->engine_done)
        engine_cancel(s->engine, &st->er);
    maybe_free(s, st);
}

/* ---- token events -> chunks ---------------------------------------------------------------- */

static void write_chunks(server *s, srv_stream *st, const engine_event *ev)
{
    buf *b = &s->scratch;
    buf_reset(b);
    const int64_t emit_ns = st->req.timestamps ? clock_now_ns() : 0;
    const engine_finish finish = (engine_finish)ev->finish;
    if (finish == ENGINE_FINISH_ERROR) {
        openai_error error;
        openai_fail(&error, 500, "server_error", NULL, "%s", st->er.error);
        openai_encode_stream_error(&error, b);
    } else {
        if (st->req.endpoint == OPENAI_CHAT && !st->sent_role) {
            openai_chunk role = {.text = "", .role = true, .completion_tokens = 0,
                                 .emit_ns = emit_ns, .step = ev->step};
            openai_encode_chunk(&st->enc, &role, b);
            st->sent_role = true;
        }
        size_t len = 0;
        const char *text = ev->token >= 0 ? s->x->token_text(s->x, ev->token, &len) : "";
        if ((size_t)ev->text_len < len)
            len = (size_t)ev->text_len;
        openai_chunk chunk = {
            .text = text,
            .text_len = ev->token >= 0 ? len : 0,
            .finish_reason = finish != ENGINE_FINISH_NONE ? engine_finish_name(finish) : NULL,
            .stop_reason = ev->stop_index >= 0 ? st->req.stop[ev->stop_index] : NULL,
            .completion_tokens = st->completion_tokens,
            .emit_ns = emit_ns,
            .step = ev->step,
        };
        openai_encode_chunk(&st->enc, &chunk, b);
        if (finish != ENGINE_FINISH_NONE && st->req.include_usage)
            openai_encode_usage_chunk(&st->enc, st->completion_tokens, emit_ns, ev->step, b);
    }
    if (finish != ENGINE_FINISH_NONE)
        openai_encode_done(b);
    if (b->failed)
        return; /* out of memory: this chunk is lost; the stream goes on */
    evbuffer_add(s->out, b->data, b->len);
    evhttp_send_reply_chunk(st->http, s->out);
}

static void finish_reply(server *s, srv_stream *st, const engine_event *ev)
{
    struct evhttp_request *hreq = st->http;
    const engine_finish finish = (engine_finish)ev->finish;
    /* Detach first: ending a reply can free the connection synchronously (HTTP/1.0,
     * Connection: close), and its close callback must not find this stream. */
    detach_http(st);
    if (st->streaming) {
        hand_over(s, hreq);
        evhttp_send_reply_end(hreq);
    } else if (finish == ENGINE_FINISH_ERROR) {
        openai_error error;
        openai_fail(&error, 500, "server_error", NULL, "%s", st->er.error);
        send_error(s, hreq, &error);
    } else if (finish == ENGINE_FINISH_ABORT) {
        /* Cut by shutdown (or its client left, and nobody reads this): not an answer. A
         * stream says "abort" in its last chunk; a whole response has no such place. */
        char message[160];
        snprintf(message, sizeof message,
                 "the server shut down before the answer was complete (%d of %d tokens); "
                 "retry later",
                 st->completion_tokens, st->req.max_tokens);
        send_unavailable(s, hreq, message);
    } else {
        char *body = openai_encode_response(
            &st->req, st->id, st->created, s->cfg.model_name, st->text.data, st->text.len,
            engine_finish_name(finish), ev->stop_index >= 0 ? st->req.stop[ev->stop_index] : NULL,
            st->completion_tokens, st->req.timestamps ? clock_now_ns() : -1, st->last_step);
        if (body && !st->text.failed)
            send_body(s, hreq, 200, "application/json", body, strlen(body));
        else
            send_error_text(s, hreq, 500, "server_error", "out of memory encoding the answer");
        free(body);
    }
}

static void on_step_info(server *s, const engine_event *ev)
{
    const engine_step_info *info = &ev->info;
    metrics_state *m = &s->metrics;
    m->running = info->running;
    m->waiting = info->waiting;
    m->kv_usage = info->kv_blocks_total > 0
                      ? (double)info->kv_blocks_used / (double)info->kv_blocks_total
                      : 0;
    m->preemptions = (uint64_t)info->preemptions_total;
    m->slips = (uint64_t)info->slips_total;
    m->realtime = engine_is_realtime(s->engine);
    if (!info->is_step)
        return;
    m->steps++;
    metrics_hist_observe(&m->iteration_tokens,
                         (double)info->decode_tokens + (double)info->prefill_tokens);
}

static void on_event(server *s, const engine_event *ev)
{
    if (!ev->req) {
        on_step_info(s, ev);
        return;
    }
    srv_stream *st = ev->req->user;
    if (ev->token >= 0) {
        st->completion_tokens = ev->completion_tokens;
        st->last_step = ev->step;
        metrics_state *m = &s->metrics;
        if (!st->got_first) {
            st->got_first = true;
            leave_waiting(s, st);
            metrics_hist_observe(&m->ttft, (double)(ev->t_ns - st->t_arrival_ns) / 1e9);
            m->prompt_tokens += (uint64_t)st->er.prompt_tokens;
        } else {
            metrics_hist_observe(&m->itl, (double)(ev->t_ns - st->t_last_token_ns) / 1e9);
        }
        st->t_last_token_ns = ev->t_ns;
        m->generation_tokens++;
    }
    if (ev->finish == ENGINE_FINISH_NONE && !st->http)
        return;
    if (st->http) {
        if (st->streaming) {
            write_chunks(s, st, ev);
        } else if (ev->token >= 0) {
            size_t len = 0;
            const char *text = s->x->token_text(s->x, ev->token, &len);
            if ((size_t)ev->text_len < len)
                len = (size_t)ev->text_len;
            buf_append(&st->text, text, len);
        }
    }
    if (ev->finish != ENGINE_FINISH_NONE) {
        /* From here the engine has forgotten the request. */
        st->engine_done = true;
        leave_waiting(s, st);
        if (st->http)
            finish_reply(s, st, ev);
        maybe_free(s, st);
    }
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    server *s = arg;
    engine_event *events;
    size_t n = engine_poll(s->engine, &events);
    for (size_t i = 0; i < n; i++)
        on_event(s, &events[i]);
}

static void notify_loop(void *arg)
{
    server *s = arg;
    event_active(s->wake_ev, EV_READ, 0);
}

/* ---- handlers ------------------------------------------------------------------------------- */

static int64_t tokenize_cb(void *ctx, const char *text, size_t len)
{
    exec *x = ctx;
    return x->tokenize(x, text, len, NULL, 0);
}

/* Seed of the emulated sampler: greedy (temperature 0) answers follow the prompt, seeded
 * answers the seed, the rest a per-request draw. */
static uint64_t sampling_seed(const openai_request *req, int64_t id)
{
    if (req->temperature == 0)
        return req->prompt_hash;
    if (req->has_seed)
        return req->seed;
    return rng_hash3((uint64_t)id, SEED_SALT, 0);
}

/* A stream's length is unknown when it starts. HTTP/1.1 gets it chunked; HTTP/1.0 has no
 * chunks, so its stream must end with the connection. evhttp, asked for keep-alive by a 1.0
 * client, instead announces "Content-Length: 0" and keeps the connection: the client reads
 * an empty answer and the stream as garbage after it. Forgetting the client's
 * "Connection: keep-alive" makes evhttp send the 1.0 stream unframed and close after it;
 * for HTTP/1.1, where keep-alive is the default anyway, nothing changes. */
static void forget_keep_alive(struct evhttp_request *hreq)
{
    struct evkeyvalq *in = evhttp_request_get_input_headers(hreq);
    const char *value;
    /* At most as many rounds as there are Connection fields (REQFRAME_MAX_FIELDS). */
    for (int i = 0; i < REQFRAME_MAX_FIELDS && (value = evhttp_find_header(in, "Connection")) &&
                    strncasecmp(value, "keep-alive", 10) == 0;
         i++)
        evhttp_remove_header(in, "Connection");
}

static void handle_generate(server *s, struct evhttp_request *hreq, openai_endpoint endpoint)
{
    if (s->stopping) {
        send_unavailable(s, hreq, "the server is shutting down");
        return;
    }
    struct evbuffer *input = evhttp_request_get_input_buffer(hreq);
    const size_t len = evbuffer_get_length(input);
    openai_error error;
    if (len > s->cfg.max_body_bytes) {
        openai_fail(&error, 413, "invalid_request_error", NULL,
                    "request body of %zu bytes exceeds the limit of %zu bytes", len,
                    s->cfg.max_body_bytes);
        send_error(s, hreq, &error);
        return;
    }
    /* Load shedding before any parsing: a full queue costs a refusal, not a JSON parse.
     * A client should back off and retry (Retry-After), as from vLLM behind a gateway. */
    if (s->n_waiting >= s->cfg.max_waiting) {
        s->metrics.rejected_queue_full++;
        evhttp_add_header(evhttp_request_get_output_headers(hreq), "Retry-After", "1");
        openai_fail(&error, 429, "rate_limit_error", NULL,
                    "the server is overloaded: %d requests are already waiting for the engine "
                    "(--max-waiting %d); retry later",
                    s->n_waiting, s->cfg.max_waiting);
        send_error(s, hreq, &error);
        return;
    }
    const char *body = len ? (const char *)evbuffer_pullup(input, (ev_ssize_t)len) : "";
    if (!body) {
        send_error_text(s, hreq, 500, "server_error", "out of memory reading the body");
        return;
    }
    srv_stream *st = calloc(1, sizeof *st);
    if (!st) {
        send_error_text(s, hreq, 500, "server_error", "out of memory");
        return;
    }
    const openai_limits limits = {
        .model_name = s->cfg.model_name,
        .max_model_len = s->cfg.sched.max_model_len,
        .vocab_size = s->x->vocab_size,
        .tokenize = tokenize_cb,
        .tokenize_ctx = s->x,
    };
    if (openai_parse_request(endpoint, body, len, &limits, &st->req, &error) != 0) {
        free(st);
        send_error(s, hreq, &error);
        return;
    }
    const int64_t id = s->next_id++;
    /* The scheduler's own admission rules (budget under mixed, KV capacity ...), checked on
     * a scheduler nobody steps, so its refusal is a 400 now, not an error mid-stream. */
    sched_req probe = {.id = id,
                       .prompt_tokens = st->req.prompt_tokens,
                       .max_tokens = st->req.max_tokens,
                       .min_tokens = st->req.min_tokens};
    char why[ERR_LEN];
    if (sched_add(s->probe, &probe, why) != 0) {
        openai_fail(&error, 400, "invalid_request_error",
                    endpoint == OPENAI_CHAT ? "messages" : "prompt", "%s", why);
        openai_request_free(&st->req);
        free(st);
        send_error(s, hreq, &error);
        return;
    }
    sched_abort(s->probe, &probe);

    st->srv = s;
    st->id = id;
    st->created = (int64_t)time(NULL);
    st->t_arrival_ns = clock_now_ns();
    st->last_step = -1;
    st->streaming = st->req.stream;
    st->waiting = true;
    s->n_waiting++;
    st->http = hreq;
    st->conn = evhttp_request_get_connection(hreq);
    engine_req *er = &st->er;
    er->id = id;
    er->prompt_tokens = st->req.prompt_tokens;
    er->max_tokens = st->req.max_tokens;
    er->seq = (exec_seq){
        .seed = sampling_seed(&st->req, id),
        .temperature = st->req.temperature,
        .min_tokens = st->req.min_tokens,
        .ignore_eos = st->req.ignore_eos,
        .prompt_ids = st->req.prompt_ids,
        .n_prompt_ids = st->req.prompt_ids ? st->req.prompt_tokens : 0,
    };
    er->stop = (const char *const *)st->req.stop;
    er->n_stop = st->req.n_stop;
    er->user = st;
    atomic_init(&er->cancel, false);
    openai_stream_init(&st->enc, &st->req, id, st->created, s->cfg.model_name);

    st->next = s->streams;
    if (s->streams)
        s->streams->prev = st;
    s->streams = st;
    s->n_streams++;
    if (st->conn)
        evhttp_connection_set_closecb(st->conn, on_close, st);
    if (st->streaming) {
        /* One small write per token: without TCP_NODELAY, Nagle holds a chunk back until
         * the client's (possibly delayed) ACK of the previous one, up to 40 ms on Linux. */
        struct bufferevent *bev = st->conn ? evhttp_connection_get_bufferevent(st->conn) : NULL;
        evutil_socket_t sock = bev ? bufferevent_getfd(bev) : -1;
        int one = 1;
        if (sock >= 0)
            setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct evkeyvalq *headers = evhttp_request_get_output_headers(hreq);
        evhttp_add_header(headers, "Content-Type", "text/event-stream; charset=utf-8");
        evhttp_add_header(headers, "Cache-Control", "no-cache");
        forget_keep_alive(hreq);
        evhttp_send_reply_start(hreq, 200, "OK");
    }
    engine_submit(s->engine, er);
}

static void handle_models(server *s, struct evhttp_request *hreq)
{
    char *body = openai_models_body(s->cfg.model_name, s->cfg.sched.max_model_len, s->created);
    if (!body) {
        send_error_text(s, hreq, 500, "server_error", "out of memory");
        return;
    }
    send_body(s, hreq, 200, "application/json", body, strlen(body));
    free(body);
}

static void handle_health(server *s, struct evhttp_request *hreq)
{
    if (s->stopping) {
        send_unavailable(s, hreq, "the server is shutting down");
        return;
    }
    send_body(s, hreq, 200, "application/json", "", 0);
}

/* Bytes the process holds from its allocator now (freed memory the allocator keeps for
 * reuse does not count, unlike RSS). */
static int64_t heap_in_use(void)
{
#ifdef HEAP_FROM_ASAN
    return (int64_t)__sanitizer_get_current_allocated_bytes();
#else
    const struct mallinfo2 info = mallinfo2();
    return (int64_t)(info.uordblks + info.hblkhd);
#endif
}

static void handle_metrics(server *s, struct evhttp_request *hreq)
{
    buf b = {0};
    s->metrics.requests_open = s->n_streams;
    s->metrics.http_connections = conns_open(s->conns);
    s->metrics.read_timeouts = conns_timed_out_total(s->conns);
    s->metrics.write_stalls = conns_write_stalls_total(s->conns);
    s->metrics.heap_bytes = heap_in_use();
    metrics_format(&s->metrics, s->cfg.model_name, &b);
    if (b.failed) {
        buf_free(&b);
        send_error_text(s, hreq, 500, "server_error", "out of memory");
        return;
    }
    send_body(s, hreq, 200, "text/plain; version=0.0.4; charset=utf-8", b.data ? b.data : "",
              b.len);
    buf_free(&b);
}

typedef enum { ROUTE_COMPLETIONS, ROUTE_CHAT, ROUTE_MODELS, ROUTE_HEALTH, ROUTE_METRICS } route_id;

static const struct route {
    const char *path;
    route_id id;
    enum evhttp_cmd_type method;
    const char *allow;
    bool needs_key;
} routes[] = {
    {"/v1/completions", ROUTE_COMPLETIONS, EVHTTP_REQ_POST, "POST", true},
    {"/v1/chat/completions", ROUTE_CHAT, EVHTTP_REQ_POST, "POST", true},
    {"/v1/models", ROUTE_MODELS, EVHTTP_REQ_GET, "GET, HEAD", true},
    {"/health", ROUTE_HEALTH, EVHTTP_REQ_GET, "GET, HEAD", false},
    {"/metrics", ROUTE_METRICS, EVHTTP_REQ_GET, "GET, HEAD", false},
};

/* "Authorization: Bearer <key>", the scheme case-insensitive. */
static bool authorized(const server *s, struct evhttp_request *hreq)
{
    const char *value =
        evhttp_find_header(evhttp_request_get_input_headers(hreq), "Authorization");
    if (!value || strncasecmp(value, "Bearer ", 7) != 0)
        return false;
    value += 7;
    while (*value == ' ')
        value++;
    return strcmp(value, s->cfg.api_key) == 0;
}

static void on_request(struct evhttp_request *hreq, void *arg)
{
    server *s = arg;
    conns_refusal refusal;
    if (conns_request_arrived(s->conns, evhttp_request_get_connection(hreq), &refusal)) {
        /* The framing refused this one (reqframe.h): nothing after it on this connection is
         * trusted, so close once it is answered. */
        evhttp_add_header(evhttp_request_get_output_headers(hreq), "Connection", "close");
        send_error_text(s, hreq, refusal.status, "invalid_request_error", refusal.message);
        return;
    }
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(hreq);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path)
        path = "";
    const struct route *route = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(path, routes[i].path) == 0)
            route = &routes[i];
    if (!route) {
        openai_error error;
        openai_fail(&error, 404, "not_found_error", NULL, "no route for %.200s", path);
        send_error(s, hreq, &error);
        return;
    }
    enum evhttp_cmd_type method = evhttp_request_get_command(hreq);
    const bool head_ok = method == EVHTTP_REQ_HEAD && route->method == EVHTTP_REQ_GET;
    if (method != route->method && !head_ok) {
        evhttp_add_header(evhttp_request_get_output_headers(hreq), "Allow", route->allow);
        openai_error error;
        openai_fail(&error, 405, "invalid_request_error", NULL, "%s allows only %s", route->path,
                    route->allow);
        send_error(s, hreq, &error);
        return;
    }
    if (route->needs_key && s->cfg.api_key[0] && !authorized(s, hreq)) {
        send_error_text(s, hreq, 401, "authentication_error",
                        "missing or wrong API key (Authorization: Bearer <key>)");
        return;
    }
    switch (route->id) {
    case ROUTE_COMPLETIONS: handle_generate(s, hreq, OPENAI_COMPLETIONS); break;
    case ROUTE_CHAT: handle_generate(s, hreq, OPENAI_CHAT); break;
    case ROUTE_MODELS: handle_models(s, hreq); break;
    case ROUTE_HEALTH: handle_health(s, hreq); break;
    case ROUTE_METRICS: handle_metrics(s, hreq); break;
    }
}

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
    maybe_exit_loop(s); /* shutting down: a connection freed since may have been the last */
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
    maybe_exit_loop(s);
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
    engine_config ecfg = {
        .sched = cfg->sched,
        .executor = executor,
        .step_log = s->step_log,
        .notify = notify_loop,
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
    s->wake_ev = s->base ? event_new(s->base, -1, 0, on_wake, s) : NULL;
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
    evhttp_set_gencb(s->http, on_request, s);
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
        stream_unlink(s, st);
        stream_destroy(st);
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
