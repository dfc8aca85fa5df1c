#include "client/prom.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

static const char *const TYPE_NAMES[] = {"untyped", "counter", "gauge", "histogram", "summary"};

const char *prom_type_name(prom_type t)
{
    return (unsigned)t < sizeof TYPE_NAMES / sizeof TYPE_NAMES[0] ? TYPE_NAMES[t] : "?";
}

void prom_parser_init(prom_parser *p)
{
    memset(p, 0, sizeof *p);
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static bool name_start(char c, bool colon)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}

static bool name_char(char c, bool colon)
{
    return name_start(c, colon) || (c >= '0' && c <= '9');
}

/* The cursor over one line. */
typedef struct cursor {
    const char *s;
    size_t at, len;
} cursor;

static void skip_blanks(cursor *c)
{
    while (c->at < c->len && is_blank(c->s[c->at]))
        c->at++;
}

static bool at_end(const cursor *c)
{
    return c->at >= c->len;
}

/* A metric name (colon true) or a label name; its length, 0 when there is none. */
static size_t take_name(cursor *c, bool colon)
{
    size_t start = c->at;
    if (at_end(c) || !name_start(c->s[c->at], colon))
        return 0;
    while (c->at < c->len && name_char(c->s[c->at], colon))
        c->at++;
    return c->at - start;
}

/* A blank-delimited token; its length. */
static size_t take_token(cursor *c)
{
    size_t start = c->at;
    while (c->at < c->len && !is_blank(c->s[c->at]))
        c->at++;
    return c->at - start;
}

/* A float as Go's strconv.ParseFloat reads a decimal one (NaN, Inf, +Inf, -Inf, Infinity
 * in any case); hexadecimal and "nan(...)" forms are refused. */
static bool parse_float(const char *s, size_t len, double *out)
{
    char text[128]; /* longer spellings of a double are refused */
    if (len == 0 || len >= sizeof text)
        return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] == 'x' || s[i] == 'X' || s[i] == '(' || s[i] == '_')
            return false;
    memcpy(text, s, len);
    text[len] = '\0';
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end != text + len)
        return false;
    /* Overflow reads as +-Inf and underflow as 0 (Go says "out of range" but returns the
     * same values; Prometheus ingests them). */
    *out = v;
    return true;
}

static bool parse_int64(const char *s, size_t len, int64_t *out)
{
    char text[32];
    if (len == 0 || len >= sizeof text)
        return false;
    size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
    if (i == len)
        return false;
    for (; i < len; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    memcpy(text, s, len);
    text[len] = '\0';
    errno = 0;
    long long v = strtoll(text, NULL, 10);
    if (errno == ERANGE)
        return false;
    *out = (int64_t)v;
    return true;
}

static int fail(const prom_parser *p, char *err, const char *what, size_t col)
{
    return err_set(err, "line %d, column %zu: %s", p->line, col + 1, what);
}

static bool eq(const char *a, size_t a_len, const char *b)
{
    return strlen(b) == a_len && memcmp(a, b, a_len) == 0;
}

/* "# HELP ..." / "# TYPE ..." / any other comment. */
static int parse_comment(prom_parser *p, cursor *c, char *err)
{
    c->at++; /* '#' */
    skip_blanks(c);
    size_t kw = c->at, kw_len = take_token(c);
    bool help = eq(c->s + kw, kw_len, "HELP"), type = eq(c->s + kw, kw_len, "TYPE");
    if (!help && !type)
        return 0; /* a plain comment */
    skip_blanks(c);
    size_t name = c->at, name_len = take_name(c, true);
    if (name_len == 0 || (!at_end(c) && !is_blank(c->s[c->at])))
        return fail(p, err, help ? "# HELP needs a metric name" : "# TYPE needs a metric name",
                    c->at);
    if (help)
        return 0; /* the docstring is free text */
    skip_blanks(c);
    size_t t = c->at, t_len = take_token(c);
    skip_blanks(c);
    if (!at_end(c))
        return fail(p, err, "text after the type in # TYPE", c->at);
    prom_type kind = PROM_UNTYPED;
    bool known = false;
    for (int i = 0; i < (int)(sizeof TYPE_NAMES / sizeof TYPE_NAMES[0]); i++)
        if (eq(c->s + t, t_len, TYPE_NAMES[i])) {
            kind = (prom_type)i;
            known = true;
        }
    if (!known)
        return fail(p, err, "unknown type in # TYPE (counter, gauge, histogram, summary, untyped)",
                    t);
    if (name_len >= sizeof p->family)
        return fail(p, err, "metric name too long", name);
    memcpy(p->family, c->s + name, name_len);
    p->family[name_len] = '\0';
    p->type = kind;
    return 0;
}

/* '"' value '"', escapes checked; the slice between the quotes. */
static int take_label_value(prom_parser *p, cursor *c, prom_label *l, char *err)
{
    if (at_end(c) || c->s[c->at] != '"')
        return fail(p, err, "a label value must be quoted", c->at);
    c->at++;
    l->value = c->s + c->at;
    size_t start = c->at;
    while (c->at < c->len) {
        char ch = c->s[c->at];
        if (ch == '"') {
            l->value_len = c->at - start;
            c->at++;
            return 0;
        }
        if (ch == '\\') {
            if (c->at + 1 >= c->len)
                break;
            char next = c->s[c->at + 1];
            if (next != '\\' && next != '"' && next != 'n')
                return fail(p, err, "bad escape in a label value (only \\\\, \\\" and \\n)",
                            c->at);
            c->at += 2;
            continue;
        }
        c->at++;
    }
    return fail(p, err, "unterminated label value", c->at);
}

static int parse_labels(prom_parser *p, cursor *c, prom_sample *out, char *err)
{
    c->at++; /* '{' */
    for (;;) {
        skip_blanks(c);
        if (at_end(c))
            return fail(p, err, "unterminated label set", c->at);
        if (c->s[c->at] == '}') {
            c->at++;
            return 0;
        }
        if (out->n_labels == PROM_MAX_LABELS)
            return fail(p, err, "too many labels", c->at);
        prom_label *l = &out->labels[out->n_labels];
        l->name = c->s + c->at;
        l->name_len = take_name(c, false);
        if (l->name_len == 0)
            return fail(p, err, "a label name expected", c->at);
        for (int i = 0; i < out->n_labels; i++)
            if (out->labels[i].name_len == l->name_len &&
                memcmp(out->labels[i].name, l->name, l->name_len) == 0)
                return fail(p, err, "a label given twice", (size_t)(l->name - c->s));
        skip_blanks(c);
        if (at_end(c) || c->s[c->at] != '=')
            return fail(p, err, "'=' expected after a label name", c->at);
        c->at++;
        skip_blanks(c);
        if (take_label_value(p, c, l, err) != 0)
            return -1;
        out->n_labels++;
        skip_blanks(c);
        if (!at_end(c) && c->s[c->at] == ',') {
            c->at++;
            continue;
        }
        if (!at_end(c) && c->s[c->at] == '}')
            continue;
        return fail(p, err, "',' or '}' expected in a label set", c->at);
    }
}

/* Does name belong to the current # TYPE family? */
static bool in_family(const prom_parser *p, const char *name, size_t len)
{
    size_t f = strlen(p->family);
    if (f == 0 || len < f || memcmp(name, p->family, f) != 0)
        return false;
    const char *suffix = name + f;
    size_t n = len - f;
    if (n == 0)
        return true;
    switch (p->type) {
    case PROM_HISTOGRAM:
        return eq(suffix, n, "_bucket") || eq(suffix, n, "_sum") || eq(suffix, n, "_count");
    case PROM_SUMMARY:
        return eq(suffix, n, "_sum") || eq(suffix, n, "_count");
    case PROM_COUNTER:
        return eq(suffix, n, "_total");
    default:
        return false;
    }
}

int prom_parse_line(prom_parser *p, const char *line, size_t len, prom_sample *out, char *err)
{
    p->line++;
    if (len > 0 && line[len - 1] == '\r')
        len--;
    if (memchr(line, '\0', len))
        return fail(p, err, "NUL byte", (size_t)((const char *)memchr(line, '\0', len) - line));
    cursor c = {line, 0, len};
    skip_blanks(&c);
    if (at_end(&c))
        return 0;
    if (line[c.at] == '#')
        return parse_comment(p, &c, err);

    memset(out, 0, sizeof *out);
    out->line = p->line;
    out->name = line + c.at;
    out->name_len = take_name(&c, true);
    if (out->name_len == 0)
        return fail(p, err, "a metric name expected", c.at);
    size_t after_name = c.at;
    skip_blanks(&c);
    if (!at_end(&c) && line[c.at] == '{') {
        if (parse_labels(p, &c, out, err) != 0)
            return -1;
        if (!at_end(&c) && !is_blank(line[c.at]))
            return fail(p, err, "a blank expected before the value", c.at);
    } else if (c.at == after_name && !at_end(&c)) {
        return fail(p, err, "a blank expected before the value", c.at);
    }
    skip_blanks(&c);
    size_t v = c.at, v_len = take_token(&c);
    if (v_len == 0)
        return fail(p, err, "a value expected", v);
    if (!parse_float(line + v, v_len, &out->value))
        return fail(p, err, "the value is not a number", v);
    skip_blanks(&c);
    if (!at_end(&c)) {
        size_t t = c.at, t_len = take_token(&c);
        if (!parse_int64(line + t, t_len, &out->timestamp_ms))
            return fail(p, err, "the timestamp is not an integer (ms)", t);
        out->has_timestamp = true;
        skip_blanks(&c);
        if (!at_end(&c))
            return fail(p, err, "text after the timestamp", c.at);
    }

    if (in_family(p, out->name, out->name_len)) {
        out->family = p->family;
        out->family_len = strlen(p->family);
        out->type = p->type;
    } else {
        out->family = out->name;
        out->family_len = out->name_len;
        out->type = PROM_UNTYPED;
    }
    if (out->type == PROM_HISTOGRAM && out->name_len > out->family_len) {
        char le[64];
        double bound;
        if (eq(out->name + out->family_len, out->name_len - out->family_len, "_bucket") &&
            (prom_label_get(out, "le", le, sizeof le) < 0 ||
             !parse_float(le, strlen(le), &bound)))
            return fail(p, err, "a histogram bucket needs an le label that is a number", v);
    }
    return 1;
}

int prom_parse(const char *text, size_t len, int (*on_sample)(void *ctx, const prom_sample *s),
               void *ctx, char *err)
{
    prom_parser p;
    prom_parser_init(&p);
    prom_sample s;
    size_t at = 0;
    while (at < len) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t line_len = nl ? (size_t)(nl - (text + at)) : len - at;
        int rc = prom_parse_line(&p, text + at, line_len, &s, err);
        if (rc < 0)
            return -1;
        if (rc == 1 && on_sample) {
            int stop = on_sample(ctx, &s);
            if (stop != 0)
                return stop;
        }
        at += line_len + (nl ? 1 : 0);
    }
    return 0;
}

bool prom_name_is(const prom_sample *s, const char *name)
{
    return eq(s->name, s->name_len, name);
}

int prom_label_get(const prom_sample *s, const char *name, char *out, size_t size)
{
    for (int i = 0; i < s->n_labels; i++) {
        const prom_label *l = &s->labels[i];
        if (!eq(l->name, l->name_len, name))
            continue;
        size_t n = 0;
        for (size_t j = 0; j < l->value_len; j++) {
            char ch = l->value[j];
            if (ch == '\\' && j + 1 < l->value_len) {
                j++;
                ch = l->value[j] == 'n' ? '\n' : l->value[j];
            }
            if (n + 1 >= size)
                return -1;
            out[n++] = ch;
        }
        if (size == 0)
            return -1;
        out[n] = '\0';
        return (int)n;
    }
    return -1;
}
