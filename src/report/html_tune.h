/* html_tune — `stallscope tune`'s page, OUT/tune.html: the front as a chart drawn through
 * plot.h, inlined and also written as OUT/plots/tune_front.{png,svg} (every servable
 * setting's output throughput against its ITL p99.9, the front ringed, the chosen point
 * labelled, the SLO's limit drawn), the verdict, the front's table, why the others fail, the
 * server flags, and predicted vs measured when --verify ran. Self-contained: no script, no
 * network. */
#ifndef STALLSCOPE_REPORT_HTML_TUNE_H
#define STALLSCOPE_REPORT_HTML_TUNE_H
#include "tune/tune.h"

/* DIR/tune.html, written atomically. 0, or -1 with err. */
int html_tune_write(const char *dir, const tune_config *tc, const tune_result *res, char *err);

#endif
