/* html_tune — `stallscope tune`'s page, OUT/tune.html: the front as an inline SVG plot (ITL
 * p99.9 against output throughput, every servable setting, the front ringed, the chosen point
 * marked, the SLO's limit drawn), the verdict, the front's table, why the others fail, the
 * server flags, and predicted vs measured when --verify ran. Self-contained: no script, no
 * network. */
#ifndef STALLSCOPE_REPORT_HTML_TUNE_H
#define STALLSCOPE_REPORT_HTML_TUNE_H
#include "tune/tune.h"

/* DIR/tune.html, written atomically. 0, or -1 with err. */
int html_tune_write(const char *dir, const tune_config *tc, const tune_result *res, char *err);

#endif
