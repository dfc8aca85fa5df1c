/* Placeholder until the model command lands. */
#include <stdio.h>

#include "cli/cli.h"

int cli_model(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "stallscope model: not built yet\n");
    return CLI_EXIT_FAIL;
}
