/* streams — stream records and token events (streams.h). A record is freed when both of
 * its owners are done with it: the engine (its final event was polled) and HTTP (the reply
 * was handed to libevent in full, or the connection closed). */
#include "server/streams.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "common/clock.h"
#include "server/answer.h"

/* ---- stream records ------------------------------------------------------------------------ */

void streams_remove(server *s, srv_stream *st)
{
    if (st->prev)
        st->prev->next = st->next;
    else
        s->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    s->n_streams--;
}

void streams_destroy(srv_stream *st)
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
    streams_remove(s, st);
    streams_destroy(st);
    answer_exit_if_done(s);
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

static void streams_on_close(struct evhttp_connection *conn, void *arg)
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

void streams_add(server *s, srv_stream *st)
{
    st->next = s->streams;
    if (s->streams)
        s->streams->prev = st;
    s->streams = st;
    s->n_streams++;
    if (st->conn)
        evhttp_connection_set_closecb(st->conn, streams_on_close, st);
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
        answer_hand_over(s, hreq);
        evhttp_send_reply_end(hreq);
    } else if (finish == ENGINE_FINISH_ERROR) {
        openai_error error;
        openai_fail(&error, 500, "server_error", NULL, "%s", st->er.error);
        answer_error(s, hreq, &error);
    } else if (finish == ENGINE_FINISH_ABORT) {
        /* Cut by shutdown (or its client left, and nobody reads this): not an answer. A
         * stream says "abort" in its last chunk; a whole response has no such place. */
        char message[160];
        snprintf(message, sizeof message,
                 "the server shut down before the answer was complete (%d of %d tokens); "
                 "retry later",
                 st->completion_tokens, st->req.max_tokens);
        answer_unavailable(s, hreq, message);
    } else {
        char *body = openai_encode_response(
            &st->req, st->id, st->created, s->cfg.model_name, st->text.data, st->text.len,
            engine_finish_name(finish), ev->stop_index >= 0 ? st->req.stop[ev->stop_index] : NULL,
            st->completion_tokens, st->req.timestamps ? clock_now_ns() : -1, st->last_step);
        if (body && !st->text.failed)
            answer_body(s, hreq, 200, "application/json", body, strlen(body));
        else
            answer_error_text(s, hreq, 500, "server_error", "out of memory encoding the answer");
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
    m->prefix_queries = (uint64_t)info->prefix_queries_total;
    m->prefix_hits = (uint64_t)info->prefix_hits_total;
    m->kv_cells_occupied = info->kv_cells_occupied;
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

void streams_on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    server *s = arg;
    engine_event *events;
    size_t n = engine_poll(s->engine, &events);
    for (size_t i = 0; i < n; i++)
        on_event(s, &events[i]);
}

void streams_notify(void *arg)
{
    server *s = arg;
    event_active(s->wake_ev, EV_READ, 0);
}
