/* artifacts — how a run (sim or live) lands on disk and on the terminal, in one place:
 * OUT/<label>/{tokens,requests,steps}.csv, summary.json, config.json; OUT/comparison.json;
 * the side-by-side table and the verdict. */
#ifndef STALLSCOPE_ARTIFACTS_H
#define STALLSCOPE_ARTIFACTS_H
#include <stdbool.h>

#include <jansson.h>

#include "analysis/analysis.h"
#include "common/tokenlog.h"

/* Write log + config (borrowed) + the summary into OUT/<label>/ (created). The summary is
 * computed here with opt (label/engine/... from opt). 0, or -1 with err. */
int artifacts_write_run(const char *out_dir, const tokenlog *log, const analysis_options *opt,
                        json_t *config, analysis_summary *summary_out, char *err);

/* Write OUT/comparison.json; print the table and the verdict to stdout, or, with json,
 * comparison.json itself. baseline may be NULL. */
int artifacts_finish(const char *out_dir, const analysis_summary *baseline,
                     const analysis_summary *interference, bool json, char *err);

/* mkdir -p */
int artifacts_mkdirs(const char *path, char *err);

#endif
