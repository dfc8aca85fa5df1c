/* stallscope — subcommand dispatch only. */
#include <ctype.h>
#include <stdbool.h>
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
    {"proxy", cli_proxy, "watch production: a sidecar that times every token and names the stalls"},
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

/* Commands with a second form whose options differ, documented as a section of their own. */
static const struct {
    const char *command;
    const char *form; /* the arguments before --help-markdown, and the section's name */
} forms[] = {
    {"calibrate", "--target URL"},
};

/* The markdown of one form: "## stallscope NAME" and the command's own --help-markdown. */
static int help_form(size_t i, const char *form)
{
    char target[] = "--target", url[] = "URL", markdown[] = "--help-markdown";
    char *argv_plain[] = {markdown, NULL};
    char *argv_target[] = {target, url, markdown, NULL};
    const bool targeted = form != NULL;
    printf("\n## stallscope %s%s%s\n\n", commands[i].name, targeted ? " " : "",
           targeted ? form : "");
    fflush(stdout);
    int status = targeted ? commands[i].fn(3, argv_target) : commands[i].fn(1, argv_plain);
    fflush(stdout);
    return status;
}

/* The anchor Markdown renderers give the heading "stallscope TEXT": lower case, spaces as
 * '-', other punctuation dropped. */
static void print_anchor(const char *text)
{
    printf("#stallscope-");
    for (const char *c = text; *c; c++)
        if (*c == ' ')
            putchar('-');
        else if (isalnum((unsigned char)*c) || *c == '-' || *c == '_')
            putchar(tolower((unsigned char)*c));
}

/* `stallscope help --markdown`: docs/reference/cli.md, every command's options from the same
 * tables its --help prints (scripts/gen_docs.sh writes it; tests/integration/cli_doc.sh
 * fails while the file differs). Not listed in usage(): it serves the docs. */
static int help_markdown(void)
{
    printf("# Command-line reference\n\n"
           "Generated from the option tables by `stallscope help --markdown` (each command's\n"
           "`--help-markdown`, the same tables its `--help` prints): do not edit it here.\n"
           "Regenerate it with `scripts/gen_docs.sh`; `tests/integration/cli_doc.sh` fails while\n"
           "the two differ.\n\n"
           "Sizes accept `8000`, `8k`, `16k`; durations need their unit (`40s`, `500ms`); exit\n"
           "status 0 done, 1 the run failed, 2 bad input (one line on stderr), 99 a `--fail-if`\n"
           "rule held.\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        printf("- [`stallscope %s`](", commands[i].name);
        print_anchor(commands[i].name);
        printf("): %s\n", commands[i].help);
        for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++)
            if (strcmp(forms[f].command, commands[i].name) == 0) {
                char name[128];
                snprintf(name, sizeof name, "%s %s", commands[i].name, forms[f].form);
                printf("- [`stallscope %s`](", name);
                print_anchor(name);
                printf(")\n");
            }
    }
    int status = CLI_EXIT_OK;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (help_form(i, NULL) != CLI_EXIT_OK)
            status = CLI_EXIT_FAIL;
        for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++)
            if (strcmp(forms[f].command, commands[i].name) == 0 &&
                help_form(i, forms[f].form) != CLI_EXIT_OK)
                status = CLI_EXIT_FAIL;
    }
    return status;
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
    if (strcmp(argv[1], "help") == 0 && argc == 3 && strcmp(argv[2], "--markdown") == 0)
        return help_markdown();
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
