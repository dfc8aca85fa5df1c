/* Commands not built yet: each says so plainly instead of pretending. Removed as the
 * commands land (serve: issue 3, run: issue 4). */
#include <stdio.h>

#include "cli/cli.h"

