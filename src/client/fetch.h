/* fetch — one blocking request, not streamed, through libcurl: /health, /v1/models, a
 * probe of /metrics, with the transport options' base URL, key and headers. */
#ifndef STALLSCOPE_FETCH_H
#define STALLSCOPE_FETCH_H
#include <stdint.h>

#include "client/transport.h"

/* A blocking request (not streamed) for /health, /v1/models and the like, with the same
 * base URL, key and headers. method "GET" or "POST" (body may be NULL). *status is the
 * HTTP status; *body_out (malloc'ed, NUL-terminated, caller frees) may be NULL. -1 with err
 * when no HTTP answer came (refused, timeout, TLS). */
int fetch_http(const transport_options *opt, const char *method, const char *path, const char *body,
               int64_t timeout_ns, int *status, char **body_out, char *err);

#endif
