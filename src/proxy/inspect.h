/* inspect — what the proxy reads of a request, pure (no I/O): its head, rewritten for the
 * upstream, and its body, for whether it is a stream to observe and how long its prompt is.
 * Nothing of the body is kept: only lengths and flags leave here. */
#ifndef STALLSCOPE_PROXY_INSPECT_H
#define STALLSCOPE_PROXY_INSPECT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

/* Where requests go: the upstream as --upstream named it (client/url.h's url_split parts). */
typedef struct pinsp_upstream {
    const char *authority; /* the Host field's value */
    size_t authority_len;
    const char *path;      /* the base path put before every request's ("" none) */
    const char *basic;     /* "Basic ..." from credentials in the URL, "" none */
} pinsp_upstream;

typedef struct pinsp_head {
    char method[16];
    char path[512];      /* the request's path (no query), cut to fit: for the endpoint */
    int minor;           /* HTTP/1.minor of the client */
    bool keep_alive;     /* the client keeps the connection after this answer */
    bool expect_continue;/* it waits for "100 Continue" before its body */
    bool head_method;    /* HEAD: the answer has no body whatever it says */
} pinsp_head;

/* The head reqframe handed on (normal form: "METHOD target HTTP/1.x\r\n", "name: value\r\n"
 * lines, the empty line) rewritten for up into out: the base path before the target, the
 * client's HTTP version (an HTTP/1.1 answer to an HTTP/1.0 client could be chunked, and the
 * answer is forwarded as it comes), Host the upstream's, the hop-by-hop fields dropped
 * (Connection and the fields it names, all its fields one list, but never the body's
 * framing, Content-Length or Transfer-Encoding: the body goes on with it; Keep-Alive,
 * Proxy-Connection, Proxy-Authorization, TE, Trailer, Upgrade, Expect: the proxy answers
 * 100-continue itself, to HTTP/1.1 clients only), and the URL's credentials as Authorization
 * when the client sent none. Every other field goes on as it came. 0, or -1 when the head is
 * not in that form (or with more than 100 Connection fields) or out of memory. */
int pinsp_rewrite_head(const char *in, size_t len, const pinsp_upstream *up, buf *out,
                       pinsp_head *info);

typedef struct pinsp_body {
    bool stream;          /* "stream": true */
    bool observed;        /* a stream of /completions or /chat/completions: tokens are timed */
    int32_t prompt_tokens;/* the estimate, -1 unknown */
    bool exact;           /* the prompt was token ids: the count is exact */
    int64_t max_tokens;   /* max_tokens or max_completion_tokens, -1 absent */
} pinsp_body;

/* Read a POST body (JSON) for method/path. A body that is not JSON is not observed. The
 * estimate: token ids are counted; text is one token per PINSP_BYTES_PER_TOKEN bytes (chat:
 * every message's text content, plus PINSP_TOKENS_PER_MESSAGE each for the template). */
#define PINSP_BYTES_PER_TOKEN 4
#define PINSP_TOKENS_PER_MESSAGE 4
void pinsp_read_body(const pinsp_head *head, const char *body, size_t len, pinsp_body *out);

#endif
