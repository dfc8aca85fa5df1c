/* artifacts — how a run (sim or live) lands on disk and on the terminal, in one place:
 * OUT/<label>/{tokens,requests,steps}.csv, summary.json, config.json; OUT/comparison.json;
 * the side-by-side table and the verdict. */
#ifndef STALLSCOPE_ARTIFACTS_H
#define STALLSCOPE_ARTIFACTS_H
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "analysis/analysis.h"
#include "common/tokenlog.h"

/* Write log + config (borrowed) + the summary into OUT/<label>/ (created). The summary is
 * computed here with opt (label/engine/... from opt). 0, or -1 with err. */
int artifacts_write_run(const char *out_dir, const tokenlog *log, const analysis_options *opt,
                        json_t *config, analysis_summary *summary_out, char *err);

/* Write OUT/comparison.json and the report (OUT/report.html, OUT/plots/); print the table
 * and the verdict to stdout, or, with json, comparison.json itself. baseline may be NULL.
 * Same as artifacts_finish_report(..., report = true, ...). */
int artifacts_finish(const char *out_dir, const analysis_summary *baseline,
                     const analysis_summary *interference, bool json, char *err);
/* artifacts_finish, with the report optional (--no-report). */
int artifacts_finish_report(const char *out_dir, const analysis_summary *baseline,
                            const analysis_summary *interference, bool json, bool report,
                            char *err);
/* Write comparison.json alone: nothing printed (sweep points). */
int artifacts_write_comparison(const char *out_dir, const analysis_summary *baseline,
                               const analysis_summary *interference, char *err);

/* Build OUT/report.html and OUT/plots/ from the artifacts under out_dir: a sweep
 * (sweep.json, whose results and sweep.csv are refreshed too) or a run directory. Stalls
 * are counted above threshold_ms (0: 5 x the baseline's p50), so pass the threshold the
 * summaries in hand were computed with. 0, or -1 with err. */
int artifacts_report(const char *out_dir, double threshold_ms, char *err);

/* mkdir -p */
int artifacts_mkdirs(const char *path, char *err);
/* Write data to path beside (path.tmp) and rename, so a reader never sees half a file.
 * 0, or -1 with err. */
int artifacts_write_atomic(const char *path, const char *data, size_t len, char *err);

#endif
