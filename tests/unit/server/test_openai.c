/* openai: request parsing with valid and hostile input, SSE and response encoding. */
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
#include <jansson.h>

#include "common/rng.h"
#include "engine/vocab.h"
#include "server/openai.h"

static int64_t tokenize(void *ctx, const char *text, size_t len, int32_t *ids, int64_t max_ids)
{
    (void)ctx;
    return vocab_tokenize(text, len, ids, max_ids, 128256);
}

static const openai_limits limits = {
    .model_name = "llama-3.1-8b",
    .max_model_len = 1000,
    .vocab_size = 128256,
    .tokenize = tokenize,
};

static int parse(openai_endpoint ep, const char *body, openai_request *r, openai_error *e)
{
    return openai_parse_request(ep, body, strlen(body), &limits, r, e);
}

static void expect_error(openai_endpoint ep, const char *body, int status, const char *param)
{
    openai_request r;
    openai_error e;
    memset(&e, 0, sizeof e);
    if (parse(ep, body, &r, &e) == 0)
        fail_msg("accepted: %s", body);
    if (e.status != status)
        fail_msg("%s: status %d, wanted %d (%s)", body, e.status, status, e.message);
    assert_non_null(e.type);
    assert_true(strlen(e.message) > 0);
    if (param)
        assert_string_equal(e.param, param);
}

static void test_completion_defaults(void **state)
{
    (void)state;
    openai_request r;
    openai_error e;
    /* The(1) quick(2) brownish(2) fox(1) */
    assert_int_equal(parse(OPENAI_COMPLETIONS, "{\"prompt\": \"The quick brownish fox\"}", &r, &e),
                     0);
    assert_int_equal(r.prompt_tokens, 6);
    assert_int_equal(r.max_tokens, 16); /* OpenAI's / vLLM's completions default */
    assert_false(r.stream);
    assert_false(r.ignore_eos);
    assert_true(r.temperature == 1.0);
    assert_null(r.prompt_ids);
    openai_request_free(&r);

    assert_int_equal(parse(OPENAI_COMPLETIONS,
                           "{\"model\":\"llama-3.1-8b\",\"prompt\":[5,6,7],\"max_tokens\":9,"
                           "\"min_tokens\":2,\"ignore_eos\":true,\"temperature\":0,\"seed\":42,"
                           "\"stop\":[\"x\",\"yy\"],\"stream\":true,\"stream_options\":"
                           "{\"include_usage\":true,\"continuous_usage_stats\":true},"
                           "\"stallscope\":{\"timestamps\":true},\"top_p\":0.9,\"n\":1}",
                           &r, &e),
                     0);
    assert_int_equal(r.prompt_tokens, 3);
    assert_non_null(r.prompt_ids);
    assert_int_equal(r.prompt_ids[2], 7);
    assert_int_equal(r.max_tokens, 9);
    assert_int_equal(r.min_tokens, 2);
    assert_true(r.ignore_eos && r.stream && r.include_usage && r.continuous_usage);
    assert_true(r.timestamps);
    assert_int_equal(r.client_id, -1); /* the client named no id */
    assert_true(r.has_seed);
    assert_int_equal(r.seed, 42);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[1], "yy");
    uint64_t hash = r.prompt_hash;
    openai_request_free(&r);
    /* The client's id for the server's sched log. */
    assert_int_equal(
        parse(OPENAI_COMPLETIONS, "{\"prompt\":\"x\",\"stallscope\":{\"request\":41}}", &r, &e), 0);
    assert_int_equal(r.client_id, 41);
    assert_false(r.timestamps);
    openai_request_free(&r);
    /* A one-element batch is its element; the prompt hash follows the prompt. */
    assert_int_equal(parse(OPENAI_COMPLETIONS, "{\"prompt\":[[5,6,7]]}", &r, &e), 0);
    assert_int_equal(r.prompt_tokens, 3);
    assert_true(r.prompt_hash == hash);
    openai_request_free(&r);
    assert_int_equal(parse(OPENAI_COMPLETIONS, "{\"prompt\":[\"abcdefgh\"],\"stop\":\"s\"}", &r, &e),
                     0);
    assert_int_equal(r.prompt_tokens, 2);
    assert_int_equal(r.n_stop, 1);
    openai_request_free(&r);
}

/* With keep_text_ids a text prompt keeps its ids, one per counted token (template tokens
 * made up), and a conversation that grows by a turn keeps the earlier turns' ids as its
 * prefix: the engine's prefix cache names blocks by them. */
static void test_text_ids_kept(void **state)
{
    (void)state;
    openai_limits keep = limits;
    keep.keep_text_ids = true;
    keep.max_model_len = 100000;
    const char *one = "{\"model\": \"llama-3.1-8b\", \"messages\": [{\"role\": \"system\", "
                      "\"content\": \"you are a careful assistant who answers briefly\"}, "
                      "{\"role\": \"user\", \"content\": \"what is a stall\"}]}";
    const char *two = "{\"model\": \"llama-3.1-8b\", \"messages\": [{\"role\": \"system\", "
                      "\"content\": \"you are a careful assistant who answers briefly\"}, "
                      "{\"role\": \"user\", \"content\": \"what is a stall\"}, {\"role\": "
                      "\"assistant\", \"content\": \"a long gap between tokens\"}, "
                      "{\"role\": \"user\", \"content\": \"and its cause\"}]}";
    openai_request a, b;
    openai_error e;
    assert_int_equal(openai_parse_request(OPENAI_CHAT, one, strlen(one), &keep, &a, &e), 0);
    assert_int_equal(openai_parse_request(OPENAI_CHAT, two, strlen(two), &keep, &b, &e), 0);
    assert_non_null(a.text_ids);
    assert_int_equal(a.n_text_ids, a.prompt_tokens);
    assert_int_equal(b.n_text_ids, b.prompt_tokens);
    assert_true(b.prompt_tokens > a.prompt_tokens);
    /* Everything before a's assistant header (its last 3 ids) is b's prefix. */
    assert_memory_equal(a.text_ids, b.text_ids, (size_t)(a.n_text_ids - 3) * sizeof(int32_t));
    openai_request_free(&a);
    openai_request_free(&b);
    /* Without keep_text_ids nothing is kept. */
    assert_int_equal(openai_parse_request(OPENAI_CHAT, one, strlen(one), &limits, &a, &e), 0);
    assert_null(a.text_ids);
    openai_request_free(&a);
}

static void test_chat(void **state)
{
    (void)state;
    openai_request r;
    openai_error e;
    /* 1 BOS + 3 assistant header + 2 messages x 4 + "hello"(2) + "hi"(1) "there"(2) */
    assert_int_equal(parse(OPENAI_CHAT,
                           "{\"messages\":[{\"role\":\"system\",\"content\":\"hello\"},"
                           "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi "
                           "there\"}]}],\"max_completion_tokens\":7,\"max_tokens\":3}",
                           &r, &e),
                     0);
    assert_int_equal(r.prompt_tokens, 1 + 3 + 8 + 2 + 3);
    assert_int_equal(r.max_tokens, 7); /* max_completion_tokens wins */
    openai_request_free(&r);
    /* Chat's default: the rest of the context. */
    assert_int_equal(parse(OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                           &r, &e),
                     0);
    assert_int_equal(r.max_tokens, 1000 - r.prompt_tokens);
    openai_request_free(&r);
    /* Content may be null (an assistant turn with tool calls). */
    assert_int_equal(parse(OPENAI_CHAT,
                           "{\"messages\":[{\"role\":\"assistant\",\"content\":null},{\"role\":"
                           "\"user\",\"content\":\"x\"}]}",
                           &r, &e),
                     0);
    openai_request_free(&r);
}

/* jansson quotes the bytes near a syntax error; a bad escape followed by a multi-byte
 * character leaves half of it in the message, and json_pack refuses non-UTF-8: the error
 * body could not be built and the client got a 500 instead of its 400 (found by
 * fuzz/fuzz_request). The message is scrubbed to valid UTF-8. */
static void test_error_messages_are_utf8(void **state)
{
    (void)state;
    const char *bodies[] = {
        "{\"prompt\": \"\\\xde\x99\"}",           /* bad escape, then half of U+0799 */
        "{\"prompt\": \"ok\", \"model\": \"" /* a 64-byte cut in the middle of a character */
        "\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5"
        "\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5"
        "\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5"
        "\xe6\x97\xa5\xe6\x97\xa5\"}",
        "{\"prompt\": \"\xff\"}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        openai_request r;
        openai_error e;
        assert_int_equal(parse(OPENAI_COMPLETIONS, bodies[i], &r, &e), -1);
        assert_true(e.status == 400 || e.status == 404);
        char *body = openai_error_body(&e);
        assert_non_null(body);
        json_t *v = json_loads(body, 0, NULL);
        assert_non_null(v);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(v, "error"), "code")),
                         e.status);
        json_decref(v);
        free(body);
    }
}

static void test_errors(void **state)
{
    (void)state;
    const openai_endpoint C = OPENAI_COMPLETIONS, CH = OPENAI_CHAT;
    expect_error(C, "", 400, NULL);
    expect_error(C, "{", 400, NULL);
    expect_error(C, "{\"prompt\":\"x\"} trailing", 400, NULL);
    expect_error(C, "null", 400, NULL);
    expect_error(C, "[1]", 400, NULL);
    expect_error(C, "\"prompt\"", 400, NULL);
    expect_error(C, "{}", 400, "prompt");
    expect_error(C, "{\"prompt\":null}", 400, "prompt");
    expect_error(C, "{\"prompt\":5}", 400, "prompt");
    expect_error(C, "{\"prompt\":true}", 400, "prompt");
    expect_error(C, "{\"prompt\":{}}", 400, "prompt");
    expect_error(C, "{\"prompt\":[1,2.5]}", 400, "prompt");
    expect_error(C, "{\"prompt\":[1,true]}", 400, "prompt");
    expect_error(C, "{\"prompt\":[-1]}", 400, "prompt");
    expect_error(C, "{\"prompt\":[128256]}", 400, "prompt");
    expect_error(C, "{\"prompt\":[]}", 400, "prompt");
    expect_error(C, "{\"prompt\":\"\"}", 400, "prompt");
    expect_error(C, "{\"prompt\":\"   \\n\\t \"}", 400, "prompt");
    expect_error(C, "{\"prompt\":[\"a\",\"b\"]}", 400, "prompt");
    expect_error(C, "{\"prompt\":[[1],[2]]}", 400, "prompt");
    expect_error(C, "{\"prompt\":\"x\",\"model\":\"gpt-4\"}", 404, "model");
    expect_error(C, "{\"prompt\":\"x\",\"model\":7}", 400, "model");
    expect_error(C, "{\"prompt\":\"x\",\"stream\":1}", 400, "stream");
    expect_error(C, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", 400,
                 "stream_options");
    expect_error(C, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":[]}", 400,
                 "stream_options");
    expect_error(C, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}",
                 400, "include_usage");
    expect_error(C, "{\"prompt\":\"x\",\"max_tokens\":0}", 400, "max_tokens");
    expect_error(C, "{\"prompt\":\"x\",\"max_tokens\":-1}", 400, "max_tokens");
    expect_error(C, "{\"prompt\":\"x\",\"max_tokens\":1001}", 400, "max_tokens");
    expect_error(C, "{\"prompt\":\"x\",\"max_tokens\":1e300}", 400, "max_tokens");
    expect_error(C, "{\"prompt\":\"x\",\"max_tokens\":99999999999999999999}", 400, NULL);
    expect_error(C, "{\"prompt\":\"x\",\"max_tokens\":\"5\"}", 400, "max_tokens");
    expect_error(C, "{\"prompt\":\"x\",\"max_tokens\":1000}", 400, "max_tokens"); /* 1 + 1000 */
    expect_error(C, "{\"prompt\":\"x\",\"min_tokens\":-1}", 400, "min_tokens");
    expect_error(C, "{\"prompt\":\"x\",\"min_tokens\":17}", 400, "min_tokens");
    expect_error(C, "{\"prompt\":\"x\",\"temperature\":-0.1}", 400, "temperature");
    expect_error(C, "{\"prompt\":\"x\",\"temperature\":\"0\"}", 400, "temperature");
    expect_error(C, "{\"prompt\":\"x\",\"seed\":1.5}", 400, "seed");
    expect_error(C, "{\"prompt\":\"x\",\"ignore_eos\":\"yes\"}", 400, "ignore_eos");
    expect_error(C, "{\"prompt\":\"x\",\"stop\":5}", 400, "stop");
    expect_error(C, "{\"prompt\":\"x\",\"stop\":[\"\"]}", 400, "stop");
    expect_error(C, "{\"prompt\":\"x\",\"stop\":[\"a\",null]}", 400, "stop");
    expect_error(C,
                 "{\"prompt\":\"x\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\","
                 "\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
                 400, "stop");
    expect_error(C, "{\"prompt\":\"x\",\"n\":2}", 400, "n");
    expect_error(C, "{\"prompt\":\"x\",\"best_of\":3}", 400, "best_of");
    expect_error(C, "{\"prompt\":\"x\",\"echo\":true}", 400, "echo");
    expect_error(C, "{\"prompt\":\"x\",\"stallscope\":true}", 400, "stallscope");
    expect_error(C, "{\"prompt\":\"x\",\"stallscope\":{\"timestamps\":\"on\"}}", 400, "timestamps");
    expect_error(C, "{\"prompt\":\"x\",\"stallscope\":{\"request\":-3}}", 400, "request");
    expect_error(C, "{\"prompt\":\"x\",\"stallscope\":{\"request\":\"7\"}}", 400, "request");
    expect_error(CH, "{}", 400, "messages");
    expect_error(CH, "{\"messages\":[]}", 400, "messages");
    expect_error(CH, "{\"messages\":\"hi\"}", 400, "messages");
    expect_error(CH, "{\"messages\":[5]}", 400, "messages");
    expect_error(CH, "{\"messages\":[{\"content\":\"x\"}]}", 400, "messages");
    expect_error(CH, "{\"messages\":[{\"role\":\"user\",\"content\":7}]}", 400, "messages");
    expect_error(CH, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
                 400, "messages");
    expect_error(CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                     "\"max_completion_tokens\":0}",
                 400, "max_completion_tokens");
}

/* A prompt over max_model_len, as text and as ids. */
static void test_lengths(void **state)
{
    (void)state;
    char *body = malloc(20000);
    strcpy(body, "{\"prompt\":\"");
    for (int i = 0; i < 1001; i++)
        strcat(body, "ab ");
    strcat(body, "\"}");
    expect_error(OPENAI_COMPLETIONS, body, 400, "prompt");
    strcpy(body, "{\"prompt\":[");
    for (int i = 0; i < 999; i++)
        strcat(body, "1,");
    strcat(body, "1]}");
    openai_request r;
    openai_error e;
    assert_int_equal(parse(OPENAI_COMPLETIONS, body, &r, &e), -1); /* 1000 + default 16 */
    assert_string_equal(e.param, "max_tokens");
    body[strlen(body) - 1] = '\0';
    strcat(body, ",\"max_tokens\":1}");
    /* Now "[...1]" then ",max_tokens" is inside the object: 1000 + 1 > 1000 still. */
    assert_int_equal(parse(OPENAI_COMPLETIONS, body, &r, &e), -1);
    free(body);
}

/* Every prefix of a valid body is refused cleanly (never a crash, never accepted). */
static void test_prefixes(void **state)
{
    (void)state;
    const char *body = "{\"model\":\"llama-3.1-8b\",\"prompt\":[1,2,3],\"max_tokens\":4,"
                       "\"stream\":true,\"stop\":[\"a\"],\"stallscope\":{\"timestamps\":true}}";
    size_t len = strlen(body);
    for (size_t n = 0; n < len; n++) {
        char *copy = malloc(n ? n : 1); /* exact size: ASan catches a read past the end */
        memcpy(copy, body, n);
        openai_request r;
        openai_error e;
        assert_int_equal(openai_parse_request(OPENAI_COMPLETIONS, copy, n, &limits, &r, &e), -1);
        assert_int_equal(e.status, 400);
        free(copy);
    }
    openai_request r;
    openai_error e;
    assert_int_equal(openai_parse_request(OPENAI_COMPLETIONS, body, len, &limits, &r, &e), 0);
    openai_request_free(&r);
}

/* The body ends exactly at a page guard: the parser must not read one byte further. */
static void test_page_guard(void **state)
{
    (void)state;
    const long page = sysconf(_SC_PAGESIZE);
    char *mem = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    assert_true(mem != MAP_FAILED);
    assert_int_equal(mprotect(mem + page, (size_t)page, PROT_NONE), 0);
    const char *bodies[] = {"{\"prompt\":\"abc def\"}", "{\"prompt\":[1,2,3", "{\"prompt\":\"abc",
                            "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "1234"};
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        size_t n = strlen(bodies[i]);
        char *at = mem + page - n;
        memcpy(at, bodies[i], n);
        openai_request r;
        openai_error e;
        if (openai_parse_request(i == 3 ? OPENAI_CHAT : OPENAI_COMPLETIONS, at, n, &limits, &r,
                                 &e) == 0)
            openai_request_free(&r);
    }
    munmap(mem, (size_t)page * 2);
}

/* Random bytes, and random mutations of a valid body: any answer but a crash or a leak. */
static void test_fuzz(void **state)
{
    (void)state;
    uint64_t rng = 12345;
    const char *seed_body = "{\"prompt\":[1,2,3],\"max_tokens\":4,\"stream\":true,\"stop\":[\"a\"],"
                            "\"stream_options\":{\"include_usage\":true},\"messages\":[{\"role\":"
                            "\"user\",\"content\":\"hi\"}]}";
    const size_t seed_len = strlen(seed_body);
    char buf[512];
    int accepted = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t n;
        if (iter % 2 == 0) {
            n = (size_t)rng_range(&rng, 0, sizeof buf - 1);
            for (size_t i = 0; i < n; i++)
                buf[i] = (char)rng_next(&rng);
        } else {
            n = seed_len;
            memcpy(buf, seed_body, n);
            int flips = (int)rng_range(&rng, 1, 4);
            for (int f = 0; f < flips; f++)
                buf[rng_range(&rng, 0, (int64_t)n - 1)] = "{}[],:\"0123456789tfn \\x"[rng_range(&rng, 0, 23)];
        }
        openai_request r;
        openai_error e;
        openai_endpoint ep = iter % 4 < 2 ? OPENAI_COMPLETIONS : OPENAI_CHAT;
        if (openai_parse_request(ep, buf, n, &limits, &r, &e) == 0) {
            accepted++;
            assert_true(r.prompt_tokens >= 1 && r.max_tokens >= 1);
            assert_true(r.prompt_tokens + r.max_tokens <= limits.max_model_len);
            openai_request_free(&r);
        } else {
            assert_true(e.status == 400 || e.status == 404);
        }
    }
    (void)accepted;
    /* Deep nesting: jansson's depth limit turns it into an error, not a stack overflow. */
    size_t depth = 100000;
    char *deep = malloc(depth * 2 + 1);
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    openai_request r;
    openai_error e;
    assert_int_equal(openai_parse_request(OPENAI_COMPLETIONS, deep, depth * 2, &limits, &r, &e),
                     -1);
    free(deep);
    /* NUL inside a string. */
    assert_int_equal(parse(OPENAI_COMPLETIONS, "{\"prompt\":\"a\\u0000b\"}", &r, &e), -1);
}

static json_t *decode_event(const char *data, size_t len, size_t *used)
{
    assert_true(len >= 8 && memcmp(data, "data: ", 6) == 0);
    const char *end = strstr(data, "\n\n");
    assert_non_null(end);
    *used = (size_t)(end - data) + 2;
    json_error_t jerr;
    json_t *v = json_loadb(data + 6, (size_t)(end - data) - 6, 0, &jerr);
    if (!v)
        fail_msg("bad JSON in event: %s", jerr.text);
    return v;
}

static void test_encode_stream(void **state)
{
    (void)state;
    openai_request req;
    memset(&req, 0, sizeof req);
    req.endpoint = OPENAI_CHAT;
    req.prompt_tokens = 12;
    req.continuous_usage = true;
    req.timestamps = true;
    openai_stream s;
    openai_stream_init(&s, &req, 77, 1700000000, "my \"model\"");
    buf b = {0};
    openai_chunk role = {.text = "", .role = true, .emit_ns = 5, .step = 3};
    openai_encode_chunk(&s, &role, &b);
    const char *text = " he said \"hi\"\n\\ \x01";
    openai_chunk tok = {.text = text, .text_len = strlen(text), .completion_tokens = 1,
                        .finish_reason = "stop", .stop_reason = "\"q\"", .emit_ns = 123456789012345,
                        .step = 4};
    openai_encode_chunk(&s, &tok, &b);
    openai_encode_usage_chunk(&s, 1, 9, 4, &b);
    openai_encode_done(&b);
    assert_false(b.failed);

    size_t used;
    const char *at = b.data;
    json_t *v = decode_event(at, strlen(at), &used);
    assert_string_equal(json_string_value(json_object_get(v, "id")), "chatcmpl-77");
    assert_string_equal(json_string_value(json_object_get(v, "object")), "chat.completion.chunk");
    assert_string_equal(json_string_value(json_object_get(v, "model")), "my \"model\"");
    json_t *delta = json_object_get(json_array_get(json_object_get(v, "choices"), 0), "delta");
    assert_string_equal(json_string_value(json_object_get(delta, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(delta, "content")), "");
    json_decref(v);
    at += used;
    v = decode_event(at, strlen(at), &used);
    json_t *choice = json_array_get(json_object_get(v, "choices"), 0);
    delta = json_object_get(choice, "delta");
    assert_null(json_object_get(delta, "role"));
    assert_string_equal(json_string_value(json_object_get(delta, "content")), text);
    assert_string_equal(json_string_value(json_object_get(choice, "finish_reason")), "stop");
    assert_string_equal(json_string_value(json_object_get(choice, "stop_reason")), "\"q\"");
    json_t *usage = json_object_get(v, "usage");
    assert_int_equal(json_integer_value(json_object_get(usage, "completion_tokens")), 1);
    assert_int_equal(json_integer_value(json_object_get(usage, "total_tokens")), 13);
    json_t *ext = json_object_get(v, "stallscope");
    assert_int_equal(json_integer_value(json_object_get(ext, "emit_ns")), 123456789012345);
    assert_int_equal(json_integer_value(json_object_get(ext, "step")), 4);
    json_decref(v);
    at += used;
    v = decode_event(at, strlen(at), &used);
    assert_int_equal(json_array_size(json_object_get(v, "choices")), 0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(v, "usage"), "prompt_tokens")),
                     12);
    json_decref(v);
    at += used;
    assert_string_equal(at, "data: [DONE]\n\n");
    buf_free(&b);

    /* completions: text, null finish, no usage or extension unless asked */
    req.endpoint = OPENAI_COMPLETIONS;
    req.continuous_usage = false;
    req.timestamps = false;
    openai_stream_init(&s, &req, 5, 1, "m");
    openai_chunk plain = {.text = " word", .text_len = 5};
    openai_encode_chunk(&s, &plain, &b);
    v = decode_event(b.data, strlen(b.data), &used);
    assert_string_equal(json_string_value(json_object_get(v, "object")), "text_completion");
    choice = json_array_get(json_object_get(v, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(choice, "text")), " word");
    assert_true(json_is_null(json_object_get(choice, "finish_reason")));
    assert_null(json_object_get(v, "usage"));
    assert_null(json_object_get(v, "stallscope"));
    json_decref(v);
    buf_free(&b);
}

static void test_encode_bodies(void **state)
{
    (void)state;
    openai_request req;
    memset(&req, 0, sizeof req);
    req.endpoint = OPENAI_COMPLETIONS;
    req.prompt_tokens = 3;
    char *body = openai_encode_response(&req, 9, 2, "m", " a b", 4, "length", NULL, 2, -1, 0);
    json_t *v = json_loads(body, 0, NULL);
    assert_non_null(v);
    assert_string_equal(json_string_value(json_object_get(v, "id")), "cmpl-9");
    json_t *choice = json_array_get(json_object_get(v, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(choice, "text")), " a b");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(v, "usage"), "total_tokens")),
                     5);
    assert_null(json_object_get(v, "stallscope"));
    json_decref(v);
    free(body);
    req.endpoint = OPENAI_CHAT;
    body = openai_encode_response(&req, 9, 2, "m", "x", 1, "stop", "s", 1, 42, 7);
    v = json_loads(body, 0, NULL);
    choice = json_array_get(json_object_get(v, "choices"), 0);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(choice, "message"), "content")), "x");
    assert_string_equal(json_string_value(json_object_get(choice, "stop_reason")), "s");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(v, "stallscope"), "step")),
                     7);
    json_decref(v);
    free(body);
    /* Not UTF-8: refused rather than sent broken. */
    assert_null(openai_encode_response(&req, 1, 1, "m", "\xff", 1, "stop", NULL, 1, -1, 0));

    body = openai_models_body("m", 4096, 3);
    v = json_loads(body, 0, NULL);
    assert_int_equal(
        json_integer_value(json_object_get(json_array_get(json_object_get(v, "data"), 0),
                                           "max_model_len")),
        4096);
    json_decref(v);
    free(body);

    openai_error e;
    openai_fail(&e, 413, "invalid_request_error", NULL, "too \"big\"");
    body = openai_error_body(&e);
    v = json_loads(body, 0, NULL);
    json_t *err = json_object_get(v, "error");
    assert_string_equal(json_string_value(json_object_get(err, "message")), "too \"big\"");
    assert_int_equal(json_integer_value(json_object_get(err, "code")), 413);
    assert_true(json_is_null(json_object_get(err, "param")));
    json_decref(v);
    free(body);
}

static void test_append_i64(void **state)
{
    (void)state;
    buf b = {0};
    openai_append_i64(&b, INT64_MIN);
    buf_append(&b, " ", 1);
    openai_append_i64(&b, 0);
    buf_append(&b, " ", 1);
    openai_append_i64(&b, INT64_MAX);
    assert_string_equal(b.data, "-9223372036854775808 0 9223372036854775807");
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_defaults), cmocka_unit_test(test_chat),
        cmocka_unit_test(test_text_ids_kept),
        cmocka_unit_test(test_errors),              cmocka_unit_test(test_lengths),
        cmocka_unit_test(test_error_messages_are_utf8),
        cmocka_unit_test(test_prefixes),            cmocka_unit_test(test_page_guard),
        cmocka_unit_test(test_fuzz),                cmocka_unit_test(test_encode_stream),
        cmocka_unit_test(test_encode_bodies),       cmocka_unit_test(test_append_i64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
