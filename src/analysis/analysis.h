/* analysis — gaps, percentiles, stalls and their attribution to injections, and the
 * comparison of two runs. One implementation for sim, run and report.
 *
 * Gaps: for each request, the time between consecutive token events it received (an
 * event carrying several tokens is one event: what the user sees). Only background
 * requests contribute ITL gaps; TTFT is send -> first event.
 * Percentiles: nearest-rank. For N sorted values and p in (0, 1], the p-quantile is the
 * value of rank ceil(p x N) (1-based); p50 of {1,2,3,4} is 2, p99.9 of 1,000 values is the
 * 999th. Always an observed value, never interpolated.
 * Stalls: a gap longer than threshold_ms (default 5 x the baseline's p50, or 5 x the run's
 * own p50 without a baseline). A stall is aligned with injection i when its open interval
 * (t_prev, t_cur) overlaps [send_i, first_token_i] (to end_i when no first token came). */
#ifndef STALLSCOPE_ANALYSIS_H
#define STALLSCOPE_ANALYSIS_H
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "common/tokenlog.h"

typedef struct analysis_dist {
    int64_t count;
    double mean, p50, p90, p99, p999, max; /* ms */
} analysis_dist;

typedef struct analysis_injection {
    double t_plan_s;
    double t_send_s;
    double ttft_ms;      /* -1 when it never produced a token */
    int prompt_tokens;
    double max_gap_ms;   /* longest background gap overlapping [send, first token] */
    double median_gap_ms; /* median of those overlapping gaps */
    int users_stalled;   /* distinct users with a stall aligned with this injection */
} analysis_injection;

typedef struct analysis_stalls {
    double threshold_ms;
    int64_t count;
    double fraction_of_gaps;
    int64_t aligned;
    double aligned_fraction;      /* aligned / count; 0 when count == 0 */
    double stalled_time_fraction; /* union of stall intervals / run duration */
} analysis_stalls;

typedef struct analysis_summary {
    char label[64];
    char engine[128];
    char target[256];
    double duration_s;
    int users;
    int64_t tokens_received; /* sum of n_tokens over all events */
    analysis_dist itl_ms;
    analysis_dist ttft_ms; /* background requests */
    analysis_stalls stalls;
    analysis_injection *injections;
    int n_injections;
    int injections_with_stalls; /* injections with users_stalled > 0 */
    double spike_ratio;         /* max gap / p50 gap */
    int64_t errors;             /* requests that ended with an error */
    int64_t protocol_violations; /* server events the client ignored (from the run's record) */
    bool complete;              /* false when the run was cut short */
} analysis_summary;

typedef struct analysis_options {
    const char *label;
    const char *engine;
    const char *target;
    double duration_s;
    int users;
    double threshold_ms; /* 0: 5 x reference_p50_ms, or 5 x own p50 when that is 0 too */
    double reference_p50_ms; /* the baseline's p50, 0 when none */
    bool complete;
    int64_t protocol_violations; /* counted by the client, passed through to the summary */
} analysis_options;

/* Nearest-rank quantile of sorted[0..n), p in (0, 1]; 0 when n == 0. */
double analysis_quantile(const double *sorted, int64_t n, double p);
/* Fill a distribution from unsorted values (sorted in place). */
void analysis_dist_from(double *values, int64_t n, analysis_dist *out);
/* The distribution of the injections' TTFTs, over those that got a token: true when at
 * least one did (false too when s is NULL or memory runs out; *out is zeroed then). */
bool analysis_injection_ttft(const analysis_summary *s, analysis_dist *out);

/* All background ITL gaps in ms, in (request, time) order; caller frees *out. */
int analysis_gaps_ms(const tokenlog *log, double **out, int64_t *n, char *err);

int analysis_summarize(const tokenlog *log, const analysis_options *opt, analysis_summary *out,
                       char *err);
void analysis_summary_free(analysis_summary *s);

/* ---- sweeps ------------------------------------------------------------------------ */

/* The spike one long prompt causes in a run: the median over its injections of the longest
 * gap each caused (robust to the odd step that also carried a background prompt); 0 when
 * no injection caused a gap. */
double analysis_typical_spike(const analysis_summary *s);

/* One point of a sweep: what it measured, and the figures the sweep quotes for it. */
typedef struct analysis_sweep_point {
    const analysis_summary *x; /* in: the interference run, NULL when the point did not run */
    const analysis_summary *b; /* in: its baseline, NULL when none */
    const char *line;          /* in: the point's values on every axis but the first: points
                                * with equal keys lie on one line along the first axis */
    double model_spike_ms;     /* in: the cost model's spike for its configuration, 0 unknown */
    analysis_dist ttft_ms;     /* out: the injections' TTFT (count 0 when none got a token) */
    double spike_ms;           /* out: analysis_typical_spike(x) */
    int prev;                  /* out: the previous point on its line that ran, -1 */
    double step, model_step;   /* out: spike / prev's spike, and the same in the cost model;
                                * 0 without prev */
} analysis_sweep_point;

/* Fill the outputs of pts[0..n) in order. */
void analysis_sweep(analysis_sweep_point *pts, int n);

/* ---- JSON ----------------------------------------------------------------------------- */

/* {count, mean, p50, p90, p99, p999, max}; a non-finite value is null. New reference. */
json_t *analysis_dist_to_json(const analysis_dist *d);

/* DESIGN.md's summary.json shape (plus "complete", "errors", "injections_with_stalls",
 * "protocol_violations"). */
json_t *analysis_summary_to_json(const analysis_summary *s);
/* comparison.json: {"baseline": {...}, "interference": {...}, "ratios": {p50, p90, p99,
 * p999, max, stall_count}} ; baseline may be NULL. */
json_t *analysis_comparison_to_json(const analysis_summary *baseline,
                                    const analysis_summary *interference);

#endif
