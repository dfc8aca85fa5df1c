/* workload/trace: the trace formats read and planned (Azure, BurstGPT, Mooncake, JSONL),
 * bad rows, the window, speed-up, loop and cap, a trace with nothing to replay, the
 * reader's limits, and a run until the trace's end. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/err.h"
#include "workload/trace.h"
#include "workload/workload.h"

#include "scratch_file.h"

static const char *write_file(char *path, size_t size, const char *name, const char *text)
{
    return scratch_file(path, size, "test_trace", name, text);
}

/* n plain JSONL rows: row i at i x every_s seconds, 100 + i x prompt_step prompt tokens, a
 * 4-token answer. */
static void plain_rows(char *text, size_t size, int n, int every_s, int prompt_step)
{
    text[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t used = strlen(text);
        snprintf(text + used, size - used,
                 "{\"t\": %d, \"prompt_tokens\": %d, \"max_tokens\": 4}\n", i * every_s,
                 100 + i * prompt_step);
    }
}

/* ---- traces ------------------------------------------------------------------------------- */

static void trace_config(workload_config *cfg, const char *path, int format)
{
    workload_default(cfg);
    cfg->users = 0;
    cfg->duration_ns = 3600 * CLOCK_NS_PER_S;
    snprintf(cfg->trace, sizeof cfg->trace, "%s", path);
    cfg->trace_format = format;
}

static void expect_arrival(const workload_plan *p, int64_t i, int64_t t_ns, int prompt, int answer)
{
    assert_true(i < p->n_arrivals);
    assert_int_equal(p->arrivals[i].t_ns, t_ns);
    assert_int_equal(p->arrivals[i].prompt_tokens, prompt);
    assert_int_equal(p->arrivals[i].max_tokens, answer);
}

static void test_trace_formats(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[256];
    workload_config cfg;
    workload_plan p;

    write_file(path, sizeof path, "azure.csv",
               "\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\r\n" /* BOM, CRLF */
               "2023-11-16 18:15:46.6805900,4808,10\r\n"
               "2023-11-16 18:15:50.9951690,3180,8\r\n"
               "2023-11-16 18:16:00.0000000,8000,2\r\n");
    for (int f = 0; f < 2; f++) { /* named, then sniffed */
        trace_config(&cfg, path, f ? TRACE_AUTO : TRACE_AZURE);
        if (workload_plan_build(&cfg, &p, err) != 0)
            fail_msg("azure: %s", err);
        assert_int_equal(p.trace.format, TRACE_AZURE);
        assert_int_equal(p.n_arrivals, 3);
        expect_arrival(&p, 0, 0, 4808, 10);
        expect_arrival(&p, 1, 4314579000LL, 3180, 8);
        expect_arrival(&p, 2, 13319410000LL, 8000, 2);
        assert_int_equal(p.arrivals[2].line, 4);
        workload_plan_free(&p);
    }

    write_file(path, sizeof path, "burst.csv",
               "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
               "5,ChatGPT,472,18,490,Conversation log\n"
               "45,GPT-4,1087,0,1087,Conversation log\n"
               "118,\"ChatGPT\",417,30,447,API log\n");
    trace_config(&cfg, path, TRACE_AUTO);
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.trace.format, TRACE_BURSTGPT);
    assert_int_equal(p.n_arrivals, 2);
    assert_int_equal(p.trace.failed, 1); /* Response tokens 0: a failed request, counted */
    expect_arrival(&p, 0, 5 * CLOCK_NS_PER_S, 472, 18);
    expect_arrival(&p, 1, 118 * CLOCK_NS_PER_S, 417, 30);
    workload_plan_free(&p);

    write_file(path, sizeof path, "moon.jsonl",
               "{\"timestamp\": 0, \"input_length\": 6955, \"output_length\": 52, "
               "\"hash_ids\": [46, 47, 48]}\n"
               "{\"timestamp\": 1500, \"input_length\": 600, \"output_length\": 7, "
               "\"hash_ids\": []}\n");
    trace_config(&cfg, path, TRACE_AUTO);
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.trace.format, TRACE_MOONCAKE);
    expect_arrival(&p, 0, 0, 6955, 52);
    expect_arrival(&p, 1, 1500 * CLOCK_NS_PER_MS, 600, 7);
    workload_plan_free(&p);

    /* plain JSONL, out of order: sorted by time; a text prompt's length is estimated */
    write_file(path, sizeof path, "plain.jsonl",
               "{\"t\": 2.5, \"prompt_tokens\": 100, \"max_tokens\": 20}\n"
               "\n"
               "{\"t\": 0.5, \"prompt\": \"twelve bytes\", \"max_tokens\": 5}\n");
    trace_config(&cfg, path, TRACE_AUTO);
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.trace.format, TRACE_JSONL);
    expect_arrival(&p, 0, 500 * CLOCK_NS_PER_MS, 3, 5);
    expect_arrival(&p, 1, 2500 * CLOCK_NS_PER_MS, 100, 20);
    assert_int_equal(p.arrivals[0].line, 3);
    workload_plan_free(&p);
    unlink(path);
}

/* Each format's bad rows: FILE:LINE: what is wrong; with skip_bad_rows skipped and counted. */
static void test_trace_bad_rows(void **state)
{
    (void)state;
    struct {
        const char *name, *text, *why;
        int line;
    } cases[] = {
        {"a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\n"
                  "2023-13-16 18:15:47,10,2\n2023-11-16 18:15:48,10,2\n",
         "not a valid date", 3},
        {"a3.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-02-29 18:15:46,10,2\n"
                   "2023-02-29 18:15:47,10,2\n2024-02-29 18:15:48,10,2\n",
         "not a valid date", 3},
        {"a2.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\n"
                   "2023-11-16 18:15:47,ten,2\n2023-11-16 18:15:48,10,2\n",
         "ContextTokens", 3},
        {"b.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                  "5,ChatGPT,472,18,490,x\n6,ChatGPT,472\n7,ChatGPT,10,1,11,x\n",
         "3 fields", 3},
        {"b2.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                   "-5,ChatGPT,472,18,490,x\n7,ChatGPT,10,1,11,x\n",
         "negative", 2},
        {"m.jsonl", "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n"
                    "{\"timestamp\": 10, \"input_length\": 0, \"output_length\": 1}\n"
                    "{\"timestamp\": 20, \"input_length\": 5, \"output_length\": 1}\n",
         "input_length", 2},
        {"j.jsonl", "{\"t\": 0, \"prompt_tokens\": 5, \"max_tokens\": 1}\n"
                    "{\"t\": 1, \"prompt_tokens\": 5, \"max_tokens\": 1\n"
                    "{\"t\": 2, \"prompt_tokens\": 5, \"max_tokens\": 1}\n",
         "not JSON", 2},
        {"j2.jsonl", "{\"t\": 0, \"prompt_tokens\": 5, \"max_tokens\": 1}\n"
                     "{\"t\": 1, \"max_tokens\": 1}\n"
                     "{\"t\": 2, \"prompt_tokens\": 5, \"max_tokens\": 1}\n",
         "neither", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[ERR_LEN] = "", path[256], want[320];
        write_file(path, sizeof path, cases[i].name, cases[i].text);
        workload_config cfg;
        trace_config(&cfg, path, TRACE_AUTO);
        workload_plan p;
        assert_int_equal(workload_plan_build(&cfg, &p, err), -1);
        snprintf(want, sizeof want, "%s:%d: ", path, cases[i].line);
        if (!strstr(err, want) || !strstr(err, cases[i].why))
            fail_msg("%s: '%s' lacks '%s' or '%s'", cases[i].name, err, want, cases[i].why);
        cfg.skip_bad_rows = true;
        if (workload_plan_build(&cfg, &p, err) != 0)
            fail_msg("%s skipping: %s", cases[i].name, err);
        assert_int_equal(p.trace.bad, 1);
        assert_int_equal(p.n_arrivals, p.trace.lines - 1);
        assert_non_null(strstr(p.trace.first_bad, want));
        workload_plan_free(&p);
        unlink(path);
    }
    /* a file whose format cannot be told, and a missing column */
    char err[ERR_LEN] = "", path[256];
    workload_config cfg;
    workload_plan p;
    write_file(path, sizeof path, "what.csv", "a,b,c\n1,2,3\n");
    trace_config(&cfg, path, TRACE_AUTO);
    assert_int_equal(workload_plan_build(&cfg, &p, err), -1);
    assert_non_null(strstr(err, "--trace-format"));
    trace_config(&cfg, path, TRACE_AZURE);
    assert_int_equal(workload_plan_build(&cfg, &p, err), -1);
    assert_non_null(strstr(err, "no 'TIMESTAMP' column"));
    unlink(path);
}

/* --from/--to (re-based to 0), --speedup, --loop, --duration and --max-requests. */
static void test_trace_window_speedup_loop_cap(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[256], text[1024];
    plain_rows(text, sizeof text, 10, 1, 1);
    write_file(path, sizeof path, "win.jsonl", text);
    workload_config cfg;
    trace_config(&cfg, path, TRACE_JSONL);
    cfg.trace_from_ns = 2 * CLOCK_NS_PER_S;
    cfg.trace_to_ns = 6 * CLOCK_NS_PER_S;
    cfg.speedup = 2;
    cfg.duration_ns = 5 * CLOCK_NS_PER_S;
    workload_plan p;
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    /* rows at 2, 3, 4, 5 s -> 0, 1, 2, 3 s -> 0, 0.5, 1, 1.5 s */
    assert_int_equal(p.n_arrivals, 4);
    assert_int_equal(p.trace.outside, 6);
    for (int i = 0; i < 4; i++)
        expect_arrival(&p, i, i * 500 * CLOCK_NS_PER_MS, 102 + i, 4);
    workload_plan_free(&p);
    /* looped: one pass lasts the window, 4 s / 2 = 2 s: passes at 0, 2, 4 s; the third is
     * cut at the 5 s duration */
    cfg.trace_loop = true;
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.n_arrivals, 10);
    assert_int_equal(p.trace.loops, 3);
    assert_int_equal(p.trace.after_end, 2);
    expect_arrival(&p, 4, 2 * CLOCK_NS_PER_S, 102, 4);
    expect_arrival(&p, 9, 4500 * CLOCK_NS_PER_MS, 103, 4);
    workload_plan_free(&p);
    cfg.max_requests = 7;
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.n_arrivals, 7);
    workload_plan_free(&p);
    /* without a window, a looped pass lasts to the last row plus the mean gap: 10 s */
    trace_config(&cfg, path, TRACE_JSONL);
    cfg.trace_loop = true;
    cfg.duration_ns = 25 * CLOCK_NS_PER_S;
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.n_arrivals, 25);
    expect_arrival(&p, 10, 10 * CLOCK_NS_PER_S, 100, 4);
    workload_plan_free(&p);
    unlink(path);
}

/* Issue 22, defect 8: a trace with nothing to replay is an error like an empty file (it
 * ran an empty experiment); a malformed first JSON line says what is wrong with it and the
 * format guessed from the next (it said "cannot tell the trace's format"); a NUL byte is not
 * text. Each error names the file (and the line). */
static void test_trace_nothing_to_replay(void **state)
{
    (void)state;
    struct {
        const char *name, *text, *want;
        bool skip;
    } cases[] = {
        {"h.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n",
         ": no rows after its header (line 1)", false},
        {"h2.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\r\n\r\n\n", "no rows after its header",
         false},
        {"f.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                  "5,ChatGPT,472,0,472,x\n",
         "none of its 1 rows can be replayed (0 bad, 1 failed", false},
        {"b.jsonl", "{\"t\": -1, \"prompt_tokens\": 5, \"max_tokens\": 1}\n",
         "none of its 1 rows can be replayed (1 bad, 0 failed requests); the first bad: ", true},
        {"m.jsonl", "{\"t\": 0.1, \"prompt_tokens\": 5, \"max_tokens\": 1\n"
                    "{\"t\": 0.2, \"prompt_tokens\": 5, \"max_tokens\": 1}\n",
         ":1: not JSON: '}' expected near end of file (column 46) (read as jsonl, guessed from "
         "line 2)", false},
        {"k.jsonl", "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n"
                    "{\"t\": 1, \"prompt_tokens\": 5, \"max_tokens\": 1}\n",
         ":2: no \"timestamp\" (read as mooncake, guessed from line 1)", false},
        {"w.jsonl", "{\"when\": 1}\n", ":1: a JSON object without the keys of Mooncake or plain "
                                      "JSONL; the first lines tell no format: give --trace-format",
         false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[ERR_LEN] = "", path[256];
        write_file(path, sizeof path, cases[i].name, cases[i].text);
        workload_config cfg;
        trace_config(&cfg, path, TRACE_AUTO);
        cfg.skip_bad_rows = cases[i].skip;
        workload_plan p;
        assert_int_equal(workload_plan_build(&cfg, &p, err), -1);
        if (strncmp(err, path, strlen(path)) != 0 || !strstr(err, cases[i].want))
            fail_msg("%s: '%s' lacks '%s'", cases[i].name, err, cases[i].want);
        unlink(path);
    }
    /* A NUL byte: not a text file, skipping bad rows or not (a CSV number would end there). */
    static const char nul[] = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                              "2023-11-16 18:15:46,10\0,2\n";
    char err[ERR_LEN] = "", path[256];
    snprintf(path, sizeof path, "/tmp/test_trace_%d_nul.csv", (int)getpid());
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(nul, 1, sizeof nul - 1, f);
    fclose(f);
    trace_row *rows;
    int64_t n;
    trace_counts counts;
    for (int skip = 0; skip < 2; skip++) {
        assert_int_equal(trace_load_file(path, TRACE_AUTO, skip, NULL, NULL, &rows, &n, &counts, err), -1);
        assert_non_null(strstr(err, ":2: a NUL byte (column 23): not a text file"));
        assert_int_equal(trace_load_buffer("buf", nul, sizeof nul - 1, TRACE_AUTO, skip, NULL, NULL, &rows,
                                           &n, &counts, err),
                         -1);
        assert_string_equal(err, "buf:2: a NUL byte (column 23): not a text file");
        assert_null(rows);
    }
    unlink(path);
}

/* The reader stops at once: a line over TRACE_MAX_LINE_BYTES, a NUL byte (/dev/zero: it read
 * a gigabyte before), a directory. */
static void test_trace_read_limits(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[256];
    char *data = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "/tmp/test_trace_%d_long.jsonl", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"t\": 0, \"prompt_tokens\": 5, \"max_tokens\": 1}\n{\"t\": 1, \"prompt\": \"", f);
    for (int i = 0; i < TRACE_MAX_LINE_BYTES / 64 + 1; i++)
        fputs("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", f);
    fputs("\", \"max_tokens\": 1}\n", f);
    fclose(f);
    assert_int_equal(trace_read_file(path, &data, &len, err), -1);
    assert_non_null(strstr(err, ":2: a line of more than 1048576 bytes"));
    unlink(path);
    if (access("/dev/zero", R_OK) == 0) {
        assert_int_equal(trace_read_file("/dev/zero", &data, &len, err), -1);
        assert_string_equal(err, "/dev/zero:1: a NUL byte (column 1): not a text file");
    }
    assert_int_equal(trace_read_file("/tmp", &data, &len, err), -1);
    assert_string_equal(err, "/tmp is a directory, not a trace file");
    /* just under the line limit, no newline at the end: read whole */
    f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < TRACE_MAX_LINE_BYTES; i++)
        fputc('x', f);
    fclose(f);
    assert_int_equal(trace_read_file(path, &data, &len, err), 0);
    assert_int_equal(len, TRACE_MAX_LINE_BYTES);
    free(data);
    unlink(path);
}

/* A window or a duration that keeps no row: an error saying so, not an empty experiment. */
static void test_trace_window_keeps_nothing(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[256];
    write_file(path, sizeof path, "w.jsonl",
               "{\"t\": 10, \"prompt_tokens\": 5, \"max_tokens\": 1}\n"
               "{\"t\": 12, \"prompt_tokens\": 5, \"max_tokens\": 1}\n");
    workload_config cfg;
    trace_config(&cfg, path, TRACE_AUTO);
    cfg.trace_to_ns = 5 * CLOCK_NS_PER_S;
    workload_plan p;
    assert_int_equal(workload_plan_build(&cfg, &p, err), -1);
    assert_non_null(strstr(err, ": all 2 rows are outside --from/--to (they span 10.000 to "
                                "12.000 s of trace time)"));
    trace_config(&cfg, path, TRACE_AUTO);
    cfg.duration_ns = 8 * CLOCK_NS_PER_S;
    assert_int_equal(workload_plan_build(&cfg, &p, err), -1);
    assert_non_null(strstr(err, ": every row is at or after --duration (8.000 s; the first at "
                                "10.000 s of the run)"));
    unlink(path);
}

/* Issue 22, defect 10: --trace without --duration replays the whole (windowed) trace (it
 * stopped at 40 s): every row planned, the duration its last send + the cap, which the
 * runners end at once the last request has finished. */
static void test_trace_until_end(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[256], text[2048];
    plain_rows(text, sizeof text, 13, 5, 0);
    write_file(path, sizeof path, "end.jsonl", text);
    workload_config cfg;
    trace_config(&cfg, path, TRACE_AUTO);
    assert_int_equal(workload_until_end(&cfg, err), 0);
    assert_true(cfg.until_trace_end);
    assert_int_equal(cfg.duration_ns, 60 * CLOCK_NS_PER_S + WORKLOAD_TRACE_TAIL_NS);
    workload_plan p;
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.n_arrivals, 13);
    assert_int_equal(p.trace.after_end, 0);
    workload_plan_free(&p);
    /* windowed and faster: the window's last row, at its speed */
    trace_config(&cfg, path, TRACE_AUTO);
    cfg.trace_from_ns = 10 * CLOCK_NS_PER_S;
    cfg.trace_to_ns = 31 * CLOCK_NS_PER_S;
    cfg.speedup = 2;
    assert_int_equal(workload_until_end(&cfg, err), 0);
    assert_int_equal(cfg.duration_ns, 10 * CLOCK_NS_PER_S + WORKLOAD_TRACE_TAIL_NS);
    /* --loop has no end of its own; a shard must stop with the others */
    cfg.trace_loop = true;
    assert_int_equal(workload_until_end(&cfg, err), -1);
    assert_non_null(strstr(err, "--loop repeats the trace until --duration (or --num-prompts)"));
    cfg.trace_loop = false;
    cfg.shard = (workload_shard){0, 2};
    assert_int_equal(workload_until_end(&cfg, err), -1);
    assert_non_null(strstr(err, "shards need a fixed --duration"));
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trace_formats),
        cmocka_unit_test(test_trace_bad_rows),
        cmocka_unit_test(test_trace_window_speedup_loop_cap),
        cmocka_unit_test(test_trace_nothing_to_replay),
        cmocka_unit_test(test_trace_read_limits),
        cmocka_unit_test(test_trace_window_keeps_nothing),
        cmocka_unit_test(test_trace_until_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
