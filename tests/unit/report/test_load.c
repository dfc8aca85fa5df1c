/* report/load: a run read back from disk: a tokens.csv over the streaming limit summarized
 * row by row (the same as loading it whole), tokens the run dropped explained, and runs of
 * different experiments refused together. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "analysis/analysis.h"
#include "common/err.h"
#include "experiment/config.h"
#include "experiment/pair.h"
#include "experiment/runner.h"
#include "report/html.h"
#include "report/load.h"
#include "report/plot.h"

#include "report_runs.h"

static char *summary_text(const analysis_summary *s)
{
    json_t *j = analysis_summary_to_json(s);
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(j);
    assert_non_null(text);
    return text;
}

/* A tokens.csv over the streaming limit is summarized row by row from disk: the same
 * summaries (exact: the gaps fit the budget) and stalls as loading it whole, no events held. */
static void test_streamed_load_matches(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_html_XXXXXX";
    assert_non_null(mkdtemp(dir));
    experiment_config cfg;
    small_config(&cfg, EXPERIMENT_SIM, 4000, SCHED_MIXED, 16384, 0);
    write_experiment(dir, &cfg);
    report_set whole, streamed;
    char err[ERR_LEN] = "";
    report_given given = {.stream_tokens_bytes = 1};
    if (report_set_load(&whole, dir, 0, true, stderr, err) != 0 ||
        report_set_load_given(&streamed, dir, 0, true, &given, stderr, err) != 0)
        fail_msg("report_set_load: %s", err);
    assert_int_equal(whole.n_runs, 2);
    assert_int_equal(streamed.n_runs, 2);
    for (int i = 0; i < 2; i++) {
        const report_run *a = &whole.runs[i], *b = &streamed.runs[i];
        assert_false(a->no_tokens);
        assert_true(b->no_tokens);
        assert_true(a->log.n_events > 0);
        assert_int_equal(b->log.n_events, 0);
        assert_true(a->summary.stalls.count > 0 || i == 0);
        char *ta = summary_text(&a->summary), *tb = summary_text(&b->summary);
        assert_string_equal(ta, tb);
        free(ta);
        free(tb);
        assert_int_equal(a->summary.n_stall_list, b->summary.n_stall_list);
        for (int64_t k = 0; k < a->summary.n_stall_list; k++)
            assert_memory_equal(&a->summary.stall_list[k], &b->summary.stall_list[k],
                                sizeof a->summary.stall_list[k]);
    }
    /* The page still builds, its per-gap charts drawn from the streamed digest. */
    for (int i = 0; i < 2; i++) {
        const analysis_gap_digest *d = streamed.runs[i].summary.gap_digest;
        assert_non_null(d);
        assert_null(whole.runs[i].summary.gap_digest);
        assert_int_equal(d->gaps, whole.runs[i].summary.itl_ms.count);
        assert_float_equal(d->max_gap_ms, whole.runs[i].summary.itl_ms.max, 0);
        assert_true(d->n_points > 0 && d->n_ccdf > 0);
        for (int64_t k = 0; k < d->n_points; k++)
            assert_true(d->gap_ms[k] <= d->max_gap_ms);
        assert_float_equal(d->ccdf_frac[0], 1.0, 0);
    }
    html_options opt = {.predict = false};
    if (html_write_run_report(&streamed, &opt, err) != 0)
        fail_msg("html_write_run_report: %s", err);
    report_set_free(&whole);
    report_set_free(&streamed);
    char path[4200];
    snprintf(path, sizeof path, "%s/report.html", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char page[1 << 22];
    size_t n = fread(page, 1, sizeof page - 1, f);
    page[n] = '\0';
    fclose(f);
    assert_null(strstr(page, "no chart of every gap"));
    assert_non_null(strstr(page, "gaps over time") ? page : strstr(page, "timeline"));
    rm_rf(dir);
}

/* A run whose tokens.csv was not kept cannot be rebuilt from its files: it says so. */
static void test_dropped_tokens_explained(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_html_XXXXXX";
    assert_non_null(mkdtemp(dir));
    experiment_config cfg;
    small_config(&cfg, EXPERIMENT_SIM, 4000, SCHED_MIXED, 16384, 0);
    cfg.no_baseline = true;
    char err[ERR_LEN] = "";
    experiment_runner sim;
    experiment_runner_sim(&sim, err);
    experiment_io io = {.out_dir = dir, .tokens_csv_max_events = 10};
    experiment_pair pair;
    if (experiment_run_pair(&cfg, &sim, &io, &pair, err) != 0)
        fail_msg("experiment_run_pair: %s", err);
    assert_true(pair.interference.tokens_csv_dropped);
    char path[4200];
    snprintf(path, sizeof path, "%s/interference/tokens.csv", dir);
    assert_int_not_equal(access(path, F_OK), 0);
    /* The pair's own report: from its summaries. */
    report_set set;
    report_given given = {.interference = &pair.interference};
    if (report_set_load_given(&set, dir, 0, true, &given, stderr, err) != 0)
        fail_msg("report_set_load_given: %s", err);
    assert_int_equal(set.runs[0].summary.stalls.count, pair.interference.stalls.count);
    report_set_free(&set);
    /* `report DIR` afterwards: the reason, not "No such file". */
    assert_int_equal(report_set_load(&set, dir, 0, true, NULL, err), -1);
    report_set_free(&set);
    assert_non_null(strstr(err, "tokens.csv was not kept"));
    experiment_pair_free(&pair);
    experiment_runner_free(&sim);
    rm_rf(dir);
}

/* Two experiments in one directory are not compared: the loader names the difference. */
static void test_mixed_runs_refused(void **state)
{
    (void)state;
    char a[] = "/tmp/test_html_mix_a_XXXXXX", b[] = "/tmp/test_html_mix_b_XXXXXX";
    assert_non_null(mkdtemp(a));
    assert_non_null(mkdtemp(b));
    experiment_config cfg;
    small_config(&cfg, EXPERIMENT_SIM, 4000, SCHED_MIXED, 16384, 0);
    write_experiment(a, &cfg);
    cfg.wl.users = 2;
    write_experiment(b, &cfg);
    /* b's interference run beside a's baseline: what a reused --out used to leave. */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/interference' && mv '%s/interference' '%s/'", a, b, a);
    assert_int_equal(system(cmd), 0);
    report_set set;
    char err[ERR_LEN] = "";
    assert_int_equal(report_set_load(&set, a, 0, true, NULL, err), -1);
    assert_non_null(strstr(err, "not one experiment"));
    assert_non_null(strstr(err, "workload.users (4 vs 2)"));
    report_set_free(&set);
    rm_rf(a);
    rm_rf(b);
}

/* The report test_streamed_load_matches writes leaves cairo's font caches: dropped once the
 * tests are done (leak checkers report them at exit). */
static int release_caches(void **state)
{
    (void)state;
    plot_release_caches();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_streamed_load_matches),
        cmocka_unit_test(test_dropped_tokens_explained),
        cmocka_unit_test(test_mixed_runs_refused),
    };
    return cmocka_run_group_tests(tests, NULL, release_caches);
}
