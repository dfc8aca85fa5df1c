/* trace — the readers of request traces (trace.h). Each format is one function of one line;
 * the loaders walk a file's lines and say which line went wrong. */
#include "workload/trace.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "common/err.h"

#define MAX_FIELDS 64
/* Non-blank lines looked at, from the first, to tell a trace's format. */
#define TRACE_SNIFF_LINES 16
/* A trace time at most this far from its origin (seconds): 10 years. Azure's times are
 * dates: checked as such. */
#define MAX_TRACE_S (10.0 * 365 * 86400)

int trace_format_parse(const char *text, trace_format *out, char *err)
{
    static const char *const names[] = {"auto", "azure", "burstgpt", "mooncake", "jsonl"};
    for (int i = 0; i < 5; i++)
        if (strcmp(text, names[i]) == 0) {
            *out = (trace_format)i;
            return 0;
        }
    return err_set(err, "unknown trace format '%s' (auto | azure | burstgpt | mooncake | jsonl)",
                   text);
}

const char *trace_format_name(trace_format f)
{
    switch (f) {
    case TRACE_AUTO:
        return "auto";
    case TRACE_AZURE:
        return "azure";
    case TRACE_BURSTGPT:
        return "burstgpt";
    case TRACE_MOONCAKE:
        return "mooncake";
    case TRACE_JSONL:
        return "jsonl";
    }
    return "?";
}

/* ---- CSV ------------------------------------------------------------------------------------ */

/* A line without its trailing CR. */
static size_t trim_cr(const char *line, size_t len)
{
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == '\n'))
        len--;
    return len;
}

static bool blank(const char *line, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
            return false;
    return true;
}

/* Split a CSV line into fields (start, length), quotes removed from the ends of a quoted
 * field ("" inside it stays as two characters: our fields are names and numbers). Returns
 * the count, or -1 when a quote is not closed or there are more than max fields. */
static int split_csv(const char *line, size_t len, const char **start, size_t *flen, int max)
{
    int n = 0;
    size_t i = 0;
    for (;;) {
        if (n == max)
            return -1;
        if (i < len && line[i] == '"') {
            size_t j = i + 1;
            for (;;) {
                if (j >= len)
                    return -1;
                if (line[j] == '"') {
                    if (j + 1 < len && line[j + 1] == '"') {
                        j += 2;
                        continue;
                    }
                    break;
                }
                j++;
            }
            start[n] = line + i + 1;
            flen[n] = j - i - 1;
            n++;
            i = j + 1;
            if (i < len && line[i] != ',')
                return -1;
        } else {
            size_t j = i;
            while (j < len && line[j] != ',')
                j++;
            start[n] = line + i;
            flen[n] = j - i;
            n++;
            i = j;
        }
        if (i >= len)
            return n;
        i++; /* the comma */
    }
}

/* A field without surrounding blanks. */
static void strip(const char **s, size_t *n)
{
    while (*n > 0 && (**s == ' ' || **s == '\t'))
        (*s)++, (*n)--;
    while (*n > 0 && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
        (*n)--;
}

static bool field_is(const char *s, size_t n, const char *name)
{
    strip(&s, &n);
    size_t k = strlen(name);
    if (n != k)
        return false;
    for (size_t i = 0; i < k; i++) {
        char a = s[i], b = name[i];
        if (a >= 'A' && a <= 'Z')
            a = (char)(a - 'A' + 'a');
        if (b >= 'A' && b <= 'Z')
            b = (char)(b - 'A' + 'a');
        if (a != b)
            return false;
    }
    return true;
}

/* A field as a NUL-terminated copy (blanks stripped); false when too long for buf. */
static bool field_text(const char *s, size_t n, char *buf, size_t size)
{
    strip(&s, &n);
    if (n >= size)
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return true;
}

/* A token count: a whole number in [lo, TRACE_MAX_TOKENS] ("12", also "12.0"). */
static int parse_tokens(const char *s, size_t n, const char *what, int lo, int32_t *out, char *err)
{
    char buf[48];
    if (!field_text(s, n, buf, sizeof buf))
        return err_set(err, "%s: too long for a token count", what);
    if (!buf[0])
        return err_set(err, "%s: empty, not a token count", what);
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (*end || errno || !isfinite(v) || v != floor(v))
        return err_set(err, "%s: '%s' is not a token count", what, buf);
    if (v < lo || v > TRACE_MAX_TOKENS)
        return err_set(err, "%s: %s is out of range [%d, %d]", what, buf, lo, TRACE_MAX_TOKENS);
    *out = (int32_t)v;
    return 0;
}

/* Seconds (or another unit: scale ns per unit) from the trace's origin: finite, >= 0. */
static int parse_time(const char *s, size_t n, const char *what, double ns_per_unit, int64_t *out,
                      char *err)
{
    char buf[48];
    if (!field_text(s, n, buf, sizeof buf) || !buf[0])
        return err_set(err, "%s: empty or too long for a time", what);
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (*end || errno || !isfinite(v))
        return err_set(err, "%s: '%s' is not a number", what, buf);
    if (v < 0)
        return err_set(err, "%s: %s is negative", what, buf);
    double ns = v * ns_per_unit;
    if (ns > MAX_TRACE_S * 1e9)
        return err_set(err, "%s: %s is more than 10 years from the trace's origin", what, buf);
    *out = (int64_t)llround(ns);
    return 0;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const int64_t yoe = y - era * 400;
    const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static bool digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* "YYYY-MM-DD HH:MM:SS[.fraction]" (or a 'T' between), UTC, to ns since the epoch. */
static int parse_datetime(const char *s, size_t n, int64_t *out, char *err)
{
    char buf[64];
    if (!field_text(s, n, buf, sizeof buf))
        return err_set(err, "TIMESTAMP: too long for a date and time");
    size_t len = strlen(buf);
    int y, mo, d, h, mi, sec;
    if (len < 19 || !digits(buf, 4, &y) || buf[4] != '-' || !digits(buf + 5, 2, &mo) ||
        buf[7] != '-' || !digits(buf + 8, 2, &d) || (buf[10] != ' ' && buf[10] != 'T') ||
        !digits(buf + 11, 2, &h) || buf[13] != ':' || !digits(buf + 14, 2, &mi) ||
        buf[16] != ':' || !digits(buf + 17, 2, &sec))
        return err_set(err, "TIMESTAMP: '%s' is not a date and time (YYYY-MM-DD HH:MM:SS[.f])",
                       buf);
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (y < 1970 || y > 2200 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] ||
        (mo == 2 && d == 29 && !leap) || h > 23 || mi > 59 || sec > 60)
        return err_set(err, "TIMESTAMP: '%s' is not a valid date and time", buf);
    int64_t frac_ns = 0;
    size_t i = 19;
    if (i < len && buf[i] == '.') {
        int64_t scale = 100000000;
        i++;
        if (i >= len)
            return err_set(err, "TIMESTAMP: '%s': no digits after the point", buf);
        for (; i < len && buf[i] >= '0' && buf[i] <= '9'; i++) {
            frac_ns += (buf[i] - '0') * scale; /* digits past ns are dropped */
            scale /= 10;
        }
    }
    /* A zone suffix of UTC only: "Z" or "+00:00". */
    if (i < len && !(strcmp(buf + i, "Z") == 0 || strcmp(buf + i, "+00:00") == 0))
        return err_set(err, "TIMESTAMP: '%s': unexpected '%s' after the time", buf, buf + i);
    int64_t days = days_from_civil(y, mo, d);
    *out = ((days * 86400 + h * 3600 + mi * 60 + sec) * 1000000000LL) + frac_ns;
    return 0;
}

int trace_csv_header(trace_format f, const char *line, size_t len, trace_csv *out, char *err)
{
    const char *start[MAX_FIELDS];
    size_t flen[MAX_FIELDS];
    len = trim_cr(line, len);
    int n = split_csv(line, len, start, flen, MAX_FIELDS);
    if (n < 0)
        return err_set(err, "the header is not a CSV line of at most %d columns", MAX_FIELDS);
    const char *t, *p, *a;
    if (f == TRACE_AZURE)
        t = "TIMESTAMP", p = "ContextTokens", a = "GeneratedTokens";
    else if (f == TRACE_BURSTGPT)
        t = "Timestamp", p = "Request tokens", a = "Response tokens";
    else
        return err_set(err, "%s is not a CSV format", trace_format_name(f));
    *out = (trace_csv){-1, -1, -1};
    for (int i = 0; i < n; i++) {
        if (out->t < 0 && field_is(start[i], flen[i], t))
            out->t = i;
        else if (out->prompt < 0 && field_is(start[i], flen[i], p))
            out->prompt = i;
        else if (out->answer < 0 && field_is(start[i], flen[i], a))
            out->answer = i;
    }
    const char *missing = out->t < 0 ? t : out->prompt < 0 ? p : out->answer < 0 ? a : NULL;
    if (missing)
        return err_set(err, "the header has no '%s' column (a %s trace has %s,%s,%s)", missing,
                       trace_format_name(f), t, p, a);
    return 0;
}

static int parse_csv_row(trace_format f, const trace_csv *csv, const char *line, size_t len,
                         trace_row *row, char *err)
{
    const char *start[MAX_FIELDS];
    size_t flen[MAX_FIELDS];
    int n = split_csv(line, len, start, flen, MAX_FIELDS);
    if (n < 0)
        return err_set(err, "not a CSV row (an unclosed quote, or more than %d fields)",
                       MAX_FIELDS);
    int need = csv->t;
    if (csv->prompt > need)
        need = csv->prompt;
    if (csv->answer > need)
        need = csv->answer;
    if (n <= need)
        return err_set(err, "%d field%s, the header names %d", n, n == 1 ? "" : "s", need + 1);
    memset(row, 0, sizeof *row);
    if (f == TRACE_AZURE) {
        if (parse_datetime(start[csv->t], flen[csv->t], &row->t_ns, err) != 0 ||
            parse_tokens(start[csv->prompt], flen[csv->prompt], "ContextTokens", 1,
                         &row->prompt_tokens, err) != 0 ||
            parse_tokens(start[csv->answer], flen[csv->answer], "GeneratedTokens", 1,
                         &row->max_tokens, err) != 0)
            return TRACE_BAD;
        return TRACE_ROW;
    }
    int32_t response = 0;
    if (parse_time(start[csv->t], flen[csv->t], "Timestamp", 1e9, &row->t_ns, err) != 0 ||
        parse_tokens(start[csv->answer], flen[csv->answer], "Response tokens", 0, &response,
                     err) != 0)
        return TRACE_BAD;
    if (response == 0)
        return TRACE_FAILED; /* BurstGPT logs a failed request with no response */
    row->max_tokens = response;
    if (parse_tokens(start[csv->prompt], flen[csv->prompt], "Request tokens", 1,
                     &row->prompt_tokens, err) != 0)
        return TRACE_BAD;
    return TRACE_ROW;
}

/* ---- JSON lines ----------------------------------------------------------------------------- */

static int json_tokens(const json_t *obj, const char *key, int32_t *out, char *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v)
        return err_set(err, "no \"%s\"", key);
    double x;
    if (json_is_integer(v))
        x = (double)json_integer_value(v);
    else if (json_is_real(v))
        x = json_real_value(v);
    else
        return err_set(err, "\"%s\" is not a number", key);
    if (x != floor(x))
        return err_set(err, "\"%s\": %g is not a whole number of tokens", key, x);
    if (x < 1 || x > TRACE_MAX_TOKENS)
        return err_set(err, "\"%s\": %.0f is out of range [1, %d]", key, x, TRACE_MAX_TOKENS);
    *out = (int32_t)x;
    return 0;
}

static int json_time(const json_t *obj, const char *key, double ns_per_unit, int64_t *out,
                     char *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v)
        return err_set(err, "no \"%s\"", key);
    if (!json_is_number(v))
        return err_set(err, "\"%s\" is not a number", key);
    double x = json_number_value(v);
    if (!isfinite(x) || x < 0)
        return err_set(err, "\"%s\": %g is negative", key, x);
    if (x * ns_per_unit > MAX_TRACE_S * 1e9)
        return err_set(err, "\"%s\": %g is more than 10 years from the trace's origin", key, x);
    *out = (int64_t)llround(x * ns_per_unit);
    return 0;
}

/* A prompt given as text: its ids by the target's tokenizer (--tokenizer), else one token
 * per 4 bytes; at least 1. */
static int32_t prompt_text_tokens(const workload_tokenizer *tok, const char *text, size_t bytes)
{
    int64_t t = tok ? workload_tokenizer_count(tok, text, bytes) : (int64_t)(bytes + 3) / 4;
    if (t < 1)
        t = 1;
    return t > TRACE_MAX_TOKENS ? TRACE_MAX_TOKENS : (int32_t)t;
}

/* Mooncake's "hash_ids": the prompt's 512-token blocks by identity (rows sharing a prefix
 * share its first ids). Kept in texts as int64s; absent or without a sink: none. */
static int mooncake_hash_ids(const json_t *obj, buf *texts, trace_row *row, char *err)
{
    const json_t *ids = json_object_get(obj, "hash_ids");
    if (!ids)
        return 0;
    if (!json_is_array(ids))
        return err_set(err, "\"hash_ids\" is not an array");
    const size_t n = json_array_size(ids);
    if (n > TRACE_MAX_HASH_IDS)
        return err_set(err, "\"hash_ids\" has %zu ids (at most %d)", n, TRACE_MAX_HASH_IDS);
    for (size_t i = 0; i < n; i++)
        if (!json_is_integer(json_array_get(ids, i)))
            return err_set(err, "\"hash_ids\"[%zu] is not an integer", i);
    if (!texts || n == 0)
        return 0;
    row->hash_off = (int64_t)texts->len;
    row->n_hash_ids = (int32_t)n;
    for (size_t i = 0; i < n; i++) {
        const int64_t id = (int64_t)json_integer_value(json_array_get(ids, i));
        if (buf_append(texts, &id, sizeof id) != 0)
            return err_set(err, "out of memory keeping hash_ids");
    }
    return 0;
}

static int parse_json_row(trace_format f, const char *line, size_t len,
                          const workload_tokenizer *tok, buf *texts, trace_row *row, char *err)
{
    json_error_t jerr;
    json_t *obj = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!obj)
        return err_set(err, "not JSON: %s (column %d)", jerr.text, jerr.column);
    int rc = TRACE_BAD;
    memset(row, 0, sizeof *row);
    if (!json_is_object(obj)) {
        err_set(err, "not a JSON object");
        goto done;
    }
    if (f == TRACE_MOONCAKE) {
        if (json_time(obj, "timestamp", 1e6, &row->t_ns, err) != 0 ||
            json_tokens(obj, "input_length", &row->prompt_tokens, err) != 0 ||
            json_tokens(obj, "output_length", &row->max_tokens, err) != 0 ||
            mooncake_hash_ids(obj, texts, row, err) != 0)
            goto done;
    } else {
        if (json_time(obj, "t", 1e9, &row->t_ns, err) != 0 ||
            json_tokens(obj, "max_tokens", &row->max_tokens, err) != 0)
            goto done;
        const json_t *text = json_object_get(obj, "prompt");
        if (text && !json_is_string(text)) {
            err_set(err, "\"prompt\" is not a string");
            goto done;
        }
        if (json_object_get(obj, "prompt_tokens")) {
            if (json_tokens(obj, "prompt_tokens", &row->prompt_tokens, err) != 0)
                goto done;
        } else if (text) {
            row->prompt_tokens =
                prompt_text_tokens(tok, json_string_value(text), json_string_length(text));
        } else {
            err_set(err, "neither \"prompt_tokens\" nor \"prompt\"");
            goto done;
        }
        if (text && texts && json_string_length(text) > 0) {
            row->text_off = (int64_t)texts->len;
            row->text_len = (int32_t)json_string_length(text); /* < TRACE_MAX_LINE_BYTES */
            if (buf_append(texts, json_string_value(text), json_string_length(text)) != 0) {
                err_set(err, "out of memory keeping the prompt text");
                goto done;
            }
        }
    }
    rc = TRACE_ROW;
done:
    json_decref(obj);
    return rc;
}

trace_format trace_sniff(const char *line, size_t len)
{
    return trace_sniff_why(line, len, NULL);
}

trace_format trace_sniff_why(const char *line, size_t len, char *why)
{
    len = trim_cr(line, len);
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    if (i < len && line[i] == '{') {
        json_error_t jerr;
        json_t *obj = json_loadb(line, len, 0, &jerr);
        trace_format f = TRACE_AUTO;
        if (!obj)
            err_set(why, "not JSON: %s (column %d)", jerr.text, jerr.column);
        else if (!json_is_object(obj))
            err_set(why, "not a JSON object");
        else if (json_object_get(obj, "input_length") || json_object_get(obj, "output_length"))
            f = TRACE_MOONCAKE;
        else if (json_object_get(obj, "t") || json_object_get(obj, "prompt_tokens") ||
                 json_object_get(obj, "prompt"))
            f = TRACE_JSONL;
        else
            err_set(why, "a JSON object without the keys of Mooncake or plain JSONL");
        json_decref(obj);
        return f;
    }
    /* A CSV header: the format whose columns it names, or why it is neither. */
    char missing[2][ERR_LEN];
    int named[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        trace_csv csv = {-1, -1, -1};
        const trace_format f = i == 0 ? TRACE_AZURE : TRACE_BURSTGPT;
        if (trace_csv_header(f, line, len, &csv, missing[i]) == 0)
            return f;
        named[i] = (csv.t >= 0) + (csv.prompt >= 0) + (csv.answer >= 0);
    }
    if (named[0] > 0 || named[1] > 0)
        err_set(why, "%s", missing[named[1] > named[0] ? 1 : 0]); /* the nearer header's gap */
    else
        err_set(why, "neither a JSON object nor an Azure or BurstGPT CSV header");
    return TRACE_AUTO;
}

int trace_parse_line(trace_format f, const trace_csv *csv, const char *line, size_t len,
                     const workload_tokenizer *tok, buf *texts, trace_row *row, char *err)
{
    len = trim_cr(line, len);
    if (blank(line, len))
        return TRACE_EMPTY;
    switch (f) {
    case TRACE_AZURE:
    case TRACE_BURSTGPT:
        if (!csv)
            return err_set(err, "a CSV row without its header");
        return parse_csv_row(f, csv, line, len, row, err);
    case TRACE_MOONCAKE:
    case TRACE_JSONL:
        return parse_json_row(f, line, len, tok, texts, row, err);
    case TRACE_AUTO:
        break;
    }
    return err_set(err, "no trace format");
}

/* ---- whole files ------------------------------------------------------------------------------ */

/* The next line of data[*at, len): its start and length (no newline); false at the end. */
static bool next_line(const char *data, size_t len, size_t *at, const char **line, size_t *n)
{
    if (*at >= len)
        return false;
    const char *s = data + *at;
    const char *nl = memchr(s, '\n', len - *at);
    *line = s;
    *n = nl ? (size_t)(nl - s) : len - *at;
    *at += *n + (nl ? 1 : 0);
    return true;
}

static int grow_rows(trace_row **rows, int64_t n, int64_t *cap)
{
    if (n < *cap)
        return 0;
    int64_t c = *cap ? *cap * 2 : 1024;
    trace_row *p = realloc(*rows, (size_t)c * sizeof *p);
    if (!p)
        return -1;
    *rows = p;
    *cap = c;
    return 0;
}

/* A NUL byte: the file is not text (a binary file, /dev/zero). One wording for the reader
 * and the loader. */
static int nul_error(const char *name, int64_t lineno, size_t column, char *err)
{
    return err_set(err, "%s:%lld: a NUL byte (column %zu): not a text file", name,
                   (long long)lineno, column);
}

/* The format of a trace from its first non-blank lines (data from `at`, that line numbered
 * lineno): the first of TRACE_SNIFF_LINES that tells one. *told: the line that told.
 * TRACE_AUTO when none does. */
static trace_format guess_format(const char *data, size_t len, size_t at, int64_t lineno,
                                 int64_t *told)
{
    const char *line;
    size_t llen;
    int looked = 0;
    for (lineno--; looked < TRACE_SNIFF_LINES && next_line(data, len, &at, &line, &llen);) {
        lineno++;
        if (blank(line, trim_cr(line, llen)))
            continue;
        looked++;
        trace_format f = trace_sniff(line, llen);
        if (f != TRACE_AUTO) {
            *told = lineno;
            return f;
        }
    }
    return TRACE_AUTO;
}

static void drop_rows(trace_row **rows, int64_t *n)
{
    free(*rows);
    *rows = NULL;
    *n = 0;
}

int trace_load_buffer(const char *name, const char *data, size_t len, trace_format format,
                      bool skip_bad, const workload_tokenizer *tok, buf *texts, trace_row **rows,
                      int64_t *n, trace_counts *counts, char *err)
{
    *rows = NULL;
    *n = 0;
    memset(counts, 0, sizeof *counts);
    int64_t cap = 0, lineno = 0, first_line = 0;
    size_t at = 0, first_at = 0;
    const char *line;
    size_t llen;
    trace_csv csv;
    bool have_header = false;
    char why[ERR_LEN];
    /* When the format was guessed, every error says so: " (read as F, guessed from line L)". */
    char guessed[64] = "";
    if (len >= 3 && memcmp(data, "\xef\xbb\xbf", 3) == 0)
        at = 3; /* a UTF-8 byte order mark (spreadsheet exports) */
    /* The first non-blank line: a CSV format's header, a JSON format's first row. */
    while (next_line(data, len, &at, &line, &llen)) {
        lineno++;
        const char *nul = memchr(line, '\0', llen);
        if (nul)
            return nul_error(name, lineno, (size_t)(nul - line) + 1, err);
        if (!blank(line, trim_cr(line, llen))) {
            first_line = lineno;
            first_at = (size_t)(line - data);
            break;
        }
    }
    if (!first_line)
        return err_set(err, "%s: the trace is empty", name);
    /* line, llen: that first line */
    if (format == TRACE_AUTO) {
        int64_t told = 0;
        format = guess_format(data, len, first_at, first_line, &told);
        if (format == TRACE_AUTO) {
            trace_sniff_why(line, llen, why);
            return err_set(err, "%s:%lld: %s; the first lines tell no format: give --trace-format",
                           name, (long long)first_line, why);
        }
        snprintf(guessed, sizeof guessed, " (read as %s, guessed from line %lld)",
                 trace_format_name(format), (long long)told);
    }
    counts->format = format;
    if (format == TRACE_AZURE || format == TRACE_BURSTGPT) {
        if (trace_csv_header(format, line, llen, &csv, why) != 0)
            return err_set(err, "%s:%lld: %s%s", name, (long long)first_line, why, guessed);
        have_header = true;
    } else {
        at = first_at; /* a JSON format: this line is a row */
        lineno = first_line - 1;
    }
    while (next_line(data, len, &at, &line, &llen)) {
        lineno++;
        if (lineno > INT32_MAX) {
            drop_rows(rows, n);
            return err_set(err, "%s: more than %d lines", name, INT32_MAX);
        }
        const char *nul = memchr(line, '\0', llen);
        if (nul) {
            drop_rows(rows, n);
            return nul_error(name, lineno, (size_t)(nul - line) + 1, err);
        }
        trace_row row;
        int rc = trace_parse_line(format, have_header ? &csv : NULL, line, llen, tok, texts, &row,
                                  why);
        if (rc == TRACE_EMPTY)
            continue;
        counts->lines++;
        if (rc == TRACE_FAILED) {
            counts->failed++;
            continue;
        }
        if (rc == TRACE_BAD) {
            if (!skip_bad) {
                drop_rows(rows, n);
                return err_set(err, "%s:%lld: %s%s", name, (long long)lineno, why, guessed);
            }
            if (counts->bad++ == 0)
                snprintf(counts->first_bad, sizeof counts->first_bad, "%.100s:%lld: %.120s", name,
                         (long long)lineno, why);
            continue;
        }
        if (grow_rows(rows, *n, &cap) != 0) {
            drop_rows(rows, n);
            return err_set(err, "out of memory reading %s", name);
        }
        row.line = (int32_t)lineno;
        (*rows)[(*n)++] = row;
    }
    /* Nothing to replay is bad input, like an empty file: never an empty experiment. */
    if (*n == 0 && counts->lines == 0)
        return err_set(err, "%s: no rows after its header (line %lld)", name,
                       (long long)first_line);
    if (*n == 0)
        return err_set(err, "%s: none of its %lld rows can be replayed (%lld bad, %lld failed "
                            "requests)%s%.120s",
                       name, (long long)counts->lines, (long long)counts->bad,
                       (long long)counts->failed, counts->bad ? "; the first bad: " : "",
                       counts->bad ? counts->first_bad : "");
    if (format == TRACE_AZURE) {
        int64_t first = (*rows)[0].t_ns;
        for (int64_t i = 1; i < *n; i++)
            if ((*rows)[i].t_ns < first)
                first = (*rows)[i].t_ns;
        for (int64_t i = 0; i < *n; i++)
            (*rows)[i].t_ns -= first;
    }
    return 0;
}

/* What the reader has seen of a file so far: its lines, for the messages. */
typedef struct read_scan {
    int64_t lineno;    /* the line being read, 1-based */
    size_t line_start; /* its first byte */
} read_scan;

/* The bytes buf[from, to) just read: a NUL byte or a line over TRACE_MAX_LINE_BYTES stops the
 * read at once (/dev/zero is refused after its first megabyte, not after a gigabyte). */
static int scan_chunk(const char *path, const char *buf, size_t from, size_t to, read_scan *sc,
                      char *err)
{
    const char *nul = memchr(buf + from, '\0', to - from);
    const size_t end = nul ? (size_t)(nul - buf) : to;
    for (const char *p = buf + from; (p = memchr(p, '\n', (size_t)(buf + end - p))); p++) {
        if ((size_t)(p - buf) - sc->line_start > TRACE_MAX_LINE_BYTES)
            break;
        sc->lineno++;
        sc->line_start = (size_t)(p - buf) + 1;
    }
    const size_t line_len = (nul ? end : to) - sc->line_start;
    if (line_len > TRACE_MAX_LINE_BYTES)
        return err_set(err, "%s:%lld: a line of more than %d bytes: not a trace (no line of one "
                            "is that long)",
                       path, (long long)sc->lineno, TRACE_MAX_LINE_BYTES);
    if (nul)
        return nul_error(path, sc->lineno, end - sc->line_start + 1, err);
    return 0;
}

int trace_read_file(const char *path, char **data, size_t *len, char *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(err, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return err_set(err, "%s is a directory, not a trace file", path);
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    read_scan sc = {1, 0};
    int rc = buf ? 0 : err_set(err, "out of memory reading %s", path);
    while (rc == 0) {
        if (n == cap) {
            char *grown = realloc(buf, cap * 2 + 1);
            if (!grown) {
                rc = err_set(err, "out of memory reading %s", path);
                break;
            }
            buf = grown;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        if (got == 0) {
            if (ferror(f))
                rc = err_set(err, "cannot read %s: %s", path, strerror(errno));
            break;
        }
        rc = scan_chunk(path, buf, n, n + got, &sc, err);
        n += got;
        if (rc == 0 && n > TRACE_MAX_FILE_BYTES)
            rc = err_set(err, "%s: more than %lld bytes, the most a trace may hold in memory: "
                              "cut it first (head -n)",
                         path, (long long)TRACE_MAX_FILE_BYTES);
    }
    fclose(f);
    if (rc != 0) {
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

int trace_load_file(const char *path, trace_format format, bool skip_bad,
                    const workload_tokenizer *tok, buf *texts, trace_row **rows, int64_t *n,
                    trace_counts *counts, char *err)
{
    char *data;
    size_t len;
    if (trace_read_file(path, &data, &len, err) != 0)
        return -1;
    int rc = trace_load_buffer(path, data, len, format, skip_bad, tok, texts, rows, n, counts,
                               err);
    free(data);
    return rc;
}

int trace_load_values(const char *name, const char *data, size_t len, const char *col,
                      int32_t **values, int64_t *n, char *err)
{
    *values = NULL;
    *n = 0;
    int64_t cap = 0, lineno = 0;
    int column = col && col[0] ? -1 : 0;
    bool first = true;
    size_t at = 0;
    const char *line;
    size_t llen;
    char why[ERR_LEN];
    while (next_line(data, len, &at, &line, &llen)) {
        lineno++;
        llen = trim_cr(line, llen);
        if (blank(line, llen) || line[0] == '#')
            continue;
        const char *start[MAX_FIELDS];
        size_t flen[MAX_FIELDS];
        int nf = split_csv(line, llen, start, flen, MAX_FIELDS);
        if (nf < 0) {
            free(*values);
            *values = NULL;
            return err_set(err, "%s:%lld: not a CSV line", name, (long long)lineno);
        }
        if (first) {
            first = false;
            /* A header names columns: a first field with a letter in it. */
            bool letters = false;
            for (size_t i = 0; i < flen[0]; i++)
                if ((start[0][i] | 0x20) >= 'a' && (start[0][i] | 0x20) <= 'z')
                    letters = true;
            if (letters || column < 0) {
                for (int i = 0; column < 0 && i < nf; i++)
                    if (field_is(start[i], flen[i], col))
                        column = i;
                if (column < 0)
                    return err_set(err, "%s:%lld: no column '%s' in the header", name,
                                   (long long)lineno, col);
                continue;
            }
        }
        if (column < 0)
            return err_set(err, "%s:%lld: a column name needs a header line", name,
                           (long long)lineno);
        int32_t v;
        if (column >= nf || parse_tokens(start[column], flen[column], "value", 1, &v, why) != 0) {
            free(*values);
            *values = NULL;
            *n = 0;
            return err_set(err, "%s:%lld: %s", name, (long long)lineno,
                           column >= nf ? "the column is missing" : why);
        }
        if (*n == cap) {
            int64_t c = cap ? cap * 2 : 1024;
            int32_t *p = realloc(*values, (size_t)c * sizeof *p);
            if (!p) {
                free(*values);
                *values = NULL;
                *n = 0;
                return err_set(err, "out of memory reading %s", name);
            }
            *values = p;
            cap = c;
        }
        (*values)[(*n)++] = v;
    }
    if (*n == 0)
        return err_set(err, "%s: no values", name);
    return 0;
}
