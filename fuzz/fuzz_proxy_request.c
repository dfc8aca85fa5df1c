/* libFuzzer target: what `stallscope proxy` does with a client's bytes
 * (src/proxy/proxy_conns.c's px_down_input): the server's request framing (reqframe_next,
 * one step at a time, a request handed on whole once reqframe_at_boundary says so), each
 * head rewritten for the upstream
 * (pinsp_rewrite_head) and each body read (pinsp_read_body), pipelined requests in turn.
 *
 * Input: byte 0 picks the upstream (no base path and no credentials, or "/base" and Basic
 * credentials), byte 1 the body limit (0, 64, 4096, 2^20, 2^62), byte 2 seeds the split
 * points; the rest is what a client sends. It is fed whole, in pseudo-random pieces of 1..64
 * bytes and (up to 2 kB) one byte at a time, each time from an exact-size heap copy of the
 * bytes not consumed yet, so ASan catches a read past what a read() returned.
 * Promises checked:
 *  - every head the framing hands on is one the rewrite accepts (else the proxy would answer
 *    a well-framed request with its own 400);
 *  - the rewritten head: "METHOD <base><target> HTTP/1.x" with the client's version, one
 *    Host (the upstream's), no hop-by-hop field (Connection, Keep-Alive, Proxy-*, TE,
 *    Trailer, Upgrade, Expect), the client's Authorization fields as sent, else the URL's
 *    credentials when it has some, CRLF line ends only, the empty line at the end;
 *  - the request as forwarded (that head, the body and its framing), framed again by a fresh
 *    parser as the upstream would, is exactly one whole request: not a refusal, not cut
 *    short, and no second request in its body (a Connection field naming Content-Length
 *    once stripped the framing: the body reached the upstream as a request of its own);
 *  - what the body says is consistent: observed only for a POST stream to /completions or
 *    /chat/completions, a prompt estimate of -1 or more, exact only with a count;
 *  - the way bytes arrive changes nothing: the three runs rewrite the same heads, read the
 *    same bodies and stop at the same refusal. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/buf.h"
#include "pieces.h"
#include "proxy/inspect.h"
#include "server/reqframe.h"

static void die(const char *why)
{
    fprintf(stderr, "fuzz_proxy_request: %s\n", why);
    abort();
}

/* What one run did, in order: each exchange's rewritten head and body figures, then the
 * refusal's status (if any). Compared across the ways of cutting the input. */
typedef struct record {
    buf log;
    int exchanges;
    int refused;
} record;

static char frame_out[REQFRAME_OUT_MIN];
static char check_out[REQFRAME_OUT_MIN];

static bool field_is(const char *line, size_t len, const char *name)
{
    const size_t n = strlen(name);
    return len > n && line[n] == ':' && strncasecmp(line, name, n) == 0;
}

static void check_head(const char *head, size_t len, const pinsp_head *info,
                       const pinsp_upstream *up, int client_auths)
{
    if (len < 4 || memcmp(head + len - 4, "\r\n\r\n", 4) != 0)
        die("a rewritten head without its empty line");
    for (size_t i = 0; i < len; i++)
        if ((head[i] == '\r') != (i + 1 < len && head[i + 1] == '\n') ||
            (head[i] == '\n' && (i == 0 || head[i - 1] != '\r')))
            die("a bare CR or LF in a rewritten head");
    const size_t mlen = strlen(info->method);
    const size_t plen = strlen(up->path);
    if (mlen == 0 || memcmp(head, info->method, mlen) != 0 || head[mlen] != ' ' ||
        memcmp(head + mlen + 1, up->path, plen) != 0)
        die("the request line is not METHOD <base><target>");
    const char *eol = strstr(head, "\r\n");
    char version[16];
    snprintf(version, sizeof version, " HTTP/1.%d", info->minor);
    if (info->minor < 0 || info->minor > 9 || eol - head < 10 || memcmp(eol - 9, version, 9) != 0)
        die("the request line does not carry the client's version");
    int hosts = 0, auths = 0;
    static const char *const hop[] = {"connection", "keep-alive", "proxy-connection",
                                      "proxy-authorization", "te", "trailer", "upgrade", "expect"};
    for (const char *line = eol + 2; line < head + len - 2;) {
        const char *le = strstr(line, "\r\n");
        const size_t n = (size_t)(le - line);
        if (!memchr(line, ':', n))
            die("a field without a colon in a rewritten head");
        for (size_t k = 0; k < sizeof hop / sizeof hop[0]; k++)
            if (field_is(line, n, hop[k]))
                die("a hop-by-hop field forwarded");
        if (field_is(line, n, "host")) {
            hosts++;
            if (n != 6 + up->authority_len || memcmp(line + 6, up->authority, up->authority_len))
                die("Host is not the upstream's");
        }
        if (field_is(line, n, "authorization")) {
            auths++;
            const bool ours = n == 15 + strlen(up->basic) && memcmp(line + 15, up->basic, n - 15) == 0;
            if (client_auths == 0 && !ours)
                die("an Authorization that is neither the client's nor the URL's");
        }
        line = le + 2;
    }
    if (hosts != 1)
        die("not exactly one Host");
    if (auths != (client_auths > 0 ? client_auths : up->basic[0] ? 1 : 0))
        die("the URL's credentials not sent, or sent beside the client's");
}

/* The request as it goes upstream (the rewritten head, the body and its framing), framed by
 * a fresh parser as the upstream would: exactly one request, nothing left over (a body
 * that lost its framing would be a second request: smuggling). */
static void check_forwarded(const buf *req, uint64_t max_body)
{
    reqframe f;
    reqframe_init(&f, max_body);
    size_t at = 0;
    int heads = 0;
    while (at < req->len) {
        reqframe_step st;
        const reqframe_kind k =
            reqframe_next(&f, req->data + at, req->len - at, check_out, sizeof check_out, &st);
        if (k == REQFRAME_NEED_MORE)
            die("the forwarded request is cut short when framed again");
        if (k == REQFRAME_REFUSE)
            die("the forwarded request is refused when framed again");
        if (st.consumed == 0)
            die("a step that consumed nothing");
        heads += st.head;
        at += st.consumed;
        if (heads > 1)
            die("the forwarded bytes hold a second request (smuggling)");
    }
    if (heads != 1 || !reqframe_at_boundary(&f))
        die("the forwarded bytes are not exactly one whole request");
}

static bool ends_with(const char *s, const char *suffix)
{
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void check_body(const pinsp_head *h, const pinsp_body *b)
{
    if (b->observed && !b->stream)
        die("observed without stream");
    if (b->observed && (strcmp(h->method, "POST") != 0 || !ends_with(h->path, "/completions")))
        die("observed on a request that is not a POST to /completions or /chat/completions");
    if (b->prompt_tokens < -1)
        die("a prompt estimate below -1");
    if (b->exact && b->prompt_tokens < 1)
        die("exact without a count");
}

/* The Authorization fields of the client's head (normal form). */
static int authorizations(const char *head, size_t len)
{
    int n = 0;
    for (const char *line = memchr(head, '\n', len); line && line + 1 < head + len;
         line = memchr(line + 1, '\n', (size_t)(head + len - line - 1)))
        n += field_is(line + 1, (size_t)(head + len - line - 1), "authorization");
    return n;
}

static void run(const char *in, size_t len, const pinsp_upstream *up, uint64_t max_body,
                int piece_mode, uint32_t seed, record *rec)
{
    memset(rec, 0, sizeof *rec);
    reqframe rf;
    reqframe_init(&rf, max_body);
    buf req = {0}, body = {0};
    pinsp_head h;
    memset(&h, 0, sizeof h);
    bool in_request = false;
    uint32_t state = pieces_seed(seed);
    size_t kept = 0, upto = 0;
    while (upto < len && !rec->refused) {
        upto += pieces_next(piece_mode, &state, len - upto, 64);
        size_t n = upto - kept;
        char *copy = malloc(n ? n : 1);
        if (!copy)
            abort();
        memcpy(copy, in + kept, n);
        size_t off = 0;
        for (;;) {
            reqframe_step st;
            const reqframe_kind k =
                reqframe_next(&rf, copy + off, n - off, frame_out, sizeof frame_out, &st);
            if (k == REQFRAME_NEED_MORE)
                break;
            if (st.consumed > n - off)
                die("consumed more than it was given");
            off += st.consumed;
            if (k == REQFRAME_REFUSE) {
                rec->refused = st.status;
                buf_printf(&rec->log, "refused %d\n", st.status);
                break;
            }
            if (k == REQFRAME_EMIT && st.head) {
                buf_reset(&req);
                buf_reset(&body);
                if (pinsp_rewrite_head(frame_out, st.produced, up, &req, &h) != 0)
                    die("a head the framing handed on refused by the rewrite");
                check_head(req.data, req.len, &h, up, authorizations(frame_out, st.produced));
                in_request = true;
            } else if (k == REQFRAME_EMIT && st.produced > 0) {
                buf_append(&req, frame_out, st.produced);
            } else if (k == REQFRAME_BODY && st.forward) {
                buf_append(&req, copy + off - st.consumed, st.consumed);
                buf_append(&body, copy + off - st.consumed, st.consumed);
            }
            if (req.failed || body.failed)
                abort(); /* libFuzzer's malloc limit, not a finding */
            if (in_request && reqframe_at_boundary(&rf)) {
                check_forwarded(&req, max_body);
                pinsp_body b;
                pinsp_read_body(&h, body.data, body.len, &b);
                check_body(&h, &b);
                buf_append(&rec->log, req.data, req.len);
                buf_printf(&rec->log, "[%s %s 1.%d ka=%d ex=%d head=%d] body %zu: s=%d o=%d p=%d x=%d m=%lld\n",
                           h.method, h.path, h.minor, h.keep_alive, h.expect_continue,
                           h.head_method, body.len, b.stream, b.observed, b.prompt_tokens,
                           b.exact, (long long)b.max_tokens);
                rec->exchanges++;
                in_request = false;
            }
            if (off == n)
                break;
        }
        free(copy);
        kept += off;
    }
    buf_free(&req);
    buf_free(&body);
    if (rec->log.failed)
        abort();
}

static void same(const record *a, const record *b, const char *how)
{
    if (a->exchanges != b->exchanges || a->refused != b->refused || a->log.len != b->log.len ||
        (a->log.len && memcmp(a->log.data, b->log.data, a->log.len) != 0)) {
        fprintf(stderr, "fuzz_proxy_request: %s differs: %d exchanges, refused %d vs %d, %d\n",
                how, a->exchanges, a->refused, b->exchanges, b->refused);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    static const pinsp_upstream ups[] = {
        {"127.0.0.1:8000", 14, "", ""},
        {"up.example", 10, "/base", "Basic dXNlcjpzM2NyZXQ="},
    };
    static const uint64_t limits[] = {0, 64, 4096, 1 << 20, 1ULL << 62};
    const pinsp_upstream *up = &ups[data[0] % 2];
    const uint64_t max_body = limits[data[1] % 5];
    const uint32_t seed = data[2];
    const char *in = (const char *)data + 3;
    const size_t len = size - 3;

    record whole, pieces, bytewise;
    run(in, len, up, max_body, PIECES_WHOLE, seed, &whole);
    run(in, len, up, max_body, PIECES_RANDOM, seed, &pieces);
    same(&whole, &pieces, "pieces");
    if (len <= 2048) {
        run(in, len, up, max_body, PIECES_BYTEWISE, seed, &bytewise);
        same(&whole, &bytewise, "one byte at a time");
        buf_free(&bytewise.log);
    }
    buf_free(&whole.log);
    buf_free(&pieces.log);
    return 0;
}
