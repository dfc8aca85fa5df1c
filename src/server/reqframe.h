/* reqframe — strict HTTP/1.1 request framing (RFC 9112) for the bytes a client sends,
 * checked before evhttp sees them.
 *
 * evhttp 2.1 is lenient where leniency lets one connection mean two different things to
 * two parsers (request smuggling): it takes the first of two Content-Length fields, reads
 * "+31" as 31, answers HTTP/1.2 as if it were 1.1, folds continuation lines, accepts a
 * bare LF, and treats a body it does not expect (GET with Content-Length) as the next
 * request. It also answers some refusals itself with an HTML page (chunk extensions, an
 * unknown method, an unknown Expect, a body over its limit). This parser is the one place
 * where a request's framing is decided. conns.c runs it over every byte a connection
 * receives and hands evhttp only what it produced: well-formed requests in a normal form
 * whose framing evhttp cannot read differently. What it refuses never reaches evhttp;
 * instead the parser produces a stand-in that evhttp completes as one more request, and
 * the server answers that request with the refusal as an OpenAI-style JSON error and
 * closes the connection. Pipelined requests before the bad one are answered first, in
 * order.
 *
 * Accepted (everything else is refused, status in brackets):
 *   request line   method SP request-target SP HTTP-version CRLF, single spaces
 *                  [400]; leading empty lines are skipped (RFC 9112 2.2)
 *   version        HTTP/1.0 and HTTP/1.1; another well-formed HTTP/x.y [505]
 *   method         a token evhttp knows (GET POST HEAD PUT DELETE OPTIONS TRACE PATCH)
 *                  [501 for other tokens and CONNECT: the server is no proxy]
 *   target         origin-form "/path?query" of RFC 3986 characters (pchar, "/", "?",
 *                  "%" HEXDIG HEXDIG), absolute-form "http(s)://authority/path?query"
 *                  (handed on in origin-form), "*" for OPTIONS [400]; not a path starting
 *                  with "//", which evhttp's URI parser reads as "//authority" and refuses
 *                  with its own HTML page [400] (found by fuzz_reqframe)
 *   line ends      CRLF only: a bare LF or bare CR anywhere in the head [400]; a control
 *                  character (other than HTAB in a value) or DEL in the head [400]
 *   fields         token ":" OWS value OWS; no space before the colon, no obs-fold [400];
 *                  at most REQFRAME_MAX_FIELDS [431]; the head at most REQFRAME_MAX_HEAD
 *                  bytes [431, or 414 when the request line alone does not fit]
 *   Host           exactly one in HTTP/1.1, at most one in 1.0, of host characters [400]
 *   Content-Length one field, 1*DIGIT [400]; over max_body [413]
 *   Transfer-Encoding  one field whose value is "chunked" [400]; a list ending in chunked
 *                  with other codings [501]; with Content-Length, or in HTTP/1.0 [400]
 *   Expect         (HTTP/1.1) only 100-continue [417]
 *   chunked body   chunk-size in hex, chunk extensions (";name[=value]", token or
 *                  quoted-string) accepted and dropped, CRLF after each chunk's data,
 *                  trailer fields checked like header fields and dropped [400]; a chunk
 *                  line over REQFRAME_MAX_CHUNK_LINE [400]; the body over max_body [413]
 *
 * Normal form handed on: the request line (absolute-form reduced to origin-form), every
 * field as "name: value" with the value's surrounding whitespace removed, Content-Length
 * and Transfer-Encoding replaced by one canonical framing field: "Content-Length: N"
 * (also "Content-Length: 0" for a POST, PUT or PATCH without a body, which evhttp
 * otherwise refuses when a Connection field is present), or "Transfer-Encoding:
 * chunked" with chunks re-framed as "<hex>\r\n<data>\r\n" ... "0\r\n\r\n". evhttp 2.1 reads no
 * body for HEAD and TRACE (later versions read one only for POST, PUT and PATCH) and parses
 * such a body as the next request; here the body of any method but POST, PUT and PATCH is
 * read and dropped, and its framing fields are not handed on.
 *
 * A pure function over the caller's buffer (picohttpparser's habit): reqframe_next looks
 * at in[0..len), the bytes not consumed yet, and returns what it recognised with the
 * bytes consumed; REQFRAME_NEED_MORE consumes nothing and asks to be called again with the
 * same bytes and more after them. It allocates nothing and keeps no pointer into in. The
 * head is checked byte by byte as it arrives (a NUL in the first byte is refused at once)
 * and never rescanned, so a head sent a byte at a time costs O(n). Given at least
 * REQFRAME_MAX_HEAD + 1 bytes it never asks for more. */
#ifndef STALLSCOPE_REQFRAME_H
#define STALLSCOPE_REQFRAME_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REQFRAME_MAX_HEAD (64 * 1024) /* request line + fields + the empty line */
#define REQFRAME_MAX_FIELDS 100       /* as Apache's LimitRequestFields */
#define REQFRAME_MAX_CHUNK_LINE 4096  /* chunk-size line with its extensions */
/* out must hold this much: a head in normal form is at most one byte per field longer
 * than as received (a space after the colon), plus the framing field. */
#define REQFRAME_OUT_MIN (REQFRAME_MAX_HEAD + REQFRAME_MAX_FIELDS + 64)
#define REQFRAME_MESSAGE_LEN 200

/* The stand-in request produced for a refusal at a request boundary. */
#define REQFRAME_STANDIN_PATH "/.stallscope-refused"

typedef enum {
    REQFRAME_NEED_MORE, /* consumed nothing: call again with these bytes and more */
    REQFRAME_EMIT,      /* consumed; hand on out[0..produced) (may be empty) */
    REQFRAME_BODY,      /* consumed body bytes: hand on in[0..consumed) unchanged when
                           forward, else drop them */
    REQFRAME_REFUSE,    /* the request is refused (status, message): hand on
                           out[0..produced), which completes one request for evhttp, the
                           refused one; drop everything after */
    REQFRAME_DISCARD,   /* after a refusal: drop in[0..consumed) */
} reqframe_kind;

typedef struct reqframe_step {
    reqframe_kind kind;
    size_t consumed;
    size_t produced;
    bool forward; /* REQFRAME_BODY */
    /* out holds the head of a request (EMIT, or the stand-in of a REFUSE): one more
     * request handed on. After a REFUSE, the refused request is the last one handed on. */
    bool head;
    int status; /* REQFRAME_REFUSE: the HTTP status */
    char message[REQFRAME_MESSAGE_LEN]; /* REQFRAME_REFUSE: why, printable ASCII */
} reqframe_step;

/* Parser state between calls (one per connection). Fields are private. */
typedef struct reqframe {
    int state;
    uint64_t max_body;
    /* the unit being checked (head, chunk line, trailer section) */
    size_t scanned;    /* bytes of it already checked */
    size_t line_start; /* where its current line starts */
    int lines;         /* complete lines so far */
    /* what the head's complete lines said */
    int minor; /* HTTP/1.minor */
    int method;
    size_t target_from, target_to; /* the origin-form target, offsets into the head */
    int n_host, n_length, n_coding;
    bool chunked;
    uint64_t content_length;
    /* the body */
    bool forward_body;
    uint64_t remaining; /* of the length body, or of the current chunk */
    uint64_t body_bytes;
    uint64_t requests; /* heads handed on */
} reqframe;

/* Where reqframe_feed puts what it recognised, in order. */
typedef struct reqframe_sink {
    void *ctx;
    void (*forward)(void *ctx, const char *bytes, size_t n); /* for evhttp */
    void (*request)(void *ctx); /* a request's head (or a stand-in) was just forwarded */
    /* The last request forwarded is refused: answer it with status and message, then
     * close. Nothing is forwarded after. */
    void (*refused)(void *ctx, int status, const char *message);
} reqframe_sink;

/* max_body: the largest body accepted (413 above it). */
void reqframe_init(reqframe *f, uint64_t max_body);

/* Recognise the next unit of in[0..len) (step says what to do with it, see above). out:
 * at least REQFRAME_OUT_MIN bytes. Returns step->kind. */
reqframe_kind reqframe_next(reqframe *f, const char *in, size_t len, char *out, size_t out_cap,
                            reqframe_step *step);

/* Whether f is between requests: every request handed on so far is complete, head and body
 * (false inside a head or a body, and after a refusal). A proxy that sends each request on
 * whole asks after each step. */
bool reqframe_at_boundary(const reqframe *f);

/* reqframe_next over in[0..len) until it needs more, handing the results to sink (out as
 * above, scratch for the normal form). Returns the bytes consumed: the caller keeps
 * in[consumed..len) and calls again once more bytes follow them. */
size_t reqframe_feed(reqframe *f, const char *in, size_t len, char *out, size_t out_cap,
                     const reqframe_sink *sink);

#endif
