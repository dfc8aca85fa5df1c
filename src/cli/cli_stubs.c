/* Commands not built yet: each says so plainly instead of pretending. Removed as the
 * commands land (serve: issue 3, run: issue 4). */
#include <stdio.h>

#include "cli/cli.h"

int cli_serve(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "stallscope serve: not built yet\n");
    return CLI_EXIT_FAIL;
}

int cli_run(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "stallscope run: not built yet\n");
    return CLI_EXIT_FAIL;
}
