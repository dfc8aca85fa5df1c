#include "client/json_scan.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* ---- the reference reader: jansson ------------------------------------------------ */

static json_scan_value jansson_value(const json_t *v)
{
    json_scan_value out = {0};
    out.at = v;
    switch (v ? json_typeof(v) : JSON_NULL) {
    case JSON_OBJECT:
        out.type = JSON_SCAN_OBJECT;
        break;
    case JSON_ARRAY:
        out.type = JSON_SCAN_ARRAY;
        out.nonempty = json_array_size(v) > 0;
        break;
    case JSON_STRING:
        out.type = JSON_SCAN_STRING;
        out.nonempty = json_string_length(v) > 0;
        break;
    case JSON_INTEGER:
        out.type = JSON_SCAN_INT;
        out.integer = (int64_t)json_integer_value(v);
        break;
    case JSON_REAL:
        out.type = JSON_SCAN_REAL;
        out.real = json_real_value(v);
        break;
    case JSON_TRUE:
        out.type = JSON_SCAN_TRUE;
        break;
    case JSON_FALSE:
        out.type = JSON_SCAN_FALSE;
        break;
    case JSON_NULL:
        out.type = v ? JSON_SCAN_NULL : JSON_SCAN_ABSENT;
        break;
    }
    return out;
}

static void jansson_members(const json_scan_reader *rd, const json_scan_value *obj,
                            const char *const *names, int n, json_scan_value *out)
{
    (void)rd;
    for (int i = 0; i < n; i++)
        out[i] = jansson_value(obj->type == JSON_SCAN_OBJECT ? json_object_get(obj->at, names[i])
                                                             : NULL);
}

static void jansson_first(const json_scan_reader *rd, const json_scan_value *array,
                          json_scan_value *out)
{
    (void)rd;
    *out = jansson_value(array->type == JSON_SCAN_ARRAY ? json_array_get(array->at, 0) : NULL);
}

static void jansson_text(const json_scan_reader *rd, const json_scan_value *s, char *buf,
                         size_t size)
{
    (void)rd;
    const char *text = json_string_value(s->at);
    snprintf(buf, size, "%s", text ? text : "");
}

int json_scan_object_jansson(json_scan_doc *doc, const char *data, size_t len,
                             const char *const *names, int n, json_scan_value *out)
{
    static const json_scan_reader reader = {NULL, jansson_members, jansson_first, jansson_text};
    memset(doc, 0, sizeof *doc);
    json_error_t jerr;
    json_t *root = json_loadb(data, len, 0, &jerr);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        snprintf(doc->why, sizeof doc->why, "%s", root ? "not an object" : jerr.text);
        return -1;
    }
    doc->reader = reader;
    doc->root = root;
    const json_scan_value top = jansson_value(root);
    reader.members(&reader, &top, names, n, out);
    return 0;
}

void json_scan_close(json_scan_doc *doc)
{
    json_decref(doc->root);
    doc->root = NULL;
}

/* ---- the client's reader: an in-place scanner -------------------------------------- */

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

size_t json_scan_utf8_length(const unsigned char *p, const unsigned char *end)
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
            const size_t n =
                json_scan_utf8_length((const unsigned char *)p, (const unsigned char *)end);
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
static const char *scan_number(const char *p, const char *end, json_scan_value *out)
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
            out->type = JSON_SCAN_INT;
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
        out->type = JSON_SCAN_REAL;
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
static const char *scan_value(const char *p, const char *end, int depth, json_scan_value *out)
{
    unsigned char in_object[JSON_MAX_DEPTH / 8 + 1]; /* a bit per open container */
    int open = 0;                                     /* containers open inside the value */
    json_scan_value scratch;
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
            out->type = object ? JSON_SCAN_OBJECT : JSON_SCAN_ARRAY;
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
            out->type = JSON_SCAN_STRING;
            out->nonempty = p - start > 2;
        }
        goto after;
    }
    case 't':
        if (open == 0)
            out->type = JSON_SCAN_TRUE;
        p = scan_literal(p, end, "true");
        break;
    case 'f':
        if (open == 0)
            out->type = JSON_SCAN_FALSE;
        p = scan_literal(p, end, "false");
        break;
    case 'n':
        if (open == 0)
            out->type = JSON_SCAN_NULL;
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
 * names[0, n) into out (the last of duplicates, as jansson keeps it; JSON_SCAN_ABSENT when
 * missing). Returns the byte after it, or NULL when jansson refuses it. */
static const char *scan_members(const char *p, const char *end, int depth, const char *const *names,
                                int n, json_scan_value *out)
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

static void scan_reader_members(const json_scan_reader *rd, const json_scan_value *obj,
                                const char *const *names, int n, json_scan_value *out)
{
    if (obj->type == JSON_SCAN_OBJECT)
        scan_members(obj->at, rd->end, obj->depth, names, n, out); /* checked already */
    else
        memset(out, 0, (size_t)n * sizeof *out);
}

static void scan_reader_first(const json_scan_reader *rd, const json_scan_value *array,
                              json_scan_value *out)
{
    memset(out, 0, sizeof *out);
    if (array->type == JSON_SCAN_ARRAY && array->nonempty)
        scan_value(skip_ws((const char *)array->at + 1, rd->end), rd->end, array->depth + 1, out);
}

static void scan_reader_text(const json_scan_reader *rd, const json_scan_value *s, char *buf,
                             size_t size)
{
    decode_string(s->at, rd->end, buf, size);
}

int json_scan_object(json_scan_doc *doc, const char *data, size_t len, const char *const *names,
                     int n, json_scan_value *out)
{
    memset(doc, 0, sizeof *doc);
    const char *end = data + len;
    const char *p = skip_ws(data, end);
    const char *after;
    const bool object = p < end && *p == '{';
    if (object)
        after = scan_members(p, end, 1, names, n, out); /* checks it all */
    else /* jansson takes an array at the top (then it is not an object) and nothing else */
        after = p < end && *p == '[' ? scan_value(p, end, 1, NULL) : NULL;
    if (!after || skip_ws(after, end) != end) {
        snprintf(doc->why, sizeof doc->why, "not JSON");
        return -1;
    }
    if (!object) {
        snprintf(doc->why, sizeof doc->why, "not an object");
        return -1;
    }
    doc->reader = (json_scan_reader){end, scan_reader_members, scan_reader_first, scan_reader_text};
    return 0;
}
