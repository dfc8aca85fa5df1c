/* prom — a parser of Prometheus' text exposition format, version 0.0.4, as a pure function
 * over a caller-owned buffer (it allocates nothing and keeps no pointer past a call).
 *
 * What it accepts, line by line (LF ends a line; a CR before it is ignored):
 *   - blank lines; comments: '#' as the first non-blank character;
 *   - "# HELP name text" (the text is not kept) and "# TYPE name type" with type one of
 *     counter, gauge, histogram, summary, untyped; the name must be a metric name;
 *   - samples: name [ "{" label="value" { "," label="value" } [ "," ] "}" ] value
 *     [ timestamp ], blanks (spaces, tabs) allowed between the parts;
 *       name   [a-zA-Z_:][a-zA-Z0-9_:]*    label  [a-zA-Z_][a-zA-Z0-9_]*
 *       value  a decimal float as Go's ParseFloat reads it: 1, -2.5e3, NaN, +Inf, -Inf,
 *              Inf (hexadecimal floats and spellings past 127 characters are refused)
 *       label values escape \\, \" and \n (nothing else); a label appears once per sample
 *       timestamp  an integer, ms since the epoch (kept, not interpreted).
 * A sample belongs to the family of the last # TYPE line when its name is that family's
 * name, or for a histogram the family's _bucket / _sum / _count, for a summary its _sum /
 * _count, for a counter also family + "_total" (OpenMetrics' spelling, which Prometheus'
 * own parser accepts too); otherwise it is untyped and its own family. A histogram's
 * _bucket sample must carry an le label that is a float.
 * Refused, with "line N: what": an invalid name, a bad escape, an unterminated label value,
 * a missing or malformed value, garbage after the timestamp, an unknown TYPE, a NUL byte,
 * more than PROM_MAX_LABELS labels, a duplicated label. Not checked (it needs memory of
 * every family): a family declared twice, or interleaved with another.
 * Numbers are not limited: a value may be NaN or infinite; the caller decides. */
#ifndef STALLSCOPE_PROM_H
#define STALLSCOPE_PROM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROM_MAX_LABELS 32
#define PROM_MAX_NAME 256 /* a # TYPE family name, NUL included */

typedef enum prom_type {
    PROM_UNTYPED = 0,
    PROM_COUNTER,
    PROM_GAUGE,
    PROM_HISTOGRAM,
    PROM_SUMMARY
} prom_type;

/* Slices of the parsed line: valid until the caller's buffer changes. */
typedef struct prom_label {
    const char *name;
    size_t name_len;
    const char *value; /* as written, escapes still in (prom_label_get unescapes) */
    size_t value_len;
} prom_label;

typedef struct prom_sample {
    const char *name;   /* as written: "vllm:iteration_tokens_total_bucket" */
    size_t name_len;
    const char *family; /* the family it belongs to (see above); name when untyped */
    size_t family_len;
    prom_type type;     /* the family's type */
    prom_label labels[PROM_MAX_LABELS];
    int n_labels;
    double value;
    bool has_timestamp;
    int64_t timestamp_ms;
    int line;           /* 1-based */
} prom_sample;

/* What one line may refer back to: the last # TYPE, and where we are. */
typedef struct prom_parser {
    char family[PROM_MAX_NAME];
    prom_type type;
    int line; /* lines parsed so far */
} prom_parser;

void prom_parser_init(prom_parser *p);
/* One line (without its LF; len bytes, no NUL needed). Returns 1 when out holds a sample,
 * 0 for a line without one (blank, comment, HELP, TYPE), -1 with err "line N: ...". */
int prom_parse_line(prom_parser *p, const char *line, size_t len, prom_sample *out, char *err);
/* A whole exposition: on_sample for each sample in order (return non-zero to stop: that
 * value is returned). Stops at the first malformed line: -1 with err. A last line without
 * LF counts. 0 when done. */
int prom_parse(const char *text, size_t len, int (*on_sample)(void *ctx, const prom_sample *s),
               void *ctx, char *err);
/* True when the sample's name is exactly name. */
bool prom_name_is(const prom_sample *s, const char *name);
/* The value of label `name`, unescaped into out (NUL-terminated). Returns its length, or -1
 * when the sample has no such label or out is too small. */
int prom_label_get(const prom_sample *s, const char *name, char *out, size_t size);
const char *prom_type_name(prom_type t);

#endif
