/* answer — whole answers and the end of the loop (answer.h). */
#include "server/answer.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>

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
void answer_exit_if_done(server *s)
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
    answer_exit_if_done(s);
}

void answer_hand_over(server *s, struct evhttp_request *hreq)
{
    evhttp_request_set_on_complete_cb(hreq, on_reply_complete, s);
}

void answer_body(server *s, struct evhttp_request *hreq, int status,
                      const char *content_type, const char *body, size_t len)
{
    struct evkeyvalq *headers = evhttp_request_get_output_headers(hreq);
    evhttp_add_header(headers, "Content-Type", content_type);
    evbuffer_add(s->out, body, len);
    answer_hand_over(s, hreq);
    evhttp_send_reply(hreq, status, reason_phrase(status), s->out);
    evbuffer_drain(s->out, evbuffer_get_length(s->out));
}

void answer_error(server *s, struct evhttp_request *hreq, const openai_error *error)
{
    char *body = openai_error_body(error);
    const char *fallback = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                           "\"param\":null,\"code\":500}}";
    if (error->status == 401)
        evhttp_add_header(evhttp_request_get_output_headers(hreq), "WWW-Authenticate", "Bearer");
    answer_body(s, hreq, body ? error->status : 500, "application/json", body ? body : fallback,
              strlen(body ? body : fallback));
    free(body);
}

void answer_error_text(server *s, struct evhttp_request *hreq, int status,
                            const char *type, const char *message)
{
    openai_error error;
    openai_fail(&error, status, type, NULL, "%s", message);
    answer_error(s, hreq, &error);
}

/* 503 with Retry-After: the server is going away (a client should retry elsewhere or
 * after a restart), as the 429 of a full queue says when to come back. */
void answer_unavailable(server *s, struct evhttp_request *hreq, const char *message)
{
    evhttp_add_header(evhttp_request_get_output_headers(hreq), "Retry-After", "1");
    answer_error_text(s, hreq, 503, "server_error", message);
}
