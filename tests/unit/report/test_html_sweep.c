/* report/html_sweep: a sweep's results (sweep.json read back: report/sweep.h) and its
 * page, linking each point's own report. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "experiment/config.h"
#include "report/html_sweep.h"
#include "report/load.h"
#include "report/plot.h"
#include "report/sweep.h"

#include "report_runs.h"

static void write_sweep_json(const char *dir, const char *const *labels, const char *const *values,
                             const char *const *status, int n)
{
    json_t *root = json_object(), *points = json_array(), *axes = json_array();
    json_array_append_new(axes, json_string("prompt-tokens"));
    for (int i = 0; i < n; i++) {
        json_t *p = json_object(), *v = json_array();
        json_array_append_new(v, json_string(values[i]));
        json_object_set_new(p, "label", json_string(labels[i]));
        json_object_set_new(p, "values", v);
        json_object_set_new(p, "status", json_string(status[i]));
        json_object_set_new(p, "reason", json_string(strcmp(status[i], "ok") ? "too long" : ""));
        json_array_append_new(points, p);
    }
    json_object_set_new(root, "mode", json_string("sim"));
    json_object_set_new(root, "axes", axes);
    json_object_set_new(root, "points", points);
    char path[4200];
    snprintf(path, sizeof path, "%s/sweep.json", dir);
    assert_int_equal(json_dump_file(root, path, 0), 0);
    json_decref(root);
}

static void test_sweep(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_html_sweep_XXXXXX";
    assert_non_null(mkdtemp(dir));
    int prompts[] = {2000, 4000};
    for (int i = 0; i < 2; i++) {
        experiment_config cfg;
        small_config(&cfg, EXPERIMENT_SIM, prompts[i], SCHED_MIXED, 16384, 0);
        char point[4200];
        snprintf(point, sizeof point, "%s/point-%d", dir, i + 1);
        write_experiment(point, &cfg);
    }
    const char *labels[] = {"point-1", "point-2", "point-3"};
    const char *values[] = {"2k", "4k", "1M"};
    const char *status[] = {"ok", "ok", "refused"};
    write_sweep_json(dir, labels, values, status, 3);
    assert_true(report_is_sweep(dir));

    report_sweep sw;
    char err[ERR_LEN] = "";
    if (report_sweep_load(&sw, dir, 0, stderr, err) != 0)
        fail_msg("report_sweep_load: %s", err);
    assert_int_equal(sw.n_points, 3);
    assert_true(sw.points[0].loaded && sw.points[1].loaded && !sw.points[2].loaded);
    assert_int_equal(report_sweep_write_results(&sw, err), 0);
    assert_true(exists(dir, "sweep.csv"));
    char path[4200];
    snprintf(path, sizeof path, "%s/sweep.json", dir);
    json_t *written = json_load_file(path, 0, NULL);
    json_t *results = json_object_get(written, "results");
    assert_int_equal(json_array_size(results), 3);
    json_t *p2 = json_array_get(results, 1);
    double step = json_real_value(json_object_get(p2, "spike_step"));
    double model_step = json_real_value(json_object_get(p2, "model_step"));
    /* Measured and modeled steps agree: the simulator runs the cost model. */
    assert_true(step > 1.9);
    assert_float_equal(step / model_step, 1.0, 0.02);
    assert_string_equal(json_string_value(json_object_get(json_array_get(results, 2), "status")),
                        "refused");
    json_decref(written);

    html_options opt = {.predict = true};
    if (html_write_sweep_report(&sw, &opt, err) != 0)
        fail_msg("html_write_sweep_report: %s", err);
    plot_release_caches();
    snprintf(path, sizeof path, "%s/report.html", dir);
    char *doc = slurp(path);
    assert_non_null(strstr(doc, "<figure id=\"fig-spike_vs_prompt\">"));
    assert_non_null(strstr(doc, "<figure id=\"fig-percentiles\">"));
    assert_null(strstr(doc, "fig-tradeoff"));
    assert_non_null(strstr(doc, "refused: too long"));
    assert_null(strstr(doc, "<script"));
    /* The points' TTFT is the injected prompt's (issue 28, point 8). */
    assert_non_null(strstr(doc, "injected prompt's TTFT p50 "));
    assert_null(strstr(doc, ", TTFT p50"));
    free(doc);

    char *table = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&table, &len);
    report_sweep_table_print(f, &sw);
    fclose(f);
    assert_non_null(strstr(table, "point-2  4k"));
    assert_non_null(strstr(table, "refused: too long"));
    /* Issue 28, point 8: the TTFT columns are the injected prompts', and say so; each title
     * ends where its column's values end. */
    assert_non_null(strstr(table, "inj. TTFT = the injected prompts' time to first token"));
    const char *head = strstr(table, "\npoint ");
    assert_non_null(head);
    head++;
    const char *p50 = strstr(head, "  inj. TTFT p50  inj. TTFT max  ");
    assert_non_null(p50);
    const char *row = strstr(table, "\npoint-1 ");
    assert_non_null(row);
    row++;
    /* The row's character under the title's last one is a digit (TTFT p50), the next a blank. */
    const size_t end = (size_t)(p50 - head) + strlen("  inj. TTFT p50") - 1;
    assert_true(row[end] >= '0' && row[end] <= '9');
    assert_true(row[end + 1] == ' ');
    free(table);
    report_sweep_free(&sw);
    rm_rf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
