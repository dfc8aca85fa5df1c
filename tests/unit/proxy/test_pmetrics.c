/* proxy/pmetrics: the exposition. Histogram buckets cumulative with +Inf equal to the count
 * (a value on a bound in that bound's bucket), the upstream label's escaping of " \ and
 * newline, statuses past PMET_MAX_CODES counted as code="other", and every metric of
 * docs/reference/proxy-metrics.md's table (and the three the proxy adds) present, each
 * with its HELP and TYPE, from a freshly started proxy (zeros) on. */
#include <setjmp.h>
#include <stdarg.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/buf.h"
#include "proxy/pmetrics.h"

/* The exposition as a string (freed by the caller). */
static char *expose(const pmetrics *m, const char *upstream)
{
    buf out = {0};
    assert_int_equal(pmet_write(m, upstream, &out), 0);
    buf_append(&out, "", 1);
    return buf_detach(&out);
}

/* The value of the sample whose line starts with series + " " (name and labels exactly). */
static bool sample(const char *text, const char *series, double *value)
{
    const size_t n = strlen(series);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
        if (strncmp(line, series, n) == 0 && line[n] == ' ') {
            *value = strtod(line + n + 1, NULL);
            return true;
        }
    return false;
}

static double must(const char *text, const char *series)
{
    double v = 0;
    if (!sample(text, series, &v))
        fail_msg("no sample %s in the exposition", series);
    return v;
}

static void test_histogram_cumulative(void **state)
{
    (void)state;
    pmetrics m;
    pmet_init(&m);
    /* itl bounds: 0.005 0.01 0.02 0.03 0.05 0.075 0.1 0.15 0.2 0.3 0.5 0.75 1 2 5 10 */
    const double values[] = {0.001, 0.005, 0.006, 0.02, 0.5, 0.5, 3, 10, 11, 1000};
    double sum = 0;
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        pmet_observe(&m.itl, values[i]);
        sum += values[i];
    }
    char *text = expose(&m, "u:1");
    const struct {
        const char *le;
        double count;
    } want[] = {
        {"0.005", 2}, /* 0.001 and 0.005: a value on a bound is in its bucket */
        {"0.01", 3},  {"0.02", 4},  {"0.03", 4}, {"0.05", 4}, {"0.075", 4}, {"0.1", 4},
        {"0.15", 4},  {"0.2", 4},   {"0.3", 4},  {"0.5", 6},  {"0.75", 6},  {"1", 6},
        {"2", 6},     {"5", 7},     {"10", 8},   {"+Inf", 10},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char series[160];
        snprintf(series, sizeof series, "stallscope_proxy_itl_seconds_bucket{upstream=\"u:1\",le=\"%s\"}",
                 want[i].le);
        const double got = must(text, series);
        if (got != want[i].count)
            fail_msg("le=%s: %g, expected %g", want[i].le, got, want[i].count);
    }
    assert_true(must(text, "stallscope_proxy_itl_seconds_count{upstream=\"u:1\"}") == 10);
    assert_true(fabs(must(text, "stallscope_proxy_itl_seconds_sum{upstream=\"u:1\"}") - sum) < 1e-6);
    free(text);

    /* every histogram: the buckets never fall, +Inf is the count */
    pmet_init(&m);
    for (int i = 0; i < 500; i++) {
        const double v = (double)((i * 7919) % 1000) / 10.0; /* 0 .. 99.9 */
        pmet_observe(&m.itl, v / 100);
        pmet_observe(&m.ttft, v);
        pmet_observe(&m.prompt, v * 2000);
        pmet_observe(&m.culprit_prompt, v * 100);
        pmet_observe(&m.forward_delay, v / 1e4);
    }
    text = expose(&m, "u:1");
    const char *const names[] = {"stallscope_proxy_itl_seconds", "stallscope_proxy_ttft_seconds",
                                 "stallscope_proxy_prompt_tokens",
                                 "stallscope_proxy_culprit_prompt_tokens",
                                 "stallscope_proxy_forward_delay_seconds"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char prefix[160];
        snprintf(prefix, sizeof prefix, "%s_bucket{", names[k]);
        double last = -1, inf = -1;
        int buckets = 0;
        for (const char *line = strstr(text, prefix); line; line = strstr(line + 1, prefix)) {
            if (line != text && line[-1] != '\n')
                continue;
            const double v = strtod(strchr(line, '}') + 2, NULL);
            if (v < last)
                fail_msg("%s: a bucket below the one before it", names[k]);
            last = v;
            buckets++;
            if (strstr(line, "le=\"+Inf\"}") == strchr(line, '}') - 9)
                inf = v;
        }
        char count[160];
        snprintf(count, sizeof count, "%s_count{upstream=\"u:1\"}", names[k]);
        assert_true(buckets >= 10);
        if (inf != 500 || must(text, count) != 500)
            fail_msg("%s: +Inf %g, count %g, expected 500", names[k], inf, must(text, count));
    }
    free(text);
}

static void test_label_escaping(void **state)
{
    (void)state;
    pmetrics m;
    pmet_init(&m);
    m.tokens = 3;
    char *text = expose(&m, "a\"b\\c\nd");
    /* the exposition's rule: \" \\ \n inside the quotes, nothing else changed */
    assert_true(must(text, "stallscope_proxy_tokens_total{upstream=\"a\\\"b\\\\c\\nd\"}") == 3);
    /* no raw newline inside any sample: every line that is not a comment parses */
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        assert_non_null(nl);
        if (line[0] != '#') {
            assert_true(strncmp(line, "stallscope_proxy_", 17) == 0);
            assert_non_null(memchr(line, '}', (size_t)(nl - line)));
        }
        line = nl + 1;
    }
    free(text);
}

static void test_codes_other(void **state)
{
    (void)state;
    pmetrics m;
    pmet_init(&m);
    for (int c = 0; c < PMET_MAX_CODES; c++)
        pmet_count_code(&m, 200 + c);
    pmet_count_code(&m, 200);
    pmet_count_code(&m, 200);
    pmet_count_code(&m, 599); /* past the distinct ones */
    pmet_count_code(&m, 598);
    pmet_count_code(&m, 599);
    pmet_count_code(&m, 200 + PMET_MAX_CODES - 1); /* known already: its own series */
    assert_int_equal(m.requests, PMET_MAX_CODES + 6);
    char *text = expose(&m, "u");
    assert_true(must(text, "stallscope_proxy_requests_total{upstream=\"u\",code=\"200\"}") == 3);
    char series[128];
    snprintf(series, sizeof series, "stallscope_proxy_requests_total{upstream=\"u\",code=\"%d\"}",
             200 + PMET_MAX_CODES - 1);
    assert_true(must(text, series) == 2);
    assert_true(must(text, "stallscope_proxy_requests_total{upstream=\"u\",code=\"other\"}") == 3);
    double v;
    assert_false(sample(text, "stallscope_proxy_requests_total{upstream=\"u\",code=\"599\"}", &v));
    /* the series sum to every request */
    double total = 0;
    for (const char *line = strstr(text, "\nstallscope_proxy_requests_total{"); line;
         line = strstr(line + 1, "\nstallscope_proxy_requests_total{"))
        total += strtod(strchr(line, '}') + 2, NULL);
    assert_true(total == (double)m.requests);
    free(text);
    /* none past the limit: no "other" series */
    pmet_init(&m);
    pmet_count_code(&m, 200);
    text = expose(&m, "u");
    assert_null(strstr(text, "code=\"other\""));
    free(text);
}

/* docs/reference/proxy-metrics.md's table, and the three the proxy adds. */
static void test_every_documented_metric(void **state)
{
    (void)state;
    static const struct {
        const char *name, *type;
    } documented[] = {
        {"stallscope_proxy_itl_seconds", "histogram"},
        {"stallscope_proxy_ttft_seconds", "histogram"},
        {"stallscope_proxy_stalls_total", "counter"},
        {"stallscope_proxy_stalled_seconds_total", "counter"},
        {"stallscope_proxy_prompt_tokens", "histogram"},
        {"stallscope_proxy_culprit_prompt_tokens", "histogram"},
        {"stallscope_proxy_streams_in_flight", "gauge"},
        {"stallscope_proxy_requests_total", "counter"},
        {"stallscope_proxy_tokens_total", "counter"},
        {"stallscope_proxy_stall_threshold_seconds", "gauge"},
        {"stallscope_proxy_forward_delay_seconds", "histogram"},
        {"stallscope_proxy_client_aborts_total", "counter"},
        {"stallscope_proxy_upstream_errors_total", "counter"},
    };
    pmetrics m;
    pmet_init(&m);
    pmet_count_code(&m, 200);
    char *text = expose(&m, "127.0.0.1:8000");
    for (size_t i = 0; i < sizeof documented / sizeof documented[0]; i++) {
        char line[200];
        snprintf(line, sizeof line, "# TYPE %s %s\n", documented[i].name, documented[i].type);
        if (!strstr(text, line))
            fail_msg("no '# TYPE %s %s'", documented[i].name, documented[i].type);
        snprintf(line, sizeof line, "# HELP %s ", documented[i].name);
        if (!strstr(text, line))
            fail_msg("no HELP for %s", documented[i].name);
        const bool hist = strcmp(documented[i].type, "histogram") == 0;
        snprintf(line, sizeof line, "\n%s%s{upstream=\"127.0.0.1:8000\"", documented[i].name,
                 hist ? "_bucket" : "");
        if (!strstr(text, line))
            fail_msg("no sample of %s", documented[i].name);
    }
    /* both causes exported from zero */
    assert_true(must(text, "stallscope_proxy_stalls_total{upstream=\"127.0.0.1:8000\",cause=\"prefill\"}") == 0);
    assert_true(must(text, "stallscope_proxy_stalls_total{upstream=\"127.0.0.1:8000\",cause=\"unexplained\"}") == 0);
    free(text);
}

static void test_scalars(void **state)
{
    (void)state;
    pmetrics m;
    pmet_init(&m);
    m.stalls[POBS_CAUSE_PREFILL] = 4;
    m.stalls[POBS_CAUSE_UNEXPLAINED] = 1;
    m.stalled_s = 1.25;
    m.in_flight = 7;
    m.tokens = 123456789012LL;
    m.threshold_s = 0.15;
    m.client_aborts = 2;
    m.upstream_errors = 5;
    char *text = expose(&m, "u");
    assert_true(must(text, "stallscope_proxy_stalls_total{upstream=\"u\",cause=\"prefill\"}") == 4);
    assert_true(must(text, "stallscope_proxy_stalls_total{upstream=\"u\",cause=\"unexplained\"}") == 1);
    assert_true(must(text, "stallscope_proxy_stalled_seconds_total{upstream=\"u\"}") == 1.25);
    assert_true(must(text, "stallscope_proxy_streams_in_flight{upstream=\"u\"}") == 7);
    assert_true(must(text, "stallscope_proxy_tokens_total{upstream=\"u\"}") == 123456789012.0);
    assert_true(must(text, "stallscope_proxy_stall_threshold_seconds{upstream=\"u\"}") == 0.15);
    assert_true(must(text, "stallscope_proxy_client_aborts_total{upstream=\"u\"}") == 2);
    assert_true(must(text, "stallscope_proxy_upstream_errors_total{upstream=\"u\"}") == 5);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_histogram_cumulative),
        cmocka_unit_test(test_label_escaping),
        cmocka_unit_test(test_codes_other),
        cmocka_unit_test(test_every_documented_metric),
        cmocka_unit_test(test_scalars),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
