/* html: the report built from artifacts on disk: self-contained, every chart inline with
 * its ids kept apart, the verdict, the links, the cost model's prediction; and a sweep's
 * results. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/err.h"
#include "experiment/experiment.h"
#include "report/html.h"
#include "report/html_page.h"
#include "report/load.h"
#include "report/plot.h"
#include "report/html_sweep.h"
#include "report/predict.h"
#include "report/sweep.h"
#include "report/table.h"

#define MARKER_STROKE "stroke:rgb(60%,0%,60%)"

static int count_in(const char *from, const char *to, const char *needle)
{
    int n = 0;
    for (const char *p = from; (p = strstr(p, needle)) != NULL && (!to || p < to); p += strlen(needle))
        n++;
    return n;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static bool exists(const char *dir, const char *name)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

/* A small experiment: 4 users, 6 s, 3 injections, on the engine named (its artifacts
 * written as that engine's run would leave them; the tokens come from the simulator). */
static void small_config(experiment_config *cfg, experiment_engine engine, int prompt_tokens,
                         sched_policy policy, int budget, int64_t overhead_ns)
{
    char err[ERR_LEN] = "";
    experiment_defaults(cfg, engine);
    cfg->wl.users = 4;
    cfg->wl.duration_ns = 6000000000LL;
    cfg->wl.inject_at_ns = 1000000000LL;
    cfg->wl.inject_every_ns = 2000000000LL;
    cfg->wl.prompt_tokens = prompt_tokens;
    cfg->sched.policy = policy;
    cfg->sched.max_num_batched_tokens = budget;
    cfg->device.step_overhead_ns = overhead_ns;
    if (experiment_resolve(cfg, err) != 0)
        fail_msg("experiment_resolve: %s", err);
}

/* OUT/baseline, OUT/interference and OUT/comparison.json through the one experiment. */
static void write_experiment(const char *out, const experiment_config *cfg)
{
    char err[ERR_LEN] = "";
    char *argv[] = {"--users", "4"};
    experiment_runner sim;
    experiment_runner_sim(&sim, err);
    experiment_io io = {.out_dir = out, .argc = 2, .argv = argv};
    experiment_pair pair;
    if (experiment_run_pair(cfg, &sim, &io, &pair, err) != 0)
        fail_msg("experiment_run_pair: %s", err);
    assert_true(pair.complete && pair.have_baseline && pair.have_interference);
    experiment_pair_free(&pair);
}

static void rm_rf(const char *dir)
{
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

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

static void test_escape_url_rel(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    html_escape(f, "<a href=\"x\">'&'</a>");
    fputc('|', f);
    html_url(f, "point 1/ü.csv");
    fclose(f);
    assert_string_equal(buf, "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;|point%201/%C3%BC.csv");
    free(buf);
    char rel[256];
    html_rel("out/sim/", "out/sim/baseline", rel, sizeof rel);
    assert_string_equal(rel, "baseline");
    html_rel("out/sim", "out/sim", rel, sizeof rel);
    assert_string_equal(rel, ".");
    html_rel("out/sim", "out/simulation/x", rel, sizeof rel);
    assert_string_equal(rel, "out/simulation/x");
}

static void test_run_report(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_html_XXXXXX";
    assert_non_null(mkdtemp(dir));
    experiment_config cfg;
    small_config(&cfg, EXPERIMENT_EMULATE, 4000, SCHED_MIXED, 16384, 1000000);
    write_experiment(dir, &cfg);

    report_set set;
    char err[ERR_LEN] = "";
    if (report_set_load(&set, dir, 0, true, stderr, err) != 0)
        fail_msg("report_set_load: %s", err);
    assert_int_equal(set.n_runs, 2);
    assert_true(set.baseline >= 0 && set.interference >= 0);
    const report_run *x = report_set_main(&set);
    assert_string_equal(x->engine, "emulate h100-sxm llama-3.1-8b mixed/16384");
    assert_string_equal(x->label, "interference");
    assert_int_equal(x->summary.n_injections, 3);
    html_options opt = {.predict = true};
    if (html_write_run_report(&set, &opt, err) != 0)
        fail_msg("html_write_run_report: %s", err);
    plot_release_caches();

    char path[4200];
    snprintf(path, sizeof path, "%s/report.html", dir);
    char *doc = slurp(path);
    assert_int_equal(strncmp(doc, "<!DOCTYPE html>", 15), 0);
    /* Self-contained: no script, nothing fetched. */
    assert_null(strstr(doc, "<script"));
    assert_null(strstr(doc, "src=\"http"));
    assert_null(strstr(doc, "href=\"http"));
    assert_null(strstr(doc, "url(http"));
    assert_null(strstr(doc, "<img"));
    assert_null(strstr(doc, "<?xml"));
    /* Every chart inline, ids per chart: no glyph id left unprefixed. */
    static const char *const figs[] = {"timeline", "percentiles", "ccdf", "steps"};
    for (int i = 0; i < 4; i++) {
        char id[64], file[64];
        snprintf(id, sizeof id, "<figure id=\"fig-%s\">", figs[i]);
        assert_non_null(strstr(doc, id));
        snprintf(id, sizeof id, "id=\"%s-glyph", figs[i]);
        assert_non_null(strstr(doc, id));
        snprintf(file, sizeof file, "plots/%s.png", figs[i]);
        assert_true(exists(dir, file));
        snprintf(file, sizeof file, "plots/%s.svg", figs[i]);
        assert_true(exists(dir, file));
    }
    assert_null(strstr(doc, "id=\"glyph"));
    assert_null(strstr(doc, "href=\"#glyph"));
    /* The timeline's markers: one per injection. */
    const char *tl = strstr(doc, "<figure id=\"fig-timeline\">");
    const char *tl_end = strstr(tl, "</figure>");
    assert_int_equal(count_in(tl, tl_end, MARKER_STROKE), 3);
    /* The verdict, as the terminal prints it. */
    char verdict[1024];
    report_verdict(verdict, sizeof verdict, &set.runs[set.baseline].summary, &x->summary);
    assert_non_null(strstr(doc, verdict));
    /* Links to the CSVs, and they exist. */
    assert_non_null(strstr(doc, "href=\"baseline/tokens.csv\""));
    assert_non_null(strstr(doc, "href=\"interference/steps.csv\""));
    assert_non_null(strstr(doc, "href=\"comparison.json\""));
    /* The prediction: same profile (emulate with 1 ms overhead) and the reference. */
    assert_non_null(strstr(doc, "model, same profile (h100-sxm llama-3.1-8b mixed/16384)"));
    assert_non_null(strstr(doc, "model, reference (h100-sxm llama-3.1-8b mixed/16384)"));
    assert_non_null(strstr(doc, "Reference, H100 + Llama 3.1 8B:"));
    /* Per injection: measured and predicted spike and the error, one row each. */
    assert_non_null(strstr(doc, "<th>measured spike (ms)</th><th>predicted spike (ms)</th><th>error</th>"));
    for (int i = 0; i < x->summary.n_injections; i++) {
        char row[64];
        snprintf(row, sizeof row, "<tr><td class=\"k\">%d (%.1f s)</td>", i + 1,
                 x->summary.injections[i].t_send_s);
        const char *at = strstr(doc, row);
        assert_non_null(at);
        const char *end = strstr(at, "</tr>");
        assert_non_null(end);
        assert_true(end - at > 8 && strncmp(end - 7, " %</td>", 7) == 0); /* its error, in % */
    }
    assert_int_equal(x->summary.n_injections, 3);
    /* What caused the stalls: every one a prefill of one of the three injections. */
    assert_non_null(strstr(doc, "<section id=\"causes\">"));
    assert_non_null(strstr(doc, "<figure id=\"fig-stall_ccdf\">"));
    assert_non_null(strstr(doc, "<figure id=\"fig-stalls_vs_prompt\">"));
    assert_non_null(strstr(doc, "href=\"interference/stalls.csv\""));
    assert_int_equal(x->summary.attribution.by_cause[ANALYSIS_CAUSE_PREFILL].stalls,
                     x->summary.stalls.count);
    assert_int_equal(x->summary.attribution.n_culprits, 3);
    /* The standard metrics: what streamed, beside the completed requests' output rate. */
    char streamed[128];
    assert_true(x->summary.streamed_throughput > 0);
    snprintf(streamed, sizeof streamed, "Streamed: <b>%.1f tokens/s</b> over every request",
             x->summary.streamed_throughput);
    assert_non_null(strstr(doc, streamed));
    /* The configuration. */
    assert_non_null(strstr(doc, "--policy mixed --max-num-batched-tokens 16384"));
    free(doc);
    report_set_free(&set);
    rm_rf(dir);
}

/* A run as the report holds it after loading: just its configuration. */
static report_run loaded(const experiment_config *cfg)
{
    report_run r;
    memset(&r, 0, sizeof r);
    r.has_config = true;
    r.cfg = *cfg;
    return r;
}

static void test_predict(void **state)
{
    (void)state;
    experiment_config cfg;
    small_config(&cfg, EXPERIMENT_SIM, 4000, SCHED_MIXED, 16384, 0);
    char err[ERR_LEN] = "";
    report_prediction p;

    /* A simulation on the reference profile: nothing to predict twice. */
    report_run run = loaded(&cfg);
    assert_int_equal(report_predict(&run, false, &p, err), 0);
    assert_false(p.ok);
    assert_non_null(strstr(p.why, "itself"));
    assert_int_equal(report_predict(&run, true, &p, err), 0);
    assert_false(p.ok);
    assert_non_null(strstr(p.why, "reference"));

    /* A remote server without --hardware: no model for it, and no H100 in its place. */
    experiment_config remote;
    experiment_defaults(&remote, EXPERIMENT_REMOTE);
    remote.wl = cfg.wl;
    snprintf(remote.client.target, sizeof remote.client.target, "http://127.0.0.1:1");
    assert_int_equal(experiment_resolve(&remote, err), 0);
    run = loaded(&remote);
    assert_int_equal(report_predict(&run, false, &p, err), 0);
    assert_false(p.ok);
    assert_non_null(strstr(p.why, "no model for it"));
    assert_int_equal(report_predict(&run, true, &p, err), 0);
    assert_false(p.ok);
    assert_non_null(strstr(p.why, "no reference"));

    /* With --hardware (a server's profile: its step model alone): that profile predicts it. */
    char profile[] = "/tmp/test_html_profile_XXXXXX";
    const int fd = mkstemp(profile);
    assert_true(fd >= 0);
    static const char server_profile[] =
        "{\"format\": \"stallscope-hardware-profile\", \"version\": 2, \"name\": \"gpu-box\", "
        "\"source\": \"target\", \"target\": \"http://127.0.0.1:1\", \"mem_bytes\": 8e10, "
        "\"step_model\": {\"model\": \"llama-3.1-8b\", \"step_ns\": 5e6, \"seq_ns\": 1e5, "
        "\"ctx_ns\": 10, \"token_ns\": 2e4, \"pair_ns\": 0.002}}";
    assert_true(write(fd, server_profile, sizeof server_profile - 1) == (ssize_t)(sizeof server_profile - 1));
    close(fd);
    snprintf(remote.device.hardware, sizeof remote.device.hardware, "%s", profile);
    remote.device.model[0] = '\0';
    run = loaded(&remote);
    assert_int_equal(report_predict(&run, false, &p, err), 0);
    assert_true(p.ok);
    assert_non_null(strstr(p.profile, "gpu-box llama-3.1-8b"));
    assert_int_equal(p.pair.interference.n_injections, 3);
    assert_string_equal(p.caveat, ""); /* the run's own profile: nothing to excuse */
    /* its spike: the fitted 4,000-token step beside 4 decodes (contexts from the workload) */
    cost_gpu gpu;
    cost_arch arch;
    assert_int_equal(cost_gpu_from_profile(profile, &gpu, err), 0);
    assert_int_equal(cost_arch_find("llama-3.1-8b", &arch, err), 0);
    experiment_config fitted = cfg;
    cost_params_init(&fitted.cost, &gpu, &arch);
    assert_true(cost_fit_applies(&fitted.cost));
    assert_float_equal(p.pair.interference.itl_ms.max / experiment_model_spike_ms(&fitted, 4000),
                       1.0, 0.03);
    report_prediction_free(&p);
    unlink(profile);

    /* The cpu engine without --hardware: the catalog's nominal cpu predicts it, and the
     * prediction says that profile is another machine's and how to calibrate this one. */
    experiment_config cpu;
    experiment_defaults(&cpu, EXPERIMENT_CPU);
    cpu.wl = cfg.wl;
    assert_int_equal(experiment_resolve(&cpu, err), 0);
    run = loaded(&cpu);
    assert_int_equal(report_predict(&run, false, &p, err), 0);
    assert_true(p.ok);
    assert_non_null(strstr(p.caveat, "nominal cpu profile"));
    assert_non_null(strstr(p.caveat, "stallscope calibrate --out hw.json"));
    report_prediction_free(&p);

    /* No configuration: says why, predicts nothing. */
    memset(&run, 0, sizeof run);
    snprintf(run.config_why, sizeof run.config_why, "no config.json beside the token log");
    assert_int_equal(report_predict(&run, true, &p, err), 0);
    assert_false(p.ok);
    assert_non_null(strstr(p.why, "no config.json"));
}

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
    free(doc);

    char *table = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&table, &len);
    report_sweep_table_print(f, &sw);
    fclose(f);
    assert_non_null(strstr(table, "point-2  4k"));
    assert_non_null(strstr(table, "refused: too long"));
    free(table);
    report_sweep_free(&sw);
    rm_rf(dir);
}

/* A run with no gaps (every answer one token event) is a valid run: its report has empty
 * plots and says why (issue 15: qsort(NULL, 0) stopped it under UBSan). */
static void test_empty_run(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_html_empty_XXXXXX";
    assert_non_null(mkdtemp(dir));
    experiment_config cfg;
    small_config(&cfg, EXPERIMENT_SIM, 4000, SCHED_MIXED, 16384, 0);
    cfg.wl.answer_len.a = cfg.wl.answer_len.b = 1;
    cfg.wl.inject_max_tokens = 1;
    write_experiment(dir, &cfg);
    report_set set;
    char err[ERR_LEN] = "";
    if (report_set_load(&set, dir, 0, true, stderr, err) != 0)
        fail_msg("report_set_load: %s", err);
    assert_int_equal(report_set_main(&set)->summary.itl_ms.count, 0);
    html_options opt = {.predict = true};
    if (html_write_run_report(&set, &opt, err) != 0)
        fail_msg("html_write_run_report: %s", err);
    plot_release_caches();
    char path[4200];
    snprintf(path, sizeof path, "%s/report.html", dir);
    char *doc = slurp(path);
    assert_non_null(strstr(doc, "no gaps to measure"));
    assert_non_null(strstr(doc, "<figure id=\"fig-ccdf\">"));
    free(doc);
    report_set_free(&set);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape_url_rel),
        cmocka_unit_test(test_streamed_load_matches),
        cmocka_unit_test(test_dropped_tokens_explained),
        cmocka_unit_test(test_run_report),
        cmocka_unit_test(test_predict),
        cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_empty_run),
        cmocka_unit_test(test_mixed_runs_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
