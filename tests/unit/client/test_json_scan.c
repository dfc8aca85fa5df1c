/* client/json_scan: the chunk decoder's JSON scanner against its jansson reference on a
 * corpus of chunks and thousands of mutants of each, and its depth limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "client/chunk.h"
#include "client/json_scan.h"
#include "client/sse.h"
#include "common/err.h"
#include "common/rng.h"

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
        cmocka_unit_test(test_scanner_matches_jansson),
        cmocka_unit_test(test_scanner_depth_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
