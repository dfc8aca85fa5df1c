/* trace — request traces a user already has, read row by row (docs/guide/traces.md):
 *
 *   azure     Azure LLM inference trace CSV: TIMESTAMP,ContextTokens,GeneratedTokens;
 *             TIMESTAMP a date and time ("2023-11-16 18:15:46.6805900", UTC), made relative
 *             to the earliest row by the loader
 *   burstgpt  BurstGPT CSV: Timestamp,Model,Request tokens,Response tokens,Total tokens,
 *             Log Type; Timestamp in seconds; a row with Response tokens 0 is a failed
 *             request: skipped and counted (TRACE_FAILED)
 *   mooncake  Mooncake JSONL: {"timestamp": ms, "input_length": n, "output_length": m,
 *             "hash_ids": [...]}: hash_ids (optional, at most TRACE_MAX_HASH_IDS integers)
 *             name the prompt's 512-token blocks; other keys ignored
 *   jsonl     {"t": seconds, "prompt_tokens": n, "max_tokens": m}, or "prompt": "text" in
 *             place of (or beside) prompt_tokens: the text is what is sent; its length is
 *             prompt_tokens when given, else counted by the target's tokenizer (--tokenizer),
 *             else estimated as one token per 4 bytes (at least 1)
 *
 * CSV columns are found by name in the header line (any order, extra columns ignored);
 * fields may be quoted. The parsers are pure functions of one line (no allocation but the
 * JSON formats' parse tree, freed before they return, and the prompt texts they append to a
 * sink the caller owns) so a fuzzer can drive them. */
#ifndef STALLSCOPE_TRACE_H
#define STALLSCOPE_TRACE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "workload/tokenizer.h"

typedef enum {
    TRACE_AUTO = 0,
    TRACE_AZURE,
    TRACE_BURSTGPT,
    TRACE_MOONCAKE,
    TRACE_JSONL,
} trace_format;

#define TRACE_MAX_TOKENS (1 << 24)
#define TRACE_MAX_HASH_IDS 65536
/* The reader's limits (trace_read_file): a longer line or a larger file is refused with its
 * line or size, at once, and so is a NUL byte (no text trace has one): a device that never
 * ends (/dev/zero) or a binary file is never read whole. */
#define TRACE_MAX_LINE_BYTES (1 << 20)
#define TRACE_MAX_FILE_BYTES ((int64_t)1 << 30)

/* One request of a trace. */
typedef struct trace_row {
    int64_t t_ns;          /* its time from the trace's origin (azure: since the epoch) */
    int32_t prompt_tokens; /* 1 .. TRACE_MAX_TOKENS */
    int32_t max_tokens;    /* 1 .. TRACE_MAX_TOKENS */
    int32_t line;          /* 1-based line in the file (the loader sets it) */
    int32_t text_len;      /* a JSONL "prompt" text's bytes (0: none, or no sink was given) */
    int64_t text_off;      /* where that text starts in the texts sink */
    int32_t n_hash_ids;    /* a Mooncake row's hash_ids, kept in the texts sink as int64s */
    int64_t hash_off;      /* where they start there (0 ids: none, or no sink was given) */
} trace_row;

/* A CSV header's columns (-1: absent). */
typedef struct trace_csv {
    int t, prompt, answer;
} trace_csv;

/* What a line held. */
enum {
    TRACE_BAD = -1,    /* err says what is wrong */
    TRACE_EMPTY = 0,   /* a blank line */
    TRACE_ROW = 1,     /* *row filled */
    TRACE_FAILED = 2,  /* a failed request the trace records (BurstGPT): skipped, counted */
};

/* "auto" | "azure" | "burstgpt" | "mooncake" | "jsonl". 0, or -1 with err. */
int trace_format_parse(const char *text, trace_format *out, char *err);
const char *trace_format_name(trace_format f);
/* The format a trace's line tells (a CSV header, or a JSON object's keys), TRACE_AUTO when it
 * tells none. */
trace_format trace_sniff(const char *line, size_t len);
/* The same, with why it tells none in why (may be NULL): "not JSON: ... (column N)", a JSON
 * object without a format's keys, or neither JSON nor a CSV header. */
trace_format trace_sniff_why(const char *line, size_t len, char *why);
/* The columns of a CSV format's header line. TRACE_BAD with err naming a missing column. */
int trace_csv_header(trace_format f, const char *line, size_t len, trace_csv *out, char *err);
/* One data line of format f (csv: its header's columns, CSV formats only; a JSONL row's
 * "prompt" text counted by tok, else one token per 4 bytes: tok may be NULL). A non-empty
 * "prompt" text is appended to texts (may be NULL: not kept), its place in row->text_off
 * and text_len (a Mooncake row's hash_ids too, as int64s: hash_off, n_hash_ids); the sink
 * is not NUL-separated, so offsets are all a reader needs. Returns
 * TRACE_ROW, TRACE_EMPTY, TRACE_FAILED or TRACE_BAD (err: what is wrong, without the file
 * and line, which the caller adds). line need not be NUL-terminated; a trailing CR is
 * ignored. */
int trace_parse_line(trace_format f, const trace_csv *csv, const char *line, size_t len,
                     const workload_tokenizer *tok, buf *texts, trace_row *row, char *err);

/* What trace_load_buffer saw. */
typedef struct trace_counts {
    trace_format format;   /* as read (the sniffed one for TRACE_AUTO) */
    int64_t lines;         /* data lines (no header, no blank lines) */
    int64_t bad;           /* bad rows skipped */
    int64_t failed;        /* TRACE_FAILED rows */
    char first_bad[256];   /* "NAME:LINE: why" of the first bad row skipped */
} trace_counts;

/* Every row of a whole file in memory (data, len; name for messages), in file order, each
 * with its line, into *rows (malloc'ed, *n rows; free it). Azure times are made relative to
 * the earliest row. TRACE_AUTO guesses the format from the first of the first 16 non-blank
 * lines that tells one; every error then ends with the guess, " (read as F, guessed from
 * line L)"; when none tells, err names the first line and why. A bad row is -1 with err
 * "NAME:LINE: why", or skipped and counted when skip_bad. A NUL byte is -1 ("not a text
 * file"), skip_bad or not; so is a trace without a row to replay (empty, a header alone, or
 * every row bad or failed), like an empty file. 0, or -1 with err. */
int trace_load_buffer(const char *name, const char *data, size_t len, trace_format format,
                      bool skip_bad, const workload_tokenizer *tok, buf *texts, trace_row **rows,
                      int64_t *n, trace_counts *counts, char *err);
/* The same for a file path. */
int trace_load_file(const char *path, trace_format format, bool skip_bad,
                    const workload_tokenizer *tok, buf *texts, trace_row **rows, int64_t *n,
                    trace_counts *counts, char *err);

/* An empirical length file (workload_dist "empirical:FILE[@COL]"): one integer per line, or
 * the first field of each CSV line, or the column named col ("" : the first); a first line
 * that is not a number is a header; blank lines and lines starting with '#' are skipped.
 * Every value must be in [1, TRACE_MAX_TOKENS]. *values malloc'ed. 0, or -1 with err
 * "NAME:LINE: why". */
int trace_load_values(const char *name, const char *data, size_t len, const char *col,
                      int32_t **values, int64_t *n, char *err);
/* Read a whole file into memory (malloc'ed, NUL-terminated). -1 with err for a file that
 * cannot be opened or read, a directory, a NUL byte or a line over TRACE_MAX_LINE_BYTES
 * ("NAME:LINE: ..."), or more than TRACE_MAX_FILE_BYTES: the read stops there. 0, or -1. */
int trace_read_file(const char *path, char **data, size_t *len, char *err);

#endif
