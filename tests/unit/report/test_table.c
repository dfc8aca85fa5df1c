/* report: the table's rows and layout, and the verdict's sentences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "report/table.h"

static analysis_injection injections[4];

/* The picture: 32 users, ~10 ms steps, four 8k prompts each freezing everyone
 * for one ~152 ms step. */
static void lesson_pair(analysis_summary *base, analysis_summary *x)
{
    memset(base, 0, sizeof *base);
    snprintf(base->label, sizeof base->label, "baseline");
    base->users = 32;
    base->duration_s = 40;
    base->complete = true;
    base->itl_ms = (analysis_dist){.count = 126000, .mean = 10.0, .p50 = 10.0, .p90 = 10.1,
                                   .p99 = 10.2, .p999 = 11.0, .max = 12.0};
    base->ttft_ms = (analysis_dist){.count = 300, .p50 = 20, .p99 = 25, .max = 26};
    base->stalls.threshold_ms = 50;
    base->spike_ratio = 1.2;

    *x = *base;
    snprintf(x->label, sizeof x->label, "interference");
    x->itl_ms = (analysis_dist){.count = 125900, .mean = 10.1, .p50 = 10.03, .p90 = 10.1,
                                .p99 = 10.2408, .p999 = 15.18, .max = 152.0};
    x->spike_ratio = 152.0 / 10.03;
    x->stalls = (analysis_stalls){.threshold_ms = 50, .count = 128, .fraction_of_gaps = 128.0 / 125900,
                                  .aligned = 128, .aligned_fraction = 1.0,
                                  .stalled_time_fraction = 0.0146};
    for (int i = 0; i < 4; i++)
        injections[i] = (analysis_injection){.t_plan_s = 5 + 10 * i, .t_send_s = 5 + 10 * i,
                                             .ttft_ms = 150 + i, .prompt_tokens = 8000,
                                             .max_gap_ms = 152, .median_gap_ms = 10,
                                             .users_stalled = 32};
    x->injections = injections;
    x->n_injections = 4;
    x->injections_with_stalls = 4;
}

static void expect_contains(const char *text, const char *want)
{
    if (!strstr(text, want))
        fail_msg("'%s' not in:\n%s", want, text);
}

static void test_verdict_stalled_run(void **state)
{
    (void)state;
    analysis_summary b, x;
    lesson_pair(&b, &x);
    char v[1024];
    report_verdict(v, sizeof v, &b, &x);
    expect_contains(v, "4/4 injections each stalled 32/32 users");
    expect_contains(v, "128 stalls above 50.0 ms, 100 % aligned with injections");
    expect_contains(v, "max gap 152 ms = 15\xc3\x97 p50");
    expect_contains(v, "median unchanged (+0.3 %)");
    expect_contains(v, "p99 unchanged (+0.4 %)");
    expect_contains(v, "p99.9 +38 %");
    expect_contains(v, "max \xc3\x97" "12.7");
    /* Stalls are 0.10 % of gaps: the verdict says why p99 did not move. */
    expect_contains(v, "0.10 % of gaps");
    assert_int_equal(v[strlen(v) - 1], '.');

    /* Some injections stalled fewer users. */
    injections[1].users_stalled = 20;
    injections[3].users_stalled = 0;
    x.injections_with_stalls = 3;
    report_verdict(v, sizeof v, &b, &x);
    expect_contains(v, "3/4 injections stalled 20-32 of 32 users each");

    /* A short buffer is cut, never overrun, and stays terminated. */
    char small[16];
    report_verdict(small, sizeof small, &b, &x);
    assert_int_equal(strlen(small), 15);
}

static void test_verdict_clean_run(void **state)
{
    (void)state;
    analysis_summary b, x;
    lesson_pair(&b, &x);
    x.itl_ms = b.itl_ms;
    x.itl_ms.p999 = 11.3; /* +2.7 % */
    x.spike_ratio = 1.2;
    memset(&x.stalls, 0, sizeof x.stalls);
    x.stalls.threshold_ms = 50;
    for (int i = 0; i < 4; i++)
        injections[i].users_stalled = 0;
    x.injections_with_stalls = 0;
    char v[1024];
    report_verdict(v, sizeof v, &b, &x);
    expect_contains(v, "0/4 injections stalled any user");
    expect_contains(v, "no stalls above 50.0 ms");
    expect_contains(v, "median unchanged (+0.0 %)");
    expect_contains(v, "p99.9 unchanged (+2.7 %)");
    if (strstr(v, "of gaps"))
        fail_msg("clean run should not explain p99: %s", v);

    /* The baseline alone: no injections, nothing to compare against. */
    report_verdict(v, sizeof v, NULL, &b);
    expect_contains(v, "No injections");
    expect_contains(v, "no baseline");
}

static void test_table_rows_and_width(void **state)
{
    (void)state;
    analysis_summary b, x;
    lesson_pair(&b, &x);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    report_table_print(f, &b, &x);
    fclose(f);
    const char *rows[] = {"p50",           "p90",          "p99 ",
                          "p99.9",         "max gap (ms)", "mean",
                          "gaps counted",  "stalls (>50.0 ms)", "aligned fraction",
                          "stalled time %", "spike ratio (max/p50)", "injection TTFT p50 (ms)",
                          "injection TTFT max (ms)", "background TTFT p50 (ms)",
                          "background TTFT p99 (ms)", "errors", "baseline", "interference",
                          "change"};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        expect_contains(text, rows[i]);
    expect_contains(text, "152.0");
    expect_contains(text, "\xc3\x97" "12.7"); /* max gap: 152 / 12 */
    expect_contains(text, "+0.3 %");          /* p50 */
    expect_contains(text, "+1.46 pt");        /* stalled time: 0 % -> 1.46 % */
    /* Every line fits 80 columns, counting UTF-8 characters, not bytes. */
    int width = 0;
    for (const char *p = text; *p; p++) {
        if (*p == '\n') {
            assert_true(width <= 80);
            width = 0;
        } else if (((unsigned char)*p & 0xc0) != 0x80) {
            width++;
        }
    }
    free(text);

    /* Without a baseline there is no baseline column (a column of dashes says nothing) and
     * no change. */
    text = NULL;
    f = open_memstream(&text, &len);
    report_table_print(f, NULL, &x);
    fclose(f);
    expect_contains(text, "\nmetric                      interference\n");
    expect_contains(text, "\ngaps counted                      125900\n");
    expect_contains(text, "\nmax gap (ms)                       152.0\n");
    if (strstr(text, "\xc3\x97") || strstr(text, "change") || strstr(text, "baseline"))
        fail_msg("no baseline nor change column expected without a baseline:\n%s", text);
    free(text);
}

static char *table_text(const analysis_summary *b, const analysis_summary *x)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    report_table_print(f, b, x);
    fclose(f);
    return text;
}

static void expect_absent(const char *text, const char *unwanted)
{
    if (strstr(text, unwanted))
        fail_msg("'%s' in:\n%s", unwanted, text);
}

/* Issue 28, point 9: --no-inject's one run (labelled traffic) has no injections and no
 * baseline: no column of dashes for the baseline, no aligned fraction, no injection TTFT,
 * and the verdict does not call its stalls "0 % aligned with injections". */
static void test_no_injections_no_injection_rows(void **state)
{
    (void)state;
    analysis_summary b, x;
    lesson_pair(&b, &x);
    snprintf(x.label, sizeof x.label, "traffic");
    x.injections = NULL;
    x.n_injections = x.injections_with_stalls = 0;
    x.stalls.aligned = 0;
    x.stalls.aligned_fraction = 0;
    char *text = table_text(NULL, &x);
    expect_contains(text, "traffic: traffic, 32 users, 40.0 s");
    expect_contains(text, "\nmetric                           traffic\n");
    expect_contains(text, "\nstalls (>50.0 ms)                    128\n");
    expect_absent(text, "aligned fraction");
    expect_absent(text, "injection TTFT");
    expect_absent(text, "baseline");
    free(text);
    char v[1024];
    report_verdict(v, sizeof v, NULL, &x);
    expect_contains(v, "No injections; 128 stalls above 50.0 ms; max gap");
    expect_absent(v, "aligned");

    /* With injections but no stall, "aligned" is 0 of 0: a dash, not 0.00 %. */
    lesson_pair(&b, &x);
    memset(&x.stalls, 0, sizeof x.stalls);
    x.stalls.threshold_ms = 50;
    text = table_text(&b, &x);
    expect_contains(text, "\naligned fraction                       \xe2\x80\x94             \xe2\x80\x94\n");
    expect_contains(text, "injection TTFT p50 (ms)");
    free(text);
}

/* Issue 28, point 7: in open loop every request is a stream of its own; the run's count is
 * of streams, not users ("2478 users", "stalled 5-30 of 2478 users each"). */
static void test_open_loop_counts_streams(void **state)
{
    (void)state;
    analysis_summary b, x;
    lesson_pair(&b, &x);
    b.users = x.users = 2478;
    b.users_are_streams = x.users_are_streams = true;
    injections[0].users_stalled = 5;
    injections[2].users_stalled = 30;
    char *text = table_text(&b, &x);
    expect_contains(text, "interference: interference, 2478 streams, 40.0 s,");
    expect_absent(text, "users");
    free(text);
    char v[1024];
    report_verdict(v, sizeof v, &b, &x);
    expect_contains(v, "4/4 injections stalled 5-32 of 2478 streams each");
    expect_absent(v, "users");
    /* Closed users stay users. */
    x.users_are_streams = false;
    report_verdict(v, sizeof v, &b, &x);
    expect_contains(v, "of 2478 users each");
}

/* Issue 28, point 10: a shard's own report is one shard's users (and, past shard 0, no
 * injector): its verdict says so first and points to report --merge. */
static void test_shard_verdict_says_so(void **state)
{
    (void)state;
    analysis_summary b, x;
    lesson_pair(&b, &x);
    b.users = x.users = 8;
    b.shard = x.shard = 1;
    b.shards = x.shards = 4;
    x.injections = NULL;
    x.n_injections = x.injections_with_stalls = 0;
    char v[1024];
    report_verdict(v, sizeof v, &b, &x);
    const char *want = "Shard 1/4 alone: its own 8 users and no injector (shard 0 sends the long "
                       "prompts), not the experiment's (`stallscope report --merge` over the 4 "
                       "shards' directories gives those). No injections; 128 stalls above";
    if (strncmp(v, want, strlen(want)) != 0)
        fail_msg("verdict: %s", v);
    char *text = table_text(&b, &x);
    expect_contains(text, "interference: interference, 8 users (shard 1/4), 40.0 s,");
    free(text);
    /* Shard 0 sends the injections: no word of a missing injector. */
    lesson_pair(&b, &x);
    x.users = 8;
    x.shard = 0;
    x.shards = 4;
    report_verdict(v, sizeof v, &b, &x);
    expect_contains(v, "Shard 0/4 alone: its own 8 users, not the experiment's (`stallscope "
                       "report --merge` over the 4 shards' directories gives those). 4/4 "
                       "injections each stalled 32/8 users");
    /* Not a shard: nothing said. */
    x.shards = 0;
    report_verdict(v, sizeof v, &b, &x);
    expect_absent(v, "hard");
}

/* Issue 22, defect 11: a short run completes few requests, and vLLM's output throughput
 * counts only theirs (the lesson on the cpu engine: 23.1 tok/s from 2 requests, while 699
 * tok/s streamed). The table shows what streamed beside it, each labelled. */
static void test_table_streamed_beside_completed(void **state)
{
    (void)state;
    analysis_summary b, x;
    lesson_pair(&b, &x);
    x.streamed_throughput = 699.0;
    x.standard.all.output_throughput = 23.1;
    x.standard.all.completed = 2;
    x.standard.all.unfinished = 32;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    report_table_print(f, NULL, &x);
    fclose(f);
    const char *want[] = {"streamed tokens/s                  699.0\n",
                          "output tok/s (completed)            23.1\n",
                          "requests completed                     2\n",
                          "requests cut at the end               32\n"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        expect_contains(text, want[i]);
    if (strstr(text, "output tokens/s "))
        fail_msg("an unlabelled output tokens/s row:\n%s", text);
    free(text);
}

/* What the client ignored is said, not hidden: a table row and a clause of the verdict. */
static void test_protocol_violations_shown(void **state)
{
    (void)state;
    analysis_summary b, x;
    lesson_pair(&b, &x);
    char v[1024];
    report_verdict(v, sizeof v, &b, &x);
    assert_null(strstr(v, "protocol"));
    x.protocol_violations = 3;
    report_verdict(v, sizeof v, &b, &x);
    expect_contains(v, "3 server events broke the protocol and were ignored");
    char *table = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&table, &len);
    report_table_print(f, &b, &x);
    fclose(f);
    expect_contains(table, "protocol violations");
    free(table);
}

/* A run whose requests mostly failed says so first: the table's first line and the
 * verdict's first sentence name the failure and its most common error; with no token at
 * all the verdict stops there. */
static void test_failed_run_said_first(void **state)
{
    (void)state;
    analysis_summary b, x;
    lesson_pair(&b, &x);
    x.failed = true;
    x.complete = false;
    x.requests = 30;
    x.errors = 29;
    x.error_common_count = 28;
    snprintf(x.error_common, sizeof x.error_common,
             "HTTP 301: the target redirects to http://h:8000/v2/completions; use that URL");
    const char *why = "29 of 30 requests failed; the most common error (28): HTTP 301: the "
                      "target redirects to http://h:8000/v2/completions; use that URL";
    char v[1024], want[512];
    report_verdict(v, sizeof v, &b, &x);
    snprintf(want, sizeof want, "The run FAILED: %s. The answers that came: 4/4 injections", why);
    if (strncmp(v, want, strlen(want)) != 0)
        fail_msg("verdict: %s", v);
    assert_null(strstr(v, "cut short"));
    char *table = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&table, &len);
    report_table_print(f, &b, &x);
    fclose(f);
    snprintf(want, sizeof want, "interference FAILED: %s\n", why);
    if (strncmp(table, want, strlen(want)) != 0)
        fail_msg("table:\n%s", table);
    expect_contains(table, "tokens (FAILED)\n");
    free(table);
    /* Nothing arrived: the failure is the whole verdict. */
    memset(&x.itl_ms, 0, sizeof x.itl_ms);
    x.tokens_received = 0;
    report_verdict(v, sizeof v, &b, &x);
    snprintf(want, sizeof want, "The run FAILED: %s. No token arrived.", why);
    assert_string_equal(v, want);
    /* A run that stands names its errors by count, and says nothing of failing. */
    lesson_pair(&b, &x);
    x.errors = 2;
    report_verdict(v, sizeof v, &b, &x);
    expect_contains(v, "; 2 requests failed");
    assert_null(strstr(v, "FAILED"));
}

/* A noisy baseline widens "unchanged": its own halves differ by 14 %, so a +10 % median is
 * no change anyone can claim, and a +38 % one carries the noise beside it. */
static void test_verdict_noise(void **state)
{
    (void)state;
    analysis_summary b, x;
    lesson_pair(&b, &x);
    char v[1024];
    x.itl_ms.p50 = b.itl_ms.p50 * 1.10;
    b.itl_noise.p50 = 0.14;
    report_verdict(v, sizeof v, &b, &x);
    expect_contains(v, "median unchanged within noise (+10.0 %, noise \xc2\xb1" "14.0 %)");
    x.itl_ms.p50 = b.itl_ms.p50 * 1.38;
    report_verdict(v, sizeof v, &b, &x);
    expect_contains(v, "median +38 % (noise \xc2\xb1" "14 %)");
    /* A quiet baseline keeps the fixed band. */
    b.itl_noise.p50 = 0.01;
    x.itl_ms.p50 = b.itl_ms.p50 * 1.03;
    report_verdict(v, sizeof v, &b, &x);
    expect_contains(v, "median unchanged (+3.0 %)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verdict_noise),
        cmocka_unit_test(test_failed_run_said_first),
        cmocka_unit_test(test_protocol_violations_shown),
        cmocka_unit_test(test_table_streamed_beside_completed),
        cmocka_unit_test(test_verdict_stalled_run),
        cmocka_unit_test(test_verdict_clean_run),
        cmocka_unit_test(test_table_rows_and_width),
        cmocka_unit_test(test_no_injections_no_injection_rows),
        cmocka_unit_test(test_open_loop_counts_streams),
        cmocka_unit_test(test_shard_verdict_says_so),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
