/* stallscope sim — the experiment in virtual time: baseline and interference through the
 * real scheduler and the cost model, artifacts and the side-by-side table in milliseconds. */
#include <stdio.h>
#include <string.h>

#include "analysis/analysis.h"
#include "cli/cli.h"
#include "cli/cli_sim.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/units.h"
#include "report/artifacts.h"
#include "sim/sim.h"

typedef struct sim_output_cfg {
    char out[1024];
    bool no_baseline;
    bool json;
    bool no_report;
    double threshold_ms;
} sim_output_cfg;

static int out_dir(void *c, const char *v, char *err)
{
    sim_output_cfg *o = c;
    if (!*v || strlen(v) >= sizeof o->out)
        return err_set(err, "'%s' is empty or too long", v);
    strcpy(o->out, v);
    return 0;
}
static int out_no_baseline(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((sim_output_cfg *)c)->no_baseline = true;
    return 0;
}
static int out_json(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((sim_output_cfg *)c)->json = true;
    return 0;
}
static int out_no_report(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((sim_output_cfg *)c)->no_report = true;
    return 0;
}
static int out_threshold(void *c, const char *v, char *err)
{
    int64_t ns;
    if (units_parse_duration_ns(v, &ns, err) != 0)
        return -1;
    if (ns <= 0)
        return err_set(err, "'%s' must be positive", v);
    ((sim_output_cfg *)c)->threshold_ms = (double)ns / 1e6;
    return 0;
}

static const opts_spec output_specs[] = {
    {"out", "DIR", "artifacts directory (default out/sim)", out_dir},
    {"no-baseline", NULL, "skip the baseline run (injector off)", out_no_baseline},
    {"json", NULL, "print comparison.json instead of the table", out_json},
    {"no-report", NULL, "skip OUT/report.html and OUT/plots/ (rebuild later: stallscope report)",
     out_no_report},
    {"stall-threshold", "DUR", "a stall is a gap above this (default 5 x baseline p50)",
     out_threshold},
};

int cli_sim_resolve(const cli_engine_cfg *eng, cli_sched_cfg *sch, const cli_workload_cfg *wl,
                    sim_config *cfg, char *err)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->wl = wl->wl;
    cfg->wl.inject = true;
    if (cli_engine_resolve(eng, &cfg->cost, err) != 0 ||
        cli_sched_resolve(sch, &cfg->cost, eng->gpu_memory_utilization, err) != 0)
        return -1;
    cfg->sched = sch->sched;
    return 0;
}

void cli_sim_engine_name(const sim_config *cfg, char *buf, size_t size)
{
    snprintf(buf, size, "sim %s %s %s/%d", cfg->cost.gpu.name, cfg->cost.arch.name,
             sched_policy_name(cfg->sched.policy), cfg->sched.max_num_batched_tokens);
}

static int sim_one(const char *dir, const char *label, const sim_config *cfg, const char *engine,
                   double threshold_ms, double reference_p50_ms, int argc, char **argv,
                   FILE *progress, analysis_summary *summary, char *err)
{
    tokenlog log;
    tokenlog_init(&log);
    sim_stats stats;
    int rc = -1;
    json_t *config = NULL;
    if (sim_run(cfg, &log, &stats, err) != 0)
        goto done;
    config = cli_config_to_json(label, engine, "", &cfg->wl, &cfg->cost, &cfg->sched, argc, argv);
    analysis_options opt = {.label = label, .engine = engine, .target = "",
                            .duration_s = (double)cfg->wl.duration_ns / 1e9,
                            .users = cfg->wl.users, .threshold_ms = threshold_ms,
                            .reference_p50_ms = reference_p50_ms, .complete = true};
    rc = artifacts_write_run(dir, &log, &opt, config, summary, err);
    if (rc == 0 && progress)
        fprintf(progress,
                "sim %-12s %lld steps, %lld token events, %lld requests, %lld preemptions\n", label,
                (long long)stats.steps, (long long)stats.token_events, (long long)stats.requests,
                (long long)stats.preemptions);
done:
    json_decref(config);
    tokenlog_free(&log);
    return rc;
}

int cli_sim_experiment(const char *dir, const sim_config *cfg, const char *engine,
                       bool no_baseline, double threshold_ms, int argc, char **argv,
                       FILE *progress, analysis_summary *baseline,
                       analysis_summary *interference, char *err)
{
    double reference_p50 = 0;
    if (!no_baseline) {
        sim_config base = *cfg;
        base.wl.inject = false;
        if (sim_one(dir, "baseline", &base, engine, threshold_ms, 0, argc, argv, progress,
                    baseline, err) != 0)
            return -1;
        reference_p50 = baseline->itl_ms.p50;
    }
    return sim_one(dir, "interference", cfg, engine, threshold_ms, reference_p50, argc, argv,
                   progress, interference, err);
}

int cli_sim(int argc, char **argv)
{
    char err[ERR_LEN];
    cli_engine_cfg eng;
    cli_sched_cfg sch;
    cli_workload_cfg wl;
    sim_output_cfg out = {.out = "out/sim"};
    cli_engine_defaults(&eng);
    cli_sched_defaults(&sch);
    if (cli_workload_defaults(&wl, argc, argv, err) != 0)
        return cli_usage_error("sim", err);
    opts_group groups[] = {
        cli_workload_group(&wl),
        cli_engine_group(&eng),
        cli_sched_group(&sch),
        {"output", output_specs, (int)(sizeof output_specs / sizeof output_specs[0]), &out},
    };
    int n_groups = (int)(sizeof groups / sizeof groups[0]);
    if (opts_wants_help(argc, argv)) {
        opts_print_help(stdout, "stallscope sim [options]",
                        "Run the experiment in virtual time: the workload drives the real scheduler\n"
                        "and the roofline cost model, no network and no sleeping. Writes a baseline\n"
                        "run (injector off) and an interference run, prints them side by side and\n"
                        "writes OUT/report.html (plots in OUT/plots/).\n"
                        "Defaults: --preset lesson on an H100 SXM with Llama 3.1 8B, one-step prefill\n"
                        "(--policy mixed --max-num-batched-tokens 16384).",
                        groups, n_groups);
        return CLI_EXIT_OK;
    }
    if (opts_parse(argc, argv, groups, n_groups, NULL, 0, NULL, err) != 0)
        return cli_usage_error("sim", err);

    sim_config cfg;
    if (cli_sim_resolve(&eng, &sch, &wl, &cfg, err) != 0)
        return cli_usage_error("sim", err);
    /* Refuse what can never run before writing anything. */
    if (sim_check(&cfg, err) != 0)
        return cli_usage_error("sim", err);

    char engine[128];
    cli_sim_engine_name(&cfg, engine, sizeof engine);

    analysis_summary baseline, interference;
    memset(&baseline, 0, sizeof baseline);
    memset(&interference, 0, sizeof interference);
    int status = CLI_EXIT_FAIL;
    if (cli_sim_experiment(out.out, &cfg, engine, out.no_baseline, out.threshold_ms, argc, argv,
                           out.json ? NULL : stdout, &baseline, &interference, err) != 0)
        goto done;
    if (artifacts_finish_report(out.out, out.no_baseline ? NULL : &baseline, &interference,
                                out.json, !out.no_report, err) != 0)
        goto done;
    status = CLI_EXIT_OK;
done:
    if (status != CLI_EXIT_OK)
        fprintf(stderr, "stallscope sim: %s\n", err);
    analysis_summary_free(&baseline);
    analysis_summary_free(&interference);
    return status;
}
