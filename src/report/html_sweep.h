/* html_sweep — a sweep's report.html: what changed along the first axis, the points' table,
 * spike vs prompt length with the cost model's line, the chunked-prefill trade-off, the
 * tail of every point. */
#ifndef STALLSCOPE_REPORT_HTML_SWEEP_H
#define STALLSCOPE_REPORT_HTML_SWEEP_H
#include "report/html.h"
#include "report/load.h"

/* OUT/report.html and OUT/plots/ for a sweep. 0, or -1 with err. */
int html_write_sweep_report(const report_sweep *sw, const html_options *opt, char *err);

#endif
