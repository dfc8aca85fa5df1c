/* tls — TLS for the raw transport (raw.c), through OpenSSL over memory BIOs: the transport
 * reads and writes the socket itself, so every read keeps its kernel receive stamp, and
 * hands the ciphertext in and out here. One context per client (certificate and host
 * checks unless insecure, TLS 1.2 at least, ALPN http/1.1), one session per connection.
 * A failure's words (why) are OpenSSL's, or the certificate check's. */
#ifndef STALLSCOPE_TLS_H
#define STALLSCOPE_TLS_H
#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

typedef struct tls_context tls_context;
typedef struct tls_session tls_session;

enum { TLS_CLOSED = -2, TLS_FAILED = -1, TLS_AGAIN = 0, TLS_DONE = 1 };

/* NULL with err ("TLS: ...", "TLS: no CA certificates: ...") when OpenSSL cannot make one. */
tls_context *tls_context_new(bool insecure, char *err);
void tls_context_free(tls_context *ctx);

/* A client session for host (SNI, and the certificate's name unless insecure), not yet
 * started. NULL when out of memory. */
tls_session *tls_session_new(tls_context *ctx, const char *host);
void tls_session_free(tls_session *s);
/* Ciphertext read from the socket, in. 0, or -1 when out of memory. */
int tls_session_put(tls_session *s, const char *data, size_t n);
/* The handshake's next step: TLS_DONE (done, now or before), TLS_AGAIN (it waits for the
 * peer's bytes), TLS_FAILED with why. */
int tls_session_handshake(tls_session *s, char *why, size_t why_size);
/* Plaintext out, into out[0, size): the bytes (> 0), TLS_AGAIN (more ciphertext wanted),
 * TLS_CLOSED (the peer's close_notify) or TLS_FAILED with why. */
int tls_session_read(tls_session *s, char *out, size_t size, char *why, size_t why_size);
/* Plaintext to send, taken whole (memory BIOs never block). 0, or -1 with why. */
int tls_session_write(tls_session *s, const char *data, size_t n, char *why, size_t why_size);
/* The ciphertext to send (handshake records, the request, a key update), appended to out.
 * 0, or -1 when out of memory. */
int tls_session_take(tls_session *s, buf *out);

#endif
