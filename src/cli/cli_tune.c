/* stallscope tune — the scheduler setting that meets the SLOs at the most throughput:
 * policy x --max-num-batched-tokens x --max-num-seqs searched in the simulator
 * (experiment/tune.c), the front, the choice and why the others fail, the setting as server
 * flags; --verify runs the top candidates live against --target, their server started per
 * candidate by --server-cmd. Writes OUT/tune.json and OUT/tune.html. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/fsio.h"
#include "experiment/config.h"
#include "experiment/options.h"
#include "experiment/pair.h"
#include "experiment/runner.h"
#include "report/html_tune.h"
#include "report/tune_table.h"
#include "tune/tune.h"

typedef struct tune_flags {
    char slo[1024];
    char policies[128];
    char budgets[512];
    char max_num_seqs[256];
    char prefix_caching[32];
    char disaggregate[256];
    char kv_link[64];
    bool all, verify;
    char server_cmd[2048];
    int64_t server_timeout_ns;
    int top;
} tune_flags;

static const opts_spec tune_specs[] = {
    OPTS_STRING("slo", "RULES",
                "what every chosen setting must meet, METRIC<VALUE comma-separated, metrics "
                "as --fail-if names them (default '" TUNE_DEFAULT_SLO "')",
                tune_flags, slo),
    OPTS_STRING("policies", "LIST", "policies to search (default mixed,chunked,prefill-first)",
                tune_flags, policies),
    OPTS_STRING("budgets", "LIST",
                "max-num-batched-tokens values to search (default 256,512,...,16384)", tune_flags,
                budgets),
    OPTS_STRING("max-num-seqs", "LIST",
                "max-num-seqs values to search (default 16,32,64,128,256)", tune_flags,
                max_num_seqs),
    OPTS_STRING("prefix-caching", "LIST",
                "prefix caching settings to search: off, on or off,on (default: the "
                "--enable-prefix-caching setting; off,on when the workload shares prefixes)",
                tune_flags, prefix_caching),
    OPTS_STRING("disaggregate", "LIST",
                "also search these prefill:decode splits (e.g. 1:1,2:1: P prefill and D decode "
                "instances, each with the searched scheduler; the simulator only); the choice "
                "is then by output tokens/s per GPU",
                tune_flags, disaggregate),
    OPTS_STRING("kv-link", "L",
                "the KV link of --disaggregate's splits: nvlink (default), pcie5, rdma-100g, "
                "rdma-400g or a bandwidth such as 25GB/s",
                tune_flags, kv_link),
    OPTS_FLAG("all", "list every setting with its figures, not a summary of the failing ones",
              tune_flags, all),
    OPTS_FLAG("verify", "run the top candidates live against --target (needs --server-cmd)",
              tune_flags, verify),
    OPTS_STRING("server-cmd", "TEMPLATE",
                "shell command starting the target's server for one candidate; {policy} "
                "{budget} {max_num_seqs} {chunked_prefill} {prefix_caching} {port} {host} "
                "{point}",
                tune_flags, server_cmd),
    OPTS_DURATION("server-timeout", "DUR",
                  "wait at most this for the server's /health (default 2m)", tune_flags,
                  server_timeout_ns, 1, 24 * 3600 * CLOCK_NS_PER_S),
    OPTS_INT("top", "K", "--verify: how many candidates, best first (default 3)", tune_flags,
             top, 1, 16),
};

static const char HELP[] =
    "Find the scheduler setting that meets your SLOs at the most output throughput: every\n"
    "policy x --max-num-batched-tokens x --max-num-seqs of the lists runs the workload in\n"
    "the simulator (virtual time, milliseconds a point). Prints the Pareto front (output\n"
    "throughput against TTFT p99 and ITL p99.9), the chosen setting and why, why the others\n"
    "fail, and the setting as vLLM, SGLang, llama.cpp and TGI flags. Writes OUT/tune.json and\n"
    "OUT/tune.html. Default OUT: out/tune. Exit 0: a setting meets every SLO (and, with\n"
    "--verify, the first candidate met them live); 1: none does (the closest is named, with\n"
    "the SLO that binds), or the live check missed; 2: bad input.\n"
    "The workload is the lesson's unless you give one (the same flags as sim); the device is\n"
    "--gpu/--model or a --hardware profile. --verify runs each candidate without a baseline.\n"
    "The search and --verify start cold (--warmup 0) unless --warmup is given. Below,\n"
    "--target is --verify's server (the one --server-cmd starts: no embedded one) and\n"
    "--no-report skips tune.html.\n"
    "Examples:\n"
    "  stallscope tune --slo 'itl.p99.9<100ms,ttft.p99<2s'\n"
    "  stallscope tune --hardware prof.json --policies chunked --budgets 512,2048,8192 --all\n"
    "  stallscope tune --users 8 --duration 6s --verify --top 2 --target http://127.0.0.1:8321 \\\n"
    "      --server-cmd 'stallscope serve --engine emulate --port {port} --policy {policy} \\\n"
    "      --max-num-batched-tokens {budget} --max-num-seqs {max_num_seqs}'";

/* The scheduler group without the flags the search owns (--policy, --max-num-batched-tokens,
 * --max-num-seqs and the chunked-prefill aliases): --max-model-len and --kv-blocks stay. */
static opts_spec sched_left[16];
static opts_group sched_group_rest(experiment_config *cfg)
{
    opts_group g = experiment_sched_group(cfg);
    int n = 0;
    for (int i = 0; i < g.n_specs && n < (int)(sizeof sched_left / sizeof sched_left[0]); i++) {
        const char *name = g.specs[i].name;
        if (strcmp(name, "policy") == 0 || strcmp(name, "max-num-batched-tokens") == 0 ||
            strcmp(name, "max-num-seqs") == 0 || strstr(name, "chunked-prefill") ||
            strcmp(name, "prefix-caching") == 0)
            continue;
        sched_left[n++] = g.specs[i];
    }
    g.specs = sched_left;
    g.n_specs = n;
    return g;
}

static int write_outputs(const char *dir, const tune_config *tc, const tune_result *res,
                         bool html, char *err)
{
    char path[1200];
    json_t *doc = tune_to_json(tc, res);
    int rc = doc ? 0 : err_set(err, "out of memory for tune.json");
    if (rc == 0)
        rc = fsio_join(path, sizeof path, dir, "tune.json", err);
    if (rc == 0)
        rc = fsio_write_json(path, doc, JSON_INDENT(2), err);
    json_decref(doc);
    if (rc == 0 && html)
        rc = html_tune_write(dir, tc, res, err);
    return rc;
}

static int tune(tune_config *tc, int argc, char **argv)
{
    char err[ERR_LEN];
    if (tune_defaults(tc, err) != 0)
        return cli_usage_error("tune", err);
    experiment_secrets secrets = {0};
    cli_output out = {0};
    tune_flags flags = {.server_timeout_ns = 120 * CLOCK_NS_PER_S, .top = 3};
    snprintf(flags.slo, sizeof flags.slo, "%s", TUNE_DEFAULT_SLO);
    if (cli_config_args(&argc, &argv, err) != 0 || experiment_preset(&tc->base, argc, argv, err) != 0)
        return cli_usage_error("tune", err);
    opts_group groups[] = {
        {"tune", tune_specs, OPTS_COUNT(tune_specs), &flags},
        experiment_workload_group(&tc->base),
        experiment_device_group(&tc->base),
        sched_group_rest(&tc->base),
        experiment_client_group(&tc->base),
        experiment_secrets_group(&secrets),
        cli_output_group(&out, "out/tune"),
    };
    if (opts_show_help(stdout, argc, argv,
                       "stallscope tune [--slo RULES] [--policies L] [--budgets L] "
                       "[--max-num-seqs L] [workload/device flags] [--verify ...]",
                       HELP, groups, OPTS_COUNT(groups)))
        return CLI_EXIT_OK;
    static const char *const searched[] = {"policy", "max-num-batched-tokens",
                                           "enable-chunked-prefill", "no-enable-chunked-prefill"};
    for (int i = 0; i < argc; i++)
        for (size_t k = 0; k < sizeof searched / sizeof searched[0]; k++) {
            const size_t n = strlen(searched[k]);
            if (strncmp(argv[i], "--", 2) == 0 && strncmp(argv[i] + 2, searched[k], n) == 0 &&
                (argv[i][2 + n] == '\0' || argv[i][2 + n] == '='))
                return cli_usage_error("tune", "tune searches the policy and the budget: give "
                                               "lists with --policies and --budgets");
        }
    if (opts_parse(argc, argv, groups, OPTS_COUNT(groups), NULL, 0, NULL, err) != 0 ||
        tune_parse_slo(flags.slo, &tc->slo, err) != 0 ||
        (flags.policies[0] && tune_parse_policies(flags.policies, tc, err) != 0) ||
        (flags.budgets[0] && tune_parse_budgets(flags.budgets, tc, err) != 0) ||
        (flags.max_num_seqs[0] && tune_parse_max_num_seqs(flags.max_num_seqs, tc, err) != 0) ||
        (flags.prefix_caching[0] &&
         tune_parse_prefix_caching(flags.prefix_caching, tc, err) != 0) ||
        (flags.disaggregate[0] &&
         tune_parse_disaggregate(flags.disaggregate, flags.kv_link, tc, err) != 0) ||
        experiment_resolve(&tc->base, err) != 0)
        return cli_usage_error("tune", err);
    if (flags.prefix_caching[0] && tc->base.prefix_caching_said)
        return cli_usage_error("tune", "--prefix-caching searches the setting: leave out "
                                       "--enable-prefix-caching / --no-enable-prefix-caching");
    tune_default_prefix_caching(tc, tc->base.prefix_caching_said);
    if (flags.kv_link[0] && !flags.disaggregate[0])
        return cli_usage_error("tune", "--kv-link is the link of --disaggregate's splits: give "
                                       "--disaggregate P:D,... too");
    experiment_secrets_from_env(&secrets);
    if (flags.verify && (!tc->base.client.target[0] || !flags.server_cmd[0]))
        return cli_usage_error("tune", "--verify starts each candidate's server with "
                                       "--server-cmd TEMPLATE and runs it at --target URL: "
                                       "give both");
    if (!flags.verify && (flags.server_cmd[0] || tc->base.client.target[0]))
        return cli_usage_error("tune", "--target and --server-cmd are for --verify");
    /* Its program and placeholders now, not after the search. */
    if (flags.verify && cli_check_server_cmd("tune", flags.server_cmd, &tc->base, err) != 0)
        return cli_usage_error("tune", err);
    if (cli_output_claim(&out, "tune", err) != 0)
        return cli_usage_error("tune", err);
    cli_warn_no_injection("tune", &tc->base);

    const volatile sig_atomic_t *interrupted = cli_catch_interrupts();
    tune_result res;
    if (tune_search(tc, &res, stderr, interrupted, err) != 0) {
        fprintf(stderr, "stallscope tune: %s\n", err);
        tune_result_free(&res);
        return CLI_EXIT_FAIL;
    }
    if (res.n_servable == 0) {
        fprintf(stderr, "stallscope tune: no setting of the search can serve this workload: "
                        "%s\n",
                res.n_points > 0 ? res.points[0].why_not : "no points");
        tune_result_free(&res);
        return CLI_EXIT_USAGE;
    }
    int status = res.choice >= 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
    if (flags.verify && res.choice >= 0) {
        experiment_runner runner;
        if (experiment_runner_http(&runner, &secrets, err) != 0) {
            fprintf(stderr, "stallscope tune: %s\n", err);
            tune_result_free(&res);
            return CLI_EXIT_FAIL;
        }
        tune_verify_options vo = {.server_cmd = flags.server_cmd,
                                  .server_timeout_ns = flags.server_timeout_ns,
                                  .top = flags.top,
                                  .runner = &runner};
        experiment_io io = {.out_dir = out.out, .argc = argc, .argv = argv, .notes = stderr,
                            .quiet = true, .interrupted = interrupted};
        const int failed = tune_verify(tc, &res, &vo, &io, err);
        experiment_runner_free(&runner);
        if (failed < 0) {
            fprintf(stderr, "stallscope tune: --verify: %s\n", err);
            status = CLI_EXIT_FAIL;
        } else if (res.n_verified == 0 || !res.verified[0].ran || !res.verified[0].meets) {
            status = CLI_EXIT_FAIL;
        }
    }
    if (write_outputs(out.out, tc, &res, !out.no_report, err) != 0) {
        fprintf(stderr, "stallscope tune: %s\n", err);
        tune_result_free(&res);
        return CLI_EXIT_FAIL;
    }
    if (out.json) {
        json_t *doc = tune_to_json(tc, &res);
        json_dumpf(doc, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(doc);
    } else {
        tune_table_print(stdout, tc, &res, flags.all);
        fprintf(stdout, "\nartifacts: %s/tune.json%s\n", out.out,
                out.no_report ? "" : ", tune.html");
    }
    if (res.choice < 0 && res.binding_slo >= 0)
        fprintf(stderr, "stallscope tune: no setting meets every SLO; %s binds\n",
                tc->slo.rule[res.binding_slo].text);
    else if (flags.verify && status != CLI_EXIT_OK)
        fprintf(stderr, "stallscope tune: the chosen setting did not meet the SLOs live (see "
                        "the verify table)\n");
    tune_result_free(&res);
    return status;
}

int cli_tune(int argc, char **argv)
{
    /* The configuration and its lists: on the heap, not the stack. */
    tune_config *tc = calloc(1, sizeof *tc);
    if (!tc) {
        fprintf(stderr, "stallscope tune: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    int status = tune(tc, argc, argv);
    free(tc);
    fflush(stdout);
    return status;
}
