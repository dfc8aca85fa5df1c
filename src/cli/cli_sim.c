/* stallscope sim — the experiment in virtual time: baseline and interference through the
 * real scheduler and the cost model, artifacts and the side-by-side table in milliseconds. */
#include <stdio.h>

#include "cli/cli.h"
#include "common/err.h"
#include "experiment/config.h"
#include "experiment/options.h"
#include "experiment/pair.h"
#include "experiment/runner.h"
#include "report/report.h"

typedef struct sim_long {
    int64_t tokens_csv_max;
} sim_long;

static const opts_spec long_specs[] = {
    OPTS_INT64("tokens-csv-max", "N",
               "keep tokens.csv only up to N token events (default 5M, ~140 MB); past it the file "
               "is dropped, summary.json says so and the analysis, streamed, is unchanged",
               sim_long, tokens_csv_max, 1, INT64_MAX),
};

int cli_sim(int argc, char **argv)
{
    sim_long longrun = {.tokens_csv_max = EXPERIMENT_TOKENS_CSV_MAX_DEFAULT};
    char err[ERR_LEN];
    experiment_config cfg;
    experiment_defaults(&cfg, EXPERIMENT_SIM);
    cli_output out = {0};
    cli_gate gate = {0};
    if (cli_config_args(&argc, &argv, err) != 0)
        return cli_usage_error("sim", err);
    if (experiment_preset(&cfg, argc, argv, err) != 0)
        return cli_usage_error("sim", err);
    opts_group groups[] = {
        experiment_workload_group(&cfg), experiment_device_group(&cfg),
        experiment_sched_group(&cfg),    experiment_disagg_group(&cfg),
        experiment_analysis_group(&cfg),
        cli_output_group(&out, "out/sim"),
        cli_gate_group(&gate),
        {"long runs", long_specs, OPTS_COUNT(long_specs), &longrun},
    };
    if (opts_show_help(stdout, argc, argv, "stallscope sim [options]",
                       "Run the experiment in virtual time: the workload drives the real scheduler\n"
                       "and the roofline cost model, no network and no sleeping. Writes a baseline\n"
                       "run (injector off) and an interference run, prints them side by side and\n"
                       "writes OUT/report.html (plots in OUT/plots/). Default OUT: out/sim.\n"
                       "Defaults: --preset lesson on an H100 SXM with Llama 3.1 8B, one-step prefill\n"
                       "(--policy mixed --max-num-batched-tokens 16384).\n"
                       "Real traffic: --request-rate R (open loop, each request a stream of its\n"
                       "own) or --trace FILE (Azure, BurstGPT, Mooncake or plain JSONL) replace the\n"
                       "closed users unless --users is given too; --preset chat|summarization;\n"
                       "--no-inject drops the injector (docs/guide/traces.md).",
                       groups, OPTS_COUNT(groups)))
        return CLI_EXIT_OK;
    /* Refuse what can never run before writing anything. */
    if (opts_parse(argc, argv, groups, OPTS_COUNT(groups), NULL, 0, NULL, err) != 0 ||
        cli_gate_check(&gate, err) != 0 || experiment_resolve(&cfg, err) != 0 ||
        experiment_check(&cfg, err) != 0 || cli_output_claim(&out, "sim", err) != 0)
        return cli_usage_error("sim", err);
    cli_warn_no_injection("sim", &cfg);

    experiment_runner runner;
    experiment_runner_sim(&runner, err);
    experiment_io io = {.out_dir = out.out, .argc = argc, .argv = argv, .notes = stdout,
                        .quiet = out.json, .tokens_csv_max_events = longrun.tokens_csv_max};
    experiment_pair pair;
    int status = CLI_EXIT_FAIL;
    if (experiment_run_pair(&cfg, &runner, &io, &pair, err) == 0 &&
        report_finish_pair(out.out, &pair, out.json, !out.no_report, err) == 0)
        status = CLI_EXIT_OK;
    if (status != CLI_EXIT_OK)
        fprintf(stderr, "stallscope sim: %s\n", err);
    else
        status = cli_gate_finish(&gate, &cfg, &pair.interference, out.out, status,
                                 out.json ? stderr : stdout);
    experiment_pair_free(&pair);
    experiment_runner_free(&runner);
    return status;
}
