/* reqframe: strict request framing. Every case is fed three ways — whole, one byte at a
 * time, and ending exactly at a page guard (a read past the input faults) — and must give
 * the same bytes for evhttp and the same refusal each way; what was handed on, framed
 * again, must come out unchanged and accepted (the normal form is a fixed point). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/reqframe.h"

#define MAX_BODY 1000

typedef struct result {
    char *out; /* what evhttp gets */
    size_t len, cap;
    int requests;      /* heads forwarded (stand-ins included) */
    int refused_index; /* the refused request's index among them, -1: none */
    int status;
    char message[REQFRAME_MESSAGE_LEN];
} result;

static void sink_forward(void *ctx, const char *bytes, size_t n)
{
    result *r = ctx;
    assert_true(r->len + n <= r->cap);
    memcpy(r->out + r->len, bytes, n);
    r->len += n;
}

static void sink_request(void *ctx)
{
    ((result *)ctx)->requests++;
}

static void sink_refused(void *ctx, int status, const char *message)
{
    result *r = ctx;
    assert_int_equal(r->refused_index, -1); /* refused once at most */
    r->refused_index = r->requests - 1;
    r->status = status;
    snprintf(r->message, sizeof r->message, "%s", message);
}

static char scratch[REQFRAME_OUT_MIN];

/* Room for what in_len bytes can become: a normal form is at most one byte per field
 * longer, plus a framing field or a stand-in request. */
static void result_init(result *r, size_t in_len)
{
    memset(r, 0, sizeof *r);
    r->cap = 2 * in_len + 256;
    r->out = malloc(r->cap);
    assert_non_null(r->out);
    r->refused_index = -1;
}

/* Feed in[0..len) in pieces of `piece` bytes (0: whole), each time with every byte not
 * consumed yet, from an exact-size heap copy (ASan sees a read past it). */
static void run(const char *in, size_t len, size_t piece, result *r)
{
    result_init(r, len);
    reqframe f;
    reqframe_init(&f, MAX_BODY);
    const reqframe_sink sink = {r, sink_forward, sink_request, sink_refused};
    size_t kept_from = 0; /* in[kept_from..upto) is pending */
    size_t upto = 0;
    while (upto < len) {
        upto = piece == 0 || len - upto < piece ? len : upto + piece;
        const size_t n = upto - kept_from;
        char *copy = malloc(n ? n : 1);
        assert_non_null(copy);
        memcpy(copy, in + kept_from, n);
        kept_from += reqframe_feed(&f, copy, n, scratch, sizeof scratch, &sink);
        free(copy);
    }
}

/* Whole, at the end of a readable page followed by an unreadable one. */
static void run_at_guard(const char *in, size_t len, result *r)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t span = (len + page - 1) / page * page;
    char *map = mmap(NULL, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + span, page, PROT_NONE), 0);
    char *at = map + span - len;
    memcpy(at, in, len);
    result_init(r, len);
    reqframe f;
    reqframe_init(&f, MAX_BODY);
    const reqframe_sink sink = {r, sink_forward, sink_request, sink_refused};
    reqframe_feed(&f, at, len, scratch, sizeof scratch, &sink);
    munmap(map, span + page);
}

static void assert_same(const result *a, const result *b, const char *how)
{
    if (a->len != b->len || memcmp(a->out, b->out, a->len) != 0)
        fail_msg("%s: different bytes for evhttp (%zu vs %zu)", how, a->len, b->len);
    if (a->requests != b->requests || a->refused_index != b->refused_index ||
        a->status != b->status || strcmp(a->message, b->message) != 0)
        fail_msg("%s: %d requests, refused #%d %d '%s' vs %d, #%d %d '%s'", how, a->requests,
                 a->refused_index, a->status, a->message, b->requests, b->refused_index, b->status,
                 b->message);
}

/* The case's verdict, the same whichever way it is fed; out/status/index as expected
 * (expected_out NULL: not compared). Returns nothing: every check asserts. */
static void check(const char *in, size_t len, const char *expected_out, int requests, int status,
                  int refused_index)
{
    result whole, bytewise, guarded, again;
    run(in, len, 0, &whole);
    run(in, len, 1, &bytewise);
    run_at_guard(in, len, &guarded);
    assert_same(&whole, &bytewise, "one byte at a time");
    assert_same(&whole, &guarded, "at a page guard");
    if (expected_out && (whole.len != strlen(expected_out) ||
                         memcmp(whole.out, expected_out, whole.len) != 0))
        fail_msg("for evhttp:\n%.*s\nwanted:\n%s", (int)whole.len, whole.out, expected_out);
    if (whole.requests != requests || whole.status != status ||
        whole.refused_index != refused_index)
        fail_msg("%d requests, refused #%d with %d (%s); wanted %d, #%d with %d", whole.requests,
                 whole.refused_index, whole.status, whole.message, requests, refused_index,
                 status);
    if (status)
        assert_true(strlen(whole.message) > 0);
    /* The normal form is a fixed point: framed again it is unchanged and accepted. */
    run(whole.out, whole.len, 0, &again);
    if (again.len != whole.len || memcmp(again.out, whole.out, whole.len) != 0)
        fail_msg("normal form not stable:\n%.*s\nbecame\n%.*s", (int)whole.len, whole.out,
                 (int)again.len, again.out);
    assert_int_equal(again.refused_index, -1);
    assert_int_equal(again.requests, whole.requests);
    free(whole.out), free(bytewise.out), free(guarded.out), free(again.out);
}

static void ok(const char *in, const char *expected_out, int requests)
{
    check(in, strlen(in), expected_out, requests, 0, -1);
}

static void refused(const char *in, int status, int requests)
{
    check(in, strlen(in), NULL, requests, status, requests - 1);
}

#define STANDIN "GET " REQFRAME_STANDIN_PATH " HTTP/1.1\r\nHost: stallscope\r\nConnection: close\r\n\r\n"

/* ---- the smuggling vectors of issue 15 -------------------------------------------------- */

static void test_conflicting_lengths(void **state)
{
    (void)state;
    /* Two different Content-Length: evhttp took the first and read the rest of the second's
     * body as a second request. Refused before anything reaches evhttp. */
    const char *in = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 31\r\n"
                     "Content-Length: 67\r\n\r\n{\"prompt\":\"hi\",\"max_tokens\":2}"
                     "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    check(in, strlen(in), STANDIN, 1, 400, 0);
    refused("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
            400, 1);
    refused("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\nhello", 400, 1);
}

static void test_signed_and_odd_lengths(void **state)
{
    (void)state;
    refused("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello", 400, 1);
    refused("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400, 1);
    refused("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x5\r\n\r\n", 400, 1);
    refused("POST / HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n", 400, 1);
    refused("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n", 413, 1);
    refused("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413,
            1);
    /* Leading zeros are digits; surrounding whitespace is not part of the value. */
    ok("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: \t0005 \r\n\r\nhelloGET /b HTTP/1.1\r\n"
       "Host: y\r\n\r\n",
       "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\n"
       "Host: y\r\n\r\n",
       2);
}

static void test_versions(void **state)
{
    (void)state;
    refused("GET / HTTP/1.2\r\nHost: x\r\n\r\n", 505, 1);
    refused("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505, 1);
    refused("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, 1);
    refused("GET / HTTP/0.9\r\nHost: x\r\n\r\n", 505, 1);
    refused("GET / HTTP/1.10\r\nHost: x\r\n\r\n", 400, 1);
    refused("GET / http/1.1\r\nHost: x\r\n\r\n", 400, 1);
    refused("GET /\r\n\r\n", 400, 1); /* HTTP/0.9 */
    refused("GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400, 1);
    refused("GET / HTTP/1.1 \r\nHost: x\r\n\r\n", 400, 1);
    ok("GET /health HTTP/1.0\r\n\r\n", "GET /health HTTP/1.0\r\n\r\n", 1);
}

static void test_chunk_extensions(void **state)
{
    (void)state;
    /* A valid extension was answered with evhttp's HTML 413; now accepted and dropped. */
    ok("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
       "5;ext=1\r\nhello\r\n3 ; a ; b=\"q \\\" x\"\r\nabc\r\n0;last\r\nTrailer: t\r\n\r\n"
       "GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
       "5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n",
       2);
    ok("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n00A\r\n0123456789\r\n0\r\n\r\n",
       "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n0\r\n\r\n",
       1);
    const char *head = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    const char *bad[] = {
        "5;\r\nhello\r\n0\r\n\r\n",          /* extension without a name */
        "5;a=\r\nhello\r\n0\r\n\r\n",        /* without a value after '=' */
        "5;a=\"x\r\nhello\r\n0\r\n\r\n",     /* unterminated quoted string */
        "5 \r\nhello\r\n0\r\n\r\n",          /* whitespace not before ';' */
        "z\r\n0\r\n\r\n",                    /* not hex */
        "5\r\nhelloXY0\r\n\r\n",             /* no CRLF after the data */
        "5\r\nhello\r\n0\r\nbad trailer\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char in[512];
        snprintf(in, sizeof in, "%s%s", head, bad[i]);
        print_message("chunked body %s\n", bad[i]);
        refused(in, 400, 1);
    }
    /* Refused inside the body: the body is ended for evhttp and that request refused. */
    char in[512];
    snprintf(in, sizeof in, "%s3\r\nabc\r\nz\r\n", head);
    check(in, strlen(in),
          "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 1,
          400, 0);
    snprintf(in, sizeof in, "%s3\r\nabcX", head);
    check(in, strlen(in),
          "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
          1, 400, 0);
}

static void test_body_limits(void **state)
{
    (void)state;
    const char *head = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    char in[4096];
    /* 600 + 401 > 1000: the second chunk's size line is refused, the first one went on. */
    int n = snprintf(in, sizeof in, "%s258\r\n%0600d\r\n191\r\n", head, 0);
    check(in, (size_t)n, NULL, 1, 413, 0);
    snprintf(in, sizeof in, "%sffffffffffffffff\r\nabc", head);
    refused(in, 413, 1);
    snprintf(in, sizeof in, "%s1ffffffffffffffffffffffff\r\nabc", head);
    refused(in, 413, 1);
    /* Exactly the limit is fine. */
    n = snprintf(in, sizeof in, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n");
    memset(in + n, 'a', 1000);
    check(in, (size_t)n + 1000, NULL, 1, 0, -1);
}

/* ---- line ends, characters, fields ------------------------------------------------------ */

static void test_line_ends_and_controls(void **state)
{
    (void)state;
    refused("GET /health HTTP/1.1\nHost: x\n\n", 400, 1);
    refused("GET /health HTTP/1.1\r\nHost: x\n\r\n", 400, 1);
    refused("GET /health HTTP/1.1\r\nHost: x\rY: z\r\n\r\n", 400, 1);
    refused("GET /health HTTP/1.1\r\nHost: a\x01" "b\r\n\r\n", 400, 1);
    refused("GET /health HTTP/1.1\r\nHost: a\x7f" "b\r\n\r\n", 400, 1);
    static const char nul_header[] = "GET /health HTTP/1.1\r\nHost: a\0b\r\n\r\n";
    check(nul_header, sizeof nul_header - 1, STANDIN, 1, 400, 0);
    /* Refused at the first byte, without waiting for the rest of a head. */
    check("\0\x01garbage", 9, STANDIN, 1, 400, 0);
    result r;
    run("\x01", 1, 0, &r);
    assert_int_equal(r.status, 400);
    free(r.out);
    /* Empty lines before a request are skipped (RFC 9112 2.2). */
    ok("\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 1);
    /* obs-text in a value passes; the value's surrounding whitespace goes. */
    ok("GET / HTTP/1.1\r\nHost: x\r\nX-A:\t caf\xc3\xa9 \t\r\nX-B:\r\n\r\n",
       "GET / HTTP/1.1\r\nHost: x\r\nX-A: caf\xc3\xa9\r\nX-B: \r\n\r\n", 1);
}

static void test_fields(void **state)
{
    (void)state;
    refused("GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n", 400, 1);
    refused("GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, 1);
    refused("GET / HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n", 400, 1);
    refused("GET / HTTP/1.1\r\nHost: x\r\n: empty name\r\n\r\n", 400, 1);
    refused("GET / HTTP/1.1\r\nHost: x\r\nX(y): 1\r\n\r\n", 400, 1);
    refused("GET / HTTP/1.1\r\n\r\n", 400, 1);                       /* 1.1 without Host */
    refused("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, 1); /* two Hosts */
    refused("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, 1);
    refused("GET / HTTP/1.1\r\nHost: user@h\r\n\r\n", 400, 1);
    ok("GET / HTTP/1.1\r\nHost: [::1]:8000\r\n\r\n", "GET / HTTP/1.1\r\nHost: [::1]:8000\r\n\r\n", 1);
    ok("GET / HTTP/1.1\r\nHost:\r\n\r\n", "GET / HTTP/1.1\r\nHost: \r\n\r\n", 1);
    refused("POST / HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}", 417, 1);
    ok("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n{}",
       "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n{}", 1);
    /* Transfer-Encoding: only chunked, last, alone, never with Content-Length or 1.0. */
    refused("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 400, 1);
    refused("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, 1);
    refused("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, \r\n\r\n", 400, 1);
    refused("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            "Transfer-Encoding: chunked\r\n\r\n",
            400, 1);
    refused("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            400, 1);
    refused("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, 1);
}

static void test_limits(void **state)
{
    (void)state;
    static char in[200 * 1024];
    /* A 100 kB header. */
    int n = snprintf(in, sizeof in, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(in + n, 'a', 100000);
    memcpy(in + n + 100000, "\r\n\r\n", 4);
    check(in, (size_t)n + 100004, STANDIN, 1, 431, 0);
    /* A 100 kB target. */
    n = snprintf(in, sizeof in, "GET /");
    memset(in + n, 'a', 100000);
    memcpy(in + n + 100000, " HTTP/1.1\r\nHost: x\r\n\r\n", 23);
    check(in, (size_t)n + 100023, STANDIN, 1, 414, 0);
    /* 101 fields; 100 pass. */
    n = snprintf(in, sizeof in, "GET / HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < 99; i++)
        n += snprintf(in + n, sizeof in - (size_t)n, "X-%d: v\r\n", i);
    n += snprintf(in + n, sizeof in - (size_t)n, "\r\n");
    check(in, (size_t)n, NULL, 1, 0, -1);
    n = snprintf(in, sizeof in, "GET / HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < 100; i++)
        n += snprintf(in + n, sizeof in - (size_t)n, "X-%d: v\r\n", i);
    n += snprintf(in + n, sizeof in - (size_t)n, "\r\n");
    check(in, (size_t)n, STANDIN, 1, 431, 0);
    /* A chunk line over 4096 bytes. */
    n = snprintf(in, sizeof in, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1");
    for (int i = 0; i < 1100; i++)
        n += snprintf(in + n, sizeof in - (size_t)n, ";a=b");
    n += snprintf(in + n, sizeof in - (size_t)n, "\r\nx\r\n0\r\n\r\n");
    check(in, (size_t)n, NULL, 1, 400, 0);
}

/* ---- methods and targets ---------------------------------------------------------------- */

static void test_methods_and_targets(void **state)
{
    (void)state;
    refused("BREW /health HTTP/1.1\r\nHost: x\r\n\r\n", 501, 1);
    refused("CONNECT h:443 HTTP/1.1\r\nHost: h\r\n\r\n", 501, 1);
    refused("get / HTTP/1.1\r\nHost: x\r\n\r\n", 501, 1);
    refused("G\"T / HTTP/1.1\r\nHost: x\r\n\r\n", 400, 1);
    ok("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 1);
    refused("GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400, 1);
    refused("GET health HTTP/1.1\r\nHost: x\r\n\r\n", 400, 1);
    refused("GET /a\"b HTTP/1.1\r\nHost: x\r\n\r\n", 400, 1);
    refused("GET /a#frag HTTP/1.1\r\nHost: x\r\n\r\n", 400, 1);
    refused("GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400, 1);
    refused("GET /%4 HTTP/1.1\r\nHost: x\r\n\r\n", 400, 1);
    /* evhttp reads "//a:b" as an authority with a bad port and answers in HTML (found by
     * fuzz_reqframe: regress_double_slash). */
    refused("GET //a:b HTTP/1.1\r\nHost: x\r\n\r\n", 400, 1);
    refused("GET http://1//128.0.0.1:8ost HTTP/1.1\r\nHost: x\r\n\r\n", 400, 1);
    ok("GET /a//b:c HTTP/1.1\r\nHost: x\r\n\r\n", "GET /a//b:c HTTP/1.1\r\nHost: x\r\n\r\n", 1);
    ok("GET /v1/models?a=b&c=%20:@/? HTTP/1.1\r\nHost: x\r\n\r\n",
       "GET /v1/models?a=b&c=%20:@/? HTTP/1.1\r\nHost: x\r\n\r\n", 1);
    /* absolute-form goes on in origin-form. */
    ok("GET http://127.0.0.1:8000/health HTTP/1.1\r\nHost: x\r\n\r\n",
       "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 1);
    ok("GET HTTPS://h HTTP/1.1\r\nHost: h\r\n\r\n", "GET / HTTP/1.1\r\nHost: h\r\n\r\n", 1);
    ok("GET http://h?x=1 HTTP/1.1\r\nHost: h\r\n\r\n", "GET /?x=1 HTTP/1.1\r\nHost: h\r\n\r\n", 1);
    refused("GET http://u@h/ HTTP/1.1\r\nHost: h\r\n\r\n", 400, 1);
    refused("GET ftp://h/ HTTP/1.1\r\nHost: h\r\n\r\n", 400, 1);
}

/* ---- bodies evhttp does not read, framing it needs, pipelining -------------------------- */

static void test_bodies_and_pipelining(void **state)
{
    (void)state;
    /* evhttp reads no body for GET: it would parse this one as the next request. The body
     * is read and dropped here, its framing fields are not handed on. */
    const char *hidden = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    char with_body[256];
    snprintf(with_body, sizeof with_body,
             "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s"
             "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
             strlen(hidden), hidden);
    ok(with_body,
       "GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 2);
    ok("DELETE /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
       "DELETE /health HTTP/1.1\r\nHost: x\r\n\r\n", 1);
    /* A POST without a body gets Content-Length: 0 (evhttp refuses it with Connection). */
    ok("POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n"
       "Content-Length: 0\r\n\r\n",
       1);
    /* Three good requests, garbage, one more: the three go on, then the stand-in. */
    const char *get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    char in[512], out[512];
    snprintf(in, sizeof in, "%s%s%s\x01garbage\r\n\r\n%s", get, get, get, get);
    snprintf(out, sizeof out, "%s%s%s%s", get, get, get, STANDIN);
    check(in, strlen(in), out, 4, 400, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conflicting_lengths),
        cmocka_unit_test(test_signed_and_odd_lengths),
        cmocka_unit_test(test_versions),
        cmocka_unit_test(test_chunk_extensions),
        cmocka_unit_test(test_body_limits),
        cmocka_unit_test(test_line_ends_and_controls),
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_methods_and_targets),
        cmocka_unit_test(test_bodies_and_pipelining),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
