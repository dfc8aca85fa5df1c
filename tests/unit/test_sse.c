/* sse: the splitter (sse.c) fed whole, one byte at a time, in random splits and against a
 * page guard; the chunk decoder and the counter (chunk.c, over json_scan.c's scanner and
 * its jansson reference) on the shapes of vLLM, llama.cpp, OpenAI, TGI. */
#include <limits.h>
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

#include "client/chunk.h"
#include "client/json_scan.h"
#include "client/sse.h"
#include "common/err.h"
#include "common/rng.h"

#define MAX_EVENTS 64

typedef struct collected {
    int n;
    char data[MAX_EVENTS][512];
    char type[MAX_EVENTS][32];
    int errors;
} collected;

/* Feed text in pieces whose sizes come from split(): 0 = whole, 1 = one byte at a time,
 * else random sizes from a seed. */
static void feed(const char *text, size_t len, size_t piece_max, uint64_t seed, collected *out)
{
    sse_parser p;
    sse_parser_init(&p, 4096);
    memset(out, 0, sizeof *out);
    size_t off = 0;
    uint64_t state = seed;
    while (off < len) {
        size_t piece = len - off;
        if (piece_max == 1)
            piece = 1;
        else if (piece_max > 1)
            piece = (size_t)rng_range(&state, 1, (int64_t)piece_max);
        if (piece > len - off)
            piece = len - off;
        /* A private copy of just this piece, so reading past it is caught by ASan. */
        char *chunk = malloc(piece);
        memcpy(chunk, text + off, piece);
        const char *in = chunk;
        size_t left = piece;
        while (left > 0) {
            size_t used = 0;
            sse_event ev;
            int r = sse_parse(&p, in, left, &used, &ev);
            if (r == SSE_ERROR) {
                out->errors++;
                left = 0;
                break;
            }
            assert_true(used <= left);
            in += used;
            left -= used;
            if (r == SSE_EVENT) {
                assert_true(out->n < MAX_EVENTS);
                assert_int_equal(strlen(ev.data), ev.data_len);
                snprintf(out->data[out->n], sizeof out->data[0], "%s", ev.data);
                snprintf(out->type[out->n], sizeof out->type[0], "%s", ev.type);
                out->n++;
            }
        }
        free(chunk);
        off += piece;
    }
    sse_parser_free(&p);
}

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

/* ---- decoder ---------------------------------------------------------------------- */

static chunk_info decode(const char *type, const char *data)
{
    sse_event ev = {data, strlen(data), type};
    chunk_info c;
    char err[ERR_LEN];
    assert_int_equal(chunk_decode(&ev, &c, err), 0);
    return c;
}

static void test_vllm_completion_continuous_usage(void **state)
{
    (void)state;
    chunk_counter n;
    chunk_counter_init(&n, 0);
    chunk_info c = decode("", "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,"
                             "\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" the\","
                             "\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],"
                             "\"usage\":{\"prompt_tokens\":80,\"total_tokens\":81,"
                             "\"completion_tokens\":1}}");
    assert_true(c.has_choices && c.has_text && c.has_usage);
    assert_int_equal(c.prompt_tokens, 80);
    assert_int_equal(chunk_counter_add(&n, &c), 1);
    /* Two tokens in one event (detokenizer held one back): k = 2. */
    c = decode("", "{\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"ab\","
                   "\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":80,"
                   "\"completion_tokens\":3}}");
    assert_int_equal(chunk_counter_add(&n, &c), 2);
    assert_int_equal(n.delivered, 3);
    c = decode("", "{\"choices\":[{\"index\":0,\"text\":\"z\",\"finish_reason\":\"length\"}],"
                   "\"usage\":{\"prompt_tokens\":80,\"completion_tokens\":4}}");
    assert_true(c.stopped);
    assert_string_equal(c.finish_reason, "length");
    assert_int_equal(chunk_counter_add(&n, &c), 1);
    /* include_usage's final usage-only chunk: no token. */
    c = decode("", "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[],"
                   "\"usage\":{\"prompt_tokens\":80,\"total_tokens\":84,"
                   "\"completion_tokens\":4}}");
    assert_false(c.has_choices);
    assert_true(c.has_usage);
    assert_int_equal(c.completion_tokens, 4);
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    c = decode("", " [DONE]");
    assert_true(c.done);
}

/* Hostile numbers from a server (fuzz/fuzz_sse_chunk found the first one): no undefined
 * float-to-integer cast, and a value that cannot be a count is none: a violation, and the
 * chunk's text counts one token as in a stream without usage. */
static void test_absurd_usage(void **state)
{
    (void)state;
    chunk_counter n;
    chunk_counter_init(&n, 0);
    const char *bad[] = {"1e300", "-1e300", "1099511627776", "-5", "2.5", "\"7\"", "true", "[]"};
    const int n_bad = (int)(sizeof bad / sizeof bad[0]);
    for (int i = 0; i < n_bad; i++) {
        char json[160];
        snprintf(json, sizeof json,
                 "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":%s}}", bad[i]);
        chunk_info c = decode("", json);
        assert_true(c.bad_count);
        assert_int_equal(c.completion_tokens, -1);
        assert_int_equal(chunk_counter_add(&n, &c), 1);
    }
    assert_int_equal(n.delivered, n_bad);
    assert_int_equal(n.violations, n_bad);
    assert_int_equal(n.first, CHUNK_VIOLATION_BAD_COUNT);
    chunk_info c =
        decode("", "{\"choices\":[],\"usage\":{\"prompt_tokens\":-3,\"completion_tokens\":9}}");
    assert_true(c.bad_count);
    assert_int_equal(c.prompt_tokens, -1);
    assert_int_equal(c.completion_tokens, 9);
    /* null is absent, 9.0 is nine. */
    c = decode("", "{\"choices\":[],\"usage\":{\"prompt_tokens\":null,\"completion_tokens\":9.0}}");
    assert_false(c.bad_count);
    assert_int_equal(c.prompt_tokens, -1);
    assert_int_equal(c.completion_tokens, 9);
    /* The native shapes' counters go through the same check. */
    c = decode("", "{\"content\":\"\",\"stop\":true,\"tokens_predicted\":-1,"
                   "\"tokens_evaluated\":5}");
    assert_true(c.bad_count);
    assert_int_equal(c.prompt_tokens, 5);
}

/* The stream: asked for 3 tokens, a server claims 2^31 - 1 in one event, counts
 * backwards, sends a token past the 3, then more after [DONE]. The request gets 3; every
 * impossible thing is ignored and counted. */
static void test_counter_trusts_nothing(void **state)
{
    (void)state;
    chunk_counter n;
    chunk_counter_init(&n, 3);
    chunk_info c = decode("", "{\"choices\":[{\"text\":\"ab\"}],\"usage\":{\"prompt_tokens\":5,"
                             "\"completion_tokens\":2}}");
    assert_int_equal(chunk_counter_add(&n, &c), 2);
    assert_int_equal(n.violations, 0);
    c = decode("", "{\"choices\":[{\"text\":\"c\"}],\"usage\":{\"completion_tokens\":2147483647}}");
    assert_false(c.bad_count); /* a count, but not of this request */
    assert_int_equal(chunk_counter_add(&n, &c), 1); /* its text, as without usage */
    assert_int_equal(n.violations, 1);
    assert_int_equal(n.first, CHUNK_VIOLATION_PAST_MAX);
    c = decode("", "{\"choices\":[{\"text\":\"d\"}],\"usage\":{\"completion_tokens\":1}}");
    assert_int_equal(chunk_counter_add(&n, &c), 0); /* backwards, and the 3 are delivered */
    assert_int_equal(n.violations, 2);
    c = decode("", "{\"choices\":[{\"text\":\"e\"}]}");
    assert_int_equal(chunk_counter_add(&n, &c), 0); /* a fourth token */
    assert_int_equal(n.violations, 3);
    c = decode("", "{\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}");
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    assert_int_equal(n.violations, 3);
    assert_false(chunk_counter_ended(&n));
    c = decode("", "[DONE]");
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    assert_true(n.done);
    assert_int_equal(n.violations, 3);
    /* After [DONE] every event is one, whatever it holds (a token, another [DONE]). */
    assert_true(chunk_counter_ended(&n));
    c = decode("", "{\"choices\":[{\"text\":\"f\"}],\"usage\":{\"completion_tokens\":3}}");
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    c = decode("", "[DONE]");
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    assert_int_equal(n.violations, 6);
    assert_int_equal(n.delivered, 3);
    assert_int_equal(chunk_counter_completion(&n), 3);
    assert_int_equal(n.usage_prompt, 5);
    assert_int_equal(n.first, CHUNK_VIOLATION_PAST_MAX);
    assert_non_null(strstr(chunk_violation_text(CHUNK_VIOLATION_AFTER_DONE), "[DONE]"));
    for (int v = CHUNK_VIOLATION_AFTER_DONE; v < CHUNK_VIOLATION_KINDS; v++)
        assert_true(strlen(chunk_violation_text((chunk_violation)v)) > 5);

    /* Unbounded (max_tokens unknown): a count still cannot go backwards, and a refused count
     * leaves the completion at the tokens delivered. */
    chunk_counter_init(&n, 0);
    c = decode("", "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":40}}");
    assert_int_equal(chunk_counter_add(&n, &c), 40);
    c = decode("", "{\"choices\":[],\"usage\":{\"completion_tokens\":7}}");
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    assert_int_equal(n.violations, 1);
    assert_int_equal(n.first, CHUNK_VIOLATION_COUNT_BACKWARDS);
    assert_int_equal(chunk_counter_completion(&n), 40);
}

/* count events of one text chunk (no usage in it), each one token. */
static void add_text_events(chunk_counter *n, const char *json, int count)
{
    for (int i = 0; i < count; i++) {
        chunk_info c = decode("", json);
        assert_int_equal(chunk_counter_add(n, &c), 1);
    }
}

/* Issue 22, defect 5: a usage that claims more tokens than the stream showed. Before, the
 * request took the usage's count (requests.csv said twice what tokens.csv held); now the
 * count is refused, counted as a violation, and the request has what streamed. */
static void test_counter_usage_above_stream(void **state)
{
    (void)state;
    chunk_counter n;
    /* 20 text events without usage, then a usage-only chunk claiming 40 (max_tokens 40). */
    chunk_counter_init(&n, 40);
    add_text_events(&n, "{\"choices\":[{\"index\":0,\"text\":\" w\"}]}", 20);
    chunk_info c =
        decode("", "{\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}");
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    c = decode("", "{\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":40}}");
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    assert_int_equal(n.violations, 1);
    assert_int_equal(n.first, CHUNK_VIOLATION_ABOVE_STREAM);
    assert_int_equal(n.by_kind[CHUNK_VIOLATION_ABOVE_STREAM], 1);
    assert_int_equal(chunk_counter_completion(&n), 20);
    assert_int_equal(n.usage_prompt, 8); /* the prompt's count is another matter */
    assert_string_equal(chunk_violation_name(CHUNK_VIOLATION_ABOVE_STREAM), "above_stream");
    assert_non_null(strstr(chunk_violation_text(CHUNK_VIOLATION_ABOVE_STREAM), "streamed"));

    /* The same after continuous usage that kept up (1, 2, 3), and a text-less finishing
     * chunk that claims the rest in one go: no token, refused. */
    chunk_counter_init(&n, 0);
    for (int i = 1; i <= 3; i++) {
        char json[128];
        snprintf(json, sizeof json,
                 "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":%d}}", i);
        c = decode("", json);
        assert_int_equal(chunk_counter_add(&n, &c), 1);
    }
    c = decode("", "{\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}],"
                   "\"usage\":{\"completion_tokens\":30}}");
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    c = decode("", "{\"choices\":[],\"usage\":{\"completion_tokens\":30}}");
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    assert_int_equal(n.by_kind[CHUNK_VIOLATION_ABOVE_STREAM], 2);
    assert_int_equal(chunk_counter_completion(&n), 3);

    /* A count that arrives only at the end (TGI's generated_tokens) on the last token: 2
     * tokens streamed one each, the third claims 9. Its text is one token. */
    chunk_counter_init(&n, 0);
    add_text_events(&n, "{\"token\":{\"text\":\"a\",\"special\":false},\"generated_text\":null}", 2);
    c = decode("", "{\"token\":{\"text\":\"b\",\"special\":false},\"generated_text\":\"aab\","
                   "\"details\":{\"finish_reason\":\"length\",\"generated_tokens\":9}}");
    assert_int_equal(chunk_counter_add(&n, &c), 1);
    assert_int_equal(n.first, CHUNK_VIOLATION_ABOVE_STREAM);
    assert_int_equal(chunk_counter_completion(&n), 3);
    /* ... and nothing may be claimed before the first token either. */
    chunk_counter_init(&n, 0);
    c = decode("", "{\"choices\":[],\"usage\":{\"completion_tokens\":5}}");
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    assert_int_equal(n.first, CHUNK_VIOLATION_ABOVE_STREAM);

    /* What stays true: the stop token streams no text, so usage may be one above the events
     * (OpenAI's final usage after a "stop"), and a continuous usage may carry 2 tokens in one
     * event (vLLM's held-back token): no violation. */
    chunk_counter_init(&n, 0);
    add_text_events(&n, "{\"choices\":[{\"delta\":{\"content\":\"x\"}}]}", 5);
    c = decode("", "{\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}");
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    c = decode("", "{\"choices\":[],\"usage\":{\"completion_tokens\":6}}");
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    assert_int_equal(n.violations, 0);
    assert_int_equal(chunk_counter_completion(&n), 6);
    chunk_counter_init(&n, 0);
    c = decode("", "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":1}}");
    assert_int_equal(chunk_counter_add(&n, &c), 1);
    c = decode("", "{\"choices\":[{\"text\":\"bc\"}],\"usage\":{\"completion_tokens\":3}}");
    assert_int_equal(chunk_counter_add(&n, &c), 2);
    c = decode("", "{\"choices\":[{\"text\":\"\",\"finish_reason\":\"stop\"}],"
                   "\"usage\":{\"completion_tokens\":4}}");
    assert_int_equal(chunk_counter_add(&n, &c), 1); /* the stop token, as an event */
    assert_int_equal(n.violations, 0);
    assert_int_equal(chunk_counter_completion(&n), 4);
}

static void test_openai_chat_chunks(void **state)
{
    (void)state;
    chunk_counter n;
    chunk_counter_init(&n, 0);
    /* First chunk: the role, empty content: not a token. */
    chunk_info c = decode("", "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\","
                             "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
                             "\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}");
    assert_true(c.has_choices);
    assert_false(c.has_text);
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    c = decode("", "{\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
                   "\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}");
    assert_int_equal(chunk_counter_add(&n, &c), 1);
    c = decode("", "{\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"}}]}");
    assert_int_equal(chunk_counter_add(&n, &c), 1);
    c = decode("", "{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}");
    assert_true(c.stopped);
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    /* OpenAI's usage chunk (include_usage): choices empty, usage set. */
    c = decode("", "{\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":"
                   "{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}");
    assert_int_equal(c.completion_tokens, 2);
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    assert_int_equal(n.delivered, 2);
    c = decode("", "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}");
    assert_true(c.has_text);
}

static void test_llamacpp_shapes(void **state)
{
    (void)state;
    chunk_counter n;
    chunk_counter_init(&n, 0);
    /* Native /completion stream. */
    chunk_info c = decode("", "{\"content\":\" the\",\"stop\":false,\"id_slot\":0,"
                             "\"multimodal\":false,\"index\":0}");
    assert_true(c.has_text);
    assert_int_equal(chunk_counter_add(&n, &c), 1);
    c = decode("", "{\"content\":\"\",\"stop\":true,\"stop_type\":\"limit\",\"tokens_predicted\":"
                   "1,\"tokens_evaluated\":12,\"timings\":{\"predicted_ms\":3.1}}");
    assert_true(c.stopped);
    assert_string_equal(c.finish_reason, "length");
    assert_int_equal(c.prompt_tokens, 12);
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    /* Its OpenAI-compatible /v1/chat/completions, with timings on the last chunk. */
    chunk_counter_init(&n, 0);
    c = decode("", "{\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":"
                   "\"x\"}}],\"created\":1,\"id\":\"chatcmpl-a\",\"model\":\"gpt-3.5-turbo\","
                   "\"object\":\"chat.completion.chunk\"}");
    assert_int_equal(chunk_counter_add(&n, &c), 1);
    c = decode("", "{\"choices\":[{\"finish_reason\":\"length\",\"index\":0,\"delta\":{}}],"
                   "\"usage\":{\"completion_tokens\":1,\"prompt_tokens\":5,\"total_tokens\":6},"
                   "\"timings\":{\"predicted_n\":1}}");
    assert_string_equal(c.finish_reason, "length");
    assert_int_equal(chunk_counter_add(&n, &c), 0);
    /* llama.cpp's error line. */
    c = decode("error", "{\"code\":500,\"message\":\"slot unavailable\",\"type\":\"server_error\"}");
    assert_true(c.is_error);
}

static void test_tgi_and_errors_and_stallscope(void **state)
{
    (void)state;
    chunk_counter n;
    chunk_counter_init(&n, 0);
    chunk_info c = decode("", "{\"index\":1,\"token\":{\"id\":5,\"text\":\"a\",\"logprob\":-1,"
                             "\"special\":false},\"generated_text\":null,\"details\":null}");
    assert_int_equal(chunk_counter_add(&n, &c), 1);
    c = decode("", "{\"index\":2,\"token\":{\"id\":6,\"text\":\"b\",\"special\":false},"
                   "\"generated_text\":\"ab\",\"details\":{\"finish_reason\":\"length\","
                   "\"generated_tokens\":2}}");
    assert_true(c.stopped);
    assert_int_equal(chunk_counter_add(&n, &c), 1);

    c = decode("", "{\"error\":{\"message\":\"too long\",\"type\":\"BadRequestError\","
                   "\"code\":400}}");
    assert_true(c.is_error);
    assert_string_equal(c.error, "too long");
    c = decode("", "{\"object\":\"error\",\"message\":\"old vllm\",\"type\":\"x\"}");
    assert_true(c.is_error);
    assert_string_equal(c.error, "old vllm");
    c = decode("error", "upstream went away");
    assert_true(c.is_error);
    assert_string_equal(c.error, "upstream went away");

    c = decode("", "{\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"t\"}],"
                   "\"stallscope\":{\"emit_ns\":123456789012,\"step\":42}}");
    assert_int_equal(c.emit_ns, 123456789012LL);
    assert_int_equal(c.step, 42);
    c = decode("", "{\"choices\":[{\"index\":0,\"text\":\"t\"}]}");
    assert_int_equal(c.emit_ns, -1);

    sse_event bad = {"{\"choices\": [", 13, ""};
    char err[ERR_LEN];
    assert_int_equal(chunk_decode(&bad, &c, err), -1);
    assert_non_null(strstr(err, "malformed"));
    sse_event arr = {"[1,2]", 5, ""};
    assert_int_equal(chunk_decode(&arr, &c, err), -1);
}

/* A whole vLLM-style stream, byte by byte and in random splits, through split + decode. */
static void test_stream_end_to_end(void **state)
{
    (void)state;
    char text[16384];
    size_t len = 0;
    len += (size_t)snprintf(text + len, sizeof text - len, ": connected\r\n\r\n");
    for (int i = 1; i <= 20; i++)
        len += (size_t)snprintf(text + len, sizeof text - len,
                                "data: {\"choices\":[{\"index\":0,\"text\":\"w%d\"}],"
                                "\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":%d}}\r\n\r\n",
                                i, i * 2 - (i == 1));
    len += (size_t)snprintf(text + len, sizeof text - len,
                            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,"
                            "\"completion_tokens\":40}}\n\ndata: [DONE]\n\n");
    for (uint64_t seed = 0; seed < 50; seed++) {
        collected got;
        feed(text, len, seed == 0 ? 1 : 1 + seed * 7, seed, &got);
        assert_int_equal(got.n, 22);
        chunk_counter n;
        chunk_counter_init(&n, 0);
        int64_t total = 0;
        int events = 0;
        bool done = false;
        for (int i = 0; i < got.n; i++) {
            chunk_info c = decode("", got.data[i]);
            int k = chunk_counter_add(&n, &c);
            total += k;
            events += k > 0;
            done |= c.done;
        }
        assert_int_equal(total, 40);
        assert_int_equal(events, 20);
        assert_true(done);
    }
}

/* ---- the scanner against jansson ------------------------------------------------------ */

/* Both decoders on one event: the same return, and for a decoded chunk the same fields. */
static void expect_same_decoding(const char *type, const char *data, size_t len)
{
    /* An exact-size copy: a read past the event's end is ASan's to catch. */
    char *copy = malloc(len + 1);
    assert_non_null(copy);
    memcpy(copy, data, len);
    copy[len] = '\0';
    sse_event ev = {copy, len, type};
    chunk_info fast, ref;
    char fast_err[ERR_LEN] = "", ref_err[ERR_LEN] = "";
    const int fast_rc = chunk_decode(&ev, &fast, fast_err);
    if (memchr(copy, '\0', len)) {
        /* JSON text never holds a NUL byte: the scanner refuses it wherever it is. jansson
         * 2.14 does too, but for one right after a number or a literal, which its lexer's
         * push-back drops ({"x":1<NUL>} loads as {"x":1}): not compared. */
        if (strcmp(type, "error") == 0)
            assert_true(fast_rc == 0 && fast.is_error);
        else
            assert_int_equal(fast_rc, -1);
        free(copy);
        return;
    }
    const int ref_rc = chunk_decode_jansson(&ev, &ref, ref_err);
    bool same = fast_rc == ref_rc;
    if (same && fast_rc == 0)
        same = fast.done == ref.done && fast.is_error == ref.is_error &&
               strcmp(fast.error, ref.error) == 0 && fast.has_choices == ref.has_choices &&
               fast.has_text == ref.has_text && fast.has_usage == ref.has_usage &&
               fast.bad_count == ref.bad_count && fast.prompt_tokens == ref.prompt_tokens &&
               fast.completion_tokens == ref.completion_tokens &&
               strcmp(fast.finish_reason, ref.finish_reason) == 0 &&
               fast.stopped == ref.stopped && fast.emit_ns == ref.emit_ns &&
               fast.step == ref.step;
    else if (same)
        same = strncmp(fast_err, "malformed SSE chunk", 19) == 0;
    if (!same) {
        char shown[400];
        size_t n = 0;
        for (size_t i = 0; i < len && n + 5 < sizeof shown; i++)
            n += (size_t)snprintf(shown + n, sizeof shown - n,
                                  (unsigned char)copy[i] < 0x20 || (unsigned char)copy[i] >= 0x7f
                                      ? "\\x%02x"
                                      : "%c",
                                  (unsigned char)copy[i]);
        fail_msg("decoders differ on [%s] '%s': scanner %d (%s) error '%s' choices %d text %d "
                 "usage %d bad %d prompt %lld completion %lld finish '%s' stopped %d emit %lld "
                 "step %lld; jansson %d (%s) error '%s' choices %d text %d usage %d bad %d "
                 "prompt %lld completion %lld finish '%s' stopped %d emit %lld step %lld",
                 type, shown, fast_rc, fast_err, fast.error, fast.has_choices, fast.has_text,
                 fast.has_usage, fast.bad_count, (long long)fast.prompt_tokens,
                 (long long)fast.completion_tokens, fast.finish_reason, fast.stopped,
                 (long long)fast.emit_ns, (long long)fast.step, ref_rc, ref_err, ref.error,
                 ref.has_choices, ref.has_text, ref.has_usage, ref.bad_count,
                 (long long)ref.prompt_tokens, (long long)ref.completion_tokens,
                 ref.finish_reason, ref.stopped, (long long)ref.emit_ns, (long long)ref.step);
    }
    free(copy);
}

/* Chunks as servers send them, and as they should never send them. */
static const char *const chunk_corpus[] = {
    /* vLLM completions with continuous usage, stallscope's extension, a usage-only end */
    "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":"
    "[{\"index\":0,\"text\":\" the\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":"
    "null}],\"usage\":{\"prompt_tokens\":80,\"total_tokens\":81,\"completion_tokens\":1}}",
    "{\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"t\",\"finish_reason\":"
    "\"length\"}],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":4},\"stallscope\":"
    "{\"emit_ns\":123456789012,\"step\":42}}",
    "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[],\"usage\":{\"prompt_tokens\":"
    "80,\"total_tokens\":84,\"completion_tokens\":4}}",
    /* vLLM with logprobs: reals and nested arrays to skip */
    "{\"choices\":[{\"index\":0,\"text\":\"a\",\"logprobs\":{\"tokens\":[\"a\"],\"token_logprobs\":"
    "[-0.0123],\"top_logprobs\":[{\"a\":-0.0123,\"b\":-4.5e0}],\"text_offset\":[0]},"
    "\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}",
    /* SGLang */
    "{\"id\":\"x\",\"object\":\"text_completion\",\"created\":1,\"model\":\"default\",\"choices\":"
    "[{\"index\":0,\"text\":\"Hi\",\"logprobs\":null,\"finish_reason\":null,\"matched_stop\":"
    "null}],\"usage\":{\"prompt_tokens\":5,\"total_tokens\":7,\"completion_tokens\":2}}",
    /* OpenAI chat */
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
    "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}",
    "{\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},"
    "\"finish_reason\":null}]}",
    "{\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"}}]}",
    "{\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"hm\"}}]}",
    "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":"
    "\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]}}]}",
    "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[]}}]}",
    "{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}",
    "{\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,"
    "\"completion_tokens\":2,\"total_tokens\":11}}",
    /* llama.cpp: native and OpenAI-compatible, its error line */
    "{\"content\":\" the\",\"stop\":false,\"id_slot\":0,\"multimodal\":false,\"index\":0}",
    "{\"content\":\"\",\"stop\":true,\"stop_type\":\"limit\",\"tokens_predicted\":1,"
    "\"tokens_evaluated\":12,\"timings\":{\"predicted_ms\":3.1}}",
    "{\"content\":\"\",\"stop\":true,\"stop_type\":\"eos\",\"tokens_predicted\":1.0}",
    "{\"content\":\"x\",\"stop\":true,\"tokens_predicted\":-1,\"tokens_evaluated\":\"5\"}",
    "{\"choices\":[{\"finish_reason\":\"length\",\"index\":0,\"delta\":{}}],\"usage\":"
    "{\"completion_tokens\":1,\"prompt_tokens\":5,\"total_tokens\":6},\"timings\":"
    "{\"predicted_n\":1}}",
    "{\"code\":500,\"message\":\"slot unavailable\",\"type\":\"server_error\"}",
    /* TGI */
    "{\"index\":1,\"token\":{\"id\":5,\"text\":\"a\",\"logprob\":-1,\"special\":false},"
    "\"generated_text\":null,\"details\":null}",
    "{\"index\":2,\"token\":{\"id\":6,\"text\":\"b\",\"special\":false},\"generated_text\":\"ab\","
    "\"details\":{\"finish_reason\":\"length\",\"generated_tokens\":2}}",
    "{\"token\":{},\"details\":{\"finish_reason\":\"eos_token\",\"generated_tokens\":2.0}}",
    "{\"token\":{},\"generated_text\":false,\"details\":{\"finish_reason\":\"eos_tokens\"}}",
    /* errors */
    "{\"error\":{\"message\":\"too long\",\"type\":\"BadRequestError\",\"code\":400}}",
    "{\"error\":{\"type\":\"x\"}}",
    "{\"error\":\"plain\"}",
    "{\"error\":\"\"}",
    "{\"error\":null,\"choices\":[{\"text\":\"a\"}]}",
    "{\"object\":\"error\",\"message\":\"old vllm\",\"type\":\"x\"}",
    "{\"object\":\"error\",\"message\":7}",
    "{\"object\":\"errors\",\"message\":\"no\"}",
    "{\"object\":\"err\\u006fr\",\"message\":\"escaped\"}",
    "upstream went away",
    /* counts that are not counts */
    "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":1e300}}",
    "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":-1e300}}",
    "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":1099511627776}}",
    "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":2147483647}}",
    "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":2147483648}}",
    "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":2.5}}",
    "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":9.0,\"prompt_tokens\":null}}",
    "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":-0,\"prompt_tokens\":-0.0}}",
    "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":\"7\"}}",
    "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":true,\"prompt_tokens\":[]}}",
    "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":{}}}",
    "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":3E0,\"prompt_tokens\":4e-0}}",
    "{\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":0.30000000000000004e1}}",
    "{\"stallscope\":{\"emit_ns\":9.5e18,\"step\":-9e18},\"choices\":[{\"text\":\"a\"}]}",
    "{\"stallscope\":{\"emit_ns\":9223372036854775807,\"step\":-9223372036854775808}}",
    "{\"stallscope\":{\"emit_ns\":\"1\",\"step\":null}}",
    "{\"stallscope\":[1,2]}",
    /* numbers jansson refuses, and the ones next to them it takes */
    "{\"x\":9223372036854775808}",
    "{\"x\":-9223372036854775809}",
    "{\"x\":1e309}",
    "{\"x\":-1e309}",
    "{\"x\":1.7976931348623157e308}",
    "{\"x\":1.7976931348623159e308}",
    "{\"x\":17976931348623157e292}",
    "{\"x\":0.1e310}",
    "{\"x\":1e-400}",
    "{\"x\":123456789012345678901234567890123456789012345678901234567890123456789012.5}",
    "{\"x\":01}",
    "{\"x\":-}",
    "{\"x\":1.}",
    "{\"x\":.5}",
    "{\"x\":1e}",
    "{\"x\":1e+}",
    "{\"x\":+1}",
    "{\"x\":0x10}",
    "{\"x\":-0}",
    "{\"x\":1E+2,\"y\":1e-2}",
    /* strings: escapes, Unicode, what jansson refuses */
    "{\"choices\":[{\"t\\u0065xt\":\"\\u00e9\",\"finish_r\\u0065ason\":\"\\ud83d\\ude00 stop\"}]}",
    "{\"choices\":[{\"text\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"}]}",
    "{\"choices\":[{\"text\":\"\\u0000\"}]}",
    "{\"choices\":[{\"text\":\"\\ud800\"}]}",
    "{\"choices\":[{\"text\":\"\\udc00\"}]}",
    "{\"choices\":[{\"text\":\"\\ud800\\u0041\"}]}",
    "{\"choices\":[{\"text\":\"\\ud800\\\\u0041\"}]}",
    "{\"choices\":[{\"text\":\"\\x\"}]}",
    "{\"choices\":[{\"text\":\"\\u12g4\"}]}",
    "{\"choices\":[{\"text\":\"a\tb\"}]}",
    "{\"choices\":[{\"text\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}]}",
    "{\"choices\":[{\"text\":\"\xc0\xaf\"}]}",
    "{\"choices\":[{\"text\":\"\xed\xa0\x80\"}]}",
    "{\"choices\":[{\"text\":\"\xf4\x90\x80\x80\"}]}",
    "{\"choices\":[{\"text\":\"\xe2\x82\"}]}",
    "{\"choices\":[{\"text\":\"\x80\"}]}",
    "{\"choices\":[{\"text\":\"\xff\"}]}",
    "{\"choices\":[{\"text\":\"a\"}]}\xc3\xa9",
    "{\"choices\":[{\"text\":\"a\",\"finish_reason\":\"a finish reason longer than sixteen\"}]}",
    "{\"choices\":[{\"text\":\"a\",\"finish_reason\":\"abcdefghijklmn\xc3\xa9\"}]}",
    "{\"choices\":[{\"text\":\"a\",\"finish_reason\":\"\"}]}",
    "{\"choices\":[{\"text\":\"a\",\"finish_reason\":7}]}",
    "{\"error\":{\"message\":\"0123456789012345678901234567890123456789012345678901234567890123456789"
    "01234567890123456789012345678901234567890123456789012345678901234567890123456789\\u00e9\"}}",
    /* duplicate keys: jansson keeps the last */
    "{\"usage\":{\"completion_tokens\":3},\"usage\":5,\"choices\":[{\"text\":\"a\"}]}",
    "{\"usage\":5,\"usage\":{\"completion_tokens\":3,\"completion_tokens\":4}}",
    "{\"choices\":[],\"choices\":[{\"text\":\"\",\"text\":\"a\"}]}",
    "{\"error\":\"x\",\"error\":null,\"choices\":[{\"text\":\"a\"}]}",
    /* shapes: not objects, choices that are not arrays of objects, odd white space */
    "[{\"choices\":[]}]",
    "[1,2]",
    "\"text\"",
    "42",
    "null",
    "",
    "   ",
    "{}",
    " \t\r\n{ \"choices\" : [ { \"text\" : \"a\" } ] } \n",
    "{\"choices\":[1]}",
    "{\"choices\":[[\"text\"]]}",
    "{\"choices\":[null,{\"text\":\"a\"}]}",
    "{\"choices\":{\"text\":\"a\"}}",
    "{\"choices\":\"a\",\"content\":\"b\"}",
    "{\"content\":5,\"token\":{}}",
    /* grammar jansson refuses */
    "{\"choices\":[{\"text\":\"a\"},]}",
    "{\"choices\":[{\"text\":\"a\",}]}",
    "{\"choices\":[{\"text\" \"a\"}]}",
    "{\"choices\":[{\"text\":\"a\"}]",
    "{\"choices\":[{\"text\":\"a\"}]}}",
    "{\"choices\":[{\"text\":\"a\"}]} x",
    "{choices:[]}",
    "{'choices':[]}",
    "{\"a\":tru}",
    "{\"a\":truex}",
    "{\"a\":nul}",
    "{\"a\":True}",
    "{\"a\":[1 2]}",
    "{\"a\":[,1]}",
    "{\"a\"::1}",
    "{,}",
    "[DONE]",
    " [DONE] ",
    "[DONE]x",
};

/* Every chunk of the corpus, with each event type, and thousands of mutants of it (cut at
 * every length, bytes replaced by JSON's special characters and by UTF-8 fragments, bytes
 * dropped or doubled): the scanner gives what jansson gives on every one. */
static void test_scanner_matches_jansson(void **state)
{
    (void)state;
    static const char *const types[] = {"", "error", "message"};
    static const char specials[] = "\"\\{}[]:,0-9eE.+ \t\nutfnal\x80\xbf\xc3\xe2\xf0\xff";
    uint64_t rng = 14;
    int cases = 0;
    for (size_t i = 0; i < sizeof chunk_corpus / sizeof chunk_corpus[0]; i++) {
        const char *chunk = chunk_corpus[i];
        const size_t len = strlen(chunk);
        for (int t = 0; t < 3; t++, cases++)
            expect_same_decoding(types[t], chunk, len);
        for (size_t cut = 0; cut < len; cut++, cases++)
            expect_same_decoding("", chunk, cut);
        char mutant[512];
        if (len + 2 > sizeof mutant)
            continue;
        for (int m = 0; m < 120; m++, cases++) {
            memcpy(mutant, chunk, len);
            size_t n = len;
            const size_t at = len ? (size_t)rng_range(&rng, 0, (int64_t)len - 1) : 0;
            switch (m % 4) {
            case 0:
            case 1:
                if (n)
                    mutant[at] = specials[rng_range(&rng, 0, (int64_t)sizeof specials - 2)];
                break;
            case 2:
                if (n) {
                    memmove(mutant + at, mutant + at + 1, n - at - 1);
                    n--;
                }
                break;
            default:
                memmove(mutant + at + 1, mutant + at, n - at);
                n++;
                break;
            }
            expect_same_decoding(m % 8 == 7 ? "error" : "", mutant, n);
        }
    }
    /* A NUL inside the data (the length says where it ends, not the NUL): refused. */
    expect_same_decoding("", "{\"choices\":[{\"text\":\"a\0\"}]}", 26);
    expect_same_decoding("", "{\"choices\":[]}\0", 15);
    expect_same_decoding("", "{\"usage\":{\"completion_tokens\":1\0}}", 34);
    expect_same_decoding("error", "{\"a\":true\0}", 11);
    assert_true(cases > 10000);
}

/* jansson counts every value one level (the root object is level 1) and refuses level
 * 2,049: a chunk nested to level 2,048 decodes, one level deeper is malformed, with both
 * decoders; and the scanner needs no stack for it. */
static void test_scanner_depth_limit(void **state)
{
    (void)state;
    for (int levels = 2045; levels <= 2050; levels++) {
        /* {"choices":[{"text":"a"}],"x": [[...]] }: the innermost array at `levels` */
        const int arrays = levels - 1;
        size_t cap = 64 + 2 * (size_t)arrays, n = 0;
        char *text = malloc(cap);
        assert_non_null(text);
        n += (size_t)snprintf(text, cap, "{\"choices\":[{\"text\":\"a\"}],\"x\":");
        memset(text + n, '[', (size_t)arrays);
        n += (size_t)arrays;
        memset(text + n, ']', (size_t)arrays);
        n += (size_t)arrays;
        text[n++] = '}';
        text[n] = '\0';
        expect_same_decoding("", text, n);
        sse_event ev = {text, n, ""};
        chunk_info c;
        char err[ERR_LEN];
        assert_int_equal(chunk_decode(&ev, &c, err), levels <= 2048 ? 0 : -1);
        free(text);
    }
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
        cmocka_unit_test(test_vllm_completion_continuous_usage),
        cmocka_unit_test(test_absurd_usage),
        cmocka_unit_test(test_counter_trusts_nothing),
        cmocka_unit_test(test_counter_usage_above_stream),
        cmocka_unit_test(test_openai_chat_chunks),
        cmocka_unit_test(test_llamacpp_shapes),
        cmocka_unit_test(test_tgi_and_errors_and_stallscope),
        cmocka_unit_test(test_stream_end_to_end),
        cmocka_unit_test(test_scanner_matches_jansson),
        cmocka_unit_test(test_scanner_depth_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
