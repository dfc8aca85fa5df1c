/* stallscope run — the experiment over HTTP: background chats plus the injector against an
 * OpenAI-compatible server (the embedded one, a fresh child per run, unless --target), a
 * baseline run with the injector off, then the interference run; artifacts, the
 * side-by-side table, the verdict. */
#include <stdio.h>

#include "cli/cli.h"
#include "common/err.h"
#include "experiment/config.h"
#include "experiment/options.h"
#include "experiment/pair.h"
#include "experiment/runner.h"
#include "experiment/server_flags.h"
#include "experiment/shard.h"
#include "report/report.h"

typedef struct run_flags {
    bool print_flags;
} run_flags;

static const opts_spec run_specs[] = {
    OPTS_FLAG("print-server-flags",
              "print vLLM, SGLang, llama.cpp and TGI flags for one-step and chunked prefill, then exit",
              run_flags, print_flags),
};

typedef struct run_long {
    int64_t log_events_max;
} run_long;

static const opts_spec long_specs[] = {
    OPTS_INT64("log-events-max", "N",
               "hold at most N token events in memory (default 5M); past it each event leaves "
               "memory once written, tokens.csv and requests.csv as written during the run are "
               "its record (their own request ids) and the analysis streams them",
               run_long, log_events_max, 1, INT64_MAX),
};

static const char HELP[] =
    "Reproduce long-prompt interference over HTTP: background streaming chats (closed\n"
    "loop) plus an injector of long prompts (open loop, absolute schedule) against an\n"
    "OpenAI-compatible server, every token stamped as it is read. Runs a baseline\n"
    "(injector off) then the interference run; writes OUT/<run>/{tokens,requests,steps}.csv,\n"
    "summary.json, config.json, fidelity.json and OUT/comparison.json, then prints the\n"
    "table and the verdict. Without --target it starts the embedded server (a fresh one\n"
    "per run) with the engine and scheduler flags below; default: the lesson, one-step\n"
    "prefill on the real CPU engine (model 'small'); --engine emulate --gpu h100-sxm\n"
    "--model llama-3.1-8b for the lesson's GPU numbers. Default OUT: out/run.\n"
    "Real traffic: --request-rate R (open loop, each request a stream of its own) or\n"
    "--trace FILE (Azure, BurstGPT, Mooncake or plain JSONL) replace the closed users\n"
    "unless --users is given too; --preset chat|summarization; --no-inject drops the\n"
    "injector (docs/guide/traces.md). Exit status: 0 done, 1 a run stopped early or failed\n"
    "(half of its requests or more failed: the reason first; docs/reference/run.md, \"Errors\"),\n"
    "2 bad input, 99 a --fail-if rule held.";

int cli_run(int argc, char **argv)
{
    char err[ERR_LEN];
    experiment_config cfg;
    experiment_defaults(&cfg, EXPERIMENT_CPU);
    experiment_secrets secrets = {0};
    cli_engine_choice engine = {.engine = EXPERIMENT_CPU};
    cli_output out = {0};
    run_flags flags = {false};
    cli_gate gate = {0};
    if (cli_config_args(&argc, &argv, err) != 0)
        return cli_usage_error("run", err);
    run_long longrun = {.log_events_max = EXPERIMENT_LOG_EVENTS_MAX_DEFAULT};
    if (experiment_preset(&cfg, argc, argv, err) != 0)
        return cli_usage_error("run", err);
    opts_group groups[] = {
        experiment_workload_group(&cfg),
        experiment_client_group(&cfg),
        experiment_shard_group(&cfg),
        experiment_secrets_group(&secrets),
        cli_engine_group(&engine),
        experiment_device_group(&cfg),
        experiment_sched_group(&cfg),
        experiment_analysis_group(&cfg),
        cli_output_group(&out, "out/run"),
        cli_gate_group(&gate),
        {"server flags", run_specs, OPTS_COUNT(run_specs), &flags},
        {"long runs", long_specs, OPTS_COUNT(long_specs), &longrun},
    };
    if (opts_show_help(stdout, argc, argv, "stallscope run [options]", HELP, groups,
                       OPTS_COUNT(groups)))
        return CLI_EXIT_OK;
    if (opts_parse(argc, argv, groups, OPTS_COUNT(groups), NULL, 0, NULL, err) != 0 ||
        cli_gate_check(&gate, err) != 0)
        return cli_usage_error("run", err);
    experiment_secrets_from_env(&secrets);
    cfg.engine = cfg.client.target[0] ? EXPERIMENT_REMOTE : engine.engine;
    if (experiment_resolve(&cfg, err) != 0)
        return cli_usage_error("run", err);
    if (flags.print_flags) {
        experiment_print_server_guide(stdout, &cfg);
        return CLI_EXIT_OK;
    }
    if (experiment_check(&cfg, err) != 0 || cli_output_claim(&out, "run", err) != 0)
        return cli_usage_error("run", err);
    cli_warn_no_injection("run", &cfg);

    experiment_runner runner;
    if (experiment_runner_http(&runner, &secrets, err) != 0) {
        fprintf(stderr, "stallscope run: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    experiment_io io = {.out_dir = out.out, .argc = argc, .argv = argv, .notes = stderr,
                        .quiet = out.json, .interrupted = cli_catch_interrupts(),
                        .log_events_max = longrun.log_events_max};
    experiment_pair pair;
    int status = CLI_EXIT_FAIL;
    if (experiment_run_pair(&cfg, &runner, &io, &pair, err) != 0) {
        fprintf(stderr, "stallscope run: %s\n", err);
    } else if (!pair.complete && !pair.have_interference) {
        fprintf(stderr, "stallscope run: %s\n", pair.why);
    } else if (report_finish_pair(out.out, &pair, out.json, !out.no_report, err) != 0) {
        fprintf(stderr, "stallscope run: %s\n", err);
    } else if (!pair.complete) {
        fprintf(stderr, "stallscope run: %s\nstallscope run: incomplete: the artifacts in %s hold "
                        "every token received, summary.json says \"complete\": false\n",
                pair.why, out.out);
    } else {
        status = cli_gate_finish(&gate, &cfg, &pair.interference, out.out, CLI_EXIT_OK,
                                 out.json ? stderr : stdout);
    }
    experiment_pair_free(&pair);
    experiment_runner_free(&runner);
    return status;
}
