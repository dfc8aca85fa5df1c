/* sse — the Server-Sent Events splitter (picohttpparser style): caller-owned state, fed
 * whatever bytes a read returned; it hands back one complete event at a time. WHATWG
 * framing: lines end in CRLF, LF or CR (a CRLF split across two reads is one line end);
 * "data:" lines are joined with "\n"; a blank line ends the event; lines starting with ':'
 * are comments (keep-alives); "event:" sets the type; "id:"/"retry:" are ignored; an event
 * without data is not dispatched. One extension: llama.cpp's server reports errors as a
 * line "error: {...}", taken as data of an event of type "error". The only allocation is
 * the event buffer growing geometrically (never per byte), up to max_event bytes. What an
 * event's data says is the chunk decoder's (chunk.h). */
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

#endif
