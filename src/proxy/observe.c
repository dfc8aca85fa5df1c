/* observe — see observe.h. (Being written.) */
#include "proxy/observe.h"

void pobs_config_default(pobs_config *cfg)
{
    cfg->stall_factor = 5;
    cfg->stall_abs_ns = 0;
    cfg->window_gaps = 4096;
    cfg->min_gaps = 32;
    cfg->max_windows = 65536;
}
