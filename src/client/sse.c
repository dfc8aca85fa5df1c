#include "client/sse.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/err.h"

/* ---- splitter --------------------------------------------------------------------- */

void sse_parser_init(sse_parser *p, size_t max_event)
{
    memset(p, 0, sizeof *p);
    p->max_event = max_event ? max_event : SSE_DEFAULT_MAX_EVENT;
}

void sse_parser_free(sse_parser *p)
{
    free(p->buf);
    p->buf = NULL;
    p->cap = 0;
}

void sse_parser_reset(sse_parser *p)
{
    p->data_len = 0;
    p->line_len = 0;
    p->has_data = false;
    p->after_cr = false;
    p->dispatched = false;
    p->event_type[0] = '\0';
}

bool sse_parser_pending(const sse_parser *p)
{
    return !p->dispatched && (p->line_len > 0 || p->has_data);
}

/* Room for `more` bytes after the data and the partial line, plus a NUL. The buffer
 * doubles, so a stream of small reads costs O(log n) allocations, never one per byte. */
static int reserve(sse_parser *p, size_t more)
{
    size_t need = p->data_len + p->line_len + more + 2;
    if (need > p->max_event + 2)
        return -1;
    if (need <= p->cap)
        return 0;
    size_t cap = p->cap ? p->cap : 256;
    while (cap < need)
        cap *= 2;
    char *b = realloc(p->buf, cap);
    if (!b)
        return -1;
    p->buf = b;
    p->cap = cap;
    return 0;
}

static bool field_is(const char *line, size_t name_len, const char *name)
{
    return strlen(name) == name_len && memcmp(line, name, name_len) == 0;
}

/* One complete line sits at buf + data_len. Returns true when it ended an event. */
static bool take_line(sse_parser *p)
{
    char *line = p->buf + p->data_len;
    size_t len = p->line_len;
    p->line_len = 0;
    if (len == 0) {
        if (p->has_data)
            return true;
        p->event_type[0] = '\0'; /* an empty event resets its type (WHATWG) */
        return false;
    }
    if (line[0] == ':')
        return false; /* comment: servers send these as keep-alives */
    char *colon = memchr(line, ':', len);
    size_t name_len = colon ? (size_t)(colon - line) : len;
    const char *value = colon ? colon + 1 : line + len;
    size_t value_len = colon ? len - name_len - 1 : 0;
    if (value_len > 0 && value[0] == ' ')
        value++, value_len--;
    bool is_data = field_is(line, name_len, "data");
    bool is_error = field_is(line, name_len, "error"); /* llama.cpp's "error: {...}" */
    if (is_data || is_error) {
        if (is_error)
            strcpy(p->event_type, "error");
        if (p->has_data)
            p->buf[p->data_len++] = '\n';
        /* The value lies to the right of the data region: moving it left is safe. */
        memmove(p->buf + p->data_len, value, value_len);
        p->data_len += value_len;
        p->has_data = true;
    } else if (field_is(line, name_len, "event")) {
        size_t n = value_len < sizeof p->event_type - 1 ? value_len : sizeof p->event_type - 1;
        memcpy(p->event_type, value, n);
        p->event_type[n] = '\0';
    }
    return false;
}

int sse_parse(sse_parser *p, const char *in, size_t len, size_t *consumed, sse_event *ev)
{
    if (p->dispatched) {
        p->dispatched = false;
        p->data_len = 0;
        p->has_data = false;
        p->event_type[0] = '\0';
    }
    size_t i = 0;
    while (i < len) {
        if (p->after_cr) {
            p->after_cr = false;
            if (in[i] == '\n') {
                i++;
                continue;
            }
        }
        const char *start = in + i;
        size_t rest = len - i;
        const char *nl = memchr(start, '\n', rest);
        const char *cr = memchr(start, '\r', nl ? (size_t)(nl - start) : rest);
        const char *end = cr ? cr : nl;
        size_t piece = end ? (size_t)(end - start) : rest;
        if (reserve(p, piece) != 0) {
            *consumed = i;
            return SSE_ERROR;
        }
        memcpy(p->buf + p->data_len + p->line_len, start, piece);
        p->line_len += piece;
        i += piece;
        if (!end)
            break;
        i++; /* the line end itself */
        p->after_cr = (*end == '\r');
        if (take_line(p)) {
            p->buf[p->data_len] = '\0';
            p->dispatched = true;
            ev->data = p->buf;
            ev->data_len = p->data_len;
            ev->type = p->event_type;
            *consumed = i;
            return SSE_EVENT;
        }
    }
    *consumed = len;
    return SSE_NEED_MORE;
}

/* ---- chunk decoder ---------------------------------------------------------------- */

static void copy_str(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src ? src : "");
}

static bool nonempty_string(json_t *v)
{
    return json_is_string(v) && json_string_length(v) > 0;
}

static int64_t int_or(json_t *v, int64_t fallback)
{
    if (json_is_integer(v))
        return (int64_t)json_integer_value(v);
    if (json_is_real(v)) {
        /* A server's 1e300 must not reach the cast: out of range is undefined behaviour
         * (found by fuzz/fuzz_sse_chunk). NaN fails both comparisons. */
        double d = json_real_value(v);
        if (d >= -9.0e18 && d <= 9.0e18)
            return (int64_t)d;
    }
    return fallback;
}

/* OpenAI's {"error": {"message": ...}} or {"error": "text"}; vLLM's older
 * {"object": "error", "message": ...}. */
static bool decode_error(json_t *root, sse_chunk *out)
{
    json_t *e = json_object_get(root, "error");
    json_t *obj = json_object_get(root, "object");
    const char *msg = NULL;
    if (json_is_object(e)) {
        msg = json_string_value(json_object_get(e, "message"));
        if (!msg)
            msg = "error event without a message";
    } else if (json_is_string(e)) {
        msg = json_string_value(e);
    } else if (json_is_string(obj) && strcmp(json_string_value(obj), "error") == 0) {
        msg = json_string_value(json_object_get(root, "message"));
        if (!msg)
            msg = "error event without a message";
    }
    if (!msg)
        return false;
    out->is_error = true;
    copy_str(out->error, sizeof out->error, msg);
    return true;
}

/* A server's token count: -1 when absent or null; a value that cannot be a count (negative,
 * fractional, not a number, above SSE_MAX_COUNT) is -1 too, with bad_count set. */
static int64_t count_of(json_t *v, sse_chunk *out)
{
    if (!v || json_is_null(v))
        return -1;
    int64_t n = int_or(v, -1);
    if (n < 0 || n > SSE_MAX_COUNT || (json_is_real(v) && (double)n != json_real_value(v))) {
        out->bad_count = true;
        return -1;
    }
    return n;
}

static void decode_usage(json_t *usage, sse_chunk *out)
{
    if (!json_is_object(usage))
        return;
    out->has_usage = true;
    out->prompt_tokens = count_of(json_object_get(usage, "prompt_tokens"), out);
    out->completion_tokens = count_of(json_object_get(usage, "completion_tokens"), out);
}

static void decode_choice(json_t *choice, sse_chunk *out)
{
    out->has_choices = true;
    if (nonempty_string(json_object_get(choice, "text")))
        out->has_text = true; /* completions */
    json_t *delta = json_object_get(choice, "delta"); /* chat */
    if (json_is_object(delta)) {
        json_t *tools = json_object_get(delta, "tool_calls");
        if (nonempty_string(json_object_get(delta, "content")) ||
            nonempty_string(json_object_get(delta, "reasoning_content")) ||
            nonempty_string(json_object_get(delta, "reasoning")) ||
            (json_is_array(tools) && json_array_size(tools) > 0))
            out->has_text = true;
    }
    const char *finish = json_string_value(json_object_get(choice, "finish_reason"));
    if (finish) {
        copy_str(out->finish_reason, sizeof out->finish_reason, finish);
        out->stopped = true;
    }
}

/* llama.cpp's own /completion: {"content": "...", "stop": false} per token, then a final
 * {"content": "", "stop": true, "stop_type": "limit", "tokens_predicted": N, ...}. */
static void decode_llamacpp(json_t *root, sse_chunk *out)
{
    bool stop = json_is_true(json_object_get(root, "stop"));
    bool text = nonempty_string(json_object_get(root, "content"));
    out->has_text = text;
    out->has_choices = text || !stop;
    json_t *predicted = json_object_get(root, "tokens_predicted");
    if (json_is_integer(predicted)) {
        out->has_usage = true;
        out->completion_tokens = count_of(predicted, out);
        out->prompt_tokens = count_of(json_object_get(root, "tokens_evaluated"), out);
    }
    if (stop) {
        const char *type = json_string_value(json_object_get(root, "stop_type"));
        out->stopped = true;
        copy_str(out->finish_reason, sizeof out->finish_reason,
                 type && strcmp(type, "limit") == 0 ? "length" : "stop");
    }
}

/* TGI's /generate_stream: {"token": {"text": ...}, "generated_text": null, "details": ...}. */
static void decode_tgi(json_t *root, sse_chunk *out)
{
    out->has_choices = true;
    out->has_text = true;
    json_t *details = json_object_get(root, "details");
    if (json_is_object(details)) {
        const char *finish = json_string_value(json_object_get(details, "finish_reason"));
        if (finish) {
            copy_str(out->finish_reason, sizeof out->finish_reason,
                     strcmp(finish, "eos_token") == 0 ? "stop" : finish);
            out->stopped = true;
        }
        json_t *generated = json_object_get(details, "generated_tokens");
        if (json_is_integer(generated)) {
            out->has_usage = true;
            out->completion_tokens = count_of(generated, out);
        }
    }
    if (!json_is_null(json_object_get(root, "generated_text")) &&
        json_object_get(root, "generated_text"))
        out->stopped = true;
}

static bool is_done(const char *data, size_t len)
{
    while (len > 0 && (data[len - 1] == ' ' || data[len - 1] == '\t'))
        len--;
    while (len > 0 && (*data == ' ' || *data == '\t'))
        data++, len--;
    return len == 6 && memcmp(data, "[DONE]", 6) == 0;
}

int sse_decode_chunk(const sse_event *ev, sse_chunk *out, char *err)
{
    memset(out, 0, sizeof *out);
    out->prompt_tokens = -1;
    out->completion_tokens = -1;
    out->emit_ns = -1;
    out->step = -1;
    bool error_event = ev->type && strcmp(ev->type, "error") == 0;
    if (is_done(ev->data, ev->data_len)) {
        out->done = true;
        return 0;
    }
    json_error_t jerr;
    json_t *root = json_loadb(ev->data, ev->data_len, 0, &jerr);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        if (error_event) { /* "event: error" with a plain-text message */
            out->is_error = true;
            copy_str(out->error, sizeof out->error, ev->data);
            return 0;
        }
        return err_set(err, "malformed SSE chunk (%s): %.60s", root ? "not an object" : jerr.text,
                       ev->data);
    }
    if (decode_error(root, out) || error_event) {
        if (!out->is_error) {
            out->is_error = true;
            copy_str(out->error, sizeof out->error, ev->data);
        }
        json_decref(root);
        return 0;
    }
    json_t *ours = json_object_get(root, "stallscope");
    if (json_is_object(ours)) {
        out->emit_ns = int_or(json_object_get(ours, "emit_ns"), -1);
        out->step = int_or(json_object_get(ours, "step"), -1);
    }
    decode_usage(json_object_get(root, "usage"), out);
    json_t *choices = json_object_get(root, "choices");
    if (json_is_array(choices)) {
        if (json_array_size(choices) > 0)
            decode_choice(json_array_get(choices, 0), out);
    } else if (json_is_string(json_object_get(root, "content"))) {
        decode_llamacpp(root, out);
    } else if (json_is_object(json_object_get(root, "token"))) {
        decode_tgi(root, out);
    }
    json_decref(root);
    return 0;
}

/* ---- token counting --------------------------------------------------------------- */

void sse_counter_init(sse_counter *c, int64_t max_tokens)
{
    memset(c, 0, sizeof *c);
    c->max_tokens = max_tokens;
    c->usage_completion = -1;
    c->usage_prompt = -1;
}

static void violation(sse_counter *c, sse_violation v)
{
    if (c->violations++ == 0)
        c->first = v;
}

bool sse_counter_ended(sse_counter *c)
{
    if (!c->done)
        return false;
    violation(c, SSE_VIOLATION_AFTER_DONE);
    return true;
}

/* The chunk's usage.completion_tokens if it can be true of this stream, else -1 with what
 * is wrong with it in *why. */
static int64_t believable_completion(const sse_counter *c, const sse_chunk *chunk,
                                     sse_violation *why)
{
    if (!chunk->has_usage || chunk->completion_tokens < 0)
        return -1;
    if (chunk->completion_tokens < c->usage_completion)
        *why = SSE_VIOLATION_COUNT_BACKWARDS;
    else if (c->max_tokens > 0 && chunk->completion_tokens > c->max_tokens)
        *why = SSE_VIOLATION_PAST_MAX;
    else
        return chunk->completion_tokens;
    return -1;
}

int sse_counter_add(sse_counter *c, const sse_chunk *chunk)
{
    if (sse_counter_ended(c))
        return 0;
    if (chunk->done) {
        c->done = true;
        return 0;
    }
    sse_violation why = chunk->bad_count ? SSE_VIOLATION_BAD_COUNT : SSE_VIOLATION_NONE;
    if (chunk->has_usage && chunk->prompt_tokens >= 0)
        c->usage_prompt = chunk->prompt_tokens;
    const int64_t usage = believable_completion(c, chunk, &why);
    if (usage >= 0)
        c->usage_completion = usage;
    int64_t k = 0;
    if (chunk->has_choices && usage >= 0) {
        k = usage - c->delivered;
        if (k <= 0)
            k = chunk->has_text ? 1 : 0; /* text the user sees is an event, whatever the count */
    } else if (chunk->has_choices && chunk->has_text) {
        k = 1; /* no usage, or usage refused: one per chunk with text */
    }
    if (c->max_tokens > 0 && k > c->max_tokens - c->delivered) {
        k = c->max_tokens - c->delivered; /* never more than the request asked for */
        if (why == SSE_VIOLATION_NONE)
            why = SSE_VIOLATION_PAST_MAX;
    }
    if (why != SSE_VIOLATION_NONE)
        violation(c, why);
    c->delivered += k;
    return (int)k;
}

int64_t sse_counter_completion(const sse_counter *c)
{
    return c->usage_completion > c->delivered ? c->usage_completion : c->delivered;
}

const char *sse_violation_text(sse_violation v)
{
    switch (v) {
    case SSE_VIOLATION_AFTER_DONE:
        return "an event after [DONE]";
    case SSE_VIOLATION_BAD_COUNT:
        return "a usage count that is not a count";
    case SSE_VIOLATION_COUNT_BACKWARDS:
        return "usage.completion_tokens going backwards";
    case SSE_VIOLATION_PAST_MAX:
        return "more completion tokens than max_tokens";
    default:
        return "none";
    }
}
