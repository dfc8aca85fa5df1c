/* sweep — a sweep's figures in text: the cells every sweep table shows (terminal and HTML),
 * the terminal table, and the results files (sweep.json's "results", sweep.csv). */
#ifndef STALLSCOPE_REPORT_SWEEP_H
#define STALLSCOPE_REPORT_SWEEP_H
#include <stdio.h>

#include "report/load.h"

/* A sweep: one row per point (axis values, p50, p99, p99.9, max, spike ratio, stalls, the
 * typical spike, the injections' TTFT, the step from the previous point and the model's). */
#define REPORT_SWEEP_COLS 13
void report_sweep_cells(const report_sweep_point *pt, char cells[REPORT_SWEEP_COLS][32]);
void report_sweep_table_print(FILE *out, const report_sweep *sw);
/* Refresh DIR/sweep.json's "results" and write DIR/sweep.csv (one row per point). */
int report_sweep_write_results(const report_sweep *sw, char *err);

#endif
