#include "client/chunk.h"

#include <stdio.h>
#include <string.h>

#include "client/json_scan.h"
#include "common/err.h"

/* ---- the decoder -------------------------------------------------------------------- */

/* One rule (decode_members and the functions it calls) says what a chunk means, whichever
 * reader (json_scan.h) reads the JSON: tests/unit/client/test_json_scan.c and
 * fuzz/fuzz_sse_chunk decode the same chunks through the scanner and through jansson and
 * require the same chunk_info. */

static void copy_str(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src ? src : "");
}

static bool nonempty_string(const json_scan_value *v)
{
    return v->type == JSON_SCAN_STRING && v->nonempty;
}

/* v is the string want, exactly. */
static bool text_is(const json_scan_reader *rd, const json_scan_value *v, const char *want)
{
    char buf[16];
    const size_t len = strlen(want);
    if (v->type != JSON_SCAN_STRING || len + 2 > sizeof buf)
        return false;
    rd->text(rd, v, buf, len + 2); /* one byte more than want: a longer string differs */
    return strcmp(buf, want) == 0;
}

static int64_t int_or(const json_scan_value *v, int64_t fallback)
{
    if (v->type == JSON_SCAN_INT)
        return v->integer;
    /* A server's 1e300 must not reach the cast: out of range is undefined behaviour (found
     * by fuzz/fuzz_sse_chunk). NaN fails both comparisons. */
    if (v->type == JSON_SCAN_REAL && v->real >= -9.0e18 && v->real <= 9.0e18)
        return (int64_t)v->real;
    return fallback;
}

/* A server's token count: -1 when absent or null; a value that cannot be a count (negative,
 * fractional, not a number, above CHUNK_MAX_COUNT) is -1 too, with bad_count set. */
static int64_t count_of(const json_scan_value *v, chunk_info *out)
{
    if (v->type == JSON_SCAN_ABSENT || v->type == JSON_SCAN_NULL)
        return -1;
    const int64_t n = int_or(v, -1);
    if (n < 0 || n > CHUNK_MAX_COUNT || (v->type == JSON_SCAN_REAL && (double)n != v->real)) {
        out->bad_count = true;
        return -1;
    }
    return n;
}

/* The top-level members the rule looks at, read in one pass. */
enum {
    K_ERROR,
    K_OBJECT,
    K_MESSAGE,
    K_STALLSCOPE,
    K_USAGE,
    K_CHOICES,
    K_CONTENT,
    K_STOP,
    K_TOKENS_PREDICTED,
    K_TOKENS_EVALUATED,
    K_STOP_TYPE,
    K_TOKEN,
    K_DETAILS,
    K_GENERATED_TEXT,
    K_ROOT_KEYS
};
static const char *const root_keys[K_ROOT_KEYS] = {
    "error",   "object", "message",          "stallscope",       "usage",
    "choices", "content", "stop",            "tokens_predicted", "tokens_evaluated",
    "stop_type", "token", "details",         "generated_text",
};

/* OpenAI's {"error": {"message": ...}} or {"error": "text"}; vLLM's older
 * {"object": "error", "message": ...}. */
static bool decode_error(const json_scan_reader *rd, const json_scan_value *m, chunk_info *out)
{
    static const char *const message_key[] = {"message"};
    static const char no_message[] = "error event without a message";
    json_scan_value msg = {0};
    if (m[K_ERROR].type == JSON_SCAN_OBJECT)
        rd->members(rd, &m[K_ERROR], message_key, 1, &msg);
    else if (m[K_ERROR].type == JSON_SCAN_STRING)
        msg = m[K_ERROR];
    else if (text_is(rd, &m[K_OBJECT], "error"))
        msg = m[K_MESSAGE];
    else
        return false;
    out->is_error = true;
    if (msg.type == JSON_SCAN_STRING)
        rd->text(rd, &msg, out->error, sizeof out->error);
    else
        copy_str(out->error, sizeof out->error, no_message);
    return true;
}

static void decode_usage(const json_scan_reader *rd, const json_scan_value *usage, chunk_info *out)
{
    static const char *const keys[] = {"prompt_tokens", "completion_tokens"};
    if (usage->type != JSON_SCAN_OBJECT)
        return;
    json_scan_value v[2];
    rd->members(rd, usage, keys, 2, v);
    out->has_usage = true;
    out->prompt_tokens = count_of(&v[0], out);
    out->completion_tokens = count_of(&v[1], out);
}

static void decode_choice(const json_scan_reader *rd, const json_scan_value *choice,
                          chunk_info *out)
{
    static const char *const keys[] = {"text", "delta", "finish_reason"};
    static const char *const delta_keys[] = {"content", "reasoning_content", "reasoning",
                                             "tool_calls"};
    json_scan_value v[3], d[4];
    rd->members(rd, choice, keys, 3, v);
    out->has_choices = true;
    if (nonempty_string(&v[0]))
        out->has_text = true; /* completions */
    if (v[1].type == JSON_SCAN_OBJECT) { /* chat */
        rd->members(rd, &v[1], delta_keys, 4, d);
        if (nonempty_string(&d[0]) || nonempty_string(&d[1]) || nonempty_string(&d[2]) ||
            (d[3].type == JSON_SCAN_ARRAY && d[3].nonempty))
            out->has_text = true;
    }
    if (v[2].type == JSON_SCAN_STRING) {
        rd->text(rd, &v[2], out->finish_reason, sizeof out->finish_reason);
        out->stopped = true;
    }
}

/* llama.cpp's own /completion: {"content": "...", "stop": false} per token, then a final
 * {"content": "", "stop": true, "stop_type": "limit", "tokens_predicted": N, ...}. */
static void decode_llamacpp(const json_scan_reader *rd, const json_scan_value *m, chunk_info *out)
{
    const bool stop = m[K_STOP].type == JSON_SCAN_TRUE;
    const bool text = nonempty_string(&m[K_CONTENT]);
    out->has_text = text;
    out->has_choices = text || !stop;
    if (m[K_TOKENS_PREDICTED].type == JSON_SCAN_INT) {
        out->has_usage = true;
        out->completion_tokens = count_of(&m[K_TOKENS_PREDICTED], out);
        out->prompt_tokens = count_of(&m[K_TOKENS_EVALUATED], out);
    }
    if (stop) {
        out->stopped = true;
        copy_str(out->finish_reason, sizeof out->finish_reason,
                 text_is(rd, &m[K_STOP_TYPE], "limit") ? "length" : "stop");
    }
}

/* TGI's /generate_stream: {"token": {"text": ...}, "generated_text": null, "details": ...}. */
static void decode_tgi(const json_scan_reader *rd, const json_scan_value *m, chunk_info *out)
{
    static const char *const keys[] = {"finish_reason", "generated_tokens"};
    out->has_choices = true;
    out->has_text = true;
    if (m[K_DETAILS].type == JSON_SCAN_OBJECT) {
        json_scan_value v[2];
        rd->members(rd, &m[K_DETAILS], keys, 2, v);
        if (v[0].type == JSON_SCAN_STRING) {
            if (text_is(rd, &v[0], "eos_token"))
                copy_str(out->finish_reason, sizeof out->finish_reason, "stop");
            else
                rd->text(rd, &v[0], out->finish_reason, sizeof out->finish_reason);
            out->stopped = true;
        }
        if (v[1].type == JSON_SCAN_INT) {
            out->has_usage = true;
            out->completion_tokens = count_of(&v[1], out);
        }
    }
    if (m[K_GENERATED_TEXT].type != JSON_SCAN_ABSENT && m[K_GENERATED_TEXT].type != JSON_SCAN_NULL)
        out->stopped = true;
}

/* The rule, given the root object's members (root_keys). */
static void decode_members(const json_scan_reader *rd, const json_scan_value *m,
                           const sse_event *ev, bool error_event, chunk_info *out)
{
    if (decode_error(rd, m, out) || error_event) {
        if (!out->is_error) {
            out->is_error = true;
            copy_str(out->error, sizeof out->error, ev->data);
        }
        return;
    }
    if (m[K_STALLSCOPE].type == JSON_SCAN_OBJECT) {
        static const char *const keys[] = {"emit_ns", "step"};
        json_scan_value v[2];
        rd->members(rd, &m[K_STALLSCOPE], keys, 2, v);
        out->emit_ns = int_or(&v[0], -1);
        out->step = int_or(&v[1], -1);
    }
    decode_usage(rd, &m[K_USAGE], out);
    if (m[K_CHOICES].type == JSON_SCAN_ARRAY) {
        if (m[K_CHOICES].nonempty) {
            json_scan_value choice;
            rd->first(rd, &m[K_CHOICES], &choice);
            decode_choice(rd, &choice, out);
        }
    } else if (m[K_CONTENT].type == JSON_SCAN_STRING) {
        decode_llamacpp(rd, m, out);
    } else if (m[K_TOKEN].type == JSON_SCAN_OBJECT) {
        decode_tgi(rd, m, out);
    }
}

static bool is_done(const char *data, size_t len)
{
    while (len > 0 && (data[len - 1] == ' ' || data[len - 1] == '\t'))
        len--;
    while (len > 0 && (*data == ' ' || *data == '\t'))
        data++, len--;
    return len == 6 && memcmp(data, "[DONE]", 6) == 0;
}

/* A chunk that says nothing: every count and time absent. */
static void chunk_reset(chunk_info *out)
{
    memset(out, 0, sizeof *out);
    out->prompt_tokens = -1;
    out->completion_tokens = -1;
    out->emit_ns = -1;
    out->step = -1;
}

/* Both decoders start here: out reset; true when the event is [DONE] (decoded). */
static bool decode_start(const sse_event *ev, chunk_info *out, bool *error_event)
{
    chunk_reset(out);
    *error_event = ev->type && strcmp(ev->type, "error") == 0;
    out->done = is_done(ev->data, ev->data_len);
    return out->done;
}

/* The data is not a JSON object: an "event: error" with a plain-text message, or a
 * malformed stream. */
static int not_an_object(const sse_event *ev, bool error_event, const char *why, chunk_info *out,
                         char *err)
{
    if (error_event) {
        out->is_error = true;
        copy_str(out->error, sizeof out->error, ev->data);
        return 0;
    }
    return err_set(err, "malformed SSE chunk (%s): %.60s", why, ev->data);
}

/* Both decoders: out reset, [DONE] and error events told apart, then the rule over the
 * object's members as `jansson` or the scanner reads them. */
static int decode(const sse_event *ev, chunk_info *out, bool jansson, char *err)
{
    bool error_event;
    if (decode_start(ev, out, &error_event))
        return 0;
    json_scan_doc doc;
    json_scan_value m[K_ROOT_KEYS];
    const int rc =
        jansson ? json_scan_object_jansson(&doc, ev->data, ev->data_len, root_keys, K_ROOT_KEYS, m)
                : json_scan_object(&doc, ev->data, ev->data_len, root_keys, K_ROOT_KEYS, m);
    if (rc != 0)
        return not_an_object(ev, error_event, doc.why, out, err);
    decode_members(&doc.reader, m, ev, error_event, out);
    json_scan_close(&doc);
    return 0;
}

int chunk_decode(const sse_event *ev, chunk_info *out, char *err)
{
    return decode(ev, out, false, err);
}

int chunk_decode_jansson(const sse_event *ev, chunk_info *out, char *err)
{
    return decode(ev, out, true, err);
}

/* ---- the counter ------------------------------------------------------------------ */

void chunk_counter_init(chunk_counter *c, int64_t max_tokens)
{
    memset(c, 0, sizeof *c);
    c->max_tokens = max_tokens;
    c->usage_completion = -1;
    c->usage_prompt = -1;
}

static void violation(chunk_counter *c, chunk_violation v)
{
    if (c->violations++ == 0)
        c->first = v;
    c->by_kind[v]++;
}

bool chunk_counter_ended(chunk_counter *c)
{
    if (!c->done)
        return false;
    violation(c, CHUNK_VIOLATION_AFTER_DONE);
    return true;
}

/* The most completion tokens the stream can have shown once this chunk is counted
 * (INT64_MAX: no bound), the rule of chunk_counter_add. */
static int64_t stream_bound(const chunk_counter *c, const chunk_info *chunk)
{
    const bool text = chunk->has_choices && chunk->has_text;
    const bool usage_kept_up = c->delivered == 0 || c->usage_completion >= c->delivered;
    if (text && usage_kept_up)
        return INT64_MAX;
    return c->delivered + (text ? 1 : 0) + CHUNK_STOP_TOKEN_SLACK;
}

/* The chunk's usage.completion_tokens if it can be true of this stream, else -1 with what
 * is wrong with it in *why. */
static int64_t believable_completion(const chunk_counter *c, const chunk_info *chunk,
                                     chunk_violation *why)
{
    if (!chunk->has_usage || chunk->completion_tokens < 0)
        return -1;
    if (chunk->completion_tokens < c->usage_completion)
        *why = CHUNK_VIOLATION_COUNT_BACKWARDS;
    else if (c->max_tokens > 0 && chunk->completion_tokens > c->max_tokens)
        *why = CHUNK_VIOLATION_PAST_MAX;
    else if (chunk->completion_tokens > stream_bound(c, chunk))
        *why = CHUNK_VIOLATION_ABOVE_STREAM;
    else
        return chunk->completion_tokens;
    return -1;
}

int chunk_counter_add(chunk_counter *c, const chunk_info *chunk)
{
    if (chunk_counter_ended(c))
        return 0;
    if (chunk->done) {
        c->done = true;
        return 0;
    }
    chunk_violation why = chunk->bad_count ? CHUNK_VIOLATION_BAD_COUNT : CHUNK_VIOLATION_NONE;
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
        if (why == CHUNK_VIOLATION_NONE)
            why = CHUNK_VIOLATION_PAST_MAX;
    }
    if (why != CHUNK_VIOLATION_NONE)
        violation(c, why);
    c->delivered += k;
    return (int)k;
}

int64_t chunk_counter_completion(const chunk_counter *c)
{
    return c->usage_completion > c->delivered ? c->usage_completion : c->delivered;
}

const char *chunk_violation_text(chunk_violation v)
{
    switch (v) {
    case CHUNK_VIOLATION_AFTER_DONE:
        return "an event after [DONE]";
    case CHUNK_VIOLATION_BAD_COUNT:
        return "a usage count that is not a count";
    case CHUNK_VIOLATION_COUNT_BACKWARDS:
        return "usage.completion_tokens going backwards";
    case CHUNK_VIOLATION_PAST_MAX:
        return "more completion tokens than max_tokens";
    case CHUNK_VIOLATION_ABOVE_STREAM:
        return "usage.completion_tokens above the tokens streamed";
    default:
        return "none";
    }
}

const char *chunk_violation_name(chunk_violation v)
{
    static const char *const names[CHUNK_VIOLATION_KINDS] = {
        [CHUNK_VIOLATION_NONE] = "none",
        [CHUNK_VIOLATION_AFTER_DONE] = "after_done",
        [CHUNK_VIOLATION_BAD_COUNT] = "bad_count",
        [CHUNK_VIOLATION_COUNT_BACKWARDS] = "count_backwards",
        [CHUNK_VIOLATION_PAST_MAX] = "past_max",
        [CHUNK_VIOLATION_ABOVE_STREAM] = "above_stream",
    };
    return v > CHUNK_VIOLATION_NONE && v < CHUNK_VIOLATION_KINDS ? names[v] : names[0];
}

int chunk_counter_event(chunk_counter *c, const sse_event *ev, chunk_info *out, char *err)
{
    if (chunk_counter_ended(c)) { /* anything after [DONE] is ignored (and counted) */
        chunk_reset(out);
        return 0;
    }
    if (chunk_decode(ev, out, err) != 0)
        return -1;
    if (out->is_error)
        return err_set(err, "server error event: %s", out->error);
    return chunk_counter_add(c, out);
}
