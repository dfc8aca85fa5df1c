/* report — what people read, built from the artifacts on disk: the side-by-side terminal
 * table and the verdict, a sweep's table and results files, report.html with its plots.
 *
 *   report.c   the entry points below: after a run pair, after a sweep, `report DIR`
 *   html*.c    report.html (html.h)        plot*.c  the charts (plot.h)
 *   table.c    the terminal table          sweep.c  a sweep's cells, table, results
 *   load.c     runs and sweeps back from disk (load.h)
 * Layers inside: report.c -> html -> {load, plot, table, sweep} -> analysis. */
#ifndef STALLSCOPE_REPORT_H
#define STALLSCOPE_REPORT_H
#include <stdbool.h>
#include <stdio.h>

#include "analysis/analysis.h"
#include "experiment/experiment.h"
#include "report/load.h"

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
 * is bad input: -2 with err; a failure to write is -1 with err. */
int report_rebuild_dir(const char *dir, double threshold_ms, bool json, bool html, char *err);

/* ---- terminal tables ------------------------------------------------------------------- */

/* Side-by-side table: metric | baseline | interference | change. baseline may be NULL.
 * Rows: p50, p90, p99, p99.9, max gap; stalls (count, aligned fraction); spike ratio;
 * injections' TTFT p50/max; background TTFT p50/p99. */
void report_table_print(FILE *out, const analysis_summary *baseline,
                        const analysis_summary *interference);
/* One paragraph, e.g. "4/4 injections each stalled 32/32 users; max gap 152 ms = 15x p50;
 * p99 unchanged (+0.4 %); p99.9 +38 %." Written into buf. */
void report_verdict(char *buf, size_t size, const analysis_summary *baseline,
                    const analysis_summary *interference);

/* A sweep: one row per point (axis values, p50, p99, p99.9, max, spike ratio, stalls, the
 * typical spike, the injections' TTFT, the step from the previous point and the model's). */
#define REPORT_SWEEP_COLS 11
void report_sweep_cells(const report_sweep_point *pt, char cells[REPORT_SWEEP_COLS][32]);
void report_sweep_table_print(FILE *out, const report_sweep *sw);
/* Refresh DIR/sweep.json's "results" and write DIR/sweep.csv (one row per point). */
int report_sweep_write_results(const report_sweep *sw, char *err);

/* Milliseconds at the precision that suits the magnitude: "4.78", "14.6", "152". */
void report_format_ms(char *buf, size_t size, double ms);
/* Display width of UTF-8 text: code points, not bytes, or "×" and "—" would shift every
 * column after them. */
int report_display_width(const char *s);
/* s padded with blanks to width columns, on the left when right_align. */
void report_print_padded(FILE *out, const char *s, int width, bool right_align);

#endif
