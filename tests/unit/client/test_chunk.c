/* client/chunk: the chunk decoder and the counter on the shapes of vLLM, llama.cpp, OpenAI,
 * TGI, usage that lies, and a whole stream through the splitter and the decoder. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "client/chunk.h"
#include "client/sse.h"
#include "common/err.h"

#include "sse_feed.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vllm_completion_continuous_usage),
        cmocka_unit_test(test_absurd_usage),
        cmocka_unit_test(test_counter_trusts_nothing),
        cmocka_unit_test(test_counter_usage_above_stream),
        cmocka_unit_test(test_openai_chat_chunks),
        cmocka_unit_test(test_llamacpp_shapes),
        cmocka_unit_test(test_tgi_and_errors_and_stallscope),
        cmocka_unit_test(test_stream_end_to_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
