/* report — what people read, built from the artifacts on disk: the side-by-side terminal
 * table and the verdict, a sweep's table and results files, report.html with its plots.
 *
 *   report.c      the entry points below: after a run pair, after a sweep, `report DIR`
 *   html_sweep.c  a sweep's report.html       html.c     a run's report.html (html.h)
 *   predict.c     the cost model beside a measured run (the experiment's simulator)
 *   plot*.c       the charts (plot.h; drawn by plot_draw.c, rendered by plot_render.c)
 *   table.c       the terminal table and the verdict (table.h)
 *   html_tune.c   tune's page (html_tune.h)   tune_table.c  tune's words (tune_table.h)
 *   html_page.c   what every page shares (html_page.h)
 *   sweep.c       a sweep's cells, table and results files (sweep.h)
 *   load.c        runs and sweeps back from disk (load.h)
 *   merge.c       shards into one run, the cross-shard figures (merge.h)
 * Each file has its own header, and the includes only run down:
 *   report -> html_sweep -> html -> {predict, plot_charts -> plot, sweep -> table,
 *                                    merge -> {load, table}, load}
 *   html_tune -> {html_page -> plot, tune_table};  plot_draw -> plot_axis -> plot
 *   -> analysis, experiment. */
#ifndef STALLSCOPE_REPORT_H
#define STALLSCOPE_REPORT_H
#include <stdbool.h>
#include <stdio.h>

#include "experiment/pair.h"
#include "report/merge.h"

/* ---- entry points ---------------------------------------------------------------------- */

/* After experiment_run_pair wrote OUT/: OUT/report.html and OUT/plots/ (when html), then
 * the table and the verdict on stdout, or comparison.json itself with json. */
int report_finish_pair(const char *out_dir, const experiment_pair *pair, bool json, bool html,
                char *err);
/* After experiment_sweep_run wrote OUT/sweep.json and the points: the results (sweep.json's
 * "results", sweep.csv), OUT/report.html (when html), and the table on stdout, or
 * sweep.json with json. Stalls are counted above threshold_ms (0: the default rule). */
int report_finish_sweep(const char *out_dir, double threshold_ms, bool json, bool html, char *err);
/* `stallscope report DIR`: recompute every summary.json (and comparison.json) from the token
 * logs, rebuild the report, print the tables (or JSON). A directory without a readable log
 * is bad input: -2 with err; a failure to write is -1 with err; 1 with err when all was
 * reported but a run failed (analysis_summary.failed: most of its requests failed).
 * REPORT_LISTED when DIR holds no run of its own but run and sweep directories (out/ after
 * the README's tour): each is named, with what it holds and its `stallscope report DIR/x`
 * line (or as JSON: {"dir", "runs": [{"dir", "holds"}]}), and nothing is rebuilt. */
#define REPORT_LISTED 2
int report_rebuild_dir(const char *dir, double threshold_ms, bool json, bool html, char *err);
/* `stallscope report --merge DIR...`: merge the shards into opt->out (merge.h), then rebuild
 * its report as report_rebuild_dir does. *complete: whether every shard was merged, whole.
 * -2 with err on input that cannot be merged, -1 with err on a failure. */
int report_merge_dirs(const report_merge_options *opt, double threshold_ms, bool json, bool html,
                      bool *complete, char *err);

#endif
