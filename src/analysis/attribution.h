/* attribution — internal to analysis: the causes of one run's stalls (analysis.h,
 * "causes"), computed from its timeline once the stall threshold is known. */
#ifndef STALLSCOPE_ANALYSIS_ATTRIBUTION_H
#define STALLSCOPE_ANALYSIS_ATTRIBUTION_H
#include "analysis/analysis.h"
#include "analysis/timeline.h"

/* Fill out->attribution and out->stall_list (out->duration_s set already). 0, or -1 with
 * err; what it allocated is freed by analysis_summary_free either way. */
int analysis_attribute(const tokenlog *log, const analysis_timeline *tl, double threshold_ms,
                       analysis_summary *out, char *err);

#endif
