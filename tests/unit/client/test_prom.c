/* client/prom: the text exposition parser (0.0.4): samples, special values, escapes,
 * families, what it refuses, and a page ending at a page guard. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "client/prom.h"
#include "common/err.h"

#include "prom_collect.h"

static void test_samples(void **state)
{
    (void)state;
    static seen v;
    parse_ok("# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
             "# TYPE vllm:num_requests_running gauge\n"
             "vllm:num_requests_running{model_name=\"m\",engine=\"0\"} 3.0\n"
             "\n"
             "   # a plain comment with \"quotes\" and { braces\n"
             "#no space: a comment too\n"
             "plain 42 1700000000123\n"
             "  spaced\t{ a = \"x\" , b=\"y\", }\t-7.5e-1   -12  \r\n"
             "no_labels{} 1e3",
             &v);
    assert_int_equal(v.n, 4);
    assert_string_equal(v.names[0], "vllm:num_requests_running");
    assert_int_equal(v.s[0].type, PROM_GAUGE);
    assert_int_equal(v.s[0].n_labels, 2);
    assert_true(v.s[0].value == 3.0);
    assert_int_equal(v.s[0].line, 3);
    assert_false(v.s[0].has_timestamp);
    assert_string_equal(v.names[1], "plain");
    assert_int_equal(v.s[1].type, PROM_UNTYPED); /* not the gauge's family */
    assert_string_equal(v.families[1], "plain");
    assert_true(v.s[1].has_timestamp);
    assert_true(v.s[1].timestamp_ms == 1700000000123LL);
    assert_string_equal(v.names[2], "spaced");
    assert_int_equal(v.s[2].n_labels, 2);
    assert_true(v.s[2].value == -0.75);
    assert_true(v.s[2].timestamp_ms == -12);
    assert_int_equal(v.s[2].line, 8);
    assert_string_equal(v.names[3], "no_labels"); /* the last line has no LF */
    assert_true(v.s[3].value == 1000);
    assert_int_equal(v.s[3].n_labels, 0);
}

static void test_special_values(void **state)
{
    (void)state;
    static seen v;
    parse_ok("a NaN\nb +Inf\nc -Inf\nd Inf\ne -0\nf 1e400\ng infinity\n", &v);
    assert_int_equal(v.n, 7);
    assert_true(isnan(v.s[0].value));
    assert_true(isinf(v.s[1].value) && v.s[1].value > 0);
    assert_true(isinf(v.s[2].value) && v.s[2].value < 0);
    assert_true(isinf(v.s[3].value) && v.s[3].value > 0);
    assert_true(v.s[4].value == 0);
    assert_true(isinf(v.s[5].value)); /* out of range reads as Inf, as Go returns it */
    assert_true(isinf(v.s[6].value));
}

static void test_escapes(void **state)
{
    (void)state;
    static seen v;
    parse_ok("m{path=\"C:\\\\dir\",q=\"say \\\"hi\\\"\",nl=\"a\\nb\",c=\"a,b}=c\"} 1\n", &v);
    assert_int_equal(v.n, 1);
    char out[64];
    assert_int_equal(prom_label_get(&v.s[0], "path", out, sizeof out), 6);
    assert_string_equal(out, "C:\\dir");
    assert_int_equal(prom_label_get(&v.s[0], "q", out, sizeof out), 8);
    assert_string_equal(out, "say \"hi\"");
    assert_int_equal(prom_label_get(&v.s[0], "nl", out, sizeof out), 3);
    assert_string_equal(out, "a\nb");
    assert_int_equal(prom_label_get(&v.s[0], "c", out, sizeof out), 6);
    assert_string_equal(out, "a,b}=c");
    assert_int_equal(prom_label_get(&v.s[0], "absent", out, sizeof out), -1);
    assert_int_equal(prom_label_get(&v.s[0], "q", out, 4), -1); /* too small */
}

static void test_families(void **state)
{
    (void)state;
    static seen v;
    parse_ok("# TYPE vllm:iteration_tokens_total histogram\n"
             "vllm:iteration_tokens_total_bucket{le=\"1.0\"} 2\n"
             "vllm:iteration_tokens_total_bucket{le=\"+Inf\"} 5\n"
             "vllm:iteration_tokens_total_sum 9000\n"
             "vllm:iteration_tokens_total_count 5\n"
             "# TYPE rpc summary\n"
             "rpc{quantile=\"0.5\"} 4\n"
             "rpc_sum 10\n"
             "rpc_count 3\n"
             "rpc_bucket 1\n" /* not a summary's: untyped */
             "# TYPE http_requests_total counter\n"
             "http_requests_total{code=\"200\"} 7\n"
             "# TYPE vllm:prompt_tokens counter\n"
             "vllm:prompt_tokens_total 8000\n" /* OpenMetrics' spelling */
             "# TYPE g gauge\n"
             "g_total 1\n", /* a gauge has no _total */
             &v);
    assert_int_equal(v.n, 11);
    for (int i = 0; i < 4; i++) {
        assert_string_equal(v.families[i], "vllm:iteration_tokens_total");
        assert_int_equal(v.s[i].type, PROM_HISTOGRAM);
    }
    for (int i = 4; i < 7; i++) {
        assert_string_equal(v.families[i], "rpc");
        assert_int_equal(v.s[i].type, PROM_SUMMARY);
    }
    assert_int_equal(v.s[7].type, PROM_UNTYPED);
    assert_string_equal(v.families[8], "http_requests_total");
    assert_int_equal(v.s[8].type, PROM_COUNTER);
    assert_string_equal(v.families[9], "vllm:prompt_tokens");
    assert_int_equal(v.s[9].type, PROM_COUNTER);
    assert_int_equal(v.s[10].type, PROM_UNTYPED);
    assert_string_equal(prom_type_name(PROM_HISTOGRAM), "histogram");
}

/* Every malformed line is refused with its line number. */
static void test_refused(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *why;
    } bad[] = {
        {"foo{a=\"b} 1\n", "unterminated label value"},
        {"foo{a=\"b\\x\"} 1\n", "bad escape"},
        {"foo{a=\"b\\", "unterminated label value"},
        {"foo{a=b} 1\n", "must be quoted"},
        {"foo{a=\"1\",a=\"2\"} 1\n", "twice"},
        {"foo{a=\"1\" b=\"2\"} 1\n", "',' or '}'"},
        {"foo{a=\"1\"\n", "',' or '}'"},
        {"foo{a=\"1\",\n", "unterminated label set"},
        {"foo{=\"1\"} 1\n", "label name"},
        {"foo{a:b=\"1\"} 1\n", "'='"},
        {"foo{a \"1\"} 1\n", "'='"},
        {"foo\n", "a value expected"},
        {"foo{}\n", "a value expected"},
        {"foo bar\n", "not a number"},
        {"foo 0x1p3\n", "not a number"},
        {"foo nan(1)\n", "not a number"},
        {"foo 1_000\n", "not a number"},
        {"foo 1 2 3\n", "after the timestamp"},
        {"foo 1 1.5\n", "timestamp"},
        {"foo 1 99999999999999999999\n", "timestamp"},
        {"foo{a=\"b\"}1\n", "blank expected"},
        {"9foo 1\n", "metric name"},
        {"{a=\"b\"} 1\n", "metric name"},
        {"# TYPE foo gauges\n", "unknown type"},
        {"# TYPE foo\n", "unknown type"},
        {"# TYPE 1foo gauge\n", "needs a metric name"},
        {"# TYPE foo gauge extra\n", "text after the type"},
        {"# HELP\n", "needs a metric name"},
        {"# TYPE h histogram\nh_bucket 1\n", "le label"},
        {"# TYPE h histogram\nh_bucket{le=\"big\"} 1\n", "le label"},
        {"foo 1\nbar\0 1\n", "NUL"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[ERR_LEN] = "";
        size_t len = strlen(bad[i].text);
        if (strstr(bad[i].why, "NUL"))
            len = 13;
        int rc = prom_parse(bad[i].text, len, NULL, NULL, err);
        if (rc != -1 || !strstr(err, bad[i].why) || strncmp(err, "line ", 5) != 0)
            fail_msg("case %zu (%s): rc %d, err '%s'", i, bad[i].text, rc, err);
    }
    /* The line number is the bad line's. */
    char err[ERR_LEN] = "";
    const char *text = "# TYPE a gauge\na 1\n\nb{x=\"1\"} one\nc 2\n";
    static seen v;
    memset(&v, 0, sizeof v);
    assert_int_equal(prom_parse(text, strlen(text), collect, &v, err), -1);
    assert_int_equal(v.n, 1); /* what came before was delivered */
    assert_non_null(strstr(err, "line 4, column 10"));
    /* 33 labels: one too many. */
    char many[1024] = "m{";
    for (int i = 0; i <= PROM_MAX_LABELS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "l%d=\"v\",", i);
    strcat(many, "} 1\n");
    assert_int_equal(prom_parse(many, strlen(many), NULL, NULL, err), -1);
    assert_non_null(strstr(err, "too many labels"));
    /* A callback's non-zero return stops the parse and is returned. */
    memset(&v, 0, sizeof v);
    v.n = MAX_SEEN;
    assert_int_equal(prom_parse("a 1\nb 2\n", 8, collect, &v, err), 7);
}

/* The text ends exactly at a page the process cannot read: nothing reads past len. */
static void test_page_guard(void **state)
{
    (void)state;
    long page = sysconf(_SC_PAGESIZE);
    char *map = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + page, (size_t)page, PROT_NONE), 0);
    static const char *const texts[] = {
        "x{a=\"b\"} 1 17", "x{a=\"b\\", "x{a=\"b\"", "x{a=", "x{", "# TYPE x gauge", "x 1",
        "# TYPE x", "x{a=\"b\"} ", "x",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        size_t len = strlen(texts[i]);
        char *at = map + page - len;
        memcpy(at, texts[i], len);
        char err[ERR_LEN];
        int rc = prom_parse(at, len, NULL, NULL, err);
        assert_true(rc == 0 || rc == -1);
        /* And every prefix of it, one byte at a time. */
        for (size_t n = 0; n < len; n++) {
            char *p = map + page - n;
            memmove(p, texts[i], n);
            rc = prom_parse(p, n, NULL, NULL, err);
            assert_true(rc == 0 || rc == -1);
        }
    }
    munmap(map, (size_t)page * 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_samples),
        cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_families),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_page_guard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
