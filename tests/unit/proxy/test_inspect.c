/* proxy/inspect: the head the upstream gets (hop-by-hop fields and those Connection names
 * dropped, but never the body's framing; Host the upstream's; the base path before the
 * target; the client's HTTP version; HTTP/1.0 and 1.1 keep-alive rules; Expect:
 * 100-continue seen and dropped; the URL's Basic only when the client sent no Authorization;
 * malformed heads refused) and what the body says (completions prompts as text, ids and
 * arrays of one, chat content as a string and as parts, stream false, non-JSON, max_tokens
 * against max_completion_tokens, other paths). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "common/buf.h"
#include "proxy/inspect.h"

static const pinsp_upstream plain = {"up.example:8000", 15, "", ""};
/* "Basic " + base64("user:s3cret") */
static const pinsp_upstream with_base = {"10.0.0.7:9000", 13, "/base", "Basic dXNlcjpzM2NyZXQ="};

/* The rewritten head as a NUL-terminated string (freed by the caller); NULL when refused. */
static char *rewrite(const char *head, const pinsp_upstream *up, pinsp_head *info)
{
    buf out = {0};
    if (pinsp_rewrite_head(head, strlen(head), up, &out, info) != 0) {
        buf_free(&out);
        return NULL;
    }
    buf_append(&out, "", 1);
    assert_false(out.failed);
    return buf_detach(&out);
}

/* Whether the head holds the line exactly ("Name: value", matched case-sensitively, as the
 * rewrite keeps the client's spelling). */
static bool has_line(const char *head, const char *line)
{
    const size_t n = strlen(line);
    for (const char *at = strstr(head, "\r\n"); at; at = strstr(at + 2, "\r\n"))
        if (strncmp(at + 2, line, n) == 0 && strncmp(at + 2 + n, "\r\n", 2) == 0)
            return true;
    return false;
}

/* Fields whose name starts with prefix (any case). */
static int count_fields(const char *head, const char *name)
{
    int n = 0;
    const size_t len = strlen(name);
    for (const char *at = strstr(head, "\r\n"); at; at = strstr(at + 2, "\r\n"))
        n += strncasecmp(at + 2, name, len) == 0 && at[2 + len] == ':';
    return n;
}

/* ---- the head ------------------------------------------------------------------------- */

static void test_passthrough_and_host(void **state)
{
    (void)state;
    pinsp_head h;
    char *out = rewrite("POST /v1/completions?api-version=2 HTTP/1.1\r\n"
                        "Host: proxy.local:8001\r\n"
                        "Content-Type: application/json\r\n"
                        "X-Request-Id: abc\r\n"
                        "Content-Length: 12\r\n"
                        "\r\n",
                        &plain, &h);
    assert_non_null(out);
    assert_string_equal(out, "POST /v1/completions?api-version=2 HTTP/1.1\r\n"
                             "Host: up.example:8000\r\n"
                             "Content-Type: application/json\r\n"
                             "X-Request-Id: abc\r\n"
                             "Content-Length: 12\r\n"
                             "\r\n");
    assert_string_equal(h.method, "POST");
    assert_string_equal(h.path, "/v1/completions"); /* no query */
    assert_int_equal(h.minor, 1);
    assert_true(h.keep_alive);
    assert_false(h.expect_continue);
    assert_false(h.head_method);
    free(out);
}

static void test_hop_by_hop_dropped(void **state)
{
    (void)state;
    pinsp_head h;
    char *out = rewrite("GET /v1/models HTTP/1.1\r\n"
                        "Host: x\r\n"
                        "Connection: keep-alive, X-Secret-Hop\r\n"
                        "Keep-Alive: timeout=5\r\n"
                        "Proxy-Connection: keep-alive\r\n"
                        "Proxy-Authorization: Basic Zm9vOmJhcg==\r\n"
                        "TE: trailers\r\n"
                        "Trailer: X-Checksum\r\n"
                        "Upgrade: websocket\r\n"
                        "x-secret-hop: dropped\r\n"
                        "X-Secret-Hop-Not: kept\r\n"
                        "Accept: */*\r\n"
                        "\r\n",
                        &plain, &h);
    assert_non_null(out);
    assert_string_equal(out, "GET /v1/models HTTP/1.1\r\n"
                             "Host: up.example:8000\r\n"
                             "X-Secret-Hop-Not: kept\r\n"
                             "Accept: */*\r\n"
                             "\r\n");
    assert_true(h.keep_alive);
    free(out);
}

/* A field named by any of several Connection fields is hop-by-hop (they are one list). */
static void test_several_connection_fields(void **state)
{
    (void)state;
    pinsp_head h;
    char *out = rewrite("GET / HTTP/1.1\r\n"
                        "Host: x\r\n"
                        "Connection: X-A\r\n"
                        "X-A: 1\r\n"
                        "X-B: 2\r\n"
                        "Connection: X-B\r\n"
                        "X-C: 3\r\n"
                        "\r\n",
                        &plain, &h);
    assert_non_null(out);
    assert_int_equal(count_fields(out, "X-A"), 0);
    assert_int_equal(count_fields(out, "X-B"), 0);
    assert_true(has_line(out, "X-C: 3"));
    assert_true(h.keep_alive);
    free(out);
    /* "close" in the first of two Connection fields still closes */
    out = rewrite("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nConnection: X-A\r\n\r\n",
                  &plain, &h);
    assert_non_null(out);
    assert_false(h.keep_alive);
    free(out);
    /* as many as a framed head may carry (99 besides Host): each one's field dropped */
    buf head = {0};
    buf_append_str(&head, "GET / HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < 49; i++)
        buf_printf(&head, "Connection: X-%d\r\nX-%d: v\r\n", i, i);
    buf_append_str(&head, "X-Kept: v\r\n\r\n");
    buf_append(&head, "", 1);
    out = rewrite(head.data, &plain, &h);
    assert_non_null(out);
    assert_string_equal(out, "GET / HTTP/1.1\r\nHost: up.example:8000\r\nX-Kept: v\r\n\r\n");
    free(out);
    buf_free(&head);
}

/* A Connection field naming the framing does not strip it: the body would reach the
 * upstream as a request of its own (found by a smuggled completion through the proxy). */
static void test_framing_kept(void **state)
{
    (void)state;
    pinsp_head h;
    char *out = rewrite("POST /v1/models HTTP/1.1\r\nHost: x\r\n"
                        "Connection: Content-Length, X-A\r\nX-A: 1\r\nContent-Length: 75\r\n\r\n",
                        &plain, &h);
    assert_non_null(out);
    assert_true(has_line(out, "Content-Length: 75"));
    assert_int_equal(count_fields(out, "X-A"), 0);
    free(out);
    out = rewrite("POST /v1/models HTTP/1.1\r\nHost: x\r\n"
                  "Connection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n",
                  &plain, &h);
    assert_non_null(out);
    assert_true(has_line(out, "Transfer-Encoding: chunked"));
    free(out);
}

static void test_base_path_and_basic(void **state)
{
    (void)state;
    pinsp_head h;
    char *out = rewrite("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                        "Content-Length: 2\r\n\r\n",
                        &with_base, &h);
    assert_non_null(out);
    assert_string_equal(out, "POST /base/v1/chat/completions HTTP/1.1\r\n"
                             "Host: 10.0.0.7:9000\r\n"
                             "Content-Length: 2\r\n"
                             "Authorization: Basic dXNlcjpzM2NyZXQ=\r\n"
                             "\r\n");
    assert_string_equal(h.path, "/v1/chat/completions"); /* the client's, for the endpoint */
    free(out);
    /* the client's own Authorization wins: the URL's is not added */
    out = rewrite("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                  "authorization: Bearer sk-test-XYZ\r\n\r\n",
                  &with_base, &h);
    assert_non_null(out);
    assert_int_equal(count_fields(out, "Authorization"), 1);
    assert_true(has_line(out, "authorization: Bearer sk-test-XYZ"));
    assert_null(strstr(out, "dXNlcjpzM2NyZXQ="));
    free(out);
    /* no credentials in the URL: none added */
    out = rewrite("GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", &plain, &h);
    assert_non_null(out);
    assert_int_equal(count_fields(out, "Authorization"), 0);
    free(out);
}

static void test_keep_alive_rules(void **state)
{
    (void)state;
    static const struct {
        const char *head;
        bool keep_alive;
    } cases[] = {
        {"GET / HTTP/1.1\r\nHost: x\r\n\r\n", true},
        {"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", false},
        {"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, CLOSE\r\n\r\n", false},
        {"GET / HTTP/1.1\r\nHost: x\r\nConnection: closed\r\n\r\n", true},
        {"GET / HTTP/1.0\r\n\r\n", false},
        {"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true},
        {"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true},
        {"GET / HTTP/1.0\r\nKeep-Alive: timeout=5\r\n\r\n", false},
        {"GET / HTTP/1.0\r\nConnection: close\r\n\r\n", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pinsp_head h;
        char *out = rewrite(cases[i].head, &plain, &h);
        assert_non_null(out);
        if (h.keep_alive != cases[i].keep_alive)
            fail_msg("case %zu: keep_alive %d, expected %d", i, h.keep_alive, cases[i].keep_alive);
        assert_int_equal(count_fields(out, "Connection"), 0);
        assert_int_equal(count_fields(out, "Keep-Alive"), 0);
        free(out);
    }
}

/* An HTTP/1.0 client's request goes on as HTTP/1.0: an HTTP/1.1 upstream would answer it
 * with a chunked body, which the client cannot read (RFC 9112 6.1). */
static void test_version_kept(void **state)
{
    (void)state;
    pinsp_head h;
    char *out = rewrite("GET /v1/models HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &plain, &h);
    assert_non_null(out);
    assert_string_equal(out, "GET /v1/models HTTP/1.0\r\nHost: up.example:8000\r\n\r\n");
    assert_int_equal(h.minor, 0);
    free(out);
}

static void test_expect(void **state)
{
    (void)state;
    pinsp_head h;
    char *out = rewrite("POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                        "Content-Length: 10\r\n\r\n",
                        &plain, &h);
    assert_non_null(out);
    assert_true(h.expect_continue);
    assert_int_equal(count_fields(out, "Expect"), 0); /* the proxy answers it itself */
    assert_true(has_line(out, "Content-Length: 10"));
    free(out);
    out = rewrite("POST / HTTP/1.1\r\nHost: x\r\nEXPECT: 100-Continue\r\n\r\n", &plain, &h);
    assert_non_null(out);
    assert_true(h.expect_continue);
    free(out);
    out = rewrite("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continuex\r\n\r\n", &plain, &h);
    assert_non_null(out);
    assert_false(h.expect_continue);
    assert_int_equal(count_fields(out, "Expect"), 0);
    free(out);
    /* HTTP/1.0: the expectation is ignored (RFC 9110 10.1.1), no 100 Continue sent */
    out = rewrite("POST / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n", &plain, &h);
    assert_non_null(out);
    assert_false(h.expect_continue);
    free(out);
}

static void test_head_method(void **state)
{
    (void)state;
    pinsp_head h;
    char *out = rewrite("HEAD /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", &plain, &h);
    assert_non_null(out);
    assert_true(h.head_method);
    assert_string_equal(h.method, "HEAD");
    free(out);
}

static void test_malformed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "GET / HTTP/1.1",                             /* no CRLF at all */
        "GET / HTTP/1.1\r\nHost: x\r\n",              /* no empty line */
        "GET / HTTP/1.1\r\nHost x\r\n\r\n",           /* no colon */
        "GET /HTTP/1.1\r\nHost: x\r\n\r\n",           /* one space */
        "GET / HTTP/2.0\r\nHost: x\r\n\r\n",          /* not 1.x */
        "GET / HTTP/1.x\r\nHost: x\r\n\r\n",          /* the minor not a digit */
        "GET / HTTP/1.11\r\nHost: x\r\n\r\n",         /* too long a version */
        "AVERYLONGMETHODNAME / HTTP/1.1\r\n\r\n",     /* method past 15 bytes */
        " / HTTP/1.1\r\nHost: x\r\n\r\n",             /* no method */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pinsp_head h;
        buf out = {0};
        if (pinsp_rewrite_head(bad[i], strlen(bad[i]), &plain, &out, &h) != -1)
            fail_msg("case %zu accepted: '%s'", i, bad[i]);
        buf_free(&out);
    }
}

/* ---- the body --------------------------------------------------------------------------- */

static pinsp_body body_of(const char *method, const char *path, const char *json)
{
    pinsp_head h;
    memset(&h, 0, sizeof h);
    snprintf(h.method, sizeof h.method, "%s", method);
    snprintf(h.path, sizeof h.path, "%s", path);
    pinsp_body b;
    memset(&b, 0x5a, sizeof b); /* every field must be set */
    pinsp_read_body(&h, json, strlen(json), &b);
    return b;
}

static void test_completions_prompt(void **state)
{
    (void)state;
    /* text: one token per 4 bytes, rounded up */
    pinsp_body b = body_of("POST", "/v1/completions",
                           "{\"model\":\"m\",\"prompt\":\"0123456789\",\"stream\":true}");
    assert_true(b.stream);
    assert_true(b.observed);
    assert_int_equal(b.prompt_tokens, 3);
    assert_false(b.exact);
    assert_int_equal(b.max_tokens, -1);
    /* token ids: counted exactly */
    b = body_of("POST", "/v1/completions", "{\"prompt\":[1,2,3,4,5],\"stream\":true}");
    assert_int_equal(b.prompt_tokens, 5);
    assert_true(b.exact);
    /* an array of one: a string, or ids */
    b = body_of("POST", "/v1/completions", "{\"prompt\":[\"01234567\"],\"stream\":true}");
    assert_int_equal(b.prompt_tokens, 2);
    assert_false(b.exact);
    b = body_of("POST", "/v1/completions", "{\"prompt\":[[7,8,9]],\"stream\":true}");
    assert_int_equal(b.prompt_tokens, 3);
    assert_true(b.exact);
    /* no prompt, an empty array, a number: unknown */
    b = body_of("POST", "/v1/completions", "{\"stream\":true}");
    assert_int_equal(b.prompt_tokens, -1);
    b = body_of("POST", "/v1/completions", "{\"prompt\":[],\"stream\":true}");
    assert_int_equal(b.prompt_tokens, -1);
    b = body_of("POST", "/v1/completions", "{\"prompt\":42,\"stream\":true}");
    assert_int_equal(b.prompt_tokens, -1);
    /* a batch: the sum, exact only when every part is ids; a part that is neither text nor
     * ids makes it unknown, and never exact (fuzz_proxy_request found [[1,2,3],4] counted
     * unknown yet marked exact) */
    b = body_of("POST", "/v1/completions", "{\"prompt\":[[1,2],[3]],\"stream\":true}");
    assert_int_equal(b.prompt_tokens, 3);
    assert_true(b.exact);
    b = body_of("POST", "/v1/completions", "{\"prompt\":[[1,2],\"abcd\"],\"stream\":true}");
    assert_int_equal(b.prompt_tokens, 3);
    assert_false(b.exact);
    b = body_of("POST", "/v1/completions", "{\"prompt\":[[1,2,3],4],\"stream\":true}");
    assert_int_equal(b.prompt_tokens, -1);
    assert_false(b.exact);
    b = body_of("POST", "/v1/completions", "{\"prompt\":[1,\"x\"],\"stream\":true}");
    assert_int_equal(b.prompt_tokens, -1);
    assert_false(b.exact);
    /* a base path before it changes nothing: the endpoint is the path's end */
    b = body_of("POST", "/openai/v1/completions", "{\"prompt\":\"abcd\",\"stream\":true}");
    assert_true(b.observed);
    assert_int_equal(b.prompt_tokens, 1);
}

static void test_chat_content(void **state)
{
    (void)state;
    /* 12 + 4 bytes of text: 4 tokens, plus 4 per message for the template */
    pinsp_body b = body_of("POST", "/v1/chat/completions",
                           "{\"messages\":[{\"role\":\"system\",\"content\":\"abcdefghijkl\"},"
                           "{\"role\":\"user\",\"content\":\"mnop\"}],\"stream\":true}");
    assert_true(b.observed);
    assert_int_equal(b.prompt_tokens, 4 + 2 * PINSP_TOKENS_PER_MESSAGE);
    assert_false(b.exact);
    /* parts: the text ones counted, an image part not */
    b = body_of("POST", "/v1/chat/completions",
                "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
                "\"abcdefgh\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://x/y."
                "png\"}},{\"type\":\"text\",\"text\":\"ijkl\"}]}],\"stream\":true}");
    assert_int_equal(b.prompt_tokens, 3 + PINSP_TOKENS_PER_MESSAGE);
    /* a message without content (a tool call) counts its template only */
    b = body_of("POST", "/v1/chat/completions",
                "{\"messages\":[{\"role\":\"assistant\",\"content\":null}],\"stream\":true}");
    assert_int_equal(b.prompt_tokens, PINSP_TOKENS_PER_MESSAGE);
    /* no messages: unknown */
    b = body_of("POST", "/v1/chat/completions", "{\"stream\":true}");
    assert_int_equal(b.prompt_tokens, -1);
}

static void test_stream_flag(void **state)
{
    (void)state;
    pinsp_body b = body_of("POST", "/v1/completions", "{\"prompt\":\"abcd\",\"stream\":false}");
    assert_false(b.stream);
    assert_false(b.observed);
    assert_int_equal(b.prompt_tokens, 1); /* read all the same */
    b = body_of("POST", "/v1/completions", "{\"prompt\":\"abcd\"}");
    assert_false(b.observed);
    b = body_of("POST", "/v1/completions", "{\"prompt\":\"abcd\",\"stream\":\"true\"}");
    assert_false(b.observed);
    b = body_of("POST", "/v1/chat/completions", "{\"messages\":[],\"stream\":true}");
    assert_true(b.observed);
}

static void test_not_json(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "", "not json", "[1,2,3]", "\"stream\"", "{\"stream\":true", "{\"stream\":true} x",
        "{\"stream\":true,\"prompt\":\"a\\u0000b\"}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        pinsp_body b = body_of("POST", "/v1/completions", bodies[i]);
        if (b.observed || b.stream || b.prompt_tokens != -1 || b.max_tokens != -1 || b.exact)
            fail_msg("body %zu ('%s') read as observed or with figures", i, bodies[i]);
    }
}

static void test_max_tokens(void **state)
{
    (void)state;
    pinsp_body b = body_of("POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":77}");
    assert_int_equal(b.max_tokens, 77);
    b = body_of("POST", "/v1/chat/completions",
                "{\"messages\":[],\"max_completion_tokens\":12}");
    assert_int_equal(b.max_tokens, 12);
    /* both: max_completion_tokens (the newer name) wins */
    b = body_of("POST", "/v1/chat/completions",
                "{\"messages\":[],\"max_tokens\":500,\"max_completion_tokens\":12}");
    assert_int_equal(b.max_tokens, 12);
    /* not an integer: absent */
    b = body_of("POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":\"77\"}");
    assert_int_equal(b.max_tokens, -1);
    b = body_of("POST", "/v1/chat/completions",
                "{\"messages\":[],\"max_completion_tokens\":null,\"max_tokens\":9}");
    assert_int_equal(b.max_tokens, 9);
}

static void test_other_paths(void **state)
{
    (void)state;
    static const struct {
        const char *method, *path;
    } cases[] = {
        {"POST", "/v1/embeddings"},        {"POST", "/v1/completions/x"},
        {"POST", "/v1/chat/completionsx"}, {"GET", "/v1/completions"},
        {"PUT", "/v1/completions"},        {"POST", "/v1/models"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pinsp_body b = body_of(cases[i].method, cases[i].path,
                               "{\"prompt\":\"abcd\",\"stream\":true,\"max_tokens\":5}");
        if (b.observed || b.stream || b.prompt_tokens != -1 || b.max_tokens != -1)
            fail_msg("%s %s read as a stream to observe", cases[i].method, cases[i].path);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* the head */
        cmocka_unit_test(test_passthrough_and_host),
        cmocka_unit_test(test_hop_by_hop_dropped),
        cmocka_unit_test(test_several_connection_fields),
        cmocka_unit_test(test_framing_kept),
        cmocka_unit_test(test_base_path_and_basic),
        cmocka_unit_test(test_keep_alive_rules),
        cmocka_unit_test(test_version_kept),
        cmocka_unit_test(test_expect),
        cmocka_unit_test(test_head_method),
        cmocka_unit_test(test_malformed),
        /* the body */
        cmocka_unit_test(test_completions_prompt),
        cmocka_unit_test(test_chat_content),
        cmocka_unit_test(test_stream_flag),
        cmocka_unit_test(test_not_json),
        cmocka_unit_test(test_max_tokens),
        cmocka_unit_test(test_other_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
