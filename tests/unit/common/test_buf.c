/* buf: the one growable byte buffer. Content and the NUL after it are checked across every
 * growth boundary, since a piece that ends exactly at the capacity is where an off-by-one
 * would overrun (ASan in the test build sees it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/buf.h"

/* The invariant every user relies on: len bytes, then a NUL. */
static void assert_content(const buf *b, const char *want, size_t want_len)
{
    assert_int_equal(b->len, want_len);
    assert_non_null(b->data);
    assert_true(b->cap > b->len);
    assert_memory_equal(b->data, want, want_len);
    assert_int_equal(b->data[b->len], '\0');
}

static void test_zeroed_is_empty(void **state)
{
    (void)state;
    buf b = {0};
    assert_int_equal(b.len, 0);
    assert_false(b.failed);
    buf_free(&b); /* freeing an untouched buffer is fine */
    /* Appending nothing still leaves a C string: streams.c hands data out as text. */
    assert_int_equal(buf_append(&b, "", 0), 0);
    assert_content(&b, "", 0);
    assert_string_equal(b.data, "");
    buf_free(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
}

static void test_appends(void **state)
{
    (void)state;
    buf b = {0};
    assert_int_equal(buf_append_str(&b, "data: "), 0);
    assert_int_equal(buf_append(&b, "{\"x\":1}xyz", 7), 0); /* only n bytes are taken */
    assert_int_equal(buf_append_str(&b, "\n\n"), 0);
    assert_string_equal(b.data, "data: {\"x\":1}\n\n");
    assert_int_equal(b.len, strlen("data: {\"x\":1}\n\n"));
    /* Binary content: NULs inside count, the terminating one does not. */
    buf_reset(&b);
    assert_int_equal(buf_append(&b, "a\0b\0c", 5), 0);
    assert_content(&b, "a\0b\0c", 5);
    buf_free(&b);
}

static void test_printf_sizes(void **state)
{
    (void)state;
    /* Every prefix length against every piece length up to past the first two doublings:
     * pieces that fit, that end exactly at the capacity, and that need one or more
     * growths, each on a fresh buffer so the capacity starts where a caller's would. */
    char prefix[140], piece[280], want[600];
    memset(prefix, 'p', sizeof prefix);
    memset(piece, 'x', sizeof piece);
    for (int pre = 0; pre < (int)sizeof prefix; pre += 3) {
        for (int n = 0; n < (int)sizeof piece; n++) {
            buf b = {0};
            for (int i = 0; i < pre; i++)
                assert_int_equal(buf_append(&b, "p", 1), 0);
            assert_int_equal(buf_printf(&b, "%.*s|%d", n, piece, n), 0);
            int want_len = snprintf(want, sizeof want, "%.*s%.*s|%d", pre, prefix, n, piece, n);
            assert_content(&b, want, (size_t)want_len);
            buf_free(&b);
        }
    }
}

static void test_printf_many(void **state)
{
    (void)state;
    /* Thousands of small printfs into one buffer give what one big snprintf gives. */
    buf b = {0};
    size_t expect_len = 0;
    for (int i = 0; i < 5000; i++) {
        assert_int_equal(buf_printf(&b, "%d:%.3f;", i, i / 7.0), 0);
        expect_len += (size_t)snprintf(NULL, 0, "%d:%.3f;", i, i / 7.0);
        assert_int_equal(b.len, expect_len);
        assert_int_equal(b.data[b.len], '\0');
    }
    assert_int_equal(strlen(b.data), b.len);
    assert_int_equal(strncmp(b.data, "0:0.000;1:0.143;2:0.286;", 24), 0);
    assert_non_null(strstr(b.data, ";4999:714.143;"));
    /* An empty format appends nothing and keeps the string. */
    assert_int_equal(buf_printf(&b, "%s", ""), 0);
    assert_int_equal(b.len, expect_len);
    buf_free(&b);
}

static void test_reset_keeps_memory(void **state)
{
    (void)state;
    buf b = {0};
    assert_int_equal(buf_printf(&b, "%0*d", 1000, 7), 0);
    char *data = b.data;
    size_t cap = b.cap;
    buf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_ptr_equal(b.data, data);
    assert_int_equal(b.cap, cap);
    assert_string_equal(b.data, "");
    /* Reused for a message that fits: no reallocation (the token path relies on it). */
    assert_int_equal(buf_printf(&b, "%0*d", 900, 7), 0);
    assert_ptr_equal(b.data, data);
    assert_int_equal(b.len, 900);
    assert_int_equal(b.data[899], '7');
    buf_free(&b);
}

static void test_large_append(void **state)
{
    (void)state;
    const size_t big = (size_t)24 << 20; /* larger than any body the client accepts */
    char *src = malloc(big);
    assert_non_null(src);
    for (size_t i = 0; i < big; i++)
        src[i] = (char)('a' + i % 26);
    buf b = {0};
    assert_int_equal(buf_append_str(&b, "head:"), 0);
    assert_int_equal(buf_append(&b, src, big), 0);
    assert_int_equal(b.len, big + 5);
    assert_memory_equal(b.data, "head:", 5);
    assert_memory_equal(b.data + 5, src, big);
    assert_int_equal(b.data[b.len], '\0');
    free(src);
    buf_free(&b);
}

static void test_reserve(void **state)
{
    (void)state;
    /* openai.c writes digits straight into reserved room, then puts the NUL itself. */
    buf b = {0};
    assert_int_equal(buf_append_str(&b, "n="), 0);
    assert_int_equal(buf_reserve(&b, 500), 0);
    assert_true(b.cap >= b.len + 500 + 1);
    char *data = b.data;
    memset(b.data + b.len, '9', 500);
    b.len += 500;
    b.data[b.len] = '\0';
    assert_ptr_equal(b.data, data); /* the room was there: nothing moved */
    assert_int_equal(strlen(b.data), 502);
    assert_int_equal(buf_reserve(&b, 0), 0);
    buf_free(&b);
}

static void test_failure_is_sticky(void **state)
{
    (void)state;
    /* A size that cannot be had (len + extra + 1 would wrap) stands in for out of memory. */
    buf b = {0};
    assert_int_equal(buf_append_str(&b, "kept"), 0);
    assert_int_equal(buf_reserve(&b, SIZE_MAX), -1);
    assert_true(b.failed);
    /* Every later append refuses and leaves the content alone: callers that check once at
     * the end (streams.c, metrics) see a prefix, never a text with a hole in it. */
    assert_int_equal(buf_append_str(&b, "lost"), -1);
    assert_int_equal(buf_append(&b, "", 0), -1);
    assert_int_equal(buf_printf(&b, "%d", 42), -1);
    assert_int_equal(buf_reserve(&b, 1), -1);
    assert_string_equal(b.data, "kept");
    assert_int_equal(b.len, 4);
    /* A failed buffer hands nothing over, and is empty afterwards. */
    assert_null(buf_detach(&b));
    assert_null(b.data);
    assert_false(b.failed);

    /* buf_reset starts over: the next message is whole again. */
    assert_int_equal(buf_append_str(&b, "x"), 0);
    assert_int_equal(buf_reserve(&b, SIZE_MAX - 1), -1);
    assert_true(b.failed);
    buf_reset(&b);
    assert_false(b.failed);
    assert_int_equal(buf_append_str(&b, "fresh"), 0);
    assert_string_equal(b.data, "fresh");
    buf_free(&b);
    assert_false(b.failed);
}

static void test_consume(void **state)
{
    (void)state;
    /* The engine keeps the last bytes of an answer for stop strings this way. */
    buf b = {0};
    assert_int_equal(buf_append_str(&b, "hello world"), 0);
    buf_consume(&b, 0);
    assert_content(&b, "hello world", 11);
    buf_consume(&b, 6);
    assert_content(&b, "world", 5);
    assert_int_equal(buf_append_str(&b, "!"), 0);
    assert_content(&b, "world!", 6);
    buf_consume(&b, 6); /* exactly all */
    assert_content(&b, "", 0);
    assert_int_equal(buf_append_str(&b, "abc"), 0);
    buf_consume(&b, 100); /* more than there is */
    assert_content(&b, "", 0);
    buf_free(&b);
    buf_consume(&b, 3); /* on an untouched buffer: nothing to do, nothing to crash on */
    assert_int_equal(b.len, 0);
}

static void test_detach(void **state)
{
    (void)state;
    buf b = {0};
    assert_int_equal(buf_printf(&b, "<svg width=\"%d\"/>", 640), 0);
    char *s = buf_detach(&b);
    assert_string_equal(s, "<svg width=\"640\"/>");
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    free(s);
    /* An empty body is "" the caller frees, not NULL (fetch_http's callers print it). */
    s = buf_detach(&b);
    assert_non_null(s);
    assert_string_equal(s, "");
    free(s);
    /* The buffer is usable again after handing its content over. */
    assert_int_equal(buf_append_str(&b, "again"), 0);
    assert_string_equal(b.data, "again");
    buf_free(&b);
}

/* buf_grow_items: doubling from 64 up to what is needed, the items kept, nothing done when
 * there is room, and a size past SIZE_MAX refused with the array untouched. */
static void test_grow_items(void **state)
{
    (void)state;
    int64_t *items = NULL, cap = 0;
    assert_int_equal(buf_grow_items((void **)&items, &cap, 1, sizeof *items), 0);
    assert_int_equal(cap, 64);
    for (int64_t i = 0; i < 1000; i++) {
        assert_int_equal(buf_grow_items((void **)&items, &cap, i + 1, sizeof *items), 0);
        items[i] = i * 7;
    }
    assert_int_equal(cap, 1024);
    for (int64_t i = 0; i < 1000; i++)
        assert_int_equal(items[i], i * 7);
    int64_t *before = items;
    assert_int_equal(buf_grow_items((void **)&items, &cap, 1024, sizeof *items), 0);
    assert_ptr_equal(items, before);
    assert_int_equal(buf_grow_items((void **)&items, &cap, INT64_MAX / 4, sizeof *items), -1);
    assert_ptr_equal(items, before);
    assert_int_equal(cap, 1024);
    free(items);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zeroed_is_empty),    cmocka_unit_test(test_appends),
        cmocka_unit_test(test_printf_sizes),       cmocka_unit_test(test_printf_many),
        cmocka_unit_test(test_reset_keeps_memory), cmocka_unit_test(test_large_append),
        cmocka_unit_test(test_reserve),            cmocka_unit_test(test_failure_is_sticky),
        cmocka_unit_test(test_consume),            cmocka_unit_test(test_detach),
        cmocka_unit_test(test_grow_items),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
