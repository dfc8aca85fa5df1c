/* json_scan — the few members a rule asks for out of one JSON text, read in place.
 *
 * A rule (the chunk decoder, chunk.c) reads JSON through a small reader: the members of an
 * object it names, an array's first element, a string's text. Two readers serve it:
 *   - the scanner (what the client runs): one pass over the text in place that accepts and
 *     refuses what jansson 2.14 does (grammar, UTF-8, escapes, \u0000, surrogates, integer
 *     and real overflow, nesting depth), keeping the spans of the members asked for and
 *     converting only their numbers; no DOM, no allocation (a real number longer than 63
 *     bytes aside). Iterative: a hostile text nested 2,048 deep costs no stack. One
 *     difference, on purpose: a NUL byte is never JSON and the scanner refuses it
 *     everywhere, where jansson's lexer drops one that follows a number or a literal (its
 *     push-back of the look-ahead byte loses a NUL);
 *   - jansson (the reference): json_loadb, then json_object_get.
 * tests/unit/client/test_json_scan.c and fuzz/fuzz_sse_chunk read the same texts with both
 * and require the same answers. */
#ifndef STALLSCOPE_JSON_SCAN_H
#define STALLSCOPE_JSON_SCAN_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum json_scan_type {
    JSON_SCAN_ABSENT = 0, /* not there (or asked of what is not an object or array) */
    JSON_SCAN_NULL,
    JSON_SCAN_FALSE,
    JSON_SCAN_TRUE,
    JSON_SCAN_INT,
    JSON_SCAN_REAL,
    JSON_SCAN_STRING,
    JSON_SCAN_ARRAY,
    JSON_SCAN_OBJECT,
} json_scan_type;

/* One JSON value as a rule sees it. */
typedef struct json_scan_value {
    json_scan_type type;
    bool nonempty;   /* a string of at least one byte, an array with an element */
    int64_t integer; /* JSON_SCAN_INT */
    double real;     /* JSON_SCAN_REAL */
    const void *at;  /* the reader's handle: the json_t, or the value's first byte */
    int depth;       /* the scanner: nesting depth as jansson counts it (the root is 1) */
} json_scan_value;

typedef struct json_scan_reader json_scan_reader;
struct json_scan_reader {
    const char *end; /* the scanner: one past the text's last byte */
    /* The members names[0, n) of obj into out (JSON_SCAN_ABSENT when missing, or when obj
     * is not an object); of duplicate keys the last one, as jansson keeps it. */
    void (*members)(const json_scan_reader *rd, const json_scan_value *obj,
                    const char *const *names, int n, json_scan_value *out);
    /* An array's first element (JSON_SCAN_ABSENT when empty or not an array). */
    void (*first)(const json_scan_reader *rd, const json_scan_value *array, json_scan_value *out);
    /* A string's decoded bytes, cut to size - 1 and NUL-terminated (snprintf's "%s"). */
    void (*text)(const json_scan_reader *rd, const json_scan_value *s, char *buf, size_t size);
};

/* One text read as an object, with the reader of the values found in it. */
typedef struct json_scan_doc {
    json_scan_reader reader;
    void *root;     /* jansson's document (json_t), NULL for the scanner */
    char why[160];  /* when the text is no object: "not JSON", "not an object", jansson's words */
} json_scan_doc;

/* data[0, len) as one JSON text, by the scanner. 0 when it is an object: its members
 * names[0, n) in out (as reader.members gives them), the whole text checked; -1 when it is
 * not JSON or not an object (doc->why). */
int json_scan_object(json_scan_doc *doc, const char *data, size_t len, const char *const *names,
                     int n, json_scan_value *out);
/* The same through jansson: the reference the scanner is held to (err's wording aside). */
int json_scan_object_jansson(json_scan_doc *doc, const char *data, size_t len,
                             const char *const *names, int n, json_scan_value *out);
/* Free what the document holds (jansson's DOM); values read from it are then gone. */
void json_scan_close(json_scan_doc *doc);

/* The length of the UTF-8 sequence at p (end - p > 0, *p >= 0x80) when jansson takes it
 * (utf8_check_first/utf8_check_full: no stray continuation byte, no overlong form, no
 * surrogate, nothing past U+10FFFF), else 0. The scanner's rule, and the one error texts
 * are cleaned by (reply_fail). */
size_t json_scan_utf8_length(const unsigned char *p, const unsigned char *end);

#endif
