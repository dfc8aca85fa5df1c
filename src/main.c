/* stallscope — subcommand dispatch only. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"run", cli_run, "the experiment over HTTP: background chats + injector, baseline, report"},
    {"serve", cli_serve, "the embedded OpenAI-compatible server with a continuous-batching engine"},
    {"sim", cli_sim, "the same engine in virtual time: instant what-ifs"},
    {"model", cli_model, "the arithmetic: prefill and decode step times from the cost model"},
    {"report", cli_report, "recompute the summary and report from a run's artifacts"},
    {"calibrate", cli_calibrate, "measure this CPU or a server (--target): a --hardware profile"},
    {"sweep", cli_sweep, "the experiment over one or two varied parameters, one report"},
    {"tune", cli_tune, "the scheduler setting that meets your SLOs: searched, explained, verified"},
    {"metrics", cli_metrics, "the figures --fail-if and --slo take: ids, units, meanings"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: stallscope <command> [options]\n\n"
                 "Reproduce and measure long-prompt interference in LLM serving.\n\n"
                 "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\n'stallscope help <command>' (or '<command> --help') for each command's "
                 "options; 'stallscope --version'.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("stallscope %s\n", STALLSCOPE_VERSION);
        return CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "help") == 0 && argc >= 3) { /* help CMD: CMD --help */
        char *help_argv[] = {"--help", NULL};
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
            if (strcmp(argv[2], commands[i].name) == 0)
                return commands[i].fn(1, help_argv);
        fprintf(stderr, "stallscope: no command '%s' to help with\n", argv[2]);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 2, argv + 2);
    /* The list comes from the table, so a new command is never missing from it. */
    fprintf(stderr, "stallscope: unknown command '%s' (", argv[1]);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(stderr, "%s%s", i ? ", " : "", commands[i].name);
    fprintf(stderr, ")\n");
    return CLI_EXIT_USAGE;
}
