#include "client/sse.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
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

/* One rule (decode_members and the functions it calls) says what a chunk means. It reads
 * JSON through a small reader: the members of an object it names, an array's first
 * element, a string's text. Two readers serve it:
 *   - the scanner (what the client runs): one pass over the chunk in place that accepts and
 *     refuses what jansson 2.14 does (grammar, UTF-8, escapes, \u0000, surrogates, integer
 *     and real overflow, nesting depth), keeping the spans of the members asked for and
 *     converting only their numbers; no DOM, no allocation (a real number longer than 63
 *     bytes aside). One difference, on purpose: a NUL byte is never JSON and the scanner
 *     refuses it everywhere, where jansson's lexer drops one that follows a number or a
 *     literal (its push-back of the look-ahead byte loses a NUL);
 *   - jansson (the reference, sse_decode_chunk_jansson): json_loadb, then json_object_get.
 * tests/unit/test_sse.c and fuzz/fuzz_sse_chunk decode the same chunks with both and
 * require the same sse_chunk. */

typedef enum {
    JV_ABSENT = 0,
    JV_NULL,
    JV_FALSE,
    JV_TRUE,
    JV_INT,
    JV_REAL,
    JV_STRING,
    JV_ARRAY,
    JV_OBJECT,
} jv_type;

/* One JSON value as the rule sees it. */
typedef struct jv {
    jv_type type;
    bool nonempty;   /* a string of at least one byte, an array with an element */
    int64_t integer; /* JV_INT */
    double real;     /* JV_REAL */
    const void *at;  /* the reader's handle: the json_t, or the value's first byte */
    int depth;       /* the scanner: nesting depth as jansson counts it (the root is 1) */
} jv;

typedef struct jv_reader jv_reader;
struct jv_reader {
    const char *end; /* the scanner: one past the chunk's last byte */
    /* The members names[0, n) of obj into out (JV_ABSENT when missing, or when obj is not
     * an object); of duplicate keys the last one, as jansson keeps it. */
    void (*members)(const jv_reader *rd, const jv *obj, const char *const *names, int n,
                    jv *out);
    /* An array's first element (JV_ABSENT when empty or not an array). */
    void (*first)(const jv_reader *rd, const jv *array, jv *out);
    /* A string's decoded bytes, cut to size - 1 and NUL-terminated (snprintf's "%s"). */
    void (*text)(const jv_reader *rd, const jv *s, char *buf, size_t size);
};

static void copy_str(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src ? src : "");
}

static bool nonempty_string(const jv *v)
{
    return v->type == JV_STRING && v->nonempty;
}

/* v is the string want, exactly. */
static bool text_is(const jv_reader *rd, const jv *v, const char *want)
{
    char buf[16];
    const size_t len = strlen(want);
    if (v->type != JV_STRING || len + 2 > sizeof buf)
        return false;
    rd->text(rd, v, buf, len + 2); /* one byte more than want: a longer string differs */
    return strcmp(buf, want) == 0;
}

static int64_t int_or(const jv *v, int64_t fallback)
{
    if (v->type == JV_INT)
        return v->integer;
    /* A server's 1e300 must not reach the cast: out of range is undefined behaviour (found
     * by fuzz/fuzz_sse_chunk). NaN fails both comparisons. */
    if (v->type == JV_REAL && v->real >= -9.0e18 && v->real <= 9.0e18)
        return (int64_t)v->real;
    return fallback;
}

/* A server's token count: -1 when absent or null; a value that cannot be a count (negative,
 * fractional, not a number, above SSE_MAX_COUNT) is -1 too, with bad_count set. */
static int64_t count_of(const jv *v, sse_chunk *out)
{
    if (v->type == JV_ABSENT || v->type == JV_NULL)
        return -1;
    const int64_t n = int_or(v, -1);
    if (n < 0 || n > SSE_MAX_COUNT || (v->type == JV_REAL && (double)n != v->real)) {
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
static bool decode_error(const jv_reader *rd, const jv *m, sse_chunk *out)
{
    static const char *const message_key[] = {"message"};
    static const char no_message[] = "error event without a message";
    jv msg = {0};
    if (m[K_ERROR].type == JV_OBJECT)
        rd->members(rd, &m[K_ERROR], message_key, 1, &msg);
    else if (m[K_ERROR].type == JV_STRING)
        msg = m[K_ERROR];
    else if (text_is(rd, &m[K_OBJECT], "error"))
        msg = m[K_MESSAGE];
    else
        return false;
    out->is_error = true;
    if (msg.type == JV_STRING)
        rd->text(rd, &msg, out->error, sizeof out->error);
    else
        copy_str(out->error, sizeof out->error, no_message);
    return true;
}

static void decode_usage(const jv_reader *rd, const jv *usage, sse_chunk *out)
{
    static const char *const keys[] = {"prompt_tokens", "completion_tokens"};
    if (usage->type != JV_OBJECT)
        return;
    jv v[2];
    rd->members(rd, usage, keys, 2, v);
    out->has_usage = true;
    out->prompt_tokens = count_of(&v[0], out);
    out->completion_tokens = count_of(&v[1], out);
}

static void decode_choice(const jv_reader *rd, const jv *choice, sse_chunk *out)
{
    static const char *const keys[] = {"text", "delta", "finish_reason"};
    static const char *const delta_keys[] = {"content", "reasoning_content", "reasoning",
                                             "tool_calls"};
    jv v[3], d[4];
    rd->members(rd, choice, keys, 3, v);
    out->has_choices = true;
    if (nonempty_string(&v[0]))
        out->has_text = true; /* completions */
    if (v[1].type == JV_OBJECT) { /* chat */
        rd->members(rd, &v[1], delta_keys, 4, d);
        if (nonempty_string(&d[0]) || nonempty_string(&d[1]) || nonempty_string(&d[2]) ||
            (d[3].type == JV_ARRAY && d[3].nonempty))
            out->has_text = true;
    }
    if (v[2].type == JV_STRING) {
        rd->text(rd, &v[2], out->finish_reason, sizeof out->finish_reason);
        out->stopped = true;
    }
}

/* llama.cpp's own /completion: {"content": "...", "stop": false} per token, then a final
 * {"content": "", "stop": true, "stop_type": "limit", "tokens_predicted": N, ...}. */
static void decode_llamacpp(const jv_reader *rd, const jv *m, sse_chunk *out)
{
    const bool stop = m[K_STOP].type == JV_TRUE;
    const bool text = nonempty_string(&m[K_CONTENT]);
    out->has_text = text;
    out->has_choices = text || !stop;
    if (m[K_TOKENS_PREDICTED].type == JV_INT) {
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
static void decode_tgi(const jv_reader *rd, const jv *m, sse_chunk *out)
{
    static const char *const keys[] = {"finish_reason", "generated_tokens"};
    out->has_choices = true;
    out->has_text = true;
    if (m[K_DETAILS].type == JV_OBJECT) {
        jv v[2];
        rd->members(rd, &m[K_DETAILS], keys, 2, v);
        if (v[0].type == JV_STRING) {
            if (text_is(rd, &v[0], "eos_token"))
                copy_str(out->finish_reason, sizeof out->finish_reason, "stop");
            else
                rd->text(rd, &v[0], out->finish_reason, sizeof out->finish_reason);
            out->stopped = true;
        }
        if (v[1].type == JV_INT) {
            out->has_usage = true;
            out->completion_tokens = count_of(&v[1], out);
        }
    }
    if (m[K_GENERATED_TEXT].type != JV_ABSENT && m[K_GENERATED_TEXT].type != JV_NULL)
        out->stopped = true;
}

/* The rule, given the root object's members (root_keys). */
static void decode_members(const jv_reader *rd, const jv *m, const sse_event *ev,
                           bool error_event, sse_chunk *out)
{
    if (decode_error(rd, m, out) || error_event) {
        if (!out->is_error) {
            out->is_error = true;
            copy_str(out->error, sizeof out->error, ev->data);
        }
        return;
    }
    if (m[K_STALLSCOPE].type == JV_OBJECT) {
        static const char *const keys[] = {"emit_ns", "step"};
        jv v[2];
        rd->members(rd, &m[K_STALLSCOPE], keys, 2, v);
        out->emit_ns = int_or(&v[0], -1);
        out->step = int_or(&v[1], -1);
    }
    decode_usage(rd, &m[K_USAGE], out);
    if (m[K_CHOICES].type == JV_ARRAY) {
        if (m[K_CHOICES].nonempty) {
            jv choice;
            rd->first(rd, &m[K_CHOICES], &choice);
            decode_choice(rd, &choice, out);
        }
    } else if (m[K_CONTENT].type == JV_STRING) {
        decode_llamacpp(rd, m, out);
    } else if (m[K_TOKEN].type == JV_OBJECT) {
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

/* Both decoders start here: out reset; true when the event is [DONE] (decoded). */
static bool decode_start(const sse_event *ev, sse_chunk *out, bool *error_event)
{
    memset(out, 0, sizeof *out);
    out->prompt_tokens = -1;
    out->completion_tokens = -1;
    out->emit_ns = -1;
    out->step = -1;
    *error_event = ev->type && strcmp(ev->type, "error") == 0;
    out->done = is_done(ev->data, ev->data_len);
    return out->done;
}

/* The data is not a JSON object: an "event: error" with a plain-text message, or a
 * malformed stream. */
static int not_an_object(const sse_event *ev, bool error_event, const char *why, sse_chunk *out,
                         char *err)
{
    if (error_event) {
        out->is_error = true;
        copy_str(out->error, sizeof out->error, ev->data);
        return 0;
    }
    return err_set(err, "malformed SSE chunk (%s): %.60s", why, ev->data);
}

/* ---- the reference reader: jansson ---- */

static jv jansson_value(const json_t *v)
{
    jv out = {0};
    out.at = v;
    switch (v ? json_typeof(v) : JSON_NULL) {
    case JSON_OBJECT:
        out.type = JV_OBJECT;
        break;
    case JSON_ARRAY:
        out.type = JV_ARRAY;
        out.nonempty = json_array_size(v) > 0;
        break;
    case JSON_STRING:
        out.type = JV_STRING;
        out.nonempty = json_string_length(v) > 0;
        break;
    case JSON_INTEGER:
        out.type = JV_INT;
        out.integer = (int64_t)json_integer_value(v);
        break;
    case JSON_REAL:
        out.type = JV_REAL;
        out.real = json_real_value(v);
        break;
    case JSON_TRUE:
        out.type = JV_TRUE;
        break;
    case JSON_FALSE:
        out.type = JV_FALSE;
        break;
    case JSON_NULL:
        out.type = v ? JV_NULL : JV_ABSENT;
        break;
    }
    return out;
}

static void jansson_members(const jv_reader *rd, const jv *obj, const char *const *names, int n,
                            jv *out)
{
    (void)rd;
    for (int i = 0; i < n; i++)
        out[i] = jansson_value(obj->type == JV_OBJECT ? json_object_get(obj->at, names[i]) : NULL);
}

static void jansson_first(const jv_reader *rd, const jv *array, jv *out)
{
    (void)rd;
    *out = jansson_value(array->type == JV_ARRAY ? json_array_get(array->at, 0) : NULL);
}

static void jansson_text(const jv_reader *rd, const jv *s, char *buf, size_t size)
{
    (void)rd;
    copy_str(buf, size, json_string_value(s->at));
}

int sse_decode_chunk_jansson(const sse_event *ev, sse_chunk *out, char *err)
{
    bool error_event;
    if (decode_start(ev, out, &error_event))
        return 0;
    json_error_t jerr;
    json_t *root = json_loadb(ev->data, ev->data_len, 0, &jerr);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return not_an_object(ev, error_event, root ? "not an object" : jerr.text, out, err);
    }
    static const jv_reader reader = {NULL, jansson_members, jansson_first, jansson_text};
    const jv top = jansson_value(root);
    jv m[K_ROOT_KEYS];
    reader.members(&reader, &top, root_keys, K_ROOT_KEYS, m);
    decode_members(&reader, m, ev, error_event, out);
    json_decref(root);
    return 0;
}

/* ---- the client's reader: an in-place scanner ---- */

#define JSON_MAX_DEPTH 2048 /* jansson's JSON_PARSER_MAX_DEPTH: every value counts one */

/* Bytes a string holds as they are: not '"', '\\', a control character or UTF-8. */
static const unsigned char plain_byte[256] = {
#define P4(x) x, x, x, x
#define P16(x) P4(x), P4(x), P4(x), P4(x)
    P16(0), P16(0),                                  /* 0x00-0x1f: control characters */
    1, 1, 0, P4(1), 1,                               /* 0x20-0x27: '"' (0x22) is not */
    P4(1), P4(1),                                    /* 0x28-0x2f */
    P16(1),                                          /* 0x30-0x3f */
    P16(1),                                          /* 0x40-0x4f */
    P4(1), P4(1), P4(1), 0, 1, 1, 1,                 /* 0x50-0x5f: '\\' (0x5c) is not */
    P16(1), P16(1),                                  /* 0x60-0x7f */
    P16(0), P16(0), P16(0), P16(0), P16(0), P16(0), P16(0), P16(0), /* 0x80-0xff: UTF-8 */
#undef P16
#undef P4
};

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

static bool is_digit(const char *p, const char *end)
{
    return p < end && *p >= '0' && *p <= '9';
}

/* Four hex digits at p, or -1. */
static int32_t hex4(const char *p, const char *end)
{
    if (end - p < 4)
        return -1;
    int32_t value = 0;
    for (int i = 0; i < 4; i++) {
        const char c = p[i];
        value <<= 4;
        if (c >= '0' && c <= '9')
            value += c - '0';
        else if (c >= 'a' && c <= 'f')
            value += c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            value += c - 'A' + 10;
        else
            return -1;
    }
    return value;
}

size_t sse_utf8_length(const unsigned char *p, const unsigned char *end)
{
    const unsigned u = p[0];
    size_t count;
    int32_t value;
    if (u >= 0xC2 && u <= 0xDF)
        count = 2, value = (int32_t)(u & 0x1F);
    else if (u >= 0xE0 && u <= 0xEF)
        count = 3, value = (int32_t)(u & 0x0F);
    else if (u >= 0xF0 && u <= 0xF4)
        count = 4, value = (int32_t)(u & 0x07);
    else
        return 0;
    if ((size_t)(end - p) < count)
        return 0;
    for (size_t i = 1; i < count; i++) {
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
        value = (value << 6) + (int32_t)(p[i] & 0x3F);
    }
    if (value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF) ||
        (count == 2 && value < 0x80) || (count == 3 && value < 0x800) ||
        (count == 4 && value < 0x10000))
        return 0;
    return count;
}

/* Whether any of 8 bytes may not be plain (a '"', a '\\', a control character or UTF-8);
 * false means none is. A word at a time: most of a chunk's bytes are in strings. */
static bool word_may_stop(uint64_t x)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    const uint64_t quote = x ^ (ones * '"'), backslash = x ^ (ones * '\\');
    const uint64_t stops = ((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) |
                           (x - ones * 0x20) | x; /* a high bit: a zero, < 0x20, >= 0x80 */
    return (stops & highs) != 0;
}

/* A string at p ('"'): the byte after its closing quote, or NULL when jansson refuses it.
 * *escaped tells whether it holds an escape (its bytes are then not its value). */
static const char *scan_string(const char *p, const char *end, bool *escaped)
{
    p++;
    for (;;) {
        uint64_t word;
        while (end - p >= 8 && (memcpy(&word, p, 8), !word_may_stop(word)))
            p += 8;
        while (p < end && plain_byte[(unsigned char)*p])
            p++;
        if (p >= end)
            return NULL;
        const unsigned char c = (unsigned char)*p;
        if (c == '"')
            return p + 1;
        if (c < 0x20)
            return NULL;
        if (c >= 0x80) {
            const size_t n = sse_utf8_length((const unsigned char *)p, (const unsigned char *)end);
            if (n == 0)
                return NULL;
            p += n;
            continue;
        }
        /* An escape. */
        *escaped = true;
        if (end - p < 2)
            return NULL;
        const char e = p[1];
        if (e != 'u') {
            if (!strchr("\"\\/bfnrt", e) || e == '\0')
                return NULL;
            p += 2;
            continue;
        }
        const int32_t unit = hex4(p + 2, end);
        if (unit <= 0) /* not hex, or \u0000: jansson refuses NUL without JSON_ALLOW_NUL */
            return NULL;
        p += 6;
        if (unit >= 0xDC00 && unit <= 0xDFFF)
            return NULL; /* a low surrogate alone */
        if (unit >= 0xD800 && unit <= 0xDBFF) { /* a high one: its low one must follow */
            if (end - p < 2 || p[0] != '\\' || p[1] != 'u')
                return NULL;
            const int32_t low = hex4(p + 2, end);
            if (low < 0xDC00 || low > 0xDFFF)
                return NULL;
            p += 6;
        }
    }
}

/* The decoded bytes of a string jansson took (at its opening quote) into buf, cut to
 * size - 1 and NUL-terminated; returns the whole decoded length. */
static size_t decode_string(const char *p, const char *end, char *buf, size_t size)
{
    size_t n = 0;
    for (p++; p < end && *p != '"';) {
        char bytes[4];
        size_t len = 1;
        if (*p != '\\') {
            bytes[0] = *p++;
        } else if (p[1] != 'u') {
            static const char from[] = "bfnrt", to[] = "\b\f\n\r\t";
            const char *at = strchr(from, p[1]);
            bytes[0] = at ? to[at - from] : p[1]; /* '"', '\\', '/' stand for themselves */
            p += 2;
        } else {
            int32_t cp = hex4(p + 2, end);
            p += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                cp = ((cp - 0xD800) << 10) + (hex4(p + 2, end) - 0xDC00) + 0x10000;
                p += 6;
            }
            if (cp < 0x80) {
                bytes[0] = (char)cp;
            } else if (cp < 0x800) {
                bytes[0] = (char)(0xC0 | (cp >> 6));
                bytes[1] = (char)(0x80 | (cp & 0x3F));
                len = 2;
            } else if (cp < 0x10000) {
                bytes[0] = (char)(0xE0 | (cp >> 12));
                bytes[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
                bytes[2] = (char)(0x80 | (cp & 0x3F));
                len = 3;
            } else {
                bytes[0] = (char)(0xF0 | (cp >> 18));
                bytes[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
                bytes[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
                bytes[3] = (char)(0x80 | (cp & 0x3F));
                len = 4;
            }
        }
        for (size_t i = 0; i < len; i++, n++)
            if (n + 1 < size)
                buf[n] = bytes[i];
    }
    if (size > 0)
        buf[n < size ? n : size - 1] = '\0';
    return n;
}

/* strtod of a number jansson's grammar took: false when it overflows (jansson refuses
 * those: "real number overflow"). */
static bool real_value(const char *p, size_t len, double *out)
{
    char small[64];
    char *text = len < sizeof small ? small : malloc(len + 1);
    if (!text)
        return false;
    memcpy(text, p, len);
    text[len] = '\0';
    errno = 0;
    const double value = strtod(text, NULL);
    const bool overflow = (value == HUGE_VAL || value == -HUGE_VAL) && errno == ERANGE;
    if (text != small)
        free(text);
    *out = value;
    return !overflow;
}

/* A number at p: the byte after it, or NULL when jansson refuses it. out (may be NULL:
 * only checked) gets its type and value. */
static const char *scan_number(const char *p, const char *end, jv *out)
{
    const char *start = p;
    const bool negative = *p == '-';
    if (negative)
        p++;
    const char *digits = p;
    if (!is_digit(p, end))
        return NULL;
    if (*p == '0') {
        if (is_digit(++p, end))
            return NULL; /* a leading zero */
    } else {
        while (is_digit(p, end))
            p++;
    }
    const int64_t int_digits = digits[0] == '0' ? 0 : (int64_t)(p - digits);
    bool real = false;
    int64_t exponent = 0;
    if (p < end && *p == '.') {
        if (!is_digit(++p, end))
            return NULL;
        while (is_digit(p, end))
            p++;
        real = true;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        const bool exponent_negative = p < end && *p == '-';
        if (p < end && (*p == '-' || *p == '+'))
            p++;
        if (!is_digit(p, end))
            return NULL;
        for (; is_digit(p, end); p++)
            if (exponent < 100000)
                exponent = exponent * 10 + (*p - '0');
        if (exponent_negative)
            exponent = -exponent;
        real = true;
    }
    if (!real) { /* json_int_t: long long, or jansson refuses it ("too big integer") */
        int64_t value = 0; /* accumulated negative: INT64_MIN fits */
        const char *q = digits;
        for (const char *safe = p - digits > 18 ? digits + 18 : p; q < safe; q++)
            value = value * 10 - (*q - '0'); /* 18 digits cannot overflow */
        for (; q < p; q++) {
            const int digit = *q - '0';
            if (value < (INT64_MIN + digit) / 10)
                return NULL;
            value = value * 10 - digit;
        }
        if (!negative && value == INT64_MIN)
            return NULL;
        if (out) {
            out->type = JV_INT;
            out->integer = negative ? value : -value;
        }
        return p;
    }
    /* Below 10^(integer digits + exponent) <= 10^308 a real cannot overflow: no need to
     * convert one nobody reads. */
    if (!out && int_digits + exponent <= 308)
        return p;
    double value;
    if (!real_value(start, (size_t)(p - start), &value))
        return NULL;
    if (out) {
        out->type = JV_REAL;
        out->real = value;
    }
    return p;
}

static const char *scan_literal(const char *p, const char *end, const char *word)
{
    const size_t len = strlen(word);
    return (size_t)(end - p) >= len && memcmp(p, word, len) == 0 ? p + len : NULL;
}

/* One value at p (not white space) at nesting depth `depth`, checked through to its end:
 * the byte after it, or NULL when jansson refuses it. out (may be NULL) describes the
 * value itself (its type; a scalar's value; whether a string or array is non-empty), not
 * what it contains. Iterative: a hostile chunk nested 2,048 deep costs no stack. */
static const char *scan_value(const char *p, const char *end, int depth, jv *out)
{
    unsigned char in_object[JSON_MAX_DEPTH / 8 + 1]; /* a bit per open container */
    int open = 0;                                     /* containers open inside the value */
    jv scratch;
    if (!out)
        out = &scratch;
    memset(out, 0, sizeof *out);
    out->at = p;
    out->depth = depth;
    bool escaped;
value:
    if (depth + open > JSON_MAX_DEPTH || p >= end)
        return NULL;
    switch (*p) {
    case '{':
    case '[': {
        const bool object = *p == '{';
        p = skip_ws(p + 1, end);
        if (open == 0)
            out->type = object ? JV_OBJECT : JV_ARRAY;
        if (p < end && *p == (object ? '}' : ']')) {
            p++;
            goto after;
        }
        if (open == 0)
            out->nonempty = true;
        if (object)
            in_object[open / 8] |= (unsigned char)(1u << (open % 8));
        else
            in_object[open / 8] &= (unsigned char)~(1u << (open % 8));
        open++;
        if (object)
            goto key;
        goto value;
    }
    case '"': {
        const char *start = p;
        if (!(p = scan_string(p, end, &escaped)))
            return NULL;
        if (open == 0) {
            out->type = JV_STRING;
            out->nonempty = p - start > 2;
        }
        goto after;
    }
    case 't':
        if (open == 0)
            out->type = JV_TRUE;
        p = scan_literal(p, end, "true");
        break;
    case 'f':
        if (open == 0)
            out->type = JV_FALSE;
        p = scan_literal(p, end, "false");
        break;
    case 'n':
        if (open == 0)
            out->type = JV_NULL;
        p = scan_literal(p, end, "null");
        break;
    default:
        if (*p != '-' && !(*p >= '0' && *p <= '9'))
            return NULL;
        p = scan_number(p, end, open == 0 && out != &scratch ? out : NULL);
        break;
    }
    if (!p)
        return NULL;
after:
    if (open == 0)
        return p;
    p = skip_ws(p, end);
    if (p >= end)
        return NULL;
    {
        const bool object = (in_object[(open - 1) / 8] >> ((open - 1) % 8)) & 1u;
        if (*p == ',') {
            p = skip_ws(p + 1, end);
            if (object)
                goto key;
            goto value;
        }
        if (*p != (object ? '}' : ']'))
            return NULL;
        p++;
        open--;
        goto after;
    }
key:
    if (p >= end || *p != '"' || !(p = scan_string(p, end, &escaped)))
        return NULL;
    p = skip_ws(p, end);
    if (p >= end || *p != ':')
        return NULL;
    p = skip_ws(p + 1, end);
    goto value;
}

/* Which of names[0, n) the key at p (its opening quote; `next` is the byte after it) is,
 * or -1. */
static int key_index(const char *p, const char *next, const char *end, bool escaped,
                     const char *const *names, int n)
{
    char decoded[32];
    const char *key = p + 1;
    size_t len = (size_t)(next - p) - 2;
    if (escaped) {
        len = decode_string(p, end, decoded, sizeof decoded);
        if (len >= sizeof decoded)
            return -1; /* longer than any name asked for */
        key = decoded;
    }
    for (int i = 0; i < n; i++)
        if (names[i][0] == key[0] && strncmp(names[i], key, len) == 0 && names[i][len] == '\0')
            return i;
    return -1;
}

/* An object at p ('{') at nesting depth `depth`, checked through to its end; its members
 * names[0, n) into out (the last of duplicates, as jansson keeps it; JV_ABSENT when
 * missing). Returns the byte after it, or NULL when jansson refuses it. */
static const char *scan_members(const char *p, const char *end, int depth,
                                const char *const *names, int n, jv *out)
{
    memset(out, 0, (size_t)n * sizeof *out);
    if (depth > JSON_MAX_DEPTH)
        return NULL;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}')
        return p + 1;
    for (;;) {
        bool escaped = false;
        const char *key = p;
        if (p >= end || *p != '"' || !(p = scan_string(p, end, &escaped)))
            return NULL;
        const int which = key_index(key, p, end, escaped, names, n);
        p = skip_ws(p, end);
        if (p >= end || *p != ':')
            return NULL;
        p = skip_ws(p + 1, end);
        if (!(p = scan_value(p, end, depth + 1, which >= 0 ? &out[which] : NULL)))
            return NULL;
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        return p < end && *p == '}' ? p + 1 : NULL;
    }
}

static void scan_reader_members(const jv_reader *rd, const jv *obj, const char *const *names,
                                int n, jv *out)
{
    if (obj->type == JV_OBJECT)
        scan_members(obj->at, rd->end, obj->depth, names, n, out); /* checked already */
    else
        memset(out, 0, (size_t)n * sizeof *out);
}

static void scan_reader_first(const jv_reader *rd, const jv *array, jv *out)
{
    memset(out, 0, sizeof *out);
    if (array->type == JV_ARRAY && array->nonempty)
        scan_value(skip_ws((const char *)array->at + 1, rd->end), rd->end, array->depth + 1, out);
}

static void scan_reader_text(const jv_reader *rd, const jv *s, char *buf, size_t size)
{
    decode_string(s->at, rd->end, buf, size);
}

int sse_decode_chunk(const sse_event *ev, sse_chunk *out, char *err)
{
    bool error_event;
    if (decode_start(ev, out, &error_event))
        return 0;
    const char *end = ev->data + ev->data_len;
    const char *p = skip_ws(ev->data, end);
    jv m[K_ROOT_KEYS];
    const char *after;
    const bool object = p < end && *p == '{';
    if (object)
        after = scan_members(p, end, 1, root_keys, K_ROOT_KEYS, m); /* checks it all */
    else /* jansson takes an array at the top (then it is not an object) and nothing else */
        after = p < end && *p == '[' ? scan_value(p, end, 1, NULL) : NULL;
    if (!after || skip_ws(after, end) != end)
        return not_an_object(ev, error_event, "not JSON", out, err);
    if (!object)
        return not_an_object(ev, error_event, "not an object", out, err);
    const jv_reader reader = {end, scan_reader_members, scan_reader_first, scan_reader_text};
    decode_members(&reader, m, ev, error_event, out);
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
    c->by_kind[v]++;
}

bool sse_counter_ended(sse_counter *c)
{
    if (!c->done)
        return false;
    violation(c, SSE_VIOLATION_AFTER_DONE);
    return true;
}

/* The most completion tokens the stream can have shown once this chunk is counted
 * (INT64_MAX: no bound), the rule of sse_counter_add. */
static int64_t stream_bound(const sse_counter *c, const sse_chunk *chunk)
{
    const bool text = chunk->has_choices && chunk->has_text;
    const bool usage_kept_up = c->delivered == 0 || c->usage_completion >= c->delivered;
    if (text && usage_kept_up)
        return INT64_MAX;
    return c->delivered + (text ? 1 : 0) + SSE_STOP_TOKEN_SLACK;
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
    else if (chunk->completion_tokens > stream_bound(c, chunk))
        *why = SSE_VIOLATION_ABOVE_STREAM;
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
    case SSE_VIOLATION_ABOVE_STREAM:
        return "usage.completion_tokens above the tokens streamed";
    default:
        return "none";
    }
}

const char *sse_violation_name(sse_violation v)
{
    static const char *const names[SSE_VIOLATION_KINDS] = {
        [SSE_VIOLATION_NONE] = "none",
        [SSE_VIOLATION_AFTER_DONE] = "after_done",
        [SSE_VIOLATION_BAD_COUNT] = "bad_count",
        [SSE_VIOLATION_COUNT_BACKWARDS] = "count_backwards",
        [SSE_VIOLATION_PAST_MAX] = "past_max",
        [SSE_VIOLATION_ABOVE_STREAM] = "above_stream",
    };
    return v > SSE_VIOLATION_NONE && v < SSE_VIOLATION_KINDS ? names[v] : names[0];
}
