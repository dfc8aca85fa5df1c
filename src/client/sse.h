/* sse — Server-Sent Events, in two pure parts.
 *
 * 1. The splitter (picohttpparser style): caller-owned state, fed whatever bytes a read
 *    returned; it hands back one complete event at a time. WHATWG framing: lines end in
 *    CRLF, LF or CR (a CRLF split across two reads is one line end); "data:" lines are
 *    joined with "\n"; a blank line ends the event; lines starting with ':' are comments
 *    (keep-alives); "event:" sets the type; "id:"/"retry:" are ignored; an event without
 *    data is not dispatched. One extension: llama.cpp's server reports errors as a line
 *    "error: {...}", taken as data of an event of type "error". The only allocation is the
 *    event buffer growing geometrically (never per byte), up to max_event bytes.
 *
 * 2. The chunk decoder: one event's data -> what a load generator needs from it, for the
 *    chunk shapes of OpenAI completions ("choices[].text") and chat ("choices[].delta"),
 *    vLLM / SGLang (the same, plus usage in every chunk with continuous_usage_stats),
 *    llama.cpp's native /completion ("content", "stop", "tokens_predicted"), TGI ("token"),
 *    usage-only chunks, "[DONE]", error events, and stallscope's own optional
 *    "stallscope": {"emit_ns", "step"}. It does not count tokens: that needs the stream's
 *    history (see sse_count_tokens). */
#ifndef STALLSCOPE_SSE_H
#define STALLSCOPE_SSE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SSE_DEFAULT_MAX_EVENT (1 << 20)

typedef struct sse_parser {
    char *buf;        /* [0, data_len): joined data of the event being built; then the
                         partial line [data_len, data_len + line_len) */
    size_t cap;
    size_t data_len;
    size_t line_len;
    size_t max_event; /* an event (or line) larger than this is an error */
    bool has_data;    /* at least one data line in the current event */
    bool after_cr;    /* the previous byte was a CR: a LF right after it is not a new line */
    bool dispatched;  /* buf holds an event handed out last call: reset before going on */
    char event_type[32];
} sse_parser;

typedef struct sse_event {
    const char *data; /* NUL-terminated; valid until the next sse_parse / sse_parser_free */
    size_t data_len;
    const char *type; /* "" when the event had no "event:" line */
} sse_event;

enum { SSE_NEED_MORE = 0, SSE_EVENT = 1, SSE_ERROR = -1 };

/* max_event 0 means SSE_DEFAULT_MAX_EVENT. */
void sse_parser_init(sse_parser *p, size_t max_event);
void sse_parser_free(sse_parser *p);
/* Forget everything (a new response on the same parser); keeps the buffer. */
void sse_parser_reset(sse_parser *p);

/* Feed in[0, len). Returns SSE_EVENT with *consumed bytes used (the rest is still to be
 * fed) and *ev filled; SSE_NEED_MORE when all len bytes were used without completing an
 * event; SSE_ERROR when an event grew beyond max_event or memory ran out (the stream is
 * unusable). Typical use:
 *     while (len > 0) { r = sse_parse(p, in, len, &used, &ev); if (r < 0) fail;
 *                       in += used; len -= used; if (r == SSE_EVENT) handle(&ev); } */
int sse_parse(sse_parser *p, const char *in, size_t len, size_t *consumed, sse_event *ev);
/* True when bytes of an unfinished event are buffered (a stream cut mid-event). */
bool sse_parser_pending(const sse_parser *p);

/* ---- chunk decoder ---------------------------------------------------------------- */

typedef struct sse_chunk {
    bool done;         /* "data: [DONE]" */
    bool is_error;     /* an error event or an {"error": ...} body */
    char error[160];   /* its message */
    bool has_choices;  /* a generation chunk (choices[] non-empty, or a native token chunk) */
    bool has_text;     /* it carries non-empty generated text (or a token) */
    bool has_usage;    /* usage (or native counters) present */
    int64_t prompt_tokens;     /* -1 when absent */
    int64_t completion_tokens; /* -1 when absent */
    char finish_reason[16];    /* "" when none; "length", "stop", ... */
    bool stopped;              /* the server says the answer is over (finish or stop) */
    int64_t emit_ns;           /* stallscope's emit time, CLOCK_MONOTONIC ns; -1 absent */
    int64_t step;              /* stallscope's engine step index; -1 absent */
} sse_chunk;

/* Decode one event. 0, or -1 when data is not JSON (err says so: a malformed stream).
 * An error event decodes fine: 0 with is_error set. */
int sse_decode_chunk(const sse_event *ev, sse_chunk *out, char *err);

/* Tokens that one chunk delivered, given the completion tokens known before it (*so_far,
 * updated). With usage in a generation chunk (continuous_usage_stats) it is the increase of
 * usage.completion_tokens, so an event carrying k tokens counts k; without usage, one per
 * chunk with text. A usage-only chunk delivers none. */
int sse_count_tokens(const sse_chunk *c, int64_t *so_far);

#endif
