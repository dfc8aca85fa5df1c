/* http1: the response parser. Every case is fed three ways — whole, one byte at a time
 * (each piece its own exact-size heap copy), and ending exactly at a page guard (a read past
 * the input faults) — and must give the same head, the same body bytes and the same end or
 * refusal each way. */
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

#include "client/http1.h"

enum { END_NONE, END_BODY, END_ERROR };

typedef struct parsed {
    http1_response head;
    int heads;       /* final heads seen (1xx skipped) */
    char body[4096]; /* the body bytes handed out */
    size_t body_len;
    int end;         /* END_* */
    size_t leftover; /* bytes after the body's end */
} parsed;

/* A connection's worth of bytes, fed as a client would: gather the head until it parses,
 * then the body. `piece` bytes per read (0: all at once). Reads are exact-size copies. */
static void feed_how(const char *in, size_t len, size_t piece, bool copy_pieces, parsed *out)
{
    memset(out, 0, sizeof *out);
    char head[HTTP1_MAX_HEAD + 16];
    size_t head_len = 0;
    bool in_body = false;
    http1_body body;
    size_t off = 0;
    while (off < len && out->end == END_NONE) {
        size_t n = piece == 0 || len - off < piece ? len - off : piece;
        char *copy = copy_pieces ? malloc(n) : NULL;
        assert_true(copy || !copy_pieces);
        if (copy)
            memcpy(copy, in + off, n);
        const char *at = copy ? copy : in + off;
        off += n;
        size_t left = n;
        while (left > 0 && out->end == END_NONE) {
            if (!in_body) {
                /* As the raw transport does: straight from the read while nothing is
                 * gathered (a read past the input faults), else from the gathered head. */
                size_t take = left < sizeof head - head_len ? left : sizeof head - head_len;
                ssize_t r;
                if (head_len == 0) {
                    r = http1_parse_head(at, left, &out->head);
                    if (r == HTTP1_NEED_MORE)
                        memcpy(head, at, take);
                } else {
                    memcpy(head + head_len, at, take);
                    r = http1_parse_head(head, head_len + take, &out->head);
                }
                if (r == HTTP1_NEED_MORE) {
                    head_len += take;
                    left = 0;
                    break;
                }
                if (r == HTTP1_ERROR) {
                    out->end = END_ERROR;
                    break;
                }
                assert_true((size_t)r > head_len && (size_t)r <= head_len + take);
                size_t used = (size_t)r - head_len;
                at += used;
                left -= used;
                head_len = 0;
                if (out->head.status < 200)
                    continue;
                out->heads++;
                http1_body_init(&body, &out->head);
                in_body = true;
            }
            size_t used = 0, data_len = 0;
            const char *data = NULL;
            int r = http1_body_feed(&body, at, left, &used, &data, &data_len);
            assert_true(used <= left);
            if (r == HTTP1_ERROR) {
                out->end = END_ERROR;
                break;
            }
            if (r == HTTP1_BODY_DATA) {
                assert_true(data >= at && data + data_len <= at + used);
                assert_true(out->body_len + data_len <= sizeof out->body);
                memcpy(out->body + out->body_len, data, data_len);
                out->body_len += data_len;
            } else {
                assert_int_equal(r == HTTP1_BODY_END ? 1 : 0, body.done ? 1 : 0);
            }
            at += used;
            left -= used;
            if (body.done) {
                out->end = END_BODY;
                out->leftover = left + (len - off);
            }
        }
        /* A body without a length ends at the close; a NONE body ends with its head. */
        if (in_body && out->end == END_NONE && body.done) {
            out->end = END_BODY;
            out->leftover = left + (len - off);
        }
        free(copy);
    }
}

static void feed(const char *in, size_t len, size_t piece, parsed *out)
{
    feed_how(in, len, piece, true, out);
}

/* Whole, ending at a readable page followed by an unreadable one. */
static void feed_at_guard(const char *in, size_t len, parsed *out)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t span = (len + page - 1) / page * page + page;
    char *map = mmap(NULL, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + span, page, PROT_NONE), 0);
    char *at = map + span - len;
    memcpy(at, in, len);
    feed_how(at, len, 0, false, out);
    munmap(map, span + page);
}

static void assert_same(const parsed *a, const parsed *b, const char *how)
{
    if (a->end != b->end || a->heads != b->heads || a->body_len != b->body_len ||
        memcmp(a->body, b->body, a->body_len) != 0 || a->leftover != b->leftover ||
        a->head.status != b->head.status || a->head.framing != b->head.framing ||
        a->head.keep_alive != b->head.keep_alive ||
        strcmp(a->head.retry_after, b->head.retry_after) != 0 ||
        strcmp(a->head.location, b->head.location) != 0 ||
        strcmp(a->head.content_encoding, b->head.content_encoding) != 0 ||
        strcmp(a->head.content_type, b->head.content_type) != 0)
        fail_msg("%s: end %d/%d, body %zu/%zu bytes, leftover %zu/%zu, status %d/%d", how,
                 a->end, b->end, a->body_len, b->body_len, a->leftover, b->leftover,
                 a->head.status, b->head.status);
}

/* Parse text three ways; the same result each way; return the whole-feed one. */
static parsed check(const char *text)
{
    size_t len = strlen(text);
    parsed whole, bytewise, guarded;
    feed(text, len, 0, &whole);
    feed(text, len, 1, &bytewise);
    feed_at_guard(text, len, &guarded);
    assert_same(&whole, &bytewise, "one byte at a time");
    assert_same(&whole, &guarded, "at a page guard");
    for (size_t piece = 2; piece < 20; piece += 3) {
        parsed split;
        feed(text, len, piece, &split);
        assert_same(&whole, &split, "in pieces");
    }
    return whole;
}

static void test_chunked_sse(void **state)
{
    (void)state;
    parsed p = check("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n"
                     "d\r\ndata: hello\n\n\r\n"
                     "C;ext=\"x\"\r\ndata: [DONE]\r\n"
                     "0\r\nTrailer-Field: 1\r\n\r\n");
    assert_int_equal(p.end, END_BODY);
    assert_int_equal(p.head.status, 200);
    assert_int_equal(p.head.framing, HTTP1_BODY_CHUNKED);
    assert_true(p.head.keep_alive);
    assert_int_equal(p.body_len, 25);
    assert_memory_equal(p.body, "data: hello\n\ndata: [DONE]", 25);
    assert_int_equal(p.leftover, 0);
}

static void test_content_length_and_next_response(void **state)
{
    (void)state;
    /* A 100 Continue first; a body of exactly 5; the next response's bytes are left. */
    parsed p = check("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 429 Too Many Requests\r\n"
                     "retry-after:  2 \r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\n");
    assert_int_equal(p.end, END_BODY);
    assert_int_equal(p.heads, 1);
    assert_int_equal(p.head.status, 429);
    assert_string_equal(p.head.retry_after, "2");
    assert_int_equal(p.head.framing, HTTP1_BODY_LENGTH);
    assert_int_equal(p.body_len, 5);
    assert_int_equal(p.leftover, strlen("HTTP/1.1 200 OK\r\n"));
    /* Zero length and 204: the body ends with the head. */
    p = check("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(p.end, END_BODY);
    assert_int_equal(p.body_len, 0);
    p = check("HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n");
    assert_int_equal(p.end, END_BODY);
    assert_int_equal(p.head.framing, HTTP1_BODY_NONE);
    /* Equal repeated lengths are one length. */
    p = check("HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\nContent-Length: 3\r\n\r\nabc");
    assert_int_equal(p.end, END_BODY);
    assert_int_equal(p.body_len, 3);
}

/* The fields that say what an answer is: where a redirect points, how the body is
 * encoded, its type; trimmed, a longer value cut to the field's size, "" without. */
static void test_fields_kept(void **state)
{
    (void)state;
    parsed p = check("HTTP/1.1 302 Found\r\nlocation:  http://h:8000/v2/completions \r\n"
                     "Content-Encoding: gzip\r\nContent-Type: text/event-stream; charset=utf-8"
                     "\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(p.end, END_BODY);
    assert_int_equal(p.head.status, 302);
    assert_string_equal(p.head.location, "http://h:8000/v2/completions");
    assert_string_equal(p.head.content_encoding, "gzip");
    assert_string_equal(p.head.content_type, "text/event-stream; charset=utf-8");
    p = check("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    assert_string_equal(p.head.location, "");
    assert_string_equal(p.head.content_encoding, "");
    assert_string_equal(p.head.content_type, "");
    char text[1024];
    char long_location[400];
    memset(long_location, 'x', sizeof long_location - 1);
    long_location[sizeof long_location - 1] = '\0';
    snprintf(text, sizeof text, "HTTP/1.1 301 Moved\r\nLocation: /%s\r\nContent-Length: 0\r\n\r\n",
             long_location);
    p = check(text);
    assert_int_equal(strlen(p.head.location), sizeof p.head.location - 1);
    assert_int_equal(p.head.location[0], '/');
}

static void test_until_close_and_connection(void **state)
{
    (void)state;
    /* No length, no chunking: the body lasts until the close; not reusable. */
    parsed p = check("HTTP/1.1 200 OK\nContent-Type: text/event-stream\n\ndata: x\n\n");
    assert_int_equal(p.end, END_NONE);
    assert_int_equal(p.head.framing, HTTP1_BODY_UNTIL_CLOSE);
    assert_false(p.head.keep_alive);
    assert_int_equal(p.body_len, 9);
    p = check("HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 1\r\n\r\nx");
    assert_false(p.head.keep_alive);
    p = check("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx");
    assert_false(p.head.keep_alive);
    p = check("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nx");
    assert_true(p.head.keep_alive);
    /* Transfer-Encoding wins over Content-Length, and the connection is not reused. */
    p = check("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n"
              "1\r\nx\r\n0\r\n\r\n");
    assert_int_equal(p.end, END_BODY);
    assert_int_equal(p.body_len, 1);
    assert_false(p.head.keep_alive);
    /* A coding other than chunked last: until the close. */
    p = check("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\nabc");
    assert_int_equal(p.head.framing, HTTP1_BODY_UNTIL_CLOSE);
}

static void test_refused(void **state)
{
    (void)state;
    const char *bad[] = {
        "HTTP/2 200 OK\r\n\r\n",
        "SSH-2.0-OpenSSH\r\n\r\n",
        "HTTP/1.1 20 OK\r\n\r\n",
        "HTTP/1.1 2000 OK\r\n\r\n",
        "HTTP/1.1 099 Low\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
        "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\x01b\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxY",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\rX0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\rx",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        parsed p = check(bad[i]);
        if (p.end != END_ERROR)
            fail_msg("case %zu accepted: %s", i, bad[i]);
    }
    /* A refusal has a reason. */
    http1_response r;
    const char *negative = "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n";
    assert_int_equal(http1_parse_head(negative, strlen(negative), &r),
                     HTTP1_ERROR);
    assert_true(strlen(r.error) > 0);
}

static void test_head_limit(void **state)
{
    (void)state;
    /* A head that never ends is refused once it passes the limit, not buffered forever. */
    size_t len = HTTP1_MAX_HEAD + 100;
    char *big = malloc(len);
    memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 20);
    memset(big + 20, 'a', len - 20);
    http1_response r;
    assert_int_equal(http1_parse_head(big, HTTP1_MAX_HEAD - 1, &r), HTTP1_NEED_MORE);
    assert_int_equal(http1_parse_head(big, len, &r), HTTP1_ERROR);
    assert_non_null(strstr(r.error, "64 KiB"));
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_sse),
        cmocka_unit_test(test_content_length_and_next_response),
        cmocka_unit_test(test_fields_kept),
        cmocka_unit_test(test_until_close_and_connection),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_head_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
