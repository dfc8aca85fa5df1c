/* libFuzzer target: the server's request framing (src/server/reqframe.c), which decides
 * what evhttp may see of a client's bytes.
 *
 * Input: byte 0 picks the body limit (0, 1, 64, 4096, 2^20, 2^62), byte 1 seeds the split
 * points, the rest is what a client sends. It is fed whole, in pseudo-random pieces of
 * 1..64 bytes and (up to 2 kB) one byte at a time, each time with every byte not consumed
 * yet, from an exact-size heap copy, so ASan catches a read past what a read() returned.
 * Promises checked:
 *  - the way bytes arrive changes nothing: the three runs hand evhttp the same bytes, the
 *    same number of requests, and refuse the same request with the same status and words;
 *  - a refusal is 400, 413, 414, 417, 431, 501 or 505 with a printable message;
 *  - the normal form is a fixed point: what went to evhttp, framed again, comes out
 *    unchanged with the same number of requests and no refusal;
 *  - every head handed on is one evhttp reads as we do: a method it knows, HTTP/1.0 or
 *    1.1, a target its own URI parser accepts (evhttp_uri_parse_with_flags, the call it
 *    makes), at most one framing field, no field twice where a duplicate would change the
 *    framing, no bare CR or LF. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>

#include "pieces.h"
#include "server/reqframe.h"

typedef struct record {
    char *bytes;
    size_t len, cap;
    int requests;
    int refused_index, status;
    char message[REQFRAME_MESSAGE_LEN];
} record;

static void die(const char *why)
{
    fprintf(stderr, "fuzz_reqframe: %s\n", why);
    abort();
}

static void sink_forward(void *ctx, const char *bytes, size_t n)
{
    record *r = ctx;
    if (r->len + n > r->cap) {
        size_t cap = r->cap ? r->cap : 1024;
        while (cap < r->len + n)
            cap *= 2;
        r->bytes = realloc(r->bytes, cap);
        if (!r->bytes)
            abort(); /* libFuzzer's malloc limit, not a finding */
        r->cap = cap;
    }
    memcpy(r->bytes + r->len, bytes, n);
    r->len += n;
}

static void sink_request(void *ctx)
{
    ((record *)ctx)->requests++;
}

static void sink_refused(void *ctx, int status, const char *message)
{
    record *r = ctx;
    if (r->refused_index >= 0)
        die("refused twice");
    r->refused_index = r->requests - 1;
    r->status = status;
    snprintf(r->message, sizeof r->message, "%s", message);
}

static char scratch[REQFRAME_OUT_MIN];

/* piece_mode: PIECES_WHOLE, PIECES_BYTEWISE, PIECES_RANDOM (pieces.h). */
static void run(const char *in, size_t len, uint64_t max_body, int piece_mode, uint32_t seed,
                record *out)
{
    memset(out, 0, sizeof *out);
    out->refused_index = -1;
    reqframe f;
    reqframe_init(&f, max_body);
    const reqframe_sink sink = {out, sink_forward, sink_request, sink_refused};
    uint32_t state = pieces_seed(seed);
    size_t kept = 0, upto = 0;
    while (upto < len) {
        upto += pieces_next(piece_mode, &state, len - upto, 64);
        const size_t n = upto - kept;
        char *copy = malloc(n);
        if (!copy)
            abort();
        memcpy(copy, in + kept, n);
        const size_t used = reqframe_feed(&f, copy, n, scratch, sizeof scratch, &sink);
        free(copy);
        if (used > n)
            die("consumed more than it was given");
        kept += used;
    }
}

static void same(const record *a, const record *b, const char *how)
{
    if (a->len != b->len || (a->len && memcmp(a->bytes, b->bytes, a->len) != 0) ||
        a->requests != b->requests || a->refused_index != b->refused_index ||
        a->status != b->status || strcmp(a->message, b->message) != 0) {
        fprintf(stderr, "fuzz_reqframe: %s differs: %zu bytes, %d requests, refused #%d %d '%s' vs "
                        "%zu, %d, #%d %d '%s'\n",
                how, a->len, a->requests, a->refused_index, a->status, a->message, b->len,
                b->requests, b->refused_index, b->status, b->message);
        abort();
    }
}

static bool starts_nocase(const char *s, size_t n, const char *lit)
{
    const size_t m = strlen(lit);
    if (n < m)
        return false;
    for (size_t i = 0; i < m; i++)
        if ((s[i] | 0x20) != (lit[i] | 0x20))
            return false;
    return true;
}

/* A head in normal form, as evhttp will read it. */
static void check_head(const char *h, size_t n)
{
    static const char *const methods[] = {"GET ",     "POST ",  "HEAD ",  "PUT ", "DELETE ",
                                          "OPTIONS ", "TRACE ", "PATCH "};
    bool known = false;
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        known |= n > strlen(methods[i]) && memcmp(h, methods[i], strlen(methods[i])) == 0;
    if (!known)
        die("a head with a method evhttp does not know");
    const char *eol = memchr(h, '\r', n);
    if (!eol || eol + 1 >= h + n || eol[1] != '\n' || eol - h < 11)
        die("a request line without CRLF");
    if (memcmp(eol - 9, " HTTP/1.1", 9) != 0 && memcmp(eol - 9, " HTTP/1.0", 9) != 0)
        die("a request line without HTTP/1.0 or 1.1");
    const char *target = memchr(h, ' ', (size_t)(eol - h)) + 1;
    const size_t target_len = (size_t)(eol - 9 - target);
    char uri[REQFRAME_MAX_HEAD + 1];
    if (target_len == 0 || target_len > REQFRAME_MAX_HEAD || memchr(target, ' ', target_len))
        die("a malformed target");
    memcpy(uri, target, target_len);
    uri[target_len] = '\0';
    struct evhttp_uri *parsed = evhttp_uri_parse_with_flags(uri, EVHTTP_URI_NONCONFORMANT);
    if (!parsed)
        die("a target evhttp's URI parser refuses");
    evhttp_uri_free(parsed);
    int framing = 0;
    for (size_t i = 0; i < n; i++) {
        if ((h[i] == '\r') != (i + 1 < n && h[i + 1] == '\n'))
            die("a bare CR or LF in a head handed on");
        if (h[i] == '\n' && i + 1 < n) {
            const char *line = h + i + 1;
            const size_t left = n - i - 1;
            if (line[0] == ' ' || line[0] == '\t')
                die("a folded line handed on");
            framing += starts_nocase(line, left, "content-length:") ||
                       starts_nocase(line, left, "transfer-encoding:");
        }
    }
    if (framing > 1)
        die("two framing fields handed on");
}

/* Frame the forwarded bytes again with reqframe_next, looking at every head. */
static void refeed(const record *first, uint64_t max_body)
{
    reqframe f;
    reqframe_init(&f, max_body);
    record again;
    memset(&again, 0, sizeof again);
    again.refused_index = -1;
    size_t at = 0;
    for (size_t round = 0; round <= first->len && at < first->len; round++) {
        reqframe_step step;
        const reqframe_kind kind =
            reqframe_next(&f, first->bytes + at, first->len - at, scratch, sizeof scratch, &step);
        if (kind == REQFRAME_NEED_MORE)
            break;
        if (kind == REQFRAME_REFUSE)
            die("the normal form is refused when framed again");
        if (kind == REQFRAME_BODY && step.forward)
            sink_forward(&again, first->bytes + at, step.consumed);
        else if (step.produced)
            sink_forward(&again, scratch, step.produced);
        if (step.head) {
            check_head(scratch, step.produced);
            again.requests++;
        }
        if (step.consumed == 0)
            die("a step that consumed nothing");
        at += step.consumed;
    }
    if (again.len != first->len || (first->len && memcmp(again.bytes, first->bytes, first->len)) ||
        again.requests != first->requests)
        die("the normal form is not a fixed point");
    free(again.bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    static const uint64_t limits[] = {0, 1, 64, 4096, 1 << 20, 1ULL << 62};
    const uint64_t max_body = limits[data[0] % 6];
    const uint32_t seed = data[1];
    const char *in = (const char *)data + 2;
    const size_t len = size - 2;

    record whole, pieces, bytewise;
    run(in, len, max_body, PIECES_WHOLE, seed, &whole);
    run(in, len, max_body, PIECES_RANDOM, seed, &pieces);
    same(&whole, &pieces, "pieces");
    if (len <= 2048) {
        run(in, len, max_body, PIECES_BYTEWISE, seed, &bytewise);
        same(&whole, &bytewise, "one byte at a time");
        free(bytewise.bytes);
    }
    if (whole.refused_index >= 0) {
        static const int statuses[] = {400, 413, 414, 417, 431, 501, 505};
        bool known = false;
        for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++)
            known |= whole.status == statuses[i];
        if (!known || whole.message[0] == '\0')
            die("a refusal with an unexpected status or no message");
        for (const char *c = whole.message; *c; c++)
            if (*c < 0x20 || *c > 0x7e)
                die("a refusal message that is not printable ASCII");
    }
    refeed(&whole, max_body);
    free(whole.bytes);
    free(pieces.bytes);
    return 0;
}
