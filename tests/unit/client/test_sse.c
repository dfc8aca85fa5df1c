/* client/sse: the splitter fed whole, one byte at a time, in random splits and against a
 * page guard. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "client/sse.h"

#include "sse_feed.h"

static void expect_same_any_split(const char *text, const collected *want)
{
    size_t len = strlen(text);
    collected got;
    feed(text, len, 1, 0, &got);
    assert_int_equal(got.n, want->n);
    for (int i = 0; i < want->n; i++) {
        assert_string_equal(got.data[i], want->data[i]);
        assert_string_equal(got.type[i], want->type[i]);
    }
    for (uint64_t seed = 1; seed <= 200; seed++) {
        feed(text, len, 1 + seed % 17, seed, &got);
        assert_int_equal(got.n, want->n);
        for (int i = 0; i < want->n; i++) {
            assert_string_equal(got.data[i], want->data[i]);
            assert_string_equal(got.type[i], want->type[i]);
        }
    }
}

static void test_basic_events(void **state)
{
    (void)state;
    const char *text = "data: one\n\ndata:two\n\ndata: a\ndata: b\n\n";
    collected got;
    feed(text, strlen(text), 0, 0, &got);
    assert_int_equal(got.n, 3);
    assert_string_equal(got.data[0], "one");
    assert_string_equal(got.data[1], "two"); /* no space after the colon */
    assert_string_equal(got.data[2], "a\nb"); /* data lines joined with \n */
    expect_same_any_split(text, &got);
}

static void test_line_endings(void **state)
{
    (void)state;
    const char *text = "data: crlf\r\n\r\ndata: cr\r\rdata: lf\n\ndata: mixed\r\ndata: x\r\r\n"
                       "data: last\n\r\n";
    collected got;
    feed(text, strlen(text), 0, 0, &got);
    assert_int_equal(got.n, 4 + 1);
    assert_string_equal(got.data[0], "crlf");
    assert_string_equal(got.data[1], "cr");
    assert_string_equal(got.data[2], "lf");
    assert_string_equal(got.data[3], "mixed\nx");
    assert_string_equal(got.data[4], "last");
    expect_same_any_split(text, &got);
}

static void test_comments_and_fields(void **state)
{
    (void)state;
    const char *text = ": keep-alive\n\n"
                       ":ping\r\n"
                       "id: 7\nretry: 100\n"
                       "data: {\"a\":1}\n\n"
                       "\n\n" /* empty events are not dispatched */
                       "event: error\ndata: bad thing\n\n"
                       "data: after-type-reset\n\n"
                       "error: {\"code\":500,\"message\":\"llama\"}\n\n"
                       "data\n\n"; /* a field without colon: data with empty value */
    collected got;
    feed(text, strlen(text), 0, 0, &got);
    assert_int_equal(got.n, 5);
    assert_string_equal(got.data[0], "{\"a\":1}");
    assert_string_equal(got.type[0], "");
    assert_string_equal(got.data[1], "bad thing");
    assert_string_equal(got.type[1], "error");
    assert_string_equal(got.type[2], ""); /* the type belongs to one event only */
    assert_string_equal(got.type[3], "error");
    assert_string_equal(got.data[4], "");
    expect_same_any_split(text, &got);
}

static void test_many_events_per_read_and_pending(void **state)
{
    (void)state;
    char text[8192];
    size_t len = 0;
    for (int i = 0; i < 50; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "data: {\"i\":%d}\n\n", i);
    collected got;
    feed(text, len, 0, 0, &got);
    assert_int_equal(got.n, 50);
    assert_string_equal(got.data[49], "{\"i\":49}");

    sse_parser p;
    sse_parser_init(&p, 0);
    size_t used;
    sse_event ev;
    assert_int_equal(sse_parse(&p, "data: par", 9, &used, &ev), SSE_NEED_MORE);
    assert_int_equal(used, 9);
    assert_true(sse_parser_pending(&p));
    assert_int_equal(sse_parse(&p, "tial\n\n", 6, &used, &ev), SSE_EVENT);
    assert_string_equal(ev.data, "partial");
    assert_int_equal(sse_parse(&p, "", 0, &used, &ev), SSE_NEED_MORE);
    assert_false(sse_parser_pending(&p));
    sse_parser_reset(&p);
    sse_parser_free(&p);
}

static void test_too_large(void **state)
{
    (void)state;
    sse_parser p;
    sse_parser_init(&p, 64);
    char line[200];
    memset(line, 'x', sizeof line);
    size_t used;
    sse_event ev;
    int r = SSE_NEED_MORE;
    for (int i = 0; i < 10 && r != SSE_ERROR; i++)
        r = sse_parse(&p, line, 20, &used, &ev);
    assert_int_equal(r, SSE_ERROR);
    sse_parser_free(&p);
}

/* The input ends exactly at a PROT_NONE page: any read past the end faults. */
static void test_page_guard(void **state)
{
    (void)state;
    long page = sysconf(_SC_PAGESIZE);
    char *map = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + page, (size_t)page, PROT_NONE), 0);
    const char *text = "data: guard\r\n\r\ndata: half";
    size_t len = strlen(text);
    char *in = map + page - len;
    memcpy(in, text, len);
    sse_parser p;
    sse_parser_init(&p, 0);
    size_t used;
    sse_event ev;
    assert_int_equal(sse_parse(&p, in, len, &used, &ev), SSE_EVENT);
    assert_string_equal(ev.data, "guard");
    assert_int_equal(sse_parse(&p, in + used, len - used, &used, &ev), SSE_NEED_MORE);
    for (size_t i = 0; i < len; i++) /* byte by byte, each byte the last of the page */
        (void)sse_parse(&p, map + page - 1, 1, &used, &ev);
    sse_parser_free(&p);
    munmap(map, (size_t)page * 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_events),
        cmocka_unit_test(test_line_endings),
        cmocka_unit_test(test_comments_and_fields),
        cmocka_unit_test(test_many_events_per_read_and_pending),
        cmocka_unit_test(test_too_large),
        cmocka_unit_test(test_page_guard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
