/* http1 — an HTTP/1.1 response parser for the raw transport, in two pure parts
 * (picohttpparser style: caller-owned buffers and state, no allocation, no I/O).
 *
 * 1. http1_parse_head: a response's status line and header fields, from a buffer holding
 *    what has arrived so far. It returns the head's length once the blank line ending it is
 *    in the buffer, HTTP1_NEED_MORE before, HTTP1_ERROR for a head that is not HTTP/1.x or
 *    is larger than HTTP1_MAX_HEAD. It keeps what the client needs: the status, the body's
 *    framing (Content-Length, Transfer-Encoding: chunked, or until close — RFC 9112 6.3),
 *    whether the connection can be reused, and the fields that say what the answer is
 *    (Retry-After, Location, Content-Encoding, Content-Type).
 *
 * 2. http1_body_feed: the body, fed whatever a read returned; it hands back spans of body
 *    bytes inside the caller's input (no copy), one at a time, and says when the body ended.
 *    Chunked transfer coding (sizes in hex, chunk extensions and trailer fields skipped),
 *    a Content-Length, or everything until the server closes.
 *
 * Both give the same answer however the bytes are split across reads (tested one byte at
 * a time and against a page guard; fuzzed by fuzz/fuzz_http1.c). */
#ifndef STALLSCOPE_HTTP1_H
#define STALLSCOPE_HTTP1_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define HTTP1_MAX_HEAD (64 * 1024) /* a response head larger than this is refused */

enum { HTTP1_NEED_MORE = -2, HTTP1_ERROR = -1 };

/* How the body ends (RFC 9112 6.3). */
typedef enum http1_framing {
    HTTP1_BODY_NONE = 0,   /* 1xx, 204, 304: no body at all */
    HTTP1_BODY_LENGTH,     /* Content-Length bytes */
    HTTP1_BODY_CHUNKED,    /* Transfer-Encoding ending in chunked */
    HTTP1_BODY_UNTIL_CLOSE /* neither: the body is everything until the server closes */
} http1_framing;

typedef struct http1_response {
    int minor_version;      /* HTTP/1.x */
    int status;             /* 100..999 */
    http1_framing framing;
    int64_t content_length; /* HTTP1_BODY_LENGTH: the length; -1 otherwise */
    bool keep_alive;        /* the connection may carry the next request once this body ends */
    /* Field values, trimmed, "" without the field; a longer value is cut to the size (the
     * caller says so: a cut Retry-After fails to parse, a cut Location is shown cut). */
    char retry_after[64];
    char location[256];
    char content_encoding[64];
    char content_type[64];
    char error[96];         /* why HTTP1_ERROR (static text and numbers only) */
} http1_response;

/* Parse the head at in[0, len). Returns its length (status line, fields and the blank line)
 * with *out filled, HTTP1_NEED_MORE when the blank line has not arrived yet, HTTP1_ERROR with
 * out->error filled. A caller that reads more calls it again with the longer buffer. */
ssize_t http1_parse_head(const char *in, size_t len, http1_response *out);

/* Incremental body state. */
typedef struct http1_body {
    http1_framing framing;
    int state;           /* internal */
    uint64_t remaining;  /* bytes of the current chunk (or of the whole body) still to come */
    int size_digits;     /* hex digits of the chunk size line */
    size_t line_len;     /* bytes of the current chunk-size or trailer line */
    bool done;
} http1_body;

enum { HTTP1_BODY_MORE = 0, HTTP1_BODY_DATA = 1, HTTP1_BODY_END = 2 };

void http1_body_init(http1_body *b, const http1_response *head);

/* Feed in[0, len). Returns
 *   HTTP1_BODY_DATA: *data / *data_len is a span of body bytes inside in[0, *consumed);
 *   HTTP1_BODY_END:  the body is complete after *consumed bytes (the rest belongs to the
 *                    next response on the connection);
 *   HTTP1_BODY_MORE: all len bytes were used, no body bytes among them;
 *   HTTP1_ERROR:     bad chunked framing (*consumed bytes were fine).
 * Call again with the rest while bytes remain. An UNTIL_CLOSE body never ends here: the
 * server's close ends it (http1_body_complete_at_close). */
int http1_body_feed(http1_body *b, const char *in, size_t len, size_t *consumed,
                    const char **data, size_t *data_len);

/* Whether the server closing the connection now leaves the body complete (true only for
 * an UNTIL_CLOSE body, or one that already ended). */
bool http1_body_complete_at_close(const http1_body *b);

#endif
