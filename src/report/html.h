/* html — the report people open: OUT/report.html, self-contained (inline SVG, inline CSS,
 * no script, no network), with the verdict, the tables, the plots (also written as
 * OUT/plots/<name>.{png,svg}), the measured run beside the cost model's prediction for the
 * same workload, the configuration and links to the CSVs. Built from what load.h read back
 * from disk, so `sim`, `run`, `sweep` and `report DIR` write the same report for the same
 * files.
 *
 *   html_write_run_report    one directory of runs (baseline/, interference/ ...) with the
 *                            cost model's prediction beside it (predict.h)
 *   html_write_sweep_report  a sweep (html_sweep.h) */
#ifndef STALLSCOPE_HTML_H
#define STALLSCOPE_HTML_H
#include <stdbool.h>

#include "analysis/analysis.h"
#include "report/load.h"

typedef struct html_options {
    bool predict; /* run the cost model for the same workload (default true) */
} html_options;

/* OUT/report.html and OUT/plots/ for a loaded set (logs kept). 0, or -1 with err. */
int html_write_run_report(const report_set *set, const html_options *opt, char *err);

#endif
