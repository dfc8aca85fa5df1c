/* stallscope metrics — the figures stallscope reports and all their names, from the metric
 * table (analysis/metric.h): what --fail-if and --slo take, or docs/reference/metrics.md. */
#include <stdbool.h>
#include <stdio.h>

#include "analysis/metric.h"
#include "cli/cli.h"
#include "common/err.h"

typedef struct metrics_args {
    bool markdown;
} metrics_args;

static const opts_spec specs[] = {
    OPTS_FLAG("markdown", "print docs/reference/metrics.md: every name of every figure",
              metrics_args, markdown),
};

int cli_metrics(int argc, char **argv)
{
    metrics_args args = {0};
    char err[ERR_LEN];
    opts_group groups[] = {{"output", specs, OPTS_COUNT(specs), &args}};
    if (opts_show_help(stdout, argc, argv, "stallscope metrics [--markdown]",
                       "List the figures stallscope reports: the ids --fail-if (run, sim,\n"
                       "report) and tune --slo take, with their units and meanings. With\n"
                       "--markdown, the whole reference (ids, summary.json paths, vLLM keys,\n"
                       "table labels): docs/reference/metrics.md is this output.",
                       groups, OPTS_COUNT(groups)))
        return CLI_EXIT_OK;
    if (opts_parse(argc, argv, groups, OPTS_COUNT(groups), NULL, 0, NULL, err) != 0)
        return cli_usage_error("metrics", err);
    if (args.markdown)
        metric_print_markdown(stdout);
    else
        metric_print_list(stdout);
    return CLI_EXIT_OK;
}
