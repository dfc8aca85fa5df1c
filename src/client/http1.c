#include "client/http1.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MAX_CHUNK_LINE 4096      /* a chunk-size line with its extensions, a trailer line */
#define MAX_CHUNK_DIGITS 15      /* 2^60 bytes: no real chunk, and no overflow */

static ssize_t head_error(http1_response *out, const char *why)
{
    snprintf(out->error, sizeof out->error, "%s", why);
    return HTTP1_ERROR;
}

/* Where the head ends: just past the first empty line (CRLF CRLF, or bare LFs, which RFC
 * 9112 2.2 lets a recipient accept). 0 when it has not arrived. */
static size_t head_end(const char *in, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (in[i] != '\n')
            continue;
        if (i + 1 < len && in[i + 1] == '\n')
            return i + 2;
        if (i + 2 < len && in[i + 1] == '\r' && in[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

static bool is_tchar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* Does the comma-separated list value[0, len) hold token (case-insensitive)? */
static bool list_has(const char *value, size_t len, const char *token)
{
    const size_t tlen = strlen(token);
    size_t i = 0;
    while (i < len) {
        while (i < len && (value[i] == ' ' || value[i] == '\t' || value[i] == ','))
            i++;
        size_t start = i;
        while (i < len && value[i] != ',')
            i++;
        size_t end = i;
        while (end > start && (value[end - 1] == ' ' || value[end - 1] == '\t'))
            end--;
        if (end - start == tlen && strncasecmp(value + start, token, tlen) == 0)
            return true;
    }
    return false;
}

/* The last member of a comma-separated list is token? (Transfer-Encoding: gzip, chunked) */
static bool list_ends_with(const char *value, size_t len, const char *token)
{
    while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t' || value[len - 1] == ','))
        len--;
    size_t start = len;
    while (start > 0 && value[start - 1] != ',')
        start--;
    while (start < len && (value[start] == ' ' || value[start] == '\t'))
        start++;
    const size_t tlen = strlen(token);
    return len - start == tlen && strncasecmp(value + start, token, tlen) == 0;
}

/* A Content-Length value: digits, or a list of equal digit strings (RFC 9110 8.6). */
static int parse_length(const char *value, size_t len, int64_t *out)
{
    int64_t first = -1;
    size_t i = 0;
    while (i < len) {
        while (i < len && (value[i] == ' ' || value[i] == '\t'))
            i++;
        int64_t n = 0;
        size_t digits = 0;
        while (i < len && value[i] >= '0' && value[i] <= '9') {
            if (++digits > 18)
                return -1;
            n = n * 10 + (value[i++] - '0');
        }
        while (i < len && (value[i] == ' ' || value[i] == '\t'))
            i++;
        if (digits == 0 || (i < len && value[i] != ','))
            return -1;
        if (first >= 0 && n != first)
            return -1;
        first = n;
        if (i < len)
            i++; /* the comma */
    }
    if (first < 0)
        return -1;
    *out = first;
    return 0;
}

/* A field's value into a fixed buffer, cut to its size. */
static void keep_value(char *dst, size_t size, const char *value, size_t len)
{
    size_t n = len < size - 1 ? len : size - 1;
    memcpy(dst, value, n);
    dst[n] = '\0';
}

ssize_t http1_parse_head(const char *in, size_t len, http1_response *out)
{
    memset(out, 0, sizeof *out);
    out->content_length = -1;
    /* Only look as far as a head may go: a peer sending megabytes without a blank line is
     * refused as soon as the limit is passed, never scanned again and again. */
    size_t end = head_end(in, len < HTTP1_MAX_HEAD ? len : HTTP1_MAX_HEAD);
    if (end == 0) {
        if (len >= HTTP1_MAX_HEAD)
            return head_error(out, "response head larger than 64 KiB");
        /* Refuse early what cannot become a response head. */
        static const char prefix[] = "HTTP/1.";
        size_t n = len < sizeof prefix - 1 ? len : sizeof prefix - 1;
        if (memcmp(in, prefix, n) != 0)
            return head_error(out, "not an HTTP/1.x response");
        return HTTP1_NEED_MORE;
    }
    /* Status line: HTTP/1.x SP 3DIGIT [SP reason] */
    if (end < 12 || memcmp(in, "HTTP/1.", 7) != 0 || in[7] < '0' || in[7] > '9' || in[8] != ' ')
        return head_error(out, "not an HTTP/1.x status line");
    out->minor_version = in[7] - '0';
    for (int i = 9; i < 12; i++)
        if (in[i] < '0' || in[i] > '9')
            return head_error(out, "status code is not three digits");
    out->status = (in[9] - '0') * 100 + (in[10] - '0') * 10 + (in[11] - '0');
    if (out->status < 100)
        return head_error(out, "status code below 100");
    if (in[12] != ' ' && in[12] != '\r' && in[12] != '\n')
        return head_error(out, "status code is not three digits");
    size_t i = 12;
    while (i < end && in[i] != '\n')
        i++;
    i++; /* past the status line's LF */

    bool has_length = false, chunked = false, has_te = false, conn_close = false,
         conn_keep = false;
    int64_t length = -1;
    while (i < end) {
        size_t line = i;
        while (i < end && in[i] != '\n')
            i++;
        size_t line_end = i; /* at the LF */
        i++;
        if (line_end > line && in[line_end - 1] == '\r')
            line_end--;
        if (line_end == line)
            break; /* the blank line */
        if (in[line] == ' ' || in[line] == '\t')
            return head_error(out, "obsolete line folding in a header field");
        size_t colon = line;
        while (colon < line_end && is_tchar(in[colon]))
            colon++;
        if (colon == line || colon == line_end || in[colon] != ':')
            return head_error(out, "malformed header field");
        const char *name = in + line;
        size_t name_len = colon - line;
        size_t v = colon + 1, v_end = line_end;
        while (v < v_end && (in[v] == ' ' || in[v] == '\t'))
            v++;
        while (v_end > v && (in[v_end - 1] == ' ' || in[v_end - 1] == '\t'))
            v_end--;
        for (size_t k = v; k < v_end; k++)
            if ((unsigned char)in[k] < 0x20 && in[k] != '\t')
                return head_error(out, "control character in a header value");
        const char *value = in + v;
        size_t value_len = v_end - v;
#define NAME_IS(s) (name_len == sizeof(s) - 1 && strncasecmp(name, s, name_len) == 0)
        if (NAME_IS("content-length")) {
            int64_t n;
            if (parse_length(value, value_len, &n) != 0 || (has_length && n != length))
                return head_error(out, "invalid Content-Length");
            has_length = true;
            length = n;
        } else if (NAME_IS("transfer-encoding")) {
            has_te = true;
            /* Only the last coding decides whether the body is chunked (RFC 9112 6.3). */
            chunked = list_ends_with(value, value_len, "chunked");
        } else if (NAME_IS("connection")) {
            conn_close |= list_has(value, value_len, "close");
            conn_keep |= list_has(value, value_len, "keep-alive");
        } else if (NAME_IS("retry-after")) {
            keep_value(out->retry_after, sizeof out->retry_after, value, value_len);
        } else if (NAME_IS("location")) {
            keep_value(out->location, sizeof out->location, value, value_len);
        } else if (NAME_IS("content-encoding")) {
            keep_value(out->content_encoding, sizeof out->content_encoding, value, value_len);
        } else if (NAME_IS("content-type")) {
            keep_value(out->content_type, sizeof out->content_type, value, value_len);
        }
#undef NAME_IS
    }

    out->keep_alive = out->minor_version >= 1 ? !conn_close : (conn_keep && !conn_close);
    if (out->status < 200 || out->status == 204 || out->status == 304) {
        out->framing = HTTP1_BODY_NONE;
    } else if (has_te) {
        /* Transfer-Encoding overrides Content-Length; both at once is how requests are
         * smuggled, so the connection is not reused after it. */
        out->framing = chunked ? HTTP1_BODY_CHUNKED : HTTP1_BODY_UNTIL_CLOSE;
        if (!chunked || has_length)
            out->keep_alive = false;
    } else if (has_length) {
        out->framing = HTTP1_BODY_LENGTH;
        out->content_length = length;
    } else {
        out->framing = HTTP1_BODY_UNTIL_CLOSE;
        out->keep_alive = false;
    }
    return (ssize_t)end;
}

/* ---- body ----------------------------------------------------------------------------- */

enum {
    S_SIZE,      /* chunk size digits */
    S_SIZE_REST, /* after the digits: whitespace, extensions, up to the line end */
    S_SIZE_LF,   /* a CR ended the size line: its LF */
    S_DATA,      /* chunk (or whole-body) bytes */
    S_DATA_CR,   /* the CRLF after a chunk's data */
    S_DATA_LF,
    S_TRAILER,   /* trailer lines after the last chunk, until an empty one */
    S_TRAILER_LF,
    S_DONE
};

void http1_body_init(http1_body *b, const http1_response *head)
{
    memset(b, 0, sizeof *b);
    b->framing = head->framing;
    switch (head->framing) {
    case HTTP1_BODY_NONE:
        b->state = S_DONE;
        break;
    case HTTP1_BODY_LENGTH:
        b->remaining = (uint64_t)head->content_length;
        b->state = b->remaining ? S_DATA : S_DONE;
        break;
    case HTTP1_BODY_CHUNKED:
        b->state = S_SIZE;
        break;
    case HTTP1_BODY_UNTIL_CLOSE:
        b->state = S_DATA;
        break;
    }
    b->done = b->state == S_DONE;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The size line ended: data next, or the trailer after the last (zero) chunk. */
static void size_line_done(http1_body *b)
{
    b->line_len = 0;
    b->state = b->remaining ? S_DATA : S_TRAILER;
    b->size_digits = 0;
}

int http1_body_feed(http1_body *b, const char *in, size_t len, size_t *consumed,
                    const char **data, size_t *data_len)
{
    *consumed = 0;
    *data = NULL;
    *data_len = 0;
    size_t i = 0;
    while (b->state != S_DONE && i < len) {
        const char c = in[i];
        switch (b->state) {
        case S_DATA: {
            size_t n = len - i;
            if (b->framing != HTTP1_BODY_UNTIL_CLOSE && n > b->remaining)
                n = (size_t)b->remaining;
            *data = in + i;
            *data_len = n;
            i += n;
            if (b->framing != HTTP1_BODY_UNTIL_CLOSE) {
                b->remaining -= n;
                if (b->remaining == 0)
                    b->state = b->framing == HTTP1_BODY_CHUNKED ? S_DATA_CR : S_DONE;
            }
            b->done = b->state == S_DONE;
            *consumed = i;
            return HTTP1_BODY_DATA;
        }
        case S_SIZE: {
            int h = hex_value(c);
            if (h >= 0) {
                if (++b->size_digits > MAX_CHUNK_DIGITS)
                    return HTTP1_ERROR;
                b->remaining = b->remaining * 16 + (uint64_t)h;
            } else if (b->size_digits == 0) {
                return HTTP1_ERROR;
            } else if (c == '\r') {
                b->state = S_SIZE_LF;
            } else if (c == '\n') {
                size_line_done(b);
            } else if (c == ';' || c == ' ' || c == '\t') {
                b->state = S_SIZE_REST;
            } else {
                return HTTP1_ERROR;
            }
            break;
        }
        case S_SIZE_REST:
            /* Chunk extensions (and whitespace before them) are skipped, bounded. */
            if (c == '\r')
                b->state = S_SIZE_LF;
            else if (c == '\n')
                size_line_done(b);
            else if ((unsigned char)c < 0x20 && c != '\t')
                return HTTP1_ERROR;
            else if (++b->line_len > MAX_CHUNK_LINE)
                return HTTP1_ERROR;
            break;
        case S_SIZE_LF:
            if (c != '\n')
                return HTTP1_ERROR;
            size_line_done(b);
            break;
        case S_DATA_CR:
            if (c == '\r')
                b->state = S_DATA_LF;
            else if (c == '\n')
                b->state = S_SIZE;
            else
                return HTTP1_ERROR;
            break;
        case S_DATA_LF:
            if (c != '\n')
                return HTTP1_ERROR;
            b->state = S_SIZE;
            break;
        case S_TRAILER:
            if (c == '\r') {
                b->state = S_TRAILER_LF;
            } else if (c == '\n') {
                if (b->line_len == 0)
                    b->state = S_DONE;
                b->line_len = 0;
            } else if (++b->line_len > MAX_CHUNK_LINE) {
                return HTTP1_ERROR;
            }
            break;
        case S_TRAILER_LF:
            if (c != '\n')
                return HTTP1_ERROR;
            b->state = b->line_len == 0 ? S_DONE : S_TRAILER;
            b->line_len = 0;
            break;
        }
        i++;
        *consumed = i;
    }
    b->done = b->state == S_DONE;
    *consumed = i;
    return b->done ? HTTP1_BODY_END : HTTP1_BODY_MORE;
}

bool http1_body_complete_at_close(const http1_body *b)
{
    return b->done || b->framing == HTTP1_BODY_UNTIL_CLOSE;
}
