/* attribution — internal to analysis: the causes of one run's stalls (analysis.h,
 * "causes"), computed from its timeline once the stall threshold is known. */
#ifndef STALLSCOPE_ANALYSIS_ATTRIBUTION_H
#define STALLSCOPE_ANALYSIS_ATTRIBUTION_H
#include "analysis/analysis.h"
#include "analysis/timeline.h"

/* The background requests that received a token, and how many of them saw a gap over
 * 100 ms and over 1 s: the denominators of the rates. */
typedef struct analysis_request_counts {
    int64_t requests, stalled_100ms, stalled_1s;
} analysis_request_counts;

/* Fill out->attribution and the causes and culprits of out->stall_list, whose stalls hold
 * t_ns, gap_ns, request and user (by request then time; the rest zero). log: the requests
 * and the steps (its events are not read). out->duration_s set already. 0, or -1 with err;
 * what it allocated is freed by analysis_summary_free either way. */
int analysis_attribute(const tokenlog *log, const analysis_request_counts *counts,
                       double threshold_ms, analysis_summary *out, char *err);

#endif
