/* test_metric — the metric table: every row's summary.json path reads the same number as its
 * accessor (a summary whose every field the test sets apart), names as --fail-if takes them
 * (aliases, families, refusals), vLLM's result keys in vLLM's order, the flat keys tune.json
 * uses, and the reference that docs/reference/metrics.md holds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "analysis/metric.h"
#include "common/err.h"

static bool is_family(const metric *m)
{
    return m->field == METRIC_STAT_P;
}

/* A summary whose every field a row reads holds a value of its own: a row reading the wrong
 * field, or a path naming another, reads a number its twin does not. */
static void distinct_summary(analysis_summary *s, analysis_injection *inj)
{
    memset(s, 0, sizeof *s);
    int n;
    const metric *rows = metric_table(&n);
    for (int i = 0; i < n; i++) {
        char *at = (char *)s + rows[i].offset;
        if (rows[i].field == METRIC_F64) {
            double v = 1000 + 1.25 * i;
            memcpy(at, &v, sizeof v);
        } else if (rows[i].field == METRIC_I64) {
            int64_t v = 100 + i;
            memcpy(at, &v, sizeof v);
        }
    }
    /* The families' percentiles and the computed rows' inputs. */
    standard_defaults(&s->standard.opt);
    standard_stat *stats[] = {&s->standard.all.ttft_ms, &s->standard.all.tpot_ms,
                              &s->standard.all.itl_ms, &s->standard.all.e2el_ms};
    for (int k = 0; k < 4; k++)
        for (int p = 0; p < s->standard.opt.n_percentiles; p++)
            stats[k]->p[p] = 5000 + 10 * k + p;
    s->standard.all.has_goodput = s->standard.background.has_goodput = true;
    s->standard.all.request_goodput = 7.5;
    s->standard.all.goodput = 0.75;
    s->standard.background.goodput = 0.625;
    s->gpus = 2;
    inj[0] = (analysis_injection){.t_send_s = 5, .ttft_ms = 130, .prompt_tokens = 8000};
    inj[1] = (analysis_injection){.t_send_s = 15, .ttft_ms = 150, .prompt_tokens = 8000};
    s->injections = inj;
    s->n_injections = 2;
}

static void test_rows(void **state)
{
    (void)state;
    int n;
    const metric *rows = metric_table(&n);
    assert_true(n > 40);
    for (int i = 0; i < n; i++) {
        const metric *m = &rows[i];
        assert_non_null(m->id);
        assert_non_null(m->label);
        assert_non_null(m->help);
        assert_ptr_equal(metric_find(m->id), m);
        for (int j = 0; j < i; j++) {
            if (strcmp(rows[j].id, m->id) == 0 || strcmp(rows[j].label, m->label) == 0)
                fail_msg("rows %d and %d share a name: %s / %s", j, i, m->id, m->label);
            if (m->vllm && rows[j].vllm && strcmp(rows[j].vllm, m->vllm) == 0)
                fail_msg("two rows with the vLLM key %s", m->vllm);
        }
        /* A family says "{P}" in every name it has; no other row does. */
        const char *names[] = {m->id, m->json, m->vllm, m->label};
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
            if (names[k] && (strstr(names[k], "{P}") != NULL) != is_family(m))
                fail_msg("%s: '%s' and its family disagree", m->id, names[k]);
        if (m->field == METRIC_FN)
            assert_non_null(m->get);
        else
            assert_true(m->offset + sizeof(double) <= sizeof(analysis_summary));
    }
    assert_null(metric_find("itl.p99.9")); /* an alias is parsed, not a row */
}

static void test_paths_agree(void **state)
{
    (void)state;
    analysis_summary s;
    analysis_injection inj[2];
    distinct_summary(&s, inj);
    json_t *j = analysis_summary_to_json(&s);
    assert_non_null(j);
    int n, checked = 0;
    const metric *rows = metric_table(&n);
    char err[ERR_LEN];
    for (int i = 0; i < n; i++) {
        const metric *m = &rows[i];
        if (!m->json)
            continue;
        if (is_family(m)) {
            /* Each percentile of the run's, by the name a rule gives it. */
            for (int k = 0; k < s.standard.opt.n_percentiles; k++) {
                char word[16], name[64];
                standard_percentile_word(s.standard.opt.percentiles[k], word, sizeof word);
                const char *at = strstr(m->id, "{P}");
                snprintf(name, sizeof name, "%.*s%s%s", (int)(at - m->id), m->id, word, at + 3);
                metric_ref r;
                if (metric_parse(name, &r, err) != 0)
                    fail_msg("%s: %s", name, err);
                assert_ptr_equal(r.row, m);
                double in_json;
                if (!metric_json_value(&r, j, &in_json))
                    fail_msg("%s: not in the summary's JSON", name);
                standard_stat st;
                memcpy(&st, (const char *)&s + m->offset, sizeof st);
                if (in_json != st.p[k])
                    fail_msg("%s: JSON %g, the summary %g", name, in_json, st.p[k]);
                checked++;
            }
            assert_false(metric_value(m, &s, &(double){0})); /* a family needs its percentile */
            continue;
        }
        metric_ref r;
        if (metric_parse(m->id, &r, err) != 0)
            fail_msg("%s: %s", m->id, err);
        double in_json, value;
        if (!metric_value(m, &s, &value))
            fail_msg("%s: no value in a summary that has every figure", m->id);
        if (!metric_json_value(&r, j, &in_json))
            fail_msg("%s: '%s' is not in the summary's JSON", m->id, m->json);
        if (in_json != value)
            fail_msg("%s: JSON '%s' %g, the accessor %g", m->id, m->json, in_json, value);
        checked++;
    }
    assert_true(checked > 50);
    json_decref(j);

    /* What a run lacks, the accessor says so: no SLO, no GPU count, no injection's token. */
    s.standard.all.has_goodput = false;
    s.gpus = 0;
    inj[0].ttft_ms = inj[1].ttft_ms = -1;
    const char *lacking[] = {"goodput", "goodput.requests", "throughput.output_per_gpu",
                             "goodput.requests_per_gpu", "injection_ttft.p50"};
    for (size_t i = 0; i < sizeof lacking / sizeof lacking[0]; i++) {
        double v;
        if (metric_value(metric_find(lacking[i]), &s, &v))
            fail_msg("%s: a value in a run without it", lacking[i]);
    }
    /* A TTFT without a first token is there (0 in the file) but not sampled. */
    const metric *ttft = metric_find("ttft.p50");
    s.ttft_ms.count = 0;
    assert_true(metric_value(ttft, &s, &(double){0}));
    assert_false(metric_sampled(ttft, &s));
    s.ttft_ms.count = 3;
    assert_true(metric_sampled(ttft, &s));
    assert_true(metric_sampled(metric_find("itl.p50"), &s)); /* no count: always */
}

static void test_parse(void **state)
{
    (void)state;
    char err[ERR_LEN];
    metric_ref r;
    assert_int_equal(metric_parse("itl.p99.9", &r, err), 0);
    assert_string_equal(r.id, "itl.p999");
    assert_ptr_equal(r.row, metric_find("itl.p999"));
    assert_int_equal(metric_parse("tpot.p99", &r, err), 0);
    assert_string_equal(r.id, "tpot.p99");
    assert_string_equal(r.p, "99");
    assert_ptr_equal(r.row, metric_find("tpot.p{P}"));
    assert_int_equal(metric_parse("tpot.p99.9", &r, err), 0);
    assert_string_equal(r.p, "99.9");
    assert_int_equal(metric_parse("itl.all.p99.9", &r, err), 0);
    assert_string_equal(r.id, "itl.all.p99.9");
    assert_int_equal(metric_parse("e2el.p50.0", &r, err), 0); /* vLLM's spelling: "50" */
    assert_string_equal(r.id, "e2el.p50");

    /* The dot inside a percentile is no path separator. */
    json_t *j = json_pack("{s:{s:{s:{s:f, s:f}}}}", "metrics", "all", "tpot_ms", "p99.9", 12.5,
                          "p99", 11.0);
    double v;
    assert_int_equal(metric_parse("tpot.p99.9", &r, err), 0);
    assert_true(metric_json_value(&r, j, &v));
    assert_true(v == 12.5);
    assert_int_equal(metric_parse("tpot.p90", &r, err), 0);
    assert_false(metric_json_value(&r, j, &v)); /* not a percentile of this run */
    json_decref(j);

    struct {
        const char *name, *want;
    } bad[] = {
        {"itl.nope", "no metric 'itl.nope'"},
        {"tpot.p0", "no metric"},
        {"tpot.p101", "no metric"},
        {"tpot.p", "no metric"},
        {"tpot.p9.9.9", "no metric"},
        {"tpot.p{P}", "no metric"},
        {"injection_ttft.p50", "not in summary.json"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (metric_parse(bad[i].name, &r, err) != -1)
            fail_msg("'%s' was accepted", bad[i].name);
        if (!strstr(err, bad[i].want))
            fail_msg("'%s': error '%s' lacks '%s'", bad[i].name, err, bad[i].want);
    }
    assert_non_null(strstr(err, "injection_ttft.p50"));
    assert_int_equal(metric_parse("nope", &r, err), -1);
    assert_non_null(strstr(err, "itl.mean, itl.p50")); /* the names, from the table */
}

static void test_vllm_result(void **state)
{
    (void)state;
    analysis_summary s;
    analysis_injection inj[2];
    distinct_summary(&s, inj);
    s.standard.all.has_goodput = false;
    json_t *j = metric_vllm_result(&s);
    assert_non_null(j);
    /* vllm/benchmarks/serve.py's result, in its order (default percentiles). */
    const char *keys[] = {
        "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
        "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
        "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms", "p90_ttft_ms",
        "p99_ttft_ms", "p99.9_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms",
        "p50_tpot_ms", "p90_tpot_ms", "p99_tpot_ms", "p99.9_tpot_ms", "mean_itl_ms",
        "median_itl_ms", "std_itl_ms", "p50_itl_ms", "p90_itl_ms", "p99_itl_ms", "p99.9_itl_ms",
        "mean_e2el_ms", "median_e2el_ms", "std_e2el_ms", "p50_e2el_ms", "p90_e2el_ms",
        "p99_e2el_ms", "p99.9_e2el_ms"};
    assert_int_equal(json_object_size(j), sizeof keys / sizeof keys[0]);
    size_t i = 0;
    const char *key;
    json_t *value;
    json_object_foreach(j, key, value)
    {
        if (strcmp(key, keys[i]) != 0)
            fail_msg("key %zu is '%s', vLLM's is '%s'", i, key, keys[i]);
        i++;
    }
    assert_true(json_is_null(json_object_get(j, "request_goodput"))); /* no SLO */
    assert_true(json_is_integer(json_object_get(j, "completed")));
    assert_int_equal(json_integer_value(json_object_get(j, "completed")),
                     s.standard.all.completed);
    assert_true(json_is_real(json_object_get(j, "duration")));
    assert_true(json_real_value(json_object_get(j, "p99.9_itl_ms")) ==
                s.standard.all.itl_ms.p[3]);
    assert_true(json_real_value(json_object_get(j, "median_tpot_ms")) ==
                s.standard.all.tpot_ms.median);
    json_decref(j);
}

static void test_keys(void **state)
{
    (void)state;
    struct {
        const char *id, *key;
    } cases[] = {{"itl.p999", "itl_p999_ms"},
                 {"ttft.p99", "ttft_p99_ms"},
                 {"itl.max", "itl_max_ms"},
                 {"throughput.output", "output_throughput"},
                 {"stalls.prefill", "stalls_prefill"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char key[64];
        metric_key(metric_find(cases[i].id), key, sizeof key);
        assert_string_equal(key, cases[i].key);
    }
}

/* The reference: one table line per row, each naming its id, path and key. */
static void test_markdown(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    metric_print_markdown(out);
    fclose(out);
    assert_non_null(strstr(text, "stallscope metrics --markdown > docs/reference/metrics.md"));
    int n, lines = 0;
    const metric *rows = metric_table(&n);
    for (const char *p = text; (p = strstr(p, "\n| `")) != NULL; p++)
        lines++;
    assert_int_equal(lines, n);
    for (int i = 0; i < n; i++) {
        char cell[160];
        snprintf(cell, sizeof cell, "| `%s` | %s%s%s |", rows[i].id, rows[i].json ? "`" : "",
                 rows[i].json ? rows[i].json : "—", rows[i].json ? "`" : "");
        if (!strstr(text, cell))
            fail_msg("no row '%s'", cell);
    }
    assert_non_null(strstr(text, "| `itl.p999` | `itl_ms.p999` | — | gap p99.9 (ms) | ms |"));
    assert_non_null(strstr(text, "| `itl.all.p{P}` | `metrics.all.itl_ms.p{P}` | `p{P}_itl_ms` |"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),        cmocka_unit_test(test_paths_agree),
        cmocka_unit_test(test_parse),       cmocka_unit_test(test_vllm_result),
        cmocka_unit_test(test_keys),        cmocka_unit_test(test_markdown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
