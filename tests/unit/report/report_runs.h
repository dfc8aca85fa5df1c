/* report_runs — the runs the report's tests read (test_html, test_load, test_predict,
 * test_html_sweep): a small experiment (4 users, 6 s, 3 injections) configured on an engine
 * and written to disk by the one experiment (the tokens from the simulator), a run as the
 * report holds it once loaded, and the files' helpers. Include after <cmocka.h>. */
#ifndef STALLSCOPE_TEST_REPORT_RUNS_H
#define STALLSCOPE_TEST_REPORT_RUNS_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "experiment/config.h"
#include "experiment/pair.h"
#include "experiment/runner.h"
#include "report/load.h"

static inline char *slurp(const char *path)
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

static inline bool exists(const char *dir, const char *name)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

/* A small experiment: 4 users, 6 s, 3 injections, on the engine named (its artifacts
 * written as that engine's run would leave them; the tokens come from the simulator). */
static inline void small_config(experiment_config *cfg, experiment_engine engine,
                                int prompt_tokens, sched_policy policy, int budget,
                                int64_t overhead_ns)
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
static inline void write_experiment(const char *out, const experiment_config *cfg)
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

static inline void rm_rf(const char *dir)
{
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* A run as the report holds it after loading: just its configuration. */
static inline report_run loaded(const experiment_config *cfg)
{
    report_run r;
    memset(&r, 0, sizeof r);
    r.has_config = true;
    r.cfg = *cfg;
    return r;
}

#endif
