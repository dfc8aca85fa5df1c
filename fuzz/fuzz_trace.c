/* libFuzzer target: the trace readers (src/workload/trace.c), which read files users hand
 * us, and the length distributions' parser (src/workload/dist.c), which reads --prompt-len.
 *
 * Input: the first byte picks the format (mod 5: auto, azure, burstgpt, mooncake, jsonl) and
 * whether bad rows are skipped (bit 3); the rest is a whole trace file. The contract
 * (trace.h) is checked on what the loader accepts: every row's lengths in
 * [1, TRACE_MAX_TOKENS], its line within the file, times >= 0; when bad rows are skipped,
 * rows + bad + failed = data lines; an error names the input ("fuzz:LINE: ..." or "fuzz: ...").
 * The same bytes go through the one-line parser of every format, the sniffer, the empirical
 * values reader and, up to the first NUL, workload_dist_parse (whose text must format back
 * to a distribution it parses again). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "workload/trace.h"
#include "workload/workload.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_trace: %s\n", what);
    abort();
}

static void check_row(const trace_row *r, int64_t max_line)
{
    if (r->prompt_tokens < 1 || r->prompt_tokens > TRACE_MAX_TOKENS)
        fail("prompt length out of range");
    if (r->max_tokens < 1 || r->max_tokens > TRACE_MAX_TOKENS)
        fail("answer length out of range");
    if (r->t_ns < 0)
        fail("negative time");
    if (max_line >= 0 && (r->line < 1 || r->line > max_line))
        fail("line out of range");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 8192)
        return 0;
    const trace_format format = (trace_format)(data[0] % 5);
    const bool skip = (data[0] & 8) != 0;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    int64_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';

    char err[ERR_LEN];
    trace_row *rows = NULL;
    int64_t n = -1;
    trace_counts counts;
    err[0] = '\0';
    buf texts = {0};
    if (trace_load_buffer("fuzz", text, len, format, skip, NULL, &texts, &rows, &n, &counts,
                          err) == 0) {
        if (n < 0 || (n > 0 && !rows))
            fail("rows");
        for (int64_t i = 0; i < n; i++) {
            check_row(&rows[i], lines);
            if (rows[i].text_len < 0 || rows[i].text_off < 0 ||
                (size_t)rows[i].text_off + (size_t)rows[i].text_len > texts.len)
                fail("a prompt text outside the texts kept");
        }
        if (skip && n + counts.bad + counts.failed != counts.lines)
            fail("rows + bad + failed != lines");
        if (counts.format == TRACE_AUTO)
            fail("read without a format");
    } else {
        if (strnlen(err, sizeof err) == sizeof err ||
            (strncmp(err, "fuzz", 4) != 0 && strncmp(err, "out of memory", 13) != 0))
            fail("an error that does not name the file");
        if (rows)
            fail("rows left on error");
    }
    free(rows);
    buf_free(&texts);

    /* The one-line parsers, on the whole input as one line. */
    trace_csv csv = {0, 1, 2};
    for (int f = TRACE_AZURE; f <= TRACE_JSONL; f++) {
        trace_row row;
        int rc = trace_parse_line((trace_format)f, &csv, text, len, NULL, NULL, &row, err);
        if (rc == TRACE_ROW)
            check_row(&row, -1);
        else if (rc != TRACE_EMPTY && rc != TRACE_FAILED && rc != TRACE_BAD)
            fail("unknown parse result");
        trace_csv header;
        if (f <= TRACE_BURSTGPT &&
            trace_csv_header((trace_format)f, text, len, &header, err) == 0 &&
            (header.t < 0 || header.prompt < 0 || header.answer < 0))
            fail("a header without its columns");
    }
    (void)trace_sniff(text, len);

    int32_t *values = NULL;
    int64_t n_values = 0;
    if (trace_load_values("fuzz", text, len, (data[0] & 16) ? "len" : "", &values, &n_values,
                          err) == 0) {
        if (n_values < 1)
            fail("no values but no error");
        for (int64_t i = 0; i < n_values; i++)
            if (values[i] < 1 || values[i] > TRACE_MAX_TOKENS)
                fail("value out of range");
    }
    free(values);

    /* --prompt-len text, as argv gives it */
    char arg[512];
    size_t alen = strnlen(text, len < sizeof arg - 1 ? len : sizeof arg - 1);
    memcpy(arg, text, alen);
    arg[alen] = '\0';
    workload_dist d, back;
    if (workload_dist_parse(arg, &d, err) == 0) {
        char formatted[320];
        workload_dist_format(&d, formatted, sizeof formatted);
        if (workload_dist_parse(formatted, &back, err) != 0 || back.kind != d.kind ||
            back.a != d.a || (d.kind != WORKLOAD_DIST_EMPIRICAL && back.b != d.b) ||
            back.max != d.max)
            fail("a distribution does not read back as formatted");
        if (d.kind != WORKLOAD_DIST_EMPIRICAL && workload_dist_max(&d) < 1)
            fail("a distribution without a maximum");
    }
    return 0;
}
