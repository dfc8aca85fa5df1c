/* stallscope sweep — the experiment over one or two varied parameters: each sweepable flag
 * (experiment_axes_names) may take a comma list; --rate-search K searches the request
 * rate. Every point is a whole experiment in OUT/point-k/ (experiment/sweep.c): in the simulator (default), on the embedded server (--engine
 * emulate | cpu) or against --target URL (server-side parameters need --server-cmd, or
 * --print-server-flags). Then OUT/sweep.json, OUT/sweep.csv, one table, OUT/report.html. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "experiment/config.h"
#include "experiment/options.h"
#include "experiment/pair.h"
#include "experiment/runner.h"
#include "experiment/sweep.h"
#include "report/report.h"

typedef struct sweep_flags {
    char server_cmd[2048];
    int64_t server_timeout_ns;
    bool zip, print_flags;
    int rate_search;
} sweep_flags;

static const opts_spec sweep_specs[] = {
    OPTS_STRING("server-cmd", "TEMPLATE",
                "shell command starting the target's server for each point; {policy} "
                "{max_num_batched_tokens} {chunked_prefill} {prefix_caching} {port} {host} {point}",
                sweep_flags, server_cmd),
    OPTS_DURATION("server-timeout", "DUR", "wait at most this for the server's /health (default 10m)",
                  sweep_flags, server_timeout_ns, 1, 24 * 3600 * CLOCK_NS_PER_S),
    OPTS_FLAG("zip", "vary two lists together (pairwise) instead of every combination", sweep_flags,
              zip),
    OPTS_FLAG("print-server-flags", "print the server flags each point needs and run nothing",
              sweep_flags, print_flags),
    OPTS_INT("rate-search", "K",
             "guidellm's sweep: the first point sends every --num-prompts request at once "
             "(--request-rate max), then K points at rates evenly spaced up to the throughput "
             "it reached (R/K, 2R/K ... R); needs --num-prompts",
             sweep_flags, rate_search, 1, EXPERIMENT_SWEEP_MAX_VALUES - 1),
};

/* %s: the sweepable flags (experiment_axes_names). */
static const char HELP_FORMAT[] =
    "Run the experiment (baseline + interference) once per point, varying one or two of\n"
    "%s\n"
    "(a comma list each; every combination, or pairwise with --zip), or the request rate\n"
    "up to the server's throughput (--rate-search K).\n"
    "Points run in the simulator (default), on the embedded server (--engine emulate|cpu),\n"
    "or against --target URL (server-side parameters then need --server-cmd, or\n"
    "--print-server-flags). Writes OUT/point-k/, OUT/sweep.json, OUT/sweep.csv and\n"
    "OUT/report.html; prints one table. Default OUT: out/sweep.\n"
    "Examples:\n"
    "  stallscope sweep --prompt-tokens 4k,8k,16k --lesson-flops\n"
    "  stallscope sweep --inject-every 10s,1s --inject-at 0.5s --step-overhead 5ms\n"
    "  stallscope sweep --policy chunked --max-num-batched-tokens 512,2048,8192,16384\n"
    "  stallscope sweep --num-prompts 200 --max-concurrency 1,4,16,64 --no-inject\n"
    "  stallscope sweep --num-prompts 200 --rate-search 4 --no-inject";

static int sweep(experiment_sweep *sw, int argc, char **argv)
{
    char err[ERR_LEN];
    experiment_defaults(&sw->base, EXPERIMENT_SIM);
    experiment_secrets secrets = {0};
    cli_engine_choice engine = {.engine = EXPERIMENT_SIM, .allow_sim = true};
    cli_output out = {0};
    sweep_flags flags = {.server_timeout_ns = 600 * CLOCK_NS_PER_S};
    if (cli_config_args(&argc, &argv, err) != 0)
        return cli_usage_error("sweep", err);
    if (experiment_preset(&sw->base, argc, argv, err) != 0)
        return cli_usage_error("sweep", err);
    opts_group groups[] = {
        {"sweep", sweep_specs, OPTS_COUNT(sweep_specs), &flags},
        cli_engine_group(&engine),
        experiment_workload_group(&sw->base),
        experiment_device_group(&sw->base),
        experiment_sched_group(&sw->base),
        experiment_disagg_group(&sw->base),
        experiment_client_group(&sw->base),
        experiment_secrets_group(&secrets),
        experiment_analysis_group(&sw->base),
        cli_output_group(&out, "out/sweep"),
    };
    char names[512], help[sizeof HELP_FORMAT + sizeof names];
    experiment_axes_names(names, sizeof names);
    snprintf(help, sizeof help, HELP_FORMAT, names);
    if (opts_show_help(stdout, argc, argv,
                       "stallscope sweep --PARAM A,B[,C...] [--PARAM2 X,Y...] [options]",
                       help, groups, OPTS_COUNT(groups)))
        return CLI_EXIT_OK;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest)
        return CLI_EXIT_FAIL;
    int n_rest = 0;
    int bad = experiment_axes_from_argv(argc, argv, sw->axes, &sw->n_axes, rest, &n_rest, err) != 0 ||
              opts_parse(n_rest, rest, groups, OPTS_COUNT(groups), NULL, 0, NULL, err) != 0;
    free(rest);
    if (bad)
        return cli_usage_error("sweep", err);
    experiment_secrets_from_env(&secrets);
    if (sw->base.client.target[0] && engine.given)
        return cli_usage_error("sweep", "--engine picks the embedded server; with --target the "
                                        "server is yours (drop --engine)");
    if (flags.server_cmd[0] && !sw->base.client.target[0])
        return cli_usage_error("sweep", "--server-cmd starts the server behind --target URL; "
                                        "give --target too");
    sw->base.engine = sw->base.client.target[0] ? EXPERIMENT_REMOTE : engine.engine;
    if (sw->base.disagg.prefill > 0 && sw->base.engine != EXPERIMENT_SIM)
        return cli_usage_error("sweep", "--disaggregate runs in the simulator only (drop --engine "
                                        "and --target)");
    if (sw->base.disagg.prefill == 0 && sw->base.disagg.link[0])
        return cli_usage_error("sweep", "--kv-link needs --disaggregate P:D");
    /* The searched rates replace the closed users, as --request-rate does, unless --users. */
    sw->rate_search = flags.rate_search;
    if (sw->rate_search > 0 && !opts_find(argc, argv, "users"))
        sw->base.wl.users = 0;
    snprintf(sw->server_cmd, sizeof sw->server_cmd, "%s", flags.server_cmd);
    sw->server_timeout_ns = flags.server_timeout_ns;
    sw->zip = flags.zip;
    if (experiment_sweep_plan(sw, err) != 0)
        return cli_usage_error("sweep", err);

    bool server_axes = false;
    for (int a = 0; a < sw->n_axes; a++)
        server_axes = server_axes || sw->axes[a].server_side;
    if (flags.print_flags)
        return experiment_sweep_print_flags(stdout, sw), CLI_EXIT_OK;
    if (sw->base.engine == EXPERIMENT_REMOTE && server_axes && !sw->server_cmd[0]) {
        fprintf(stderr, "stallscope sweep: each point needs its own server configuration; start "
                        "them with --server-cmd TEMPLATE, or run the points one by one with "
                        "these flags:\n");
        experiment_sweep_print_flags(stderr, sw);
        return CLI_EXIT_USAGE;
    }
    if (sw->server_cmd[0] && cli_check_server_cmd("sweep", sw->server_cmd, &sw->base, err) != 0)
        return cli_usage_error("sweep", err);

    if (cli_output_claim(&out, "sweep", err) != 0)
        return cli_usage_error("sweep", err);
    cli_warn_no_injection("sweep", &sw->base);
    experiment_runner runner;
    if ((sw->base.engine == EXPERIMENT_SIM ? experiment_runner_sim(&runner, err)
                                           : experiment_runner_http(&runner, &secrets, err)) != 0) {
        fprintf(stderr, "stallscope sweep: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    experiment_io io = {.out_dir = out.out, .argc = argc, .argv = argv, .notes = stderr,
                        .interrupted = cli_catch_interrupts()};
    int failed = experiment_sweep_run(sw, &runner, &io, err);
    experiment_runner_free(&runner);
    if (failed < 0 || report_finish_sweep(out.out, (double)sw->base.stall_threshold_ns / 1e6, out.json,
                                   !out.no_report, err) != 0) {
        fprintf(stderr, "stallscope sweep: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    if (failed)
        fprintf(stderr, "stallscope sweep: %d of %d points failed (see sweep.json)\n", failed,
                sw->n_points);
    return failed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

int cli_sweep(int argc, char **argv)
{
    /* Sixty-four points' plans: on the heap, not the stack. */
    experiment_sweep *sw = calloc(1, sizeof *sw);
    if (!sw) {
        fprintf(stderr, "stallscope sweep: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    int status = sweep(sw, argc, argv);
    free(sw);
    fflush(stdout);
    return status;
}
