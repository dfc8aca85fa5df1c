/* answer — internal to server: whole answers on the loop thread (a body, an OpenAI-style
 * JSON error, a 503 that says the server is going away), the hand-over of a reply to evhttp,
 * and the end of the loop once a shutdown's live work is done. */
#ifndef STALLSCOPE_SERVER_ANSWER_H
#define STALLSCOPE_SERVER_ANSWER_H
#include <stddef.h>

#include "server/http_state.h"

/* Shutting down: end the loop when no stream is left and no reply bytes wait for a live
 * connection. Otherwise nothing. */
void answer_exit_if_done(server *s);
/* From now on evhttp tells the server when hreq's reply is written whole (its connection's
 * next request gets a deadline; a shutdown may end). */
void answer_hand_over(server *s, struct evhttp_request *hreq);
/* The whole reply: status, Content-Type and body. */
void answer_body(server *s, struct evhttp_request *hreq, int status, const char *content_type,
                const char *body, size_t len);
/* error as openai.h's JSON body with its status (401: with WWW-Authenticate: Bearer); a
 * 500 "out of memory" body when it cannot be encoded. */
void answer_error(server *s, struct evhttp_request *hreq, const openai_error *error);
void answer_error_text(server *s, struct evhttp_request *hreq, int status, const char *type,
                      const char *message);
/* 503 with Retry-After: 1. */
void answer_unavailable(server *s, struct evhttp_request *hreq, const char *message);

#endif
