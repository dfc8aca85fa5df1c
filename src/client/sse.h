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
 *    "stallscope": {"emit_ns", "step"}. It reads the chunk in place, in one pass, and
 *    builds nothing (no DOM); a jansson decoder beside it is the reference the tests and
 *    the fuzzer hold it to. It does not count tokens: that needs the stream's history (see
 *    sse_counter). */
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
    bool bad_count;    /* a count that cannot be one (negative, fractional, not a number, above
                          SSE_MAX_COUNT): it is left at -1, and the counter calls it a violation */
    int64_t prompt_tokens;     /* -1 when absent (or bad) */
    int64_t completion_tokens; /* -1 when absent (or bad) */
    char finish_reason[16];    /* "" when none; "length", "stop", ... */
    bool stopped;              /* the server says the answer is over (finish or stop) */
    int64_t emit_ns;           /* stallscope's emit time, CLOCK_MONOTONIC ns; -1 absent */
    int64_t step;              /* stallscope's engine step index; -1 absent */
} sse_chunk;

/* Decode one event. 0, or -1 when data is not JSON (err says so: a malformed stream).
 * An error event decodes fine: 0 with is_error set. The scanner: it accepts the JSON
 * jansson 2.14 accepts and looks only at the members above (of duplicate keys, the last),
 * so it gives what sse_decode_chunk_jansson gives (err's wording aside). One exception:
 * data with a NUL byte is never JSON and always refused, where jansson's lexer drops one
 * NUL right after a number or a literal ({"x":1<NUL>} loads as {"x":1}). */
int sse_decode_chunk(const sse_event *ev, sse_chunk *out, char *err);
/* The same rule over a jansson DOM: the reference (tests, fuzz/fuzz_sse_chunk). */
int sse_decode_chunk_jansson(const sse_event *ev, sse_chunk *out, char *err);

/* ---- token counting --------------------------------------------------------------- */

/* The largest count a server may report: token counts are int32 in the token log. */
#define SSE_MAX_COUNT INT32_MAX

/* What a server sent that cannot be true. The event (or the count in it) is ignored, never
 * taken as tokens, and counted; docs/client.md lists them. */
typedef enum sse_violation {
    SSE_VIOLATION_NONE = 0,
    SSE_VIOLATION_AFTER_DONE,      /* any event after "data: [DONE]" (another [DONE] too) */
    SSE_VIOLATION_BAD_COUNT,       /* a usage count that is not a count (see bad_count) */
    SSE_VIOLATION_COUNT_BACKWARDS, /* usage.completion_tokens below an earlier one */
    SSE_VIOLATION_PAST_MAX,        /* usage.completion_tokens above the request's max_tokens,
                                      or a token once the request has all max_tokens */
    SSE_VIOLATION_ABOVE_STREAM,    /* usage.completion_tokens above the tokens streamed (see
                                      sse_counter_add) */
    SSE_VIOLATION_KINDS
} sse_violation;

/* One stream's accounting: what it delivered, what its usage said, whether it ended. */
typedef struct sse_counter {
    int64_t max_tokens;        /* what the request asked for; <= 0: unknown, unbounded */
    int64_t delivered;         /* completion tokens delivered so far, <= max_tokens */
    int64_t usage_completion;  /* the last believable usage.completion_tokens, -1 none */
    int64_t usage_prompt;      /* the last believable usage.prompt_tokens, -1 none */
    bool done;                 /* "[DONE]" seen */
    int64_t violations;        /* events ignored or corrected, all kinds */
    int64_t by_kind[SSE_VIOLATION_KINDS]; /* the same by kind ([NONE] stays 0) */
    sse_violation first;       /* the first violation's kind, NONE without */
} sse_counter;

void sse_counter_init(sse_counter *c, int64_t max_tokens);
/* True once the stream sent [DONE]: then every event is a violation (counted here) and is
 * not to be decoded further. */
bool sse_counter_ended(sse_counter *c);
/* Tokens one decoded chunk delivered. With usage in a generation chunk
 * (continuous_usage_stats) it is the increase of usage.completion_tokens, so an event
 * carrying k tokens counts k; without usage (or with a count the counter refuses), one per
 * chunk with text. A usage-only chunk delivers none. Never more than max_tokens in all.
 * A usage is believed only as far as the stream shows it: a chunk with text may carry
 * several tokens only in a stream whose usage counted every event before it (vLLM's
 * continuous usage, where a held-back token comes with the next); any other chunk's usage
 * (a usage-only or text-less chunk, or a first count after events counted one each) may
 * pass the tokens delivered by at most this chunk's text and SSE_STOP_TOKEN_SLACK. More
 * is SSE_VIOLATION_ABOVE_STREAM: the count is refused, the chunk counts as without usage. */
int sse_counter_add(sse_counter *c, const sse_chunk *chunk);
/* A usage may count this many tokens the stream never showed: the stop token (EOS), which
 * streams no text. */
#define SSE_STOP_TOKEN_SLACK 1
/* The request's completion tokens: its last believable usage, or what was delivered when
 * that is more (a refused count leaves the usage behind the tokens taken). At most the
 * tokens delivered + SSE_STOP_TOKEN_SLACK. */
int64_t sse_counter_completion(const sse_counter *c);
/* "an event after [DONE]", ... for messages. */
const char *sse_violation_text(sse_violation v);
/* "after_done", "bad_count", "count_backwards", "past_max", "above_stream": the keys of
 * fidelity.json's "violations_by_kind" ("none" for NONE). */
const char *sse_violation_name(sse_violation v);

/* The length of the UTF-8 sequence at p (end - p > 0, *p >= 0x80) when jansson takes it
 * (utf8_check_first/utf8_check_full: no stray continuation byte, no overlong form, no
 * surrogate, nothing past U+10FFFF), else 0. The scanner's rule, and the one error texts
 * are cleaned by (stream_reply_fail). */
size_t sse_utf8_length(const unsigned char *p, const unsigned char *end);

#endif
