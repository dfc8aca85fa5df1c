/* routes — internal to server: the endpoints (server.h) and their handlers. A generation
 * request is parsed (openai.h), checked against the scheduler's own admission rules and
 * handed to the engine as a stream record (streams.h); /v1/models, /health and /metrics
 * are answered at once. */
#ifndef STALLSCOPE_SERVER_ROUTES_H
#define STALLSCOPE_SERVER_ROUTES_H
#include "server/http_state.h"

/* evhttp's callback for every request (evhttp_set_gencb; arg: the server). */
void routes_on_request(struct evhttp_request *hreq, void *arg);

#endif
