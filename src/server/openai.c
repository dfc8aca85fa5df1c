#include "server/openai.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define TYPE_INVALID "invalid_request_error"
#define TYPE_NOT_FOUND "not_found_error"

/* Chat template accounting (see openai.h). */
#define CHAT_BOS_TOKENS 1
#define CHAT_TOKENS_PER_MESSAGE 4
#define CHAT_ASSISTANT_HEADER_TOKENS 3

#define FNV_OFFSET 1469598103934665603ULL
#define FNV_PRIME 1099511628211ULL

/* Length of the valid UTF-8 sequence starting at s (RFC 3629: no overlongs, surrogates or
 * code points past U+10FFFF, as jansson checks), or 0 when the bytes there are not one. */
static size_t utf8_sequence(const unsigned char *s)
{
    const unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    unsigned char lo = 0x80, hi = 0xBF;
    size_t n;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0; /* also stops at the terminating NUL */
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return n;
}

/* Replace every byte that is not part of valid UTF-8 with '?'. An error message quotes
 * the client's bytes (jansson's "invalid escape near '\<byte>'", a model name cut at 64
 * bytes), and json_pack refuses a non-UTF-8 string: without this the client would get a
 * 500 "out of memory" instead of its 400 (found by fuzz/fuzz_request). */
static void utf8_scrub(char *text)
{
    unsigned char *s = (unsigned char *)text;
    while (*s) {
        size_t n = utf8_sequence(s);
        if (n == 0) {
            *s++ = '?';
            continue;
        }
        s += n;
    }
}

int openai_fail(openai_error *error, int status, const char *type, const char *param,
                const char *fmt, ...)
{
    if (!error)
        return -1;
    error->status = status;
    error->type = type;
    snprintf(error->param, sizeof error->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error->message, sizeof error->message, fmt, ap);
    va_end(ap);
    utf8_scrub(error->message);
    utf8_scrub(error->param);
    return -1;
}

char *openai_error_body(const openai_error *error)
{
    json_t *inner = json_pack("{s:s, s:s, s:o, s:i}", "message", error->message, "type",
                              error->type ? error->type : TYPE_INVALID, "param",
                              error->param[0] ? json_string(error->param) : json_null(), "code",
                              error->status);
    if (!inner)
        return NULL;
    json_t *root = json_pack("{s:o}", "error", inner);
    if (!root)
        return NULL;
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return text;
}

/* ---- field readers: each returns 0, or -1 with a 400 naming the field ------------------ */

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "something else";
}

/* Absent or null leaves *out alone. */
static int read_bool(json_t *root, const char *key, bool *out, openai_error *error)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return openai_fail(error, 400, TYPE_INVALID, key, "'%s' must be a boolean, not %s", key,
                           type_name(v));
    *out = json_is_true(v);
    return 0;
}

/* *present tells whether the field was there (non-null). */
static int read_int(json_t *root, const char *key, long long *out, bool *present,
                    openai_error *error)
{
    json_t *v = json_object_get(root, key);
    *present = false;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return openai_fail(error, 400, TYPE_INVALID, key, "'%s' must be an integer, not %s", key,
                           type_name(v));
    *out = json_integer_value(v);
    *present = true;
    return 0;
}

static uint64_t fnv_bytes(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* Room for n more kept ids; false (and the ids dropped: nothing is cached) without memory
 * or past INT_MAX / 2. */
static bool text_ids_room(openai_request *out, int64_t n)
{
    if (!out->text_ids && out->cap_text_ids < 0)
        return false; /* dropped earlier */
    const int64_t need = (int64_t)out->n_text_ids + n;
    if (need <= out->cap_text_ids)
        return true;
    int64_t cap = out->cap_text_ids > 0 ? out->cap_text_ids : 256;
    while (cap < need)
        cap *= 2;
    int32_t *grown = cap <= INT_MAX / 2 ? realloc(out->text_ids, (size_t)cap * sizeof *grown)
                                        : NULL;
    if (!grown) {
        free(out->text_ids);
        out->text_ids = NULL;
        out->n_text_ids = 0;
        out->cap_text_ids = -1;
        return false;
    }
    out->text_ids = grown;
    out->cap_text_ids = (int)cap;
    return true;
}

/* n made-up ids standing for template tokens named by `what` (a role, "bos"). */
static void keep_template_ids(const openai_limits *lim, openai_request *out, const char *what,
                              size_t len, int n)
{
    if (!lim->keep_text_ids || !text_ids_room(out, n))
        return;
    const uint64_t h = fnv_bytes(FNV_OFFSET, what, len);
    for (int i = 0; i < n; i++)
        out->text_ids[out->n_text_ids++] = (int32_t)((h + (uint64_t)i) % (uint64_t)lim->vocab_size);
}

/* The text's tokens, counted; kept too with keep_text_ids: in one pass when room for one per
 * byte holds them (every tokenizer here gives at most that), else a second one. */
static int count_text(const openai_limits *lim, openai_request *out, const char *text, size_t len,
                      int64_t *total, uint64_t *hash)
{
    int64_t n;
    const int64_t room = (int64_t)len + 1;
    if (lim->keep_text_ids && text_ids_room(out, room)) {
        n = lim->tokenize(lim->tokenize_ctx, text, len, out->text_ids + out->n_text_ids, room);
        if (n > room && text_ids_room(out, n))
            lim->tokenize(lim->tokenize_ctx, text, len, out->text_ids + out->n_text_ids, n);
        if (out->text_ids)
            out->n_text_ids += (int)n;
    } else {
        n = lim->tokenize(lim->tokenize_ctx, text, len, NULL, 0);
    }
    *total += n;
    *hash = fnv_bytes(*hash, text, len);
    return 0;
}

/* An array of token ids: every element an integer in [0, vocab_size). */
static int read_ids(json_t *array, const openai_limits *lim, openai_request *out,
                    openai_error *error)
{
    size_t n = json_array_size(array);
    if (n > (size_t)INT_MAX / 2)
        return openai_fail(error, 400, TYPE_INVALID, "prompt", "prompt has too many tokens");
    out->prompt_ids = malloc((n ? n : 1) * sizeof *out->prompt_ids);
    if (!out->prompt_ids)
        return openai_fail(error, 500, "server_error", NULL, "out of memory");
    uint64_t hash = FNV_OFFSET;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(array, i);
        if (!json_is_integer(v))
            return openai_fail(error, 400, TYPE_INVALID, "prompt",
                               "prompt[%zu] must be a token id (an integer), not %s", i,
                               type_name(v));
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= lim->vocab_size)
            return openai_fail(error, 400, TYPE_INVALID, "prompt",
                               "token id %lld at prompt[%zu] is out of vocabulary [0, %d)",
                               (long long)id, i, lim->vocab_size);
        out->prompt_ids[i] = (int32_t)id;
        hash = fnv_bytes(hash, &out->prompt_ids[i], sizeof out->prompt_ids[i]);
    }
    out->prompt_tokens = (int)n;
    out->prompt_hash = hash;
    return 0;
}

static int read_prompt(json_t *root, const openai_limits *lim, openai_request *out,
                       openai_error *error)
{
    json_t *prompt = json_object_get(root, "prompt");
    if (!prompt || json_is_null(prompt))
        return openai_fail(error, 400, TYPE_INVALID, "prompt", "'prompt' is required");
    /* A one-element batch is the same as its element. */
    if (json_is_array(prompt) && json_array_size(prompt) == 1 &&
        (json_is_string(json_array_get(prompt, 0)) || json_is_array(json_array_get(prompt, 0))))
        prompt = json_array_get(prompt, 0);
    if (json_is_string(prompt)) {
        int64_t total = 0;
        uint64_t hash = FNV_OFFSET;
        count_text(lim, out, json_string_value(prompt), json_string_length(prompt), &total,
                   &hash);
        if (total > INT_MAX / 2)
            return openai_fail(error, 400, TYPE_INVALID, "prompt", "prompt is too long");
        out->prompt_tokens = (int)total;
        out->prompt_hash = hash;
        return 0;
    }
    if (json_is_array(prompt)) {
        json_t *first = json_array_get(prompt, 0);
        if (first && (json_is_string(first) || json_is_array(first)))
            return openai_fail(error, 400, TYPE_INVALID, "prompt",
                               "batched prompts (%zu in one request) are not supported: send "
                               "one request per prompt",
                               json_array_size(prompt));
        return read_ids(prompt, lim, out, error);
    }
    return openai_fail(error, 400, TYPE_INVALID, "prompt",
                       "'prompt' must be a string or an array of token ids, not %s",
                       type_name(prompt));
}

static int read_messages(json_t *root, const openai_limits *lim, openai_request *out,
                         openai_error *error)
{
    json_t *messages = json_object_get(root, "messages");
    if (!messages || json_is_null(messages))
        return openai_fail(error, 400, TYPE_INVALID, "messages", "'messages' is required");
    if (!json_is_array(messages))
        return openai_fail(error, 400, TYPE_INVALID, "messages",
                           "'messages' must be an array, not %s", type_name(messages));
    if (json_array_size(messages) == 0)
        return openai_fail(error, 400, TYPE_INVALID, "messages", "'messages' is empty");
    int64_t total = CHAT_BOS_TOKENS + CHAT_ASSISTANT_HEADER_TOKENS;
    uint64_t hash = FNV_OFFSET;
    keep_template_ids(lim, out, "bos", 3, CHAT_BOS_TOKENS);
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg) {
        if (!json_is_object(msg))
            return openai_fail(error, 400, TYPE_INVALID, "messages",
                               "messages[%zu] must be an object, not %s", i, type_name(msg));
        json_t *role = json_object_get(msg, "role");
        if (!json_is_string(role))
            return openai_fail(error, 400, TYPE_INVALID, "messages",
                               "messages[%zu].role must be a string", i);
        hash = fnv_bytes(hash, json_string_value(role), json_string_length(role));
        total += CHAT_TOKENS_PER_MESSAGE;
        keep_template_ids(lim, out, json_string_value(role), json_string_length(role),
                          CHAT_TOKENS_PER_MESSAGE);
        json_t *content = json_object_get(msg, "content");
        if (!content || json_is_null(content))
            continue; /* an assistant turn with tool calls only */
        if (json_is_string(content)) {
            count_text(lim, out, json_string_value(content), json_string_length(content), &total,
                       &hash);
        } else if (json_is_array(content)) {
            size_t k;
            json_t *part;
            json_array_foreach(content, k, part) {
                json_t *type = json_object_get(part, "type");
                json_t *text = json_object_get(part, "text");
                if (!json_is_object(part) || !json_is_string(type) ||
                    strcmp(json_string_value(type), "text") != 0 || !json_is_string(text))
                    return openai_fail(error, 400, TYPE_INVALID, "messages",
                                       "messages[%zu].content[%zu]: only {\"type\": \"text\", "
                                       "\"text\": ...} parts are supported",
                                       i, k);
                count_text(lim, out, json_string_value(text), json_string_length(text), &total,
                           &hash);
            }
        } else {
            return openai_fail(error, 400, TYPE_INVALID, "messages",
                               "messages[%zu].content must be a string or an array of parts, "
                               "not %s",
                               i, type_name(content));
        }
        if (total > INT_MAX / 2)
            return openai_fail(error, 400, TYPE_INVALID, "messages", "messages are too long");
    }
    keep_template_ids(lim, out, "assistant-header", 16, CHAT_ASSISTANT_HEADER_TOKENS);
    out->prompt_tokens = (int)total;
    out->prompt_hash = hash;
    return 0;
}

static int add_stop(openai_request *out, json_t *v, openai_error *error)
{
    if (!json_is_string(v))
        return openai_fail(error, 400, TYPE_INVALID, "stop",
                           "'stop' must be a string or an array of strings, found %s",
                           type_name(v));
    size_t len = json_string_length(v);
    if (len == 0 || len > OPENAI_MAX_STOP_LEN)
        return openai_fail(error, 400, TYPE_INVALID, "stop",
                           "stop strings must have 1 to %d bytes (got %zu)", OPENAI_MAX_STOP_LEN,
                           len);
    if (memchr(json_string_value(v), '\0', len))
        return openai_fail(error, 400, TYPE_INVALID, "stop", "stop strings must not hold NUL");
    if (out->n_stop == OPENAI_MAX_STOP)
        return openai_fail(error, 400, TYPE_INVALID, "stop", "at most %d stop strings",
                           OPENAI_MAX_STOP);
    char *copy = strdup(json_string_value(v));
    if (!copy)
        return openai_fail(error, 500, "server_error", NULL, "out of memory");
    out->stop[out->n_stop++] = copy;
    return 0;
}

static int read_stop(json_t *root, openai_request *out, openai_error *error)
{
    json_t *stop = json_object_get(root, "stop");
    if (!stop || json_is_null(stop))
        return 0;
    if (json_is_array(stop)) {
        size_t i;
        json_t *v;
        json_array_foreach(stop, i, v) {
            if (add_stop(out, v, error) != 0)
                return -1;
        }
        return 0;
    }
    return add_stop(out, stop, error);
}

static int read_stream_options(json_t *root, openai_request *out, openai_error *error)
{
    json_t *opts = json_object_get(root, "stream_options");
    if (!opts || json_is_null(opts))
        return 0;
    if (!json_is_object(opts))
        return openai_fail(error, 400, TYPE_INVALID, "stream_options",
                           "'stream_options' must be an object, not %s", type_name(opts));
    if (!out->stream)
        return openai_fail(error, 400, TYPE_INVALID, "stream_options",
                           "'stream_options' is only allowed with \"stream\": true");
    if (read_bool(opts, "include_usage", &out->include_usage, error) != 0 ||
        read_bool(opts, "continuous_usage_stats", &out->continuous_usage, error) != 0)
        return -1;
    return 0;
}

static int read_extension(json_t *root, openai_request *out, openai_error *error)
{
    json_t *ext = json_object_get(root, "stallscope");
    if (!ext || json_is_null(ext))
        return 0;
    if (!json_is_object(ext))
        return openai_fail(error, 400, TYPE_INVALID, "stallscope",
                           "'stallscope' must be an object like {\"timestamps\": true}, not %s",
                           type_name(ext));
    long long id = -1;
    bool present = false;
    if (read_bool(ext, "timestamps", &out->timestamps, error) != 0 ||
        read_int(ext, "request", &id, &present, error) != 0)
        return -1;
    if (present && id < 0)
        return openai_fail(error, 400, TYPE_INVALID, "request",
                           "'stallscope.request' must be an integer >= 0, not %lld", id);
    out->client_id = present ? id : -1;
    return 0;
}

static int read_sampling(json_t *root, openai_request *out, openai_error *error)
{
    if (read_bool(root, "ignore_eos", &out->ignore_eos, error) != 0)
        return -1;
    json_t *t = json_object_get(root, "temperature");
    if (t && !json_is_null(t)) {
        if (!json_is_number(t))
            return openai_fail(error, 400, TYPE_INVALID, "temperature",
                               "'temperature' must be a number, not %s", type_name(t));
        double v = json_number_value(t);
        if (!(v >= 0) || !isfinite(v))
            return openai_fail(error, 400, TYPE_INVALID, "temperature",
                               "'temperature' must be >= 0 (got %g)", v);
        out->temperature = v;
    }
    long long value;
    bool present;
    if (read_int(root, "seed", &value, &present, error) != 0)
        return -1;
    if (present) {
        out->has_seed = true;
        out->seed = (uint64_t)value;
    }
    if (read_int(root, "n", &value, &present, error) != 0)
        return -1;
    if (present && value != 1)
        return openai_fail(error, 400, TYPE_INVALID, "n", "only n = 1 is supported (got %lld)",
                           value);
    if (read_int(root, "best_of", &value, &present, error) != 0)
        return -1;
    if (present && value != 1)
        return openai_fail(error, 400, TYPE_INVALID, "best_of",
                           "only best_of = 1 is supported (got %lld)", value);
    bool echo = false;
    if (read_bool(root, "echo", &echo, error) != 0)
        return -1;
    if (echo)
        return openai_fail(error, 400, TYPE_INVALID, "echo", "echo is not supported");
    return read_stop(root, out, error);
}

/* max_tokens, min_tokens against the prompt and max_model_len, with vLLM's wording. */
static int read_lengths(json_t *root, const openai_limits *lim, openai_request *out,
                        openai_error *error)
{
    const int max_len = lim->max_model_len;
    if (out->prompt_tokens <= 0)
        return openai_fail(error, 400, TYPE_INVALID,
                           out->endpoint == OPENAI_CHAT ? "messages" : "prompt",
                           "the prompt is empty (0 tokens)");
    if (out->prompt_tokens > max_len)
        return openai_fail(error, 400, TYPE_INVALID,
                           out->endpoint == OPENAI_CHAT ? "messages" : "prompt",
                           "This model's maximum context length is %d tokens. However, your "
                           "request has %d input tokens. Please reduce the length of the input.",
                           max_len, out->prompt_tokens);
    long long max_tokens = 0, completion = 0;
    bool has_max = false, has_completion = false;
    if (read_int(root, "max_tokens", &max_tokens, &has_max, error) != 0)
        return -1;
    const char *which = "max_tokens";
    if (out->endpoint == OPENAI_CHAT) {
        if (read_int(root, "max_completion_tokens", &completion, &has_completion, error) != 0)
            return -1;
        if (has_completion) {
            max_tokens = completion;
            has_max = true;
            which = "max_completion_tokens";
        }
    }
    if (!has_max)
        max_tokens = out->endpoint == OPENAI_CHAT ? max_len - out->prompt_tokens : 16;
    if (max_tokens < 1)
        return openai_fail(error, 400, TYPE_INVALID, which,
                           "%s must be at least 1, got %lld", which, max_tokens);
    if (max_tokens > max_len)
        return openai_fail(error, 400, TYPE_INVALID, which,
                           "%s = %lld exceeds the model's maximum context length %d", which,
                           max_tokens, max_len);
    if (out->prompt_tokens + max_tokens > max_len)
        return openai_fail(error, 400, TYPE_INVALID, which,
                           "This model's maximum context length is %d tokens. However, you "
                           "requested %lld tokens (%d in the %s, %lld in the completion). Please "
                           "reduce the length of the %s or completion.",
                           max_len, out->prompt_tokens + max_tokens, out->prompt_tokens,
                           out->endpoint == OPENAI_CHAT ? "messages" : "prompt", max_tokens,
                           out->endpoint == OPENAI_CHAT ? "messages" : "prompt");
    out->max_tokens = (int)max_tokens;

    long long min_tokens = 0;
    bool has_min = false;
    if (read_int(root, "min_tokens", &min_tokens, &has_min, error) != 0)
        return -1;
    if (has_min && (min_tokens < 0 || min_tokens > max_tokens))
        return openai_fail(error, 400, TYPE_INVALID, "min_tokens",
                           "min_tokens must be between 0 and max_tokens (%lld), got %lld",
                           max_tokens, min_tokens);
    out->min_tokens = (int)min_tokens;
    return 0;
}

int openai_parse_request(openai_endpoint endpoint, const char *body, size_t len,
                         const openai_limits *lim, openai_request *out, openai_error *error)
{
    memset(out, 0, sizeof *out);
    out->client_id = -1;
    out->endpoint = endpoint;
    out->temperature = 1.0; /* vLLM's default */
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (!root)
        return openai_fail(error, 400, TYPE_INVALID, NULL,
                           "malformed JSON: %s (line %d, column %d)", jerr.text, jerr.line,
                           jerr.column);
    int rc = -1;
    if (!json_is_object(root)) {
        openai_fail(error, 400, TYPE_INVALID, NULL, "the body must be a JSON object, not %s",
                    type_name(root));
        goto done;
    }
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) {
            openai_fail(error, 400, TYPE_INVALID, "model", "'model' must be a string, not %s",
                        type_name(model));
            goto done;
        }
        if (strcmp(json_string_value(model), lim->model_name) != 0) {
            openai_fail(error, 404, TYPE_NOT_FOUND, "model",
                        "The model `%.64s` does not exist (this server serves `%s`).",
                        json_string_value(model), lim->model_name);
            goto done;
        }
    }
    if (read_bool(root, "stream", &out->stream, error) != 0 ||
        read_stream_options(root, out, error) != 0 || read_extension(root, out, error) != 0)
        goto done;
    if (endpoint == OPENAI_CHAT ? read_messages(root, lim, out, error)
                                : read_prompt(root, lim, out, error))
        goto done;
    if (read_lengths(root, lim, out, error) != 0 || read_sampling(root, out, error) != 0)
        goto done;
    rc = 0;
done:
    json_decref(root);
    if (rc != 0)
        openai_request_free(out);
    return rc;
}

void openai_request_free(openai_request *r)
{
    free(r->prompt_ids);
    r->prompt_ids = NULL;
    free(r->text_ids);
    r->text_ids = NULL;
    r->n_text_ids = r->cap_text_ids = 0;
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    r->n_stop = 0;
}

/* ---- JSON pieces ------------------------------------------------------------------------- */

void openai_append_i64(buf *b, int64_t v)
{
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (buf_reserve(b, (size_t)n + 1) != 0)
        return;
    if (v < 0)
        b->data[b->len++] = '-';
    while (n > 0)
        b->data[b->len++] = tmp[--n];
    b->data[b->len] = '\0';
}

void openai_append_json_chars(buf *b, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    /* Worst case every byte becomes \u00XX. */
    if (len > SIZE_MAX / 6 || buf_reserve(b, len * 6) != 0)
        return;
    char *o = b->data + b->len;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else if (c == '\n') {
            *o++ = '\\';
            *o++ = 'n';
        } else if (c < 0x20) {
            *o++ = '\\';
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        } else {
            *o++ = (char)c;
        }
    }
    b->len = (size_t)(o - b->data);
    b->data[b->len] = '\0';
}

/* ---- streaming ----------------------------------------------------------------------------- */

void openai_stream_init(openai_stream *s, const openai_request *req, int64_t id,
                        int64_t created, const char *model)
{
    memset(s, 0, sizeof *s);
    s->endpoint = req->endpoint;
    s->prompt_tokens = req->prompt_tokens;
    s->continuous_usage = req->continuous_usage;
    s->timestamps = req->timestamps;
    buf b = {0};
    const bool chat = req->endpoint == OPENAI_CHAT;
    buf_append_str(&b, chat ? "data: {\"id\":\"chatcmpl-" : "data: {\"id\":\"cmpl-");
    openai_append_i64(&b, id);
    buf_append_str(&b, chat ? "\",\"object\":\"chat.completion.chunk\",\"created\":"
                            : "\",\"object\":\"text_completion\",\"created\":");
    openai_append_i64(&b, created);
    buf_append_str(&b, ",\"model\":\"");
    openai_append_json_chars(&b, model, strnlen(model, 64));
    buf_append_str(&b, "\",\"choices\":[");
    if (!b.failed && b.len < sizeof s->head) {
        memcpy(s->head, b.data, b.len);
        s->head_len = b.len;
    }
    buf_free(&b);
}

static void append_usage(buf *out, int prompt_tokens, int completion_tokens)
{
    buf_append_str(out, ",\"usage\":{\"prompt_tokens\":");
    openai_append_i64(out, prompt_tokens);
    buf_append_str(out, ",\"total_tokens\":");
    openai_append_i64(out, (int64_t)prompt_tokens + completion_tokens);
    buf_append_str(out, ",\"completion_tokens\":");
    openai_append_i64(out, completion_tokens);
    buf_append(out, "}", 1);
}

static void append_timestamps(buf *out, int64_t emit_ns, int64_t step)
{
    buf_append_str(out, ",\"stallscope\":{\"emit_ns\":");
    openai_append_i64(out, emit_ns);
    buf_append_str(out, ",\"step\":");
    openai_append_i64(out, step);
    buf_append(out, "}", 1);
}

static void append_nullable_string(buf *out, const char *s)
{
    if (!s) {
        buf_append_str(out, "null");
        return;
    }
    buf_append(out, "\"", 1);
    openai_append_json_chars(out, s, strlen(s));
    buf_append(out, "\"", 1);
}

void openai_encode_chunk(const openai_stream *s, const openai_chunk *c, buf *out)
{
    buf_append(out, s->head, s->head_len);
    if (s->endpoint == OPENAI_CHAT) {
        if (c->role)
            buf_append_str(out, "{\"index\":0,\"delta\":{\"role\":\"assistant\","
                                "\"content\":\"");
        else
            buf_append_str(out, "{\"index\":0,\"delta\":{\"content\":\"");
        openai_append_json_chars(out, c->text, c->text_len);
        buf_append_str(out, "\"},\"logprobs\":null,\"finish_reason\":");
    } else {
        buf_append_str(out, "{\"index\":0,\"text\":\"");
        openai_append_json_chars(out, c->text, c->text_len);
        buf_append_str(out, "\",\"logprobs\":null,\"finish_reason\":");
    }
    append_nullable_string(out, c->finish_reason);
    buf_append_str(out, ",\"stop_reason\":");
    append_nullable_string(out, c->stop_reason);
    buf_append_str(out, "}]");
    if (s->continuous_usage)
        append_usage(out, s->prompt_tokens, c->completion_tokens);
    if (s->timestamps)
        append_timestamps(out, c->emit_ns, c->step);
    buf_append_str(out, "}\n\n");
}

void openai_encode_usage_chunk(const openai_stream *s, int completion_tokens, int64_t emit_ns,
                               int64_t step, buf *out)
{
    buf_append(out, s->head, s->head_len);
    buf_append(out, "]", 1);
    append_usage(out, s->prompt_tokens, completion_tokens);
    if (s->timestamps)
        append_timestamps(out, emit_ns, step);
    buf_append_str(out, "}\n\n");
}

void openai_encode_done(buf *out)
{
    buf_append_str(out, "data: [DONE]\n\n");
}

void openai_encode_stream_error(const openai_error *error, buf *out)
{
    char *body = openai_error_body(error);
    buf_append_str(out, "data: ");
    buf_append_str(out, body ? body : "{\"error\":{\"message\":\"out of memory\"}}");
    buf_append_str(out, "\n\n");
    free(body);
}

/* ---- whole responses --------------------------------------------------------------------- */

static json_t *nullable(const char *s)
{
    return s ? json_string(s) : json_null();
}

char *openai_encode_response(const openai_request *req, int64_t id, int64_t created,
                             const char *model, const char *text, size_t text_len,
                             const char *finish_reason, const char *stop_reason,
                             int completion_tokens, int64_t emit_ns, int64_t step)
{
    const bool chat = req->endpoint == OPENAI_CHAT;
    json_t *content = json_stringn(text ? text : "", text ? text_len : 0);
    if (!content)
        return NULL;
    char id_text[48];
    snprintf(id_text, sizeof id_text, "%s-%lld", chat ? "chatcmpl" : "cmpl", (long long)id);
    json_t *choice;
    if (chat)
        choice = json_pack("{s:i, s:{s:s, s:o, s:[]}, s:n, s:o, s:o}", "index", 0, "message",
                           "role", "assistant", "content", content, "tool_calls", "logprobs",
                           "finish_reason", nullable(finish_reason), "stop_reason",
                           nullable(stop_reason));
    else
        choice = json_pack("{s:i, s:o, s:n, s:o, s:o, s:n}", "index", 0, "text", content,
                           "logprobs", "finish_reason", nullable(finish_reason), "stop_reason",
                           nullable(stop_reason), "prompt_logprobs");
    if (!choice)
        return NULL;
    json_t *root = json_pack(
        "{s:s, s:s, s:I, s:s, s:[o], s:{s:i, s:I, s:i}}", "id", id_text, "object",
        chat ? "chat.completion" : "text_completion", "created", (json_int_t)created, "model",
        model, "choices", choice, "usage", "prompt_tokens", req->prompt_tokens, "total_tokens",
        (json_int_t)req->prompt_tokens + completion_tokens, "completion_tokens",
        completion_tokens);
    if (!root)
        return NULL;
    if (emit_ns >= 0)
        json_object_set_new(root, "stallscope",
                            json_pack("{s:I, s:I}", "emit_ns", (json_int_t)emit_ns, "step",
                                      (json_int_t)step));
    char *body = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return body;
}

char *openai_models_body(const char *model, int max_model_len, int64_t created)
{
    json_t *root = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:s, s:n, s:i, s:[]}]}", "object",
                             "list", "data", "id", model, "object", "model", "created",
                             (json_int_t)created, "owned_by", "stallscope", "root", model,
                             "parent", "max_model_len", max_model_len, "permission");
    if (!root)
        return NULL;
    char *body = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return body;
}
