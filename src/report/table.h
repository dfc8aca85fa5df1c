/* table — the terminal tables and the words people quote: the side-by-side table of a run
 * pair and its one-paragraph verdict, and the number formats every table shares. */
#ifndef STALLSCOPE_REPORT_TABLE_H
#define STALLSCOPE_REPORT_TABLE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "analysis/analysis.h"
#include "analysis/metric.h"

/* Side-by-side table: metric | baseline | interference | change; without a baseline (NULL)
 * the run's column alone. Rows: figures of the metric table (analysis/metric.h), by their
 * labels: p50, p90, p99, p99.9, max gap; stalls (count, causes, aligned fraction); spike
 * ratio; injections' TTFT p50/max; background TTFT p50/p99; the standard metrics and
 * throughputs; errors. A run without injections has no aligned fraction nor injection
 * TTFT rows. */
void report_table_print(FILE *out, const analysis_summary *baseline,
                        const analysis_summary *interference);
/* One paragraph, e.g. "4/4 injections each stalled 32/32 users; max gap 152 ms = 15x p50;
 * p99 unchanged (+0.4 %); p99.9 +38 %." Written into buf. A shard's opens by saying it is
 * one shard of N and how to merge them. */
void report_verdict(char *buf, size_t size, const analysis_summary *baseline,
                    const analysis_summary *interference);

/* What a run's users figure counts, as a word: "users" (closed-loop users), or "streams"
 * when the workload had open-loop requests, each a stream of its own. */
const char *report_users_word(const analysis_summary *s);

/* Milliseconds at the precision that suits the magnitude: "4.78", "14.6", "152". */
void report_format_ms(char *buf, size_t size, double ms);
/* A figure as the tables print it, by its unit: ms as above, a count "128", a share
 * "1.46 %", a number "66.3". */
void report_format_metric(char *buf, size_t size, metric_unit unit, double v);
/* Display width of UTF-8 text: code points, not bytes, or "×" and "—" would shift every
 * column after them. */
int report_display_width(const char *s);
/* s padded with blanks to width columns, on the left when right_align. */
void report_print_padded(FILE *out, const char *s, int width, bool right_align);

#endif
