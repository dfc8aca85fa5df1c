/* experiment/pair: the run pair through the simulator runner (the baseline's p50 the
 * interference run's reference, the artifacts, in memory or on disk), a runner that stops
 * early, and runs whose requests mostly failed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "common/err.h"
#include "common/tokenlog.h"
#include "experiment/config.h"
#include "experiment/config_json.h"
#include "experiment/pair.h"
#include "experiment/runner.h"

/* The pair: the baseline's p50 is the interference run's reference, the artifacts land, and
 * an in-memory pair (the report's prediction) writes nothing. */
static void test_run_pair(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    experiment_config c;
    experiment_defaults(&c, EXPERIMENT_SIM);
    c.wl.users = 4;
    c.wl.duration_ns = 6000000000LL;
    c.wl.inject_at_ns = 1000000000LL;
    c.wl.inject_every_ns = 2000000000LL;
    assert_int_equal(experiment_resolve(&c, err), 0);
    experiment_runner sim;
    assert_int_equal(experiment_runner_sim(&sim, err), 0);

    experiment_pair mem;
    experiment_io quiet = {0};
    assert_int_equal(experiment_run_pair(&c, &sim, &quiet, &mem, err), 0);
    assert_true(mem.complete && mem.have_baseline && mem.have_interference);
    assert_int_equal(mem.baseline.n_injections, 0);
    assert_int_equal(mem.interference.n_injections, 3);
    /* The default threshold: 5 x the baseline's p50. */
    assert_float_equal(mem.interference.stalls.threshold_ms, 5 * mem.baseline.itl_ms.p50, 1e-9);
    /* Each injection's spike is the cost model's step for it. */
    assert_float_equal(mem.interference.itl_ms.max / experiment_model_spike_ms(&c, 8000), 1.0,
                       0.02);

    char dir[] = "/tmp/test_pair_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *argv[] = {"--users", "4"};
    experiment_io io = {.out_dir = dir, .argc = 2, .argv = argv};
    experiment_pair disk;
    assert_int_equal(experiment_run_pair(&c, &sim, &io, &disk, err), 0);
    /* Same configuration, same numbers: on disk or in memory. */
    assert_memory_equal(&disk.interference.itl_ms, &mem.interference.itl_ms,
                        sizeof mem.interference.itl_ms);
    static const char *const files[] = {"comparison.json", "baseline/config.json",
                                        "baseline/summary.json", "baseline/tokens.csv",
                                        "interference/steps.csv", "interference/config.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[256];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (stat(path, &st) != 0)
            fail_msg("%s missing", path);
    }
    experiment_config back;
    experiment_meta meta;
    char path[256];
    snprintf(path, sizeof path, "%s/baseline/config.json", dir);
    assert_int_equal(experiment_config_read(path, &back, &meta, err), 0);
    assert_false(back.wl.inject); /* the baseline's own workload: injector off */
    assert_true(meta.complete);
    assert_string_equal(meta.label, "baseline");
    experiment_meta_free(&meta);

    /* --no-baseline: the interference run alone, its own p50 the reference. */
    c.no_baseline = true;
    experiment_pair alone;
    assert_int_equal(experiment_run_pair(&c, &sim, &quiet, &alone, err), 0);
    assert_false(alone.have_baseline);
    assert_float_equal(alone.interference.stalls.threshold_ms, 5 * alone.interference.itl_ms.p50,
                       1e-9);
    experiment_pair_free(&alone);

    /* --no-inject: no injector to compare against, so the one run is the traffic alone
     * (issue 28, point 9: it was labelled interference), in OUT/traffic/. */
    c.no_baseline = false;
    c.wl.no_inject = true;
    char dir2[] = "/tmp/test_pair_XXXXXX";
    assert_non_null(mkdtemp(dir2));
    experiment_io io2 = {.out_dir = dir2, .argc = 2, .argv = argv};
    experiment_pair traffic;
    assert_int_equal(experiment_run_pair(&c, &sim, &io2, &traffic, err), 0);
    assert_false(traffic.have_baseline);
    assert_true(traffic.have_interference);
    assert_string_equal(traffic.interference.label, EXPERIMENT_RUN_TRAFFIC);
    assert_int_equal(traffic.interference.n_injections, 0);
    snprintf(path, sizeof path, "%s/traffic/config.json", dir2);
    assert_int_equal(experiment_config_read(path, &back, &meta, err), 0);
    assert_string_equal(meta.label, "traffic");
    experiment_meta_free(&meta);
    snprintf(path, sizeof path, "%s/interference", dir2);
    struct stat none;
    assert_int_not_equal(stat(path, &none), 0);
    experiment_pair_free(&traffic);
    experiment_pair_free(&mem);
    experiment_pair_free(&disk);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", dir, dir2);
    assert_int_equal(system(cmd), 0);
}

/* A runner that stops early: the pair says which run and why, and goes no further than an
 * incomplete baseline. */
static int cut_run(void *impl, const experiment_phase *ph, tokenlog *log, experiment_meta *meta,
                   char *err)
{
    (void)impl, (void)log;
    meta->complete = false;
    return err_set(err, "the %s server went away", ph->label), 0;
}

/* The simulator's defaults with `users` users for 1 s, resolved. */
static void one_second_config(experiment_config *c, int users)
{
    char err[ERR_LEN] = "";
    experiment_defaults(c, EXPERIMENT_SIM);
    c->wl.users = users;
    c->wl.duration_ns = 1000000000LL;
    assert_int_equal(experiment_resolve(c, err), 0);
}

static void test_pair_incomplete(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    experiment_config c;
    one_second_config(&c, 2);
    experiment_runner cut = {.impl = NULL, .name = "cut", .run = cut_run, .destroy = NULL};
    experiment_io io = {0};
    experiment_pair p;
    assert_int_equal(experiment_run_pair(&c, &cut, &io, &p, err), 0);
    assert_false(p.complete);
    assert_true(p.have_baseline);
    assert_false(p.have_interference);
    assert_non_null(strstr(p.why, "the baseline run stopped early: the baseline server went away"));
    experiment_pair_free(&p);
}

/* A runner whose runs go to their end with *(int *)impl of their 4 requests failed: two
 * with a redirect, the rest timed out. */
static int failing_run(void *impl, const experiment_phase *ph, tokenlog *log,
                       experiment_meta *meta, char *err)
{
    (void)ph, (void)err;
    const int failed = *(const int *)impl;
    for (int i = 0; i < 4; i++) {
        tokenlog_request r = {.request = i, .user = i, .kind = TOKENLOG_BG, .t_plan_ns = 0,
                              .t_send_ns = 0, .t_first_ns = -1, .t_end_ns = 1000000};
        if (i < 2 && i < failed)
            snprintf(r.error, sizeof r.error, "HTTP 301: the target redirects to http://h/v2; "
                                              "use that URL");
        else if (i < failed)
            snprintf(r.error, sizeof r.error, "timeout: no bytes for 1.0 s");
        else
            r.completion_tokens = 1;
        if (tokenlog_add_request(log, &r, NULL) != 0)
            return -1;
    }
    meta->complete = true;
    return 0;
}

/* A run that went to its end with most of its requests failed is no run to compare: the
 * pair stops at a failed baseline, says why (the most common error), and config.json and
 * summary.json say "complete": false, "failed": true. Fewer failures: complete. */
static void test_pair_failed(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    experiment_config c;
    one_second_config(&c, 4);
    int failed = 3;
    experiment_runner runner = {.impl = &failed, .name = "failing", .run = failing_run};
    char dir[] = "/tmp/test_pair_failed_XXXXXX";
    assert_non_null(mkdtemp(dir));
    experiment_io io = {.out_dir = dir};
    experiment_pair p;
    assert_int_equal(experiment_run_pair(&c, &runner, &io, &p, err), 0);
    assert_false(p.complete);
    assert_true(p.have_baseline);
    assert_false(p.have_interference);
    assert_string_equal(p.why, "the baseline run failed: 3 of 4 requests failed; the most "
                               "common error (2): HTTP 301: the target redirects to "
                               "http://h/v2; use that URL");
    assert_true(p.baseline.failed);
    assert_false(p.baseline.complete);
    experiment_config back;
    experiment_meta meta;
    char path[256];
    snprintf(path, sizeof path, "%s/baseline/config.json", dir);
    assert_int_equal(experiment_config_read(path, &back, &meta, err), 0);
    assert_false(meta.complete);
    experiment_meta_free(&meta);
    snprintf(path, sizeof path, "%s/baseline/summary.json", dir);
    json_t *summary = json_load_file(path, 0, NULL);
    assert_non_null(summary);
    assert_true(json_is_true(json_object_get(summary, "failed")));
    assert_true(json_is_false(json_object_get(summary, "complete")));
    json_decref(summary);
    experiment_pair_free(&p);

    /* The interference run alone, half failed: failed too (at least half). */
    c.no_baseline = true;
    failed = 2;
    io.out_dir = NULL;
    assert_int_equal(experiment_run_pair(&c, &runner, &io, &p, err), 0);
    assert_false(p.complete);
    assert_true(p.have_interference);
    assert_non_null(strstr(p.why, "the interference run failed: 2 of 4 requests failed"));
    experiment_pair_free(&p);
    /* One of four: the run stands, its error counted. */
    failed = 1;
    assert_int_equal(experiment_run_pair(&c, &runner, &io, &p, err), 0);
    assert_true(p.complete);
    assert_false(p.interference.failed);
    assert_int_equal(p.interference.errors, 1);
    experiment_pair_free(&p);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_pair),
        cmocka_unit_test(test_pair_incomplete),
        cmocka_unit_test(test_pair_failed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
