/* raw — the default transport: our own HTTP/1.1 client on sockets it owns, so each token
 * can carry the kernel's receive time of the bytes that brought it.
 *
 * One thread, one epoll loop (raw.c: requests in and out, timeouts, the table of
 * transport.h). Every socket has SO_TIMESTAMPNS on; each read is a recvmsg whose control
 * message holds the kernel's software receive stamp (CLOCK_REALTIME), mapped to the run's
 * CLOCK_MONOTONIC with the realtime - monotonic offset (clock_realtime_offset_ns) sampled at
 * the wake-up (docs/explanation/timestamps.md). Where a read carries no stamp, the time is taken
 * right after it (TRANSPORT_STAMP_USER). As in the curl transport, all ready sockets are
 * read and stamped first; splitting and decoding come after (reply.h).
 *
 * HTTP/1.1 (http1.h): a POST with Host, Content-Length and the options' headers; responses
 * framed by Content-Length, chunked transfer coding or the server's close; 1xx skipped;
 * connections (raw_conn.c) kept alive and reused (a pool per client: one target), one
 * request at a time each; a reused connection that the server closed before answering is
 * retried once on a new one. https:// goes through OpenSSL with memory BIOs (tls.h): the
 * socket reads, and so their stamps, stay ours. The target's user:password@ goes as
 * Authorization: Basic (an API key, a bearer token, wins), its query after each request's
 * path (url.h). Proxies, HTTP/2 and other auth are the curl transport's. */
#ifndef STALLSCOPE_RAW_H
#define STALLSCOPE_RAW_H
#include <stdint.h>

#include "client/transport.h"

typedef struct raw_client raw_client;

/* Parses the base URL (http:// or https://) and resolves its host once. NULL with err. */
raw_client *raw_create(const transport_options *opt, char *err);
/* Abort whatever is running (no callbacks), close every connection, free. */
void raw_free(raw_client *c);
transport raw_client_transport(raw_client *c);

int raw_post(raw_client *c, const transport_request *req, char *err);
int raw_run(raw_client *c, int64_t until_ns, char *err);
void raw_cancel_all(raw_client *c, const char *reason);
int raw_active(const raw_client *c);
void raw_get_stats(const raw_client *c, transport_stats *out);

/* Connections opened and requests sent on a reused one, since creation (keep-alive). */
typedef struct raw_conn_stats {
    int64_t opened;
    int64_t reused;
    int64_t retried; /* requests sent again after a reused connection closed unanswered */
} raw_conn_stats;
void raw_get_conn_stats(const raw_client *c, raw_conn_stats *out);

#endif
