/* reqframe — strict request framing in front of evhttp (see reqframe.h for the rules). */
#include "server/reqframe.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum {
    ST_HEAD,        /* request line and fields, up to the empty line */
    ST_LENGTH_BODY, /* Content-Length bytes */
    ST_CHUNK_LINE,  /* chunk-size [extensions] CRLF */
    ST_CHUNK_DATA,  /* the chunk's bytes */
    ST_CHUNK_CRLF,  /* the CRLF after them */
    ST_TRAILERS,    /* trailer fields after the last chunk, up to the empty line */
    ST_DEAD,        /* refused: everything after is dropped */
};

/* evhttp's methods (its parser knows no others); it reads a body only for these three. */
static const struct method {
    const char *name;
    bool body;
} methods[] = {
    {"GET", false},    {"POST", true},    {"HEAD", false}, {"PUT", true},   {"DELETE", false},
    {"OPTIONS", false}, {"TRACE", false}, {"PATCH", true}, {"CONNECT", false},
};
enum { METHOD_OPTIONS = 5, METHOD_CONNECT = 8, METHOD_UNKNOWN = -1 };

static const char standin[] = "GET " REQFRAME_STANDIN_PATH " HTTP/1.1\r\nHost: stallscope\r\n"
                              "Connection: close\r\n\r\n";

/* ---- character classes (RFC 9110 5.6.2, RFC 3986 2) ------------------------------------ */

static bool is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool is_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int hex_value(unsigned char c)
{
    return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

static bool is_unreserved_or_subdelim(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c != 0 && strchr("-._~!$&'()*+,;=", c) != NULL;
}

static bool is_ows(unsigned char c)
{
    return c == ' ' || c == '\t';
}

/* "%" HEXDIG HEXDIG at s[i]; false when cut or not hex. */
static bool pct_encoded(const char *s, size_t n, size_t i)
{
    return i + 2 < n && is_hex((unsigned char)s[i + 1]) && is_hex((unsigned char)s[i + 2]);
}

/* Every byte unreserved, a sub-delim, one of `extra`, or a "%" HEXDIG HEXDIG. */
static bool uri_chars(const char *s, size_t n, const char *extra)
{
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            if (!pct_encoded(s, n, i))
                return false;
            i += 2;
        } else if (!is_unreserved_or_subdelim(c) && !strchr(extra, c)) {
            return false;
        }
    }
    return true;
}

/* An origin-form path and query: pchar / "/" / "?". */
static bool valid_path_query(const char *s, size_t n)
{
    return uri_chars(s, n, ":@/?");
}

/* uri-host [":" port] (reg-name, IPv4 or an IP-literal in brackets); empty is allowed. No
 * userinfo ("@"): RFC 9110 4.2.4 forbids it in http URIs. */
static bool valid_authority(const char *s, size_t n)
{
    return uri_chars(s, n, ":[]");
}

static bool equals_nocase(const char *s, size_t n, const char *lit)
{
    const size_t m = strlen(lit);
    if (n != m)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char a = (unsigned char)s[i], b = (unsigned char)lit[i];
        if (a >= 'A' && a <= 'Z')
            a = (unsigned char)(a | 0x20);
        if (a != b)
            return false;
    }
    return true;
}

static bool starts_nocase(const char *s, size_t n, const char *lit)
{
    const size_t m = strlen(lit);
    return n >= m && equals_nocase(s, m, lit);
}

static void trim_ows(const char **s, size_t *n)
{
    while (*n > 0 && is_ows((unsigned char)(*s)[0]))
        (*s)++, (*n)--;
    while (*n > 0 && is_ows((unsigned char)(*s)[*n - 1]))
        (*n)--;
}

/* Up to 40 bytes of s for a message: printable ASCII, anything else as '?'. */
static void snippet(char *dst, size_t cap, const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap && i < 40; i++) {
        const unsigned char c = (unsigned char)s[i];
        dst[k++] = c >= 0x20 && c < 0x7f && c != '"' && c != '\\' ? (char)c : '?';
    }
    dst[k] = '\0';
}

/* ---- results ---------------------------------------------------------------------------- */

static void unit_done(reqframe *f)
{
    f->scanned = 0;
    f->line_start = 0;
    f->lines = 0;
}

static void head_reset(reqframe *f)
{
    unit_done(f);
    f->minor = 1;
    f->method = METHOD_UNKNOWN;
    f->target_from = f->target_to = 0;
    f->n_host = f->n_length = f->n_coding = 0;
    f->chunked = false;
    f->content_length = 0;
}

/* Refuse: from here the connection carries nothing more to evhttp. What is produced
 * completes one request for it: the end of the chunked body it is reading, or a stand-in. */
__attribute__((format(printf, 7, 8))) static reqframe_kind
refuse(reqframe *f, size_t len, char *out, size_t out_cap, reqframe_step *step, int status,
       const char *fmt, ...)
{
    const bool inside_body = f->forward_body &&
                             (f->state == ST_CHUNK_LINE || f->state == ST_CHUNK_DATA ||
                              f->state == ST_CHUNK_CRLF || f->state == ST_TRAILERS);
    const char *tail = inside_body ? (f->state == ST_CHUNK_CRLF ? "\r\n0\r\n\r\n" : "0\r\n\r\n")
                                   : standin;
    const size_t n = strlen(tail);
    step->kind = REQFRAME_REFUSE;
    step->consumed = len;
    step->status = status;
    step->head = !inside_body;
    step->produced = n <= out_cap ? n : 0;
    memcpy(out, tail, step->produced);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(step->message, sizeof step->message, fmt, ap);
    va_end(ap);
    f->state = ST_DEAD;
    if (step->head)
        f->requests++;
    return step->kind;
}

static reqframe_kind emit(reqframe_step *step, size_t consumed, size_t produced)
{
    step->kind = REQFRAME_EMIT;
    step->consumed = consumed;
    step->produced = produced;
    return step->kind;
}

/* ---- lines of a unit -------------------------------------------------------------------- */

/* Why a line was refused: status and message, or status 0 when it was fine. */
typedef struct verdict {
    int status;
    char message[REQFRAME_MESSAGE_LEN];
} verdict;

__attribute__((format(printf, 3, 4))) static int fail(verdict *v, int status, const char *fmt,
                                                      ...)
{
    v->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->message, sizeof v->message, fmt, ap);
    va_end(ap);
    return -1;
}

static int check_request_line(reqframe *f, const char *head, size_t from, size_t n, verdict *v)
{
    const char *l = head + from;
    char shown[48];
    const char *sp1 = memchr(l, ' ', n);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', n - (size_t)(sp1 + 1 - l)) : NULL;
    if (!sp1 || !sp2)
        return fail(v, 400, "malformed request line: want METHOD SP target SP HTTP/1.1");
    const size_t method_len = (size_t)(sp1 - l);
    const char *target = sp1 + 1;
    const size_t target_len = (size_t)(sp2 - target);
    const char *version = sp2 + 1;
    const size_t version_len = n - (size_t)(version - l);
    if (method_len == 0 || target_len == 0)
        return fail(v, 400, "malformed request line: one space between its three parts");
    for (size_t i = 0; i < method_len; i++)
        if (!is_tchar((unsigned char)l[i]))
            return fail(v, 400, "malformed request line: the method is not a token");
    /* HTTP-version = "HTTP/" DIGIT "." DIGIT, case-sensitive (RFC 9112 2.3). */
    if (version_len != 8 || memcmp(version, "HTTP/", 5) != 0 ||
        !(version[5] >= '0' && version[5] <= '9') || version[6] != '.' ||
        !(version[7] >= '0' && version[7] <= '9')) {
        snippet(shown, sizeof shown, version, version_len);
        return fail(v, 400, "malformed HTTP version \"%s\"", shown);
    }
    if (version[5] != '1' || version[7] > '1')
        return fail(v, 505, "HTTP/%c.%c is not supported: use HTTP/1.1 (or 1.0)", version[5],
                    version[7]);
    f->minor = version[7] - '0';
    f->method = METHOD_UNKNOWN;
    for (int i = 0; i < (int)(sizeof methods / sizeof methods[0]); i++)
        if (strlen(methods[i].name) == method_len && memcmp(l, methods[i].name, method_len) == 0)
            f->method = i;
    if (f->method == METHOD_UNKNOWN || f->method == METHOD_CONNECT) {
        snippet(shown, sizeof shown, l, method_len);
        return fail(v, 501, "method %s is not supported", shown);
    }
    /* request-target (RFC 9112 3.2): origin-form, absolute-form, asterisk-form. */
    const size_t at = (size_t)(target - head);
    if (target_len == 1 && target[0] == '*') {
        if (f->method != METHOD_OPTIONS)
            return fail(v, 400, "the request target \"*\" is for OPTIONS only");
        f->target_from = at, f->target_to = at + 1;
        return 0;
    }
    if (target[0] == '/') {
        if (target_len > 1 && target[1] == '/')
            return fail(v, 400, "a request target starting with \"//\"");
        if (!valid_path_query(target, target_len))
            return fail(v, 400, "invalid character in the request target");
        f->target_from = at, f->target_to = at + target_len;
        return 0;
    }
    const size_t scheme = starts_nocase(target, target_len, "http://")    ? 7
                          : starts_nocase(target, target_len, "https://") ? 8
                                                                           : 0;
    if (scheme == 0)
        return fail(v, 400, "the request target must be a path (\"/...\") or an http URI");
    size_t end = scheme;
    while (end < target_len && target[end] != '/' && target[end] != '?')
        end++;
    if (!valid_authority(target + scheme, end - scheme))
        return fail(v, 400, "invalid authority in the request target");
    if (target_len - end > 1 && target[end] == '/' && target[end + 1] == '/')
        return fail(v, 400, "a request target path starting with \"//\"");
    if (!valid_path_query(target + end, target_len - end))
        return fail(v, 400, "invalid character in the request target");
    /* Handed on in origin-form; an empty path becomes "/" (RFC 9112 3.2.1). */
    f->target_from = at + end, f->target_to = at + target_len;
    return 0;
}

/* A transfer-coding list (RFC 9112 6.1): chunked must be the last and is the only one. */
static int check_codings(reqframe *f, const char *s, size_t n, verdict *v)
{
    size_t count = 0;
    bool last_chunked = false;
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < n && s[j] != ',')
            j++;
        const char *item = s + i;
        size_t len = j - i;
        trim_ows(&item, &len);
        if (len == 0)
            return fail(v, 400, "empty transfer coding in Transfer-Encoding");
        for (size_t k = 0; k < len; k++)
            if (!is_tchar((unsigned char)item[k]))
                return fail(v, 400, "malformed Transfer-Encoding");
        count++;
        last_chunked = equals_nocase(item, len, "chunked");
        if (j == n)
            break;
        i = j + 1;
    }
    if (!last_chunked)
        return fail(v, 400, "Transfer-Encoding must end with chunked");
    if (count > 1)
        return fail(v, 501, "transfer codings other than chunked are not supported");
    f->chunked = true;
    return 0;
}

/* name ":" OWS value OWS. The scan already refused control characters and bare CR/LF. */
static int split_field(const char *l, size_t n, const char **name, size_t *name_len,
                       const char **value, size_t *value_len, verdict *v)
{
    if (n > 0 && is_ows((unsigned char)l[0]))
        return fail(v, 400, "obsolete line folding (a field line starting with whitespace)");
    const char *colon = memchr(l, ':', n);
    if (!colon)
        return fail(v, 400, "a field line without a colon");
    *name = l;
    *name_len = (size_t)(colon - l);
    if (*name_len == 0)
        return fail(v, 400, "a field with an empty name");
    for (size_t i = 0; i < *name_len; i++) {
        if (is_ows((unsigned char)l[i]))
            return fail(v, 400, "whitespace between a field name and its colon");
        if (!is_tchar((unsigned char)l[i]))
            return fail(v, 400, "a field name that is not a token");
    }
    *value = colon + 1;
    *value_len = n - *name_len - 1;
    trim_ows(value, value_len);
    return 0;
}

static int check_field(reqframe *f, const char *l, size_t n, verdict *v)
{
    const char *name, *value;
    size_t name_len, value_len;
    if (split_field(l, n, &name, &name_len, &value, &value_len, v) != 0)
        return -1;
    if (equals_nocase(name, name_len, "content-length")) {
        if (++f->n_length > 1)
            return fail(v, 400, "more than one Content-Length");
        if (value_len == 0)
            return fail(v, 400, "an empty Content-Length");
        uint64_t length = 0;
        for (size_t i = 0; i < value_len; i++) {
            const unsigned char c = (unsigned char)value[i];
            if (c < '0' || c > '9')
                return fail(v, 400, "Content-Length is not a decimal number (digits only)");
            length = length > (UINT64_MAX - 9) / 10 ? UINT64_MAX : length * 10 + (c - '0');
        }
        f->content_length = length;
    } else if (equals_nocase(name, name_len, "transfer-encoding")) {
        if (++f->n_coding > 1)
            return fail(v, 400, "more than one Transfer-Encoding");
        return check_codings(f, value, value_len, v);
    } else if (equals_nocase(name, name_len, "host")) {
        if (++f->n_host > 1)
            return fail(v, 400, "more than one Host");
        if (!valid_authority(value, value_len))
            return fail(v, 400, "invalid Host");
    } else if (equals_nocase(name, name_len, "expect")) {
        /* evhttp acts on Expect in HTTP/1.1 only. */
        if (f->minor == 1 && !equals_nocase(value, value_len, "100-continue"))
            return fail(v, 417, "only Expect: 100-continue is supported");
    }
    return 0;
}

/* The head's empty line: the framing is decided. */
static int check_framing(reqframe *f, verdict *v)
{
    if (f->minor == 1 && f->n_host == 0)
        return fail(v, 400, "an HTTP/1.1 request needs a Host field");
    if (f->chunked && f->n_length > 0)
        return fail(v, 400, "both Content-Length and Transfer-Encoding");
    if (f->chunked && f->minor == 0)
        return fail(v, 400, "Transfer-Encoding in an HTTP/1.0 request");
    if (f->n_length > 0 && f->content_length > f->max_body)
        return fail(v, 413, "request body of %llu bytes exceeds the limit of %llu bytes",
                    (unsigned long long)f->content_length, (unsigned long long)f->max_body);
    return 0;
}

/* chunk-size [ chunk-ext ] (RFC 9112 7.1.1); the line without its CRLF. */
static int check_chunk_line(reqframe *f, const char *l, size_t n, uint64_t *size, verdict *v)
{
    size_t i = 0;
    uint64_t value = 0;
    while (i < n && is_hex((unsigned char)l[i])) {
        /* Saturate: a size past 2^64 is refused as too large, not wrapped. */
        value = value > (UINT64_MAX - 15) / 16
                    ? UINT64_MAX
                    : value * 16 + (uint64_t)hex_value((unsigned char)l[i]);
        i++;
    }
    if (i == 0)
        return fail(v, 400, "malformed chunk size (hex digits)");
    for (;;) {
        const size_t blank = i;
        while (i < n && is_ows((unsigned char)l[i]))
            i++;
        if (i == n) {
            if (i != blank) /* BWS belongs before a ';' only */
                return fail(v, 400, "whitespace at the end of a chunk line");
            break;
        }
        if (l[i] != ';')
            return fail(v, 400, "malformed chunk extension");
        i++;
        while (i < n && is_ows((unsigned char)l[i]))
            i++;
        const size_t name_at = i;
        while (i < n && is_tchar((unsigned char)l[i]))
            i++;
        if (i == name_at)
            return fail(v, 400, "malformed chunk extension name");
        size_t k = i;
        while (k < n && is_ows((unsigned char)l[k]))
            k++;
        if (k == n || l[k] != '=')
            continue;
        i = k + 1;
        while (i < n && is_ows((unsigned char)l[i]))
            i++;
        if (i < n && l[i] == '"') { /* quoted-string, quoted-pair inside */
            i++;
            for (;;) {
                if (i == n)
                    return fail(v, 400, "unterminated quoted chunk extension value");
                const unsigned char c = (unsigned char)l[i];
                if (c == '"')
                    break;
                if (c == '\\') {
                    if (i + 1 == n)
                        return fail(v, 400, "unterminated quoted chunk extension value");
                    i++;
                }
                i++;
            }
            i++;
        } else {
            const size_t value_at = i;
            while (i < n && is_tchar((unsigned char)l[i]))
                i++;
            if (i == value_at)
                return fail(v, 400, "malformed chunk extension value");
        }
    }
    if (value > f->max_body - f->body_bytes)
        return fail(v, 413, "chunked request body exceeds the limit of %llu bytes",
                    (unsigned long long)f->max_body);
    *size = value;
    return 0;
}

/* ---- units: the head, a chunk line, the trailer section --------------------------------- */

typedef enum { UNIT_HEAD, UNIT_CHUNK_LINE, UNIT_TRAILERS } unit_kind;

/* One complete line of the unit: 0 go on, 1 the unit ended with it, -1 refused. */
static int on_line(reqframe *f, unit_kind kind, const char *in, size_t from, size_t n,
                   uint64_t *chunk_size, verdict *v)
{
    switch (kind) {
    case UNIT_CHUNK_LINE:
        return check_chunk_line(f, in + from, n, chunk_size, v) != 0 ? -1 : 1;
    case UNIT_HEAD:
        if (f->lines == 0)
            return n == 0 ? fail(v, 400, "empty request line")
                          : check_request_line(f, in, from, n, v);
        if (n == 0)
            return check_framing(f, v) != 0 ? -1 : 1;
        if (f->lines > REQFRAME_MAX_FIELDS)
            return fail(v, 431, "more than %d header fields", REQFRAME_MAX_FIELDS);
        return check_field(f, in + from, n, v);
    case UNIT_TRAILERS: {
        if (n == 0)
            return 1;
        if (f->lines >= REQFRAME_MAX_FIELDS)
            return fail(v, 431, "more than %d trailer fields", REQFRAME_MAX_FIELDS);
        const char *name, *value;
        size_t name_len, value_len;
        return split_field(in + from, n, &name, &name_len, &value, &value_len, v);
    }
    }
    return fail(v, 500, "unknown unit");
}

/* Check in[f->scanned..len) byte by byte, a line at a time. 1: the unit is complete,
 * *unit_len its bytes; 0: need more; -1: refused (v). */
static int scan_unit(reqframe *f, unit_kind kind, const char *in, size_t len, size_t *unit_len,
                     uint64_t *chunk_size, verdict *v)
{
    const size_t limit = kind == UNIT_CHUNK_LINE ? REQFRAME_MAX_CHUNK_LINE : REQFRAME_MAX_HEAD;
    for (size_t i = f->scanned; i < len; i++) {
        if (i >= limit) {
            if (kind == UNIT_CHUNK_LINE)
                return fail(v, 400, "a chunk line longer than %d bytes", REQFRAME_MAX_CHUNK_LINE);
            if (kind == UNIT_HEAD && f->lines == 0)
                return fail(v, 414, "a request line longer than %d bytes", REQFRAME_MAX_HEAD);
            return fail(v, 431, "%s longer than %d bytes",
                        kind == UNIT_HEAD ? "request head" : "trailer section",
                        REQFRAME_MAX_HEAD);
        }
        const unsigned char c = (unsigned char)in[i];
        const bool after_cr = i > 0 && in[i - 1] == '\r';
        if (after_cr && c != '\n')
            return fail(v, 400, "a bare CR (line ends must be CRLF)");
        if (c == '\n') {
            if (!after_cr)
                return fail(v, 400, "a bare LF (line ends must be CRLF)");
            const size_t from = f->line_start;
            f->scanned = i + 1;
            const int rc = on_line(f, kind, in, from, i - 1 - from, chunk_size, v);
            f->lines++;
            f->line_start = i + 1;
            if (rc != 0) {
                *unit_len = i + 1;
                return rc;
            }
            continue;
        }
        if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f)
            return fail(v, 400, "a control character (0x%02x) in the %s", c,
                        kind == UNIT_CHUNK_LINE ? "chunk line" : "request head");
    }
    f->scanned = len;
    return 0;
}

/* scan_unit, and what reqframe_next returns when the unit is not complete: 1 complete
 * (*unit_len), 0 not (*result: need more, or the refusal). */
static int take_unit(reqframe *f, unit_kind kind, const char *in, size_t len, char *out,
                     size_t out_cap, reqframe_step *step, size_t *unit_len, uint64_t *chunk_size,
                     reqframe_kind *result)
{
    verdict v = {0};
    const int rc = scan_unit(f, kind, in, len, unit_len, chunk_size, &v);
    if (rc > 0)
        return 1;
    *result = rc == 0 ? REQFRAME_NEED_MORE
                      : refuse(f, len, out, out_cap, step, v.status, "%s", v.message);
    return 0;
}

static size_t put(char *out, size_t at, const char *s, size_t n)
{
    memcpy(out + at, s, n);
    return at + n;
}

/* The head in normal form (see reqframe.h). Its lines were all checked. */
static size_t write_head(const reqframe *f, const char *head, size_t head_len, char *out)
{
    const char *eol = memchr(head, '\r', head_len);
    const char *sp = memchr(head, ' ', (size_t)(eol - head));
    size_t at = put(out, 0, head, (size_t)(sp - head) + 1); /* method SP */
    if (f->target_from == f->target_to || head[f->target_from] == '?')
        at = put(out, at, "/", 1);
    at = put(out, at, head + f->target_from, f->target_to - f->target_from);
    at = put(out, at, eol - 9, 11); /* " HTTP/1.x\r\n" */
    const char *line = eol + 2;
    const char *end = head + head_len - 2; /* the empty line */
    while (line < end) {
        const char *next = memchr(line, '\r', (size_t)(end - line));
        const char *name, *value;
        size_t name_len, value_len;
        verdict unused;
        split_field(line, (size_t)(next - line), &name, &name_len, &value, &value_len, &unused);
        if (!equals_nocase(name, name_len, "content-length") &&
            !equals_nocase(name, name_len, "transfer-encoding")) {
            at = put(out, at, name, name_len);
            at = put(out, at, ": ", 2);
            at = put(out, at, value, value_len);
            at = put(out, at, "\r\n", 2);
        }
        line = next + 2;
    }
    if (f->forward_body) {
        char framing[64];
        const int n = f->chunked ? snprintf(framing, sizeof framing, "Transfer-Encoding: chunked\r\n")
                                 : snprintf(framing, sizeof framing, "Content-Length: %llu\r\n",
                                            (unsigned long long)f->content_length);
        at = put(out, at, framing, (size_t)n);
    }
    return put(out, at, "\r\n", 2);
}

/* ---- the state machine ------------------------------------------------------------------ */

void reqframe_init(reqframe *f, uint64_t max_body)
{
    memset(f, 0, sizeof *f);
    f->state = ST_HEAD;
    f->max_body = max_body;
    head_reset(f);
}

bool reqframe_at_boundary(const reqframe *f)
{
    return f->state == ST_HEAD && f->scanned == 0;
}

static reqframe_kind next_head(reqframe *f, const char *in, size_t len, char *out,
                               size_t out_cap, reqframe_step *step)
{
    /* RFC 9112 2.2: ignore empty lines before the request line. */
    if (f->scanned == 0 && len > 0 && in[0] == '\r') {
        if (len == 1)
            return REQFRAME_NEED_MORE;
        if (in[1] == '\n')
            return emit(step, 2, 0);
    }
    size_t head_len = 0;
    reqframe_kind result;
    if (!take_unit(f, UNIT_HEAD, in, len, out, out_cap, step, &head_len, NULL, &result))
        return result;
    if (head_len + (size_t)f->lines + 64 > out_cap)
        return refuse(f, len, out, out_cap, step, 500, "internal: framing buffer too small");
    f->forward_body = methods[f->method].body;
    const size_t produced = write_head(f, in, head_len, out);
    f->requests++;
    f->body_bytes = 0;
    if (f->chunked) {
        f->state = ST_CHUNK_LINE;
    } else if (f->content_length > 0) {
        f->state = ST_LENGTH_BODY;
        f->remaining = f->content_length;
    }
    head_reset(f);
    step->head = true;
    return emit(step, head_len, produced);
}

static reqframe_kind take_body(reqframe *f, size_t len, reqframe_step *step, int next_state)
{
    const size_t n = (uint64_t)len < f->remaining ? len : (size_t)f->remaining;
    f->remaining -= n;
    if (f->remaining == 0)
        f->state = next_state;
    step->kind = REQFRAME_BODY;
    step->consumed = n;
    step->forward = f->forward_body;
    return step->kind;
}

reqframe_kind reqframe_next(reqframe *f, const char *in, size_t len, char *out, size_t out_cap,
                            reqframe_step *step)
{
    memset(step, 0, sizeof *step);
    step->kind = REQFRAME_NEED_MORE;
    if (len == 0)
        return REQFRAME_NEED_MORE;
    switch (f->state) {
    case ST_HEAD:
        return next_head(f, in, len, out, out_cap, step);
    case ST_LENGTH_BODY:
        return take_body(f, len, step, ST_HEAD);
    case ST_CHUNK_DATA:
        return take_body(f, len, step, ST_CHUNK_CRLF);
    case ST_CHUNK_CRLF:
        if (in[0] != '\r' || (len > 1 && in[1] != '\n'))
            return refuse(f, len, out, out_cap, step, 400, "chunk data not followed by CRLF");
        if (len < 2)
            return REQFRAME_NEED_MORE;
        f->state = ST_CHUNK_LINE;
        return emit(step, 2, f->forward_body ? (size_t)(put(out, 0, "\r\n", 2)) : 0);
    case ST_CHUNK_LINE: {
        size_t line_len = 0;
        uint64_t size = 0;
        reqframe_kind result;
        if (!take_unit(f, UNIT_CHUNK_LINE, in, len, out, out_cap, step, &line_len, &size,
                       &result))
            return result;
        unit_done(f);
        if (size == 0) {
            f->state = ST_TRAILERS;
            return emit(step, line_len, 0);
        }
        f->body_bytes += size;
        f->remaining = size;
        f->state = ST_CHUNK_DATA;
        const int n = f->forward_body
                          ? snprintf(out, out_cap, "%llx\r\n", (unsigned long long)size)
                          : 0;
        return emit(step, line_len, (size_t)n);
    }
    case ST_TRAILERS: {
        size_t section_len = 0;
        reqframe_kind result;
        if (!take_unit(f, UNIT_TRAILERS, in, len, out, out_cap, step, &section_len, NULL,
                       &result))
            return result;
        unit_done(f);
        f->state = ST_HEAD;
        /* Trailer fields are dropped: evhttp would add them to the request's headers. */
        return emit(step, section_len, f->forward_body ? put(out, 0, "0\r\n\r\n", 5) : 0);
    }
    case ST_DEAD:
    default:
        step->kind = REQFRAME_DISCARD;
        step->consumed = len;
        return step->kind;
    }
}

size_t reqframe_feed(reqframe *f, const char *in, size_t len, char *out, size_t out_cap,
                     const reqframe_sink *sink)
{
    size_t at = 0;
    /* Every step but NEED_MORE consumes at least one byte: at most len + 1 rounds. */
    for (size_t round = 0; round <= len && at < len; round++) {
        reqframe_step step;
        const reqframe_kind kind = reqframe_next(f, in + at, len - at, out, out_cap, &step);
        if (kind == REQFRAME_NEED_MORE)
            break;
        if (kind == REQFRAME_BODY && step.forward)
            sink->forward(sink->ctx, in + at, step.consumed);
        else if (step.produced > 0)
            sink->forward(sink->ctx, out, step.produced);
        if (step.head)
            sink->request(sink->ctx);
        if (kind == REQFRAME_REFUSE)
            sink->refused(sink->ctx, step.status, step.message);
        at += step.consumed;
    }
    return at;
}
