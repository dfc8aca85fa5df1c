#include "client/sse.h"

#include <stdlib.h>
#include <string.h>

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
