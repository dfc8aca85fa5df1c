/* libFuzzer target: the server's request parser, body JSON -> openai_request
 * (openai_parse_request, src/server/openai.c), and what the server builds from its result.
 *
 * Input: byte 0 picks the endpoint (bit 0), max_model_len (bits 1-3) and the vocabulary
 * (bits 4-5); the rest is the request body, copied to an exact-size buffer (the body
 * evbuffer_pullup hands the parser is not NUL-terminated either). Tokenizing is the
 * emulated model's (vocab_tokenize), as in serve.
 *
 * An accepted request must satisfy what the engine relies on: 1 <= prompt_tokens <=
 * max_model_len, 1 <= max_tokens, prompt + max_tokens <= max_model_len, 0 <= min_tokens <=
 * max_tokens, token ids inside the vocabulary, stop strings 1..1024 bytes without NUL; its
 * first SSE chunk and its whole (non-streamed) response must be valid JSON. A refused one
 * must have a status the HTTP front knows (400, 404, 500), a message, and an error body
 * that is valid JSON with code == status — a body the server cannot build turns into a
 * generic 500 in reply.c, which would hide the client's real mistake. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine/vocab.h"
#include "server/openai.h"

static int64_t tokenize(void *ctx, const char *text, size_t len, int32_t *ids, int64_t max_ids)
{
    (void)ctx;
    return vocab_tokenize(text, len, ids, max_ids, 128256);
}

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_request: %s: %.300s\n", what, detail ? detail : "");
    abort();
}

/* "data: {...}\n\n" events, each JSON. */
static void check_events(const buf *b)
{
    size_t at = 0;
    while (at < b->len) {
        if (b->len - at < 8 || memcmp(b->data + at, "data: ", 6) != 0)
            fail("event does not start with 'data: '", NULL);
        const char *end = memmem(b->data + at, b->len - at, "\n\n", 2);
        if (!end)
            fail("event without its blank line", NULL);
        const size_t json_len = (size_t)(end - (b->data + at)) - 6;
        if (!(json_len == 6 && memcmp(b->data + at + 6, "[DONE]", 6) == 0)) {
            json_error_t jerr;
            json_t *v = json_loadb(b->data + at + 6, json_len, 0, &jerr);
            if (!v)
                fail("encoded chunk is not JSON", jerr.text);
            json_decref(v);
        }
        at = (size_t)(end - b->data) + 2;
    }
}

static void check_accepted(const openai_request *r, const openai_limits *lim)
{
    if (r->prompt_tokens < 1 || r->prompt_tokens > lim->max_model_len || r->max_tokens < 1 ||
        (int64_t)r->prompt_tokens + r->max_tokens > lim->max_model_len || r->min_tokens < 0 ||
        r->min_tokens > r->max_tokens || r->n_stop < 0 || r->n_stop > OPENAI_MAX_STOP ||
        !(r->temperature >= 0))
        fail("accepted request breaks the limits", NULL);
    /* The prefix cache's ids: kept only when asked, one per counted token. */
    if (r->text_ids && (!lim->keep_text_ids || r->prompt_ids || r->n_text_ids != r->prompt_tokens))
        fail("text ids kept that do not match the prompt's tokens", NULL);
    for (int i = 0; r->prompt_ids && i < r->prompt_tokens; i++)
        if (r->prompt_ids[i] < 0 || r->prompt_ids[i] >= lim->vocab_size)
            fail("token id outside the vocabulary", NULL);
    for (int i = 0; i < r->n_stop; i++) {
        size_t n = strlen(r->stop[i]);
        if (n < 1 || n > OPENAI_MAX_STOP_LEN)
            fail("stop string length", r->stop[i]);
    }
    /* What streams.c builds for it: the stream's first chunk (with the stop string that
     * ended it, the worst case for escaping), the usage chunk, [DONE], and the whole
     * response of a non-streamed request. */
    openai_stream enc;
    openai_stream_init(&enc, r, 7, 1700000000, lim->model_name);
    buf b = {0};
    openai_chunk chunk = {.text = " word", .text_len = 5, .role = r->endpoint == OPENAI_CHAT,
                          .finish_reason = r->n_stop ? "stop" : NULL,
                          .stop_reason = r->n_stop ? r->stop[r->n_stop - 1] : NULL,
                          .completion_tokens = 1, .emit_ns = 123, .step = 4};
    openai_encode_chunk(&enc, &chunk, &b);
    openai_encode_usage_chunk(&enc, 1, 124, 4, &b);
    openai_encode_done(&b);
    if (b.failed)
        fail("out of memory encoding", NULL);
    check_events(&b);
    buf_free(&b);
    char *body = openai_encode_response(r, 7, 1700000000, lim->model_name, " word", 5,
                                        r->n_stop ? "stop" : "length",
                                        r->n_stop ? r->stop[0] : NULL, 1, -1, 4);
    if (!body)
        fail("no response body for an accepted request", NULL);
    json_t *v = json_loads(body, 0, NULL);
    if (!v)
        fail("response body is not JSON", body);
    json_decref(v);
    free(body);
}

static void check_refused(const openai_error *e)
{
    if (e->status != 400 && e->status != 404 && e->status != 500)
        fail("unexpected status", e->message);
    if (!e->type || !e->message[0] || strnlen(e->message, sizeof e->message) == sizeof e->message)
        fail("error without a type or message", NULL);
    char *body = openai_error_body(e);
    if (!body)
        fail("error body cannot be built (message not UTF-8?)", e->message);
    json_t *v = json_loads(body, 0, NULL);
    json_t *err = json_object_get(v, "error");
    if (!v || json_integer_value(json_object_get(err, "code")) != e->status ||
        !json_is_string(json_object_get(err, "message")))
        fail("error body is not the OpenAI shape", body);
    json_decref(v);
    /* The same error mid-stream. */
    buf b = {0};
    openai_encode_stream_error(e, &b);
    check_events(&b);
    buf_free(&b);
    free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const int model_lens[8] = {1, 2, 16, 100, 4096, 131072, 1 << 20, INT_MAX / 4};
    static const int32_t vocabs[4] = {1, 257, 32000, 128256};
    const openai_limits lim = {
        .model_name = "llama-3.1-8b",
        .max_model_len = model_lens[(data[0] >> 1) & 7],
        .vocab_size = vocabs[(data[0] >> 4) & 3],
        .tokenize = tokenize,
        .keep_text_ids = (data[0] >> 6) & 1, /* the prefix cache's ids */
    };
    const openai_endpoint ep = data[0] & 1 ? OPENAI_CHAT : OPENAI_COMPLETIONS;
    const size_t len = size - 1;
    char *body = malloc(len ? len : 1);
    if (!body)
        return 0;
    memcpy(body, data + 1, len);
    openai_request r;
    openai_error e;
    memset(&e, 0, sizeof e);
    if (openai_parse_request(ep, body, len, &lim, &r, &e) == 0) {
        check_accepted(&r, &lim);
        openai_request_free(&r);
    } else {
        check_refused(&e);
    }
    free(body);
    return 0;
}
