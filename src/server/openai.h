/* openai — the OpenAI / vLLM API as pure functions: request parsing and validation, SSE
 * chunk and response encoding. No sockets, no engine, no clock: the HTTP front (routes.c,
 * streams.c) calls these, and tests feed them hostile input directly.
 *
 * Requests (POST /v1/completions, POST /v1/chat/completions), fields understood:
 *   model                   optional; when given it must name the served model (404)
 *   prompt                  completions: a string, an array of token ids, or a one-element
 *                           array of either (batches of several prompts are refused)
 *   messages                chat: [{"role": str, "content": str | [{"type":"text",
 *                           "text": str}...] | null}, ...]
 *   stream, stream_options  {"include_usage": bool, "continuous_usage_stats": bool}
 *                           (only with stream: true, as vLLM)
 *   max_tokens, max_completion_tokens (chat; wins over max_tokens)
 *                           default: 16 for completions (OpenAI's legacy default, vLLM's),
 *                           max_model_len - prompt for chat
 *   min_tokens, ignore_eos, temperature (>= 0), seed, stop (string or array, <= 16 strings
 *                           of 1..1024 bytes), n (1 only)
 *   stallscope              extension: {"timestamps": true} adds to every SSE chunk
 *                           "stallscope": {"emit_ns": CLOCK_MONOTONIC ns when the server
 *                           wrote the chunk, "step": engine step index of its token};
 *                           {"request": N} (an integer >= 0) names the request in the
 *                           server's sched log (serve --sched-events) by the client's id
 * Unknown fields are ignored (vLLM warns and goes on). Refused as unsupported: n > 1,
 * best_of > 1, echo: true.
 *
 * Prompt length. A text prompt is tokenized by the caller's tokenizer (the executor's: see
 * vocab.h for emulate). A chat prompt is rendered as a Llama-3 style template counted as:
 * 1 (BOS) + per message 4 (header and end-of-turn) + its content's tokens, + 3 for the
 * assistant header that opens the answer. Token ids count one each and must lie in
 * [0, vocab_size). The prompt must have at least one token and at most max_model_len;
 * prompt + max_tokens must fit max_model_len (vLLM's message).
 *
 * Errors: {"error": {"message", "type", "param", "code"}}, code = the HTTP status. */
#ifndef STALLSCOPE_OPENAI_H
#define STALLSCOPE_OPENAI_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"

#define OPENAI_MAX_STOP 16
#define OPENAI_MAX_STOP_LEN 1024

typedef enum { OPENAI_COMPLETIONS, OPENAI_CHAT } openai_endpoint;

typedef struct openai_limits {
    const char *model_name;
    int max_model_len;
    int32_t vocab_size;
    /* Tokens of a text (any thread, pure); ids (may be NULL) gets the first max_ids. */
    int64_t (*tokenize)(void *ctx, const char *text, size_t len, int32_t *ids, int64_t max_ids);
    void *tokenize_ctx;
    /* Keep a text prompt's token ids (openai_request.text_ids): the engine's prefix cache
     * names blocks by them. */
    bool keep_text_ids;
} openai_limits;

typedef struct openai_request {
    openai_endpoint endpoint;
    bool stream;
    bool include_usage;
    bool continuous_usage;
    bool timestamps;
    int64_t client_id; /* the stallscope extension's "request", -1 when not given */
    int prompt_tokens;
    int32_t *prompt_ids; /* malloc'd when the prompt was token ids, else NULL */
    /* A text prompt's ids as the server counted them (keep_text_ids): the text's tokens,
     * and for chat one made-up id per template token (the BOS, each message's role
     * header, the assistant header), so equal conversations give equal ids; n_text_ids ==
     * prompt_tokens. NULL otherwise (or without memory: nothing is cached then). */
    int32_t *text_ids;
    int n_text_ids, cap_text_ids;
    uint64_t prompt_hash; /* FNV-1a of the prompt's bytes or ids: greedy answers follow it */
    int max_tokens;
    int min_tokens;
    bool ignore_eos;
    double temperature;
    bool has_seed;
    uint64_t seed;
    char *stop[OPENAI_MAX_STOP]; /* malloc'd */
    int n_stop;
} openai_request;

typedef struct openai_error {
    int status;       /* HTTP status: 400, 401, 404, 405, 413, 500, 503 */
    const char *type; /* "invalid_request_error", "not_found_error", ... (static) */
    char param[32];   /* the offending field, "" when none */
    char message[ERR_LEN];
} openai_error;

/* Parse and validate one request body. 0 and *out filled (free with openai_request_free),
 * or -1 and *error filled (out needs no freeing). */
int openai_parse_request(openai_endpoint endpoint, const char *body, size_t len,
                         const openai_limits *limits, openai_request *out, openai_error *error);
void openai_request_free(openai_request *r);

/* Fill an error (returns -1 for `return openai_fail(...)`). */
int openai_fail(openai_error *error, int status, const char *type, const char *param,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* {"error": {...}} as a malloc'd NUL-terminated string, or NULL on out-of-memory. */
char *openai_error_body(const openai_error *error);

/* ---- encoding --------------------------------------------------------------------------- */

/* Encoders append to a caller's buf (common/buf.h) and ignore out-of-memory: the buffer's
 * sticky `failed` says so, and callers check it once at the end. streams.c reuses one buffer
 * across chunks, so the token path does not allocate after warm-up. */

/* Digits without printf: this runs several times per streamed token. */
void openai_append_i64(buf *b, int64_t v);
/* Append s[0, len) as the inside of a JSON string (no quotes added). Bytes >= 0x80 pass
 * through (the text is expected to be UTF-8). */
void openai_append_json_chars(buf *b, const char *s, size_t len);

/* What stays the same across one request's chunks, precomputed once. */
typedef struct openai_stream {
    openai_endpoint endpoint;
    char head[384]; /* `data: {"id":...,"object":...,"created":...,"model":...,"choices":[` */
    size_t head_len;
    int prompt_tokens;
    bool continuous_usage;
    bool timestamps;
} openai_stream;

/* id: the request id ("cmpl-<id>" / "chatcmpl-<id>"); created: Unix seconds. */
void openai_stream_init(openai_stream *s, const openai_request *req, int64_t id,
                        int64_t created, const char *model);

typedef struct openai_chunk {
    const char *text; /* the token's text (may be empty) */
    size_t text_len;
    const char *finish_reason; /* NULL while the answer goes on */
    const char *stop_reason;   /* the stop string that ended it, or NULL */
    bool role;                 /* chat's first chunk: delta {"role":"assistant","content":""} */
    int completion_tokens;     /* so far, for continuous_usage_stats */
    int64_t emit_ns;           /* for the timestamps extension */
    int64_t step;
} openai_chunk;

/* Append one SSE event "data: {...}\n\n". */
void openai_encode_chunk(const openai_stream *s, const openai_chunk *c, buf *out);
/* The usage-only chunk (choices: []) of stream_options.include_usage. */
void openai_encode_usage_chunk(const openai_stream *s, int completion_tokens, int64_t emit_ns,
                               int64_t step, buf *out);
void openai_encode_done(buf *out); /* "data: [DONE]\n\n" */
/* An error in the middle of a stream, as vLLM sends it: data: {"error": {...}}. */
void openai_encode_stream_error(const openai_error *error, buf *out);

/* A whole non-streaming response (text_completion / chat.completion), malloc'd JSON or
 * NULL (out of memory, or text not UTF-8). emit_ns < 0: no "stallscope" field. */
char *openai_encode_response(const openai_request *req, int64_t id, int64_t created,
                             const char *model, const char *text, size_t text_len,
                             const char *finish_reason, const char *stop_reason,
                             int completion_tokens, int64_t emit_ns, int64_t step);

/* GET /v1/models. */
char *openai_models_body(const char *model, int max_model_len, int64_t created);

#endif
