/* Placeholder until the sim command lands. */
#include <stdio.h>

#include "cli/cli.h"

int cli_sim(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "stallscope sim: not built yet\n");
    return CLI_EXIT_FAIL;
}
