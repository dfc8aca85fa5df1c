/* tune_table — `stallscope tune` in words, for the terminal and the page: the front, the
 * choice and why, why the other points fail (a compact summary, or every point), the
 * chosen setting's server flags, and predicted vs measured for the verified candidates. */
#ifndef STALLSCOPE_REPORT_TUNE_TABLE_H
#define STALLSCOPE_REPORT_TUNE_TABLE_H
#include <stdbool.h>
#include <stdio.h>

#include "tune/tune.h"

/* The whole answer to out; all: every point, not the summary of the failing ones. */
void tune_table_print(FILE *out, const tune_config *tc, const tune_result *res, bool all);
/* Only the verified candidates: predicted vs measured with the relative error of each
 * figure, and whether the live run met the SLOs. */
void tune_table_print_verify(FILE *out, const tune_config *tc, const tune_result *res);
/* The answer in one sentence: "chunked/2048/32: the most output throughput (2,870 tok/s) of
 * 40 settings that meet every SLO; ITL p99.9 12.3 ms, TTFT p99 250 ms" or, with none, the
 * closest setting and the SLO that binds. */
void tune_table_verdict(const tune_config *tc, const tune_result *res, char *buf, size_t size);
/* For each point that is not the choice, grouped by its worst SLO (or "cannot serve"): how
 * many, the least and the most broken. One line per group, into out with indent. */
/* --disaggregate: one line per setup (one instance, each P:D split), the best setting of each
 * that meets every SLO, per GPU first; a header line first. */
void tune_table_print_setups(FILE *out, const tune_config *tc, const tune_result *res);
void tune_table_print_failures(FILE *out, const char *indent, const tune_config *tc,
                               const tune_result *res);
/* The front's rows as the tables show them: one per distinct prediction (same_as < 0),
 * most output throughput first, then the lower ITL p99.9. Indices into out (sized
 * res->n_points); returns how many. */
int tune_table_front_rows(const tune_result *res, int *out);
/* How many servable points share p's figures (p's own same_as group, p included). */
int tune_table_same_count(const tune_result *res, int p);
/* (predicted - measured) / measured as "+4.2 %", "—" when measured is 0. */
void tune_table_rel_error(double predicted, double measured, char *buf, size_t size);

#endif
