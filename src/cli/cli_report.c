/* Placeholder until the report command lands. */
#include <stdio.h>

#include "cli/cli.h"

int cli_report(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "stallscope report: not built yet\n");
    return CLI_EXIT_FAIL;
}
