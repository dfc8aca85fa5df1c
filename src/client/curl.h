/* curl — the libcurl transport (transport.h): libcurl's multi interface driven by our own
 * epoll loop (curl_multi_socket_action: O(ready sockets) per wake-up), for what the raw
 * transport does not do (proxies, HTTP/2, other auth). Its stamps are taken in user space:
 * the moment epoll reported the socket readable (TRANSPORT_STAMP_USER).
 *
 * Names: curlt_ ("curl transport"), not curl_: libcurl owns every curl_* name
 * (curl_easy_*, curl_multi_*, curl_global_*), and one of ours there could collide with one
 * of a later libcurl. */
#ifndef STALLSCOPE_CURL_H
#define STALLSCOPE_CURL_H
#include <stdint.h>

#include "client/transport.h"

typedef struct curlt_client curlt_client;

curlt_client *curlt_create(const transport_options *opt, char *err);
/* Abort whatever is running (no callbacks) and free everything. */
void curlt_free(curlt_client *c);
transport curlt_client_transport(curlt_client *c);

int curlt_post(curlt_client *c, const transport_request *req, char *err);
int curlt_run(curlt_client *c, int64_t until_ns, char *err);
void curlt_cancel_all(curlt_client *c, const char *reason);
int curlt_active(const curlt_client *c);
void curlt_get_stats(const curlt_client *c, transport_stats *out);

/* For the blocking requests of fetch.h: libcurl set up (once per process), and the headers
 * every request sends (Content-Type, Accept, Accept-Encoding: identity, the API key, the
 * options' own). NULL with err (a header that is not "Name: value", out of memory); free
 * with curl_slist_free_all. */
struct curl_slist;
void curlt_global_init(void);
struct curl_slist *curlt_headers(const transport_options *opt, char *err);

#endif
