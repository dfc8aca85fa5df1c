/* html — the report people open: OUT/report.html, self-contained (inline SVG, inline CSS,
 * no script, no network), with the verdict, the tables, the plots (also written as
 * OUT/plots/<name>.{png,svg}), the measured run beside the cost model's prediction for the
 * same workload, the configuration and links to the CSVs.
 *
 * Everything is rebuilt from the artifacts on disk (token logs, config.json, sweep.json),
 * so `sim`, `run`, `sweep` and `report DIR` write the same report for the same files.
 *
 *   html_set    the runs of one directory (baseline/, interference/ ...), summarized by the
 *               one analysis, the baseline first so its p50 sets every stall threshold.
 *   html_sweep  a sweep: OUT/sweep.json and one html_set per point (OUT/point-k/).
 *   html_predict  config.json -> the simulator, in process: what the cost model predicts
 *               for that workload on the run's hardware profile, and on the reference (an
 *               H100 SXM running Llama 3.1 8B). */
#ifndef STALLSCOPE_HTML_H
#define STALLSCOPE_HTML_H
#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "analysis/analysis.h"
#include "common/tokenlog.h"
#include "engine/cost.h"
#include "engine/sched.h"
#include "workload/workload.h"

#define HTML_MAX_RUNS 256
#define HTML_MAX_AXES 2

typedef struct html_run {
    char dir[4096];
    char label[64];
    char engine[128];
    char target[256];
    analysis_options opt;
    tokenlog log;
    analysis_summary summary;
    json_t *config; /* config.json, NULL when absent or unreadable */
    bool summarized;
} html_run;

typedef struct html_set {
    char root[4096];
    html_run *runs; /* (n_runs) sorted by directory name */
    int n_runs, cap_runs;
    int baseline, interference; /* indices, -1 when absent */
} html_set;

/* Load the runs under root (root itself when it holds tokens.csv or requests.csv, else
 * its subdirectories that do) and summarize them; threshold_ms 0 is the default rule.
 * keep_logs false frees each token log once summarized (sweeps). Warnings about a bad
 * config.json go to warn (may be NULL). 0, or -1 with err; html_set_free either way. */
int html_set_load(html_set *set, const char *root, double threshold_ms, bool keep_logs,
                  FILE *warn, char *err);
void html_set_free(html_set *set);
/* The run to report as "interference": that label, else the only non-baseline run. */
const html_run *html_set_main(const html_set *set);

typedef struct html_options {
    bool predict; /* run the cost model for the same workload (default true) */
} html_options;

/* OUT/report.html and OUT/plots/ for a loaded set (logs kept). 0, or -1 with err. */
int html_write_run_report(const html_set *set, const html_options *opt, char *err);

/* ---- sweeps ------------------------------------------------------------------------- */

typedef struct html_sweep_point {
    char label[64];                   /* point-1 */
    char dir[4096];
    char values[HTML_MAX_AXES][64];   /* each axis' value as typed: "8k", "10s", "chunked" */
    char status[16];                  /* "ok", "refused", "failed" */
    char reason[256];                 /* why refused or failed */
    html_set set;                     /* its runs (summaries only), when status is ok */
    bool loaded;
    double model_spike_ms;            /* the cost model's spike for its config, 0 unknown */
} html_sweep_point;

typedef struct html_sweep {
    char dir[4096];
    char axes[HTML_MAX_AXES][48]; /* option names: "prompt-tokens", "policy" ... */
    int n_axes;
    char mode[16];                /* "sim" or "run" */
    html_sweep_point *points;
    int n_points;
    json_t *json;                 /* sweep.json as read */
} html_sweep;

/* 1 when dir holds a sweep.json. */
bool html_is_sweep(const char *dir);
/* Read DIR/sweep.json and load every point that ran. 0, or -1 with err. */
int html_sweep_load(html_sweep *sw, const char *dir, double threshold_ms, FILE *warn, char *err);
void html_sweep_free(html_sweep *sw);
/* One row per point: axis values, p50, p99, p99.9, max, spike ratio, stalls, the
 * injections' TTFT, and the max gap's step from the previous point on the same line. */
void html_sweep_table_print(FILE *out, const html_sweep *sw);
/* The points with their metrics, as sweep.json's "results" (new reference). */
json_t *html_sweep_results_json(const html_sweep *sw);
/* Refresh DIR/sweep.json's "results" and write DIR/sweep.csv (one row per point). */
int html_sweep_write_results(const html_sweep *sw, char *err);
/* OUT/report.html and OUT/plots/ for a sweep. 0, or -1 with err. */
int html_write_sweep_report(const html_sweep *sw, const html_options *opt, char *err);

/* ---- the cost model's prediction ------------------------------------------------------- */

/* The simulator's configuration from a run's config.json: workload, cost (the run's
 * hardware profile), scheduler. -1 with err when a section is missing or unusable. */
int html_config_workload(const json_t *config, workload_config *wl, char *err);
int html_config_cost(const json_t *config, cost_params *cost, char *err);
int html_config_sched(const json_t *config, const cost_params *cost, sched_config *sched,
                      char *err);
/* The reference profile: an H100 SXM running Llama 3.1 8B, catalog figures, no overhead. */
int html_reference_cost(cost_params *cost, char *err);

typedef struct html_prediction {
    bool ok;
    char profile[192]; /* "h100-sxm llama-3.1-8b mixed/16384" */
    char why[512];     /* when !ok: why there is no prediction */
    analysis_summary baseline, interference;
} html_prediction;

/* Run the simulator in process for config's workload on the run's profile (reference
 * false) or on the reference profile (true). Fills out->why and returns 0 when the config
 * cannot be predicted (a remote target, a CPU engine); -1 only on a hard failure. */
int html_predict(const json_t *config, bool reference, html_prediction *out, char *err);
void html_prediction_free(html_prediction *p);

/* The spike the cost model predicts for one injection of prompt_tokens, in ms: the
 * longest step that carries it beside one decode per background user. Under chunked
 * prefill (sched given, policy chunked) the prompt goes in chunks of the budget left by
 * the decodes, and the longest chunk step counts; otherwise it is one step. */
double html_model_spike_ms(const cost_params *cost, const workload_config *wl,
                           const sched_config *sched, int prompt_tokens);

#endif
