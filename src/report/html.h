/* html — the report people open: OUT/report.html, self-contained (inline SVG, inline CSS,
 * no script, no network), with the verdict, the tables, the plots (also written as
 * OUT/plots/<name>.{png,svg}), the measured run beside the cost model's prediction for the
 * same workload, the configuration and links to the CSVs. Built from what load.h read back
 * from disk, so `sim`, `run`, `sweep` and `report DIR` write the same report for the same
 * files.
 *
 *   html_write_run_report    one directory of runs (baseline/, interference/ ...)
 *   html_write_sweep_report  a sweep: OUT/sweep.json and its points (OUT/point-k/)
 *   html_predict             the run's configuration through the experiment's simulator
 *                            runner, in process: what the cost model predicts for that
 *                            workload on the run's own profile, and on the reference (an H100
 *                            SXM running Llama 3.1 8B). */
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
/* OUT/report.html and OUT/plots/ for a sweep. 0, or -1 with err. */
int html_write_sweep_report(const report_sweep *sw, const html_options *opt, char *err);

#define HTML_REFERENCE_GPU EXPERIMENT_DEFAULT_GPU
#define HTML_REFERENCE_MODEL EXPERIMENT_DEFAULT_MODEL

typedef struct html_prediction {
    bool ok;
    char profile[192]; /* "h100-sxm llama-3.1-8b mixed/16384" */
    char why[512];     /* when !ok: why there is no prediction */
    experiment_pair pair;
} html_prediction;

/* The simulator, in process, for the run's workload on its own profile (reference false)
 * or on the reference profile (true). Fills out->why and returns 0 when the run cannot be
 * predicted (a remote target, a CPU engine, no readable config.json); -1 only on a hard
 * failure. */
int html_predict(const report_run *run, bool reference, html_prediction *out, char *err);
void html_prediction_free(html_prediction *p);

#endif
